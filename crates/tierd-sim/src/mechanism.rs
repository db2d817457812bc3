//! The interface every promotion mechanism implements, and what they share: the step
//! context, the accounting of costs and counters, and the kernel's reclaim (kswapd demotion).
//!
//! # Memory cgroups
//!
//! [`Memcgs`] holds each cgroup's `memory.low` and `memory.high`. All cgroups are children of
//! the root, so a cgroup's effective protection is its own setting capped by its usage
//! (mm/memcontrol.c `effective_protection()` without siblings to share with). Usage is what
//! the kernel charges: resident pages on every node plus the page tables that map them
//! ([`cgroup_usage`]). Demotion does not uncharge a page (the folio keeps its memcg on the
//! lower tier), so reclaim that can only demote never lowers a cgroup's usage.
//!
//! - **memory.low** ([`demote_coldest`] without a cgroup, i.e. kswapd and direct reclaim):
//!   mm/vmscan.c `shrink_node_memcgs()` skips a cgroup for which `mem_cgroup_below_low()`
//!   holds (usage at most its effective low), and reclaims it only when a pass over the
//!   others left the goal unmet (`do_try_to_free_pages()` retries with `memcg_low_reclaim`
//!   after `memcg_low_skipped`). With the per-cgroup tiering RFC ([`KernelKnobs::memcg_tiering`],
//!   Kaiyang Zhao, 2024, patch 3/4) reclaim of a top-tier node compares the cgroup's
//!   top-tier usage with `locallow = low x top-tier capacity / all capacity` instead.
//! - **memory.high**: see `World::cgroup_high` in [`crate::sim`].
//!
//! # Reclaim models
//!
//! [`ReclaimModel::Coldest`] (the default) demotes the lowest access rates first, at once;
//! [`ReclaimModel::Lru`] runs the kernel's active/inactive LRU as a two-handed clock with a
//! bounded scan rate ([`crate::memory::Lru`], `demote_lru`), so pages touched more often than
//! the inactive list turns over cannot be told apart and cannot be reclaimed.

use std::collections::BTreeMap;

use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use tierd_engine::types::{Bytes, CgroupId, NodeId, Pages};
use tierd_engine::MoveError;

use crate::memory::{ClassId, Memory, UnitId};
use crate::workload::{Load, Process};

/// The random number generator of a run: ChaCha8, seeded from the scenario seed, so the same
/// seed gives the same run on every platform.
pub type SimRng = ChaCha8Rng;

/// Costs and counters of one configuration's run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Accounting {
    /// vmstat-like counters, named as the kernel names them (`numa_hint_faults`,
    /// `pgpromote_success`, `damos_sz_applied`, `hwhint_total_events`, ...).
    pub vmstat: BTreeMap<String, u64>,
    /// Time charged to each process's threads during the current step (hint-fault handling,
    /// sample interrupts), ns; turned into a per-access tax for the next step.
    pub app_overhead_ns: Vec<f64>,
    /// All time ever charged to application threads, ns.
    pub app_overhead_total_ns: f64,
    /// CPU time of the mechanism's own thread (kdamond, kmigrated, the tierd daemon), ns.
    pub promoter_cpu_ns: f64,
    /// Base pages moved to a faster tier.
    pub promoted_pages: u64,
    /// Base pages moved to a slower tier.
    pub demoted_pages: u64,
}

impl Accounting {
    /// Adds `n` to a counter.
    pub fn count(&mut self, name: &str, n: u64) {
        // Look up before inserting: counters are bumped per event, keys rarely new.
        match self.vmstat.get_mut(name) {
            Some(x) => *x += n,
            None => {
                self.vmstat.insert(name.to_string(), n);
            }
        }
    }
    /// A counter's value.
    #[must_use]
    pub fn get(&self, name: &str) -> u64 {
        self.vmstat.get(name).copied().unwrap_or(0)
    }
}

/// What a mechanism sees and may do during one step `[now, now + dt)`.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// Start of the step, ns since the start of the run.
    pub now: u64,
    /// Step length, ns.
    pub dt: u64,
    /// The machine's memory.
    pub mem: &'a mut Memory,
    /// The workload's access rates during the step.
    pub load: &'a Load,
    /// The processes.
    pub procs: &'a [Process],
    /// The run's random numbers.
    pub rng: &'a mut SimRng,
    /// Costs and counters.
    pub acct: &'a mut Accounting,
    /// Scenario-wide switches the kernel mechanisms read.
    pub kernel: &'a KernelKnobs,
    /// The cgroups' memory.low and memory.high.
    pub memcg: &'a Memcgs,
}

/// Memory-cgroup limits the kernel's reclaim reads (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Memcgs {
    /// `memory.low` by cgroup.
    pub low: BTreeMap<CgroupId, Bytes>,
    /// `memory.high` by cgroup.
    pub high: BTreeMap<CgroupId, Bytes>,
}

/// No cgroup limits (tests and scenarios without cgroups).
pub static NO_MEMCGS: Memcgs = Memcgs {
    low: BTreeMap::new(),
    high: BTreeMap::new(),
};

/// Page-table entries per page-table page on x86-64 (`PTRS_PER_PTE`, `PTRS_PER_PMD`: 8-byte
/// entries in a 4 KiB table). **Derived** from the architecture. A 4 KiB mapping costs one
/// PTE page per 512 pages, a 2 MiB mapping one PMD page per 512 folios; user page tables are
/// charged to the cgroup (include/asm-generic/pgalloc.h `GFP_PGTABLE_USER` has
/// `__GFP_ACCOUNT`), which is what puts a cgroup mapping 256 GiB at about 256.5 GiB of usage.
pub const PTES_PER_TABLE: u64 = 512;

/// A cgroup's usage as the kernel charges it: (all pages, base pages on top-tier nodes).
/// All pages are its resident pages on every node plus its page tables ([`PTES_PER_TABLE`]);
/// the top-tier figure is the RFC's `get_cgroup_local_usage()` (resident pages only).
#[must_use]
pub fn cgroup_usage(mem: &Memory, cg: CgroupId) -> (u64, u64) {
    let (mut all, mut top) = (0u64, 0u64);
    for (i, r) in mem.regions().iter().enumerate() {
        if !r.alive || r.cgroup != cg {
            continue;
        }
        let mut pages = 0;
        for (n, p) in mem.region_placement(crate::memory::RegionId(i as u32)) {
            pages += p.0;
            if mem.topology().is_toptier(n) {
                top += p.0;
            }
        }
        // One table page per PTES_PER_TABLE entries; an entry maps a base page or a THP
        // (a grained unit is `grain` entries).
        let entries = pages / r.page_size.nr_pages().0.max(1);
        all += pages + entries.div_ceil(PTES_PER_TABLE);
    }
    (all, top)
}

/// The share of all memory on top-tier nodes: the RFC's scaling of `memory.low` (and the
/// tier-aware `memory.high`) to top-tier memory.
#[must_use]
pub fn toptier_share(mem: &Memory) -> f64 {
    let topo = mem.topology();
    let (mut top, mut all) = (0u64, 0u64);
    for n in topo.nodes() {
        all += n.capacity.0;
        if topo.is_toptier(n.id) {
            top += n.capacity.0;
        }
    }
    if all == 0 {
        1.0
    } else {
        top as f64 / all as f64
    }
}

impl Memcgs {
    /// Whether reclaim of `node` skips cgroup `cg` on its first pass: `mem_cgroup_below_low()`
    /// with total usage (stock), or top-tier usage against `locallow` when `tiering` and `node`
    /// is top-tier (the RFC's patch 3/4).
    #[must_use]
    pub fn below_low(&self, mem: &Memory, cg: CgroupId, node: NodeId, tiering: bool) -> bool {
        let Some(low) = self.low.get(&cg).map(|b| b.pages().0).filter(|l| *l > 0) else {
            return false;
        };
        let (all, top) = cgroup_usage(mem, cg);
        if tiering && mem.topology().is_toptier(node) {
            top as f64 <= low as f64 * toptier_share(mem)
        } else {
            all <= low
        }
    }
}

impl Ctx<'_> {
    /// Charges `ns` of work to process `p`'s threads.
    pub fn charge_app(&mut self, p: usize, ns: f64) {
        if let Some(x) = self.acct.app_overhead_ns.get_mut(p) {
            *x += ns;
        }
        self.acct.app_overhead_total_ns += ns;
    }

    /// Charges `ns` to the mechanism's own thread.
    pub fn charge_promoter(&mut self, ns: f64) {
        self.acct.promoter_cpu_ns += ns;
    }

    /// Moves a unit, counting it as a promotion or demotion by the tiers involved: the path
    /// of `move_pages(2)` and DAMON's `migrate_hot` (a THP with no free 2 MiB block on `to`
    /// is split and moved as base pages, see [`Ctx::huge_block_free`]).
    ///
    /// # Errors
    /// The [`MoveError`] the move failed with (no room, region gone).
    pub fn migrate(&mut self, u: UnitId, to: NodeId) -> Result<(), MoveError> {
        self.migrate_as(u, to, MigrateReason::Split)
    }

    /// Moves a unit from a NUMA hint fault (mm/migrate.c `migrate_misplaced_folio()`,
    /// `MR_NUMA_MISPLACED`): a THP that finds no free 2 MiB block on `to` fails whole, since
    /// `migrate_pages_batch()` does not split for it ("Large folio NUMA faulting doesn't split
    /// to retry"): `thp_migration_fail` counts it.
    ///
    /// # Errors
    /// As [`Ctx::migrate`]; `NoMem` for such a THP.
    pub fn migrate_misplaced(&mut self, u: UnitId, to: NodeId) -> Result<(), MoveError> {
        self.migrate_as(u, to, MigrateReason::NoSplit)
    }

    /// Moves a unit as the kernel's reclaim does, regardless of mempolicy (see
    /// [`Memory::migrate_reclaim`]); a THP that cannot be demoted whole is split
    /// (mm/vmscan.c `shrink_folio_list()` / `demote_folio_list()` through `migrate_pages()`).
    ///
    /// # Errors
    /// As [`Ctx::migrate`].
    pub fn reclaim(&mut self, u: UnitId, to: NodeId) -> Result<(), MoveError> {
        self.migrate_as(u, to, MigrateReason::Reclaim)
    }

    /// Whether node `n` can give a 2 MiB folio to a migration. The kernel allocates the
    /// target THP without reclaim (mm/migrate.c `alloc_migration_target()` clears
    /// `__GFP_RECLAIM`, GFP_TRANSHUGE), so the allocation's low-watermark test
    /// (mm/page_alloc.c `get_page_from_freelist()`, `ALLOC_WMARK_LOW`) must pass with the
    /// folio taken: free pages at least the low watermark plus 512. Above that the model
    /// assumes a free 2 MiB block exists: its nodes hold only the scenario's pages, freed a
    /// folio at a time, and fragmentation is not modelled ([`crate::cost`]: an assumption).
    #[must_use]
    pub fn huge_block_free(&self, n: NodeId) -> bool {
        self.mem.node(n).is_some_and(|m| {
            let wm = Watermarks::of(m.capacity, self.kernel.watermark_scale_factor);
            m.free().0 >= wm.low.0 + tierd_engine::types::HPAGE_PMD_NR
        })
    }

    fn migrate_as(&mut self, u: UnitId, to: NodeId, why: MigrateReason) -> Result<(), MoveError> {
        let from = self.mem.node_of(u);
        let pages = self.mem.unit_pages(u);
        // `pages > 1` first: a base page (most moves) needs no further lookup.
        let mut thp = pages > 1 && from != to && self.mem.is_thp(u) && self.mem.region_of(u).alive;
        if thp && !self.huge_block_free(to) {
            // migrate_pages_batch(): the THP's allocation fails (-ENOMEM); it counts as a
            // failed THP, and is split and retried as base pages unless NUMA faulting.
            self.acct.count("thp_migration_fail", 1);
            if why == MigrateReason::NoSplit {
                return Err(MoveError::NoMem);
            }
            self.mem.split_thp(u);
            self.acct.count("thp_split_page", 1);
            self.acct.count("thp_migration_split", 1);
            thp = false;
        }
        if why == MigrateReason::Reclaim {
            self.mem.migrate_reclaim(u, to)?;
        } else {
            self.mem.migrate(u, to)?;
        }
        if thp {
            self.acct.count("thp_migration_success", 1);
        }
        let topo = self.mem.topology();
        match (topo.is_toptier(from), topo.is_toptier(to)) {
            (false, true) => self.acct.promoted_pages += pages,
            (true, false) => self.acct.demoted_pages += pages,
            _ => {}
        }
        Ok(())
    }
}

/// Why a unit moves, as far as THP splitting is concerned (mm/migrate.c
/// `migrate_pages_batch()`'s `nosplit`, and the mempolicy exemption of reclaim).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MigrateReason {
    /// `move_pages(2)`, DAMON: split a THP that finds no free 2 MiB block.
    Split,
    /// A NUMA hint fault (`MR_NUMA_MISPLACED`): never split.
    NoSplit,
    /// Demotion by reclaim: split, and mempolicy does not apply.
    Reclaim,
}

/// Machine-wide kernel settings that the models of kernel mechanisms read.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct KernelKnobs {
    /// `/sys/kernel/mm/numa/demotion_enabled`: kswapd demotes to the next tier instead of
    /// reclaiming.
    pub demotion_enabled: bool,
    /// `vm.watermark_scale_factor` (default 10 = 0.1 % of a node per watermark step).
    pub watermark_scale_factor: u32,
    /// Whether NUMA balancing's tiering mode is on: kswapd then balances top-tier nodes up to
    /// the promotion watermark (2022 "memory tiering: hot page selection" series).
    pub tiering_kswapd: bool,
    /// The per-cgroup promotion/demotion control RFC (Kaiyang Zhao, 2024): memory.low
    /// protects top-tier usage from demotion, NUMA balancing scans less for a cgroup over its
    /// top-tier protection, and memory.high is applied to top-tier usage scaled the same way.
    pub memcg_tiering: bool,
    /// How reclaim chooses the pages it demotes.
    pub reclaim: ReclaimModel,
}

impl Default for KernelKnobs {
    fn default() -> Self {
        KernelKnobs {
            demotion_enabled: false,
            watermark_scale_factor: 10,
            tiering_kswapd: false,
            memcg_tiering: false,
            reclaim: ReclaimModel::Coldest,
        }
    }
}

/// How reclaim chooses what to demote (scenario key `machine.reclaim`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReclaimModel {
    /// The lowest access rates first, at once: an oracle of the LRU, which never mistakes a
    /// hot page for a cold one and never runs out of time. The model of every scenario
    /// calibrated before the LRU model existed.
    Coldest,
    /// The kernel's LRU ([`crate::memory::Lru`]): a page is demoted when it went untouched
    /// while it sat on the inactive list, and reclaim scans at a bounded rate, so a node full
    /// of pages touched more often than the inactive list turns over cannot be reclaimed.
    Lru {
        /// Folios (base pages or THPs) one reclaimer visits per second, already scaled with the
        /// machine.
        scan_folios_per_s: f64,
        /// Unscaled over scaled machine size (`1 / --scale`): the inactive list's share of a
        /// node is `1 / (1 + inactive_ratio)` of the node at full size ([`inactive_ratio`]),
        /// so a scaled run turns its LRU over in the same time as the full machine.
        unscale: f64,
    },
}

/// What one page costs reclaim per turn of the LRU, charged at the back hand: its visit on
/// the inactive list (isolation, the reverse-map walk of `folio_referenced()` that tests and
/// clears its accessed bits, putback or activation: mm/vmscan.c `shrink_folio_list()`) and
/// its visit on the active list that deactivated it (`shrink_active_list()`, the same walk;
/// the model's front hand, which is charged nothing itself). 1 us, about 1 M pages (4 GB) a
/// second per reclaiming thread. **Measured** (`scripts/lru-scan-cost.sh`, this host, kernel
/// 6.18, 2026-12-04): the inactive visit of a referenced 4 KiB anonymous page 0.39-0.51 us, the
/// active visit 0.51-0.70 us (perf, `shrink_active_list()` over `pgdeactivate`), 0.91-1.16 us
/// the two; an activated page keeps `PG_referenced`, so a page visits each list once a turn.
/// It depends on the CPU and the kernel. docs/simulator.md "Reclaim" shows how D's rows move
/// with it. A THP costs one visit too (the walk tests its PMD): derived from the kernel's code
/// (reclaim's steps are per folio), not measured.
pub const LRU_SCAN_NS_PER_PAGE: f64 = 1000.0;

/// `inactive_is_low()`'s `inactive_ratio` for a node of `gib` GiB: `int_sqrt(10 x gb)`, or
/// 1 under 1 GiB.
#[must_use]
pub fn inactive_ratio(gib: f64) -> u64 {
    let gb = gib.max(0.0) as u64;
    if gb == 0 {
        1
    } else {
        (10 * gb).isqrt()
    }
}

/// The watermarks of a node, in base pages: one `watermark_scale_factor` step apart, with
/// `min` taken as one step (mm/page_alloc.c `__setup_per_zone_wmarks()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watermarks {
    /// `WMARK_MIN`.
    pub min: Pages,
    /// `WMARK_LOW`: kswapd wakes below it.
    pub low: Pages,
    /// `WMARK_HIGH`: kswapd sleeps above it.
    pub high: Pages,
    /// `WMARK_PROMO`: kswapd's goal in tiering mode.
    pub promo: Pages,
}

impl Watermarks {
    /// The watermarks of a node of `capacity` pages.
    #[must_use]
    pub fn of(capacity: Pages, wsf: u32) -> Watermarks {
        let step = capacity.0 * u64::from(wsf) / 10_000;
        Watermarks {
            min: Pages(step),
            low: Pages(2 * step),
            high: Pages(3 * step),
            promo: Pages(4 * step),
        }
    }
}

/// One hardware sample (IBS-like): an access, the sampling CPU's node, the process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampled {
    /// The unit accessed.
    pub unit: UnitId,
    /// The node of the CPU that made the access.
    pub node: NodeId,
    /// The process (index).
    pub process: usize,
    /// When, ns since the start of the run.
    pub time_ns: u64,
    /// The unit's class (as [`crate::memory::Memory::class_of`] would say).
    pub class: ClassId,
}

/// Draws the hardware samples of one step: `accesses x IBS_SAMPLES_PER_ACCESS / period`
/// samples per second, each an access drawn in proportion to the workload's access rates.
/// Each sample interrupts the sampled CPU ([`crate::cost::SAMPLE_INTERRUPT_NS`], charged to
/// the application) and is counted as `hwhint_total_events`, split into
/// `hwhint_dram_accesses` / `hwhint_extmem_accesses` as the IBS memory profiler counts them.
///
/// In a grained machine (`machine.grain = k`, [`Memory::grain`]) a unit stands for `k` pages
/// of one rate, and a sample lands on one page: samples are drawn at `1 / k` of that rate, so
/// that each unit is sampled at one page's rate, as the page it stands for would be, and each
/// drawn sample stands for one sample on each of the unit's `k` pages: its interrupt is
/// charged and the counters count it `k` times. A source that keeps a record per page (tierd's
/// engine, given one page per unit) then sees each unit as one of its pages, not as one page
/// `k` times as hot.
pub fn draw_samples(ctx: &mut Ctx<'_>, period: u64, out: &mut Vec<Sampled>) {
    use rand::Rng;
    use rand_distr::{Distribution, Poisson};
    let grain = ctx.mem.grain();
    let expected =
        ctx.load.total_rate * (ctx.dt as f64 / 1e9) * crate::cost::IBS_SAMPLES_PER_ACCESS
            / period.max(1) as f64
            / grain as f64;
    if expected <= 0.0 {
        return;
    }
    let n = Poisson::new(expected).map_or(0, |d| d.sample(ctx.rng) as u64);
    let start = out.len();
    let (mut dram, mut ext) = (0, 0);
    for _ in 0..n {
        let Some((unit, node, process, class)) =
            ctx.load.sample_access_with_class(ctx.mem, ctx.rng)
        else {
            break;
        };
        let time_ns = ctx.now + ctx.rng.gen_range(0..ctx.dt.max(1));
        debug_assert_eq!(
            ctx.mem.grain_of(unit),
            grain,
            "a grained machine is uniform"
        );
        ctx.charge_app(process, crate::cost::SAMPLE_INTERRUPT_NS * grain as f64);
        out.push(Sampled {
            unit,
            node,
            process,
            time_ns,
            class,
        });
    }
    // Where the sampled pages are, in a loop of its own: each lookup is a cache miss, and
    // without the draws in between the CPU overlaps them.
    for smp in &out[start..] {
        if ctx.mem.topology().is_toptier(ctx.mem.node_of(smp.unit)) {
            dram += 1;
        } else {
            ext += 1;
        }
    }
    let (dram, ext) = (dram * grain, ext * grain);
    // Counted once per step: the counters are keyed by name.
    ctx.acct.count("hwhint_total_events", dram + ext);
    ctx.acct.count("hwhint_dram_accesses", dram);
    ctx.acct.count("hwhint_extmem_accesses", ext);
    sort_by_time_within(&mut out[start..], ctx.now, ctx.dt);
}

/// Sorts `v` by `time_ns`, stably, as `sort_by_key` would, for times drawn uniformly in
/// `[start, start + span)`: a stable counting sort into one bucket per element (by time),
/// then an insertion sort, which has only the disorder within buckets left to undo, so it
/// is linear on average. A step's samples are sorted every step of every hardware-sampling
/// row; a comparison sort of them was 3.5 % of seed A's T1 row. Times outside the span are
/// clamped to its ends' buckets, which keeps the result exact (the insertion sort finishes
/// whatever the buckets leave), only slower.
fn sort_by_time_within(v: &mut [Sampled], start: u64, span: u64) {
    let n = v.len();
    if n < 32 || span == 0 {
        v.sort_by_key(|s| s.time_ns);
        return;
    }
    // Each sample's bucket, computed once (a 128-bit division) for the count and the scatter.
    let buckets: Vec<usize> = v
        .iter()
        .map(|s| {
            let off = u128::from(s.time_ns.saturating_sub(start));
            // off < span for a time in range, so the quotient is below n; n fits u128.
            ((off * n as u128 / u128::from(span)) as usize).min(n - 1)
        })
        .collect();
    // Per bucket its count, then (an exclusive prefix sum) its first slot, then the scatter's
    // cursor.
    let mut at = vec![0u32; n];
    for &b in &buckets {
        at[b] += 1;
    }
    let mut sum = 0;
    for a in &mut at {
        (*a, sum) = (sum, sum + *a);
    }
    // Scatter in order (stable); every slot is written once, as the counts say.
    let mut sorted = vec![v[0]; n];
    for (s, &b) in v.iter().zip(&buckets) {
        sorted[at[b] as usize] = *s;
        at[b] += 1;
    }
    // Insertion sort: moves an element only past strictly later ones, so equal times keep
    // their order (stable).
    for i in 1..n {
        let x = sorted[i];
        let mut j = i;
        while j > 0 && sorted[j - 1].time_ns > x.time_ns {
            sorted[j] = sorted[j - 1];
            j -= 1;
        }
        sorted[j] = x;
    }
    v.copy_from_slice(&sorted);
}

/// A promotion strategy under test.
pub trait Mechanism: std::fmt::Debug {
    /// Runs one step: observe what the mechanism can observe, migrate what it decides to,
    /// charge the costs.
    fn step(&mut self, ctx: &mut Ctx<'_>);
}

/// No promotion at all (`numa_balancing=0`, no DAMON): the baseline.
#[derive(Debug, Default)]
pub struct Baseline;

impl Mechanism for Baseline {
    fn step(&mut self, _ctx: &mut Ctx<'_>) {}
}

/// The kernel's reclaim on top-tier nodes with demotion enabled: when a node's free memory
/// falls below its low watermark, kswapd demotes its coldest pages to the node's demotion
/// target until free memory reaches the high watermark (the promotion watermark in tiering
/// mode). Counted as `pgdemote_kswapd`.
///
/// What is demoted follows [`KernelKnobs::reclaim`]: by default ("coldest") units with the
/// lowest access rate go first, older regions before newer ones at equal rates (an idle
/// process's pages are older on the LRU than a memory eater's fresh ones); under
/// [`ReclaimModel::Lru`] the kernel's LRU test, at a bounded scan rate (`demote_lru`). Demotion ignores mempolicy, as the kernel's does
/// (mm/vmscan.c `demote_folio_list()`): that is how seed E's memory eater pushes a
/// PREFERRED_MANY(0-1) process down to node 6. Only promotion mechanisms are held to
/// nodemasks.
pub fn kswapd(ctx: &mut Ctx<'_>) {
    if !ctx.kernel.demotion_enabled {
        return;
    }
    let top: Vec<NodeId> = ctx.mem.topology().toptier_mask().iter().collect();
    for node in top {
        let Some(m) = ctx.mem.node(node) else {
            continue;
        };
        let wm = Watermarks::of(m.capacity, ctx.kernel.watermark_scale_factor);
        if m.free() < wm.low {
            // Below the low watermark kswapd wakes by itself, and balances as when woken.
            kswapd_wake(ctx, node);
        } else if let Some(goal) = ctx.mem.lru.hand(node, ctx.now).kswapd_goal {
            // Still awake from an earlier wake-up (the LRU model's budgeted scan): go on.
            kswapd_demote(ctx, node, goal);
        }
    }
}

/// `migrate_balanced_pgdat()` (mm/migrate.c): whether `node` keeps more free pages than its
/// high watermark plus the `nr` pages of the folio to move there. A NUMA-balancing or
/// kmigrated promotion that fails it is not attempted (`migrate_misplaced_folio_prepare()`
/// returns -EAGAIN) and wakes kswapd on the node ([`kswapd_wake`]).
#[must_use]
pub fn migrate_balanced_pgdat(ctx: &Ctx<'_>, node: NodeId, nr: u64) -> bool {
    ctx.mem.node(node).is_some_and(|m| {
        let wm = Watermarks::of(m.capacity, ctx.kernel.watermark_scale_factor);
        m.free().0 > wm.high.0 + nr
    })
}

/// kswapd on top-tier `node` woken by `wakeup_kswapd()` from a promotion that failed
/// [`migrate_balanced_pgdat`]: it balances the node to the promotion watermark in tiering
/// mode, to the high watermark otherwise (mm/vmscan.c `pgdat_balanced()`), demoting the
/// coldest pages to the next tier (`demote_folio_list()`, counted `pgdemote_kswapd`). Only
/// with demotion enabled (reclaim to swap is not modelled). kswapd runs asynchronously in the
/// kernel; here it runs at once, and callers wake it at most once per node per step. Under
/// the LRU model its scan is budgeted per step, and it stays awake over the following steps
/// until the node is balanced ([`crate::memory::LruHand::kswapd_goal`], driven by [`kswapd`]).
pub fn kswapd_wake(ctx: &mut Ctx<'_>, node: NodeId) {
    if !ctx.kernel.demotion_enabled {
        return;
    }
    let Some(m) = ctx.mem.node(node) else {
        return;
    };
    let wm = Watermarks::of(m.capacity, ctx.kernel.watermark_scale_factor);
    let goal = if ctx.kernel.tiering_kswapd {
        wm.promo
    } else {
        wm.high
    };
    kswapd_demote(ctx, node, goal);
}

/// kswapd's reclaim of `node` up to `goal` free pages: [`demote_coldest`]'s choice, with
/// kswapd's own scan budget under the LRU model (one kernel thread per node, beside the
/// tasks in direct reclaim).
pub fn kswapd_demote(ctx: &mut Ctx<'_>, node: NodeId, goal: Pages) {
    if let ReclaimModel::Lru { .. } = ctx.kernel.reclaim {
        // Awake until the node is balanced ([`crate::memory::LruHand::kswapd_goal`]): the
        // scan this step may not get there, and kswapd goes on in the next ones.
        let h = ctx.mem.lru.hand(node, ctx.now);
        let goal = h.kswapd_goal.map_or(goal, |g| g.max(goal));
        h.kswapd_goal = Some(goal);
        demote_lru(ctx, node, goal, None, true);
        if ctx.mem.node(node).is_none_or(|m| m.free() >= goal) {
            ctx.mem.lru.hand(node, ctx.now).kswapd_goal = None;
        }
    } else {
        demote_coldest(ctx, node, goal, None);
    }
}

/// Demotes the coldest units of `node` (of `cgroup` only, if given) until its free memory
/// reaches `goal`.
///
/// Units are taken in ascending order of their access rate across all classes (a k-way merge:
/// a uniform class yields its units at one rate, a Zipf class its least-accessed ranks
/// first), older regions first at equal rates: the kernel's LRU order, approximately.
///
/// Global reclaim (`cgroup` is `None`) skips cgroups under their memory.low on a first pass
/// and takes them only if the goal is still unmet (see the module docs).
pub fn demote_coldest(ctx: &mut Ctx<'_>, node: NodeId, goal: Pages, cgroup: Option<CgroupId>) {
    if let ReclaimModel::Lru { .. } = ctx.kernel.reclaim {
        demote_lru(ctx, node, goal, cgroup, false);
        return;
    }
    if cgroup.is_some() || ctx.memcg.low.is_empty() {
        demote_pass(ctx, node, goal, cgroup, &[]);
        return;
    }
    let protected = protected_cgroups(ctx, node);
    demote_pass(ctx, node, goal, None, &protected);
    if !protected.is_empty() && ctx.mem.node(node).is_some_and(|m| m.free() < goal) {
        // memcg_low_reclaim: nothing else was left to reclaim.
        ctx.acct.count("memcg_low_reclaim", 1);
        demote_pass(ctx, node, goal, None, &[]);
    }
}

/// The cgroups global reclaim of `node` skips on its first pass: those below their
/// memory.low (see [`Memcgs::below_low`]).
fn protected_cgroups(ctx: &Ctx<'_>, node: NodeId) -> Vec<CgroupId> {
    ctx.memcg
        .low
        .keys()
        .copied()
        .filter(|cg| {
            ctx.memcg
                .below_low(ctx.mem, *cg, node, ctx.kernel.memcg_tiering)
        })
        .collect()
}

/// The demotion target of a `pages`-page unit of `node`: the nearest of `targets` with room.
fn nearest_with_room(
    mem: &Memory,
    topo: &tierd_engine::topology::Topology,
    node: NodeId,
    targets: tierd_engine::types::NodeMask,
    pages: u64,
) -> Option<NodeId> {
    targets
        .iter()
        .filter(|t| mem.free(*t).pages().0 >= pages)
        .min_by_key(|t| topo.distance(node, *t).unwrap_or(u32::MAX))
}

/// Reclaim of `node` under the LRU model ([`ReclaimModel::Lru`], [`crate::memory::Lru`]):
/// the back hand walks the node's slots from where it stopped, the front hand clearing
/// accessed bits `inactive_share` of the node ahead of it, until free memory reaches `goal`,
/// the reclaimer's scan budget for the step is spent, or two revolutions are done.
///
/// A unit at the back hand was touched since its bit was cleared with probability
/// `1 - exp(-rate x dt)` for random touches, `min(1, dt / sweep_s)` for a sequential sweep
/// (one touch per pass, at a phase uniform over the pass), and with probability 1 if it
/// moved to the node since (its bit came with it). Touched units stay (`pgactivate`); the
/// others are demoted to the nearest lower node with room (`pgdemote_kswapd` or
/// `pgdemote_direct`). Every unit looked at is scanned (`pgscan_kswapd`, `pgscan_direct`),
/// in base pages as the kernel counts. memory.low works as in [`demote_coldest`]: global
/// reclaim skips protected cgroups (their units cost no scan), and takes them on a second
/// pass if the goal is still unmet with budget left (`memcg_low_reclaim`).
fn demote_lru(
    ctx: &mut Ctx<'_>,
    node: NodeId,
    goal: Pages,
    cgroup: Option<CgroupId>,
    kswapd: bool,
) {
    use rand::Rng;

    let ReclaimModel::Lru {
        scan_folios_per_s,
        unscale,
    } = ctx.kernel.reclaim
    else {
        return;
    };
    let topo = ctx.mem.topology().clone();
    let targets = topo.demotion_targets(node);
    let Some(slots) = ctx.mem.node(node).map(crate::memory::NodeMem::slots) else {
        return;
    };
    if targets.is_empty() || slots == 0 || ctx.mem.node(node).is_none_or(|m| m.free() >= goal) {
        return;
    }
    let gib = ctx.mem.node(node).map_or(0.0, |m| {
        m.capacity.bytes().0 as f64 / f64::from(1u32 << 30) * unscale
    });
    let inactive_share = 1.0 / (1 + inactive_ratio(gib)) as f64;
    let spread = ((f64::from(slots) * inactive_share) as u32).clamp(1, slots);
    let budget = (scan_folios_per_s * ctx.dt as f64 / 1e9) as u64;
    // The scan takes time: a hand's position is stamped at the step's start plus the time the
    // reclaimer has spent scanning in this step, so the back hand finds the bits the front
    // hand cleared as old as the scan of the pages between them.
    let ns_per_visit = 1e9 / scan_folios_per_s;
    let now = ctx.now;
    let tick = move |spent: u64| {
        ((now + (spent as f64 * ns_per_visit) as u64) / crate::memory::LRU_TICK_NS) as u32
    };
    let mut protected = if cgroup.is_none() {
        protected_cgroups(ctx, node)
    } else {
        Vec::new()
    };
    let hand = *ctx.mem.lru.hand(node, ctx.now);
    let mut back = hand.back % slots;
    let mut spent = if kswapd {
        hand.kswapd_scanned
    } else {
        hand.direct_scanned
    };
    let (mut scanned, mut activated, mut demoted) = (0u64, 0u64, 0u64);
    loop {
        // Two revolutions at most: the second finds every bit the first one cleared.
        let mut visited = 0u64;
        while spent < budget && visited < 2 * u64::from(slots) {
            if ctx.mem.node(node).is_none_or(|m| m.free() >= goal) {
                break;
            }
            let front = ((u64::from(back) + u64::from(spread)) % u64::from(slots)) as u32;
            if let Some(u) = ctx.mem.node(node).and_then(|m| m.unit_in(front)) {
                ctx.mem.lru.clear(u, node, tick(spent));
            }
            let slot = back;
            back = (back + 1) % slots;
            visited += 1;
            let Some(u) = ctx.mem.node(node).and_then(|m| m.unit_in(slot)) else {
                continue;
            };
            let (alive, owner, pages, sweep_s, grain) = {
                let r = ctx.mem.region_of(u);
                (r.alive, r.cgroup, r.unit_pages(), r.sweep_s, r.grain)
            };
            if !alive || cgroup.is_some_and(|cg| owner != cg) || protected.contains(&owner) {
                continue;
            }
            // Reclaim's work is per folio: one isolation, one reverse-map walk that tests the
            // one PMD of a THP as it tests the PTE of a base page (mm/rmap.c
            // `folio_referenced_one()`), one putback or activation. So a THP costs one visit
            // of the budget, while `pgscan_*` counts its base pages as the kernel does
            // (`folio_nr_pages()` in `isolate_lru_folios()`).
            // A grained unit is `grain` base folios, each a visit.
            spent += u64::from(grain);
            scanned += pages;
            let touched = match ctx.mem.lru.cleared_at(u, node) {
                None => 1.0,
                Some(cleared) => {
                    let dt_s = f64::from(tick(spent).wrapping_sub(cleared))
                        * crate::memory::LRU_TICK_NS as f64
                        / 1e9;
                    match sweep_s {
                        Some(pass) => (dt_s / pass).min(1.0),
                        None => 1.0 - (-ctx.load.page_rate(ctx.mem, u) * dt_s).exp(),
                    }
                }
            };
            if touched >= 1.0 || (touched > 0.0 && ctx.rng.gen::<f64>() < touched) {
                activated += pages;
                continue;
            }
            let Some(to) = nearest_with_room(ctx.mem, &topo, node, targets, pages) else {
                continue;
            };
            if ctx.reclaim(u, to).is_ok() {
                demoted += pages;
            }
        }
        let unmet = ctx.mem.node(node).is_some_and(|m| m.free() < goal);
        if protected.is_empty() || !unmet || spent >= budget {
            break;
        }
        // memcg_low_reclaim: nothing else was left to reclaim in budget.
        ctx.acct.count("memcg_low_reclaim", 1);
        protected.clear();
    }
    let h = ctx.mem.lru.hand(node, ctx.now);
    h.back = back;
    if kswapd {
        h.kswapd_scanned = spent;
    } else {
        h.direct_scanned = spent;
    }
    let who = if kswapd { "kswapd" } else { "direct" };
    if scanned > 0 {
        ctx.acct.count(&format!("pgscan_{who}"), scanned);
    }
    if activated > 0 {
        ctx.acct.count("pgactivate", activated);
    }
    if demoted > 0 {
        ctx.acct.count(&format!("pgdemote_{who}"), demoted);
    }
}

/// One reclaim pass of [`demote_coldest`], leaving the cgroups in `skip` alone.
fn demote_pass(
    ctx: &mut Ctx<'_>,
    node: NodeId,
    goal: Pages,
    cgroup: Option<CgroupId>,
    skip: &[CgroupId],
) {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    /// Orders f64 rates for the heap (rates are finite and non-negative).
    #[derive(Clone, Copy, PartialEq)]
    struct Rate(f64);
    impl Eq for Rate {}
    impl PartialOrd for Rate {
        fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for Rate {
        fn cmp(&self, o: &Self) -> std::cmp::Ordering {
            self.0.total_cmp(&o.0)
        }
    }

    let topo = ctx.mem.topology().clone();
    let targets = topo.demotion_targets(node);
    if targets.is_empty() || ctx.mem.node(node).is_none_or(|m| m.free() >= goal) {
        return;
    }
    // Per class: a cursor k over its units in ascending rate.
    let classes: Vec<usize> = ctx
        .mem
        .classes()
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            let r = &ctx.mem.regions()[c.region.0 as usize];
            c.units_on.get(&node).copied().unwrap_or(0) > 0
                && r.alive
                && cgroup.is_none_or(|cg| r.cgroup == cg)
                && !skip.contains(&r.cgroup)
        })
        .map(|(i, _)| i)
        .collect();
    // Each class is walked coldest-first with a cursor, its position k in
    // `Class::coldest_order`, and only its units on `node` enter the heap: under churn most of
    // a class's coldest units already sit on the lower tier, and the class's bits of the
    // units on `node` by cold position (`Class::next_cold_on`) pass over them a word at a
    // time. The units demoted, and their order, are those of a merge over every unit: a
    // class's rates do not decrease along its cold order, so its next unit on `node` is the
    // one that merge would reach next, and only this loop moves units meanwhile.
    let next_on = |mem: &Memory, ci: usize, k: u32| {
        let c = &mem.classes()[ci];
        let k = c.next_cold_on(node, k)?;
        let idx = c.cold_index(k);
        // A class mapped after the step's rates were computed (a process charging pages
        // mid-run) has no rate yet: not accessed so far.
        let class_rate = ctx.load.class_rate.get(ci).copied().unwrap_or(0.0);
        let w = c.cold_weight(k) / c.total_weight.max(f64::MIN_POSITIVE);
        Some((k, idx, class_rate * w))
    };
    /// A class's next unit on `node`: its rate, region, class, cold-order position and index.
    type Entry = (Rate, u32, usize, u32, u32);
    let mut heap: BinaryHeap<Reverse<Entry>> = BinaryHeap::new();
    for &ci in &classes {
        ctx.mem.track_cold_on(ci, node);
        if let Some((k, idx, rate)) = next_on(ctx.mem, ci, 0) {
            let region = ctx.mem.classes()[ci].region.0;
            heap.push(Reverse((Rate(rate), region, ci, k, idx)));
        }
    }
    // Counted once at the end (a counter is looked up by name), if anything moved.
    let mut demoted = 0u64;
    while let Some(Reverse((_, reg, ci, k, idx))) = heap.pop() {
        if ctx.mem.node(node).is_none_or(|m| m.free() >= goal) {
            break;
        }
        let u = ctx.mem.classes()[ci].unit_at(idx);
        if let Some((k2, idx2, rate)) = next_on(ctx.mem, ci, k + 1) {
            heap.push(Reverse((Rate(rate), reg, ci, k2, idx2)));
        }
        if ctx.mem.node_of(u) != node {
            continue;
        }
        let pages = ctx.mem.region_of(u).unit_pages();
        let Some(to) = nearest_with_room(ctx.mem, &topo, node, targets, pages) else {
            continue;
        };
        if ctx.reclaim(u, to).is_ok() {
            demoted += pages;
        }
    }
    if demoted > 0 {
        ctx.acct.count("pgdemote_kswapd", demoted);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rand::SeedableRng;
    use tierd_engine::policy::MemPolicy;
    use tierd_engine::topology::two_tier;
    use tierd_engine::types::{Bytes, PageSize, SpaceId, Vpn};

    use super::*;
    use crate::memory::RegionId;
    use crate::workload::LatencyTable;

    const FAST: NodeId = NodeId(0);
    const SLOW: NodeId = NodeId(1);

    /// A 64 MiB fast node (16,384 pages, low watermark 32 pages) and a 256 MiB slow node
    /// holding `thps` THPs; `fill` base pages of another region taken on the fast node.
    fn machine(thps: u32, fill: u32) -> (Memory, RegionId) {
        let mut m = Memory::new(two_tier(Bytes::mib(64), Bytes::mib(256)));
        let r = m
            .map_region(
                "p.thp",
                SpaceId(1),
                tierd_engine::types::CgroupId::ROOT,
                Vpn(1 << 20),
                thps,
                PageSize::Huge2M,
                MemPolicy::DEFAULT,
                vec![],
                1,
                |_, o| o.push(SLOW),
            )
            .unwrap();
        if fill > 0 {
            m.map_region(
                "p.fill",
                SpaceId(1),
                tierd_engine::types::CgroupId::ROOT,
                Vpn(1 << 30),
                fill,
                PageSize::Base,
                MemPolicy::DEFAULT,
                vec![],
                1,
                |_, o| o.push(FAST),
            )
            .unwrap();
        }
        (m, r)
    }

    /// Runs `f` with a step context over `m`, the kernel's default knobs, no cgroup limits.
    fn with_ctx<T>(m: &mut Memory, acct: &mut Accounting, f: impl FnOnce(&mut Ctx<'_>) -> T) -> T {
        with_ctx_under(m, acct, &KernelKnobs::default(), &NO_MEMCGS, f)
    }

    /// [`with_ctx`] with these knobs and cgroup limits.
    fn with_ctx_under<T>(
        m: &mut Memory,
        acct: &mut Accounting,
        knobs: &KernelKnobs,
        memcg: &Memcgs,
        f: impl FnOnce(&mut Ctx<'_>) -> T,
    ) -> T {
        let load = Load::compute(&[], m, &LatencyTable::default(), &[]);
        let mut rng = SimRng::seed_from_u64(1);
        let mut ctx = Ctx {
            now: 0,
            dt: 10_000_000,
            mem: m,
            load: &load,
            procs: &[],
            rng: &mut rng,
            acct,
            kernel: knobs,
            memcg,
        };
        f(&mut ctx)
    }

    /// Two cgroups' base pages filling the fast node: cgroup 1 `a` pages, cgroup 2 `b`
    /// pages, cgroup 1 accessed (its pages hotter), cgroup 2 idle.
    fn two_tenants(a: u32, b: u32) -> Memory {
        let mut m = Memory::new(two_tier(Bytes::mib(64), Bytes::mib(256)));
        for (i, n) in [(1u32, a), (2, b)] {
            m.map_region(
                &format!("t{i}.heap"),
                SpaceId(i),
                CgroupId(i),
                Vpn(u64::from(i) << 30),
                n,
                PageSize::Base,
                MemPolicy::DEFAULT,
                vec![],
                1,
                |_, o| o.push(FAST),
            )
            .unwrap();
        }
        m
    }

    fn reclaim_with(m: &mut Memory, memcg: &Memcgs, tiering: bool, goal: u64) -> Accounting {
        let knobs = KernelKnobs {
            demotion_enabled: true,
            memcg_tiering: tiering,
            ..KernelKnobs::default()
        };
        let mut acct = Accounting::default();
        with_ctx_under(m, &mut acct, &knobs, memcg, |ctx| {
            demote_coldest(ctx, FAST, Pages(goal), None);
        });
        acct
    }

    fn on_fast(m: &Memory, region: u32) -> u64 {
        m.region_placement(RegionId(region))
            .get(&FAST)
            .map_or(0, |p| p.0)
    }

    /// Knobs of the LRU model visiting `folios_per_s`.
    fn lru_knobs(folios_per_s: f64) -> KernelKnobs {
        KernelKnobs {
            demotion_enabled: true,
            reclaim: ReclaimModel::Lru {
                scan_folios_per_s: folios_per_s,
                unscale: 1.0,
            },
            ..KernelKnobs::default()
        }
    }

    /// Direct reclaim of the fast node to `goal` free pages under `knobs`, at `now`.
    fn lru_reclaim(m: &mut Memory, knobs: &KernelKnobs, memcg: &Memcgs, goal: u64) -> Accounting {
        let mut acct = Accounting::default();
        with_ctx_under(m, &mut acct, knobs, memcg, |ctx| {
            demote_coldest(ctx, FAST, Pages(goal), None);
        });
        acct
    }

    #[test]
    fn inactive_ratio_is_the_kernels() {
        // inactive_is_low(): int_sqrt(10 x gb), 1 under 1 GiB.
        assert_eq!(inactive_ratio(0.5), 1);
        assert_eq!(inactive_ratio(1.0), 3);
        assert_eq!(inactive_ratio(10.0), 10);
        assert_eq!(inactive_ratio(256.0), 50);
        assert_eq!(inactive_ratio(1024.0), 101);
    }

    /// The LRU model demotes what went untouched since the front hand cleared its bit and
    /// keeps what was touched, whatever the two access rates: a page swept every pass is
    /// "young" to the kernel even when the other tenant touches its pages more often.
    #[test]
    fn lru_reclaim_demotes_what_went_untouched() {
        // Tenant 1 swept (touched whenever its bit was clear a while), tenant 2 idle.
        let mut m = two_tenants(8_000, 8_000);
        m.set_sweep(RegionId(0), Some(1e-6));
        let acct = lru_reclaim(&mut m, &lru_knobs(1e7), &NO_MEMCGS, 2_000);
        assert_eq!(on_fast(&m, 0), 8_000, "the swept tenant keeps every page");
        assert!(on_fast(&m, 1) < 8_000, "the idle tenant gave pages");
        assert!(m.free(FAST).pages().0 >= 2_000, "goal met");
        let demoted = 8_000 - on_fast(&m, 1);
        assert_eq!(acct.get("pgdemote_direct"), demoted);
        assert_eq!(acct.get("pgdemote_kswapd"), 0);
        assert!(acct.get("pgscan_direct") > demoted);
        assert!(acct.get("pgactivate") > 0);
        // A sweep slower than the inactive list's turnover leaves pages untouched in between:
        // with a 10 s pass, swept pages are demoted too.
        let mut m = two_tenants(8_000, 8_000);
        m.set_sweep(RegionId(0), Some(10.0));
        m.set_sweep(RegionId(1), Some(10.0));
        lru_reclaim(&mut m, &lru_knobs(1e7), &NO_MEMCGS, 2_000);
        assert!(on_fast(&m, 0) + on_fast(&m, 1) < 16_000);
        assert!(m.free(FAST).pages().0 >= 2_000, "goal met");
    }

    /// Reclaim scans at a bounded rate: a node whose pages are all touched is scanned for the
    /// step's budget and gives nothing.
    #[test]
    fn lru_reclaim_stops_at_its_scan_budget() {
        let mut m = two_tenants(8_000, 8_000);
        m.set_sweep(RegionId(0), Some(1e-6));
        m.set_sweep(RegionId(1), Some(1e-6));
        // 1 M pages a second: 10,000 pages in a 10 ms step.
        let acct = lru_reclaim(&mut m, &lru_knobs(1e6), &NO_MEMCGS, 2_000);
        assert_eq!((on_fast(&m, 0), on_fast(&m, 1)), (8_000, 8_000));
        assert_eq!(acct.get("pgscan_direct"), 10_000);
        assert_eq!(acct.get("pgactivate"), 10_000);
        assert_eq!(acct.get("pgdemote_direct"), 0);
        // The budget is per step: a second call in the same step scans nothing more.
        let acct = lru_reclaim(&mut m, &lru_knobs(1e6), &NO_MEMCGS, 2_000);
        assert_eq!(acct.get("pgscan_direct"), 0);
    }

    /// A THP costs the LRU's scan one visit, as a base page does (reclaim's work is per
    /// folio), while `pgscan_*` counts its 512 base pages.
    #[test]
    fn lru_reclaim_charges_a_thp_one_visit() {
        let mut m = Memory::new(two_tier(Bytes::mib(64), Bytes::mib(256)));
        m.map_region(
            "t1.heap",
            SpaceId(1),
            CgroupId(1),
            Vpn(1 << 30),
            8,
            PageSize::Huge2M,
            MemPolicy::DEFAULT,
            vec![],
            1,
            |_, o| o.push(FAST),
        )
        .unwrap();
        m.set_sweep(RegionId(0), Some(1e-6));
        // 500 visits a second: 5 in a 10 ms step, each a THP found touched.
        let acct = lru_reclaim(&mut m, &lru_knobs(500.0), &NO_MEMCGS, 20_000);
        assert_eq!(acct.get("pgscan_direct"), 5 * 512);
        assert_eq!(acct.get("pgactivate"), 5 * 512);
        assert_eq!(acct.get("pgdemote_direct"), 0);
    }

    /// kswapd under the LRU model stays awake until the node is balanced (mm/vmscan.c
    /// `kswapd()` sleeps only after a balanced run): what one step's scan budget cannot do
    /// goes on in the next steps with no new wake-up, and then it sleeps.
    #[test]
    fn lru_kswapd_stays_awake_until_the_node_is_balanced() {
        let mut m = two_tenants(8_000, 8_000);
        m.set_sweep(RegionId(0), Some(1e-6));
        // 100,000 pages a second: 1,000 a 10 ms step; the goal needs ~2,650 pages demoted,
        // from the idle tenant, after the front hand has cleared their bits.
        let knobs = lru_knobs(1e5);
        let goal = Pages(3_000);
        let load = Load::compute(&[], &m, &LatencyTable::default(), &[]);
        let mut rng = SimRng::seed_from_u64(1);
        let mut acct = Accounting::default();
        // Step `step` of 10 ms: kswapd woken in step 0, only [`kswapd`] after; its goal then.
        let mut run_step = |m: &mut Memory, acct: &mut Accounting, step: u64| {
            let now = step * 10_000_000;
            let mut ctx = Ctx {
                now,
                dt: 10_000_000,
                mem: m,
                load: &load,
                procs: &[],
                rng: &mut rng,
                acct,
                kernel: &knobs,
                memcg: &NO_MEMCGS,
            };
            if step == 0 {
                kswapd_demote(&mut ctx, FAST, goal);
            } else {
                // Free memory is above the low watermark: only an awake kswapd scans.
                kswapd(&mut ctx);
            }
            ctx.mem.lru.hand(FAST, now).kswapd_goal
        };
        let awake_after_first = run_step(&mut m, &mut acct, 0);
        let balanced_at = (1..60u64).find(|&step| run_step(&mut m, &mut acct, step).is_none());
        assert_eq!(awake_after_first, Some(goal), "one step is not enough");
        let step = balanced_at.expect("kswapd balanced the node and slept");
        assert!(step >= 2, "it went on over later steps: {step}");
        assert!(m.free(FAST).0 >= goal.0);
        assert_eq!(on_fast(&m, 0), 8_000, "the swept tenant keeps its pages");
        assert!(acct.get("pgdemote_kswapd") >= 2_600);
        // Balanced, it sleeps: a later step scans nothing.
        let scanned = acct.get("pgscan_kswapd");
        assert_eq!(run_step(&mut m, &mut acct, 61), None);
        assert_eq!(acct.get("pgscan_kswapd"), scanned);
    }

    /// memory.low under the LRU model: a protected cgroup is skipped (at no scan cost) while
    /// others have pages to give.
    #[test]
    fn lru_reclaim_skips_a_cgroup_below_its_memory_low() {
        let low = Memcgs {
            low: [(CgroupId(2), Pages(9_000).bytes())].into_iter().collect(),
            high: BTreeMap::new(),
        };
        let mut m = two_tenants(8_000, 8_000);
        let acct = lru_reclaim(&mut m, &lru_knobs(1e7), &low, 2_000);
        assert!(on_fast(&m, 0) < 8_000, "cgroup 1 gave pages");
        assert_eq!(on_fast(&m, 1), 8_000, "cgroup 2 is protected");
        assert_eq!(acct.get("memcg_low_reclaim"), 0);
    }

    /// mm/vmscan.c `shrink_node_memcgs()`: a cgroup below its memory.low is skipped while
    /// others have pages to give, and reclaimed only when they are not enough.
    #[test]
    fn reclaim_skips_a_cgroup_below_its_memory_low() {
        let low = |gib_pages: u64| Memcgs {
            low: [(CgroupId(2), Pages(gib_pages).bytes())]
                .into_iter()
                .collect(),
            high: BTreeMap::new(),
        };
        // 8,000 + 8,000 pages on a 16,384-page node; cgroup 2 (8,000 + 16 page-table pages)
        // is under a low of 9,000 pages.
        let mut m = two_tenants(8_000, 8_000);
        let acct = reclaim_with(&mut m, &low(9_000), false, 2_000);
        assert!(on_fast(&m, 0) < 8_000, "cgroup 1 gave pages");
        assert_eq!(on_fast(&m, 1), 8_000, "cgroup 2 is protected");
        assert_eq!(acct.get("memcg_low_reclaim"), 0);
        // A goal cgroup 1 cannot meet alone: the protected cgroup is reclaimed too.
        let mut m = two_tenants(8_000, 8_000);
        let acct = reclaim_with(&mut m, &low(9_000), false, 12_000);
        assert_eq!(on_fast(&m, 0), 0);
        assert!(on_fast(&m, 1) < 8_000);
        assert_eq!(acct.get("memcg_low_reclaim"), 1);
        // Over its low (stock: total usage), it has no protection.
        let mut m = two_tenants(8_000, 8_000);
        reclaim_with(&mut m, &low(7_000), false, 2_000);
        assert!(on_fast(&m, 0) + on_fast(&m, 1) < 16_000);
        // The RFC scales low to the top tier (64 of 320 MiB: 1/5): 9,000 pages protect only
        // 1,800 top-tier pages, fewer than cgroup 2 has there, so nothing is shielded.
        let mut m = two_tenants(8_000, 8_000);
        let memcg = low(9_000);
        assert!(memcg.below_low(&m, CgroupId(2), FAST, false));
        assert!(!memcg.below_low(&m, CgroupId(2), FAST, true));
        let acct = reclaim_with(&mut m, &memcg, true, 12_000);
        assert_eq!(acct.get("memcg_low_reclaim"), 0);
    }

    #[test]
    fn usage_counts_page_tables() {
        let m = two_tenants(1_024, 513);
        assert_eq!(cgroup_usage(&m, CgroupId(1)), (1_024 + 2, 1_024));
        assert_eq!(cgroup_usage(&m, CgroupId(2)), (513 + 2, 513));
        assert!((toptier_share(&m) - 0.2).abs() < 1e-12);
    }

    #[test]
    fn a_thp_moving_to_a_node_without_a_free_2mib_block_is_split() {
        // 520 pages free on the fast node: room for 512 base pages, but below the low
        // watermark (32) plus a THP, so no 2 MiB block.
        let (mut m, _) = machine(4, 16_384 - 520);
        let mut acct = Accounting::default();
        let u = UnitId(0);
        with_ctx(&mut m, &mut acct, |ctx| {
            assert!(!ctx.huge_block_free(FAST) && ctx.huge_block_free(SLOW));
            ctx.migrate(u, FAST).unwrap();
        });
        assert_eq!(m.node_of(u), FAST);
        assert!(!m.is_thp(u));
        assert_eq!(m.node(FAST).unwrap().free(), Pages(8));
        for (k, v) in [
            ("thp_migration_split", 1),
            ("thp_split_page", 1),
            ("thp_migration_fail", 1),
            ("thp_migration_success", 0),
        ] {
            assert_eq!(acct.get(k), v, "{k}");
        }
        assert_eq!(acct.promoted_pages, 512);
        // Back to the slow node, which has blocks: the split THP moves as base pages.
        with_ctx(&mut m, &mut acct, |ctx| ctx.reclaim(u, SLOW)).unwrap();
        assert_eq!(
            (
                acct.get("thp_migration_success"),
                acct.get("thp_migration_split")
            ),
            (0, 1)
        );
        assert_eq!(acct.demoted_pages, 512);
        assert!(m.check().is_none());
    }

    #[test]
    fn a_numa_fault_never_splits_a_thp() {
        let (mut m, _) = machine(4, 16_384 - 520);
        let mut acct = Accounting::default();
        let r = with_ctx(&mut m, &mut acct, |ctx| {
            ctx.migrate_misplaced(UnitId(1), FAST)
        });
        assert_eq!(r, Err(MoveError::NoMem));
        assert!(m.is_thp(UnitId(1)));
        assert_eq!(m.node_of(UnitId(1)), SLOW);
        assert_eq!(
            (
                acct.get("thp_migration_fail"),
                acct.get("thp_migration_split")
            ),
            (1, 0)
        );
    }

    #[test]
    fn a_thp_with_a_free_block_moves_whole() {
        let (mut m, _) = machine(4, 0);
        let mut acct = Accounting::default();
        with_ctx(&mut m, &mut acct, |ctx| {
            ctx.migrate_misplaced(UnitId(2), FAST)
        })
        .unwrap();
        assert!(m.is_thp(UnitId(2)));
        assert_eq!(acct.get("thp_migration_success"), 1);
        assert_eq!(acct.get("thp_migration_fail"), 0);
        assert_eq!(acct.promoted_pages, 512);
    }

    proptest! {
        /// The bucket sort of a step's samples gives what a stable comparison sort gives:
        /// times inside the step (the draws), on its edges, tied (a few distinct values) and
        /// outside it (clamped buckets), for short and long steps.
        #[test]
        fn samples_sort_by_time_as_a_stable_sort_would(
            start in 0u64..1_000_000,
            span in prop_oneof![Just(0u64), 1u64..4, 1u64..10_000_000],
            draws in proptest::collection::vec((0u64..1_000, 0u8..4, 0u32..1_000), 0..400),
        ) {
            let v: Vec<Sampled> = draws
                .iter()
                .enumerate()
                .map(|(i, &(x, kind, id))| Sampled {
                    unit: crate::memory::UnitId(id),
                    node: NodeId(0),
                    process: i,
                    time_ns: match kind {
                        // Inside the span, spread over it.
                        0 | 1 => start + x * span.max(1) / 1_000 % span.max(1),
                        // One of three tied values.
                        2 => start + x % 3,
                        // Outside the span, either side.
                        _ => if x % 2 == 0 { start.saturating_sub(x) } else { start + span + x },
                    },
                    class: crate::memory::ClassId(0),
                })
                .collect();
            let mut want = v.clone();
            want.sort_by_key(|s| s.time_ns);
            let mut got = v;
            sort_by_time_within(&mut got, start, span);
            prop_assert_eq!(got, want);
        }

        /// Any sequence of moves of THPs between a nearly full fast node and the slow node
        /// conserves pages; every THP that moved is counted once as moved whole or split,
        /// and a split one never counts as a THP again.
        #[test]
        fn thp_moves_conserve_pages_and_count_every_folio(
            fill in 15_000u32..16_384,
            moves in proptest::collection::vec((0u32..16, any::<bool>(), 0u8..3), 1..60),
        ) {
            let (mut m, r) = machine(16, fill);
            let total = 16 * 512 + u64::from(fill);
            let mut acct = Accounting::default();
            let mut whole = 0;
            for (u, to_fast, how) in moves {
                let u = UnitId(u);
                let to = if to_fast { FAST } else { SLOW };
                let was_thp = m.is_thp(u);
                let from = m.node_of(u);
                let moved = with_ctx(&mut m, &mut acct, |ctx| match how {
                    0 => ctx.migrate(u, to),
                    1 => ctx.migrate_misplaced(u, to),
                    _ => ctx.reclaim(u, to),
                })
                .is_ok();
                if moved && was_thp && m.is_thp(u) && from != to {
                    whole += 1;
                }
                prop_assert!(m.check().is_none(), "{:?}", m.check());
                let used: u64 = m.nodes().values().map(|n| n.used.0).sum();
                prop_assert_eq!(used, total);
            }
            prop_assert_eq!(acct.get("thp_migration_success"), whole);
            prop_assert_eq!(acct.get("thp_migration_split") as usize, m.split_count());
            prop_assert_eq!(acct.get("thp_split_page"), acct.get("thp_migration_split"));
            let placed: u64 = m.region_placement(r).values().map(|p| p.0).sum();
            prop_assert_eq!(placed, 16 * 512);
        }
    }
}
