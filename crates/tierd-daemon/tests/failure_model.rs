//! The failure model (docs/daemon.md), one test per fault: a copy of the tree captured from
//! the Debian 6.12 guest is broken the way a running host breaks it (a process exits
//! between two reads, a pid is reused, a node or a cgroup goes away, /proc cannot be
//! listed), and fake feeds fail the way DAMON does; real child processes stand in for pid
//! reuse and cpusets at migration time. Each fault is counted by its reason, and the
//! backend goes on.
#![allow(
    clippy::tests_outside_test_module,
    clippy::unwrap_used,
    clippy::expect_used
)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tierd_daemon::config::DaemonConfig;
use tierd_daemon::daemon::{LinuxBackend, Preflight};
use tierd_engine::plan::{MigrationBatch, MigrationKind, MoveError, MoveOutcome, PlannedMove};
use tierd_engine::types::{CgroupId, Nanos, NodeId, PageRef, SpaceId, Vpn};
use tierd_engine::{Backend, OwnerUpdate};
use tierd_linux::source::damon::DamonError;
use tierd_linux::source::{AccessedRange, Feed, SourceError};

/// A private copy of the guest tree (symlinks kept as links), to break.
fn tree() -> tempfile::TempDir {
    common::copy_fixture()
}

fn config(root: &Path, scope: &str) -> DaemonConfig {
    let r = root.join("root");
    let text = format!(
        "{scope}\n[system]\nsys_root = \"{0}/sys\"\nproc_root = \"{0}/proc\"\ncgroup_root = \"{0}/sys/fs/cgroup\"\n",
        r.display()
    );
    DaemonConfig::parse(&text, Path::new("fixture.toml")).expect("valid config")
}

fn backend(cfg: DaemonConfig, feeds: Vec<Box<dyn Feed>>) -> LinuxBackend {
    let pre = Preflight::check(&cfg).expect("two tiers");
    LinuxBackend::new(cfg, &pre.topology, feeds, true)
}

fn updates(b: &mut LinuxBackend) -> Vec<OwnerUpdate> {
    let mut u = Vec::new();
    b.drain_owner_updates(&mut u).unwrap();
    u
}

fn proc_of(t: &tempfile::TempDir, pid: u32) -> PathBuf {
    t.path().join("root/proc").join(pid.to_string())
}

#[test]
fn a_process_that_exits_between_listing_and_reading_is_counted_and_left_out() {
    let t = tree();
    let mut b = backend(config(t.path(), "[scope]\npids = [1, 152]"), Vec::new());
    std::fs::remove_file(proc_of(&t, 152).join("numa_maps")).unwrap();
    b.refresh(Nanos::ZERO);
    assert_eq!(b.pids(), vec![1]);
    assert_eq!(b.faults.get("process_gone"), 1);
}

#[test]
fn a_held_process_that_can_no_longer_be_read_is_forgotten_by_the_engine() {
    let t = tree();
    let mut b = backend(config(t.path(), "[scope]\npids = [152]"), Vec::new());
    b.refresh(Nanos::ZERO);
    assert_eq!(b.pids(), vec![152]);
    updates(&mut b);
    // It exits after the listing: its files are gone when the next refresh reads them.
    std::fs::remove_file(proc_of(&t, 152).join("maps")).unwrap();
    b.refresh(Nanos::from_millis(1000));
    assert!(b.pids().is_empty());
    assert_eq!(b.faults.get("process_gone"), 1);
    let u = updates(&mut b);
    assert!(
        u.iter()
            .any(|u| matches!(u, OwnerUpdate::Exited { space } if *space == SpaceId(152))),
        "the engine forgets its pages: {u:?}"
    );
}

#[test]
fn a_reused_pid_is_a_new_process_and_the_old_one_is_forgotten_first() {
    let t = tree();
    let mut b = backend(config(t.path(), "[scope]\npids = [152]"), Vec::new());
    b.refresh(Nanos::ZERO);
    updates(&mut b);
    // Another process now holds pid 152: same pid, a later start time (stat field 22).
    let stat_path = proc_of(&t, 152).join("stat");
    let stat = std::fs::read_to_string(&stat_path).unwrap();
    let close = stat.rfind(')').unwrap();
    let mut f: Vec<String> = stat[close + 2..]
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let start: u64 = f[22 - 3].parse().unwrap();
    f[22 - 3] = (start + 500).to_string();
    std::fs::write(&stat_path, format!("{} {}\n", &stat[..=close], f.join(" "))).unwrap();
    b.refresh(Nanos::from_millis(1000));
    assert_eq!(b.faults.get("pid_reused"), 1);
    assert_eq!(b.pids(), vec![152], "the new process is in scope");
    let u = updates(&mut b);
    let exited = u
        .iter()
        .position(|u| matches!(u, OwnerUpdate::Exited { space } if *space == SpaceId(152)));
    let owner = u
        .iter()
        .position(|u| matches!(u, OwnerUpdate::Owner { space, .. } if *space == SpaceId(152)));
    assert!(
        exited.unwrap() < owner.unwrap(),
        "the old address space is forgotten before the new owner: {u:?}"
    );
}

#[test]
fn numa_maps_is_reread_only_when_maps_change_or_it_is_old() {
    let t = tree();
    let cfg = config(
        t.path(),
        "[scope]\npids = [152]\n[daemon]\nnuma_maps_max_age_ms = 10000",
    );
    let mut b = backend(cfg, Vec::new());
    b.refresh(Nanos::ZERO);
    assert_eq!(b.pids(), vec![152]);
    // numa_maps gone but maps unchanged: not read again, the process stays.
    let numa = proc_of(&t, 152).join("numa_maps");
    let saved = std::fs::read(&numa).unwrap();
    std::fs::remove_file(&numa).unwrap();
    b.refresh(Nanos::from_millis(1000));
    assert_eq!(b.pids(), vec![152]);
    assert_eq!(b.faults.get("numa_maps_reused"), 1);
    // Older than numa_maps_max_age_ms: read again (and now missing: the process is gone).
    b.refresh(Nanos::from_millis(11_000));
    assert!(b.pids().is_empty());
    std::fs::write(&numa, &saved).unwrap();
    b.refresh(Nanos::from_millis(12_000));
    assert_eq!(b.pids(), vec![152]);
    // Maps changed: read again at once.
    std::fs::remove_file(&numa).unwrap();
    let maps = proc_of(&t, 152).join("maps");
    let mut m = std::fs::read_to_string(&maps).unwrap();
    m.push_str("7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n");
    std::fs::write(&maps, m).unwrap();
    b.refresh(Nanos::from_millis(13_000));
    assert!(b.pids().is_empty());
}

#[test]
fn a_node_whose_meminfo_vanished_is_left_out_of_usage() {
    let t = tree();
    let mut b = backend(config(t.path(), "[scope]\npids = [1]"), Vec::new());
    std::fs::remove_file(t.path().join("root/sys/devices/system/node/node1/meminfo")).unwrap();
    let u = b.usage(Nanos::ZERO).unwrap();
    assert!(u.nodes.contains_key(&NodeId(0)));
    assert!(
        !u.nodes.contains_key(&NodeId(1)),
        "nothing is planned onto it"
    );
    assert_eq!(b.faults.get("node_meminfo_gone"), 1);
}

#[test]
fn a_removed_cgroup_is_counted_and_its_processes_leave_the_scope() {
    let t = tree();
    let mut b = backend(
        config(t.path(), "[scope]\ncgroups = [\"/tierd-fx\"]"),
        Vec::new(),
    );
    b.refresh(Nanos::ZERO);
    assert_eq!(b.pids(), vec![152]);
    updates(&mut b);
    std::fs::remove_dir_all(t.path().join("root/sys/fs/cgroup/tierd-fx")).unwrap();
    b.refresh(Nanos::from_millis(1000));
    assert!(b.pids().is_empty());
    assert!(b.faults.get("cgroup_gone") >= 1);
    let u = updates(&mut b);
    assert!(u
        .iter()
        .any(|u| matches!(u, OwnerUpdate::Exited { space } if *space == SpaceId(152))));
    // Usage no longer reads the cgroup.
    let usage = b.usage(Nanos::from_millis(1000)).unwrap();
    assert!(usage.cgroups.is_empty(), "{:?}", usage.cgroups);
}

#[test]
fn a_proc_that_cannot_be_listed_keeps_the_last_scope() {
    let t = tree();
    let mut b = backend(config(t.path(), "[scope]\nall = true"), Vec::new());
    b.refresh(Nanos::ZERO);
    let before = b.pids();
    assert!(!before.is_empty());
    let proc_root = t.path().join("root/proc");
    std::fs::rename(&proc_root, t.path().join("root/proc.away")).unwrap();
    b.refresh(Nanos::from_millis(1000));
    assert_eq!(b.pids(), before, "kept, not emptied");
    assert_eq!(b.faults.get("scope_read_gone"), 1);
    std::fs::rename(t.path().join("root/proc.away"), &proc_root).unwrap();
    b.refresh(Nanos::from_millis(2000));
    assert_eq!(b.pids(), before);
}

/// A feed that fails the way DAMON's sysfs does: the first `set_targets` with EINVAL (a
/// target exited before the commit), polls with EBUSY then EMFILE, and a kdamond that
/// stopped by itself.
struct FlakyFeed {
    set_calls: std::sync::Arc<std::sync::atomic::AtomicU32>,
    polls: u32,
}

fn damon_io(errno: i32) -> SourceError {
    SourceError::Damon(DamonError::Io {
        op: "writing \"commit\" to".into(),
        path: "/sys/kernel/mm/damon/admin/kdamonds/0/state".into(),
        source: std::io::Error::from_raw_os_error(errno),
    })
}

impl Feed for FlakyFeed {
    fn name(&self) -> &'static str {
        "damon"
    }
    fn set_targets(&mut self, _pids: &[u32]) -> Result<(), SourceError> {
        let n = self
            .set_calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n == 0 {
            Err(damon_io(libc::EINVAL))
        } else {
            Ok(())
        }
    }
    fn poll(&mut self, _now: Nanos, _out: &mut Vec<AccessedRange>) -> Result<(), SourceError> {
        self.polls += 1;
        match self.polls {
            1 => Err(damon_io(libc::EBUSY)),
            2 => Err(damon_io(libc::EMFILE)),
            _ => Ok(()),
        }
    }
    fn drain_events(&mut self, out: &mut Vec<&'static str>) {
        if self.polls == 3 {
            out.push("damon_kdamond_stopped");
        }
    }
    fn stop(&mut self) {}
}

#[test]
fn source_failures_are_counted_and_refused_targets_are_given_again() {
    let t = tree();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let feed = FlakyFeed {
        set_calls: std::sync::Arc::clone(&calls),
        polls: 0,
    };
    let mut b = backend(
        config(t.path(), "[scope]\npids = [152]"),
        vec![Box::new(feed)],
    );
    b.refresh(Nanos::ZERO);
    assert_eq!(b.faults.get("damon_targets_einval"), 1);
    // Same scope, but the refused targets are given again.
    b.refresh(Nanos::from_millis(1000));
    assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
    // And not a third time once accepted.
    b.refresh(Nanos::from_millis(2000));
    assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
    let mut obs = Vec::new();
    for i in 0..3 {
        b.drain_observations(Nanos::from_millis(3000 + i), &mut obs)
            .unwrap();
    }
    assert_eq!(b.faults.get("damon_poll_ebusy"), 1);
    assert_eq!(b.faults.get("damon_poll_emfile"), 1);
    assert_eq!(b.faults.get("damon_kdamond_stopped"), 1);
}

fn sleeper() -> std::process::Child {
    Command::new("sleep")
        .arg("60")
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

/// A backend over this machine's real /proc (pidfds) with the guest's topology, moving for
/// real (not a dry run).
fn live_backend(pid: u32) -> LinuxBackend {
    let t = common::fixture();
    let text = format!(
        "[scope]\npids = [{pid}]\n[system]\nsys_root = \"{0}/sys\"\nproc_root = \"/proc\"\ncgroup_root = \"{0}/sys/fs/cgroup\"\n",
        t.display()
    );
    let cfg = DaemonConfig::parse(&text, Path::new("live.toml")).unwrap();
    let mut fx = cfg.clone();
    fx.system.proc_root = t.join("proc");
    let pre = Preflight::check(&fx).unwrap();
    LinuxBackend::new(cfg, &pre.topology, Vec::new(), false)
}

fn batch(pid: u32, target: NodeId) -> MigrationBatch {
    MigrationBatch {
        id: 1,
        kind: MigrationKind::Promote,
        target,
        cgroup: CgroupId::ROOT,
        pages: (0..4)
            .map(|i| PlannedMove {
                page: PageRef::base(SpaceId(pid), Vpn(0x1000 + i)),
                from: NodeId(1),
            })
            .collect(),
    }
}

#[test]
fn a_pid_whose_process_exited_is_never_passed_to_move_pages() {
    let mut child = sleeper();
    let pid = child.id();
    let mut b = live_backend(pid);
    b.refresh(Nanos::ZERO);
    assert_eq!(b.pids(), vec![pid]);
    child.kill().unwrap();
    child.wait().unwrap();
    // The pid is free (and could be anyone's by the time of the batch): refused here, the
    // kernel is never asked.
    let calls_before = b.mover().stats().move_calls;
    let r = b
        .migrate(Nanos::from_millis(10), &batch(pid, NodeId(0)))
        .unwrap();
    assert!(r
        .results
        .iter()
        .all(|x| x.outcome == MoveOutcome::Failed(MoveError::NoProcess)));
    assert_eq!(b.mover().stats().move_calls, calls_before);
    assert_eq!(b.faults.get("move_process_gone"), 1);
    // And the next refresh drops it from the scope.
    b.refresh(Nanos::from_millis(1000));
    assert!(b.pids().is_empty());
}

#[test]
fn a_target_outside_the_process_cpuset_is_refused_without_a_syscall() {
    let mut child = sleeper();
    let pid = child.id();
    let mut b = live_backend(pid);
    b.refresh(Nanos::ZERO);
    // Node 9 is in no cpuset here.
    let r = b
        .migrate(Nanos::from_millis(10), &batch(pid, NodeId(9)))
        .unwrap();
    assert!(r
        .results
        .iter()
        .all(|x| x.outcome == MoveOutcome::Failed(MoveError::Access)));
    assert_eq!(b.mover().stats().move_calls, 0);
    assert_eq!(b.faults.get("move_cpuset_denied"), 4);
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The access check (`daemon.verify_window_ms`) over this process's own pages, with a
/// regular file standing in for `/sys/kernel/mm/page_idle/bitmap` (the captured guest has no
/// idle page tracking): a promotion candidate is deferred while its frame is marked, refused
/// when its bit is still set a window later, and moved once the bit is clear (the kernel
/// clears it when the page is touched). Without root, pagemap hides PFNs: the candidates are
/// passed to the mover unasked.
#[test]
fn a_promotion_candidate_moves_only_when_its_own_accessed_bit_says_it_was_touched() {
    let d = common::copy_fixture();
    let root = d.path().join("root");
    let idle_dir = root.join("sys/kernel/mm/page_idle");
    std::fs::create_dir_all(&idle_dir).unwrap();
    let bitmap = idle_dir.join("bitmap");
    std::fs::write(&bitmap, b"").unwrap();
    let pid = std::process::id();
    let text = format!(
        "[scope]\npids = [{pid}]\n[system]\nsys_root = \"{0}/sys\"\nproc_root = \"/proc\"\ncgroup_root = \"{0}/sys/fs/cgroup\"\n",
        root.display()
    );
    let cfg = DaemonConfig::parse(&text, Path::new("live.toml")).unwrap();
    assert_eq!(cfg.daemon.verify_window_ms, 1000, "on by default");
    let mut fx = cfg.clone();
    fx.system.proc_root = root.join("proc");
    let pre = Preflight::check(&fx).unwrap();
    let mut b = LinuxBackend::new(cfg, &pre.topology, Vec::new(), false);
    assert!(b.verify_off.is_none(), "check on: {:?}", b.verify_off);
    b.refresh(Nanos::ZERO);
    // Four touched pages of this process.
    let mut buf = vec![1u8; 6 * 4096];
    let first = (buf.as_mut_ptr() as u64).div_ceil(4096);
    let batch = MigrationBatch {
        id: 1,
        kind: MigrationKind::Promote,
        target: NodeId(0),
        cgroup: CgroupId::ROOT,
        pages: (0..4)
            .map(|i| PlannedMove {
                page: PageRef::base(SpaceId(pid), Vpn(first + i)),
                from: NodeId(1),
            })
            .collect(),
    };
    let outcomes = |b: &mut LinuxBackend, ms: u64| -> Vec<MoveOutcome> {
        b.migrate(Nanos::from_millis(ms), &batch)
            .unwrap()
            .results
            .iter()
            .map(|r| r.outcome)
            .collect()
    };
    let o = outcomes(&mut b, 10);
    if o[0] != MoveOutcome::Failed(MoveError::Deferred) {
        // Not root: no PFN, so nothing to ask; the mover had them (they are on node 0).
        assert!(o.iter().all(|x| !matches!(
            x,
            MoveOutcome::Failed(MoveError::Deferred | MoveError::Untouched)
        )));
        println!("SKIP the rest: pagemap shows no PFNs to this user");
        return;
    }
    assert!(o
        .iter()
        .all(|x| *x == MoveOutcome::Failed(MoveError::Deferred)));
    assert!(
        std::fs::metadata(&bitmap).unwrap().len() > 0,
        "the frames were marked"
    );
    let calls = b.mover().stats().move_calls;
    // Within the window: still deferred.
    assert!(outcomes(&mut b, 500)
        .iter()
        .all(|x| *x == MoveOutcome::Failed(MoveError::Deferred)));
    // A window later the bits are still set (nothing cleared them): refused, never moved.
    assert!(outcomes(&mut b, 1100)
        .iter()
        .all(|x| *x == MoveOutcome::Failed(MoveError::Untouched)));
    assert_eq!(b.mover().stats().move_calls, calls);
    // The "kernel" clears the bits of touched pages: they move (they are on node 0 already).
    let len = std::fs::metadata(&bitmap).unwrap().len();
    std::fs::write(&bitmap, vec![0u8; usize::try_from(len).unwrap()]).unwrap();
    assert!(outcomes(&mut b, 1200)
        .iter()
        .all(|x| *x == MoveOutcome::Moved(NodeId(0))));
    assert!(b.mover().stats().move_calls > calls);
    buf[0] = 2;
    assert_eq!(buf[0] + buf[4096], 3);
}

/// A feed that records what the backend tells it about the access check.
struct CheckRecorder(std::sync::Arc<std::sync::Mutex<Vec<bool>>>);

impl Feed for CheckRecorder {
    fn name(&self) -> &'static str {
        "damon"
    }
    fn set_targets(&mut self, _pids: &[u32]) -> Result<(), SourceError> {
        Ok(())
    }
    fn poll(&mut self, _now: Nanos, _out: &mut Vec<AccessedRange>) -> Result<(), SourceError> {
        Ok(())
    }
    fn set_access_check(&mut self, on: bool) {
        if let Ok(mut v) = self.0.lock() {
            v.push(on);
        }
    }
    fn stop(&mut self) {}
}

/// The sources learn whether the access check is on when the backend opens it, before the
/// first refresh (DAMON fits its regions finer without it,
/// `sources.damon.unchecked_max_region_kib`): on over a stand-in idle bitmap, off on a
/// kernel without one (Debian's), off in a dry run.
#[test]
fn the_sources_are_told_whether_the_access_check_is_on() {
    for (bitmap, dry_run, want) in [
        (true, false, true),
        (false, false, false),
        (true, true, false),
    ] {
        let d = common::copy_fixture();
        let root = d.path().join("root");
        if bitmap {
            let idle_dir = root.join("sys/kernel/mm/page_idle");
            std::fs::create_dir_all(&idle_dir).unwrap();
            std::fs::write(idle_dir.join("bitmap"), b"").unwrap();
        }
        let text = format!(
            "[scope]\npids = [1]\n[system]\nsys_root = \"{0}/sys\"\nproc_root = \"{0}/proc\"\ncgroup_root = \"{0}/sys/fs/cgroup\"\n",
            root.display()
        );
        let cfg = DaemonConfig::parse(&text, Path::new("check.toml")).unwrap();
        let pre = Preflight::check(&cfg).unwrap();
        let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let feed: Box<dyn Feed> = Box::new(CheckRecorder(told.clone()));
        let b = LinuxBackend::new(cfg, &pre.topology, vec![feed], dry_run);
        assert_eq!(b.verify_off.is_none(), want, "{:?}", b.verify_off);
        assert_eq!(
            *told.lock().unwrap(),
            vec![want],
            "bitmap {bitmap}, dry run {dry_run}"
        );
    }
}
