//! Tests of huge pages in the engine: one record per folio, splits and collapses, 1 GiB
//! pages, planning in bytes, the THP counters; and a property test over random mixes of
//! 4 KiB, 2 MiB and 1 GiB folios.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::config::DemotionConfig;
use crate::plan::{NodeUsage, PageResult};
use crate::topology::{two_tier, NodeSpec};
use crate::types::{SpaceId, Vpn, HPAGE_PMD_NR, HPAGE_PUD_NR};

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);
const GIGA: u64 = HPAGE_PUD_NR;

/// The kernel's rules, every access a candidate.
fn kcfg() -> EngineConfig {
    EngineConfig {
        threshold: ThresholdMode::Fixed,
        freq_threshold: 1,
        ..EngineConfig::default()
    }
}

fn fobs(space: u32, vpn: u64, size: PageSize, node: NodeId, t_ms: u64) -> Observation {
    Observation {
        page: PageRef::sized(SpaceId(space), Vpn(vpn), size),
        page_node: node,
        accessing_node: Some(N0),
        source: SourceKind::HwSample,
        time: Nanos::from_millis(t_ms),
        weight: 1,
    }
}

/// `fast_free` on top-tier nodes, slow nodes empty, promotion watermark `promo`.
fn usage(topo: &Topology, fast_free: Bytes, promo: Bytes) -> SystemUsage {
    let mut u = SystemUsage::default();
    for n in topo.nodes() {
        let free = if n.toptier { fast_free } else { n.capacity };
        u.nodes.insert(
            n.id,
            NodeUsage {
                free,
                promo_watermark: Some(promo),
            },
        );
    }
    u
}

fn apply_with(engine: &mut Engine, now: Nanos, plan: &MigrationPlan, outcome: MoveOutcome) {
    for b in &plan.batches {
        let o = match outcome {
            MoveOutcome::Moved(_) => MoveOutcome::Moved(b.target),
            f @ MoveOutcome::Failed(_) => f,
        };
        let r = MigrationReport::for_batch(b, b.pages.iter().map(|_| o));
        engine.apply(now, &r);
    }
}

fn moves(plan: &MigrationPlan, kind: MigrationKind) -> Vec<PageRef> {
    plan.batches
        .iter()
        .filter(|b| b.kind == kind)
        .flat_map(|b| b.pages.iter().map(|m| m.page))
        .collect()
}

/// One fast node (8 GiB, CPUs) and two CPU-less slow nodes (32 GiB each).
fn two_slow() -> Topology {
    let spec = |id, has_cpus, gib| NodeSpec {
        id: NodeId(id),
        has_cpus,
        capacity: Bytes::gib(gib),
        perf: None,
        adistance: None,
    };
    Topology::new(
        vec![spec(0, true, 8), spec(1, false, 32), spec(2, false, 32)],
        vec![vec![10, 50, 60], vec![50, 10, 60], vec![60, 60, 10]],
    )
    .expect("valid topology")
}

/// The gauges (as the last pass left them: call right after a pass) equal a recount from the
/// structures themselves, and no structure holds two folios over the same page (the stores
/// taken together).
fn assert_exact(e: &Engine) {
    let s = &e.stats().engine;
    let mut slow: Vec<(PageKey, PageSize)> = Vec::new();
    let (mut tracked, mut ready) = (0, 0);
    for st in e.stores.values() {
        for (k, size, r) in st.recount() {
            tracked += size.nr_pages().0;
            if r {
                ready += size.nr_pages().0;
            }
            slow.push((k, size));
        }
    }
    assert_eq!(s.tracked_pages, tracked, "tracked_pages");
    assert_eq!(s.ready_pages, ready, "ready_pages");
    let fast: Vec<(PageKey, PageSize)> = e.fast.map.iter().map(|(k, sz, _)| (k, sz)).collect();
    for (k, sz, f) in e.fast.map.iter() {
        assert_eq!(sz, f.size, "fast entry {k:?}");
    }
    let fast_pages: u64 = fast.iter().map(|(_, sz)| sz.nr_pages().0).sum();
    assert_eq!(s.fast_index_pages, fast_pages, "fast_index_pages");
    let heat = e.heat.folios();
    let heat_pages: u64 = heat.iter().map(|(_, sz)| sz.nr_pages().0).sum();
    assert_eq!(s.heat_tracked_pages, heat_pages, "heat_tracked_pages");
    for (what, list) in [("stores", slow), ("fast index", fast), ("heat", heat)] {
        assert_no_overlap(
            what,
            list.iter().map(|(k, sz)| PageRef {
                space: k.space,
                vpn: k.vpn,
                size: *sz,
                pfn: None,
            }),
        );
    }
}

fn assert_no_overlap(what: &str, pages: impl Iterator<Item = PageRef>) {
    let mut v: Vec<(SpaceId, u64, u64)> = pages
        .map(|p| (p.space, p.vpns().start, p.vpns().end))
        .collect();
    v.sort_unstable();
    for w in v.windows(2) {
        assert!(
            w[0].0 != w[1].0 || w[0].2 <= w[1].1,
            "{what}: {:?} overlaps {:?}",
            w[0],
            w[1]
        );
    }
}

#[test]
fn a_thp_split_before_the_plan_is_not_planned_at_its_old_size() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::gib(16), Bytes(0));
    let mut e = Engine::new(kcfg(), topo).unwrap();
    // A ready THP on the slow node...
    e.observe(&[fobs(1, 1024 + 9, PageSize::Huge2M, N1, 0)]);
    // ...split before the pass: one of its pages is seen as a base page.
    e.observe(&[fobs(1, 1024 + 30, PageSize::Base, N1, 5)]);
    let plan = e.tick(Nanos::from_millis(100), &u);
    let p = moves(&plan, MigrationKind::Promote);
    assert_eq!(p, vec![PageRef::base(SpaceId(1), Vpn(1054))]);
    assert_eq!(e.stats().engine.pgpromote_planned, 1);
    assert_exact(&e);
}

#[test]
fn a_collapse_replaces_the_base_records_everywhere() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    let cfg = EngineConfig {
        freq_threshold: 2,
        threshold: ThresholdMode::Relative,
        ..kcfg()
    };
    let mut e = Engine::new(cfg, topo.clone()).unwrap();
    let u = usage(&topo, Bytes::gib(16), Bytes(0));
    // Ten base pages seen once (not ready), then khugepaged collapses them.
    e.observe(
        &(0..10)
            .map(|i| fobs(1, 512 + i, PageSize::Base, N1, i))
            .collect::<Vec<_>>(),
    );
    let _ = e.tick(Nanos::from_millis(20), &u);
    assert_eq!(e.stats().engine.tracked_pages, 10);
    assert_eq!(e.stats().engine.heat_tracked_pages, 10);
    e.observe(&[fobs(1, 600, PageSize::Huge2M, N1, 30)]);
    let _ = e.tick(Nanos::from_millis(130), &u);
    assert_eq!(
        e.stats().engine.tracked_pages,
        512,
        "one record of 512 pages"
    );
    assert_eq!(e.stats().engine.heat_tracked_pages, 512);
    assert_exact(&e);
    // The second access makes the THP ready: planned once, whole.
    e.observe(&[fobs(1, 1000, PageSize::Huge2M, N1, 140)]);
    let plan = e.tick(Nanos::from_millis(240), &u);
    assert_eq!(
        moves(&plan, MigrationKind::Promote),
        vec![PageRef::huge(SpaceId(1), Vpn(512))]
    );
    apply_with(
        &mut e,
        Nanos::from_millis(240),
        &plan,
        MoveOutcome::Moved(N0),
    );
    let s = &e.stats().engine;
    assert_eq!((s.pgpromote_success, s.thp_migration_success), (512, 1));
    // On the fast tier it is split again: the fast index and the heat drop the THP.
    e.observe(&[fobs(1, 700, PageSize::Base, N0, 300)]);
    let _ = e.tick(Nanos::from_millis(400), &u);
    assert_eq!(e.stats().engine.fast_index_pages, 1);
    assert_eq!(e.stats().engine.heat_tracked_pages, 1);
    assert_exact(&e);
}

#[test]
fn a_gigantic_page_is_planned_charged_and_counted_as_one_folio() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::gib(16), Bytes(0));
    let mut e = Engine::new(kcfg(), topo).unwrap();
    // Base pages inside it were tracked before it was mapped.
    e.observe(&[
        fobs(1, 2 * GIGA + 3, PageSize::Base, N1, 0),
        fobs(1, 2 * GIGA + 700, PageSize::Huge2M, N1, 0),
        fobs(1, 2 * GIGA + 12_345, PageSize::Huge1G, N1, 1),
    ]);
    let plan = e.tick(Nanos::from_millis(100), &u);
    let p = moves(&plan, MigrationKind::Promote);
    assert_eq!(
        p,
        vec![PageRef::sized(SpaceId(1), Vpn(2 * GIGA), PageSize::Huge1G)]
    );
    assert_eq!(plan.batches[0].nr_pages().0, GIGA);
    assert_eq!(e.stats().engine.pgpromote_candidate_nrl, GIGA);
    apply_with(
        &mut e,
        Nanos::from_millis(100),
        &plan,
        MoveOutcome::Moved(N0),
    );
    let s = &e.stats().engine;
    assert_eq!((s.pgpromote_success, s.thp_migration_success), (GIGA, 1));
    let _ = e.tick(Nanos::from_millis(200), &u);
    assert_exact(&e);
    assert_eq!(e.stats().engine.fast_index_pages, GIGA);
    // Unmapped and mapped again as base pages on the fast node: the old folio is gone.
    e.observe(&[fobs(1, 2 * GIGA + 100_000, PageSize::Base, N0, 200)]);
    let _ = e.tick(Nanos::from_millis(300), &u);
    assert_eq!(e.stats().engine.fast_index_pages, 1);
    assert_exact(&e);
}

#[test]
fn a_failed_huge_move_counts_one_thp_failure_and_its_base_pages() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::gib(16), Bytes(0));
    let mut e = Engine::new(kcfg(), topo).unwrap();
    e.observe(&[
        fobs(1, 0, PageSize::Huge2M, N1, 0),
        fobs(1, 512, PageSize::Huge2M, N1, 0),
        fobs(1, 5000, PageSize::Base, N1, 0),
    ]);
    let plan = e.tick(Nanos::from_millis(100), &u);
    apply_with(
        &mut e,
        Nanos::from_millis(100),
        &plan,
        MoveOutcome::Failed(MoveError::Busy),
    );
    let s = &e.stats().engine;
    assert_eq!(s.thp_migration_fail, 2);
    assert_eq!(s.thp_migration_success, 0);
    assert_eq!(s.pgpromote_fail_busy, 2 * 512 + 1);
}

/// A THP the kernel split while moving it, and moved in part: one THP failure, its moved
/// pages counted one by one from their own results, nothing counted as a failed page, and no
/// record left of a folio that no longer exists.
#[test]
fn a_thp_split_while_moving_counts_the_pages_that_moved_one_by_one() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::gib(16), Bytes(0));
    let mut e = Engine::new(kcfg(), topo).unwrap();
    e.observe(&[fobs(1, 1024, PageSize::Huge2M, N1, 0)]);
    let now = Nanos::from_millis(100);
    let plan = e.tick(now, &u);
    assert_eq!(moves(&plan, MigrationKind::Promote).len(), 1);
    let b = &plan.batches[0];
    let mut r = MigrationReport::for_batch(b, [MoveOutcome::Failed(MoveError::Split)]);
    // 300 of its 512 pages reached node 0.
    r.results.extend((0..300).map(|i| PageResult {
        page: PageRef::base(SpaceId(1), Vpn(1024 + i)),
        from: N1,
        outcome: MoveOutcome::Moved(N0),
    }));
    e.apply(now, &r);
    let s = e.stats().engine.clone();
    assert_eq!(s.thp_migration_fail, 1);
    assert_eq!(s.thp_migration_success, 0);
    assert_eq!(s.pgpromote_success, 300);
    assert_eq!(
        s.pgpromote_fail_busy
            + s.pgpromote_fail_nomem
            + s.pgpromote_fail_access
            + s.pgpromote_fail_gone
            + s.pgpromote_fail_fault
            + s.pgpromote_fail_other,
        0
    );
    // The next pass sees the state: the 300 moved pages are fast base pages, and nothing is
    // left of the 2 MiB record.
    let plan = e.tick(Nanos::from_millis(200), &u);
    assert!(moves(&plan, MigrationKind::Promote).is_empty());
    assert_eq!(e.stats().engine.fast_index_pages, 300);
    assert_exact(&e);
}

#[test]
fn a_folio_larger_than_the_rate_limit_goes_alone_and_pays_its_debt() {
    // 64 GiB fast node: free-space margin 4 GiB above the promotion watermark (1 GiB); free
    // 4.5 GiB is below it (the rate limit applies) and leaves room for 1 GiB above the high
    // watermark (3.2 GiB).
    let topo = two_tier(Bytes::gib(64), Bytes::gib(256));
    let u = usage(&topo, Bytes::mib(4608), Bytes::gib(1));
    let cfg = EngineConfig {
        promote_rate_limit_mbps: 64,
        adaptive_threshold: false,
        ..kcfg()
    };
    let mut e = Engine::new(cfg, topo).unwrap();
    // A base page first in address order takes part of the second's budget...
    e.observe(&[
        fobs(1, 7, PageSize::Base, N1, 0),
        fobs(1, GIGA, PageSize::Huge1G, N1, 0),
    ]);
    let plan = e.tick(Nanos::from_millis(100), &u);
    assert_eq!(moves(&plan, MigrationKind::Promote).len(), 1);
    // ...so the gigantic page, 16 s of budget, waits for an empty window.
    assert_eq!(e.stats().engine.pgpromote_rate_limited, GIGA);
    e.observe(&[fobs(1, GIGA + 5, PageSize::Huge1G, N1, 1050)]);
    let plan = e.tick(Nanos::from_millis(1100), &u);
    assert_eq!(
        moves(&plan, MigrationKind::Promote),
        vec![PageRef::sized(SpaceId(1), Vpn(GIGA), PageSize::Huge1G)]
    );
    // Then nothing for 16 s: 262144 pages at 16384 pages/s.
    e.observe(&[fobs(1, 9, PageSize::Base, N1, 17_000)]);
    assert!(e.tick(Nanos::from_millis(17_050), &u).is_empty());
    e.observe(&[fobs(1, 9, PageSize::Base, N1, 17_110)]);
    assert_eq!(
        moves(
            &e.tick(Nanos::from_millis(17_150), &u),
            MigrationKind::Promote
        )
        .len(),
        1
    );
}

#[test]
fn batches_hold_batch_nr_folios_and_bounded_bytes() {
    let topo = two_tier(Bytes::gib(64), Bytes::gib(256));
    let u = usage(&topo, Bytes::gib(60), Bytes(0));
    let cfg = EngineConfig {
        batch_nr: 64,
        ..kcfg()
    };
    let mut e = Engine::new(cfg, topo).unwrap();
    let mut v: Vec<Observation> = (0..100)
        .map(|i| fobs(1, i * 512, PageSize::Huge2M, N1, 0))
        .collect();
    v.extend((1..3).map(|g| fobs(1, g * GIGA, PageSize::Huge1G, N1, 0)));
    v.extend((0..10).map(|i| fobs(1, 3 * GIGA + i, PageSize::Base, N1, 0)));
    e.observe(&v);
    let plan = e.tick(Nanos::from_millis(100), &u);
    let cap = batch_bytes(64).0;
    assert_eq!(cap, 128 << 20);
    let mut folios = 0;
    for b in &plan.batches {
        assert!(b.pages.len() <= 64);
        let bytes = b.nr_pages().bytes().0;
        assert!(
            bytes <= cap || b.pages.len() == 1,
            "{bytes} B in {}",
            b.pages.len()
        );
        folios += b.pages.len();
    }
    assert_eq!(folios, 112);
    // The two gigantic pages each went alone.
    assert_eq!(
        plan.batches
            .iter()
            .filter(|b| b.pages[0].page.size == PageSize::Huge1G)
            .count(),
        2
    );
}

#[test]
fn a_folio_seen_on_another_slow_node_leaves_the_first_store() {
    let topo = two_slow();
    let u = usage(&topo, Bytes::gib(8), Bytes(0));
    let cfg = EngineConfig {
        freq_threshold: 2,
        ..kcfg()
    };
    let mut e = Engine::new(cfg, topo).unwrap();
    // Ready as a THP on node 1; then its pages are seen as base pages on node 2.
    e.observe(&[
        fobs(1, 512, PageSize::Huge2M, N1, 0),
        fobs(1, 512, PageSize::Huge2M, N1, 5),
        fobs(1, 520, PageSize::Base, N2, 10),
        fobs(1, 520, PageSize::Base, N2, 15),
    ]);
    let plan = e.tick(Nanos::from_millis(100), &u);
    assert_eq!(
        plan.batches
            .iter()
            .flat_map(|b| b.pages.iter().map(|m| (m.page, m.from)))
            .collect::<Vec<_>>(),
        vec![(PageRef::base(SpaceId(1), Vpn(520)), N2)]
    );
    assert_exact(&e);
}

#[test]
fn a_page_is_never_planned_for_demotion_and_promotion_in_one_pass() {
    let topo = two_tier(Bytes::gib(1), Bytes::gib(4));
    let mut e = Engine::new(kcfg(), topo.clone()).unwrap();
    // A fast THP the demoter knows, whose stale slow record (the kernel promoted it) is
    // ready too; the fast node is below its low watermark.
    e.observe(&[fobs(1, 0, PageSize::Huge2M, N1, 0)]);
    e.observe(&[fobs(1, 0, PageSize::Huge2M, N0, 1)]);
    let plan = e.tick(Nanos::from_millis(100), &usage(&topo, Bytes(0), Bytes(0)));
    let all: Vec<PageRef> = plan
        .batches
        .iter()
        .flat_map(|b| b.pages.iter().map(|m| m.page))
        .collect();
    assert_eq!(all, vec![PageRef::huge(SpaceId(1), Vpn(0))]);
    assert_eq!(plan.batches[0].kind, MigrationKind::Demote);
    assert_eq!(e.stats().engine.pgmigrate_overlap_skipped, 512);
}

// ---- Property test over random mixes of folio sizes -----------------------------------

/// One observed folio: space, position (1 GiB range, 2 MiB range, page), size, node.
type ObsSpec = (u32, u64, u64, u64, u8, u8);

fn size_of(i: u8) -> PageSize {
    match i {
        0..=5 => PageSize::Base,
        6..=8 => PageSize::Huge2M,
        _ => PageSize::Huge1G,
    }
}

#[derive(Clone, Debug)]
struct Step {
    obs: Vec<ObsSpec>,
    dt_ms: u64,
    /// Fast node's free memory, per mille of its capacity.
    fast_free: u64,
    /// Slow nodes' free memory, per mille of their capacity.
    slow_free: u64,
    /// One move outcome per planned folio, cycled.
    outcomes: Vec<u8>,
}

fn step_strategy() -> impl Strategy<Value = Step> {
    let obs = (1u32..3, 0u64..2, 0u64..3, 0u64..512, 0u8..10, 0u8..4);
    (
        proptest::collection::vec(obs, 0..12),
        // At least the pass interval: every step runs a pass.
        100u64..1500,
        // Often below the low watermark (20 per mille), so the demoter runs beside the
        // promoter.
        prop_oneof![3 => 0u64..40, 7 => 0u64..=1000],
        0u64..=1000,
        proptest::collection::vec(0u8..10, 1..8),
    )
        .prop_map(|(obs, dt_ms, fast_free, slow_free, outcomes)| Step {
            obs,
            dt_ms,
            fast_free,
            slow_free,
            outcomes,
        })
}

fn outcome_of(code: u8, target: NodeId, other: NodeId) -> MoveOutcome {
    match code {
        0..=5 => MoveOutcome::Moved(target),
        6 => MoveOutcome::Moved(other),
        7 => MoveOutcome::Failed(MoveError::Busy),
        8 => MoveOutcome::Failed(MoveError::NoMem),
        _ => MoveOutcome::Failed(MoveError::Fault),
    }
}

/// Runs the engine over `steps`, checking (a) the rate limit in every second, (b) the free
/// floor of every target, (c) no page planned twice, (d) exact gauges, and the counters.
fn run_mixed(relative: bool, two: bool, rate_mbps: u64, batch_nr: u32, steps: &[Step]) {
    let topo = if two {
        two_slow()
    } else {
        two_tier(Bytes::gib(8), Bytes::gib(32))
    };
    let cfg = EngineConfig {
        threshold: if relative {
            ThresholdMode::Relative
        } else {
            ThresholdMode::Fixed
        },
        promote_rate_limit_mbps: rate_mbps,
        batch_nr,
        adaptive_threshold: false,
        pingpong_window_ms: 1000,
        demotion: DemotionConfig::default(),
        ..kcfg()
    };
    let high_permille = i128::from(cfg.demotion.high_free_permille);
    let limit = mbps_to_pages_per_s(rate_mbps);
    let mut e = Engine::new(cfg, topo.clone()).unwrap();
    let slow: Vec<NodeId> = topo.slow_mask().iter().collect();
    // (tick ms, pages) of each promoted folio, from ticks without a free-space bypass.
    let mut promoted: Vec<(u64, u64)> = Vec::new();
    let (mut thp_ok, mut thp_fail, mut promoted_pages, mut demoted_pages) = (0, 0, 0, 0);
    let mut now = 1000u64;
    for (i, st) in steps.iter().enumerate() {
        let batch: Vec<Observation> = st
            .obs
            .iter()
            .map(|&(space, g, c, off, sz, node)| {
                let node = if node == 0 {
                    N0
                } else {
                    slow[usize::from(node) % slow.len()]
                };
                fobs(space, g * GIGA + c * 512 + off, size_of(sz), node, now)
            })
            .collect();
        e.observe(&batch);
        now += st.dt_ms;
        let mut u = SystemUsage::default();
        for n in topo.nodes() {
            let permille = if n.toptier {
                st.fast_free
            } else {
                st.slow_free
            };
            u.nodes.insert(
                n.id,
                NodeUsage {
                    free: Bytes(n.capacity.0 / 1000 * permille),
                    promo_watermark: Some(Bytes::gib(1)),
                },
            );
        }
        let nrl_before = e.stats().engine.pgpromote_candidate_nrl;
        let plan = e.tick(Nanos::from_millis(now), &u);
        let bypassed = e.stats().engine.pgpromote_candidate_nrl != nrl_before;
        // (c) No page twice, across promotion and demotion.
        assert_no_overlap(
            &format!("plan of step {i}"),
            plan.batches
                .iter()
                .flat_map(|b| b.pages.iter().map(|m| m.page)),
        );
        // (b) Demotions never overfill a slow node; promotions never take a target below its
        // demotion high watermark, the floor the promoter tests.
        let mut free: BTreeMap<NodeId, i128> = u
            .nodes
            .iter()
            .map(|(n, x)| (*n, i128::from(x.free.0)))
            .collect();
        for kind in [MigrationKind::Demote, MigrationKind::Promote] {
            for b in plan.batches.iter().filter(|b| b.kind == kind) {
                assert!(b.pages.len() <= usize::try_from(batch_nr).unwrap());
                let bytes = b.nr_pages().bytes().0;
                assert!(bytes <= batch_bytes(batch_nr).0 || b.pages.len() == 1);
                for m in &b.pages {
                    let bytes = i128::from(m.page.size.bytes().0);
                    *free.get_mut(&b.target).unwrap() -= bytes;
                    *free.get_mut(&m.from).unwrap() += bytes;
                    if kind == MigrationKind::Promote && !bypassed {
                        promoted.push((now, m.page.size.nr_pages().0));
                    }
                }
            }
            for b in plan.batches.iter().filter(|b| b.kind == kind) {
                let floor = if kind == MigrationKind::Promote {
                    i128::from(topo.capacity(b.target).0) * high_permille / 1000
                } else {
                    0
                };
                assert!(
                    free[&b.target] >= floor,
                    "step {i}: {:?} took {} to {} B, floor {floor}",
                    kind,
                    b.target,
                    free[&b.target]
                );
            }
        }
        // (d) Gauges after the pass.
        assert_exact(&e);
        // Random outcomes.
        let mut k = 0;
        for b in &plan.batches {
            let other = if b.kind == MigrationKind::Promote {
                slow[0]
            } else {
                N0
            };
            let outs: Vec<MoveOutcome> = b
                .pages
                .iter()
                .map(|_| {
                    k += 1;
                    outcome_of(st.outcomes[k % st.outcomes.len()], b.target, other)
                })
                .collect();
            for (m, o) in b.pages.iter().zip(&outs) {
                let ok = *o == MoveOutcome::Moved(b.target);
                if m.page.size.is_huge() {
                    if ok {
                        thp_ok += 1;
                    } else {
                        thp_fail += 1;
                    }
                }
                if ok {
                    match b.kind {
                        MigrationKind::Promote => promoted_pages += m.page.size.nr_pages().0,
                        MigrationKind::Demote => demoted_pages += m.page.size.nr_pages().0,
                    }
                }
            }
            e.apply(
                Nanos::from_millis(now),
                &MigrationReport::for_batch(b, outs),
            );
        }
    }
    let s = &e.stats().engine;
    assert_eq!(
        (s.thp_migration_success, s.thp_migration_fail),
        (thp_ok, thp_fail)
    );
    assert_eq!(
        (s.pgpromote_success, s.pgdemote_success),
        (promoted_pages, demoted_pages)
    );
    // (a) Every one-second interval ending at a pass: at most the limit in base pages (the
    // bytes / 4 KiB), or exactly one folio larger than the limit alone; after such a folio,
    // nothing for nr / limit seconds (its debt).
    for &(t, _) in &promoted {
        let inside: Vec<u64> = promoted
            .iter()
            .filter(|&&(s, _)| s <= t && s + 1000 > t)
            .map(|&(_, n)| n)
            .collect();
        let sum: u64 = inside.iter().sum();
        assert!(
            sum <= limit || inside.len() == 1,
            "{sum} pages in the second ending at {t} ms, limit {limit}: {inside:?}"
        );
    }
    for (j, &(t, n)) in promoted.iter().enumerate() {
        if n > limit {
            let quiet_ms = (n * 1000).div_ceil(limit);
            for (j2, &(s2, _)) in promoted.iter().enumerate() {
                assert!(
                    j2 == j || s2 + 1000 <= t || s2 >= t + quiet_ms,
                    "a folio of {n} pages at {t} ms was not alone for {quiet_ms} ms ({s2})"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random mixes of 4 KiB, 2 MiB and 1 GiB folios over the same pages (so they split,
    /// collapse and remap), random free space and move outcomes, over many passes: the rate
    /// limit holds in every second in bytes, no target goes below its floor, no page is
    /// planned twice, and the gauges equal a recount.
    #[test]
    fn mixed_folio_sizes_keep_every_bound(
        relative in any::<bool>(),
        two in any::<bool>(),
        rate_mbps in prop_oneof![Just(1u64), Just(16), Just(256), Just(4096)],
        batch_nr in 64u32..200,
        steps in proptest::collection::vec(step_strategy(), 1..40),
    ) {
        run_mixed(relative, two, rate_mbps, batch_nr, &steps);
    }
}

/// Pages the backend held back for its access check (deferred) or refused after it
/// (untouched) are counted as such, not as failures, and are not backed off: they are planned
/// again as soon as they are ready again.
#[test]
fn pages_held_for_the_access_check_are_counted_apart_and_not_backed_off() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::gib(16), Bytes(0));
    let mut e = Engine::new(kcfg(), topo).unwrap();
    e.observe(&[
        fobs(1, 0, PageSize::Huge2M, N1, 0),
        fobs(1, 5000, PageSize::Base, N1, 0),
    ]);
    let now = Nanos::from_millis(100);
    let plan = e.tick(now, &u);
    apply_with(&mut e, now, &plan, MoveOutcome::Failed(MoveError::Deferred));
    let s = e.stats().engine.clone();
    assert_eq!(s.pgpromote_deferred, 512 + 1);
    assert_eq!(s.pgpromote_untouched, 0);
    assert_eq!(s.pgmigrate_backoff, 0);
    assert_eq!(s.pgpromote_fail_other + s.pgpromote_fail_busy, 0);
    // Observed again, planned again (no back-off), and refused this time.
    e.observe(&[
        fobs(1, 0, PageSize::Huge2M, N1, 200),
        fobs(1, 5000, PageSize::Base, N1, 200),
    ]);
    let later = Nanos::from_millis(300);
    let plan = e.tick(later, &u);
    assert_eq!(moves(&plan, MigrationKind::Promote).len(), 2);
    apply_with(
        &mut e,
        later,
        &plan,
        MoveOutcome::Failed(MoveError::Untouched),
    );
    let s = e.stats().engine.clone();
    assert_eq!(s.pgpromote_untouched, 512 + 1);
    assert_eq!(s.pgpromote_success, 0);
}

/// Relative mode with a ping-pong window of 5 s and a fast node of 1 GiB with no free room
/// above its high watermark (returned): the setting in which room is made by demotion.
pub(super) fn tight_relative() -> (Engine, Topology, u64) {
    let topo = two_tier(Bytes::gib(1), Bytes::gib(4));
    let cfg = EngineConfig {
        threshold: ThresholdMode::Relative,
        pingpong_window_ms: 5_000,
        ..EngineConfig::default()
    };
    let high = Bytes::gib(1).0 * u64::from(cfg.demotion.high_free_permille) / 1000;
    (Engine::new(cfg, topo.clone()).unwrap(), topo, high)
}

/// A sighting of `weight` accesses of the folio `(vpn, size)` on `node`.
fn wobs(vpn: u64, size: PageSize, node: NodeId, weight: u32, t_ms: u64) -> Observation {
    Observation {
        weight,
        ..fobs(1, vpn, size, node, t_ms)
    }
}

/// Runs passes 500 ms apart: `seen(pass, on_fast)` gives each pass's sightings (slightly
/// before the pass), where `on_fast` holds the heads now on the fast node; every plan
/// succeeds and moves the fast node's free bytes. Returns the heads promoted and demoted.
fn run_tight(
    e: &mut Engine,
    topo: &Topology,
    mut free: u64,
    passes: u64,
    on_fast: &mut std::collections::BTreeSet<u64>,
    mut seen: impl FnMut(u64, &std::collections::BTreeSet<u64>) -> Vec<Observation>,
) -> (Vec<PageRef>, Vec<PageRef>) {
    let (mut promoted, mut demoted) = (Vec::new(), Vec::new());
    for pass in 0..passes {
        let t = 10_000 + pass * 500;
        e.observe(&seen(pass, on_fast));
        let now = Nanos::from_millis(t);
        let plan = e.tick(now, &usage(topo, Bytes(free), Bytes(0)));
        for p in moves(&plan, MigrationKind::Promote) {
            assert!(
                on_fast.insert(p.vpn.0),
                "{p:?} promoted while on the fast node"
            );
            free -= p.size.bytes().0;
            promoted.push(p);
        }
        for p in moves(&plan, MigrationKind::Demote) {
            assert!(
                on_fast.remove(&p.vpn.0),
                "{p:?} demoted while on the slow node"
            );
            free += p.size.bytes().0;
            demoted.push(p);
        }
        apply_with(e, now, &plan, MoveOutcome::Moved(N0));
    }
    (promoted, demoted)
}

/// 200 fast 2 MiB folios sighted `folio_weight` times a pass and 100 slow base pages 64
/// times, all by `kind`, for 20 passes on [`tight_relative`]'s node: the heads promoted and
/// demoted, and the engine.
fn folios_and_hot_pages(
    kind: SourceKind,
    folio_weight: u32,
) -> (Vec<PageRef>, Vec<PageRef>, Engine) {
    let (mut e, topo, high) = tight_relative();
    let folios: Vec<u64> = (0..200).map(|i| (1 << 20) + i * HPAGE_PMD_NR).collect();
    let mut on_fast: std::collections::BTreeSet<u64> = folios.iter().copied().collect();
    let seen = |vpn, size, node, weight, t| Observation {
        source: kind,
        ..wobs(vpn, size, node, weight, t)
    };
    let (promoted, demoted) = run_tight(&mut e, &topo, high, 20, &mut on_fast, |pass, on| {
        let t = 10_000 + pass * 500 - 100;
        let node = |v: &u64| if on.contains(v) { N0 } else { N1 };
        let mut v: Vec<Observation> = folios
            .iter()
            .map(|f| seen(*f, PageSize::Huge2M, node(f), folio_weight, t))
            .collect();
        v.extend((0..100).map(|p| seen(p, PageSize::Base, node(&p), 64, t)));
        v
    });
    (promoted, demoted, e)
}

/// A fast tier of 2 MiB folios, each sighted twice as often as a hot 4 KiB page on the slow
/// tier but 256 times less often per base page, makes room for the hot pages: heat and
/// idleness are compared per base page. (Compared per folio, the folios were the hotter
/// pages and, sighted every pass, never idle: nothing was demoted and every candidate was
/// refused for room.)
#[test]
fn huge_folios_cold_per_base_page_make_room_for_hotter_base_pages() {
    let (promoted, demoted, e) = folios_and_hot_pages(SourceKind::HwSample, 128);
    assert_eq!(promoted.len(), 100, "every hot page promoted");
    assert!(promoted
        .iter()
        .all(|p| p.size == PageSize::Base && p.vpn.0 < 100));
    assert!(!demoted.is_empty());
    assert!(
        demoted.iter().all(|p| p.size == PageSize::Huge2M),
        "only the folios cold per base page make room"
    );
    // 100 base pages need one folio's room, plus what the high watermark asks for.
    assert!(demoted.len() <= 4, "{} folios demoted", demoted.len());
    assert_eq!(e.stats().engine.pingpong_promoted, 0);
}

/// Folios alike on both tiers, each sighted a random number of times a pass (as sampling
/// does): the promoter does not swap the lucky slow ones for the unlucky fast ones. A fast
/// folio is room only when it is `SWAP_MARGIN_BINS` colder than the threshold.
#[test]
fn folios_alike_on_both_tiers_are_not_swapped_for_their_sampling_noise() {
    let (mut e, topo, high) = tight_relative();
    let fast: Vec<u64> = (0..200).map(|i| (1 << 20) + i * HPAGE_PMD_NR).collect();
    let slow: Vec<u64> = (0..200).map(|i| (1 << 24) + i * HPAGE_PMD_NR).collect();
    let mut on_fast: std::collections::BTreeSet<u64> = fast.iter().copied().collect();
    // xorshift64: each folio's sightings a pass, 0 to 3 (1.5 on average), from a fixed seed.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut draw = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        u32::try_from(x % 4).unwrap()
    };
    let (promoted, demoted) = run_tight(&mut e, &topo, high, 60, &mut on_fast, |pass, on| {
        let t = 10_000 + pass * 500 - 100;
        fast.iter()
            .chain(&slow)
            .filter_map(|f| {
                let n = draw();
                let node = if on.contains(f) { N0 } else { N1 };
                (n > 0).then(|| wobs(*f, PageSize::Huge2M, node, n, t))
            })
            .collect()
    });
    assert!(
        promoted.len() + demoted.len() <= 2,
        "{} promoted, {} demoted",
        promoted.len(),
        demoted.len()
    );
}

/// Sources that see a folio as a whole (an accessed bit, a DAMON region, a hint fault) say
/// it was touched, not how many of its pages were: such a sighting counts for each of its
/// pages (its heat bin is a base page's seen alike), and its idleness is the clock's. The
/// folios of the first test, seen this way every pass, are in use and make no room.
#[test]
fn a_folio_seen_whole_has_a_base_page_s_heat_and_the_clock_s_idleness() {
    let (mut e, _, _) = tight_relative();
    let scan = |vpn, size, node, weight, t| Observation {
        source: SourceKind::AccessedBitScan,
        ..wobs(vpn, size, node, weight, t)
    };
    let thp = 1 << 20;
    e.observe(&[
        scan(thp, PageSize::Huge2M, N1, 4, 0),
        scan(7, PageSize::Base, N1, 4, 0),
    ]);
    let key = |vpn| PageKey {
        space: SpaceId(1),
        vpn: Vpn(vpn),
    };
    assert_eq!(e.heat.bin(key(thp)), e.heat.bin(key(7)));
    // Sampled, the same weight is 512 times less per page: 9 bins colder.
    e.observe(&[wobs(2 * thp, PageSize::Huge2M, N1, 4, 0)]);
    assert_eq!(e.heat.bin(key(2 * thp)) + 9, e.heat.bin(key(7)));

    let (promoted, demoted, e) = folios_and_hot_pages(SourceKind::AccessedBitScan, 1);
    assert!(demoted.is_empty(), "{} folios demoted", demoted.len());
    assert!(promoted.is_empty());
    assert!(e.stats().engine.pgpromote_no_room > 0);
}
