//! # tierd-workload: the project's own guest workload
//!
//! A small program that runs inside the tiered-memory QEMU guest (docs/lab.md) and on
//! hosts, replacing the C `tiertest` of the lab's first guest runs. Subcommands of the `tierd-workload` binary:
//!
//! - `chase --total-mib N --hot-mib H --secs S --node K [--interval-ms 500] [--seed 1]
//!   [--tick-us T] [--policy default|preferred-many|preferred-many-balancing]
//!   [--policy-nodes LIST] [--threads N] [--cpus LIST] [--thp off|follow]`: map N MiB,
//!   `mbind(MPOL_BIND, K)`,
//!   touch every page, then set the range's policy: `default` resets it to `MPOL_DEFAULT`
//!   (with the BIND policy left in place NUMA balancing would not consider the pages
//!   misplaced, so nothing would ever be promoted); `preferred-many` sets
//!   `MPOL_PREFERRED_MANY` over `--policy-nodes` and `preferred-many-balancing` adds
//!   `MPOL_F_NUMA_BALANCING` (mm/mempolicy.c `sanitize_mpol_flags()` accepts that flag with
//!   `MPOL_BIND` and, since Linux 6.10, `MPOL_PREFERRED_MANY`; the 6.12 guest has it, older
//!   kernels answer `EINVAL`). Then N threads (default 1) chase pointers, each through a random
//!   cyclic permutation of the 64-byte lines of its own contiguous run of whole pages of the
//!   first H MiB (the hot part; thread i uses seed + i), for S seconds, pinned round-robin to
//!   the CPUs of `--cpus`. Every interval one [`report::ChaseLine`] reports where hot and cold
//!   pages are (`move_pages(2)` location query), the chase speed, and per thread its speed and
//!   the placement of its slice (so promotions to the wrong fast node show). `--tick-us T`
//!   starts, on each chase CPU (CPU 0 without `--cpus`, the threads then pinned there), a child
//!   process that wakes every T µs: the context switches reload CR3, which under QEMU TCG
//!   flushes the soft TLB so that page-table Accessed bits get set again (DAMON needs them;
//!   real hardware does not need this). Make the hot part larger than the last-level cache if
//!   `ns_per_step` is to measure memory rather than cache latency.
//! - `hold (--mib N | --leave-free-mib M) --node K --secs S`: allocate N MiB bound to K (-1:
//!   default policy), or allocate on K in chunks until the node's `MemFree`
//!   (`/sys/devices/system/node/nodeK/meminfo`) is about M MiB; touch, sleep, report placement
//!   ([`report::HoldLine`], `mib` = MiB allocated): a memory eater.
//! - `move --mib N --from A --to B [--chunk-pages 512]`: place N MiB on A, reset the policy, move
//!   it to B with [`tierd_linux::mover::Mover`] and report the `move_pages` throughput
//!   ([`report::MoveLine`]).
//! - `pte-cost [--mib 256] [--rounds 11]`: time `mprotect(2)` round trips over N MiB of
//!   written base pages, the PTE walk NUMA balancing's scanner makes, and print ns per page
//!   (one `pte-cost round=..` line per round, then `pte-cost pages=.. none_ns_median=..`):
//!   what a PTE update costs on this machine, or in a TCG guest (scripts/pte-cost.sh; the
//!   simulator's lab A twin takes its `pte_time_scale` from it).
//! - `lru-gen-cost [--mib 1024] [--rounds 11] [--node 0] [--force]`: time the multi-gen LRU's
//!   aging passes (`/sys/kernel/debug/lru_gen`, root) over N MiB of base pages whose PTEs are
//!   young, then old, and print ns per page and how many pages each pass found young
//!   (scripts/lru-gen-cost.sh; docs/simulator.md "D under MGLRU").
//! - `--thp` (chase and integrity): `off` (the default) marks the hot part / the buffer
//!   `MADV_NOHUGEPAGE`, so it stays in 4 KiB pages whatever the system's THP mode; `follow`
//!   gives no THP advice (the system's mode decides) and marks it `MADV_DONTFORK` instead.
//!   Either flag keeps it a VMA of its own, reported on its own `numa_maps` line.
//! - `integrity --mib N --node K --secs S [--interval-ms 1000] [--threads 1] [--thp off|follow]
//!   [--split-every-ms 0]`: fill N MiB on K
//!   with per-word values of (address, generation) ([`integrity`]), reset the policy to
//!   `MPOL_DEFAULT`, then verify every page over and over for S seconds, rewriting one
//!   sixteenth of each thread's range per pass with the next generation, so pages are read and
//!   written while they migrate. A wrong page is counted (a checksum failure), its first wrong
//!   word printed (the first 8), and it is repaired so that one corruption counts once; the run
//!   never stops on one and exits 0 ([`report::IntegrityLine`]; non-zero only if it could not
//!   run). The checking threads make no system calls, except with `--split-every-ms T`: every
//!   T ms each thread cuts its part of the buffer ([`integrity::SplitPlan`]), in turn a
//!   `MADV_DONTNEED` of a 4 KiB page inside a 2 MiB block (it must read back as zeros, else a
//!   checksum failure; it is rewritten with the next generation) and a `munmap` of a 4 KiB
//!   page at a block's edge (it leaves the check and the location query). Under THP each cut
//!   splits the THP there while it is checked and migrated; the lines then carry
//!   `discarded_pages`, `unmapped_pages` and `cut_blocks`.
//!
//! - The chaos lab's actors (`tierd lab chaos`, see [`chaos`] and docs/lab.md "Chaos"):
//!   `chaos-spawner` (processes in and out of tierd's scope, pid wraps), `hostile-names`
//!   (mapped files with names numa_maps prints unescaped), `hog` (out-of-scope hot memory on
//!   the slow node, no binding policy), `bound` (an in-scope `MPOL_BIND` VMA on the slow node),
//!   `http-abuse --mode idle|endless-header|slow-read`, `prober` (/metrics within 1 s),
//!   `supervise` (SIGKILL and restart tierd, count the exits it did not ask for, time the
//!   resume, sample peak RSS and descriptors), `hotplug` (offline and online the slow node's
//!   memory blocks) and `cycle-eater`. Each prints one `... done key=value ...` line.
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

pub mod chaos;
pub mod chase;
pub mod integrity;
pub mod kv;
pub mod report;
