//! Planning benchmark: one promoter pass over 1 M and 10 M tracked slow-tier pages.
//!
//! Every tracked page has a record; every tenth is ready, spread evenly so that every record
//! chunk is hot and the promoter walks all of them (the worst case for a pass). The target has
//! plenty of free space, so every ready page is planned. Run with
//! `cargo bench -p tierd-engine --bench engine`.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use tierd_engine::topology::{dram_cxl, Topology};
use tierd_engine::types::{Bytes, Nanos, NodeId, PageRef, SpaceId, Vpn};
use tierd_engine::{Engine, EngineConfig, NodeUsage, Observation, SourceKind, SystemUsage};

fn topology() -> Topology {
    dram_cxl(Bytes::gib(256), Bytes::gib(1024)).expect("valid topology")
}

fn engine_with(tracked: u64) -> Engine {
    let mut e = Engine::new(EngineConfig::default(), topology()).expect("valid config");
    let mut batch = Vec::with_capacity(1 << 16);
    let flush = |e: &mut Engine, b: &mut Vec<Observation>| {
        e.observe(b);
        b.clear();
    };
    for vpn in 0..tracked {
        let o = Observation {
            page: PageRef::base(
                SpaceId(1 + u32::try_from(vpn >> 24).expect("small")),
                Vpn(vpn),
            ),
            page_node: NodeId(1),
            accessing_node: Some(NodeId(0)),
            source: SourceKind::HwSample,
            time: Nanos::from_millis(1),
            weight: 1,
        };
        batch.push(o);
        if vpn % 10 == 0 {
            batch.push(Observation {
                time: Nanos::from_millis(2),
                weight: 1,
                ..o
            });
        }
        if batch.len() >= 1 << 16 {
            flush(&mut e, &mut batch);
        }
    }
    flush(&mut e, &mut batch);
    e
}

fn usage() -> SystemUsage {
    let mut u = SystemUsage::default();
    u.nodes.insert(
        NodeId(0),
        NodeUsage {
            free: Bytes::gib(200),
            promo_watermark: None,
        },
    );
    u.nodes.insert(
        NodeId(1),
        NodeUsage {
            free: Bytes::gib(100),
            promo_watermark: None,
        },
    );
    u
}

fn planning(c: &mut Criterion) {
    let mut g = c.benchmark_group("plan");
    g.sample_size(10);
    for tracked in [1_000_000u64, 10_000_000] {
        let u = usage();
        g.bench_function(
            format!("tick_{}M_tracked_10pct_ready", tracked / 1_000_000),
            |b| {
                b.iter_batched_ref(
                    || engine_with(tracked),
                    |e| black_box(e.tick(Nanos::from_millis(100), &u)),
                    BatchSize::PerIteration,
                );
            },
        );
    }
    g.finish();
}

criterion_group!(benches, planning);
criterion_main!(benches);
