//! Idle page tracking: an accessed-bit scan over the pages of the processes in scope.
//!
//! Interface from `Documentation/admin-guide/mm/idle_page_tracking.rst` (mm/page_idle.c):
//! `/sys/kernel/mm/page_idle/bitmap` is an array of u64 words, bit `pfn % 64` of word
//! `pfn / 64` standing for frame `pfn`. Writing a word marks idle the frames whose bits are
//! set (clear bits are left alone); reading it back gives a set bit for a frame that is still
//! idle, a clear bit for one accessed since (or not tracked: only user pages on the LRU are).
//! Reads and writes must be 8-byte aligned multiples (`BITMAP_CHUNK_SIZE`), which `pread`/
//! `pwrite` on whole words respect. It needs `CONFIG_IDLE_PAGE_TRACKING` (the Debian 6.12
//! guest kernel has it unset) and root; PFNs come from pagemap, which shows them only with
//! `CAP_SYS_ADMIN`.
//!
//! One scan ([`IdleTracker::scan`]): read pagemap for the scope, take the present pages'
//! PFNs; for the pages marked by the previous scan that still map the same frame, read their
//! bits: a clear bit is an access, reported as an [`IdleFact`]; then mark every present page
//! idle for the next scan. The first scan reports nothing.
//!
//! Idle tracking and DAMON share `PG_idle`/`PG_young`; run one of them.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tierd_engine::types::{Nanos, Pfn, Vpn};
use tierd_engine::SourceKind;

use super::{AccessedRange, Privileges, SourceName, SourceStatus, CAP_SYS_ADMIN};
use crate::pagemap::{Pagemap, PagemapError, PfnVisibility};

/// The bitmap, relative to the `/sys` root.
pub const BITMAP_PATH: &str = "kernel/mm/page_idle/bitmap";

/// Errors of idle page tracking.
#[derive(Debug, thiserror::Error)]
pub enum IdleError {
    /// The bitmap could not be opened.
    #[error("opening {path}: {source}")]
    Open {
        /// The bitmap file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A read or write of the bitmap failed.
    #[error("{op} {path} at offset {offset}: {source}")]
    Io {
        /// "reading" or "writing".
        op: &'static str,
        /// The bitmap file.
        path: PathBuf,
        /// Byte offset.
        offset: u64,
        /// The OS error.
        source: std::io::Error,
    },
    /// Pagemap failed for a reason other than the process exiting.
    #[error(transparent)]
    Pagemap(#[from] PagemapError),
    /// Pagemap hides PFNs from this process.
    #[error("pid {pid}: {}", PfnVisibility::Hidden.reason().unwrap_or_default())]
    PfnHidden {
        /// The process whose pagemap showed zero PFNs.
        pid: u32,
    },
}

/// Probes idle page tracking: the bitmap exists, can be opened for reading and writing, and
/// we are privileged enough to see PFNs.
#[must_use]
pub fn probe(sys_root: &Path, proc_root: &Path) -> SourceStatus {
    let path = sys_root.join(BITMAP_PATH);
    if !path.exists() {
        return SourceStatus::unavailable(
            SourceName::IdlePage,
            format!(
                "{} absent: kernel built without CONFIG_IDLE_PAGE_TRACKING",
                path.display()
            ),
        );
    }
    if let Err(e) = OpenOptions::new().read(true).write(true).open(&path) {
        return SourceStatus::unavailable(
            SourceName::IdlePage,
            format!(
                "cannot open {} read-write: {e} (needs root)",
                path.display()
            ),
        );
    }
    // pagemap shows PFNs only to CAP_SYS_ADMIN (fs/proc/task_mmu.c pagemap_read(): `show_pfn = file_ns_capable(.., CAP_SYS_ADMIN)`); uid 0
    // without the capability is not enough.
    if !Privileges::read(proc_root).has(CAP_SYS_ADMIN) {
        return SourceStatus::unavailable(
            SourceName::IdlePage,
            "no CAP_SYS_ADMIN: pagemap would show PFNs as 0",
        );
    }
    SourceStatus::available(SourceName::IdlePage, format!("{}", path.display()))
}

/// The idle bitmap file (or a regular file standing in for it in tests: `pread`/`pwrite` on
/// u64 words behave the same, except that a real read also clears bits of accessed pages).
#[derive(Debug)]
pub struct IdleBitmap {
    file: File,
    path: PathBuf,
}

/// Groups frames by bitmap word: word index -> mask of the frames' bits.
fn words_of(pfns: &[Pfn]) -> BTreeMap<u64, u64> {
    let mut words = BTreeMap::new();
    for p in pfns {
        *words.entry(p.0 / 64).or_insert(0u64) |= 1u64 << (p.0 % 64);
    }
    words
}

impl IdleBitmap {
    /// Opens `<sys_root>/kernel/mm/page_idle/bitmap` for reading and writing.
    ///
    /// # Errors
    /// [`IdleError::Open`] when it is absent or not permitted.
    pub fn open(sys_root: &Path) -> Result<Self, IdleError> {
        Self::open_path(sys_root.join(BITMAP_PATH))
    }

    /// Opens a bitmap at an explicit path.
    ///
    /// # Errors
    /// [`IdleError::Open`] when it cannot be opened read-write.
    pub fn open_path(path: PathBuf) -> Result<Self, IdleError> {
        match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => Ok(IdleBitmap { file, path }),
            Err(source) => Err(IdleError::Open { path, source }),
        }
    }

    /// Marks the frames idle, writing only our frames' bits. Words close together are written
    /// with one `pwrite`, the words between them as 0: the kernel leaves the frames of clear
    /// bits alone (mm/page_idle.c `page_idle_bitmap_write()` only acts on set bits), so a zero
    /// word is a no-op there. Returns the number of `pwrite`s.
    ///
    /// # Errors
    /// [`IdleError::Io`] when a write fails.
    pub fn mark_idle(&self, pfns: &[Pfn]) -> Result<usize, IdleError> {
        let words = words_of(pfns);
        let runs = runs(&words, MERGE_GAP);
        for (first, last) in &runs {
            let mut buf = Vec::with_capacity(usize::try_from(last - first + 1).unwrap_or(0) * 8);
            for w in *first..=*last {
                buf.extend(words.get(&w).copied().unwrap_or(0).to_ne_bytes());
            }
            let offset = first * 8;
            self.file
                .write_all_at(&buf, offset)
                .map_err(|source| IdleError::Io {
                    op: "writing",
                    path: self.path.clone(),
                    offset,
                    source,
                })?;
        }
        Ok(runs.len())
    }

    /// Reads the frames' bits: `true` = still idle (not accessed since marked), in the order of
    /// `pfns`. Runs of consecutive words are read with one `pread` (only our words: reading a
    /// word makes the kernel walk the rmap of its idle pages). A word past the end of the file
    /// (frames beyond `max_pfn`) reads as not idle.
    ///
    /// # Errors
    /// [`IdleError::Io`] when a read fails.
    pub fn idle_bits(&self, pfns: &[Pfn]) -> Result<Vec<bool>, IdleError> {
        let words = words_of(pfns);
        let mut values: HashMap<u64, u64> = HashMap::with_capacity(words.len());
        for (first, last) in runs(&words, 1) {
            let n = usize::try_from(last - first + 1).unwrap_or(0);
            let mut buf = vec![0u8; n * 8];
            let offset = first * 8;
            let mut done = 0;
            while done < buf.len() {
                match self.file.read_at(&mut buf[done..], offset + done as u64) {
                    Ok(0) => break,
                    Ok(k) => done += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(source) => {
                        return Err(IdleError::Io {
                            op: "reading",
                            path: self.path.clone(),
                            offset,
                            source,
                        })
                    }
                }
            }
            // Words not read (end of file) stay 0: not idle.
            for (w, b) in (first..).zip(buf.chunks_exact(8)) {
                let mut x = [0u8; 8];
                x.copy_from_slice(b);
                values.insert(w, u64::from_ne_bytes(x));
            }
        }
        Ok(pfns
            .iter()
            .map(|p| values.get(&(p.0 / 64)).copied().unwrap_or(0) & (1u64 << (p.0 % 64)) != 0)
            .collect())
    }
}

/// Words further apart than this are written separately.
const MERGE_GAP: u64 = 8;
/// At most this many words per `pread`/`pwrite` (64 KiB).
const MAX_RUN: u64 = 8192;

/// Splits sorted word indices into runs `(first, last)` whose neighbours are at most `gap`
/// apart and which span at most [`MAX_RUN`] words.
fn runs(words: &BTreeMap<u64, u64>, gap: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &w in words.keys() {
        match out.last_mut() {
            Some((first, last)) if w - *last <= gap && w - *first < MAX_RUN => *last = w,
            _ => out.push((w, w)),
        }
    }
    out
}

/// A virtual range of one process to scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanRange {
    /// The process.
    pub pid: u32,
    /// First virtual page.
    pub start: Vpn,
    /// Number of pages.
    pub pages: u64,
}

/// A page found accessed since the previous scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdleFact {
    /// The process.
    pub pid: u32,
    /// The virtual page.
    pub vpn: Vpn,
    /// Its frame (unchanged since it was marked).
    pub pfn: Pfn,
    /// The scan that saw it.
    pub time: Nanos,
}

/// Counters of one scan. Races (a process exits, a page is remapped) are counted here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdleScanStats {
    /// Present pages with a PFN in scope.
    pub present: u64,
    /// Pages marked by the previous scan still mapping the same frame, whose bits were read.
    pub checked: u64,
    /// Of those, accessed.
    pub accessed: u64,
    /// Pages marked by the previous scan that were unmapped or moved to another frame since.
    pub remapped: u64,
    /// Processes whose pagemap could not be read because they exited.
    pub processes_gone: u64,
    /// `pwrite`s to the bitmap to mark pages idle.
    pub bitmap_writes: u64,
}

/// The result of one scan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdleScan {
    /// Accessed pages.
    pub facts: Vec<IdleFact>,
    /// Counters.
    pub stats: IdleScanStats,
}

/// Scans the scope each period, remembering what it marked idle last time.
#[derive(Debug)]
pub struct IdleTracker {
    proc_root: PathBuf,
    bitmap: IdleBitmap,
    armed: Vec<(u32, Vpn, Pfn)>,
}

impl IdleTracker {
    /// A tracker reading pagemaps under `proc_root` and using `bitmap`.
    #[must_use]
    pub fn new(proc_root: &Path, bitmap: IdleBitmap) -> Self {
        IdleTracker {
            proc_root: proc_root.to_path_buf(),
            bitmap,
            armed: Vec::new(),
        }
    }

    /// Pages marked idle by the last scan.
    #[must_use]
    pub fn armed(&self) -> usize {
        self.armed.len()
    }

    /// One scan at time `now` (see the module docs).
    ///
    /// # Errors
    /// [`IdleError::PfnHidden`] when pagemap hides PFNs; bitmap I/O errors; pagemap errors
    /// other than an exited process (which is counted).
    pub fn scan(&mut self, scope: &[ScanRange], now: Nanos) -> Result<IdleScan, IdleError> {
        let mut stats = IdleScanStats::default();
        let mut current: Vec<(u32, Vpn, Pfn)> = Vec::new();
        for r in scope {
            let before = current.len();
            let mut hidden = 0u64;
            let read = Pagemap::open(&self.proc_root, r.pid).and_then(|pm| {
                pm.visit_range(r.start, r.pages, |vpn, e| match e.pfn() {
                    Some(pfn) => current.push((r.pid, vpn, pfn)),
                    // Present but PFN 0: hidden from us (see pagemap::pfn_visibility).
                    None if e.present() && !e.swapped() => hidden += 1,
                    None => {}
                })
            });
            match read {
                Ok(()) => {}
                Err(e) if e.is_process_gone() => {
                    stats.processes_gone += 1;
                    current.truncate(before);
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
            if hidden > 0 && current.len() == before {
                return Err(IdleError::PfnHidden { pid: r.pid });
            }
        }
        stats.present = current.len() as u64;

        // Read back what the previous scan marked, for pages still on the same frame.
        let now_map: HashMap<(u32, Vpn), Pfn> =
            current.iter().map(|&(p, v, f)| ((p, v), f)).collect();
        let still: Vec<(u32, Vpn, Pfn)> = self
            .armed
            .iter()
            .copied()
            .filter(|&(p, v, f)| now_map.get(&(p, v)) == Some(&f))
            .collect();
        stats.remapped = (self.armed.len() - still.len()) as u64;
        stats.checked = still.len() as u64;
        let pfns: Vec<Pfn> = still.iter().map(|s| s.2).collect();
        let idle = self.bitmap.idle_bits(&pfns)?;
        let facts: Vec<IdleFact> = still
            .iter()
            .zip(idle)
            .filter(|(_, idle)| !idle)
            .map(|(&(pid, vpn, pfn), _)| IdleFact {
                pid,
                vpn,
                pfn,
                time: now,
            })
            .collect();
        stats.accessed = facts.len() as u64;

        let all: Vec<Pfn> = current.iter().map(|c| c.2).collect();
        stats.bitmap_writes = self.bitmap.mark_idle(&all)? as u64;
        self.armed = current;
        Ok(IdleScan { facts, stats })
    }
}

/// Turns idle-tracking facts into accessed ranges for [`super::locate`]: one per accessed
/// base page, with the frame the scan read carried along.
pub fn to_ranges(facts: &[IdleFact], out: &mut Vec<AccessedRange>) {
    out.extend(facts.iter().map(|f| AccessedRange {
        pid: f.pid,
        start: f.vpn,
        nr_pages: 1,
        time: f.time,
        kind: SourceKind::AccessedBitScan,
        accessing_node: None,
        nr_accesses: 0,
        pfn: Some(f.pfn),
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRESENT: u64 = 1 << 63;

    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(dir.path().join("sys/kernel/mm/page_idle")).unwrap();
            // 4 words = PFNs 0..256.
            std::fs::write(dir.path().join("sys").join(BITMAP_PATH), [0u8; 32]).unwrap();
            Fixture { dir }
        }
        fn sys(&self) -> PathBuf {
            self.dir.path().join("sys")
        }
        fn proc_(&self) -> PathBuf {
            self.dir.path().join("proc")
        }
        fn set_pagemap(&self, pid: u32, entries: &[u64]) {
            let d = self.proc_().join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            let b: Vec<u8> = entries.iter().flat_map(|e| e.to_ne_bytes()).collect();
            std::fs::write(d.join("pagemap"), b).unwrap();
        }
        fn word(&self, w: u64) -> u64 {
            let b = std::fs::read(self.sys().join(BITMAP_PATH)).unwrap();
            let s = usize::try_from(w * 8).unwrap();
            u64::from_ne_bytes(b[s..s + 8].try_into().unwrap())
        }
        /// Emulates the kernel clearing the idle bit of an accessed frame.
        fn touch(&self, pfn: u64) {
            let path = self.sys().join(BITMAP_PATH);
            let mut b = std::fs::read(&path).unwrap();
            let s = usize::try_from(pfn / 64 * 8).unwrap();
            let mut w = u64::from_ne_bytes(b[s..s + 8].try_into().unwrap());
            w &= !(1 << (pfn % 64));
            b[s..s + 8].copy_from_slice(&w.to_ne_bytes());
            std::fs::write(&path, b).unwrap();
        }
    }

    #[test]
    fn marks_words_with_only_our_bits() {
        let fx = Fixture::new();
        let bm = IdleBitmap::open(&fx.sys()).unwrap();
        let n = bm.mark_idle(&[Pfn(1), Pfn(3), Pfn(64), Pfn(130)]).unwrap();
        assert_eq!(n, 1, "three neighbouring words in one pwrite");
        assert_eq!(fx.word(0), 0b1010);
        assert_eq!(fx.word(1), 1);
        assert_eq!(fx.word(2), 1 << 2);
        assert_eq!(fx.word(3), 0);
        let bits = bm
            .idle_bits(&[Pfn(3), Pfn(2), Pfn(130), Pfn(10_000)])
            .unwrap();
        assert_eq!(bits, vec![true, false, true, false]);
    }

    #[test]
    fn runs_merge_close_words_only() {
        let w: BTreeMap<u64, u64> = [0, 1, 5, 20, 21, 30_000].iter().map(|&k| (k, 1)).collect();
        assert_eq!(
            runs(&w, 1),
            vec![(0, 1), (5, 5), (20, 21), (30_000, 30_000)]
        );
        assert_eq!(runs(&w, 8), vec![(0, 5), (20, 21), (30_000, 30_000)]);
        let long: BTreeMap<u64, u64> = (0..MAX_RUN + 3).map(|k| (k, 1)).collect();
        assert_eq!(
            runs(&long, 1),
            vec![(0, MAX_RUN - 1), (MAX_RUN, MAX_RUN + 2)]
        );
    }

    #[test]
    fn far_apart_frames_are_separate_writes_and_reads() {
        let fx = Fixture::new();
        // Grow the stand-in to 1000 words.
        std::fs::write(fx.sys().join(BITMAP_PATH), vec![0u8; 8000]).unwrap();
        let bm = IdleBitmap::open(&fx.sys()).unwrap();
        let pfns = [Pfn(5), Pfn(64 * 500 + 7), Pfn(64 * 999 + 63)];
        assert_eq!(bm.mark_idle(&pfns).unwrap(), 3);
        assert_eq!(fx.word(500), 1 << 7);
        assert_eq!(fx.word(999), 1 << 63);
        fx.touch(64 * 500 + 7);
        assert_eq!(bm.idle_bits(&pfns).unwrap(), vec![true, false, true]);
    }

    #[test]
    fn second_scan_reports_pages_whose_bit_was_cleared() {
        let fx = Fixture::new();
        // pid 10: vpn 0x100.. : 3 present pages on PFNs 65, 66, 67, one hole.
        let base = 0x100u64;
        let mut pm = vec![0u64; usize::try_from(base).unwrap()];
        pm.extend([PRESENT | 65, PRESENT | 66, 0, PRESENT | 67]);
        fx.set_pagemap(10, &pm);
        let mut t = IdleTracker::new(&fx.proc_(), IdleBitmap::open(&fx.sys()).unwrap());
        let scope = [ScanRange {
            pid: 10,
            start: Vpn(base),
            pages: 4,
        }];
        let first = t.scan(&scope, Nanos(1)).unwrap();
        assert!(first.facts.is_empty());
        assert_eq!(first.stats.present, 3);
        assert_eq!(fx.word(1), 0b1110);
        fx.touch(66);
        let second = t.scan(&scope, Nanos(2)).unwrap();
        assert_eq!(
            second.facts,
            vec![IdleFact {
                pid: 10,
                vpn: Vpn(base + 1),
                pfn: Pfn(66),
                time: Nanos(2)
            }]
        );
        assert_eq!(second.stats.checked, 3);
        assert_eq!(second.stats.accessed, 1);
        // Re-marked for the next round.
        assert_eq!(fx.word(1), 0b1110);
    }

    #[test]
    fn remapped_pages_and_exited_processes_are_counted() {
        let fx = Fixture::new();
        fx.set_pagemap(5, &[PRESENT | 3, PRESENT | 4]);
        fx.set_pagemap(6, &[PRESENT | 9]);
        let mut t = IdleTracker::new(&fx.proc_(), IdleBitmap::open(&fx.sys()).unwrap());
        let scope = [
            ScanRange {
                pid: 5,
                start: Vpn(0),
                pages: 2,
            },
            ScanRange {
                pid: 6,
                start: Vpn(0),
                pages: 1,
            },
        ];
        t.scan(&scope, Nanos(1)).unwrap();
        assert_eq!(t.armed(), 3);
        // pid 5's second page migrated to PFN 200 (cleared bit must not count); pid 6 exited.
        fx.set_pagemap(5, &[PRESENT | 3, PRESENT | 200]);
        std::fs::remove_dir_all(fx.proc_().join("6")).unwrap();
        fx.touch(3);
        let s = t.scan(&scope, Nanos(2)).unwrap();
        assert_eq!(s.stats.processes_gone, 1);
        assert_eq!(s.stats.remapped, 2);
        assert_eq!(s.facts.len(), 1);
        assert_eq!(s.facts[0].pfn, Pfn(3));
    }

    #[test]
    fn hidden_pfns_are_an_error_with_reason() {
        let fx = Fixture::new();
        fx.set_pagemap(5, &[PRESENT, PRESENT]);
        let mut t = IdleTracker::new(&fx.proc_(), IdleBitmap::open(&fx.sys()).unwrap());
        let err = t
            .scan(
                &[ScanRange {
                    pid: 5,
                    start: Vpn(0),
                    pages: 2,
                }],
                Nanos(0),
            )
            .unwrap_err();
        assert!(matches!(err, IdleError::PfnHidden { pid: 5 }));
        assert!(err.to_string().contains("CAP_SYS_ADMIN"), "{err}");
    }

    #[test]
    fn probe_reasons() {
        let dir = tempfile::tempdir().unwrap();
        let s = probe(dir.path(), dir.path());
        assert!(!s.available);
        assert!(
            s.reason.contains("CONFIG_IDLE_PAGE_TRACKING"),
            "{}",
            s.reason
        );
        let fx = Fixture::new();
        std::fs::create_dir_all(fx.proc_().join("self")).unwrap();
        std::fs::write(
            fx.proc_().join("self/status"),
            "Uid:\t1\t1\t1\t1\nCapEff:\t0\n",
        )
        .unwrap();
        let s = probe(&fx.sys(), &fx.proc_());
        assert!(
            !s.available && s.reason.contains("CAP_SYS_ADMIN"),
            "{}",
            s.reason
        );
        std::fs::write(
            fx.proc_().join("self/status"),
            "Uid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n",
        )
        .unwrap();
        assert!(probe(&fx.sys(), &fx.proc_()).available);
    }

    #[test]
    fn facts_become_single_page_ranges_with_frames() {
        let facts = [
            IdleFact {
                pid: 1,
                vpn: Vpn(7),
                pfn: Pfn(70),
                time: Nanos(5),
            },
            IdleFact {
                pid: 2,
                vpn: Vpn(8),
                pfn: Pfn(80),
                time: Nanos(6),
            },
        ];
        let mut out = Vec::new();
        to_ranges(&facts, &mut out);
        let got: Vec<(u32, u64, u64, Option<Pfn>, Nanos)> = out
            .iter()
            .map(|r| (r.pid, r.start.0, r.nr_pages, r.pfn, r.time))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, 7, 1, Some(Pfn(70)), Nanos(5)),
                (2, 8, 1, Some(Pfn(80)), Nanos(6))
            ]
        );
        assert!(out
            .iter()
            .all(|r| r.kind == SourceKind::AccessedBitScan && r.accessing_node.is_none()));
    }
}
