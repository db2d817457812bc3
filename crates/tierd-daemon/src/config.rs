//! The daemon's configuration file (`tierd run --config FILE`).
//!
//! TOML, every table refusing unknown keys. Every error names the file, the line and the key,
//! and says why, e.g. `/etc/tierd/tierd.toml:7:19: engine.freq_threshold: invalid type: string
//! "two", expected u8` or `/etc/tierd/tierd.toml:3: scope: nothing in scope: give pids,
//! cgroups, or all = true`. `deploy/tierd.toml` is the annotated example.
//!
//! ```toml
//! [scope]                 # what may be moved: pids, cgroups (v2 paths), or all
//! pids = [1234]
//! [sources]
//! enabled = ["damon"]     # damon | idle | perf
//! [sources.damon]
//! sample_us = 5000
//! [engine]                # tierd_engine::EngineConfig: mode, threshold, window, rate limit ...
//! mode = "default"
//! promote_rate_limit_mbps = 256
//! [daemon]
//! metrics_listen = "127.0.0.1:9464"
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tierd_engine::config::ConfigError as EngineConfigError;
use tierd_engine::sources::{SourceKind, SourceMask};
use tierd_engine::EngineConfig;
pub use tierd_linux::source::folio::HugetlbPolicy;

/// What is wrong with a configuration file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Malformed TOML, an unknown key, or a value of the wrong type.
    #[error("{path}:{line}:{column}: {key}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// Dotted key (`-` when the parser could not tell).
        key: String,
        /// What is wrong.
        message: String,
    },
    /// Well-formed, but it does not make sense.
    #[error("{path}:{line}: {key}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line where the key is set (0 when it is not set: a missing key).
        line: usize,
        /// Dotted key.
        key: String,
        /// Why.
        reason: String,
    },
}

/// The processes tierd may move pages of.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScopeConfig {
    /// Process ids.
    pub pids: Vec<u32>,
    /// cgroup v2 paths relative to the cgroup mount (`/workload.slice`): their processes and
    /// those of their descendants.
    pub cgroups: Vec<String>,
    /// Every user process (kernel threads and tierd itself excepted).
    pub all: bool,
}

/// A hotness source of the Linux backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceName {
    /// DAMON virtual-address monitoring through `/sys/kernel/mm/damon/admin`.
    Damon,
    /// Idle page tracking (`/sys/kernel/mm/page_idle/bitmap`).
    Idle,
    /// Hardware sampling of memory accesses (AMD IBS, Intel PEBS, ARM SPE) through perf.
    Perf,
}

impl SourceName {
    /// The engine's kind of observation this source produces: DAMON and idle tracking read
    /// accessed bits; perf delivers hardware samples.
    #[must_use]
    pub fn kind(self) -> SourceKind {
        match self {
            SourceName::Damon | SourceName::Idle => SourceKind::AccessedBitScan,
            SourceName::Perf => SourceKind::HwSample,
        }
    }

    /// The name used in the file and in messages.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            SourceName::Damon => "damon",
            SourceName::Idle => "idle",
            SourceName::Perf => "perf",
        }
    }
}

/// DAMON source settings (Documentation/admin-guide/mm/damon/usage.rst).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DamonSourceConfig {
    /// `monitoring_attrs/intervals/sample_us`.
    pub sample_us: u64,
    /// `monitoring_attrs/intervals/aggr_us`.
    pub aggr_us: u64,
    /// `monitoring_attrs/intervals/update_us` (how often vaddr re-reads the targets' VMAs).
    pub update_us: u64,
    /// `monitoring_attrs/nr_regions/min` (the kernel requires at least 3).
    pub min_nr_regions: u64,
    /// `monitoring_attrs/nr_regions/max`.
    pub max_nr_regions: u64,
    /// Keep DAMON's regions at most about this size, KiB: `min_nr_regions` is raised to the
    /// targets' mapped size / this (at most 1000 regions), `max_nr_regions` to twice that.
    /// 0 leaves the two as configured.
    pub max_region_kib: u64,
    /// The same cap while the access check is off (no `/sys/kernel/mm/page_idle/bitmap`,
    /// `daemon.verify_window_ms = 0`, a dry run): nothing then refuses the cold pages of a
    /// region DAMON saw hot, so a region is all a mistake can cost, and regions are kept
    /// smaller. 0: `max_region_kib` either way (and `max_region_kib = 0` turns fitting off
    /// either way).
    pub unchecked_max_region_kib: u64,
    /// Regions whose `nr_accesses` reach this feed observations (an absolute floor; see
    /// `min_relative_permille`).
    pub min_nr_accesses: u32,
    /// Regions must also reach this share of the hottest region's `nr_accesses`, per mille:
    /// a floor relative to what this host and these intervals make hot regions count.
    pub min_relative_permille: u32,
    /// At most this many page observations per read-back, so one huge hot region cannot
    /// flood the engine.
    pub max_pages_per_pass: u64,
    /// How often tierd reads the regions back (at least once per aggregation). Every read
    /// costs a location query of the pages of every accessed region; with the engine's
    /// default 3 s window, two reads a second still see a page twice within a window.
    pub read_interval_ms: u64,
    /// Tune the intervals at run time toward this share of possible access events observed,
    /// basis points (DAMON's `intervals_goal/access_bp`; the kernel does it from 6.15, tierd
    /// does it from userspace before); 0 keeps `sample_us`/`aggr_us` fixed.
    pub intervals_goal_bp: u64,
    /// Aggregation intervals between two adjustments (`intervals_goal/aggrs`).
    pub intervals_goal_aggrs: u64,
    /// The tuned sampling interval's lower bound, µs (`intervals_goal/min_sample_us`).
    pub min_sample_us: u64,
    /// The tuned sampling interval's upper bound, µs (`intervals_goal/max_sample_us`).
    pub max_sample_us: u64,
    /// While the daemon is idle (`daemon.idle_after_ms`: nothing to promote or demote for a
    /// while), the sampling interval's range becomes `idle_min_sample_us..=idle_max_sample_us`
    /// (the aggregation interval stays its multiple): the kdamond samples and tierd reads far
    /// less often until a region with pages to move shows up, when the configured range comes
    /// back at once. 0 never backs off.
    pub idle_min_sample_us: u64,
    /// The idle range's upper bound, µs.
    pub idle_max_sample_us: u64,
    /// Read the regions from DAMON's `damon_aggregated` tracepoint through a tracefs
    /// instance of tierd's (`/sys/kernel/tracing/instances/tierd`): one read of a pipe per
    /// aggregation instead of four sysfs files per region. Without tracefs or the
    /// tracepoint, and for any read where the trace gave no whole aggregation in time, the
    /// regions are read through sysfs as with `false`.
    pub tracepoint: bool,
}

impl Default for DamonSourceConfig {
    fn default() -> Self {
        // DAMON's own defaults (mm/damon/core.c damon_new_ctx) for the intervals, with more
        // regions than its default 1000 so that a hot subset can be told from its
        // neighbourhood.
        DamonSourceConfig {
            sample_us: 5_000,
            aggr_us: 100_000,
            update_us: 1_000_000,
            min_nr_regions: 10,
            max_nr_regions: 10_000,
            // A few MiB: a server's hot items are a few MiB among hundreds (docs/lab.md,
            // memcached), and DAMON merges regions up to mapped size / min_nr_regions.
            max_region_kib: 2048,
            // A quarter of it: the lab's memcached without idle page tracking once moved
            // the 2 MiB regions of cold items beside its 4.8 MiB hot set with it (+81 %
            // over-promotion; docs/lab.md, "Without the access check, finer regions").
            unchecked_max_region_kib: 512,
            min_nr_accesses: 1,
            max_pages_per_pass: 262_144,
            read_interval_ms: 500,
            min_relative_permille: 250,
            // DAMON's recommended goal (Documentation/mm/damon/design.rst: 4 % of possible
            // access events, adjusted every 3 aggregations; damo's `4% 3 5ms 10s`), with a
            // 100 ms ceiling instead of 10 s: tierd promotes, and a 2 s aggregation is as
            // slow as it can react and still place a hot set within seconds.
            intervals_goal_bp: 400,
            intervals_goal_aggrs: 3,
            min_sample_us: 5_000,
            max_sample_us: 100_000,
            // Twenty times the active floor: the kdamond's cost is its regions times its
            // sampling rate, and a settled hot set needs no 5 ms resolution. A new hot region
            // shows within one idle aggregation (2 s at 100 ms), then the active range is back.
            idle_min_sample_us: 100_000,
            idle_max_sample_us: 1_000_000,
            tracepoint: true,
        }
    }
}

/// Idle page tracking settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IdleSourceConfig {
    /// How often the scope's pages are read back and marked idle again.
    pub interval_ms: u64,
}

impl Default for IdleSourceConfig {
    fn default() -> Self {
        IdleSourceConfig { interval_ms: 5_000 }
    }
}

/// Hardware sampling settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PerfSourceConfig {
    /// One sample per this many eligible operations (IBS op count, PEBS period).
    pub period: u64,
    /// Keep only samples that missed the last-level cache (IBS `l3missonly`): the others say
    /// nothing about memory placement.
    pub l3_miss_only: bool,
}

impl Default for PerfSourceConfig {
    fn default() -> Self {
        PerfSourceConfig {
            period: 10_000,
            l3_miss_only: true,
        }
    }
}

/// The `[sources]` table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SourcesConfig {
    /// Sources to start, in order of preference.
    pub enabled: Vec<SourceName>,
    /// DAMON settings.
    pub damon: DamonSourceConfig,
    /// Idle page tracking settings.
    pub idle: IdleSourceConfig,
    /// perf sampling settings.
    pub perf: PerfSourceConfig,
}

impl Default for SourcesConfig {
    fn default() -> Self {
        SourcesConfig {
            enabled: vec![SourceName::Damon],
            damon: DamonSourceConfig::default(),
            idle: IdleSourceConfig::default(),
            perf: PerfSourceConfig::default(),
        }
    }
}

/// The `[daemon]` table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DaemonSection {
    /// Where the Prometheus text endpoint (`/metrics`) and the JSON status (`/status`) listen.
    pub metrics_listen: SocketAddr,
    /// Allow a non-loopback `metrics_listen` (the endpoint has no authentication).
    pub allow_public_metrics: bool,
    /// How often the scope, owners and mempolicies (`numa_maps`) are re-read.
    pub refresh_ms: u64,
    /// `/healthz` answers 503 when the tiering loop has not completed a pass for this long.
    pub liveness_timeout_s: u64,
    /// Processes with their own `tierd_process_*` series (the largest by pages); the rest are
    /// summed into one `pid="other"` series per node.
    pub metrics_max_processes: u32,
    /// A process's `numa_maps` (which walks its page tables) is re-read when its
    /// `/proc/PID/maps` changed, and otherwise at most this often (for the placement that
    /// `/status` shows).
    pub numa_maps_max_age_ms: u64,
    /// How long a page found on a fast node is trusted to stay there before the sources'
    /// reports of it are located again (pagemap, kpageflags, node); 0 locates every reported
    /// page on every read. A settled hot set is then located once per period instead of on
    /// every read of the source, and observed with its weight scaled by the reads skipped
    /// (tierd_linux::source::placement). The trust ends earlier when tierd moves the pages,
    /// when the process's mappings change, and when the kernel migrates pages itself
    /// (`pgmigrate_success` grew by more than tierd's own moves). Keep it below
    /// `engine.pingpong_window_ms`: a fast page's recency is refreshed once per period, and
    /// the demoter only makes room with pages idle for longer than that window.
    pub placement_reverify_ms: u64,
    /// After this long with nothing to move (no page of a slow tier observed, no migration
    /// planned), the daemon is idle: its sources sample less often
    /// (`sources.damon.idle_min_sample_us`) until a page to move shows up. 0: never idle.
    pub idle_after_ms: u64,
    /// Before a promotion of a page DAMON reported (with its whole region), ask the page's
    /// own accessed bit through idle page tracking: mark it idle when first planned, move it
    /// when planned again at least this long later only if it was touched meanwhile
    /// (tierd_linux::source::verify). 0 moves what DAMON's regions say. Off when the `idle`
    /// source runs (they would share the bitmap) or the bitmap is absent.
    pub verify_window_ms: u64,
    /// Where tierd keeps what must survive an unclean exit: the marker naming the kdamond it
    /// configured, so that a restart takes it over instead of refusing it as someone else's.
    pub state_dir: PathBuf,
    /// hugetlb pages (hugetlbfs, `MAP_HUGETLB`, SysV `SHM_HUGETLB`): `"leave"` (the default)
    /// never observes nor moves them; `"move"` moves one as a unit, and only into a free huge
    /// page of its size in the target node's pool.
    ///
    /// Why "leave": a hugetlb page migrates only into another hugetlb page. mm/hugetlb.c
    /// `alloc_hugetlb_folio_nodemask()` (the migration target allocator, reached from
    /// mm/migrate.c `alloc_migration_target()`) first takes a free page from the target
    /// node's pool (`dequeue_hugetlb_folio_nodemask()`), and otherwise asks the buddy
    /// allocator for a fresh one (`alloc_migrate_hugetlb_folio()`), which never happens for
    /// gigantic (1 GiB) pages (`hstate_is_gigantic()` returns NULL) and, when it does, makes
    /// the new page a pool page of the target node while the old one goes back to the buddy
    /// allocator (`move_hugetlb_state()` swaps the temporary flag): the page moves the pool
    /// with it. Operators size hugetlb pools per node on purpose (`nodeN/hugepages/.../
    /// nr_hugepages`, for a database or VMs pinned to a node), so tierd does not touch them
    /// unless asked, and when asked (`"move"`) it uses only free pages of the target pool
    /// (`free_hugepages`), never the fresh-page path that would resize the pools.
    #[serde(serialize_with = "serialize_hugetlb")]
    pub hugetlb: HugetlbPolicy,
}

/// [`HugetlbPolicy`] as the file spells it (its Deserialize lives with it; its Serialize is
/// here, for the daemon's configuration dump).
fn serialize_hugetlb<S: serde::Serializer>(p: &HugetlbPolicy, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(hugetlb_name(*p))
}

/// The file's name of a [`HugetlbPolicy`] (`leave`, `move`).
#[must_use]
pub fn hugetlb_name(p: HugetlbPolicy) -> &'static str {
    match p {
        HugetlbPolicy::Leave => "leave",
        HugetlbPolicy::Move => "move",
    }
}

/// `daemon.liveness_timeout_s` by default: a pass takes milliseconds and starts every
/// `engine.interval_ms` (at most 1 s), a refresh reading a large process's `numa_maps` takes
/// seconds; a loop that has not completed a pass for a minute is stuck, not slow. With the
/// DaemonSet's probe (every 20 s, 3 failures) a stuck daemon is restarted within two minutes.
pub const DEFAULT_LIVENESS_TIMEOUT_S: u64 = 60;

impl DaemonSection {
    /// The consent rule for the metrics address, the same for the file's `metrics_listen`
    /// and for `tierd run --metrics ADDR`: the endpoint has no authentication, so only a
    /// loopback address is accepted unless the file sets `allow_public_metrics = true`.
    ///
    /// # Errors
    /// The reason, for a non-loopback address without consent.
    pub fn check_metrics_listen(&self) -> Result<(), String> {
        if self.metrics_listen.ip().is_loopback() || self.allow_public_metrics {
            return Ok(());
        }
        Err(format!(
            "{} is not a loopback address; the endpoint has no authentication \
             (set allow_public_metrics = true to expose it)",
            self.metrics_listen
        ))
    }
}

impl Default for DaemonSection {
    fn default() -> Self {
        DaemonSection {
            metrics_listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
            allow_public_metrics: false,
            refresh_ms: 1_000,
            liveness_timeout_s: DEFAULT_LIVENESS_TIMEOUT_S,
            metrics_max_processes: 20,
            numa_maps_max_age_ms: 10_000,
            placement_reverify_ms: 20_000,
            idle_after_ms: 5_000,
            verify_window_ms: 1_000,
            state_dir: PathBuf::from("/run/tierd"),
            hugetlb: HugetlbPolicy::Leave,
        }
    }
}

/// Where `/proc` and `/sys` are (tests and containers point them elsewhere).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SystemRoots {
    /// The proc mount.
    pub proc_root: PathBuf,
    /// The sysfs mount.
    pub sys_root: PathBuf,
    /// The cgroup v2 mount.
    pub cgroup_root: PathBuf,
}

impl Default for SystemRoots {
    fn default() -> Self {
        SystemRoots {
            proc_root: PathBuf::from(tierd_linux::DEFAULT_PROC_ROOT),
            sys_root: PathBuf::from(tierd_linux::DEFAULT_SYS_ROOT),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
        }
    }
}

/// `[topology]`: the memory tiers tierd uses when the kernel's are wrong or flat.
///
/// Kernels 6.1-6.9 put a CPU-less node present at boot in the DRAM tier (its adistance is
/// only set from HMAT by 6.10's memory-tiers.c), and firmware often gets HMAT wrong, so a
/// machine with a slow node can show one tier. tierd moves pages with `move_pages(2)`, which
/// does not look at tiers, so it can tier such a machine if told which node is which. Either
/// `fast` and `slow` (two tiers) or `tiers` (fastest first, two or more), not both; every
/// memory node must be named once. Empty: the kernel's tiers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TopologyOverride {
    /// The fast (top-tier) nodes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fast: Vec<u16>,
    /// The slow nodes (the tier below `fast`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slow: Vec<u16>,
    /// Every tier, fastest first: `[[0], [1], [2]]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<Vec<u16>>,
}

impl TopologyOverride {
    /// The tiers asked for, fastest first; empty when there is no override.
    #[must_use]
    pub fn tiers(&self) -> Vec<Vec<u16>> {
        if !self.tiers.is_empty() {
            self.tiers.clone()
        } else if self.fast.is_empty() && self.slow.is_empty() {
            Vec::new()
        } else {
            vec![self.fast.clone(), self.slow.clone()]
        }
    }

    /// Whether the kernel's tiers are overridden.
    #[must_use]
    pub fn is_set(&self) -> bool {
        !self.tiers().is_empty()
    }

    /// What is wrong with the override on its own (the nodes it names are checked against the
    /// machine at start): `(key, reason)`.
    fn problem(&self) -> Option<(&'static str, String)> {
        let pair = !self.fast.is_empty() || !self.slow.is_empty();
        if pair && !self.tiers.is_empty() {
            return Some((
                "topology.tiers",
                "give either fast and slow, or tiers, not both".into(),
            ));
        }
        if pair && (self.fast.is_empty() || self.slow.is_empty()) {
            let key = if self.fast.is_empty() {
                "topology.fast"
            } else {
                "topology.slow"
            };
            return Some((key, "fast and slow go together: name both".into()));
        }
        let tiers = self.tiers();
        if tiers.is_empty() {
            return None;
        }
        let key = if pair {
            "topology.fast"
        } else {
            "topology.tiers"
        };
        if tiers.len() < 2 {
            return Some((
                key,
                "one tier has nothing to tier: name at least two".into(),
            ));
        }
        if tiers.len() > MAX_OVERRIDE_TIERS {
            return Some((
                key,
                format!("{} tiers: at most {MAX_OVERRIDE_TIERS}", tiers.len()),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, t) in tiers.iter().enumerate() {
            if t.is_empty() {
                return Some((key, format!("tier {i} names no node")));
            }
            for &n in t {
                if usize::from(n) >= tierd_engine::types::MAX_NODES {
                    return Some((
                        key,
                        format!(
                            "node {n} is beyond the {} nodes tierd supports",
                            tierd_engine::types::MAX_NODES
                        ),
                    ));
                }
                if !seen.insert(n) {
                    return Some((key, format!("node {n} is named twice")));
                }
            }
        }
        None
    }
}

/// The most tiers `[topology]` may name: tier k gets the adistance of memory_tier(4 + k), and
/// the kernel's own tiers stop well before memory_tier(4 + 16).
pub const MAX_OVERRIDE_TIERS: usize = 16;

/// A whole daemon configuration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DaemonConfig {
    /// What may be moved.
    pub scope: ScopeConfig,
    /// Where hotness comes from.
    pub sources: SourcesConfig,
    /// The engine's settings; `sources` there is derived from `[sources]`.
    pub engine: EngineConfig,
    /// Endpoint and refresh.
    pub daemon: DaemonSection,
    /// Filesystem roots.
    pub system: SystemRoots,
    /// The memory tiers, when the kernel's are to be overridden.
    pub topology: TopologyOverride,
}

/// The line where `key` (the last part of a dotted key) is set inside `[table]`, or 0.
fn line_of_key(text: &str, dotted: &str) -> usize {
    let (table, key) = dotted.rsplit_once('.').unwrap_or(("", dotted));
    let mut current = String::new();
    for (i, raw) in text.lines().enumerate() {
        let l = raw.trim();
        if let Some(name) = l.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            current = name.trim_matches(['[', ']']).trim().to_string();
            if current == dotted {
                return i + 1;
            }
            continue;
        }
        let set_here = l
            .split_once('=')
            .is_some_and(|(k, _)| k.trim() == key || k.trim() == dotted);
        if set_here && (current == table || table.is_empty() || dotted.starts_with(&current)) {
            return i + 1;
        }
    }
    0
}

impl DaemonConfig {
    /// Parses configuration text; `path` names it in errors.
    ///
    /// # Errors
    /// [`ConfigFileError::Parse`] for TOML and type errors, [`ConfigFileError::Invalid`] for
    /// values that do not make sense together.
    pub fn parse(text: &str, path: &Path) -> Result<DaemonConfig, ConfigFileError> {
        let cfg: DaemonConfig = tierd_toml::from_str(text).map_err(|p| ConfigFileError::Parse {
            path: path.to_path_buf(),
            line: p.line,
            column: p.column,
            key: p.key,
            message: p.message,
        })?;
        cfg.validate(text, path)?;
        Ok(cfg)
    }

    /// Reads and parses a configuration file.
    ///
    /// # Errors
    /// As [`DaemonConfig::parse`], or [`ConfigFileError::Read`].
    pub fn load(path: &Path) -> Result<DaemonConfig, ConfigFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        DaemonConfig::parse(&text, path)
    }

    /// The engine configuration with its source mask taken from `[sources]`.
    #[must_use]
    pub fn engine_config(&self) -> EngineConfig {
        let kinds: Vec<SourceKind> = self.sources.enabled.iter().map(|s| s.kind()).collect();
        EngineConfig {
            sources: SourceMask::of(&kinds),
            ..self.engine.clone()
        }
    }

    fn validate(&self, text: &str, path: &Path) -> Result<(), ConfigFileError> {
        self.validate_scope(text, path)?;
        self.validate_sources(text, path)?;
        self.validate_daemon(text, path)
    }

    /// `[topology]` and `[scope]`: what is tiered and for whom.
    fn validate_scope(&self, text: &str, path: &Path) -> Result<(), ConfigFileError> {
        let invalid = |key: &str, reason: String| ConfigFileError::Invalid {
            path: path.to_path_buf(),
            line: line_of_key(text, key),
            key: key.to_string(),
            reason,
        };
        if let Some((key, reason)) = self.topology.problem() {
            return Err(invalid(key, reason));
        }
        let s = &self.scope;
        if s.pids.is_empty() && s.cgroups.is_empty() && !s.all {
            return Err(invalid(
                "scope",
                "nothing in scope: give pids, cgroups, or all = true".into(),
            ));
        }
        if s.all && (!s.pids.is_empty() || !s.cgroups.is_empty()) {
            return Err(invalid(
                "scope.all",
                "all = true already covers every process: drop pids and cgroups".into(),
            ));
        }
        if s.pids.contains(&0) {
            return Err(invalid("scope.pids", "0 is not a process id".into()));
        }
        // PID_MAX_LIMIT (include/linux/threads.h): 4 Mi on 64-bit, the most pid_max can be.
        if let Some(p) = s.pids.iter().find(|&&p| p > 4 * 1024 * 1024) {
            return Err(invalid(
                "scope.pids",
                format!("{p} is above the kernel's largest pid (4194304)"),
            ));
        }
        for cg in &s.cgroups {
            if !cg.starts_with('/') || cg.split('/').any(|c| c == "..") {
                return Err(invalid(
                    "scope.cgroups",
                    format!(
                        "{cg:?} must be an absolute path under the cgroup mount, without \"..\""
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `[sources]` and the engine's configuration as the daemon runs it.
    fn validate_sources(&self, text: &str, path: &Path) -> Result<(), ConfigFileError> {
        let invalid = |key: &str, reason: String| ConfigFileError::Invalid {
            path: path.to_path_buf(),
            line: line_of_key(text, key),
            key: key.to_string(),
            reason,
        };
        let src = &self.sources;
        if src.enabled.is_empty() {
            return Err(invalid(
                "sources.enabled",
                "no source enabled: tierd would never see an access (use damon, idle or perf)"
                    .into(),
            ));
        }
        let mut seen = src.enabled.clone();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != src.enabled.len() {
            return Err(invalid(
                "sources.enabled",
                "a source is listed twice".into(),
            ));
        }
        let d = src.damon;
        if d.sample_us == 0 || d.aggr_us < d.sample_us {
            return Err(invalid(
                "sources.damon.aggr_us",
                format!(
                    "aggr_us ({}) must be at least sample_us ({}), and sample_us above 0",
                    d.aggr_us, d.sample_us
                ),
            ));
        }
        if d.update_us < d.aggr_us {
            return Err(invalid(
                "sources.damon.update_us",
                format!(
                    "update_us ({}) must be at least aggr_us ({})",
                    d.update_us, d.aggr_us
                ),
            ));
        }
        // An hour at most: longer intervals monitor nothing a promoter can use, and every µs
        // value then converts to ns (x 1000) without overflow.
        for (key, v) in [
            ("sources.damon.update_us", d.update_us),
            ("sources.damon.max_sample_us", d.max_sample_us),
        ] {
            if v > 3_600_000_000 {
                return Err(invalid(key, format!("{v} is above 3600000000 (an hour)")));
            }
        }
        // mm/damon/core.c damon_set_attrs(): min_nr_regions < 3 or min > max is -EINVAL.
        if d.min_nr_regions < 3 || d.max_nr_regions < d.min_nr_regions {
            return Err(invalid(
                "sources.damon.min_nr_regions",
                format!(
                    "need 3 <= min_nr_regions ({}) <= max_nr_regions ({}), as the kernel does",
                    d.min_nr_regions, d.max_nr_regions
                ),
            ));
        }
        for (key, kib, zero) in [
            (
                "sources.damon.max_region_kib",
                d.max_region_kib,
                "0 turns fitting off",
            ),
            (
                "sources.damon.unchecked_max_region_kib",
                d.unchecked_max_region_kib,
                "0 keeps max_region_kib",
            ),
        ] {
            if kib != 0 && kib < 4 {
                return Err(invalid(
                    key,
                    format!("{kib} is below one page (4 KiB); {zero}"),
                ));
            }
            if kib > 1 << 40 {
                return Err(invalid(key, format!("{kib} is above 2^40 KiB")));
            }
        }
        let max_acc = d.aggr_us / d.sample_us;
        if u64::from(d.min_nr_accesses) > max_acc {
            return Err(invalid(
                "sources.damon.min_nr_accesses",
                format!(
                    "{} can never be reached: a region is checked at most aggr_us / sample_us = \
                     {max_acc} times per aggregation",
                    d.min_nr_accesses
                ),
            ));
        }
        if d.min_relative_permille > 1000 {
            return Err(invalid(
                "sources.damon.min_relative_permille",
                format!("{} is above 1000", d.min_relative_permille),
            ));
        }
        if d.intervals_goal_bp > 10_000 {
            return Err(invalid(
                "sources.damon.intervals_goal_bp",
                format!("{} is above 10000 (100 %)", d.intervals_goal_bp),
            ));
        }
        if d.intervals_goal_bp > 0
            && (d.min_sample_us == 0
                || d.max_sample_us < d.min_sample_us
                || d.intervals_goal_aggrs == 0)
        {
            return Err(invalid(
                "sources.damon.min_sample_us",
                format!(
                    "need 0 < min_sample_us ({}) <= max_sample_us ({}) and intervals_goal_aggrs > 0",
                    d.min_sample_us, d.max_sample_us
                ),
            ));
        }
        if d.idle_min_sample_us > 0
            && (d.idle_max_sample_us < d.idle_min_sample_us || d.idle_max_sample_us > 3_600_000_000)
        {
            return Err(invalid(
                "sources.damon.idle_max_sample_us",
                format!(
                    "need idle_min_sample_us ({}) <= idle_max_sample_us ({}) <= 3600000000",
                    d.idle_min_sample_us, d.idle_max_sample_us
                ),
            ));
        }
        if !(10..=60_000).contains(&d.read_interval_ms) {
            return Err(invalid(
                "sources.damon.read_interval_ms",
                format!("{} is outside 10..=60000", d.read_interval_ms),
            ));
        }
        if d.max_pages_per_pass == 0 {
            return Err(invalid(
                "sources.damon.max_pages_per_pass",
                "must be above 0".into(),
            ));
        }
        if !(100..=3_600_000).contains(&src.idle.interval_ms) {
            return Err(invalid(
                "sources.idle.interval_ms",
                format!("{} is outside 100..=3600000", src.idle.interval_ms),
            ));
        }
        // IBS op counts are 16-op granular with a 27-bit maximum (arch/x86/events/amd/ibs.c).
        if !(1_000..=(1 << 27)).contains(&src.perf.period) {
            return Err(invalid(
                "sources.perf.period",
                format!("{} is outside 1000..=134217728", src.perf.period),
            ));
        }
        if text_sets_key(text, "engine", "sources") {
            return Err(invalid(
                "engine.sources",
                "set by [sources] enabled = [...]; remove it here".into(),
            ));
        }
        // The engine's configuration as the daemon runs it: its sources from [sources].
        self.engine_config().validate().map_err(|e| {
            let key = match &e {
                EngineConfigError::OutOfRange { key, .. } => format!("engine.{key}"),
                EngineConfigError::Watermarks { .. } => "engine.demotion".to_string(),
                EngineConfigError::TargetNotToptier(_) => "engine.target_nid".to_string(),
                EngineConfigError::IdleDemotionBlind => "engine.demotion.idle_after_ms".to_string(),
            };
            invalid(&key, e.to_string())
        })?;
        Ok(())
    }

    /// `[daemon]`: endpoints, periods and paths.
    fn validate_daemon(&self, text: &str, path: &Path) -> Result<(), ConfigFileError> {
        let invalid = |key: &str, reason: String| ConfigFileError::Invalid {
            path: path.to_path_buf(),
            line: line_of_key(text, key),
            key: key.to_string(),
            reason,
        };
        let daemon = &self.daemon;
        if let Err(reason) = daemon.check_metrics_listen() {
            return Err(invalid("daemon.metrics_listen", reason));
        }
        if !(100..=600_000).contains(&daemon.refresh_ms) {
            return Err(invalid(
                "daemon.refresh_ms",
                format!("{} is outside 100..=600000", daemon.refresh_ms),
            ));
        }
        // Below 5 s one slow refresh would fail the probe; above a day it is no probe.
        if !(5..=86_400).contains(&daemon.liveness_timeout_s) {
            return Err(invalid(
                "daemon.liveness_timeout_s",
                format!("{} is outside 5..=86400", daemon.liveness_timeout_s),
            ));
        }
        if !(daemon.refresh_ms..=3_600_000).contains(&daemon.numa_maps_max_age_ms) {
            return Err(invalid(
                "daemon.numa_maps_max_age_ms",
                format!(
                    "{} is outside refresh_ms ({})..=3600000",
                    daemon.numa_maps_max_age_ms, daemon.refresh_ms
                ),
            ));
        }
        if daemon.idle_after_ms > 3_600_000 {
            return Err(invalid(
                "daemon.idle_after_ms",
                format!("{} is outside 0..=3600000", daemon.idle_after_ms),
            ));
        }
        // A cached fast page's recency is refreshed once per period; the demoter makes room
        // only with pages idle for longer than the ping-pong window, so a period at least that
        // long would let it take hot pages for idle ones.
        let window = self.engine.pingpong_window_ms;
        if daemon.placement_reverify_ms > 3_600_000
            || (window > 0 && daemon.placement_reverify_ms >= window)
        {
            return Err(invalid(
                "daemon.placement_reverify_ms",
                format!(
                    "{} is outside 0..engine.pingpong_window_ms ({window}) and 0..=3600000",
                    daemon.placement_reverify_ms
                ),
            ));
        }
        // The same holds for idle demotion, with room to spare: a hot fast page in the cache
        // is observed once per period, so an idle age within two periods could take it for
        // an idle one.
        let idle = self.engine.demotion.idle_after_ms;
        if idle > 0 && daemon.placement_reverify_ms.saturating_mul(2) > idle {
            return Err(invalid(
                "engine.demotion.idle_after_ms",
                format!(
                    "{idle} is below twice daemon.placement_reverify_ms ({}): a hot page the \
                     placement cache holds is only observed once per reverify period",
                    daemon.placement_reverify_ms
                ),
            ));
        }
        if daemon.verify_window_ms > 600_000 {
            return Err(invalid(
                "daemon.verify_window_ms",
                format!("{} is outside 0..=600000", daemon.verify_window_ms),
            ));
        }
        if !daemon.state_dir.is_absolute() {
            return Err(invalid(
                "daemon.state_dir",
                format!("{} is not an absolute path", daemon.state_dir.display()),
            ));
        }
        if daemon.metrics_max_processes > 10_000 {
            return Err(invalid(
                "daemon.metrics_max_processes",
                format!(
                    "{} is above 10000 (each process is a series per node on every scrape)",
                    daemon.metrics_max_processes
                ),
            ));
        }
        Ok(())
    }
}

/// Whether `key` is set inside `[table]` (the typed config cannot tell a default from a
/// value the user wrote).
fn text_sets_key(text: &str, table: &str, key: &str) -> bool {
    let Ok(value) = text.parse::<toml::Table>() else {
        return false;
    };
    value
        .get(table)
        .and_then(toml::Value::as_table)
        .is_some_and(|t| t.contains_key(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<DaemonConfig, ConfigFileError> {
        DaemonConfig::parse(text, Path::new("t.toml"))
    }

    fn err(text: &str) -> String {
        match parse(text) {
            Ok(c) => panic!("accepted: {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn minimal_file_gets_defaults() {
        let c = parse("[scope]\npids = [42]\n").expect("valid");
        assert_eq!(c.scope.pids, vec![42]);
        assert_eq!(c.sources.enabled, vec![SourceName::Damon]);
        assert!(c.daemon.metrics_listen.ip().is_loopback());
        let e = c.engine_config();
        assert_eq!(e.sources, SourceMask::of(&[SourceKind::AccessedBitScan]));
        assert_eq!(e.freq_threshold, EngineConfig::default().freq_threshold);
    }

    /// Idle demotion's age must exceed two placement-cache periods (20 s by default): a hot
    /// fast page the cache holds is observed only once per period.
    #[test]
    fn idle_demotion_age_is_checked_against_the_placement_cache() {
        let e = err("[scope]\npids = [1]\n[engine.demotion]\nidle_after_ms = 30000\n");
        assert!(
            e.contains("engine.demotion.idle_after_ms")
                && e.contains("placement_reverify_ms (20000)"),
            "{e}"
        );
        parse("[scope]\npids = [1]\n[engine.demotion]\nidle_after_ms = 40000\n").expect("valid");
        parse(
            "[scope]\npids = [1]\n[daemon]\nplacement_reverify_ms = 10000\n\
             [engine.demotion]\nidle_after_ms = 30000\n",
        )
        .expect("valid");
    }

    #[test]
    fn engine_keys_reach_the_engine() {
        let c = parse(
            "[scope]\nall = true\n[sources]\nenabled = [\"perf\", \"damon\"]\n\
             [engine]\nmode = \"precise\"\nfreq_threshold = 3\npromote_rate_limit_mbps = 128\n\
             batch_nr = 256\nmove_interleaved = true\n\
             [engine.demotion]\nlow_free_permille = 10\nhigh_free_permille = 30\n",
        )
        .expect("valid");
        let e = c.engine_config();
        assert!(e.move_interleaved);
        assert!(
            !parse("[scope]\nall = true\n")
                .expect("valid")
                .engine_config()
                .move_interleaved
        );
        assert_eq!(e.mode, tierd_engine::hotness::HotnessMode::Precise);
        assert_eq!(e.freq_threshold, 3);
        assert_eq!(e.promote_rate_limit_mbps, 128);
        assert_eq!(e.batch_nr, 256);
        assert_eq!(e.demotion.high_free_permille, 30);
        assert!(e.sources.contains(SourceKind::HwSample));
        assert!(e.sources.contains(SourceKind::AccessedBitScan));
        assert!(!e.sources.contains(SourceKind::HintFault));
    }

    #[test]
    fn accessing_node_and_preferred_many_keys() {
        let d = parse("[scope]\nall = true\n")
            .expect("valid")
            .engine_config();
        assert_eq!(d.accessing_node, tierd_engine::AccessingNode::Threads);
        assert_eq!(d.preferred_many, tierd_engine::PreferredMany::Always);
        let c = parse(
            "[scope]\nall = true\n[engine]\naccessing_node = \"none\"\n\
             preferred_many = \"follow-flag\"\n",
        )
        .expect("valid")
        .engine_config();
        assert_eq!(c.accessing_node, tierd_engine::AccessingNode::None);
        assert_eq!(c.preferred_many, tierd_engine::PreferredMany::FollowFlag);
        let m = err("[scope]\nall = true\n[engine]\npreferred_many = \"follow_flag\"\n");
        assert!(
            m.starts_with("t.toml:4:") && m.contains("engine.preferred_many"),
            "{m}"
        );
        let m = err("[scope]\nall = true\n[engine]\naccessing_node = \"pmu\"\n");
        assert!(m.contains("engine.accessing_node"), "{m}");
    }

    #[test]
    fn type_error_names_file_line_column_and_key() {
        let m = err("[scope]\npids = [1]\n[engine]\nfreq_threshold = \"two\"\n");
        assert!(m.starts_with("t.toml:4:"), "{m}");
        assert!(m.contains("engine.freq_threshold"), "{m}");
    }

    #[test]
    fn unknown_key_is_refused_with_its_name() {
        let m = err("[scope]\npids = [1]\n[daemon]\nmetrics_port = 9\n");
        assert!(m.starts_with("t.toml:"), "{m}");
        assert!(m.contains("metrics_port"), "{m}");
    }

    #[test]
    fn empty_scope_is_refused() {
        let m = err("[engine]\nfreq_threshold = 2\n");
        assert!(m.contains("scope: nothing in scope"), "{m}");
    }

    #[test]
    fn out_of_range_engine_value_names_key_and_line() {
        let m = err("[scope]\npids = [1]\n[engine]\nfreq_threshold = 9\n");
        assert!(m.starts_with("t.toml:4: engine.freq_threshold"), "{m}");
        assert!(m.contains("out of range"), "{m}");
    }

    #[test]
    fn bad_damon_settings_are_refused_with_the_kernel_rule() {
        let m = err("[scope]\npids = [1]\n[sources.damon]\nmin_nr_regions = 2\n");
        assert!(m.contains("sources.damon.min_nr_regions"), "{m}");
        let m = err("[scope]\npids = [1]\n[sources.damon]\nmax_region_kib = 2\n");
        assert!(
            m.contains("sources.damon.max_region_kib") && m.contains("below one page"),
            "{m}"
        );
        for ok in ["0", "4", "2048"] {
            let c = parse(&format!(
                "[scope]\npids = [1]\n[sources.damon]\nmax_region_kib = {ok}\n"
            ));
            assert!(c.is_ok(), "max_region_kib = {ok}: {c:?}");
        }
        let m = err("[scope]\npids = [1]\n[sources.damon]\nunchecked_max_region_kib = 3\n");
        assert!(
            m.contains("sources.damon.unchecked_max_region_kib") && m.contains("below one page"),
            "{m}"
        );
        let m =
            err("[scope]\npids = [1]\n[sources.damon]\nunchecked_max_region_kib = 1099511627777\n");
        assert!(m.contains("above 2^40 KiB"), "{m}");
        for ok in ["0", "4", "512"] {
            let c = parse(&format!(
                "[scope]\npids = [1]\n[sources.damon]\nunchecked_max_region_kib = {ok}\n"
            ));
            assert!(c.is_ok(), "unchecked_max_region_kib = {ok}: {c:?}");
        }
        let m = err("[scope]\npids = [1]\n[sources.damon]\nmin_nr_accesses = 21\n");
        assert!(m.contains("never be reached"), "{m}");
        let m = err("[scope]\npids = [1]\n[sources.damon]\nsample_us = 200000\n");
        assert!(m.contains("aggr_us"), "{m}");
    }

    #[test]
    fn huge_pids_intervals_and_a_zero_rate_are_refused_naming_the_key() {
        let m = err("[scope]\npids = [4194305]\n");
        assert!(m.contains("scope.pids") && m.contains("4194305"), "{m}");
        let m = err("[scope]\npids = [1]\n[sources.damon]\nupdate_us = 3600000001\n");
        assert!(m.contains("sources.damon.update_us"), "{m}");
        let m = err("[scope]\npids = [1]\n[engine]\npromote_rate_limit_mbps = 0\n");
        assert!(
            m.starts_with("t.toml:4: engine.promote_rate_limit_mbps"),
            "{m}"
        );
    }

    #[test]
    fn public_metrics_need_consent() {
        let m = err("[scope]\npids = [1]\n[daemon]\nmetrics_listen = \"0.0.0.0:9464\"\n");
        assert!(m.starts_with("t.toml:4: daemon.metrics_listen"), "{m}");
        let c = parse(
            "[scope]\npids = [1]\n[daemon]\nmetrics_listen = \"0.0.0.0:9464\"\n\
             allow_public_metrics = true\n",
        )
        .expect("valid with consent");
        assert_eq!(c.daemon.metrics_listen.port(), 9464);
    }

    #[test]
    fn liveness_timeout_and_process_series_bound_are_range_checked() {
        let c = parse("[scope]\npids = [1]\n").expect("valid");
        assert_eq!(c.daemon.liveness_timeout_s, DEFAULT_LIVENESS_TIMEOUT_S);
        assert_eq!(c.daemon.metrics_max_processes, 20);
        let with = |kv: &str| format!("[scope]\npids = [1]\n[daemon]\n{kv}\n");
        for bad in ["0", "4", "86401"] {
            let m = err(&with(&format!("liveness_timeout_s = {bad}")));
            assert!(
                m.starts_with("t.toml:4: daemon.liveness_timeout_s: ")
                    && m.ends_with("is outside 5..=86400"),
                "{m}"
            );
        }
        // Not a whole number of seconds (NaN, a fraction, negative): a type error, located.
        for bad in ["nan", "1.5", "-1"] {
            let m = err(&with(&format!("liveness_timeout_s = {bad}")));
            assert!(m.starts_with("t.toml:4:"), "{m}");
            assert!(m.contains("daemon.liveness_timeout_s"), "{m}");
        }
        let m = err(&with("metrics_max_processes = 10001"));
        assert!(
            m.contains("daemon.metrics_max_processes: 10001 is above 10000"),
            "{m}"
        );
        let c = parse(&with("liveness_timeout_s = 5\nmetrics_max_processes = 0")).expect("valid");
        assert_eq!(
            (c.daemon.liveness_timeout_s, c.daemon.metrics_max_processes),
            (5, 0)
        );
    }

    #[test]
    fn hugetlb_is_left_alone_unless_the_file_says_move() {
        let c = parse("[scope]\npids = [1]\n").expect("valid");
        assert_eq!(c.daemon.hugetlb, HugetlbPolicy::Leave);
        let c = parse("[scope]\npids = [1]\n[daemon]\nhugetlb = \"move\"\n").expect("valid");
        assert_eq!(c.daemon.hugetlb, HugetlbPolicy::Move);
        let c = parse("[scope]\npids = [1]\n[daemon]\nhugetlb = \"leave\"\n").expect("valid");
        assert_eq!(c.daemon.hugetlb, HugetlbPolicy::Leave);
        // Anything else: a parse error naming the file, the line, the key and the choices.
        let m = err("[scope]\npids = [1]\n[daemon]\nhugetlb = \"always\"\n");
        assert!(m.starts_with("t.toml:4:"), "{m}");
        assert!(m.contains("daemon.hugetlb"), "{m}");
        assert!(
            m.contains("unknown variant `always`, expected `leave` or `move`"),
            "{m}"
        );
        let m = err("[scope]\npids = [1]\n[daemon]\nhugetlb = true\n");
        assert!(
            m.starts_with("t.toml:4:") && m.contains("daemon.hugetlb"),
            "{m}"
        );
        // The configuration dump spells it as the file does.
        let c = parse("[scope]\npids = [1]\n[daemon]\nhugetlb = \"move\"\n").expect("valid");
        let text = toml::to_string(&c).expect("serializes");
        assert!(text.contains("hugetlb = \"move\""), "{text}");
    }

    #[test]
    fn engine_sources_is_refused() {
        let m = err("[scope]\npids = [1]\n[engine]\nsources = [\"hint_fault\"]\n");
        assert!(m.contains("engine.sources"), "{m}");
    }

    #[test]
    fn scope_rules() {
        assert!(err("[scope]\nall = true\npids = [3]\n").contains("scope.all"));
        assert!(err("[scope]\npids = [0]\n").contains("scope.pids"));
        assert!(err("[scope]\ncgroups = [\"a/../b\"]\n").contains("scope.cgroups"));
        assert!(err("[scope]\npids = [1]\n[sources]\nenabled = []\n").contains("no source"));
        assert!(
            err("[scope]\npids = [1]\n[sources]\nenabled = [\"idle\", \"idle\"]\n")
                .contains("twice")
        );
    }

    #[test]
    fn missing_file_names_the_path() {
        let e = DaemonConfig::load(Path::new("/nonexistent/tierd.toml")).expect_err("missing");
        assert!(e
            .to_string()
            .starts_with("/nonexistent/tierd.toml: cannot read"));
    }

    #[test]
    fn shipped_example_is_valid() {
        let text = include_str!("../../../deploy/tierd.toml");
        let c = parse(text).expect("deploy/tierd.toml must stay valid");
        assert!(!c.sources.enabled.is_empty());
    }

    proptest::proptest! {
        /// Any `[topology]` of small node lists parses to an override that names each node
        /// once in at least two non-empty tiers, or is refused with one line naming a
        /// `topology` key; never a panic.
        #[test]
        fn topology_overrides_are_accepted_only_when_well_formed(
            tiers in proptest::collection::vec(proptest::collection::vec(0u16..70, 0..4), 0..5),
            pair in proptest::option::of((proptest::collection::vec(0u16..70, 0..3), proptest::collection::vec(0u16..70, 0..3))),
        ) {
            let list = |v: &[u16]| v.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
            let mut t = String::from("[scope]\nall = true\n\n[topology]\n");
            if !tiers.is_empty() {
                let inner: Vec<String> = tiers.iter().map(|x| format!("[{}]", list(x))).collect();
                t.push_str(&format!("tiers = [{}]\n", inner.join(", ")));
            }
            if let Some((f, s)) = &pair {
                t.push_str(&format!("fast = [{}]\nslow = [{}]\n", list(f), list(s)));
            }
            match parse(&t) {
                Ok(cfg) => {
                    let got = cfg.topology.tiers();
                    if got.is_empty() {
                        proptest::prop_assert!(tiers.is_empty() && pair.as_ref().is_none_or(|(f, s)| f.is_empty() && s.is_empty()));
                    } else {
                        proptest::prop_assert!(got.len() >= 2);
                        let mut all: Vec<u16> = got.iter().flatten().copied().collect();
                        proptest::prop_assert!(got.iter().all(|x| !x.is_empty()));
                        let n = all.len();
                        all.sort_unstable();
                        all.dedup();
                        proptest::prop_assert_eq!(all.len(), n, "a node named twice was accepted");
                        proptest::prop_assert!(all.iter().all(|x| usize::from(*x) < tierd_engine::types::MAX_NODES));
                    }
                }
                Err(e) => {
                    let m = e.to_string();
                    proptest::prop_assert!(m.contains("topology"), "{}", m);
                    proptest::prop_assert!(!m.contains('\n'), "{}", m);
                }
            }
        }
    }
}
