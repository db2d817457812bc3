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

/// `--grain N`: the table names the grain, the JSON carries it, and the row's figures are
/// counted in pages. A grain the scenario cannot take is refused in one line before any run.
#[test]
fn grain_is_applied_named_and_refused_where_it_cannot_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("c.json");
    let (ok, out, err) = tierd(&[
        "compare",
        "three-node",
        "--scale",
        "0.03125",
        "--only",
        "N2",
        "--no-progress",
        "--grain",
        "4",
        "--json",
        json.to_str().expect("utf-8 path"),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("grain 4 (a unit = 4 base pages)"), "{out}");
    let text = std::fs::read_to_string(&json).expect("the JSON");
    let v: serde_norway::Value = serde_norway::from_str(&text).expect("JSON");
    assert_eq!(v["grain"].as_u64(), Some(4));
    // 5 GiB of ranks' memory, every page promoted once, counted in pages.
    let c = &v["configs"][0]["counters"];
    assert_eq!(c["pgpromote_success"].as_u64(), Some(5 << 18));
    for (args, want) in [
        (
            &["compare", "three-node", "--grain", "3"][..],
            "--grain must be a power of two from 1 to 512, got 3",
        ),
        (
            &[
                "compare",
                "three-node",
                "--grain",
                "8",
                "--thp",
                "always",
                "--scale",
                "0.01",
            ][..],
            "",
        ),
    ] {
        let (ok, _, err) = tierd(args);
        if want.is_empty() {
            // `--grain` is applied after `--thp`, which left none: refused, named.
            assert!(!ok && err.contains("THP"), "{args:?}: {err}");
        } else {
            assert!(!ok && err.contains(want), "{args:?}: {err}");
        }
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
    // Every mechanism takes a grain, NUMA balancing fed by samples (B's IBS row) included.
    let (ok, out, err) = tierd(&[
        "compare",
        "hint-vs-samples",
        "--scale",
        "0.03125",
        "--only",
        "HF,IBS",
        "--no-progress",
        "--grain",
        "2",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("grain 2 (a unit = 2 base pages)"), "{out}");
    assert!(out.contains("\nIBS "), "{out}");
}
