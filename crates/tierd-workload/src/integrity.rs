//! # integrity: page contents that prove migration kept them intact
//!
//! Every 64-bit word holds [`word_value`] of its own virtual address and the page's
//! generation, so every page (and every word) has distinct contents: a page copied to the
//! wrong place, a stale copy after a racing write, or a lost write all show up as a mismatch.
//! [`fill_page`] writes a page for a generation and [`check_page`] compares it; both are plain
//! memory loops without system calls, for the `integrity` subcommand's hot loop.

/// The value of the word at virtual address `addr` in generation `generation`: a SplitMix64
/// finalizer of both, so neighbouring words and generations differ in about half their bits.
#[must_use]
#[inline]
pub fn word_value(addr: u64, generation: u32) -> u64 {
    let mut z = addr ^ u64::from(generation).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fill `page` (words starting at virtual address `base`) for `generation`.
pub fn fill_page(page: &mut [u64], base: u64, generation: u32) {
    let mut addr = base;
    for w in page {
        *w = word_value(addr, generation);
        addr = addr.wrapping_add(8);
    }
}

/// A wrong word: where it is, what it held and what it should have held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadWord {
    /// Its virtual address.
    pub addr: u64,
    /// What it held.
    pub got: u64,
    /// What [`word_value`] says.
    pub want: u64,
}

/// Check `page` (starting at `base`) against `generation`; the first wrong word, if any.
#[must_use]
pub fn check_page(page: &[u64], base: u64, generation: u32) -> Option<BadWord> {
    let mut addr = base;
    for w in page {
        let want = word_value(addr, generation);
        if *w != want {
            return Some(BadWord {
                addr,
                got: *w,
                want,
            });
        }
        addr = addr.wrapping_add(8);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filled_pages_check_and_differ() {
        let (mut a, mut b) = (vec![0u64; 512], vec![0u64; 512]);
        fill_page(&mut a, 0x1000, 0);
        fill_page(&mut b, 0x2000, 0);
        assert_eq!(check_page(&a, 0x1000, 0), None);
        assert_ne!(a, b, "pages at different addresses differ");
        // A page copied to the wrong address, or checked for the wrong generation, fails.
        assert_eq!(check_page(&b, 0x1000, 0).map(|w| w.addr), Some(0x1000));
        assert!(check_page(&a, 0x1000, 1).is_some());
        fill_page(&mut a, 0x1000, 1);
        assert_eq!(check_page(&a, 0x1000, 1), None);
    }

    #[test]
    fn one_flipped_word_is_found_where_it_is() {
        let mut a = vec![0u64; 512];
        fill_page(&mut a, 0x7000, 3);
        a[100] ^= 1 << 17;
        let bad = check_page(&a, 0x7000, 3).expect("mismatch");
        assert_eq!(bad.addr, 0x7000 + 800);
        assert_eq!(bad.want, word_value(0x7000 + 800, 3));
        assert_eq!(bad.got, bad.want ^ (1 << 17));
    }
}
