//! `tierd config show` and `tierd config check` from the outside: the shown text parses back
//! to the same configuration, every shipped configuration checks, and a bad file fails with
//! the daemon's own one-line error and exit status 78 (EX_CONFIG).
#![allow(clippy::tests_outside_test_module)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_norway::Value as Yaml;
use tierd_daemon::config::DaemonConfig;

fn tierd(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tierd"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn temp_file(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, text).expect("write");
    p
}

/// The shipped configurations: deploy/tierd.toml and the Kubernetes ConfigMap's tierd.toml.
fn shipped(dir: &tempfile::TempDir) -> Vec<PathBuf> {
    let text =
        std::fs::read_to_string(repo().join("deploy/k8s/tierd-daemonset.yaml")).expect("manifest");
    let configmap = serde_norway::Deserializer::from_str(&text)
        .map(|d| <Yaml as serde::Deserialize>::deserialize(d).expect("YAML"))
        .find(|d| d["kind"] == "ConfigMap")
        .expect("a ConfigMap");
    let toml = configmap["data"]["tierd.toml"]
        .as_str()
        .expect("tierd.toml in the ConfigMap");
    vec![
        repo().join("deploy/tierd.toml"),
        temp_file(dir, "configmap.toml", toml),
    ]
}

#[test]
fn show_parses_back_to_the_same_configuration_for_every_shipped_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    for file in shipped(&dir) {
        let f = file.to_str().expect("utf-8 path");
        let (code, out, err) = tierd(&["config", "show", f]);
        assert_eq!(code, Some(0), "{f}: {err}");
        assert!(out.starts_with("# tierd "), "{out}");
        let want = DaemonConfig::load(&file).expect("valid");
        let got = DaemonConfig::parse(&out, Path::new("shown.toml"))
            .unwrap_or_else(|e| panic!("{f}: the shown text does not parse back: {e}\n{out}"));
        assert_eq!(got, want, "{f}");
        // And the shown text checks as a file of its own.
        let shown = temp_file(&dir, "shown.toml", &out);
        let (code, _, err) = tierd(&["config", "check", shown.to_str().expect("utf-8")]);
        assert_eq!(code, Some(0), "{err}");
    }
}

#[test]
fn show_without_a_file_prints_the_built_in_defaults() {
    let (code, out, err) = tierd(&["config", "show"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("built-in defaults"), "{out}");
    assert!(
        out.contains("promote_rate_limit_mbps = 65536   # MB/s; reload: live"),
        "{out}"
    );
    // Types and defaults only: the empty scope is for the operator to fill in.
    let back: DaemonConfig = toml::from_str(&out).expect("TOML of the config's shape");
    assert_eq!(back, DaemonConfig::default());
}

#[test]
fn check_passes_every_shipped_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    for file in shipped(&dir) {
        let f = file.to_str().expect("utf-8 path");
        let (code, out, err) = tierd(&["config", "check", f]);
        assert_eq!(code, Some(0), "{f}: {err}");
        assert_eq!(out, format!("{f}: ok\n"));
        assert!(err.is_empty(), "{err}");
    }
}

#[test]
fn check_fails_a_bad_file_as_the_daemon_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        (
            "range.toml",
            "[scope]\npids = [1]\n[engine]\nfreq_threshold = 9\n",
            "range.toml:4: engine.freq_threshold: freq_threshold = 9 is out of range",
        ),
        (
            "type.toml",
            "[scope]\npids = [1]\n[engine]\nbatch_nr = \"many\"\n",
            "type.toml:4:12: engine.batch_nr: invalid type: string \"many\"",
        ),
        (
            "unknown.toml",
            "[scope]\npids = [1]\n[daemon]\nmetrics_port = 9\n",
            "unknown.toml:4:1: daemon.metrics_port: unknown field `metrics_port`",
        ),
        (
            "scope.toml",
            "[engine]\nbatch_nr = 128\n",
            "scope.toml:0: scope: nothing in scope",
        ),
    ];
    for (name, text, want) in cases {
        let p = temp_file(&dir, name, text);
        let f = p.to_str().expect("utf-8");
        let (code, out, err) = tierd(&["config", "check", f]);
        assert_eq!(code, Some(78), "{name}: {err}");
        assert!(out.is_empty(), "{out}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.starts_with(&format!("tierd: {}", dir.path().display())),
            "{err}"
        );
        assert!(err.contains(want), "{name}: {err}");
        // The very line `tierd run` prints, with the same status (systemd stops retrying).
        let (run_code, _, run_err) = tierd(&["run", "--config", f]);
        assert_eq!(
            (run_code, run_err.as_str()),
            (Some(78), err.as_str()),
            "{name}"
        );
        // `show` refuses it the same way.
        assert_eq!(tierd(&["config", "show", f]).0, Some(78));
    }
    let missing = dir.path().join("missing.toml");
    let (code, _, err) = tierd(&["config", "check", missing.to_str().expect("utf-8")]);
    assert_eq!(code, Some(78), "{err}");
    assert!(err.contains("missing.toml: cannot read"), "{err}");
    let os = std::io::Error::from_raw_os_error(2).to_string(); // ENOENT
    assert_eq!(err.matches(&os).count(), 1, "{err}");
}
