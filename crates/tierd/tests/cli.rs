//! End-to-end tests of the `tierd` binary.
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
fn info_prints_the_tiers_and_the_kernel_defaults() {
    let (ok, out, _) = tierd(&["info"]);
    assert!(ok);
    // DRAM lands in memory_tier4, a 2.5x-latency, half-bandwidth CXL node in memory_tier22.
    assert!(
        out.contains("memory_tier4   nodes 0      top tier"),
        "{out}"
    );
    assert!(
        out.contains("memory_tier22  nodes 1      lower tier"),
        "{out}"
    );
    assert!(out.contains("promotion target: node0"), "{out}");
    assert!(out.contains("\"batch_nr\": 512"), "{out}");
}

#[test]
fn bad_arguments_give_a_one_line_error() {
    let (ok, _, err) = tierd(&["info", "--fast-gib", "lots"]);
    assert!(!ok);
    assert!(err.contains("invalid value 'lots'"), "{err}");
}
