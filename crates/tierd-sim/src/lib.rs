//! # tierd-sim: a simulated tiered-memory machine
//!
//! Runs promotion strategies side by side on a simulated machine with several memory tiers:
//! the kernel's NUMA balancing (modes 1, 2, 3), DAMON with a `migrate_hot` scheme, and tierd's
//! engine, unchanged, through the same [`tierd_engine::Backend`] trait the Linux daemon uses.
//! It never simulates every access: per-page access rates come from the workload and the
//! placement, and each mechanism draws only the events it can observe (hardware samples, hint
//! faults, accessed bits). docs/simulator.md explains the model, its constants and its
//! calibration against the published figures.
//!
//! # Layout
//!
//! - [`memory`]: pages (units), regions, classes, per-node placement and physical slots.
//! - [`workload`]: processes, thread groups, access streams; [`workload::Load`] is the access
//!   rates of one step and the samplers over them.
//! - [`mechanism`]: the [`mechanism::Mechanism`] trait, the step context, cost accounting,
//!   hardware-sample drawing, and the kernel's reclaim (kswapd and direct demotion).
//! - [`numab`]: kernel NUMA balancing; [`damon`]: DAMON/DAMOS; [`tierd`]: tierd's engine.
//! - [`cost`]: named costs, each derived, fitted or assumed, and said which.
//! - [`scenario`]: the TOML scenario format and its validation; [`sim`]: building a machine
//!   from a scenario and running configurations; [`report`]: the table and CSV.
//! - [`observe`]: a run's state at each sample, for an observer (`tierd top --sim`).
//!
//! # Determinism
//!
//! Every run is seeded (ChaCha8 from the scenario's seed) and every map that reaches output is
//! ordered, so the same seed gives the same output.
#![forbid(unsafe_code)]
// The simulator converts between f64 rates and integer counts everywhere; unit numbers are
// bounded by u32 by construction (Memory refuses more) and node ids by the topology's 64.
#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_precision_loss
)]

pub mod abit;
pub mod cost;
pub mod damon;
pub mod mechanism;
pub mod memory;
pub mod numab;
pub mod observe;
pub mod report;
pub mod scenario;
pub mod sim;
pub mod tierd;
pub mod workload;
