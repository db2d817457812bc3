//! Hotness sources of the Linux backend.
//!
//! Each source reports raw facts (a pid and a virtual page or range, how hot, when); the
//! backend resolves the page's node and feeds the engine. Each source also has a conversion
//! to [`tierd_engine::Observation`]s given a node-lookup closure, so that the conversion is
//! tested here:
//!
//! - [`idle`]: idle page tracking (`/sys/kernel/mm/page_idle/bitmap`) over the pages pagemap
//!   shows; an accessed-bit scan.
//! - [`damon`]: DAMON's `vaddr` monitoring through its sysfs interface, read back through a
//!   `stat` scheme's `tried_regions`; an accessed-bit scan at region granularity.
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
pub mod idle;
pub mod perf;

use std::fmt;
use std::path::Path;

use tierd_engine::types::{NodeId, PageRef};

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

/// Looks up the node a page is on; `None` when the page is gone or not present (the
/// observation is then dropped). The backend implements it with `move_pages(nodes=NULL)` or
/// a PFN-to-node table.
pub trait NodeLookup: FnMut(PageRef) -> Option<NodeId> {}
impl<F: FnMut(PageRef) -> Option<NodeId>> NodeLookup for F {}

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
