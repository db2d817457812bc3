#!/bin/sh
# Builds the Debian package of tierd (docs/user-guide.md "Install"): the binary, the systemd
# unit, /etc/tierd/tierd.toml (a conffile), man pages, and bash, zsh and fish completions.
#
#   scripts/package.sh                  # release build -> target/debian/tierd_VERSION_ARCH.deb
#   TIERD_PACKAGE_PROFILE=static scripts/package.sh
#       # the statically linked release build the guest tests make (crates/tierd-vm
#       # binaries.rs, target/guest): the same cargo command, so after them it builds nothing
#   TIERD_PACKAGE_PROFILE=dev scripts/package.sh    # a quick package of the debug build
#
# Needs cargo-deb (`cargo install cargo-deb --locked`). Prints the .deb's path last.
set -eu
cd "$(dirname "$0")/.."
profile="${TIERD_PACKAGE_PROFILE:-release}"
command -v cargo-deb >/dev/null 2>&1 || {
  echo "package.sh: cargo-deb not found: cargo install cargo-deb --locked" >&2
  exit 1
}
target="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
case "$profile" in
  release | dev)
    cargo build --locked --profile "$profile" -p tierd --bin tierd
    if [ "$profile" = dev ]; then bin="$target/debug/tierd"; else bin="$target/release/tierd"; fi
    ;;
  static)
    # Exactly binaries::build_static's command for the guest (the same packages, flags and
    # target directory), so that its build is reused.
    triple=x86_64-unknown-linux-gnu
    env -u CARGO_TARGET_DIR -u CARGO_BUILD_TARGET RUSTFLAGS="-C target-feature=+crt-static" \
      CARGO_PROFILE_RELEASE_DEBUG=false \
      cargo build --release --locked --target "$triple" --target-dir target/guest \
      -p tierd -p tierd-workload
    bin="target/guest/$triple/release/tierd"
    ;;
  *)
    echo "package.sh: TIERD_PACKAGE_PROFILE must be release, static or dev, not $profile" >&2
    exit 1
    ;;
esac
# Generated from the binary's own command-line definitions, so they match it.
out=target/package
rm -rf "$out"
mkdir -p "$out/bin" "$out/man" "$out/completions" "$out/systemd"
cp "$bin" "$out/bin/tierd"
# The release profile's line tables (`debug = 1`, for profiling on the host) are most of the
# binary: 63 MB installed with them, 11 without. cargo-deb strips only what it builds itself.
strip --strip-debug "$out/bin/tierd"
"$bin" man --out "$out/man" >&2
gzip -9n "$out"/man/*.1
"$bin" completions bash > "$out/completions/tierd.bash"
"$bin" completions zsh > "$out/completions/_tierd"
"$bin" completions fish > "$out/completions/tierd.fish"
# The unit as deploy/tierd.service has it, with the packaged binary's path.
sed 's|/usr/local/bin/tierd|/usr/bin/tierd|g' deploy/tierd.service > "$out/systemd/tierd.service"
if grep -q /usr/local "$out/systemd/tierd.service"; then
  echo "package.sh: the packaged unit still names /usr/local" >&2
  exit 1
fi
# --no-build: every asset is under target/package/ (cargo-deb says so once per asset: that
# warning is filtered out, every other line is shown).
cargo deb --no-build --locked -p tierd --output target/debian 2>&1 |
  tee "$out/cargo-deb.log" | grep -v -e "are detected as Cargo target dir" >&2 || true
test -s "$(ls -t target/debian/tierd_*.deb | head -1)"
ls -t target/debian/tierd_*.deb | head -1
