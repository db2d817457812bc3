//! The daemon: the engine on a real machine (`tierd run`).
//!
//! ```text
//!  preflight ── topology (sysfs) ─▶ engine Topology; refuse one tier; warn when the kernel's
//!               own tiering (numa_balancing bit 2) or demotion would fight tierd
//!  loop, every engine interval:
//!    LinuxBackend::drain_owner_updates  scope (pids / cgroups / all) + numa_maps policies
//!    LinuxBackend::drain_observations   feeds (DAMON, idle, perf) -> accessed ranges
//!                                       -> move_pages location query -> Observations
//!    LinuxBackend::usage                node MemFree, cgroup memory.low and fast-tier usage
//!    Engine::tick -> batches -> LinuxBackend::migrate (move_pages, or only printed: dry run)
//!  every refresh: a Snapshot for /metrics and /status
//!  SIGINT/SIGTERM: the stop flag is read between passes, so the batch in flight finishes
//! ```
//!
//! Everything goes through [`tierd_engine::step`], the same loop the simulator runs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tierd_engine::plan::{CgroupUsage, NodeUsage};
use tierd_engine::policy::Owner;
use tierd_engine::topology::Topology;
use tierd_engine::types::{Bytes, CgroupId, Nanos, NodeId, PageRef, SpaceId, Vpn, PAGE_SHIFT};
use tierd_engine::{
    Backend, Engine, MigrationBatch, MigrationReport, Observation, OwnerUpdate, SourceKind,
    StepBuffers, SystemUsage,
};

use crate::config::DaemonConfig;
use crate::metrics::{
    MoverSnapshot, NodeSnapshot, ProcessSnapshot, SharedSnapshot, Snapshot, SourceSnapshot,
};
use tierd_linux::mover::{Mover, MoverConfig, MoverError};
use tierd_linux::read::cgroup::{read_proc_cgroup, unified_path, CgroupFs};
use tierd_linux::read::meminfo::read_node_meminfo;
use tierd_linux::read::numa_maps::{policy_ranges, read_vmas, Vma};
use tierd_linux::read::proc::{list_pids, read_stat, read_status, USER_HZ};
use tierd_linux::read::topology::{
    read_demotion_enabled, read_numa_balancing, read_system_topology, SystemTopology,
};
use tierd_linux::read::vmstat::{read_vmstat, Vmstat};
use tierd_linux::read::ReadError;

/// Why the daemon cannot run.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// A file the daemon needs could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The machine has nothing to tier.
    #[error("nothing to tier: {0}")]
    NothingToTier(String),
    /// The topology could not be turned into the engine's.
    #[error("topology: {0}")]
    Topology(String),
    /// The engine refused the configuration.
    #[error("engine configuration: {0}")]
    Engine(#[from] tierd_engine::ConfigError),
    /// No configured source can run here.
    #[error("no hotness source can run here: {0}")]
    NoSource(String),
    /// A hotness source failed while running.
    #[error("source {name}: {reason}")]
    Source {
        /// The source.
        name: &'static str,
        /// Why.
        reason: String,
    },
    /// The mover failed as a whole (not a per-page failure, which is counted).
    #[error(transparent)]
    Mover(#[from] MoverError),
}

/// A hotness fact in the daemon's own terms: `nr_pages` base pages from `start` of `pid` were
/// seen accessed at `time`. Feeds produce these; the backend finds each page's node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessedRange {
    /// The process.
    pub pid: u32,
    /// First page.
    pub start: Vpn,
    /// Number of base pages.
    pub nr_pages: u64,
    /// When it was observed.
    pub time: Nanos,
    /// What kind of observation it is for the engine.
    pub kind: SourceKind,
    /// The node of the CPU that made the access, when the source knows it (hardware samples).
    pub accessing_node: Option<NodeId>,
    /// For a region-based source (DAMON), the region's `nr_accesses`; 0 for sources that name
    /// single pages they saw accessed.
    pub nr_accesses: u32,
}

/// The heat to credit each fast-tier page of a region with, in [`slow_part_is_hot`]: the
/// median `nr_accesses` of this pass's regions that sit (at least 90 %) on the fast tier
/// already, i.e. of the hot set that has moved; `hottest` when there are none. Not the
/// hottest region's count: `nr_accesses` is a sample count, and the largest of many noisy
/// counts overstates a typical hot region's, which made the few slow pages left in a mostly
/// promoted hot region look explained by its fast pages and kept them on the slow tier for
/// tens of seconds (lab A's tail).
#[must_use]
pub fn fast_heat_estimate(regions: &[(u32, u64, u64)], hottest: u32) -> u32 {
    let mut hot: Vec<u32> = regions
        .iter()
        .filter(|(_, fast, present)| *present > 0 && fast * 10 >= present * 9)
        .map(|(nr, _, _)| *nr)
        .collect();
    if hot.is_empty() {
        return hottest;
    }
    hot.sort_unstable();
    hot[hot.len() / 2]
}

/// Whether the pages of an accessed region that sit on slower tiers are themselves hot.
///
/// DAMON reports one access count for a whole region, estimated by sampling one random page
/// per sampling interval, so a region that straddles the edge of a hot set reports heat that
/// belongs to part of it. Once the hot part has been promoted, such a region keeps reporting
/// accesses and would drag its cold neighbours along (the seed's DAMON over-promotion).
/// Assuming the region's fast-tier pages are as hot as the typical hot region already on the
/// fast tier ([`fast_heat_estimate`]), the heat left for the slow-tier pages is
/// `(nr_accesses * pages - fast * fast_heat) / slow`; they are observed only if that reaches
/// `min_nr_accesses`. A region of sources that name single
/// pages (`nr_accesses == 0`) is always kept.
#[must_use]
pub fn slow_part_is_hot(
    nr_accesses: u32,
    hottest: u32,
    fast: u64,
    slow: u64,
    min_nr_accesses: u32,
) -> bool {
    if nr_accesses == 0 || slow == 0 {
        return true;
    }
    let total = u128::from(fast + slow);
    let heat = u128::from(nr_accesses) * total;
    let explained = u128::from(fast) * u128::from(hottest.max(nr_accesses));
    let left = heat.saturating_sub(explained);
    left >= u128::from(min_nr_accesses.max(1)) * u128::from(slow)
}

/// The `nr_accesses` a region needs to feed observations this pass: the configured floor, or
/// `permille` of the hottest region's, whichever is higher. Relative, because what a region
/// counts depends on the host's speed and the sampling intervals (hot regions reach 5-8 of 20
/// samples on one host and 2-3 on a slower one): a fixed floor that drops noise on one host
/// drops the hot set on another. The engine's relative threshold then picks the hottest pages
/// that fit.
#[must_use]
pub fn relative_min_nr_accesses(hottest: u32, floor: u32, permille: u32) -> u32 {
    let rel = u64::from(hottest) * u64::from(permille);
    let rel = u32::try_from(rel.div_ceil(1000)).unwrap_or(u32::MAX);
    floor.max(rel).max(1)
}

/// A running hotness source.
pub trait Feed: Send {
    /// Its name in messages and metrics.
    fn name(&self) -> &'static str;
    /// The processes to watch changed (called before the first poll too).
    ///
    /// # Errors
    /// When the source cannot follow the new set.
    fn set_targets(&mut self, pids: &[u32]) -> Result<(), DaemonError>;
    /// Appends what was observed since the last call.
    ///
    /// # Errors
    /// When the source broke (its sysfs files vanished, the kernel refused).
    fn poll(&mut self, now: Nanos, out: &mut Vec<AccessedRange>) -> Result<(), DaemonError>;
    /// The targets' mapped size, bytes (refreshed with the scope); sources that tune their
    /// resolution to the share of memory found accessed use it.
    fn set_monitored_bytes(&mut self, _bytes: u64) {}
    /// The intervals in force, for sources that have them.
    fn intervals(&self) -> Option<crate::metrics::IntervalsSnapshot> {
        None
    }
    /// Stops the source and gives back what it borrowed from the kernel.
    fn stop(&mut self);
}

/// What the environment check found.
#[derive(Debug)]
pub struct Preflight {
    /// The machine as sysfs describes it.
    pub system: SystemTopology,
    /// The engine's view: tiers and nodes.
    pub topology: Topology,
    /// `kernel.numa_balancing`, when the kernel has it.
    pub numa_balancing: Option<u32>,
    /// `/sys/kernel/mm/numa/demotion_enabled`, when present.
    pub demotion_enabled: Option<bool>,
    /// Things the operator should know (tierd still runs).
    pub warnings: Vec<String>,
}

impl Preflight {
    /// Reads the topology and the kernel's own tiering settings; refuses a machine with one
    /// tier.
    ///
    /// # Errors
    /// [`DaemonError::NothingToTier`] with one tier; [`DaemonError::Read`] when sysfs cannot be
    /// read; [`DaemonError::Topology`] when the engine refuses what sysfs says.
    pub fn check(cfg: &DaemonConfig) -> Result<Preflight, DaemonError> {
        let roots = &cfg.system;
        let system = read_system_topology(&roots.sys_root)?;
        let topology = system
            .to_engine()
            .map_err(|e| DaemonError::Topology(e.to_string()))?;
        if topology.tiers().len() < 2 {
            let nodes: Vec<String> = system.nodes.iter().map(|n| n.id.0.to_string()).collect();
            return Err(DaemonError::NothingToTier(format!(
                "every memory node ({}) is in one tier; tierd needs a slower tier (a CPU-less \
                 CXL or PMEM node that the kernel places in a lower memory_tier)",
                nodes.join(", ")
            )));
        }
        let numa_balancing = read_numa_balancing(&roots.proc_root)?.map(|b| b.0);
        let demotion_enabled = read_demotion_enabled(&roots.sys_root)?;
        let mut warnings = Vec::new();
        if let Some(nb) = numa_balancing {
            // kernel/sched/fair.c: NUMA_BALANCING_MEMORY_TIERING = 0x2.
            if nb & 2 != 0 {
                warnings.push(format!(
                    "kernel.numa_balancing = {nb} includes memory tiering (2): the kernel \
                     promotes on its own hint faults and will compete with tierd; set it to 0 \
                     (or 1) to let tierd decide"
                ));
            }
        }
        if demotion_enabled == Some(true) && cfg.engine.demotion.enabled {
            warnings.push(
                "the kernel demotes on reclaim (/sys/kernel/mm/numa/demotion_enabled = true) \
                 and tierd demotes too: both may move the same cold pages; consider turning one \
                 off"
                .into(),
            );
        }
        Ok(Preflight {
            system,
            topology,
            numa_balancing,
            demotion_enabled,
            warnings,
        })
    }

    /// What tierd found, for the start-up message.
    #[must_use]
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for (i, tier) in self.topology.tiers().iter().enumerate() {
            let nodes: Vec<String> = tier.nodes.iter().map(|n| n.0.to_string()).collect();
            let _ = writeln!(s, "tier {i}: nodes {}", nodes.join(","));
        }
        for n in &self.system.nodes {
            let total = n.meminfo.mem_total().map_or(0, |b| b.0);
            let _ = writeln!(
                s,
                "node {}: {} MiB, {} CPUs{}",
                n.id.0,
                total >> 20,
                n.cpus.len(),
                if self.topology.is_toptier(n.id) {
                    ", top tier"
                } else {
                    ""
                }
            );
        }
        let _ = writeln!(
            s,
            "kernel: numa_balancing = {}, demotion_enabled = {}",
            self.numa_balancing
                .map_or_else(|| "absent".to_string(), |v| v.to_string()),
            self.demotion_enabled
                .map_or_else(|| "absent".to_string(), |v| v.to_string())
        );
        s
    }
}

/// One process in scope, as last read.
#[derive(Clone, Debug, Default)]
struct ScopedProcess {
    comm: String,
    cgroup: String,
    vmas: Vec<Vma>,
}

/// The Linux implementation of the engine's [`Backend`].
pub struct LinuxBackend {
    cfg: DaemonConfig,
    dry_run: bool,
    mover: Mover,
    feeds: Vec<Box<dyn Feed>>,
    cgroups: CgroupFs,
    cgroup_ids: BTreeMap<String, CgroupId>,
    procs: BTreeMap<u32, ScopedProcess>,
    last_refresh: Option<Nanos>,
    ranges: Vec<AccessedRange>,
    pending_updates: Vec<OwnerUpdate>,
    node_ids: Vec<NodeId>,
    fast_nodes: Vec<NodeId>,
    /// Processes that vanished between a listing and a read: counted, not raised.
    pub gone: u64,
    /// Pages the dry run would have moved.
    pub planned_pages: u64,
    /// Slow-tier pages of accessed regions not observed because the region's fast-tier
    /// pages explain its accesses.
    pub slow_explained: u64,
    /// Dry-run lines, when a dry run is printing.
    pub dry_run_log: Vec<String>,
    /// Pages reported accessed, per refresh period (the hot side of `/status`).
    hot: HotWindow,
}

/// The pages the hotness sources reported accessed, as `/status` shows them ("hot"): the
/// distinct base pages (pid, vpn) that became observations (located by `move_pages(2)`, and
/// not dropped by [`slow_part_is_hot`]) during one refresh period, counted per node at the
/// end of the period. A page seen in several passes counts once, on the node it was last
/// seen on. The set is bounded by what the sources report in one period
/// (`sources.damon.max_pages_per_pass` per pass); its allocation is kept for the next one.
#[derive(Debug, Default)]
struct HotWindow {
    current: std::collections::HashMap<(u32, u64), NodeId>,
    last: BTreeMap<u32, BTreeMap<u32, u64>>,
}

impl HotWindow {
    fn note(&mut self, pid: u32, vpn: Vpn, node: NodeId) {
        self.current.insert((pid, vpn.0), node);
    }

    /// Ends the period: its pages become the counts [`HotWindow::last`] reports.
    fn roll(&mut self) {
        let mut last: BTreeMap<u32, BTreeMap<u32, u64>> = BTreeMap::new();
        for ((pid, _), node) in self.current.drain() {
            *last
                .entry(pid)
                .or_default()
                .entry(u32::from(node.0))
                .or_default() += 1;
        }
        self.last = last;
    }

    /// Hot base pages of `pid` per node in the last complete period.
    fn last(&self, pid: u32) -> BTreeMap<u32, u64> {
        self.last.get(&pid).cloned().unwrap_or_default()
    }
}

impl std::fmt::Debug for LinuxBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinuxBackend")
            .field("dry_run", &self.dry_run)
            .field("procs", &self.procs.keys().collect::<Vec<_>>())
            .field(
                "feeds",
                &self.feeds.iter().map(|f| f.name()).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// Not moved because the daemon runs with `--dry-run` (`ECANCELED`).
pub const DRY_RUN_ERRNO: i32 = 125;

impl LinuxBackend {
    /// A backend for `topology` over the given feeds.
    #[must_use]
    pub fn new(
        cfg: DaemonConfig,
        topology: &Topology,
        feeds: Vec<Box<dyn Feed>>,
        dry_run: bool,
    ) -> Self {
        let cgroups = CgroupFs::new(cfg.system.cgroup_root.clone());
        let mut cgroup_ids = BTreeMap::new();
        cgroup_ids.insert("/".to_string(), CgroupId::ROOT);
        LinuxBackend {
            cfg,
            dry_run,
            mover: Mover::new(MoverConfig::default()),
            feeds,
            cgroups,
            cgroup_ids,
            procs: BTreeMap::new(),
            last_refresh: None,
            ranges: Vec::new(),
            pending_updates: Vec::new(),
            node_ids: topology.nodes().iter().map(|n| n.id).collect(),
            fast_nodes: topology
                .nodes()
                .iter()
                .map(|n| n.id)
                .filter(|n| topology.is_toptier(*n))
                .collect(),
            gone: 0,
            planned_pages: 0,
            slow_explained: 0,
            dry_run_log: Vec::new(),
            hot: HotWindow::default(),
        }
    }

    /// The mover (for its statistics).
    #[must_use]
    pub fn mover(&self) -> &Mover {
        &self.mover
    }

    /// Pids in scope, as last resolved.
    #[must_use]
    pub fn pids(&self) -> Vec<u32> {
        self.procs.keys().copied().collect()
    }

    fn cgroup_id(&mut self, path: &str) -> CgroupId {
        let next = u32::try_from(self.cgroup_ids.len()).unwrap_or(u32::MAX);
        *self
            .cgroup_ids
            .entry(path.to_string())
            .or_insert(CgroupId(next))
    }

    /// The pids the configured scope names now.
    fn resolve_scope(&mut self) -> Result<BTreeSet<u32>, DaemonError> {
        let scope = &self.cfg.scope;
        let proc_root = &self.cfg.system.proc_root;
        let me = std::process::id();
        let mut pids = BTreeSet::new();
        for &p in &scope.pids {
            if proc_root.join(p.to_string()).exists() {
                pids.insert(p);
            }
        }
        for cg in scope.cgroups.clone() {
            let mut stack = vec![cg];
            while let Some(path) = stack.pop() {
                match self.cgroups.procs(&path) {
                    Ok(ps) => pids.extend(ps),
                    Err(e) if e.is_gone() => {
                        self.gone += 1;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
                match self.cgroups.children(&path) {
                    Ok(children) => stack.extend(children),
                    Err(e) if e.is_gone() => self.gone += 1,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if scope.all {
            pids.extend(list_pids(proc_root)?);
        }
        pids.remove(&me);
        Ok(pids)
    }

    /// Re-reads the scope, owners and policies; the engine gets the updates on its next pass.
    ///
    /// # Errors
    /// When `/proc` or the cgroup tree cannot be read (a process that exits meanwhile is
    /// counted in [`LinuxBackend::gone`]).
    pub fn refresh(&mut self, now: Nanos) -> Result<(), DaemonError> {
        let mut out = std::mem::take(&mut self.pending_updates);
        let pids = self.resolve_scope()?;
        let proc_root = self.cfg.system.proc_root.clone();
        let mut fresh = BTreeMap::new();
        for pid in pids {
            let read = || -> Result<ScopedProcess, ReadError> {
                let vmas = read_vmas(&proc_root, pid)?;
                let comm = read_status(&proc_root, pid)?.name;
                let cgroup = unified_path(&read_proc_cgroup(&proc_root, pid)?)
                    .unwrap_or("/")
                    .to_string();
                Ok(ScopedProcess { comm, cgroup, vmas })
            };
            match read() {
                // Kernel threads have no memory map: nothing to tier.
                Ok(p) if p.vmas.is_empty() => {}
                Ok(p) => {
                    fresh.insert(pid, p);
                }
                Err(e) if e.is_gone() => self.gone += 1,
                // A process we may not inspect (another user's, without CAP_SYS_PTRACE) is
                // left out rather than stopping the daemon.
                Err(ReadError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::PermissionDenied =>
                {
                    self.gone += 1;
                }
                Err(e) => return Err(e.into()),
            }
        }
        for pid in self.procs.keys() {
            if !fresh.contains_key(pid) {
                out.push(OwnerUpdate::Exited {
                    space: SpaceId(*pid),
                });
            }
        }
        let changed = fresh.keys().ne(self.procs.keys());
        for (pid, p) in &fresh {
            let cgroup = self.cgroup_id(&p.cgroup);
            out.push(OwnerUpdate::Owner {
                space: SpaceId(*pid),
                owner: Owner { pid: *pid, cgroup },
            });
            out.push(OwnerUpdate::Policies {
                space: SpaceId(*pid),
                ranges: policy_ranges(&p.vmas),
            });
        }
        let mapped: u64 = fresh
            .values()
            .flat_map(|p| p.vmas.iter())
            .filter_map(|v| v.end.map(|e| e.0.saturating_sub(v.start.0) << PAGE_SHIFT))
            .sum();
        for f in &mut self.feeds {
            f.set_monitored_bytes(mapped);
        }
        self.procs = fresh;
        self.pending_updates = out;
        self.hot.roll();
        if changed || self.last_refresh.is_none() {
            let pids = self.pids();
            for f in &mut self.feeds {
                f.set_targets(&pids)?;
            }
        }
        self.last_refresh = Some(now);
        Ok(())
    }

    /// Each feed's intervals in force, by feed name.
    fn feed_intervals(&self) -> Vec<(&'static str, crate::metrics::IntervalsSnapshot)> {
        self.feeds
            .iter()
            .filter_map(|f| f.intervals().map(|iv| (f.name(), iv)))
            .collect()
    }

    /// Placement per process from the last `numa_maps` read.
    fn process_snapshots(&self) -> Vec<ProcessSnapshot> {
        self.procs
            .iter()
            .map(|(pid, p)| {
                let mut pages_per_node: BTreeMap<u32, u64> = BTreeMap::new();
                for v in &p.vmas {
                    for (n, c) in &v.numa.nodes {
                        *pages_per_node.entry(u32::from(n.0)).or_default() +=
                            c * v.numa.base_pages_per_page();
                    }
                }
                ProcessSnapshot {
                    pid: *pid,
                    comm: p.comm.clone(),
                    cgroup: p.cgroup.clone(),
                    pages_per_node,
                    hot_pages_per_node: self.hot.last(*pid),
                }
            })
            .collect()
    }

    /// Turns accessed ranges into observations: one location query per process for the pages
    /// named (at most `max_pages` in all), skipping pages that are not present, and the
    /// slow-tier pages of regions whose heat the fast-tier pages already explain (see
    /// [`slow_part_is_hot`]).
    fn observations_from(
        &mut self,
        max_pages: u64,
        out: &mut Vec<Observation>,
    ) -> Result<(), DaemonError> {
        let mut by_pid: BTreeMap<u32, Vec<AccessedRange>> = BTreeMap::new();
        let mut budget = max_pages;
        let hottest = self.ranges.iter().map(|r| r.nr_accesses).max().unwrap_or(0);
        for mut r in self.ranges.drain(..) {
            r.nr_pages = r.nr_pages.min(budget);
            budget -= r.nr_pages;
            by_pid.entry(r.pid).or_default().push(r);
            if budget == 0 {
                break;
            }
        }
        self.ranges.clear();
        let d = &self.cfg.sources.damon;
        let min_acc = relative_min_nr_accesses(hottest, d.min_nr_accesses, d.min_relative_permille);
        // First every process's location query, then the filter: the heat credited to a
        // region's fast pages is estimated from all the regions of this pass.
        // Per range: its pages' places (a slice of its process's query) and how many of them
        // are present and on the fast tier.
        struct Located {
            pid: u32,
            range: AccessedRange,
            pages: std::ops::Range<usize>,
            fast: u64,
            present: u64,
        }
        let mut located = Vec::new();
        let mut nodes_of = BTreeMap::new();
        for (pid, ranges) in by_pid {
            if !self.procs.contains_key(&pid) {
                continue;
            }
            let addrs: Vec<usize> = ranges
                .iter()
                .flat_map(|r| (0..r.nr_pages).map(move |i| Vpn(r.start.0 + i)))
                .filter_map(|v| usize::try_from(v.addr()).ok())
                .collect();
            let pid_i = i32::try_from(pid).unwrap_or(i32::MAX);
            let nodes = self.mover.query(pid_i, &addrs)?;
            let mut at = 0;
            for range in ranges {
                let n = usize::try_from(range.nr_pages).unwrap_or(usize::MAX);
                let pages = at.min(nodes.len())..(at + n).min(nodes.len());
                at += n;
                let here = &nodes[pages.clone()];
                let fast = here
                    .iter()
                    .filter(|x| x.is_ok_and(|nd| self.fast_nodes.contains(&nd)))
                    .count() as u64;
                let present = here.iter().filter(|x| x.is_ok()).count() as u64;
                located.push(Located {
                    pid,
                    range,
                    pages,
                    fast,
                    present,
                });
            }
            nodes_of.insert(pid, nodes);
        }
        let counts: Vec<(u32, u64, u64)> = located
            .iter()
            .map(|l| (l.range.nr_accesses, l.fast, l.present))
            .collect();
        let fast_heat = fast_heat_estimate(&counts, hottest);
        for l in located {
            let (r, fast, present) = (&l.range, l.fast, l.present);
            let keep_slow =
                slow_part_is_hot(r.nr_accesses, fast_heat, fast, present - fast, min_acc);
            if !keep_slow {
                self.slow_explained += present - fast;
            }
            let here = nodes_of.get(&l.pid).map_or(&[][..], |n| &n[l.pages]);
            for (i, node) in here.iter().enumerate() {
                let Ok(node) = *node else { continue };
                if !keep_slow && !self.fast_nodes.contains(&node) {
                    continue;
                }
                let vpn = Vpn(r.start.0 + i as u64);
                self.hot.note(l.pid, vpn, node);
                out.push(Observation {
                    page: PageRef::base(SpaceId(l.pid), vpn),
                    page_node: node,
                    accessing_node: r.accessing_node,
                    source: r.kind,
                    time: r.time,
                    weight: r.nr_accesses,
                });
            }
        }
        Ok(())
    }

    /// Stops every feed.
    pub fn stop(&mut self) {
        for f in &mut self.feeds {
            f.stop();
        }
    }
}

fn max_pages_per_pass(cfg: &DaemonConfig) -> u64 {
    cfg.sources.damon.max_pages_per_pass
}

impl Backend for LinuxBackend {
    type Error = DaemonError;

    fn drain_observations(
        &mut self,
        now: Nanos,
        out: &mut Vec<Observation>,
    ) -> Result<(), Self::Error> {
        let mut ranges = std::mem::take(&mut self.ranges);
        for f in &mut self.feeds {
            f.poll(now, &mut ranges)?;
        }
        self.ranges = ranges;
        let max = max_pages_per_pass(&self.cfg);
        self.observations_from(max, out)
    }

    fn drain_owner_updates(&mut self, out: &mut Vec<OwnerUpdate>) -> Result<(), Self::Error> {
        // Owners are refreshed on the daemon's refresh period, not every engine pass: reading
        // numa_maps walks the page tables of every VMA.
        out.append(&mut self.pending_updates);
        Ok(())
    }

    fn usage(&mut self, _now: Nanos) -> Result<SystemUsage, Self::Error> {
        let sys_root = self.cfg.system.sys_root.clone();
        let mut usage = SystemUsage::default();
        for n in self.node_ids.clone() {
            let mi = read_node_meminfo(&sys_root, n)?;
            usage.nodes.insert(
                n,
                NodeUsage {
                    free: mi.mem_free().unwrap_or(Bytes(0)),
                    promo_watermark: None,
                },
            );
        }
        let paths: Vec<(String, CgroupId)> = self
            .cgroup_ids
            .iter()
            .filter(|(p, _)| p.as_str() != "/")
            .map(|(p, id)| (p.clone(), *id))
            .collect();
        for (path, id) in paths {
            let m = match self.cgroups.read_memory(&path) {
                Ok(m) => m,
                Err(e) if e.is_gone() => continue,
                Err(e) => return Err(e.into()),
            };
            let low = m.low.and_then(|l| l.bytes()).unwrap_or(Bytes(0));
            let fast: u64 = m.numa_stat.as_ref().map_or(0, |ns| {
                self.fast_nodes
                    .iter()
                    .map(|n| ns.get("anon", *n).unwrap_or(0) + ns.get("file", *n).unwrap_or(0))
                    .sum()
            });
            usage.cgroups.insert(
                id,
                CgroupUsage {
                    low,
                    fast_usage: Bytes(fast),
                },
            );
        }
        Ok(usage)
    }

    fn migrate(
        &mut self,
        _now: Nanos,
        batch: &MigrationBatch,
    ) -> Result<MigrationReport, Self::Error> {
        if self.dry_run {
            let pages = batch.nr_pages().0;
            self.planned_pages += pages;
            let mut per_pid: BTreeMap<u32, u64> = BTreeMap::new();
            for m in &batch.pages {
                *per_pid.entry(m.page.space.0).or_default() += m.page.size.nr_pages().0;
            }
            let who: Vec<String> = per_pid
                .iter()
                .map(|(p, n)| format!("pid {p}: {n}"))
                .collect();
            self.dry_run_log.push(format!(
                "dry run: would {:?} {} pages to node {} ({})",
                batch.kind,
                pages,
                batch.target.0,
                who.join(", ")
            ));
            return Ok(MigrationReport::for_batch(
                batch,
                batch.pages.iter().map(|_| {
                    tierd_engine::MoveOutcome::Failed(tierd_engine::MoveError::Other(DRY_RUN_ERRNO))
                }),
            ));
        }
        let procs = &self.procs;
        let report = self.mover.execute(batch, |space| {
            procs
                .contains_key(&space.0)
                .then(|| i32::try_from(space.0).ok())
                .flatten()
        })?;
        Ok(report)
    }
}

/// How to run.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Plan and print, move nothing.
    pub dry_run: bool,
    /// Stop after this long (`None`: until signalled).
    pub duration: Option<Duration>,
    /// Where the latest snapshot goes (the metrics endpoint reads it).
    pub snapshot: Option<SharedSnapshot>,
}

/// What a run did, for the exit message.
#[derive(Clone, Debug, Default)]
pub struct RunSummary {
    /// Engine passes.
    pub passes: u64,
    /// Observations fed to the engine.
    pub observations: u64,
    /// Base pages moved.
    pub moved_pages: u64,
    /// Base pages that could not move (counted by reason in the snapshot).
    pub failed_pages: u64,
    /// Base pages a dry run would have moved.
    pub planned_pages: u64,
    /// Processes that exited or could not be read mid-run.
    pub gone: u64,
    /// The last snapshot.
    pub snapshot: Snapshot,
}

fn nanos_since(start: Instant) -> Nanos {
    Nanos(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

#[allow(clippy::too_many_arguments)]
fn build_snapshot(
    cfg: &DaemonConfig,
    pre: &Preflight,
    engine: &Engine,
    backend: &LinuxBackend,
    statuses: &[SourceSnapshot],
    vm0: Option<&Vmstat>,
    uptime: Duration,
    dry_run: bool,
) -> Snapshot {
    let roots = &cfg.system;
    let tiers = pre.topology.tiers();
    let nodes = pre
        .system
        .nodes
        .iter()
        .map(|n| {
            let tier = tiers
                .iter()
                .position(|t| t.nodes.contains(n.id))
                .and_then(|i| u32::try_from(i).ok())
                .unwrap_or(0);
            let fresh = read_node_meminfo(&roots.sys_root, n.id).ok();
            let mi = fresh.as_ref().unwrap_or(&n.meminfo);
            NodeSnapshot {
                id: u32::from(n.id.0),
                tier,
                has_cpus: !n.cpus.is_empty(),
                total_bytes: mi.mem_total().map_or(0, |b| b.0),
                free_bytes: mi.mem_free().map_or(0, |b| b.0),
            }
        })
        .collect();
    let ms = backend.mover.stats();
    let mut pages_failed = BTreeMap::new();
    let f = ms.failures;
    for (k, v) in [
        ("busy", f.busy),
        ("no_mem", f.no_mem),
        ("access", f.access),
        ("no_process", f.no_process),
        ("fault", f.fault),
        ("not_present", f.not_present),
        ("other", f.other),
    ] {
        if v > 0 {
            pages_failed.insert(k.to_string(), v);
        }
    }
    let kernel_vmstat_delta = match (vm0, read_vmstat(&roots.proc_root).ok()) {
        (Some(a), Some(b)) => Vmstat::delta(&b, a)
            .counters
            .into_iter()
            .filter(|(k, _)| {
                k.starts_with("pgpromote")
                    || k.starts_with("pgdemote")
                    || k.starts_with("numa_")
                    || k.starts_with("pgmigrate")
            })
            .collect(),
        _ => BTreeMap::new(),
    };
    let stat = read_stat(&roots.proc_root, std::process::id()).ok();
    let daemon_cpu_s = stat
        .as_ref()
        .map_or(0.0, |s| s.cpu_time(USER_HZ).as_secs_f64());
    let daemon_cpu_sys_s = stat.as_ref().map_or(0.0, |s| {
        let sys_only = tierd_linux::read::proc::ProcStat {
            utime_ticks: 0,
            ..s.clone()
        };
        sys_only.cpu_time(USER_HZ).as_secs_f64()
    });
    let mut snap = Snapshot {
        version: env!("CARGO_PKG_VERSION").to_string(),
        uptime_s: uptime.as_secs_f64(),
        dry_run,
        nodes,
        processes: backend.process_snapshots(),
        sources: {
            let intervals = backend.feed_intervals();
            statuses
                .iter()
                .map(|s| {
                    let mut s = s.clone();
                    s.intervals = intervals
                        .iter()
                        .find(|(n, _)| *n == s.name)
                        .map(|(_, iv)| iv.clone());
                    s
                })
                .collect()
        },
        mover: MoverSnapshot {
            calls: ms.move_calls,
            pages_moved: ms.pages_moved,
            pages_failed,
            seconds: ms.move_time.as_secs_f64(),
        },
        kernel_vmstat_delta,
        daemon_cpu_s,
        daemon_cpu_sys_s,
        ..Snapshot::default()
    };
    snap.set_engine_stats(engine.stats());
    snap
}

/// Runs the daemon loop until `stop` is set or the duration passes. Lines for the operator
/// (dry-run plans, source trouble) go to `log`.
///
/// # Errors
/// A [`DaemonError`] when the engine refuses the configuration or the backend breaks as a
/// whole; per-page failures and exiting processes are counted instead.
pub fn run(
    cfg: &DaemonConfig,
    pre: &Preflight,
    feeds: Vec<Box<dyn Feed>>,
    statuses: &[SourceSnapshot],
    opts: &RunOptions,
    stop: &AtomicBool,
    log: &mut dyn FnMut(&str),
) -> Result<RunSummary, DaemonError> {
    let start = Instant::now();
    let mut engine = Engine::new(cfg.engine_config(), pre.topology.clone())?;
    let mut backend = LinuxBackend::new(cfg.clone(), &pre.topology, feeds, opts.dry_run);
    let vm0 = read_vmstat(&cfg.system.proc_root).ok();
    let interval = Duration::from_millis(u64::from(cfg.engine.interval_ms));
    let refresh = Duration::from_millis(cfg.daemon.refresh_ms);
    let mut bufs = StepBuffers::default();
    let mut summary = RunSummary::default();
    let mut next_refresh = Duration::ZERO;
    let mut last_intervals: Vec<(&'static str, crate::metrics::IntervalsSnapshot)> = Vec::new();
    let publish = |engine: &Engine, backend: &LinuxBackend| {
        let snap = build_snapshot(
            cfg,
            pre,
            engine,
            backend,
            statuses,
            vm0.as_ref(),
            start.elapsed(),
            opts.dry_run,
        );
        if let Some(shared) = &opts.snapshot {
            match shared.lock() {
                Ok(mut g) => *g = snap.clone(),
                Err(p) => *p.into_inner() = snap.clone(),
            }
        }
        snap
    };
    let result = (|| -> Result<(), DaemonError> {
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            if opts.duration.is_some_and(|d| start.elapsed() >= d) {
                return Ok(());
            }
            let pass_start = start.elapsed();
            if pass_start >= next_refresh {
                backend.refresh(nanos_since(start))?;
                publish(&engine, &backend);
                next_refresh = pass_start + refresh;
            }
            let out = tierd_engine::step(&mut engine, &mut backend, nanos_since(start), &mut bufs)?;
            summary.passes += 1;
            summary.observations += out.observations as u64;
            summary.moved_pages += out.moved_pages;
            summary.failed_pages += out.failed_pages;
            for line in backend.dry_run_log.drain(..) {
                log(&line);
            }
            // The intervals a source tuned, each change logged once (tierd lab and operators
            // read them from here and from /status).
            let now_iv = backend.feed_intervals();
            for (name, iv) in &now_iv {
                let was = last_intervals
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v);
                if was != Some(iv) {
                    log(&format!(
                        "{name}: intervals sample {} us, aggregation {} us (tuning: {}) at {:.1} s",
                        iv.sample_us,
                        iv.aggr_us,
                        iv.tuning,
                        start.elapsed().as_secs_f64()
                    ));
                }
            }
            last_intervals = now_iv;
            // Sleep to the next pass in short slices so a signal is seen quickly; the batch in
            // flight has already finished when we get here.
            let next = pass_start + interval;
            while start.elapsed() < next && !stop.load(Ordering::Relaxed) {
                let left = next.saturating_sub(start.elapsed());
                std::thread::sleep(left.min(Duration::from_millis(20)));
            }
        }
    })();
    backend.stop();
    summary.planned_pages = backend.planned_pages;
    summary.gone = backend.gone;
    summary.snapshot = publish(&engine, &backend);
    result.map(|()| summary)
}

#[cfg(test)]
mod tests {
    use super::{fast_heat_estimate, relative_min_nr_accesses, slow_part_is_hot, HotWindow};

    #[test]
    fn fast_pages_are_credited_the_median_promoted_region_not_the_noisiest() {
        // Promoted hot regions counted 5, 6, 6, 7 and one noisy 12; a straddler half on the
        // fast tier and the slow regions do not count.
        let r = [
            (5, 100, 100),
            (12, 95, 100),
            (6, 100, 100),
            (6, 90, 100),
            (7, 99, 100),
            (3, 50, 100),
            (6, 0, 100),
        ];
        assert_eq!(fast_heat_estimate(&r, 12), 6);
        assert_eq!(
            fast_heat_estimate(&r[5..], 6),
            6,
            "none promoted: the hottest"
        );
        assert_eq!(fast_heat_estimate(&[(4, 0, 0)], 9), 9, "no page present");
        // The slow tenth of a promoted hot region counting 6 is kept with the median (6) and
        // was dropped with the hottest (12); a promoted half of a straddler (3) still
        // explains its cold half.
        assert!(slow_part_is_hot(6, 6, 90, 10, 2));
        assert!(!slow_part_is_hot(6, 12, 90, 10, 2));
        assert!(!slow_part_is_hot(3, 6, 50, 50, 2));
    }

    #[test]
    fn the_region_floor_is_relative_to_the_hottest_region() {
        // A slow host: hot regions at 3 of 20 still pass; a fast one: 15 of 20, and a
        // region a fifth as hot (3) does not.
        assert_eq!(relative_min_nr_accesses(3, 1, 250), 1);
        assert_eq!(relative_min_nr_accesses(15, 1, 250), 4);
        assert_eq!(relative_min_nr_accesses(16, 1, 250), 4);
        assert_eq!(relative_min_nr_accesses(0, 0, 250), 1, "never 0");
        assert_eq!(
            relative_min_nr_accesses(8, 5, 250),
            5,
            "the absolute floor holds"
        );
        assert_eq!(relative_min_nr_accesses(u32::MAX, 1, 1000), u32::MAX);
    }
    use tierd_engine::types::{NodeId, Vpn};

    #[test]
    fn hot_pages_are_distinct_pages_of_the_last_period_on_their_last_node() {
        let mut h = HotWindow::default();
        h.note(7, Vpn(1), NodeId(1));
        h.note(7, Vpn(1), NodeId(0)); // seen again after a promotion: counted once, on 0
        h.note(7, Vpn(2), NodeId(1));
        // The same vpn in another process is another page.
        h.note(8, Vpn(1), NodeId(1));
        // Nothing until the period ends.
        assert!(h.last(7).is_empty());
        h.roll();
        assert_eq!(h.last(7), [(0, 1), (1, 1)].into_iter().collect());
        assert_eq!(h.last(8), [(1, 1)].into_iter().collect());
        assert!(h.last(9).is_empty());
        // The next period starts empty: pages not reported again are no longer hot.
        h.note(8, Vpn(5), NodeId(0));
        h.roll();
        assert!(h.last(7).is_empty());
        assert_eq!(h.last(8), [(0, 1)].into_iter().collect());
    }

    #[test]
    fn a_region_whose_heat_its_fast_pages_explain_drops_its_slow_pages() {
        // Hottest region this pass: 6 of 20 samples.
        // A region 70 % promoted (hot) and 30 % cold reports 0.7 * 6 = 4.2: nothing left.
        assert!(!slow_part_is_hot(4, 6, 70, 30, 2));
        // 60 % promoted, 40 % still-hot on the slow node: the region is as hot as the hottest,
        // so the slow part carries 6 of heat: keep.
        assert!(slow_part_is_hot(6, 6, 60, 40, 2));
        // Nothing promoted yet: the whole heat is the slow part's.
        assert!(slow_part_is_hot(4, 6, 0, 100, 4));
        assert!(!slow_part_is_hot(3, 6, 0, 100, 4));
        // Sources that name single pages are never filtered.
        assert!(slow_part_is_hot(0, 6, 99, 1, 4));
        // All on the fast tier: nothing to decide.
        assert!(slow_part_is_hot(5, 6, 10, 0, 4));
    }
}
