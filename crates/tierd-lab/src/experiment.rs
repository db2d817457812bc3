//! Experiments: a guest, a workload placed on the slow node, what else runs beside it, and
//! the mechanisms to compare, one fresh guest boot per mechanism so that no run inherits
//! another's state (page placement, DAMON regions, NUMA-balancing scan state).

use serde::{Deserialize, Serialize};

use crate::mechanism::{DamosParams, Mechanism};

/// The guest machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Machine {
    /// Node 0: 2 vCPUs + 2 GiB; node 1: 2 GiB, no CPUs, lower tier.
    TwoNode,
    /// Nodes 0 and 1: 1 vCPU + 1 GiB each; node 2: 2 GiB, no CPUs, lower tier.
    ThreeNode,
}

/// One part of the workload's memory reported on its own (a VMA of its own).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    /// Name in tables (`hot`, `cold`, `all`).
    pub name: String,
    /// The key of its start address in the workload's ready line (`addr`, `cold_addr`).
    pub addr_key: String,
    /// Its size in base pages.
    pub pages: u64,
}

/// An experiment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Experiment {
    /// Short id (`a`, `integrity`, ...).
    pub id: String,
    /// What it shows.
    pub title: String,
    /// The guest.
    pub machine: Machine,
    /// The promotion target for the kernel's DAMOS scheme and the slow node.
    pub fast: u32,
    /// The slow (CPU-less) node.
    pub slow: u32,
    /// Shell run before the workload starts (memory eaters, sysctls).
    pub setup: String,
    /// Shell run in the sampling loop every second after the mechanism started, with `$k` the
    /// second (churn: an eater that comes and goes).
    pub tick: String,
    /// `tierd-workload` arguments.
    pub workload: String,
    /// The parts reported from numa_maps; the first is the one that should be promoted.
    pub parts: Vec<Part>,
    /// Seconds the mechanism runs.
    pub duration_s: u32,
    /// The mechanisms, with the row ids of the table.
    pub runs: Vec<(String, Mechanism)>,
}

const MIB_PAGES: u64 = 256;

/// tierd's configuration for the lab rows: DAMON as the source (the only one the guest
/// kernel offers), the default engine. `[scope]` is added per experiment.
#[must_use]
pub fn tierd_damon_config(extra: &str) -> String {
    format!(
        "[sources]\nenabled = [\"damon\"]\n\n[sources.damon]\nsample_us = 5000\naggr_us = 100000\n\
         min_nr_regions = 10\nmax_nr_regions = 1000\nmin_nr_accesses = {DEFAULT_MIN_NR_ACCESSES}\n\n{extra}"
    )
}

/// The DAMON `nr_accesses` a region needs before tierd observes its pages. Under TCG hot
/// regions reach 5-8 of 20 samples (vmlab.md 5.4); a region straddling the hot set's edge
/// reaches about half of that, so 4 keeps most of the hot set and drops most straddlers.
pub const DEFAULT_MIN_NR_ACCESSES: u32 = 4;

fn chase_parts(hot_mib: u64, total_mib: u64) -> Vec<Part> {
    vec![
        Part {
            name: "hot".into(),
            addr_key: "addr".into(),
            pages: hot_mib * MIB_PAGES,
        },
        Part {
            name: "cold".into(),
            addr_key: "cold_addr".into(),
            pages: (total_mib - hot_mib) * MIB_PAGES,
        },
    ]
}

/// Experiment A (the seed's A, scaled to the guest): a 512 MiB buffer with a 128 MiB hot
/// part on node 1, the chasing thread on node 0, and node 0 filled by a memory eater so that
/// the kernel's free-space shortcut (`pgdat_free_space_enough()`: more than 1 GiB above the
/// high watermark promotes on the first fault) does not apply and its hot threshold and rate
/// limit matter.
#[must_use]
pub fn experiment_a(quick: bool) -> Experiment {
    let (total, hot) = (512, 128);
    let duration_s = if quick { 20 } else { 60 };
    let mut runs = vec![
        ("B0".to_string(), Mechanism::Baseline),
        ("N2".to_string(), Mechanism::Numab2),
        (
            "D3".to_string(),
            Mechanism::DamonMigrateHot(DamosParams::default()),
        ),
        (
            "T1".to_string(),
            Mechanism::Tierd {
                config: tierd_damon_config("[engine.demotion]\nenabled = false\n"),
            },
        ),
    ];
    if quick {
        runs.retain(|(id, _)| id == "T1");
    }
    Experiment {
        id: "a".into(),
        title: "A: hot set on the slow node, node 0 filled; time to promote, over-promotion, cost"
            .into(),
        machine: Machine::TwoNode,
        fast: 0,
        slow: 1,
        // 1100 MiB bound to node 0 leaves about 600 MiB free there: below the kernel's
        // free-space shortcut, above its watermarks.
        setup: "/bin/tierd-workload hold --mib 1100 --node 0 --secs 100000 > /tmp/eater.log 2>&1 &\n\
                PID_eater=$!\n\
                i=0; while ! grep -q 'ready' /tmp/eater.log; do sleep 0.2; i=$((i+1)); [ $i -gt 600 ] && break; done\n"
            .into(),
        tick: String::new(),
        workload: format!(
            "chase --total-mib {total} --hot-mib {hot} --secs 100000 --node 1 --interval-ms 1000 --tick-us 1000"
        ),
        parts: chase_parts(hot, total),
        duration_s,
        runs,
    }
}
