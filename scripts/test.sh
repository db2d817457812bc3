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

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
./scripts/check-engine-deps.sh
cargo test --workspace --locked
