//! `tierd compare --thp always|never`: every region of the scenario backed by 2 MiB THPs, or
//! none, whatever the scenario file says.
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

/// Scenario A's N2 row at 1/64 scale with `--thp MODE`: the table, and the row's counters
/// read from `--json`.
fn a_n2(mode: &str) -> (String, impl Fn(&str) -> u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("a.json");
    let (ok, out, err) = tierd(&[
        "compare",
        "pointer-chase",
        "--scale",
        "0.015625",
        "--only",
        "N2",
        "--no-progress",
        "--thp",
        mode,
        "--json",
        json.to_str().expect("utf-8 path"),
    ]);
    assert!(ok, "{err}");
    // JSON is YAML: the YAML parser the tests already use reads it.
    let text = std::fs::read_to_string(&json).expect("the JSON");
    let v: serde_norway::Value = serde_norway::from_str(&text).expect("JSON");
    assert_eq!(v["thp"].as_str(), Some(mode));
    let counters = v["configs"][0]["counters"].clone();
    (out, move |k: &str| counters[k].as_u64().unwrap_or(0))
}

#[test]
fn thp_always_moves_the_hot_set_a_thp_per_hint_fault() {
    let (always, a) = a_n2("always");
    let (never, n) = a_n2("never");
    assert!(always.contains("THP always"), "{always}");
    assert!(never.contains("THP never"), "{never}");
    // The same 256 MiB hot set is promoted either way...
    assert_eq!(a("numa_pages_migrated"), n("numa_pages_migrated"));
    assert!(n("numa_pages_migrated") >= 65_000);
    // ...but with THP one hint fault moves 512 pages, and migrations count as THPs.
    assert_eq!(a("thp_migration_success") * 512, a("numa_pages_migrated"));
    assert_eq!(n("thp_migration_success"), 0);
    assert!(
        a("numa_hint_faults") * 100 < n("numa_hint_faults"),
        "{} vs {}",
        a("numa_hint_faults"),
        n("numa_hint_faults")
    );
}

#[test]
fn a_bad_thp_value_is_refused_by_the_parser() {
    let (ok, _, err) = tierd(&["compare", "pointer-chase", "--thp", "sometimes"]);
    assert!(!ok);
    assert!(err.contains("invalid value 'sometimes'"), "{err}");
}
