//! Scenario files: a machine, processes, timed events, and the configurations to compare.
//!
//! Scenarios are TOML. Every table refuses unknown keys, and every error names the file, the
//! line and the field, e.g. `scenarios/a.toml:12:1: process[0].region[0].size_gib: expected a
//! number`. See `scenarios/` for the shipped ones and docs/simulator.md for the format.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tierd_engine::policy::PolicyMode;
use tierd_engine::sources::SourceKind;
use tierd_engine::EngineConfig;

use crate::damon::{DamonParams, IntervalsGoal};
use crate::numab::NumabParams;

/// A scenario error, naming where it is.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The TOML is malformed or a field has the wrong type or name.
    #[error("{path}:{line}:{column}: {field}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The field's dotted path (or `-` when the parser could not tell).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The TOML is well-formed but does not make sense (an unknown class, a node that does
    /// not exist).
    #[error("{path}:{line}: {field}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line of the first occurrence of the offending value (0 if not found).
        line: usize,
        /// The field's dotted path.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// No shipped scenario has this name.
    #[error("no scenario named {0:?}; shipped: {1}")]
    UnknownName(String, String),
    /// The scenario has no configuration with this id (`--only`, `--config`).
    #[error("scenario {scenario}: no configuration {id:?} (it has {have})")]
    NoConfig {
        /// The scenario's name.
        scenario: String,
        /// The id asked for.
        id: String,
        /// The ids it has, comma-separated.
        have: String,
    },
}

/// A memory node of the machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeToml {
    /// Node id.
    pub id: u16,
    /// CPUs on the node (0 for a CXL memory expander).
    #[serde(default)]
    pub cpus: u32,
    /// Capacity, GiB.
    pub capacity_gib: f64,
    /// Loaded access latency from each initiator node's CPUs, ns, keyed by initiator id.
    pub latency_ns: BTreeMap<String, f64>,
    /// Bandwidth from the nearest initiator, GB/s (HMAT); with latency it places the node in a
    /// tier by the kernel's HMAT formula.
    #[serde(default)]
    pub bandwidth_gbps: Option<f64>,
    /// Memory the simulator does not track page by page (kernel, other tenants), GiB.
    #[serde(default)]
    pub reserved_gib: f64,
}

/// The machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineToml {
    /// Nodes.
    pub node: Vec<NodeToml>,
    /// SLIT distances, one row per node in `node` order.
    pub distance: Vec<Vec<u32>>,
    /// `/sys/kernel/mm/numa/demotion_enabled`.
    #[serde(default)]
    pub demotion_enabled: bool,
    /// `vm.watermark_scale_factor`.
    #[serde(default = "default_wsf")]
    pub watermark_scale_factor: u32,
    /// How the kernel's reclaim chooses what to demote (default: the coldest pages).
    #[serde(default, skip_serializing_if = "ReclaimToml::is_default")]
    pub reclaim: ReclaimToml,
    /// Base pages per simulated unit in base-page regions (a power of two, 1 to
    /// [`MAX_GRAIN`]; default 1): each unit is a macro-particle standing for that many pages
    /// of one access rate ([`crate::memory::Memory::map_region_grained`]), so a run costs
    /// about what the run at `1 / grain` of the memory costs. Given at full scale:
    /// [`Scenario::scaled`] divides it, so a scaled run keeps about as many units.
    /// Only the mechanisms whose events are drawn per page take it (see
    /// [`Scenario::grain_problem`]).
    #[serde(default = "default_grain", skip_serializing_if = "is_grain_one")]
    pub grain: u32,
    /// Named latency profiles: the same machine measured under another kernel build, as
    /// seed A's note says its latencies were ("measured on two different kernels"). Keys
    /// are `"initiator-target"` node pairs, values loaded latencies in ns.
    #[serde(default)]
    pub profile: BTreeMap<String, BTreeMap<String, f64>>,
}

fn default_wsf() -> u32 {
    10
}

fn default_grain() -> u32 {
    1
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
pub(crate) fn is_grain_one(g: &u32) -> bool {
    *g == 1
}

/// The largest `machine.grain`: a unit of 2 MiB, a THP's size, so that a unit never spans
/// more than one page-table page of PTEs.
pub const MAX_GRAIN: u32 = 512;

/// `[machine] reclaim = { model, scan_ns_per_page }`: how reclaim picks the pages it
/// demotes (see `mechanism::ReclaimModel`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReclaimToml {
    /// `"coldest"` (the lowest access rates, at once) or `"lru"` (the kernel's LRU with a
    /// bounded scan rate).
    #[serde(default)]
    pub model: ReclaimKind,
    /// With `"lru"`: ns a reclaiming thread spends per folio scanned, a base page or a THP
    /// alike (default `mechanism::LRU_SCAN_NS_PER_PAGE`).
    #[serde(default = "default_scan_ns")]
    pub scan_ns_per_page: f64,
    /// The product of the `--scale` factors applied (not a key of the file): the LRU's scan
    /// rate shrinks with the machine, its inactive list is sized for the unscaled node.
    #[serde(skip)]
    pub scale: Option<f64>,
}

/// The reclaim models.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReclaimKind {
    /// Lowest access rate first.
    #[default]
    Coldest,
    /// The kernel's active/inactive LRU as a two-handed clock.
    Lru,
}

fn default_scan_ns() -> f64 {
    crate::mechanism::LRU_SCAN_NS_PER_PAGE
}

impl Default for ReclaimToml {
    fn default() -> Self {
        ReclaimToml {
            model: ReclaimKind::Coldest,
            scan_ns_per_page: default_scan_ns(),
            scale: None,
        }
    }
}

impl ReclaimToml {
    fn is_default(&self) -> bool {
        self.model == ReclaimKind::Coldest && self.scan_ns_per_page == default_scan_ns()
    }

    /// The model the kernel mechanisms read.
    #[must_use]
    pub fn model(&self) -> crate::mechanism::ReclaimModel {
        match self.model {
            ReclaimKind::Coldest => crate::mechanism::ReclaimModel::Coldest,
            ReclaimKind::Lru => {
                let scale = self.scale.unwrap_or(1.0);
                crate::mechanism::ReclaimModel::Lru {
                    scan_folios_per_s: 1e9 / self.scan_ns_per_page * scale,
                    unscale: 1.0 / scale,
                }
            }
        }
    }
}

/// Threads bound to a node.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThreadsToml {
    /// The node.
    pub node: u16,
    /// How many threads.
    pub count: u32,
    /// `count` before [`Scenario::scaled`] shrank it (`None`: never scaled). Not a key of the
    /// file: threads sharing a page contend as many as the real machine runs, whatever the
    /// scale ([`crate::workload::ThreadGroup::sharing`]).
    #[serde(skip)]
    pub unscaled: Option<u32>,
}

/// A memory policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyToml {
    /// Mode.
    pub mode: PolicyMode,
    /// Nodes.
    #[serde(default)]
    pub nodes: Vec<u16>,
    /// `MPOL_F_NUMA_BALANCING`.
    #[serde(default)]
    pub numa_balancing: bool,
}

/// How accesses spread over a class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SpreadToml {
    /// Every page alike.
    #[default]
    Uniform,
    /// Zipf with exponent `s`.
    Zipf {
        /// The exponent.
        s: f64,
    },
}

/// The hot subset of a region: `fraction` of it, in chunks of `chunk_mib` placed at random
/// (seeded) offsets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HotToml {
    /// Fraction of the region that is hot.
    pub fraction: f64,
    /// Chunk size, MiB (rounded to whole units).
    pub chunk_mib: f64,
    /// Access spread within the hot subset.
    #[serde(default)]
    pub spread: SpreadToml,
}

/// A region (an mmap'ed buffer).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionToml {
    /// Name, unique within the process.
    pub name: String,
    /// Size, GiB.
    pub size_gib: f64,
    /// Backed by 2 MiB huge pages: the same as `thp = "always"` (kept for older scenarios).
    #[serde(default)]
    pub huge: bool,
    /// Share of the region's bytes in 2 MiB transparent huge pages: `"always"` (1),
    /// `"never"` (0) or a number in 0..=1. Unset: 1 with `huge = true`, else 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thp: Option<Thp>,
    /// Memory policy (default: local allocation).
    #[serde(default)]
    pub policy: Option<PolicyToml>,
    /// Node to allocate on regardless of policy (the state after `migratepages` before the
    /// timed phase).
    #[serde(default)]
    pub place: Option<u16>,
    /// The hot subset, making classes `<region>.hot` and `<region>.cold`.
    #[serde(default)]
    pub hot: Option<HotToml>,
    /// Spread over the whole region when it has no hot subset.
    #[serde(default)]
    pub spread: SpreadToml,
    /// The region is swept sequentially, one pass every `sweep_s` seconds: each page is
    /// touched once per pass (all its accesses then), not at random. Read by the accessed-bit
    /// test of the LRU reclaim model (`machine.reclaim.model = "lru"`); unset: random touches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_s: Option<f64>,
}

/// A region's THP share (`thp = "always" | "never" | <share>`): the share of its bytes in
/// 2 MiB folios. Written back as the word for 0 and 1, else as the number.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thp(pub f64);

impl Thp {
    /// Every byte in 2 MiB folios (`/sys/kernel/mm/transparent_hugepage/enabled` = always).
    pub const ALWAYS: Thp = Thp(1.0);
    /// No THP (`never`).
    pub const NEVER: Thp = Thp(0.0);
}

impl Serialize for Thp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0 == 1.0 {
            s.serialize_str("always")
        } else if self.0 == 0.0 {
            s.serialize_str("never")
        } else {
            s.serialize_f64(self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Thp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Thp, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Thp;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("\"always\", \"never\" or a share of the region in 0..=1")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Thp, E> {
                match v {
                    "always" => Ok(Thp::ALWAYS),
                    "never" => Ok(Thp::NEVER),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
            // The range is checked by `Scenario::validate`, which names the key and line.
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Thp, E> {
                Ok(Thp(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Thp, E> {
                Ok(Thp(v as f64))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Thp, E> {
                Ok(Thp(v as f64))
            }
        }
        d.deserialize_any(V)
    }
}

impl RegionToml {
    /// The share of the region's bytes in 2 MiB folios (`thp`, else 1 for `huge = true`).
    #[must_use]
    pub fn thp_share(&self) -> f64 {
        self.thp.map_or(if self.huge { 1.0 } else { 0.0 }, |t| t.0)
    }
}

/// A share of a process's accesses to one class.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessToml {
    /// Class: `region`, `region.hot` or `region.cold` of this process, or
    /// `process.region[.hot|.cold]` of another one (shared memory).
    pub class: String,
    /// Fraction of the process's accesses.
    pub share: f64,
}

/// A process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessToml {
    /// Name, unique in the scenario.
    pub name: String,
    /// Cgroup name (default: the root).
    #[serde(default)]
    pub cgroup: Option<String>,
    /// Thread groups.
    #[serde(default)]
    pub threads: Vec<ThreadsToml>,
    /// Non-memory work per access, ns.
    #[serde(default)]
    pub compute_ns: f64,
    /// Start time, s (a process that starts later allocates then).
    #[serde(default)]
    pub start_s: f64,
    /// Whether it runs from its start (false: it waits for a `resume` event).
    #[serde(default = "yes")]
    pub running: bool,
    /// Regions.
    #[serde(default)]
    pub region: Vec<RegionToml>,
    /// Access streams.
    #[serde(default)]
    pub access: Vec<AccessToml>,
    /// Each thread is its own copy of the program with private memory (SPEC CPU rate copies,
    /// MPI ranks written as one process for brevity): threads then never contend on a page
    /// (a hint fault or a migration costs what one thread's does,
    /// [`crate::workload::Load::sharing_threads`]). Default: threads of one process share
    /// its pages.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub private_threads: bool,
    /// What one operation of this process is (a request served, a unit of work), when its
    /// throughput is counted in operations rather than memory accesses (`None`: every access
    /// is one operation, as a pointer chase).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<OpToml>,
    /// How many copies of this process run, each a process of its own: its own address
    /// space, page tables and NUMA-balancing scan (with its own runtime throttle), with the
    /// threads and regions written here (SPEC CPU rate's copies of one benchmark, seed D's
    /// 64 omnetpp). They keep the process's name, so the report (`process`, `hot`,
    /// `regions`), events and a configuration's `skip` take every copy; another process's
    /// stream may not name a class of a copied process (which copy would it be?).
    /// `--scale` shrinks the number of copies instead of their threads and sizes. Default
    /// 1; written back only when not 1.
    #[serde(default = "one_copy", skip_serializing_if = "is_one_copy")]
    pub copies: u32,
}

fn one_copy() -> u32 {
    1
}

fn is_one_copy(n: &u32) -> bool {
    *n == 1
}

/// One operation of a process: `accesses` memory accesses (spread over its streams), plus
/// CPU work and I/O work that do not depend on where its pages are. A thread serves one
/// operation after another, so its operation time is `accesses x (memory latency +
/// compute_ns of the process + tax) + compute_ns + io_ns` here, and operations per second
/// are threads / that time: what a closed-loop load generator measures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpToml {
    /// Name of the operation in the report (`get`).
    #[serde(default = "default_op_name")]
    pub name: String,
    /// Memory accesses per operation that miss the caches (at least 1; may be fractional,
    /// a mean).
    pub accesses: f64,
    /// CPU work per operation besides those accesses (hashing, parsing, building the
    /// reply), ns.
    #[serde(default)]
    pub compute_ns: f64,
    /// Time per operation in system calls and the network stack (receive, send, epoll), ns.
    #[serde(default)]
    pub io_ns: f64,
}

fn default_op_name() -> String {
    "op".to_string()
}

fn yes() -> bool {
    true
}

/// A timed event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventToml {
    /// When, s.
    pub at_s: f64,
    /// What: `migratepages`, `pause`, `resume`, `exit`.
    pub action: EventAction,
    /// The process it applies to.
    pub process: String,
    /// Destination node (`migratepages`).
    #[serde(default)]
    pub to: Option<u16>,
}

/// Event kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventAction {
    /// Move every page of the process to `to` (`migratepages(8)`).
    Migratepages,
    /// Stop its threads.
    Pause,
    /// Start its threads again.
    Resume,
    /// It exits: its memory is freed.
    Exit,
}

/// A cgroup's protection.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CgroupToml {
    /// Name.
    pub name: String,
    /// `memory.low`, GiB.
    #[serde(default)]
    pub low_gib: f64,
    /// `memory.high`, GiB (0 = none): above it the cgroup's coldest pages are demoted.
    #[serde(default)]
    pub high_gib: f64,
}

/// Which mechanism a configuration runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MechanismKind {
    /// No promotion.
    Baseline,
    /// Kernel NUMA balancing.
    Numab,
    /// DAMON with a DAMOS scheme.
    Damon,
    /// tierd's engine.
    Tierd,
}

/// tierd's configuration in the simulator: the engine's knobs plus its sources.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierdToml {
    /// Sources feeding the engine.
    pub sources: Vec<SourceKind>,
    /// Hardware sampling period, ops between samples (IBS `period`).
    #[serde(default = "default_period")]
    pub sample_period: u64,
    /// Keep only samples that missed the L3 (IBS `l3miss-only`).
    #[serde(default = "yes")]
    pub l3miss_only: bool,
    /// Accessed-bit scan: how often each page's accessed bit is checked, ms (with
    /// `abit_goal`, the first interval, which the goal then tunes).
    #[serde(default = "default_abit_ms")]
    pub abit_interval_ms: u64,
    /// Accessed-bit scan: tune the interval at run time toward a share of scanned slow-tier
    /// pages found accessed, as DAMON's intervals auto-tuning does (`intervals_goal`); `None`
    /// keeps `abit_interval_ms` fixed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abit_goal: Option<crate::abit::IntervalsGoal>,
    /// DAMON regions as a source, as the Linux daemon reads them (`vaddr`, regions fitted to
    /// the targets, the relative floor): `None` leaves it off. Its observations reach the
    /// engine as accessed-bit scans ([`crate::tierd`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damon: Option<DamonSourceToml>,
    /// NUMA-balancing scanner knobs for the hint-fault source.
    #[serde(default)]
    pub numab: NumabParams,
    /// Model the kernel's pghot rather than tierd's userspace daemon: migration costs are
    /// kmigrated's (a walk of hot sections, no syscall) instead of `move_pages(2)`'s, the
    /// engine runs the kernel's fixed threshold (`threshold = "fixed"` is forced: the kernel has
    /// no relative threshold, so a pghot row under tierd's default would model neither), tierd's
    /// demoter is off (the kernel demotes through kswapd only), and a promotion that fails
    /// `migrate_balanced_pgdat()` is not made and wakes kswapd on its target
    /// ([`crate::tierd`]).
    #[serde(default)]
    pub kernel_pghot: bool,
    /// The kernel's classic NUMA balancing running alongside for top-tier pages only
    /// (`mode = 1`: pghot with `numa_balancing=3` moves misplaced pages between fast nodes).
    #[serde(default)]
    pub kernel_numab: Option<NumabParams>,
    /// Engine configuration.
    #[serde(default)]
    pub engine: EngineConfig,
    /// `machine.grain` (not a key of the table): see [`TierdToml::grained`].
    #[serde(skip, default = "default_grain")]
    pub grain: u32,
}

impl TierdToml {
    /// The table for a machine of grain `grain`. The engine is given one page per unit
    /// ([`crate::memory::Memory::map_region_grained`]): its rate limits in MB/s shrink by the
    /// grain (at least 1), so that the pages it lets through per window, each a unit, are
    /// as many base pages as at grain 1, and so does its batch (`batch_nr` folios, down to
    /// the engine's floor of 64), so that a `move_pages(2)` call moves as many base pages as
    /// at grain 1; the simulator counts its per-page counters `grain` times. Free memory,
    /// watermarks, cgroup usage and memory.low reach it divided by the grain too
    /// (`tierd::grained_topology`), so its free-space tests and memory.low compare like
    /// quantities.
    #[must_use]
    pub fn grained(&self, grain: u32) -> TierdToml {
        let mut t = self.clone();
        let g = u64::from(grain.max(1));
        t.grain = grain.max(1);
        if g == 1 {
            return t;
        }
        t.engine.promote_rate_limit_mbps = (t.engine.promote_rate_limit_mbps / g).max(1);
        t.engine.demotion.idle_rate_limit_mbps =
            (t.engine.demotion.idle_rate_limit_mbps / g).max(1);
        // Not below the engine's floor (`kmigrated_batch_nr`'s range starts at 64): past
        // grain 8 a batch of the default 512 holds more base pages than at grain 1.
        t.engine.batch_nr = u32::try_from(u64::from(t.engine.batch_nr) / g)
            .unwrap_or(u32::MAX)
            .max(t.engine.batch_nr.min(tierd_engine::config::MIN_BATCH_NR));
        t
    }
}

/// tierd's DAMON source (`[sources.damon]` of the daemon's configuration, docs/daemon.md
/// "DAMON"): a `vaddr` kdamond over the processes, whose regions the daemon reads every
/// `read_interval_ms` (the newest aggregation, as from the `damon_aggregated` tracepoint) and
/// turns into per-page observations with the engine's region rules
/// ([`tierd_engine::regions`]). Defaults are the daemon's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DamonSourceToml {
    /// `sample_us` (5000).
    pub sample_us: u64,
    /// `aggr_us` (100000).
    pub aggr_us: u64,
    /// `update_us` (1000000, the daemon's: new mappings join within a second).
    pub update_us: u64,
    /// `nr_regions/min` before fitting (10).
    pub min_nr_regions: u32,
    /// `nr_regions/max` before fitting (1000).
    pub max_nr_regions: u32,
    /// Regions are fitted to at most this size over the monitored bytes, KiB (2048; 0 = off;
    /// the daemon's `max_region_kib`, or `unchecked_max_region_kib` = 512 where the kernel
    /// has no idle page tracking).
    pub max_region_kib: u64,
    /// How often the regions are read, ms (500).
    pub read_interval_ms: u64,
    /// The absolute floor of a region's `nr_accesses` (1).
    pub min_nr_accesses: u32,
    /// The floor relative to the read's hottest region, per mille (250).
    pub min_relative_permille: u32,
    /// Pages observed per read, hottest regions first (262144).
    pub max_pages_per_pass: u64,
    /// After this long with nothing to move (no slow page observed or kept below the floor,
    /// no migration), the daemon is idle and samples at `idle_min_sample_us` until there is
    /// work again, ms (the daemon's `daemon.idle_after_ms`, 5000; 0: never idle).
    pub idle_after_ms: u64,
    /// The sampling interval's range while idle, µs (the daemon's `idle_min_sample_us`,
    /// 100000, and `idle_max_sample_us`, 1000000; 0: no idle range): with a goal the kdamond
    /// tunes within it, without one it samples at its bottom.
    pub idle_min_sample_us: u64,
    /// The top of the idle range, µs.
    pub idle_max_sample_us: u64,
    /// The monitoring intervals goal, basis points of the possible access events (the
    /// daemon's `intervals_goal_bp`, 400; 0: fixed intervals). The kernel's tuning
    /// (`intervals_goal`, 6.15) then keeps the sampling interval in
    /// `min_sample_us..=max_sample_us` while tierd is active.
    pub intervals_goal_bp: u64,
    /// Aggregation intervals between two adjustments (3).
    pub intervals_goal_aggrs: u64,
    /// The tuned sampling interval's lower bound, µs (5000).
    pub min_sample_us: u64,
    /// Its upper bound, µs (100000: the daemon's, not DAMON's 10 s).
    pub max_sample_us: u64,
}

impl Default for DamonSourceToml {
    fn default() -> Self {
        DamonSourceToml {
            sample_us: 5000,
            aggr_us: 100_000,
            update_us: 1_000_000,
            min_nr_regions: 10,
            max_nr_regions: 1000,
            max_region_kib: 2048,
            read_interval_ms: 500,
            min_nr_accesses: 1,
            min_relative_permille: 250,
            max_pages_per_pass: 262_144,
            idle_after_ms: 5000,
            idle_min_sample_us: 100_000,
            idle_max_sample_us: 1_000_000,
            intervals_goal_bp: 400,
            intervals_goal_aggrs: 3,
            min_sample_us: 5_000,
            max_sample_us: 100_000,
        }
    }
}

impl DamonSourceToml {
    /// The kdamond's knobs: `vaddr`, a scheme that never applies (the daemon's kdamond only
    /// monitors for tierd), the monitoring attributes given.
    #[must_use]
    pub fn monitor(&self) -> DamonParams {
        DamonParams {
            ops: crate::damon::DamonOps::Vaddr,
            sample_us: self.sample_us,
            aggr_us: self.aggr_us,
            update_us: self.update_us,
            min_nr_regions: self.min_nr_regions,
            max_nr_regions: self.max_nr_regions,
            nr_accesses_min: u32::MAX,
            intervals_goal: (self.intervals_goal_bp > 0).then_some(IntervalsGoal {
                access_bp: self.intervals_goal_bp,
                aggrs: self.intervals_goal_aggrs,
                min_sample_us: self.min_sample_us,
                max_sample_us: self.max_sample_us,
            }),
            ..DamonParams::default()
        }
    }

    /// The sampling interval's range while tierd is active: the goal's, or `sample_us` alone
    /// without one (the daemon's `active_range`).
    #[must_use]
    pub fn active_range(&self) -> (u64, u64) {
        if self.intervals_goal_bp > 0 {
            (self.min_sample_us, self.max_sample_us)
        } else {
            (self.sample_us, self.sample_us)
        }
    }

    fn problem(&self) -> Result<(), (&'static str, String)> {
        let monitor = self.monitor();
        if let Some(g) = &monitor.intervals_goal {
            // The same rule as a DAMOS row's goal, named by this table's keys.
            intervals_goal_problem(g).map_err(|(part, m)| {
                let key = match part {
                    GoalPart::AccessBp => "intervals_goal_bp",
                    GoalPart::Aggrs => "intervals_goal_aggrs",
                    GoalPart::Range => "min_sample_us",
                };
                (key, m)
            })?;
        }
        damon_problem(&monitor)?;
        if !(10..=60_000).contains(&self.read_interval_ms) {
            return Err((
                "read_interval_ms",
                format!("{} is outside 10..=60000", self.read_interval_ms),
            ));
        }
        if self.min_relative_permille > 1000 {
            return Err((
                "min_relative_permille",
                format!("{} is above 1000", self.min_relative_permille),
            ));
        }
        if self.max_pages_per_pass == 0 {
            return Err(("max_pages_per_pass", "must be positive".into()));
        }
        ms_in_range(self.idle_after_ms, 0).map_err(|m| ("idle_after_ms", m))?;
        if self.idle_min_sample_us > 0
            && (self.idle_min_sample_us < self.sample_us || self.idle_min_sample_us > MAX_MS * 1000)
        {
            return Err((
                "idle_min_sample_us",
                format!(
                    "{} is outside sample_us ({})..={} us",
                    self.idle_min_sample_us,
                    self.sample_us,
                    MAX_MS * 1000
                ),
            ));
        }
        if self.idle_min_sample_us > 0
            && !(self.idle_min_sample_us..=MAX_MS * 1000).contains(&self.idle_max_sample_us)
        {
            return Err((
                "idle_max_sample_us",
                format!(
                    "{} is outside idle_min_sample_us ({})..={} us",
                    self.idle_max_sample_us,
                    self.idle_min_sample_us,
                    MAX_MS * 1000
                ),
            ));
        }
        Ok(())
    }
}

fn default_period() -> u64 {
    10_000
}
fn default_abit_ms() -> u64 {
    1000
}

/// One configuration to compare.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigToml {
    /// Short id for the table (`N2`, `H5`).
    pub id: String,
    /// Description.
    #[serde(default)]
    pub label: String,
    /// The mechanism.
    pub mechanism: MechanismKind,
    /// NUMA-balancing knobs (`mechanism = "numab"`).
    #[serde(default)]
    pub numab: Option<NumabParams>,
    /// DAMON knobs (`mechanism = "damon"`).
    #[serde(default)]
    pub damon: Option<DamonParams>,
    /// Further kdamonds beside `damon`, one context and scheme each (`nr_kdamonds` > 1, as
    /// DAMON's self-tuning tiering runs a demoting and a promoting one). Their counters add
    /// to the first's; their gauges take the suffix `_k<N>` (N from 1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kdamonds: Vec<DamonParams>,
    /// tierd knobs (`mechanism = "tierd"`).
    #[serde(default)]
    pub tierd: Option<TierdToml>,
    /// Published figures for this configuration, shown beside the simulated ones.
    #[serde(default)]
    pub published: BTreeMap<String, f64>,
    /// A latency profile of `machine.profile` to run under (default: the nodes' latencies).
    #[serde(default)]
    pub profile: Option<String>,
    /// Cgroup settings for this configuration only (a case of the scenario).
    #[serde(default)]
    pub cgroup: Vec<CgroupToml>,
    /// Processes left out of this configuration (e.g. "the tenant alone").
    #[serde(default)]
    pub skip: Vec<String>,
}

/// What the report measures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportToml {
    /// The class whose placement is the "hot set" (`process.region.hot`).
    pub hot: String,
    /// Regions counted in the placement columns (`process.region`); default: all.
    #[serde(default)]
    pub regions: Vec<String>,
    /// The node the placement column reports (default: the first top-tier node).
    #[serde(default)]
    pub fast_node: Option<u16>,
    /// Fraction of the run at the end over which latency is averaged.
    #[serde(default = "default_steady")]
    pub steady_fraction: f64,
    /// Measure latency and throughput of this process only (default: all).
    #[serde(default)]
    pub process: Option<String>,
    /// A configuration id whose throughput the others are shown relative to (seed D: the
    /// small tenant alone); `None`: no relative column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
}

fn default_steady() -> f64 {
    0.25
}

/// A whole scenario file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name (`pointer-chase`).
    pub name: String,
    /// What it reproduces.
    #[serde(default)]
    pub description: String,
    /// Seed of the run's random numbers.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Simulated time, s.
    pub duration_s: f64,
    /// Simulation step, ms.
    #[serde(default = "default_step")]
    pub step_ms: u64,
    /// Time-series sampling period, ms.
    #[serde(default = "default_sample")]
    pub sample_ms: u64,
    /// Multiplies every access rate of every process (1 = as the threads and latencies give).
    /// A machine or workload `rate_scale` times faster or slower at the page level, with the
    /// same placement dynamics to find: how much a mechanism's result depends on absolute
    /// access rates.
    #[serde(default = "default_rate_scale", skip_serializing_if = "is_one")]
    pub rate_scale: f64,
    /// The machine.
    pub machine: MachineToml,
    /// Cgroups.
    #[serde(default)]
    pub cgroup: Vec<CgroupToml>,
    /// Processes.
    pub process: Vec<ProcessToml>,
    /// Timed events.
    #[serde(default)]
    pub event: Vec<EventToml>,
    /// Configurations to compare.
    pub config: Vec<ConfigToml>,
    /// What to report.
    pub report: ReportToml,
}

fn default_seed() -> u64 {
    1
}
fn default_step() -> u64 {
    10
}
fn default_sample() -> u64 {
    1000
}
fn default_rate_scale() -> f64 {
    1.0
}
#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_one(x: &f64) -> bool {
    (*x - 1.0).abs() < f64::EPSILON
}

/// The shipped scenarios, by name (`tierd compare <name>`), embedded in the binary.
pub const SHIPPED: &[(&str, &str)] = &[
    (
        "pointer-chase",
        include_str!("../../../scenarios/a-pointer-chase.toml"),
    ),
    (
        "hint-vs-samples",
        include_str!("../../../scenarios/b-hint-vs-samples.toml"),
    ),
    (
        "three-node",
        include_str!("../../../scenarios/c-three-node.toml"),
    ),
    (
        "cgroup-fairness",
        include_str!("../../../scenarios/d-cgroup-fairness.toml"),
    ),
    (
        "memcached-preferred-many",
        include_str!("../../../scenarios/e-memcached-preferred-many.toml"),
    ),
    (
        "pointer-chase-thp",
        include_str!("../../../scenarios/a-pointer-chase-thp.toml"),
    ),
    // Lab A's twin: the lab's measurements referee the model (docs/simulator.md).
    ("lab-a", include_str!("../../../scenarios/lab-a.toml")),
];

/// Longest simulated time: 10^7 s (115 days), far beyond any scenario, so that the step count
/// and every time in ns stay exact.
const MAX_DURATION_S: f64 = 1e7;
/// Longest period of any ms knob: a day. A larger one would overflow when converted to ns
/// (ms * 10^6 in a u64 tops out at ~584 years) long before it made sense.
const MAX_MS: u64 = 86_400_000;

/// `v` (ms) within `min..=MAX_MS`, or why not.
fn ms_in_range(v: u64, min: u64) -> Result<(), String> {
    if (min..=MAX_MS).contains(&v) {
        Ok(())
    } else {
        Err(format!("{v} is outside {min}..={MAX_MS} ms"))
    }
}

/// The first NUMA-balancing knob out of range: its key and why. Zero periods, sizes and
/// rates would divide by zero or scan nothing; 0 MB/s promotes nothing in the kernel
/// (kernel/sched/fair.c numa_promotion_rate_limit()), so it is refused as in the engine.
fn numab_problem(n: &NumabParams) -> Result<(), (&'static str, String)> {
    for (k, v, min) in [
        ("scan_delay_ms", n.scan_delay_ms, 0),
        ("scan_period_min_ms", n.scan_period_min_ms, 1),
        ("scan_period_max_ms", n.scan_period_max_ms, 1),
        ("hot_threshold_ms", n.hot_threshold_ms, 1),
    ] {
        ms_in_range(v, min).map_err(|m| (k, m))?;
    }
    if n.scan_period_max_ms < n.scan_period_min_ms {
        return Err((
            "scan_period_max_ms",
            format!(
                "{} is below scan_period_min_ms ({})",
                n.scan_period_max_ms, n.scan_period_min_ms
            ),
        ));
    }
    for (k, v) in [
        ("scan_size_mb", n.scan_size_mb),
        ("promote_rate_limit_mbps", n.promote_rate_limit_mbps),
        ("max_scan_window_mbps", n.max_scan_window_mbps),
        ("sample_period", n.sample_period),
    ] {
        if v == 0 {
            return Err((k, "must be above 0".into()));
        }
    }
    if n.mode > 3 {
        return Err(("mode", format!("{} is not 0, 1, 2 or 3", n.mode)));
    }
    // A multiple of the model's fault cost; TCG's is ~17 (docs/lab.md). 1000 bounds the
    // backlog arithmetic far from overflow and is past any emulator.
    if !(0.0..=1000.0).contains(&n.fault_time_scale) {
        return Err((
            "fault_time_scale",
            format!("{} is not a number in 0..=1000", n.fault_time_scale),
        ));
    }
    if !(0.0..=1000.0).contains(&n.migrate_time_scale) {
        return Err((
            "migrate_time_scale",
            format!("{} is not a number in 0..=1000", n.migrate_time_scale),
        ));
    }
    // A multiple of the model's PTE-update cost (lab A's guests measure 1.2 and 4.2); the
    // same bound keeps the throttle's arithmetic far from overflow.
    if !(0.0..=1000.0).contains(&n.pte_time_scale) {
        return Err((
            "pte_time_scale",
            format!("{} is not a number in 0..=1000", n.pte_time_scale),
        ));
    }
    Ok(())
}

/// The first DAMON knob out of range, with the kernel's own rules (mm/damon/core.c
/// damon_set_attrs(): intervals ordered, at least 3 regions).
fn damon_problem(d: &DamonParams) -> Result<(), (&'static str, String)> {
    if d.sample_us == 0 || d.aggr_us < d.sample_us {
        return Err((
            "aggr_us",
            format!(
                "aggr_us ({}) must be at least sample_us ({}), and sample_us above 0",
                d.aggr_us, d.sample_us
            ),
        ));
    }
    if d.aggr_us > MAX_MS * 1000 || d.update_us > MAX_MS * 1000 {
        return Err(("aggr_us", format!("intervals are limited to {MAX_MS} ms")));
    }
    if d.min_nr_regions < 3 || d.max_nr_regions < d.min_nr_regions {
        return Err((
            "min_nr_regions",
            format!(
                "need 3 <= min_nr_regions ({}) <= max_nr_regions ({})",
                d.min_nr_regions, d.max_nr_regions
            ),
        ));
    }
    ms_in_range(d.quota_ms, 0).map_err(|m| ("quota_ms", m))?;
    ms_in_range(d.quota_reset_interval_ms, 0).map_err(|m| ("quota_reset_interval_ms", m))?;
    if let Some(g) = d
        .quota_goals
        .iter()
        .find(|g| !(1..=10_000).contains(&g.target_value))
    {
        return Err((
            "quota_goals",
            format!(
                "target_value {} is outside 1..=10000 (basis points)",
                g.target_value
            ),
        ));
    }
    if d.apply_interval_us > MAX_MS * 1000 {
        return Err((
            "apply_interval_us",
            format!("intervals are limited to {MAX_MS} ms"),
        ));
    }
    if let Some(g) = &d.intervals_goal {
        intervals_goal_problem(g).map_err(|(_, m)| ("intervals_goal", m))?;
    }
    Ok(())
}

/// Which part of an intervals goal is wrong.
enum GoalPart {
    AccessBp,
    Aggrs,
    Range,
}

/// The intervals goal's rule (`damon_valid_intervals_goal()` asks for a positive `aggrs` and
/// `min_sample_us <= max_sample_us`; the share is a share and the interval one the simulator
/// can run), for a DAMOS row's `intervals_goal` and tierd's DAMON source alike.
fn intervals_goal_problem(g: &IntervalsGoal) -> Result<(), (GoalPart, String)> {
    if g.access_bp > 10_000 {
        return Err((
            GoalPart::AccessBp,
            format!("access_bp {} is above 10000 (100 %)", g.access_bp),
        ));
    }
    if g.aggrs == 0 {
        return Err((GoalPart::Aggrs, "aggrs must be positive with a goal".into()));
    }
    if g.min_sample_us == 0 || g.max_sample_us < g.min_sample_us || g.max_sample_us > MAX_MS * 1000
    {
        return Err((
            GoalPart::Range,
            format!(
                "need 0 < min_sample_us ({}) <= max_sample_us ({}) <= {} us",
                g.min_sample_us,
                g.max_sample_us,
                MAX_MS * 1000
            ),
        ));
    }
    Ok(())
}

/// Where a scenario check reports from: [`ScenarioError::Invalid`] with the line of the first
/// occurrence of a needle in the text.
struct Invalid<'a> {
    text: &'a str,
    path: &'a Path,
}

impl Invalid<'_> {
    fn invalid(&self, field: String, needle: &str, message: String) -> ScenarioError {
        ScenarioError::Invalid {
            path: self.path.to_path_buf(),
            line: line_of(self.text, needle),
            field,
            message,
        }
    }
}

// Every float is checked with is_finite first: NaN fails every comparison, so a bare
// `x <= 0.0` test lets it (and infinity) through.
fn pos(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

fn non_neg(x: f64) -> bool {
    x.is_finite() && x >= 0.0
}

/// The first line of `text` containing `needle` (1-based; 0 if absent).
#[must_use]
pub fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .map_or(0, |i| i + 1)
}

impl Scenario {
    /// Parses scenario text; `path` names it in errors.
    ///
    /// # Errors
    /// [`ScenarioError::Parse`] with the line, column and field of the first problem, or
    /// [`ScenarioError::Invalid`] from [`Scenario::validate`].
    pub fn parse(text: &str, path: &Path) -> Result<Scenario, ScenarioError> {
        let sc: Scenario = tierd_toml::from_str(text).map_err(|p| ScenarioError::Parse {
            path: path.to_path_buf(),
            line: p.line,
            column: p.column,
            field: p.key,
            message: p.message,
        })?;
        sc.validate(text, path)?;
        Ok(sc)
    }

    /// Reads and parses a scenario file.
    ///
    /// # Errors
    /// As [`Scenario::parse`], or [`ScenarioError::Read`].
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Scenario::parse(&text, path)
    }

    /// The configuration whose id is `id`.
    ///
    /// # Errors
    /// [`ScenarioError::NoConfig`], naming the ids there are, when there is none.
    pub fn config_by_id(&self, id: &str) -> Result<&ConfigToml, ScenarioError> {
        self.config
            .iter()
            .find(|c| c.id == id)
            .ok_or_else(|| ScenarioError::NoConfig {
                scenario: self.name.clone(),
                id: id.to_string(),
                have: self
                    .config
                    .iter()
                    .map(|c| c.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// A shipped scenario by name, or a file path.
    ///
    /// # Errors
    /// As [`Scenario::load`]; [`ScenarioError::UnknownName`] for a name that is neither.
    pub fn find(name_or_path: &str) -> Result<Scenario, ScenarioError> {
        if let Some((n, text)) = SHIPPED.iter().find(|(n, _)| *n == name_or_path) {
            return Scenario::parse(text, Path::new(&format!("<shipped:{n}>")));
        }
        let p = Path::new(name_or_path);
        if p.exists() {
            return Scenario::load(p);
        }
        let names: Vec<&str> = SHIPPED.iter().map(|(n, _)| *n).collect();
        Err(ScenarioError::UnknownName(
            name_or_path.to_string(),
            names.join(", "),
        ))
    }

    /// Checks cross-references and ranges that the types cannot.
    ///
    /// # Errors
    /// [`ScenarioError::Invalid`] naming the field.
    pub fn validate(&self, text: &str, path: &Path) -> Result<(), ScenarioError> {
        let at = Invalid { text, path };
        let node_ids: Vec<u16> = self.machine.node.iter().map(|n| n.id).collect();
        self.validate_machine(&at, &node_ids)?;
        let classes = self.validate_processes(&at, &node_ids)?;
        let procs: Vec<&str> = self.process.iter().map(|p| p.name.as_str()).collect();
        self.validate_report(&at, &node_ids, &classes, &procs)?;
        self.validate_configs(&at, &procs)?;
        // Last: whether the grain fits the regions and rows, once each is valid on its own (a
        // region's `thp = 1.5` is named as such, not as a THP beside a grain).
        if let Some(problem) = self.grain_problem() {
            return Err(at.invalid("machine.grain".into(), "grain =", problem));
        }
        Ok(())
    }

    /// The run's length and steps, the grain's range, reclaim, and each node.
    fn validate_machine(&self, at: &Invalid<'_>, node_ids: &[u16]) -> Result<(), ScenarioError> {
        let err = |field: String, needle: &str, message: String| at.invalid(field, needle, message);
        if !pos(self.duration_s) || self.duration_s > MAX_DURATION_S {
            return Err(err(
                "duration_s".into(),
                "duration_s",
                format!("must be a positive number of seconds up to {MAX_DURATION_S}"),
            ));
        }
        if self.step_ms == 0 || self.sample_ms < self.step_ms {
            return Err(err(
                "step_ms".into(),
                "step_ms",
                "must be positive and at most sample_ms".into(),
            ));
        }
        for (key, v) in [("step_ms", self.step_ms), ("sample_ms", self.sample_ms)] {
            ms_in_range(v, 1).map_err(|m| err(key.into(), key, m))?;
        }
        if !(self.rate_scale.is_finite() && self.rate_scale > 0.0) {
            return Err(err(
                "rate_scale".into(),
                "rate_scale",
                "must be positive".into(),
            ));
        }
        let g = self.machine.grain;
        if !(1..=MAX_GRAIN).contains(&g) || !g.is_power_of_two() {
            return Err(err(
                "machine.grain".into(),
                "grain =",
                format!("{g} must be a power of two from 1 to {MAX_GRAIN}"),
            ));
        }
        if !pos(self.machine.reclaim.scan_ns_per_page) {
            return Err(err(
                "machine.reclaim.scan_ns_per_page".into(),
                "scan_ns_per_page",
                "must be positive".into(),
            ));
        }
        for (i, n) in self.machine.node.iter().enumerate() {
            if !pos(n.capacity_gib) {
                return Err(err(
                    format!("machine.node[{i}].capacity_gib"),
                    "capacity_gib",
                    "must be positive".into(),
                ));
            }
            if !non_neg(n.reserved_gib) || n.reserved_gib >= n.capacity_gib {
                return Err(err(
                    format!("machine.node[{i}].reserved_gib"),
                    "reserved_gib",
                    "must be at least 0 and below capacity_gib".into(),
                ));
            }
            if n.bandwidth_gbps.is_some_and(|b| !pos(b)) {
                return Err(err(
                    format!("machine.node[{i}].bandwidth_gbps"),
                    "bandwidth_gbps",
                    "must be positive".into(),
                ));
            }
            if let Some((k, v)) = n.latency_ns.iter().find(|(_, v)| !pos(**v)) {
                return Err(err(
                    format!("machine.node[{i}].latency_ns"),
                    k,
                    format!("{v} ns from node {k} must be positive"),
                ));
            }
            for k in n.latency_ns.keys() {
                if !k.parse::<u16>().is_ok_and(|id| node_ids.contains(&id)) {
                    return Err(err(
                        format!("machine.node[{i}].latency_ns"),
                        k,
                        format!("{k:?} is not a node id"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Each process: its threads, regions and access streams. Returns every class name:
    /// `process.region`, and `.hot` and `.cold` after it for a region with a hot part.
    fn validate_processes(
        &self,
        at: &Invalid<'_>,
        node_ids: &[u16],
    ) -> Result<Vec<String>, ScenarioError> {
        let err = |field: String, needle: &str, message: String| at.invalid(field, needle, message);
        let mut classes: Vec<String> = Vec::new();
        for p in &self.process {
            for r in &p.region {
                classes.push(format!("{}.{}", p.name, r.name));
                if r.hot.is_some() {
                    classes.push(format!("{}.{}.hot", p.name, r.name));
                    classes.push(format!("{}.{}.cold", p.name, r.name));
                }
            }
        }
        for (pi, p) in self.process.iter().enumerate() {
            for (key, v) in [("compute_ns", p.compute_ns), ("start_s", p.start_s)] {
                if !non_neg(v) {
                    return Err(err(
                        format!("process[{pi}].{key}"),
                        &p.name,
                        format!("{v} must be a number at least 0"),
                    ));
                }
            }
            if let Some(op) = &p.op {
                if !(op.accesses.is_finite() && op.accesses >= 1.0) {
                    return Err(err(
                        format!("process[{pi}].op.accesses"),
                        "accesses",
                        format!("{} must be a number at least 1", op.accesses),
                    ));
                }
                for (key, v) in [("compute_ns", op.compute_ns), ("io_ns", op.io_ns)] {
                    if !non_neg(v) {
                        return Err(err(
                            format!("process[{pi}].op.{key}"),
                            key,
                            format!("{v} must be a number of ns at least 0"),
                        ));
                    }
                }
                if p.access.is_empty() {
                    return Err(err(
                        format!("process[{pi}].op"),
                        &p.name,
                        "an operation needs memory accesses: the process has no `access` streams"
                            .into(),
                    ));
                }
            }
            for (ti, t) in p.threads.iter().enumerate() {
                if !node_ids.contains(&t.node) {
                    return Err(err(
                        format!("process[{pi}].threads[{ti}].node"),
                        &p.name,
                        format!("node {} does not exist", t.node),
                    ));
                }
            }
            for (ri, r) in p.region.iter().enumerate() {
                if !pos(r.size_gib) {
                    return Err(err(
                        format!("process[{pi}].region[{ri}].size_gib"),
                        &r.name,
                        "must be positive".into(),
                    ));
                }
                let zipf_bad =
                    |sp: &SpreadToml| matches!(sp, SpreadToml::Zipf { s } if !non_neg(*s));
                if zipf_bad(&r.spread) || r.hot.as_ref().is_some_and(|h| zipf_bad(&h.spread)) {
                    return Err(err(
                        format!("process[{pi}].region[{ri}].spread"),
                        &r.name,
                        "the zipf exponent s must be a number at least 0".into(),
                    ));
                }
                if let Some(t) = r.thp {
                    // NaN is outside every range, so `contains` refuses it too.
                    if !(0.0..=1.0).contains(&t.0) {
                        return Err(err(
                            format!("process[{pi}].region[{ri}].thp"),
                            "thp",
                            format!(
                                "{} must be \"always\", \"never\" or a share within 0..=1",
                                t.0
                            ),
                        ));
                    }
                    if r.huge && t.0 != 1.0 {
                        return Err(err(
                            format!("process[{pi}].region[{ri}].thp"),
                            "thp",
                            format!("huge = true means thp = 1, not {}: set one of them", t.0),
                        ));
                    }
                }
                if let Some(h) = &r.hot {
                    if !(0.0..=1.0).contains(&h.fraction) || !pos(h.chunk_mib) {
                        return Err(err(
                            format!("process[{pi}].region[{ri}].hot"),
                            &r.name,
                            "fraction must be in 0..=1 and chunk_mib positive".into(),
                        ));
                    }
                }
                if r.sweep_s.is_some_and(|v| !pos(v)) {
                    return Err(err(
                        format!("process[{pi}].region[{ri}].sweep_s"),
                        &r.name,
                        "must be positive".into(),
                    ));
                }
                if let Some(pl) = r.place {
                    if !node_ids.contains(&pl) {
                        return Err(err(
                            format!("process[{pi}].region[{ri}].place"),
                            &r.name,
                            format!("node {pl} does not exist"),
                        ));
                    }
                }
            }
            if let Some(ai) = p
                .access
                .iter()
                .position(|a| !(0.0..=1.0).contains(&a.share))
            {
                return Err(err(
                    format!("process[{pi}].access[{ai}].share"),
                    &p.name,
                    format!("{} must be within 0..=1", p.access[ai].share),
                ));
            }
            let total: f64 = p.access.iter().map(|a| a.share).sum();
            if !p.access.is_empty() && (total - 1.0).abs() > 1e-6 {
                return Err(err(
                    format!("process[{pi}].access"),
                    &p.name,
                    format!("shares add up to {total}, not 1"),
                ));
            }
            if !(1..=4096).contains(&p.copies) {
                return Err(err(
                    format!("process[{pi}].copies"),
                    &p.name,
                    format!("{} is not in 1..=4096", p.copies),
                ));
            }
            for (ai, a) in p.access.iter().enumerate() {
                let full = if a.class.matches('.').count() >= 2
                    || (a.class.contains('.')
                        && !classes.contains(&format!("{}.{}", p.name, a.class)))
                {
                    a.class.clone()
                } else {
                    format!("{}.{}", p.name, a.class)
                };
                if !classes.contains(&full) {
                    return Err(err(
                        format!("process[{pi}].access[{ai}].class"),
                        &a.class,
                        format!("no class {:?}; known: {}", a.class, classes.join(", ")),
                    ));
                }
                let owner = self
                    .process
                    .iter()
                    .find(|q| full.starts_with(&format!("{}.", q.name)));
                if let Some(q) = owner.filter(|q| q.name != p.name && q.copies > 1) {
                    return Err(err(
                        format!("process[{pi}].access[{ai}].class"),
                        &a.class,
                        format!(
                            "{:?} has {} copies: a stream of another process cannot name one",
                            q.name, q.copies
                        ),
                    ));
                }
            }
        }
        Ok(classes)
    }

    /// Events, the report's fields, the cgroups and the latency profiles.
    fn validate_report(
        &self,
        at: &Invalid<'_>,
        node_ids: &[u16],
        classes: &[String],
        procs: &[&str],
    ) -> Result<(), ScenarioError> {
        let err = |field: String, needle: &str, message: String| at.invalid(field, needle, message);
        for (i, e) in self.event.iter().enumerate() {
            if !non_neg(e.at_s) {
                return Err(err(
                    format!("event[{i}].at_s"),
                    &e.process,
                    format!("{} must be a number of seconds at least 0", e.at_s),
                ));
            }
            if !procs.contains(&e.process.as_str()) {
                return Err(err(
                    format!("event[{i}].process"),
                    &e.process,
                    format!("no process {:?}", e.process),
                ));
            }
            if e.action == EventAction::Migratepages && !e.to.is_some_and(|t| node_ids.contains(&t))
            {
                return Err(err(
                    format!("event[{i}].to"),
                    "migratepages",
                    "migratepages needs an existing node in `to`".into(),
                ));
            }
        }
        let steady = self.report.steady_fraction;
        if !pos(steady) || steady > 1.0 {
            return Err(err(
                "report.steady_fraction".into(),
                "steady_fraction",
                format!("{steady} must be within (0, 1]"),
            ));
        }
        let all_cgroups = self.cgroup.iter().map(|c| ("cgroup".to_string(), c)).chain(
            self.config.iter().enumerate().flat_map(|(i, c)| {
                c.cgroup
                    .iter()
                    .map(move |g| (format!("config[{i}].cgroup"), g))
            }),
        );
        for (key, c) in all_cgroups {
            if !non_neg(c.low_gib) || !non_neg(c.high_gib) {
                return Err(err(
                    key,
                    &c.name,
                    format!(
                        "{:?}: low_gib and high_gib must be numbers at least 0",
                        c.name
                    ),
                ));
            }
        }
        if let Some(p) = &self.report.process {
            if !procs.contains(&p.as_str()) {
                return Err(err("report.process".into(), p, format!("no process {p:?}")));
            }
        }
        if let Some(b) = &self.report.baseline {
            if !self.config.iter().any(|c| &c.id == b) {
                return Err(err(
                    "report.baseline".into(),
                    b,
                    format!("no config with id {b:?}"),
                ));
            }
        }
        if !classes.contains(&self.report.hot) {
            return Err(err(
                "report.hot".into(),
                &self.report.hot,
                format!("no class {:?}", self.report.hot),
            ));
        }
        for (name, pairs) in &self.machine.profile {
            if let Some((k, v)) = pairs.iter().find(|(_, v)| !pos(**v)) {
                return Err(err(
                    format!("machine.profile.{name}"),
                    k,
                    format!("{v} ns for {k} must be positive"),
                ));
            }
            for k in pairs.keys() {
                let ok = k.split_once('-').is_some_and(|(a, b)| {
                    [a, b]
                        .iter()
                        .all(|x| x.parse::<u16>().is_ok_and(|id| node_ids.contains(&id)))
                });
                if !ok {
                    return Err(err(
                        format!("machine.profile.{name}"),
                        k,
                        format!("{k:?} is not an \"initiator-target\" node pair"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Each configuration (row): its id, mechanism and the knobs of that mechanism.
    fn validate_configs(&self, at: &Invalid<'_>, procs: &[&str]) -> Result<(), ScenarioError> {
        let err = |field: String, needle: &str, message: String| at.invalid(field, needle, message);
        let mut ids: Vec<&str> = Vec::new();
        for (i, c) in self.config.iter().enumerate() {
            if ids.contains(&c.id.as_str()) {
                return Err(err(
                    format!("config[{i}].id"),
                    &c.id,
                    format!("duplicate id {:?}", c.id),
                ));
            }
            ids.push(&c.id);
            for sk in &c.skip {
                if !procs.contains(&sk.as_str()) {
                    return Err(err(
                        format!("config[{i}].skip"),
                        sk,
                        format!("no process {sk:?}"),
                    ));
                }
            }
            for cg in &c.cgroup {
                if !self.cgroup.iter().any(|k| k.name == cg.name) {
                    return Err(err(
                        format!("config[{i}].cgroup"),
                        &cg.name,
                        format!("no cgroup {:?} in [[cgroup]]", cg.name),
                    ));
                }
            }
            let numabs = c
                .numab
                .iter()
                .map(|n| (format!("config[{i}].numab"), n))
                .chain(c.tierd.iter().flat_map(|t| {
                    std::iter::once((format!("config[{i}].tierd.numab"), &t.numab)).chain(
                        t.kernel_numab
                            .iter()
                            .map(move |n| (format!("config[{i}].tierd.kernel_numab"), n)),
                    )
                }));
            for (key, n) in numabs {
                if let Err((k, m)) = numab_problem(n) {
                    return Err(err(format!("{key}.{k}"), k, m));
                }
            }
            if let Some(d) = &c.damon {
                if let Err((k, m)) = damon_problem(d) {
                    return Err(err(format!("config[{i}].damon.{k}"), k, m));
                }
            }
            for (j, d) in c.kdamonds.iter().enumerate() {
                if let Err((k, m)) = damon_problem(d) {
                    return Err(err(format!("config[{i}].kdamonds[{j}].{k}"), k, m));
                }
            }
            if !c.kdamonds.is_empty() && c.mechanism != MechanismKind::Damon {
                return Err(err(
                    format!("config[{i}].kdamonds"),
                    "kdamonds",
                    "further kdamonds need mechanism = \"damon\"".to_string(),
                ));
            }
            if let Some(p) = &c.profile {
                if !self.machine.profile.contains_key(p) {
                    return Err(err(
                        format!("config[{i}].profile"),
                        p,
                        format!("no machine.profile.{p}"),
                    ));
                }
            }
            if c.mechanism == MechanismKind::Tierd {
                let Some(t) = &c.tierd else {
                    return Err(err(
                        format!("config[{i}].tierd"),
                        &c.id,
                        "mechanism \"tierd\" needs a [config.tierd] table".into(),
                    ));
                };
                if let Err(e) = t.engine.validate() {
                    return Err(err(
                        format!("config[{i}].tierd.engine"),
                        &c.id,
                        e.to_string(),
                    ));
                }
                if let Err(m) = ms_in_range(t.abit_interval_ms, 1) {
                    return Err(err(
                        format!("config[{i}].tierd.abit_interval_ms"),
                        "abit_interval_ms",
                        m,
                    ));
                }
                if let Some(Err((k, m))) = t.damon.as_ref().map(DamonSourceToml::problem) {
                    return Err(err(format!("config[{i}].tierd.damon.{k}"), k, m));
                }
                if t.sample_period == 0 {
                    return Err(err(
                        format!("config[{i}].tierd.sample_period"),
                        "sample_period",
                        "must be positive".into(),
                    ));
                }
                if let Some(problem) = t.abit_goal.as_ref().and_then(|g| g.problem()) {
                    return Err(err(
                        format!("config[{i}].tierd.abit_goal"),
                        "abit_goal",
                        problem.into(),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The scenario with every region's THP share set to `share` (`tierd compare --thp`):
    /// 1 backs every region with 2 MiB folios (`always`), 0 with base pages (`never`).
    #[must_use]
    pub fn with_thp(&self, share: Thp) -> Scenario {
        let mut s = self.clone();
        for r in s.process.iter_mut().flat_map(|p| p.region.iter_mut()) {
            r.huge = false;
            r.thp = Some(share);
        }
        if s.has_thp() {
            // A THP is already a unit of 512 pages; grained base pages beside it would
            // give tierd's engine units of two sizes it cannot tell apart.
            s.machine.grain = 1;
        }
        s
    }

    /// The scenario with `machine.grain = grain` (`tierd compare --grain`); check it with
    /// [`Scenario::grain_problem`].
    #[must_use]
    pub fn with_grain(&self, grain: u32) -> Scenario {
        let mut s = self.clone();
        s.machine.grain = grain;
        s
    }

    /// Whether any region is backed by THP, in whole or in part.
    #[must_use]
    pub fn has_thp(&self) -> bool {
        self.process
            .iter()
            .flat_map(|p| &p.region)
            .any(|r| r.thp_share() > 0.0)
    }

    /// Why `machine.grain` cannot be what it is, if it cannot. A grained unit's events are
    /// drawn once at one page's rate and counted for each of its pages (the scanner's hint
    /// faults and PTE updates, the LRU's reference bits, hardware samples, tierd's
    /// accessed-bit scans, DAMON's samples, migrations and reclaim), which is exact in
    /// expectation for pages of one rate, whatever the mechanism. tierd's engine is given one
    /// page per unit of a machine `grain` times smaller, so its thresholds and its demoter
    /// rank units as pages of one size: no THP may sit beside them, and a THP is already a
    /// unit of 512 pages. So THP regions are what a grain refuses.
    #[must_use]
    pub fn grain_problem(&self) -> Option<String> {
        let g = self.machine.grain;
        if g > 1 && self.has_thp() {
            return Some(format!(
                "grain {g} needs base pages only: a THP is already a unit of 512 pages (use grain 1 with THP)"
            ));
        }
        None
    }

    /// Shrinks the scenario by `scale` (0 < scale <= 1) for quick runs: memory sizes,
    /// capacities and thread counts shrink together, so per-page access rates, and with them
    /// the dynamics, stay about the same; rate limits and quotas in bytes shrink too.
    #[must_use]
    pub fn scaled(&self, scale: f64) -> Scenario {
        let mut s = self.clone();
        if (scale - 1.0).abs() < f64::EPSILON {
            return s;
        }
        for n in &mut s.machine.node {
            n.capacity_gib *= scale;
            n.reserved_gib *= scale;
        }
        s.machine.reclaim.scale = Some(s.machine.reclaim.scale.unwrap_or(1.0) * scale);
        // The grain is given at full scale: a scaled run keeps about as many units, and at
        // `1 / grain` of the memory or less it runs base pages, as it did before grains.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let g = (f64::from(s.machine.grain) * scale).floor().max(1.0) as u32;
        s.machine.grain = if g.is_power_of_two() {
            g
        } else {
            g.next_power_of_two() / 2
        };
        for p in &mut s.process {
            if p.copies > 1 {
                // Fewer copies, each whole: a copy's heap and threads are what the program
                // needs. At least one.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                {
                    p.copies = ((f64::from(p.copies) * scale).round() as u32).max(1);
                }
                continue;
            }
            for t in &mut p.threads {
                // Thread counts round to at least one.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                {
                    t.unscaled.get_or_insert(t.count);
                    t.count = ((f64::from(t.count) * scale).round() as u32).max(1);
                }
            }
            for r in &mut p.region {
                r.size_gib *= scale;
                if let Some(h) = &mut r.hot {
                    h.chunk_mib = (h.chunk_mib * scale).max(0.004);
                }
            }
        }
        for c in &mut s.cgroup {
            c.low_gib *= scale;
            c.high_gib *= scale;
        }
        for c in &mut s.config {
            for (k, v) in &mut c.published {
                // Sizes, page and event counts shrink with the machine; latencies, per-page
                // costs, CPU seconds and per-window counts (quota windows exceeded) do not.
                if !["latency", "qt_exceeds", "us_per", "_cpu_s"]
                    .iter()
                    .any(|x| k.contains(x))
                {
                    *v *= scale;
                }
            }
            for cg in &mut c.cgroup {
                cg.low_gib *= scale;
                cg.high_gib *= scale;
            }
            if let Some(n) = &mut c.numab {
                n.scale_rates(scale);
            }
            for d in c.damon.iter_mut().chain(c.kdamonds.iter_mut()) {
                d.scale_rates(scale);
            }
            if let Some(t) = &mut c.tierd {
                t.numab.scale_rates(scale);
                // MB/s knobs shrink with the machine; at least 1.
                #[allow(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    clippy::cast_precision_loss
                )]
                {
                    t.engine.promote_rate_limit_mbps =
                        ((t.engine.promote_rate_limit_mbps as f64 * scale).round() as u64).max(1);
                }
            }
        }
        s
    }
}

#[cfg(test)]
mod range_tests {
    use super::*;

    const A: &str = include_str!("../../../scenarios/a-pointer-chase.toml");

    fn refused(text: &str) -> String {
        match Scenario::parse(text, Path::new("s.toml")) {
            Ok(_) => panic!("accepted: {text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn every_scenario_in_the_tree_is_in_range() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                Scenario::load(&p).unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }

    /// Each out-of-range value (NaN, infinity, negative, zero, an overflowing ms value) is
    /// refused with one line naming its field.
    #[test]
    fn out_of_range_values_name_their_field() {
        let cases: &[(&str, &str, &str)] = &[
            ("duration_s = 240", "duration_s = nan", "duration_s"),
            ("duration_s = 240", "duration_s = inf", "duration_s"),
            ("duration_s = 240", "duration_s = -1", "duration_s"),
            ("step_ms = 10", "step_ms = 0", "step_ms"),
            (
                "step_ms = 10\nsample_ms = 1000",
                "step_ms = 10\nsample_ms = 18446744073709551",
                "sample_ms",
            ),
            ("capacity_gib = 256", "capacity_gib = nan", "capacity_gib"),
            ("\"1\" = 340", "\"1\" = -340", "machine.node[2].latency_ns"),
            ("bandwidth_gbps = 64", "bandwidth_gbps = 0", "bandwidth_gbps"),
            ("size_gib = 64", "size_gib = inf", "size_gib"),
            ("size_gib = 64,", "size_gib = 64, thp = nan,", "process[0].region[0].thp"),
            ("size_gib = 64,", "size_gib = 64, thp = 1.5,", "process[0].region[0].thp"),
            ("size_gib = 64,", "size_gib = 64, thp = -0.5,", "process[0].region[0].thp"),
            ("size_gib = 64,", "size_gib = 64, thp = \"sometimes\",", "process[0].region[0].thp"),
            (
                "size_gib = 64,",
                "size_gib = 64, huge = true, thp = 0.5,",
                "process[0].region[0].thp",
            ),
            ("size_gib = 64,", "size_gib = 64, sweep_s = 0,", "process[0].region[0].sweep_s"),
            ("size_gib = 64,", "size_gib = 64, sweep_s = nan,", "process[0].region[0].sweep_s"),
            (
                "[machine]",
                "[machine]\nreclaim = { model = \"lru\", scan_ns_per_page = -1 }",
                "machine.reclaim.scan_ns_per_page",
            ),
            ("chunk_mib = 64", "chunk_mib = nan", "process[0].region[0].hot"),
            ("fraction = 0.25", "fraction = nan", "process[0].region[0].hot"),
            ("share = 1.0", "share = nan", "process[0].access[0].share"),
            ("steady_fraction = 0.25", "steady_fraction = 0", "report.steady_fraction"),
            ("numab = { mode = 2 }", "numab = { mode = 2, scan_size_mb = 0 }", "scan_size_mb"),
            (
                "numab = { mode = 2 }",
                "numab = { mode = 2, promote_rate_limit_mbps = 0 }",
                "config[1].numab.promote_rate_limit_mbps",
            ),
            (
                "numab = { mode = 2 }",
                "numab = { mode = 2, fault_time_scale = nan }",
                "config[1].numab.fault_time_scale",
            ),
            (
                "numab = { mode = 2 }",
                "numab = { mode = 2, fault_time_scale = -1.0 }",
                "config[1].numab.fault_time_scale",
            ),
            (
                "numab = { mode = 2 }",
                "numab = { mode = 2, pte_time_scale = inf }",
                "config[1].numab.pte_time_scale",
            ),
            (
                "numab = { mode = 2 }",
                "numab = { mode = 2, migrate_time_scale = -3.0 }",
                "config[1].numab.migrate_time_scale",
            ),
            (
                "numab = { mode = 2 }",
                "numab = { mode = 2, scan_period_min_ms = 9223372036854775807 }",
                "scan_period_min_ms",
            ),
            ("sample_us = 5000,", "sample_us = 0,", "config[2].damon.aggr_us"),
            ("min_nr_regions = 10,", "min_nr_regions = 2,", "min_nr_regions"),
            (
                "min_nr_regions = 10,",
                "min_nr_regions = 10, intervals_goal = { access_bp = 400, aggrs = 0, \
                 min_sample_us = 5000, max_sample_us = 100000 },",
                "config[2].damon.intervals_goal",
            ),
            (
                "numab = { mode = 2 }",
                "numab = { mode = 2 }\nkdamonds = [{ sample_us = 5000 }]",
                "config[1].kdamonds",
            ),
            (
                "weight_nr_accesses_permil = 1000 }",
                "weight_nr_accesses_permil = 1000 }\nkdamonds = [{ sample_us = 0 }]",
                "config[2].kdamonds[0].aggr_us",
            ),
            (
                "min_nr_regions = 10,",
                "min_nr_regions = 10, quota_goals = [{ metric = \"node_mem_used_bp\", \
                 target_value = 0, nid = 0 }],",
                "config[2].damon.quota_goals",
            ),
            (
                "engine = { threshold = \"fixed\", freq_threshold = 1 }",
                "engine = { threshold = \"fixed\", freq_threshold = 1, promote_rate_limit_mbps = 0 }",
                "promote_rate_limit_mbps",
            ),
            (
                "sample_period = 10000, kernel_pghot",
                "sample_period = 10000, abit_interval_ms = 0, kernel_pghot",
                "abit_interval_ms",
            ),
            (
                "sample_period = 10000, kernel_pghot",
                "sample_period = 10000, damon = { read_interval_ms = 5 }, kernel_pghot",
                "config[3].tierd.damon.read_interval_ms",
            ),
            (
                "sample_period = 10000, kernel_pghot",
                "sample_period = 10000, damon = { min_relative_permille = 1001 }, kernel_pghot",
                "tierd.damon.min_relative_permille",
            ),
            (
                "sample_period = 10000, kernel_pghot",
                "sample_period = 10000, damon = { min_nr_regions = 2 }, kernel_pghot",
                "tierd.damon.min_nr_regions",
            ),
            (
                "sample_period = 10000, kernel_pghot",
                "sample_period = 10000, damon = { max_pages_per_pass = 0 }, kernel_pghot",
                "tierd.damon.max_pages_per_pass",
            ),
            (
                "sample_period = 10000, kernel_pghot",
                "sample_period = 10000, damon = { idle_min_sample_us = 1000 }, kernel_pghot",
                "tierd.damon.idle_min_sample_us",
            ),
            (
                "sample_period = 10000, kernel_pghot",
                "sample_period = 10000, damon = { idle_max_sample_us = 50000 }, kernel_pghot",
                "tierd.damon.idle_max_sample_us",
            ),
            (
                "sample_period = 10000, kernel_pghot",
                "sample_period = 10000, damon = { intervals_goal_bp = 10001 }, kernel_pghot",
                "tierd.damon.intervals_goal_bp",
            ),
            (
                "sample_period = 10000, kernel_pghot",
                "sample_period = 10000, damon = { intervals_goal_aggrs = 0 }, kernel_pghot",
                "tierd.damon.intervals_goal_aggrs",
            ),
            (
                "sample_period = 10000, kernel_pghot",
                "sample_period = 10000, damon = { min_sample_us = 200000 }, kernel_pghot",
                "tierd.damon.min_sample_us",
            ),
        ];
        for (from, to, key) in cases {
            assert!(A.contains(from), "{from:?} not in the scenario");
            let m = refused(&A.replacen(from, to, 1));
            assert!(m.contains(key), "{to}: {m}");
            assert!(!m.contains('\n'), "{m}");
        }
    }

    #[test]
    fn thp_takes_a_word_or_a_share() {
        let region = |thp: &str| {
            // Page by page: a THP region cannot sit beside A's shipped grain.
            let text = A.replacen("\ngrain = 8\n", "\n", 1).replacen(
                "size_gib = 64,",
                &format!("size_gib = 64, {thp}"),
                1,
            );
            let sc = Scenario::parse(&text, Path::new("s.toml")).unwrap_or_else(|e| panic!("{e}"));
            sc.process[0].region[0].clone()
        };
        assert_eq!(region("").thp_share(), 0.0);
        assert_eq!(region("huge = true,").thp_share(), 1.0);
        assert_eq!(region("thp = \"always\",").thp_share(), 1.0);
        assert_eq!(region("thp = \"never\",").thp_share(), 0.0);
        assert_eq!(region("thp = 0.25,").thp_share(), 0.25);
        assert_eq!(region("thp = 1,").thp_share(), 1.0);
        assert_eq!(region("huge = true, thp = \"always\",").thp_share(), 1.0);
        // Written back as it reads.
        for (thp, out) in [
            (Thp::ALWAYS, "\"always\""),
            (Thp::NEVER, "\"never\""),
            (Thp(0.5), "0.5"),
        ] {
            let sc = Scenario::parse(A, Path::new("s.toml"))
                .unwrap()
                .with_thp(thp);
            let text = toml::to_string(&sc).unwrap();
            assert!(text.contains(&format!("thp = {out}")), "{text}");
            let back = Scenario::parse(&text, Path::new("s.toml")).unwrap();
            assert_eq!(back.process[0].region[0].thp_share(), thp.0);
        }
    }

    #[test]
    fn events_and_cgroups_are_range_checked() {
        let ev = format!("{A}\n[[event]]\nat_s = nan\naction = \"pause\"\nprocess = \"chase\"\n");
        assert!(refused(&ev).contains("event[0].at_s"));
        let cg = format!("{A}\n[[cgroup]]\nname = \"t\"\nlow_gib = -1\n");
        assert!(refused(&cg).contains("cgroup"));
    }

    /// `machine.grain` is given at full scale: scaling divides it (to a power of two, at
    /// least 1), so seed C's 8 is 1 at 1/8 and below, where runs simulate every page as they
    /// did before grains.
    #[test]
    fn scaling_divides_the_grain() {
        let c = Scenario::find("three-node").unwrap();
        assert_eq!(c.machine.grain, 8);
        for (scale, grain) in [
            (1.0, 8),
            (0.5, 4),
            (0.3, 2),
            (0.25, 2),
            (0.125, 1),
            (0.01, 1),
        ] {
            assert_eq!(c.scaled(scale).machine.grain, grain, "scale {scale}");
        }
        assert_eq!(c.grain_problem(), None);
        // THP is its own coarse unit: `--thp always` takes the grain away, `never` keeps it.
        assert_eq!(c.with_thp(Thp::ALWAYS).machine.grain, 1);
        assert_eq!(c.with_thp(Thp::NEVER).machine.grain, 8);
        // A grain of 1 is not written back, so scenario files and results read as before.
        let b = Scenario::find("hint-vs-samples").unwrap();
        assert!(!toml::to_string(&b).unwrap().contains("grain"));
        assert!(toml::to_string(&c).unwrap().contains("grain = 8"));
    }

    /// A grain that is not a power of two up to 512, or beside THP, is refused in one line
    /// that names `machine.grain`. Every source is drawn at one page's rate per unit, so
    /// every row takes one.
    #[test]
    fn a_grain_the_scenario_cannot_take_is_refused() {
        let with = |g: &str| A.replacen("\ngrain = 8\n", &format!("\ngrain = {g}\n"), 1);
        assert_ne!(with("3"), A, "A ships with a grain line");
        for g in ["0", "3", "1024"] {
            let m = refused(&with(g));
            assert!(
                m.contains("machine.grain") && m.contains("power of two"),
                "{m}"
            );
            assert!(!m.contains('\n'), "{m}");
        }
        // Every row of seed A takes a grain: NUMA balancing, DAMON (D3), pghot fed by samples
        // (H5, H10), tierd with samples and an accessed-bit scan (T1).
        let a = Scenario::parse(&with("8"), Path::new("s.toml")).unwrap();
        assert_eq!(a.grain_problem(), None);
        // THP regions do not.
        let thp = a.with_thp(Thp::ALWAYS).with_grain(8);
        assert!(thp.grain_problem().is_some_and(|m| m.contains("THP")));
        // Every row of seed B takes one too, its IBS row (NUMA balancing fed by samples)
        // included, and so does a tierd row running the kernel's NUMA balancing fed by samples.
        const B: &str = include_str!("../../../scenarios/b-hint-vs-samples.toml");
        let b = B.replacen("[machine]", "[machine]\ngrain = 8", 1);
        let b = Scenario::parse(&b, Path::new("s.toml")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(b.machine.grain, 8);
        let mut t = Scenario::parse(A, Path::new("s.toml")).unwrap();
        t.config.retain(|c| c.id == "T1");
        t.config[0].tierd.as_mut().unwrap().kernel_numab = Some(crate::numab::NumabParams {
            source: crate::numab::NumabSource::Samples,
            ..crate::numab::NumabParams::default()
        });
        assert_eq!(t.with_grain(2).grain_problem(), None);
    }

    use proptest::prelude::*;

    proptest! {
        /// Every integer `machine.grain`: accepted as written exactly when it is a power of
        /// two up to 512, refused otherwise with one line naming its line.
        #[test]
        fn any_grain_parses_as_written_or_is_refused(g in prop_oneof![
            0u64..1100,
            any::<u64>(),
            (0u32..40).prop_map(|b| 1u64 << b),
        ]) {
            let c = include_str!("../../../scenarios/c-three-node.toml");
            let text = c.replacen("grain = 8", &format!("grain = {g}"), 1);
            let key = format!("\ngrain = {g}\n");
            prop_assert!(text.contains(&key));
            match Scenario::parse(&text, Path::new("s.toml")) {
                Ok(sc) => {
                    prop_assert!(g.is_power_of_two() && g <= 512, "{} accepted", g);
                    prop_assert_eq!(u64::from(sc.machine.grain), g);
                }
                Err(e) => {
                    let m = e.to_string();
                    prop_assert!(!(g.is_power_of_two() && g <= 512), "{}: {}", g, m);
                    // The line of `grain` (TOML itself refuses a number past i64 before
                    // a field is known), in one line.
                    let line = format!("s.toml:{}:", line_of(&text, "grain = "));
                    prop_assert!(m.contains(&line) && !m.contains('\n'), "{}", m);
                }
            }
        }
    }

    #[test]
    fn scaling_keeps_the_full_scale_thread_count_for_contention() {
        // Seed B's 32 threads per group become 2 at 1/16, but still contend as 32.
        let sc = Scenario::find("hint-vs-samples").unwrap();
        let t = sc.process[0].threads[0];
        assert_eq!((t.count, t.unscaled), (32, None));
        let small = sc.scaled(1.0 / 16.0);
        let t = small.process[0].threads[0];
        assert_eq!((t.count, t.unscaled), (2, Some(32)));
        // Scaling twice keeps the first original.
        let t = small.scaled(0.5).process[0].threads[0];
        assert_eq!((t.count, t.unscaled), (1, Some(32)));
    }

    /// A process's `op` (its operation: accesses, compute, io) parses with defaults, is
    /// written back, and each out-of-range field is refused naming it.
    #[test]
    fn an_operation_is_parsed_and_range_checked() {
        let with = |op: &str| A.replacen("[[process]]", &format!("[[process]]\n{op}"), 1);
        let sc = Scenario::parse(
            &with("op = { accesses = 4, io_ns = 6000 }"),
            Path::new("s.toml"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let op = sc.process[0].op.clone().expect("parsed");
        assert_eq!(
            (op.name.as_str(), op.accesses, op.compute_ns, op.io_ns),
            ("op", 4.0, 0.0, 6000.0)
        );
        let back = Scenario::parse(&toml::to_string(&sc).unwrap(), Path::new("s.toml")).unwrap();
        assert_eq!(back.process[0].op, Some(op));
        // A has no op: none is written, so its scenario serializes as before.
        let a = Scenario::parse(A, Path::new("s.toml")).unwrap();
        assert!(a.process.iter().all(|p| p.op.is_none()));
        assert!(!toml::to_string(&a).unwrap().contains("op ="));
        for (op, key) in [
            ("op = { accesses = 0.5 }", "process[0].op.accesses"),
            ("op = { accesses = nan }", "process[0].op.accesses"),
            (
                "op = { accesses = 2, compute_ns = -1 }",
                "process[0].op.compute_ns",
            ),
            ("op = { accesses = 2, io_ns = inf }", "process[0].op.io_ns"),
        ] {
            let m = refused(&with(op));
            assert!(m.contains(key), "{op}: {m}");
            assert!(!m.contains('\n'), "{m}");
        }
        // Unknown keys and a missing `accesses` are parse errors naming the field.
        assert!(refused(&with("op = { accesses = 2, cpu_ns = 1 }")).contains("cpu_ns"));
        assert!(refused(&with("op = { io_ns = 1 }")).contains("accesses"));
    }

    #[test]
    fn a_report_baseline_must_be_a_config() {
        let text = A.replacen("[report]", "[report]\nbaseline = \"nope\"", 1);
        let m = refused(&text);
        assert!(m.contains("report.baseline") && m.contains("nope"), "{m}");
        let first = Scenario::parse(A, Path::new("s.toml")).unwrap().config[0]
            .id
            .clone();
        let ok = A.replacen("[report]", &format!("[report]\nbaseline = \"{first}\""), 1);
        let sc = Scenario::parse(&ok, Path::new("s.toml")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sc.report.baseline, Some(first));
    }

    #[test]
    fn memcg_tiering_is_a_numab_knob_off_by_default() {
        let sc = Scenario::find("cgroup-fairness").unwrap();
        let knob = |id: &str| {
            sc.config
                .iter()
                .find(|c| c.id == id)
                .and_then(|c| c.numab.as_ref())
                .is_some_and(|n| n.memcg_tiering)
        };
        assert!(!knob("K-low"));
        assert!(knob("K-low-patched") && knob("K-lowhigh-patched"));
        // Written back only where set: other scenarios serialize as before.
        assert!(toml::to_string(&sc)
            .unwrap()
            .contains("memcg_tiering = true"));
        let a = Scenario::parse(A, Path::new("s.toml")).unwrap();
        assert!(!toml::to_string(&a).unwrap().contains("memcg_tiering"));
    }
}
