//! # integrity: page contents that prove migration kept them intact
//!
//! Every 64-bit word holds [`word_value`] of its own virtual address and the page's
//! generation, so every page (and every word) has distinct contents: a page copied to the
//! wrong place, a stale copy after a racing write, or a lost write all show up as a mismatch.
//! [`fill_page`] writes a page for a generation and [`check_page`] compares it; both are plain
//! memory loops without system calls, for the `integrity` subcommand's hot loop.
//!
//! [`SplitPlan`] says which page the workload cuts next when it splits its own THPs
//! (`integrity --split-every-ms`): alternately a `MADV_DONTNEED` of a 4 KiB subpage inside a
//! 2 MiB block and a `munmap` of a 4 KiB piece at a block's edge, each of which splits a
//! PMD-mapped THP there (mm/huge_memory.c `__split_huge_pmd()`) and leaves the folio partly
//! mapped, queued for a deferred split; moving such a folio splits it first (mm/migrate.c
//! `migrate_pages_batch()`).

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

/// Base pages of a PMD-sized THP on x86-64 with 4 KiB pages (`HPAGE_PMD_NR`).
pub const THP_PAGES: usize = 512;

/// One cut the workload makes into its own buffer (page indices of its run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitAction {
    /// `MADV_DONTNEED` of this page: it reads back as zeros; the workload rewrites it.
    Discard(usize),
    /// `munmap` of this page: the workload drops it from its checked set.
    Unmap(usize),
}

/// The 2 MiB-aligned blocks of a run of pages, and the cuts made into them in turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitPlan {
    /// The run's first page that starts a 2 MiB-aligned block.
    first: usize,
    /// Whole blocks in the run.
    blocks: usize,
}

impl SplitPlan {
    /// The plan for `pages` pages of `page_size` bytes starting at virtual address `start`.
    /// Only whole 2 MiB-aligned blocks are cut (only they can be PMD-mapped THPs).
    #[must_use]
    pub fn new(start: u64, pages: usize, page_size: usize) -> Self {
        let thp = (THP_PAGES * page_size) as u64;
        let ps = page_size.max(1) as u64;
        let lead = start.next_multiple_of(thp).saturating_sub(start) / ps;
        let first = usize::try_from(lead).unwrap_or(usize::MAX);
        let blocks = pages.saturating_sub(first) / THP_PAGES;
        SplitPlan { first, blocks }
    }

    /// Whole 2 MiB blocks in the run.
    #[must_use]
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// The block page `page` lies in, if it lies in a whole one.
    #[must_use]
    pub fn block_of(&self, page: usize) -> Option<usize> {
        let b = page.checked_sub(self.first)? / THP_PAGES;
        (b < self.blocks).then_some(b)
    }

    /// The `k`-th cut (`None` when the run has no whole block). Even cuts discard a subpage
    /// inside block `k/2 mod blocks` (never its first or last page, a different subpage each
    /// round over the blocks); odd cuts unmap, half the blocks further on (so that they hit a
    /// block not just cut), its last page in the first round and its first page in the
    /// second (except the run's very first page, which locates the buffer's VMA in
    /// `numa_maps`), and from the third round on discard instead, every edge being gone by
    /// then.
    #[must_use]
    pub fn action(&self, k: u64) -> Option<SplitAction> {
        if self.blocks == 0 {
            return None;
        }
        let blocks = self.blocks as u64;
        let half = k / 2;
        let round = half / blocks;
        let block = |b: u64| self.first + usize::try_from(b % blocks).unwrap_or(0) * THP_PAGES;
        // Offsets 1..=510: inside the block, never at an edge that may be unmapped.
        let inner = 1 + usize::try_from((255 + round * 97) % (THP_PAGES as u64 - 2)).unwrap_or(0);
        if k.is_multiple_of(2) {
            return Some(SplitAction::Discard(block(half) + inner));
        }
        let b = block(half + blocks / 2);
        Some(match round {
            0 => SplitAction::Unmap(b + THP_PAGES - 1),
            1 if b > 0 => SplitAction::Unmap(b),
            _ => SplitAction::Discard(b + inner),
        })
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
    fn the_split_plan_cuts_whole_aligned_blocks_inside_and_at_their_edges() {
        const PS: usize = 4096;
        let thp = (THP_PAGES * PS) as u64;
        // A run starting 3 pages before a 2 MiB boundary, 3 + 4 * 512 + 100 pages long.
        let start = 7 * thp - 3 * PS as u64;
        let plan = SplitPlan::new(start, 3 + 4 * THP_PAGES + 100, PS);
        assert_eq!(plan.blocks(), 4);
        assert_eq!(plan.block_of(2), None, "before the first boundary");
        assert_eq!(plan.block_of(3), Some(0));
        assert_eq!(
            plan.block_of(3 + 4 * THP_PAGES),
            None,
            "the tail is no whole block"
        );
        let first = |b: usize| 3 + b * THP_PAGES;
        let mut unmapped = std::collections::BTreeSet::new();
        for k in 0..40u64 {
            let a = plan.action(k).expect("has blocks");
            match a {
                SplitAction::Discard(p) => {
                    let b = plan.block_of(p).expect("in a block");
                    // Strictly inside: never an edge page, so never one already unmapped.
                    assert!(p > first(b) && p < first(b) + THP_PAGES - 1, "{k}: {a:?}");
                    assert!(!unmapped.contains(&p));
                }
                SplitAction::Unmap(p) => {
                    let b = plan.block_of(p).expect("in a block");
                    assert!(p == first(b) || p == first(b) + THP_PAGES - 1, "{k}: {a:?}");
                    assert!(unmapped.insert(p), "{p} unmapped twice");
                }
            }
            // Even cuts discard, odd ones unmap while edges remain.
            assert_eq!(
                matches!(a, SplitAction::Discard(_)),
                k % 2 == 0 || k >= 16,
                "{k}"
            );
        }
        // Both edges of every block, once each.
        assert_eq!(unmapped.len(), 8);
        // Except the run's first page: an aligned run keeps it.
        let aligned = SplitPlan::new(thp, 2 * THP_PAGES, PS);
        let unmaps: Vec<_> = (0..20)
            .filter_map(|k| match aligned.action(k) {
                Some(SplitAction::Unmap(p)) => Some(p),
                _ => None,
            })
            .collect();
        assert_eq!(unmaps, vec![1023, 511, 512], "{unmaps:?}");
        // The first two cuts are in different blocks.
        let block = |k| match plan.action(k) {
            Some(SplitAction::Discard(p) | SplitAction::Unmap(p)) => plan.block_of(p),
            None => None,
        };
        assert_ne!(block(0), block(1));
        // An aligned run; a run with no whole block has nothing to cut.
        assert_eq!(SplitPlan::new(thp, 2 * THP_PAGES, PS).blocks(), 2);
        assert_eq!(SplitPlan::new(thp + 4096, 2 * THP_PAGES, PS).blocks(), 1);
        assert_eq!(SplitPlan::new(thp, THP_PAGES - 1, PS).action(0), None);
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
