//! What a region-based access source's counts mean for the pages in a region: the rules that
//! turn DAMON's regions (one `nr_accesses` per region, a sample count) into per-page
//! observations. Pure arithmetic, shared by the Linux daemon (`tierd-linux`'s `locate`, which
//! maps a region's pages to folios and nodes) and the simulator's DAMON source, so that both
//! decide alike which of a region's pages the engine sees.
//!
//! - [`relative_min_nr_accesses`]: the floor a region's count must reach, relative to the
//!   pass's hottest region.
//! - [`slow_part_is_hot`] with [`fast_heat_estimate`]: whether the slow-tier pages of a region
//!   that straddles the edge of a hot set are themselves hot, or the region's heat belongs to
//!   its pages already on the fast tier.
//! - [`fitted_nr_regions`]: how many regions keep each at most a given size over the
//!   monitored bytes (DAMON merges regions up to the monitored size / `min_nr_regions`).

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

/// The most regions [`fitted_nr_regions`] asks for: DAMON checks one page per region per
/// sample, so at its 5 ms sampling floor this is 200 000 checks a second (a few percent of a
/// core natively; the intervals tuning raises the interval when few accesses show). Larger
/// targets get regions above the cap rather than a costlier kdamond.
pub const MAX_FIT_REGIONS: u64 = 1_000;

/// `(nr_regions/min, nr_regions/max)` that keep DAMON's regions at most about `cap_bytes` over
/// `monitored_bytes`: the minimum raised to `monitored_bytes / cap_bytes` within `base.0` and
/// [`MAX_FIT_REGIONS`], the maximum to twice that when `base.1` is below. mm/damon/core.c
/// `damon_region_sz_limit()` lets `kdamond_merge_regions()` merge neighbours of similar
/// `nr_accesses` up to the monitored size / `min_nr_regions`, and `kdamond_split_regions()`
/// splits only while fewer than `max_nr_regions / 2` regions exist. A zero cap or size keeps
/// `base`.
#[must_use]
pub fn fitted_nr_regions(monitored_bytes: u64, cap_bytes: u64, base: (u64, u64)) -> (u64, u64) {
    if cap_bytes == 0 || monitored_bytes == 0 {
        return base;
    }
    let min = monitored_bytes
        .div_ceil(cap_bytes)
        .clamp(base.0, MAX_FIT_REGIONS.max(base.0));
    (min, base.1.max(min.saturating_mul(2)))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn fitted_regions_keep_each_under_the_cap_within_the_bounds() {
        const MIB: u64 = 1 << 20;
        // 512 MiB under 2 MiB regions: 256, the maximum raised to 512.
        assert_eq!(fitted_nr_regions(512 * MIB, 2 * MIB, (10, 100)), (256, 512));
        // A rounding up, and a configured maximum above twice the minimum is kept.
        assert_eq!(fitted_nr_regions(5 * MIB, 2 * MIB, (1, 1000)), (3, 1000));
        // Never below the configured minimum, never above MAX_FIT_REGIONS.
        assert_eq!(fitted_nr_regions(MIB, 2 * MIB, (10, 1000)), (10, 1000));
        assert_eq!(
            fitted_nr_regions(64 << 30, 2 * MIB, (10, 1000)),
            (1000, 2000)
        );
        // A configured minimum above MAX_FIT_REGIONS stands (a clamp with its bounds crossed
        // would panic).
        assert_eq!(
            fitted_nr_regions(64 << 30, 2 * MIB, (1500, 3000)),
            (1500, 3000)
        );
        // Off.
        assert_eq!(fitted_nr_regions(512 * MIB, 0, (10, 1000)), (10, 1000));
    }
}
