//! [`HotnessStore`]: the pghot records of one slow NUMA node, keyed by (address space, vpn).
//!
//! # Layout
//!
//! ```text
//!  index: FxHashMap<(space, vpn >> 9), slot>      one-entry cache of the last lookup
//!                         │
//!                         ▼
//!  metas: [ChunkMeta; n]  key, hot, folio size, ready count, non-zero count, last touch (ms)
//!  records: [R; n * 512]  slot s owns records[s*512 .. s*512+512]   (R = u8 or u32 record)
//!  free:  [slot]          freed slots, reused before the arena grows
//!  hot:   [slot]          chunks flagged hot since the last drain (may hold stale slots)
//! ```
//!
//! A chunk is one PMD's worth of virtual pages (512), so a 2 MiB huge page is exactly one
//! chunk, tracked by its record at slot 0 with the chunk's size set to [`PageSize::Huge2M`].
//! A 1 GiB page spans 512 chunks; it is tracked by slot 0 of the chunk of its head (size
//! [`PageSize::Huge1G`]), and no other chunk of its range exists while it is tracked.
//!
//! # Folios never overlap
//!
//! The store holds one record per folio and never two records whose folios overlap: an access
//! names a folio (its size and head), and any record of another folio over the same virtual
//! pages is dropped first, because that folio no longer exists.
//!
//! * A base access inside a chunk tracked as a 2 MiB folio: the THP was split (the kernel
//!   splits under memory pressure, on partial unmap or mprotect, mm/huge_memory.c
//!   `split_huge_page_to_list_to_order()`). The huge record is dropped.
//! * A 2 MiB access at a head whose chunk holds base records: khugepaged (or
//!   `MADV_COLLAPSE`) collapsed them into a THP (mm/khugepaged.c `collapse_huge_page()`); the
//!   base records are dropped and the new folio starts from a clean record.
//! * A base or 2 MiB access inside a tracked 1 GiB page, or a 1 GiB access over smaller
//!   records: hugetlb pages are never split while mapped (mm/hugetlb.c has no split path for a
//!   mapped folio), so this can only follow an unmap and a new mapping. Handled the same way:
//!   the old records go.
//!
//! The kernel keeps per-PFN records across a split (the head's record keeps the folio's
//! history, the tail PFNs start at zero); tierd keys by virtual page and drops it, so a split
//! folio's pages start afresh. Checking for an enclosing 1 GiB page costs one more lookup per
//! access, made only while the store tracks one. A chunk exists
//! while at least one of its records is non-zero; it is freed when the last one is consumed
//! or removed, when its space is forgotten, or by [`HotnessStore::sweep`]. When more than
//! half the arena is free after a bulk operation (drain, sweep, forget), live chunks are
//! moved down and the arena, metadata and index are shrunk, so memory follows the tracked
//! set both up and down.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::record::{
    default_mode, precise_mode, DefaultRecord, PreciseRecord, Record, PGHOT_FREQ_THRESHOLD_DEFAULT,
};
pub(crate) use crate::chunk::ChunkKey;
use crate::chunk::{slot_idx, slot_u32, ChunkSlots};
use crate::types::{Nanos, NodeId, PageKey, PageSize, SpaceId, Vpn, HPAGE_PMD_NR, HPAGE_PUD_NR};

/// `log2(CHUNK_PAGES)`.
pub const CHUNK_SHIFT: u32 = 9;
/// Virtual pages per chunk: one PMD ([`HPAGE_PMD_NR`]), so a 2 MiB page is one chunk.
pub const CHUNK_PAGES: usize = 1 << CHUNK_SHIFT;
/// [`CHUNK_PAGES`] as a chunk offset (512 fits).
const CHUNK_PAGES_U16: u16 = 1 << CHUNK_SHIFT;
const CHUNK_MASK: u64 = (1 << CHUNK_SHIFT) - 1;
const _: () = assert!(CHUNK_PAGES as u64 == HPAGE_PMD_NR);

/// Which pghot record format a store keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HotnessMode {
    /// One byte per page (mm/pghot-default.c): frequency and 128 ms time buckets; promotion
    /// always to the target node.
    #[default]
    Default,
    /// Four bytes per page (mm/pghot-precise.c): frequency, ms time and the accessing node.
    Precise,
}

impl HotnessMode {
    /// Largest frequency the format stores, hence the largest useful threshold
    /// (`PGHOT_FREQ_MAX`: 3 or 7).
    #[must_use]
    pub const fn freq_max(self) -> u8 {
        match self {
            HotnessMode::Default => default_mode::PGHOT_FREQ_MAX,
            HotnessMode::Precise => precise_mode::PGHOT_FREQ_MAX,
        }
    }

    /// The kernel's default window (`PGHOT_FREQ_WINDOW_DEFAULT`: 3000 or 5000 ms).
    #[must_use]
    pub const fn default_window_ms(self) -> u32 {
        match self {
            HotnessMode::Default => default_mode::PGHOT_FREQ_WINDOW_DEFAULT,
            HotnessMode::Precise => precise_mode::PGHOT_FREQ_WINDOW_DEFAULT,
        }
    }

    /// The window range the kernel's sysctl accepts (`PGHOT_FREQ_WINDOW_MIN..=MAX`:
    /// 1000..=3968 or 1000..=16383 ms); larger windows would alias in the time field.
    #[must_use]
    pub const fn window_range_ms(self) -> (u32, u32) {
        match self {
            HotnessMode::Default => (
                default_mode::PGHOT_FREQ_WINDOW_MIN,
                default_mode::PGHOT_FREQ_WINDOW_MAX,
            ),
            HotnessMode::Precise => (
                precise_mode::PGHOT_FREQ_WINDOW_MIN,
                precise_mode::PGHOT_FREQ_WINDOW_MAX,
            ),
        }
    }
}

/// A parameter the kernel's sysctl handlers would refuse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HotnessParamsError {
    /// `freq_threshold` outside `1..=PGHOT_FREQ_MAX`.
    #[error("frequency threshold {threshold} is outside 1..={max} for this mode")]
    Threshold {
        /// The value given.
        threshold: u8,
        /// The mode's `PGHOT_FREQ_MAX`.
        max: u8,
    },
    /// `freq_window_ms` outside the mode's range.
    #[error("frequency window {window_ms} ms is outside {min}..={max} ms for this mode")]
    Window {
        /// The value given.
        window_ms: u32,
        /// `PGHOT_FREQ_WINDOW_MIN`.
        min: u32,
        /// `PGHOT_FREQ_WINDOW_MAX`.
        max: u32,
    },
    /// `target_nid` does not fit the 10-bit nid field (`PGHOT_NID_MAX`).
    #[error("target {node} does not fit the 10-bit node field")]
    Target {
        /// The value given.
        node: NodeId,
    },
}

/// The knobs of one store (the kernel's `pghot_*` sysctls that reach the records).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HotnessParams {
    /// Record format.
    pub mode: HotnessMode,
    /// `pghot_freq_threshold`: accesses within one window that make a page ready.
    pub freq_threshold: u8,
    /// `pghot_promote_freq_window_ms`: an access later than this after the previous one
    /// starts a new window.
    pub freq_window_ms: u32,
    /// `pghot_target_nid`: where default-mode pages go, and the node precise mode stores
    /// when the source does not know the accessing node.
    pub target_nid: NodeId,
}

impl HotnessParams {
    /// The kernel's defaults for `mode`: threshold 2, window 3000 ms (default) or 5000 ms
    /// (precise).
    #[must_use]
    pub const fn kernel_defaults(mode: HotnessMode, target_nid: NodeId) -> Self {
        HotnessParams {
            mode,
            freq_threshold: PGHOT_FREQ_THRESHOLD_DEFAULT,
            freq_window_ms: mode.default_window_ms(),
            target_nid,
        }
    }

    /// Checks the ranges the kernel's sysctl handlers enforce. The store itself accepts any
    /// value (a threshold of 0 makes every access ready, a window above the time range
    /// never starts a new window); the configuration layer should call this.
    ///
    /// # Errors
    /// The first parameter out of range.
    pub fn validate(&self) -> Result<(), HotnessParamsError> {
        let max = self.mode.freq_max();
        if self.freq_threshold == 0 || self.freq_threshold > max {
            return Err(HotnessParamsError::Threshold {
                threshold: self.freq_threshold,
                max,
            });
        }
        let (min, max) = self.mode.window_range_ms();
        if !(min..=max).contains(&self.freq_window_ms) {
            return Err(HotnessParamsError::Window {
                window_ms: self.freq_window_ms,
                min,
                max,
            });
        }
        if self.target_nid.0 > precise_mode::PGHOT_NID_MAX {
            return Err(HotnessParamsError::Target {
                node: self.target_nid,
            });
        }
        Ok(())
    }
}

/// A page whose record was ready and has been consumed by [`HotnessStore::drain_ready`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReadyPage {
    /// The page; for a huge page, its head (aligned to its size).
    pub key: PageKey,
    /// The folio's size: base page, 2 MiB or 1 GiB.
    pub size: PageSize,
    /// Where it should go: the stored accessing node (precise mode) or the target node
    /// (default mode, as `pghot_get_record()` reports `pghot_target_nid`).
    pub nid: NodeId,
    /// Access frequency in the window when consumed.
    pub freq: u8,
    /// Age of the last recorded access at drain time, as the kernel computes it (modular:
    /// quantised to 128 ms and aliasing after 4096 ms in default mode, aliasing after
    /// 16384 ms in precise mode).
    pub age_ms: u64,
}

impl ChunkKey {
    /// The chunk of `key`: one PMD's worth of pages.
    pub(crate) fn of(key: PageKey) -> Self {
        Self::at_shift(key, CHUNK_SHIFT)
    }
}

/// Per-chunk bookkeeping.
#[derive(Clone, Copy, Debug)]
struct ChunkMeta {
    key: ChunkKey,
    /// Latest access recorded in the chunk, in ms.
    last_touch_ms: u64,
    /// Records with the ready bit.
    ready: u16,
    /// No ready record sits below this offset ([`CHUNK_PAGES`]: none is ready): a drain
    /// starts its walk there. Lowered as records turn ready, reset when a drain or a reset
    /// leaves none; a removal leaves it (a lower bound still). Samples make a record ready
    /// at a random offset, and the walk from 0 read half a chunk for it: most of a drain.
    first_ready: u16,
    /// Records that are not zero.
    nonzero: u16,
    /// Flagged for the next drain (`PGHOT_SECTION_HOT_BIT`); set when an update returns
    /// ready, cleared when a drain walks the chunk.
    hot: bool,
    /// The size of the folios the chunk tracks: base pages at their own slots, or one huge
    /// folio (2 MiB, or 1 GiB in the chunk of its head) at slot 0.
    size: PageSize,
    /// In use (not on the free list).
    live: bool,
}

impl ChunkMeta {
    const FREE: ChunkMeta = ChunkMeta {
        key: ChunkKey {
            space: SpaceId(0),
            index: 0,
        },
        last_touch_ms: 0,
        ready: 0,
        first_ready: CHUNK_PAGES_U16,
        nonzero: 0,
        hot: false,
        size: PageSize::Base,
        live: false,
    };
}

/// The slot of `vpn` inside its chunk.
fn offset_in_chunk(vpn: Vpn) -> usize {
    // Masked to 9 bits before the cast: cannot truncate.
    #[allow(clippy::cast_possible_truncation)]
    let off = (vpn.0 & CHUNK_MASK) as usize;
    off
}

/// The record of the folio of `size` at `vpn` within its chunk: a huge folio's chunk holds
/// one record, at 0.
fn record_offset(vpn: Vpn, size: PageSize) -> usize {
    if size.is_huge() {
        0
    } else {
        offset_in_chunk(vpn)
    }
}

/// Whether a compaction gives the memory it frees back ([`Table::compact`]). Only the periodic
/// sweep and a space's exit do: a drain or a removal that leaves half the arena free is
/// often followed by as many new chunks (a promoter's churn), and giving the memory back
/// there made every regrowth fault it in again (4.7 M page faults and 15 % of a churning
/// simulated run's time went to that); the next sweep gives back what stays spare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Release {
    Yes,
    No,
}

/// The chunked arena for one record format.
#[derive(Clone)]
struct Table<R: Record> {
    records: Vec<R>,
    metas: Vec<ChunkMeta>,
    slots: ChunkSlots,
    hot: Vec<usize>,
    /// Non-zero records (one per folio).
    tracked: u64,
    /// Ready records.
    ready: u64,
    /// Base pages of the folios with a non-zero record.
    tracked_base: u64,
    /// Base pages of the folios with a ready record.
    ready_base: u64,
    /// Live chunks tracking a 1 GiB page: while 0, no access needs the enclosing-page check.
    giants: u64,
}

impl<R: Record> Table<R> {
    fn new() -> Self {
        Table {
            records: Vec::new(),
            metas: Vec::new(),
            slots: ChunkSlots::default(),
            hot: Vec::new(),
            tracked: 0,
            ready: 0,
            tracked_base: 0,
            ready_base: 0,
            giants: 0,
        }
    }

    fn chunk_records(&mut self, slot: usize) -> &mut [R] {
        &mut self.records[slot * CHUNK_PAGES..(slot + 1) * CHUNK_PAGES]
    }

    #[inline]
    fn find(&self, ck: ChunkKey) -> Option<usize> {
        self.slots.peek(ck).map(slot_idx)
    }

    /// Reads the chunk meta and the record `record` would touch, without changing anything
    /// (see `Engine::observe`); whether the folio has a live record at this size.
    #[inline]
    fn warm(&self, key: PageKey, size: PageSize) -> bool {
        let ck = ChunkKey::of(PageKey {
            space: key.space,
            vpn: size.head(key.vpn),
        });
        let Some(slot) = self.find(ck) else {
            return false;
        };
        let off = record_offset(key.vpn, size);
        self.metas[slot].size == size && !self.records[slot * CHUNK_PAGES + off].is_zero()
    }

    #[inline]
    fn find_or_alloc(&mut self, ck: ChunkKey) -> usize {
        match self.slots.find(ck) {
            Some(s) => slot_idx(s),
            None => self.alloc(ck),
        }
    }

    #[cold]
    fn alloc(&mut self, ck: ChunkKey) -> usize {
        let (records, metas) = (&mut self.records, &mut self.metas);
        let slot = slot_idx(self.slots.claim(ck, || {
            if records.capacity() - records.len() < CHUNK_PAGES {
                // Grow by a quarter (whole chunks, at least 16) instead of doubling: still
                // amortised O(1) per chunk, but at most ~25% of the arena is unused capacity.
                let chunks = (metas.len() / 4).max(16);
                records.reserve_exact(chunks * CHUNK_PAGES);
            }
            records.resize(records.len() + CHUNK_PAGES, R::ZERO);
            metas.push(ChunkMeta::FREE);
            slot_u32(metas.len() - 1)
        }));
        self.metas[slot] = ChunkMeta {
            key: ck,
            live: true,
            ..ChunkMeta::FREE
        };
        slot
    }

    /// Zeroes every record of a live chunk, keeping the chunk.
    fn reset_chunk(&mut self, slot: usize) {
        let m = self.metas[slot];
        let nr = m.size.nr_pages().0;
        self.tracked -= u64::from(m.nonzero);
        self.ready -= u64::from(m.ready);
        self.tracked_base -= u64::from(m.nonzero) * nr;
        self.ready_base -= u64::from(m.ready) * nr;
        if m.size.is_huge() {
            self.records[slot * CHUNK_PAGES] = R::ZERO;
        } else {
            self.chunk_records(slot).fill(R::ZERO);
        }
        let m = &mut self.metas[slot];
        m.nonzero = 0;
        m.ready = 0;
        m.first_ready = CHUNK_PAGES_U16;
    }

    /// Sets the folio size a live chunk tracks (its records must be zero).
    fn set_size(&mut self, slot: usize, size: PageSize) {
        let m = &mut self.metas[slot];
        debug_assert_eq!(m.nonzero, 0);
        if m.size == PageSize::Huge1G {
            self.giants -= 1;
        }
        if size == PageSize::Huge1G {
            self.giants += 1;
        }
        m.size = size;
    }

    /// Makes `slot` track folios of `size`, dropping the records of the folio(s) it tracked
    /// at another size (a split, a collapse, or an unmap and remap; see the module docs).
    #[inline]
    fn settle(&mut self, slot: usize, size: PageSize) {
        if self.metas[slot].size != size {
            if self.metas[slot].nonzero != 0 {
                self.reset_chunk(slot);
            }
            self.set_size(slot, size);
        }
    }

    /// The chunk of the 1 GiB head enclosing `vpn` of `space`, when it tracks a 1 GiB page.
    #[inline]
    fn giant_of(&self, space: SpaceId, vpn: Vpn) -> Option<usize> {
        if self.giants == 0 {
            return None;
        }
        let ck = ChunkKey::of(PageKey {
            space,
            vpn: PageSize::Huge1G.head(vpn),
        });
        self.find(ck)
            .filter(|&s| self.metas[s].size == PageSize::Huge1G)
    }

    /// Frees every live chunk of `[first, first + n)` chunk indices of `space` except `keep`.
    fn free_range(&mut self, space: SpaceId, first: u64, n: u64, keep: Option<usize>) {
        for index in first..first + n {
            if let Some(s) = self.find(ChunkKey { space, index }) {
                if Some(s) != keep {
                    self.free_chunk(s);
                }
            }
        }
    }

    /// Drops every record of a folio overlapping the folio of `size` containing `key`.
    fn remove_overlapping(&mut self, key: PageKey, size: PageSize) {
        if let Some(g) = self.giant_of(key.space, key.vpn) {
            // Nothing else of its range exists.
            self.free_chunk(g);
            return;
        }
        match size {
            PageSize::Base => self.remove(key),
            PageSize::Huge2M => {
                if let Some(s) = self.find(ChunkKey::of(key)) {
                    self.free_chunk(s);
                }
            }
            PageSize::Huge1G => {
                let first = PageSize::Huge1G.head(key.vpn).0 >> CHUNK_SHIFT;
                self.free_range(key.space, first, HPAGE_PUD_NR >> CHUNK_SHIFT, None);
            }
        }
        self.maybe_compact(Release::No);
    }

    /// Drops a live chunk: records zeroed, slot on the free list.
    fn free_chunk(&mut self, slot: usize) {
        self.reset_chunk(slot);
        self.set_size(slot, PageSize::Base);
        let key = self.metas[slot].key;
        self.metas[slot] = ChunkMeta::FREE;
        self.slots.release(key, slot_u32(slot));
    }

    #[inline]
    fn record(
        &mut self,
        key: PageKey,
        size: PageSize,
        nid: u16,
        now: Nanos,
        p: &HotnessParams,
    ) -> bool {
        let head = PageKey {
            space: key.space,
            vpn: size.head(key.vpn),
        };
        let ck = ChunkKey::of(head);
        if size != PageSize::Huge1G {
            // A base or 2 MiB access inside a tracked 1 GiB page whose head is in another
            // chunk: the gigantic page was unmapped (see the module docs). Its head chunk is
            // settled below.
            if let Some(g) = self.giant_of(key.space, key.vpn) {
                if self.metas[g].key != ck {
                    self.free_chunk(g);
                }
            }
        }
        let slot = self.find_or_alloc(ck);
        if self.metas[slot].size != size {
            // A split, a collapse, an unmap and remap, or a fresh chunk: the folio(s) the
            // chunk tracked are gone and the new one starts from a clean record.
            self.settle(slot, size);
            if size == PageSize::Huge1G {
                // Smaller folios in the rest of the gigantic page's range are gone too.
                self.free_range(
                    key.space,
                    ck.index + 1,
                    (HPAGE_PUD_NR >> CHUNK_SHIFT) - 1,
                    Some(slot),
                );
            }
        }
        let off = record_offset(key.vpn, size);
        let nr = size.nr_pages().0;
        let rec = &mut self.records[slot * CHUNK_PAGES + off];
        let was_zero = rec.is_zero();
        let was_ready = rec.is_ready();
        let ready = rec.record(nid, now.jiffies(), p.freq_window_ms, p.freq_threshold);
        let m = &mut self.metas[slot];
        if was_zero {
            m.nonzero += 1;
            self.tracked += 1;
            self.tracked_base += nr;
        }
        if ready && !was_ready {
            m.ready += 1;
            // `off` < CHUNK_PAGES, which fits u16.
            #[allow(clippy::cast_possible_truncation)]
            let at = off as u16;
            m.first_ready = m.first_ready.min(at);
            self.ready += 1;
            self.ready_base += nr;
        }
        m.last_touch_ms = m.last_touch_ms.max(now.as_millis());
        if ready && !m.hot {
            m.hot = true;
            self.hot.push(slot);
            if self.hot.len() > 2 * self.metas.len() + 64 {
                // Without drains, chunks freed while hot leave stale entries behind.
                self.prune_hot();
            }
        }
        ready
    }

    /// Drops stale entries from the hot list (chunks freed, or already walked) and
    /// duplicates (a freed slot reused by a chunk that became hot again).
    fn prune_hot(&mut self) {
        let metas = &self.metas;
        self.hot.retain(|&s| metas[s].live && metas[s].hot);
        self.hot.sort_unstable();
        self.hot.dedup();
    }

    fn drain(&mut self, now: Nanos, target: NodeId, out: &mut Vec<ReadyPage>) {
        let jiffies = now.jiffies();
        self.prune_hot();
        let mut hot = std::mem::take(&mut self.hot);
        // Sorting by chunk key makes the output order independent of hash and allocation
        // order.
        hot.sort_unstable_by_key(|&s| self.metas[s].key);
        for &slot in &hot {
            let m = self.metas[slot];
            // Cleared before the walk, like test_and_clear_bit(PGHOT_SECTION_HOT_BIT) in
            // kmigrated_do_work(); the walk consumes every ready record of the chunk.
            self.metas[slot].hot = false;
            let mut left = m.ready;
            let mut taken: u16 = 0;
            let base_vpn = m.key.index << CHUNK_SHIFT;
            let size = m.size;
            let recs = &mut self.records[slot * CHUNK_PAGES..(slot + 1) * CHUNK_PAGES];
            let from = usize::from(m.first_ready);
            for (i, r) in recs.iter_mut().enumerate().skip(from) {
                if left == 0 {
                    break;
                }
                if let Some(c) = r.consume(jiffies) {
                    left -= 1;
                    taken += 1;
                    out.push(ReadyPage {
                        key: PageKey {
                            space: m.key.space,
                            vpn: Vpn(base_vpn | i as u64),
                        },
                        size,
                        nid: c.nid.map_or(target, NodeId),
                        freq: c.freq,
                        age_ms: c.age_ms,
                    });
                }
            }
            let mm = &mut self.metas[slot];
            // The walk consumed every ready record.
            mm.first_ready = CHUNK_PAGES_U16;
            mm.ready -= taken;
            mm.nonzero -= taken;
            self.ready -= u64::from(taken);
            self.tracked -= u64::from(taken);
            self.ready_base -= u64::from(taken) * size.nr_pages().0;
            self.tracked_base -= u64::from(taken) * size.nr_pages().0;
            if mm.nonzero == 0 {
                self.free_chunk(slot);
            }
        }
        hot.clear();
        self.hot = hot;
        self.maybe_compact(Release::No);
    }

    fn remove(&mut self, key: PageKey) {
        // A huge page moves as one unit: any of its vpns names it.
        let Some(slot) = self
            .giant_of(key.space, key.vpn)
            .or_else(|| self.find(ChunkKey::of(key)))
        else {
            return;
        };
        let size = self.metas[slot].size;
        let off = record_offset(key.vpn, size);
        let rec = &mut self.records[slot * CHUNK_PAGES + off];
        if rec.is_zero() {
            return;
        }
        let was_ready = rec.is_ready();
        *rec = R::ZERO;
        let m = &mut self.metas[slot];
        m.nonzero -= 1;
        self.tracked -= 1;
        self.tracked_base -= size.nr_pages().0;
        if was_ready {
            m.ready -= 1;
            self.ready -= 1;
            self.ready_base -= size.nr_pages().0;
        }
        if m.nonzero == 0 {
            self.free_chunk(slot);
        }
    }

    fn forget_space(&mut self, space: SpaceId) {
        for slot in 0..self.metas.len() {
            let m = self.metas[slot];
            if m.live && m.key.space == space {
                self.free_chunk(slot);
            }
        }
        self.maybe_compact(Release::Yes);
    }

    fn sweep(&mut self, now: Nanos, idle: Nanos) {
        let now_ms = now.as_millis();
        let idle_ms = idle.as_millis();
        for slot in 0..self.metas.len() {
            let m = self.metas[slot];
            if m.live && m.ready == 0 && now_ms.saturating_sub(m.last_touch_ms) >= idle_ms {
                self.free_chunk(slot);
            }
        }
        self.maybe_compact(Release::Yes);
        self.trim();
    }

    /// Compacts when more than half the slots are free.
    fn maybe_compact(&mut self, release: Release) {
        if self.slots.free_len() * 2 > self.metas.len() {
            self.compact(release);
        }
    }

    /// Gives back the arena's capacity beyond what [`Table::alloc`]'s growth step would
    /// reserve (a quarter, at least 16 chunks): what compactions between two sweeps kept.
    fn trim(&mut self) {
        let slack = (self.metas.len() / 4).max(16);
        if self.metas.capacity() > self.metas.len() + slack {
            self.shrink();
        }
    }

    /// Gives back every spare byte of the arena, the metadata, the free list and the index.
    fn shrink(&mut self) {
        self.records.shrink_to_fit();
        self.metas.shrink_to_fit();
        self.slots.shrink();
    }

    /// Moves the live chunks at the top of the arena into the free slots below, then
    /// truncates the arena, the metadata and the free list, and with [`Release::Yes`] gives
    /// their memory and the index's back.
    fn compact(&mut self, release: Release) {
        let live = self.metas.len() - self.slots.free_len();
        let mut holes: Vec<usize> = self
            .slots
            .free_slots()
            .iter()
            .map(|&s| slot_idx(s))
            .filter(|&s| s < live)
            .collect();
        holes.sort_unstable();
        let movers: Vec<usize> = (live..self.metas.len())
            .filter(|&s| self.metas[s].live)
            .collect();
        for (dst, src) in holes.into_iter().zip(movers) {
            self.records.copy_within(
                src * CHUNK_PAGES..(src + 1) * CHUNK_PAGES,
                dst * CHUNK_PAGES,
            );
            self.metas[dst] = self.metas[src];
            self.slots.moved(self.metas[dst].key, slot_u32(dst));
        }
        self.records.truncate(live * CHUNK_PAGES);
        self.metas.truncate(live);
        self.slots.compacted();
        if release == Release::Yes {
            self.shrink();
        }
        self.hot = (0..live).filter(|&s| self.metas[s].hot).collect();
    }

    /// Every non-zero record, recounted from the arena: (folio head, size, ready).
    #[cfg(test)]
    fn recount(&self) -> Vec<(PageKey, PageSize, bool)> {
        let mut out = Vec::new();
        for (slot, m) in self.metas.iter().enumerate() {
            if !m.live {
                continue;
            }
            let recs = &self.records[slot * CHUNK_PAGES..(slot + 1) * CHUNK_PAGES];
            for (i, r) in recs.iter().enumerate() {
                if !r.is_zero() {
                    let key = PageKey {
                        space: m.key.space,
                        vpn: Vpn((m.key.index << CHUNK_SHIFT) | i as u64),
                    };
                    out.push((key, m.size, r.is_ready()));
                }
            }
        }
        out
    }

    fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        self.records.capacity() * size_of::<R>()
            + self.metas.capacity() * size_of::<ChunkMeta>()
            + self.slots.memory_bytes()
            + self.hot.capacity() * size_of::<usize>()
    }
}

impl<R: Record> fmt::Debug for Table<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Table")
            .field("chunks", &(self.metas.len() - self.slots.free_len()))
            .field("free_chunks", &self.slots.free_len())
            .field("tracked", &self.tracked)
            .field("ready", &self.ready)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Debug)]
enum Tables {
    Default(Table<DefaultRecord>),
    Precise(Table<PreciseRecord>),
}

impl Tables {
    fn new(mode: HotnessMode) -> Self {
        match mode {
            HotnessMode::Default => Tables::Default(Table::new()),
            HotnessMode::Precise => Tables::Precise(Table::new()),
        }
    }
}

/// Dispatches `$body` on the table of the current mode, binding it to `$t`.
macro_rules! with_table {
    ($tables:expr, $t:ident => $body:expr) => {
        match $tables {
            Tables::Default($t) => $body,
            Tables::Precise($t) => $body,
        }
    };
}

/// The pghot records of one slow NUMA node: what `mem_section->hot_map` holds for a
/// lower-tier node in the kernel, keyed by (address space, vpn) instead of PFN and
/// allocated per 512-page chunk on first access instead of per section at boot.
#[derive(Clone, Debug)]
pub struct HotnessStore {
    params: HotnessParams,
    tables: Tables,
}

impl HotnessStore {
    /// An empty store. `params` is used as given; see [`HotnessParams::validate`].
    #[must_use]
    pub fn new(params: HotnessParams) -> Self {
        HotnessStore {
            params,
            tables: Tables::new(params.mode),
        }
    }

    /// The current parameters.
    #[must_use]
    pub fn params(&self) -> &HotnessParams {
        &self.params
    }

    /// Replaces the parameters. A mode change clears the store (the formats do not
    /// convert); other changes apply to later accesses and leave the records as they are,
    /// as a sysctl write does in the kernel.
    pub fn set_params(&mut self, params: HotnessParams) {
        if params.mode != self.params.mode {
            self.tables = Tables::new(params.mode);
        }
        self.params = params;
    }

    /// Records one access. `accessing` None = source does not know the accessing node ->
    /// target_nid (precise mode stores it; default mode stores no nid). Returns whether the
    /// record is ready.
    ///
    /// A huge folio (2 MiB or 1 GiB: any vpn inside it) shares the record of its head. Any
    /// record of another folio overlapping this one is dropped first (a split, a collapse, or
    /// an unmap and remap: see the module docs), so no virtual page is ever counted in two
    /// records.
    pub fn record(
        &mut self,
        key: PageKey,
        size: PageSize,
        accessing: Option<NodeId>,
        now: Nanos,
    ) -> bool {
        let nid = accessing.unwrap_or(self.params.target_nid).0;
        let p = &self.params;
        with_table!(&mut self.tables, t => t.record(key, size, nid, now, p))
    }

    /// Reads ahead what [`HotnessStore::record`] of this folio will touch, changing nothing:
    /// a caller with a batch of scattered pages reads a few first so that their cache misses
    /// overlap (`Engine::observe`). Returns whether the folio has a live record.
    #[must_use]
    #[inline]
    pub fn warm(&self, key: PageKey, size: PageSize) -> bool {
        with_table!(&self.tables, t => t.warm(key, size))
    }

    /// One kmigrated pass: consume (and reset) every ready record, pushing them to `out` in
    /// ascending (space, vpn) order. Only chunks flagged hot are walked (like
    /// PGHOT_SECTION_HOT_BIT).
    ///
    /// Chunks left with no record are freed, and the arena is compacted when more than half
    /// of it is free.
    pub fn drain_ready(&mut self, now: Nanos, out: &mut Vec<ReadyPage>) {
        let target = self.params.target_nid;
        with_table!(&mut self.tables, t => t.drain(now, target, out));
    }

    /// The page left this node (promoted, or the backend says it is elsewhere): reset its
    /// record. For a huge page any vpn inside it names it.
    pub fn remove(&mut self, key: PageKey) {
        with_table!(&mut self.tables, t => t.remove(key));
    }

    /// The folio of `size` containing `key` is elsewhere (seen on another node): drop every
    /// record overlapping it, whatever size this store knew it at. A 1 GiB folio costs up to
    /// 512 chunk lookups.
    pub fn remove_overlapping(&mut self, key: PageKey, size: PageSize) {
        with_table!(&mut self.tables, t => t.remove_overlapping(key, size));
    }

    /// The address space is gone (process exited): drop all its records.
    pub fn forget_space(&mut self, space: SpaceId) {
        with_table!(&mut self.tables, t => t.forget_space(space));
    }

    /// Frees chunks that hold no ready record and were not touched for `idle` (bounded
    /// memory for pages that stopped being accessed). "Not touched for `idle`" is
    /// `now - last access in the chunk >= idle`, in whole milliseconds.
    pub fn sweep(&mut self, now: Nanos, idle: Nanos) {
        with_table!(&mut self.tables, t => t.sweep(now, idle));
    }

    /// Records that are non-zero (folios, base or huge, with a recorded access that was not
    /// yet consumed or removed): one per folio, a 2 MiB page counts 1.
    #[must_use]
    pub fn tracked_pages(&self) -> u64 {
        with_table!(&self.tables, t => t.tracked)
    }

    /// Records with the ready bit (one per folio).
    #[must_use]
    pub fn ready_pages(&self) -> u64 {
        with_table!(&self.tables, t => t.ready)
    }

    /// Base pages of the folios with a non-zero record (a 2 MiB page counts 512).
    #[must_use]
    pub fn tracked_base_pages(&self) -> u64 {
        with_table!(&self.tables, t => t.tracked_base)
    }

    /// Base pages of the folios with a ready record.
    #[must_use]
    pub fn ready_base_pages(&self) -> u64 {
        with_table!(&self.tables, t => t.ready_base)
    }

    /// Chunks (512-page groups) currently allocated.
    #[must_use]
    pub fn chunks(&self) -> usize {
        with_table!(&self.tables, t => t.metas.len() - t.slots.free_len())
    }

    /// Heap bytes held, an honest estimate: record arena capacity + chunk metadata capacity
    /// + hash index (buckets × (entry + control byte)) + free and hot lists + the struct.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + with_table!(&self.tables, t => t.memory_bytes())
    }

    /// Every folio with a non-zero record, recounted from the records themselves (not the
    /// counters): (head, size, ready).
    #[cfg(test)]
    pub(crate) fn recount(&self) -> Vec<(PageKey, PageSize, bool)> {
        with_table!(&self.tables, t => t.recount())
    }

    /// Bytes of one record in `mode`: 1 (default) or 4 (precise), `PGHOT_RECORD_SIZE`.
    #[must_use]
    pub fn bytes_per_record(mode: HotnessMode) -> usize {
        match mode {
            HotnessMode::Default => DefaultRecord::SIZE,
            HotnessMode::Precise => PreciseRecord::SIZE,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;

    use super::*;

    const MS: u64 = 1_000_000;

    fn key(space: u32, vpn: u64) -> PageKey {
        PageKey {
            space: SpaceId(space),
            vpn: Vpn(vpn),
        }
    }

    fn params(mode: HotnessMode) -> HotnessParams {
        HotnessParams::kernel_defaults(mode, NodeId(0))
    }

    fn drain(s: &mut HotnessStore, now_ms: u64) -> Vec<ReadyPage> {
        let mut out = Vec::new();
        s.drain_ready(Nanos::from_millis(now_ms), &mut out);
        out
    }

    fn base(s: &mut HotnessStore, space: u32, vpn: u64, node: Option<u16>, now_ms: u64) -> bool {
        s.record(
            key(space, vpn),
            PageSize::Base,
            node.map(NodeId),
            Nanos::from_millis(now_ms),
        )
    }

    #[test]
    fn precise_stores_the_accessing_node() {
        let mut s = HotnessStore::new(params(HotnessMode::Precise));
        assert!(!base(&mut s, 1, 10, Some(3), 1000));
        assert!(base(&mut s, 1, 10, Some(3), 1200));
        assert_eq!(
            drain(&mut s, 1500),
            vec![ReadyPage {
                key: key(1, 10),
                size: PageSize::Base,
                nid: NodeId(3),
                freq: 2,
                age_ms: 300,
            }]
        );
        // The latest accessor wins, as in mm/pghot-precise.c.
        base(&mut s, 1, 11, Some(3), 2000);
        base(&mut s, 1, 11, Some(2), 2100);
        assert_eq!(drain(&mut s, 2100)[0].nid, NodeId(2));
    }

    #[test]
    fn the_read_ahead_sees_live_records_and_changes_nothing() {
        for mode in [HotnessMode::Default, HotnessMode::Precise] {
            let mut s = HotnessStore::new(params(mode));
            assert!(!s.warm(key(1, 10), PageSize::Base), "no chunk yet");
            base(&mut s, 1, 10, None, 1000);
            assert!(s.warm(key(1, 10), PageSize::Base));
            assert!(!s.warm(key(1, 11), PageSize::Base), "same chunk, no record");
            assert!(
                !s.warm(key(1, 0), PageSize::Huge2M),
                "the chunk is at base size"
            );
            // Reading ahead does not count as an access: one more makes it ready, as without.
            assert!(base(&mut s, 1, 10, None, 1100));
            assert_eq!(drain(&mut s, 1200).len(), 1);
            assert!(!s.warm(key(1, 10), PageSize::Base), "drained: reset");
        }
    }

    #[test]
    fn precise_unknown_accessor_stores_the_target() {
        let mut s = HotnessStore::new(HotnessParams {
            target_nid: NodeId(5),
            ..params(HotnessMode::Precise)
        });
        base(&mut s, 1, 10, None, 1000);
        base(&mut s, 1, 10, None, 1100);
        // Changing the target later does not rewrite what was stored.
        s.set_params(HotnessParams {
            target_nid: NodeId(1),
            ..*s.params()
        });
        let out = drain(&mut s, 1100);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].nid, NodeId(5));
    }

    #[test]
    fn default_reports_the_target_at_drain_time() {
        let mut s = HotnessStore::new(params(HotnessMode::Default));
        base(&mut s, 1, 10, Some(3), 1000);
        base(&mut s, 1, 10, Some(3), 1100);
        s.set_params(HotnessParams {
            target_nid: NodeId(2),
            ..*s.params()
        });
        let out = drain(&mut s, 1100);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].nid, NodeId(2), "default mode stores no nid");
        assert_eq!(out[0].freq, 2);
        assert_eq!(s.tracked_pages(), 0);
    }

    #[test]
    fn huge_page_is_tracked_as_one_unit() {
        for mode in [HotnessMode::Default, HotnessMode::Precise] {
            let mut s = HotnessStore::new(params(mode));
            let now = Nanos::from_millis(1000);
            assert!(!s.record(key(1, 512 + 3), PageSize::Huge2M, None, now));
            assert!(s.record(key(1, 512 + 400), PageSize::Huge2M, None, now));
            assert_eq!((s.tracked_pages(), s.ready_pages(), s.chunks()), (1, 1, 1));
            let out = drain(&mut s, 1000);
            assert_eq!(out.len(), 1);
            assert_eq!(out[0].key, key(1, 512));
            assert_eq!(out[0].size, PageSize::Huge2M);
            assert_eq!(out[0].freq, 2);
            assert_eq!((s.tracked_pages(), s.chunks()), (0, 0));
        }
    }

    #[test]
    fn remove_by_any_vpn_of_a_huge_page() {
        let mut s = HotnessStore::new(params(HotnessMode::Default));
        s.record(key(1, 1024), PageSize::Huge2M, None, Nanos::from_millis(10));
        assert_eq!(s.tracked_pages(), 1);
        s.remove(key(1, 1024 + 77));
        assert_eq!((s.tracked_pages(), s.chunks()), (0, 0));
    }

    #[test]
    fn split_of_a_huge_page_resets_the_chunk() {
        for mode in [HotnessMode::Default, HotnessMode::Precise] {
            let mut s = HotnessStore::new(params(mode));
            let t = Nanos::from_millis(1000);
            s.record(key(1, 512), PageSize::Huge2M, None, t);
            assert!(s.record(key(1, 512), PageSize::Huge2M, None, t));
            assert_eq!(s.ready_pages(), 1);
            // A base-page access inside it: the THP was split.
            assert!(!s.record(key(1, 512 + 5), PageSize::Base, None, t));
            assert_eq!((s.tracked_pages(), s.ready_pages()), (1, 0));
            assert!(drain(&mut s, 1000).is_empty());
            // The base page now counts on its own.
            assert!(s.record(key(1, 512 + 5), PageSize::Base, None, t));
            let out = drain(&mut s, 1000);
            assert_eq!(out.len(), 1);
            assert_eq!((out[0].key, out[0].size), (key(1, 517), PageSize::Base));
            // And a collapse back into a THP resets the base records.
            s.record(key(1, 512 + 6), PageSize::Base, None, t);
            s.record(key(1, 512 + 7), PageSize::Base, None, t);
            assert_eq!(s.tracked_pages(), 2);
            assert!(!s.record(key(1, 512), PageSize::Huge2M, None, t));
            assert_eq!(s.tracked_pages(), 1);
        }
    }

    #[test]
    fn a_gigantic_page_is_one_record_drained_with_its_size() {
        for mode in [HotnessMode::Default, HotnessMode::Precise] {
            let mut s = HotnessStore::new(params(mode));
            let t = Nanos::from_millis(1000);
            let g = 3 * HPAGE_PUD_NR;
            // Base pages in two chunks of the range, then the 1 GiB page mapped over them.
            base(&mut s, 1, g + 5, None, 900);
            base(&mut s, 1, g + 7000, None, 900);
            s.record(key(1, g + 1024 + 100), PageSize::Huge2M, None, t);
            assert_eq!(s.chunks(), 3);
            assert!(!s.record(key(1, g + 9999), PageSize::Huge1G, None, t));
            assert_eq!((s.tracked_pages(), s.chunks()), (1, 1), "{mode:?}");
            assert_eq!(s.tracked_base_pages(), HPAGE_PUD_NR);
            // Any page of it names it; the second access makes it ready.
            assert!(s.record(key(1, g + HPAGE_PUD_NR - 1), PageSize::Huge1G, None, t));
            assert_eq!(s.ready_base_pages(), HPAGE_PUD_NR);
            let out = drain(&mut s, 1000);
            assert_eq!(out.len(), 1);
            assert_eq!((out[0].key, out[0].size), (key(1, g), PageSize::Huge1G));
            assert_eq!((s.tracked_pages(), s.tracked_base_pages()), (0, 0));
            // Removed by any of its pages.
            s.record(key(1, g), PageSize::Huge1G, None, t);
            s.remove(key(1, g + 200_000));
            assert_eq!((s.tracked_pages(), s.chunks()), (0, 0));
        }
    }

    #[test]
    fn an_access_inside_a_gigantic_page_drops_it() {
        let mut s = HotnessStore::new(params(HotnessMode::Precise));
        let t = Nanos::from_millis(1000);
        let g = HPAGE_PUD_NR;
        s.record(key(1, g), PageSize::Huge1G, None, t);
        s.record(key(1, g), PageSize::Huge1G, None, t);
        assert_eq!(s.ready_pages(), 1);
        // Unmapped and remapped as 4 KiB pages (hugetlb never splits a mapped page): the
        // gigantic record goes, in another chunk than the new page's.
        assert!(!s.record(key(1, g + 5 * 512 + 3), PageSize::Base, None, t));
        assert_eq!((s.tracked_pages(), s.ready_pages(), s.chunks()), (1, 0, 1));
        assert_eq!(s.tracked_base_pages(), 1);
        // A 2 MiB page at the gigantic head replaces it too.
        s.record(key(1, g), PageSize::Huge1G, None, t);
        assert_eq!((s.tracked_pages(), s.chunks()), (1, 1));
        s.record(key(1, g + 1), PageSize::Huge2M, None, t);
        assert_eq!((s.tracked_pages(), s.tracked_base_pages()), (1, 512));
        // Seen on another node: every overlapping record goes.
        s.record(key(1, g + 512), PageSize::Base, None, t);
        s.remove_overlapping(key(1, g + 77), PageSize::Huge1G);
        assert_eq!((s.tracked_pages(), s.chunks()), (0, 0));
    }

    #[test]
    fn forget_space_drops_only_that_space() {
        let mut s = HotnessStore::new(params(HotnessMode::Precise));
        for vpn in [0, 1, 600, 5000] {
            base(&mut s, 1, vpn, None, 100);
            base(&mut s, 1, vpn, None, 200);
            base(&mut s, 2, vpn, None, 100);
        }
        assert_eq!((s.tracked_pages(), s.ready_pages(), s.chunks()), (8, 4, 6));
        s.forget_space(SpaceId(1));
        assert_eq!((s.tracked_pages(), s.ready_pages(), s.chunks()), (4, 0, 3));
        assert!(drain(&mut s, 300).is_empty());
        base(&mut s, 2, 600, None, 300);
        let out = drain(&mut s, 300);
        assert_eq!(
            out.iter().map(|r| r.key).collect::<Vec<_>>(),
            vec![key(2, 600)]
        );
    }

    #[test]
    fn sweep_frees_idle_chunks_but_keeps_ready_ones() {
        let mut s = HotnessStore::new(params(HotnessMode::Default));
        base(&mut s, 1, 0, None, 0); // chunk A: ready
        base(&mut s, 1, 0, None, 100);
        base(&mut s, 1, 1, None, 100); // chunk A: not ready, kept with its chunk
        base(&mut s, 1, 512, None, 100); // chunk B: idle, not ready
        base(&mut s, 1, 1024, None, 9000); // chunk C: recent
        assert_eq!((s.tracked_pages(), s.chunks()), (4, 3));
        s.sweep(Nanos::from_millis(10_000), Nanos::from_secs(5));
        assert_eq!((s.tracked_pages(), s.ready_pages(), s.chunks()), (3, 1, 2));
        // Exactly `idle` after the last touch counts as idle.
        s.sweep(Nanos::from_millis(13_999), Nanos::from_secs(5));
        assert_eq!(s.chunks(), 2);
        s.sweep(Nanos::from_millis(14_000), Nanos::from_secs(5));
        assert_eq!(s.chunks(), 1);
        let out = drain(&mut s, 14_000);
        assert_eq!(
            out.iter().map(|r| r.key).collect::<Vec<_>>(),
            vec![key(1, 0)]
        );
    }

    #[test]
    fn memory_follows_the_tracked_set() {
        for mode in [HotnessMode::Default, HotnessMode::Precise] {
            let mut s = HotnessStore::new(params(mode));
            let empty = s.memory_bytes();
            for c in 0..100 {
                base(&mut s, 1, c * 512, None, 10);
            }
            for c in 0..10 {
                base(&mut s, 2, c * 512, None, 10);
            }
            let full = s.memory_bytes();
            let rec = HotnessStore::bytes_per_record(mode);
            assert!(full >= 110 * CHUNK_PAGES * rec);
            // Freeing one chunk and opening another reuses its slot: no growth.
            s.remove(key(2, 0));
            base(&mut s, 3, 0, None, 10);
            // (Only the free list's own small allocation may appear.)
            assert!(s.memory_bytes() < full + 64, "{mode:?}: arena grew");
            assert_eq!(s.chunks(), 110);
            // Dropping most chunks compacts the arena.
            s.forget_space(SpaceId(1));
            let after = s.memory_bytes();
            assert_eq!(s.chunks(), 10);
            assert!(after < full / 5, "{mode:?}: {after} !< {full}/5");
            assert!(after >= 10 * CHUNK_PAGES * rec);
            // Removing everything returns (almost) to the empty size.
            for c in 0..10 {
                s.remove(key(2, c * 512));
                s.remove(key(3, c * 512));
            }
            s.sweep(Nanos::from_millis(10), Nanos::ZERO);
            assert_eq!(s.chunks(), 0);
            assert_eq!(s.memory_bytes(), empty);
        }
    }

    /// A drain that empties most of the arena compacts it but keeps its memory (the next
    /// pass's records would fault it in again); the sweep gives the spare memory back.
    #[test]
    fn a_drain_keeps_the_arena_and_the_sweep_gives_it_back() {
        let mut s = HotnessStore::new(HotnessParams {
            freq_threshold: 1,
            ..params(HotnessMode::Default)
        });
        let empty = s.memory_bytes();
        for c in 0..100 {
            base(&mut s, 1, c * 512, None, 1);
        }
        let full = s.memory_bytes();
        assert_eq!(s.chunks(), 100);
        let out = drain(&mut s, 2);
        assert_eq!(out.len(), 100);
        assert_eq!(s.chunks(), 0, "every chunk drained");
        // The records (100 chunks of 512 bytes) are kept. Only the small lists change size:
        // the hot list, 128 slots of 8 bytes, is rebuilt empty, and the free list has grown
        // to 128 slots of 4 bytes, so 512 bytes go (the 64 bytes of slack as before).
        let hot_less_free = 128 * (std::mem::size_of::<usize>() - std::mem::size_of::<u32>());
        assert!(
            s.memory_bytes() >= full - hot_less_free - 64,
            "kept: {} < {full}",
            s.memory_bytes()
        );
        // Refilling reuses it: no growth (but the free list's own small allocation).
        for c in 0..100 {
            base(&mut s, 2, c * 512, None, 3);
        }
        assert!(
            s.memory_bytes() <= full + 2048,
            "{} > {full}",
            s.memory_bytes()
        );
        drain(&mut s, 4);
        s.sweep(Nanos::from_millis(5), Nanos::from_secs(60));
        assert_eq!(s.memory_bytes(), empty, "given back by the sweep");
    }

    #[test]
    fn dense_pages_cost_about_one_record_each() {
        for (mode, limit) in [(HotnessMode::Default, 1.25), (HotnessMode::Precise, 4.25)] {
            let mut s = HotnessStore::new(params(mode));
            for vpn in 0..64 * 512 {
                base(&mut s, 1, vpn, None, 10);
            }
            #[allow(clippy::cast_precision_loss)]
            let per_page = s.memory_bytes() as f64 / s.tracked_pages() as f64;
            assert!(per_page < limit, "{mode:?}: {per_page} B/page");
        }
    }

    #[test]
    fn drain_output_is_sorted_by_space_then_vpn() {
        let mut s = HotnessStore::new(HotnessParams {
            freq_threshold: 1,
            ..params(HotnessMode::Default)
        });
        let keys = [
            (2, 9000),
            (0, 513),
            (1, 3),
            (2, 1),
            (0, 2),
            (1, 70_000),
            (0, 512),
        ];
        for (sp, vpn) in keys {
            base(&mut s, sp, vpn, None, 5);
        }
        let out = drain(&mut s, 5);
        let got: Vec<PageKey> = out.iter().map(|r| r.key).collect();
        let mut want: Vec<PageKey> = keys.iter().map(|&(sp, v)| key(sp, v)).collect();
        want.sort();
        assert_eq!(got, want);
        assert_eq!((s.tracked_pages(), s.chunks()), (0, 0));
    }

    #[test]
    fn remove_resets_a_ready_page() {
        let mut s = HotnessStore::new(params(HotnessMode::Default));
        base(&mut s, 1, 4, None, 5);
        base(&mut s, 1, 4, None, 6);
        base(&mut s, 1, 5, None, 6);
        assert_eq!((s.tracked_pages(), s.ready_pages()), (2, 1));
        s.remove(key(1, 4));
        s.remove(key(1, 4)); // twice is harmless
        s.remove(key(7, 4)); // unknown is harmless
        assert_eq!((s.tracked_pages(), s.ready_pages(), s.chunks()), (1, 0, 1));
        assert!(drain(&mut s, 10).is_empty());
    }

    #[test]
    fn freed_chunk_slot_reuse_does_not_confuse_the_cache() {
        let mut s = HotnessStore::new(HotnessParams {
            freq_threshold: 1,
            ..params(HotnessMode::Precise)
        });
        base(&mut s, 1, 7, Some(1), 1); // chunk X takes slot 0
        s.remove(key(1, 7)); // X freed
        base(&mut s, 2, 7, Some(2), 1); // chunk Y reuses slot 0
        base(&mut s, 1, 8, Some(3), 1); // X again: must not land in Y
        let out = drain(&mut s, 1);
        let got: Vec<(PageKey, NodeId)> = out.iter().map(|r| (r.key, r.nid)).collect();
        assert_eq!(got, vec![(key(1, 8), NodeId(3)), (key(2, 7), NodeId(2))]);
    }

    #[test]
    fn hot_list_stays_bounded_without_drains() {
        let mut s = HotnessStore::new(HotnessParams {
            freq_threshold: 1,
            ..params(HotnessMode::Default)
        });
        base(&mut s, 9, 0, None, 1); // one chunk that stays
        base(&mut s, 1, 0, None, 1);
        let before = s.memory_bytes();
        for i in 0..10_000 {
            // Each round: a chunk becomes hot, then is freed while still hot.
            base(&mut s, 1, 0, None, i);
            s.remove(key(1, 0));
            base(&mut s, 1, 0, None, i);
        }
        assert!(
            s.memory_bytes() <= before + 2048,
            "{} vs {before}",
            s.memory_bytes()
        );
        let out = drain(&mut s, 10_000);
        assert_eq!(
            out.iter().map(|r| r.key).collect::<Vec<_>>(),
            vec![key(1, 0), key(9, 0)]
        );
    }

    #[test]
    fn mode_change_clears_other_changes_keep() {
        let mut s = HotnessStore::new(params(HotnessMode::Default));
        base(&mut s, 1, 4, None, 5);
        s.set_params(HotnessParams {
            freq_threshold: 3,
            ..*s.params()
        });
        assert_eq!(s.tracked_pages(), 1);
        s.set_params(params(HotnessMode::Precise));
        assert_eq!((s.tracked_pages(), s.chunks()), (0, 0));
        assert_eq!(s.params().mode, HotnessMode::Precise);
    }

    #[test]
    fn params_validate_like_the_sysctls() {
        let d = params(HotnessMode::Default);
        assert_eq!(d.freq_window_ms, 3000);
        assert_eq!(params(HotnessMode::Precise).freq_window_ms, 5000);
        assert_eq!(d.validate(), Ok(()));
        assert!(HotnessParams {
            freq_threshold: 0,
            ..d
        }
        .validate()
        .is_err());
        assert!(HotnessParams {
            freq_threshold: 4,
            ..d
        }
        .validate()
        .is_err());
        let p = params(HotnessMode::Precise);
        assert_eq!(
            HotnessParams {
                freq_threshold: 7,
                ..p
            }
            .validate(),
            Ok(())
        );
        assert!(HotnessParams {
            freq_window_ms: 3969,
            ..d
        }
        .validate()
        .is_err());
        assert_eq!(
            HotnessParams {
                freq_window_ms: 3968,
                ..d
            }
            .validate(),
            Ok(())
        );
        assert_eq!(
            HotnessParams {
                freq_window_ms: 16_383,
                ..p
            }
            .validate(),
            Ok(())
        );
        assert!(HotnessParams {
            freq_window_ms: 999,
            ..p
        }
        .validate()
        .is_err());
        assert!(HotnessParams {
            target_nid: NodeId(1024),
            ..p
        }
        .validate()
        .is_err());
    }

    #[test]
    fn mode_serialises_lowercase() {
        assert_eq!(
            serde_json::to_string(&HotnessMode::Precise).unwrap(),
            "\"precise\""
        );
        assert_eq!(
            serde_json::from_str::<HotnessMode>("\"default\"").unwrap(),
            HotnessMode::Default
        );
        assert_eq!(HotnessStore::bytes_per_record(HotnessMode::Default), 1);
        assert_eq!(HotnessStore::bytes_per_record(HotnessMode::Precise), 4);
    }

    // ---- Property test against a naive oracle -------------------------------------------

    /// One page as the oracle keeps it: full jiffies, no packing.
    #[derive(Clone, Copy, Debug)]
    struct OracleEntry {
        size: PageSize,
        freq: u8,
        last_jiffies: u64,
        ready: bool,
        nid: u16,
    }

    /// The update rule written directly from mm/pghot-{default,precise}.c, with the
    /// kernel's modular latency computed from full jiffies.
    struct Oracle {
        p: HotnessParams,
        pages: BTreeMap<PageKey, OracleEntry>,
    }

    impl Oracle {
        fn latency(&self, last: u64, now: u64) -> u64 {
            match self.p.mode {
                HotnessMode::Default => ((now & 0xF80).wrapping_sub(last & 0xF80)) & 0xF80,
                HotnessMode::Precise => now.wrapping_sub(last) & 0x3FFF,
            }
        }

        /// The folio of `size` at `k`'s head: every other folio overlapping it is gone
        /// (split, collapse, remap), then the update rule.
        fn record(&mut self, k: PageKey, size: PageSize, node: Option<u16>, now: u64) -> bool {
            let k = PageKey {
                space: k.space,
                vpn: size.head(k.vpn),
            };
            let range = k.vpn.0..k.vpn.0 + size.nr_pages().0;
            self.pages.retain(|h, e| {
                let overlaps = h.space == k.space
                    && h.vpn.0 < range.end
                    && range.start < h.vpn.0 + e.size.nr_pages().0;
                !overlaps || (*h == k && e.size == size)
            });
            let max = if self.p.mode == HotnessMode::Default {
                3
            } else {
                7
            };
            // A never-seen page is the zero word: freq 0, time 0.
            let e = self.pages.get(&k).copied().unwrap_or(OracleEntry {
                size,
                freq: 0,
                last_jiffies: 0,
                ready: false,
                nid: 0,
            });
            let freq = if self.latency(e.last_jiffies, now) > u64::from(self.p.freq_window_ms) {
                1
            } else if e.freq < max {
                e.freq + 1
            } else {
                e.freq
            };
            let ready = e.ready || freq >= self.p.freq_threshold;
            let nid = node.unwrap_or(self.p.target_nid.0);
            self.pages.insert(
                k,
                OracleEntry {
                    size,
                    freq,
                    last_jiffies: now,
                    ready,
                    nid,
                },
            );
            ready
        }

        fn drain(&mut self, now: u64) -> Vec<ReadyPage> {
            let mut out = Vec::new();
            for (k, e) in &self.pages {
                if e.ready {
                    out.push(ReadyPage {
                        key: *k,
                        size: e.size,
                        nid: match self.p.mode {
                            HotnessMode::Default => self.p.target_nid,
                            HotnessMode::Precise => NodeId(e.nid),
                        },
                        freq: e.freq,
                        age_ms: self.latency(e.last_jiffies, now),
                    });
                }
            }
            self.pages.retain(|_, e| !e.ready);
            out
        }

        fn ready(&self) -> u64 {
            self.pages.values().filter(|e| e.ready).count() as u64
        }

        fn base_pages(&self, ready_only: bool) -> u64 {
            self.pages
                .values()
                .filter(|e| e.ready || !ready_only)
                .map(|e| e.size.nr_pages().0)
                .sum()
        }

        /// The folio containing `k`, if any.
        fn folio_of(&self, k: PageKey) -> Option<PageKey> {
            self.pages
                .iter()
                .find(|(h, e)| {
                    h.space == k.space
                        && k.vpn.0 >= h.vpn.0
                        && k.vpn.0 < h.vpn.0 + e.size.nr_pages().0
                })
                .map(|(h, _)| *h)
        }

        fn chunks(&self) -> usize {
            self.pages
                .keys()
                .map(|k| (k.space, k.vpn.0 >> 9))
                .collect::<BTreeSet<_>>()
                .len()
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Record {
            space: u32,
            vpn: u64,
            size: PageSize,
            dt: Dt,
            node: Option<u16>,
        },
        Drain {
            dt: Dt,
        },
        Remove {
            space: u32,
            vpn: u64,
        },
        /// The folio was seen on another node.
        Elsewhere {
            space: u32,
            vpn: u64,
            size: PageSize,
        },
        Forget {
            space: u32,
        },
    }

    fn vpn_strategy() -> impl Strategy<Value = u64> {
        // 4 chunks x 6 pages (offsets 0..=500): repeats are common, chunks fill and empty.
        (0u64..4, 0u64..6).prop_map(|(c, o)| c * 512 + o * 100)
    }

    /// A time step. `Window(d)` is the window plus `d` ms, resolved against the params at run
    /// time, so latencies land exactly on the `>` boundary.
    #[derive(Clone, Copy, Debug)]
    enum Dt {
        Ns(u64),
        Window(i8),
    }

    impl Dt {
        fn ns(self, p: &HotnessParams) -> u64 {
            match self {
                Dt::Ns(ns) => ns,
                Dt::Window(d) => {
                    (u64::from(p.freq_window_ms)).saturating_add_signed(i64::from(d)) * MS
                }
            }
        }
    }

    fn dt_strategy() -> impl Strategy<Value = Dt> {
        prop_oneof![
            6 => (0..200 * MS).prop_map(Dt::Ns),
            2 => (0..6000 * MS).prop_map(Dt::Ns),
            2 => (0u64..6000).prop_map(|ms| Dt::Ns(ms * MS)),
            2 => (-1i8..=1).prop_map(Dt::Window),
        ]
    }

    /// Pages in two 1 GiB ranges, three chunks of each: base pages, 2 MiB pages and 1 GiB
    /// pages overlap, split and collapse.
    fn mixed_vpn_strategy() -> impl Strategy<Value = u64> {
        (0u64..2, 0u64..3, 0u64..6).prop_map(|(g, c, o)| g * HPAGE_PUD_NR + c * 512 + o * 100)
    }

    fn size_strategy() -> impl Strategy<Value = PageSize> {
        prop_oneof![
            6 => Just(PageSize::Base),
            3 => Just(PageSize::Huge2M),
            1 => Just(PageSize::Huge1G),
        ]
    }

    fn op_strategy() -> impl Strategy<Value = Op> {
        ops(vpn_strategy().boxed(), Just(PageSize::Base).boxed())
    }

    fn mixed_op_strategy() -> impl Strategy<Value = Op> {
        ops(mixed_vpn_strategy().boxed(), size_strategy().boxed())
    }

    fn ops(vpn: BoxedStrategy<u64>, size: BoxedStrategy<PageSize>) -> impl Strategy<Value = Op> {
        prop_oneof![
            10 => (0u32..3, vpn.clone(), size.clone(), dt_strategy(), proptest::option::of(0u16..4))
                .prop_map(|(space, vpn, size, dt, node)| Op::Record { space, vpn, size, dt, node }),
            1 => dt_strategy().prop_map(|dt| Op::Drain { dt }),
            1 => (0u32..3, vpn.clone()).prop_map(|(space, vpn)| Op::Remove { space, vpn }),
            1 => (0u32..3, vpn, size).prop_map(|(space, vpn, size)| Op::Elsewhere { space, vpn, size }),
            1 => (0u32..3).prop_map(|space| Op::Forget { space }),
        ]
    }

    fn params_strategy() -> impl Strategy<Value = HotnessParams> {
        prop_oneof![Just(HotnessMode::Default), Just(HotnessMode::Precise)].prop_flat_map(|mode| {
            let (wmin, wmax) = mode.window_range_ms();
            // Windows on 128 ms multiples put default-mode latencies on the boundary too.
            let window = prop_oneof![
                wmin..=wmax,
                (8u32..=31).prop_map(|b| b * 128),
                Just(wmin),
                Just(wmax),
            ];
            (1..=mode.freq_max(), window, 0u16..4).prop_map(move |(thr, win, target)| {
                HotnessParams {
                    mode,
                    freq_threshold: thr,
                    freq_window_ms: win,
                    target_nid: NodeId(target),
                }
            })
        })
    }

    fn run_against_oracle(p: HotnessParams, ops: &[Op]) {
        let mut store = HotnessStore::new(p);
        let mut oracle = Oracle {
            p,
            pages: BTreeMap::new(),
        };
        let mut now = 0u64;
        let mut out = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            match *op {
                Op::Record {
                    space,
                    vpn,
                    size,
                    dt,
                    node,
                } => {
                    now += dt.ns(&p);
                    let k = key(space, vpn);
                    let got = store.record(k, size, node.map(NodeId), Nanos(now));
                    let want = oracle.record(k, size, node, Nanos(now).jiffies());
                    assert_eq!(got, want, "op {i} {op:?}: ready");
                }
                Op::Drain { dt } => {
                    now += dt.ns(&p);
                    out.clear();
                    store.drain_ready(Nanos(now), &mut out);
                    assert_eq!(out, oracle.drain(Nanos(now).jiffies()), "op {i}: drain");
                }
                Op::Elsewhere { space, vpn, size } => {
                    store.remove_overlapping(key(space, vpn), size);
                    let head = size.head(Vpn(vpn)).0;
                    let range = head..head + size.nr_pages().0;
                    oracle.pages.retain(|h, e| {
                        h.space != SpaceId(space)
                            || h.vpn.0 >= range.end
                            || range.start >= h.vpn.0 + e.size.nr_pages().0
                    });
                }
                Op::Remove { space, vpn } => {
                    store.remove(key(space, vpn));
                    if let Some(h) = oracle.folio_of(key(space, vpn)) {
                        oracle.pages.remove(&h);
                    }
                }
                Op::Forget { space } => {
                    store.forget_space(SpaceId(space));
                    oracle.pages.retain(|k, _| k.space != SpaceId(space));
                }
            }
            assert_eq!(
                store.tracked_pages(),
                oracle.pages.len() as u64,
                "op {i}: tracked"
            );
            assert_eq!(store.ready_pages(), oracle.ready(), "op {i}: ready");
            assert_eq!(
                store.tracked_base_pages(),
                oracle.base_pages(false),
                "op {i}: tracked base pages"
            );
            assert_eq!(
                store.ready_base_pages(),
                oracle.base_pages(true),
                "op {i}: ready base pages"
            );
            assert_eq!(store.chunks(), oracle.chunks(), "op {i}: chunks");
        }
        out.clear();
        store.drain_ready(Nanos(now), &mut out);
        assert_eq!(out, oracle.drain(Nanos(now).jiffies()), "final drain");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn store_matches_naive_oracle(
            p in params_strategy(),
            ops in proptest::collection::vec(op_strategy(), 1..200),
        ) {
            run_against_oracle(p, &ops);
        }

        /// The same with 4 KiB, 2 MiB and 1 GiB folios over the same pages: one record per
        /// folio, overlapping folios dropped (splits, collapses, remaps), counts exact.
        #[test]
        fn mixed_sizes_match_the_oracle(
            p in params_strategy(),
            ops in proptest::collection::vec(mixed_op_strategy(), 1..200),
        ) {
            run_against_oracle(p, &ops);
        }
    }
}
