//! The simulated machine's memory: where every page is, who owns it, how hot its class is.
//!
//! # Units, regions, classes
//!
//! A **unit** is what the kernel would track and move as one folio: a 4 KiB page, or a 2 MiB
//! huge page in a region backed by THP, or, in a scenario with `machine.grain = k` above 1,
//! k base pages of one rate that move together (a macro-particle: [`Region::grain`],
//! docs/simulator.md "Grain"). Units are numbered densely ([`UnitId`]) and each has
//! a node (1 byte), a class (2 bytes) and a physical slot on its node (4 bytes), so a 64 GiB
//! buffer of base pages costs 112 MiB here.
//!
//! A **region** is one allocation of a process (an mmap'ed buffer): contiguous virtual pages,
//! one memory policy, one page size. (A scenario region only partly in THP is mapped as two:
//! see `sim::thp_parts`.) A huge unit whose THP was split ([`Memory::split_thp`]) stays one
//! unit, counted as 512 base folios. A **class** is a set of units of one region that the
//! workload treats alike: the hot subset of a buffer, the rest of it. Accesses are drawn per
//! class, uniform over its units or Zipf-distributed over them. Classes keep, per node, how
//! many of their units are there and how much access weight that is, updated on every move,
//! so the fraction of a class's accesses that hit each node is known without a scan.
//!
//! # Physical slots
//!
//! DAMON's `paddr` operations set works on physical address ranges of a node, so the layout of
//! pages inside a node matters (docs/lab.md, first guest runs, 3: how many cold pages
//! migrate_hot takes along depends on the physical layout). Each node has a table of slots, slot -> unit; a unit
//! arriving on a node takes the most recently freed slot (the buddy allocator's LIFO free
//! lists), or the next never-used one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;
use tierd_engine::policy::MemPolicy;
use tierd_engine::topology::Topology;
use tierd_engine::types::{Bytes, CgroupId, NodeId, PageSize, Pages, SpaceId, Vpn};
use tierd_engine::MoveError;

/// A tracked page (base or huge), numbered densely across all regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct UnitId(pub u32);

impl UnitId {
    /// As an index.
    #[must_use]
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

/// A class of units (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ClassId(pub u16);

/// A region (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct RegionId(pub u32);

/// Marks a free physical slot.
const FREE_SLOT: u32 = u32::MAX;

/// Units per block of [`Memory::block_moves`].
pub const MOVE_BLOCK: usize = 64;

/// How a class spreads its accesses over its units.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Spread {
    /// Every unit alike.
    Uniform,
    /// The unit of rank r (0-based) gets weight (r + 1)^-s. Ranks are a fixed pseudo-random
    /// permutation of the class's units, so the hottest units are scattered over the region.
    Zipf {
        /// The exponent.
        s: f64,
    },
}

/// One allocation of a process.
#[derive(Clone, Debug, Serialize)]
pub struct Region {
    /// Its name in the scenario (`process.region`).
    pub name: String,
    /// The address space.
    pub space: SpaceId,
    /// The owning cgroup.
    pub cgroup: CgroupId,
    /// First virtual page.
    pub start_vpn: Vpn,
    /// First unit.
    pub first_unit: u32,
    /// Units in the region.
    pub units: u32,
    /// Base or huge pages.
    pub page_size: PageSize,
    /// Base pages of equal rate that one unit of a base-page region stands for (1 for a huge
    /// region): the scenario's `machine.grain` ([`Memory::map_region_grained`]).
    pub grain: u32,
    /// The region's memory policy.
    pub policy: MemPolicy,
    /// Whether the region is still mapped.
    pub alive: bool,
    /// The period of a sequential sweep over the region, seconds (`None`: its pages are
    /// touched at random, a Poisson process at their access rate). Only reference-bit tests
    /// read it ([`Lru`]): a sweep touches each page once per pass, whatever its access count.
    pub sweep_s: Option<f64>,
}

impl Region {
    /// Base pages per unit.
    #[must_use]
    pub fn unit_pages(&self) -> u64 {
        self.page_size.nr_pages().0 * u64::from(self.grain)
    }
    /// The virtual page of a unit's head.
    #[must_use]
    pub fn vpn_of(&self, u: UnitId) -> Vpn {
        Vpn(self.start_vpn.0 + u64::from(u.0 - self.first_unit) * self.unit_pages())
    }
}

/// A set of units treated alike by the workload.
#[derive(Clone, Debug, Serialize)]
pub struct Class {
    /// Its name (`region.hot`, `region.cold`, or the region's name).
    pub name: String,
    /// The region.
    pub region: RegionId,
    /// Unit ranges `[start, start + len)`, ascending.
    ranges: Vec<(u32, u32)>,
    /// Prefix sums of range lengths, for index -> unit.
    prefix: Vec<u32>,
    /// Units in the class.
    pub len: u32,
    /// Access spread.
    pub spread: Spread,
    /// Rank permutation multiplier and offset (Zipf): rank = (a * idx + b) mod len.
    perm: (u64, u64),
    /// Sum of all weights.
    pub total_weight: f64,
    /// Units per node.
    pub units_on: BTreeMap<NodeId, u64>,
    /// Access weight per node.
    pub weight_on: BTreeMap<NodeId, f64>,
    /// Per node id, once reclaim's coldest-first walk has asked for the node
    /// ([`Memory::track_cold_on`]): a bit per position of [`Class::coldest_order`], set while
    /// the unit at that position is on the node (an empty vector: not kept). The walk finds
    /// the class's next unit on the node by scanning words ([`Class::next_cold_on`]) instead
    /// of looking up the node of every unit on its way, most of them already moved to the
    /// lower tier by churn (a floor below which no unit was on the node did not help: every
    /// promotion of a cold unit lowered it again). Placing and taking a unit keep the bits.
    cold_on: Vec<Vec<u64>>,
    /// [`Class::coldest_order`], computed once.
    order: (u32, u32),
    /// Zipf: every unit's weight by class index, `(rank + 1)^-s`, computed once when the
    /// class is made (the sum [`Class::total_weight`] needs them all anyway) and shared by
    /// the copies of the machine that the configurations of a comparison run on. A rate
    /// looked up per scheduled hint fault and per move otherwise paid a `pow` each (7 % of
    /// C's PD row), and the NUMA scan arms units in address order, so it reads this table
    /// sequentially. 8 bytes a unit of a Zipf class (C: 42 M units, 336 MB, once). Empty for
    /// a uniform class.
    #[serde(skip)]
    weights: Arc<[f64]>,
    /// For each block of `1 << HINT_SHIFT` units from the first range's start, how many
    /// ranges start at or before the block's first unit: [`Class::index_of`] searches only the
    /// ranges that start within the unit's block instead of all of them. A binary search over
    /// the ranges was ~60 % of placing a unit (A: a chunked hot set of 256 ranges, its
    /// remainder 257, 16 M units placed at start and millions moved). Shared by the copies of
    /// the machine, as `weights` is; 4 bytes per 16 MiB of the class's span.
    #[serde(skip)]
    range_hint: Arc<[u32]>,
    /// The same over [`Class::prefix`], for [`Class::unit_at`] (class index -> unit), which
    /// every drawn sample and access of the class makes.
    #[serde(skip)]
    index_hint: Arc<[u32]>,
}

/// log2 of the units per entry of [`Class::range_hint`].
const HINT_SHIFT: u32 = 12;

/// A hint table over `sorted` (ascending by `key`, ending before `end`): for each block of
/// `1 << HINT_SHIFT` from the first key, how many entries have a key at or before the block's
/// start. See [`Class::range_hint`].
fn hint_table<T>(sorted: &[T], key: impl Fn(&T) -> u32, end: u32) -> Arc<[u32]> {
    let Some(base) = sorted.first().map(&key) else {
        return Arc::from([]);
    };
    let blocks = (u64::from(end.saturating_sub(base)) >> HINT_SHIFT) + 1;
    let mut r = 0usize;
    (0..blocks)
        .map(|b| {
            let start = u64::from(base) + (b << HINT_SHIFT);
            while r < sorted.len() && u64::from(key(&sorted[r])) <= start {
                r += 1;
            }
            r as u32
        })
        .collect()
}

/// How many of `sorted` have a key at or before `x`: `sorted.partition_point(|e| key(e) <=
/// x)`, searched only between the hints ([`hint_table`]) of `x`'s block and the next.
fn count_by<T>(sorted: &[T], key: impl Fn(&T) -> u32, hint: &[u32], x: u32) -> usize {
    let Some(base) = sorted.first().map(&key) else {
        return 0;
    };
    let Some(off) = x.checked_sub(base) else {
        return 0;
    };
    let b = (off >> HINT_SHIFT) as usize;
    let at = |k: usize| hint.get(k).map_or(sorted.len(), |&h| h as usize);
    let (lo, hi) = (at(b), at(b + 1));
    lo + sorted[lo..hi].partition_point(|e| key(e) <= x)
}

/// `(rank + 1)^-s`: the Zipf weight of a rank. The table by index ([`Class::weight`]) and
/// the walk by cold position ([`Class::cold_weight`]) both compute it here, so that they
/// agree bit for bit.
fn zipf_power(rank: u64, s: f64) -> f64 {
    // Ranks fit f64 exactly below 2^53.
    #[allow(clippy::cast_precision_loss)]
    ((rank + 1) as f64).powf(-s)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Class {
    /// The class's `idx`-th unit (0 <= idx < len).
    #[must_use]
    pub fn unit_at(&self, idx: u32) -> UnitId {
        let r = count_by(&self.prefix, |&p| p, &self.index_hint, idx) - 1;
        UnitId(self.ranges[r].0 + (idx - self.prefix[r]))
    }

    /// Every unit of the class with its index, in unit order.
    pub fn iter_units(&self) -> impl Iterator<Item = (u32, UnitId)> + '_ {
        self.ranges
            .iter()
            .zip(&self.prefix)
            .flat_map(|(&(s, l), &p)| (0..l).map(move |i| (p + i, UnitId(s + i))))
    }

    /// The position of `u` within the class, if it belongs to it.
    #[must_use]
    pub fn index_of(&self, u: UnitId) -> Option<u32> {
        self.range_of(u).map(|(idx, _)| idx)
    }

    /// The position of `u` within the class and the end of the range of units holding it
    /// (the units from `u` up to it have the positions that follow), if `u` belongs to it.
    fn range_of(&self, u: UnitId) -> Option<(u32, u32)> {
        let r = count_by(&self.ranges, |r| r.0, &self.range_hint, u.0);
        if r == 0 {
            return None;
        }
        let (s, l) = self.ranges[r - 1];
        (u.0 < s + l).then(|| (self.prefix[r - 1] + (u.0 - s), s + l))
    }

    /// The Zipf rank of the class's `idx`-th unit.
    fn rank(&self, idx: u32) -> u64 {
        (self.perm.0 * u64::from(idx) + self.perm.1) % u64::from(self.len.max(1))
    }

    /// The class index holding rank `rank` (inverse of `Class::rank`).
    #[must_use]
    pub fn index_of_rank(&self, rank: u64) -> u32 {
        let n = i128::from(self.len.max(1));
        // a * idx = rank - b (mod n): idx = a^-1 (rank - b). Extended Euclid on small ints.
        let (mut t, mut new_t, mut r, mut new_r) = (0i128, 1i128, n, i128::from(self.perm.0) % n);
        while new_r != 0 {
            let q = r / new_r;
            (t, new_t) = (new_t, t - q * new_t);
            (r, new_r) = (new_r, r - q * new_r);
        }
        let inv = t.rem_euclid(n);
        let idx = (inv * (i128::from(rank) - i128::from(self.perm.1))).rem_euclid(n);
        // idx < n = len <= u32::MAX.
        u32::try_from(idx).unwrap_or(0)
    }

    /// The class's indexes from its least-accessed unit up, as `(first, step)`: the k-th
    /// least-accessed unit is at index `first + k × step (mod len)` (Zipf: rank `len - 1 -
    /// k`, since `rank = a × idx + b` steps back by `a^-1` per rank; uniform: index `k`). Lets
    /// reclaim walk a class coldest-first with one addition per unit instead of a modular
    /// inverse ([`Class::index_of_rank`]) each.
    #[must_use]
    pub fn coldest_order(&self) -> (u32, u32) {
        self.order
    }

    /// Computes [`Class::coldest_order`] (two modular inverses: kept in `order`).
    fn compute_coldest_order(&self) -> (u32, u32) {
        let n = self.len.max(1);
        match self.spread {
            Spread::Uniform => (0, 1 % n),
            Spread::Zipf { .. } => {
                let n64 = u64::from(n);
                let first = self.index_of_rank(n64 - 1);
                // index_of_rank(b + 1) = a^-1 (mod n).
                let inv = self.index_of_rank((self.perm.1 + 1) % n64);
                (first, (n - inv % n) % n)
            }
        }
    }

    /// The position of index `idx` in [`Class::coldest_order`]: `k` such that the k-th
    /// least-accessed unit is at `idx`. Zipf: `idx = first + k x step (mod len)` with
    /// `step = -a^-1`, so `k = (idx - first) x -a (mod len)`; uniform: `k = idx`.
    #[must_use]
    pub fn cold_position(&self, idx: u32) -> u32 {
        let n = u64::from(self.len.max(1));
        let (first, _) = self.coldest_order();
        let step_inv = match self.spread {
            Spread::Uniform => 1,
            Spread::Zipf { .. } => (n - self.perm.0 % n) % n,
        };
        // Both factors are below n <= u32::MAX, so the product fits a u64.
        let off = (u64::from(idx) + n - u64::from(first)) % n;
        u32::try_from(off * step_inv % n).unwrap_or(0)
    }

    /// The index at position `k` of [`Class::coldest_order`].
    #[must_use]
    pub fn cold_index(&self, k: u32) -> u32 {
        let n = u64::from(self.len.max(1));
        let (first, step) = self.coldest_order();
        u32::try_from((u64::from(first) + u64::from(k) * u64::from(step)) % n).unwrap_or(0)
    }

    /// The first position at or after `k` of [`Class::coldest_order`] whose unit is on
    /// `node`, if any. Only for a node [`Memory::track_cold_on`] was called for (none
    /// otherwise).
    #[must_use]
    pub fn next_cold_on(&self, node: NodeId, k: u32) -> Option<u32> {
        let bits = self.cold_on.get(usize::from(node.0))?;
        let mut w = k as usize / 64;
        let mut word = bits.get(w)? & (u64::MAX << (k % 64));
        loop {
            if word != 0 {
                let pos = u32::try_from(w * 64).ok()? + word.trailing_zeros();
                return (pos < self.len).then_some(pos);
            }
            w += 1;
            word = *bits.get(w)?;
        }
    }

    /// Whether the bits of [`Class::next_cold_on`] are kept for `node`.
    fn tracks_cold_on(&self, node: NodeId) -> bool {
        self.cold_on
            .get(usize::from(node.0))
            .is_some_and(|b| !b.is_empty())
    }

    /// Sets or clears the bit of position `k` for `node` (kept: [`Class::tracks_cold_on`]).
    fn set_cold_on(&mut self, node: NodeId, k: u32, on: bool) {
        if let Some(w) = self
            .cold_on
            .get_mut(usize::from(node.0))
            .and_then(|b| b.get_mut(k as usize / 64))
        {
            if on {
                *w |= 1 << (k % 64);
            } else {
                *w &= !(1 << (k % 64));
            }
        }
    }

    /// The access weight of the unit at position `k` of [`Class::coldest_order`]: the same
    /// value as [`Class::weight`] of [`Class::cold_index`]`(k)`, computed from its rank
    /// (`len - 1 - k`) rather than read from the table by index, which a walk in cold order
    /// reads at random (a cache miss per unit in a class of millions; `powf` costs less).
    #[must_use]
    #[inline]
    pub fn cold_weight(&self, k: u32) -> f64 {
        match self.spread {
            Spread::Uniform => 1.0,
            Spread::Zipf { s } => zipf_power(
                u64::from(self.len.max(1)).saturating_sub(u64::from(k) + 1),
                s,
            ),
        }
    }

    /// The index after `idx` in [`Class::coldest_order`] with its `step`.
    #[must_use]
    #[inline]
    pub fn next_in_order(&self, idx: u32, step: u32) -> u32 {
        let n = u64::from(self.len.max(1));
        // idx, step < n <= u32::MAX, so the sum fits and the result is below n.
        u32::try_from((u64::from(idx) + u64::from(step)) % n).unwrap_or(0)
    }

    /// The access weight of the class's `idx`-th unit.
    #[must_use]
    #[inline]
    pub fn weight(&self, idx: u32) -> f64 {
        match self.spread {
            Spread::Uniform => 1.0,
            Spread::Zipf { s } => self
                .weights
                .get(idx as usize)
                .copied()
                .unwrap_or_else(|| self.zipf_weight(idx, s)),
        }
    }

    /// `(rank + 1)^-s` of the class's `idx`-th unit: what [`Class::weight`] reads from its
    /// table.
    fn zipf_weight(&self, idx: u32, s: f64) -> f64 {
        zipf_power(self.rank(idx), s)
    }

    /// The fraction of the class's accesses that land on `node`.
    #[must_use]
    pub fn fraction_on(&self, node: NodeId) -> f64 {
        if self.total_weight <= 0.0 {
            return 0.0;
        }
        self.weight_on.get(&node).copied().unwrap_or(0.0).max(0.0) / self.total_weight
    }
}

/// Per-node state.
#[derive(Debug, Serialize)]
pub struct NodeMem {
    /// Capacity in base pages.
    pub capacity: Pages,
    /// Used base pages (tracked units plus `reserved`).
    pub used: Pages,
    /// Base pages held by things the simulator does not track page by page (kernel, page
    /// cache the scenario declares).
    pub reserved: Pages,
    /// Physical slots: slot -> unit, or free.
    slots: Vec<u32>,
    /// A summary per [`SLOT_BLOCK`] slots, so that a lookup by physical address (DAMON
    /// `paddr` samples one random page per region, millions of times) can often answer from
    /// this small table instead of taking a cache miss on `slots` and another on the unit's
    /// class: a block that is empty has no unit, a full block of one class gives the class.
    /// Derived from `slots`, so not serialized.
    #[serde(skip)]
    blocks: Vec<SlotBlock>,
    /// One bit per slot, set while it holds a unit: with a block of one class, answers a
    /// lookup in a block that is neither empty nor full from 1/32 of the slot table's bytes
    /// (a node's bitmap stays in cache where its slots do not; DAMON `paddr` sampling a node
    /// that promotion is emptying took a miss on `slots` for most samples). Derived from
    /// `slots`, so not serialized.
    #[serde(skip)]
    occupied: Vec<u64>,
    /// Freed slots, most recent last.
    free_slots: Vec<u32>,
}

/// Slots per `SlotBlock`.
pub const SLOT_BLOCK: usize = 512;

/// What a block of [`SLOT_BLOCK`] slots holds, kept exact by `take_slot` / `release_slot`.
#[derive(Clone, Copy, Debug, Default)]
struct SlotBlock {
    /// Occupied slots.
    occupied: u16,
    /// The class of every unit taken into the block since it was last empty...
    class: u16,
    /// ...unless units of more than one class were (then nothing is claimed until it empties).
    mixed: bool,
}

/// What the block summary and the occupancy bitmap say about a slot without reading the
/// slot table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotHint {
    /// The slot is free.
    Free,
    /// The slot holds a unit of this class (every unit in its block is of it).
    Class(ClassId),
    /// Read the slot table.
    Unknown,
}

impl NodeMem {
    /// What the block summary knows about `slot` (see `blocks`).
    #[must_use]
    #[inline]
    pub fn slot_hint(&self, slot: u32) -> SlotHint {
        match self.blocks.get(slot as usize / SLOT_BLOCK) {
            Some(b) if b.occupied == 0 => SlotHint::Free,
            // Every unit of the block is of its class: the bit says whether the slot holds
            // one (a slot past the last one has no bit set, and no unit).
            Some(b) if !b.mixed => {
                if self.is_occupied(slot) {
                    SlotHint::Class(ClassId(b.class))
                } else {
                    SlotHint::Free
                }
            }
            _ => SlotHint::Unknown,
        }
    }

    /// Whether `slot`'s bit in the occupancy bitmap is set.
    #[inline]
    fn is_occupied(&self, slot: u32) -> bool {
        self.occupied
            .get(slot as usize / 64)
            .is_some_and(|w| w & (1 << (slot % 64)) != 0)
    }

    /// Free base pages.
    #[must_use]
    pub fn free(&self) -> Pages {
        Pages(self.capacity.0.saturating_sub(self.used.0))
    }
    /// Physical slots ever used (the span DAMON `paddr` monitors).
    #[must_use]
    pub fn slots(&self) -> u32 {
        u32::try_from(self.slots.len()).unwrap_or(u32::MAX)
    }
    /// The unit in `slot`, if any.
    #[must_use]
    pub fn unit_in(&self, slot: u32) -> Option<UnitId> {
        self.slots
            .get(slot as usize)
            .copied()
            .filter(|&u| u != FREE_SLOT)
            .map(UnitId)
    }
}

/// What moved, for the conservation checks and reports.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MemStats {
    /// Base pages moved, all reasons.
    pub pages_migrated: u64,
    /// Moves that put a page outside its BIND / PREFERRED_MANY nodemask. Must stay 0.
    pub mempolicy_violations: u64,
}

// `Clone` by hand so that `clone_from` reuses the slot arrays: a comparison resets one
// machine per configuration, and a fresh copy of 16 M slots costs the kernel more to clear
// than copying into memory already mapped.
impl Clone for NodeMem {
    fn clone(&self) -> Self {
        NodeMem {
            capacity: self.capacity,
            used: self.used,
            reserved: self.reserved,
            slots: self.slots.clone(),
            blocks: self.blocks.clone(),
            occupied: self.occupied.clone(),
            free_slots: self.free_slots.clone(),
        }
    }

    fn clone_from(&mut self, src: &Self) {
        self.capacity = src.capacity;
        self.used = src.used;
        self.reserved = src.reserved;
        self.slots.clone_from(&src.slots);
        self.blocks.clone_from(&src.blocks);
        self.occupied.clone_from(&src.occupied);
        self.free_slots.clone_from(&src.free_slots);
    }
}

/// The kernel's LRU of each node as a two-handed clock: the state the reclaim model of
/// [`crate::mechanism::demote_coldest`] keeps when the scenario asks for it
/// (`machine.reclaim.model = "lru"`).
///
/// mm/vmscan.c keeps an active and an inactive list per node: `shrink_active_list()` moves
/// folios from the active tail to the inactive list and clears their accessed bits
/// (`folio_referenced()`), and `shrink_inactive_list()` takes the inactive tail, where
/// `folio_check_references()` activates a folio referenced since then and reclaims (here:
/// demotes, `demote_folio_list()`) one that was not. A page is thus reclaimed when it went
/// untouched for as long as it sat on the inactive list. The two-handed clock is the same
/// test on one circle: the front hand clears accessed bits, the back hand, a fixed number of
/// slots behind (the inactive list's size, `inactive_is_low()`), reclaims what is still
/// clear. The circle here is a node's physical slots.
#[derive(Clone, Debug, Default)]
pub struct Lru {
    /// Per unit: when the front hand last cleared its accessed bit, in [`LRU_TICK_NS`] since
    /// the run began (a u32 lasts 74 hours of simulated time).
    cleared_tick: Vec<u32>,
    /// Per unit: the node it was on then (`u8::MAX`: never cleared). A unit found on another
    /// node has moved since, and arrived with its accessed bit set (a migration keeps the
    /// young and referenced flags: mm/migrate.c `folio_migrate_flags()`).
    cleared_node: Vec<u8>,
    /// Per node: the back hand and the step's scan budget spent.
    hands: BTreeMap<NodeId, LruHand>,
}

/// The clock of [`Lru`]'s stamps: 1/16 ms. Finer than a step, so that the front and back
/// hands of one step's scan are apart by the time the scan between them takes.
pub const LRU_TICK_NS: u64 = 62_500;

/// One node's clock hand and the scanning it did in the current step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LruHand {
    /// The back hand's slot.
    pub back: u32,
    /// Start of the step the counts below belong to, ns.
    pub step_ns: u64,
    /// Folios (base pages or THPs) kswapd visited in that step: what it spent of its scan
    /// budget.
    pub kswapd_scanned: u64,
    /// Folios direct (and memcg) reclaim visited in that step.
    pub direct_scanned: u64,
    /// kswapd is awake on the node and reclaims toward this many free pages: once woken it
    /// runs `balance_pgdat()` until the node is balanced, whatever wakes it or not meanwhile
    /// (mm/vmscan.c `kswapd()`: it sleeps only in `kswapd_try_to_sleep()` after a balanced
    /// run), so a scan budget per step carries its work over the steps it takes.
    pub kswapd_goal: Option<Pages>,
}

impl Lru {
    /// Clears `u`'s accessed bit on `node` at `tick` (the front hand passing it).
    pub fn clear(&mut self, u: UnitId, node: NodeId, tick: u32) {
        let i = u.idx();
        if self.cleared_tick.len() <= i {
            self.cleared_tick.resize(i + 1, 0);
            self.cleared_node.resize(i + 1, u8::MAX);
        }
        self.cleared_tick[i] = tick;
        // Node ids are < 64 (topology limit).
        #[allow(clippy::cast_possible_truncation)]
        {
            self.cleared_node[i] = node.0 as u8;
        }
    }

    /// When `u`'s accessed bit was last cleared while it sat on `node`: `None` if never, or
    /// if it has moved since (it then arrived with the bit set).
    #[must_use]
    pub fn cleared_at(&self, u: UnitId, node: NodeId) -> Option<u32> {
        let i = u.idx();
        (self.cleared_node.get(i).copied() == Some(node.0 as u8)).then(|| self.cleared_tick[i])
    }

    /// `node`'s hand, its budget reset if `now` starts a new step.
    pub fn hand(&mut self, node: NodeId, now: u64) -> &mut LruHand {
        let h = self.hands.entry(node).or_default();
        if h.step_ns != now {
            h.step_ns = now;
            h.kswapd_scanned = 0;
            h.direct_scanned = 0;
        }
        h
    }
}

/// All memory of the simulated machine.
#[derive(Debug)]
pub struct Memory {
    topo: Topology,
    nodes: BTreeMap<NodeId, NodeMem>,
    /// Per unit, its node, class and slot side by side: moving or faulting a random unit of
    /// millions reads all three, one cache miss instead of one per array.
    unit_place: Vec<UnitPlace>,
    /// Per block of [`MOVE_BLOCK`] units, bumped whenever one of them is placed or taken:
    /// lets a walker keep a summary of a block (the NUMA scanner's quiet blocks) and know
    /// it still holds without re-reading every unit.
    block_moves: Vec<u32>,
    regions: Vec<Region>,
    classes: Vec<Class>,
    /// Units of huge regions whose THP was split into base pages (see [`Memory::split_thp`]).
    /// Splits are rare (a THP migrating to a node without a free 2 MiB block), so a set.
    split: BTreeSet<u32>,
    /// Counters.
    pub stats: MemStats,
    /// The kernel's LRU as a two-handed clock (see [`Lru`]); empty until reclaim uses it.
    pub lru: Lru,
}

/// Where a unit is: its node, its class and its slot on the node (8 bytes, the node's byte
/// last; `u8::MAX` and a free slot (`u32::MAX`) while unplaced).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnitPlace {
    /// Its slot on its node ([`NodeMem::unit_in`]).
    pub slot: u32,
    /// Its class ([`ClassId`]).
    pub class: u16,
    /// Its node id, as a byte (node ids are below 64).
    pub node: u8,
}

impl UnitPlace {
    /// A unit not placed yet, of class 0.
    const UNPLACED: UnitPlace = UnitPlace {
        slot: FREE_SLOT,
        class: 0,
        node: u8::MAX,
    };
}

// By hand, like `NodeMem`: `clone_from` keeps the per-unit arrays' allocations (see there).
impl Clone for Memory {
    fn clone(&self) -> Self {
        Memory {
            topo: self.topo.clone(),
            nodes: self.nodes.clone(),
            unit_place: self.unit_place.clone(),
            block_moves: self.block_moves.clone(),
            regions: self.regions.clone(),
            classes: self.classes.clone(),
            split: self.split.clone(),
            stats: self.stats.clone(),
            lru: self.lru.clone(),
        }
    }

    fn clone_from(&mut self, src: &Self) {
        self.topo.clone_from(&src.topo);
        if self.nodes.keys().eq(src.nodes.keys()) {
            for (dst, s) in self.nodes.values_mut().zip(src.nodes.values()) {
                dst.clone_from(s);
            }
        } else {
            self.nodes = src.nodes.clone();
        }
        self.unit_place.clone_from(&src.unit_place);
        self.block_moves.clone_from(&src.block_moves);
        self.regions.clone_from(&src.regions);
        self.classes.clone_from(&src.classes);
        self.split.clone_from(&src.split);
        self.stats.clone_from(&src.stats);
        self.lru.clone_from(&src.lru);
    }
}

/// Why an allocation could not be placed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AllocError {
    /// Every node the policy allows is full.
    #[error("region {region}: no room for {pages} pages on any node its policy allows")]
    NoRoom {
        /// The region's name.
        region: String,
        /// Pages that did not fit.
        pages: u64,
    },
    /// The machine has more units than a u32 can number.
    #[error("too many pages to simulate (more than 2^32 units); use huge pages or --scale")]
    TooManyUnits,
}

/// A class to create with a region: the units at `ranges` (region-relative unit indexes).
#[derive(Clone, Debug)]
pub struct ClassSpec {
    /// The class's name.
    pub name: String,
    /// Region-relative unit ranges `[start, start + len)`, ascending and disjoint.
    pub ranges: Vec<(u32, u32)>,
    /// Access spread.
    pub spread: Spread,
}

impl Memory {
    /// An empty machine with `topo`'s nodes and capacities.
    #[must_use]
    pub fn new(topo: Topology) -> Self {
        let nodes = topo
            .nodes()
            .iter()
            .map(|n| {
                let node = NodeMem {
                    capacity: n.capacity.pages(),
                    used: Pages(0),
                    reserved: Pages(0),
                    slots: Vec::new(),
                    blocks: Vec::new(),
                    occupied: Vec::new(),
                    free_slots: Vec::new(),
                };
                (n.id, node)
            })
            .collect();
        Memory {
            topo,
            nodes,
            unit_place: Vec::new(),
            block_moves: Vec::new(),
            regions: Vec::new(),
            classes: Vec::new(),
            split: BTreeSet::new(),
            stats: MemStats::default(),
            lru: Lru::default(),
        }
    }

    /// The topology.
    #[must_use]
    pub fn topology(&self) -> &Topology {
        &self.topo
    }
    /// Per-node state.
    #[must_use]
    pub fn node(&self, n: NodeId) -> Option<&NodeMem> {
        self.nodes.get(&n)
    }
    /// All nodes.
    #[must_use]
    pub fn nodes(&self) -> &BTreeMap<NodeId, NodeMem> {
        &self.nodes
    }
    /// Free memory of `n`.
    #[must_use]
    pub fn free(&self, n: NodeId) -> Bytes {
        self.nodes.get(&n).map_or(Bytes(0), |m| m.free().bytes())
    }
    /// Every region, by id.
    #[must_use]
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }
    /// Every class, by id.
    #[must_use]
    pub fn classes(&self) -> &[Class] {
        &self.classes
    }
    /// One class.
    #[must_use]
    pub fn class(&self, c: ClassId) -> &Class {
        &self.classes[usize::from(c.0)]
    }
    /// Units in the machine.
    #[must_use]
    pub fn units(&self) -> u32 {
        u32::try_from(self.unit_place.len()).unwrap_or(u32::MAX)
    }
    /// The node a unit is on.
    #[must_use]
    pub fn node_of(&self, u: UnitId) -> NodeId {
        NodeId(u16::from(self.unit_place[u.idx()].node))
    }
    /// The node, class and slot of every unit, by unit index (what [`Memory::node_of`],
    /// [`Memory::class_of`] and [`Memory::slot_of`] read).
    #[must_use]
    pub fn unit_places(&self) -> &[UnitPlace] {
        &self.unit_place
    }
    /// A unit's class.
    #[must_use]
    pub fn class_of(&self, u: UnitId) -> ClassId {
        ClassId(self.unit_place[u.idx()].class)
    }
    /// A unit's physical slot on its node.
    #[must_use]
    pub fn slot_of(&self, u: UnitId) -> u32 {
        self.unit_place[u.idx()].slot
    }
    /// The region holding a unit.
    #[must_use]
    pub fn region_of(&self, u: UnitId) -> &Region {
        &self.regions[self.class(self.class_of(u)).region.0 as usize]
    }
    /// Sets region `r`'s sweep period ([`Region::sweep_s`]).
    pub fn set_sweep(&mut self, r: RegionId, sweep_s: Option<f64>) {
        if let Some(reg) = self.regions.get_mut(r.0 as usize) {
            reg.sweep_s = sweep_s;
        }
    }

    /// Base pages of a unit.
    #[must_use]
    pub fn unit_pages(&self, u: UnitId) -> u64 {
        self.region_of(u).unit_pages()
    }
    /// Whether `u` is one 2 MiB folio now: a unit of a huge region whose THP was not split.
    #[must_use]
    #[inline]
    pub fn is_thp(&self, u: UnitId) -> bool {
        self.region_of(u).page_size != PageSize::Base && !self.split.contains(&u.0)
    }

    /// Base pages of equal rate that unit `u` stands for, each its own folio (1 but in a
    /// grained region: [`Memory::map_region_grained`]). An event drawn per page (a hint
    /// fault, a reference-bit test) is drawn once for the unit at one page's rate
    /// ([`crate::workload::Load::page_rate`]) and counted and charged `grain` times.
    #[must_use]
    #[inline]
    pub fn grain_of(&self, u: UnitId) -> u64 {
        u64::from(self.region_of(u).grain)
    }

    /// The machine's grain: base pages per unit of its base-page regions (1 when every page
    /// is simulated). A grained machine has no huge regions (`Scenario::grain_problem`), so
    /// every unit then stands for this many pages; events drawn over the whole machine at one
    /// page's rate (hardware samples: [`crate::mechanism::draw_samples`]) use it.
    #[must_use]
    pub fn grain(&self) -> u64 {
        self.regions
            .iter()
            .map(|r| u64::from(r.grain))
            .max()
            .unwrap_or(1)
    }

    /// Base pages per folio of `u`: all of its pages for a THP, 1 for a base page or a split
    /// THP (whose base pages are then each their own folio).
    #[must_use]
    pub fn folio_pages(&self, u: UnitId) -> u64 {
        if self.is_thp(u) {
            self.unit_pages(u)
        } else {
            1
        }
    }

    /// Splits the THP `u` into base pages (mm/huge_memory.c `split_huge_page_to_list_to_order()`),
    /// as migration does when no 2 MiB block is free on the target (mm/migrate.c
    /// `migrate_pages_batch()`: `try_split_folio()` on -ENOMEM) and reclaim when a THP cannot be
    /// moved whole (mm/vmscan.c `shrink_folio_list()`). Returns whether it was a THP.
    ///
    /// The unit stays one unit of the simulator: its 512 base pages keep one node and one
    /// class. They were split to move together, and having one access rate they would be
    /// treated alike; what changes is how they are counted and charged (512 folios: no huge
    /// PMD, no `thp_migration_success`, a migration cost per base page). khugepaged's collapse
    /// back into a THP is not modelled.
    pub fn split_thp(&mut self, u: UnitId) -> bool {
        self.is_thp(u) && self.split.insert(u.0)
    }

    /// THPs split so far.
    #[must_use]
    pub fn split_count(&self) -> usize {
        self.split.len()
    }

    /// Reads what moving `u` reads first (its class, node, slot, the slot's entry and, in a
    /// Zipf class, its weight, which the class's per-node weight loses and gains) and
    /// returns a value made of them. Moving a batch of units costs a chain of cache misses
    /// per unit; reading them for the whole batch first lets the misses overlap.
    #[must_use]
    pub fn warm(&self, u: UnitId) -> u64 {
        let Some(&UnitPlace {
            slot: s,
            class: c,
            node: n,
        }) = self.unit_place.get(u.idx())
        else {
            return 0;
        };
        let e = self
            .nodes
            .get(&NodeId(u16::from(n)))
            .and_then(|m| m.slots.get(s as usize))
            .copied()
            .unwrap_or(0);
        let w = self
            .classes
            .get(usize::from(c))
            .map_or(0.0, |class| unit_weight(class, u));
        u64::from(c) ^ u64::from(n) ^ u64::from(s) ^ u64::from(e) ^ w.to_bits()
    }

    /// The unit holding `vpn` in `space`, if mapped.
    #[must_use]
    pub fn unit_at(&self, space: SpaceId, vpn: Vpn) -> Option<UnitId> {
        self.unit_at_stride(space, vpn, Region::unit_pages)
    }

    /// The unit at `vpn` in `space` when each region's units are laid out `stride(region)`
    /// virtual pages apart from its start: [`Memory::unit_at`] with the units' own size, or
    /// a denser layout of the same units (tierd's engine sees a grained unit as one page).
    #[must_use]
    pub fn unit_at_stride(
        &self,
        space: SpaceId,
        vpn: Vpn,
        stride: impl Fn(&Region) -> u64,
    ) -> Option<UnitId> {
        self.regions
            .iter()
            .filter(|r| r.alive && r.space == space)
            .find_map(|r| {
                let off = vpn.0.checked_sub(r.start_vpn.0)? / stride(r).max(1);
                (off < u64::from(r.units))
                    .then(|| UnitId(r.first_unit + u32::try_from(off).unwrap_or(0)))
            })
    }

    /// Sets aside `pages` base pages of `node` (kernel, page cache): not movable.
    pub fn reserve(&mut self, node: NodeId, pages: Pages) {
        if let Some(m) = self.nodes.get_mut(&node) {
            let add = pages.0.min(m.free().0);
            m.reserved.0 += add;
            m.used.0 += add;
        }
    }

    fn take_slot(&mut self, node: NodeId, u: UnitId) -> u32 {
        let class = self.unit_place[u.idx()].class;
        let m = self
            .nodes
            .get_mut(&node)
            .expect("nodes are fixed at construction");
        let s = if let Some(s) = m.free_slots.pop() {
            m.slots[s as usize] = u.0;
            s
        } else {
            m.slots.push(u.0);
            u32::try_from(m.slots.len() - 1).unwrap_or(u32::MAX)
        };
        let w = s as usize / 64;
        if w >= m.occupied.len() {
            m.occupied.resize(w + 1, 0);
        }
        m.occupied[w] |= 1 << (s % 64);
        let bi = s as usize / SLOT_BLOCK;
        if bi >= m.blocks.len() {
            m.blocks.resize(bi + 1, SlotBlock::default());
        }
        let b = &mut m.blocks[bi];
        if b.occupied == 0 {
            *b = SlotBlock {
                occupied: 0,
                class,
                mixed: false,
            };
        } else if b.class != class {
            b.mixed = true;
        }
        b.occupied += 1;
        s
    }

    fn release_slot(&mut self, node: NodeId, slot: u32) {
        if let Some(m) = self.nodes.get_mut(&node) {
            if let Some(s) = m.slots.get_mut(slot as usize) {
                *s = FREE_SLOT;
                m.free_slots.push(slot);
                if let Some(w) = m.occupied.get_mut(slot as usize / 64) {
                    *w &= !(1 << (slot % 64));
                }
                if let Some(b) = m.blocks.get_mut(slot as usize / SLOT_BLOCK) {
                    b.occupied = b.occupied.saturating_sub(1);
                }
            }
        }
    }

    /// Maps a region of `units` units and creates its classes; units are placed by
    /// `place(unit_index, order)`, which fills `order` with the unit's node order (first node
    /// with room wins). Units not covered by any class go to an extra class named after the
    /// region.
    ///
    /// # Errors
    /// [`AllocError`] if a unit fits on no node of its order.
    #[allow(clippy::too_many_arguments)]
    pub fn map_region(
        &mut self,
        name: &str,
        space: SpaceId,
        cgroup: CgroupId,
        start_vpn: Vpn,
        units: u32,
        page_size: PageSize,
        policy: MemPolicy,
        classes: Vec<ClassSpec>,
        seed: u64,
        place: impl FnMut(u32, &mut Vec<NodeId>),
    ) -> Result<RegionId, AllocError> {
        let unit = (page_size, 1);
        self.map_region_grained(
            name, space, cgroup, start_vpn, units, unit, policy, classes, seed, place,
        )
    }

    /// [`Memory::map_region`] with units of `grain` base pages each in a base-page region
    /// (`unit = (page size, grain)`; a huge region's grain is 1, a THP being its own unit).
    ///
    /// A grained unit is a macro-particle, as particle simulations use them: it stands for
    /// `grain` base pages of one access rate that the workload and every mechanism would
    /// treat alike, moved, counted and charged as `grain` base folios (a split THP is such a
    /// unit of 512). Accesses spread over a class's units, so a Zipf class is Zipf over its
    /// units: its pages come in steps of `grain` pages of one rate.
    ///
    /// # Errors
    /// As [`Memory::map_region`].
    #[allow(clippy::too_many_arguments)]
    pub fn map_region_grained(
        &mut self,
        name: &str,
        space: SpaceId,
        cgroup: CgroupId,
        start_vpn: Vpn,
        units: u32,
        (page_size, grain): (PageSize, u32),
        policy: MemPolicy,
        classes: Vec<ClassSpec>,
        seed: u64,
        mut place: impl FnMut(u32, &mut Vec<NodeId>),
    ) -> Result<RegionId, AllocError> {
        let grain = if page_size == PageSize::Base {
            grain.max(1)
        } else {
            1
        };
        let first = self.units();
        let total = u64::from(first) + u64::from(units);
        if total > u64::from(u32::MAX - 1) {
            return Err(AllocError::TooManyUnits);
        }
        let rid = RegionId(u32::try_from(self.regions.len()).unwrap_or(u32::MAX));
        self.regions.push(Region {
            name: name.to_string(),
            space,
            cgroup,
            start_vpn,
            first_unit: first,
            units,
            page_size,
            grain,
            policy,
            alive: true,
            sweep_s: None,
        });
        // Classes, plus the remainder.
        let mut covered = vec![false; units as usize];
        let mut specs = classes;
        for c in &specs {
            for &(s, l) in &c.ranges {
                for i in s..(s + l).min(units) {
                    covered[i as usize] = true;
                }
            }
        }
        let mut rest = Vec::new();
        let mut i = 0u32;
        while i < units {
            if covered[i as usize] {
                i += 1;
                continue;
            }
            let s = i;
            while i < units && !covered[i as usize] {
                i += 1;
            }
            rest.push((s, i - s));
        }
        if !rest.is_empty() {
            specs.push(ClassSpec {
                name: name.to_string(),
                ranges: rest,
                spread: Spread::Uniform,
            });
        }
        let class_base = self.classes.len();
        self.unit_place.resize(total as usize, UnitPlace::UNPLACED);
        for (k, spec) in specs.into_iter().enumerate() {
            let ranges: Vec<(u32, u32)> = spec
                .ranges
                .iter()
                .map(|&(s, l)| (first + s, l.min(units.saturating_sub(s))))
                .filter(|r| r.1 > 0)
                .collect();
            let mut prefix = Vec::with_capacity(ranges.len());
            let mut acc = 0u32;
            for &(_, l) in &ranges {
                prefix.push(acc);
                acc += l;
            }
            let len = acc;
            // A multiplier coprime to len gives a permutation; derive it from the seed.
            let n = u64::from(len.max(1));
            let mut a = ((seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (k as u64)) % n) | 1;
            while gcd(a, n) != 1 {
                a = (a + 2) % n.max(2);
                if a == 0 {
                    a = 1;
                }
            }
            let b = seed.rotate_left(17) % n;
            let cid = u16::try_from(class_base + k).unwrap_or(u16::MAX);
            for &(s, l) in &ranges {
                for u in s..s + l {
                    self.unit_place[u as usize].class = cid;
                }
            }
            let mut class = Class {
                name: spec.name,
                region: rid,
                ranges,
                prefix,
                len,
                spread: spec.spread,
                perm: (a, b),
                total_weight: 0.0,
                units_on: BTreeMap::new(),
                weight_on: BTreeMap::new(),
                cold_on: Vec::new(),
                order: (0, 0),
                weights: Arc::from([]),
                range_hint: Arc::from([]),
                index_hint: Arc::from([]),
            };
            class.range_hint = hint_table(
                &class.ranges,
                |r| r.0,
                class.ranges.last().map_or(0, |r| r.0 + r.1),
            );
            class.index_hint = hint_table(&class.prefix, |&p| p, len);
            class.order = class.compute_coldest_order();
            if let Spread::Zipf { s } = class.spread {
                class.weights = (0..len).map(|i| class.zipf_weight(i, s)).collect();
            }
            class.total_weight = (0..len).map(|i| class.weight(i)).sum();
            self.classes.push(class);
        }
        self.block_moves
            .resize((total as usize).div_ceil(MOVE_BLOCK), 0);
        // Room is counted in units: a unit takes all of its `grain` pages.
        let pages = page_size.nr_pages().0 * u64::from(grain);
        let (mut order, mut next) = (Vec::new(), Vec::new());
        let mut i = 0u32;
        while i < units {
            order.clear();
            place(i, &mut order);
            let Some((node, room)) = order.iter().find_map(|n| {
                let free = self.nodes.get(n).map_or(0, |m| m.free().0);
                (free >= pages).then_some((*n, free / pages))
            }) else {
                return Err(AllocError::NoRoom {
                    region: name.to_string(),
                    pages: u64::from(units - i) * pages,
                });
            };
            // The units after `i` with the same order go where it goes while that node has
            // room: placing on it takes room from no node before it in the order.
            let mut run = 1u32;
            while u64::from(run) < room && i + run < units {
                next.clear();
                place(i + run, &mut next);
                if next != order {
                    break;
                }
                run += 1;
            }
            self.put_run(UnitId(first + i), run, node);
            i += run;
        }
        Ok(rid)
    }

    /// Places the `n` units from `u0` on, all unplaced and of one region, on `node` (no
    /// capacity check: callers checked): each a slot, and the node's usage and each class's
    /// counts updated once per run of units of one class range rather than once per unit
    /// (placing a 64 GiB region at start unit by unit was most of a short configuration's
    /// time).
    fn put_run(&mut self, u0: UnitId, n: u32, node: NodeId) {
        let pages = self.unit_pages(u0);
        let end = u0.0 + n;
        for u in (u0.0..end).map(UnitId) {
            let slot = self.take_slot(node, u);
            let place = &mut self.unit_place[u.idx()];
            place.slot = slot;
            // Node ids are < 64 (topology limit), so they fit a byte.
            #[allow(clippy::cast_possible_truncation)]
            {
                place.node = node.0 as u8;
            }
            self.bump_block(u);
        }
        if let Some(m) = self.nodes.get_mut(&node) {
            m.used.0 += pages * u64::from(n);
        }
        let mut u = u0.0;
        while u < end {
            let class = &mut self.classes[usize::from(self.unit_place[u as usize].class)];
            let Some((idx, range_end)) = class.range_of(UnitId(u)) else {
                // Outside every range of its class (not made by `map_region`): counted, with no
                // weight and no cold position.
                *class.units_on.entry(node).or_default() += 1;
                *class.weight_on.entry(node).or_default() += 0.0;
                u += 1;
                continue;
            };
            let len = range_end.min(end) - u;
            *class.units_on.entry(node).or_default() += u64::from(len);
            // Added one unit at a time, in unit order: the same sum whatever the runs.
            let mut w = class.weight_on.get(&node).copied().unwrap_or(0.0);
            for j in 0..len {
                w += class.weight(idx + j);
            }
            class.weight_on.insert(node, w);
            if class.tracks_cold_on(node) {
                for j in 0..len {
                    let k = class.cold_position(idx + j);
                    class.set_cold_on(node, k, true);
                }
            }
            u += len;
        }
    }

    fn bump_block(&mut self, u: UnitId) {
        let b = &mut self.block_moves[u.idx() / MOVE_BLOCK];
        *b = b.wrapping_add(1);
    }

    /// How many times a unit of the [`MOVE_BLOCK`]-unit block `b` (units `b * MOVE_BLOCK ..`)
    /// was placed or taken, modulo 2^32: equal at two times, no unit of the block moved
    /// between them (short of exactly 2^32 moves).
    #[must_use]
    pub fn block_moves(&self, b: usize) -> u32 {
        self.block_moves.get(b).copied().unwrap_or(0)
    }

    /// Places an unplaced unit on `node` (no capacity check: callers checked).
    fn put(&mut self, u: UnitId, node: NodeId) {
        self.put_run(u, 1, node);
    }

    /// Starts keeping class `c`'s units on `node` by cold-order position
    /// ([`Class::next_cold_on`]), if not kept yet: one pass over the class's units, then
    /// every placement and removal keeps them.
    pub fn track_cold_on(&mut self, c: usize, node: NodeId) {
        let Some(class) = self.classes.get(c) else {
            return;
        };
        if class.tracks_cold_on(node) {
            return;
        }
        let bits = self.cold_bits_now(class, node);
        let class = &mut self.classes[c];
        let n = usize::from(node.0);
        if class.cold_on.len() <= n {
            class.cold_on.resize(n + 1, Vec::new());
        }
        class.cold_on[n] = bits;
    }

    /// `class`'s units on `node` now, as bits by cold-order position (the layout of a kept
    /// entry of [`Class::next_cold_on`]'s bits; at least one word, which marks it kept).
    fn cold_bits_now(&self, class: &Class, node: NodeId) -> Vec<u64> {
        let mut bits = vec![0u64; (class.len as usize).div_ceil(64).max(1)];
        for (i, u) in class.iter_units() {
            if self.node_of(u) == node {
                let k = class.cold_position(i) as usize;
                bits[k / 64] |= 1 << (k % 64);
            }
        }
        bits
    }

    /// Removes a placed unit from its node.
    fn take(&mut self, u: UnitId) -> NodeId {
        let node = self.node_of(u);
        let pages = self.unit_pages(u);
        let slot = self.unit_place[u.idx()].slot;
        self.release_slot(node, slot);
        self.unit_place[u.idx()].slot = FREE_SLOT;
        self.bump_block(u);
        if let Some(m) = self.nodes.get_mut(&node) {
            m.used.0 -= pages;
        }
        let c = self.class_of(u);
        let class = &mut self.classes[usize::from(c.0)];
        let tracked = class.tracks_cold_on(node);
        // The unit's index, looked up once for its weight and its cold bit, and only if
        // either needs it (a uniform class's weight is 1).
        let idx = (tracked || matches!(class.spread, Spread::Zipf { .. }))
            .then(|| class.index_of(u))
            .flatten();
        let w = match class.spread {
            Spread::Uniform => 1.0,
            Spread::Zipf { .. } => idx.map_or(0.0, |i| class.weight(i)),
        };
        if let (true, Some(i)) = (tracked, idx) {
            let k = class.cold_position(i);
            class.set_cold_on(node, k, false);
        }
        if let Some(n) = class.units_on.get_mut(&node) {
            *n -= 1;
        }
        if let Some(x) = class.weight_on.get_mut(&node) {
            *x -= w;
        }
        node
    }

    /// Moves a unit to `to`, as a migration would. Fails with `NoMem` when `to` lacks room,
    /// `Fault` when the region is unmapped. Counts a mempolicy violation if `to` is outside
    /// the region's BIND / PREFERRED_MANY mask (the caller should never let that happen).
    pub fn migrate(&mut self, u: UnitId, to: NodeId) -> Result<(), MoveError> {
        self.migrate_as(u, to, true)
    }

    /// Moves a unit for the kernel's reclaim: demotion ignores mempolicy
    /// (mm/vmscan.c `demote_folio_list()` allocates from the lower tiers' mask without
    /// looking at the VMA's policy), so such moves are not counted as violations.
    pub fn migrate_reclaim(&mut self, u: UnitId, to: NodeId) -> Result<(), MoveError> {
        self.migrate_as(u, to, false)
    }

    fn migrate_as(&mut self, u: UnitId, to: NodeId, policy_applies: bool) -> Result<(), MoveError> {
        let region = self.region_of(u);
        if !region.alive {
            return Err(MoveError::Fault);
        }
        let pol = region.policy;
        let pages = region.unit_pages();
        let from = self.node_of(u);
        if from == to {
            return Ok(());
        }
        if self.nodes.get(&to).is_none_or(|m| m.free().0 < pages) {
            return Err(MoveError::NoMem);
        }
        if policy_applies && !pol.allows(to) {
            self.stats.mempolicy_violations += 1;
        }
        self.take(u);
        self.put(u, to);
        self.stats.pages_migrated += pages;
        Ok(())
    }

    /// Unmaps a region: its units leave their nodes.
    pub fn unmap_region(&mut self, r: RegionId) {
        let (first, units, alive) = {
            let reg = &self.regions[r.0 as usize];
            (reg.first_unit, reg.units, reg.alive)
        };
        if !alive {
            return;
        }
        for u in first..first + units {
            self.take(UnitId(u));
        }
        self.regions[r.0 as usize].alive = false;
    }

    /// Base pages of `region` on each node.
    #[must_use]
    pub fn region_placement(&self, r: RegionId) -> BTreeMap<NodeId, Pages> {
        let reg = &self.regions[r.0 as usize];
        let mut out = BTreeMap::new();
        if !reg.alive {
            return out;
        }
        for c in self.classes.iter().filter(|c| c.region == r) {
            for (n, k) in &c.units_on {
                out.entry(*n).or_insert(Pages(0)).0 += k * reg.unit_pages();
            }
        }
        out
    }

    /// The block summaries of node `n` agree with its slots: each block counts its occupied
    /// slots, and one not marked mixed holds units of its class only.
    fn check_blocks(&self, n: NodeId, m: &NodeMem) -> Option<String> {
        if m.blocks.len() != m.slots.len().div_ceil(SLOT_BLOCK) {
            return Some(format!(
                "{n}: {} slot blocks for {} slots",
                m.blocks.len(),
                m.slots.len()
            ));
        }
        for (w, chunk) in m.slots.chunks(64).enumerate() {
            let want = chunk.iter().enumerate().fold(0u64, |bits, (i, &u)| {
                bits | (u64::from(u != FREE_SLOT) << i)
            });
            let have = m.occupied.get(w).copied().unwrap_or(0);
            if have != want {
                return Some(format!(
                    "{n}: occupancy bits {have:#x} of slots {} on, for units {want:#x}",
                    w * 64
                ));
            }
        }
        if m.occupied.len() > m.slots.len().div_ceil(64) {
            return Some(format!("{n}: occupancy bits past the last slot"));
        }
        for (bi, (b, chunk)) in m.blocks.iter().zip(m.slots.chunks(SLOT_BLOCK)).enumerate() {
            let taken = chunk.iter().filter(|&&u| u != FREE_SLOT).count();
            if taken != usize::from(b.occupied) {
                return Some(format!(
                    "{n}: slot block {bi} counts {} occupied slots, holds {taken}",
                    b.occupied
                ));
            }
            if !b.mixed {
                if let Some(&u) = chunk
                    .iter()
                    .find(|&&u| u != FREE_SLOT && self.unit_place[u as usize].class != b.class)
                {
                    return Some(format!(
                        "{n}: slot block {bi} claims class {} but holds unit {u} of class {}",
                        b.class, self.unit_place[u as usize].class
                    ));
                }
            }
        }
        None
    }

    /// Checks the invariants: every unit of a live region is on exactly one node, node usage
    /// equals the units on it plus reservations, no node is over capacity. Returns the first
    /// violation found.
    #[must_use]
    pub fn check(&self) -> Option<String> {
        let mut used: BTreeMap<NodeId, u64> =
            self.nodes.iter().map(|(n, m)| (*n, m.reserved.0)).collect();
        // Per node byte (a unit's node is stored as one): its memory and the units counted
        // on it, so the walk over every unit does no map lookups.
        let by_byte: Vec<Option<&NodeMem>> = (0..=u8::MAX)
            .map(|b| self.nodes.get(&NodeId(u16::from(b))))
            .collect();
        let mut units_on = [0u64; 256];
        for r in self.regions.iter().filter(|r| r.alive) {
            let range = r.first_unit as usize..(r.first_unit + r.units) as usize;
            let mut count = [0u64; 256];
            for (i, &UnitPlace { slot, node: b, .. }) in range.clone().zip(&self.unit_place[range])
            {
                let u = UnitId(u32::try_from(i).unwrap_or(u32::MAX));
                let Some(m) = by_byte[usize::from(b)] else {
                    return Some(format!("unit {} of {} is on no node", u.0, r.name));
                };
                if m.unit_in(slot) != Some(u) {
                    return Some(format!("unit {} of {} does not own its slot", u.0, r.name));
                }
                count[usize::from(b)] += 1;
            }
            for (b, c) in count.iter().enumerate() {
                units_on[b] += c * r.unit_pages();
            }
        }
        for (b, pages) in units_on.iter().enumerate() {
            if *pages > 0 {
                // Only bytes with a node can have a count (checked above).
                let n = NodeId(u16::try_from(b).unwrap_or(u16::MAX));
                *used.entry(n).or_default() += pages;
            }
        }
        for (n, m) in &self.nodes {
            if used[n] != m.used.0 {
                return Some(format!(
                    "{n}: usage {} but units add up to {}",
                    m.used.0, used[n]
                ));
            }
            if m.used > m.capacity {
                return Some(format!("{n}: {} pages used of {}", m.used.0, m.capacity.0));
            }
            if let Some(msg) = self.check_blocks(*n, m) {
                return Some(msg);
            }
        }
        let per_class: u64 = self
            .classes
            .iter()
            .map(|c| c.units_on.values().sum::<u64>())
            .sum();
        let live: u64 = self
            .regions
            .iter()
            .filter(|r| r.alive)
            .map(|r| u64::from(r.units))
            .sum();
        if per_class != live {
            return Some(format!(
                "classes count {per_class} units, live regions {live}"
            ));
        }
        self.check_cold_bits()
    }

    /// Every kept bit of [`Class::next_cold_on`] against the units' nodes.
    fn check_cold_bits(&self) -> Option<String> {
        for class in &self.classes {
            let alive = self.regions[class.region.0 as usize].alive;
            for (n, bits) in class.cold_on.iter().enumerate() {
                if bits.is_empty() {
                    continue;
                }
                let node = NodeId(u16::try_from(n).unwrap_or(u16::MAX));
                // An unmapped region's units were taken, their bits cleared.
                let want = if alive {
                    self.cold_bits_now(class, node)
                } else {
                    vec![0; bits.len()]
                };
                if *bits != want {
                    return Some(format!(
                        "{}: the cold-order bits of {node} are not its units there",
                        class.name
                    ));
                }
            }
        }
        None
    }
}

/// A unit's access weight within its class (1 for uniform classes, without a lookup).
fn unit_weight(class: &Class, u: UnitId) -> f64 {
    match class.spread {
        Spread::Uniform => 1.0,
        Spread::Zipf { .. } => class.index_of(u).map_or(0.0, |i| class.weight(i)),
    }
}

/// Units in a region of `bytes` with `size` pages.
#[must_use]
pub fn units_for(bytes: Bytes, size: PageSize) -> u64 {
    let per = size.nr_pages().bytes().0;
    bytes.0.div_ceil(per)
}

/// The head vpn alignment a region needs (huge regions start on a 2 MiB boundary).
#[must_use]
pub fn align_vpn(vpn: u64, size: PageSize) -> u64 {
    // Every size's unit is a power of two of base pages.
    vpn.next_multiple_of(size.nr_pages().0)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use tierd_engine::policy::PolicyMode;
    use tierd_engine::topology::two_tier;
    use tierd_engine::types::NodeMask;

    use super::*;

    fn machine() -> Memory {
        Memory::new(two_tier(Bytes::mib(64), Bytes::mib(256)))
    }

    proptest! {
        /// The hinted search counts the ranges that start by a unit exactly as a search over
        /// all of them does: ranges of one unit or of many blocks, gaps of none to several
        /// blocks, units before, inside, between and after them.
        #[test]
        fn the_range_hint_finds_what_a_full_search_finds(
            first in 0u32..20_000,
            shape in prop::collection::vec((0u32..10_000, 1u32..10_000), 0..64),
            probes in prop::collection::vec(0u32..2_000_000, 1..64),
        ) {
            let mut ranges = Vec::new();
            let mut at = first;
            for (gap, len) in shape {
                at += gap;
                ranges.push((at, len));
                at += len;
            }
            let end = ranges.last().map_or(0, |r| r.0 + r.1);
            let hint = hint_table(&ranges, |r| r.0, end);
            let probes: Vec<u32> = probes
                .into_iter()
                .chain(ranges.iter().flat_map(|&(s, l)| [s, s + l - 1, s + l]))
                .collect();
            for &u in &probes {
                prop_assert_eq!(
                    count_by(&ranges, |r| r.0, &hint, u),
                    ranges.partition_point(|&(s, _)| s <= u),
                    "unit {}", u
                );
            }
            // The same over the ranges' prefix sums (class index -> range).
            let mut prefix = Vec::new();
            let mut acc = 0u32;
            for &(_, l) in &ranges {
                prefix.push(acc);
                acc += l;
            }
            let hint = hint_table(&prefix, |&p| p, acc);
            for &i in probes.iter().filter(|&&i| i < acc) {
                prop_assert_eq!(
                    count_by(&prefix, |&p| p, &hint, i),
                    prefix.partition_point(|&p| p <= i),
                    "index {}", i
                );
            }
        }
    }

    fn region(m: &mut Memory, units: u32, policy: MemPolicy, spread: Spread) -> RegionId {
        m.map_region(
            "p.buf",
            SpaceId(1),
            CgroupId::ROOT,
            Vpn(1 << 20),
            units,
            PageSize::Base,
            policy,
            vec![ClassSpec {
                name: "p.buf.hot".into(),
                ranges: vec![(0, units / 4)],
                spread,
            }],
            42,
            |_, o| o.push(NodeId(1)),
        )
        .unwrap()
    }

    #[test]
    fn mapping_places_units_and_creates_the_remainder_class() {
        let mut m = machine();
        let r = region(&mut m, 1000, MemPolicy::DEFAULT, Spread::Uniform);
        assert_eq!(m.classes().len(), 2);
        assert_eq!(m.classes()[1].name, "p.buf");
        assert_eq!(m.classes()[0].len, 250);
        assert_eq!(m.region_placement(r)[&NodeId(1)], Pages(1000));
        assert_eq!(m.node(NodeId(1)).unwrap().used, Pages(1000));
        assert!(m.check().is_none());
        assert_eq!(m.unit_at(SpaceId(1), Vpn((1 << 20) + 7)), Some(UnitId(7)));
        assert_eq!(m.unit_at(SpaceId(1), Vpn((1 << 20) + 1000)), None);
    }

    #[test]
    fn a_grained_region_larger_than_its_first_node_spills_whole_units() {
        // 64 MiB of node 0 (16384 pages) and a region of 5000 units of 8 pages (40000 pages)
        // preferring node 0: node 0 takes 2048 units, all its room, and node 1 the rest.
        let mut m = machine();
        let r = m
            .map_region_grained(
                "p.buf",
                SpaceId(1),
                CgroupId::ROOT,
                Vpn(1 << 20),
                5000,
                (PageSize::Base, 8),
                MemPolicy::DEFAULT,
                Vec::new(),
                42,
                |_, o| o.extend([NodeId(0), NodeId(1)]),
            )
            .unwrap();
        let placed = m.region_placement(r);
        assert_eq!(placed[&NodeId(0)], Pages(16_384));
        assert_eq!(placed[&NodeId(1)], Pages(40_000 - 16_384));
        assert_eq!(m.grain(), 8);
        assert!(m.check().is_none(), "{:?}", m.check());
    }

    #[test]
    fn migration_updates_counts_weights_and_slots() {
        let mut m = machine();
        region(&mut m, 100, MemPolicy::DEFAULT, Spread::Uniform);
        m.migrate(UnitId(3), NodeId(0)).unwrap();
        let c = &m.classes()[0];
        assert_eq!(c.units_on[&NodeId(0)], 1);
        assert!((c.fraction_on(NodeId(0)) - 1.0 / 25.0).abs() < 1e-12);
        // The freed slot on node 1 is reused first (LIFO free list).
        let freed = 3;
        m.migrate(UnitId(3), NodeId(1)).unwrap();
        assert_eq!(m.slot_of(UnitId(3)), freed);
        assert!(m.check().is_none());
        assert_eq!(m.stats.pages_migrated, 2);
    }

    #[test]
    fn a_full_node_refuses_and_masks_are_counted() {
        let mut m = machine();
        // 64 MiB fast node = 16384 pages.
        let bind = MemPolicy::new(PolicyMode::Bind, NodeMask::from_nodes([NodeId(1)]));
        region(&mut m, 20_000, bind, Spread::Uniform);
        let mut moved = 0;
        for u in 0..20_000 {
            if m.migrate(UnitId(u), NodeId(0)).is_ok() {
                moved += 1;
            }
        }
        assert_eq!(moved, 16_384);
        assert_eq!(m.migrate(UnitId(19_999), NodeId(0)), Err(MoveError::NoMem));
        assert_eq!(m.stats.mempolicy_violations, 16_384);
        assert!(m.check().is_none());
    }

    #[test]
    fn zipf_ranks_are_a_permutation_and_invert() {
        let mut m = machine();
        region(&mut m, 1000, MemPolicy::DEFAULT, Spread::Zipf { s: 1.0 });
        let c = &m.classes()[0];
        let mut ranks: Vec<u64> = (0..c.len).map(|i| c.rank(i)).collect();
        for i in 0..c.len {
            assert_eq!(c.index_of_rank(c.rank(i)), i);
        }
        // The coldest-first cursor visits ranks len-1, len-2, ..., 0.
        let (mut idx, step) = c.coldest_order();
        for k in 0..u64::from(c.len) {
            assert_eq!(c.rank(idx), u64::from(c.len) - 1 - k);
            idx = c.next_in_order(idx, step);
        }
        ranks.sort_unstable();
        assert_eq!(ranks, (0..u64::from(c.len)).collect::<Vec<_>>());
        let h: f64 = (1..=250).map(|r| 1.0 / f64::from(r)).sum();
        assert!((c.total_weight - h).abs() < 1e-9);
    }

    /// The table behind [`Class::weight`] holds `(rank + 1)^-s` of every unit, bit for bit
    /// (outputs must not move by a rounding), and the machine's copies share it.
    #[test]
    fn zipf_weights_come_from_a_shared_table_of_the_exact_powers() {
        let mut m = machine();
        region(&mut m, 1000, MemPolicy::DEFAULT, Spread::Zipf { s: 0.6 });
        let c = &m.classes()[0];
        assert_eq!(c.weights.len(), c.len as usize);
        for i in 0..c.len {
            let exact = ((c.rank(i) + 1) as f64).powf(-0.6);
            assert_eq!(c.weight(i).to_bits(), exact.to_bits(), "{i}");
        }
        let copy = m.clone();
        assert!(Arc::ptr_eq(&copy.classes()[0].weights, &c.weights));
        // A uniform class needs no table.
        let mut u = machine();
        region(&mut u, 1000, MemPolicy::DEFAULT, Spread::Uniform);
        assert!(u.classes()[0].weights.is_empty());
        assert_eq!(u.classes()[0].weight(7), 1.0);
    }

    #[test]
    fn cold_positions_invert_the_coldest_order_and_give_the_weights() {
        for (units, spread) in [
            (1000, Spread::Zipf { s: 1.0 }),
            (4 * 997, Spread::Zipf { s: 0.6 }),
            (4 * 1024, Spread::Zipf { s: 0.8 }),
            (1000, Spread::Uniform),
            (4, Spread::Zipf { s: 1.0 }),
        ] {
            let mut m = machine();
            region(&mut m, units, MemPolicy::DEFAULT, spread);
            let c = &m.classes()[0];
            let (mut idx, step) = c.coldest_order();
            for k in 0..c.len {
                assert_eq!(c.cold_position(idx), k, "{units} units, {spread:?}");
                assert_eq!(c.cold_index(k), idx, "{units} units, {spread:?}");
                // The walk's weight from the rank is the table's, bit for bit.
                assert_eq!(
                    c.cold_weight(k).to_bits(),
                    c.weight(idx).to_bits(),
                    "{units} units, {spread:?}, position {k}"
                );
                idx = c.next_in_order(idx, step);
            }
        }
    }

    /// The cold-order positions of class 0's units on `node`, in order.
    fn positions_on(m: &Memory, node: NodeId) -> Vec<u32> {
        let c = &m.classes()[0];
        let mut ks: Vec<u32> = c
            .iter_units()
            .filter(|&(_, u)| m.node_of(u) == node)
            .map(|(i, _)| c.cold_position(i))
            .collect();
        ks.sort_unstable();
        ks
    }

    /// The positions [`Class::next_cold_on`] walks through for `node`, from 0.
    fn walked_on(m: &Memory, node: NodeId) -> Vec<u32> {
        let c = &m.classes()[0];
        std::iter::successors(c.next_cold_on(node, 0), |&k| c.next_cold_on(node, k + 1)).collect()
    }

    /// Every hint agrees with the slot table.
    fn hints_agree(m: &Memory, node: NodeId) {
        let n = m.node(node).unwrap();
        for slot in 0..n.slots() {
            match n.slot_hint(slot) {
                SlotHint::Free => assert_eq!(n.unit_in(slot), None, "slot {slot}"),
                SlotHint::Class(c) => {
                    let u = n.unit_in(slot).expect("a full block's slot holds a unit");
                    assert_eq!(m.class_of(u), c, "slot {slot}");
                }
                SlotHint::Unknown => {}
            }
        }
    }

    #[test]
    fn slot_hints_follow_the_slots_through_migrations() {
        let mut m = machine();
        // 3000 units on node 1 in slot order; units 0..750 are the hot class.
        region(&mut m, 3000, MemPolicy::DEFAULT, Spread::Uniform);
        let n1 = NodeId(1);
        let hint = |m: &Memory, slot| m.node(n1).unwrap().slot_hint(slot);
        let hot = m.class_of(UnitId(0));
        let cold = m.class_of(UnitId(2999));
        assert_ne!(hot, cold);
        // Block 0 all hot, block 1 both classes, block 2 all cold, block 5 short (the last):
        // cold in its slots, free past them.
        assert_eq!(hint(&m, 0), SlotHint::Class(hot));
        assert_eq!(hint(&m, 600), SlotHint::Unknown);
        assert_eq!(hint(&m, 1100), SlotHint::Class(cold));
        assert_eq!(hint(&m, 2990), SlotHint::Class(cold));
        assert_eq!(hint(&m, 3050), SlotHint::Free);
        // Empty block 2: free, without reading a slot.
        for u in 1024..1536 {
            m.migrate(UnitId(u), NodeId(0)).unwrap();
        }
        assert_eq!(hint(&m, 1100), SlotHint::Free);
        // One unit leaves block 0: its slot is free, the others still hot. It comes back into
        // the slot it left (LIFO free list).
        m.migrate(UnitId(0), NodeId(0)).unwrap();
        assert_eq!(hint(&m, 0), SlotHint::Free);
        assert_eq!(hint(&m, 1), SlotHint::Class(hot));
        m.migrate(UnitId(0), n1).unwrap();
        assert_eq!(m.slot_of(UnitId(0)), 0);
        assert_eq!(hint(&m, 0), SlotHint::Class(hot));
        // A hot unit into the freed cold block and cold units after it: mixed even when full.
        m.migrate(UnitId(1), NodeId(0)).unwrap();
        m.migrate(UnitId(1), n1).unwrap(); // slot 1 again
        m.migrate(UnitId(5), NodeId(0)).unwrap();
        for u in 1024..1536 {
            m.migrate(UnitId(u), n1).unwrap();
        }
        m.migrate(UnitId(5), n1).unwrap();
        hints_agree(&m, n1);
        assert!(m.check().is_none(), "{:?}", m.check());
    }

    #[test]
    fn a_split_thp_keeps_its_pages_and_counts_as_base_folios() {
        let mut m = machine();
        let r = m
            .map_region(
                "p.thp",
                SpaceId(1),
                CgroupId::ROOT,
                Vpn(1 << 20),
                8,
                PageSize::Huge2M,
                MemPolicy::DEFAULT,
                vec![],
                1,
                |_, o| o.push(NodeId(1)),
            )
            .unwrap();
        let u = UnitId(3);
        assert!(m.is_thp(u));
        assert_eq!(m.folio_pages(u), 512);
        assert!(m.split_thp(u));
        assert!(!m.split_thp(u), "a split THP is split once");
        assert!(!m.is_thp(u));
        assert_eq!((m.folio_pages(u), m.unit_pages(u)), (1, 512));
        assert_eq!(m.split_count(), 1);
        m.migrate(u, NodeId(0)).unwrap();
        assert_eq!(m.node(NodeId(0)).unwrap().used, Pages(512));
        assert_eq!(m.region_placement(r)[&NodeId(1)], Pages(7 * 512));
        assert!(m.check().is_none());
        // A copy keeps the split (each configuration of a comparison starts from a copy).
        let mut c = machine();
        c.clone_from(&m);
        assert!(!c.is_thp(u) && c.is_thp(UnitId(2)));
    }

    proptest! {
        /// Once tracked, a class's units on a node by cold position are exactly those there,
        /// whatever moves come before and after tracking starts: the walk of
        /// [`Class::next_cold_on`] visits every position whose unit is on the node, in
        /// order, and no other.
        #[test]
        fn the_cold_bits_are_the_units_on_each_node(
            units in prop_oneof![Just(4000u32), Just(4 * 997), 1u32..300],
            uniform in any::<bool>(),
            ops in proptest::collection::vec((0u32..4000, 0u16..2, 0u8..4), 0..300),
        ) {
            let spread = if uniform { Spread::Uniform } else { Spread::Zipf { s: 0.9 } };
            let mut m = machine();
            region(&mut m, units, MemPolicy::DEFAULT, spread);
            for (u, n, track) in ops {
                let _ = m.migrate(UnitId(u % units), NodeId(n));
                if track == 0 {
                    m.track_cold_on(0, NodeId(n));
                }
                for node in [NodeId(0), NodeId(1)] {
                    if m.classes()[0].tracks_cold_on(node) {
                        prop_assert_eq!(walked_on(&m, node), positions_on(&m, node), "node {:?}", node);
                    } else {
                        prop_assert_eq!(m.classes()[0].next_cold_on(node, 0), None);
                    }
                }
                prop_assert!(m.check().is_none(), "{:?}", m.check());
            }
        }

        /// Placing a region in runs of units ([`Memory::put_run`]) leaves the machine as
        /// placing it one unit at a time ([`Memory::put`]) does, to the last bit of each
        /// class's weight per node: hot and cold ranges of any shape, uniform or Zipf, a
        /// first node that fills up mid-region, node orders that change from unit to unit.
        #[test]
        fn placing_in_runs_is_placing_unit_by_unit(
            units in 1u32..6000,
            before in prop_oneof![Just(0u32), 10_000u32..16_384],
            shape in prop::collection::vec((0u32..400, 1u32..900), 0..8),
            zipf in any::<bool>(),
            flip_every in 0u32..700,
        ) {
            let place = |m: &mut Memory, singles: bool| {
                let spread = if zipf { Spread::Zipf { s: 0.8 } } else { Spread::Uniform };
                // Pages already on the fast node (64 MiB: 16,384), so that the region's first
                // node fills part way through, or not at all.
                if before > 0 {
                    m.map_region("pre", SpaceId(1), CgroupId::ROOT, Vpn(1 << 30), before,
                        PageSize::Base, MemPolicy::DEFAULT, Vec::new(), 3, |_, o| o.push(NodeId(0)))
                        .unwrap();
                }
                let mut ranges = Vec::new();
                let mut at = 0u32;
                for &(gap, len) in &shape {
                    at += gap;
                    if at >= units {
                        break;
                    }
                    ranges.push((at, len.min(units - at)));
                    at += len;
                }
                let classes = vec![ClassSpec { name: "r.hot".into(), ranges, spread }];
                m.map_region("r", SpaceId(1), CgroupId::ROOT, Vpn(0), units, PageSize::Base,
                    MemPolicy::DEFAULT, classes, 7, |i, o| {
                        let flipped = flip_every > 0 && (i / flip_every) % 2 == 1;
                        if flipped {
                            o.extend([NodeId(1), NodeId(0)]);
                        } else {
                            o.extend([NodeId(0), NodeId(1)]);
                        }
                        // The same order with a repeat at its end, every other unit: the
                        // first node with room is the same, but no run is longer than one.
                        if singles && i % 2 == 1 {
                            o.push(o[1]);
                        }
                    })
            };
            let (mut runs, mut singles) = (machine(), machine());
            let a = place(&mut runs, false);
            let b = place(&mut singles, true);
            prop_assert_eq!(a.is_ok(), b.is_ok());
            prop_assert_eq!(&runs.unit_place, &singles.unit_place);
            prop_assert_eq!(&runs.block_moves, &singles.block_moves);
            for (n, m) in &runs.nodes {
                let o = &singles.nodes[n];
                prop_assert_eq!(m.used, o.used);
                prop_assert_eq!(&m.slots, &o.slots);
                prop_assert_eq!(&m.free_slots, &o.free_slots);
                for (x, y) in m.blocks.iter().zip(&o.blocks) {
                    prop_assert_eq!((x.occupied, x.class, x.mixed), (y.occupied, y.class, y.mixed));
                }
            }
            prop_assert_eq!(runs.classes.len(), singles.classes.len());
            for (x, y) in runs.classes.iter().zip(&singles.classes) {
                prop_assert_eq!(&x.units_on, &y.units_on);
                let bits = |c: &Class| c.weight_on.iter().map(|(n, w)| (*n, w.to_bits())).collect::<Vec<_>>();
                prop_assert_eq!(bits(x), bits(y));
                prop_assert_eq!(&x.cold_on, &y.cold_on);
            }
            prop_assert!(runs.check().is_none(), "{:?}", runs.check());
        }

        /// Any sequence of migrations and unmaps keeps every invariant: each unit on one
        /// node, usage equal to the units placed, no node over capacity.
        #[test]
        fn random_moves_keep_the_invariants(moves in proptest::collection::vec((0u32..3000, 0u16..2), 0..400), unmap in any::<bool>()) {
            let mut m = machine();
            let r = region(&mut m, 3000, MemPolicy::DEFAULT, Spread::Zipf { s: 0.9 });
            for (u, n) in moves {
                let _ = m.migrate(UnitId(u), NodeId(n));
                prop_assert!(m.check().is_none(), "{:?}", m.check());
            }
            hints_agree(&m, NodeId(1));
            let total: f64 = m.classes().iter().map(|c| c.weight_on.values().sum::<f64>()).sum();
            let expect: f64 = m.classes().iter().map(|c| c.total_weight).sum();
            prop_assert!((total - expect).abs() < 1e-6);
            if unmap {
                m.unmap_region(r);
                prop_assert_eq!(m.node(NodeId(0)).unwrap().used, Pages(0));
                prop_assert!(m.check().is_none());
            }
        }
    }
}
