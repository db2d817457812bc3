//! # tierd-linux: the engine on a real Linux machine (shell)
//!
//! This crate will hold the Linux backend: readers for `/proc` and `/sys` (topology, node
//! meminfo, vmstat, numa_maps, pagemap, cgroup v2), hotness sources (DAMON sysfs, idle page
//! tracking, perf sampling), and the mover (`move_pages(2)`). It is the only crate allowed
//! `unsafe` code, confined to one `sys` module with a `// SAFETY:` note per block.
//!
//! Implemented so far: [`read`], the parsers and readers of `/proc`, `/sys` and cgroup v2 files.
//! The rest is tracked in the project's issue tracker ("Linux backend and `tierd run`").
#![deny(unsafe_code)]

pub mod read;

/// The `/proc` root a reader uses unless told otherwise; readers take their root so that tests
/// can point them at a fixture tree.
pub const DEFAULT_PROC_ROOT: &str = "/proc";
/// The `/sys` root, likewise.
pub const DEFAULT_SYS_ROOT: &str = "/sys";
