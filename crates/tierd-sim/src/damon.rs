//! DAMON with a DAMOS migrate_hot scheme — STUB, being implemented.

use serde::{Deserialize, Serialize};

use crate::mechanism::{Ctx, Mechanism};

/// DAMON/DAMOS knobs (kernel.md section 3; defaults from mm/damon/sysfs.c).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DamonParams {
    /// Operations set: `paddr` (physical ranges of `monitor_node`) or `vaddr` (processes).
    pub ops: DamonOps,
    /// The node whose physical range `paddr` monitors (the slow node).
    pub monitor_node: u16,
    /// `sample_us` (5000).
    pub sample_us: u64,
    /// `aggr_us` (100000).
    pub aggr_us: u64,
    /// `update_us` (60000000).
    pub update_us: u64,
    /// `nr_regions/min` (10).
    pub min_nr_regions: u32,
    /// `nr_regions/max` (1000).
    pub max_nr_regions: u32,
    /// The scheme's action target: `target_nid`.
    pub target_nid: u16,
    /// `access_pattern/nr_accesses/min` (in samples per aggregation).
    pub nr_accesses_min: u32,
    /// `access_pattern/nr_accesses/max`.
    pub nr_accesses_max: u32,
    /// `access_pattern/age/min` (aggregation intervals).
    pub age_min: u32,
    /// `access_pattern/age/max`.
    pub age_max: u32,
    /// `quotas/bytes` per reset interval (0 = none).
    pub quota_bytes: u64,
    /// `quotas/ms` per reset interval (0 = none).
    pub quota_ms: u64,
    /// `quotas/reset_interval_ms`.
    pub quota_reset_interval_ms: u64,
    /// `quotas/weights/sz_permil`.
    pub weight_sz_permil: u32,
    /// `quotas/weights/nr_accesses_permil`.
    pub weight_nr_accesses_permil: u32,
    /// `quotas/weights/age_permil`.
    pub weight_age_permil: u32,
    /// A `young` ops filter: re-check each page's accessed bit before migrating it.
    pub young_filter: bool,
}

/// DAMON operations sets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DamonOps {
    /// Physical address space.
    #[default]
    Paddr,
    /// Processes' virtual address spaces.
    Vaddr,
}

impl Default for DamonParams {
    fn default() -> Self {
        DamonParams {
            ops: DamonOps::Paddr,
            monitor_node: 1,
            sample_us: 5000,
            aggr_us: 100_000,
            update_us: 60_000_000,
            min_nr_regions: 10,
            max_nr_regions: 1000,
            target_nid: 0,
            nr_accesses_min: 1,
            nr_accesses_max: u32::MAX,
            age_min: 0,
            age_max: u32::MAX,
            quota_bytes: 0,
            quota_ms: 0,
            quota_reset_interval_ms: 1000,
            weight_sz_permil: 0,
            weight_nr_accesses_permil: 1000,
            weight_age_permil: 0,
            young_filter: false,
        }
    }
}

impl DamonParams {
    /// Shrinks byte-denominated knobs with the machine (`--scale`).
    pub fn scale_rates(&mut self, scale: f64) {
        // Quota bytes shrink with the machine; at least one page.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        if self.quota_bytes > 0 {
            self.quota_bytes = ((self.quota_bytes as f64 * scale).round() as u64).max(4096);
        }
    }
}

/// DAMON + DAMOS as a mechanism (STUB).
#[derive(Debug)]
pub struct Damon;

impl Damon {
    /// DAMON with `params`.
    #[must_use]
    pub fn new(_params: &DamonParams) -> Self {
        Damon
    }
}

impl Mechanism for Damon {
    fn step(&mut self, _ctx: &mut Ctx<'_>) {}
}
