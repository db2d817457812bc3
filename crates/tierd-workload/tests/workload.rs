//! Runs the real `tierd-workload` binary on this host and checks its reports through the
//! crate's own parsers (what the guest harness will do).
#![allow(clippy::tests_outside_test_module)]

use std::process::{Command, Output};

use tierd_workload::report::{ChaseLine, HoldLine, MoveLine, Placement};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tierd-workload"))
        .args(args)
        .output()
        .expect("run tierd-workload")
}

fn stdout_lines(out: &Output) -> Vec<String> {
    assert!(
        out.status.success(),
        "exit {:?}, stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn all_on_node0(pages: u64) -> Placement {
    Placement {
        n0: pages,
        n1: 0,
        other: 0,
    }
}

#[test]
fn chase_on_node0_reports_placement_and_speed() {
    let out = run(&[
        "chase",
        "--total-mib",
        "16",
        "--hot-mib",
        "4",
        "--secs",
        "1",
        "--node",
        "0",
        "--interval-ms",
        "200",
    ]);
    let lines: Vec<ChaseLine> = stdout_lines(&out)
        .iter()
        .map(|l| ChaseLine::parse(l).expect("every stdout line parses"))
        .collect();
    let ChaseLine::Ready(ready) = lines[0] else {
        panic!("first line is not ready: {:?}", lines[0])
    };
    assert_eq!((ready.total_pages, ready.hot_pages), (4096, 1024));
    assert_eq!((ready.node, ready.tick_us, ready.ticker_pid), (0, 0, 0));
    assert!(ready.pid > 0 && ready.addr % 4096 == 0, "{ready:?}");
    let samples: Vec<_> = lines
        .iter()
        .filter_map(|l| match l {
            ChaseLine::Sample(s) => Some(*s),
            _ => None,
        })
        .collect();
    // 1 s at 200 ms: about 5 samples; allow a slow, shared CI host to miss some.
    assert!(samples.len() >= 3, "{} samples", samples.len());
    for w in samples.windows(2) {
        assert!(w[1].t > w[0].t, "time goes forward");
    }
    for s in &samples {
        assert_eq!(s.hot, all_on_node0(1024), "{s:?}");
        assert_eq!(s.cold, all_on_node0(3072), "{s:?}");
        assert!(s.steps_per_s > 0.0 && s.ns_per_step > 0.0, "{s:?}");
        assert!((s.steps_per_s * s.ns_per_step / 1e9 - 1.0).abs() < 1e-3);
    }
    let Some(ChaseLine::Done(done)) = lines.last() else {
        panic!("last line is not done")
    };
    assert!(done.t >= 1.0, "{done:?}");
    assert!(done.steps > 0 && done.steps_per_s > 0.0, "{done:?}");
    assert_eq!(done.hot, all_on_node0(1024));
    assert_eq!(done.cold, all_on_node0(3072));
}

#[test]
fn chase_with_ticker_cleans_up_its_ticker() {
    let out = run(&[
        "chase",
        "--total-mib",
        "4",
        "--hot-mib",
        "2",
        "--secs",
        "0.5",
        "--node",
        "-1",
        "--tick-us",
        "1000",
    ]);
    let lines = stdout_lines(&out);
    let ChaseLine::Ready(ready) = ChaseLine::parse(&lines[0]).expect("ready") else {
        panic!("first line: {}", lines[0])
    };
    assert_eq!(ready.tick_us, 1000);
    assert!(ready.ticker_pid > 0);
    // The workload killed and reaped its ticker before exiting.
    let stat = format!("/proc/{}/cmdline", ready.ticker_pid);
    let still = std::fs::read(&stat).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&still).contains("ticker"),
        "ticker {} still running",
        ready.ticker_pid
    );
    assert!(matches!(
        ChaseLine::parse(lines.last().expect("lines")),
        Ok(ChaseLine::Done(_))
    ));
}

#[test]
fn hold_reports_bound_placement() {
    let out = run(&["hold", "--mib", "8", "--node", "0", "--secs", "0.1"]);
    let lines = stdout_lines(&out);
    assert_eq!(lines.len(), 2, "{lines:?}");
    match HoldLine::parse(&lines[0]).expect("ready") {
        HoldLine::Ready {
            node,
            mib,
            placement,
            ..
        } => {
            assert_eq!((node, mib), (0, 8));
            assert_eq!(placement, all_on_node0(2048));
        }
        l @ HoldLine::Done { .. } => panic!("{l:?}"),
    }
    assert_eq!(
        HoldLine::parse(&lines[1]).expect("done"),
        HoldLine::Done {
            placement: all_on_node0(2048)
        }
    );
}

#[test]
fn move_to_the_same_node_finds_everything_already_there() {
    let out = run(&["move", "--mib", "4", "--to", "0", "--chunk-pages", "100"]);
    let lines = stdout_lines(&out);
    let m = MoveLine::parse(&lines[0]).expect("move line");
    assert_eq!(
        (m.pages, m.already, m.moved, m.failed, m.busy),
        (1024, 1024, 0, 0, 0)
    );
    assert!(m.secs > 0.0 && m.requested_mib_s > 0.0, "{m:?}");
}

#[test]
fn bad_arguments_fail_with_a_message() {
    let out = run(&[
        "chase",
        "--total-mib",
        "4",
        "--hot-mib",
        "8",
        "--secs",
        "1",
        "--node",
        "0",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--hot-mib 8 exceeds --total-mib 4"), "{err}");
    let out = run(&["move", "--mib", "4", "--to", "7"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("node7") && err.contains("ENODEV"), "{err}");
}
