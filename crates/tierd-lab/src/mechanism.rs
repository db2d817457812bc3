//! The promotion mechanisms a lab run can use, as guest shell: how each is started, what its
//! promoter thread is (for CPU accounting), and how it is stopped.
//!
//! The kernel's own mechanisms are set up exactly as an operator would: `numa_balancing=2`
//! (kernel/sched/fair.c, Documentation/admin-guide/sysctl/kernel.rst), and a DAMOS
//! `migrate_hot` scheme through DAMON's sysfs interface (Documentation/admin-guide/mm/damon/
//! usage.rst), over the slow node's physical range, as in the team's vmlab notes.

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

/// A promotion mechanism.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Mechanism {
    /// No promotion (`numa_balancing=0`).
    Baseline,
    /// The kernel's NUMA balancing in memory-tiering mode (`numa_balancing=2`).
    Numab2,
    /// A DAMOS `migrate_hot` scheme (paddr, slow node -> `target_nid`).
    DamonMigrateHot(DamosParams),
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
            Mechanism::DamonMigrateHot(_) => "damos",
            Mechanism::Tierd { .. } => "tierd",
        }
    }

    /// Shell that starts the mechanism. It may read `$SLOW` (the slow node), `$FAST` (the
    /// promotion target) and must set `PID_promoter` to the promoter's pid when it has one.
    #[must_use]
    pub fn start_script(&self) -> String {
        match self {
            Mechanism::Baseline => "echo 0 > /proc/sys/kernel/numa_balancing\n".into(),
            Mechanism::Numab2 => "echo 2 > /proc/sys/kernel/numa_balancing\n".into(),
            Mechanism::DamonMigrateHot(p) => damos_script(p),
            Mechanism::Tierd { .. } => "echo 0 > /proc/sys/kernel/numa_balancing\n\
                 /bin/tierd run --config /lab/tierd.toml > /tmp/tierd.out 2> /tmp/tierd.err &\n\
                 PID_promoter=$!\n\
                 # tierd's own DAMON kdamond works for it: count its CPU too.\n\
                 sleep 1\n\
                 K=/sys/kernel/mm/damon/admin/kdamonds/0\n\
                 [ -r $K/pid ] && PID_kdamond=$(cat $K/pid)\n"
                .into(),
        }
    }

    /// Shell that stops the mechanism (and prints what it left to say).
    #[must_use]
    pub fn stop_script(&self) -> String {
        match self {
            Mechanism::Baseline | Mechanism::Numab2 => {
                "echo 0 > /proc/sys/kernel/numa_balancing\n".into()
            }
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
                 grep ' intervals ' /tmp/tierd.out | sed 's/^/LAB TIERD_OUT /'\n\
                 tierd_export /tmp/status.json status.json\n"
                .into(),
        }
    }
}

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
    fn tierd_is_stopped_with_sigterm_and_its_status_exported() {
        let m = Mechanism::Tierd {
            config: String::new(),
        };
        assert!(m.start_script().contains("PID_promoter=$!"));
        let stop = m.stop_script();
        assert!(stop.contains("kill -TERM $PID_promoter"));
        assert!(stop.contains("tierd_export /tmp/status.json status.json"));
    }
}
