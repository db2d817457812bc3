//! Building a machine from a scenario and running each configuration on it.
//!
//! Every configuration runs on its own copy of the same initial machine, with the same seed,
//! so differences between rows come from the mechanisms, not from the draw.
//!
//! A process that starts mid-run allocates as the page allocator would: on a lower tier when
//! its nodes include one with room and the top tier is full, by direct reclaim (demotion)
//! only when none has room. memory.high is applied on that charge (`World::charge_over_high`,
//! stock) or, with the per-cgroup tiering RFC, to top-tier usage every step
//! (`World::cgroup_high`); memory.low is read by reclaim ([`crate::mechanism`]). A scenario's
//! `report.baseline` makes every row's rate relative to one configuration's, and processes
//! with an `op` are counted in operations per second.

use std::collections::BTreeMap;

use rand::seq::index::sample;
use rand::SeedableRng;
use serde::Serialize;
use tierd_engine::policy::{MemPolicy, PolicyMode};
use tierd_engine::topology::{NodePerf, NodeSpec, Topology};
use tierd_engine::types::{Bytes, CgroupId, NodeId, NodeMask, PageSize, SpaceId, Vpn};

use crate::damon::Kdamonds;
use crate::mechanism::{
    cgroup_usage, demote_coldest, kswapd, toptier_share, Accounting, Baseline, Ctx, KernelKnobs,
    Mechanism, Memcgs, SimRng, Watermarks,
};
use crate::memory::{align_vpn, ClassId, ClassSpec, Memory, RegionId, Spread};
use crate::numab::Numab;
use crate::observe::Observed;
use crate::scenario::{
    ConfigToml, EventAction, EventToml, MechanismKind, ProcessToml, Scenario, SpreadToml,
};
use crate::tierd::{CgroupLows, Tierd};
use crate::workload::{LatencyTable, Load, Process, Stream, ThreadGroup};

/// Why a scenario cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The machine is not a valid topology.
    #[error("scenario {scenario}: machine")]
    Topology {
        /// The scenario.
        scenario: String,
        /// Why.
        #[source]
        source: tierd_engine::topology::TopologyError,
    },
    /// Memory could not be allocated as the scenario asks.
    #[error("scenario {scenario}")]
    Alloc {
        /// The scenario.
        scenario: String,
        /// Why.
        #[source]
        source: crate::memory::AllocError,
    },
    /// The simulation broke one of its own invariants (a page on no node, a node over
    /// capacity): a bug in the simulator, reported rather than ignored.
    #[error("scenario {scenario}: config {config}: simulator invariant violated: {message}")]
    Invariant {
        /// The scenario.
        scenario: String,
        /// The configuration id.
        config: String,
        /// What broke.
        message: String,
    },
    /// `machine.grain` does not fit the scenario ([`Scenario::grain_problem`]).
    #[error("scenario {scenario}: {message}")]
    Grain {
        /// The scenario.
        scenario: String,
        /// Why.
        message: String,
    },
    /// A configuration with `mechanism = "tierd"` has no `[config.tierd]` table.
    #[error(
        "scenario {scenario}: config {config}: mechanism \"tierd\" needs a [config.tierd] table"
    )]
    MissingTable {
        /// The scenario.
        scenario: String,
        /// The configuration id.
        config: String,
    },
    /// A tierd configuration is invalid.
    #[error("scenario {scenario}: config {config}")]
    Config {
        /// The scenario.
        scenario: String,
        /// The configuration id.
        config: String,
        /// Why.
        #[source]
        source: tierd_engine::ConfigError,
    },
}

/// One point of a configuration's time series.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Simulated time, s.
    pub t_s: f64,
    /// Mean latency per access over the measured processes during the sample period, ns.
    pub latency_ns: f64,
    /// Their accesses per second (throughput).
    pub accesses_per_s: f64,
    /// Their operations per second, when they define operations (`[process.op]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_per_s: Option<f64>,
    /// GiB of the reported regions on each node.
    pub node_gib: BTreeMap<NodeId, f64>,
    /// Fraction of the hot class on the fast node.
    pub hot_on_fast: f64,
    /// GiB promoted so far.
    pub promoted_gib: f64,
    /// GiB demoted so far.
    pub demoted_gib: f64,
    /// Mechanism CPU so far, s.
    pub promoter_cpu_s: f64,
    /// vmstat-like counters so far.
    pub counters: BTreeMap<String, u64>,
}

/// One configuration's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct ConfigResult {
    /// Id (`N2`).
    pub id: String,
    /// Label.
    pub label: String,
    /// Mechanism.
    pub mechanism: MechanismKind,
    /// Steady latency: mean of the last `steady_fraction` of samples, ns per access.
    pub latency_ns: f64,
    /// Steady throughput of the measured processes, accesses per second.
    pub throughput: f64,
    /// Steady operations per second of the measured processes, when they define operations:
    /// what a load generator would report.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_per_s: Option<f64>,
    /// Throughput (operations when defined, else accesses) relative to the report's
    /// `baseline` configuration (seed D: the small tenant's rate relative to alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relative_rate: Option<f64>,
    /// GiB of the reported regions per node at the end.
    pub node_gib: BTreeMap<NodeId, f64>,
    /// GiB of the reported regions on the fast node at the end.
    pub fast_gib: f64,
    /// Size of the hot class, GiB.
    pub hot_gib: f64,
    /// Fraction of the hot class on the fast node at the end.
    pub hot_on_fast: f64,
    /// (fast - hot) / hot.
    pub over_promotion: f64,
    /// GiB moved to a faster tier.
    pub promoted_gib: f64,
    /// GiB moved to a slower tier.
    pub demoted_gib: f64,
    /// CPU time of the mechanism's own thread (kdamond, kmigrated, tierd), s.
    pub promoter_cpu_s: f64,
    /// That as a share of one CPU over the run, %.
    pub promoter_cpu_pct: f64,
    /// Time charged to application threads (hint faults, sample interrupts), s.
    pub app_overhead_s: f64,
    /// GiB of processes' memory on a top-tier node other than the one their threads run on
    /// (seed C: promotions that landed on the wrong fast node). Processes whose threads span
    /// several nodes are not counted.
    pub wrong_node_gib: f64,
    /// Base pages migrated, all directions and reasons (the kernel's `pgmigrate_success`).
    pub pages_migrated: u64,
    /// (application overhead + mechanism CPU) per migrated page, us: seed B's figure of merit.
    pub overhead_us_per_migrated_page: Option<f64>,
    /// Time until the hot class was 50 / 90 / 95 % on the fast node, s (None: never).
    pub time_to_hot: BTreeMap<String, Option<f64>>,
    /// vmstat-like counters.
    pub counters: BTreeMap<String, u64>,
    /// Moves across a BIND / PREFERRED_MANY nodemask (must be 0).
    pub mempolicy_violations: u64,
    /// Published figures for comparison.
    pub published: BTreeMap<String, f64>,
    /// Time series.
    pub series: Vec<Sample>,
}

/// A whole comparison.
#[derive(Clone, Debug, Serialize)]
pub struct CompareResult {
    /// Scenario name.
    pub scenario: String,
    /// Scenario description.
    pub description: String,
    /// Seed.
    pub seed: u64,
    /// Scale applied.
    pub scale: f64,
    /// Simulated seconds.
    pub duration_s: f64,
    /// The node whose placement is reported.
    pub fast_node: NodeId,
    /// How much of the processes' memory is in 2 MiB THPs: `never`, `always`, or the share
    /// (`--thp`, the regions' `thp`).
    pub thp: String,
    /// Base pages per unit of base-page regions (`machine.grain` after the scale, or
    /// `--grain`); absent when 1, every page simulated.
    #[serde(skip_serializing_if = "crate::scenario::is_grain_one")]
    pub grain: u32,
    /// tierd's version.
    pub version: String,
    /// The measured processes' operation (`get`), when they define one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    /// The configuration the relative rates are relative to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// Rows.
    pub configs: Vec<ConfigResult>,
}

/// A scenario turned into a machine, ready to run configurations on.
#[derive(Debug, Clone)]
pub struct World {
    scenario: Scenario,
    topo: Topology,
    lat: LatencyTable,
    mem: Memory,
    procs: Vec<Process>,
    proc_specs: Vec<ProcessToml>,
    cgroups: BTreeMap<String, CgroupId>,
    /// memory.low and memory.high by cgroup, as the kernel's reclaim reads them.
    memcg: Memcgs,
    knobs: KernelKnobs,
    /// The hot class, and its base-page twin when the region is partly THP.
    hot_classes: Vec<ClassId>,
    report_regions: Vec<RegionId>,
    fast_node: NodeId,
    next_vpn: BTreeMap<usize, u64>,
}

fn gib(x: f64) -> Bytes {
    Bytes((x * Bytes::GIB as f64) as u64)
}

/// GiB in `pages` base pages. The product comes before the division, as every report figure
/// was computed, so the printed figures do not move by a rounding.
fn pages_gib(pages: f64) -> f64 {
    pages * 4096.0 / Bytes::GIB as f64
}

/// The means of latency, accesses/s and (when the measured process counts operations) ops/s
/// over the last `fraction` of the samples: the report's steady state.
fn steady_means(series: &[Sample], fraction: f64, counts_ops: bool) -> (f64, f64, Option<f64>) {
    let steady_n = ((series.len() as f64 * fraction).ceil() as usize).clamp(1, series.len().max(1));
    let tail = &series[series.len().saturating_sub(steady_n)..];
    let latency_ns = tail.iter().map(|s| s.latency_ns).sum::<f64>() / tail.len().max(1) as f64;
    let throughput = tail.iter().map(|s| s.accesses_per_s).sum::<f64>() / tail.len().max(1) as f64;
    let ops_per_s = counts_ops
        .then(|| tail.iter().filter_map(|s| s.ops_per_s).sum::<f64>() / tail.len().max(1) as f64);
    (latency_ns, throughput, ops_per_s)
}

/// What is appended to a region's name for its base-page part when only a share of it is in
/// THP (`thp = 0.5`): `chase.buffer` holds the 2 MiB folios, `chase.buffer~4k` the rest.
pub const TWIN_SUFFIX: &str = "~4k";

fn twin_name(region: &str) -> String {
    format!("{region}{TWIN_SUFFIX}")
}

/// How a region of `bytes` with THP share `share` is mapped: (page size, bytes, is the
/// base-page twin) per part. The THP part is the first `share` of the region in whole 2 MiB
/// folios (rounded to the nearest folio; all of it, rounded up, at share 1, as `huge = true`
/// always did), the rest base pages. The kernel would scatter the THPs over the range (where
/// a fault found an aligned 2 MiB free); one THP part then one base part keeps each region
/// of one page size, which every mechanism here assumes.
#[must_use]
pub fn thp_parts(bytes: Bytes, share: f64) -> Vec<(PageSize, Bytes, bool)> {
    let huge = PageSize::Huge2M.bytes().0;
    if share >= 1.0 {
        return vec![(PageSize::Huge2M, bytes, false)];
    }
    let folios = if share > 0.0 {
        (share * bytes.0 as f64 / huge as f64).round() as u64
    } else {
        0
    };
    let huge_bytes = (folios * huge).min(bytes.0 / huge * huge);
    let base = bytes.0 - huge_bytes;
    match (huge_bytes > 0, base > 0) {
        (true, true) => vec![
            (PageSize::Huge2M, Bytes(huge_bytes), false),
            (PageSize::Base, Bytes(base), true),
        ],
        (true, false) => vec![(PageSize::Huge2M, Bytes(huge_bytes), false)],
        _ => vec![(PageSize::Base, bytes, false)],
    }
}

impl World {
    /// Units in the built machine.
    #[must_use]
    pub fn units(&self) -> u32 {
        self.mem.units()
    }

    /// What the built machine holds, by [`MACHINE_BYTES_PER_UNIT`].
    #[must_use]
    pub fn machine_bytes(&self) -> Bytes {
        Bytes(u64::from(self.units()).saturating_mul(MACHINE_BYTES_PER_UNIT))
    }

    /// Builds the machine and maps the memory of processes that start at time 0.
    ///
    /// # Errors
    /// [`SimError`] if the machine or an allocation is impossible.
    pub fn build(sc: &Scenario) -> Result<World, SimError> {
        let topo_err = |source| SimError::Topology {
            scenario: sc.name.clone(),
            source,
        };
        // `Scenario::validate` refuses these in a file; `--grain` and `--thp` change a
        // scenario after it.
        if let Some(message) = sc.grain_problem() {
            return Err(SimError::Grain {
                scenario: sc.name.clone(),
                message,
            });
        }
        // Latency per (initiator, target); HMAT perf from the nearest initiator.
        let mut lat = LatencyTable::default();
        let mut specs = Vec::new();
        for n in &sc.machine.node {
            for (k, v) in &n.latency_ns {
                if let Ok(i) = k.parse::<u16>() {
                    lat.ns.insert((NodeId(i), NodeId(n.id)), *v);
                }
            }
            let best = n.latency_ns.values().copied().fold(f64::INFINITY, f64::min);
            let perf = n
                .bandwidth_gbps
                .filter(|_| best.is_finite())
                .map(|bw| NodePerf {
                    read_latency_ns: best as u32,
                    write_latency_ns: best as u32,
                    read_bandwidth_mbps: (bw * 1000.0) as u32,
                    write_bandwidth_mbps: (bw * 1000.0) as u32,
                });
            specs.push(NodeSpec {
                id: NodeId(n.id),
                has_cpus: n.cpus > 0,
                capacity: gib(n.capacity_gib),
                perf,
                adistance: None,
            });
        }
        let topo = Topology::new(specs, sc.machine.distance.clone()).map_err(topo_err)?;
        let mut mem = Memory::new(topo.clone());
        for n in &sc.machine.node {
            mem.reserve(NodeId(n.id), gib(n.reserved_gib).pages());
        }
        let mut cgroups = BTreeMap::new();
        let mut lows = CgroupLows::new();
        let mut highs = BTreeMap::new();
        for (i, c) in sc.cgroup.iter().enumerate() {
            let id = CgroupId(u32::try_from(i + 1).unwrap_or(u32::MAX));
            cgroups.insert(c.name.clone(), id);
            lows.insert(id, gib(c.low_gib));
            if c.high_gib > 0.0 {
                highs.insert(id, gib(c.high_gib));
            }
        }
        let fast_node = sc
            .report
            .fast_node
            .map_or_else(|| topo.default_target(), NodeId);
        let knobs = KernelKnobs {
            demotion_enabled: sc.machine.demotion_enabled,
            watermark_scale_factor: sc.machine.watermark_scale_factor,
            tiering_kswapd: false,
            memcg_tiering: false,
            reclaim: sc.machine.reclaim.model(),
        };
        let mut w = World {
            scenario: sc.clone(),
            topo,
            lat,
            mem,
            procs: Vec::new(),
            proc_specs: expand_copies(&sc.process),
            cgroups,
            memcg: Memcgs {
                low: lows,
                high: highs,
            },
            knobs,
            hot_classes: vec![ClassId(0)],
            report_regions: Vec::new(),
            fast_node,
            next_vpn: BTreeMap::new(),
        };
        for (i, p) in w.proc_specs.clone().iter().enumerate() {
            let cgroup = p
                .cgroup
                .as_ref()
                .and_then(|c| w.cgroups.get(c).copied())
                .unwrap_or(CgroupId::ROOT);
            w.procs.push(Process {
                name: p.name.clone(),
                space: SpaceId(1000 + u32::try_from(i).unwrap_or(0)),
                cgroup,
                groups: p
                    .threads
                    .iter()
                    .map(|t| ThreadGroup {
                        node: NodeId(t.node),
                        threads: t.count,
                        // Private copies contend with nobody: 0 here, and the faulting
                        // thread itself is the floor of `Load::sharing_threads`.
                        sharing: if p.private_threads {
                            0
                        } else {
                            t.unscaled.unwrap_or(t.count)
                        },
                    })
                    .collect(),
                streams: Vec::new(),
                compute_ns: p.compute_ns,
                running: false,
                regions: Vec::new(),
                rate_scale: sc.rate_scale,
                op: p.op.as_ref().map(|o| crate::workload::Op {
                    name: o.name.clone(),
                    accesses: o.accesses,
                    compute_ns: o.compute_ns,
                    io_ns: o.io_ns,
                }),
            });
        }
        for i in 0..w.proc_specs.len() {
            if w.proc_specs[i].start_s <= 0.0 {
                w.start_process(i, None)?;
            }
        }
        w.resolve_report();
        Ok(w)
    }

    fn class_by_name(&self, name: &str) -> Option<ClassId> {
        self.mem
            .classes()
            .iter()
            .position(|c| c.name == name)
            .map(|i| ClassId(i as u16))
    }

    /// The indexes of the processes named `name`: one, or every copy of a process with
    /// `copies` (they keep its name), so that events and `skip` take them all.
    fn procs_named(&self, name: &str) -> Vec<usize> {
        (0..self.procs.len())
            .filter(|&i| self.procs[i].name == name)
            .collect()
    }

    /// The class named `name` among the regions of address space `space`: a process's own
    /// class, whichever of several copies of the process it is (`copies`).
    fn class_in_space(&self, name: &str, space: SpaceId) -> Option<ClassId> {
        let regions = self.mem.regions();
        self.mem
            .classes()
            .iter()
            .position(|c| c.name == name && regions[c.region.0 as usize].space == space)
            .map(|i| ClassId(i as u16))
    }

    /// Class `c` and, if its region is partly THP, the same class of the base-page part.
    fn class_group(&self, c: ClassId) -> Vec<ClassId> {
        let class = self.mem.class(c);
        let region = &self.mem.regions()[class.region.0 as usize].name;
        let rest = class.name.strip_prefix(region.as_str()).unwrap_or("");
        let twin = format!("{}{rest}", twin_name(region));
        let space = self.mem.regions()[class.region.0 as usize].space;
        let mut out = vec![c];
        out.extend(self.class_in_space(&twin, space));
        out
    }

    /// Base pages of class `c`.
    fn class_pages(&self, c: ClassId) -> f64 {
        let class = self.mem.class(c);
        f64::from(class.len) * self.mem.regions()[class.region.0 as usize].unit_pages() as f64
    }

    fn resolve_report(&mut self) {
        // Every class of that name: one per copy of a process with `copies`.
        let hot: Vec<ClassId> = (0..self.mem.classes().len())
            .filter(|&i| self.mem.classes()[i].name == self.scenario.report.hot)
            .map(|i| ClassId(i as u16))
            .collect();
        if !hot.is_empty() {
            self.hot_classes = hot.into_iter().flat_map(|c| self.class_group(c)).collect();
        }
        self.report_regions = self
            .mem
            .regions()
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                self.scenario.report.regions.is_empty()
                    || self.scenario.report.regions.contains(&r.name)
                    || r.name
                        .strip_suffix(TWIN_SUFFIX)
                        .is_some_and(|n| self.scenario.report.regions.iter().any(|x| x == n))
            })
            .map(|(i, _)| RegionId(i as u32))
            .collect();
    }

    /// Maps a process's regions and starts its threads. With a step context (a process
    /// starting mid-run), room is made on full top-tier nodes by demotion when enabled.
    fn start_process(
        &mut self,
        pi: usize,
        mut ctx_mem: Option<(&Load, &mut SimRng, &mut Accounting)>,
    ) -> Result<(), SimError> {
        let spec = self.proc_specs[pi].clone();
        let space = self.procs[pi].space;
        let cgroup = self.procs[pi].cgroup;
        let first_node = spec.threads.first().map_or(NodeId(0), |t| NodeId(t.node));
        let seed = self.scenario.seed;
        type Part<'a> = (
            usize,
            &'a crate::scenario::RegionToml,
            PageSize,
            Bytes,
            String,
            bool,
        );
        let parts: Vec<Part<'_>> = spec
            .region
            .iter()
            .enumerate()
            .flat_map(|(ri, r)| {
                let name = format!("{}.{}", spec.name, r.name);
                thp_parts(gib(r.size_gib), r.thp_share()).into_iter().map(
                    move |(size, bytes, twin)| {
                        let n = if twin { twin_name(&name) } else { name.clone() };
                        (ri, r, size, bytes, n, twin)
                    },
                )
            })
            .collect();
        for (ri, r, size, bytes, name, twin) in parts {
            // A base-page region's unit is `grain` pages (`Memory::map_region_grained`).
            let grain = if size == PageSize::Base {
                self.scenario.machine.grain.max(1)
            } else {
                1
            };
            let unit_pages = size.nr_pages().0 * u64::from(grain);
            let units = bytes
                .0
                .div_ceil(unit_pages * tierd_engine::types::PAGE_SIZE);
            let units = u32::try_from(units).map_err(|_| SimError::Alloc {
                scenario: self.scenario.name.clone(),
                source: crate::memory::AllocError::TooManyUnits,
            })?;
            let policy = r.policy.as_ref().map_or(MemPolicy::DEFAULT, |p| MemPolicy {
                mode: p.mode,
                nodes: NodeMask::from_nodes(p.nodes.iter().map(|n| NodeId(*n))),
                numa_balancing: p.numa_balancing,
            });
            let mut classes = Vec::new();
            let spread = |s: SpreadToml| match s {
                SpreadToml::Uniform => Spread::Uniform,
                SpreadToml::Zipf { s } => Spread::Zipf { s },
            };
            if let Some(h) = &r.hot {
                let unit_mib =
                    (unit_pages * tierd_engine::types::PAGE_SIZE) as f64 / Bytes::MIB as f64;
                let chunk = ((h.chunk_mib / unit_mib).round() as u32).max(1);
                let nchunks = units.div_ceil(chunk);
                let nhot = ((f64::from(nchunks) * h.fraction).round() as u32).min(nchunks);
                // The base-page part of a mixed region draws its own chunks (a seed of its own).
                let part = u64::from(twin) << 16;
                let mut rng = SimRng::seed_from_u64(seed ^ (pi as u64) << 32 ^ ri as u64 ^ part);
                let mut hot: Vec<u32> = sample(&mut rng, nchunks as usize, nhot as usize)
                    .into_iter()
                    .map(|i| i as u32)
                    .collect();
                hot.sort_unstable();
                let mut is_hot = vec![false; nchunks as usize];
                for &c in &hot {
                    is_hot[c as usize] = true;
                }
                let (mut hr, mut cr) = (Vec::new(), Vec::new());
                for c in 0..nchunks {
                    let s = c * chunk;
                    let l = chunk.min(units - s);
                    let v = if is_hot[c as usize] { &mut hr } else { &mut cr };
                    match v.last_mut() {
                        Some((ps, pl)) if *ps + *pl == s => *pl += l,
                        _ => v.push((s, l)),
                    }
                }
                classes.push(ClassSpec {
                    name: format!("{name}.hot"),
                    ranges: hr,
                    spread: spread(h.spread),
                });
                classes.push(ClassSpec {
                    name: format!("{name}.cold"),
                    ranges: cr,
                    spread: Spread::Uniform,
                });
            } else {
                classes.push(ClassSpec {
                    name: name.clone(),
                    ranges: vec![(0, units)],
                    spread: spread(r.spread),
                });
            }
            let order = self.placement_order(r.place.map(NodeId), &policy, first_node);
            // The page allocator's fast path walks the allowed nodes in zonelist order and
            // takes the first above its low watermark (mm/page_alloc.c
            // `get_page_from_freelist()`): with a lower tier in the list, a full top tier sends
            // new pages there, and only when no allowed node has room does the allocator enter
            // direct reclaim (`__alloc_pages_slowpath()`), which demotes to make room.
            let need_pages = u64::from(units) * unit_pages;
            let spill: u64 = order
                .iter()
                .filter(|n| !self.topo.is_toptier(**n))
                .map(|n| self.mem.node(*n).map_or(0, |m| m.free().0))
                .sum();
            let falls_back = spill >= need_pages;
            if let Some((load, rng, acct)) = ctx_mem.as_mut().filter(|_| !falls_back) {
                let mut need = need_pages;
                for &n in &order {
                    if need == 0 || !self.knobs.demotion_enabled || !self.topo.is_toptier(n) {
                        continue;
                    }
                    let (free, cap) = self
                        .mem
                        .node(n)
                        .map_or((0, 0), |m| (m.free().0, m.capacity.0));
                    let wm = Watermarks::of(
                        tierd_engine::types::Pages(cap),
                        self.knobs.watermark_scale_factor,
                    );
                    let want = need.min(cap.saturating_sub(wm.high.0));
                    if free < want + wm.high.0 {
                        let mut ctx = self.charge_ctx(load, rng, acct);
                        demote_coldest(
                            &mut ctx,
                            n,
                            tierd_engine::types::Pages(want + wm.high.0),
                            None,
                        );
                    }
                    let usable = self
                        .mem
                        .node(n)
                        .map_or(0, |m| m.free().0.saturating_sub(wm.high.0));
                    need = need.saturating_sub(usable);
                }
            }
            let base = self.next_vpn.entry(pi).or_insert(1 << 28);
            let start = align_vpn(*base, size);
            *base = start + u64::from(units) * unit_pages + 512;
            let interleave = policy.mode == PolicyMode::Interleave
                || policy.mode == PolicyMode::WeightedInterleave;
            let mask: Vec<NodeId> = policy.nodes.iter().collect();
            let rid = self
                .mem
                .map_region_grained(
                    &name,
                    space,
                    cgroup,
                    Vpn(start),
                    units,
                    (size, grain),
                    policy,
                    classes,
                    seed ^ ri as u64,
                    |i, o| {
                        if interleave && !mask.is_empty() && r.place.is_none() {
                            let k = i as usize % mask.len();
                            o.push(mask[k]);
                            o.extend(order.iter().copied().filter(|n| *n != mask[k]));
                        } else {
                            o.extend_from_slice(&order);
                        }
                    },
                )
                .map_err(|source| SimError::Alloc {
                    scenario: self.scenario.name.clone(),
                    source,
                })?;
            self.mem.set_sweep(rid, r.sweep_s);
            self.procs[pi].regions.push(rid);
        }
        // Streams.
        let mut streams = Vec::new();
        for a in &spec.access {
            let own = format!("{}.{}", spec.name, a.class);
            if let Some(c) = self
                .class_in_space(&own, space)
                .or_else(|| self.class_by_name(&a.class))
            {
                // A region partly in THP is two regions (see `thp_parts`): the stream goes to
                // both halves of the class in proportion to their bytes, so every byte of the
                // class is accessed alike, whatever its page size.
                let group = self.class_group(c);
                let pages: Vec<f64> = group.iter().map(|&g| self.class_pages(g)).collect();
                let total: f64 = pages.iter().sum();
                for (&g, p) in group.iter().zip(&pages) {
                    let share = if group.len() == 1 || total <= 0.0 {
                        a.share
                    } else {
                        a.share * p / total
                    };
                    streams.push(Stream { class: g, share });
                }
            }
        }
        self.procs[pi].streams = streams;
        self.procs[pi].running = spec.running;
        if let Some((load, rng, acct)) = ctx_mem {
            self.charge_over_high(pi, load, rng, acct);
        }
        self.resolve_report();
        Ok(())
    }

    /// A step context for work done when a process charges its pages (start of the process,
    /// outside the step loop's own context): time 0, no step length.
    fn charge_ctx<'a>(
        &'a mut self,
        load: &'a Load,
        rng: &'a mut SimRng,
        acct: &'a mut Accounting,
    ) -> Ctx<'a> {
        Ctx {
            now: 0,
            dt: 0,
            mem: &mut self.mem,
            load,
            procs: &self.procs,
            rng,
            acct,
            kernel: &self.knobs,
            memcg: &self.memcg,
        }
    }

    /// `memory.high` as the stock kernel applies it, on charge: after a process mid-run has
    /// charged its pages, a cgroup over its high is reclaimed and the allocating thread
    /// sleeps (mm/memcontrol.c `mem_cgroup_handle_over_high()`, run on the return to user
    /// space after a charge). Reclaim demotes the cgroup's coldest top-tier pages, which does
    /// not uncharge them, so without swap the cgroup stays over and each charge batch sleeps
    /// [`high_delay_ns`]. A cgroup that charges nothing (a process that allocated once and
    /// only accesses) is never throttled: the kernel checks memory.high only when charging.
    fn charge_over_high(
        &mut self,
        pi: usize,
        load: &Load,
        rng: &mut SimRng,
        acct: &mut Accounting,
    ) {
        let cg = self.procs[pi].cgroup;
        let Some(high) = self.memcg.high.get(&cg).map(|b| b.pages().0) else {
            return;
        };
        let (usage, _) = cgroup_usage(&self.mem, cg);
        if usage <= high {
            return;
        }
        let charged: u64 = self.procs[pi]
            .regions
            .iter()
            .map(|r| {
                self.mem
                    .region_placement(*r)
                    .values()
                    .map(|p| p.0)
                    .sum::<u64>()
            })
            .sum();
        acct.count("memory_high_events", 1);
        let mut ctx = self.charge_ctx(load, rng, acct);
        let over = usage - high;
        if ctx.kernel.demotion_enabled {
            // reclaim_high(): asks for the pages over high.
            for n in ctx.mem.topology().toptier_mask().iter() {
                let free = ctx.mem.free(n).pages().0;
                demote_coldest(
                    &mut ctx,
                    n,
                    tierd_engine::types::Pages(free + over),
                    Some(cg),
                );
            }
        }
        // One sleep per charge batch over high, at the overage the charge reached.
        let batches = charged.div_ceil(MEMCG_CHARGE_BATCH);
        let per_batch = high_delay_ns(usage, high, MEMCG_CHARGE_BATCH.min(charged));
        ctx.charge_app(pi, per_batch * batches as f64);
    }

    /// Nodes to try for a new page: `place` if given; else the policy's nodes (BIND: only
    /// those); else the local node; each list continued by distance from the first thread.
    fn placement_order(
        &self,
        place: Option<NodeId>,
        pol: &MemPolicy,
        local: NodeId,
    ) -> Vec<NodeId> {
        let mut all: Vec<NodeId> = self.topo.nodes().iter().map(|n| n.id).collect();
        all.sort_by_key(|n| (self.topo.distance(local, *n).unwrap_or(u32::MAX), *n));
        if let Some(p) = place {
            let mut o = vec![p];
            o.extend(all.into_iter().filter(|n| *n != p));
            return o;
        }
        match pol.mode {
            PolicyMode::Bind => all.into_iter().filter(|n| pol.nodes.contains(*n)).collect(),
            PolicyMode::Preferred
            | PolicyMode::PreferredMany
            | PolicyMode::Interleave
            | PolicyMode::WeightedInterleave => {
                let (mut a, b): (Vec<NodeId>, Vec<NodeId>) =
                    all.into_iter().partition(|n| pol.nodes.contains(*n));
                a.extend(b);
                a
            }
            // Unknown: scenarios cannot name it (it is never deserialized).
            PolicyMode::Default | PolicyMode::Local | PolicyMode::Unknown => all,
        }
    }

    /// The topology.
    #[must_use]
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The initial memory.
    #[must_use]
    pub fn memory(&self) -> &Memory {
        &self.mem
    }

    fn mechanism(&self, c: &ConfigToml) -> Result<Box<dyn Mechanism>, SimError> {
        Ok(match c.mechanism {
            MechanismKind::Baseline => Box::new(Baseline),
            MechanismKind::Numab => Box::new(Numab::new(
                &c.numab.clone().unwrap_or_default(),
                self.procs.len(),
            )),
            MechanismKind::Damon => Box::new(Kdamonds::new(
                &c.damon.clone().unwrap_or_default(),
                &c.kdamonds,
            )),
            MechanismKind::Tierd => {
                let Some(t) = &c.tierd else {
                    // Scenario::validate refuses this too; a config built in code gets the same
                    // answer instead of invented defaults.
                    return Err(SimError::MissingTable {
                        scenario: self.scenario.name.clone(),
                        config: c.id.clone(),
                    });
                };
                let tierd = Tierd::new(
                    &t.grained(self.scenario.machine.grain),
                    self.topo.clone(),
                    self.procs.len(),
                    self.memcg.low.clone(),
                )
                .map_err(|source| SimError::Config {
                    scenario: self.scenario.name.clone(),
                    config: c.id.clone(),
                    source,
                })?;
                Box::new(tierd)
            }
        })
    }

    /// The share of the hot set's bytes on `node` (units weighed by their pages; with one
    /// class, the share of its units).
    fn hot_share_on(&self, node: NodeId) -> f64 {
        let (mut on, mut all) = (0u64, 0u64);
        for &c in &self.hot_classes {
            let class = self.mem.class(c);
            let pages = self.mem.regions()[class.region.0 as usize].unit_pages();
            on += class.units_on.get(&node).copied().unwrap_or(0) * pages;
            all += u64::from(class.len) * pages;
        }
        if all > 0 {
            on as f64 / all as f64
        } else {
            0.0
        }
    }

    fn report_gib(&self, mem: &Memory) -> BTreeMap<NodeId, f64> {
        let mut out: BTreeMap<NodeId, f64> =
            self.topo.nodes().iter().map(|n| (n.id, 0.0)).collect();
        for r in &self.report_regions {
            for (n, p) in mem.region_placement(*r) {
                *out.entry(n).or_default() += p.bytes().0 as f64 / Bytes::GIB as f64;
            }
        }
        out
    }

    /// Runs one configuration; `progress(fraction)` is called as it goes.
    ///
    /// # Errors
    /// [`SimError`] if the configuration cannot be built or a mid-run allocation fails.
    pub fn run(&self, c: &ConfigToml, progress: impl FnMut(f64)) -> Result<ConfigResult, SimError> {
        self.run_reusing(c, &mut None, progress, |_| {})
    }

    /// [`World::run`], calling `observe` after each sample with the run's state (per-process
    /// placement, hot pages, nodes; see [`Observed`]). The result is the same as `run`'s.
    ///
    /// # Errors
    /// As [`World::run`].
    pub fn run_observed(
        &self,
        c: &ConfigToml,
        progress: impl FnMut(f64),
        observe: impl FnMut(&Observed<'_>),
    ) -> Result<ConfigResult, SimError> {
        self.run_reusing(c, &mut None, progress, observe)
    }

    /// A copy of this world for one configuration; its memory is `spare`'s allocation when
    /// given (see [`Memory`]'s `clone_from`), so a comparison maps the machine once.
    fn fresh(&self, spare: Option<Memory>) -> World {
        let mem = match spare {
            Some(mut m) => {
                m.clone_from(&self.mem);
                m
            }
            None => self.mem.clone(),
        };
        World {
            scenario: self.scenario.clone(),
            topo: self.topo.clone(),
            lat: self.lat.clone(),
            mem,
            procs: self.procs.clone(),
            proc_specs: self.proc_specs.clone(),
            cgroups: self.cgroups.clone(),
            memcg: self.memcg.clone(),
            knobs: self.knobs,
            hot_classes: self.hot_classes.clone(),
            report_regions: self.report_regions.clone(),
            fast_node: self.fast_node,
            next_vpn: self.next_vpn.clone(),
        }
    }

    /// Applies a configuration's overrides to a fresh world: the latency profile, the
    /// cgroups' memory.low and memory.high, the processes it skips, and the kernel knobs its
    /// mechanism implies.
    fn configure(&mut self, c: &ConfigToml) {
        if let Some(pairs) = c
            .profile
            .as_ref()
            .and_then(|p| self.scenario.machine.profile.get(p))
        {
            for (k, v) in pairs {
                if let Some((a, b)) = k
                    .split_once('-')
                    .and_then(|(a, b)| Some((a.parse::<u16>().ok()?, b.parse::<u16>().ok()?)))
                {
                    self.lat.ns.insert((NodeId(a), NodeId(b)), *v);
                }
            }
        }
        for cg in &c.cgroup {
            if let Some(id) = self.cgroups.get(&cg.name).copied() {
                self.memcg.low.insert(id, gib(cg.low_gib));
                if cg.high_gib > 0.0 {
                    self.memcg.high.insert(id, gib(cg.high_gib));
                } else {
                    self.memcg.high.remove(&id);
                }
            }
        }
        for name in &c.skip {
            for pi in self.procs_named(name) {
                self.procs[pi].running = false;
                self.procs[pi].streams.clear();
                for r in self.procs[pi].regions.clone() {
                    self.mem.unmap_region(r);
                }
            }
        }
        if c.mechanism == MechanismKind::Numab {
            self.knobs.tiering_kswapd = c.numab.as_ref().is_none_or(|n| n.mode & 2 != 0);
            self.knobs.memcg_tiering = c.numab.as_ref().is_some_and(|n| n.memcg_tiering);
        } else if c.mechanism == MechanismKind::Tierd {
            // The kernel's pghot takes its hint faults from NUMA balancing's tiering mode
            // (numa_balancing=2, or 3 with kernel_numab), so its kswapd balances top-tier
            // nodes to the promotion watermark (mm/vmscan.c `pgdat_balanced()`); tierd's own
            // rows leave the kernel at its defaults.
            self.knobs.tiering_kswapd = c.tierd.as_ref().is_some_and(|t| {
                t.kernel_pghot
                    && t.sources
                        .contains(&tierd_engine::sources::SourceKind::HintFault)
            });
        }
    }

    /// One scheduled event (scenario `[[event]]`) applied to the processes it names.
    fn apply_event(&mut self, e: &EventToml) {
        for pi in self.procs_named(&e.process) {
            match e.action {
                EventAction::Pause => self.procs[pi].running = false,
                EventAction::Resume => self.procs[pi].running = true,
                EventAction::Exit => {
                    self.procs[pi].running = false;
                    for r in self.procs[pi].regions.clone() {
                        self.mem.unmap_region(r);
                    }
                }
                EventAction::Migratepages => {
                    if let Some(to) = e.to {
                        for r in self.procs[pi].regions.clone() {
                            let reg = self.mem.regions()[r.0 as usize].clone();
                            for u in reg.first_unit..reg.first_unit + reg.units {
                                // Pages that do not fit stay where they are, as
                                // with migratepages(8).
                                let _ = self.mem.migrate(crate::memory::UnitId(u), NodeId(to));
                            }
                        }
                    }
                }
            }
        }
    }

    /// Pages of single-node processes that sit on another top-tier node than their threads'.
    fn wrong_node_pages(&self) -> u64 {
        let mut wrong_pages = 0u64;
        for p in &self.procs {
            let Some(home) = p.groups.first().map(|g| g.node) else {
                continue;
            };
            if p.groups.iter().any(|g| g.node != home) {
                continue;
            }
            for r in &p.regions {
                for (n, pages) in self.mem.region_placement(*r) {
                    if n != home && self.topo.is_toptier(n) {
                        wrong_pages += pages.0;
                    }
                }
            }
        }
        wrong_pages
    }

    /// [`World::run`], copying the machine into `spare` (left holding it afterwards for the
    /// next configuration) instead of into a fresh allocation.
    fn run_reusing(
        &self,
        c: &ConfigToml,
        spare: &mut Option<Memory>,
        mut progress: impl FnMut(f64),
        mut observe: impl FnMut(&Observed<'_>),
    ) -> Result<ConfigResult, SimError> {
        let mut w = self.fresh(spare.take());
        w.configure(c);
        let mut mech = w.mechanism(c)?;
        let sc = &self.scenario;
        let mut rng = SimRng::seed_from_u64(sc.seed);
        let dt = sc.step_ms * 1_000_000;
        let steps = (sc.duration_s * 1000.0 / sc.step_ms as f64).round() as u64;
        let sample_every = (sc.sample_ms / sc.step_ms).max(1);
        let mut acct = Accounting {
            app_overhead_ns: vec![0.0; w.procs.len()],
            ..Accounting::default()
        };
        let mut tax = vec![0.0; w.procs.len()];
        let mut events: Vec<(f64, usize)> = sc
            .event
            .iter()
            .enumerate()
            .map(|(i, e)| (e.at_s, i))
            .collect();
        events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut next_event = 0;
        let mut started: Vec<bool> = w
            .proc_specs
            .iter()
            .map(|p| p.start_s <= 0.0 || c.skip.contains(&p.name))
            .collect();
        let measured: Vec<bool> = w
            .procs
            .iter()
            .map(|p| sc.report.process.as_ref().is_none_or(|n| *n == p.name))
            .collect();
        let hot_pages: f64 = w.hot_classes.iter().map(|&c| w.class_pages(c)).sum();
        let hot_gib = pages_gib(hot_pages);
        let counts_ops = w
            .procs
            .iter()
            .zip(&measured)
            .any(|(p, m)| *m && p.op.is_some());
        let mut series = Vec::new();
        let (mut lat_acc, mut rate_acc, mut ops_acc) = (0.0, 0.0, 0.0);
        let mut time_to_hot: BTreeMap<String, Option<f64>> = ["50", "90", "95"]
            .iter()
            .map(|k| ((*k).to_string(), None))
            .collect();
        for step in 0..steps {
            let now = step * dt;
            let t_s = now as f64 / 1e9;
            // Process starts and events due in this step.
            for (pi, done) in started.iter_mut().enumerate() {
                if !*done && w.proc_specs[pi].start_s <= t_s {
                    *done = true;
                    let load = Load::compute(&w.procs, &w.mem, &w.lat, &tax);
                    w.start_process(pi, Some((&load, &mut rng, &mut acct)))?;
                }
            }
            while next_event < events.len() && events[next_event].0 <= t_s {
                let e = &sc.event[events[next_event].1];
                next_event += 1;
                if c.skip.contains(&e.process) {
                    continue;
                }
                w.apply_event(e);
            }
            let load = Load::compute(&w.procs, &w.mem, &w.lat, &tax);
            acct.app_overhead_ns.iter_mut().for_each(|x| *x = 0.0);
            {
                let mut ctx = Ctx {
                    now,
                    dt,
                    mem: &mut w.mem,
                    load: &load,
                    procs: &w.procs,
                    rng: &mut rng,
                    acct: &mut acct,
                    kernel: &w.knobs,
                    memcg: &w.memcg,
                };
                kswapd(&mut ctx);
                World::cgroup_high(&mut ctx);
                mech.step(&mut ctx);
            }
            // Time charged to a process's threads this step, spread over its accesses.
            for (p, t) in tax.iter_mut().enumerate() {
                let accesses = load.process_rate[p] * dt as f64 / 1e9;
                *t = if accesses > 0.0 {
                    acct.app_overhead_ns[p] / accesses
                } else {
                    0.0
                };
            }
            for (p, r) in load.process_rate.iter().enumerate() {
                if measured[p] {
                    lat_acc += r * load.process_latency_ns[p];
                    rate_acc += r;
                    ops_acc += load.process_ops[p];
                }
            }
            let hot_fast = w.hot_share_on(w.fast_node);
            for (k, thr) in [("50", 0.5), ("90", 0.9), ("95", 0.95)] {
                if hot_fast >= thr {
                    time_to_hot.entry(k.to_string()).and_modify(|v| {
                        if v.is_none() {
                            *v = Some(t_s + dt as f64 / 1e9);
                        }
                    });
                }
            }
            if (step + 1) % sample_every == 0 || step + 1 == steps {
                series.push(Sample {
                    t_s: (now + dt) as f64 / 1e9,
                    latency_ns: if rate_acc > 0.0 {
                        lat_acc / rate_acc
                    } else {
                        0.0
                    },
                    accesses_per_s: rate_acc / sample_every as f64,
                    ops_per_s: counts_ops.then(|| ops_acc / sample_every as f64),
                    node_gib: w.report_gib(&w.mem),
                    hot_on_fast: hot_fast,
                    promoted_gib: pages_gib(acct.promoted_pages as f64),
                    demoted_gib: pages_gib(acct.demoted_pages as f64),
                    promoter_cpu_s: acct.promoter_cpu_ns / 1e9,
                    counters: acct.vmstat.clone(),
                });
                lat_acc = 0.0;
                rate_acc = 0.0;
                ops_acc = 0.0;
                if let Some(sample) = series.last() {
                    observe(&Observed {
                        sample,
                        mem: &w.mem,
                        procs: &w.procs,
                        cgroups: &w.cgroups,
                        acct: &acct,
                    });
                }
                progress((step + 1) as f64 / steps as f64);
            }
        }
        if let Some(message) = w.mem.check() {
            // The model broke its own invariants: a bug in the simulator, not a user error.
            return Err(SimError::Invariant {
                scenario: sc.name.clone(),
                config: c.id.clone(),
                message,
            });
        }
        let (latency_ns, throughput, ops_per_s) =
            steady_means(&series, sc.report.steady_fraction, counts_ops);
        let node_gib = w.report_gib(&w.mem);
        let fast_gib = node_gib.get(&w.fast_node).copied().unwrap_or(0.0);
        let hot_on_fast = w.hot_share_on(w.fast_node);
        let counters = acct.vmstat.clone();
        let wrong_pages = w.wrong_node_pages();
        let pages_migrated = w.mem.stats.pages_migrated;
        let mempolicy_violations = w.mem.stats.mempolicy_violations;
        *spare = Some(w.mem);
        let overhead_us_per_migrated_page = (pages_migrated > 0).then(|| {
            (acct.app_overhead_total_ns + acct.promoter_cpu_ns) / 1e3 / pages_migrated as f64
        });
        Ok(ConfigResult {
            id: c.id.clone(),
            label: c.label.clone(),
            mechanism: c.mechanism,
            latency_ns,
            throughput,
            ops_per_s,
            relative_rate: None,
            fast_gib,
            node_gib,
            hot_gib,
            hot_on_fast,
            over_promotion: if hot_gib > 0.0 {
                (fast_gib - hot_gib) / hot_gib
            } else {
                0.0
            },
            promoted_gib: pages_gib(acct.promoted_pages as f64),
            demoted_gib: pages_gib(acct.demoted_pages as f64),
            promoter_cpu_s: acct.promoter_cpu_ns / 1e9,
            promoter_cpu_pct: acct.promoter_cpu_ns / 1e9 / sc.duration_s * 100.0,
            app_overhead_s: acct.app_overhead_total_ns / 1e9,
            wrong_node_gib: pages_gib(wrong_pages as f64),
            pages_migrated,
            overhead_us_per_migrated_page,
            time_to_hot,
            counters,
            mempolicy_violations,
            published: c.published.clone(),
            series,
        })
    }

    /// `memory.high` under the per-cgroup tiering RFC ([`KernelKnobs::memcg_tiering`]): the
    /// limit is scaled to top-tier memory as the RFC scales memory.low (`high x top-tier
    /// capacity / all capacity`, the `memory.toptier_high` of the 2026 tier-aware memcg
    /// limits series), and a cgroup whose top-tier usage is above it has its coldest top-tier
    /// pages demoted until it is back under, every step. Demotion lowers top-tier usage, so
    /// this reclaim succeeds and no throttling follows. An **assumption**: the RFC leaves
    /// memory.high unchanged, but the stock limit binds on total usage and cannot bind on
    /// seed D's 256 GiB sweeper at 257 GiB (see docs/simulator.md); stock memory.high is
    /// applied on charge ([`World::charge_over_high`]).
    fn cgroup_high(ctx: &mut Ctx<'_>) {
        if ctx.memcg.high.is_empty() || !ctx.kernel.demotion_enabled || !ctx.kernel.memcg_tiering {
            return;
        }
        let share = toptier_share(ctx.mem);
        let highs: Vec<(CgroupId, Bytes)> = ctx.memcg.high.iter().map(|(c, h)| (*c, *h)).collect();
        for (cg, high) in highs {
            let (_, top) = cgroup_usage(ctx.mem, cg);
            let top_high = (high.pages().0 as f64 * share) as u64;
            if top <= top_high {
                continue;
            }
            ctx.acct.count("memory_high_events", 1);
            let mut over = top - top_high;
            for n in ctx.mem.topology().toptier_mask().iter() {
                let before = ctx.mem.free(n).pages().0;
                demote_coldest(ctx, n, tierd_engine::types::Pages(before + over), Some(cg));
                over = over.saturating_sub(ctx.mem.free(n).pages().0 - before);
                if over == 0 {
                    break;
                }
            }
        }
    }
}

/// `MEMCG_CHARGE_BATCH` (include/linux/memcontrol.h, 64 since 6.1): pages a CPU charges at
/// once, and so the pages over high a task brings back to user space per charge. **Derived**
/// from the kernel source.
pub const MEMCG_CHARGE_BATCH: u64 = 64;

/// The sleep `mem_cgroup_handle_over_high()` imposes for a charge of `nr_pages` that leaves a
/// cgroup at `usage` over `high` (pages), ns: mm/memcontrol.c `calculate_overage()` (the
/// overage as a 2^-20 fraction of high) and `calculate_high_delay()` (`overage^2 x HZ >>
/// (20 + 14)`, scaled by `nr_pages / MEMCG_CHARGE_BATCH`), clamped to
/// `MEMCG_MAX_HIGH_DELAY_JIFFIES` (2 s), and no sleep at all when at most `HZ / 100` (10 ms):
/// "Don't sleep if the amount of jiffies this memcg owes us is so low". All **derived** from
/// the kernel source; HZ cancels out.
#[must_use]
pub fn high_delay_ns(usage: u64, high: u64, nr_pages: u64) -> f64 {
    if usage <= high {
        return 0.0;
    }
    let overage = ((usage - high) << 20) / high.max(1);
    let penalty_s =
        (overage as f64).powi(2) / 2f64.powi(34) * nr_pages as f64 / MEMCG_CHARGE_BATCH as f64;
    let penalty_s = penalty_s.min(2.0);
    if penalty_s <= 0.01 {
        0.0
    } else {
        penalty_s * 1e9
    }
}

/// The processes of a scenario with every `copies = N` process written out as N processes of
/// the same name (each then gets its own address space, regions and scan at build).
fn expand_copies(procs: &[ProcessToml]) -> Vec<ProcessToml> {
    procs
        .iter()
        .flat_map(|p| {
            let mut one = p.clone();
            one.copies = 1;
            std::iter::repeat_n(one, p.copies.max(1) as usize)
        })
        .collect()
}

/// The scenario's THP share over all its regions' bytes, in words: `never`, `always`, or
/// e.g. `37 % of bytes`.
#[must_use]
pub fn thp_label(sc: &Scenario) -> String {
    let (mut huge, mut all) = (0.0, 0.0);
    for p in &sc.process {
        for r in &p.region {
            huge += r.thp_share() * r.size_gib * f64::from(p.copies);
            all += r.size_gib * f64::from(p.copies);
        }
    }
    if huge <= 0.0 {
        "never".into()
    } else if huge >= all {
        "always".into()
    } else {
        format!("{:.0} % of bytes", huge / all * 100.0)
    }
}

/// Runs every configuration of `sc` (or those whose id is in `only`).
///
/// # Errors
/// [`SimError`] from building the world or a configuration.
pub fn compare(
    sc: &Scenario,
    scale: f64,
    only: &[String],
    progress: impl FnMut(usize, &str, f64),
) -> Result<CompareResult, SimError> {
    let world = World::build(sc)?;
    let configs = run_in_turn(&world, &picked(sc, only), progress)?;
    Ok(compare_result(sc, scale, &world, configs))
}

/// The configurations of `sc` that `only` names (all when it is empty), with their index in
/// the scenario.
fn picked<'a>(sc: &'a Scenario, only: &[String]) -> Vec<(usize, &'a ConfigToml)> {
    sc.config
        .iter()
        .enumerate()
        .filter(|(_, c)| only.is_empty() || only.contains(&c.id))
        .collect()
}

/// Runs `picked` one after the other on `world`, reusing one copy of its machine.
fn run_in_turn(
    world: &World,
    picked: &[(usize, &ConfigToml)],
    mut progress: impl FnMut(usize, &str, f64),
) -> Result<Vec<ConfigResult>, SimError> {
    let mut spare = None;
    picked
        .iter()
        .map(|&(i, c)| world.run_reusing(c, &mut spare, |f| progress(i, &c.id, f), |_| {}))
        .collect()
}

/// Bytes per unit of the machine that a comparison's memory budget counts
/// ([`compare_jobs_within`]). Measured, not derived: peak RSS at full scale on 2026-12-06
/// (`tierd compare NAME --only ID --jobs 1`), divided by the scenario's units, taking the
/// largest of A (16.8 M units), C (5.3 M at grain 8) and D (70.8 M). Bytes held, not time:
/// they do not depend on the host's speed. An upper end meant to keep a comparison out of
/// the OOM killer, not a model of anything.
///
/// The built machine, which every worker copies from: half of a baseline row's peak (the
/// built machine and one copy): 12 B in A, 16.5 in D, 20.5 in C (its Zipf classes' tables).
pub const MACHINE_BYTES_PER_UNIT: u64 = 21;

/// What a running configuration holds beyond the built machine: its copy of the machine and
/// its mechanism's per-page state (the NUMA scanner's, the LRU's, DAMON's): 22 B in D's
/// K-stack and K-low, 26.5 in A's N2, 27 in C's N2.
pub const CONFIG_BYTES_PER_UNIT: u64 = 28;

/// What tierd's engine adds in a configuration that runs it: the fast index, the heat map,
/// the slow tier's hotness records and the move history. Most on a slow tier (a hotness
/// record each): 80 B in all in A's T1 (most of its buffer starts on CXL), 57 in C's PD,
/// 42 in D's T-stack (most of it on DRAM); 84 in all here.
pub const ENGINE_BYTES_PER_UNIT: u64 = 56;

/// The bytes `c` holds while it runs on `world` ([`CONFIG_BYTES_PER_UNIT`],
/// [`ENGINE_BYTES_PER_UNIT`]): what [`compare_jobs_within`] budgets per worker.
#[must_use]
pub fn config_bytes(world: &World, c: &ConfigToml) -> Bytes {
    let units = u64::from(world.units());
    let per = CONFIG_BYTES_PER_UNIT
        + if c.mechanism == MechanismKind::Tierd {
            ENGINE_BYTES_PER_UNIT
        } else {
            0
        };
    Bytes(units.saturating_mul(per))
}

/// How many configurations `compare_jobs_within` ran at once, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobPlan {
    /// Workers started.
    pub jobs: usize,
    /// Workers asked for (at most one per configuration).
    pub asked: usize,
    /// The largest configuration's estimate ([`config_bytes`]).
    pub largest: Bytes,
    /// The built machine, which every worker copies from ([`World::machine_bytes`]).
    pub machine: Bytes,
    /// What the run may hold at its peak: the built machine and the `jobs` largest
    /// estimates.
    pub need: Bytes,
}

impl JobPlan {
    /// Whether memory, not the number asked for, set the number of workers.
    #[must_use]
    pub fn limited(&self) -> bool {
        self.jobs < self.asked
    }
}

/// The most of `estimates` (bytes per configuration) that may run at once within
/// `available` bytes beside the built machine's `machine`: the largest `k` for which the
/// `k` largest fit (workers take the costliest configurations first, and those are the
/// largest: tierd's), at least one, at most `asked`.
#[must_use]
pub fn jobs_within(estimates: &[Bytes], machine: Bytes, available: Bytes, asked: usize) -> usize {
    let needs = needs(estimates, machine);
    (2..=asked.min(estimates.len()))
        .take_while(|&k| needs[k] <= available)
        .last()
        .unwrap_or(1)
}

/// What `k` configurations at once may hold, for every `k` from 0 to all: the built machine
/// and the `k` largest of `estimates`.
fn needs(estimates: &[Bytes], machine: Bytes) -> Vec<Bytes> {
    let mut sorted: Vec<u64> = estimates.iter().map(|b| b.0).collect();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    std::iter::once(machine)
        .chain(sorted.iter().scan(machine.0, |used, e| {
            *used = used.saturating_add(*e);
            Some(Bytes(*used))
        }))
        .collect()
}

/// [`compare`] with up to `jobs` configurations running at once, one thread each.
///
/// Every configuration's run is seeded from the scenario alone (never from another run's
/// random stream) and starts from its own copy of the built machine, so the result is the
/// same, byte for byte, whatever `jobs` is; only the wall time and the memory change (each
/// thread holds one copy of the machine). Results come back in the scenario's order.
///
/// # Errors
/// [`SimError`] from building the world or from the first configuration (in scenario order)
/// that failed.
pub fn compare_jobs(
    sc: &Scenario,
    scale: f64,
    only: &[String],
    jobs: usize,
    progress: &(dyn Fn(usize, &str, f64) + Sync),
) -> Result<CompareResult, SimError> {
    compare_jobs_within(sc, scale, only, jobs, None, &|_| {}, progress).map(|(r, _)| r)
}

/// [`compare_jobs`] within a memory budget: with `available` bytes, at most as many
/// configurations run at once as [`jobs_within`] lets fit beside the built machine, by
/// [`config_bytes`]. The plan, handed to `on_plan` once the machine is built and before any
/// configuration runs, and returned, says how many run and what they may hold. The output is
/// the same whatever the number.
///
/// # Errors
/// As [`compare_jobs`].
pub fn compare_jobs_within(
    sc: &Scenario,
    scale: f64,
    only: &[String],
    jobs: usize,
    available: Option<Bytes>,
    on_plan: &dyn Fn(&JobPlan),
    progress: &(dyn Fn(usize, &str, f64) + Sync),
) -> Result<(CompareResult, JobPlan), SimError> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    let picked = picked(sc, only);
    let world = World::build(sc)?;
    let asked = jobs.clamp(1, picked.len().max(1));
    let estimates: Vec<Bytes> = picked
        .iter()
        .map(|(_, c)| config_bytes(&world, c))
        .collect();
    let machine = world.machine_bytes();
    let jobs = available.map_or(asked, |a| jobs_within(&estimates, machine, a, asked));
    let plan = JobPlan {
        jobs,
        asked,
        largest: estimates.iter().copied().max().unwrap_or(Bytes(0)),
        machine,
        need: needs(&estimates, machine)[jobs.min(estimates.len())],
    };
    on_plan(&plan);
    if jobs == 1 {
        let configs = run_in_turn(&world, &picked, |i, id, f| progress(i, id, f))?;
        return Ok((compare_result(sc, scale, &world, configs), plan));
    }
    // Workers take configurations in this order; results keep the scenario's.
    let order = start_order(&picked.iter().map(|(_, c)| *c).collect::<Vec<_>>());
    let next = AtomicUsize::new(0);
    let slots: Mutex<Vec<Option<Result<ConfigResult, SimError>>>> =
        Mutex::new((0..picked.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| {
                // A worker reuses its own machine copy from one configuration to the next.
                let mut spare = None;
                while let Some(&k) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let (i, c) = picked[k];
                    let r = world.run_reusing(c, &mut spare, |f| progress(i, &c.id, f), |_| {});
                    // A poisoned lock means another worker panicked; the scope re-raises it.
                    if let Ok(mut v) = slots.lock() {
                        v[k] = Some(r);
                    }
                }
            });
        }
    });
    let slots = slots
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut configs = Vec::with_capacity(slots.len());
    for r in slots.into_iter().flatten() {
        configs.push(r?);
    }
    Ok((compare_result(sc, scale, &world, configs), plan))
}

/// The order in which `compare_jobs`' workers start `configs` (indices into it): the costliest
/// first (longest processing time first: the last one started decides the wall time).
/// tierd's engine with its sources drawn, then DAMON, then NUMA balancing, then the baseline,
/// which moves nothing; among tierd's, more sources first, then shorter sampling periods (more
/// samples). A ranking by what each configuration draws, not a measurement: ties keep the
/// scenario's order.
fn start_order(configs: &[&ConfigToml]) -> Vec<usize> {
    let cost_rank = |c: &ConfigToml| match c.mechanism {
        MechanismKind::Tierd => {
            let t = c.tierd.as_ref();
            (
                0,
                std::cmp::Reverse(t.map_or(0, |t| t.sources.len())),
                t.map_or(u64::MAX, |t| t.sample_period),
            )
        }
        MechanismKind::Damon => (1, std::cmp::Reverse(0), 0),
        MechanismKind::Numab => (2, std::cmp::Reverse(0), 0),
        MechanismKind::Baseline => (3, std::cmp::Reverse(0), 0),
    };
    let mut order: Vec<usize> = (0..configs.len()).collect();
    order.sort_by_key(|&k| cost_rank(configs[k]));
    order
}

fn compare_result(
    sc: &Scenario,
    scale: f64,
    world: &World,
    mut configs: Vec<ConfigResult>,
) -> CompareResult {
    let baseline = sc.report.baseline.clone();
    let rate = |c: &ConfigResult| c.ops_per_s.unwrap_or(c.throughput);
    if let Some(base) = baseline
        .as_ref()
        .and_then(|b| configs.iter().find(|c| &c.id == b))
        .map(rate)
        .filter(|r| *r > 0.0)
    {
        for c in &mut configs {
            c.relative_rate = Some(rate(c) / base);
        }
    }
    let op = world
        .procs
        .iter()
        .filter(|p| sc.report.process.as_ref().is_none_or(|n| *n == p.name))
        .find_map(|p| p.op.as_ref().map(|o| o.name.clone()));
    CompareResult {
        scenario: sc.name.clone(),
        description: sc.description.clone(),
        seed: sc.seed,
        scale,
        duration_s: sc.duration_s,
        fast_node: world.fast_node,
        thp: thp_label(sc),
        grain: sc.machine.grain,
        version: env!("CARGO_PKG_VERSION").to_string(),
        op,
        baseline,
        configs,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::memory::units_for;

    const MIB2: u64 = 2 << 20;

    /// Scenario A's configurations start with tierd's T1 (two sources, the shortest period),
    /// then H5 and H10 (fewer samples), then DAMON, NUMA balancing and the baseline: the
    /// longest first, so the last one started is short.
    #[test]
    fn the_costliest_configurations_start_first() {
        let sc = Scenario::find("pointer-chase").unwrap();
        let configs: Vec<&ConfigToml> = sc.config.iter().collect();
        let ids: Vec<&str> = start_order(&configs)
            .into_iter()
            .map(|k| configs[k].id.as_str())
            .collect();
        assert_eq!(ids, ["T1", "H5", "H10", "D3", "N2", "B0"]);
    }

    /// `Load::unit_accessed` (a hint fault's question, without the Zipf weight's `pow`) is
    /// `Load::unit_rate > 0` for every unit: of Zipf and uniform classes, of running and of
    /// paused processes (rate 0), across the shipped scenarios.
    #[test]
    fn a_unit_is_accessed_exactly_when_its_rate_is_positive() {
        let (mut on, mut off) = (0, 0);
        for name in ["three-node", "memcached-preferred-many", "pointer-chase"] {
            let sc = Scenario::find(name).unwrap().scaled(1.0 / 256.0);
            let mut w = World::build(&sc).unwrap();
            // Only the last process built runs: the classes nobody else reads have rate 0
            // (three-node: all ranks' partitions but those the last rank reads).
            let last = w.procs.len() - 1;
            for (i, p) in w.procs.iter_mut().enumerate() {
                p.running = i == last;
            }
            let load = Load::compute(&w.procs, &w.mem, &w.lat, &[]);
            for u in 0..w.mem.units() {
                let u = crate::memory::UnitId(u);
                let accessed = load.unit_rate(&w.mem, u) > 0.0;
                assert_eq!(
                    load.unit_accessed(&w.mem, u),
                    accessed,
                    "{name} unit {}",
                    u.0
                );
                if accessed {
                    on += 1;
                } else {
                    off += 1;
                }
            }
        }
        assert!(on > 0 && off > 0, "{on} accessed, {off} not");
    }

    proptest! {
        /// A region's parts keep its bytes, the THP part is whole 2 MiB folios within one
        /// folio of the share, and a base-page twin exists only beside a THP part.
        #[test]
        fn thp_parts_conserve_bytes_and_align(pages in 1u64..(64 << 18), share in 0.0f64..=1.0) {
            let bytes = Bytes(pages * 4096);
            let parts = thp_parts(bytes, share);
            let huge: u64 = parts.iter().filter(|p| p.0 == PageSize::Huge2M).map(|p| p.1 .0).sum();
            let base: u64 = parts.iter().filter(|p| p.0 == PageSize::Base).map(|p| p.1 .0).sum();
            prop_assert!(parts.len() <= 2);
            if share >= 1.0 {
                // All of it, rounded up to whole folios when mapped (as `huge = true`).
                prop_assert_eq!(parts, vec![(PageSize::Huge2M, bytes, false)]);
                prop_assert_eq!(units_for(bytes, PageSize::Huge2M), pages.div_ceil(512));
            } else {
                prop_assert_eq!(huge + base, bytes.0);
                prop_assert_eq!(huge % MIB2, 0);
                let want = share * bytes.0 as f64;
                prop_assert!((huge as f64 - want).abs() <= MIB2 as f64, "{huge} for {want}");
                prop_assert_eq!(parts.iter().any(|p| p.2), huge > 0 && base > 0);
                if share == 0.0 {
                    prop_assert_eq!(parts, vec![(PageSize::Base, bytes, false)]);
                }
            }
        }
    }

    /// mm/memcontrol.c: `calculate_high_delay()` is overage^2 x nr_pages / 64 seconds,
    /// clamped to 2 s, and nothing at 10 ms or less.
    #[test]
    fn high_delay_follows_calculate_high_delay() {
        assert_eq!(high_delay_ns(1000, 1000, 64), 0.0);
        assert_eq!(high_delay_ns(900, 1000, 64), 0.0);
        // 10 % over, a full batch: 0.01 x 64 = 0.64 s (the overage is a 2^-20 fixed point).
        let d = high_delay_ns(1100, 1000, 64);
        assert!((d / 0.64e9 - 1.0).abs() < 1e-4, "{d}");
        // One page at 10 % over owes 10 ms: not worth sleeping.
        assert_eq!(high_delay_ns(1100, 1000, 1), 0.0);
        // 50 % over: 16 s, clamped to MEMCG_MAX_HIGH_DELAY_JIFFIES.
        assert_eq!(high_delay_ns(1500, 1000, 64), 2e9);
        // More overage never sleeps less.
        let mut last = 0.0;
        for usage in (1000..1400).step_by(7) {
            let d = high_delay_ns(usage, 1000, 64);
            assert!(d >= last, "{usage}: {d} < {last}");
            last = d;
        }
    }

    /// A process starting mid-run in a cgroup whose memory.high it exceeds at once is
    /// reclaimed (its coldest top-tier pages demoted, still charged) and sleeps per charge
    /// batch; the same start under no high is neither. A cgroup already over high that
    /// charges nothing is never throttled (memory.high acts on charge).
    #[test]
    fn memory_high_reclaims_and_throttles_on_charge() {
        let text = |high: f64| {
            format!(
                r#"
name = "high"
duration_s = 3
[machine]
demotion_enabled = true
distance = [[10, 20], [20, 10]]
node = [
  {{ id = 0, cpus = 4, capacity_gib = 1, latency_ns = {{ "0" = 100 }} }},
  {{ id = 1, cpus = 0, capacity_gib = 1, latency_ns = {{ "0" = 250 }} }},
]
[[cgroup]]
name = "c"
high_gib = {high}
[[process]]
name = "q"
threads = [{{ node = 0, count = 1 }}]
region = [{{ name = "heap", size_gib = 0.1 }}]
access = [{{ class = "heap", share = 1.0 }}]
[[process]]
name = "p"
cgroup = "c"
start_s = 1
threads = [{{ node = 0, count = 4 }}]
region = [{{ name = "heap", size_gib = 0.5 }}]
access = [{{ class = "heap", share = 1.0 }}]
[report]
hot = "p.heap"
[[config]]
id = "B"
mechanism = "baseline"
"#
            )
        };
        let run = |high: f64| {
            let sc = Scenario::parse(&text(high), std::path::Path::new("h.toml"))
                .unwrap_or_else(|e| panic!("{e}"));
            compare(&sc, 1.0, &[], |_, _, _| {}).unwrap().configs[0].clone()
        };
        let (over, none) = (run(0.4), run(0.0));
        assert_eq!(over.counters.get("memory_high_events"), Some(&1));
        assert!(over.demoted_gib > 0.09, "{}", over.demoted_gib);
        // 0.5 GiB + page tables over 0.4 GiB: 25 % over, 0.25^2 x 64 = 4 s per 64-page batch,
        // clamped to 2 s; 2048 batches.
        assert!(
            over.app_overhead_s >= 2048.0 * 2.0 * 0.99,
            "{}",
            over.app_overhead_s
        );
        assert!(!none.counters.contains_key("memory_high_events"));
        assert_eq!((none.demoted_gib, none.app_overhead_s), (0.0, 0.0));
        // Demoted pages stay charged: the cgroup is still over high, and not throttled again.
        assert_eq!(over.counters.get("memory_high_events"), Some(&1));
    }

    fn a(scale: f64) -> Scenario {
        let mut sc = Scenario::find("pointer-chase").unwrap().scaled(scale);
        sc.duration_s = 30.0;
        sc
    }

    #[test]
    fn a_half_thp_region_is_a_thp_part_and_a_base_twin_accessed_alike() {
        let sc = a(1.0 / 64.0).with_thp(crate::scenario::Thp(0.5));
        let w = World::build(&sc).unwrap();
        let regions = w.memory().regions();
        assert_eq!(regions.len(), 2);
        assert_eq!(
            (regions[0].name.as_str(), regions[0].page_size),
            ("chase.buffer", PageSize::Huge2M)
        );
        assert_eq!(
            (regions[1].name.as_str(), regions[1].page_size),
            ("chase.buffer~4k", PageSize::Base)
        );
        let pages = |r: &crate::memory::Region| u64::from(r.units) * r.unit_pages();
        assert_eq!(pages(&regions[0]) + pages(&regions[1]), (1u64 << 30) / 4096);
        assert_eq!(pages(&regions[0]), pages(&regions[1]));
        // Both hot classes are the hot set, each with the share of its bytes.
        assert_eq!(w.hot_classes.len(), 2);
        let hot: f64 = w.hot_classes.iter().map(|&c| w.class_pages(c)).sum();
        assert!(
            (hot / ((1u64 << 30) / 4096) as f64 - 0.25).abs() < 0.02,
            "{hot}"
        );
        let streams = &w.procs[0].streams;
        assert_eq!(streams.len(), 2);
        assert!((streams.iter().map(|s| s.share).sum::<f64>() - 1.0).abs() < 1e-12);
        for s in streams {
            let per_page = s.share / w.class_pages(s.class);
            assert!(
                (per_page * hot - 1.0).abs() < 1e-9,
                "every hot byte alike: {per_page}"
            );
        }
        assert_eq!(w.report_regions.len(), 2);
        assert_eq!(thp_label(&sc), "50 % of bytes");
    }

    #[test]
    fn numa_balancing_moves_half_thp_memory_a_folio_per_fault() {
        let sc = a(1.0 / 64.0).with_thp(crate::scenario::Thp(0.5));
        let r = compare(&sc, 1.0 / 64.0, &["N2".to_string()], |_, _, _| {}).unwrap();
        let n2 = &r.configs[0];
        let c = |k: &str| n2.counters.get(k).copied().unwrap_or(0);
        assert!(n2.hot_on_fast > 0.9, "{}", n2.hot_on_fast);
        // Each THP moved on one fault with its 512 pages; base pages one a fault.
        let thps = c("thp_migration_success");
        assert!(thps > 0);
        let base_moved = c("numa_pages_migrated") - thps * 512;
        assert!(base_moved > 0);
        assert!(c("numa_hint_faults") >= thps + base_moved);
        // PTE updates count a huge PMD as 512 PTEs, and once in numa_huge_pte_updates.
        assert!(c("numa_huge_pte_updates") >= thps);
        assert!(c("numa_pte_updates") >= c("numa_huge_pte_updates") * 512 + base_moved);
        assert_eq!(r.thp, "50 % of bytes");
    }
}
