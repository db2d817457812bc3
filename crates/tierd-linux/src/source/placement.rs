//! Where recently located pages are known to be: the cache that keeps a settled hot set from
//! being located again on every read of a source.
//!
//! Once the hot set sits on the fast tier, a region-based source (DAMON) reports the same hot
//! regions on every read, and [`super::locate::locate`] would map each of their pages to its
//! folio (pagemap, kpageflags) and node again, to feed the engine observations it only needs
//! now and then: pghot ignores top-tier pages, and tierd's demoter and relative threshold need
//! their recency and heat at the scale of seconds. In lab A that per-page work was 70 % of the
//! daemon's CPU (issue 14).
//!
//! So a page [`locate`](super::locate::locate) found on a fast node joins a *run* of pages
//! known to be there (per process, disjoint, sorted), and for the next `reverify` it is not
//! resolved or looked up again: its region counts it as a fast page (so the region's heat is
//! still explained by its fast part, [`super::locate::slow_part_is_hot`]) and it feeds no
//! observation. When its run is due, its pages go through `locate` once more; the fast ones
//! are observed with their weight scaled by the reads they were skipped for
//! ([`PlacementCache::weight_scale`]), so the engine's heat of fast pages stays what it would
//! have been had they been observed on every read.
//!
//! What makes a run wrong, and what is done about it:
//!
//! * tierd moved the pages: promoted pages join a run, demoted ones leave it
//!   ([`PlacementCache::moved`]);
//! * the process's mappings changed (mmap, munmap, mremap): its runs are dropped
//!   ([`PlacementCache::forget`], on the daemon's refresh, which hashes `/proc/PID/maps`);
//! * the kernel moved pages (reclaim's demotion, compaction, NUMA balancing): the daemon
//!   drops every run when `pgmigrate_success` grew by more than tierd's own moves
//!   ([`PlacementCache::clear`]);
//! * anything else (a page swapped out and back in): the run is verified again after
//!   `reverify` at the latest, and a located page found on a slow node leaves its run.
//!
//! The cache also remembers which pages tierd itself promoted ([`PlacementCache::promoted_pages`]),
//! for as long as the process's mappings stand and tierd has not demoted them: a region of
//! those is the hot set the DAMON source measures other regions against (its relative floor,
//! [`super::locate::locate_cached`]), even once every page of it is known fast. A region that
//! was fast from the start (a load generator's buffers) is not.
//!
//! A disabled cache (`reverify` 0) knows nothing and `locate` behaves as without it.

use std::collections::BTreeMap;

use rangemap::RangeSet;
use tierd_engine::types::{Nanos, NodeId};

/// One run of pages of one process known to sit on `node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    /// One past the last page (vpn).
    end: u64,
    node: NodeId,
    /// When its pages were last located.
    verified: Nanos,
    /// When its pages last fed observations.
    observed: Nanos,
}

/// What the cache saved and why it forgot, summed over the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlacementStats {
    /// Base pages of source ranges that were known fast and not located again.
    pub skipped_pages: u64,
    /// Base pages of runs whose verification was due and that were located again.
    pub reverified_pages: u64,
    /// Times every run was dropped (the kernel moved pages itself).
    pub cleared: u64,
    /// Processes whose runs were dropped (their mappings changed, or they left).
    pub forgotten: u64,
}

/// Runs of pages known to be on a fast node, per process (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct PlacementCache {
    /// Per pid: start vpn -> run.
    runs: BTreeMap<u32, BTreeMap<u64, Run>>,
    /// Per pid: the vpns tierd promoted and has not demoted since. Unlike the runs, these
    /// are not dropped when the kernel moves pages ([`PlacementCache::clear`]) or when nothing
    /// verifies them: a page the kernel demoted is slow again and its region counts anyway,
    /// and the set is bounded by the process's mappings, whose change drops it.
    promoted: BTreeMap<u32, RangeSet<u64>>,
    /// How long a run is trusted; zero disables the cache.
    reverify: Nanos,
    /// How often the sources are read: the scale of a skipped read.
    read_interval: Nanos,
    /// What it did.
    pub stats: PlacementStats,
}

/// The largest weight scale: a page skipped for more reads than this counts as this many.
pub const MAX_WEIGHT_SCALE: u32 = 64;

impl PlacementCache {
    /// A cache that trusts a run for `reverify`, for sources read every `read_interval`.
    #[must_use]
    pub fn new(reverify: Nanos, read_interval: Nanos) -> Self {
        PlacementCache {
            reverify,
            read_interval,
            ..PlacementCache::default()
        }
    }

    /// A cache that knows nothing (every page is located on every read).
    #[must_use]
    pub fn disabled() -> Self {
        PlacementCache::default()
    }

    /// Whether the cache keeps anything.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.reverify.0 > 0
    }

    /// Pages in runs, over all processes.
    #[must_use]
    pub fn pages(&self) -> u64 {
        self.runs
            .values()
            .flat_map(|m| m.iter().map(|(s, r)| r.end - s))
            .sum()
    }

    /// The parts of `[start, end)` of `pid` known to be on a fast node and not due for
    /// verification at `now`, as `(start, end)` in vpns, sorted; and the due parts, with when
    /// they were last observed.
    #[must_use]
    pub fn split(&self, pid: u32, start: u64, end: u64, now: Nanos) -> Split {
        let mut s = Split::default();
        if !self.enabled() || start >= end {
            return s;
        }
        let Some(m) = self.runs.get(&pid) else {
            return s;
        };
        // The run that starts before `start` may reach into the range.
        let first = m.range(..=start).next_back().map_or(start, |(k, _)| *k);
        for (&rs, r) in m.range(first..end) {
            let (a, b) = (rs.max(start), r.end.min(end));
            if a >= b {
                continue;
            }
            if now.saturating_sub(r.verified) < self.reverify {
                s.known.push((a, b));
            } else {
                s.due.push((a, b, r.observed));
            }
        }
        s
    }

    /// How many reads' worth an observation of a page last observed at `observed` stands
    /// for: the reads skipped since, at least 1, at most [`MAX_WEIGHT_SCALE`].
    #[must_use]
    pub fn weight_scale(&self, observed: Nanos, now: Nanos) -> u32 {
        if self.read_interval.0 == 0 {
            return 1;
        }
        let reads = now.saturating_sub(observed).0 / self.read_interval.0;
        u32::try_from(reads)
            .unwrap_or(u32::MAX)
            .clamp(1, MAX_WEIGHT_SCALE)
    }

    /// Records that `[start, end)` of `pid` was located at `now` on `node`: on a fast node
    /// (`fast`) it joins a run, on any other it leaves every run.
    pub fn learn(&mut self, pid: u32, start: u64, end: u64, node: NodeId, fast: bool, now: Nanos) {
        if !self.enabled() || start >= end {
            return;
        }
        if fast {
            self.insert(
                pid,
                start,
                Run {
                    end,
                    node,
                    verified: now,
                    observed: now,
                },
            );
        } else {
            self.remove(pid, start, end);
        }
    }

    /// Pages tierd moved: to a fast node (`Some`) they join a run and the promoted set,
    /// elsewhere (`None`) they leave both.
    pub fn moved(&mut self, pid: u32, start: u64, end: u64, fast_node: Option<NodeId>, now: Nanos) {
        if !self.enabled() || start >= end {
            return;
        }
        match fast_node {
            Some(n) => {
                self.learn(pid, start, end, n, true, now);
                self.promoted.entry(pid).or_default().insert(start..end);
            }
            None => {
                self.remove(pid, start, end);
                if let Some(set) = self.promoted.get_mut(&pid) {
                    set.remove(start..end);
                    if set.is_empty() {
                        self.promoted.remove(&pid);
                    }
                }
            }
        }
    }

    /// Pages of `[start, end)` of `pid` that tierd promoted and has not demoted since.
    #[must_use]
    pub fn promoted_pages(&self, pid: u32, start: u64, end: u64) -> u64 {
        if start >= end {
            return 0;
        }
        self.promoted.get(&pid).map_or(0, |set| {
            set.overlapping(start..end)
                .map(|r| r.end.min(end) - r.start.max(start))
                .sum()
        })
    }

    /// Drops `pid`'s runs and promoted pages (its mappings changed, or it left).
    pub fn forget(&mut self, pid: u32) {
        let had_runs = self.runs.remove(&pid).is_some();
        let had_promoted = self.promoted.remove(&pid).is_some();
        if had_runs || had_promoted {
            self.stats.forgotten += 1;
        }
    }

    /// Drops every run (the kernel moved pages itself).
    pub fn clear(&mut self) {
        if !self.runs.is_empty() {
            self.runs.clear();
            self.stats.cleared += 1;
        }
    }

    /// Drops runs not verified for four `reverify` periods (their pages are no longer
    /// reported accessed, so nothing verifies them: they would only grow stale).
    pub fn prune(&mut self, now: Nanos) {
        let old = Nanos(self.reverify.0.saturating_mul(4));
        for m in self.runs.values_mut() {
            m.retain(|_, r| now.saturating_sub(r.verified) < old);
        }
        self.runs.retain(|_, m| !m.is_empty());
    }

    /// Removes `[start, end)` from `pid`'s runs, trimming or splitting the runs it cuts.
    fn remove(&mut self, pid: u32, start: u64, end: u64) {
        let Some(m) = self.runs.get_mut(&pid) else {
            return;
        };
        let first = m.range(..start).next_back().map_or(start, |(k, _)| *k);
        let cut: Vec<(u64, Run)> = m.range(first..end).map(|(k, r)| (*k, *r)).collect();
        for (rs, r) in cut {
            if r.end <= start || rs >= end {
                continue;
            }
            m.remove(&rs);
            if rs < start {
                m.insert(rs, Run { end: start, ..r });
            }
            if r.end > end {
                m.insert(end, r);
            }
        }
        if m.is_empty() {
            self.runs.remove(&pid);
        }
    }

    /// Inserts a run, replacing what it overlaps, and merges it with adjacent runs on the
    /// same node verified at about the same time (within an eighth of `reverify`; taking the
    /// earlier times, so a merged run is due no later than its parts). A run verified much
    /// earlier stays apart: merging would date the new pages back and keep a run that is
    /// re-learned page by page from ever getting younger.
    fn insert(&mut self, pid: u32, start: u64, run: Run) {
        self.remove(pid, start, run.end);
        let close = Nanos(self.reverify.0 / 8);
        let near = |a: Nanos, b: Nanos| a.0.abs_diff(b.0) <= close.0;
        let m = self.runs.entry(pid).or_default();
        let (mut s, mut r) = (start, run);
        if let Some((&ps, p)) = m.range(..s).next_back() {
            if p.end == s && p.node == r.node && near(p.verified, r.verified) {
                r.verified = r.verified.min(p.verified);
                r.observed = r.observed.min(p.observed);
                s = ps;
                m.remove(&ps);
            }
        }
        if let Some(n) = m.get(&r.end).copied() {
            if n.node == r.node && near(n.verified, r.verified) {
                m.remove(&r.end);
                r.verified = r.verified.min(n.verified);
                r.observed = r.observed.min(n.observed);
                r.end = n.end;
            }
        }
        m.insert(s, r);
    }
}

/// What [`PlacementCache::split`] found in a range.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// Parts known fast and trusted: not to be located.
    pub known: Vec<(u64, u64)>,
    /// Parts known fast whose verification is due, with when they were last observed.
    pub due: Vec<(u64, u64, Nanos)>,
}

impl Split {
    /// Pages in the known parts.
    #[must_use]
    pub fn known_pages(&self) -> u64 {
        self.known.iter().map(|(a, b)| b - a).sum()
    }

    /// When the due part holding `vpn` was last observed, if one holds it.
    #[must_use]
    pub fn due_observed(&self, vpn: u64) -> Option<Nanos> {
        self.due
            .iter()
            .find(|(a, b, _)| (*a..*b).contains(&vpn))
            .map(|(_, _, t)| *t)
    }

    /// The sub-ranges of `[start, end)` outside the known parts, in order.
    #[must_use]
    pub fn gaps(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = start;
        for &(a, b) in &self.known {
            if a > at {
                out.push((at, a));
            }
            at = at.max(b);
        }
        if at < end {
            out.push((at, end));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = Nanos(1_000_000_000);

    fn cache() -> PlacementCache {
        PlacementCache::new(Nanos(10 * S.0), Nanos(S.0 / 2))
    }

    #[test]
    fn a_learned_fast_run_is_known_until_due_then_due() {
        let mut c = cache();
        c.learn(7, 100, 200, NodeId(0), true, S);
        let s = c.split(7, 50, 150, Nanos(5 * S.0));
        assert_eq!(s.known, vec![(100, 150)]);
        assert!(s.due.is_empty());
        assert_eq!(s.gaps(50, 150), vec![(50, 100)]);
        assert_eq!(s.known_pages(), 50);
        // Eleven seconds later the run is due.
        let s = c.split(7, 50, 250, Nanos(12 * S.0));
        assert!(s.known.is_empty());
        assert_eq!(s.due, vec![(100, 200, S)]);
        assert_eq!(s.due_observed(150), Some(S));
        assert_eq!(s.due_observed(250), None);
        // Another process knows nothing.
        assert_eq!(c.split(8, 0, 1000, S), Split::default());
    }

    #[test]
    fn slow_pages_and_demotions_leave_runs_promotions_join() {
        let mut c = cache();
        c.learn(1, 0, 100, NodeId(0), true, S);
        // The kernel demoted 40..60: located on the slow node.
        c.learn(1, 40, 60, NodeId(1), false, S);
        assert_eq!(c.split(1, 0, 100, S).known, vec![(0, 40), (60, 100)]);
        // tierd demoted 0..10, promoted 200..210.
        c.moved(1, 0, 10, None, S);
        c.moved(1, 200, 210, Some(NodeId(0)), S);
        assert_eq!(
            c.split(1, 0, 300, S).known,
            vec![(10, 40), (60, 100), (200, 210)]
        );
        assert_eq!(c.pages(), 30 + 40 + 10);
        c.forget(1);
        assert_eq!(c.pages(), 0);
        assert_eq!(c.stats.forgotten, 1);
    }

    #[test]
    fn promoted_pages_outlive_the_runs_until_tierd_demotes_them_or_the_mappings_change() {
        let mut c = cache();
        c.moved(1, 100, 200, Some(NodeId(0)), S);
        c.moved(1, 300, 310, Some(NodeId(0)), S);
        // Pages only located on a fast node were not promoted by tierd.
        c.learn(1, 0, 50, NodeId(0), true, S);
        assert_eq!(c.promoted_pages(1, 0, 1000), 110);
        assert_eq!(c.promoted_pages(1, 150, 305), 55);
        assert_eq!(c.promoted_pages(2, 0, 1000), 0);
        // The kernel moved pages (every run dropped), nothing verified them for a long time:
        // the runs are gone, the promoted pages are still known.
        c.clear();
        c.prune(Nanos(100 * S.0));
        assert_eq!(c.pages(), 0);
        assert_eq!(c.promoted_pages(1, 0, 1000), 110);
        // tierd demoted part of them.
        c.moved(1, 150, 160, None, S);
        assert_eq!(c.promoted_pages(1, 0, 1000), 100);
        assert_eq!(c.promoted_pages(1, 150, 160), 0);
        // The mappings changed.
        c.forget(1);
        assert_eq!(c.promoted_pages(1, 0, 1000), 0);
        assert_eq!(c.stats.forgotten, 1);
        // A disabled cache knows nothing.
        let mut off = PlacementCache::disabled();
        off.moved(1, 0, 10, Some(NodeId(0)), S);
        assert_eq!(off.promoted_pages(1, 0, 10), 0);
    }

    #[test]
    fn adjacent_runs_merge_keeping_the_earlier_times_and_prune_drops_stale_ones() {
        let mut c = cache();
        c.learn(1, 0, 10, NodeId(0), true, S);
        c.learn(1, 10, 20, NodeId(0), true, Nanos(2 * S.0));
        c.learn(1, 20, 30, NodeId(1), true, Nanos(3 * S.0));
        c.learn(1, 30, 40, NodeId(1), true, Nanos(9 * S.0));
        // 0..20 merged with the first run's time: due at 11 s; 20..30 is another node;
        // 30..40 was verified 6 s later than 20..30 and stays apart.
        let s = c.split(1, 0, 40, Nanos(12 * S.0));
        assert_eq!(s.due, vec![(0, 20, S)]);
        assert_eq!(s.known, vec![(20, 30), (30, 40)]);
        c.prune(Nanos(42 * S.0));
        assert_eq!(c.pages(), 20);
        c.prune(Nanos(44 * S.0));
        assert_eq!(c.pages(), 10);
        c.prune(Nanos(50 * S.0));
        assert_eq!(c.pages(), 0);
    }

    #[test]
    fn weight_scale_counts_skipped_reads() {
        let c = cache();
        assert_eq!(c.weight_scale(S, S), 1);
        assert_eq!(c.weight_scale(S, Nanos(6 * S.0)), 10);
        assert_eq!(
            c.weight_scale(Nanos(0), Nanos(1000 * S.0)),
            MAX_WEIGHT_SCALE
        );
    }

    #[test]
    fn a_disabled_cache_knows_nothing() {
        let mut c = PlacementCache::disabled();
        c.learn(1, 0, 100, NodeId(0), true, S);
        assert_eq!(c.split(1, 0, 100, S), Split::default());
        assert!(!c.enabled());
    }

    /// The runs always equal a page-by-page model: random learns, moves and removals.
    #[test]
    fn runs_match_a_page_oracle() {
        use std::collections::HashMap;
        let mut c = cache();
        let mut oracle: HashMap<u64, NodeId> = HashMap::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..2000 {
            let a = next(200);
            let b = a + 1 + next(20);
            let node = NodeId(u16::try_from(next(2)).unwrap_or(0));
            match next(3) {
                0 => {
                    c.learn(3, a, b, node, true, S);
                    for v in a..b {
                        oracle.insert(v, node);
                    }
                }
                1 => {
                    c.learn(3, a, b, node, false, S);
                    for v in a..b {
                        oracle.remove(&v);
                    }
                }
                _ => {
                    c.moved(3, a, b, None, S);
                    for v in a..b {
                        oracle.remove(&v);
                    }
                }
            }
            let known = c.split(3, 0, 300, S).known;
            for v in 0..300 {
                let in_run = known.iter().any(|(s, e)| (*s..*e).contains(&v));
                assert_eq!(in_run, oracle.contains_key(&v), "vpn {v}");
            }
        }
    }
}
