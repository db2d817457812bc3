//! One lab run: the guest script for (experiment, mechanism), the guest boot, and the parsed
//! measurements.
//!
//! Every second the guest prints, for each part of the workload, its `/proc/PID/numa_maps`
//! line (`LAB NUMA`), a subset of `/proc/vmstat` (`LAB VM`), and the CPU ticks of the
//! workload, the promoter and kdamond (`LAB CPU`, fields 14-15 of `/proc/PID/stat`). The
//! workload's own lines (throughput, and for the integrity workload the checksum failures)
//! come at the end (`LAB W`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tierd_linux::read::numa_maps::parse_numa_maps_line;
use tierd_vm::initramfs::DEFAULT_BUSYBOX;
use tierd_vm::{Guest, GuestSpec, Initramfs, Kernel};

use crate::experiment::{Experiment, Machine, Part};
use crate::mechanism::Mechanism;
use crate::LabError;

/// The vmstat counters sampled (mm/vmstat.c `vmstat_text` names, as the 6.12 guest prints
/// them). `pgmigrate_success` counts base pages, a 2 MiB folio as 512 (mm/migrate.c
/// `migrate_pages()` adds `stats.nr_succeeded`); `thp_migration_success` counts the THPs among
/// them; `thp_migration_split` the THPs split to be moved (a partially mapped THP on the
/// deferred-split list is split first: `migrate_pages_batch()`). `thp_split_pmd` counts PMD
/// mappings split (a partial `MADV_DONTNEED`, `munmap` or `mprotect` of a THP),
/// `thp_split_page` folios split, `thp_deferred_split_page` folios queued for a later split.
/// Compaction's migrations count in `pgmigrate_success` too (mm/compaction.c
/// `compact_zone()` calls `migrate_pages()`), so its counters are sampled to tell them apart.
pub const VMSTAT_KEYS: &[&str] = &[
    "pgpromote_success",
    "pgpromote_candidate",
    "pgmigrate_success",
    "pgmigrate_fail",
    "numa_hint_faults",
    "numa_hint_faults_local",
    "numa_pte_updates",
    "numa_pages_migrated",
    "pgdemote_kswapd",
    "pgdemote_direct",
    "thp_migration_success",
    "thp_migration_fail",
    "thp_migration_split",
    "thp_split_page",
    "thp_split_page_failed",
    "thp_deferred_split_page",
    "thp_split_pmd",
    "thp_fault_alloc",
    "thp_collapse_alloc",
    "nr_anon_transparent_hugepages",
    "compact_stall",
    "compact_isolated",
    "compact_migrate_scanned",
    "compact_daemon_wake",
    "compact_daemon_migrate_scanned",
];

/// The guest script of one run.
#[must_use]
pub fn script(exp: &Experiment, mech: &Mechanism) -> String {
    let vm_re = VMSTAT_KEYS.join("|");
    format!(
        r#"ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
echo {thp} > /sys/kernel/mm/transparent_hugepage/enabled
# No proactive compaction: kcompactd's migrations (mm/compaction.c proactive_compact_node())
# count in pgmigrate_success like a promoter's, and the rows compare the two. Compaction on
# demand (an allocation that needs it) stays; the compact_* counters show whether it ran.
echo 0 > /proc/sys/vm/compaction_proactiveness 2>/dev/null
echo 0 > /proc/sys/kernel/numa_balancing
THPD=/sys/kernel/mm/transparent_hugepage
lab_word() {{ sed -n 's/.*\[\(.*\)\].*/\1/p' $1 2>/dev/null; }}
echo "LAB THP enabled=$(lab_word $THPD/enabled) defrag=$(lab_word $THPD/defrag) khugepaged_defrag=$(cat $THPD/khugepaged/defrag 2>/dev/null) compaction_proactiveness=$(cat /proc/sys/vm/compaction_proactiveness 2>/dev/null)"
lab_huge() {{ echo "LAB THPMAP at=$1 anon_huge_kb=$(sed -n 's/^AnonHugePages: *\([0-9]*\) kB/\1/p' /proc/$PID_workload/smaps_rollup 2>/dev/null)"; }}
FAST={fast}; SLOW={slow}
WATCH="workload promoter kdamond"
lab_t() {{ cut -d' ' -f1 /proc/uptime; }}
lab_discover() {{ :; }}
lab_sample() {{
  lab_discover
  T=$(lab_t)
{numa_maps}  echo "LAB VM t=$T $(grep -E '^({vm_re}) ' /proc/vmstat | tr ' ' '=' | tr '\n' ' ')"
  for w in $WATCH; do eval P=\$PID_$w; [ -n "$P" ] && [ -r /proc/$P/stat ] && echo "LAB CPU t=$T who=$w $(sed 's/.*) //' /proc/$P/stat | cut -d' ' -f12,13)"; done
}}
mkdir -p /sys/fs/cgroup/work
{setup}
cat > /tmp/w.sh <<'EOS'
echo $$ > /sys/fs/cgroup/work/cgroup.procs
exec /bin/tierd-workload {workload}
EOS
sh /tmp/w.sh > /tmp/w.log 2>&1 &
PID_launch=$!
{lab_count}LAB_PROCS={procs}
{wait_ready}READY=$(grep ' ready' /tmp/w.log | head -n1)
echo "LAB READY $READY"
{ready_pid}{proc_setup}{app_prepare}lab_sample
lab_huge start
DURATION={duration}
T_START=$(lab_t)
echo "LAB START $T_START"
{start}k=0
{until_setup}while [ $k -lt $DURATION ]; do
  sleep 1
  k=$(awk -v t0=$T_START '{{ printf "%d", $1 - t0 }}' /proc/uptime)
{tick}  lab_sample
{until_check}done
{stop}lab_sample
lab_huge end
echo "LAB END $(lab_t)"
{app_finish}{stop_workload}
[ -n "$PID_eater" ] && kill $PID_eater 2>/dev/null
sed 's/^/LAB W /' /tmp/w.log
"#,
        thp = exp.thp.name(),
        fast = exp.fast.first().copied().unwrap_or(0),
        slow = exp.slow,
        setup = exp.setup,
        workload = exp.workload,
        start = mech.start_script(),
        duration = exp.duration_s,
        tick = exp.tick,
        stop = mech.stop_script(),
        until_setup = until_setup(exp),
        until_check = until_check(exp),
        procs = exp.procs.max(1),
        app_prepare = exp.app.as_ref().map_or("", |a| a.prepare.as_str()),
        app_finish = exp.app.as_ref().map_or("", |a| a.finish.as_str()),
        numa_maps = if let Some(app) = &exp.app {
            app.sample.as_str()
        } else if exp.procs > 1 {
            "  for e in $LAB_PIDS; do sed \"s/^/LAB NMP t=$T proc=${e%%:*} /\" /proc/${e#*:}/numa_maps; done\n"
        } else {
            "  sed \"s/^/LAB NM t=$T /\" /proc/$PID_workload/numa_maps\n"
        },
        proc_setup = if exp.procs > 1 { PROC_SETUP } else { "" },
        ready_pid = READY_PID,
        lab_count = LAB_COUNT,
        wait_ready = WAIT_READY,
        stop_workload = STOP_WORKLOAD,
    )
}

/// Shell function `lab_count PATTERN FILE`: the lines of `FILE` that match, 0 when `FILE` does
/// not exist yet. `$(grep -c ...)` alone is empty then, and `[ -lt N ]` is a syntax error
/// that ends a `while` at once: the wait for the workload's ready line below ended before it
/// began whenever the launched shell had not yet created `/tmp/w.log`, which a loaded host
/// makes likely, and the run then sampled a workload still filling its buffer, with no part
/// addresses (two CI failures of lab A on 2026-12-07: 0 % of the hot set measured on node 0
/// while tierd had moved all of it).
pub(crate) const LAB_COUNT: &str = r#"lab_count() { n=$(grep -c -- "$1" "$2" 2>/dev/null); echo "${n:-0}"; }
"#;

/// Shell that waits, up to 180 s, for `$LAB_PROCS` ready lines in `/tmp/w.log` (needs
/// [`LAB_COUNT`]); `i` counts its 0.2 s naps, for [`READY_PID`]'s message.
const WAIT_READY: &str = r#"i=0; while [ "$(lab_count ' ready' /tmp/w.log)" -lt "$LAB_PROCS" ]; do sleep 0.2; i=$((i+1)); [ $i -gt 900 ] && break; done
"#;

/// Shell that takes the workload's pid from its ready line (`READY`), or, when there is none
/// (the workload did not say it was ready within the wait), says so on the console and takes
/// the pid `sh /tmp/w.sh &` left in `PID_launch`: `w.sh` execs the workload, so that is the
/// workload (the spawner, for several processes). Without a pid the samples read
/// `/proc//numa_maps` and the end's `wait` waited for every background job, the eater among
/// them, until the guest's timeout: a run whose workload was slow to start under a busy host
/// failed as "guest did not finish", with the cause off the console.
const READY_PID: &str = r#"PID_workload=$(echo "$READY" | sed -n 's/^[a-z]* pid=\([0-9]*\) .*/\1/p')
if [ -z "$PID_workload" ]; then
  echo "LAB WARN no ready line from the workload after $((i / 5)) s (w.log: $(tail -n 2 /tmp/w.log | tr '\n' ' ')); its pid is the launcher's, $PID_launch"
  PID_workload=$PID_launch
fi
"#;

/// Shell that stops the workload at the end of the run. `wait` with no pid waits for every
/// background job (the eater runs until it is killed): only a known pid is waited for.
const STOP_WORKLOAD: &str = r#"[ -n "$PID_workload" ] && { kill $PID_workload 2>/dev/null; wait $PID_workload 2>/dev/null; }"#;

/// Shell for a workload of several processes: one `LAB PROC` line per ready line, with the
/// process's index, pid, CPU, and the node of that CPU (its home node: the
/// /sys/devices/system/cpu/cpuN/nodeM link), and `LAB_PIDS` (`index:pid ...`) for sampling.
const PROC_SETUP: &str = r#"grep ' ready' /tmp/w.log > /tmp/ready
LAB_PIDS=
while read l; do
  p=$(echo "$l" | sed -n 's/^[a-z]* pid=\([0-9]*\) .*/\1/p')
  pi=$(echo "$l" | sed -n 's/.* proc=\([0-9]*\) .*/\1/p')
  c=$(echo "$l" | sed -n 's/.* cpu=\([0-9]*\) .*/\1/p')
  n=$(ls -d /sys/devices/system/cpu/cpu$c/node[0-9]* 2>/dev/null | sed 's/.*node//')
  echo "LAB PROC proc=$pi pid=$p cpu=$c node=$n $l"
  LAB_PIDS="$LAB_PIDS $pi:$p"
done < /tmp/ready
"#;

/// Shell that finds the first part's start address and defines `lab_on_fast` (its pages on
/// the fast node now, from the numa_maps entry of the VMA containing it), when the
/// experiment ends early on a condition.
fn until_setup(exp: &Experiment) -> String {
    if let (Some(_), Some(app)) = (exp.until, &exp.app) {
        return app.until_setup.clone();
    }
    let (Some(_), Some(part)) = (exp.until, exp.parts.first()) else {
        return String::new();
    };
    format!(
        r#"UNTIL_ADDR=$(( $(echo "$READY" | sed -n 's/.* {key}=\(0x[0-9a-f]*\).*/\1/p') ))
lab_on_fast() {{
  best=0; n=0
  while read st rest; do
    s=$((0x$st)); [ $s -le $UNTIL_ADDR ] && [ $s -ge $best ] || continue
    best=$s; n=0
    for w in $rest; do case $w in N$FAST=*) n=${{w#N$FAST=}};; esac; done
  done < /proc/$PID_workload/numa_maps
  echo $n
}}
ok=0
"#,
        key = part.addr_key
    )
}

/// Shell at the end of each sampling step that leaves the loop once the experiment's
/// [`crate::experiment::Until`] holds.
fn until_check(exp: &Experiment) -> String {
    let (Some(u), Some(part)) = (exp.until, exp.parts.first()) else {
        return String::new();
    };
    format!(
        "  if [ $(( $(lab_on_fast) * 1000 )) -ge $(( {pages} * {permille} )) ]; then ok=$((ok+1)); else ok=0; fi
           if [ $ok -ge {consecutive} ] && [ $k -ge {min_s} ]; then echo \"LAB UNTIL met at k=$k\"; break; fi
",
        pages = part.pages,
        permille = u.hot_permille,
        consecutive = u.consecutive,
        min_s = u.min_s,
    )
}

/// The tierd configuration file for a run: the mechanism's, scoped to the workload's cgroup.
#[must_use]
pub fn tierd_config(config: &str) -> String {
    format!("[scope]\ncgroups = [\"/work\"]\n\n{config}")
}

/// One second's reading.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the mechanism started.
    pub t: f64,
    /// Base pages of each part on each node.
    pub parts: BTreeMap<String, BTreeMap<u32, u64>>,
    /// vmstat counters.
    pub vmstat: BTreeMap<String, u64>,
    /// CPU ticks (user + system, USER_HZ) of the workload, the promoter and kdamond.
    pub cpu_ticks: BTreeMap<String, u64>,
    /// A workload of several processes: each process's parts (by its index), whose sum is
    /// `parts`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub proc_parts: BTreeMap<u32, BTreeMap<String, BTreeMap<u32, u64>>>,
}

/// One process of a multi-process workload (its `LAB PROC` line).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcInfo {
    /// Its index (`proc=`).
    pub proc: u32,
    /// Its pid.
    pub pid: u32,
    /// The CPU it is pinned to.
    pub cpu: u32,
    /// The node of that CPU: where its pages belong.
    pub node: u32,
}

/// Everything measured in one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunData {
    /// The samples, the first taken just before the mechanism started.
    pub samples: Vec<Sample>,
    /// The workload's own lines.
    pub workload_lines: Vec<String>,
    /// Other `LAB` lines (DAMOS stats, tierd's exit), for the record.
    pub notes: Vec<String>,
    /// A tierd row's recorded trace (`trace.N` files, gzip'd tar), as the guest exported
    /// it; written under [`crate::LabEnv::traces`], not into the JSON.
    #[serde(skip)]
    pub trace_tgz: Option<Vec<u8>>,
    /// tierd's `/status` at the end, when tierd ran.
    pub tierd_status: Option<serde_json::Value>,
    /// Wall time of the guest.
    pub wall_s: f64,
    /// The processes of a multi-process workload (empty for one process).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub procs: Vec<ProcInfo>,
}

impl RunData {
    /// One of the engine's counters in tierd's final `/status` (`pgdemote_idle`, ...), when
    /// tierd ran and reported it.
    #[must_use]
    pub fn tierd_engine_stat(&self, key: &str) -> Option<u64> {
        self.tierd_status
            .as_ref()
            .and_then(|s| s.get("engine"))
            .and_then(|e| e.get(key))
            .and_then(serde_json::Value::as_u64)
    }
}

fn kv(rest: &str) -> impl Iterator<Item = (&str, &str)> {
    rest.split_whitespace().filter_map(|w| w.split_once('='))
}

/// The parts' start addresses from the workload's ready line (`addr=0x...` keys).
fn part_addrs(ready: &str, parts: &[Part]) -> Vec<(String, u64)> {
    parts
        .iter()
        .filter_map(|p| {
            let key = format!("{}=0x", p.addr_key);
            let v = ready
                .split_whitespace()
                .find_map(|w| w.strip_prefix(key.as_str()))?;
            Some((p.name.clone(), u64::from_str_radix(v, 16).ok()?))
        })
        .collect()
}

/// Parses a guest console into a run's data. Each part's placement is the `numa_maps` entry
/// of the VMA that contains the part's start (the largest start not above it): a buffer can
/// share its VMA with a neighbour of equal flags (a thread stack is MADV_NOHUGEPAGE too), so
/// an exact-start match is not enough; plus the entries of VMAs that start inside the part
/// (a buffer with holes, as the integrity workload's cuts make, is several VMAs).
///
/// # Errors
/// [`LabError::Parse`] when the run never started (no `LAB START`).
pub fn parse_console(console: &str, parts: &[Part]) -> Result<RunData, LabError> {
    let mut start = None;
    // The parts' start addresses, per process (`None`: the one process of the ready line).
    let mut addrs: BTreeMap<Option<u32>, Vec<(String, u64)>> = BTreeMap::new();
    // Per sample time and process: each VMA's start and its pages per node.
    type Vmas = Vec<(u64, BTreeMap<u32, u64>)>;
    let mut maps: BTreeMap<(String, Option<u32>), Vmas> = BTreeMap::new();
    let mut by_t: BTreeMap<String, Sample> = BTreeMap::new();
    let mut data = RunData::default();
    for raw in console.lines() {
        let l = raw.trim_end_matches('\r');
        let Some(rest) = l.strip_prefix("LAB ") else {
            continue;
        };
        if let Some(t) = rest.strip_prefix("START ") {
            start = t.trim().parse::<f64>().ok();
            continue;
        }
        if let Some(r) = rest.strip_prefix("READY ") {
            addrs.insert(None, part_addrs(r, parts));
            data.notes.push(rest.to_string());
            continue;
        }
        if let Some(r) = rest.strip_prefix("PROC ") {
            let get = |k: &str| {
                kv(r)
                    .find(|(a, _)| *a == k)
                    .and_then(|(_, v)| v.parse().ok())
            };
            if let (Some(proc), Some(pid), Some(cpu), Some(node)) =
                (get("proc"), get("pid"), get("cpu"), get("node"))
            {
                addrs.insert(Some(proc), part_addrs(r, parts));
                data.procs.push(ProcInfo {
                    proc,
                    pid,
                    cpu,
                    node,
                });
            }
            data.notes.push(rest.to_string());
            continue;
        }
        if let Some(w) = rest.strip_prefix("W ") {
            data.workload_lines.push(w.to_string());
            continue;
        }
        let (kind, body) = rest.split_once(' ').unwrap_or((rest, ""));
        let Some(tpart) = body.strip_prefix("t=") else {
            data.notes.push(rest.to_string());
            continue;
        };
        let (t, body) = tpart.split_once(' ').unwrap_or((tpart, ""));
        let s = by_t.entry(t.to_string()).or_default();
        s.t = t.parse().unwrap_or(0.0);
        match kind {
            "NM" | "NMP" => {
                let (proc, line) = match body.strip_prefix("proc=") {
                    Some(r) => {
                        let (p, l) = r.split_once(' ').unwrap_or((r, ""));
                        (p.parse::<u32>().ok(), l)
                    }
                    None => (None, body),
                };
                if let Ok(e) = parse_numa_maps_line(line.trim()) {
                    let nodes = e.nodes.iter().map(|(n, c)| (u32::from(n.0), *c)).collect();
                    maps.entry((t.to_string(), proc))
                        .or_default()
                        .push((e.start, nodes));
                }
            }
            "NUMA" => {
                let (part, line) = body.split_once(' ').unwrap_or((body, ""));
                let part = part.strip_prefix("part=").unwrap_or(part).to_string();
                let nodes = parse_numa_maps_line(line.trim())
                    .map(|e| e.nodes.iter().map(|(n, c)| (u32::from(n.0), *c)).collect())
                    .unwrap_or_default();
                s.parts.insert(part, nodes);
            }
            "VM" => {
                for (k, v) in kv(body) {
                    if let Ok(v) = v.parse() {
                        s.vmstat.insert(k.to_string(), v);
                    }
                }
            }
            "CPU" => {
                let mut who = None;
                let mut ticks = 0u64;
                for w in body.split_whitespace() {
                    if let Some(x) = w.strip_prefix("who=") {
                        who = Some(x.to_string());
                    } else if let Ok(v) = w.parse::<u64>() {
                        ticks += v;
                    }
                }
                if let Some(w) = who {
                    s.cpu_ticks.insert(w, ticks);
                }
            }
            _ => data.notes.push(rest.to_string()),
        }
    }
    let Some(start) = start else {
        return Err(LabError::Parse(
            "the run never started (no LAB START)".into(),
        ));
    };
    let page = 4096u64;
    // Each process holds 1/N of each part.
    let nprocs = u64::try_from(data.procs.len()).unwrap_or(1).max(1);
    for ((t, proc), mut vmas) in maps {
        vmas.sort_by_key(|(s, _)| *s);
        let s = by_t.entry(t).or_default();
        let Some(addrs) = addrs.get(&proc) else {
            continue;
        };
        for (name, a) in addrs {
            // The part's end, or the start of the VMA holding a later part's start if that
            // comes first (that VMA is the other part's).
            let owner = |b: u64| vmas.iter().rev().find(|(s, _)| *s <= b).map(|(s, _)| *s);
            let end = parts
                .iter()
                .find(|p| &p.name == name)
                .map_or(*a, |p| {
                    a.saturating_add((p.pages / nprocs).saturating_mul(page))
                })
                .min(
                    addrs
                        .iter()
                        .filter(|(_, b)| b > a)
                        .filter_map(|(_, b)| owner(*b))
                        .min()
                        .unwrap_or(u64::MAX),
                );
            let Some(first) = vmas.iter().rposition(|(s, _)| s <= a) else {
                continue;
            };
            let mut nodes = vmas[first].1.clone();
            for (_, more) in vmas[first + 1..].iter().take_while(|(s, _)| *s < end) {
                for (n, c) in more {
                    *nodes.entry(*n).or_default() += c;
                }
            }
            match proc {
                None => {
                    s.parts.insert(name.clone(), nodes);
                }
                Some(p) => {
                    let sum = s.parts.entry(name.clone()).or_default();
                    for (n, c) in &nodes {
                        *sum.entry(*n).or_default() += c;
                    }
                    s.proc_parts
                        .entry(p)
                        .or_default()
                        .insert(name.clone(), nodes);
                }
            }
        }
    }
    let mut samples: Vec<Sample> = by_t.into_values().collect();
    samples.sort_by(|a, b| a.t.total_cmp(&b.t));
    for s in &mut samples {
        s.t -= start;
    }
    data.samples = samples;
    Ok(data)
}

/// Boots the guest for one run and returns what it measured.
///
/// # Errors
/// [`LabError::Guest`] when the guest cannot be built or run; [`LabError::Parse`] when the
/// run produced no measurements.
pub fn run_one(
    kernel: &Kernel,
    bins: &Path,
    exp: &Experiment,
    mech: &Mechanism,
    work_dir: &Path,
) -> Result<(RunData, String), LabError> {
    let mut fs = Initramfs::standard(Path::new(DEFAULT_BUSYBOX), &script(exp, mech))?;
    fs.add_host_file(&bins.join("tierd"), "/bin/tierd", Some(0o755))?;
    fs.add_host_file(
        &bins.join("tierd-workload"),
        "/bin/tierd-workload",
        Some(0o755),
    )?;
    if let Mechanism::Tierd { config } = mech {
        fs.add_file("/lab/tierd.toml", tierd_config(config).into_bytes(), 0o644)?;
    }
    if exp.rootfs {
        let r = tierd_vm::rootfs::Rootfs::fetch(
            &tierd_vm::default_cache_dir(),
            tierd_vm::rootfs::SERVER_PACKAGES,
        )?;
        fs.add_tree(&r.dir)?;
    }
    let spec = match exp.machine {
        Machine::TwoNode => GuestSpec::two_node(),
        Machine::ThreeNode => GuestSpec::three_node(),
        Machine::TwoNodeFlat => GuestSpec {
            hmat: Vec::new(),
            ..GuestSpec::two_node()
        },
    };
    // The mechanism runs `duration_s` of guest time (the loop counts seconds since the
    // start, not samples: a sample costs 0.5-1.5 s more under TCG on a loaded host); boot,
    // setup and a real server's fill take up to a few minutes there.
    let timeout = Duration::from_secs(u64::from(exp.duration_s) * 2 + 150);
    let out = Guest::new(kernel.clone(), work_dir.to_path_buf()).run(&spec, &fs, "", timeout)?;
    // A guest that died mid-run (a kernel Oops panics it) measured nothing: an error row with
    // the kernel's last words, never the samples up to its death as a result.
    out.require_finished()?;
    let mut data = parse_console(&out.console, &exp.parts)?;
    data.wall_s = out.wall.as_secs_f64();
    if out.reboots > 0 {
        data.notes.push(format!(
            "GUEST booted {} times (the earlier boots died of the emulator's int3 Oops)",
            out.reboots + 1
        ));
    }
    if let Some(f) = out.file("status.json") {
        data.tierd_status = serde_json::from_slice(&f.data).ok();
    }
    if let Some(f) = out.file("trace.tgz") {
        data.trace_tgz = Some(f.data.clone());
    }
    Ok((data, out.console))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::experiment_a;

    const CONSOLE: &str = "\
[    3.1] boot noise
LAB READY chase pid=150 addr=0x7f0000200000 cold_addr=0x7f0000000000 node=1 total_pages=8 hot_pages=2 tick_us=0 ticker_pid=0 ready
LAB NM t=10.00 7effff000000 default anon=1 dirty=1 N0=1 kernelpagesize_kB=4
LAB NM t=10.00 7f0000200000 default anon=2 dirty=2 N1=2 kernelpagesize_kB=4
LAB NM t=10.00 7f0000000000 default anon=6 dirty=6 N1=6 kernelpagesize_kB=4
LAB VM t=10.00 pgpromote_success=0 pgmigrate_success=5 numa_hint_faults=0 
LAB CPU t=10.00 who=workload 30 4
LAB START 10.05
LAB DAMOS_ON range=1-2 kdamond=99
LAB NM t=11.10 7f0000100000 default anon=2 dirty=2 N0=1 N1=1 kernelpagesize_kB=4\r
LAB NM t=11.10 7f0000000000 default anon=6 dirty=6 N1=6 kernelpagesize_kB=4
LAB VM t=11.10 pgpromote_success=1 pgmigrate_success=6 numa_hint_faults=3 
LAB CPU t=11.10 who=workload 80 5
LAB CPU t=11.10 who=promoter 7 12
LAB W chase t=1.000 hot_n0=1 hot_n1=1 hot_other=0 cold_n0=0 cold_n1=6 cold_other=0 steps_per_s=100 ns_per_step=10.0
";

    #[test]
    fn console_becomes_samples_relative_to_the_start() {
        let exp = experiment_a(true);
        let d = parse_console(CONSOLE, &exp.parts).expect("parses");
        assert_eq!(d.samples.len(), 2);
        let (a, b) = (&d.samples[0], &d.samples[1]);
        assert!((a.t + 0.05).abs() < 1e-9 && (b.t - 1.05).abs() < 1e-9);
        assert_eq!(a.parts["hot"][&1], 2);
        assert_eq!(b.parts["hot"][&0], 1);
        assert_eq!(b.parts["cold"][&1], 6);
        assert_eq!(b.vmstat["pgmigrate_success"], 6);
        assert_eq!(b.cpu_ticks["workload"], 85);
        assert_eq!(b.cpu_ticks["promoter"], 19);
        assert_eq!(d.workload_lines.len(), 1);
        assert!(d.notes.iter().any(|n| n.starts_with("DAMOS_ON")));
    }

    #[test]
    fn a_part_with_holes_sums_the_vmas_that_start_inside_it() {
        let parts = vec![Part {
            name: "all".into(),
            addr_key: "addr".into(),
            pages: 1024,
            in_over: true,
        }];
        let console = "\
LAB READY integrity pid=7 addr=0x400000 node=1 mib=4 pages=1024 threads=1 ready
LAB START 1.0
LAB NM t=2.0 200000 default anon=9 N0=9 kernelpagesize_kB=4
LAB NM t=2.0 400000 default anon=511 N1=511 kernelpagesize_kB=4
LAB NM t=2.0 600000 default anon=510 N0=10 N1=500 kernelpagesize_kB=4
LAB NM t=2.0 800000 default anon=3 N0=3 kernelpagesize_kB=4
";
        let d = parse_console(console, &parts).expect("parses");
        // 0x400000 (511 pages, its last one unmapped) and 0x600000 (inside the part); not the
        // VMA below it nor the one at its end (0x400000 + 4 MiB).
        assert_eq!(d.samples[0].parts["all"], [(0, 10), (1, 1011)].into());
    }

    #[test]
    fn each_process_of_a_multi_process_workload_is_sampled_and_summed() {
        use crate::experiment::experiment_three_node_procs;
        let exp = experiment_three_node_procs();
        let s = script(&exp, &exp.runs[0].1);
        // Both ready lines are waited for, each process's home node found from its CPU.
        assert!(s.contains("LAB_PROCS=2\n"), "{s}");
        assert!(s.contains(WAIT_READY), "{s}");
        assert!(s.contains("ls -d /sys/devices/system/cpu/cpu$c/node[0-9]*"));
        assert!(s.contains("LAB NMP t=$T proc=${e%%:*} /\" /proc/${e#*:}/numa_maps"));
        assert!(s.contains("--procs 2 --cpus 0,1"), "{s}");
        // Each process has half of each part: 64 MiB hot (16384 pages) at its own address.
        let console = "\
LAB READY chase pid=10 proc=0 cpu=0 addr=0x100000000 cold_addr=0x200000000 node=2 ready
LAB PROC proc=0 pid=10 cpu=0 node=0 chase pid=10 proc=0 cpu=0 addr=0x100000000 cold_addr=0x200000000 node=2 ready
LAB PROC proc=1 pid=11 cpu=1 node=1 chase pid=11 proc=1 cpu=1 addr=0x100000000 cold_addr=0x200000000 node=2 ready
LAB START 5.0
LAB NMP t=6.0 proc=0 100000000 default anon=16384 N0=16000 N2=384 kernelpagesize_kB=4
LAB NMP t=6.0 proc=0 200000000 default anon=49152 N2=49152 kernelpagesize_kB=4
LAB NMP t=6.0 proc=1 100000000 default anon=16384 N0=100 N1=16000 N2=284 kernelpagesize_kB=4
LAB NMP t=6.0 proc=1 200000000 default anon=49152 N1=52 N2=49100 kernelpagesize_kB=4
";
        let d = parse_console(console, &exp.parts).expect("parses");
        assert_eq!(d.procs.len(), 2);
        assert_eq!(
            (d.procs[1].pid, d.procs[1].cpu, d.procs[1].node),
            (11, 1, 1)
        );
        let smp = &d.samples[0];
        assert_eq!(smp.parts["hot"], [(0, 16100), (1, 16000), (2, 668)].into());
        assert_eq!(smp.parts["cold"], [(1, 52), (2, 98252)].into());
        assert_eq!(
            smp.proc_parts[&1]["hot"],
            [(0, 100), (1, 16000), (2, 284)].into()
        );
        let row = crate::summary::summarize(&exp, "N2", "numab2", &d);
        // 100 of process 1's hot pages on node 0, of 32100 hot pages on the fast nodes.
        let w = row.wrong_node_pct.expect("per-process wrong node");
        assert!((w - 100.0 * 100.0 / 32100.0).abs() < 1e-9, "{w}");
        assert!((row.hot_on_fast_pct - 100.0 * 32100.0 / 32768.0).abs() < 1e-9);
    }

    /// Runs `script` in the host's `sh`, failing if it is not done within 30 s.
    fn run_sh(script: &str) -> String {
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("sh");
        let start = std::time::Instant::now();
        while child.try_wait().expect("wait").is_none() {
            if start.elapsed() > std::time::Duration::from_secs(30) {
                let _ = child.kill();
                panic!("the script still runs after 30 s:\n{script}");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let out = child.wait_with_output().expect("output");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The wait for the ready line holds until the line comes, even when the log it reads
    /// does not exist yet (the launched shell creates it), and gives up after its 180 s.
    #[test]
    fn the_wait_for_the_ready_line_holds_until_the_log_exists() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("w.log");
        let log = log.to_str().expect("utf-8 path");
        let wait = WAIT_READY.replace("/tmp/w.log", log);
        let out = run_sh(&format!(
            "{LAB_COUNT}(sleep 0.6; echo 'chase pid=7 addr=0x1 ready' > {log}) &\n\
             LAB_PROCS=1\n{wait}echo \"naps=$i lines=$(lab_count ' ready' {log})\"\n"
        ));
        let naps: u32 = out
            .trim()
            .strip_prefix("naps=")
            .and_then(|r| r.split_once(' '))
            .and_then(|(n, _)| n.parse().ok())
            .unwrap_or_else(|| panic!("{out}"));
        assert!(naps >= 2, "the wait ended before the log existed: {out}");
        assert!(out.trim().ends_with("lines=1"), "{out}");
        // A log that never comes: the wait gives up (here after 2 naps, not 900).
        let never = WAIT_READY
            .replace("/tmp/w.log", &format!("{log}.never"))
            .replace("-gt 900", "-gt 2");
        let out = run_sh(&format!(
            "{LAB_COUNT}LAB_PROCS=1\n{never}echo \"naps=$i\"\n"
        ));
        assert_eq!(out, "naps=3\n");
    }

    #[test]
    fn a_workload_that_never_said_ready_is_named_and_the_end_waits_for_it_alone() {
        // No ready line: the pid is the launcher's, and the console says why. The eater runs
        // until it is killed; the end must not wait for it.
        let out = run_sh(&format!(
            "sleep 1000 & PID_eater=$!\nsleep 1000 & PID_launch=$!\nREADY=; i=900\n{READY_PID}\
             echo \"pid=$PID_workload launch=$PID_launch\"\n{STOP_WORKLOAD}\n\
             kill $PID_eater; echo done\n"
        ));
        assert!(
            out.contains("LAB WARN no ready line from the workload after 180 s"),
            "{out}"
        );
        let pids = out.lines().find(|l| l.starts_with("pid=")).expect("pids");
        let (w, l) = pids.split_once(' ').expect("two");
        assert_eq!(
            w.trim_start_matches("pid="),
            l.trim_start_matches("launch=")
        );
        assert!(out.ends_with("done\n"), "{out}");
        // A ready line gives its own pid, silently.
        let out = run_sh(&format!(
            "PID_launch=1; READY='chase pid=4242 addr=0x1 ready'; i=3\n{READY_PID}echo \"pid=$PID_workload\"\n"
        ));
        assert_eq!(out, "pid=4242\n");
        // And with no pid at all the end still returns.
        let out = run_sh(&format!(
            "sleep 1000 & PID_eater=$!\nPID_workload=\n{STOP_WORKLOAD}\nkill $PID_eater; echo done\n"
        ));
        assert_eq!(out, "done\n");
    }

    #[test]
    fn a_run_without_a_start_is_an_error() {
        assert!(parse_console("LAB READY x\n", &[]).is_err());
    }

    #[test]
    fn script_samples_every_part_and_runs_the_mechanism() {
        let exp = experiment_a(true);
        let s = script(&exp, &exp.runs[0].1);
        assert!(s.contains("sed \"s/^/LAB NM t=$T /\" /proc/$PID_workload/numa_maps"));
        assert!(s.contains("/bin/tierd run --config /lab/tierd.toml"));
        assert!(s.contains("DURATION=120\n"), "{s}");
        assert!(s.contains("while [ $k -lt $DURATION ]"));
        // The loop counts the guest's seconds since the start, not its samples (a sample
        // takes more than a second under TCG on a busy host).
        assert!(s.contains("k=$(awk -v t0=$T_START '{ printf \"%d\", $1 - t0 }' /proc/uptime)"));
        // The short run ends once 95 % of the 32768 hot pages sat on node 0 for 3 samples.
        assert!(s.contains("$(( 32768 * 950 ))"), "{s}");
        assert!(s.contains("[ $ok -ge 3 ] && [ $k -ge 20 ]"));
        assert!(s.contains("sed -n 's/.* addr=\\(0x[0-9a-f]*\\).*/\\1/p'"));
        let full = experiment_a(false);
        assert!(!script(&full, &full.runs[0].1).contains("lab_on_fast"));
        assert!(s.contains("chase --total-mib 512 --hot-mib 128"));
        // THP never by default, proactive compaction off, what the guest had recorded.
        assert!(s.contains("echo never > /sys/kernel/mm/transparent_hugepage/enabled"));
        assert!(s.contains("echo 0 > /proc/sys/vm/compaction_proactiveness"));
        assert!(s.contains("echo \"LAB THP enabled=$(lab_word $THPD/enabled) defrag="));
        assert!(
            s.contains(
                "lab_huge start\nDURATION=120\nT_START=$(lab_t)\necho \"LAB START $T_START\""
            ),
            "{s}"
        );
        assert!(!s.contains("--thp follow"));
    }

    #[test]
    fn thp_always_reaches_the_guest_and_the_workload() {
        use crate::experiment::{experiment_integrity, Thp, SPLIT_EVERY_MS};
        let a = experiment_a(true).with_thp(Thp::Always);
        let s = script(&a, &a.runs[0].1);
        assert!(s.contains("echo always > /sys/kernel/mm/transparent_hugepage/enabled"));
        // The chase must not opt out of THP under `always`.
        assert!(s.contains("--tick-us 1000 --thp follow\n"), "{s}");
        let i = experiment_integrity(true).with_thp(Thp::Always);
        assert!(script(&i, &i.runs[0].1).contains(&format!(
            "--interval-ms 2000 --thp follow --split-every-ms {SPLIT_EVERY_MS}\n"
        )));
        // Never leaves the workload as it was.
        let n = experiment_integrity(true).with_thp(Thp::Never);
        assert_eq!(n.workload, experiment_integrity(true).workload);
        assert_eq!(n.thp, Thp::Never);
    }

    #[test]
    fn the_thp_lines_of_the_console_are_kept_as_notes() {
        let exp = experiment_a(true);
        let console = format!(
            "LAB THP enabled=always defrag=madvise khugepaged_defrag=1 compaction_proactiveness=0\n\
             LAB THPMAP at=start anon_huge_kb=522240\n{CONSOLE}LAB THPMAP at=end anon_huge_kb=262144\n"
        );
        let d = parse_console(&console, &exp.parts).expect("parses");
        assert!(d
            .notes
            .iter()
            .any(|n| n.starts_with("THP enabled=always defrag=madvise")));
        assert!(d
            .notes
            .iter()
            .any(|n| n == "THPMAP at=end anon_huge_kb=262144"));
        assert_eq!(d.samples.len(), 2, "no sample from the THP lines");
    }
}
