//! `tierd completions SHELL` and `tierd man [--out DIR]`: generated from the clap definitions
//! ([`crate::Cli`]), so they cannot drift from the real command line.
//!
//! Completions come from `clap_complete`, the man pages (roff) from `clap_mangen`: one page,
//! `tierd(1)`, on stdout (it lists the subcommands), or with `--out DIR` one page per
//! subcommand as well (`tierd-compare.1`, `tierd-run.1`, ...), which is what a package installs
//! into `/usr/share/man/man1`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;

/// The command line the generators read: the real one.
fn command() -> clap::Command {
    crate::Cli::command()
}

/// Writes the completion script for `shell` to `out`.
///
/// # Errors
/// When `out` cannot be written.
pub fn completions(shell: Shell, out: &mut dyn Write) -> Result<()> {
    let mut cmd = command();
    let name = cmd.get_name().to_string();
    // clap_complete panics when its writer fails: generate in memory, write here.
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut buf);
    write_all(out, &buf).context("writing the completion script")
}

/// Writes `bytes`; a reader that hung up (`tierd man | head`) is not an error.
fn write_all(out: &mut dyn Write, bytes: &[u8]) -> std::io::Result<()> {
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// Writes `tierd(1)` to `out`.
///
/// # Errors
/// When `out` cannot be written.
pub fn man_page(out: &mut dyn Write) -> Result<()> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(command())
        .render(&mut buf)
        .context("rendering the man page")?;
    write_all(out, &buf).context("writing the man page")
}

/// Writes `tierd.1` and one `tierd-SUBCOMMAND.1` per subcommand into `dir` (created when
/// missing); returns the files written, sorted.
///
/// # Errors
/// When `dir` cannot be created or a page cannot be written; the error names the path.
pub fn man_pages_to(dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // clap_mangen::generate_to, but each page rendered in memory and written atomically
    // (tierd_report::write_atomic) instead of through File::create.
    fn generate(cmd: clap::Command, dir: &Path) -> Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
            generate(sub, dir)?;
        }
        let man = clap_mangen::Man::new(cmd);
        let mut page = Vec::new();
        man.render(&mut page).context("rendering a man page")?;
        tierd_report::write_atomic(&dir.join(man.get_filename()), &page)?;
        Ok(())
    }
    let mut cmd = command().disable_help_subcommand(true);
    cmd.build();
    generate(cmd, dir)?;
    let mut pages: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "1")
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("tierd"))
        })
        .collect();
    pages.sort();
    Ok(pages)
}

/// `tierd man`: one page on stdout, or every page into `out`.
///
/// # Errors
/// As [`man_page`] and [`man_pages_to`].
pub fn man(out: Option<&Path>) -> Result<()> {
    match out {
        None => man_page(&mut std::io::stdout().lock()),
        Some(dir) => {
            for p in man_pages_to(dir)? {
                println!("{}", p.display());
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subcommands() -> Vec<String> {
        command()
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect()
    }

    #[test]
    fn every_shell_gets_a_script_naming_every_subcommand() {
        let subs = subcommands();
        assert!(subs.iter().any(|s| s == "completions"), "{subs:?}");
        for shell in [
            Shell::Bash,
            Shell::Zsh,
            Shell::Fish,
            Shell::Elvish,
            Shell::PowerShell,
        ] {
            let mut buf = Vec::new();
            completions(shell, &mut buf).expect("in-memory write");
            let text = String::from_utf8(buf).expect("utf-8");
            for s in &subs {
                assert!(text.contains(s.as_str()), "{shell}: {s} missing");
            }
        }
    }

    #[test]
    fn pages_per_subcommand_are_written() {
        let dir = tempfile_dir();
        let pages = man_pages_to(&dir).expect("writes");
        let names: Vec<String> = pages
            .iter()
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect();
        assert!(names.contains(&"tierd.1".to_string()), "{names:?}");
        for s in subcommands() {
            let want = format!("tierd-{s}.1");
            assert!(names.contains(&want), "{want} missing: {names:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A fresh directory under the target's temp dir (no tempfile dependency in the binary).
    fn tempfile_dir() -> PathBuf {
        let base = std::env::temp_dir().join(format!("tierd-man-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        base
    }
}
