//! The accessed-bit scan's resolution: its interval, tuned at run time as DAMON tunes its
//! sampling interval, and the weight of what it finds.
//!
//! # Interval auto-tuning (DAMON `intervals_goal`, Linux 6.15+)
//!
//! DAMON (mm/damon/core.c, `kdamond_tune_intervals()`, `damon_get_intervals_score()`,
//! `damon_get_intervals_adaptation_bp()`, `damon_feed_loop_next_input()`) tunes its sampling
//! interval toward a goal share of "access events": the accessed samples of the last
//! aggregation over all the samples it could have found accessed, in basis points
//! (`access_bp`). Too few found accessed: the interval is too short to see anything, lengthen
//! it. Too many: it is so long that every page looks alike, shorten it. Every `aggrs`
//! aggregations:
//!
//! 1. `score_bp = found x 10000 / (possible x access_bp / 10000)`;
//! 2. `next = damon_feed_loop_next_input(10^8, score_bp)`, a proportional step toward the goal
//!    score of 10,000, whose result over 10,000 is `adaptation_bp = 20000 - score_bp` clamped
//!    to `[1, 20000]`;
//! 3. an `adaptation_bp` at or below 10,000 is rescaled to `5000 + adaptation_bp / 2`, so one
//!    step at most halves the interval (and at most doubles it);
//! 4. `interval = clamp(interval x adaptation_bp / 10000, min_sample_us, max_sample_us)`.
//!
//! The simulator applies the same rule to tierd's accessed-bit scan (idle page tracking, or
//! DAMON vaddr at one page per region), where one scan checks every page once: a scan plays
//! the part of an aggregation, `scans` that of `aggrs`, and the share is measured on the
//! slow-tier pages, the promotion candidates the scan exists to find (it scans the fast tier
//! too, for the demoter, but a fast tier full of hot pages says nothing about how often to look
//! for new ones). Like the kernel, a tuning uses the last scan only. Everything is a function
//! of the simulated time and the scan's draws: no wall clock.
//!
//! # Weight
//!
//! A scan reports a page found accessed with the number of the last [`HISTORY_SCANS`] scans
//! (this one included) that found it accessed, as DAMON's `nr_accesses` counts the samples of
//! an aggregation that found a region accessed. A page found by every scan weighs 8, a
//! lukewarm page found now and then 1 or 2, so the engine's relative threshold (which adds
//! the weights into a decayed heat) ranks them apart although one bit per scan cannot say
//! how often a page was touched.

use serde::{Deserialize, Serialize};
use tierd_engine::feedback::intervals_adaptation_bp;

/// How many past scans a page's weight counts (assumption: DAMON's default aggregation is
/// 20 samples; 8 fit a byte and span 8 intervals, long enough to tell a page found every time
/// from one found once).
pub const HISTORY_SCANS: u32 = 8;

/// A goal for the scan interval (DAMON's `damon_intervals_goal`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntervalsGoal {
    /// Target share of scanned slow-tier pages found accessed, basis points (`access_bp`).
    pub access_bp: u32,
    /// Scans between two tunings (`aggrs`; one scan is one aggregation here).
    pub scans: u32,
    /// Shortest interval, ms (`min_sample_us`).
    pub min_interval_ms: u64,
    /// Longest interval, ms (`max_sample_us`).
    pub max_interval_ms: u64,
}

impl IntervalsGoal {
    /// Why the goal is unusable, if it is.
    #[must_use]
    pub fn problem(&self) -> Option<&'static str> {
        if self.access_bp == 0 || self.access_bp > 10_000 {
            Some("access_bp must be in 1..=10000")
        } else if self.scans == 0 {
            Some("scans must be positive")
        } else if self.min_interval_ms == 0 || self.min_interval_ms > self.max_interval_ms {
            Some("min_interval_ms must be positive and at most max_interval_ms")
        } else {
            None
        }
    }
}

/// `damon_get_intervals_score()`: the share found accessed over the goal share, basis points.
#[must_use]
pub fn intervals_score(found: u64, possible: u64, access_bp: u32) -> u64 {
    let target = (u128::from(possible) * u128::from(access_bp) / 10_000).max(1);
    u64::try_from(u128::from(found) * 10_000 / target).unwrap_or(u64::MAX)
}

/// The scan interval and its tuning.
#[derive(Clone, Debug)]
pub struct IntervalTuner {
    goal: Option<IntervalsGoal>,
    interval_ns: u64,
    scans_left: u32,
}

impl IntervalTuner {
    /// Starts at `first_ms` (clamped into the goal's bounds), fixed when there is no goal.
    #[must_use]
    pub fn new(first_ms: u64, goal: Option<IntervalsGoal>) -> Self {
        let ms = match goal {
            Some(g) => first_ms.clamp(g.min_interval_ms, g.max_interval_ms.max(1)),
            None => first_ms,
        };
        IntervalTuner {
            goal,
            interval_ns: ms.max(1) * 1_000_000,
            scans_left: goal.map_or(0, |g| g.scans),
        }
    }

    /// The interval in force, ns.
    #[must_use]
    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    /// One scan found `found` of `possible` slow-tier pages accessed; every `scans` scans the
    /// interval is tuned from this scan's share. Returns whether it was tuned.
    pub fn after_scan(&mut self, found: u64, possible: u64) -> bool {
        let Some(g) = self.goal else {
            return false;
        };
        self.scans_left = self.scans_left.saturating_sub(1);
        if self.scans_left > 0 {
            return false;
        }
        self.scans_left = g.scans;
        let a = intervals_adaptation_bp(intervals_score(found, possible, g.access_bp));
        let us = self.interval_ns / 1000;
        let next_us = u64::try_from(u128::from(us) * u128::from(a) / 10_000)
            .unwrap_or(u64::MAX)
            .clamp(g.min_interval_ms * 1000, g.max_interval_ms * 1000);
        self.interval_ns = next_us * 1000;
        true
    }
}

/// Per-unit record of the last [`HISTORY_SCANS`] scans: the bits of the scans that found the
/// unit accessed, and the scan that last did (24 bits, wrapping).
#[derive(Clone, Debug, Default)]
pub struct ScanHistory {
    /// `scan << 8 | bits`, by unit id; allocated zeroed on first use (untouched pages stay
    /// unallocated by the kernel).
    units: Vec<u32>,
    scan: u32,
}

const SCAN_MASK: u32 = 0x00FF_FFFF;

impl ScanHistory {
    /// Starts a scan over `nr_units` units.
    pub fn begin_scan(&mut self, nr_units: usize) {
        if self.units.len() < nr_units {
            self.units.resize(nr_units, 0);
        }
        // Scan numbers start at 1, so that a zero record means "never found".
        self.scan = (self.scan + 1) & SCAN_MASK;
        if self.scan == 0 {
            self.scan = 1;
        }
    }

    /// The current scan found `unit` accessed: returns how many of the last
    /// [`HISTORY_SCANS`] scans, this one included, did.
    pub fn found(&mut self, unit: usize) -> u32 {
        let Some(rec) = self.units.get_mut(unit) else {
            return 1;
        };
        let at = *rec >> 8;
        let gap = self.scan.wrapping_sub(at) & SCAN_MASK;
        let old = *rec & 0xFF;
        let bits = if at == 0 || gap >= HISTORY_SCANS {
            0
        } else {
            (old << gap) & 0xFF
        } | 1;
        *rec = (self.scan << 8) | bits;
        bits.count_ones()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptation_follows_the_kernel() {
        // On goal: no change.
        assert_eq!(intervals_adaptation_bp(10_000), 10_000);
        // Nothing found: double.
        assert_eq!(intervals_adaptation_bp(0), 20_000);
        // Half the goal: x1.5.
        assert_eq!(intervals_adaptation_bp(5_000), 15_000);
        // 1.5x the goal: 2 - 1.5 = 0.5, rescaled to 0.75.
        assert_eq!(intervals_adaptation_bp(15_000), 7_500);
        // Twice the goal or more: halve, never less.
        assert_eq!(intervals_adaptation_bp(20_000), 5_000);
        assert_eq!(intervals_adaptation_bp(1_000_000), 5_000);
        // Score: 4 % found with a 4 % goal is on goal.
        assert_eq!(intervals_score(400, 10_000, 400), 10_000);
        assert_eq!(
            intervals_score(0, 0, 400),
            0,
            "no pages: no division by zero"
        );
    }

    #[test]
    fn the_tuner_moves_toward_the_goal_within_its_bounds() {
        let goal = IntervalsGoal {
            access_bp: 400,
            scans: 2,
            min_interval_ms: 1000,
            max_interval_ms: 8000,
        };
        let mut t = IntervalTuner::new(100, Some(goal));
        assert_eq!(t.interval_ns(), 1_000_000_000, "clamped to the minimum");
        // Too many found: shorter, but not below the minimum; tuned every second scan.
        assert!(!t.after_scan(5000, 10_000));
        assert!(t.after_scan(5000, 10_000));
        assert_eq!(t.interval_ns(), 1_000_000_000);
        // Nothing found: doubles up to the maximum.
        let mut seen = Vec::new();
        for _ in 0..10 {
            t.after_scan(0, 10_000);
            seen.push(t.interval_ns() / 1_000_000);
        }
        assert_eq!(
            seen,
            [1000, 2000, 2000, 4000, 4000, 8000, 8000, 8000, 8000, 8000]
        );
        // Too many again: halves.
        t.after_scan(5000, 10_000);
        t.after_scan(5000, 10_000);
        assert_eq!(t.interval_ns() / 1_000_000, 4000);
        // No goal: fixed.
        let mut f = IntervalTuner::new(60_000, None);
        assert!(!f.after_scan(0, 10));
        assert_eq!(f.interval_ns(), 60_000_000_000);
    }

    #[test]
    fn the_weight_counts_the_last_eight_scans() {
        let mut h = ScanHistory::default();
        let mut w = Vec::new();
        for s in 0..12 {
            h.begin_scan(4);
            // Unit 0 found every scan; unit 1 every third.
            w.push(h.found(0));
            if s % 3 == 0 {
                assert!(h.found(1) <= 3);
            }
        }
        assert_eq!(w, [1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 8, 8]);
        // Unit 1 was found at scans 0, 3, 6, 9; the next finding (scan 12) counts 6, 9, 12.
        h.begin_scan(4);
        assert_eq!(h.found(1), 3);
        // A unit not found for 8 scans starts over.
        for _ in 0..8 {
            h.begin_scan(4);
        }
        assert_eq!(h.found(0), 1);
        assert_eq!(h.found(7), 1, "out of range: counted once");
    }
}
