//! # tierd-linux: the kernel's interfaces, parsed and called
//!
//! The light Linux crate: parsers, readers, syscalls and hotness sources, with no daemon
//! policy in it, so that `tierd top`, the lab, the guest workload and the daemon
//! (`tierd-daemon`) share one copy. It is the only crate allowed `unsafe` code, confined to
//! [`sys`] with a `// SAFETY:` note per block.
//!
//! Layout, from the kernel up:
//! - [`sys`]: typed syscall wrappers (`move_pages`, `mbind`, `set_mempolicy`,
//!   `get_mempolicy`, `pidfd_open`, an owning anonymous mapping): the only unsafe code.
//! - [`read`]: parsers (pure, on text) and readers (taking a `/proc` or `/sys` root) of
//!   topology, HMAT and memory tiers, meminfo, vmstat, numa_maps/maps, cgroup v2, process
//!   status; tested on fixture trees captured from a Debian 6.12 guest (tests/fixtures).
//! - [`pagemap`]: `/proc/PID/pagemap` entries.
//! - [`source`]: hotness sources with availability probes (DAMON sysfs, idle page tracking,
//!   perf sampling with IBS, PEBS and SPE decoders), the [`source::Feed`] trait they run
//!   behind, the accessed ranges they report, and [`source::locate`], the one path from an
//!   accessed range to engine observations.
//! - [`mover`]: executes the engine's migration batches with `move_pages(2)`, per-page status
//!   turned into outcomes; races are counted, not raised.
//! - [`process`]: a process held by pidfd (or pid and start time), so that a reused pid is
//!   never taken for the process that had it.
//! - [`status`]: the daemon's `/status` document and its client.
#![deny(unsafe_code)]

pub mod mover;
pub mod pagemap;
pub mod process;
pub mod read;
pub mod source;
pub mod status;
#[allow(unsafe_code)]
pub mod sys;

/// The `/proc` root a reader uses unless told otherwise; readers take their root so that tests
/// can point them at a fixture tree.
pub const DEFAULT_PROC_ROOT: &str = "/proc";
/// The `/sys` root, likewise.
pub const DEFAULT_SYS_ROOT: &str = "/sys";
