//! The run observer (`World::run_observed`): it sees every sample, its per-process view adds
//! up to the reported placement and the hot class, and observing does not change the result.
#![allow(clippy::tests_outside_test_module, clippy::unwrap_used)]

use tierd_engine::types::NodeId;
use tierd_sim::scenario::Scenario;
use tierd_sim::sim::World;

#[test]
fn observer_sees_each_sample_and_its_pages_add_up() {
    let sc = Scenario::find("pointer-chase").unwrap().scaled(1.0 / 64.0);
    let world = World::build(&sc).unwrap();
    let config = sc.config.iter().find(|c| c.id == "T1").unwrap();
    let plain = world.run(config, |_| {}).unwrap();
    let mut seen = Vec::new();
    let observed = world
        .run_observed(
            config,
            |_| {},
            |o| {
                seen.push((o.sample().t_s, o.owners(), o.nodes(), o.promoted_pages()));
            },
        )
        .unwrap();
    assert_eq!(
        serde_json::to_string(&plain).unwrap(),
        serde_json::to_string(&observed).unwrap(),
        "observing changed the run"
    );
    assert_eq!(seen.len(), plain.series.len());
    for ((t, owners, nodes, promoted), s) in seen.iter().zip(&plain.series) {
        assert!((t - s.t_s).abs() < 1e-12);
        // One process, "chase", whose buffer is the reported region.
        assert_eq!(owners.len(), 1);
        let chase = &owners[0];
        assert_eq!(chase.name, "chase");
        assert_eq!(chase.cgroup, "/");
        for (n, gib) in &s.node_gib {
            let pages = chase.pages.get(n).copied().unwrap_or(0);
            let want = gib * f64::from(1u32 << 30) / 4096.0;
            assert!(
                (pages as f64 - want).abs() < 1.0,
                "node {n}: {pages} vs {want}"
            );
        }
        // The hot class is a quarter of the buffer, and its share on node 0 is hot_on_fast.
        let total: u64 = chase.pages.values().sum();
        let hot: u64 = chase.hot_pages.values().sum();
        assert!(hot > 0 && hot < total);
        assert!(
            ((hot as f64) / (total as f64) - 0.25).abs() < 0.02,
            "{hot}/{total}"
        );
        let hot_fast = chase.hot_pages.get(&NodeId(0)).copied().unwrap_or(0) as f64 / hot as f64;
        assert!((hot_fast - s.hot_on_fast).abs() < 1e-9);
        // Hot pages are a subset on every node.
        for (n, h) in &chase.hot_pages {
            assert!(*h <= chase.pages.get(n).copied().unwrap_or(0));
        }
        // Nodes: three, in tiers 0 (DRAM) and 1 (CXL), usage covers the process's pages.
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[2].tier, 1);
        assert_eq!(nodes[0].tier, 0);
        for n in nodes {
            assert!(n.used <= n.capacity);
            assert!(n.used >= chase.pages.get(&n.id).copied().unwrap_or(0));
        }
        let want_promoted = s.promoted_gib * f64::from(1u32 << 30) / 4096.0;
        assert!((*promoted as f64 - want_promoted).abs() < 1.0);
    }
    // T1 promotes: the last sample has hot pages on node 0, the first fewer.
    let first = seen.first().unwrap().1[0]
        .hot_pages
        .get(&NodeId(0))
        .copied()
        .unwrap_or(0);
    let last = seen.last().unwrap().1[0]
        .hot_pages
        .get(&NodeId(0))
        .copied()
        .unwrap_or(0);
    assert!(last > first, "{first} -> {last}");
}

#[test]
fn memory_of_a_paused_process_or_one_nobody_reads_is_cold() {
    // Seed E: memcached is paused until 10 s; the eater maps memory nobody reads, exits at 8 s.
    let sc = Scenario::find("memcached-preferred-many")
        .unwrap()
        .scaled(1.0 / 16.0);
    let world = World::build(&sc).unwrap();
    let mut seen = Vec::new();
    world
        .run_observed(
            &sc.config[0],
            |_| {},
            |o| seen.push((o.sample().t_s, o.owners())),
        )
        .unwrap();
    let at = |t: f64| &seen.iter().find(|(s, _)| (*s - t).abs() < 1e-9).unwrap().1;
    let by = |owners: &[tierd_sim::observe::OwnerPages], name: &str| {
        owners.iter().find(|o| o.name == name).unwrap().clone()
    };
    let early = at(5.0);
    let (mc, eater) = (by(early, "memcached"), by(early, "eater"));
    assert!(mc.pages.values().sum::<u64>() > 0 && mc.hot_pages.values().sum::<u64>() == 0);
    assert!(eater.pages.values().sum::<u64>() > 0 && eater.hot_pages.values().sum::<u64>() == 0);
    let late = at(20.0);
    let mc = by(late, "memcached");
    assert!(mc.running);
    assert_eq!(mc.hot_pages, mc.pages, "all of memcached's items are read");
    assert!(by(late, "eater").pages.is_empty(), "exited");
}
