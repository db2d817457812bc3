//! From accessed ranges to engine observations: the one path every source's facts take.
//!
//! ```text
//!  AccessedRange* ──▶ folio of each page (FolioMap: THP, hugetlb, base, or unknown)
//!                 ──▶ budget (hottest first, at most `max_pages` folios a pass)
//!                 ──▶ node of each folio, at its head (one Locator call per process)
//!                 ──▶ slow-part filter (regions whose fast pages explain their heat)
//!                 ──▶ Observation* (one per folio, of the folio's size)
//! ```
//!
//! The folio map is a [`FolioMap`]: the daemon's is [`super::folio::ProcFolios`]
//! (kpageflags, else smaps, else every page unknown), the tests' [`super::folio::BaseFolios`]
//! or a table. A THP or hugetlb page is observed once, at its head, whatever part of it the
//! sources saw: a DAMON region that covers part of a THP makes the whole folio observed, with
//! the hottest covering region's count, so hot THP-backed memory is never split below the
//! folio size. Pages whose folio cannot be told are never observed (`folio_unknown`).
//!
//! The node lookup is a [`Locator`]: the daemon's is `move_pages(2)` with no target nodes
//! (`tierd_linux::mover::Mover`), the tests' a table. Folios the lookup finds absent are
//! dropped, and count against the budget, which bounds the lookups (they are syscalls).

use std::collections::BTreeMap;

use tierd_engine::types::{Nanos, NodeId, PageRef, PageSize, Pfn, SpaceId, Vpn};
use tierd_engine::Observation;

// The region rules are the engine's (pure, shared with the simulator's DAMON source); they are
// re-exported here, where the daemon applies them.
pub use tierd_engine::regions::{fast_heat_estimate, relative_min_nr_accesses, slow_part_is_hot};

use super::folio::{FolioMap, HugetlbPolicy};
use super::placement::{PlacementCache, Split};
use super::AccessedRange;

/// Finds the node of pages of one process.
pub trait Locator {
    /// Why a whole lookup failed (per-page failures are in the result).
    type Error;
    /// The node of each of `addrs` (page addresses in `pid`'s address space), or the
    /// negative `move_pages(2)` status as a positive errno (`ENOENT`: not present, `EFAULT`:
    /// not mapped, ...), in order.
    ///
    /// # Errors
    /// When the process cannot be asked at all (the daemon counts it and goes on).
    fn nodes(&mut self, pid: u32, addrs: &[u64]) -> Result<Vec<Result<NodeId, i32>>, Self::Error>;
    /// The node of physical frame `pfn`, when it can be told without asking the kernel
    /// (the daemon's: from the nodes' memory blocks, [`crate::read::topology::NodeFrames`]).
    /// Folios whose head frame the folio map read (pagemap) and this answers are not passed
    /// to [`Self::nodes`]. The default tells none.
    fn node_of_frame(&self, _pfn: Pfn) -> Option<NodeId> {
        None
    }
}

/// How a pass's ranges are turned into observations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocateParams {
    /// Pages located per pass, over all ranges (hottest ranges first).
    pub max_pages: u64,
    /// The absolute floor of a region's `nr_accesses` for its slow-tier pages to be observed.
    pub min_nr_accesses: u32,
    /// The floor relative to the pass's hottest region, per mille (see
    /// [`relative_min_nr_accesses`]).
    pub min_relative_permille: u32,
    /// Whether hugetlb folios are observed (and so moved).
    pub hugetlb: HugetlbPolicy,
}

/// What one [`locate`] did, for the daemon's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocateStats {
    /// Folios looked up (one node lookup each, at the folio's head).
    pub looked_up: u64,
    /// Of those, folios whose node came from their head's frame
    /// ([`Locator::node_of_frame`]) rather than from a location query.
    pub by_frame: u64,
    /// Base pages found absent (their folio's head not present or unmapped, or their process
    /// gone).
    pub absent: u64,
    /// Pages of ranges dropped because their process is not in scope (never looked up).
    pub out_of_scope: u64,
    /// Base pages beyond the pass's budget (never looked up).
    pub over_budget: u64,
    /// Slow-tier base pages of regions whose fast-tier pages explain their heat.
    pub slow_explained: u64,
    /// Huge folios (2 MiB or 1 GiB) observed.
    pub huge_folios: u64,
    /// Base pages of hugetlb folios not observed because of [`HugetlbPolicy::Leave`].
    pub hugetlb_left: u64,
    /// Base pages whose folio could not be told (never observed).
    pub folio_unknown: u64,
    /// Base pages the placement cache knew to be on a fast node: neither resolved nor looked
    /// up ([`PlacementCache`]).
    pub cached_fast: u64,
    /// Base pages of fast folios observed again after their run's verification came due
    /// (their weight scaled by the reads they were skipped for).
    pub reverified: u64,
    /// Accessed ranges (`nr_accesses` >= 1) kept from the engine by the floors, over budget
    /// or not, that may still hold slow pages (not every page known fast): a few hot pages
    /// diluted in a large region DAMON is still splitting. The daemon's pace stays active
    /// while this grows.
    pub hidden_below_floor: u64,
}

/// Turns one pass's `ranges` (hottest first, as sources order them) into observations in
/// `out`, one per folio: each page is mapped to its folio through `folios` and the folio is
/// observed once, as a [`PageRef`] of its size at its head, with the frame of its head where
/// the source named one, and weight the highest `nr_accesses` of the ranges covering any of
/// its pages. This is how a region-based source (DAMON) stops splitting hot THP-backed regions
/// below the folio size: a region that covers part of a THP makes the whole folio observed,
/// once, with the hottest covering region's count (`move_pages(2)` would move the whole folio
/// anyway: mm/migrate.c `add_folio_for_migration()` isolates the folio of the page it is
/// given).
///
/// At most `params.max_pages` folios are looked up (the budget counts lookups, which are
/// syscalls), each process asked once through `locator`, at its folios' heads; pages of
/// processes `in_scope` refuses are never resolved nor looked up; pages whose folio cannot be
/// told are never observed (`folio_unknown`); hugetlb folios are dropped under
/// [`HugetlbPolicy::Leave`] (`hugetlb_left`); absent folios are dropped; and the slow-tier
/// pages of regions whose heat their fast-tier pages explain are dropped (see
/// [`slow_part_is_hot`]; its counts are in base pages, each page taking its folio's node). A
/// slow-tier folio covered by several regions is kept if any of them keeps its slow part.
/// Returns the processes whose lookup failed as a whole, with why; their ranges are dropped.
#[allow(clippy::too_many_arguments)]
pub fn locate<L: Locator>(
    ranges: &[AccessedRange],
    params: LocateParams,
    fast_nodes: &[NodeId],
    in_scope: impl FnMut(u32) -> bool,
    locator: &mut L,
    folios: &mut impl FolioMap,
    stats: &mut LocateStats,
    out: &mut Vec<Observation>,
) -> Vec<(u32, L::Error)> {
    let now = ranges.iter().map(|r| r.time).max().unwrap_or_default();
    locate_cached(
        ranges,
        params,
        fast_nodes,
        in_scope,
        locator,
        folios,
        &mut PlacementCache::disabled(),
        now,
        stats,
        out,
    )
}

/// [`locate`] with a [`PlacementCache`]: the pages of each range that `cache` knows to be on a
/// fast node (and whose verification is not due at `now`) are neither resolved nor looked up
/// nor observed; they count as fast pages of their range for the slow-part filter. Pages it
/// locates are learned (fast ones join a run, others leave it), and fast folios of runs whose
/// verification was due are observed with their weight scaled by the reads they were skipped
/// for ([`PlacementCache::weight_scale`]).
#[allow(clippy::too_many_arguments, clippy::too_many_lines)]
pub fn locate_cached<L: Locator>(
    ranges: &[AccessedRange],
    params: LocateParams,
    fast_nodes: &[NodeId],
    mut in_scope: impl FnMut(u32) -> bool,
    locator: &mut L,
    folios: &mut impl FolioMap,
    cache: &mut PlacementCache,
    now: Nanos,
    stats: &mut LocateStats,
    out: &mut Vec<Observation>,
) -> Vec<(u32, L::Error)> {
    /// One folio to look up and, maybe, observe.
    struct Folio {
        head: Vpn,
        size: PageSize,
        weight: u32,
        pfn: Option<Pfn>,
        /// The head's frame as the folio map read it.
        frame: Option<Pfn>,
        range: AccessedRange,
        keep: bool,
    }
    /// One range's pages, by folio: `(index into its process's folios, pages)`, and its pages
    /// the cache knows to be on a fast node (not resolved).
    struct Covered {
        range: AccessedRange,
        parts: Vec<(usize, u64)>,
        known_fast: u64,
        /// Its pages that tierd promoted (and has not demoted since).
        promoted: u64,
        split: Split,
    }
    folios.begin_pass();
    let mut budget = params.max_pages;
    let hottest = ranges.iter().map(|r| r.nr_accesses).max().unwrap_or(0);
    let mut folios_of: BTreeMap<u32, (Vec<Folio>, rustc_hash::FxHashMap<u64, usize>)> =
        BTreeMap::new();
    let mut covered: Vec<Covered> = Vec::new();
    // In scope, beyond the budget: not covered, but still counted for the pace below.
    let mut skipped: Vec<&AccessedRange> = Vec::new();
    let mut vpns = Vec::new();
    let mut found = Vec::new();
    let mut frames = Vec::new();
    for r in ranges {
        if !in_scope(r.pid) {
            stats.out_of_scope += r.nr_pages;
            continue;
        }
        if budget == 0 {
            stats.over_budget += r.nr_pages;
            skipped.push(r);
            continue;
        }
        let (list, index) = folios_of.entry(r.pid).or_default();
        let mut parts: Vec<(usize, u64)> = Vec::new();
        let end = r.start.0 + r.nr_pages;
        let split = cache.split(r.pid, r.start.0, end, now);
        let known_fast = split.known_pages();
        stats.cached_fast += known_fast;
        let gaps = split.gaps(r.start.0, end);
        'range: for (g, &(gap_start, gap_end)) in gaps.iter().enumerate() {
            let mut at_vpn = gap_start;
            while at_vpn < gap_end {
                // Resolve in chunks of about what the budget can still take (at least one
                // huge page's worth): a huge range does not read the folios of pages it
                // cannot look up.
                let n = (gap_end - at_vpn).min(budget.max(PageSize::Huge2M.nr_pages().0));
                vpns.clear();
                vpns.extend((at_vpn..at_vpn + n).map(Vpn));
                found.clear();
                frames.clear();
                folios.resolve_frames(r.pid, &vpns, &mut found, &mut frames);
                for (i, vpn) in vpns.iter().enumerate() {
                    let Some(Some(f)) = found.get(i).copied() else {
                        stats.folio_unknown += 1;
                        continue;
                    };
                    if f.hugetlb && params.hugetlb == HugetlbPolicy::Leave {
                        stats.hugetlb_left += 1;
                        continue;
                    }
                    let at = if let Some(&at) = index.get(&f.head.0) {
                        let folio: &mut Folio = &mut list[at];
                        folio.weight = folio.weight.max(r.nr_accesses);
                        at
                    } else {
                        if budget == 0 {
                            stats.over_budget += gap_end - vpn.0
                                + gaps[g + 1..].iter().map(|(a, b)| b - a).sum::<u64>();
                            break 'range;
                        }
                        budget -= 1;
                        // The frame names the page the source saw: a single-page range; the
                        // head's frame follows, a folio being physically contiguous and
                        // mapped at its natural alignment (what FolioOf promises).
                        let pfn = r
                            .pfn
                            .filter(|_| r.nr_pages == 1)
                            .and_then(|p| p.0.checked_sub(vpn.0 - f.head.0))
                            .map(Pfn);
                        list.push(Folio {
                            head: f.head,
                            size: f.size,
                            weight: r.nr_accesses,
                            pfn,
                            frame: frames.get(i).copied().flatten(),
                            range: *r,
                            keep: false,
                        });
                        index.insert(f.head.0, list.len() - 1);
                        list.len() - 1
                    };
                    match parts.last_mut() {
                        Some((last, n)) if *last == at => *n += 1,
                        _ => parts.push((at, 1)),
                    }
                }
                at_vpn += n;
            }
        }
        covered.push(Covered {
            range: *r,
            parts,
            known_fast,
            promoted: cache.promoted_pages(r.pid, r.start.0, end),
            split,
        });
    }
    // The relative floor is taken from the hottest region that may still hold slow pages
    // or holds pages tierd promoted. A region whose every page is known to be on a fast
    // node (the placement cache) and got there without tierd cannot be promoted, and a
    // small, very hot one there (a load generator's buffers, a server's connection state)
    // would otherwise set a floor that hides every candidate of a process whose hot set
    // DAMON still sees diluted in larger regions (lab memcached). A region tierd promoted
    // is the hot set the others are measured against: were it left out once wholly fast,
    // the floor would fall to the hottest region still slow, a lukewarm one, and a
    // quarter of its count would let through regions touched only by a server's own
    // housekeeping (memcached's LRU maintainer and crawler reading cold items' headers;
    // docs/lab.md, "Without the access check, finer regions"). Before anything is known
    // fast, every region counts.
    let hottest_candidate = covered
        .iter()
        .filter(|c| c.known_fast < c.range.nr_pages || c.promoted > 0)
        .map(|c| c.range.nr_accesses)
        .max()
        .unwrap_or(hottest);
    let min_acc = relative_min_nr_accesses(
        hottest_candidate,
        params.min_nr_accesses,
        params.min_relative_permille,
    );
    let hidden = |r: &AccessedRange, known_fast: u64| {
        r.nr_accesses >= 1 && r.nr_accesses < min_acc && known_fast < r.nr_pages
    };
    stats.hidden_below_floor += covered
        .iter()
        .filter(|c| hidden(&c.range, c.known_fast))
        .count() as u64;
    stats.hidden_below_floor += skipped
        .iter()
        .filter(|r| {
            let end = r.start.0.saturating_add(r.nr_pages);
            hidden(r, cache.split(r.pid, r.start.0, end, now).known_pages())
        })
        .count() as u64;
    // Every process's lookup first, then the filter: the heat credited to a region's fast
    // pages is estimated from all the regions of this pass.
    let mut nodes_of: BTreeMap<u32, Vec<Result<NodeId, i32>>> = BTreeMap::new();
    let mut failed = Vec::new();
    let mut addrs = Vec::new();
    let mut asked = Vec::new();
    for (&pid, (list, _)) in &folios_of {
        if list.is_empty() {
            continue;
        }
        stats.looked_up += list.len() as u64;
        // Folios whose head frame tells the node need no query; the others are asked in one
        // call per process.
        let mut nodes: Vec<Result<NodeId, i32>> = Vec::with_capacity(list.len());
        addrs.clear();
        asked.clear();
        for (at, f) in list.iter().enumerate() {
            match f.frame.and_then(|p| locator.node_of_frame(p)) {
                Some(n) => nodes.push(Ok(n)),
                None => {
                    nodes.push(Err(0));
                    addrs.push(f.head.addr());
                    asked.push(at);
                }
            }
        }
        stats.by_frame += (list.len() - asked.len()) as u64;
        if addrs.is_empty() {
            nodes_of.insert(pid, nodes);
            continue;
        }
        match locator.nodes(pid, &addrs) {
            Ok(n) => {
                for (&at, r) in asked.iter().zip(n) {
                    nodes[at] = r;
                }
                nodes_of.insert(pid, nodes);
            }
            Err(e) => failed.push((pid, e)),
        }
    }
    let node = |pid: u32, at: usize| -> Option<NodeId> { nodes_of.get(&pid)?.get(at)?.ok() };
    // Per range: (nr_accesses, fast pages, present pages), in base pages.
    let counts: Vec<(u32, u64, u64)> = covered
        .iter()
        .map(|c| {
            let (mut fast, mut present) = (c.known_fast, c.known_fast);
            for &(at, n) in &c.parts {
                if let Some(nd) = node(c.range.pid, at) {
                    present += n;
                    if fast_nodes.contains(&nd) {
                        fast += n;
                    }
                }
            }
            (c.range.nr_accesses, fast, present)
        })
        .collect();
    let fast_heat = fast_heat_estimate(&counts, hottest);
    for (c, &(nr, fast, present)) in covered.iter().zip(&counts) {
        let pages: u64 = c.parts.iter().map(|p| p.1).sum::<u64>() + c.known_fast;
        stats.absent += pages - present;
        let keep_slow = slow_part_is_hot(nr, fast_heat, fast, present - fast, min_acc);
        if !keep_slow {
            stats.slow_explained += present - fast;
        }
        let Some((list, _)) = folios_of.get_mut(&c.range.pid) else {
            continue;
        };
        for &(at, _) in &c.parts {
            let is_fast = node(c.range.pid, at).is_some_and(|nd| fast_nodes.contains(&nd));
            if keep_slow || is_fast {
                list[at].keep = true;
            }
        }
    }
    // The due parts of every range, by process: the weight scale of the fast folios in them.
    let mut due: BTreeMap<u32, Vec<(u64, u64, Nanos)>> = BTreeMap::new();
    for c in &covered {
        if !c.split.due.is_empty() {
            due.entry(c.range.pid)
                .or_default()
                .extend(c.split.due.iter().copied());
        }
    }
    for (pid, (list, _)) in folios_of {
        let due = due.get(&pid);
        // What was located is learned in runs of adjacent folios on one node (one cache update
        // per run, not per page).
        let mut run: Option<(u64, u64, NodeId)> = None;
        for (at, f) in list.into_iter().enumerate() {
            let Some(page_node) = node(pid, at) else {
                continue;
            };
            let is_fast = fast_nodes.contains(&page_node);
            let pages = f.size.nr_pages().0;
            run = match run {
                Some((a, b, n)) if b == f.head.0 && n == page_node => Some((a, b + pages, n)),
                prev => {
                    if let Some((a, b, n)) = prev {
                        cache.learn(pid, a, b, n, fast_nodes.contains(&n), now);
                    }
                    Some((f.head.0, f.head.0 + pages, page_node))
                }
            };
            if !f.keep {
                continue;
            }
            if f.size.is_huge() {
                stats.huge_folios += 1;
            }
            let mut weight = f.weight;
            if is_fast {
                if let Some(obs) = due.and_then(|d| {
                    d.iter()
                        .find(|(a, b, _)| (*a..*b).contains(&f.head.0))
                        .map(|(_, _, t)| *t)
                }) {
                    stats.reverified += pages;
                    weight = weight.saturating_mul(cache.weight_scale(obs, now));
                }
            }
            out.push(Observation {
                page: PageRef {
                    pfn: f.pfn,
                    ..PageRef::sized(SpaceId(pid), f.head, f.size)
                },
                page_node,
                accessing_node: f.range.accessing_node,
                source: f.range.kind,
                time: f.range.time,
                weight,
            });
        }
        if let Some((a, b, n)) = run {
            cache.learn(pid, a, b, n, fast_nodes.contains(&n), now);
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::folio::{BaseFolios, FolioMethod, FolioOf};
    use std::collections::HashMap;
    use tierd_engine::types::{Nanos, Pfn};
    use tierd_engine::SourceKind;

    /// The virtual pages of the observations that found their page on `node`, in order.
    fn vpns_on(out: &[Observation], node: NodeId) -> Vec<u64> {
        out.iter()
            .filter(|o| o.page_node == node)
            .map(|o| o.page.vpn.0)
            .collect()
    }

    /// A table of page -> node per process; a missing page is not present (ENOENT); a
    /// missing process fails as a whole (ESRCH).
    #[derive(Default)]
    struct FakeLocator {
        pages: HashMap<(u32, u64), NodeId>,
        calls: Vec<(u32, usize)>,
        /// Frame -> node, for `node_of_frame`.
        frames: HashMap<u64, NodeId>,
    }

    impl Locator for FakeLocator {
        type Error = i32;
        fn nodes(&mut self, pid: u32, addrs: &[u64]) -> Result<Vec<Result<NodeId, i32>>, i32> {
            self.calls.push((pid, addrs.len()));
            if !self.pages.keys().any(|(p, _)| *p == pid) {
                return Err(libc::ESRCH);
            }
            Ok(addrs
                .iter()
                .map(|a| self.pages.get(&(pid, a >> 12)).copied().ok_or(libc::ENOENT))
                .collect())
        }
        fn node_of_frame(&self, pfn: Pfn) -> Option<NodeId> {
            self.frames.get(&pfn.0).copied()
        }
    }

    fn range(pid: u32, start: u64, nr_pages: u64, nr_accesses: u32) -> AccessedRange {
        AccessedRange {
            pid,
            start: Vpn(start),
            nr_pages,
            time: Nanos(3),
            kind: SourceKind::AccessedBitScan,
            accessing_node: None,
            nr_accesses,
            pfn: None,
        }
    }

    const PARAMS: LocateParams = LocateParams {
        max_pages: 1000,
        min_nr_accesses: 1,
        min_relative_permille: 0,
        hugetlb: HugetlbPolicy::Leave,
    };
    const FAST: [NodeId; 1] = [NodeId(0)];

    #[test]
    fn budget_scope_absent_pages_and_one_lookup_per_process() {
        let mut loc = FakeLocator::default();
        for v in 0..8 {
            loc.pages.insert((1, v), NodeId(1));
        }
        loc.pages.insert((2, 100), NodeId(1));
        let ranges = [
            range(1, 0, 4, 5),
            range(3, 0, 9, 5),   // out of scope: never looked up
            range(2, 100, 2, 4), // page 101 absent
            range(1, 4, 4, 3),   // budget 7: only 1 of these 4
        ];
        let mut stats = LocateStats::default();
        let mut out = Vec::new();
        let failed = locate(
            &ranges,
            LocateParams {
                max_pages: 7,
                ..PARAMS
            },
            &FAST,
            |pid| pid != 3,
            &mut loc,
            &mut BaseFolios,
            &mut stats,
            &mut out,
        );
        assert!(failed.is_empty());
        assert_eq!(loc.calls, vec![(1, 5), (2, 2)], "one lookup per process");
        let got: Vec<(u32, u64, u16, u32)> = out
            .iter()
            .map(|o| (o.page.space.0, o.page.vpn.0, o.page_node.0, o.weight))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, 0, 1, 5),
                (1, 1, 1, 5),
                (1, 2, 1, 5),
                (1, 3, 1, 5),
                (1, 4, 1, 3),
                (2, 100, 1, 4)
            ]
        );
        assert_eq!(
            stats,
            LocateStats {
                looked_up: 7,
                absent: 1,
                out_of_scope: 9,
                over_budget: 3,
                ..LocateStats::default()
            }
        );
    }

    #[test]
    fn a_failed_lookup_drops_that_process_only() {
        let mut loc = FakeLocator::default();
        loc.pages.insert((1, 0), NodeId(1));
        let mut stats = LocateStats::default();
        let mut out = Vec::new();
        let failed = locate(
            &[range(1, 0, 1, 2), range(5, 0, 3, 2)],
            PARAMS,
            &FAST,
            |_| true,
            &mut loc,
            &mut BaseFolios,
            &mut stats,
            &mut out,
        );
        assert_eq!(failed, vec![(5, libc::ESRCH)]);
        assert_eq!(out.len(), 1);
        assert_eq!(stats.absent, 3);
    }

    #[test]
    fn a_region_whose_fast_pages_explain_it_drops_its_slow_pages_only() {
        // Region A: 9 of 10 pages promoted, counted 6 (the typical promoted region's heat).
        // Region B: a straddler, 7 promoted and 3 cold on the slow node, counting 4 = 0.7 x
        // 6: its slow pages are explained. Region C, all slow and hot, stays.
        let mut loc = FakeLocator::default();
        for v in 0..10 {
            loc.pages.insert((1, v), NodeId(if v < 9 { 0 } else { 1 }));
        }
        for v in 10..20 {
            loc.pages.insert((1, v), NodeId(if v < 17 { 0 } else { 1 }));
        }
        for v in 20..25 {
            loc.pages.insert((1, v), NodeId(1));
        }
        let mut stats = LocateStats::default();
        let mut out = Vec::new();
        locate(
            &[range(1, 0, 10, 6), range(1, 10, 10, 4), range(1, 20, 5, 6)],
            LocateParams {
                min_nr_accesses: 2,
                ..PARAMS
            },
            &FAST,
            |_| true,
            &mut loc,
            &mut BaseFolios,
            &mut stats,
            &mut out,
        );
        assert_eq!(vpns_on(&out, NodeId(1)), vec![9, 20, 21, 22, 23, 24]);
        assert_eq!(stats.slow_explained, 3);
        // Fast pages of the straddler are still observed (their heat is real).
        assert_eq!(
            out.iter()
                .filter(|o| (10..20).contains(&o.page.vpn.0))
                .count(),
            7
        );
    }

    /// The two ranges of the floor tests: 10 pages on the fast node counting 20, 10 on the
    /// slow node counting 2 (a fifth of the floor's quarter), in a placement cache trusted for
    /// 10 s; and one pass of `locate_cached` over them with a floor of 250 per mille,
    /// returning its stats and the slow pages it observed.
    struct FloorCase {
        loc: FakeLocator,
        cache: crate::source::placement::PlacementCache,
    }

    fn sec(s: u64) -> Nanos {
        Nanos(s * 1_000_000_000)
    }

    impl FloorCase {
        fn new() -> Self {
            let mut loc = FakeLocator::default();
            for v in 0..10 {
                loc.pages.insert((1, v), NodeId(0));
            }
            for v in 100..110 {
                loc.pages.insert((1, v), NodeId(1));
            }
            let cache = crate::source::placement::PlacementCache::new(sec(10), Nanos(500_000_000));
            FloorCase { loc, cache }
        }

        fn pass(&mut self, now: Nanos) -> (LocateStats, Vec<u64>) {
            let params = LocateParams {
                min_relative_permille: 250,
                ..PARAMS
            };
            let ranges = [range(1, 0, 10, 20), range(1, 100, 10, 2)];
            let mut stats = LocateStats::default();
            let mut out = Vec::new();
            locate_cached(
                &ranges,
                params,
                &FAST,
                |_| true,
                &mut self.loc,
                &mut BaseFolios,
                &mut self.cache,
                now,
                &mut stats,
                &mut out,
            );
            (stats, vpns_on(&out, NodeId(1)))
        }
    }

    /// The relative floor comes from the hottest range that may still hold slow pages: once
    /// a small, very hot range is known fast, it no longer hides a colder one on the slow
    /// node; until then the hidden range is counted for the daemon's pace.
    #[test]
    fn a_range_known_fast_no_longer_sets_the_relative_floor() {
        let mut case = FloorCase::new();
        // Nothing known yet: the hot fast range sets the floor at 5; the slow one (2) is
        // hidden, and counted.
        let (stats, slow) = case.pass(sec(1));
        assert_eq!((stats.hidden_below_floor, slow), (1, vec![]));
        // The hot range is known fast now: the floor comes from the slow range itself.
        let (stats, slow) = case.pass(sec(2));
        assert_eq!(
            (stats.hidden_below_floor, slow),
            (0, (100..110).collect::<Vec<u64>>())
        );
    }

    /// ... unless tierd promoted it: a hot set tierd moved stays the measure of the others,
    /// so once it is known fast a lukewarm range on the slow node (a server's housekeeping
    /// touching cold items) is still hidden below a quarter of it, not promoted.
    #[test]
    fn a_range_tierd_promoted_still_sets_the_relative_floor_once_known_fast() {
        let mut case = FloorCase::new();
        // tierd promoted the hot range.
        case.cache.moved(1, 0, 10, Some(NodeId(0)), sec(1));
        let (stats, slow) = case.pass(sec(2));
        assert_eq!(stats.cached_fast, 10, "the hot range is known fast");
        assert_eq!(stats.hidden_below_floor, 1);
        assert_eq!(slow, Vec::<u64>::new());
    }

    /// Issue 14 (cost): a settled hot set is located once per trust period, not on every
    /// read; the cached fast pages still explain their region's heat; due runs come back
    /// with their weight scaled by the reads they were skipped for.
    #[test]
    fn the_placement_cache_skips_known_fast_pages_and_keeps_the_slow_part_filter() {
        use crate::source::placement::PlacementCache;
        let mut loc = FakeLocator::default();
        // The straddler of the test above: 7 of 10 pages promoted, 3 cold on the slow node.
        for v in 10..20 {
            loc.pages.insert((1, v), NodeId(if v < 17 { 0 } else { 1 }));
        }
        for v in 0..10 {
            loc.pages.insert((1, v), NodeId(if v < 9 { 0 } else { 1 }));
        }
        let mut cache = PlacementCache::new(sec(10), Nanos(500_000_000));
        let params = LocateParams {
            min_nr_accesses: 2,
            ..PARAMS
        };
        let ranges = [range(1, 0, 10, 6), range(1, 10, 10, 4)];
        let run = |loc: &mut FakeLocator, cache: &mut PlacementCache, now: Nanos| {
            let mut stats = LocateStats::default();
            let mut out = Vec::new();
            locate_cached(
                &ranges,
                params,
                &FAST,
                |_| true,
                loc,
                &mut BaseFolios,
                cache,
                now,
                &mut stats,
                &mut out,
            );
            (stats, out)
        };
        // First read: everything located, the fast pages learned.
        let (stats, out) = run(&mut loc, &mut cache, sec(1));
        assert_eq!(stats.looked_up, 20);
        assert_eq!(stats.cached_fast, 0);
        assert_eq!(cache.pages(), 16);
        assert_eq!(
            out.len(),
            9 + 1 + 7,
            "the straddler's slow pages are explained"
        );
        // Second read, 2 s later: only the slow pages are located; the cached fast ones
        // still explain the straddler (its 3 slow pages stay out) and feed nothing.
        loc.calls.clear();
        let (stats, out) = run(&mut loc, &mut cache, sec(3));
        assert_eq!(stats.cached_fast, 16);
        assert_eq!(stats.looked_up, 4);
        assert_eq!(loc.calls, vec![(1, 4)]);
        let seen: Vec<u64> = out.iter().map(|o| o.page.vpn.0).collect();
        assert_eq!(seen, vec![9], "the hot region's slow page only");
        assert_eq!(stats.slow_explained, 3);
        // Twelve seconds after learning, the runs are due: located again, the fast pages
        // observed with their weight times the 22 reads (0.5 s) they missed.
        let (stats, out) = run(&mut loc, &mut cache, sec(12));
        assert_eq!(stats.cached_fast, 0);
        assert_eq!(stats.reverified, 16);
        let w: Vec<(u64, u32)> = out
            .iter()
            .filter(|o| o.page_node == NodeId(0))
            .map(|o| (o.page.vpn.0, o.weight))
            .take(2)
            .collect();
        assert_eq!(w, vec![(0, 6 * 22), (1, 6 * 22)]);
        // A page the kernel demoted behind tierd's back leaves the cache once located.
        loc.pages.insert((1, 3), NodeId(1));
        let (stats, _) = run(&mut loc, &mut cache, sec(30));
        assert_eq!(stats.looked_up, 20, "{stats:?} {cache:?}");
        assert_eq!(
            cache.split(1, 0, 10, sec(31)).known,
            vec![(0, 3), (4, 9)],
            "{cache:?}"
        );
    }

    #[test]
    fn the_frame_is_kept_for_single_pages_only() {
        let mut loc = FakeLocator::default();
        for v in 0..4 {
            loc.pages.insert((1, v), NodeId(1));
        }
        let one = AccessedRange {
            pfn: Some(Pfn(77)),
            nr_accesses: 0,
            ..range(1, 0, 1, 0)
        };
        let many = AccessedRange {
            pfn: Some(Pfn(99)),
            ..range(1, 1, 3, 2)
        };
        let mut out = Vec::new();
        locate(
            &[one, many],
            PARAMS,
            &FAST,
            |_| true,
            &mut loc,
            &mut BaseFolios,
            &mut LocateStats::default(),
            &mut out,
        );
        assert_eq!(out[0].page.pfn, Some(Pfn(77)));
        assert!(out[1..].iter().all(|o| o.page.pfn.is_none()));
    }

    /// `(pid, first page, end page, Some((size, hugetlb)))` for huge folios, `None` for pages
    /// whose folio is unknown.
    type Region = (u32, u64, u64, Option<(PageSize, bool)>);

    /// Folios by virtual range ([`Region`]s); other pages are base pages.
    #[derive(Default)]
    struct FakeFolios {
        regions: Vec<Region>,
        passes: u32,
    }

    impl FolioMap for FakeFolios {
        fn resolve(
            &mut self,
            pid: u32,
            vpns: &[Vpn],
            out: &mut Vec<Option<FolioOf>>,
        ) -> FolioMethod {
            for &v in vpns {
                let r = self
                    .regions
                    .iter()
                    .find(|(p, s, e, _)| *p == pid && (*s..*e).contains(&v.0));
                out.push(match r {
                    None => Some(FolioOf::base(v)),
                    Some((_, _, _, Some((size, hugetlb)))) => {
                        Some(FolioOf::sized(v, *size, *hugetlb))
                    }
                    Some((_, _, _, None)) => None,
                });
            }
            FolioMethod::Kpageflags
        }
        fn begin_pass(&mut self) {
            self.passes += 1;
        }
    }

    fn run_folios(
        ranges: &[AccessedRange],
        params: LocateParams,
        loc: &mut FakeLocator,
        folios: &mut FakeFolios,
    ) -> (Vec<Observation>, LocateStats) {
        let mut stats = LocateStats::default();
        let mut out = Vec::new();
        let failed = locate(
            ranges,
            params,
            &FAST,
            |_| true,
            loc,
            folios,
            &mut stats,
            &mut out,
        );
        assert!(failed.is_empty());
        (out, stats)
    }

    #[test]
    fn a_thp_half_covered_by_a_hot_region_is_observed_once_at_its_head() {
        // A THP at pages 512..1024 on the slow node; a hot region covers its second half and
        // the base pages after it, a cooler one its first half.
        let mut loc = FakeLocator::default();
        for v in 512..1100 {
            loc.pages.insert((1, v), NodeId(1));
        }
        let mut folios = FakeFolios {
            regions: vec![(1, 512, 1024, Some((PageSize::Huge2M, false)))],
            ..FakeFolios::default()
        };
        let (out, stats) = run_folios(
            &[range(1, 768, 300, 9), range(1, 512, 256, 2)],
            PARAMS,
            &mut loc,
            &mut folios,
        );
        assert_eq!(folios.passes, 1);
        let thp: Vec<_> = out.iter().filter(|o| o.page.size.is_huge()).collect();
        assert_eq!(thp.len(), 1, "{out:?}");
        assert_eq!(thp[0].page.vpn, Vpn(512));
        assert_eq!(thp[0].page.size, PageSize::Huge2M);
        assert_eq!(thp[0].weight, 9, "the hottest covering region's count");
        assert_eq!(thp[0].page_node, NodeId(1));
        // The base pages after it, each once; one lookup for the THP and one per base page.
        assert_eq!(out.len(), 1 + 44);
        assert!(out[1..].iter().all(|o| o.page.size == PageSize::Base));
        assert_eq!(loc.calls, vec![(1, 45)]);
        assert_eq!(stats.looked_up, 45);
        assert_eq!(stats.huge_folios, 1);
        assert_eq!(stats.folio_unknown, 0);
    }

    #[test]
    fn hugetlb_pages_are_left_or_moved_by_policy() {
        // A 1 GiB hugetlb page at 1 << 18 and a 2 MiB THP at 0.
        let gig = 1u64 << 18;
        let mut loc = FakeLocator::default();
        loc.pages.insert((1, gig), NodeId(1));
        loc.pages.insert((1, 0), NodeId(1));
        let regions = vec![
            (1, gig, 2 * gig, Some((PageSize::Huge1G, true))),
            (1, 0, 512, Some((PageSize::Huge2M, false))),
        ];
        let ranges = [range(1, gig + 1000, 3000, 5), range(1, 10, 20, 4)];
        let mut folios = FakeFolios {
            regions: regions.clone(),
            ..FakeFolios::default()
        };
        let (out, stats) = run_folios(&ranges, PARAMS, &mut loc, &mut folios);
        assert_eq!(out.len(), 1, "the THP only");
        assert_eq!(out[0].page.vpn, Vpn(0));
        assert_eq!(stats.hugetlb_left, 3000);
        assert_eq!(stats.looked_up, 1);
        let mut folios = FakeFolios {
            regions,
            ..FakeFolios::default()
        };
        let move_them = LocateParams {
            hugetlb: HugetlbPolicy::Move,
            ..PARAMS
        };
        let (out, stats) = run_folios(&ranges, move_them, &mut loc, &mut folios);
        let got: Vec<(u64, PageSize, u32)> = out
            .iter()
            .map(|o| (o.page.vpn.0, o.page.size, o.weight))
            .collect();
        assert_eq!(
            got,
            vec![(gig, PageSize::Huge1G, 5), (0, PageSize::Huge2M, 4)],
            "folios in the order first seen (hottest range first)"
        );
        assert_eq!(stats.hugetlb_left, 0);
        assert_eq!(stats.huge_folios, 2);
        assert_eq!(stats.looked_up, 2);
    }

    #[test]
    fn unknown_pages_are_dropped_and_counted() {
        let mut loc = FakeLocator::default();
        for v in 0..64 {
            loc.pages.insert((1, v), NodeId(1));
        }
        let mut folios = FakeFolios {
            regions: vec![(1, 16, 48, None)],
            ..FakeFolios::default()
        };
        let (out, stats) = run_folios(&[range(1, 0, 64, 3)], PARAMS, &mut loc, &mut folios);
        assert_eq!(out.len(), 32);
        assert!(out.iter().all(|o| !(16..48).contains(&o.page.vpn.0)));
        assert_eq!(stats.folio_unknown, 32);
        assert_eq!(stats.looked_up, 32);
        assert_eq!(stats.absent, 0);
    }

    #[test]
    fn the_budget_counts_folio_lookups_not_pages() {
        // Four THPs and a budget of 3: three looked up, the fourth's pages over budget.
        let mut loc = FakeLocator::default();
        for h in 0..4u64 {
            loc.pages.insert((1, h * 512), NodeId(1));
        }
        let mut folios = FakeFolios {
            regions: vec![(1, 0, 2048, Some((PageSize::Huge2M, false)))],
            ..FakeFolios::default()
        };
        let (out, stats) = run_folios(
            &[range(1, 0, 2048, 5)],
            LocateParams {
                max_pages: 3,
                ..PARAMS
            },
            &mut loc,
            &mut folios,
        );
        let heads: Vec<u64> = out.iter().map(|o| o.page.vpn.0).collect();
        assert_eq!(heads, vec![0, 512, 1024]);
        assert_eq!(loc.calls, vec![(1, 3)]);
        assert_eq!(stats.over_budget, 512);
        assert_eq!(stats.huge_folios, 3);
    }

    #[test]
    fn a_slow_thp_explained_by_one_region_is_kept_by_another_that_keeps_its_slow_part() {
        // The THP at 512 is on the slow node. A straddling region covers 12 fast base pages
        // and 100 pages of the THP with a count its fast pages explain; a hot region covers
        // the rest of the THP.
        let mut loc = FakeLocator::default();
        for v in 400..512 {
            loc.pages.insert((1, v), NodeId(0));
        }
        loc.pages.insert((1, 512), NodeId(1));
        let mut folios = FakeFolios {
            regions: vec![(1, 512, 1024, Some((PageSize::Huge2M, false)))],
            ..FakeFolios::default()
        };
        // A fully promoted hot region sets the fast heat at 6.
        let promoted = range(1, 400, 100, 6);
        let straddler = range(1, 500, 112, 1); // 12 fast pages, 100 slow: 1 cannot be left
        let (out, stats) = run_folios(
            &[promoted, straddler],
            LocateParams {
                min_nr_accesses: 2,
                ..PARAMS
            },
            &mut loc,
            &mut folios,
        );
        assert!(
            out.iter().all(|o| o.page.vpn.0 != 512),
            "explained: dropped"
        );
        assert_eq!(stats.slow_explained, 100, "in base pages");
        let hot = range(1, 612, 412, 6);
        let (out, _) = run_folios(
            &[promoted, straddler, hot],
            LocateParams {
                min_nr_accesses: 2,
                ..PARAMS
            },
            &mut loc,
            &mut folios,
        );
        let thp: Vec<_> = out.iter().filter(|o| o.page.vpn.0 == 512).collect();
        assert_eq!(thp.len(), 1, "kept through the hot region, once");
        assert_eq!(thp[0].weight, 6);
    }

    /// Base pages whose frame is `vpn + 1000`, except pages from `hidden` on (no frame read).
    struct FramedFolios {
        hidden: u64,
    }

    impl FolioMap for FramedFolios {
        fn resolve(
            &mut self,
            _pid: u32,
            vpns: &[Vpn],
            out: &mut Vec<Option<FolioOf>>,
        ) -> FolioMethod {
            out.extend(vpns.iter().map(|&v| Some(FolioOf::base(v))));
            FolioMethod::Kpageflags
        }
        fn resolve_frames(
            &mut self,
            pid: u32,
            vpns: &[Vpn],
            out: &mut Vec<Option<FolioOf>>,
            frames: &mut Vec<Option<Pfn>>,
        ) -> FolioMethod {
            frames.extend(
                vpns.iter()
                    .map(|v| (v.0 < self.hidden).then_some(Pfn(v.0 + 1000))),
            );
            self.resolve(pid, vpns, out)
        }
    }

    #[test]
    fn folios_whose_frame_tells_the_node_are_not_queried() {
        // Pages 0..8 of pid 1 on the slow node; frames 1000..1006 are in a block of node 1,
        // frame 1006 in none (hot-added since the map was read), pages 7.. have no frame.
        let mut loc = FakeLocator::default();
        for v in 0..8 {
            loc.pages.insert((1, v), NodeId(1));
        }
        for f in 1000..1006 {
            loc.frames.insert(f, NodeId(1));
        }
        let mut stats = LocateStats::default();
        let mut out = Vec::new();
        let failed = locate(
            &[range(1, 0, 8, 3)],
            PARAMS,
            &FAST,
            |_| true,
            &mut loc,
            &mut FramedFolios { hidden: 7 },
            &mut stats,
            &mut out,
        );
        assert!(failed.is_empty());
        assert_eq!(loc.calls, vec![(1, 2)], "pages 6 and 7 only");
        assert_eq!(stats.looked_up, 8);
        assert_eq!(stats.by_frame, 6);
        let got: Vec<(u64, u16)> = out.iter().map(|o| (o.page.vpn.0, o.page_node.0)).collect();
        assert_eq!(got, (0..8).map(|v| (v, 1)).collect::<Vec<_>>());
        // Every folio told by its frame: no query at all.
        let mut loc2 = FakeLocator {
            frames: loc.frames.clone(),
            ..FakeLocator::default()
        };
        let mut out = Vec::new();
        locate(
            &[range(1, 0, 4, 3)],
            PARAMS,
            &FAST,
            |_| true,
            &mut loc2,
            &mut FramedFolios { hidden: 99 },
            &mut LocateStats::default(),
            &mut out,
        );
        assert!(loc2.calls.is_empty());
        assert_eq!(out.len(), 4);
    }
}
