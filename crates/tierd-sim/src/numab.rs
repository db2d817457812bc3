//! Kernel NUMA balancing (modes 1, 2, 3) — STUB, being implemented.

use serde::{Deserialize, Serialize};
use tierd_engine::types::NodeId;

use crate::mechanism::{Ctx, Mechanism};
use crate::memory::UnitId;

/// NUMA-balancing knobs, with the kernel's defaults (kernel.md section 2.2).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NumabParams {
    /// `kernel.numa_balancing`: 1 normal, 2 tiering, 3 both.
    pub mode: u8,
    /// `scan_delay_ms` (1000).
    pub scan_delay_ms: u64,
    /// `scan_period_min_ms` (1000).
    pub scan_period_min_ms: u64,
    /// `scan_period_max_ms` (60000).
    pub scan_period_max_ms: u64,
    /// `scan_size_mb` (256).
    pub scan_size_mb: u64,
    /// `hot_threshold_ms` (1000).
    pub hot_threshold_ms: u64,
    /// `kernel.numa_balancing_promote_rate_limit_MBps` (65536).
    pub promote_rate_limit_mbps: u64,
}

impl Default for NumabParams {
    fn default() -> Self {
        NumabParams {
            mode: 2,
            scan_delay_ms: 1000,
            scan_period_min_ms: 1000,
            scan_period_max_ms: 60_000,
            scan_size_mb: 256,
            hot_threshold_ms: 1000,
            promote_rate_limit_mbps: 65_536,
        }
    }
}

impl NumabParams {
    /// Shrinks byte-denominated knobs with the machine (`--scale`).
    pub fn scale_rates(&mut self, scale: f64) {
        // MB knobs shrink with the machine; at least 1.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        {
            self.scan_size_mb = ((self.scan_size_mb as f64 * scale).round() as u64).max(1);
            self.promote_rate_limit_mbps =
                ((self.promote_rate_limit_mbps as f64 * scale).round() as u64).max(1);
        }
    }
}

/// One NUMA hint fault.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HintFault {
    /// The faulting unit.
    pub unit: UnitId,
    /// The node of the faulting CPU.
    pub node: NodeId,
    /// When, ns since the start of the run.
    pub time_ns: u64,
    /// Fault time minus the time the PTE was made PROT_NONE, ms (the "hint fault latency").
    pub latency_ms: u64,
    /// The faulting process (index).
    pub process: usize,
}

/// The NUMA-balancing scanner and the faults it causes (STUB).
#[derive(Debug)]
pub struct Scanner;

impl Scanner {
    /// A scanner with `params`; `tiering_only` skips top-tier pages (mode 2).
    #[must_use]
    pub fn new(_params: &NumabParams, _tiering_only: bool, _nprocs: usize) -> Self {
        Scanner
    }
    /// Advances through the step, appending the hint faults that happen in it.
    pub fn step(&mut self, _ctx: &mut Ctx<'_>, _out: &mut Vec<HintFault>) {}
}

/// Kernel NUMA balancing as a mechanism (STUB).
#[derive(Debug)]
pub struct Numab;

impl Numab {
    /// NUMA balancing with `params`.
    #[must_use]
    pub fn new(_params: &NumabParams, _nprocs: usize) -> Self {
        Numab
    }
}

impl Mechanism for Numab {
    fn step(&mut self, _ctx: &mut Ctx<'_>) {}
}
