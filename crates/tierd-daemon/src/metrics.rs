//! What the daemon exposes: a [`Snapshot`] of its state, served as Prometheus text at
//! `/metrics` and as JSON at `/status` (which `tierd status` reads).
//!
//! The snapshot is plain data so that the daemon loop owns all state and the HTTP thread only
//! clones the latest snapshot; a scrape never blocks a migration batch. The Prometheus text is
//! produced by `prometheus-client` from a registry built per scrape: scrapes are seconds apart
//! and the registry is small, and building it from the snapshot keeps one source of truth.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use tierd_engine::stats::{EngineStats, NodeStats, SourceStats, StatDesc, StatKind, StatUnit};

pub use tierd_linux::status::{
    IntervalsSnapshot, MoverSnapshot, NodeSnapshot, ProcessSnapshot, Snapshot, SourceSnapshot,
};

fn unit(u: StatUnit) -> Option<Unit> {
    match u {
        StatUnit::Bytes => Some(Unit::Bytes),
        StatUnit::Pages | StatUnit::Events | StatUnit::Milliseconds => None,
    }
}

type Labels = Vec<(String, String)>;

/// A metric of one kind with the given series: a plain metric when it is one unlabelled
/// value (a `Family` would print `name{}`), a family otherwise.
fn register_series<M>(
    reg: &mut Registry,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    series: &[(Labels, u64)],
    set: impl Fn(&M, u64),
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

/// Registers one engine statistic (labelled series when there are several).
fn register_stat(reg: &mut Registry, prefix: &str, desc: &StatDesc, series: &[(Labels, u64)]) {
    // prometheus-client appends the unit to the name (`_bytes`); a statistic whose name
    // already ends in its unit (`hotness_store_bytes`) would be exported doubled.
    let bare = match desc.unit {
        StatUnit::Bytes => desc.name.strip_suffix("_bytes").unwrap_or(desc.name),
        _ => desc.name,
    };
    let name = format!("{prefix}{bare}");
    let base = desc.help.trim_end_matches('.');
    let help = match desc.unit {
        StatUnit::Pages => format!("{base} (base pages)"),
        StatUnit::Milliseconds => format!("{base} (milliseconds)"),
        StatUnit::Events | StatUnit::Bytes => base.to_string(),
    };
    match desc.kind {
        StatKind::Counter => {
            register_series::<Counter>(reg, &name, &help, unit(desc.unit), series, set_counter);
        }
        StatKind::Gauge => {
            register_series::<Gauge>(reg, &name, &help, unit(desc.unit), series, set_gauge);
        }
    }
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
    register_series::<Counter>(reg, name, help, None, series, set_counter);
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

/// Renders the snapshot in the Prometheus text exposition format.
#[must_use]
pub fn render_prometheus(s: &Snapshot) -> String {
    let mut reg = Registry::with_prefix("tierd");
    for d in EngineStats::FIELDS {
        let v = s.engine.get(d.name).copied().unwrap_or(0);
        register_stat(&mut reg, "", d, &[(Vec::new(), v)]);
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
        register_stat(&mut reg, "node_", d, &series);
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
        register_stat(&mut reg, "source_", d, &series);
    }
    let nodes = |f: &dyn Fn(&NodeSnapshot) -> i64| -> Vec<(Labels, i64)> {
        s.nodes
            .iter()
            .map(|n| (l(&[("node", n.id.to_string())]), f(n)))
            .collect()
    };
    gauge_family(
        &mut reg,
        "node_total_bytes",
        "Memory of the node",
        &nodes(&|n| as_i64(n.total_bytes)),
    );
    gauge_family(
        &mut reg,
        "node_free_bytes",
        "Free memory of the node",
        &nodes(&|n| as_i64(n.free_bytes)),
    );
    gauge_family(
        &mut reg,
        "node_tier",
        "Memory tier of the node, 0 = fastest",
        &nodes(&|n| i64::from(n.tier)),
    );
    // One series per (process, node) of a per-node page map of the process.
    let per_process_node = |pages: &dyn Fn(&ProcessSnapshot) -> &BTreeMap<u32, u64>| {
        s.processes
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
            .collect::<Vec<_>>()
    };
    gauge_family(
        &mut reg,
        "process_pages",
        "Base pages of a process in scope on each node (numa_maps)",
        &per_process_node(&|p| &p.pages_per_node),
    );
    gauge_family(
        &mut reg,
        "process_hot_pages",
        "Base pages of a process that the sources reported accessed in the last refresh period, per node",
        &per_process_node(&|p| &p.hot_pages_per_node),
    );
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
        &mut reg,
        "source_available",
        "1 when the hotness source runs; the reason says why not",
        &sources,
    );
    let intervals = |pick: fn(&IntervalsSnapshot) -> u64| -> Vec<(Labels, i64)> {
        s.sources
            .iter()
            .filter_map(|src| {
                let iv = src.intervals.as_ref()?;
                Some((
                    l(&[("source", src.name.clone()), ("tuning", iv.tuning.clone())]),
                    i64::try_from(pick(iv)).unwrap_or(i64::MAX),
                ))
            })
            .collect()
    };
    gauge_family(
        &mut reg,
        "source_sample_interval_microseconds",
        "The source's sampling interval in force (DAMON: tuned toward its intervals goal)",
        &intervals(|iv| iv.sample_us),
    );
    gauge_family(
        &mut reg,
        "source_aggregation_interval_microseconds",
        "The source's aggregation interval in force (DAMON: tuned toward its intervals goal)",
        &intervals(|iv| iv.aggr_us),
    );
    counter_family(
        &mut reg,
        "move_pages_calls",
        "move_pages(2) calls",
        &[(Vec::new(), s.mover.calls)],
    );
    counter_family(
        &mut reg,
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
        &mut reg,
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
        &mut reg,
        "kernel_vmstat",
        "Growth of the kernel's /proc/vmstat counters since tierd started",
        &kernel,
    );
    // Fractional seconds do not fit Counter<u64>; milliseconds keep the precision.
    counter_family(
        &mut reg,
        "mover_milliseconds",
        "Milliseconds spent inside move_pages(2)",
        &[(Vec::new(), secs_to_ms(s.mover.seconds))],
    );
    counter_family(
        &mut reg,
        "cpu_milliseconds",
        "CPU time of the tierd process (user + system)",
        &[(Vec::new(), secs_to_ms(s.daemon_cpu_s))],
    );
    gauge_family(
        &mut reg,
        "dry_run",
        "1 when tierd only plans migrations",
        &[(Vec::new(), i64::from(s.dry_run))],
    );
    let mut out = String::new();
    // Writing into a String cannot fail; encode only returns fmt::Error from the writer.
    if encode(&mut out, &reg).is_err() {
        out.clear();
    }
    out
}

fn secs_to_ms(s: f64) -> u64 {
    if s.is_finite() && s > 0.0 {
        // Saturating float-to-int conversion is what we want here.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let ms = (s * 1000.0).round() as u64;
        ms
    } else {
        0
    }
}

/// What the HTTP thread serves: the latest snapshot, replaced by the daemon loop.
pub type SharedSnapshot = Arc<Mutex<Snapshot>>;

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

/// The HTTP endpoint: `/metrics` (Prometheus text) and `/status` (JSON).
pub struct MetricsServer {
    addr: SocketAddr,
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `addr` and serves `shared` from a background thread.
    ///
    /// # Errors
    /// [`MetricsError::Bind`] when the address is taken or not allowed.
    pub fn start(addr: SocketAddr, shared: SharedSnapshot) -> Result<Self, MetricsError> {
        let server = tiny_http::Server::http(addr).map_err(|e| MetricsError::Bind {
            addr,
            reason: e.to_string(),
        })?;
        let bound = server.server_addr().to_ip().unwrap_or(addr);
        let server = Arc::new(server);
        let srv = Arc::clone(&server);
        let thread = std::thread::Builder::new()
            .name("tierd-metrics".into())
            .spawn(move || serve(&srv, &shared))
            .map_err(|e| MetricsError::Bind {
                addr,
                reason: e.to_string(),
            })?;
        Ok(MetricsServer {
            addr: bound,
            server,
            thread: Some(thread),
        })
    }

    /// The bound address (with the real port when 0 was asked for).
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
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
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(server: &tiny_http::Server, shared: &SharedSnapshot) {
    for req in server.incoming_requests() {
        let snap = match shared.lock() {
            Ok(g) => g.clone(),
            // A poisoned lock means the daemon loop panicked; serve what is there.
            Err(p) => p.into_inner().clone(),
        };
        let (body, ctype, code) = match req.url() {
            "/metrics" => (
                render_prometheus(&snap),
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                200,
            ),
            "/status" => (
                serde_json::to_string_pretty(&snap).unwrap_or_default(),
                "application/json",
                200,
            ),
            _ => ("see /metrics or /status\n".to_string(), "text/plain", 404),
        };
        let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], ctype.as_bytes());
        let mut resp = tiny_http::Response::from_string(body).with_status_code(code);
        if let Ok(h) = header {
            resp = resp.with_header(h);
        }
        // A client that hung up is not the daemon's problem.
        let _ = req.respond(resp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
                "tierd_source_sample_interval_microseconds{source=\"damon\",tuning=\"userspace\"} 10000"
            ),
            "{text}"
        );
        assert!(text.contains(
            "tierd_source_aggregation_interval_microseconds{source=\"damon\",tuning=\"userspace\"} 200000"
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
        let shared: SharedSnapshot = Arc::new(Mutex::new(sample()));
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
        shared.lock().expect("lock").mover.pages_moved = 99;
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
}
