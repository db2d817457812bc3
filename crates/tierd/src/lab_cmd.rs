//! `tierd lab`: glue between the command line and `tierd_lab`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use tierd_lab::{experiment, run_experiment, summary, LabEnv, EXPERIMENTS};

/// `tierd lab [EXPERIMENT...]`.
#[allow(clippy::too_many_arguments)]
pub fn lab(
    experiments: &[String],
    quick: bool,
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
        .map(|id| experiment(id, quick))
        .collect::<Result<Vec<_>, _>>()?;
    eprintln!("tierd lab: fetching the guest kernel and building static guest binaries ...");
    let env = LabEnv::prepare(workspace).context("preparing the guest")?;
    let mut results = Vec::new();
    let mut all_csv = String::new();
    for exp in &exps {
        let mut repeats = Vec::new();
        for i in 0..repeat.max(1) {
            eprintln!(
                "tierd lab: {} (run {} of {})",
                exp.title,
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
            println!("{}", res.host.line());
            println!("{}", summary::table(&res.experiment, &res.rows));
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
            println!("{}", summary::spread_table(exp, &repeats));
        }
    }
    if let Some(p) = json {
        std::fs::write(p, serde_json::to_string_pretty(&results)? + "\n")
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = csv {
        std::fs::write(p, all_csv).with_context(|| format!("writing {}", p.display()))?;
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

/// The source tree the binary was built from: the lab builds its guest binaries there.
pub fn default_workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
