//! `tierd record`, `tierd replay` and `tierd report`: a daemon run's trace (docs/trace.md)
//! replayed through a fresh engine, and its access heat drawn.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use tierd_daemon::config::DaemonConfig;
use tierd_engine::MigrationKind;
use tierd_report::heatmap::{HeatGrid, Panel};
use tierd_report::{Figure, Legend, Series};
use tierd_trace::heat::ProcessHeat;
use tierd_trace::{Limits, Replay};

/// Where and how much to record (`tierd run --record`, `tierd record`).
#[derive(Args, Clone, Debug, Default)]
pub struct RecordArgs {
    /// Record what the engine saw and decided into this directory (trace.0, trace.1, ...;
    /// docs/trace.md). Old trace files there are removed.
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,
    /// Start the next trace file once one holds this many MiB.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    pub record_max_mib: u64,
    /// Keep at most this many trace files (the oldest is removed).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub record_files: u32,
}

impl RecordArgs {
    /// The daemon's recording option.
    #[must_use]
    pub fn option(&self) -> Option<(PathBuf, Limits)> {
        self.record.clone().map(|d| {
            (
                d,
                Limits {
                    max_bytes: self.record_max_mib << 20,
                    max_files: self.record_files,
                },
            )
        })
    }
}

/// `tierd record --synthetic SECS DIR`: a recording of the built-in synthetic machine (three
/// processes whose hot sets move, a DRAM and a CXL node), to try replay and report without a
/// tiered machine.
pub fn record_synthetic(dir: &Path, secs: u64, args: &RecordArgs) -> Result<()> {
    let mut b = tierd_trace::synth::SynthBackend::new(3, 16_384, 12_288);
    let limits = args.option().map_or_else(Limits::default, |(_, l)| l);
    let moved = tierd_trace::synth::record_synthetic(
        &mut b,
        tierd_engine::EngineConfig::default(),
        secs,
        100,
        dir,
        limits,
    )
    .map_err(anyhow::Error::msg)
    .with_context(|| format!("recording the synthetic machine into {}", dir.display()))?;
    eprintln!(
        "tierd: recorded {secs} s of the synthetic machine into {} ({moved} pages moved)",
        dir.display()
    );
    Ok(())
}

fn load(trace: &Path) -> Result<tierd_trace::Trace> {
    Ok(tierd_trace::read(trace)?)
}

/// The engine settings of a daemon configuration file, for a replay: only `[engine]` and
/// `[sources]` matter, so a file of just those is enough (an absent `[scope]` is taken as
/// `all = true`, which the replay never uses).
fn replay_config(path: &Path) -> Result<tierd_engine::EngineConfig> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let has_scope = text
        .parse::<toml::Table>()
        .map_or(true, |t| t.contains_key("scope"));
    let text = if has_scope {
        text
    } else {
        // Appended last, so the lines of the file's own errors stay where they are.
        format!("{text}\n[scope]\nall = true\n")
    };
    Ok(DaemonConfig::parse(&text, path)?.engine_config())
}

/// `tierd replay`.
pub fn replay(
    trace: &Path,
    config: Option<&Path>,
    every_s: f64,
    json: Option<&Path>,
    plot: Option<&Path>,
) -> Result<()> {
    anyhow::ensure!(
        every_s.is_finite() && every_s > 0.0,
        "--every must be a positive number of seconds, got {every_s}"
    );
    if let Some(p) = plot {
        tierd_report::plot::Format::of(p)?;
    }
    let t = load(trace)?;
    let engine_config = match config {
        Some(c) => replay_config(c)?,
        None => t.header.config.clone(),
    };
    let passes = tierd_trace::passes(t.records)
        .with_context(|| format!("{}: records out of order", trace.display()))?;
    let r = tierd_trace::replay(&t.header, passes, engine_config)
        .with_context(|| format!("replaying {}", trace.display()))?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "trace {} ({} file{}, {}), {} passes; config: {}",
        trace.display(),
        t.files.len(),
        if t.files.len() == 1 { "" } else { "s" },
        if t.complete {
            "from the start"
        } else {
            "its start rotated away: the engine starts from nothing mid-run, decisions can differ"
        },
        r.passes,
        match config {
            Some(c) if r.what_if => format!("{} (differs from the recorded one)", c.display()),
            Some(c) => format!("{} (the same as recorded)", c.display()),
            None => "as recorded".into(),
        }
    );
    out.push_str(&table(&r, every_s));
    let _ = writeln!(
        out,
        "promoted {} pages, demoted {} pages",
        r.promoted_pages, r.demoted_pages
    );
    let _ = writeln!(out, "{}", r.verdict());
    if let Some(p) = json {
        let text = serde_json::to_string_pretty(&r).context("serializing the replay")?;
        crate::write_out(p, &(text + "\n"))?;
    }
    if json.is_some_and(|p| p.as_os_str() == "-") {
        eprint!("{out}");
    } else {
        print!("{out}");
    }
    if let Some(p) = plot {
        tierd_report::plot::write(p, &replay_figures(&r))?;
    }
    if !r.what_if && t.complete && !r.identical() {
        anyhow::bail!("the replay with the recorded configuration made other decisions");
    }
    Ok(())
}

/// One row per `every_s` window: pages promoted and demoted in it, and the memory used per
/// node at its end.
fn table(r: &Replay, every_s: f64) -> String {
    let nodes: Vec<u16> = r
        .placement
        .first()
        .map(|p| p.used.iter().map(|(n, _)| n.0).collect())
        .unwrap_or_default();
    let mut out = format!(
        "{:>9} {:>10} {:>10} {:>8}",
        "time s", "promoted", "demoted", "same"
    );
    for n in &nodes {
        let _ = write!(out, " {:>12}", format!("node{n} MiB"));
    }
    out.push('\n');
    // Seconds over a positive window: far inside i64, and `as` saturates anyway.
    #[allow(clippy::cast_possible_truncation)]
    let window = |t: f64| (t / every_s).floor() as i64;
    let mut di = 0;
    let mut pi = 0;
    while pi < r.placement.len() {
        let w = window(r.placement[pi].time_s);
        while pi + 1 < r.placement.len() && window(r.placement[pi + 1].time_s) == w {
            pi += 1;
        }
        let (mut pro, mut dem, mut same, mut n) = (0, 0, 0, 0);
        while di < r.decisions.len() && window(r.decisions[di].time_s) <= w {
            let d = &r.decisions[di];
            match d.kind {
                MigrationKind::Promote => pro += d.pages,
                MigrationKind::Demote => dem += d.pages,
            }
            same += usize::from(d.same_as_recorded);
            n += 1;
            di += 1;
        }
        let _ = write!(
            out,
            "{:>9.1} {pro:>10} {dem:>10} {:>8}",
            w as f64 * every_s,
            format!("{same}/{n}")
        );
        for (_, used) in &r.placement[pi].used {
            let _ = write!(out, " {:>12.1}", *used as f64 / f64::from(1 << 20));
        }
        out.push('\n');
        pi += 1;
    }
    out
}

/// Memory used per node, and pages promoted and demoted so far, over time.
fn replay_figures(r: &Replay) -> Vec<Figure> {
    let nodes: Vec<u16> = r
        .placement
        .first()
        .map(|p| p.used.iter().map(|(n, _)| n.0).collect())
        .unwrap_or_default();
    let placement = Figure {
        title: "placement over time (replay)".into(),
        x_label: "time s".into(),
        y_label: "used MiB".into(),
        y_range: None,
        legend: Legend::LowerRight,
        series: nodes
            .iter()
            .enumerate()
            .map(|(i, n)| Series {
                label: format!("node {n}"),
                points: r
                    .placement
                    .iter()
                    .map(|p| (p.time_s, p.used[i].1 as f64 / f64::from(1 << 20)))
                    .collect(),
            })
            .collect(),
    };
    let mut pro = Vec::new();
    let mut dem = Vec::new();
    let (mut p, mut d) = (0_u64, 0_u64);
    for x in &r.decisions {
        match x.kind {
            MigrationKind::Promote => p += x.pages,
            MigrationKind::Demote => d += x.pages,
        }
        pro.push((x.time_s, p as f64));
        dem.push((x.time_s, d as f64));
    }
    let moves = Figure {
        title: "pages moved so far (replay)".into(),
        x_label: "time s".into(),
        y_label: "pages".into(),
        y_range: None,
        legend: Legend::UpperLeft,
        series: vec![
            Series {
                label: "promoted".into(),
                points: pro,
            },
            Series {
                label: "demoted".into(),
                points: dem,
            },
        ],
    };
    vec![placement, moves]
}

/// The heat map panels: per process its heat grid, then one figure of every process's
/// working-set size over time.
#[must_use]
pub fn heat_panels(heat: &[ProcessHeat]) -> Vec<Panel> {
    let mut panels: Vec<Panel> = heat
        .iter()
        .map(|h| {
            Panel::Heat(HeatGrid {
                title: format!(
                    "pid {}: access heat ({} observations, {} pages, 0x{:x}-0x{:x})",
                    h.pid, h.observations, h.pages, h.addr_lo, h.addr_hi
                ),
                x_label: "time s".into(),
                y_label: "observed pages in address order".into(),
                x_range: (h.t0_s, h.t1_s),
                cols: h.cols,
                rows: h.rows,
                cells: h.cells.iter().map(|&c| c as f64).collect(),
            })
        })
        .collect();
    panels.push(Panel::Lines(Figure {
        title: "working-set size (distinct pages observed per window)".into(),
        x_label: "time s".into(),
        y_label: "pages".into(),
        y_range: None,
        legend: Legend::UpperRight,
        series: heat
            .iter()
            .map(|h| Series {
                label: format!("pid {}", h.pid),
                points: h.wss.iter().map(|&(t, n)| (t, n as f64)).collect(),
            })
            .collect(),
    }));
    panels
}

/// A window's length: seconds from 1 s up, milliseconds below (a short recording's windows
/// are a few ms; "0.0 s" would say nothing).
fn span(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.1} s")
    } else if s >= 0.01 {
        format!("{:.0} ms", s * 1e3)
    } else {
        format!("{:.2} ms", s * 1e3)
    }
}

/// `tierd report TRACE --heatmap FILE`.
pub fn report(
    trace: &Path,
    heatmap: &Path,
    top: usize,
    windows: usize,
    json: Option<&Path>,
) -> Result<()> {
    tierd_report::plot::Format::of(heatmap)?;
    let t = load(trace)?;
    let passes = tierd_trace::passes(t.records)
        .with_context(|| format!("{}: records out of order", trace.display()))?;
    let heat = tierd_trace::heat::heat(&passes, windows, 48, top);
    anyhow::ensure!(
        !heat.is_empty(),
        "{}: no observations to draw (the sources saw nothing in scope)",
        trace.display()
    );
    tierd_report::heatmap::write(heatmap, &heat_panels(&heat))?;
    for h in &heat {
        let peak = h.wss.iter().map(|w| w.1).max().unwrap_or(0);
        println!(
            "pid {:>7}: {:>9} observations, {:>8} pages, working set up to {peak} pages per {} window",
            h.pid,
            h.observations,
            h.pages,
            span((h.t1_s - h.t0_s) / h.cols as f64)
        );
    }
    println!("heat map: {}", heatmap.display());
    if let Some(p) = json {
        let text = serde_json::to_string_pretty(&heat).context("serializing the heat")?;
        crate::write_out(p, &(text + "\n"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_said_in_the_unit_that_shows_it() {
        assert_eq!(span(12.34), "12.3 s");
        assert_eq!(span(1.0), "1.0 s");
        assert_eq!(span(0.05), "50 ms");
        assert_eq!(span(0.004), "4.00 ms");
    }

    /// A synthetic recording, replayed (same decisions, table and verdict) and drawn in
    /// both formats.
    #[test]
    fn record_replay_report_on_the_synthetic_machine() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("rec");
        record_synthetic(&dir, 30, &RecordArgs::default()).unwrap();
        let json = d.path().join("r.json");
        let plot = d.path().join("r.svg");
        replay(&dir, None, 5.0, Some(&json), Some(&plot)).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(v["same"], v["recorded"]);
        assert!(v["decisions"].as_array().unwrap().len() > 10);
        assert!(std::fs::read_to_string(&plot)
            .unwrap()
            .contains("placement over time"));
        let svg = d.path().join("h.svg");
        let png = d.path().join("h.png");
        report(&dir, &svg, 4, 60, None).unwrap();
        report(&dir, &png, 4, 60, None).unwrap();
        let s = std::fs::read_to_string(&svg).unwrap();
        assert!(s.starts_with("<svg") && s.contains("access heat") && s.contains("working-set"));
        assert!(s.matches("<rect").count() > 100);
        assert_eq!(&std::fs::read(&png).unwrap()[..8], b"\x89PNG\r\n\x1a\n");
    }

    #[test]
    fn a_bad_trace_is_one_line_naming_the_file() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("t");
        std::fs::write(&f, b"nonsense").unwrap();
        let e = format!("{:#}", replay(&f, None, 1.0, None, None).unwrap_err());
        assert!(
            e.contains("not a tierd trace") && e.contains(&f.display().to_string()),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }
}
