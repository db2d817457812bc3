//! What the engine's two chunked arenas share: the key of a chunk of pages ([`ChunkKey`]) and
//! [`ChunkSlots`], which gives each live chunk its slot in an arena.
//!
//! ```text
//!  index: FxHashMap<ChunkKey, slot>    the slot of each live chunk
//!  cache: (ChunkKey, slot | ABSENT)    the last lookup, hit or miss
//!  free:  [slot]                       freed slots, reused (last freed first) before the
//!                                      arena grows
//! ```
//!
//! The arenas themselves stay apart, because what a slot holds and how an arena compacts
//! differ, and both are visible:
//!
//! - the hotness store (`hotness::store`) keeps pghot records, zero when absent, with
//!   per-chunk metadata (the folio size, ready counts, the hot list), and compacts by moving
//!   its top chunks into the holes below, so that the chunks below keep their slots;
//! - [`crate::chunkmap::PageMap`] keeps `Option` entries with a presence bitmap, and compacts
//!   by sliding its chunks down in slot order, the order its iteration follows (and with it
//!   the order in which the fast index lists pages for demotion).
//!
//! Each arena asks its `ChunkSlots` for a slot ([`ChunkSlots::claim`]), growing its own
//! storage when no freed slot is left, gives the slot back when the chunk empties
//! ([`ChunkSlots::release`]), and tells it where a compaction moved each chunk.

use rustc_hash::FxHashMap;

use crate::types::{PageKey, SpaceId};

/// The cache's "no such chunk" slot.
const ABSENT: u32 = u32::MAX;

/// A slot as an arena index.
#[inline]
pub(crate) fn slot_idx(slot: u32) -> usize {
    slot as usize
}

/// An arena index as a slot. An arena has fewer than 2^32 chunks: it would hold 2^35 entries
/// or more.
pub(crate) fn slot_u32(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(ABSENT)
}

/// Which chunk a page falls in: (space, vpn >> shift). Ordered like `PageKey`, so chunk order
/// is page order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ChunkKey {
    pub(crate) space: SpaceId,
    pub(crate) index: u64,
}

impl ChunkKey {
    /// The chunk of `key` in chunks of `2^shift` pages.
    #[inline]
    pub(crate) fn at_shift(key: PageKey, shift: u32) -> Self {
        ChunkKey {
            space: key.space,
            index: key.vpn.0 >> shift,
        }
    }
}

/// The slot in an arena of each live chunk (see the module docs).
#[derive(Clone, Debug, Default)]
pub(crate) struct ChunkSlots {
    index: FxHashMap<ChunkKey, u32>,
    free: Vec<u32>,
    /// The last chunk looked up and its slot ([`ABSENT`] when it has none).
    cache: Option<(ChunkKey, u32)>,
}

impl ChunkSlots {
    /// The slot of chunk `ck`, leaving the cache as it is (for `&self` readers).
    #[inline]
    pub(crate) fn peek(&self, ck: ChunkKey) -> Option<u32> {
        match self.cache {
            Some((k, s)) if k == ck => (s != ABSENT).then_some(s),
            _ => self.index.get(&ck).copied(),
        }
    }

    /// The slot of chunk `ck`; the answer, found or not, is cached for the next lookup
    /// (observations come in address order, so the next page is most often in this chunk).
    #[inline]
    pub(crate) fn find(&mut self, ck: ChunkKey) -> Option<u32> {
        let slot = match self.cache {
            Some((k, s)) if k == ck => s,
            _ => {
                let s = self.index.get(&ck).copied().unwrap_or(ABSENT);
                self.cache = Some((ck, s));
                s
            }
        };
        (slot != ABSENT).then_some(slot)
    }

    /// A slot for chunk `ck`, which has none: the last slot freed, or else `grow()`, which
    /// adds a slot to the arena and returns it. The caller sets up what the slot holds.
    pub(crate) fn claim(&mut self, ck: ChunkKey, grow: impl FnOnce() -> u32) -> u32 {
        let slot = self.free.pop().unwrap_or_else(grow);
        self.index.insert(ck, slot);
        self.cache = Some((ck, slot));
        slot
    }

    /// Chunk `ck` at `slot` is gone: its slot is free for the next [`ChunkSlots::claim`].
    pub(crate) fn release(&mut self, ck: ChunkKey, slot: u32) {
        self.index.remove(&ck);
        self.free.push(slot);
        if matches!(self.cache, Some((k, _)) if k == ck) {
            self.cache = Some((ck, ABSENT));
        }
    }

    /// Free slots.
    pub(crate) fn free_len(&self) -> usize {
        self.free.len()
    }

    /// The free slots, in the order they were freed.
    pub(crate) fn free_slots(&self) -> &[u32] {
        &self.free
    }

    /// A compaction moved chunk `ck` to `slot`.
    pub(crate) fn moved(&mut self, ck: ChunkKey, slot: u32) {
        self.index.insert(ck, slot);
    }

    /// A compaction is done: the arena holds its live chunks only, no slot is free, and the
    /// cache (which may name a moved slot) is dropped.
    pub(crate) fn compacted(&mut self) {
        self.free.clear();
        self.cache = None;
    }

    /// Gives back the spare capacity of the index and the free list.
    pub(crate) fn shrink(&mut self) {
        self.free.shrink_to_fit();
        self.index.shrink_to_fit();
    }

    /// Heap bytes of the index and the free list, as allocated.
    pub(crate) fn memory_bytes(&self) -> usize {
        hash_table_bytes(
            self.index.capacity(),
            std::mem::size_of::<(ChunkKey, u32)>(),
        ) + self.free.capacity() * std::mem::size_of::<u32>()
    }
}

/// Heap bytes of a `std` (hashbrown) table with `capacity` usable entries: buckets are a
/// power of two filled to at most 7/8 (all but one below 8 buckets), with one control byte
/// per bucket plus one 16-byte group of trailing control bytes.
pub(crate) fn hash_table_bytes(capacity: usize, entry: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    let buckets = if capacity < 8 {
        (capacity + 1).next_power_of_two()
    } else {
        (capacity * 8 / 7).next_power_of_two()
    };
    buckets * (entry + 1) + 16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Vpn;

    fn ck(index: u64) -> ChunkKey {
        ChunkKey::at_shift(
            PageKey {
                space: SpaceId(1),
                vpn: Vpn(index << 9),
            },
            9,
        )
    }

    /// An arena's growth: slots 0, 1, 2, ... in turn.
    fn arena() -> impl FnMut() -> u32 {
        let mut next = 0;
        move || {
            next += 1;
            next - 1
        }
    }

    #[test]
    fn a_freed_slot_is_reused_before_the_arena_grows() {
        let mut s = ChunkSlots::default();
        let mut grow = arena();
        assert_eq!(s.claim(ck(7), &mut grow), 0);
        assert_eq!(s.claim(ck(8), &mut grow), 1);
        assert_eq!(s.claim(ck(9), &mut grow), 2);
        s.release(ck(8), 1);
        s.release(ck(7), 0);
        assert_eq!(s.free_slots(), &[1, 0]);
        // Last freed first.
        assert_eq!(s.claim(ck(10), &mut grow), 0);
        assert_eq!(s.claim(ck(11), &mut grow), 1);
        assert_eq!(s.claim(ck(12), &mut grow), 3);
        assert_eq!(s.free_len(), 0);
        assert_eq!((s.find(ck(11)), s.peek(ck(12))), (Some(1), Some(3)));
    }

    #[test]
    fn the_cache_never_answers_for_a_released_or_moved_chunk() {
        let mut s = ChunkSlots::default();
        let mut grow = arena();
        s.claim(ck(1), &mut grow);
        s.claim(ck(2), &mut grow);
        assert_eq!(s.find(ck(2)), Some(1));
        s.release(ck(2), 1);
        assert_eq!((s.find(ck(2)), s.peek(ck(2))), (None, None));
        // A miss is cached too, and a claim of that chunk replaces it.
        assert_eq!(s.find(ck(3)), None);
        assert_eq!(s.claim(ck(3), &mut grow), 1);
        assert_eq!((s.find(ck(3)), s.peek(ck(3))), (Some(1), Some(1)));
        // A compaction moves chunk 3 to slot 0 after chunk 1 went.
        s.release(ck(1), 0);
        s.moved(ck(3), 0);
        s.compacted();
        assert_eq!(
            (s.peek(ck(3)), s.find(ck(3)), s.find(ck(1))),
            (Some(0), Some(0), None)
        );
        assert_eq!(s.free_len(), 0);
    }

    #[test]
    fn hash_table_bytes_follow_hashbrown_buckets() {
        assert_eq!(hash_table_bytes(0, 24), 0);
        // 3 entries: 4 buckets.
        assert_eq!(hash_table_bytes(3, 24), 4 * 25 + 16);
        // 14 entries: 14 * 8 / 7 = 16 buckets.
        assert_eq!(hash_table_bytes(14, 24), 16 * 25 + 16);
        let mut m: FxHashMap<ChunkKey, u32> = FxHashMap::default();
        m.reserve(100);
        // hashbrown's capacity for 128 buckets is 112: the formula gives those buckets back.
        assert_eq!(hash_table_bytes(m.capacity(), 24), 128 * 25 + 16);
    }
}
