//! Runs the real `tierd-workload` binary on this host and checks its reports through the
//! crate's own parsers (what the guest harness will do).
#![allow(clippy::tests_outside_test_module)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Output, Stdio};

use tierd_workload::report::{
    ChaseLine, ChasePolicy, HoldLine, IntegrityLine, MoveLine, Placement,
};

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
    Placement::all_on(0, pages)
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
    let ChaseLine::Ready(ready) = &lines[0] else {
        panic!("first line is not ready: {:?}", lines[0])
    };
    assert_eq!((ready.total_pages, ready.hot_pages), (4096, 1024));
    assert_eq!((ready.node, ready.tick_us, ready.ticker_pid), (0, 0, 0));
    assert!(ready.pid > 0 && ready.addr % 4096 == 0, "{ready:?}");
    let samples: Vec<_> = lines
        .iter()
        .filter_map(|l| match l {
            ChaseLine::Sample(s) => Some(s.clone()),
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

fn chase_lines(args: &[&str]) -> Vec<ChaseLine> {
    stdout_lines(&run(args))
        .iter()
        .map(|l| ChaseLine::parse(l).expect("every stdout line parses"))
        .collect()
}

#[test]
fn chase_threads_split_the_hot_part_and_report_each_slice() {
    let lines = chase_lines(&[
        "chase",
        "--total-mib",
        "8",
        "--hot-mib",
        "4",
        "--secs",
        "1",
        "--node",
        "0",
        "--interval-ms",
        "250",
        "--threads",
        "3",
        "--cpus",
        "0,1",
    ]);
    let ChaseLine::Ready(ready) = &lines[0] else {
        panic!("first line: {:?}", lines[0])
    };
    assert_eq!(ready.threads, 3);
    // Pinned round-robin: CPU 0 and 1 exist on any host this test runs on (2+ CPUs).
    assert_eq!(ready.cpus, vec![0, 1]);
    assert_eq!(ready.policy, ChasePolicy::Default);
    let samples: Vec<_> = lines
        .iter()
        .filter_map(|l| match l {
            ChaseLine::Sample(s) => Some(s),
            _ => None,
        })
        .collect();
    assert!(samples.len() >= 2, "{} samples", samples.len());
    for s in &samples {
        assert_eq!(s.threads.len(), 3, "{s:?}");
        // 1024 hot pages split 341/341/342: each slice counted once, all on node 0.
        let sizes: Vec<u64> = s.threads.iter().map(|t| t.hot.total()).collect();
        assert_eq!(sizes, vec![341, 341, 342]);
        assert!(s.threads.iter().all(|t| t.hot.node(0) == t.hot.total()));
        assert!(s.threads.iter().all(|t| t.steps_per_s > 0.0), "{s:?}");
        let sum: f64 = s.threads.iter().map(|t| t.steps_per_s).sum();
        assert!((sum / s.steps_per_s - 1.0).abs() < 0.01, "{sum} vs {s:?}");
    }
    let Some(ChaseLine::Done(done)) = lines.last() else {
        panic!("last line is not done")
    };
    assert_eq!(done.threads.len(), 3);
    assert_eq!(done.hot, all_on_node0(1024));
}

#[test]
fn chase_preferred_many_policies_are_set_and_reported() {
    // mm/mempolicy.c mpol_to_str(): mode name, `=balancing` for MPOL_F_NUMA_BALANCING, `:nodes`.
    for (policy, shown) in [
        ("preferred-many", "prefer (many):0 "),
        ("preferred-many-balancing", "prefer (many)=balancing:0 "),
    ] {
        let args = [
            "chase",
            "--total-mib",
            "4",
            "--hot-mib",
            "2",
            "--secs",
            "0.5",
            "--node",
            "0",
            "--interval-ms",
            "100",
            "--policy",
            policy,
            "--policy-nodes",
            "0",
        ];
        let mut child = Command::new(env!("CARGO_BIN_EXE_tierd-workload"))
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut first = String::new();
        out.read_line(&mut first).expect("ready line");
        // The policy as the kernel shows it, read while the chase runs.
        let maps =
            std::fs::read_to_string(format!("/proc/{}/numa_maps", child.id())).expect("numa_maps");
        let mut rest = String::new();
        out.read_to_string(&mut rest).expect("rest");
        assert!(child.wait().expect("wait").success());
        let ChaseLine::Ready(ready) = ChaseLine::parse(&first).expect("ready") else {
            panic!("first line: {first}")
        };
        let hot = format!("{:x} {shown}", ready.addr);
        let cold = format!("{:x} {shown}", ready.cold_addr);
        assert!(
            maps.contains(&hot) && maps.contains(&cold),
            "{hot:?} / {cold:?} in\n{maps}"
        );
        assert_eq!(ready.policy.as_str(), policy);
        assert_eq!(ready.policy_nodes.to_string(), "0");
        assert_eq!(ready.threads, 1);
        let lines: Vec<ChaseLine> = rest
            .lines()
            .map(|l| ChaseLine::parse(l).expect("parses"))
            .collect();
        let Some(ChaseLine::Done(done)) = lines.last() else {
            panic!("last line is not done")
        };
        assert_eq!(done.hot, all_on_node0(512));
        assert_eq!(done.cold, all_on_node0(512));
    }
    let out = run(&[
        "chase",
        "--total-mib",
        "4",
        "--hot-mib",
        "2",
        "--secs",
        "0.1",
        "--node",
        "0",
        "--policy",
        "preferred-many",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs --policy-nodes"));
}

#[test]
fn integrity_verifies_and_rewrites_without_failures() {
    let out = run(&[
        "integrity",
        "--mib",
        "8",
        "--node",
        "0",
        "--secs",
        "1.2",
        "--interval-ms",
        "300",
        "--threads",
        "2",
    ]);
    let lines: Vec<IntegrityLine> = stdout_lines(&out)
        .iter()
        .map(|l| IntegrityLine::parse(l).expect("every stdout line parses"))
        .collect();
    let IntegrityLine::Ready {
        pages,
        threads,
        placement,
        ..
    } = lines[0]
    else {
        panic!("first line: {:?}", lines[0])
    };
    assert_eq!((pages, threads), (2048, 2));
    assert_eq!(placement, all_on_node0(2048));
    let samples: Vec<_> = lines
        .iter()
        .filter_map(|l| match l {
            IntegrityLine::Sample(s) => Some(*s),
            _ => None,
        })
        .collect();
    assert!(samples.len() >= 2, "{lines:?}");
    for w in samples.windows(2) {
        assert!(w[1].verified_pages > w[0].verified_pages, "{w:?}");
    }
    let Some(IntegrityLine::Done(done)) = lines.last() else {
        panic!("last line: {lines:?}")
    };
    assert_eq!(done.failures, 0, "{lines:?}");
    assert!(done.passes >= 1 && done.verified_pages >= 2048, "{done:?}");
    assert!(done.rewritten_pages > 0, "{done:?}");
    assert_eq!(done.placement, all_on_node0(2048));
}

/// `Node 0 MemFree:` of this host in MiB.
fn node0_free_mib() -> u64 {
    let text = std::fs::read_to_string("/sys/devices/system/node/node0/meminfo").expect("meminfo");
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("Node 0 MemFree:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("MemFree line");
    kib / 1024
}

#[test]
fn hold_leave_free_fills_node0_down_to_the_mark() {
    // Ask to leave all but ~48 MiB free: the workload allocates down to that mark. Other
    // processes allocate and free meanwhile (a guest test's QEMU exiting frees
    // gigabytes, a build fills the page cache), so the hold is judged by its own result: node
    // 0's free memory read while it holds, right after its ready line, is near the mark.
    let leave = node0_free_mib().saturating_sub(48);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tierd-workload"))
        .args([
            "hold",
            "--leave-free-mib",
            &leave.to_string(),
            "--node",
            "0",
        ])
        .args(["--secs", "2"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("ready line");
    let free_while_held = node0_free_mib();
    child.kill().ok();
    child.wait().ok();
    let lines = vec![first.trim_end().to_string()];
    let HoldLine::Ready { mib, placement, .. } = HoldLine::parse(&lines[0]).expect("ready") else {
        panic!("{lines:?}")
    };
    assert!(
        free_while_held.abs_diff(leave) <= 112,
        "allocated {mib} MiB, node 0 free while held {free_while_held} MiB, mark {leave}: {lines:?}"
    );
    assert_eq!(placement, all_on_node0(mib * 256));
    let out = run(&[
        "hold",
        "--leave-free-mib",
        "10",
        "--node",
        "-1",
        "--secs",
        "0",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs a --node"));
}

#[test]
fn integrity_counts_a_word_corrupted_behind_its_back_once() {
    use std::io::{Seek, SeekFrom, Write};
    let mut child = Command::new(env!("CARGO_BIN_EXE_tierd-workload"))
        .args(["integrity", "--mib", "4", "--node", "0", "--secs", "1.5"])
        .args(["--interval-ms", "300"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("ready line");
    let IntegrityLine::Ready { addr, .. } = IntegrityLine::parse(&first).expect("ready") else {
        panic!("first line: {first}")
    };
    // Corrupt one word through /proc/PID/mem (we are its parent, so ptrace access is allowed),
    // as a migration that lost a write would.
    let target = addr + 5 * 4096 + 24;
    let mut mem = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{}/mem", child.id()))
        .expect("open /proc/PID/mem");
    mem.seek(SeekFrom::Start(target)).expect("seek");
    mem.write_all(&[0u8; 8]).expect("write");
    drop(mem);
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("rest");
    assert!(
        child.wait().expect("wait").success(),
        "exit 0 despite failures"
    );
    let lines: Vec<IntegrityLine> = rest
        .lines()
        .map(|l| IntegrityLine::parse(l).expect("parses"))
        .collect();
    let bad: Vec<_> = lines
        .iter()
        .filter_map(|l| match l {
            IntegrityLine::Bad { addr, got, want } => Some((*addr, *got, *want)),
            _ => None,
        })
        .collect();
    assert_eq!(bad.len(), 1, "{rest}");
    assert_eq!((bad[0].0, bad[0].1), (target, 0));
    assert_ne!(bad[0].2, 0);
    let Some(IntegrityLine::Done(done)) = lines.last() else {
        panic!("{rest}")
    };
    // Repaired after the first failure, so counted once although verified many times over.
    assert_eq!(done.failures, 1, "{rest}");
    assert!(done.passes >= 2, "{done:?}");
}

#[test]
fn integrity_cuts_its_buffer_and_checks_what_is_left_without_failures() {
    // 8 MiB: with 2 threads, each run has at least one whole 2 MiB block to cut.
    let out = run(&[
        "integrity",
        "--mib",
        "8",
        "--node",
        "0",
        "--secs",
        "1.5",
        "--interval-ms",
        "300",
        "--threads",
        "2",
        "--thp",
        "follow",
        "--split-every-ms",
        "20",
    ]);
    let lines: Vec<IntegrityLine> = stdout_lines(&out)
        .iter()
        .map(|l| IntegrityLine::parse(l).expect("every stdout line parses"))
        .collect();
    let Some(IntegrityLine::Done(done)) = lines.last() else {
        panic!("last line: {lines:?}")
    };
    // Each discarded page read back as zeros (or it would be a failure) and was rewritten;
    // each unmapped page left the check and the location query.
    assert_eq!(done.failures, 0, "{lines:?}");
    assert!(
        done.discarded_pages > 0 && done.unmapped_pages > 0,
        "{done:?}"
    );
    assert!(done.cut_blocks >= 2, "both threads cut: {done:?}");
    assert!(done.rewritten_pages >= done.discarded_pages, "{done:?}");
    assert_eq!(
        done.placement,
        all_on_node0(2048 - done.unmapped_pages),
        "{done:?}"
    );
    // Samples count up.
    let cuts: Vec<u64> = lines
        .iter()
        .filter_map(|l| match l {
            IntegrityLine::Sample(s) => Some(s.discarded_pages + s.unmapped_pages),
            _ => None,
        })
        .collect();
    assert!(cuts.windows(2).all(|w| w[1] >= w[0]), "{cuts:?}");
}

/// The `VmFlags` of the VMA of `pid` that starts at `addr`, from /proc/PID/smaps.
fn vm_flags(pid: u32, addr: u64) -> Vec<String> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).expect("smaps");
    let start = format!("{addr:x}-");
    let mut inside = false;
    for l in smaps.lines() {
        // A VMA's header starts with its range (`start-end`); its fields with `Name:`.
        let header = l
            .split_whitespace()
            .next()
            .is_some_and(|w| w.contains('-') && !w.ends_with(':'));
        if header {
            inside = l.starts_with(&start);
        }
        if inside {
            if let Some(f) = l.strip_prefix("VmFlags:") {
                return f.split_whitespace().map(str::to_owned).collect();
            }
        }
    }
    panic!("no VMA starts at {addr:#x}:\n{smaps}")
}

#[test]
fn chase_thp_follow_keeps_the_hot_part_apart_without_opting_out_of_thp() {
    for (thp, want, not) in [("follow", "dc", "nh"), ("off", "nh", "dc")] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tierd-workload"))
            .args([
                "chase",
                "--total-mib",
                "8",
                "--hot-mib",
                "4",
                "--secs",
                "30",
            ])
            .args(["--node", "0", "--interval-ms", "5000", "--thp", thp])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut first = String::new();
        out.read_line(&mut first).expect("ready line");
        let ChaseLine::Ready(ready) = ChaseLine::parse(&first).expect("ready") else {
            panic!("{first}")
        };
        // The hot part is a VMA of its own (it starts at the hot address), marked
        // MADV_DONTFORK ("dc") with --thp follow, MADV_NOHUGEPAGE ("nh") with --thp off.
        let flags = vm_flags(child.id(), ready.addr);
        let _ = child.kill();
        let _ = child.wait();
        assert!(flags.iter().any(|f| f == want), "--thp {thp}: {flags:?}");
        assert!(!flags.iter().any(|f| f == not), "--thp {thp}: {flags:?}");
    }
}

/// `hold --unbind`: the memory is placed on the node (MPOL_BIND while it is touched), then its
/// policy is reset to MPOL_DEFAULT, as `numa_maps` shows; without it the bind stays.
#[test]
fn hold_unbind_leaves_the_memory_on_the_node_with_the_default_policy() {
    let policies = |unbind: bool| -> Vec<String> {
        let mut args = vec!["hold", "--mib", "4", "--node", "0", "--secs", "5"];
        if unbind {
            args.push("--unbind");
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_tierd-workload"))
            .args(&args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut first = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut first)
            .expect("ready line");
        let maps =
            std::fs::read_to_string(format!("/proc/{}/numa_maps", child.id())).expect("numa_maps");
        child.kill().ok();
        child.wait().ok();
        let HoldLine::Ready {
            addr, placement, ..
        } = HoldLine::parse(first.trim_end()).expect("ready")
        else {
            panic!("{first}")
        };
        assert_eq!(placement, all_on_node0(4 * 256));
        maps.lines()
            .filter(|l| l.starts_with(&format!("{addr:x} ")))
            .map(|l| l.split_whitespace().nth(1).unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(policies(false), ["bind:0"]);
    assert_eq!(policies(true), ["default"]);
}
