//! Keeps docs/user-guide.md honest: every error message the code can print is listed there.
//!
//! Messages are read from the sources, not from a list kept here: every `#[error("...")]` of
//! the library crates, the command line's `bail!` / `ensure!` / `anyhow!` / `context(...)`
//! messages, the daemon configuration's `invalid(key, reason)` keys and reasons, and the
//! daemon's preflight messages. A message's literal text between `{...}` placeholders must
//! appear in the guide (whitespace-normalized), so a new message or a reworded one fails here
//! until the guide says what it means.
// Integration tests are their own crate; the unit-test lint does not apply here.
#![allow(clippy::tests_outside_test_module)]

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The Rust string literal starting at `text[at]` (a `"`): its value and the offset after it.
/// Handles the escapes messages use (`\"`, `\\`, `\n`, `\t`, and `\` + newline, which skips
/// the newline and the next line's indentation).
fn literal_at(text: &str, at: usize) -> Option<(String, usize)> {
    let bytes = text.as_bytes();
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let mut out = String::new();
    let mut chars = text[at + 1..].char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, at + 1 + i + 1)),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                '\n' => while chars.next_if(|(_, w)| w.is_whitespace()).is_some() {},
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

/// The first string literal after `text[from..]`, if one starts within `window` bytes (with
/// `window == 0`: only after whitespace, i.e. the very next token).
fn first_literal_after(text: &str, from: usize, window: usize) -> Option<String> {
    let rel = if window == 0 {
        let trimmed = text[from..].trim_start();
        let rel = text.len() - from - trimmed.len();
        trimmed.starts_with('"').then_some(rel)?
    } else {
        let end = (from + window).min(text.len());
        text[from..end].find('"')?
    };
    literal_at(text, from + rel).map(|(s, _)| s)
}

/// Every `marker` in `text` followed (within `window` bytes) by a string literal.
fn literals_after(text: &str, marker: &str, window: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find(marker) {
        let at = from + i + marker.len();
        if let Some(l) = first_literal_after(text, at, window) {
            out.push(l);
        }
        from = at;
    }
    out
}

/// The fixed parts of a message: the text between `{...}` placeholders, trimmed of spaces and
/// punctuation, kept when at least 4 characters long (shorter ones, like `: `, say nothing).
fn fixed_parts(message: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut depth = 0;
    for c in message.chars() {
        match c {
            '{' => {
                depth += 1;
                parts.push(std::mem::take(&mut cur));
            }
            '}' if depth > 0 => depth -= 1,
            c if depth == 0 => cur.push(c),
            _ => {}
        }
    }
    parts.push(cur);
    parts
        .into_iter()
        .map(|p| normalize(p.trim_matches(|c: char| c.is_whitespace() || ":;,.()\"'`".contains(c))))
        .filter(|p| p.chars().count() >= 4)
        .collect()
}

fn normalize(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn guide() -> String {
    let p = repo().join("docs/user-guide.md");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    normalize(&text)
}

/// (where, message) for every message the code can print.
fn messages() -> Vec<(String, String)> {
    let root = repo();
    let mut out = Vec::new();
    let mut add = |file: &Path, msgs: Vec<String>| {
        let rel = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        out.extend(msgs.into_iter().map(|m| (rel.clone(), m)));
    };
    // thiserror messages of the libraries the binary links.
    for krate in [
        "tierd-engine",
        "tierd-linux",
        "tierd-daemon",
        "tierd-sim",
        "tierd-lab",
        "tierd-report",
        "tierd-top",
        "tierd-vm",
        "tierd-workload",
    ] {
        for f in rust_files(&root.join("crates").join(krate).join("src")) {
            // Test-only modules are not printed by the binary.
            if f.file_name().is_some_and(|n| n == "engine_tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&f).expect("source");
            add(&f, literals_after(&text, "#[error(", 0));
        }
    }
    // The command line's own messages.
    for f in rust_files(&root.join("crates/tierd/src")) {
        let text = std::fs::read_to_string(&f).expect("source");
        let mut msgs = Vec::new();
        for marker in [
            "bail!(",
            "anyhow!(",
            ".context(",
            "with_context(|| format!(",
        ] {
            msgs.extend(literals_after(&text, marker, 0));
        }
        // ensure!(condition, "message"): the literal after the condition.
        msgs.extend(literals_after(&text, "ensure!(", 400));
        add(&f, msgs);
    }
    // The configuration's `invalid(key, reason)`: both the key and the reason.
    let cfg = root.join("crates/tierd-daemon/src/config.rs");
    let text = std::fs::read_to_string(&cfg).expect("config.rs");
    let mut msgs = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find("invalid(\n") {
        let at = from + i;
        let key_at = at + text[at..].find('"').expect("a key literal");
        let (key, after) = literal_at(&text, key_at).expect("key");
        let reason = first_literal_after(&text, after, 120).expect("a reason literal");
        msgs.push(key);
        msgs.push(reason);
        from = after;
    }
    add(&cfg, msgs);
    // The daemon's preflight: refusals and warnings.
    let daemon = root.join("crates/tierd-daemon/src/daemon.rs");
    let text = std::fs::read_to_string(&daemon).expect("daemon.rs");
    let mut msgs = literals_after(&text, "NothingToTier(format!(", 0);
    msgs.extend(literals_after(&text, "warnings.push(", 60));
    add(&daemon, msgs);
    out
}

#[test]
fn the_extraction_reads_rust_literals_and_placeholders() {
    let src = "#[error(\"a {x} b\\\"q\\\" \\\n        c\")]";
    let got = literals_after(src, "#[error(", 0);
    assert_eq!(got, ["a {x} b\"q\" c"]);
    assert_eq!(
        fixed_parts("{path}:{line}: cannot read {what:?}: {source}"),
        ["cannot read"]
    );
    assert_eq!(
        fixed_parts("{} is outside 10..=60000"),
        ["is outside 10..=60000"]
    );
}

#[test]
fn the_code_has_the_messages_this_test_expects() {
    // Guards the extraction against silently finding nothing.
    let msgs = messages();
    let has = |needle: &str| msgs.iter().any(|(_, m)| m.contains(needle));
    for needle in [
        "nothing in scope",
        "cannot read",
        "--scale must be in",
        "--duration must be a positive number",
        "nothing to tier",
        "kernel.numa_balancing",
        "DAMON busy",
        "daemon.refresh_ms",
        "is not a top-tier node",
    ] {
        assert!(
            has(needle),
            "no message with {needle:?} found in the sources"
        );
    }
    assert!(msgs.len() > 80, "only {} messages found", msgs.len());
}

#[test]
fn every_error_message_is_in_the_user_guide() {
    let guide = guide();
    let mut missing = Vec::new();
    for (file, msg) in messages() {
        for part in fixed_parts(&msg) {
            if !guide.contains(&part) {
                missing.push(format!("{file}: {part:?} (of {msg:?})"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/user-guide.md does not mention these messages (section \"Error messages\"):\n{}",
        missing.join("\n")
    );
}
