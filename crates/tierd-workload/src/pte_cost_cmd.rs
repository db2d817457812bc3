//! `tierd-workload pte-cost`: what one PTE update costs on this machine, the way NUMA
//! balancing's scanner pays it.
//!
//! `task_numa_work()` makes the PTEs of the next 256 MB of a process's memory `PROT_NONE`
//! through `change_prot_numa()` -> `change_protection()` (mm/mprotect.c), the same walk as
//! `mprotect(2)`: every present PTE rewritten, one TLB flush of the range. The scanner's cost
//! matters beyond CPU time, because the kernel throttles a thread's next pass by 32 times the
//! last one's runtime (kernel/sched/fair.c `task_numa_work()`, `node_stamp`). The simulator's
//! twin of lab A runs its guest's kernel under QEMU's TCG, where that walk is emulated, so the
//! twin needs the guest's cost, not the hardware's: this command measures it, in the guest and
//! on the host alike (scripts/pte-cost.sh runs both).
//!
//! It maps `--mib` of base pages (`MADV_NOHUGEPAGE`), writes every page so that each PTE is
//! present, then times `--rounds` `mprotect(2)` round trips over the whole mapping:
//! `PROT_NONE` (the scanner's walk) and back to read/write. One line per round and a summary,
//! `pte-cost pages=N rounds=R none_ns_median=.. none_ns_min=.. restore_ns_median=..`, in
//! nanoseconds per page.

use anyhow::{ensure, Context, Result};
use tierd_linux::sys::{self, AnonMapping};
use tierd_workload::report::median;

/// The arguments of `pte-cost`.
#[derive(clap::Args, Debug)]
pub struct PteCostArgs {
    /// MiB of base pages to walk (the scanner's pass is 256 MB).
    #[arg(long, default_value_t = 256)]
    mib: usize,
    /// Round trips to time.
    #[arg(long, default_value_t = 11)]
    rounds: u32,
}

/// Maps `mib` MiB of anonymous memory in base pages (`MADV_NOHUGEPAGE`: one PTE per 4 KiB,
/// as the lab's chase buffer has with THP `never`) and writes every page, so that each PTE is
/// present: the buffer `pte-cost` and `lru-gen-cost` walk.
///
/// # Errors
/// A size too large for the address space, or a failed `mmap` or `madvise`.
pub fn written_base_pages(mib: usize) -> Result<AnonMapping> {
    let len = mib
        .checked_mul(1 << 20)
        .context("--mib is too large for this machine's addresses")?;
    let mut m = AnonMapping::new(len).with_context(|| format!("mapping {mib} MiB"))?;
    m.advise_nohugepage()
        .context("madvise(MADV_NOHUGEPAGE) on the buffer")?;
    let words = sys::page_size() / 8;
    // Non-zero contents, one word a page.
    for (i, w) in m.as_mut_u64_slice().iter_mut().step_by(words).enumerate() {
        *w = i as u64 | 1;
    }
    Ok(m)
}

/// Runs `pte-cost` and prints its lines.
///
/// # Errors
/// A zero size or round count, or a failed `mmap`, `madvise` or `mprotect`.
pub fn run(a: &PteCostArgs) -> Result<()> {
    ensure!(a.mib > 0, "--mib must be at least 1");
    ensure!(a.rounds > 0, "--rounds must be at least 1");
    let mut m = written_base_pages(a.mib)?;
    let pages = m.len() / sys::page_size();
    // Page counts stay far below 2^52, where f64 is exact.
    #[allow(clippy::cast_precision_loss)]
    let per_page = |d: std::time::Duration| d.as_nanos() as f64 / pages as f64;
    let (mut none, mut restore) = (Vec::new(), Vec::new());
    for round in 0..a.rounds {
        let (n, r) = m
            .time_protect_round_trip()
            .context("mprotect round trip over the buffer")?;
        let (n, r) = (per_page(n), per_page(r));
        println!("pte-cost round={round} pages={pages} none_ns={n:.1} restore_ns={r:.1}");
        none.push(n);
        restore.push(r);
    }
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let (none_min, restore_min) = (min(&none), min(&restore));
    println!(
        "pte-cost pages={pages} rounds={} none_ns_median={:.1} none_ns_min={none_min:.1} \
         restore_ns_median={:.1} restore_ns_min={restore_min:.1}",
        a.rounds,
        median(none).unwrap_or(0.0),
        median(restore).unwrap_or(0.0),
    );
    Ok(())
}
