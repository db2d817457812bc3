//! Folio mapping on pages captured from a 6.12 guest with THPs and hugetlb pages
//! (tests/fixtures/guest-6.12-folios, `tierd-vm capture-folio-fixtures`): both methods of
//! `ProcFolios` find the THP heads and sizes, the split huge page as base pages, the order-4
//! folios as unknown and the hugetlb pages as hugetlb of their size, and agree wherever smaps
//! can tell.
//!
//! Each snapshot (`whole/`, before two huge pages were split; `split/`, after) becomes a
//! `/proc` root in a temporary directory: the process's smaps, maps and numa_maps, and sparse
//! `<pid>/pagemap` and `kpageflags` files holding the captured slices at `vpn * 8` and
//! `pfn * 8` (a frame or page not captured reads as zeros: no flags, not present).
#![allow(clippy::tests_outside_test_module, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tierd_engine::types::{NodeId, PageSize, Vpn};
use tierd_linux::source::folio::{FolioMap, FolioMethod, FolioOf, HugetlbPolicy, ProcFolios};
use tierd_linux::source::locate::{locate, LocateParams, LocateStats, Locator};
use tierd_linux::source::AccessedRange;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/guest-6.12-folios")
}

/// `meta/folios.env`: the pid, the buffers (`thp=` and `hugetlb=` starts and lengths) and the
/// split huge pages.
struct Env {
    pid: u32,
    thp: (u64, u64),
    hugetlb: Vec<(u64, u64)>,
    split_base: u64,
    split_order4: u64,
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

fn env() -> Env {
    let text = std::fs::read_to_string(fixture().join("meta/folios.env")).unwrap();
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("{k} in folios.env"))
            .trim_matches('\'')
            .to_owned()
    };
    let line = get("LINE");
    let buf = |w: &str| {
        let (a, l) = w.split_once('+').unwrap();
        (hex(a), l.parse::<u64>().unwrap())
    };
    let mut thp = None;
    let mut hugetlb = Vec::new();
    for w in line.split(' ') {
        if let Some(b) = w.strip_prefix("thp=") {
            thp = Some(buf(b));
        } else if let Some(b) = w.strip_prefix("hugetlb=") {
            hugetlb.push(buf(b));
        }
    }
    Env {
        pid: get("PID").parse().unwrap(),
        thp: thp.unwrap(),
        hugetlb,
        split_base: hex(&get("SPLIT_BASE")),
        split_order4: hex(&get("SPLIT_ORDER4")),
    }
}

/// A `/proc` root for snapshot `snap`, and the virtual pages whose pagemap was captured.
fn proc_root(snap: &str, pid: u32) -> (tempfile::TempDir, BTreeSet<u64>) {
    let src = fixture().join(snap);
    let dir = tempfile::tempdir().unwrap();
    let pd = dir.path().join(pid.to_string());
    std::fs::create_dir_all(&pd).unwrap();
    for f in ["smaps", "maps", "numa_maps"] {
        std::fs::copy(src.join(format!("proc/{pid}/{f}")), pd.join(f)).unwrap();
    }
    let pagemap = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(pd.join("pagemap"))
        .unwrap();
    let mut captured = BTreeSet::new();
    let slices = std::fs::read_to_string(src.join("meta/pagemap-slices.txt")).unwrap();
    for l in slices.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        let (start, n) = (hex(w[0]) >> 12, w[1].parse::<u64>().unwrap());
        let data = std::fs::read(src.join(w[2])).unwrap();
        assert_eq!(data.len() as u64, n * 8, "{l}");
        pagemap.write_all_at(&data, start * 8).unwrap();
        captured.extend(start..start + n);
    }
    let kpf = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(dir.path().join("kpageflags"))
        .unwrap();
    let bin = std::fs::read(src.join("meta/kpageflags.bin")).unwrap();
    let idx = std::fs::read_to_string(src.join("meta/kpageflags.idx")).unwrap();
    for l in idx.lines() {
        let w: Vec<u64> = l.split_whitespace().map(|x| x.parse().unwrap()).collect();
        let (pfn, n, off) = (w[0], w[1], usize::try_from(w[2]).unwrap());
        let len = usize::try_from(n * 8).unwrap();
        kpf.write_all_at(&bin[off..off + len], pfn * 8).unwrap();
    }
    (dir, captured)
}

fn resolve(root: &Path, method: FolioMethod, pid: u32, vpns: &[u64]) -> Vec<Option<FolioOf>> {
    let mut f = ProcFolios::with_method(root, method);
    assert_eq!(f.method(), method);
    f.begin_pass();
    let vpns: Vec<Vpn> = vpns.iter().map(|&v| Vpn(v)).collect();
    let mut out = Vec::new();
    assert_eq!(f.resolve(pid, &vpns, &mut out), method);
    assert_eq!(out.len(), vpns.len());
    assert_eq!(f.stats().read_failures, 0);
    out
}

fn pages(start: u64, bytes: u64, captured: &BTreeSet<u64>) -> Vec<u64> {
    (start >> 12..(start + bytes) >> 12)
        .filter(|v| captured.contains(v))
        .collect()
}

/// The hugetlb buffers, with their page size from the VMA's `KernelPageSize`.
fn hugetlb_pages(e: &Env, captured: &BTreeSet<u64>) -> Vec<(Vec<u64>, PageSize)> {
    e.hugetlb
        .iter()
        .map(|&(a, l)| {
            let size = if l >= 1 << 30 {
                PageSize::Huge1G
            } else {
                PageSize::Huge2M
            };
            (pages(a, l, captured), size)
        })
        .collect()
}

#[test]
fn whole_thps_and_hugetlb_pages_by_both_methods() {
    let e = env();
    let (root, captured) = proc_root("whole", e.pid);
    let thp = pages(e.thp.0, e.thp.1, &captured);
    assert_eq!(thp.len() as u64, e.thp.1 >> 12);
    for method in [FolioMethod::Kpageflags, FolioMethod::Smaps] {
        let got = resolve(root.path(), method, e.pid, &thp);
        let heads: BTreeSet<u64> = got.iter().map(|f| f.unwrap().head.0).collect();
        assert_eq!(
            heads.len() as u64,
            e.thp.1 >> 21,
            "{method}: one head per 2 MiB"
        );
        for (v, f) in thp.iter().zip(&got) {
            let f = f.unwrap_or_else(|| panic!("{method}: page {v:#x} unknown"));
            assert_eq!(
                f,
                FolioOf::sized(Vpn(*v), PageSize::Huge2M, false),
                "{method}"
            );
        }
        for (hp, size) in hugetlb_pages(&e, &captured) {
            assert!(!hp.is_empty());
            for (v, f) in hp.iter().zip(resolve(root.path(), method, e.pid, &hp)) {
                assert_eq!(f, Some(FolioOf::sized(Vpn(*v), size, true)), "{method}");
            }
        }
    }
}

#[test]
fn split_pages_are_base_pages_or_unknown_and_smaps_agrees_where_it_tells() {
    let e = env();
    let (root, captured) = proc_root("split", e.pid);
    let thp = pages(e.thp.0, e.thp.1, &captured);
    let kpf = resolve(root.path(), FolioMethod::Kpageflags, e.pid, &thp);
    let smaps = resolve(root.path(), FolioMethod::Smaps, e.pid, &thp);
    let chunk = |v: u64| v & !511;
    let (base, order4) = (e.split_base >> 12, e.split_order4 >> 12);
    let mut by_kind = BTreeMap::new();
    for ((&v, k), s) in thp.iter().zip(&kpf).zip(&smaps) {
        let want = if chunk(v) == base {
            Some(FolioOf::base(Vpn(v)))
        } else if chunk(v) == order4 {
            None
        } else {
            Some(FolioOf::sized(Vpn(v), PageSize::Huge2M, false))
        };
        assert_eq!(*k, want, "kpageflags, page {v:#x}");
        *by_kind
            .entry(k.map(|f| f.size.name()).unwrap_or("unknown"))
            .or_insert(0u64) += 1;
        // smaps: the VMA is covered in part, so its aligned chunks are unknown; where it does
        // tell, it says what kpageflags says.
        if let Some(s) = s {
            assert_eq!(Some(*s), *k, "smaps, page {v:#x}");
        }
    }
    let chunks = e.thp.1 >> 21;
    assert_eq!(by_kind.get("4k"), Some(&512));
    assert_eq!(by_kind.get("unknown"), Some(&512));
    assert_eq!(by_kind.get("2m"), Some(&((chunks - 2) * 512)));
    for (hp, size) in hugetlb_pages(&e, &captured) {
        let k = resolve(root.path(), FolioMethod::Kpageflags, e.pid, &hp);
        let s = resolve(root.path(), FolioMethod::Smaps, e.pid, &hp);
        assert_eq!(k, s);
        assert!(k
            .iter()
            .zip(&hp)
            .all(|(f, v)| *f == Some(FolioOf::sized(Vpn(*v), size, true))));
    }
}

#[test]
fn locate_on_the_capture_observes_each_folio_once_at_its_head() {
    // A region covering the second half of the first THP and the split huge page, and one
    // covering the order-4 chunk and the hugetlb buffer: every page present (the captured
    // pagemap), on node 1.
    struct AllOnOne;
    impl Locator for AllOnOne {
        type Error = ();
        fn nodes(&mut self, _: u32, addrs: &[u64]) -> Result<Vec<Result<NodeId, i32>>, ()> {
            Ok(addrs.iter().map(|_| Ok(NodeId(1))).collect())
        }
    }
    let e = env();
    let (root, _) = proc_root("split", e.pid);
    let t = e.thp.0 >> 12;
    let r = |start: u64, nr_pages: u64, nr_accesses: u32| AccessedRange {
        pid: e.pid,
        start: Vpn(start),
        nr_pages,
        time: tierd_engine::types::Nanos(1),
        kind: tierd_engine::SourceKind::AccessedBitScan,
        accessing_node: None,
        nr_accesses,
        pfn: None,
    };
    let (h, hl) = e.hugetlb[0];
    let ranges = [
        r(t + 256, 768, 7),
        r(e.split_order4 >> 12, 512, 3),
        r(h >> 12, hl >> 12, 5),
    ];
    for policy in [HugetlbPolicy::Leave, HugetlbPolicy::Move] {
        let mut folios = ProcFolios::with_method(root.path(), FolioMethod::Kpageflags);
        let mut stats = LocateStats::default();
        let mut out = Vec::new();
        let params = LocateParams {
            max_pages: 10_000,
            min_nr_accesses: 1,
            min_relative_permille: 0,
            hugetlb: policy,
        };
        let failed = locate(
            &ranges,
            params,
            &[NodeId(0)],
            |_| true,
            &mut AllOnOne,
            &mut folios,
            &mut stats,
            &mut out,
        );
        assert!(failed.is_empty());
        let huge: Vec<(u64, PageSize, u32)> = out
            .iter()
            .filter(|o| o.page.size.is_huge())
            .map(|o| (o.page.vpn.0, o.page.size, o.weight))
            .collect();
        let mut want = vec![(t, PageSize::Huge2M, 7)];
        if policy == HugetlbPolicy::Move {
            want.extend((0..hl >> 21).map(|i| ((h >> 12) + i * 512, PageSize::Huge2M, 5)));
        }
        assert_eq!(huge, want, "{policy:?}");
        assert_eq!(
            out.len() - huge.len(),
            512,
            "the split huge page's base pages"
        );
        assert_eq!(stats.folio_unknown, 512, "the order-4 chunk");
        let left = if policy == HugetlbPolicy::Leave {
            hl >> 12
        } else {
            0
        };
        assert_eq!(stats.hugetlb_left, left);
        assert_eq!(stats.looked_up, out.len() as u64, "one lookup per folio");
    }
}
