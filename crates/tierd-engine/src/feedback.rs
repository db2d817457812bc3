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
}
