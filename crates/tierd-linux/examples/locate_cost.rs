//! What one DAMON pass costs the daemon's locate step on this host, with and without the
//! frame-based node lookup (issue 14): a buffer of this process stands for the workload, one
//! accessed range per "region" covers it, and the pass runs `locate` through the daemon's
//! folio map (pagemap + kpageflags, needs root) with `move_pages(2)` as the locator, or with
//! the nodes' memory blocks answering from the frames pagemap showed.
//!
//! ```sh
//! cargo run --release -p tierd-linux --example locate_cost -- [move_pages|frames] [MiB] [passes]
//! strace -c -f target/release/examples/locate_cost frames 128 20      # syscalls per pass
//! ```

use std::path::Path;
use std::time::Instant;

use tierd_engine::types::{Nanos, NodeId, Pfn, Vpn};
use tierd_engine::SourceKind;
use tierd_linux::mover::{Mover, MoverError};
use tierd_linux::read::topology::{read_node_frames, NodeFrames};
use tierd_linux::source::folio::{HugetlbPolicy, ProcFolios};
use tierd_linux::source::locate::{locate, LocateParams, LocateStats, Locator};
use tierd_linux::source::AccessedRange;

/// `move_pages(2)`, or the frames' nodes first.
struct Loc {
    mover: Mover,
    frames: Option<NodeFrames>,
}

impl Locator for Loc {
    type Error = MoverError;
    fn nodes(&mut self, pid: u32, addrs: &[u64]) -> Result<Vec<Result<NodeId, i32>>, MoverError> {
        self.mover.nodes(pid, addrs)
    }
    fn node_of_frame(&self, pfn: Pfn) -> Option<NodeId> {
        self.frames.as_ref()?.node_of(pfn.0)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("frames", String::as_str);
    let mib: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(128);
    let passes: u32 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(10);
    let page = 4096usize;
    let mut buf = vec![1u8; mib << 20];
    for p in buf.chunks_mut(page) {
        p[0] = 2;
    }
    let start = (buf.as_ptr() as u64).div_ceil(page as u64);
    let pages = (mib << 20) as u64 / page as u64 - 1;
    // 200 regions over the buffer, as DAMON forms them over a hot set.
    let regions = 200u64;
    let ranges: Vec<AccessedRange> = (0..regions)
        .map(|i| AccessedRange {
            pid: std::process::id(),
            start: Vpn(start + i * pages / regions),
            nr_pages: pages / regions,
            time: Nanos(1),
            kind: SourceKind::AccessedBitScan,
            accessing_node: None,
            nr_accesses: 5,
            pfn: None,
        })
        .collect();
    let frames = (mode == "frames").then(|| read_node_frames(Path::new("/sys")).expect("sysfs"));
    let mut loc = Loc {
        mover: Mover::default(),
        frames,
    };
    let mut folios = ProcFolios::new(Path::new("/proc"));
    let params = LocateParams {
        max_pages: 262_144,
        min_nr_accesses: 1,
        min_relative_permille: 250,
        hugetlb: HugetlbPolicy::Leave,
    };
    let mut stats = LocateStats::default();
    let mut out = Vec::new();
    let t = Instant::now();
    for _ in 0..passes {
        out.clear();
        let failed = locate(
            &ranges,
            params,
            &[NodeId(0)],
            |_| true,
            &mut loc,
            &mut folios,
            &mut stats,
            &mut out,
        );
        assert!(failed.is_empty());
    }
    let per = t.elapsed() / passes;
    println!(
        "{mode}: {mib} MiB, {passes} passes, folio method {}, {:?} per pass, {} observations a pass, looked up {} (by frame {}), query calls {}",
        folios.method(),
        per,
        out.len(),
        stats.looked_up / u64::from(passes),
        stats.by_frame / u64::from(passes),
        loc.mover.stats().query_calls / u64::from(passes),
    );
    std::hint::black_box(&buf);
}
