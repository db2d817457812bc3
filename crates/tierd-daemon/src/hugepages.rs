//! Free hugetlb pages per node and size, from sysfs, so that under `daemon.hugetlb = "move"`
//! the daemon hands `move_pages(2)` only the hugetlb pages the target node can take.
//!
//! ```text
//! /sys/devices/system/node/nodeN/hugepages/hugepages-2048kB/free_hugepages      "17\n"
//! /sys/devices/system/node/nodeN/hugepages/hugepages-1048576kB/free_hugepages   "0\n"
//! ```
//!
//! The directory is named after the page size in KiB (mm/hugetlb.c: the hstate's name is
//! `"hugepages-%lukB"`, `huge_page_size(h) / SZ_1K`), one per size the kernel supports, under
//! every node with memory (drivers/base/node.c registers `nodeN/hugepages`); the file holds
//! one `unsigned long` and a newline (mm/hugetlb.c `free_hugepages_show()`:
//! `sysfs_emit(buf, "%lu\n", free_huge_pages_node[nid])`). No such directory means the kernel
//! has no pool of that size on that node: no free page.
//!
//! Why only free pool pages count (see `DaemonSection::hugetlb` in [`crate::config`]): a
//! hugetlb page migrates into a free page of the target node's pool
//! (`alloc_hugetlb_folio_nodemask()` → `dequeue_hugetlb_folio_nodemask()`); the fallback, a
//! fresh page from the buddy allocator (`alloc_migrate_hugetlb_folio()`), does not exist for
//! gigantic pages and, for 2 MiB ones, moves a page of the pool from one node to the other
//! (`move_hugetlb_state()`): tierd does not resize the pools an operator sized.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tierd_engine::types::{NodeId, PageSize};
use tierd_linux::read::topology::node_dir;
use tierd_linux::read::ReadError;

/// `nodeN/hugepages/hugepages-<kB>kB` under `sys_root`.
#[must_use]
pub fn pool_dir(sys_root: &Path, node: NodeId, size: PageSize) -> PathBuf {
    node_dir(sys_root, node)
        .join("hugepages")
        .join(format!("hugepages-{}kB", size.bytes().0 / 1024))
}

/// One count as sysfs prints it (`%lu\n`).
///
/// # Errors
/// What is wrong with the text, for a [`ReadError::Parse`].
pub fn parse_count(text: &str) -> Result<u64, String> {
    let t = text.strip_suffix('\n').unwrap_or(text);
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{t:?} is not a count of pages"));
    }
    t.parse::<u64>()
        .map_err(|_| format!("{t:?} is above the largest count (2^64 - 1)"))
}

/// The free huge pages of `size` on `node`; `Ok(None)` when the node has no pool of that size
/// (the directory is absent: the size is not supported, or the node has no memory).
///
/// # Errors
/// [`ReadError::Io`] when the file exists but cannot be read, [`ReadError::Parse`] when it
/// does not hold a count.
pub fn read_free_hugepages(
    sys_root: &Path,
    node: NodeId,
    size: PageSize,
) -> Result<Option<u64>, ReadError> {
    let path = pool_dir(sys_root, node, size).join("free_hugepages");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ReadError::Io { path, source }),
    };
    parse_count(&text)
        .map(Some)
        .map_err(|reason| ReadError::Parse {
            path,
            line: 1,
            reason,
        })
}

/// The free huge pages of each (node, size) a batch asks for, read once per batch and claimed
/// page by page, so that a batch never plans more hugetlb pages onto a node than its pool has
/// free.
#[derive(Debug)]
pub struct FreeHugePages<'a> {
    sys_root: &'a Path,
    left: BTreeMap<(NodeId, PageSize), u64>,
}

impl<'a> FreeHugePages<'a> {
    /// Nothing read yet.
    #[must_use]
    pub fn new(sys_root: &'a Path) -> Self {
        FreeHugePages {
            sys_root,
            left: BTreeMap::new(),
        }
    }

    /// Takes one free page of `size` on `node` for a hugetlb page: `Ok(true)` when there was
    /// one (it is no longer counted free), `Ok(false)` when the pool has none left (or no pool
    /// of that size exists there).
    ///
    /// # Errors
    /// The first read of that pool failed; it counts as empty for the rest of the batch.
    pub fn claim(&mut self, node: NodeId, size: PageSize) -> Result<bool, ReadError> {
        let mut err = None;
        let left = self.left.entry((node, size)).or_insert_with(|| {
            match read_free_hugepages(self.sys_root, node, size) {
                Ok(n) => n.unwrap_or(0),
                Err(e) => {
                    err = Some(e);
                    0
                }
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        if *left == 0 {
            return Ok(false);
        }
        *left -= 1;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn guest_sys() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tierd-linux/tests/fixtures/guest-6.12/sys")
    }

    #[test]
    fn the_guest_has_empty_pools_of_both_sizes_and_no_other() {
        let sys = guest_sys();
        for node in [NodeId(0), NodeId(1)] {
            for size in [PageSize::Huge2M, PageSize::Huge1G] {
                assert_eq!(
                    read_free_hugepages(&sys, node, size).expect("readable"),
                    Some(0),
                    "node {} {}",
                    node.0,
                    size.name()
                );
            }
            // No 4 KiB "pool": absent, not an error.
            assert_eq!(
                read_free_hugepages(&sys, node, PageSize::Base).expect("absent"),
                None
            );
        }
        // A node that does not exist has no pool.
        assert_eq!(
            read_free_hugepages(&sys, NodeId(7), PageSize::Huge2M).expect("absent"),
            None
        );
    }

    /// A sysfs tree with `free` pages of 2 MiB on node 1 and a broken 1 GiB file.
    fn tree(free: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().expect("tmp");
        let two = pool_dir(d.path(), NodeId(1), PageSize::Huge2M);
        std::fs::create_dir_all(&two).expect("dir");
        std::fs::write(two.join("free_hugepages"), free).expect("write");
        let one = pool_dir(d.path(), NodeId(1), PageSize::Huge1G);
        std::fs::create_dir_all(&one).expect("dir");
        std::fs::write(one.join("free_hugepages"), "lots\n").expect("write");
        d
    }

    #[test]
    fn pages_are_claimed_until_the_pool_is_empty() {
        let d = tree("2\n");
        let mut f = FreeHugePages::new(d.path());
        assert!(f.claim(NodeId(1), PageSize::Huge2M).expect("read"));
        // The file changing within the batch does not matter: read once.
        std::fs::write(
            pool_dir(d.path(), NodeId(1), PageSize::Huge2M).join("free_hugepages"),
            "100\n",
        )
        .expect("write");
        assert!(f.claim(NodeId(1), PageSize::Huge2M).expect("cached"));
        assert!(!f.claim(NodeId(1), PageSize::Huge2M).expect("cached"));
        // Node 0 has no pool here.
        assert!(!f.claim(NodeId(0), PageSize::Huge2M).expect("absent"));
        // A file that is not a count: the error names it, and the pool counts as empty.
        let e = f
            .claim(NodeId(1), PageSize::Huge1G)
            .expect_err("not a count");
        let m = e.to_string();
        assert!(
            m.contains("hugepages-1048576kB/free_hugepages:1:") && m.contains("\"lots\""),
            "{m}"
        );
        assert!(!f.claim(NodeId(1), PageSize::Huge1G).expect("empty now"));
    }

    #[test]
    fn counts_parse_as_the_kernel_prints_them() {
        assert_eq!(parse_count("0\n"), Ok(0));
        assert_eq!(parse_count("17\n"), Ok(17));
        assert_eq!(parse_count("17"), Ok(17));
        for bad in ["", "\n", "-1\n", "1 2\n", " 3\n", "3\n\n", "0x10\n", "+4\n"] {
            assert!(parse_count(bad).is_err(), "{bad:?}");
        }
        assert!(parse_count("18446744073709551616\n")
            .expect_err("too large")
            .contains("above the largest count"));
    }

    proptest! {
        /// Everything `%lu\n` can print, on a 64-bit kernel.
        #[test]
        fn every_unsigned_long_parses_back(n in any::<u64>()) {
            prop_assert_eq!(parse_count(&format!("{n}\n")), Ok(n));
        }

        /// Anything else is an error, never a panic, and never a wrong count.
        #[test]
        fn other_text_is_refused_or_exact(s in "\\PC{0,24}") {
            match parse_count(&s) {
                Ok(n) => {
                    let digits = s.strip_suffix('\n').unwrap_or(&s);
                    prop_assert!(digits.bytes().all(|b| b.is_ascii_digit()), "{s:?}");
                    prop_assert_eq!(digits.parse::<u128>().ok(), Some(u128::from(n)));
                }
                Err(m) => prop_assert!(!m.is_empty()),
            }
        }
    }
}
