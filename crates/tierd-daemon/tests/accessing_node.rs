//! The accessing node on the tree captured from the Debian 6.12 guest: in precise mode the
//! backend reads where the threads of each process in scope run (`/proc/PID/task/*/stat`,
//! field 39) and tells the engine the node (`OwnerUpdate::HomeNode`); in default mode, or with
//! `accessing_node = "none"`, it reads nothing and says nothing.
#![allow(
    clippy::tests_outside_test_module,
    clippy::unwrap_used,
    clippy::expect_used
)]

mod common;

use std::path::Path;

use tierd_daemon::config::DaemonConfig;
use tierd_daemon::daemon::{LinuxBackend, Preflight};
use tierd_engine::types::{Nanos, NodeId, SpaceId};
use tierd_engine::{Backend, OwnerUpdate};

fn backend(root: &Path, engine: &str) -> LinuxBackend {
    let r = root.join("root");
    let text = format!(
        "[scope]\npids = [152]\n[engine]\n{engine}\n[system]\nsys_root = \"{0}/sys\"\n\
         proc_root = \"{0}/proc\"\ncgroup_root = \"{0}/sys/fs/cgroup\"\n",
        r.display()
    );
    let cfg = DaemonConfig::parse(&text, Path::new("fixture.toml")).expect("valid config");
    let pre = Preflight::check(&cfg).expect("two tiers");
    LinuxBackend::new(cfg, &pre.topology, Vec::new(), true)
}

/// Gives pid 152 (the fixture's dd) a thread `tid` last on `cpu`, `ticks` CPU ticks used.
fn thread(root: &Path, tid: u32, ticks: u64, cpu: u32) {
    let dir = root.join(format!("root/proc/152/task/{tid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut f: Vec<String> = (3..=52).map(|_| "0".to_string()).collect();
    f[0] = "R".into();
    f[14 - 3] = ticks.to_string();
    f[39 - 3] = cpu.to_string();
    std::fs::write(dir.join("stat"), format!("{tid} (dd) {}\n", f.join(" "))).unwrap();
}

fn home_nodes(b: &mut LinuxBackend) -> Vec<Option<NodeId>> {
    let mut u = Vec::new();
    b.drain_owner_updates(&mut u).unwrap();
    u.into_iter()
        .filter_map(|u| match u {
            OwnerUpdate::HomeNode {
                space: SpaceId(152),
                node,
            } => Some(node),
            _ => None,
        })
        .collect()
}

#[test]
fn precise_mode_tells_the_engine_where_the_threads_run() {
    let t = common::copy_fixture();
    // The guest's CPUs 0-1 are node 0's (sys/devices/system/node/node0/cpulist).
    thread(t.path(), 152, 3, 1);
    let mut b = backend(t.path(), "mode = \"precise\"");
    b.refresh(Nanos::ZERO);
    assert_eq!(home_nodes(&mut b), vec![Some(NodeId(0))]);
    // A second running thread on a CPU of no node: no single node any more (read at once,
    // since the first reading was a change).
    thread(t.path(), 153, 2, 7);
    thread(t.path(), 152, 4, 1);
    b.refresh(Nanos::from_millis(1000));
    assert_eq!(home_nodes(&mut b), vec![None]);
    assert!(b.faults.counts().keys().all(|k| !k.starts_with("threads")));
}

#[test]
fn default_mode_and_none_read_no_threads() {
    let t = common::copy_fixture();
    thread(t.path(), 152, 3, 1);
    for engine in [
        "mode = \"default\"",
        "mode = \"precise\"\naccessing_node = \"none\"",
    ] {
        let mut b = backend(t.path(), engine);
        b.refresh(Nanos::ZERO);
        assert_eq!(b.pids(), vec![152], "{engine}");
        assert!(home_nodes(&mut b).is_empty(), "{engine}");
    }
}
