# Sourced by the guest measurement scripts (pte-cost.sh, fault-cost.sh), from the repository
# root: builds the static tierd-workload the guest runs (the same build as the lab's,
# crates/tierd-vm/src/binaries.rs: no C library in the initramfs) and the tierd-vm harness,
# sets BIN to the workload and W to a scratch directory removed on exit.
env -u CARGO_TARGET_DIR RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_DEBUG=false \
    cargo build --release --locked --target x86_64-unknown-linux-gnu --target-dir target/guest \
    -p tierd-workload >&2
BIN=target/guest/x86_64-unknown-linux-gnu/release/tierd-workload
cargo build --release --locked -p tierd-vm >&2
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
