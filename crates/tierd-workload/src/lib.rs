//! # tierd-workload: the project's own guest workload
//!
//! A small program that runs inside the tiered-memory QEMU guest (see the vmlab notes) and on
//! hosts, replacing vmlab's C `tiertest`. Subcommands of the `tierd-workload` binary:
//!
//! - `chase --total-mib N --hot-mib H --secs S --node K [--interval-ms 500] [--seed 1]
//!   [--tick-us T]`: map N MiB, `mbind(MPOL_BIND, K)`, touch every page, then reset the range
//!   to `MPOL_DEFAULT` (with the BIND policy left in place NUMA balancing would not consider the
//!   pages misplaced, so nothing would ever be promoted). Then chase pointers through a random
//!   cyclic permutation of the 64-byte lines of the first H MiB (the hot part) for S seconds.
//!   Every interval one [`report::ChaseLine`] reports where hot and cold pages are
//!   (`move_pages(2)` location query) and the chase speed. `--tick-us T` pins the workload to
//!   CPU 0 together with a child process that wakes every T µs: the context switches reload
//!   CR3, which under QEMU TCG flushes the soft TLB so that page-table Accessed bits get set
//!   again (DAMON needs them; real hardware does not need this). Make the hot part larger than
//!   the last-level cache if `ns_per_step` is to measure memory rather than cache latency.
//! - `hold --mib N --node K --secs S`: allocate N MiB bound to K (-1: default policy), touch,
//!   sleep, report placement ([`report::HoldLine`]): a memory eater.
//! - `move --mib N --from A --to B [--chunk-pages 512]`: place N MiB on A, reset the policy, move
//!   it to B with [`tierd_linux::mover::Mover`] and report the `move_pages` throughput
//!   ([`report::MoveLine`]).
//!
//! The parsers for the output lines are in [`report`], so a harness can depend on this crate.
//!
//! ## Building it for the initramfs (static)
//!
//! The guest's initramfs has no C library, so the binary must be static:
//!
//! ```sh
//! RUSTFLAGS="-C target-feature=+crt-static" \
//!     cargo build --release --target x86_64-unknown-linux-gnu -p tierd-workload
//! file target/x86_64-unknown-linux-gnu/release/tierd-workload   # "statically linked"
//! ```
//!
//! The result is a `static-pie` ELF (`ldd`: "statically linked"), about 12 MiB with the
//! workspace's `debug = 1` release profile; `objcopy --strip-debug` (or adding
//! `-C strip=debuginfo` to `RUSTFLAGS`) brings it to about 2.4 MiB for the initramfs.
//! The explicit `--target` keeps `RUSTFLAGS` away from build scripts and proc macros (which must
//! stay dynamic). The binary needs `/proc` mounted only for `--tick-us` (it re-executes itself
//! through `/proc/self/exe` to start the ticker).

pub mod chase;
pub mod report;
