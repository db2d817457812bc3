//! Promotion rate limiting and the adaptive hot threshold.
//!
//! Three pieces, all per *target* (fast) node as in the kernel, where the state lives in the
//! target's `pglist_data`:
//!
//! - [`KernelWindowLimiter`]: the kernel's `numa_promotion_rate_limit()` (kernel/sched/fair.c,
//!   moved into pghot as part of `kmigrated_should_migrate_memory()` in mm/pghot.c). A fixed
//!   one-second window whose start moves to the first candidate seen more than 1000 ms after
//!   the previous start. Candidates are counted *before* the decision. Because the window is
//!   fixed, up to twice the limit can pass in a sliding second that straddles a boundary. The
//!   simulator's model of kernel NUMA balancing uses this one.
//! - [`SlidingWindowLimiter`]: what tierd's promoter uses. The same per-node MB/s budget, but
//!   enforced over every sliding one-second interval, so the admitted volume never exceeds the
//!   limit in *any* second. A userspace promoter pays for each `move_pages(2)` call on the
//!   application's behalf, and bursts of twice the configured rate were judged not acceptable.
//! - [`AdaptiveThreshold`]: `numa_promotion_adjust_threshold()` from kernel/sched/fair.c, reused
//!   verbatim by pghot with `ref_th = freq_window_ms` and a fixed 60 s period
//!   (`KMIGRATED_PROMOTION_THRESHOLD_WINDOW`).

use std::collections::VecDeque;

use serde::Serialize;

use crate::types::{Nanos, Pages};

/// Converts the kernel's MB/s knob to pages per second: `rate_limit_MBps << (20 - PAGE_SHIFT)`
/// (kernel/sched/fair.c `should_numa_migrate_memory()`).
#[must_use]
pub fn mbps_to_pages_per_s(mbps: u64) -> u64 {
    mbps.saturating_mul(1 << (20 - crate::types::PAGE_SHIFT))
}

/// The kernel's fixed-window promotion rate limiter (kernel/sched/fair.c
/// `numa_promotion_rate_limit()`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct KernelWindowLimiter {
    /// `pgpromote_candidate` of this node: every page that reached the rate limiter.
    pub nr_cand: u64,
    /// `pgdat->nbp_rl_start`, ms.
    rl_start_ms: u64,
    /// `pgdat->nbp_rl_nr_cand`: candidate count at the window start.
    rl_nr_cand: u64,
}

impl KernelWindowLimiter {
    /// Charges `nr` pages and answers whether the promotion is rate limited.
    ///
    /// ```text
    /// PGPROMOTE_CANDIDATE += nr
    /// if now - start > 1000 and cmpxchg(start -> now): snapshot = nr_cand
    /// limited = nr_cand - snapshot >= rate_limit
    /// ```
    pub fn charge(&mut self, now: Nanos, nr: Pages, rate_limit_pages: u64) -> bool {
        let now_ms = now.as_millis();
        self.nr_cand += nr.0;
        if now_ms.saturating_sub(self.rl_start_ms) > 1000 {
            self.rl_start_ms = now_ms;
            self.rl_nr_cand = self.nr_cand;
        }
        self.nr_cand - self.rl_nr_cand >= rate_limit_pages
    }
}

/// A rate limiter that admits at most `limit` pages in every sliding one-second interval.
///
/// Keeps the admissions still in the window in a queue; memory is bounded by the number of
/// admissions per second (one entry per promoter decision, merged per timestamp).
///
/// # Folios larger than the budget
///
/// A folio is admitted whole or not at all, charged all its base pages (the kernel charges
/// `nr` pages of the folio: kernel/sched/fair.c `numa_promotion_rate_limit(pgdat, rate_limit,
/// nr)`). A folio that does not fit in what is left of the budget waits for the window to
/// drain. One larger than the *whole* budget (a 1 GiB page against 64 MiB/s, a 2 MiB page
/// against 1 MB/s) could never fit; refusing it for ever would leave it on the slow tier
/// however hot it is, so it is admitted **as a debt**: only when nothing else is in the window,
/// and it then holds the window for `nr / limit` seconds, during which nothing else is admitted.
/// The average rate holds (`nr` pages take `nr / limit` seconds of budget), and the bound is
/// exact: every one-second interval admits at most `limit` pages, or holds exactly one folio
/// larger than `limit` and nothing else; after such a folio at `t`, nothing is admitted
/// before `t + nr / limit` s. (The kernel lets the first candidate of each window through
/// whatever its size, so it may exceed the limit by a folio every second.)
#[derive(Clone, Debug, Default)]
pub struct SlidingWindowLimiter {
    /// `(when the admission leaves the window, pages)`, in that order.
    admitted: VecDeque<(Nanos, u64)>,
    in_window: u64,
}

impl SlidingWindowLimiter {
    const WINDOW: Nanos = Nanos::from_secs(1);

    fn expire(&mut self, now: Nanos) {
        while let Some(&(until, n)) = self.admitted.front() {
            // An admission at t counts for the interval (t - 1 s, t]; at now = t + 1 s it has
            // left every one-second interval that ends at or after now.
            if now >= until {
                self.in_window -= n;
                self.admitted.pop_front();
            } else {
                break;
            }
        }
    }

    /// Pages that can still be admitted at `now`.
    pub fn remaining(&mut self, now: Nanos, limit_pages: u64) -> u64 {
        self.expire(now);
        limit_pages.saturating_sub(self.in_window)
    }

    /// How long a folio of `nr` pages holds the window: one second, or `nr / limit` seconds
    /// (rounded up to the nanosecond) for a folio larger than the budget.
    #[must_use]
    pub fn hold(nr: Pages, limit_pages: u64) -> Nanos {
        if nr.0 <= limit_pages {
            return Self::WINDOW;
        }
        let ns = u128::from(nr.0) * u128::from(Self::WINDOW.0);
        let limit = u128::from(limit_pages.max(1));
        Nanos(u64::try_from(ns.div_ceil(limit)).unwrap_or(u64::MAX))
    }

    /// Admits `nr` pages at `now` if the budget allows; returns whether it did. See the type's
    /// docs for a folio larger than the whole budget.
    pub fn try_admit(&mut self, now: Nanos, nr: Pages, limit_pages: u64) -> bool {
        let remaining = self.remaining(now, limit_pages);
        let fits = if nr.0 > limit_pages {
            self.in_window == 0
        } else {
            remaining >= nr.0
        };
        if !fits {
            return false;
        }
        self.in_window += nr.0;
        let until = now.saturating_add(Self::hold(nr, limit_pages));
        match self.admitted.back_mut() {
            Some((t, n)) if *t == until => *n += nr.0,
            _ => self.admitted.push_back((until, nr.0)),
        }
        true
    }
}

/// `NUMA_MIGRATION_ADJUST_STEPS` (kernel/sched/fair.c).
pub const NUMA_MIGRATION_ADJUST_STEPS: u64 = 16;
/// `KMIGRATED_PROMOTION_THRESHOLD_WINDOW` (mm/pghot.c): the adjustment period, ms.
pub const PROMOTION_THRESHOLD_WINDOW_MS: u64 = 60_000;

/// The kernel's adaptive hot threshold (kernel/sched/fair.c
/// `numa_promotion_adjust_threshold()`).
///
/// Once per period, compares the candidates charged in the period with what the rate limit
/// allows for it (`ref_cand`), and moves the threshold by one step of `ref_th * 2 / 16`:
/// stricter when more than 110 % of the budget was offered, looser below 90 %, within
/// `[unit_th, 2 * ref_th]`. A threshold of 0 means "use the reference".
#[derive(Clone, Debug, Default, Serialize)]
pub struct AdaptiveThreshold {
    /// `pgdat->nbp_threshold`, ms; 0 = unset (use the reference threshold).
    pub threshold_ms: u64,
    /// `pgdat->nbp_th_start`, ms.
    start_ms: u64,
    /// `pgdat->nbp_th_nr_cand`.
    start_nr_cand: u64,
}

impl AdaptiveThreshold {
    /// Starts a period at `now` with the candidate counter at `nr_cand`
    /// (kernel `reset_memory_tiering()`).
    #[must_use]
    pub fn new(now: Nanos, nr_cand: u64) -> Self {
        AdaptiveThreshold {
            threshold_ms: 0,
            start_ms: now.as_millis(),
            start_nr_cand: nr_cand,
        }
    }

    /// Forgets the adjusted value: the kernel sets `nbp_threshold = 0` whenever the target
    /// node has plenty of free space.
    pub fn reset_value(&mut self) {
        self.threshold_ms = 0;
    }

    /// The threshold in force, ms.
    #[must_use]
    pub fn effective(&self, ref_th_ms: u64) -> u64 {
        if self.threshold_ms == 0 {
            ref_th_ms
        } else {
            self.threshold_ms
        }
    }

    /// Runs the kernel's adjustment if a full period has passed.
    ///
    /// `nr_cand` is the node's `pgpromote_candidate` counter now; `rate_limit_pages` the
    /// per-second budget; `ref_th_ms` the reference threshold; `period_ms` the period
    /// (`scan_period_max_ms` for NUMA balancing, 60000 for pghot). Returns whether it adjusted.
    pub fn maybe_adjust(
        &mut self,
        now: Nanos,
        nr_cand: u64,
        rate_limit_pages: u64,
        ref_th_ms: u64,
        period_ms: u64,
    ) -> bool {
        let now_ms = now.as_millis();
        if now_ms.saturating_sub(self.start_ms) <= period_ms {
            return false;
        }
        self.start_ms = now_ms;
        let ref_cand = rate_limit_pages.saturating_mul(period_ms) / 1000;
        let diff_cand = nr_cand.saturating_sub(self.start_nr_cand);
        let unit_th = ref_th_ms * 2 / NUMA_MIGRATION_ADJUST_STEPS;
        let mut th = self.effective(ref_th_ms);
        if diff_cand > ref_cand.saturating_mul(11) / 10 {
            th = th.saturating_sub(unit_th).max(unit_th);
        } else if diff_cand < ref_cand.saturating_mul(9) / 10 {
            th = (th + unit_th).min(ref_th_ms * 2);
        }
        self.start_nr_cand = nr_cand;
        self.threshold_ms = th;
        true
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn mbps_conversion_matches_kernel_shift() {
        // 65536 MB/s default = 16 M pages/s.
        assert_eq!(mbps_to_pages_per_s(65536), 65536 << 8);
        assert_eq!(mbps_to_pages_per_s(1), 256);
    }

    #[test]
    fn kernel_window_counts_before_deciding_and_resets_after_a_second() {
        let mut l = KernelWindowLimiter::default();
        // First call at t = 1001 ms opens a window whose snapshot already includes this
        // candidate, so it passes (diff 0 < 4).
        assert!(!l.charge(Nanos::from_millis(1001), Pages(1), 4));
        assert!(!l.charge(Nanos::from_millis(1100), Pages(1), 4));
        assert!(!l.charge(Nanos::from_millis(1200), Pages(1), 4));
        assert!(!l.charge(Nanos::from_millis(1300), Pages(1), 4));
        // diff = 4 >= 4: limited, but still counted.
        assert!(l.charge(Nanos::from_millis(1400), Pages(1), 4));
        assert_eq!(l.nr_cand, 5);
        // 1000 ms after 1001 is not "> 1000": still limited.
        assert!(l.charge(Nanos::from_millis(2001), Pages(1), 4));
        // New window.
        assert!(!l.charge(Nanos::from_millis(2002), Pages(1), 4));
    }

    /// Worked case for `numa_promotion_adjust_threshold()` with pghot's parameters:
    /// rate limit 1 MB/s = 256 pages/s, period 60 s, so ref_cand = 256 * 60 = 15360;
    /// ref_th = 3000 ms (default-mode window), unit_th = 3000 * 2 / 16 = 375 ms.
    #[test]
    fn adaptive_threshold_hand_worked_case() {
        let rl = mbps_to_pages_per_s(1);
        let mut a = AdaptiveThreshold::new(Nanos::ZERO, 0);
        // Not a full period yet: nothing happens (the kernel needs now - start > period).
        assert!(!a.maybe_adjust(Nanos::from_millis(60_000), 99_999, rl, 3000, 60_000));
        assert_eq!(a.effective(3000), 3000);
        // 20000 candidates > 15360 * 11 / 10 = 16896: stricter, 3000 - 375 = 2625.
        assert!(a.maybe_adjust(Nanos::from_millis(60_001), 20_000, rl, 3000, 60_000));
        assert_eq!(a.threshold_ms, 2625);
        // Next period: 20000 + 15000 -> diff 15000, inside [13824, 16896]: unchanged.
        assert!(a.maybe_adjust(Nanos::from_millis(120_002), 35_000, rl, 3000, 60_000));
        assert_eq!(a.threshold_ms, 2625);
        // Next: diff 1000 < 13824: looser, 2625 + 375 = 3000.
        assert!(a.maybe_adjust(Nanos::from_millis(180_003), 36_000, rl, 3000, 60_000));
        assert_eq!(a.threshold_ms, 3000);
        // Looser again, capped at 2 * ref = 6000 after 8 steps.
        let mut t = 180_003;
        for _ in 0..20 {
            t += 60_001;
            a.maybe_adjust(Nanos::from_millis(t), 36_000, rl, 3000, 60_000);
        }
        assert_eq!(a.threshold_ms, 6000);
    }

    #[test]
    fn adaptive_threshold_floor_is_one_unit() {
        // NUMA balancing's reference: hot_threshold 1000 ms, unit 125 ms, floor 125 ms.
        let rl = 256;
        let mut a = AdaptiveThreshold::new(Nanos::ZERO, 0);
        let mut cand = 0;
        for i in 1..=20u64 {
            cand += 1_000_000;
            a.maybe_adjust(Nanos::from_millis(i * 60_001), cand, rl, 1000, 60_000);
        }
        assert_eq!(a.threshold_ms, 125);
        a.reset_value();
        assert_eq!(a.effective(1000), 1000);
    }

    proptest! {
        /// The sliding limiter never admits more than the limit in any one-second interval.
        #[test]
        fn sliding_limiter_never_exceeds_limit_in_any_second(
            limit in 1u64..2000,
            steps in proptest::collection::vec((0u64..400, 1u64..3000), 1..300),
        ) {
            let mut l = SlidingWindowLimiter::default();
            let mut now = 0u64;
            let mut admitted: Vec<(u64, u64)> = Vec::new();
            for (dt_ms, nr) in steps {
                now += dt_ms;
                if l.try_admit(Nanos::from_millis(now), Pages(nr), limit) {
                    admitted.push((now, nr));
                }
            }
            // Every interval (t - 1000, t] for t at an admission time is the worst case: at
            // most the limit, or one folio larger than the limit alone.
            for &(t, _) in &admitted {
                let inside: Vec<u64> = admitted.iter()
                    .filter(|&&(s, _)| s <= t && s + 1000 > t)
                    .map(|&(_, n)| n).collect();
                let sum: u64 = inside.iter().sum();
                prop_assert!(sum <= limit || inside.len() == 1,
                    "{} pages in the second ending at {} ms", sum, t);
            }
            // After a folio larger than the limit, nothing for nr / limit seconds.
            for &(t, n) in admitted.iter().filter(|&&(_, n)| n > limit) {
                let quiet_ms = (n * 1000).div_ceil(limit);
                prop_assert!(admitted.iter().all(|&(s, m)| (s, m) == (t, n) || s + 1000 <= t || s >= t + quiet_ms),
                    "{} pages at {} ms are not alone for {} ms", n, t, quiet_ms);
            }
        }
    }

    #[test]
    fn a_folio_larger_than_the_budget_goes_alone_as_a_debt() {
        // 64 MiB/s = 16384 pages/s; a 1 GiB folio is 262144 pages: 16 s of budget.
        let limit = mbps_to_pages_per_s(64);
        let giga = Pages(1 << 18);
        let mut l = SlidingWindowLimiter::default();
        assert!(l.try_admit(Nanos::from_millis(0), Pages(1), limit));
        // Not while anything else is in the window.
        assert!(!l.try_admit(Nanos::from_millis(500), giga, limit));
        assert!(l.try_admit(Nanos::from_millis(1000), giga, limit));
        // Nothing else for 16 s, not even a base page.
        assert!(!l.try_admit(Nanos::from_millis(16_999), Pages(1), limit));
        assert_eq!(l.remaining(Nanos::from_millis(16_999), limit), 0);
        assert!(l.try_admit(Nanos::from_millis(17_000), Pages(limit), limit));
        assert_eq!(
            SlidingWindowLimiter::hold(Pages(513), 512),
            Nanos(1_001_953_125)
        );
        assert_eq!(
            SlidingWindowLimiter::hold(Pages(5), 512),
            Nanos::from_secs(1)
        );
    }

    #[test]
    fn sliding_limiter_refills_after_a_second() {
        let mut l = SlidingWindowLimiter::default();
        assert!(l.try_admit(Nanos::from_millis(0), Pages(10), 10));
        assert!(!l.try_admit(Nanos::from_millis(999), Pages(1), 10));
        assert!(l.try_admit(Nanos::from_millis(1000), Pages(10), 10));
    }
}
