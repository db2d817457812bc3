//! # tierd-linux: the engine on a real Linux machine
//!
//! The Linux backend of [`tierd_engine::Backend`] and the daemon around it (`tierd run`).
//! It is the only crate allowed `unsafe` code, confined to [`sys`] with a `// SAFETY:` note per
//! block.
//!
//! Layout, from the kernel up:
//! - [`sys`]: typed syscall wrappers (`move_pages`, `mbind`, `set_mempolicy`,
//!   `get_mempolicy`, an owning anonymous mapping): the only unsafe code.
//! - [`read`]: parsers (pure, on text) and readers (taking a `/proc` or `/sys` root) of
//!   topology, HMAT and memory tiers, meminfo, vmstat, numa_maps/maps, cgroup v2, process
//!   status; tested on fixture trees captured from a Debian 6.12 guest (tests/fixtures).
//! - [`pagemap`]: `/proc/PID/pagemap` entries.
//! - [`source`]: hotness sources with availability probes: DAMON sysfs, idle page
//!   tracking, perf sampling (IBS, PEBS, SPE decoders).
//! - [`mover`]: executes the engine's migration batches with `move_pages(2)`, per-page status
//!   turned into outcomes; races are counted, not raised.
//! - [`config`]: the daemon's TOML file with located errors.
//! - [`feeds`]: the configured sources started behind one trait.
//! - [`daemon`]: preflight (tiers, the kernel's own tiering), [`daemon::LinuxBackend`] and the
//!   run loop, which calls [`tierd_engine::step`] exactly as the simulator does.
//! - [`metrics`]: the snapshot served as Prometheus text (`/metrics`) and JSON (`/status`).
#![deny(unsafe_code)]

pub mod mover;
pub mod read;
#[allow(unsafe_code)]
pub mod sys;

/// The `/proc` root a reader uses unless told otherwise; readers take their root so that tests
/// can point them at a fixture tree.
pub const DEFAULT_PROC_ROOT: &str = "/proc";
/// The `/sys` root, likewise.
pub const DEFAULT_SYS_ROOT: &str = "/sys";

pub mod config;
pub mod daemon;
pub mod feeds;
pub mod metrics;
pub mod pagemap;
pub mod source;
