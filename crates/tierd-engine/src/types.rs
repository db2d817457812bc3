//! Newtypes for identities and units.
//!
//! Page counts, frame numbers, addresses and times all cross `u64`/`usize`/`u32` boundaries;
//! a newtype per unit makes a mix-up a compile error instead of a wrong plan.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Base page size the engine reasons in (x86-64, arm64 with 4 KiB granule).
pub const PAGE_SIZE: u64 = 4096;
/// `log2(PAGE_SIZE)`.
pub const PAGE_SHIFT: u32 = 12;
/// Base pages in one PMD-mapped huge page (2 MiB / 4 KiB).
pub const HPAGE_PMD_NR: u64 = 512;
/// Base pages in one PUD-mapped huge page (1 GiB / 4 KiB): a gigantic hugetlb page.
pub const HPAGE_PUD_NR: u64 = 512 * 512;
/// Most NUMA nodes the engine handles. A [`NodeMask`] is one `u64`; the kernel allows up to
/// 1024 (`static_assert(MAX_NUMNODES <= 1024)` in mm/pghot-precise.c), which no tiered machine
/// in sight approaches.
pub const MAX_NODES: usize = 64;

/// A NUMA node id, as in `/sys/devices/system/node/nodeN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(pub u16);

impl NodeId {
    /// The node id as an index into per-node arrays.
    #[must_use]
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node{}", self.0)
    }
}

/// An address space: a process on Linux (its pid), a simulated process in the simulator.
///
/// `move_pages(2)` takes a pid and virtual addresses, so a page is identified by the address
/// space it is mapped in and its virtual page number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SpaceId(pub u32);

impl fmt::Display for SpaceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {}", self.0)
    }
}

/// A cgroup, interned by the backend (the Linux backend maps cgroup paths to ids).
/// `CgroupId(0)` is the root cgroup.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct CgroupId(pub u32);

impl CgroupId {
    /// The root cgroup, which owns every page whose owner is not known.
    pub const ROOT: CgroupId = CgroupId(0);
}

/// A virtual page number: virtual address >> [`PAGE_SHIFT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Vpn(pub u64);

impl Vpn {
    /// The page containing virtual address `addr`.
    #[must_use]
    pub fn from_addr(addr: u64) -> Self {
        Vpn(addr >> PAGE_SHIFT)
    }
    /// The first byte of the page.
    #[must_use]
    pub fn addr(self) -> u64 {
        self.0 << PAGE_SHIFT
    }
}

/// A physical frame number, carried along when a source knows it (pagemap with
/// `CAP_SYS_ADMIN`, perf `PERF_SAMPLE_PHYS_ADDR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Pfn(pub u64);

/// A number of base (4 KiB) pages.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Pages(pub u64);

impl Pages {
    /// The size in bytes.
    #[must_use]
    pub fn bytes(self) -> Bytes {
        Bytes(self.0.saturating_mul(PAGE_SIZE))
    }
}

/// A number of bytes.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Bytes(pub u64);

impl Bytes {
    /// One kibibyte.
    pub const KIB: u64 = 1 << 10;
    /// One mebibyte.
    pub const MIB: u64 = 1 << 20;
    /// One gibibyte.
    pub const GIB: u64 = 1 << 30;

    /// `n` gibibytes.
    #[must_use]
    pub const fn gib(n: u64) -> Self {
        Bytes(n * Self::GIB)
    }
    /// `n` mebibytes.
    #[must_use]
    pub const fn mib(n: u64) -> Self {
        Bytes(n * Self::MIB)
    }
    /// Whole base pages contained (rounded down).
    #[must_use]
    pub fn pages(self) -> Pages {
        Pages(self.0 / PAGE_SIZE)
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Display only: precision loss in the float is irrelevant.
        #[allow(clippy::cast_precision_loss)]
        let b = self.0 as f64;
        if self.0 >= Self::GIB {
            write!(f, "{:.2} GiB", b / Self::GIB as f64)
        } else if self.0 >= Self::MIB {
            write!(f, "{:.2} MiB", b / Self::MIB as f64)
        } else {
            write!(f, "{} B", self.0)
        }
    }
}

/// A point in time or a duration, in nanoseconds, on whatever clock the backend drives
/// (monotonic on Linux, virtual in the simulator). The engine never reads a clock.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Nanos(pub u64);

impl Nanos {
    /// Zero.
    pub const ZERO: Nanos = Nanos(0);

    /// `ms` milliseconds.
    #[must_use]
    pub const fn from_millis(ms: u64) -> Self {
        Nanos(ms * 1_000_000)
    }
    /// `s` seconds.
    #[must_use]
    pub const fn from_secs(s: u64) -> Self {
        Nanos(s * 1_000_000_000)
    }
    /// Whole milliseconds (rounded down).
    #[must_use]
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }
    /// Seconds as a float, for reports.
    #[must_use]
    pub fn as_secs_f64(self) -> f64 {
        // Reports only.
        #[allow(clippy::cast_precision_loss)]
        let s = self.0 as f64 / 1e9;
        s
    }
    /// `self + d`, saturating at the largest instant.
    #[must_use]
    pub fn saturating_add(self, d: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(d.0))
    }
    /// `self - earlier`, or zero if `earlier` is later.
    #[must_use]
    pub fn saturating_sub(self, earlier: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(earlier.0))
    }
    /// The kernel's `jiffies` at `HZ=1000` for this instant.
    ///
    /// pghot stamps records with jiffies (mm/pghot.c `pghot_record_access(.., now)`); the
    /// engine models a `HZ=1000` kernel, where one jiffy is one millisecond, which is also the
    /// resolution the kernel's comments quote ("16s with HZ=1000", include/linux/pghot.h).
    #[must_use]
    pub const fn jiffies(self) -> u64 {
        self.as_millis()
    }
}

/// A set of NUMA nodes, as in a mempolicy nodemask.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct NodeMask(pub u64);

impl NodeMask {
    /// The empty set.
    pub const EMPTY: NodeMask = NodeMask(0);

    /// The set holding exactly `nodes`. Nodes at or above [`MAX_NODES`] are dropped; the
    /// topology refuses such nodes before any mask is built from them.
    #[must_use]
    pub fn from_nodes(nodes: impl IntoIterator<Item = NodeId>) -> Self {
        let mut m = NodeMask::EMPTY;
        for n in nodes {
            m.insert(n);
        }
        m
    }
    /// Adds `node`.
    pub fn insert(&mut self, node: NodeId) {
        if node.index() < MAX_NODES {
            self.0 |= 1u64 << node.index();
        }
    }
    /// Whether `node` is in the set.
    #[must_use]
    pub fn contains(self, node: NodeId) -> bool {
        node.index() < MAX_NODES && self.0 & (1u64 << node.index()) != 0
    }
    /// Whether the set is empty.
    #[must_use]
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// The nodes in ascending order.
    pub fn iter(self) -> impl Iterator<Item = NodeId> {
        (0..MAX_NODES)
            .filter(move |i| self.0 & (1u64 << i) != 0)
            .map(|i| {
                // i < MAX_NODES = 64, fits u16.
                #[allow(clippy::cast_possible_truncation)]
                NodeId(i as u16)
            })
    }
}

impl fmt::Display for NodeMask {
    /// Kernel list format (`0-1,3`), as in `numa_maps` and sysfs `nodelist`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: Vec<u16> = self.iter().map(|n| n.0).collect();
        let mut first = true;
        let mut i = 0;
        while i < nodes.len() {
            let start = nodes[i];
            let mut end = start;
            while i + 1 < nodes.len() && nodes[i + 1] == end + 1 {
                i += 1;
                end = nodes[i];
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

/// The size of a tracked unit: a folio as the kernel maps it. A THP or hugetlb page is tracked
/// and moved as one unit, as pghot tracks a folio by its first PFN (mm/pghot.c
/// `pghot_record_access`: "Get the hotness slot corresponding to the 1st PFN of the folio"),
/// and as `move_pages(2)` migrates the whole folio of any subpage it is given
/// (mm/migrate.c `add_folio_for_migration()` isolates the folio, not the page).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum PageSize {
    /// A 4 KiB base page.
    #[default]
    Base,
    /// A 2 MiB PMD-mapped transparent or hugetlb page.
    Huge2M,
    /// A 1 GiB PUD-mapped hugetlb page (gigantic page; THPs are never this size for anonymous
    /// memory).
    Huge1G,
}

impl PageSize {
    /// Every size, smallest first.
    pub const ALL: [PageSize; 3] = [PageSize::Base, PageSize::Huge2M, PageSize::Huge1G];

    /// Base pages in one unit.
    #[must_use]
    pub const fn nr_pages(self) -> Pages {
        match self {
            PageSize::Base => Pages(1),
            PageSize::Huge2M => Pages(HPAGE_PMD_NR),
            PageSize::Huge1G => Pages(HPAGE_PUD_NR),
        }
    }
    /// Bytes in one unit.
    #[must_use]
    pub const fn bytes(self) -> Bytes {
        Bytes(self.nr_pages().0 * PAGE_SIZE)
    }
    /// Whether this is a huge page (2 MiB or 1 GiB).
    #[must_use]
    pub const fn is_huge(self) -> bool {
        !matches!(self, PageSize::Base)
    }
    /// The size whose unit is `kib` KiB (`KernelPageSize` in smaps, `hugepages-<n>kB` in sysfs),
    /// or `None` for a size the engine does not track (64 KiB pages, mTHP orders).
    #[must_use]
    pub const fn from_kib(kib: u64) -> Option<PageSize> {
        match kib {
            4 => Some(PageSize::Base),
            2048 => Some(PageSize::Huge2M),
            1_048_576 => Some(PageSize::Huge1G),
            _ => None,
        }
    }
    /// The head of the unit containing `vpn` (`vpn` aligned down to the unit).
    #[must_use]
    pub const fn head(self, vpn: Vpn) -> Vpn {
        Vpn(vpn.0 & !(self.nr_pages().0 - 1))
    }
    /// A short name for tables and logs (`4k`, `2m`, `1g`).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            PageSize::Base => "4k",
            PageSize::Huge2M => "2m",
            PageSize::Huge1G => "1g",
        }
    }
}

/// One page (or huge page) as the engine names it: where it is mapped, and its physical frame
/// when the source knew it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PageRef {
    /// The address space the page is mapped in.
    pub space: SpaceId,
    /// Its virtual page number; for a huge page, the head (aligned to [`HPAGE_PMD_NR`]).
    pub vpn: Vpn,
    /// Base page or huge page.
    pub size: PageSize,
    /// The physical frame, where the source knew it.
    pub pfn: Option<Pfn>,
}

impl PageRef {
    /// A base page with no known frame.
    #[must_use]
    pub fn base(space: SpaceId, vpn: Vpn) -> Self {
        PageRef {
            space,
            vpn,
            size: PageSize::Base,
            pfn: None,
        }
    }
    /// A 2 MiB huge page containing `vpn` (the vpn is aligned down to the head).
    #[must_use]
    pub fn huge(space: SpaceId, vpn: Vpn) -> Self {
        PageRef::sized(space, vpn, PageSize::Huge2M)
    }
    /// The unit of `size` containing `vpn` (the vpn is aligned down to its head).
    #[must_use]
    pub fn sized(space: SpaceId, vpn: Vpn, size: PageSize) -> Self {
        PageRef {
            space,
            vpn: size.head(vpn),
            size,
            pfn: None,
        }
    }
    /// The virtual pages the unit covers, `[head, head + nr_pages)`.
    #[must_use]
    pub fn vpns(self) -> std::ops::Range<u64> {
        // Saturating: a page's vpn is input (a backend's, a replayed trace's) and may sit at
        // the top of the range; its range is then cut there rather than overflow.
        self.vpn.0..self.vpn.0.saturating_add(self.size.nr_pages().0)
    }
    /// The identity used as a key: (space, head vpn). The frame is carried, not keyed. The
    /// fields are public (a backend or a replayed trace can build one with a huge page's vpn
    /// off its head), so the head is taken here rather than trusted: the engine's per-page
    /// maps key a huge folio by its head only.
    #[must_use]
    pub fn key(self) -> PageKey {
        PageKey {
            space: self.space,
            vpn: self.size.head(self.vpn),
        }
    }
}

/// A page's identity: (address space, virtual page number of the head).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PageKey {
    /// Address space.
    pub space: SpaceId,
    /// Head virtual page number.
    pub vpn: Vpn,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodemask_formats_like_the_kernel() {
        let m = NodeMask::from_nodes([0, 1, 3, 5, 6, 7].map(NodeId));
        assert_eq!(m.to_string(), "0-1,3,5-7");
        assert!(m.contains(NodeId(3)));
        assert!(!m.contains(NodeId(2)));
        assert!(!m.contains(NodeId(200)));
        assert_eq!(NodeMask::EMPTY.to_string(), "");
    }

    #[test]
    fn a_page_refs_key_is_its_head_even_when_built_off_it() {
        // Built field by field, as a replayed trace may: the key is still the folio's head.
        for (size, vpn, head) in [
            (PageSize::Huge2M, 1024 + 122, 1024),
            (PageSize::Huge1G, 2 * HPAGE_PUD_NR + 513, 2 * HPAGE_PUD_NR),
            (PageSize::Base, 7, 7),
        ] {
            let p = PageRef {
                space: SpaceId(3),
                vpn: Vpn(vpn),
                size,
                pfn: None,
            };
            assert_eq!(
                p.key(),
                PageKey {
                    space: SpaceId(3),
                    vpn: Vpn(head)
                }
            );
        }
    }

    #[test]
    fn huge_page_ref_aligns_to_head() {
        let p = PageRef::huge(SpaceId(1), Vpn(1000));
        assert_eq!(p.vpn, Vpn(512));
        assert_eq!(p.size.nr_pages(), Pages(512));
        let g = PageRef::sized(SpaceId(1), Vpn(3 * HPAGE_PUD_NR + 5), PageSize::Huge1G);
        assert_eq!(g.vpn, Vpn(3 * HPAGE_PUD_NR));
        assert_eq!(g.size.bytes(), Bytes::gib(1));
        assert_eq!(g.vpns().count() as u64, HPAGE_PUD_NR);
        for s in PageSize::ALL {
            assert_eq!(PageSize::from_kib(s.bytes().0 / 1024), Some(s));
        }
        assert_eq!(PageSize::from_kib(64), None);
    }

    #[test]
    fn unit_conversions() {
        assert_eq!(Pages(3).bytes(), Bytes(12288));
        assert_eq!(Bytes::gib(1).pages(), Pages(262_144));
        assert_eq!(Nanos::from_millis(1500).jiffies(), 1500);
        assert_eq!(Vpn::from_addr(0x7fff_1234_5678).addr(), 0x7fff_1234_5000);
    }
}
