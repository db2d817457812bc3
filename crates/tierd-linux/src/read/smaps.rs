//! `/proc/PID/smaps`: per VMA, its `maps` line, then one `Key: value` line per counter.
//!
//! fs/proc/task_mmu.c `show_smap()` prints the VMA's header with `show_map_vma()` (the same
//! line as `/proc/PID/maps`, parsed by [`super::numa_maps::parse_maps_line`]), then
//! `Size`, `KernelPageSize`, `MMUPageSize`, and `__show_smap()`'s counters: `Rss`, `Pss`,
//! `Pss_Dirty` (6.0+), `Shared_Clean`, `Shared_Dirty`, `Private_Clean`, `Private_Dirty`,
//! `Referenced`, `Anonymous`, `KSM` (6.7+), `LazyFree`, `AnonHugePages`, `ShmemPmdMapped`,
//! `FilePmdMapped` (5.4+), `Shared_Hugetlb`, `Private_Hugetlb`, `Swap`, `SwapPss`, `Locked`,
//! each `seq_put_decimal_ull_width(..., 8)` of kilobytes followed by ` kB`; then
//! `THPeligible:` 0 or 1, `ProtectionKey:` where the architecture has protection keys, and
//! `VmFlags:` two-letter flags each followed by a space (`show_smap_vma_flags()`).
//!
//! Keys come and go between kernel versions, so a key this parser does not know is skipped,
//! not an error; a known key with a malformed value is one. A header line is told from a
//! counter line by its first field: `start-end` never holds a `:`, a counter's `Key:` does.

use std::path::Path;

use tierd_engine::types::{PageSize, Vpn};

use super::numa_maps::{parse_maps_line, MapsEntry};
use super::{kernel_lines, read_text, ParseError, ReadError};

/// The counters of one VMA, in kB as printed; `None` when the kernel did not print the key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct SmapsCounters {
    pub size: Option<u64>,
    pub kernel_page_size: Option<u64>,
    pub mmu_page_size: Option<u64>,
    pub rss: Option<u64>,
    pub pss: Option<u64>,
    pub pss_dirty: Option<u64>,
    pub shared_clean: Option<u64>,
    pub shared_dirty: Option<u64>,
    pub private_clean: Option<u64>,
    pub private_dirty: Option<u64>,
    pub referenced: Option<u64>,
    pub anonymous: Option<u64>,
    pub ksm: Option<u64>,
    pub lazy_free: Option<u64>,
    pub anon_huge_pages: Option<u64>,
    pub shmem_pmd_mapped: Option<u64>,
    pub file_pmd_mapped: Option<u64>,
    pub shared_hugetlb: Option<u64>,
    pub private_hugetlb: Option<u64>,
    pub swap: Option<u64>,
    pub swap_pss: Option<u64>,
    pub locked: Option<u64>,
}

/// The kB keys in the order `show_smap()` prints them, with their field.
pub const KB_KEYS: [&str; 22] = [
    "Size",
    "KernelPageSize",
    "MMUPageSize",
    "Rss",
    "Pss",
    "Pss_Dirty",
    "Shared_Clean",
    "Shared_Dirty",
    "Private_Clean",
    "Private_Dirty",
    "Referenced",
    "Anonymous",
    "KSM",
    "LazyFree",
    "AnonHugePages",
    "ShmemPmdMapped",
    "FilePmdMapped",
    "Shared_Hugetlb",
    "Private_Hugetlb",
    "Swap",
    "SwapPss",
    "Locked",
];

impl SmapsCounters {
    /// The field of a kB key of [`KB_KEYS`].
    pub fn field_mut(&mut self, key: &str) -> Option<&mut Option<u64>> {
        Some(match key {
            "Size" => &mut self.size,
            "KernelPageSize" => &mut self.kernel_page_size,
            "MMUPageSize" => &mut self.mmu_page_size,
            "Rss" => &mut self.rss,
            "Pss" => &mut self.pss,
            "Pss_Dirty" => &mut self.pss_dirty,
            "Shared_Clean" => &mut self.shared_clean,
            "Shared_Dirty" => &mut self.shared_dirty,
            "Private_Clean" => &mut self.private_clean,
            "Private_Dirty" => &mut self.private_dirty,
            "Referenced" => &mut self.referenced,
            "Anonymous" => &mut self.anonymous,
            "KSM" => &mut self.ksm,
            "LazyFree" => &mut self.lazy_free,
            "AnonHugePages" => &mut self.anon_huge_pages,
            "ShmemPmdMapped" => &mut self.shmem_pmd_mapped,
            "FilePmdMapped" => &mut self.file_pmd_mapped,
            "Shared_Hugetlb" => &mut self.shared_hugetlb,
            "Private_Hugetlb" => &mut self.private_hugetlb,
            "Swap" => &mut self.swap,
            "SwapPss" => &mut self.swap_pss,
            "Locked" => &mut self.locked,
            _ => return None,
        })
    }
}

/// One VMA of `smaps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmapsVma {
    /// Its `maps` line.
    pub vma: MapsEntry,
    /// Its counters.
    pub kb: SmapsCounters,
    /// `THPeligible`: whether THPs may back it (any order).
    pub thp_eligible: Option<bool>,
    /// `ProtectionKey`, on architectures with protection keys.
    pub protection_key: Option<u32>,
    /// `VmFlags`, the two-letter mnemonics (`ht` is a hugetlb VMA).
    pub vm_flags: Option<Vec<String>>,
}

impl SmapsVma {
    /// First page.
    #[must_use]
    pub fn start_vpn(&self) -> Vpn {
        Vpn::from_addr(self.vma.start)
    }
    /// One past the last page.
    #[must_use]
    pub fn end_vpn(&self) -> Vpn {
        Vpn::from_addr(self.vma.end)
    }
    /// A hugetlb VMA: `VmFlags` has `ht` (`VM_HUGETLB`), or its `KernelPageSize` is not the
    /// base page's (`vma_kernel_pagesize()` is the huge page size only for hugetlb VMAs).
    #[must_use]
    pub fn is_hugetlb(&self) -> bool {
        self.vm_flags
            .as_ref()
            .is_some_and(|f| f.iter().any(|x| x == "ht"))
            || self.kb.kernel_page_size.is_some_and(|k| k != 4)
    }
    /// The bytes of the VMA mapped by PMDs (2 MiB THPs), in kB: `AnonHugePages` +
    /// `ShmemPmdMapped` + `FilePmdMapped` (fs/proc/task_mmu.c `smaps_pmd_entry()` adds
    /// `HPAGE_PMD_SIZE` to one of them per PMD-mapped THP; PTE-mapped large folios count in
    /// none of them).
    #[must_use]
    pub fn pmd_mapped_kb(&self) -> u64 {
        [
            self.kb.anon_huge_pages,
            self.kb.shmem_pmd_mapped,
            self.kb.file_pmd_mapped,
        ]
        .iter()
        .map(|v| v.unwrap_or(0))
        .fold(0u64, u64::saturating_add)
    }
    /// The page size of a hugetlb VMA from `KernelPageSize`, `None` for a size the engine does
    /// not track or a VMA without the key.
    #[must_use]
    pub fn hugetlb_size(&self) -> Option<PageSize> {
        self.kb.kernel_page_size.and_then(PageSize::from_kib)
    }
}

fn kb_value(v: &str) -> Result<u64, String> {
    let n = v
        .strip_suffix("kB")
        .ok_or_else(|| format!("value {v:?} does not end in kB"))?
        .trim_end_matches(' ');
    n.parse().map_err(|_| format!("bad kB value {v:?}"))
}

/// Parses the text of `/proc/PID/smaps`.
///
/// # Errors
/// A [`ParseError`] naming the line: a malformed header, a counter before any header, a known
/// key with a malformed value or given twice for one VMA.
pub fn parse_smaps(text: &str) -> Result<Vec<SmapsVma>, ParseError> {
    let mut out: Vec<SmapsVma> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (i, line) in kernel_lines(text).enumerate() {
        let err = |r: String| ParseError::new(i + 1, r);
        if line.trim_matches(' ').is_empty() {
            continue;
        }
        let first = line.split(' ').next().unwrap_or("");
        let Some(colon) = first.find(':') else {
            out.push(SmapsVma {
                vma: parse_maps_line(line).map_err(err)?,
                kb: SmapsCounters::default(),
                thp_eligible: None,
                protection_key: None,
                vm_flags: None,
            });
            seen.clear();
            continue;
        };
        let key = &line[..colon];
        let Some(vma) = out.last_mut() else {
            return Err(err(format!("{key:?} before any VMA header")));
        };
        let value = line[colon + 1..].trim_matches([' ', '\t']);
        let known = key == "THPeligible"
            || key == "ProtectionKey"
            || key == "VmFlags"
            || vma.kb.field_mut(key).is_some();
        if !known {
            continue;
        }
        if seen.contains(&key) {
            return Err(err(format!("{key} twice in one VMA")));
        }
        seen.push(key);
        match key {
            "THPeligible" => {
                vma.thp_eligible = Some(match value {
                    "0" => false,
                    "1" => true,
                    _ => return Err(err(format!("bad THPeligible {value:?}"))),
                });
            }
            "ProtectionKey" => {
                vma.protection_key = Some(
                    value
                        .parse()
                        .map_err(|_| err(format!("bad ProtectionKey {value:?}")))?,
                );
            }
            "VmFlags" => {
                vma.vm_flags = Some(value.split_whitespace().map(str::to_owned).collect());
            }
            _ => {
                let v = kb_value(value).map_err(|r| err(format!("{key}: {r}")))?;
                if let Some(f) = vma.kb.field_mut(key) {
                    *f = Some(v);
                }
            }
        }
    }
    Ok(out)
}

/// Reads `<proc_root>/<pid>/smaps`.
///
/// # Errors
/// [`ReadError`] naming the file (the process gone: [`ReadError::is_gone`]).
pub fn read_smaps(proc_root: &Path, pid: u32) -> Result<Vec<SmapsVma>, ReadError> {
    let path = proc_root.join(pid.to_string()).join("smaps");
    let text = read_text(&path)?;
    parse_smaps(&text).map_err(|e| e.at(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
00400000-00401000 r--p 00000000 00:02 6                                  /bin/busybox
Size:                  4 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:                   4 kB
AnonHugePages:         0 kB
FutureKey:            12 kB
THPeligible:           0
ProtectionKey:         0
VmFlags: rd mr mw me sd 
7f0000000000-7f0001200000 rw-p 00000000 00:00 0 
Size:              18432 kB
KernelPageSize:        4 kB
AnonHugePages:     16384 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
THPeligible:    1
VmFlags: rd wr mr mw me ac hg 
7f2000000000-7f2000400000 rw-s 00000000 00:10 123                        /mnt/h2m/fx
Size:               4096 kB
KernelPageSize:     2048 kB
Private_Hugetlb:       0 kB
VmFlags: rd wr sh mr mw me ms de ht 
";

    #[test]
    fn parses_vmas_and_skips_unknown_keys() {
        let v = parse_smaps(TEXT).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].vma.path.as_deref(), Some("/bin/busybox"));
        assert_eq!(v[0].kb.size, Some(4));
        assert_eq!(v[0].thp_eligible, Some(false));
        assert_eq!(v[0].protection_key, Some(0));
        assert_eq!(v[0].vm_flags.as_ref().unwrap().len(), 5);
        assert!(!v[0].is_hugetlb());
        assert_eq!(v[1].pmd_mapped_kb(), 16384);
        assert_eq!(v[1].thp_eligible, Some(true));
        assert_eq!(v[1].end_vpn().0 - v[1].start_vpn().0, 18432 / 4);
        assert!(v[2].is_hugetlb());
        assert_eq!(v[2].hugetlb_size(), Some(PageSize::Huge2M));
        assert_eq!(v[2].kb.rss, None);
    }

    #[test]
    fn malformed_input_is_a_one_line_error() {
        for (bad, line) in [
            ("Size: 4 kB\n", 1),
            (
                "00400000-00401000 r--p 00000000 00:02 6\nSize: four kB\n",
                2,
            ),
            ("00400000-00401000 r--p 00000000 00:02 6\nSize: 4\n", 2),
            (
                "00400000-00401000 r--p 00000000 00:02 6\nTHPeligible: 2\n",
                2,
            ),
            (
                "00400000-00401000 r--p 00000000 00:02 6\nRss: 1 kB\nRss: 1 kB\n",
                3,
            ),
            ("00400000-00401000 r--p\n", 1),
        ] {
            let e = parse_smaps(bad).unwrap_err();
            assert_eq!(e.line, line, "{bad:?}: {e}");
            assert!(!e.reason.contains('\n'));
        }
    }

    #[test]
    fn reads_the_guest_fixture() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/guest-6.12/proc");
        let pid: u32 = 1;
        let v = read_smaps(&root, pid).unwrap();
        assert!(!v.is_empty());
        assert!(v
            .iter()
            .all(|x| x.kb.size.is_some() && x.vm_flags.is_some()));
        assert!(v
            .iter()
            .all(|x| x.kb.size == Some((x.vma.end - x.vma.start) / 1024)));
        let e = read_smaps(&root, 999_999).unwrap_err();
        assert!(e.is_gone(), "{e}");
    }
}
