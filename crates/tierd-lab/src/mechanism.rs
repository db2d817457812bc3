//! The promotion mechanisms a lab run can use, as guest shell: how each is started, what its
//! promoter thread is (for CPU accounting), and how it is stopped.
//!
//! The kernel's own mechanisms are set up exactly as an operator would: `numa_balancing=2`
//! (kernel/sched/fair.c, Documentation/admin-guide/sysctl/kernel.rst), and a DAMOS
//! `migrate_hot` scheme through DAMON's sysfs interface (Documentation/admin-guide/mm/damon/
//! usage.rst), over the slow node's physical range, as in the lab's first guest runs (docs/lab.md).

use serde::{Deserialize, Serialize};

/// DAMOS `migrate_hot` settings (the seed's D3 row, scaled to the guest).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DamosParams {
    /// `sample_us`.
    pub sample_us: u64,
    /// `aggr_us`.
    pub aggr_us: u64,
    /// `nr_regions/min`.
    pub min_nr_regions: u64,
    /// `nr_regions/max`.
    pub max_nr_regions: u64,
    /// `access_pattern/nr_accesses/min`.
    pub min_nr_accesses: u64,
    /// `quotas/bytes` per `quotas/reset_interval_ms` (0: no quota).
    pub quota_bytes: u64,
    /// `quotas/reset_interval_ms`.
    pub quota_reset_ms: u64,
}

impl Default for DamosParams {
    fn default() -> Self {
        // Seed D3: sample 5 ms, aggregation 100 ms, nr_accesses >= 1, quota 128 MiB / 1000 ms,
        // prioritised by nr_accesses. Regions 10..1000 (the seed's 100000 maximum is for a
        // 256 GB node; the guest's is 2 GiB).
        DamosParams {
            sample_us: 5_000,
            aggr_us: 100_000,
            min_nr_regions: 10,
            max_nr_regions: 1_000,
            min_nr_accesses: 1,
            quota_bytes: 128 << 20,
            quota_reset_ms: 1_000,
        }
    }
}

/// DAMON's self-tuning memory tiering (the DT row), as its authors set it up: damo's
/// `scripts/mem_tier.sh` and the kernel's `samples/damon/mtier.c` (SeongJae Park, "mm/damon:
/// auto-tune DAMOS for NUMA setups including tiered memory", 6.16). Two kdamonds, one `paddr`
/// context each: kdamond 0 watches the fast node and moves what was not accessed
/// (`migrate_cold`, nr_accesses 0..0, `reject young` filter) to the slow node, aiming at
/// `node_mem_free_bp` on the fast node; kdamond 1 watches the slow node and moves what was
/// accessed (`migrate_hot`, nr_accesses >= 1, `allow young` filter) to the fast node, aiming
/// at `node_mem_used_bp` on the fast node. Both quotas are auto-tuned toward their goal
/// (DAMOS quota goals, Documentation/mm/damon/design.rst "Aim-oriented Feedback-driven
/// Auto-tuning"), and both contexts tune their sampling and aggregation intervals toward
/// `access_bp` observed accesses per `aggrs` aggregations (the monitoring intervals goal,
/// 6.15).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DamonTieringParams {
    /// Initial `sample_us` (damo's default and mtier.c's: 5 ms).
    pub sample_us: u64,
    /// Initial `aggr_us` (100 ms).
    pub aggr_us: u64,
    /// `update_us` (mtier.c: 60 s; `paddr` does not use it).
    pub update_us: u64,
    /// `nr_regions/min` (10).
    pub min_nr_regions: u64,
    /// `nr_regions/max` (1000).
    pub max_nr_regions: u64,
    /// `intervals_goal/access_bp` (400: "4%").
    pub goal_access_bp: u64,
    /// `intervals_goal/aggrs` (3).
    pub goal_aggrs: u64,
    /// `intervals_goal/min_sample_us` (5 ms).
    pub goal_min_sample_us: u64,
    /// `intervals_goal/max_sample_us` (10 s).
    pub goal_max_sample_us: u64,
    /// The promoting scheme's `access_pattern/nr_accesses/min`: mem_tier.sh's "5%" of the
    /// maximum nr_accesses (aggr / sample = 20 at the start) is 1, mtier.c's value.
    pub hot_min_nr_accesses: u64,
    /// Each scheme's `apply_interval_us` (1 s).
    pub apply_interval_us: u64,
    /// Each scheme's `quotas/bytes` per `quotas/reset_interval_ms` (200 MiB per 1 s).
    pub quota_bytes: u64,
    /// `quotas/reset_interval_ms`.
    pub quota_reset_ms: u64,
    /// The demoting scheme's goal: `node_mem_free_bp` of the fast node (50: 0.5 % free).
    pub free_goal_bp: u64,
    /// The promoting scheme's goal: `node_mem_used_bp` of the fast node (9970: 99.7 % used).
    pub used_goal_bp: u64,
}

impl Default for DamonTieringParams {
    fn default() -> Self {
        DamonTieringParams {
            sample_us: 5_000,
            aggr_us: 100_000,
            update_us: 60_000_000,
            min_nr_regions: 10,
            max_nr_regions: 1_000,
            goal_access_bp: 400,
            goal_aggrs: 3,
            goal_min_sample_us: 5_000,
            goal_max_sample_us: 10_000_000,
            hot_min_nr_accesses: 1,
            apply_interval_us: 1_000_000,
            quota_bytes: 200 << 20,
            quota_reset_ms: 1_000,
            free_goal_bp: 50,
            used_goal_bp: 9_970,
        }
    }
}

/// The first kernel with everything [`DamonTieringParams`] uses: `node_mem_used_bp` /
/// `node_mem_free_bp` quota goals with a `nid` (6.16; the intervals goal and `allow` filters
/// came in 6.15 and 6.14). mem_tier.sh: "the kernel should have the auto-tuned memory tiering
/// support of DAMON, which was landed into the mainline since v6.16-rc1".
pub const DAMON_TIERING_MIN_KERNEL: (u32, u32) = (6, 16);

/// A promotion mechanism.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Mechanism {
    /// No promotion (`numa_balancing=0`).
    Baseline,
    /// The kernel's NUMA balancing in memory-tiering mode (`numa_balancing=2`).
    Numab2,
    /// NUMA balancing as its tiering authors recommend it (the N2+ row): `numa_balancing`
    /// `mode` (2, MEMORY_TIERING; 3 adds NORMAL so pages also move between DRAM nodes,
    /// Documentation/admin-guide/sysctl/kernel.rst "numa_balancing") with demotion on reclaim
    /// (`/sys/kernel/mm/numa/demotion_enabled=1`, Documentation/ABI/testing/
    /// sysfs-kernel-mm-numa): kswapd demotes cold pages of the fast node to its demotion
    /// target, so promotion finds room (the TPP design, mm/vmscan.c `demote_folio_list()`,
    /// mm/memory-tiers.c `next_demotion_node()`). The rate limit
    /// (`numa_balancing_promote_rate_limit_MBps`, 65536) and the hot threshold (debugfs
    /// `sched/numa_balancing/hot_threshold_ms`, 1000, adjusted by the kernel toward the rate
    /// limit: kernel/sched/fair.c `numa_promotion_adjust_threshold()`) stay at their defaults;
    /// the run records them and every other tiering knob the guest kernel has.
    NumabTiering {
        /// The `numa_balancing` mode bits.
        mode: u32,
    },
    /// A DAMOS `migrate_hot` scheme (paddr, slow node -> `target_nid`).
    DamonMigrateHot(DamosParams),
    /// DAMON's self-tuning tiering (see [`DamonTieringParams`]).
    DamonTiering(DamonTieringParams),
    /// tierd with a configuration file (its `[scope]` is added by the experiment).
    Tierd {
        /// The configuration without `[scope]`.
        config: String,
    },
}

impl Mechanism {
    /// A short name for tables.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Mechanism::Baseline => "baseline",
            Mechanism::Numab2 => "numab2",
            Mechanism::NumabTiering { .. } => "numab-tiering",
            Mechanism::DamonMigrateHot(_) => "damos",
            Mechanism::DamonTiering(_) => "damon-tiering",
            Mechanism::Tierd { .. } => "tierd",
        }
    }

    /// Whether the mechanism is DAMON's (its promoter CPU is kdamond's).
    #[must_use]
    pub fn is_damon(&self) -> bool {
        matches!(
            self,
            Mechanism::DamonMigrateHot(_) | Mechanism::DamonTiering(_)
        )
    }

    /// The oldest kernel (major, minor) that has what the mechanism uses, when it needs a
    /// newer one than the lab's oldest (6.12).
    #[must_use]
    pub fn min_kernel(&self) -> Option<(u32, u32)> {
        match self {
            Mechanism::DamonTiering(_) => Some(DAMON_TIERING_MIN_KERNEL),
            _ => None,
        }
    }

    /// Shell that starts the mechanism. It may read `$SLOW` (the slow node), `$FAST` (the
    /// promotion target) and must set `PID_promoter` to the promoter's pid when it has one.
    #[must_use]
    pub fn start_script(&self) -> String {
        match self {
            Mechanism::Baseline => "echo 0 > /proc/sys/kernel/numa_balancing\n".into(),
            Mechanism::Numab2 => "echo 2 > /proc/sys/kernel/numa_balancing\n".into(),
            Mechanism::NumabTiering { mode } => numab_tiering_script(*mode),
            Mechanism::DamonMigrateHot(p) => damos_script(p),
            Mechanism::DamonTiering(p) => damon_tiering_script(p),
            // tierd's own DAMON kdamond works for it: its CPU counts too. tierd starts it a
            // moment after its own start, so each sample looks for it until found
            // (`lab_discover`, called by `lab_sample`) rather than the start waiting for it,
            // which would delay the first sample and every time measured from it.
            // Every tierd row records its engine's inputs and decisions (docs/trace.md) so
            // that it can be replayed; the trace lives in the guest's RAM, bounded to 2 x 16
            // MiB (a long row rotates its start away and its replay then says so).
            Mechanism::Tierd { .. } => "echo 0 > /proc/sys/kernel/numa_balancing\n\
                 /bin/tierd run --config /lab/tierd.toml --record /tmp/trace --record-max-mib 16 --record-files 2 > /tmp/tierd.out 2> /tmp/tierd.err &\n\
                 PID_promoter=$!\n\
                 lab_discover() { [ -z \"$PID_kdamond\" ] || return 0; K=/sys/kernel/mm/damon/admin/kdamonds/0; [ -r $K/pid ] || return 0; P=$(cat $K/pid); [ \"$P\" -gt 0 ] 2>/dev/null && PID_kdamond=$P; }\n\
                 lab_discover\n"
                .into(),
        }
    }

    /// Shell that stops the mechanism (and prints what it left to say).
    #[must_use]
    pub fn stop_script(&self) -> String {
        match self {
            Mechanism::Baseline | Mechanism::Numab2 | Mechanism::NumabTiering { .. } => {
                "echo 0 > /proc/sys/kernel/numa_balancing\n".into()
            }
            Mechanism::DamonTiering(_) => DAMON_TIERING_STOP.into(),
            Mechanism::DamonMigrateHot(_) => {
                "K=/sys/kernel/mm/damon/admin/kdamonds/0\n\
                 echo update_schemes_stats > $K/state\n\
                 S=$K/contexts/0/schemes/0/stats\n\
                 echo \"LAB DAMOS nr_tried=$(cat $S/nr_tried) sz_tried=$(cat $S/sz_tried) nr_applied=$(cat $S/nr_applied) sz_applied=$(cat $S/sz_applied) qt_exceeds=$(cat $S/qt_exceeds)\"\n\
                 echo off > $K/state\n"
                    .into()
            }
            Mechanism::Tierd { .. } => "/bin/tierd status --json > /tmp/status.json 2>/dev/null\n\
                 kill -TERM $PID_promoter; wait $PID_promoter; echo \"LAB TIERD_RC $?\"\n\
                 sed 's/^/LAB TIERD_ERR /' /tmp/tierd.err\n\
                 grep -E ' intervals |first pass done|first pages moved' /tmp/tierd.out | sed 's/^/LAB TIERD_OUT /'\n\
                 tierd_export /tmp/status.json status.json\n\
                 /bin/tierd replay /tmp/trace --every 100000 2>&1 | grep -E '^decisions:' | sed 's/^/LAB TIERD_REPLAY /'\n\
                 tierd_export_tree /tmp/trace trace.tgz\n"
                .into(),
        }
    }
}

/// Shell for N2+: demotion on, the mode, and what the kernel's tiering knobs read (every
/// `numa_balancing*` sysctl, /sys/kernel/mm/numa, the debugfs `sched/numa_balancing` files,
/// and `vm.pghot*` where a kernel has the hot-page tracking sysctls), for the record.
fn numab_tiering_script(mode: u32) -> String {
    format!(
        r#"echo 1 > /sys/kernel/mm/numa/demotion_enabled
echo {mode} > /proc/sys/kernel/numa_balancing
lab_knobs() {{ for f in "$@"; do [ -f "$f" ] && printf ' %s=%s' "${{f##*/}}" "$(cat $f 2>/dev/null)"; done; }}
echo "LAB NUMAB mode=$(cat /proc/sys/kernel/numa_balancing) demotion_enabled=$(cat /sys/kernel/mm/numa/demotion_enabled)$(lab_knobs /proc/sys/kernel/numa_balancing_* /sys/kernel/mm/numa/* /sys/kernel/debug/sched/numa_balancing/* /proc/sys/vm/pghot*)"
"#
    )
}

/// Shell that defines `lab_node_range N`: sets `START` and `END` to node N's physical range,
/// from its memory blocks (Documentation/admin-guide/mm/memory-hotplug.rst: each
/// /sys/devices/system/node/nodeN/memoryM block spans `block_size_bytes` from M times it).
const NODE_RANGE_FN: &str = r#"lab_node_range() {
  BS=$(( 0x$(cat /sys/devices/system/memory/block_size_bytes) ))
  lo=; hi=
  for m in /sys/devices/system/node/node$1/memory[0-9]*; do
    i=${m##*memory}; { [ -z "$lo" ] || [ $i -lt $lo ]; } && lo=$i; { [ -z "$hi" ] || [ $i -gt $hi ]; } && hi=$i
  done
  START=$(( lo * BS )); END=$(( (hi + 1) * BS ))
}
"#;

/// Shell for DT (see [`DamonTieringParams`]), through DAMON's sysfs interface
/// (Documentation/admin-guide/mm/damon/usage.rst: `intervals/intervals_goal/{access_bp,aggrs,
/// min_sample_us,max_sample_us}`, `schemes/<N>/{action,target_nid,apply_interval_us}`,
/// `quotas/goals/<N>/{target_metric,target_value,nid}`, and `{core_,ops_,}filters/<N>/{type,
/// matching,allow}`; `young` is an operations-layer filter, so `ops_filters` where the kernel
/// has it, else the unified `filters`). A kernel without one of these files gets no kdamond:
/// the run prints `LAB SKIP` with what is missing and ends at once.
fn damon_tiering_script(p: &DamonTieringParams) -> String {
    format!(
        r#"echo 0 > /proc/sys/kernel/numa_balancing
{range_fn}D=/sys/kernel/mm/damon/admin/kdamonds
BIG=18446744073709551615
DT_MISSING=
lab_dt_need() {{ [ -e "$1" ] || DT_MISSING="$DT_MISSING ${{1#$D/}}"; }}
# lab_dt KDAMOND NODE ACTION TARGET_NID MIN_ACC MAX_ACC GOAL_METRIC GOAL_BP ALLOW_YOUNG
lab_dt() {{
  K=$D/$1
  echo 1 > $K/contexts/nr_contexts; C=$K/contexts/0
  echo paddr > $C/operations
  A=$C/monitoring_attrs; IG=$A/intervals/intervals_goal
  echo {sample} > $A/intervals/sample_us; echo {aggr} > $A/intervals/aggr_us; echo {update} > $A/intervals/update_us
  echo {minr} > $A/nr_regions/min; echo {maxr} > $A/nr_regions/max
  lab_dt_need $IG/access_bp
  echo {access_bp} > $IG/access_bp 2>/dev/null; echo {aggrs} > $IG/aggrs 2>/dev/null
  echo {min_sample} > $IG/min_sample_us 2>/dev/null; echo {max_sample} > $IG/max_sample_us 2>/dev/null
  lab_node_range $2
  echo 1 > $C/targets/nr_targets
  echo 1 > $C/targets/0/regions/nr_regions
  echo $START > $C/targets/0/regions/0/start; echo $END > $C/targets/0/regions/0/end
  echo 1 > $C/schemes/nr_schemes; S=$C/schemes/0
  echo $3 > $S/action 2>/dev/null || DT_MISSING="$DT_MISSING action:$3"
  echo $4 > $S/target_nid
  lab_dt_need $S/apply_interval_us
  echo {apply} > $S/apply_interval_us 2>/dev/null
  echo 4096 > $S/access_pattern/sz/min; echo $BIG > $S/access_pattern/sz/max
  echo $5 > $S/access_pattern/nr_accesses/min; echo $6 > $S/access_pattern/nr_accesses/max
  echo 0 > $S/access_pattern/age/min; echo $BIG > $S/access_pattern/age/max
  echo {quota} > $S/quotas/bytes; echo 0 > $S/quotas/ms; echo {reset} > $S/quotas/reset_interval_ms
  # mtier.c: ignore the region size when prioritising; access frequency and age alike.
  echo 0 > $S/quotas/weights/sz_permil; echo 100 > $S/quotas/weights/nr_accesses_permil; echo 100 > $S/quotas/weights/age_permil
  G=$S/quotas/goals
  lab_dt_need $G/nr_goals
  echo 1 > $G/nr_goals 2>/dev/null
  lab_dt_need $G/0/nid
  echo $7 > $G/0/target_metric 2>/dev/null || DT_MISSING="$DT_MISSING goal:$7"
  echo $8 > $G/0/target_value 2>/dev/null; echo $FAST > $G/0/nid 2>/dev/null
  F=$S/ops_filters; [ -d $F ] || F=$S/filters
  echo 1 > $F/nr_filters
  lab_dt_need $F/0/allow
  echo young > $F/0/type; echo Y > $F/0/matching; echo $9 > $F/0/allow 2>/dev/null
  echo "LAB DT_CTX kdamond=$1 node=$2 range=$START-$END action=$3 target_nid=$4 nr_accesses=$5-$6 goal=$7:$8@$FAST allow_young=$9 filters=${{F##*/}}"
}}
echo 2 > $D/nr_kdamonds
# Demote what the fast node does not use; promote what the slow node's users touch.
lab_dt 0 $FAST migrate_cold $SLOW 0 0 node_mem_free_bp {free_bp} N
lab_dt 1 $SLOW migrate_hot $FAST {hot_min} 4294967295 node_mem_used_bp {used_bp} Y
if [ -n "$DT_MISSING" ]; then
  echo "LAB SKIP DAMON self-tuning tiering needs what kernel $(uname -r) lacks:$DT_MISSING"
  echo 0 > $D/nr_kdamonds; DT_SKIP=1; DURATION=0
else
  echo on > $D/0/state || echo "LAB DT_ERR kdamond 0 did not start"
  echo on > $D/1/state || echo "LAB DT_ERR kdamond 1 did not start"
  # Both kdamonds are the mechanism: their CPU counts as the promoter's.
  PID_promoter=$(cat $D/0/pid); PID_kdamond=$(cat $D/1/pid)
  echo "LAB DT_ON kdamonds=$PID_promoter,$PID_kdamond"
fi
"#,
        range_fn = NODE_RANGE_FN,
        sample = p.sample_us,
        aggr = p.aggr_us,
        update = p.update_us,
        minr = p.min_nr_regions,
        maxr = p.max_nr_regions,
        access_bp = p.goal_access_bp,
        aggrs = p.goal_aggrs,
        min_sample = p.goal_min_sample_us,
        max_sample = p.goal_max_sample_us,
        apply = p.apply_interval_us,
        quota = p.quota_bytes,
        reset = p.quota_reset_ms,
        free_bp = p.free_goal_bp,
        used_bp = p.used_goal_bp,
        hot_min = p.hot_min_nr_accesses,
    )
}

/// Stops DT's kdamonds, printing each scheme's stats, its tuned intervals, its effective
/// quota and its goal's current value first (usage.rst: `update_schemes_stats`,
/// `update_tuned_intervals`, `update_schemes_effective_quotas` written to `state`).
const DAMON_TIERING_STOP: &str = r#"if [ -z "$DT_SKIP" ]; then
  for i in 0 1; do
    K=/sys/kernel/mm/damon/admin/kdamonds/$i; C=$K/contexts/0; S=$C/schemes/0
    echo update_schemes_stats > $K/state; echo update_tuned_intervals > $K/state 2>/dev/null
    echo update_schemes_effective_quotas > $K/state 2>/dev/null
    echo "LAB DAMOS kdamond=$i action=$(cat $S/action) nr_tried=$(cat $S/stats/nr_tried) sz_tried=$(cat $S/stats/sz_tried) nr_applied=$(cat $S/stats/nr_applied) sz_applied=$(cat $S/stats/sz_applied) qt_exceeds=$(cat $S/stats/qt_exceeds) effective_bytes=$(cat $S/quotas/effective_bytes 2>/dev/null) goal_current=$(cat $S/quotas/goals/0/current_value 2>/dev/null) sample_us=$(cat $C/monitoring_attrs/intervals/sample_us) aggr_us=$(cat $C/monitoring_attrs/intervals/aggr_us)"
  done
  for i in 0 1; do echo off > /sys/kernel/mm/damon/admin/kdamonds/$i/state; done
fi
"#;

fn damos_script(p: &DamosParams) -> String {
    format!(
        r#"echo 0 > /proc/sys/kernel/numa_balancing
# The slow node's physical range, from its memory blocks.
BS=$(( 0x$(cat /sys/devices/system/memory/block_size_bytes) ))
lo=; hi=
for m in /sys/devices/system/node/node$SLOW/memory[0-9]*; do
  i=${{m##*memory}}; {{ [ -z "$lo" ] || [ $i -lt $lo ]; }} && lo=$i; {{ [ -z "$hi" ] || [ $i -gt $hi ]; }} && hi=$i
done
START=$(( lo * BS )); END=$(( (hi + 1) * BS ))
D=/sys/kernel/mm/damon/admin/kdamonds
echo 1 > $D/nr_kdamonds; K=$D/0
echo 1 > $K/contexts/nr_contexts; C=$K/contexts/0
echo paddr > $C/operations
echo {sample} > $C/monitoring_attrs/intervals/sample_us
echo {aggr} > $C/monitoring_attrs/intervals/aggr_us
echo 1000000 > $C/monitoring_attrs/intervals/update_us
echo {minr} > $C/monitoring_attrs/nr_regions/min
echo {maxr} > $C/monitoring_attrs/nr_regions/max
echo 1 > $C/targets/nr_targets
echo 1 > $C/targets/0/regions/nr_regions
echo $START > $C/targets/0/regions/0/start
echo $END > $C/targets/0/regions/0/end
echo 1 > $C/schemes/nr_schemes; S=$C/schemes/0
echo migrate_hot > $S/action
echo $FAST > $S/target_nid
BIG=18446744073709551615
echo 4096 > $S/access_pattern/sz/min; echo $BIG > $S/access_pattern/sz/max
echo {minacc} > $S/access_pattern/nr_accesses/min; echo 1000000 > $S/access_pattern/nr_accesses/max
echo 0 > $S/access_pattern/age/min; echo $BIG > $S/access_pattern/age/max
echo {quota} > $S/quotas/bytes; echo 0 > $S/quotas/ms; echo {reset} > $S/quotas/reset_interval_ms
# Prioritise by access frequency (the seed's "prioritised by nr_accesses").
echo 1000 > $S/quotas/weights/nr_accesses_permil 2>/dev/null
echo 0 > $S/quotas/weights/sz_permil 2>/dev/null; echo 0 > $S/quotas/weights/age_permil 2>/dev/null
echo on > $K/state
PID_promoter=$(cat $K/pid)
echo "LAB DAMOS_ON range=$START-$END kdamond=$PID_promoter"
"#,
        sample = p.sample_us,
        aggr = p.aggr_us,
        minr = p.min_nr_regions,
        maxr = p.max_nr_regions,
        minacc = p.min_nr_accesses,
        quota = p.quota_bytes,
        reset = p.quota_reset_ms,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damos_script_writes_the_seed_scheme() {
        let s = Mechanism::DamonMigrateHot(DamosParams::default()).start_script();
        assert!(s.contains("echo paddr > $C/operations"));
        assert!(s.contains("echo migrate_hot > $S/action"));
        assert!(s.contains("echo 134217728 > $S/quotas/bytes"));
        assert!(s.contains("echo 1 > $S/access_pattern/nr_accesses/min"));
        assert!(s.contains("PID_promoter=$(cat $K/pid)"));
        // The brace-escaped shell survived format!.
        assert!(s.contains("i=${m##*memory}"));
    }

    #[test]
    fn damon_tiering_writes_mem_tier_sh_two_kdamonds() {
        let m = Mechanism::DamonTiering(DamonTieringParams::default());
        let s = m.start_script();
        assert!(s.contains("echo 2 > $D/nr_kdamonds"));
        // kdamond 0: the fast node's cold pages to the slow node, 0.5 % free on the fast node,
        // young pages rejected; kdamond 1: the slow node's accessed pages to the fast node,
        // 99.7 % used on the fast node, young pages allowed.
        assert!(s.contains("lab_dt 0 $FAST migrate_cold $SLOW 0 0 node_mem_free_bp 50 N\n"));
        assert!(
            s.contains("lab_dt 1 $SLOW migrate_hot $FAST 1 4294967295 node_mem_used_bp 9970 Y\n")
        );
        assert!(s.contains("echo $7 > $G/0/target_metric"));
        assert!(s.contains("echo $FAST > $G/0/nid"));
        assert!(s.contains("echo young > $F/0/type; echo Y > $F/0/matching; echo $9 > $F/0/allow"));
        assert!(s.contains("F=$S/ops_filters; [ -d $F ] || F=$S/filters"));
        // The intervals goal: 4 % of accesses over 3 aggregations, sampling 5 ms .. 10 s.
        for want in [
            "echo 400 > $IG/access_bp",
            "echo 3 > $IG/aggrs",
            "echo 5000 > $IG/min_sample_us",
            "echo 10000000 > $IG/max_sample_us",
            "echo 1000000 > $S/apply_interval_us",
            "echo 209715200 > $S/quotas/bytes",
            "echo 1000 > $S/quotas/reset_interval_ms",
        ] {
            assert!(s.contains(want), "{want} missing from {s}");
        }
        // Both kdamonds are the promoter; a kernel without the files skips the run.
        assert!(s.contains("PID_promoter=$(cat $D/0/pid); PID_kdamond=$(cat $D/1/pid)"));
        assert!(s.contains("echo \"LAB SKIP DAMON self-tuning tiering needs"));
        assert!(s.contains("DT_SKIP=1; DURATION=0"));
        assert!(s.contains("lab_node_range $2\n"));
        assert!(s.contains("i=${m##*memory}"));
        let stop = m.stop_script();
        assert!(stop.starts_with("if [ -z \"$DT_SKIP\" ]; then"));
        assert!(stop.contains("echo update_schemes_stats > $K/state"));
        assert!(m.is_damon() && Mechanism::DamonMigrateHot(DamosParams::default()).is_damon());
        assert_eq!(m.min_kernel(), Some((6, 16)));
        assert_eq!(Mechanism::Numab2.min_kernel(), None);
        assert_eq!(m.name(), "damon-tiering");
    }

    #[test]
    fn n2_plus_turns_demotion_on_and_records_the_knobs() {
        let s = Mechanism::NumabTiering { mode: 3 }.start_script();
        assert!(s.starts_with("echo 1 > /sys/kernel/mm/numa/demotion_enabled\necho 3 > /proc/sys/kernel/numa_balancing\n"), "{s}");
        assert!(s.contains("/proc/sys/kernel/numa_balancing_* /sys/kernel/mm/numa/* /sys/kernel/debug/sched/numa_balancing/*"));
        assert!(Mechanism::NumabTiering { mode: 2 }
            .stop_script()
            .contains("echo 0 > /proc/sys/kernel/numa_balancing"));
        assert!(!Mechanism::NumabTiering { mode: 2 }.is_damon());
    }

    #[test]
    fn tierd_is_stopped_with_sigterm_and_its_status_exported() {
        let m = Mechanism::Tierd {
            config: String::new(),
        };
        assert!(m.start_script().contains("PID_promoter=$!"));
        let stop = m.stop_script();
        assert!(stop.contains("kill -TERM $PID_promoter"));
        assert!(stop.contains("tierd_export /tmp/status.json status.json"));
        // The row's trace: replayed in the guest (the verdict is a LAB line) and exported.
        assert!(stop.contains("/bin/tierd replay /tmp/trace"));
        assert!(stop.contains("tierd_export_tree /tmp/trace trace.tgz"));
    }
}
