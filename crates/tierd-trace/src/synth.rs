//! A small deterministic machine behind the [`Backend`] trait, for tests and for a recording
//! made without a kernel (`tierd record --synthetic`, the picture in docs/img/): a DRAM node 0
//! and a CXL node 1, processes whose pages start on node 1, a hot set per process that moves
//! over time, accesses reported as an accessed-bit scan (DAMON, tierd's default source)
//! reports them, and `move_pages` that now and then finds a page busy.

use std::collections::BTreeMap;

use tierd_engine::plan::{
    CgroupUsage, MigrationBatch, MigrationReport, MoveError, MoveOutcome, NodeUsage, SystemUsage,
};
use tierd_engine::policy::Owner;
use tierd_engine::types::{Bytes, CgroupId, Nanos, NodeId, PageKey, PageRef, SpaceId, Vpn};
use tierd_engine::{Backend, Observation, OwnerUpdate, SourceKind};

/// The machine's state.
#[derive(Debug)]
pub struct SynthBackend {
    /// Node capacities, node 0 fast.
    pub capacity: [Bytes; 2],
    /// Pages per process.
    pub pages: u64,
    /// Processes (pids 100, 101, ...).
    pub processes: u32,
    placement: BTreeMap<PageKey, NodeId>,
    told_owners: bool,
    rng: u64,
    last: Nanos,
}

/// The synthetic machine never fails as a whole.
#[derive(Debug, thiserror::Error)]
pub enum Never {}

impl SynthBackend {
    /// `processes` processes of `pages` base pages each, all on node 1; node 0 holds
    /// `fast_pages` pages.
    #[must_use]
    pub fn new(processes: u32, pages: u64, fast_pages: u64) -> Self {
        SynthBackend {
            capacity: [
                Bytes(fast_pages * 4096),
                Bytes(processes.max(1) as u64 * pages * 4096 * 2),
            ],
            pages,
            processes,
            placement: BTreeMap::new(),
            told_owners: false,
            rng: 0x9e37_79b9_7f4a_7c15,
            last: Nanos(0),
        }
    }

    fn next(&mut self) -> u64 {
        // xorshift64*: deterministic, no dependency.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn node_of(&self, key: PageKey) -> NodeId {
        self.placement.get(&key).copied().unwrap_or(NodeId(1))
    }

    fn base(space: u32) -> u64 {
        // Each process's heap at its own address, like 0x5555_0000_0000 + space * 1 GiB.
        0x5_5550_0000 + u64::from(space) * 0x4_0000
    }
}

impl Backend for SynthBackend {
    type Error = Never;

    fn drain_observations(&mut self, now: Nanos, out: &mut Vec<Observation>) -> Result<(), Never> {
        let from = self.last;
        self.last = now;
        let secs = now.0 / 1_000_000_000;
        for p in 0..self.processes {
            // The hot eighth of the pages moves through the buffer every 10 s (a phase change).
            let hot = (self.pages / 8).max(1);
            let phase = (secs / 10 + u64::from(p)) % 8;
            let n = 40 + 20 * u64::from(p);
            for _ in 0..n {
                let r = self.next();
                let off = if r % 10 < 8 {
                    phase * hot + (r >> 8) % hot
                } else {
                    (r >> 8) % self.pages
                };
                let space = SpaceId(100 + p);
                let page = PageRef::base(space, Vpn(Self::base(100 + p) + off));
                let t = from.0 + (r >> 20) % (now.0 - from.0).max(1);
                out.push(Observation {
                    page,
                    page_node: self.node_of(page.key()),
                    accessing_node: None,
                    source: SourceKind::AccessedBitScan,
                    time: Nanos(t),
                    weight: 1,
                });
            }
        }
        Ok(())
    }

    fn drain_owner_updates(&mut self, out: &mut Vec<OwnerUpdate>) -> Result<(), Never> {
        if !self.told_owners {
            self.told_owners = true;
            for p in 0..self.processes {
                out.push(OwnerUpdate::Owner {
                    space: SpaceId(100 + p),
                    owner: Owner {
                        pid: 100 + p,
                        cgroup: CgroupId(1),
                    },
                });
            }
        }
        Ok(())
    }

    fn usage(&mut self, _now: Nanos) -> Result<SystemUsage, Never> {
        let on_fast = self.placement.values().filter(|n| **n == NodeId(0)).count() as u64;
        let total = u64::from(self.processes) * self.pages;
        let used = [on_fast * 4096, (total - on_fast.min(total)) * 4096];
        let mut u = SystemUsage::default();
        for (i, cap) in self.capacity.iter().enumerate() {
            u.nodes.insert(
                NodeId(u16::try_from(i).unwrap_or(0)),
                NodeUsage {
                    free: Bytes(cap.0.saturating_sub(used[i])),
                    promo_watermark: Some(Bytes(cap.0 / 50)),
                },
            );
        }
        u.cgroups.insert(
            CgroupId(1),
            CgroupUsage {
                low: Bytes(0),
                fast_usage: Bytes(used[0]),
            },
        );
        Ok(u)
    }

    fn migrate(&mut self, _now: Nanos, batch: &MigrationBatch) -> Result<MigrationReport, Never> {
        let mut outcomes = Vec::with_capacity(batch.pages.len());
        for m in &batch.pages {
            if self.next().is_multiple_of(23) {
                outcomes.push(MoveOutcome::Failed(MoveError::Busy));
            } else {
                self.placement.insert(m.page.key(), batch.target);
                outcomes.push(MoveOutcome::Moved(batch.target));
            }
        }
        Ok(MigrationReport::for_batch(batch, outcomes))
    }
}

/// Runs an engine built from `config` on a [`SynthBackend`] for `secs` seconds of virtual
/// time, one pass every `interval_ms`, recording into `writer`'s directory. Returns the
/// base pages moved.
///
/// # Errors
/// [`crate::replay::ReplayError::Config`] when the engine refuses `config`;
/// [`crate::files::FileError`] (as a string in the same variant's place) when writing fails.
pub fn record_synthetic(
    backend: &mut SynthBackend,
    config: tierd_engine::EngineConfig,
    secs: u64,
    interval_ms: u64,
    dir: &std::path::Path,
    limits: crate::files::Limits,
) -> Result<u64, String> {
    let topo = tierd_engine::topology::dram_cxl(backend.capacity[0], backend.capacity[1])
        .map_err(|e| e.to_string())?;
    let header = crate::format::Header::new(config.clone(), &topo, backend.join_pages(), 0);
    let mut engine = tierd_engine::Engine::new(config, topo).map_err(|e| e.to_string())?;
    let mut writer =
        crate::files::TraceWriter::create(dir, header, limits).map_err(|e| e.to_string())?;
    let mut bufs = tierd_engine::StepBuffers::default();
    let mut buf = Vec::new();
    let mut moved = 0;
    let interval = interval_ms.max(1);
    let mut t = 0;
    while t <= secs * 1000 {
        buf.clear();
        let now = Nanos::from_millis(t);
        let mut rec = crate::record::Recorder::pass(backend, &mut buf, now);
        let Ok(out) = tierd_engine::step(&mut engine, &mut rec, now, &mut bufs);
        moved += out.moved_pages;
        writer.append(&buf).map_err(|e| e.to_string())?;
        t += interval;
    }
    Ok(moved)
}
