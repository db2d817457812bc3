//! Experiments: a guest, a workload placed on the slow node, what else runs beside it, and
//! the mechanisms to compare, one fresh guest boot per mechanism so that no run inherits
//! another's state (page placement, DAMON regions, NUMA-balancing scan state).

use serde::{Deserialize, Serialize};

use crate::mechanism::{DamonTieringParams, DamosParams, Mechanism};

/// The guest machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Machine {
    /// Node 0: 2 vCPUs + 2 GiB; node 1: 2 GiB, no CPUs, lower tier.
    TwoNode,
    /// Nodes 0 and 1: 1 vCPU + 1 GiB each; node 2: 2 GiB, no CPUs, lower tier.
    ThreeNode,
    /// [`Machine::TwoNode`] without HMAT: the kernel puts both nodes in one tier
    /// (`memory_tier4`), as kernels 6.1-6.9 do with any CPU-less node present at boot and as
    /// wrong firmware does (docs/lab.md "Flat tiers").
    TwoNodeFlat,
}

/// The guest's transparent-huge-page mode for a run: what the guest script writes to
/// `/sys/kernel/mm/transparent_hugepage/enabled` before the workload starts. `defrag` (and
/// khugepaged's settings) stay at the kernel's defaults (Documentation/admin-guide/mm/
/// transhuge.rst; `madvise` for `defrag` on the 6.12 guest), and the run records what the
/// guest had.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Thp {
    /// `never`: base pages only (the lab's mode before issue 13).
    #[default]
    Never,
    /// `always`: anonymous memory is faulted in as 2 MiB folios where a range allows it.
    Always,
}

impl Thp {
    /// Both modes, in the order `tierd lab --thp both` runs them.
    pub const BOTH: [Thp; 2] = [Thp::Never, Thp::Always];

    /// The sysfs word (`never`, `always`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Thp::Never => "never",
            Thp::Always => "always",
        }
    }
}

impl std::fmt::Display for Thp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
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
    /// Whether its pages on the fast node count in over-promotion (all but the first part
    /// do, by default). A real server's own structures (hash table, buffers, stacks: every
    /// request touches them) are reported on their own and not counted.
    #[serde(default = "yes")]
    pub in_over: bool,
}

fn yes() -> bool {
    true
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
    /// The fast (top-tier) nodes; the first is the DAMOS scheme's `target_nid`.
    pub fast: Vec<u32>,
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
    /// For multi-threaded chases: the node each thread runs on (thread i's slice of the hot
    /// part belongs there); empty otherwise.
    pub home_nodes: Vec<u32>,
    /// End the run before `duration_s` once this holds (the short CI runs: wait for a
    /// condition with a generous bound rather than judge a fixed window whose length only
    /// suits a fast host).
    #[serde(default)]
    pub until: Option<Until>,
    /// The guest's THP mode (see [`Experiment::with_thp`]).
    #[serde(default)]
    pub thp: Thp,
    /// Processes the workload forks (`chase --procs N`), each with its own buffer of
    /// 1/N of each part and one ready line; 0 or 1: one process. Each process's placement is
    /// sampled on its own, and its home node is the node of the CPU it runs on.
    #[serde(default)]
    pub procs: u32,
    /// Whether the guest gets the Debian root filesystem of real servers
    /// ([`tierd_vm::rootfs`]: memcached, redis-server, numactl under `/usr/bin`).
    #[serde(default)]
    pub rootfs: bool,
    /// A real server's shell hooks ([`crate::apps`]); `None` for the project's workloads.
    #[serde(default)]
    pub app: Option<crate::apps::AppHooks>,
    /// The second of the run at which the workload starts touching its memory (`chase
    /// --idle-first-s`): t50/t90/t95 count from there.
    #[serde(default)]
    pub accesses_from_s: u32,
}

/// How often the integrity workload splits one of its THPs under `--thp always`, ms.
pub const SPLIT_EVERY_MS: u64 = 500;

impl Experiment {
    /// The experiment with the guest's THP mode set to `thp`. Under [`Thp::Always`] the
    /// workload must not opt out of huge pages, or the run would not be THP `always`: the
    /// chase and the integrity workload get `--thp follow` (no `MADV_NOHUGEPAGE`; their
    /// buffer keeps a VMA of its own through `MADV_DONTFORK`), and the integrity workload also
    /// splits THPs of its own buffer while it is checked and moved (`--split-every-ms`:
    /// `MADV_DONTNEED` of a 4 KiB subpage, `munmap` of a 4 KiB piece at a THP's edge). Under
    /// [`Thp::Never`] the workload is as before issue 13 (`MADV_NOHUGEPAGE`, a no-op for
    /// placement when THP is off, kept so the rows stay comparable with earlier runs).
    #[must_use]
    pub fn with_thp(mut self, thp: Thp) -> Experiment {
        self.thp = thp;
        if thp == Thp::Always {
            let w = self.workload.trim_start();
            if w.starts_with("chase ") {
                self.workload.push_str(" --thp follow");
            } else if w.starts_with("integrity ") {
                self.workload
                    .push_str(&format!(" --thp follow --split-every-ms {SPLIT_EVERY_MS}"));
            }
        }
        self
    }
}

/// An early end: after at least `min_s` seconds, once the first part has had at least
/// `hot_permille` of its pages on the first fast node for `consecutive` samples in a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Until {
    /// Share of the first part on the fast node, per mille.
    pub hot_permille: u32,
    /// Samples in a row (one a second) it must hold.
    pub consecutive: u32,
    /// The run lasts at least this long, so over-promotion has time to show.
    pub min_s: u32,
}

const MIB_PAGES: u64 = 256;

/// The N2+ row: NUMA balancing as its tiering authors recommend it (see
/// [`Mechanism::NumabTiering`]); `mode` 3 where there are two DRAM nodes.
fn n2_plus(mode: u32) -> (String, Mechanism) {
    ("N2+".to_string(), Mechanism::NumabTiering { mode })
}

/// The DT row: DAMON's self-tuning tiering as its authors set it up (see
/// [`DamonTieringParams`]); skipped on kernels older than 6.16.
fn damon_tiering() -> (String, Mechanism) {
    (
        "DT".to_string(),
        Mechanism::DamonTiering(DamonTieringParams::default()),
    )
}

/// tierd's configuration for the lab rows: DAMON as the source (the only one the guest
/// kernel offers), the default engine. `[scope]` is added per experiment.
#[must_use]
pub fn tierd_damon_config(extra: &str) -> String {
    format!(
        "[sources]\nenabled = [\"damon\"]\n\n[sources.damon]\nsample_us = 5000\naggr_us = 100000\n\
         min_nr_regions = 10\nmax_nr_regions = 1000\n\n{extra}"
    )
}

fn chase_parts(hot_mib: u64, total_mib: u64) -> Vec<Part> {
    vec![
        Part {
            name: "hot".into(),
            addr_key: "addr".into(),
            pages: hot_mib * MIB_PAGES,
            in_over: true,
        },
        Part {
            name: "cold".into(),
            addr_key: "cold_addr".into(),
            pages: (total_mib - hot_mib) * MIB_PAGES,
            in_over: true,
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
    // The short run lasts until 95 % of the hot set has been on node 0 for 3 s (at least
    // 20 s, so that over-promotion shows), or 120 s: a slow or busy host takes longer, it does
    // not fail.
    let duration_s = if quick { 120 } else { 60 };
    let mut runs = vec![
        ("B0".to_string(), Mechanism::Baseline),
        ("N2".to_string(), Mechanism::Numab2),
        n2_plus(2),
        (
            "D3".to_string(),
            Mechanism::DamonMigrateHot(DamosParams::default()),
        ),
        damon_tiering(),
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
        fast: vec![0],
        slow: 1,
        // 1100 MiB bound to node 0 leaves about 600 MiB free there: below the kernel's
        // free-space shortcut, above its watermarks.
        setup: "/bin/tierd-workload hold --mib 1100 --node 0 --secs 100000 > /tmp/eater.log 2>&1 &\n\
                PID_eater=$!\n"
            .to_string()
            + EATER_WAIT,
        tick: String::new(),
        workload: format!(
            "chase --total-mib {total} --hot-mib {hot} --secs 100000 --node 1 --interval-ms 1000 --tick-us 1000"
        ),
        parts: chase_parts(hot, total),
        duration_s,
        runs,
        home_nodes: Vec::new(),
        until: quick.then_some(Until {
            hot_permille: 950,
            consecutive: 3,
            min_s: 20,
        }),
        thp: Thp::Never,
        procs: 0,
        rootfs: false,
        accesses_from_s: 0,
        app: None,
    }
}

const EATER_WAIT: &str = "i=0; while ! grep -q 'ready' /tmp/eater.log; do sleep 0.2; i=$((i+1)); [ $i -gt 600 ] && break; done\n";

/// A memory eater on node 0 that comes (at second `on`) and goes (at second `off`) every
/// `period` seconds, to put the fast node under pressure and take it off again.
fn cycling_eater(mib: u64, period: u32, on: u32, off: u32) -> String {
    format!(
        "  if [ $((k % {period})) -eq {on} ]; then {start}; fi\n\
           if [ $((k % {period})) -eq {off} ] && [ -n \"$PID_eater\" ]; then {EATER_STOP}; echo \"LAB EATER off t=$(lab_t)\"; fi\n",
        start = eater_start(mib),
    )
}

/// Shell that starts the eater holding `mib` of node 0 (`$PID_eater`) and says so.
fn eater_start(mib: u64) -> String {
    format!(
        "/bin/tierd-workload hold --mib {mib} --node 0 --secs 100000 > /tmp/eater.log 2>&1 & PID_eater=$!; echo \"LAB EATER on t=$(lab_t)\""
    )
}

/// Shell that stops the eater and forgets its pid.
const EATER_STOP: &str = "kill $PID_eater; wait $PID_eater 2>/dev/null; PID_eater=";

/// The short integrity run's eater: on at second `on`, off once tierd's `/status` counts a
/// demotion (or after `max_on` seconds). A fixed on-time is a bet on the host's speed: under
/// TCG on a busy host, touching 1400 MiB took longer than the 20 s the cycle gave it, node 0
/// never fell below tierd's watermark, and the run saw no demotion (CI, twice). Once off, the
/// pages come back, so the run sees both directions; the full run keeps its cycles.
fn eater_until_demoted(mib: u64, on: u32, max_on: u32) -> String {
    format!(
        "  if [ -z \"$EATER_DONE\" ] && [ -z \"$PID_eater\" ] && [ $k -ge {on} ]; then EATER_K=$k; {start}; fi\n\
           if [ -n \"$PID_eater\" ]; then dem=$(/bin/tierd status --json 2>/dev/null | grep -o '\"pgdemote_success\": *[0-9]*' | head -n1 | tr -dc 0-9)\n\
           if [ \"${{dem:-0}}\" -gt 0 ] || [ $((k - EATER_K)) -ge {max_on} ]; then {EATER_STOP}; EATER_DONE=1; echo \"LAB EATER off t=$(lab_t) demoted=${{dem:-0}}\"; fi; fi\n",
        start = eater_start(mib),
    )
}

/// tierd's configuration for the integrity run: promote everything DAMON sees (threshold 1,
/// one access), demote between 25 % and 35 % free on node 0. DAMON samples every 100 ms: the
/// integrity workload reads each page once per pass (~0.2 s for 64 MiB under TCG), too
/// rarely for 5 ms samples to catch.
pub(crate) fn tierd_integrity_config() -> String {
    "[sources]\nenabled = [\"damon\"]\n\n[sources.damon]\nsample_us = 100000\naggr_us = 2000000\n\
     update_us = 2000000\nmin_nr_regions = 10\nmax_nr_regions = 1000\nmin_nr_accesses = 1\n\
     read_interval_ms = 2000\nintervals_goal_bp = 0\n\n[engine]\nfreq_threshold = 1\npingpong_window_ms = 0\n\n\
     [engine.demotion]\nenabled = true\nlow_free_permille = 250\nhigh_free_permille = 350\n"
        .to_string()
}

/// Integrity: tierd promotes and demotes aggressively (every page hot, demotion when an
/// eater takes node 0, promotion when it leaves) while the workload checksums all of its
/// memory continuously. Pages moved and checksum failures (must be 0).
#[must_use]
pub fn experiment_integrity(quick: bool) -> Experiment {
    let mib = 64;
    let duration_s = if quick { 60 } else { 150 };
    Experiment {
        id: "integrity".into(),
        title: "Integrity: tierd promotes and demotes while every page is checksummed".into(),
        machine: Machine::TwoNode,
        fast: vec![0],
        slow: 1,
        setup: String::new(),
        // 1400 MiB on node 0 next to the promoted buffer leaves ~20 % free: below tierd's
        // 25 % watermark, far above the kernel's reclaim point. In the full run it stays 20 s
        // of every 30 (touching 1400 MiB takes several seconds under TCG, more on a busy
        // host); the short run holds it until tierd has demoted.
        tick: if quick {
            eater_until_demoted(1400, 5, duration_s - 10)
        } else {
            cycling_eater(1400, 30, 5, 25)
        },
        workload: format!("integrity --mib {mib} --node 1 --secs 100000 --interval-ms 2000"),
        parts: vec![Part {
            name: "all".into(),
            addr_key: "addr".into(),
            pages: mib * MIB_PAGES,
            in_over: true,
        }],
        duration_s,
        runs: vec![(
            "T1".to_string(),
            Mechanism::Tierd {
                config: tierd_integrity_config(),
            },
        )],
        home_nodes: Vec::new(),
        until: None,
        thp: Thp::Never,
        procs: 0,
        rootfs: false,
        accesses_from_s: 0,
        app: None,
    }
}

/// Demotion and churn: the hot set must come back after a second process takes the fast
/// node and leaves again; pages demoted and promoted again per mechanism. The kernel's rows
/// demote through reclaim (`demotion_enabled=1`), tierd through its own watermarks.
#[must_use]
pub fn experiment_churn() -> Experiment {
    let (total, hot) = (512, 128);
    let kernel_demotion = "echo 1 > /sys/kernel/mm/numa/demotion_enabled\n";
    Experiment {
        id: "churn".into(),
        title: "Churn: an eater takes node 0 for 8 s of every 20; demoted and re-promoted pages"
            .into(),
        machine: Machine::TwoNode,
        fast: vec![0],
        slow: 1,
        setup: kernel_demotion.into(),
        // 1450 MiB bound to node 0 next to the promoted hot set leaves node 0 nearly full
        // but short of the kernel's reclaim point: only a mechanism that promoted more than
        // the hot set pushes it into reclaim.
        tick: cycling_eater(1450, 20, 8, 16),
        workload: format!(
            "chase --total-mib {total} --hot-mib {hot} --secs 100000 --node 1 --interval-ms 1000 --tick-us 1000"
        ),
        parts: chase_parts(hot, total),
        duration_s: 80,
        runs: vec![
            ("N2".to_string(), Mechanism::Numab2),
            n2_plus(2),
            (
                "D3".to_string(),
                Mechanism::DamonMigrateHot(DamosParams::default()),
            ),
            damon_tiering(),
            (
                "T1".to_string(),
                Mechanism::Tierd {
                    config: tierd_damon_config(
                        "[engine.demotion]\nenabled = true\nlow_free_permille = 150\nhigh_free_permille = 250\n",
                    ),
                },
            ),
        ],
        home_nodes: Vec::new(),
        until: None,
        thp: Thp::Never,
        procs: 0,
        rootfs: false,
        accesses_from_s: 0,
        app: None,
    }
}

/// Three nodes: two CPU nodes (one thread on each, each chasing its own half of the hot
/// part) and a CPU-less slow node holding everything at the start. Default target (node 0
/// for every page) against promotion to the accessing node.
#[must_use]
pub fn experiment_three_node() -> Experiment {
    let (total, hot) = (512, 128);
    Experiment {
        id: "three-node".into(),
        title: "Three nodes: threads on nodes 0 and 1, memory on node 2; wrong-node promotions"
            .into(),
        machine: Machine::ThreeNode,
        fast: vec![0, 1],
        slow: 2,
        setup: String::new(),
        tick: String::new(),
        workload: format!(
            "chase --total-mib {total} --hot-mib {hot} --secs 100000 --node 2 --interval-ms 1000 --threads 2 --cpus 0,1 --tick-us 1000"
        ),
        parts: chase_parts(hot, total),
        duration_s: 45,
        runs: vec![
            ("N2".to_string(), Mechanism::Numab2),
            n2_plus(3),
            damon_tiering(),
            (
                "Tdef".to_string(),
                Mechanism::Tierd {
                    config: tierd_damon_config("[engine]\nmode = \"default\"\n"),
                },
            ),
            (
                "Tprec".to_string(),
                Mechanism::Tierd {
                    config: tierd_damon_config("[engine]\nmode = \"precise\"\n"),
                },
            ),
        ],
        home_nodes: vec![0, 1],
        until: None,
        thp: Thp::Never,
        procs: 0,
        rootfs: false,
        accesses_from_s: 0,
        app: None,
    }
}

/// tierd's `[topology]` for the flat guest: node 0 fast, node 1 slow.
pub const FLAT_TOPOLOGY: &str = "[topology]\nfast = [0]\nslow = [1]\n";

/// Flat tiers (issue 16): experiment A's chase on a guest whose kernel puts both nodes in
/// one memory tier (no HMAT). The kernel's tiering finds nothing to do: NUMA balancing's
/// tiering mode promotes only from a lower tier, and demotion has no target. Classic NUMA
/// balancing (mode 1) and a DAMOS `migrate_hot` scheme name their target node themselves, so
/// they are measured too. tierd without `[topology]` refuses to start (one tier); with it,
/// it promotes the hot set.
#[must_use]
pub fn experiment_flat(quick: bool) -> Experiment {
    let tierd = |topology: &str| Mechanism::Tierd {
        config: tierd_damon_config(&format!("[engine.demotion]\nenabled = false\n\n{topology}")),
    };
    let mut runs = vec![
        ("N2".to_string(), Mechanism::Numab2),
        ("N1".to_string(), Mechanism::NumabTiering { mode: 1 }),
        (
            "D3".to_string(),
            Mechanism::DamonMigrateHot(DamosParams::default()),
        ),
        ("T-kernel".to_string(), tierd("")),
        ("T1".to_string(), tierd(FLAT_TOPOLOGY)),
    ];
    if quick {
        runs.retain(|(id, _)| id == "T1");
    }
    // A's chase, its durations and its early end (95 % held for 3 s), without A's eater: the
    // kernel's tiering has nothing to do here whatever the free memory.
    Experiment {
        id: "flat".into(),
        title: "Flat tiers: both nodes in one kernel tier (no HMAT); tierd with [topology]".into(),
        machine: Machine::TwoNodeFlat,
        setup: String::new(),
        runs,
        ..experiment_a(quick)
    }
}

/// tierd's idle-demotion age in the lab, ms: the guest's minute is compressed (the default
/// operators get is off; docs/user-guide.md suggests minutes), and it must exceed twice the
/// placement cache's period, set to 10 s here (the daemon checks it).
pub const IDLE_LAB_AGE_MS: u64 = 30_000;

/// Idle demotion: a tenant that touched most of node 0 once and went idle (in tierd's scope),
/// and a second workload that places its buffer on node 1 and starts touching it
/// `IDLE_WAIT_S` seconds later. With idle demotion, tierd has demoted the tenant's idle
/// pages by then, at its idle rate limit, and the newcomer's hot set is promoted into the
/// room; without, node 0 stays full (above its watermarks, so the kernel's reclaim never
/// wakes) and tierd's pressure demoter knows none of the tenant's pages. The kernel's tiering
/// (N2+) is the reference: its failed promotions wake kswapd, which demotes the tenant.
#[must_use]
pub fn experiment_idle(quick: bool) -> Experiment {
    const IDLE_WAIT_S: u32 = 60;
    let (total, hot) = (512, 128);
    let tierd = |idle: bool| Mechanism::Tierd {
        config: tierd_damon_config(&format!(
            "[daemon]\nplacement_reverify_ms = 10000\n\n[engine.demotion]\nenabled = true\n{}",
            if idle {
                format!("idle_after_ms = {IDLE_LAB_AGE_MS}\n")
            } else {
                String::new()
            }
        )),
    };
    let mut runs = vec![
        n2_plus(2),
        ("T-noidle".to_string(), tierd(false)),
        ("T-idle".to_string(), tierd(true)),
    ];
    if quick {
        runs.retain(|(id, _)| id == "T-idle");
    }
    Experiment {
        id: "idle".into(),
        title: "Idle demotion: an idle tenant fills node 0; a workload starting later needs room"
            .into(),
        // The tenant joins tierd's scope (the work cgroup) and holds node 0 down to 96 MiB
        // free: less than the newcomer's hot set, more than the watermarks. Its pages are
        // placed with MPOL_BIND and then unbound: tierd respects a bind, as the kernel's
        // promotion does, and would leave them (the first lab run did: policy-skipped).
        setup: "/bin/tierd-workload hold --leave-free-mib 96 --node 0 --unbind --secs 100000 > /tmp/eater.log 2>&1 &\n\
                PID_eater=$!\necho $PID_eater > /sys/fs/cgroup/work/cgroup.procs\n"
            .to_string()
            + EATER_WAIT,
        workload: format!(
            "chase --total-mib {total} --hot-mib {hot} --secs 100000 --node 1 --interval-ms 1000 --tick-us 1000 --idle-first-s {IDLE_WAIT_S}"
        ),
        duration_s: IDLE_WAIT_S + if quick { 120 } else { 90 },
        runs,
        until: quick.then_some(Until {
            hot_permille: 950,
            consecutive: 3,
            min_s: IDLE_WAIT_S + 10,
        }),
        accesses_from_s: IDLE_WAIT_S,
        ..experiment_a(quick)
    }
}

/// Mempolicy: the workload's pages carry MPOL_PREFERRED_MANY over the fast node (with and
/// without MPOL_F_NUMA_BALANCING) but sit on the slow node. The kernel promotes them only
/// with the flag (6.10+, mm/mempolicy.c `mpol_misplaced()`); tierd's nodemask rule allows
/// moves inside the preferred set either way.
#[must_use]
pub fn experiment_mempolicy() -> Experiment {
    let (total, hot) = (512, 128);
    let chase = |policy: &str| {
        format!(
            "chase --total-mib {total} --hot-mib {hot} --secs 100000 --node 1 --interval-ms 1000 --tick-us 1000 --policy {policy} --policy-nodes 0"
        )
    };
    // The workload differs per row, so this experiment is run as two: see `mempolicy_rows`.
    Experiment {
        id: "mempolicy".into(),
        title: "Mempolicy: MPOL_PREFERRED_MANY over node 0, pages on node 1".into(),
        machine: Machine::TwoNode,
        fast: vec![0],
        slow: 1,
        setup: String::new(),
        tick: String::new(),
        workload: chase("preferred-many"),
        parts: chase_parts(hot, total),
        duration_s: 30,
        runs: vec![
            ("N2".to_string(), Mechanism::Numab2),
            n2_plus(2),
            (
                "T1".to_string(),
                Mechanism::Tierd {
                    config: tierd_damon_config("[engine.demotion]\nenabled = false\n"),
                },
            ),
        ],
        home_nodes: Vec::new(),
        until: None,
        thp: Thp::Never,
        procs: 0,
        rootfs: false,
        accesses_from_s: 0,
        app: None,
    }
}

/// The mempolicy experiment with `MPOL_F_NUMA_BALANCING` on the policy.
#[must_use]
pub fn experiment_mempolicy_balancing() -> Experiment {
    let mut e = experiment_mempolicy();
    e.id = "mempolicy-balancing".into();
    e.title = "Mempolicy: MPOL_PREFERRED_MANY | MPOL_F_NUMA_BALANCING over node 0, pages on node 1"
        .into();
    e.workload = e.workload.replace(
        "--policy preferred-many",
        "--policy preferred-many-balancing",
    );
    e
}

/// Three nodes, one process per DRAM node: the three-node experiment's memory split between
/// two processes (`chase --procs 2 --cpus 0,1`, 256 MiB with a 64 MiB hot part each), the
/// first pinned to CPU 0 (node 0), the second to CPU 1 (node 1), as MPI ranks and most
/// servers are deployed. A process's hot pages belong on its own CPU's node; "wrong fast
/// node" counts those promoted to the other DRAM node.
#[must_use]
pub fn experiment_three_node_procs() -> Experiment {
    let mut e = experiment_three_node();
    e.id = "three-node-procs".into();
    e.title =
        "Three nodes, two processes: one on node 0, one on node 1, memory on node 2; wrong-node promotions"
            .into();
    e.workload = e.workload.replace("--threads 2", "--procs 2");
    e.procs = 2;
    e.home_nodes = Vec::new();
    e.runs
        .retain(|(id, _)| ["N2", "N2+", "Tdef", "Tprec"].contains(&id.as_str()));
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(e: &Experiment) -> Vec<&str> {
        e.runs.iter().map(|(id, _)| id.as_str()).collect()
    }

    /// The short integrity eater, run by `sh` with `/bin/tierd-workload`, `/bin/tierd` and
    /// `lab_t` replaced: on at second 5, kept on while tierd reports no demotion, off at the
    /// first one, never on again; the cap ends it when no demotion comes.
    #[test]
    fn the_short_integrity_eater_holds_until_tierd_has_demoted() {
        let tick = eater_until_demoted(1400, 5, 20)
            .replace(
                "/bin/tierd-workload hold --mib 1400 --node 0 --secs 100000 > /tmp/eater.log 2>&1",
                "sleep 100",
            )
            .replace("/bin/tierd status --json", "printf '%s' \"$STATUS\"");
        assert!(
            tick.contains("sleep 100") && tick.contains("$STATUS"),
            "{tick}"
        );
        let run = |demote_at: u32| -> String {
            // tierd status --json is pretty-printed: `"pgdemote_success": N`.
            let script = format!(
                "lab_t() {{ echo $k; }}\nk=0\nwhile [ $k -lt 40 ]; do\n  \
                 if [ $k -ge {demote_at} ]; then d=7; else d=0; fi\n  \
                 STATUS=\"{{ \\\"engine\\\": {{ \\\"pgdemote_success\\\": $d }} }}\"\n\
                 {tick}  k=$((k+1))\ndone\n[ -n \"$PID_eater\" ] && kill $PID_eater\nexit 0\n"
            );
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(&script)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        };
        assert_eq!(run(12), "LAB EATER on t=5\nLAB EATER off t=12 demoted=7\n");
        // No demotion: off at the cap (20 s after it came), and not again.
        assert_eq!(
            run(1000),
            "LAB EATER on t=5\nLAB EATER off t=25 demoted=0\n"
        );
        // The full run keeps its cycles.
        assert!(experiment_integrity(false).tick.contains("k % 30"));
        assert!(experiment_integrity(true).tick.contains("EATER_DONE"));
    }

    #[test]
    fn the_strongest_baselines_join_the_rows_they_apply_to() {
        assert_eq!(
            ids(&experiment_a(false)),
            ["B0", "N2", "N2+", "D3", "DT", "T1"]
        );
        assert_eq!(ids(&experiment_a(true)), ["T1"]);
        assert_eq!(ids(&experiment_churn()), ["N2", "N2+", "D3", "DT", "T1"]);
        assert_eq!(
            ids(&experiment_three_node()),
            ["N2", "N2+", "DT", "Tdef", "Tprec"]
        );
        assert_eq!(ids(&experiment_mempolicy()), ["N2", "N2+", "T1"]);
        assert_eq!(ids(&experiment_mempolicy_balancing()), ["N2", "N2+", "T1"]);
        // Two DRAM nodes: NUMA balancing's normal mode too, so pages move between them.
        let three = experiment_three_node();
        assert_eq!(three.runs[1].1, Mechanism::NumabTiering { mode: 3 });
        assert_eq!(
            experiment_a(false).runs[2].1,
            Mechanism::NumabTiering { mode: 2 }
        );
    }

    #[test]
    fn three_node_procs_is_three_node_with_one_process_per_dram_node() {
        let e = experiment_three_node_procs();
        let t = experiment_three_node();
        assert_eq!(ids(&e), ["N2", "N2+", "Tdef", "Tprec"]);
        assert_eq!(e.procs, 2);
        assert!(e.home_nodes.is_empty());
        assert_eq!(e.workload, t.workload.replace("--threads 2", "--procs 2"));
        assert!(e.workload.contains("--procs 2 --cpus 0,1"));
        assert_eq!(
            (e.parts.clone(), e.fast.clone(), e.slow),
            (t.parts, t.fast, t.slow)
        );
        assert_eq!(t.procs, 0, "the two-threads experiment stays one process");
    }
}
