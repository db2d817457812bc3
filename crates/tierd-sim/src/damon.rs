//! DAMON (Data Access MONitor) driving one DAMOS `migrate_hot` scheme, as one kdamond runs it.
//!
//! The model follows `kdamond_fn()` in mm/damon/core.c sampling interval by sampling interval,
//! with the `paddr` operations set of mm/damon/paddr.c. Accesses are never simulated one by
//! one: a page with an access rate `λ` (from
//! [`Load::page_rate`](crate::workload::Load::page_rate)) has its accessed bit found set `τ`
//! after it was cleared with probability `1 - exp(-λτ)`. In a grained machine
//! (`machine.grain`) a unit stands for `grain` pages of one rate. DAMON's addresses stay base
//! pages there (see "Address space"): the sampled address is one page of a unit, found at one
//! page's rate, and a scheme walks (and charges) each of the frames its region holds.
//!
//! # Address space
//!
//! `paddr` monitors the physical range of `monitor_node`; the simulator's physical address is
//! the node's slot index ([`NodeMem::slots`](crate::memory::NodeMem::slots)), one unit per
//! slot, so a region is a range of slots and DAMON's `min_region_sz` is one slot. A free slot
//! has no folio: `damon_get_folio()` returns NULL, so it is never found accessed and never
//! migrated. `vaddr` is modelled as one target whose addresses are unit ids (every process's
//! pages in allocation order); the kernel's `vaddr` keeps one target per process and starts
//! from three regions around the two largest unmapped gaps (mm/damon/vaddr.c), which this
//! model does not reproduce.
//!
//! In a grained machine an address is one base page, as in the kernel: slot (or unit id) `s`
//! spans addresses `s x grain .. (s + 1) x grain`, and regions split and merge at any page.
//! With an address per slot instead, regions could not shrink below a unit nor split a region
//! under three units, and A's D3 at grain 8 promoted 3 % more with 5 % less kdamond CPU (the
//! page run with regions held to 8 pages gave the same figures). A unit moves whole, so a
//! region holding only some of its pages takes it with their share as probability: it moves
//! the pages it holds on average, as page by page. Taking only the units whose first page it
//! holds left regions smaller than a unit, hot and unmerged, for the rest of the run (1,700
//! regions at the end of A's D3 instead of ~30); taking every unit it touches, as the
//! kernel's walk takes a large folio from any of its pages, moved A's hot set 8 % sooner.
//!
//! # One pass of `kdamond_fn()`
//!
//! 1. **Sample.** For every region pick a random address and clear its accessed bit
//!    (`__damon_pa_prepare_access_check()`, `damon_pa_mkold()`); sleep one sampling interval;
//!    check the bit (`__damon_pa_check_access()`) and count a hit in `nr_accesses`
//!    (`damon_update_region_access_rate()`). Both are evaluated at the end of the pass here,
//!    with `τ` = the sampling interval plus the prepare/check work between a region's two
//!    visits, because nothing in between changes the regions.
//! 2. Every aggregation interval (`aggr_us / sample_us` passes):
//!    1. **Merge** adjacent regions whose `nr_accesses` differ by at most
//!       `max_nr_accesses / 10`, keeping each merged region within `total / min_nr_regions`,
//!       updating `age` on the way; while more than `max_nr_regions` remain, double the
//!       threshold and repeat (`kdamond_merge_regions()`, `damon_merge_regions_of()`). Then
//!       split any region above that size (`damon_apply_min_nr_regions()`).
//!    2. **Apply the scheme** (`kdamond_apply_schemes()`; with `apply_interval_us`, at the
//!       first pass after the interval instead, whether or not it ends an aggregation): open
//!       a new quota window if due (its effective size tuned toward the quota goals, if any),
//!       rank the matching regions by `damon_hot_score()` (`damon_cold_score()` for
//!       `migrate_cold`) and set the minimum score that fits
//!       the quota (`damos_adjust_quota()`), then walk the regions in address order, skip the
//!       part already charged in the previous window (`damos_skip_charged_region()`), cut a
//!       region to the quota left (`damos_apply_scheme()`) and migrate every page of it that is
//!       on `monitor_node` (`damon_pa_migrate()`), hot or not: the source of DAMON's
//!       over-promotion.
//!    3. With an intervals goal, every `aggrs` aggregations, **tune** the sampling interval
//!       (`kdamond_tune_intervals()`).
//!    4. **Reset** `nr_accesses` (`kdamond_reset_aggregated()`) and **split** every region
//!       into two (three when the count did not change) random pieces while at most
//!       `max_nr_regions / 2` exist (`kdamond_split_regions()`).
//! 3. The pass's work delays the next one: kdamond sleeps a full sampling interval after
//!    working (`kdamond_usleep()`), so a slow pass stretches every interval counted in passes
//!    (aggregation, ops update), while the quota window stays in wall time (jiffies).
//!
//! # Cost
//!
//! kdamond's CPU time, charged with [`Ctx::charge_promoter`], is per pass
//! [`SAMPLE_REGION_NS`] per region whose sampled slot holds a page ([`SAMPLE_FREE_NS`] if
//! free), per aggregation [`AGGR_REGION_NS`] per region, and per applied region
//! [`APPLY_FRAME_NS`] per slot walked, [`YOUNG_CHECK_NS`] per `young` check and
//! [`MIGRATE_FOLIO_NS`] + [`MIGRATE_COPY_NS_PER_PAGE`] per base page for each folio
//! migrated. The same time feeds the time quota's throughput (`quota->total_charged_ns`).
//!
//! # Calibration (seed A D3, `tests::calibration_seed_a_d3`)
//!
//! At 1/16 scale (4 threads, 4 GiB buffer of base pages, 1 GiB hot, 8 MiB/s quota, 240 s),
//! hot chunks of 1-4 MiB (16-64 MiB at full scale) give +40 % to +51 % over-promotion with
//! 99-100 % of the hot set on node 0, 203-217 quota windows exceeded and 22-45 regions at the
//! end (published: +49 %, 229, 21-71). Coarser chunks over-promote less (16-64 MiB: +31 % to
//! +40 %, 256 MiB: +8 % to +16 %); finer ones (4-64 KiB) give +56 % to +61 % but leave half
//! the hot set behind within 240 s. Most of the excess moves late: once few hot pages remain
//! on the slow node they keep large cold regions at `nr_accesses >= 1`, and each window takes
//! another quota's worth of them. kdamond's CPU time does not match: 110-119 s against the
//! published 13 s. While hot pages remain on the slow node a sampled page is found accessed
//! about one time in five, the merge threshold (`max_nr_accesses / 10` = 1) cannot undo the
//! splits, and regions grow to about 25,000 until the hot set has moved. With 2 MiB pages
//! (THP) a hot folio is found accessed at every sample, regions stay at about 30 and kdamond
//! uses 3-29 s, but chunks must then be 2 MiB (32 MiB at full scale) for +34 %.
//!
//! # Where it departs from the kernel
//!
//! - mempolicy: `__damon_migrate_folio_list()` (mm/damon/ops-common.c) "ignores all cpuset
//!   and mempolicy settings". tierd's simulator holds every mechanism to BIND and
//!   PREFERRED_MANY masks, so pages whose mask excludes `target_nid` are skipped and counted
//!   in `damos_mpol_skipped`.
//! - Region sizes are slots times the size of the unit found in the first occupied slot
//!   (4 KiB or 2 MiB). A node that mixes base and huge pages gets approximate byte sizes for
//!   the quota and the region size limit; the bytes migrated (`damos_sz_applied`) are exact.
//! - `pgpromote_success` is not counted: the kernel counts it only in
//!   `migrate_misplaced_folio()` (NUMA balancing), and the lab's first guest runs (docs/lab.md)
//!   saw DAMON migrations only in `pgmigrate_success` on a 6.12 guest. Promotions still reach
//!   [`Accounting::promoted_pages`](crate::mechanism::Accounting) through [`Ctx::migrate`].
//! - The access pattern matches on the kernel's moving sum (`nr_accesses_bp`,
//!   `damon_moving_sum()`), computed from the last and current counts; at the end of an
//!   aggregation it equals the count. Quota goals model `node_mem_used_bp` and
//!   `node_mem_free_bp` only. No watermarks, core filters, region size pattern or
//!   `fail_charge_*` are modelled. Several kdamonds (`Kdamonds`) each keep their own record
//!   of the accessed bits their `young` filter cleared.

use rand::Rng;
use serde::{Deserialize, Serialize};
use tierd_engine::types::{NodeId, PAGE_SIZE};

use crate::mechanism::{Ctx, Mechanism, Watermarks};
use crate::memory::{Memory, NodeMem, SlotHint, UnitId};

/// kdamond CPU time to sample one region whose sampled address holds a page, ns. One sampling
/// interval costs `damon_pa_mkold()` then `damon_pa_young()` (mm/damon/paddr.c): each is a
/// `damon_get_folio()` and an rmap walk under `folio_trylock()` (mm/damon/ops-common.c
/// `damon_folio_mkold()`, `damon_folio_young()`) down to a PTE that is rarely in cache for a
/// random page of a large buffer. The simulator's one accessed-bit check cost,
/// [`cost::ABIT_CHECK_NS`](crate::cost::ABIT_CHECK_NS) (an assumption), so that DAMON and
/// tierd's own accessed-bit source pay alike.
pub const SAMPLE_REGION_NS: f64 = crate::cost::ABIT_CHECK_NS;

/// kdamond CPU time to sample one region whose sampled address is a free frame, ns:
/// `damon_get_folio()` fails (`!folio_test_lru`) and no rmap walk follows. Assumption.
pub const SAMPLE_FREE_NS: f64 = 50.0;

/// kdamond CPU time per region per aggregation interval for merging, scoring, resetting and
/// splitting (list walks in mm/damon/core.c), ns. Assumption.
pub const AGGR_REGION_NS: f64 = 100.0;

/// kdamond CPU time per frame that `damon_pa_migrate()` visits when applying the action
/// (`damon_get_folio()`, filters, `folio_isolate_lru()`), ns. Assumption.
pub const APPLY_FRAME_NS: f64 = 100.0;

/// kdamond CPU time of one `young` filter check, ns: `damon_folio_young()` and, when young,
/// `damon_folio_mkold()` (mm/damon/ops-common.c `damos_folio_filter_match()`): an
/// accessed-bit check like a sample, [`SAMPLE_REGION_NS`].
pub const YOUNG_CHECK_NS: f64 = SAMPLE_REGION_NS;

/// kdamond CPU time to migrate one folio apart from copying it, ns: isolation, unmap, its
/// share of the batched TLB flush, remap and LRU putback when `damon_migrate_pages()` hands a
/// region's whole folio list to `migrate_pages(MIGRATE_ASYNC)` (mm/damon/ops-common.c,
/// mm/migrate.c). Assumption, bounded by seed A D3: kdamond used 13 s in all while migrating
/// 24.7 GB (6.0 M base pages), so its cost per page cannot exceed 2.2 us. (The 12 us of
/// [`cost::KMIGRATED_NS_PER_PAGE`](crate::cost::KMIGRATED_NS_PER_PAGE), derived from kmigrated,
/// would alone make D3's kdamond 72 s.)
pub const MIGRATE_FOLIO_NS: f64 = 1_500.0;

/// kdamond CPU time to copy one base page during migration, ns: 4 KiB read from the slow node
/// at about 8 GB/s. Assumption. A 4 KiB page costs [`MIGRATE_FOLIO_NS`] + this = 2 us, within
/// D3's bound; a 2 MiB folio 258 us.
pub const MIGRATE_COPY_NS_PER_PAGE: f64 = 500.0;

/// `DAMOS_MAX_SCORE` (include/linux/damon.h).
const DAMOS_MAX_SCORE: i64 = 99;
/// `DAMON_MAX_SUBSCORE` (mm/damon/ops-common.c).
const DAMON_MAX_SUBSCORE: i64 = 100;
/// `DAMON_MAX_AGE_IN_LOG` (mm/damon/ops-common.c).
const DAMON_MAX_AGE_IN_LOG: i64 = 32;
/// Throughput `damos_set_effective_quota()` assumes before anything was charged:
/// `PAGE_SIZE * 1024` bytes per ms.
const DEFAULT_QUOTA_THROUGHPUT_BYTES_PER_MS: u64 = PAGE_SIZE * 1024;
/// Marks a page whose accessed bit is known to be set (for the `young` filter).
const KNOWN_YOUNG: u32 = u32::MAX;
/// A sampling draw whose unit was not looked up, only its class (its rate is in the draw):
/// never a unit id, as `Memory::map_region` keeps ids below `u32::MAX - 1`.
const CLASS_ONLY: u32 = u32::MAX - 1;
/// How far [`Damon`] looks for an occupied slot to learn the monitored unit size.
const UNIT_SIZE_PROBE: u32 = 4096;

/// DAMON/DAMOS knobs (Documentation/admin-guide/mm/damon/usage.rst; defaults from mm/damon/sysfs.c).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DamonParams {
    /// Operations set: `paddr` (physical ranges of `monitor_node`) or `vaddr` (processes).
    pub ops: DamonOps,
    /// The node whose physical range `paddr` monitors (the slow node).
    pub monitor_node: u16,
    /// `paddr` only: monitor the node's whole capacity, as a target region written from
    /// `/sys/devices/system/node/nodeN/memory*` does (docs/lab.md, first guest runs, 3), instead of only the slots
    /// that have held a page. Never-used frames are free: never accessed, never migrated, but
    /// they count in region sizes and in `total / min_nr_regions`.
    pub monitor_whole_node: bool,
    /// `sample_us` (5000).
    pub sample_us: u64,
    /// `aggr_us` (100000).
    pub aggr_us: u64,
    /// `update_us` (60000000).
    pub update_us: u64,
    /// `nr_regions/min` (10).
    pub min_nr_regions: u32,
    /// `nr_regions/max` (1000).
    pub max_nr_regions: u32,
    /// The scheme's action target: `target_nid`.
    pub target_nid: u16,
    /// `access_pattern/nr_accesses/min` (in samples per aggregation).
    pub nr_accesses_min: u32,
    /// `access_pattern/nr_accesses/max`.
    pub nr_accesses_max: u32,
    /// `access_pattern/age/min` (aggregation intervals).
    pub age_min: u32,
    /// `access_pattern/age/max`.
    pub age_max: u32,
    /// `quotas/bytes` per reset interval (0 = none).
    pub quota_bytes: u64,
    /// `quotas/ms` per reset interval (0 = none).
    pub quota_ms: u64,
    /// `quotas/reset_interval_ms`.
    pub quota_reset_interval_ms: u64,
    /// `quotas/weights/sz_permil`. Accepted but, as in the kernel, unused: `migrate_hot`
    /// ranks regions with `damon_hot_score()`, which reads only the other two weights.
    pub weight_sz_permil: u32,
    /// `quotas/weights/nr_accesses_permil`.
    pub weight_nr_accesses_permil: u32,
    /// `quotas/weights/age_permil`.
    pub weight_age_permil: u32,
    /// The scheme's action: `migrate_hot` (the default) or `migrate_cold`. Both move the
    /// region's pages to `target_nid`; they differ in what the quota serves first
    /// (`damon_hot_score()` against `damon_cold_score()`, mm/damon/ops-common.c).
    pub action: DamosAction,
    /// A `young` ops filter: re-check each page's accessed bit before migrating it.
    pub young_filter: bool,
    /// With `young_filter`: `allow` Y (true, the default) lets only young pages through, N
    /// only old ones (mtier.c's demoting context rejects what was just used).
    pub young_filter_allow: bool,
    /// `quotas/goals`: the effective size quota is tuned toward these (mm/damon/core.c
    /// `damos_set_effective_quota()`, "aim-oriented feedback-driven auto-tuning"); empty:
    /// the quota is `quota_bytes` (and `quota_ms`) as set.
    pub quota_goals: Vec<QuotaGoal>,
    /// `apply_interval_us`: how often the scheme applies (0: once per aggregation interval),
    /// at the first sample it falls on; mid-aggregation the pattern matches on the moving sum
    /// of the access count and the score on the count so far, as in the kernel.
    pub apply_interval_us: u64,
    /// The monitoring intervals goal (`monitoring_attrs/intervals/intervals_goal`, 6.15):
    /// the kdamond tunes its sampling interval toward it. None (the default): fixed
    /// intervals, as with `access_bp` 0.
    pub intervals_goal: Option<IntervalsGoal>,
}

/// A DAMOS quota goal (`quotas/goals/<N>/{target_metric,target_value,nid}`): the scheme's
/// effective quota grows while the metric is below `target_value` and shrinks while it is
/// above (mm/damon/core.c `damos_quota_score()`, `damon_feed_loop_next_input()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaGoal {
    /// `target_metric`.
    pub metric: QuotaMetric,
    /// `target_value`, basis points of the node's memory.
    pub target_value: u64,
    /// `nid`: the node whose memory the metric reads.
    pub nid: u16,
}

/// The quota goal metrics modelled (`enum damos_quota_goal_metric`, 6.16:
/// `damos_get_node_mem_bp()` reads `si_meminfo_node()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaMetric {
    /// `node_mem_used_bp`: (total - free) x 10000 / total of the node.
    NodeMemUsedBp,
    /// `node_mem_free_bp`: free x 10000 / total of the node.
    NodeMemFreeBp,
}

impl QuotaGoal {
    /// The metric's current value on `mem`, basis points (0 for a node that does not exist).
    fn current_value(&self, mem: &Memory) -> u64 {
        let Some(n) = mem.node(NodeId(self.nid)) else {
            return 0;
        };
        let total = n.capacity.0.max(1);
        let part = match self.metric {
            QuotaMetric::NodeMemUsedBp => n.used.0.min(total),
            QuotaMetric::NodeMemFreeBp => n.free().0,
        };
        part * 10_000 / total
    }
}

/// DAMON's monitoring intervals goal (Documentation/admin-guide/mm/damon/usage.rst
/// `intervals_goal`; mm/damon/core.c `kdamond_tune_intervals()`): every `aggrs` aggregation
/// intervals the sampling interval is scaled by how far the share of access events the last
/// aggregation observed is from `access_bp`, within `[min_sample_us, max_sample_us]`, and the
/// aggregation interval follows it (the samples per aggregation stay).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntervalsGoal {
    /// `access_bp`: the wanted share of the possible access events, basis points (400).
    pub access_bp: u64,
    /// `aggrs`: aggregation intervals between two adjustments (3).
    pub aggrs: u64,
    /// `min_sample_us` (5000).
    pub min_sample_us: u64,
    /// `max_sample_us` (10000000).
    pub max_sample_us: u64,
}

impl Default for IntervalsGoal {
    /// damo's and the kernel documentation's recommendation: `4% 3 5ms 10s`.
    fn default() -> Self {
        IntervalsGoal {
            access_bp: 400,
            aggrs: 3,
            min_sample_us: 5_000,
            max_sample_us: 10_000_000,
        }
    }
}

/// DAMOS actions modelled (`schemes/<N>/action`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DamosAction {
    /// `migrate_hot`: the hottest regions first.
    #[default]
    MigrateHot,
    /// `migrate_cold`: the coldest regions first.
    MigrateCold,
}

/// DAMON operations sets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DamonOps {
    /// Physical address space.
    #[default]
    Paddr,
    /// Processes' virtual address spaces.
    Vaddr,
}

impl Default for DamonParams {
    fn default() -> Self {
        DamonParams {
            ops: DamonOps::Paddr,
            monitor_node: 1,
            monitor_whole_node: false,
            sample_us: 5000,
            aggr_us: 100_000,
            update_us: 60_000_000,
            min_nr_regions: 10,
            max_nr_regions: 1000,
            target_nid: 0,
            nr_accesses_min: 1,
            nr_accesses_max: u32::MAX,
            age_min: 0,
            age_max: u32::MAX,
            quota_bytes: 0,
            quota_ms: 0,
            quota_reset_interval_ms: 1000,
            weight_sz_permil: 0,
            weight_nr_accesses_permil: 1000,
            weight_age_permil: 0,
            action: DamosAction::MigrateHot,
            young_filter: false,
            young_filter_allow: true,
            quota_goals: Vec::new(),
            apply_interval_us: 0,
            intervals_goal: None,
        }
    }
}

impl DamonParams {
    /// Shrinks byte-denominated knobs with the machine (`--scale`).
    pub fn scale_rates(&mut self, scale: f64) {
        // Quota bytes shrink with the machine; at least one page.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        if self.quota_bytes > 0 {
            self.quota_bytes = ((self.quota_bytes as f64 * scale).round() as u64).max(4096);
        }
    }
}

/// One DAMON region (`struct damon_region`): a range of the monitored address space and what
/// sampling found in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DamonRegion {
    /// First address: a slot of `monitor_node` (`paddr`) or a unit id (`vaddr`).
    pub start: u32,
    /// One past the last address.
    pub end: u32,
    /// Samples of the current aggregation interval that found the sampled page accessed.
    pub nr_accesses: u32,
    /// `nr_accesses` of the last completed aggregation interval (what `tried_regions` shows).
    pub last_nr_accesses: u32,
    /// Aggregation intervals since the region's access frequency last changed much, or since
    /// the scheme's action was applied to it.
    pub age: u32,
}

impl DamonRegion {
    fn new(start: u32, end: u32) -> Self {
        DamonRegion {
            start,
            end,
            nr_accesses: 0,
            last_nr_accesses: 0,
            age: 0,
        }
    }
    /// Addresses in the region.
    #[must_use]
    pub fn len(&self) -> u32 {
        self.end - self.start
    }
    /// Whether the region is empty (never, for a region DAMON keeps).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

/// The scheme's statistics (`schemes/<S>/stats/`, `struct damos_stat`), bytes and counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DamosStats {
    /// Regions the action was tried on.
    pub nr_tried: u64,
    /// Bytes of those regions.
    pub sz_tried: u64,
    /// Regions where the action applied to at least one page.
    pub nr_applied: u64,
    /// Bytes the action applied to (migrated).
    pub sz_applied: u64,
    /// Bytes that passed the ops filters (`young`), or every page found when there are none.
    pub sz_ops_filter_passed: u64,
    /// Quota windows that ended with the quota used up.
    pub qt_exceeds: u64,
}

/// `struct damos_quota`'s run-time state.
#[derive(Clone, Copy, Debug, Default)]
struct Quota {
    /// Effective size quota of the window, bytes (`esz`).
    esz: u64,
    /// The goals' feedback loop input (`esz_bp`): `esz` x 10000.
    esz_bp: u64,
    /// Bytes charged in the window.
    charged_sz: u64,
    /// Start of the window, ns (`charged_from`); `None` before the first.
    charged_from: Option<u64>,
    /// Bytes charged in all finished windows.
    total_charged_sz: u64,
    /// Time spent applying the action, ns.
    total_charged_ns: f64,
    /// Where the next window resumes after a full one (`charge_addr_from`).
    charge_addr_from: Option<u32>,
    /// Lowest `damon_hot_score()` the scheme applies to in this pass.
    min_score: i64,
}

/// DAMON + one DAMOS `migrate_hot` scheme as a mechanism.
///
/// Counters (in [`Accounting::vmstat`](crate::mechanism::Accounting)): `damos_nr_tried`,
/// `damos_sz_tried`, `damos_nr_applied`, `damos_sz_applied`, `damos_sz_ops_filter_passed`,
/// `damos_qt_exceeds` (bytes or counts, as sysfs shows them), `damos_mpol_skipped` (base pages
/// kept in place by their mempolicy), `pgmigrate_success`, `pgmigrate_fail` (base pages), and
/// the gauge `damon_nr_regions` (the latest count, overwritten every step).
#[derive(Debug)]
pub struct Damon {
    p: DamonParams,
    regions: Vec<DamonRegion>,
    /// Addresses covered by `regions`, `[0, span)`.
    span: u32,
    /// Bytes per address (learnt from the first occupied slot).
    unit_bytes: u64,
    /// Addresses per slot (paddr) or unit id (vaddr): the machine's grain, learnt with
    /// `unit_bytes` (see "Address space").
    grain: u32,
    /// The next sampling instant, ns.
    next_sample_ns: Option<u64>,
    passed_sample_intervals: u64,
    next_aggregation_sis: u64,
    next_ops_update_sis: u64,
    /// `next_intervals_tune_sis`: the aggregation at or after which the intervals are tuned.
    next_intervals_tune_sis: u64,
    /// When the scheme applies next with an `apply_interval_us` (`next_apply_sis`, in time).
    next_apply_ns: u64,
    /// Region size limit of the last `damon_apply_min_nr_regions()`, bytes.
    sz_limit: u64,
    /// `kdamond_split_regions()`'s `last_nr_regions` (a function static in the kernel).
    last_nr_regions: usize,
    quota: Quota,
    stats: DamosStats,
    /// Per unit: when its accessed bit was last known clear, ms, or [`KNOWN_YOUNG`]. Kept
    /// only with the `young` filter.
    last_clear_ms: Vec<u32>,
    /// Appended to the gauges' names: empty for a lone kdamond or kdamond 0 (see
    /// [`Kdamonds`]).
    gauge_suffix: String,
    /// Per region of the current pass: its draw, the sampled unit (`u32::MAX` for a free
    /// page, [`CLASS_ONLY`] when only its class was read) and its access rate (see `sample`).
    draws: Vec<(u64, u32, f64)>,
}

impl Damon {
    /// DAMON with `params`. Regions are set up on the first step, over the span then known.
    #[must_use]
    pub fn new(params: &DamonParams) -> Self {
        let mut d = Damon {
            p: params.clone(),
            regions: Vec::new(),
            span: 0,
            unit_bytes: PAGE_SIZE,
            grain: 1,
            next_sample_ns: None,
            passed_sample_intervals: 0,
            next_aggregation_sis: 0,
            next_ops_update_sis: 0,
            next_intervals_tune_sis: 0,
            next_apply_ns: params.apply_interval_us.saturating_mul(1000),
            sz_limit: 0,
            last_nr_regions: 0,
            quota: Quota::default(),
            stats: DamosStats::default(),
            last_clear_ms: Vec::new(),
            gauge_suffix: String::new(),
            draws: Vec::new(),
        };
        // kdamond_init_ctx(): the first aggregation and ops update are one interval away.
        d.next_aggregation_sis = d.aggr_samples();
        d.next_ops_update_sis = d.update_samples();
        d.next_intervals_tune_sis =
            d.next_aggregation_sis * d.p.intervals_goal.map_or(0, |g| g.aggrs);
        d
    }

    /// The knobs.
    #[must_use]
    pub fn params(&self) -> &DamonParams {
        &self.p
    }

    /// Sets the sampling interval, keeping the samples per aggregation, as
    /// `kdamond_tune_intervals()` does (`aggr_interval = sample_interval x aggr_samples`); the
    /// next sample keeps its time, and the next ops update is counted from now in the new
    /// samples, as `damon_set_attrs()` counts it.
    pub fn set_sample_us(&mut self, sample_us: u64) {
        let samples = self.aggr_samples();
        self.p.sample_us = sample_us.max(1);
        self.p.aggr_us = self.p.sample_us.saturating_mul(samples);
        self.next_ops_update_sis = self.passed_sample_intervals + self.update_samples();
    }

    /// The sampling interval in force, µs (tuned, when there is a goal).
    #[must_use]
    pub fn sample_us(&self) -> u64 {
        self.p.sample_us
    }

    /// Sets the tuning range (`intervals_goal/{min,max}_sample_us`), or, without a goal, only
    /// bounds the fixed interval, and moves the sampling interval into it at once, as the
    /// daemon's `set_sample_range` does on a `commit`.
    pub fn set_sample_range(&mut self, min_us: u64, max_us: u64) {
        let (min_us, max_us) = (min_us.max(1), max_us.max(min_us.max(1)));
        if let Some(g) = &mut self.p.intervals_goal {
            (g.min_sample_us, g.max_sample_us) = (min_us, max_us);
        }
        let s = self.p.sample_us.clamp(min_us, max_us);
        if s != self.p.sample_us {
            self.set_sample_us(s);
        }
    }

    /// `kdamond_tune_intervals()`, at the end of an aggregation before its counts are reset:
    /// the score of what this aggregation observed, the next sampling interval, and
    /// and, when the interval changes, `damon_set_attrs()`'s bookkeeping (see
    /// [`Damon::set_sample_us`]; ages rescaled to the new aggregation interval,
    /// `damon_age_for_new_attrs()`).
    fn tune_intervals(&mut self, goal: IntervalsGoal) {
        let samples = self.aggr_samples();
        let (events, max) = self.regions.iter().fold((0u128, 0u128), |(e, m), r| {
            let len = u128::from(r.len());
            (
                e + len * u128::from(r.nr_accesses),
                m + len * u128::from(samples),
            )
        });
        let score = tierd_engine::feedback::intervals_score_bp(events, max, goal.access_bp);
        let next = tierd_engine::feedback::tuned_sample_us(
            self.p.sample_us,
            score,
            goal.min_sample_us,
            goal.max_sample_us,
        );
        if next == self.p.sample_us {
            return;
        }
        let old_aggr = self.p.aggr_us.max(1);
        self.set_sample_us(next);
        // damon_age_for_new_attrs(): an age counts aggregation intervals.
        let new_aggr = self.p.aggr_us.max(1);
        for r in &mut self.regions {
            r.age = u32::try_from(u64::from(r.age) * old_aggr / new_aggr).unwrap_or(u32::MAX);
        }
    }

    /// The regions, in address order, contiguous over the monitored span.
    #[must_use]
    pub fn regions(&self) -> &[DamonRegion] {
        &self.regions
    }

    /// The scheme's statistics.
    #[must_use]
    pub fn stats(&self) -> &DamosStats {
        &self.stats
    }

    /// The effective size quota of the current window, bytes (`quotas/effective_bytes`);
    /// 0 when no quota is set.
    #[must_use]
    pub fn effective_quota_bytes(&self) -> u64 {
        self.quota.esz
    }

    /// Bytes per monitored address (the size of one slot's unit).
    #[must_use]
    pub fn unit_bytes(&self) -> u64 {
        self.unit_bytes
    }

    fn sample_ns(&self) -> u64 {
        self.p.sample_us.max(1) * 1000
    }

    /// `damon_max_nr_accesses()`: samples per aggregation interval.
    fn aggr_samples(&self) -> u64 {
        (self.p.aggr_us / self.p.sample_us.max(1)).max(1)
    }

    /// Samples per ops update interval (`update_us`).
    fn update_samples(&self) -> u64 {
        (self.p.update_us / self.p.sample_us.max(1)).max(1)
    }

    fn min_nr_regions(&self) -> u64 {
        u64::from(self.p.min_nr_regions.max(1))
    }

    fn max_nr_regions(&self) -> usize {
        self.p.max_nr_regions.max(self.p.min_nr_regions).max(1) as usize
    }

    fn bytes(&self, r: &DamonRegion) -> u64 {
        u64::from(r.len()) * self.unit_bytes
    }

    /// The size of the address space to monitor now.
    fn current_span(&self, mem: &Memory) -> u32 {
        let (slots, whole) = match self.p.ops {
            DamonOps::Paddr => {
                let Some(node) = mem.node(NodeId(self.p.monitor_node)) else {
                    return 0;
                };
                let per = (self.unit_bytes / PAGE_SIZE).max(1);
                let whole = self
                    .p
                    .monitor_whole_node
                    .then(|| u32::try_from(node.capacity.0 / per).unwrap_or(u32::MAX));
                (node.slots(), whole)
            }
            DamonOps::Vaddr => (mem.units(), None),
        };
        let used = slots.saturating_mul(self.grain);
        whole.map_or(used, |w| used.max(w))
    }

    /// The slots (paddr) or unit ids (vaddr) with a page in `r` (see "Address space"; `r`'s
    /// addresses themselves at grain 1).
    #[must_use]
    pub fn slots_in(&self, r: &DamonRegion) -> std::ops::Range<u32> {
        r.start / self.grain..r.end.div_ceil(self.grain)
    }

    /// Extends the regions over a grown span the way `damon_set_regions()` fits a target to a
    /// new range: the last region is stretched, then `damon_apply_min_nr_regions()` cuts it.
    fn sync_span(&mut self, mem: &Memory) {
        if self.regions.is_empty() {
            self.grain = u32::try_from(mem.grain()).unwrap_or(1).max(1);
            self.unit_bytes = learn_unit_bytes(&self.p, mem) / u64::from(self.grain);
        }
        let span = self.current_span(mem);
        if span <= self.span {
            return;
        }
        match self.regions.last_mut() {
            Some(last) => last.end = span,
            None => self.regions.push(DamonRegion::new(0, span)),
        }
        self.span = span;
        self.sz_limit = self.apply_min_nr_regions();
    }

    /// `damon_region_sz_limit()`: total size / `min_nr_regions`, at least one address.
    fn region_sz_limit(&self) -> u64 {
        let total = u64::from(self.span) * self.unit_bytes;
        (total / self.min_nr_regions()).max(self.unit_bytes)
    }

    /// `damon_apply_min_nr_regions()`: cuts every region larger than the size limit into
    /// pieces of the limit; returns the limit, bytes.
    fn apply_min_nr_regions(&mut self) -> u64 {
        let max_sz = self.region_sz_limit().div_ceil(self.unit_bytes) * self.unit_bytes;
        let max_len = u32::try_from(max_sz / self.unit_bytes)
            .unwrap_or(u32::MAX)
            .max(1);
        if self.regions.iter().any(|r| r.len() > max_len) {
            let mut out = Vec::with_capacity(self.regions.len() + 1);
            for r in &self.regions {
                let mut left = *r;
                while left.len() > max_len {
                    let mut piece = left;
                    piece.end = left.start + max_len;
                    out.push(piece);
                    left.start = piece.end;
                }
                out.push(left);
            }
            self.regions = out;
        }
        max_sz
    }

    /// One sampling interval ending at `t`; returns kdamond's CPU time for it, ns.
    fn sample(&mut self, ctx: &mut Ctx<'_>, t: u64) -> f64 {
        if self.p.ops == DamonOps::Paddr || self.regions.is_empty() {
            // paddr's range is the whole node from the start (the slots in use are the part
            // that ever held pages); vaddr picks up new mappings at `update_us`.
            self.sync_span(ctx.mem);
        }
        let mut cost = 0.0;
        // A region's page is made old during the prepare pass and checked during the check
        // pass: between the two lie the rest of the prepares, the sleep and the checks before
        // it, i.e. the sampling interval plus half a region's sampling work per region.
        let gap_ns = self.sample_ns() as f64 + self.regions.len() as f64 * SAMPLE_REGION_NS / 2.0;
        let tau_s = gap_ns * 1e-9;
        let track_young = self.p.young_filter;
        let t_ms = ms_of(t);
        let mut max_nr_accesses = 0;
        let space = Space::of(&self.p, ctx.mem, self.grain);
        // One draw from the run's ChaCha seeds a SplitMix64 stream for the pass: a ChaCha
        // draw per region would take most of the simulator's time with thousands of regions.
        let mut stream = SplitMix64(ctx.rng.gen());
        // Three passes over the regions: draw and look up the sampled units, then their
        // rates, then decide. Each lookup is a cache miss (the slot table, then the unit's
        // class); with nothing else in a loop the CPU overlaps many of them. Same draws, in
        // the same order, as one pass would make.
        let mut draws = std::mem::take(&mut self.draws);
        draws.clear();
        draws.extend(self.regions.iter().map(|r| {
            // One 64-bit draw per region: the high half picks the page
            // (__damon_pa_prepare_access_check(): damon_rand(r->ar.start, r->ar.end)), the
            // low half decides whether it was accessed.
            let x = stream.next_u64();
            let addr = r.start + (((x >> 32) * u64::from(r.len())) >> 32) as u32;
            // The block summary answers most draws without the slot table: a free block, or
            // a full block of a uniform class (every unit has the class's rate). The unit
            // itself is only needed to track young pages or for a Zipf rank.
            let known = match space.hint(addr) {
                SlotHint::Free => Some((u32::MAX, 0.0)),
                SlotHint::Class(c) if !track_young => ctx
                    .load
                    .uniform_page_rate(ctx.mem, c)
                    .map(|rate| (CLASS_ONLY, rate)),
                _ => None,
            };
            let (raw, rate) =
                known.unwrap_or_else(|| (space.unit_at(addr).map_or(u32::MAX, |u| u.0), 0.0));
            (x, raw, rate)
        }));
        for d in &mut draws {
            if d.1 != u32::MAX && d.1 != CLASS_ONLY {
                // The sampled address is one page of the unit: a grained unit's page has
                // one page's rate.
                d.2 = ctx.load.page_rate(ctx.mem, UnitId(d.1));
            }
        }
        // The access probability of the last rate seen: units of a uniform class share one.
        let mut last_p: Option<(f64, f64)> = None;
        for (r, &(x, raw, rate)) in self.regions.iter_mut().zip(&draws) {
            if raw == u32::MAX {
                cost += SAMPLE_FREE_NS;
                max_nr_accesses = max_nr_accesses.max(r.nr_accesses);
                continue;
            }
            let u = UnitId(raw);
            cost += SAMPLE_REGION_NS;
            let coin = (x & 0xFFFF_FFFF) as f64 / 4_294_967_296.0;
            let accessed = rate > 0.0 && {
                let p = match last_p {
                    Some((r0, p)) if r0 == rate => p,
                    _ => {
                        let p = -(-rate * tau_s).exp_m1();
                        last_p = Some((rate, p));
                        p
                    }
                };
                coin < p
            };
            if accessed {
                r.nr_accesses += 1;
            }
            if track_young {
                // mkold at the start of the interval; a miss at the end means still clear.
                set_last_clear(
                    &mut self.last_clear_ms,
                    u,
                    if accessed { KNOWN_YOUNG } else { t_ms },
                );
            }
            max_nr_accesses = max_nr_accesses.max(r.nr_accesses);
        }
        self.draws = draws;
        self.passed_sample_intervals += 1;

        let aggregating = self.passed_sample_intervals >= self.next_aggregation_sis;
        if aggregating && !self.regions.is_empty() {
            self.merge_regions(max_nr_accesses / 10, self.sz_limit);
            self.sz_limit = self.apply_min_nr_regions();
            cost += self.regions.len() as f64 * AGGR_REGION_NS;
        }
        // kdamond_apply_schemes(), after the merge: a scheme applies once its apply interval
        // has passed (`next_apply_sis`), at whichever sample that falls on; without one, once
        // per aggregation interval.
        let due = if self.p.apply_interval_us == 0 {
            aggregating
        } else {
            t >= self.next_apply_ns
        };
        if due && !self.regions.is_empty() {
            self.next_apply_ns = t.saturating_add(self.p.apply_interval_us.saturating_mul(1000));
            cost += self.apply_schemes(ctx, t);
        }
        if aggregating {
            if let Some(goal) = self.p.intervals_goal {
                if goal.aggrs > 0 && self.passed_sample_intervals >= self.next_intervals_tune_sis {
                    self.next_intervals_tune_sis += self.aggr_samples() * goal.aggrs;
                    self.tune_intervals(goal);
                }
            }
            self.next_aggregation_sis = self.passed_sample_intervals + self.aggr_samples();
            for r in &mut self.regions {
                // kdamond_reset_aggregated()
                r.last_nr_accesses = r.nr_accesses;
                r.nr_accesses = 0;
            }
            self.split_regions(ctx);
        }
        if self.passed_sample_intervals >= self.next_ops_update_sis {
            self.next_ops_update_sis = self.passed_sample_intervals + self.update_samples();
            if self.p.ops == DamonOps::Vaddr {
                // damon_va_update(): new mappings join the target.
                self.sync_span(ctx.mem);
            }
        }
        cost
    }

    /// `kdamond_merge_regions()`: merge with `threshold`, doubling it while more than
    /// `max_nr_regions` remain, up to `aggr / sample`.
    fn merge_regions(&mut self, threshold: u32, sz_limit: u64) {
        let max_thres = u32::try_from(self.aggr_samples()).unwrap_or(u32::MAX);
        let mut thres = threshold;
        loop {
            self.merge_regions_of(thres, sz_limit);
            thres = thres.saturating_mul(2).max(1);
            if !(self.regions.len() > self.max_nr_regions() && thres / 2 < max_thres) {
                break;
            }
        }
    }

    /// `damon_merge_regions_of()`: update ages, merge adjacent regions with similar
    /// `nr_accesses` whose combined size stays within `sz_limit`.
    fn merge_regions_of(&mut self, thres: u32, sz_limit: u64) {
        let unit_bytes = self.unit_bytes;
        let mut out: Vec<DamonRegion> = Vec::with_capacity(self.regions.len());
        for mut r in self.regions.drain(..) {
            if r.nr_accesses.abs_diff(r.last_nr_accesses) > thres
                || (r.nr_accesses == 0) != (r.last_nr_accesses == 0)
            {
                r.age = 0;
            } else {
                r.age = r.age.saturating_add(1);
            }
            if let Some(prev) = out.last_mut() {
                let size = u64::from(prev.len() + r.len()) * unit_bytes;
                if prev.end == r.start
                    && prev.nr_accesses.abs_diff(r.nr_accesses) <= thres
                    && size <= sz_limit
                {
                    merge_two(prev, &r);
                    continue;
                }
            }
            out.push(r);
        }
        self.regions = out;
    }

    /// `kdamond_split_regions()` / `damon_split_regions_of()`.
    fn split_regions(&mut self, ctx: &mut Ctx<'_>) {
        let nr = self.regions.len();
        let max = self.max_nr_regions();
        if nr > max / 2 {
            return;
        }
        // "Maybe the middle of the region has different access frequency".
        let nr_subs = if self.last_nr_regions == nr && nr < max / 3 {
            3
        } else {
            2
        };
        let mut out = Vec::with_capacity(nr * nr_subs);
        let mut rights: Vec<DamonRegion> = Vec::with_capacity(nr_subs);
        for r in &self.regions {
            let mut left = *r;
            let mut sz = left.len();
            rights.clear();
            let mut i = 0;
            while i < nr_subs - 1 && sz > 2 {
                i += 1;
                // Left piece 10 % .. 90 % of the region: damon_rand(1, 10) * sz / 10.
                let sub =
                    u32::try_from(u64::from(ctx.rng.gen_range(1..10u32)) * u64::from(sz) / 10)
                        .unwrap_or(0);
                if sub == 0 || sub >= sz {
                    continue;
                }
                let mut right = left;
                right.start = left.start + sub;
                left.end = right.start;
                rights.push(right);
                sz = sub;
            }
            out.push(left);
            // Each new right piece went in just after the piece it was cut from.
            out.extend(rights.iter().rev());
        }
        self.regions = out;
        self.last_nr_regions = nr;
    }

    fn quota_is_set(&self) -> bool {
        self.quota.esz > 0
            || self.p.quota_bytes > 0
            || self.p.quota_ms > 0
            || !self.p.quota_goals.is_empty()
    }

    /// `damos_quota_is_full()`.
    fn quota_is_full(&self) -> bool {
        if !self.quota_is_set() {
            return false;
        }
        let q = &self.quota;
        q.charged_sz >= q.esz || q.esz - q.charged_sz < self.unit_bytes
    }

    /// `damos_set_effective_quota()`: the goals' feedback (`damos_goal_tune_esz_bp_consist()`:
    /// the input moves by the highest goal score's distance from its goal, from a floor of
    /// 1 byte), the time quota turned into bytes at the throughput measured so far, and the
    /// size quota, whichever is smallest.
    fn set_effective_quota(&mut self, mem: &Memory) {
        let q = &mut self.quota;
        if self.p.quota_ms == 0 && self.p.quota_goals.is_empty() {
            q.esz = self.p.quota_bytes;
            return;
        }
        let mut esz = u64::MAX;
        if !self.p.quota_goals.is_empty() {
            // damos_quota_score(): the highest score, the least aggressive.
            let score = self
                .p
                .quota_goals
                .iter()
                .map(|g| g.current_value(mem) * 10_000 / g.target_value.max(1))
                .max()
                .unwrap_or(0);
            q.esz_bp = tierd_engine::feedback::feed_loop_next_input(q.esz_bp.max(10_000), score);
            esz = q.esz_bp / 10_000;
        }
        if self.p.quota_ms > 0 {
            let throughput = if q.total_charged_ns > 0.0 {
                (q.total_charged_sz as f64 * 1e6 / q.total_charged_ns) as u64
            } else {
                DEFAULT_QUOTA_THROUGHPUT_BYTES_PER_MS
            };
            esz = esz.min(
                throughput
                    .saturating_mul(self.p.quota_ms)
                    .max(self.unit_bytes),
            );
        }
        if self.p.quota_bytes > 0 && self.p.quota_bytes < esz {
            esz = self.p.quota_bytes;
        }
        q.esz = esz;
    }

    /// `damos_adjust_quota()`: charge windows and the minimum score that fits the quota.
    fn adjust_quota(&mut self, ctx: &mut Ctx<'_>, t: u64) {
        if self.p.quota_ms == 0 && self.p.quota_bytes == 0 && self.p.quota_goals.is_empty() {
            return;
        }
        let reset_ns = self.p.quota_reset_interval_ms.saturating_mul(1_000_000);
        match self.quota.charged_from {
            None => {
                self.quota.charged_from = Some(t);
                self.set_effective_quota(ctx.mem);
            }
            Some(from) if t >= from.saturating_add(reset_ns) => {
                if self.quota_is_full() {
                    self.stats.qt_exceeds += 1;
                    ctx.acct.count("damos_qt_exceeds", 1);
                }
                self.quota.total_charged_sz += self.quota.charged_sz;
                self.quota.charged_from = Some(t);
                self.quota.charged_sz = 0;
                self.set_effective_quota(ctx.mem);
            }
            Some(_) => {}
        }
        // The score histogram: the hottest regions that together fill the quota.
        let mut hist = [0u64; DAMOS_MAX_SCORE as usize + 1];
        let mut max_score = 0;
        for r in &self.regions {
            if !self.pattern_matches(r) {
                continue;
            }
            let s = self.score(r);
            hist[s as usize] += self.bytes(r);
            max_score = max_score.max(s);
        }
        let mut score = max_score;
        let mut cumulated = 0;
        loop {
            cumulated += hist[score as usize];
            if cumulated >= self.quota.esz || score == 0 {
                break;
            }
            score -= 1;
        }
        self.quota.min_score = score;
    }

    /// `__damos_valid_target()` without the size range (not among the knobs): the access
    /// count it matches is the moving sum, `nr_accesses_bp / 10000`.
    fn pattern_matches(&self, r: &DamonRegion) -> bool {
        (self.p.nr_accesses_min..=self.p.nr_accesses_max).contains(&self.moving_nr_accesses(r))
            && (self.p.age_min..=self.p.age_max).contains(&r.age)
    }

    /// `r->nr_accesses_bp / 10000`: `damon_update_region_access_rate()` takes
    /// `last_nr_accesses x 10000 / aggr_samples` off the moving sum and adds the new sample's
    /// 10000 or 0 at every sample, so `k` samples into an aggregation it holds the last
    /// aggregation's count fading out and this one's coming in; at the aggregation's end it is
    /// this one's count (the remainder of the division is under one access). A scheme applied
    /// once per aggregation therefore matches on the whole count, and one with an
    /// `apply_interval_us` that falls mid-aggregation on the blend.
    fn moving_nr_accesses(&self, r: &DamonRegion) -> u32 {
        let len = self.aggr_samples();
        let left = self
            .next_aggregation_sis
            .saturating_sub(self.passed_sample_intervals);
        let k = len.saturating_sub(left);
        let last = u64::from(r.last_nr_accesses) * 10_000;
        let bp = last - k * (last / len) + u64::from(r.nr_accesses) * 10_000;
        u32::try_from(bp / 10_000).unwrap_or(u32::MAX)
    }

    /// What the quota serves first: `damon_hot_score()` for `migrate_hot`,
    /// `damon_cold_score()` (`DAMOS_MAX_SCORE` less the hot score) for `migrate_cold`.
    fn score(&self, r: &DamonRegion) -> i64 {
        match self.p.action {
            DamosAction::MigrateHot => self.hot_score(r),
            DamosAction::MigrateCold => DAMOS_MAX_SCORE - self.hot_score(r),
        }
    }

    /// `damos_valid_target()`: the pattern, and the score cut when a quota is set.
    fn valid_target(&self, r: &DamonRegion) -> bool {
        self.pattern_matches(r) && (!self.quota_is_set() || self.score(r) >= self.quota.min_score)
    }

    /// `damon_hot_score()` (mm/damon/ops-common.c), which `damon_pa_scheme_score()` uses for
    /// `migrate_hot`: access frequency and age, weighted, in `0..=DAMOS_MAX_SCORE`.
    fn hot_score(&self, r: &DamonRegion) -> i64 {
        let freq_w = i64::from(self.p.weight_nr_accesses_permil);
        let age_w = i64::from(self.p.weight_age_permil);
        let samples = i64::try_from(self.aggr_samples()).unwrap_or(i64::MAX);
        let freq_subscore = i64::from(r.nr_accesses) * DAMON_MAX_SUBSCORE / samples;
        let age_in_sec = u64::from(r.age) * self.p.aggr_us / 1_000_000;
        let mut age_in_log = if age_in_sec > 0 {
            (i64::from(age_in_sec.ilog2()) + 1).min(DAMON_MAX_AGE_IN_LOG)
        } else {
            0
        };
        // "If frequency is 0, higher age means it's colder".
        if freq_subscore == 0 {
            age_in_log = -age_in_log;
        }
        age_in_log += DAMON_MAX_AGE_IN_LOG;
        let age_subscore = age_in_log * DAMON_MAX_SUBSCORE / DAMON_MAX_AGE_IN_LOG / 2;
        let mut hotness = freq_w * freq_subscore + age_w * age_subscore;
        if freq_w + age_w > 0 {
            hotness /= freq_w + age_w;
        }
        (hotness * DAMOS_MAX_SCORE / DAMON_MAX_SUBSCORE).clamp(0, DAMOS_MAX_SCORE)
    }

    /// Splits region `i` after `len` addresses (`damon_split_region_at()`).
    fn split_at(&mut self, i: usize, len: u32) {
        let mut right = self.regions[i];
        right.start += len;
        self.regions[i].end = right.start;
        self.regions.insert(i + 1, right);
    }

    /// `damos_skip_charged_region()`: after a full window, the next one resumes where the
    /// last charge ended instead of charging the same regions again.
    fn skip_charged_region(&mut self, i: usize) -> bool {
        let Some(from) = self.quota.charge_addr_from else {
            return false;
        };
        let r = self.regions[i];
        if i + 1 == self.regions.len() {
            self.quota.charge_addr_from = None;
            return true;
        }
        if from > 0 && r.end <= from {
            return true;
        }
        if from > 0 && r.start < from {
            let skip = from - r.start;
            self.split_at(i, skip);
            return true;
        }
        self.quota.charge_addr_from = None;
        false
    }

    /// `kdamond_apply_schemes()` / `damos_apply_target()`; returns kdamond's CPU time, ns.
    fn apply_schemes(&mut self, ctx: &mut Ctx<'_>, t: u64) -> f64 {
        self.adjust_quota(ctx, t);
        let max_len = u32::try_from(self.region_sz_limit() / self.unit_bytes).unwrap_or(u32::MAX);
        let mut cost = 0.0;
        let mut i = 0;
        while i < self.regions.len() {
            // damon_do_apply_schemes() for the one scheme.
            if !self.quota_is_full()
                && !self.skip_charged_region(i)
                && self.valid_target(&self.regions[i])
            {
                cost += self.apply_scheme(ctx, i, t);
            }
            // Merge a slice cut for the quota back when that loses nothing.
            if i > 0 {
                let (p, r) = (self.regions[i - 1], self.regions[i]);
                if p.end == r.start
                    && p.age == r.age
                    && p.last_nr_accesses == r.last_nr_accesses
                    && p.nr_accesses == r.nr_accesses
                    && r.end - p.start <= max_len
                {
                    self.regions[i - 1].end = r.end;
                    self.regions.remove(i);
                    continue;
                }
            }
            i += 1;
        }
        cost
    }

    /// `damos_apply_scheme()`: cut the region to the quota left, migrate it, charge the quota,
    /// update the stats. Returns kdamond's CPU time, ns.
    fn apply_scheme(&mut self, ctx: &mut Ctx<'_>, i: usize, t: u64) -> f64 {
        let mut sz = self.bytes(&self.regions[i]);
        if self.quota_is_set() && self.quota.charged_sz + sz > self.quota.esz {
            let left = self.quota.esz.saturating_sub(self.quota.charged_sz) / self.unit_bytes;
            if left == 0 {
                self.update_stat(ctx, 0, 0, 0, false);
                return 0.0;
            }
            self.split_at(i, u32::try_from(left).unwrap_or(u32::MAX));
            sz = left * self.unit_bytes;
        }
        let Migrated {
            bytes: applied,
            passed,
            cost,
            any,
        } = self.migrate_region(ctx, i, t);
        self.quota.total_charged_ns += cost;
        // damos_charge_quota() with fail_charge_denom = 0: the whole region is charged.
        self.quota.charged_sz += sz;
        if self.quota_is_full() {
            self.quota.charge_addr_from = Some(self.regions[i].end);
        }
        self.regions[i].age = 0;
        self.update_stat(ctx, sz, applied, passed, any);
        cost
    }

    /// `damos_update_stat()`; `any`: the action applied to at least one page (counted in
    /// `nr_applied`).
    fn update_stat(
        &mut self,
        ctx: &mut Ctx<'_>,
        sz_tried: u64,
        sz_applied: u64,
        passed: u64,
        any: bool,
    ) {
        self.stats.nr_tried += 1;
        self.stats.sz_tried += sz_tried;
        ctx.acct.count("damos_nr_tried", 1);
        ctx.acct.count("damos_sz_tried", sz_tried);
        if any {
            self.stats.nr_applied += 1;
            ctx.acct.count("damos_nr_applied", 1);
        }
        self.stats.sz_applied += sz_applied;
        self.stats.sz_ops_filter_passed += passed;
        ctx.acct.count("damos_sz_applied", sz_applied);
        ctx.acct.count("damos_sz_ops_filter_passed", passed);
    }

    /// `damon_pa_migrate()` then `damon_migrate_pages()`: every page in the region goes to
    /// `target_nid`, in address order.
    fn migrate_region(&mut self, ctx: &mut Ctx<'_>, i: usize, t: u64) -> Migrated {
        let r = self.regions[i];
        let target = NodeId(self.p.target_nid);
        let t_ms = ms_of(t);
        let mut cost = 0.0;
        let mut passed = 0;
        let mut isolated: Vec<UnitId> = Vec::new();
        let mut mpol_skipped = 0;
        let mut declined = false;
        // In a grained machine an address is a frame, each walked (a free one as well: the
        // walk steps a page at a time where there is no folio), and a unit's are each checked
        // by the filter; one draw stands for all of them. A THP is one step. A unit the region
        // holds only part of (at either end; see "Address space") is taken with the part's
        // share of its pages as probability, so that a region moves, on average, the pages it
        // holds, as page by page.
        let g = self.grain;
        for slot in self.slots_in(&r) {
            let first = slot * g;
            let held = r.end.min(first + g) - r.start.max(first);
            cost += APPLY_FRAME_NS;
            cost += APPLY_FRAME_NS * f64::from(held.saturating_sub(1));
            let Some(u) = Space::of(&self.p, ctx.mem, 1).unit_at(slot) else {
                continue;
            };
            // The held part's share of the unit's bytes and pages (all of them at grain 1).
            let part = |of: u64| of * u64::from(held) / u64::from(g);
            let bytes = ctx.mem.unit_pages(u) * PAGE_SIZE;
            let frames = f64::from(held);
            if self.p.young_filter {
                cost += YOUNG_CHECK_NS * frames;
                let young = self.is_young(ctx, u, t_ms);
                // A young page is made old by the filter; an old one stays old.
                set_last_clear(&mut self.last_clear_ms, u, t_ms);
                if young != self.p.young_filter_allow {
                    continue;
                }
            }
            passed += part(bytes);
            if ctx.mem.node_of(u) == target {
                // vaddr: already there (__damon_migrate_folio_list() returns 0).
                continue;
            }
            if !ctx.mem.region_of(u).policy.allows(target) {
                mpol_skipped += part(ctx.mem.unit_pages(u));
                continue;
            }
            if held < g && ctx.rng.gen_range(0..g) >= held {
                // Page by page the held pages would have gone: the region counts as applied.
                declined = true;
                continue;
            }
            isolated.push(u);
        }
        if mpol_skipped > 0 {
            ctx.acct.count("damos_mpol_skipped", mpol_skipped);
        }
        let Some(capacity) = ctx.mem.node(target).map(|n| n.capacity) else {
            // damon_migrate_pages(): an invalid target puts everything back.
            return Migrated {
                bytes: 0,
                passed,
                cost,
                any: false,
            };
        };
        // The destination is allocated with __GFP_THISNODE | GFP_NOWAIT | __GFP_NOMEMALLOC
        // and no reclaim (ops-common.c __damon_migrate_folio_list()): it fails below the
        // node's min watermark, and migrate_pages() stops at the first -ENOMEM.
        let wmark_min = Watermarks::of(capacity, ctx.kernel.watermark_scale_factor).min;
        let mut applied = 0;
        // Pages moved and failed, counted once at the end (a counter is looked up by name);
        // a unit has at least one page, so a count above 0 is one the loop would have made.
        let (mut moved, mut failed) = (0u64, 0u64);
        for u in isolated {
            let pages = ctx.mem.unit_pages(u);
            if ctx.mem.free(target).pages().0 < pages + wmark_min.0 {
                failed += pages;
                break;
            }
            match ctx.migrate(u, target) {
                Ok(()) => {
                    applied += pages * PAGE_SIZE;
                    moved += pages;
                    // Per folio moved: a THP is one folio, a split one 512 (its pages
                    // counted after the move: a split happens on the way).
                    let folios = (pages / ctx.mem.folio_pages(u)) as f64;
                    cost += MIGRATE_FOLIO_NS * folios + MIGRATE_COPY_NS_PER_PAGE * pages as f64;
                }
                Err(_) => failed += pages,
            }
        }
        if moved > 0 {
            ctx.acct.count("pgmigrate_success", moved);
        }
        if failed > 0 {
            ctx.acct.count("pgmigrate_fail", failed);
        }
        Migrated {
            bytes: applied,
            passed,
            cost,
            any: applied > 0 || declined,
        }
    }

    /// The `young` filter's `damon_folio_young()`: is the page's accessed bit set now?
    fn is_young(&self, ctx: &mut Ctx<'_>, u: UnitId, t_ms: u32) -> bool {
        let since = self.last_clear_ms.get(u.idx()).copied().unwrap_or(0);
        if since == KNOWN_YOUNG {
            return true;
        }
        let rate = ctx.load.page_rate(ctx.mem, u);
        let dt_s = f64::from(t_ms.saturating_sub(since)) * 1e-3;
        rate > 0.0 && ctx.rng.gen::<f64>() < -(-rate * dt_s).exp_m1()
    }
}

impl Mechanism for Damon {
    fn step(&mut self, ctx: &mut Ctx<'_>) {
        let end = ctx.now.saturating_add(ctx.dt);
        let tau = self.sample_ns();
        let mut next = *self
            .next_sample_ns
            .get_or_insert(ctx.now.saturating_add(tau));
        let mut cpu = 0.0;
        while next <= end {
            let cost = self.sample(ctx, next);
            cpu += cost;
            // kdamond_fn() sleeps a full sampling interval after its work
            // (kdamond_usleep()), so the work stretches the interval.
            next += tau + cost as u64;
        }
        self.next_sample_ns = Some(next);
        ctx.charge_promoter(cpu);
        let sfx = &self.gauge_suffix;
        ctx.acct
            .vmstat
            .insert(format!("damon_nr_regions{sfx}"), self.regions.len() as u64);
        if !self.p.quota_goals.is_empty() {
            // `quotas/effective_bytes`, which the goals tune.
            ctx.acct
                .vmstat
                .insert(format!("damos_effective_quota_bytes{sfx}"), self.quota.esz);
        }
        if self.p.intervals_goal.is_some() {
            // The tuned interval, as `monitoring_attrs/intervals/sample_us` shows it after
            // `update_tuned_intervals`.
            ctx.acct
                .vmstat
                .insert(format!("damon_sample_us{sfx}"), self.p.sample_us);
        }
    }
}

/// The kdamonds of a DAMON row (one, or more with `kdamonds/nr_kdamonds` > 1), each with its
/// own context and scheme, stepped in order, kdamond 0 first. Their counters add up (what
/// `/proc/vmstat` shows for the machine); kdamond N's gauges end in `_kN` (N from 1), the
/// first's keep their names. Each keeps its own idea of the accessed bits its `young` filter
/// cleared, which is exact while they watch different nodes, as DAMON's tiering contexts do.
#[derive(Debug)]
pub struct Kdamonds(Vec<Damon>);

impl Kdamonds {
    /// kdamond 0 with `first`, then one per entry of `more`.
    #[must_use]
    pub fn new(first: &DamonParams, more: &[DamonParams]) -> Self {
        let mut all = vec![Damon::new(first)];
        for (i, p) in more.iter().enumerate() {
            let mut d = Damon::new(p);
            d.gauge_suffix = format!("_k{}", i + 1);
            all.push(d);
        }
        Kdamonds(all)
    }

    /// The kdamonds, kdamond 0 first.
    #[must_use]
    pub fn kdamonds(&self) -> &[Damon] {
        &self.0
    }
}

impl Mechanism for Kdamonds {
    fn step(&mut self, ctx: &mut Ctx<'_>) {
        for d in &mut self.0 {
            d.step(ctx);
        }
    }
}

/// What a scheme's walk of one region did ([`Damon::migrate_region`]).
struct Migrated {
    /// Bytes migrated.
    bytes: u64,
    /// Bytes that passed the filters.
    passed: u64,
    /// kdamond's CPU time, ns.
    cost: f64,
    /// Whether the action applied to at least one page: a page migrated, or, in a grained
    /// machine, a unit the region holds only part of that lost its draw (page by page, the
    /// pages it holds would have moved).
    any: bool,
}

/// The monitored address space, looked up once per pass.
struct Space<'a> {
    kind: SpaceKind<'a>,
    /// Addresses per slot or unit id (see "Address space").
    grain: u32,
}

enum SpaceKind<'a> {
    /// The slots of `monitor_node` (none if the node does not exist).
    Paddr(Option<&'a NodeMem>),
    /// Unit ids.
    Vaddr(&'a Memory),
}

impl<'a> Space<'a> {
    /// `p`'s address space, `grain` addresses to a slot or unit id.
    fn of(p: &DamonParams, mem: &'a Memory, grain: u32) -> Self {
        let kind = match p.ops {
            DamonOps::Paddr => SpaceKind::Paddr(mem.node(NodeId(p.monitor_node))),
            DamonOps::Vaddr => SpaceKind::Vaddr(mem),
        };
        Space {
            kind,
            grain: grain.max(1),
        }
    }

    /// What the physical slot summary knows of a monitored address (nothing for vaddr).
    #[inline]
    fn hint(&self, addr: u32) -> SlotHint {
        match self.kind {
            SpaceKind::Paddr(Some(node)) => node.slot_hint(addr / self.grain),
            SpaceKind::Paddr(None) => SlotHint::Free,
            SpaceKind::Vaddr(_) => SlotHint::Unknown,
        }
    }

    /// The unit at a monitored address, if any (`damon_get_folio()` returning a folio).
    #[inline]
    fn unit_at(&self, addr: u32) -> Option<UnitId> {
        let slot = addr / self.grain;
        match self.kind {
            SpaceKind::Paddr(node) => node.and_then(|n| n.unit_in(slot)),
            SpaceKind::Vaddr(mem) => {
                let u = UnitId(slot);
                (slot < mem.units() && mem.region_of(u).alive).then_some(u)
            }
        }
    }
}

/// The size of one slot or unit id's unit: the unit in the first occupied slot (paddr) or
/// the first unit (vaddr); a base page when there is none yet.
fn learn_unit_bytes(p: &DamonParams, mem: &Memory) -> u64 {
    let span = match p.ops {
        DamonOps::Paddr => mem.node(NodeId(p.monitor_node)).map_or(0, |n| n.slots()),
        DamonOps::Vaddr => mem.units(),
    };
    let space = Space::of(p, mem, 1);
    (0..span.min(UNIT_SIZE_PROBE))
        .find_map(|a| space.unit_at(a))
        .map_or(PAGE_SIZE, |u| mem.unit_pages(u) * PAGE_SIZE)
}

/// SplitMix64 (Steele, Lea, Flood 2014): a fast, well-mixed stream of 64-bit values from a
/// seed, for the per-region draws of one sampling pass.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// `damon_merge_two_regions()`: size-weighted `nr_accesses` and `age`.
fn merge_two(l: &mut DamonRegion, r: &DamonRegion) {
    let (sl, sr) = (u64::from(l.len()), u64::from(r.len()));
    let avg = |a: u32, b: u32| {
        u32::try_from((u64::from(a) * sl + u64::from(b) * sr) / (sl + sr)).unwrap_or(u32::MAX)
    };
    l.nr_accesses = avg(l.nr_accesses, r.nr_accesses);
    l.age = avg(l.age, r.age);
    l.end = r.end;
}

fn set_last_clear(v: &mut Vec<u32>, u: UnitId, value: u32) {
    if v.len() <= u.idx() {
        v.resize(u.idx() + 1, 0);
    }
    v[u.idx()] = value;
}

/// Milliseconds since the start of the run, saturating below [`KNOWN_YOUNG`].
fn ms_of(t_ns: u64) -> u32 {
    u32::try_from(t_ns / 1_000_000)
        .unwrap_or(KNOWN_YOUNG - 1)
        .min(KNOWN_YOUNG - 1)
}

#[cfg(test)]
#[path = "damon_tests.rs"]
mod tests;
