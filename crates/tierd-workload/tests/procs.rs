//! `tierd-workload chase --procs N` on this host: N processes with their shares of the
//! buffer, one ready line each, SIGTERM passed on, nothing left behind.
#![allow(clippy::tests_outside_test_module)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use tierd_workload::report::ChaseLine;

fn start(args: &[&str]) -> (Child, BufReader<ChildStdout>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tierd-workload"))
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn tierd-workload");
    let out = BufReader::new(child.stdout.take().expect("stdout"));
    (child, out)
}

/// The value of `key=` in a line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

fn read_ready(out: &mut BufReader<ChildStdout>, n: usize) -> Vec<String> {
    let mut ready = Vec::new();
    while ready.len() < n {
        let mut l = String::new();
        assert!(out.read_line(&mut l).expect("read") > 0, "stdout ended");
        if l.trim_end().ends_with(" ready") {
            ready.push(l.trim_end().to_string());
        }
    }
    ready
}

/// Whether `pid` has gone (or is a zombie no one reaps, which holds no memory).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

#[test]
fn procs_split_the_buffer_and_pass_sigterm_on() {
    // 2 MiB hot = 512 pages and 3 MiB cold = 768 pages over 3 processes: 170/171/171 hot,
    // 256 cold each.
    let (mut parent, mut out) = start(&[
        "chase",
        "--total-mib",
        "5",
        "--hot-mib",
        "2",
        "--secs",
        "120",
        "--node",
        "-1",
        "--interval-ms",
        "50",
        "--procs",
        "3",
        "--cpus",
        "0",
    ]);
    let ready = read_ready(&mut out, 3);
    let mut procs: Vec<u32> = ready
        .iter()
        .map(|l| field(l, "proc").expect("proc=").parse().expect("index"))
        .collect();
    procs.sort_unstable();
    assert_eq!(procs, [0, 1, 2], "{ready:#?}");
    let mut pids = Vec::new();
    let (mut hot, mut total) = (0u64, 0u64);
    for l in &ready {
        assert_eq!(field(l, "cpu"), Some("0"), "{l}");
        let ChaseLine::Ready(r) = ChaseLine::parse(l).expect("a valid ready line") else {
            panic!("{l}")
        };
        assert_ne!(u32::try_from(r.pid).expect("pid"), parent.id());
        assert_eq!(r.cpus, [0]);
        assert!((170..=171).contains(&r.hot_pages), "{l}");
        assert_eq!(r.total_pages - r.hot_pages, 256, "{l}");
        hot += r.hot_pages;
        total += r.total_pages;
        pids.push(r.pid);
    }
    assert_eq!((hot, total), (512, 1280));
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), 3, "three processes");
    // SIGTERM only once every process has stepped, as its samples say: all three share CPU 0,
    // and on a busy host one may not have run yet when the last ready line comes. No fixed
    // window: the run's 120 s bound ends a process that never steps, and the test then fails.
    let mut stepped = [false; 3];
    while !stepped.iter().all(|&s| s) {
        let mut l = String::new();
        assert!(out.read_line(&mut l).expect("read") > 0, "stdout ended");
        let proc: usize = field(&l, "proc")
            .expect("proc= on every line")
            .parse()
            .expect("index");
        match ChaseLine::parse(&l).expect("a chase line") {
            ChaseLine::Sample(s) => stepped[proc] |= s.steps_per_s > 0.0,
            other => panic!("a sample before the SIGTERM, got {other:?}"),
        }
    }
    tierd_linux::sys::sigterm(parent.id()).expect("SIGTERM the parent");
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("rest");
    let st = parent.wait().expect("wait");
    assert!(st.success(), "{st}");
    let mut done: Vec<usize> = Vec::new();
    for l in rest.lines().filter(|l| l.starts_with("chase done")) {
        let ChaseLine::Done(d) = ChaseLine::parse(l).expect("done") else {
            panic!("{l}")
        };
        // Steps only grow, and each process's sample showed some.
        assert!(d.steps > 0, "{l}");
        done.push(field(l, "proc").expect("proc=").parse().expect("index"));
    }
    done.sort_unstable();
    assert_eq!(done, [0, 1, 2], "one done line per process:\n{rest}");
    for pid in pids {
        assert!(gone(u32::try_from(pid).expect("pid")), "process {pid} left");
    }
}

#[test]
fn one_process_prints_the_line_it_always_did() {
    let out = Command::new(env!("CARGO_BIN_EXE_tierd-workload"))
        .args([
            "chase",
            "--total-mib",
            "2",
            "--hot-mib",
            "1",
            "--secs",
            "0.2",
            "--node",
            "-1",
            "--procs",
            "1",
        ])
        .output()
        .expect("run");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().expect("a line");
    assert!(
        first.ends_with(" ready") && !first.contains(" proc="),
        "{first}"
    );
    let ChaseLine::Ready(r) = ChaseLine::parse(first).expect("ready") else {
        panic!("{first}")
    };
    assert_eq!((r.hot_pages, r.total_pages), (256, 512));
}

#[test]
fn processes_stop_when_their_parent_is_killed() {
    let (mut parent, mut out) = start(&[
        "chase",
        "--total-mib",
        "2",
        "--hot-mib",
        "2",
        "--secs",
        "120",
        "--node",
        "-1",
        "--interval-ms",
        "100000",
        "--procs",
        "2",
    ]);
    let pids: Vec<u32> = read_ready(&mut out, 2)
        .iter()
        .map(|l| field(l, "pid").expect("pid=").parse().expect("pid"))
        .collect();
    parent.kill().expect("SIGKILL the parent");
    parent.wait().expect("reap the parent");
    let t0 = Instant::now();
    while !pids.iter().all(|p| gone(*p)) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "orphaned chase processes {pids:?} still run"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn too_many_processes_for_the_hot_part_are_refused() {
    // 1 MiB = 256 hot pages cannot give 300 processes a page each.
    let out = Command::new(env!("CARGO_BIN_EXE_tierd-workload"))
        .args([
            "chase",
            "--total-mib",
            "1",
            "--hot-mib",
            "1",
            "--secs",
            "1",
            "--node",
            "-1",
            "--procs",
            "300",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("gives 0 pages per process"), "{err}");
}
