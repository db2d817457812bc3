//! # tierd-daemon: the engine on a real Linux machine (`tierd run`)
//!
//! The daemon application: configuration, preflight, the backend the engine drives, the run
//! loop and the metrics endpoint. Everything it reads or calls in the kernel comes from
//! `tierd-linux`; this crate has no `unsafe` code.
//!
//! Layout:
//! - [`config`]: the daemon's TOML file with located errors.
//! - [`feeds`]: the configured sources started behind `tierd_linux::source::Feed`.
//! - [`daemon`]: preflight (tiers, the kernel's own tiering), [`daemon::LinuxBackend`] and the
//!   run loop, which calls [`tierd_engine::step`] exactly as the simulator does.
//! - [`metrics`]: the snapshot served as Prometheus text (`/metrics`) and JSON (`/status`).

pub mod config;
pub mod daemon;
pub mod feeds;
pub mod metrics;
