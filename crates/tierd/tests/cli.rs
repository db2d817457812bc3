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

#[test]
fn compare_prints_the_seed_table_with_published_figures() {
    let (ok, out, err) = tierd(&[
        "compare",
        "pointer-chase",
        "--scale",
        "0.015625",
        "--only",
        "B0,H10",
        "--no-progress",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("pointer-chase: Seed A"), "{out}");
    // B0's published latency in parentheses beside the simulated one.
    assert!(out.contains("320 (320)"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("H10 ")), "{out}");
    assert!(
        !out.lines().any(|l| l.starts_with("N2 ")),
        "--only filters rows: {out}"
    );
}

#[test]
fn compare_writes_json_and_csv() {
    let dir = std::env::temp_dir().join(format!("tierd-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, csv) = (dir.join("a.json"), dir.join("a.csv"));
    let (ok, _, err) = tierd(&[
        "compare",
        "pointer-chase",
        "--scale",
        "0.015625",
        "--only",
        "H5",
        "--no-progress",
        "--json",
        json.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["configs"][0]["id"], "H5");
    assert_eq!(v["configs"][0]["series"].as_array().unwrap().len(), 240);
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert!(
        csv.starts_with("config,t_s,latency_ns,hot_on_fast,node0_gib,node1_gib,node2_gib"),
        "{csv}"
    );
    assert_eq!(csv.lines().count(), 241);
}

#[test]
fn scenario_errors_name_file_line_and_field() {
    let dir = std::env::temp_dir().join(format!("tierd-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = include_str!("../../../scenarios/a-pointer-chase.toml");
    // A wrong type on line 9.
    let bad = dir.join("bad-type.toml");
    std::fs::write(
        &bad,
        good.replacen("duration_s = 240", "duration_s = \"long\"", 1),
    )
    .unwrap();
    let (ok, _, err) = tierd(&["sim", bad.to_str().unwrap()]);
    assert!(!ok);
    let line = good
        .lines()
        .position(|l| l.starts_with("duration_s"))
        .unwrap()
        + 1;
    assert!(err.contains(&format!("bad-type.toml:{line}:")), "{err}");
    assert!(err.contains("duration_s"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    // An unknown key.
    let bad = dir.join("bad-key.toml");
    std::fs::write(
        &bad,
        good.replacen("step_ms = 10", "step_ms = 10\nstep_us = 3", 1),
    )
    .unwrap();
    let (ok, _, err) = tierd(&["sim", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("bad-key.toml:") && err.contains("step_us"),
        "{err}"
    );
    // A class that does not exist.
    let bad = dir.join("bad-class.toml");
    std::fs::write(
        &bad,
        good.replacen("class = \"buffer.hot\"", "class = \"buffer.warm\"", 1),
    )
    .unwrap();
    let (ok, _, err) = tierd(&["sim", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("bad-class.toml:") && err.contains("process[0].access[0].class"),
        "{err}"
    );
    // A configuration id that is not there.
    let (ok, _, err) = tierd(&[
        "sim",
        "../../scenarios/a-pointer-chase.toml",
        "--config",
        "X9",
    ]);
    assert!(!ok);
    assert!(err.contains("no configuration \"X9\""), "{err}");
    // `compare --only` refuses an id it does not know instead of printing an empty table,
    // and names the ids there are.
    let (ok, out, err) = tierd(&[
        "compare",
        "pointer-chase",
        "--only",
        "T1,ZZ",
        "--scale",
        "0.0625",
    ]);
    assert!(!ok, "{out}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("scenario pointer-chase: no configuration \"ZZ\" (it has ")
            && err.contains("B0, N2, D3"),
        "{err}"
    );
}

/// Runs `tierd args` with a stdout pipe whose reading end is closed before the child starts,
/// so its first write meets a reader that has gone (what `tierd ... | head -1` does once
/// head exits).
fn tierd_into_closed_pipe(args: &[&str]) -> (std::process::ExitStatus, String) {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_tierd"))
        .args(args)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("runs");
    (out.status, String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn a_closed_stdout_ends_every_printing_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    for args in [
        &["info"][..],
        &["scenarios"],
        &["man"],
        &["completions", "bash"],
        &["--help"],
        &[
            "compare",
            "pointer-chase",
            "--scale",
            "0.015625",
            "--only",
            "B0",
            "--no-progress",
        ],
        &[
            "compare",
            "pointer-chase",
            "--scale",
            "0.015625",
            "--only",
            "B0",
            "--no-progress",
            "--json",
            "-",
        ],
    ] {
        let (status, err) = tierd_into_closed_pipe(args);
        // Ended by SIGPIPE like cat or grep (the shell reports 141), or done before noticing.
        assert!(
            status.success() || status.signal() == Some(13),
            "{args:?}: {status:?} {err}"
        );
        assert!(err.is_empty(), "{args:?}: no error text expected: {err}");
    }
}

#[test]
fn output_to_an_unwritable_place_fails_in_one_line_and_keeps_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let old = ro.join("out.json");
    std::fs::write(&old, "old\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    // Root writes into a 0555 directory anyway: then sysfs, which refuses new files to
    // everyone, is the unwritable directory (with no old file to keep).
    let probe = std::fs::File::create(ro.join("probe")).is_ok();
    let target = if probe {
        std::path::PathBuf::from("/sys/tierd-test-out.json")
    } else {
        old.clone()
    };
    let (ok, _, err) = tierd(&[
        "compare",
        "pointer-chase",
        "--scale",
        "0.015625",
        "--only",
        "B0",
        "--no-progress",
        "--json",
        target.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&format!("cannot write {}", target.display())),
        "{err}"
    );
    if probe {
        assert!(!target.exists());
    } else {
        assert_eq!(std::fs::read_to_string(&old).unwrap(), "old\n");
        let names: Vec<_> = std::fs::read_dir(&ro).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left");
    }
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_full_disk_is_a_clear_error() {
    // /dev/full fails every write with ENOSPC (drivers/char/mem.c write_full()).
    if !std::path::Path::new("/dev/full").exists() {
        return;
    }
    let (ok, _, err) = tierd(&[
        "compare",
        "pointer-chase",
        "--scale",
        "0.015625",
        "--only",
        "B0",
        "--no-progress",
        "--csv",
        "/dev/full",
    ]);
    assert!(!ok);
    assert!(
        err.contains("cannot write /dev/full: No space left on device"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn the_metrics_flag_needs_the_files_consent_for_a_public_address() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tierd.toml");
    std::fs::write(&cfg, "[scope]\npids = [1]\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tierd"))
        .args([
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--metrics",
            "0.0.0.0:9464",
        ])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "a configuration error: {err}");
    assert!(
        err.contains("--metrics: 0.0.0.0:9464 is not a loopback address"),
        "{err}"
    );
}
