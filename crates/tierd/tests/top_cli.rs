//! `tierd top` through the binary: with stdout a pipe it prints one plain snapshot and exits.
// Integration tests are their own crate; the unit-test lint does not apply here.
#![allow(clippy::tests_outside_test_module)]

use std::process::Command;

fn tierd(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tierd"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn top_of_a_simulation_piped_prints_the_end_of_the_run() {
    let (ok, out, err) = tierd(&[
        "top",
        "--sim",
        "pointer-chase",
        "--config",
        "N2",
        "--scale",
        "0.015625",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with("tierd top: sim pointer-chase N2, scale 0.015625"),
        "{out}"
    );
    assert!(out.contains("t = 240.0 s"), "{out}");
    assert!(out.contains("NODE TIER"), "{out}");
    assert!(out.contains("processes:"), "{out}");
    assert!(out.contains("cgroups:"), "{out}");
    let chase = out
        .lines()
        .find(|l| l.starts_with("-    chase"))
        .unwrap_or_else(|| panic!("no chase row: {out}"));
    // 64 GiB / 64 = 1 GiB buffer.
    assert!(chase.contains("1.0G"), "{chase}");
    assert!(out.contains("pgpromote_success"), "{out}");
    assert!(!out.contains('\u{1b}'), "no escape codes in a pipe");
}

#[test]
fn top_without_a_daemon_says_where_it_looked() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .to_string();
    let (ok, _, err) = tierd(&["top", "--once", "--addr", &addr]);
    assert!(!ok);
    assert!(err.contains(&addr) && err.contains("tierd run"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
}

#[test]
fn top_refuses_a_bad_interval_and_an_unknown_configuration() {
    let (ok, _, err) = tierd(&["top", "--interval", "0"]);
    assert!(!ok);
    assert!(err.contains("--interval"), "{err}");
    let (ok, _, err) = tierd(&["top", "--sim", "pointer-chase", "--config", "ZZ"]);
    assert!(!ok);
    assert!(err.contains("no configuration \"ZZ\""), "{err}");
    let (ok, _, err) = tierd(&["top", "--config", "T1"]);
    assert!(!ok, "--config needs --sim");
    assert!(err.contains("--sim"), "{err}");
}
