//! NUMA topology from sysfs: nodes, their CPUs, memory, distances, HMAT access classes and the
//! kernel's memory tiers, and its conversion into the engine's [`Topology`].
//!
//! Files (all under `<sys_root>/devices/system/node/` unless said otherwise):
//!
//! - `possible`, `online`, `has_cpu`, `has_memory`, `has_normal_memory`: node lists in `%*pbl`
//!   format (drivers/base/node.c `print_nodes_state()`; Documentation/ABI/stable/sysfs-devices-node).
//! - `nodeN/cpulist`: CPU list, same format (`node_read_cpulist()`).
//! - `nodeN/meminfo`: see [`super::meminfo`].
//! - `nodeN/distance`: one line, the SLIT distance to every *online* node in ascending id order,
//!   space separated (`node_read_distance()` walks `for_each_online_node`).
//! - `nodeN/accessC/initiators/{read,write}_{latency,bandwidth}`: HMAT performance of memory node
//!   N from its best initiators in access class C, `%u` in nanoseconds and MB/s; the nodes of
//!   `accessC/initiators/nodeM` and `accessC/targets/nodeM` are symlinks to the initiator and
//!   target nodes (Documentation/admin-guide/mm/numaperf.rst, drivers/base/node.c
//!   `node_set_perf_attrs()` and `register_memory_node_under_compute_node()`). Class 0 is "any
//!   initiator", class 1 "CPU initiators" (`ACCESS_COORDINATE_CPU`), the class the kernel's
//!   tiering uses (drivers/acpi/numa/hmat.c `hmat_calculate_adistance()`).
//! - `<sys_root>/devices/virtual/memory_tiering/memory_tierN/nodelist`: the kernel's memory tiers,
//!   `N = adist >> 7` (Documentation/ABI/testing/sysfs-kernel-mm-memory-tiers, mm/memory-tiers.c).
//! - `<sys_root>/kernel/mm/numa/demotion_enabled`: `true`/`false` (mm/memory-tiers.c
//!   `demotion_enabled_show()`).
//! - `<proc_root>/sys/kernel/numa_balancing`: an int whose bits are `NUMA_BALANCING_NORMAL` (1)
//!   and `NUMA_BALANCING_MEMORY_TIERING` (2) (include/linux/sched/sysctl.h,
//!   Documentation/admin-guide/sysctl/kernel.rst).

use std::io;
use std::path::{Path, PathBuf};

use tierd_engine::topology::{
    NodePerf, NodeSpec, Topology, TopologyError, MEMTIER_ADISTANCE_DRAM, MEMTIER_CHUNK_BITS,
    MEMTIER_CHUNK_SIZE,
};
use tierd_engine::types::{Bytes, NodeId, NodeMask};

use super::meminfo::{read_node_meminfo, Meminfo};
use super::{
    numbered_entries, parse_list, parse_nodelist, read_optional, read_parsed, ParseError, ReadError,
};

/// `<sys_root>/devices/system/node`.
#[must_use]
pub fn node_root(sys_root: &Path) -> PathBuf {
    sys_root.join("devices/system/node")
}

/// `<sys_root>/devices/system/node/node<id>`.
#[must_use]
pub fn node_dir(sys_root: &Path, node: NodeId) -> PathBuf {
    node_root(sys_root).join(format!("node{}", node.0))
}

/// One HMAT access class of a node (`nodeN/accessC`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessClass {
    /// `C` in `accessC`: 0 = any initiator, 1 = CPU initiators.
    pub class: u32,
    /// The nodes linked under `initiators/`: the best initiators of this memory node.
    pub initiators: NodeMask,
    /// The nodes linked under `targets/`: the memory nodes this node is a best initiator for.
    pub targets: NodeMask,
    /// The four performance files, when firmware reported all of them.
    pub perf: Option<NodePerf>,
}

/// One online node as sysfs shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTopology {
    /// The node id.
    pub id: NodeId,
    /// Its CPUs (`cpulist`), ascending.
    pub cpus: Vec<u32>,
    /// Its `meminfo`.
    pub meminfo: Meminfo,
    /// `distance`: SLIT distance to each online node, in ascending node id order.
    pub distance: Vec<u32>,
    /// The access classes present (`access0`, `access1`), ascending by class.
    pub access: Vec<AccessClass>,
}

impl NodeTopology {
    /// The access class `class`, if the node has it.
    #[must_use]
    pub fn access_class(&self, class: u32) -> Option<&AccessClass> {
        self.access.iter().find(|a| a.class == class)
    }

    /// HMAT performance from CPU initiators (access class 1), the numbers the kernel's tiering
    /// uses.
    #[must_use]
    pub fn cpu_perf(&self) -> Option<NodePerf> {
        self.access_class(1).and_then(|a| a.perf)
    }
}

/// A kernel memory tier, `memory_tierN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryTier {
    /// `N`: `adist >> 7`; smaller is faster.
    pub id: u32,
    /// Its `nodelist`.
    pub nodes: NodeMask,
}

/// The machine's NUMA topology as read from sysfs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemTopology {
    /// `possible`.
    pub possible: NodeMask,
    /// `online`.
    pub online: NodeMask,
    /// `has_cpu`.
    pub has_cpu: NodeMask,
    /// `has_memory`.
    pub has_memory: NodeMask,
    /// `has_normal_memory`.
    pub has_normal_memory: NodeMask,
    /// One entry per online node, ascending by id.
    pub nodes: Vec<NodeTopology>,
    /// The kernel's memory tiers, fastest first; `None` when the kernel has no
    /// `memory_tiering` directory.
    pub memory_tiers: Option<Vec<MemoryTier>>,
}

/// Where [`SystemTopology::to_engine`] takes the tier placement from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TierSource {
    /// The kernel's `memory_tierN` lists: each node gets the adist in the middle of its tier's
    /// chunk (`N * 128 + 64`, which is 576 for DRAM's `memory_tier4`).
    Kernel,
    /// No memory tiers in sysfs, but HMAT access-class-1 numbers: the engine derives adist from
    /// them as the kernel does (`mt_perf_to_adistance()`).
    Hmat,
    /// Neither: every node is in the DRAM tier, as the kernel places nodes with no adist
    /// algorithm's answer.
    SingleTier,
}

/// Why a [`SystemTopology`] could not become an engine [`Topology`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConvertError {
    /// No online node has memory.
    #[error("no online node has memory (has_memory is empty)")]
    NoMemoryNodes,
    /// A node in `has_memory` has no `nodeN` directory among the online nodes.
    #[error("{node} is in has_memory but is not an online node with a sysfs directory")]
    MissingNode {
        /// The node.
        node: NodeId,
    },
    /// A memory node's meminfo has no `MemTotal`.
    #[error("{node}/meminfo has no MemTotal")]
    MissingMemTotal {
        /// The node.
        node: NodeId,
    },
    /// A node's `distance` line does not have one entry per online node.
    #[error("{node}/distance has {len} entries but {online} nodes are online")]
    DistanceRow {
        /// The node.
        node: NodeId,
        /// Entries in its distance line.
        len: usize,
        /// Online nodes.
        online: usize,
    },
    /// The engine refused the description.
    #[error("the engine refused the topology read from sysfs: {0}")]
    Engine(#[from] TopologyError),
}

impl SystemTopology {
    /// The node `id`, if online.
    #[must_use]
    pub fn node(&self, id: NodeId) -> Option<&NodeTopology> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The kernel tier holding `node`, if the kernel has tiers and placed it.
    #[must_use]
    pub fn kernel_tier_of(&self, node: NodeId) -> Option<u32> {
        self.memory_tiers
            .as_ref()?
            .iter()
            .find(|t| t.nodes.contains(node))
            .map(|t| t.id)
    }

    /// Which source [`SystemTopology::to_engine`] uses for tiers: the kernel's tiers when sysfs
    /// has any, else HMAT numbers when a memory node has them, else a single tier.
    #[must_use]
    pub fn tier_source(&self) -> TierSource {
        if self.memory_tiers.as_ref().is_some_and(|t| !t.is_empty()) {
            TierSource::Kernel
        } else if self
            .memory_nodes()
            .filter_map(|id| self.node(id))
            .any(|n| n.cpu_perf().is_some())
        {
            TierSource::Hmat
        } else {
            TierSource::SingleTier
        }
    }

    fn memory_nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.has_memory.iter()
    }

    /// The engine's description: one [`NodeSpec`] per node with memory, and the SLIT matrix
    /// between them.
    ///
    /// CPU-only nodes (no memory) are left out: they hold no pages and cannot be migration
    /// targets. Under [`TierSource::Kernel`] a node missing from every `memory_tierN` gets no
    /// explicit adist and the engine places it by its own rules.
    ///
    /// # Errors
    ///
    /// A [`ConvertError`] when a memory node has no directory, no `MemTotal`, or a distance line
    /// of the wrong length, or when there are no memory nodes.
    pub fn node_specs(&self) -> Result<(Vec<NodeSpec>, Vec<Vec<u32>>), ConvertError> {
        let source = self.tier_source();
        let online: Vec<NodeId> = self.nodes.iter().map(|n| n.id).collect();
        let mut specs = Vec::new();
        let mut rows = Vec::new();
        let mem: Vec<NodeId> = self.memory_nodes().collect();
        if mem.is_empty() {
            return Err(ConvertError::NoMemoryNodes);
        }
        // Column of each memory node in the distance lines (which cover all online nodes).
        let mut cols = Vec::with_capacity(mem.len());
        for &id in &mem {
            let col = online
                .iter()
                .position(|&o| o == id)
                .ok_or(ConvertError::MissingNode { node: id })?;
            cols.push(col);
        }
        for &id in &mem {
            let node = self
                .node(id)
                .ok_or(ConvertError::MissingNode { node: id })?;
            let capacity = node
                .meminfo
                .mem_total()
                .ok_or(ConvertError::MissingMemTotal { node: id })?;
            if node.distance.len() != online.len() {
                return Err(ConvertError::DistanceRow {
                    node: id,
                    len: node.distance.len(),
                    online: online.len(),
                });
            }
            rows.push(cols.iter().map(|&c| node.distance[c]).collect());
            let (perf, adistance) = match source {
                TierSource::Kernel => (
                    node.cpu_perf(),
                    self.kernel_tier_of(id).map(|t| {
                        t.saturating_mul(MEMTIER_CHUNK_SIZE)
                            .saturating_add(MEMTIER_CHUNK_SIZE >> 1)
                    }),
                ),
                TierSource::Hmat => (node.cpu_perf(), None),
                TierSource::SingleTier => (None, Some(MEMTIER_ADISTANCE_DRAM)),
            };
            specs.push(NodeSpec {
                id,
                has_cpus: self.has_cpu.contains(id),
                capacity: Bytes(capacity.0),
                perf,
                adistance,
            });
        }
        Ok((specs, rows))
    }

    /// Builds the engine's [`Topology`] (see [`SystemTopology::tier_source`] for where the
    /// tiers come from).
    ///
    /// # Errors
    ///
    /// As [`SystemTopology::node_specs`], and [`ConvertError::Engine`] when the engine refuses
    /// the description (no node with CPUs, a node id of 64 or more, a zero local distance).
    pub fn to_engine(&self) -> Result<Topology, ConvertError> {
        let (specs, dist) = self.node_specs()?;
        Ok(Topology::new(specs, dist)?)
    }
}

/// The tier id an adist falls in, `adist >> MEMTIER_CHUNK_BITS` (re-exported for callers
/// comparing [`MemoryTier::id`] with engine tiers).
#[must_use]
pub fn tier_of_adistance(adist: u32) -> u32 {
    adist >> MEMTIER_CHUNK_BITS
}

/// Parses a `distance` line: space-separated decimal distances.
///
/// # Errors
///
/// A [`ParseError`] for an empty line, a non-number, or more than one line.
pub fn parse_distance(text: &str) -> Result<Vec<u32>, ParseError> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let line = lines
        .next()
        .ok_or_else(|| ParseError::new(1, "empty distance file"))?;
    if lines.next().is_some() {
        return Err(ParseError::new(2, "distance must be one line"));
    }
    line.split_whitespace()
        .map(|d| {
            d.parse()
                .map_err(|_| ParseError::new(1, format!("bad distance {d:?}")))
        })
        .collect()
}

/// Parses a node list file into a mask (see [`parse_nodelist`]).
///
/// # Errors
///
/// A [`ParseError`] at line 1 with the list error.
pub fn parse_nodelist_file(text: &str) -> Result<NodeMask, ParseError> {
    parse_nodelist(text).map_err(|r| ParseError::new(1, r))
}

/// Parses a CPU list file.
///
/// # Errors
///
/// A [`ParseError`] at line 1 with the list error.
pub fn parse_cpulist_file(text: &str) -> Result<Vec<u32>, ParseError> {
    parse_list(text).map_err(|r| ParseError::new(1, r))
}

/// `/proc/sys/kernel/numa_balancing`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NumaBalancing(pub u32);

impl NumaBalancing {
    /// `NUMA_BALANCING_NORMAL`.
    pub const NORMAL: u32 = 1;
    /// `NUMA_BALANCING_MEMORY_TIERING`.
    pub const MEMORY_TIERING: u32 = 2;

    /// Whether NUMA balancing is off.
    #[must_use]
    pub fn disabled(self) -> bool {
        self.0 == 0
    }
    /// Whether the classic (locality) mode is on.
    #[must_use]
    pub fn normal(self) -> bool {
        self.0 & Self::NORMAL != 0
    }
    /// Whether the memory-tiering mode (hint-fault promotion from slow tiers) is on.
    #[must_use]
    pub fn memory_tiering(self) -> bool {
        self.0 & Self::MEMORY_TIERING != 0
    }
}

/// Parses `numa_balancing`.
///
/// # Errors
///
/// A [`ParseError`] for anything but a non-negative number.
pub fn parse_numa_balancing(text: &str) -> Result<NumaBalancing, ParseError> {
    let t = text.trim();
    t.parse()
        .map(NumaBalancing)
        .map_err(|_| ParseError::new(1, format!("expected a mode number, found {t:?}")))
}

/// Parses a sysfs boolean as `demotion_enabled` shows it (`true`/`false`); `1`/`0` are accepted
/// too, as the file's store side takes them.
///
/// # Errors
///
/// A [`ParseError`] for anything else.
pub fn parse_sysfs_bool(text: &str) -> Result<bool, ParseError> {
    match text.trim() {
        "true" | "1" | "Y" | "y" => Ok(true),
        "false" | "0" | "N" | "n" => Ok(false),
        other => Err(ParseError::new(
            1,
            format!("expected true or false, found {other:?}"),
        )),
    }
}

/// Reads `<proc_root>/sys/kernel/numa_balancing`; `None` when the kernel has no NUMA balancing
/// (`CONFIG_NUMA_BALANCING=n`, no file).
///
/// # Errors
///
/// A [`ReadError`] naming the file.
pub fn read_numa_balancing(proc_root: &Path) -> Result<Option<NumaBalancing>, ReadError> {
    read_optional(
        &proc_root.join("sys/kernel/numa_balancing"),
        parse_numa_balancing,
    )
}

/// Reads `<sys_root>/kernel/mm/numa/demotion_enabled`; `None` when the file does not exist.
///
/// # Errors
///
/// A [`ReadError`] naming the file.
pub fn read_demotion_enabled(sys_root: &Path) -> Result<Option<bool>, ReadError> {
    read_optional(
        &sys_root.join("kernel/mm/numa/demotion_enabled"),
        parse_sysfs_bool,
    )
}

/// Reads the kernel's memory tiers; `None` when `memory_tiering` does not exist.
///
/// # Errors
///
/// A [`ReadError`] naming the directory or `nodelist` file.
pub fn read_memory_tiers(sys_root: &Path) -> Result<Option<Vec<MemoryTier>>, ReadError> {
    let dir = sys_root.join("devices/virtual/memory_tiering");
    let ids = match numbered_entries(&dir, "memory_tier") {
        Ok(ids) => ids,
        Err(ReadError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    let mut tiers = Vec::with_capacity(ids.len());
    for id in ids {
        let path = dir.join(format!("memory_tier{id}/nodelist"));
        let nodes = read_parsed(&path, parse_nodelist_file)?;
        tiers.push(MemoryTier { id, nodes });
    }
    Ok(Some(tiers))
}

/// Node ids linked in `dir` (`accessC/initiators`, `accessC/targets`); empty if `dir` is
/// missing.
fn linked_nodes(dir: &Path) -> Result<NodeMask, ReadError> {
    let ids = match numbered_entries(dir, "node") {
        Ok(ids) => ids,
        Err(ReadError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            return Ok(NodeMask::EMPTY)
        }
        Err(e) => return Err(e),
    };
    let mut mask = NodeMask::EMPTY;
    for id in ids {
        let node = super::node_id(id)
            .map_err(|r| ParseError::new(1, r).at(dir.join(format!("node{id}"))))?;
        mask.insert(node);
    }
    Ok(mask)
}

/// Reads one access class directory.
fn read_access_class(dir: &Path, class: u32) -> Result<AccessClass, ReadError> {
    let init = dir.join("initiators");
    let num = |name: &str| -> Result<Option<u32>, ReadError> {
        read_optional(&init.join(name), |t| {
            let v = super::parse_u64(t)?;
            u32::try_from(v).map_err(|_| ParseError::new(1, format!("{v} does not fit in 32 bits")))
        })
    };
    let perf = match (
        num("read_latency")?,
        num("write_latency")?,
        num("read_bandwidth")?,
        num("write_bandwidth")?,
    ) {
        (Some(rl), Some(wl), Some(rb), Some(wb)) => Some(NodePerf {
            read_latency_ns: rl,
            write_latency_ns: wl,
            read_bandwidth_mbps: rb,
            write_bandwidth_mbps: wb,
        }),
        _ => None,
    };
    Ok(AccessClass {
        class,
        initiators: linked_nodes(&init)?,
        targets: linked_nodes(&dir.join("targets"))?,
        perf,
    })
}

/// Reads one online node's directory.
///
/// # Errors
///
/// A [`ReadError`] naming the file that failed.
pub fn read_node(sys_root: &Path, node: NodeId) -> Result<NodeTopology, ReadError> {
    let dir = node_dir(sys_root, node);
    let cpus = read_parsed(&dir.join("cpulist"), parse_cpulist_file)?;
    let meminfo = read_node_meminfo(sys_root, node)?;
    let distance = read_parsed(&dir.join("distance"), parse_distance)?;
    let mut access = Vec::new();
    for class in numbered_entries(&dir, "access")? {
        access.push(read_access_class(
            &dir.join(format!("access{class}")),
            class,
        )?);
    }
    Ok(NodeTopology {
        id: node,
        cpus,
        meminfo,
        distance,
        access,
    })
}

/// Reads the whole topology under `sys_root` (`/sys` on a live system).
///
/// # Errors
///
/// A [`ReadError`] naming the first file that is missing or malformed. `has_normal_memory` is
/// optional (an empty mask when absent); the node state lists and each online node's
/// `cpulist`, `meminfo` and `distance` are required.
pub fn read_system_topology(sys_root: &Path) -> Result<SystemTopology, ReadError> {
    let root = node_root(sys_root);
    let list = |name: &str| read_parsed(&root.join(name), parse_nodelist_file);
    let online = list("online")?;
    let possible = list("possible")?;
    let has_cpu = list("has_cpu")?;
    let has_memory = list("has_memory")?;
    let has_normal_memory =
        read_optional(&root.join("has_normal_memory"), parse_nodelist_file)?.unwrap_or_default();
    let nodes = online
        .iter()
        .map(|n| read_node(sys_root, n))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SystemTopology {
        possible,
        online,
        has_cpu,
        has_memory,
        has_normal_memory,
        nodes,
        memory_tiers: read_memory_tiers(sys_root)?,
    })
}

/// Which node each physical frame belongs to, from the nodes' memory blocks: the node that
/// holds a page, without asking the kernel page by page (`move_pages(2)` with no target
/// nodes walks the page tables one page at a time under the mmap lock).
///
/// Memory is managed in blocks of `<sys_root>/devices/system/memory/block_size_bytes` (hex)
/// bytes; block `M` covers frames `M * block_pages .. (M + 1) * block_pages`, and
/// `nodeN/memoryM` links every online block to the node it belongs to
/// (Documentation/admin-guide/mm/memory-hotplug.rst "Memory Block Sysfs Interface";
/// drivers/base/node.c `register_memory_block_under_node()`). A block linked under two nodes
/// (early boot memory spanning a node boundary) is left out: its frames have no node here,
/// and the caller asks the kernel for them. So is any frame outside the blocks known when
/// the map was read (memory hot-added since): the map only ever says what sysfs said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFrames {
    /// `(first frame, end frame, node)`, ascending, not overlapping, adjacent ones of one
    /// node merged.
    ranges: Vec<(u64, u64, NodeId)>,
}

impl NodeFrames {
    /// A map from explicit blocks: `block_pages` frames per block, `(block, node)` pairs.
    /// Blocks named for two nodes are dropped.
    #[must_use]
    pub fn from_blocks(block_pages: u64, blocks: &[(u64, NodeId)]) -> Self {
        let mut b: Vec<(u64, NodeId)> = blocks.to_vec();
        b.sort_unstable_by_key(|&(m, n)| (m, n.0));
        b.dedup();
        let mut ranges: Vec<(u64, u64, NodeId)> = Vec::new();
        let mut i = 0;
        while i < b.len() {
            let (m, n) = b[i];
            let shared = b.get(i + 1).is_some_and(|&(m2, _)| m2 == m);
            if shared {
                // Every entry of this block is skipped.
                while i < b.len() && b[i].0 == m {
                    i += 1;
                }
                continue;
            }
            i += 1;
            let (Some(start), Some(end)) = (
                m.checked_mul(block_pages),
                m.checked_add(1).and_then(|e| e.checked_mul(block_pages)),
            ) else {
                continue;
            };
            match ranges.last_mut() {
                Some(last) if last.1 == start && last.2 == n => last.1 = end,
                _ => ranges.push((start, end, n)),
            }
        }
        NodeFrames { ranges }
    }

    /// The node of frame `pfn`, when a block of exactly one node holds it.
    #[must_use]
    pub fn node_of(&self, pfn: u64) -> Option<NodeId> {
        let i = self.ranges.partition_point(|r| r.1 <= pfn);
        self.ranges.get(i).filter(|r| r.0 <= pfn).map(|r| r.2)
    }

    /// Whether no frame has a node (no blocks were found, e.g. a kernel without memory
    /// hotplug's sysfs, `CONFIG_MEMORY_HOTPLUG` off).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The `(first frame, end frame, node)` ranges, ascending.
    #[must_use]
    pub fn ranges(&self) -> &[(u64, u64, NodeId)] {
        &self.ranges
    }
}

/// Parses `block_size_bytes` (hex without `0x`, as drivers/base/memory.c
/// `block_size_bytes_show()` prints it) into frames per block.
///
/// # Errors
/// A [`ParseError`] when it is not hex or not a positive multiple of the page size.
pub fn parse_block_size(text: &str) -> Result<u64, ParseError> {
    let t = text.trim();
    let bytes = u64::from_str_radix(t, 16)
        .map_err(|_| ParseError::new(1, format!("expected a hex byte count, read {t:?}")))?;
    let page = 1u64 << tierd_engine::types::PAGE_SHIFT;
    if bytes == 0 || !bytes.is_multiple_of(page) {
        return Err(ParseError::new(
            1,
            format!("block size {bytes:#x} is not a positive multiple of the page size"),
        ));
    }
    Ok(bytes / page)
}

/// Reads the frames of every online node's memory blocks (see [`NodeFrames`]). A kernel
/// without memory block sysfs (no `block_size_bytes`) gives an empty map.
///
/// # Errors
/// A [`ReadError`] naming the node list, a node directory or `block_size_bytes`.
pub fn read_node_frames(sys_root: &Path) -> Result<NodeFrames, ReadError> {
    let bs_path = sys_root.join("devices/system/memory/block_size_bytes");
    let Some(block_pages) = read_optional(&bs_path, parse_block_size)? else {
        return Ok(NodeFrames::default());
    };
    let online = read_parsed(&node_root(sys_root).join("online"), parse_nodelist_file)?;
    let mut blocks = Vec::new();
    for n in online.iter() {
        for m in numbered_entries(&node_dir(sys_root, n), "memory")? {
            blocks.push((u64::from(m), n));
        }
    }
    Ok(NodeFrames::from_blocks(block_pages, &blocks))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mask(ids: &[u16]) -> NodeMask {
        NodeMask::from_nodes(ids.iter().copied().map(NodeId))
    }

    fn node(id: u16, cpus: &[u32], mem_kb: Option<u64>, distance: &[u32]) -> NodeTopology {
        let mut meminfo = Meminfo::default();
        if let Some(kb) = mem_kb {
            meminfo.entries.insert("MemTotal".into(), kb * 1024);
        }
        NodeTopology {
            id: NodeId(id),
            cpus: cpus.to_vec(),
            meminfo,
            distance: distance.to_vec(),
            access: Vec::new(),
        }
    }

    /// Two nodes: 0 DRAM with CPUs, 1 CPU-less CXL.
    fn two_node(tiers: Option<Vec<MemoryTier>>) -> SystemTopology {
        SystemTopology {
            possible: mask(&[0, 1]),
            online: mask(&[0, 1]),
            has_cpu: mask(&[0]),
            has_memory: mask(&[0, 1]),
            has_normal_memory: mask(&[0, 1]),
            nodes: vec![
                node(0, &[0, 1], Some(2 << 20), &[10, 20]),
                node(1, &[], Some(1 << 20), &[20, 10]),
            ],
            memory_tiers: tiers,
        }
    }

    #[test]
    fn distance_lines() {
        assert_eq!(parse_distance("10 20 30\n").unwrap(), [10, 20, 30]);
        assert_eq!(parse_distance("10\n").unwrap(), [10]);
        assert!(parse_distance("\n").is_err());
        let e = parse_distance("10 x\n").unwrap_err();
        assert!(e.reason.contains("\"x\""));
        assert_eq!(parse_distance("10\n20\n").unwrap_err().line, 2);
    }

    #[test]
    fn numa_balancing_bits_and_bools() {
        let nb = parse_numa_balancing("2\n").unwrap();
        assert!(nb.memory_tiering() && !nb.normal() && !nb.disabled());
        let nb = parse_numa_balancing("3\n").unwrap();
        assert!(nb.memory_tiering() && nb.normal());
        assert!(parse_numa_balancing("0\n").unwrap().disabled());
        assert!(parse_numa_balancing("-1\n").is_err());
        assert!(parse_sysfs_bool("true\n").unwrap());
        assert!(!parse_sysfs_bool("false\n").unwrap());
        assert!(parse_sysfs_bool("maybe\n").is_err());
    }

    #[test]
    fn kernel_tiers_place_the_cxl_node_lower() {
        let sys = two_node(Some(vec![
            MemoryTier {
                id: 4,
                nodes: mask(&[0]),
            },
            MemoryTier {
                id: 22,
                nodes: mask(&[1]),
            },
        ]));
        assert_eq!(sys.tier_source(), TierSource::Kernel);
        let t = sys.to_engine().unwrap();
        assert_eq!(t.node(NodeId(0)).unwrap().adistance, 576);
        assert_eq!(t.node(NodeId(1)).unwrap().tier, 22);
        assert_eq!(t.toptier_mask(), mask(&[0]));
        assert_eq!(t.slow_mask(), mask(&[1]));
        assert_eq!(t.capacity(NodeId(1)), Bytes::gib(1));
        assert_eq!(t.distance(NodeId(0), NodeId(1)), Some(20));
    }

    #[test]
    fn one_kernel_tier_keeps_everything_top() {
        let sys = two_node(Some(vec![MemoryTier {
            id: 4,
            nodes: mask(&[0, 1]),
        }]));
        let t = sys.to_engine().unwrap();
        assert_eq!(t.toptier_mask(), mask(&[0, 1]));
        assert_eq!(t.tiers().len(), 1);
    }

    #[test]
    fn hmat_then_single_tier_fallbacks() {
        let mut sys = two_node(None);
        assert_eq!(sys.tier_source(), TierSource::SingleTier);
        let t = sys.to_engine().unwrap();
        assert_eq!(t.tiers().len(), 1);

        let perf = |lat: u32, bw: u32| NodePerf {
            read_latency_ns: lat,
            write_latency_ns: lat,
            read_bandwidth_mbps: bw,
            write_bandwidth_mbps: bw,
        };
        for (n, p) in [(0, perf(100, 20_000)), (1, perf(400, 5_000))] {
            sys.nodes[n].access.push(AccessClass {
                class: 1,
                initiators: mask(&[0]),
                targets: NodeMask::EMPTY,
                perf: Some(p),
            });
        }
        assert_eq!(sys.tier_source(), TierSource::Hmat);
        let t = sys.to_engine().unwrap();
        // 576 * 800/200 * 40000/10000 = 9216 -> tier 72.
        assert_eq!(t.node(NodeId(1)).unwrap().adistance, 9216);
        assert_eq!(t.slow_mask(), mask(&[1]));
    }

    #[test]
    fn cpu_only_nodes_are_left_out_and_columns_follow() {
        // Node 1 has CPUs but no memory; node 2 is memory-only.
        let mut sys = two_node(None);
        sys.online = mask(&[0, 1, 2]);
        sys.has_cpu = mask(&[0, 1]);
        sys.has_memory = mask(&[0, 2]);
        sys.nodes = vec![
            node(0, &[0], Some(1 << 20), &[10, 15, 30]),
            node(1, &[1], None, &[15, 10, 40]),
            node(2, &[], Some(1 << 20), &[30, 40, 10]),
        ];
        let (specs, dist) = sys.node_specs().unwrap();
        let ids: Vec<NodeId> = specs.iter().map(|s| s.id).collect();
        assert_eq!(ids, [NodeId(0), NodeId(2)]);
        assert_eq!(dist, [vec![10, 30], vec![30, 10]]);
    }

    #[test]
    fn conversion_errors_name_the_node() {
        let mut sys = two_node(None);
        sys.nodes[1].distance = vec![10];
        assert_eq!(
            sys.to_engine().unwrap_err(),
            ConvertError::DistanceRow {
                node: NodeId(1),
                len: 1,
                online: 2
            }
        );
        let mut sys = two_node(None);
        sys.nodes[1].meminfo = Meminfo::default();
        assert_eq!(
            sys.to_engine().unwrap_err(),
            ConvertError::MissingMemTotal { node: NodeId(1) }
        );
        let mut sys = two_node(None);
        sys.nodes.pop();
        assert_eq!(
            sys.to_engine().unwrap_err(),
            ConvertError::MissingNode { node: NodeId(1) }
        );
        let mut sys = two_node(None);
        sys.has_memory = NodeMask::EMPTY;
        assert_eq!(sys.to_engine().unwrap_err(), ConvertError::NoMemoryNodes);
        let mut sys = two_node(None);
        sys.has_cpu = NodeMask::EMPTY;
        assert_eq!(
            sys.to_engine().unwrap_err(),
            ConvertError::Engine(TopologyError::NoCpuNode)
        );
        assert!(ConvertError::MissingMemTotal { node: NodeId(3) }
            .to_string()
            .contains("node3"));
    }

    #[test]
    fn frames_map_to_the_node_of_their_block() {
        // 128 MiB blocks (32768 frames): node 0 blocks 0-1, node 1 blocks 4-5, block 8 in both
        // (spans the boundary: no node), block 3 of node 0 (not adjacent to 1: its own range).
        let bp = parse_block_size("8000000\n").unwrap();
        assert_eq!(bp, 32768);
        let f = NodeFrames::from_blocks(
            bp,
            &[
                (1, NodeId(0)),
                (0, NodeId(0)),
                (5, NodeId(1)),
                (4, NodeId(1)),
                (8, NodeId(0)),
                (8, NodeId(1)),
                (3, NodeId(0)),
            ],
        );
        assert_eq!(
            f.ranges(),
            &[
                (0, 2 * bp, NodeId(0)),
                (3 * bp, 4 * bp, NodeId(0)),
                (4 * bp, 6 * bp, NodeId(1))
            ]
        );
        assert_eq!(f.node_of(0), Some(NodeId(0)));
        assert_eq!(f.node_of(2 * bp - 1), Some(NodeId(0)));
        assert_eq!(f.node_of(2 * bp), None, "a hole");
        assert_eq!(f.node_of(4 * bp), Some(NodeId(1)));
        assert_eq!(f.node_of(8 * bp + 7), None, "a block of two nodes");
        assert_eq!(f.node_of(u64::MAX), None);
        assert!(NodeFrames::default().is_empty());
        assert!(parse_block_size("0").is_err());
        assert!(parse_block_size("zz").is_err());
        assert!(parse_block_size("800").is_err(), "not whole pages");
    }

    #[test]
    fn node_frames_of_the_guest_fixture() {
        let sys = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/guest-6.12/sys");
        let f = read_node_frames(&sys).unwrap();
        // 2 GiB per node in 128 MiB blocks: node 0 below the PCI hole, node 1 above 4 GiB.
        assert_eq!(
            f.ranges(),
            &[
                (0, 16 * 32768, NodeId(0)),
                (32 * 32768, 48 * 32768, NodeId(1))
            ]
        );
        // A tree without memory block sysfs: no frame has a node.
        let dir = tempfile::tempdir().unwrap();
        assert!(read_node_frames(dir.path()).unwrap().is_empty());
    }
}
