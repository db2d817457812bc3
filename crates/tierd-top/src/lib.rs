//! # tierd-top: a terminal view of tiered memory (`tierd top`)
//!
//! Shows, per NUMA node, its tier and used / free memory; per process and per cgroup, the
//! pages on each node and how many of them are hot; promotion and demotion rates; and the
//! counters of the source. It reads either a running daemon's `/status` (every `--interval`)
//! or a simulated run of a shipped scenario (one view per simulated sample).
//!
//! # Layout
//!
//! - [`view`]: the neutral view model [`view::TopView`], built by [`view::from_snapshot`]
//!   (daemon) or [`view::from_observed`] (simulator), cgroup totals and [`view::rates`].
//! - [`state`]: the UI state and its keys, a pure state machine ([`state::TopState::key`]).
//! - [`render`]: [`render::render`] into a ratatui frame, [`render::plain`] as text.
//! - [`source`]: the daemon and simulator sources, and the terminal loop.
//!
//! # What "hot" means
//!
//! - From the daemon: the distinct base pages a hotness source (DAMON, idle-page scan, perf
//!   samples) reported accessed, and `move_pages(2)` located, during the daemon's last
//!   refresh period (`daemon.refresh_ms`, 1 s by default). Cold = the rest of the process's
//!   pages in `numa_maps`.
//! - From the simulator: the workload's ground truth, the pages of the classes that running
//!   processes read (for a region with a `hot` table, its hot chunks only); see
//!   `tierd_sim::observe`.
#![forbid(unsafe_code)]

pub mod render;
pub mod source;
pub mod state;
pub mod view;
