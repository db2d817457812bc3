//! The deployment files under `deploy/` checked against the code they configure: the
//! Kubernetes manifest (every YAML document, the capabilities, the ConfigMap's `tierd.toml`
//! through the daemon's own parser, the probe and scrape ports and paths against a real
//! metrics endpoint) and the Grafana dashboard (every metric its PromQL uses exists in the
//! Prometheus text the daemon renders for a populated snapshot).
// Integration tests are their own crate; the unit-test lint does not apply here.
#![allow(clippy::tests_outside_test_module)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use serde_norway::Value as Yaml;
use tierd_daemon::config::DaemonConfig;
use tierd_daemon::metrics::{
    render_prometheus, MetricsServer, NodeSnapshot, ProcessSnapshot, SharedSnapshot, Snapshot,
    SourceSnapshot,
};
use tierd_engine::stats::{NodeStats, SourceStats, Stats};
use tierd_engine::types::NodeId;
use tierd_engine::SourceKind;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    let p = repo().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

const MANIFEST: &str = "deploy/k8s/tierd-daemonset.yaml";
const DASHBOARD: &str = "deploy/grafana/tierd-dashboard.json";

/// Every document of the manifest, parsed.
fn manifest_docs() -> Vec<Yaml> {
    let text = read(MANIFEST);
    serde_norway::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap_or_else(|e| panic!("{MANIFEST}: {e}")))
        .collect()
}

/// Splits `a.b.[c.d].0` into `a`, `b`, `c.d`, `0`: keys with dots go in brackets.
fn segments(path: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        let (seg, after) = if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').expect("closed bracket");
            (&r[..end], &r[end + 1..])
        } else {
            let end = rest.find('.').unwrap_or(rest.len());
            (&rest[..end], &rest[end..])
        };
        out.push(seg);
        rest = after.strip_prefix('.').unwrap_or(after);
    }
    out
}

/// The value at a dotted path (see [`segments`]); panics naming the path when absent.
fn get<'a>(v: &'a Yaml, path: &str) -> &'a Yaml {
    segments(path).into_iter().fold(v, |v, k| match v {
        Yaml::Mapping(m) => m
            .get(k)
            .unwrap_or_else(|| panic!("no {k:?} (of {path}) in {v:?}")),
        Yaml::Sequence(s) => {
            let i: usize = k.parse().unwrap_or_else(|_| panic!("{k} is not an index"));
            s.get(i).unwrap_or_else(|| panic!("no [{i}] (of {path})"))
        }
        _ => panic!("{path}: {k:?} of a scalar {v:?}"),
    })
}

fn s<'a>(v: &'a Yaml, path: &str) -> &'a str {
    get(v, path)
        .as_str()
        .unwrap_or_else(|| panic!("{path} is not a string"))
}

fn doc<'a>(docs: &'a [Yaml], kind: &str) -> &'a Yaml {
    let found: Vec<&Yaml> = docs.iter().filter(|d| s(d, "kind") == kind).collect();
    assert_eq!(found.len(), 1, "one {kind} expected");
    found[0]
}

/// `CapabilityBoundingSet=` of the systemd unit: the documented set.
fn unit_capabilities() -> BTreeSet<String> {
    let unit = read("deploy/tierd.service");
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit lists its capabilities");
    line.split_whitespace().map(str::to_string).collect()
}

fn config_from_configmap(docs: &[Yaml]) -> DaemonConfig {
    let cm = doc(docs, "ConfigMap");
    let toml = s(cm, "data.[tierd.toml]");
    DaemonConfig::parse(toml, Path::new("ConfigMap tierd-config/tierd.toml"))
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn manifest_documents_parse_with_the_expected_kinds() {
    let docs = manifest_docs();
    let kinds: Vec<&str> = docs.iter().map(|d| s(d, "kind")).collect();
    assert_eq!(
        kinds,
        ["Namespace", "ConfigMap", "DaemonSet", "NetworkPolicy"]
    );
    let ns_doc = doc(&docs, "Namespace");
    let ns = s(ns_doc, "metadata.name");
    // Host pids, host paths and capabilities are refused below the privileged level.
    assert_eq!(
        s(
            ns_doc,
            "metadata.labels.[pod-security.kubernetes.io/enforce]"
        ),
        "privileged"
    );
    for d in &docs {
        assert!(!s(d, "apiVersion").is_empty());
        if s(d, "kind") != "Namespace" {
            assert_eq!(s(d, "metadata.namespace"), ns, "{}", s(d, "kind"));
        }
    }
    let ds = doc(&docs, "DaemonSet");
    // The selector picks the pods the template makes, and the NetworkPolicy covers them.
    let template_labels = get(ds, "spec.template.metadata.labels");
    for sel in [
        get(ds, "spec.selector.matchLabels"),
        get(doc(&docs, "NetworkPolicy"), "spec.podSelector.matchLabels"),
    ] {
        let Yaml::Mapping(m) = sel else {
            panic!("matchLabels is a mapping")
        };
        for (k, v) in m {
            let k = k.as_str().expect("label key");
            assert_eq!(get(template_labels, &format!("[{k}]")), v, "label {k}");
        }
    }
}

#[test]
fn daemonset_has_exactly_the_documented_privileges() {
    let docs = manifest_docs();
    let ds = doc(&docs, "DaemonSet");
    let pod = get(ds, "spec.template.spec");
    assert_eq!(get(pod, "hostPID").as_bool(), Some(true), "moves host pids");
    assert_ne!(get(pod, "hostNetwork").as_bool(), Some(true));
    let sc = get(pod, "containers.0.securityContext");
    assert_eq!(get(sc, "privileged").as_bool(), Some(false));
    let added: BTreeSet<String> = get(sc, "capabilities.add")
        .as_sequence()
        .expect("a list")
        .iter()
        .map(|c| format!("CAP_{}", c.as_str().expect("a name")))
        .collect();
    assert_eq!(
        added,
        unit_capabilities(),
        "manifest vs deploy/tierd.service"
    );
    let dropped: Vec<&str> = get(sc, "capabilities.drop")
        .as_sequence()
        .expect("a list")
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    assert_eq!(dropped, ["ALL"]);
    // Each capability is explained in a comment of the manifest and in the user guide.
    let text = read(MANIFEST);
    let guide = read("docs/user-guide.md");
    for cap in &added {
        let bare = cap.trim_start_matches("CAP_");
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(&format!("# {bare}:"))),
            "no `# {bare}: why` comment in {MANIFEST}"
        );
        assert!(guide.contains(cap.as_str()), "{cap} not in the user guide");
    }
    let cfg = config_from_configmap(&docs);
    assert_eq!(
        added,
        capabilities_needed(&cfg),
        "the manifest grants what docs/daemon.md's table says its ConfigMap's sources need"
    );
}

/// The rows of docs/daemon.md's "Capabilities" table: (needed when, capabilities).
fn capability_table() -> Vec<(String, BTreeSet<String>)> {
    let doc = read("docs/daemon.md");
    let section = doc
        .split("\n## Capabilities\n")
        .nth(1)
        .expect("docs/daemon.md has a Capabilities section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let rows: Vec<(String, BTreeSet<String>)> = section
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(2) // header and separator
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 4, "a row of 4 cells: {l}");
            let caps = cells[3]
                .split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
                .filter(|w| w.starts_with("CAP_"))
                .map(str::to_string)
                .collect();
            (cells[1].to_string(), caps)
        })
        .collect();
    assert!(rows.len() >= 8, "{rows:?}");
    rows
}

/// The union of the table's capabilities for the rows `always` and the enabled sources.
fn capabilities_needed(cfg: &DaemonConfig) -> BTreeSet<String> {
    let table = capability_table();
    let mut when: Vec<&str> = vec!["always"];
    when.extend(cfg.sources.enabled.iter().map(|s| s.name()));
    for (w, _) in &table {
        assert!(
            ["always", "damon", "idle", "perf", "move_all"].contains(&w.as_str()),
            "unknown `needed when` {w:?}"
        );
    }
    table
        .into_iter()
        .filter(|(w, _)| when.contains(&w.as_str()))
        .flat_map(|(_, caps)| caps)
        .collect()
}

#[test]
fn the_unit_grants_what_the_shipped_config_needs_and_no_more() {
    let cfg = DaemonConfig::parse(&read("deploy/tierd.toml"), Path::new("deploy/tierd.toml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let needed = capabilities_needed(&cfg);
    assert_eq!(
        unit_capabilities(),
        needed,
        "deploy/tierd.service vs docs/daemon.md"
    );
    // Every source's needs are in the table, and idle needs more than damon: the table is
    // what decides, not a copy of the unit.
    let table = capability_table();
    for src in ["damon", "idle", "perf"] {
        assert!(table.iter().any(|(w, _)| w == src), "{src} has no row");
    }
    let unit = read("deploy/tierd.service");
    let value = |key: &str| -> Vec<String> {
        unit.lines()
            .filter_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(value("RestartPreventExitStatus"), ["78"]);
    assert_eq!(value("NoNewPrivileges"), ["yes"]);
    assert_eq!(value("AmbientCapabilities"), [""]);
    assert_eq!(
        value("RestrictAddressFamilies"),
        ["AF_INET AF_INET6 AF_UNIX"]
    );
    assert_eq!(value("RuntimeDirectory"), ["tierd"]);
    assert_eq!(
        cfg.daemon.state_dir,
        Path::new("/run").join(&value("RuntimeDirectory")[0]),
        "the state directory is the unit's writable runtime directory"
    );
    // DAMON writes /sys/kernel/mm: nothing may make /sys read-only.
    assert!(value("ProtectKernelTunables").iter().all(|v| v == "no"));
    assert!(value("SystemCallFilter")
        .iter()
        .any(|v| v == "@system-service"));
    // Every sandboxing line is explained in docs/daemon.md's "Sandboxing" table.
    let doc = read("docs/daemon.md");
    let sandboxing = doc
        .split("\n## Sandboxing\n")
        .nth(1)
        .expect("Sandboxing section");
    for l in unit.lines() {
        let Some((key, _)) = l.split_once('=') else {
            continue;
        };
        if l.starts_with('#') || !l.starts_with(|c: char| c.is_ascii_uppercase()) {
            continue;
        }
        if [
            "Description",
            "Documentation",
            "ConditionPathIsDirectory",
            "After",
            "Type",
            "ExecStart",
            "ExecReload",
            "KillSignal",
            "TimeoutStopSec",
            "Restart",
            "RestartSec",
            "Nice",
            "WantedBy",
        ]
        .contains(&key)
        {
            continue;
        }
        assert!(
            sandboxing.contains(&format!("`{key}=")),
            "{key} not explained"
        );
    }
}

#[test]
fn configmap_config_is_valid_and_the_host_trees_are_mounted_where_it_says() {
    let docs = manifest_docs();
    let cfg = config_from_configmap(&docs);
    // A pod's own cgroup namespace hides the host paths fairness needs (see the manifest).
    assert!(!cfg.engine.cgroup_fairness);
    assert!(!cfg.scope.cgroups.is_empty(), "scoped to the pods' cgroups");
    let pod = get(doc(&docs, "DaemonSet"), "spec.template.spec");
    let container = get(pod, "containers.0");
    // Volume name -> host path (or "configMap").
    let mut volumes: BTreeMap<String, String> = BTreeMap::new();
    for v in get(pod, "volumes").as_sequence().expect("volumes") {
        let name = s(v, "name").to_string();
        let src = match v {
            Yaml::Mapping(m) if m.contains_key("hostPath") => s(v, "hostPath.path").to_string(),
            Yaml::Mapping(m) if m.contains_key("configMap") => "configMap".to_string(),
            Yaml::Mapping(m) if m.contains_key("emptyDir") => "emptyDir".to_string(),
            other => panic!("unexpected volume {other:?}"),
        };
        volumes.insert(name, src);
    }
    // Mount path -> host path.
    let mounts: BTreeMap<PathBuf, String> = get(container, "volumeMounts")
        .as_sequence()
        .expect("mounts")
        .iter()
        .map(|m| {
            (
                PathBuf::from(s(m, "mountPath")),
                volumes[s(m, "name")].clone(),
            )
        })
        .collect();
    for (root, host) in [
        (&cfg.system.proc_root, "/proc"),
        (&cfg.system.sys_root, "/sys"),
        (&cfg.system.cgroup_root, "/sys/fs/cgroup"),
    ] {
        assert_eq!(
            mounts.get(root).map(String::as_str),
            Some(host),
            "{} must be the host's {host}",
            root.display()
        );
    }
    // DAMON and idle tracking write sysfs: that mount must be writable.
    let sys_mount = get(container, "volumeMounts")
        .as_sequence()
        .expect("mounts")
        .iter()
        .find(|m| Path::new(s(m, "mountPath")) == cfg.system.sys_root)
        .expect("sys mount");
    assert_ne!(
        sys_mount
            .as_mapping()
            .and_then(|m| m.get("readOnly"))
            .and_then(Yaml::as_bool),
        Some(true)
    );
    // The daemon is started with the ConfigMap's file.
    let args: Vec<&str> = get(container, "args")
        .as_sequence()
        .expect("args")
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    assert_eq!(&args[..2], ["run", "--config"]);
    let file = Path::new(args[2]);
    assert_eq!(
        file.file_name().and_then(|f| f.to_str()),
        Some("tierd.toml")
    );
    let dir = file.parent().expect("a directory");
    assert_eq!(mounts.get(dir).map(String::as_str), Some("configMap"));
}

/// GETs `path` from `addr`; the status code.
fn http_status(addr: SocketAddr, path: &str) -> u16 {
    let mut c = TcpStream::connect(addr).expect("connect");
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut reply = String::new();
    c.read_to_string(&mut reply).expect("reply");
    reply
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not HTTP: {reply:.80}"))
}

#[test]
fn probes_and_scrape_annotations_match_the_metrics_endpoint() {
    let docs = manifest_docs();
    let cfg = config_from_configmap(&docs);
    let listen = cfg.daemon.metrics_listen;
    // The kubelet and Prometheus connect to the pod IP, never to the pod's loopback.
    assert!(
        !listen.ip().is_loopback(),
        "{listen}: probes could not reach it"
    );
    let tmpl = get(doc(&docs, "DaemonSet"), "spec.template");
    let ann = get(tmpl, "metadata.annotations");
    assert_eq!(s(ann, "[prometheus.io/scrape]"), "true");
    assert_eq!(s(ann, "[prometheus.io/port]"), listen.port().to_string());
    let container = get(tmpl, "spec.containers.0");
    assert_eq!(
        get(container, "ports.0.containerPort").as_u64(),
        Some(u64::from(listen.port()))
    );
    let np = doc(&docs, "NetworkPolicy");
    assert_eq!(
        get(np, "spec.ingress.0.ports.0.port").as_u64(),
        Some(u64::from(listen.port()))
    );
    let mut paths = vec![s(ann, "[prometheus.io/path]").to_string()];
    for probe in ["readinessProbe", "livenessProbe"] {
        let p = get(container, probe);
        assert_eq!(
            get(p, "httpGet.port").as_u64(),
            Some(u64::from(listen.port())),
            "{probe}"
        );
        paths.push(s(p, "httpGet.path").to_string());
    }
    // The paths are ones the daemon's endpoint serves (and an unknown one is a 404).
    let shared: SharedSnapshot = tierd_daemon::metrics::shared_snapshot(populated());
    let srv = MetricsServer::start("127.0.0.1:0".parse().expect("addr"), shared).expect("bind");
    for p in &paths {
        assert_eq!(http_status(srv.addr(), p), 200, "{p}");
    }
    assert_eq!(http_status(srv.addr(), "/healthz-not-served"), 404);
}

/// A snapshot with every kind of series present: nodes, processes, sources, engine counters
/// per node and per source, mover failures, kernel counters.
fn populated() -> Snapshot {
    let mut stats = Stats::default();
    stats.engine.pgpromote_success = 5000;
    stats.engine.pgdemote_success = 700;
    for n in [0u16, 1] {
        stats.nodes.insert(
            NodeId(n),
            NodeStats {
                pgpromote_success: 10,
                pgdemote_success: 5,
                promote_threshold_ms: 1000,
                ..NodeStats::default()
            },
        );
    }
    stats.sources.insert(
        SourceKind::AccessedBitScan,
        SourceStats {
            observed: 100,
            recorded: 90,
            dropped_disabled: 0,
        },
    );
    let mut s = Snapshot {
        version: "0.1.0".into(),
        uptime_s: 60.0,
        nodes: vec![
            NodeSnapshot {
                id: 0,
                tier: 0,
                has_cpus: true,
                total_bytes: 4 << 30,
                free_bytes: 1 << 30,
            },
            NodeSnapshot {
                id: 1,
                tier: 1,
                has_cpus: false,
                total_bytes: 8 << 30,
                free_bytes: 6 << 30,
            },
        ],
        processes: vec![ProcessSnapshot {
            pid: 4242,
            comm: "chase".into(),
            cgroup: "/kubepods.slice".into(),
            pages_per_node: [(0, 1000), (1, 9000)].into_iter().collect(),
            hot_pages_per_node: [(0, 800), (1, 1200)].into_iter().collect(),
        }],
        sources: vec![
            SourceSnapshot {
                name: "damon".into(),
                available: true,
                reason: "vaddr".into(),
                intervals: Some(tierd_daemon::metrics::IntervalsSnapshot {
                    tuning: "userspace".into(),
                    sample_us: 10_000,
                    aggr_us: 200_000,
                    ..Default::default()
                }),
            },
            SourceSnapshot {
                name: "idle".into(),
                available: false,
                reason: "absent".into(),
                intervals: None,
            },
        ],
        daemon_cpu_s: 1.5,
        ..Snapshot::default()
    };
    s.mover.calls = 12;
    s.mover.pages_moved = 5700;
    s.mover.seconds = 0.25;
    s.mover.pages_failed.insert("busy".into(), 3);
    s.kernel_vmstat_delta.insert("pgpromote_success".into(), 2);
    s.set_engine_stats(&stats);
    s
}

/// What the daemon exports, as Prometheus stores it: series name (counters with `_total`) ->
/// whether it is a counter, and its label keys.
fn exported_series() -> BTreeMap<String, (bool, BTreeSet<String>)> {
    let text = render_prometheus(&populated());
    let counters: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .map(|n| format!("{n}_total"))
        .collect();
    let mut out: BTreeMap<String, (bool, BTreeSet<String>)> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..end];
        let entry = out
            .entry(name.to_string())
            .or_insert_with(|| (counters.contains(name), BTreeSet::new()));
        if let Some(rest) = line[end..].strip_prefix('{') {
            let body = &rest[..rest.find('}').expect("closed labels")];
            for pair in body.split("\",") {
                if let Some((k, _)) = pair.split_once('=') {
                    entry.1.insert(k.trim().to_string());
                }
            }
        }
    }
    out
}

/// Every PromQL expression of the dashboard (panel targets, nested rows, variable queries).
fn dashboard_queries(d: &Json) -> Vec<String> {
    fn walk(v: &Json, out: &mut Vec<String>) {
        match v {
            Json::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr", Json::String(s)) => out.push(s.clone()),
                        _ => walk(v, out),
                    }
                }
            }
            Json::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(d, &mut out);
    out
}

/// What a PromQL expression uses.
#[derive(Debug, Default)]
struct Uses {
    /// Metric names, and whether each sits directly inside `rate()`/`irate()`/`increase()`.
    metrics: Vec<(String, bool)>,
    /// Label names in selectors, `by`/`without` and `on`/`ignoring`.
    labels: Vec<String>,
}

/// Parses `q` (Grafana's `$variables` replaced by values of their kind) with a real PromQL
/// parser and collects what it uses.
fn promql_uses(q: &str) -> Uses {
    let concrete = q
        .replace("$__rate_interval", "5m")
        .replace("$instance", ".*");
    let expr =
        promql_parser::parser::parse(&concrete).unwrap_or_else(|e| panic!("not PromQL: {q}: {e}"));
    let mut uses = Uses::default();
    collect(&expr, false, &mut uses);
    uses
}

fn collect(e: &promql_parser::parser::Expr, in_rate: bool, u: &mut Uses) {
    use promql_parser::parser::ast::VectorSelector;
    use promql_parser::parser::Expr;
    let selector = |vs: &VectorSelector, in_rate: bool, u: &mut Uses| {
        let name = vs.name.clone().or_else(|| {
            vs.matchers
                .matchers
                .iter()
                .find(|m| m.name == "__name__")
                .map(|m| m.value.clone())
        });
        u.metrics
            .push((name.expect("a selector names its metric"), in_rate));
        u.labels.extend(
            vs.matchers
                .matchers
                .iter()
                .filter(|m| m.name != "__name__")
                .map(|m| m.name.clone()),
        );
    };
    match e {
        Expr::Aggregate(a) => {
            if let Some(m) = &a.modifier {
                u.labels.extend(m.labels().labels.iter().cloned());
            }
            collect(&a.expr, false, u);
            if let Some(p) = &a.param {
                collect(p, false, u);
            }
        }
        Expr::Binary(b) => {
            if let Some(m) = b.modifier.as_ref().and_then(|m| m.matching.as_ref()) {
                u.labels.extend(m.labels().labels.iter().cloned());
            }
            collect(&b.lhs, false, u);
            collect(&b.rhs, false, u);
        }
        Expr::Unary(x) => collect(&x.expr, false, u),
        Expr::Paren(p) => collect(&p.expr, false, u),
        Expr::Subquery(s) => collect(&s.expr, false, u),
        Expr::VectorSelector(vs) => selector(vs, false, u),
        Expr::MatrixSelector(ms) => selector(&ms.vs, in_rate, u),
        Expr::Call(c) => {
            let rate = matches!(c.func.name, "rate" | "irate" | "increase");
            for a in &c.args.args {
                collect(a, rate, u);
            }
        }
        _ => {}
    }
}

/// The metric in `label_values(METRIC, label)` of a template variable.
fn variable_metrics(d: &Json) -> Vec<(String, String)> {
    d["templating"]["list"]
        .as_array()
        .expect("templating list")
        .iter()
        .filter_map(|v| v["definition"].as_str())
        .filter_map(|q| q.strip_prefix("label_values(")?.strip_suffix(')'))
        .filter_map(|args| {
            let (m, l) = args.split_once(',')?;
            Some((m.trim().to_string(), l.trim().to_string()))
        })
        .collect()
}

#[test]
fn every_dashboard_metric_is_one_the_daemon_exports() {
    let d: Json = serde_json::from_str(&read(DASHBOARD)).expect("dashboard JSON");
    let series = exported_series();
    let label_keys: BTreeSet<&str> = series
        .values()
        .flat_map(|(_, l)| l)
        .map(String::as_str)
        // Prometheus adds these at scrape time.
        .chain(["instance", "job"])
        .collect();
    let queries = dashboard_queries(&d);
    assert!(queries.len() >= 10, "{queries:?}");
    let mut used = BTreeSet::new();
    for q in &queries {
        let uses = promql_uses(q);
        assert!(!uses.metrics.is_empty(), "no metric in {q}");
        for (name, in_rate) in uses.metrics {
            let Some((counter, _)) = series.get(&name) else {
                panic!(
                    "{name} (in {q}) is not exported; the daemon exports: {:?}",
                    series.keys().collect::<Vec<_>>()
                )
            };
            // A counter only makes sense as a rate, a gauge never.
            assert_eq!(*counter, in_rate, "{name} in {q}");
            used.insert(name);
        }
        for l in uses.labels {
            assert!(label_keys.contains(l.as_str()), "label {l} (in {q})");
        }
    }
    let vars = variable_metrics(&d);
    assert!(!vars.is_empty(), "the instance variable");
    for (metric, label) in vars {
        assert!(series.contains_key(&metric), "variable metric {metric}");
        assert!(
            label_keys.contains(label.as_str()),
            "variable label {label}"
        );
    }
    // What the dashboard is for.
    for must in [
        "tierd_node_pgpromote_success_total",
        "tierd_node_pgdemote_success_total",
        "tierd_process_pages",
        "tierd_node_free_bytes",
        "tierd_node_total_bytes",
        "tierd_source_available",
        "tierd_mover_pages_failed_total",
        "tierd_cpu_seconds_total",
    ] {
        assert!(used.contains(must), "the dashboard does not show {must}");
    }
    // Panel ids are unique (Grafana keys panel state on them) and panels do not overlap.
    let mut ids = BTreeSet::new();
    let mut boxes: Vec<(u64, u64, u64, u64, String)> = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        let id = p["id"].as_u64().expect("panel id");
        assert!(ids.insert(id), "panel id {id} twice");
        if p["type"] != "row" {
            assert!(p["targets"].as_array().is_some_and(|t| !t.is_empty()));
        }
        let g = &p["gridPos"];
        let n = |k: &str| g[k].as_u64().expect("gridPos");
        let (x, y, w, h) = (n("x"), n("y"), n("w"), n("h"));
        assert!(x + w <= 24, "panel {id} wider than the grid");
        let title = p["title"].as_str().unwrap_or_default().to_string();
        for (bx, by, bw, bh, other) in &boxes {
            let apart = x + w <= *bx || *bx + *bw <= x || y + h <= *by || *by + *bh <= y;
            assert!(apart, "{title:?} overlaps {other:?}");
        }
        boxes.push((x, y, w, h, title));
    }
}

#[test]
fn the_promql_walk_sees_what_is_there() {
    // The checks above rely on it: names, rate context, grouping and matching labels.
    let u = promql_uses(
        "sum by (instance, node) (rate(tierd_a_total{name=~\"$instance\"}[$__rate_interval])) \
         / on (node) group_left tierd_b",
    );
    assert_eq!(
        u.metrics,
        [
            ("tierd_a_total".to_string(), true),
            ("tierd_b".to_string(), false)
        ]
    );
    let mut labels = u.labels;
    labels.sort();
    assert_eq!(labels, ["instance", "name", "node", "node"]);
    assert_eq!(segments("a.[b.c].0"), ["a", "b.c", "0"]);
    let series = exported_series();
    assert!(series["tierd_pgpromote_success_total"].0, "a counter");
    assert!(!series["tierd_node_free_bytes"].0, "a gauge");
    assert!(series["tierd_process_pages"].1.contains("comm"));
}

const MONITORING: &str = "deploy/k8s/tierd-monitoring.yaml";

fn monitoring_docs() -> Vec<Yaml> {
    let text = read(MONITORING);
    serde_norway::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap_or_else(|e| panic!("{MONITORING}: {e}")))
        .collect()
}

fn seq<'a>(v: &'a Yaml, path: &str) -> &'a Vec<Yaml> {
    match get(v, path) {
        Yaml::Sequence(s) => s,
        other => panic!("{path} is not a list: {other:?}"),
    }
}

#[test]
fn the_pod_monitor_scrapes_the_daemonsets_metrics_port() {
    let docs = monitoring_docs();
    let kinds: Vec<&str> = docs.iter().map(|d| s(d, "kind")).collect();
    assert_eq!(kinds, ["PodMonitor", "PrometheusRule"]);
    let manifest = manifest_docs();
    let ds = doc(&manifest, "DaemonSet");
    for d in &docs {
        assert_eq!(s(d, "apiVersion"), "monitoring.coreos.com/v1");
        assert_eq!(
            s(d, "metadata.namespace"),
            s(ds, "metadata.namespace"),
            "{}",
            s(d, "kind")
        );
    }
    let pm = doc(&docs, "PodMonitor");
    assert_eq!(
        s(pm, "spec.namespaceSelector.matchNames.0"),
        s(ds, "metadata.namespace")
    );
    let Yaml::Mapping(sel) = get(pm, "spec.selector.matchLabels") else {
        panic!("matchLabels is a mapping")
    };
    let template_labels = get(ds, "spec.template.metadata.labels");
    for (k, v) in sel {
        let k = k.as_str().expect("label key");
        assert_eq!(get(template_labels, &format!("[{k}]")), v, "label {k}");
    }
    // The endpoint names the container's port and the path the annotations name.
    let ep = get(pm, "spec.podMetricsEndpoints.0");
    let container = get(ds, "spec.template.spec.containers.0");
    assert_eq!(s(ep, "port"), s(container, "ports.0.name"));
    assert_eq!(
        s(ep, "path"),
        s(
            ds,
            "spec.template.metadata.annotations.[prometheus.io/path]"
        )
    );
    // A relabelled label never takes one the daemon exports (`node` is the NUMA node).
    let series = exported_series();
    for r in seq(ep, "relabelings") {
        let target = s(r, "targetLabel");
        assert!(
            series.values().all(|(_, labels)| !labels.contains(target)),
            "{target} is a label of tierd's own"
        );
    }
}

#[test]
fn every_alert_rule_uses_metrics_the_daemon_exports() {
    let docs = monitoring_docs();
    let rules = doc(&docs, "PrometheusRule");
    let series = exported_series();
    let pm = doc(&docs, "PodMonitor");
    // Labels a query may use: tierd's, Prometheus' own, and the PodMonitor's relabellings.
    let mut label_keys: BTreeSet<String> = series
        .values()
        .flat_map(|(_, l)| l.iter().cloned())
        .chain(["instance".to_string(), "job".to_string()])
        .collect();
    for r in seq(pm, "spec.podMetricsEndpoints.0.relabelings") {
        label_keys.insert(s(r, "targetLabel").to_string());
    }
    // The job a PodMonitor's targets get: NAMESPACE/NAME.
    let job = format!("{}/{}", s(pm, "metadata.namespace"), s(pm, "metadata.name"));
    let mut recorded = BTreeSet::new();
    let mut alerts = BTreeMap::new();
    for group in seq(rules, "spec.groups") {
        for rule in seq(group, "rules") {
            let expr = s(rule, "expr");
            let uses = promql_uses(expr);
            assert!(!uses.metrics.is_empty(), "no metric in {expr}");
            for (name, in_rate) in uses.metrics {
                if name == "up" {
                    // Prometheus' own, per target: the PodMonitor's job.
                    assert!(expr.contains(&format!("job=\"{job}\"")), "{expr}");
                    continue;
                }
                if recorded.contains(&name) {
                    assert!(!in_rate, "a recorded rate is a gauge: {name} in {expr}");
                    continue;
                }
                let Some((counter, _)) = series.get(&name) else {
                    panic!("{name} (in {expr}) is not exported by the daemon")
                };
                assert_eq!(*counter, in_rate, "{name} in {expr}");
            }
            for l in uses.labels {
                assert!(label_keys.contains(&l), "label {l} (in {expr})");
            }
            if let Some(Yaml::String(r)) = get_opt(rule, "record") {
                // Recorded before use, in Prometheus' level:metric:operations form.
                assert_eq!(r.split(':').count(), 3, "{r}");
                recorded.insert(r.clone());
            } else {
                let name = s(rule, "alert").to_string();
                for k in [
                    "labels.severity",
                    "annotations.summary",
                    "annotations.description",
                ] {
                    assert!(!s(rule, k).is_empty(), "{name}: {k}");
                }
                alerts.insert(name, expr.to_string());
            }
        }
    }
    // What the alerts are for (issue 16): each watches what its name says.
    for (alert, metric) in [
        ("TierdDown", "up"),
        ("TierdLoopStalled", "tierd_promoter_runs_total"),
        (
            "TierdPromotionFailuresRising",
            "instance:tierd_pgpromote_fail:rate15m",
        ),
        ("TierdPingPongRising", "instance:tierd_pingpong:rate30m"),
    ] {
        let expr = alerts
            .get(alert)
            .unwrap_or_else(|| panic!("no alert {alert}"));
        assert!(
            promql_uses(expr).metrics.iter().any(|(m, _)| m == metric),
            "{alert}: {expr}"
        );
    }
    assert!(
        alerts["TierdDown"].contains("absent("),
        "no target at all is down too"
    );
}

fn get_opt<'a>(v: &'a Yaml, key: &str) -> Option<&'a Yaml> {
    match v {
        Yaml::Mapping(m) => m.get(key),
        _ => None,
    }
}

/// The Debian package's metadata (crates/tierd/Cargo.toml) against scripts/package.sh, the
/// unit and the Dockerfile: every asset is a file the script makes or a file of the
/// repository, /etc/tierd/tierd.toml is a conffile, and the image runs the packaged binary.
#[test]
fn the_package_metadata_the_script_and_the_image_agree() {
    let manifest: toml::Table = read("crates/tierd/Cargo.toml").parse().expect("Cargo.toml");
    let deb = manifest["package"]["metadata"]["deb"]
        .as_table()
        .expect("[package.metadata.deb]");
    let script = read("scripts/package.sh");
    let mut dests = BTreeMap::new();
    for a in deb["assets"].as_array().expect("assets") {
        let a = a.as_array().expect("[source, dest, mode]");
        let (src, dest) = (a[0].as_str().expect("src"), a[1].as_str().expect("dest"));
        if let Some(made) = src.strip_prefix("../../target/package/") {
            // package.sh writes it: its directory is made and filled there.
            let dir = made.split('/').next().expect("a directory");
            assert!(
                script.contains(&format!("$out/{dir}")),
                "{src}: package.sh never writes it"
            );
        } else {
            let rel = src.strip_prefix("../../").expect("relative to the crate");
            assert!(
                repo().join(rel).is_file(),
                "{src} is not a file of the repository"
            );
        }
        dests.insert(dest.to_string(), src.to_string());
    }
    assert_eq!(dests["usr/bin/"], "../../target/package/bin/tierd");
    assert_eq!(dests["etc/tierd/tierd.toml"], "../../deploy/tierd.toml");
    let conf: Vec<&str> = deb["conf-files"]
        .as_array()
        .expect("conf-files")
        .iter()
        .filter_map(toml::Value::as_str)
        .collect();
    assert_eq!(conf, ["/etc/tierd/tierd.toml"]);
    // The packaged unit is deploy/tierd.service with the binary in /usr/bin.
    assert!(
        script.contains("s|/usr/local/bin/tierd|/usr/bin/tierd|g"),
        "{script}"
    );
    let unit = read("deploy/tierd.service");
    assert!(
        unit.contains("ExecStart=/usr/local/bin/tierd run --config /etc/tierd/tierd.toml"),
        "the path package.sh rewrites"
    );
    assert!(
        unit.contains("ExecReload=/bin/kill -HUP $MAINPID"),
        "systemctl reload"
    );
    let units = deb["systemd-units"].as_table().expect("systemd-units");
    assert_eq!(units["unit-name"].as_str(), Some("tierd"));
    assert_eq!(units["enable"].as_bool(), Some(false), "installed disabled");
    // The image installs the package package.sh makes and runs its binary.
    let docker = read("deploy/k8s/Dockerfile");
    assert!(docker.contains("./scripts/package.sh"), "{docker}");
    assert!(docker.contains("dpkg -i /tmp/tierd.deb"), "{docker}");
    assert!(
        docker.contains("ENTRYPOINT [\"/usr/bin/tierd\"]"),
        "{docker}"
    );
    let pinned = read("scripts/package-deps.sh");
    let version = |t: &str| {
        t.split("cargo install cargo-deb --locked --version ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .map(|v| v.trim_end_matches('`').to_string())
    };
    assert!(version(&pinned).is_some(), "package-deps.sh pins cargo-deb");
    assert_eq!(version(&docker), version(&pinned), "one cargo-deb version");
}
