# Sourced by the guest measurement scripts (pte-cost.sh, fault-cost.sh), from the repository
# root: builds the static tierd-workload the guest runs (the same build as the lab's,
# crates/tierd-vm/src/binaries.rs: no C library in the initramfs) and the tierd-vm harness,
# sets BIN to the workload and W to a scratch directory removed on exit, and defines
# in_guests, which runs $W/run.sh in the guest of each kernel of $KERNELS.
env -u CARGO_TARGET_DIR RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_DEBUG=false \
    cargo build --release --locked --target x86_64-unknown-linux-gnu --target-dir target/guest \
    -p tierd-workload >&2
BIN=target/guest/x86_64-unknown-linux-gnu/release/tierd-workload
cargo build --release --locked -p tierd-vm >&2
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

# in_guests PATTERN TIMEOUT: boots the guest of each kernel in $KERNELS with the workload at
# /lab/tierd-workload, runs $W/run.sh there, and prints the lines of its output that match
# the extended regex PATTERN (or says that the kernel gave none).
in_guests() {
    local k
    for k in $KERNELS; do
        target/release/tierd-vm --kernel "$k" run --script "$W/run.sh" \
            --file "$BIN:/lab/tierd-workload" --timeout "$2" 2>&1 |
            grep -E "$1" || echo "guest $k: no result"
    done
}
