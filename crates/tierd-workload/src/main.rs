//! `tierd-workload`: the guest workload binary (see the library docs for the subcommands and
//! the static build).

use std::io::Write;
use std::ops::Range;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use clap::{Parser, Subcommand};
use tierd_engine::types::{NodeId, NodeMask};
use tierd_linux::mover::{Mover, MoverConfig};
use tierd_linux::read::meminfo::read_node_meminfo;
use tierd_linux::read::{parse_list, parse_nodelist};
use tierd_linux::sys::{
    self, AnonMapping, FileMapping, PageRun, SparseMapping, MPOL_BIND, MPOL_DEFAULT,
    MPOL_F_NUMA_BALANCING, MPOL_PREFERRED_MANY,
};
use tierd_workload::chase::{build_cycle, chase, WORDS_PER_LINE};
use tierd_workload::integrity::{check_page, fill_page, BadWord, SplitAction, SplitPlan};
mod chaos_cmd;
mod kv_cmd;
mod launch;
mod lru_gen_cost_cmd;
mod migrate_cmd;
mod pte_cost_cmd;

use tierd_workload::report::{
    ChaseDone, ChaseLine, ChasePolicy, ChaseReady, ChaseSample, HoldLine, IntegrityLine,
    IntegritySample, MoveLine, Placement, ThreadSample,
};

const MIB: usize = 1 << 20;
/// Steps between updates of a thread's step counter (and checks of the stop flag): small
/// enough to stop within ~10 ms at TCG speeds, large enough that the atomic add costs nothing.
const BURST: u64 = 1 << 15;
/// The report loop sleeps at most this long at a time, so it notices a failed thread soon.
const POLL: Duration = Duration::from_millis(50);
/// `integrity` rewrites one of this many slices of each thread's range per pass.
const REWRITE_SLICES: usize = 16;
/// `integrity` prints at most this many `bad` lines.
const MAX_BAD: usize = 8;
/// `hold --leave-free-mib` allocates in chunks of at most this many MiB, re-reading MemFree
/// after each.
const FILL_CHUNK_MIB: u64 = 256;

/// What the workload does about transparent huge pages on its buffer (the chase's hot part,
/// the integrity buffer). Either way the buffer gets a VMA flag its neighbours lack, so that
/// `/proc/PID/numa_maps` reports it on its own line (mm/vma.c `is_mergeable_vma()` compares
/// `vm_flags`), which is how the lab reads its placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ThpAdvice {
    /// `MADV_NOHUGEPAGE`: base pages whatever the system's THP mode (the default).
    Off,
    /// No THP advice: the system's mode (`/sys/kernel/mm/transparent_hugepage/enabled`)
    /// decides; `MADV_DONTFORK`, which only matters to `fork(2)`, keeps the VMA apart.
    Follow,
}

/// Give `m` its own VMA, opting it out of THP only for [`ThpAdvice::Off`].
fn separate(m: &AnonMapping, thp: ThpAdvice, what: &str) -> Result<()> {
    match thp {
        ThpAdvice::Off => m
            .advise_nohugepage()
            .with_context(|| format!("marking the {what} MADV_NOHUGEPAGE")),
        ThpAdvice::Follow => m
            .advise_dontfork()
            .with_context(|| format!("marking the {what} MADV_DONTFORK")),
    }
}

/// A `--cpus` list (`0,1` or `0-3`).
#[derive(Clone, Debug)]
struct CpuList(Vec<u32>);

fn cpu_list(s: &str) -> Result<CpuList, String> {
    let v = parse_list(s)?;
    if v.is_empty() {
        return Err("empty CPU list".to_owned());
    }
    Ok(CpuList(v))
}

fn node_list(s: &str) -> Result<NodeMask, String> {
    let m = parse_nodelist(s)?;
    if m.is_empty() {
        return Err("empty node list".to_owned());
    }
    Ok(m)
}

#[derive(Parser, Debug)]
#[command(name = "tierd-workload", version, about = "tierd's guest workload")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Place a buffer on a node, then pointer-chase its hot part and report placement.
    Chase {
        /// Buffer size in MiB.
        #[arg(long)]
        total_mib: usize,
        /// Hot part (the buffer's first MiB) in MiB.
        #[arg(long)]
        hot_mib: usize,
        /// How long to chase, in seconds.
        #[arg(long)]
        secs: f64,
        /// Node to place the buffer on first (-1: default policy).
        #[arg(long, allow_hyphen_values = true)]
        node: i32,
        /// Report period in milliseconds.
        #[arg(long, default_value_t = 500)]
        interval_ms: u64,
        /// Seed of the chase permutation (thread i uses seed + i).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Run a ticker process waking every this many µs on each chase CPU (CPU 0 unless
        /// --cpus), the chase threads pinned there too (0: off).
        #[arg(long, default_value_t = 0)]
        tick_us: u64,
        /// Policy left on the buffer after placing it: default (MPOL_DEFAULT),
        /// preferred-many or preferred-many-balancing (MPOL_PREFERRED_MANY over
        /// --policy-nodes, the latter with MPOL_F_NUMA_BALANCING).
        #[arg(long, default_value = "default")]
        policy: ChasePolicy,
        /// Nodes of the preferred-many policies (a list: `0`, `0-1`).
        #[arg(long, value_parser = node_list)]
        policy_nodes: Option<NodeMask>,
        /// Chase threads, each over its own slice of the hot part.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// CPUs to pin the threads to, round-robin (a list: `0,1`; default: not pinned).
        #[arg(long, value_parser = cpu_list)]
        cpus: Option<CpuList>,
        /// Transparent huge pages on the hot part: off (MADV_NOHUGEPAGE) or follow (the
        /// system's THP mode decides).
        #[arg(long, value_enum, default_value = "off")]
        thp: ThpAdvice,
        /// Processes (each started as a copy of this binary), each with its own buffer of
        /// --total-mib/N and --hot-mib/N (in pages) on --node, process i pinned to
        /// --cpus[i % len]; each prints its own lines, each with `proc=<i>` (the ready line
        /// also `cpu=<c>`).
        /// SIGTERM to this process is passed on to them.
        #[arg(long, default_value_t = 1)]
        procs: usize,
        /// (internal) This process is number i of --procs, started by the first.
        #[arg(long, hide = true)]
        proc_index: Option<usize>,
        /// Place the buffer and print the ready line, then leave it untouched this many
        /// seconds before chasing (a workload that starts later than the machine's other
        /// tenants: the idle-demotion experiment). --secs counts from the start of the chase.
        #[arg(long, default_value_t = 0.0)]
        idle_first_s: f64,
    },
    /// Allocate, touch and hold memory.
    Hold {
        /// Size in MiB.
        #[arg(
            long,
            required_unless_present = "leave_free_mib",
            conflicts_with = "leave_free_mib"
        )]
        mib: Option<usize>,
        /// Instead of --mib: allocate on --node until its MemFree is about this many MiB.
        #[arg(long)]
        leave_free_mib: Option<u64>,
        /// Node to bind to (-1: default policy; --leave-free-mib needs a node).
        #[arg(long, allow_hyphen_values = true)]
        node: i32,
        /// Seconds to hold it.
        #[arg(long)]
        secs: f64,
        /// Once placed, reset the memory's policy to MPOL_DEFAULT, so that a tiering tool
        /// (which respects MPOL_BIND, as the kernel's promotion does) may move it: a tenant
        /// that filled a node and went idle.
        #[arg(long)]
        unbind: bool,
    },
    /// Place memory on one node and time moving it to another with move_pages(2).
    Move {
        /// Size in MiB.
        #[arg(long)]
        mib: usize,
        /// Node to place it on first.
        #[arg(long, default_value_t = 0)]
        from: u16,
        /// Target node.
        #[arg(long)]
        to: u16,
        /// Addresses per move_pages call (the daemon's mover uses 8192).
        #[arg(long, default_value_t = 8192)]
        chunk_pages: usize,
    },
    /// Fill memory on a node with per-page distinct contents, then verify and rewrite it
    /// continuously while the kernel or tierd migrates it; count checksum failures.
    Integrity {
        /// Size in MiB.
        #[arg(long)]
        mib: usize,
        /// Node to fill it on (-1: default policy); the policy is reset to MPOL_DEFAULT after.
        #[arg(long, allow_hyphen_values = true)]
        node: i32,
        /// Seconds to verify.
        #[arg(long)]
        secs: f64,
        /// Report period in milliseconds.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// Checking threads, each over its own slice of the buffer.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Transparent huge pages on the buffer: off (MADV_NOHUGEPAGE) or follow (the
        /// system's THP mode decides).
        #[arg(long, value_enum, default_value = "off")]
        thp: ThpAdvice,
        /// Every this many ms, each thread cuts its part of the buffer (0: never): in turn a
        /// MADV_DONTNEED of a 4 KiB page inside a 2 MiB block (read back as zeros, then
        /// rewritten) and a munmap of a 4 KiB page at a block's edge (dropped from the
        /// check). Under THP each cut splits the THP there while it is checked and moved.
        #[arg(long, default_value_t = 0)]
        split_every_ms: u64,
    },
    /// Move another process's buffer between nodes with tierd's mover or the kernel's
    /// migrate_pages(2) and time it (`tierd lab scale`).
    Migrate(migrate_cmd::MigrateArgs),
    /// Time mprotect(2) round trips over a buffer of base pages: what a PTE update of NUMA
    /// balancing's scanner costs here (scripts/pte-cost.sh, lab A's twin).
    PteCost(pte_cost_cmd::PteCostArgs),
    /// Time the multi-gen LRU's aging passes over a buffer of base pages, young and old:
    /// what reclaim's page-table walk costs here (scripts/lru-gen-cost.sh, seed D).
    LruGenCost(lru_gen_cost_cmd::LruGenCostArgs),
    /// The chaos lab's actors (`tierd lab chaos`).
    #[command(flatten)]
    Chaos(chaos_cmd::ChaosCmd),
    /// The load generator for real servers and its hot-page probes (`kv`, `hotpages`, `where`).
    #[command(flatten)]
    Kv(kv_cmd::KvCmd),
    /// Run a program under a task memory policy numactl cannot set
    /// (MPOL_PREFERRED_MANY | MPOL_F_NUMA_BALANCING): `exec --policy P --policy-nodes N -- CMD..`.
    Exec(launch::ExecArgs),
    /// Map and hold a THP-backed anonymous buffer (MADV_HUGEPAGE) and hugetlbfs files, for
    /// the folio fixtures (`tierd-vm capture-folio-fixtures`); prints where they are.
    Folios {
        /// Anonymous MiB to map with MADV_HUGEPAGE and write (2 MiB more are mapped, so the
        /// MiB from the first 2 MiB boundary are whole huge pages).
        #[arg(long, default_value_t = 16)]
        thp_mib: usize,
        /// `PATH:MIB`: a file on a mounted hugetlbfs to size, map shared and read (repeatable).
        #[arg(long)]
        hugetlb: Vec<String>,
        /// Seconds to hold them.
        #[arg(long)]
        secs: f64,
    },
    /// (internal) The --tick-us helper: pin to a CPU and wake every `us` until the parent exits.
    #[command(hide = true)]
    Ticker {
        /// Period in µs.
        #[arg(long)]
        us: u64,
        /// CPU to pin to.
        #[arg(long)]
        cpu: usize,
        /// Exit when the parent is no longer this pid.
        #[arg(long)]
        parent: u32,
    },
}

/// Set by SIGTERM: `chase` and `integrity` then finish like at the end of `--secs`, printing
/// their `done` line, so a harness can stop them and still read the totals.
static TERM: std::sync::OnceLock<std::sync::Arc<AtomicBool>> = std::sync::OnceLock::new();

fn terminated() -> bool {
    TERM.get().is_some_and(|t| t.load(Relaxed))
}

/// Makes SIGTERM end `chase` and `integrity` gracefully. Only they install it: the other
/// modes (`hold`, the ticker) must keep dying on SIGTERM, which harnesses rely on.
fn graceful_sigterm() -> Result<()> {
    let term = std::sync::Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, std::sync::Arc::clone(&term))
        .context("installing the SIGTERM handler")?;
    let _ = TERM.set(term);
    Ok(())
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    if matches!(cli.cmd, Cmd::Chase { .. } | Cmd::Integrity { .. }) {
        graceful_sigterm()?;
    }
    match cli.cmd {
        Cmd::Chase {
            total_mib,
            hot_mib,
            secs,
            node,
            interval_ms,
            seed,
            tick_us,
            policy,
            policy_nodes,
            threads,
            cpus,
            thp,
            procs,
            proc_index,
            idle_first_s,
        } => run_chase(&ChaseArgs {
            total_mib,
            hot_mib,
            secs,
            node,
            interval: Duration::from_millis(interval_ms.max(1)),
            seed,
            tick_us,
            policy,
            policy_nodes: policy_nodes.unwrap_or(NodeMask::EMPTY),
            threads,
            cpus: cpus.map(|c| c.0).unwrap_or_default(),
            thp,
            procs,
            proc_index,
            parent: std::os::unix::process::parent_id(),
            idle_first: Duration::try_from_secs_f64(idle_first_s).map_err(|_| {
                anyhow::anyhow!("--idle-first-s {idle_first_s}: not a number of seconds >= 0")
            })?,
        }),
        Cmd::Hold {
            mib,
            leave_free_mib,
            node,
            secs,
            unbind,
        } => run_hold(mib, leave_free_mib, node, secs, unbind),
        Cmd::Move {
            mib,
            from,
            to,
            chunk_pages,
        } => run_move(mib, from, to, chunk_pages),
        Cmd::Integrity {
            mib,
            node,
            secs,
            interval_ms,
            threads,
            thp,
            split_every_ms,
        } => run_integrity(
            mib,
            node,
            secs,
            Duration::from_millis(interval_ms.max(1)),
            threads,
            thp,
            (split_every_ms > 0).then(|| Duration::from_millis(split_every_ms)),
        ),
        Cmd::Folios {
            thp_mib,
            hugetlb,
            secs,
        } => run_folios(thp_mib, &hugetlb, secs),
        Cmd::Ticker { us, cpu, parent } => run_ticker(us, cpu, parent),
        Cmd::Chaos(c) => chaos_cmd::run(c),
        Cmd::Migrate(m) => migrate_cmd::run(&m),
        Cmd::PteCost(a) => pte_cost_cmd::run(&a),
        Cmd::LruGenCost(a) => lru_gen_cost_cmd::run(&a),
        Cmd::Kv(c) => kv_cmd::run(c),
        Cmd::Exec(a) => launch::run(a),
    }
}

struct ChaseArgs {
    total_mib: usize,
    hot_mib: usize,
    secs: f64,
    node: i32,
    interval: Duration,
    seed: u64,
    tick_us: u64,
    policy: ChasePolicy,
    policy_nodes: NodeMask,
    threads: usize,
    cpus: Vec<u32>,
    thp: ThpAdvice,
    procs: usize,
    /// Set in the processes a multi-process chase starts (see [`run_chase_procs`]).
    proc_index: Option<usize>,
    /// The parent's pid when this process started: a started process stops when its parent
    /// is gone (SIGKILLed), as the ticker does.
    parent: u32,
    /// How long the placed buffer stays untouched before the chase (`--idle-first-s`).
    idle_first: Duration,
}

impl ChaseArgs {
    /// This process's hot and cold pages: the whole buffer, or with --procs N process i's
    /// share of each part (the parts split separately, so that the shares add up to them).
    fn pages(&self) -> (usize, usize) {
        let mib_pages = MIB / sys::page_size();
        let hot = self.hot_mib.saturating_mul(mib_pages);
        let cold = self
            .total_mib
            .saturating_sub(self.hot_mib)
            .saturating_mul(mib_pages);
        match self.proc_index {
            None => (hot, cold),
            Some(i) => (share(hot, self.procs, i), share(cold, self.procs, i)),
        }
    }

    /// Whether this is a started process whose parent has gone.
    fn orphaned(&self) -> bool {
        self.proc_index.is_some() && std::os::unix::process::parent_id() != self.parent
    }
}

/// The length of part `i` of [`split`]`(len, n)`.
fn share(len: usize, n: usize, i: usize) -> usize {
    (i + 1) * len / n - i * len / n
}

/// Map `mib` MiB, bind it to `node` (if >= 0) and touch every page so it is allocated there.
fn place(mib: usize, node: i32) -> Result<AnonMapping> {
    ensure!(mib > 0, "size must be at least 1 MiB");
    place_pages(
        mib.checked_mul(MIB / sys::page_size())
            .context("size overflows")?,
        node,
    )
}

/// [`place`] for a size in base pages.
fn place_pages(pages: usize, node: i32) -> Result<AnonMapping> {
    ensure!(pages > 0, "size must be at least one page");
    let len = pages
        .checked_mul(sys::page_size())
        .context("size overflows")?;
    let mut m = AnonMapping::new(len)?;
    if node >= 0 {
        let n = u16::try_from(node).context("node out of range")?;
        ensure!(n < 64, "node {n} out of range (0..64)");
        sys::mbind(m.addr(), m.len(), MPOL_BIND, NodeMask(1 << n), 0)
            .with_context(|| format!("binding {} KiB to node {n}", len / 1024))?;
    }
    let ps = sys::page_size();
    for page in m.as_mut_slice().chunks_mut(ps) {
        page[0] = 1;
    }
    Ok(m)
}

/// Drop the range's policy so the kernel (NUMA balancing, DAMOS) may move its pages.
fn reset_policy(m: &AnonMapping) -> Result<()> {
    sys::mbind(m.addr(), m.len(), MPOL_DEFAULT, NodeMask::EMPTY, 0)
        .context("resetting the policy to MPOL_DEFAULT")?;
    Ok(())
}

/// Print one report line. A closed stdout (the harness went away) is an error to return, not
/// a panic as in `println!`.
fn emit(line: &dyn std::fmt::Display) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").context("writing a report line to stdout")?;
    // Line by line: the guest harness reads the console while the chase runs.
    out.flush().context("flushing stdout")
}

fn pid() -> i32 {
    i32::try_from(std::process::id()).unwrap_or(0)
}

fn as_u64(x: usize) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

#[allow(clippy::cast_precision_loss)]
fn rate(steps: u64, d: Duration) -> (f64, f64) {
    let s = d.as_secs_f64();
    if steps == 0 || s <= 0.0 {
        return (0.0, 0.0);
    }
    let per_s = steps as f64 / s;
    (per_s, 1e9 / per_s)
}

/// Leave `policy` on the range once it is placed. `MPOL_DEFAULT` lets the kernel (NUMA
/// balancing, DAMOS) and tierd move the pages anywhere. `MPOL_PREFERRED_MANY` keeps new
/// allocations on `nodes`; with `MPOL_F_NUMA_BALANCING` the kernel's `mpol_misplaced()`
/// (mm/mempolicy.c) migrates a hinting-faulted folio to the faulting CPU's node when that node
/// is in `nodes`, leaves it alone when it already sits in `nodes`, and otherwise proposes no
/// node outside the mask. `sanitize_mpol_flags()` accepts `MPOL_F_NUMA_BALANCING` only with
/// `MPOL_BIND` and (since 6.10, so on the 6.12 guest) `MPOL_PREFERRED_MANY`; older kernels
/// answer `EINVAL`.
fn apply_policy(m: &AnonMapping, policy: ChasePolicy, nodes: NodeMask) -> Result<()> {
    let mode = match policy {
        ChasePolicy::Default => return reset_policy(m),
        ChasePolicy::PreferredMany => MPOL_PREFERRED_MANY,
        ChasePolicy::PreferredManyBalancing => MPOL_PREFERRED_MANY | MPOL_F_NUMA_BALANCING,
    };
    sys::mbind(m.addr(), m.len(), mode, nodes, 0).with_context(|| {
        format!(
            "setting policy {policy} over nodes {nodes} (EINVAL: a node not online, or for \
             -balancing a kernel before 6.10)"
        )
    })
}

/// `n` contiguous, nearly equal ranges covering `0..len` (`n <= len`).
fn split(len: usize, n: usize) -> Vec<Range<usize>> {
    (0..n).map(|i| i * len / n..(i + 1) * len / n).collect()
}

/// Start a ticker (a copy of this binary) pinned to `cpu`.
fn start_ticker(us: u64, cpu: u32) -> Result<Child> {
    let exe = std::env::current_exe().context("locating /proc/self/exe for the ticker")?;
    Command::new(exe)
        .args(["ticker", "--us", &us.to_string(), "--cpu", &cpu.to_string()])
        .args(["--parent", &std::process::id().to_string()])
        .spawn()
        .with_context(|| format!("starting the ticker on CPU {cpu}"))
}

/// Sleep until `deadline` (measured from `t0`), at most [`POLL`], so that the caller can check
/// its stop flag.
fn nap(t0: Instant, deadline: Duration) {
    let now = t0.elapsed();
    if deadline > now {
        std::thread::sleep((deadline - now).min(POLL));
    }
}

/// Steps per second of `steps` over `d`.
fn per_s(steps: u64, d: Duration) -> f64 {
    rate(steps, d).0
}

#[allow(
    clippy::too_many_lines,
    reason = "the chase's setup, policy, run and report, in the order its output lines come"
)]
fn run_chase(a: &ChaseArgs) -> Result<()> {
    ensure!(a.hot_mib >= 1, "--hot-mib must be at least 1");
    ensure!(
        a.hot_mib <= a.total_mib,
        "--hot-mib {} exceeds --total-mib {}",
        a.hot_mib,
        a.total_mib
    );
    ensure!(a.secs.is_finite() && a.secs >= 0.0, "--secs must be >= 0");
    ensure!(a.threads >= 1, "--threads must be at least 1");
    ensure!(a.procs >= 1, "--procs must be at least 1");
    match (a.policy, a.policy_nodes.is_empty()) {
        (ChasePolicy::Default, false) => bail!("--policy-nodes needs a preferred-many --policy"),
        (ChasePolicy::PreferredMany | ChasePolicy::PreferredManyBalancing, true) => {
            bail!("--policy {} needs --policy-nodes", a.policy)
        }
        _ => {}
    }
    if a.procs > 1 && a.proc_index.is_none() {
        return run_chase_procs(a);
    }
    let (hot_share, cold_share) = a.pages();
    let ps = sys::page_size();
    let words_per_page = ps / 8;
    // Hot and cold parts are separate mappings, the hot one marked (MADV_NOHUGEPAGE, or
    // MADV_DONTFORK with --thp follow) so the kernel cannot merge them: /proc/PID/numa_maps
    // then reports each part on its own line, which is how the guest test reads placement
    // independently of tierd.
    let mut m = place_pages(hot_share, a.node)?;
    separate(&m, a.thp, "hot part")?;
    apply_policy(&m, a.policy, a.policy_nodes)?;
    let cold = if cold_share > 0 {
        let c = place_pages(cold_share, a.node)?;
        apply_policy(&c, a.policy, a.policy_nodes)?;
        Some(c)
    } else {
        None
    };
    let mut addrs = m.page_addrs();
    let hot_pages = addrs.len();
    if let Some(c) = &cold {
        addrs.extend(c.page_addrs());
    }
    ensure!(
        a.threads <= hot_pages,
        "--threads {} exceeds the {hot_pages} hot pages",
        a.threads
    );
    // Each thread chases its own cycle over a contiguous run of whole hot pages, so a page's
    // placement belongs to exactly one thread.
    let slices = split(hot_pages, a.threads);
    {
        let words = m.as_mut_u64_slice();
        for (i, r) in slices.iter().enumerate() {
            let w = &mut words[r.start * words_per_page..r.end * words_per_page];
            let lines = w.len() / WORDS_PER_LINE;
            if !build_cycle(w, lines, a.seed.wrapping_add(as_u64(i))) {
                bail!("hot slice {i} ({} pages) too small for a chase", r.len());
            }
        }
    }
    // Pinning: --cpus round-robin; with a ticker and no --cpus, CPU 0 (the ticker's).
    let pins: Vec<u32> = if !a.cpus.is_empty() {
        a.cpus.clone()
    } else if a.tick_us > 0 {
        vec![0]
    } else {
        Vec::new()
    };
    // A started process's tickers are its parent's (one per CPU, not one per process).
    let mut tickers = Vec::new();
    if a.tick_us > 0 && a.proc_index.is_none() {
        tickers = start_tickers(a.tick_us, &pins)?;
    }
    let result = chase_threads(
        a,
        &m,
        &addrs,
        hot_pages,
        &slices,
        &pins,
        &tickers,
        cold.as_ref(),
    );
    for c in &mut tickers {
        // Best effort: they also exit on their own once we are gone.
        let _ = c.kill();
        let _ = c.wait();
    }
    result
}

/// One ticker per distinct CPU of `pins`.
fn start_tickers(us: u64, pins: &[u32]) -> Result<Vec<Child>> {
    let mut distinct = pins.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let mut tickers = Vec::new();
    for cpu in distinct {
        match start_ticker(us, cpu) {
            Ok(c) => tickers.push(c),
            Err(e) => {
                stop_children(&mut tickers);
                return Err(e);
            }
        }
    }
    Ok(tickers)
}

/// Kill (SIGKILL) and reap `children`, best effort: used on the way out.
fn stop_children(children: &mut [Child]) {
    for c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// The arguments of process `i` of a multi-process chase (see [`run_chase_procs`]).
fn proc_args(a: &ChaseArgs, i: usize, cpu: Option<u32>) -> Vec<String> {
    let mut v: Vec<String> = [
        "chase",
        "--total-mib",
        &a.total_mib.to_string(),
        "--hot-mib",
        &a.hot_mib.to_string(),
        "--secs",
        &a.secs.to_string(),
        "--node",
        &a.node.to_string(),
        "--interval-ms",
        &a.interval.as_millis().to_string(),
        // Thread j of process i chases with seed + i * threads + j: no two cycles alike.
        "--seed",
        &a.seed.wrapping_add(as_u64(i * a.threads)).to_string(),
        "--tick-us",
        &a.tick_us.to_string(),
        "--policy",
        a.policy.as_str(),
        "--threads",
        &a.threads.to_string(),
        "--thp",
        match a.thp {
            ThpAdvice::Off => "off",
            ThpAdvice::Follow => "follow",
        },
        "--procs",
        &a.procs.to_string(),
        "--proc-index",
        &i.to_string(),
        "--idle-first-s",
        &a.idle_first.as_secs_f64().to_string(),
    ]
    .iter()
    .map(|s| (*s).to_string())
    .collect();
    if !a.policy_nodes.is_empty() {
        v.extend(["--policy-nodes".to_string(), a.policy_nodes.to_string()]);
    }
    if let Some(c) = cpu {
        v.extend(["--cpus".to_string(), c.to_string()]);
    }
    v
}

/// `chase --procs N`: start N copies of this binary, process i with its share of the buffer
/// ([`ChaseArgs::pages`]) pinned to `cpus[i % len]` (CPU 0 with a ticker and no --cpus, as
/// the single process), and wait for them. Copies are started with `exec` rather than
/// `fork(2)` alone: a forked copy of a Rust process may only call async-signal-safe functions
/// until it execs, and this crate has no unsafe code. Their lines go straight to the shared
/// stdout (each line is one `write(2)`, so lines do not interleave). SIGTERM here is passed on
/// to each of them (they print their `done` lines); they stop on their own if this process
/// dies without passing it on.
fn run_chase_procs(a: &ChaseArgs) -> Result<()> {
    let (hot, _) = a.pages();
    ensure!(
        hot / a.procs >= a.threads,
        "--hot-mib {} gives {} pages per process: fewer than --threads {} for {} processes",
        a.hot_mib,
        hot / a.procs,
        a.threads,
        a.procs
    );
    let pins: Vec<u32> = if !a.cpus.is_empty() {
        a.cpus.clone()
    } else if a.tick_us > 0 {
        vec![0]
    } else {
        Vec::new()
    };
    let exe = std::env::current_exe().context("locating /proc/self/exe for the chase processes")?;
    let mut tickers = if a.tick_us > 0 {
        start_tickers(a.tick_us, &pins)?
    } else {
        Vec::new()
    };
    let mut children: Vec<Child> = Vec::with_capacity(a.procs);
    for i in 0..a.procs {
        let cpu = (!pins.is_empty()).then(|| pins[i % pins.len()]);
        match Command::new(&exe).args(proc_args(a, i, cpu)).spawn() {
            Ok(c) => children.push(c),
            Err(e) => {
                stop_children(&mut children);
                stop_children(&mut tickers);
                return Err(e).with_context(|| format!("starting chase process {i}"));
            }
        }
    }
    let result = wait_procs(children);
    stop_children(&mut tickers);
    result
}

/// Reap the chase processes (in a thread, blocking in `wait(2)`) while passing SIGTERM on.
fn wait_procs(children: Vec<Child>) -> Result<()> {
    let pids: Vec<u32> = children.iter().map(Child::id).collect();
    // Set once a child is reaped: its pid may be reused after that, so it gets no signal.
    let reaped: Vec<AtomicBool> = pids.iter().map(|_| AtomicBool::new(false)).collect();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| -> Result<()> {
        let reaper = s.spawn(
            || -> Vec<(usize, std::io::Result<std::process::ExitStatus>)> {
                let mut failed = Vec::new();
                for (i, mut c) in children.into_iter().enumerate() {
                    let st = c.wait();
                    reaped[i].store(true, Relaxed);
                    if !st.as_ref().is_ok_and(std::process::ExitStatus::success) {
                        failed.push((i, st));
                    }
                }
                done.store(true, Relaxed);
                failed
            },
        );
        let mut forwarded = false;
        while !done.load(Relaxed) {
            if !forwarded && terminated() {
                forwarded = true;
                for (pid, r) in pids.iter().zip(&reaped) {
                    if !r.load(Relaxed) {
                        // ESRCH: it has just exited; nothing to pass on.
                        let _ = sys::sigterm(*pid);
                    }
                }
            }
            std::thread::sleep(POLL);
        }
        let failed = reaper
            .join()
            .map_err(|_| anyhow!("the chase reaper thread panicked"))?;
        match failed.first() {
            None => Ok(()),
            Some((i, st)) => bail!(
                "{} of {} chase processes failed; process {i}: {}",
                failed.len(),
                pids.len(),
                match st {
                    Ok(st) => st.to_string(),
                    Err(e) => format!("wait failed: {e}"),
                }
            ),
        }
    })
}

/// Start the chase threads, report every interval, stop them and report the totals.
#[allow(clippy::too_many_arguments)]
fn chase_threads(
    a: &ChaseArgs,
    m: &AnonMapping,
    addrs: &[usize],
    hot_pages: usize,
    slices: &[Range<usize>],
    pins: &[u32],
    tickers: &[Child],
    cold: Option<&AnonMapping>,
) -> Result<()> {
    let words_per_page = sys::page_size() / 8;
    let mut mover = Mover::new(MoverConfig::default());
    let where_ = |mover: &mut Mover| -> Result<(Placement, Placement, Vec<Placement>)> {
        let q = mover.query(0, addrs)?;
        let per_thread = slices
            .iter()
            .map(|r| Placement::of(&q[r.clone()]))
            .collect();
        Ok((
            Placement::of(&q[..hot_pages]),
            Placement::of(&q[hot_pages..]),
            per_thread,
        ))
    };
    let ready = ChaseLine::Ready(ChaseReady {
        pid: pid(),
        addr: as_u64(m.addr()),
        cold_addr: cold.map_or(0, |c| as_u64(c.addr())),
        node: a.node,
        total_pages: as_u64(addrs.len()),
        hot_pages: as_u64(hot_pages),
        tick_us: a.tick_us,
        ticker_pid: tickers
            .first()
            .map_or(0, |c| i32::try_from(c.id()).unwrap_or(0)),
        threads: u32::try_from(slices.len()).unwrap_or(u32::MAX),
        cpus: pins.to_vec(),
        policy: a.policy,
        policy_nodes: a.policy_nodes,
    });
    // A started process says which it is on every line, so that a reader of the processes'
    // shared stdout can tell their lines apart: `proc=<i> cpu=<c>` after the pid of its ready
    // line (`-`: not pinned), `proc=<i>` before the `t=` of its samples and done line. The
    // line parser reads keys by name, so the extra keys keep them valid lines.
    let emit_chase = |line: &ChaseLine| -> Result<()> {
        let Some(i) = a.proc_index else {
            return emit(line);
        };
        let (at, key) = match line {
            ChaseLine::Ready(_) => {
                let cpu = pins.first().map_or_else(|| "-".to_string(), u32::to_string);
                (" addr=", format!(" proc={i} cpu={cpu} addr="))
            }
            ChaseLine::Sample(_) | ChaseLine::Done(_) => (" t=", format!(" proc={i} t=")),
        };
        emit(&line.to_string().replacen(at, &key, 1))
    };
    emit_chase(&ready)?;
    // A later start: the buffer is placed (and reported) now, touched only after the wait.
    let idle_until = Instant::now() + a.idle_first;
    while Instant::now() < idle_until && !terminated() {
        std::thread::sleep(
            Duration::from_millis(100).min(idle_until.saturating_duration_since(Instant::now())),
        );
    }
    let words = m.as_u64_slice();
    let stop = AtomicBool::new(false);
    let counters: Vec<AtomicU64> = slices.iter().map(|_| AtomicU64::new(0)).collect();
    let t0 = Instant::now();
    let total = Duration::from_secs_f64(a.secs);
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = slices
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let w = &words[r.start * words_per_page..r.end * words_per_page];
                let cpu = (!pins.is_empty()).then(|| pins[i % pins.len()]);
                let (stop, ctr) = (&stop, &counters[i]);
                s.spawn(move || -> Result<u64> {
                    if let Some(cpu) = cpu {
                        if let Err(e) = sys::pin_to_cpu(0, cpu as usize) {
                            stop.store(true, Relaxed);
                            return Err(e).with_context(|| format!("pinning chase thread {i}"));
                        }
                    }
                    // The hot loop: loads and one relaxed add per burst, no system calls.
                    let mut pos = 0;
                    while !stop.load(Relaxed) {
                        pos = chase(w, pos, BURST);
                        ctr.fetch_add(BURST, Relaxed);
                    }
                    Ok(pos)
                })
            })
            .collect();
        let mut next = a.interval;
        let (mut last_t, mut last) = (Duration::ZERO, vec![0u64; slices.len()]);
        let looped = loop {
            if stop.load(Relaxed) {
                break Ok(());
            }
            let now = t0.elapsed();
            if now >= next {
                let counts: Vec<u64> = counters.iter().map(|c| c.load(Relaxed)).collect();
                let (hot, cold, per_thread) = match where_(&mut mover) {
                    Ok(p) => p,
                    Err(e) => break Err(e),
                };
                let dt = now.saturating_sub(last_t);
                let threads: Vec<ThreadSample> = counts
                    .iter()
                    .zip(&last)
                    .zip(per_thread)
                    .map(|((c, l), hot)| ThreadSample {
                        steps_per_s: per_s(c - l, dt),
                        hot,
                    })
                    .collect();
                let (steps_per_s, ns_per_step) =
                    rate(counts.iter().sum::<u64>() - last.iter().sum::<u64>(), dt);
                let sample = ChaseLine::Sample(ChaseSample {
                    t: now.as_secs_f64(),
                    hot,
                    cold,
                    steps_per_s,
                    ns_per_step,
                    threads,
                });
                if let Err(e) = emit_chase(&sample) {
                    break Err(e);
                }
                (last_t, last) = (now, counts);
                while next <= t0.elapsed() {
                    next += a.interval;
                }
            }
            if now >= total || terminated() || a.orphaned() {
                break Ok(());
            }
            nap(t0, next.min(total));
        };
        stop.store(true, Relaxed);
        let mut joined = Ok(());
        for h in handles {
            match h.join() {
                Ok(Ok(pos)) => {
                    std::hint::black_box(pos);
                }
                Ok(Err(e)) => joined = joined.and(Err(e)),
                Err(_) => joined = joined.and(Err(anyhow!("a chase thread panicked"))),
            }
        }
        joined?;
        looped
    })?;
    let t = t0.elapsed();
    let counts: Vec<u64> = counters.iter().map(|c| c.load(Relaxed)).collect();
    let (hot, cold, per_thread) = where_(&mut mover)?;
    let steps = counts.iter().sum();
    let (steps_per_s, ns_per_step) = rate(steps, t);
    emit_chase(&ChaseLine::Done(ChaseDone {
        t: t.as_secs_f64(),
        steps,
        hot,
        cold,
        steps_per_s,
        ns_per_step,
        threads: counts
            .iter()
            .zip(per_thread)
            .map(|(c, hot)| ThreadSample {
                steps_per_s: per_s(*c, t),
                hot,
            })
            .collect(),
    }))?;
    Ok(())
}

/// Allocate on `node` in chunks until its `MemFree` (per-node meminfo, drivers/base/node.c
/// `node_read_meminfo()`) is within 1 MiB of `leave_mib` (or below it), re-reading it after
/// each chunk.
fn fill_node(node: i32, leave_mib: u64) -> Result<Vec<AnonMapping>> {
    let nid = NodeId(u16::try_from(node).context("--leave-free-mib needs a --node >= 0")?);
    let sys_root = Path::new("/sys");
    let mib = as_u64(MIB);
    let read = || -> Result<(u64, u64)> {
        let mi = read_node_meminfo(sys_root, nid)
            .with_context(|| format!("reading node {node}'s meminfo"))?;
        let free = mi.mem_free().context("no MemFree in the node's meminfo")?;
        let total = mi
            .mem_total()
            .context("no MemTotal in the node's meminfo")?;
        Ok((free.0 / mib, total.0 / mib))
    };
    let (mut maps, mut allocated) = (Vec::new(), 0u64);
    loop {
        let (free, total) = read()?;
        if free <= leave_mib + 1 {
            return Ok(maps);
        }
        // A node whose MemFree does not fall as we allocate (the binding not honoured) would
        // have us eat the machine: stop at the node's size.
        ensure!(
            allocated < total,
            "allocated {allocated} MiB on node {node} (MemTotal {total} MiB) but MemFree is still {free} MiB"
        );
        // Half the distance each time (at most a chunk): other allocations and the per-CPU
        // vmstat deltas not yet folded into MemFree then cannot make us overshoot by much.
        let chunk = (free - leave_mib).div_ceil(2).min(FILL_CHUNK_MIB);
        maps.push(place(usize::try_from(chunk).context("chunk size")?, node)?);
        allocated += chunk;
    }
}

fn run_hold(
    mib: Option<usize>,
    leave_free_mib: Option<u64>,
    node: i32,
    secs: f64,
    unbind: bool,
) -> Result<()> {
    ensure!(secs.is_finite() && secs >= 0.0, "--secs must be >= 0");
    let maps = match (mib, leave_free_mib) {
        (Some(mib), None) => vec![place(mib, node)?],
        (None, Some(leave)) => fill_node(node, leave)?,
        _ => bail!("give exactly one of --mib and --leave-free-mib"),
    };
    if unbind {
        for m in &maps {
            reset_policy(m)?;
        }
    }
    let addrs: Vec<usize> = maps.iter().flat_map(AnonMapping::page_addrs).collect();
    let held: usize = maps.iter().map(AnonMapping::len).sum();
    let mut mover = Mover::default();
    let placement = Placement::of(&mover.query(0, &addrs)?);
    emit(&HoldLine::Ready {
        pid: pid(),
        addr: maps.first().map_or(0, |m| as_u64(m.addr())),
        node,
        mib: as_u64(held / MIB),
        placement,
    })?;
    std::thread::sleep(Duration::from_secs_f64(secs));
    let placement = Placement::of(&mover.query(0, &addrs)?);
    emit(&HoldLine::Done { placement })?;
    Ok(())
}

/// `folios`: one line `folios pid=P thp=START+LEN hugetlb=START+LEN ... ready` (hex
/// addresses, byte lengths; `thp` from its first 2 MiB boundary), then hold.
fn run_folios(thp_mib: usize, hugetlb: &[String], secs: f64) -> Result<()> {
    ensure!(secs.is_finite() && secs >= 0.0, "--secs must be >= 0");
    let mut thp = AnonMapping::new((thp_mib + 2) * MIB).context("mapping the THP buffer")?;
    thp.advise_hugepage()
        .context("MADV_HUGEPAGE on the THP buffer")?;
    let ps = sys::page_size();
    for (i, b) in thp.as_mut_slice().iter_mut().enumerate().step_by(ps) {
        *b = u8::try_from(i / ps % 251 + 1).unwrap_or(1);
    }
    let start = thp.addr().next_multiple_of(2 * MIB);
    let mut line = format!("folios pid={} thp={start:#x}+{}", pid(), thp_mib * MIB);
    let mut files = Vec::new();
    for h in hugetlb {
        let (path, mib) = h
            .rsplit_once(':')
            .and_then(|(p, m)| Some((p, m.parse::<usize>().ok()?)))
            .ok_or_else(|| anyhow!("--hugetlb wants PATH:MIB, got {h:?}"))?;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("opening {path}"))?;
        f.set_len(as_u64(mib * MIB))
            .with_context(|| format!("sizing {path}"))?;
        let m = FileMapping::new(&f, mib * MIB).with_context(|| format!("mapping {path}"))?;
        std::hint::black_box(m.touch());
        line.push_str(&format!(" hugetlb={:#x}+{}", m.addr(), m.len()));
        files.push((f, m));
    }
    emit(&format_args!("{line} ready"))?;
    std::thread::sleep(Duration::from_secs_f64(secs));
    std::hint::black_box(&thp);
    Ok(())
}

fn run_move(mib: usize, from: u16, to: u16, chunk_pages: usize) -> Result<()> {
    let m = place(mib, i32::from(from))?;
    reset_policy(&m)?;
    let addrs = m.page_addrs();
    let mut mover = Mover::new(MoverConfig {
        chunk_pages,
        move_all: false,
    });
    let out = mover.move_addrs(0, &addrs, NodeId(from), NodeId(to))?;
    let s = *mover.stats();
    ensure!(out.len() == addrs.len(), "one outcome per page");
    emit(&MoveLine {
        pages: s.pages_requested,
        from: i32::from(from),
        to,
        secs: s.move_time.as_secs_f64(),
        moved: s.pages_moved,
        already: s.pages_already_there,
        failed: s.failures.total(),
        busy: s.failures.busy,
        moved_mib_s: s.moved_mib_per_s().unwrap_or(0.0),
        requested_mib_s: s.requested_mib_per_s().unwrap_or(0.0),
    })?;
    Ok(())
}

/// Counters shared by the integrity threads and the report loop.
#[derive(Default)]
struct IntegrityCounters {
    verified: AtomicU64,
    failures: AtomicU64,
    rewritten: AtomicU64,
    discarded: AtomicU64,
    unmapped: AtomicU64,
    cut_blocks: AtomicU64,
    bad: Mutex<Vec<BadWord>>,
    /// Per page of the buffer: unmapped by a cut (the location query skips it).
    gone: Vec<AtomicBool>,
}

impl IntegrityCounters {
    fn new(pages: usize) -> Self {
        IntegrityCounters {
            gone: (0..pages).map(|_| AtomicBool::new(false)).collect(),
            ..IntegrityCounters::default()
        }
    }

    fn failed(&self, bad: BadWord) {
        self.failures.fetch_add(1, Relaxed);
        if let Ok(mut v) = self.bad.lock() {
            if v.len() < MAX_BAD {
                v.push(bad);
            }
        }
    }
}

/// A thread's cuts into its part of the buffer (`--split-every-ms`).
struct Cutter {
    plan: SplitPlan,
    every: Duration,
    next: Instant,
    k: u64,
    cut: Vec<bool>,
}

/// Pages between two looks at the clock while cutting (a clock read is no system call, but
/// not free under TCG either).
const CUT_CHECK_PAGES: usize = 64;

/// One integrity thread: verify every page of its run pass after pass, rewriting one slice
/// per pass with the next generation, until `stop`. A failing page is counted, its first
/// wrong word kept (the first [`MAX_BAD`]), and it is rewritten with its expected contents so
/// that one corruption counts once. With a [`Cutter`], it also cuts its run every so often
/// (see [`cut`]); unmapped pages leave the checked set.
fn integrity_worker(
    run: &mut PageRun<'_>,
    stop: &AtomicBool,
    c: &IntegrityCounters,
    passes: &AtomicU64,
    mut cutter: Option<Cutter>,
) -> Result<()> {
    let pages = run.pages();
    let mut generation = vec![0u32; pages];
    let slices = split(pages, REWRITE_SLICES.min(pages).max(1));
    let mut pass = 0usize;
    // The hot loop: loads, stores and relaxed atomics; the mutex only on a failure, system
    // calls only for the cuts.
    loop {
        let rewrite = &slices[pass % slices.len()];
        for j in 0..pages {
            if stop.load(Relaxed) {
                return Ok(());
            }
            if let Some(ct) = cutter.as_mut() {
                if j % CUT_CHECK_PAGES == 0 && Instant::now() >= ct.next {
                    cut(run, ct, &mut generation, c)?;
                }
            }
            let pbase = as_u64(run.page_addr(j));
            let Some(page) = run.page_mut(j) else {
                continue;
            };
            if let Some(bad) = check_page(page, pbase, generation[j]) {
                c.failed(bad);
                fill_page(page, pbase, generation[j]);
            }
            c.verified.fetch_add(1, Relaxed);
            if rewrite.contains(&j) {
                generation[j] = generation[j].wrapping_add(1);
                fill_page(page, pbase, generation[j]);
                c.rewritten.fetch_add(1, Relaxed);
            }
        }
        pass += 1;
        passes.store(as_u64(pass), Relaxed);
    }
}

/// The next cut of the plan: `MADV_DONTNEED` of a page (which must then read back as zeros:
/// a word that does not is a checksum failure; it is rewritten for its next generation) or
/// `munmap` of one (it leaves the checked set).
fn cut(
    run: &mut PageRun<'_>,
    ct: &mut Cutter,
    generation: &mut [u32],
    c: &IntegrityCounters,
) -> Result<()> {
    ct.next += ct.every;
    let Some(action) = ct.plan.action(ct.k) else {
        return Ok(());
    };
    ct.k += 1;
    let page = match action {
        SplitAction::Discard(p) | SplitAction::Unmap(p) => p,
    };
    if !run.is_mapped(page) {
        return Ok(());
    }
    match action {
        SplitAction::Discard(p) => {
            run.discard(p)
                .with_context(|| format!("discarding page {p} (MADV_DONTNEED)"))?;
            c.discarded.fetch_add(1, Relaxed);
            let pbase = as_u64(run.page_addr(p));
            if let Some(words) = run.page_mut(p) {
                if let Some((i, w)) = words.iter().enumerate().find(|(_, w)| **w != 0) {
                    c.failed(BadWord {
                        addr: pbase + as_u64(i * 8),
                        got: *w,
                        want: 0,
                    });
                }
                generation[p] = generation[p].wrapping_add(1);
                fill_page(words, pbase, generation[p]);
                c.rewritten.fetch_add(1, Relaxed);
            }
        }
        SplitAction::Unmap(p) => {
            run.unmap(p)
                .with_context(|| format!("unmapping page {p} (munmap)"))?;
            c.unmapped.fetch_add(1, Relaxed);
            if let Some(g) = c.gone.get(run.first_page() + p) {
                g.store(true, Relaxed);
            }
        }
    }
    if let Some(b) = ct.plan.block_of(page) {
        if !ct.cut[b] {
            ct.cut[b] = true;
            c.cut_blocks.fetch_add(1, Relaxed);
        }
    }
    Ok(())
}

#[allow(
    clippy::too_many_lines,
    reason = "the integrity run's setup, checks and report, in the order its output lines come"
)]
fn run_integrity(
    mib: usize,
    node: i32,
    secs: f64,
    interval: Duration,
    threads: usize,
    thp: ThpAdvice,
    split_every: Option<Duration>,
) -> Result<()> {
    ensure!(secs.is_finite() && secs >= 0.0, "--secs must be >= 0");
    ensure!(threads >= 1, "--threads must be at least 1");
    let mut m = place(mib, node)?;
    // Its own VMA (a flag no neighbour has), so numa_maps reports exactly this buffer.
    separate(&m, thp, "buffer")?;
    let ps = sys::page_size();
    let words_per_page = ps / 8;
    let base = as_u64(m.addr());
    let pages = m.len() / ps;
    ensure!(
        threads <= pages,
        "--threads {threads} exceeds the {pages} pages"
    );
    for (i, page) in m.as_mut_u64_slice().chunks_mut(words_per_page).enumerate() {
        fill_page(page, base + as_u64(i * ps), 0);
    }
    reset_policy(&m)?;
    let addrs = m.page_addrs();
    let mut mover = Mover::default();
    emit(&IntegrityLine::Ready {
        pid: pid(),
        addr: base,
        node,
        mib: as_u64(mib),
        pages: as_u64(pages),
        threads: u32::try_from(threads).unwrap_or(u32::MAX),
        placement: Placement::of(&mover.query(0, &addrs)?),
    })?;
    let stop = AtomicBool::new(false);
    let counters = IntegrityCounters::new(pages);
    let passes: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
    let t0 = Instant::now();
    let total = Duration::from_secs_f64(secs);
    let mut printed = 0usize;
    let sample = |t: Duration, mover: &mut Mover| -> Result<IntegritySample> {
        // Unmapped pages are no longer the buffer's: only the others are located.
        let live: Vec<usize> = addrs
            .iter()
            .zip(&counters.gone)
            .filter(|(_, g)| !g.load(Relaxed))
            .map(|(a, _)| *a)
            .collect();
        Ok(IntegritySample {
            t: t.as_secs_f64(),
            verified_pages: counters.verified.load(Relaxed),
            failures: counters.failures.load(Relaxed),
            passes: passes.iter().map(|p| p.load(Relaxed)).min().unwrap_or(0),
            rewritten_pages: counters.rewritten.load(Relaxed),
            discarded_pages: counters.discarded.load(Relaxed),
            unmapped_pages: counters.unmapped.load(Relaxed),
            cut_blocks: counters.cut_blocks.load(Relaxed),
            placement: Placement::of(&mover.query(0, &live)?),
        })
    };
    let print_bad = |printed: &mut usize| -> Result<()> {
        let bad: Vec<BadWord> = counters
            .bad
            .lock()
            .map(|v| v[(*printed).min(v.len())..].to_vec())
            .unwrap_or_default();
        for b in bad {
            emit(&IntegrityLine::Bad {
                addr: b.addr,
                got: b.got,
                want: b.want,
            })?;
            *printed += 1;
        }
        Ok(())
    };
    // Pages are reached one at a time from here on, so that a cut (munmap) never leaves a
    // slice over a hole.
    let mut sparse = SparseMapping::from_anon(m);
    let runs = sparse.runs_mut(threads);
    std::thread::scope(|s| -> Result<()> {
        let mut handles = Vec::new();
        for (i, mut run) in runs.into_iter().enumerate() {
            let (stop, c, p) = (&stop, &counters, &passes[i]);
            let cutter = split_every.map(|every| {
                let plan = SplitPlan::new(as_u64(run.page_addr(0)), run.pages(), ps);
                Cutter {
                    plan,
                    every,
                    next: t0 + every,
                    k: 0,
                    cut: vec![false; plan.blocks()],
                }
            });
            handles.push(s.spawn(move || {
                let r = integrity_worker(&mut run, stop, c, p, cutter);
                if r.is_err() {
                    // The others stop too: the run cannot go on as asked.
                    stop.store(true, Relaxed);
                }
                r
            }));
        }
        let mut next = interval;
        let looped = loop {
            if stop.load(Relaxed) {
                // A thread failed (a cut the kernel refused): its error is returned below.
                break Ok(());
            }
            let now = t0.elapsed();
            if now >= next {
                let r = print_bad(&mut printed)
                    .and_then(|()| sample(now, &mut mover))
                    .and_then(|x| emit(&IntegrityLine::Sample(x)));
                if let Err(e) = r {
                    break Err(e);
                }
                while next <= t0.elapsed() {
                    next += interval;
                }
            }
            if now >= total || terminated() {
                break Ok(());
            }
            nap(t0, next.min(total));
        };
        stop.store(true, Relaxed);
        for h in handles {
            h.join()
                .map_err(|_| anyhow!("an integrity thread panicked"))??;
        }
        looped
    })?;
    print_bad(&mut printed)?;
    let done = sample(t0.elapsed(), &mut mover)?;
    emit(&IntegrityLine::Done(done))?;
    Ok(())
}

fn run_ticker(us: u64, cpu: usize, parent: u32) -> Result<()> {
    sys::pin_to_cpu(0, cpu)?;
    let period = Duration::from_micros(us.max(1));
    // Wake, and leave as soon as the chase is gone (we are reparented then).
    while std::os::unix::process::parent_id() == parent {
        std::thread::sleep(period);
    }
    Ok(())
}
