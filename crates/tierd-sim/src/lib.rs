//! # tierd-sim: a simulated tiered machine (shell)
//!
//! This crate will hold the simulator: a tiered machine (nodes, capacities, latencies), seeded
//! workloads, models of the kernel's own promotion mechanisms (NUMA balancing, DAMON
//! migrate_hot), and a backend that runs the unchanged engine through
//! [`tierd_engine::Backend`] on a virtual clock.
//!
//! Nothing is implemented yet; see the project's issue tracker ("Simulator and
//! `tierd compare`").
#![forbid(unsafe_code)]
