//! The chaos lab's guest actors (`tierd lab chaos`): subcommands that run beside tierd in the
//! tiered guest and each report one `... done key=value ...` line that the lab's host side
//! reads. The bookkeeping they share is in the library's [`tierd_workload::chaos`].

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Subcommand;
use tierd_engine::types::{NodeMask, Vpn};
use tierd_linux::mover::Mover;
use tierd_linux::pagemap::Pagemap;
use tierd_linux::sys::{self, AnonMapping, FileMapping, MPOL_BIND, MPOL_DEFAULT};
use tierd_workload::chaos::{
    blocks_offlined_since, classify_page, hostile_names, http_status, offline_log_line,
    parse_offline_log, OfflineEvent, PageVerdict, PidTracker,
};
use tierd_workload::chase::SplitMix64;

use crate::{emit, MIB};

/// Where the hotplug actor logs the blocks it offlines, unless told otherwise.
const OFFLINE_LOG: &str = "/tmp/chaos/offline.log";
/// A watcher touches its memory, then sleeps this long: every page is accessed several
/// times per DAMON sampling interval of the chaos configuration (100 ms).
const TOUCH_GAP: Duration = Duration::from_millis(30);

/// The chaos actors.
#[derive(Subcommand, Debug)]
pub enum ChaosCmd {
    /// (chaos) Start and end processes continuously, in and out of tierd's scope, and burn
    /// thread ids so that pids wrap; report pid wraps and pages of out-of-scope children moved.
    ChaosSpawner {
        /// The in-scope cgroup (v2 directory).
        #[arg(long)]
        in_cgroup: PathBuf,
        /// The out-of-scope cgroup.
        #[arg(long)]
        out_cgroup: PathBuf,
        /// The slow node the children place their memory on.
        #[arg(long, default_value_t = 1)]
        node: u16,
        /// MiB per child.
        #[arg(long, default_value_t = 2)]
        mib: usize,
        /// Children alive at once.
        #[arg(long, default_value_t = 6)]
        max_children: usize,
        /// Shortest child life, ms.
        #[arg(long, default_value_t = 300)]
        min_ms: u64,
        /// Longest child life, ms.
        #[arg(long, default_value_t = 3000)]
        max_ms: u64,
        /// Threads started and ended per second (each takes a pid from the same counter).
        #[arg(long, default_value_t = 100)]
        threads_per_s: u64,
        /// How long, seconds.
        #[arg(long)]
        secs: f64,
        /// The hotplug actor's log.
        #[arg(long, default_value = OFFLINE_LOG)]
        offline_log: PathBuf,
    },
    /// (chaos, internal) One spawned process: join a cgroup, place memory on the slow node
    /// without a binding policy, touch it, report whether any of it was moved.
    #[command(hide = true)]
    ChaosChild {
        /// The cgroup to join first.
        #[arg(long)]
        cgroup: PathBuf,
        /// The slow node.
        #[arg(long)]
        node: u16,
        /// MiB.
        #[arg(long)]
        mib: usize,
        /// Life, ms.
        #[arg(long)]
        ms: u64,
        /// The hotplug actor's log.
        #[arg(long, default_value = OFFLINE_LOG)]
        offline_log: PathBuf,
    },
    /// (chaos) Hot memory placed on the slow node without a binding policy (set_mempolicy
    /// while faulting, then the default policy), in a cgroup outside tierd's scope: tierd
    /// must never move it.
    Hog {
        /// The cgroup (outside tierd's scope).
        #[arg(long)]
        cgroup: PathBuf,
        /// MiB.
        #[arg(long)]
        mib: usize,
        /// The slow node.
        #[arg(long, default_value_t = 1)]
        node: u16,
        /// How long, seconds.
        #[arg(long)]
        secs: f64,
        /// The hotplug actor's log.
        #[arg(long, default_value = OFFLINE_LOG)]
        offline_log: PathBuf,
    },
    /// (chaos) A hot VMA bound to the slow node (mbind MPOL_BIND, left in place) in a process
    /// inside tierd's scope: tierd must never move it.
    Bound {
        /// The cgroup (inside tierd's scope).
        #[arg(long)]
        cgroup: PathBuf,
        /// MiB.
        #[arg(long)]
        mib: usize,
        /// The slow node.
        #[arg(long, default_value_t = 1)]
        node: u16,
        /// How long, seconds.
        #[arg(long)]
        secs: f64,
        /// The hotplug actor's log.
        #[arg(long, default_value = OFFLINE_LOG)]
        offline_log: PathBuf,
    },
    /// (chaos) Map files with hostile names (vertical tab, no-break space, newline, '=',
    /// spaces, tab, backslash, bytes that are not UTF-8, 255 bytes long) and keep touching them.
    HostileNames {
        /// The cgroup (inside tierd's scope).
        #[arg(long)]
        cgroup: PathBuf,
        /// Directory for the files.
        #[arg(long)]
        dir: PathBuf,
        /// KiB per file.
        #[arg(long, default_value_t = 512)]
        kib: usize,
        /// The node their pages are written on.
        #[arg(long, default_value_t = 1)]
        node: u16,
        /// How long, seconds.
        #[arg(long)]
        secs: f64,
    },
    /// (chaos) Abuse the metrics port: hold idle connections (reopening dropped ones), send
    /// a header that never ends, or read the answer one byte a second.
    HttpAbuse {
        /// idle, endless-header or slow-read.
        #[arg(long)]
        mode: AbuseMode,
        /// The metrics address.
        #[arg(long, default_value = "127.0.0.1:9464")]
        addr: SocketAddr,
        /// Connections held (idle mode).
        #[arg(long, default_value_t = 1000)]
        conns: usize,
        /// How long, seconds.
        #[arg(long)]
        secs: f64,
    },
    /// (chaos) Request /metrics every interval; count answers complete within the timeout.
    /// Probes that start or end while the supervisor says tierd is down (it killed it and the
    /// new one does not listen yet) are counted apart.
    Prober {
        /// The metrics address.
        #[arg(long, default_value = "127.0.0.1:9464")]
        addr: SocketAddr,
        /// Between probe starts, ms.
        #[arg(long, default_value_t = 150)]
        interval_ms: u64,
        /// An answer must be complete within this, ms.
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
        /// The supervisor's state file (`up` or `down`).
        #[arg(long)]
        state_file: PathBuf,
        /// How long, seconds.
        #[arg(long)]
        secs: f64,
    },
    /// (chaos) Run tierd, SIGKILL and restart it every so often, restart it after any exit
    /// it did not ask for (and count those), sample its peak RSS and descriptors, and time
    /// how long each restarted tierd takes to resume tiering.
    Supervise {
        /// The tierd binary.
        #[arg(long, default_value = "/bin/tierd")]
        tierd: PathBuf,
        /// Its configuration.
        #[arg(long)]
        config: PathBuf,
        /// SIGKILL tierd this long after each start, seconds.
        #[arg(long)]
        kill_every_s: f64,
        /// How long, seconds; then tierd gets SIGTERM.
        #[arg(long)]
        secs: f64,
        /// Where `up`/`down` is written for the prober.
        #[arg(long)]
        state_file: PathBuf,
        /// Directory for each tierd's stdout/stderr.
        #[arg(long)]
        log_dir: PathBuf,
        /// tierd's metrics address.
        #[arg(long, default_value = "127.0.0.1:9464")]
        addr: SocketAddr,
        /// A restarted tierd must resume tiering within this, seconds.
        #[arg(long, default_value_t = 30.0)]
        resume_timeout_s: f64,
    },
    /// (chaos) Offline and online the slow node's memory blocks in turn, skipping blocks
    /// that hold pages of the watched processes; log each attempt for the watchers.
    Hotplug {
        /// The node whose blocks cycle.
        #[arg(long, default_value_t = 1)]
        node: u16,
        /// Between offline attempts, seconds.
        #[arg(long, default_value_t = 8.0)]
        period_s: f64,
        /// How long a block stays offline, seconds.
        #[arg(long, default_value_t = 3.0)]
        offline_s: f64,
        /// Cgroups whose processes' pages must not be hot-unplugged.
        #[arg(long)]
        protect_cgroup: Vec<PathBuf>,
        /// Pids whose pages must not be hot-unplugged.
        #[arg(long)]
        protect_pid: Vec<u32>,
        /// How long, seconds.
        #[arg(long)]
        secs: f64,
        /// The log the watchers read.
        #[arg(long, default_value = OFFLINE_LOG)]
        log: PathBuf,
    },
    /// (chaos) A memory eater on a node that comes and goes: allocated at second `on_s` of
    /// every `period_s`, freed at `off_s`, so tierd demotes and promotes.
    CycleEater {
        /// MiB.
        #[arg(long)]
        mib: usize,
        /// Node (bound).
        #[arg(long, default_value_t = 0)]
        node: i32,
        /// Period, seconds.
        #[arg(long, default_value_t = 30)]
        period_s: u64,
        /// Allocated from this second of each period.
        #[arg(long, default_value_t = 5)]
        on_s: u64,
        /// Freed at this second of each period.
        #[arg(long, default_value_t = 25)]
        off_s: u64,
        /// How long, seconds.
        #[arg(long)]
        secs: f64,
    },
}

/// How the metrics port is abused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AbuseMode {
    /// Hold many idle connections.
    Idle,
    /// Send a request header that never ends.
    EndlessHeader,
    /// Read the answer one byte a second.
    SlowRead,
}

/// Runs one chaos actor.
///
/// # Errors
/// Whatever stops the actor from doing its job (its cgroup cannot be joined, memory cannot
/// be placed); the conditions it measures are reported, not raised.
pub fn run(cmd: ChaosCmd) -> Result<()> {
    match cmd {
        ChaosCmd::ChaosSpawner {
            in_cgroup,
            out_cgroup,
            node,
            mib,
            max_children,
            min_ms,
            max_ms,
            threads_per_s,
            secs,
            offline_log,
        } => spawner(&SpawnerArgs {
            cgroups: [in_cgroup, out_cgroup],
            node,
            mib,
            max_children: max_children.max(1),
            life_ms: min_ms..max_ms.max(min_ms + 1),
            threads_per_s,
            secs,
            offline_log,
        }),
        ChaosCmd::ChaosChild {
            cgroup,
            node,
            mib,
            ms,
            offline_log,
        } => child(&cgroup, node, mib, ms, &offline_log),
        ChaosCmd::Hog {
            cgroup,
            mib,
            node,
            secs,
            offline_log,
        } => watcher("hog", &cgroup, mib, node, false, secs, &offline_log),
        ChaosCmd::Bound {
            cgroup,
            mib,
            node,
            secs,
            offline_log,
        } => watcher("bound", &cgroup, mib, node, true, secs, &offline_log),
        ChaosCmd::HostileNames {
            cgroup,
            dir,
            kib,
            node,
            secs,
        } => hostile(&cgroup, &dir, kib, node, secs),
        ChaosCmd::HttpAbuse {
            mode,
            addr,
            conns,
            secs,
        } => match mode {
            AbuseMode::Idle => abuse_idle(addr, conns, secs),
            AbuseMode::EndlessHeader => abuse_endless(addr, secs),
            AbuseMode::SlowRead => abuse_slow_read(addr, secs),
        },
        ChaosCmd::Prober {
            addr,
            interval_ms,
            timeout_ms,
            state_file,
            secs,
        } => prober(
            addr,
            Duration::from_millis(interval_ms),
            Duration::from_millis(timeout_ms),
            &state_file,
            secs,
        ),
        ChaosCmd::Supervise {
            tierd,
            config,
            kill_every_s,
            secs,
            state_file,
            log_dir,
            addr,
            resume_timeout_s,
        } => Supervisor {
            stopping: Arc::new(AtomicBool::new(false)),
            tierd,
            config,
            kill_every: secs_dur(kill_every_s),
            state_file,
            log_dir,
            addr,
            resume_timeout: secs_dur(resume_timeout_s),
        }
        .run(secs_dur(secs)),
        ChaosCmd::Hotplug {
            node,
            period_s,
            offline_s,
            protect_cgroup,
            protect_pid,
            secs,
            log,
        } => hotplug(&HotplugArgs {
            node,
            period: secs_dur(period_s),
            offline: secs_dur(offline_s),
            protect_cgroups: protect_cgroup,
            protect_pids: protect_pid,
            secs: secs_dur(secs),
            log,
        }),
        ChaosCmd::CycleEater {
            mib,
            node,
            period_s,
            on_s,
            off_s,
            secs,
        } => cycle_eater(mib, node, period_s.max(1), on_s, off_s, secs_dur(secs)),
    }
}

fn secs_dur(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}

/// Seconds since boot (`/proc/uptime`, the clock every actor's log lines use).
fn uptime() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Moves the calling process into a cgroup v2 directory.
fn join_cgroup(cg: &Path) -> Result<()> {
    let procs = cg.join("cgroup.procs");
    std::fs::write(&procs, std::process::id().to_string())
        .with_context(|| format!("joining {}", procs.display()))
}

fn node_mask(node: u16) -> Result<NodeMask> {
    anyhow::ensure!(node < 64, "node {node} out of range (0..64)");
    Ok(NodeMask(1 << node))
}

/// Maps `mib` MiB and faults every page in on `node`: with `bind`, under an `MPOL_BIND` VMA
/// policy that stays; otherwise under an `MPOL_BIND` task policy that is reset to the
/// default afterwards, so the VMA carries no policy at all and only tierd's scope keeps tierd
/// away from it.
fn place_on(mib: usize, node: u16, bind: bool) -> Result<AnonMapping> {
    let mask = node_mask(node)?;
    let mut m = AnonMapping::new(mib.checked_mul(MIB).context("size overflows")?)?;
    if bind {
        sys::mbind(m.addr(), m.len(), MPOL_BIND, mask, 0)
            .with_context(|| format!("binding {mib} MiB to node {node}"))?;
    } else {
        sys::set_mempolicy(MPOL_BIND, mask)
            .with_context(|| format!("task policy BIND node {node}"))?;
    }
    let ps = sys::page_size();
    for page in m.as_mut_slice().chunks_mut(ps) {
        page[0] = 1;
    }
    if !bind {
        sys::set_mempolicy(MPOL_DEFAULT, NodeMask::EMPTY).context("task policy back to default")?;
    }
    Ok(m)
}

/// Reads one word of every page.
fn touch(m: &AnonMapping) -> u64 {
    let step = sys::page_size() / 8;
    m.as_u64_slice()
        .iter()
        .step_by(step)
        .fold(0u64, |a, w| a.wrapping_add(std::hint::black_box(*w)))
}

/// `block_size_bytes` of the memory-hotplug sysfs (drivers/base/memory.c), if there is one.
fn block_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/sys/devices/system/memory/block_size_bytes").ok()?;
    u64::from_str_radix(s.trim(), 16).ok().filter(|b| *b > 0)
}

/// Memory blocks of the frames behind `count` pages from `addr` of process `pid`, one per
/// page (`None`: no frame, or the PFN hidden).
fn frame_blocks(pid: u32, addr: usize, count: usize) -> Vec<Option<u64>> {
    let (ps, Some(bb)) = (sys::page_size() as u64, block_bytes()) else {
        return vec![None; count];
    };
    let Ok(pm) = Pagemap::open(Path::new("/proc"), pid) else {
        return vec![None; count];
    };
    pm.read_range(Vpn(addr as u64 / ps), count as u64)
        .map(|es| es.iter().map(|e| e.pfn().map(|p| p.0 * ps / bb)).collect())
        .unwrap_or_else(|_| vec![None; count])
}

/// Pages of a watched mapping: where they were put, and which block their first frame was in.
struct Watch {
    addrs: Vec<usize>,
    origin: Vec<Option<u64>>,
    home: u16,
    since: f64,
    log: PathBuf,
}

/// One reading of a [`Watch`].
#[derive(Clone, Copy, Debug, Default)]
struct WatchCount {
    moved: u64,
    hotplugged: u64,
    unknown: u64,
}

impl Watch {
    fn new(m: &AnonMapping, home: u16, since: f64, log: &Path) -> Watch {
        let addrs = m.page_addrs();
        let origin = frame_blocks(std::process::id(), m.addr(), addrs.len());
        Watch {
            addrs,
            origin,
            home,
            since,
            log: log.to_path_buf(),
        }
    }

    fn check(&self, mover: &mut Mover) -> Result<WatchCount> {
        let offlined = blocks_offlined_since(
            &parse_offline_log(&std::fs::read_to_string(&self.log).unwrap_or_default()),
            self.since,
        );
        let q = mover.query(0, &self.addrs)?;
        let mut c = WatchCount::default();
        for (r, origin) in q.iter().zip(&self.origin) {
            match classify_page(r.map(|n| n.0), self.home, *origin, &offlined) {
                PageVerdict::Stayed => {}
                PageVerdict::Moved => c.moved += 1,
                PageVerdict::Hotplugged => c.hotplugged += 1,
                PageVerdict::Unknown => c.unknown += 1,
            }
        }
        Ok(c)
    }
}

/// `hog` and `bound`: place, keep hot, check placement every second; the maxima over the
/// run are what the lab reports (a page moved and moved back still counts).
fn watcher(
    what: &str,
    cgroup: &Path,
    mib: usize,
    node: u16,
    bind: bool,
    secs: f64,
    log: &Path,
) -> Result<()> {
    join_cgroup(cgroup)?;
    let since = uptime();
    let m = place_on(mib, node, bind)?;
    let watch = Watch::new(&m, node, since, log);
    let mut mover = Mover::default();
    let first = watch.check(&mut mover)?;
    let known = watch.origin.iter().filter(|o| o.is_some()).count();
    emit(&format_args!(
        "{what} pid={} addr={:#x} pages={} node={node} bound={bind} misplaced_at_start={} frames_known={known} ready",
        std::process::id(),
        m.addr(),
        watch.addrs.len(),
        first.moved
    ))?;
    let (t0, end) = (Instant::now(), secs_dur(secs));
    let mut next = Duration::from_secs(1);
    let (mut max_moved, mut max_hot, mut checks, mut passes) = (0u64, 0u64, 0u64, 0u64);
    let mut sink = 0u64;
    // The count at the start is the kernel's placement (a page it could not put on the node),
    // not a move: only growth beyond it is.
    while t0.elapsed() < end {
        sink = sink.wrapping_add(touch(&m));
        passes += 1;
        if t0.elapsed() >= next {
            let c = watch.check(&mut mover)?;
            let moved = c.moved.saturating_sub(first.moved);
            max_moved = max_moved.max(moved);
            max_hot = max_hot.max(c.hotplugged);
            checks += 1;
            if moved > 0 {
                emit(&format_args!(
                    "{what} t={:.1} moved={moved} hotplugged={} unknown={}",
                    uptime(),
                    c.hotplugged,
                    c.unknown
                ))?;
            }
            next += Duration::from_secs(1);
        }
        std::thread::sleep(TOUCH_GAP);
    }
    std::hint::black_box(sink);
    emit(&format_args!(
        "{what} done pages={} moved_max={max_moved} hotplugged_max={max_hot} checks={checks} passes={passes}",
        watch.addrs.len()
    ))
}

/// One spawned process (`chaos-child`).
fn child(cgroup: &Path, node: u16, mib: usize, ms: u64, log: &Path) -> Result<()> {
    join_cgroup(cgroup)?;
    let since = uptime();
    let m = place_on(mib, node, false)?;
    let watch = Watch::new(&m, node, since, log);
    let mut mover = Mover::default();
    let first = watch.check(&mut mover)?;
    let (t0, end) = (Instant::now(), Duration::from_millis(ms));
    let mut sink = 0u64;
    while t0.elapsed() < end {
        sink = sink.wrapping_add(touch(&m));
        std::thread::sleep(TOUCH_GAP);
    }
    std::hint::black_box(sink);
    let c = watch.check(&mut mover)?;
    emit(&format_args!(
        "child pid={} pages={} moved={} hotplugged={} unknown={}",
        std::process::id(),
        watch.addrs.len(),
        c.moved.saturating_sub(first.moved),
        c.hotplugged,
        c.unknown
    ))
}

struct SpawnerArgs {
    cgroups: [PathBuf; 2],
    node: u16,
    mib: usize,
    max_children: usize,
    life_ms: std::ops::Range<u64>,
    threads_per_s: u64,
    secs: f64,
    offline_log: PathBuf,
}

/// The id of the calling thread, from `/proc/thread-self` (a link to `PID/task/TID`).
fn thread_id() -> Option<u32> {
    let l = std::fs::read_link("/proc/thread-self").ok()?;
    l.file_name()?.to_str()?.parse().ok()
}

#[derive(Default)]
struct SpawnTally {
    spawned: [u64; 2],
    spawn_failures: u64,
    child_failures: u64,
    reports: [u64; 2],
    moved: [u64; 2],
    hotplugged: [u64; 2],
    thread_failures: u64,
}

#[allow(
    clippy::too_many_lines,
    reason = "the spawner's one loop: each step reads the previous one's state (children, pids, counts)"
)]
fn spawner(a: &SpawnerArgs) -> Result<()> {
    let exe = std::env::current_exe().context("locating /proc/self/exe")?;
    let mut rng = SplitMix64::new(u64::from(std::process::id()) ^ 0x5eed);
    let mut pids = PidTracker::default();
    let mut t = SpawnTally::default();
    let mut live: Vec<(Child, usize)> = Vec::new();
    let (t0, end) = (Instant::now(), secs_dur(a.secs));
    let tick = Duration::from_millis(50);
    let threads_per_tick = a.threads_per_s.div_ceil(20);
    let mut turn = 0usize;
    emit(&format_args!("spawner pid={} ready", std::process::id()))?;
    let reap = |live: &mut Vec<(Child, usize)>, t: &mut SpawnTally, wait: bool| {
        let mut i = 0;
        while i < live.len() {
            let done = if wait {
                live[i].0.wait().map(Some)
            } else {
                live[i].0.try_wait()
            };
            match done {
                Ok(None) => i += 1,
                Ok(Some(st)) => {
                    let (mut c, scope) = live.swap_remove(i);
                    let mut out = String::new();
                    if let Some(mut o) = c.stdout.take() {
                        let _ = o.read_to_string(&mut out);
                    }
                    let line = out.lines().find(|l| l.starts_with("child "));
                    match (st.success(), line) {
                        (true, Some(l)) => {
                            t.reports[scope] += 1;
                            for (k, v) in tierd_workload::chaos::kv(l) {
                                let v: u64 = v.parse().unwrap_or(0);
                                match k {
                                    "moved" => t.moved[scope] += v,
                                    "hotplugged" => t.hotplugged[scope] += v,
                                    _ => {}
                                }
                            }
                            if scope == 1 && line.is_some_and(|l| !l.contains(" moved=0 ")) {
                                let _ = emit(&format_args!("spawner out-of-scope {}", l));
                            }
                        }
                        _ => t.child_failures += 1,
                    }
                }
                Err(_) => {
                    live.swap_remove(i);
                    t.child_failures += 1;
                }
            }
        }
    };
    let mut next_report = Duration::from_secs(10);
    while t0.elapsed() < end {
        reap(&mut live, &mut t, false);
        while live.len() < a.max_children {
            // Alternate in and out of scope: a pid that was in scope a moment ago is handed
            // to an out-of-scope process with the same memory layout (the lab turns ASLR off).
            let scope = turn % 2;
            turn += 1;
            let ms = a.life_ms.start + rng.below(a.life_ms.end - a.life_ms.start);
            let r = Command::new(&exe)
                .arg("chaos-child")
                .arg("--cgroup")
                .arg(&a.cgroups[scope])
                .args(["--node", &a.node.to_string(), "--mib", &a.mib.to_string()])
                .args(["--ms", &ms.to_string()])
                .arg("--offline-log")
                .arg(&a.offline_log)
                .stdout(Stdio::piped())
                .stdin(Stdio::null())
                .spawn();
            match r {
                Ok(c) => {
                    pids.observe(c.id());
                    t.spawned[scope] += 1;
                    live.push((c, scope));
                }
                Err(_) => {
                    // EAGAIN when the pids ran out: counted, tried again next tick.
                    t.spawn_failures += 1;
                    break;
                }
            }
        }
        for _ in 0..threads_per_tick {
            match std::thread::Builder::new().spawn(thread_id) {
                Ok(h) => {
                    if let Ok(Some(tid)) = h.join() {
                        pids.observe(tid);
                    }
                }
                Err(_) => t.thread_failures += 1,
            }
        }
        if t0.elapsed() >= next_report {
            emit(&format_args!(
                "spawner t={:.1} spawned={} pid_wraps={} pid_reuses={}",
                uptime(),
                t.spawned[0] + t.spawned[1],
                pids.wraps,
                pids.reuses
            ))?;
            next_report += Duration::from_secs(10);
        }
        std::thread::sleep(tick);
    }
    reap(&mut live, &mut t, true);
    emit(&format_args!(
        "spawner done spawned_in={} spawned_out={} reports_in={} reports_out={} moved_in={} \
         moved_out={} hotplugged_out={} spawn_failures={} child_failures={} thread_failures={} \
         pids_observed={} pid_wraps={} pid_reuses={} pid_max={}",
        t.spawned[0],
        t.spawned[1],
        t.reports[0],
        t.reports[1],
        t.moved[0],
        t.moved[1],
        t.hotplugged[1],
        t.spawn_failures,
        t.child_failures,
        t.thread_failures,
        pids.observed,
        pids.wraps,
        pids.reuses,
        std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    ))
}

/// `hostile-names`: write the files with the task policy bound to `node`, map them, touch.
fn hostile(cgroup: &Path, dir: &Path, kib: usize, node: u16, secs: f64) -> Result<()> {
    join_cgroup(cgroup)?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let len = kib.max(4) * 1024;
    sys::set_mempolicy(MPOL_BIND, node_mask(node)?).context("task policy BIND")?;
    let mut maps = Vec::new();
    let mut failed = Vec::new();
    for name in hostile_names() {
        let path = dir.join(std::ffi::OsStr::from_bytes(&name));
        let r = (|| -> Result<FileMapping> {
            let mut f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)?;
            f.write_all(&vec![0x5a; len])?;
            Ok(FileMapping::new(&f, len)?)
        })();
        match r {
            Ok(m) => maps.push(m),
            Err(e) => failed.push(format!("{:?}: {e:#}", path.display())),
        }
    }
    sys::set_mempolicy(MPOL_DEFAULT, NodeMask::EMPTY).context("task policy back to default")?;
    for f in &failed {
        emit(&format_args!("hostile-names failed {f}"))?;
    }
    emit(&format_args!(
        "hostile-names pid={} files={} failed={} ready",
        std::process::id(),
        maps.len(),
        failed.len()
    ))?;
    let (t0, end) = (Instant::now(), secs_dur(secs));
    let (mut passes, mut sink) = (0u64, 0u8);
    while t0.elapsed() < end {
        for m in &maps {
            sink = sink.wrapping_add(m.touch());
        }
        passes += 1;
        std::thread::sleep(TOUCH_GAP);
    }
    std::hint::black_box(sink);
    emit(&format_args!(
        "hostile-names done files={} passes={passes}",
        maps.len()
    ))
}

fn connect(addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// `http-abuse --mode idle`: hold `conns` connections that never send a byte; every second,
/// find those the server closed and open them again.
fn abuse_idle(addr: SocketAddr, conns: usize, secs: f64) -> Result<()> {
    let (t0, end) = (Instant::now(), secs_dur(secs));
    let mut slots: Vec<Option<TcpStream>> = (0..conns).map(|_| None).collect();
    let (mut opened, mut dropped, mut connect_failures, mut max_held) = (0u64, 0u64, 0u64, 0usize);
    let mut last_err = String::new();
    let mut buf = [0u8; 4096];
    emit(&format_args!(
        "abuse mode=idle pid={} ready",
        std::process::id()
    ))?;
    while t0.elapsed() < end {
        for slot in &mut slots {
            if let Some(s) = slot {
                match s.read(&mut buf) {
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    // Something the server said (a timeout answer): drained, kept until EOF.
                    Ok(n) if n > 0 => {}
                    _ => {
                        *slot = None;
                        dropped += 1;
                    }
                }
            }
        }
        for slot in slots.iter_mut().filter(|s| s.is_none()) {
            if t0.elapsed() >= end {
                break;
            }
            match connect(addr, Duration::from_secs(1)).and_then(|s| {
                s.set_nonblocking(true)?;
                Ok(s)
            }) {
                Ok(s) => {
                    *slot = Some(s);
                    opened += 1;
                }
                Err(e) => {
                    // Refused (tierd restarting), or a full backlog: try the rest next round.
                    connect_failures += 1;
                    last_err = e.to_string();
                    break;
                }
            }
        }
        max_held = max_held.max(slots.iter().filter(|s| s.is_some()).count());
        std::thread::sleep(Duration::from_secs(1));
    }
    emit(&format_args!(
        "abuse mode=idle done target={conns} max_held={max_held} opened={opened} dropped_by_server={dropped} connect_failures={connect_failures} last_error={:?}",
        last_err
    ))
}

/// `http-abuse --mode endless-header`: a request line and a header whose value never ends,
/// 1 KiB every 10 ms; when the server drops it, again.
fn abuse_endless(addr: SocketAddr, secs: f64) -> Result<()> {
    let (t0, end) = (Instant::now(), secs_dur(secs));
    let (mut conns, mut dropped, mut connect_failures, mut stalls) = (0u64, 0u64, 0u64, 0u64);
    let (mut sent, mut max_one) = (0u64, 0u64);
    let chunk = vec![b'a'; 1024];
    emit(&format_args!(
        "abuse mode=endless-header pid={} ready",
        std::process::id()
    ))?;
    while t0.elapsed() < end {
        let Ok(mut s) = connect(addr, Duration::from_secs(1)) else {
            connect_failures += 1;
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        conns += 1;
        let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
        let mut this = 0u64;
        let mut ok = s
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: tierd\r\nX-Endless: ")
            .is_ok();
        while ok && t0.elapsed() < end {
            match s.write_all(&chunk) {
                Ok(()) => {
                    this += 1024;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    // The server stopped reading: the socket buffer is full. Keep it so.
                    stalls += 1;
                }
                Err(_) => ok = false,
            }
        }
        if !ok {
            dropped += 1;
        }
        sent += this;
        max_one = max_one.max(this);
        std::thread::sleep(Duration::from_millis(100));
    }
    emit(&format_args!(
        "abuse mode=endless-header done conns={conns} dropped_by_server={dropped} connect_failures={connect_failures} stalls={stalls} sent_bytes={sent} max_bytes_one_conn={max_one}"
    ))
}

/// `http-abuse --mode slow-read`: ask for /metrics (keep-alive), read one byte a second.
fn abuse_slow_read(addr: SocketAddr, secs: f64) -> Result<()> {
    let (t0, end) = (Instant::now(), secs_dur(secs));
    let (mut conns, mut connect_failures, mut read) = (0u64, 0u64, 0u64);
    emit(&format_args!(
        "abuse mode=slow-read pid={} ready",
        std::process::id()
    ))?;
    while t0.elapsed() < end {
        let Ok(mut s) = connect(addr, Duration::from_secs(1)) else {
            connect_failures += 1;
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        conns += 1;
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        if s.write_all(b"GET /metrics HTTP/1.1\r\nHost: tierd\r\n\r\n")
            .is_err()
        {
            continue;
        }
        let mut b = [0u8; 1];
        while t0.elapsed() < end {
            match s.read(&mut b) {
                Ok(1) => {
                    read += 1;
                    std::thread::sleep(Duration::from_secs(1));
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                _ => break,
            }
        }
    }
    emit(&format_args!(
        "abuse mode=slow-read done conns={conns} connect_failures={connect_failures} bytes_read={read}"
    ))
}

fn tierd_down(state_file: &Path) -> bool {
    std::fs::read_to_string(state_file).map_or(true, |s| s.trim() != "up")
}

/// One probe: the status code, or why there was none within `timeout`.
fn probe_once(addr: SocketAddr, timeout: Duration) -> Result<u16, String> {
    let t0 = Instant::now();
    let left = || timeout.checked_sub(t0.elapsed()).filter(|d| !d.is_zero());
    let mut s = connect(addr, timeout).map_err(|e| format!("connect: {e}"))?;
    s.set_write_timeout(left())
        .map_err(|e| format!("socket: {e}"))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: tierd\r\n\r\n")
        .map_err(|e| format!("send: {e}"))?;
    let mut got = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        let Some(d) = left() else {
            return Err(format!("timeout after {} bytes", got.len()));
        };
        s.set_read_timeout(Some(d))
            .map_err(|e| format!("socket: {e}"))?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(format!("timeout after {} bytes", got.len()));
            }
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    http_status(&got).ok_or_else(|| format!("no HTTP status in {} bytes", got.len()))
}

/// `prober`: a /metrics request every interval; an answer counts when it is a complete 200
/// within the timeout.
fn prober(
    addr: SocketAddr,
    interval: Duration,
    timeout: Duration,
    state_file: &Path,
    secs: f64,
) -> Result<()> {
    let (t0, end) = (Instant::now(), secs_dur(secs));
    let (mut probes, mut ok, mut excluded, mut bad_status) = (0u64, 0u64, 0u64, 0u64);
    let (mut failed, mut shown, mut max_ok_ms) = (0u64, 0u64, 0f64);
    emit(&format_args!("prober pid={} ready", std::process::id()))?;
    while t0.elapsed() < end {
        let start = Instant::now();
        let down_before = tierd_down(state_file);
        let r = probe_once(addr, timeout);
        let took = start.elapsed();
        if down_before || tierd_down(state_file) {
            excluded += 1;
        } else {
            probes += 1;
            match r {
                Ok(200) if took <= timeout => {
                    ok += 1;
                    max_ok_ms = max_ok_ms.max(took.as_secs_f64() * 1e3);
                }
                Ok(code) => {
                    bad_status += 1;
                    failed += 1;
                    if shown < 20 {
                        shown += 1;
                        emit(&format_args!("prober fail t={:.1} status={code}", uptime()))?;
                    }
                }
                Err(why) => {
                    failed += 1;
                    if shown < 20 {
                        shown += 1;
                        emit(&format_args!("prober fail t={:.1} {why}", uptime()))?;
                    }
                }
            }
        }
        std::thread::sleep(interval.saturating_sub(start.elapsed()));
    }
    emit(&format_args!(
        "prober done probes={probes} ok={ok} failed={failed} bad_status={bad_status} excluded_down={excluded} max_ok_ms={max_ok_ms:.0}"
    ))
}

/// Whether something listens on `port` (`/proc/net/tcp` and `tcp6`: state `0A` is
/// TCP_LISTEN, include/net/tcp_states.h; the local address is `HEXIP:HEXPORT`).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|p| {
        std::fs::read_to_string(p).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() > 3 && w[1].ends_with(&want) && w[3] == "0A"
            })
        })
    })
}

fn write_state(path: &Path, state: &str) {
    let tmp = path.with_extension("tmp");
    if std::fs::write(&tmp, state).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

/// A field of `/proc/PID/status` in kB (`VmHWM`, `VmRSS`) or a count (`Threads`).
fn status_field(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn fd_count(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

/// What an incarnation's watcher reports.
enum Msg {
    /// Its resume (once).
    Resume(Resume),
    /// Pages it promoted and demoted, last seen in its /status (when it ended).
    Moved { promoted: u64, demoted: u64 },
}

/// What a resume watcher saw of incarnation `n`.
struct Resume {
    n: u64,
    /// Seconds from the SIGKILL (or the start) to the first pass; `None`: none in time.
    after_s: Option<f64>,
    /// Whether the incarnation replaced a SIGKILLed one.
    after_kill: bool,
    /// The run ended before the timeout.
    cut_short: bool,
}

struct Supervisor {
    /// Set when the run ends: resume watchers then report "cut short", not "not resumed".
    stopping: Arc<AtomicBool>,
    tierd: PathBuf,
    config: PathBuf,
    kill_every: Duration,
    state_file: PathBuf,
    log_dir: PathBuf,
    addr: SocketAddr,
    resume_timeout: Duration,
}

/// One tierd process the supervisor started.
struct Incarnation {
    n: u64,
    child: Child,
    started: Instant,
    /// When the incarnation it replaced was SIGKILLed.
    after_kill: Option<Instant>,
    alive: Arc<AtomicBool>,
}

#[derive(Default)]
struct SuperTally {
    starts: u64,
    kills: u64,
    unasked: u64,
    resumed: u64,
    not_resumed: u64,
    /// The newest incarnation whose resume watcher has answered.
    answered: u64,
    resume_max_s: f64,
    first_pass_s: Option<f64>,
    peak_rss_kib: u64,
    peak_fds: u64,
    peak_threads: u64,
    promoted: u64,
    demoted: u64,
}

impl Supervisor {
    fn start(
        &self,
        n: u64,
        after_kill: Option<Instant>,
        tx: &mpsc::Sender<Msg>,
    ) -> Result<Incarnation> {
        let out = File::create(self.log_dir.join(format!("tierd-{n}.out")))?;
        let err = File::create(self.log_dir.join(format!("tierd-{n}.err")))?;
        let child = Command::new(&self.tierd)
            .arg("run")
            .arg("--config")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {}", self.tierd.display()))?;
        let started = Instant::now();
        emit(&format_args!(
            "supervisor start n={n} pid={} t={:.1}",
            child.id(),
            uptime()
        ))?;
        let alive = Arc::new(AtomicBool::new(true));
        // Resume: the new tierd's /status shows a completed promoter pass and a running source.
        // Its counters start at 0, so any pass is its own.
        let (addr, limit, from) = (
            self.addr,
            self.resume_timeout,
            after_kill.unwrap_or(started),
        );
        let (alive2, tx) = (Arc::clone(&alive), tx.clone());
        let stopping = Arc::clone(&self.stopping);
        std::thread::spawn(move || {
            // Until the incarnation ends: look for its first pass (the resume), and every
            // few seconds print what it has done (the console's record of tiering going on).
            let (mut resumed, mut sent) = (None, false);
            let (mut promoted, mut demoted) = (0u64, 0u64);
            let mut next_line = Instant::now();
            let mut last_err = String::new();
            while alive2.load(Relaxed) {
                match tierd_linux::status::fetch_status(addr) {
                    Ok(s) => {
                        let e = |k: &str| s.engine.get(k).copied().unwrap_or(0);
                        let passes = e("promoter_runs");
                        (promoted, demoted) = (e("pgpromote_success"), e("pgdemote_success"));
                        if resumed.is_none() && passes > 0 && s.sources.iter().any(|x| x.available)
                        {
                            resumed = Some(from.elapsed().as_secs_f64());
                        }
                        if Instant::now() >= next_line {
                            let sources: Vec<String> = s
                                .sources
                                .iter()
                                .map(|x| {
                                    if x.available {
                                        format!("{}:running", x.name)
                                    } else {
                                        format!("{}:{:?}", x.name, x.reason)
                                    }
                                })
                                .collect();
                            let _ = emit(&format_args!(
                                "supervisor status n={n} t={:.1} uptime_s={:.1} passes={passes} promoted={promoted} demoted={demoted} tracked={} processes={} sources={}",
                                uptime(),
                                s.uptime_s,
                                e("tracked_pages"),
                                s.processes.len(),
                                sources.join(",")
                            ));
                            next_line = Instant::now() + Duration::from_secs(5);
                        }
                    }
                    Err(err) => {
                        let err = err.to_string();
                        if err != last_err && Instant::now() >= next_line {
                            let _ = emit(&format_args!(
                                "supervisor status n={n} t={:.1} fetch failed: {err}",
                                uptime()
                            ));
                            next_line = Instant::now() + Duration::from_secs(5);
                            last_err = err;
                        }
                    }
                }
                if !sent && (resumed.is_some() || from.elapsed() > limit) {
                    sent = true;
                    let _ = tx.send(Msg::Resume(Resume {
                        n,
                        after_s: resumed,
                        after_kill: after_kill.is_some(),
                        cut_short: false,
                    }));
                }
                std::thread::sleep(Duration::from_millis(if sent { 1000 } else { 250 }));
            }
            if !sent {
                let _ = tx.send(Msg::Resume(Resume {
                    n,
                    after_s: None,
                    after_kill: after_kill.is_some(),
                    cut_short: stopping.load(Relaxed),
                }));
            }
            let _ = tx.send(Msg::Moved { promoted, demoted });
        });
        Ok(Incarnation {
            n,
            child,
            started,
            after_kill,
            alive,
        })
    }

    /// The last lines of incarnation `n`'s stderr, for the console.
    fn tell_stderr(&self, n: u64) -> Result<()> {
        let err = std::fs::read(self.log_dir.join(format!("tierd-{n}.err"))).unwrap_or_default();
        let text = String::from_utf8_lossy(&err);
        let lines: Vec<&str> = text.lines().collect();
        for l in &lines[lines.len().saturating_sub(12)..] {
            emit(&format_args!("supervisor stderr n={n} | {l}"))?;
        }
        Ok(())
    }

    #[allow(
        clippy::too_many_lines,
        reason = "one schedule of faults, read top to bottom as the guest script runs them"
    )]
    fn run(&self, total: Duration) -> Result<()> {
        std::fs::create_dir_all(&self.log_dir)?;
        write_state(&self.state_file, "down");
        let (tx, rx) = mpsc::channel();
        let mut t = SuperTally::default();
        let t0 = Instant::now();
        let mut cur = Some(self.start(1, None, &tx)?);
        t.starts = 1;
        let mut up = false;
        let mut restart_at: Option<Instant> = None;
        let mut next_sample = Instant::now();
        let absorb = |t: &mut SuperTally, m: Msg| -> Result<()> {
            let r = match m {
                Msg::Resume(r) => r,
                Msg::Moved { promoted, demoted } => {
                    t.promoted += promoted;
                    t.demoted += demoted;
                    return Ok(());
                }
            };
            let n = r.n;
            t.answered = t.answered.max(n);
            if r.cut_short {
                // Its tierd was stopped at the end of the run before it could show a pass.
                return emit(&format_args!("supervisor resume-cut-short n={n}"));
            }
            match (r.after_s, r.after_kill) {
                (Some(s), true) => {
                    t.resumed += 1;
                    t.resume_max_s = t.resume_max_s.max(s);
                    emit(&format_args!("supervisor resumed n={n} after_s={s:.1}"))
                }
                (Some(s), false) => {
                    t.first_pass_s.get_or_insert(s);
                    emit(&format_args!("supervisor first-pass n={n} after_s={s:.1}"))
                }
                (None, true) => {
                    t.not_resumed += 1;
                    emit(&format_args!("supervisor not-resumed n={n}"))
                }
                (None, false) => emit(&format_args!("supervisor no-first-pass n={n}")),
            }
        };
        while t0.elapsed() < total {
            while let Ok(r) = rx.try_recv() {
                absorb(&mut t, r)?;
            }
            if let Some(inc) = &mut cur {
                let pid = inc.child.id();
                if Instant::now() >= next_sample {
                    t.peak_rss_kib = t.peak_rss_kib.max(status_field(pid, "VmHWM").unwrap_or(0));
                    t.peak_threads = t
                        .peak_threads
                        .max(status_field(pid, "Threads").unwrap_or(0));
                    t.peak_fds = t.peak_fds.max(fd_count(pid).unwrap_or(0));
                    next_sample = Instant::now() + Duration::from_millis(500);
                }
                if !up
                    && (listening(self.addr.port()) || inc.started.elapsed() > self.resume_timeout)
                {
                    up = true;
                    write_state(&self.state_file, "up");
                }
                if let Ok(Some(st)) = inc.child.try_wait() {
                    // Nobody asked it to exit.
                    t.unasked += 1;
                    inc.alive.store(false, Relaxed);
                    emit(&format_args!(
                        "supervisor exit n={} pid={pid} asked=false status={} code={:?} signal={:?} after_s={:.1}",
                        inc.n,
                        st,
                        st.code(),
                        st.signal(),
                        inc.started.elapsed().as_secs_f64()
                    ))?;
                    self.tell_stderr(inc.n)?;
                    write_state(&self.state_file, "down");
                    up = false;
                    // A tierd that cannot start would be restarted in a tight loop: wait a
                    // second, as systemd's RestartSec would.
                    restart_at = Some(Instant::now() + Duration::from_secs(1));
                    cur = None;
                } else if inc.started.elapsed() >= self.kill_every {
                    write_state(&self.state_file, "down");
                    up = false;
                    inc.alive.store(false, Relaxed);
                    let _ = inc.child.kill();
                    let st = inc.child.wait()?;
                    let killed = Instant::now();
                    t.kills += 1;
                    emit(&format_args!(
                        "supervisor kill n={} pid={pid} asked=true status={st} t={:.1}",
                        inc.n,
                        uptime()
                    ))?;
                    let n = inc.n + 1;
                    cur = Some(self.start(n, Some(killed), &tx)?);
                    t.starts += 1;
                }
            } else if restart_at.is_some_and(|r| Instant::now() >= r) {
                restart_at = None;
                let n = t.starts + 1;
                cur = Some(self.start(n, None, &tx)?);
                t.starts += 1;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // A SIGKILL near the end still gets its whole resume timeout: stopping the new tierd
        // before it could answer would make the bound ("resumed within N s") depend on where
        // the last kill fell and on the host's speed (a slow CI host once saw the last restart
        // cut short 9 s after its kill, and counted it as not resumed).
        if let Some((n, killed)) = cur
            .as_ref()
            .filter(|inc| t.answered < inc.n)
            .and_then(|inc| Some((inc.n, inc.after_kill?)))
        {
            emit(&format_args!(
                "supervisor end-waits-for-resume n={n} t={:.1}",
                uptime()
            ))?;
            // The watcher answers by the timeout; a second more covers its poll interval.
            let deadline = killed + self.resume_timeout + Duration::from_secs(1);
            while t.answered < n && Instant::now() < deadline {
                if let Ok(m) = rx.recv_timeout(Duration::from_millis(250)) {
                    absorb(&mut t, m)?;
                }
            }
        }
        // The end: SIGTERM, as systemd stops a service; it must exit 0.
        self.stopping.store(true, Relaxed);
        // Asked to stop: probes from here on are not the endpoint's to answer.
        write_state(&self.state_file, "down");
        let mut stop = String::from("none");
        if let Some(mut inc) = cur.take() {
            let pid = inc.child.id();
            t.peak_rss_kib = t.peak_rss_kib.max(status_field(pid, "VmHWM").unwrap_or(0));
            t.peak_fds = t.peak_fds.max(fd_count(pid).unwrap_or(0));
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(30);
            let st = loop {
                if let Some(st) = inc.child.try_wait()? {
                    break Some(st);
                }
                if Instant::now() > deadline {
                    let _ = inc.child.kill();
                    let _ = inc.child.wait();
                    break None;
                }
                std::thread::sleep(Duration::from_millis(100));
            };
            inc.alive.store(false, Relaxed);
            stop = st.map_or_else(
                || "timeout".to_string(),
                |s| s.code().map_or_else(|| s.to_string(), |c| c.to_string()),
            );
            if stop != "0" {
                self.tell_stderr(inc.n)?;
            }
        }
        write_state(&self.state_file, "down");
        // Resume watchers still running give up once their tierd is gone.
        drop(tx);
        for r in rx.iter() {
            absorb(&mut t, r)?;
        }
        emit(&format_args!(
            "supervisor done starts={} kills={} unasked_exits={} resumed={} not_resumed={} resume_max_s={:.1} first_pass_s={} peak_rss_kib={} peak_fds={} peak_threads={} promoted={} demoted={} stop_rc={stop}",
            t.starts,
            t.kills,
            t.unasked,
            t.resumed,
            t.not_resumed,
            t.resume_max_s,
            t.first_pass_s.map_or_else(|| "-".to_string(), |s| format!("{s:.1}")),
            t.peak_rss_kib,
            t.peak_fds,
            t.peak_threads,
            t.promoted,
            t.demoted
        ))
    }
}

struct HotplugArgs {
    node: u16,
    period: Duration,
    offline: Duration,
    protect_cgroups: Vec<PathBuf>,
    protect_pids: Vec<u32>,
    secs: Duration,
    log: PathBuf,
}

/// The memory blocks of `node` (`/sys/devices/system/node/nodeN/memoryK` links).
fn node_blocks(node: u16) -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir(format!("/sys/devices/system/node/node{node}"))
        .map(|d| {
            d.filter_map(|e| {
                e.ok()?
                    .file_name()
                    .to_str()?
                    .strip_prefix("memory")?
                    .parse()
                    .ok()
            })
            .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// The blocks holding any present page of `pid` (its `maps` ranges through its pagemap).
fn blocks_of(pid: u32, into: &mut HashSet<u64>) {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return;
    };
    let ps = sys::page_size();
    for l in maps.lines() {
        let Some((a, b)) = l.split_whitespace().next().and_then(|r| r.split_once('-')) else {
            continue;
        };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else {
            continue;
        };
        // [vsyscall] and other ranges far beyond user memory: no frames of ours.
        let pages = (b.saturating_sub(a) / ps).min(1 << 20);
        into.extend(frame_blocks(pid, a, pages).into_iter().flatten());
    }
}

/// Writes `value` to a sysfs file in a child shell that is killed after `limit`:
/// offlining can wait for page migration for as long as it takes (mm/memory_hotplug.c
/// `offline_pages()` retries until a fatal signal).
fn sysfs_write(path: &Path, value: &str, limit: Duration) -> Result<(), String> {
    let mut c = Command::new("/bin/sh")
        .args(["-c", "echo \"$1\" > \"$2\"", "sh", value])
        .arg(path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn: {e}"))?;
    let t0 = Instant::now();
    loop {
        match c.try_wait() {
            Ok(Some(st)) => {
                let mut e = String::new();
                if let Some(mut s) = c.stderr.take() {
                    let _ = s.read_to_string(&mut e);
                }
                return if st.success() {
                    Ok(())
                } else {
                    Err(e.trim().replace(' ', "_"))
                };
            }
            Ok(None) if t0.elapsed() > limit => {
                let _ = c.kill();
                let _ = c.wait();
                return Err("timeout".into());
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("wait: {e}")),
        }
    }
}

fn hotplug(a: &HotplugArgs) -> Result<()> {
    let blocks = node_blocks(a.node);
    if blocks.is_empty() || block_bytes().is_none() {
        return emit(&format_args!(
            "hotplug done blocks=0 offlined=0 onlined=0 note=no_memory_hotplug_sysfs_for_node{}",
            a.node
        ));
    }
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&a.log)
        .with_context(|| format!("opening {}", a.log.display()))?;
    emit(&format_args!(
        "hotplug pid={} blocks={} ready",
        std::process::id(),
        blocks.len()
    ))?;
    let (t0, mut turn) = (Instant::now(), 0usize);
    let (mut tried, mut offlined, mut onlined, mut offline_failed, mut online_failed, mut skipped) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut reasons: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    let limit = Duration::from_secs(15);
    while t0.elapsed() + a.period < a.secs {
        std::thread::sleep(a.period.saturating_sub(a.offline));
        let mut protect = HashSet::new();
        let mut pids = a.protect_pids.clone();
        for cg in &a.protect_cgroups {
            if let Ok(s) = std::fs::read_to_string(cg.join("cgroup.procs")) {
                pids.extend(s.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
            }
        }
        for p in pids {
            blocks_of(p, &mut protect);
        }
        // The next online block, in turn, that holds no watched page.
        let mut pick = None;
        for _ in 0..blocks.len() {
            let b = blocks[turn % blocks.len()];
            turn += 1;
            let state =
                std::fs::read_to_string(format!("/sys/devices/system/memory/memory{b}/state"))
                    .unwrap_or_default();
            if state.trim() != "online" {
                continue;
            }
            if protect.contains(&b) {
                skipped += 1;
                continue;
            }
            pick = Some(b);
            break;
        }
        let Some(b) = pick else {
            continue;
        };
        let state = PathBuf::from(format!("/sys/devices/system/memory/memory{b}/state"));
        log.write_all(
            offline_log_line(OfflineEvent {
                t: uptime(),
                block: b,
            })
            .as_bytes(),
        )?;
        log.flush()?;
        tried += 1;
        match sysfs_write(&state, "offline", limit) {
            Ok(()) => {
                offlined += 1;
                writeln!(log, "offline-end {:.3} {b} ok", uptime())?;
                std::thread::sleep(a.offline);
                match sysfs_write(&state, "online", limit) {
                    Ok(()) => onlined += 1,
                    Err(why) => {
                        online_failed += 1;
                        emit(&format_args!("hotplug online-failed block={b} why={why}"))?;
                    }
                }
            }
            Err(why) => {
                offline_failed += 1;
                writeln!(log, "offline-end {:.3} {b} failed {why}", uptime())?;
                *reasons.entry(why).or_default() += 1;
            }
        }
    }
    let reasons: Vec<String> = reasons.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    emit(&format_args!(
        "hotplug done blocks={} tried={tried} offlined={offlined} onlined={onlined} offline_failed={offline_failed} online_failed={online_failed} skipped_protected={skipped} offline_errors={}",
        blocks.len(),
        if reasons.is_empty() { "-".to_string() } else { reasons.join(",") }
    ))
}

fn cycle_eater(
    mib: usize,
    node: i32,
    period: u64,
    on: u64,
    off: u64,
    secs: Duration,
) -> Result<()> {
    let t0 = Instant::now();
    let mut held: Option<AnonMapping> = None;
    let mut cycles = 0u64;
    emit(&format_args!("eater pid={} ready", std::process::id()))?;
    while t0.elapsed() < secs {
        let k = t0.elapsed().as_secs() % period;
        let want = (on..off).contains(&k);
        if want && held.is_none() {
            held = Some(crate::place(mib, node)?);
            cycles += 1;
            emit(&format_args!("eater on t={:.1}", uptime()))?;
        } else if !want && held.is_some() {
            held = None;
            emit(&format_args!("eater off t={:.1}", uptime()))?;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    emit(&format_args!("eater done cycles={cycles}"))
}
