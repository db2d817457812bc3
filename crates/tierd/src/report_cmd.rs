//! `--plot FILE` and `--report FILE.html`: results turned into `tierd_report`'s neutral
//! figures and tables, written by that crate.
//!
//! - `tierd compare`/`sim`: per configuration, the hot set's share on the fast tier and the
//!   mean access latency over simulated time (the `Sample` series of the JSON/CSV output);
//!   the report adds the same table as the text output, its counters and the scenario as run.
//! - `tierd lab`: per run, the hot part's share on the fast nodes (from the numa_maps
//!   samples) and the chase's latency per step (from its interval lines), per experiment.

use std::path::{Path, PathBuf};

use anyhow::Result;
use tierd_lab::summary::{hot_on_fast_series, latency_series};
use tierd_lab::ExperimentResult;
use tierd_report::html::{self, Report, Table};
use tierd_report::{plot, Figure, Legend, Series};
use tierd_sim::scenario::Scenario;
use tierd_sim::sim::CompareResult;

/// The version written into reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

fn series_label(id: &str, name: &str) -> String {
    if name.is_empty() {
        id.to_string()
    } else {
        format!("{id} {name}")
    }
}

/// The comparison's figures: hot set on the fast tier (%) and latency (ns) over time, one line
/// per configuration.
#[must_use]
pub fn compare_figures(r: &CompareResult) -> Vec<Figure> {
    let line = |f: fn(&tierd_sim::sim::Sample) -> f64| -> Vec<Series> {
        r.configs
            .iter()
            .map(|c| Series {
                label: series_label(&c.id, &c.label),
                points: c.series.iter().map(|s| (s.t_s, f(s))).collect(),
            })
            .collect()
    };
    vec![
        Figure {
            title: format!("{}: hot set on the fast tier ({})", r.scenario, r.fast_node),
            x_label: "simulated time, s".into(),
            y_label: "hot set on the fast tier, %".into(),
            y_range: Some((0.0, 100.0)),
            legend: Legend::LowerRight,
            series: line(|s| 100.0 * s.hot_on_fast),
        },
        Figure {
            title: format!("{}: mean access latency", r.scenario),
            x_label: "simulated time, s".into(),
            y_label: "latency, ns".into(),
            y_range: None,
            legend: Legend::UpperRight,
            series: line(|s| s.latency_ns),
        },
    ]
}

/// The scenario as it ran (scaled, seed applied), as TOML; JSON if TOML cannot hold it.
fn scenario_text(sc: &Scenario) -> (String, String) {
    match toml::to_string(sc) {
        Ok(t) => ("TOML".into(), t),
        Err(_) => (
            "JSON".into(),
            serde_json::to_string_pretty(sc).unwrap_or_default(),
        ),
    }
}

/// The HTML report of a comparison. `sc` is the scenario as run.
///
/// # Errors
/// When a figure cannot be drawn.
pub fn compare_report(r: &CompareResult, sc: &Scenario) -> Result<String> {
    let (headers, rows) = tierd_sim::report::table_cells(r);
    let machine = sc
        .machine
        .node
        .iter()
        .map(|n| format!("node{}: {:.2} GiB, {} CPUs", n.id, n.capacity_gib, n.cpus))
        .collect::<Vec<_>>()
        .join("; ");
    let processes = sc
        .process
        .iter()
        .map(|p| {
            let gib: f64 = p.region.iter().map(|g| g.size_gib).sum();
            format!("{} ({gib:.2} GiB)", p.name)
        })
        .collect::<Vec<_>>()
        .join("; ");
    let params = vec![
        ("scenario".into(), r.scenario.clone()),
        ("seed".into(), r.seed.to_string()),
        ("scale".into(), r.scale.to_string()),
        ("simulated time".into(), format!("{} s", r.duration_s)),
        (
            "step / sample".into(),
            format!("{} ms / {} ms", sc.step_ms, sc.sample_ms),
        ),
        ("fast node (reported)".into(), r.fast_node.to_string()),
        ("machine".into(), machine),
        ("processes".into(), processes),
        ("configurations".into(), r.configs.len().to_string()),
        ("tierd".into(), VERSION.into()),
        ("simulator".into(), r.version.clone()),
    ];
    let (fmt, text) = scenario_text(sc);
    let report = Report {
        title: format!("tierd compare: {}", r.scenario),
        description: r.description.clone(),
        version: VERSION.into(),
        seed: r.seed,
        params,
        tables: vec![Table {
            id: "results".into(),
            caption: format!(
                "Results after {} s simulated (published figures in parentheses)",
                r.duration_s
            ),
            headers,
            rows,
        }],
        notes: std::iter::once("counters (vmstat-like; published in parentheses):".to_string())
            .chain(tierd_sim::report::counter_lines(r))
            .collect(),
        figures: compare_figures(r),
        source: Some((format!("The scenario as run ({fmt})"), text)),
    };
    Ok(html::report(&report)?)
}

/// Writes a comparison's plots (each file SVG or PNG by its extension) and its HTML report.
///
/// # Errors
/// An unknown plot extension (checked before anything is drawn) or a file that cannot be
/// written.
pub fn write_compare(
    r: &CompareResult,
    sc: &Scenario,
    plots: &[PathBuf],
    report: Option<&Path>,
) -> Result<()> {
    for p in plots {
        plot::Format::of(p)?;
    }
    if !plots.is_empty() {
        let figs = compare_figures(r);
        for p in plots {
            plot::write(p, &figs)?;
        }
    }
    if let Some(p) = report {
        let page = compare_report(r, sc)?;
        tierd_report::write_atomic(p, page.as_bytes())?;
    }
    Ok(())
}

/// The lab's figures: per experiment, the hot part on the fast nodes and (when the workload is
/// a chase) its latency per step, one line per run.
#[must_use]
pub fn lab_figures(results: &[ExperimentResult]) -> Vec<Figure> {
    let mut figs = Vec::new();
    for res in results {
        let exp = &res.experiment;
        let mech = |id: &str| {
            res.rows
                .iter()
                .find(|r| r.id == id)
                .map_or("", |r| r.mechanism.as_str())
        };
        let hot = exp.parts.first().map_or("hot", |p| p.name.as_str());
        figs.push(Figure {
            title: format!(
                "lab {} (THP {}): {} part on the fast nodes",
                exp.id, exp.thp, hot
            ),
            x_label: "time since the mechanism started, s".into(),
            y_label: format!("{hot} part on fast nodes, %"),
            y_range: Some((0.0, 100.0)),
            legend: Legend::LowerRight,
            series: res
                .runs
                .iter()
                .map(|(id, d)| Series {
                    label: series_label(id, mech(id)),
                    points: hot_on_fast_series(exp, d),
                })
                .collect(),
        });
        let lat: Vec<Series> = res
            .runs
            .iter()
            .map(|(id, d)| Series {
                label: series_label(id, mech(id)),
                points: latency_series(d),
            })
            .collect();
        if lat.iter().any(|s| !s.points.is_empty()) {
            figs.push(Figure {
                title: format!("lab {} (THP {}): chase latency per step", exp.id, exp.thp),
                x_label: "time since the chase started, s".into(),
                y_label: "latency per step (mean over threads), ns".into(),
                y_range: None,
                legend: Legend::UpperRight,
                series: lat,
            });
        }
    }
    figs
}

/// Checks the plot files' extensions before a long lab run starts.
///
/// # Errors
/// An extension other than `.svg` or `.png`.
pub fn check_plot_paths(plots: &[PathBuf]) -> Result<()> {
    for p in plots {
        plot::Format::of(p)?;
    }
    Ok(())
}

/// Writes the lab's plots (each file SVG or PNG by its extension).
///
/// # Errors
/// No results to plot, or a file that cannot be written.
pub fn write_lab_plots(results: &[ExperimentResult], plots: &[PathBuf]) -> Result<()> {
    if plots.is_empty() {
        return Ok(());
    }
    let figs = lab_figures(results);
    for p in plots {
        plot::write(p, &figs)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierd_lab::experiment::experiment_a;
    use tierd_lab::run::Sample;
    use tierd_lab::{RunData, Summary};

    fn run_data(hot_fast: &[u64], ns: &[f64]) -> RunData {
        RunData {
            samples: hot_fast
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    let mut s = Sample {
                        t: i as f64,
                        ..Sample::default()
                    };
                    s.parts
                        .insert("hot".into(), [(0, *h), (1, 32768 - *h)].into());
                    s
                })
                .collect(),
            workload_lines: ns
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    format!(
                        "chase t={i}.000 hot_n0=0 hot_n1=0 hot_other=0 cold_n0=0 cold_n1=0 cold_other=0 steps_per_s={} ns_per_step={n:.2}",
                        1e9 / n
                    )
                })
                .collect(),
            ..RunData::default()
        }
    }

    #[test]
    fn lab_figures_have_one_line_per_run_from_the_measurements() {
        let exp = experiment_a(true);
        let rows = vec![
            Summary {
                id: "B0".into(),
                mechanism: "baseline".into(),
                ..Summary::default()
            },
            Summary {
                id: "T1".into(),
                mechanism: "tierd".into(),
                ..Summary::default()
            },
        ];
        let res = ExperimentResult {
            experiment: exp,
            host: tierd_lab::HostInfo::default(),
            rows,
            runs: vec![
                ("B0".into(), run_data(&[0, 0, 0], &[300.0, 300.0])),
                ("T1".into(), run_data(&[0, 16384, 32768], &[300.0, 120.0])),
            ],
            versus: Vec::new(),
        };
        let figs = lab_figures(std::slice::from_ref(&res));
        assert_eq!(figs.len(), 2);
        let labels: Vec<&str> = figs[0].series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["B0 baseline", "T1 tierd"]);
        assert_eq!(
            figs[0].series[1].points,
            vec![(0.0, 0.0), (1.0, 50.0), (2.0, 100.0)]
        );
        assert_eq!(figs[1].series[1].points, vec![(0.0, 300.0), (1.0, 120.0)]);

        // Without chase lines (an integrity run) there is no latency figure.
        let mut quiet = res.clone();
        for (_, d) in &mut quiet.runs {
            d.workload_lines.clear();
        }
        assert_eq!(lab_figures(&[quiet]).len(), 1);

        let dir = tempfile::tempdir().expect("tempdir");
        let svg = dir.path().join("lab.svg");
        write_lab_plots(&[res], std::slice::from_ref(&svg)).expect("write");
        let text = std::fs::read_to_string(&svg).expect("read");
        assert!(text.contains("T1 tierd") && text.contains("chase latency per step"));
        assert!(check_plot_paths(&[dir.path().join("lab.pdf")]).is_err());
    }
}
