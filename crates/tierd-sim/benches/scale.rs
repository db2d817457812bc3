//! Wall time of whole simulations: scenarios A, C and D at full scale and a 1 TB / 1 h
//! scenario.
//!
//! `cargo bench -p tierd-sim --bench scale` prints one line per run (goals, issue 15: A <= 10 s,
//! C and D <= 60 s each, 1 TB / 1 h <= 60 s, on one core; configurations of one comparison
//! may run in parallel on more cores), and A, C and D again with one configuration per core
//! (`compare_jobs`, the default of `tierd compare`). For C and D the one-core run also prints
//! each configuration's share of it and what a machine with a core per configuration would
//! take (the machine's build, then the longest configuration), which is the goal's bound when
//! configurations run in parallel; this 2-core host cannot show it directly. A plain timer, not
//! criterion: each run takes seconds to minutes, and the figure wanted is the wall time of one
//! run, as a user would see it. `TIERD_BENCH_ONLY=a,c` limits the runs (names: a, c, d, 1tb).
//!
//! A, C and D run at their shipped `machine.grain` (8 base pages a unit, docs/simulator.md
//! "Grain"), which the line names; `TIERD_BENCH_ONLY=a1`, `c1` or `d1` (never part of the
//! default set: C and D take minutes) runs the scenario page by page as well, the run the
//! grained one is checked against.
#![allow(missing_docs)]

use std::sync::Mutex;
use std::time::Instant;

use tierd_sim::scenario::Scenario;

fn time(name: &str, sc: &Scenario, only: &[String]) {
    time_jobs(name, sc, only, 1);
}

/// A one-core run of every configuration, timed per configuration from the progress calls
/// (one after each simulated sample; with one job the configurations run one after another,
/// so each one's time is from the previous one's last call to its own), and the machine's
/// build timed alone.
fn time_each(name: &str, sc: &Scenario) {
    let t = Instant::now();
    let world = tierd_sim::sim::World::build(sc).expect("builds");
    let build = t.elapsed().as_secs_f64();
    drop(world);
    let last: Mutex<Vec<(String, Instant)>> = Mutex::new(Vec::new());
    let t = Instant::now();
    let r = tierd_sim::sim::compare_jobs(sc, 1.0, &[], 1, &|_, id, _| {
        if let Ok(mut v) = last.lock() {
            match v.last_mut() {
                Some((cur, at)) if cur == id => *at = Instant::now(),
                _ => v.push((id.to_string(), Instant::now())),
            }
        }
    })
    .expect("runs");
    let wall = t.elapsed().as_secs_f64();
    let last = last
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut prev = t;
    let mut each = Vec::new();
    for (id, at) in &last {
        each.push((id.clone(), at.duration_since(prev).as_secs_f64()));
        prev = *at;
    }
    // The first configuration's share holds the build of the run's machine; the bound adds
    // the build to the longest configuration without it.
    if let Some(first) = each.first_mut() {
        first.1 = (first.1 - build).max(0.0);
    }
    let longest = each.iter().map(|e| e.1).fold(0.0, f64::max);
    let shares: Vec<String> = each.iter().map(|(id, s)| format!("{id} {s:.1}")).collect();
    println!(
        "{name:<28} {wall:>7.2} s wall  ({} configs; build {build:.1} s, then s each: {})",
        r.configs.len(),
        shares.join(", ")
    );
    println!(
        "{:<28} {:>7.2} s wall  (a core per configuration: the build and the longest one)",
        format!("  {} cores", each.len()),
        build + longest
    );
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

/// `label`, naming the grain when it is not 1.
fn grained_label(label: &str, grain: u32) -> String {
    match grain {
        1 => label.to_string(),
        g => format!("{label} (grain {g})"),
    }
}

fn main() {
    // `cargo bench` passes --bench; filters are not supported, hence the variable.
    let want = std::env::var("TIERD_BENCH_ONLY").unwrap_or_default();
    let want = |n: &str| want.is_empty() || want.split(',').any(|w| w.trim() == n);
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    if want("a") {
        let a = Scenario::find("pointer-chase").expect("shipped");
        let label = grained_label("A pointer-chase", a.machine.grain);
        time(&format!("{label}, full scale"), &a, &[]);
        if cores > 1 {
            time_jobs(&format!("{label}, {cores} jobs"), &a, &[], cores);
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
        let label = grained_label(label, sc.machine.grain);
        time_each(&format!("{label}, full scale"), &sc);
        if cores > 1 {
            time_jobs(&format!("{label}, {cores} jobs"), &sc, &[], cores);
        }
    }
    let explicit = std::env::var("TIERD_BENCH_ONLY").unwrap_or_default();
    for (key, name, label) in [
        ("a1", "pointer-chase", "A pointer-chase (grain 1)"),
        ("c1", "three-node", "C three-node (grain 1)"),
        ("d1", "cgroup-fairness", "D cgroup-fairness (grain 1)"),
    ] {
        if explicit.split(',').any(|w| w.trim() == key) {
            let sc = Scenario::find(name).expect("shipped").with_grain(1);
            time_each(&format!("{label}, full scale"), &sc);
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
