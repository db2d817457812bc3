//! `tierd run` and `tierd status` from the outside: refusals, configuration errors, the
//! shipped deployment files. The daemon's real run is proven in the tiered guest
//! (crates/tierd-vm/tests/daemon_e2e.rs); this host has one memory node.
#![allow(clippy::tests_outside_test_module)]

use std::path::{Path, PathBuf};
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

/// The exit status of `tierd ARGS` (docs/daemon.md, "Exit codes").
fn exit_code(args: &[&str]) -> Option<i32> {
    Command::new(env!("CARGO_BIN_EXE_tierd"))
        .args(args)
        .output()
        .expect("runs")
        .status
        .code()
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn write_config(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tierd-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write config");
    p
}

fn one_line(err: &str) -> &str {
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line, got:\n{err}");
    lines[0]
}

#[test]
fn config_errors_name_file_line_and_key() {
    let p = write_config(
        "bad-type.toml",
        "[scope]\npids = [1]\n[engine]\nfreq_threshold = \"x\"\n",
    );
    let (ok, _, err) = tierd(&["run", "--config", p.to_str().expect("utf8")]);
    assert!(!ok);
    let line = one_line(&err);
    assert!(
        line.starts_with(&format!("tierd: {}:4:", p.display())),
        "{line}"
    );
    assert!(line.contains("engine.freq_threshold"), "{line}");

    let p = write_config("no-scope.toml", "[daemon]\nrefresh_ms = 1000\n");
    let (ok, _, err) = tierd(&["run", "--config", p.to_str().expect("utf8")]);
    assert!(!ok);
    assert!(one_line(&err).contains("scope: nothing in scope"), "{err}");

    // A bad configuration is EX_CONFIG, which the systemd unit does not restart.
    assert_eq!(
        exit_code(&["run", "--config", p.to_str().expect("utf8")]),
        Some(78)
    );
    let (ok, _, err) = tierd(&["run", "--config", "/nonexistent/tierd.toml"]);
    assert!(!ok);
    assert!(
        one_line(&err).contains("/nonexistent/tierd.toml: cannot read"),
        "{err}"
    );
    // The OS error ends the message once: the leaf error prints it, and the chain does not
    // print the same cause again.
    let os = std::io::Error::from_raw_os_error(2).to_string(); // ENOENT
    assert_eq!(one_line(&err).matches(&os).count(), 1, "{err}");
}

/// A machine whose nodes all sit in one tier: the daemon refuses before touching anything.
#[test]
fn one_tier_is_refused_clearly() {
    let host = repo().join("crates/tierd-linux/tests/fixtures");
    let host_tree = std::fs::read_dir(&host)
        .expect("fixtures")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("host-"))
        })
        .expect("a host fixture tree");
    let cfg = format!(
        "[scope]\npids = [1]\n[system]\nsys_root = \"{0}/sys\"\nproc_root = \"{0}/proc\"\n",
        host_tree.display()
    );
    let p = write_config("one-tier.toml", &cfg);
    let (ok, _, err) = tierd(&["run", "--config", p.to_str().expect("utf8")]);
    assert!(!ok);
    let last = err.lines().last().expect("an error line");
    assert!(last.contains("nothing to tier"), "{last}");
    assert!(last.contains("one tier"), "{last}");
    // Nothing can run here: EX_UNAVAILABLE.
    assert_eq!(
        exit_code(&["run", "--config", p.to_str().expect("utf8")]),
        Some(69)
    );
}

/// The guest capture (two nodes, node 1 a lower tier) passes the tier check; DAMON there
/// cannot be taken (the capture's kdamond was running, and the privileges read from the
/// fixture's /proc are not ours), which tierd must report with its reason rather than start.
#[test]
fn two_tiers_pass_preflight_and_a_busy_damon_is_reported_not_taken() {
    let guest = repo().join("crates/tierd-linux/tests/fixtures/guest-6.12");
    let cfg = format!(
        "[scope]\npids = [1]\n[system]\nsys_root = \"{0}/sys\"\nproc_root = \"{0}/proc\"\n",
        guest.display()
    );
    let p = write_config("guest.toml", &cfg);
    let (ok, _, err) = tierd(&["run", "--dry-run", "--config", p.to_str().expect("utf8")]);
    assert!(!ok, "{err}");
    assert!(err.contains("tier 0: nodes 0"), "{err}");
    assert!(err.contains("tier 1: nodes 1"), "{err}");
    assert!(err.contains("node 1: "), "{err}");
    let last = err.lines().last().expect("an error line");
    assert!(
        last.starts_with("tierd: starting hotness sources: no hotness source can run here: damon:"),
        "{last}"
    );
    assert!(
        last.contains("busy") || last.contains("root-only"),
        "a reason is given: {last}"
    );
    assert_eq!(
        exit_code(&["run", "--dry-run", "--config", p.to_str().expect("utf8")]),
        Some(69)
    );
}

#[test]
fn status_without_a_daemon_says_so() {
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port");
    let (ok, _, err) = tierd(&["status", "--addr", &port.to_string()]);
    assert!(!ok);
    assert!(one_line(&err).contains("is `tierd run` running?"), "{err}");
}

#[test]
fn the_systemd_unit_starts_a_command_that_parses() {
    let unit = std::fs::read_to_string(repo().join("deploy/tierd.service")).expect("unit");
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let mut words = exec.split_whitespace();
    assert_eq!(words.next(), Some("/usr/local/bin/tierd"));
    let args: Vec<&str> = words.collect();
    assert_eq!(args.first(), Some(&"run"), "{exec}");
    // The same arguments against the shipped example config reach the tier check (this host
    // has one tier), which proves clap and the config loader accept them.
    let example = repo().join("deploy/tierd.toml");
    let mut real: Vec<String> = args.iter().map(|s| (*s).to_string()).collect();
    let pos = real.iter().position(|a| a == "--config").expect("--config");
    real[pos + 1] = example.to_str().expect("utf8").to_string();
    let refs: Vec<&str> = real.iter().map(String::as_str).collect();
    let (_, _, err) = tierd(&refs);
    assert!(
        !err.contains("error: unexpected argument") && !err.contains("deploy/tierd.toml:"),
        "{err}"
    );
    assert!(unit.contains("KillSignal=SIGTERM"));
}

#[test]
fn lab_refuses_an_unknown_experiment_before_building_anything() {
    let (ok, _, err) = tierd(&["lab", "nosuch", "--quick"]);
    assert!(!ok);
    let line = one_line(&err);
    assert!(
        line.starts_with("tierd: unknown experiment \"nosuch\"; known: a, churn, three-node"),
        "{line}"
    );
}
