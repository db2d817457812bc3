//! Wall time of whole simulations: scenarios A, C and D at full scale and a 1 TB / 1 h
//! scenario.
//!
//! `cargo bench -p tierd-sim --bench scale` prints one line per run (goals, issue 15: A <= 10 s,
//! C and D <= 60 s each, 1 TB / 1 h <= 60 s, on one core; configurations of one comparison
//! may run in parallel on more cores), and A, C and D again with one configuration per core
//! (`compare_jobs`, the default of `tierd compare`). A plain timer, not
//! criterion: each run takes seconds to minutes, and the figure wanted is the wall time of one
//! run, as a user would see it. `TIERD_BENCH_ONLY=a,c` limits the runs (names: a, c, d, 1tb).
#![allow(missing_docs)]

use std::time::Instant;

use tierd_sim::scenario::Scenario;

fn time(name: &str, sc: &Scenario, only: &[String]) {
    time_jobs(name, sc, only, 1);
}

fn time_jobs(name: &str, sc: &Scenario, only: &[String], jobs: usize) {
    let t = Instant::now();
    let r = tierd_sim::sim::compare_jobs(sc, 1.0, only, jobs, &|_, _, _| {}).expect("runs");
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
    // `cargo bench` passes --bench; filters are not supported, hence the variable.
    let want = std::env::var("TIERD_BENCH_ONLY").unwrap_or_default();
    let want = |n: &str| want.is_empty() || want.split(',').any(|w| w.trim() == n);
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    if want("a") {
        let a = Scenario::find("pointer-chase").expect("shipped");
        time("A pointer-chase, full scale", &a, &[]);
        if cores > 1 {
            time_jobs(&format!("A pointer-chase, {cores} jobs"), &a, &[], cores);
        }
        for c in &a.config {
            time(&format!("  A {}", c.id), &a, std::slice::from_ref(&c.id));
        }
    }
    for (key, name, label) in [
        ("c", "three-node", "C three-node"),
        ("d", "cgroup-fairness", "D cgroup-fairness"),
    ] {
        if !want(key) {
            continue;
        }
        let sc = Scenario::find(name).expect("shipped");
        time(&format!("{label}, full scale"), &sc, &[]);
        if cores > 1 {
            time_jobs(&format!("{label}, {cores} jobs"), &sc, &[], cores);
        }
    }
    if want("1tb") {
        let big = Scenario::parse(
            include_str!("../../../scenarios/bench-1tb-1h.toml"),
            std::path::Path::new("scenarios/bench-1tb-1h.toml"),
        )
        .expect("parses");
        time("1 TB / 1 h", &big, &[]);
    }
}
