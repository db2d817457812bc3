//! Tests of the engine's promoter, demoter and accounting.

use proptest::prelude::*;

use super::*;
use crate::backend::{step, Backend, StepBuffers};
use crate::config::{AccessingNode, DemotionConfig, PreferredMany, ThresholdMode};
use crate::hotness::HotnessMode;
use crate::plan::{CgroupUsage, NodeUsage};
use crate::policy::{MemPolicy, Owner, PolicyMode};
use crate::sources::SourceMask;
use crate::topology::{three_node, two_tier};
use crate::types::{SpaceId, Vpn};

/// The kernel-compatible configuration (fixed threshold): most tests here check the
/// kernel's rules.
fn kcfg() -> EngineConfig {
    EngineConfig {
        threshold: ThresholdMode::Fixed,
        ..EngineConfig::default()
    }
}

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);

fn obs(space: u32, vpn: u64, page_node: NodeId, acc: Option<NodeId>, t_ms: u64) -> Observation {
    Observation {
        page: PageRef::base(SpaceId(space), Vpn(vpn)),
        page_node,
        accessing_node: acc,
        source: SourceKind::HwSample,
        time: Nanos::from_millis(t_ms),
        weight: 1,
    }
}

/// Free memory on every node; `fast_free` on top-tier nodes.
fn usage(topo: &Topology, fast_free: Bytes) -> SystemUsage {
    let mut u = SystemUsage::default();
    for n in topo.nodes() {
        let free = if n.toptier { fast_free } else { n.capacity };
        u.nodes.insert(
            n.id,
            NodeUsage {
                free,
                promo_watermark: Some(Bytes(0)),
            },
        );
    }
    u
}

/// Pretends every planned move succeeded.
fn apply_all(engine: &mut Engine, now: Nanos, plan: &MigrationPlan) {
    for b in &plan.batches {
        let r = MigrationReport::for_batch(b, b.pages.iter().map(|_| MoveOutcome::Moved(b.target)));
        engine.apply(now, &r);
    }
}

fn planned(plan: &MigrationPlan, kind: MigrationKind) -> u64 {
    plan.batches
        .iter()
        .filter(|b| b.kind == kind)
        .map(|b| b.nr_pages().0)
        .sum()
}

/// Two accesses 10 ms apart make a page ready (threshold 2).
fn heat(engine: &mut Engine, space: u32, vpns: std::ops::Range<u64>, node: NodeId, t_ms: u64) {
    let mut v = Vec::new();
    for vpn in vpns {
        v.push(obs(space, vpn, node, Some(N0), t_ms));
        v.push(obs(space, vpn, node, Some(N0), t_ms + 10));
    }
    engine.observe(&v);
}

#[test]
fn hot_pages_are_promoted_to_the_target_with_plenty_of_space() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::gib(16));
    let mut e = Engine::new(kcfg(), topo).unwrap();
    heat(&mut e, 1, 0..100, N1, 0);
    // One access only: not ready.
    e.observe(&[obs(1, 1000, N1, Some(N0), 5)]);
    let plan = e.tick(Nanos::from_millis(100), &u);
    assert_eq!(planned(&plan, MigrationKind::Promote), 100);
    assert!(plan.batches.iter().all(|b| b.target == N0));
    // Free space is plenty: promoted without the hot test, counted as NRL.
    assert_eq!(e.stats().engine.pgpromote_candidate_nrl, 100);
    assert_eq!(e.stats().engine.pgpromote_candidate, 0);
    apply_all(&mut e, Nanos::from_millis(100), &plan);
    assert_eq!(e.stats().engine.pgpromote_success, 100);
    assert_eq!(e.stats().nodes[&N0].pgpromote_success, 100);
    // Consumed records are reset: nothing more to do.
    let plan = e.tick(Nanos::from_millis(200), &u);
    assert!(plan.is_empty());
}

#[test]
fn the_promoter_runs_once_per_interval() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::gib(16));
    let mut e = Engine::new(kcfg(), topo).unwrap();
    assert!(e.tick(Nanos::from_millis(0), &u).is_empty());
    heat(&mut e, 1, 0..10, N1, 10);
    assert!(
        e.tick(Nanos::from_millis(50), &u).is_empty(),
        "only 50 ms after the last pass"
    );
    assert_eq!(
        planned(&e.tick(Nanos::from_millis(100), &u), MigrationKind::Promote),
        10
    );
}

#[test]
fn under_pressure_the_hot_threshold_rejects_stale_records() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    // Below watermark + max(1 GiB, 16 GiB / 16): the hot test applies; above the demotion
    // high watermark (5 % = 819 MiB): promotions are allowed.
    let u = usage(&topo, Bytes::mib(1000));
    let mut e = Engine::new(kcfg(), topo).unwrap();
    heat(&mut e, 1, 0..10, N1, 0);
    heat(&mut e, 1, 10..20, N1, 2990);
    // At 3100 ms the first ten were last touched 3090 ms ago (>= 3000 ms threshold), the
    // second ten 100 ms ago.
    let plan = e.tick(Nanos::from_millis(3100), &u);
    let s = &e.stats().engine;
    assert_eq!(s.pgpromote_cold, 10);
    assert_eq!(s.pgpromote_candidate, 10);
    assert_eq!(s.pgpromote_candidate_nrl, 0);
    assert_eq!(planned(&plan, MigrationKind::Promote), 10);
    assert!(plan.batches[0].pages.iter().all(|m| m.page.vpn.0 >= 10));
}

#[test]
fn batches_never_exceed_batch_nr_and_group_by_target_and_cgroup() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::gib(16));
    let cfg = EngineConfig {
        batch_nr: 64,
        ..kcfg()
    };
    let mut e = Engine::new(cfg, topo).unwrap();
    e.update_owner(OwnerUpdate::Owner {
        space: SpaceId(2),
        owner: Owner {
            pid: 2,
            cgroup: CgroupId(5),
        },
    });
    heat(&mut e, 1, 0..150, N1, 0);
    heat(&mut e, 2, 0..70, N1, 0);
    let plan = e.tick(Nanos::from_millis(100), &u);
    assert!(plan.batches.iter().all(|b| b.pages.len() <= 64));
    let sizes: Vec<(CgroupId, usize)> = plan
        .batches
        .iter()
        .map(|b| (b.cgroup, b.pages.len()))
        .collect();
    assert_eq!(
        sizes,
        vec![
            (CgroupId(0), 64),
            (CgroupId(0), 64),
            (CgroupId(0), 22),
            (CgroupId(5), 64),
            (CgroupId(5), 6)
        ]
    );
    for b in &plan.batches {
        let owner = e.owners().owner(b.pages[0].page.space);
        assert!(b
            .pages
            .iter()
            .all(|m| e.owners().owner(m.page.space).cgroup == owner.cgroup));
    }
}

#[test]
fn huge_pages_move_as_one_unit() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::gib(16));
    let mut e = Engine::new(kcfg(), topo).unwrap();
    let mut o = obs(1, 1024 + 7, N1, Some(N0), 0);
    o.page = PageRef::huge(SpaceId(1), Vpn(1024 + 7));
    let mut o2 = o;
    o2.page = PageRef::huge(SpaceId(1), Vpn(1024 + 300));
    o2.time = Nanos::from_millis(5);
    e.observe(&[o, o2]);
    let plan = e.tick(Nanos::from_millis(100), &u);
    assert_eq!(plan.batches.len(), 1);
    assert_eq!(plan.batches[0].pages.len(), 1);
    assert_eq!(plan.batches[0].pages[0].page.vpn, Vpn(1024));
    assert_eq!(plan.batches[0].nr_pages().0, 512);
    apply_all(&mut e, Nanos::from_millis(100), &plan);
    assert_eq!(e.stats().engine.pgpromote_success, 512);
}

#[test]
fn precise_mode_promotes_to_the_accessing_node_default_to_the_fixed_one() {
    for (mode, want) in [(HotnessMode::Default, N0), (HotnessMode::Precise, N1)] {
        let topo = three_node(Bytes::gib(16), Bytes::gib(16), Bytes::gib(64));
        let u = usage(&topo, Bytes::gib(16));
        let cfg = EngineConfig { mode, ..kcfg() };
        let mut e = Engine::new(cfg, topo).unwrap();
        e.observe(&[obs(1, 5, N2, Some(N1), 0), obs(1, 5, N2, Some(N1), 10)]);
        let plan = e.tick(Nanos::from_millis(100), &u);
        assert_eq!(plan.batches.len(), 1, "{mode:?}");
        assert_eq!(plan.batches[0].target, want, "{mode:?}");
    }
}

#[test]
fn precise_mode_without_accessor_falls_back_to_the_target() {
    let topo = three_node(Bytes::gib(16), Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::gib(16));
    let cfg = EngineConfig {
        mode: HotnessMode::Precise,
        target_nid: Some(N1),
        ..kcfg()
    };
    let mut e = Engine::new(cfg, topo).unwrap();
    e.observe(&[obs(1, 5, N2, None, 0), obs(1, 5, N2, None, 10)]);
    let plan = e.tick(Nanos::from_millis(100), &u);
    assert_eq!(plan.batches[0].target, N1);
}

/// Where each space's pages were planned to go, by space.
fn targets_by_space(plan: &MigrationPlan) -> BTreeMap<u32, Vec<NodeId>> {
    let mut out: BTreeMap<u32, Vec<NodeId>> = BTreeMap::new();
    for b in &plan.batches {
        for m in &b.pages {
            out.entry(m.page.space.0).or_default().push(b.target);
        }
    }
    for v in out.values_mut() {
        v.sort_unstable();
        v.dedup();
    }
    out
}

/// Precise mode with `accessing_node = "threads"`: an accessed-bit observation (no accessor)
/// of a process whose threads all run on node 1 promotes to node 1, one on node 0 to node 0,
/// one whose threads span nodes to the target; an accessor the source knew wins; with
/// `"none"`, or in default mode, the home node is ignored.
#[test]
fn unattributed_accesses_go_to_the_node_the_threads_run_on() {
    let topo = three_node(Bytes::gib(16), Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::gib(16));
    let scan = |space: u32, t: u64| Observation {
        source: SourceKind::AccessedBitScan,
        ..obs(space, 5, N2, None, t)
    };
    let run = |mode: HotnessMode, attribution: AccessingNode| {
        let cfg = EngineConfig {
            mode,
            target_nid: Some(N0),
            accessing_node: attribution,
            ..kcfg()
        };
        let mut e = Engine::new(cfg, topo.clone()).unwrap();
        for (space, home) in [(1, Some(N0)), (2, Some(N1)), (3, None)] {
            e.update_owner(OwnerUpdate::HomeNode {
                space: SpaceId(space),
                node: home,
            });
        }
        let mut batch = Vec::new();
        for space in 1..=3 {
            batch.extend([scan(space, 0), scan(space, 10)]);
        }
        // Space 4 runs on node 1 but its source (a PMU) saw the access come from node 0.
        e.update_owner(OwnerUpdate::HomeNode {
            space: SpaceId(4),
            node: Some(N1),
        });
        batch.extend([obs(4, 5, N2, Some(N0), 0), obs(4, 5, N2, Some(N0), 10)]);
        e.observe(&batch);
        targets_by_space(&e.tick(Nanos::from_millis(100), &u))
    };
    let got = run(HotnessMode::Precise, AccessingNode::Threads);
    assert_eq!(got[&1], vec![N0]);
    assert_eq!(got[&2], vec![N1], "attributed to the threads' node");
    assert_eq!(got[&3], vec![N0], "threads span nodes: the target");
    assert_eq!(got[&4], vec![N0], "the source's own accessor wins");
    for (mode, attribution) in [
        (HotnessMode::Precise, AccessingNode::None),
        (HotnessMode::Default, AccessingNode::Threads),
    ] {
        let got = run(mode, attribution);
        for space in 1..=3 {
            assert_eq!(
                got[&space],
                vec![N0],
                "{mode:?} {attribution:?} space {space}"
            );
        }
    }
}

/// A home node that changes (the process was moved to another node) applies to the
/// accesses seen after the change: the record keeps the latest accessor, as pghot's does.
#[test]
fn a_moved_process_takes_its_later_accesses_with_it() {
    let topo = three_node(Bytes::gib(16), Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::gib(16));
    let cfg = EngineConfig {
        mode: HotnessMode::Precise,
        target_nid: Some(N0),
        ..kcfg()
    };
    let mut e = Engine::new(cfg, topo).unwrap();
    let scan = |t: u64| Observation {
        source: SourceKind::AccessedBitScan,
        ..obs(1, 5, N2, None, t)
    };
    e.update_owner(OwnerUpdate::HomeNode {
        space: SpaceId(1),
        node: Some(N0),
    });
    e.observe(&[scan(0)]);
    e.update_owner(OwnerUpdate::HomeNode {
        space: SpaceId(1),
        node: Some(N1),
    });
    e.observe(&[scan(10)]);
    let plan = e.tick(Nanos::from_millis(100), &u);
    assert_eq!(targets_by_space(&plan)[&1], vec![N1]);
    // A space that exits forgets its home node with everything else.
    e.update_owner(OwnerUpdate::Exited { space: SpaceId(1) });
    assert_eq!(e.owners().home_node(SpaceId(1)), None);
}

/// `preferred_many = "follow-flag"` promotes PREFERRED_MANY pages only with
/// MPOL_F_NUMA_BALANCING; `"always"` (the default) promotes them either way, inside the set.
#[test]
fn preferred_many_promotion_follows_the_flag_when_asked() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::gib(16));
    let set = NodeMask::from_nodes([N0, N1]);
    let plain = MemPolicy::new(PolicyMode::PreferredMany, set);
    let flagged = MemPolicy {
        numa_balancing: true,
        ..plain
    };
    for (rule, pol, want) in [
        (PreferredMany::Always, plain, 10),
        (PreferredMany::Always, flagged, 10),
        (PreferredMany::FollowFlag, plain, 0),
        (PreferredMany::FollowFlag, flagged, 10),
    ] {
        let cfg = EngineConfig {
            preferred_many: rule,
            ..kcfg()
        };
        let mut e = Engine::new(cfg, topo.clone()).unwrap();
        e.update_owner(OwnerUpdate::Policies {
            space: SpaceId(1),
            ranges: vec![(Vpn(0), Vpn(10), pol)],
        });
        heat(&mut e, 1, 0..10, N1, 0);
        let plan = e.tick(Nanos::from_millis(100), &u);
        assert_eq!(
            planned(&plan, MigrationKind::Promote),
            want,
            "{rule:?} {pol:?}"
        );
        assert_eq!(
            e.stats().engine.pgpromote_policy_skipped,
            10 - want,
            "{rule:?} {pol:?}"
        );
    }
    assert_eq!(
        EngineConfig::default().preferred_many,
        PreferredMany::Always
    );
}

#[test]
fn preferred_many_masks_are_honoured() {
    let topo = three_node(Bytes::gib(16), Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::gib(16));
    let only_n1 = MemPolicy::new(PolicyMode::PreferredMany, NodeMask::from_nodes([N1, N2]));
    // Default mode, target node 0 outside the mask: the nearest allowed top-tier node.
    let mut e = Engine::new(kcfg(), topo.clone()).unwrap();
    e.update_owner(OwnerUpdate::Policies {
        space: SpaceId(1),
        ranges: vec![(Vpn(0), Vpn(100), only_n1)],
    });
    e.observe(&[obs(1, 5, N2, Some(N0), 0), obs(1, 5, N2, Some(N0), 10)]);
    let plan = e.tick(Nanos::from_millis(100), &u);
    assert_eq!(plan.batches[0].target, N1);
    // Precise mode, accessed from node 0 (outside the mask): no migration (mpol_misplaced).
    // Node 1 is the configured target, so the accessor is what decides.
    let cfg = EngineConfig {
        mode: HotnessMode::Precise,
        target_nid: Some(N1),
        ..kcfg()
    };
    let mut e = Engine::new(cfg, topo).unwrap();
    e.update_owner(OwnerUpdate::Policies {
        space: SpaceId(1),
        ranges: vec![(Vpn(0), Vpn(100), only_n1)],
    });
    e.observe(&[obs(1, 5, N2, Some(N0), 0), obs(1, 5, N2, Some(N0), 10)]);
    assert!(e.tick(Nanos::from_millis(100), &u).is_empty());
    assert_eq!(e.stats().engine.pgpromote_policy_skipped, 1);
}

#[test]
fn bind_to_the_slow_node_is_never_promoted() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::gib(16));
    let mut e = Engine::new(kcfg(), topo).unwrap();
    let bind = MemPolicy::new(PolicyMode::Bind, NodeMask::from_nodes([N1]));
    e.update_owner(OwnerUpdate::Policies {
        space: SpaceId(1),
        ranges: vec![(Vpn(0), Vpn(10), bind)],
    });
    heat(&mut e, 1, 0..20, N1, 0);
    let plan = e.tick(Nanos::from_millis(100), &u);
    assert_eq!(planned(&plan, MigrationKind::Promote), 10);
    assert!(plan
        .batches
        .iter()
        .flat_map(|b| &b.pages)
        .all(|m| m.page.vpn.0 >= 10));
    assert_eq!(e.stats().engine.pgpromote_policy_skipped, 10);
}

/// Pages under an unknown policy (a newer kernel's mode or flag) are never promoted or
/// demoted; interleaved pages only when `move_interleaved` is set.
#[test]
fn unknown_and_interleaved_policies_stay_where_they_are() {
    let topo = two_tier(Bytes::gib(1), Bytes::gib(4));
    let both = NodeMask::from_nodes([N0, N1]);
    let ranges = vec![
        (Vpn(0), Vpn(10), MemPolicy::new(PolicyMode::Unknown, both)),
        (
            Vpn(10),
            Vpn(20),
            MemPolicy::new(PolicyMode::Interleave, both),
        ),
        (
            Vpn(20),
            Vpn(30),
            MemPolicy::new(PolicyMode::WeightedInterleave, both),
        ),
    ];
    let run = |move_interleaved: bool| {
        let cfg = EngineConfig {
            move_interleaved,
            ..kcfg()
        };
        // Promotion: hot pages 0..40 on the slow node, plenty of room on the fast one.
        let mut e = Engine::new(cfg.clone(), topo.clone()).unwrap();
        e.update_owner(OwnerUpdate::Policies {
            space: SpaceId(1),
            ranges: ranges.clone(),
        });
        heat(&mut e, 1, 0..40, N1, 0);
        let promoted = planned_vpns(
            &e.tick(Nanos::from_millis(100), &usage(&topo, Bytes::gib(1))),
            MigrationKind::Promote,
        );
        let skipped = e.stats().engine.pgpromote_policy_skipped;
        // Demotion: pages 0..40 on the fast node, which is below its low watermark.
        let mut e = Engine::new(cfg, topo.clone()).unwrap();
        e.update_owner(OwnerUpdate::Policies {
            space: SpaceId(2),
            ranges: ranges.clone(),
        });
        let v: Vec<Observation> = (0..40).map(|i| obs(2, i, N0, Some(N0), i)).collect();
        e.observe(&v);
        let cap = Bytes::gib(1).0;
        let plan = e.tick(
            Nanos::from_millis(2000),
            &usage(&topo, Bytes(cap * 19 / 1000)),
        );
        (
            promoted,
            skipped,
            planned_vpns(&plan, MigrationKind::Demote),
        )
    };
    let (promoted, skipped, demoted) = run(false);
    assert_eq!(
        promoted,
        (30..40).collect(),
        "only default-policy pages promoted"
    );
    assert_eq!(skipped, 30);
    assert_eq!(
        demoted,
        (30..40).collect(),
        "only default-policy pages demoted"
    );
    let (promoted, skipped, demoted) = run(true);
    assert_eq!(
        promoted,
        (10..40).collect(),
        "interleaved pages move when asked"
    );
    assert_eq!(skipped, 10, "the unknown policy's pages still never move");
    assert_eq!(demoted, (10..40).collect());
}

#[test]
fn disabled_sources_and_same_node_accesses_are_not_recorded() {
    let topo = three_node(Bytes::gib(16), Bytes::gib(16), Bytes::gib(64));
    let cfg = EngineConfig {
        sources: SourceMask::of(&[SourceKind::HintFault]),
        ..kcfg()
    };
    let mut e = Engine::new(cfg, topo).unwrap();
    e.observe(&[obs(1, 1, N2, Some(N0), 0)]); // hw sample: disabled
    let mut hf = obs(1, 2, N2, Some(N2), 0);
    hf.source = SourceKind::HintFault;
    e.observe(&[hf]); // accessed from its own node
    let s = e.stats();
    assert_eq!(s.engine.pghot_dropped_disabled, 1);
    assert_eq!(s.sources[&SourceKind::HwSample].dropped_disabled, 1);
    assert_eq!(s.engine.pghot_ignored_same_node, 1);
    assert_eq!(s.engine.pghot_recorded_accesses, 0);
}

#[test]
fn a_cgroup_over_its_share_is_thinned_by_the_fourth_power() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(48));
    let mut u = usage(&topo, Bytes::mib(1000));
    // Share = low * 16/64; low 32 GiB -> 8 GiB share; usage 16 GiB -> (1/2)^4 = 1/16.
    u.cgroups.insert(
        CgroupId(1),
        CgroupUsage {
            low: Bytes::gib(32),
            fast_usage: Bytes::gib(16),
        },
    );
    u.cgroups.insert(
        CgroupId(2),
        CgroupUsage {
            low: Bytes::gib(32),
            fast_usage: Bytes::gib(4),
        },
    );
    let mut e = Engine::new(kcfg(), topo).unwrap();
    e.update_owner(OwnerUpdate::Owner {
        space: SpaceId(1),
        owner: Owner {
            pid: 1,
            cgroup: CgroupId(1),
        },
    });
    e.update_owner(OwnerUpdate::Owner {
        space: SpaceId(2),
        owner: Owner {
            pid: 2,
            cgroup: CgroupId(2),
        },
    });
    heat(&mut e, 1, 0..1600, N1, 0);
    heat(&mut e, 2, 0..1600, N1, 0);
    let plan = e.tick(Nanos::from_millis(100), &u);
    let by_cg = |cg| {
        plan.batches
            .iter()
            .filter(|b| b.cgroup == cg)
            .map(|b| b.pages.len())
            .sum::<usize>()
    };
    assert_eq!(by_cg(CgroupId(1)), 100, "1600 / 16");
    assert_eq!(by_cg(CgroupId(2)), 1600);
    assert_eq!(e.stats().engine.pgpromote_cgroup_throttled, 1500);
}

#[test]
fn no_thinning_when_no_protected_cgroup_is_short() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(48));
    let mut u = usage(&topo, Bytes::mib(1000));
    // Cgroup 1 has no memory.low and uses the fast tier; cgroup 2 is protected but already
    // at its share (8 GiB). Nobody needs room: cgroup 1 is not thinned.
    u.cgroups.insert(
        CgroupId(1),
        CgroupUsage {
            low: Bytes(0),
            fast_usage: Bytes::gib(4),
        },
    );
    u.cgroups.insert(
        CgroupId(2),
        CgroupUsage {
            low: Bytes::gib(32),
            fast_usage: Bytes::gib(8),
        },
    );
    let mut e = Engine::new(kcfg(), topo).unwrap();
    e.update_owner(OwnerUpdate::Owner {
        space: SpaceId(1),
        owner: Owner {
            pid: 1,
            cgroup: CgroupId(1),
        },
    });
    heat(&mut e, 1, 0..1600, N1, 0);
    let plan = e.tick(Nanos::from_millis(100), &u);
    let n: usize = plan.batches.iter().map(|b| b.pages.len()).sum();
    assert_eq!(n, 1600);
    assert_eq!(e.stats().engine.pgpromote_cgroup_throttled, 0);
    // Once cgroup 2 falls below its share, cgroup 1 (share 0) is thinned to 1/16.
    u.cgroups.get_mut(&CgroupId(2)).unwrap().fast_usage = Bytes::gib(2);
    heat(&mut e, 1, 2000..3600, N1, 200);
    let plan = e.tick(Nanos::from_millis(300), &u);
    let n: usize = plan.batches.iter().map(|b| b.pages.len()).sum();
    assert_eq!(n, 100, "1600 / 16");
}

#[test]
fn demotion_starts_below_low_and_stops_at_high_coldest_first() {
    let topo = two_tier(Bytes::gib(1), Bytes::gib(4));
    let mut e = Engine::new(kcfg(), topo.clone()).unwrap();
    // 1000 fast pages, page i last touched at i ms.
    let v: Vec<Observation> = (0..1000).map(|i| obs(1, i, N0, Some(N0), i)).collect();
    e.observe(&v);
    // Free 1.9 % of 1 GiB: below low (2 %). High is 5 %: need 3.1 % = 8126 pages... more than
    // the engine knows; it demotes all 1000 known pages, coldest first.
    let cap = Bytes::gib(1).0;
    let mut u = usage(&topo, Bytes(cap * 19 / 1000));
    let plan = e.tick(Nanos::from_millis(2000), &u);
    assert_eq!(planned(&plan, MigrationKind::Demote), 1000);
    assert!(plan
        .batches
        .iter()
        .all(|b| b.target == N1 && b.kind == MigrationKind::Demote));
    // Above low: no demotion.
    let mut e = Engine::new(kcfg(), topo.clone()).unwrap();
    e.observe(&v);
    u.nodes.get_mut(&N0).unwrap().free = Bytes(cap * 21 / 1000);
    assert!(e.tick(Nanos::from_millis(2000), &u).is_empty());
    // Below low (4.9 %) with high (5 %) - free = 300 pages: exactly the 300 coldest go.
    let cfg = EngineConfig {
        demotion: DemotionConfig {
            enabled: true,
            low_free_permille: 49,
            high_free_permille: 50,
            ..DemotionConfig::default()
        },
        ..kcfg()
    };
    let mut e = Engine::new(cfg, topo).unwrap();
    e.observe(&v);
    let high = cap * 50 / 1000;
    u.nodes.get_mut(&N0).unwrap().free = Bytes(high - 300 * 4096);
    assert!(high - 300 * 4096 < cap * 49 / 1000);
    let plan = e.tick(Nanos::from_millis(2000), &u);
    let mut vpns: Vec<u64> = plan
        .batches
        .iter()
        .flat_map(|b| &b.pages)
        .map(|m| m.page.vpn.0)
        .collect();
    vpns.sort_unstable();
    assert_eq!(vpns, (0..300).collect::<Vec<_>>(), "the 300 coldest");
}

/// Idle demotion (demotion.idle_after_ms): with room to spare on the fast node, pages no
/// source has seen for the idle age go down, oldest first, at most the idle rate limit per
/// pass; pages seen since stay; off by default.
#[test]
fn idle_demotion_takes_pages_idle_past_the_age_at_a_bounded_rate() {
    let topo = two_tier(Bytes::gib(1), Bytes::gib(4));
    // Plenty of room: far above the low watermark, no pressure.
    let u = usage(&topo, Bytes::mib(800));
    // 2000 fast pages seen at t = 0..2 s (page i at i ms); pages 1000.. seen again at 59 s.
    let mut v: Vec<Observation> = (0..2000).map(|i| obs(1, i, N0, Some(N0), i)).collect();
    v.extend((1000..2000).map(|i| obs(1, i, N0, Some(N0), 59_000)));
    // Off (the default): nothing moves.
    let mut e = Engine::new(kcfg(), topo.clone()).unwrap();
    e.observe(&v);
    assert_eq!(kcfg().demotion.idle_after_ms, 0);
    assert!(e.tick(Nanos::from_secs(62), &u).is_empty());
    // On, idle after 60 s, 4 MB/s: the idle pass runs once a second with a second's budget,
    // 4 MB, 976.6 pages (the last page that starts within the budget goes: 977), the oldest;
    // pages seen at 59 s are not idle.
    let cfg = EngineConfig {
        demotion: DemotionConfig {
            idle_after_ms: 60_000,
            idle_rate_limit_mbps: 4,
            ..DemotionConfig::default()
        },
        ..kcfg()
    };
    let mut e = Engine::new(cfg.clone(), topo.clone()).unwrap();
    e.observe(&v);
    let plan = e.tick(Nanos::from_secs(62), &u);
    let vpns = planned_vpns(&plan, MigrationKind::Demote);
    assert_eq!(vpns.len(), 977, "the rate limit: 4 MB/s over a second");
    assert_eq!(vpns, (0..977).collect(), "oldest first");
    assert!(plan.batches.iter().all(|b| b.target == N1));
    assert_eq!(e.stats().engine.pgdemote_idle, 977);
    apply_all(&mut e, Nanos::from_secs(62), &plan);
    // Not again within the second (the pass ranks the whole fast index).
    assert!(e.tick(Nanos::from_millis(62_500), &u).is_empty());
    // A second later: another second's budget, but only the 23 left idle (seen before 2 s)
    // are old enough.
    let plan = e.tick(Nanos::from_secs(63), &u);
    let vpns = planned_vpns(&plan, MigrationKind::Demote);
    assert_eq!(vpns, (977..1000).collect());
    apply_all(&mut e, Nanos::from_secs(63), &plan);
    // Pages seen at 59 s go once they are 60 s idle.
    assert!(e.tick(Nanos::from_secs(64), &u).is_empty());
    let plan = e.tick(Nanos::from_secs(120), &u);
    assert_eq!(
        planned(&plan, MigrationKind::Demote),
        977,
        "a second's budget"
    );
    // Free memory between the low and high watermarks is no pressure either: the idle pass
    // runs there too (it did not, and a fast node kept just under its high watermark by an
    // idle tenant never had it demoted).
    let cap = Bytes::gib(1).0;
    let between = usage(&topo, Bytes(cap * 30 / 1000));
    let mut e = Engine::new(cfg.clone(), topo.clone()).unwrap();
    e.observe(&v);
    assert_eq!(
        planned(
            &e.tick(Nanos::from_secs(62), &between),
            MigrationKind::Demote
        ),
        977
    );
    // Without a source that sees the fast tier, every fast page would look idle: refused.
    let blind = EngineConfig {
        sources: SourceMask::of(&[SourceKind::HintFault]),
        ..cfg
    };
    assert!(matches!(
        Engine::new(blind, topo),
        Err(crate::ConfigError::IdleDemotionBlind)
    ));
}

/// Idle facts (DAMON's zero-access regions, located): a fast page no access source ever
/// reported enters the demoter's index with its idle start, so idle demotion finds it; a
/// page an access source saw after that start keeps the access; slow pages' facts and
/// facts while idle demotion is off change nothing.
#[test]
fn idle_facts_let_idle_demotion_find_pages_no_source_saw() {
    let topo = two_tier(Bytes::gib(1), Bytes::gib(4));
    let u = usage(&topo, Bytes::mib(800));
    let idle = |vpn: u64, node: NodeId, since_s: u64| IdleObservation {
        page: PageRef::base(SpaceId(2), Vpn(vpn)),
        page_node: node,
        idle_since: Nanos::from_secs(since_s),
    };
    // Pages 0..50 idle since 0 s; 50..60 idle since 0 s but accessed at 50 s (an access
    // source saw them later); 60..70 on the slow node.
    let mut facts: Vec<IdleObservation> = (0..60).map(|v| idle(v, N0, 0)).collect();
    facts.extend((60..70).map(|v| idle(v, N1, 0)));
    let seen: Vec<Observation> = (50..60).map(|v| obs(2, v, N0, Some(N0), 50_000)).collect();
    let cfg = EngineConfig {
        demotion: DemotionConfig {
            idle_after_ms: 30_000,
            ..DemotionConfig::default()
        },
        ..kcfg()
    };
    // Off: the facts are not taken, nothing is known, nothing moves.
    let mut off = Engine::new(kcfg(), topo.clone()).unwrap();
    off.note_idle(&facts);
    assert_eq!(off.stats().engine.idle_noted, 0);
    assert!(off.tick(Nanos::from_secs(40), &u).is_empty());
    // On: without the facts the demoter knows no page; with them, the 50 idle fast pages go
    // at t = 40 s (the 10 seen at 50 s are not idle yet at 60 s); the slow ones are ignored.
    let mut blind = Engine::new(cfg.clone(), topo.clone()).unwrap();
    blind.observe(&seen);
    assert!(blind.tick(Nanos::from_secs(60), &u).is_empty());
    let mut e = Engine::new(cfg, topo).unwrap();
    e.note_idle(&facts);
    e.observe(&seen);
    // Facts given again later (every read of DAMON) change nothing.
    e.note_idle(&facts);
    assert_eq!(e.stats().engine.idle_noted, 120);
    let plan = e.tick(Nanos::from_secs(60), &u);
    assert_eq!(
        planned_vpns(&plan, MigrationKind::Demote),
        (0..50).collect(),
        "the pages idle since 0 s, not those seen at 50 s nor the slow ones"
    );
    assert_eq!(e.stats().engine.pgdemote_idle, 50);
}

#[test]
fn demotion_takes_from_cgroups_over_their_share_first() {
    let topo = two_tier(Bytes::gib(1), Bytes::gib(3));
    let cap = Bytes::gib(1).0;
    let mut u = usage(&topo, Bytes(cap * 50 / 1000 - 300 * 4096));
    u.cgroups.insert(
        CgroupId(1),
        CgroupUsage {
            low: Bytes(0),
            fast_usage: Bytes::mib(100),
        },
    );
    u.cgroups.insert(
        CgroupId(2),
        CgroupUsage {
            low: Bytes::gib(4),
            fast_usage: Bytes::mib(100),
        },
    );
    let cfg = EngineConfig {
        demotion: DemotionConfig {
            enabled: true,
            low_free_permille: 49,
            high_free_permille: 50,
            ..DemotionConfig::default()
        },
        ..kcfg()
    };
    let mut e = Engine::new(cfg, topo).unwrap();
    e.update_owner(OwnerUpdate::Owner {
        space: SpaceId(1),
        owner: Owner {
            pid: 1,
            cgroup: CgroupId(1),
        },
    });
    e.update_owner(OwnerUpdate::Owner {
        space: SpaceId(2),
        owner: Owner {
            pid: 2,
            cgroup: CgroupId(2),
        },
    });
    // Space 2 (protected) is colder, but space 1 is over its share: space 1 goes first.
    let mut v: Vec<Observation> = (0..400).map(|i| obs(2, i, N0, Some(N0), i)).collect();
    v.extend((0..400).map(|i| obs(1, i, N0, Some(N0), 1000 + i)));
    e.observe(&v);
    let plan = e.tick(Nanos::from_millis(2000), &u);
    let pages: Vec<&PlannedMove> = plan.batches.iter().flat_map(|b| &b.pages).collect();
    assert_eq!(pages.len(), 300);
    assert!(pages.iter().all(|m| m.page.space == SpaceId(1)));
}

/// A 1 GiB fast node over 4 GiB of slow memory, and an engine with a 10 s ping-pong window:
/// the machine and engine of the window and room tests. Returns the fast node's capacity in
/// bytes too.
fn one_gib_fast_tier_with_a_10s_window() -> (Engine, Topology, u64) {
    let topo = two_tier(Bytes::gib(1), Bytes::gib(4));
    let cfg = EngineConfig {
        pingpong_window_ms: 10_000,
        ..kcfg()
    };
    (
        Engine::new(cfg, topo.clone()).unwrap(),
        topo,
        Bytes::gib(1).0,
    )
}

#[test]
fn pingpong_is_counted_within_the_window_only() {
    let (mut e, topo, cap) = one_gib_fast_tier_with_a_10s_window();
    let roomy = usage(&topo, Bytes(cap / 2));
    let tight = usage(&topo, Bytes(cap / 100));
    // Promote 10 pages at t = 100 ms.
    heat(&mut e, 1, 0..10, N1, 0);
    let p = e.tick(Nanos::from_millis(100), &roomy);
    apply_all(&mut e, Nanos::from_millis(100), &p);
    assert_eq!(e.stats().engine.pgpromote_success, 10);
    // Pressure at 5 s: they are the only known fast pages, they get demoted: ping-pong.
    let p = e.tick(Nanos::from_millis(5000), &tight);
    assert_eq!(planned(&p, MigrationKind::Demote), 10);
    apply_all(&mut e, Nanos::from_millis(5000), &p);
    assert_eq!(e.stats().engine.pgdemote_success, 10);
    assert_eq!(e.stats().engine.pingpong_demoted, 10);
    // Hot again and promoted at 8 s: ping-pong the other way.
    heat(&mut e, 1, 0..10, N1, 7900);
    let p = e.tick(Nanos::from_millis(8000), &roomy);
    apply_all(&mut e, Nanos::from_millis(8000), &p);
    assert_eq!(e.stats().engine.pingpong_promoted, 10);
    // Demoted again 20 s later: outside the window, not ping-pong.
    let p = e.tick(Nanos::from_millis(28_000), &tight);
    apply_all(&mut e, Nanos::from_millis(28_000), &p);
    assert_eq!(e.stats().engine.pgdemote_success, 20);
    assert_eq!(e.stats().engine.pingpong_demoted, 10);
}

#[test]
fn failures_are_counted_by_reason_and_gone_processes_forgotten() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::gib(16));
    let mut e = Engine::new(kcfg(), topo).unwrap();
    heat(&mut e, 1, 0..4, N1, 0);
    heat(&mut e, 2, 0..2, N1, 0);
    let plan = e.tick(Nanos::from_millis(100), &u);
    let b = &plan.batches[0];
    let outcomes = b
        .pages
        .iter()
        .map(|m| match (m.page.space.0, m.page.vpn.0) {
            (1, 0) => MoveOutcome::Failed(MoveError::Busy),
            (1, 1) => MoveOutcome::Failed(MoveError::NoMem),
            (1, 2) => MoveOutcome::Failed(MoveError::Fault),
            (1, _) => MoveOutcome::Moved(N0),
            _ => MoveOutcome::Failed(MoveError::NoProcess),
        });
    let r = MigrationReport::for_batch(b, outcomes);
    e.apply(Nanos::from_millis(100), &r);
    let s = &e.stats().engine;
    assert_eq!(
        (
            s.pgpromote_fail_busy,
            s.pgpromote_fail_nomem,
            s.pgpromote_fail_fault
        ),
        (1, 1, 1)
    );
    assert_eq!((s.pgpromote_success, s.pgpromote_fail_gone), (1, 2));
    // Space 2 is forgotten: new observations start from scratch, so one access is not enough.
    e.observe(&[obs(2, 0, N1, Some(N0), 150)]);
    assert!(e.tick(Nanos::from_millis(200), &u).is_empty());
}

#[test]
fn adaptive_threshold_tightens_when_candidates_exceed_the_budget() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::mib(1000));
    // 1 MB/s = 256 pages/s: 60 s budget 15360 candidates.
    let cfg = EngineConfig {
        promote_rate_limit_mbps: 1,
        ..kcfg()
    };
    let mut e = Engine::new(cfg, topo).unwrap();
    let _ = e.tick(Nanos::ZERO, &u);
    // 400 hot pages every second for 61 s: 24400 candidates > 16896.
    let mut t = 0;
    while t <= 61_000 {
        heat(&mut e, 1, (t / 10)..(t / 10 + 400), N1, t);
        let p = e.tick(Nanos::from_millis(t + 50), &u);
        apply_all(&mut e, Nanos::from_millis(t + 50), &p);
        t += 1000;
    }
    heat(&mut e, 1, 50_000..50_010, N1, 61_900);
    let _ = e.tick(Nanos::from_millis(62_000), &u);
    // 3000 - 375.
    assert_eq!(e.stats().nodes[&N0].promote_threshold_ms, 2625);
    assert!(e.stats().engine.pgpromote_rate_limited > 0);
}

/// A backend double that records what it was asked to do.
#[derive(Debug, Default)]
struct FakeBackend {
    pending: Vec<Observation>,
    usage: SystemUsage,
    moved: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

impl Backend for FakeBackend {
    type Error = Never;
    fn drain_observations(&mut self, _now: Nanos, out: &mut Vec<Observation>) -> Result<(), Never> {
        out.append(&mut self.pending);
        Ok(())
    }
    fn drain_owner_updates(&mut self, _out: &mut Vec<OwnerUpdate>) -> Result<(), Never> {
        Ok(())
    }
    fn usage(&mut self, _now: Nanos) -> Result<SystemUsage, Never> {
        Ok(self.usage.clone())
    }
    fn migrate(&mut self, _now: Nanos, batch: &MigrationBatch) -> Result<MigrationReport, Never> {
        self.moved += batch.nr_pages().0;
        Ok(MigrationReport::for_batch(
            batch,
            batch.pages.iter().map(|_| MoveOutcome::Moved(batch.target)),
        ))
    }
}

/// A backend that joins a plan's batches (as the Linux one does) and fails the call number
/// `fail_call` as a whole.
#[derive(Debug, Default)]
struct JoiningBackend {
    inner: FakeBackend,
    calls: Vec<usize>,
    fail_call: Option<usize>,
}

#[derive(Debug, thiserror::Error)]
#[error("the call failed")]
struct CallFailed;

impl Backend for JoiningBackend {
    type Error = CallFailed;
    fn drain_observations(
        &mut self,
        now: Nanos,
        out: &mut Vec<Observation>,
    ) -> Result<(), CallFailed> {
        self.inner
            .drain_observations(now, out)
            .map_err(|_| CallFailed)
    }
    fn drain_owner_updates(&mut self, _out: &mut Vec<OwnerUpdate>) -> Result<(), CallFailed> {
        Ok(())
    }
    fn usage(&mut self, _now: Nanos) -> Result<SystemUsage, CallFailed> {
        Ok(self.inner.usage.clone())
    }
    fn migrate(
        &mut self,
        now: Nanos,
        batch: &MigrationBatch,
    ) -> Result<MigrationReport, CallFailed> {
        if self.fail_call == Some(self.calls.len()) {
            return Err(CallFailed);
        }
        self.calls.push(batch.pages.len());
        self.inner.migrate(now, batch).map_err(|_| CallFailed)
    }
    fn join_pages(&self) -> usize {
        128
    }
}

#[test]
fn joined_batches_are_fewer_calls_and_a_failed_call_keeps_what_moved_before_it() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    let cfg = EngineConfig {
        batch_nr: 64,
        ..kcfg()
    };
    let pending = || -> Vec<Observation> {
        (0..200)
            .flat_map(|v| [obs(1, v, N1, Some(N0), 0), obs(1, v, N1, Some(N0), 1)])
            .collect()
    };
    // 200 ready pages: 4 batches of at most 64 planned, 2 calls of at most 128 made.
    let mut b = JoiningBackend::default();
    b.inner.usage = usage(&topo, Bytes::gib(16));
    b.inner.pending = pending();
    let mut e = Engine::new(cfg.clone(), topo.clone()).unwrap();
    let out = step(
        &mut e,
        &mut b,
        Nanos::from_millis(100),
        &mut StepBuffers::default(),
    )
    .unwrap();
    assert_eq!(e.stats().engine.plan_batches, 4);
    assert_eq!(b.calls, vec![128, 72]);
    assert_eq!(out.batches, 2);
    assert_eq!(out.moved_pages, 200);
    assert_eq!(e.stats().engine.pgpromote_success, 200);
    // The second call fails: the step says so, and the first call's pages still count as
    // promoted (they moved), so they are not planned again.
    let mut b = JoiningBackend {
        fail_call: Some(1),
        ..JoiningBackend::default()
    };
    b.inner.usage = usage(&topo, Bytes::gib(16));
    b.inner.pending = pending();
    let mut e = Engine::new(cfg, topo).unwrap();
    assert!(step(
        &mut e,
        &mut b,
        Nanos::from_millis(100),
        &mut StepBuffers::default()
    )
    .is_err());
    assert_eq!(b.calls, vec![128]);
    assert_eq!(e.stats().engine.pgpromote_success, 128);
}

#[test]
fn step_runs_observe_tick_migrate_apply() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    let mut b = FakeBackend {
        usage: usage(&topo, Bytes::gib(16)),
        ..FakeBackend::default()
    };
    let mut e = Engine::new(kcfg(), topo).unwrap();
    b.pending = (0..50)
        .flat_map(|v| [obs(1, v, N1, Some(N0), 0), obs(1, v, N1, Some(N0), 1)])
        .collect();
    let mut bufs = StepBuffers::default();
    let out = step(&mut e, &mut b, Nanos::from_millis(100), &mut bufs).unwrap();
    assert_eq!(out.observations, 100);
    assert_eq!(out.moved_pages, 50);
    assert_eq!(b.moved, 50);
    assert_eq!(e.stats().engine.pgpromote_success, 50);
}

fn arb_policy() -> impl Strategy<Value = MemPolicy> {
    (0u8..4, 1u64..8).prop_map(|(m, mask)| {
        let mode = match m {
            0 => PolicyMode::Default,
            1 => PolicyMode::Bind,
            2 => PolicyMode::PreferredMany,
            _ => PolicyMode::Preferred,
        };
        MemPolicy::new(mode, NodeMask(mask))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Whatever the policies, accesses and pressure, no batch moves a page to a node its
    /// BIND / PREFERRED_MANY mask excludes.
    #[test]
    fn no_plan_targets_a_node_outside_the_nodemask(
        precise in any::<bool>(),
        policies in proptest::collection::vec(arb_policy(), 4),
        accesses in proptest::collection::vec((0u32..4, 0u64..64, 0u16..3, 0u16..4, 0u64..300), 1..300),
        fast_free_mib in 0u64..2048,
    ) {
        let topo = three_node(Bytes::gib(1), Bytes::gib(1), Bytes::gib(4));
        let mode = if precise { HotnessMode::Precise } else { HotnessMode::Default };
        let cfg = EngineConfig { mode, freq_threshold: 1, ..kcfg() };
        let mut e = Engine::new(cfg, topo.clone()).unwrap();
        for (i, p) in policies.iter().enumerate() {
            let space = SpaceId(u32::try_from(i).unwrap());
            e.update_owner(OwnerUpdate::Policies { space, ranges: vec![(Vpn(0), Vpn(64), *p)] });
        }
        let mut u = usage(&topo, Bytes::mib(fast_free_mib));
        u.nodes.insert(N2, NodeUsage { free: Bytes::gib(4), promo_watermark: None });
        let mut t = 0;
        for (space, vpn, node, acc, dt) in accesses {
            t += dt;
            let acc = (acc < 3).then_some(NodeId(acc));
            e.observe(&[obs(space, vpn, NodeId(node), acc, t)]);
            let plan = e.tick(Nanos::from_millis(t), &u);
            for b in &plan.batches {
                prop_assert!(b.pages.len() <= 512);
                for m in &b.pages {
                    let pol = e.owners().policy(m.page.space, m.page.vpn);
                    prop_assert!(pol.allows(b.target), "{:?} to {} under {:?}", b.kind, b.target, pol);
                    prop_assert!(b.target != m.from);
                }
            }
            apply_all(&mut e, Nanos::from_millis(t), &plan);
        }
    }

    /// Under pressure, promotions admitted in any sliding second never exceed the rate limit,
    /// and no batch exceeds batch_nr.
    #[test]
    fn promoter_respects_rate_limit_and_batch_nr(
        rate_mbps in 1u64..8,
        batch_nr in 64u32..200,
        bursts in proptest::collection::vec((0u64..3000, 1u64..900), 1..40),
    ) {
        let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
        let u = usage(&topo, Bytes::mib(1000));
        let cfg = EngineConfig { promote_rate_limit_mbps: rate_mbps, batch_nr, adaptive_threshold: false, ..kcfg() };
        let limit = mbps_to_pages_per_s(rate_mbps);
        let mut e = Engine::new(cfg, topo).unwrap();
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        let mut t = 0;
        let mut next_vpn = 0;
        for (dt, n) in bursts {
            t += dt;
            heat(&mut e, 1, next_vpn..next_vpn + n, N1, t);
            next_vpn += n;
            for k in 0..5 {
                let now = t + 20 + k * 100;
                let plan = e.tick(Nanos::from_millis(now), &u);
                for b in &plan.batches {
                    prop_assert!(b.pages.len() <= usize::try_from(batch_nr).unwrap());
                }
                admitted.push((now, planned(&plan, MigrationKind::Promote)));
                apply_all(&mut e, Nanos::from_millis(now), &plan);
            }
        }
        for &(end, _) in &admitted {
            let sum: u64 = admitted.iter().filter(|&&(s, _)| s <= end && s + 1000 > end).map(|&(_, n)| n).sum();
            prop_assert!(sum <= limit, "{} pages in the second ending at {} ms, limit {}", sum, end, limit);
        }
    }
}

#[test]
fn promotion_stops_at_the_high_watermark_and_room_is_made_from_idle_pages_only() {
    let (mut e, topo, cap) = one_gib_fast_tier_with_a_10s_window();
    // 300 fast pages: 0..100 last seen at 0 ms (idle), 100..300 at 25 s (recent).
    let mut v: Vec<Observation> = (0..100).map(|i| obs(3, i, N0, Some(N0), 0)).collect();
    v.extend((100..300).map(|i| obs(3, i, N0, Some(N0), 25_000)));
    e.observe(&v);
    // Free just above high (5 %): room for 10 pages before dropping below it.
    let high = cap * 50 / 1000;
    let u = usage(&topo, Bytes(high + 10 * 4096));
    heat(&mut e, 1, 0..50, N1, 29_900);
    let plan = e.tick(Nanos::from_millis(30_000), &u);
    assert_eq!(planned(&plan, MigrationKind::Promote), 10);
    assert_eq!(e.stats().engine.pgpromote_no_room, 40);
    // Within a second: the demoter makes room for the 40 refused pages (160 KiB), from idle pages
    // only (last seen 30 s ago, older than the 10 s window), even though free >= low.
    let plan = e.tick(Nanos::from_millis(30_100), &u);
    let demoted: Vec<u64> = plan
        .batches
        .iter()
        .filter(|b| b.kind == MigrationKind::Demote)
        .flat_map(|b| &b.pages)
        .map(|m| m.page.vpn.0)
        .collect();
    // need = high + 40 refused pages - (high + 10 pages free) = 30 pages.
    assert_eq!(demoted.len(), 30);
    assert!(
        demoted.iter().all(|v| *v < 100),
        "only idle pages: {demoted:?}"
    );
    // More refusals right after: room is made again only a second later.
    heat(&mut e, 2, 0..50, N1, 30_150);
    let plan = e.tick(Nanos::from_millis(30_200), &u);
    assert_eq!(planned(&plan, MigrationKind::Demote), 0);
    let plan = e.tick(Nanos::from_millis(31_100), &u);
    assert!(planned(&plan, MigrationKind::Demote) > 0);
}

/// The room-making walk stops at the generations seen within the ping-pong window and reads
/// them once they are older: the pass finds the one idle page among chunks of recent ones
/// (its generation is the only old one), and a later pass finds the pages that have gone
/// idle since.
#[test]
fn room_is_made_from_idle_pages_among_chunks_of_recent_ones() {
    let (mut e, topo, cap) = one_gib_fast_tier_with_a_10s_window();
    // Chunk 0 (vpns 0..512): all seen at 25 s. Chunk 1 (512..1024): seen at 25 s but 700,
    // seen at 0 ms. Chunk 2 (1024..1536): seen at 25 s.
    let mut v: Vec<Observation> = (0..1536)
        .filter(|&i| i != 700)
        .map(|i| obs(3, i, N0, Some(N0), 25_000))
        .collect();
    v.push(obs(3, 700, N0, Some(N0), 0));
    e.observe(&v);
    let high = cap * 50 / 1000;
    let u = usage(&topo, Bytes(high + 10 * 4096));
    heat(&mut e, 1, 0..50, N1, 29_900);
    e.tick(Nanos::from_millis(30_000), &u);
    // Room for 40 refused pages: only vpn 700 is idle for the 10 s window.
    let plan = e.tick(Nanos::from_millis(30_100), &u);
    assert_eq!(
        planned_vpns(&plan, MigrationKind::Demote),
        std::collections::BTreeSet::from([700])
    );
    // 20 s later the pages seen at 25 s are idle too: the chunks passed over are read again
    // (nothing was applied, so 700 is still there, the coldest).
    heat(&mut e, 2, 0..50, N1, 45_000);
    e.tick(Nanos::from_millis(45_100), &u);
    let plan = e.tick(Nanos::from_millis(46_200), &u);
    let demoted = planned_vpns(&plan, MigrationKind::Demote);
    assert!(demoted.contains(&700), "{demoted:?}");
    assert!(demoted.iter().any(|&v| v < 512), "{demoted:?}");
}

#[test]
fn no_room_is_made_on_no_evidence_when_sources_cannot_see_the_fast_tier() {
    let topo = two_tier(Bytes::gib(1), Bytes::gib(4));
    let cap = Bytes::gib(1).0;
    let cfg = EngineConfig {
        sources: SourceMask::of(&[SourceKind::HintFault]),
        ..kcfg()
    };
    let mut e = Engine::new(cfg, topo.clone()).unwrap();
    // Promote 50 pages, then let time pass: they were never observed on the fast tier.
    let hf = |vpn, t| Observation {
        source: SourceKind::HintFault,
        ..obs(1, vpn, N1, Some(N0), t)
    };
    e.observe(
        &(0..50)
            .flat_map(|v| [hf(v, 0), hf(v, 10)])
            .collect::<Vec<_>>(),
    );
    let p = e.tick(Nanos::from_millis(100), &usage(&topo, Bytes(cap / 2)));
    apply_all(&mut e, Nanos::from_millis(100), &p);
    // At 60 s the node is just above high and more hot pages are refused.
    let high = cap * 50 / 1000;
    let u = usage(&topo, Bytes(high + 10 * 4096));
    e.observe(
        &(100..150)
            .flat_map(|v| [hf(v, 59_900), hf(v, 59_910)])
            .collect::<Vec<_>>(),
    );
    let _ = e.tick(Nanos::from_millis(60_000), &u);
    assert!(e.stats().engine.pgpromote_no_room > 0);
    let p = e.tick(Nanos::from_millis(61_100), &u);
    assert_eq!(
        planned(&p, MigrationKind::Demote),
        0,
        "promotion time is no evidence of coldness"
    );
}

/// The relative threshold's configuration: no demotion (room is free memory only), every
/// source.
fn rel_cfg() -> EngineConfig {
    EngineConfig {
        threshold: ThresholdMode::Relative,
        // One sighting makes a candidate: these tests observe each page once.
        freq_threshold: 1,
        demotion: DemotionConfig {
            enabled: false,
            ..DemotionConfig::default()
        },
        ..EngineConfig::default()
    }
}

fn scan_obs(vpn: u64, node: NodeId, weight: u32, t_ms: u64) -> Observation {
    Observation {
        source: SourceKind::AccessedBitScan,
        weight,
        ..obs(1, vpn, node, None, t_ms)
    }
}

fn planned_vpns(plan: &MigrationPlan, kind: MigrationKind) -> std::collections::BTreeSet<u64> {
    plan.batches
        .iter()
        .filter(|b| b.kind == kind)
        .flat_map(|b| b.pages.iter().map(|m| m.page.vpn.0))
        .collect()
}

#[test]
fn relative_threshold_promotes_a_hot_set_whatever_its_absolute_rate() {
    // The lab's problem: a region reaches 3 of 20 samples on a slow host and 30 on a fast
    // one. Either way the hot part goes and the lukewarm part (a tenth as hot) stays when
    // there is room for the hot part only.
    for hot_weight in [3u32, 30, 300] {
        let topo = two_tier(Bytes::gib(1), Bytes::gib(4));
        let mut e = Engine::new(rel_cfg(), topo.clone()).unwrap();
        let mut v: Vec<Observation> = (0..100).map(|p| scan_obs(p, N1, hot_weight, 0)).collect();
        v.extend((100..400).map(|p| scan_obs(p, N1, (hot_weight / 10).max(1) / 2, 0)));
        e.observe(&v);
        let plan = e.tick(Nanos::from_millis(100), &usage(&topo, Bytes(150 * 4096)));
        let got = planned_vpns(&plan, MigrationKind::Promote);
        assert_eq!(got, (0..100).collect(), "weight {hot_weight}");
        assert_eq!(e.stats().engine.pgpromote_cold, 300);
        assert_eq!(e.stats().engine.promote_room_pages, 150);
    }
}

#[test]
fn relative_threshold_fills_spare_room_and_promotes_nothing_without_room() {
    let topo = two_tier(Bytes::gib(1), Bytes::gib(4));
    let mut e = Engine::new(rel_cfg(), topo.clone()).unwrap();
    e.observe(
        &(0..50)
            .map(|p| scan_obs(p, N1, 1 + u32::try_from(p).unwrap(), 0))
            .collect::<Vec<_>>(),
    );
    let plan = e.tick(Nanos::from_millis(100), &usage(&topo, Bytes::mib(512)));
    assert_eq!(
        planned(&plan, MigrationKind::Promote),
        50,
        "room for all: all go"
    );
    let mut e = Engine::new(rel_cfg(), topo.clone()).unwrap();
    e.observe(
        &(0..50)
            .map(|p| scan_obs(p, N1, 1 + u32::try_from(p).unwrap(), 0))
            .collect::<Vec<_>>(),
    );
    let plan = e.tick(Nanos::from_millis(100), &usage(&topo, Bytes(0)));
    assert!(plan.is_empty());
    assert_eq!(
        e.stats().engine.promote_heat_threshold,
        33,
        "reported in a base page's heat bins: 33 promotes nothing"
    );
}

#[test]
fn relative_threshold_demotes_colder_fast_pages_to_make_room_for_hotter_ones() {
    let (mut e, topo, high) = super::huge_tests::tight_relative();
    // 1000 lukewarm pages on the fast node, seen once long ago.
    e.observe(
        &(10_000..11_000)
            .map(|p| scan_obs(p, N0, 4, 0))
            .collect::<Vec<_>>(),
    );
    let mut free = high;
    let mut t = 10_000;
    let mut on_fast = std::collections::BTreeSet::new();
    for _ in 0..20 {
        // 100 pages seen hot every pass (where they are now); the fast node has no free room.
        let seen: Vec<Observation> = (0..100)
            .map(|p| scan_obs(p, if on_fast.contains(&p) { N0 } else { N1 }, 64, t))
            .collect();
        e.observe(&seen);
        let plan = e.tick(Nanos::from_millis(t), &usage(&topo, Bytes(free)));
        for b in &plan.batches {
            for m in &b.pages {
                match b.kind {
                    MigrationKind::Demote => {
                        assert!(m.page.vpn.0 >= 10_000, "only the colder pages make room");
                        free += 4096;
                    }
                    MigrationKind::Promote => {
                        assert!(on_fast.insert(m.page.vpn.0), "promoted twice");
                        free -= 4096;
                    }
                }
            }
        }
        apply_all(&mut e, Nanos::from_millis(t), &plan);
        t += 500;
    }
    assert_eq!(e.stats().engine.pgpromote_success, 100);
    assert!(e.stats().engine.pgdemote_success >= 100);
    assert_eq!(e.stats().engine.pingpong_demoted, 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// The relative threshold promotes a union of the hottest heat bins that fits the room,
    /// the largest such union, and the same pages when every access rate is scaled by 2^k.
    #[test]
    fn relative_promotes_the_hottest_that_fit_under_any_uniform_scaling(
        rates in proptest::collection::vec(1u32..5000, 1..150),
        room in 0u64..200,
        shift in 1u32..10,
    ) {
        let topo = two_tier(Bytes::gib(1), Bytes::gib(4));
        let run = |scale: u32| {
            let mut e = Engine::new(rel_cfg(), topo.clone()).unwrap();
            let v: Vec<Observation> = rates
                .iter()
                .enumerate()
                .map(|(i, r)| scan_obs(i as u64, N1, r << scale, 0))
                .collect();
            e.observe(&v);
            let plan = e.tick(Nanos::from_millis(100), &usage(&topo, Bytes(room * 4096)));
            planned_vpns(&plan, MigrationKind::Promote)
        };
        let base = run(0);
        prop_assert_eq!(&base, &run(shift), "scaled by 2^{}", shift);
        prop_assert!(base.len() as u64 <= room);
        let bin = |i: usize| crate::hotness::heat_bin(rates[i]);
        let chosen_min = base.iter().map(|v| bin(usize::try_from(*v).unwrap())).min();
        for i in 0..rates.len() {
            if let Some(min) = chosen_min {
                // A union of whole bins: every page at least as hot as the coldest chosen
                // one is chosen.
                prop_assert_eq!(base.contains(&(i as u64)), bin(i) >= min);
            }
        }
        // The largest such union: the next bin down would not fit.
        let next = (0..rates.len())
            .map(bin)
            .filter(|b| chosen_min.is_none_or(|m| *b < m))
            .max();
        if let Some(nb) = next {
            let with_next = (0..rates.len()).filter(|i| bin(*i) >= nb).count() as u64;
            prop_assert!(with_next > room);
        }
    }
}

#[test]
fn relative_mode_waits_for_a_second_sighting_by_default() {
    // A page seen once (a coarse region straddling the hot set's edge) is not a candidate
    // with the default freq_threshold of 2; one seen twice within the window is.
    let topo = two_tier(Bytes::gib(1), Bytes::gib(4));
    let cfg = EngineConfig {
        demotion: DemotionConfig {
            enabled: false,
            ..DemotionConfig::default()
        },
        ..EngineConfig::default()
    };
    assert_eq!(cfg.threshold, ThresholdMode::Relative);
    let mut e = Engine::new(cfg, topo.clone()).unwrap();
    e.observe(&(0..10).map(|p| scan_obs(p, N1, 8, 0)).collect::<Vec<_>>());
    e.observe(&(0..5).map(|p| scan_obs(p, N1, 8, 500)).collect::<Vec<_>>());
    let plan = e.tick(Nanos::from_millis(600), &usage(&topo, Bytes::mib(512)));
    assert_eq!(
        planned_vpns(&plan, MigrationKind::Promote),
        (0..5).collect()
    );
}

fn fail_all(engine: &mut Engine, now: Nanos, plan: &MigrationPlan, err: MoveError) {
    for b in &plan.batches {
        let r = MigrationReport::for_batch(b, b.pages.iter().map(|_| MoveOutcome::Failed(err)));
        engine.apply(now, &r);
    }
}

#[test]
fn pages_that_cannot_move_back_off_exponentially_and_leave_the_promotion_list() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::gib(16));
    let mut e = Engine::new(kcfg(), topo).unwrap();
    let promote_at = |e: &mut Engine, t_ms: u64| {
        heat(e, 1, 0..10, N1, t_ms - 20);
        e.tick(Nanos::from_millis(t_ms), &u)
    };
    let p = promote_at(&mut e, 100);
    assert_eq!(planned(&p, MigrationKind::Promote), 10);
    // Pinned: EBUSY. Backed off for 1 s: hot again at 0.6 s, still not planned.
    fail_all(&mut e, Nanos::from_millis(100), &p, MoveError::Busy);
    assert_eq!(e.stats().engine.pgmigrate_backoff, 10);
    let p = promote_at(&mut e, 600);
    assert_eq!(planned(&p, MigrationKind::Promote), 0);
    assert_eq!(e.stats().engine.pgmigrate_backoff_skipped, 10);
    // After the second, planned again; a second failure (EACCES: shared) doubles the wait.
    let p = promote_at(&mut e, 1200);
    assert_eq!(planned(&p, MigrationKind::Promote), 10);
    fail_all(&mut e, Nanos::from_millis(1200), &p, MoveError::Access);
    assert_eq!(
        planned(&promote_at(&mut e, 2800), MigrationKind::Promote),
        0
    );
    let p = promote_at(&mut e, 3300);
    assert_eq!(planned(&p, MigrationKind::Promote), 10, "2 s later");
    // Moved at last: the back-off is forgotten, and a failure of another kind (ENOMEM: the
    // target's fault, not the page's) does not back off.
    apply_all(&mut e, Nanos::from_millis(3300), &p);
    assert_eq!(e.backoff.len(), 0);
    let p = promote_at(&mut e, 4000);
    fail_all(&mut e, Nanos::from_millis(4000), &p, MoveError::NoMem);
    assert_eq!(e.stats().engine.pgmigrate_backoff, 20);
}

#[test]
fn backed_off_pages_leave_the_demotion_list() {
    let topo = two_tier(Bytes::gib(1), Bytes::gib(4));
    let cap = Bytes::gib(1).0;
    let mut e = Engine::new(kcfg(), topo.clone()).unwrap();
    let roomy = usage(&topo, Bytes(cap / 2));
    let tight = usage(&topo, Bytes(cap / 100));
    heat(&mut e, 1, 0..10, N1, 0);
    let p = e.tick(Nanos::from_millis(100), &roomy);
    apply_all(&mut e, Nanos::from_millis(100), &p);
    let p = e.tick(Nanos::from_millis(5000), &tight);
    assert_eq!(planned(&p, MigrationKind::Demote), 10);
    fail_all(&mut e, Nanos::from_millis(5000), &p, MoveError::Busy);
    let p = e.tick(Nanos::from_millis(5500), &tight);
    assert_eq!(planned(&p, MigrationKind::Demote), 0, "backed off");
    let p = e.tick(Nanos::from_millis(6100), &tight);
    assert_eq!(planned(&p, MigrationKind::Demote), 10, "retried after 1 s");
}

/// An engine over a 1 GiB fast node and a 4 GiB slow one whose demoter starts below 4.9 %
/// free and stops at 5 %: a pass just below the low watermark wants a few hundred pages.
fn tight_demoter() -> (Engine, Topology) {
    let topo = two_tier(Bytes::gib(1), Bytes::gib(4));
    let cfg = EngineConfig {
        demotion: DemotionConfig {
            enabled: true,
            low_free_permille: 49,
            high_free_permille: 50,
            ..DemotionConfig::default()
        },
        ..kcfg()
    };
    (Engine::new(cfg, topo.clone()).unwrap(), topo)
}

/// 5000 known fast pages whose access times are scrambled (a page's rank, coldest first, is
/// `vpn x 7919 mod 5000`), those of rank below `pinned` bound to the fast node; one pass just
/// below the low watermark. Returns the ranks planned for demotion, sorted, the pages the pass
/// wants, and the engine.
fn coldest_pass(pinned: u64) -> (Vec<u64>, u64, Engine) {
    let (mut e, topo) = tight_demoter();
    let rank = |vpn: u64| (vpn * 7919) % 5000;
    let bind_fast = MemPolicy::new(PolicyMode::Bind, NodeMask::from_nodes([N0]));
    e.update_owner(OwnerUpdate::Policies {
        space: SpaceId(1),
        ranges: (0..5000u64)
            .filter(|&v| rank(v) < pinned)
            .map(|v| (Vpn(v), Vpn(v + 1), bind_fast))
            .collect(),
    });
    let v: Vec<Observation> = (0..5000u64)
        .map(|i| obs(1, i, N0, Some(N0), rank(i)))
        .collect();
    e.observe(&v);
    // Below the low watermark: demote down to high, i.e. `want` pages.
    let (vpns, want) = pressure_pass(&mut e, &topo, 6000);
    let mut got: Vec<u64> = vpns.into_iter().map(rank).collect();
    got.sort_unstable();
    (got, want, e)
}

#[test]
fn the_coldest_pages_are_chosen_without_sorting_the_whole_fast_tier() {
    // Room wanted for a few hundred: the selection must pick exactly the coldest, as a full
    // sort would.
    let (got, want, _) = coldest_pass(0);
    assert!(want > 200 && want < 5000, "{want}");
    assert_eq!(got, (0..want).collect::<Vec<_>>());
}

#[test]
fn the_demoter_goes_past_the_coldest_pages_it_may_not_move_in_order() {
    // The 3000 coldest pages are bound to the fast node: every one the first selection holds
    // is skipped, and the demoter must go on to the next coldest, in order, exactly as a full
    // sort would give them.
    let (got, want, e) = coldest_pass(3000);
    // The first selection holds 2 x want + 64 pages, fewer than the 3000 pinned ones.
    assert!(2 * want + 64 < 3000 && want < 2000, "{want}");
    assert_eq!(got, (3000..3000 + want).collect::<Vec<_>>());
    assert_eq!(e.stats().engine.pgdemote_policy_skipped, 3000);
}

#[test]
fn reconfigure_keeps_the_records_and_refuses_a_format_change() {
    let topo = two_tier(Bytes::gib(16), Bytes::gib(64));
    let u = usage(&topo, Bytes::gib(16));
    let mut e = Engine::new(kcfg(), topo).unwrap();
    // One sighting each: tracked, not ready yet.
    let v: Vec<Observation> = (0..50).map(|vpn| obs(1, vpn, N1, Some(N0), 0)).collect();
    e.observe(&v);
    let tracked = |e: &Engine| {
        e.stores
            .values()
            .map(HotnessStore::tracked_pages)
            .sum::<u64>()
    };
    assert_eq!(tracked(&e), 50);
    e.reconfigure(EngineConfig {
        promote_rate_limit_mbps: 128,
        batch_nr: 64,
        ..kcfg()
    })
    .expect("live keys apply");
    assert_eq!(e.config().promote_rate_limit_mbps, 128);
    assert_eq!(tracked(&e), 50, "the hotness store is kept");
    // The second sighting after the change makes the pages ready: the first one was kept.
    let v: Vec<Observation> = (0..50).map(|vpn| obs(1, vpn, N1, Some(N0), 10)).collect();
    e.observe(&v);
    let plan = e.tick(Nanos::from_millis(100), &u);
    assert_eq!(planned(&plan, MigrationKind::Promote), 50);
    assert!(
        plan.batches.iter().all(|b| b.pages.len() <= 64),
        "new batch_nr"
    );

    let before = e.config().clone();
    let err = e
        .reconfigure(EngineConfig {
            mode: HotnessMode::Precise,
            ..kcfg()
        })
        .expect_err("a format change");
    assert!(
        matches!(err, ReconfigureError::NotLive { key: "mode", .. }),
        "{err}"
    );
    let err = e
        .reconfigure(EngineConfig {
            threshold: ThresholdMode::Relative,
            ..kcfg()
        })
        .expect_err("a threshold kind change");
    assert!(
        matches!(
            err,
            ReconfigureError::NotLive {
                key: "threshold",
                ..
            }
        ),
        "{err}"
    );
    let err = e
        .reconfigure(EngineConfig {
            target_nid: Some(N1),
            ..kcfg()
        })
        .expect_err("a slow target");
    assert_eq!(
        err,
        ReconfigureError::Invalid(ConfigError::TargetNotToptier(N1))
    );
    assert_eq!(
        e.config(),
        &before,
        "a refused change leaves the engine as it was"
    );
}

proptest! {
    /// The demoter's head is the fewest coldest candidates that cover a number of base pages:
    /// `cut_to_pages` must keep exactly the shortest prefix of the sorted candidates that
    /// covers it (as a set), and name its largest, whatever mix of base and huge folios.
    #[test]
    fn cut_to_pages_keeps_the_shortest_sorted_prefix_that_covers_the_pages(
        cands in proptest::collection::vec((any::<bool>(), 0u64..50, 0u64..1000, 0u8..3), 0..300),
        at in any::<proptest::sample::Index>(),
        delta in 0u64..3,
    ) {
        let size = |s: u8| match s {
            0 => PageSize::Base,
            1 => PageSize::Huge2M,
            _ => PageSize::Huge1G,
        };
        // Unique pages, as the fast index's are.
        let mut kept: Vec<DemotionCandidate> = cands
            .iter()
            .enumerate()
            .map(|(i, &(o, t, v, s))| {
                let key = PageKey { space: SpaceId(1), vpn: Vpn(v * 1000 + i as u64) };
                (o, Nanos(t), key, size(s))
            })
            .collect();
        let mut sorted = kept.clone();
        sorted.sort_unstable();
        let total: u64 = sorted.iter().map(|c| c.3.nr_pages().0).sum();
        // Aim at a prefix's exact cover, one page below it or above it: the edges of the cut.
        let pages = if sorted.is_empty() {
            delta
        } else {
            let upto = at.index(sorted.len()) + 1;
            (sorted[..upto].iter().map(|c| c.3.nr_pages().0).sum::<u64>() + delta).saturating_sub(1)
        };
        // The shortest covering prefix.
        let mut acc = 0;
        let k = sorted
            .iter()
            .position(|c| {
                acc += c.3.nr_pages().0;
                acc >= pages
            })
            .map_or(sorted.len(), |i| i + 1);
        let got = cut_to_pages(&mut kept, pages);
        if pages == 0 || total < pages || k == sorted.len() {
            prop_assert_eq!(got, None);
            prop_assert_eq!(kept.len(), sorted.len());
        } else {
            prop_assert_eq!(got, Some(sorted[k - 1]));
            kept.sort_unstable();
            prop_assert_eq!(&kept[..], &sorted[..k]);
        }
    }
}

/// One pressure pass just below the low watermark of [`tight_demoter`]'s fast node, at
/// `t_ms`, applied as if every move succeeded; returns the folio heads (as `vpn`) it planned to demote, sorted,
/// and how many base pages it wanted.
fn pressure_pass(e: &mut Engine, topo: &Topology, t_ms: u64) -> (Vec<u64>, u64) {
    let cap = Bytes::gib(1).0;
    let (low, high) = (cap * 49 / 1000, cap * 50 / 1000);
    let free = low - 4096;
    let want = (high - free).div_ceil(4096);
    let now = Nanos::from_millis(t_ms);
    let plan = e.tick(now, &usage(topo, Bytes(free)));
    apply_all(e, now, &plan);
    let mut got: Vec<u64> = plan
        .batches
        .iter()
        .filter(|b| b.kind == MigrationKind::Demote)
        .flat_map(|b| b.pages.iter().map(|m| m.page.vpn.0))
        .collect();
    got.sort_unstable();
    (got, want)
}

/// What a full sort of the fast tier gives: the coldest folios, in order (last access, then
/// address), until they cover `want` base pages.
fn coldest_by_sort(fast: &BTreeMap<u64, u64>, size: PageSize, want: u64) -> Vec<u64> {
    let mut order: Vec<(u64, u64)> = fast.iter().map(|(&vpn, &t)| (t, vpn)).collect();
    order.sort_unstable();
    let mut need = want;
    let mut got: Vec<u64> = order
        .into_iter()
        .take_while(|_| {
            let go = need > 0;
            need = need.saturating_sub(size.nr_pages().0);
            go
        })
        .map(|(_, vpn)| vpn)
        .collect();
    got.sort_unstable();
    got
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// The demoter passes over a whole chunk of the fast index when the chunk's bound on its
    /// entries' last access says none of them can be among the coldest (`FastIndex`,
    /// `DemotionFilter::coldest`). Across passes over a fast tier that changes between them
    /// (pages demoted, pages touched later, and new pages whose last access is older than
    /// what the previous walk found in their chunk) every pass must plan exactly the pages a
    /// full sort gives, for base pages and 2 MiB folios alike.
    #[test]
    fn the_demoters_chunk_bounds_never_hide_a_colder_page(
        first in proptest::collection::vec((0u64..8192, 1000u64..5000), 300..1500),
        later in proptest::collection::vec((0u64..8192, 0u64..9000), 0..300),
        huge in any::<bool>(),
    ) {
        let (mut e, topo) = tight_demoter();
        let size = if huge { PageSize::Huge2M } else { PageSize::Base };
        // Folio heads: 8192 base pages are 16 chunks; 8192 2 MiB folios are 16 chunks too.
        let head = |i: u64| i * size.nr_pages().0;
        let see = |e: &mut Engine, fast: &mut BTreeMap<u64, u64>, pages: &[(u64, u64)]| {
            let v: Vec<Observation> = pages
                .iter()
                .map(|&(i, t)| Observation {
                    page: PageRef { size, ..PageRef::base(SpaceId(1), Vpn(head(i))) },
                    ..obs(1, 0, N0, Some(N0), t)
                })
                .collect();
            e.observe(&v);
            for &(i, t) in pages {
                let at = fast.entry(head(i)).or_insert(t);
                *at = (*at).max(t);
            }
        };
        // The model: folio head -> last access (ms), as the engine keeps it.
        let mut fast: BTreeMap<u64, u64> = BTreeMap::new();
        see(&mut e, &mut fast, &first);
        for (pass, t_ms) in [(0, 10_000), (1, 20_000), (2, 30_000)] {
            if pass == 1 {
                see(&mut e, &mut fast, &later);
            }
            let (got, want) = pressure_pass(&mut e, &topo, t_ms);
            let expect = coldest_by_sort(&fast, size, want);
            prop_assert!(!expect.is_empty() || fast.is_empty());
            prop_assert_eq!(&got, &expect, "pass {}", pass);
            for vpn in &got {
                fast.remove(vpn);
            }
        }
    }
}

/// A move's time survives the compact stamp, time 0 included, "never" stays apart from every
/// time, and the history entry is 16 bytes as the map stores it (an `Option`): the size the
/// D scenario's 256 GB of fast memory needs (see [`MoveHistory`]).
#[test]
fn move_stamps_keep_their_time_in_sixteen_bytes() {
    for t in [0, 1, 999, 1 << 40, u64::MAX - 2] {
        assert_eq!(MoveStamp::at(Nanos(t)).get(), Some(Nanos(t)), "{t}");
    }
    assert_eq!(MoveStamp::NEVER.get(), None);
    // Times past the stamp's range saturate instead of reading as never.
    assert_eq!(
        MoveStamp::at(Nanos(u64::MAX)).get(),
        Some(Nanos(u64::MAX - 2))
    );
    let h = MoveHistory::default();
    assert_eq!((h.promoted_at.get(), h.demoted_at.get()), (None, None));
    assert_eq!(std::mem::size_of::<Option<MoveHistory>>(), 16);
}

/// The demoter's answer by brute force: every admitted page of the index, ranked, and the
/// fewest smallest that cover `head` pages (all if they cover fewer), with whether any were
/// left out.
fn coldest_by_ranking_all(
    f: &DemotionFilter,
    fast: &FastIndex,
    owners: &OwnerMap,
    backoff: &mut SparsePageMap<Backoff>,
    heat: &mut HeatMap,
    head: u64,
    after: Option<DemotionCandidate>,
) -> (Vec<DemotionCandidate>, bool) {
    let mut all: Vec<DemotionCandidate> = fast
        .map
        .iter()
        .filter(|(_, _, p)| p.node == f.node)
        .map(|(key, size, p)| {
            let cg = owners.owner(key.space).cgroup;
            let not_over = !f.over.get(&cg).copied().unwrap_or(false);
            ((not_over, p.last_access(), key, size), p.sampled)
        })
        .filter(|(c, sampled)| {
            after.is_none_or(|a| *c > a) && f.admits(*c, *sampled, backoff, heat)
        })
        .map(|(c, _)| c)
        .collect();
    all.sort_unstable();
    let mut pages = 0u64;
    let n = all
        .iter()
        .position(|c| {
            pages += c.3.nr_pages().0;
            pages >= head
        })
        .map_or(all.len(), |i| i + 1);
    let left_out = n < all.len();
    all.truncate(n);
    (all, left_out)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The walk by age gives the brute-force answer on any history of the fast index: folios
    /// of every size put in, touched (into later generations, or with an older time, as idle
    /// facts are), removed, covered by others, the age lists turned on at any point and
    /// walked many times (each walk drops stale entries), the lists rebuilt when they
    /// overgrow; passes of every kind (idle, room, below low), two fast nodes, cgroups over
    /// their share or not, heads from one page to all (a pass asks for 64 at least), with
    /// and without `after`.
    #[test]
    fn the_walk_by_age_finds_what_ranking_every_page_finds(
        ops in proptest::collection::vec(
            (0u8..6, 0u32..3, 0u64..2048, 0u8..3, 0u64..40_000, 0u16..2),
            1..300,
        ),
        passes in proptest::collection::vec(
            (0u8..3, 1u64..3000, any::<bool>(), 0u16..2, 0u64..40_000, 0u8..4),
            1..6,
        ),
        over in proptest::collection::vec(any::<bool>(), 3),
    ) {
        let mut fast = FastIndex::default();
        let mut owners = OwnerMap::default();
        for space in 0..3u32 {
            owners.set_owner(SpaceId(space), Owner { pid: space, cgroup: CgroupId(space) });
        }
        let mut backoff: SparsePageMap<Backoff> = SparsePageMap::default();
        let mut heat = HeatMap::new(1000);
        let ms = Nanos::from_millis;
        let run_passes = |fast: &mut FastIndex, backoff: &mut SparsePageMap<Backoff>,
                          heat: &mut HeatMap, at: u64| -> Result<(), TestCaseError> {
            for &(kind, head, use_over, node, now_ms, after_k) in &passes {
                let filter = DemotionFilter {
                    node: NodeId(node),
                    now: ms(now_ms.max(at)),
                    idle_pass: kind == 0,
                    idle_after: ms(5_000),
                    below_low: kind == 2,
                    idle_for: ms(10_000),
                    largest: fast.map.largest_size(),
                    heat_threshold: None,
                    over: (0..3u32)
                        .map(|c| (CgroupId(c), use_over && over[c as usize]))
                        .collect(),
                };
                let (want_all, _) =
                    coldest_by_ranking_all(&filter, fast, &owners, backoff, heat, u64::MAX, None);
                // `after`: one of the ranked candidates, or none.
                let after = (after_k > 0 && !want_all.is_empty())
                    .then(|| want_all[(after_k as usize * 7) % want_all.len()]);
                let want =
                    coldest_by_ranking_all(&filter, fast, &owners, backoff, heat, head, after);
                let got = filter.coldest(fast, &owners, backoff, heat, head, after);
                prop_assert_eq!(got, want);
            }
            Ok(())
        };
        for (i, &(op, space, vpn, size, t, node)) in ops.iter().enumerate() {
            let size = [PageSize::Base, PageSize::Huge2M, PageSize::Base][size as usize];
            let key = PageKey { space: SpaceId(space), vpn: size.head(Vpn(vpn)) };
            let node = NodeId(node);
            match op {
                0 | 1 => fast.touch(key, node, size, ms(t), op == 0),
                2 => fast.insert(key, FastPage::new(node, size, false, ms(t))),
                3 => fast.remove(key),
                4 => fast.remove_overlapping(key, size),
                _ => {
                    // A walk now and then: turns the lists on, drops stale entries.
                    run_passes(&mut fast, &mut backoff, &mut heat, 0)?;
                }
            }
            if i % 97 == 96 {
                fast.retain_spaces_except(SpaceId(2));
            }
        }
        run_passes(&mut fast, &mut backoff, &mut heat, 0)?;
        // The lists' invariant: every folio of the index is listed in its generation, and
        // the count of entries is the lists' (the rebuild trigger reads it).
        if fast.ages.on {
            prop_assert_eq!(
                fast.ages.entries,
                fast.ages.gens.values().map(Vec::len).sum::<usize>()
            );
            for (key, size, p) in fast.map.iter() {
                prop_assert!(fast
                    .ages
                    .gens
                    .get(&age_gen(p.last_access()))
                    .is_some_and(|l| l.contains(&key)), "{key:?} {size:?}");
            }
        }
    }
}

/// Without a demoter the engine keeps no fast index and no move history (nobody reads them);
/// promotion is unchanged. Turning demotion on by a reconfigure starts them: the fast pages
/// the sources report from then on are the demoter's candidates; turning it off again keeps
/// what was learnt.
#[test]
fn no_fast_index_is_kept_without_a_demoter_until_demotion_is_turned_on() {
    let topo = two_tier(Bytes::gib(1), Bytes::gib(4));
    let cap = Bytes::gib(1).0;
    let roomy = usage(&topo, Bytes(cap / 2));
    let tight = usage(&topo, Bytes(cap / 100));
    let off = EngineConfig {
        demotion: DemotionConfig {
            enabled: false,
            ..DemotionConfig::default()
        },
        ..kcfg()
    };
    let mut e = Engine::new(off.clone(), topo).unwrap();
    heat(&mut e, 1, 0..10, N1, 0);
    let p = e.tick(Nanos::from_millis(100), &roomy);
    apply_all(&mut e, Nanos::from_millis(100), &p);
    assert_eq!(
        e.stats().engine.pgpromote_success,
        10,
        "promotion as before"
    );
    let fast: Vec<Observation> = (100..1100).map(|i| obs(1, i, N0, Some(N0), 200)).collect();
    e.observe(&fast);
    assert_eq!(e.stats().engine.fast_observed, 1000);
    assert!(e.tick(Nanos::from_millis(2000), &tight).is_empty());
    assert_eq!(
        e.stats().engine.fast_index_pages,
        0,
        "no index without a demoter"
    );
    assert!(e.fast.map.is_empty() && e.history.is_empty());

    e.reconfigure(kcfg()).expect("demotion is a live key");
    assert!(
        e.tick(Nanos::from_millis(3000), &tight).is_empty(),
        "nothing known yet"
    );
    e.observe(&fast);
    let p = e.tick(Nanos::from_millis(4000), &tight);
    assert_eq!(
        planned(&p, MigrationKind::Demote),
        1000,
        "the pages seen since"
    );
    assert_eq!(e.stats().engine.fast_index_pages, 1000);
    e.reconfigure(off).expect("demotion is a live key");
    e.observe(&[obs(1, 5000, N0, Some(N0), 4100)]);
    e.tick(Nanos::from_millis(5000), &tight);
    assert_eq!(
        e.stats().engine.fast_index_pages,
        1001,
        "kept, and kept up, once on"
    );
}
