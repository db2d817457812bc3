//! Benchmarks of the pghot record store ([`HotnessStore`]): ingest rate, drain cost, and
//! (printed before the criterion runs, since criterion measures time only) bytes per tracked
//! page for dense and sparse layouts.
//!
//! Run: `cargo bench -p tierd-engine --bench hotness -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput};
use tierd_engine::hotness::{HotnessMode, HotnessParams, HotnessStore, ReadyPage};
use tierd_engine::types::{Nanos, NodeId, PageKey, PageSize, SpaceId, Vpn, HPAGE_PMD_NR};

/// Pages in the working set of the random and drain benchmarks (4 GiB of 4 KiB pages).
const WORKING_SET: u64 = 1 << 20;
/// Observations per measured iteration of the ingest benchmarks.
const OBSERVATIONS: u64 = 1 << 20;
/// Time between observations: 1 µs, so one iteration spans about a second and pages recorded
/// twice in it are within the window (they become ready).
const STEP_NS: u64 = 1_000;

const MODES: [HotnessMode; 2] = [HotnessMode::Default, HotnessMode::Precise];

fn mode_name(mode: HotnessMode) -> &'static str {
    match mode {
        HotnessMode::Default => "default",
        HotnessMode::Precise => "precise",
    }
}

fn params(mode: HotnessMode) -> HotnessParams {
    HotnessParams::kernel_defaults(mode, NodeId(0))
}

fn key(vpn: u64) -> PageKey {
    PageKey {
        space: SpaceId(1),
        vpn: Vpn(vpn),
    }
}

/// Seeded xorshift64*: deterministic page sequences without a `rand` dependency.
fn random_vpns(n: u64, range: u64, mut seed: u64) -> Vec<u64> {
    (0..n)
        .map(|_| {
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            seed.wrapping_mul(0x2545_F491_4F6C_DD1D) % range
        })
        .collect()
}

fn bench_ingest(c: &mut Criterion) {
    let mut g = c.benchmark_group("ingest");
    g.throughput(Throughput::Elements(OBSERVATIONS));
    let random = random_vpns(OBSERVATIONS, WORKING_SET, 0x9E37_79B9_7F4A_7C15);
    for mode in MODES {
        let name = mode_name(mode);

        // Steady state: the store already holds the working set, as after the first second
        // of a run.
        let mut store = HotnessStore::new(params(mode));
        let mut now = 0u64;
        g.bench_function(format!("{name}/dense_seq"), |b| {
            b.iter(|| {
                for vpn in 0..OBSERVATIONS {
                    now += STEP_NS;
                    black_box(store.record(key(vpn), PageSize::Base, None, Nanos(now)));
                }
            });
        });

        let mut store = HotnessStore::new(params(mode));
        let mut now = 0u64;
        g.bench_function(format!("{name}/random_1M"), |b| {
            b.iter(|| {
                for &vpn in &random {
                    now += STEP_NS;
                    black_box(store.record(key(vpn), PageSize::Base, Some(NodeId(1)), Nanos(now)));
                }
            });
        });

        // First touch: every chunk is allocated inside the measurement.
        g.bench_function(format!("{name}/dense_seq_cold"), |b| {
            b.iter_batched(
                || HotnessStore::new(params(mode)),
                |mut store| {
                    for vpn in 0..OBSERVATIONS {
                        store.record(key(vpn), PageSize::Base, None, Nanos(vpn * STEP_NS));
                    }
                    store
                },
                BatchSize::LargeInput,
            );
        });
    }
    g.finish();
}

/// A store with `WORKING_SET` tracked pages of which every tenth is ready.
fn store_with_ready_tenth(mode: HotnessMode) -> HotnessStore {
    let mut store = HotnessStore::new(params(mode));
    for vpn in 0..WORKING_SET {
        store.record(key(vpn), PageSize::Base, None, Nanos::from_millis(1));
    }
    for vpn in (0..WORKING_SET).step_by(10) {
        store.record(key(vpn), PageSize::Base, None, Nanos::from_millis(2));
    }
    assert_eq!(store.tracked_pages(), WORKING_SET);
    assert_eq!(store.ready_pages(), WORKING_SET.div_ceil(10));
    store
}

fn bench_drain(c: &mut Criterion) {
    let mut g = c.benchmark_group("drain");
    // Elements = tracked pages (1M), of which 10% are emitted.
    g.throughput(Throughput::Elements(WORKING_SET));
    for mode in MODES {
        let store = store_with_ready_tenth(mode);
        let mut out: Vec<ReadyPage> = Vec::new();
        g.bench_function(format!("{}/1M_tracked_10pct_ready", mode_name(mode)), |b| {
            b.iter_batched(
                || store.clone(),
                |mut s| {
                    out.clear();
                    s.drain_ready(Nanos::from_millis(3), &mut out);
                    assert_eq!(out.len() as u64, WORKING_SET.div_ceil(10));
                    s
                },
                BatchSize::LargeInput,
            );
        });
    }
    g.finish();
}

/// Prints bytes per tracked page ([`HotnessStore::memory_bytes`], which counts the record
/// arena, chunk metadata, hash index and lists) for dense and sparse layouts.
fn print_memory() {
    println!("hotness store memory (HotnessStore::memory_bytes / tracked_pages)");
    println!(
        "{:<8} {:<36} {:>9} {:>7} {:>12} {:>10}",
        "mode", "layout", "tracked", "chunks", "bytes", "B/page"
    );
    for mode in MODES {
        let dense = {
            let mut s = HotnessStore::new(params(mode));
            for vpn in 0..WORKING_SET {
                s.record(key(vpn), PageSize::Base, None, Nanos::from_millis(1));
            }
            ("dense 1M pages", s)
        };
        let sparse = {
            let mut s = HotnessStore::new(params(mode));
            for i in 0..100_000 {
                s.record(
                    key(i * HPAGE_PMD_NR + 7),
                    PageSize::Base,
                    None,
                    Nanos::from_millis(1),
                );
            }
            ("sparse 100k pages, one per chunk", s)
        };
        for (layout, s) in [dense, sparse] {
            let bytes = s.memory_bytes();
            // Display only.
            #[allow(clippy::cast_precision_loss)]
            let per_page = bytes as f64 / s.tracked_pages() as f64;
            println!(
                "{:<8} {:<36} {:>9} {:>7} {:>12} {:>10.3}",
                mode_name(mode),
                layout,
                s.tracked_pages(),
                s.chunks(),
                bytes,
                per_page
            );
        }
    }
    println!();
}

fn main() {
    print_memory();
    let mut c = Criterion::default().configure_from_args();
    bench_ingest(&mut c);
    bench_drain(&mut c);
    c.final_summary();
}
