//! `tierd lab`: glue between the command line and `tierd_lab`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use tierd_lab::{experiment_thp, run_experiment, summary, KernelChoice, LabEnv, Thp, EXPERIMENTS};

/// `tierd lab --thp`: the guest's THP modes to run each experiment in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ThpChoice {
    /// `never` only.
    Never,
    /// `always` only.
    Always,
    /// `never`, then `always`.
    Both,
}

impl ThpChoice {
    /// The modes, in the order they run.
    #[must_use]
    pub fn modes(self) -> &'static [Thp] {
        match self {
            ThpChoice::Never => &[Thp::Never],
            ThpChoice::Always => &[Thp::Always],
            ThpChoice::Both => &Thp::BOTH,
        }
    }
}

/// `tierd lab --kernel`: the guest kernels to run each experiment on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KernelArg {
    /// Debian's 6.12 (bookworm-backports).
    #[value(name = "6.12")]
    Lts,
    /// The newest kernel in Debian's archive.
    Newest,
    /// 6.12, then the newest.
    Both,
}

impl KernelArg {
    /// The kernels, in the order they run.
    #[must_use]
    pub fn choices(self) -> &'static [KernelChoice] {
        match self {
            KernelArg::Lts => &[KernelChoice::Lts],
            KernelArg::Newest => &[KernelChoice::Newest],
            KernelArg::Both => &KernelChoice::BOTH,
        }
    }
}

/// `tierd lab [EXPERIMENT...]`: each experiment once per guest kernel in `kernels` and THP
/// mode in `thp` (rows marked), then "tierd vs the best kernel mechanism" over all of them.
#[allow(clippy::too_many_arguments)]
pub fn lab(
    experiments: &[String],
    quick: bool,
    kernels: &[KernelChoice],
    thp: &[Thp],
    repeat: u32,
    only: &[String],
    json: Option<&Path>,
    csv: Option<&Path>,
    plots: &[PathBuf],
    workspace: &Path,
) -> Result<()> {
    crate::report_cmd::check_plot_paths(plots)?;
    let ids: Vec<String> = if experiments.is_empty() {
        EXPERIMENTS.iter().map(|s| (*s).to_string()).collect()
    } else {
        experiments.to_vec()
    };
    let exps = ids
        .iter()
        .flat_map(|id| thp.iter().map(move |t| experiment_thp(id, quick, *t)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut results = Vec::new();
    let mut all_csv = String::new();
    for kernel in kernels {
        eprintln!(
        "tierd lab: fetching the guest kernel ({kernel}) and building static guest binaries ..."
    );
        let env = LabEnv::prepare_with(workspace, *kernel).context("preparing the guest")?;
        for exp in &exps {
            let mut repeats = Vec::new();
            for i in 0..repeat.max(1) {
                eprintln!(
                    "tierd lab: {} [THP {}] (run {} of {})",
                    exp.title,
                    exp.thp,
                    i + 1,
                    repeat.max(1)
                );
                let res = run_experiment(&env, exp, only, &mut |row| match &row.error {
                    Some(e) => eprintln!("  {} ({}) FAILED: {e}", row.id, row.mechanism),
                    None => eprintln!(
                        "  {} ({}) done: hot on fast {:.1} %, over {:+.1} %, guest {:.0} s",
                        row.id, row.mechanism, row.hot_on_fast_pct, row.over_pct, row.wall_s
                    ),
                })
                .with_context(|| format!("experiment {}", exp.id))?;
                print_out(&format!(
                    "{}\n[THP {}] {}\n{}\n",
                    res.host.line(),
                    res.experiment.thp,
                    summary::table(&res.experiment, &res.rows),
                    summary::versus_table(&res.versus)
                ));
                let c = summary::csv(&res.experiment, &res.runs);
                if all_csv.is_empty() {
                    all_csv = c;
                } else {
                    all_csv.extend(c.lines().skip(1).map(|l| format!("{l}\n")));
                }
                repeats.push(res.rows.clone());
                results.push(res);
            }
            if repeats.len() > 1 {
                print_out(&format!("{}\n", summary::spread_table(exp, &repeats)));
            }
        }
    }
    if results.len() > 1 {
        let all: Vec<summary::Verdict> = results.iter().flat_map(|r| r.versus.clone()).collect();
        print_out(&format!("{}\n", summary::versus_table(&all)));
    }
    if let Some(p) = json {
        let text = serde_json::to_string_pretty(&results)? + "\n";
        tierd_report::write_atomic(p, text.as_bytes())?;
    }
    if let Some(p) = csv {
        tierd_report::write_atomic(p, all_csv.as_bytes())?;
    }
    crate::report_cmd::write_lab_plots(&results, plots)?;
    let failed = results
        .iter()
        .flat_map(|r| &r.rows)
        .filter(|r| r.error.is_some())
        .count();
    anyhow::ensure!(
        failed == 0,
        "{failed} lab run(s) failed: see the FAILED rows"
    );
    Ok(())
}

/// Prints the lab's tables. The lab keeps SIGPIPE ignored (see `output_only` in main.rs), so
/// a reader that went away (`tierd lab | head`) shows up here as EPIPE: the tables are lost
/// but the runs go on and still write `--json`/`--csv`/`--plot`, where `println!` would panic.
fn print_out(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// `tierd lab chaos`: one guest of faults for `duration` seconds (300; 60 with `--quick`),
/// its table, and an error when an acceptance bound of issue 12 is broken.
pub fn lab_chaos(
    experiments: &[String],
    duration: Option<u32>,
    quick: bool,
    json: Option<&Path>,
    workspace: &Path,
) -> Result<()> {
    anyhow::ensure!(
        experiments.len() == 1,
        "chaos runs alone: `tierd lab chaos`, not with other experiments"
    );
    let params = match (duration, quick) {
        (Some(d), _) => tierd_lab::chaos::ChaosParams {
            duration_s: d,
            ..if quick {
                tierd_lab::chaos::ChaosParams::quick()
            } else {
                tierd_lab::chaos::ChaosParams::full(d)
            }
        },
        (None, true) => tierd_lab::chaos::ChaosParams::quick(),
        (None, false) => tierd_lab::chaos::ChaosParams::full(300),
    };
    eprintln!("tierd lab: fetching the guest kernel and building static guest binaries ...");
    let env = LabEnv::prepare(workspace).context("preparing the guest")?;
    eprintln!(
        "tierd lab: chaos for {} s (SIGKILL every {} s, pid_max {}) ...",
        params.duration_s, params.kill_every_s, params.pid_max
    );
    let (report, _console) = tierd_lab::chaos::run_chaos(&env, &params).context("chaos run")?;
    let mut text = String::new();
    if let Some(h) = &report.host {
        text.push_str(&h.line());
        text.push('\n');
    }
    text.push_str(&format!(
        "chaos: {} s, guest {:.0} s\n{}",
        params.duration_s,
        report.wall_s,
        tierd_lab::chaos::table(&report)
    ));
    // The supervisor's periodic status lines stay in --json; the rest explain failures.
    for e in report
        .events
        .iter()
        .filter(|e| !e.starts_with("supervisor status"))
    {
        text.push_str(&format!("  {e}\n"));
    }
    let failures = report.failures();
    for f in &failures {
        text.push_str(&format!("BOUND BROKEN: {f}\n"));
    }
    print_out(&text);
    if let Some(p) = json {
        let text = serde_json::to_string_pretty(&report)? + "\n";
        tierd_report::write_atomic(p, text.as_bytes())?;
    }
    anyhow::ensure!(
        failures.is_empty(),
        "{} chaos bound(s) broken: see BOUND BROKEN",
        failures.len()
    );
    Ok(())
}

/// `tierd lab scale`: tierd and the best DAMON row with 1..500 processes on the same memory,
/// and the migration check, on the first of `kernels` (see `tierd_lab::scale`).
pub fn lab_scale(
    experiments: &[String],
    quick: bool,
    procs: &[u32],
    duration: Option<u32>,
    kernels: &[KernelChoice],
    json: Option<&Path>,
    workspace: &Path,
) -> Result<()> {
    use tierd_lab::scale;
    anyhow::ensure!(
        experiments.len() == 1,
        "scale runs alone: `tierd lab scale`, not with other experiments"
    );
    let mut params = if quick {
        scale::ScaleParams::quick()
    } else {
        scale::ScaleParams::full()
    };
    if !procs.is_empty() {
        params.procs = procs.to_vec();
    }
    if let Some(d) = duration {
        params.duration_s = d;
    }
    let choice = kernels.first().copied().unwrap_or(KernelChoice::Newest);
    eprintln!("tierd lab: fetching the guest kernel and building static guest binaries ...");
    let env = LabEnv::prepare_with(workspace, choice).context("preparing the guest")?;
    eprintln!(
        "tierd lab: scale on {} with {:?} processes, {} s per run ...",
        env.kernel.version, params.procs, params.duration_s
    );
    let report = scale::run_scale(&env, &params, &mut |row| match &row.error {
        Some(e) => {
            eprintln!("  {} procs {} FAILED: {e}", row.procs, row.id);
            for n in &row.notes {
                eprintln!("    {n}");
            }
        }
        None => eprintln!(
            "  {} procs {} done: cpu {:.3} s/s, t90 {}, guest {:.0} s",
            row.procs,
            row.id,
            row.cpu_per_s.unwrap_or(0.0),
            row.t90_s
                .map_or_else(|| "-".into(), |t| format!("{t:.1} s")),
            row.wall_s
        ),
    })
    .context("scale run")?;
    let mut text = String::new();
    if let Some(h) = &report.host {
        text.push_str(&h.line());
        text.push('\n');
    }
    text.push_str(&scale::table(&report));
    print_out(&text);
    if let Some(p) = json {
        let text = serde_json::to_string_pretty(&report)? + "\n";
        tierd_report::write_atomic(p, text.as_bytes())?;
    }
    let failed = report.rows.iter().filter(|r| r.error.is_some()).count();
    anyhow::ensure!(
        failed == 0,
        "{failed} scale run(s) failed: see the FAILED rows"
    );
    Ok(())
}

/// The source tree the binary was built from: the lab builds its guest binaries there.
pub fn default_workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
