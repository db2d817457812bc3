//! Huge pages through the daemon (docs/daemon.md, "Huge pages"), on a copy of the tree
//! captured from the Debian 6.12 guest with a THP-backed and a hugetlb mapping added to the
//! dd (pid 152), as the kernel prints them in `maps`, `numa_maps` and `smaps`. The fixture's
//! pids are not this host's, so pages are located by a table (every page on node 1, the slow
//! tier), and batches go through the dry run, which prints and counts what would move.
#![allow(
    clippy::tests_outside_test_module,
    clippy::unwrap_used,
    clippy::expect_used
)]

mod common;

use std::path::Path;

use tierd_daemon::config::DaemonConfig;
use tierd_daemon::daemon::{LinuxBackend, Preflight};
use tierd_engine::plan::{MigrationBatch, MigrationKind, MoveError, MoveOutcome, PlannedMove};
use tierd_engine::sources::SourceKind;
use tierd_engine::types::{CgroupId, Nanos, NodeId, PageRef, PageSize, SpaceId, Vpn};
use tierd_engine::{Backend, Observation};
use tierd_linux::mover::MoverError;
use tierd_linux::source::folio::FolioMethod;
use tierd_linux::source::locate::Locator;
use tierd_linux::source::{AccessedRange, Feed, SourceError};

const PID: u32 = 152;
/// A 4 MiB anonymous mapping backed by two THPs (2 MiB aligned).
const THP_START: u64 = 0x7ff0_0000_0000;
/// A 4 MiB hugetlbfs mapping: two 2 MiB hugetlb pages.
const HTLB_START: u64 = 0x7fe0_0000_0000;
const MIB4: u64 = 4 << 20;

/// `text`'s entries with `extra` added, ordered by start address as the kernel lists VMAs.
/// An entry is a line (`maps`, `numa_maps`) or, for `smaps`, a range line and its fields.
fn insert_sorted(text: &str, extra: &[String], blocks: bool) -> String {
    let mut entries: Vec<String> = Vec::new();
    for line in text.lines() {
        let starts_entry = !blocks
            || line
                .split_once(' ')
                .is_some_and(|(r, _)| r.contains('-') && !r.ends_with(':'));
        if starts_entry || entries.is_empty() {
            entries.push(format!("{line}\n"));
        } else {
            let last = entries.last_mut().unwrap();
            last.push_str(line);
            last.push('\n');
        }
    }
    entries.extend(extra.iter().cloned());
    let start = |e: &String| {
        let tok = e.split([' ', '-']).next().unwrap_or("");
        u64::from_str_radix(tok, 16).unwrap_or(u64::MAX)
    };
    entries.sort_by_key(start);
    entries.concat()
}

/// One smaps entry with every field 6.12 prints.
fn smaps_entry(head: &str, fields: &[(&str, u64)], flags: &str) -> String {
    let mut s = format!("{head}\n");
    for (k, v) in fields {
        s.push_str(&format!("{:<16}{v:>8} kB\n", format!("{k}:")));
    }
    s.push_str(&format!(
        "THPeligible:    {:>8}\nProtectionKey:  {:>8}\nVmFlags: {flags} \n",
        u8::from(flags.contains("hg")),
        0
    ));
    s
}

fn smaps_fields(
    size: u64,
    kps: u64,
    rss: u64,
    anon_huge: u64,
    hugetlb: u64,
) -> Vec<(&'static str, u64)> {
    vec![
        ("Size", size),
        ("KernelPageSize", kps),
        ("MMUPageSize", kps),
        ("Rss", rss),
        ("Pss", rss),
        ("Pss_Dirty", rss),
        ("Shared_Clean", 0),
        ("Shared_Dirty", 0),
        ("Private_Clean", 0),
        ("Private_Dirty", rss),
        ("Referenced", rss),
        ("Anonymous", if hugetlb > 0 { 0 } else { rss }),
        ("KSM", 0),
        ("LazyFree", 0),
        ("AnonHugePages", anon_huge),
        ("ShmemPmdMapped", 0),
        ("FilePmdMapped", 0),
        ("Shared_Hugetlb", hugetlb),
        ("Private_Hugetlb", 0),
        ("Swap", 0),
        ("SwapPss", 0),
        ("Locked", 0),
    ]
}

/// A private copy of the guest tree with the two mappings added to pid 152.
fn tree() -> tempfile::TempDir {
    let d = common::copy_fixture();
    let p = d.path().join("root/proc").join(PID.to_string());
    // The folio method is probed on `<proc>/self/smaps` (tierd's own): a directory, not the
    // kernel's symlink, so that the pid namespace check says it cannot tell rather than
    // refusing a /proc whose `self` is not this test.
    let me = d.path().join("root/proc/self");
    std::fs::create_dir_all(&me).unwrap();
    std::fs::copy(p.join("smaps"), me.join("smaps")).unwrap();
    let edit = |name: &str, extra: Vec<String>, blocks: bool| {
        let f = p.join(name);
        let text = std::fs::read_to_string(&f).unwrap();
        std::fs::write(&f, insert_sorted(&text, &extra, blocks)).unwrap();
    };
    let thp_range = format!("{THP_START:x}-{:x}", THP_START + MIB4);
    let htlb_range = format!("{HTLB_START:x}-{:x}", HTLB_START + MIB4);
    let thp_maps = format!("{thp_range} rw-p 00000000 00:00 0 ");
    let htlb_maps =
        format!("{htlb_range} rw-s 00000000 00:10 4242                       /dev/hugepages/db");
    edit(
        "maps",
        vec![format!("{thp_maps}\n"), format!("{htlb_maps}\n")],
        false,
    );
    // fs/proc/task_mmu.c show_numa_map(): a hugetlb VMA says `huge` and counts huge pages.
    edit(
        "numa_maps",
        vec![
            format!(
                "{THP_START:x} default anon=1024 dirty=1024 active=0 N1=1024 kernelpagesize_kB=4\n"
            ),
            format!(
                "{HTLB_START:x} default file=/dev/hugepages/db huge dirty=2 mapmax=1 N1=2 \
                 kernelpagesize_kB=2048\n"
            ),
        ],
        false,
    );
    edit(
        "smaps",
        vec![
            smaps_entry(
                &thp_maps,
                &smaps_fields(4096, 4, 4096, 4096, 0),
                "rd wr mr mw me ac sd hg",
            ),
            // hugetlb pages are not in Rss: they are in Shared_/Private_Hugetlb.
            smaps_entry(
                &htlb_maps,
                &smaps_fields(4096, 2048, 0, 0, 4096),
                "rd wr sh mr mw me ms de ht sd",
            ),
        ],
        true,
    );
    d
}

fn config(root: &Path, daemon: &str) -> DaemonConfig {
    let r = root.join("root");
    let text = format!(
        "[scope]\npids = [{PID}]\n[daemon]\n{daemon}\n[system]\nsys_root = \"{0}/sys\"\n\
         proc_root = \"{0}/proc\"\ncgroup_root = \"{0}/sys/fs/cgroup\"\n",
        r.display()
    );
    DaemonConfig::parse(&text, Path::new("fixture.toml")).expect("valid config")
}

/// Every page on `node`.
struct AllOn(NodeId);

impl Locator for AllOn {
    type Error = MoverError;
    fn nodes(&mut self, _pid: u32, addrs: &[u64]) -> Result<Vec<Result<NodeId, i32>>, MoverError> {
        Ok(addrs.iter().map(|_| Ok(self.0)).collect())
    }
}

/// A DAMON-like feed reporting the given ranges at every poll.
struct Ranges(Vec<(u64, u64)>);

impl Feed for Ranges {
    fn name(&self) -> &'static str {
        "damon"
    }
    fn set_targets(&mut self, _pids: &[u32]) -> Result<(), SourceError> {
        Ok(())
    }
    fn poll(&mut self, now: Nanos, out: &mut Vec<AccessedRange>) -> Result<(), SourceError> {
        for &(addr, bytes) in &self.0 {
            out.push(AccessedRange {
                pid: PID,
                start: Vpn::from_addr(addr),
                nr_pages: bytes >> 12,
                time: now,
                kind: SourceKind::AccessedBitScan,
                accessing_node: None,
                nr_accesses: 5,
                pfn: None,
            });
        }
        Ok(())
    }
    fn stop(&mut self) {}
}

fn backend(cfg: DaemonConfig, ranges: Vec<(u64, u64)>) -> LinuxBackend {
    let pre = Preflight::check(&cfg).expect("two tiers");
    let mut b = LinuxBackend::new(cfg, &pre.topology, vec![Box::new(Ranges(ranges))], true)
        .with_locator(Box::new(AllOn(NodeId(1))));
    b.refresh(Nanos::ZERO);
    assert_eq!(b.pids(), vec![PID]);
    b
}

fn observe(b: &mut LinuxBackend) -> Vec<Observation> {
    let mut obs = Vec::new();
    b.drain_observations(Nanos::from_millis(10), &mut obs)
        .unwrap();
    obs
}

/// The batch the engine plans for these observations: each folio once, from node 1 to 0.
fn promote(obs: &[Observation]) -> MigrationBatch {
    MigrationBatch {
        id: 1,
        kind: MigrationKind::Promote,
        target: NodeId(0),
        cgroup: CgroupId::ROOT,
        pages: obs
            .iter()
            .map(|o| PlannedMove {
                page: o.page,
                from: o.page_node,
            })
            .collect(),
    }
}

fn huge(addr: u64) -> PageRef {
    PageRef::sized(SpaceId(PID), Vpn::from_addr(addr), PageSize::Huge2M)
}

#[test]
fn a_thp_region_is_observed_as_its_folios_and_moved_once_with_all_its_pages() {
    let t = tree();
    let mut b = backend(config(t.path(), ""), vec![(THP_START, MIB4)]);
    // No kpageflags in a fixture tree: smaps tells the folios.
    assert_eq!(b.folio_method(), FolioMethod::Smaps);
    let obs = observe(&mut b);
    let pages: Vec<PageRef> = obs.iter().map(|o| o.page).collect();
    assert_eq!(
        pages,
        vec![huge(THP_START), huge(THP_START + (2 << 20))],
        "1024 accessed pages are two folios"
    );
    assert!(obs.iter().all(|o| o.page_node == NodeId(1)));
    let f = b.folio_snapshot();
    assert_eq!(
        (f.method.as_str(), f.huge_folios_observed, f.unknown_pages),
        ("smaps", 2, 0)
    );
    let report = b.migrate(Nanos::from_millis(20), &promote(&obs)).unwrap();
    assert_eq!(report.results.len(), 2, "one result per folio");
    // Dry run: 2 x 512 base pages planned, in one line per batch.
    assert_eq!(b.planned_pages, 1024);
    assert_eq!(
        b.dry_run_log,
        vec!["dry run: would Promote 1024 pages to node 0 (pid 152: 1024)".to_string()]
    );
}

#[test]
fn hugetlb_pages_are_left_alone_by_default() {
    let t = tree();
    let mut b = backend(config(t.path(), ""), vec![(HTLB_START, MIB4)]);
    let obs = observe(&mut b);
    assert!(obs.is_empty(), "{obs:?}");
    let f = b.folio_snapshot();
    assert_eq!((f.hugetlb_left_pages, f.huge_folios_observed), (1024, 0));
    // Were one planned anyway, it would not reach the kernel.
    let batch = promote(&[Observation {
        page: huge(HTLB_START),
        page_node: NodeId(1),
        accessing_node: None,
        source: SourceKind::AccessedBitScan,
        time: Nanos::ZERO,
        weight: 5,
    }]);
    let r = b.migrate(Nanos::from_millis(20), &batch).unwrap();
    assert_eq!(r.results[0].outcome, MoveOutcome::Failed(MoveError::Access));
    assert_eq!(b.planned_pages, 0);
    assert_eq!(b.faults.get("hugetlb_left_planned"), 1);
}

#[test]
fn hugetlb_pages_move_only_into_free_huge_pages_of_the_target_node() {
    let t = tree();
    let free = t
        .path()
        .join("root/sys/devices/system/node/node0/hugepages/hugepages-2048kB/free_hugepages");
    assert_eq!(std::fs::read_to_string(&free).unwrap(), "0\n");
    let mut b = backend(
        config(t.path(), "hugetlb = \"move\""),
        vec![(HTLB_START, MIB4)],
    );
    let obs = observe(&mut b);
    let pages: Vec<PageRef> = obs.iter().map(|o| o.page).collect();
    assert_eq!(pages, vec![huge(HTLB_START), huge(HTLB_START + (2 << 20))]);
    // Node 0's pool is empty: both held back, none planned.
    let r = b.migrate(Nanos::from_millis(20), &promote(&obs)).unwrap();
    assert!(r
        .results
        .iter()
        .all(|x| x.outcome == MoveOutcome::Failed(MoveError::NoMem)));
    assert_eq!(b.planned_pages, 0);
    assert_eq!(b.faults.get("hugetlb_no_free"), 2);
    assert_eq!(b.folio_snapshot().hugetlb_no_free_pages, 1024);
    // One free huge page: the first folio goes, the second waits.
    std::fs::write(&free, "1\n").unwrap();
    let r = b.migrate(Nanos::from_millis(30), &promote(&obs)).unwrap();
    assert_eq!(r.results[1].outcome, MoveOutcome::Failed(MoveError::NoMem));
    assert_ne!(r.results[0].outcome, MoveOutcome::Failed(MoveError::NoMem));
    assert_eq!(b.planned_pages, 512);
    assert_eq!(b.faults.get("hugetlb_no_free"), 3);
    // A THP in the same batch is not a hugetlb page: it never waits for the pool.
    let mut batch = promote(&obs);
    batch.pages.push(PlannedMove {
        page: huge(THP_START),
        from: NodeId(1),
    });
    std::fs::write(&free, "0\n").unwrap();
    let r = b.migrate(Nanos::from_millis(40), &batch).unwrap();
    assert_ne!(r.results[2].outcome, MoveOutcome::Failed(MoveError::NoMem));
    assert_eq!(b.planned_pages, 1024);
}

#[test]
fn pages_whose_folio_cannot_be_told_are_counted_and_never_observed() {
    let t = tree();
    std::fs::remove_file(t.path().join("root/proc/152/smaps")).unwrap();
    let mut b = backend(config(t.path(), ""), vec![(THP_START, MIB4)]);
    // The method is smaps, but this process's cannot be read.
    assert_eq!(b.folio_method(), FolioMethod::Smaps);
    let obs = observe(&mut b);
    assert!(obs.is_empty(), "{obs:?}");
    let f = b.folio_snapshot();
    assert_eq!((f.unknown_pages, f.huge_folios_observed), (1024, 0));
    assert_eq!(b.faults.get("folio_unknown"), 1024);
    assert_eq!(
        b.faults.get("folio_read_failed"),
        1,
        "one smaps read, failed"
    );
    // Nothing planned, so nothing moved.
    assert_eq!(b.planned_pages, 0);
}

#[test]
fn with_neither_kpageflags_nor_smaps_nothing_whose_folio_matters_is_observed() {
    let t = tree();
    std::fs::remove_file(t.path().join("root/proc/self/smaps")).unwrap();
    let mut b = backend(
        config(t.path(), "hugetlb = \"move\""),
        vec![(THP_START, MIB4), (HTLB_START, MIB4)],
    );
    assert_eq!(b.folio_method(), FolioMethod::Unavailable);
    let obs = observe(&mut b);
    assert!(obs.is_empty(), "{obs:?}");
    let f = b.folio_snapshot();
    assert_eq!((f.method.as_str(), f.unknown_pages), ("unavailable", 2048));
    assert_eq!(b.faults.get("folio_unknown"), 2048);
}

/// The whole loop (the engine's `step`, as `tierd run` drives it) over the THP mapping: the
/// engine plans each folio as one move of 512 base pages, never a subpage, and counts it in
/// base pages and in folios as the kernel's vmstat does.
#[test]
fn the_engine_plans_each_thp_once_with_its_512_pages() {
    let t = tree();
    let cfg = config(t.path(), "");
    let pre = Preflight::check(&cfg).expect("two tiers");
    let mut engine =
        tierd_engine::Engine::new(cfg.engine_config(), pre.topology.clone()).expect("engine");
    let mut b = LinuxBackend::new(
        cfg,
        &pre.topology,
        vec![Box::new(Ranges(vec![(THP_START, MIB4)]))],
        true,
    )
    .with_locator(Box::new(AllOn(NodeId(1))));
    let mut bufs = tierd_engine::StepBuffers::default();
    for i in 0..40u64 {
        let now = Nanos::from_millis(500 * i);
        if i % 2 == 0 {
            b.refresh(now);
        }
        let Ok(_) = tierd_engine::step(&mut engine, &mut b, now, &mut bufs);
    }
    assert!(
        !b.dry_run_log.is_empty(),
        "the hot THPs were planned for promotion in 20 s"
    );
    // Both folios, 2 x 512 pages, in the first batch.
    assert_eq!(
        b.dry_run_log[0],
        "dry run: would Promote 1024 pages to node 0 (pid 152: 1024)"
    );
    for line in &b.dry_run_log {
        // "dry run: would Promote N pages to node 0 (pid 152: N)"
        let n: u64 = line
            .split_whitespace()
            .nth(4)
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!(n > 0 && n.is_multiple_of(512), "whole folios only: {line}");
    }
    assert!(b.planned_pages.is_multiple_of(512));
    assert_eq!(b.folio_snapshot().unknown_pages, 0);
    assert!(b.folio_snapshot().huge_folios_observed >= 2);
}
