//! # tierd-linux: the engine on a real Linux machine (shell)
//!
//! This crate will hold the Linux backend: readers for `/proc` and `/sys` (topology, node
//! meminfo, vmstat, numa_maps, pagemap, cgroup v2), hotness sources (DAMON sysfs, idle page
//! tracking, perf sampling), and the mover (`move_pages(2)`). It is the only crate allowed
//! `unsafe` code, confined to one `sys` module with a `// SAFETY:` note per block.
//!
//! Implemented so far: [`sys`] (the typed syscall layer: `move_pages`, `mbind`,
//! `set_mempolicy`, `get_mempolicy`, an owning anonymous mapping) and [`mover`] (executing the
//! engine's migration batches with `move_pages(2)`). The rest is tracked in the issue "Linux
//! backend and `tierd run`".
#![deny(unsafe_code)]

pub mod mover;
#[allow(unsafe_code)]
pub mod sys;
pub mod read;

/// The `/proc` root a reader uses unless told otherwise; readers take their root so that tests
/// can point them at a fixture tree.
pub const DEFAULT_PROC_ROOT: &str = "/proc";
/// The `/sys` root, likewise.
pub const DEFAULT_SYS_ROOT: &str = "/sys";

pub mod config;
pub mod metrics;
pub mod daemon;
pub mod pagemap;
pub mod source;
pub mod feeds;
