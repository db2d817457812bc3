//! Sources against real files captured from a Linux 6.12 guest with a CPU-less slow node
//! (tests/fixtures/guest-6.12, see its README.md): pagemap of four processes read as root,
//! and a DAMON sysfs tree captured with a running `vaddr` kdamond and its `tried_regions`.
//! Expectations are derived from the capture's own files (meta/, memory blocks), not copied.
// Integration tests are their own crate; the unit-test lint does not apply here, and the
// fixture helpers outside `#[test]` fns panic on a broken fixture like the tests do.
#![allow(clippy::tests_outside_test_module, clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use tierd_engine::types::{Nanos, NodeId, Vpn};
use tierd_linux::pagemap::{pfn_visibility, Pagemap, PfnVisibility};
use tierd_linux::source::damon::{
    self as damon, probe_with, read_tried_regions, DamonConfig, DamonError, DamonMonitor, RealFs,
    ADMIN_PATH,
};
use tierd_linux::source::locate::{locate, LocateParams, LocateStats, Locator};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/guest-6.12")
}

fn text(rel: &str) -> String {
    fs::read_to_string(root().join(rel)).unwrap()
}

fn pid_of(name: &str) -> u32 {
    text("meta/pids.env")
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// pid -> number of pagemap entries captured (meta/pagemap-entries.txt: pid entries end).
fn pagemap_entries() -> BTreeMap<u32, u64> {
    text("meta/pagemap-entries.txt")
        .lines()
        .map(|l| {
            let mut w = l.split_whitespace();
            (
                w.next().unwrap().parse().unwrap(),
                w.next().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

/// PFN -> node, from the memory blocks (sys/devices/system/memory/memoryN/nodeM links and
/// block_size_bytes, hex).
struct BlockNodes {
    block_pages: u64,
    node: HashMap<u64, u16>,
}

impl BlockNodes {
    fn read() -> Self {
        let dir = root().join("sys/devices/system/memory");
        let bs = u64::from_str_radix(
            text("sys/devices/system/memory/block_size_bytes").trim(),
            16,
        )
        .unwrap();
        let mut node = HashMap::new();
        for e in fs::read_dir(&dir).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            let Some(idx) = name
                .strip_prefix("memory")
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            for l in fs::read_dir(dir.join(&name)).unwrap() {
                let ln = l.unwrap().file_name().to_string_lossy().into_owned();
                if let Some(n) = ln.strip_prefix("node").and_then(|n| n.parse().ok()) {
                    node.insert(idx, n);
                }
            }
        }
        BlockNodes {
            block_pages: bs / 4096,
            node,
        }
    }
    fn of(&self, pfn: u64) -> Option<NodeId> {
        self.node.get(&(pfn / self.block_pages)).map(|&n| NodeId(n))
    }
}

#[test]
fn pagemap_of_guest_processes() {
    let blocks = BlockNodes::read();
    let proc_root = root().join("proc");
    let mems: Vec<u16> = text("sys/fs/cgroup/tierd-fx/cpuset.mems.effective")
        .trim()
        .split(',')
        .map(|n| n.parse().unwrap())
        .collect();
    let slow = pid_of("PID_SLOW");
    for (&pid, &entries) in pagemap_entries().iter().filter(|(p, _)| **p != 1) {
        let pm = Pagemap::open(&proc_root, pid).unwrap();
        let e = pm.read_range(Vpn(0), entries).unwrap();
        assert_eq!(e.len() as u64, entries);
        // Captured as root: PFNs visible.
        assert_eq!(pfn_visibility(&e), PfnVisibility::Visible, "pid {pid}");
        let present: Vec<_> = e.iter().filter(|x| x.present()).collect();
        assert!(!present.is_empty());
        // Every present PFN lies in an online memory block of some node.
        for x in &present {
            assert!(
                blocks.of(x.pfn().unwrap().0).is_some(),
                "pid {pid}: {:#x}",
                x.0
            );
        }
        if pid == slow {
            // The cgroup's cpuset confines its private anonymous pages to cpuset.mems.
            let anon: Vec<_> = present
                .iter()
                .filter(|x| !x.file_or_shared_anon() && x.exclusive())
                .collect();
            assert!(!anon.is_empty());
            for x in anon {
                let n = blocks.of(x.pfn().unwrap().0).unwrap();
                assert!(mems.contains(&n.0), "pid {pid} anon page on {n}");
            }
        }
    }
    // Reading past the captured prefix gives not-present entries, not an error.
    let hot = pid_of("PID_HOT");
    let n = pagemap_entries()[&hot];
    let tail = Pagemap::open(&proc_root, hot)
        .unwrap()
        .read_range(Vpn(n - 1), 4)
        .unwrap();
    assert!(tail[1..].iter().all(|x| !x.present()));
}

/// Copies the captured DAMON tree into a temp dir (tests must not touch the fixture).
fn damon_copy() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let src = root().join("sys").join(ADMIN_PATH);
    let dst = t.path().join("sys").join(ADMIN_PATH);
    copy_dir(&src, &dst);
    let sys = t.path().join("sys");
    (t, sys)
}

fn copy_dir(src: &Path, dst: &Path) {
    fs::create_dir_all(dst).unwrap();
    for e in fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            fs::copy(e.path(), to).unwrap();
        }
    }
}

fn snapshot(dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            snapshot(&e.path(), out);
        } else {
            out.insert(e.path(), fs::read_to_string(e.path()).unwrap());
        }
    }
}

#[test]
fn running_guest_kdamond_is_left_alone() {
    let (_t, sys) = damon_copy();
    let admin = sys.join(ADMIN_PATH);
    let mut before = BTreeMap::new();
    snapshot(&admin, &mut before);
    let kd_pid = fs::read_to_string(admin.join("kdamonds/0/pid")).unwrap();
    for take_over_idle in [false, true] {
        let cfg = DamonConfig {
            take_over_idle,
            ..DamonConfig::default()
        };
        let err = DamonMonitor::new(RealFs, &sys, cfg).unwrap_err();
        assert!(
            matches!(&err, DamonError::Busy { index: 0, pid } if *pid == kd_pid.trim()),
            "{err}"
        );
    }
    // A root probe says the same.
    let proc_root = sys.parent().unwrap().join("proc");
    fs::create_dir_all(proc_root.join("self")).unwrap();
    fs::write(
        proc_root.join("self/status"),
        "Uid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n",
    )
    .unwrap();
    let st = probe_with(&RealFs, &sys, &proc_root);
    assert!(!st.available);
    assert!(
        st.reason.contains("busy") && st.reason.contains(kd_pid.trim()),
        "{}",
        st.reason
    );
    let mut after = BTreeMap::new();
    snapshot(&admin, &mut after);
    assert_eq!(before, after, "the captured kdamond's files were modified");
}

#[test]
fn tried_regions_of_the_guest_capture() {
    let admin = root().join("sys").join(ADMIN_PATH);
    let ctx = admin.join("kdamonds/0/contexts/0");
    let num = |rel: &str| -> u64 {
        fs::read_to_string(ctx.join(rel))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let pid = u32::try_from(num("targets/0/pid_target")).unwrap();
    assert_eq!(pid, pid_of("PID_HOT"));
    let max_acc =
        num("monitoring_attrs/intervals/aggr_us") / num("monitoring_attrs/intervals/sample_us");
    let dir = ctx.join("schemes/0/tried_regions");
    let n_dirs = fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .parse::<u64>()
                .is_ok()
        })
        .count();
    let regions = read_tried_regions(&RealFs, &dir, pid, Nanos(7)).unwrap();
    assert_eq!(regions.len(), n_dirs);
    assert!(regions.len() >= 3, "DAMON keeps at least min_nr_regions");
    for w in regions.windows(2) {
        assert!(w[0].end <= w[1].start, "regions overlap or are unsorted");
    }
    for r in &regions {
        assert!(r.start < r.end && r.start % 4096 == 0 && r.end % 4096 == 0);
        assert!(r.nr_accesses <= max_acc, "{r:?}");
        assert_eq!((r.pid, r.time), (pid, Nanos(7)));
    }
    // The awk process's heap (from its maps) was among the monitored ranges.
    let heap = text(&format!("proc/{pid}/maps"))
        .lines()
        .find(|l| l.ends_with("[heap]"))
        .map(|l| {
            let r = l.split_whitespace().next().unwrap();
            let (a, b) = r.split_once('-').unwrap();
            (
                u64::from_str_radix(a, 16).unwrap(),
                u64::from_str_radix(b, 16).unwrap(),
            )
        })
        .unwrap();
    assert!(regions.iter().any(|r| r.start < heap.1 && heap.0 < r.end));

    // Regions -> observations, with the node of each page from the captured pagemap and
    // memory blocks: only pages present in the capture come out, on the node of their frame.
    let blocks = BlockNodes::read();
    let pm = Pagemap::open(&root().join("proc"), pid).unwrap();
    let entries = pm.read_range(Vpn(0), pagemap_entries()[&pid]).unwrap();
    // The captured pagemap and memory blocks as the locator (the daemon's is move_pages).
    struct Captured<'a> {
        entries: &'a [tierd_linux::pagemap::PagemapEntry],
        blocks: &'a BlockNodes,
    }
    impl Locator for Captured<'_> {
        type Error = ();
        fn nodes(&mut self, _pid: u32, addrs: &[u64]) -> Result<Vec<Result<NodeId, i32>>, ()> {
            Ok(addrs
                .iter()
                .map(|a| {
                    usize::try_from(a >> 12)
                        .ok()
                        .and_then(|i| self.entries.get(i))
                        .and_then(|e| e.pfn())
                        .and_then(|pfn| self.blocks.of(pfn.0))
                        .ok_or(libc::ENOENT)
                })
                .collect())
        }
    }
    let params = LocateParams {
        max_pages: 200,
        min_nr_accesses: 1,
        min_relative_permille: 0,
        hugetlb: tierd_linux::source::folio::HugetlbPolicy::Leave,
    };
    let run = || {
        let mut ranges = Vec::new();
        damon::to_ranges(&regions, 1, Nanos(1), &mut ranges);
        let mut loc = Captured {
            entries: &entries,
            blocks: &blocks,
        };
        let mut out = Vec::new();
        let mut stats = LocateStats::default();
        let failed = locate(
            &ranges,
            params,
            &[NodeId(0)],
            |_| true,
            &mut loc,
            &mut tierd_linux::source::folio::BaseFolios,
            &mut stats,
            &mut out,
        );
        assert!(failed.is_empty());
        out
    };
    let obs = run();
    assert!(
        !obs.is_empty(),
        "no accessed region of the heap was present"
    );
    assert!(obs.len() <= 200);
    let qualifying: Vec<_> = regions.iter().filter(|r| r.nr_accesses >= 1).collect();
    for o in &obs {
        let addr = o.page.vpn.addr();
        assert!(qualifying.iter().any(|r| r.start <= addr && addr < r.end));
        let e = entries[usize::try_from(o.page.vpn.0).unwrap()];
        assert_eq!(Some(o.page_node), blocks.of(e.pfn().unwrap().0));
    }
    // Same input, same pages.
    assert_eq!(run(), obs);
}
