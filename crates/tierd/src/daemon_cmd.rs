//! `tierd run` and `tierd status`: glue between the command line and `tierd_daemon::daemon`.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tierd_daemon::config::{ConfigFileError, DaemonConfig};
use tierd_daemon::daemon::{
    describe_folio_method, probe_folio_method, run, Preflight, Reload, RunOptions, EXIT_CONFIG,
    EXIT_UNAVAILABLE,
};
use tierd_daemon::feeds::start_feeds;
use tierd_daemon::metrics::{Heartbeat, MetricsServer, ServerOptions, SharedSnapshot, Snapshot};
use tierd_linux::status::{fetch_status, printable};

/// The exit status for an error of `tierd run` (docs/daemon.md, "Exit codes"): a bad
/// configuration is [`EXIT_CONFIG`] (systemd does not restart on it), a machine where nothing
/// can run is [`EXIT_UNAVAILABLE`], anything else 1.
#[must_use]
pub fn exit_code(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if let Some(d) = cause.downcast_ref::<tierd_daemon::daemon::DaemonError>() {
            return d.exit_code();
        }
        if cause
            .downcast_ref::<tierd_daemon::config::ConfigFileError>()
            .is_some()
        {
            return EXIT_CONFIG;
        }
        if cause
            .downcast_ref::<tierd_daemon::metrics::MetricsError>()
            .is_some()
        {
            // The port is taken (often by a tierd still exiting): retried by systemd.
            return EXIT_UNAVAILABLE;
        }
    }
    1
}

/// Structured logs with levels on stderr (the journal under systemd): `TIERD_LOG` filters
/// them as `RUST_LOG` does (`tierd_daemon=debug`, `warn`), default `info`. Repeated faults
/// are rate-limited where they are counted (`tierd_daemon::daemon::Faults`).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TIERD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Already set (a test calling run_daemon twice): keep the first.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// `tierd config show [FILE]`: the effective configuration of FILE (checked as `tierd run`
/// checks it), or the built-in defaults.
///
/// # Errors
/// The file's one-line error (exit 78).
pub fn config_show(file: Option<&Path>) -> Result<String> {
    Ok(match file {
        Some(f) => {
            tierd_daemon::effective::render(&DaemonConfig::load(f)?, &f.display().to_string())
        }
        None => tierd_daemon::effective::render(
            &DaemonConfig::default(),
            "the built-in defaults ([scope] is empty: a file must set pids, cgroups or all)",
        ),
    })
}

/// The file, and the `--metrics` override applied and checked as at start.
fn load_config(
    config: &Path,
    metrics: Option<SocketAddr>,
) -> Result<DaemonConfig, ConfigFileError> {
    let mut cfg = DaemonConfig::load(config)?;
    if let Some(addr) = metrics {
        cfg.daemon.metrics_listen = addr;
        // The file's consent rule applies to the flag too (only the file can consent, with
        // allow_public_metrics); refused as a configuration error (exit 78).
        cfg.daemon
            .check_metrics_listen()
            .map_err(|reason| ConfigFileError::Invalid {
                path: config.to_path_buf(),
                line: 0,
                key: "--metrics".into(),
                reason,
            })?;
    }
    Ok(cfg)
}

/// `tierd run`.
pub fn run_daemon(
    config: &Path,
    dry_run: bool,
    duration: Option<f64>,
    metrics: Option<SocketAddr>,
    record: Option<(std::path::PathBuf, tierd_trace::Limits)>,
) -> Result<()> {
    init_logging();
    let cfg = load_config(config, metrics)?;
    let duration = match duration {
        Some(d) if d.is_finite() && d > 0.0 => Some(Duration::from_secs_f64(d)),
        Some(d) => anyhow::bail!("--duration must be a positive number of seconds, got {d}"),
        None => None,
    };
    // What starting costs, by step (this thread's CPU clock): printed once the loop runs.
    let cpu = tierd_linux::sys::thread_cpu_time;
    let t_start = cpu();
    let pre = Preflight::check(&cfg).context("checking the machine")?;
    let t_preflight = cpu();
    eprint!("{}", pre.describe());
    for w in &pre.warnings {
        eprintln!("tierd: warning: {w}");
    }
    let max_cpu = pre
        .system
        .nodes
        .iter()
        .flat_map(|n| n.cpus.iter().copied())
        .max()
        .unwrap_or(0);
    let mut cpu_node = vec![None; usize::try_from(max_cpu).unwrap_or(0) + 1];
    for n in &pre.system.nodes {
        for &c in &n.cpus {
            if let Some(slot) = usize::try_from(c).ok().and_then(|c| cpu_node.get_mut(c)) {
                *slot = Some(n.id);
            }
        }
    }
    let (feeds, statuses) = start_feeds(&cfg, &cpu_node).context("starting hotness sources")?;
    let t_sources = cpu();
    for s in &statuses {
        eprintln!("source {:<16} {}: {}", s.name, s.state(), s.reason);
    }
    // How observed pages are mapped to their folios (docs/daemon.md, "Huge pages").
    let method = probe_folio_method(&cfg.system.proc_root);
    let t_folios = cpu();
    eprintln!(
        "folios {:<16} {}; hugetlb pages: {}",
        method.name(),
        describe_folio_method(method),
        tierd_daemon::config::hugetlb_name(cfg.daemon.hugetlb)
    );
    let shared: SharedSnapshot = tierd_daemon::metrics::shared_snapshot(Snapshot::default());
    // Made before the first pass: the loop has the whole liveness timeout for it.
    let heartbeat = Heartbeat::new();
    let server = MetricsServer::start_with(
        cfg.daemon.metrics_listen,
        Arc::clone(&shared),
        ServerOptions {
            heartbeat: Some(heartbeat.clone()),
            liveness_timeout: Duration::from_secs(cfg.daemon.liveness_timeout_s),
            max_processes: usize::try_from(cfg.daemon.metrics_max_processes).unwrap_or(usize::MAX),
            ..ServerOptions::default()
        },
    )
    .context("starting the metrics endpoint")?;
    let t_server = cpu();
    eprintln!(
        "start CPU s: preflight {:.3}, sources {:.3}, folios {:.3}, metrics endpoint {:.3}",
        (t_preflight - t_start).as_secs_f64(),
        (t_sources - t_preflight).as_secs_f64(),
        (t_folios - t_sources).as_secs_f64(),
        (t_server - t_folios).as_secs_f64()
    );
    eprintln!(
        "metrics on http://{0}/metrics, status on http://{0}/status, liveness on \
         http://{0}/healthz{1}",
        server.addr(),
        if dry_run {
            " (dry run: nothing is moved)"
        } else {
            ""
        }
    );
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .with_context(|| format!("installing the handler for signal {sig}"))?;
    }
    // SIGHUP: read the file again between passes (docs/daemon.md, "Reload").
    let requested = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&requested))
        .context("installing the handler for SIGHUP")?;
    let path = config.to_path_buf();
    let reload = Reload {
        requested,
        load: Arc::new(move || load_config(&path, metrics)),
    };
    let opts = RunOptions {
        reload: Some(reload),
        dry_run,
        duration,
        snapshot: Some(shared),
        heartbeat: Some(heartbeat),
        record,
    };
    // Not println!: SIGPIPE stays ignored for the daemon (main.rs output_only), and a log
    // reader that went away must not end the tiering loop with a panic.
    let mut log = |line: &str| {
        use std::io::Write;
        let _ = writeln!(std::io::stdout().lock(), "{line}");
    };
    let summary = run(&cfg, &pre, feeds, &statuses, &opts, &stop, &mut log)?;
    drop(server);
    eprintln!(
        "tierd: stopped after {} passes: {} observations, {} pages moved, {} failed{}, {} \
         processes gone; CPU {:.2} s",
        summary.passes,
        summary.observations,
        summary.moved_pages,
        summary.failed_pages,
        if dry_run {
            format!(", {} planned", summary.planned_pages)
        } else {
            String::new()
        },
        summary.gone,
        summary.snapshot.daemon_cpu_s
    );
    Ok(())
}

fn mib(pages: u64) -> f64 {
    // Display only.
    #[allow(clippy::cast_precision_loss)]
    let v = (pages * 4096) as f64 / f64::from(1 << 20);
    v
}

/// Renders a status as the text `tierd status` prints.
#[must_use]
pub fn render_status(s: &Snapshot) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "tierd {} up {:.0} s{}, CPU {:.2} s",
        s.version,
        s.uptime_s,
        if s.dry_run { " (dry run)" } else { "" },
        s.daemon_cpu_s
    );
    if !s.loop_cpu_s.is_empty() {
        let parts: Vec<String> = s
            .loop_cpu_s
            .iter()
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect();
        let _ = writeln!(o, "loop CPU s by phase: {}", parts.join(", "));
    }
    let _ = writeln!(o, "\nnode  tier  cpus  total MiB   free MiB");
    for n in &s.nodes {
        let _ = writeln!(
            o,
            "{:>4}  {:>4}  {:>4}  {:>9}  {:>9}",
            n.id,
            n.tier,
            if n.has_cpus { "yes" } else { "no" },
            n.total_bytes >> 20,
            n.free_bytes >> 20
        );
    }
    let nodes: Vec<u32> = s.nodes.iter().map(|n| n.id).collect();
    let _ = write!(o, "\n{:>8}  {:<16} {:<20}", "pid", "comm", "cgroup");
    // Per node: all of the process's memory there, then the part the sources reported
    // accessed in the last refresh period ("hot"; the rest is cold).
    for n in &nodes {
        let _ = write!(
            o,
            " {:>10} {:>10}",
            format!("N{n} MiB"),
            format!("N{n} hot")
        );
    }
    let _ = writeln!(o);
    for p in &s.processes {
        // Names are chosen by whoever runs the process: no control character reaches the
        // terminal.
        let _ = write!(
            o,
            "{:>8}  {:<16} {:<20}",
            p.pid,
            printable(&p.comm),
            printable(&p.cgroup)
        );
        for n in &nodes {
            let _ = write!(
                o,
                " {:>10.1} {:>10.1}",
                mib(p.pages_per_node.get(n).copied().unwrap_or(0)),
                mib(p.hot_pages_per_node.get(n).copied().unwrap_or(0))
            );
        }
        let _ = writeln!(o);
    }
    let _ = writeln!(o, "\nsources:");
    for src in &s.sources {
        let _ = writeln!(o, "  {:<16} {}: {}", src.name, src.state(), src.reason);
    }
    if !s.folios.method.is_empty() {
        let f = &s.folios;
        let _ = writeln!(
            o,
            "\nfolios: {} ({} huge folios observed; pages not observed: {} unknown, {} \
             hugetlb left; not moved: {} hugetlb without a free huge page)",
            f.method,
            f.huge_folios_observed,
            f.unknown_pages,
            f.hugetlb_left_pages,
            f.hugetlb_no_free_pages
        );
    }
    let _ = writeln!(o, "\nengine counters (non-zero):");
    for (k, v) in s.engine.iter().filter(|(_, v)| **v > 0) {
        let _ = writeln!(o, "  {k:<32} {v}");
    }
    let _ = writeln!(
        o,
        "\nmover: {} move_pages calls, {} pages moved in {:.2} s",
        s.mover.calls, s.mover.pages_moved, s.mover.seconds
    );
    for (k, v) in &s.mover.pages_failed {
        let _ = writeln!(o, "  failed {k:<12} {v}");
    }
    // What the daemon survived (docs/daemon.md, "Failure model"); nothing printed when none.
    if !s.faults.is_empty() {
        let _ = writeln!(o, "\nfaults survived (by reason):");
        for (k, v) in &s.faults {
            let _ = writeln!(o, "  {k:<32} {v}");
        }
    }
    let _ = writeln!(o, "\nkernel /proc/vmstat since start (non-zero):");
    for (k, v) in s.kernel_vmstat_delta.iter().filter(|(_, v)| **v > 0) {
        let _ = writeln!(o, "  {k:<32} {v}");
    }
    o
}

/// `tierd status`.
pub fn status(addr: SocketAddr, json: bool) -> Result<()> {
    let s = fetch_status(addr).context("is `tierd run` running? (see --addr)")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!("{}", render_status(&s));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierd_daemon::metrics::{NodeSnapshot, ProcessSnapshot, SourceSnapshot};

    #[test]
    fn status_escapes_control_characters_in_names() {
        let s = Snapshot {
            processes: vec![ProcessSnapshot {
                pid: 9,
                comm: "bell\u{7}\u{1b}[2J".into(),
                cgroup: "/a\u{9b}b".into(),
                ..ProcessSnapshot::default()
            }],
            ..Snapshot::default()
        };
        let text = render_status(&s);
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(text.contains("bell\\x07\\x1b[2J"), "{text}");
        assert!(text.contains("/a\\u{9b}b"), "{text}");
    }

    #[test]
    fn status_shows_placement_per_process_sources_and_nonzero_counters() {
        let mut s = Snapshot {
            version: "0.1.0".into(),
            uptime_s: 12.0,
            nodes: vec![
                NodeSnapshot {
                    id: 0,
                    tier: 0,
                    has_cpus: true,
                    total_bytes: 2 << 30,
                    free_bytes: 1 << 30,
                },
                NodeSnapshot {
                    id: 1,
                    tier: 1,
                    has_cpus: false,
                    total_bytes: 2 << 30,
                    free_bytes: 1 << 29,
                },
            ],
            processes: vec![ProcessSnapshot {
                pid: 42,
                comm: "chase".into(),
                cgroup: "/work".into(),
                pages_per_node: [(0, 256), (1, 512)].into_iter().collect(),
                hot_pages_per_node: [(1, 128)].into_iter().collect(),
            }],
            sources: vec![SourceSnapshot {
                name: "damon".into(),
                available: true,
                reason: "vaddr".into(),
                intervals: None,
            }],
            ..Snapshot::default()
        };
        s.engine.insert("pgpromote_success".into(), 256);
        s.engine.insert("pgdemote_success".into(), 0);
        let text = render_status(&s);
        assert!(text.contains("node  tier  cpus"), "{text}");
        assert!(
            text.contains("   1     1    no       2048        512"),
            "{text}"
        );
        // 256 pages = 1 MiB on node 0 (none hot), 512 = 2 MiB on node 1 of which 128 pages
        // (0.5 MiB) hot.
        assert!(text.contains("    N1 MiB     N1 hot"), "{text}");
        assert!(text.contains("      42  chase"), "{text}");
        assert!(
            text.contains("        1.0        0.0        2.0        0.5"),
            "{text}"
        );
        assert!(text.contains("damon            running: vaddr"), "{text}");
        assert!(text.contains("pgpromote_success"), "{text}");
        assert!(
            !text.contains("pgdemote_success"),
            "zero counters are left out: {text}"
        );
        assert!(!text.contains("faults survived"), "none: no section");
        assert!(!text.contains("folios:"), "an older daemon: no folio line");
        s.folios = tierd_linux::status::FolioSnapshot {
            method: "smaps".into(),
            huge_folios_observed: 2,
            unknown_pages: 7,
            hugetlb_left_pages: 512,
            hugetlb_no_free_pages: 0,
        };
        let text = render_status(&s);
        assert!(
            text.contains(
                "folios: smaps (2 huge folios observed; pages not observed: 7 unknown, 512 \
                 hugetlb left; not moved: 0 hugetlb without a free huge page)"
            ),
            "{text}"
        );
        s.faults.insert("damon_targets_einval".into(), 3);
        let text = render_status(&s);
        assert!(text.contains("faults survived (by reason):"), "{text}");
        assert!(text.contains("  damon_targets_einval"), "{text}");
    }

    #[test]
    fn errors_map_to_the_documented_exit_codes() {
        use tierd_daemon::daemon::DaemonError;
        let cfg = tierd_daemon::config::DaemonConfig::parse(
            "[scope]\npids = [1]\n[daemon]\nrefresh_ms = 0\n",
            Path::new("bad.toml"),
        )
        .unwrap_err();
        assert_eq!(exit_code(&anyhow::Error::new(cfg)), 78);
        let e = anyhow::Error::new(DaemonError::NoSource("none".into()))
            .context("starting hotness sources");
        assert_eq!(exit_code(&e), 69);
        assert_eq!(exit_code(&anyhow::Error::msg("a bug")), 1);
    }
}
