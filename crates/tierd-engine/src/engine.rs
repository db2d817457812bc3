//! The engine: observations in, a migration plan out, reports back.
//!
//! # One pass (`tick`), every `interval_ms`
//!
//! 1. **Demotion.** For each top-tier node whose free memory is below the low watermark, pick
//!    the coldest pages the engine knows on it (pages of cgroups above their fast-tier share
//!    first) and plan their move to the node's demotion target until the high watermark would
//!    be reached. Never to a node outside a BIND / PREFERRED_MANY nodemask.
//! 2. **Promotion** (the kmigrated model, mm/pghot.c): for each slow node, consume every ready
//!    hotness record (consuming resets it, as `pghot_get_record()` does), then per page:
//!    1. target: default mode the configured node; precise mode the accessing node when it is
//!       top tier, else the configured node;
//!    2. mempolicy: a BIND / PREFERRED_MANY page is never moved outside its mask; in precise
//!       mode an accessing node outside the mask means no move (mm/mempolicy.c
//!       `mpol_misplaced()`, MPOL_F_MORON case); otherwise the nearest allowed top-tier node;
//!       a page under an unknown policy never moves, an interleaved one only with
//!       `move_interleaved` (`MemPolicy::may_move`; demotion obeys the same rule);
//!    3. `kmigrated_should_migrate_memory()`: if the target has plenty of free space
//!       (free > promotion watermark + max(1 GiB, size / 16), kernel/sched/fair.c
//!       `pgdat_free_space_enough()`), promote without the hot test and count
//!       `pgpromote_candidate_nrl`; else adjust the threshold (60 s period), reject pages whose
//!       last access is older than it, thin cgroups above their share, charge
//!       `pgpromote_candidate` and apply the per-node rate limit;
//!    4. group admitted pages by (target node, cgroup) into batches of at most `batch_nr`
//!       folios and [`batch_bytes`] (a larger folio alone).
//!
//!    A page here is a folio (4 KiB, 2 MiB, 1 GiB): every test above charges its full bytes,
//!    and a pass never plans two moves over the same virtual page (see the crate docs,
//!    "Huge pages").
//!
//!    That is the kernel's rule (`threshold = "fixed"`). tierd's default, `relative`,
//!    replaces step 3's free-space bypass and latency threshold: before the pass it sizes a
//!    heat threshold to the room on the fast tier from the histogram of every page's decayed
//!    access count ([`crate::hotness::heat`]), orders the ready pages hottest first, and
//!    admits those at or above it (then the cgroup share, the rate limit and the room test
//!    as above). When promotions are refused for want of room, the demoter makes room from
//!    fast pages `SWAP_MARGIN_BINS` bins colder than that threshold and idle for the
//!    ping-pong window, both per base page: a 2 MiB folio that hardware samples see is
//!    weighed against a 4 KiB page as 512 pages (`heat_weight`,
//!    `DemotionFilter::idle_enough`, [`crate::hotness::heat`] "Folios of several sizes").
//! 3. **Housekeeping**: free idle record chunks, prune the ping-pong history, update gauges.
//!
//! `apply` turns each page's outcome into counters (`pgpromote_success`, failures by errno,
//! `pgdemote_success`, ping-pong) and updates what the engine knows about where pages are.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::backend::OwnerUpdate;
use crate::chunkmap::{SizedPageMap, SparsePageMap};
use crate::config::{AccessingNode, ConfigError, EngineConfig, ThresholdMode};
use crate::hotness::{
    fit_threshold, HeatMap, HotnessMode, HotnessParams, HotnessStore, ReadyPage, Tier,
    DENSITY_BINS, NO_PROMOTION_BIN, SIZE_SHIFT_MAX,
};
use crate::plan::{
    MigrationBatch, MigrationKind, MigrationPlan, MigrationReport, MoveError, MoveOutcome,
    PageResult, PlannedMove, SystemUsage,
};
use crate::policy::{cgroup_promotion_scale, fast_tier_share, OwnerMap};
use crate::ratelimit::{
    mbps_to_pages_per_s, AdaptiveThreshold, SlidingWindowLimiter, PROMOTION_THRESHOLD_WINDOW_MS,
};
use crate::sources::{IdleObservation, Observation, SourceKind};
use crate::stats::{NodeStats, SourceStats, Stats};
use crate::topology::Topology;
use crate::types::{Bytes, CgroupId, Nanos, NodeId, NodeMask, PageKey, PageRef, PageSize};

/// What the demoter knows about a page on a top-tier node.
#[derive(Clone, Copy, Debug)]
struct FastPage {
    node: NodeId,
    size: PageSize,
    /// The last access came from a hardware sample: a count of accesses over all the folio's
    /// pages, so a folio of `n` pages is sighted `n` times as often as one of them, and the
    /// demoter weighs its idleness per base page (`DemotionFilter::idle_enough`). Other
    /// sightings (a fault, an accessed bit, a DAMON region, an idle fact, a move) are of the
    /// folio as a whole, and its idleness is the clock's.
    sampled: bool,
    /// Last access the engine knows of ([`FastPage::last_access`]).
    last: SplitNanos,
}

/// A time as two 32-bit halves, so that a [`FastPage`] is 4-byte aligned and its
/// `Option` takes 12 bytes, not 16: the fast index holds one per sampled top-tier page
/// (14.7 M in D's tierd rows, in chunks over all 67 M), and a quarter less is 270 MB less
/// there. Exact: the full 64-bit nanoseconds.
#[derive(Clone, Copy, Debug)]
struct SplitNanos([u32; 2]);

impl SplitNanos {
    #[inline]
    fn new(t: Nanos) -> Self {
        // The halves of a u64: each fits.
        #[allow(clippy::cast_possible_truncation)]
        SplitNanos([(t.0 >> 32) as u32, t.0 as u32])
    }

    #[inline]
    fn get(self) -> Nanos {
        Nanos(u64::from(self.0[0]) << 32 | u64::from(self.0[1]))
    }
}

const _: () = assert!(std::mem::size_of::<Option<FastPage>>() == 12);

impl FastPage {
    fn new(node: NodeId, size: PageSize, sampled: bool, last_access: Nanos) -> Self {
        FastPage {
            node,
            size,
            sampled,
            last: SplitNanos::new(last_access),
        }
    }

    /// Last access the engine knows of.
    #[inline]
    fn last_access(&self) -> Nanos {
        self.last.get()
    }
}

/// The demoter's index of top-tier pages, with its size in base pages kept as entries come
/// and go (summing the map on every pass was the engine's hottest loop in the simulator's
/// profile). Chunked by PMD ([`SizedPageMap`]): one lookup per observation, and an accessed-bit
/// scan's observations, which come in address order, walk it sequentially. The demoter's
/// walk for the coldest pages reads it by age ([`AgeIndex`], [`DemotionFilter::coldest`]).
#[derive(Debug, Default)]
struct FastIndex {
    map: SizedPageMap<FastPage>,
    pages: u64,
    /// The same folios by age, for the demoter's walk (off until its first walk).
    ages: AgeIndex,
}

/// Entries the age lists may hold beyond twice the index's before they are rebuilt (small in
/// tests, so that their histories rebuild).
const AGE_REBUILD_SLACK: usize = if cfg!(test) { 16 } else { 4096 };

/// log2 of an age generation's span, ns (~1.07 s).
const AGE_GEN_SHIFT: u32 = 30;

/// The age generation of a last access.
#[inline]
fn age_gen(t: Nanos) -> u64 {
    t.0 >> AGE_GEN_SHIFT
}

/// The fast index's folios by age generation (the last access's second, roughly), so that a
/// demotion pass reads the oldest generations first and stops once the rest cannot hold a
/// page it would take: a pass costs about what it takes, not the whole index (the walk in
/// chunk order read 100-700 k entries a second in D's tierd rows for a few hundred idle
/// pages, and ranked a daemon's whole index once a second in the lab's idle run). MGLRU keeps
/// pages in generations for the same reason (mm/vmscan.c, `lru_gen_folio`).
///
/// A generation's list is an append-only log: a folio is added to a generation's list when
/// it enters it (put in, or a touch moves its last access into a later generation) and is
/// never taken out on a touch or a removal, which keeps a touch to one comparison and, once
/// a generation, a push. An entry is the folio's head alone (16 bytes: with its size it
/// would take 24): it is current while the index holds a folio with that head and its last
/// access in that generation, whatever its size, since that folio was listed there itself
/// when it entered (a head listed for a folio of another size reads as a second listing of
/// it, which the walk takes once). The walk drops the stale entries it reads, and the lists
/// are rebuilt from the index when they hold over twice its entries.
#[derive(Debug, Default)]
struct AgeIndex {
    /// Maintained (the first demotion walk turns it on; engines that never demote pay only a
    /// branch per touch).
    on: bool,
    gens: BTreeMap<u64, Vec<PageKey>>,
    /// Entries in all lists, stale ones included.
    entries: usize,
}

impl AgeIndex {
    #[inline]
    fn push(&mut self, key: PageKey, last_access: Nanos) {
        self.gens.entry(age_gen(last_access)).or_default().push(key);
        self.entries += 1;
    }

    /// The lists from the index's entries alone.
    fn rebuild(&mut self, map: &SizedPageMap<FastPage>) {
        self.gens.clear();
        self.entries = 0;
        for (key, _, f) in map.iter() {
            self.push(key, f.last_access());
        }
    }
}

impl FastIndex {
    /// Puts in the folio `(key, page.size)`; the entries of other folios over its pages (it
    /// was split, collapsed or remapped) go, so that no page counts twice.
    fn insert(&mut self, key: PageKey, page: FastPage) {
        let pages = &mut self.pages;
        *pages += page.size.nr_pages().0;
        let gone = |_, s: PageSize, _| *pages -= s.nr_pages().0;
        if let Some(old) = self.map.insert(key, page.size, page, gone) {
            self.pages -= old.size.nr_pages().0;
        }
        if self.ages.on {
            self.aged(key, page.last_access());
        }
    }

    /// The folio whose head is `key` entered the generation of `last_access`.
    #[inline]
    fn aged(&mut self, key: PageKey, last_access: Nanos) {
        self.ages.push(key, last_access);
        if self.ages.entries > 2 * self.map.len() + AGE_REBUILD_SLACK {
            self.ages.rebuild(&self.map);
        }
    }

    /// Turns the age lists on (built from the index) if they are off.
    fn ages_on(&mut self) {
        if !self.ages.on {
            self.ages.on = true;
            self.ages.rebuild(&self.map);
        }
    }

    /// Records an access to a fast folio: one lookup (this runs per observation), plus the
    /// eviction of the entries of any other folio over its pages.
    #[inline]
    fn touch(&mut self, key: PageKey, node: NodeId, size: PageSize, time: Nanos, sampled: bool) {
        let mut fresh = false;
        let pages = &mut self.pages;
        let f = self.map.get_or_insert_with(
            key,
            size,
            || {
                fresh = true;
                FastPage::new(node, size, sampled, time)
            },
            |_, s, _| *pages -= s.nr_pages().0,
        );
        let entered = if fresh {
            *pages += size.nr_pages().0;
            Some(time)
        } else {
            f.node = node;
            let old = f.last_access();
            if time >= old {
                // The kind of the sighting that sets the last access.
                f.sampled = sampled;
            }
            let last = old.max(time);
            f.last = SplitNanos::new(last);
            (age_gen(last) != age_gen(old)).then_some(last)
        };
        if let (true, Some(t)) = (self.ages.on, entered) {
            self.aged(key, t);
        }
    }

    /// Forgets the folio whose head is `key`.
    #[inline]
    fn remove(&mut self, key: PageKey) {
        if let Some(old) = self.map.remove(key) {
            self.pages -= old.size.nr_pages().0;
        }
    }

    /// Forgets every folio over any page of the folio `(key, size)` (seen on a slow node).
    #[inline]
    fn remove_overlapping(&mut self, key: PageKey, size: PageSize) {
        let pages = &mut self.pages;
        self.map
            .remove_overlapping(key, size, |_, s, _| *pages -= s.nr_pages().0);
    }

    fn retain_spaces_except(&mut self, space: crate::types::SpaceId) {
        self.map.retain(|k, _| k.space != space);
        self.pages = self.map.iter().map(|(_, s, _)| s.nr_pages().0).sum();
    }
}

/// The virtual pages already in this pass's plan, per address space: a folio is planned at
/// most once, and never beside another folio over any of its pages (promotion and demotion
/// alike), whatever the stores and the fast index say.
#[derive(Debug, Default)]
struct Claimed {
    /// Per `(space, vpn >> 9)`: which of the 2 MiB block's 512 virtual pages are claimed.
    /// A bitmap per block rather than an ordered map of ranges: a tick tests and claims a
    /// page per candidate (thousands), and a hash lookup plus a mask is a fraction of two
    /// B-tree walks (8 % of a churning simulated run went there). A 2 MiB page fills one
    /// block, a 1 GiB page 512; a page never straddles blocks unless unaligned, and then it
    /// simply touches two.
    blocks: FxHashMap<(crate::types::SpaceId, u64), [u64; 8]>,
}

impl Claimed {
    /// The blocks `page` covers, each with its first and one-past-last page within it.
    fn spans(page: PageRef) -> impl Iterator<Item = (u64, usize, usize)> {
        let r = page.vpns();
        let (first, last) = (r.start >> 9, r.end.saturating_sub(1) >> 9);
        (first..=last)
            .filter(move |_| r.start < r.end)
            .map(move |b| {
                // The block's end saturates: a page at the top of the 64-bit range (a replayed
                // trace can name one) has a last block whose end is 2^64.
                let base = b << 9;
                let lo = r.start.max(base) - base;
                let hi = r.end.min(base.saturating_add(512)) - base;
                // Both are at most 512, so they fit any usize.
                let (lo, hi) = (
                    usize::try_from(lo).unwrap_or(512),
                    usize::try_from(hi).unwrap_or(512),
                );
                (b, lo, hi)
            })
    }

    /// The words of a block's bitmap that `[lo, hi)` touches, each with its mask.
    fn words(lo: usize, hi: usize) -> impl Iterator<Item = (usize, u64)> {
        (lo / 64..hi.div_ceil(64)).map(move |w| {
            let a = lo.max(w * 64) - w * 64;
            let b = hi.min(w * 64 + 64) - w * 64;
            let mask = if b - a == 64 {
                u64::MAX
            } else {
                ((1u64 << (b - a)) - 1) << a
            };
            (w, mask)
        })
    }

    /// Whether any of `page`'s virtual pages is claimed.
    fn overlaps(&self, page: PageRef) -> bool {
        Self::spans(page).any(|(b, lo, hi)| {
            self.blocks
                .get(&(page.space, b))
                .is_some_and(|bits| Self::words(lo, hi).any(|(w, m)| bits[w] & m != 0))
        })
    }

    /// Claims `page`'s virtual pages (which [`Claimed::overlaps`] said were free).
    fn claim(&mut self, page: PageRef) {
        for (b, lo, hi) in Self::spans(page) {
            let bits = self.blocks.entry((page.space, b)).or_insert([0; 8]);
            for (w, m) in Self::words(lo, hi) {
                bits[w] |= m;
            }
        }
    }

    /// Forgets every claim (a new tick).
    fn clear(&mut self) {
        self.blocks.clear();
    }
}

/// When a page last moved, for ping-pong counting.
///
/// The map holds an entry for every page moved within the ping-pong window. Pages demoted at
/// random over a large buffer are a few percent of the pages they fall among (in D's tierd
/// rows ~1.5 M of 67 M), so in chunks of 512 entries every chunk held a few and the table
/// was the engine's largest (1 GiB of 16-byte entries, 2-4 GB before the stamps below); in
/// 8-page chunks ([`SparsePageMap`]) most chunks are never allocated. Each time is a
/// [`MoveStamp`], whose zero niche keeps the map's `Option<MoveHistory>` at 16 bytes where two
/// `Option<Nanos>` took 32.
#[derive(Clone, Copy, Debug)]
struct MoveHistory {
    promoted_at: MoveStamp,
    demoted_at: MoveStamp,
}

impl Default for MoveHistory {
    fn default() -> Self {
        MoveHistory {
            promoted_at: MoveStamp::NEVER,
            demoted_at: MoveStamp::NEVER,
        }
    }
}

/// A time a page moved, or never: `t + 1`, with `u64::MAX` for never (no clock reaches
/// 584 years of nanoseconds; a later time saturates just below it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MoveStamp(std::num::NonZeroU64);

impl MoveStamp {
    const NEVER: MoveStamp = MoveStamp(std::num::NonZeroU64::MAX);

    fn at(t: Nanos) -> MoveStamp {
        let v = t.0.saturating_add(1).min(u64::MAX - 1);
        MoveStamp(std::num::NonZeroU64::new(v).unwrap_or(std::num::NonZeroU64::MIN))
    }

    fn get(self) -> Option<Nanos> {
        (self != Self::NEVER).then(|| Nanos(self.0.get() - 1))
    }
}

/// A page that failed to move for a reason of its own (pinned or busy: `EBUSY`; shared
/// without `MPOL_MF_MOVE_ALL` or outside the process's cpuset: `EACCES`): it is left out of
/// promotion and demotion planning until `until`, and each further failure doubles the wait,
/// so that an unmovable page does not head the lists and cost a syscall every tick.
#[derive(Clone, Copy, Debug, Default)]
struct Backoff {
    until: Nanos,
    failures: u8,
}

/// Observations or move results read ahead at a time (`Engine::observe`, `Engine::apply`):
/// enough misses in flight to fill the CPU's window, few enough lines to stay in cache.
const WARM_BLOCK: usize = 16;

/// A demotion candidate: (not over its cgroup's fast-tier share, last access, page, size).
/// Ordered as a tuple, which is the demoter's order: the page is unique, so the size never
/// decides.
type DemotionCandidate = (bool, Nanos, PageKey, PageSize);

/// What an observation adds to its folio's heat, as a count of accesses over all the folio's
/// pages (the heat map bins it per base page, `hotness::heat`). A hardware sample is one
/// sampled access: its weight is already that count, and a folio collects its pages'
/// samples. The other sources see a folio as a whole: a hint fault fires once per scan for
/// the whole folio (one PMD), an accessed bit or a DAMON region (whose `nr_accesses` is a
/// frequency per sampled page) says the folio was touched, not how many of its pages were;
/// each of its `n` pages is counted as touched, `weight x n`. That is how a folio ranked
/// against a base page before heats were per base page, and for these sources it stays so:
/// when a folio's bit is set by one of its pages, its pages' true rate is anywhere from
/// `1/n` of the bit's to all of it, and the kernel's LRU takes a young THP as young.
fn heat_weight(obs: &Observation) -> u32 {
    if obs.source.counts_accesses() {
        obs.weight
    } else {
        let n = u32::try_from(obs.page.size.nr_pages().0).unwrap_or(u32::MAX);
        obs.weight.saturating_mul(n)
    }
}

/// How many density bins colder than the promotion threshold a fast folio must be for the
/// demoter to make room with it (relative mode): 3, a factor of eight in accesses per base
/// page. The bins between are "warm" (Memtis's warm set, between its `warm_threshold` and
/// `active_threshold`): neither demoted for room nor counted as room. Without a margin, pages
/// all alike (a sweep) whose heats are a few samples a cooling period spread over several
/// bins on both tiers, the threshold settles between their two tails, and the promoter swaps
/// the lucky slow ones for the unlucky fast ones for nothing. Chosen from that noise, not
/// fitted: two folios of equal rate with Poisson counts (means 2-16) land 2 bins apart with
/// probability 0.2-0.4 %, 3 bins with 2e-5 or less. D under THP at 1/8 scale moved 90.9,
/// 39.2, 10.3 and 2.2 GiB in 120 s with margins 0-3, for the same placement
/// (docs/simulator.md, "tierd under THP"); base-page runs hardly move (their room-making pages
/// are idle for the ping-pong window, their heat long cooled).
const SWAP_MARGIN_BINS: u8 = 3;

/// Which fast pages of one top-tier node a demotion pass may take ([`Engine`]'s
/// `plan_demotion`), and the walk that finds the coldest of them.
struct DemotionFilter {
    node: NodeId,
    now: Nanos,
    /// The idle pass: only pages idle for `idle_after`.
    idle_pass: bool,
    idle_after: Nanos,
    /// Free memory is below the low watermark: anything cold goes.
    below_low: bool,
    /// Otherwise (making room for refused promotions) only pages idle for this long, per
    /// base page (`idle_enough`).
    idle_for: Nanos,
    /// The largest folio size in the fast index: how far the walk must read for room-making,
    /// whose idleness is per base page.
    largest: PageSize,
    /// Relative mode, making room: only pages colder than the promotion threshold.
    heat_threshold: Option<u8>,
    /// Whether each cgroup is over its fast-tier share (`Engine::over_share`).
    over: BTreeMap<CgroupId, bool>,
}

impl DemotionFilter {
    /// The first candidates in order, after `after` if given: the fewest whose folios cover
    /// `head` base pages (all of them if they cover fewer), and whether any were left out.
    /// The head is counted in base pages, not candidates, because the pass needs pages: on a
    /// fast tier of 2 MiB folios a head counted in candidates kept and sorted 512 times
    /// more than the pass can take.
    ///
    /// The fast index is read by age ([`AgeIndex`]), from the oldest generation on. Within a
    /// generation candidates come in no order: each is kept, or passed over at or above the
    /// bound; once the kept ones cover twice `head` pages (inside a generation) or `head`
    /// pages (at its end) they are sorted, rid of duplicates (a folio listed twice) and cut
    /// to the fewest smallest that do, the largest kept becoming the bound. The walk stops
    /// - at a generation that starts after the latest last access the pass admits;
    /// - once a bound is set that no later generation can pass: every later entry was
    ///   accessed later than the bound, and, unless the bound is itself over its cgroup's
    ///   share, a later entry of a cgroup over its share would rank before it, so that case
    ///   stops only when no cgroup is over its share.
    fn coldest(
        &self,
        fast: &mut FastIndex,
        owners: &OwnerMap,
        backoff: &mut SparsePageMap<Backoff>,
        heat: &mut HeatMap,
        head: u64,
        after: Option<DemotionCandidate>,
    ) -> (Vec<DemotionCandidate>, bool) {
        fast.ages_on();
        let latest = self.latest_admitted();
        let any_over = self.over.values().any(|&o| o);
        let FastIndex { map, ages, .. } = fast;
        let mut kept: Vec<DemotionCandidate> = Vec::new();
        let mut kept_pages: u64 = 0;
        // A cut inside a generation is tried again only once `kept` has doubled since the
        // last try: a try can find nothing to cut (a folio late in the order covers most of
        // the pages, so every kept one is still needed), and trying at every push would then
        // be quadratic.
        let mut next_try = 0usize;
        let mut bound: Option<DemotionCandidate> = None;
        // Cuts `kept` to the fewest smallest covering `head` and returns the largest kept, or
        // `None` when all are needed. Duplicates go first: a folio listed twice in one
        // generation (put in again after it left, or its head listed for a folio of another
        // size) would count its pages twice.
        let cut = |kept: &mut Vec<DemotionCandidate>, kept_pages: &mut u64| {
            kept.sort_unstable();
            kept.dedup();
            let b = cut_to_pages(kept, head);
            *kept_pages = kept.iter().map(|c| c.3.nr_pages().0).sum();
            b
        };
        let mut last: Option<(crate::types::SpaceId, bool)> = None;
        let mut stale = 0usize;
        // Generations this walk emptied: only these are removed after it (a retain over every
        // generation would cost a long-running daemon's pass its whole history).
        let mut emptied: Vec<u64> = Vec::new();
        for (&g, list) in &mut ages.gens {
            if latest.is_some_and(|l| i128::from(g << AGE_GEN_SHIFT) > l)
                || bound.is_some_and(|b| !any_over || !b.0)
            {
                break;
            }
            let before = list.len();
            list.retain(|&key| {
                let Some(f) = map.get(key) else {
                    return false;
                };
                if age_gen(f.last_access()) != g {
                    return false;
                }
                let size = f.size;
                if f.node != self.node {
                    return true;
                }
                let not_over = !any_over
                    || match last {
                        Some((space, v)) if space == key.space => v,
                        _ => {
                            let cg = owners.owner(key.space).cgroup;
                            let v = !self.over.get(&cg).copied().unwrap_or(false);
                            last = Some((key.space, v));
                            v
                        }
                    };
                let c = (not_over, f.last_access(), key, size);
                if after.is_some_and(|a| c <= a)
                    || bound.is_some_and(|b| c >= b)
                    || !self.admits(c, f.sampled, backoff, heat)
                {
                    return true;
                }
                kept.push(c);
                kept_pages += size.nr_pages().0;
                if kept_pages >= head.saturating_mul(2) && kept.len() >= next_try {
                    if let Some(b) = cut(&mut kept, &mut kept_pages) {
                        bound = Some(b);
                    }
                    next_try = kept.len().saturating_mul(2);
                }
                true
            });
            stale += before - list.len();
            if list.is_empty() {
                emptied.push(g);
            }
            // At the generation's end, a bound as soon as the kept ones cover the head: it is
            // what lets the walk stop.
            if kept_pages >= head {
                if let Some(b) = cut(&mut kept, &mut kept_pages) {
                    bound = Some(b);
                }
            }
        }
        ages.entries -= stale;
        for g in emptied {
            ages.gens.remove(&g);
        }
        let left_out = cut(&mut kept, &mut kept_pages).is_some() || bound.is_some();
        kept.sort_unstable();
        (kept, left_out)
    }

    /// How long a page must have gone unseen for the pass to take it: `idle_after` in the
    /// idle pass, nothing below the low watermark (anything cold goes), else (making room
    /// for refused promotions) the ping-pong window, so that a page is not demoted to come
    /// straight back.
    fn min_idle(&self) -> Option<Nanos> {
        if self.idle_pass {
            Some(self.idle_after)
        } else if self.below_low {
            None
        } else {
            Some(self.idle_for)
        }
    }

    /// The latest last access a page the pass admits can have, when [`Self::min_idle`] asks
    /// for some idleness (`admits`: idle is `now - last access`, 0 for an access after
    /// `now`); below 0 when it admits none. `None`: no bound.
    fn latest_admitted(&self) -> Option<i128> {
        let idle = self.min_idle().filter(|i| i.0 > 0)?;
        // The least idleness any folio needs: a folio of the largest size's.
        let least = if self.idle_pass {
            idle.0
        } else {
            idle.0.div_ceil(self.largest.nr_pages().0)
        };
        Some(i128::from(self.now.0) - i128::from(least))
    }

    /// Whether a folio of `size` idle for `idle` is idle enough for the pass (`min_idle`).
    /// Making room, idleness is per base page: a folio of `n` base pages idle for `idle` is
    /// taken as a base page idle `n` times as long. The caller passes the folio's size only
    /// when its last sighting was a hardware sample (`FastPage::sampled`), else
    /// `PageSize::Base`: samples count accesses, so a 2 MiB folio whose pages are each
    /// touched once a second is sampled 512 times as often as a 4 KiB page touched as
    /// often, and by its last sample alone would never look idle; per base page the two look
    /// alike (the heat is compared per base page for the same reason, `heat_weight`). The
    /// idle pass keeps idleness by the clock: it takes only folios no source has seen for
    /// `idle_after`.
    fn idle_enough(&self, idle: Nanos, size: PageSize, min_idle: Nanos) -> bool {
        if self.idle_pass {
            idle >= min_idle
        } else {
            idle.0.saturating_mul(size.nr_pages().0) >= min_idle.0
        }
    }

    /// Whether the pass may take `c` (the lookups change no state but the maps' caches).
    fn admits(
        &self,
        c: DemotionCandidate,
        sampled: bool,
        backoff: &mut SparsePageMap<Backoff>,
        heat: &mut HeatMap,
    ) -> bool {
        if !backoff.is_empty() && backoff.get(c.2).is_some_and(|b| self.now < b.until) {
            return false;
        }
        let Some(min_idle) = self.min_idle() else {
            return true;
        };
        // Room for hotter pages, in relative mode: also only pages colder than the promotion
        // threshold (Memtis demotes below its hot threshold).
        let per_page = if sampled { c.3 } else { PageSize::Base };
        self.idle_enough(self.now.saturating_sub(c.1), per_page, min_idle)
            && (self.idle_pass
                || self
                    .heat_threshold
                    .is_none_or(|t| heat.bin(c.2).saturating_add(SWAP_MARGIN_BINS) < t))
    }
}

/// Cuts `kept` to the fewest of its smallest candidates whose folios cover `pages` base pages
/// (a weighted quickselect: each round partitions the undecided range at its middle and
/// keeps the half that holds the answer, so it is linear on average), in no particular
/// order, and returns the largest kept. Leaves `kept` alone and returns `None` when there is
/// nothing to cut: all of them are needed to cover `pages`.
fn cut_to_pages(kept: &mut Vec<DemotionCandidate>, pages: u64) -> Option<DemotionCandidate> {
    let total: u64 = kept.iter().map(|c| c.3.nr_pages().0).sum();
    if pages == 0 || total < pages {
        return None;
    }
    // Invariant: kept[..lo] are the lo smallest and cover `acc` < `pages`; kept[..hi] are the
    // hi smallest and cover at least `pages`. The answer is hi once they are adjacent.
    let (mut lo, mut hi, mut acc) = (0usize, kept.len(), 0u64);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        kept[lo..hi].select_nth_unstable(mid - lo);
        let s: u64 = kept[lo..mid].iter().map(|c| c.3.nr_pages().0).sum();
        if acc + s >= pages {
            hi = mid;
        } else {
            acc += s;
            lo = mid;
        }
    }
    if hi == kept.len() {
        return None;
    }
    kept.truncate(hi);
    // The hi smallest as a set, not in order: the largest is looked for.
    kept.iter().max().copied()
}

/// The first back-off, doubled per consecutive failure up to [`BACKOFF_MAX`].
const BACKOFF_BASE: Nanos = Nanos(1_000_000_000);
/// The longest back-off: an unmovable page is retried every ten minutes at most (pins are
/// often temporary: RDMA, O_DIRECT in flight), and forgotten once quiet that long.
const BACKOFF_MAX: Nanos = Nanos(600_000_000_000);

impl Backoff {
    fn wait(failures: u8) -> Nanos {
        let shift = u32::from(failures.saturating_sub(1)).min(20);
        Nanos(BACKOFF_BASE.0.saturating_mul(1 << shift).min(BACKOFF_MAX.0))
    }
}

/// Per-target-node promotion state (the kernel keeps it in the target's `pglist_data`).
#[derive(Clone, Debug, Default)]
struct TargetState {
    limiter: SlidingWindowLimiter,
    threshold: AdaptiveThreshold,
}

/// Why [`Engine::reconfigure`] refused a configuration.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReconfigureError {
    /// The configuration itself is invalid.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    /// The key cannot change while the engine runs.
    #[error("{key} cannot change while running: {reason}")]
    NotLive {
        /// The key.
        key: &'static str,
        /// Why.
        reason: &'static str,
    },
}

/// The hot-page engine. See the module docs for what one pass does.
#[derive(Debug)]
pub struct Engine {
    config: EngineConfig,
    topo: Topology,
    /// The fixed promotion target (`pghot_target_nid`).
    target: NodeId,
    /// One hotness store per slow node, as pghot keeps hot maps only for lower-tier sections.
    stores: BTreeMap<NodeId, HotnessStore>,
    /// Top-tier pages the engine has seen or promoted: the demoter's candidates.
    fast: FastIndex,
    history: SparsePageMap<MoveHistory>,
    /// Whether the engine keeps what only its demoter reads: the fast index (which relative
    /// mode's threshold also counts) and the move history (ping-pong is a demotion within the
    /// window of a promotion, or the reverse, of the engine's own moves). Without a demoter
    /// both would grow to the fast tier's size and be read by nobody: a daemon that leaves
    /// demotion to the kernel's reclaim, or the simulator's model of the kernel's pghot,
    /// would pay a lookup per observation and an entry per promoted page for them. On from
    /// the start with demotion or relative mode; a reconfigure that turns demotion on turns
    /// it on (the index then starts from what the sources report next); never off again.
    demoter_state: bool,
    /// Pages backed off after failing to move (see [`Backoff`]).
    backoff: SparsePageMap<Backoff>,
    owners: OwnerMap,
    targets: BTreeMap<NodeId, TargetState>,
    /// Fractional admission credit per cgroup for thinning (see `cgroup_promotion_scale`).
    cgroup_credit: BTreeMap<CgroupId, f64>,
    last_run: Option<Nanos>,
    last_prune: Nanos,
    /// Bytes of promotions refused last pass per target because the target would have
    /// dropped below its high watermark: the demoter makes room for them next pass, from
    /// pages idle for longer than the ping-pong window only.
    room_wanted: BTreeMap<NodeId, i128>,
    /// When room was last made: at most once a second, since choosing the coldest pages
    /// walks the whole fast-page index.
    last_room: Option<Nanos>,
    /// The last idle-demotion pass: its budget is the rate limit over the time since.
    last_idle: Option<Nanos>,
    next_batch_id: u64,
    stats: Stats,
    ready: Vec<ReadyPage>,
    /// Scratch of the promoter's hottest-first order (`plan_promotion`): kept, not
    /// reallocated each pass, since a pass may hold millions of ready pages and a fresh
    /// buffer of that size is fresh memory the kernel must zero.
    ready_sorted: Vec<ReadyPage>,
    ready_bins: Vec<u8>,
    /// Relative mode: every page's decayed access count and its histogram per tier.
    heat: HeatMap,
    /// Relative mode: the heat bin a ready slow page needs this pass.
    heat_threshold: u8,
    /// The pages in the plan being built (cleared every pass).
    claimed: Claimed,
}

/// The most bytes one migration batch holds, unless a single folio is larger: `batch_nr`
/// 2 MiB folios, the largest batch the kernel's kmigrated forms of THPs.
#[must_use]
pub fn batch_bytes(batch_nr: u32) -> Bytes {
    Bytes(u64::from(batch_nr) * PageSize::Huge2M.bytes().0)
}

/// The kernel's `pgdat_free_space_enough()` margin: max(1 GiB, node size / 16) above the
/// promotion watermark (kernel/sched/fair.c).
#[must_use]
pub fn free_space_margin(capacity: Bytes) -> Bytes {
    Bytes(Bytes::GIB.max(capacity.0 >> 4))
}

impl Engine {
    /// An engine for `topo` with `config`.
    pub fn new(config: EngineConfig, topo: Topology) -> Result<Engine, ConfigError> {
        config.validate()?;
        let target = config.target_nid.unwrap_or_else(|| topo.default_target());
        if !topo.is_toptier(target) {
            return Err(ConfigError::TargetNotToptier(target));
        }
        let params = HotnessParams {
            mode: config.mode,
            // Both modes: `freq_threshold` sightings within the window make a page a
            // candidate (pghot's ready bit). In relative mode that is only a noise filter (a
            // page seen once, say in a coarse DAMON region straddling the hot set's edge,
            // waits for a second sighting); its heat decides.
            freq_threshold: config.freq_threshold,
            freq_window_ms: config.window_ms(),
            target_nid: target,
        };
        let stores = topo
            .slow_mask()
            .iter()
            .map(|n| (n, HotnessStore::new(params)))
            .collect();
        let targets = topo
            .toptier_mask()
            .iter()
            .map(|n| (n, TargetState::default()))
            .collect();
        let mut stats = Stats::default();
        for n in topo.nodes() {
            stats.nodes.insert(n.id, NodeStats::default());
        }
        for k in SourceKind::ALL {
            stats.sources.insert(k, SourceStats::default());
        }
        Ok(Engine {
            topo,
            target,
            stores,
            fast: FastIndex::default(),
            history: SparsePageMap::default(),
            demoter_state: config.demotion.enabled || config.threshold == ThresholdMode::Relative,
            backoff: SparsePageMap::default(),
            owners: OwnerMap::default(),
            targets,
            cgroup_credit: BTreeMap::new(),
            last_run: None,
            last_prune: Nanos::ZERO,
            room_wanted: BTreeMap::new(),
            last_room: None,
            last_idle: None,
            next_batch_id: 1,
            stats,
            ready: Vec::new(),
            ready_sorted: Vec::new(),
            ready_bins: Vec::new(),
            heat: HeatMap::new(config.heat_cooling_ms),
            heat_threshold: NO_PROMOTION_BIN,
            claimed: Claimed::default(),
            config,
        })
    }

    /// The configuration in force.
    #[must_use]
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Replaces the configuration of a running engine, keeping what it has learnt: the
    /// hotness records, the heat of every page, the fast-page index, the move history and
    /// the back-offs. What the engine reads on every pass (rate limit, interval, batch size,
    /// demotion watermarks, windows, fairness, policy choices) applies from the next pass; the
    /// fixed target, the frequency threshold and window apply to later accesses and leave
    /// the stored records as they are, as a sysctl write does in the kernel.
    ///
    /// # Errors
    /// The configuration is invalid ([`EngineConfig::validate`], a target that is not top
    /// tier), or it changes what a live engine cannot change: the record format (`mode`,
    /// whose stores do not convert) or the threshold kind (`threshold`, since a fixed-mode
    /// engine keeps no heat to rank pages by). The engine is then left as it was.
    pub fn reconfigure(&mut self, config: EngineConfig) -> Result<(), ReconfigureError> {
        config.validate()?;
        if config.mode != self.config.mode {
            return Err(ReconfigureError::NotLive {
                key: "mode",
                reason: "the hotness records change format and would be dropped",
            });
        }
        if config.threshold != self.config.threshold {
            return Err(ReconfigureError::NotLive {
                key: "threshold",
                reason: "the heat the relative threshold ranks pages by is only kept in \
                         relative mode",
            });
        }
        let target = config
            .target_nid
            .unwrap_or_else(|| self.topo.default_target());
        if !self.topo.is_toptier(target) {
            return Err(ConfigError::TargetNotToptier(target).into());
        }
        for store in self.stores.values_mut() {
            let params = HotnessParams {
                freq_threshold: config.freq_threshold,
                freq_window_ms: config.window_ms(),
                target_nid: target,
                ..*store.params()
            };
            store.set_params(params);
        }
        self.heat.set_cooling_ms(config.heat_cooling_ms);
        self.demoter_state |= config.demotion.enabled;
        self.target = target;
        self.config = config;
        Ok(())
    }

    /// The topology.
    #[must_use]
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The fixed promotion target.
    #[must_use]
    pub fn target(&self) -> NodeId {
        self.target
    }

    /// Counters and gauges.
    #[must_use]
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Owners and policies.
    #[must_use]
    pub fn owners(&self) -> &OwnerMap {
        &self.owners
    }

    /// Applies an owner or policy change.
    pub fn update_owner(&mut self, update: OwnerUpdate) {
        match update {
            OwnerUpdate::Owner { space, owner } => self.owners.set_owner(space, owner),
            OwnerUpdate::Policies { space, ranges } => self.owners.set_policies(space, ranges),
            OwnerUpdate::HomeNode { space, node } => self.owners.set_home_node(space, node),
            OwnerUpdate::Exited { space } => self.forget_space(space),
        }
    }

    /// Drops everything known about an address space (its process exited).
    pub fn forget_space(&mut self, space: crate::types::SpaceId) {
        self.owners.forget(space);
        for s in self.stores.values_mut() {
            s.forget_space(space);
        }
        self.fast.retain_spaces_except(space);
        self.history.retain(|k, _| k.space != space);
        self.backoff.retain(|k, _| k.space != space);
        self.heat.forget_space(space);
    }

    fn relative(&self) -> bool {
        self.config.threshold == ThresholdMode::Relative
    }

    /// Records a batch of observations (pghot's `pghot_record_access()` for each).
    pub fn observe(&mut self, batch: &[Observation]) {
        // Observations from hardware samples (and hint faults) land on scattered entries of
        // the fast index, the heat map and the hotness store, each a cache miss. Reading a
        // block's entries first, in a loop with nothing else in it, lets the CPU have their
        // misses in flight together; the block is then processed with its lines in cache.
        // The output is the same: the reads change nothing.
        for block in batch.chunks(WARM_BLOCK) {
            let mut present = 0u32;
            for obs in block {
                // An accessed-bit scan reports in address order: its entries come in runs
                // the maps' chunk caches already serve, and reading them twice costs more
                // than it saves (the 1 TB scenario: 69 s of CPU with this, 77 s without).
                if obs.source == SourceKind::AccessedBitScan {
                    continue;
                }
                let size = obs.page.size;
                let key = PageKey {
                    space: obs.page.space,
                    vpn: size.head(obs.page.vpn),
                };
                // A slow page is looked up in the fast index too (to drop a stale entry).
                present += self.warm_page(key, size, obs.page_node);
            }
            std::hint::black_box(present);
            for obs in block {
                self.observe_one(obs);
            }
        }
    }

    /// Takes idle facts: a top-tier page not in the demoter's index enters it with
    /// `idle_since` as its last access; one it knows keeps the later of the two (an access a
    /// source reported after the region went idle wins). Idle facts only feed idle demotion
    /// and the coldest-first order of demotion under pressure; they are ignored while idle
    /// demotion is off (a page known only from them would otherwise look cold to the
    /// pressure demoter with less evidence than it asks of the others) and for pages on a
    /// slow tier (they are not accesses).
    pub fn note_idle(&mut self, batch: &[IdleObservation]) {
        if self.config.demotion.idle_after_ms == 0 || !self.sees_fast_tier() {
            return;
        }
        for f in batch {
            if !self.topo.is_toptier(f.page_node) {
                continue;
            }
            let size = f.page.size;
            let key = PageKey {
                space: f.page.space,
                vpn: size.head(f.page.vpn),
            };
            if self.demoter_state {
                self.fast.touch(key, f.page_node, size, f.idle_since, false);
            }
            self.stats.engine.idle_noted += 1;
        }
    }

    fn observe_one(&mut self, obs: &Observation) {
        let relative = self.relative();
        let e = &mut self.stats.engine;
        let src = self.stats.sources.entry(obs.source).or_default();
        src.observed += 1;
        if !self.config.sources.contains(obs.source) {
            src.dropped_disabled += 1;
            e.pghot_dropped_disabled += 1;
            return;
        }
        if self.topo.node(obs.page_node).is_none() {
            e.pghot_ignored_unknown_node += 1;
            return;
        }
        // A folio is keyed by its head: any vpn inside a huge page names it.
        let size = obs.page.size;
        let key = PageKey {
            space: obs.page.space,
            vpn: size.head(obs.page.vpn),
        };
        if relative {
            self.heat.cool_until(obs.time);
        }
        if self.topo.is_toptier(obs.page_node) {
            // pghot ignores top-tier pages; the demoter needs their recency (and, in relative
            // mode, their heat: colder ones are the room hotter slow pages can take).
            e.fast_observed += 1;
            if self.demoter_state {
                self.fast.touch(
                    key,
                    obs.page_node,
                    size,
                    obs.time,
                    obs.source.counts_accesses(),
                );
            }
            if relative {
                self.heat.add(key, size, Tier::Fast, heat_weight(obs));
            }
            return;
        }
        // An accessed-bit source does not know who made the access: in precise mode (the only
        // one that stores the accessor) it is the node the process's threads run on, when
        // they all run on one (AccessingNode::Threads; the kernel charges a hint fault to the
        // faulting CPU's node, mm/mempolicy.c mpol_misplaced()). One lookup per observation,
        // and only in precise mode.
        let accessing_node = match obs.accessing_node {
            None if self.config.mode == HotnessMode::Precise
                && self.config.accessing_node == AccessingNode::Threads =>
            {
                self.owners.home_node(obs.page.space)
            }
            n => n,
        };
        if accessing_node == Some(obs.page_node) {
            e.pghot_ignored_same_node += 1;
            return;
        }
        // A page seen on a slow node is no longer where the demoter thought it was (the
        // kernel demoted it, or it was never promoted by us).
        // Any folio over its pages, at whatever size the demoter knew it, is gone from there.
        if !self.fast.map.is_empty() {
            self.fast.remove_overlapping(key, size);
        }
        // The kernel refuses a non-top-tier nid in precise mode (`pghot_nid_valid()`);
        // tierd treats it as "accessor unknown" so the access still counts toward hotness.
        let accessing = accessing_node.filter(|n| self.topo.is_toptier(*n));
        if self.stores.len() > 1 && self.stores.contains_key(&obs.page_node) {
            // The folio is on this slow node now: a record of it (or of the folio it was
            // split from or collapsed from) in another slow node's store is stale, and would
            // otherwise be drained and planned a second time, or at its old size.
            for (n, s) in &mut self.stores {
                if *n != obs.page_node {
                    s.remove_overlapping(key, size);
                }
            }
        }
        let Some(store) = self.stores.get_mut(&obs.page_node) else {
            return;
        };
        store.record(key, size, accessing, obs.time);
        if relative {
            self.heat.add(key, size, Tier::Slow, heat_weight(obs));
        }
        src.recorded += 1;
        e.pghot_recorded_accesses += 1;
        match obs.source {
            SourceKind::HintFault => e.pghot_recorded_hintfaults += 1,
            SourceKind::HwSample => e.pghot_recorded_hwhints += 1,
            SourceKind::AccessedBitScan => e.pghot_recorded_pgtscans += 1,
        }
    }

    /// The promotion watermark of `node`: reported, or estimated as four
    /// `watermark_scale_factor` steps of its capacity (min, low, high and promo are one step
    /// apart in `__setup_per_zone_wmarks()`, mm/page_alloc.c; min is taken as one step).
    fn promo_watermark(&self, node: NodeId, usage: &SystemUsage) -> Bytes {
        usage
            .nodes
            .get(&node)
            .and_then(|u| u.promo_watermark)
            .unwrap_or_else(|| {
                let cap = self.topo.capacity(node).0;
                Bytes(cap / 10_000 * u64::from(self.config.watermark_scale_factor) * 4)
            })
    }

    /// Runs one pass if `interval_ms` has passed since the last one; returns the plan.
    pub fn tick(&mut self, now: Nanos, usage: &SystemUsage) -> MigrationPlan {
        let interval = Nanos::from_millis(u64::from(self.config.interval_ms));
        if let Some(last) = self.last_run {
            if now.saturating_sub(last) < interval {
                return MigrationPlan::default();
            }
        } else {
            for (n, t) in &mut self.targets {
                let cand = self.stats.nodes.get(n).map_or(0, |s| s.pgpromote_candidate);
                t.threshold = AdaptiveThreshold::new(now, cand);
            }
        }
        self.last_run = Some(now);
        self.claimed.clear();
        // Free memory as the plan will leave it, node by node.
        let mut free: BTreeMap<NodeId, i128> = self
            .topo
            .nodes()
            .iter()
            .map(|n| {
                (
                    n.id,
                    i128::from(usage.nodes.get(&n.id).map_or(0, |u| u.free.0)),
                )
            })
            .collect();
        let mut plan = MigrationPlan::default();
        if self.config.demotion.enabled {
            self.plan_demotion(now, usage, &mut free, &mut plan);
        }
        if self.relative() {
            self.heat.cool_until(now);
            self.heat_threshold = self.relative_threshold(usage, &free);
        }
        self.plan_promotion(now, usage, &mut free, &mut plan);
        self.housekeeping(now);
        self.stats.engine.plan_batches += plan.batches.len() as u64;
        plan
    }

    /// The cgroup's fast-tier share and usage, when its promotions may be thinned: only
    /// while another cgroup is below a protected share. Protection exists to make room for
    /// the protected; with no `memory.low` anywhere, or every protected cgroup already at its
    /// share, thinning would only slow promotion down for nobody's benefit.
    fn over_share(&self, cgroup: CgroupId, usage: &SystemUsage) -> Option<(Bytes, Bytes)> {
        let share_of = |low: Bytes| {
            fast_tier_share(
                low,
                self.topo.toptier_capacity(),
                self.topo.total_capacity(),
            )
        };
        let cg = usage.cgroups.get(&cgroup)?;
        let someone_short = usage.cgroups.iter().any(|(id, other)| {
            *id != cgroup && other.low.0 > 0 && other.fast_usage < share_of(other.low)
        });
        someone_short.then(|| (share_of(cg.low), cg.fast_usage))
    }

    /// [`Engine::over_share`] with the fairness switch, for every cgroup of `usage`: whether
    /// its pages go first when demoting.
    fn over_share_flags(&self, usage: &SystemUsage) -> BTreeMap<CgroupId, bool> {
        usage
            .cgroups
            .keys()
            .map(|&cg| {
                let over = self
                    .over_share(cg, usage)
                    .is_some_and(|(share, used)| self.config.cgroup_fairness && used > share);
                (cg, over)
            })
            .collect()
    }

    /// Whether some enabled source can observe accesses to top-tier pages (hardware samples
    /// and accessed-bit scans can; tiering-mode hint faults cannot).
    fn sees_fast_tier(&self) -> bool {
        self.config.sources.contains(SourceKind::HwSample)
            || self.config.sources.contains(SourceKind::AccessedBitScan)
    }

    /// Relative mode: the heat bin that fits the hottest slow pages in the room on the fast
    /// tier (the promotion targets' free bytes above the higher of their demotion high
    /// watermark and promotion watermark, plus their colder pages when the demoter can make
    /// room); see [`crate::hotness::heat`].
    fn relative_threshold(&mut self, usage: &SystemUsage, free: &BTreeMap<NodeId, i128>) -> u8 {
        let targets: Vec<NodeId> = match self.config.mode {
            HotnessMode::Default => vec![self.target],
            HotnessMode::Precise => self.topo.toptier_mask().iter().collect(),
        };
        let room: i128 = targets
            .iter()
            .map(|t| {
                let floor = self
                    .demotion_watermarks(*t)
                    .1
                    .max(i128::from(self.promo_watermark(*t, usage).0));
                (free.get(t).copied().unwrap_or(0) - floor).max(0)
            })
            .sum();
        let room_pages =
            u64::try_from(room / i128::from(crate::types::PAGE_SIZE)).unwrap_or(u64::MAX);
        let demotable = self.config.demotion.enabled && self.sees_fast_tier();
        // Fast pages the demoter knows but whose heat cooled away (or was never seen) are
        // the coldest: bin 0.
        let mut fast = self.heat.histogram(Tier::Fast);
        let with_heat: u64 = fast[1..].iter().sum();
        fast[0] = self.fast.pages.saturating_sub(with_heat);
        let t = fit_threshold(
            &self.heat.histogram(Tier::Slow),
            &fast,
            room_pages,
            demotable,
            self.heat.lowest_bin(),
            SWAP_MARGIN_BINS,
        );
        self.stats.engine.promote_room_pages = room_pages;
        // In a base page's heat bins (the density bin less its offset), as before huge
        // folios were ranked per base page; 0 when the threshold is below a base page's
        // least heat, which only huge folios reach.
        self.stats.engine.promote_heat_threshold = u64::from(t.saturating_sub(SIZE_SHIFT_MAX));
        t
    }

    /// The free bytes below which the demoter starts (low) and up to which it works (high).
    fn demotion_watermarks(&self, node: NodeId) -> (i128, i128) {
        let d = self.config.demotion;
        if !d.enabled {
            return (0, 0);
        }
        let cap = i128::from(self.topo.capacity(node).0);
        (
            cap * i128::from(d.low_free_permille) / 1000,
            cap * i128::from(d.high_free_permille) / 1000,
        )
    }

    fn plan_demotion(
        &mut self,
        now: Nanos,
        usage: &SystemUsage,
        free: &mut BTreeMap<NodeId, i128>,
        plan: &mut MigrationPlan,
    ) {
        let room_due = self
            .last_room
            .is_none_or(|t| now.saturating_sub(t) >= Nanos::from_secs(1));
        let wanted = if room_due && !self.room_wanted.is_empty() {
            self.last_room = Some(now);
            std::mem::take(&mut self.room_wanted)
        } else {
            BTreeMap::new()
        };
        let idle_for = Nanos::from_millis(self.config.pingpong_window_ms);
        // Idle demotion (demotion.idle_after_ms): with no pressure to answer, pages no source
        // has seen accessed for that long go down at the idle rate limit, so the fast tier
        // has room before the next workload needs it.
        let idle_after = Nanos::from_millis(self.config.demotion.idle_after_ms);
        // Once a second at most, with a second's budget (a stalled loop does not bank a
        // burst): the pass ranks the whole fast index, which idle facts fill with every
        // resident page of the scope.
        let idle_due = self
            .last_idle
            .is_none_or(|t| now.saturating_sub(t) >= Nanos::from_secs(1));
        let idle_budget: i128 = if idle_after.0 > 0 && self.sees_fast_tier() && idle_due {
            self.last_idle = Some(now);
            i128::from(self.config.demotion.idle_rate_limit_mbps) * 1_000_000
        } else {
            0
        };
        for node in self.topo.toptier_mask().iter() {
            let (low, high) = self.demotion_watermarks(node);
            let node_free = free.get(&node).copied().unwrap_or(0);
            let room = wanted.get(&node).copied().unwrap_or(0);
            let pressure = node_free < low || room > 0;
            if self.topo.lower_tier_mask(node).is_empty() || (!pressure && idle_budget == 0) {
                continue;
            }
            // Below low: anything cold goes, down to high. Only making room for refused
            // promotions: just pages idle for longer than the ping-pong window, so that a
            // page is never demoted to make way for one barely hotter than itself.
            let below_low = node_free < low;
            if !below_low && !self.sees_fast_tier() {
                // No enabled source observes top-tier pages (hint faults in tiering mode only
                // fire on slow pages): the engine's idea of their recency is just when it
                // promoted them, which is no evidence that they went cold. Leave room-making
                // to the kernel's reclaim rather than demote blind (that ping-pongs).
                continue;
            }
            let mut need = if below_low {
                high - node_free
            } else {
                high + room - node_free
            };
            // No pressure to answer (or it is met): the idle pass, bounded by its budget. Free
            // memory between the low and high watermarks is no pressure.
            let idle_pass = (need <= 0 || !pressure) && idle_budget > 0;
            if idle_pass {
                need = idle_budget;
            } else if !pressure {
                continue;
            }
            // Every page the pass places takes its bytes from the room of one of the lower
            // tiers' nodes, so it can place no more than their room in all; with a full slow
            // tier, asking for more ranks a head of candidates that have nowhere to go. The
            // pages placed are the same: once the placed bytes reach the room below, no node
            // has room left for another page, and the loop below would only have gone on
            // counting the later candidates it skips for their policy or an overlap.
            let room_below: i128 = self
                .topo
                .lower_tier_mask(node)
                .iter()
                .map(|n| free.get(&n).copied().unwrap_or(0).max(0))
                .sum();
            need = need.min(room_below);
            if need <= 0 {
                continue;
            }
            // Coldest first, cgroups above their fast-tier share before the others: the
            // candidates in the order (not over share, last access, page), which is total.
            // Only the first few that can cover `need` are wanted: twice the base pages it
            // asks for, plus some, leaves slack for pages their policy keeps. They are
            // selected during one walk of the fast index by age, oldest first
            // (`DemotionFilter::coldest`): it stops once no later page can be among them, a
            // page that cannot be is passed over after one comparison, before its filters'
            // lookups (back-off, heat), and nothing of the size of the fast tier is allocated
            // (a walk over every fast page ran every pass under pressure and was most of a
            // large machine's engine time). The rest, in order, only if those run out.
            let head = u64::try_from(need.max(0) >> crate::types::PAGE_SHIFT)
                .unwrap_or(u64::MAX)
                .saturating_mul(2)
                .saturating_add(64);
            let filter = DemotionFilter {
                node,
                now,
                idle_pass,
                idle_after,
                below_low,
                idle_for,
                largest: self.fast.map.largest_size(),
                heat_threshold: self.relative().then_some(self.heat_threshold),
                over: self.over_share_flags(usage),
            };
            let (cands, cut) = filter.coldest(
                &mut self.fast,
                &self.owners,
                &mut self.backoff,
                &mut self.heat,
                head,
                None,
            );
            let mut groups: BTreeMap<(NodeId, CgroupId), Vec<PlannedMove>> = BTreeMap::new();
            let after = cands.last().copied().filter(|_| cut);
            let mut tail: Option<std::vec::IntoIter<DemotionCandidate>> = None;
            let fast = &mut self.fast;
            let owners = &self.owners;
            let mut cands = cands.into_iter();
            let mut next = || -> Option<DemotionCandidate> {
                if let Some(c) = cands.next() {
                    return Some(c);
                }
                // Past the head: every other candidate, in order (rare: policies or claims
                // kept most of the head).
                let after = after?;
                tail.get_or_insert_with(|| {
                    filter
                        .coldest(
                            fast,
                            owners,
                            &mut self.backoff,
                            &mut self.heat,
                            u64::MAX,
                            Some(after),
                        )
                        .0
                        .into_iter()
                })
                .next()
            };
            while let Some((_, _, key, size)) = next() {
                if need <= 0 {
                    break;
                }
                let page = PageRef {
                    space: key.space,
                    vpn: key.vpn,
                    size,
                    pfn: None,
                };
                if self.claimed.overlaps(page) {
                    self.stats.engine.pgmigrate_overlap_skipped += size.nr_pages().0;
                    continue;
                }
                // The whole folio's bytes: a 2 MiB or 1 GiB folio moves as one.
                let bytes = i128::from(size.bytes().0);
                let pol = self.owners.policy(key.space, key.vpn);
                // An unknown policy, or an interleaved one unless the config says otherwise,
                // allows no target at all (MemPolicy::may_move).
                let movable = pol.may_move(self.config.move_interleaved);
                let allowed = |mask: NodeMask| {
                    NodeMask::from_nodes(mask.iter().filter(|&n| movable && pol.allows(n)))
                };
                let mut choices = allowed(self.topo.demotion_targets(node));
                if choices.is_empty() {
                    choices = allowed(self.topo.lower_tier_mask(node));
                }
                if choices.is_empty() {
                    self.stats.engine.pgdemote_policy_skipped += size.nr_pages().0;
                    continue;
                }
                // Nearest allowed lower node with room for the page.
                let with_room = NodeMask::from_nodes(
                    choices
                        .iter()
                        .filter(|t| free.get(t).copied().unwrap_or(0) >= bytes),
                );
                let Some(to) = self.topo.nearest_in(node, with_room) else {
                    continue;
                };
                *free.entry(to).or_default() -= bytes;
                *free.entry(node).or_default() += bytes;
                need -= bytes;
                let cg = self.owners.owner(key.space).cgroup;
                self.claimed.claim(page);
                groups
                    .entry((to, cg))
                    .or_default()
                    .push(PlannedMove { page, from: node });
                self.stats.engine.pgdemote_candidate += size.nr_pages().0;
                if idle_pass {
                    self.stats.engine.pgdemote_idle += size.nr_pages().0;
                }
            }
            self.emit(MigrationKind::Demote, groups, plan);
        }
    }

    fn plan_promotion(
        &mut self,
        now: Nanos,
        usage: &SystemUsage,
        free: &mut BTreeMap<NodeId, i128>,
        plan: &mut MigrationPlan,
    ) {
        let rl_pages = mbps_to_pages_per_s(self.config.promote_rate_limit_mbps);
        let ref_th = u64::from(self.config.window_ms());
        let slow: Vec<NodeId> = self.stores.keys().copied().collect();
        let mut groups: BTreeMap<(NodeId, CgroupId), Vec<PlannedMove>> = BTreeMap::new();
        let mut ready = std::mem::take(&mut self.ready);
        for src_node in slow {
            self.stats.engine.promoter_runs += 1;
            ready.clear();
            if let Some(store) = self.stores.get_mut(&src_node) {
                store.drain_ready(now, &mut ready);
            }
            if self.relative() {
                // Hottest first, so that the rate limit and the room go to them; address
                // order among equals (a stable sort of the store's address order). A counting
                // sort: there are DENSITY_BINS keys.
                let bins = &mut self.ready_bins;
                bins.clear();
                let mut start = [0usize; DENSITY_BINS];
                for rp in &ready {
                    let b = self.heat.bin(rp.key);
                    bins.push(b);
                    start[usize::from(b)] += 1;
                }
                // Bin b's first position: the count of every hotter bin.
                let mut at = 0;
                for slot in start.iter_mut().rev() {
                    let n = *slot;
                    *slot = at;
                    at += n;
                }
                let sorted = &mut self.ready_sorted;
                sorted.clear();
                // Every slot is overwritten below; this only sizes the buffer.
                sorted.extend_from_slice(&ready);
                for (rp, &b) in ready.iter().zip(bins.iter()) {
                    let i = &mut start[usize::from(b)];
                    sorted[*i] = *rp;
                    *i += 1;
                }
                std::mem::swap(&mut ready, sorted);
            }
            for rp in &ready {
                self.consider(
                    now,
                    usage,
                    src_node,
                    rp,
                    rl_pages,
                    ref_th,
                    free,
                    &mut groups,
                );
            }
        }
        self.ready = ready;
        self.emit(MigrationKind::Promote, groups, plan);
    }

    /// Chooses the promotion target of a ready page, honouring its mempolicy.
    ///
    /// Precise mode promotes to the node in the record (the accessing node, or the target for
    /// sources that did not know it); if the page's BIND / PREFERRED_MANY mask excludes that
    /// node there is no migration, as `mpol_misplaced()` decides for `MPOL_F_MORON` policies
    /// when the faulting node is outside the mask. Default mode has one fixed target; a page
    /// whose mask excludes it goes to the nearest top-tier node the mask allows instead (what
    /// `mpol_misplaced()` does without `MPOL_F_MORON`).
    fn promotion_target(&self, src_node: NodeId, rp: &ReadyPage) -> Option<NodeId> {
        let pol = self.owners.policy(rp.key.space, rp.key.vpn);
        if !pol.may_promote(self.config.move_interleaved, self.config.preferred_many) {
            return None;
        }
        match self.config.mode {
            HotnessMode::Precise => {
                let wanted = if self.topo.is_toptier(rp.nid) {
                    rp.nid
                } else {
                    self.target
                };
                pol.allows(wanted).then_some(wanted)
            }
            HotnessMode::Default => {
                if pol.allows(self.target) {
                    Some(self.target)
                } else {
                    let allowed = NodeMask(self.topo.toptier_mask().0 & pol.nodes.0);
                    self.topo.nearest_in(src_node, allowed)
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn consider(
        &mut self,
        now: Nanos,
        usage: &SystemUsage,
        src_node: NodeId,
        rp: &ReadyPage,
        rl_pages: u64,
        ref_th: u64,
        free: &mut BTreeMap<NodeId, i128>,
        groups: &mut BTreeMap<(NodeId, CgroupId), Vec<PlannedMove>>,
    ) {
        let nr = rp.size.nr_pages();
        let page = PageRef {
            space: rp.key.space,
            vpn: rp.key.vpn,
            size: rp.size,
            pfn: None,
        };
        if self.claimed.overlaps(page) {
            // Already in this pass's plan (demoted from a fast node, or planned from another
            // record over the same pages): never planned twice, and not charged.
            self.stats.engine.pgmigrate_overlap_skipped += nr.0;
            return;
        }
        if self.backed_off(rp.key, now) {
            self.stats.engine.pgmigrate_backoff_skipped += nr.0;
            return;
        }
        let Some(target) = self.promotion_target(src_node, rp) else {
            self.stats.engine.pgpromote_policy_skipped += nr.0;
            return;
        };
        if target == src_node {
            self.stats.engine.pgpromote_already_there += nr.0;
            return;
        }
        // Everything below is charged the folio's full size: its bytes against the room, its
        // base pages (= bytes / 4 KiB) against the rate limit and the cgroup credit, as the
        // kernel charges `folio_nr_pages()` (kernel/sched/fair.c
        // `numa_promotion_rate_limit(pgdat, rate_limit, nr)`).
        let bytes = i128::from(rp.size.bytes().0);
        let target_free = free.get(&target).copied().unwrap_or(0);
        let cap = self.topo.capacity(target);
        // `pgdat_free_space_enough()` looks at free memory only, not at the folio's size
        // (kernel/sched/fair.c); it decides the hot test and the rate limit, while the room
        // test below charges the folio's bytes, so a large folio never overfills the target.
        let enough = target_free
            > i128::from(self.promo_watermark(target, usage).0)
                + i128::from(free_space_margin(cap).0);
        let owner = self.owners.owner(rp.key.space);
        let (_, high) = self.demotion_watermarks(target);
        let cg_share = if self.config.cgroup_fairness {
            self.over_share(owner.cgroup, usage)
        } else {
            None
        };
        let relative = self.relative();
        let hot_enough = !relative || self.heat.bin(rp.key) >= self.heat_threshold;
        let e = &mut self.stats.engine;
        let Some(ts) = self.targets.get_mut(&target) else {
            return;
        };
        let node_stats = self.stats.nodes.entry(target).or_default();
        // The hot test: relative mode's heat bin (the histogram already sized the threshold
        // to the room, so no free-space bypass and no latency threshold); the kernel's
        // free-space bypass, else its adaptive latency threshold.
        let bypass = !relative && enough;
        if relative {
            if !hot_enough {
                e.pgpromote_cold += nr.0;
                return;
            }
        } else if enough {
            ts.threshold.reset_value();
            e.pgpromote_candidate_nrl += nr.0;
            node_stats.pgpromote_candidate_nrl += nr.0;
        } else {
            if self.config.adaptive_threshold {
                ts.threshold.maybe_adjust(
                    now,
                    node_stats.pgpromote_candidate,
                    rl_pages,
                    ref_th,
                    PROMOTION_THRESHOLD_WINDOW_MS,
                );
            }
            let th = ts.threshold.effective(ref_th);
            node_stats.promote_threshold_ms = th;
            if rp.age_ms >= th {
                e.pgpromote_cold += nr.0;
                return;
            }
        }
        if !bypass {
            if let Some((share, used)) = cg_share {
                let scale = cgroup_promotion_scale(share, used, true);
                if scale < 1.0 {
                    // Thinning by base pages: each candidate earns `scale` of its pages, and
                    // a folio goes when the credit covers all of them, so a cgroup gets
                    // `scale` of its candidate bytes whatever its folio sizes. The credit is
                    // capped at the largest folio, which it never needs more than.
                    #[allow(clippy::cast_precision_loss)] // at most 2^18, exact in an f64
                    let pages = nr.0 as f64;
                    #[allow(clippy::cast_precision_loss)]
                    let cap = PageSize::Huge1G.nr_pages().0 as f64;
                    let credit = self.cgroup_credit.entry(owner.cgroup).or_insert(0.0);
                    *credit = (*credit + scale * pages).min(cap);
                    if *credit < pages {
                        e.pgpromote_cgroup_throttled += nr.0;
                        return;
                    }
                    *credit -= pages;
                }
            }
            e.pgpromote_candidate += nr.0;
            node_stats.pgpromote_candidate += nr.0;
            if !ts.limiter.try_admit(now, nr, rl_pages) {
                e.pgpromote_rate_limited += nr.0;
                return;
            }
        }
        if target_free - bytes < high {
            // Like the kernel's migrate_balanced_pgdat() (mm/migrate.c), which refuses a NUMA
            // migration that would take the target below its high watermark: promoting into
            // a node until the demoter has to run is how ping-pong starts.
            e.pgpromote_no_room += nr.0;
            let want = self.room_wanted.entry(target).or_default();
            *want = (*want + bytes).min(i128::from(self.topo.capacity(target).0));
            return;
        }
        *free.entry(target).or_default() -= bytes;
        *free.entry(src_node).or_default() += bytes;
        e.pgpromote_planned += nr.0;
        self.claimed.claim(page);
        groups
            .entry((target, owner.cgroup))
            .or_default()
            .push(PlannedMove {
                page,
                from: src_node,
            });
    }

    /// Cuts groups into batches, in (target, cgroup) order: at most `batch_nr` folios, and at
    /// most [`batch_bytes`] unless a single folio is larger (a 1 GiB page with `batch_nr`
    /// below 512 goes in a batch of its own).
    ///
    /// `batch_nr` counts folios as the kernel's `kmigrated_batch_nr` does (mm/pghot.c
    /// increments `batch_count` once per folio isolated); the byte bound keeps one batch, which
    /// a backend moves in one `move_pages(2)` call per process, from growing to
    /// `batch_nr` gigantic pages.
    fn emit(
        &mut self,
        kind: MigrationKind,
        groups: BTreeMap<(NodeId, CgroupId), Vec<PlannedMove>>,
        plan: &mut MigrationPlan,
    ) {
        let batch_nr = usize::try_from(self.config.batch_nr).unwrap_or(usize::MAX);
        let max_bytes = batch_bytes(self.config.batch_nr).0;
        for ((target, cgroup), moves) in groups {
            let mut start = 0;
            while start < moves.len() {
                let mut end = start;
                let mut bytes = 0u64;
                while end < moves.len() && end - start < batch_nr {
                    let b = moves[end].page.size.bytes().0;
                    if end > start && bytes + b > max_bytes {
                        break;
                    }
                    bytes += b;
                    end += 1;
                }
                plan.batches.push(MigrationBatch {
                    id: self.next_batch_id,
                    kind,
                    target,
                    cgroup,
                    pages: moves[start..end].to_vec(),
                });
                self.next_batch_id += 1;
                start = end;
            }
        }
    }

    /// Whether `key` is backed off after failing to move (see [`Backoff`]).
    fn backed_off(&mut self, key: PageKey, now: Nanos) -> bool {
        self.backoff.get(key).is_some_and(|b| now < b.until)
    }

    fn housekeeping(&mut self, now: Nanos) {
        let idle = Nanos::from_millis(self.config.store_idle_ms);
        let window = Nanos::from_millis(self.config.pingpong_window_ms);
        if now.saturating_sub(self.last_prune) >= Nanos::from_secs(10) {
            self.last_prune = now;
            for s in self.stores.values_mut() {
                s.sweep(now, idle);
            }
            let recent = |t: Option<Nanos>| t.is_some_and(|t| now.saturating_sub(t) <= window);
            self.history
                .retain(|_, h| recent(h.promoted_at.get()) || recent(h.demoted_at.get()));
            // Credits of cgroups that own nothing any more (removed, or their processes
            // exited) go: cgroup ids come and go on a busy host.
            let live: std::collections::BTreeSet<CgroupId> = self.owners.cgroups().collect();
            self.cgroup_credit.retain(|cg, _| live.contains(cg));
            // A page quiet for BACKOFF_MAX after its back-off ended starts afresh.
            self.backoff
                .retain(|_, b| now.saturating_sub(b.until) < BACKOFF_MAX);
            self.heat.prune();
        }
        let e = &mut self.stats.engine;
        e.tracked_pages = self
            .stores
            .values()
            .map(HotnessStore::tracked_base_pages)
            .sum();
        e.ready_pages = self
            .stores
            .values()
            .map(HotnessStore::ready_base_pages)
            .sum();
        e.hotness_store_bytes = self
            .stores
            .values()
            .map(|s| s.memory_bytes() as u64)
            .sum::<u64>()
            + self.heat.memory_bytes() as u64;
        e.heat_tracked_pages = self.heat.tracked_pages();
        e.fast_index_pages = self.fast.pages;
    }

    /// Reads the entries an update of the folio `(key, size)` touches, changing nothing: the
    /// fast index (when the demoter's state is kept), the heat map (relative mode) and the
    /// hotness store of `node` (none for a top-tier node). Returns how many are present, for
    /// the caller to `black_box`.
    fn warm_page(&self, key: PageKey, size: PageSize, node: NodeId) -> u32 {
        let mut present = 0;
        if self.demoter_state {
            present += u32::from(self.fast.map.warm(key, size));
        }
        if self.relative() {
            present += u32::from(self.heat.warm(key, size));
        }
        if let Some(store) = self.stores.get(&node) {
            present += u32::from(store.warm(key, size));
        }
        present
    }

    /// Reads the per-page entries that [`Engine::apply`] will update for `results`.
    fn warm_results(&self, results: &[PageResult]) {
        let mut present = 0u32;
        for r in results {
            let (key, size) = (r.page.key(), r.page.size);
            if self.demoter_state {
                present += u32::from(self.history.warm(key, size));
            }
            present += self.warm_page(key, size, r.from);
        }
        std::hint::black_box(present);
    }

    /// Accounts for an executed batch.
    pub fn apply(&mut self, now: Nanos, report: &MigrationReport) {
        let window = Nanos::from_millis(self.config.pingpong_window_ms);
        let within = |t: Option<Nanos>| t.is_some_and(|t| now.saturating_sub(t) <= window);
        for (i, r) in report.results.iter().enumerate() {
            if i % WARM_BLOCK == 0 {
                // The next results' scattered entries, read first so that their cache misses
                // overlap (as in `observe`); this changes nothing.
                let end = report.results.len().min(i + WARM_BLOCK);
                self.warm_results(&report.results[i..end]);
            }
            let nr = r.page.size.nr_pages().0;
            let key = r.page.key();
            match r.outcome {
                MoveOutcome::Moved(_) => {
                    self.backoff.remove(key);
                }
                MoveOutcome::Failed(MoveError::Busy | MoveError::Access) => {
                    let b = self.backoff.get_or_insert_with(
                        key,
                        r.page.size,
                        Backoff::default,
                        |_, _, _| {},
                    );
                    b.failures = b.failures.saturating_add(1);
                    b.until = now.saturating_add(Backoff::wait(b.failures));
                    self.stats.engine.pgmigrate_backoff += nr;
                }
                MoveOutcome::Failed(_) => {}
            }
            let e = &mut self.stats.engine;
            // Huge folios are also counted one each, as the kernel's vmstat
            // `thp_migration_success` / `thp_migration_fail` count THPs (mm/migrate.c
            // `migrate_pages()`; tierd counts hugetlb folios too); the page counters count
            // their base pages.
            if r.page.size.is_huge() {
                let moved = matches!(r.outcome, MoveOutcome::Moved(node) if node == report.target);
                if moved {
                    e.thp_migration_success += 1;
                } else {
                    e.thp_migration_fail += 1;
                }
            }
            match (report.kind, r.outcome) {
                (MigrationKind::Promote, MoveOutcome::Moved(node)) => {
                    // The whole folio's range left the slow node, even if it was seen split
                    // since the plan.
                    if let Some(s) = self.stores.get_mut(&r.from) {
                        s.remove_overlapping(key, r.page.size);
                    }
                    if node != report.target {
                        e.pgpromote_fail_other += nr;
                    } else {
                        e.pgpromote_success += nr;
                        self.stats.nodes.entry(node).or_default().pgpromote_success += nr;
                        if self.demoter_state {
                            let h = self.history.get_or_insert_with(
                                key,
                                r.page.size,
                                MoveHistory::default,
                                |_, _, _| {},
                            );
                            if within(h.demoted_at.get()) {
                                e.pingpong_promoted += nr;
                            }
                            h.promoted_at = MoveStamp::at(now);
                        }
                    }
                    if self.topo.is_toptier(node) {
                        self.heat.set_tier(key, Tier::Fast);
                        if self.demoter_state {
                            self.fast
                                .insert(key, FastPage::new(node, r.page.size, false, now));
                        }
                    }
                }
                (MigrationKind::Demote, MoveOutcome::Moved(node)) => {
                    self.fast.remove(key);
                    if !self.topo.is_toptier(node) {
                        self.heat.set_tier(key, Tier::Slow);
                    }
                    if node != report.target {
                        e.pgdemote_fail += nr;
                    } else {
                        e.pgdemote_success += nr;
                        self.stats.nodes.entry(r.from).or_default().pgdemote_success += nr;
                        let h = self.history.get_or_insert_with(
                            key,
                            r.page.size,
                            MoveHistory::default,
                            |_, _, _| {},
                        );
                        if within(h.promoted_at.get()) {
                            e.pingpong_demoted += nr;
                        }
                        h.demoted_at = MoveStamp::at(now);
                    }
                }
                (_, MoveOutcome::Failed(MoveError::Split)) => {
                    // The folio as planned is gone: its records describe a unit that no
                    // longer exists (the split rule), and its moved pages follow as base-page
                    // results of their own, which count them.
                    self.fast.remove(key);
                    self.heat.remove(key);
                    if let Some(s) = self.stores.get_mut(&r.from) {
                        s.remove_overlapping(key, r.page.size);
                    }
                }
                (kind, MoveOutcome::Failed(err)) => {
                    if kind == MigrationKind::Demote {
                        e.pgdemote_fail += nr;
                    } else {
                        *match err {
                            MoveError::Busy => &mut e.pgpromote_fail_busy,
                            MoveError::NoMem => &mut e.pgpromote_fail_nomem,
                            MoveError::Access => &mut e.pgpromote_fail_access,
                            MoveError::NoProcess => &mut e.pgpromote_fail_gone,
                            MoveError::Fault | MoveError::NotPresent => &mut e.pgpromote_fail_fault,
                            MoveError::Other(_) | MoveError::Split => &mut e.pgpromote_fail_other,
                            MoveError::Deferred => &mut e.pgpromote_deferred,
                            MoveError::Untouched => &mut e.pgpromote_untouched,
                        } += nr;
                    }
                    match err {
                        MoveError::NoProcess => self.forget_space(r.page.space),
                        MoveError::Fault | MoveError::NotPresent => {
                            self.fast.remove(key);
                            self.heat.remove(key);
                            if let Some(s) = self.stores.get_mut(&r.from) {
                                s.remove(key);
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "huge_tests.rs"]
mod huge_tests;

#[cfg(test)]
mod claimed_tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::Claimed;
    use crate::types::{PageRef, PageSize, SpaceId, Vpn};

    fn page(space: u32, vpn: u64, size: u8) -> PageRef {
        PageRef {
            space: SpaceId(space),
            vpn: Vpn(vpn),
            size: PageSize::ALL[usize::from(size)],
            pfn: None,
        }
    }

    proptest! {
        /// The bitmaps answer exactly as a set of claimed (space, vpn) would, for base, 2 MiB
        /// and 1 GiB pages, aligned or not, across block edges and spaces, at the bottom of
        /// the vpn range and at its top (a replayed trace may name any vpn; a page there is
        /// cut at `u64::MAX`, as `PageRef::vpns` cuts it).
        #[test]
        fn claims_answer_as_a_set_of_pages_would(
            top in any::<bool>(),
            ops in prop::collection::vec((0u32..2, 0u64..(3 << 18), 0u8..3, any::<bool>()), 1..200)
        ) {
            let origin = if top { u64::MAX - (3 << 18) + 1 } else { 0 };
            let mut c = Claimed::default();
            let mut set: BTreeSet<(u32, u64)> = BTreeSet::new();
            for (space, vpn, size, aligned) in ops {
                let size = if size == 2 && vpn % 7 != 0 { 1 } else { size };
                let vpn = origin + vpn;
                let p = page(space, vpn, size);
                let n = p.size.nr_pages().0;
                let vpn = if aligned { vpn / n * n } else { vpn };
                let p = page(space, vpn, size);
                let end = vpn.saturating_add(n);
                let want = (vpn..end).any(|v| set.contains(&(space, v)));
                prop_assert_eq!(c.overlaps(p), want);
                if !want {
                    c.claim(p);
                    set.extend((vpn..end).map(|v| (space, v)));
                    // A claimed page overlaps itself, unless it covers no page at all: a base
                    // page at vpn u64::MAX is cut to nothing, as `PageRef::vpns` cuts it.
                    prop_assert_eq!(c.overlaps(p), vpn < end);
                }
            }
            c.clear();
            prop_assert!(!c.overlaps(page(0, 0, 2)) && !c.overlaps(page(1, 0, 2)));
        }
    }
}
