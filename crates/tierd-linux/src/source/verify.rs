//! Access verification of promotion candidates with idle page tracking.
//!
//! DAMON reports regions, and every page of an accessed region is observed: where a region
//! straddles the edge of a hot set, its cold pages earn the hot pages' counts and would be
//! promoted with them (lab `memcached`: thousands of never-read item pages promoted beside the
//! hot ones). Before a candidate that came from such a source is moved, its own accessed bit
//! is asked: the first time it is planned, its frame is marked idle
//! (`/sys/kernel/mm/page_idle/bitmap`, Documentation/admin-guide/mm/idle_page_tracking.rst) and
//! the page is deferred; when it is planned again at least `window` later, the bit tells
//! whether the page itself was touched since (mm/page_idle.c `page_idle_bitmap_read()`: a
//! page is idle unless one of its PTEs was young or it was accessed through a syscall). Touched
//! pages move; untouched ones are refused and must earn their readiness again, their question
//! left open (the frame stays marked), so that the next plan asks whether the page was touched
//! at any time since the first mark.
//!
//! Only the candidates are asked, never the whole address space, so the cost follows what is
//! promoted, not the memory size. A huge folio is asked through its head frame: the kernel
//! marks and tests the folio (`page_idle_get_folio()`).
//!
//! Interference with DAMON (Documentation/mm/damon/design.rst warns that the two share
//! `PG_idle`): DAMON's own sampling sets `PG_idle` on the one page per region it checks
//! (mm/damon/ops-common.c `damon_ptep_mkold()`), so an access to a candidate that DAMON
//! happens to sample during the window, with no access after it, reads as idle; for a region
//! of N pages sampled every `sample_us` that is a chance of about `window / (N x sample_us)`
//! per window, and such a page is only refused once. The marks, in turn, hide from DAMON the
//! accesses of the marked pages made before the mark within the current sample.
//!
//! Fail-open: a page whose frame cannot be read (not present, PFN hidden, process gone) is
//! passed to the mover, which reports what really happened to it; a frame the kernel cannot
//! mark (not on an LRU list yet) reads as accessed.

use std::collections::BTreeMap;
use std::path::Path;

use rustc_hash::FxHashMap;
use tierd_engine::types::{Nanos, Pfn, Vpn};

use super::idle::{IdleBitmap, IdleError};
use crate::pagemap::Pagemap;

/// What the verifier says of one candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Move it: touched since marked, or not verifiable (the mover will tell).
    Move,
    /// Its frame was just marked idle (or its window is not over): ask again later.
    Deferred,
    /// Not touched for a whole window since marked: do not move it.
    Untouched,
}

/// Counters for `/status` and `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifyStats {
    /// Frames marked idle (a candidate's first question, or a new frame).
    pub marked: u64,
    /// Candidates asked again within their window (still deferred).
    pub waiting: u64,
    /// Candidates found touched: moved.
    pub touched: u64,
    /// Candidates found untouched: refused.
    pub untouched: u64,
    /// Candidates passed unasked (no frame: not present, hidden, process gone).
    pub unverifiable: u64,
    /// Pending questions dropped because their page was not planned again in time.
    pub expired: u64,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    pfn: Pfn,
    marked_at: Nanos,
}

/// Pending questions older than this many windows are forgotten (the page stopped being
/// planned: its record was consumed and never earned again).
const EXPIRE_WINDOWS: u64 = 20;
/// At most this many pending questions (a bound on memory whatever the input); over it the
/// oldest half is dropped.
const MAX_PENDING: usize = 1 << 20;

/// The verifier: the bitmap, and the frames marked idle per (pid, head vpn).
#[derive(Debug)]
pub struct AccessVerifier {
    bitmap: IdleBitmap,
    window: Nanos,
    pending: FxHashMap<(u32, u64), Pending>,
    stats: VerifyStats,
}

impl AccessVerifier {
    /// Opens the bitmap under `sys_root`.
    ///
    /// # Errors
    /// [`IdleError::Open`] when idle page tracking is absent or not permitted.
    pub fn open(sys_root: &Path, window: Nanos) -> Result<Self, IdleError> {
        Ok(Self::with_bitmap(IdleBitmap::open(sys_root)?, window))
    }

    /// A verifier over an open bitmap (tests use a regular file).
    #[must_use]
    pub fn with_bitmap(bitmap: IdleBitmap, window: Nanos) -> Self {
        AccessVerifier {
            bitmap,
            window,
            pending: FxHashMap::default(),
            stats: VerifyStats::default(),
        }
    }

    /// The counters so far.
    #[must_use]
    pub fn stats(&self) -> VerifyStats {
        self.stats
    }

    /// Pending questions.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The verdict on each candidate `(pid, head vpn)`, in order. `pagemap(pid)` opens the
    /// process's pagemap (`None`: gone or not readable, its pages pass unasked).
    ///
    /// # Errors
    /// [`IdleError::Io`] when the bitmap cannot be written or read: the caller should stop
    /// verifying (and move the candidates) rather than refuse them.
    pub fn check(
        &mut self,
        now: Nanos,
        pages: &[(u32, Vpn)],
        mut pagemap: impl FnMut(u32) -> Option<Pagemap>,
    ) -> Result<Vec<Verdict>, IdleError> {
        self.expire(now);
        let mut out = vec![Verdict::Move; pages.len()];
        // The frames, read per process (one pread per page: candidates are scattered).
        let mut by_pid: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, (pid, _)) in pages.iter().enumerate() {
            by_pid.entry(*pid).or_default().push(i);
        }
        let mut frames: Vec<Option<Pfn>> = vec![None; pages.len()];
        for (pid, idx) in by_pid {
            let Some(pm) = pagemap(pid) else { continue };
            for i in idx {
                frames[i] = pm
                    .read_range(pages[i].1, 1)
                    .ok()
                    .and_then(|e| e.first().and_then(|e| e.pfn()));
            }
        }
        let (mut to_mark, mut to_read) = (Vec::new(), Vec::new());
        for (i, (&(pid, vpn), pfn)) in pages.iter().zip(&frames).enumerate() {
            let Some(pfn) = *pfn else {
                self.stats.unverifiable += 1;
                continue;
            };
            let key = (pid, vpn.0);
            match self.pending.get(&key) {
                Some(p) if p.pfn == pfn => {
                    if now.saturating_sub(p.marked_at) >= self.window {
                        to_read.push((i, pfn));
                    } else {
                        self.stats.waiting += 1;
                        out[i] = Verdict::Deferred;
                    }
                }
                // Never asked, or the page has another frame now (moved, or faulted anew):
                // ask from now.
                _ => {
                    self.pending.insert(
                        key,
                        Pending {
                            pfn,
                            marked_at: now,
                        },
                    );
                    to_mark.push(pfn);
                    out[i] = Verdict::Deferred;
                }
            }
        }
        if !to_read.is_empty() {
            let pfns: Vec<Pfn> = to_read.iter().map(|(_, p)| *p).collect();
            let idle = self.bitmap.idle_bits(&pfns)?;
            for ((i, _), idle) in to_read.iter().zip(idle) {
                if idle {
                    // The question stays open: the frame is still marked (a read leaves an
                    // idle page idle), so the next time the page is planned the bit says
                    // whether it was touched at any time since the first mark. A page read
                    // less than once per window is not refused again and again for missing
                    // one window; a never-touched one is refused until its question expires.
                    self.stats.untouched += 1;
                    out[*i] = Verdict::Untouched;
                } else {
                    self.pending.remove(&(pages[*i].0, pages[*i].1 .0));
                    self.stats.touched += 1;
                }
            }
        }
        if !to_mark.is_empty() {
            self.bitmap.mark_idle(&to_mark)?;
            self.stats.marked += to_mark.len() as u64;
        }
        Ok(out)
    }

    fn expire(&mut self, now: Nanos) {
        let limit = Nanos(self.window.0.saturating_mul(EXPIRE_WINDOWS));
        let before = self.pending.len();
        self.pending
            .retain(|_, p| now.saturating_sub(p.marked_at) <= limit);
        if self.pending.len() > MAX_PENDING {
            let mut ages: Vec<u64> = self.pending.values().map(|p| p.marked_at.0).collect();
            let mid = ages.len() / 2;
            let (_, cut, _) = ages.select_nth_unstable(mid);
            let cut = *cut;
            self.pending.retain(|_, p| p.marked_at.0 >= cut);
        }
        self.stats.expired += (before - self.pending.len()) as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A pagemap file where page `vpn` maps frame `pfn` (present bit 63, PFN bits 0-54).
    fn pagemap_file(dir: &Path, map: &[(u64, u64)]) -> std::path::PathBuf {
        let path = dir.join("pagemap");
        let max = map.iter().map(|(v, _)| *v).max().unwrap_or(0);
        let mut buf = vec![0u8; usize::try_from((max + 1) * 8).unwrap()];
        for (vpn, pfn) in map {
            let e = (1u64 << 63) | pfn;
            let o = usize::try_from(vpn * 8).unwrap();
            buf[o..o + 8].copy_from_slice(&e.to_ne_bytes());
        }
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&buf)
            .unwrap();
        path
    }

    /// The stand-in bitmap is a regular file: what `mark_idle` writes stays, and the test
    /// plays the kernel by clearing the bit of a page it "touches".
    fn touch(bitmap: &Path, pfn: u64) {
        let mut b = std::fs::read(bitmap).unwrap();
        let o = usize::try_from(pfn / 64 * 8).unwrap();
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[o..o + 8]);
        let v = u64::from_ne_bytes(w) & !(1u64 << (pfn % 64));
        b[o..o + 8].copy_from_slice(&v.to_ne_bytes());
        std::fs::write(bitmap, b).unwrap();
    }

    #[test]
    fn a_candidate_is_deferred_then_moved_if_touched_and_refused_if_not() {
        let dir = tempfile::tempdir().unwrap();
        let pm = pagemap_file(dir.path(), &[(10, 100), (11, 101), (12, 300)]);
        let bm = dir.path().join("bitmap");
        std::fs::write(&bm, vec![0u8; 64]).unwrap();
        let mut v = AccessVerifier::with_bitmap(
            IdleBitmap::open_path(bm.clone()).unwrap(),
            Nanos::from_millis(1000),
        );
        let open = |_pid: u32| Pagemap::open_path(pm.clone(), 7).ok();
        let pages = [(7, Vpn(10)), (7, Vpn(11)), (7, Vpn(12)), (7, Vpn(99))];
        let t0 = Nanos::from_millis(5000);
        let r = v.check(t0, &pages, open).unwrap();
        // Three frames marked; page 99 is not present: passed to the mover unasked.
        assert_eq!(
            r,
            [
                Verdict::Deferred,
                Verdict::Deferred,
                Verdict::Deferred,
                Verdict::Move
            ]
        );
        assert_eq!(v.stats().marked, 3);
        assert_eq!(v.stats().unverifiable, 1);
        // Within the window: still deferred, nothing read.
        let r = v
            .check(
                t0.saturating_add(Nanos::from_millis(500)),
                &pages[..1],
                open,
            )
            .unwrap();
        assert_eq!(r, [Verdict::Deferred]);
        // Page 10 touched (the kernel cleared its bit), 11 not, 12's frame changed.
        touch(&bm, 100);
        let pm2 = pagemap_file(dir.path(), &[(10, 100), (11, 101), (12, 301)]);
        let open2 = |_pid: u32| Pagemap::open_path(pm2.clone(), 7).ok();
        let r = v
            .check(
                t0.saturating_add(Nanos::from_millis(1000)),
                &pages[..3],
                open2,
            )
            .unwrap();
        assert_eq!(r, [Verdict::Move, Verdict::Untouched, Verdict::Deferred]);
        let s = v.stats();
        assert_eq!((s.touched, s.untouched, s.marked), (1, 1, 4));
        // Page 11's question stays open beside page 12's new one.
        assert_eq!(v.pending(), 2);
        // Asked again still untouched: refused again, nothing marked anew.
        let later = t0.saturating_add(Nanos::from_millis(1500));
        let r = v.check(later, &pages[1..2], open2).unwrap();
        assert_eq!(r, [Verdict::Untouched]);
        assert_eq!(v.stats().marked, 4);
        // Touched at last (any time since the first mark): it moves.
        touch(&bm, 101);
        let r = v.check(later, &pages[1..2], open2).unwrap();
        assert_eq!(r, [Verdict::Move]);
        assert_eq!(v.pending(), 1);
    }

    #[test]
    fn questions_not_asked_again_expire() {
        let dir = tempfile::tempdir().unwrap();
        let pm = pagemap_file(dir.path(), &[(1, 5)]);
        let bm = dir.path().join("bitmap");
        std::fs::write(&bm, vec![0u8; 8]).unwrap();
        let mut v = AccessVerifier::with_bitmap(
            IdleBitmap::open_path(bm).unwrap(),
            Nanos::from_millis(100),
        );
        let open = |_pid: u32| Pagemap::open_path(pm.clone(), 1).ok();
        v.check(Nanos::from_millis(0), &[(1, Vpn(1))], open)
            .unwrap();
        assert_eq!(v.pending(), 1);
        v.check(Nanos::from_millis(2001), &[], open).unwrap();
        assert_eq!(v.pending(), 0);
        assert_eq!(v.stats().expired, 1);
    }
}
