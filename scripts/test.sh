#!/usr/bin/env bash
# The project's test command (README "Test"; CI runs it through .ci/run).
# Installs what the tests need on a fresh Debian machine, then runs every check CI enforces.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust (rustup) first" >&2
  exit 1
fi
# rust-toolchain.toml pins the toolchain; make sure its components are present.
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# Guest tests (crates/tierd-vm) need qemu, busybox-static and zstd; as root on Debian, install
# them. Without them those tests print SKIP (or fail when TIERD_REQUIRE_GUEST is set).
# Once they are installed the guest tests must run: TIERD_REQUIRE_GUEST turns a SKIP into a
# failure, so a broken harness cannot pass as "not available here".
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  if ./scripts/vm-deps.sh; then
    export TIERD_REQUIRE_GUEST=1
  else
    echo "scripts/vm-deps.sh failed: guest tests will SKIP" >&2
  fi
  # The HTML report's test renders it in headless Chromium; likewise it SKIPs without the
  # browser and must run once the browser is installed.
  if ./scripts/report-deps.sh; then
    export TIERD_REQUIRE_CHROMIUM=1
  else
    echo "scripts/report-deps.sh failed: the Chromium report test will SKIP" >&2
  fi
  # The man-page test renders `tierd man` with groff; once installed it must run.
  if ./scripts/doc-deps.sh; then
    export TIERD_REQUIRE_GROFF=1
  else
    echo "scripts/doc-deps.sh failed: the groff man-page check will SKIP" >&2
  fi
  # The fuzz targets' libFuzzer is C++: once g++ is installed, scripts/fuzz.sh must run.
  if ./scripts/fuzz-deps.sh; then
    export TIERD_REQUIRE_FUZZ=1
  else
    echo "scripts/fuzz-deps.sh failed: the fuzz targets will SKIP" >&2
  fi
  # The Debian package test needs cargo-deb and systemd-analyze: once installed it must run.
  if ./scripts/package-deps.sh; then
    export TIERD_REQUIRE_PACKAGE=1
  else
    echo "scripts/package-deps.sh failed: the package test will SKIP" >&2
  fi
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Rustdoc with warnings as errors: a doc link to a renamed or private item, or an unescaped
# `<tag>`, fails here instead of leaving a broken link in `cargo doc` (about 2 minutes).
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
./scripts/check-engine-deps.sh
cargo test --workspace --locked
# Every fuzz target for a few seconds (TIERD_FUZZ_SECONDS, default 8): CONTRIBUTING.md "Fuzzing".
./scripts/fuzz.sh
# The Debian package built, installed (dpkg -i), checked (tierd --version, systemd-analyze
# verify on its unit, tierd config check on its config) and purged; as root on Debian only.
# `static`: the statically linked release binary the guest tests built above, by the same
# cargo command, so no second release build (scripts/package.sh).
TIERD_PACKAGE_PROFILE=static ./scripts/package-test.sh
