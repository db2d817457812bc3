//! DAMON `vaddr` monitoring through its sysfs interface, read back as regions.
//!
//! Interface from `Documentation/admin-guide/mm/damon/usage.rst` and mm/damon/sysfs.c,
//! sysfs-schemes.c (6.12). Under `/sys/kernel/mm/damon/admin`:
//!
//! ```text
//! kdamonds/nr_kdamonds                 writing N removes every kdamond directory, creates 0..N
//!                                      (-EBUSY while any kdamond runs)
//! kdamonds/0/state                     on | off | commit | update_schemes_tried_regions | ...
//! kdamonds/0/pid                       the kdamond thread, -1 when off
//! kdamonds/0/contexts/nr_contexts      0 or 1
//! kdamonds/0/contexts/0/operations     vaddr (avail_operations lists what the kernel has)
//!   monitoring_attrs/intervals/{sample_us,aggr_us,update_us}
//!   monitoring_attrs/nr_regions/{min,max}
//!   targets/nr_targets, targets/<T>/pid_target
//!   schemes/nr_schemes, schemes/<S>/action
//!   schemes/<S>/access_pattern/{sz,nr_accesses,age}/{min,max}
//!   schemes/<S>/filters/nr_filters, filters/<F>/{type,matching,damon_target_idx}
//!   schemes/<S>/tried_regions/<R>/{start,end,nr_accesses,age}
//! ```
//!
//! `tried_regions` does not say which target a region belongs to, and the address ranges of
//! different processes overlap. So [`DamonMonitor`] sets up one `stat` scheme per target, each
//! with a core `target` filter (`matching` N: memory *not* of target `i` is filtered out;
//! core filters run before the tried-region callback in mm/damon/core.c
//! `damos_apply_scheme()`): the tried regions of scheme `i` are target `i`'s. Action `stat`
//! changes nothing.
//!
//! Writing `update_schemes_tried_regions` to `state` refreshes `tried_regions`; the kernel
//! answers after the next scheme application (up to one aggregation interval). `commit`
//! applies edited files (here: a changed target set) to a running kdamond.
//!
//! Ownership: tierd only uses DAMON when no kdamond runs and none is configured (or, if told,
//! when the configured ones are all off); it never stops someone else's kdamond. On stop or
//! drop it turns its kdamond off and gives `nr_kdamonds` back its old value.
//!
//! Huge pages: DAMON's regions split at any page, also inside a THP or hugetlb page. The
//! regions are reported as they are; [`super::locate::locate`] maps their pages to folios, so
//! a region covering part of a huge page makes the whole folio observed once, at its head,
//! with the hottest covering region's `nr_accesses`: hot THP-backed memory is never split
//! below the folio size.
//!
//! All I/O goes through [`DamonFs`], so tests run against a fake that emulates the kernel's
//! side effects in a temporary directory.
//!
//! Accuracy note (docs/lab.md, first guest runs, 5): under QEMU TCG the Accessed bit of a hot page can stay clear
//! until the next CR3 switch, so hot regions reach only part of the possible `nr_accesses`;
//! keep the threshold low there.

use std::io;
use std::path::{Path, PathBuf};

use tierd_engine::types::{Nanos, Vpn, PAGE_SHIFT};
use tierd_engine::SourceKind;

use super::damon_trace::{DamonTrace, TraceStats};
use super::{AccessedRange, Privileges, SourceName, SourceStatus};

/// The most regions [`DamonMonitor::fit_regions`] asks for (the engine's rule, shared with the
/// simulator's DAMON source).
pub use tierd_engine::regions::MAX_FIT_REGIONS;

/// The DAMON sysfs admin directory, relative to the `/sys` root.
pub const ADMIN_PATH: &str = "kernel/mm/damon/admin";

/// The sysfs file operations DAMON needs; [`RealFs`] is the real one.
pub trait DamonFs {
    /// Reads a whole file.
    ///
    /// # Errors
    /// The OS error.
    fn read(&self, path: &Path) -> io::Result<String>;
    /// Writes a value (one `write(2)`, as `echo` does).
    ///
    /// # Errors
    /// The OS error (sysfs handlers return e.g. `EBUSY`, `EINVAL`).
    fn write(&self, path: &Path, value: &str) -> io::Result<()>;
    /// Whether a path exists.
    fn exists(&self, path: &Path) -> bool;
    /// Names in a directory.
    ///
    /// # Errors
    /// The OS error.
    fn list(&self, path: &Path) -> io::Result<Vec<String>>;
}

/// A read-only DAMON sysfs tree held in memory: `dirs` give the names `list` returns,
/// `files` the contents `read` returns; every write is refused (`EACCES`). For feeding the
/// readers ([`read_tried_regions`]) kernel-shaped input in property tests and fuzz targets.
#[derive(Clone, Debug, Default)]
pub struct MemFs {
    /// Directory path -> the names in it.
    pub dirs: std::collections::BTreeMap<PathBuf, Vec<String>>,
    /// File path -> its content.
    pub files: std::collections::BTreeMap<PathBuf, String>,
}

impl DamonFs for MemFs {
    fn read(&self, path: &Path) -> io::Result<String> {
        self.files
            .get(path)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }
    fn write(&self, _: &Path, _: &str) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::PermissionDenied))
    }
    fn exists(&self, path: &Path) -> bool {
        self.files.contains_key(path) || self.dirs.contains_key(path)
    }
    fn list(&self, path: &Path) -> io::Result<Vec<String>> {
        self.dirs
            .get(path)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }
}

/// The real file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFs;

impl DamonFs for RealFs {
    /// Open, one `read`, close: a sysfs attribute hands its whole value (at most a page) to
    /// the first read (fs/kernfs/file.c `kernfs_file_read_iter()`), so a read shorter than
    /// the buffer is the end. `read_to_string` also `statx`es the file and reads once more to
    /// see the end: five system calls a file where three do, and a pass reads four files per
    /// DAMON region.
    fn read(&self, path: &Path) -> io::Result<String> {
        use std::io::Read;
        let mut f = std::fs::File::open(path)?;
        let mut buf = [0u8; 4096];
        let mut text = Vec::new();
        loop {
            let n = match f.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            text.extend_from_slice(&buf[..n]);
            if n < buf.len() {
                break;
            }
        }
        String::from_utf8(text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
        f.write_all(value.as_bytes())
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn list(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for e in std::fs::read_dir(path)? {
            names.push(e?.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }
}

/// Errors of the DAMON source.
#[derive(Debug, thiserror::Error)]
pub enum DamonError {
    /// No DAMON sysfs interface.
    #[error("{path} absent: kernel without CONFIG_DAMON_SYSFS")]
    Unavailable {
        /// The admin directory looked for.
        path: PathBuf,
    },
    /// A kdamond is running that tierd did not start.
    #[error("DAMON busy: kdamond {index} is on (pid {pid}); not touching someone else's kdamond")]
    Busy {
        /// Its index.
        index: usize,
        /// Its thread id as `pid` reads.
        pid: String,
    },
    /// kdamonds are configured (though off) by someone else.
    #[error("{count} kdamond(s) configured by someone else; writing nr_kdamonds would erase them")]
    Configured {
        /// `nr_kdamonds`.
        count: u64,
    },
    /// A sysfs read or write failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// "reading" or "writing `<value>` to".
        op: String,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A file held something that is not a number.
    #[error("{path}: expected a number, read {value:?}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What it held.
        value: String,
    },
    /// The kernel has no `damon_aggregated` tracepoint (or tracefs lacks it).
    #[error("{path} absent: no damon_aggregated tracepoint")]
    NoTracepoint {
        /// The event's `enable` file looked for.
        path: PathBuf,
    },
    /// `vaddr` is not among `avail_operations`.
    #[error("DAMON operations set vaddr not available (avail_operations: {avail})")]
    NoVaddr {
        /// What the kernel offers.
        avail: String,
    },
}

/// Monitoring parameters. Defaults follow DAMON's own sysfs defaults for the intervals
/// (mm/damon/sysfs.c `damon_sysfs_intervals_alloc(5000, 100000, 60000000)`), with a shorter
/// update interval so new mappings of the targets are picked up within a second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DamonConfig {
    /// Sampling interval, µs.
    pub sample_us: u64,
    /// Aggregation interval, µs.
    pub aggr_us: u64,
    /// Operations update interval (re-reading the targets' mappings), µs.
    pub update_us: u64,
    /// Minimum number of regions (DAMON requires at least 3).
    pub min_regions: u64,
    /// Maximum number of regions.
    pub max_regions: u64,
    /// The scheme's `nr_accesses` minimum: regions below it are not reported. 1 reports every
    /// region seen accessed at least once per aggregation interval.
    pub min_nr_accesses: u64,
    /// Take over kdamonds that are configured but all off (e.g. left by a crashed tierd).
    pub take_over_idle: bool,
    /// Also report each target's regions with no access (`nr_accesses` 0) and their age: a
    /// second `stat` scheme per target (`nr_accesses` 0..0), whose regions are what DAMOS
    /// `migrate_cold` would act on; [`idle_ranges`] turns them into idle facts. For idle
    /// demotion (`engine.demotion.idle_after_ms`).
    pub report_idle: bool,
    /// Tune the intervals toward this goal; `None` keeps them fixed.
    pub intervals_goal: Option<IntervalsGoal>,
}

/// DAMON's monitoring intervals auto-tuning goal (`monitoring_attrs/intervals/intervals_goal`,
/// kernel 6.15+; Documentation/mm/damon/design.rst "Monitoring Intervals Auto-tuning"): scale
/// both intervals so that the observed access events are `access_bp` / 10000 of the most
/// that could be observed, adjusting every `aggrs` aggregation intervals, the sampling
/// interval kept within `min_sample_us..=max_sample_us` and the aggregation interval a fixed
/// multiple of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntervalsGoal {
    /// Target ratio of observed to possible access events, in basis points.
    pub access_bp: u64,
    /// Aggregation intervals between adjustments.
    pub aggrs: u64,
    /// Smallest sampling interval, µs.
    pub min_sample_us: u64,
    /// Largest sampling interval, µs.
    pub max_sample_us: u64,
}

/// Who tunes the intervals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntervalsTuning {
    /// Fixed intervals.
    Off,
    /// The kernel (`intervals_goal` exists, 6.15+).
    Kernel,
    /// tierd, the kernel's algorithm from userspace (older kernels).
    Userspace,
}

impl IntervalsTuning {
    /// A name for logs and status.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            IntervalsTuning::Off => "off",
            IntervalsTuning::Kernel => "kernel",
            IntervalsTuning::Userspace => "userspace",
        }
    }
}

/// mm/damon/core.c `damon_get_intervals_score()`: observed access events (region bytes x
/// `nr_accesses`) against `access_bp` of the most possible (monitored bytes x samples per
/// aggregation), in basis points of that goal. Regions not listed count as not accessed, so
/// `monitored_bytes` is the whole monitored size.
#[must_use]
pub fn intervals_score_bp(
    regions: &[DamonRegion],
    monitored_bytes: u64,
    aggr_samples: u64,
    access_bp: u64,
) -> u64 {
    let events: u128 = regions
        .iter()
        .map(|r| u128::from(r.end.saturating_sub(r.start)) * u128::from(r.nr_accesses))
        .sum();
    let listed: u64 = regions.iter().map(|r| r.end.saturating_sub(r.start)).sum();
    let max = u128::from(monitored_bytes.max(listed)) * u128::from(aggr_samples.max(1));
    tierd_engine::feedback::intervals_score_bp(events, max, access_bp)
}

/// mm/damon/core.c `damon_get_intervals_adaptation_bp()` + `kdamond_tune_intervals()`: the
/// next sampling interval for a score (a score of 0 doubles it, twice the goal or more halves
/// it, the kernel limits a decrease to 50 %), clamped to the goal's range.
#[must_use]
pub fn tuned_sample_us(sample_us: u64, score_bp: u64, goal: &IntervalsGoal) -> u64 {
    tierd_engine::feedback::tuned_sample_us(
        sample_us,
        score_bp,
        goal.min_sample_us,
        goal.max_sample_us,
    )
}

impl Default for DamonConfig {
    fn default() -> Self {
        DamonConfig {
            sample_us: 5_000,
            aggr_us: 100_000,
            update_us: 1_000_000,
            min_regions: 10,
            max_regions: 1_000,
            min_nr_accesses: 1,
            take_over_idle: false,
            report_idle: false,
            intervals_goal: None,
        }
    }
}

/// One region DAMON reported for a target process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DamonRegion {
    /// The target process.
    pub pid: u32,
    /// First byte (virtual address).
    pub start: u64,
    /// End (exclusive).
    pub end: u64,
    /// Samples (of `aggr_us / sample_us`) that found the region accessed in the last
    /// aggregation interval.
    pub nr_accesses: u64,
    /// Aggregation intervals since the region's access pattern last changed much.
    pub age: u64,
    /// When it was read.
    pub time: Nanos,
}

/// Probes DAMON sysfs: present, permitted, and free.
#[must_use]
pub fn probe(sys_root: &Path, proc_root: &Path) -> SourceStatus {
    probe_with(&RealFs, sys_root, proc_root)
}

/// [`probe`] through a given [`DamonFs`].
#[must_use]
pub fn probe_with(fs: &impl DamonFs, sys_root: &Path, proc_root: &Path) -> SourceStatus {
    let admin = sys_root.join(ADMIN_PATH);
    if !fs.exists(&admin) {
        return SourceStatus::unavailable(
            SourceName::Damon,
            DamonError::Unavailable { path: admin }.to_string(),
        );
    }
    if !Privileges::read(proc_root).is_admin() {
        return SourceStatus::unavailable(
            SourceName::Damon,
            "DAMON sysfs is root-only (files are mode 0600)",
        );
    }
    match check_free(fs, &admin, false, None) {
        Ok(_) => SourceStatus::available(SourceName::Damon, format!("{} (vaddr)", admin.display())),
        Err(e) => SourceStatus::unavailable(SourceName::Damon, e.to_string()),
    }
}

fn read_str(fs: &impl DamonFs, path: &Path) -> Result<String, DamonError> {
    fs.read(path)
        .map(|s| s.trim().to_string())
        .map_err(|source| DamonError::Io {
            op: "reading".into(),
            path: path.to_path_buf(),
            source,
        })
}

fn read_u64(fs: &impl DamonFs, path: &Path) -> Result<u64, DamonError> {
    let s = read_str(fs, path)?;
    parse_u64(path, &s)
}

/// Parses a number as sysfs prints it (decimal, whitespace around).
///
/// # Errors
/// [`DamonError::Parse`] naming the file.
pub fn parse_u64(path: &Path, text: &str) -> Result<u64, DamonError> {
    text.trim().parse().map_err(|_| DamonError::Parse {
        path: path.to_path_buf(),
        value: text.to_string(),
    })
}

fn write(fs: &impl DamonFs, path: &Path, value: &str) -> Result<(), DamonError> {
    fs.write(path, value).map_err(|source| DamonError::Io {
        op: format!("writing {value:?} to"),
        path: path.to_path_buf(),
        source,
    })
}

/// What a previous tierd left behind, from the marker it keeps outside sysfs: the kdamond it
/// ran (by its thread id, which no other kdamond can share while it runs) and what
/// `nr_kdamonds` was before it claimed one. A restart after an unclean exit (SIGKILL, OOM
/// kill) takes that kdamond over instead of refusing it as someone else's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeftBehind {
    /// `kdamonds/0/pid` when tierd last turned it on.
    pub kdamond_pid: u32,
    /// `nr_kdamonds` before tierd claimed kdamond 0.
    pub prev_nr_kdamonds: u64,
}

/// Checks that no kdamond runs (and, unless `take_over_idle`, none is configured), except the
/// one a previous tierd `left` (turned off here); returns the `nr_kdamonds` to restore on
/// stop and whether a previous tierd's kdamond was taken over.
/// Writes two files of `dir` that hold a pair `lo <= hi` in the order that keeps the pair
/// ordered after each single write: `hi` first when `lo` grows (`raise`), `lo` first
/// otherwise. The kernel refuses a pair out of order when it is committed (e.g.
/// mm/damon/core.c `damon_set_attrs()`: sample <= aggregation, min <= max regions).
fn write_ordered_pair(
    fs: &impl DamonFs,
    dir: &Path,
    lo: (&str, u64),
    hi: (&str, u64),
    raise: bool,
) -> Result<(), DamonError> {
    let order = if raise { [hi, lo] } else { [lo, hi] };
    for (f, v) in order {
        write(fs, &dir.join(f), &v.to_string())?;
    }
    Ok(())
}

fn check_free(
    fs: &impl DamonFs,
    admin: &Path,
    take_over_idle: bool,
    left: Option<LeftBehind>,
) -> Result<(u64, bool), DamonError> {
    let kd = admin.join("kdamonds");
    let n = read_u64(fs, &kd.join("nr_kdamonds"))?;
    let mut ours = false;
    for i in 0..n {
        let dir = kd.join(i.to_string());
        let state = read_str(fs, &dir.join("state"))?;
        if state == "on" {
            let pid = read_str(fs, &dir.join("pid")).unwrap_or_else(|_| "?".into());
            let left_ours = left.is_some_and(|l| i == 0 && pid.parse() == Ok(l.kdamond_pid));
            if !left_ours {
                return Err(DamonError::Busy {
                    index: usize::try_from(i).unwrap_or(usize::MAX),
                    pid,
                });
            }
            // The kdamond tierd ran before an unclean exit: stop it, then configure afresh.
            write(fs, &dir.join("state"), "off")?;
            ours = true;
        }
    }
    if let Some(l) = left {
        // Also when the kdamond had stopped by itself meanwhile (all its targets exited):
        // the configuration left in place is tierd's, the marker says so.
        if n >= 1 {
            return Ok((l.prev_nr_kdamonds, true));
        }
    }
    if n > 0 && !take_over_idle {
        return Err(DamonError::Configured { count: n });
    }
    Ok((n, ours))
}

/// Reads a scheme's `tried_regions` directory (`<R>/{start,end,nr_accesses,age}`, numbered
/// from 0 in address order; other entries such as `total_bytes` are skipped), attributing
/// every region to `pid`.
///
/// # Errors
/// An I/O or parse error naming the file.
pub fn read_tried_regions(
    fs: &impl DamonFs,
    dir: &Path,
    pid: u32,
    now: Nanos,
) -> Result<Vec<DamonRegion>, DamonError> {
    let mut idx: Vec<u64> = fs
        .list(dir)
        .map_err(|source| DamonError::Io {
            op: "listing".into(),
            path: dir.to_path_buf(),
            source,
        })?
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    idx.sort_unstable();
    let mut regions = Vec::with_capacity(idx.len());
    for r in idx {
        let rd = dir.join(r.to_string());
        regions.push(DamonRegion {
            pid,
            start: read_u64(fs, &rd.join("start"))?,
            end: read_u64(fs, &rd.join("end"))?,
            nr_accesses: read_u64(fs, &rd.join("nr_accesses"))?,
            age: read_u64(fs, &rd.join("age"))?,
            time: now,
        });
    }
    Ok(regions)
}

/// Counters of one [`DamonMonitor::collect`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DamonPassStats {
    /// Regions read.
    pub regions: u64,
    /// The kdamond had stopped by itself (every target process exited).
    pub kdamond_stopped: bool,
    /// Read from the tracepoint, which had no aggregation finished since the last read:
    /// nothing new, ask again soon (not "no region accessed").
    pub stale: bool,
    /// Read through sysfs because the tracepoint gave no whole aggregation for
    /// [`TRACE_FALLBACK_AGGRS`] aggregation intervals.
    pub trace_fallback: bool,
}

/// Aggregation intervals without a whole aggregation from the tracepoint after which one
/// read goes through sysfs (lost events, a buffer smaller than one aggregation).
pub const TRACE_FALLBACK_AGGRS: u64 = 3;

/// A kdamond owned by tierd, monitoring the virtual address spaces of a set of processes.
#[derive(Debug)]
pub struct DamonMonitor<F: DamonFs> {
    fs: F,
    admin: PathBuf,
    config: DamonConfig,
    prev_nr_kdamonds: u64,
    pids: Vec<u32>,
    on: bool,
    owned: bool,
    tuning: IntervalsTuning,
    /// The intervals in force (as tierd last set or read them), µs.
    sample_us: u64,
    aggr_us: u64,
    /// Samples per aggregation, kept when the intervals are scaled.
    aggr_samples: u64,
    /// When the userspace tuner last adjusted.
    last_tune: Option<Nanos>,
    /// Whether a previous tierd's kdamond was taken over at start.
    took_over: bool,
    /// How many times tierd turned the kdamond on (its thread id changes each time).
    on_count: u64,
    /// The configured `nr_regions` bounds, which [`Self::fit_regions`] only raises.
    base_regions: (u64, u64),
    /// The regions' tracepoint reader, when [`Self::read_from_trace`] set it up.
    trace: Option<DamonTrace>,
    /// [`Self::on_count`] when the trace last followed the kdamond's thread.
    trace_follows: u64,
    /// When the trace last gave a whole aggregation (or began following).
    trace_last: Option<Nanos>,
}

impl<F: DamonFs> DamonMonitor<F> {
    /// Claims kdamond 0 and configures it (context `vaddr`, intervals, regions); it starts
    /// monitoring when [`Self::set_targets`] gives it processes.
    ///
    /// # Errors
    /// [`DamonError::Unavailable`], [`DamonError::Busy`], [`DamonError::Configured`],
    /// [`DamonError::NoVaddr`], or an I/O error naming the file.
    pub fn new(fs: F, sys_root: &Path, config: DamonConfig) -> Result<Self, DamonError> {
        Self::take_over(fs, sys_root, config, None)
    }

    /// [`Self::new`], taking over what a previous tierd `left` behind (its kdamond still on,
    /// or configured and off): see [`LeftBehind`]. A kdamond running with another thread id
    /// is still someone else's and refused.
    ///
    /// # Errors
    /// As [`Self::new`].
    pub fn take_over(
        fs: F,
        sys_root: &Path,
        config: DamonConfig,
        left: Option<LeftBehind>,
    ) -> Result<Self, DamonError> {
        let admin = sys_root.join(ADMIN_PATH);
        if !fs.exists(&admin) {
            return Err(DamonError::Unavailable { path: admin });
        }
        let (prev, took_over) = check_free(&fs, &admin, config.take_over_idle, left)?;
        let mut m = DamonMonitor {
            fs,
            admin,
            config,
            prev_nr_kdamonds: prev,
            pids: Vec::new(),
            on: false,
            owned: false,
            tuning: IntervalsTuning::Off,
            sample_us: config.sample_us,
            aggr_us: config.aggr_us,
            aggr_samples: (config.aggr_us / config.sample_us.max(1)).max(1),
            last_tune: None,
            took_over,
            on_count: 0,
            base_regions: (config.min_regions.max(3), config.max_regions),
            trace: None,
            trace_follows: 0,
            trace_last: None,
        };
        write(&m.fs, &m.kdamonds().join("nr_kdamonds"), "1")?;
        m.owned = true;
        let kd = m.kdamond();
        write(&m.fs, &kd.join("contexts/nr_contexts"), "1")?;
        let ctx = m.ctx();
        let avail = read_str(&m.fs, &ctx.join("avail_operations")).unwrap_or_default();
        if !avail.split_whitespace().any(|o| o == "vaddr") {
            return Err(DamonError::NoVaddr { avail });
        }
        write(&m.fs, &ctx.join("operations"), "vaddr")?;
        let attrs = ctx.join("monitoring_attrs");
        let c = m.config;
        for (f, v) in [
            ("intervals/sample_us", c.sample_us),
            ("intervals/aggr_us", c.aggr_us),
            ("intervals/update_us", c.update_us),
            // max before min: the kernel checks min <= max on commit only, but keep the pair
            // consistent at every step anyway.
            ("nr_regions/max", c.max_regions),
            ("nr_regions/min", c.min_regions.max(3)),
        ] {
            write(&m.fs, &attrs.join(f), &v.to_string())?;
        }
        if let Some(g) = c.intervals_goal {
            let dir = attrs.join("intervals/intervals_goal");
            if m.fs.exists(&dir) {
                for (f, v) in [
                    ("access_bp", g.access_bp),
                    ("aggrs", g.aggrs),
                    // max first, so that min <= max holds at every step.
                    ("max_sample_us", g.max_sample_us),
                    ("min_sample_us", g.min_sample_us),
                ] {
                    write(&m.fs, &dir.join(f), &v.to_string())?;
                }
                m.tuning = IntervalsTuning::Kernel;
            } else {
                m.tuning = IntervalsTuning::Userspace;
            }
        }
        Ok(m)
    }

    /// Who tunes the intervals.
    #[must_use]
    pub fn tuning(&self) -> IntervalsTuning {
        self.tuning
    }

    /// The sampling and aggregation intervals in force, µs.
    #[must_use]
    pub fn intervals(&self) -> (u64, u64) {
        (self.sample_us, self.aggr_us)
    }

    /// One step of the intervals auto-tuning for the regions of the last aggregation and the
    /// monitored size: userspace tuning adjusts and commits the intervals (at most once per
    /// `aggrs` aggregations, as the kernel does); kernel tuning reads back what the kernel
    /// chose (`update_tuned_intervals`). Returns whether the intervals changed.
    ///
    /// # Errors
    /// An I/O or parse error naming the file (e.g. `EINVAL` from `commit` when a target
    /// exited meanwhile).
    pub fn tune(
        &mut self,
        now: Nanos,
        regions: &[DamonRegion],
        monitored_bytes: u64,
    ) -> Result<bool, DamonError> {
        let Some(goal) = self.config.intervals_goal else {
            return Ok(false);
        };
        if !self.on {
            return Ok(false);
        }
        let period = Nanos(self.aggr_us.saturating_mul(goal.aggrs.max(1)) * 1000);
        if self
            .last_tune
            .is_some_and(|t| now.saturating_sub(t) < period)
        {
            return Ok(false);
        }
        self.last_tune = Some(now);
        let iv = self.ctx().join("monitoring_attrs/intervals");
        match self.tuning {
            IntervalsTuning::Off => Ok(false),
            IntervalsTuning::Kernel => {
                write(
                    &self.fs,
                    &self.kdamond().join("state"),
                    "update_tuned_intervals",
                )?;
                let s = read_u64(&self.fs, &iv.join("sample_us"))?;
                let a = read_u64(&self.fs, &iv.join("aggr_us"))?;
                let changed = (s, a) != (self.sample_us, self.aggr_us);
                (self.sample_us, self.aggr_us) = (s, a);
                Ok(changed)
            }
            IntervalsTuning::Userspace => {
                let score =
                    intervals_score_bp(regions, monitored_bytes, self.aggr_samples, goal.access_bp);
                let s = tuned_sample_us(self.sample_us, score, &goal);
                // tierd's deadband: each change is a `commit` of the whole context, so steps
                // under 10 % (the score hovering around the goal) are not worth one. The
                // kernel, tuning in place, has none.
                if s.abs_diff(self.sample_us) * 10 < self.sample_us {
                    return Ok(false);
                }
                let a = s.saturating_mul(self.aggr_samples);
                self.write_intervals(s, a)?;
                write(&self.fs, &self.kdamond().join("state"), "commit")?;
                Ok(true)
            }
        }
    }

    /// Writes the sampling and aggregation intervals (not yet committed) and records them:
    /// when growing, aggregation first, so that sample <= aggr holds at every step.
    fn write_intervals(&mut self, sample_us: u64, aggr_us: u64) -> Result<(), DamonError> {
        let iv = self.ctx().join("monitoring_attrs/intervals");
        write_ordered_pair(
            &self.fs,
            &iv,
            ("sample_us", sample_us),
            ("aggr_us", aggr_us),
            sample_us > self.sample_us,
        )?;
        (self.sample_us, self.aggr_us) = (sample_us, aggr_us);
        Ok(())
    }

    /// Moves the sampling interval's range to `min_us..=max_us` (the aggregation interval
    /// stays its multiple): the daemon's pace, wide and short while there is something to
    /// promote, long when the monitored memory holds nothing to move (docs/daemon.md,
    /// "Cost"). The interval in force is clamped into the range at once and committed; with
    /// kernel tuning the goal's `min_sample_us`/`max_sample_us` move too, so the kernel tunes
    /// within it. Returns whether the intervals in force changed.
    ///
    /// # Errors
    /// An I/O error naming the file (`EINVAL` from `commit` when a target exited meanwhile).
    pub fn set_sample_range(&mut self, min_us: u64, max_us: u64) -> Result<bool, DamonError> {
        let (min_us, max_us) = (min_us.max(1), max_us.max(min_us.max(1)));
        if let Some(g) = &mut self.config.intervals_goal {
            if (g.min_sample_us, g.max_sample_us) == (min_us, max_us) {
                return Ok(false);
            }
            let raise = min_us > g.min_sample_us;
            (g.min_sample_us, g.max_sample_us) = (min_us, max_us);
            if self.tuning == IntervalsTuning::Kernel {
                let dir = self.ctx().join("monitoring_attrs/intervals/intervals_goal");
                write_ordered_pair(
                    &self.fs,
                    &dir,
                    ("min_sample_us", min_us),
                    ("max_sample_us", max_us),
                    raise,
                )?;
            }
        }
        let s = self.sample_us.clamp(min_us, max_us);
        let a = s.saturating_mul(self.aggr_samples);
        let changed = (s, a) != (self.sample_us, self.aggr_us);
        if changed {
            self.write_intervals(s, a)?;
        }
        if self.on {
            write(&self.fs, &self.kdamond().join("state"), "commit")?;
        }
        Ok(changed)
    }

    /// The regions bounds in force (`nr_regions/{min,max}`).
    #[must_use]
    pub fn nr_regions(&self) -> (u64, u64) {
        (self.config.min_regions, self.config.max_regions)
    }

    /// Keeps DAMON's regions at most about `cap_bytes` over `monitored_bytes` of targets, by
    /// raising `nr_regions/min` to `monitored_bytes / cap_bytes` (and `nr_regions/max` to
    /// twice that when below), within [`Self::new`]'s configured minimum and
    /// [`MAX_FIT_REGIONS`]. Returns whether it wrote anything.
    ///
    /// Why: mm/damon/core.c `damon_region_sz_limit()` lets `kdamond_merge_regions()` merge
    /// neighbours of similar `nr_accesses` up to the monitored size / `min_nr_regions`, and
    /// `kdamond_split_regions()` splits only while fewer than `max_nr_regions / 2` regions
    /// exist. With DAMON's default 10 regions a server of 500 MiB of mappings gets 50 MiB
    /// regions: a hot set of a few MiB scattered by the allocator is sampled as one page in
    /// many cold ones, and never stands out. The kernel's limit is computed from the regions
    /// it monitors (the mappings and the small gaps between them), a little more than the
    /// mapped bytes, so regions may come out slightly above the cap.
    ///
    /// A change below a quarter of the current minimum is not written (each write commits,
    /// and mappings change size all the time).
    ///
    /// # Errors
    /// An I/O error naming the file (`EINVAL` from `commit` when a target exited meanwhile).
    pub fn fit_regions(
        &mut self,
        monitored_bytes: u64,
        cap_bytes: u64,
    ) -> Result<bool, DamonError> {
        if cap_bytes == 0 || monitored_bytes == 0 {
            return Ok(false);
        }
        let (want, max) =
            tierd_engine::regions::fitted_nr_regions(monitored_bytes, cap_bytes, self.base_regions);
        let cur = self.config.min_regions;
        if want.abs_diff(cur) * 4 < cur {
            return Ok(false);
        }
        let attrs = self.ctx().join("monitoring_attrs/nr_regions");
        write_ordered_pair(&self.fs, &attrs, ("min", want), ("max", max), want > cur)?;
        (self.config.min_regions, self.config.max_regions) = (want, max);
        if self.on {
            write(&self.fs, &self.kdamond().join("state"), "commit")?;
        }
        Ok(true)
    }

    fn kdamonds(&self) -> PathBuf {
        self.admin.join("kdamonds")
    }
    fn kdamond(&self) -> PathBuf {
        self.kdamonds().join("0")
    }
    fn ctx(&self) -> PathBuf {
        self.kdamond().join("contexts/0")
    }

    /// The processes monitored now.
    #[must_use]
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// Whether the kdamond is on (as far as tierd turned it on).
    #[must_use]
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Sets the processes to monitor: writes the targets and one `stat` scheme per target,
    /// then turns the kdamond on (first time), `commit`s (running), or off (no process).
    ///
    /// # Errors
    /// An I/O error naming the file (e.g. `EINVAL` from `on` when a pid no longer exists).
    pub fn set_targets(&mut self, pids: &[u32]) -> Result<(), DamonError> {
        let state = self.kdamond().join("state");
        if pids.is_empty() {
            if self.on {
                write(&self.fs, &state, "off")?;
                self.on = false;
            }
            self.pids.clear();
            return Ok(());
        }
        let ctx = self.ctx();
        let n = pids.len().to_string();
        write(&self.fs, &ctx.join("targets/nr_targets"), &n)?;
        for (i, pid) in pids.iter().enumerate() {
            write(
                &self.fs,
                &ctx.join(format!("targets/{i}/pid_target")),
                &pid.to_string(),
            )?;
        }
        // Scheme i reports target i's accessed regions; with `report_idle`, scheme n + i its
        // regions with no access.
        let schemes = if self.config.report_idle { 2 } else { 1 } * pids.len();
        write(
            &self.fs,
            &ctx.join("schemes/nr_schemes"),
            &schemes.to_string(),
        )?;
        for i in 0..pids.len() {
            self.write_scheme(&ctx.join(format!("schemes/{i}")), i, false)?;
            if self.config.report_idle {
                let s = ctx.join(format!("schemes/{}", pids.len() + i));
                self.write_scheme(&s, i, true)?;
            }
        }
        self.pids = pids.to_vec();
        if self.on {
            write(&self.fs, &state, "commit")?;
            // The commit returns once applied: lines read from now on use the new order.
            if let Some(t) = &mut self.trace {
                t.discard()?;
            }
        } else {
            write(&self.fs, &state, "on")?;
            self.on = true;
            self.on_count += 1;
        }
        Ok(())
    }

    /// Reads the regions from DAMON's `damon_aggregated` tracepoint (a tracefs instance of
    /// tierd's, [`super::damon_trace`]) instead of `tried_regions`. Returns the instance's
    /// directory.
    ///
    /// # Errors
    /// No tracefs under `sys_root` ([`DamonError::NoTracepoint`] naming where it looked),
    /// no tracepoint, or an I/O error naming the file; the sysfs read-back stays.
    pub fn read_from_trace(&mut self, sys_root: &Path) -> Result<PathBuf, DamonError> {
        let tracefs =
            super::damon_trace::find_tracefs(sys_root).ok_or_else(|| DamonError::NoTracepoint {
                path: sys_root.join("kernel/tracing/instances"),
            })?;
        let t = DamonTrace::open(&tracefs)?;
        let dir = t.dir().to_path_buf();
        self.trace = Some(t);
        self.trace_follows = 0;
        Ok(dir)
    }

    /// The tracepoint reader's counters, when it is used.
    #[must_use]
    pub fn trace_stats(&self) -> Option<TraceStats> {
        self.trace.as_ref().map(DamonTrace::stats)
    }

    /// Whether a previous tierd's kdamond was taken over at start.
    #[must_use]
    pub fn took_over(&self) -> bool {
        self.took_over
    }

    /// How many times tierd turned the kdamond on; the marker is rewritten when it grows.
    #[must_use]
    pub fn on_count(&self) -> u64 {
        self.on_count
    }

    /// What a restart would need to take this kdamond over: its thread id (read now) and
    /// the `nr_kdamonds` to restore. `None` while it is off.
    #[must_use]
    pub fn left_behind(&self) -> Option<LeftBehind> {
        if !self.on {
            return None;
        }
        let pid = read_str(&self.fs, &self.kdamond().join("pid")).ok()?;
        Some(LeftBehind {
            kdamond_pid: pid.parse().ok()?,
            prev_nr_kdamonds: self.prev_nr_kdamonds,
        })
    }

    /// A `stat` scheme over target `target_idx`'s regions: those with at least
    /// `min_nr_accesses`, or (`idle`) those with none.
    fn write_scheme(&self, s: &Path, target_idx: usize, idle: bool) -> Result<(), DamonError> {
        let fs = &self.fs;
        write(fs, &s.join("action"), "stat")?;
        let ap = s.join("access_pattern");
        let max = u64::MAX.to_string();
        write(fs, &ap.join("sz/min"), "0")?;
        write(fs, &ap.join("sz/max"), &max)?;
        // min before max for the idle one: the kernel does not check the order, but a
        // range that is momentarily empty would be confusing in a dump.
        if idle {
            write(fs, &ap.join("nr_accesses/min"), "0")?;
            write(fs, &ap.join("nr_accesses/max"), "0")?;
        } else {
            write(fs, &ap.join("nr_accesses/max"), &max)?;
            write(
                fs,
                &ap.join("nr_accesses/min"),
                &self.config.min_nr_accesses.to_string(),
            )?;
        }
        write(fs, &ap.join("age/min"), "0")?;
        write(fs, &ap.join("age/max"), &max)?;
        let f = s.join("filters");
        write(fs, &f.join("nr_filters"), "1")?;
        let f0 = f.join("0");
        write(fs, &f0.join("type"), "target")?;
        write(fs, &f0.join("damon_target_idx"), &target_idx.to_string())?;
        // Filter out what does *not* belong to the target.
        write(fs, &f0.join("matching"), "N")?;
        Ok(())
    }

    /// Asks the kernel to refresh `tried_regions` and reads them: the regions of each target
    /// whose `nr_accesses` reached the threshold, stamped `now`.
    ///
    /// # Errors
    /// An I/O or parse error naming the file. A kdamond that stopped by itself (all targets
    /// exited) is not an error: it is reported in the stats with no regions.
    pub fn collect(
        &mut self,
        now: Nanos,
    ) -> Result<(Vec<DamonRegion>, DamonPassStats), DamonError> {
        let mut stats = DamonPassStats::default();
        if !self.on {
            return Ok((Vec::new(), stats));
        }
        // With the tracepoint the pipe is read first: lines from the kdamond say it runs, and
        // a pass between two aggregations costs one read of the pipe, not a sysfs read too.
        // `state` is read when the trace has been silent for too long.
        let from_trace = if self.trace.is_some() && self.trace_follows == self.on_count {
            self.collect_trace(now, &mut stats)?
        } else {
            None
        };
        if let Some(r) = from_trace {
            return Ok((r, stats));
        }
        let kd = self.kdamond();
        if read_str(&self.fs, &kd.join("state"))? != "on" {
            self.on = false;
            stats.kdamond_stopped = true;
            return Ok((Vec::new(), stats));
        }
        if self.trace.is_some() {
            if self.trace_follows != self.on_count {
                // Turned on since: follow its thread (the first read of it is stale).
                self.follow_kdamond(now)?;
                if let Some(r) = self.collect_trace(now, &mut stats)? {
                    return Ok((r, stats));
                }
            }
            stats.trace_fallback = true;
        }
        write(&self.fs, &kd.join("state"), "update_schemes_tried_regions")?;
        let mut regions = Vec::new();
        let n = self.pids.len();
        for (i, &pid) in self.pids.iter().enumerate() {
            let dir = self.ctx().join(format!("schemes/{i}/tried_regions"));
            regions.extend(read_tried_regions(&self.fs, &dir, pid, now)?);
            if self.config.report_idle {
                let dir = self.ctx().join(format!("schemes/{}/tried_regions", n + i));
                regions.extend(read_tried_regions(&self.fs, &dir, pid, now)?);
            }
        }
        stats.regions = regions.len() as u64;
        Ok((regions, stats))
    }

    /// Points the trace at the kdamond's thread as it runs now (its id changes each time it
    /// is turned on).
    fn follow_kdamond(&mut self, now: Nanos) -> Result<(), DamonError> {
        let path = self.kdamond().join("pid");
        let pid = read_u64(&self.fs, &path)?;
        let pid = u32::try_from(pid).map_err(|_| DamonError::Parse {
            path,
            value: pid.to_string(),
        })?;
        if let Some(t) = &mut self.trace {
            t.follow(pid)?;
        }
        self.trace_follows = self.on_count;
        self.trace_last = Some(now);
        Ok(())
    }

    /// [`Self::collect`] from the tracepoint: `Some` regions (empty and `stats.stale` when no
    /// aggregation finished since the last read), `None` when sysfs should be read instead
    /// (no whole aggregation for [`TRACE_FALLBACK_AGGRS`] intervals).
    fn collect_trace(
        &mut self,
        now: Nanos,
        stats: &mut DamonPassStats,
    ) -> Result<Option<Vec<DamonRegion>>, DamonError> {
        let Some(t) = &mut self.trace else {
            return Ok(None);
        };
        let aggs = t.read()?;
        if aggs.is_empty() {
            let waited = now.saturating_sub(self.trace_last.unwrap_or(now));
            let limit = Nanos(self.aggr_us.saturating_mul(1000 * TRACE_FALLBACK_AGGRS));
            if waited > limit {
                self.trace_last = Some(now);
                return Ok(None);
            }
            stats.stale = true;
            return Ok(Some(Vec::new()));
        }
        self.trace_last = Some(now);
        let min = self.config.min_nr_accesses;
        let idle = self.config.report_idle;
        let mut regions = Vec::new();
        for (idx, evs) in aggs {
            // A target index past the pid list cannot happen after a discard; skip it.
            let Some(&pid) = usize::try_from(idx).ok().and_then(|i| self.pids.get(i)) else {
                continue;
            };
            regions.extend(
                evs.iter()
                    .filter(|e| u64::from(e.nr_accesses) >= min || (idle && e.nr_accesses == 0))
                    .map(|e| DamonRegion {
                        pid,
                        start: e.start,
                        end: e.end,
                        nr_accesses: u64::from(e.nr_accesses),
                        age: u64::from(e.age),
                        time: now,
                    }),
            );
        }
        stats.regions = regions.len() as u64;
        Ok(Some(regions))
    }

    /// Turns the kdamond off and gives `nr_kdamonds` back its old value. Idempotent.
    ///
    /// # Errors
    /// An I/O error naming the file.
    pub fn stop(&mut self) -> Result<(), DamonError> {
        if let Some(t) = &mut self.trace {
            t.close();
        }
        if !self.owned {
            return Ok(());
        }
        let state = self.kdamond().join("state");
        if self.on || read_str(&self.fs, &state).is_ok_and(|s| s == "on") {
            write(&self.fs, &state, "off")?;
            self.on = false;
        }
        write(
            &self.fs,
            &self.kdamonds().join("nr_kdamonds"),
            &self.prev_nr_kdamonds.to_string(),
        )?;
        self.owned = false;
        Ok(())
    }
}

impl<F: DamonFs> Drop for DamonMonitor<F> {
    fn drop(&mut self) {
        // Errors here cannot be reported; `stop` is the checked path.
        let _ = self.stop();
    }
}

/// Turns one aggregation's regions with no access into idle ranges: every region with
/// `nr_accesses` 0, idle since `now` less its age (aggregation intervals, `aggr_us` each; DAMON
/// rescales ages when the intervals change, mm/damon/core.c
/// `damon_update_monitoring_result()`), in the order read. Which ages matter is the caller's
/// (the age in force can change on reload). Boundaries are rounded in to pages: a page only
/// partly in an idle region is not called idle.
pub fn idle_ranges(
    regions: &[DamonRegion],
    aggr_us: u64,
    now: Nanos,
    out: &mut Vec<super::IdleRange>,
) {
    out.extend(
        regions
            .iter()
            .filter(|r| r.nr_accesses == 0)
            .filter_map(|r| {
                let start = r.start.div_ceil(1 << PAGE_SHIFT);
                let end = r.end >> PAGE_SHIFT;
                let age = Nanos(r.age.saturating_mul(aggr_us).saturating_mul(1000));
                (end > start).then(|| super::IdleRange {
                    pid: r.pid,
                    start: Vpn(start),
                    nr_pages: end - start,
                    since: now.saturating_sub(age),
                })
            }),
    );
}

/// Turns one aggregation's regions into accessed ranges for [`super::locate`]: every region
/// that reached `min_nr_accesses`, whole, hottest first (then oldest, then pid and address),
/// because locate takes its page budget from the front. Region boundaries are rounded out to
/// pages; `nr_accesses` rides along for locate's slow-part filter.
pub fn to_ranges(
    regions: &[DamonRegion],
    min_nr_accesses: u64,
    now: Nanos,
    out: &mut Vec<AccessedRange>,
) {
    let mut q: Vec<&DamonRegion> = regions
        .iter()
        .filter(|r| r.nr_accesses >= min_nr_accesses && r.end > r.start)
        .collect();
    q.sort_by(|a, b| {
        b.nr_accesses
            .cmp(&a.nr_accesses)
            .then(b.age.cmp(&a.age))
            .then(a.pid.cmp(&b.pid))
            .then(a.start.cmp(&b.start))
    });
    out.extend(q.into_iter().map(|r| {
        let start = r.start >> PAGE_SHIFT;
        let end = r.end.div_ceil(1 << PAGE_SHIFT);
        AccessedRange {
            pid: r.pid,
            start: Vpn(start),
            nr_pages: end - start,
            time: now,
            kind: SourceKind::AccessedBitScan,
            accessing_node: None,
            nr_accesses: u32::try_from(r.nr_accesses).unwrap_or(u32::MAX),
            pfn: None,
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(pid: u32, start: u64, end: u64, nr: u64, age: u64) -> DamonRegion {
        DamonRegion {
            pid,
            start,
            end,
            nr_accesses: nr,
            age,
            time: Nanos(9),
        }
    }

    #[test]
    fn regions_become_whole_ranges_hottest_first_and_cold_ones_skipped() {
        let r = [
            region(1, 0, 0x4000, 2, 0),
            region(2, 0x8000, 0xa000, 9, 1),
            region(3, 0, 0x1000, 0, 50),     // cold: below the minimum
            region(4, 0x1800, 0x2800, 2, 7), // unaligned: rounded out to pages 1..3, older
        ];
        let mut out = Vec::new();
        to_ranges(&r, 1, Nanos(5), &mut out);
        let got: Vec<(u32, u64, u64, u32)> = out
            .iter()
            .map(|x| (x.pid, x.start.0, x.nr_pages, x.nr_accesses))
            .collect();
        assert_eq!(got, vec![(2, 8, 2, 9), (4, 1, 2, 2), (1, 0, 4, 2)]);
        assert!(out.iter().all(|x| x.time == Nanos(5)
            && x.pfn.is_none()
            && x.kind == SourceKind::AccessedBitScan));
    }

    #[test]
    fn idle_regions_become_inner_page_ranges_idle_since_their_age() {
        let r = [
            region(1, 0, 0x4000, 0, 50),       // 5 s idle at 100 ms
            region(2, 0x1800, 0x5800, 0, 300), // 30 s, unaligned: pages 2..5
            region(3, 0, 0x8000, 1, 900),      // accessed: not idle
            region(5, 0x1800, 0x2000, 0, 400), // no whole page inside
        ];
        let mut out = Vec::new();
        idle_ranges(&r, 100_000, Nanos::from_secs(100), &mut out);
        let got: Vec<(u32, u64, u64, u64)> = out
            .iter()
            .map(|x| (x.pid, x.start.0, x.nr_pages, x.since.0 / 1_000_000_000))
            .collect();
        assert_eq!(got, vec![(1, 0, 4, 95), (2, 2, 3, 70)]);
    }

    #[test]
    fn tuned_intervals_scale_as_the_kernel_does() {
        let g = IntervalsGoal {
            access_bp: 400,
            aggrs: 3,
            min_sample_us: 5_000,
            max_sample_us: 100_000,
        };
        // Score 0: twice as long. On goal: unchanged. 1.5x the goal: 0.5 -> rescaled to
        // 0.75. 2x or more: halved.
        assert_eq!(tuned_sample_us(10_000, 0, &g), 20_000);
        assert_eq!(tuned_sample_us(10_000, 10_000, &g), 10_000);
        assert_eq!(tuned_sample_us(10_000, 15_000, &g), 7_500);
        assert_eq!(tuned_sample_us(10_000, 30_000, &g), 5_000);
        assert_eq!(
            tuned_sample_us(80_000, 0, &g),
            100_000,
            "clamped to the maximum"
        );
        // Score: 1 MiB at 10 of 20 samples in 100 MiB monitored = 0.5 % of the events, for a
        // goal of 4 %: 1250 bp of the goal.
        let r = region(1, 0, 1 << 20, 10, 0);
        assert_eq!(intervals_score_bp(&[r], 100 << 20, 20, 400), 1250);
        // Nothing monitored yet: regions count as the monitored size, no division by zero.
        assert_eq!(intervals_score_bp(&[r], 0, 20, 400), 125_000);
        assert_eq!(intervals_score_bp(&[], 0, 20, 400), 0);
    }

    #[test]
    fn parse_errors_name_the_file() {
        let e = parse_u64(Path::new("/x/start"), "abc\n").unwrap_err();
        assert!(e.to_string().contains("/x/start"));
        assert_eq!(parse_u64(Path::new("f"), " 42\n").unwrap(), 42);
    }
}
