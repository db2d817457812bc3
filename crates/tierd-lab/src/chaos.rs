//! `tierd lab chaos`: tierd in a hostile guest for minutes, and what it survived.
//!
//! One guest (the two-node HMAT machine) runs, beside tierd and the integrity workload that
//! checksums all its memory while tierd promotes and demotes it (a cycling memory eater on
//! node 0 forces both directions), the chaos actors of `tierd-workload`:
//! - a spawner that starts and ends processes continuously, alternately in and out of tierd's
//!   cgroup, with `pid_max` lowered and thread ids burnt so that pids wrap within seconds,
//!   and ASLR off so that a reused pid's memory sits at the addresses of the process that had
//!   the pid before (a pid reused inside tierd's refresh period then maps to live pages);
//! - `hostile-names`: files with a vertical tab, a no-break space, a newline, '=', spaces, a
//!   tab, a backslash, bytes that are not UTF-8 and a 255-byte name, mapped and touched;
//! - `hog`: hot memory on the slow node, outside tierd's scope, placed without a binding
//!   policy (only scope protects it);
//! - `bound`: a hot VMA bound to the slow node (`MPOL_BIND`) inside tierd's scope;
//! - THP `always`;
//! - `supervise`: tierd SIGKILLed and restarted every `kill_every_s`, any other exit counted,
//!   resume timed from each kill (the new tierd's `/status` shows a promoter pass and a
//!   running source), peak RSS (`VmHWM`) and descriptors sampled;
//! - against the metrics port: 1000 idle connections, an endless header, a reader of one
//!   byte a second, and a prober that asks `/metrics` every 150 ms;
//! - `hotplug`: the slow node's memory blocks offlined and onlined in turn, where the kernel
//!   allows it.
//!
//! Every actor prints one `done` line; [`parse_console`] turns them into a [`ChaosReport`],
//! and [`ChaosReport::failures`] checks the acceptance bounds of issue 12.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use tierd_vm::initramfs::DEFAULT_BUSYBOX;
use tierd_vm::{Guest, GuestSpec, Initramfs};

use crate::{HostInfo, LabEnv, LabError};

/// What a chaos run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ChaosParams {
    /// Seconds the actors run.
    pub duration_s: u32,
    /// tierd is SIGKILLed this long after each start.
    pub kill_every_s: u32,
    /// `/proc/sys/kernel/pid_max` during the run.
    pub pid_max: u32,
    /// Idle connections held against the metrics port.
    pub idle_conns: u32,
    /// A restarted tierd must resume within this.
    pub resume_timeout_s: u32,
}

impl ChaosParams {
    /// The full run: `duration_s` seconds, a SIGKILL every 25 s.
    #[must_use]
    pub fn full(duration_s: u32) -> ChaosParams {
        ChaosParams {
            duration_s,
            kill_every_s: 25,
            // 512: after the first wrap the kernel hands out pids 300..511 (kernel/pid.c
            // `alloc_pid()` wraps to RESERVED_PIDS; the sysctl's floor `pid_max_min` is
            // RESERVED_PIDS + 1 = 301), so the spawner's processes and threads (a few dozen
            // a second under TCG) wrap it every few seconds; the guest's live tasks (about
            // 150, most kernel threads below 300) leave it room. 1024 wrapped only every
            // 20-25 s here.
            pid_max: 512,
            idle_conns: 1000,
            resume_timeout_s: 30,
        }
    }

    /// The CI run: a minute, three SIGKILLs.
    #[must_use]
    pub fn quick() -> ChaosParams {
        ChaosParams {
            kill_every_s: 15,
            ..ChaosParams::full(60)
        }
    }
}

/// tierd's configuration: the integrity experiment's (every page DAMON sees is hot,
/// demotion between 25 % and 35 % free on node 0), scoped to the `/work` cgroup.
#[must_use]
pub fn tierd_config() -> String {
    crate::run::tierd_config(&crate::experiment::tierd_integrity_config())
}

/// The guest script.
#[must_use]
pub fn script(p: &ChaosParams) -> String {
    format!(
        r#"ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
echo always > /sys/kernel/mm/transparent_hugepage/enabled
echo 0 > /proc/sys/kernel/numa_balancing
# ASLR off: every chaos child has the same layout, so a reused pid maps the same addresses.
echo 0 > /proc/sys/kernel/randomize_va_space
ulimit -n 4096
C=/tmp/chaos; W=/bin/tierd-workload; D={d}
IN=/sys/fs/cgroup/work; OUT=/sys/fs/cgroup/outside
mkdir -p $C $IN $OUT
lab_t() {{ cut -d' ' -f1 /proc/uptime; }}
ready() {{ i=0; while ! grep -q ' ready' $1 2>/dev/null; do sleep 0.2; i=$((i+1)); [ $i -gt 900 ] && {{ echo "LAB CHAOS harness not-ready $1"; break; }}; done; }}
echo "LAB CHAOS harness thp=$(cat /sys/kernel/mm/transparent_hugepage/enabled | tr ' ' '_') block_size=$(cat /sys/devices/system/memory/block_size_bytes 2>/dev/null) node1_blocks=$(ls -d /sys/devices/system/node/node1/memory[0-9]* 2>/dev/null | wc -l)"
sh -c "echo \$\$ > $IN/cgroup.procs; exec $W integrity --mib 64 --node 1 --secs 100000 --interval-ms 5000" > $C/integrity.log 2>&1 &
PID_integrity=$!
ready $C/integrity.log
$W hog --cgroup $OUT --mib 64 --node 1 --secs $D > $C/hog.log 2>&1 &
A="$!"
$W bound --cgroup $IN --mib 32 --node 1 --secs $D > $C/bound.log 2>&1 &
A="$A $!"
$W hostile-names --cgroup $IN --dir $C/files --kib 512 --node 1 --secs $D > $C/hostile.log 2>&1 &
A="$A $!"
ready $C/hog.log; ready $C/bound.log; ready $C/hostile.log
PID_bound=$(sed -n 's/^bound pid=\([0-9]*\) .*/\1/p' $C/bound.log)
echo "LAB CHAOS harness vmstat0 $(grep -E '^(pgmigrate_success|thp_migration_success) ' /proc/vmstat | tr ' ' '=' | tr '\n' ' ')"
echo {pid_max} > /proc/sys/kernel/pid_max || echo "LAB CHAOS harness pid_max refused"
echo "LAB CHAOS harness pid_max=$(cat /proc/sys/kernel/pid_max)"
$W supervise --config /lab/tierd.toml --kill-every-s {kill} --secs $D --state-file $C/state --log-dir $C/tierd --resume-timeout-s {resume} > $C/supervisor.log 2>&1 &
A="$A $!"
i=0; while [ "$(cat $C/state 2>/dev/null)" != up ]; do sleep 0.2; i=$((i+1)); [ $i -gt 300 ] && break; done
echo "LAB CHAOS harness tierd-up t=$(lab_t) state=$(cat $C/state 2>/dev/null)"
$W hotplug --node 1 --secs $D --protect-cgroup $OUT --protect-pid $PID_bound > $C/hotplug.log 2>&1 &
A="$A $!"
$W cycle-eater --mib 1400 --node 0 --secs $D > $C/eater.log 2>&1 &
A="$A $!"
$W chaos-spawner --in-cgroup $IN --out-cgroup $OUT --node 1 --secs $D > $C/spawner.log 2>&1 &
A="$A $!"
$W http-abuse --mode idle --conns {conns} --secs $D > $C/abuse-idle.log 2>&1 &
A="$A $!"
$W http-abuse --mode endless-header --secs $D > $C/abuse-header.log 2>&1 &
A="$A $!"
$W http-abuse --mode slow-read --secs $D > $C/abuse-slow.log 2>&1 &
A="$A $!"
$W prober --state-file $C/state --secs $D > $C/prober.log 2>&1 &
A="$A $!"
echo "LAB CHAOS harness started t=$(lab_t) tasks=$(cut -d' ' -f4 /proc/loadavg)"
for p in $A; do wait $p; done
kill -TERM $PID_integrity; wait $PID_integrity
echo "LAB CHAOS harness vmstat1 $(grep -E '^(pgmigrate_success|thp_migration_success) ' /proc/vmstat | tr ' ' '=' | tr '\n' ' ')"
# Accept-queue overflows and dropped SYNs (TcpExt ListenOverflows / ListenDrops), for a
# failed probe's reader: a connect that timed out is a SYN the kernel dropped.
echo "LAB CHAOS harness netstat $(awk '/^TcpExt:/ {{ if (!h) {{ split($0, k); h=1 }} else {{ for (i=2; i<=NF; i++) if (k[i] ~ /^Listen/) printf "%s=%s ", k[i], $i }} }}' /proc/net/netstat)"
echo "LAB CHAOS harness end t=$(lab_t) tasks=$(cut -d' ' -f4 /proc/loadavg)"
for f in $C/*.log; do n=$(basename $f .log); sed "s/^/LAB CHAOS $n /" $f; done
"#,
        d = p.duration_s,
        pid_max = p.pid_max,
        kill = p.kill_every_s,
        resume = p.resume_timeout_s,
        conns = p.idle_conns,
    )
}

/// What a chaos run showed. `None`: the actor that reports the figure printed no `done` line
/// (it crashed, or the guest did not get that far).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ChaosReport {
    /// The parameters.
    pub params: Option<ChaosParams>,
    /// The host and guest kernel.
    pub host: Option<HostInfo>,
    /// `pid_max` in force.
    pub pid_max: Option<u64>,
    /// tierd exits the supervisor did not cause.
    pub unasked_exits: Option<u64>,
    /// tierd starts.
    pub starts: Option<u64>,
    /// SIGKILLs sent.
    pub kills: Option<u64>,
    /// Restarts after a SIGKILL that resumed tiering within the timeout.
    pub resumed: Option<u64>,
    /// Restarts after a SIGKILL that did not.
    pub not_resumed: Option<u64>,
    /// The longest resume, seconds from the SIGKILL.
    pub resume_max_s: Option<f64>,
    /// The first tierd's time to its first pass, seconds.
    pub first_pass_s: Option<f64>,
    /// tierd's exit status on the final SIGTERM (`0` expected).
    pub stop_rc: Option<String>,
    /// `/metrics` probes counted (tierd up).
    pub probes: Option<u64>,
    /// Of those, complete 200 answers within 1 s.
    pub probes_ok: Option<u64>,
    /// Probes while the supervisor had tierd down (killed, new one not listening yet).
    pub probes_excluded: Option<u64>,
    /// The slowest good answer, ms.
    pub probe_max_ok_ms: Option<f64>,
    /// Pages of the out-of-scope hog seen off the slow node (maximum over the run), not
    /// counting pages whose block was hot-unplugged.
    pub hog_moved: Option<u64>,
    /// The hog's pages.
    pub hog_pages: Option<u64>,
    /// Pages of out-of-scope children moved (sum over children).
    pub children_out_moved: Option<u64>,
    /// Pages of the bound VMA seen off the slow node (maximum over the run).
    pub bound_moved: Option<u64>,
    /// The bound VMA's pages.
    pub bound_pages: Option<u64>,
    /// The integrity workload's checksum failures.
    pub checksum_failures: Option<u64>,
    /// tierd's peak `VmHWM` over all its processes, KiB.
    pub peak_rss_kib: Option<u64>,
    /// tierd's peak open descriptors.
    pub peak_fds: Option<u64>,
    /// tierd's peak threads.
    pub peak_threads: Option<u64>,
    /// Memory blocks offlined.
    pub blocks_offlined: Option<u64>,
    /// Memory blocks onlined again.
    pub blocks_onlined: Option<u64>,
    /// Offline attempts refused, with the kernel's reasons.
    pub offline_failed: Option<u64>,
    /// The hotplug actor's note or error reasons.
    pub hotplug_note: Option<String>,
    /// Pid wraps the spawner saw.
    pub pid_wraps: Option<u64>,
    /// Pids reused by the spawner's processes and threads.
    pub pid_reuses: Option<u64>,
    /// Children started in / out of scope.
    pub children: Option<(u64, u64)>,
    /// Most idle connections held at once.
    pub idle_held_max: Option<u64>,
    /// Files with hostile names mapped.
    pub hostile_files: Option<u64>,
    /// Pages tierd promoted and demoted, summed over its processes (each one's last
    /// `/status`; a SIGKILL loses its last seconds).
    pub tierd_promoted: Option<u64>,
    /// As above, demoted.
    pub tierd_demoted: Option<u64>,
    /// The most pages of the integrity workload's 64 MiB on the fast node at once (its own
    /// `move_pages` query every 5 s).
    pub integrity_fast_max: Option<u64>,
    /// Growth of the kernel's `pgmigrate_success` (tierd's moves, hotplug, compaction).
    pub migrated_pages: Option<u64>,
    /// The lines that explain a failure: tierd exits and their stderr, resumes, failed probes,
    /// moved out-of-scope pages, actors that never got ready.
    pub events: Vec<String>,
    /// The actors' `done` lines as printed.
    pub done_lines: Vec<String>,
    /// Wall time of the guest, seconds.
    pub wall_s: f64,
}

fn field<T: std::str::FromStr>(line: &str, key: &str) -> Option<T> {
    tierd_workload::chaos::kv(line)
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.parse().ok())
}

/// The figures from a chaos run's console.
#[must_use]
pub fn parse_console(console: &str) -> ChaosReport {
    let mut r = ChaosReport::default();
    let mut vm0: Option<u64> = None;
    for raw in console.lines() {
        let l = raw.trim_end_matches('\r');
        let Some(rest) = l.strip_prefix("LAB CHAOS ") else {
            continue;
        };
        // `<log name> <the actor's line>`; the harness's own lines have no log name.
        let (name, line) = rest.split_once(' ').unwrap_or(("", rest));
        let line = if name == "harness" { rest } else { line };
        let word = |i: usize| line.split_whitespace().nth(i).unwrap_or("");
        if line.contains(" done ") || line.ends_with(" done") {
            r.done_lines.push(line.to_string());
        }
        match (word(0), word(1)) {
            ("supervisor", "done") => {
                r.starts = field(line, "starts");
                r.kills = field(line, "kills");
                r.unasked_exits = field(line, "unasked_exits");
                r.resumed = field(line, "resumed");
                r.not_resumed = field(line, "not_resumed");
                r.resume_max_s = field(line, "resume_max_s");
                r.first_pass_s = field(line, "first_pass_s");
                r.peak_rss_kib = field(line, "peak_rss_kib");
                r.peak_fds = field(line, "peak_fds");
                r.peak_threads = field(line, "peak_threads");
                r.stop_rc = field(line, "stop_rc");
                r.tierd_promoted = field(line, "promoted");
                r.tierd_demoted = field(line, "demoted");
            }
            ("supervisor", _) | ("prober", "fail") | ("spawner", "out-of-scope") => {
                r.events.push(line.to_string());
            }
            ("hog" | "bound", "done") => {
                let (moved, pages) = (field(line, "moved_max"), field(line, "pages"));
                if word(0) == "hog" {
                    (r.hog_moved, r.hog_pages) = (moved, pages);
                } else {
                    (r.bound_moved, r.bound_pages) = (moved, pages);
                }
            }
            ("hog" | "bound", w) if w.starts_with("t=") => r.events.push(line.to_string()),
            ("prober", "done") => {
                r.probes = field(line, "probes");
                r.probes_ok = field(line, "ok");
                r.probes_excluded = field(line, "excluded_down");
                r.probe_max_ok_ms = field(line, "max_ok_ms");
            }
            ("spawner", "done") => {
                r.children_out_moved = field(line, "moved_out");
                r.pid_wraps = field(line, "pid_wraps");
                r.pid_reuses = field(line, "pid_reuses");
                r.children = field(line, "spawned_in").zip(field(line, "spawned_out"));
            }
            ("integrity", "done") => r.checksum_failures = field(line, "failures"),
            ("integrity", w) if w.starts_with("t=") => {
                if let Some(n0) = field::<u64>(line, "n0") {
                    r.integrity_fast_max = Some(r.integrity_fast_max.unwrap_or(0).max(n0));
                }
            }
            ("integrity", "bad") => r.events.push(line.to_string()),
            ("hotplug", "done") => {
                r.blocks_offlined = field(line, "offlined");
                r.blocks_onlined = field(line, "onlined");
                r.offline_failed = field(line, "offline_failed");
                r.hotplug_note = field::<String>(line, "note")
                    .or_else(|| field(line, "offline_errors"))
                    .filter(|s| s != "-");
            }
            ("hotplug", "online-failed") | ("harness", "not-ready" | "pid_max") => {
                r.events.push(line.to_string());
            }
            ("abuse", "mode=idle") if word(2) == "done" => {
                r.idle_held_max = field(line, "max_held");
            }
            ("hostile-names", "done") => r.hostile_files = field(line, "files"),
            ("hostile-names", "failed") => r.events.push(line.to_string()),
            ("harness", w) if w.starts_with("pid_max=") => r.pid_max = field(line, "pid_max"),
            ("harness", "vmstat0") => vm0 = field(line, "pgmigrate_success"),
            ("harness", "vmstat1") => {
                r.migrated_pages = vm0
                    .zip(field::<u64>(line, "pgmigrate_success"))
                    .map(|(a, b)| b.saturating_sub(a));
            }
            _ => {}
        }
    }
    r
}

impl ChaosReport {
    /// Pages of out-of-scope processes moved: the hog's and the children's.
    #[must_use]
    pub fn out_of_scope_moved(&self) -> Option<u64> {
        Some(self.hog_moved? + self.children_out_moved?)
    }

    /// The share of counted `/metrics` probes answered within 1 s, percent.
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn probe_ok_pct(&self) -> Option<f64> {
        let n = self.probes.filter(|n| *n > 0)?;
        Some(100.0 * self.probes_ok? as f64 / n as f64)
    }

    /// The acceptance bounds of issue 12 that this run breaks, one line each (empty: all
    /// hold). A figure that is missing breaks its bound.
    #[must_use]
    pub fn failures(&self) -> Vec<String> {
        let mut f = Vec::new();
        let mut need = |ok: Option<bool>, what: String| {
            if ok != Some(true) {
                f.push(what);
            }
        };
        need(
            self.unasked_exits.map(|n| n == 0),
            format!(
                "daemon exits not asked for: {} (bound 0)",
                show(self.unasked_exits)
            ),
        );
        need(
            self.probe_ok_pct().map(|p| p >= 99.0),
            format!(
                "/metrics answered within 1 s: {} of {} probes (bound >= 99 %)",
                show(self.probes_ok),
                show(self.probes)
            ),
        );
        need(
            self.out_of_scope_moved().map(|n| n == 0),
            format!(
                "out-of-scope pages moved: hog {}, children {} (bound 0)",
                show(self.hog_moved),
                show(self.children_out_moved)
            ),
        );
        need(
            self.bound_moved.map(|n| n == 0),
            format!(
                "pages of the bound VMA moved: {} (bound 0)",
                show(self.bound_moved)
            ),
        );
        need(
            self.checksum_failures.map(|n| n == 0),
            format!(
                "checksum failures: {} (bound 0)",
                show(self.checksum_failures)
            ),
        );
        need(
            self.kills
                .zip(self.resumed)
                .map(|(k, r)| k > 0 && r == k && self.not_resumed == Some(0)),
            format!(
                "tiering resumed after {} of {} SIGKILLs ({} not resumed within {} s)",
                show(self.resumed),
                show(self.kills),
                show(self.not_resumed),
                self.params.map_or(0, |p| p.resume_timeout_s)
            ),
        );
        f
    }
}

fn show<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// The table of a chaos run (markdown).
#[must_use]
pub fn table(r: &ChaosReport) -> String {
    let f1 = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
    let mut rows: Vec<(String, String)> = vec![
        ("daemon exits not asked for".into(), show(r.unasked_exits)),
        (
            "/metrics probes answered within 1 s".into(),
            format!(
                "{} % ({} of {}; {} during restarts not counted; slowest good {} ms)",
                f1(r.probe_ok_pct()),
                show(r.probes_ok),
                show(r.probes),
                show(r.probes_excluded),
                r.probe_max_ok_ms
                    .map_or_else(|| "-".into(), |v| format!("{v:.0}"))
            ),
        ),
        (
            "pages of out-of-scope processes moved".into(),
            format!(
                "{} (hog {} of {} pages; children {})",
                show(r.out_of_scope_moved()),
                show(r.hog_moved),
                show(r.hog_pages),
                show(r.children_out_moved)
            ),
        ),
        (
            "pages of the bound VMA moved".into(),
            format!("{} of {}", show(r.bound_moved), show(r.bound_pages)),
        ),
        ("checksum failures".into(), show(r.checksum_failures)),
        (
            "tierd peak RSS (VmHWM, max over restarts)".into(),
            r.peak_rss_kib
                .map_or_else(|| "-".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0)),
        ),
        (
            "tierd peak open descriptors / threads".into(),
            format!("{} / {}", show(r.peak_fds), show(r.peak_threads)),
        ),
        (
            "SIGKILL restarts; resumed; max resume".into(),
            format!(
                "{}; {} (not {}); {} s (first start: first pass after {} s)",
                show(r.kills),
                show(r.resumed),
                show(r.not_resumed),
                f1(r.resume_max_s),
                f1(r.first_pass_s)
            ),
        ),
        (
            "tierd exit on the final SIGTERM".into(),
            show(r.stop_rc.clone()),
        ),
        (
            "memory blocks offlined / onlined".into(),
            format!(
                "{} / {} ({} refused{})",
                show(r.blocks_offlined),
                show(r.blocks_onlined),
                show(r.offline_failed),
                r.hotplug_note
                    .as_ref()
                    .map_or_else(String::new, |n| format!(": {n}"))
            ),
        ),
        (
            "pid wraps seen (pid_max)".into(),
            format!(
                "{} ({}; {} pids reused; children in/out of scope {})",
                show(r.pid_wraps),
                show(r.pid_max),
                show(r.pid_reuses),
                r.children
                    .map_or_else(|| "-".into(), |(a, b)| format!("{a}/{b}"))
            ),
        ),
        (
            "idle connections held (most at once)".into(),
            show(r.idle_held_max),
        ),
        ("hostile-name files mapped".into(), show(r.hostile_files)),
        (
            "tiering: pages tierd promoted / demoted; integrity pages on node 0 (max of 16384)"
                .into(),
            format!(
                "{} / {}; {}",
                show(r.tierd_promoted),
                show(r.tierd_demoted),
                show(r.integrity_fast_max)
            ),
        ),
        (
            "pages migrated (kernel pgmigrate_success)".into(),
            show(r.migrated_pages),
        ),
        ("guest wall time".into(), format!("{:.0} s", r.wall_s)),
    ];
    let mut s = String::from("| figure | value |\n|---|---|\n");
    for (k, v) in rows.drain(..) {
        s.push_str(&format!("| {k} | {v} |\n"));
    }
    s
}

/// Boots the guest and runs chaos.
///
/// # Errors
/// [`LabError::Guest`] when the guest cannot be built or run; [`LabError::Parse`] when the
/// actors never started.
pub fn run_chaos(env: &LabEnv, p: &ChaosParams) -> Result<(ChaosReport, String), LabError> {
    let mut fs = Initramfs::standard(Path::new(DEFAULT_BUSYBOX), &script(p))?;
    fs.add_host_file(&env.bins.join("tierd"), "/bin/tierd", Some(0o755))?;
    fs.add_host_file(
        &env.bins.join("tierd-workload"),
        "/bin/tierd-workload",
        Some(0o755),
    )?;
    fs.add_file("/lab/tierd.toml", tierd_config().into_bytes(), 0o644)?;
    let host = HostInfo::measure(&env.kernel.version);
    // Boot and setup take about 30 s under TCG, the end (SIGTERM, waits) up to a minute.
    let timeout = Duration::from_secs(u64::from(p.duration_s) * 2 + 240);
    let dir = env.work_dir.join("chaos");
    let out =
        Guest::new(env.kernel.clone(), dir.clone()).run(&GuestSpec::two_node(), &fs, "", timeout);
    std::fs::remove_dir_all(&dir).ok();
    let out = out?;
    let mut r = parse_console(&out.console);
    if !out.console.contains("LAB CHAOS harness started") {
        return Err(LabError::Parse(format!(
            "the chaos actors never started; console tail:\n{}",
            out.console
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        )));
    }
    r.params = Some(*p);
    r.host = Some(host);
    r.wall_s = out.wall.as_secs_f64();
    Ok((r, out.console))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONSOLE: &str = "\
LAB CHAOS harness pid_max=1024
LAB CHAOS harness vmstat0 pgmigrate_success=100 thp_migration_success=0 
LAB CHAOS integrity integrity t=5.0 verified_pages=1 failures=0 passes=1 rewritten_pages=1 n0=7 n1=2 n2=0 n3=0 other=0
LAB CHAOS integrity integrity t=10.0 verified_pages=1 failures=0 passes=1 rewritten_pages=1 n0=3 n1=2 n2=0 n3=0 other=0
LAB CHAOS harness vmstat1 pgmigrate_success=5100 thp_migration_success=3 
LAB CHAOS supervisor supervisor kill n=1 pid=500 asked=true status=signal: 9 (SIGKILL) t=40.0
LAB CHAOS supervisor supervisor exit n=2 pid=700 asked=false status=exit status: 1 code=Some(1) signal=None after_s=0.4
LAB CHAOS supervisor supervisor stderr n=2 | Error: DAMON kdamond 0 is in use by someone else
LAB CHAOS supervisor supervisor done starts=4 kills=3 unasked_exits=1 resumed=2 not_resumed=1 resume_max_s=4.2 first_pass_s=2.0 peak_rss_kib=20480 peak_fds=40 peak_threads=12 promoted=900 demoted=40 stop_rc=0
LAB CHAOS prober prober fail t=50.1 timeout after 0 bytes
LAB CHAOS prober prober done probes=400 ok=398 failed=2 bad_status=0 excluded_down=20 max_ok_ms=310
LAB CHAOS hog hog done pages=16384 moved_max=0 hotplugged_max=0 checks=60 passes=1000
LAB CHAOS bound bound done pages=8192 moved_max=3 hotplugged_max=0 checks=60 passes=1000
LAB CHAOS spawner spawner done spawned_in=50 spawned_out=50 reports_in=50 reports_out=50 moved_in=10 moved_out=0 hotplugged_out=0 spawn_failures=0 child_failures=0 thread_failures=0 pids_observed=6000 pid_wraps=8 pid_reuses=5000 pid_max=1024
LAB CHAOS integrity integrity done t=70.0 verified_pages=100 failures=0 passes=9 rewritten_pages=7 n0=1 n1=2 n2=0 n3=0 other=0
LAB CHAOS hotplug hotplug done blocks=16 tried=5 offlined=4 onlined=4 offline_failed=1 online_failed=0 skipped_protected=3 offline_errors=Device_or_resource_busy:1
LAB CHAOS abuse-idle abuse mode=idle done target=1000 max_held=1000 opened=1200 dropped_by_server=200 connect_failures=3 last_error=\"x\"
LAB CHAOS hostile hostile-names done files=13 passes=99
";

    #[test]
    fn console_becomes_the_figures() {
        let r = parse_console(CONSOLE);
        assert_eq!(r.pid_max, Some(1024));
        assert_eq!(r.migrated_pages, Some(5000));
        assert_eq!(
            (r.starts, r.kills, r.unasked_exits),
            (Some(4), Some(3), Some(1))
        );
        assert_eq!((r.resumed, r.not_resumed), (Some(2), Some(1)));
        assert_eq!(r.resume_max_s, Some(4.2));
        assert_eq!((r.peak_rss_kib, r.peak_fds), (Some(20480), Some(40)));
        assert_eq!(r.stop_rc.as_deref(), Some("0"));
        assert_eq!((r.tierd_promoted, r.tierd_demoted), (Some(900), Some(40)));
        assert_eq!(r.integrity_fast_max, Some(7));
        assert_eq!(
            (r.probes, r.probes_ok, r.probes_excluded),
            (Some(400), Some(398), Some(20))
        );
        assert!((r.probe_ok_pct().expect("pct") - 99.5).abs() < 1e-9);
        assert_eq!((r.hog_moved, r.bound_moved), (Some(0), Some(3)));
        assert_eq!(r.out_of_scope_moved(), Some(0));
        assert_eq!(r.checksum_failures, Some(0));
        assert_eq!((r.blocks_offlined, r.blocks_onlined), (Some(4), Some(4)));
        assert_eq!(r.hotplug_note.as_deref(), Some("Device_or_resource_busy:1"));
        assert_eq!((r.pid_wraps, r.children), (Some(8), Some((50, 50))));
        assert_eq!((r.idle_held_max, r.hostile_files), (Some(1000), Some(13)));
        assert!(r
            .events
            .iter()
            .any(|e| e.contains("in use by someone else")));
        assert!(r.events.iter().any(|e| e.starts_with("prober fail")));
        assert!(r.done_lines.len() >= 8);
    }

    #[test]
    fn failures_name_each_broken_bound() {
        let mut r = parse_console(CONSOLE);
        r.params = Some(ChaosParams::quick());
        let f = r.failures();
        assert_eq!(f.len(), 3, "{f:?}");
        assert!(f[0].starts_with("daemon exits not asked for: 1"));
        assert!(f[1].starts_with("pages of the bound VMA moved: 3"));
        assert!(f[2].starts_with("tiering resumed after 2 of 3"));
        // A run with every figure in bounds passes; a missing figure fails its bound.
        r.unasked_exits = Some(0);
        r.bound_moved = Some(0);
        r.resumed = Some(3);
        r.not_resumed = Some(0);
        assert!(r.failures().is_empty(), "{:?}", r.failures());
        r.checksum_failures = None;
        assert_eq!(r.failures().len(), 1);
        r.probes_ok = Some(390);
        assert_eq!(r.failures().len(), 2, "97.5 % of probes is below 99 %");
    }

    #[test]
    fn script_sets_up_every_fault() {
        let s = script(&ChaosParams::quick());
        for needle in [
            "echo always > /sys/kernel/mm/transparent_hugepage/enabled",
            "echo 512 > /proc/sys/kernel/pid_max",
            "--kill-every-s 15 --secs $D",
            "http-abuse --mode idle --conns 1000",
            "http-abuse --mode endless-header",
            "http-abuse --mode slow-read",
            "hotplug --node 1",
            "hog --cgroup $OUT",
            "bound --cgroup $IN",
            "hostile-names --cgroup $IN",
            "chaos-spawner --in-cgroup $IN --out-cgroup $OUT",
            "prober --state-file $C/state",
            "D=60",
        ] {
            assert!(s.contains(needle), "{needle}");
        }
        assert!(tierd_config().contains("cgroups = [\"/work\"]"));
    }
}
