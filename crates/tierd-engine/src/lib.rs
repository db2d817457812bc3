//! tierd-engine: the pghot model (WIP skeleton).
#![forbid(unsafe_code)]

pub mod types;
pub mod topology;
pub mod hotness;
