//! The daemon: the engine on a real machine (`tierd run`).
//!
//! ```text
//!  preflight ── topology (sysfs) ─▶ engine Topology; refuse one tier; warn when the kernel's
//!               own tiering (numa_balancing bit 2) or demotion would fight tierd; check that
//!               /proc is this process's pid namespace
//!  loop, every engine interval:
//!    LinuxBackend::drain_owner_updates  scope (pids / cgroups / all), each process held by a
//!                                       pidfd; numa_maps policies when maps changed
//!    LinuxBackend::drain_observations   feeds (DAMON, idle, perf) -> accessed ranges
//!                                       -> tierd_linux::source::locate (each page's folio
//!                                          from ProcFolios, one observation per folio)
//!                                       -> Observations
//!    LinuxBackend::usage                node MemFree, cgroup memory.low and fast-tier usage
//!    Engine::tick -> batches -> LinuxBackend::migrate (hugetlb pages held back unless the
//!                                                      target's pool has a free one; then
//!                                                      move_pages, after an identity check;
//!                                                      or only printed: dry run)
//!  every refresh: a Snapshot for /metrics and /status
//!  SIGINT/SIGTERM: the stop flag is read between passes, so the batch in flight finishes
//!  SIGHUP: between passes, the file is read again and what can change live applied
//!          ([`reload`], crate::reload), the engine's hotness store kept
//! ```
//!
//! Everything goes through [`tierd_engine::step`], the same loop the simulator runs.
//!
//! # Failure model
//!
//! Only a bad configuration and a machine where nothing can run are fatal, and only at start
//! ([`DaemonError`], with its exit code). Once running, everything a host does on its own —
//! processes exiting, pids reused, maps changing, DAMON refusing a commit because a target
//! exited, a node or a cgroup going away, descriptors or memory running short — is counted by
//! reason in [`Faults`] (`tierd_faults_total{reason}` and `/status`), logged at most once a
//! minute per reason, and survived: the pass skips what failed and the next one retries.
//! docs/daemon.md has the table of reasons.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tierd_engine::plan::{CgroupUsage, NodeUsage};
use tierd_engine::policy::{Owner, PolicyMode};
use tierd_engine::topology::Topology;
use tierd_engine::types::{Bytes, CgroupId, Nanos, NodeId, NodeMask, SpaceId, PAGE_SHIFT};
use tierd_engine::{
    Backend, Engine, IdleObservation, MigrationBatch, MigrationKind, MigrationReport, MoveError,
    MoveOutcome, Observation, OwnerUpdate, SourceKind, StepBuffers, SystemUsage,
};

use crate::config::{DaemonConfig, HugetlbPolicy};
use crate::hugepages::FreeHugePages;
use crate::metrics::{
    MoverSnapshot, NodeSnapshot, ProcessSnapshot, SharedSnapshot, Snapshot, SourceSnapshot,
};
use tierd_engine::types::{PageSize, Vpn};
use tierd_linux::mover::{Mover, MoverConfig, MoverError};
use tierd_linux::process::ProcessHandle;
use tierd_linux::read::cgroup::{read_proc_cgroup, unified_path, CgroupFs};
use tierd_linux::read::meminfo::read_node_meminfo;
use tierd_linux::read::numa_maps::{policy_ranges, read_vmas, Vma};
use tierd_linux::read::proc::{list_pids, read_stat, read_status, USER_HZ};
use tierd_linux::read::task::{cpu_ticks_by_tid, home_node, read_tasks, Placement};
use tierd_linux::read::topology::{
    read_demotion_enabled, read_numa_balancing, read_system_topology, SystemTopology,
};
use tierd_linux::read::topology::{read_node_frames, NodeFrames};
use tierd_linux::read::vmstat::{read_vmstat, Vmstat};
use tierd_linux::read::ReadError;
use tierd_linux::source::folio::{FolioMap, FolioMethod, ProcFolios};
use tierd_linux::source::locate::{locate, locate_cached, LocateParams, LocateStats, Locator};
use tierd_linux::source::placement::PlacementCache;
use tierd_linux::source::verify::{AccessVerifier, Verdict};
use tierd_linux::source::{AccessedRange, Feed, IdleRange};
use tierd_linux::status::FolioSnapshot;

pub use crate::error::{chain, DaemonError, EXIT_CONFIG, EXIT_UNAVAILABLE};

/// How often a repeated fault of one reason is logged (its count grows every time).
const FAULT_LOG_EVERY: Duration = Duration::from_secs(60);

/// What went wrong while running and was survived, counted by reason (the names are stable:
/// docs/daemon.md's failure model lists them). Each reason is logged (tracing, `warn`) the
/// first time and then at most once a minute with the number suppressed meanwhile, so a
/// fault that repeats every pass cannot flood the journal.
#[derive(Debug, Default)]
pub struct Faults {
    counts: BTreeMap<String, u64>,
    logged: HashMap<String, (Instant, u64)>,
}

impl Faults {
    /// Counts one fault of `reason`, logging `detail` if this reason was not logged in the
    /// last minute.
    pub fn record(&mut self, reason: &str, detail: &dyn std::fmt::Display) {
        *self.counts.entry(reason.to_string()).or_default() += 1;
        let now = Instant::now();
        match self.logged.get_mut(reason) {
            Some((at, suppressed)) if now.duration_since(*at) < FAULT_LOG_EVERY => {
                *suppressed += 1;
            }
            Some((at, suppressed)) => {
                tracing::warn!(reason, suppressed = *suppressed, "{detail}");
                (*at, *suppressed) = (now, 0);
            }
            None => {
                tracing::warn!(reason, "{detail}");
                self.logged.insert(reason.to_string(), (now, 0));
            }
        }
    }

    /// Counts `n` faults of `reason` that need no log line (an expected race, e.g. a
    /// process that exited between two reads).
    pub fn count(&mut self, reason: &str, n: u64) {
        if n > 0 {
            *self.counts.entry(reason.to_string()).or_default() += n;
        }
    }

    /// The counts by reason.
    #[must_use]
    pub fn counts(&self) -> &BTreeMap<String, u64> {
        &self.counts
    }

    /// The count of one reason.
    #[must_use]
    pub fn get(&self, reason: &str) -> u64 {
        self.counts.get(reason).copied().unwrap_or(0)
    }
}

/// The fault reason for an OS error met reading `/proc` or sysfs: descriptors, memory and
/// would-block are named apart (they say the host, not a process, is short).
fn io_reason(prefix: &str, errno: Option<i32>) -> String {
    let what = match errno {
        Some(libc::EMFILE | libc::ENFILE) => "emfile",
        Some(libc::ENOMEM) => "enomem",
        Some(libc::EAGAIN) => "eagain",
        Some(libc::EACCES | libc::EPERM) => "denied",
        Some(libc::ENOENT | libc::ESRCH) => "gone",
        Some(libc::EBUSY) => "ebusy",
        Some(libc::EINVAL) => "einval",
        _ => "error",
    };
    format!("{prefix}_{what}")
}

fn read_errno(e: &ReadError) -> Option<i32> {
    match e {
        ReadError::Io { source, .. } => source.raw_os_error(),
        _ => None,
    }
}

/// What the environment check found.
#[derive(Debug)]
pub struct Preflight {
    /// The machine as sysfs describes it.
    pub system: SystemTopology,
    /// The engine's view: tiers and nodes (the `[topology]` override's, when set).
    pub topology: Topology,
    /// The kernel's tiers, when `[topology]` overrides them.
    pub kernel_topology: Option<Topology>,
    /// `kernel.numa_balancing`, when the kernel has it.
    pub numa_balancing: Option<u32>,
    /// `/sys/kernel/mm/numa/demotion_enabled`, when present.
    pub demotion_enabled: Option<bool>,
    /// Things the operator should know (tierd still runs).
    pub warnings: Vec<String>,
}

impl Preflight {
    /// Reads the topology and the kernel's own tiering settings; refuses a machine with one
    /// tier.
    ///
    /// # Errors
    /// [`DaemonError::NothingToTier`] with one tier; [`DaemonError::Read`] when sysfs cannot be
    /// read; [`DaemonError::Topology`] when the engine refuses what sysfs says.
    pub fn check(cfg: &DaemonConfig) -> Result<Preflight, DaemonError> {
        let roots = &cfg.system;
        let system = read_system_topology(&roots.sys_root)?;
        let kernel = system.to_engine()?;
        let (topology, kernel_topology) = if cfg.topology.is_set() {
            (override_topology(&system, &cfg.topology)?, Some(kernel))
        } else {
            (kernel, None)
        };
        if topology.tiers().len() < 2 {
            let nodes: Vec<String> = system.nodes.iter().map(|n| n.id.0.to_string()).collect();
            return Err(DaemonError::NothingToTier(format!(
                "every memory node ({}) is in one tier; tierd needs a slower tier (a CPU-less \
                 CXL or PMEM node that the kernel places in a lower memory_tier), or name the \
                 tiers in [topology] (fast = [..], slow = [..]) when the kernel's are wrong",
                nodes.join(", ")
            )));
        }
        let numa_balancing = read_numa_balancing(&roots.proc_root)?.map(|b| b.0);
        let demotion_enabled = read_demotion_enabled(&roots.sys_root)?;
        let mut warnings = Vec::new();
        if let Some(k) = &kernel_topology {
            warnings.push(format!(
                "[topology] overrides the kernel's memory tiers: the kernel has {}, tierd uses {}",
                tiers_line(k),
                tiers_line(&topology)
            ));
        }
        if let Some(w) = check_pid_namespace(&roots.proc_root, std::process::id())? {
            warnings.push(w);
        }
        if let Some(nb) = numa_balancing {
            // kernel/sched/fair.c: NUMA_BALANCING_MEMORY_TIERING = 0x2.
            if nb & 2 != 0 {
                warnings.push(format!(
                    "kernel.numa_balancing = {nb} includes memory tiering (2): the kernel \
                     promotes on its own hint faults and will compete with tierd; set it to 0 \
                     (or 1) to let tierd decide"
                ));
            }
        }
        if demotion_enabled == Some(true) && cfg.engine.demotion.enabled {
            warnings.push(
                "the kernel demotes on reclaim (/sys/kernel/mm/numa/demotion_enabled = true) \
                 and tierd demotes too: both may move the same cold pages; consider turning one \
                 off"
                .into(),
            );
        }
        Ok(Preflight {
            system,
            topology,
            kernel_topology,
            numa_balancing,
            demotion_enabled,
            warnings,
        })
    }

    /// What tierd found, for the start-up message.
    #[must_use]
    pub fn describe(&self) -> String {
        let mut s = String::new();
        if let Some(k) = &self.kernel_topology {
            let _ = writeln!(
                s,
                "kernel's tiers (overridden by [topology]): {}",
                tiers_line(k)
            );
            let _ = writeln!(
                s,
                "tierd's tiers ([topology]): {}",
                tiers_line(&self.topology)
            );
        }
        for (i, tier) in self.topology.tiers().iter().enumerate() {
            let nodes: Vec<String> = tier.nodes.iter().map(|n| n.0.to_string()).collect();
            let _ = writeln!(s, "tier {i}: nodes {}", nodes.join(","));
        }
        for n in &self.system.nodes {
            let total = n.meminfo.mem_total().map_or(0, |b| b.0);
            let _ = writeln!(
                s,
                "node {}: {} MiB, {} CPUs{}",
                n.id.0,
                total >> 20,
                n.cpus.len(),
                if self.topology.is_toptier(n.id) {
                    ", top tier"
                } else {
                    ""
                }
            );
        }
        let _ = writeln!(
            s,
            "kernel: numa_balancing = {}, demotion_enabled = {}",
            self.numa_balancing
                .map_or_else(|| "absent".to_string(), |v| v.to_string()),
            self.demotion_enabled
                .map_or_else(|| "absent".to_string(), |v| v.to_string())
        );
        s
    }
}

/// A topology's tiers on one line, fastest first: `memory_tier4 = nodes 0,1; memory_tier5 =
/// nodes 2` (the kernel's numbering: `adistance >> MEMTIER_CHUNK_BITS`).
#[must_use]
pub fn tiers_line(t: &Topology) -> String {
    let tiers: Vec<String> = t
        .tiers()
        .iter()
        .map(|tier| {
            let nodes: Vec<String> = tier.nodes.iter().map(|n| n.0.to_string()).collect();
            format!("memory_tier{} = nodes {}", tier.id, nodes.join(","))
        })
        .collect();
    tiers.join("; ")
}

/// The engine's topology with `[topology]`'s tiers in place of the kernel's: tier k of the
/// override (fastest first) gets the abstract distance of the kernel's DRAM tier plus k tiers
/// (`MEMTIER_ADISTANCE_DRAM + k x MEMTIER_CHUNK_SIZE`, mm/memory-tiers.c), so the engine's
/// tiers, demotion targets and top tier follow from it exactly as from the kernel's.
///
/// # Errors
/// [`DaemonError::TopologyOverride`] when a named node has no memory here, a memory node is
/// not named; [`DaemonError::TopologyRefused`] when the engine refuses the result (no node
/// with CPUs in the top tier...); [`DaemonError::Topology`] when sysfs's description is incomplete.
pub fn override_topology(
    system: &SystemTopology,
    o: &crate::config::TopologyOverride,
) -> Result<Topology, DaemonError> {
    use tierd_engine::topology::{MEMTIER_ADISTANCE_DRAM, MEMTIER_CHUNK_SIZE};
    let (mut specs, dist) = system.node_specs()?;
    let tiers = o.tiers();
    for (k, tier) in tiers.iter().enumerate() {
        for n in tier {
            if !specs.iter().any(|s| s.id.0 == *n) {
                return Err(DaemonError::TopologyOverride(format!(
                    "node {n} has no memory on this machine (memory nodes: {})",
                    specs
                        .iter()
                        .map(|s| s.id.0.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                )));
            }
        }
        let adist = MEMTIER_ADISTANCE_DRAM + MEMTIER_CHUNK_SIZE * u32::try_from(k).unwrap_or(0);
        for spec in specs.iter_mut().filter(|s| tier.contains(&s.id.0)) {
            spec.adistance = Some(adist);
        }
    }
    if let Some(missing) = specs
        .iter()
        .find(|s| !tiers.iter().flatten().any(|n| *n == s.id.0))
    {
        return Err(DaemonError::TopologyOverride(format!(
            "node {} has memory but is in no tier: name every memory node",
            missing.id.0
        )));
    }
    Topology::new(specs, dist).map_err(DaemonError::TopologyRefused)
}

/// The inode of the initial pid namespace (include/linux/proc_ns.h `PROC_PID_INIT_INO`), as
/// `/proc/self/ns/pid` names it: `pid:[4026531836]`.
const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;

/// Checks that `proc_root` shows this process's pid namespace (`/proc/self` is our own pid):
/// otherwise the pids read there are not the ones `move_pages(2)` would move, and tierd
/// refuses to start. Returns a warning when that namespace is not the host's (tierd then
/// sees and tiers only the processes of its container), or when it cannot tell (a proc
/// root without `self`, as in a fixture tree).
///
/// # Errors
/// [`DaemonError::PidNamespace`] when `/proc/self` is another pid.
pub fn check_pid_namespace(proc_root: &Path, me: u32) -> Result<Option<String>, DaemonError> {
    let Ok(link) = std::fs::read_link(proc_root.join("self")) else {
        return Ok(Some(format!(
            "{}/self is not readable: cannot check that this /proc is tierd's own pid namespace",
            proc_root.display()
        )));
    };
    let seen = link.to_string_lossy().parse::<u32>().ok();
    if seen != Some(me) {
        return Err(DaemonError::PidNamespace {
            proc_root: proc_root.to_path_buf(),
            reason: format!(
                "/proc/self is {} but tierd is pid {me}: this /proc belongs to another pid \
                 namespace (mount the proc of tierd's own namespace, or run tierd in the \
                 host's)",
                link.display()
            ),
        });
    }
    let ns = std::fs::read_link(proc_root.join("self/ns/pid")).ok();
    let init = format!("pid:[{PROC_PID_INIT_INO}]");
    Ok(match ns {
        Some(ns) if ns.to_string_lossy() == init => None,
        Some(ns) => Some(format!(
            "tierd runs in a child pid namespace ({}): it sees and tiers only the processes \
             of that namespace (for a host-wide daemon, run it with the host's pid namespace, \
             e.g. hostPID: true)",
            ns.display()
        )),
        None => Some("cannot read /proc/self/ns/pid: pid namespace unknown".to_string()),
    })
}

/// One process in scope, as last read.
#[derive(Debug)]
struct ScopedProcess {
    /// The process itself (a pidfd): a reused pid is another process.
    handle: ProcessHandle,
    comm: String,
    cgroup: String,
    /// `Mems_allowed_list`: its cpuset's nodes; `move_pages(2)` to another node fails with
    /// `EACCES` (mm/migrate.c `do_pages_move`: `!node_isset(node, task_nodes)`).
    mems_allowed: NodeMask,
    vmas: Vec<Vma>,
    /// A hash of `/proc/PID/maps` when `numa_maps` was last read: the VMAs and their
    /// policies change only when it does.
    maps_sig: u64,
    /// Whether `/proc/PID/maps` changed at the last refresh (its pages' known placement is
    /// dropped: a range may have been unmapped and mapped again elsewhere).
    maps_changed: bool,
    /// When `numa_maps` was last read; `None` until the first read.
    numa_read_at: Option<Nanos>,
    /// Where its threads run (the accessing node of its unattributed observations).
    threads: ThreadsRead,
}

/// What the last readings of a process's threads said (`/proc/PID/task/*/stat`).
#[derive(Debug, Default)]
struct ThreadsRead {
    /// `Threads` from the latest `status` read.
    count: Option<u32>,
    /// `Threads` when the tasks were last read.
    count_at_read: Option<u32>,
    /// Refreshes since the tasks were last read; `None` before the first read.
    age: Option<u32>,
    /// The last reading changed `home`: read again on the next refresh.
    unsettled: bool,
    /// Each thread's CPU time at the last read.
    ticks: BTreeMap<u32, u64>,
    /// The node all of its recently running threads run on.
    home: Option<NodeId>,
}

/// The threads of a process whose thread count did not change are re-read every this many
/// refreshes (5 s with the default `refresh_ms`): a pinned process never moves, and the
/// scheduler moves an unpinned one between nodes over seconds (kernel/sched/fair.c
/// `task_numa_placement()` works per scan period, 1 s and up), while each reading costs a
/// `stat` read per thread.
const THREADS_EVERY_REFRESHES: u32 = 5;

/// Whether the daemon reads threads for the accessing node: only where the engine uses it
/// (precise mode, `accessing_node = "threads"`); default mode promotes to one target
/// whatever the accessor.
fn threads_attribution(cfg: &DaemonConfig) -> bool {
    cfg.engine.mode == tierd_engine::hotness::HotnessMode::Precise
        && cfg.engine.accessing_node == tierd_engine::AccessingNode::Threads
}

/// Re-reads where `pid`'s threads run when it is due (the first refresh, the one after a
/// change, a changed thread count, or every [`THREADS_EVERY_REFRESHES`]), and updates its
/// home node by [`home_node`]: the node all threads that ran since the last reading last
/// ran on; none when they span nodes; unchanged when none ran.
fn read_threads(
    proc_root: &Path,
    cpu_nodes: &BTreeMap<u32, NodeId>,
    faults: &mut Faults,
    pid: u32,
    t: &mut ThreadsRead,
) {
    let due = match t.age {
        None => true,
        Some(age) => {
            t.unsettled || t.count != t.count_at_read || age + 1 >= THREADS_EVERY_REFRESHES
        }
    };
    if !due {
        t.age = t.age.map(|a| a + 1);
        return;
    }
    match read_tasks(proc_root, pid) {
        Ok(tasks) => {
            let before = t.home;
            match home_node(&tasks, &t.ticks, |cpu| cpu_nodes.get(&cpu).copied()) {
                Placement::Node(n) => t.home = Some(n),
                Placement::Spread => t.home = None,
                Placement::Idle => {}
            }
            t.unsettled = t.home != before;
            t.ticks = cpu_ticks_by_tid(&tasks);
            t.count_at_read = t.count;
            t.age = Some(0);
        }
        // Exiting: the next refresh drops it.
        Err(e) if e.is_gone() => {}
        Err(e) => {
            t.home = None;
            let r = io_reason("threads_read", read_errno(&e));
            faults.record(&r, &chain(&e));
        }
    }
}

/// The Linux implementation of the engine's [`Backend`]. It never fails once built: what
/// goes wrong is counted in [`LinuxBackend::faults`] and skipped.
pub struct LinuxBackend {
    cfg: DaemonConfig,
    dry_run: bool,
    mover: Mover,
    feeds: Vec<Box<dyn Feed>>,
    /// Feeds whose last `set_targets` failed: they are given the targets again on the next
    /// refresh even if the scope did not change.
    feeds_stale: Vec<bool>,
    cgroups: CgroupFs,
    cgroup_ids: BTreeMap<String, CgroupId>,
    next_cgroup_id: u32,
    procs: BTreeMap<u32, ScopedProcess>,
    /// The pids the feeds were last given.
    targets: Vec<u32>,
    /// Each CPU's node (sysfs `nodeN/cpulist`), for the accessing node of a process's
    /// observations; empty when it could not be read (then no process has one).
    cpu_nodes: BTreeMap<u32, NodeId>,
    /// Hold processes by pidfd (the proc root is our own `/proc`), else by start time.
    use_pidfd: bool,
    last_refresh: Option<Nanos>,
    ranges: Vec<AccessedRange>,
    pending_updates: Vec<OwnerUpdate>,
    node_ids: Vec<NodeId>,
    fast_nodes: Vec<NodeId>,
    /// What was survived, by reason.
    pub faults: Faults,
    /// Pages the dry run would have moved.
    pub planned_pages: u64,
    /// What locating the sources' ranges did, summed over the run.
    pub locate_stats: LocateStats,
    /// Dry-run lines, when a dry run is printing.
    pub dry_run_log: Vec<String>,
    /// Pages reported accessed, per refresh period (the hot side of `/status`).
    hot: HotWindow,
    /// The folio of each observed page (pagemap + kpageflags, else smaps).
    folios: ProcFolios,
    /// The folio method last logged, so that a change is logged once.
    folio_method_logged: Option<FolioMethod>,
    /// Where pages are looked up instead of `move_pages(2)` (tests over fixture trees,
    /// whose pids are not this host's processes).
    locator: Option<Box<dyn Locator<Error = MoverError>>>,
    /// Base pages of hugetlb folios held back from a batch: the target's pool had no free
    /// huge page of their size.
    pub hugetlb_no_free_pages: u64,
    /// The node of each physical frame, from the nodes' memory blocks (re-read every
    /// refresh, so that memory hot-plug is seen within a refresh period): a folio whose head
    /// frame pagemap showed is located without a `move_pages(2)` query.
    frames: NodeFrames,
    /// Where the loop's CPU went, by phase.
    pub phase_cpu: PhaseCpu,
    /// Pages recently found on a fast node, not located again until due
    /// (`daemon.placement_reverify_ms`).
    pub placement: PlacementCache,
    /// `pgmigrate_success` and the mover's moved pages at the last refresh: when the kernel
    /// moved more than tierd did, the placement cache is dropped.
    migrated_seen: Option<(u64, u64)>,
    /// The last usage read and when (see [`USAGE_MAX_AGE`]).
    usage_cache: Option<(Nanos, SystemUsage)>,
    /// Whether the loop is idle (nothing to move for `daemon.idle_after_ms`), when it last had
    /// something to move, and how often it went idle.
    pub pace: Pace,
    /// The access check of promotion candidates (`daemon.verify_window_ms`), when on.
    pub verifier: Option<AccessVerifier>,
    /// Why the access check is off (`None` while it runs).
    pub verify_off: Option<String>,
    /// DAMON's idle regions and how far the locating of their pages has come.
    idle: IdleWalk,
}

/// How often the pages of DAMON's idle regions are located for idle demotion, and how many
/// per time: idle ages are tens of seconds or more, and the engine demotes at most
/// `demotion.idle_rate_limit_mbps` (64 MB/s by default, ~16 Ki pages a second), so a quarter
/// GiB of lookups a second is ahead of it while costing a few ms of `move_pages(2)` queries.
const IDLE_LOCATE_EVERY: Nanos = Nanos::from_millis(1000);
const IDLE_LOCATE_PAGES: u64 = 65_536;

/// The latest idle regions of every feed and a cursor over them: each locate takes the next
/// [`IDLE_LOCATE_PAGES`] pages (by pid and address, wrapping), so a tenant of many GiB is
/// covered in turn rather than its first pages over and over.
#[derive(Debug, Default)]
struct IdleWalk {
    ranges: Vec<IdleRange>,
    /// The next page to locate: (pid, vpn).
    cursor: (u32, u64),
    last: Option<Nanos>,
}

impl IdleWalk {
    /// Takes the latest idle ranges, by pid and address (the order [`Self::next`] walks).
    fn set_ranges(&mut self, mut ranges: Vec<IdleRange>) {
        ranges.sort_unstable_by_key(|r| (r.pid, r.start.0));
        self.ranges = ranges;
    }

    /// The next pages to locate among the ranges idle since `limit` or before, at most
    /// `budget`, as accessed ranges carrying their idle start as their time (what locate
    /// copies into each observation).
    fn next(&mut self, limit: Nanos, budget: u64) -> Vec<AccessedRange> {
        let due: Vec<&IdleRange> = self.ranges.iter().filter(|r| r.since <= limit).collect();
        let total: u64 = due.iter().map(|r| r.nr_pages).sum();
        if total <= budget {
            self.cursor = (0, 0);
        }
        let mut out = Vec::new();
        let mut left = budget;
        // Two laps at most: from the cursor to the end, then from the start (only when
        // there is more than the budget, so no page is taken twice).
        for lap in 0..2 {
            for r in &due {
                if left == 0 {
                    break;
                }
                let end = r.start.0 + r.nr_pages;
                if (r.pid, end) <= self.cursor {
                    continue;
                }
                let from = if r.pid == self.cursor.0 {
                    r.start.0.max(self.cursor.1)
                } else {
                    r.start.0
                };
                let n = (end - from).min(left);
                out.push(AccessedRange {
                    pid: r.pid,
                    start: Vpn(from),
                    nr_pages: n,
                    time: r.since,
                    kind: SourceKind::AccessedBitScan,
                    accessing_node: None,
                    nr_accesses: 0,
                    pfn: None,
                });
                left -= n;
                self.cursor = (r.pid, from + n);
            }
            if left == 0 || lap == 1 || total <= budget {
                break;
            }
            self.cursor = (0, 0);
        }
        out
    }
}

/// Tells every source whether the access check is on ([`Feed::set_access_check`]): when the
/// backend opens it, and again when the idle bitmap fails and it goes off.
fn tell_access_check(feeds: &mut [Box<dyn Feed>], on: bool) {
    for f in feeds {
        f.set_access_check(on);
    }
}

/// The access check, if it can run (`daemon.verify_window_ms` > 0, DAMON on, the idle source
/// off: it would share the bitmap, and its own observations are per page already; not in a
/// dry run, which must touch nothing), and else why not.
fn open_verifier(cfg: &DaemonConfig, dry_run: bool) -> (Option<AccessVerifier>, Option<String>) {
    let off = |why: &str| (None, Some(why.to_string()));
    if cfg.daemon.verify_window_ms == 0 {
        return off("daemon.verify_window_ms = 0");
    }
    if dry_run {
        return off("dry run");
    }
    if !cfg
        .sources
        .enabled
        .contains(&crate::config::SourceName::Damon)
    {
        return off("no region-granular source (damon) enabled");
    }
    if cfg
        .sources
        .enabled
        .contains(&crate::config::SourceName::Idle)
    {
        return off("the idle source uses the idle bitmap");
    }
    match AccessVerifier::open(
        &cfg.system.sys_root,
        Nanos::from_millis(cfg.daemon.verify_window_ms),
    ) {
        Ok(v) => (Some(v), None),
        Err(e) => (None, Some(chain(&e))),
    }
}

/// The daemon's pace (docs/daemon.md, "Cost"): after `daemon.idle_after_ms` with no page of a
/// slow tier observed, no accessed region below the floors that is not known fast, and no
/// migration, the sources are told to sample less often
/// ([`Feed::set_pace`]); the first slow-tier observation or migration brings them back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pace {
    /// Idle now.
    pub idle: bool,
    /// The last time there was something to move (a slow-tier observation or a migration).
    pub last_work: Option<Nanos>,
    /// Times the loop went idle.
    pub idle_periods: u64,
}

/// How many times less often the idle loop passes and refreshes (see [`Pace`]): a pass every
/// 500 ms and a refresh every 5 s at the defaults, which bounds how late an eater's pressure
/// on a fast node (the demoter's cue) and a new process in scope are seen while idle.
const IDLE_SLOWDOWN: u32 = 5;

/// How long a usage read serves the engine's passes while tierd moves nothing.
const USAGE_MAX_AGE: Nanos = Nanos(500_000_000);

/// The loop's CPU time by phase (this thread's clock, [`tierd_linux::sys::thread_cpu_time`]):
/// what an operator (and the lab) reads to see what tierd's cost is made of. Phases:
/// `refresh` (scope, maps, numa_maps, threads, memory blocks), `sources` (reading the
/// sources: DAMON's regions), `locate` (regions to folios and nodes: pagemap, kpageflags,
/// location queries), `usage` (node meminfo, cgroups), `engine` (the engine's own work:
/// ingest, planning), `move` (`move_pages(2)`), `publish` (the `/status` snapshot).
#[derive(Clone, Debug, Default)]
pub struct PhaseCpu {
    secs: BTreeMap<&'static str, Duration>,
}

impl PhaseCpu {
    /// The phase names, in loop order.
    pub const PHASES: [&'static str; 7] = [
        "refresh", "sources", "locate", "usage", "engine", "move", "publish",
    ];

    /// Runs `f`, charging its CPU time to `phase`.
    pub fn time<T>(&mut self, phase: &'static str, f: impl FnOnce() -> T) -> T {
        let t0 = tierd_linux::sys::thread_cpu_time();
        let r = f();
        self.add(
            phase,
            tierd_linux::sys::thread_cpu_time().saturating_sub(t0),
        );
        r
    }

    /// Charges `d` to `phase`.
    pub fn add(&mut self, phase: &'static str, d: Duration) {
        *self.secs.entry(phase).or_default() += d;
    }

    /// The CPU time charged to `phase`.
    #[must_use]
    pub fn get(&self, phase: &str) -> Duration {
        self.secs.get(phase).copied().unwrap_or_default()
    }

    /// Seconds by phase, every phase present.
    #[must_use]
    pub fn seconds(&self) -> BTreeMap<String, f64> {
        Self::PHASES
            .iter()
            .map(|p| ((*p).to_string(), self.get(p).as_secs_f64()))
            .collect()
    }
}

/// The daemon's page lookup: `move_pages(2)` through the mover, or a replacement.
struct Lookup<'a> {
    mover: &'a mut Mover,
    other: Option<&'a mut (dyn Locator<Error = MoverError> + 'static)>,
    frames: &'a NodeFrames,
}

impl Locator for Lookup<'_> {
    type Error = MoverError;

    fn nodes(&mut self, pid: u32, addrs: &[u64]) -> Result<Vec<Result<NodeId, i32>>, MoverError> {
        match &mut self.other {
            Some(l) => l.nodes(pid, addrs),
            None => self.mover.nodes(pid, addrs),
        }
    }

    fn node_of_frame(&self, pfn: tierd_engine::types::Pfn) -> Option<NodeId> {
        match &self.other {
            Some(l) => l.node_of_frame(pfn),
            None => self.frames.node_of(pfn.0),
        }
    }
}

/// What the folio method means for the operator, for the start-up lines and the log.
#[must_use]
pub fn describe_folio_method(m: FolioMethod) -> &'static str {
    match m {
        FolioMethod::Kpageflags => {
            "exact per page: pagemap PFNs and /proc/kpageflags (THP head/tail, hugetlb)"
        }
        FolioMethod::Smaps => {
            "per mapping from /proc/PID/smaps (AnonHugePages, FilePmdMapped, hugetlb VMAs); \
             /proc/kpageflags is not readable here (needs CAP_SYS_ADMIN): pages of mappings \
             that smaps cannot tell are not observed (counted as folio_unknown)"
        }
        FolioMethod::Unavailable => {
            "neither /proc/kpageflags nor /proc/PID/smaps is readable: no page's folio \
             can be told, so nothing is observed or moved (counted as folio_unknown)"
        }
    }
}

/// The folio method this host allows under `proc_root`, as the backend will find it.
#[must_use]
pub fn probe_folio_method(proc_root: &Path) -> FolioMethod {
    ProcFolios::new(proc_root).method()
}

/// The pages the hotness sources reported accessed, as `/status` shows them ("hot"): the
/// distinct base pages (pid, vpn) that became observations (located by `move_pages(2)`, and
/// not dropped by `locate`'s slow-part filter) during one refresh period, counted per node at
/// the end of the period. A page seen in several passes counts once, on the node it was last
/// seen on. The set is bounded by what the sources report in one period
/// (`sources.damon.max_pages_per_pass` per pass); its allocation is kept for the next one.
#[derive(Debug, Default)]
struct HotWindow {
    /// (pid, head vpn) -> (node, base pages): a huge folio is one entry of all its pages.
    current: HashMap<(u32, u64), (NodeId, u64)>,
    last: BTreeMap<u32, BTreeMap<u32, u64>>,
}

impl HotWindow {
    #[cfg(test)]
    fn note(&mut self, pid: u32, vpn: u64, node: NodeId) {
        self.note_folio(pid, vpn, 1, node);
    }

    /// A folio of `pages` base pages at `head`.
    fn note_folio(&mut self, pid: u32, head: u64, pages: u64, node: NodeId) {
        self.current.insert((pid, head), (node, pages));
    }

    /// Ends the period: its pages become the counts [`HotWindow::last`] reports.
    fn roll(&mut self) {
        let mut last: BTreeMap<u32, BTreeMap<u32, u64>> = BTreeMap::new();
        for ((pid, _), (node, pages)) in self.current.drain() {
            *last
                .entry(pid)
                .or_default()
                .entry(u32::from(node.0))
                .or_default() += pages;
        }
        self.last = last;
    }

    /// Hot base pages of `pid` per node in the last complete period.
    fn last(&self, pid: u32) -> BTreeMap<u32, u64> {
        self.last.get(&pid).cloned().unwrap_or_default()
    }
}

impl std::fmt::Debug for LinuxBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinuxBackend")
            .field("dry_run", &self.dry_run)
            .field("procs", &self.procs.keys().collect::<Vec<_>>())
            .field(
                "feeds",
                &self.feeds.iter().map(|f| f.name()).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// Not moved because the daemon runs with `--dry-run` (`ECANCELED`).
pub const DRY_RUN_ERRNO: i32 = 125;

fn hash_bytes(b: &[u8]) -> u64 {
    // std's SipHash with fixed keys: deterministic, and a collision only delays a re-read
    // to the next `numa_maps_max_age_ms`.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.hash(&mut h);
    h.finish()
}

impl LinuxBackend {
    /// A backend for `topology` over the given feeds.
    #[must_use]
    pub fn new(
        cfg: DaemonConfig,
        topology: &Topology,
        mut feeds: Vec<Box<dyn Feed>>,
        dry_run: bool,
    ) -> Self {
        let cgroups = CgroupFs::new(cfg.system.cgroup_root.clone());
        let (verifier, verify_off) = open_verifier(&cfg, dry_run);
        tell_access_check(&mut feeds, verifier.is_some());
        match &verify_off {
            None => tracing::info!(
                window_ms = cfg.daemon.verify_window_ms,
                "access check on: a DAMON candidate moves only if its own accessed bit says so"
            ),
            Some(why) => tracing::info!(reason = %why, "access check off"),
        }
        let placement = PlacementCache::new(
            Nanos::from_millis(cfg.daemon.placement_reverify_ms),
            Nanos::from_millis(cfg.sources.damon.read_interval_ms),
        );
        let mut cgroup_ids = BTreeMap::new();
        cgroup_ids.insert("/".to_string(), CgroupId::ROOT);
        let feeds_stale = vec![false; feeds.len()];
        let use_pidfd = tierd_linux::process::proc_is_ours(&cfg.system.proc_root);
        let folios = ProcFolios::new(&cfg.system.proc_root);
        let method = folios.method();
        if method == FolioMethod::Unavailable {
            tracing::warn!(folios = %method, "{}", describe_folio_method(method));
        } else {
            tracing::info!(folios = %method, "{}", describe_folio_method(method));
        }
        let mover = Mover::new(MoverConfig::default()).with_split_counter(&cfg.system.proc_root);
        let frames = read_node_frames(&cfg.system.sys_root).unwrap_or_default();
        let mut faults = Faults::default();
        let cpu_nodes = if threads_attribution(&cfg) {
            match read_system_topology(&cfg.system.sys_root) {
                Ok(sys) => sys
                    .nodes
                    .iter()
                    .flat_map(|n| n.cpus.iter().map(move |c| (*c, n.id)))
                    .collect(),
                Err(e) => {
                    let r = io_reason("cpu_nodes_read", read_errno(&e));
                    faults.record(&r, &chain(&e));
                    BTreeMap::new()
                }
            }
        } else {
            BTreeMap::new()
        };
        LinuxBackend {
            cfg,
            dry_run,
            mover,
            feeds,
            feeds_stale,
            cgroups,
            cgroup_ids,
            next_cgroup_id: 1,
            procs: BTreeMap::new(),
            targets: Vec::new(),
            cpu_nodes,
            use_pidfd,
            last_refresh: None,
            ranges: Vec::new(),
            pending_updates: Vec::new(),
            node_ids: topology.nodes().iter().map(|n| n.id).collect(),
            fast_nodes: topology
                .nodes()
                .iter()
                .map(|n| n.id)
                .filter(|n| topology.is_toptier(*n))
                .collect(),
            faults,
            planned_pages: 0,
            locate_stats: LocateStats::default(),
            dry_run_log: Vec::new(),
            hot: HotWindow::default(),
            folios,
            folio_method_logged: Some(method),
            locator: None,
            hugetlb_no_free_pages: 0,
            frames,
            phase_cpu: PhaseCpu::default(),
            placement,
            migrated_seen: None,
            usage_cache: None,
            pace: Pace::default(),
            verifier,
            verify_off,
            idle: IdleWalk::default(),
        }
    }

    /// Replaces the configuration after a reload that [`crate::reload::live_changes`]
    /// accepted: what the backend reads on use (scope, refresh ages, idle delay, hugetlb
    /// policy, DAMON's read-back filters) applies from the next pass or refresh.
    pub fn set_config(&mut self, cfg: DaemonConfig) {
        self.cfg = cfg;
    }

    /// The configuration in force.
    #[must_use]
    pub fn config(&self) -> &DaemonConfig {
        &self.cfg
    }

    /// Looks pages up with `locator` instead of `move_pages(2)` (tests over fixture trees:
    /// their pids are not processes of this host).
    #[must_use]
    pub fn with_locator(mut self, locator: Box<dyn Locator<Error = MoverError>>) -> Self {
        self.locator = Some(locator);
        self
    }

    /// The folio method in force (`kpageflags`, `smaps`, `unavailable`).
    #[must_use]
    pub fn folio_method(&self) -> FolioMethod {
        self.folios.method()
    }

    /// The folio counters for `/status` and `/metrics`.
    #[must_use]
    pub fn folio_snapshot(&self) -> FolioSnapshot {
        FolioSnapshot {
            method: self.folios.method().name().to_string(),
            huge_folios_observed: self.locate_stats.huge_folios,
            unknown_pages: self.locate_stats.folio_unknown,
            hugetlb_left_pages: self.locate_stats.hugetlb_left,
            hugetlb_no_free_pages: self.hugetlb_no_free_pages,
        }
    }

    /// Whether page `vpn` of `pid` is in a hugetlb VMA (`huge` in its `numa_maps` line:
    /// fs/proc/task_mmu.c `show_numa_map()` prints it for `is_vm_hugetlb_page(vma)`), as of
    /// the last refresh.
    fn is_hugetlb(&self, pid: u32, vpn: Vpn) -> bool {
        self.procs.get(&pid).is_some_and(|p| {
            p.vmas
                .iter()
                .find(|v| v.start <= vpn && v.end.is_some_and(|e| vpn < e))
                .is_some_and(|v| v.numa.huge)
        })
    }

    /// The outcome of each page of `batch` that is held back before `move_pages(2)`: a
    /// hugetlb folio under `daemon.hugetlb = "leave"` (never observed, so never planned;
    /// refused here all the same), or under `"move"` when the target node's pool has no free
    /// huge page of its size left (`free_hugepages`, claimed page by page within the batch).
    /// Held back as `NoMem` (there is no page to move it into), so that the engine backs the
    /// page off rather than planning it every pass.
    fn hold_back_hugetlb(&mut self, batch: &MigrationBatch) -> Vec<Option<MoveOutcome>> {
        let mut out = vec![None; batch.pages.len()];
        if !batch.pages.iter().any(|m| m.page.size.is_huge()) {
            return out;
        }
        let sys_root = self.cfg.system.sys_root.clone();
        let mut pools = FreeHugePages::new(&sys_root);
        for (i, m) in batch.pages.iter().enumerate() {
            let size = m.page.size;
            if size == PageSize::Base || !self.is_hugetlb(m.page.space.0, m.page.vpn) {
                continue;
            }
            let pages = size.nr_pages().0;
            if self.cfg.daemon.hugetlb == HugetlbPolicy::Leave {
                self.faults.count("hugetlb_left_planned", 1);
                out[i] = Some(MoveOutcome::Failed(MoveError::Access));
                continue;
            }
            let free = match pools.claim(batch.target, size) {
                Ok(free) => free,
                Err(e) => {
                    let r = io_reason("hugepages_read", read_errno(&e));
                    self.faults.record(&r, &chain(&e));
                    false
                }
            };
            if !free {
                self.faults.count("hugetlb_no_free", 1);
                self.hugetlb_no_free_pages += pages;
                out[i] = Some(MoveOutcome::Failed(MoveError::NoMem));
            }
        }
        out
    }

    /// Holds back the promotion candidates the access check does not pass yet
    /// ([`AccessVerifier`]): `Deferred` while their window runs, `Untouched` when it found
    /// them untouched. A bitmap that stops answering turns the check off for the rest of the
    /// run (a fault reason and a warning), and the candidates move.
    fn hold_back_unverified(
        &mut self,
        now: Nanos,
        batch: &MigrationBatch,
        held: &mut [Option<MoveOutcome>],
    ) {
        let Some(verifier) = self.verifier.as_mut() else {
            return;
        };
        let idx: Vec<usize> = (0..batch.pages.len())
            .filter(|i| held[*i].is_none())
            .collect();
        let pages: Vec<(u32, Vpn)> = idx
            .iter()
            .map(|i| {
                let p = &batch.pages[*i].page;
                (p.space.0, p.size.head(p.vpn))
            })
            .collect();
        let proc_root = self.cfg.system.proc_root.clone();
        let procs = &self.procs;
        let open = |pid: u32| {
            // Only a process tierd holds a live handle on: a reused pid is never read.
            let p = procs.get(&pid)?;
            if !p.handle.is_alive(&proc_root) {
                return None;
            }
            tierd_linux::pagemap::Pagemap::open(&proc_root, pid).ok()
        };
        match verifier.check(now, &pages, open) {
            Ok(verdicts) => {
                for (i, v) in idx.into_iter().zip(verdicts) {
                    held[i] = match v {
                        Verdict::Move => None,
                        Verdict::Deferred => Some(MoveOutcome::Failed(MoveError::Deferred)),
                        Verdict::Untouched => Some(MoveOutcome::Failed(MoveError::Untouched)),
                    };
                }
            }
            Err(e) => {
                let why = chain(&e);
                self.faults.record("verify_bitmap", &why);
                tracing::warn!(error = %why, "access check off: the idle bitmap failed");
                self.verify_off = Some(format!("the idle bitmap failed: {why}"));
                self.verifier = None;
                // The sources fit their regions for a run without the check from the next
                // refresh on.
                tell_access_check(&mut self.feeds, false);
            }
        }
    }

    /// The mover (for its statistics).
    #[must_use]
    pub fn mover(&self) -> &Mover {
        &self.mover
    }

    /// Pids in scope, as last resolved.
    #[must_use]
    pub fn pids(&self) -> Vec<u32> {
        self.procs.keys().copied().collect()
    }

    /// Slow-tier pages of accessed regions not observed because the region's fast-tier pages
    /// explain its accesses.
    #[must_use]
    pub fn slow_explained(&self) -> u64 {
        self.locate_stats.slow_explained
    }

    /// The id of a cgroup path; ids are never reused, so a cgroup removed and another
    /// created cannot be mistaken for each other by the engine.
    fn cgroup_id(&mut self, path: &str) -> CgroupId {
        if let Some(id) = self.cgroup_ids.get(path) {
            return *id;
        }
        let id = CgroupId(self.next_cgroup_id);
        self.next_cgroup_id = self.next_cgroup_id.saturating_add(1);
        self.cgroup_ids.insert(path.to_string(), id);
        id
    }

    /// The pids the configured scope names now. A scoped cgroup that is gone, or unreadable,
    /// is counted and skipped; only a failure to list `/proc` itself fails.
    fn resolve_scope(&mut self) -> Result<BTreeSet<u32>, ReadError> {
        let scope = &self.cfg.scope;
        let proc_root = &self.cfg.system.proc_root;
        let me = std::process::id();
        let mut pids = BTreeSet::new();
        for &p in &scope.pids {
            if proc_root.join(p.to_string()).exists() {
                pids.insert(p);
            }
        }
        for cg in scope.cgroups.clone() {
            let mut stack = vec![cg];
            while let Some(path) = stack.pop() {
                match self.cgroups.procs(&path) {
                    Ok(ps) => pids.extend(ps),
                    Err(e) if e.is_gone() => {
                        self.faults.count("cgroup_gone", 1);
                        continue;
                    }
                    Err(e) => {
                        let r = io_reason("cgroup_read", read_errno(&e));
                        self.faults.record(&r, &chain(&e));
                        continue;
                    }
                }
                match self.cgroups.children(&path) {
                    Ok(children) => stack.extend(children),
                    Err(e) if e.is_gone() => self.faults.count("cgroup_gone", 1),
                    Err(e) => {
                        let r = io_reason("cgroup_read", read_errno(&e));
                        self.faults.record(&r, &chain(&e));
                    }
                }
            }
        }
        if scope.all {
            pids.extend(list_pids(proc_root)?);
        }
        pids.remove(&me);
        Ok(pids)
    }

    /// Reads one process for the scope: held by a pidfd first, its files read, then the
    /// pidfd checked, so that what was read is this process's and not a successor's. `prev`
    /// is what the last refresh read of the same process: its handle is kept, and its VMAs
    /// too when its maps did not change and were read recently.
    fn read_process(
        &mut self,
        pid: u32,
        prev: Option<ScopedProcess>,
        now: Nanos,
    ) -> Option<ScopedProcess> {
        let p = match prev {
            Some(p) => p,
            None => match ProcessHandle::open(&self.cfg.system.proc_root, pid, self.use_pidfd) {
                Ok(handle) => ScopedProcess {
                    handle,
                    comm: String::new(),
                    cgroup: String::new(),
                    mems_allowed: NodeMask::EMPTY,
                    vmas: Vec::new(),
                    maps_sig: 0,
                    maps_changed: false,
                    numa_read_at: None,
                    threads: ThreadsRead::default(),
                },
                Err(e) if e.is_gone() => {
                    self.faults.count("process_gone", 1);
                    return None;
                }
                Err(e) => {
                    self.faults
                        .record(&io_reason("pidfd", e.errno()), &chain(&e));
                    return None;
                }
            },
        };
        self.reread_process(pid, p, now)
    }

    /// Re-reads the files of a process already held (see [`Self::read_process`]).
    fn reread_process(
        &mut self,
        pid: u32,
        mut p: ScopedProcess,
        now: Nanos,
    ) -> Option<ScopedProcess> {
        let proc_root = self.cfg.system.proc_root.clone();
        let max_age = Nanos::from_millis(self.cfg.daemon.numa_maps_max_age_ms);
        let read = |p: &mut ScopedProcess| -> Result<bool, ReadError> {
            let maps_path = proc_root.join(pid.to_string()).join("maps");
            let maps = std::fs::read(&maps_path).map_err(|source| ReadError::Io {
                path: maps_path,
                source,
            })?;
            let sig = hash_bytes(&maps);
            p.maps_changed = sig != p.maps_sig;
            let stale = sig != p.maps_sig
                || p.numa_read_at
                    .is_none_or(|at| now.saturating_sub(at) >= max_age);
            if stale {
                p.vmas = read_vmas(&proc_root, pid)?;
                p.maps_sig = sig;
                p.numa_read_at = Some(now);
            }
            Ok(stale)
        };
        let read_rest = |p: &mut ScopedProcess| -> Result<(), ReadError> {
            let st = read_status(&proc_root, pid)?;
            p.comm = st.name;
            p.mems_allowed = st.mems_allowed;
            p.threads.count = st.threads;
            p.cgroup = unified_path(&read_proc_cgroup(&proc_root, pid)?)
                .unwrap_or("/")
                .to_string();
            Ok(())
        };
        let result = read(&mut p).and_then(|stale| read_rest(&mut p).map(|()| stale));
        match result {
            // Kernel threads have no memory map: nothing to tier.
            Ok(_) if p.vmas.is_empty() => None,
            Ok(reread) => {
                self.faults.count("numa_maps_reused", u64::from(!reread));
                if reread {
                    // A policy from a newer kernel: its pages are never moved (the engine's
                    // MemPolicy::may_move); counted so that the operator sees it.
                    let unknown = p
                        .vmas
                        .iter()
                        .filter(|v| v.numa.policy.policy.mode == PolicyMode::Unknown)
                        .count() as u64;
                    self.faults.count("policy_unknown_vmas", unknown);
                }
                // Read, then checked: if the process had exited meanwhile, the files read
                // may already be its successor's.
                if p.handle.is_alive(&proc_root) {
                    Some(p)
                } else {
                    self.faults.count("process_gone", 1);
                    None
                }
            }
            Err(e) if e.is_gone() => {
                self.faults.count("process_gone", 1);
                None
            }
            // A process we may not inspect (another user's, without CAP_SYS_PTRACE) is left
            // out rather than stopping the daemon.
            Err(e) => {
                let r = io_reason("process_read", read_errno(&e));
                self.faults.record(&r, &chain(&e));
                None
            }
        }
    }

    /// Re-reads the scope, owners and policies; the engine gets the updates on its next pass.
    /// Never fails: a scope that cannot be listed keeps the last one (counted), a process
    /// that cannot be read is left out (counted).
    pub fn refresh(&mut self, now: Nanos) {
        let mut out = std::mem::take(&mut self.pending_updates);
        let pids = match self.resolve_scope() {
            Ok(p) => p,
            Err(e) => {
                let r = io_reason("scope_read", read_errno(&e));
                self.faults.record(&r, &chain(&e));
                self.pending_updates = out;
                return;
            }
        };
        let proc_root = self.cfg.system.proc_root.clone();
        let mut old = std::mem::take(&mut self.procs);
        let mut fresh = BTreeMap::new();
        for pid in pids {
            let prev = match old.remove(&pid) {
                Some(p) if p.handle.is_alive(&proc_root) => Some(p),
                Some(_) => {
                    // The process we held exited and its pid is someone's again: the engine
                    // forgets the old address space before it hears of the new one.
                    self.faults.count("pid_reused", 1);
                    self.folios.forget(pid);
                    out.push(OwnerUpdate::Exited {
                        space: SpaceId(pid),
                    });
                    None
                }
                None => None,
            };
            let held = prev.is_some();
            if let Some(p) = self.read_process(pid, prev, now) {
                fresh.insert(pid, p);
            } else if held {
                // Held until now and unreadable (exited between the listing and the reads):
                // the engine forgets its address space, as for one that left the scope.
                self.folios.forget(pid);
                out.push(OwnerUpdate::Exited {
                    space: SpaceId(pid),
                });
            }
        }
        // What was held and is no longer in scope (or could not be read).
        for pid in old.keys() {
            self.placement.forget(*pid);
            self.folios.forget(*pid);
            out.push(OwnerUpdate::Exited {
                space: SpaceId(*pid),
            });
        }
        let attribute = threads_attribution(&self.cfg) && !self.cpu_nodes.is_empty();
        let mut updates = Vec::new();
        for (pid, p) in &mut fresh {
            if attribute {
                read_threads(
                    &proc_root,
                    &self.cpu_nodes,
                    &mut self.faults,
                    *pid,
                    &mut p.threads,
                );
            }
            updates.push((
                *pid,
                p.cgroup.clone(),
                policy_ranges(&p.vmas),
                p.threads.home,
            ));
        }
        for (pid, cgroup, ranges, home) in updates {
            let cgroup = self.cgroup_id(&cgroup);
            out.push(OwnerUpdate::Owner {
                space: SpaceId(pid),
                owner: Owner { pid, cgroup },
            });
            out.push(OwnerUpdate::Policies {
                space: SpaceId(pid),
                ranges,
            });
            if attribute {
                out.push(OwnerUpdate::HomeNode {
                    space: SpaceId(pid),
                    node: home,
                });
            }
        }
        // Cgroups no process in scope is in any more are forgotten (their usage is not read).
        let live: BTreeSet<&str> = fresh.values().map(|p| p.cgroup.as_str()).collect();
        self.cgroup_ids
            .retain(|path, _| path == "/" || live.contains(path.as_str()));
        let mapped: u64 = fresh
            .values()
            .flat_map(|p| p.vmas.iter())
            .filter_map(|v| v.end.map(|e| e.0.saturating_sub(v.start.0) << PAGE_SHIFT))
            .sum();
        for f in &mut self.feeds {
            f.set_monitored_bytes(mapped);
        }
        let targets_changed = fresh.keys().ne(self.targets.iter());
        self.refresh_placement(&fresh, now);
        self.procs = fresh;
        self.pending_updates = out;
        self.hot.roll();
        let pids = self.pids();
        if targets_changed {
            self.targets.clone_from(&pids);
        }
        for (i, f) in self.feeds.iter_mut().enumerate() {
            if !(targets_changed || self.feeds_stale[i] || self.last_refresh.is_none()) {
                continue;
            }
            match f.set_targets(&pids) {
                Ok(()) => self.feeds_stale[i] = false,
                Err(e) => {
                    // Typically DAMON's EINVAL for a target that exited between the scope
                    // read and the commit: retried with the next refresh's scope.
                    self.feeds_stale[i] = true;
                    let r = io_reason(&format!("{}_targets", f.name()), e.errno());
                    self.faults.record(&r, &chain(&e));
                }
            }
        }
        // Memory blocks come and go with hot-plug; a frame the map does not know is asked of
        // the kernel, so a failed read only costs queries.
        match read_node_frames(&self.cfg.system.sys_root) {
            Ok(f) => self.frames = f,
            Err(e) => {
                let r = io_reason("memory_blocks_read", read_errno(&e));
                self.faults.record(&r, &chain(&e));
                self.frames = NodeFrames::default();
            }
        }
        self.last_refresh = Some(now);
    }
    /// Goes idle after `daemon.idle_after_ms` without anything to move, and back at the first
    /// thing to move (see [`Pace`]). A feed that fails to change pace is counted and asked
    /// again at the next change.
    fn update_pace(&mut self, now: Nanos) {
        let after = Nanos::from_millis(self.cfg.daemon.idle_after_ms);
        if after.0 == 0 {
            return;
        }
        let last = *self.pace.last_work.get_or_insert(now);
        let idle = now.saturating_sub(last) >= after;
        if idle == self.pace.idle {
            return;
        }
        self.pace.idle = idle;
        if idle {
            self.pace.idle_periods += 1;
        }
        tracing::info!(
            idle,
            at_s = Duration::from_nanos(now.0).as_secs_f64(),
            "pace: {}",
            if idle {
                "idle (nothing to move): sources sample less often"
            } else {
                "active"
            }
        );
        for f in &mut self.feeds {
            if let Err(e) = f.set_pace(idle) {
                let r = io_reason(&format!("{}_pace", f.name()), e.errno());
                self.faults.record(&r, &chain(&e));
            }
        }
    }

    /// Drops what the placement cache can no longer trust: the runs of processes whose
    /// mappings changed, and every run when the kernel migrated pages itself since the last
    /// refresh (`pgmigrate_success` grew by more than tierd's own moves: reclaim's demotion,
    /// compaction, NUMA balancing); then the runs nothing verified for long.
    fn refresh_placement(&mut self, fresh: &BTreeMap<u32, ScopedProcess>, now: Nanos) {
        if !self.placement.enabled() {
            return;
        }
        for (pid, p) in fresh {
            if p.maps_changed {
                self.placement.forget(*pid);
            }
        }
        let kernel = read_vmstat(&self.cfg.system.proc_root)
            .ok()
            .and_then(|v| v.get("pgmigrate_success"));
        let ours = self.mover.stats().pages_moved;
        match (kernel, self.migrated_seen) {
            (Some(k), Some((k0, o0))) if k.saturating_sub(k0) > ours.saturating_sub(o0) => {
                self.placement.clear();
            }
            // Unreadable: nothing tells whether the kernel moved pages.
            (None, _) => self.placement.clear(),
            _ => {}
        }
        self.migrated_seen = kernel.map(|k| (k, ours));
        self.placement.prune(now);
    }

    /// Each feed's intervals in force, by feed name.
    fn feed_intervals(&self) -> Vec<(&'static str, crate::metrics::IntervalsSnapshot)> {
        self.feeds
            .iter()
            .filter_map(|f| f.intervals().map(|iv| (f.name(), iv)))
            .collect()
    }

    /// Placement per process from the last `numa_maps` read.
    fn process_snapshots(&self) -> Vec<ProcessSnapshot> {
        self.procs
            .iter()
            .map(|(pid, p)| {
                let mut pages_per_node: BTreeMap<u32, u64> = BTreeMap::new();
                for v in &p.vmas {
                    for (n, c) in &v.numa.nodes {
                        *pages_per_node.entry(u32::from(n.0)).or_default() +=
                            c * v.numa.base_pages_per_page();
                    }
                }
                ProcessSnapshot {
                    pid: *pid,
                    comm: p.comm.clone(),
                    cgroup: p.cgroup.clone(),
                    pages_per_node,
                    hot_pages_per_node: self.hot.last(*pid),
                }
            })
            .collect()
    }

    /// Whether `pid` is in scope and still the process the scope read (not a successor that
    /// reused its pid).
    fn held(&self, pid: u32) -> bool {
        self.procs
            .get(&pid)
            .is_some_and(|p| p.handle.is_alive(&self.cfg.system.proc_root))
    }

    /// Stops every feed.
    pub fn stop(&mut self) {
        for f in &mut self.feeds {
            f.stop();
        }
    }
}

impl Backend for LinuxBackend {
    /// Nothing the running host does is an error of the backend: see [`Faults`].
    type Error = std::convert::Infallible;

    fn drain_observations(
        &mut self,
        now: Nanos,
        out: &mut Vec<Observation>,
    ) -> Result<(), Self::Error> {
        let t_sources = tierd_linux::sys::thread_cpu_time();
        let mut ranges = std::mem::take(&mut self.ranges);
        ranges.clear();
        let mut events = Vec::new();
        for f in &mut self.feeds {
            if let Err(e) = f.poll(now, &mut ranges) {
                let r = io_reason(&format!("{}_poll", f.name()), e.errno());
                self.faults.record(&r, &chain(&e));
            }
            f.drain_events(&mut events);
        }
        let t_locate = tierd_linux::sys::thread_cpu_time();
        self.phase_cpu
            .add("sources", t_locate.saturating_sub(t_sources));
        for e in events {
            self.faults.count(e, 1);
        }
        let d = &self.cfg.sources.damon;
        let params = LocateParams {
            max_pages: d.max_pages_per_pass,
            min_nr_accesses: d.min_nr_accesses,
            min_relative_permille: d.min_relative_permille,
            hugetlb: self.cfg.daemon.hugetlb,
        };
        // Which pids are held is decided once per pass: a pidfd poll each.
        let held: BTreeSet<u32> = self
            .procs
            .keys()
            .copied()
            .filter(|p| self.held(*p))
            .collect();
        let first = out.len();
        let hidden_before = self.locate_stats.hidden_below_floor;
        let unknown_before = self.locate_stats.folio_unknown;
        let read_failures_before = self.folios.stats().read_failures;
        let mut lookup = Lookup {
            mover: &mut self.mover,
            other: self.locator.as_deref_mut(),
            frames: &self.frames,
        };
        let failed = locate_cached(
            &ranges,
            params,
            &self.fast_nodes,
            |pid| held.contains(&pid),
            &mut lookup,
            &mut self.folios,
            &mut self.placement,
            now,
            &mut self.locate_stats,
            out,
        );
        // Pages whose folio could not be told: not observed (degraded, never wrong), and
        // counted as a fault so that the operator sees it next to the others.
        self.faults.count(
            "folio_unknown",
            self.locate_stats.folio_unknown - unknown_before,
        );
        // smaps, pagemap or kpageflags reads that failed (mostly a process that exited since
        // the refresh): their pages are among the unknown ones.
        self.faults.count(
            "folio_read_failed",
            self.folios.stats().read_failures - read_failures_before,
        );
        let method = self.folios.method();
        if self.folio_method_logged != Some(method) {
            self.folio_method_logged = Some(method);
            tracing::warn!(folios = %method, "folio method changed: {}", describe_folio_method(method));
        }
        for (pid, e) in failed {
            let r = io_reason("locate", e.errno());
            self.faults
                .record(&r, &format_args!("pid {pid}: {}", chain(&e)));
        }
        for o in &out[first..] {
            self.hot.note_folio(
                o.page.space.0,
                o.page.vpn.0,
                o.page.size.nr_pages().0,
                o.page_node,
            );
        }
        self.ranges = ranges;
        // Idle only when nothing on a slow tier may be accessed: an accessed range that the
        // floors keep from the engine and that is not wholly known fast is work too (a few
        // hot pages diluted in a large cold region are found only by DAMON's region splits,
        // which idle sampling would slow tenfold: lab memcached).
        if self.locate_stats.hidden_below_floor > hidden_before
            || out[first..]
                .iter()
                .any(|o| !self.fast_nodes.contains(&o.page_node))
        {
            self.pace.last_work = Some(now);
        }
        self.update_pace(now);
        self.phase_cpu.add(
            "locate",
            tierd_linux::sys::thread_cpu_time().saturating_sub(t_locate),
        );
        Ok(())
    }

    /// Idle facts for idle demotion: the fast-tier pages of DAMON's regions that had no
    /// access for `engine.demotion.idle_after_ms` (its idle-region scheme is on when idle
    /// demotion was on at start), located a budget at a time (the daemon's private `IdleWalk`).
    fn drain_idle(
        &mut self,
        now: Nanos,
        out: &mut Vec<IdleObservation>,
    ) -> Result<(), Self::Error> {
        let mut fresh = Vec::new();
        for f in &mut self.feeds {
            f.drain_idle(&mut fresh);
        }
        if !fresh.is_empty() {
            self.idle.set_ranges(fresh);
        }
        let after = self.cfg.engine.demotion.idle_after_ms;
        if after == 0
            || self.idle.ranges.is_empty()
            || self
                .idle
                .last
                .is_some_and(|t| now.saturating_sub(t) < IDLE_LOCATE_EVERY)
        {
            return Ok(());
        }
        self.idle.last = Some(now);
        let t0 = tierd_linux::sys::thread_cpu_time();
        let chunks = self.idle.next(
            now.saturating_sub(Nanos::from_millis(after)),
            IDLE_LOCATE_PAGES,
        );
        let held: BTreeSet<u32> = chunks
            .iter()
            .map(|r| r.pid)
            .filter(|p| self.held(*p))
            .collect();
        let params = LocateParams {
            max_pages: IDLE_LOCATE_PAGES,
            min_nr_accesses: 0,
            min_relative_permille: 0,
            hugetlb: self.cfg.daemon.hugetlb,
        };
        let mut lookup = Lookup {
            mover: &mut self.mover,
            other: self.locator.as_deref_mut(),
            frames: &self.frames,
        };
        let mut stats = LocateStats::default();
        let mut found = Vec::new();
        let failed = locate(
            &chunks,
            params,
            &self.fast_nodes,
            |pid| held.contains(&pid),
            &mut lookup,
            &mut self.folios,
            &mut stats,
            &mut found,
        );
        for (pid, e) in failed {
            let r = io_reason("idle_locate", e.errno());
            self.faults
                .record(&r, &format_args!("pid {pid}: {}", chain(&e)));
        }
        out.extend(
            found
                .iter()
                .filter(|o| self.fast_nodes.contains(&o.page_node))
                .map(|o| IdleObservation {
                    page: o.page,
                    page_node: o.page_node,
                    idle_since: o.time,
                }),
        );
        self.phase_cpu.add(
            "idle",
            tierd_linux::sys::thread_cpu_time().saturating_sub(t0),
        );
        Ok(())
    }

    fn drain_owner_updates(&mut self, out: &mut Vec<OwnerUpdate>) -> Result<(), Self::Error> {
        // Owners are refreshed on the daemon's refresh period, not every engine pass: reading
        // numa_maps walks the page tables of every VMA.
        out.append(&mut self.pending_updates);
        Ok(())
    }

    fn usage(&mut self, now: Nanos) -> Result<SystemUsage, Self::Error> {
        // Free memory and the cgroups' usage (memory.numa_stat: a walk of the cgroup's
        // per-node counters) are read at most every USAGE_MAX_AGE while tierd moves nothing:
        // the engine passes every 100 ms, and between moves of its own nothing it plans with
        // changes faster than other processes allocate. After a move they are read again.
        // Idle, the loop passes IDLE_SLOWDOWN times less often, and so does this read.
        let max_age = if self.pace.idle {
            Nanos(USAGE_MAX_AGE.0 * u64::from(IDLE_SLOWDOWN))
        } else {
            USAGE_MAX_AGE
        };
        if let Some((at, u)) = &self.usage_cache {
            if now.saturating_sub(*at) < max_age {
                return Ok(u.clone());
            }
        }
        let t0 = tierd_linux::sys::thread_cpu_time();
        let r = self.usage_inner();
        self.usage_cache = Some((now, r.clone()));
        self.phase_cpu.add(
            "usage",
            tierd_linux::sys::thread_cpu_time().saturating_sub(t0),
        );
        Ok(r)
    }

    /// One call per run of batches going the same way, up to the mover's chunk: each
    /// `move_pages(2)` call pays `lru_cache_disable()` whatever its size
    /// ([`tierd_engine::plan::join_batches`]), and the mover already splits a call per process
    /// and chunk.
    fn join_pages(&self) -> usize {
        self.mover.config().chunk_pages
    }

    fn migrate(
        &mut self,
        now: Nanos,
        batch: &MigrationBatch,
    ) -> Result<MigrationReport, Self::Error> {
        let t0 = tierd_linux::sys::thread_cpu_time();
        self.usage_cache = None;
        self.pace.last_work = Some(now);
        let r = self.migrate_inner(now, batch);
        // What moved is where tierd put it: promoted pages join the placement cache's runs,
        // demoted ones leave them.
        for res in &r.results {
            if let MoveOutcome::Moved(n) = res.outcome {
                let pid = res.page.space.0;
                let start = res.page.size.head(res.page.vpn).0;
                let end = start + res.page.size.nr_pages().0;
                let fast = self.fast_nodes.contains(&n).then_some(n);
                self.placement.moved(pid, start, end, fast, now);
            }
        }
        self.phase_cpu.add(
            "move",
            tierd_linux::sys::thread_cpu_time().saturating_sub(t0),
        );
        Ok(r)
    }
}

impl LinuxBackend {
    fn usage_inner(&mut self) -> SystemUsage {
        let sys_root = self.cfg.system.sys_root.clone();
        let mut usage = SystemUsage::default();
        for n in self.node_ids.clone() {
            match read_node_meminfo(&sys_root, n) {
                Ok(mi) => {
                    usage.nodes.insert(
                        n,
                        NodeUsage {
                            free: mi.mem_free().unwrap_or(Bytes(0)),
                            promo_watermark: None,
                        },
                    );
                }
                // A node offlined (its memory hot-removed) has no meminfo: it is left out of
                // this pass's usage, so nothing is planned onto it.
                Err(e) => {
                    let r = io_reason("node_meminfo", read_errno(&e));
                    self.faults
                        .record(&r, &format_args!("node {}: {}", n.0, chain(&e)));
                }
            }
        }
        let paths: Vec<(String, CgroupId)> = self
            .cgroup_ids
            .iter()
            .filter(|(p, _)| p.as_str() != "/")
            .map(|(p, id)| (p.clone(), *id))
            .collect();
        for (path, id) in paths {
            let m = match self.cgroups.read_memory(&path) {
                Ok(m) => m,
                Err(e) if e.is_gone() => {
                    self.faults.count("cgroup_gone", 1);
                    continue;
                }
                Err(e) => {
                    let r = io_reason("cgroup_read", read_errno(&e));
                    self.faults.record(&r, &chain(&e));
                    continue;
                }
            };
            let low = m.low.and_then(|l| l.bytes()).unwrap_or(Bytes(0));
            let fast: u64 = m.numa_stat.as_ref().map_or(0, |ns| {
                self.fast_nodes
                    .iter()
                    .map(|n| ns.get("anon", *n).unwrap_or(0) + ns.get("file", *n).unwrap_or(0))
                    .sum()
            });
            usage.cgroups.insert(
                id,
                CgroupUsage {
                    low,
                    fast_usage: Bytes(fast),
                },
            );
        }
        usage
    }

    fn migrate_inner(&mut self, now: Nanos, batch: &MigrationBatch) -> MigrationReport {
        let mut held = self.hold_back_hugetlb(batch);
        if batch.kind == MigrationKind::Promote {
            self.hold_back_unverified(now, batch, &mut held);
        }
        if held.iter().all(Option::is_none) {
            return self.execute(batch);
        }
        let rest = MigrationBatch {
            pages: batch
                .pages
                .iter()
                .zip(&held)
                .filter(|(_, h)| h.is_none())
                .map(|(m, _)| *m)
                .collect(),
            id: batch.id,
            kind: batch.kind,
            target: batch.target,
            cgroup: batch.cgroup,
        };
        let (done, split_pages) = if rest.pages.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            let mut results = self.execute(&rest).results;
            // Beyond the batch's own results: the moved pages of folios the kernel split.
            let split_pages = results.split_off(rest.pages.len().min(results.len()));
            (
                results.into_iter().map(|r| r.outcome).collect(),
                split_pages,
            )
        };
        let mut done = done.into_iter();
        let outcomes: Vec<MoveOutcome> = held
            .into_iter()
            .map(|h| {
                h.unwrap_or_else(|| {
                    done.next()
                        .unwrap_or(MoveOutcome::Failed(MoveError::Other(0)))
                })
            })
            .collect();
        let mut report = MigrationReport::for_batch(batch, outcomes);
        report.results.extend(split_pages);
        report
    }
}

impl LinuxBackend {
    /// Moves (or, in a dry run, prints) a batch whose pages may all be handed to the kernel.
    fn execute(&mut self, batch: &MigrationBatch) -> MigrationReport {
        if self.dry_run {
            let pages = batch.nr_pages().0;
            self.planned_pages += pages;
            let mut per_pid: BTreeMap<u32, u64> = BTreeMap::new();
            for m in &batch.pages {
                *per_pid.entry(m.page.space.0).or_default() += m.page.size.nr_pages().0;
            }
            let who: Vec<String> = per_pid
                .iter()
                .map(|(p, n)| format!("pid {p}: {n}"))
                .collect();
            self.dry_run_log.push(format!(
                "dry run: would {:?} {} pages to node {} ({})",
                batch.kind,
                pages,
                batch.target.0,
                who.join(", ")
            ));
            return MigrationReport::for_batch(
                batch,
                batch
                    .pages
                    .iter()
                    .map(|_| MoveOutcome::Failed(MoveError::Other(DRY_RUN_ERRNO))),
            );
        }
        // Identity and cpuset, per process, right before the call: a pid whose process exited
        // (and may be reused) is never passed to move_pages, and a target outside the
        // process's cpuset is refused here rather than by the kernel (EACCES) page by page.
        let proc_root = self.cfg.system.proc_root.clone();
        let mut allowed: BTreeMap<SpaceId, Option<i32>> = BTreeMap::new();
        for m in &batch.pages {
            allowed.entry(m.page.space).or_insert_with(|| {
                let p = self.procs.get(&m.page.space.0)?;
                if !p.handle.is_alive(&proc_root) {
                    return None;
                }
                i32::try_from(m.page.space.0).ok()
            });
        }
        let denied: BTreeSet<SpaceId> = allowed
            .keys()
            .filter(|s| {
                self.procs.get(&s.0).is_some_and(|p| {
                    !p.mems_allowed.is_empty() && !p.mems_allowed.contains(batch.target)
                })
            })
            .copied()
            .collect();
        let gone = allowed.values().filter(|v| v.is_none()).count() as u64;
        self.faults.count("move_process_gone", gone);
        let result = self.mover.execute(batch, |space| {
            if denied.contains(&space) {
                return None;
            }
            allowed.get(&space).copied().flatten()
        });
        let mut report = match result {
            Ok(r) => r,
            Err(e) => {
                let r = io_reason("move_pages", e.errno());
                self.faults.record(&r, &chain(&e));
                MigrationReport::for_batch(
                    batch,
                    batch
                        .pages
                        .iter()
                        .map(|_| MoveOutcome::Failed(MoveError::Other(e.errno().unwrap_or(0)))),
                )
            }
        };
        // Refused for the cpuset: Access, not NoProcess (the process is fine; the engine
        // backs the pages off instead of forgetting the process).
        if !denied.is_empty() {
            let mut n = 0;
            for (m, r) in batch.pages.iter().zip(report.results.iter_mut()) {
                if denied.contains(&m.page.space) {
                    r.outcome = MoveOutcome::Failed(MoveError::Access);
                    n += 1;
                }
            }
            self.faults.count("move_cpuset_denied", n);
        }
        // A process that exited during the call: its pid could in principle have been
        // reused within that one syscall (the whole pid space wrapping); counted, so that it
        // shows if it ever happens.
        for space in allowed.iter().filter(|(_, v)| v.is_some()).map(|(s, _)| s) {
            if !self.held(space.0) {
                self.faults.count("move_process_exited_during", 1);
            }
        }
        report
    }
}

/// What a reload (SIGHUP) did: the `result` label of `tierd_config_reloads_total`
/// (docs/daemon.md, "Reload").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// Every change applied.
    Applied,
    /// A change needs a restart: nothing applied.
    Refused,
    /// The file does not check, or the engine refuses it on this machine: nothing applied.
    Invalid,
}

impl ReloadOutcome {
    /// Every outcome, in the order the metric lists them.
    pub const ALL: [ReloadOutcome; 3] = [
        ReloadOutcome::Applied,
        ReloadOutcome::Refused,
        ReloadOutcome::Invalid,
    ];

    /// The label value: `ok`, `refused`, `invalid`.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            ReloadOutcome::Applied => "ok",
            ReloadOutcome::Refused => "refused",
            ReloadOutcome::Invalid => "invalid",
        }
    }
}

/// Reads the configuration again for a reload: the file through the same checks as at
/// start, with the command line's overrides applied.
pub type ConfigLoader =
    dyn Fn() -> Result<DaemonConfig, crate::config::ConfigFileError> + Send + Sync;

/// SIGHUP: a flag the signal handler sets, and how to read the configuration again.
#[derive(Clone)]
pub struct Reload {
    /// Set by the signal handler; the loop takes it between passes.
    pub requested: std::sync::Arc<AtomicBool>,
    /// Reads and validates the file.
    pub load: std::sync::Arc<ConfigLoader>,
}

impl std::fmt::Debug for Reload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reload")
            .field("requested", &self.requested)
            .finish_non_exhaustive()
    }
}

/// How to run.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Reload the configuration when asked (SIGHUP); `None`: never.
    pub reload: Option<Reload>,
    /// Plan and print, move nothing.
    pub dry_run: bool,
    /// Stop after this long (`None`: until signalled).
    pub duration: Option<Duration>,
    /// Where the latest snapshot goes (the metrics endpoint reads it).
    pub snapshot: Option<SharedSnapshot>,
    /// Beaten after every completed pass (the metrics endpoint's `/healthz` reads it).
    pub heartbeat: Option<crate::metrics::Heartbeat>,
    /// Record what the engine saw and decided into this directory (`tierd run --record`,
    /// docs/trace.md), within these limits.
    pub record: Option<(std::path::PathBuf, tierd_trace::Limits)>,
}

/// What a run did, for the exit message.
#[derive(Clone, Debug, Default)]
pub struct RunSummary {
    /// Engine passes.
    pub passes: u64,
    /// Observations fed to the engine.
    pub observations: u64,
    /// Base pages moved.
    pub moved_pages: u64,
    /// Base pages that could not move (counted by reason in the snapshot).
    pub failed_pages: u64,
    /// Base pages a dry run would have moved.
    pub planned_pages: u64,
    /// Processes that exited or could not be read mid-run.
    pub gone: u64,
    /// The last snapshot.
    pub snapshot: Snapshot,
}

/// CPU charged to the backend's phases inside a step (sources, locate, usage, move).
fn backend_phases(p: &PhaseCpu) -> Duration {
    ["sources", "locate", "usage", "move"]
        .iter()
        .map(|ph| p.get(ph))
        .sum()
}

fn nanos_since(start: Instant) -> Nanos {
    Nanos(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

#[allow(clippy::too_many_arguments)]
fn build_snapshot(
    cfg: &DaemonConfig,
    pre: &Preflight,
    engine: &Engine,
    backend: &LinuxBackend,
    statuses: &[SourceSnapshot],
    vm0: Option<&Vmstat>,
    uptime: Duration,
    dry_run: bool,
) -> Snapshot {
    let roots = &cfg.system;
    let tiers = pre.topology.tiers();
    let nodes = pre
        .system
        .nodes
        .iter()
        .map(|n| {
            let tier = tiers
                .iter()
                .position(|t| t.nodes.contains(n.id))
                .and_then(|i| u32::try_from(i).ok())
                .unwrap_or(0);
            let fresh = read_node_meminfo(&roots.sys_root, n.id).ok();
            let mi = fresh.as_ref().unwrap_or(&n.meminfo);
            NodeSnapshot {
                id: u32::from(n.id.0),
                tier,
                has_cpus: !n.cpus.is_empty(),
                total_bytes: mi.mem_total().map_or(0, |b| b.0),
                free_bytes: mi.mem_free().map_or(0, |b| b.0),
            }
        })
        .collect();
    let ms = backend.mover.stats();
    let mut pages_failed = BTreeMap::new();
    let f = ms.failures;
    for (k, v) in [
        ("busy", f.busy),
        ("no_mem", f.no_mem),
        ("access", f.access),
        ("no_process", f.no_process),
        ("fault", f.fault),
        ("not_present", f.not_present),
        ("other", f.other),
    ] {
        if v > 0 {
            pages_failed.insert(k.to_string(), v);
        }
    }
    let kernel_vmstat_delta = match (vm0, read_vmstat(&roots.proc_root).ok()) {
        (Some(a), Some(b)) => Vmstat::delta(&b, a)
            .counters
            .into_iter()
            .filter(|(k, _)| {
                k.starts_with("pgpromote")
                    || k.starts_with("pgdemote")
                    || k.starts_with("numa_")
                    || k.starts_with("pgmigrate")
            })
            .collect(),
        _ => BTreeMap::new(),
    };
    let stat = read_stat(&roots.proc_root, std::process::id()).ok();
    let daemon_cpu_s = stat
        .as_ref()
        .map_or(0.0, |s| s.cpu_time(USER_HZ).as_secs_f64());
    let daemon_cpu_sys_s = stat.as_ref().map_or(0.0, |s| {
        let sys_only = tierd_linux::read::proc::ProcStat {
            utime_ticks: 0,
            ..s.clone()
        };
        sys_only.cpu_time(USER_HZ).as_secs_f64()
    });
    let mut snap = Snapshot {
        version: env!("CARGO_PKG_VERSION").to_string(),
        uptime_s: uptime.as_secs_f64(),
        dry_run,
        nodes,
        processes: backend.process_snapshots(),
        sources: {
            let intervals = backend.feed_intervals();
            statuses
                .iter()
                .map(|s| {
                    let mut s = s.clone();
                    s.intervals = intervals
                        .iter()
                        .find(|(n, _)| *n == s.name)
                        .map(|(_, iv)| iv.clone());
                    s
                })
                .collect()
        },
        mover: MoverSnapshot {
            calls: ms.move_calls,
            pages_moved: ms.pages_moved,
            pages_failed,
            seconds: ms.move_time.as_secs_f64(),
        },
        kernel_vmstat_delta,
        daemon_cpu_s,
        daemon_cpu_sys_s,
        loop_cpu_s: backend.phase_cpu.seconds(),
        faults: backend.faults.counts().clone(),
        folios: backend.folio_snapshot(),
        placement: tierd_linux::status::PlacementSnapshot {
            cached_pages: backend.placement.pages(),
            skipped_pages: backend.locate_stats.cached_fast,
            reverified_pages: backend.locate_stats.reverified,
            cleared: backend.placement.stats.cleared,
            forgotten: backend.placement.stats.forgotten,
        },
        idle: backend.pace.idle,
        idle_periods: backend.pace.idle_periods,
        ..Snapshot::default()
    };
    snap.set_engine_stats(engine.stats());
    snap
}

/// Starts a recording of a run on `pre`'s machine into `dir` (`tierd run --record`): the
/// header holds the engine configuration and topology the run's engine is built from.
///
/// # Errors
/// [`DaemonError::Record`] when the directory or its first file cannot be written.
pub fn start_recording<B: Backend>(
    cfg: &DaemonConfig,
    pre: &Preflight,
    backend: &B,
    dir: &Path,
    limits: tierd_trace::Limits,
) -> Result<tierd_trace::TraceWriter, DaemonError> {
    let mut header =
        tierd_trace::Header::new(cfg.engine_config(), &pre.topology, backend.join_pages(), 0);
    header.note = format!("tierd run, pid {}", std::process::id());
    Ok(tierd_trace::TraceWriter::create(dir, header, limits)?)
}

/// One pass of the engine ([`tierd_engine::step`]), recorded into `recording` when it is on.
///
/// Recording wraps the backend for the pass ([`tierd_trace::Recorder`]): every input enters
/// the engine through the backend's calls in `step`, so what is recorded is exactly what the
/// engine saw, and the batches it asked for. The pass's records are written after it, whole;
/// a write that fails (a full disk) stops the recording, not the tiering.
pub fn recorded_step<B: Backend>(
    engine: &mut Engine,
    backend: &mut B,
    now: Nanos,
    bufs: &mut StepBuffers,
    recording: &mut Option<tierd_trace::TraceWriter>,
    buf: &mut Vec<u8>,
    log: &mut dyn FnMut(&str),
) -> Result<tierd_engine::StepOutcome, B::Error> {
    let Some(w) = recording.as_mut() else {
        return tierd_engine::step(engine, backend, now, bufs);
    };
    buf.clear();
    let mut rec = tierd_trace::Recorder::pass(backend, buf, now);
    let out = tierd_engine::step(engine, &mut rec, now, bufs);
    if let Err(e) = w.append(buf) {
        log(&format!("recording stopped: {e}"));
        *recording = None;
    }
    out
}

/// Applies a configuration read again (SIGHUP) to the running engine and backend, or keeps
/// the old one, after logging what changed or why nothing did. The engine keeps its hotness
/// store, heat and history either way.
pub fn reload(
    engine: &mut Engine,
    backend: &mut LinuxBackend,
    read: Result<DaemonConfig, crate::config::ConfigFileError>,
) -> ReloadOutcome {
    let new = match read {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("reload refused, the configuration in force stays: {e}");
            return ReloadOutcome::Invalid;
        }
    };
    let changes = match crate::reload::live_changes(&backend.cfg, &new) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("reload refused, the configuration in force stays: {e}");
            return ReloadOutcome::Refused;
        }
    };
    if let Err(e) = engine.reconfigure(new.engine_config()) {
        tracing::warn!("reload refused, the configuration in force stays: engine: {e}");
        return match e {
            tierd_engine::ReconfigureError::Invalid(_) => ReloadOutcome::Invalid,
            tierd_engine::ReconfigureError::NotLive { .. } => ReloadOutcome::Refused,
        };
    }
    if changes.is_empty() {
        tracing::info!("reloaded: nothing changed");
    } else {
        let list: Vec<String> = changes.iter().map(ToString::to_string).collect();
        tracing::info!("reloaded: {}", list.join(", "));
    }
    backend.set_config(new);
    ReloadOutcome::Applied
}

/// Runs the daemon loop until `stop` is set or the duration passes. Lines for the operator
/// (dry-run plans, source trouble) go to `log`.
///
/// # Errors
/// A [`DaemonError`] when the engine refuses the configuration or the backend breaks as a
/// whole; per-page failures and exiting processes are counted instead.
pub fn run(
    cfg: &DaemonConfig,
    pre: &Preflight,
    feeds: Vec<Box<dyn Feed>>,
    statuses: &[SourceSnapshot],
    opts: &RunOptions,
    stop: &AtomicBool,
    log: &mut dyn FnMut(&str),
) -> Result<RunSummary, DaemonError> {
    let start = Instant::now();
    let mut engine = Engine::new(cfg.engine_config(), pre.topology.clone())?;
    let mut backend = LinuxBackend::new(cfg.clone(), &pre.topology, feeds, opts.dry_run);
    let vm0 = read_vmstat(&cfg.system.proc_root).ok();
    let mut interval = Duration::from_millis(u64::from(cfg.engine.interval_ms));
    let mut refresh = Duration::from_millis(cfg.daemon.refresh_ms);
    let mut reloads: BTreeMap<String, u64> = ReloadOutcome::ALL
        .iter()
        .map(|r| (r.label().to_string(), 0))
        .collect();
    let mut bufs = StepBuffers::default();
    let mut summary = RunSummary::default();
    let mut recording = match &opts.record {
        Some((dir, limits)) => {
            let w = start_recording(cfg, pre, &backend, dir, *limits)?;
            log(&format!("recording to {}", dir.display()));
            Some(w)
        }
        None => None,
    };
    let mut record_buf = Vec::new();
    let mut next_refresh = Duration::ZERO;
    let mut last_intervals: Vec<(&'static str, crate::metrics::IntervalsSnapshot)> = Vec::new();
    let publish = |engine: &Engine, backend: &LinuxBackend, reloads: &BTreeMap<String, u64>| {
        let mut snap = build_snapshot(
            backend.config(),
            pre,
            engine,
            backend,
            statuses,
            vm0.as_ref(),
            start.elapsed(),
            opts.dry_run,
        );
        snap.config_reloads.clone_from(reloads);
        if let Some(shared) = &opts.snapshot {
            let fresh = std::sync::Arc::new(snap.clone());
            match shared.lock() {
                Ok(mut g) => *g = fresh,
                Err(p) => *p.into_inner() = fresh,
            }
        }
        snap
    };
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if opts.duration.is_some_and(|d| start.elapsed() >= d) {
            break;
        }
        if let Some(r) = opts
            .reload
            .as_ref()
            .filter(|r| r.requested.swap(false, Ordering::Relaxed))
        {
            let result = reload(&mut engine, &mut backend, (r.load)());
            if result == ReloadOutcome::Applied {
                // The trace follows the reload, so a replay reconfigures where the run did.
                if let Some(w) = recording.as_mut() {
                    if let Err(e) = w.reconfigured(&backend.cfg.engine_config()) {
                        log(&format!("recording stopped: {e}"));
                        recording = None;
                    }
                }
            }
            *reloads.entry(result.label().to_string()).or_insert(0) += 1;
            interval = Duration::from_millis(u64::from(backend.cfg.engine.interval_ms));
            refresh = Duration::from_millis(backend.cfg.daemon.refresh_ms);
            // Seen at once in /metrics, not at the next refresh.
            publish(&engine, &backend, &reloads);
        }
        let pass_start = start.elapsed();
        // Idle (nothing to move for daemon.idle_after_ms): the loop passes and refreshes
        // IDLE_SLOWDOWN times less often, until something to move shows up.
        let slow = if backend.pace.idle { IDLE_SLOWDOWN } else { 1 };
        if pass_start >= next_refresh {
            let t0 = tierd_linux::sys::thread_cpu_time();
            backend.refresh(nanos_since(start));
            let t1 = tierd_linux::sys::thread_cpu_time();
            backend.phase_cpu.add("refresh", t1.saturating_sub(t0));
            publish(&engine, &backend, &reloads);
            backend.phase_cpu.add(
                "publish",
                tierd_linux::sys::thread_cpu_time().saturating_sub(t1),
            );
            next_refresh = pass_start + refresh * slow;
        }
        // The engine's share of a step is what the backend's calls did not take.
        let t0 = tierd_linux::sys::thread_cpu_time();
        let backend_before = backend_phases(&backend.phase_cpu);
        let now = nanos_since(start);
        let Ok(out) = recorded_step(
            &mut engine,
            &mut backend,
            now,
            &mut bufs,
            &mut recording,
            &mut record_buf,
            log,
        );
        let step_cpu = tierd_linux::sys::thread_cpu_time().saturating_sub(t0);
        let backend_cpu = backend_phases(&backend.phase_cpu).saturating_sub(backend_before);
        backend
            .phase_cpu
            .add("engine", step_cpu.saturating_sub(backend_cpu));
        summary.passes += 1;
        if summary.passes == 1 {
            let parts: Vec<String> = backend
                .phase_cpu
                .seconds()
                .iter()
                .filter(|(_, v)| **v > 0.0)
                .map(|(k, v)| format!("{k} {v:.3}"))
                .collect();
            log(&format!(
                "first pass done at {:.2} s; its CPU s: {}",
                start.elapsed().as_secs_f64(),
                parts.join(", ")
            ));
        }
        if summary.moved_pages == 0 && out.moved_pages > 0 {
            // How long tierd took to act at all: its start, the sources' first readings and
            // the engine's frequency window (the lab reads it beside t50/t90).
            log(&format!(
                "first pages moved at {:.2} s: {} in pass {}",
                start.elapsed().as_secs_f64(),
                out.moved_pages,
                summary.passes
            ));
        }
        summary.observations += out.observations as u64;
        summary.moved_pages += out.moved_pages;
        summary.failed_pages += out.failed_pages;
        if let Some(hb) = &opts.heartbeat {
            hb.beat();
        }
        for line in backend.dry_run_log.drain(..) {
            log(&line);
        }
        // The intervals a source tuned, each change logged once (tierd lab and operators
        // read them from here and from /status).
        let now_iv = backend.feed_intervals();
        for (name, iv) in &now_iv {
            let was = last_intervals
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v);
            let same = |w: &crate::metrics::IntervalsSnapshot| {
                (w.tuning.as_str(), w.sample_us, w.aggr_us)
                    == (iv.tuning.as_str(), iv.sample_us, iv.aggr_us)
            };
            if !was.is_some_and(same) {
                log(&format!(
                    "{name}: intervals sample {} us, aggregation {} us (tuning: {}) at {:.1} s",
                    iv.sample_us,
                    iv.aggr_us,
                    iv.tuning,
                    start.elapsed().as_secs_f64()
                ));
            }
        }
        last_intervals = now_iv;
        // Sleep to the next pass in short slices so a signal is seen quickly; the batch in
        // flight has already finished when we get here.
        let next = pass_start + interval * slow;
        while start.elapsed() < next && !stop.load(Ordering::Relaxed) {
            let left = next.saturating_sub(start.elapsed());
            std::thread::sleep(left.min(Duration::from_millis(20)));
        }
    }
    backend.stop();
    summary.planned_pages = backend.planned_pages;
    summary.gone = backend.faults.get("process_gone");
    summary.snapshot = publish(&engine, &backend, &reloads);
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The idle walk takes the next pages by pid and address from its cursor, wrapping, only
    /// ranges idle long enough, never the same page twice in one take, and everything at
    /// once (cursor reset) when it fits the budget.
    #[test]
    fn idle_walk_covers_large_idle_regions_in_turn() {
        let r = |pid: u32, start: u64, n: u64, since_s: u64| IdleRange {
            pid,
            start: Vpn(start),
            nr_pages: n,
            since: Nanos::from_secs(since_s),
        };
        let mut w = IdleWalk::default();
        w.set_ranges(vec![r(2, 100, 50, 0), r(1, 0, 30, 0), r(1, 500, 10, 90)]);
        let take = |w: &mut IdleWalk, budget| -> Vec<(u32, u64, u64, u64)> {
            w.next(Nanos::from_secs(60), budget)
                .iter()
                .map(|c| (c.pid, c.start.0, c.nr_pages, c.time.0 / 1_000_000_000))
                .collect()
        };
        // (1, 500..510) is idle only since 90 s: not due at 60 s.
        assert_eq!(take(&mut w, 40), vec![(1, 0, 30, 0), (2, 100, 10, 0)]);
        assert_eq!(take(&mut w, 40), vec![(2, 110, 40, 0)]);
        // From the start again, then on.
        assert_eq!(take(&mut w, 20), vec![(1, 0, 20, 0)]);
        assert_eq!(take(&mut w, 20), vec![(1, 20, 10, 0), (2, 100, 10, 0)]);
        // Wraps within one take, no page twice.
        assert_eq!(take(&mut w, 60), vec![(2, 110, 40, 0), (1, 0, 20, 0)]);
        // All of it fits: all, from the start.
        assert_eq!(take(&mut w, 100), vec![(1, 0, 30, 0), (2, 100, 50, 0)]);
    }

    /// `/proc/PID/task/TID/stat` of a thread with `ticks` CPU ticks last on `cpu`.
    fn write_task(proc_root: &Path, pid: u32, tid: u32, ticks: u64, cpu: u32) {
        let dir = proc_root.join(format!("{pid}/task/{tid}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut f: Vec<String> = (3..=52).map(|_| "0".to_string()).collect();
        f[0] = "S".into();
        f[14 - 3] = ticks.to_string();
        f[39 - 3] = cpu.to_string();
        std::fs::write(dir.join("stat"), format!("{tid} (w) {}\n", f.join(" "))).unwrap();
    }

    /// The accessing node over successive refreshes: settled by the second reading, then
    /// read every THREADS_EVERY_REFRESHES or when the thread count changes; threads spanning
    /// two nodes give none; an idle process keeps its node.
    #[test]
    fn threads_give_a_home_node_read_only_when_due() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // CPUs 0-1 on node 0, 2-3 on node 1 (the lab's three-node guest).
        let cpus: BTreeMap<u32, NodeId> = [(0, 0), (1, 0), (2, 1), (3, 1)]
            .into_iter()
            .map(|(c, n)| (c, NodeId(n)))
            .collect();
        let mut faults = Faults::default();
        let mut t = ThreadsRead {
            count: Some(1),
            ..ThreadsRead::default()
        };
        write_task(root, 50, 50, 10, 3);
        read_threads(root, &cpus, &mut faults, 50, &mut t);
        assert_eq!(t.home, Some(NodeId(1)));
        assert!(t.unsettled, "a change: read again next time");
        write_task(root, 50, 50, 20, 2);
        read_threads(root, &cpus, &mut faults, 50, &mut t);
        assert_eq!(
            (t.home, t.unsettled, t.age),
            (Some(NodeId(1)), false, Some(0))
        );
        // Not due: the file is not read (a thread on node 0 would otherwise change it).
        write_task(root, 50, 50, 30, 0);
        for age in 1..THREADS_EVERY_REFRESHES {
            read_threads(root, &cpus, &mut faults, 50, &mut t);
            assert_eq!((t.home, t.age), (Some(NodeId(1)), Some(age)));
        }
        // Due again: read.
        read_threads(root, &cpus, &mut faults, 50, &mut t);
        assert_eq!((t.home, t.age), (Some(NodeId(0)), Some(0)));
        read_threads(root, &cpus, &mut faults, 50, &mut t);
        assert!(!t.unsettled);
        // A second thread, on node 1, both running: the count changed, so read at once,
        // and the threads span nodes: no home node.
        write_task(root, 50, 50, 40, 0);
        write_task(root, 50, 51, 5, 2);
        t.count = Some(2);
        read_threads(root, &cpus, &mut faults, 50, &mut t);
        assert_eq!(t.home, None);
        // Only thread 51 ran since: node 1.
        write_task(root, 50, 51, 9, 3);
        read_threads(root, &cpus, &mut faults, 50, &mut t);
        assert_eq!(t.home, Some(NodeId(1)));
        // Nothing ran: it keeps its node.
        read_threads(root, &cpus, &mut faults, 50, &mut t);
        assert_eq!(t.home, Some(NodeId(1)));
        // A process that is gone is not a fault; an unreadable task list is.
        let mut gone = ThreadsRead::default();
        read_threads(root, &cpus, &mut faults, 77, &mut gone);
        assert_eq!(gone.home, None);
        assert!(faults.counts().is_empty(), "{:?}", faults.counts());
        std::fs::write(root.join("50/task/52"), "not a directory").unwrap();
        std::fs::create_dir_all(root.join("50/task/53")).unwrap();
        t.count = Some(4);
        read_threads(root, &cpus, &mut faults, 50, &mut t);
        assert_eq!(t.home, None);
        assert_eq!(faults.get("threads_read_error"), 1, "{:?}", faults.counts());
    }

    #[test]
    fn hot_pages_are_distinct_pages_of_the_last_period_on_their_last_node() {
        let mut h = HotWindow::default();
        h.note(7, 1, NodeId(1));
        h.note(7, 1, NodeId(0)); // seen again after a promotion: counted once, on 0
        h.note(7, 2, NodeId(1));
        // The same vpn in another process is another page.
        h.note(8, 1, NodeId(1));
        // Nothing until the period ends.
        assert!(h.last(7).is_empty());
        h.roll();
        assert_eq!(h.last(7), [(0, 1), (1, 1)].into_iter().collect());
        assert_eq!(h.last(8), [(1, 1)].into_iter().collect());
        assert!(h.last(9).is_empty());
        // The next period starts empty: pages not reported again are no longer hot.
        h.note(8, 5, NodeId(0));
        h.roll();
        assert!(h.last(7).is_empty());
        assert_eq!(h.last(8), [(0, 1)].into_iter().collect());
    }

    #[test]
    fn a_huge_folio_is_hot_with_all_its_base_pages_once() {
        let mut h = HotWindow::default();
        // Seen twice in a period (two passes): one folio, 512 pages, on its last node.
        h.note_folio(7, 0x200, 512, NodeId(1));
        h.note_folio(7, 0x200, 512, NodeId(0));
        h.note(7, 0x1000, NodeId(1));
        h.roll();
        assert_eq!(h.last(7), [(0, 512), (1, 1)].into_iter().collect());
    }

    #[test]
    fn faults_are_counted_by_reason_every_time() {
        let mut f = Faults::default();
        for _ in 0..1000 {
            f.record("damon_targets_einval", &"commit refused");
        }
        f.count("process_gone", 3);
        f.count("process_gone", 0);
        assert_eq!(f.get("damon_targets_einval"), 1000);
        assert_eq!(f.get("process_gone"), 3);
        assert_eq!(f.counts().len(), 2, "a zero count adds no reason");
        // Logged once; the rest suppressed until a minute has passed.
        assert_eq!(f.logged["damon_targets_einval"].1, 999);
    }

    #[test]
    fn os_errors_are_named_by_what_they_say_about_the_host() {
        assert_eq!(
            io_reason("scope_read", Some(libc::EMFILE)),
            "scope_read_emfile"
        );
        assert_eq!(
            io_reason("scope_read", Some(libc::ENFILE)),
            "scope_read_emfile"
        );
        assert_eq!(
            io_reason("damon_targets", Some(libc::EINVAL)),
            "damon_targets_einval"
        );
        assert_eq!(
            io_reason("damon_poll", Some(libc::EBUSY)),
            "damon_poll_ebusy"
        );
        assert_eq!(
            io_reason("node_meminfo", Some(libc::ENOENT)),
            "node_meminfo_gone"
        );
        assert_eq!(io_reason("x", Some(libc::ENOMEM)), "x_enomem");
        assert_eq!(io_reason("x", Some(libc::EAGAIN)), "x_eagain");
        assert_eq!(io_reason("x", Some(libc::EACCES)), "x_denied");
        assert_eq!(io_reason("x", None), "x_error");
    }

    #[test]
    fn the_pid_namespace_check_refuses_a_foreign_proc() {
        let me = std::process::id();
        // The real /proc is ours.
        assert!(check_pid_namespace(Path::new("/proc"), me).is_ok());
        // Seen as another pid: its pids are not ours to move.
        let e = check_pid_namespace(Path::new("/proc"), me.wrapping_add(1)).unwrap_err();
        assert_eq!(e.exit_code(), EXIT_CONFIG);
        assert!(e.to_string().contains("another pid namespace"), "{e}");
        // A fixture tree without `self`: a warning, not a refusal.
        let d = tempfile::tempdir().unwrap();
        let w = check_pid_namespace(d.path(), me).unwrap().unwrap();
        assert!(w.contains("cannot check"), "{w}");
    }

    #[test]
    fn errors_at_start_carry_their_exit_code() {
        assert_eq!(
            DaemonError::NoSource("damon: absent".into()).exit_code(),
            EXIT_UNAVAILABLE
        );
        assert_eq!(
            DaemonError::NothingToTier("one tier".into()).exit_code(),
            EXIT_UNAVAILABLE
        );
        // The engine's refusal of `[topology]`'s tiers is a configuration error that keeps
        // the engine's reason as its cause, so `chain` prints it (it was cut to a string).
        let refused = Topology::new(Vec::new(), Vec::new()).unwrap_err();
        let e = DaemonError::TopologyRefused(refused);
        assert_eq!(e.exit_code(), EXIT_CONFIG);
        let line = chain(&e);
        assert!(line.starts_with("[topology]: "), "{line}");
        assert!(line.ends_with("the topology has no nodes"), "{line}");
    }

    #[test]
    fn chain_joins_every_cause() {
        let io = std::io::Error::from_raw_os_error(libc::EBUSY);
        let e = ReadError::Io {
            path: "/sys/x".into(),
            source: io,
        };
        let d = DaemonError::Read(e);
        let c = chain(&d);
        assert!(
            c.starts_with("reading the machine's description: cannot read /sys/x"),
            "{c}"
        );
        assert!(c.contains("busy"), "{c}");
    }
}
