//! # tierd-daemon: the engine on a real Linux machine (`tierd run`)
//!
//! The daemon application: configuration, preflight, the backend the engine drives, the run
//! loop and the metrics endpoint. Everything it reads or calls in the kernel comes from
//! `tierd-linux`; this crate has no `unsafe` code.
//!
//! Layout:
//! - [`config`]: the daemon's TOML file with located errors.
//! - [`effective`]: `tierd config show`, the effective configuration with units.
//! - [`reload`]: what SIGHUP may change in a running daemon, key by key.
//! - [`marker`]: the restart marker naming the kdamond tierd runs, so that a restart after
//!   an unclean exit takes it over.
//! - [`hugepages`]: free hugetlb pages per node (sysfs), for `daemon.hugetlb = "move"`.
//! - [`error`]: why the daemon cannot start ([`error::DaemonError`]) and its exit statuses.
//! - [`feeds`]: the configured sources started behind `tierd_linux::source::Feed`.
//! - [`daemon`]: preflight (tiers, the kernel's own tiering), [`daemon::LinuxBackend`] and the
//!   run loop, which calls [`tierd_engine::step`] exactly as the simulator does.
//! - [`metrics`]: the snapshot served as Prometheus text (`/metrics`) and JSON (`/status`),
//!   and the loop's liveness (`/healthz`).
//! - [`serve`]: the HTTP server under it, bounded against hostile clients.

pub mod config;
pub mod daemon;
pub mod effective;
pub mod error;
pub mod feeds;
pub mod hugepages;
pub mod marker;
pub mod metrics;
pub mod reload;
pub mod serve;
