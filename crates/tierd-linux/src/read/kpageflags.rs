//! `/proc/kpageflags`: one 64-bit set of flags per page frame, indexed by PFN.
//!
//! fs/proc/page.c `kpageflags_read()` writes `stable_page_flags()` of the page at each frame
//! (8 bytes, native endian, at byte offset `pfn * 8`; reads must be 8-byte aligned multiples,
//! and end at the last frame, past which the file reads as empty). The file is mode 0400 and
//! root's: reading it needs `CAP_SYS_ADMIN`-level access, like pagemap's PFNs. Bits from
//! include/uapi/linux/kernel-page-flags.h; what sets the ones tierd uses, in
//! `stable_page_flags()`:
//!
//! | bit | name | set when |
//! |---|---|---|
//! | 12 | `KPF_ANON` | the folio is anonymous |
//! | 15 | `KPF_COMPOUND_HEAD` | the page is the first of a large folio (`PG_head`) |
//! | 16 | `KPF_COMPOUND_TAIL` | the page is any other page of a large folio |
//! | 17 | `KPF_HUGE` | the folio is a hugetlb page (head and tails) |
//! | 20 | `KPF_NOPAGE` | no `struct page` at this frame (a hole) |
//! | 22 | `KPF_THP` | the folio is a large rmappable folio: a THP of any order, mTHP included ("we indicate any THPs here, not just PMD-sized ones"), or the huge zero page; head and tails |
//! | 24 | `KPF_ZERO_PAGE` | the (huge) zero page |
//!
//! "they together define a compound page's start/end pos and order": a folio is the head
//! frame and the run of tail frames after it. Folios are naturally aligned (the buddy
//! allocator and hugetlb's gigantic allocations hand out aligned blocks), so a folio of 512
//! frames starts at a 512-aligned frame, and one of 262144 at a 262144-aligned frame.
//! [`folio_of_frame`] sizes the folio of a frame from at most 516 entries: the frame's own,
//! the 2 MiB block around it plus the next frame (513), and for a larger folio the first, last
//! and next frame of its 1 GiB block.
//!
//! The flags are read without any lock: a folio can be split or freed between two reads. A
//! combination no folio has (a tail with no head before it, a frame outside the folio found)
//! reads as [`FrameFolio::Untracked`], never as a folio of a wrong size.

use std::fs::File;
use std::path::{Path, PathBuf};

use tierd_engine::types::{PageSize, Pfn, HPAGE_PMD_NR, HPAGE_PUD_NR};

/// Bytes per entry.
pub const ENTRY_BYTES: u64 = 8;

/// `KPF_ANON`.
pub const KPF_ANON: u32 = 12;
/// `KPF_COMPOUND_HEAD`.
pub const KPF_COMPOUND_HEAD: u32 = 15;
/// `KPF_COMPOUND_TAIL`.
pub const KPF_COMPOUND_TAIL: u32 = 16;
/// `KPF_HUGE`: a hugetlb page.
pub const KPF_HUGE: u32 = 17;
/// `KPF_NOPAGE`: no page at the frame.
pub const KPF_NOPAGE: u32 = 20;
/// `KPF_THP`: a transparent huge page (any order).
pub const KPF_THP: u32 = 22;
/// `KPF_ZERO_PAGE`.
pub const KPF_ZERO_PAGE: u32 = 24;

/// One frame's flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PageFlags(pub u64);

impl PageFlags {
    /// Whether bit `bit` is set.
    #[must_use]
    pub fn has(self, bit: u32) -> bool {
        bit < 64 && self.0 & (1 << bit) != 0
    }
    /// The first page of a large folio.
    #[must_use]
    pub fn head(self) -> bool {
        self.has(KPF_COMPOUND_HEAD)
    }
    /// A page of a large folio other than its first.
    #[must_use]
    pub fn tail(self) -> bool {
        self.has(KPF_COMPOUND_TAIL)
    }
    /// Part of a large folio.
    #[must_use]
    pub fn compound(self) -> bool {
        self.head() || self.tail()
    }
    /// A hugetlb page.
    #[must_use]
    pub fn hugetlb(self) -> bool {
        self.has(KPF_HUGE)
    }
    /// A transparent huge page (of any order).
    #[must_use]
    pub fn thp(self) -> bool {
        self.has(KPF_THP)
    }
    /// No page at this frame.
    #[must_use]
    pub fn nopage(self) -> bool {
        self.has(KPF_NOPAGE)
    }
    /// Anonymous memory.
    #[must_use]
    pub fn anon(self) -> bool {
        self.has(KPF_ANON)
    }
    /// The zero page or the huge zero page.
    #[must_use]
    pub fn zero_page(self) -> bool {
        self.has(KPF_ZERO_PAGE)
    }
}

/// Errors of the kpageflags reader and decoder.
#[derive(Debug, thiserror::Error)]
pub enum KpageflagsError {
    /// The file could not be opened (absent, or no permission: it is root's, mode 0400).
    #[error("opening {path}: {source}", path = path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A read failed.
    #[error("reading {path} at offset {offset}: {source}", path = path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The byte offset of the read.
        offset: u64,
        /// The OS error.
        source: std::io::Error,
    },
    /// A buffer whose length is not a multiple of 8 bytes.
    #[error("kpageflags data of {len} bytes is not a whole number of 8-byte entries")]
    Misaligned {
        /// The buffer length.
        len: usize,
    },
    /// The frame range does not fit (`pfn * 8` overflows) or is too long for one read.
    #[error("frame range {start:#x}+{count} is out of range")]
    Range {
        /// First frame.
        start: u64,
        /// Number of frames.
        count: u64,
    },
}

/// Decodes native-endian 64-bit entries.
///
/// # Errors
/// [`KpageflagsError::Misaligned`] when `bytes` is not a whole number of entries.
pub fn decode_entries(bytes: &[u8]) -> Result<Vec<PageFlags>, KpageflagsError> {
    crate::pagemap::ne_words(bytes)
        .map(|w| w.map(PageFlags).collect())
        .ok_or(KpageflagsError::Misaligned { len: bytes.len() })
}

/// The most frames one [`Kpageflags::read`] takes (4 KiB of entries a frame block, and then
/// some): a bogus count fails, it does not allocate.
pub const MAX_READ: u64 = 1 << 16;

/// An open `/proc/kpageflags`.
#[derive(Debug)]
pub struct Kpageflags {
    file: File,
    path: PathBuf,
}

impl Kpageflags {
    /// Opens `<proc_root>/kpageflags`.
    ///
    /// # Errors
    /// [`KpageflagsError::Open`].
    pub fn open(proc_root: &Path) -> Result<Self, KpageflagsError> {
        Self::open_path(proc_root.join("kpageflags"))
    }

    /// Opens a kpageflags file at an explicit path (a fixture).
    ///
    /// # Errors
    /// [`KpageflagsError::Open`].
    pub fn open_path(path: PathBuf) -> Result<Self, KpageflagsError> {
        match File::open(&path) {
            Ok(file) => Ok(Kpageflags { file, path }),
            Err(source) => Err(KpageflagsError::Open { path, source }),
        }
    }

    /// The flags of `count` frames from `start`. Frames past the end of the file (beyond the
    /// machine's last frame) read as [`KPF_NOPAGE`], as the kernel's holes do.
    ///
    /// # Errors
    /// [`KpageflagsError::Read`] on an I/O error, [`KpageflagsError::Range`] for a range that
    /// overflows or exceeds [`MAX_READ`].
    pub fn read(&self, start: u64, count: u64) -> Result<Vec<PageFlags>, KpageflagsError> {
        let range = || KpageflagsError::Range { start, count };
        if count > MAX_READ {
            return Err(range());
        }
        let offset = start
            .checked_add(count)
            .and_then(|e| e.checked_mul(ENTRY_BYTES))
            .map(|_| start * ENTRY_BYTES)
            .ok_or_else(range)?;
        let len = usize::try_from(count * ENTRY_BYTES).map_err(|_| range())?;
        let mut buf = vec![0u8; len];
        let done = crate::pagemap::pread_full(&self.file, &mut buf, offset).map_err(
            |(offset, source)| KpageflagsError::Read {
                path: self.path.clone(),
                offset,
                source,
            },
        )?;
        let whole = done - done % 8;
        let mut out = decode_entries(&buf[..whole])?;
        out.resize(
            usize::try_from(count).map_err(|_| range())?,
            PageFlags(1 << KPF_NOPAGE),
        );
        Ok(out)
    }
}

/// What the flags say about the folio of one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameFolio {
    /// Not part of a large folio: a base page.
    Base,
    /// A THP or hugetlb folio of a size tierd tracks (2 MiB or 1 GiB).
    Huge {
        /// Its first frame.
        head: Pfn,
        /// Its size.
        size: PageSize,
        /// A hugetlb page (`KPF_HUGE`) rather than a THP (`KPF_THP`).
        hugetlb: bool,
    },
    /// A large folio tierd does not track as one unit: an mTHP order (16 KiB to 1 MiB), a size
    /// other than 2 MiB or 1 GiB, a large folio that is neither THP nor hugetlb, or flags that
    /// changed while they were read. Moving any one of its pages would move all of them
    /// (mm/migrate.c `add_folio_for_migration()` isolates the whole folio), so it can be
    /// treated neither as base pages nor as a tracked size.
    Untracked,
    /// No page at this frame (`KPF_NOPAGE`).
    NoPage,
}

/// The folio of frame `pfn`, from flags read through `read(start, count)` (a
/// [`Kpageflags::read`], or a table in tests): the frame's own entry, then for a frame of a
/// large folio the 513 entries from its 2 MiB-aligned block, then for a folio larger than that
/// the first entry and the last two of its 1 GiB-aligned block.
///
/// # Errors
/// Whatever `read` returns.
pub fn folio_of_frame<E>(
    pfn: u64,
    mut read: impl FnMut(u64, u64) -> Result<Vec<PageFlags>, E>,
) -> Result<FrameFolio, E> {
    let at = |v: &[PageFlags], i: usize| v.get(i).copied().unwrap_or(PageFlags(1 << KPF_NOPAGE));
    let own = at(&read(pfn, 1)?, 0);
    if own.nopage() {
        return Ok(FrameFolio::NoPage);
    }
    if !own.compound() {
        return Ok(FrameFolio::Base);
    }
    let block = pfn & !(HPAGE_PMD_NR - 1);
    let w = read(block, HPAGE_PMD_NR + 1)?;
    // pfn - block < 512: fits a usize.
    let off = usize::try_from(pfn - block).unwrap_or(0);
    // The head: the nearest head at or before the frame, with only tails between.
    let mut head = None;
    for i in (0..=off).rev() {
        let f = at(&w, i);
        if f.head() {
            head = Some(i);
            break;
        }
        if !f.tail() {
            return Ok(FrameFolio::Untracked);
        }
    }
    let kind = |f: PageFlags| -> Option<bool> {
        if f.hugetlb() {
            Some(true)
        } else if f.thp() && !f.zero_page() {
            Some(false)
        } else {
            None
        }
    };
    match head {
        Some(h) => {
            let tails = (h + 1..w.len()).take_while(|&i| at(&w, i).tail()).count();
            let n = tails as u64 + 1;
            let Some(hugetlb) = kind(at(&w, h)) else {
                return Ok(FrameFolio::Untracked);
            };
            if (h as u64) + n <= pfn - block {
                // The frame lies past the folio found: the flags changed under us.
                return Ok(FrameFolio::Untracked);
            }
            if h == 0 && n == HPAGE_PMD_NR {
                return Ok(FrameFolio::Huge {
                    head: Pfn(block),
                    size: PageSize::Huge2M,
                    hugetlb,
                });
            }
            if h == 0 && n > HPAGE_PMD_NR {
                // The block's head starts something larger than 2 MiB: size it at 1 GiB.
                return gigantic(pfn, &mut read, &kind);
            }
            Ok(FrameFolio::Untracked)
        }
        // Tails all the way back to the block's start: a folio larger than 2 MiB.
        None => gigantic(pfn, &mut read, &kind),
    }
}

/// The 1 GiB folio of `pfn`, if its 1 GiB block is one: a head at the block's first frame, a
/// tail at its last, and no tail at the next. Anything else larger than 2 MiB (a 32 MiB
/// hugetlb size on arm64, say) is [`FrameFolio::Untracked`].
fn gigantic<E>(
    pfn: u64,
    read: &mut impl FnMut(u64, u64) -> Result<Vec<PageFlags>, E>,
    kind: &impl Fn(PageFlags) -> Option<bool>,
) -> Result<FrameFolio, E> {
    let g = pfn & !(HPAGE_PUD_NR - 1);
    let first = read(g, 1)?.first().copied().unwrap_or_default();
    let last = read(g + HPAGE_PUD_NR - 1, 2)?;
    let (last, next) = (
        last.first().copied().unwrap_or_default(),
        last.get(1).copied().unwrap_or(PageFlags(1 << KPF_NOPAGE)),
    );
    match kind(first) {
        Some(hugetlb) if first.head() && last.tail() && !next.tail() => Ok(FrameFolio::Huge {
            head: Pfn(g),
            size: PageSize::Huge1G,
            hugetlb,
        }),
        _ => Ok(FrameFolio::Untracked),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const HEAD: u64 = 1 << KPF_COMPOUND_HEAD;
    const TAIL: u64 = 1 << KPF_COMPOUND_TAIL;
    const THP: u64 = 1 << KPF_THP;
    const HUGE: u64 = 1 << KPF_HUGE;

    /// Frames -> flags; missing frames are plain base pages (flags 0).
    fn table(folios: &[(u64, u64, u64)]) -> BTreeMap<u64, u64> {
        let mut t = BTreeMap::new();
        for &(head, n, kind) in folios {
            t.insert(head, HEAD | kind);
            for p in head + 1..head + n {
                t.insert(p, TAIL | kind);
            }
        }
        t
    }

    fn of(t: &BTreeMap<u64, u64>, pfn: u64) -> FrameFolio {
        folio_of_frame(pfn, |s, n| -> Result<_, ()> {
            Ok((s..s + n)
                .map(|p| PageFlags(t.get(&p).copied().unwrap_or(0)))
                .collect())
        })
        .unwrap()
    }

    #[test]
    fn sizes_thp_hugetlb_and_mthp_folios() {
        let t = table(&[
            (1024, 512, THP),
            (1536, 16, THP),
            (2048, 512, HUGE),
            (1 << 18, 1 << 18, HUGE),
            (3 << 18, 1024, HUGE),
        ]);
        let thp = FrameFolio::Huge {
            head: Pfn(1024),
            size: PageSize::Huge2M,
            hugetlb: false,
        };
        assert_eq!(of(&t, 1024), thp);
        assert_eq!(of(&t, 1300), thp);
        assert_eq!(of(&t, 1535), thp);
        assert_eq!(of(&t, 1540), FrameFolio::Untracked, "an order-4 mTHP");
        assert_eq!(of(&t, 1560), FrameFolio::Base);
        assert!(matches!(
            of(&t, 2559),
            FrameFolio::Huge {
                head: Pfn(2048),
                hugetlb: true,
                ..
            }
        ));
        for p in [1 << 18, (1 << 18) + 777, (1 << 19) - 1] {
            assert_eq!(
                of(&t, p),
                FrameFolio::Huge {
                    head: Pfn(1 << 18),
                    size: PageSize::Huge1G,
                    hugetlb: true
                }
            );
        }
        assert_eq!(of(&t, (3 << 18) + 600), FrameFolio::Untracked, "4 MiB");
        assert_eq!(of(&t, 5), FrameFolio::Base);
    }

    #[test]
    fn inconsistent_flags_are_untracked_and_holes_have_no_page() {
        let mut t = table(&[(1024, 512, THP)]);
        t.insert(1030, 0); // split under us: a base page inside the run of tails
        assert_eq!(of(&t, 1100), FrameFolio::Untracked);
        assert_eq!(of(&t, 1030), FrameFolio::Base);
        t.insert(9, TAIL | THP); // a tail with no head before it
        assert_eq!(of(&t, 9), FrameFolio::Untracked);
        t.insert(4000, 1 << KPF_NOPAGE);
        assert_eq!(of(&t, 4000), FrameFolio::NoPage);
        // A compound page that is neither THP nor hugetlb (a driver's), and the huge zero page.
        let t = table(&[(512, 512, 0), (4096, 512, THP | 1 << KPF_ZERO_PAGE)]);
        assert_eq!(of(&t, 600), FrameFolio::Untracked);
        assert_eq!(of(&t, 4096), FrameFolio::Untracked);
    }

    #[test]
    fn reader_pads_past_the_end_with_nopage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kpageflags");
        let words: Vec<u8> = [HEAD | THP, TAIL | THP, 7]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        std::fs::write(&path, words).unwrap();
        let k = Kpageflags::open(dir.path()).unwrap();
        let got = k.read(1, 4).unwrap();
        assert_eq!(got[0], PageFlags(TAIL | THP));
        assert_eq!(got[1], PageFlags(7));
        assert!(got[2].nopage() && got[3].nopage());
        assert!(matches!(
            k.read(u64::MAX - 1, 4),
            Err(KpageflagsError::Range { .. })
        ));
        assert!(matches!(
            k.read(0, MAX_READ + 1),
            Err(KpageflagsError::Range { .. })
        ));
        let e = Kpageflags::open(&dir.path().join("none")).unwrap_err();
        assert!(e.to_string().contains("none/kpageflags"), "{e}");
        assert!(matches!(
            decode_entries(&[0; 9]),
            Err(KpageflagsError::Misaligned { len: 9 })
        ));
    }
}
