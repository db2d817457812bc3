//! Memory tiers, abstract distance and demotion targets: the kernel's `mm/memory-tiers.c` model,
//! computed from a static description of the machine.
//!
//! # Model
//!
//! Every memory node gets an *abstract distance* (adist): a performance score where smaller is
//! faster and local DRAM is [`MEMTIER_ADISTANCE_DRAM`] (576). Nodes are grouped into memory tiers
//! that each cover [`MEMTIER_CHUNK_SIZE`] (128) adist values; tier `N` holds the nodes with
//! `adist >> MEMTIER_CHUNK_BITS == N` and is what the kernel shows as
//! `/sys/devices/virtual/memory_tiering/memory_tierN`. DRAM is therefore `memory_tier4`.
//!
//! The adist of a node is, in order of precedence:
//!
//! 1. its explicit [`NodeSpec::adistance`] (a test, a config override, or a value read back from
//!    sysfs);
//! 2. the kernel's HMAT formula [`perf_to_adistance`] (`mt_perf_to_adistance()`,
//!    mm/memory-tiers.c) when the node has [`NodeSpec::perf`] and a DRAM reference exists (see
//!    [`DramPerf`]);
//! 3. for a CPU-less node, tierd's SLIT heuristic `576 * d / d_local`, with `d` the smallest
//!    distance from any node with CPUs and `d_local` the node's distance to itself;
//! 4. for a node with CPUs, [`MEMTIER_ADISTANCE_DRAM`].
//!
//! The *top tier* is found as `establish_demotion_targets()` does: walking the tiers from the
//! slowest upward, the first tier holding a node with CPUs ends at `top_tier_adistance`; every
//! node at or below that adist is top tier (`node_is_toptier()`). Pages on top-tier nodes are
//! never promoted; pages on the other ("slow") nodes are promotion candidates.
//!
//! Demotion targets follow `establish_demotion_targets()` too: a node's preferred targets are the
//! nodes of the next lower tier at the smallest SLIT distance from it, and its fallback
//! (`lower_tier_mask`) is every node of every lower tier.
//!
//! Promotion targets are tierd's own: the kernel promotes a NUMA-balancing fault to the faulting
//! CPU's node, and pghot to `pghot_target_nid` (mm/pghot.c); tierd additionally orders the top-tier
//! nodes by distance from each slow node ([`Topology::promotion_candidates`]) so a planner can
//! pick the nearest one with room.
//!
//! # Differences from the kernel
//!
//! - The kernel gathers preferred demotion targets with repeated `find_next_best_node()`
//!   (mm/page_alloc.c) and stops at the first candidate whose distance differs from the best.
//!   That helper orders candidates by distance plus small biases (+1 for a lower node id, +1 for
//!   a node with CPUs, then allocation load), so on unusual SLIT tables it can stop before it has
//!   every node at the minimum distance. tierd always takes the whole minimum-distance set, which
//!   is what the kernel's comment describes ("Find all the nodes in the memory tier node list of
//!   same best distance").
//! - The kernel keeps adist in an `int` and its HMAT sums in `unsigned int`; tierd widens the
//!   arithmetic so absurd firmware values saturate at `u32::MAX` instead of wrapping.
//! - With no node with CPUs the kernel leaves `top_tier_adistance` at 0; tierd refuses such a
//!   topology ([`TopologyError::NoCpuNode`]), since nothing could be promoted anywhere.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::types::{Bytes, NodeId, NodeMask, MAX_NODES};

/// Bits of adist covered by one memory tier (include/linux/memory-tiers.h).
pub const MEMTIER_CHUNK_BITS: u32 = 7;
/// Width of one memory tier in adist units, `1 << MEMTIER_CHUNK_BITS`
/// (include/linux/memory-tiers.h).
pub const MEMTIER_CHUNK_SIZE: u32 = 1 << MEMTIER_CHUNK_BITS;
/// Abstract distance of local DRAM: `4 * 128 + 64` (include/linux/memory-tiers.h). The half-chunk
/// offset lets a slightly faster device share the DRAM tier.
pub const MEMTIER_ADISTANCE_DRAM: u32 = 4 * MEMTIER_CHUNK_SIZE + (MEMTIER_CHUNK_SIZE >> 1);
/// Abstract distance dax/kmem gives a device no adist algorithm could place:
/// `MEMTIER_ADISTANCE_DRAM * 5` = 2880, i.e. `memory_tier22` (drivers/dax/kmem.c).
pub const MEMTIER_DEFAULT_DAX_ADISTANCE: u32 = MEMTIER_ADISTANCE_DRAM * 5;

/// HMAT-style performance of a memory node as seen from its nearest initiator.
///
/// These are the values Linux shows under
/// `/sys/devices/system/node/nodeN/access1/initiators/{read,write}_{latency,bandwidth}` (the
/// `ACCESS_COORDINATE_CPU` class that `hmat_calculate_adistance()` feeds to the tier code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePerf {
    /// Read latency in nanoseconds.
    pub read_latency_ns: u32,
    /// Write latency in nanoseconds.
    pub write_latency_ns: u32,
    /// Read bandwidth in MB/s.
    pub read_bandwidth_mbps: u32,
    /// Write bandwidth in MB/s.
    pub write_bandwidth_mbps: u32,
}

impl NodePerf {
    fn latency_sum(self) -> u64 {
        u64::from(self.read_latency_ns) + u64::from(self.write_latency_ns)
    }

    fn bandwidth_sum(self) -> u64 {
        u64::from(self.read_bandwidth_mbps) + u64::from(self.write_bandwidth_mbps)
    }

    /// Whether the kernel accepts these numbers at all: `mt_set_default_dram_perf()` and
    /// `mt_perf_to_adistance()` both return `-EINVAL` for a zero latency sum or a zero bandwidth
    /// sum (mm/memory-tiers.c).
    fn is_usable(self) -> bool {
        self.latency_sum() != 0 && self.bandwidth_sum() != 0
    }

    /// Whether every field is within 10 % of `reference`, the test `mt_set_default_dram_perf()`
    /// applies to every DRAM node after the first (`abs(p - ref) * 10 > ref` is a mismatch).
    fn within_ten_percent_of(self, reference: NodePerf) -> bool {
        fn close(value: u32, reference: u32) -> bool {
            u64::from(value.abs_diff(reference)) * 10 <= u64::from(reference)
        }
        close(self.read_latency_ns, reference.read_latency_ns)
            && close(self.write_latency_ns, reference.write_latency_ns)
            && close(self.read_bandwidth_mbps, reference.read_bandwidth_mbps)
            && close(self.write_bandwidth_mbps, reference.write_bandwidth_mbps)
    }
}

/// The kernel's `mt_perf_to_adistance()` (mm/memory-tiers.c): the adist of a node with
/// performance `perf`, given the DRAM reference `dram`.
///
/// ```text
/// adist = 576 * (rlat + wlat) / (dram_rlat + dram_wlat) * (dram_rbw + dram_wbw) / (rbw + wbw)
/// ```
///
/// evaluated left to right in integer arithmetic, exactly as the kernel does, so the truncation
/// after the first division is reproduced (it can move a node across a tier boundary).
///
/// Returns `None` where the kernel returns `-EINVAL`: a zero latency or bandwidth sum in either
/// argument (the kernel checks `dram` when it is registered as the reference).
#[must_use]
pub fn perf_to_adistance(perf: NodePerf, dram: NodePerf) -> Option<u32> {
    if !perf.is_usable() || !dram.is_usable() {
        return None;
    }
    // u128: 576 * 2^33 * 2^33 does not fit in u64. The kernel computes in `long` after the
    // `unsigned int` sums, which is the same value for any realistic firmware numbers.
    let adist = u128::from(MEMTIER_ADISTANCE_DRAM) * u128::from(perf.latency_sum())
        / u128::from(dram.latency_sum())
        * u128::from(dram.bandwidth_sum())
        / u128::from(perf.bandwidth_sum());
    Some(u32::try_from(adist).unwrap_or(u32::MAX))
}

/// One memory node as described to [`Topology::new`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSpec {
    /// The node id.
    pub id: NodeId,
    /// Whether the node has CPUs (`/sys/devices/system/node/has_cpu`).
    pub has_cpus: bool,
    /// Memory on the node.
    pub capacity: Bytes,
    /// HMAT performance from the nearest initiator, if firmware reported it.
    #[serde(default)]
    pub perf: Option<NodePerf>,
    /// Explicit abstract distance (overrides perf and distance).
    #[serde(default)]
    pub adistance: Option<u32>,
}

/// Why a topology description was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TopologyError {
    /// The description has no nodes.
    #[error("the topology has no nodes")]
    NoNodes,
    /// A node id appears more than once.
    #[error("{node} is described more than once")]
    DuplicateNode {
        /// The repeated node.
        node: NodeId,
    },
    /// A node id does not fit in a [`NodeMask`].
    #[error("{node} is out of range: node ids must be below {MAX_NODES}")]
    NodeOutOfRange {
        /// The offending node.
        node: NodeId,
    },
    /// A node has no memory, so it cannot be a tier member or a migration target.
    #[error("{node} has zero capacity")]
    ZeroCapacity {
        /// The offending node.
        node: NodeId,
    },
    /// The distance matrix does not have one row per node.
    #[error("the distance matrix has {rows} rows but there are {nodes} nodes")]
    DistanceRows {
        /// Rows in the matrix.
        rows: usize,
        /// Nodes described.
        nodes: usize,
    },
    /// A row of the distance matrix does not have one entry per node.
    #[error("the distance row of {node} has {len} entries but there are {nodes} nodes")]
    DistanceRow {
        /// The node whose row is malformed.
        node: NodeId,
        /// Entries in that row.
        len: usize,
        /// Nodes described.
        nodes: usize,
    },
    /// A node's distance to itself is zero; SLIT local distances are 10, and the distance
    /// heuristic divides by it.
    #[error("{node} has a local distance of 0; a node's distance to itself must be positive")]
    ZeroLocalDistance {
        /// The offending node.
        node: NodeId,
    },
    /// No node has CPUs, so no tier can be the top tier.
    #[error("no node has CPUs, so there is no top tier to promote into")]
    NoCpuNode,
}

/// One memory tier as in /sys/devices/virtual/memory_tiering/memory_tierN.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Tier {
    /// `N` in `memory_tierN`: `adist >> MEMTIER_CHUNK_BITS`. Smaller is faster.
    pub id: u32,
    /// The nodes in the tier (sysfs `nodelist`).
    pub nodes: NodeMask,
    /// Whether the tier is at or above the top tier (`node_is_toptier()`).
    pub toptier: bool,
}

/// A node of a built [`Topology`], with its derived tier placement.
#[derive(Clone, Debug, Serialize)]
pub struct NodeInfo {
    /// The node id.
    pub id: NodeId,
    /// Whether the node has CPUs.
    pub has_cpus: bool,
    /// Memory on the node.
    pub capacity: Bytes,
    /// Abstract distance (see the module docs for how it is chosen).
    pub adistance: u32,
    /// Memory tier id, `adistance >> MEMTIER_CHUNK_BITS`.
    pub tier: u32,
    /// Whether the node is top tier (never a promotion source).
    pub toptier: bool,
}

/// Which rule gave a node its abstract distance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum AdistanceSource {
    /// [`NodeSpec::adistance`] was given.
    Explicit,
    /// The HMAT formula ([`perf_to_adistance`]) against the DRAM reference.
    Hmat,
    /// tierd's SLIT heuristic for a CPU-less node, `576 * d / d_local`.
    SlitDistance,
    /// A node with CPUs and nothing better: [`MEMTIER_ADISTANCE_DRAM`].
    DramDefault,
}

/// The DRAM performance reference for the HMAT formula, and why there is none when there is
/// none.
///
/// The kernel registers the HMAT adist algorithm only if `hmat_set_default_dram_perf()`
/// (drivers/acpi/numa/hmat.c) succeeds: it walks the nodes with CPUs and memory in id order,
/// skips those without HMAT data, and hands each to `mt_set_default_dram_perf()`
/// (mm/memory-tiers.c), which takes the first as the reference and rejects any later one that
/// differs by more than 10 % in any field. Any rejection disables the algorithm for every node,
/// and tierd then falls back to rules 3 and 4 (SLIT heuristic, DRAM default) for nodes without
/// an explicit adist, as the kernel falls back to the next algorithm or its default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum DramPerf {
    /// The reference: the performance of the lowest-id node with CPUs and perf.
    Reference {
        /// The node that supplied the reference.
        node: NodeId,
        /// Its performance.
        perf: NodePerf,
    },
    /// No node with CPUs has perf: the HMAT formula is not used.
    Missing,
    /// A node with CPUs reported a zero latency or bandwidth sum (`-EINVAL` in
    /// `mt_set_default_dram_perf()`): the HMAT formula is not used.
    Invalid {
        /// The node with unusable numbers.
        node: NodeId,
    },
    /// Two nodes with CPUs differ by more than 10 %: the HMAT formula is not used.
    Mismatch {
        /// The node that supplied the reference.
        reference: NodeId,
        /// The first node that disagreed with it.
        node: NodeId,
    },
}

impl DramPerf {
    /// Applies `hmat_set_default_dram_perf()`'s walk to `specs` (sorted by id).
    fn from_specs(specs: &[&NodeSpec]) -> Self {
        let mut reference: Option<(NodeId, NodePerf)> = None;
        for spec in specs.iter().filter(|s| s.has_cpus) {
            let Some(perf) = spec.perf else { continue };
            if !perf.is_usable() {
                return DramPerf::Invalid { node: spec.id };
            }
            match reference {
                None => reference = Some((spec.id, perf)),
                Some((ref_node, ref_perf)) => {
                    if !perf.within_ten_percent_of(ref_perf) {
                        return DramPerf::Mismatch {
                            reference: ref_node,
                            node: spec.id,
                        };
                    }
                }
            }
        }
        match reference {
            Some((node, perf)) => DramPerf::Reference { node, perf },
            None => DramPerf::Missing,
        }
    }

    fn reference(self) -> Option<NodePerf> {
        match self {
            DramPerf::Reference { perf, .. } => Some(perf),
            _ => None,
        }
    }
}

/// The machine's memory nodes, their tiers, distances, and demotion/promotion targets.
///
/// Built once from a description ([`Topology::new`]) and read-only afterwards; every query is a
/// lookup into tables computed at construction.
#[derive(Clone, Debug)]
pub struct Topology {
    /// Nodes sorted by id.
    nodes: Vec<NodeInfo>,
    /// `index[id]` = position of node `id` in `nodes`.
    index: [Option<usize>; MAX_NODES],
    /// `dist[i][j]`: SLIT distance between `nodes[i]` and `nodes[j]`.
    dist: Vec<Vec<u32>>,
    /// Non-empty tiers, fastest first.
    tiers: Vec<Tier>,
    /// Per node position: preferred demotion targets.
    demotion: Vec<NodeMask>,
    /// Per node position: all nodes of all lower tiers.
    lower: Vec<NodeMask>,
    /// Per node position: top-tier nodes by distance (empty for top-tier nodes).
    promotion: Vec<Vec<NodeId>>,
    /// Per node position: which rule chose the adist.
    sources: Vec<AdistanceSource>,
    dram_perf: DramPerf,
    top_tier_adistance: u32,
    toptier_mask: NodeMask,
    slow_mask: NodeMask,
    default_target: NodeId,
}

impl Topology {
    /// Builds the topology from its nodes and SLIT distance matrix.
    ///
    /// `distance[i][j]` is the SLIT distance between `nodes[i]` and `nodes[j]` (order of `nodes` as
    /// given).
    ///
    /// # Errors
    ///
    /// A [`TopologyError`] naming the first problem found: no nodes, a node id out of range or
    /// repeated, a node without memory, a distance matrix that is not `n x n`, a zero local
    /// distance, or no node with CPUs.
    pub fn new(nodes: Vec<NodeSpec>, distance: Vec<Vec<u32>>) -> Result<Self, TopologyError> {
        validate(&nodes, &distance)?;
        let n = nodes.len();

        // Work in id order from here on: the kernel walks nodes in id order
        // (for_each_node_mask), and `nodes()` promises that order.
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| nodes[i].id);
        let specs: Vec<&NodeSpec> = order.iter().map(|&i| &nodes[i]).collect();
        let dist: Vec<Vec<u32>> = order
            .iter()
            .map(|&i| order.iter().map(|&j| distance[i][j]).collect())
            .collect();
        let mut index = [None; MAX_NODES];
        for (pos, spec) in specs.iter().enumerate() {
            index[spec.id.index()] = Some(pos);
        }

        let dram_perf = DramPerf::from_specs(&specs);
        let (adists, sources): (Vec<u32>, Vec<AdistanceSource>) = specs
            .iter()
            .enumerate()
            .map(|(pos, spec)| adistance_of(spec, pos, &specs, &dist, dram_perf.reference()))
            .unzip();
        let tier_of = |adist: u32| adist >> MEMTIER_CHUNK_BITS;

        // Tier membership, fastest (smallest id) first, only non-empty tiers exist, as in the
        // kernel's sorted `memory_tiers` list (find_create_memory_tier(), mm/memory-tiers.c).
        let mut by_tier: BTreeMap<u32, NodeMask> = BTreeMap::new();
        for (spec, &adist) in specs.iter().zip(&adists) {
            by_tier.entry(tier_of(adist)).or_default().insert(spec.id);
        }

        // establish_demotion_targets(): walking tiers from the slowest upward, the first tier
        // with a CPU node ends the top tier. That is the largest tier id among CPU nodes. The
        // fold starts at 0, the kernel's initial `top_tier_adistance`, though validation already
        // guarantees a CPU node.
        let top_tier = specs
            .iter()
            .zip(&adists)
            .filter(|(spec, _)| spec.has_cpus)
            .map(|(_, &adist)| tier_of(adist))
            .fold(0, u32::max);
        // `top_tier << 7` cannot overflow: top_tier is some adist >> 7.
        let top_tier_adistance = (top_tier << MEMTIER_CHUNK_BITS) + (MEMTIER_CHUNK_SIZE - 1);

        let tiers: Vec<Tier> = by_tier
            .into_iter()
            .map(|(id, nodes)| Tier {
                id,
                nodes,
                toptier: id <= top_tier,
            })
            .collect();

        let infos: Vec<NodeInfo> = specs
            .iter()
            .zip(&adists)
            .map(|(spec, &adist)| NodeInfo {
                id: spec.id,
                has_cpus: spec.has_cpus,
                capacity: spec.capacity,
                adistance: adist,
                tier: tier_of(adist),
                // node_is_toptier(): memtier->adistance_start <= top_tier_adistance, which for a
                // node in that memtier is the same as adist <= top_tier_adistance.
                toptier: adist <= top_tier_adistance,
            })
            .collect();
        let toptier_mask = NodeMask::from_nodes(infos.iter().filter(|i| i.toptier).map(|i| i.id));
        let slow_mask = NodeMask::from_nodes(infos.iter().filter(|i| !i.toptier).map(|i| i.id));

        let (demotion, lower) = demotion_tables(&tiers, &index, &dist, n);

        let promotion: Vec<Vec<NodeId>> = infos
            .iter()
            .enumerate()
            .map(|(pos, info)| {
                if info.toptier {
                    return Vec::new();
                }
                let mut targets: Vec<(u32, NodeId)> = infos
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| t.toptier)
                    .map(|(tpos, t)| (dist[pos][tpos], t.id))
                    .collect();
                targets.sort_unstable();
                targets.into_iter().map(|(_, id)| id).collect()
            })
            .collect();

        // pghot's `sysctl_pghot_target_nid` defaults to PGHOT_DEFAULT_NODE = 0
        // (include/linux/pghot.h) and its sysctl handler only accepts a top-tier node
        // (mm/pghot.c). When node 0 is not a valid target, tierd takes the lowest top-tier id.
        let default_target = if toptier_mask.contains(NodeId(0)) {
            NodeId(0)
        } else {
            // The top tier is never empty (every CPU node is in it and validation requires one),
            // so the fallback to the lowest node is unreachable; it only avoids an unwrap.
            toptier_mask.iter().next().unwrap_or(infos[0].id)
        };

        Ok(Topology {
            nodes: infos,
            index,
            dist,
            tiers,
            demotion,
            lower,
            promotion,
            sources,
            dram_perf,
            top_tier_adistance,
            toptier_mask,
            slow_mask,
            default_target,
        })
    }

    fn pos(&self, id: NodeId) -> Option<usize> {
        self.index.get(id.index()).copied().flatten()
    }

    /// A description that [`Topology::new`] turns back into this topology: each node with its
    /// derived abstract distance made explicit (so the tiers come out the same whatever rule
    /// chose them), and the distance matrix in node order. A recorded run stores it so that a
    /// replay builds the engine on the machine it was recorded on.
    #[must_use]
    pub fn describe(&self) -> (Vec<NodeSpec>, Vec<Vec<u32>>) {
        let specs = self
            .nodes
            .iter()
            .map(|n| NodeSpec {
                id: n.id,
                has_cpus: n.has_cpus,
                capacity: n.capacity,
                perf: None,
                adistance: Some(n.adistance),
            })
            .collect();
        (specs, self.dist.clone())
    }

    /// All nodes, sorted by id.
    #[must_use]
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }

    /// The node `id`, if the topology has it.
    #[must_use]
    pub fn node(&self, id: NodeId) -> Option<&NodeInfo> {
        self.pos(id).map(|p| &self.nodes[p])
    }

    /// The non-empty memory tiers, fastest first.
    #[must_use]
    pub fn tiers(&self) -> &[Tier] {
        &self.tiers
    }

    /// Whether `id` is a top-tier node (`node_is_toptier()`). Unknown nodes are not.
    #[must_use]
    pub fn is_toptier(&self, id: NodeId) -> bool {
        self.toptier_mask.contains(id)
    }

    /// All top-tier nodes.
    #[must_use]
    pub fn toptier_mask(&self) -> NodeMask {
        self.toptier_mask
    }

    /// All nodes not in the top tier: the nodes pages are promoted from.
    #[must_use]
    pub fn slow_mask(&self) -> NodeMask {
        self.slow_mask
    }

    /// The largest adist that is still top tier: the end of the slowest tier holding a node with
    /// CPUs (`top_tier_adistance` in mm/memory-tiers.c).
    #[must_use]
    pub fn top_tier_adistance(&self) -> u32 {
        self.top_tier_adistance
    }

    /// The SLIT distance from `a` to `b`, if both nodes exist.
    #[must_use]
    pub fn distance(&self, a: NodeId, b: NodeId) -> Option<u32> {
        Some(self.dist[self.pos(a)?][self.pos(b)?])
    }

    /// Memory on node `id`; zero for an unknown node.
    #[must_use]
    pub fn capacity(&self, id: NodeId) -> Bytes {
        self.node(id).map_or(Bytes(0), |n| n.capacity)
    }

    /// Memory on all nodes.
    #[must_use]
    pub fn total_capacity(&self) -> Bytes {
        Bytes(
            self.nodes
                .iter()
                .fold(0u64, |sum, n| sum.saturating_add(n.capacity.0)),
        )
    }

    /// Memory on top-tier nodes.
    #[must_use]
    pub fn toptier_capacity(&self) -> Bytes {
        Bytes(
            self.nodes
                .iter()
                .filter(|n| n.toptier)
                .fold(0u64, |sum, n| sum.saturating_add(n.capacity.0)),
        )
    }

    /// Which rule chose the adist of node `id`, if the node exists.
    #[must_use]
    pub fn adistance_source(&self, id: NodeId) -> Option<AdistanceSource> {
        self.pos(id).map(|p| self.sources[p])
    }

    /// The DRAM reference used by the HMAT formula, or why there was none.
    #[must_use]
    pub fn dram_perf(&self) -> DramPerf {
        self.dram_perf
    }

    /// Preferred demotion targets (kernel `node_demotion[n].preferred`): nodes of the next lower
    /// non-empty tier at minimum distance from `id`. Empty for the slowest tier.
    #[must_use]
    pub fn demotion_targets(&self, id: NodeId) -> NodeMask {
        self.pos(id).map_or(NodeMask::EMPTY, |p| self.demotion[p])
    }

    /// All nodes of all lower tiers (kernel `lower_tier_mask`).
    #[must_use]
    pub fn lower_tier_mask(&self, id: NodeId) -> NodeMask {
        self.pos(id).map_or(NodeMask::EMPTY, |p| self.lower[p])
    }

    /// For a slow node: the top-tier nodes ordered by distance from it (ties by id). Empty for
    /// top-tier nodes.
    #[must_use]
    pub fn promotion_candidates(&self, id: NodeId) -> &[NodeId] {
        self.pos(id).map_or(&[], |p| self.promotion[p].as_slice())
    }

    /// The node in `mask` nearest to `from` (ties by id), if any.
    ///
    /// Nodes of `mask` the topology does not have are ignored; `from` itself qualifies if it is
    /// in `mask`. `None` if `from` is unknown or no node of `mask` exists.
    #[must_use]
    pub fn nearest_in(&self, from: NodeId, mask: NodeMask) -> Option<NodeId> {
        let from = self.pos(from)?;
        mask.iter()
            .filter_map(|id| self.pos(id).map(|p| (self.dist[from][p], id)))
            .min()
            .map(|(_, id)| id)
    }

    /// pghot's default target: node 0 if it is top tier, else the first top-tier node
    /// (mm/pghot.c).
    #[must_use]
    pub fn default_target(&self) -> NodeId {
        self.default_target
    }
}

/// Checks the description; on success the node ids are distinct and below [`MAX_NODES`], the
/// matrix is `n x n` with positive diagonal, and some node has CPUs.
fn validate(nodes: &[NodeSpec], distance: &[Vec<u32>]) -> Result<(), TopologyError> {
    if nodes.is_empty() {
        return Err(TopologyError::NoNodes);
    }
    let mut seen = NodeMask::EMPTY;
    for spec in nodes {
        if spec.id.index() >= MAX_NODES {
            return Err(TopologyError::NodeOutOfRange { node: spec.id });
        }
        if seen.contains(spec.id) {
            return Err(TopologyError::DuplicateNode { node: spec.id });
        }
        seen.insert(spec.id);
        if spec.capacity.0 == 0 {
            return Err(TopologyError::ZeroCapacity { node: spec.id });
        }
    }
    let n = nodes.len();
    if distance.len() != n {
        return Err(TopologyError::DistanceRows {
            rows: distance.len(),
            nodes: n,
        });
    }
    for (spec, row) in nodes.iter().zip(distance) {
        if row.len() != n {
            return Err(TopologyError::DistanceRow {
                node: spec.id,
                len: row.len(),
                nodes: n,
            });
        }
    }
    for (i, spec) in nodes.iter().enumerate() {
        if distance[i][i] == 0 {
            return Err(TopologyError::ZeroLocalDistance { node: spec.id });
        }
    }
    if !nodes.iter().any(|s| s.has_cpus) {
        return Err(TopologyError::NoCpuNode);
    }
    Ok(())
}

/// The adist of `specs[pos]` by the rules in the module docs, and which rule gave it.
fn adistance_of(
    spec: &NodeSpec,
    pos: usize,
    specs: &[&NodeSpec],
    dist: &[Vec<u32>],
    dram: Option<NodePerf>,
) -> (u32, AdistanceSource) {
    if let Some(adist) = spec.adistance {
        return (adist, AdistanceSource::Explicit);
    }
    // Rule 2: the kernel runs the HMAT algorithm for every node, CPU nodes included, so a DRAM
    // node within 10 % of the reference can land a little off 576 (hmat_calculate_adistance(),
    // drivers/acpi/numa/hmat.c). A node whose own numbers are unusable falls through, as the
    // kernel's notifier returns NOTIFY_OK and lets the next rule answer.
    if let Some(adist) = spec
        .perf
        .zip(dram)
        .and_then(|(p, d)| perf_to_adistance(p, d))
    {
        return (adist, AdistanceSource::Hmat);
    }
    if spec.has_cpus {
        // Rule 4: set_node_memory_tier() starts every node at MEMTIER_ADISTANCE_DRAM
        // (mm/memory-tiers.c).
        return (MEMTIER_ADISTANCE_DRAM, AdistanceSource::DramDefault);
    }
    // Rule 3 is tierd's heuristic for machines that report only SLIT distances (no HMAT, or an
    // HMAT the kernel rejected): scale DRAM's adist by how much farther the node is from the
    // nearest CPU node than from itself. Distance 50 with local 10 gives 2880, the kernel's
    // MEMTIER_DEFAULT_DAX_ADISTANCE (drivers/dax/kmem.c), i.e. memory_tier22; a CPU-less node
    // at local distance stays at 576, in the DRAM tier.
    let local = dist[pos][pos];
    // Validation guarantees a CPU node, so `min()` is `Some`; the local distance as fallback
    // would give plain DRAM adist.
    let nearest_cpu = specs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.has_cpus)
        .map(|(cpu, _)| dist[cpu][pos])
        .min()
        .unwrap_or(local);
    // `local` is positive (validated).
    let adist = u64::from(MEMTIER_ADISTANCE_DRAM) * u64::from(nearest_cpu) / u64::from(local);
    (
        u32::try_from(adist).unwrap_or(u32::MAX),
        AdistanceSource::SlitDistance,
    )
}

/// Per node position: the preferred demotion targets and the lower-tier mask, as
/// `establish_demotion_targets()` (mm/memory-tiers.c) builds `node_demotion[].preferred` and
/// `memtier->lower_tier_mask`.
fn demotion_tables(
    tiers: &[Tier],
    index: &[Option<usize>; MAX_NODES],
    dist: &[Vec<u32>],
    n: usize,
) -> (Vec<NodeMask>, Vec<NodeMask>) {
    let mut demotion = vec![NodeMask::EMPTY; n];
    let mut lower = vec![NodeMask::EMPTY; n];
    let pos_of = |id: NodeId| index.get(id.index()).copied().flatten();

    // lower_tier_mask of tier k = union of tiers k+1.. (the kernel removes each tier from
    // N_MEMORY walking fastest to slowest).
    let mut below = vec![NodeMask::EMPTY; tiers.len()];
    let mut acc = NodeMask::EMPTY;
    for (k, tier) in tiers.iter().enumerate().rev() {
        below[k] = acc;
        acc = NodeMask(acc.0 | tier.nodes.0);
    }

    for (k, tier) in tiers.iter().enumerate() {
        // The slowest tier has no demotion target (list_is_last() in the kernel).
        let next = tiers.get(k + 1).map(|t| t.nodes);
        for node in tier.nodes.iter() {
            let Some(p) = pos_of(node) else { continue };
            lower[p] = below[k];
            let Some(next) = next else { continue };
            let candidates: Vec<(u32, NodeId)> = next
                .iter()
                .filter_map(|t| pos_of(t).map(|tp| (dist[p][tp], t)))
                .collect();
            if let Some(best) = candidates.iter().map(|&(d, _)| d).min() {
                demotion[p] = NodeMask::from_nodes(
                    candidates
                        .iter()
                        .filter(|&&(d, _)| d == best)
                        .map(|&(_, t)| t),
                );
            }
        }
    }
    (demotion, lower)
}

/// A two-node DRAM + CXL machine: node 0 with CPUs and `fast` of DRAM, node 1 CPU-less with
/// `slow` of CXL-like memory (2.5x the latency, half the bandwidth, HMAT adist 2880,
/// `memory_tier22`); SLIT distances 10/20. The shape of most single-socket CXL systems, used
/// by `tierd info` and the benchmarks.
///
/// # Errors
///
/// [`TopologyError::ZeroCapacity`] if `fast` or `slow` is zero.
pub fn dram_cxl(fast: Bytes, slow: Bytes) -> Result<Topology, TopologyError> {
    let dram = NodePerf {
        read_latency_ns: 100,
        write_latency_ns: 100,
        read_bandwidth_mbps: 20_000,
        write_bandwidth_mbps: 20_000,
    };
    let cxl = NodePerf {
        read_latency_ns: 250,
        write_latency_ns: 250,
        read_bandwidth_mbps: 10_000,
        write_bandwidth_mbps: 10_000,
    };
    Topology::new(
        vec![
            NodeSpec {
                id: NodeId(0),
                has_cpus: true,
                capacity: fast,
                perf: Some(dram),
                adistance: None,
            },
            NodeSpec {
                id: NodeId(1),
                has_cpus: false,
                capacity: slow,
                perf: Some(cxl),
                adistance: None,
            },
        ],
        vec![vec![10, 20], vec![20, 10]],
    )
}

/// [`dram_cxl`] for tests.
///
/// # Panics
///
/// If `fast` or `slow` is zero.
#[cfg(any(test, feature = "testutils"))]
#[must_use]
pub fn two_tier(fast: Bytes, slow: Bytes) -> Topology {
    dram_cxl(fast, slow).expect("two_tier: capacities must be non-zero")
}

/// Seed scenario C: nodes 0 and 1 with CPUs (DRAM), node 2 CPU-less without HMAT data; SLIT
/// distances 0-1 32, 0-2 50, 1-2 60, local 10. Node 2 gets adist 576 * 50 / 10 = 2880
/// (`memory_tier22`).
///
/// # Panics
///
/// If any capacity is zero.
#[cfg(any(test, feature = "testutils"))]
#[must_use]
pub fn three_node(fast0: Bytes, fast1: Bytes, slow: Bytes) -> Topology {
    Topology::new(
        vec![
            NodeSpec {
                id: NodeId(0),
                has_cpus: true,
                capacity: fast0,
                perf: None,
                adistance: None,
            },
            NodeSpec {
                id: NodeId(1),
                has_cpus: true,
                capacity: fast1,
                perf: None,
                adistance: None,
            },
            NodeSpec {
                id: NodeId(2),
                has_cpus: false,
                capacity: slow,
                perf: None,
                adistance: None,
            },
        ],
        vec![vec![10, 32, 50], vec![32, 10, 60], vec![50, 60, 10]],
    )
    .expect("three_node: capacities must be non-zero")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const GIB: Bytes = Bytes::gib(1);

    /// What a recorded trace stores rebuilds the same machine: tiers, targets and candidates.
    #[test]
    fn describe_rebuilds_the_same_tiers_and_targets() {
        for t in [
            two_tier(Bytes::gib(4), Bytes::gib(16)),
            three_node(GIB, GIB, Bytes::gib(8)),
        ] {
            let (specs, dist) = t.describe();
            let back = Topology::new(specs, dist).unwrap();
            assert_eq!(back.tiers(), t.tiers());
            for n in t.nodes() {
                assert_eq!(back.demotion_targets(n.id), t.demotion_targets(n.id));
                assert_eq!(
                    back.promotion_candidates(n.id),
                    t.promotion_candidates(n.id)
                );
                assert_eq!(back.node(n.id).map(|b| b.tier), Some(n.tier));
            }
            assert_eq!(back.default_target(), t.default_target());
        }
    }

    fn spec(id: u16, has_cpus: bool) -> NodeSpec {
        NodeSpec {
            id: NodeId(id),
            has_cpus,
            capacity: GIB,
            perf: None,
            adistance: None,
        }
    }

    fn perf(lat: (u32, u32), bw: (u32, u32)) -> NodePerf {
        NodePerf {
            read_latency_ns: lat.0,
            write_latency_ns: lat.1,
            read_bandwidth_mbps: bw.0,
            write_bandwidth_mbps: bw.1,
        }
    }

    fn mask(ids: &[u16]) -> NodeMask {
        NodeMask::from_nodes(ids.iter().copied().map(NodeId))
    }

    #[test]
    fn constants_match_the_kernel() {
        assert_eq!(MEMTIER_CHUNK_SIZE, 128);
        assert_eq!(MEMTIER_ADISTANCE_DRAM, 576);
        assert_eq!(MEMTIER_DEFAULT_DAX_ADISTANCE, 2880);
        assert_eq!(MEMTIER_DEFAULT_DAX_ADISTANCE >> MEMTIER_CHUNK_BITS, 22);
    }

    #[test]
    fn dram_is_memory_tier4() {
        let t = Topology::new(vec![spec(0, true)], vec![vec![10]]).unwrap();
        let n = t.node(NodeId(0)).unwrap();
        assert_eq!(n.adistance, 576);
        assert_eq!(n.tier, 4);
        assert!(n.toptier);
        assert_eq!(
            t.adistance_source(NodeId(0)),
            Some(AdistanceSource::DramDefault)
        );
        assert_eq!(
            t.tiers(),
            &[Tier {
                id: 4,
                nodes: mask(&[0]),
                toptier: true
            }]
        );
        assert_eq!(t.top_tier_adistance(), 4 * 128 + 127);
        assert_eq!(t.slow_mask(), NodeMask::EMPTY);
        assert_eq!(t.demotion_targets(NodeId(0)), NodeMask::EMPTY);
        assert_eq!(t.promotion_candidates(NodeId(0)), &[] as &[NodeId]);
    }

    #[test]
    fn hmat_formula_truncates_like_the_kernel() {
        // DRAM reference: latency 80 + 90 = 170, bandwidth 30000 + 25000 = 55000.
        // Node: latency 236 + 260 = 496, bandwidth 20000 + 18000 = 38000.
        // Kernel order: 576 * 496 = 285696; / 170 = 1680 (remainder 96 dropped);
        // * 55000 = 92_400_000; / 38000 = 2431 (2431.57 truncated) -> memory_tier18.
        // The exact ratio 576 * 496 * 55000 / (170 * 38000) = 2432.39 would give tier 19, so a
        // reordered or floating-point formula fails here.
        let dram = perf((80, 90), (30_000, 25_000));
        let node = perf((236, 260), (20_000, 18_000));
        assert_eq!(perf_to_adistance(node, dram), Some(2431));

        let mut n0 = spec(0, true);
        n0.perf = Some(dram);
        let mut n1 = spec(1, false);
        n1.perf = Some(node);
        let t = Topology::new(vec![n0, n1], vec![vec![10, 20], vec![20, 10]]).unwrap();
        assert_eq!(
            t.dram_perf(),
            DramPerf::Reference {
                node: NodeId(0),
                perf: dram
            }
        );
        let info = t.node(NodeId(1)).unwrap();
        assert_eq!((info.adistance, info.tier), (2431, 18));
        assert_eq!(t.adistance_source(NodeId(1)), Some(AdistanceSource::Hmat));
        // The reference node measured against itself is exactly DRAM.
        assert_eq!(t.node(NodeId(0)).unwrap().adistance, 576);
    }

    #[test]
    fn hmat_formula_matches_a_real_kernel() {
        // docs/lab.md, first guest runs, 1: Linux 6.12 guest with QEMU HMAT: node0 100/100 ns, 20480/20480 MB/s;
        // node1 300/300 ns, 5120/5120 MB/s. sysfs showed memory_tier4 = 0, memory_tier54 = 1.
        // 576 * 600 / 200 = 1728; * 40960 / 10240 = 6912; 6912 >> 7 = 54.
        let dram = perf((100, 100), (20_480, 20_480));
        let node = perf((300, 300), (5_120, 5_120));
        assert_eq!(perf_to_adistance(node, dram), Some(6912));
        assert_eq!(perf_to_adistance(node, perf((0, 0), (1, 1))), None);
        assert_eq!(perf_to_adistance(perf((1, 1), (0, 0)), dram), None);
    }

    #[test]
    fn cxl_node_with_higher_latency_is_a_lower_tier() {
        let t = two_tier(Bytes::gib(4), Bytes::gib(8));
        // 576 * 500 / 200 = 1440; * 40000 / 20000 = 2880.
        let cxl = t.node(NodeId(1)).unwrap();
        assert_eq!((cxl.adistance, cxl.tier), (2880, 22));
        assert!(!cxl.toptier);
        assert!(!t.is_toptier(NodeId(1)));
        assert!(t.is_toptier(NodeId(0)));
        assert_eq!(
            t.tiers(),
            &[
                Tier {
                    id: 4,
                    nodes: mask(&[0]),
                    toptier: true
                },
                Tier {
                    id: 22,
                    nodes: mask(&[1]),
                    toptier: false
                },
            ]
        );
        assert_eq!(t.toptier_mask(), mask(&[0]));
        assert_eq!(t.slow_mask(), mask(&[1]));
        assert_eq!(t.capacity(NodeId(1)), Bytes::gib(8));
        assert_eq!(t.capacity(NodeId(9)), Bytes(0));
        assert_eq!(t.total_capacity(), Bytes::gib(12));
        assert_eq!(t.toptier_capacity(), Bytes::gib(4));
        assert_eq!(t.demotion_targets(NodeId(0)), mask(&[1]));
        assert_eq!(t.promotion_candidates(NodeId(1)), &[NodeId(0)]);
    }

    #[test]
    fn cpuless_dram_speed_node_stays_toptier() {
        // Kernel example 2 in mm/memory-tiers.c: node 2 is a memory-only DRAM node.
        let t = Topology::new(
            vec![spec(0, true), spec(1, true), spec(2, false)],
            vec![vec![10, 20, 30], vec![20, 10, 30], vec![30, 30, 10]],
        )
        .unwrap();
        // Without HMAT the heuristic puts it at 576 * 30 / 10 = 1728 (tier 13); give it
        // DRAM-class numbers through HMAT and through an explicit adist instead.
        assert_eq!(t.node(NodeId(2)).unwrap().tier, 13);

        let dram = perf((100, 100), (20_000, 20_000));
        let mut nodes = vec![spec(0, true), spec(1, true), spec(2, false)];
        for n in &mut nodes {
            n.perf = Some(dram);
        }
        let t = Topology::new(
            nodes,
            vec![vec![10, 20, 30], vec![20, 10, 30], vec![30, 30, 10]],
        )
        .unwrap();
        let n2 = t.node(NodeId(2)).unwrap();
        assert_eq!((n2.adistance, n2.tier, n2.toptier), (576, 4, true));
        assert_eq!(t.tiers().len(), 1);
        assert_eq!(t.slow_mask(), NodeMask::EMPTY);
        for id in 0..3 {
            assert_eq!(t.demotion_targets(NodeId(id)), NodeMask::EMPTY);
        }

        // A CPU-less node slightly faster than DRAM, in a faster tier, is top tier too.
        let mut hbm = spec(2, false);
        hbm.adistance = Some(300);
        let t = Topology::new(vec![spec(0, true), hbm], vec![vec![10, 20], vec![20, 10]]).unwrap();
        assert!(t.is_toptier(NodeId(2)));
        assert_eq!(t.demotion_targets(NodeId(2)), mask(&[0]));
        assert_eq!(
            t.adistance_source(NodeId(2)),
            Some(AdistanceSource::Explicit)
        );
    }

    #[test]
    fn slit_heuristic_places_distance_50_in_tier22() {
        let t = three_node(GIB, GIB, GIB);
        let n2 = t.node(NodeId(2)).unwrap();
        // d = min(50 from node0, 60 from node1) = 50; 576 * 50 / 10 = 2880.
        assert_eq!(
            (n2.adistance, n2.tier, n2.toptier),
            (MEMTIER_DEFAULT_DAX_ADISTANCE, 22, false)
        );
        assert_eq!(
            t.adistance_source(NodeId(2)),
            Some(AdistanceSource::SlitDistance)
        );
        assert_eq!(t.dram_perf(), DramPerf::Missing);
        // Nonstandard local distance scales the same way: 576 * 100 / 20 = 2880.
        let t = Topology::new(
            vec![spec(0, true), spec(1, false)],
            vec![vec![10, 100], vec![100, 20]],
        )
        .unwrap();
        assert_eq!(t.node(NodeId(1)).unwrap().adistance, 2880);
    }

    #[test]
    fn explicit_adistance_overrides_perf_and_distance() {
        let mut n1 = spec(1, false);
        n1.perf = Some(perf((250, 250), (10_000, 10_000)));
        n1.adistance = Some(1000);
        let mut n0 = spec(0, true);
        n0.perf = Some(perf((100, 100), (20_000, 20_000)));
        let t = Topology::new(vec![n0, n1], vec![vec![10, 50], vec![50, 10]]).unwrap();
        assert_eq!(t.node(NodeId(1)).unwrap().adistance, 1000);
        assert_eq!(t.node(NodeId(1)).unwrap().tier, 7);
    }

    #[test]
    fn dram_reference_mismatch_disables_hmat() {
        let dram = perf((100, 100), (20_000, 20_000));
        let cxl = perf((250, 250), (10_000, 10_000));
        let build = |other: NodePerf| {
            let mut n0 = spec(0, true);
            n0.perf = Some(dram);
            let mut n1 = spec(1, true);
            n1.perf = Some(other);
            let mut n2 = spec(2, false);
            n2.perf = Some(cxl);
            Topology::new(
                vec![n2, n1, n0],
                vec![vec![10, 40, 40], vec![40, 10, 20], vec![40, 20, 10]],
            )
            .unwrap()
        };
        // Within 10 %: 110 vs 100 is |10| * 10 = 100 <= 100, accepted. Node 1 is then placed by
        // the formula too: 576 * 210 / 200 = 604; * 40000 / 40000 = 604 (tier 4).
        let t = build(perf((110, 100), (20_000, 20_000)));
        assert_eq!(
            t.dram_perf(),
            DramPerf::Reference {
                node: NodeId(0),
                perf: dram
            }
        );
        assert_eq!(t.node(NodeId(1)).unwrap().adistance, 604);
        assert_eq!(t.node(NodeId(2)).unwrap().adistance, 2880);
        assert_eq!(t.adistance_source(NodeId(2)), Some(AdistanceSource::Hmat));

        // 111 vs 100 is a mismatch: no HMAT for anyone, node 2 falls back to the SLIT
        // heuristic (576 * 40 / 10 = 2304), node 1 to DRAM.
        let t = build(perf((111, 100), (20_000, 20_000)));
        assert_eq!(
            t.dram_perf(),
            DramPerf::Mismatch {
                reference: NodeId(0),
                node: NodeId(1)
            }
        );
        assert_eq!(t.node(NodeId(1)).unwrap().adistance, 576);
        assert_eq!(t.node(NodeId(2)).unwrap().adistance, 2304);
        assert_eq!(
            t.adistance_source(NodeId(2)),
            Some(AdistanceSource::SlitDistance)
        );

        // A zero bandwidth on a CPU node also disables it.
        let t = build(perf((100, 100), (0, 0)));
        assert_eq!(t.dram_perf(), DramPerf::Invalid { node: NodeId(1) });
        assert_eq!(t.node(NodeId(2)).unwrap().adistance, 2304);
    }

    #[test]
    fn three_node_demotion_targets() {
        let t = three_node(GIB, GIB, GIB);
        assert_eq!(t.demotion_targets(NodeId(0)), mask(&[2]));
        assert_eq!(t.demotion_targets(NodeId(1)), mask(&[2]));
        assert_eq!(t.demotion_targets(NodeId(2)), NodeMask::EMPTY);
        assert_eq!(t.lower_tier_mask(NodeId(0)), mask(&[2]));
        assert_eq!(t.lower_tier_mask(NodeId(2)), NodeMask::EMPTY);
        assert_eq!(t.demotion_targets(NodeId(7)), NodeMask::EMPTY);
        assert_eq!(t.toptier_mask(), mask(&[0, 1]));
        assert_eq!(t.distance(NodeId(1), NodeId(2)), Some(60));
        assert_eq!(t.distance(NodeId(1), NodeId(3)), None);
    }

    #[test]
    fn preferred_demotion_picks_the_nearest_slow_node() {
        // Kernel example 1 in mm/memory-tiers.c, with the PMEM nodes placed by explicit adist.
        let mut n2 = spec(2, false);
        n2.adistance = Some(2880);
        let mut n3 = spec(3, false);
        n3.adistance = Some(2900);
        let t = Topology::new(
            vec![spec(0, true), spec(1, true), n2, n3],
            vec![
                vec![10, 20, 30, 40],
                vec![20, 10, 40, 30],
                vec![30, 40, 10, 40],
                vec![40, 30, 40, 10],
            ],
        )
        .unwrap();
        assert_eq!(t.demotion_targets(NodeId(0)), mask(&[2]));
        assert_eq!(t.demotion_targets(NodeId(1)), mask(&[3]));
        assert_eq!(t.lower_tier_mask(NodeId(0)), mask(&[2, 3]));
        assert_eq!(t.demotion_targets(NodeId(2)), NodeMask::EMPTY);
        assert_eq!(t.demotion_targets(NodeId(3)), NodeMask::EMPTY);

        // Equal distances: all of them are preferred.
        let t = Topology::new(
            vec![spec(0, true), spec(1, false), spec(2, false)],
            vec![vec![10, 30, 30], vec![30, 10, 40], vec![30, 40, 10]],
        )
        .unwrap();
        assert_eq!(t.demotion_targets(NodeId(0)), mask(&[1, 2]));
    }

    #[test]
    fn demotion_goes_only_to_the_next_tier() {
        // Kernel example 3 in mm/memory-tiers.c: HBM (node 1) -> DRAM (node 0) -> PMEM (node 2).
        let mut hbm = spec(1, false);
        hbm.adistance = Some(300);
        let mut pmem = spec(2, false);
        pmem.adistance = Some(2880);
        let t = Topology::new(
            vec![spec(0, true), hbm, pmem],
            vec![vec![10, 20, 30], vec![20, 10, 40], vec![30, 40, 10]],
        )
        .unwrap();
        assert_eq!(t.demotion_targets(NodeId(1)), mask(&[0]));
        assert_eq!(t.lower_tier_mask(NodeId(1)), mask(&[0, 2]));
        assert_eq!(t.demotion_targets(NodeId(0)), mask(&[2]));
        assert_eq!(t.demotion_targets(NodeId(2)), NodeMask::EMPTY);
        assert_eq!(t.toptier_mask(), mask(&[0, 1]));

        // Even when a node two tiers down is nearer, the preferred target is in the next tier.
        let mut hbm = spec(1, false);
        hbm.adistance = Some(300);
        let mut pmem = spec(2, false);
        pmem.adistance = Some(2880);
        let t = Topology::new(
            vec![spec(0, true), hbm, pmem],
            vec![vec![10, 40, 30], vec![40, 10, 20], vec![30, 20, 10]],
        )
        .unwrap();
        assert_eq!(t.demotion_targets(NodeId(1)), mask(&[0]));
        assert_eq!(t.lower_tier_mask(NodeId(1)), mask(&[0, 2]));
    }

    #[test]
    fn promotion_candidates_are_ordered_by_distance() {
        let t = three_node(GIB, GIB, GIB);
        assert_eq!(t.promotion_candidates(NodeId(2)), &[NodeId(0), NodeId(1)]);
        assert_eq!(t.promotion_candidates(NodeId(0)), &[] as &[NodeId]);
        assert_eq!(t.promotion_candidates(NodeId(9)), &[] as &[NodeId]);

        // Nearer node 1 comes first; ties break by id.
        let t = Topology::new(
            vec![spec(0, true), spec(1, true), spec(2, true), spec(3, false)],
            vec![
                vec![10, 20, 20, 60],
                vec![20, 10, 20, 40],
                vec![20, 20, 10, 60],
                vec![60, 40, 60, 10],
            ],
        )
        .unwrap();
        assert_eq!(
            t.promotion_candidates(NodeId(3)),
            &[NodeId(1), NodeId(0), NodeId(2)]
        );
    }

    #[test]
    fn nearest_in_mask() {
        let t = three_node(GIB, GIB, GIB);
        assert_eq!(t.nearest_in(NodeId(2), mask(&[0, 1])), Some(NodeId(0)));
        assert_eq!(t.nearest_in(NodeId(1), mask(&[0, 2])), Some(NodeId(0)));
        assert_eq!(t.nearest_in(NodeId(1), mask(&[0, 1, 2])), Some(NodeId(1)));
        assert_eq!(t.nearest_in(NodeId(1), mask(&[2, 5])), Some(NodeId(2)));
        assert_eq!(t.nearest_in(NodeId(1), mask(&[5])), None);
        assert_eq!(t.nearest_in(NodeId(1), NodeMask::EMPTY), None);
        assert_eq!(t.nearest_in(NodeId(5), mask(&[0])), None);

        // Tie at distance 20 from node 2: the lower id wins.
        let t = Topology::new(
            vec![spec(2, true), spec(1, true), spec(0, true)],
            vec![vec![10, 20, 20], vec![20, 10, 20], vec![20, 20, 10]],
        )
        .unwrap();
        assert_eq!(t.nearest_in(NodeId(2), mask(&[0, 1])), Some(NodeId(0)));
    }

    #[test]
    fn default_target_skips_a_slow_node0() {
        let t = three_node(GIB, GIB, GIB);
        assert_eq!(t.default_target(), NodeId(0));

        // Node 0 is the CPU-less slow node; nodes 3 and 1 have CPUs.
        let t = Topology::new(
            vec![spec(3, true), spec(0, false), spec(1, true)],
            vec![vec![10, 50, 20], vec![50, 10, 50], vec![20, 50, 10]],
        )
        .unwrap();
        assert!(!t.is_toptier(NodeId(0)));
        assert_eq!(t.default_target(), NodeId(1));
        // nodes() is sorted by id whatever the input order, and distances follow the nodes.
        let ids: Vec<u16> = t.nodes().iter().map(|n| n.id.0).collect();
        assert_eq!(ids, [0, 1, 3]);
        assert_eq!(t.distance(NodeId(3), NodeId(1)), Some(20));
        assert_eq!(t.distance(NodeId(0), NodeId(3)), Some(50));
    }

    #[test]
    fn every_error_variant() {
        let d2 = || vec![vec![10, 20], vec![20, 10]];
        assert_eq!(
            Topology::new(vec![], vec![]).unwrap_err(),
            TopologyError::NoNodes
        );
        assert_eq!(
            Topology::new(vec![spec(0, true), spec(0, false)], d2()).unwrap_err(),
            TopologyError::DuplicateNode { node: NodeId(0) }
        );
        assert_eq!(
            Topology::new(vec![spec(0, true), spec(64, false)], d2()).unwrap_err(),
            TopologyError::NodeOutOfRange { node: NodeId(64) }
        );
        let mut empty = spec(1, false);
        empty.capacity = Bytes(0);
        assert_eq!(
            Topology::new(vec![spec(0, true), empty], d2()).unwrap_err(),
            TopologyError::ZeroCapacity { node: NodeId(1) }
        );
        assert_eq!(
            Topology::new(vec![spec(0, true), spec(1, false)], vec![vec![10, 20]]).unwrap_err(),
            TopologyError::DistanceRows { rows: 1, nodes: 2 }
        );
        assert_eq!(
            Topology::new(
                vec![spec(0, true), spec(1, false)],
                vec![vec![10, 20], vec![20]]
            )
            .unwrap_err(),
            TopologyError::DistanceRow {
                node: NodeId(1),
                len: 1,
                nodes: 2
            }
        );
        assert_eq!(
            Topology::new(
                vec![spec(0, true), spec(1, false)],
                vec![vec![10, 20], vec![20, 0]]
            )
            .unwrap_err(),
            TopologyError::ZeroLocalDistance { node: NodeId(1) }
        );
        assert_eq!(
            Topology::new(vec![spec(0, false), spec(1, false)], d2()).unwrap_err(),
            TopologyError::NoCpuNode
        );

        // Messages name the nodes involved.
        let msg = TopologyError::DistanceRow {
            node: NodeId(3),
            len: 1,
            nodes: 2,
        }
        .to_string();
        assert_eq!(
            msg,
            "the distance row of node3 has 1 entries but there are 2 nodes"
        );
        assert_eq!(
            TopologyError::NodeOutOfRange { node: NodeId(70) }.to_string(),
            "node70 is out of range: node ids must be below 64"
        );
        assert!(TopologyError::DuplicateNode { node: NodeId(5) }
            .to_string()
            .contains("node5"));
    }

    #[test]
    fn node_spec_deserializes_without_optional_fields() {
        let s: NodeSpec =
            serde_json::from_str(r#"{"id": 2, "has_cpus": false, "capacity": 4096}"#).unwrap();
        assert_eq!(
            s,
            NodeSpec {
                id: NodeId(2),
                has_cpus: false,
                capacity: Bytes(4096),
                perf: None,
                adistance: None
            }
        );
        let json = serde_json::to_value(&three_node(GIB, GIB, GIB).tiers()[1]).unwrap();
        assert_eq!(json["id"], 22);
        assert_eq!(json["toptier"], false);
    }

    /// Random machines: 1..8 nodes with distinct ids anywhere below 64, given in arbitrary order,
    /// random CPUs, capacities, symmetric SLIT distances with local 10, and now and then HMAT
    /// numbers or an explicit adist.
    fn arb_machine() -> impl Strategy<Value = (Vec<NodeSpec>, Vec<Vec<u32>>)> {
        let arb_perf = (0u32..600, 0u32..600, 0u32..40_000, 0u32..40_000)
            .prop_map(|(rl, wl, rb, wb)| perf((rl, wl), (rb, wb)));
        let arb_node = (
            any::<bool>(),
            1u64..(1 << 40),
            proptest::option::weighted(0.3, arb_perf),
            proptest::option::weighted(0.15, 0u32..5000),
        );
        (1usize..8).prop_flat_map(move |n| {
            (
                proptest::sample::subsequence((0u16..64).collect::<Vec<_>>(), n),
                proptest::collection::vec(arb_node.clone(), n),
                proptest::collection::vec(11u32..=255, n * n),
                0..n,
            )
                .prop_map(move |(ids, props, raw, rotate)| {
                    let mut nodes: Vec<NodeSpec> = ids
                        .iter()
                        .zip(props)
                        .map(|(&id, (has_cpus, cap, perf, adistance))| NodeSpec {
                            id: NodeId(id),
                            has_cpus,
                            capacity: Bytes(cap),
                            perf,
                            adistance,
                        })
                        .collect();
                    if !nodes.iter().any(|s| s.has_cpus) {
                        nodes[0].has_cpus = true;
                    }
                    let dist: Vec<Vec<u32>> = (0..n)
                        .map(|i| {
                            (0..n)
                                .map(|j| {
                                    if i == j {
                                        10
                                    } else {
                                        raw[i.min(j) * n + i.max(j)]
                                    }
                                })
                                .collect()
                        })
                        .collect();
                    // Present the nodes (and matrix) in a rotated order.
                    let perm: Vec<usize> = (0..n).map(|k| (k + rotate) % n).collect();
                    let nodes = perm.iter().map(|&i| nodes[i].clone()).collect();
                    let dist = perm
                        .iter()
                        .map(|&i| perm.iter().map(|&j| dist[i][j]).collect())
                        .collect();
                    (nodes, dist)
                })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn random_topologies_keep_the_tier_invariants((specs, dist) in arb_machine()) {
            let t = Topology::new(specs.clone(), dist.clone()).unwrap();
            let all = NodeMask::from_nodes(specs.iter().map(|s| s.id));

            prop_assert!(!t.toptier_mask().is_empty());
            prop_assert_eq!(t.toptier_mask().0 | t.slow_mask().0, all.0);
            prop_assert_eq!(t.toptier_mask().0 & t.slow_mask().0, 0);
            prop_assert!(t.is_toptier(t.default_target()));
            prop_assert!(t.nodes().windows(2).all(|w| w[0].id < w[1].id));
            prop_assert!(t.tiers().windows(2).all(|w| w[0].id < w[1].id));
            prop_assert_eq!(t.tiers().iter().fold(0, |m, tier| m | tier.nodes.0), all.0);

            for (i, s) in specs.iter().enumerate() {
                let info = t.node(s.id).unwrap();
                prop_assert_eq!(info.tier, info.adistance >> MEMTIER_CHUNK_BITS);
                prop_assert_eq!(info.toptier, t.is_toptier(s.id));
                if s.has_cpus {
                    prop_assert!(info.toptier, "{} has CPUs but is not top tier", s.id);
                }
                if let Some(a) = s.adistance {
                    prop_assert_eq!(info.adistance, a);
                }
                for (j, o) in specs.iter().enumerate() {
                    prop_assert_eq!(t.distance(s.id, o.id), Some(dist[i][j]));
                }

                let targets = t.demotion_targets(s.id);
                prop_assert_eq!(targets.0 & !t.lower_tier_mask(s.id).0, 0);
                for target in targets.iter() {
                    let ti = t.node(target).unwrap();
                    prop_assert!(ti.tier > info.tier, "{} -> {} is not downward", s.id, target);
                }
                let slowest = t.tiers().last().map(|tier| tier.id);
                prop_assert_eq!(targets.is_empty(), Some(info.tier) == slowest);

                let promo = t.promotion_candidates(s.id);
                if info.toptier {
                    prop_assert!(promo.is_empty());
                } else {
                    prop_assert_eq!(NodeMask::from_nodes(promo.iter().copied()), t.toptier_mask());
                    prop_assert_eq!(promo.len(), t.toptier_mask().iter().count());
                    let keys: Vec<(u32, NodeId)> =
                        promo.iter().map(|&p| (t.distance(s.id, p).unwrap(), p)).collect();
                    prop_assert!(keys.windows(2).all(|w| w[0] < w[1]));
                    prop_assert_eq!(t.nearest_in(s.id, t.toptier_mask()), promo.first().copied());
                }
            }
        }
    }
}
