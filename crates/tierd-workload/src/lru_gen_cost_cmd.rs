//! `tierd-workload lru-gen-cost`: what one aging pass of the multi-gen LRU costs per page.
//!
//! Under MGLRU (`CONFIG_LRU_GEN_ENABLED`, the default of the lab's Debian kernels) reclaim
//! does not visit pages one by one through the reverse map to learn which were touched: its
//! aging (mm/vmscan.c `try_to_inc_max_seq()` -> `walk_mm()` -> `walk_pte_range()`) walks the
//! page tables of the memcg's processes, clears every accessed bit it finds and moves those
//! folios to the youngest generation (`folio_update_gen()`); eviction then takes the oldest
//! generation. How fast that walk is decides whether reclaim can tell a page touched once a
//! second from one touched more often (seed D's sweeper against omnetpp, docs/simulator.md
//! "D under MGLRU"), the role the classic LRU's per-page visit plays under
//! `scripts/lru-scan-cost.sh`.
//!
//! This command maps `--mib` of base pages (`MADV_NOHUGEPAGE`), writes every page, and then
//! for each round (a) reads every page, so that every PTE is young, and asks the kernel for
//! one aging pass of its own memcg on `--node` through `/sys/kernel/debug/lru_gen`
//! (`run_aging()`), timing the write by the thread's CPU clock (the walk runs in the
//! writer's context) and by wall time; then (b) asks for a second pass at once, with no page
//! touched in between, which finds every PTE old. It reports how much of the buffer pass (a)
//! moved into the generation that was the youngest while it walked (`young=`: anonymous pages
//! there after the pass; on 6.14 and later a folio seen young for the first time is only
//! marked referenced, `folio_update_gen()`, and moves at its second sighting). One line
//! per pass and a summary, `lru-gen-cost pages=N rounds=R young_cpu_ns_median=..
//! idle_cpu_ns_median=.. ..`, in nanoseconds per page of the buffer. Root only (debugfs).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use tierd_engine::types::NodeId;
use tierd_linux::read::cgroup::{parse_proc_cgroup, unified_path};
use tierd_linux::read::lru_gen::{aging_command, read_lru_gen, Lruvec};
use tierd_linux::sys;
use tierd_workload::report::median;

/// The arguments of `lru-gen-cost`.
#[derive(clap::Args, Debug)]
pub struct LruGenCostArgs {
    /// MiB of base pages to age (all on `--node`: run it on that node's CPUs).
    #[arg(long, default_value_t = 1024)]
    mib: usize,
    /// Rounds to time (each: one pass over young PTEs, one over old ones).
    #[arg(long, default_value_t = 11)]
    rounds: u32,
    /// The node whose lruvec is aged (where the buffer's pages are).
    #[arg(long, default_value_t = 0)]
    node: u16,
    /// Walk every page table (`force_scan`), as the debugfs file allows; kswapd's own aging
    /// does not, and skips tables whose PMD entry is old or which the Bloom filter dropped.
    #[arg(long)]
    force: bool,
    /// Where debugfs is mounted.
    #[arg(long, default_value = "/sys/kernel/debug")]
    debugfs: std::path::PathBuf,
}

/// One timed aging pass: CPU and wall time, and the youngest generation's anonymous pages
/// after it.
struct Pass {
    cpu: Duration,
    wall: Duration,
    young: u64,
    /// Anonymous pages per generation after the pass, oldest first.
    gens: Vec<u64>,
}

/// Runs `lru-gen-cost` and prints its lines.
///
/// # Errors
/// A zero size or round count; MGLRU off or absent; debugfs not mounted or not writable; the
/// memcg not in the file; a failed `mmap` or `madvise`; a pass the kernel refused.
pub fn run(a: &LruGenCostArgs) -> Result<()> {
    ensure!(a.mib > 0, "--mib must be at least 1");
    ensure!(a.rounds > 0, "--rounds must be at least 1");
    let enabled = std::fs::read_to_string("/sys/kernel/mm/lru_gen/enabled")
        .context("reading /sys/kernel/mm/lru_gen/enabled (a kernel without CONFIG_LRU_GEN?)")?;
    let caps = u32::from_str_radix(enabled.trim().trim_start_matches("0x"), 16)
        .with_context(|| format!("/sys/kernel/mm/lru_gen/enabled holds {enabled:?}"))?;
    ensure!(
        caps & 1 != 0,
        "the multi-gen LRU is off ({}); `echo y > /sys/kernel/mm/lru_gen/enabled` turns it on",
        enabled.trim()
    );
    let cgroup =
        std::fs::read_to_string("/proc/self/cgroup").context("reading /proc/self/cgroup")?;
    let memberships = parse_proc_cgroup(&cgroup).context("parsing /proc/self/cgroup")?;
    let path = unified_path(&memberships).unwrap_or("/").to_owned();
    let node = NodeId(a.node);

    let ps = sys::page_size();
    let m = crate::pte_cost_cmd::written_base_pages(a.mib)?;
    let words = ps / 8;
    let pages = m.len() / ps;
    // Page counts stay far below 2^52, where f64 is exact.
    #[allow(clippy::cast_precision_loss)]
    let per_page = |d: Duration| d.as_nanos() as f64 / pages as f64;
    let mut young_cpu = Vec::new();
    let mut young_wall = Vec::new();
    let mut idle_cpu = Vec::new();
    let mut moved = Vec::new();
    for round in 0..a.rounds {
        // Every PTE young: one read per page sets its accessed bit.
        let sum: u64 = m.as_u64_slice().iter().step_by(words).copied().sum();
        std::hint::black_box(sum);
        let y = age(&a.debugfs, &path, node, a.force)?;
        let i = age(&a.debugfs, &path, node, a.force)?;
        let (yc, yw, ic, iw) = (
            per_page(y.cpu),
            per_page(y.wall),
            per_page(i.cpu),
            per_page(i.wall),
        );
        println!(
            "lru-gen-cost round={round} pages={pages} young_cpu_ns={yc:.1} young_wall_ns={yw:.1} \
             young={} idle_cpu_ns={ic:.1} idle_wall_ns={iw:.1} gens={:?}",
            y.young, i.gens
        );
        young_cpu.push(yc);
        young_wall.push(yw);
        idle_cpu.push(ic);
        #[allow(clippy::cast_precision_loss)]
        moved.push(y.young as f64);
    }
    println!(
        "lru-gen-cost pages={pages} rounds={} force={} young_cpu_ns_median={:.1} \
         young_wall_ns_median={:.1} idle_cpu_ns_median={:.1} young_median={:.0}",
        a.rounds,
        u8::from(a.force),
        median(young_cpu).unwrap_or(0.0),
        median(young_wall).unwrap_or(0.0),
        median(idle_cpu).unwrap_or(0.0),
        median(moved).unwrap_or(0.0),
    );
    Ok(())
}

/// The lruvec of the memcg at `path` on `node`, from a fresh read of the file.
fn lruvec(debugfs: &Path, path: &str, node: NodeId) -> Result<(u64, Lruvec)> {
    let memcgs = read_lru_gen(debugfs)?;
    let Some(memcg) = memcgs
        .iter()
        .find(|m| m.path == path)
        .or_else(|| (memcgs.len() == 1).then(|| &memcgs[0]))
    else {
        bail!("no memcg {path:?} in {}/lru_gen", debugfs.display());
    };
    let l = memcg
        .node(node)
        .with_context(|| format!("memcg {path:?} has no lruvec on {node} in lru_gen"))?;
    Ok((memcg.id, l.clone()))
}

/// One aging pass of the memcg at `path` on `node`, timed.
fn age(debugfs: &Path, path: &str, node: NodeId, force: bool) -> Result<Pass> {
    let (id, before) = lruvec(debugfs, path, node)?;
    let seq = before
        .max_seq()
        .with_context(|| format!("no generation of memcg {path:?} on {node} in lru_gen"))?;
    // swappiness 100: anonymous VMAs are walked (should_skip_vma() skips them at 0).
    let cmd = aging_command(id, node, seq, 100, force);
    let file = debugfs.join("lru_gen");
    let (c0, w0) = (sys::thread_cpu_time(), Instant::now());
    std::fs::write(&file, &cmd)
        .with_context(|| format!("writing {:?} to {}", cmd.trim_end(), file.display()))?;
    let (cpu, wall) = (sys::thread_cpu_time().saturating_sub(c0), w0.elapsed());
    let (_, after) = lruvec(debugfs, path, node)?;
    ensure!(
        after.max_seq() == Some(seq + 1),
        "the aging pass did not add a generation (max_seq {seq} -> {:?})",
        after.max_seq()
    );
    // The walk moves what it finds young into the generation that was the youngest while it
    // ran (walk_pte_range() takes `max_seq` before inc_max_seq() adds the new one), so after
    // the pass that is the second youngest.
    let young = after
        .gens
        .iter()
        .find(|g| g.seq == seq)
        .map_or(0, |g| g.anon);
    Ok(Pass {
        cpu,
        wall,
        young,
        gens: after.gens.iter().map(|g| g.anon).collect(),
    })
}
