//! `tierd lab scale`: what tierd costs as the number of processes grows, against the best
//! DAMON configuration on the same load, and how fast its mover moves pages against the
//! kernel's own `migrate_pages(2)`.
//!
//! Each run boots the two-node guest of experiment A with `chase --procs N`: N processes
//! sharing the same 512 MiB (128 MiB hot) on the slow node, all pinned to CPU 0 (experiment
//! A's chase CPU), in tierd's cgroup. Once every process is ready, a memory eater fills node 0
//! until about 600 MiB are free (after the processes' own overhead, so every N sees the same
//! headroom, as in experiment A: under the kernel's free-space shortcut), then the mechanism
//! starts and runs a fixed time. Every second one `awk` reads all N `numa_maps` (the VMA
//! holding each process's hot start, its pages on the slow node; a thread stack merged into
//! the VMA sits on the fast node and is not counted), and the CPU ticks of the promoter and
//! kdamond. One fresh guest per (N, mechanism).
//!
//! The migration check (the first guest only, after the run, tierd stopped): a `hold` process
//! with 256 MiB bound to the slow node is moved to the fast node by tierd's mover
//! (`tierd-workload migrate --via mover`, tierd-linux's `Mover` as the daemon sets it up) and,
//! on a fresh buffer, by the kernel's `migrate_pages(2)` on the whole process (numactl's
//! `migratepages PID 1 0` when the guest has it, else the same call made directly), alternately,
//! a few times.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use tierd_vm::initramfs::DEFAULT_BUSYBOX;
use tierd_vm::{Guest, GuestSpec, Initramfs};
use tierd_workload::report::median;

use crate::experiment::tierd_damon_config;
use crate::mechanism::{DamonTieringParams, DamosParams, Mechanism};
use crate::{HostInfo, LabEnv, LabError};

/// USER_HZ: the unit of `/proc/PID/stat` CPU times (x86-64 Linux: 100).
const USER_HZ: f64 = 100.0;

/// What a scale lab does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ScaleParams {
    /// The process counts.
    pub procs: Vec<u32>,
    /// MiB of all processes together.
    pub total_mib: u64,
    /// Hot MiB of all processes together.
    pub hot_mib: u64,
    /// Seconds each mechanism runs.
    pub duration_s: u32,
    /// MiB node 0 keeps free under the eater.
    pub leave_free_mib: u64,
    /// MiB of the migration buffer (0: no migration check).
    pub migrate_mib: u64,
    /// Moves by each method.
    pub migrate_reps: u32,
}

impl ScaleParams {
    /// The full lab: 1, 10, 100 and 500 processes, 60 s each.
    #[must_use]
    pub fn full() -> ScaleParams {
        ScaleParams {
            procs: vec![1, 10, 100, 500],
            total_mib: 512,
            hot_mib: 128,
            duration_s: 60,
            leave_free_mib: 600,
            migrate_mib: 256,
            migrate_reps: 3,
        }
    }

    /// A short check: 1 and 10 processes, 30 s each.
    #[must_use]
    pub fn quick() -> ScaleParams {
        ScaleParams {
            procs: vec![1, 10],
            duration_s: 30,
            migrate_reps: 2,
            ..ScaleParams::full()
        }
    }
}

/// The DAMON row for a guest kernel `(major, minor)`: DAMON's self-tuning tiering ("DT") where
/// the kernel has it, else the DAMOS `migrate_hot` scheme of experiment A ("D3").
#[must_use]
pub fn damon_row(kernel: (u32, u32)) -> (String, Mechanism) {
    let dt = Mechanism::DamonTiering(DamonTieringParams::default());
    if dt.min_kernel().is_none_or(|min| kernel >= min) {
        ("DT".to_string(), dt)
    } else {
        (
            "D3".to_string(),
            Mechanism::DamonMigrateHot(DamosParams::default()),
        )
    }
}

/// tierd's row: experiment A's T1 (DAMON source, default engine, no demotion).
#[must_use]
pub fn tierd_row() -> (String, Mechanism) {
    (
        "T".to_string(),
        Mechanism::Tierd {
            config: tierd_damon_config("[engine.demotion]\nenabled = false\n"),
        },
    )
}

/// The guest script of one run with `procs` processes; `migrate` adds the migration check.
#[must_use]
pub fn script(p: &ScaleParams, procs: u32, mech: &Mechanism, migrate: bool) -> String {
    let migrate_sh = if migrate && p.migrate_mib > 0 {
        format!(
            r#"KVIA=syscall; [ -x /usr/bin/migratepages ] && KVIA=numactl && PATH=$PATH:/usr/bin
echo "LAB SCALE migrate kernel_via=$KVIA mib={mib}"
r=0
while [ $r -lt {reps} ]; do
  r=$((r+1))
  for via in mover $KVIA; do
    /bin/tierd-workload hold --mib {mib} --node $SLOW --secs 100000 > /tmp/h.log 2>&1 &
    PH=$!
    i=0; while ! grep -q ' ready' /tmp/h.log; do sleep 0.2; i=$((i+1)); [ $i -gt 900 ] && break; done
    A=$(sed -n 's/.* addr=\(0x[0-9a-f]*\) .*/\1/p' /tmp/h.log)
    /bin/tierd-workload migrate --pid $PH --addr $A --mib {mib} --from $SLOW --to $FAST --via $via 2>&1 | sed 's/^/LAB MIG /'
    kill $PH; wait $PH 2>/dev/null
  done
done
"#,
            mib = p.migrate_mib,
            reps = p.migrate_reps,
        )
    } else {
        String::new()
    };
    format!(
        r#"ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
echo never > /sys/kernel/mm/transparent_hugepage/enabled
echo 0 > /proc/sys/vm/compaction_proactiveness 2>/dev/null
echo 0 > /proc/sys/kernel/numa_balancing
FAST=0; SLOW=1; N={procs}
lab_t() {{ cut -d' ' -f1 /proc/uptime; }}
lab_discover() {{ :; }}
lab_cpu() {{
  lab_discover
  for w in promoter kdamond; do eval P=\$PID_$w; [ -n "$P" ] && [ -r /proc/$P/stat ] && echo "LAB CPU t=$1 who=$w $(sed 's/.*) //' /proc/$P/stat | cut -d' ' -f12,13)"; done
}}
# Every process's hot VMA (the one holding its hot start: largest start not above it), its
# pages on the slow node; addresses compared as zero-padded hex strings (busybox awk has no
# 64-bit hex parsing).
lab_hot() {{
  awk -v slow="N$SLOW=" '
    function pad(s) {{ while (length(s) < 16) s = "0" s; return s }}
    FNR == NR {{ hot[$1] = pad($2); pages[$1] = $3; next }}
    {{ split(FILENAME, f, "/"); p = f[3]; s = pad($1)
      if (s <= hot[p] && s >= best[p]) {{
        best[p] = s; n = 0
        for (i = 2; i <= NF; i++) if (index($i, slow) == 1) n = substr($i, length(slow) + 1) + 0
        onslow[p] = n; seen[p] = 1
      }} }}
    END {{ t = 0; sl = 0; c = 0
      for (p in pages) {{ t += pages[p]; if (p in seen) {{ c++; x = onslow[p]; if (x > pages[p]) x = pages[p]; sl += x }} else sl += pages[p] }}
      printf "hot=%d slow=%d fast=%d seen=%d\n", t, sl, t - sl, c }}
  ' /tmp/hot.txt $HOTMAPS
}}
mkdir -p /sys/fs/cgroup/work
echo "LAB SCALE guest pid_max=$(cat /proc/sys/kernel/pid_max) threads_max=$(cat /proc/sys/kernel/threads-max) memfree_kb=$(sed -n 's/^MemFree: *\([0-9]*\).*/\1/p' /proc/meminfo)"
cat > /tmp/w.sh <<'EOS'
echo $$ > /sys/fs/cgroup/work/cgroup.procs
exec /bin/tierd-workload chase --total-mib {total} --hot-mib {hot} --secs 100000 --node 1 --interval-ms 100000000 --tick-us 1000 --cpus 0 --procs {procs}
EOS
T0=$(lab_t)
sh /tmp/w.sh > /tmp/w.log 2>&1 &
PID_workload=$!
{lab_count}i=0; while [ "$(lab_count ' ready$' /tmp/w.log)" -lt $N ]; do sleep 0.5; i=$((i+1)); [ $i -gt 1800 ] && break; kill -0 $PID_workload 2>/dev/null || break; done
grep ' ready$' /tmp/w.log | sed -n 's/^chase pid=\([0-9]*\)\(.*\) addr=0x\([0-9a-f]*\) .* hot_pages=\([0-9]*\) .*/\1 \3 \4/p' > /tmp/hot.txt
HOTMAPS=$(while read p a n; do printf '/proc/%s/numa_maps ' $p; done < /tmp/hot.txt)
echo "LAB SCALE ready=$(wc -l < /tmp/hot.txt) of=$N start_s=$(awk -v a=$T0 -v b=$(lab_t) 'BEGIN {{ print b - a }}') node0_free_kb=$(sed -n 's/.*MemFree: *\([0-9]*\).*/\1/p' /sys/devices/system/node/node0/meminfo)"
grep -v '^chase' /tmp/w.log | head -n 20 | sed 's/^/LAB WERR /'
/bin/tierd-workload hold --leave-free-mib {leave} --node 0 --secs 100000 > /tmp/eater.log 2>&1 &
PID_eater=$!
i=0; while ! grep -q 'ready' /tmp/eater.log; do sleep 0.2; i=$((i+1)); [ $i -gt 900 ] && break; done
echo "LAB SCALE eater node0_free_kb=$(sed -n 's/.*MemFree: *\([0-9]*\).*/\1/p' /sys/devices/system/node/node0/meminfo)"
T=$(lab_t); echo "LAB HOT t=$T $(lab_hot)"
DURATION={duration}
{start}T=$(lab_t); T_START=$T; echo "LAB START $T"; lab_cpu $T
k=0
while [ $k -lt $DURATION ]; do
  sleep 1
  k=$(awk -v t0=$T_START '{{ printf "%d", $1 - t0 }}' /proc/uptime)
  T=$(lab_t); echo "LAB HOT t=$T $(lab_hot)"; lab_cpu $T
done
T=$(lab_t); lab_cpu $T; echo "LAB END $T"
[ -n "$PID_promoter" ] && [ -r /proc/$PID_promoter/status ] && echo "LAB RSS who=promoter $(grep -E '^(VmHWM|VmRSS):' /proc/$PID_promoter/status | tr -s ' \t' '  ' | tr '\n' ' ')"
{stop}kill -TERM $PID_workload 2>/dev/null; wait $PID_workload; echo "LAB SCALE workload_rc=$? done_lines=$(grep -c '^chase done' /tmp/w.log)"
grep -v '^chase' /tmp/w.log | head -n 20 | sed 's/^/LAB WERR /'
kill $PID_eater 2>/dev/null; wait $PID_eater 2>/dev/null
{migrate_sh}echo "LAB SCALE finished"
"#,
        procs = procs,
        lab_count = crate::run::LAB_COUNT,
        total = p.total_mib,
        hot = p.hot_mib,
        leave = p.leave_free_mib,
        duration = p.duration_s,
        start = mech.start_script(),
        stop = mech.stop_script(),
    )
}

/// One (N, mechanism) run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ScaleRow {
    /// Processes.
    pub procs: u32,
    /// Row id (`T`, `DT`, `D3`).
    pub id: String,
    /// The mechanism's name.
    pub mechanism: String,
    /// Processes that printed a ready line.
    pub ready: u32,
    /// Seconds until all processes were ready.
    pub start_s: Option<f64>,
    /// Hot pages of all processes.
    pub hot_pages: u64,
    /// Seconds from the mechanism's start to 90 % of the hot pages on the fast node.
    pub t90_s: Option<f64>,
    /// Hot pages on the fast node at the end, percent.
    pub hot_on_fast_pct: f64,
    /// The promoter's CPU seconds per second of wall time (tierd; DT's first kdamond; D3's
    /// kdamond).
    pub promoter_cpu_per_s: Option<f64>,
    /// The second DAMON thread's (tierd's kdamond; DT's second kdamond).
    pub kdamond_cpu_per_s: Option<f64>,
    /// Their sum: the mechanism's CPU per second.
    pub cpu_per_s: Option<f64>,
    /// The promoter's peak RSS (`VmHWM`) at the end, KiB (tierd only).
    pub peak_rss_kib: Option<u64>,
    /// Seconds the mechanism ran (first to last CPU sample).
    pub measured_s: f64,
    /// Guest wall time.
    pub wall_s: f64,
    /// Notes (DAMOS stats, tierd's exit, workload errors).
    pub notes: Vec<String>,
    /// Why the run failed.
    pub error: Option<String>,
}

/// One move of the migration check.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MigrateRun {
    /// `mover`, `migrate_pages` or `migratepages`.
    pub via: String,
    /// Pages of the buffer.
    pub pages: u64,
    /// Pages that reached the target.
    pub moved: u64,
    /// Seconds of the move.
    pub secs: f64,
    /// MiB/s of the pages moved.
    pub mib_s: f64,
}

/// The whole lab.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ScaleReport {
    /// Its parameters.
    pub params: Option<ScaleParams>,
    /// Host and guest kernel.
    pub host: Option<HostInfo>,
    /// One row per (N, mechanism).
    pub rows: Vec<ScaleRow>,
    /// The migration check's moves.
    pub migrate: Vec<MigrateRun>,
}

fn kv(rest: &str) -> impl Iterator<Item = (&str, &str)> {
    rest.split_whitespace().filter_map(|w| w.split_once('='))
}

fn get<T: std::str::FromStr>(rest: &str, key: &str) -> Option<T> {
    kv(rest).find(|(k, _)| *k == key)?.1.parse().ok()
}

impl ScaleReport {
    /// Median MiB/s of tierd's mover.
    #[must_use]
    pub fn mover_mib_s(&self) -> Option<f64> {
        median(
            self.migrate
                .iter()
                .filter(|m| m.via == "mover")
                .map(|m| m.mib_s)
                .collect(),
        )
    }

    /// Median MiB/s of the kernel's `migrate_pages(2)` (numactl's or direct).
    #[must_use]
    pub fn kernel_mib_s(&self) -> Option<f64> {
        median(
            self.migrate
                .iter()
                .filter(|m| m.via != "mover")
                .map(|m| m.mib_s)
                .collect(),
        )
    }

    /// The mover's share of the kernel's rate (goal: >= 0.8).
    #[must_use]
    pub fn mover_ratio(&self) -> Option<f64> {
        let (m, k) = (self.mover_mib_s()?, self.kernel_mib_s()?);
        (k > 0.0).then(|| m / k)
    }
}

/// One CPU reading of a thread: (seconds since the start, ticks).
type Ticks = (f64, u64);

/// Parses one run's console into its row (and the migration moves, if it made any).
#[must_use]
#[allow(clippy::cast_precision_loss)]
pub fn parse_console(
    console: &str,
    procs: u32,
    id: &str,
    mech: &str,
) -> (ScaleRow, Vec<MigrateRun>) {
    let mut row = ScaleRow {
        procs,
        id: id.to_string(),
        mechanism: mech.to_string(),
        ..ScaleRow::default()
    };
    let mut start = None;
    // (t, fast, hot) per sample.
    let mut hot: Vec<(f64, u64, u64)> = Vec::new();
    // who -> (first, last) CPU reading.
    let mut cpu: BTreeMap<String, (Ticks, Ticks)> = BTreeMap::new();
    let mut migrate = Vec::new();
    for raw in console.lines() {
        let l = raw.trim_end_matches('\r');
        let Some(rest) = l.strip_prefix("LAB ") else {
            continue;
        };
        let (kind, body) = rest.split_once(' ').unwrap_or((rest, ""));
        let t: Option<f64> = body
            .strip_prefix("t=")
            .and_then(|b| b.split_whitespace().next()?.parse().ok());
        match kind {
            "START" => start = body.trim().parse::<f64>().ok(),
            "HOT" => {
                if let (Some(t), Some(f), Some(h)) = (t, get(body, "fast"), get(body, "hot")) {
                    hot.push((t, f, h));
                }
            }
            "CPU" => {
                let who = get::<String>(body, "who");
                let ticks: u64 = body
                    .split_whitespace()
                    .filter_map(|w| w.parse::<u64>().ok())
                    .sum();
                if let (Some(t), Some(who)) = (t, who) {
                    cpu.entry(who)
                        .and_modify(|e| e.1 = (t, ticks))
                        .or_insert(((t, ticks), (t, ticks)));
                }
            }
            "RSS" => {
                // `VmHWM: 1234 kB VmRSS: ...`
                let w: Vec<&str> = body.split_whitespace().collect();
                row.peak_rss_kib = w
                    .iter()
                    .position(|x| *x == "VmHWM:")
                    .and_then(|i| w.get(i + 1)?.parse().ok());
            }
            "SCALE" => {
                if let Some(r) = get(body, "ready") {
                    row.ready = r;
                    row.start_s = get(body, "start_s");
                }
                if body.contains("workload_rc=")
                    || body.starts_with("guest")
                    || body.starts_with("migrate")
                {
                    row.notes.push(body.to_string());
                }
            }
            "MIG" => {
                if let Some(m) = body.strip_prefix("migrate ") {
                    migrate.push(MigrateRun {
                        via: get(m, "via").unwrap_or_default(),
                        pages: get(m, "pages").unwrap_or(0),
                        moved: get(m, "moved").unwrap_or(0),
                        secs: get(m, "secs").unwrap_or(0.0),
                        mib_s: get(m, "mib_s").unwrap_or(0.0),
                    });
                } else {
                    row.notes.push(format!("migrate: {body}"));
                }
            }
            "WERR" | "DAMOS" | "TIERD_RC" | "TIERD_ERR" | "DT_ERR" | "DT_ON" | "DAMOS_ON" => {
                row.notes.push(rest.to_string());
            }
            _ => {}
        }
    }
    let Some(start) = start else {
        row.error = Some("the run never started (no LAB START)".into());
        return (row, migrate);
    };
    if let Some(&(_, _, h)) = hot.last() {
        row.hot_pages = h;
    }
    row.t90_s = hot
        .iter()
        .filter(|(t, _, _)| *t >= start)
        .find(|(_, f, h)| *h > 0 && f * 10 >= h * 9)
        .map(|(t, _, _)| t - start);
    row.hot_on_fast_pct = hot
        .last()
        .map_or(0.0, |(_, f, h)| 100.0 * *f as f64 / (*h).max(1) as f64);
    let rate = |who: &str| {
        let ((t0, c0), (t1, c1)) = *cpu.get(who)?;
        (t1 > t0).then(|| c1.saturating_sub(c0) as f64 / USER_HZ / (t1 - t0))
    };
    row.promoter_cpu_per_s = rate("promoter");
    row.kdamond_cpu_per_s = rate("kdamond");
    row.cpu_per_s = match (row.promoter_cpu_per_s, row.kdamond_cpu_per_s) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    };
    row.measured_s = cpu
        .get("promoter")
        .map_or(0.0, |((t0, _), (t1, _))| t1 - t0);
    if row.ready < procs {
        row.error = Some(format!("only {} of {procs} processes got ready", row.ready));
    }
    (row, migrate)
}

/// Runs one (N, mechanism) guest.
///
/// # Errors
/// [`LabError::Guest`] when the guest cannot be built or run.
pub fn run_one(
    env: &LabEnv,
    p: &ScaleParams,
    procs: u32,
    id: &str,
    mech: &Mechanism,
    migrate: bool,
) -> Result<(ScaleRow, Vec<MigrateRun>, String), LabError> {
    let mut fs = Initramfs::standard(Path::new(DEFAULT_BUSYBOX), &script(p, procs, mech, migrate))?;
    fs.add_host_file(&env.bins.join("tierd"), "/bin/tierd", Some(0o755))?;
    fs.add_host_file(
        &env.bins.join("tierd-workload"),
        "/bin/tierd-workload",
        Some(0o755),
    )?;
    // numactl's migratepages for the migration check: from the Debian root filesystem the
    // real-server experiments use (same package set, so the same cached tree).
    let mut rootfs_note = None;
    if migrate && p.migrate_mib > 0 {
        let cache = tierd_vm::default_cache_dir();
        match tierd_vm::rootfs::Rootfs::fetch(&cache, tierd_vm::rootfs::SERVER_PACKAGES) {
            Ok(r) => fs.add_tree(&r.dir)?,
            Err(e) => {
                rootfs_note = Some(format!(
                    "no Debian root filesystem ({e}): migrate_pages(2) is called directly"
                ));
            }
        }
    }
    if let Mechanism::Tierd { config } = mech {
        fs.add_file(
            "/lab/tierd.toml",
            crate::run::tierd_config(config).into_bytes(),
            0o644,
        )?;
    }
    // Boot and setup about 30 s under TCG; starting 500 processes and filling node 0 a few
    // minutes more; a sampling step about 1.5 s; the migration check a minute.
    let timeout = Duration::from_secs(u64::from(p.duration_s) * 3 + 300 + u64::from(procs));
    let dir = env.work_dir.join(format!("scale-{procs}-{id}"));
    let out =
        Guest::new(env.kernel.clone(), dir.clone()).run(&GuestSpec::two_node(), &fs, "", timeout);
    std::fs::remove_dir_all(&dir).ok();
    let out = out?;
    let (mut row, mig) = parse_console(&out.console, procs, id, mech.name());
    row.wall_s = out.wall.as_secs_f64();
    row.notes.extend(rootfs_note);
    if row.error.is_some() {
        // What the guest said last explains a failed run.
        let lines: Vec<&str> = out.console.lines().collect();
        let from = lines.len().saturating_sub(30);
        row.notes
            .extend(lines[from..].iter().map(|l| format!("console: {l}")));
    }
    Ok((row, mig, out.console))
}

/// Runs the lab: for each N, tierd then the DAMON row; the migration check in the first
/// guest. `progress` sees each row as it completes.
///
/// # Errors
/// None of its own: a failed run is a row with `error` set.
pub fn run_scale(
    env: &LabEnv,
    p: &ScaleParams,
    progress: &mut dyn FnMut(&ScaleRow),
) -> Result<ScaleReport, LabError> {
    let host = HostInfo::measure(&env.kernel.version);
    let mechs = [tierd_row(), damon_row(env.kernel.major_minor())];
    let mut report = ScaleReport {
        params: Some(p.clone()),
        host: Some(host),
        ..ScaleReport::default()
    };
    let mut first = true;
    for &n in &p.procs {
        for (id, mech) in &mechs {
            let row = match run_one(env, p, n, id, mech, first) {
                Ok((row, mig, _console)) => {
                    report.migrate.extend(mig);
                    row
                }
                Err(e) => ScaleRow {
                    procs: n,
                    id: id.clone(),
                    mechanism: mech.name().to_string(),
                    error: Some(e.to_string()),
                    ..ScaleRow::default()
                },
            };
            first = false;
            progress(&row);
            report.rows.push(row);
        }
    }
    Ok(report)
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.prec$}"))
}

/// The table: one line per (N, mechanism), then the migration check.
#[must_use]
#[allow(clippy::cast_precision_loss)]
pub fn table(r: &ScaleReport) -> String {
    let mut s = format!(
        "{:>5} {:<4} {:<14} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9} {:>8}\n",
        "procs",
        "row",
        "mechanism",
        "cpu s/s",
        "promoter",
        "kdamond",
        "rss MiB",
        "t90 s",
        "on fast%",
        "start s"
    );
    for row in &r.rows {
        if let Some(e) = &row.error {
            s.push_str(&format!(
                "{:>5} {:<4} {:<14} FAILED: {e}\n",
                row.procs, row.id, row.mechanism
            ));
            continue;
        }
        s.push_str(&format!(
            "{:>5} {:<4} {:<14} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9.1} {:>8}\n",
            row.procs,
            row.id,
            row.mechanism,
            opt(row.cpu_per_s, 3),
            opt(row.promoter_cpu_per_s, 3),
            opt(row.kdamond_cpu_per_s, 3),
            opt(row.peak_rss_kib.map(|k| k as f64 / 1024.0), 1),
            opt(row.t90_s, 1),
            row.hot_on_fast_pct,
            opt(row.start_s, 0),
        ));
    }
    if !r.migrate.is_empty() {
        let kernel_via = r
            .migrate
            .iter()
            .find(|m| m.via != "mover")
            .map_or("migrate_pages", |m| m.via.as_str());
        s.push_str(&format!(
            "migration ({} moves): mover {} MiB/s, kernel ({kernel_via}) {} MiB/s, mover/kernel {}\n",
            r.migrate.len(),
            opt(r.mover_mib_s(), 0),
            opt(r.kernel_mib_s(), 0),
            r.mover_ratio()
                .map_or_else(|| "-".to_string(), |x| format!("{:.0} %", x * 100.0)),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONSOLE: &str = "\
LAB SCALE guest pid_max=32768 threads_max=31000 memfree_kb=3900000
LAB SCALE ready=10 of=10 start_s=12.5 node0_free_kb=1800000
LAB HOT t=99.0 hot=32768 slow=32768 fast=0 seen=10
LAB START 100.0
LAB CPU t=100.0 who=promoter 10 5
LAB CPU t=100.0 who=kdamond 0 100
LAB HOT t=101.0 hot=32768 slow=20000 fast=12768 seen=10
LAB HOT t=103.5 hot=32768 slow=3000 fast=29768 seen=10
LAB HOT t=104.5 hot=32768 slow=100 fast=32668 seen=10
LAB CPU t=120.0 who=promoter 30 25
LAB CPU t=120.0 who=kdamond 50 150
LAB END 120.0
LAB RSS who=promoter VmHWM: 5120 kB VmRSS: 4000 kB 
LAB TIERD_RC 0
LAB SCALE workload_rc=0 done_lines=10
LAB MIG migrate via=mover pid=9 pages=65536 on_from_before=65536 on_to_before=0 on_to_after=65536 moved=65536 refused=0 secs=1.0000 mib_s=256.0
LAB MIG migrate via=migrate_pages pid=9 pages=65536 on_from_before=65536 on_to_before=0 on_to_after=65536 moved=65536 refused=0 secs=0.8000 mib_s=320.0
LAB MIG migrate via=mover pid=9 pages=65536 on_from_before=65536 on_to_before=0 on_to_after=65536 moved=65536 refused=0 secs=1.0000 mib_s=300.0
LAB MIG migrate via=migrate_pages pid=9 pages=65536 on_from_before=65536 on_to_before=0 on_to_after=65536 moved=65536 refused=0 secs=0.8000 mib_s=340.0
";

    #[test]
    fn a_console_becomes_a_row() {
        let (row, mig) = parse_console(CONSOLE, 10, "T", "tierd");
        assert_eq!(row.error, None);
        assert_eq!((row.ready, row.hot_pages), (10, 32768));
        assert_eq!(row.start_s, Some(12.5));
        // 29768 / 32768 = 90.8 % at t = 103.5: 3.5 s after the start.
        assert!((row.t90_s.expect("t90") - 3.5).abs() < 1e-9);
        assert!((row.hot_on_fast_pct - 100.0 * 32668.0 / 32768.0).abs() < 1e-9);
        // (30 + 25 - 15) ticks over 20 s = 0.02 s/s; kdamond (200 - 100) / 20 s = 0.05.
        assert!((row.promoter_cpu_per_s.expect("cpu") - 0.02).abs() < 1e-9);
        assert!((row.kdamond_cpu_per_s.expect("cpu") - 0.05).abs() < 1e-9);
        assert!((row.cpu_per_s.expect("cpu") - 0.07).abs() < 1e-9);
        assert_eq!(row.peak_rss_kib, Some(5120));
        assert!((row.measured_s - 20.0).abs() < 1e-9);
        assert!(row.notes.iter().any(|n| n == "TIERD_RC 0"));
        assert_eq!(mig.len(), 4);
        assert_eq!(mig[1].via, "migrate_pages");
        let r = ScaleReport {
            rows: vec![row],
            migrate: mig,
            ..ScaleReport::default()
        };
        // Medians: mover (256, 300) -> 278; kernel (320, 340) -> 330.
        assert!((r.mover_mib_s().expect("mover") - 278.0).abs() < 1e-9);
        assert!((r.kernel_mib_s().expect("kernel") - 330.0).abs() < 1e-9);
        assert!((r.mover_ratio().expect("ratio") - 278.0 / 330.0).abs() < 1e-9);
        let t = table(&r);
        assert!(t.contains("   10 T    tierd"), "{t}");
        assert!(t.contains("0.070"), "{t}");
        assert!(t.contains("5.0"), "{t}");
        assert!(
            t.contains("mover 278 MiB/s, kernel (migrate_pages) 330 MiB/s, mover/kernel 84 %"),
            "{t}"
        );
        let json = serde_json::to_value(&r).expect("json");
        assert_eq!(json["rows"][0]["procs"], 10);
        assert_eq!(json["migrate"][3]["mib_s"], 340.0);
    }

    #[test]
    fn a_run_that_never_reached_90_percent_has_no_t90() {
        let c = "LAB SCALE ready=1 of=1 start_s=1\nLAB START 5\nLAB HOT t=6 hot=100 slow=50 fast=50 seen=1\n";
        let (row, _) = parse_console(c, 1, "DT", "damon-tiering");
        assert_eq!(row.t90_s, None);
        assert!((row.hot_on_fast_pct - 50.0).abs() < 1e-9);
        assert_eq!(row.cpu_per_s, None);
        assert!(table(&ScaleReport {
            rows: vec![row],
            ..ScaleReport::default()
        })
        .contains("    1 DT   damon-tiering          -"));
    }

    #[test]
    fn missing_processes_and_a_missing_start_are_errors() {
        let (row, _) = parse_console(
            "LAB SCALE ready=7 of=10 start_s=1\nLAB START 1\n",
            10,
            "T",
            "tierd",
        );
        assert_eq!(
            row.error.as_deref(),
            Some("only 7 of 10 processes got ready")
        );
        let (row, _) = parse_console("LAB SCALE ready=10 of=10\n", 10, "T", "tierd");
        assert!(row.error.is_some_and(|e| e.contains("no LAB START")));
    }

    /// The script's ready-line extraction, run with the host's `sed` on the single-process
    /// line and a multi-process one.
    #[test]
    fn the_hot_list_reads_both_ready_line_forms() {
        let s = script(&ScaleParams::quick(), 2, &tierd_row().1, false);
        let cmd = s
            .lines()
            .find(|l| l.starts_with("grep ' ready$' /tmp/w.log | sed"))
            .expect("the extraction line")
            .replace("/tmp/w.log", "\"$1\"")
            .replace("> /tmp/hot.txt", "");
        let dir = std::env::temp_dir().join(format!("scale-sed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let log = dir.join("w.log");
        std::fs::write(
            &log,
            "chase pid=81 addr=0x7f0c2e400000 cold_addr=0x7f0c26400000 node=1 total_pages=131072 hot_pages=32768 tick_us=1000 ticker_pid=813 threads=1 cpus=0 policy=default policy_nodes=- ready\n\
             chase t=1.000 hot_n0=1\n\
             chase pid=82 proc=1 cpu=0 addr=0x7fee0dc65000 cold_addr=0x7fee0db65000 node=1 total_pages=426 hot_pages=170 tick_us=1000 ticker_pid=0 threads=1 cpus=0 policy=default policy_nodes=- ready\n",
        )
        .expect("log");
        let out = std::process::Command::new("sh")
            .args(["-c", &cmd, "sh"])
            .arg(&log)
            .output()
            .expect("sh");
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "81 7f0c2e400000 32768\n82 7fee0dc65000 170\n"
        );
    }

    #[test]
    fn the_damon_row_follows_the_kernel() {
        assert_eq!(damon_row((6, 12)).0, "D3");
        assert_eq!(damon_row((6, 16)).0, "DT");
        assert_eq!(damon_row((7, 3)).0, "DT");
    }

    #[test]
    fn the_script_starts_n_processes_and_reads_all_their_maps() {
        let p = ScaleParams::full();
        let (_, m) = tierd_row();
        let s = script(&p, 500, &m, true);
        assert!(s.contains("--total-mib 512 --hot-mib 128"), "{s}");
        assert!(s.contains("--cpus 0 --procs 500"));
        assert!(s.contains("' /tmp/hot.txt $HOTMAPS"));
        assert!(s.contains("hold --leave-free-mib 600 --node 0"));
        assert!(s.contains("DURATION=60\n"));
        assert!(s.contains("--via $via"));
        assert!(s.contains("/bin/tierd run --config /lab/tierd.toml"));
        // No migration check unless asked.
        assert!(!script(&p, 1, &m, false).contains("--via"));
    }
}
