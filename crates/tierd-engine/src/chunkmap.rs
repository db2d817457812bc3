//! [`PageMap`]: a map from pages to small values, stored in dense chunks of pages (the module
//! is `chunkmap`, not `pagemap`, so as not to be taken for `/proc/PID/pagemap`).
//!
//! The engine's per-page side tables (the demoter's fast-page index, the ping-pong history)
//! hold millions of entries on a large machine. As plain hash maps keyed by page they cost a
//! cache miss per lookup, and growing them rehashes (and the kernel zeroes) hundreds of MiB.
//! Observations arrive mostly in address order (an accessed-bit scan walks a VMA), so the
//! layout of the hotness store fits here too:
//!
//! ```text
//!  slots: ChunkSlots                   (space, vpn >> 9) -> slot, last lookup, free slots
//!  vals:  [Option<V>; n * 512]         slot s owns vals[s*512 .. s*512+512]
//!  bits:  [u64; n * 8]                 which of a chunk's pages are present
//!  keys:  [ChunkKey; n]                the chunk each slot holds
//!  live:  [u16; n]                     entries present per slot (0: free slot)
//! ```
//!
//! The slot index is the hotness store's ([`crate::chunk::ChunkSlots`]); the arenas differ
//! in what a slot holds and in how they compact (see [`crate::chunk`]).
//!
//! The presence bitmap (an entry is `Some` exactly when its bit is set) is 1/128 of the
//! arena's size, so asking about a page that is not there (the engine's commonest question:
//! is this slow page in the fast index?) stays in cache.
//!
//! A 2 MiB page would have a chunk to itself (one entry in 512), so [`SizedPageMap`] keeps
//! 2 MiB folios in a second `PageMap` keyed by huge page number (`vpn >> 9`: a chunk spans
//! 512 of them, 1 GiB) and 1 GiB folios in a plain hash map, beside the chunks of base
//! pages, and behaves as one map keyed by folio in which no two folios overlap: putting in a
//! folio evicts the entries it covers or that cover it (a split, a collapse, a remap).
//!
//! Chunks are 512 pages by default (a PMD, as the store's records). A table whose entries are
//! a few percent of the pages they fall among, scattered, would still fill every such chunk,
//! so [`SparsePageMap`] takes chunks of 8 pages (the move history and the back-off list);
//! a chunk under 64 pages uses the low bits of its one bitmap word.
//!
//! A chunk is freed when its last entry goes; when more than half the arena is free after a
//! [`PageMap::retain`], live chunks are moved down and the arena shrunk. Iteration order is
//! unspecified (as a hash map's is).

use rustc_hash::FxHashMap;

use crate::chunk::{slot_idx, slot_u32, ChunkKey, ChunkSlots};
// The same chunking as the hotness store's records.
use crate::hotness::store::CHUNK_SHIFT;
use crate::types::{PageKey, PageSize, Vpn, HPAGE_PMD_NR, HPAGE_PUD_NR};

/// log2 of the pages in a chunk of a [`SparsePageMap`]: 8 pages, two cache lines of 16-byte
/// entries. A table whose entries are a few percent of the pages they fall among, scattered
/// (the move history holds the pages moved within the ping-pong window: in D's tierd rows
/// ~1.5 M of the 67 M fast pages, at random), fills every 512-page chunk with a few entries
/// and 500 empty ones; with 8-page chunks 85 % of them stay unallocated at that density. The
/// price is a chunk-index entry per 8 pages rather than per 512, which a sparse table pays on
/// few chunks.
pub(crate) const SPARSE_SHIFT: u32 = 3;

/// A [`SizedPageMap`] in small chunks, for tables whose entries are few and scattered
/// (see [`SPARSE_SHIFT`]).
pub(crate) type SparsePageMap<V> = SizedPageMap<V, SPARSE_SHIFT>;

/// The positions of the set bits of `word`, lowest first.
fn set_bits(mut word: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (word != 0).then(|| {
            let b = word.trailing_zeros() as usize;
            word &= word - 1;
            b
        })
    })
}

/// A map from [`PageKey`] to `V` (see the module docs), in chunks of `2^SHIFT` pages (at most
/// 512, the hotness store's chunk, which the default takes).
#[derive(Clone, Debug)]
pub(crate) struct PageMap<V: Copy, const SHIFT: u32 = CHUNK_SHIFT> {
    slots: ChunkSlots,
    keys: Vec<ChunkKey>,
    vals: Vec<Option<V>>,
    bits: Vec<u64>,
    live: Vec<u16>,
    len: usize,
}

impl<V: Copy, const SHIFT: u32> Default for PageMap<V, SHIFT> {
    fn default() -> Self {
        PageMap {
            slots: ChunkSlots::default(),
            keys: Vec::new(),
            vals: Vec::new(),
            bits: Vec::new(),
            live: Vec::new(),
            len: 0,
        }
    }
}

impl<V: Copy, const SHIFT: u32> PageMap<V, SHIFT> {
    /// Pages per chunk.
    const CHUNK: usize = {
        assert!(
            SHIFT <= CHUNK_SHIFT,
            "chunks of at most 512 pages (`live` is a u16)"
        );
        1 << SHIFT
    };
    /// Bitmap words per chunk: a chunk owns whole words, so a chunk under 64 pages uses the
    /// low bits of its one word.
    const WORDS: usize = Self::CHUNK.div_ceil(64);

    /// The chunk of `key`.
    #[inline]
    fn chunk_of(key: PageKey) -> ChunkKey {
        ChunkKey::at_shift(key, SHIFT)
    }

    /// The position of a page inside its chunk.
    #[inline]
    fn offset(key: PageKey) -> usize {
        // Masked to at most 9 bits before the cast: cannot truncate.
        #[allow(clippy::cast_possible_truncation)]
        let off = (key.vpn.0 & ((1 << SHIFT) - 1)) as usize;
        off
    }

    /// The key of the page at `off` in chunk `ck`.
    fn chunk_key(ck: ChunkKey, off: usize) -> PageKey {
        PageKey {
            space: ck.space,
            vpn: Vpn((ck.index << SHIFT) | off as u64),
        }
    }

    /// The arena index of the entry at `off` in slot `slot`.
    #[inline]
    fn entry_idx(slot: u32, off: usize) -> usize {
        slot_idx(slot) * Self::CHUNK + off
    }

    /// The bitmap word and mask of the entry at `off` in slot `slot`.
    #[inline]
    fn bit(slot: u32, off: usize) -> (usize, u64) {
        (slot_idx(slot) * Self::WORDS + off / 64, 1 << (off % 64))
    }

    /// The offsets of the entries present in slot `s`, lowest first.
    fn present(bits: &[u64], s: usize) -> impl Iterator<Item = usize> + '_ {
        bits[s * Self::WORDS..(s + 1) * Self::WORDS]
            .iter()
            .enumerate()
            .flat_map(|(w, &word)| set_bits(word).map(move |b| w * 64 + b))
    }

    /// Entries in the map.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the map is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn find(&mut self, ck: ChunkKey) -> Option<u32> {
        self.slots.find(ck)
    }

    #[inline]
    fn find_or_alloc(&mut self, ck: ChunkKey) -> u32 {
        match self.find(ck) {
            Some(s) => s,
            None => self.alloc(ck),
        }
    }

    #[cold]
    fn alloc(&mut self, ck: ChunkKey) -> u32 {
        let (vals, bits, keys, live) = (
            &mut self.vals,
            &mut self.bits,
            &mut self.keys,
            &mut self.live,
        );
        let slot = self.slots.claim(ck, || {
            vals.resize(vals.len() + Self::CHUNK, None);
            bits.resize(bits.len() + Self::WORDS, 0);
            keys.push(ck);
            live.push(0);
            slot_u32(keys.len() - 1)
        });
        self.keys[slot_idx(slot)] = ck;
        slot
    }

    /// Frees an empty chunk.
    fn release(&mut self, slot: u32) {
        self.slots.release(self.keys[slot_idx(slot)], slot);
    }

    /// The value of `key`.
    pub(crate) fn get(&mut self, key: PageKey) -> Option<&V> {
        let slot = self.find(Self::chunk_of(key))?;
        let off = Self::offset(key);
        let (w, m) = Self::bit(slot, off);
        if self.bits[w] & m == 0 {
            return None;
        }
        self.vals[Self::entry_idx(slot, off)].as_ref()
    }

    /// Reads the entry of `key` without using or changing the lookup cache, and returns
    /// whether it is present: a caller about to look up many scattered keys reads them all
    /// first, so that their cache misses overlap (a plain load; the engine has no prefetch
    /// instruction without `unsafe`).
    #[inline]
    pub(crate) fn warm(&self, key: PageKey) -> bool {
        match self.slots.peek(Self::chunk_of(key)) {
            Some(slot) => {
                let off = Self::offset(key);
                // The bit too: a removal reads it before the entry.
                let (w, m) = Self::bit(slot, off);
                (self.bits[w] & m != 0) & self.vals[Self::entry_idx(slot, off)].is_some()
            }
            None => false,
        }
    }

    /// The value of `key`, inserted as `f()` first if absent.
    #[inline]
    pub(crate) fn get_or_insert_with(&mut self, key: PageKey, f: impl FnOnce() -> V) -> &mut V {
        let slot = self.find_or_alloc(Self::chunk_of(key));
        let off = Self::offset(key);
        let i = Self::entry_idx(slot, off);
        // Presence from the entry itself (the line is needed anyway); the bitmap is only
        // written, which does not hold up what follows.
        if self.vals[i].is_none() {
            let (w, m) = Self::bit(slot, off);
            self.bits[w] |= m;
            self.live[slot_idx(slot)] += 1;
            self.len += 1;
        }
        self.vals[i].get_or_insert_with(f)
    }

    /// Sets the value of `key`; returns the old one.
    pub(crate) fn insert(&mut self, key: PageKey, v: V) -> Option<V> {
        let slot = self.find_or_alloc(Self::chunk_of(key));
        let off = Self::offset(key);
        let old = self.vals[Self::entry_idx(slot, off)].replace(v);
        if old.is_none() {
            let (w, m) = Self::bit(slot, off);
            self.bits[w] |= m;
            self.live[slot_idx(slot)] += 1;
            self.len += 1;
        }
        old
    }

    /// Removes `key`; returns its value.
    #[inline]
    pub(crate) fn remove(&mut self, key: PageKey) -> Option<V> {
        let slot = self.find(Self::chunk_of(key))?;
        let off = Self::offset(key);
        let (w, m) = Self::bit(slot, off);
        if self.bits[w] & m == 0 {
            return None;
        }
        self.bits[w] &= !m;
        let old = self.vals[Self::entry_idx(slot, off)].take();
        self.len -= 1;
        let live = &mut self.live[slot_idx(slot)];
        *live -= 1;
        if *live == 0 {
            self.release(slot);
        }
        old
    }

    /// Removes every entry of chunk `ck`, passing each to `f`.
    pub(crate) fn drain_chunk(&mut self, ck: ChunkKey, mut f: impl FnMut(PageKey, V)) {
        let Some(slot) = self.find(ck) else {
            return;
        };
        let s = slot_idx(slot);
        for off in Self::present(&self.bits, s) {
            if let Some(v) = self.vals[Self::entry_idx(slot, off)].take() {
                self.len -= 1;
                f(Self::chunk_key(ck, off), v);
            }
        }
        self.bits[s * Self::WORDS..(s + 1) * Self::WORDS].fill(0);
        self.live[s] = 0;
        self.release(slot);
    }

    /// Every entry, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (PageKey, &V)> + '_ {
        self.live
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .flat_map(move |(s, _)| {
                // Only the entries present: the bitmap says where they are, so a sparse chunk
                // costs its words and the lines of its entries, not all its pages (pages
                // promoted and demoted at random leave chunks of the fast index sparse). A
                // set bit means the entry is present (the map's invariant); an absent one is
                // skipped rather than trusted.
                let (ck, vals) = (self.keys[s], &self.vals[s * Self::CHUNK..]);
                Self::present(&self.bits, s)
                    .filter_map(move |off| Some((Self::chunk_key(ck, off), vals[off].as_ref()?)))
            })
    }

    /// Keeps the entries for which `f` is true.
    pub(crate) fn retain(&mut self, mut f: impl FnMut(PageKey, &mut V) -> bool) {
        for s in 0..self.live.len() {
            if self.live[s] == 0 {
                continue;
            }
            let ck = self.keys[s];
            let mut removed = 0u16;
            // Only the entries present: the bitmap says where they are, so a sparse chunk
            // costs a few cache lines, not the whole 512 entries.
            for w in s * Self::WORDS..(s + 1) * Self::WORDS {
                for b in set_bits(self.bits[w]) {
                    let off = (w - s * Self::WORDS) * 64 + b;
                    let i = s * Self::CHUNK + off;
                    let Some(x) = &mut self.vals[i] else { continue };
                    if !f(Self::chunk_key(ck, off), x) {
                        self.vals[i] = None;
                        self.bits[w] &= !(1u64 << b);
                        removed += 1;
                    }
                }
            }
            self.len -= usize::from(removed);
            self.live[s] -= removed;
            if self.live[s] == 0 {
                self.release(slot_u32(s));
            }
        }
        if self.slots.free_len() * 2 > self.live.len() {
            self.compact();
        }
    }

    /// Moves live chunks down over free ones and shrinks the arena to them.
    fn compact(&mut self) {
        let mut to = 0usize;
        for from in 0..self.live.len() {
            if self.live[from] == 0 {
                continue;
            }
            if from != to {
                self.vals.copy_within(
                    from * Self::CHUNK..(from + 1) * Self::CHUNK,
                    to * Self::CHUNK,
                );
                self.bits.copy_within(
                    from * Self::WORDS..(from + 1) * Self::WORDS,
                    to * Self::WORDS,
                );
                self.keys[to] = self.keys[from];
                self.live[to] = self.live[from];
                self.slots.moved(self.keys[to], slot_u32(to));
            }
            to += 1;
        }
        self.vals.truncate(to * Self::CHUNK);
        self.vals.shrink_to_fit();
        self.bits.truncate(to * Self::WORDS);
        self.bits.shrink_to_fit();
        self.keys.truncate(to);
        self.keys.shrink_to_fit();
        self.live.truncate(to);
        self.live.shrink_to_fit();
        self.slots.compacted();
        self.slots.shrink();
    }

    /// Bytes held (arena, presence bits, chunk keys and counts, index and free list), for
    /// the memory gauge.
    pub(crate) fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        self.vals.capacity() * size_of::<Option<V>>()
            + self.bits.capacity() * size_of::<u64>()
            + self.keys.capacity() * size_of::<ChunkKey>()
            + self.live.capacity() * size_of::<u16>()
            + self.slots.memory_bytes()
    }
}

/// One map keyed by folio: base pages in a [`PageMap`], 2 MiB folios in a second
/// [`PageMap`] indexed by huge page number (a chunk spans 512 of them, 1 GiB), 1 GiB folios
/// in a hash map (see the module docs).
///
/// **Folios never overlap.** An entry names a folio: its head and size. Putting in a folio
/// first evicts every entry of another folio over any of the same virtual pages (a THP split
/// into base pages, base pages collapsed into a THP, a 1 GiB page unmapped and remapped), and
/// hands each evicted entry to the caller, which keeps its counts exact. Keys of huge folios
/// are their heads (callers align them: [`PageSize::head`]).
#[derive(Clone, Debug)]
pub(crate) struct SizedPageMap<V: Copy, const SHIFT: u32 = CHUNK_SHIFT> {
    base: PageMap<V, SHIFT>,
    /// 2 MiB folios, keyed by `(space, head >> 9)`. A hash map of them cost two cache misses
    /// a lookup (control bytes, then the entry) on a terabyte of THPs, and an accessed-bit
    /// scan in address order missed as often as random samples; dense chunks cost one miss,
    /// or none in address order.
    pmd: PageMap<V, SHIFT>,
    /// 1 GiB folios (hugetlb only, few).
    pud: FxHashMap<PageKey, V>,
}

impl<V: Copy, const SHIFT: u32> Default for SizedPageMap<V, SHIFT> {
    fn default() -> Self {
        SizedPageMap {
            base: PageMap::default(),
            pmd: PageMap::default(),
            pud: FxHashMap::default(),
        }
    }
}

/// The 2 MiB heads of a 1 GiB folio's range.
fn heads_2m(head_1g: PageKey) -> impl Iterator<Item = PageKey> {
    (0..HPAGE_PUD_NR / HPAGE_PMD_NR).map(move |i| PageKey {
        space: head_1g.space,
        vpn: Vpn(head_1g.vpn.0 + i * HPAGE_PMD_NR),
    })
}

/// The key of a 2 MiB head in the `pmd` map, `None` for a key that is not 2 MiB aligned.
fn pmd_key(key: PageKey) -> Option<PageKey> {
    key.vpn.0.is_multiple_of(HPAGE_PMD_NR).then_some(PageKey {
        space: key.space,
        vpn: Vpn(key.vpn.0 / HPAGE_PMD_NR),
    })
}

/// The `pmd` key of a 2 MiB folio's head (callers align heads: [`PageSize::head`]).
fn pmd_index(head: PageKey) -> PageKey {
    debug_assert_eq!(
        head.vpn.0 % HPAGE_PMD_NR,
        0,
        "a 2 MiB folio keyed off its head"
    );
    PageKey {
        space: head.space,
        vpn: Vpn(head.vpn.0 / HPAGE_PMD_NR),
    }
}

/// The head of the 2 MiB folio whose `pmd` key is `k`.
fn pmd_head(k: PageKey) -> PageKey {
    PageKey {
        space: k.space,
        vpn: Vpn(k.vpn.0 * HPAGE_PMD_NR),
    }
}

impl<V: Copy, const SHIFT: u32> SizedPageMap<V, SHIFT> {
    /// Entries in the map.
    pub(crate) fn len(&self) -> usize {
        self.base.len() + self.pmd.len() + self.pud.len()
    }

    /// Whether the map is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.base.is_empty() && self.no_huge()
    }

    /// The largest size of folio the map holds (`Base` when it is empty).
    pub(crate) fn largest_size(&self) -> PageSize {
        if !self.pud.is_empty() {
            PageSize::Huge1G
        } else if !self.pmd.is_empty() {
            PageSize::Huge2M
        } else {
            PageSize::Base
        }
    }

    /// Whether the map holds no huge folio.
    #[inline]
    fn no_huge(&self) -> bool {
        self.pmd.is_empty() && self.pud.is_empty()
    }

    /// The huge entry at `head` (of `size`), removed.
    fn take_huge(&mut self, head: PageKey, size: PageSize) -> Option<V> {
        match size {
            PageSize::Base => None,
            PageSize::Huge2M => pmd_key(head).and_then(|k| self.pmd.remove(k)),
            PageSize::Huge1G => self.pud.remove(&head),
        }
    }

    /// Evicts every entry overlapping the folio `(key, size)` other than that exact folio
    /// (kept when `keep_exact`), passing each to `evicted`.
    fn evict(
        &mut self,
        key: PageKey,
        size: PageSize,
        keep_exact: bool,
        mut evicted: impl FnMut(PageKey, PageSize, V),
    ) {
        let head_of = |s: PageSize| PageKey {
            space: key.space,
            vpn: s.head(key.vpn),
        };
        match size {
            PageSize::Base => {
                if !keep_exact {
                    if let Some(v) = self.base.remove(key) {
                        evicted(key, PageSize::Base, v);
                    }
                }
                if !self.no_huge() {
                    // The 2 MiB or 1 GiB folio containing the page, keyed at its head.
                    for s in [PageSize::Huge2M, PageSize::Huge1G] {
                        let h = head_of(s);
                        if let Some(v) = self.take_huge(h, s) {
                            evicted(h, s, v);
                        }
                    }
                }
            }
            PageSize::Huge2M | PageSize::Huge1G => {
                let chunks = size.nr_pages().0 >> SHIFT;
                if !self.base.is_empty() {
                    for c in 0..chunks {
                        let ck = ChunkKey {
                            space: key.space,
                            index: (key.vpn.0 >> SHIFT) + c,
                        };
                        self.base
                            .drain_chunk(ck, |k, v| evicted(k, PageSize::Base, v));
                    }
                }
                if self.no_huge() {
                    return;
                }
                // The head itself, at either size (this size unless kept).
                for s in [PageSize::Huge2M, PageSize::Huge1G] {
                    if keep_exact && s == size {
                        continue;
                    }
                    if let Some(v) = self.take_huge(key, s) {
                        evicted(key, s, v);
                    }
                }
                match size {
                    PageSize::Huge2M => {
                        let g = head_of(PageSize::Huge1G);
                        if g != key {
                            if let Some(v) = self.take_huge(g, PageSize::Huge1G) {
                                evicted(g, PageSize::Huge1G, v);
                            }
                        }
                    }
                    _ => {
                        if !self.pmd.is_empty() {
                            for h in heads_2m(key).skip(1) {
                                if let Some(v) = self.take_huge(h, PageSize::Huge2M) {
                                    evicted(h, PageSize::Huge2M, v);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Whether the exact folio `(key, size)` is in the map.
    fn has_huge(&mut self, key: PageKey, size: PageSize) -> bool {
        match size {
            PageSize::Base => false,
            PageSize::Huge2M => self.pmd.get(pmd_index(key)).is_some(),
            PageSize::Huge1G => self.pud.contains_key(&key),
        }
    }

    /// The value of the folio `(key, size)`, inserted as `f()` first if absent; entries of
    /// other folios overlapping it are evicted first and passed to `evicted`.
    #[inline]
    pub(crate) fn get_or_insert_with(
        &mut self,
        key: PageKey,
        size: PageSize,
        f: impl FnOnce() -> V,
        evicted: impl FnMut(PageKey, PageSize, V),
    ) -> &mut V {
        match size {
            PageSize::Base => {
                // Only a huge folio can overlap a base page other than itself.
                self.evict(key, size, true, evicted);
                self.base.get_or_insert_with(key, f)
            }
            PageSize::Huge2M | PageSize::Huge1G => {
                if !self.has_huge(key, size) {
                    self.evict(key, size, true, evicted);
                }
                if size == PageSize::Huge2M {
                    self.pmd.get_or_insert_with(pmd_index(key), f)
                } else {
                    self.pud.entry(key).or_insert_with(f)
                }
            }
        }
    }

    /// Sets the value of the folio `(key, size)`; returns its old value. Entries of other
    /// folios overlapping it are evicted and passed to `evicted`.
    pub(crate) fn insert(
        &mut self,
        key: PageKey,
        size: PageSize,
        v: V,
        evicted: impl FnMut(PageKey, PageSize, V),
    ) -> Option<V> {
        match size {
            PageSize::Base => {
                self.evict(key, size, true, evicted);
                self.base.insert(key, v)
            }
            PageSize::Huge2M | PageSize::Huge1G => {
                if !self.has_huge(key, size) {
                    self.evict(key, size, true, evicted);
                }
                if size == PageSize::Huge2M {
                    self.pmd.insert(pmd_index(key), v)
                } else {
                    self.pud.insert(key, v)
                }
            }
        }
    }

    /// Removes every entry overlapping the folio `(key, size)`, passing each to `removed`.
    pub(crate) fn remove_overlapping(
        &mut self,
        key: PageKey,
        size: PageSize,
        removed: impl FnMut(PageKey, PageSize, V),
    ) {
        self.evict(key, size, false, removed);
    }

    /// The value of the folio whose head is `key`, of any size.
    pub(crate) fn get(&mut self, key: PageKey) -> Option<&V> {
        if !self.pmd.is_empty() {
            if let Some(k) = pmd_key(key) {
                if self.pmd.get(k).is_some() {
                    return self.pmd.get(k);
                }
            }
        }
        if !self.pud.is_empty() {
            if let Some(v) = self.pud.get(&key) {
                return Some(v);
            }
        }
        self.base.get(key)
    }

    /// [`PageMap::warm`] for a base page or a 2 MiB folio (1 GiB folios are few, in a small
    /// hash map that stays in cache).
    #[inline]
    pub(crate) fn warm(&self, key: PageKey, size: PageSize) -> bool {
        match size {
            PageSize::Base => self.base.warm(key),
            PageSize::Huge2M => pmd_key(key).is_some_and(|k| self.pmd.warm(k)),
            PageSize::Huge1G => false,
        }
    }

    /// Bytes held by all sides, for the memory gauges.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.base.memory_bytes()
            + self.pmd.memory_bytes()
            + self.pud.capacity() * (std::mem::size_of::<PageKey>() + std::mem::size_of::<V>())
    }

    /// Removes the folio whose head is `key`; returns its value.
    #[inline]
    pub(crate) fn remove(&mut self, key: PageKey) -> Option<V> {
        if let Some(v) = self.base.remove(key) {
            return Some(v);
        }
        if let Some(v) = self.take_huge(key, PageSize::Huge2M) {
            return Some(v);
        }
        if self.pud.is_empty() {
            None
        } else {
            self.pud.remove(&key)
        }
    }

    /// Every entry with its folio size, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (PageKey, PageSize, &V)> + '_ {
        self.base
            .iter()
            .map(|(k, v)| (k, PageSize::Base, v))
            .chain(
                self.pmd
                    .iter()
                    .map(|(k, v)| (pmd_head(k), PageSize::Huge2M, v)),
            )
            .chain(self.pud.iter().map(|(k, v)| (*k, PageSize::Huge1G, v)))
    }

    /// Keeps the entries for which `f` is true.
    pub(crate) fn retain(&mut self, mut f: impl FnMut(PageKey, &mut V) -> bool) {
        self.base.retain(&mut f);
        self.pmd.retain(|k, v| f(pmd_head(k), v));
        self.pud.retain(|k, v| f(*k, v));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::hotness::store::CHUNK_PAGES;
    use crate::types::SpaceId;

    fn k(space: u32, vpn: u64) -> PageKey {
        PageKey {
            space: SpaceId(space),
            vpn: Vpn(vpn),
        }
    }

    /// A small deterministic generator (xorshift) for the model test.
    fn next(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    #[test]
    fn behaves_like_a_btreemap_under_random_operations() {
        like_a_btreemap::<CHUNK_SHIFT>();
        like_a_btreemap::<SPARSE_SHIFT>();
        // A chunk of one word, and one of a single page.
        like_a_btreemap::<6>();
        like_a_btreemap::<0>();
    }

    fn like_a_btreemap<const SHIFT: u32>() {
        let mut m: PageMap<u64, SHIFT> = PageMap::default();
        let mut model: BTreeMap<PageKey, u64> = BTreeMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..40_000u64 {
            let r = next(&mut x);
            // Keys clustered in a few chunks of two spaces, so chunks fill and empty.
            let key = k(1 + (r & 1) as u32, (r >> 1) % 3000);
            match (r >> 20) % 5 {
                0 | 1 => assert_eq!(m.insert(key, round), model.insert(key, round)),
                2 => assert_eq!(m.remove(key), model.remove(&key)),
                3 => {
                    *m.get_or_insert_with(key, || 7) += 1;
                    *model.entry(key).or_insert(7) += 1;
                }
                _ => assert_eq!(m.get(key).copied(), model.get(&key).copied()),
            }
            // The read-ahead sees what a lookup sees, of this key and of one elsewhere.
            let other = k(1 + (r >> 40 & 1) as u32, (r >> 41) % 3000);
            assert_eq!(m.warm(key), model.contains_key(&key));
            assert_eq!(m.warm(other), model.contains_key(&other));
            if round % 5000 == 4999 {
                let cut = next(&mut x) % 40_000;
                m.retain(|_, v| *v >= cut);
                model.retain(|_, v| *v >= cut);
            }
            assert_eq!(m.len(), model.len());
        }
        let mut all: Vec<(PageKey, u64)> = m.iter().map(|(k, v)| (k, *v)).collect();
        all.sort_unstable();
        let want: Vec<(PageKey, u64)> = model.into_iter().collect();
        assert_eq!(all, want);
    }

    #[test]
    fn retain_frees_and_compacts_chunks() {
        let mut m: PageMap<u32> = PageMap::default();
        for vpn in 0..(64 * CHUNK_PAGES as u64) {
            m.insert(k(1, vpn), 1);
        }
        let full = m.memory_bytes();
        // Keep one page in each of the last two chunks only.
        let keep = [
            k(1, 62 * CHUNK_PAGES as u64 + 5),
            k(1, 63 * CHUNK_PAGES as u64),
        ];
        m.retain(|key, _| keep.contains(&key));
        assert_eq!(m.len(), 2);
        assert!(
            m.memory_bytes() * 8 < full,
            "{} vs {full}",
            m.memory_bytes()
        );
        assert_eq!(m.get(keep[0]), Some(&1));
        assert_eq!(m.get(keep[1]), Some(&1));
        assert_eq!(m.get(k(1, 0)), None);
        // Removing the last entry of a chunk frees it; the slot is reused.
        assert_eq!(m.remove(keep[0]), Some(1));
        assert!(m.get(keep[0]).is_none());
        m.insert(k(2, 5), 9);
        assert_eq!(m.get(k(2, 5)), Some(&9));
        assert_eq!(m.len(), 2);
        let mut keys: Vec<PageKey> = m.iter().map(|(k, _)| k).collect();
        keys.sort_unstable();
        assert_eq!(keys, vec![k(1, 63 * CHUNK_PAGES as u64), k(2, 5)]);
    }

    /// Entries scattered over 2 % of the pages (the move history of D's tierd rows) fill every
    /// 512-page chunk; the sparse map allocates about one 8-page chunk in six and holds the
    /// same entries.
    #[test]
    fn a_sparse_map_holds_scattered_entries_in_a_fraction_of_the_memory() {
        let mut dense: SizedPageMap<u128> = SizedPageMap::default();
        let mut sparse: SparsePageMap<u128> = SparsePageMap::default();
        let mut x = 0x1234_5678_9abc_def1u64;
        let pages: usize = 1 << 20;
        for i in 0..pages as u64 / 50 {
            let key = k(1, next(&mut x) % pages as u64);
            dense.insert(key, PageSize::Base, u128::from(i), |_, _, _| {});
            sparse.insert(key, PageSize::Base, u128::from(i), |_, _, _| {});
        }
        assert_eq!(dense.len(), sparse.len());
        let (d, sp) = (dense.memory_bytes(), sparse.memory_bytes());
        // Every dense chunk is allocated: 2^20 pages of 32-byte entries (Option<u128>).
        assert!(d >= pages * 32, "dense {d}");
        assert!(sp * 3 < d, "sparse {sp} vs dense {d}");
        let mut a: Vec<(PageKey, u128)> = dense.iter().map(|(k, _, v)| (k, *v)).collect();
        let mut b: Vec<(PageKey, u128)> = sparse.iter().map(|(k, _, v)| (k, *v)).collect();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
    }

    #[test]
    fn sized_map_is_one_map_keyed_by_folio() {
        let mut m: SizedPageMap<u32> = SizedPageMap::default();
        let mut gone = Vec::new();
        let head = k(1, 1024);
        assert_eq!(m.insert(head, PageSize::Huge2M, 1, |_, _, _| {}), None);
        assert_eq!(m.insert(k(1, 5), PageSize::Base, 2, |_, _, _| {}), None);
        // A base page inside the THP: it was split, its entry is evicted.
        *m.get_or_insert_with(
            k(1, 1030),
            PageSize::Base,
            || 0,
            |k, s, v| {
                gone.push((k, s, v));
            },
        ) += 10;
        assert_eq!(gone, vec![(head, PageSize::Huge2M, 1)]);
        assert_eq!(m.len(), 2);
        // Collapsed again: the base page goes.
        gone.clear();
        assert_eq!(
            m.insert(head, PageSize::Huge2M, 7, |k, s, v| gone.push((k, s, v))),
            None
        );
        assert_eq!(gone, vec![(k(1, 1030), PageSize::Base, 10)]);
        // A 1 GiB page over both.
        gone.clear();
        m.insert(k(1, 0), PageSize::Huge1G, 9, |k, s, v| gone.push((k, s, v)));
        gone.sort_unstable();
        assert_eq!(
            gone,
            vec![(k(1, 5), PageSize::Base, 2), (head, PageSize::Huge2M, 7)]
        );
        let all: Vec<(PageKey, PageSize, u32)> = m.iter().map(|(k, s, v)| (k, s, *v)).collect();
        assert_eq!(all, vec![(k(1, 0), PageSize::Huge1G, 9)]);
        assert_eq!(m.remove(k(1, 0)), Some(9));
        assert!(m.is_empty());
        assert_eq!(m.remove(head), None);
    }

    /// Whatever is put in, no two entries overlap, and every entry that left through an
    /// eviction was handed back.
    #[test]
    fn sized_map_never_holds_overlapping_folios() {
        never_overlapping::<CHUNK_SHIFT>();
        never_overlapping::<SPARSE_SHIFT>();
    }

    fn never_overlapping<const SHIFT: u32>() {
        type Model = BTreeMap<PageKey, (PageSize, u64)>;
        fn overlapping(model: &Model, key: PageKey, size: PageSize) -> Vec<PageKey> {
            let r = key.vpn.0..key.vpn.0 + size.nr_pages().0;
            model
                .iter()
                .filter(|(h, (s, _))| {
                    h.space == key.space && h.vpn.0 < r.end && r.start < h.vpn.0 + s.nr_pages().0
                })
                .map(|(h, _)| *h)
                .collect()
        }
        let mut m: SizedPageMap<u64, SHIFT> = SizedPageMap::default();
        let mut model = Model::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for round in 0..20_000u64 {
            let r = next(&mut x);
            let size = match r % 10 {
                0..=5 => PageSize::Base,
                6..=8 => PageSize::Huge2M,
                _ => PageSize::Huge1G,
            };
            // Two 1 GiB ranges, a few chunks of each.
            let vpn = ((r >> 4) & 1) * HPAGE_PUD_NR + ((r >> 5) % 3) * 512 + (r >> 8) % 600;
            let key = PageKey {
                space: SpaceId(1),
                vpn: size.head(Vpn(vpn)),
            };
            let mut gone: Vec<PageKey> = Vec::new();
            let mut want: Vec<PageKey> = overlapping(&model, key, size);
            match (r >> 20) % 4 {
                0 | 1 => {
                    m.insert(key, size, round, |k, s, v| {
                        assert_eq!(model.get(&k), Some(&(s, v)));
                        gone.push(k);
                    });
                    want.retain(|h| !(*h == key && model[h].0 == size));
                    for h in &want {
                        model.remove(h);
                    }
                    model.insert(key, (size, round));
                }
                2 => {
                    *m.get_or_insert_with(key, size, || round, |k, _, _| gone.push(k)) += 1;
                    want.retain(|h| !(*h == key && model[h].0 == size));
                    for h in &want {
                        model.remove(h);
                    }
                    model.entry(key).or_insert((size, round)).1 += 1;
                }
                _ => {
                    m.remove_overlapping(key, size, |k, _, _| gone.push(k));
                    for h in &want {
                        model.remove(h);
                    }
                }
            }
            gone.sort_unstable();
            assert_eq!(gone, want, "round {round}");
            let mut all: Vec<(PageKey, (PageSize, u64))> =
                m.iter().map(|(k, s, v)| (k, (s, *v))).collect();
            all.sort_unstable();
            assert_eq!(all, model.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>());
        }
    }
}
