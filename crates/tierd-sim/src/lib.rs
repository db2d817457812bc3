//! tierd-sim (WIP).
#![forbid(unsafe_code)]
// The simulator converts between f64 rates and integer counts everywhere; unit numbers are
// bounded by u32 by construction (Memory refuses more) and node ids by the topology's 64.
#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_precision_loss
)]

pub mod cost;
pub mod damon;
pub mod mechanism;
pub mod memory;
pub mod numab;
pub mod report;
pub mod scenario;
pub mod sim;
pub mod tierd;
pub mod workload;
