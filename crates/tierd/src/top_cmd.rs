//! `tierd top`: the terminal view of a running daemon or of a simulated run (the
//! `tierd-top` crate). On a terminal it is interactive; when stdout is not a terminal, or
//! with `--once`, it prints one plain snapshot and exits.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use tierd_top::render::plain;
use tierd_top::source::{daemon_view, run_tui, sim_final, spawn_daemon, spawn_sim, SimSpec};

/// `tierd top`'s options.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// The daemon's metrics address.
    #[arg(long, default_value = "127.0.0.1:9464")]
    addr: SocketAddr,
    /// Seconds between refreshes (default: 1 for a daemon; 0.1 per simulated sample).
    #[arg(long)]
    interval: Option<f64>,
    /// Watch a simulated run of this scenario (a shipped name or a file) instead of a daemon.
    #[arg(long, value_name = "SCENARIO")]
    sim: Option<String>,
    /// With --sim: the configuration id (default: the scenario's first tierd configuration).
    #[arg(long, requires = "sim")]
    config: Option<String>,
    /// With --sim: shrink the scenario by this factor (0 < scale <= 1).
    #[arg(long, default_value_t = 1.0, requires = "sim")]
    scale: f64,
    /// Print one plain snapshot and exit (the default when stdout is not a terminal). With
    /// --sim: the end of the run.
    #[arg(long)]
    once: bool,
}

/// Runs `tierd top`.
pub fn top(args: &TopArgs) -> Result<()> {
    let default_s = if args.sim.is_some() { 0.1 } else { 1.0 };
    let interval_s = args.interval.unwrap_or(default_s);
    anyhow::ensure!(
        interval_s.is_finite() && interval_s > 0.0 && interval_s <= 3600.0,
        "--interval must be in (0, 3600] seconds, got {interval_s}"
    );
    let interval = Duration::from_secs_f64(interval_s);
    let interactive = !args.once && std::io::stdout().is_terminal();
    match &args.sim {
        Some(scenario) => {
            let spec = SimSpec {
                scenario: scenario.clone(),
                config: args.config.clone(),
                scale: args.scale,
            };
            if interactive {
                run_tui(&spawn_sim(&spec, interval)?)?;
            } else {
                let (v, r) = sim_final(&spec)?;
                print!("{}", plain(&v, r.as_ref()));
            }
        }
        None => {
            if interactive {
                run_tui(&spawn_daemon(args.addr, interval))?;
            } else {
                print!("{}", plain(&daemon_view(args.addr)?, None));
            }
        }
    }
    Ok(())
}
