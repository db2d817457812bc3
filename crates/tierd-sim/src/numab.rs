//! Kernel NUMA balancing (`kernel.numa_balancing` modes 1, 2 and 3) as a simulated mechanism.
//!
//! Two parts, split so that tierd's hint-fault source can reuse the first one:
//!
//! - [`Scanner`]: the PTE scanner (kernel/sched/fair.c `task_numa_work()`) and the hint faults
//!   it causes. It counts `numa_pte_updates`, `numa_huge_pte_updates`, `numa_hint_faults`,
//!   `numa_hint_faults_local` and charges the scanning and fault handling to the application,
//!   but decides nothing about migration.
//! - [`Numab`]: the kernel's decision on each fault (mm/mempolicy.c `mpol_misplaced()`,
//!   kernel/sched/fair.c `should_numa_migrate_memory()`) and the synchronous migration
//!   (mm/migrate.c `migrate_misplaced_folio_prepare()` / `migrate_misplaced_folio()`).
//!
//! # Event model
//!
//! The simulator never draws every access. A scan pass makes a unit PROT_NONE and stamps its
//! scan time; the unit's next access is then drawn as an exponential delay with the unit's
//! access rate ([`Load::unit_rate`](crate::workload::Load::unit_rate)), and that access is the
//! hint fault, with latency = fault time - scan time (fair.c `numa_hint_fault_latency()`).
//! Pending faults wait in a time-ordered queue across steps and are emitted in the step they
//! fall in. A PROT_NONE unit is not touched again by later passes (mm/mprotect.c
//! `change_pte_range()`: "Already in the desired state"), so it keeps its first scan time until
//! it faults, exactly as in the kernel; cold units are updated once and then cost nothing. A
//! unit migrated by anything else while armed loses the protection (mm/migrate.c
//! `remove_migration_pte()` builds the new PTE from `vma->vm_page_prot`) and its queued fault
//! is dropped.
//!
//! Within a step, the scan passes and faults are generated in time order first, and [`Numab`]
//! then decides the step's faults in time order. A page can therefore be armed again by a
//! second pass of the same step before its first fault is decided; that takes a scan period
//! shorter than the step (10 ms), which the default knobs never give (the floor is 100 ms).
//!
//! Two approximations keep the cost of a step proportional to the units scanned and the faults
//! taken, never to the whole memory:
//!
//! - **Horizon.** A drawn delay longer than [`Scanner`]'s horizon (the larger of
//!   `FAULT_HORIZON_MIN_MS` and 4 × `hot_threshold_ms`) is not queued. The unit stays PROT_NONE
//!   and is redrawn when a later pass walks over it after the horizon. Such a fault's latency
//!   is beyond every threshold the kernel can use (at most 2 × `hot_threshold_ms`), so only
//!   the time of faults on pages touched less than once per horizon is blurred, by at most one
//!   scanner revisit.
//! - **Rate changes.** The delay is drawn with the rate at scan time. A unit whose rate is zero
//!   when it is armed or when its fault comes due (its process paused, its class idle) is left
//!   armed without a fault, and redrawn when a pass walks over it. A rate that rises after
//!   the draw is seen at the unit's next arming.
//!
//! # Scan pacing
//!
//! Per process, as `task_numa_work()` and `task_tick_numa()` do it: the first pass comes
//! `scan_delay_ms` after the process is first seen running (`init_numa_balancing()` sets
//! `mm->numa_next_scan`), the period starts at `task_scan_start()` (= `task_scan_min()`; numa
//! groups are not modelled) and a pass walks the process's live regions in virtual-address
//! order from `mm->numa_scan_offset`, in chunks of `scan_size_mb` aligned up to 2 MiB. A chunk
//! in which at least one PTE changed consumes the budget; chunks with no change consume only
//! the 8× virtual budget, so a pass skips up to 2 GiB of already-armed or skipped memory. At
//! the end of the address space the offset resets and `mm->numa_scan_seq` increments.
//!
//! A pass needs both gates the kernel has: `mm->numa_next_scan` (a period after the last
//! pass) and a thread that `task_tick_numa()` lets queue one: the thread that ran a pass
//! waits a period plus 32 times the pass's runtime ("to limit NUMA PTE scanning overhead to
//! 3% max"), so a single-threaded process's passes are spaced by its own cost, and a
//! process with more threads is held back only when all of them wait (`Scanner::throttle`).
//!
//! The period adapts only where the kernel adapts it: in `update_task_scan_period()`, run from
//! `task_numa_placement()` on the first fault that reaches `task_numa_fault()` after the scan
//! sequence advanced. In tiering mode `task_numa_fault()` ignores faults whose page stays on a
//! slow node, so in mode 2 only promoted faults count; they are remote and private (a slow
//! page's `last_cpupid` holds its access time and reads as unset), which is the "no local and
//! no shared faults" case: the period doubles, up to `task_scan_max()`. When every promotion
//! falls in the first sequence (seed A: the hot set is found in the first walk and nothing is
//! left to fault after it) placement never runs and the period stays at `task_scan_min()`.
//! Modes 1 and 3 follow the full local/remote and private/shared arithmetic.
//!
//! With `memcg_tiering` (the per-cgroup tiering RFC, 2024, patch 4/4) a pass's scan size
//! shrinks for a task whose cgroup holds more top-tier memory than its scaled memory.low while
//! the top tier is short of free memory (`memcg_scan_pages`).
//!
//! A process paused from the start has its scan delay counted from its first running step (the
//! kernel counts from fork, so a long pause would let the first pass come at once).
//!
//! # Costs
//!
//! All charged to the application threads (NUMA balancing has no kernel thread of its own):
//! [`PTE_UPDATE_COST_NS`] per PTE or huge PMD made PROT_NONE, [`hint_fault_cost_ns`] per
//! hint fault and [`migrate_cost_ns`] per migrated folio. Both are built from the kernel's
//! work: an uncontended part (the fault's entry, `do_numa_page()` and `task_numa_fault()`,
//! [`HINT_FAULT_BASE_NS`]; the migration's fixed part and its copy per byte,
//! [`crate::cost::MIGRATE_FOLIO_NS`], [`crate::cost::MIGRATE_COPY_NS_PER_KIB`], the same path
//! `move_pages(2)` takes) and a contention part per further thread of the mm touching the
//! page ([`HINT_FAULT_CONTENTION_NS`], [`MIGRATE_CONTENTION_NS`]: PTE-lock and migration-entry
//! waits, TLB shootdowns to the CPUs running the mm), the threads of the process that access
//! the page's class ([`crate::workload::Load::sharing_threads`]). The contention parts are
//! fitted to seed B, whose 32 threads share every page: there they give back its 74.5 us per
//! hint fault ([`HINT_FAULT_COST_NS`]) at its fault-to-migration ratio; a single-thread
//! process (seed C's ranks) pays 2 us per fault and 2 us per migrated page.
//!
//! # Not modelled
//!
//! numa groups (`task_numa_group()`, the shared-memory scaling of `task_scan_start()` and
//! `task_scan_max()`, the `group_faults_cpu()` tests of `should_numa_migrate_memory()`),
//! task migration between nodes (`task_numa_migrate()`), the per-VMA PID filter
//! (`vma_is_accessed()`), and `mbind(MPOL_MF_LAZY)` policies (MOF without MORON). The 3 %
//! runtime throttle at the end of `task_numa_work()` is modelled per thread
//! (`Scanner::throttle`), with a thread's runtime taken as wall time and scheduler ticks
//! as continuous.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use rand::Rng;
use rand_distr::Exp1;
use serde::{Deserialize, Serialize};
use tierd_engine::engine::free_space_margin;
use tierd_engine::policy::{MemPolicy, PolicyMode};
use tierd_engine::ratelimit::{mbps_to_pages_per_s, AdaptiveThreshold, KernelWindowLimiter};
use tierd_engine::types::{Nanos, NodeId, Pages, HPAGE_PMD_NR, PAGE_SHIFT};

use crate::cost::{MIGRATE_COPY_NS_PER_PAGE, MIGRATE_FOLIO_NS};
use crate::mechanism::{cgroup_usage, toptier_share, Ctx, Mechanism, SimRng, Watermarks};
use crate::memory::{Memory, RegionId, UnitId, UnitPlace, MOVE_BLOCK};
use crate::workload::{Load, Process};

/// `NUMA_BALANCING_NORMAL` (include/linux/sched/sysctl.h): classic CPU-affinity balancing.
pub const NUMA_BALANCING_NORMAL: u8 = 0x1;
/// `NUMA_BALANCING_MEMORY_TIERING` (include/linux/sched/sysctl.h): hot-page promotion.
pub const NUMA_BALANCING_MEMORY_TIERING: u8 = 0x2;

/// `MAX_SCAN_WINDOW` (kernel/sched/fair.c): "never scan more PTEs than MAX_SCAN_WINDOW
/// MB/sec", the floor of `task_scan_min()`.
pub const MAX_SCAN_WINDOW_MBPS: u64 = 2560;

/// Seed B (docs/simulator.md, "The seeds" and "Cost constants"), hint-fault column: fault handling overhead, us.
const SEED_B_FAULT_OVERHEAD_US: f64 = 2_875_354_862.0;
/// Seed B, hint-fault column: `numa_hint_faults`.
const SEED_B_HINT_FAULTS: f64 = 38_589_520.0;
/// Seed B, hint-fault column: `numa_pages_migrated`.
const SEED_B_PAGES_MIGRATED: f64 = 2_097_220.0;
/// Seed B, IBS column: task-work time, us (where the IBS variant runs the migrations).
const SEED_B_IBS_TASK_WORK_US: f64 = 24_008_121.0;
/// Seed B, IBS column: `numa_pages_migrated`.
const SEED_B_IBS_PAGES_MIGRATED: f64 = 511_791.0;

/// Seed B's threads per group: 32 threads bound to each node, all sweeping their group's
/// 8 GB chunk (scenarios/b-hint-vs-samples.toml). Every hint fault and every migration of
/// seed B is therefore on a page that 32 threads of one mm touch.
const SEED_B_SHARING_THREADS: f64 = 32.0;

/// Mean cost of one NUMA hint fault to the faulting thread, ns, **including** the synchronous
/// migration of the pages that moved: seed B measured 2,875,354,862 us of fault handling over
/// 38,589,520 hint faults = 74.5 us per fault (4 KiB pages, 2,097,220 of them migrated, i.e.
/// one fault in 18.4 migrated), with 32 threads sharing each page. A figure of seed B, not a
/// cost the model charges: the model builds each fault's and each migration's cost from its
/// parts ([`hint_fault_cost_ns`], [`migrate_cost_ns`]), which give this back at seed B's
/// sharing and fault-to-migration ratio.
pub const HINT_FAULT_COST_NS: f64 = SEED_B_FAULT_OVERHEAD_US * 1e3 / SEED_B_HINT_FAULTS;

/// Seed B's cost of migrating one 4 KiB page with 32 threads sharing it, ns: 46.9 us. In seed
/// B's IBS column the migrations run in task work, which took 24,008,121 us for 511,791
/// migrated pages; all of that time is attributed to the migrations (an upper bound, since
/// the task work also handles the samples that did not migrate). The same kernel path
/// (`migrate_misplaced_folio()`) runs inside the hint fault. A figure of seed B that
/// [`MIGRATE_CONTENTION_NS`] is fitted to.
pub const MIGRATE_COST_NS_PER_PAGE: f64 = SEED_B_IBS_TASK_WORK_US * 1e3 / SEED_B_IBS_PAGES_MIGRATED;

/// Seed B's cost of a hint fault without its migration, ns, with 32 threads sharing the page:
/// what remains of [`HINT_FAULT_COST_NS`] once seed B's migrations are priced at
/// [`MIGRATE_COST_NS_PER_PAGE`]: 74.5 - 46.9 × 2,097,220 / 38,589,520 = 72.0 us. A figure of
/// seed B that [`HINT_FAULT_CONTENTION_NS`] is fitted to.
pub const HINT_FAULT_HANDLING_NS: f64 =
    HINT_FAULT_COST_NS - MIGRATE_COST_NS_PER_PAGE * SEED_B_PAGES_MIGRATED / SEED_B_HINT_FAULTS;

/// A hint fault's own work when no other thread of the mm touches the page, ns: the
/// exception entry and exit, `do_numa_page()` (mm/memory.c: take the PTE lock, check the
/// PTE, `numa_migrate_check()` -> `mpol_misplaced()` -> `should_numa_migrate_memory()`,
/// restore the PTE's protection) and `task_numa_fault()` (kernel/sched/fair.c: the per-node
/// fault counters, now and then `task_numa_placement()`). **Assumed**: 2 us, a minor fault
/// (about 1 us) plus the NUMA bookkeeping; no seed measures an uncontended hint fault.
/// The scanner's PTE update is charged apart ([`PTE_UPDATE_COST_NS`]).
pub const HINT_FAULT_BASE_NS: f64 = 2_000.0;

/// What each further thread of the mm touching the faulted page adds to a hint fault, ns.
/// Threads of one mm that touch the same pages fault on them together: they wait on the PTE
/// lock `do_numa_page()` takes (one split lock per page-table page, i.e. per 2 MiB), retake
/// the fault when another thread fixed the PTE first (`pte_same()` fails), and sleep on the
/// migration entries of a page being moved (mm/migrate.c `migration_entry_wait()`); the
/// protection change of the scanner flushes the TLBs of every CPU in `mm_cpumask`. All grow
/// with the number of threads sharing the page, taken as linear.
///
/// **Fitted** to seed B: (72.0 us - [`HINT_FAULT_BASE_NS`]) / 31 further threads = 2.26 us,
/// so seed B's per-fault cost ([`HINT_FAULT_HANDLING_NS`]) comes out and no longer checks the
/// model. A single-thread process (seed C's ranks) pays [`HINT_FAULT_BASE_NS`] alone.
pub const HINT_FAULT_CONTENTION_NS: f64 =
    (HINT_FAULT_HANDLING_NS - HINT_FAULT_BASE_NS) / (SEED_B_SHARING_THREADS - 1.0);

/// What each further thread of the mm touching a migrated folio adds to its migration, ns:
/// unmapping it (`try_to_migrate()`) and remapping it send TLB-shootdown IPIs to every CPU
/// running the mm (`flush_tlb_range()` over `mm_cpumask`), and the threads that touch the page
/// meanwhile fault on its migration entries and wait for the folio lock
/// (`migration_entry_wait()`), all charged to the migrating task in seed B's measurement.
///
/// **Fitted** to seed B: (46.9 us - [`MIGRATE_FOLIO_NS`] - one page's copy) / 31 further
/// threads = 1.45 us, so seed B's per-page migration cost ([`MIGRATE_COST_NS_PER_PAGE`]) comes
/// out and no longer checks the model. With one thread the migration costs what
/// `move_pages(2)` does per page ([`crate::cost::MOVE_PAGES_NS_PER_PAGE`]).
pub const MIGRATE_CONTENTION_NS: f64 =
    (MIGRATE_COST_NS_PER_PAGE - MIGRATE_FOLIO_NS - MIGRATE_COPY_NS_PER_PAGE)
        / (SEED_B_SHARING_THREADS - 1.0);

/// The cost of one hint fault on a page that `sharers` threads of the faulting mm touch, ns
/// ([`HINT_FAULT_BASE_NS`] plus [`HINT_FAULT_CONTENTION_NS`] per further thread; `sharers` 0
/// counts as 1, the faulting thread itself).
#[must_use]
pub fn hint_fault_cost_ns(sharers: u32) -> f64 {
    HINT_FAULT_BASE_NS + f64::from(sharers.saturating_sub(1)) * HINT_FAULT_CONTENTION_NS
}

/// Cost of making one PTE (or one huge PMD) PROT_NONE in `change_prot_numa()`, ns, charged to
/// the scanning process. An inference: none of the seed results measures it. 50 ns puts a
/// full 256 MiB pass (65,536 PTEs, 3.3 ms) at about 3 % of one thread at the 100 ms minimum
/// period, the overhead `task_numa_work()`'s runtime throttle is designed to cap ("limit NUMA
/// PTE scanning overhead to 3% max").
pub const PTE_UPDATE_COST_NS: f64 = 50.0;

/// The smallest horizon beyond which a drawn fault is not queued (see the module docs).
const FAULT_HORIZON_MIN_MS: u64 = 10_000;

/// `NUMA_PERIOD_SLOTS` (kernel/sched/fair.c).
const NUMA_PERIOD_SLOTS: u64 = 10;
/// `NUMA_PERIOD_THRESHOLD` (kernel/sched/fair.c).
const NUMA_PERIOD_THRESHOLD: u64 = 7;

const NS_PER_MS: u64 = 1_000_000;

/// A unit's state in one scanner: 5 bytes, packed, so that a fault's read of both is one cache
/// miss (two arrays were two) at the size the two arrays had.
#[derive(Clone, Copy, Debug)]
#[repr(C, packed)]
struct ScanUnit {
    /// `NOT_ARMED`, or the scan time with `PENDING` / `IDLE`.
    state: u32,
    /// The node the unit was on when armed. Migration drops the NUMA protection (the new PTE
    /// is built from `vma->vm_page_prot`, mm/migrate.c `remove_migration_pte()`), so a unit
    /// found on another node is no longer armed.
    armed: u8,
}

impl ScanUnit {
    const NOT_ARMED: ScanUnit = ScanUnit {
        state: NOT_ARMED,
        armed: u8::MAX,
    };

    /// Whether the unit is PROT_NONE where it is now (`node`, its node byte): armed, and not
    /// migrated since.
    #[inline]
    fn armed_on(self, node: u8) -> bool {
        self.state != NOT_ARMED && self.armed == node
    }
}

/// Unit state: the PTE is not PROT_NONE.
const NOT_ARMED: u32 = u32::MAX;
/// Armed unit: a fault is queued.
const PENDING: u32 = 1 << 31;
/// Armed unit: it had no accesses when last drawn (nothing is known about its next access).
const IDLE: u32 = 1 << 30;
/// Armed unit: the scan time in ms, modulo 2^30 (the kernel keeps the access time in the
/// folio's `_last_cpupid` bits and masks the difference the same way,
/// include/linux/mm.h `PAGE_ACCESS_TIME_MASK`).
const TIME_MASK: u32 = IDLE - 1;

/// NUMA-balancing knobs, with the kernel's defaults (kernel/sched/fair.c, Documentation/scheduler/sched-debug.rst).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NumabParams {
    /// `kernel.numa_balancing`: 1 normal, 2 tiering, 3 both.
    pub mode: u8,
    /// `scan_delay_ms` (1000).
    pub scan_delay_ms: u64,
    /// `scan_period_min_ms` (1000).
    pub scan_period_min_ms: u64,
    /// `scan_period_max_ms` (60000).
    pub scan_period_max_ms: u64,
    /// `scan_size_mb` (256).
    pub scan_size_mb: u64,
    /// `hot_threshold_ms` (1000).
    pub hot_threshold_ms: u64,
    /// `kernel.numa_balancing_promote_rate_limit_MBps` (65536).
    pub promote_rate_limit_mbps: u64,
    /// `MAX_SCAN_WINDOW` (2560 MB/s), a `#define` in kernel/sched/fair.c rather than a knob. It
    /// is a field only so that `--scale` can shrink it together with `scan_size_mb`: the floor
    /// of the scan period is `1000 / (MAX_SCAN_WINDOW / scan_size)` ms, so shrinking the scan
    /// size alone would let a scaled-down machine be scanned 1/scale times faster relative to
    /// its size.
    pub max_scan_window_mbps: u64,
    /// Whether `MPOL_PREFERRED_MANY` pages take part (merged in 6.10, commit 133d04b1eee9).
    /// `false` models an older kernel: `set_mempolicy(MPOL_PREFERRED_MANY |
    /// MPOL_F_NUMA_BALANCING)` fails with EINVAL, the application falls back to plain
    /// PREFERRED_MANY, and its pages are never migrated by NUMA balancing.
    pub preferred_many_balancing: bool,
    /// Where faults come from: the PTE scanner (the kernel's way), or hardware samples fed
    /// to NUMA balancing as fault-equivalents (the 2023 "Memory access profiler (IBS) driven
    /// NUMA balancing" RFC, seed B).
    pub source: NumabSource,
    /// Sampling period (ops) when `source = "samples"`.
    pub sample_period: u64,
    /// The per-cgroup promotion/demotion control RFC (Kaiyang Zhao, 2024-09, "memory tiering
    /// fairness by per-cgroup control of promotion and demotion", not merged): memory.low
    /// protects top-tier usage (`locallow`), the scan of a cgroup over it shrinks while the
    /// top tier is short of free memory, and memory.high applies to top-tier usage scaled the
    /// same way (see [`crate::mechanism`] and `World::cgroup_high`). Written back only when
    /// set, so scenarios without it serialize as they did.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub memcg_tiering: bool,
    /// How long a hint fault keeps the faulting thread from its next access, as a multiple
    /// of the cost the model charges for it ([`hint_fault_cost_ns`]); the process's threads
    /// share the work (the migration a fault makes: `migrate_time_scale`). The kernel takes
    /// the fault, and in NUMA balancing the migration, on the thread that touched the page
    /// (mm/memory.c `do_numa_page()`), so
    /// 1, the default, is the hardware: a thread in a fault touches nothing else. With it, a
    /// pass that arms many pages a thread touches makes a fault storm: the thread takes the
    /// faults one after another, and those late in the storm come more than the hot
    /// threshold after their scan, are not promoted, and are armed again by the next pass
    /// (docs/lab.md, "Why NUMA balancing takes 1.5-1.7 faults a page here"). At hardware
    /// costs a 256 MB pass's storm takes a quarter of a second, under the threshold; lab A's
    /// twin sets TCG's measured cost. 0 draws faults from the access rate alone, as before
    /// this knob, and turns `migrate_time_scale` off too. Written back only when not 1.
    #[serde(skip_serializing_if = "is_one")]
    pub fault_time_scale: f64,
    /// How long the migration a hint fault makes keeps the faulting thread (NUMA balancing
    /// migrates on it: `do_numa_page()` -> `migrate_misplaced_folio()`), as a multiple of
    /// the cost the model charges for it ([`migrate_cost_ns`]). Apart from
    /// `fault_time_scale` because an emulator slows the two apart: lab A's guest under TCG
    /// measures ~3x for a fault that does not migrate and ~27x for the migration
    /// (scripts/fault-cost.sh). 1, the default, is the hardware. Written back only when not 1.
    #[serde(skip_serializing_if = "is_one")]
    pub migrate_time_scale: f64,
    /// How long a scan pass's PTE updates take in `task_numa_work()`'s runtime throttle, as
    /// a multiple of the cost the model charges for them ([`PTE_UPDATE_COST_NS`] each): the
    /// next pass of the thread that ran one waits 32 times that runtime. 1, the default, is
    /// the hardware. Lab A's twin sets what the guest's kernel measured under TCG
    /// (`tierd-workload pte-cost`, scripts/pte-cost.sh). Like `fault_time_scale` it moves
    /// time, not the charge. Written back only when not 1.
    #[serde(skip_serializing_if = "is_one")]
    pub pte_time_scale: f64,
}

fn is_one(x: &f64) -> bool {
    *x == 1.0
}

/// Where NUMA balancing's faults come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NumabSource {
    /// The PTE scanner and its hint faults.
    #[default]
    HintFaults,
    /// Hardware samples, one fault-equivalent each, no scanning.
    Samples,
}

impl Default for NumabParams {
    fn default() -> Self {
        NumabParams {
            mode: 2,
            scan_delay_ms: 1000,
            scan_period_min_ms: 1000,
            scan_period_max_ms: 60_000,
            scan_size_mb: 256,
            hot_threshold_ms: 1000,
            promote_rate_limit_mbps: 65_536,
            max_scan_window_mbps: MAX_SCAN_WINDOW_MBPS,
            preferred_many_balancing: true,
            source: NumabSource::HintFaults,
            sample_period: 10_000,
            memcg_tiering: false,
            fault_time_scale: 1.0,
            migrate_time_scale: 1.0,
            pte_time_scale: 1.0,
        }
    }
}

impl NumabParams {
    /// Shrinks byte-denominated knobs with the machine (`--scale`).
    pub fn scale_rates(&mut self, scale: f64) {
        // MB knobs shrink with the machine; at least 1.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        {
            self.scan_size_mb = ((self.scan_size_mb as f64 * scale).round() as u64).max(1);
            self.promote_rate_limit_mbps =
                ((self.promote_rate_limit_mbps as f64 * scale).round() as u64).max(1);
            self.max_scan_window_mbps =
                ((self.max_scan_window_mbps as f64 * scale).round() as u64).max(1);
        }
    }

    /// The horizon beyond which a drawn fault is not queued, ms (see the module docs).
    fn horizon_ms(&self) -> u64 {
        FAULT_HORIZON_MIN_MS.max(self.hot_threshold_ms.saturating_mul(4))
    }
}

/// One NUMA hint fault.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HintFault {
    /// The faulting unit.
    pub unit: UnitId,
    /// The node of the faulting CPU.
    pub node: NodeId,
    /// When, ns since the start of the run.
    pub time_ns: u64,
    /// Fault time minus the time the PTE was made PROT_NONE, ms (the "hint fault latency").
    pub latency_ms: u64,
    /// The faulting process (index).
    pub process: usize,
}

/// What became of a hint fault, as `do_numa_page()` (mm/memory.c) reports it to
/// `task_numa_fault()` (kernel/sched/fair.c); feeds the scan-period adaptation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultOutcome {
    /// The node the page is on after the fault (the target if it migrated).
    pub mem_node: NodeId,
    /// Base pages in the folio.
    pub pages: u64,
    /// `TNF_FAULT_LOCAL`: the page was on the faulting CPU's node when it faulted.
    pub local: bool,
    /// A private fault: the page's `last_cpupid` was unset or named the faulting thread.
    pub private: bool,
    /// Whether the page's `last_cpupid` was valid (`cpupid_valid()`); unset reads as invalid.
    pub cpupid_valid: bool,
    /// `TNF_MIGRATED`.
    pub migrated: bool,
    /// `TNF_MIGRATE_FAIL`.
    pub migrate_failed: bool,
}

/// Per-VMA scan state (`vma->numab_state`).
#[derive(Clone, Copy, Debug)]
struct VmaScan {
    /// `numab_state->next_scan`: a new VMA is skipped until then (after the first sequence).
    next_scan_ns: u64,
    /// `numab_state->prev_scan_seq`.
    prev_scan_seq: Option<u64>,
}

/// Per-process scan state: the `mm` fields and those of its (one, modelled) scanning task.
#[derive(Clone, Debug, Default)]
struct TaskScan {
    /// Seen running; `next_scan_ns` is set.
    started: bool,
    /// `mm->numa_next_scan`.
    next_scan_ns: u64,
    /// `p->numa_scan_period`, ms; 0 until the first pass.
    period_ms: u64,
    /// `p->numa_scan_period_max`, ms.
    period_max_ms: u64,
    /// `mm->numa_scan_offset`, as a vpn.
    offset_vpn: u64,
    /// `mm->numa_scan_seq`.
    seq: u64,
    /// `p->numa_scan_seq`: the sequence at the last `task_numa_placement()`.
    task_seq: u64,
    /// `p->numa_preferred_nid != NUMA_NO_NODE`.
    preferred: bool,
    /// `p->numa_faults_locality`: remote, local, failed-migration pages.
    locality: [u64; 3],
    /// Faults since the last placement: shared, private (`fault_types`).
    fault_types: [u64; 2],
    /// Passes run.
    passes: u64,
    /// Per-region `numab_state`, by region id.
    vmas: BTreeMap<u32, VmaScan>,
    /// Per thread that has run a pass: when `task_tick_numa()` lets it run the next one
    /// (its `node_stamp` plus a period, wall time standing for its runtime), ns; threads not
    /// listed may run one now. See [`Scanner::throttle`].
    thread_ready_ns: Vec<u64>,
    /// The earliest time one of the process's threads may run a pass, ns (0: one may now).
    any_thread_ready_ns: u64,
}

/// The NUMA-balancing PTE scanner and the hint faults it causes (kernel/sched/fair.c
/// `task_numa_work()`, mm/mprotect.c `change_prot_numa()`, mm/memory.c `do_numa_page()` up to
/// the migration decision). See the module docs for the model.
///
/// As a hint-fault source for another consumer (tierd): build it with
/// `Scanner::new(&params, true, nprocs)`, call [`Scanner::step`] every step and act on the
/// faults it appends. Reporting outcomes through [`Scanner::task_numa_fault`] is optional;
/// without it the scan period stays at `task_scan_min()`, which is also what the kernel does
/// in tiering mode while no fault leaves a page on the top tier.
#[derive(Debug)]
pub struct Scanner {
    params: NumabParams,
    /// Skip top-tier pages (`folio_can_map_prot_numa()` without `NUMA_BALANCING_NORMAL`).
    skip_toptier: bool,
    /// Skip slow-tier pages: set when another promoter (tierd's engine) owns them, as with
    /// pghot and `numa_balancing=3`.
    skip_slow: bool,
    /// `NUMA_BALANCING_MEMORY_TIERING` is set: faults that leave a page on a slow node do not
    /// feed the task's statistics.
    tiering: bool,
    tasks: Vec<TaskScan>,
    /// Per unit: its scan state and armed node ([`ScanUnit`]).
    units: Vec<ScanUnit>,
    /// Per block of [`MOVE_BLOCK`] units: see [`QuietBlock`].
    quiet: Vec<QuietBlock>,
    /// Whether blocks are summarized (always, but for the test that compares with and
    /// without).
    summarize: bool,
    /// Queued faults: (time ns, unit, scan time of the arming they belong to).
    queue: FaultQueue,
    /// Counters of this step's faults.
    tally: Tally,
    /// Per process: until when its threads are busy with the hint faults they took, ns
    /// (`fault_time_scale`; empty when that is 0).
    busy_ns: Vec<u64>,
    /// Per process: faults due while its threads were busy, each still armed
    /// (`fault_time_scale`). One of them stands in `queue` (`waiting_head`) at the time the
    /// threads are free; when it comes out, the fault taken then is drawn from all that wait
    /// (below). Putting every one back in `queue` at that time took all of them out and back
    /// again for each one taken, quadratic in a storm: scenario A's NUMA balancing at
    /// `fault_time_scale = 1` ran past 15 minutes.
    waiting: Vec<Vec<QueuedFault>>,
    /// Per process: the entry of `queue` that stands for its waiting faults.
    waiting_head: Vec<Option<QueuedFault>>,
}

/// A process's threads, which share its fault work (at least 1).
fn nthreads(p: &Process) -> f64 {
    p.groups
        .iter()
        .map(|g| f64::from(g.threads))
        .sum::<f64>()
        .max(1.0)
}

/// Per-fault counters, summed during a step and added to `Accounting` at its end: a
/// string-keyed map lookup per fault cost ~8 % of a NUMA-balancing run. Only non-zero sums
/// are added, so the counters (and which of them exist) are what counting each event gives.
#[derive(Debug, Default, Clone, Copy)]
struct Tally([u64; TALLY_NAMES.len()]);

/// The counters a [`Tally`] holds, by index.
const TALLY_NAMES: [&str; 8] = [
    "numa_hint_faults",
    "numa_hint_faults_local",
    "pgpromote_candidate_nrl",
    "pgpromote_candidate",
    "numa_pages_migrated",
    "pgmigrate_success",
    "pgpromote_success",
    "pgmigrate_fail",
];
const T_NUMA_HINT_FAULTS: usize = 0;
const T_NUMA_HINT_FAULTS_LOCAL: usize = 1;
const T_PGPROMOTE_CANDIDATE_NRL: usize = 2;
const T_PGPROMOTE_CANDIDATE: usize = 3;
const T_NUMA_PAGES_MIGRATED: usize = 4;
const T_PGMIGRATE_SUCCESS: usize = 5;
const T_PGPROMOTE_SUCCESS: usize = 6;
const T_PGMIGRATE_FAIL: usize = 7;

impl Tally {
    fn add(&mut self, i: usize, n: u64) {
        self.0[i] += n;
    }

    /// Adds the sums to `acct` and clears them.
    fn flush(&mut self, acct: &mut crate::mechanism::Accounting) {
        for (name, v) in TALLY_NAMES.iter().zip(&mut self.0) {
            if *v > 0 {
                acct.count(name, *v);
                *v = 0;
            }
        }
    }
}

/// A queued fault: (time ns, unit, scan time of the arming it belongs to).
type QueuedFault = (u64, u32, u32);

/// Set in a queued fault's scan time (which is under [`IDLE`]) when the entry stands for a
/// process's waiting faults (`Scanner::waiting_head`): a popped entry is told from the others
/// by one bit test instead of a search of every process's head.
const WAITING_HEAD: u32 = 1 << 31;

/// log2 of the width in ns of a [`FaultQueue`] bucket (~8 ms).
const FAULT_BUCKET_SHIFT: u32 = 23;

/// The most buckets [`FaultQueue`]'s ring spans (~137 s); later ones wait in an ordered map.
const FAULT_RING_BUCKETS: u64 = 1 << 14;

/// Queued faults read ahead at a time: the scattered per-unit entries of the next this many
/// are read in one go, so that their cache misses overlap ([`Scanner::warm_faults`]).
const FAULT_WARM_BLOCK: usize = 32;

/// A min-priority queue of [`QueuedFault`]s that pops exactly what a `BinaryHeap` of them
/// would (the key is total, and equal entries are identical), but cheaper: millions of
/// faults wait up to the horizon, and a heap of them costs a cache miss per level on every
/// pop. Later faults sit in ~8 ms buckets, unsorted; time reaching a bucket sorts it whole
/// (`sorted`, popped from its end), and faults pushed into the time it covers after that go
/// to a small heap (`near`); a pop takes the earlier of the two. The sorted bucket also says
/// which faults come next, which lets the scanner read their entries ahead.
#[derive(Debug, Default)]
struct FaultQueue {
    /// The current bucket, latest first: its earliest entry is last.
    sorted: Vec<QueuedFault>,
    /// Entries of `sorted` at or after this index have been read ahead.
    warm_mark: usize,
    /// Entries earlier than `near_end` pushed after the current bucket was sorted.
    near: BinaryHeap<Reverse<QueuedFault>>,
    /// End (exclusive) of the time `sorted` and `near` cover; a multiple of the bucket width.
    near_end: u64,
    /// Entries at or after `near_end`, by bucket (time >> `FAULT_BUCKET_SHIFT`): `far[i]`
    /// holds bucket `far_base + i`, empty ones included. A ring indexed by bucket rather
    /// than an ordered map: a push is one index, not a tree search (every armed page pushes
    /// its fault, hundreds of millions in C's churning rows), and faults wait at most the
    /// scan's horizon, so the ring spans seconds of ~8 ms buckets.
    far: VecDeque<Vec<QueuedFault>>,
    /// The bucket `far[0]` holds.
    far_base: u64,
    /// Buckets pushed [`FAULT_RING_BUCKETS`] or more past `far_base` (a horizon of minutes,
    /// from a large `hot_threshold_ms`), so that the ring never grows past that many.
    beyond: BTreeMap<u64, Vec<QueuedFault>>,
    /// Emptied bucket vectors, reused.
    spare: Vec<Vec<QueuedFault>>,
    /// Entries in all.
    len: usize,
    /// Entries ever pushed (a test checks that a fault storm pushes each fault a bounded
    /// number of times).
    pushed: u64,
}

impl FaultQueue {
    fn push(&mut self, e: QueuedFault) {
        self.len += 1;
        self.pushed += 1;
        if e.0 < self.near_end {
            self.near.push(Reverse(e));
        } else {
            // At or after `near_end`, so at or after `far_base` (see `refill`).
            let bucket = e.0 >> FAULT_BUCKET_SHIFT;
            let i = bucket - self.far_base;
            if i >= FAULT_RING_BUCKETS {
                self.beyond.entry(bucket).or_default().push(e);
                return;
            }
            let i = i as usize;
            while self.far.len() <= i {
                self.far.push_back(Vec::new());
            }
            let b = &mut self.far[i];
            if b.capacity() == 0 {
                *b = self.spare.pop().unwrap_or_default();
            }
            b.push(e);
        }
    }

    /// Sorts the earliest bucket into `sorted` once the current one and `near` are empty.
    fn refill(&mut self) {
        if !self.sorted.is_empty() || !self.near.is_empty() {
            return;
        }
        loop {
            if self.far.is_empty() {
                // Nothing within the ring: go on from the first bucket beyond it, if any.
                match self.beyond.first_key_value() {
                    Some((&b, _)) => self.far_base = self.far_base.max(b),
                    None => return,
                }
            }
            let mut v = self.far.pop_front().unwrap_or_default();
            let b = self.far_base;
            self.far_base += 1;
            if !self.beyond.is_empty() {
                // Pushed beyond the ring while the ring started earlier.
                if let Some(mut o) = self.beyond.remove(&b) {
                    v.append(&mut o);
                }
            }
            if v.is_empty() {
                if v.capacity() > 0 {
                    self.spare.push(v);
                }
                continue;
            }
            self.near_end = (b + 1) << FAULT_BUCKET_SHIFT;
            let empty = std::mem::replace(&mut self.sorted, v);
            self.spare.push(empty);
            self.sorted.sort_unstable_by(|x, y| y.cmp(x));
            self.warm_mark = self.sorted.len();
            return;
        }
    }

    /// Whether the next entry comes from `sorted` (else from `near`); `None` when empty.
    fn next_is_sorted(&self) -> Option<bool> {
        match (self.sorted.last(), self.near.peek()) {
            (Some(a), Some(Reverse(b))) => Some(a <= b),
            (Some(_), None) => Some(true),
            (None, Some(_)) => Some(false),
            (None, None) => None,
        }
    }

    /// The earliest entry's time.
    fn peek_time(&mut self) -> Option<u64> {
        self.refill();
        match self.next_is_sorted()? {
            true => self.sorted.last().map(|e| e.0),
            false => self.near.peek().map(|Reverse(e)| e.0),
        }
    }

    fn pop(&mut self) -> Option<QueuedFault> {
        self.refill();
        let e = match self.next_is_sorted()? {
            true => self.sorted.pop(),
            false => self.near.pop().map(|Reverse(e)| e),
        }?;
        self.len -= 1;
        Some(e)
    }

    /// The entries of the sorted bucket to read ahead now: once fewer than a block of those
    /// read ahead are left, the block after them (empty otherwise).
    fn next_to_warm(&mut self) -> &[QueuedFault] {
        let to = self.warm_mark.min(self.sorted.len());
        if self.sorted.len() - to >= FAULT_WARM_BLOCK {
            return &[];
        }
        let from = to.saturating_sub(FAULT_WARM_BLOCK);
        self.warm_mark = from;
        &self.sorted[from..to]
    }
}

/// Whether the kernel scans a region under `policy` at all: `task_numa_work()` skips VMAs
/// whose policy lacks `MPOL_F_MOF` (mm/mempolicy.c `vma_policy_mof()`). No VMA policy means
/// the task's, by default `preferred_node_policy[node]`, which has `MPOL_F_MOF | MPOL_F_MORON`
/// (mm/mempolicy.c `numa_policy_init()`); an explicit policy has MOF only when set with
/// `MPOL_F_NUMA_BALANCING`, which the kernel accepts for BIND and PREFERRED_MANY.
#[must_use]
pub fn policy_mof(policy: &MemPolicy) -> bool {
    match policy.mode {
        PolicyMode::Default => true,
        PolicyMode::Bind | PolicyMode::PreferredMany => policy.numa_balancing,
        PolicyMode::Preferred
        | PolicyMode::Interleave
        | PolicyMode::WeightedInterleave
        | PolicyMode::Local
        | PolicyMode::Unknown => false,
    }
}

/// Whether `mpol_misplaced()` (mm/mempolicy.c, with MPOL_PREFERRED_MANY since commit
/// 133d04b1eee9) proposes moving a page on `cur` toward the faulting CPU's node `this`, subject
/// to `should_numa_migrate_memory()`. Every policy that reaches it here has `MPOL_F_MORON`
/// (see [`policy_mof`]), so the target is always `this`:
///
/// - the default task policy (`MPOL_PREFERRED` of the faulting node): a page already on
///   `this` stays (`goto out` before `should_numa_migrate_memory()`);
/// - BIND / PREFERRED_MANY with `MPOL_F_NUMA_BALANCING`: only if `this` is in the nodemask
///   ("we don't allow numa migration to nodes outside policy nodemask").
///
/// Without MOF nothing moves.
#[must_use]
pub fn mpol_misplaced(policy: &MemPolicy, cur: NodeId, this: NodeId) -> bool {
    if !policy_mof(policy) {
        return false;
    }
    match policy.mode {
        PolicyMode::Default => cur != this,
        PolicyMode::Bind | PolicyMode::PreferredMany => policy.nodes.contains(this),
        _ => false,
    }
}

/// The cost of migrating a folio of `pages` base pages that `sharers` threads of its mm
/// touch, ns: the folio's fixed part ([`MIGRATE_FOLIO_NS`]), the copy of each base page
/// ([`MIGRATE_COPY_NS_PER_PAGE`]) and [`MIGRATE_CONTENTION_NS`] per further thread (paid once
/// per folio: one unmap, one remap, one round of shootdowns). Seed B's 4 KiB page with 32
/// threads: 46.9 us; a 2 MiB folio there: 1.6 + 512 × 0.4 + 31 × 1.45 = 251 us; a
/// single-thread process's 4 KiB page: 2 us, what `move_pages(2)` costs.
#[must_use]
pub fn migrate_cost_ns(pages: u64, sharers: u32) -> f64 {
    MIGRATE_FOLIO_NS
        + pages as f64 * MIGRATE_COPY_NS_PER_PAGE
        + f64::from(sharers.saturating_sub(1)) * MIGRATE_CONTENTION_NS
}

fn is_active(p: &Process) -> bool {
    p.running && p.groups.iter().any(|g| g.threads > 0)
}

/// The node of a single-threaded process's only thread: `folio_can_map_prot_numa()`
/// (mm/mempolicy.c) does not mark a page already on it (`is_private_single_threaded`).
fn single_thread_node(p: &Process) -> Option<NodeId> {
    let total: u32 = p.groups.iter().map(|g| g.threads).sum();
    if total != 1 {
        return None;
    }
    p.groups.iter().find(|g| g.threads == 1).map(|g| g.node)
}

/// `get_mm_rss()`: every page of a live region is resident in the simulator.
fn rss_pages(mem: &Memory, p: &Process) -> u64 {
    p.regions
        .iter()
        .map(|r| &mem.regions()[r.0 as usize])
        .filter(|r| r.alive)
        .map(|r| u64::from(r.units) * r.unit_pages())
        .sum()
}

/// A block of units that every pass walks over untouched: armed where they are, idle, of
/// a class nobody accesses (most of a large buffer with a small hot set). Kept per
/// [`MOVE_BLOCK`] units so a pass skips the block whole instead of testing each unit; valid
/// while no unit's scanner state is written (every write forgets it) and none moves
/// ([`Memory::block_moves`] unchanged), and used only while the class still has no
/// accesses, so the walk passes over exactly the units it would have passed over.
#[derive(Clone, Copy, Debug)]
struct QuietBlock {
    /// The units' class, or [`QuietBlock::NO_CLASS`]: no summary.
    class: u16,
    /// [`Memory::block_moves`] when summarized.
    moves: u32,
}

impl QuietBlock {
    const NO_CLASS: u16 = u16::MAX;
    const NONE: QuietBlock = QuietBlock {
        class: Self::NO_CLASS,
        moves: 0,
    };
}

/// What [`Scanner::change_prot_numa`] needs to tell a unit it would pass over untouched.
struct QuietTest<'a> {
    t_ms: u32,
    horizon_ms: u64,
    /// By node byte: an unarmed unit there is not armed (single-node task, tier skipped).
    unarmed_skip: &'a [bool; 256],
    /// By class: nobody accesses it.
    cold: &'a [bool],
}

impl QuietTest<'_> {
    /// How many leading units of the slices `change_prot_numa()` would skip without a change
    /// or a draw: armed ones with a fault pending, idle in a cold class, or drawn recently
    /// (quiet for less than the horizon, not idle); unarmed ones it does not arm.
    fn run(&self, units: &[ScanUnit], place: &[UnitPlace]) -> usize {
        units
            .iter()
            .zip(place)
            .position(|(&e, p)| {
                let st = e.state;
                let skip = if e.armed_on(p.node) {
                    st & PENDING != 0
                        || (st & IDLE != 0
                            && self
                                .cold
                                .get(usize::from(p.class))
                                .copied()
                                .unwrap_or(false))
                        || (st & IDLE == 0
                            && u64::from(self.t_ms.wrapping_sub(st & TIME_MASK) & TIME_MASK)
                                < self.horizon_ms)
                } else {
                    self.unarmed_skip[usize::from(p.node)]
                };
                !skip
            })
            .unwrap_or(units.len())
    }
}

/// The scan size of a task under the per-cgroup tiering RFC (patch 4/4, in
/// `task_numa_work()`): while a top-tier node is short of free memory
/// (`pgdat_free_space_enough()` false) and the task's cgroup uses more top-tier memory than
/// its `locallow` (memory.low x top-tier share, see [`crate::mechanism`]), the scan shrinks
/// by `(locallow / (usage + 1))^4`, to no less than 1/16: fewer PTEs armed, fewer hint
/// faults, fewer promotions for a cgroup over its fair share. The RFC hard-codes node 0 as
/// the top tier; here every top-tier node counts.
fn memcg_scan_pages(ctx: &Ctx<'_>, p: &Process, pages: u64) -> u64 {
    let short = ctx
        .mem
        .topology()
        .toptier_mask()
        .iter()
        .any(|n| !Numab::free_space_enough(ctx, n));
    if !short {
        return pages;
    }
    let low = ctx.memcg.low.get(&p.cgroup).map_or(0, |b| b.pages().0);
    let locallow = low as f64 * toptier_share(ctx.mem);
    let (_, top) = cgroup_usage(ctx.mem, p.cgroup);
    if top as f64 <= locallow {
        return pages;
    }
    let f = (locallow / (top as f64 + 1.0)).powi(4).max(1.0 / 16.0);
    ((pages as f64 * f) as u64).max(1)
}

fn ms_of(ns: u64) -> u32 {
    // Modulo 2^30 ms, as the kernel's access-time bits wrap.
    ((ns / NS_PER_MS) & u64::from(TIME_MASK)) as u32
}

impl Scanner {
    /// A scanner with `params`; `tiering_only` skips top-tier pages (mode 2).
    #[must_use]
    pub fn new(params: &NumabParams, tiering_only: bool, nprocs: usize) -> Self {
        Scanner {
            params: params.clone(),
            skip_toptier: tiering_only || params.mode & NUMA_BALANCING_NORMAL == 0,
            skip_slow: false,
            tiering: params.mode & NUMA_BALANCING_MEMORY_TIERING != 0,
            tasks: vec![TaskScan::default(); nprocs],
            units: Vec::new(),
            quiet: Vec::new(),
            summarize: true,
            queue: FaultQueue::default(),
            tally: Tally::default(),
            busy_ns: Vec::new(),
            waiting: Vec::new(),
            waiting_head: Vec::new(),
        }
    }

    /// `task_nr_scan_windows()`: the RSS in `scan_size` windows, at least 1.
    fn nr_scan_windows(&self, rss_pages: u64) -> u64 {
        let scan_pages = (self.params.scan_size_mb << (20 - PAGE_SHIFT)).max(1);
        rss_pages.max(1).div_ceil(scan_pages)
    }

    /// `task_scan_min()` (kernel/sched/fair.c) for a process of `rss_pages`, ms: the shortest
    /// period, never faster than `MAX_SCAN_WINDOW` MB/s. At least 1 ms here: the kernel's
    /// integer division can reach 0 for absurd knobs, and a 0 ms period would scan without end.
    #[must_use]
    pub fn task_scan_min_ms(&self, rss_pages: u64) -> u64 {
        let scan_size = self.params.scan_size_mb.max(1);
        let windows = if scan_size < self.params.max_scan_window_mbps {
            self.params.max_scan_window_mbps / scan_size
        } else {
            1
        };
        let floor = 1000 / windows.max(1);
        let scan = self.params.scan_period_min_ms / self.nr_scan_windows(rss_pages);
        floor.max(scan).max(1)
    }

    /// `task_scan_max()` (kernel/sched/fair.c, without numa groups), ms.
    #[must_use]
    pub fn task_scan_max_ms(&self, rss_pages: u64) -> u64 {
        let smax = self.params.scan_period_max_ms / self.nr_scan_windows(rss_pages);
        self.task_scan_min_ms(rss_pages).max(smax)
    }

    /// The current scan period of process `p`, ms; `None` before its first pass.
    #[must_use]
    pub fn scan_period_ms(&self, p: usize) -> Option<u64> {
        self.tasks.get(p).map(|t| t.period_ms).filter(|&ms| ms > 0)
    }

    /// `mm->numa_scan_seq` of process `p`: completed walks of its address space.
    #[must_use]
    pub fn scan_seq(&self, p: usize) -> u64 {
        self.tasks.get(p).map_or(0, |t| t.seq)
    }

    /// Scan passes (`task_numa_work()` runs that got past the rate check) of process `p`.
    #[must_use]
    pub fn passes(&self, p: usize) -> u64 {
        self.tasks.get(p).map_or(0, |t| t.passes)
    }

    /// Whether `u`'s PTE is PROT_NONE: scanned, and neither faulted nor migrated since.
    #[must_use]
    pub fn is_armed(&self, mem: &Memory, u: UnitId) -> bool {
        self.units
            .get(u.idx())
            .is_some_and(|&e| e.armed_on(mem.node_of(u).0 as u8))
    }

    /// Blocks whose quiet summary still holds in `mem` (whether or not their class is still
    /// cold).
    #[must_use]
    pub fn quiet_blocks(&self, mem: &Memory) -> usize {
        self.quiet
            .iter()
            .enumerate()
            .filter(|(b, q)| q.class != QuietBlock::NO_CLASS && q.moves == mem.block_moves(*b))
            .count()
    }

    /// Faults queued for later steps.
    #[must_use]
    pub fn queued_faults(&self) -> usize {
        self.queue.len + self.waiting.iter().map(Vec::len).sum::<usize>()
    }

    /// Whether `should_numa_migrate_memory()` still treats process `p` as young: no preferred
    /// node yet or `p->numa_scan_seq <= 4`, when first and private faults migrate at once.
    #[must_use]
    pub fn early_life(&self, p: usize) -> bool {
        self.tasks
            .get(p)
            .is_none_or(|t| !t.preferred || t.task_seq <= 4)
    }

    /// Advances through the step, appending the hint faults that happen in it, in time order.
    /// Scan passes and faults are interleaved by time; scanning and fault handling are
    /// counted and charged here, migration decisions are the caller's.
    pub fn step(&mut self, ctx: &mut Ctx<'_>, out: &mut Vec<HintFault>) {
        let end = ctx.now + ctx.dt;
        if self.tasks.len() < ctx.procs.len() {
            self.tasks.resize(ctx.procs.len(), TaskScan::default());
        }
        let units = ctx.mem.units() as usize;
        if self.units.len() < units {
            self.units.resize(units, ScanUnit::NOT_ARMED);
            self.quiet
                .resize(units.div_ceil(MOVE_BLOCK), QuietBlock::NONE);
        }
        let procs = ctx.procs;
        for (task, p) in self.tasks.iter_mut().zip(procs) {
            // init_numa_balancing(): mm->numa_next_scan = now + scan_delay.
            if !task.started && is_active(p) {
                task.started = true;
                task.next_scan_ns = ctx.now + self.params.scan_delay_ms * NS_PER_MS;
            }
        }
        // The next scan pass: the earliest task due. Only a scan pass changes a task within
        // the step (faults reach `task_numa_fault()` after it, from the caller), so it is
        // found again after each pass, not before each of the step's faults (a walk over
        // every task per fault was a third of this loop with C's 16 ranks).
        // task_tick_numa() only runs on CPU: a paused process does not scan.
        let now = ctx.now;
        let next_scan = |tasks: &[TaskScan]| {
            tasks
                .iter()
                .zip(procs)
                .enumerate()
                .filter(|(_, (t, p))| {
                    t.started && t.next_scan_ns.max(t.any_thread_ready_ns) < end && is_active(p)
                })
                .map(|(i, (t, _))| (t.next_scan_ns.max(t.any_thread_ready_ns).max(now), i))
                .min()
        };
        let mut scan = next_scan(&self.tasks);
        loop {
            let fault_at = self.queue.peek_time().filter(|&t| t < end);
            match (scan, fault_at) {
                (Some((t, pi)), f) if f.is_none_or(|tf| t <= tf) => {
                    self.scan_pass(ctx, pi, t);
                    scan = next_scan(&self.tasks);
                }
                (_, Some(_)) => self.emit_next(ctx, out),
                _ => break,
            }
        }
        self.tally.flush(ctx.acct);
    }

    /// One `task_numa_work()` pass of process `pi` at `t`.
    fn scan_pass(&mut self, ctx: &mut Ctx<'_>, pi: usize, t: u64) {
        let procs = ctx.procs;
        let p = &procs[pi];
        let rss = rss_pages(ctx.mem, p);
        let mut task = std::mem::take(&mut self.tasks[pi]);
        if task.period_ms == 0 {
            // task_tick_numa(): the first trigger sets numa_scan_period = task_scan_start(),
            // task_numa_work() the max.
            task.period_max_ms = self.task_scan_max_ms(rss);
            task.period_ms = self.task_scan_min_ms(rss);
        }
        task.next_scan_ns = t + task.period_ms * NS_PER_MS;
        task.passes += 1;
        // The pass's own runtime: what change_prot_numa() charges the process below.
        let charged_before = ctx.acct.app_overhead_ns.get(pi).copied().unwrap_or(0.0);
        // pages = scan_size MB in pages; virtpages = pages * 8.
        let mut scan_pages = self.params.scan_size_mb << (20 - PAGE_SHIFT);
        if self.params.memcg_tiering {
            scan_pages = memcg_scan_pages(ctx, p, scan_pages);
        }
        let mut pages_left = i128::from(scan_pages);
        let mut virt_left = pages_left * 8;
        if scan_pages == 0 {
            self.tasks[pi] = task;
            return;
        }
        let mut vmas: Vec<(u64, u64, RegionId)> = p
            .regions
            .iter()
            .filter_map(|&rid| {
                let r = &ctx.mem.regions()[rid.0 as usize];
                (r.alive && r.units > 0).then(|| {
                    let start = r.start_vpn.0;
                    (start, start + u64::from(r.units) * r.unit_pages(), rid)
                })
            })
            .collect();
        vmas.sort_unstable();
        let mut start = task.offset_vpn;
        let mut i = vmas.partition_point(|v| v.1 <= start);
        if i == vmas.len() {
            reset_ptenuma_scan(&mut task);
            start = 0;
            i = 0;
        }
        let mut stopped = false;
        while i < vmas.len() && !stopped {
            let (vs, ve, rid) = vmas[i];
            i += 1;
            let mut policy = ctx.mem.regions()[rid.0 as usize].policy;
            if !self.params.preferred_many_balancing && policy.mode == PolicyMode::PreferredMany {
                // Before 6.10, MPOL_F_NUMA_BALANCING with PREFERRED_MANY was refused (EINVAL)
                // and applications fell back to the plain policy, which has no MOF.
                policy.numa_balancing = false;
            }
            if !policy_mof(&policy) {
                continue;
            }
            let seq = task.seq;
            let vma = task.vmas.entry(rid.0).or_insert(VmaScan {
                next_scan_ns: t + self.params.scan_delay_ms * NS_PER_MS,
                prev_scan_seq: None,
            });
            // "Scanning the VMAs of short lived tasks add more overhead. So delay the scan
            // for new VMAs."
            if seq != 0 && t < vma.next_scan_ns {
                continue;
            }
            // "Do not rescan VMAs twice within the same sequence."
            if vma.prev_scan_seq == Some(seq) {
                task.offset_vpn = ve;
                continue;
            }
            loop {
                start = start.max(vs);
                let want = u64::try_from(pages_left).unwrap_or(0);
                let end = (start + want).next_multiple_of(HPAGE_PMD_NR).min(ve);
                let nr = self.change_prot_numa(ctx, pi, rid, start, end, t);
                let span = i128::from(end - start);
                // "Try to scan sysctl_numa_balancing_size worth of hpages that have at least
                // one present PTE that is not already PTE-numa."
                if nr > 0 {
                    pages_left -= span;
                }
                virt_left -= span;
                start = end;
                if pages_left <= 0 || virt_left <= 0 {
                    stopped = true;
                    break;
                }
                if end == ve {
                    break;
                }
            }
            if !stopped {
                if let Some(v) = task.vmas.get_mut(&rid.0) {
                    v.prev_scan_seq = Some(seq);
                }
            }
        }
        if stopped {
            task.offset_vpn = start;
        } else {
            reset_ptenuma_scan(&mut task);
        }
        let pass_ns = (ctx.acct.app_overhead_ns.get(pi).copied().unwrap_or(0.0) - charged_before)
            * self.params.pte_time_scale;
        Self::throttle(&mut task, p, t, pass_ns);
        self.tasks[pi] = task;
    }

    /// The end of `task_numa_work()` and the gate of `task_tick_numa()` (kernel/sched/fair.c):
    /// a thread may queue a pass once its runtime passes `node_stamp + numa_scan_period`, the
    /// trigger moves `node_stamp` on by the period, and a pass adds 32 times its own runtime
    /// ("to limit NUMA PTE scanning overhead to 3% max"). So the thread that ran the pass at
    /// `t` (costing `pass_ns`) may run the next at `t + period + 32 * pass_ns`; any other
    /// thread of the process may run it after a period, as `mm->numa_next_scan` already
    /// says. With one thread the throttle delays every pass; with several, only when all of
    /// them are throttled. A thread's runtime is taken as wall time (the model's threads run
    /// all the time they are active), and the pass's cost is its PTE updates at
    /// [`PTE_UPDATE_COST_NS`] times `pte_time_scale` (not `fault_time_scale`).
    fn throttle(task: &mut TaskScan, p: &Process, t: u64, pass_ns: f64) {
        // A thread count fits usize; at least 1.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let threads = nthreads(p) as usize;
        // Non-negative and far below 2^64 ns: microseconds of PTE updates.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let ready = t + task.period_ms * NS_PER_MS + (32.0 * pass_ns.max(0.0)) as u64;
        // The thread that ran it: one not throttled (a listed one whose time came, or one
        // not listed yet).
        if let Some(slot) = task.thread_ready_ns.iter_mut().find(|r| **r <= t) {
            *slot = ready;
        } else if task.thread_ready_ns.len() < threads {
            task.thread_ready_ns.push(ready);
        }
        task.any_thread_ready_ns = if task.thread_ready_ns.len() < threads {
            0
        } else {
            task.thread_ready_ns.iter().copied().min().unwrap_or(0)
        };
    }

    /// `change_prot_numa()` over `[start, end)` of region `rid` at `t`: marks every present,
    /// not-yet-PROT_NONE unit that `folio_can_map_prot_numa()` accepts, stamps its scan time
    /// and draws its next access. Returns the base pages updated.
    fn change_prot_numa(
        &mut self,
        ctx: &mut Ctx<'_>,
        pi: usize,
        rid: RegionId,
        start: u64,
        end: u64,
        t: u64,
    ) -> u64 {
        let mem: &Memory = ctx.mem;
        let load = ctx.load;
        let region = &mem.regions()[rid.0 as usize];
        let up = region.unit_pages();
        let rs = region.start_vpn.0;
        let lo = (start - rs).div_ceil(up);
        let hi = (end - rs).div_ceil(up).min(u64::from(region.units));
        let single = single_thread_node(&ctx.procs[pi]);
        let topo = mem.topology();
        let t_ms = ms_of(t);
        let horizon_ms = self.params.horizon_ms();
        let mut entries = 0u64;
        let mut split_entries = 0u64;
        // Most units of a pass need nothing (already armed with a fault queued, or idle in a
        // class nobody accesses): find the next one that does with a tight walk over the
        // per-unit arrays, and take only that one through the full logic below. The walk
        // tests exactly the conditions under which the loop body would `continue` without
        // touching anything, so the result and the random draws are the same.
        let unarmed_skip: [bool; 256] = std::array::from_fn(|n| {
            let node = NodeId(n as u16);
            single == Some(node)
                || (self.skip_toptier && topo.is_toptier(node))
                || (self.skip_slow && !topo.is_toptier(node))
        });
        let cold: Vec<bool> = load.class_rate.iter().map(|r| *r <= 0.0).collect();
        let quiet = QuietTest {
            t_ms,
            horizon_ms,
            unarmed_skip: &unarmed_skip,
            cold: &cold,
        };
        let base = region.first_unit as usize;
        let to = base + hi as usize;
        let mut k = lo;
        while k < hi {
            let from = base + k as usize;
            if self.summarize && from.is_multiple_of(MOVE_BLOCK) {
                // Whole blocks known to be armed, idle and of a class nobody accesses.
                let mut f = from;
                while f + MOVE_BLOCK <= to && self.block_quiet(mem, &cold, f / MOVE_BLOCK) {
                    f += MOVE_BLOCK;
                }
                if f > from {
                    k += (f - from) as u64;
                    continue;
                }
            }
            // The walk goes a block at a time so that a block passed over whole can be
            // summarized for the next pass.
            let seg_end = ((from / MOVE_BLOCK + 1) * MOVE_BLOCK).min(to);
            let n = quiet.run(
                &self.units[from..seg_end],
                &mem.unit_places()[from..seg_end],
            );
            k += n as u64;
            if from + n == seg_end {
                if self.summarize && from.is_multiple_of(MOVE_BLOCK) && seg_end - from == MOVE_BLOCK
                {
                    self.mark_quiet(mem, &cold, from / MOVE_BLOCK);
                }
                continue;
            }
            let u = UnitId(region.first_unit + k as u32);
            k += 1;
            let e = self.units[u.idx()];
            let st = e.state;
            let node = mem.node_of(u);
            if e.armed_on(node.0 as u8) {
                // Already PROT_NONE: no update, but a unit with no queued fault may get one.
                if st & PENDING == 0 {
                    // An idle page of a class nobody accesses stays idle: skip the draw (the
                    // common case, cold memory walked on every pass).
                    if st & IDLE != 0 && load.class_rate[usize::from(mem.class_of(u).0)] <= 0.0 {
                        continue;
                    }
                    let quiet_for = t_ms.wrapping_sub(st & TIME_MASK) & TIME_MASK;
                    if st & IDLE != 0 || u64::from(quiet_for) >= horizon_ms {
                        self.schedule(load, mem, ctx.rng, u, t);
                    }
                }
                continue;
            }
            if single == Some(node) {
                continue;
            }
            // "Skip scanning top tier node if normal numa balancing is disabled."
            if self.skip_toptier && topo.is_toptier(node) {
                continue;
            }
            if self.skip_slow && !topo.is_toptier(node) {
                continue;
            }
            self.unquiet(u);
            self.units[u.idx()] = ScanUnit {
                state: t_ms,
                armed: node.0 as u8,
            };
            entries += 1;
            if up > 1 && !mem.is_thp(u) {
                // A split THP: its 512 PTEs, no huge PMD.
                split_entries += 1;
            }
            self.schedule(load, mem, ctx.rng, u, t);
        }
        let pages = entries * up;
        if pages > 0 {
            ctx.acct.count("numa_pte_updates", pages);
            // change_pmd_range(): a huge PMD adds HPAGE_PMD_NR pages to the PTE count and one
            // to numa_huge_pte_updates.
            // A split THP is 512 PTEs, each its own update.
            let huge = if up > 1 { entries - split_entries } else { 0 };
            if huge > 0 {
                ctx.acct.count("numa_huge_pte_updates", huge);
            }
            let ptes = (entries - huge) * if up > 1 { up } else { 1 } + huge;
            ctx.charge_app(pi, ptes as f64 * PTE_UPDATE_COST_NS);
        }
        pages
    }

    /// Adds `cost_ns` of work on process `p`'s threads to its fault backlog, scaled by
    /// `scale` (`fault_time_scale` for the fault, `migrate_time_scale` for the migration it
    /// makes); nothing when `fault_time_scale` is 0, which turns the backlog off.
    fn add_busy(&mut self, ctx: &Ctx<'_>, p: usize, cost_ns: f64, scale: f64) {
        if self.params.fault_time_scale <= 0.0 {
            return;
        }
        let th = ctx.procs.get(p).map_or(1.0, nthreads);
        if let Some(b) = self.busy_ns.get_mut(p) {
            // Non-negative and far below 2^64 ns: a cost of microseconds times a scale of at
            // most 1000 (scenario validation).
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let busy = (cost_ns * scale / th) as u64;
            *b += busy;
        }
    }

    /// Forgets the summary of `u`'s block: its state is about to change.
    #[inline]
    fn unquiet(&mut self, u: UnitId) {
        if let Some(q) = self.quiet.get_mut(u.idx() / MOVE_BLOCK) {
            q.class = QuietBlock::NO_CLASS;
        }
    }

    /// Whether block `b` is still as [`Scanner::mark_quiet`] found it (no unit's state
    /// written since, none moved) and its class is still one nobody accesses: then every
    /// unit of it would be passed over.
    #[inline]
    fn block_quiet(&self, mem: &Memory, cold: &[bool], b: usize) -> bool {
        let q = self.quiet[b];
        q.class != QuietBlock::NO_CLASS
            && q.moves == mem.block_moves(b)
            && cold.get(usize::from(q.class)).copied().unwrap_or(false)
    }

    /// Summarizes block `b`, just passed over whole: if every unit is armed where it is,
    /// idle (no fault queued, none drawn) and of one class, the block needs nothing while
    /// that class has no accesses, its units stay put and no state of it is written.
    fn mark_quiet(&mut self, mem: &Memory, cold: &[bool], b: usize) {
        let r = b * MOVE_BLOCK..(b + 1) * MOVE_BLOCK;
        let class = mem.unit_places()[r.start].class;
        // A summary is only used while the class is cold: none is made for another.
        let all = cold.get(usize::from(class)).copied().unwrap_or(false)
            && self.units[r.clone()]
                .iter()
                .zip(&mem.unit_places()[r])
                .all(|(&e, p)| {
                    e.armed_on(p.node) && e.state & (IDLE | PENDING) == IDLE && p.class == class
                });
        self.quiet[b] = if all {
            QuietBlock {
                class,
                moves: mem.block_moves(b),
            }
        } else {
            QuietBlock::NONE
        };
    }

    /// Draws the next access of armed unit `u` from `from` and queues it as a fault, unless it
    /// has no accesses (left `IDLE`) or falls beyond the horizon (left quiet).
    fn schedule(&mut self, load: &Load, mem: &Memory, rng: &mut SimRng, u: UnitId, from: u64) {
        self.unquiet(u);
        let st = self.units[u.idx()].state;
        // Each page of a grained unit faults at its own rate: the unit's fault is one of its
        // pages' (counted for each in `take_fault`).
        let rate = load.page_rate(mem, u);
        if rate <= 0.0 || !rate.is_finite() {
            self.units[u.idx()].state = st | IDLE;
            return;
        }
        let e: f64 = rng.sample(Exp1);
        let delay_ns = e / rate * 1e9;
        if delay_ns > (self.params.horizon_ms() * NS_PER_MS) as f64 {
            self.units[u.idx()].state = st & !IDLE;
            return;
        }
        let scan_ms = st & TIME_MASK;
        self.units[u.idx()].state = scan_ms | PENDING;
        self.queue.push((from + delay_ns as u64, u.0, scan_ms));
    }

    /// Reads the per-unit entries that taking the next queued faults will read (their
    /// scanner state and the unit's node and class), changing nothing: a fault lands on a
    /// random unit of millions, a cache miss per array, and reading a block of them in one
    /// go lets the misses overlap instead of each stalling its fault (as the engine's
    /// `warm_page` does). Stable Rust has no safe prefetch; plain reads do the same here.
    fn warm_faults(&mut self, mem: &Memory) {
        let (units, places) = (&self.units, mem.unit_places());
        let mut sum = 0u32;
        for &(_, raw, _) in self.queue.next_to_warm() {
            let i = raw as usize;
            let (e, p) = (units.get(i).copied(), places.get(i));
            sum = sum
                .wrapping_add(e.map_or(0, |e| e.state))
                .wrapping_add(u32::from(e.map_or(0, |e| e.armed)))
                .wrapping_add(u32::from(p.map_or(0, |p| p.node)))
                .wrapping_add(u32::from(p.map_or(0, |p| p.class)));
        }
        std::hint::black_box(sum);
    }

    /// Pops the earliest queued fault and, if it still applies, takes it.
    fn emit_next(&mut self, ctx: &mut Ctx<'_>, out: &mut Vec<HintFault>) {
        self.warm_faults(ctx.mem);
        let Some(entry) = self.queue.pop() else {
            return;
        };
        // The entry that stands for a process's waiting faults: its threads are free now, and
        // their next access lands on any of the pages waiting, alike: each page's access
        // comes at an exponential time, the first of several alike is any of them with equal
        // chance (exact for pages of equal rate, as a hot set's are; an approximation for a
        // skewed one). The fault is taken now.
        let head_of = if entry.2 & WAITING_HEAD == 0 {
            None
        } else {
            self.waiting_head.iter().position(|h| *h == Some(entry))
        };
        let entry = match head_of {
            Some(p) => {
                self.waiting_head[p] = None;
                let w = &mut self.waiting[p];
                w.push((entry.0, entry.1, entry.2 & !WAITING_HEAD));
                let (_, raw, scan_ms) = w.swap_remove(ctx.rng.gen_range(0..w.len()));
                (entry.0, raw, scan_ms)
            }
            None => entry,
        };
        self.take_fault(ctx, out, entry, head_of);
        if let Some(p) = head_of {
            self.wait_next(p);
        }
    }

    /// Queues an entry that stands for process `p`'s waiting faults, if any, at the time its
    /// threads are free.
    fn wait_next(&mut self, p: usize) {
        if let Some(f) = self.waiting.get_mut(p).and_then(Vec::pop) {
            self.stand_in(p, f);
        }
    }

    /// Queues waiting fault `(_, raw, scan_ms)` of process `p` as the entry that stands for
    /// all of its waiting faults, at the time its threads are free.
    fn stand_in(&mut self, p: usize, (_, raw, scan_ms): QueuedFault) {
        let head = (self.busy_ns[p], raw, scan_ms | WAITING_HEAD);
        self.waiting_head[p] = Some(head);
        self.queue.push(head);
    }

    /// Takes queued fault `(tf, raw, scan_ms)` if it still applies; `head_of` names the
    /// process it waited for, if it was drawn from that process's waiting faults.
    fn take_fault(
        &mut self,
        ctx: &mut Ctx<'_>,
        out: &mut Vec<HintFault>,
        (tf, raw, scan_ms): QueuedFault,
        head_of: Option<usize>,
    ) {
        let u = UnitId(raw);
        let Some(&e) = self.units.get(u.idx()) else {
            return;
        };
        let st = e.state;
        // An entry of an earlier arming (the unit moved and was armed again since) is stale.
        if st == NOT_ARMED || st & PENDING == 0 || st & TIME_MASK != scan_ms {
            return;
        }
        let region = ctx.mem.region_of(u);
        // A grained unit's fault stands for one fault on each of its pages.
        let grain = u64::from(region.grain);
        if !region.alive || !e.armed_on(ctx.mem.node_of(u).0 as u8) {
            // Unmapped, or migrated since it was armed: no PROT_NONE PTE, no fault.
            self.unquiet(u);
            self.units[u.idx()].state = NOT_ARMED;
            return;
        }
        let class = ctx.mem.class_of(u);
        let accessor = if ctx.load.unit_accessed(ctx.mem, u) {
            ctx.load.sample_accessor(class, ctx.rng)
        } else {
            None
        };
        let (Some(node), Some(process)) = (accessor, ctx.load.main_accessor(class)) else {
            // Nobody accesses it now: stays PROT_NONE until a pass finds it accessed again.
            self.unquiet(u);
            self.units[u.idx()].state = (st & TIME_MASK) | IDLE;
            return;
        };
        // The threads of the faulting process that touch the page fault on it together.
        let sharers = ctx.load.sharing_threads(process, class);
        let scale = self.params.fault_time_scale;
        if scale > 0.0 {
            // The process's threads are still busy with earlier faults, or others wait
            // before this one: this access, and so its fault, waits with them, armed as it
            // was, until the threads are free (`emit_next` draws the one taken then).
            if self.busy_ns.len() <= process {
                self.busy_ns.resize(process + 1, 0);
                self.waiting.resize_with(process + 1, Vec::new);
                self.waiting_head.resize(process + 1, None);
            }
            let free = self.busy_ns[process];
            if head_of != Some(process) && (free > tf || self.waiting_head[process].is_some()) {
                if self.waiting_head[process].is_some() {
                    self.waiting[process].push((tf, raw, scan_ms));
                } else {
                    self.stand_in(process, (tf, raw, scan_ms));
                }
                return;
            }
            self.busy_ns[process] = tf.max(free);
            let scale = self.params.fault_time_scale;
            let cost = grain as f64 * hint_fault_cost_ns(sharers);
            self.add_busy(ctx, process, cost, scale);
        }
        let latency = ms_of(tf).wrapping_sub(st & TIME_MASK) & TIME_MASK;
        self.unquiet(u);
        self.units[u.idx()].state = NOT_ARMED;
        // numa_migrate_check() (mm/memory.c).
        self.tally.add(T_NUMA_HINT_FAULTS, grain);
        if ctx.mem.node_of(u) == node {
            self.tally.add(T_NUMA_HINT_FAULTS_LOCAL, grain);
        }
        ctx.charge_app(process, grain as f64 * hint_fault_cost_ns(sharers));
        out.push(HintFault {
            unit: u,
            node,
            time_ns: tf,
            latency_ms: u64::from(latency),
            process,
        });
    }

    /// `task_numa_fault()` (kernel/sched/fair.c): records the outcome `o` of a fault taken by
    /// process `p` (`proc`, whose RSS sizes the period bounds) at `now_ns` and, on the first
    /// such fault after its scan sequence advanced, runs the scan-period part of
    /// `task_numa_placement()`. Faults that leave a page on a slow node are ignored in tiering
    /// mode ("NUMA faults statistics are unnecessary for the slow memory node"), and so are
    /// those with an invalid `last_cpupid` when tiering is off.
    pub fn task_numa_fault(
        &mut self,
        mem: &Memory,
        p: usize,
        proc: &Process,
        now_ns: u64,
        o: &FaultOutcome,
    ) {
        if !mem.topology().is_toptier(o.mem_node) && (self.tiering || !o.cpupid_valid) {
            return;
        }
        if self.tasks.len() <= p {
            self.tasks.resize(p + 1, TaskScan::default());
        }
        if self.tasks[p].task_seq != self.tasks[p].seq {
            let rss = rss_pages(mem, proc);
            self.task_numa_placement(p, rss, now_ns);
        }
        let task = &mut self.tasks[p];
        task.fault_types[usize::from(o.private)] += o.pages;
        task.locality[usize::from(o.local)] += o.pages;
        if o.migrate_failed {
            task.locality[2] += o.pages;
        }
    }

    /// The scan-period part of `task_numa_placement()`: a preferred node is set once there
    /// were faults, then `update_task_scan_period()`.
    fn task_numa_placement(&mut self, p: usize, rss: u64, now_ns: u64) {
        let smin = self.task_scan_min_ms(rss);
        let smax = self.task_scan_max_ms(rss);
        let task = &mut self.tasks[p];
        task.task_seq = task.seq;
        task.period_max_ms = smax;
        let [shared, private] = task.fault_types;
        if shared + private > 0 {
            task.preferred = true;
        }
        task.fault_types = [0, 0];
        update_task_scan_period(task, shared, private, smin, smax, now_ns);
    }
}

/// `reset_ptenuma_scan()`: the next pass starts over and the sequence advances.
fn reset_ptenuma_scan(task: &mut TaskScan) {
    task.seq += 1;
    task.offset_vpn = 0;
}

/// `update_task_scan_period()` (kernel/sched/fair.c), verbatim including its quirks: the
/// slow-down branch returns without clearing `numa_faults_locality`, so one failed migration
/// keeps the period growing until it reaches the maximum.
fn update_task_scan_period(
    task: &mut TaskScan,
    shared: u64,
    private: u64,
    smin: u64,
    smax: u64,
    now_ns: u64,
) {
    let [remote, local, failed] = task.locality;
    if local + shared == 0 || failed > 0 {
        task.period_ms = task.period_max_ms.min(task.period_ms << 1);
        // p->mm->numa_next_scan = jiffies + msecs_to_jiffies(p->numa_scan_period)
        task.next_scan_ns = now_ns + task.period_ms * NS_PER_MS;
        return;
    }
    let period_slot = task.period_ms.div_ceil(NUMA_PERIOD_SLOTS);
    let lr_ratio = (local * NUMA_PERIOD_SLOTS)
        .checked_div(local + remote)
        .unwrap_or(0);
    let ps_ratio = (private * NUMA_PERIOD_SLOTS)
        .checked_div(private + shared)
        .unwrap_or(0);
    let period = if ps_ratio >= NUMA_PERIOD_THRESHOLD {
        // "Most memory accesses are local."
        let slot = (ps_ratio - NUMA_PERIOD_THRESHOLD).max(1);
        task.period_ms + slot * period_slot
    } else if lr_ratio >= NUMA_PERIOD_THRESHOLD {
        // "Most memory accesses are shared with other tasks."
        let slot = (lr_ratio - NUMA_PERIOD_THRESHOLD).max(1);
        task.period_ms + slot * period_slot
    } else {
        // "Speed up NUMA scanning to get the memory moved over."
        let ratio = lr_ratio.max(ps_ratio);
        task.period_ms
            .saturating_sub((NUMA_PERIOD_THRESHOLD - ratio) * period_slot)
    };
    task.period_ms = period.clamp(smin, smax.max(smin));
    task.locality = [0; 3];
}

/// Per target node: `pgdat->nbp_rl_*` and `pgdat->nbp_th_*`.
#[derive(Clone, Debug)]
struct PromoteState {
    limiter: KernelWindowLimiter,
    threshold: AdaptiveThreshold,
}

impl PromoteState {
    /// `reset_memory_tiering()`: threshold unset, candidate snapshot, period start now.
    fn new(now: u64) -> Self {
        PromoteState {
            limiter: KernelWindowLimiter::default(),
            threshold: AdaptiveThreshold::new(Nanos(now), 0),
        }
    }
}

/// Outcomes of the migration decisions that vmstat does not show.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NumabStats {
    /// Tiering faults whose latency was at or above the hot threshold.
    pub not_hot: u64,
    /// Candidates refused by the rate limiter.
    pub rate_limited: u64,
    /// Migrations refused because the target was below its high watermark plus the folio
    /// (`migrate_balanced_pgdat()`).
    pub refused_watermark: u64,
    /// Faults for which `mpol_misplaced()` proposed no move.
    pub not_misplaced: u64,
    /// kswapd wakeups on refused promotions (counted even with demotion disabled).
    pub kswapd_wakeups: u64,
}

/// The unset `last_cpupid`.
const CPUPID_UNSET: u32 = u32::MAX;

/// Kernel NUMA balancing as a mechanism: the [`Scanner`]'s faults, decided in time order as
/// `do_numa_page()` does. See the module docs.
#[derive(Debug)]
pub struct Numab {
    params: NumabParams,
    scanner: Scanner,
    targets: BTreeMap<NodeId, PromoteState>,
    /// Per unit: the node of the last faulting CPU (`last_cpupid`'s nid), `u8::MAX` if unset.
    last_nid: Vec<u8>,
    /// Per unit: the last faulting thread (process << 20 | thread), [`CPUPID_UNSET`] if unset.
    last_pid: Vec<u32>,
    faults: Vec<HintFault>,
    kswapd_woken: Vec<NodeId>,
    initialized: bool,
    /// Counters of this step's faults.
    tally: Tally,
    /// Decision outcomes not visible in vmstat.
    pub stats: NumabStats,
}

impl Numab {
    /// NUMA balancing with `params`.
    #[must_use]
    pub fn new(params: &NumabParams, nprocs: usize) -> Self {
        Numab {
            params: params.clone(),
            scanner: Scanner::new(params, params.mode & NUMA_BALANCING_NORMAL == 0, nprocs),
            targets: BTreeMap::new(),
            last_nid: Vec::new(),
            last_pid: Vec::new(),
            faults: Vec::new(),
            kswapd_woken: Vec::new(),
            initialized: false,
            tally: Tally::default(),
            stats: NumabStats::default(),
        }
    }

    /// Leaves slow-tier pages to another promoter: the scanner skips them (pghot with
    /// `numa_balancing=3`: slow pages go to pghot, top-tier pages to classic balancing).
    #[must_use]
    pub fn toptier_only(mut self) -> Self {
        self.scanner.skip_slow = true;
        self
    }

    /// The scanner.
    #[must_use]
    pub fn scanner(&self) -> &Scanner {
        &self.scanner
    }

    #[cfg(test)]
    fn walk_every_unit(&mut self) {
        self.scanner.summarize = false;
    }

    /// The hot threshold in force for promotions to `node`, ms (`pgdat->nbp_threshold`, or
    /// `hot_threshold_ms` while unset).
    #[must_use]
    pub fn threshold_ms(&self, node: NodeId) -> u64 {
        self.targets
            .get(&node)
            .map_or(self.params.hot_threshold_ms, |s| {
                s.threshold.effective(self.params.hot_threshold_ms)
            })
    }

    fn tiering(&self) -> bool {
        self.params.mode & NUMA_BALANCING_MEMORY_TIERING != 0
    }

    /// `(nid, pid)` of `u`'s `last_cpupid`, if set.
    fn last_cpupid(&self, u: UnitId) -> Option<(NodeId, u32)> {
        let pid = *self.last_pid.get(u.idx())?;
        (pid != CPUPID_UNSET).then(|| (NodeId(u16::from(self.last_nid[u.idx()])), pid))
    }

    fn set_last_cpupid(&mut self, u: UnitId, v: Option<(NodeId, u32)>, units: usize) {
        if self.last_pid.len() <= u.idx() {
            self.last_pid.resize(units.max(u.idx() + 1), CPUPID_UNSET);
            self.last_nid.resize(units.max(u.idx() + 1), u8::MAX);
        }
        let (nid, pid) = v.map_or((u8::MAX, CPUPID_UNSET), |(n, p)| (n.0 as u8, p));
        self.last_nid[u.idx()] = nid;
        self.last_pid[u.idx()] = pid;
    }

    /// The faulting thread: one of process `p`'s threads on `node`, drawn uniformly.
    fn draw_pid(procs: &[Process], p: usize, node: NodeId, rng: &mut SimRng) -> u32 {
        let mut base = 0u32;
        if let Some(proc) = procs.get(p) {
            for g in &proc.groups {
                if g.node == node && g.threads > 0 {
                    base += rng.gen_range(0..g.threads);
                    break;
                }
                base += g.threads;
            }
        }
        ((p as u32) << 20) | (base & 0xF_FFFF)
    }

    /// `pgdat_free_space_enough()` (kernel/sched/fair.c): free pages above the promotion
    /// watermark plus `max(1 GiB, node_present_pages >> 4)`.
    fn free_space_enough(ctx: &Ctx<'_>, node: NodeId) -> bool {
        let Some(m) = ctx.mem.node(node) else {
            return false;
        };
        let wm = Watermarks::of(m.capacity, ctx.kernel.watermark_scale_factor);
        let margin = free_space_margin(m.capacity.bytes()).pages();
        m.free().0 > wm.promo.0 + margin.0
    }

    /// `wakeup_kswapd()` from `migrate_misplaced_folio_prepare()` in tiering mode. kswapd
    /// balances a top-tier node to the promotion watermark in tiering mode (mm/vmscan.c
    /// `pgdat_balanced()`); it is woken once per node per step here (under the LRU model it
    /// then stays awake until balanced: [`crate::mechanism::kswapd_demote`]), and only demotes
    /// if demotion is enabled (reclaim to swap is not modelled).
    fn wake_kswapd(&mut self, ctx: &mut Ctx<'_>, node: NodeId) {
        if self.kswapd_woken.contains(&node) {
            return;
        }
        self.kswapd_woken.push(node);
        self.stats.kswapd_wakeups += 1;
        if !ctx.kernel.demotion_enabled {
            return;
        }
        let Some(m) = ctx.mem.node(node) else {
            return;
        };
        let goal = Watermarks::of(m.capacity, ctx.kernel.watermark_scale_factor).promo;
        crate::mechanism::kswapd_demote(ctx, node, goal);
    }

    /// The tiering branch of `should_numa_migrate_memory()` for a page on a slow node faulted
    /// from `dst`.
    fn should_promote(&mut self, ctx: &mut Ctx<'_>, f: &HintFault, dst: NodeId, nr: u64) -> bool {
        // The target is the faulting CPU's node, top tier by construction (tiers are cut at
        // the slowest tier holding a CPU node, mm/memory-tiers.c).
        if !ctx.mem.topology().is_toptier(dst) {
            return false;
        }
        let now = f.time_ns;
        let enough = Self::free_space_enough(ctx, dst);
        let st = self
            .targets
            .entry(dst)
            .or_insert_with(|| PromoteState::new(now));
        if enough {
            // "workload changed, reset hot threshold"
            st.threshold.reset_value();
            self.tally.add(T_PGPROMOTE_CANDIDATE_NRL, nr);
            return true;
        }
        let def_th = self.params.hot_threshold_ms;
        let rate_limit = mbps_to_pages_per_s(self.params.promote_rate_limit_mbps);
        st.threshold.maybe_adjust(
            Nanos(now),
            st.limiter.nr_cand,
            rate_limit,
            def_th,
            self.params.scan_period_max_ms,
        );
        if f.latency_ms >= st.threshold.effective(def_th) {
            self.stats.not_hot += 1;
            return false;
        }
        self.tally.add(T_PGPROMOTE_CANDIDATE, nr);
        let limited = st.limiter.charge(Nanos(now), Pages(nr), rate_limit);
        if limited {
            self.stats.rate_limited += 1;
        }
        !limited
    }

    /// The classic branch of `should_numa_migrate_memory()`: the `last_cpupid` exchange and
    /// the two-stage filter. Simplified: a shared fault (another thread faulted last) from the
    /// same node migrates, where the kernel would still weigh the numa group's per-node fault
    /// counts (`group_faults_cpu()`, 3/4 hysteresis), which are not modelled. So a page moves
    /// after two consecutive faults from the destination node, or at once on a first or
    /// private fault while the task is young.
    #[allow(clippy::too_many_arguments)]
    fn should_migrate_classic(
        &mut self,
        ctx: &Ctx<'_>,
        u: UnitId,
        p: usize,
        src_toptier: bool,
        dst: NodeId,
        last: Option<(NodeId, u32)>,
        pid: u32,
    ) -> bool {
        self.set_last_cpupid(u, Some((dst, pid)), ctx.mem.units() as usize);
        // A slow page whose last_cpupid is not a valid cpupid (unset) is left alone when
        // tiering is off.
        if !self.tiering() && !src_toptier && last.is_none() {
            return false;
        }
        // "Allow first faults or private faults to migrate immediately early in the lifetime
        // of a task."
        if self.scanner.early_life(p) && last.is_none_or(|(_, lp)| lp == pid) {
            return true;
        }
        match last {
            // Two-stage filter: the previous fault came from another node.
            Some((lnid, _)) if lnid != dst => false,
            _ => true,
        }
    }

    /// `do_numa_page()` after `numa_migrate_check()`: decide, migrate, report.
    fn handle_fault(&mut self, ctx: &mut Ctx<'_>, f: &HintFault) {
        let u = f.unit;
        let region = ctx.mem.region_of(u);
        if !region.alive {
            return;
        }
        let policy = region.policy;
        let nr = region.unit_pages();
        let cur = ctx.mem.node_of(u);
        let this = f.node;
        let (cur_top, this_top) = {
            let topo = ctx.mem.topology();
            (topo.is_toptier(cur), topo.is_toptier(this))
        };
        let tiering = self.tiering();
        // folio_use_access_time(): the cpupid field of a slow page holds its access time, so
        // do_numa_page() passes an unset last_cpupid on.
        let use_access_time = tiering && !cur_top;
        let (last, pid) = if use_access_time {
            (None, CPUPID_UNSET)
        } else {
            (
                self.last_cpupid(u),
                Self::draw_pid(ctx.procs, f.process, this, ctx.rng),
            )
        };
        let mut decided = false;
        if mpol_misplaced(&policy, cur, this) {
            decided = if use_access_time {
                self.should_promote(ctx, f, this, nr)
            } else {
                self.should_migrate_classic(ctx, u, f.process, cur_top, this, last, pid)
            };
        } else {
            self.stats.not_misplaced += 1;
        }
        let (mut migrated, mut failed) = (false, false);
        if decided && cur != this {
            if !crate::mechanism::migrate_balanced_pgdat(ctx, this, nr) {
                self.stats.refused_watermark += 1;
                failed = true;
                if tiering {
                    self.wake_kswapd(ctx, this);
                }
            } else if ctx.migrate_misplaced(u, this).is_ok() {
                // One fault moves the whole folio: a THP's 512 pages at once (mm/memory.c
                // do_huge_pmd_numa_page() -> migrate_misplaced_folio()); `thp_migration_success`
                // is counted by `Ctx`. A THP split earlier by another path moves as base pages.
                migrated = true;
                self.tally.add(T_NUMA_PAGES_MIGRATED, nr);
                self.tally.add(T_PGMIGRATE_SUCCESS, nr);
                if tiering && !cur_top && this_top {
                    self.tally.add(T_PGPROMOTE_SUCCESS, nr);
                }
                let folio = ctx.mem.folio_pages(u);
                let sharers = ctx.load.sharing_threads(f.process, ctx.mem.class_of(u));
                let cost = (nr / folio) as f64 * migrate_cost_ns(folio, sharers);
                ctx.charge_app(f.process, cost);
                // do_numa_page() migrates on the faulting thread: its next fault waits for
                // the copy too (`migrate_time_scale`).
                let scale = self.params.migrate_time_scale;
                self.scanner.add_busy(ctx, f.process, cost, scale);
                // folio_migrate_flags(): crossing tiers in tiering mode resets last_cpupid.
                if tiering && cur_top != this_top {
                    self.set_last_cpupid(u, None, ctx.mem.units() as usize);
                }
            } else {
                self.tally.add(T_PGMIGRATE_FAIL, nr);
                failed = true;
            }
        }
        let outcome = FaultOutcome {
            mem_node: if migrated { this } else { cur },
            pages: nr,
            local: cur == this,
            private: last.is_none_or(|(_, lp)| lp == pid),
            cpupid_valid: last.is_some(),
            migrated,
            migrate_failed: failed,
        };
        if let Some(proc) = ctx.procs.get(f.process) {
            self.scanner
                .task_numa_fault(ctx.mem, f.process, proc, f.time_ns, &outcome);
        }
    }
}

impl Mechanism for Numab {
    fn step(&mut self, ctx: &mut Ctx<'_>) {
        if self.params.mode & (NUMA_BALANCING_NORMAL | NUMA_BALANCING_MEMORY_TIERING) == 0 {
            return;
        }
        if !self.initialized {
            // reset_memory_tiering() for every top-tier node when tiering is switched on.
            for node in ctx.mem.topology().toptier_mask().iter() {
                self.targets.insert(node, PromoteState::new(ctx.now));
            }
            self.initialized = true;
        }
        self.kswapd_woken.clear();
        let mut faults = std::mem::take(&mut self.faults);
        faults.clear();
        match self.params.source {
            NumabSource::HintFaults => self.scanner.step(ctx, &mut faults),
            NumabSource::Samples => {
                let mut samples = Vec::new();
                crate::mechanism::draw_samples(ctx, self.params.sample_period, &mut samples);
                for smp in samples {
                    // A sample stands in for a hint fault: counted as one, with no latency
                    // (the page was just accessed). In a grained machine a drawn sample stands
                    // for one on each of the unit's pages (`draw_samples`), so for as many
                    // faults.
                    let grain = ctx.mem.grain_of(smp.unit);
                    self.tally.add(T_NUMA_HINT_FAULTS, grain);
                    if ctx.mem.node_of(smp.unit) == smp.node {
                        self.tally.add(T_NUMA_HINT_FAULTS_LOCAL, grain);
                    }
                    faults.push(HintFault {
                        unit: smp.unit,
                        node: smp.node,
                        time_ns: smp.time_ns,
                        latency_ms: 0,
                        process: smp.process,
                    });
                }
            }
        }
        for f in &faults {
            self.handle_fault(ctx, f);
        }
        self.tally.flush(ctx.acct);
        self.faults = faults;
    }
}

#[cfg(test)]
#[path = "numab_tests.rs"]
mod tests;
