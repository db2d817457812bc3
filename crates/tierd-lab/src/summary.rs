//! From a run's samples to the seed-style row, and the table, JSON and CSV.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::experiment::Experiment;
use crate::run::RunData;

/// USER_HZ, the unit of `/proc/PID/stat` CPU times, as a float for dividing.
#[allow(clippy::cast_precision_loss)]
const USER_HZ: f64 = tierd_linux::read::proc::USER_HZ as f64;
const PAGE_MIB: f64 = 1.0 / 256.0;

/// One row of an experiment's table.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Row id.
    pub id: String,
    /// Mechanism name.
    pub mechanism: String,
    /// Seconds after the start until 50 / 90 / 95 % of the first part (the hot set) was on
    /// the fast node (`None`: never within the run).
    pub t50_s: Option<f64>,
    /// As above, 90 %.
    pub t90_s: Option<f64>,
    /// As above, 95 %.
    pub t95_s: Option<f64>,
    /// Share of the hot part on the fast node at the end, percent.
    pub hot_on_fast_pct: f64,
    /// All parts' pages on the fast node at the end, MiB.
    pub fast_mib: f64,
    /// `(fast_mib - hot MiB) / hot MiB`, percent (the seed's over-promotion).
    pub over_pct: f64,
    /// Share of the other parts (cold) moved to the fast node, percent.
    pub cold_moved_pct: f64,
    /// MiB migrated (growth of `pgmigrate_success`, which every mechanism's moves count in).
    pub migrated_mib: f64,
    /// Growth of `pgpromote_success` (NUMA balancing's promotions only).
    pub pgpromote_success: u64,
    /// Growth of `numa_hint_faults`.
    pub hint_faults: u64,
    /// Growth of `numa_pte_updates`.
    pub pte_updates: u64,
    /// Growth of `pgdemote_kswapd + pgdemote_direct`.
    pub kernel_demoted: u64,
    /// CPU seconds of the promoter (tierd or kdamond) and of tierd's kdamond, if any.
    pub promoter_cpu_s: Option<f64>,
    /// CPU seconds of the workload.
    pub workload_cpu_s: f64,
    /// Mean steps per second of the workload over the last quarter of the run.
    pub throughput: Option<f64>,
    /// The workload's accesses per hot page per second over the whole run (its steps per
    /// second, each one access to a hot page, over the hot part's pages): under TCG this is
    /// set by the host's speed, and it is what a source sees of the hot set, so it is what
    /// rows from different hosts are compared by.
    #[serde(default)]
    pub hot_accesses_per_page_s: Option<f64>,
    /// tierd's DAMON sampling interval over the run, µs: (first, last, changes), from its
    /// log of every change.
    #[serde(default)]
    pub damon_sample_us: Option<(u64, u64, usize)>,
    /// Checksum failures the workload reported (integrity runs).
    pub checksum_failures: Option<u64>,
    /// Whether the workload printed its `done` line (it did not crash and was not killed).
    pub workload_finished: bool,
    /// Multi-threaded chases: hot pages on a fast node other than their thread's, percent of
    /// the hot pages on fast nodes (promotions that landed on the wrong fast node).
    pub wrong_node_pct: Option<f64>,
    /// Pages tierd demoted (its `pgdemote_success`, from its status), when tierd ran.
    pub tierd_demoted: Option<u64>,
    /// Pages tierd promoted (`pgpromote_success` of its status), when tierd ran.
    pub tierd_promoted: Option<u64>,
    /// Wall time of the guest, seconds.
    pub wall_s: f64,
    /// Why the run produced no measurements (the guest hung, failed to boot, ...).
    pub error: Option<String>,
}

fn delta(d: &RunData, key: &str) -> u64 {
    let get = |i: usize| {
        d.samples
            .get(i)
            .and_then(|s| s.vmstat.get(key))
            .copied()
            .unwrap_or(0)
    };
    get(d.samples.len().saturating_sub(1)).saturating_sub(get(0))
}

fn cpu_delta(d: &RunData, who: &str) -> Option<u64> {
    let first = d.samples.iter().find_map(|s| s.cpu_ticks.get(who).copied());
    let last = d
        .samples
        .iter()
        .rev()
        .find_map(|s| s.cpu_ticks.get(who).copied())?;
    // A promoter that started with the mechanism had no reading before it: count from 0.
    let first_t = d
        .samples
        .iter()
        .find(|s| s.cpu_ticks.contains_key(who))
        .map_or(0.0, |s| s.t);
    Some(if first_t > 0.0 {
        last
    } else {
        last - first.unwrap_or(0)
    })
}

#[allow(clippy::cast_precision_loss)]
fn pages_mib(p: u64) -> f64 {
    p as f64 * PAGE_MIB
}

/// The summary row of one run.
#[must_use]
#[allow(clippy::cast_precision_loss)]
pub fn summarize(exp: &Experiment, id: &str, mechanism: &str, d: &RunData) -> Summary {
    let hot = &exp.parts[0];
    let on_fast = |s: &crate::run::Sample, part: &str| part_on_fast(exp, s, part);
    let reach = |frac: f64| {
        d.samples
            .iter()
            .filter(|s| s.t >= 0.0)
            .find(|s| on_fast(s, &hot.name) as f64 >= frac * hot.pages as f64)
            .map(|s| s.t)
    };
    let last = d.samples.last();
    let hot_fast = last.map_or(0, |s| on_fast(s, &hot.name));
    let others: u64 = exp.parts[1..].iter().map(|p| p.pages).sum();
    let others_fast: u64 = last.map_or(0, |s| {
        exp.parts[1..]
            .iter()
            .map(|p| on_fast(s, &p.name))
            .sum::<u64>()
    });
    let fast_pages = hot_fast + others_fast;
    let promoter = match (cpu_delta(d, "promoter"), cpu_delta(d, "kdamond")) {
        (None, None) => None,
        (a, b) => Some((a.unwrap_or(0) + b.unwrap_or(0)) as f64 / USER_HZ),
    };
    // The last quarter of the workload's interval lines (seed A's "mean of the last 25 %").
    let rates: Vec<f64> = d
        .workload_lines
        .iter()
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("steps_per_s="))
                .and_then(|v| v.parse().ok())
        })
        .collect();
    let tail = &rates[rates.len() - rates.len() / 4..];
    let throughput = (!tail.is_empty()).then(|| tail.iter().sum::<f64>() / tail.len() as f64);
    let chase = exp.workload.starts_with("chase");
    let hot_accesses_per_page_s = (chase && !rates.is_empty())
        .then(|| rates.iter().sum::<f64>() / rates.len() as f64 / hot.pages.max(1) as f64);
    let failures = d
        .workload_lines
        .iter()
        .filter(|l| l.starts_with("integrity") && l.contains(" done"))
        .find_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("failures="))
                .and_then(|v| v.parse().ok())
        });
    let finished = d
        .workload_lines
        .iter()
        .any(|l| l.split_whitespace().nth(1) == Some("done"));
    let wrong_node_pct = wrong_node(exp, d);
    let tierd_stat = |k: &str| {
        d.tierd_status
            .as_ref()
            .and_then(|s| s.get("engine"))
            .and_then(|e| e.get(k))
            .and_then(serde_json::Value::as_u64)
    };
    let samples_us: Vec<u64> = d
        .notes
        .iter()
        .filter_map(|n| n.strip_prefix("TIERD_OUT "))
        .filter_map(|n| n.split(" intervals sample ").nth(1))
        .filter_map(|r| r.split_whitespace().next()?.parse().ok())
        .collect();
    let damon_sample_us = match (samples_us.first(), samples_us.last()) {
        (Some(a), Some(b)) => Some((*a, *b, samples_us.len() - 1)),
        _ => None,
    };
    Summary {
        damon_sample_us,
        workload_finished: finished,
        wrong_node_pct,
        tierd_demoted: tierd_stat("pgdemote_success"),
        tierd_promoted: tierd_stat("pgpromote_success"),
        id: id.to_string(),
        mechanism: mechanism.to_string(),
        t50_s: reach(0.50),
        t90_s: reach(0.90),
        t95_s: reach(0.95),
        hot_on_fast_pct: 100.0 * hot_fast as f64 / hot.pages.max(1) as f64,
        fast_mib: pages_mib(fast_pages),
        over_pct: 100.0 * (fast_pages as f64 - hot.pages as f64) / hot.pages.max(1) as f64,
        cold_moved_pct: if others == 0 {
            0.0
        } else {
            100.0 * others_fast as f64 / others as f64
        },
        migrated_mib: pages_mib(delta(d, "pgmigrate_success")),
        pgpromote_success: delta(d, "pgpromote_success"),
        hint_faults: delta(d, "numa_hint_faults"),
        pte_updates: delta(d, "numa_pte_updates"),
        kernel_demoted: delta(d, "pgdemote_kswapd") + delta(d, "pgdemote_direct"),
        promoter_cpu_s: promoter,
        workload_cpu_s: cpu_delta(d, "workload").unwrap_or(0) as f64 / USER_HZ,
        throughput,
        hot_accesses_per_page_s,
        checksum_failures: failures,
        wall_s: d.wall_s,
        error: None,
    }
}

/// From the workload's last interval line: for each thread i with home node `home[i]`, its
/// hot pages on fast nodes other than home (`hot_t<i>_n<j>` keys).
#[allow(clippy::cast_precision_loss)]
fn wrong_node(exp: &Experiment, d: &RunData) -> Option<f64> {
    if exp.home_nodes.is_empty() {
        return None;
    }
    let line = d
        .workload_lines
        .iter()
        .rev()
        .find(|l| l.starts_with("chase t=") || l.starts_with("chase done"))?;
    let (mut on_fast, mut wrong) = (0u64, 0u64);
    for w in line.split_whitespace() {
        let Some((k, v)) = w.split_once('=') else {
            continue;
        };
        let Some(rest) = k.strip_prefix("hot_t") else {
            continue;
        };
        let Some((t, n)) = rest.split_once("_n") else {
            continue;
        };
        let (Ok(t), Ok(n), Ok(v)) = (t.parse::<usize>(), n.parse::<u32>(), v.parse::<u64>()) else {
            continue;
        };
        if exp.fast.contains(&n) {
            on_fast += v;
            if exp.home_nodes.get(t) != Some(&n) {
                wrong += v;
            }
        }
    }
    (on_fast > 0).then(|| 100.0 * wrong as f64 / on_fast as f64)
}

/// Pages of `part` on the experiment's fast nodes in one sample.
fn part_on_fast(exp: &Experiment, s: &crate::run::Sample, part: &str) -> u64 {
    s.parts.get(part).map_or(0, |m| {
        m.iter()
            .filter(|(n, _)| exp.fast.contains(n))
            .map(|(_, c)| *c)
            .sum()
    })
}

/// The hot part's share on the fast nodes over the run: `(seconds since the mechanism
/// started, percent)` per sample (what the table's t50/t90 and "hot on fast" are read from).
#[must_use]
#[allow(clippy::cast_precision_loss)]
pub fn hot_on_fast_series(exp: &Experiment, d: &RunData) -> Vec<(f64, f64)> {
    let Some(hot) = exp.parts.first() else {
        return Vec::new();
    };
    d.samples
        .iter()
        .map(|s| {
            let on = part_on_fast(exp, s, &hot.name) as f64;
            (s.t, 100.0 * on / hot.pages.max(1) as f64)
        })
        .collect()
}

/// The chase's latency per step over the run, from its interval lines: `(seconds since the
/// chase started, ns)`. A multi-threaded chase's line counts all threads' steps together, so
/// the latency is the mean over its threads of `1e9 / steps_per_s_t<i>` (one thread: the
/// line's `ns_per_step`). Lines that are not chase samples are skipped.
#[must_use]
#[allow(clippy::cast_precision_loss)]
pub fn latency_series(d: &RunData) -> Vec<(f64, f64)> {
    use tierd_workload::report::ChaseLine;
    d.workload_lines
        .iter()
        .filter_map(|l| match ChaseLine::parse(l) {
            Ok(ChaseLine::Sample(s)) => {
                let per_thread: Vec<f64> = s
                    .threads
                    .iter()
                    .filter(|t| t.steps_per_s > 0.0)
                    .map(|t| 1e9 / t.steps_per_s)
                    .collect();
                let ns = if per_thread.is_empty() {
                    s.ns_per_step
                } else {
                    per_thread.iter().sum::<f64>() / per_thread.len() as f64
                };
                ns.is_finite().then_some((s.t, ns))
            }
            _ => None,
        })
        .collect()
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.prec$}"))
}

/// What only some experiments have: churn, wrong nodes, checksums.
fn notes(r: &Summary) -> String {
    let mut n = Vec::new();
    if let Some(e) = &r.error {
        let first = e.lines().next().unwrap_or_default();
        return format!("FAILED: {first}");
    }
    if r.kernel_demoted > 0 {
        n.push(format!("kernel demoted {}", r.kernel_demoted));
    }
    if let (Some(p), Some(d)) = (r.tierd_promoted, r.tierd_demoted) {
        if d > 0 {
            n.push(format!("tierd promoted {p} demoted {d}"));
        }
    }
    if let Some((first, last, changes)) = r.damon_sample_us {
        let changes = match changes {
            0 => "fixed".to_string(),
            1 => "1 change".to_string(),
            c => format!("{c} changes"),
        };
        // Microseconds to milliseconds for display only.
        #[allow(clippy::cast_precision_loss)]
        let ms = |us: u64| us as f64 / 1000.0;
        n.push(format!(
            "DAMON sample {:.0} -> {:.0} ms ({changes})",
            ms(first),
            ms(last)
        ));
    }
    if let Some(w) = r.wrong_node_pct {
        n.push(format!("wrong fast node {w:.1} %"));
    }
    if let Some(f) = r.checksum_failures {
        n.push(format!("checksum failures {f}"));
    }
    if !r.workload_finished {
        n.push("workload did not finish".into());
    }
    n.join("; ")
}

/// The experiment's table, one row per run.
#[must_use]
pub fn table(exp: &Experiment, rows: &[Summary]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{}", exp.title);
    let _ = writeln!(
        o,
        "| id | mechanism | t50 s | t90 s | t95 s | hot on fast | fast MiB | over | cold moved | migrated MiB | pgpromote | hint faults | promoter CPU s | workload CPU s | steps/s | acc/hot page/s | notes |"
    );
    let _ = writeln!(
        o,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {:.1} % | {:.0} | {:+.1} % | {:.1} % | {:.0} | {} | {} | {} | {:.1} | {} | {} | {} |",
            r.id,
            r.mechanism,
            opt(r.t50_s, 1),
            opt(r.t90_s, 1),
            opt(r.t95_s, 1),
            r.hot_on_fast_pct,
            r.fast_mib,
            r.over_pct,
            r.cold_moved_pct,
            r.migrated_mib,
            r.pgpromote_success,
            r.hint_faults,
            opt(r.promoter_cpu_s, 2),
            r.workload_cpu_s,
            opt(r.throughput, 0),
            opt(r.hot_accesses_per_page_s, 1),
            notes(r),
        );
    }
    o
}

/// The spread of repeated runs of one experiment: per row id, the median and the range of
/// each figure over the runs (`runs[i]` holds the rows of run i).
#[must_use]
pub fn spread_table(exp: &Experiment, runs: &[Vec<Summary>]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{} ({} runs: median [min - max])", exp.title, runs.len());
    let _ = writeln!(
        o,
        "| id | mechanism | t50 s | t90 s | t95 s | hot on fast % | over % | migrated MiB | promoter CPU s | acc/hot page/s | failed |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|---|");
    let Some(first) = runs.first() else {
        return o;
    };
    for r0 in first {
        let rows: Vec<&Summary> = runs
            .iter()
            .filter_map(|rs| rs.iter().find(|r| r.id == r0.id))
            .collect();
        let ok: Vec<&&Summary> = rows.iter().filter(|r| r.error.is_none()).collect();
        let cell = |f: &dyn Fn(&Summary) -> Option<f64>, prec: usize| -> String {
            let mut v: Vec<f64> = ok.iter().filter_map(|r| f(r)).collect();
            let missing = ok.len() - v.len();
            if v.is_empty() {
                return "-".into();
            }
            v.sort_by(f64::total_cmp);
            let med = v[v.len() / 2];
            let s = format!("{med:.prec$} [{:.prec$} - {:.prec$}]", v[0], v[v.len() - 1]);
            if missing > 0 {
                format!("{s} ({missing} never)")
            } else {
                s
            }
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r0.id,
            r0.mechanism,
            cell(&|r| r.t50_s, 1),
            cell(&|r| r.t90_s, 1),
            cell(&|r| r.t95_s, 1),
            cell(&|r| Some(r.hot_on_fast_pct), 1),
            cell(&|r| Some(r.over_pct), 1),
            cell(&|r| Some(r.migrated_mib), 0),
            cell(&|r| r.promoter_cpu_s, 1),
            cell(&|r| r.hot_accesses_per_page_s, 1),
            rows.len() - ok.len(),
        );
    }
    o
}

/// CSV of the placement time series: one row per (run, second).
#[must_use]
pub fn csv(exp: &Experiment, runs: &[(String, RunData)]) -> String {
    let mut o = String::from("experiment,run,t_s,part,node,pages\n");
    for (id, d) in runs {
        for s in &d.samples {
            for (part, nodes) in &s.parts {
                for (n, c) in nodes {
                    let _ = writeln!(o, "{},{id},{:.2},{part},{n},{c}", exp.id, s.t);
                }
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::experiment_a;
    use crate::run::Sample;

    fn sample(t: f64, hot0: u64, cold0: u64, migrated: u64, promoter: Option<u64>) -> Sample {
        let mut s = Sample {
            t,
            ..Sample::default()
        };
        s.parts
            .insert("hot".into(), [(0, hot0), (1, 32768 - hot0)].into());
        s.parts
            .insert("cold".into(), [(0, cold0), (1, 98304 - cold0)].into());
        s.vmstat.insert("pgmigrate_success".into(), migrated);
        if let Some(p) = promoter {
            s.cpu_ticks.insert("promoter".into(), p);
        }
        s.cpu_ticks
            .insert("workload".into(), if t > 0.0 { 100 } else { 0 });
        s
    }

    #[test]
    fn times_over_promotion_and_costs_come_from_the_samples() {
        let exp = experiment_a(true);
        let d = RunData {
            samples: vec![
                sample(-0.1, 0, 0, 100, None),
                sample(1.0, 16384, 0, 16484, Some(50)),
                sample(2.0, 30000, 100, 30200, Some(80)),
                sample(3.0, 32768, 3276, 36144, Some(90)),
            ],
            workload_lines: vec![
                "chase t=1 steps_per_s=100".into(),
                "chase t=2 steps_per_s=200".into(),
                "chase t=3 steps_per_s=300".into(),
                "chase t=4 steps_per_s=400".into(),
            ],
            notes: vec![
                "TIERD_OUT damon: intervals sample 5000 us, aggregation 100000 us (tuning: userspace) at 0.5 s".into(),
                "TIERD_OUT damon: intervals sample 10000 us, aggregation 200000 us (tuning: userspace) at 1.2 s".into(),
            ],
            ..RunData::default()
        };
        let s = summarize(&exp, "T1", "tierd", &d);
        // Accesses per hot page per second: the mean of all the chase's lines (250 steps/s)
        // over the 32768 hot pages.
        let rate = s.hot_accesses_per_page_s.unwrap();
        assert!((rate - 250.0 / 32768.0).abs() < 1e-12, "{rate}");
        assert_eq!(s.damon_sample_us, Some((5000, 10000, 1)));
        assert_eq!(s.t50_s, Some(1.0));
        assert_eq!(s.t90_s, Some(2.0));
        assert_eq!(s.t95_s, Some(3.0));
        assert!((s.hot_on_fast_pct - 100.0).abs() < 1e-9);
        // 3276 cold pages on top of the 32768 hot: +10.0 %.
        assert!((s.over_pct - 10.0).abs() < 0.01, "{}", s.over_pct);
        assert!((s.cold_moved_pct - 3.33).abs() < 0.01);
        assert!((s.migrated_mib - 36044.0 / 256.0).abs() < 1e-9);
        // The promoter appeared after the start: its whole count is the run's.
        assert_eq!(s.promoter_cpu_s, Some(0.9));
        assert_eq!(s.throughput, Some(400.0));
        let t = table(&exp, &[s]);
        assert!(
            t.contains("| T1 | tierd | 1.0 | 2.0 | 3.0 | 100.0 % |"),
            "{t}"
        );
        assert!(t.contains("workload did not finish"), "{t}");
        assert!(t.contains("DAMON sample 5 -> 10 ms (1 change)"), "{t}");
    }

    #[test]
    fn the_spread_table_gives_median_and_range_per_row() {
        let exp = experiment_a(false);
        let row = |t90: Option<f64>, over: f64| Summary {
            id: "T1".into(),
            mechanism: "tierd".into(),
            t90_s: t90,
            over_pct: over,
            hot_on_fast_pct: 99.0,
            ..Summary::default()
        };
        let failed = Summary {
            error: Some("guest timed out".into()),
            ..row(None, 0.0)
        };
        let runs = vec![
            vec![row(Some(4.0), 1.0)],
            vec![row(Some(9.0), -0.5)],
            vec![row(Some(5.0), 0.5)],
            vec![row(None, 0.0)],
            vec![failed],
        ];
        let t = spread_table(&exp, &runs);
        assert!(t.contains("(5 runs: median [min - max])"), "{t}");
        // t90 over the four runs that worked: one never got there.
        assert!(t.contains("| 5.0 [4.0 - 9.0] (1 never) |"), "{t}");
        assert!(t.contains("| 0.5 [-0.5 - 1.0] |"), "{t}");
        assert!(t.trim_end().ends_with("| 1 |"), "one failed run: {t}");
    }

    #[test]
    fn wrong_node_and_checksums_come_from_the_workload_lines() {
        let mut exp = experiment_a(true);
        exp.fast = vec![0, 1];
        exp.home_nodes = vec![0, 1];
        let d = RunData {
            samples: vec![sample(0.0, 0, 0, 0, None)],
            workload_lines: vec![
                "chase t=9 threads=2 hot_t0_n0=90 hot_t0_n1=10 hot_t0_n2=0 hot_t1_n0=30 hot_t1_n1=70 hot_t1_n2=50".into(),
                "integrity done t=9 verified_pages=100 failures=0 passes=3".into(),
            ],
            ..RunData::default()
        };
        let s = summarize(&exp, "X", "tierd", &d);
        // Fast-node pages: 90+10+30+70 = 200; wrong: t0 on n1 (10) + t1 on n0 (30).
        assert!((s.wrong_node_pct.expect("threads") - 20.0).abs() < 1e-9);
        assert_eq!(s.checksum_failures, Some(0));
        assert!(s.workload_finished);
    }

    #[test]
    fn the_plotted_series_follow_the_samples_and_the_chase_lines() {
        let exp = experiment_a(true);
        let d = RunData {
            samples: vec![
                sample(-0.1, 0, 0, 0, None),
                sample(1.0, 16384, 0, 0, None),
                sample(2.0, 32768, 0, 0, None),
            ],
            workload_lines: vec![
                "chase pid=1 addr=0x1000 cold_addr=0x2000 node=1 total_pages=131072 hot_pages=32768 tick_us=0 ticker_pid=0 ready".into(),
                // One thread, the older line format: the line's own ns_per_step.
                "chase t=0.500 hot_n0=0 hot_n1=32768 hot_other=0 cold_n0=0 cold_n1=98304 cold_other=0 steps_per_s=2000000 ns_per_step=500.00".into(),
                // Two threads at 4 and 1 M steps/s: 250 and 1000 ns, mean 625 (not the
                // line's 200 ns, which counts both threads' steps together).
                format!(
                    "chase t=1.000 hot_n0=0 hot_n1=32768 hot_n2=0 hot_n3=0 hot_other=0 cold_n0=0 cold_n1=98304 cold_n2=0 cold_n3=0 cold_other=0 steps_per_s=5000000 ns_per_step=200.00 threads=2 {} {}",
                    "steps_per_s_t0=4000000 hot_t0_n0=0 hot_t0_n1=16384 hot_t0_n2=0 hot_t0_n3=0 hot_t0_other=0",
                    "steps_per_s_t1=1000000 hot_t1_n0=0 hot_t1_n1=16384 hot_t1_n2=0 hot_t1_n3=0 hot_t1_other=0"
                ),
                "integrity t=1.000 verified_pages=1 failures=0 passes=1 rewritten_pages=0 n0=1 n1=0 n2=0 n3=0 other=0".into(),
            ],
            ..RunData::default()
        };
        assert_eq!(
            hot_on_fast_series(&exp, &d),
            vec![(-0.1, 0.0), (1.0, 50.0), (2.0, 100.0)]
        );
        let lat = latency_series(&d);
        assert_eq!(lat.len(), 2, "{lat:?}");
        assert_eq!(lat[0], (0.5, 500.0));
        assert!(
            (lat[1].0 - 1.0).abs() < 1e-9 && (lat[1].1 - 625.0).abs() < 1e-6,
            "{lat:?}"
        );
    }

    #[test]
    fn a_mechanism_that_never_gets_there_has_no_time() {
        let exp = experiment_a(true);
        let d = RunData {
            samples: vec![sample(-0.1, 0, 0, 0, None), sample(5.0, 10, 0, 10, None)],
            ..RunData::default()
        };
        let s = summarize(&exp, "B0", "baseline", &d);
        assert_eq!((s.t50_s, s.t90_s), (None, None));
        assert_eq!(s.promoter_cpu_s, None);
        assert!(s.over_pct < -99.0);
    }
}
