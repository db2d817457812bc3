//! The folio each observed page belongs to, so that [`super::locate`] observes (and the mover
//! moves) a THP or hugetlb page once, through its head: `move_pages(2)` given any page of a
//! folio migrates the whole folio (mm/migrate.c `add_folio_for_migration()` isolates the
//! folio), and pghot tracks a folio by its first frame.
//!
//! [`ProcFolios`] picks one of three methods when it is made ([`ProcFolios::method`]):
//!
//! 1. **kpageflags** ([`FolioMethod::Kpageflags`]), when `/proc/kpageflags` is readable and
//!    `/proc/self/pagemap` shows frame numbers (both need `CAP_SYS_ADMIN`): exact, per page.
//!    The page's frame from pagemap, the folio of the frame from kpageflags
//!    ([`crate::read::kpageflags::folio_of_frame`]: THP or hugetlb, 2 MiB or 1 GiB), and its
//!    head's virtual page from the frame's offset in it. A huge folio is reported only when
//!    this process maps it whole, at its natural alignment (the head's virtual page maps the
//!    head frame, and for a THP every page maps its frame): a THP mapped in part (after
//!    `MADV_DONTNEED` or `munmap` of part of it, it waits on the deferred split queue) is
//!    split by the kernel when asked to migrate it (mm/migrate.c `migrate_pages_batch()`:
//!    "The rare folio on the deferred split list should be split now"), and one mapped at an
//!    unaligned address (after `mremap`) has no head tierd could name, so both are unknown.
//!    So are mTHP folios (16 KiB to 1 MiB), which move whole but are not a size the engine
//!    tracks. A page that is not present has no folio yet: it passes as a base page, which the
//!    node lookup then finds absent (counted as absent, not as unknown).
//! 2. **smaps** ([`FolioMethod::Smaps`]), otherwise, when `/proc/PID/smaps` is readable (it
//!    needs only ptrace read access): per VMA. A hugetlb VMA is exactly folios of its
//!    `KernelPageSize`; a VMA with no PMD-mapped bytes (`AnonHugePages` + `ShmemPmdMapped` +
//!    `FilePmdMapped` = 0) is exactly base pages; a VMA whose PMD-mapped bytes cover every
//!    2 MiB-aligned chunk inside it is exactly 2 MiB folios there and base pages at its
//!    unaligned ends; a VMA covered in part cannot tell which chunks are huge, so the pages of
//!    its aligned chunks are unknown (its unaligned ends are base pages: a PMD cannot map
//!    them). Caveat: smaps counts PMD-mapped THPs only, so a large folio mapped by PTEs (an
//!    mTHP, or a THP whose PMD was split while the folio stayed whole) passes for base pages;
//!    the kpageflags method has no such blind spot. smaps is read once per pid per pass
//!    ([`FolioMap::begin_pass`]): it walks the page tables of every VMA.
//! 3. **unavailable** ([`FolioMethod::Unavailable`]): neither is readable; every page is
//!    unknown.
//!
//! An unknown page is never observed (counted in `LocateStats::folio_unknown`): tierd then
//! tracks less, degraded and counted, but never moves a folio it took for something else.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use tierd_engine::types::{PageSize, Pfn, Vpn, HPAGE_PMD_NR};

use crate::pagemap::{pfn_visibility, Pagemap, PagemapEntry, PfnVisibility};
use crate::read::kpageflags::{folio_of_frame, FrameFolio, Kpageflags, KpageflagsError, PageFlags};
use crate::read::smaps::{read_smaps, SmapsVma};

/// How folio sizes are found on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FolioMethod {
    /// Exact, per page: pagemap PFNs and `/proc/kpageflags` (needs `CAP_SYS_ADMIN`).
    Kpageflags,
    /// Per VMA from `/proc/PID/smaps`: exact where the VMA tells, unknown elsewhere.
    Smaps,
    /// Neither is readable: every page's folio is unknown.
    Unavailable,
}

impl FolioMethod {
    /// Its name in status output and logs.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            FolioMethod::Kpageflags => "kpageflags",
            FolioMethod::Smaps => "smaps",
            FolioMethod::Unavailable => "unavailable",
        }
    }
}

impl fmt::Display for FolioMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The folio one virtual page belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FolioOf {
    /// The folio's first virtual page (aligned to `size`); the folio is mapped there
    /// contiguously, so page `head + i` is its frame `head frame + i`.
    pub head: Vpn,
    /// Its size.
    pub size: PageSize,
    /// A hugetlb page (as opposed to a THP or a base page).
    pub hugetlb: bool,
}

impl FolioOf {
    /// A base page.
    #[must_use]
    pub fn base(vpn: Vpn) -> Self {
        FolioOf {
            head: vpn,
            size: PageSize::Base,
            hugetlb: false,
        }
    }
    /// The `size` folio containing `vpn`.
    #[must_use]
    pub fn sized(vpn: Vpn, size: PageSize, hugetlb: bool) -> Self {
        FolioOf {
            head: size.head(vpn),
            size,
            hugetlb,
        }
    }
}

/// Whether tierd moves hugetlb pages (config `daemon.hugetlb`); default `Leave`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HugetlbPolicy {
    /// Hugetlb pages are never observed (so never moved): their pool is reserved per node by
    /// the administrator (`nr_hugepages`), and a move needs a free page of the pool on the
    /// target node.
    #[default]
    Leave,
    /// Hugetlb pages are observed and moved like THPs.
    Move,
}

/// Tells the folio of virtual pages.
pub trait FolioMap {
    /// The folio of each of `vpns` (ascending virtual pages of `pid`), pushed to `out` in order:
    /// `Some` when known, `None` when it cannot be told (counted as unknown and never observed:
    /// degraded, never wrong).
    fn resolve(&mut self, pid: u32, vpns: &[Vpn], out: &mut Vec<Option<FolioOf>>) -> FolioMethod;
    /// [`Self::resolve`], also pushing to `frames`, for each page, the frame of its folio's
    /// head where the map read it (pagemap), else `None`. [`super::locate::locate`] finds a
    /// folio's node from that frame ([`super::locate::Locator::node_of_frame`]) instead of a
    /// location query. The default reads no frame.
    fn resolve_frames(
        &mut self,
        pid: u32,
        vpns: &[Vpn],
        out: &mut Vec<Option<FolioOf>>,
        frames: &mut Vec<Option<Pfn>>,
    ) -> FolioMethod {
        let n = out.len();
        let m = self.resolve(pid, vpns, out);
        frames.extend(std::iter::repeat_n(None, out.len() - n));
        m
    }
    /// The process is gone: drop what is cached for it.
    fn forget(&mut self, _pid: u32) {}
    /// A new pass begins ([`super::locate::locate`] calls it first): what was cached from the
    /// processes' files (smaps) is read again when next needed.
    fn begin_pass(&mut self) {}
}

/// Every page its own 4 KiB unit (tests; hosts with THP off).
#[derive(Clone, Copy, Debug, Default)]
pub struct BaseFolios;

impl FolioMap for BaseFolios {
    /// Every page a base page, as exactly as the kpageflags method would say on a host with
    /// neither THP nor hugetlb.
    fn resolve(&mut self, _pid: u32, vpns: &[Vpn], out: &mut Vec<Option<FolioOf>>) -> FolioMethod {
        out.extend(vpns.iter().map(|&v| Some(FolioOf::base(v))));
        FolioMethod::Kpageflags
    }
}

/// What the smaps method knows of one VMA's pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum VmaFolios {
    /// Hugetlb pages of this size (`None`: a size the engine does not track).
    Hugetlb(Option<PageSize>),
    /// Base pages everywhere.
    Base,
    /// 2 MiB THPs on every aligned chunk, base pages at the unaligned ends.
    AllChunksHuge,
    /// Some aligned chunks are THPs, which ones is unknown; base pages at the unaligned ends.
    SomeChunksHuge,
    /// The counters contradict the VMA's size (read while it changed).
    Unknown,
}

/// How the smaps method classifies a VMA (fs/proc/task_mmu.c: `KernelPageSize` is
/// `vma_kernel_pagesize()`, the huge page size of a hugetlb VMA; the PMD-mapped counters add
/// 2 MiB per PMD-mapped THP in `smaps_pmd_entry()`).
fn classify(v: &SmapsVma) -> VmaFolios {
    if v.is_hugetlb() {
        return VmaFolios::Hugetlb(v.hugetlb_size().filter(|s| s.is_huge()));
    }
    let pmd_kb = v.pmd_mapped_kb();
    if pmd_kb == 0 {
        return VmaFolios::Base;
    }
    let (start, end) = (v.start_vpn().0, v.end_vpn().0);
    let first = start.next_multiple_of(HPAGE_PMD_NR);
    let last = end & !(HPAGE_PMD_NR - 1);
    let chunks = last.saturating_sub(first) / HPAGE_PMD_NR;
    let chunk_kb = PageSize::Huge2M.bytes().0 / 1024;
    match pmd_kb.cmp(&chunks.saturating_mul(chunk_kb)) {
        std::cmp::Ordering::Equal => VmaFolios::AllChunksHuge,
        std::cmp::Ordering::Less => VmaFolios::SomeChunksHuge,
        std::cmp::Ordering::Greater => VmaFolios::Unknown,
    }
}

/// The folio of `vpn` in a VMA classified `class`.
fn smaps_folio(class: VmaFolios, start: Vpn, end: Vpn, vpn: Vpn) -> Option<FolioOf> {
    let in_chunk = || {
        let h = PageSize::Huge2M.head(vpn);
        h.0 >= start.0 && h.0 + HPAGE_PMD_NR <= end.0
    };
    match class {
        VmaFolios::Hugetlb(size) => size.map(|s| FolioOf::sized(vpn, s, true)),
        VmaFolios::Base => Some(FolioOf::base(vpn)),
        VmaFolios::AllChunksHuge if in_chunk() => {
            Some(FolioOf::sized(vpn, PageSize::Huge2M, false))
        }
        VmaFolios::SomeChunksHuge if in_chunk() => None,
        VmaFolios::AllChunksHuge | VmaFolios::SomeChunksHuge => Some(FolioOf::base(vpn)),
        VmaFolios::Unknown => None,
    }
}

/// What the smaps method says of page `vpn` of the VMA `v` (which must contain it): the
/// module docs give the rules.
#[must_use]
pub fn folio_in_vma(v: &SmapsVma, vpn: Vpn) -> Option<FolioOf> {
    smaps_folio(classify(v), v.start_vpn(), v.end_vpn(), vpn)
}

/// One process's VMAs as the smaps method sees them, and the pass they were read in.
#[derive(Debug)]
struct SmapsCache {
    pass: u64,
    /// `(start, end, class)`, ascending.
    vmas: Vec<(Vpn, Vpn, VmaFolios)>,
}

/// What [`ProcFolios`] could not read, for the daemon's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FolioReadStats {
    /// `smaps` files read.
    pub smaps_reads: u64,
    /// `smaps`, `pagemap` or `kpageflags` reads that failed (the process gone, mostly): their
    /// pages were unknown.
    pub read_failures: u64,
}

/// The real one: pagemap PFNs + /proc/kpageflags where readable (CAP_SYS_ADMIN), else
/// /proc/PID/smaps.
#[derive(Debug)]
pub struct ProcFolios {
    proc_root: PathBuf,
    method: FolioMethod,
    kpageflags: Option<Kpageflags>,
    smaps: HashMap<u32, SmapsCache>,
    /// This pass's open pagemap per process (kpageflags method): a pass resolves each range
    /// of a process on its own, and opening the file is a permission check each time.
    pagemaps: HashMap<u32, Pagemap>,
    /// Base pages found last pass and this one: `(pid, vpn) -> frame`. See [`BaseCache`].
    bases: BaseCache,
    /// This pass's kpageflags blocks (kpageflags method), shared by every process.
    blocks: FlagBlocks,
    pass: u64,
    stats: FolioReadStats,
}

impl ProcFolios {
    /// Probes which method works under `proc_root` (see the module docs): kpageflags when
    /// `<proc_root>/kpageflags` reads and `<proc_root>/self/pagemap` shows this process's
    /// frames, else smaps when `<proc_root>/self/smaps` reads, else unavailable.
    #[must_use]
    pub fn new(proc_root: &Path) -> Self {
        let kpf = Kpageflags::open(proc_root)
            .ok()
            .filter(|k| k.read(0, 1).is_ok());
        let method = if kpf.is_some() && self_pfns_visible(proc_root) {
            FolioMethod::Kpageflags
        } else if std::fs::File::open(proc_root.join("self/smaps")).is_ok() {
            FolioMethod::Smaps
        } else {
            FolioMethod::Unavailable
        };
        Self::with_method(proc_root, method)
    }

    /// Uses `method` under `proc_root` without probing (fixtures; an operator's choice). The
    /// kpageflags method falls back to unknown pages when `<proc_root>/kpageflags` cannot be
    /// opened.
    #[must_use]
    pub fn with_method(proc_root: &Path, method: FolioMethod) -> Self {
        let kpageflags = match method {
            FolioMethod::Kpageflags => Kpageflags::open(proc_root).ok(),
            _ => None,
        };
        ProcFolios {
            proc_root: proc_root.to_path_buf(),
            method,
            kpageflags,
            smaps: HashMap::new(),
            pagemaps: HashMap::new(),
            bases: BaseCache::default(),
            blocks: FlagBlocks::default(),
            pass: 0,
            stats: FolioReadStats::default(),
        }
    }

    /// The method in force.
    #[must_use]
    pub fn method(&self) -> FolioMethod {
        self.method
    }

    /// What could not be read so far.
    #[must_use]
    pub fn stats(&self) -> FolioReadStats {
        self.stats
    }

    fn resolve_smaps(&mut self, pid: u32, vpns: &[Vpn], out: &mut Vec<Option<FolioOf>>) {
        let fresh = self.smaps.get(&pid).is_some_and(|c| c.pass == self.pass);
        if !fresh {
            self.stats.smaps_reads += 1;
            match read_smaps(&self.proc_root, pid) {
                Ok(v) => {
                    let vmas = v
                        .iter()
                        .map(|x| (x.start_vpn(), x.end_vpn(), classify(x)))
                        .collect();
                    self.smaps.insert(
                        pid,
                        SmapsCache {
                            pass: self.pass,
                            vmas,
                        },
                    );
                }
                Err(_) => {
                    self.stats.read_failures += 1;
                    self.smaps.remove(&pid);
                }
            }
        }
        let vmas = self.smaps.get(&pid).map_or(&[][..], |c| &c.vmas[..]);
        let mut at = 0;
        for &vpn in vpns {
            // Ascending pages: walk the ascending VMAs along.
            while at < vmas.len() && vmas[at].1 .0 <= vpn.0 {
                at += 1;
            }
            out.push(
                vmas.get(at)
                    .filter(|(s, _, _)| s.0 <= vpn.0)
                    .and_then(|&(s, e, c)| smaps_folio(c, s, e, vpn)),
            );
        }
    }

    fn resolve_kpageflags(
        &mut self,
        pid: u32,
        vpns: &[Vpn],
        out: &mut Vec<Option<FolioOf>>,
        frames: &mut Vec<Option<Pfn>>,
    ) {
        let (n, nf) = (out.len(), frames.len());
        if let Err(()) = self.try_kpageflags(pid, vpns, out, frames) {
            self.stats.read_failures += 1;
            out.truncate(n);
            out.extend(vpns.iter().map(|_| None));
            frames.truncate(nf);
        }
        // Every page has its entry in `frames`, known or not.
        frames.resize(nf + (out.len() - n), None);
    }

    fn try_kpageflags(
        &mut self,
        pid: u32,
        vpns: &[Vpn],
        out: &mut Vec<Option<FolioOf>>,
        frames: &mut Vec<Option<Pfn>>,
    ) -> Result<(), ()> {
        let kpf = self.kpageflags.as_ref().ok_or(())?;
        let pm = match self.pagemaps.entry(pid) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Pagemap::open(&self.proc_root, pid).map_err(|_| ())?)
            }
        };
        let blocks = &mut self.blocks;
        let bases = &mut self.bases;
        // The folio found last, and its head frame: the next pages of the same folio need no
        // more reads.
        let mut last: Option<(FolioOf, u64)> = None;
        // The frames `[head, head + n)` of the last huge folio found not mapped whole.
        let mut not_whole: Option<(u64, u64)> = None;
        let mut i = 0;
        while i < vpns.len() {
            // One pagemap read per run of consecutive pages.
            let mut j = i + 1;
            while j < vpns.len() && vpns[j].0 == vpns[j - 1].0 + 1 {
                j += 1;
            }
            let entries = pm.read_range(vpns[i], (j - i) as u64).map_err(|_| ())?;
            blocks.prefetch(
                kpf,
                vpns[i..j]
                    .iter()
                    .zip(&entries)
                    .filter_map(|(v, e)| e.pfn().filter(|p| !bases.is_base(pid, *v, p.0)))
                    .map(|p| p.0),
            );
            for (&vpn, e) in vpns[i..j].iter().zip(entries) {
                let Some(pfn) = e.pfn() else {
                    // Not present (or swapped): no folio yet. Looked up as a base page, which
                    // the node lookup finds absent and counts so. A present page whose frame
                    // reads 0 (hidden) cannot be told.
                    out.push((!e.present()).then_some(FolioOf::base(vpn)));
                    frames.push(None);
                    continue;
                };
                if let Some((f, head_pfn)) = last {
                    let off = vpn.0.wrapping_sub(f.head.0);
                    if off < f.size.nr_pages().0 && pfn.0 == head_pfn + off {
                        out.push(Some(f));
                        frames.push(Some(Pfn(head_pfn)));
                        continue;
                    }
                }
                if bases.is_base(pid, vpn, pfn.0) {
                    bases.keep(pid, vpn, pfn.0);
                    out.push(Some(FolioOf::base(vpn)));
                    frames.push(Some(pfn));
                    continue;
                }
                if let Some((head, n)) = not_whole {
                    if pfn.0.wrapping_sub(head) < n {
                        // A page of the huge folio just found mapped in part: unknown too,
                        // without reading its mapping again (512 pagemap entries a page made
                        // a split buffer cost 2 MiB of reads per folio a pass).
                        out.push(None);
                        frames.push(None);
                        continue;
                    }
                }
                let folio = folio_of_frame(pfn.0, |s, n| blocks.read(kpf, s, n)).map_err(|_| ())?;
                let found = match folio {
                    FrameFolio::Base => {
                        bases.keep(pid, vpn, pfn.0);
                        Some((FolioOf::base(vpn), pfn.0))
                    }
                    FrameFolio::Huge {
                        head,
                        size,
                        hugetlb,
                    } => {
                        let f = mapped_whole(pm, vpn, pfn.0, head.0, size, hugetlb)?;
                        if f.is_none() {
                            not_whole = Some((head.0, size.nr_pages().0));
                        }
                        f.map(|f| (f, head.0))
                    }
                    FrameFolio::Untracked | FrameFolio::NoPage => None,
                };
                last = found.filter(|(f, _)| f.size.is_huge());
                out.push(found.map(|(f, _)| f));
                frames.push(found.map(|(_, head)| Pfn(head)));
            }
            i = j;
        }
        Ok(())
    }
}

/// The kpageflags entries read during one pass. Each `kpageflags` entry the kernel computes
/// costs it a `stable_page_flags()` of the frame (fs/proc/page.c `kpageflags_read()`), so
/// what is read is what is needed: the frames the pagemap of each range showed, read ahead
/// in runs of nearby frames ([`FlagBlocks::prefetch`], one `pread` per run, so a buffer whose
/// frames are contiguous costs one read per run and a scattered one no more than one per
/// page), each run one frame longer so that a THP's 513-entry look
/// ([`folio_of_frame`]) is served from it. Reads that no run covers come from aligned
/// blocks of 512 frames as before (4 KiB of the file). Reading whole blocks for every frame
/// made a pass over 32 k scattered base pages read 1.7 M entries (issue 14's profile).
/// Kept for one pass only: flags change as pages are freed, split and collapsed, and a
/// pass's lookups are a snapshot of one instant anyway.
#[derive(Debug, Default)]
struct FlagBlocks {
    blocks: HashMap<u64, Vec<PageFlags>>,
    /// Read-ahead runs by first frame.
    runs: std::collections::BTreeMap<u64, Vec<PageFlags>>,
    /// Scratch for [`Self::prefetch`].
    want: Vec<u64>,
}

impl FlagBlocks {
    const BLOCK: u64 = HPAGE_PMD_NR;
    /// Frames between two wanted ones that are read rather than split into two reads.
    const GAP: u64 = 8;
    /// The longest run read at once (64 KiB of the file).
    const MAX_RUN: u64 = 8192;

    /// Reads ahead the flags of the frames `entries` show, in runs (see the type's docs).
    /// A failed read is left to the reads that need it, which report it.
    fn prefetch(&mut self, kpf: &Kpageflags, pfns: impl Iterator<Item = u64>) {
        self.want.clear();
        self.want.extend(pfns);
        if self.want.is_empty() {
            return;
        }
        self.want.sort_unstable();
        self.want.dedup();
        let mut k = 0;
        while k < self.want.len() {
            let start = self.want[k];
            let mut end = start + 1;
            k += 1;
            while k < self.want.len()
                && self.want[k] <= end + Self::GAP
                && self.want[k] < start + Self::MAX_RUN
            {
                end = self.want[k] + 1;
                k += 1;
            }
            // One more: a THP head's look reads the frame after its 512.
            let end = end + 1;
            if self.covered(start, end - start).is_some() {
                continue;
            }
            if let Ok(flags) = kpf.read(start, end - start) {
                self.runs.insert(start, flags);
            }
        }
    }

    /// The flags of `[start, start + count)` when one read-ahead run holds them all.
    fn covered(&self, start: u64, count: u64) -> Option<&[PageFlags]> {
        let (&s, run) = self.runs.range(..=start).next_back()?;
        let from = usize::try_from(start - s).ok()?;
        let to = from.checked_add(usize::try_from(count).ok()?)?;
        run.get(from..to)
    }

    /// `count` entries from frame `start`: from a read-ahead run that holds them all, else
    /// from cached blocks where the range spans at most two of them (what [`folio_of_frame`]
    /// asks for a 4 KiB or 2 MiB folio), else straight from the file (the ends of a 1 GiB
    /// page). Short at the end of the file, as the file is.
    fn read(
        &mut self,
        kpf: &Kpageflags,
        start: u64,
        count: u64,
    ) -> Result<Vec<PageFlags>, KpageflagsError> {
        if let Some(f) = self.covered(start, count) {
            return Ok(f.to_vec());
        }
        if count > 2 * Self::BLOCK {
            return kpf.read(start, count);
        }
        let end = start.saturating_add(count);
        let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        let mut at = start;
        while at < end {
            let b = at & !(Self::BLOCK - 1);
            let blk = match self.blocks.entry(b) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => e.insert(kpf.read(b, Self::BLOCK)?),
            };
            // Offsets are below BLOCK (512): they fit a usize.
            let from = usize::try_from(at - b).unwrap_or(usize::MAX);
            let to = usize::try_from(end.min(b + Self::BLOCK) - b).unwrap_or(usize::MAX);
            if from >= blk.len() {
                break;
            }
            out.extend_from_slice(&blk[from..to.min(blk.len())]);
            if to > blk.len() {
                break;
            }
            at = b + Self::BLOCK;
        }
        Ok(out)
    }

    /// Forgets what was read (a new pass).
    fn clear(&mut self) {
        self.blocks.clear();
        self.runs.clear();
    }
}

/// The huge folio at frame `head` (of `size`), seen through virtual page `vpn` mapping frame
/// `pfn`, if this process maps it whole at its natural alignment: its head's virtual page
/// aligned to `size` and mapping the head frame, and for a THP every page mapping its frame
/// (hugetlb pages are mapped whole or not at all: their VMAs are aligned to the huge page
/// size and fault in whole pages, mm/hugetlb.c).
fn mapped_whole(
    pm: &Pagemap,
    vpn: Vpn,
    pfn: u64,
    head: u64,
    size: PageSize,
    hugetlb: bool,
) -> Result<Option<FolioOf>, ()> {
    let Some(head_vpn) = vpn.0.checked_sub(pfn - head) else {
        return Ok(None);
    };
    if size.head(Vpn(head_vpn)).0 != head_vpn {
        return Ok(None);
    }
    let n = if hugetlb { 1 } else { size.nr_pages().0 };
    let entries = pm.read_range(Vpn(head_vpn), n).map_err(|_| ())?;
    let whole = (0..n)
        .zip(entries)
        .all(|(i, e): (u64, PagemapEntry)| e.pfn().is_some_and(|p| p.0 == head + i));
    Ok(whole.then_some(FolioOf {
        head: Vpn(head_vpn),
        size,
        hugetlb,
    }))
}

/// Whether `<proc_root>/self/pagemap` shows the frame of a page of this process's stack.
fn self_pfns_visible(proc_root: &Path) -> bool {
    let probe = std::hint::black_box([1u8; 64]);
    let addr = std::ptr::addr_of!(probe) as u64;
    Pagemap::open_path(proc_root.join("self/pagemap"), std::process::id())
        .and_then(|pm| pm.read_range(Vpn::from_addr(addr), 1))
        .is_ok_and(|e| pfn_visibility(&e) == PfnVisibility::Visible)
}

impl FolioMap for ProcFolios {
    fn resolve(&mut self, pid: u32, vpns: &[Vpn], out: &mut Vec<Option<FolioOf>>) -> FolioMethod {
        let mut frames = Vec::new();
        self.resolve_frames(pid, vpns, out, &mut frames)
    }

    fn resolve_frames(
        &mut self,
        pid: u32,
        vpns: &[Vpn],
        out: &mut Vec<Option<FolioOf>>,
        frames: &mut Vec<Option<Pfn>>,
    ) -> FolioMethod {
        let n = out.len();
        match self.method {
            FolioMethod::Kpageflags => self.resolve_kpageflags(pid, vpns, out, frames),
            FolioMethod::Smaps => self.resolve_smaps(pid, vpns, out),
            FolioMethod::Unavailable => out.extend(vpns.iter().map(|_| None)),
        }
        if self.method != FolioMethod::Kpageflags {
            // smaps knows no frames.
            frames.extend(std::iter::repeat_n(None, out.len() - n));
        }
        self.method
    }

    fn forget(&mut self, pid: u32) {
        self.smaps.remove(&pid);
        self.pagemaps.remove(&pid);
        self.bases.forget(pid);
    }

    fn begin_pass(&mut self) {
        self.pass += 1;
        self.pagemaps.clear();
        self.blocks.clear();
        self.bases.begin_pass();
    }
}

/// The base pages of the last pass and of this one, `(pid, vpn) -> frame`: a page that maps
/// the same frame as when kpageflags last said it was a base page still is one, so its flags
/// are not read again (in a steady state, the hot set re-observed every pass, this is what
/// keeps a pass from reading kpageflags at all). A frame cannot turn into part of a huge
/// folio while it stays mapped at the same address: khugepaged collapses into a newly
/// allocated huge page (mm/khugepaged.c `collapse_huge_page()` copies into a fresh folio, and
/// the page tables then map other frames), and large folios are never formed in place. A
/// page seen in neither of the two passes is forgotten, and the whole cache every
/// [`BaseCache::FLUSH_PASSES`] passes, so that nothing rests on an entry for long.
#[derive(Debug, Default)]
struct BaseCache {
    // Fx: tens of thousands of lookups a pass, keys that are no attacker's to choose.
    prev: rustc_hash::FxHashMap<(u32, u64), u64>,
    cur: rustc_hash::FxHashMap<(u32, u64), u64>,
    passes: u64,
}

impl BaseCache {
    /// Passes between two flushes (20 DAMON reads at the default 500 ms: 10 s).
    const FLUSH_PASSES: u64 = 20;

    fn is_base(&self, pid: u32, vpn: Vpn, pfn: u64) -> bool {
        let k = (pid, vpn.0);
        self.cur.get(&k).or_else(|| self.prev.get(&k)) == Some(&pfn)
    }

    fn keep(&mut self, pid: u32, vpn: Vpn, pfn: u64) {
        self.cur.insert((pid, vpn.0), pfn);
    }

    fn forget(&mut self, pid: u32) {
        self.prev.retain(|k, _| k.0 != pid);
        self.cur.retain(|k, _| k.0 != pid);
    }

    fn begin_pass(&mut self) {
        self.passes += 1;
        std::mem::swap(&mut self.prev, &mut self.cur);
        self.cur.clear();
        if self.passes.is_multiple_of(Self::FLUSH_PASSES) {
            self.prev.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::kpageflags::{KPF_COMPOUND_HEAD, KPF_COMPOUND_TAIL, KPF_HUGE, KPF_THP};
    use crate::read::smaps::parse_smaps;
    use std::os::unix::fs::FileExt;

    fn vma(start: u64, end: u64, kernel_kb: u64, anon_huge_kb: u64, flags: &str) -> SmapsVma {
        let text = format!(
            "{:x}-{:x} rw-p 00000000 00:00 0 \nSize: {} kB\nKernelPageSize: {kernel_kb} kB\n\
             AnonHugePages: {anon_huge_kb} kB\nVmFlags: {flags} \n",
            start << 12,
            end << 12,
            (end - start) * 4
        );
        parse_smaps(&text).unwrap().remove(0)
    }

    #[test]
    fn smaps_rules_per_vma() {
        // 2 MiB hugetlb, 1 GiB hugetlb, a size the engine does not track.
        let h = vma(1024, 2048, 2048, 0, "rd wr ht");
        assert_eq!(
            folio_in_vma(&h, Vpn(1500)),
            Some(FolioOf::sized(Vpn(1500), PageSize::Huge2M, true))
        );
        let g = vma(1 << 18, 1 << 19, 1_048_576, 0, "rd wr ht");
        assert_eq!(folio_in_vma(&g, Vpn(300_000)).unwrap().head, Vpn(1 << 18));
        assert_eq!(folio_in_vma(&vma(0, 16, 64, 0, "ht"), Vpn(3)), None);
        // No PMD-mapped bytes: base pages.
        let b = vma(100, 5000, 4, 0, "rd wr");
        assert_eq!(folio_in_vma(&b, Vpn(700)), Some(FolioOf::base(Vpn(700))));
        // Pages 100..1636: aligned chunks 512..1024 and 1024..1536 (2 chunks = 4096 kB).
        let all = vma(100, 1636, 4, 4096, "rd wr");
        assert_eq!(
            folio_in_vma(&all, Vpn(1100)),
            Some(FolioOf::sized(Vpn(1100), PageSize::Huge2M, false))
        );
        assert_eq!(folio_in_vma(&all, Vpn(511)), Some(FolioOf::base(Vpn(511))));
        assert_eq!(
            folio_in_vma(&all, Vpn(1536)),
            Some(FolioOf::base(Vpn(1536)))
        );
        let some = vma(100, 1636, 4, 2048, "rd wr");
        assert_eq!(folio_in_vma(&some, Vpn(1100)), None, "which chunk is huge?");
        assert_eq!(folio_in_vma(&some, Vpn(200)), Some(FolioOf::base(Vpn(200))));
        let odd = vma(100, 1636, 4, 8192, "rd wr");
        assert_eq!(
            folio_in_vma(&odd, Vpn(200)),
            None,
            "more than fits: read mid-change"
        );
    }

    fn write_at(path: &Path, words: &[(u64, u64)]) {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(path)
            .unwrap();
        for &(at, w) in words {
            f.write_all_at(&w.to_ne_bytes(), at * 8).unwrap();
        }
    }

    const PRESENT: u64 = 1 << 63;

    #[test]
    fn kpageflags_method_needs_the_folio_mapped_whole_and_aligned() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("7")).unwrap();
        // Frames 4096..4608 a THP, 8192..8704 a hugetlb page, 100 a base page.
        let mut flags = vec![(100, 0)];
        for (head, kind) in [(4096u64, 1 << KPF_THP), (8192, 1 << KPF_HUGE)] {
            flags.push((head, 1 << KPF_COMPOUND_HEAD | kind));
            flags.extend((head + 1..head + 512).map(|p| (p, 1 << KPF_COMPOUND_TAIL | kind)));
        }
        write_at(&root.join("kpageflags"), &flags);
        // Virtual 1024.. maps the THP whole; 2048.. maps it again but for one page; 3073..
        // maps it one page off its alignment; 4096 maps the hugetlb head only (its other
        // pages are not present yet); 5000 the base page; 6000 a hidden frame.
        let mut pm: Vec<(u64, u64)> = (0..512).map(|i| (1024 + i, PRESENT | (4096 + i))).collect();
        pm.extend(
            (0..512)
                .filter(|&i| i != 7)
                .map(|i| (2048 + i, PRESENT | (4096 + i))),
        );
        pm.extend((0..512).map(|i| (3073 + i, PRESENT | (4096 + i))));
        pm.extend([(4096, PRESENT | 8192), (4300, PRESENT | 8396)]);
        pm.extend([(5000, PRESENT | 100), (6000, PRESENT)]);
        write_at(&root.join("7/pagemap"), &pm);
        let mut f = ProcFolios::with_method(root, FolioMethod::Kpageflags);
        let vpns: Vec<Vpn> = [1024, 1500, 2048, 2100, 3073, 3200, 4300, 5000, 6000, 7000]
            .iter()
            .map(|&v| Vpn(v))
            .collect();
        let mut out = Vec::new();
        assert_eq!(f.resolve(7, &vpns, &mut out), FolioMethod::Kpageflags);
        let thp = Some(FolioOf::sized(Vpn(1024), PageSize::Huge2M, false));
        assert_eq!(out[..2], [thp, thp]);
        assert_eq!(
            out[2..4],
            [None, None],
            "mapped in part: the kernel would split it"
        );
        assert_eq!(out[4..6], [None, None], "mapped off its alignment");
        assert_eq!(
            out[6],
            Some(FolioOf::sized(Vpn(4300), PageSize::Huge2M, true))
        );
        assert_eq!(out[7], Some(FolioOf::base(Vpn(5000))));
        assert_eq!(out[8], None, "a hidden frame");
        assert_eq!(
            out[9],
            Some(FolioOf::base(Vpn(7000))),
            "not present: looked up, absent"
        );
        assert_eq!(f.stats().read_failures, 0);
        // A process that is gone: unknown, counted.
        out.clear();
        f.resolve(8, &vpns[..1], &mut out);
        assert_eq!(out, [None]);
        assert_eq!(f.stats().read_failures, 1);
    }

    #[test]
    fn smaps_is_read_once_a_pass_and_forgotten_with_its_process() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("9")).unwrap();
        let text = |kb: u64| {
            format!(
                "200000-600000 rw-p 00000000 00:00 0 \nSize: 4096 kB\nKernelPageSize: 4 kB\n\
                 AnonHugePages: {kb} kB\nVmFlags: rd wr \n"
            )
        };
        std::fs::write(root.join("9/smaps"), text(0)).unwrap();
        let mut f = ProcFolios::with_method(root, FolioMethod::Smaps);
        let get = |f: &mut ProcFolios| {
            let mut out = Vec::new();
            f.resolve(9, &[Vpn(0x300), Vpn(0x700)], &mut out);
            out
        };
        f.begin_pass();
        assert_eq!(get(&mut f), [Some(FolioOf::base(Vpn(0x300))), None]);
        // The process collapses its memory into THPs: seen from the next pass on.
        std::fs::write(root.join("9/smaps"), text(4096)).unwrap();
        assert_eq!(get(&mut f)[0], Some(FolioOf::base(Vpn(0x300))));
        assert_eq!(f.stats().smaps_reads, 1);
        f.begin_pass();
        assert_eq!(
            get(&mut f)[0],
            Some(FolioOf::sized(Vpn(0x300), PageSize::Huge2M, false))
        );
        f.forget(9);
        std::fs::remove_file(root.join("9/smaps")).unwrap();
        assert_eq!(get(&mut f), [None, None]);
        assert_eq!(f.stats().smaps_reads, 3);
        assert_eq!(f.stats().read_failures, 1);
    }

    #[test]
    fn probing_picks_what_this_host_allows() {
        let dir = tempfile::tempdir().unwrap();
        let none = ProcFolios::new(dir.path());
        assert_eq!(none.method(), FolioMethod::Unavailable);
        let mut out = Vec::new();
        let mut none = none;
        assert_eq!(
            none.resolve(1, &[Vpn(1), Vpn(2)], &mut out),
            FolioMethod::Unavailable
        );
        assert_eq!(out, [None, None]);
        // The real /proc: smaps of ourselves is always readable, kpageflags only as root.
        let real = ProcFolios::new(Path::new("/proc"));
        let root_like = std::fs::File::open("/proc/kpageflags").is_ok();
        if root_like {
            assert_ne!(real.method(), FolioMethod::Unavailable);
        } else {
            assert_eq!(real.method(), FolioMethod::Smaps);
        }
        assert_eq!(real.method().to_string(), real.method().name());
    }
}
