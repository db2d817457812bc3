//! Wall time of whole simulations: scenario A at full scale and a 1 TB / 1 h scenario.
//!
//! `cargo bench -p tierd-sim --bench scale` prints one line per run (goals: A <= 10 s,
//! 1 TB / 1 h <= 60 s, one core). A plain timer, not criterion: each run takes seconds, and
//! the figure wanted is the wall time of one run, as a user would see it.
#![allow(missing_docs)]

use std::time::Instant;

use tierd_sim::scenario::Scenario;

fn time(name: &str, sc: &Scenario, only: &[String]) {
    let t = Instant::now();
    let r = tierd_sim::sim::compare(sc, 1.0, only, |_, _, _| {}).expect("runs");
    let wall = t.elapsed().as_secs_f64();
    let configs: Vec<String> = r
        .configs
        .iter()
        .map(|c| format!("{} {:.0}% hot on fast", c.id, c.hot_on_fast * 100.0))
        .collect();
    println!(
        "{name:<28} {:>7.2} s wall  ({} configs: {})",
        wall,
        r.configs.len(),
        configs.join(", ")
    );
}

fn main() {
    // `cargo bench` passes --bench; filters are not supported.
    let a = Scenario::find("pointer-chase").expect("shipped");
    time("A pointer-chase, full scale", &a, &[]);
    for c in &a.config {
        time(&format!("  A {}", c.id), &a, std::slice::from_ref(&c.id));
    }
    let big = Scenario::parse(
        include_str!("../../../scenarios/bench-1tb-1h.toml"),
        std::path::Path::new("scenarios/bench-1tb-1h.toml"),
    )
    .expect("parses");
    time("1 TB / 1 h", &big, &[]);
}
