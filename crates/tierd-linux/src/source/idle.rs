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

use tierd_engine::types::{Nanos, PageRef, Pfn, SpaceId, Vpn};
use tierd_engine::{Observation, SourceKind};

use super::{NodeLookup, Privileges, SourceName, SourceStatus, CAP_SYS_ADMIN};
use crate::pagemap::{pfn_visibility, Pagemap, PagemapError, PfnVisibility};

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

    /// Marks the frames idle: one 8-byte `pwrite` per word, holding only our frames' bits
    /// (the kernel leaves frames of clear bits alone). Returns the number of words written.
    ///
    /// # Errors
    /// [`IdleError::Io`] when a write fails.
    pub fn mark_idle(&self, pfns: &[Pfn]) -> Result<usize, IdleError> {
        let words = words_of(pfns);
        for (&w, &mask) in &words {
            let offset = w * 8;
            self.file
                .write_all_at(&mask.to_ne_bytes(), offset)
                .map_err(|source| IdleError::Io {
                    op: "writing",
                    path: self.path.clone(),
                    offset,
                    source,
                })?;
        }
        Ok(words.len())
    }

    /// Reads the frames' bits: `true` = still idle (not accessed since marked), in the order of
    /// `pfns`. A word past the end of the file (frames beyond `max_pfn`) reads as not idle.
    ///
    /// # Errors
    /// [`IdleError::Io`] when a read fails.
    pub fn idle_bits(&self, pfns: &[Pfn]) -> Result<Vec<bool>, IdleError> {
        let mut values: HashMap<u64, u64> = HashMap::new();
        for &w in words_of(pfns).keys() {
            let offset = w * 8;
            let mut buf = [0u8; 8];
            let mut done = 0;
            while done < 8 {
                match self.file.read_at(&mut buf[done..], offset + done as u64) {
                    Ok(0) => break,
                    Ok(n) => done += n,
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
            values.insert(
                w,
                if done == 8 {
                    u64::from_ne_bytes(buf)
                } else {
                    0
                },
            );
        }
        Ok(pfns
            .iter()
            .map(|p| values.get(&(p.0 / 64)).copied().unwrap_or(0) & (1u64 << (p.0 % 64)) != 0)
            .collect())
    }
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
    /// Bitmap words written to mark pages idle.
    pub words_written: u64,
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
            let entries = match Pagemap::open(&self.proc_root, r.pid)
                .and_then(|pm| pm.read_range(r.start, r.pages))
            {
                Ok(e) => e,
                Err(e) if e.is_process_gone() => {
                    stats.processes_gone += 1;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            if pfn_visibility(&entries) == PfnVisibility::Hidden {
                return Err(IdleError::PfnHidden { pid: r.pid });
            }
            for (i, e) in (0u64..).zip(entries.iter()) {
                if let Some(pfn) = e.pfn() {
                    current.push((r.pid, Vpn(r.start.0 + i), pfn));
                }
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
        stats.words_written = self.bitmap.mark_idle(&all)? as u64;
        self.armed = current;
        Ok(IdleScan { facts, stats })
    }
}

/// Turns idle-tracking facts into engine observations: one per accessed base page, with the
/// frame carried along; pages whose node `lookup` cannot tell (gone) are dropped.
pub fn to_observations(facts: &[IdleFact], mut lookup: impl NodeLookup) -> Vec<Observation> {
    facts
        .iter()
        .filter_map(|f| {
            let page = PageRef {
                pfn: Some(f.pfn),
                ..PageRef::base(SpaceId(f.pid), f.vpn)
            };
            lookup(page).map(|node| Observation {
                page,
                page_node: node,
                accessing_node: None,
                source: SourceKind::AccessedBitScan,
                time: f.time,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierd_engine::types::NodeId;

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
        assert_eq!(n, 3);
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
    fn facts_become_observations_with_frames() {
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
                time: Nanos(5),
            },
        ];
        let obs = to_observations(&facts, |p: PageRef| {
            (p.space == SpaceId(1)).then_some(NodeId(u16::try_from(p.pfn.unwrap().0 / 64).unwrap()))
        });
        assert_eq!(obs.len(), 1);
        assert_eq!(obs[0].page.vpn, Vpn(7));
        assert_eq!(obs[0].page.pfn, Some(Pfn(70)));
        assert_eq!(obs[0].page_node, NodeId(1));
        assert_eq!(obs[0].source, SourceKind::AccessedBitScan);
        assert_eq!(obs[0].accessing_node, None);
    }
}
