//! The sources against a fake daemon (a `/status` server on a free port) and a small
//! simulated run.
#![allow(clippy::tests_outside_test_module, clippy::unwrap_used)]

use std::time::Duration;

use tierd_linux::status::{NodeSnapshot, ProcessSnapshot, Snapshot};
use tierd_top::render::plain;
use tierd_top::source::{daemon_view, sim_final, spawn_daemon, SimSpec, TopError, Update};

fn fake_daemon(snap: Snapshot) -> std::net::SocketAddr {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let addr = server.server_addr().to_ip().unwrap();
    let body = serde_json_body(&snap);
    std::thread::spawn(move || {
        for req in server.incoming_requests() {
            let resp = if req.url() == "/status" {
                tiny_http::Response::from_string(body.clone())
            } else {
                tiny_http::Response::from_string("no").with_status_code(404)
            };
            let _ = req.respond(resp);
        }
    });
    addr
}

fn serde_json_body(s: &Snapshot) -> String {
    // What the daemon serves at /status.
    serde_json::to_string_pretty(s).unwrap()
}

fn snapshot() -> Snapshot {
    let mut s = Snapshot {
        version: "0.1.0".into(),
        uptime_s: 5.0,
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
            pid: 4321,
            comm: "chase".into(),
            cgroup: "/bench".into(),
            pages_per_node: [(0, 1 << 18), (1, 1 << 19)].into_iter().collect(),
            hot_pages_per_node: [(1, 1 << 17)].into_iter().collect(),
        }],
        ..Snapshot::default()
    };
    s.engine.insert("pgpromote_success".into(), 1000);
    s
}

#[test]
fn a_daemon_status_becomes_a_view() {
    let addr = fake_daemon(snapshot());
    let v = daemon_view(addr).unwrap();
    assert_eq!(v.processes.len(), 1);
    assert_eq!(v.processes[0].pid, Some(4321));
    assert_eq!(v.processes[0].hot(), 1 << 17);
    assert_eq!(v.nodes[1].free_pages, (6 << 30) / 4096);
    let text = plain(&v, None);
    assert!(text.contains("4321  chase  /bench"), "{text}");
    // Live: the thread sends views until the receiver goes.
    let rx = spawn_daemon(addr, Duration::from_millis(10));
    for _ in 0..2 {
        match rx.recv_timeout(Duration::from_secs(10)).unwrap() {
            Update::View(v) => assert_eq!(v.promoted_pages, 1000),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn no_daemon_is_a_clear_error() {
    // A port nothing listens on: bind one, then drop it.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let e = daemon_view(addr).unwrap_err();
    assert!(matches!(e, TopError::Fetch { .. }));
    assert!(e.to_string().contains(&addr.to_string()), "{e}");
}

#[test]
fn a_simulated_run_ends_with_its_hot_set_promoted() {
    let spec = SimSpec {
        scenario: "pointer-chase".into(),
        config: Some("T1".into()),
        scale: 1.0 / 64.0,
    };
    let (v, r) = sim_final(&spec).unwrap();
    assert!(v.source.contains("pointer-chase T1"), "{}", v.source);
    assert!((v.time_s - 240.0).abs() < 1e-9);
    let chase = &v.processes[0];
    assert_eq!(chase.name, "chase");
    // T1 promotes most of the hot quarter of the buffer to node 0 by the end.
    let hot_fast = chase.hot_pages.get(&0).copied().unwrap_or(0);
    assert!(hot_fast * 2 > chase.hot(), "{hot_fast} of {}", chase.hot());
    assert!(v.promoted_pages > 0);
    assert!(r.is_some(), "rates over the last sample");
    assert_eq!(v.nodes.len(), 3);
}
