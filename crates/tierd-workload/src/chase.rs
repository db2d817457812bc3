//! # chase: the pointer-chase kernel
//!
//! The hot region is viewed as 64-byte lines; word 0 of line `i` holds the index of the next
//! line. [`build_cycle`] links the lines into one random cycle (Sattolo's algorithm, so every
//! line is visited once per lap and the hardware prefetchers cannot guess the next line), and
//! [`chase`] follows it. Each step is one dependent load, so steps per second measure memory
//! latency of wherever the hot pages are. The loop makes no system calls.

/// `u64` words per 64-byte cache line.
pub const WORDS_PER_LINE: usize = 8;

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny, seedable generator; the workload needs
/// reproducible permutations, not cryptographic randomness.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator with `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`), by Lemire's multiply-shift (bias below 2^-32 for the
    /// sizes used here).
    pub fn below(&mut self, n: u64) -> u64 {
        let wide = u128::from(self.next_u64()) * u128::from(n);
        // The high half of a 64x64 product fits 64 bits.
        u64::try_from(wide >> 64).unwrap_or(0)
    }
}

/// Link the first `lines` lines of `words` into one random cycle (seeded). Returns false (and
/// writes nothing) if `words` has fewer than `lines` lines or `lines < 2`.
pub fn build_cycle(words: &mut [u64], lines: usize, seed: u64) -> bool {
    if lines < 2 || words.len() / WORDS_PER_LINE < lines {
        return false;
    }
    for i in 0..lines {
        words[i * WORDS_PER_LINE] = i as u64;
    }
    // Sattolo: swapping each i with a j strictly below it yields a single n-cycle.
    let mut rng = SplitMix64::new(seed);
    for i in (1..lines).rev() {
        let j = index(rng.below(i as u64));
        words.swap(i * WORDS_PER_LINE, j * WORDS_PER_LINE);
    }
    true
}

/// Follow the cycle for `steps` steps from line `start`; returns the line reached (feed it to
/// the next call, and keep it observable so the loads are not optimized away).
///
/// # Panics
/// If `words` does not hold a cycle built by [`build_cycle`] (an index out of range).
#[must_use]
#[inline(never)]
pub fn chase(words: &[u64], start: u64, steps: u64) -> u64 {
    let mut i = start;
    for _ in 0..steps {
        i = words[index(i) * WORDS_PER_LINE];
    }
    i
}

/// A line index as `usize`. Indices come from a buffer in memory, so they fit its address
/// space; the workload only targets 64-bit Linux.
#[allow(clippy::cast_possible_truncation)]
#[inline(always)]
fn index(i: u64) -> usize {
    i as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycle_visits_every_line_once_per_lap() {
        for (lines, seed) in [(2usize, 1u64), (3, 9), (1000, 1), (4096, 42)] {
            let mut w = vec![0u64; lines * WORDS_PER_LINE];
            assert!(build_cycle(&mut w, lines, seed));
            let mut seen = vec![false; lines];
            let mut i = 0u64;
            for _ in 0..lines {
                let k = index(i);
                assert!(!seen[k], "line {k} visited twice ({lines} lines)");
                seen[k] = true;
                i = chase(&w, i, 1);
            }
            assert_eq!(i, 0, "back at the start after one lap");
            assert!(seen.iter().all(|s| *s));
            assert_eq!(chase(&w, 0, lines as u64 * 3), 0);
        }
    }

    #[test]
    fn seeds_give_different_reproducible_cycles() {
        let mk = |seed| {
            let mut w = vec![0u64; 256 * WORDS_PER_LINE];
            assert!(build_cycle(&mut w, 256, seed));
            w
        };
        assert_eq!(mk(1), mk(1));
        assert_ne!(mk(1), mk(2));
    }

    #[test]
    fn too_small_buffers_are_refused() {
        let mut w = vec![0u64; 8 * WORDS_PER_LINE];
        assert!(!build_cycle(&mut w, 9, 1));
        assert!(!build_cycle(&mut w, 1, 1));
        assert!(w.iter().all(|x| *x == 0));
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = SplitMix64::new(3);
        assert!((0..10_000).all(|_| r.below(7) < 7));
    }
}
