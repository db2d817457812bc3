//! `tierd-workload`: the guest workload binary (see the library docs for the subcommands and
//! the static build).

use std::io::Write;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::{Parser, Subcommand};
use tierd_engine::types::{NodeId, NodeMask};
use tierd_linux::mover::{Mover, MoverConfig};
use tierd_linux::sys::{self, AnonMapping, MPOL_BIND, MPOL_DEFAULT};
use tierd_workload::chase::{build_cycle, chase, WORDS_PER_LINE};
use tierd_workload::report::{
    ChaseDone, ChaseLine, ChaseReady, ChaseSample, HoldLine, MoveLine, Placement,
};

const MIB: usize = 1 << 20;
/// Steps between clock reads: small enough to keep reports on time (~10 ms at TCG speeds),
/// large enough that reading the clock costs nothing.
const BURST: u64 = 1 << 15;

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
        /// Seed of the chase permutation.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Pin to CPU 0 with a ticker process waking every this many µs (0: off).
        #[arg(long, default_value_t = 0)]
        tick_us: u64,
    },
    /// Allocate, touch and hold memory.
    Hold {
        /// Size in MiB.
        #[arg(long)]
        mib: usize,
        /// Node to bind to (-1: default policy).
        #[arg(long, allow_hyphen_values = true)]
        node: i32,
        /// Seconds to hold it.
        #[arg(long)]
        secs: f64,
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
        /// Addresses per move_pages call.
        #[arg(long, default_value_t = 512)]
        chunk_pages: usize,
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

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Chase {
            total_mib,
            hot_mib,
            secs,
            node,
            interval_ms,
            seed,
            tick_us,
        } => run_chase(&ChaseArgs {
            total_mib,
            hot_mib,
            secs,
            node,
            interval: Duration::from_millis(interval_ms.max(1)),
            seed,
            tick_us,
        }),
        Cmd::Hold { mib, node, secs } => run_hold(mib, node, secs),
        Cmd::Move {
            mib,
            from,
            to,
            chunk_pages,
        } => run_move(mib, from, to, chunk_pages),
        Cmd::Ticker { us, cpu, parent } => run_ticker(us, cpu, parent),
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
}

/// Map `mib` MiB, bind it to `node` (if >= 0) and touch every page so it is allocated there.
fn place(mib: usize, node: i32) -> Result<AnonMapping> {
    ensure!(mib > 0, "size must be at least 1 MiB");
    let len = mib.checked_mul(MIB).context("size overflows")?;
    let mut m = AnonMapping::new(len)?;
    if node >= 0 {
        let n = u16::try_from(node).context("node out of range")?;
        ensure!(n < 64, "node {n} out of range (0..64)");
        sys::mbind(m.addr(), m.len(), MPOL_BIND, NodeMask(1 << n), 0)
            .with_context(|| format!("binding {mib} MiB to node {n}"))?;
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

/// Start the ticker (a copy of this binary) and pin ourselves to the same CPU.
fn start_ticker(us: u64) -> Result<Child> {
    const CPU: usize = 0;
    sys::pin_to_cpu(0, CPU).context("pinning the chase to CPU 0")?;
    let exe = std::env::current_exe().context("locating /proc/self/exe for the ticker")?;
    Command::new(exe)
        .args(["ticker", "--us", &us.to_string(), "--cpu", &CPU.to_string()])
        .args(["--parent", &std::process::id().to_string()])
        .spawn()
        .context("starting the ticker")
}

fn run_chase(a: &ChaseArgs) -> Result<()> {
    ensure!(a.hot_mib >= 1, "--hot-mib must be at least 1");
    ensure!(
        a.hot_mib <= a.total_mib,
        "--hot-mib {} exceeds --total-mib {}",
        a.hot_mib,
        a.total_mib
    );
    ensure!(a.secs.is_finite() && a.secs >= 0.0, "--secs must be >= 0");
    // Hot and cold parts are separate mappings, the hot one marked MADV_NOHUGEPAGE so the
    // kernel cannot merge them: /proc/PID/numa_maps then reports each part on its own line,
    // which is how the guest test reads placement independently of tierd.
    let mut m = place(a.hot_mib, a.node)?;
    m.advise_nohugepage()
        .context("marking the hot part MADV_NOHUGEPAGE")?;
    reset_policy(&m)?;
    let cold = if a.total_mib > a.hot_mib {
        let c = place(a.total_mib - a.hot_mib, a.node)?;
        reset_policy(&c)?;
        Some(c)
    } else {
        None
    };
    let ps = sys::page_size();
    let mut addrs = m.page_addrs();
    let hot_pages = addrs.len();
    if let Some(c) = &cold {
        addrs.extend(c.page_addrs());
    }
    let hot_lines = a.hot_mib * MIB / (WORDS_PER_LINE * 8);
    if !build_cycle(m.as_mut_u64_slice(), hot_lines, a.seed) {
        bail!("hot part of {} MiB too small for a chase", a.hot_mib);
    }
    debug_assert_eq!(hot_pages, a.hot_mib * MIB / ps);
    let mut mover = Mover::new(MoverConfig::default());
    let where_ = |mover: &mut Mover| -> Result<(Placement, Placement)> {
        let q = mover.query(0, &addrs)?;
        Ok((
            Placement::of(&q[..hot_pages]),
            Placement::of(&q[hot_pages..]),
        ))
    };
    let mut ticker = if a.tick_us > 0 {
        Some(start_ticker(a.tick_us)?)
    } else {
        None
    };
    emit(&ChaseLine::Ready(ChaseReady {
        pid: pid(),
        addr: as_u64(m.addr()),
        cold_addr: cold.as_ref().map_or(0, |c| as_u64(c.addr())),
        node: a.node,
        total_pages: as_u64(addrs.len()),
        hot_pages: as_u64(hot_pages),
        tick_us: a.tick_us,
        ticker_pid: ticker
            .as_ref()
            .map_or(0, |c| i32::try_from(c.id()).unwrap_or(0)),
    }))?;
    let words = m.as_u64_slice();
    let total = Duration::from_secs_f64(a.secs);
    let (mut pos, mut steps, mut iv_steps) = (0u64, 0u64, 0u64);
    let mut chase_time = Duration::ZERO;
    let mut iv_time = Duration::ZERO;
    let t0 = Instant::now();
    let mut next = a.interval;
    let result = loop {
        let b0 = Instant::now();
        pos = chase(words, pos, BURST);
        let b = b0.elapsed();
        steps += BURST;
        iv_steps += BURST;
        chase_time += b;
        iv_time += b;
        let now = t0.elapsed();
        if now >= next {
            let (hot, cold) = match where_(&mut mover) {
                Ok(p) => p,
                Err(e) => break Err(e),
            };
            let (steps_per_s, ns_per_step) = rate(iv_steps, iv_time);
            let sample = ChaseLine::Sample(ChaseSample {
                t: now.as_secs_f64(),
                hot,
                cold,
                steps_per_s,
                ns_per_step,
            });
            if let Err(e) = emit(&sample) {
                break Err(e);
            }
            (iv_steps, iv_time) = (0, Duration::ZERO);
            while next <= t0.elapsed() {
                next += a.interval;
            }
        }
        if now >= total {
            break Ok(now);
        }
    };
    std::hint::black_box(pos);
    if let Some(c) = ticker.as_mut() {
        // Best effort: it also exits on its own once we are gone.
        let _ = c.kill();
        let _ = c.wait();
    }
    let t = result?;
    let (hot, cold) = where_(&mut mover)?;
    let (steps_per_s, ns_per_step) = rate(steps, chase_time);
    emit(&ChaseLine::Done(ChaseDone {
        t: t.as_secs_f64(),
        steps,
        hot,
        cold,
        steps_per_s,
        ns_per_step,
    }))?;
    Ok(())
}

fn run_hold(mib: usize, node: i32, secs: f64) -> Result<()> {
    ensure!(secs.is_finite() && secs >= 0.0, "--secs must be >= 0");
    let m = place(mib, node)?;
    let addrs = m.page_addrs();
    let mut mover = Mover::default();
    let placement = Placement::of(&mover.query(0, &addrs)?);
    emit(&HoldLine::Ready {
        pid: pid(),
        addr: as_u64(m.addr()),
        node,
        mib: as_u64(mib),
        placement,
    })?;
    std::thread::sleep(Duration::from_secs_f64(secs));
    let placement = Placement::of(&mover.query(0, &addrs)?);
    emit(&HoldLine::Done { placement })?;
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

fn run_ticker(us: u64, cpu: usize, parent: u32) -> Result<()> {
    sys::pin_to_cpu(0, cpu)?;
    let period = Duration::from_micros(us.max(1));
    // Wake, and leave as soon as the chase is gone (we are reparented then).
    while std::os::unix::process::parent_id() == parent {
        std::thread::sleep(period);
    }
    Ok(())
}
