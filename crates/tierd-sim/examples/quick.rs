//! Quick run of a shipped scenario: `cargo run --release -p tierd-sim --example quick -- NAME SCALE [IDS...]`.
#![allow(missing_docs)]
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sc = tierd_sim::scenario::Scenario::find(&args[1]).expect("scenario");
    let scale: f64 = args.get(2).map_or(1.0, |s| s.parse().expect("scale"));
    let only: Vec<String> = args[3..].to_vec();
    let t = std::time::Instant::now();
    let r = tierd_sim::sim::compare(&sc.scaled(scale), scale, &only, |_, _, _| {}).expect("runs");
    for c in &r.configs {
        println!(
            "{:4} lat {:6.1} ns  fast {:6.2} GiB  hot_on_fast {:5.1}%  over {:+6.1}%  promoted {:6.2}  cpu {:6.2}s app {:6.2}s  t50/90/95 {:?}  viol {}",
            c.id, c.latency_ns, c.fast_gib, c.hot_on_fast * 100.0, c.over_promotion * 100.0, c.promoted_gib, c.promoter_cpu_s, c.app_overhead_s, c.time_to_hot.values().collect::<Vec<_>>(), c.mempolicy_violations
        );
        let keys = [
            "numa_hint_faults",
            "numa_pte_updates",
            "hwhint_total_events",
            "pgpromote_success",
            "damos_sz_applied",
            "damos_qt_exceeds",
            "pgpromote_candidate",
            "pgpromote_candidate_nrl",
            "abit_scans",
            "abit_pages_scanned",
            "abit_interval_tunings",
            "pgpromote_cold",
        ];
        let s: Vec<String> = keys
            .iter()
            .filter_map(|k| c.counters.get(*k).map(|v| format!("{k}={v}")))
            .collect();
        println!("      {}", s.join(" "));
    }
    eprintln!("wall {:.2}s", t.elapsed().as_secs_f64());
}
