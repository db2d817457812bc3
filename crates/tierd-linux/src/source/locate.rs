//! From accessed ranges to engine observations: the one path every source's facts take.
//!
//! ```text
//!  AccessedRange* ──▶ budget (hottest first, at most `max_pages` pages a pass)
//!                 ──▶ node of each page (one Locator call per process)
//!                 ──▶ slow-part filter (regions whose fast pages explain their heat)
//!                 ──▶ Observation*
//! ```
//!
//! The node lookup is a [`Locator`]: the daemon's is `move_pages(2)` with no target nodes
//! (`tierd_linux::mover::Mover`), the tests' a table. Pages the lookup finds absent are
//! dropped, and count against the budget, which bounds the lookups (they are syscalls).

use std::collections::BTreeMap;

use tierd_engine::types::{NodeId, PageRef, SpaceId, Vpn};
use tierd_engine::Observation;

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
}

/// What one [`locate`] did, for the daemon's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocateStats {
    /// Pages looked up.
    pub looked_up: u64,
    /// Pages found absent (not present, unmapped, or their process gone).
    pub absent: u64,
    /// Pages of ranges dropped because their process is not in scope (never looked up).
    pub out_of_scope: u64,
    /// Pages beyond the pass's budget (never looked up).
    pub over_budget: u64,
    /// Slow-tier pages of regions whose fast-tier pages explain their heat.
    pub slow_explained: u64,
}

/// The heat to credit each fast-tier page of a region with, in [`slow_part_is_hot`]: the
/// median `nr_accesses` of this pass's regions that sit (at least 90 %) on the fast tier
/// already, i.e. of the hot set that has moved; `hottest` when there are none. Not the
/// hottest region's count: `nr_accesses` is a sample count, and the largest of many noisy
/// counts overstates a typical hot region's, which made the few slow pages left in a mostly
/// promoted hot region look explained by its fast pages and kept them on the slow tier for
/// tens of seconds (lab A's tail).
///
/// `regions` holds `(nr_accesses, fast pages, present pages)`.
#[must_use]
pub fn fast_heat_estimate(regions: &[(u32, u64, u64)], hottest: u32) -> u32 {
    let mut hot: Vec<u32> = regions
        .iter()
        .filter(|(_, fast, present)| *present > 0 && fast * 10 >= present * 9)
        .map(|(nr, _, _)| *nr)
        .collect();
    if hot.is_empty() {
        return hottest;
    }
    hot.sort_unstable();
    hot[hot.len() / 2]
}

/// Whether the pages of an accessed region that sit on slower tiers are themselves hot.
///
/// DAMON reports one access count for a whole region, estimated by sampling one random page
/// per sampling interval, so a region that straddles the edge of a hot set reports heat that
/// belongs to part of it. Once the hot part has been promoted, such a region keeps reporting
/// accesses and would drag its cold neighbours along (the seed's DAMON over-promotion).
/// Assuming the region's fast-tier pages are as hot as the typical hot region already on the
/// fast tier ([`fast_heat_estimate`]), the heat left for the slow-tier pages is
/// `(nr_accesses * pages - fast * fast_heat) / slow`; they are observed only if that reaches
/// `min_nr_accesses`. A region of sources that name single pages (`nr_accesses == 0`) is
/// always kept.
#[must_use]
pub fn slow_part_is_hot(
    nr_accesses: u32,
    hottest: u32,
    fast: u64,
    slow: u64,
    min_nr_accesses: u32,
) -> bool {
    if nr_accesses == 0 || slow == 0 {
        return true;
    }
    let total = u128::from(fast + slow);
    let heat = u128::from(nr_accesses) * total;
    let explained = u128::from(fast) * u128::from(hottest.max(nr_accesses));
    let left = heat.saturating_sub(explained);
    left >= u128::from(min_nr_accesses.max(1)) * u128::from(slow)
}

/// The `nr_accesses` a region needs to feed observations this pass: the configured floor, or
/// `permille` of the hottest region's, whichever is higher. Relative, because what a region
/// counts depends on the host's speed and the sampling intervals (hot regions reach 5-8 of 20
/// samples on one host and 2-3 on a slower one): a fixed floor that drops noise on one host
/// drops the hot set on another. The engine's relative threshold then picks the hottest pages
/// that fit.
#[must_use]
pub fn relative_min_nr_accesses(hottest: u32, floor: u32, permille: u32) -> u32 {
    let rel = u64::from(hottest) * u64::from(permille);
    let rel = u32::try_from(rel.div_ceil(1000)).unwrap_or(u32::MAX);
    floor.max(rel).max(1)
}

/// Turns one pass's `ranges` (hottest first, as sources order them) into observations in
/// `out`: at most `params.max_pages` pages, each process asked once through `locator`, pages
/// of processes `in_scope` refuses never looked up, absent pages dropped, and the slow-tier
/// pages of regions whose heat their fast-tier pages explain dropped (see
/// [`slow_part_is_hot`]). Returns the processes whose lookup failed as a whole, with why;
/// their ranges are dropped.
pub fn locate<L: Locator>(
    ranges: &[AccessedRange],
    params: LocateParams,
    fast_nodes: &[NodeId],
    mut in_scope: impl FnMut(u32) -> bool,
    locator: &mut L,
    stats: &mut LocateStats,
    out: &mut Vec<Observation>,
) -> Vec<(u32, L::Error)> {
    let mut by_pid: BTreeMap<u32, Vec<AccessedRange>> = BTreeMap::new();
    let mut budget = params.max_pages;
    let hottest = ranges.iter().map(|r| r.nr_accesses).max().unwrap_or(0);
    for r in ranges {
        if !in_scope(r.pid) {
            stats.out_of_scope += r.nr_pages;
            continue;
        }
        let take = r.nr_pages.min(budget);
        stats.over_budget += r.nr_pages - take;
        budget -= take;
        if take > 0 {
            by_pid.entry(r.pid).or_default().push(AccessedRange {
                nr_pages: take,
                ..*r
            });
        }
    }
    let min_acc = relative_min_nr_accesses(
        hottest,
        params.min_nr_accesses,
        params.min_relative_permille,
    );
    // Per range: its pages' places (a slice of its process's lookup) and how many of them are
    // present and on the fast tier. First every process's lookup, then the filter: the heat
    // credited to a region's fast pages is estimated from all the regions of this pass.
    struct Located {
        range: AccessedRange,
        pages: std::ops::Range<usize>,
        fast: u64,
        present: u64,
    }
    let mut located = Vec::new();
    let mut nodes_of = BTreeMap::new();
    let mut failed = Vec::new();
    for (pid, ranges) in by_pid {
        let addrs: Vec<u64> = ranges
            .iter()
            .flat_map(|r| (0..r.nr_pages).map(move |i| Vpn(r.start.0 + i).addr()))
            .collect();
        stats.looked_up += addrs.len() as u64;
        let nodes = match locator.nodes(pid, &addrs) {
            Ok(n) => n,
            Err(e) => {
                stats.absent += addrs.len() as u64;
                failed.push((pid, e));
                continue;
            }
        };
        let mut at = 0;
        for range in ranges {
            let n = usize::try_from(range.nr_pages).unwrap_or(usize::MAX);
            let pages = at.min(nodes.len())..(at + n).min(nodes.len());
            at += n;
            let here = &nodes[pages.clone()];
            let fast = here
                .iter()
                .filter(|x| x.is_ok_and(|nd| fast_nodes.contains(&nd)))
                .count() as u64;
            let present = here.iter().filter(|x| x.is_ok()).count() as u64;
            stats.absent += range.nr_pages - present;
            located.push(Located {
                range,
                pages,
                fast,
                present,
            });
        }
        nodes_of.insert(pid, nodes);
    }
    let counts: Vec<(u32, u64, u64)> = located
        .iter()
        .map(|l| (l.range.nr_accesses, l.fast, l.present))
        .collect();
    let fast_heat = fast_heat_estimate(&counts, hottest);
    for l in located {
        let (r, fast, present) = (&l.range, l.fast, l.present);
        let keep_slow = slow_part_is_hot(r.nr_accesses, fast_heat, fast, present - fast, min_acc);
        if !keep_slow {
            stats.slow_explained += present - fast;
        }
        let here = nodes_of.get(&r.pid).map_or(&[][..], |n| &n[l.pages]);
        for (i, node) in here.iter().enumerate() {
            let Ok(node) = *node else { continue };
            if !keep_slow && !fast_nodes.contains(&node) {
                continue;
            }
            let vpn = Vpn(r.start.0 + i as u64);
            out.push(Observation {
                page: PageRef {
                    // The frame only names the page the source saw: a single-page range.
                    pfn: r.pfn.filter(|_| r.nr_pages == 1),
                    ..PageRef::base(SpaceId(r.pid), vpn)
                },
                page_node: node,
                accessing_node: r.accessing_node,
                source: r.kind,
                time: r.time,
                weight: r.nr_accesses,
            });
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use tierd_engine::types::{Nanos, Pfn};
    use tierd_engine::SourceKind;

    /// A table of page -> node per process; a missing page is not present (ENOENT); a
    /// missing process fails as a whole (ESRCH).
    #[derive(Default)]
    struct FakeLocator {
        pages: HashMap<(u32, u64), NodeId>,
        calls: Vec<(u32, usize)>,
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
                slow_explained: 0
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
            &mut stats,
            &mut out,
        );
        let slow_seen: Vec<u64> = out
            .iter()
            .filter(|o| o.page_node == NodeId(1))
            .map(|o| o.page.vpn.0)
            .collect();
        assert_eq!(slow_seen, vec![9, 20, 21, 22, 23, 24]);
        assert_eq!(stats.slow_explained, 3);
        // Fast pages of the straddler are still observed (their heat is real).
        assert_eq!(
            out.iter()
                .filter(|o| (10..20).contains(&o.page.vpn.0))
                .count(),
            7
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
            &mut LocateStats::default(),
            &mut out,
        );
        assert_eq!(out[0].page.pfn, Some(Pfn(77)));
        assert!(out[1..].iter().all(|o| o.page.pfn.is_none()));
    }

    #[test]
    fn fast_pages_are_credited_the_median_promoted_region_not_the_noisiest() {
        // Promoted hot regions counted 5, 6, 6, 7 and one noisy 12; a straddler half on the
        // fast tier and the slow regions do not count.
        let r = [
            (5, 100, 100),
            (12, 95, 100),
            (6, 100, 100),
            (6, 90, 100),
            (7, 99, 100),
            (3, 50, 100),
            (6, 0, 100),
        ];
        assert_eq!(fast_heat_estimate(&r, 12), 6);
        assert_eq!(
            fast_heat_estimate(&r[5..], 6),
            6,
            "none promoted: the hottest"
        );
        assert_eq!(fast_heat_estimate(&[(4, 0, 0)], 9), 9, "no page present");
        // The slow tenth of a promoted hot region counting 6 is kept with the median (6) and
        // was dropped with the hottest (12); a promoted half of a straddler (3) still
        // explains its cold half.
        assert!(slow_part_is_hot(6, 6, 90, 10, 2));
        assert!(!slow_part_is_hot(6, 12, 90, 10, 2));
        assert!(!slow_part_is_hot(3, 6, 50, 50, 2));
    }

    #[test]
    fn the_region_floor_is_relative_to_the_hottest_region() {
        // A slow host: hot regions at 3 of 20 still pass; a fast one: 15 of 20, and a
        // region a fifth as hot (3) does not.
        assert_eq!(relative_min_nr_accesses(3, 1, 250), 1);
        assert_eq!(relative_min_nr_accesses(15, 1, 250), 4);
        assert_eq!(relative_min_nr_accesses(16, 1, 250), 4);
        assert_eq!(relative_min_nr_accesses(0, 0, 250), 1, "never 0");
        assert_eq!(
            relative_min_nr_accesses(8, 5, 250),
            5,
            "the absolute floor holds"
        );
        assert_eq!(relative_min_nr_accesses(u32::MAX, 1, 1000), u32::MAX);
    }

    #[test]
    fn a_region_whose_heat_its_fast_pages_explain_drops_its_slow_pages() {
        // Hottest region this pass: 6 of 20 samples.
        // A region 70 % promoted (hot) and 30 % cold reports 0.7 * 6 = 4.2: nothing left.
        assert!(!slow_part_is_hot(4, 6, 70, 30, 2));
        // 60 % promoted, 40 % still-hot on the slow node: the region is as hot as the hottest,
        // so the slow part carries 6 of heat: keep.
        assert!(slow_part_is_hot(6, 6, 60, 40, 2));
        // Nothing promoted yet: the whole heat is the slow part's.
        assert!(slow_part_is_hot(4, 6, 0, 100, 4));
        assert!(!slow_part_is_hot(3, 6, 0, 100, 4));
        // Sources that name single pages are never filtered.
        assert!(slow_part_is_hot(0, 6, 99, 1, 4));
        // All on the fast tier: nothing to decide.
        assert!(slow_part_is_hot(5, 6, 10, 0, 4));
    }
}
