//! Rendering a comparison: the seed-style table, the time-series CSV.

use std::fmt::Write as _;

use crate::sim::CompareResult;

/// The counters shown under the table when a configuration produced them, in this order.
pub const TABLE_COUNTERS: &[&str] = &[
    "numa_pte_updates",
    "numa_hint_faults",
    "numa_hint_faults_local",
    "numa_pages_migrated",
    "pgpromote_candidate",
    "pgpromote_candidate_nrl",
    "pgpromote_success",
    "pgdemote_kswapd",
    "pgdemote_success",
    "thp_migration_success",
    "thp_migration_fail",
    "thp_migration_split",
    "hwhint_total_events",
    "damos_sz_applied",
    "damos_qt_exceeds",
    "abit_pages_scanned",
    "pingpong_demoted",
    "pingpong_promoted",
    "memory_high_events",
    "memcg_low_reclaim",
];

fn with_pub(sim: f64, published: Option<&f64>, decimals: usize) -> String {
    match published {
        Some(p) => format!("{sim:.decimals$} ({p:.decimals$})"),
        None => format!("{sim:.decimals$}"),
    }
}

fn fmt_count(n: u64) -> String {
    if n >= 10_000_000 {
        format!("{:.1}M", n as f64 / 1e6)
    } else if n >= 10_000 {
        format!("{:.0}k", n as f64 / 1e3)
    } else {
        n.to_string()
    }
}

/// An operation rate as a load generator prints it: `1.23M`, `456k`.
fn fmt_rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.0}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// The seed-style table's cells: the headers and one row per configuration, published figures
/// in parentheses (the text [`table`] and the HTML report render the same cells).
#[must_use]
pub fn table_cells(r: &CompareResult) -> (Vec<String>, Vec<Vec<String>>) {
    let node = format!("n{} GiB", r.fast_node.0);
    let show_wrong = r.configs.iter().any(|c| c.wrong_node_gib > 0.0);
    let mut headers: Vec<String> = [
        "id",
        "config",
        "lat ns",
        "Mop/s",
        node.as_str(),
        "over",
        "hot@fast",
        "promoted GiB",
        "promoter CPU s (%)",
        "app tax s",
        "us/migrated",
        "t90 s",
    ]
    .iter()
    .map(|h| (*h).to_string())
    .collect();
    if show_wrong {
        headers.push("wrong-node GiB".to_string());
    }
    // Scenarios that define operations show them as a load generator would; the relative
    // rate is the score of seeds that compare to a reference case (D: the tenant alone).
    let show_ops = r.op.is_some() && r.configs.iter().any(|c| c.ops_per_s.is_some());
    if let Some(op) = r.op.as_ref().filter(|_| show_ops) {
        headers.insert(3, format!("{op}/s"));
    }
    if let Some(b) = &r.baseline {
        let at = if show_ops { 4 } else { 3 };
        headers.insert(at, format!("rate vs {b}"));
    }
    let mut rows: Vec<Vec<String>> = Vec::new();
    for c in &r.configs {
        let p = |k: &str| c.published.get(k);
        let t90 = c
            .time_to_hot
            .get("90")
            .copied()
            .flatten()
            .map_or("-".to_string(), |t| format!("{t:.1}"));
        let mut row = vec![
            c.id.clone(),
            c.label.clone(),
            with_pub(c.latency_ns, p("latency_ns"), 0),
            // Throughput: the measured processes' simulated accesses per second, one access
            // being one op of the workload (its memory access plus `compute_ns`), so the
            // column reads as a benchmark's Mop/s (seed C reports NAS BT's).
            with_pub(c.throughput / 1e6, p("mops"), 2),
            with_pub(c.fast_gib, p("node0_gib"), 1),
            format!("{:+.0}%", c.over_promotion * 100.0),
            format!("{:.0}%", c.hot_on_fast * 100.0),
            with_pub(c.promoted_gib, p("promoted_gib"), 1),
            format!(
                "{} ({:.1}%)",
                with_pub(c.promoter_cpu_s, p("promoter_cpu_s"), 1),
                c.promoter_cpu_pct
            ),
            format!("{:.1}", c.app_overhead_s),
            c.overhead_us_per_migrated_page
                .map_or("-".to_string(), |v| {
                    with_pub(v, p("overhead_us_per_migrated_page"), 0)
                }),
            t90,
        ];
        if show_wrong {
            row.push(format!("{:.1}", c.wrong_node_gib));
        }
        if show_ops {
            row.insert(3, c.ops_per_s.map_or("-".to_string(), fmt_rate));
        }
        if r.baseline.is_some() {
            let at = if show_ops { 4 } else { 3 };
            row.insert(
                at,
                c.relative_rate
                    .map_or("-".to_string(), |x| format!("{:.1}%", x * 100.0)),
            );
        }
        rows.push(row);
    }
    (headers, rows)
}

/// The lines under the table: each configuration's counters, and a warning on mempolicy
/// violations.
#[must_use]
pub fn counter_lines(r: &CompareResult) -> Vec<String> {
    let mut out = Vec::new();
    for c in &r.configs {
        let cs: Vec<String> = TABLE_COUNTERS
            .iter()
            .filter_map(|k| {
                let v = c.counters.get(*k).copied().filter(|v| *v > 0)?;
                Some(match c.published.get(*k) {
                    Some(p) => format!("{k}={} ({})", fmt_count(v), fmt_count(*p as u64)),
                    None => format!("{k}={}", fmt_count(v)),
                })
            })
            .collect();
        out.push(format!(
            "  {:<5} {}",
            c.id,
            if cs.is_empty() {
                "-".to_string()
            } else {
                cs.join("  ")
            }
        ));
    }
    if r.configs.iter().any(|c| c.mempolicy_violations > 0) {
        out.push(format!(
            "WARNING: mempolicy nodemask violations: {:?}",
            r.configs
                .iter()
                .map(|c| (&c.id, c.mempolicy_violations))
                .collect::<Vec<_>>()
        ));
    }
    out
}

/// The seed-style table: one row per configuration, published figures in parentheses.
#[must_use]
pub fn table(r: &CompareResult) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}: {}", r.scenario, r.description);
    // A grain of 1 (every page simulated) is not named, so tables from before grains
    // read the same.
    let grain = if r.grain > 1 {
        format!(", grain {} (a unit = {} base pages)", r.grain, r.grain)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "seed {}, scale {}, {} s simulated, THP {}{grain}; placement of the reported memory on {}; (published)",
        r.seed, r.scale, r.duration_s, r.thp, r.fast_node
    );
    let (headers, rows) = table_cells(r);
    let widths: Vec<usize> = (0..headers.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([headers[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            // Text columns left, numbers right.
            if i < 2 {
                let _ = write!(s, "{c:<w$}  ", w = widths[i]);
            } else {
                let _ = write!(s, "{c:>w$}  ", w = widths[i]);
            }
        }
        s.trim_end().to_string()
    };
    let _ = writeln!(
        out,
        "{}",
        line(headers.iter().map(String::as_str).collect())
    );
    let _ = writeln!(
        out,
        "{}",
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("  ")
    );
    for r in &rows {
        let _ = writeln!(out, "{}", line(r.iter().map(String::as_str).collect()));
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "counters (vmstat-like; published in parentheses):");
    for l in counter_lines(r) {
        let _ = writeln!(out, "{l}");
    }
    out
}

/// Counters given a column of their own in the CSV time series (all of them are in the JSON).
pub const CSV_COUNTERS: &[&str] = &[
    "numa_pte_updates",
    "numa_hint_faults",
    "pgpromote_success",
    "pgdemote_kswapd",
    "pgdemote_success",
    "hwhint_total_events",
    "damos_sz_applied",
];

/// The time series of every configuration as CSV, one row per (configuration, sample).
#[must_use]
pub fn csv(r: &CompareResult) -> String {
    let nodes: Vec<_> = r
        .configs
        .first()
        .map(|c| c.node_gib.keys().copied().collect())
        .unwrap_or_default();
    let mut out = String::from("config,t_s,latency_ns,hot_on_fast");
    for n in &nodes {
        let _ = write!(out, ",node{}_gib", n.0);
    }
    out.push_str(",promoted_gib,demoted_gib,promoter_cpu_s");
    for k in CSV_COUNTERS {
        let _ = write!(out, ",{k}");
    }
    out.push('\n');
    for c in &r.configs {
        for s in &c.series {
            let _ = write!(
                out,
                "{},{:.3},{:.2},{:.5}",
                c.id, s.t_s, s.latency_ns, s.hot_on_fast
            );
            for n in &nodes {
                let _ = write!(out, ",{:.4}", s.node_gib.get(n).copied().unwrap_or(0.0));
            }
            let _ = write!(
                out,
                ",{:.4},{:.4},{:.4}",
                s.promoted_gib, s.demoted_gib, s.promoter_cpu_s
            );
            for k in CSV_COUNTERS {
                let _ = write!(out, ",{}", s.counters.get(*k).copied().unwrap_or(0));
            }
            out.push('\n');
        }
    }
    out
}
