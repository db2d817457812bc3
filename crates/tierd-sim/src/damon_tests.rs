//! Unit tests of `damon.rs`, kept beside it so the model's file stays readable.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use tierd_engine::policy::{MemPolicy, PolicyMode};
use tierd_engine::topology::{NodePerf, NodeSpec, Topology};
use tierd_engine::types::{Bytes, CgroupId, NodeMask, PageSize, SpaceId, Vpn};

use super::*;
use crate::mechanism::{Accounting, KernelKnobs, SimRng};
use crate::memory::{ClassId, ClassSpec, RegionId, Spread};
use crate::workload::{LatencyTable, Load, Process, Stream, ThreadGroup};

const FAST: NodeId = NodeId(0);
const SLOW: NodeId = NodeId(1);
const STEP_NS: u64 = 10_000_000;

/// Node 0: DRAM with the CPUs; node 1: CPU-less CXL-like memory (the perf numbers of
/// tierd_engine::topology::two_tier, without needing its `testutils` feature).
fn topology(fast: Bytes, slow: Bytes) -> Topology {
    let perf = |lat, bw| NodePerf {
        read_latency_ns: lat,
        write_latency_ns: lat,
        read_bandwidth_mbps: bw,
        write_bandwidth_mbps: bw,
    };
    Topology::new(
        vec![
            NodeSpec {
                id: FAST,
                has_cpus: true,
                capacity: fast,
                perf: Some(perf(100, 20_000)),
                adistance: None,
            },
            NodeSpec {
                id: SLOW,
                has_cpus: false,
                capacity: slow,
                perf: Some(perf(250, 10_000)),
                adistance: None,
            },
        ],
        vec![vec![10, 20], vec![20, 10]],
    )
    .unwrap()
}

/// A machine, its processes and everything a step needs.
struct Sim {
    mem: Memory,
    procs: Vec<Process>,
    lat: LatencyTable,
    acct: Accounting,
    rng: SimRng,
    knobs: KernelKnobs,
    now: u64,
    /// The grain of the next region mapped.
    grain: u32,
}

impl Sim {
    fn new(fast: Bytes, slow: Bytes, seed: u64) -> Sim {
        let mut lat = LatencyTable::default();
        lat.ns.insert((FAST, FAST), 100.0);
        lat.ns.insert((FAST, SLOW), 320.0);
        Sim {
            mem: Memory::new(topology(fast, slow)),
            procs: Vec::new(),
            lat,
            acct: Accounting::default(),
            rng: SimRng::seed_from_u64(seed),
            knobs: KernelKnobs::default(),
            now: 0,
            grain: 1,
        }
    }

    /// Calls `f` with a context at the current time, as a step would see it.
    fn with_ctx<R>(&mut self, f: impl FnOnce(&mut Ctx<'_>) -> R) -> R {
        let load = Load::compute(&self.procs, &self.mem, &self.lat, &[]);
        let mut ctx = Ctx {
            now: self.now,
            dt: STEP_NS,
            mem: &mut self.mem,
            load: &load,
            procs: &self.procs,
            rng: &mut self.rng,
            acct: &mut self.acct,
            kernel: &self.knobs,
            memcg: &crate::mechanism::NO_MEMCGS,
        };
        f(&mut ctx)
    }

    /// Maps `units` base pages on the slow node for a new process with `threads` threads
    /// on node 0 chasing pointers through the units in `hot` (unit ranges).
    fn add_process(
        &mut self,
        units: u32,
        hot: Vec<(u32, u32)>,
        policy: MemPolicy,
        threads: u32,
        compute_ns: f64,
    ) -> (RegionId, ClassId) {
        self.add_process_sized(units, PageSize::Base, hot, policy, threads, compute_ns)
    }

    /// As [`Sim::add_process`], with units of `page_size`.
    fn add_process_sized(
        &mut self,
        units: u32,
        page_size: PageSize,
        hot: Vec<(u32, u32)>,
        policy: MemPolicy,
        threads: u32,
        compute_ns: f64,
    ) -> (RegionId, ClassId) {
        self.add_process_on(SLOW, units, page_size, hot, policy, threads, compute_ns)
    }

    /// As [`Sim::add_process`] with one thread, in units of `grain` base pages.
    fn add_process_grained(&mut self, units: u32, grain: u32, hot: Vec<(u32, u32)>) -> ClassId {
        self.grain = grain;
        let (_, class) =
            self.add_process_on(SLOW, units, PageSize::Base, hot, MemPolicy::DEFAULT, 1, 0.0);
        self.grain = 1;
        class
    }

    /// As [`Sim::add_process_sized`], its units mapped on `node`.
    #[allow(clippy::too_many_arguments)]
    fn add_process_on(
        &mut self,
        node: NodeId,
        units: u32,
        page_size: PageSize,
        hot: Vec<(u32, u32)>,
        policy: MemPolicy,
        threads: u32,
        compute_ns: f64,
    ) -> (RegionId, ClassId) {
        let space = SpaceId(u32::try_from(self.procs.len()).unwrap() + 1);
        let rid = self
            .mem
            .map_region_grained(
                "buf",
                space,
                CgroupId::ROOT,
                Vpn(0),
                units,
                (page_size, self.grain),
                policy,
                vec![ClassSpec {
                    name: "hot".into(),
                    ranges: hot,
                    spread: Spread::Uniform,
                }],
                7,
                |_, o| o.push(node),
            )
            .unwrap();
        let hot = self
            .mem
            .classes()
            .iter()
            .position(|c| c.region == rid && c.name == "hot")
            .unwrap();
        let hot = ClassId(u16::try_from(hot).unwrap());
        self.procs.push(Process {
            name: format!("p{}", space.0),
            space,
            cgroup: CgroupId::ROOT,
            groups: vec![ThreadGroup {
                node: FAST,
                threads,
                sharing: threads,
            }],
            streams: vec![Stream {
                class: hot,
                share: 1.0,
            }],
            compute_ns,
            running: true,
            regions: vec![rid],
            rate_scale: 1.0,
            op: None,
        });
        (rid, hot)
    }

    /// Runs `damon` (a kdamond, or several as [`Kdamonds`]) for `secs`, calling `check`
    /// after every step.
    fn run<M: Mechanism>(&mut self, damon: &mut M, secs: f64, mut check: impl FnMut(&M, &Sim)) {
        let steps = (secs * 1e9 / STEP_NS as f64).round() as u64;
        for _ in 0..steps {
            self.with_ctx(|ctx| damon.step(ctx));
            self.now += STEP_NS;
            check(damon, self);
        }
    }

    /// Units of `class` on `node`.
    fn on(&self, class: ClassId, node: NodeId) -> u64 {
        self.mem
            .class(class)
            .units_on
            .get(&node)
            .copied()
            .unwrap_or(0)
    }

    /// Units of region `rid` outside `class` on `node`.
    fn rest_on(&self, rid: RegionId, class: ClassId, node: NodeId) -> u64 {
        self.mem.region_placement(rid).get(&node).map_or(0, |p| p.0) - self.on(class, node)
    }
}

/// Every `stride`-th unit of `units` hot: the finest scatter.
fn every(stride: u32, units: u32) -> Vec<(u32, u32)> {
    (0..units / stride).map(|i| (i * stride, 1)).collect()
}

fn params() -> DamonParams {
    DamonParams {
        max_nr_regions: 1000,
        ..DamonParams::default()
    }
}

/// A scheme that never applies: DAMON only monitors.
fn monitor_only() -> DamonParams {
    DamonParams {
        nr_accesses_min: 1000,
        ..params()
    }
}

#[test]
fn hot_units_are_promoted() {
    let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 1);
    let (rid, hot) = sim.add_process(16384, vec![(4096, 4096)], MemPolicy::DEFAULT, 1, 0.0);
    let mut damon = Damon::new(&params());
    sim.run(&mut damon, 5.0, |_, _| {});
    assert_eq!(sim.on(hot, FAST), 4096, "every hot unit promoted");
    let cold_promoted = sim.rest_on(rid, hot, FAST);
    assert!(
        cold_promoted < 12288 / 2,
        "{cold_promoted} cold units promoted"
    );
    let migrated = sim.acct.get("pgmigrate_success");
    assert_eq!(migrated, 4096 + cold_promoted);
    assert_eq!(sim.acct.promoted_pages, migrated);
    assert_eq!(sim.acct.get("damos_sz_applied"), migrated * PAGE_SIZE);
    assert_eq!(damon.stats().sz_applied, migrated * PAGE_SIZE);
    assert!(sim.acct.get("damos_nr_applied") >= 1);
    assert!(sim.acct.get("damos_sz_tried") >= migrated * PAGE_SIZE);
    // Only NUMA balancing counts pgpromote_success (mm/migrate.c `migrate_misplaced_folio()`; docs/lab.md, first guest runs, 3).
    assert_eq!(sim.acct.get("pgpromote_success"), 0);
    assert_eq!(sim.mem.check(), None);
}

#[test]
fn finely_scattered_hot_units_drag_cold_ones_along() {
    let promoted_cold = |hot: Vec<(u32, u32)>| {
        let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 2);
        let (rid, class) = sim.add_process(16384, hot, MemPolicy::DEFAULT, 1, 0.0);
        let mut damon = Damon::new(&params());
        sim.run(&mut damon, 5.0, |_, _| {});
        assert_eq!(sim.on(class, FAST), 4096, "every hot unit promoted");
        sim.rest_on(rid, class, FAST)
    };
    // Every fourth page hot: each region's sampled page is hot a quarter of the time, so
    // every region qualifies and all of it moves (DAMON paddr migrates physical ranges).
    let fine = promoted_cold(every(4, 16384));
    assert!(
        fine > 12288 * 9 / 10,
        "fine scatter: {fine} cold units promoted"
    );
    // One 16 MiB chunk: regions adapt around it; only coarse early regions spill over.
    let coarse = promoted_cold(vec![(4096, 4096)]);
    assert!(coarse * 2 < fine, "coarse {coarse} vs fine {fine}");
}

#[test]
fn quota_caps_bytes_per_reset_interval() {
    let quota = Bytes::mib(1).0;
    let mut p = params();
    p.quota_bytes = quota;
    p.quota_reset_interval_ms = 1000;
    let mut damon = Damon::new(&p);
    let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 3);
    sim.add_process(16384, every(4, 16384), MemPolicy::DEFAULT, 1, 0.0);
    // The first window opens at the first aggregation (about 100 ms in) and each lasts at
    // least 1 s, so by time t at most (t - t0) / 1 s + 1 windows have opened.
    let mut t0 = None;
    sim.run(&mut damon, 8.0, |d, s| {
        if d.effective_quota_bytes() == 0 {
            assert_eq!(s.acct.get("damos_sz_tried"), 0);
            return;
        }
        assert_eq!(d.effective_quota_bytes(), quota);
        let t0 = *t0.get_or_insert(s.now - STEP_NS);
        let windows = (s.now - t0) / 1_000_000_000 + 1;
        let applied = s.acct.get("damos_sz_applied");
        assert!(
            applied <= quota * windows,
            "{applied} B in {windows} windows"
        );
        assert!(d.stats().sz_tried <= quota * windows);
    });
    // 8 s: windows close at 1.1, 2.1, ... 7.1 s, each with the quota used up.
    assert_eq!(sim.acct.get("damos_qt_exceeds"), 7);
    assert_eq!(damon.stats().qt_exceeds, 7);
    let applied = sim.acct.get("damos_sz_applied");
    assert!(applied >= quota * 7, "quota not used: {applied}");
}

/// On a THP-backed node the quota counts bytes, as mm/damon/core.c `damos_charge_quota()`
/// charges `sz` (the region's bytes): 2 MiB per THP moved, so an 8 MiB window moves 4.
#[test]
fn quota_charges_two_mib_per_thp() {
    let quota = Bytes::mib(8).0;
    let mut p = params();
    p.quota_bytes = quota;
    p.quota_reset_interval_ms = 1000;
    let mut damon = Damon::new(&p);
    let mut sim = Sim::new(Bytes::gib(1), Bytes::gib(1), 3);
    // 256 THPs (512 MiB), all hot: every region qualifies, only the quota holds DAMON back.
    let thps = 256;
    sim.add_process_sized(
        thps,
        PageSize::Huge2M,
        vec![(0, thps)],
        MemPolicy::DEFAULT,
        1,
        0.0,
    );
    let mut t0 = None;
    sim.run(&mut damon, 4.0, |d, s| {
        if d.effective_quota_bytes() == 0 {
            return;
        }
        let t0 = *t0.get_or_insert(s.now - STEP_NS);
        let windows = (s.now - t0) / 1_000_000_000 + 1;
        let applied = s.acct.get("damos_sz_applied");
        assert!(
            applied <= quota * windows,
            "{applied} B in {windows} windows"
        );
        assert_eq!(applied % Bytes::mib(2).0, 0, "whole THPs only: {applied}");
    });
    let applied = sim.acct.get("damos_sz_applied");
    let moved = sim.acct.get("thp_migration_success");
    assert!(moved >= 3 * 4, "quota not used: {moved} THPs");
    assert_eq!(applied, moved * Bytes::mib(2).0);
    assert_eq!(sim.acct.get("pgmigrate_success"), moved * 512);
    assert_eq!(sim.acct.get("thp_migration_split"), 0);
    assert_eq!(sim.mem.check(), None);
}

#[test]
fn time_quota_follows_the_measured_throughput() {
    let mut p = params();
    p.quota_ms = 1;
    let mut damon = Damon::new(&p);
    let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 4);
    sim.add_process(16384, every(4, 16384), MemPolicy::DEFAULT, 1, 0.0);
    sim.run(&mut damon, 0.15, |_, _| {});
    // Before anything was charged: PAGE_SIZE * 1024 bytes per ms.
    assert_eq!(damon.effective_quota_bytes(), 4 << 20);
    sim.run(&mut damon, 3.0, |_, _| {});
    // Then 1 ms at the modelled cost: every frame walked, every page migrated.
    let ns_per_page = APPLY_FRAME_NS + MIGRATE_FOLIO_NS + MIGRATE_COPY_NS_PER_PAGE;
    let expect = 1e6 / ns_per_page * PAGE_SIZE as f64;
    let esz = damon.effective_quota_bytes() as f64;
    assert!((esz / expect - 1.0).abs() < 0.05, "esz {esz} vs {expect}");
}

#[test]
fn nr_regions_stay_within_bounds() {
    let mut p = monitor_only();
    p.min_nr_regions = 10;
    p.max_nr_regions = 60;
    let mut damon = Damon::new(&p);
    let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 5);
    // Everything warm with noisy samples (p ~ 0.3 per sample): splits keep finding
    // differences, so only max_nr_regions holds the count down.
    sim.add_process(16384, vec![(0, 16384)], MemPolicy::DEFAULT, 1, 500.0);
    let mut max_seen = 0;
    sim.run(&mut damon, 20.0, |d, s| {
        let n = d.regions().len();
        assert!((10..=60).contains(&n), "{n} regions");
        assert_eq!(s.acct.get("damon_nr_regions"), n as u64);
        max_seen = max_seen.max(n);
        // Contiguous over the whole span.
        assert_eq!(d.regions()[0].start, 0);
        assert!(d.regions().windows(2).all(|w| w[0].end == w[1].start));
        assert_eq!(d.regions().last().unwrap().end, 16384);
    });
    assert!(
        max_seen > 30,
        "the upper bound was never tested: {max_seen}"
    );
}

#[test]
fn regions_isolate_a_contiguous_hot_range() {
    let mut damon = Damon::new(&monitor_only());
    let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 6);
    let (lo, hi) = (6000u32, 9000u32);
    sim.add_process(16384, vec![(lo, hi - lo)], MemPolicy::DEFAULT, 1, 0.0);
    sim.run(&mut damon, 20.0, |_, _| {});
    let overlap = |r: &DamonRegion| r.end.min(hi).saturating_sub(r.start.max(lo));
    let (mut hot_in, mut hot_out, mut cold_in, mut cold_total) = (0, 0, 0, 0);
    for r in damon.regions() {
        if r.last_nr_accesses >= 10 {
            hot_in += overlap(r);
            hot_out += r.len() - overlap(r);
        } else if r.last_nr_accesses == 0 {
            cold_in += overlap(r);
            cold_total += r.len() - overlap(r);
        }
    }
    let hot = hi - lo;
    assert!(
        hot_in >= hot * 9 / 10,
        "hot regions cover {hot_in} of {hot}"
    );
    assert!(
        hot_out <= hot / 10,
        "hot regions spill {hot_out} cold units"
    );
    assert!(cold_in <= hot / 20, "cold regions hide {cold_in} hot units");
    assert!(
        cold_total >= (16384 - hot) * 9 / 10,
        "cold regions cover {cold_total}"
    );
    assert!(
        damon.regions().len() < 100,
        "{} regions",
        damon.regions().len()
    );
}

#[test]
fn mempolicy_masks_are_never_crossed() {
    let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 7);
    let bind = MemPolicy::new(PolicyMode::Bind, NodeMask::from_nodes([SLOW]));
    let (_, bound) = sim.add_process(4096, vec![(0, 4096)], bind, 1, 0.0);
    let many = MemPolicy::new(PolicyMode::PreferredMany, NodeMask::from_nodes([SLOW]));
    let (_, preferred) = sim.add_process(4096, vec![(0, 4096)], many, 1, 0.0);
    let (_, free) = sim.add_process(4096, vec![(0, 4096)], MemPolicy::DEFAULT, 1, 0.0);
    let mut damon = Damon::new(&params());
    sim.run(&mut damon, 5.0, |_, _| {});
    assert_eq!(sim.on(bound, FAST), 0);
    assert_eq!(sim.on(preferred, FAST), 0);
    assert_eq!(sim.on(free, FAST), 4096);
    assert_eq!(sim.mem.stats.mempolicy_violations, 0);
    assert!(sim.acct.get("damos_mpol_skipped") >= 8192);
}

#[test]
fn migration_gives_up_when_the_target_is_full() {
    // 8 MiB of DRAM for 16 MiB of hot pages.
    let mut sim = Sim::new(Bytes::mib(8), Bytes::mib(256), 8);
    let (_, hot) = sim.add_process(8192, vec![(0, 4096)], MemPolicy::DEFAULT, 1, 0.0);
    let mut damon = Damon::new(&params());
    sim.run(&mut damon, 3.0, |_, _| {});
    let m = sim.mem.node(FAST).unwrap();
    let wm = Watermarks::of(m.capacity, sim.knobs.watermark_scale_factor);
    assert!(m.free() >= wm.min, "DAMON dipped below the min watermark");
    assert!(sim.on(hot, FAST) > 1000);
    assert!(sim.acct.get("pgmigrate_fail") > 0);
    assert_eq!(sim.mem.check(), None);
}

#[test]
fn young_filter_keeps_cold_pages_in_place() {
    let run = |young_filter| {
        let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 9);
        let (rid, hot) = sim.add_process(16384, every(4, 16384), MemPolicy::DEFAULT, 1, 0.0);
        let mut damon = Damon::new(&DamonParams {
            young_filter,
            ..params()
        });
        sim.run(&mut damon, 5.0, |_, _| {});
        (sim.on(hot, FAST), sim.rest_on(rid, hot, FAST), sim.acct)
    };
    let (hot, cold, acct) = run(true);
    assert!(hot >= 4096 * 9 / 10, "{hot} hot units promoted");
    assert_eq!(cold, 0, "never-accessed pages are never young");
    assert!(acct.get("damos_sz_ops_filter_passed") < acct.get("damos_sz_tried") / 2);
    let (_, cold, _) = run(false);
    assert!(cold > 12288 * 9 / 10);
}

/// `migrate_cold` as DAMON's tiering demotes: regions that went unaccessed for an
/// aggregation (`nr_accesses` 0..0), ranked by `damon_cold_score()`, the hot score's
/// complement, and a `young` filter that rejects (`allow` N) what was used since: the
/// hot pages stay, the cold ones move. With the filter allowing instead, nothing passes
/// (no page in a 0-access region is young), which is why mtier.c rejects.
#[test]
fn migrate_cold_with_a_rejecting_young_filter_moves_only_cold_pages() {
    let cold = DamonParams {
        monitor_node: 0,
        target_nid: 1,
        action: DamosAction::MigrateCold,
        nr_accesses_min: 0,
        nr_accesses_max: 0,
        young_filter: true,
        young_filter_allow: false,
        weight_nr_accesses_permil: 100,
        weight_age_permil: 100,
        ..params()
    };
    let d = Damon::new(&cold);
    let r = |nr_accesses, age| DamonRegion {
        start: 0,
        end: 1,
        nr_accesses,
        last_nr_accesses: 0,
        age,
    };
    for (n, age) in [(0, 0), (0, 50), (5, 3), (20, 0)] {
        assert_eq!(
            d.score(&r(n, age)),
            DAMOS_MAX_SCORE - d.hot_score(&r(n, age))
        );
    }
    assert!(d.score(&r(0, 50)) > d.score(&r(0, 0)), "older is colder");
    let run = |allow| {
        let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 15);
        let (rid, hot) = sim.add_process_on(
            FAST,
            16384,
            PageSize::Base,
            vec![(0, 4096)],
            MemPolicy::DEFAULT,
            1,
            0.0,
        );
        let mut damon = Damon::new(&DamonParams {
            young_filter_allow: allow,
            ..cold.clone()
        });
        sim.run(&mut damon, 5.0, |_, _| {});
        (sim.on(hot, SLOW), sim.rest_on(rid, hot, SLOW))
    };
    let (hot, cold_moved) = run(false);
    assert_eq!(hot, 0, "young (hot) pages are rejected");
    assert!(
        cold_moved > 12288 * 8 / 10,
        "{cold_moved} cold units demoted"
    );
    assert_eq!(run(true), (0, 0));
}

/// Two kdamonds in one row (`Kdamonds`): each tunes its own intervals (kdamond 0 over an
/// empty node 0 slows down, kdamond 1 over a hot quarter of node 1 keeps 5 ms), and the
/// second's gauges take `_k1`.
#[test]
fn kdamonds_keep_their_gauges_apart() {
    let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 16);
    sim.add_process(16384, vec![(4096, 4096)], MemPolicy::DEFAULT, 1, 0.0);
    let goal = IntervalsGoal::default();
    let mut both = Kdamonds::new(
        &DamonParams {
            monitor_node: 0,
            monitor_whole_node: true,
            intervals_goal: Some(goal),
            ..monitor_only()
        },
        &[DamonParams {
            intervals_goal: Some(goal),
            ..monitor_only()
        }],
    );
    sim.run(&mut both, 3.0, |_, _| {});
    let [k0, k1] = both.kdamonds() else {
        panic!("two kdamonds");
    };
    let v = &sim.acct.vmstat;
    assert_eq!(v.get("damon_sample_us"), Some(&k0.sample_us()));
    assert_eq!(v.get("damon_sample_us_k1"), Some(&k1.sample_us()));
    assert_eq!(
        v.get("damon_nr_regions_k1"),
        Some(&(k1.regions().len() as u64))
    );
    assert!(
        k0.sample_us() > k1.sample_us(),
        "node 0 is empty, node 1 accessed: {} against {} us",
        k0.sample_us(),
        k1.sample_us()
    );
}

#[test]
fn kdamond_cost_is_charged_per_sample_and_per_page() {
    let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 10);
    sim.add_process(16384, vec![(4096, 4096)], MemPolicy::DEFAULT, 1, 0.0);
    let mut damon = Damon::new(&params());
    let mut region_samples = 0.0;
    sim.run(&mut damon, 4.0, |d, _| {
        region_samples += d.regions().len() as f64 * 2.0; // two samples per 10 ms step
    });
    let pages = sim.acct.get("pgmigrate_success") as f64;
    let migrate = pages * (MIGRATE_FOLIO_NS + MIGRATE_COPY_NS_PER_PAGE + APPLY_FRAME_NS);
    let cpu = sim.acct.promoter_cpu_ns;
    assert!(cpu >= migrate + 800.0 * 10.0 * SAMPLE_FREE_NS, "{cpu} ns");
    assert!(
        cpu <= migrate * 2.0 + region_samples * (SAMPLE_REGION_NS + AGGR_REGION_NS),
        "{cpu} ns"
    );
}

/// The intervals goal (mm/damon/core.c `kdamond_tune_intervals()`): a kdamond whose
/// samples rarely find an access (a hot set of 0.1 % of what it watches) lengthens its
/// sampling interval, at most doubling it every `aggrs` aggregations, up to the goal's
/// top; one whose samples find accesses most of the time shortens it, at most halving it,
/// down to the goal's bottom. The aggregation interval follows (20 samples each), and the
/// interval moves only at an aggregation's end.
#[test]
fn the_intervals_goal_tunes_the_sampling_interval_within_its_range() {
    let goal = IntervalsGoal {
        access_bp: 400,
        aggrs: 3,
        min_sample_us: 5_000,
        max_sample_us: 100_000,
    };
    for (hot, start_us, end_us) in [
        (vec![(8192, 16)], 5_000, 100_000),
        (vec![(0, 16384)], 40_000, 5_000),
    ] {
        let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 12);
        sim.add_process(16384, hot, MemPolicy::DEFAULT, 8, 0.0);
        let mut damon = Damon::new(&DamonParams {
            sample_us: start_us,
            aggr_us: start_us * 20,
            intervals_goal: Some(goal),
            ..monitor_only()
        });
        let mut seen = vec![start_us];
        sim.run(&mut damon, 30.0, |d, _| {
            let p = d.params();
            assert_eq!(p.aggr_us, p.sample_us * 20);
            assert!((5_000..=100_000).contains(&p.sample_us), "{}", p.sample_us);
            if seen.last() != Some(&p.sample_us) {
                seen.push(p.sample_us);
            }
        });
        assert_eq!(damon.sample_us(), end_us, "{seen:?}");
        for w in seen.windows(2) {
            let (a, b) = (w[0], w[1]);
            assert!(
                b <= a * 2 && b * 2 >= a && (b > a) == (end_us > start_us),
                "{seen:?}"
            );
        }
        // Fixed intervals stay where they were set.
        let mut fixed = Damon::new(&DamonParams {
            sample_us: start_us,
            aggr_us: start_us * 20,
            ..monitor_only()
        });
        sim.run(&mut fixed, 3.0, |_, _| {});
        assert_eq!(fixed.sample_us(), start_us);
    }
}

/// Quota goals (`damos_set_effective_quota()` with `quotas/goals`): with node 0's use
/// below a `node_mem_used_bp` goal the effective quota starts at 1 byte and grows each
/// reset interval by the goal's shortfall (here 50 % used against 100 %: by half again,
/// as `damon_feed_loop_next_input()` adds the input times the shortfall), so nothing
/// moves until it covers a page; a `node_mem_free_bp` goal met twice over keeps the
/// quota at 1 byte for good (DT's demoting context on lab A).
#[test]
fn quota_goals_grow_the_effective_quota_by_the_shortfall() {
    let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 13);
    sim.add_process(16384, vec![(0, 16384)], MemPolicy::DEFAULT, 8, 0.0);
    // Half of node 0 held by what the model does not track page by page.
    sim.mem.reserve(FAST, tierd_engine::types::Pages(32_768));
    let goal = |metric, target_value| QuotaGoal {
        metric,
        target_value,
        nid: 0,
    };
    let mut promote = Damon::new(&DamonParams {
        quota_bytes: 200 << 20,
        quota_goals: vec![goal(QuotaMetric::NodeMemUsedBp, 10_000)],
        ..params()
    });
    let mut quotas = Vec::new();
    sim.run(&mut promote, 30.0, |d, s| {
        if quotas.last() != Some(&d.effective_quota_bytes()) {
            quotas.push(d.effective_quota_bytes());
            if d.effective_quota_bytes() < PAGE_SIZE {
                assert_eq!(s.acct.get("pgmigrate_success"), 0, "{quotas:?}");
            }
        }
    });
    // 0 before the first window; then esz_bp = 15000, 22500, 33750, ... read in bytes.
    assert_eq!(quotas[..7], [0, 1, 2, 3, 5, 7, 11], "{quotas:?}");
    // Past 4 KiB after 21 windows, when pages start to move; each raises node 0's use,
    // so no step is more than half again.
    assert!(sim.acct.get("pgmigrate_success") > 0, "{quotas:?}");
    assert!(
        quotas[1..]
            .windows(2)
            .all(|w| w[1] > w[0] && 2 * w[1] <= 3 * w[0] + 2),
        "{quotas:?}"
    );

    let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 13);
    sim.add_process(16384, vec![(0, 16384)], MemPolicy::DEFAULT, 8, 0.0);
    let mut idle = Damon::new(&DamonParams {
        quota_bytes: 200 << 20,
        quota_goals: vec![goal(QuotaMetric::NodeMemFreeBp, 50)],
        ..params()
    });
    sim.run(&mut idle, 5.0, |d, _| {
        assert!(d.effective_quota_bytes() <= 1);
    });
    assert_eq!(sim.acct.get("pgmigrate_success"), 0);
}

/// `next_apply_sis`: a scheme with an apply interval of 1 s applies once a second
/// whatever the aggregation interval (here 100 ms), at the first sample after it is due.
#[test]
fn a_scheme_applies_once_per_apply_interval() {
    let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 14);
    sim.add_process(16384, vec![(0, 16384)], MemPolicy::DEFAULT, 8, 0.0);
    let mut damon = Damon::new(&DamonParams {
        quota_bytes: 64 << 10,
        quota_reset_interval_ms: 100,
        apply_interval_us: 1_000_000,
        ..params()
    });
    let (mut moved, mut at) = (0, Vec::new());
    sim.run(&mut damon, 5.05, |_, s| {
        let now = s.acct.get("pgmigrate_success");
        if now > moved {
            moved = now;
            at.push(s.now);
        }
    });
    // Seen at the end of the step of the sample that applied: about 1.01, 2.01, ... s,
    // a sample late at times (the kdamond's work stretches its sampling interval).
    assert_eq!(at.len(), 5, "{at:?}");
    assert!(
        at.windows(2)
            .all(|w| (1_000_000_000..=1_020_000_000).contains(&(w[1] - w[0]))),
        "{at:?}"
    );
    assert_eq!(moved, 5 * 16, "64 KiB a window");
}

/// The moving sum `__damos_valid_target()` matches (`nr_accesses_bp / 10000`): this
/// aggregation's count at its end, the last one's fading in over the window before.
#[test]
fn the_moving_sum_blends_the_last_aggregation_into_this_one() {
    let mut d = Damon::new(&params());
    let r = DamonRegion {
        start: 0,
        end: 1,
        nr_accesses: 4,
        last_nr_accesses: 10,
        age: 0,
    };
    d.passed_sample_intervals = 40;
    for (next_aggregation, expect) in [(40, 4), (50, 9), (60, 14)] {
        d.next_aggregation_sis = next_aggregation;
        assert_eq!(d.moving_nr_accesses(&r), expect);
    }
}

/// A new range moves the interval into it at once and the tuning goes on within it (the
/// daemon's pace); without a goal the range only bounds the fixed interval.
#[test]
fn a_new_sample_range_clamps_the_interval() {
    let goal = IntervalsGoal {
        access_bp: 400,
        aggrs: 3,
        min_sample_us: 5_000,
        max_sample_us: 100_000,
    };
    let mut d = Damon::new(&DamonParams {
        intervals_goal: Some(goal),
        ..monitor_only()
    });
    d.set_sample_range(100_000, 1_000_000);
    assert_eq!((d.sample_us(), d.params().aggr_us), (100_000, 2_000_000));
    let g = d.params().intervals_goal.expect("goal kept");
    assert_eq!((g.min_sample_us, g.max_sample_us), (100_000, 1_000_000));
    d.set_sample_range(5_000, 100_000);
    assert_eq!(
        d.sample_us(),
        100_000,
        "inside the range: left to the tuning"
    );
    let mut fixed = Damon::new(&monitor_only());
    fixed.set_sample_range(100_000, 1_000_000);
    assert_eq!(fixed.sample_us(), 100_000);
    fixed.set_sample_range(5_000, 5_000);
    assert_eq!(fixed.sample_us(), 5_000);
    assert!(fixed.params().intervals_goal.is_none());
}

#[test]
fn regions_follow_a_growing_span() {
    let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 11);
    let mut damon = Damon::new(&params());
    sim.run(&mut damon, 0.5, |d, _| assert!(d.regions().is_empty()));
    sim.add_process(4096, vec![], MemPolicy::DEFAULT, 1, 0.0);
    sim.run(&mut damon, 1.0, |_, _| {});
    let (_, hot) = sim.add_process(4096, vec![(0, 4096)], MemPolicy::DEFAULT, 1, 0.0);
    sim.run(&mut damon, 3.0, |d, s| {
        let r = d.regions();
        assert_eq!(r[0].start, 0);
        assert!(r.windows(2).all(|w| w[0].end == w[1].start));
        assert_eq!(r.last().unwrap().end, s.mem.node(SLOW).unwrap().slots());
    });
    assert_eq!(
        sim.on(hot, FAST),
        4096,
        "pages in the new slots were promoted"
    );
}

#[test]
fn whole_node_monitoring_covers_free_frames() {
    let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(64), 12);
    let (_, hot) = sim.add_process(4096, vec![(0, 1024)], MemPolicy::DEFAULT, 1, 0.0);
    let mut damon = Damon::new(&DamonParams {
        monitor_whole_node: true,
        ..params()
    });
    sim.run(&mut damon, 3.0, |_, _| {});
    assert_eq!(damon.regions().last().unwrap().end, 16384);
    assert_eq!(sim.on(hot, FAST), 1024);
}

/// In a grained machine DAMON's addresses are base pages, as in the kernel: the span is
/// the pages of the slots, a region can end inside a unit, and the scheme moves the hot
/// set as page by page.
#[test]
fn a_grained_machine_is_monitored_in_base_pages() {
    let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 13);
    let hot = sim.add_process_grained(2048, 8, vec![(512, 512)]);
    let mut damon = Damon::new(&params());
    sim.run(&mut damon, 5.0, |_, _| {});
    assert_eq!(damon.unit_bytes(), PAGE_SIZE);
    assert_eq!(damon.regions().last().unwrap().end, 2048 * 8);
    assert!(
        damon.regions().iter().any(|r| r.start % 8 != 0),
        "no region ends inside a unit: {:?}",
        damon.regions()
    );
    assert_eq!(sim.on(hot, FAST), 512, "every hot unit promoted");
    assert_eq!(sim.mem.check(), None);
}

/// A unit moves whole, so a region that holds some of its pages takes it with their share
/// as probability: a region of 3 of a unit's 8 pages moves 3/8 of such units, one that
/// holds all 8 moves every one. Each such region counts as applied, as page by page its 3
/// pages would have moved.
#[test]
fn a_region_holding_part_of_a_unit_moves_it_with_that_share() {
    let moved = |first: u32, len: u32| {
        let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 14);
        let hot = sim.add_process_grained(1024, 8, vec![(0, 1024)]);
        let mut damon = Damon::new(&monitor_only());
        sim.run(&mut damon, 0.01, |_, _| {});
        damon.regions = (0..1024)
            .map(|k| DamonRegion::new(8 * k + first, 8 * k + first + len))
            .collect();
        let applied = sim.with_ctx(|ctx| {
            (0..1024)
                .filter(|&i| damon.migrate_region(ctx, i, 0).any)
                .count()
        });
        assert_eq!(applied, 1024, "regions applied");
        assert_eq!(sim.mem.check(), None);
        sim.on(hot, FAST)
    };
    assert_eq!(moved(0, 8), 1024);
    // 384 expected; the binomial's standard deviation is 15.5.
    let part = moved(1, 3);
    assert!(
        (384 - 62..=384 + 62).contains(&part),
        "{part} of 1024 moved"
    );
}

#[test]
fn hot_score_matches_the_kernel_formula() {
    let damon = Damon::new(&params());
    let r = |nr_accesses, age| DamonRegion {
        nr_accesses,
        age,
        ..DamonRegion::new(0, 1)
    };
    // nr_accesses only: nr_accesses * 100 / 20, then * 99 / 100.
    assert_eq!(damon.hot_score(&r(20, 0)), 99);
    assert_eq!(damon.hot_score(&r(10, 0)), 49);
    assert_eq!(damon.hot_score(&r(1, 0)), 4);
    assert_eq!(damon.hot_score(&r(0, 500)), 0);
    let aged = Damon::new(&DamonParams {
        weight_nr_accesses_permil: 0,
        weight_age_permil: 1000,
        ..params()
    });
    // Age 0: age_in_log 32 -> subscore 50 -> 49. 50 s idle: -(ilog2(5) + 1 + ...) colder.
    assert_eq!(aged.hot_score(&r(0, 0)), 49);
    // age 500 x 100 ms = 50 s: age_in_log = ilog2(50) + 1 = 6; idle -> 32 - 6 = 26.
    assert_eq!(aged.hot_score(&r(0, 500)), 26 * 100 / 32 / 2 * 99 / 100);
    assert_eq!(aged.hot_score(&r(5, 500)), 38 * 100 / 32 / 2 * 99 / 100);
}

#[test]
fn quota_serves_the_hottest_regions_first() {
    // Two hot chunks, one accessed 20x as often; a quota too small for both.
    let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 13);
    let (_, warm) = sim.add_process(8192, vec![(0, 2048)], MemPolicy::DEFAULT, 1, 20_000.0);
    let (_, hot) = sim.add_process(8192, vec![(4096, 2048)], MemPolicy::DEFAULT, 1, 0.0);
    let mut damon = Damon::new(&DamonParams {
        quota_bytes: Bytes::mib(2).0,
        ..params()
    });
    sim.run(&mut damon, 4.0, |_, _| {});
    assert!(sim.on(hot, FAST) >= 1536, "hot {}", sim.on(hot, FAST));
    assert!(
        sim.on(warm, FAST) < sim.on(hot, FAST) / 2,
        "warm {}",
        sim.on(warm, FAST)
    );
}

#[test]
fn a_new_window_resumes_after_the_last_charge() {
    let mut damon = Damon::new(&params());
    damon.regions = (0..4)
        .map(|k| DamonRegion::new(k * 100, k * 100 + 100))
        .collect();
    damon.quota.charge_addr_from = Some(150);
    assert!(damon.skip_charged_region(0), "wholly before the mark");
    assert!(
        damon.skip_charged_region(1),
        "straddles the mark: cut and skipped"
    );
    assert_eq!(damon.regions[1].end, 150);
    assert_eq!(damon.regions[2].start, 150);
    assert!(!damon.skip_charged_region(2), "starts at the mark");
    assert_eq!(damon.quota.charge_addr_from, None);
    // A mark past everything but the last region: the walk wraps around.
    damon.quota.charge_addr_from = Some(1000);
    assert!(damon.skip_charged_region(3));
    assert!(
        damon.skip_charged_region(4),
        "the last region resets the mark"
    );
    assert_eq!(damon.quota.charge_addr_from, None);
}

#[test]
fn merging_averages_by_size_and_ages_stable_regions() {
    let mut damon = Damon::new(&params());
    let r = |start, end, nr_accesses, last_nr_accesses, age| DamonRegion {
        nr_accesses,
        last_nr_accesses,
        age,
        ..DamonRegion::new(start, end)
    };
    damon.regions = vec![
        r(0, 100, 10, 10, 4),  // stable: age 5
        r(100, 400, 11, 3, 9), // changed by 8 > 1: age 0; merges (|10 - 11| <= 1)
        r(400, 500, 0, 0, 2),  // idle both times: age 3; too far from 10
        r(500, 600, 1, 0, 7),  // zero <-> non-zero: age 0; merges with the idle one
    ];
    damon.merge_regions_of(1, u64::MAX);
    assert_eq!(
        damon.regions,
        vec![
            // (10 * 100 + 11 * 300) / 400 = 10; age (5 * 100 + 0 * 300) / 400 = 1.
            r(0, 400, 10, 10, 1),
            // (0 * 100 + 1 * 100) / 200 = 0; age (3 * 100 + 0) / 200 = 1.
            r(400, 600, 0, 0, 1),
        ]
    );
    // The size limit keeps regions apart.
    damon.merge_regions_of(100, 399 * PAGE_SIZE);
    assert_eq!(damon.regions.len(), 2);
}

#[test]
fn splitting_cuts_each_region_into_two_or_three_pieces() {
    let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), 14);
    let mut damon = Damon::new(&params());
    let before: Vec<DamonRegion> = (0..10)
        .map(|k| DamonRegion::new(k * 1000, k * 1000 + 1000))
        .collect();
    damon.regions = before.clone();
    sim.with_ctx(|ctx| damon.split_regions(ctx));
    assert_eq!(damon.regions.len(), 20, "two pieces each the first time");
    for (r, pieces) in before.iter().zip(damon.regions.chunks(2)) {
        assert_eq!((pieces[0].start, pieces[1].end), (r.start, r.end));
        assert_eq!(pieces[0].end, pieces[1].start);
        assert!((100..=900).contains(&pieces[0].len()), "{pieces:?}");
    }
    // Same count as last time: three pieces.
    damon.regions = before.clone();
    damon.last_nr_regions = 10;
    sim.with_ctx(|ctx| damon.split_regions(ctx));
    assert_eq!(damon.regions.len(), 30);
    assert!(damon.regions.windows(2).all(|w| w[0].end == w[1].start));
    // Above max_nr_regions / 2: no split.
    sim.with_ctx(|ctx| damon.split_regions(ctx));
    sim.with_ctx(|ctx| damon.split_regions(ctx));
    let n = damon.regions.len();
    assert!(n <= 1000, "{n}");
    damon.regions = (0..501)
        .map(|k| DamonRegion::new(k * 10, k * 10 + 10))
        .collect();
    sim.with_ctx(|ctx| damon.split_regions(ctx));
    assert_eq!(damon.regions.len(), 501);
}

#[test]
fn same_seed_same_run() {
    let run = |seed| {
        let mut sim = Sim::new(Bytes::mib(256), Bytes::mib(256), seed);
        sim.add_process(16384, every(3, 16384), MemPolicy::DEFAULT, 1, 300.0);
        let mut damon = Damon::new(&DamonParams {
            quota_bytes: Bytes::mib(4).0,
            young_filter: true,
            ..params()
        });
        sim.run(&mut damon, 3.0, |_, _| {});
        (
            sim.acct.vmstat,
            sim.acct.promoter_cpu_ns,
            damon.regions().to_vec(),
        )
    };
    let a = run(42);
    assert_eq!(a, run(42));
    assert_ne!(a.2, run(43).2);
}

/// Seed A's D3 (docs/simulator.md, "The seeds") at 1/16 scale: 4 threads on node 0, a 4 GiB
/// buffer on the slow node with a 1 GiB hot set in chunks at random (seeded) places, the
/// pointer chase touching only the hot set, 100 ns / 320 ns latencies, quota 128 MiB/s
/// scaled to 8 MiB/s, 240 s. Prints node0, over-promotion, the counters and kdamond's CPU
/// time for a range of chunk sizes (a 1/16-scale chunk stands for one 16x larger at full
/// scale). Published at full scale: node0 23.9 GB, +49 %, sz_applied 24.7 GB, 229 quota
/// windows exceeded, regions 21-71, kdamond 13 s. Run with
/// `cargo test -p tierd-sim --release -- --ignored --nocapture calibration`; env
/// `D3_SECS` (duration), `D3_THP` (2 MiB pages), `D3_WHOLE_NODE` (monitor all 16 GiB).
#[test]
#[ignore = "calibration report, ~2 min in release"]
fn calibration_seed_a_d3() {
    let thp = std::env::var("D3_THP").is_ok();
    let (page, unit_kib, chunks): (PageSize, u32, &[u32]) = if thp {
        (PageSize::Huge2M, 2048, &[1, 2, 8, 32, 128])
    } else {
        (
            PageSize::Base,
            4,
            &[1, 16, 64, 256, 1024, 4096, 16384, 65536],
        )
    };
    let units = (4u32 << 20) / unit_kib; // 4 GiB
    let hot_units = units / 4;
    let secs: f64 = std::env::var("D3_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(240.0);
    let whole = std::env::var("D3_WHOLE_NODE").is_ok();
    println!(
        "chunk (1/16) | node0 GiB | over | hot on node0 | sz_applied GiB | qt_exceeds | \
         regions (last 40 s) | kdamond s | lat ns"
    );
    for &chunk in chunks {
        for seed in [1u64, 2] {
            let mut rng = SimRng::seed_from_u64(seed);
            let mut slots: Vec<u32> = (0..units / chunk).collect();
            slots.shuffle(&mut rng);
            let mut hot: Vec<(u32, u32)> = slots[..(hot_units / chunk) as usize]
                .iter()
                .map(|&c| (c * chunk, chunk))
                .collect();
            hot.sort_unstable();
            let mut sim = Sim::new(Bytes::gib(16), Bytes::gib(16), seed);
            let (rid, hot_class) =
                sim.add_process_sized(units, page, hot, MemPolicy::DEFAULT, 4, 0.0);
            let mut damon = Damon::new(&DamonParams {
                monitor_whole_node: whole,
                max_nr_regions: 100_000,
                min_nr_regions: 10,
                nr_accesses_min: 1,
                quota_bytes: Bytes::mib(8).0,
                quota_reset_interval_ms: 1000,
                weight_nr_accesses_permil: 1000,
                ..DamonParams::default()
            });
            let (mut lo, mut hi) = (usize::MAX, 0);
            sim.run(&mut damon, secs, |d, s| {
                if s.now as f64 > (secs - 40.0).max(0.0) * 1e9 {
                    lo = lo.min(d.regions().len());
                    hi = hi.max(d.regions().len());
                }
            });
            let gib = |units: u64| units as f64 * f64::from(unit_kib) / f64::from(1u32 << 20);
            let node0 = sim.mem.region_placement(rid).get(&FAST).map_or(0, |p| p.0);
            let node0 = node0 as f64 * 4096.0 / f64::from(1u32 << 30);
            let hot_gib = gib(u64::from(hot_units));
            println!(
                "{:>7} KiB seed {seed} | {:.3} | {:+.0}% | {:.0}% | {:.3} | {} | {}-{} | {:.1} | {:.0}",
                chunk * unit_kib,
                node0,
                (node0 - hot_gib) / hot_gib * 100.0,
                sim.on(hot_class, FAST) as f64 / f64::from(hot_units) * 100.0,
                sim.acct.get("damos_sz_applied") as f64 / f64::from(1u32 << 30),
                sim.acct.get("damos_qt_exceeds"),
                lo,
                hi,
                sim.acct.promoter_cpu_ns * 1e-9,
                Load::compute(&sim.procs, &sim.mem, &sim.lat, &[]).process_latency_ns[0]
            );
        }
    }
}
