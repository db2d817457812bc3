//! `/proc/PID/pagemap`: one 64-bit entry per virtual page of a process.
//!
//! Format from `Documentation/admin-guide/mm/pagemap.rst` (fs/proc/task_mmu.c
//! `pagemap_read()`, `PM_*` bits):
//!
//! | bits  | meaning                                                        |
//! |-------|----------------------------------------------------------------|
//! | 0-54  | page frame number if present                                   |
//! | 0-4   | swap type if swapped                                           |
//! | 5-54  | swap offset if swapped                                         |
//! | 55    | soft-dirty                                                     |
//! | 56    | page exclusively mapped (since 4.2)                            |
//! | 57    | write-protected by userfaultfd (since 5.13)                    |
//! | 61    | file page or shared anonymous page                             |
//! | 62    | swapped                                                        |
//! | 63    | present                                                        |
//!
//! The entry for virtual page `vpn` sits at byte offset `vpn * 8`; reads must be 8-byte aligned
//! multiples. Since 4.0 the PFN needs `CAP_SYS_ADMIN`, and since 4.2 it reads as 0 for
//! everybody else (the other bits stay valid): [`pfn_visibility`] detects that case so a caller
//! can report why the PFN-based sources (idle page tracking) cannot run.
//!
//! The decoder ([`PagemapEntry`], [`decode_entries`]) is separate from the reader
//! ([`Pagemap`]), which takes the `/proc` root so tests can point it at a fake file.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tierd_engine::types::{Pfn, Vpn};

/// Bytes per pagemap entry.
pub const ENTRY_BYTES: u64 = 8;
/// Entries read per `pread` when a range is large (64 KiB per read).
const CHUNK_ENTRIES: u64 = 8192;

const PFN_MASK: u64 = (1 << 55) - 1;
const SWAP_TYPE_MASK: u64 = 0x1f;
const SOFT_DIRTY: u64 = 1 << 55;
const EXCLUSIVE: u64 = 1 << 56;
const UFFD_WP: u64 = 1 << 57;
const FILE_SHARED: u64 = 1 << 61;
const SWAPPED: u64 = 1 << 62;
const PRESENT: u64 = 1 << 63;

/// Errors of the pagemap reader and decoder.
#[derive(Debug, thiserror::Error)]
pub enum PagemapError {
    /// The file could not be opened (the process is gone, or permission denied).
    #[error("opening {path}: {source}")]
    Open {
        /// The pagemap file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A read failed.
    #[error("reading {path} at offset {offset}: {source}")]
    Read {
        /// The pagemap file.
        path: PathBuf,
        /// The byte offset of the read.
        offset: u64,
        /// The OS error.
        source: std::io::Error,
    },
    /// A buffer whose length is not a multiple of 8 bytes.
    #[error("pagemap data of {len} bytes is not a whole number of 8-byte entries")]
    Misaligned {
        /// The buffer length.
        len: usize,
    },
    /// The range does not fit the address space (`vpn * 8` overflows).
    #[error("virtual page range {start:#x}+{count} is out of range")]
    Range {
        /// First virtual page.
        start: u64,
        /// Number of pages.
        count: u64,
    },
}

impl PagemapError {
    /// Whether the error means the process has gone away (an expected race, to count and not
    /// raise): the file vanished (`ENOENT`/`ESRCH`), or a read returned nothing because the
    /// mm was torn down.
    #[must_use]
    pub fn is_process_gone(&self) -> bool {
        let code = match self {
            PagemapError::Open { source, .. } | PagemapError::Read { source, .. } => {
                source.raw_os_error()
            }
            _ => None,
        };
        matches!(code, Some(2 | 3))
    }
}

/// One decoded pagemap entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct PagemapEntry(pub u64);

impl PagemapEntry {
    /// Bit 63: the page is present in RAM.
    #[must_use]
    pub fn present(self) -> bool {
        self.0 & PRESENT != 0
    }
    /// Bit 62: the page is swapped out.
    #[must_use]
    pub fn swapped(self) -> bool {
        self.0 & SWAPPED != 0
    }
    /// Bit 61: a file page or a shared anonymous page.
    #[must_use]
    pub fn file_or_shared_anon(self) -> bool {
        self.0 & FILE_SHARED != 0
    }
    /// Bit 57: write-protected by userfaultfd.
    #[must_use]
    pub fn uffd_wp(self) -> bool {
        self.0 & UFFD_WP != 0
    }
    /// Bit 56: mapped by this process only.
    #[must_use]
    pub fn exclusive(self) -> bool {
        self.0 & EXCLUSIVE != 0
    }
    /// Bit 55: soft-dirty (written since the last `clear_refs` write of 4).
    #[must_use]
    pub fn soft_dirty(self) -> bool {
        self.0 & SOFT_DIRTY != 0
    }
    /// Bits 0-54 as they are, whatever they mean.
    #[must_use]
    pub fn raw_pfn_field(self) -> u64 {
        self.0 & PFN_MASK
    }
    /// The frame of a present page: `None` when the page is not present, swapped, or the PFN
    /// reads as 0 (hidden from a reader without `CAP_SYS_ADMIN`; PFN 0 is never a user page).
    #[must_use]
    pub fn pfn(self) -> Option<Pfn> {
        let raw = self.raw_pfn_field();
        (self.present() && !self.swapped() && raw != 0).then_some(Pfn(raw))
    }
    /// The swap type (bits 0-4) of a swapped page.
    #[must_use]
    pub fn swap_type(self) -> Option<u8> {
        // The mask keeps 5 bits, so the value fits a u8.
        self.swapped()
            .then(|| u8::try_from(self.0 & SWAP_TYPE_MASK).unwrap_or(u8::MAX))
    }
    /// The swap offset (bits 5-54) of a swapped page.
    #[must_use]
    pub fn swap_offset(self) -> Option<u64> {
        self.swapped().then_some((self.0 & PFN_MASK) >> 5)
    }
}

/// Decodes native-endian 64-bit entries (pagemap is written in the kernel's byte order, which
/// is the reader's).
///
/// # Errors
/// [`PagemapError::Misaligned`] when `bytes` is not a whole number of entries.
pub fn decode_entries(bytes: &[u8]) -> Result<Vec<PagemapEntry>, PagemapError> {
    ne_words(bytes)
        .map(|w| w.map(PagemapEntry).collect())
        .ok_or(PagemapError::Misaligned { len: bytes.len() })
}

/// The native-endian 64-bit words of `bytes`, or `None` when it is not a whole number of
/// them: the entry format of `/proc/PID/pagemap` and `/proc/kpageflags` alike.
pub(crate) fn ne_words(bytes: &[u8]) -> Option<impl Iterator<Item = u64> + '_> {
    bytes.len().is_multiple_of(8).then(|| {
        bytes.chunks_exact(8).map(|c| {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            u64::from_ne_bytes(w)
        })
    })
}

/// `pread` into `buf` from `offset` until it is full or the file ends, retrying on `EINTR`;
/// the bytes read, or the offset that failed and why. Shared by the 8-byte-entry files
/// (`pagemap`, `kpageflags`), whose reads may come back short.
pub(crate) fn pread_full(
    file: &File,
    buf: &mut [u8],
    offset: u64,
) -> Result<usize, (u64, std::io::Error)> {
    let mut done = 0;
    while done < buf.len() {
        let at = offset + done as u64;
        match file.read_at(&mut buf[done..], at) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err((at, e)),
        }
    }
    Ok(done)
}

/// Whether pagemap shows PFNs to this reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PfnVisibility {
    /// At least one present page showed a non-zero PFN.
    Visible,
    /// Present pages were seen and every one read PFN 0: the kernel hides PFNs from readers
    /// without `CAP_SYS_ADMIN` (pagemap.rst, "since 4.2 ... zeroed").
    Hidden,
    /// No present page in the entries: nothing to tell from.
    Unknown,
}

impl PfnVisibility {
    /// A one-line reason for status output, for the hidden case.
    #[must_use]
    pub fn reason(self) -> Option<&'static str> {
        match self {
            PfnVisibility::Hidden => {
                Some("pagemap shows PFNs as 0: reading physical frame numbers needs CAP_SYS_ADMIN")
            }
            _ => None,
        }
    }
}

/// Tells from decoded entries whether PFNs are visible.
#[must_use]
pub fn pfn_visibility(entries: &[PagemapEntry]) -> PfnVisibility {
    let mut seen_present = false;
    for e in entries {
        if e.present() && !e.swapped() {
            if e.raw_pfn_field() != 0 {
                return PfnVisibility::Visible;
            }
            seen_present = true;
        }
    }
    if seen_present {
        PfnVisibility::Hidden
    } else {
        PfnVisibility::Unknown
    }
}

/// An open `/proc/PID/pagemap`.
#[derive(Debug)]
pub struct Pagemap {
    file: File,
    path: PathBuf,
    pid: u32,
}

impl Pagemap {
    /// Opens `<proc_root>/<pid>/pagemap`.
    ///
    /// # Errors
    /// [`PagemapError::Open`] when the file cannot be opened.
    pub fn open(proc_root: &Path, pid: u32) -> Result<Self, PagemapError> {
        let path = proc_root.join(pid.to_string()).join("pagemap");
        Self::open_path(path, pid)
    }

    /// Opens a pagemap file at an explicit path (a fixture, or `/proc/self/pagemap`).
    ///
    /// # Errors
    /// [`PagemapError::Open`] when the file cannot be opened.
    pub fn open_path(path: PathBuf, pid: u32) -> Result<Self, PagemapError> {
        match File::open(&path) {
            Ok(file) => Ok(Pagemap { file, path, pid }),
            Err(source) => Err(PagemapError::Open { path, source }),
        }
    }

    /// The process this pagemap belongs to.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Reads the entries of `count` virtual pages starting at `start`. Pages past the end of
    /// the file (a short read) are returned as empty entries (not present), as the kernel
    /// reports unmapped holes. The result holds `count` entries (8 bytes each): for large
    /// ranges use [`Self::visit_range`], which reads in 64 KiB chunks.
    ///
    /// # Errors
    /// [`PagemapError::Read`] on an I/O error, [`PagemapError::Range`] when the range overflows.
    pub fn read_range(&self, start: Vpn, count: u64) -> Result<Vec<PagemapEntry>, PagemapError> {
        // Reserve at most one chunk up front: a bogus huge `count` fails on reading, not on
        // allocating.
        let cap = usize::try_from(count.min(CHUNK_ENTRIES)).unwrap_or(0);
        let mut out = Vec::with_capacity(cap);
        self.visit_range(start, count, |_, e| out.push(e))?;
        Ok(out)
    }

    /// Calls `f(vpn, entry)` for each of `count` virtual pages from `start`, reading 8192
    /// entries per `pread`; pages past the end of the file are not present.
    ///
    /// # Errors
    /// [`PagemapError::Read`] on an I/O error, [`PagemapError::Range`] when the range overflows.
    pub fn visit_range(
        &self,
        start: Vpn,
        count: u64,
        mut f: impl FnMut(Vpn, PagemapEntry),
    ) -> Result<(), PagemapError> {
        let range_err = || PagemapError::Range {
            start: start.0,
            count,
        };
        let end = start.0.checked_add(count).ok_or_else(range_err)?;
        end.checked_mul(ENTRY_BYTES).ok_or_else(range_err)?;
        // CHUNK_ENTRIES * 8 bytes: fits any usize.
        let mut buf = vec![0u8; usize::try_from(CHUNK_ENTRIES * ENTRY_BYTES).unwrap_or(65536)];
        let mut vpn = start.0;
        while vpn < end {
            let n = (end - vpn).min(CHUNK_ENTRIES);
            let chunk = &mut buf[..usize::try_from(n * ENTRY_BYTES).map_err(|_| range_err())?];
            chunk.fill(0);
            let got = self.read_full_at(chunk, vpn * ENTRY_BYTES)?;
            // Bytes not read stay zero: "not present". A partial trailing entry is dropped.
            let whole = got - got % 8;
            for (i, e) in (0u64..).zip(chunk.chunks_exact(8)) {
                let mut w = [0u8; 8];
                if (i * 8) < whole as u64 {
                    w.copy_from_slice(e);
                }
                f(Vpn(vpn + i), PagemapEntry(u64::from_ne_bytes(w)));
            }
            vpn += n;
        }
        Ok(())
    }

    /// `pread` until the buffer is full or the file ends; returns the bytes read.
    fn read_full_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, PagemapError> {
        pread_full(&self.file, buf, offset).map_err(|(offset, source)| PagemapError::Read {
            path: self.path.clone(),
            offset,
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(entries: &[u64]) -> Vec<u8> {
        entries.iter().flat_map(|e| e.to_ne_bytes()).collect()
    }

    #[test]
    fn decodes_present_page_bits() {
        let raw = PRESENT | EXCLUSIVE | SOFT_DIRTY | 0x12_3456;
        let e = PagemapEntry(raw);
        assert!(e.present() && e.exclusive() && e.soft_dirty());
        assert!(!e.swapped() && !e.file_or_shared_anon() && !e.uffd_wp());
        assert_eq!(e.pfn(), Some(Pfn(0x12_3456)));
        assert_eq!(e.swap_type(), None);
    }

    #[test]
    fn decodes_swap_entry() {
        // type 3, offset 0x777 -> bits 0-4 = 3, 5-54 = 0x777
        let raw = SWAPPED | (0x777 << 5) | 3;
        let e = PagemapEntry(raw);
        assert!(!e.present());
        assert_eq!(e.swap_type(), Some(3));
        assert_eq!(e.swap_offset(), Some(0x777));
        assert_eq!(e.pfn(), None);
    }

    #[test]
    fn file_and_uffd_bits() {
        let e = PagemapEntry(PRESENT | FILE_SHARED | UFFD_WP | 5);
        assert!(e.file_or_shared_anon() && e.uffd_wp());
    }

    #[test]
    fn hidden_pfns_are_detected() {
        let hidden = decode_entries(&bytes(&[PRESENT | EXCLUSIVE, 0, PRESENT])).unwrap();
        assert_eq!(pfn_visibility(&hidden), PfnVisibility::Hidden);
        assert!(PfnVisibility::Hidden
            .reason()
            .unwrap()
            .contains("CAP_SYS_ADMIN"));
        assert_eq!(hidden[0].pfn(), None);
        let visible = decode_entries(&bytes(&[PRESENT, PRESENT | 42])).unwrap();
        assert_eq!(pfn_visibility(&visible), PfnVisibility::Visible);
        let none = decode_entries(&bytes(&[0, SWAPPED | 9])).unwrap();
        assert_eq!(pfn_visibility(&none), PfnVisibility::Unknown);
    }

    #[test]
    fn misaligned_buffer_is_an_error() {
        assert!(matches!(
            decode_entries(&[0u8; 12]),
            Err(PagemapError::Misaligned { len: 12 })
        ));
    }

    #[test]
    fn reader_preads_at_vpn_times_eight() {
        let dir = tempfile::tempdir().unwrap();
        let pid_dir = dir.path().join("77");
        std::fs::create_dir(&pid_dir).unwrap();
        let entries: Vec<u64> = (0..20u64).map(|i| PRESENT | (100 + i)).collect();
        std::fs::write(pid_dir.join("pagemap"), bytes(&entries)).unwrap();
        let pm = Pagemap::open(dir.path(), 77).unwrap();
        assert_eq!(pm.pid(), 77);
        let got = pm.read_range(Vpn(5), 3).unwrap();
        let pfns: Vec<_> = got.iter().map(|e| e.pfn()).collect();
        assert_eq!(pfns, vec![Some(Pfn(105)), Some(Pfn(106)), Some(Pfn(107))]);
        // Past the end of the file: not present.
        let tail = pm.read_range(Vpn(18), 4).unwrap();
        assert_eq!(tail.len(), 4);
        assert!(tail[0].present() && tail[1].present());
        assert!(!tail[2].present() && !tail[3].present());
        assert!(matches!(
            pm.read_range(Vpn(u64::MAX), 2),
            Err(PagemapError::Range { .. })
        ));
    }

    #[test]
    fn large_ranges_are_read_in_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let n = CHUNK_ENTRIES * 2 + 5;
        let entries: Vec<u64> = (0..n).map(|i| PRESENT | (i + 1)).collect();
        let path = dir.path().join("pagemap");
        std::fs::write(&path, bytes(&entries)).unwrap();
        let pm = Pagemap::open_path(path, 1).unwrap();
        let got = pm.read_range(Vpn(1), n - 1).unwrap();
        assert_eq!(got.len() as u64, n - 1);
        assert_eq!(got[0].pfn(), Some(Pfn(2)));
        assert_eq!(got.last().unwrap().pfn(), Some(Pfn(n)));
    }

    #[test]
    fn missing_process_is_recognised() {
        let dir = tempfile::tempdir().unwrap();
        let err = Pagemap::open(dir.path(), 4242).unwrap_err();
        assert!(err.is_process_gone(), "{err}");
        assert!(err.to_string().contains("4242/pagemap"));
    }

    #[test]
    fn reads_own_pagemap() {
        // The real file: our own stack page is present; the PFN may be hidden (no
        // CAP_SYS_ADMIN) or not, but the present bit is always reported.
        let x = [1u8; 64];
        let addr = std::ptr::addr_of!(x) as u64;
        let pm =
            Pagemap::open_path(PathBuf::from("/proc/self/pagemap"), std::process::id()).unwrap();
        let e = pm.read_range(Vpn::from_addr(addr), 1).unwrap();
        assert!(e[0].present(), "{:#x}", e[0].0);
        assert_ne!(pfn_visibility(&e), PfnVisibility::Unknown);
    }
}
