//! Static builds of the project's binaries for the guest.
//!
//! The initramfs has no C library, so the binaries the guest runs (`tierd`, `tierd-workload`)
//! are linked statically: glibc's static archive with `-C target-feature=+crt-static` on the
//! host's own `x86_64-unknown-linux-gnu` target (no extra toolchain to fetch, which CI could
//! not do). They go to their own target directory so the flag does not invalidate the normal
//! build.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Error;

/// The target triple the guest binaries are built for.
pub const GUEST_TARGET: &str = "x86_64-unknown-linux-gnu";

/// Builds `packages` in release mode, statically linked, under `<workspace>/target/guest`, and
/// returns the directory holding the binaries.
///
/// # Errors
/// [`Error::Spawn`] when cargo cannot start, [`Error::Command`] when the build fails.
pub fn build_static(workspace: &Path, packages: &[&str]) -> Result<PathBuf, Error> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target_dir = workspace.join("target/guest");
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(workspace)
        .args(["build", "--release", "--locked", "--target", GUEST_TARGET])
        .arg("--target-dir")
        .arg(&target_dir)
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        // No debug info (the release profile's `debug = 1` is for profiling on the host): the
        // guest binaries are never profiled, and DWARF for the whole dependency tree is a good
        // part of this build on CI's two cores. Debug info does not change the code rustc
        // generates, so the lab's CPU figures are those of the release build.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        // Inside `cargo test` these point at the test build; the nested build has its own.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET");
    for p in packages {
        cmd.args(["-p", p]);
    }
    let shown = format!(
        "cargo build --release --target {GUEST_TARGET} -p {}",
        packages.join(" -p ")
    );
    let out = cmd.output().map_err(|source| Error::Spawn {
        program: shown.clone(),
        source,
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(20).collect();
        return Err(Error::Command {
            cmd: shown,
            status: out.status.to_string(),
            stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        });
    }
    Ok(target_dir.join(GUEST_TARGET).join("release"))
}
