//! Unit tests of `numab.rs`, kept beside it so the model's file stays readable.

use rand::SeedableRng;
use tierd_engine::policy::{MemPolicy, PolicyMode};
use tierd_engine::topology::{NodeSpec, Topology};
use tierd_engine::types::{Bytes, CgroupId, NodeMask, PageSize, SpaceId, Vpn};

use super::*;
use crate::mechanism::{kswapd, Accounting, KernelKnobs};
use crate::memory::{ClassId, ClassSpec, Spread};
use crate::workload::{LatencyTable, Stream, ThreadGroup};

const DT: u64 = 10 * NS_PER_MS;
const MIB: u64 = 1 << 20;

proptest::proptest! {
    /// The fault queue pops exactly what a binary heap of the same entries pops, whatever
    /// the interleaving of pushes (before, inside and after the sorted bucket's time),
    /// pops and read-aheads; and a read-ahead only names entries still queued.
    #[test]
    fn the_fault_queue_pops_what_a_heap_pops(
        ops in proptest::collection::vec((0u8..5, 0u64..(40 << FAULT_BUCKET_SHIFT), 0u32..64), 0..600),
    ) {
        let mut q = FaultQueue::default();
        let mut heap: BinaryHeap<Reverse<QueuedFault>> = BinaryHeap::new();
        let mut now = 0u64;
        for (op, dt, unit) in ops {
            match op {
                0 | 1 | 4 => {
                    // Faults are queued at or after the time reached; op 4 up to 40 k
                    // buckets ahead, past the ring's span.
                    let ahead = if op == 4 { dt * 1024 } else { dt / (1 + u64::from(op) * 64) };
                    let e = (now + ahead, unit, unit / 2);
                    q.push(e);
                    heap.push(Reverse(e));
                }
                2 => {
                    let queued: Vec<QueuedFault> = heap.iter().map(|Reverse(e)| *e).collect();
                    for e in q.next_to_warm() {
                        proptest::prop_assert!(queued.contains(e));
                    }
                }
                _ => {
                    let got = q.pop();
                    proptest::prop_assert_eq!(got, heap.pop().map(|Reverse(e)| e));
                    if let Some(e) = got {
                        now = e.0;
                    }
                }
            }
            proptest::prop_assert_eq!(q.len, heap.len());
            proptest::prop_assert_eq!(q.peek_time(), heap.peek().map(|Reverse(e)| e.0));
        }
        while let Some(Reverse(e)) = heap.pop() {
            proptest::prop_assert_eq!(q.pop(), Some(e));
        }
        proptest::prop_assert_eq!(q.pop(), None);
    }
}

/// A node for [`topo`]: id, has CPUs, capacity in MiB.
fn topo(nodes: &[(u16, bool, u64)]) -> Topology {
    let specs = nodes
        .iter()
        .map(|&(id, cpus, mib)| NodeSpec {
            id: NodeId(id),
            has_cpus: cpus,
            capacity: Bytes(mib * MIB),
            perf: None,
            // CPU-less nodes are CXL: the dax/kmem default adist, memory_tier22.
            adistance: (!cpus).then_some(2880),
        })
        .collect();
    let n = nodes.len();
    let dist = (0..n)
        .map(|i| (0..n).map(|j| if i == j { 10 } else { 20 }).collect())
        .collect();
    Topology::new(specs, dist).unwrap()
}

/// A small machine, its processes and the loop that drives a mechanism.
struct Bench {
    mem: Memory,
    procs: Vec<Process>,
    lat: LatencyTable,
    acct: Accounting,
    rng: SimRng,
    kernel: KernelKnobs,
    now: u64,
    tax: Vec<f64>,
    next_vpn: u64,
    /// Base pages per unit of the base-page regions mapped next.
    grain: u32,
}

impl Bench {
    /// `lat`: (initiator, target, ns).
    fn new(topo: Topology, lat: &[(u16, u16, f64)], seed: u64) -> Bench {
        Bench {
            mem: Memory::new(topo),
            procs: Vec::new(),
            lat: LatencyTable {
                ns: lat
                    .iter()
                    .map(|&(i, t, ns)| ((NodeId(i), NodeId(t)), ns))
                    .collect(),
            },
            acct: Accounting::default(),
            rng: SimRng::seed_from_u64(seed),
            kernel: KernelKnobs::default(),
            now: 0,
            tax: Vec::new(),
            next_vpn: 1 << 20,
            grain: 1,
        }
    }

    /// Maps a region of `mib` MiB on `node`; `hot` are region-relative unit ranges.
    /// Returns the region and its (hot, rest) classes.
    #[allow(clippy::too_many_arguments)]
    fn region(
        &mut self,
        name: &str,
        space: u32,
        mib: u64,
        size: PageSize,
        policy: MemPolicy,
        hot: Vec<(u32, u32)>,
        node: u16,
    ) -> (RegionId, Option<ClassId>, Option<ClassId>) {
        let grain = if size == PageSize::Base {
            self.grain
        } else {
            1
        };
        let unit_pages = size.nr_pages().0 * u64::from(grain);
        let units = (mib * MIB / (unit_pages * 4096)) as u32;
        let start = self.next_vpn.next_multiple_of(HPAGE_PMD_NR);
        self.next_vpn = start + u64::from(units) * unit_pages + HPAGE_PMD_NR;
        let classes = if hot.is_empty() {
            Vec::new()
        } else {
            vec![ClassSpec {
                name: format!("{name}.hot"),
                ranges: hot,
                spread: Spread::Uniform,
            }]
        };
        let rid = self
            .mem
            .map_region_grained(
                name,
                SpaceId(space),
                CgroupId::ROOT,
                Vpn(start),
                units,
                (size, grain),
                policy,
                classes,
                7,
                |_, o| o.push(NodeId(node)),
            )
            .unwrap();
        let find = |n: String| {
            self.mem
                .classes()
                .iter()
                .position(|c| c.region == rid && c.name == n)
                .map(|i| ClassId(i as u16))
        };
        (rid, find(format!("{name}.hot")), find(name.to_string()))
    }

    fn process(
        &mut self,
        space: u32,
        groups: &[(u16, u32)],
        streams: &[(ClassId, f64)],
        regions: &[RegionId],
    ) -> usize {
        self.procs.push(Process {
            name: format!("p{space}"),
            space: SpaceId(space),
            cgroup: CgroupId::ROOT,
            groups: groups
                .iter()
                .map(|&(n, t)| ThreadGroup {
                    node: NodeId(n),
                    threads: t,
                    sharing: t,
                })
                .collect(),
            streams: streams
                .iter()
                .map(|&(class, share)| Stream { class, share })
                .collect(),
            compute_ns: 0.0,
            running: true,
            regions: regions.to_vec(),
            rate_scale: 1.0,
            op: None,
        });
        self.tax.push(0.0);
        self.acct.app_overhead_ns.push(0.0);
        self.procs.len() - 1
    }

    /// Runs `m` until `t_s` seconds, as the scenario runner does: rates from placement
    /// and last step's tax, the mechanism, then kswapd.
    fn run(&mut self, m: &mut dyn Mechanism, t_s: f64) {
        let until = (t_s * 1e9) as u64;
        while self.now < until {
            let load = Load::compute(&self.procs, &self.mem, &self.lat, &self.tax);
            self.acct.app_overhead_ns.iter_mut().for_each(|x| *x = 0.0);
            let mut ctx = Ctx {
                now: self.now,
                dt: DT,
                mem: &mut self.mem,
                load: &load,
                procs: &self.procs,
                rng: &mut self.rng,
                acct: &mut self.acct,
                kernel: &self.kernel,
                memcg: &crate::mechanism::NO_MEMCGS,
            };
            m.step(&mut ctx);
            kswapd(&mut ctx);
            for (p, tax) in self.tax.iter_mut().enumerate() {
                let accesses = load.process_rate[p] * DT as f64 / 1e9;
                *tax = if accesses > 0.0 {
                    self.acct.app_overhead_ns[p] / accesses
                } else {
                    0.0
                };
            }
            self.now += DT;
        }
    }

    fn on(&self, class: ClassId, node: u16) -> u64 {
        self.mem
            .class(class)
            .units_on
            .get(&NodeId(node))
            .copied()
            .unwrap_or(0)
    }

    fn vm(&self, name: &str) -> u64 {
        self.acct.get(name)
    }
}

fn params(mode: u8) -> NumabParams {
    NumabParams {
        mode,
        ..NumabParams::default()
    }
}

/// Every `stride`-th block of `block` units, `count` blocks.
fn blocks(block: u32, stride: u32, count: u32) -> Vec<(u32, u32)> {
    (0..count).map(|i| (i * stride * block, block)).collect()
}

/// DRAM node 0 and CXL node 1 (8 GiB each) and one buffer of `mib` MiB of base pages on
/// node 1, accessed uniformly by one process of `threads` threads on node 0. Returns the
/// bench and the buffer's class.
fn cxl_buffer(mib: u64, threads: u32, seed: u64) -> (Bench, ClassId) {
    let mut b = Bench::new(
        topo(&[(0, true, 8192), (1, false, 8192)]),
        &[(0, 0, 100.0), (0, 1, 320.0)],
        seed,
    );
    let (rid, _, all) = b.region("buf", 1, mib, PageSize::Base, MemPolicy::DEFAULT, vec![], 1);
    let all = all.unwrap();
    b.process(1, &[(0, threads)], &[(all, 1.0)], &[rid]);
    (b, all)
}

/// DRAM node 0 (8 GiB, 2 threads) and CXL node 1 (8 GiB) holding a 256 MiB buffer whose
/// hot quarter (4 blocks of 16 MiB) gets every access.
fn two_tier_bench(seed: u64, policy: MemPolicy) -> (Bench, ClassId, ClassId) {
    let mut b = Bench::new(
        topo(&[(0, true, 8192), (1, false, 8192)]),
        &[(0, 0, 100.0), (0, 1, 320.0)],
        seed,
    );
    let (rid, hot, cold) = b.region("buf", 1, 256, PageSize::Base, policy, blocks(4096, 4, 4), 1);
    let (hot, cold) = (hot.unwrap(), cold.unwrap());
    b.process(1, &[(0, 2)], &[(hot, 1.0)], &[rid]);
    (b, hot, cold)
}

#[test]
fn cost_parts_give_back_seed_b() {
    // Seed B's figures: 74.5 us per fault in all, 46.9 us per migrated page.
    assert!(
        (HINT_FAULT_COST_NS - 74_511.0).abs() < 1.0,
        "{HINT_FAULT_COST_NS}"
    );
    assert!((MIGRATE_COST_NS_PER_PAGE - 46_910.0).abs() < 1.0);
    assert!((HINT_FAULT_HANDLING_NS - 71_962.0).abs() < 1.0);
    // The fitted contention terms: 2.26 us per further thread per fault, 1.45 us per
    // migration.
    assert!((HINT_FAULT_CONTENTION_NS - 2_256.8).abs() < 1.0);
    assert!((MIGRATE_CONTENTION_NS - 1_448.7).abs() < 1.0);
    // With seed B's 32 threads per page, the parts give back seed B's per-fault and
    // per-migration costs...
    assert!((hint_fault_cost_ns(32) - HINT_FAULT_HANDLING_NS).abs() < 1e-6);
    assert!((migrate_cost_ns(1, 32) - MIGRATE_COST_NS_PER_PAGE).abs() < 1e-6);
    // ...and, at seed B's ratio, its measured total.
    let total = hint_fault_cost_ns(32) * SEED_B_HINT_FAULTS
        + migrate_cost_ns(1, 32) * SEED_B_PAGES_MIGRATED;
    assert!((total / 1e3 - SEED_B_FAULT_OVERHEAD_US).abs() < 1e3);
    // A 2 MiB folio there: the fixed part and the contention once, the copy per page.
    assert!((migrate_cost_ns(512, 32) - 251_310.0).abs() < 1.0);
    // One thread: the uncontended parts alone, a migration what move_pages(2) costs.
    assert!((hint_fault_cost_ns(1) - 2_000.0).abs() < 1e-9);
    assert!((hint_fault_cost_ns(0) - hint_fault_cost_ns(1)).abs() < 1e-9);
    assert!((migrate_cost_ns(1, 1) - crate::cost::MOVE_PAGES_NS_PER_PAGE).abs() < 1e-9);
    // The cost grows with the threads sharing the page.
    assert!(hint_fault_cost_ns(2) > hint_fault_cost_ns(1));
    assert!(migrate_cost_ns(1, 8) > migrate_cost_ns(1, 2));
}

#[test]
fn scan_period_bounds_follow_task_scan_min_max() {
    let s = Scanner::new(&NumabParams::default(), true, 1);
    let gib = (1u64 << 30) >> PAGE_SHIFT;
    // 64 GiB: 256 windows; min = max(1000 / (2560 / 256), 1000 / 256) = 100 ms,
    // max = 60000 / 256 = 234 ms.
    assert_eq!(s.task_scan_min_ms(64 * gib), 100);
    assert_eq!(s.task_scan_max_ms(64 * gib), 234);
    // 256 MiB: one window; 1000 ms and 60000 ms.
    assert_eq!(s.task_scan_min_ms(gib / 4), 1000);
    assert_eq!(s.task_scan_max_ms(gib / 4), 60_000);
    // Scaled to 1/16 with the window: the same periods for a 4 GiB process.
    let mut p = NumabParams::default();
    p.scale_rates(1.0 / 16.0);
    assert_eq!((p.scan_size_mb, p.max_scan_window_mbps), (16, 160));
    let s = Scanner::new(&p, true, 1);
    assert_eq!(s.task_scan_min_ms(4 * gib), 100);
    assert_eq!(s.task_scan_max_ms(4 * gib), 234);
}

#[test]
fn mode2_promotes_hot_pages_and_leaves_cold_ones() {
    let (mut b, hot, cold) = two_tier_bench(1, MemPolicy::DEFAULT);
    let mut m = Numab::new(&params(2), 1);
    b.run(&mut m, 10.0);
    let hot_units = b.mem.class(hot).len.into();
    assert_eq!(b.on(hot, 0), hot_units, "every hot page promoted");
    assert_eq!(b.on(cold, 0), 0, "no cold page promoted");
    // Each hot page faulted once and moved; each slow page was armed exactly once (cold
    // ones stay PROT_NONE, hot ones are skipped on the top tier after promotion).
    assert_eq!(b.vm("numa_hint_faults"), hot_units);
    assert_eq!(b.vm("numa_hint_faults_local"), 0);
    assert_eq!(b.vm("numa_pages_migrated"), hot_units);
    assert_eq!(b.vm("pgpromote_success"), hot_units);
    assert_eq!(b.vm("pgpromote_candidate_nrl"), hot_units);
    assert_eq!(b.vm("pgpromote_candidate"), 0);
    assert_eq!(b.vm("numa_pte_updates"), 65_536);
    assert_eq!(b.mem.stats.mempolicy_violations, 0);
    assert!(b.mem.check().is_none());
    // Faults and migrations were charged to the application.
    // The process's two threads both touch the hot pages: each fault and each migration
    // pays one further thread's contention.
    let expected = hot_units as f64 * (hint_fault_cost_ns(2) + migrate_cost_ns(1, 2))
        + 65_536.0 * PTE_UPDATE_COST_NS;
    assert!((b.acct.app_overhead_total_ns - expected).abs() < 1.0);
    // RSS 256 MiB: one window, period 1000 ms. Every counted (promoted) fault came in the
    // first sequence, so task_numa_placement() never ran and the period never changed.
    assert!(m.scanner().scan_seq(0) >= 2);
    assert_eq!(m.scanner().scan_period_ms(0), Some(1000));
}

/// The test above with units of 8 pages: each unit is armed, faulted and moved once, and
/// is counted and charged as its 8 pages, so the counters and the application's charge
/// are the page-by-page run's exactly.
#[test]
fn a_grained_unit_counts_and_pays_for_each_of_its_pages() {
    let mut b = Bench::new(
        topo(&[(0, true, 8192), (1, false, 8192)]),
        &[(0, 0, 100.0), (0, 1, 320.0)],
        1,
    );
    b.grain = 8;
    let (rid, hot, cold) = b.region(
        "buf",
        1,
        256,
        PageSize::Base,
        MemPolicy::DEFAULT,
        blocks(4096 / 8, 4, 4),
        1,
    );
    let (hot, cold) = (hot.unwrap(), cold.unwrap());
    b.process(1, &[(0, 2)], &[(hot, 1.0)], &[rid]);
    let mut m = Numab::new(&params(2), 1);
    b.run(&mut m, 10.0);
    let hot_units = u64::from(b.mem.class(hot).len);
    assert_eq!(hot_units, 16_384 / 8);
    assert_eq!(b.on(hot, 0), hot_units, "every hot unit promoted");
    assert_eq!(b.on(cold, 0), 0, "no cold unit promoted");
    let hot_pages = 16_384;
    for name in [
        "numa_hint_faults",
        "numa_pages_migrated",
        "pgpromote_success",
        "pgpromote_candidate_nrl",
    ] {
        assert_eq!(b.vm(name), hot_pages, "{name}");
    }
    assert_eq!(b.vm("numa_pte_updates"), 65_536);
    assert_eq!(b.vm("numa_huge_pte_updates"), 0);
    assert_eq!(b.vm("thp_migration_success"), 0);
    let expected = hot_pages as f64 * (hint_fault_cost_ns(2) + migrate_cost_ns(1, 2))
        + 65_536.0 * PTE_UPDATE_COST_NS;
    assert!(
        (b.acct.app_overhead_total_ns - expected).abs() < 1.0,
        "{} against {expected}",
        b.acct.app_overhead_total_ns
    );
    assert!(b.mem.check().is_none());
}

/// DRAM node 0 and CXL node 1 (8 GiB each) and a 256 MiB buffer on node 1 in units of
/// `grain` pages, each page touched about once a second by one thread on node 0.
fn once_a_second_buffer(grain: u32) -> Bench {
    let mut b = Bench::new(
        topo(&[(0, true, 8192), (1, false, 8192)]),
        &[(0, 0, 100.0), (0, 1, 320.0)],
        3,
    );
    b.grain = grain;
    let (rid, _, all) = b.region("buf", 1, 256, PageSize::Base, MemPolicy::DEFAULT, vec![], 1);
    let p = b.process(1, &[(0, 1)], &[(all.unwrap(), 1.0)], &[rid]);
    // 3.1 M accesses/s over 65,536 pages, thinned to about 1 per page per second.
    b.procs[p].rate_scale = 0.02;
    b
}

/// A grained unit's pages each fault at one page's rate: half a second after the first
/// pass armed a buffer touched about once a second per page, about 40 % of its pages have
/// faulted, with units of 8 pages as with pages. At the unit's rate, 8 times a page's,
/// nearly all would have.
#[test]
fn a_grained_unit_faults_at_one_page_s_rate() {
    let faults_at = |grain: u32| {
        let mut b = once_a_second_buffer(grain);
        let mut m = Numab::new(&params(2), 1);
        // The first pass comes at 1 s (scan_delay_ms) and arms the whole buffer.
        b.run(&mut m, 1.5);
        (b.vm("numa_pte_updates"), b.vm("numa_hint_faults"))
    };
    let (ptes1, pages) = faults_at(1);
    let (ptes8, grained) = faults_at(8);
    assert_eq!((ptes1, ptes8), (65_536, 65_536));
    let share = pages as f64 / 65_536.0;
    assert!((0.3..0.5).contains(&share), "{share}");
    let ratio = grained as f64 / pages as f64;
    assert!((0.95..1.05).contains(&ratio), "{grained} against {pages}");
}

/// tierd's accessed-bit scan finds a grained unit accessed with one page's probability
/// (its other source, samples: `mechanism::draw_samples`). This bench drives any
/// mechanism, so the test sits here. A buffer on CXL whose pages are each touched about
/// once a second, scanned every second: the first scan finds about 1 - e^-1 = 63 % of
/// its pages accessed, in units of 8 pages as with pages, and reads every page. At the
/// unit's rate, 8 times a page's, it would find nearly all.
#[test]
fn a_grained_unit_is_found_accessed_at_one_page_s_rate() {
    let found_at = |grain: u32| {
        let mut b = once_a_second_buffer(grain);
        let params: crate::scenario::TierdToml =
            toml::from_str("sources = [\"accessed_bit_scan\"]\nabit_interval_ms = 1000")
                .expect("parses");
        let topo = b.mem.topology().clone();
        let mut m = crate::tierd::Tierd::new(
            &params.grained(grain),
            topo,
            1,
            crate::tierd::CgroupLows::new(),
        )
        .expect("valid");
        // The first scan reads the bits at 1 s.
        b.run(&mut m, 1.5);
        (b.vm("abit_pages_scanned"), b.vm("pghot_recorded_pgtscans"))
    };
    let (scanned1, pages) = found_at(1);
    let (scanned8, grained) = found_at(8);
    assert_eq!((scanned1, scanned8), (65_536, 65_536));
    let share = pages as f64 / 65_536.0;
    assert!((0.55..0.7).contains(&share), "{share}");
    let ratio = grained as f64 / pages as f64;
    assert!((0.95..1.05).contains(&ratio), "{grained} against {pages}");
}

#[test]
fn nothing_is_scanned_before_scan_delay() {
    let (mut b, hot, _) = two_tier_bench(2, MemPolicy::DEFAULT);
    let mut m = Numab::new(
        &NumabParams {
            scan_delay_ms: 5000,
            ..params(2)
        },
        1,
    );
    b.run(&mut m, 4.99);
    assert_eq!(b.vm("numa_pte_updates"), 0);
    assert_eq!(b.vm("numa_hint_faults"), 0);
    assert_eq!(m.scanner().passes(0), 0);
    b.run(&mut m, 5.5);
    assert_eq!(m.scanner().passes(0), 1);
    assert!(b.vm("numa_pte_updates") > 0);
    assert!(b.on(hot, 0) > 0);
}

#[test]
fn mode2_never_touches_toptier_pages_and_mode3_does() {
    let run = |mode: u8| {
        let mut b = Bench::new(
            topo(&[(0, true, 8192), (1, false, 8192)]),
            &[(0, 0, 100.0), (0, 1, 320.0)],
            3,
        );
        let (rid, _, all) = b.region("buf", 1, 64, PageSize::Base, MemPolicy::DEFAULT, vec![], 0);
        b.process(1, &[(0, 2)], &[(all.unwrap(), 1.0)], &[rid]);
        let mut m = Numab::new(&params(mode), 1);
        b.run(&mut m, 5.0);
        b
    };
    let b = run(2);
    assert_eq!(b.vm("numa_pte_updates"), 0);
    assert_eq!(b.vm("numa_hint_faults"), 0);
    assert_eq!(b.mem.stats.pages_migrated, 0);
    let b = run(3);
    assert!(b.vm("numa_pte_updates") >= 16_384);
    assert!(b.vm("numa_hint_faults") > 0);
    // Local faults with the default policy: nothing moves.
    assert_eq!(b.vm("numa_hint_faults_local"), b.vm("numa_hint_faults"));
    assert_eq!(b.mem.stats.pages_migrated, 0);
}

/// A 2 GiB DRAM node with 1.25 GiB set aside: 0.75 GiB free is less than the 1 GiB margin
/// of `pgdat_free_space_enough()`, so promotions go through the threshold and the rate
/// limit; 128 MiB of hot pages on the CXL node.
fn nearly_full(mbps: u64, seed: u64) -> (Bench, Numab, ClassId) {
    let mut b = Bench::new(
        topo(&[(0, true, 2048), (1, false, 8192)]),
        &[(0, 0, 100.0), (0, 1, 320.0)],
        seed,
    );
    b.mem.reserve(NodeId(0), Pages(1280 * 256));
    let (rid, _, all) = b.region("buf", 1, 128, PageSize::Base, MemPolicy::DEFAULT, vec![], 1);
    let all = all.unwrap();
    b.process(1, &[(0, 4)], &[(all, 1.0)], &[rid]);
    let mut m = Numab::new(
        &NumabParams {
            promote_rate_limit_mbps: mbps,
            ..params(2)
        },
        1,
    );
    b.run(&mut m, 10.5);
    (b, m, all)
}

#[test]
fn rate_limit_binds_when_the_fast_node_is_nearly_full() {
    let (b, m, all) = nearly_full(1, 4);
    let promoted = b.on(all, 0);
    // 1 MB/s = 256 pages per fixed one-second window (up to twice that across a window
    // boundary); passes at 1, 2, ... 10 s.
    assert!(promoted > 0);
    assert!(promoted <= 2 * 256 * 10, "{promoted}");
    assert_eq!(b.vm("pgpromote_success"), promoted);
    assert_eq!(b.vm("pgpromote_candidate_nrl"), 0);
    assert!(b.vm("pgpromote_candidate") > 10 * promoted);
    assert!(m.stats.rate_limited > 0);
    // Promotions continue across sequences; they are remote and private faults, so each
    // task_numa_placement() doubles the period.
    assert!(m.scanner().scan_period_ms(0).unwrap() >= 2000);
    // With the default limit the same faults promote everything.
    let (b, m, all) = nearly_full(65_536, 4);
    assert_eq!(b.on(all, 0), u64::from(b.mem.class(all).len));
    assert_eq!(m.stats.rate_limited, 0);
}

/// 16 MiB hot (4096 pages, ~1000 accesses/s each) and 112 MiB warm pages touched about
/// once a second each, on CXL; a 2 GiB DRAM node with `reserve_mib` set aside; a 10 ms
/// hot threshold.
fn warm_run(reserve_mib: u64, seed: u64) -> (Bench, Numab, ClassId, ClassId) {
    let mut b = Bench::new(
        topo(&[(0, true, 2048), (1, false, 8192)]),
        &[(0, 0, 100.0), (0, 1, 320.0)],
        seed,
    );
    b.mem.reserve(NodeId(0), Pages(reserve_mib * 256));
    let (rid, hot, warm) = b.region(
        "buf",
        1,
        128,
        PageSize::Base,
        MemPolicy::DEFAULT,
        vec![(0, 4096)],
        1,
    );
    let (hot, warm) = (hot.unwrap(), warm.unwrap());
    b.process(1, &[(0, 4)], &[(hot, 0.999), (warm, 0.001)], &[rid]);
    let mut m = Numab::new(
        &NumabParams {
            hot_threshold_ms: 10,
            ..params(2)
        },
        1,
    );
    b.run(&mut m, 6.0);
    (b, m, hot, warm)
}

#[test]
fn hot_threshold_filters_rarely_touched_pages_when_the_fast_node_is_nearly_full() {
    // Plenty of room: every page that faults is promoted, hot or not.
    let (b, m, hot, warm) = warm_run(0, 5);
    assert_eq!(b.on(hot, 0), 4096);
    assert!(b.on(warm, 0) > 25_000, "{}", b.on(warm, 0));
    assert_eq!(m.stats.not_hot, 0);
    // Nearly full: warm pages fault ~1 s after being armed, so each pass lets in only the
    // ~1 % that fault within 10 ms; the hot ones always qualify.
    let (b, m, hot, warm) = warm_run(1280, 5);
    assert_eq!(b.on(hot, 0), 4096);
    let warm_in = b.on(warm, 0);
    assert!(warm_in < 28_672 / 10, "{warm_in}");
    assert!(m.stats.not_hot > 5 * warm_in);
    assert_eq!(b.vm("pgpromote_candidate"), 4096 + warm_in);
    assert_eq!(m.threshold_ms(NodeId(0)), 10);
}

/// Threads on node 0, a buffer on CXL node 2, all hot: how much of it ends on node 0,
/// and how many PTE updates the scan made.
fn bind_run(policy: MemPolicy) -> (f64, u64, u64) {
    let mut b = Bench::new(
        topo(&[(0, true, 4096), (1, true, 4096), (2, false, 4096)]),
        &[(0, 0, 100.0), (0, 1, 180.0), (0, 2, 320.0)],
        6,
    );
    let (rid, _, all) = b.region("buf", 1, 32, PageSize::Base, policy, vec![], 2);
    let all = all.unwrap();
    b.process(1, &[(0, 2)], &[(all, 1.0)], &[rid]);
    let mut m = Numab::new(&params(2), 1);
    b.run(&mut m, 4.0);
    assert_eq!(b.mem.stats.mempolicy_violations, 0);
    assert_eq!(b.on(all, 1), 0);
    let len = f64::from(b.mem.class(all).len);
    (
        b.on(all, 0) as f64 / len,
        b.vm("numa_pte_updates"),
        b.vm("numa_hint_faults"),
    )
}

#[test]
fn bind_and_preferred_many_masks_are_honoured() {
    let nb = |mode, nodes: &[u16], flag| MemPolicy {
        mode,
        nodes: NodeMask::from_nodes(nodes.iter().map(|&n| NodeId(n))),
        numa_balancing: flag,
    };
    // The faulting CPU's node is in the mask: promoted.
    let (frac, _, _) = bind_run(nb(PolicyMode::Bind, &[0, 2], true));
    assert!((frac - 1.0).abs() < 1e-9);
    let (frac, _, _) = bind_run(nb(PolicyMode::PreferredMany, &[0], true));
    assert!((frac - 1.0).abs() < 1e-9);
    // Not in the mask: scanned and faulted, never moved.
    let (frac, updates, faults) = bind_run(nb(PolicyMode::Bind, &[1, 2], true));
    assert_eq!(frac, 0.0);
    assert!(updates > 0 && faults > 0);
    let (frac, _, faults) = bind_run(nb(PolicyMode::PreferredMany, &[1], true));
    assert_eq!(frac, 0.0);
    assert!(faults > 0);
    // Without MPOL_F_NUMA_BALANCING the policy has no MPOL_F_MOF: the VMA is not even
    // scanned (vma_policy_mof()), so the page stays put.
    let (frac, updates, faults) = bind_run(nb(PolicyMode::Bind, &[0, 2], false));
    assert_eq!((frac, updates, faults), (0.0, 0, 0));
    let (frac, updates, _) = bind_run(nb(PolicyMode::PreferredMany, &[0, 2], false));
    assert_eq!((frac, updates), (0.0, 0));
    let (frac, updates, _) = bind_run(nb(PolicyMode::Interleave, &[0, 2], false));
    assert_eq!((frac, updates), (0.0, 0));
}

/// Seed B's shape: two DRAM nodes, a group of threads on each touching its own chunk,
/// all memory first on node 0, mode 1.
fn seed_b_bench(seed: u64) -> (Bench, ClassId, ClassId) {
    let mut b = Bench::new(
        topo(&[(0, true, 4096), (1, true, 4096)]),
        &[(0, 0, 100.0), (0, 1, 180.0), (1, 1, 100.0), (1, 0, 180.0)],
        seed,
    );
    let (ra, _, a) = b.region("a", 1, 64, PageSize::Base, MemPolicy::DEFAULT, vec![], 0);
    let (rb, _, c) = b.region("b", 2, 64, PageSize::Base, MemPolicy::DEFAULT, vec![], 0);
    let (a, c) = (a.unwrap(), c.unwrap());
    b.process(1, &[(0, 2)], &[(a, 1.0)], &[ra]);
    b.process(2, &[(1, 2)], &[(c, 1.0)], &[rb]);
    (b, a, c)
}

#[test]
fn mode1_moves_remote_pages_and_faults_far_more_than_it_migrates() {
    let (mut b, a, c) = seed_b_bench(7);
    let mut m = Numab::new(&params(1), 2);
    b.run(&mut m, 60.0);
    assert_eq!(b.on(a, 0), 16_384, "local pages stay");
    assert_eq!(b.on(c, 1), 16_384, "remote pages follow their threads");
    assert_eq!(b.vm("numa_pages_migrated"), 16_384);
    assert_eq!(b.vm("pgpromote_success"), 0);
    let faults = b.vm("numa_hint_faults");
    assert!(faults > 4 * 16_384, "{faults}");
    assert!(b.vm("numa_hint_faults_local") > faults / 2);
    // All faults local and half private: update_task_scan_period() slows the scan down.
    let p0 = m.scanner().scan_period_ms(0).unwrap();
    assert!(p0 > 1000, "{p0}");
}

#[test]
fn classic_branch_uses_the_two_stage_filter_once_the_task_has_settled() {
    let (mut b, a, _) = seed_b_bench(1);
    let mut m = Numab::new(&params(1), 2);
    let load = Load::compute(&b.procs, &b.mem, &b.lat, &b.tax);
    let ctx = Ctx {
        now: 0,
        dt: DT,
        mem: &mut b.mem,
        load: &load,
        procs: &b.procs,
        rng: &mut b.rng,
        acct: &mut b.acct,
        kernel: &b.kernel,
        memcg: &crate::mechanism::NO_MEMCGS,
    };
    let u = ctx.mem.class(a).unit_at(0);
    let (n0, n1) = (NodeId(0), NodeId(1));
    // Young task: a first fault migrates at once, and so does a private one.
    assert!(m.scanner.early_life(0));
    assert!(m.should_migrate_classic(&ctx, u, 0, true, n1, None, 7));
    assert!(m.should_migrate_classic(&ctx, u, 0, true, n1, Some((n0, 7)), 7));
    // Settled task (preferred node set, more than 4 sequences).
    m.scanner.tasks[0].preferred = true;
    m.scanner.tasks[0].task_seq = 5;
    assert!(!m.scanner.early_life(0));
    // The previous fault came from node 0: refused, but the exchange records node 1 ...
    assert!(!m.should_migrate_classic(&ctx, u, 0, true, n1, Some((n0, 3)), 7));
    let last = m.last_cpupid(u);
    assert_eq!(last, Some((n1, 7)));
    // ... so a second fault from node 1, even by another thread, migrates.
    assert!(m.should_migrate_classic(&ctx, u, 0, true, n1, last, 9));
    // Tiering off: a slow-tier page whose last_cpupid is unset never migrates.
    assert!(!m.should_migrate_classic(&ctx, u, 0, false, n1, None, 7));
}

#[test]
fn huge_pages_count_as_the_kernel_counts_them() {
    let mut b = Bench::new(
        topo(&[(0, true, 8192), (1, false, 8192)]),
        &[(0, 0, 100.0), (0, 1, 320.0)],
        8,
    );
    let (rid, hot, _) = b.region(
        "buf",
        1,
        64,
        PageSize::Huge2M,
        MemPolicy::DEFAULT,
        vec![(0, 8)],
        1,
    );
    b.process(1, &[(0, 2)], &[(hot.unwrap(), 1.0)], &[rid]);
    let mut m = Numab::new(&params(2), 1);
    b.run(&mut m, 3.0);
    // 32 huge pages: 512 PTE updates each, one huge update each; 8 hot ones migrate.
    assert_eq!(b.vm("numa_pte_updates"), 32 * 512);
    assert_eq!(b.vm("numa_huge_pte_updates"), 32);
    assert_eq!(b.vm("numa_hint_faults"), 8);
    assert_eq!(b.vm("numa_pages_migrated"), 8 * 512);
    assert_eq!(b.vm("thp_migration_success"), 8);
}

#[test]
fn a_page_migrated_while_armed_loses_its_hint_fault() {
    // 64 MiB on CXL touched about once a second per page (1 thread, 60 us per access).
    let (mut b, all) = cxl_buffer(64, 1, 10);
    b.procs[0].compute_ns = 60_000.0;
    let mut m = Numab::new(&params(2), 1);
    b.run(&mut m, 1.02);
    let armed: Vec<UnitId> = (0..16_384u32)
        .map(|i| b.mem.class(all).unit_at(i))
        .filter(|&u| m.scanner().is_armed(&b.mem, u))
        .collect();
    assert!(armed.len() > 15_000, "{}", armed.len());
    let before = b.vm("numa_hint_faults");
    // Something else (a userspace promoter) moves them to DRAM before they are touched.
    for &u in &armed {
        b.mem.migrate(u, NodeId(0)).unwrap();
    }
    assert!(armed.iter().all(|&u| !m.scanner().is_armed(&b.mem, u)));
    // Past the horizon every draw made for them has come due and been dropped.
    b.run(&mut m, 12.0);
    assert_eq!(
        b.vm("numa_hint_faults"),
        before,
        "no fault on a page that moved"
    );
    assert_eq!(m.scanner().queued_faults(), 0);
}

#[test]
fn a_fault_storm_takes_waiting_faults_at_random_each_queued_once() {
    // 64 MiB on CXL, all hot, one thread touching each page ~190 times a second: the
    // first pass arms every page, their faults come due within milliseconds, and at 50
    // times the model's cost the thread takes ~5,000 a second, so most wait.
    let storm = |fault_time_scale: f64, migrate_time_scale: f64| {
        let (mut b, all) = cxl_buffer(64, 1, 11);
        let mut m = Numab::new(
            &NumabParams {
                fault_time_scale,
                migrate_time_scale,
                ..params(2)
            },
            1,
        );
        b.run(&mut m, 1.5);
        (b, all, m)
    };
    // The fault and the migration it makes scale apart: with only the migration dear
    // (TCG's shape, docs/simulator.md) the same storm takes more faults in the time.
    let cheap_faults = storm(1.0, 50.0).0.vm("numa_hint_faults");
    let (b, all, m) = storm(50.0, 50.0);
    let faults = b.vm("numa_hint_faults");
    assert!(
        cheap_faults > faults * 3 / 2,
        "{cheap_faults} faults with cheap faults, {faults} with dear ones"
    );
    let promoted = b.on(all, 0);
    assert!(
        (1_000..10_000).contains(&faults) && promoted > 1_000,
        "a storm half a second long: {faults} faults, {promoted} promoted"
    );
    assert!(m.scanner().queued_faults() > 5_000, "most still wait");
    // The thread's next access lands on any waiting page alike: the promoted pages are
    // spread over the buffer, not its lowest addresses first.
    let low = (0..8_192)
        .filter(|&i| b.mem.node_of(b.mem.class(all).unit_at(i)) == NodeId(0))
        .count() as u64;
    assert!(
        low * 10 > promoted * 4 && low * 10 < promoted * 6,
        "{low} of {promoted} promoted in the lower half"
    );
    // Each fault waits as one entry of the queue, not pushed back once per fault taken
    // before it (that was quadratic: tens of millions of pushes here).
    let pushed = m.scanner().queue.pushed;
    let armed = b.vm("numa_pte_updates");
    assert!(
        pushed < 3 * armed,
        "{pushed} pushes for {armed} armed pages"
    );
}

#[test]
fn a_lone_thread_waits_out_its_own_passes_and_a_second_thread_takes_the_next() {
    // 4 GiB on CXL touched about never: every pass arms a fresh 256 MB (65,536 PTEs,
    // 3.3 ms at 50 ns), nothing faults, and the period stays at task_scan_min(), 100 ms.
    let passes = |threads: u32, pte_time_scale: f64| {
        let (mut b, _) = cxl_buffer(4096, threads, 12);
        b.procs[0].compute_ns = 1e9;
        let mut p = params(2);
        p.pte_time_scale = pte_time_scale;
        let mut m = Numab::new(&p, 1);
        b.run(&mut m, 2.0);
        assert_eq!(b.vm("numa_hint_faults"), 0);
        // The scale moves time only: each pass is still charged 65,536 updates at 50 ns.
        let charged = b.acct.app_overhead_total_ns;
        let task = &m.scanner().tasks[0];
        assert_eq!(b.vm("numa_pte_updates"), task.passes * 65_536);
        assert!(
            (charged - task.passes as f64 * 65_536.0 * PTE_UPDATE_COST_NS).abs() < 1.0,
            "{charged} for {} passes",
            task.passes
        );
        task.passes
    };
    // One thread: each pass adds 32 times its 3.3 ms to the period: 1.0, 1.205, ... 1.82 s
    // (without the throttle, 10 passes).
    assert_eq!(passes(1, 1.0), 5);
    // Two take turns, each waiting out its own pass while the other runs the next: a pass
    // about every period (its throttle outlasts two periods by 5 ms), as with three, which
    // never wait: 1.0 to 1.9 s.
    assert_eq!(passes(2, 1.0), 10);
    assert_eq!(passes(3, 1.0), 10);
    // Updates 4 times dearer (lab A's 7.3 guest under TCG measures 4.2): 13.1 ms a pass,
    // 0.42 s of throttle, so a lone thread's passes come at 1.0 and 1.52 s only.
    assert_eq!(passes(1, 4.0), 2);
}

#[test]
fn quiet_blocks_change_the_walk_and_nothing_else() {
    // The cold three quarters of the buffer are armed and idle after the first passes,
    // and summarized; then another mover takes some of them away and back, and the
    // workload starts touching them: the run must be the one that tests every unit.
    let run = |summarize: bool| {
        let (mut b, hot, cold) = two_tier_bench(3, MemPolicy::DEFAULT);
        let mut m = Numab::new(&params(2), 1);
        if !summarize {
            m.walk_every_unit();
        }
        b.run(&mut m, 3.0);
        let quiet = m.scanner().quiet_blocks(&b.mem);
        for i in (0..4000).step_by(7) {
            let u = b.mem.class(cold).unit_at(i);
            b.mem.migrate(u, NodeId(0)).unwrap();
            b.mem.migrate(u, NodeId(1)).unwrap();
        }
        let quiet_after_moves = m.scanner().quiet_blocks(&b.mem);
        b.run(&mut m, 4.0);
        b.procs[0].streams = vec![
            Stream {
                class: hot,
                share: 0.5,
            },
            Stream {
                class: cold,
                share: 0.5,
            },
        ];
        b.run(&mut m, 10.0);
        let outcome = (
            b.vm("numa_pte_updates"),
            b.vm("numa_hint_faults"),
            b.vm("pgpromote_success"),
            b.on(hot, 0),
            b.on(cold, 0),
        );
        (quiet, quiet_after_moves, outcome)
    };
    let (quiet, after_moves, with) = run(true);
    let (none, _, without) = run(false);
    // 192 MiB of cold pages are 768 blocks of 64.
    assert!(quiet > 600, "{quiet} blocks summarized");
    assert!(
        after_moves < quiet,
        "moves forget their blocks: {after_moves}"
    );
    assert_eq!(none, 0);
    assert_eq!(with, without);
    // Once touched, the cold part is found and promoted.
    assert!(with.4 > 10_000, "{with:?}");
}

#[test]
fn refused_promotion_wakes_kswapd_which_makes_room_if_demotion_is_enabled() {
    let run = |demotion: bool| {
        // 1.5 GiB DRAM filled by an idle 1.5 GiB buffer; 32 MiB of hot pages on CXL.
        let mut b = Bench::new(
            topo(&[(0, true, 1536), (1, false, 8192)]),
            &[(0, 0, 100.0), (0, 1, 320.0)],
            9,
        );
        b.kernel.demotion_enabled = demotion;
        b.kernel.tiering_kswapd = true;
        let (ri, _, idle) = b.region(
            "idle",
            2,
            1536,
            PageSize::Base,
            MemPolicy::DEFAULT,
            vec![],
            0,
        );
        let (rh, _, hot) = b.region("hot", 1, 32, PageSize::Base, MemPolicy::DEFAULT, vec![], 1);
        let (idle, hot) = (idle.unwrap(), hot.unwrap());
        b.process(1, &[(0, 2)], &[(hot, 1.0)], &[rh]);
        b.process(2, &[(0, 1)], &[(idle, 1.0)], &[ri]);
        b.procs[1].running = false;
        let mut m = Numab::new(&params(2), 2);
        b.run(&mut m, 6.0);
        (b.on(hot, 0), b.vm("pgdemote_kswapd"), m.stats.clone())
    };
    let (promoted, demoted, stats) = run(false);
    assert_eq!((promoted, demoted), (0, 0));
    assert!(stats.refused_watermark > 0 && stats.kswapd_wakeups > 0);
    // kswapd frees up to the promotion watermark (4 watermark steps, 1536 pages here) per
    // wakeup; promotions resume until free memory falls below high + 1 again.
    let (promoted, demoted, stats) = run(true);
    assert!(demoted >= promoted, "{demoted} {promoted}");
    assert!(promoted > 1000, "{promoted}");
    assert!(stats.kswapd_wakeups > 1);
}

#[test]
fn same_seed_same_run() {
    let run = |seed: u64| {
        let (b, m, _, _) = warm_run(1280, seed);
        let placement: Vec<NodeId> = (0..b.mem.units())
            .map(|u| b.mem.node_of(UnitId(u)))
            .collect();
        (b.acct.vmstat.clone(), placement, m.stats.clone())
    };
    let a = run(11);
    assert_eq!(a, run(11));
    let c = run(12);
    assert_ne!((&a.0, &a.1), (&c.0, &c.1));
}

/// Seed A at `scale` (1 = the published machine): 64 threads on node 0, a 64 GiB buffer
/// on CPU-less node 2 whose hot quarter (16 MiB chunks, every fourth) gets all accesses,
/// mode 2. Prints the trajectory and the counters scaled back to full size.
fn seed_a(scale: f64, p: &NumabParams, label: &str) {
    let mib = |gib: f64| (gib * 1024.0 * scale) as u64;
    let mut b = Bench::new(
        topo(&[
            (0, true, mib(268.0)),
            (1, true, mib(268.0)),
            (2, false, mib(256.0)),
        ]),
        &[(0, 0, 100.0), (0, 1, 170.0), (0, 2, 320.0)],
        1,
    );
    let units = (mib(64.0) * 256) as u32;
    let chunk = (mib(1.0 / 64.0) * 256).max(1) as u32;
    let (rid, hot, _) = b.region(
        "buf",
        1,
        mib(64.0),
        PageSize::Base,
        MemPolicy::DEFAULT,
        blocks(chunk, 4, units / chunk / 4),
        2,
    );
    let hot = hot.unwrap();
    let threads = ((64.0 * scale).round() as u32).max(1);
    b.process(1, &[(0, threads)], &[(hot, 1.0)], &[rid]);
    let mut m = Numab::new(p, 1);
    let up = 1.0 / scale;
    let gb = |pages: u64| pages as f64 * 4096.0 / f64::from(1u32 << 30) * up;
    println!("== {label}: scale {scale}, {p:?}");
    for t in [5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 240.0] {
        b.run(&mut m, t);
        let load = Load::compute(&b.procs, &b.mem, &b.lat, &b.tax);
        println!(
            "t={t:>5}s node0 {:>5.1} GiB  faults {:>9.0}  pte_updates {:>10.0}  \
             promoted {:>5.1} GiB  period {:?} ms seq {}  lat {:.0} ns (tax {:.1} ns)",
            gb(b.on(hot, 0)),
            b.vm("numa_hint_faults") as f64 * up,
            b.vm("numa_pte_updates") as f64 * up,
            gb(b.vm("pgpromote_success")),
            m.scanner().scan_period_ms(0),
            m.scanner().scan_seq(0),
            load.process_latency_ns[0],
            b.tax[0],
        );
    }
    let thread_s = f64::from(threads) * 240.0;
    println!(
        "app overhead {:.1} thread-s of {thread_s:.0} ({:.2} %)",
        b.acct.app_overhead_total_ns / 1e9,
        b.acct.app_overhead_total_ns / 1e9 / thread_s * 100.0
    );
}

/// Calibration against seed A (`cargo test --release -p tierd-sim calibration --
/// --ignored --nocapture`). Published for NUMAB2: 16.0 GB on node 0, 3.73 M hint
/// faults, 12.9 M PTE updates in the 240 s window.
#[test]
#[ignore = "calibration report, minutes in debug builds"]
fn calibration_seed_a() {
    let scale = 1.0 / 16.0;
    let mut p = params(2);
    p.scale_rates(scale);
    seed_a(scale, &p, "scaled knobs");
    let mut q = params(2);
    q.scan_size_mb = p.scan_size_mb;
    seed_a(scale, &q, "scan size scaled, MAX_SCAN_WINDOW not");
    seed_a(scale, &params(2), "unscaled knobs");
}

#[test]
#[ignore = "full-size calibration, needs ~1 GB and a release build"]
fn calibration_seed_a_full_size() {
    seed_a(1.0, &params(2), "full size");
}
