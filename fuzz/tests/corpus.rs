//! Replays the committed inputs through every fuzz target in a plain `cargo test`, without
//! libFuzzer: each file under `fuzz/regressions/<target>/` (inputs that once crashed a target,
//! and hand-written seeds of the hostile cases) and the fixture files scripts/fuzz.sh seeds
//! the targets with. A target that panics on one of them fails here.
#![allow(clippy::tests_outside_test_module)]

use std::path::{Path, PathBuf};

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd {
        let e = e.expect("dir entry");
        // The sysfs fixtures hold symlinks, some in cycles: follow none.
        let ty = e.file_type().expect("file type");
        if ty.is_dir() {
            files_under(&e.path(), out);
        } else if ty.is_file() {
            out.push(e.path());
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn regression_inputs_pass_every_target() {
    let mut n = 0;
    for (name, target) in tierd_fuzz::TARGETS {
        let mut files = Vec::new();
        files_under(&root().join("fuzz/regressions").join(name), &mut files);
        for f in files {
            target(&std::fs::read(&f).expect("read"));
            n += 1;
        }
    }
    assert!(n >= 3, "the regression inputs are there ({n})");
}

#[test]
fn fixture_files_pass_every_target() {
    let mut files = Vec::new();
    files_under(
        &root().join("crates/tierd-linux/tests/fixtures"),
        &mut files,
    );
    files_under(&root().join("scenarios"), &mut files);
    files_under(&root().join("deploy"), &mut files);
    assert!(files.len() > 100, "fixtures found: {}", files.len());
    for f in &files {
        let mut data = std::fs::read(f).expect("read");
        data.truncate(16 << 10);
        for (_, target) in tierd_fuzz::TARGETS {
            target(&data);
        }
    }
}

/// Every target is listed in scripts/fuzz.sh, and every listed one exists.
#[test]
fn the_script_runs_every_target() {
    let script = std::fs::read_to_string(root().join("scripts/fuzz.sh")).expect("fuzz.sh");
    let list = script
        .split_once("all=(")
        .and_then(|(_, r)| r.split_once(')'))
        .expect("all=(...) in fuzz.sh")
        .0;
    let listed: Vec<&str> = list.split_whitespace().collect();
    let names: Vec<&str> = tierd_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
    assert_eq!(listed, names);
    for n in names {
        assert!(
            root()
                .join("fuzz/fuzz_targets")
                .join(format!("{n}.rs"))
                .exists(),
            "fuzz/fuzz_targets/{n}.rs"
        );
    }
}
