//! What the daemon exposes: a [`Snapshot`] of its state, served as Prometheus text at
//! `/metrics`, as JSON at `/status` (which `tierd status` reads), and its liveness at
//! `/healthz`.
//!
//! The snapshot is plain data so that the daemon loop owns all state and the HTTP thread only
//! clones the latest snapshot under the mutex (the loop only replaces it there); rendering
//! happens outside the lock, so a scrape never blocks a pass. The Prometheus text is produced
//! by `prometheus-client` from a registry built per scrape: scrapes are seconds apart and the
//! registry is small, and building it from the snapshot keeps one source of truth.
//!
//! The server itself ([`crate::serve`]) bounds what any client can cost the daemon: timeouts,
//! a header limit and a connection cap with eviction. Per-process series are bounded too: the
//! [`ServerOptions::max_processes`] largest processes (by pages) get their own series, the
//! rest are summed into one `pid="other"` series per node.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use tierd_engine::stats::{EngineStats, NodeStats, SourceStats, StatDesc, StatKind, StatUnit};

pub use tierd_linux::status::{
    IntervalsSnapshot, MoverSnapshot, NodeSnapshot, ProcessSnapshot, Snapshot, SourceSnapshot,
};

use crate::serve::{HttpCounters, HttpStats, Limits, Reply};

/// tierd's version, as `tierd_build_info` and `/status` carry it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Per-process series exported by default (`daemon.metrics_max_processes`).
pub const DEFAULT_MAX_PROCESSES: usize = 20;

/// The unit prometheus-client appends to a statistic's name: base units only (a statistic
/// kept in milliseconds is exported in seconds).
fn unit(u: StatUnit) -> Option<Unit> {
    match u {
        StatUnit::Bytes => Some(Unit::Bytes),
        StatUnit::Milliseconds => Some(Unit::Seconds),
        StatUnit::Pages | StatUnit::Events => None,
    }
}

type Labels = Vec<(String, String)>;

/// A metric of one kind with the given series: a plain metric when it is one unlabelled
/// value (a `Family` would print `name{}`), a family otherwise.
fn register_series<M, V: Copy>(
    reg: &mut Registry,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    series: &[(Labels, V)],
    set: impl Fn(&M, V),
) where
    M: prometheus_client::metrics::TypedMetric
        + prometheus_client::encoding::EncodeMetric
        + Default
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    match series {
        [(labels, v)] if labels.is_empty() => {
            let m = M::default();
            set(&m, *v);
            match unit {
                Some(u) => reg.register_with_unit(name, help, u, m),
                None => reg.register(name, help, m),
            }
        }
        _ => {
            let fam = Family::<Labels, M>::default();
            for (l, v) in series {
                set(&fam.get_or_create(l), *v);
            }
            match unit {
                Some(u) => reg.register_with_unit(name, help, u, fam),
                None => reg.register(name, help, fam),
            }
        }
    }
}

fn set_counter(c: &Counter, v: u64) {
    c.inc_by(v);
}

fn set_gauge(g: &Gauge, v: u64) {
    g.set(as_i64(v));
}

type FloatCounter = Counter<f64, AtomicU64>;
type FloatGauge = Gauge<f64, AtomicU64>;

fn set_float_counter(c: &FloatCounter, v: f64) {
    c.inc_by(v);
}

fn set_float_gauge(g: &FloatGauge, v: f64) {
    g.set(v);
}

fn ms_to_s(ms: u64) -> f64 {
    // Milliseconds of thresholds and CPU time stay far below 2^53: exact as f64.
    #[allow(clippy::cast_precision_loss)]
    let s = ms as f64 / 1000.0;
    s
}

/// Registers one engine statistic (labelled series when there are several).
fn register_stat(reg: &mut Registry, prefix: &str, desc: &StatDesc, series: &[(Labels, u64)]) {
    // prometheus-client appends the unit to the name (`_bytes`, `_seconds`); a statistic
    // whose name already ends in its unit (`hotness_store_bytes`) would be exported doubled,
    // and one kept in milliseconds (`promote_threshold_ms`) is exported in seconds.
    let bare = match desc.unit {
        StatUnit::Bytes => desc.name.strip_suffix("_bytes").unwrap_or(desc.name),
        StatUnit::Milliseconds => desc.name.strip_suffix("_ms").unwrap_or(desc.name),
        StatUnit::Pages | StatUnit::Events => desc.name,
    };
    let name = format!("{prefix}{bare}");
    let base = desc.help.trim_end_matches('.');
    let help = match desc.unit {
        StatUnit::Pages => format!("{base} (base pages)"),
        StatUnit::Events | StatUnit::Bytes | StatUnit::Milliseconds => base.to_string(),
    };
    let u = unit(desc.unit);
    match (desc.kind, desc.unit) {
        (StatKind::Counter, StatUnit::Milliseconds) => {
            let s = seconds_series(series);
            register_series::<FloatCounter, f64>(reg, &name, &help, u, &s, set_float_counter);
        }
        (StatKind::Gauge, StatUnit::Milliseconds) => {
            let s = seconds_series(series);
            register_series::<FloatGauge, f64>(reg, &name, &help, u, &s, set_float_gauge);
        }
        (StatKind::Counter, _) => {
            register_series::<Counter, u64>(reg, &name, &help, u, series, set_counter);
        }
        (StatKind::Gauge, _) => {
            register_series::<Gauge, u64>(reg, &name, &help, u, series, set_gauge);
        }
    }
}

fn seconds_series(series: &[(Labels, u64)]) -> Vec<(Labels, f64)> {
    series
        .iter()
        .map(|(l, v)| (l.clone(), ms_to_s(*v)))
        .collect()
}

/// A gauge in seconds (`{name}_seconds`).
fn seconds_gauge(reg: &mut Registry, name: &str, help: &str, series: &[(Labels, f64)]) {
    register_series::<FloatGauge, f64>(
        reg,
        name,
        help,
        Some(Unit::Seconds),
        series,
        set_float_gauge,
    );
}

/// A counter in seconds (`{name}_seconds_total`).
fn seconds_counter(reg: &mut Registry, name: &str, help: &str, v: f64) {
    let v = if v.is_finite() && v > 0.0 { v } else { 0.0 };
    register_series::<FloatCounter, f64>(
        reg,
        name,
        help,
        Some(Unit::Seconds),
        &[(Vec::new(), v)],
        set_float_counter,
    );
}

fn gauge_family(reg: &mut Registry, name: &str, help: &str, series: &[(Labels, i64)]) {
    let fam = Family::<Labels, Gauge>::default();
    for (l, v) in series {
        fam.get_or_create(l).set(*v);
    }
    if let [(labels, v)] = series {
        if labels.is_empty() {
            let g = Gauge::<i64>::default();
            g.set(*v);
            reg.register(name, help, g);
            return;
        }
    }
    reg.register(name, help, fam);
}

fn counter_family(reg: &mut Registry, name: &str, help: &str, series: &[(Labels, u64)]) {
    register_series::<Counter, u64>(reg, name, help, None, series, set_counter);
}

/// Labels with their values escaped for the text exposition format: prometheus-client 0.23
/// writes label values as given, so a `comm` holding `"` (any process may name itself so)
/// would end the value early and make the whole scrape unparsable. The format's escapes are
/// `\\`, `\"` and `\n` (Prometheus exposition formats, "label_value can be any sequence of
/// UTF-8 characters, but the backslash, double-quote and line feed characters have to be
/// escaped").
fn l(pairs: &[(&str, String)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), escape_label_value(v)))
        .collect()
}

fn escape_label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn as_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// What `/metrics` adds to a snapshot: the series bound and the server's own state.
#[derive(Clone, Debug, PartialEq)]
pub struct Exposition {
    /// Processes with their own series; the rest are summed into `pid="other"`.
    pub max_processes: usize,
    /// The HTTP server's counters.
    pub http: HttpCounters,
    /// Time since the tiering loop last completed a pass (None: no heartbeat wired).
    pub since_pass: Option<Duration>,
}

impl Default for Exposition {
    fn default() -> Self {
        Exposition {
            max_processes: DEFAULT_MAX_PROCESSES,
            http: HttpCounters::default(),
            since_pass: None,
        }
    }
}

/// The processes with their own series (the `max` largest by pages, ties by pid) and the
/// per-node sums of the rest, pages then hot pages (None when nothing is left over).
type OtherProcesses = Option<(BTreeMap<u32, u64>, BTreeMap<u32, u64>)>;

fn top_processes(procs: &[ProcessSnapshot], max: usize) -> (Vec<&ProcessSnapshot>, OtherProcesses) {
    let mut ranked: Vec<&ProcessSnapshot> = procs.iter().collect();
    ranked.sort_by_key(|p| {
        (
            std::cmp::Reverse(p.pages_per_node.values().sum::<u64>()),
            p.pid,
        )
    });
    if ranked.len() <= max {
        return (ranked, None);
    }
    let rest = ranked.split_off(max);
    let mut pages = BTreeMap::new();
    let mut hot = BTreeMap::new();
    for p in rest {
        for (n, v) in &p.pages_per_node {
            *pages.entry(*n).or_insert(0u64) += v;
        }
        for (n, v) in &p.hot_pages_per_node {
            *hot.entry(*n).or_insert(0u64) += v;
        }
    }
    (ranked, Some((pages, hot)))
}

/// Renders the snapshot in the Prometheus text exposition format, with the default series
/// bound and no server state (zero HTTP counters).
#[must_use]
pub fn render_prometheus(s: &Snapshot) -> String {
    render_exposition(s, &Exposition::default())
}

/// Renders the snapshot and the server's state in the Prometheus text exposition format.
#[must_use]
pub fn render_exposition(s: &Snapshot, x: &Exposition) -> String {
    let mut reg = Registry::with_prefix("tierd");
    // Registration order is the exposition's order: these four keep the families in the
    // order they always had.
    register_daemon_state(&mut reg, s);
    register_engine_stats(&mut reg, s);
    register_placement(&mut reg, s, x);
    register_sources_and_costs(&mut reg, s, x);
    let mut out = String::new();
    // Writing into a String cannot fail; encode only returns fmt::Error from the writer.
    if encode(&mut out, &reg).is_err() {
        out.clear();
    }
    sort_family_series(&out)
}

/// The exposition with each family's series in sorted order. prometheus-client keeps a
/// family's series in a hash map with a random seed, so the same state used to read in a
/// different order from one render to the next; sorted, two scrapes of one state are the
/// same text, for `diff` and for tests. OpenMetrics leaves the order of a family's label sets
/// free, and nothing here is a histogram (whose buckets must stay in `le` order) or has
/// `_created` lines to keep beside their sample.
fn sort_family_series(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut block: Vec<&str> = Vec::new();
    let flush = |block: &mut Vec<&str>, out: &mut String| {
        block.sort_unstable();
        for l in block.drain(..) {
            out.push_str(l);
            out.push('\n');
        }
    };
    for line in text.lines() {
        if line.starts_with('#') {
            flush(&mut block, &mut out);
            out.push_str(line);
            out.push('\n');
        } else {
            block.push(line);
        }
    }
    flush(&mut block, &mut out);
    out
}

/// The daemon's own state: its build, the faults it survived, reloads, the placement
/// cache and the folio method.
fn register_daemon_state(reg: &mut Registry, s: &Snapshot) {
    gauge_family(
        reg,
        "build_info",
        "The version of the tierd that serves this; always 1",
        &[(l(&[("version", VERSION.to_string())]), 1)],
    );
    // The failure model's counters (docs/daemon.md): every fault survived, by reason.
    let faults: Vec<(Labels, u64)> = s
        .faults
        .iter()
        .map(|(r, v)| (l(&[("reason", r.clone())]), *v))
        .collect();
    counter_family(
        reg,
        "faults",
        "Faults the daemon survived (counted, skipped, retried), by reason",
        &faults,
    );
    // Every result, 0 included: an alert on a rate needs the series before the first reload.
    let reloads: Vec<(Labels, u64)> = crate::daemon::ReloadOutcome::ALL
        .iter()
        .map(|r| {
            (
                l(&[("result", r.label().to_string())]),
                s.config_reloads.get(r.label()).copied().unwrap_or(0),
            )
        })
        .collect();
    counter_family(
        reg,
        "config_reloads",
        "Configuration reloads (SIGHUP) by result: ok, refused (needs a restart), invalid",
        &reloads,
    );
    gauge_family(
        reg,
        "idle",
        "1 while the loop is idle (nothing to move for daemon.idle_after_ms: the sources \
         sample less often)",
        &[(Vec::new(), i64::from(s.idle))],
    );
    counter_family(
        reg,
        "idle_periods",
        "Times the loop went idle",
        &[(Vec::new(), s.idle_periods)],
    );
    // The placement cache (docs/daemon.md, "Cost").
    let pc = &s.placement;
    gauge_family(
        reg,
        "placement_cached_pages",
        "Base pages known to be on a fast node, not located again until their trust period ends",
        &[(
            Vec::new(),
            i64::try_from(pc.cached_pages).unwrap_or(i64::MAX),
        )],
    );
    counter_family(
        reg,
        "placement_pages",
        "Base pages of source reports the placement cache answered (skipped) or sent to be \
         located again (reverified)",
        &[
            (l(&[("kind", "skipped".to_string())]), pc.skipped_pages),
            (
                l(&[("kind", "reverified".to_string())]),
                pc.reverified_pages,
            ),
        ],
    );
    counter_family(
        reg,
        "placement_drops",
        "Times the placement cache was dropped: all of it (cleared: the kernel migrated pages \
         itself) or a process's part (forgotten: its mappings changed or it left)",
        &[
            (l(&[("kind", "cleared".to_string())]), pc.cleared),
            (l(&[("kind", "forgotten".to_string())]), pc.forgotten),
        ],
    );
    // Folios (docs/daemon.md, "Huge pages"): the method in force and what it could not tell.
    let f = &s.folios;
    if !f.method.is_empty() {
        gauge_family(
            reg,
            "folio_method",
            "How observed pages are mapped to their folio (THP, hugetlb): kpageflags (exact), \
             smaps (per mapping) or unavailable; always 1",
            &[(l(&[("method", f.method.clone())]), 1)],
        );
    }
    counter_family(
        reg,
        "huge_folios_observed",
        "Huge folios (THP or hugetlb, 2 MiB or 1 GiB) observed, once per pass each",
        &[(Vec::new(), f.huge_folios_observed)],
    );
    counter_family(
        reg,
        "folio_pages",
        "Base pages not observed or not moved for their folio: unknown (the folio could not be \
         told), hugetlb_left (daemon.hugetlb = leave), hugetlb_no_free (no free huge page on \
         the target node)",
        &[
            (l(&[("kind", "unknown".to_string())]), f.unknown_pages),
            (
                l(&[("kind", "hugetlb_left".to_string())]),
                f.hugetlb_left_pages,
            ),
            (
                l(&[("kind", "hugetlb_no_free".to_string())]),
                f.hugetlb_no_free_pages,
            ),
        ],
    );
}

/// The engine's counters: overall, per node and per source.
fn register_engine_stats(reg: &mut Registry, s: &Snapshot) {
    for d in EngineStats::FIELDS {
        let v = s.engine.get(d.name).copied().unwrap_or(0);
        register_stat(reg, "", d, &[(Vec::new(), v)]);
    }
    for d in NodeStats::FIELDS {
        let series: Vec<_> = s
            .engine_nodes
            .iter()
            .map(|(n, m)| {
                (
                    l(&[("node", n.to_string())]),
                    m.get(d.name).copied().unwrap_or(0),
                )
            })
            .collect();
        register_stat(reg, "node_", d, &series);
    }
    for d in SourceStats::FIELDS {
        let series: Vec<_> = s
            .engine_sources
            .iter()
            .map(|(k, m)| {
                (
                    l(&[("source", k.clone())]),
                    m.get(d.name).copied().unwrap_or(0),
                )
            })
            .collect();
        register_stat(reg, "source_", d, &series);
    }
}

/// The nodes and where the largest processes' pages are.
fn register_placement(reg: &mut Registry, s: &Snapshot, x: &Exposition) {
    let nodes = |f: &dyn Fn(&NodeSnapshot) -> i64| -> Vec<(Labels, i64)> {
        s.nodes
            .iter()
            .map(|n| (l(&[("node", n.id.to_string())]), f(n)))
            .collect()
    };
    gauge_family(
        reg,
        "node_total_bytes",
        "Memory of the node",
        &nodes(&|n| as_i64(n.total_bytes)),
    );
    gauge_family(
        reg,
        "node_free_bytes",
        "Free memory of the node",
        &nodes(&|n| as_i64(n.free_bytes)),
    );
    gauge_family(
        reg,
        "node_tier",
        "Memory tier of the node, 0 = fastest",
        &nodes(&|n| i64::from(n.tier)),
    );
    // One series per (process, node) of a per-node page map of the process, for the largest
    // processes only: a host's process count must not become the scrape's series count.
    let (top, other) = top_processes(&s.processes, x.max_processes);
    let per_process_node = |pages: &dyn Fn(&ProcessSnapshot) -> &BTreeMap<u32, u64>,
                            other: Option<&BTreeMap<u32, u64>>| {
        let mut out: Vec<(Labels, i64)> = top
            .iter()
            .flat_map(|p| {
                pages(p).iter().map(|(n, v)| {
                    (
                        l(&[
                            ("pid", p.pid.to_string()),
                            ("comm", p.comm.clone()),
                            ("node", n.to_string()),
                        ]),
                        as_i64(*v),
                    )
                })
            })
            .collect();
        for (n, v) in other.into_iter().flatten() {
            out.push((
                l(&[
                    ("pid", "other".to_string()),
                    ("comm", "other".to_string()),
                    ("node", n.to_string()),
                ]),
                as_i64(*v),
            ));
        }
        out
    };
    gauge_family(
        reg,
        "process_pages",
        "Base pages of a process in scope on each node (numa_maps); the processes past the \
         largest daemon.metrics_max_processes are summed into pid=\"other\"",
        &per_process_node(&|p| &p.pages_per_node, other.as_ref().map(|o| &o.0)),
    );
    gauge_family(
        reg,
        "process_hot_pages",
        "Base pages of a process that the sources reported accessed in the last refresh period, \
         per node (same processes as tierd_process_pages)",
        &per_process_node(&|p| &p.hot_pages_per_node, other.as_ref().map(|o| &o.1)),
    );
    gauge_family(
        reg,
        "processes_in_scope",
        "Processes in scope, with their own series or not",
        &[(Vec::new(), as_i64(s.processes.len() as u64))],
    );
}

/// The sources, what moving and tiering cost, and the loop's liveness.
fn register_sources_and_costs(reg: &mut Registry, s: &Snapshot, x: &Exposition) {
    let sources: Vec<_> = s
        .sources
        .iter()
        .map(|src| {
            (
                l(&[("source", src.name.clone()), ("reason", src.reason.clone())]),
                i64::from(src.available),
            )
        })
        .collect();
    gauge_family(
        reg,
        "source_available",
        "1 when the hotness source runs; the reason says why not",
        &sources,
    );
    let intervals = |pick: fn(&IntervalsSnapshot) -> u64| -> Vec<(Labels, f64)> {
        s.sources
            .iter()
            .filter_map(|src| {
                let iv = src.intervals.as_ref()?;
                // Microseconds of an interval stay far below 2^53: exact as f64.
                #[allow(clippy::cast_precision_loss)]
                let secs = pick(iv) as f64 / 1e6;
                Some((
                    l(&[("source", src.name.clone()), ("tuning", iv.tuning.clone())]),
                    secs,
                ))
            })
            .collect()
    };
    seconds_gauge(
        reg,
        "source_sample_interval",
        "The source's sampling interval in force (DAMON: tuned toward its intervals goal)",
        &intervals(|iv| iv.sample_us),
    );
    seconds_gauge(
        reg,
        "source_aggregation_interval",
        "The source's aggregation interval in force (DAMON: tuned toward its intervals goal)",
        &intervals(|iv| iv.aggr_us),
    );
    counter_family(
        reg,
        "move_pages_calls",
        "move_pages(2) calls",
        &[(Vec::new(), s.mover.calls)],
    );
    counter_family(
        reg,
        "mover_pages_moved",
        "Base pages moved by move_pages(2)",
        &[(Vec::new(), s.mover.pages_moved)],
    );
    let failed: Vec<_> = s
        .mover
        .pages_failed
        .iter()
        .map(|(r, v)| (l(&[("reason", r.clone())]), *v))
        .collect();
    counter_family(
        reg,
        "mover_pages_failed",
        "Base pages move_pages(2) could not move, by reason",
        &failed,
    );
    let kernel: Vec<_> = s
        .kernel_vmstat_delta
        .iter()
        .map(|(k, v)| (l(&[("name", k.clone())]), *v))
        .collect();
    counter_family(
        reg,
        "kernel_vmstat",
        "Growth of the kernel's /proc/vmstat counters since tierd started",
        &kernel,
    );
    seconds_counter(
        reg,
        "mover",
        "Time spent inside move_pages(2)",
        s.mover.seconds,
    );
    seconds_counter(
        reg,
        "cpu",
        "CPU time of the tierd process (user + system)",
        s.daemon_cpu_s,
    );
    let phases: Vec<(Labels, f64)> = s
        .loop_cpu_s
        .iter()
        .map(|(k, v)| {
            let v = if v.is_finite() && *v > 0.0 { *v } else { 0.0 };
            (l(&[("phase", k.clone())]), v)
        })
        .collect();
    if !phases.is_empty() {
        register_series::<FloatCounter, f64>(
            reg,
            "loop_cpu",
            "CPU time of the tiering loop by phase (refresh, sources, locate, usage, engine, \
             move, publish)",
            Some(Unit::Seconds),
            &phases,
            set_float_counter,
        );
    }
    gauge_family(
        reg,
        "dry_run",
        "1 when tierd only plans migrations",
        &[(Vec::new(), i64::from(s.dry_run))],
    );
    register_http(reg, &x.http);
    if let Some(age) = x.since_pass {
        seconds_gauge(
            reg,
            "since_last_pass",
            "Time since the tiering loop last completed a pass (/healthz fails past \
             daemon.liveness_timeout_s)",
            &[(Vec::new(), age.as_secs_f64())],
        );
    }
}

/// What the metrics server survived, as `tierd_http_*` series.
fn register_http(reg: &mut Registry, h: &HttpCounters) {
    let one = |v: u64| [(Vec::new(), v)];
    counter_family(
        reg,
        "http_connections_accepted",
        "Connections the metrics endpoint accepted",
        &one(h.connections_accepted),
    );
    gauge_family(
        reg,
        "http_connections_open",
        "Connections open now (at most the connection cap)",
        &[(Vec::new(), as_i64(h.connections_open))],
    );
    gauge_family(
        reg,
        "http_connections_open_peak",
        "The most connections open at once since the start",
        &[(Vec::new(), as_i64(h.connections_open_peak))],
    );
    counter_family(
        reg,
        "http_connections_evicted",
        "Connections closed to make room for a new one at the connection cap",
        &one(h.connections_evicted),
    );
    counter_family(
        reg,
        "http_connections_timed_out",
        "Connections closed on a deadline: phase=header (request head not in time, idle \
         included), phase=request (whole exchange not in time, slow readers)",
        &[
            (l(&[("phase", "header".into())]), h.header_timeouts),
            (l(&[("phase", "request".into())]), h.request_timeouts),
        ],
    );
    counter_family(
        reg,
        "http_header_too_large",
        "Requests refused with 431 because their head exceeded the header limit",
        &one(h.header_too_large),
    );
    counter_family(
        reg,
        "http_requests",
        "Requests answered by the metrics endpoint",
        &one(h.requests),
    );
    let errors: Vec<_> = h
        .accept_errors
        .by_reason()
        .iter()
        .map(|(r, v)| (l(&[("reason", (*r).to_string())]), *v))
        .collect();
    counter_family(
        reg,
        "http_accept_errors",
        "accept(2) failures survived by the metrics endpoint, by reason",
        &errors,
    );
}

/// What the HTTP thread serves: the latest snapshot, replaced by the daemon loop. Behind an
/// `Arc` so that a scrape holds the lock only to clone a pointer: a snapshot of a host with
/// tens of thousands of processes takes tens of milliseconds to copy, and the loop must not
/// wait that long to publish.
pub type SharedSnapshot = Arc<Mutex<Arc<Snapshot>>>;

/// A [`SharedSnapshot`] holding `snap`.
#[must_use]
pub fn shared_snapshot(snap: Snapshot) -> SharedSnapshot {
    Arc::new(Mutex::new(Arc::new(snap)))
}

/// Proof of life from the tiering loop: the loop calls [`Heartbeat::beat`] after each pass
/// and `/healthz` fails when the last beat is older than the liveness timeout.
///
/// Cheap to clone and to beat (one atomic store of monotonic milliseconds since the
/// heartbeat was made). Making it counts as a beat: the first pass has the whole timeout.
#[derive(Clone, Debug)]
pub struct Heartbeat {
    inner: Arc<HeartbeatInner>,
}

#[derive(Debug)]
struct HeartbeatInner {
    epoch: Instant,
    last_ms: AtomicU64,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Self::new()
    }
}

impl Heartbeat {
    /// A heartbeat that beat just now.
    #[must_use]
    pub fn new() -> Self {
        Heartbeat {
            inner: Arc::new(HeartbeatInner {
                epoch: Instant::now(),
                last_ms: AtomicU64::new(0),
            }),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.inner.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Records a completed pass.
    pub fn beat(&self) {
        self.inner.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Time since the last beat.
    #[must_use]
    pub fn since_last(&self) -> Duration {
        let last = self.inner.last_ms.load(Ordering::Relaxed);
        Duration::from_millis(self.now_ms().saturating_sub(last))
    }
}

/// How the endpoint serves: the server's limits, liveness and the series bound.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Timeouts, header limit, connection cap.
    pub limits: Limits,
    /// The tiering loop's heartbeat; without one `/healthz` answers 200 while the server runs.
    pub heartbeat: Option<Heartbeat>,
    /// `/healthz` fails when the loop has not completed a pass for this long
    /// (`daemon.liveness_timeout_s`).
    pub liveness_timeout: Duration,
    /// Processes with their own series (`daemon.metrics_max_processes`).
    pub max_processes: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            limits: Limits::default(),
            heartbeat: None,
            liveness_timeout: Duration::from_secs(crate::config::DEFAULT_LIVENESS_TIMEOUT_S),
            max_processes: DEFAULT_MAX_PROCESSES,
        }
    }
}

/// Errors of the metrics endpoint.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {reason}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
}

/// `/status`: the snapshot with the server's counters beside it (a reader that does not know
/// `http`, like an older `tierd status`, ignores it).
#[derive(serde::Serialize)]
struct StatusDocument<'a> {
    #[serde(flatten)]
    snapshot: &'a Snapshot,
    http: HttpCounters,
}

/// `/healthz`: 200 while the loop beats within the timeout, else 503 with the reason.
fn liveness(heartbeat: Option<&Heartbeat>, timeout: Duration) -> Reply {
    let text = "text/plain; charset=utf-8";
    let Some(hb) = heartbeat else {
        return Reply {
            status: 200,
            content_type: text,
            body: "ok: serving (no tiering loop heartbeat wired)\n".into(),
        };
    };
    let age = hb.since_last();
    if age <= timeout {
        Reply {
            status: 200,
            content_type: text,
            body: format!("ok: last pass {:.1} s ago\n", age.as_secs_f64()),
        }
    } else {
        Reply {
            status: 503,
            content_type: text,
            body: format!(
                "tiering loop has not completed a pass for {:.1} s (limit {:.0} s)\n",
                age.as_secs_f64(),
                timeout.as_secs_f64()
            ),
        }
    }
}

/// Answers one path. Runs on the server thread; the snapshot is cloned under the lock and
/// rendered after it is released.
fn answer(path: &str, shared: &SharedSnapshot, opts: &ServerOptions, stats: &HttpStats) -> Reply {
    let snapshot = || match shared.lock() {
        Ok(g) => Arc::clone(&g),
        // A poisoned lock means the daemon loop panicked; serve what is there.
        Err(p) => Arc::clone(&p.into_inner()),
    };
    match path {
        "/metrics" => {
            let snap = snapshot();
            let x = Exposition {
                max_processes: opts.max_processes,
                http: stats.counters(),
                since_pass: opts.heartbeat.as_ref().map(Heartbeat::since_last),
            };
            Reply {
                status: 200,
                content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
                body: render_exposition(&snap, &x),
            }
        }
        "/status" => {
            let snap = snapshot();
            let doc = StatusDocument {
                snapshot: &snap,
                http: stats.counters(),
            };
            Reply {
                status: 200,
                content_type: "application/json",
                // Compact: an answer is held per open connection until written, so its size
                // times the connection cap bounds the server's memory (`tierd status --json`
                // pretty-prints).
                body: serde_json::to_string(&doc).unwrap_or_default(),
            }
        }
        "/healthz" => liveness(opts.heartbeat.as_ref(), opts.liveness_timeout),
        _ => Reply {
            status: 404,
            content_type: "text/plain; charset=utf-8",
            body: "see /metrics, /status or /healthz\n".into(),
        },
    }
}

/// The HTTP endpoint: `/metrics` (Prometheus text), `/status` (JSON) and `/healthz`
/// (liveness), served from one background thread.
pub struct MetricsServer {
    addr: SocketAddr,
    stats: Arc<HttpStats>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `addr` and serves `shared` from a background thread, with the default limits and
    /// no heartbeat.
    ///
    /// # Errors
    /// [`MetricsError::Bind`] when the address is taken or not allowed.
    pub fn start(addr: SocketAddr, shared: SharedSnapshot) -> Result<Self, MetricsError> {
        Self::start_with(addr, shared, ServerOptions::default())
    }

    /// Binds `addr` and serves `shared` from a background thread.
    ///
    /// # Errors
    /// [`MetricsError::Bind`] when the address is taken or not allowed, or the server's thread
    /// or runtime cannot be made.
    pub fn start_with(
        addr: SocketAddr,
        shared: SharedSnapshot,
        opts: ServerOptions,
    ) -> Result<Self, MetricsError> {
        let fail = |e: std::io::Error| MetricsError::Bind {
            addr,
            reason: e.to_string(),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(fail)?;
        let listener = rt
            .block_on(tokio::net::TcpListener::bind(addr))
            .map_err(fail)?;
        let bound = listener.local_addr().unwrap_or(addr);
        Self::spawn(rt, bound, listener, shared, opts)
    }

    /// Serves connections from `acceptor` (the listener, or in tests one with faults).
    pub(crate) fn spawn<A: crate::serve::Acceptor + Send + 'static>(
        rt: tokio::runtime::Runtime,
        addr: SocketAddr,
        acceptor: A,
        shared: SharedSnapshot,
        opts: ServerOptions,
    ) -> Result<Self, MetricsError> {
        let stats = Arc::new(HttpStats::default());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let limits = opts.limits.clone();
        let handler_stats = Arc::clone(&stats);
        let handler: crate::serve::Handler =
            Arc::new(move |path: &str| answer(path, &shared, &opts, &handler_stats));
        let serve_stats = Arc::clone(&stats);
        let thread = std::thread::Builder::new()
            .name("tierd-metrics".into())
            .spawn(move || {
                rt.block_on(async move {
                    tokio::select! {
                        () = crate::serve::serve(acceptor, limits, serve_stats, handler) => {}
                        _ = stop_rx => {}
                    }
                });
                // Dropping the runtime drops every connection still open.
            })
            .map_err(|e| MetricsError::Bind {
                addr,
                reason: e.to_string(),
            })?;
        Ok(MetricsServer {
            addr,
            stats,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The bound address (with the real port when 0 was asked for).
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the server survived so far.
    #[must_use]
    pub fn http_counters(&self) -> HttpCounters {
        self.stats.counters()
    }
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use tierd_engine::types::NodeId;
    use tierd_engine::Stats;
    use tierd_linux::status::fetch_status;

    fn sample() -> Snapshot {
        let mut stats = Stats::default();
        stats.engine.pgpromote_success = 1234;
        stats.nodes.insert(NodeId(0), NodeStats::default());
        let mut s = Snapshot {
            version: "0.1.0".into(),
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
                    free_bytes: 2 << 29,
                },
            ],
            processes: vec![ProcessSnapshot {
                pid: 42,
                comm: "chase".into(),
                cgroup: "/".into(),
                pages_per_node: [(0, 100), (1, 900)].into_iter().collect(),
                hot_pages_per_node: [(1, 300)].into_iter().collect(),
            }],
            sources: vec![
                SourceSnapshot {
                    name: "idle".into(),
                    available: false,
                    reason: "no /sys/kernel/mm/page_idle/bitmap".into(),
                    intervals: None,
                },
                SourceSnapshot {
                    name: "damon".into(),
                    available: true,
                    reason: "vaddr".into(),
                    intervals: Some(IntervalsSnapshot {
                        tuning: "userspace".into(),
                        sample_us: 10_000,
                        aggr_us: 200_000,
                        ..Default::default()
                    }),
                },
            ],
            ..Snapshot::default()
        };
        s.mover.pages_moved = 77;
        s.mover.pages_failed.insert("busy".into(), 3);
        s.kernel_vmstat_delta.insert("pgpromote_success".into(), 5);
        s.set_engine_stats(&stats);
        s
    }

    #[test]
    fn folio_method_and_counts_are_exported_with_their_kind() {
        let mut s = sample();
        // A daemon that predates the field: no method series, zero counts.
        let text = render_prometheus(&s);
        assert!(!text.contains("tierd_folio_method"), "{text}");
        assert!(
            text.contains("tierd_huge_folios_observed_total 0"),
            "{text}"
        );
        s.folios = tierd_linux::status::FolioSnapshot {
            method: "smaps".into(),
            huge_folios_observed: 3,
            unknown_pages: 1024,
            hugetlb_left_pages: 512,
            hugetlb_no_free_pages: 262_144,
        };
        let text = render_prometheus(&s);
        for line in [
            "tierd_folio_method{method=\"smaps\"} 1",
            "tierd_huge_folios_observed_total 3",
            "tierd_folio_pages_total{kind=\"unknown\"} 1024",
            "tierd_folio_pages_total{kind=\"hugetlb_left\"} 512",
            "tierd_folio_pages_total{kind=\"hugetlb_no_free\"} 262144",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        // The engine's THP counters come with every other engine field.
        for d in EngineStats::FIELDS
            .iter()
            .filter(|d| d.name.starts_with("thp_"))
        {
            assert!(
                text.contains(&format!("tierd_{}", d.name)),
                "{} in {text}",
                d.name
            );
        }
        // And /status carries them as JSON that an older reader skips.
        let json = serde_json::to_string(&s).expect("json");
        let back: Snapshot = serde_json::from_str(&json).expect("round trip");
        assert_eq!(back.folios, s.folios);
    }

    #[test]
    fn prometheus_text_has_engine_counters_and_placement() {
        let text = render_prometheus(&sample());
        assert!(
            text.contains("tierd_pgpromote_success_total 1234"),
            "{text}"
        );
        assert!(
            text.contains("tierd_process_pages{pid=\"42\",comm=\"chase\",node=\"1\"} 900"),
            "{text}"
        );
        assert!(
            text.contains("tierd_process_hot_pages{pid=\"42\",comm=\"chase\",node=\"1\"} 300"),
            "{text}"
        );
        assert!(text.contains("tierd_mover_pages_failed_total{reason=\"busy\"} 3"));
        assert!(text.contains("tierd_node_free_bytes{node=\"1\"} 1073741824"));
        assert!(text.contains("tierd_kernel_vmstat_total{name=\"pgpromote_success\"} 5"));
        assert!(text.contains("tierd_source_available{source=\"idle\""));
        assert!(
            text.contains(
                "tierd_source_sample_interval_seconds{source=\"damon\",tuning=\"userspace\"} 0.01"
            ),
            "{text}"
        );
        assert!(text.contains(
            "tierd_source_aggregation_interval_seconds{source=\"damon\",tuning=\"userspace\"} 0.2"
        ));
        assert!(text.ends_with("# EOF\n"), "{text}");
        // Every engine statistic is exported, counters with _total.
        for d in EngineStats::FIELDS {
            let suffix = if d.kind == StatKind::Counter {
                "_total"
            } else {
                ""
            };
            let name = format!("tierd_{}{}", d.name, suffix);
            assert!(text.contains(&name), "{name} missing");
        }
        // Base units in names, never doubled.
        assert!(!text.contains("_bytes_bytes"), "{text}");
        assert!(
            text.contains("# UNIT tierd_hotness_store_bytes bytes"),
            "{text}"
        );
    }

    #[test]
    fn server_serves_metrics_and_status_and_status_round_trips() {
        let shared: SharedSnapshot = shared_snapshot(sample());
        let srv = MetricsServer::start("127.0.0.1:0".parse().expect("addr"), shared.clone())
            .expect("bind loopback");
        let got = fetch_status(srv.addr()).expect("status");
        assert_eq!(got, sample());
        let text = ureq::get(&format!("http://{}/metrics", srv.addr()))
            .call()
            .expect("metrics")
            .into_string()
            .expect("text");
        assert!(text.contains("tierd_pgpromote_success_total 1234"));
        // The daemon replaces the snapshot; the next scrape sees it.
        Arc::make_mut(&mut shared.lock().expect("lock"))
            .mover
            .pages_moved = 99;
        assert_eq!(
            fetch_status(srv.addr()).expect("status").mover.pages_moved,
            99
        );
        let missing = ureq::get(&format!("http://{}/nope", srv.addr())).call();
        assert!(matches!(missing, Err(ureq::Error::Status(404, _))));
    }

    #[test]
    fn fetch_from_nothing_is_a_clear_error() {
        // Bind then drop to get a port nobody listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port");
        let e = fetch_status(port).expect_err("nothing listens");
        assert!(e
            .to_string()
            .contains("cannot read status from http://127.0.0.1:"));
    }

    #[test]
    fn label_values_are_escaped_so_any_comm_keeps_the_scrape_parsable() {
        let s = Snapshot {
            processes: vec![ProcessSnapshot {
                pid: 7,
                comm: "a\"b\\c\nd".into(),
                cgroup: "/".into(),
                pages_per_node: [(1, 5)].into_iter().collect(),
                hot_pages_per_node: BTreeMap::new(),
            }],
            ..Snapshot::default()
        };
        let text = render_prometheus(&s);
        assert!(
            text.contains("tierd_process_pages{pid=\"7\",comm=\"a\\\"b\\\\c\\nd\",node=\"1\"} 5"),
            "{text}"
        );
        // Every sample line is one line with balanced, escaped quotes.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let unescaped_quotes = line
                .char_indices()
                .filter(|(i, c)| *c == '"' && !line[..*i].ends_with('\\'))
                .count();
            assert_eq!(unescaped_quotes % 2, 0, "{line}");
        }
        assert_eq!(escape_label_value("plain"), "plain");
    }

    /// Every metric family of the text: (name, type, unit).
    fn families(text: &str) -> Vec<(String, String)> {
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_once(' '))
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect()
    }

    #[test]
    fn names_carry_base_units_once_and_milliseconds_are_exported_as_seconds() {
        let mut s = sample();
        let mut stats = Stats::default();
        stats.nodes.insert(
            NodeId(1),
            NodeStats {
                promote_threshold_ms: 1500,
                ..NodeStats::default()
            },
        );
        s.set_engine_stats(&stats);
        s.mover.seconds = 0.25;
        s.daemon_cpu_s = 1.5;
        s.loop_cpu_s.insert("locate".into(), 0.75);
        s.loop_cpu_s.insert("engine".into(), 0.125);
        let text = render_prometheus(&s);
        assert!(
            text.contains("tierd_loop_cpu_seconds_total{phase=\"locate\"} 0.75"),
            "{text}"
        );
        assert!(text.contains("tierd_loop_cpu_seconds_total{phase=\"engine\"} 0.125"));
        let fams = families(&text);
        assert!(fams.len() > 20, "{fams:?}");
        for (name, _) in &fams {
            // No unit other than the base ones, and none twice.
            for bad in [
                "_ms",
                "_milliseconds",
                "_microseconds",
                "_us",
                "_kib",
                "_mib",
            ] {
                assert!(!name.ends_with(bad), "{name} is not in a base unit");
            }
            for unit in ["bytes", "seconds"] {
                assert!(
                    !name.contains(&format!("_{unit}_{unit}")),
                    "{name} doubles its unit"
                );
            }
        }
        // Every statistic kept in milliseconds is exported in seconds under a _seconds name.
        for d in NodeStats::FIELDS
            .iter()
            .chain(EngineStats::FIELDS)
            .chain(SourceStats::FIELDS)
            .filter(|d| d.unit == StatUnit::Milliseconds)
        {
            let bare = d.name.strip_suffix("_ms").unwrap_or(d.name);
            assert!(
                fams.iter()
                    .any(|(n, _)| n.ends_with(&format!("{bare}_seconds"))),
                "{} is not exported in seconds: {fams:?}",
                d.name
            );
        }
        assert!(
            text.contains("tierd_node_promote_threshold_seconds{node=\"1\"} 1.5"),
            "{text}"
        );
        assert!(text.contains("# UNIT tierd_node_promote_threshold_seconds seconds"));
        assert!(text.contains("tierd_mover_seconds_total 0.25"), "{text}");
        assert!(text.contains("tierd_cpu_seconds_total 1.5"), "{text}");
    }

    #[test]
    fn build_info_carries_the_version() {
        let text = render_prometheus(&Snapshot::default());
        let line = format!(
            "tierd_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        assert!(text.contains(&line), "{text}");
        assert!(text.contains("# TYPE tierd_build_info gauge"), "{text}");
    }

    fn process(pid: u32, pages: u64) -> ProcessSnapshot {
        ProcessSnapshot {
            pid,
            comm: format!("p{pid}"),
            cgroup: "/".into(),
            pages_per_node: [(0, pages), (1, 2 * pages)].into_iter().collect(),
            hot_pages_per_node: [(1, pages / 2)].into_iter().collect(),
        }
    }

    #[test]
    fn per_process_series_are_bounded_to_the_largest_and_the_rest_summed() {
        // 30 processes of 1..=30 pages (x3 over both nodes), in no particular order.
        let s = Snapshot {
            processes: (1..=30u32)
                .map(|i| process(1000 + (i * 7) % 30, u64::from(i)))
                .collect(),
            ..Snapshot::default()
        };
        let x = Exposition {
            max_processes: 5,
            ..Exposition::default()
        };
        let text = render_exposition(&s, &x);
        let pids: BTreeSet<String> = text
            .lines()
            .filter(|l| l.starts_with("tierd_process_pages{"))
            .filter_map(|l| {
                l.split("pid=\"")
                    .nth(1)?
                    .split('"')
                    .next()
                    .map(String::from)
            })
            .collect();
        // The five largest (30..=26 pages) have their own series, the 25 others one.
        let largest: BTreeSet<String> = s
            .processes
            .iter()
            .filter(|p| p.pages_per_node[&0] > 25)
            .map(|p| p.pid.to_string())
            .chain(["other".to_string()])
            .collect();
        assert_eq!(pids, largest, "{text}");
        // The rest summed per node: 1..=25 pages on node 0, twice that on node 1.
        let sum: u64 = (1..=25).sum();
        assert!(
            text.contains(&format!(
                "tierd_process_pages{{pid=\"other\",comm=\"other\",node=\"0\"}} {sum}"
            )),
            "{text}"
        );
        assert!(text.contains(&format!(
            "tierd_process_pages{{pid=\"other\",comm=\"other\",node=\"1\"}} {}",
            2 * sum
        )));
        let hot: u64 = (1..=25u64).map(|p| p / 2).sum();
        assert!(text.contains(&format!(
            "tierd_process_hot_pages{{pid=\"other\",comm=\"other\",node=\"1\"}} {hot}"
        )));
        assert!(text.contains("tierd_processes_in_scope 30"), "{text}");
        let series = text
            .lines()
            .filter(|l| l.starts_with("tierd_process_pages{"))
            .count();
        assert_eq!(series, 6 * 2, "(5 + other) x 2 nodes");
        // Few enough processes: every one has its series, no "other".
        let all = render_exposition(
            &s,
            &Exposition {
                max_processes: 30,
                ..Exposition::default()
            },
        );
        assert!(!all
            .lines()
            .any(|l| !l.starts_with('#') && l.contains("pid=\"other\"")));
        assert_eq!(
            all.lines()
                .filter(|l| l.starts_with("tierd_process_pages{"))
                .count(),
            60
        );
    }

    #[test]
    fn the_same_state_renders_the_same_text_with_each_familys_series_sorted() {
        let s = sample();
        let first = render_prometheus(&s);
        // Each render builds its families afresh, each with its own hash seed: before the
        // sort, ten renders of one state came out in several orders.
        for _ in 0..10 {
            assert_eq!(render_prometheus(&s), first);
        }
        let mut families = 0;
        for block in first.split('#').skip(1) {
            let series: Vec<&str> = block.lines().skip(1).collect();
            if series.len() > 1 {
                families += 1;
                assert!(series.windows(2).all(|w| w[0] <= w[1]), "{series:?}");
            }
        }
        assert!(
            families > 5,
            "the sample has families of several series: {first}"
        );
        assert!(first.ends_with("# EOF\n"));
    }

    #[test]
    fn server_counters_are_exported_and_in_status() {
        let x = Exposition {
            http: HttpCounters {
                connections_accepted: 11,
                connections_evicted: 3,
                header_timeouts: 2,
                request_timeouts: 1,
                header_too_large: 4,
                accept_errors: crate::serve::AcceptErrors {
                    emfile: 5,
                    ..Default::default()
                },
                ..HttpCounters::default()
            },
            since_pass: Some(Duration::from_millis(1500)),
            ..Exposition::default()
        };
        let text = render_exposition(&sample(), &x);
        for line in [
            "tierd_http_connections_accepted_total 11",
            "tierd_http_connections_evicted_total 3",
            "tierd_http_connections_timed_out_total{phase=\"header\"} 2",
            "tierd_http_connections_timed_out_total{phase=\"request\"} 1",
            "tierd_http_header_too_large_total 4",
            "tierd_http_accept_errors_total{reason=\"emfile\"} 5",
            "tierd_since_last_pass_seconds 1.5",
        ] {
            assert!(text.contains(line), "{line} missing: {text}");
        }
    }

    #[test]
    fn liveness_answers_200_while_beating_and_503_with_a_reason_after() {
        let none = liveness(None, Duration::from_secs(1));
        assert_eq!(none.status, 200);
        let hb = Heartbeat::new();
        assert_eq!(liveness(Some(&hb), Duration::from_secs(3600)).status, 200);
        // A zero timeout is exceeded as soon as a millisecond passes.
        std::thread::sleep(Duration::from_millis(20));
        let stale = liveness(Some(&hb), Duration::ZERO);
        assert_eq!(stale.status, 503);
        assert!(
            stale
                .body
                .starts_with("tiering loop has not completed a pass for"),
            "{}",
            stale.body
        );
        assert_eq!(stale.body.lines().count(), 1);
        // Clones share the beat.
        let clone = hb.clone();
        clone.beat();
        // (the beat is recorded at >= 20 ms after the heartbeat was made, in both)
        assert!(hb.inner.last_ms.load(Ordering::Relaxed) >= 20);
        assert!(Arc::ptr_eq(&hb.inner, &clone.inner));
    }
}
