//! `tierd-workload migrate`: move another process's buffer between nodes and time it, either
//! the way tierd's daemon moves pages (tierd-linux's [`Mover`]: `move_pages(2)` over the
//! buffer's addresses in batches of [`MoverConfig::default`]'s `chunk_pages`, the daemon's
//! setting) or the way the kernel moves a whole process (`migrate_pages(2)`, directly or
//! through numactl's `migratepages`). `tierd lab scale` compares the two on the same buffer.
//!
//! One line: `migrate via=<how> pid=P pages=N on_from_before=.. on_to_before=.. on_to_after=..
//! moved=.. refused=.. secs=.. mib_s=..` where `moved` is the growth of the buffer's pages on the target
//! (location queries before and after, which do not count in `secs`).

use std::process::Command;
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use tierd_engine::types::{NodeId, NodeMask};
use tierd_linux::mover::{Mover, MoverConfig};
use tierd_linux::sys;

/// How the buffer is moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Via {
    /// tierd-linux's mover over the buffer's page addresses, as the daemon moves.
    Mover,
    /// `migrate_pages(2)` on the whole process, called here (numactl's arguments).
    Syscall,
    /// numactl's `migratepages PID FROM TO` (which calls `migrate_pages(2)` the same way).
    Numactl,
}

impl Via {
    fn name(self) -> &'static str {
        match self {
            Via::Mover => "mover",
            Via::Syscall => "migrate_pages",
            Via::Numactl => "migratepages",
        }
    }
}

/// The arguments of `migrate`.
#[derive(clap::Args, Debug)]
pub struct MigrateArgs {
    /// The process whose buffer is moved.
    #[arg(long)]
    pid: u32,
    /// Start of the buffer (hex, as `hold` prints it: `addr=0x...`).
    #[arg(long, value_parser = hex_addr)]
    addr: usize,
    /// Its size in MiB.
    #[arg(long)]
    mib: usize,
    /// The node it is on.
    #[arg(long)]
    from: u16,
    /// The node to move it to.
    #[arg(long)]
    to: u16,
    /// How: mover (tierd's), syscall (migrate_pages(2)) or numactl (migratepages).
    #[arg(long, value_enum)]
    via: Via,
}

fn hex_addr(s: &str) -> Result<usize, String> {
    let h = s.strip_prefix("0x").unwrap_or(s);
    usize::from_str_radix(h, 16).map_err(|e| format!("{s:?}: {e}"))
}

/// MiB per second of `pages` base pages in `secs` (0 for no time).
#[must_use]
pub fn mib_per_s(pages: u64, page_size: u64, secs: f64) -> f64 {
    if secs <= 0.0 {
        return 0.0;
    }
    // Page counts stay far below 2^52, where f64 is exact.
    #[allow(clippy::cast_precision_loss)]
    let bytes = (pages * page_size) as f64;
    bytes / f64::from(1u32 << 20) / secs
}

/// Runs `migrate` and prints its line.
///
/// # Errors
/// A bad node, a failed location query, a failed move (the mover's whole-call errors, the
/// syscall's errno, numactl's exit status).
pub fn run(a: &MigrateArgs) -> Result<()> {
    ensure!(a.from < 64 && a.to < 64, "nodes must be below 64");
    ensure!(a.from != a.to, "--from and --to are the same node");
    ensure!(a.mib > 0, "--mib must be at least 1");
    let ps = sys::page_size();
    let pages = a.mib * (1 << 20) / ps;
    let addrs: Vec<usize> = (0..pages).map(|i| a.addr + i * ps).collect();
    let pid = i32::try_from(a.pid).context("pid out of range")?;
    let mut q = Mover::default();
    let count = |q: &mut Mover, node: u16| -> Result<u64> {
        let r = q
            .query(pid, &addrs)
            .with_context(|| format!("locating process {pid}'s pages"))?;
        Ok(r.iter().filter(|n| **n == Ok(NodeId(node))).count() as u64)
    };
    let (on_from, on_to) = (count(&mut q, a.from)?, count(&mut q, a.to)?);
    let t = Instant::now();
    // Pages the call itself reports as not moved (numactl does not say).
    let refused = match a.via {
        Via::Mover => {
            let mut m = Mover::new(MoverConfig::default());
            m.move_addrs(pid, &addrs, NodeId(a.from), NodeId(a.to))
                .context("moving the buffer with tierd's mover")?;
            m.stats().failures.total()
        }
        Via::Syscall => sys::migrate_pages(a.pid, NodeMask(1 << a.from), NodeMask(1 << a.to))
            .with_context(|| format!("migrate_pages({pid}, {}, {})", a.from, a.to))?,
        Via::Numactl => {
            let st = Command::new("migratepages")
                .args([a.pid.to_string(), a.from.to_string(), a.to.to_string()])
                .status()
                .context("running numactl's migratepages")?;
            ensure!(st.success(), "migratepages {pid} {} {}: {st}", a.from, a.to);
            0
        }
    };
    let secs = t.elapsed().as_secs_f64();
    let after = count(&mut q, a.to)?;
    let moved = after.saturating_sub(on_to);
    println!(
        "migrate via={} pid={pid} pages={pages} on_from_before={on_from} on_to_before={on_to} \
         on_to_after={after} moved={moved} refused={refused} secs={secs:.4} mib_s={:.1}",
        a.via.name(),
        mib_per_s(moved, ps as u64, secs)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_is_mib_per_second() {
        assert!((mib_per_s(256 * 100, 4096, 2.0) - 50.0).abs() < 1e-9);
        assert!(mib_per_s(10, 4096, 0.0).abs() < f64::EPSILON);
    }

    #[test]
    fn addresses_parse_with_or_without_0x() {
        assert_eq!(hex_addr("0x7f00"), Ok(0x7f00));
        assert_eq!(hex_addr("7f00"), Ok(0x7f00));
        assert!(hex_addr("0xzz").is_err());
    }
}
