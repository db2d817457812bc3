//! The metrics endpoint against the clients issue 12 names, on a real listener
//! (127.0.0.1:0): a flood of idle connections, an endless header, a slow reader, a stopped
//! tiering loop. Each checks that probes are still answered and that what the server holds
//! stays bounded, and reads the server's own counters to see which defence acted.
//!
//! Probe latencies are asserted with generous bounds (5 s each: CI is a busy 2-core machine)
//! and printed (`cargo test -p tierd-daemon --test metrics_endpoint -- --nocapture`).
// Integration tests are their own crate; the unit-test lint does not apply here.
#![allow(clippy::tests_outside_test_module)]

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tierd_daemon::metrics::{
    Heartbeat, MetricsServer, ProcessSnapshot, ServerOptions, SharedSnapshot, Snapshot,
};
use tierd_daemon::serve::{HttpCounters, Limits};

/// Each probe must be answered within this (generous: CI is a busy 2-core machine).
const PROBE_BOUND: Duration = Duration::from_secs(5);

fn snapshot(processes: u32) -> Snapshot {
    Snapshot {
        version: "test".into(),
        processes: (0..processes)
            .map(|i| ProcessSnapshot {
                pid: 1000 + i,
                comm: format!("worker-{i}"),
                cgroup: "/kubepods.slice/pod-with-a-long-name".into(),
                pages_per_node: [(0, u64::from(i)), (1, 2 * u64::from(i))]
                    .into_iter()
                    .collect(),
                hot_pages_per_node: [(1, u64::from(i))].into_iter().collect(),
            })
            .collect(),
        ..Snapshot::default()
    }
}

fn start(snap: Snapshot, opts: ServerOptions) -> MetricsServer {
    let shared: SharedSnapshot = tierd_daemon::metrics::shared_snapshot(snap);
    MetricsServer::start_with("127.0.0.1:0".parse().expect("addr"), shared, opts)
        .expect("bind loopback")
}

/// One GET on a fresh connection: (status, body, time to the full answer).
fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String, Duration)> {
    let t0 = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, PROBE_BOUND * 2)?;
    s.set_read_timeout(Some(PROBE_BOUND * 2))?;
    s.set_write_timeout(Some(PROBE_BOUND * 2))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: tierd\r\n\r\n")?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    if buf.is_empty() {
        // Closed without a byte of answer: the server dropped the connection.
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {text:?}")))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body, t0.elapsed()))
}

/// Probes `/metrics` and `/healthz` `n` times; every one must be a 200 within the bound, at
/// the first try. Returns the latencies, sorted.
fn probe(addr: SocketAddr, n: usize) -> Vec<Duration> {
    probe_tries(addr, n, 1).0
}

/// [`probe`] while other clients flood the server with connections: a probe's connection can
/// be evicted (the oldest that has not sent its request goes at the cap) when this thread
/// stalls between its connect and its request while the cap's worth of newer connections
/// arrive, as on a busy host; it then fails before any answer (a reset, a broken pipe or a
/// close without a byte) and is tried again, as a scraper tries at its next scrape. Once the
/// flood ends nothing evicts a probe, so each gets in within a bounded number of tries.
/// Returns the latencies of the answers, sorted, and how many tries were evicted.
fn probe_during_flood(addr: SocketAddr, n: usize) -> (Vec<Duration>, usize) {
    probe_tries(addr, n, 50)
}

/// Probes `/metrics` and `/healthz` `n` times, each up to `tries_max` times while it is
/// dropped before any answer; every answer must be a 200 within the bound. Returns the
/// latencies, sorted, and how many tries were dropped.
fn probe_tries(addr: SocketAddr, n: usize, tries_max: usize) -> (Vec<Duration>, usize) {
    let mut lat = Vec::new();
    let mut evicted = 0;
    for i in 0..n {
        let path = if i % 2 == 0 { "/metrics" } else { "/healthz" };
        let mut tries = 0;
        let (status, body, t) = loop {
            tries += 1;
            match get(addr, path) {
                Ok(answer) => break answer,
                Err(e)
                    if tries < tries_max
                        && matches!(
                            e.kind(),
                            std::io::ErrorKind::BrokenPipe
                                | std::io::ErrorKind::ConnectionReset
                                | std::io::ErrorKind::ConnectionAborted
                                | std::io::ErrorKind::UnexpectedEof
                        ) =>
                {
                    evicted += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("probe {i}, try {tries}: {e}"),
            }
        };
        assert_eq!(status, 200, "probe {i} {path}: {body}");
        assert!(t < PROBE_BOUND, "probe {i} {path} took {t:?}");
        lat.push(t);
    }
    lat.sort();
    (lat, evicted)
}

fn report(what: &str, lat: &[Duration]) {
    let q = |f: f64| {
        // An index into a short vector.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let i = ((lat.len() - 1) as f64 * f).round() as usize;
        lat[i].as_secs_f64() * 1e3
    };
    eprintln!(
        "{what}: {} probes, latency ms min {:.2} median {:.2} p90 {:.2} max {:.2}",
        lat.len(),
        q(0.0),
        q(0.5),
        q(0.9),
        q(1.0)
    );
}

/// Waits (bounded) for the server's counters to satisfy `cond`.
fn wait_for(srv: &MetricsServer, what: &str, cond: impl Fn(&HttpCounters) -> bool) {
    let t0 = Instant::now();
    while !cond(&srv.http_counters()) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{what}: {:?}",
            srv.http_counters()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The soft RLIMIT_NOFILE of this process, from /proc/self/limits (no unsafe getrlimit).
fn nofile_soft_limit() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").expect("/proc/self/limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files");
    line.split_whitespace()
        .nth(3)
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}

#[test]
fn hundreds_of_idle_connections_do_not_lock_out_probes_and_descriptors_stay_capped() {
    let limits = Limits::default();
    let cap = limits.max_connections;
    let srv = start(snapshot(50), ServerOptions::default());
    let addr = srv.addr();
    // As many idle clients as this process's descriptors allow without raising anything:
    // each takes one descriptor here, and the server (same process) holds at most `cap`.
    let n = (nofile_soft_limit() / 2).min(1000);
    assert!(
        n > cap + 50,
        "the test needs more idle clients than the cap ({n})"
    );
    let fds_before = open_fds();
    let mut idle = Vec::with_capacity(n);
    for i in 0..n {
        let mut s = TcpStream::connect(addr).expect("connect idle");
        // Some send half a request line (slowloris), the rest nothing at all.
        if i % 3 == 0 {
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ");
        }
        idle.push(s);
    }
    wait_for(&srv, "every idle connection accepted", |c| {
        c.connections_accepted >= n as u64
    });
    let lat = probe(addr, 40);
    report(&format!("{n} idle connections held"), &lat);
    let c = srv.http_counters();
    // The server held at most the cap; the rest were evicted to make room.
    assert!(c.connections_open_peak <= cap as u64, "{c:?}");
    assert!(c.connections_evicted >= (n - cap) as u64, "{c:?}");
    // This process's descriptors: the idle clients' plus at most the cap on the server side.
    let fds = open_fds();
    assert!(
        fds <= fds_before + n + cap + 8,
        "{fds} descriptors open (before {fds_before}, {n} clients, cap {cap})"
    );
    // A second wave opened while the probes run, the first still held: probes still get in
    // (a try evicted before it sent its request, when this thread stalled, is tried again).
    let flood = std::thread::spawn(move || {
        let mut wave = Vec::new();
        for _ in 0..(n / 2) {
            wave.push(TcpStream::connect(addr).expect("connect idle"));
        }
        wave
    });
    let (lat, evicted) = probe_during_flood(addr, 40);
    report(
        &format!("while a second wave connects ({evicted} tries evicted before their request)"),
        &lat,
    );
    let wave = flood.join().expect("flood");
    let c = srv.http_counters();
    eprintln!("after both waves: {c:?}");
    assert!(c.connections_open_peak <= cap as u64, "{c:?}");
    drop(idle);
    drop(wave);
}

#[test]
fn an_idle_connection_is_closed_at_the_header_timeout() {
    let opts = ServerOptions {
        limits: Limits {
            header_read_timeout: Duration::from_millis(500),
            ..Limits::default()
        },
        ..ServerOptions::default()
    };
    let srv = start(snapshot(1), opts);
    let mut s = TcpStream::connect(srv.addr()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let t0 = Instant::now();
    let mut buf = [0u8; 64];
    // The server closes it: EOF (or a reset), not our 30 s read timeout.
    match s.read(&mut buf) {
        Ok(0) => {}
        Ok(k) => panic!("unexpected answer {:?}", String::from_utf8_lossy(&buf[..k])),
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    wait_for(&srv, "the header timeout counted", |c| {
        c.header_timeouts == 1
    });
}

#[test]
fn an_endless_header_gets_431_and_is_closed_with_bounded_reads() {
    let srv = start(snapshot(1), ServerOptions::default());
    let mut s = TcpStream::connect(srv.addr()).expect("connect");
    s.set_write_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(b"GET /metrics HTTP/1.1\r\nX-Endless: ")
        .expect("write");
    // Keep the header going: 16 KiB, twice the limit, in one go, then read the answer.
    s.write_all(&[b'a'; 16 << 10])
        .expect("write past the limit");
    let mut head = [0u8; 12];
    let answer = s.read_exact(&mut head);
    if answer.is_ok() {
        assert_eq!(
            &head,
            b"HTTP/1.1 431",
            "{:?}",
            String::from_utf8_lossy(&head)
        );
    }
    wait_for(&srv, "the 431 counted", |c| c.header_too_large == 1);
    // The server stopped reading: writing on fails long before 64 MiB have gone (the
    // kernel's buffers hold a few hundred KiB at most), so nothing grows with the header.
    let mut sent = 16usize << 10;
    let chunk = [b'a'; 64 << 10];
    let closed = loop {
        match s.write(&chunk) {
            Ok(k) => sent += k,
            Err(e) => break e,
        }
        assert!(sent < 64 << 20, "the server kept reading: {sent} bytes");
    };
    eprintln!(
        "endless header: answer {:?}, closed after {sent} bytes written ({closed})",
        answer.map(|()| String::from_utf8_lossy(&head).into_owned())
    );
    assert_ne!(
        closed.kind(),
        ErrorKind::WouldBlock,
        "a timeout, not a close"
    );
    let lat = probe(srv.addr(), 10);
    report("after the endless header", &lat);
}

#[test]
fn a_one_byte_a_second_reader_does_not_block_probes_and_is_dropped_at_the_deadline() {
    // A /status of 80000 processes is 10+ MB: far more than the socket buffers hold, so
    // the server is stuck writing to the slow reader until its deadline.
    let opts = ServerOptions {
        limits: Limits {
            request_timeout: Duration::from_secs(5),
            ..Limits::default()
        },
        ..ServerOptions::default()
    };
    let srv = start(snapshot(80_000), opts);
    let addr = srv.addr();
    let mut slow = TcpStream::connect(addr).expect("connect");
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(slow, "GET /status HTTP/1.1\r\nHost: tierd\r\n\r\n").expect("request");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop_reader = Arc::clone(&stop);
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut b = [0u8; 1];
        // One byte a second until the server has given up, then the rest as fast as the
        // kernel hands it over: what the server had sent before it dropped us.
        while !stop_reader.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok(1) = slow.read(&mut b) {
                got.push(b[0]);
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        let ended = slow.read_to_end(&mut got);
        (got, ended)
    });
    // While the slow reader holds its connection, probes are answered.
    let t0 = Instant::now();
    let lat = probe(addr, 20);
    report("with a one-byte-a-second reader", &lat);
    let (probes_done, dropped) = (t0.elapsed(), srv.http_counters().request_timeouts);
    eprintln!("slow reader: probes done {probes_done:?} after it connected, dropped: {dropped}");
    if probes_done < Duration::from_secs(5) {
        // Every probe was answered while the slow reader still held its connection.
        assert_eq!(dropped, 0);
    }
    wait_for(&srv, "the request timeout counted", |c| {
        c.request_timeouts == 1
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (got, ended) = reader.join().expect("reader");
    // The connection ended (EOF or reset) before the whole answer was sent.
    let text = String::from_utf8_lossy(&got);
    let length: usize = text
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")?
                .trim()
                .parse()
                .ok()
        })
        .expect("content-length in the head");
    let head = text.find("\r\n\r\n").expect("head") + 4;
    eprintln!(
        "slow reader: {} of {length} body bytes before the server dropped it ({ended:?})",
        got.len() - head
    );
    assert!(got.len() - head < length, "the whole answer was sent");
    if let Err(e) = ended {
        assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
    }
}

#[test]
fn healthz_fails_when_the_loop_stops_beating_and_recovers_when_it_beats_again() {
    let hb = Heartbeat::new();
    let opts = ServerOptions {
        heartbeat: Some(hb.clone()),
        liveness_timeout: Duration::from_secs(1),
        ..ServerOptions::default()
    };
    let srv = start(snapshot(1), opts);
    let addr = srv.addr();
    // Beating: 200 (each try beats first, so only a stall over 1 s between beat and answer
    // could fail it; the loop retries that).
    let beating = |hb: &Heartbeat| {
        for _ in 0..20 {
            hb.beat();
            let (status, body, _) = get(addr, "/healthz").expect("healthz");
            if status == 200 {
                assert!(body.starts_with("ok: last pass"), "{body}");
                return;
            }
        }
        panic!("never 200 while beating");
    };
    beating(&hb);
    // The loop stops: 503 with a one-line reason once the timeout has passed.
    let t0 = Instant::now();
    let body = loop {
        let (status, body, _) = get(addr, "/healthz").expect("healthz");
        if status == 503 {
            break body;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "never 503");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(t0.elapsed() >= Duration::from_millis(500), "503 too early");
    assert!(
        body.starts_with("tiering loop has not completed a pass for"),
        "{body}"
    );
    assert_eq!(body.trim_end().lines().count(), 1, "{body}");
    let (_, metrics, _) = get(addr, "/metrics").expect("metrics");
    assert!(
        metrics.contains("tierd_since_last_pass_seconds "),
        "{metrics}"
    );
    // And back.
    beating(&hb);
}

#[test]
fn status_carries_the_servers_counters_and_other_methods_are_refused() {
    let srv = start(snapshot(3), ServerOptions::default());
    let (status, body, _) = get(srv.addr(), "/status").expect("status");
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert!(v["http"]["connections_accepted"].as_u64() >= Some(1), "{v}");
    // The document still reads as a Snapshot (tierd status, tierd top).
    let snap: Snapshot = serde_json::from_str(&body).expect("a snapshot");
    assert_eq!(snap.processes.len(), 3);
    let mut s = TcpStream::connect(srv.addr()).expect("connect");
    s.write_all(b"POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
        .expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    assert!(text.starts_with("HTTP/1.1 405"), "{text}");
}
