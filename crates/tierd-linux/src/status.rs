//! The daemon's state as `/status` serves it (JSON), and the client that reads it.
//!
//! Plain data shared by the daemon (which fills it), `tierd status`, `tierd top`, the lab and
//! the end-to-end tests (which read it), so that none of those needs the daemon crate.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use tierd_engine::stats::StatDesc;
use tierd_engine::Stats;

/// Why `/status` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The status endpoint could not be read.
    #[error("cannot read status from {url}: {reason}")]
    Fetch {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
}

/// One NUMA node as the daemon sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSnapshot {
    /// Node id.
    pub id: u32,
    /// Index of its memory tier, 0 = fastest.
    pub tier: u32,
    /// Whether it has CPUs.
    pub has_cpus: bool,
    /// Memory, bytes.
    pub total_bytes: u64,
    /// Free memory, bytes.
    pub free_bytes: u64,
}

/// One process in scope.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSnapshot {
    /// Process id.
    pub pid: u32,
    /// Command name.
    pub comm: String,
    /// cgroup v2 path.
    pub cgroup: String,
    /// Base pages on each node (from `numa_maps`).
    pub pages_per_node: BTreeMap<u32, u64>,
    /// Of which hot, per node: distinct base pages that a hotness source reported accessed
    /// (and `move_pages(2)` located) during the last refresh period (`daemon.refresh_ms`).
    /// Empty from a daemon that predates the field.
    #[serde(default)]
    pub hot_pages_per_node: BTreeMap<u32, u64>,
}

/// A hotness source and whether it runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceSnapshot {
    /// Source name (`damon`, `idle`, `perf`).
    pub name: String,
    /// Whether it is running.
    pub available: bool,
    /// Why not, or what it runs on.
    pub reason: String,
    /// A source with tuned intervals (DAMON): the ones in force now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intervals: Option<IntervalsSnapshot>,
}

/// A source's sampling and aggregation intervals as they are now (tuned at run time).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntervalsSnapshot {
    /// Who tunes them: `off`, `kernel` (DAMON's `intervals_goal`, 6.15+) or `userspace`.
    pub tuning: String,
    /// Sampling interval, µs.
    pub sample_us: u64,
    /// Aggregation interval, µs.
    pub aggr_us: u64,
    /// Times the regions were read back since the start.
    #[serde(default)]
    pub reads: u64,
    /// Regions of the last read (DAMON's `tried_regions`, every target's).
    #[serde(default)]
    pub last_regions: u64,
    /// The most regions one read returned.
    #[serde(default)]
    pub max_regions: u64,
    /// Where the regions are read from: `tracepoint` (DAMON's `damon_aggregated`, through a
    /// tracefs instance) or `sysfs` (`tried_regions`); empty for other sources.
    #[serde(default)]
    pub read_from: String,
    /// Reads that went through sysfs because the tracepoint gave no whole aggregation in
    /// time.
    #[serde(default)]
    pub trace_fallbacks: u64,
    /// Trace runs dropped incomplete, events the kernel reported lost, and lines that did
    /// not parse (skipped), since the start: what the tracepoint reader survived.
    #[serde(default)]
    pub trace_partial: u64,
    /// See `trace_partial`.
    #[serde(default)]
    pub trace_lost: u64,
    /// See `trace_partial`.
    #[serde(default)]
    pub trace_malformed: u64,
}

impl SourceSnapshot {
    /// `running` or `unavailable`, as `tierd run`, `tierd status` and `tierd top` print it.
    #[must_use]
    pub fn state(&self) -> &'static str {
        if self.available {
            "running"
        } else {
            "unavailable"
        }
    }
}

/// The mover's totals.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MoverSnapshot {
    /// `move_pages(2)` calls.
    pub calls: u64,
    /// Base pages moved.
    pub pages_moved: u64,
    /// Base pages that could not be moved, by reason (`busy`, `no_process`, ...).
    pub pages_failed: BTreeMap<String, u64>,
    /// Seconds spent inside `move_pages(2)`.
    pub seconds: f64,
}

/// The placement cache (docs/daemon.md, "Cost"): pages found on a fast node that are not
/// located again on every read of the sources. Page counts are base pages.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementSnapshot {
    /// Pages in the cache now.
    pub cached_pages: u64,
    /// Pages of source reports known fast and not located again, summed over the run.
    pub skipped_pages: u64,
    /// Pages located again because their trust period ended, summed over the run.
    pub reverified_pages: u64,
    /// Times the whole cache was dropped because the kernel migrated pages itself.
    pub cleared: u64,
    /// Times a process's entries were dropped (its mappings changed, or it left).
    pub forgotten: u64,
}

/// How the daemon maps what its sources saw to folios (THPs, hugetlb pages), and what it
/// could not (docs/daemon.md, "Huge pages"). Page counts are base (4 KiB) pages, summed over
/// the run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FolioSnapshot {
    /// The method in force: `kpageflags`, `smaps` or `unavailable` (empty from a daemon that
    /// predates it, or before the first lookup).
    pub method: String,
    /// Huge folios (THP or hugetlb) observed, each once per pass.
    pub huge_folios_observed: u64,
    /// Pages whose folio could not be told: never observed, never moved.
    pub unknown_pages: u64,
    /// Pages of hugetlb folios not observed because `daemon.hugetlb = "leave"`.
    pub hugetlb_left_pages: u64,
    /// Pages of hugetlb folios planned but not moved because the target node's pool had no
    /// free huge page of their size (`daemon.hugetlb = "move"`).
    pub hugetlb_no_free_pages: u64,
}

/// Everything `/status` returns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// tierd's version.
    pub version: String,
    /// Seconds since the daemon started.
    pub uptime_s: f64,
    /// Whether migrations are only planned.
    pub dry_run: bool,
    /// Nodes.
    pub nodes: Vec<NodeSnapshot>,
    /// Processes in scope.
    pub processes: Vec<ProcessSnapshot>,
    /// Sources.
    pub sources: Vec<SourceSnapshot>,
    /// Engine-wide counters by name (`pgpromote_success`, ...).
    pub engine: BTreeMap<String, u64>,
    /// Per-node engine counters.
    pub engine_nodes: BTreeMap<u32, BTreeMap<String, u64>>,
    /// Per-source engine counters.
    pub engine_sources: BTreeMap<String, BTreeMap<String, u64>>,
    /// The mover.
    pub mover: MoverSnapshot,
    /// Growth of the kernel's own `/proc/vmstat` counters since the daemon started.
    pub kernel_vmstat_delta: BTreeMap<String, u64>,
    /// CPU time of the daemon process, seconds (user + system).
    pub daemon_cpu_s: f64,
    /// Of which in the kernel (reading numa_maps and pagemap, move_pages, sysfs), seconds.
    #[serde(default)]
    pub daemon_cpu_sys_s: f64,
    /// The main loop's CPU time by phase, seconds (`refresh`, `sources`, `locate`, `usage`,
    /// `engine`, `move`, `publish`; docs/daemon.md "Cost"). Empty from a daemon that
    /// predates it.
    #[serde(default)]
    pub loop_cpu_s: BTreeMap<String, f64>,
    /// What the daemon survived, by reason (docs/daemon.md, "Failure model").
    #[serde(default)]
    pub faults: BTreeMap<String, u64>,
    /// Folios: the method in force and what it could not tell. Empty from a daemon that
    /// predates it.
    #[serde(default)]
    pub folios: FolioSnapshot,
    /// The placement cache. Empty from a daemon that predates it.
    #[serde(default)]
    pub placement: PlacementSnapshot,
    /// Whether the loop is idle now (nothing to move for `daemon.idle_after_ms`: the sources
    /// sample less often), and how many times it went idle.
    #[serde(default)]
    pub idle: bool,
    /// Times the loop went idle since the start.
    #[serde(default)]
    pub idle_periods: u64,
    /// Configuration reloads (SIGHUP) by result: `ok` (applied), `refused` (a change that
    /// needs a restart; the old configuration stays), `invalid` (the file does not parse or
    /// validate; the old configuration stays).
    #[serde(default)]
    pub config_reloads: BTreeMap<String, u64>,
}

fn named(values: Vec<(&'static StatDesc, u64)>) -> BTreeMap<String, u64> {
    values
        .into_iter()
        .map(|(d, v)| (d.name.to_string(), v))
        .collect()
}

impl Snapshot {
    /// Copies the engine's statistics in.
    pub fn set_engine_stats(&mut self, stats: &Stats) {
        self.engine = named(stats.engine.values());
        self.engine_nodes = stats
            .nodes
            .iter()
            .map(|(n, s)| (u32::from(n.0), named(s.values())))
            .collect();
        self.engine_sources = stats
            .sources
            .iter()
            .map(|(k, s)| (k.name().to_string(), named(s.values())))
            .collect();
    }
}

/// Reads `/status` from a running daemon.
///
/// # Errors
/// [`StatusError::Fetch`] when nothing answers or the answer is not a status.
pub fn fetch_status(addr: SocketAddr) -> Result<Snapshot, StatusError> {
    let url = format!("http://{addr}/status");
    let fail = |reason: String| StatusError::Fetch {
        url: url.clone(),
        reason,
    };
    // ureq's message starts with the URL, which ours already names.
    let resp = ureq::get(&url)
        .timeout(std::time::Duration::from_secs(5))
        .call()
        .map_err(|e| {
            let text = e.to_string();
            let reason = text.strip_prefix(&format!("{url}: ")).unwrap_or(&text);
            fail(reason.to_string())
        })?;
    let text = resp.into_string().map_err(|e| fail(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| fail(format!("not a tierd status: {e}")))
}

/// `s` as a terminal may show it: every control character (Unicode category Cc: the C0
/// controls U+0000-U+001F, DEL U+007F and the C1 controls U+0080-U+009F) escaped as `\x07`
/// (C0, DEL) or `\u{9b}` (C1); everything else, other Unicode included, left as it is.
///
/// Process names (`comm`, which any process sets with prctl(PR_SET_NAME)) and cgroup names
/// (any byte but `/` and NUL) are chosen by whoever runs them; printed raw, an ESC or a C1
/// CSI would drive the operator's terminal. Borrowed when there is nothing to escape.
#[must_use]
pub fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    use std::fmt::Write as _;
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            let v = u32::from(c);
            // Writing into a String cannot fail.
            let _ = if v < 0x80 {
                write!(out, "\\x{v:02x}")
            } else {
                write!(out, "\\u{{{v:x}}}")
            };
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod printable_tests {
    use super::printable;
    use proptest::prelude::*;

    /// The inverse of [`printable`] for strings that held no backslash.
    fn unescape(s: &str) -> String {
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find('\\') {
            out.push_str(&rest[..i]);
            let esc = &rest[i + 1..];
            let (hex, len) = if let Some(h) = esc.strip_prefix('x') {
                (&h[..2], 3)
            } else {
                let h = esc.strip_prefix("u{").expect("\\u{");
                let end = h.find('}').expect("}");
                (&h[..end], end + 3)
            };
            let c = u32::from_str_radix(hex, 16)
                .ok()
                .and_then(char::from_u32)
                .expect("an escaped char");
            out.push(c);
            rest = &esc[len..];
        }
        out.push_str(rest);
        out
    }

    #[test]
    fn controls_are_escaped_and_the_rest_left_alone() {
        assert_eq!(printable("chase"), "chase");
        assert!(matches!(printable("chase"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(printable("a\u{7}b"), "a\\x07b");
        assert_eq!(printable("\u{1b}[2J"), "\\x1b[2J");
        assert_eq!(printable("x\u{7f}"), "x\\x7f");
        assert_eq!(printable("\u{9b}31m"), "\\u{9b}31m");
        assert_eq!(printable("tab\there\nnl"), "tab\\x09here\\x0anl");
        // Not controls: no-break space, right-to-left mark, CJK, emoji.
        let other = "a\u{a0}b\u{200f}c漢字🦀";
        assert_eq!(printable(other), other);
    }

    proptest! {
        #[test]
        fn output_has_no_controls_and_round_trips(s in "\\PC*|[\\x00-\\x7f\\u{80}-\\u{a0}a-z\u{fe0f}]{0,40}") {
            let p = printable(&s);
            prop_assert!(!p.chars().any(char::is_control), "{p:?}");
            if !s.contains('\\') {
                prop_assert_eq!(unescape(&p), s.clone());
            }
            if !s.chars().any(char::is_control) {
                prop_assert_eq!(p.as_ref(), s.as_str());
            }
        }

        #[test]
        fn any_string_round_trips_without_backslashes(s in any::<String>()) {
            let s = s.replace('\\', "/");
            let p = printable(&s);
            prop_assert!(!p.chars().any(char::is_control));
            prop_assert_eq!(unescape(&p), s);
        }
    }
}

#[cfg(test)]
mod fetch_tests {
    #[test]
    fn a_daemon_that_is_not_there_is_named_once() {
        // A port nothing listens on: bound, then let go.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a local port");
        let e = super::fetch_status(addr).expect_err("nothing listens");
        let text = e.to_string();
        let url = format!("http://{addr}/status");
        assert!(
            text.starts_with(&format!("cannot read status from {url}: ")),
            "{text}"
        );
        assert_eq!(text.matches(&url).count(), 1, "{text}");
    }
}
