//! `tierd completions` and `tierd man`, run as the binary: they cover every subcommand the
//! binary's own `--help` lists, and the man page is roff that groff renders without warnings.
// Integration tests are their own crate; the unit-test lint does not apply here.
#![allow(clippy::tests_outside_test_module)]

use std::io::Write;
use std::process::{Command, Stdio};

fn tierd(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tierd"))
        .args(args)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "tierd {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The subcommands `tierd --help` lists (its "Commands:" section), `help` excepted.
fn subcommands() -> Vec<String> {
    let help = tierd(&["--help"]);
    let section = help
        .split("Commands:")
        .nth(1)
        .expect("a Commands section")
        .split("\n\n")
        .next()
        .expect("lines");
    let subs: Vec<String> = section
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|s| *s != "help")
        .map(str::to_string)
        .collect();
    for must in ["compare", "run", "status", "completions", "man"] {
        assert!(subs.iter().any(|s| s == must), "{must} not in {subs:?}");
    }
    subs
}

#[test]
fn bash_completion_offers_every_subcommand() {
    let script = tierd(&["completions", "bash"]);
    assert!(script.contains("complete -F _tierd"), "{script:.200}");
    // The words offered after `tierd `: the `opts=` line that starts with the global flags.
    let top: Vec<&str> = script
        .lines()
        .find_map(|l| l.trim().strip_prefix("opts=\"-h -V "))
        .expect("an opts line")
        .trim_end_matches('"')
        .split_whitespace()
        .collect();
    for s in subcommands() {
        assert!(top.contains(&s.as_str()), "{s} not offered: {top:?}");
        // And each has its own case for its flags.
        assert!(script.contains(&format!("tierd,{s})")), "{s} has no case");
    }
    // Flags of a subcommand are completed too.
    assert!(script.contains("--dry-run"));
}

#[test]
fn zsh_and_fish_completions_name_every_subcommand() {
    let subs = subcommands();
    for shell in ["zsh", "fish"] {
        let script = tierd(&["completions", shell]);
        for s in &subs {
            assert!(script.contains(s.as_str()), "{shell}: {s} missing");
        }
    }
}

#[test]
fn man_page_is_roff_naming_every_subcommand() {
    let page = tierd(&["man"]);
    // clap_mangen opens with two lines defining the apostrophe string, then the title.
    let first = page
        .lines()
        .find(|l| !l.starts_with(".ie") && !l.starts_with(".el"))
        .expect("lines");
    assert!(first.starts_with(".TH tierd 1"), "{first}");
    assert!(page.contains(".SH SUBCOMMANDS"));
    for s in subcommands() {
        // Roff escapes the dash: tierd\-run(1).
        assert!(page.contains(&format!("tierd\\-{s}(1)")), "{s} missing");
    }
}

#[test]
fn man_out_writes_one_page_per_subcommand() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listed = tierd(&["man", "--out", dir.path().to_str().expect("utf-8 path")]);
    let mut want = vec!["tierd.1".to_string()];
    want.extend(subcommands().iter().map(|s| format!("tierd-{s}.1")));
    for name in &want {
        let p = dir.path().join(name);
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(text.contains(".TH "), "{name}");
        assert!(
            listed.contains(name.as_str()),
            "{name} not printed: {listed}"
        );
    }
}

#[test]
fn groff_renders_the_man_page_without_warnings() {
    // groff is optional here (SKIP when absent); TIERD_REQUIRE_GROFF makes it mandatory.
    let groff = Command::new("groff").arg("--version").output();
    if groff.is_err() {
        assert!(
            std::env::var_os("TIERD_REQUIRE_GROFF").is_none(),
            "TIERD_REQUIRE_GROFF is set but groff is not installed"
        );
        eprintln!("SKIP: groff not installed");
        return;
    }
    let page = tierd(&["man"]);
    let mut child = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("groff starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(page.as_bytes())
        .expect("feed groff");
    let out = child.wait_with_output().expect("groff ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.trim().is_empty(), "{stderr}");
}
