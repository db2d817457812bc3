//! DAMON's feedback loop (mm/damon/core.c), shared by every backend that tunes a sampling
//! interval toward an `intervals_goal`: the Linux DAMON source when the kernel cannot tune
//! itself (before 6.15), and the simulator's accessed-bit scan. Pure integer arithmetic, as
//! the kernel does it.

/// `damon_feed_loop_next_input()`: the next input of DAMON's feedback loop for a score in
/// basis points of its goal (10000 = on goal), input and score assumed proportional.
#[must_use]
pub fn feed_loop_next_input(last_input: u64, score: u64) -> u64 {
    const GOAL: u64 = 10_000;
    // The kernel's minimum input, so that the compensation never reaches zero.
    const MIN_INPUT: u64 = 10_000;
    if score == GOAL {
        return last_input;
    }
    if score >= GOAL * 2 {
        return MIN_INPUT;
    }
    let over = score > GOAL;
    let diff = if over { score - GOAL } else { GOAL - score };
    let compensation = if last_input < u64::MAX / diff {
        last_input * diff / GOAL
    } else {
        last_input / GOAL * diff
    };
    if over {
        last_input.saturating_sub(compensation).max(MIN_INPUT)
    } else {
        last_input.saturating_add(compensation)
    }
}

/// `damon_get_intervals_adaptation_bp()`: the factor, in basis points, an interval is
/// multiplied by for a score (`found / goal`, basis points): 20000 for a score of 0, 10000 on
/// goal, and a decrease rescaled to `[5000, 10000]` so that one step at most halves it.
#[must_use]
pub fn intervals_adaptation_bp(score_bp: u64) -> u64 {
    let a = feed_loop_next_input(100_000_000, score_bp) / 10_000;
    if a <= 10_000 {
        5_000 + a / 2
    } else {
        a
    }
}

/// mm/damon/core.c `damon_get_intervals_score()`: the access events the last aggregation
/// observed (each region's bytes x its `nr_accesses`) against `access_bp` of the most it could
/// have observed (the monitored bytes x samples per aggregation), in basis points of that
/// goal. The units of the two sums only need to agree (bytes, pages or addresses).
#[must_use]
pub fn intervals_score_bp(access_events: u128, max_access_events: u128, access_bp: u64) -> u64 {
    let target = (max_access_events * u128::from(access_bp) / 10_000).max(1);
    u64::try_from(access_events * 10_000 / target).unwrap_or(u64::MAX)
}

/// mm/damon/core.c `kdamond_tune_intervals()`: the next sampling interval for a score (a
/// score of 0 doubles it, twice the goal or more halves it), clamped to
/// `[min_sample_us, max_sample_us]` (the upper bound first, as the kernel applies them).
#[must_use]
pub fn tuned_sample_us(
    sample_us: u64,
    score_bp: u64,
    min_sample_us: u64,
    max_sample_us: u64,
) -> u64 {
    let adaptation_bp = intervals_adaptation_bp(score_bp);
    let next = u64::try_from(u128::from(sample_us) * u128::from(adaptation_bp) / 10_000)
        .unwrap_or(u64::MAX);
    next.min(max_sample_us).max(min_sample_us)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_feedback_loop_is_the_kernels() {
        // On goal keeps, 2x goal or more gives the minimum input, otherwise the input moves
        // by the relative distance from the goal.
        assert_eq!(feed_loop_next_input(100_000_000, 10_000), 100_000_000);
        assert_eq!(feed_loop_next_input(100_000_000, 20_000), 10_000);
        assert_eq!(feed_loop_next_input(100_000_000, 0), 200_000_000);
        assert_eq!(feed_loop_next_input(100_000_000, 5_000), 150_000_000);
        assert_eq!(feed_loop_next_input(100_000_000, 15_000), 50_000_000);
        assert_eq!(feed_loop_next_input(u64::MAX - 1, 1), u64::MAX);
    }

    #[test]
    fn adaptation_halves_at_most_and_doubles_at_most() {
        assert_eq!(intervals_adaptation_bp(10_000), 10_000);
        assert_eq!(intervals_adaptation_bp(0), 20_000);
        assert_eq!(intervals_adaptation_bp(5_000), 15_000);
        assert_eq!(intervals_adaptation_bp(15_000), 7_500);
        assert_eq!(intervals_adaptation_bp(20_000), 5_000);
        assert_eq!(intervals_adaptation_bp(1_000_000), 5_000);
    }

    #[test]
    fn the_score_is_observed_events_against_the_goal() {
        // 100 MiB regions at 10 of 20 samples over 1 GiB monitored: 5 % seen, 4 % wanted.
        let mib = 1u128 << 20;
        assert_eq!(
            intervals_score_bp(100 * mib * 10, 1024 * mib * 20, 400),
            12_207
        );
        // Nothing monitored: the target is 1 event, never a division by zero.
        assert_eq!(intervals_score_bp(0, 0, 400), 0);
        assert_eq!(intervals_score_bp(3, 0, 400), 30_000);
    }

    #[test]
    fn a_tuned_interval_stays_in_its_range() {
        assert_eq!(tuned_sample_us(10_000, 0, 5_000, 100_000), 20_000);
        assert_eq!(tuned_sample_us(10_000, 10_000, 5_000, 100_000), 10_000);
        assert_eq!(tuned_sample_us(10_000, 15_000, 5_000, 100_000), 7_500);
        assert_eq!(tuned_sample_us(80_000, 0, 5_000, 100_000), 100_000);
        assert_eq!(tuned_sample_us(6_000, 40_000, 5_000, 100_000), 5_000);
        // The kernel takes the upper bound first: a range given upside down yields its
        // lower end.
        assert_eq!(tuned_sample_us(10_000, 0, 50_000, 20_000), 50_000);
    }
}
