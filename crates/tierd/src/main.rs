//! The `tierd` command: glue between the command line and the library crates.
//!
//! Today it offers `tierd info`, which builds the engine on a built-in two-tier topology and
//! prints the tiers and the engine's configuration; `compare`, `sim` and `run` arrive with
//! their issues.
#![forbid(unsafe_code)]

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use tierd_engine::topology::{NodePerf, NodeSpec, Topology};
use tierd_engine::types::{Bytes, NodeId};
use tierd_engine::{Engine, EngineConfig};

/// Hot-page tracking and promotion for tiered memory (DRAM + CXL).
#[derive(Debug, Parser)]
#[command(name = "tierd", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the tiers the engine derives for a two-node DRAM + CXL machine, and its defaults.
    Info {
        /// Fast (DRAM) node size, GiB.
        #[arg(long, default_value_t = 64)]
        fast_gib: u64,
        /// Slow (CXL) node size, GiB.
        #[arg(long, default_value_t = 256)]
        slow_gib: u64,
    },
}

fn demo_topology(fast_gib: u64, slow_gib: u64) -> Result<Topology> {
    // Latency/bandwidth of a typical DDR5 node and a CXL Type-3 expander (2.5x latency,
    // half the bandwidth), the ratio the seed results' machines report.
    let dram = NodePerf {
        read_latency_ns: 100,
        write_latency_ns: 100,
        read_bandwidth_mbps: 200_000,
        write_bandwidth_mbps: 200_000,
    };
    let cxl = NodePerf {
        read_latency_ns: 250,
        write_latency_ns: 250,
        read_bandwidth_mbps: 100_000,
        write_bandwidth_mbps: 100_000,
    };
    let nodes = vec![
        NodeSpec {
            id: NodeId(0),
            has_cpus: true,
            capacity: Bytes::gib(fast_gib),
            perf: Some(dram),
            adistance: None,
        },
        NodeSpec {
            id: NodeId(1),
            has_cpus: false,
            capacity: Bytes::gib(slow_gib),
            perf: Some(cxl),
            adistance: None,
        },
    ];
    Topology::new(nodes, vec![vec![10, 20], vec![20, 10]]).context("building the demo topology")
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Info { fast_gib, slow_gib } => {
            let topo = demo_topology(fast_gib, slow_gib)?;
            for t in topo.tiers() {
                println!(
                    "memory_tier{:<3} nodes {:<6} {}",
                    t.id,
                    t.nodes.to_string(),
                    if t.toptier { "top tier" } else { "lower tier" }
                );
            }
            let engine =
                Engine::new(EngineConfig::default(), topo).context("starting the engine")?;
            println!("promotion target: {}", engine.target());
            println!("{}", serde_json::to_string_pretty(engine.config())?);
        }
    }
    Ok(())
}
