//! The `tierd` command: glue between the command line and the library crates.
//!
//! - `tierd compare <scenario>`: run every configuration of a scenario in the simulator and
//!   print the seed-style table (the main job; `--json`, `--csv` for the data).
//! - `tierd sim <scenario-file> [--config ID]`: one configuration (or all) of a scenario file.
//! - `tierd scenarios`: list the shipped scenarios.
//! - `tierd info`: the tiers the engine derives for a DRAM + CXL machine, and its defaults.
//! - `tierd run --config FILE`: the daemon on this machine ([`daemon_cmd`]).
//! - `tierd status`: what a running daemon reports.
//! - `tierd config show [FILE]`, `tierd config check FILE`: the effective configuration with
//!   units, and a check without starting (exit 78 on a bad file).
//! - `tierd top`: a live terminal view of a daemon or a simulated run ([`top_cmd`]).
//! - `tierd lab`: tierd against the kernel's own promotion in a tiered QEMU guest ([`lab_cmd`]).
//! - `tierd run --record DIR` / `tierd record`, `tierd replay TRACE`, `tierd report TRACE
//!   --heatmap FILE`: record a run, replay it through the engine, draw its heat
//!   ([`trace_cmd`]).
//! - `--plot FILE` (compare, sim, lab) and `--report FILE.html` (compare, sim): [`report_cmd`].
//! - `tierd completions SHELL`, `tierd man [--out DIR]`: generated from these definitions
//!   ([`gen_cmd`]).
#![forbid(unsafe_code)]

mod daemon_cmd;
mod gen_cmd;
mod lab_cmd;
mod report_cmd;
mod top_cmd;
mod trace_cmd;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use tierd_engine::topology::dram_cxl;
use tierd_engine::types::Bytes;
use tierd_engine::{Engine, EngineConfig};
use tierd_sim::scenario::{Scenario, SHIPPED};
use tierd_sim::sim::CompareResult;

/// Hot-page tracking and promotion for tiered memory (DRAM + CXL).
#[derive(Debug, Parser)]
#[command(name = "tierd", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Options shared by `compare` and `sim`.
#[derive(Debug, Args)]
struct RunArgs {
    /// Shrink memory sizes and thread counts by this factor for a quick run (0 < scale <= 1).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Override the scenario's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Run up to this many configurations at once, one thread each (default: the CPUs this
    /// process may use, fewer if their estimated memory would exceed MemAvailable; a number
    /// given here is used as given, with a warning if it may not fit). The output is the same
    /// whatever the number; each running configuration holds its own copy of the simulated
    /// machine's page tables.
    #[arg(long)]
    jobs: Option<usize>,
    /// Write the full result (table data and time series) as JSON to this file (`-` = stdout).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the time series as CSV to this file (`-` = stdout).
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Do not draw progress bars.
    #[arg(long)]
    no_progress: bool,
    /// Plot the hot set on the fast tier and the latency over time, per configuration, to this
    /// file (SVG or PNG by its extension; repeatable).
    #[arg(long)]
    plot: Vec<PathBuf>,
    /// Write a self-contained HTML report (table, plots, parameters) to this file.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Back every region with 2 MiB transparent huge pages (`always`) or with base pages only
    /// (`never`), whatever the scenario's regions say (their `thp` / `huge`).
    #[arg(long, value_enum)]
    thp: Option<ThpArg>,
    /// Base pages per simulated unit (a power of two up to 512), whatever the scenario's
    /// `machine.grain` says after `--scale`: 1 simulates every page; a larger grain is faster
    /// and approximate (docs/simulator.md, "Grain"). Needs base pages (no THP).
    #[arg(long)]
    grain: Option<u32>,
}

/// `--thp`: the THP share every region of the scenario gets.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ThpArg {
    /// Every region in 2 MiB folios.
    Always,
    /// No THP.
    Never,
}

impl RunArgs {
    fn validate(&self) -> Result<()> {
        anyhow::ensure!(
            self.scale > 0.0 && self.scale <= 1.0,
            "--scale must be in (0, 1], got {}",
            self.scale
        );
        anyhow::ensure!(self.jobs != Some(0), "--jobs must be at least 1");
        Ok(())
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Compare the promotion strategies of a scenario side by side (simulated).
    Compare {
        /// A shipped scenario name (see `tierd scenarios`) or a scenario file.
        #[arg(default_value = "pointer-chase")]
        scenario: String,
        /// Only these configuration ids (comma-separated).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Run one configuration (or all) of a scenario file.
    Sim {
        /// The scenario file.
        file: PathBuf,
        /// The configuration id to run (default: all).
        #[arg(long)]
        config: Option<String>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// List the shipped scenarios.
    Scenarios,
    /// Run the daemon: promote hot pages and demote cold ones on this machine.
    Run {
        /// The configuration file (see deploy/tierd.toml).
        #[arg(long, short)]
        config: PathBuf,
        /// Plan and print the migrations, move nothing.
        #[arg(long)]
        dry_run: bool,
        /// Stop after this many seconds (default: until SIGINT or SIGTERM).
        #[arg(long)]
        duration: Option<f64>,
        /// Listen for /metrics and /status here instead of the file's daemon.metrics_listen.
        #[arg(long)]
        metrics: Option<std::net::SocketAddr>,
        #[command(flatten)]
        record: trace_cmd::RecordArgs,
    },
    /// Run the daemon recording what its engine saw and decided into DIR (`tierd run
    /// --record DIR`), or record the built-in synthetic machine (--synthetic SECS).
    Record {
        /// The directory for trace.0, trace.1, ... (docs/trace.md).
        dir: PathBuf,
        /// The configuration file (see deploy/tierd.toml).
        #[arg(long, short, required_unless_present = "synthetic")]
        config: Option<PathBuf>,
        /// Plan and print the migrations, move nothing.
        #[arg(long)]
        dry_run: bool,
        /// Stop after this many seconds (default: until SIGINT or SIGTERM).
        #[arg(long)]
        duration: Option<f64>,
        /// Listen for /metrics and /status here instead of the file's daemon.metrics_listen.
        #[arg(long)]
        metrics: Option<std::net::SocketAddr>,
        /// Record this many seconds of a built-in synthetic machine instead (no kernel needed).
        #[arg(long, value_name = "SECS", conflicts_with_all = ["config", "dry_run", "duration", "metrics"])]
        synthetic: Option<u64>,
        /// Start the next trace file once one holds this many MiB.
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
        record_max_mib: u64,
        /// Keep at most this many trace files (the oldest is removed).
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
        record_files: u32,
    },
    /// Replay a recorded trace through the engine, with its recorded configuration (the same
    /// decisions, checked) or another (what it would have promoted and demoted).
    Replay {
        /// A trace file or a recording directory.
        trace: PathBuf,
        /// Replay with this daemon configuration's engine settings instead of the recorded.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Seconds per row of the table.
        #[arg(long, default_value_t = 1.0)]
        every: f64,
        /// Write every decision and the placement over time as JSON to FILE (`-`: stdout).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Plot placement and pages moved over time to FILE.svg or FILE.png.
        #[arg(long, value_name = "FILE")]
        plot: Option<PathBuf>,
    },
    /// Draw a recorded trace: access heat over address and time per process, and working-set
    /// size over time.
    Report {
        /// A trace file or a recording directory.
        trace: PathBuf,
        /// The picture, FILE.svg or FILE.png.
        #[arg(long, value_name = "FILE")]
        heatmap: PathBuf,
        /// Draw this many processes, the most observed first.
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=32))]
        top: u64,
        /// Time windows (heat columns; the working-set size is per window).
        #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=2000))]
        windows: u64,
        /// Also write the grids and working-set sizes as JSON to FILE (`-`: stdout).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Print the effective daemon configuration, or check a file without starting.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Show what a running daemon reports: placement per process, sources, counters.
    Status {
        /// The daemon's metrics address.
        #[arg(long, default_value = "127.0.0.1:9464")]
        addr: std::net::SocketAddr,
        /// Print the raw JSON status.
        #[arg(long)]
        json: bool,
    },
    /// Live view of a daemon (or a simulated run): nodes, pages per process and cgroup, hot/cold, rates.
    Top(top_cmd::TopArgs),
    /// Run the lab: tierd against the kernel's own promotion in a tiered QEMU guest, measured.
    Lab {
        /// Experiments to run (default: all but chaos and scale). Known: a, churn, three-node,
        /// three-node-procs, mempolicy, mempolicy-balancing, integrity, memcached, redis,
        /// memcached-pm, memcached-pm-balancing, flat; chaos (issue 12's fault run) and scale (cost
        /// against the number of processes) run alone.
        experiments: Vec<String>,
        /// The short versions (what CI runs).
        #[arg(long)]
        quick: bool,
        /// Run each experiment this many times and print the spread (median, min, max).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
        repeat: u32,
        /// Only these row ids (comma-separated, e.g. N2,T1).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Write rows and time series as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Write the placement time series as CSV to this file.
        #[arg(long)]
        csv: Option<PathBuf>,
        /// Plot the hot part on the fast nodes and the chase latency over time, per run, to
        /// this file (SVG or PNG by its extension; repeatable).
        #[arg(long)]
        plot: Vec<PathBuf>,
        /// The guest's transparent huge pages: never, always, or both (each experiment runs
        /// once per mode, rows marked in the THP column). Not for `chaos` (always).
        #[arg(long, value_enum, default_value = "both")]
        thp: lab_cmd::ThpChoice,
        /// The guest kernel: 6.12 (Debian bookworm-backports), newest (the newest in Debian's
        /// archive), or both (each experiment runs on each; results name the kernel).
        #[arg(long, value_enum, default_value = "newest")]
        kernel: lab_cmd::KernelArg,
        /// `chaos` only: seconds the chaos actors run (default 300; 60 with --quick).
        /// `scale`: seconds each mechanism runs (default 60; 30 with --quick).
        #[arg(long, value_parser = clap::value_parser!(u32).range(10..=86_400))]
        duration: Option<u32>,
        /// `scale` only: the process counts (comma-separated; default 1,10,100,500; 1,10
        /// with --quick).
        #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=2000))]
        procs: Vec<u32>,
        /// The source tree to build the guest binaries from.
        #[arg(long, default_value_os_t = lab_cmd::default_workspace())]
        workspace: PathBuf,
    },
    /// Print the tiers the engine derives for a two-node DRAM + CXL machine, and its defaults.
    Info {
        /// Fast (DRAM) node size, GiB.
        #[arg(long, default_value_t = 64)]
        fast_gib: u64,
        /// Slow (CXL) node size, GiB.
        #[arg(long, default_value_t = 256)]
        slow_gib: u64,
    },
    /// Print a shell completion script (e.g. `tierd completions bash > /etc/bash_completion.d/tierd`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page tierd(1) as roff, or write one page per subcommand into a directory.
    Man {
        /// Write tierd.1 and tierd-SUBCOMMAND.1 into this directory instead.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// `tierd config`.
#[derive(Debug, Subcommand)]
enum ConfigCmd {
    /// Print the effective configuration as TOML: every key with its default filled in, its
    /// unit, and whether a reload (SIGHUP) applies it. Without FILE: the built-in defaults
    /// (whose empty [scope] a file must fill in; the daemon reads no file unless given one).
    // The comment is clap's --help text, where [scope] names the TOML table; it is not a
    // rustdoc link.
    #[allow(rustdoc::broken_intra_doc_links)]
    Show {
        /// The configuration file (e.g. /etc/tierd/tierd.toml).
        file: Option<PathBuf>,
    },
    /// Check a configuration file as `tierd run` would, without starting: prints
    /// `FILE: ok`, or the daemon's one-line error and exits 78 (EX_CONFIG).
    Check {
        /// The configuration file.
        file: PathBuf,
    },
}

/// Writes an output file (`--json`, `--csv`, ...) atomically, or `text` to stdout for `-`.
/// Every file the command writes goes through here or through `tierd_report`'s writers,
/// which share [`tierd_report::write_atomic`]: a failed write leaves the old file as it was.
///
/// # Errors
/// One line naming the path: a full disk, an unwritable directory.
pub(crate) fn write_out(path: &Path, text: &str) -> Result<()> {
    if path.as_os_str() == "-" {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .context("writing to stdout")
    } else {
        Ok(tierd_report::write_atomic(path, text.as_bytes())?)
    }
}

/// Whether a subcommand's stdout is only its output, so that SIGPIPE may end it (see
/// [`tierd_linux::sys::default_sigpipe`]). Not the daemon, whose stdout is a log that may go
/// away without it stopping, and not the lab, whose guests must be shut down by their
/// destructors rather than left behind by a killed parent.
fn output_only(cmd: &Command) -> bool {
    !matches!(
        cmd,
        Command::Run { .. } | Command::Record { .. } | Command::Lab { .. }
    )
}

fn run(sc: &Scenario, only: &[String], args: &RunArgs) -> Result<()> {
    args.validate()?;
    report_cmd::check_plot_paths(&args.plot)?;
    let mut sc = sc.scaled(args.scale);
    if let Some(thp) = args.thp {
        sc = sc.with_thp(match thp {
            ThpArg::Always => tierd_sim::scenario::Thp::ALWAYS,
            ThpArg::Never => tierd_sim::scenario::Thp::NEVER,
        });
    }
    if let Some(grain) = args.grain {
        anyhow::ensure!(
            (1..=tierd_sim::scenario::MAX_GRAIN).contains(&grain) && grain.is_power_of_two(),
            "--grain must be a power of two from 1 to {}, got {grain}",
            tierd_sim::scenario::MAX_GRAIN
        );
        sc = sc.with_grain(grain);
    }
    if let Some(seed) = args.seed {
        sc.seed = seed;
    }
    let show = !args.no_progress && std::io::stderr().is_terminal();
    let multi = MultiProgress::new();
    let style = ProgressStyle::with_template("{prefix:>6} [{bar:40}] {percent:>3}%")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    let bars: std::sync::Mutex<Vec<ProgressBar>> = std::sync::Mutex::new(Vec::new());
    let jobs = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    // By default, as many configurations at once as fit in the memory available now, each
    // by its estimate (`tierd_sim::sim::config_bytes`): one per CPU overran 16 GB with D at
    // full scale. `--jobs` is taken as asked, with a warning when it may not fit. Without a
    // readable /proc/meminfo, no budget and no warning.
    let available = tierd_linux::read::meminfo::read_meminfo(std::path::Path::new("/proc"))
        .ok()
        .and_then(|m| m.mem_available());
    let explicit = args.jobs.is_some();
    let on_plan = |plan: &tierd_sim::sim::JobPlan| {
        let Some(a) = available else { return };
        if plan.limited() {
            eprintln!(
                "tierd: running {} at once, not {}: each may hold up to {} beside the simulated \
                 machine's {}, and {a} is available (--jobs N to choose)",
                if plan.jobs == 1 {
                    "one configuration".to_string()
                } else {
                    format!("{} configurations", plan.jobs)
                },
                plan.asked,
                plan.largest,
                plan.machine
            );
        } else if explicit && plan.need > a {
            eprintln!(
                "tierd: warning: --jobs {} may hold up to {} at once and {a} is available; \
                 fewer jobs use less memory",
                plan.jobs, plan.need
            );
        }
    };
    let progress = |i: usize, id: &str, f: f64| {
        if !show {
            return;
        }
        let Ok(mut bars) = bars.lock() else {
            return;
        };
        while bars.len() <= i {
            let b = multi.add(ProgressBar::new(1000));
            b.set_style(style.clone());
            bars.push(b);
        }
        bars[i].set_prefix(id.to_string());
        // f is a fraction in [0, 1]: the product fits u64 exactly.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        bars[i].set_position((f.clamp(0.0, 1.0) * 1000.0) as u64);
    };
    let budget = if explicit { None } else { available };
    let (result, _): (CompareResult, _) = tierd_sim::sim::compare_jobs_within(
        &sc, args.scale, only, jobs, budget, &on_plan, &progress,
    )?;
    for b in bars.lock().iter().flat_map(|b| b.iter()) {
        b.finish_and_clear();
    }
    let to_stdout = |p: &Option<PathBuf>| p.as_ref().is_some_and(|p| p.as_os_str() == "-");
    if !to_stdout(&args.json) && !to_stdout(&args.csv) {
        print!("{}", tierd_sim::report::table(&result));
    }
    if let Some(p) = &args.json {
        write_out(p, &(serde_json::to_string_pretty(&result)? + "\n"))?;
    }
    if let Some(p) = &args.csv {
        write_out(p, &tierd_sim::report::csv(&result))?;
    }
    report_cmd::write_compare(&result, &sc, &args.plot, args.report.as_deref())?;
    Ok(())
}

fn main() -> std::process::ExitCode {
    match real_main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line: the context chain joined, no backtrace, each cause once.
            eprintln!("tierd: {}", tierd_daemon::error::chain(e.as_ref()));
            // 78 for a bad configuration, 69 when nothing can run here, else 1
            // (docs/daemon.md, "Exit codes").
            std::process::ExitCode::from(daemon_cmd::exit_code(&e))
        }
    }
}

fn real_main() -> Result<()> {
    let cli = Cli::parse();
    if output_only(&cli.command) {
        tierd_linux::sys::default_sigpipe().context("restoring SIGPIPE's default action")?;
    }
    match cli.command {
        Command::Compare {
            scenario,
            only,
            run: args,
        } => {
            let sc = Scenario::find(&scenario)?;
            // An id the scenario lacks is refused: a typo would run nothing and print an
            // empty table.
            for id in &only {
                sc.config_by_id(id)?;
            }
            run(&sc, &only, &args)?;
        }
        Command::Sim {
            file,
            config,
            run: args,
        } => {
            let sc = Scenario::load(&file)?;
            if let Some(id) = &config {
                sc.config_by_id(id)?;
            }
            let only: Vec<String> = config.into_iter().collect();
            run(&sc, &only, &args)?;
        }
        Command::Run {
            config,
            dry_run,
            duration,
            metrics,
            record,
        } => daemon_cmd::run_daemon(&config, dry_run, duration, metrics, record.option())?,
        Command::Record {
            dir,
            config,
            dry_run,
            duration,
            metrics,
            synthetic,
            record_max_mib,
            record_files,
        } => {
            let args = trace_cmd::RecordArgs {
                record: Some(dir.clone()),
                record_max_mib,
                record_files,
            };
            match (synthetic, config) {
                (Some(secs), _) => trace_cmd::record_synthetic(&dir, secs, &args)?,
                (None, Some(config)) => {
                    daemon_cmd::run_daemon(&config, dry_run, duration, metrics, args.option())?;
                }
                (None, None) => {
                    anyhow::bail!("tierd record needs --config FILE or --synthetic SECS")
                }
            }
        }
        Command::Replay {
            trace,
            config,
            every,
            json,
            plot,
        } => trace_cmd::replay(
            &trace,
            config.as_deref(),
            every,
            json.as_deref(),
            plot.as_deref(),
        )?,
        Command::Report {
            trace,
            heatmap,
            top,
            windows,
            json,
        } => trace_cmd::report(
            &trace,
            &heatmap,
            usize::try_from(top).unwrap_or(4),
            usize::try_from(windows).unwrap_or(120),
            json.as_deref(),
        )?,
        Command::Status { addr, json } => daemon_cmd::status(addr, json)?,
        Command::Config(ConfigCmd::Show { file }) => {
            let text = daemon_cmd::config_show(file.as_deref())?;
            write_out(Path::new("-"), &text)?;
        }
        Command::Config(ConfigCmd::Check { file }) => {
            tierd_daemon::config::DaemonConfig::load(&file)?;
            println!("{}: ok", file.display());
        }
        Command::Top(args) => top_cmd::top(&args)?,
        Command::Lab {
            experiments,
            duration,
            json,
            quick,
            workspace,
            ..
        } if experiments.iter().any(|e| e == "chaos") => {
            lab_cmd::lab_chaos(&experiments, duration, quick, json.as_deref(), &workspace)?;
        }
        Command::Lab {
            experiments,
            duration,
            json,
            quick,
            workspace,
            kernel,
            procs,
            ..
        } if experiments.iter().any(|e| e == "scale") => {
            lab_cmd::lab_scale(
                &experiments,
                quick,
                &procs,
                duration,
                kernel.choices(),
                json.as_deref(),
                &workspace,
            )?;
        }
        Command::Lab {
            experiments,
            quick,
            repeat,
            only,
            json,
            csv,
            plot,
            workspace,
            thp,
            kernel,
            duration: _,
            procs: _,
        } => lab_cmd::lab(
            &experiments,
            quick,
            kernel.choices(),
            thp.modes(),
            repeat,
            &only,
            json.as_deref(),
            csv.as_deref(),
            &plot,
            &workspace,
        )?,
        Command::Completions { shell } => gen_cmd::completions(shell, &mut std::io::stdout())?,
        Command::Man { out } => gen_cmd::man(out.as_deref())?,
        Command::Scenarios => {
            for (name, text) in SHIPPED {
                let sc = Scenario::parse(text, std::path::Path::new(name))?;
                println!("{name:<26} {}", sc.description);
            }
        }
        Command::Info { fast_gib, slow_gib } => {
            let topo = dram_cxl(Bytes::gib(fast_gib), Bytes::gib(slow_gib))
                .context("building a DRAM + CXL topology")?;
            for t in topo.tiers() {
                println!(
                    "memory_tier{:<3} nodes {:<6} {}",
                    t.id,
                    t.nodes.to_string(),
                    if t.toptier { "top tier" } else { "lower tier" }
                );
            }
            let engine =
                Engine::new(EngineConfig::default(), topo).context("starting the engine")?;
            println!("promotion target: {}", engine.target());
            println!("{}", serde_json::to_string_pretty(engine.config())?);
        }
    }
    Ok(())
}
