//! Hotness sources of the Linux backend, and the one path from what they see to the engine.
//!
//! ```text
//!  source (Feed::poll) ──▶ AccessedRange ──▶ locate (budget, node lookup, slow-part filter)
//!                                                   ──▶ tierd_engine::Observation
//! ```
//!
//! Each source reports raw facts as [`AccessedRange`]s (a pid and a virtual range, how hot,
//! when, and the frame where the source knew it); [`locate`] turns them into observations: it
//! takes the pass's page budget, finds each page's node through a [`locate::Locator`]
//! (`move_pages(2)` with no target nodes, in the daemon; a fake in tests) and drops the
//! slow-tier pages of regions whose heat their fast-tier pages already explain. The daemon and
//! the tests use this one path; no source converts to observations on its own.
//!
//! - [`idle`]: idle page tracking (`/sys/kernel/mm/page_idle/bitmap`) over the pages pagemap
//!   shows; an accessed-bit scan.
//! - [`damon`]: DAMON's `vaddr` monitoring through its sysfs interface, read back through a
//!   `stat` scheme's `tried_regions`, or from its `damon_aggregated` tracepoint
//!   ([`damon_trace`]); an accessed-bit scan at region granularity.
//! - [`placement`]: the pages `locate` recently found on a fast node, so a settled hot set
//!   is not located again on every read.
//! - [`perf`]: hardware memory-access sampling (AMD IBS op, Intel PEBS load latency, ARM SPE)
//!   through `perf_event_open(2)`: decoders for recorded samples and a small live sampler.
//!
//! [`probe_all`] tells, for each, whether it can run here and why not; the daemon prints it at
//! start.
//!
//! Idle page tracking and DAMON both use the page's Accessed bit and `PG_idle`/`PG_young`
//! (Documentation/mm/damon/design.rst: "conflicts with idle page tracking"), so the backend
//! should run at most one of the two.

pub mod damon;
pub mod damon_trace;
pub mod folio;
pub mod idle;
pub mod locate;
pub mod perf;
pub mod placement;
pub mod verify;

use std::fmt;
use std::path::Path;

use tierd_engine::types::{Nanos, NodeId, Pfn, Vpn};
use tierd_engine::SourceKind;

/// The sources this crate knows, as named in status output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceName {
    /// DAMON `vaddr` through sysfs.
    Damon,
    /// Idle page tracking.
    IdlePage,
    /// AMD IBS op sampling.
    AmdIbsOp,
    /// Intel PEBS load-latency sampling.
    IntelPebs,
    /// ARM SPE sampling.
    ArmSpe,
}

impl SourceName {
    /// The engine's source kind for observations of this source.
    #[must_use]
    pub fn engine_kind(self) -> tierd_engine::SourceKind {
        match self {
            SourceName::Damon | SourceName::IdlePage => tierd_engine::SourceKind::AccessedBitScan,
            SourceName::AmdIbsOp | SourceName::IntelPebs | SourceName::ArmSpe => {
                tierd_engine::SourceKind::HwSample
            }
        }
    }

    /// A short name for tables.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            SourceName::Damon => "damon",
            SourceName::IdlePage => "idle_page",
            SourceName::AmdIbsOp => "amd_ibs_op",
            SourceName::IntelPebs => "intel_pebs",
            SourceName::ArmSpe => "arm_spe",
        }
    }
}

impl fmt::Display for SourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a source can run on this machine, and why (or why not).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceStatus {
    /// The source.
    pub kind: SourceName,
    /// Whether it can be started.
    pub available: bool,
    /// What was found: the reason it cannot run, or what it will use.
    pub reason: String,
}

impl SourceStatus {
    /// An available source.
    #[must_use]
    pub fn available(kind: SourceName, reason: impl Into<String>) -> Self {
        SourceStatus {
            kind,
            available: true,
            reason: reason.into(),
        }
    }
    /// An unavailable source.
    #[must_use]
    pub fn unavailable(kind: SourceName, reason: impl Into<String>) -> Self {
        SourceStatus {
            kind,
            available: false,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for SourceStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.available {
            "available"
        } else {
            "unavailable"
        };
        write!(f, "{:<11} {state}: {}", self.kind.name(), self.reason)
    }
}

/// Probes every source against a `/sys` and a `/proc` root (the real ones are
/// [`crate::DEFAULT_SYS_ROOT`] and [`crate::DEFAULT_PROC_ROOT`]).
#[must_use]
pub fn probe_all(sys_root: &Path, proc_root: &Path) -> Vec<SourceStatus> {
    let mut out = vec![
        damon::probe(sys_root, proc_root),
        idle::probe(sys_root, proc_root),
    ];
    out.extend(perf::probe(sys_root, proc_root));
    out
}

/// A hotness fact in the sources' own terms: `nr_pages` base pages from `start` of `pid` were
/// seen accessed at `time`. [`locate`] finds each page's node and makes the observations.
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
    /// The frame of a single-page range, where the source read it (idle page tracking reads
    /// it from pagemap); carried into the observation's [`tierd_engine::types::PageRef`].
    pub pfn: Option<Pfn>,
}

/// An idle fact in the sources' own terms: `nr_pages` base pages from `start` of `pid` were
/// not seen accessed since `since` (a DAMON region with `nr_accesses` 0 for its age). The
/// daemon locates their pages and gives the engine the fast-tier ones
/// ([`tierd_engine::IdleObservation`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdleRange {
    /// The process.
    pub pid: u32,
    /// First page.
    pub start: Vpn,
    /// Number of base pages.
    pub nr_pages: u64,
    /// No access seen since then.
    pub since: Nanos,
}

/// Why a running source failed. Each variant keeps the source's own error as its cause, so
/// that the chain (which file, which errno) reaches the log intact.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// DAMON's sysfs interface refused or failed.
    #[error("damon")]
    Damon(#[from] damon::DamonError),
    /// Idle page tracking failed.
    #[error("idle page tracking")]
    Idle(#[from] idle::IdleError),
    /// The perf sampler failed.
    #[error("perf sampling")]
    Perf(#[from] perf::live::LiveError),
}

impl SourceError {
    /// The OS error number at the root of the failure, when there is one (for counting
    /// faults by reason).
    #[must_use]
    pub fn errno(&self) -> Option<i32> {
        let mut e: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(err) = e {
            if let Some(io) = err.downcast_ref::<std::io::Error>() {
                return io.raw_os_error();
            }
            e = err.source();
        }
        None
    }
}

/// A running hotness source.
pub trait Feed: Send {
    /// Its name in messages and metrics.
    fn name(&self) -> &'static str;
    /// The processes to watch changed (called before the first poll too).
    ///
    /// # Errors
    /// When the source cannot follow the new set (e.g. DAMON refuses a target that exited
    /// meanwhile): the caller counts it and calls again on its next refresh.
    fn set_targets(&mut self, pids: &[u32]) -> Result<(), SourceError>;
    /// Appends what was observed since the last call.
    ///
    /// # Errors
    /// When the source failed this time (its sysfs files vanished, the kernel refused).
    fn poll(&mut self, now: Nanos, out: &mut Vec<AccessedRange>) -> Result<(), SourceError>;
    /// The targets' mapped size, bytes (refreshed with the scope); sources that tune their
    /// resolution to the share of memory found accessed use it.
    fn set_monitored_bytes(&mut self, _bytes: u64) {}
    /// Whether the daemon checks a region's pages one by one before moving them (its access
    /// check, on idle page tracking). Told before the first refresh, and again if the check
    /// goes off during the run (the idle bitmap failed); a source whose ranges are coarse
    /// (DAMON's regions) keeps them finer without the check, since a range is then all that
    /// a mistake can move.
    fn set_access_check(&mut self, _on: bool) {}
    /// The daemon's pace: `idle` when nothing the source reported for a while was a page to
    /// move, so a source that can (DAMON) samples less often until something is; `false`
    /// brings it back to its configured resolution at once.
    ///
    /// # Errors
    /// The source's own error (DAMON: a sysfs write or `commit` failed).
    fn set_pace(&mut self, _idle: bool) -> Result<(), SourceError> {
        Ok(())
    }
    /// The intervals in force, for sources that have them.
    fn intervals(&self) -> Option<crate::status::IntervalsSnapshot> {
        None
    }
    /// Appends what the source survived since the last call, by reason (e.g.
    /// `damon_kdamond_stopped`), for the daemon's fault counters.
    fn drain_events(&mut self, _out: &mut Vec<&'static str>) {}
    /// Appends the idle ranges of the source's last read (none for sources that only see
    /// accesses), replacing nothing: the caller keeps the latest picture.
    fn drain_idle(&mut self, _out: &mut Vec<IdleRange>) {}
    /// Stops the source and gives back what it borrowed from the kernel.
    fn stop(&mut self);
}

/// Capabilities and the effective uid of the running process, from `/proc/self/status`
/// (`CapEff:` is a hex mask; `Uid:` real, effective, saved, fs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Privileges {
    /// The effective capability mask.
    pub cap_eff: u64,
    /// The effective uid.
    pub euid: Option<u32>,
}

/// `CAP_SYS_ADMIN` (include/uapi/linux/capability.h).
pub const CAP_SYS_ADMIN: u32 = 21;
/// `CAP_PERFMON` (include/uapi/linux/capability.h, 5.8+).
pub const CAP_PERFMON: u32 = 38;

impl Privileges {
    /// Parses the text of `/proc/PID/status`. Missing lines give an empty mask.
    #[must_use]
    pub fn parse_status(text: &str) -> Self {
        let mut p = Privileges::default();
        for line in text.lines() {
            if let Some(v) = line.strip_prefix("CapEff:") {
                p.cap_eff = u64::from_str_radix(v.trim(), 16).unwrap_or(0);
            } else if let Some(v) = line.strip_prefix("Uid:") {
                p.euid = v.split_whitespace().nth(1).and_then(|u| u.parse().ok());
            }
        }
        p
    }

    /// Reads `<proc_root>/self/status`; unreadable means no privileges known.
    #[must_use]
    pub fn read(proc_root: &Path) -> Self {
        std::fs::read_to_string(proc_root.join("self/status"))
            .map(|t| Self::parse_status(&t))
            .unwrap_or_default()
    }

    /// Whether the capability `cap` is effective.
    #[must_use]
    pub fn has(self, cap: u32) -> bool {
        cap < 64 && self.cap_eff & (1 << cap) != 0
    }

    /// Root or `CAP_SYS_ADMIN`: what DAMON sysfs and idle page tracking need.
    #[must_use]
    pub fn is_admin(self) -> bool {
        self.has(CAP_SYS_ADMIN) || self.euid == Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn privileges_from_status() {
        let text = "Name:\tx\nUid:\t1000\t0\t0\t0\nCapEff:\t0000004000200000\n";
        let p = Privileges::parse_status(text);
        assert_eq!(p.euid, Some(0));
        assert!(p.has(CAP_SYS_ADMIN));
        assert!(p.has(CAP_PERFMON));
        assert!(!p.has(0));
        let none = Privileges::parse_status("Uid:\t1000\t1000\t1000\t1000\nCapEff:\t0\n");
        assert!(!none.is_admin());
        assert_eq!(none.euid, Some(1000));
    }

    #[test]
    fn status_lines_are_readable() {
        let s = SourceStatus::unavailable(SourceName::ArmSpe, "no arm_spe PMU");
        assert_eq!(s.to_string(), "arm_spe     unavailable: no arm_spe PMU");
        assert_eq!(
            SourceName::Damon.engine_kind(),
            tierd_engine::SourceKind::AccessedBitScan
        );
    }

    #[test]
    fn probe_all_reports_every_source_on_an_empty_tree() {
        let dir = tempfile::tempdir().unwrap();
        let all = probe_all(&dir.path().join("sys"), &dir.path().join("proc"));
        let kinds: Vec<_> = all.iter().map(|s| s.kind).collect();
        assert_eq!(
            kinds,
            vec![
                SourceName::Damon,
                SourceName::IdlePage,
                SourceName::AmdIbsOp,
                SourceName::IntelPebs,
                SourceName::ArmSpe
            ]
        );
        assert!(all.iter().all(|s| !s.available && !s.reason.is_empty()));
    }
}
