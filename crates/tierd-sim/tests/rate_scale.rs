//! Issue 11, point 3: tierd's relative threshold and adaptive accessed-bit scan do not depend
//! on absolute access rates the way NUMA balancing and DAMOS do. Scenario A with every access
//! rate scaled by 1/10 and by 10 (`rate_scale`): tierd's time to 95 % of the hot set on the
//! fast node and its over-promotion move far less than N2's and D3's.
// Integration tests are their own crate; the unit-test lint does not apply here.
#![allow(clippy::tests_outside_test_module)]

use tierd_sim::scenario::Scenario;
use tierd_sim::sim::{compare, CompareResult, ConfigResult};

/// A's memory and threads at 1/32: the per-page rates and dynamics stay about the same.
const SCALE: f64 = 1.0 / 32.0;
const RATES: [f64; 3] = [0.1, 1.0, 10.0];
const IDS: [&str; 3] = ["N2", "D3", "T1"];

fn run(rate: f64) -> CompareResult {
    let mut sc = Scenario::find("pointer-chase")
        .expect("shipped scenario parses")
        .scaled(SCALE);
    sc.rate_scale = rate;
    let only: Vec<String> = IDS.iter().map(|s| (*s).to_string()).collect();
    compare(&sc, SCALE, &only, |_, _, _| {}).expect("runs")
}

fn row<'a>(r: &'a CompareResult, id: &str) -> &'a ConfigResult {
    r.configs
        .iter()
        .find(|c| c.id == id)
        .expect("config present")
}

/// Time to 95 % of the hot set on the fast node, s; the run's length when never reached.
fn t95(c: &ConfigResult, duration_s: f64) -> f64 {
    c.time_to_hot
        .get("95")
        .copied()
        .flatten()
        .unwrap_or(duration_s)
}

/// How far apart the three rates put a figure: max - min.
fn spread(xs: &[f64]) -> f64 {
    let max = xs.iter().copied().fold(f64::MIN, f64::max);
    let min = xs.iter().copied().fold(f64::MAX, f64::min);
    max - min
}

#[test]
fn tierd_depends_on_access_rates_far_less_than_numab_and_damos() {
    let duration = Scenario::find("pointer-chase").unwrap().duration_s;
    let results: Vec<CompareResult> = RATES.iter().map(|r| run(*r)).collect();
    println!("scenario A at scale 1/32, every access rate x0.1, x1, x10:");
    println!(
        "{:4} {:>24} {:>27}",
        "id", "t95 s (x0.1 / x1 / x10)", "over (x0.1 / x1 / x10)"
    );
    let mut log_t = Vec::new();
    let mut over = Vec::new();
    for id in IDS {
        let t: Vec<f64> = results.iter().map(|r| t95(row(r, id), duration)).collect();
        let o: Vec<f64> = results.iter().map(|r| row(r, id).over_promotion).collect();
        println!(
            "{id:4} {:>7.1} {:>7.1} {:>7.1}   {:>+7.0}% {:>+7.0}% {:>+7.0}%",
            t[0],
            t[1],
            t[2],
            o[0] * 100.0,
            o[1] * 100.0,
            o[2] * 100.0
        );
        // Times compare by ratio: the spread of their log10.
        log_t.push(spread(&t.iter().map(|x| x.log10()).collect::<Vec<_>>()));
        over.push(spread(&o));
    }
    let (n2, d3, t1) = (0, 1, 2);
    println!(
        "spread of log10(t95): N2 {:.2}, D3 {:.2}, T1 {:.2}; of over-promotion: N2 {:.2}, D3 {:.2}, T1 {:.2}",
        log_t[n2], log_t[d3], log_t[t1], over[n2], over[d3], over[t1]
    );
    // tierd places the whole hot set quickly, and nothing else, at every rate.
    for r in &results {
        let c = row(r, "T1");
        assert!(
            t95(c, duration) <= 10.0,
            "T1 needs {:.1} s to place 95 % of the hot set",
            t95(c, duration)
        );
        assert!(
            c.over_promotion.abs() < 0.01,
            "T1 over-promotes {:+.2}",
            c.over_promotion
        );
    }
    // Its time to 95 % moves by a factor at most 1.5 over a 100x range of rates; N2's and
    // D3's move by more than 3x as much (in log terms).
    assert!(
        log_t[t1] <= 1.5f64.log10(),
        "T1 t95 spread {:.2}",
        log_t[t1]
    );
    assert!(
        log_t[n2] > 3.0 * log_t[t1] && log_t[d3] > 3.0 * log_t[t1],
        "t95 spread (log10): N2 {:.2}, D3 {:.2}, T1 {:.2}",
        log_t[n2],
        log_t[d3],
        log_t[t1]
    );
    // Over-promotion: tierd's does not move; DAMOS's moves by points. (N2's stays at 0 in A
    // as tierd's does: the cold pages are never touched, so they never fault.)
    assert!(
        over[d3] > 0.05 && over[d3] > 5.0 * over[t1],
        "over-promotion spread: D3 {:.2}, T1 {:.2}",
        over[d3],
        over[t1]
    );
}

#[test]
fn rate_scale_and_abit_goal_are_validated() {
    let a = tierd_sim::scenario::SHIPPED[0].1;
    let path = std::path::Path::new("a.toml");
    let sc = Scenario::parse(a, path).expect("A parses");
    assert!((sc.rate_scale - 1.0).abs() < f64::EPSILON, "default 1");
    let bad = a.replacen("step_ms = 10", "step_ms = 10\nrate_scale = 0", 1);
    let e = Scenario::parse(&bad, path).unwrap_err().to_string();
    assert!(e.contains("rate_scale"), "{e}");
    let bad = a.replacen("min_interval_ms = 2000", "min_interval_ms = 90000", 1);
    let e = Scenario::parse(&bad, path).unwrap_err().to_string();
    assert!(e.contains("abit_goal"), "{e}");
}
