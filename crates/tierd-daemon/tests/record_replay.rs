//! `tierd run --record` and `tierd replay`: the daemon's backend on the tree captured from the
//! Debian 6.12 guest (its dd, pid 152, with a 32 MiB anonymous mapping at 0x7ffff5e00000), a DAMON-like feed
//! whose hot window moves through the mapping, passes run through the daemon's
//! `recorded_step` exactly as the run loop calls it, in a dry run (the fixture's pids are not
//! this host's). The trace is then replayed with the recorded configuration: every decision
//! must be the one the daemon made.
#![allow(
    clippy::tests_outside_test_module,
    clippy::unwrap_used,
    clippy::expect_used
)]

mod common;

use std::path::Path;

use tierd_daemon::config::DaemonConfig;
use tierd_daemon::daemon::{recorded_step, start_recording, LinuxBackend, Preflight};
use tierd_engine::sources::SourceKind;
use tierd_engine::types::{Nanos, NodeId, Vpn};
use tierd_engine::{Engine, StepBuffers};
use tierd_linux::mover::MoverError;
use tierd_linux::source::locate::Locator;
use tierd_linux::source::{AccessedRange, Feed, SourceError};
use tierd_trace::{passes, read, replay, Limits, Record};

const PID: u32 = 152;
/// The dd's anonymous mapping in the fixture (`proc/152/maps`).
const START: u64 = 0x7fff_f5e0_0000;

/// Every page on the slow node.
struct AllOn(NodeId);

impl Locator for AllOn {
    type Error = MoverError;
    fn nodes(&mut self, _pid: u32, addrs: &[u64]) -> Result<Vec<Result<NodeId, i32>>, MoverError> {
        Ok(addrs.iter().map(|_| Ok(self.0)).collect())
    }
}

/// A DAMON-like feed: a 2 MiB hot window moving through the mapping every second, and the
/// rest of it seen now and then.
struct Moving;

impl Feed for Moving {
    fn name(&self) -> &'static str {
        "damon"
    }
    fn set_targets(&mut self, _pids: &[u32]) -> Result<(), SourceError> {
        Ok(())
    }
    fn poll(&mut self, now: Nanos, out: &mut Vec<AccessedRange>) -> Result<(), SourceError> {
        let secs = now.0 / 1_000_000_000;
        let hot = START + (secs % 16) * (2 << 20);
        let range = |start: u64, bytes: u64, n: u32| AccessedRange {
            pid: PID,
            start: Vpn::from_addr(start),
            nr_pages: bytes >> 12,
            time: now,
            kind: SourceKind::AccessedBitScan,
            accessing_node: None,
            nr_accesses: n,
            pfn: None,
        };
        out.push(range(hot, 2 << 20, 20));
        if (now.0 / 100_000_000).is_multiple_of(7) {
            out.push(range(START + ((secs * 5) % 32) * (1 << 20), 1 << 20, 1));
        }
        Ok(())
    }
    fn stop(&mut self) {}
}

fn config(root: &Path) -> DaemonConfig {
    let r = root.join("root");
    let text = format!(
        "[scope]\npids = [{PID}]\n[system]\nsys_root = \"{0}/sys\"\n\
         proc_root = \"{0}/proc\"\ncgroup_root = \"{0}/sys/fs/cgroup\"\n",
        r.display()
    );
    DaemonConfig::parse(&text, Path::new("fixture.toml")).expect("valid config")
}

#[test]
fn a_recorded_daemon_run_replays_to_the_same_decisions() {
    let t = common::copy_fixture();
    // The folio method is probed on `<proc>/self/smaps` (as in huge_pages.rs): a directory,
    // so the pid namespace check cannot tell rather than refusing this /proc.
    let me = t.path().join("root/proc/self");
    std::fs::create_dir_all(&me).unwrap();
    std::fs::copy(t.path().join("root/proc/152/smaps"), me.join("smaps")).unwrap();
    let cfg = config(t.path());
    let pre = Preflight::check(&cfg).expect("two tiers");
    let mut backend = LinuxBackend::new(cfg.clone(), &pre.topology, vec![Box::new(Moving)], true)
        .with_locator(Box::new(AllOn(NodeId(1))));
    let dir = t.path().join("trace");
    let mut recording =
        Some(start_recording(&cfg, &pre, &backend, &dir, Limits::default()).unwrap());
    let mut engine = Engine::new(cfg.engine_config(), pre.topology.clone()).unwrap();
    let mut bufs = StepBuffers::default();
    let mut buf = Vec::new();
    let mut lines = Vec::new();
    let mut log = |l: &str| lines.push(l.to_string());
    for pass in 0..200_u64 {
        let now = Nanos::from_millis(pass * 100);
        if pass.is_multiple_of(10) {
            backend.refresh(now);
        }
        let Ok(_) = recorded_step(
            &mut engine,
            &mut backend,
            now,
            &mut bufs,
            &mut recording,
            &mut buf,
            &mut log,
        );
    }
    assert!(recording.is_some(), "recording went on: {lines:?}");
    let planned = backend.planned_pages;
    assert!(planned > 0, "the daemon decided something");

    let trace = read(&dir).unwrap();
    assert!(trace.complete);
    let batches = trace
        .records
        .iter()
        .filter(|r| matches!(r, Record::Batch(_)))
        .count();
    assert!(batches > 0);
    assert!(batches >= 10, "{batches} batches");
    let cfg = trace.header.config.clone();
    let r = replay(&trace.header, passes(trace.records).unwrap(), cfg).unwrap();
    assert!(r.identical(), "{}", r.verdict());
    assert_eq!(
        (r.same, r.recorded, r.replayed),
        (batches, batches, batches)
    );
    assert_eq!(r.passes, 200);
}
