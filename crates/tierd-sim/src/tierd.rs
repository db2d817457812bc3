//! tierd's engine inside the simulator, unchanged, driven through the same
//! [`tierd_engine::Backend`] trait and [`tierd_engine::step`] loop as the Linux daemon.
//!
//! `SimBackend` borrows the step's [`Ctx`] and turns the simulated machine into what the
//! engine expects: observations from the configured sources, node and cgroup usage, and
//! `move_pages`-like execution of batches with per-page outcomes.
//!
//! Sources:
//! - **hardware samples** (IBS-like): `accesses x IBS_SAMPLES_PER_ACCESS / period` samples per
//!   second, each an access drawn in proportion to the workload's access rates, with the
//!   sampling CPU's node;
//! - **hint faults** (pghot over NUMA balancing's faults): the NUMA-balancing scanner model,
//!   whose faults are reported instead of migrated on;
//! - **accessed-bit scans** (DAMON vaddr / idle page tracking): every interval, each page is
//!   found accessed with probability `1 - exp(-rate x interval)`; no accessing node. The
//!   interval is `abit_interval_ms`, or starts there and is tuned toward `abit_goal` as
//!   DAMON tunes its sampling interval; a finding weighs the number of the last scans that
//!   found the page accessed ([`crate::abit`]);
//! - **DAMON regions** (`damon = { ... }`, the Linux daemon's only source in the lab): the
//!   simulator's kdamond ([`crate::damon`], `vaddr`, a scheme that never applies) with its
//!   regions fitted to the monitored bytes as the daemon fits them; every `read_interval_ms`
//!   the newest aggregation's regions become per-page observations by the engine's region
//!   rules ([`tierd_engine::regions`]: the relative floor, the slow-part test), as the
//!   daemon's `locate` applies them, each page weighted by its region's `nr_accesses`. The
//!   kdamond's sampling is charged as the DAMON rows' is; the daemon's own work per located
//!   page (pagemap reads, `move_pages(2)` queries) is not modelled.
//!
//! The engine runs its configured threshold (tierd's default: relative), except in rows that
//! model the kernel's pghot (`kernel_pghot = true`), which run the kernel's rules:
//!
//! - the fixed threshold (`pghot_freq_threshold`, the free-space bypass, the latency
//!   threshold), whatever the row's table says;
//! - no demoter of tierd's (the engine's `demotion.enabled` off, and with it the room it keeps
//!   below its demotion high watermark and its ping-pong idle filter): the kernel demotes
//!   only through reclaim;
//! - kmigrated's migration: each folio is first checked by `migrate_balanced_pgdat()` (mm/pghot.c
//!   `kmigrated_walk_zone()` -> mm/migrate.c `migrate_misplaced_folio_prepare()`); one that
//!   would take the target below its high watermark is not moved (-EAGAIN) and wakes kswapd
//!   there (`wakeup_kswapd()`), which, in tiering mode, balances the node to its promotion
//!   watermark by demoting its coldest pages (mm/vmscan.c `pgdat_balanced()`,
//!   `demote_folio_list()`, `pgdemote_kswapd`). A default-target row therefore churns once
//!   its target fills: every hot page promoted there pushes a colder one down, which comes
//!   back when it faults again.

use std::collections::BTreeMap;

use rand::Rng;
use tierd_engine::backend::{Backend, OwnerUpdate, StepBuffers};
use tierd_engine::policy::Owner;
use tierd_engine::sources::{Observation, SourceKind};
use tierd_engine::topology::Topology;
use tierd_engine::types::{Bytes, CgroupId, Nanos, PageRef, SpaceId, Vpn};
use tierd_engine::{
    CgroupUsage, Engine, MigrationBatch, MigrationReport, MoveOutcome, NodeUsage, SystemUsage,
    ThresholdMode,
};

use crate::abit::{IntervalTuner, ScanHistory};
use crate::cost::{
    ABIT_SCAN_NS_PER_PAGE, ENGINE_NS_PER_OBSERVATION, KMIGRATED_NS_PER_PAGE, MOVE_PAGES_CALL_NS,
    MOVE_PAGES_NS_PER_PAGE,
};
use crate::mechanism::{draw_samples, Ctx, Mechanism, Watermarks};
use crate::memory::UnitId;
use crate::numab::{HintFault, Scanner};
use crate::scenario::{DamonSourceToml, TierdToml};

/// Whether an engine counter counts pages, bytes or per-page observations (as opposed to
/// its own passes and batches, and huge folios, which no grained machine has): the ones a
/// grained unit's pages each add to.
fn counts_pages(d: &tierd_engine::stats::StatDesc) -> bool {
    use tierd_engine::stats::StatUnit;
    match d.unit {
        StatUnit::Pages | StatUnit::Bytes => true,
        StatUnit::Events => !matches!(
            d.name,
            "promoter_runs" | "plan_batches" | "thp_migration_success" | "thp_migration_fail"
        ),
        StatUnit::Milliseconds => false,
    }
}

/// A cgroup's `memory.low`, by id.
pub type CgroupLows = BTreeMap<CgroupId, Bytes>;

/// tierd as a simulated mechanism.
#[derive(Debug)]
pub struct Tierd {
    engine: Engine,
    params: TierdToml,
    scanner: Option<Scanner>,
    faults: Vec<HintFault>,
    /// Classic NUMA balancing for top-tier pages alongside (pghot with `numa_balancing=3`).
    kernel: Option<crate::numab::Numab>,
    /// When the next accessed-bit scan reads the bits, and when the last one did (and
    /// cleared them).
    next_abit_ns: u64,
    last_abit_ns: u64,
    /// The scan's interval, fixed or tuned toward `abit_goal`.
    tuner: IntervalTuner,
    /// Which of the last scans found each unit accessed (the scan's weight).
    history: ScanHistory,
    lows: CgroupLows,
    owners_sent: bool,
    bufs: StepBuffers,
    /// The observations of a step, kept between steps with its capacity: an accessed-bit
    /// scan of a big machine yields millions, and a fresh vector each scan had the kernel
    /// zero hundreds of MiB every time (a third of A's page faults).
    obs: Vec<Observation>,
    /// Top-tier nodes whose kswapd a failed kmigrated promotion woke this step (kernel pghot
    /// rows): woken once per node per step, as the NUMA-balancing model does.
    kswapd_woken: Vec<tierd_engine::types::NodeId>,
    /// The DAMON-region source, when configured.
    damon: Option<DamonFeed>,
    /// The engine's `plan_batches` at the end of the last step: whether it planned moves
    /// since (work, for the DAMON source's pace).
    batches_seen: u64,
}

/// tierd's DAMON source: the kdamond and when the daemon next reads its regions.
#[derive(Debug)]
struct DamonFeed {
    params: DamonSourceToml,
    /// Started on the first step, once the monitored size is known (the daemon fits the
    /// regions to its targets before it turns the kdamond on). Fitted once, to the regions
    /// alive then: the daemon fits again whenever the mapped size changes by a quarter,
    /// which this does not model (the kdamond picks up later mappings at its `update_us`,
    /// within regions fitted to what was mapped at the start).
    kdamond: Option<crate::damon::Damon>,
    next_read_ns: u64,
    /// When there was last something to move (the daemon's `Pace::last_work`).
    last_work_ns: u64,
    /// Whether the daemon samples at its idle interval.
    idle: bool,
}

impl DamonFeed {
    fn new(params: &DamonSourceToml) -> Self {
        DamonFeed {
            params: params.clone(),
            kdamond: None,
            next_read_ns: params.read_interval_ms.saturating_mul(1_000_000),
            last_work_ns: 0,
            idle: false,
        }
    }

    /// The daemon's pace (crates/tierd-daemon/src/daemon.rs `update_pace()`): idle after
    /// `idle_after_ms` without work, back at the first work. The kdamond's sampling interval
    /// moves into the idle range (`idle_min_sample_us..=idle_max_sample_us`) or back into the
    /// active one, and the kernel's tuning, with a goal, goes on within it (the daemon's
    /// `set_pace` -> `DamonMonitor::set_sample_range`). Returns whether the daemon went idle
    /// now.
    fn pace(&mut self, now: u64, work: bool) -> bool {
        if work {
            self.last_work_ns = now;
        }
        if self.params.idle_after_ms == 0 || self.params.idle_min_sample_us == 0 {
            return false;
        }
        let idle = now.saturating_sub(self.last_work_ns) >= self.params.idle_after_ms * 1_000_000;
        let changed = idle != self.idle;
        if changed {
            self.idle = idle;
            let (min, max) = if idle {
                (
                    self.params.idle_min_sample_us,
                    self.params.idle_max_sample_us,
                )
            } else {
                self.params.active_range()
            };
            if let Some(k) = &mut self.kdamond {
                k.set_sample_range(min, max);
            }
        }
        changed && idle
    }

    /// Runs the kdamond over the step and turns each read that falls in it into
    /// observations; `moved` says whether tierd moved pages in the last step (work, for the
    /// pace).
    fn step(&mut self, ctx: &mut Ctx<'_>, out: &mut Vec<Observation>, moved: bool) {
        let kdamond = self.kdamond.get_or_insert_with(|| {
            let monitored: u64 = ctx
                .mem
                .regions()
                .iter()
                .filter(|r| r.alive)
                .map(|r| u64::from(r.units) * r.unit_pages() * tierd_engine::types::PAGE_SIZE)
                .sum();
            let mut p = self.params.monitor();
            let (min, max) = tierd_engine::regions::fitted_nr_regions(
                monitored,
                self.params.max_region_kib.saturating_mul(1024),
                (u64::from(p.min_nr_regions), u64::from(p.max_nr_regions)),
            );
            p.min_nr_regions = u32::try_from(min).unwrap_or(u32::MAX);
            p.max_nr_regions = u32::try_from(max).unwrap_or(u32::MAX);
            crate::damon::Damon::new(&p)
        });
        kdamond.step(ctx);
        let end = ctx.now + ctx.dt;
        let mut work = moved;
        while self.next_read_ns <= end {
            let t = self.next_read_ns.max(ctx.now);
            work |= read_regions(ctx, kdamond, &self.params, Nanos(t), out);
            // The daemon reads at most once per aggregation (`DamonFeed::poll`): a second
            // read of the same aggregation would report its accesses twice.
            let aggr_ns = kdamond.params().aggr_us.saturating_mul(1000);
            self.next_read_ns = self
                .next_read_ns
                .saturating_add((self.params.read_interval_ms.max(1) * 1_000_000).max(aggr_ns));
        }
        if self.pace(end, work) {
            // The daemon's `idle_periods`.
            ctx.acct.count("tierd_idle_periods", 1);
        }
    }
}

/// One read of DAMON's regions, as the daemon's `locate` turns them into observations
/// (crates/tierd-linux/src/source/locate.rs, with the placement cache off): the accessed
/// regions hottest first within `max_pages_per_pass` base pages; the floor relative to the
/// hottest region; every page of a covered region on the fast tier observed, and its pages on
/// slower tiers only if their part of the region's heat reaches the floor
/// ([`tierd_engine::regions::slow_part_is_hot`]); each weighted by the region's
/// `nr_accesses` of the last complete aggregation (what the `damon_aggregated` tracepoint
/// reports). Returns whether the read found work for the daemon's pace: a slow page observed,
/// or an accessed region with slow pages kept from the engine by the floors (the daemon's
/// `hidden_below_floor`: a few hot pages DAMON still sees diluted).
fn read_regions(
    ctx: &Ctx<'_>,
    kdamond: &crate::damon::Damon,
    p: &DamonSourceToml,
    now: Nanos,
    out: &mut Vec<Observation>,
) -> bool {
    use tierd_engine::regions::{fast_heat_estimate, relative_min_nr_accesses, slow_part_is_hot};
    let mut accessed: Vec<&crate::damon::DamonRegion> = kdamond
        .regions()
        .iter()
        .filter(|r| r.last_nr_accesses >= 1)
        .collect();
    // Hottest first (stable: address order among equals), as the daemon's sources order them.
    accessed.sort_by_key(|r| std::cmp::Reverse(r.last_nr_accesses));
    let hottest = accessed.first().map_or(0, |r| r.last_nr_accesses);
    let min_acc = relative_min_nr_accesses(hottest, p.min_nr_accesses, p.min_relative_permille);
    let topo = ctx.mem.topology();
    let mut budget = p.max_pages_per_pass;
    // The units located within the budget, each with its node, region after region; per
    // covered region, its part of `located` and (nr_accesses, fast, present) in base pages.
    let mut located: Vec<(UnitId, tierd_engine::types::NodeId)> = Vec::new();
    let mut parts: Vec<std::ops::Range<usize>> = Vec::new();
    let mut counts: Vec<(u32, u64, u64)> = Vec::new();
    for r in accessed {
        if budget == 0 {
            break;
        }
        let first = located.len();
        let (mut fast, mut present) = (0u64, 0u64);
        // A unit astride two accessed regions is read in both, where page by page each
        // would read its own pages of it (rare: regions are mostly many units long).
        let slots = kdamond.slots_in(r);
        for a in slots.start..slots.end.min(ctx.mem.units()) {
            if budget == 0 {
                break;
            }
            let u = UnitId(a);
            if !ctx.mem.region_of(u).alive {
                continue;
            }
            let (pages, node) = (ctx.mem.unit_pages(u), ctx.mem.node_of(u));
            budget = budget.saturating_sub(pages);
            present += pages;
            if topo.is_toptier(node) {
                fast += pages;
            }
            located.push((u, node));
        }
        parts.push(first..located.len());
        counts.push((r.last_nr_accesses, fast, present));
    }
    let fast_heat = fast_heat_estimate(&counts, hottest);
    let mut work = false;
    for (part, &(nr, fast, present)) in parts.into_iter().zip(&counts) {
        let keep_slow = slow_part_is_hot(nr, fast_heat, fast, present - fast, min_acc);
        work |= present > fast && (keep_slow || nr < min_acc);
        for &(u, node) in &located[part] {
            if !keep_slow && !topo.is_toptier(node) {
                continue;
            }
            out.push(Observation {
                page: page_ref(ctx, u),
                page_node: node,
                accessing_node: None,
                source: SourceKind::AccessedBitScan,
                time: now,
                weight: nr,
            });
        }
    }
    work
}

impl Tierd {
    /// tierd with `params` on a machine with `topo`, `nprocs` processes and cgroup lows.
    ///
    /// # Errors
    /// The engine's configuration error.
    pub fn new(
        params: &TierdToml,
        topo: Topology,
        nprocs: usize,
        lows: CgroupLows,
    ) -> Result<Tierd, tierd_engine::ConfigError> {
        let mut cfg = params.engine.clone();
        let mut sources = params.sources.clone();
        if params.damon.is_some() {
            // DAMON's regions reach the engine as accessed-bit findings.
            sources.push(SourceKind::AccessedBitScan);
        }
        cfg.sources = tierd_engine::SourceMask::of(&sources);
        if params.kernel_pghot {
            // The kernel's pghot has one rule, the fixed threshold (pghot_freq_threshold
            // within the window, the free-space bypass, the latency threshold): a row that
            // models it must not run tierd's relative threshold, whatever its table says.
            cfg.threshold = ThresholdMode::Fixed;
            // The kernel has no demoter besides reclaim: kswapd, woken when a promotion finds
            // no room (SimBackend::migrate) or when free memory falls below the low
            // watermark, demotes. tierd's demoter, its headroom below the demotion high
            // watermark (the engine's room test) and its ping-pong idle filter go with it.
            cfg.demotion.enabled = false;
        }
        let tuner = IntervalTuner::new(params.abit_interval_ms, params.abit_goal);
        let engine = Engine::new(cfg, grained_topology(topo, params.grain))?;
        let scanner = params
            .sources
            .contains(&SourceKind::HintFault)
            .then(|| Scanner::new(&params.numab, true, nprocs));
        Ok(Tierd {
            engine,
            params: params.clone(),
            scanner,
            faults: Vec::new(),
            kernel: params
                .kernel_numab
                .as_ref()
                .map(|k| crate::numab::Numab::new(k, nprocs).toptier_only()),
            // Idle page tracking marks pages idle at the start and reads them one interval
            // later: the first report comes after one interval.
            next_abit_ns: tuner.interval_ns(),
            last_abit_ns: 0,
            tuner,
            history: ScanHistory::default(),
            lows,
            owners_sent: false,
            bufs: StepBuffers::default(),
            obs: Vec::new(),
            kswapd_woken: Vec::new(),
            damon: params.damon.as_ref().map(DamonFeed::new),
            batches_seen: 0,
        })
    }

    /// The engine (for its stats).
    #[must_use]
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}

/// The simulated machine as the engine's backend, for one step.
struct SimBackend<'c, 'm> {
    ctx: &'c mut Ctx<'m>,
    observations: Vec<Observation>,
    updates: Vec<OwnerUpdate>,
    lows: &'c CgroupLows,
    kernel_pghot: bool,
    kswapd_woken: &'c mut Vec<tierd_engine::types::NodeId>,
    /// `machine.grain`: the engine's memory is this many times smaller (see
    /// [`grained_topology`]).
    grain: u64,
}

/// The machine as the engine of a grained machine sees it (`TierdToml::grained`): it is
/// given one 4 KiB page per unit of `grain` base pages, so every amount of memory it weighs
/// pages against (capacities, free memory, watermarks, cgroup usage and memory.low) is
/// divided by the grain, as `Scenario::scaled` divides the machine. Its tests then decide
/// as at grain 1: a unit planned takes one page of a free amount `grain` times smaller.
/// Exact but for `pgdat_free_space_enough()`'s floor of 1 GiB (`free_space_margin`), which
/// counts `grain` GiB of the real node: the same as at grain 1 while `grain` is at most the
/// node's size over 16 GiB (8 for seed C's 128 GiB nodes).
fn grained_topology(topo: Topology, grain: u32) -> Topology {
    if grain <= 1 {
        return topo;
    }
    let (mut specs, distance) = topo.describe();
    for s in &mut specs {
        s.capacity = Bytes(s.capacity.0 / u64::from(grain));
    }
    // A node too small to divide keeps the machine as it was (the engine then sees units
    // as pages of the real machine: the room it plans is `grain` times too large).
    Topology::new(specs, distance).unwrap_or(topo)
}

/// `EAGAIN`: what `migrate_misplaced_folio_prepare()` returns for a target that is not
/// balanced (include/uapi/asm-generic/errno-base.h).
const EAGAIN: i32 = 11;

#[derive(Debug, thiserror::Error)]
#[error("the simulator backend does not fail")]
struct NoError;

fn page_ref(ctx: &Ctx<'_>, u: UnitId) -> PageRef {
    page_ref_in(ctx.mem.region_of(u), u)
}

/// [`page_ref`] when the unit's region is known (a sample knows its class).
///
/// The engine is given one page per unit (see [`grained_topology`]), at consecutive virtual
/// pages from the region's start: a grained region's units, `grain` pages apart in the
/// simulated address space, are packed, so the engine's per-page tables (indexed by virtual
/// page in chunks) hold a unit per slot rather than one in every `grain`. The order of units
/// is kept, so nothing the engine does in address order changes; at grain 1 the address is
/// the unit's own.
fn page_ref_in(r: &crate::memory::Region, u: UnitId) -> PageRef {
    let vpn = Vpn(r.start_vpn.0 + u64::from(u.0 - r.first_unit) * engine_pages(r));
    PageRef::sized(r.space, vpn, r.page_size)
}

/// Base pages of one unit as the engine sees it: its page size's (a grained unit is one
/// base page to the engine).
fn engine_pages(r: &crate::memory::Region) -> u64 {
    r.page_size.nr_pages().0
}

/// The unit the engine's page `vpn` of `space` stands for ([`page_ref_in`]'s inverse).
fn unit_of_engine_page(mem: &crate::memory::Memory, space: SpaceId, vpn: Vpn) -> Option<UnitId> {
    mem.unit_at_stride(space, vpn, engine_pages)
}

impl Backend for SimBackend<'_, '_> {
    type Error = NoError;

    fn drain_observations(
        &mut self,
        _now: Nanos,
        out: &mut Vec<Observation>,
    ) -> Result<(), NoError> {
        // Swap rather than copy when `out` is empty (it is, from `step`): both buffers keep
        // their capacity, and `Tierd::step` takes the other one back for the next step.
        if out.is_empty() {
            std::mem::swap(out, &mut self.observations);
        } else {
            out.append(&mut self.observations);
        }
        Ok(())
    }

    fn drain_owner_updates(&mut self, out: &mut Vec<OwnerUpdate>) -> Result<(), NoError> {
        out.append(&mut self.updates);
        Ok(())
    }

    fn usage(&mut self, _now: Nanos) -> Result<SystemUsage, NoError> {
        let mut u = SystemUsage::default();
        let wsf = self.ctx.kernel.watermark_scale_factor;
        for (id, m) in self.ctx.mem.nodes() {
            let promo = Watermarks::of(m.capacity, wsf).promo;
            u.nodes.insert(
                *id,
                NodeUsage {
                    free: Bytes(m.free().bytes().0 / self.grain),
                    promo_watermark: Some(Bytes(promo.bytes().0 / self.grain)),
                },
            );
        }
        // Fast-tier usage per cgroup, from the classes' placement.
        let topo = self.ctx.mem.topology();
        let mut fast: BTreeMap<CgroupId, u64> = BTreeMap::new();
        for c in self.ctx.mem.classes() {
            let r = &self.ctx.mem.regions()[c.region.0 as usize];
            if !r.alive {
                continue;
            }
            let on_fast: u64 = c
                .units_on
                .iter()
                .filter(|(n, _)| topo.is_toptier(**n))
                .map(|(_, k)| *k)
                .sum();
            *fast.entry(r.cgroup).or_default() += on_fast * r.unit_pages() * 4096;
        }
        for (cg, low) in self.lows {
            u.cgroups.insert(
                *cg,
                CgroupUsage {
                    low: Bytes(low.0 / self.grain),
                    fast_usage: Bytes(fast.get(cg).copied().unwrap_or(0) / self.grain),
                },
            );
        }
        Ok(u)
    }

    fn migrate(&mut self, _now: Nanos, batch: &MigrationBatch) -> Result<MigrationReport, NoError> {
        // One move_pages(2) call per process in the batch.
        let mut spaces: Vec<SpaceId> = batch.pages.iter().map(|m| m.page.space).collect();
        spaces.sort_unstable();
        spaces.dedup();
        // pghot's kmigrated has no syscall per batch but walks hot sections; tierd pays one
        // move_pages(2) call per process in the batch.
        let (per_call, per_page) = if self.kernel_pghot {
            (0.0, KMIGRATED_NS_PER_PAGE)
        } else {
            (MOVE_PAGES_CALL_NS, MOVE_PAGES_NS_PER_PAGE)
        };
        let mut cpu = per_call * spaces.len() as f64;
        let units: Vec<Option<crate::memory::UnitId>> = batch
            .pages
            .iter()
            .map(|m| unit_of_engine_page(self.ctx.mem, m.page.space, m.page.vpn))
            .collect();
        // Touch every unit's state before moving any, so the cache misses overlap.
        let warm = units
            .iter()
            .flatten()
            .fold(0u64, |a, &u| a ^ self.ctx.mem.warm(u));
        std::hint::black_box(warm);
        let outcomes: Vec<MoveOutcome> = units
            .iter()
            .map(|&u| {
                let Some(u) = u else {
                    return MoveOutcome::Failed(tierd_engine::MoveError::Fault);
                };
                let pages = self.ctx.mem.unit_pages(u);
                cpu += per_page * pages as f64;
                if self.kernel_pghot
                    && self.ctx.mem.topology().is_toptier(batch.target)
                    && !crate::mechanism::migrate_balanced_pgdat(self.ctx, batch.target, pages)
                {
                    // kmigrated's migrate_misplaced_folio_prepare(): no room above the
                    // target's high watermark, so no move, and kswapd is woken there to make
                    // room for the next attempt.
                    self.ctx.acct.count("pgpromote_fail_unbalanced", pages);
                    if !self.kswapd_woken.contains(&batch.target) {
                        self.kswapd_woken.push(batch.target);
                        self.ctx.acct.count("kswapd_wakeups_promotion", 1);
                        crate::mechanism::kswapd_wake(self.ctx, batch.target);
                    }
                    return MoveOutcome::Failed(tierd_engine::MoveError::Other(EAGAIN));
                }
                match self.ctx.migrate(u, batch.target) {
                    Ok(()) => MoveOutcome::Moved(batch.target),
                    Err(e) => MoveOutcome::Failed(e),
                }
            })
            .collect();
        self.ctx.charge_promoter(cpu);
        Ok(MigrationReport::for_batch(batch, outcomes))
    }
}

impl Tierd {
    fn owner_updates(ctx: &Ctx<'_>) -> Vec<OwnerUpdate> {
        let mut out = Vec::new();
        for p in ctx.procs {
            out.push(OwnerUpdate::Owner {
                space: p.space,
                owner: Owner {
                    pid: p.space.0,
                    cgroup: p.cgroup,
                },
            });
            let ranges: Vec<(Vpn, Vpn, tierd_engine::policy::MemPolicy)> = ctx
                .mem
                .regions()
                .iter()
                .filter(|r| r.space == p.space && r.alive)
                .map(|r| {
                    (
                        r.start_vpn,
                        Vpn(r.start_vpn.0 + u64::from(r.units) * engine_pages(r)),
                        r.policy,
                    )
                })
                .collect();
            out.push(OwnerUpdate::Policies {
                space: p.space,
                ranges,
            });
        }
        out
    }

    fn hw_samples(&self, ctx: &mut Ctx<'_>, out: &mut Vec<Observation>) {
        let mut samples = Vec::new();
        draw_samples(ctx, self.params.sample_period, &mut samples);
        for smp in samples {
            out.push(Observation {
                page: page_ref_in(
                    &ctx.mem.regions()[ctx.mem.class(smp.class).region.0 as usize],
                    smp.unit,
                ),
                page_node: ctx.mem.node_of(smp.unit),
                accessing_node: Some(smp.node),
                source: SourceKind::HwSample,
                time: Nanos(smp.time_ns),
                weight: 1,
            });
        }
    }

    fn abit_scan(&mut self, ctx: &mut Ctx<'_>, out: &mut Vec<Observation>) {
        let end = ctx.now + ctx.dt;
        while self.next_abit_ns < end {
            let t = self.next_abit_ns.max(ctx.now);
            // The scan's observations, all at `t`, go where a stable sort by time would put
            // them: after every earlier observation at or before `t`, before the later ones
            // (set aside and put back after them). With what came before in time order, the
            // step's observations stay in order and are not sorted: sorting millions of them
            // to move the few samples after `t` was 4 % of seed A's T1 row. Out of order, the
            // scan appends, and the step's sort places it as before. Same order either way.
            let later = if out.is_sorted_by_key(|o| o.time) {
                let at = out.partition_point(|o| o.time.0 <= t);
                out.split_off(at)
            } else {
                Vec::new()
            };
            // The bits read now were cleared at the last scan (or when tracking began).
            let tau = (self.next_abit_ns - self.last_abit_ns) as f64 / 1e9;
            self.last_abit_ns = self.next_abit_ns;
            self.history.begin_scan(ctx.mem.units() as usize);
            let topo = ctx.mem.topology().clone();
            let mut scanned = 0u64;
            // Slow-tier pages scanned and found accessed: the share the interval is tuned on.
            let (mut slow_scanned, mut slow_found) = (0u64, 0u64);
            for ci in 0..ctx.mem.classes().len() {
                let class = ctx.mem.class(crate::memory::ClassId(ci as u16)).clone();
                // Idle page tracking sees every node: the demoter needs the recency of fast
                // pages as much as the promoter needs the slow ones.
                let units = u64::from(class.len);
                let region = &ctx.mem.regions()[class.region.0 as usize];
                if units == 0 || !region.alive {
                    continue;
                }
                let unit_pages = region.unit_pages();
                // A grained unit's pages are each read (and charged); one of them, at one
                // page's rate, stands for all: found, it is found on each of its pages.
                let grain = u64::from(region.grain);
                scanned += units * grain;
                slow_scanned += class
                    .units_on
                    .iter()
                    .filter(|(n, _)| !topo.is_toptier(**n))
                    .map(|(_, k)| *k)
                    .sum::<u64>()
                    * unit_pages;
                let rate = ctx.load.class_rate[ci];
                if rate <= 0.0 {
                    continue;
                }
                // Each unit is found accessed at most once per scan, with probability
                // 1 - exp(-its page's rate x interval) (a unit of a base-page region; a THP's
                // head carries the folio's bit, at the folio's rate).
                // The probability of the last rate seen: a uniform class has one for all.
                let mut last_p: Option<(f64, f64)> = None;
                let per_page = 1.0 / grain as f64;
                for (idx, u) in class.iter_units() {
                    let unit_rate = rate * class.weight(idx) / class.total_weight * per_page;
                    let p = match last_p {
                        Some((r, p)) if r == unit_rate => p,
                        _ => {
                            let p = 1.0 - (-unit_rate * tau).exp();
                            last_p = Some((unit_rate, p));
                            p
                        }
                    };
                    if ctx.rng.gen::<f64>() >= p {
                        continue;
                    }
                    let node = ctx.mem.node_of(u);
                    if !topo.is_toptier(node) {
                        slow_found += unit_pages;
                    }
                    out.push(Observation {
                        page: page_ref(ctx, u),
                        page_node: node,
                        accessing_node: None,
                        source: SourceKind::AccessedBitScan,
                        time: Nanos(t),
                        weight: self.history.found(u.0 as usize),
                    });
                }
            }
            out.extend(later);
            ctx.acct.count("abit_pages_scanned", scanned);
            ctx.acct.count("abit_scans", 1);
            ctx.charge_promoter(scanned as f64 * ABIT_SCAN_NS_PER_PAGE);
            if self.tuner.after_scan(slow_found, slow_scanned) {
                ctx.acct.count("abit_interval_tunings", 1);
            }
            self.next_abit_ns += self.tuner.interval_ns();
        }
    }
}

impl Mechanism for Tierd {
    fn step(&mut self, ctx: &mut Ctx<'_>) {
        let mut obs = std::mem::take(&mut self.obs);
        obs.clear();
        self.kswapd_woken.clear();
        let mut updates = Vec::new();
        if !self.owners_sent {
            updates = Self::owner_updates(ctx);
            self.owners_sent = true;
        }
        if self.params.sources.contains(&SourceKind::HwSample) {
            self.hw_samples(ctx, &mut obs);
        }
        if let Some(scanner) = &mut self.scanner {
            self.faults.clear();
            scanner.step(ctx, &mut self.faults);
            for f in &self.faults {
                obs.push(Observation {
                    page: page_ref(ctx, f.unit),
                    page_node: ctx.mem.node_of(f.unit),
                    accessing_node: Some(f.node),
                    source: SourceKind::HintFault,
                    time: Nanos(f.time_ns),
                    weight: 1,
                });
            }
        }
        if self.params.sources.contains(&SourceKind::AccessedBitScan) {
            self.abit_scan(ctx, &mut obs);
        }
        if let Some(feed) = &mut self.damon {
            let batches = self.engine.stats().engine.plan_batches;
            feed.step(ctx, &mut obs, batches != self.batches_seen);
            self.batches_seen = batches;
        }
        if let Some(k) = &mut self.kernel {
            k.step(ctx);
        }
        // Most steps' observations are one source's, already in time order: the check is a
        // read, where the sort always set up its scratch.
        if !obs.is_sorted_by_key(|o| o.time) {
            obs.sort_by_key(|o| o.time);
        }
        // A grained unit's observation stands for one of each of its pages.
        let grain = f64::from(self.params.grain.max(1));
        ctx.charge_promoter(obs.len() as f64 * grain * ENGINE_NS_PER_OBSERVATION);
        let now = Nanos(ctx.now + ctx.dt);
        let mut backend = SimBackend {
            ctx,
            observations: obs,
            updates,
            lows: &self.lows,
            kernel_pghot: self.params.kernel_pghot,
            kswapd_woken: &mut self.kswapd_woken,
            grain: u64::from(self.params.grain.max(1)),
        };
        // The simulator backend never fails.
        let _ = tierd_engine::step(&mut self.engine, &mut backend, now, &mut self.bufs);
        self.obs = std::mem::take(&mut backend.observations);
        // Mirror the engine's counters as vmstat-like counters; in a grained machine those
        // per page or per observation count each unit's pages.
        let grain = u64::from(self.params.grain.max(1));
        for (d, v) in self.engine.stats().engine.values() {
            if d.kind == tierd_engine::stats::StatKind::Counter && v > 0 {
                let v = if counts_pages(d) { v * grain } else { v };
                match backend.ctx.acct.vmstat.get_mut(d.name) {
                    Some(x) => *x = v,
                    None => {
                        backend.ctx.acct.vmstat.insert(d.name.to_string(), v);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tierd_engine::topology::two_tier;

    use super::*;

    fn tierd(toml_text: &str) -> Tierd {
        let params: TierdToml = toml::from_str(toml_text).expect("parses");
        let topo = two_tier(Bytes(1 << 30), Bytes(1 << 32));
        Tierd::new(&params, topo, 1, CgroupLows::new()).expect("valid")
    }

    #[test]
    fn a_kernel_pghot_row_runs_the_fixed_threshold() {
        // tierd's own default is relative...
        let t = tierd(r#"sources = ["hw_sample"]"#);
        assert_eq!(t.engine().config().threshold, ThresholdMode::Relative);
        // ...but the kernel has only the fixed rule, whatever the row's table says.
        let k = tierd(
            r#"sources = ["hw_sample"]
kernel_pghot = true
engine = { threshold = "relative" }"#,
        );
        assert_eq!(k.engine().config().threshold, ThresholdMode::Fixed);
    }

    #[test]
    fn a_kernel_pghot_row_has_no_demoter_of_tierd() {
        // tierd demotes on its own watermarks...
        let t = tierd(r#"sources = ["hint_fault"]"#);
        assert!(t.engine().config().demotion.enabled);
        // ...the kernel only through reclaim (kswapd), whatever the row's table says.
        let k = tierd(
            r#"sources = ["hint_fault"]
kernel_pghot = true
engine = { demotion = { enabled = true } }"#,
        );
        assert!(!k.engine().config().demotion.enabled);
    }
}
