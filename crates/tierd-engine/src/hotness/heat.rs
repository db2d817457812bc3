//! Relative hotness: a decayed access count ("heat") per page, a histogram of it per tier, and
//! the threshold that promotes the hottest pages the fast tier has room for, whatever their
//! absolute access rate.
//!
//! # Why
//!
//! pghot's threshold is absolute: a page is hot after `freq_threshold` accesses within a
//! window. How many accesses a source reports for a page depends on the source's resolution
//! and the workload's speed (a DAMON region reaches 5-8 of 20 samples on one host and 2-3 on a
//! slower one), so a threshold tuned on one host promotes nothing, or everything, on another.
//! Memtis (T. Lee, S. K. Monga, C. Min, Y. I. Eom, "MEMTIS: Efficient Memory Tiering with
//! Dynamic Page Classification and Page Size Determination", SOSP 2023, section 4.2) instead
//! keeps a histogram of every page's access count in log2 bins, cools all counts by halving
//! them periodically, and picks the hot threshold as the lowest bin whose pages, with every
//! hotter bin's, fit in the fast tier. Scaling every access rate by `c` scales every count by
//! `c` and moves every page by the same number of bins, so the pages chosen do not change.
//!
//! # Model
//!
//! - An observation adds its weight (the accesses it stands for: a DAMON region's
//!   `nr_accesses`, 1 for a fault or a sample) to the page's heat, saturating at `u32::MAX`,
//!   in units of [`HEAT_ONE`] (4 fractional bits, so one sighting survives a few coolings).
//! - Every `cooling_ms` all heats halve (Memtis halves every 2M samples; a time period keeps
//!   the engine's output a function of time and observations only). Halving is lazy: an entry
//!   stores the cooling epoch of its heat and is shifted when next touched. Since
//!   `bin(h / 2) = bin(h) - 1` for the log2 bins used here, the histogram cools exactly by
//!   shifting it one bin down.
//! - Bin 0 holds heat 0; bin `b >= 1` holds heats in `[2^(b-1), 2^b)`.
//! - [`fit_threshold`] is the lowest bin `T >= 1` such that the slow-tier pages in bins `>= T`
//!   fit in the room on the fast tier: free memory above its high watermark, plus, when the
//!   demoter may make room, the fast-tier pages colder than `T` by the engine's margin
//!   (`SWAP_MARGIN_BINS`; those with no heat always).
//!
//! # Folios of several sizes: heat per base page
//!
//! A folio's heat counts the accesses to any of its pages (a hardware sample is one; the
//! engine counts a sighting of the folio as a whole, by a fault, an accessed bit or a DAMON
//! region, once for each of its pages: `heat_weight` in the engine), so a 2 MiB folio whose
//! 512 pages are each touched as often as one 4 KiB page is sampled 512 times as often. What
//! a folio is worth on the fast tier, though, is its accesses per byte of it, and what
//! placing it costs is its bytes. So the bins that are compared, histogrammed and
//! thresholded are of the heat per base page ([`density_bin`]: the heat's log2 bin less the
//! folio's log2 of base pages),
//! the way Memtis ranks its huge and base pages in one histogram (mm/htmm_core.c in its
//! tree: `update_base_page()` adds `HPAGE_PMD_NR` to a base page's count per sample,
//! `update_huge_page()` adds 1 to the huge page's, and both go in `hotness_hg` weighted by
//! their base pages). Without it a fast tier of huge folios that are hot per folio and cold
//! per byte kept every hotter 4 KiB page out (docs/simulator.md, "tierd under THP").
//!
//! Density bins run from the sightings of a 1 GiB folio (`18` below a base page's) to a base
//! page's, so they are offset by [`SIZE_SHIFT_MAX`]: a base page's density bin is its heat bin
//! plus 18; 0 still means no heat. Each size keeps its own histogram of heat bins, which
//! cooling shifts exactly as before (a halving moves every heat one bin down, and a heat of 1
//! to 0, whatever the size), and [`HeatMap::histogram`] adds them up at their offsets. With
//! base pages only, every bin is the heat bin plus 18 and the thresholds chosen are the same.

use crate::chunkmap::SizedPageMap;
use crate::types::{Nanos, PageKey, PageSize, SpaceId};

/// Heat bins: bin 0 for heat 0, bins 1..=32 for `[2^(b-1), 2^b)`.
pub const HEAT_BINS: usize = 33;

/// log2 of the base pages in the largest folio (1 GiB: 2^18 base pages): how far below a base
/// page's the density bins of a folio can reach.
pub const SIZE_SHIFT_MAX: u8 = 18;

/// Density bins ([`density_bin`]): 0 for no heat, then one per log2 of heat per base page,
/// from a 1 GiB folio's least heat (bin 1) to a base page's most (bin 50).
pub const DENSITY_BINS: usize = HEAT_BINS + SIZE_SHIFT_MAX as usize;

/// log2 of the base pages in one folio of `size`.
#[must_use]
pub fn size_shift(size: PageSize) -> u8 {
    match size {
        PageSize::Base => 0,
        PageSize::Huge2M => 9,
        PageSize::Huge1G => SIZE_SHIFT_MAX,
    }
}
const _: () = assert!(1 << 9 == crate::types::HPAGE_PMD_NR);
const _: () = assert!(1 << SIZE_SHIFT_MAX == crate::types::HPAGE_PUD_NR);

/// The density bin of a folio of `size` with `heat`: 0 for no heat, else the log2 bin of its
/// heat per base page, offset by [`SIZE_SHIFT_MAX`] so that every size's is at least 1 (a
/// base page's is its heat bin + 18). See the module docs.
#[must_use]
pub fn density_bin(heat: u32, size: PageSize) -> u8 {
    if heat == 0 {
        0
    } else {
        heat_bin(heat) + SIZE_SHIFT_MAX - size_shift(size)
    }
}

/// The index of `size`'s histogram.
fn size_idx(size: PageSize) -> usize {
    match size {
        PageSize::Base => 0,
        PageSize::Huge2M => 1,
        PageSize::Huge1G => 2,
    }
}

/// Heat-bin histograms per folio size, `[size][slow, fast]`, in base pages.
type Hists = [[[u64; HEAT_BINS]; 2]; 3];

/// One access in heat units: heats are fixed point with 4 fractional bits, so that a page seen
/// once keeps a non-zero heat through 4 coolings (8 s at the default period) instead of
/// dropping to 0 at the first one, which could fall between its sighting and the promoter's
/// next pass. A uniform factor moves every page by the same 4 bins: thresholds are unchanged.
pub const HEAT_ONE: u32 = 16;

/// The threshold (density) bin that promotes nothing (no slow page's bin reaches it).
pub const NO_PROMOTION_BIN: u8 = 51;
const _: () = assert!(NO_PROMOTION_BIN as usize == DENSITY_BINS);

/// The log2 bin of a heat.
#[must_use]
pub fn heat_bin(heat: u32) -> u8 {
    // 32 - leading_zeros is 0..=32.
    u8::try_from(32 - heat.leading_zeros()).unwrap_or(NO_PROMOTION_BIN)
}

/// Which tier a page's heat is counted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// A lower-tier node: a promotion candidate.
    Slow,
    /// A top-tier node: stays, or is demoted to make room.
    Fast,
}

impl Tier {
    fn idx(self) -> usize {
        match self {
            Tier::Slow => 0,
            Tier::Fast => 1,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Heat as of `epoch`.
    heat: u32,
    /// The low 16 bits of the cooling epoch of `heat`. A heat halves per epoch and is 0
    /// after 32, so only the age matters, and ages stay below 2^16 (see
    /// [`PRUNE_EVERY_EPOCHS`]): the low bits give it exactly, and an entry takes 8 bytes, not
    /// 12 (the map holds one per page with heat: 70 M in D's tierd rows, 280 MB less).
    epoch: u16,
    fast: bool,
    size: PageSize,
}

const _: () = assert!(std::mem::size_of::<Option<Entry>>() == 8);

/// The low 16 bits of an epoch, as entries keep it.
#[inline]
fn low16(epoch: u32) -> u16 {
    // Masked: fits.
    #[allow(clippy::cast_possible_truncation)]
    let low = (epoch & 0xffff) as u16;
    low
}

/// Coolings after which the map drops its entries of heat 0 by itself. An entry that
/// survives a prune has heat left, so an age under 32 epochs, and a cooling call adds at most
/// 64 epochs, so no entry's age reaches `2^15 + 32 + 64 < 2^16` before the next prune: the
/// 16-bit epoch of an entry is never ambiguous. The engine's housekeeping prunes every 10 s,
/// at most 100 coolings at the shortest period (100 ms), so this one only fires for a caller
/// that observes for hours without ticking.
const PRUNE_EVERY_EPOCHS: u32 = 1 << 15;

impl Entry {
    fn tier(self) -> Tier {
        if self.fast {
            Tier::Fast
        } else {
            Tier::Slow
        }
    }
}

/// `e`'s heat cooled to `epoch` (its age from the low 16 bits: see [`PRUNE_EVERY_EPOCHS`]).
#[inline]
fn cooled(e: Entry, epoch: u32) -> u32 {
    e.heat
        .checked_shr(u32::from(low16(epoch).wrapping_sub(e.epoch)))
        .unwrap_or(0)
}

/// Adds or takes `size`'s base pages to or from `tier`'s heat `bin` (in `size`'s histogram).
fn count(hist: &mut Hists, tier: Tier, bin: u8, size: PageSize, add: bool) {
    let slot = &mut hist[size_idx(size)][tier.idx()][usize::from(bin)];
    let n = size.nr_pages().0;
    if add {
        *slot += n;
    } else {
        *slot = slot.saturating_sub(n);
    }
}

/// Per-page heat and its histogram per tier. See the module docs.
#[derive(Debug)]
pub struct HeatMap {
    map: SizedPageMap<Entry>,
    /// Base pages per heat bin, per folio size and `[slow, fast]`, at the current epoch.
    hist: Hists,
    epoch: u32,
    /// The epoch of the last prune ([`PRUNE_EVERY_EPOCHS`]).
    pruned_at: u32,
    cooling: Nanos,
    /// When the next cooling is due; set by the first observation.
    next_cool: Option<Nanos>,
}

impl HeatMap {
    /// An empty map whose heats halve every `cooling_ms` (at least 1 ms).
    #[must_use]
    pub fn new(cooling_ms: u64) -> Self {
        HeatMap {
            map: SizedPageMap::default(),
            hist: [[[0; HEAT_BINS]; 2]; 3],
            epoch: 0,
            pruned_at: 0,
            cooling: Nanos::from_millis(cooling_ms.max(1)),
            next_cool: None,
        }
    }

    /// Changes the cooling period (at least 1 ms) from the next cooling on; the heats and
    /// the histogram stay.
    pub fn set_cooling_ms(&mut self, cooling_ms: u64) {
        self.cooling = Nanos::from_millis(cooling_ms.max(1));
    }

    /// Applies every cooling due by `now`: each shifts the histogram one bin down.
    pub fn cool_until(&mut self, now: Nanos) {
        let Some(mut due) = self.next_cool else {
            self.next_cool = Some(now.saturating_add(self.cooling));
            return;
        };
        let mut shifts = 0u32;
        while due <= now && shifts < 64 {
            shifts += 1;
            due = due.saturating_add(self.cooling);
        }
        if due <= now {
            // Idle for more than 64 periods: every heat is 0 by now.
            due = now.saturating_add(self.cooling);
        }
        self.next_cool = Some(due);
        for _ in 0..shifts.min(u32::from(NO_PROMOTION_BIN)) {
            for h in self.hist.iter_mut().flatten() {
                h[0] += h[1];
                h.copy_within(2.., 1);
                h[HEAT_BINS - 1] = 0;
            }
        }
        self.epoch = self.epoch.wrapping_add(shifts);
        if self.epoch.wrapping_sub(self.pruned_at) >= PRUNE_EVERY_EPOCHS {
            self.prune();
        }
    }

    /// `e`'s heat cooled to the current epoch.
    fn current(&self, e: Entry) -> u32 {
        cooled(e, self.epoch)
    }

    fn count(&mut self, tier: Tier, bin: u8, size: PageSize, add: bool) {
        count(&mut self.hist, tier, bin, size, add);
    }

    /// Reads `key`'s entry ahead of an [`HeatMap::add`] (see `Engine::observe`).
    #[inline]
    pub(crate) fn warm(&self, key: PageKey, size: PageSize) -> bool {
        self.map.warm(key, size)
    }

    /// Adds `weight` accesses (at least 1) to the folio `(key, size)` (`key` its head),
    /// counted in `tier`; returns its new bin. Call [`HeatMap::cool_until`] first so that the
    /// heat is current.
    ///
    /// The heat of any other folio over the same pages (the THP this base page was split
    /// from, the base pages a THP was collapsed from, a remapped 1 GiB page) is dropped: that
    /// folio is gone, and its pages must not count twice in the histogram.
    pub fn add(&mut self, key: PageKey, size: PageSize, tier: Tier, weight: u32) -> u8 {
        let epoch = self.epoch;
        let mut fresh = false;
        let hist = &mut self.hist;
        let e = self.map.get_or_insert_with(
            key,
            size,
            || {
                fresh = true;
                Entry {
                    heat: 0,
                    epoch: low16(epoch),
                    fast: tier == Tier::Fast,
                    size,
                }
            },
            |_, _, gone| {
                count(
                    hist,
                    gone.tier(),
                    heat_bin(cooled(gone, epoch)),
                    gone.size,
                    false,
                )
            },
        );
        let before = *e;
        let old = cooled(before, epoch);
        let heat = old.saturating_add(weight.max(1).saturating_mul(HEAT_ONE));
        *e = Entry {
            heat,
            epoch: low16(epoch),
            fast: tier == Tier::Fast,
            size,
        };
        if !fresh {
            self.count(before.tier(), heat_bin(old), before.size, false);
        }
        self.count(tier, heat_bin(heat), size, true);
        density_bin(heat, size)
    }

    /// The current density bin of `key` ([`density_bin`]: 0 when it has no heat).
    #[must_use]
    pub fn bin(&mut self, key: PageKey) -> u8 {
        let e = self.map.get(key).copied();
        e.map_or(0, |e| density_bin(self.current(e), e.size))
    }

    /// The lowest density bin a folio with heat can be in now: 1 when a 1 GiB folio is
    /// tracked, 10 for 2 MiB, 19 with base pages only (the lowest threshold worth trying,
    /// [`fit_threshold`]'s `lowest`).
    #[must_use]
    pub fn lowest_bin(&self) -> u8 {
        1 + SIZE_SHIFT_MAX - size_shift(self.map.largest_size())
    }

    /// Moves `key`'s heat to `tier` (it was promoted or demoted), keeping its value.
    pub fn set_tier(&mut self, key: PageKey, tier: Tier) {
        let Some(e) = self.map.get(key).copied() else {
            return;
        };
        if e.tier() == tier {
            return;
        }
        let bin = heat_bin(self.current(e));
        self.count(e.tier(), bin, e.size, false);
        self.count(tier, bin, e.size, true);
        // The same folio: nothing to evict.
        self.map.insert(
            key,
            e.size,
            Entry {
                fast: tier == Tier::Fast,
                ..e
            },
            |_, _, _| {},
        );
    }

    /// Forgets `key`.
    pub fn remove(&mut self, key: PageKey) {
        if let Some(e) = self.map.remove(key) {
            let bin = heat_bin(self.current(e));
            self.count(e.tier(), bin, e.size, false);
        }
    }

    /// Forgets every page of `space`.
    pub fn forget_space(&mut self, space: SpaceId) {
        let mut gone = Vec::new();
        for (k, _, e) in self.map.iter() {
            if k.space == space {
                gone.push((k, *e));
            }
        }
        for (k, e) in gone {
            let bin = heat_bin(self.current(e));
            self.count(e.tier(), bin, e.size, false);
            self.map.remove(k);
        }
    }

    /// Drops the entries that cooled down to 0: memory follows the pages with heat.
    pub fn prune(&mut self) {
        let epoch = self.epoch;
        self.pruned_at = epoch;
        let mut dropped = [[0u64; 2]; 3];
        self.map.retain(|_, e| {
            let cold = cooled(*e, epoch) == 0;
            if cold {
                dropped[size_idx(e.size)][e.tier().idx()] += e.size.nr_pages().0;
            }
            !cold
        });
        for (hs, ds) in self.hist.iter_mut().zip(dropped) {
            for (h, d) in hs.iter_mut().zip(ds) {
                h[0] = h[0].saturating_sub(d);
            }
        }
    }

    /// Base pages per density bin in `tier` (every size's heat bins at its offset).
    #[must_use]
    pub fn histogram(&self, tier: Tier) -> [u64; DENSITY_BINS] {
        let mut out = [0u64; DENSITY_BINS];
        for (size, hs) in PageSize::ALL.into_iter().zip(&self.hist) {
            let h = &hs[tier.idx()];
            out[0] += h[0];
            let off = usize::from(SIZE_SHIFT_MAX - size_shift(size));
            for (o, n) in out[1 + off..].iter_mut().zip(&h[1..]) {
                *o += n;
            }
        }
        out
    }

    /// Pages with an entry (any heat, either tier), in base pages.
    #[must_use]
    pub fn tracked_pages(&self) -> u64 {
        self.hist.iter().flatten().flatten().sum()
    }

    /// Every folio with an entry, from the entries themselves (not the histogram).
    #[cfg(test)]
    pub(crate) fn folios(&self) -> Vec<(PageKey, PageSize)> {
        self.map.iter().map(|(k, s, _)| (k, s)).collect()
    }

    /// Memory held, as allocated.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        self.map.memory_bytes() + std::mem::size_of::<Self>()
    }
}

/// The lowest (density) bin `T >= lowest` (and `>= 1`) whose slow pages (with every hotter
/// bin's) fit in the room: `room_pages` free, plus the fast pages colder than `T - margin`
/// when `demotable` (those with no heat always). Returns [`NO_PROMOTION_BIN`] when not even
/// the hottest bin with pages fits.
/// `lowest` is [`HeatMap::lowest_bin`]: below it every bin is empty, and every threshold
/// there chooses the same pages as `lowest` does, which is the one reported.
///
/// Demand falls and room grows as `T` rises, so the first `T` that fits is the answer.
#[must_use]
pub fn fit_threshold(
    slow: &[u64; DENSITY_BINS],
    fast: &[u64; DENSITY_BINS],
    room_pages: u64,
    demotable: bool,
    lowest: u8,
    margin: u8,
) -> u8 {
    let total: u64 = slow[1..].iter().sum();
    let mut demand = total;
    // Fast pages in bins below `t - margin` (bin 0, no heat, always).
    let margin = usize::from(margin);
    let colder_fast = |t: usize| -> u64 { fast[..t.saturating_sub(margin).max(1)].iter().sum() };
    for (t, &in_bin) in slow.iter().enumerate().skip(1) {
        let room = room_pages.saturating_add(if demotable { colder_fast(t) } else { 0 });
        if demand == 0 && total > 0 {
            // Only a bin above every candidate fits: say so plainly.
            return NO_PROMOTION_BIN;
        }
        if demand <= room && t >= usize::from(lowest) {
            return u8::try_from(t).unwrap_or(NO_PROMOTION_BIN);
        }
        demand -= in_bin;
    }
    NO_PROMOTION_BIN
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::types::Vpn;

    fn k(vpn: u64) -> PageKey {
        PageKey {
            space: SpaceId(1),
            vpn: Vpn(vpn),
        }
    }

    #[test]
    fn bins_are_log2() {
        assert_eq!(heat_bin(0), 0);
        assert_eq!(heat_bin(1), 1);
        assert_eq!(heat_bin(2), 2);
        assert_eq!(heat_bin(3), 2);
        assert_eq!(heat_bin(4), 3);
        assert_eq!(heat_bin(u32::MAX), 32);
    }

    /// A base page's density bin: its heat bin plus the offset.
    fn b(heat_bin: u8) -> u8 {
        heat_bin + SIZE_SHIFT_MAX
    }

    #[test]
    fn cooling_halves_heat_and_shifts_the_histogram() {
        let mut m = HeatMap::new(1000);
        m.cool_until(Nanos::ZERO);
        // Heat 8 x 16 = 128: bin 8; heat 16: bin 5.
        assert_eq!(m.add(k(1), PageSize::Base, Tier::Slow, 8), b(8));
        assert_eq!(m.add(k(2), PageSize::Base, Tier::Slow, 1), b(5));
        assert_eq!(m.histogram(Tier::Slow)[usize::from(b(8))], 1);
        m.cool_until(Nanos::from_millis(999));
        assert_eq!(m.bin(k(1)), b(8));
        m.cool_until(Nanos::from_millis(1000));
        assert_eq!(m.bin(k(1)), b(7), "8 -> 4 accesses");
        assert_eq!(m.bin(k(2)), b(4), "one sighting survives a cooling");
        assert_eq!(m.histogram(Tier::Slow)[usize::from(b(7))], 1);
        assert_eq!(m.histogram(Tier::Slow)[usize::from(b(4))], 1);
        // Four more coolings take the single sighting to 0.
        m.cool_until(Nanos::from_millis(5000));
        assert_eq!(m.bin(k(2)), 0);
        assert_eq!(m.histogram(Tier::Slow)[0], 1);
        // Adding to a cooled page starts from its cooled heat: 128 >> 5 = 4, + 64.
        assert_eq!(m.add(k(1), PageSize::Base, Tier::Slow, 4), b(7));
        m.prune();
        assert_eq!(m.tracked_pages(), 1, "the page cooled to 0 is dropped");
        // A long idle period cools everything.
        m.cool_until(Nanos::from_secs(1000));
        assert_eq!(m.bin(k(1)), 0);
        assert_eq!(m.histogram(Tier::Slow)[0], 1);
    }

    /// An entry keeps the low 16 bits of its epoch: one left alone for 2^16 coolings, with
    /// no prune from outside (a caller that never ticks), must still read as cold, not as
    /// fresh as the day it was seen.
    #[test]
    fn an_entry_untouched_for_2_pow_16_coolings_is_cold() {
        let mut m = HeatMap::new(100);
        m.cool_until(Nanos::ZERO);
        let hot = m.add(k(1), PageSize::Base, Tier::Slow, 1000);
        assert!(hot > b(10));
        for i in 1..=(1u64 << 16) {
            m.cool_until(Nanos::from_millis(100 * i));
        }
        assert_eq!(m.epoch, 1 << 16);
        assert_eq!(m.bin(k(1)), 0, "an old entry read as fresh");
        // Seen again, it starts from no heat.
        assert_eq!(m.add(k(1), PageSize::Base, Tier::Slow, 1), b(5));
        assert_eq!(m.histogram(Tier::Slow)[usize::from(b(5))], 1);
        assert_eq!(m.histogram(Tier::Slow)[usize::from(hot)], 0);
    }

    #[test]
    fn a_folio_is_binned_by_its_heat_per_base_page() {
        let mut m = HeatMap::new(1000);
        m.cool_until(Nanos::ZERO);
        let huge = k(PageSize::Huge2M.head(Vpn(4096)).0);
        // 512 sightings of a 2 MiB folio are one per base page: a base page seen once.
        assert_eq!(m.add(k(1), PageSize::Base, Tier::Slow, 1), b(5));
        assert_eq!(m.add(huge, PageSize::Huge2M, Tier::Slow, 512), b(5));
        // Seen once, the folio is 9 bins (512 times) colder than the base page.
        let other = k(PageSize::Huge2M.head(Vpn(8192)).0);
        assert_eq!(m.add(other, PageSize::Huge2M, Tier::Fast, 1), b(5) - 9);
        assert_eq!(m.histogram(Tier::Slow)[usize::from(b(5))], 513);
        assert_eq!(m.histogram(Tier::Fast)[usize::from(b(5) - 9)], 512);
        // The lowest bin worth trying follows the largest folio tracked.
        assert_eq!(m.lowest_bin(), 10);
        let giant = k(PageSize::Huge1G.head(Vpn(1 << 20)).0);
        assert_eq!(m.add(giant, PageSize::Huge1G, Tier::Slow, 1), b(5) - 18);
        assert_eq!(m.lowest_bin(), 1);
        m.remove(giant);
        m.remove(huge);
        m.remove(other);
        assert_eq!(m.lowest_bin(), 1 + SIZE_SHIFT_MAX);
        // Cooling moves every size's heat one bin down, and a folio's least heat to none.
        m.add(other, PageSize::Huge2M, Tier::Fast, 1);
        m.cool_until(Nanos::from_millis(5000));
        assert_eq!(m.bin(other), 0);
        assert_eq!(m.histogram(Tier::Fast)[0], 512);
    }

    #[test]
    fn tier_moves_and_removal_keep_the_histogram_exact() {
        let mut m = HeatMap::new(1000);
        m.cool_until(Nanos::ZERO);
        m.add(k(0), PageSize::Huge2M, Tier::Slow, 3);
        // 3 x 16 = 48: heat bin 6, 9 density bins below a base page's.
        let hb = usize::from(b(6) - 9);
        assert_eq!(m.histogram(Tier::Slow)[hb], 512);
        m.set_tier(k(0), Tier::Fast);
        assert_eq!(m.histogram(Tier::Slow)[hb], 0);
        assert_eq!(m.histogram(Tier::Fast)[hb], 512);
        m.remove(k(0));
        assert_eq!(m.tracked_pages(), 0);
        m.add(k(5), PageSize::Base, Tier::Fast, 1);
        m.add(k(5), PageSize::Base, Tier::Slow, 1);
        let bb = usize::from(b(6));
        assert_eq!(m.histogram(Tier::Fast)[bb], 0);
        assert_eq!(m.histogram(Tier::Slow)[bb], 1, "seen on the slow tier now");
        m.forget_space(SpaceId(1));
        assert_eq!(m.tracked_pages(), 0);
    }

    #[test]
    fn the_threshold_fits_the_hottest_bins_in_the_room() {
        let mut slow = [0u64; DENSITY_BINS];
        let mut fast = [0u64; DENSITY_BINS];
        slow[5] = 100;
        slow[3] = 100;
        slow[1] = 1000;
        let fit = |slow: &[u64; DENSITY_BINS], fast: &[u64; DENSITY_BINS], room, demotable| {
            fit_threshold(slow, fast, room, demotable, 1, 0)
        };
        assert_eq!(fit(&slow, &fast, 10_000, false), 1, "room for all");
        assert_eq!(fit(&slow, &fast, 200, false), 2);
        assert_eq!(fit(&slow, &fast, 199, false), 4);
        assert_eq!(fit(&slow, &fast, 99, false), NO_PROMOTION_BIN);
        // Colder fast pages count as room when the demoter can move them.
        fast[2] = 150;
        assert_eq!(fit(&slow, &fast, 50, true), 3);
        assert_eq!(fit(&slow, &fast, 50, false), NO_PROMOTION_BIN);
        // No threshold below `lowest`: the bins there are empty, and it is the one reported.
        assert_eq!(fit_threshold(&slow, &fast, 10_000, false, 4, 0), 4);
    }

    #[test]
    fn fast_pages_within_the_margin_are_not_room() {
        let mut slow = [0u64; DENSITY_BINS];
        let mut fast = [0u64; DENSITY_BINS];
        slow[6] = 100;
        fast[2] = 60;
        fast[4] = 60;
        // Without a margin, T = 5 counts both fast bins (120 pages) as room for bin 6's 100.
        assert_eq!(fit_threshold(&slow, &fast, 0, true, 1, 0), 5);
        // With a margin of 2, T = 5 counts only bins below 3 (60 pages): no fit until T = 7,
        // where bin 4 counts too but nothing is left to promote.
        assert_eq!(fit_threshold(&slow, &fast, 0, true, 1, 2), NO_PROMOTION_BIN);
        fast[1] = 40;
        // Bins 1 and 2 (100 pages) are room for T = 5 with the margin of 2.
        assert_eq!(fit_threshold(&slow, &fast, 0, true, 1, 2), 5);
        // Pages with no heat are always room.
        let mut fast = [0u64; DENSITY_BINS];
        fast[0] = 100;
        assert_eq!(fit_threshold(&slow, &fast, 0, true, 1, 3), 1);
    }

    proptest! {
        /// The histogram always equals the one recomputed from the entries, through adds,
        /// coolings, tier moves, removals and prunes, with 4 KiB, 2 MiB and 1 GiB folios over
        /// the same pages (splits and collapses drop the old folio's heat).
        #[test]
        fn histogram_matches_the_entries(
            ops in proptest::collection::vec(
                (0u8..5, 0u64..40, 1u32..100, 0u64..3000, 0u8..10), 1..200)
        ) {
            let mut m = HeatMap::new(500);
            let mut now = Nanos::ZERO;
            m.cool_until(now);
            for (op, vpn, w, dt, sz) in ops {
                now = now.saturating_add(Nanos::from_millis(dt / 10));
                m.cool_until(now);
                let tier = if w % 2 == 0 { Tier::Fast } else { Tier::Slow };
                let size = match sz {
                    0..=6 => PageSize::Base,
                    7 | 8 => PageSize::Huge2M,
                    _ => PageSize::Huge1G,
                };
                // Pages spread over two 2 MiB ranges of a 1 GiB one.
                let key = k(size.head(Vpn((vpn % 2) * 512 + vpn)).0);
                match op {
                    0 | 1 => { m.add(key, size, tier, w); }
                    2 => m.set_tier(key, tier),
                    3 => m.remove(key),
                    _ => m.prune(),
                }
                let mut want = [[[0u64; HEAT_BINS]; 2]; 3];
                let mut density = [[0u64; DENSITY_BINS]; 2];
                for (_, s, e) in m.map.iter() {
                    prop_assert_eq!(s, e.size);
                    let heat = m.current(*e);
                    want[size_idx(s)][e.tier().idx()][usize::from(heat_bin(heat))] +=
                        s.nr_pages().0;
                    density[e.tier().idx()][usize::from(density_bin(heat, s))] += s.nr_pages().0;
                }
                prop_assert_eq!(&want, &m.hist);
                prop_assert_eq!(&density[0], &m.histogram(Tier::Slow));
                prop_assert_eq!(&density[1], &m.histogram(Tier::Fast));
            }
        }

        /// Scaling every heat by a power of two moves the threshold by exactly that many
        /// bins: the same pages are chosen.
        #[test]
        fn the_threshold_is_scale_free(
            heats in proptest::collection::vec(1u32..1_000_000, 1..60),
            room in 0u64..70,
            shift in 0u32..8,
        ) {
            let hist = |scale: u32| {
                let mut h = [0u64; DENSITY_BINS];
                for x in &heats {
                    h[usize::from(heat_bin(x << scale))] += 1;
                }
                h
            };
            let fast = [0u64; DENSITY_BINS];
            let t0 = fit_threshold(&hist(0), &fast, room, false, 1, 0);
            let t1 = fit_threshold(&hist(shift), &fast, room, false, 1, 0);
            let chosen = |t: u8, scale: u32| heats.iter().filter(|x| heat_bin(*x << scale) >= t).count();
            prop_assert_eq!(chosen(t0, 0), chosen(t1, shift));
            prop_assert!(chosen(t0, 0) as u64 <= room);
        }
    }
}
