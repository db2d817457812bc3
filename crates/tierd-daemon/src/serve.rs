//! The HTTP server under the metrics endpoint, built so that no client can hurt the daemon.
//!
//! tierd runs as root next to the workloads it serves; any local user can connect to its
//! metrics port. The server therefore bounds everything a client controls:
//!
//! | what a client does | what bounds it |
//! | --- | --- |
//! | connects and sends nothing | the header read timeout ([`Limits::header_read_timeout`]) |
//! | sends a header that never ends | the header size limit: 431, then closed ([`Limits::max_header_bytes`]) |
//! | reads the answer one byte a second | the whole-request deadline ([`Limits::request_timeout`]) |
//! | opens a thousand connections | the cap ([`Limits::max_connections`]): at the cap a new connection evicts the oldest one that has not sent its request, so a probe still gets in (one that stalls between its connect and its request while the cap's worth of newer connections arrive can be evicted, and gets in at its next try) |
//! | makes accept(2) fail (EMFILE ...) | the error is counted, the loop backs off and goes on |
//!
//! Every connection serves one request and closes (no keep-alive): then the whole-request
//! deadline is simply a deadline on the connection, and "a connection that has not completed
//! a request" is every connection, so eviction needs no per-request bookkeeping beyond
//! "has its request head arrived". Scrapes are seconds apart; a TCP handshake per scrape
//! costs nothing next to rendering the text.
//!
//! Why hyper 1.x on a tokio current-thread runtime: its HTTP/1 server has the two limits that
//! matter built in and tested by its users at scale (`header_read_timeout`, which also closes
//! an idle connection that never sends a byte, and `max_buf_size`/`max_header_size`, which
//! answer 431 and close), as node_exporter relies on Go's `net/http` timeouts. One thread
//! serves every connection asynchronously, so a slow reader only holds its own socket, never
//! the other clients or the tiering loop. tiny_http 0.12, used before, has no timeout, no
//! header limit and no connection cap. What no crate does is written here: the connection
//! cap with eviction, the accept-error back-off (as Go's `http.Server.Serve` does it: 5 ms
//! doubling to 1 s) and the counters.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// What the server allows a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The request head (request line and headers) must arrive within this long of the
    /// connection's accept; an idle connection is closed after it.
    pub header_read_timeout: Duration,
    /// The whole exchange (head, answer written and read by the client) must end within this
    /// long of the accept; a slow reader is dropped at it.
    pub request_timeout: Duration,
    /// The largest request head accepted (hyper's floor is 8192); a longer one gets 431.
    pub max_header_bytes: usize,
    /// Connections open at once; at the cap a new connection evicts an older one.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        // Prometheus' default scrape timeout is 10 s and a kubelet probe's is 1 s; a client
        // that has not sent its request after 5 s is not one of them.
        Limits {
            header_read_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            max_header_bytes: 8192,
            // A few scrapers and probes need a handful; 128 sockets are nothing next to the
            // daemon's descriptor limit (1024 soft by default, more under systemd).
            max_connections: 128,
        }
    }
}

/// What the server survived, since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HttpCounters {
    /// Connections accepted.
    pub connections_accepted: u64,
    /// Connections open now.
    pub connections_open: u64,
    /// The most connections open at once since the start (at most the cap).
    pub connections_open_peak: u64,
    /// Connections closed to make room at the cap.
    pub connections_evicted: u64,
    /// Connections closed because the request head did not arrive in time (idle or slow).
    pub header_timeouts: u64,
    /// Connections closed because the whole exchange did not end in time (slow reader).
    pub request_timeouts: u64,
    /// Requests refused with 431 because the head was too large.
    pub header_too_large: u64,
    /// Requests answered.
    pub requests: u64,
    /// accept(2) failures, by reason.
    pub accept_errors: AcceptErrors,
}

/// accept(2) failures by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AcceptErrors {
    /// EMFILE: the process is out of descriptors.
    pub emfile: u64,
    /// ENFILE: the system is out of descriptors.
    pub enfile: u64,
    /// ENOMEM or ENOBUFS.
    pub enomem: u64,
    /// ECONNABORTED: the client gave up before the accept.
    pub econnaborted: u64,
    /// Anything else.
    pub other: u64,
}

impl AcceptErrors {
    /// `(reason, count)` pairs, as the `reason` label of the counter.
    #[must_use]
    pub fn by_reason(&self) -> [(&'static str, u64); 5] {
        [
            ("emfile", self.emfile),
            ("enfile", self.enfile),
            ("enomem", self.enomem),
            ("econnaborted", self.econnaborted),
            ("other", self.other),
        ]
    }

    /// Total.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.by_reason().iter().map(|(_, v)| v).sum()
    }
}

/// The live counters, shared between the server thread and whoever reads them.
#[derive(Debug, Default)]
pub struct HttpStats {
    accepted: AtomicU64,
    open: AtomicU64,
    open_peak: AtomicU64,
    evicted: AtomicU64,
    header_timeouts: AtomicU64,
    request_timeouts: AtomicU64,
    header_too_large: AtomicU64,
    requests: AtomicU64,
    emfile: AtomicU64,
    enfile: AtomicU64,
    enomem: AtomicU64,
    econnaborted: AtomicU64,
    accept_other: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl HttpStats {
    /// The counters now.
    #[must_use]
    pub fn counters(&self) -> HttpCounters {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        HttpCounters {
            connections_accepted: g(&self.accepted),
            connections_open: g(&self.open),
            connections_open_peak: g(&self.open_peak),
            connections_evicted: g(&self.evicted),
            header_timeouts: g(&self.header_timeouts),
            request_timeouts: g(&self.request_timeouts),
            header_too_large: g(&self.header_too_large),
            requests: g(&self.requests),
            accept_errors: AcceptErrors {
                emfile: g(&self.emfile),
                enfile: g(&self.enfile),
                enomem: g(&self.enomem),
                econnaborted: g(&self.econnaborted),
                other: g(&self.accept_other),
            },
        }
    }

    /// Counts an accept(2) failure; returns whether the loop should back off (the failure is
    /// about resources, which a retry at once would not find either).
    fn accept_failed(&self, e: &io::Error) -> bool {
        let (counter, back_off) = match e.raw_os_error() {
            Some(libc::EMFILE) => (&self.emfile, true),
            Some(libc::ENFILE) => (&self.enfile, true),
            Some(libc::ENOMEM | libc::ENOBUFS) => (&self.enomem, true),
            // The client's connection died in the queue; the next one is fine.
            Some(libc::ECONNABORTED) => (&self.econnaborted, false),
            _ => (&self.accept_other, true),
        };
        bump(counter);
        back_off
    }
}

/// One answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// Body.
    pub body: String,
}

/// Answers a request from its path. Called on the server thread; it must not block for long
/// (it renders from a snapshot already taken).
pub type Handler = Arc<dyn Fn(&str) -> Reply + Send + Sync>;

/// Where connections come from: the listener, or in tests a listener with faults injected.
pub(crate) trait Acceptor {
    /// The next connection, or why accept(2) failed.
    fn accept(&mut self) -> impl Future<Output = io::Result<TcpStream>>;
}

impl Acceptor for tokio::net::TcpListener {
    async fn accept(&mut self) -> io::Result<TcpStream> {
        tokio::net::TcpListener::accept(self).await.map(|(s, _)| s)
    }
}

/// Decrements the open-connection gauge when the connection's task ends or is aborted.
struct OpenGuard(Arc<HttpStats>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Conn {
    task: JoinHandle<()>,
    /// Whether its request head has arrived (eviction spares such connections first).
    requested: Arc<AtomicBool>,
}

/// The connection to close to make room: the oldest that has not sent its request, or when
/// every connection is being answered, the oldest (a slow reader).
fn victim(conns: &BTreeMap<u64, Conn>) -> Option<u64> {
    conns
        .iter()
        .find(|(_, c)| !c.requested.load(Ordering::Relaxed))
        .or_else(|| conns.iter().next())
        .map(|(k, _)| *k)
}

/// Accepts and serves connections until the future is dropped.
pub(crate) async fn serve<A: Acceptor>(
    mut acceptor: A,
    limits: Limits,
    stats: Arc<HttpStats>,
    handler: Handler,
) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .keep_alive(false)
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .max_header_size(limits.max_header_bytes);
    let mut conns: BTreeMap<u64, Conn> = BTreeMap::new();
    let mut seq = 0u64;
    let mut backoff = Duration::ZERO;
    loop {
        let stream = match acceptor.accept().await {
            Ok(s) => {
                backoff = Duration::ZERO;
                s
            }
            Err(e) => {
                if stats.accept_failed(&e) {
                    backoff = (backoff * 2).clamp(Duration::from_millis(5), Duration::from_secs(1));
                    tokio::time::sleep(backoff).await;
                }
                continue;
            }
        };
        bump(&stats.accepted);
        conns.retain(|_, c| !c.task.is_finished());
        if conns.len() >= limits.max_connections.max(1) {
            if let Some(c) = victim(&conns).and_then(|k| conns.remove(&k)) {
                c.task.abort();
                bump(&stats.evicted);
                // Let the runtime drop the aborted connection (and close its socket) before
                // this one is served, so descriptors stay within the cap. The task is
                // dropped the next time the runtime runs it, within a few yields; the bound
                // only guards against a runtime that never does.
                for _ in 0..1000 {
                    if c.task.is_finished() {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
            }
        }
        let open = stats.open.fetch_add(1, Ordering::Relaxed) + 1;
        stats.open_peak.fetch_max(open, Ordering::Relaxed);
        let guard = OpenGuard(Arc::clone(&stats));
        let requested = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(connection(
            stream,
            builder.clone(),
            limits.request_timeout,
            Arc::clone(&requested),
            Arc::clone(&handler),
            guard,
        ));
        seq += 1;
        conns.insert(seq, Conn { task, requested });
    }
}

async fn connection(
    stream: TcpStream,
    builder: http1::Builder,
    request_timeout: Duration,
    requested: Arc<AtomicBool>,
    handler: Handler,
    guard: OpenGuard,
) {
    let stats = Arc::clone(&guard.0);
    let svc_stats = Arc::clone(&stats);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        requested.store(true, Ordering::Relaxed);
        bump(&svc_stats.requests);
        let resp = respond(&req, &handler);
        async move { Ok::<_, Infallible>(resp) }
    });
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    match tokio::time::timeout(request_timeout, conn).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) if e.is_timeout() => bump(&stats.header_timeouts),
        Ok(Err(e)) if e.is_parse_too_large() => bump(&stats.header_too_large),
        // A client that hung up or sent garbage is not the daemon's problem.
        Ok(Err(_)) => {}
        Err(_elapsed) => bump(&stats.request_timeouts),
    }
    drop(guard);
}

fn respond(req: &Request<Incoming>, handler: &Handler) -> Response<Full<Bytes>> {
    let reply = if matches!(*req.method(), Method::GET | Method::HEAD) {
        handler(req.uri().path())
    } else {
        Reply {
            status: 405,
            content_type: "text/plain; charset=utf-8",
            body: "only GET and HEAD\n".into(),
        }
    };
    let mut resp = Response::new(Full::new(Bytes::from(reply.body)));
    *resp.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(reply.content_type),
    );
    if reply.status == 405 {
        resp.headers_mut().insert(
            hyper::header::ALLOW,
            hyper::header::HeaderValue::from_static("GET, HEAD"),
        );
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{MetricsServer, ServerOptions, SharedSnapshot, Snapshot};
    use std::collections::VecDeque;
    use std::io::{Read, Write};

    /// The listener, with accept(2) failures injected before it.
    struct Faulty {
        listener: tokio::net::TcpListener,
        faults: VecDeque<i32>,
    }

    impl Acceptor for Faulty {
        async fn accept(&mut self) -> io::Result<TcpStream> {
            if let Some(errno) = self.faults.pop_front() {
                return Err(io::Error::from_raw_os_error(errno));
            }
            self.listener.accept().await.map(|(s, _)| s)
        }
    }

    fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").expect("write");
        let mut text = String::new();
        s.read_to_string(&mut text).expect("read");
        text
    }

    #[test]
    fn the_accept_loop_survives_emfile_enfile_enomem_and_aborted_connections() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .expect("runtime");
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let faults = [
            libc::EMFILE,
            libc::EMFILE,
            libc::EMFILE,
            libc::ENFILE,
            libc::ENOMEM,
            libc::ENOBUFS,
            libc::ECONNABORTED,
            libc::EPROTO,
        ];
        let acceptor = Faulty {
            listener,
            faults: faults.into_iter().collect(),
        };
        let shared: SharedSnapshot = crate::metrics::shared_snapshot(Snapshot::default());
        let srv = MetricsServer::spawn(rt, addr, acceptor, shared, ServerOptions::default())
            .expect("spawn");
        // The first connection waits behind the injected failures, then is served.
        let t0 = std::time::Instant::now();
        let text = get(addr, "/healthz");
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        let c = srv.http_counters().accept_errors;
        assert_eq!(
            (c.emfile, c.enfile, c.enomem, c.econnaborted, c.other),
            (3, 1, 2, 1, 1),
            "{c:?}"
        );
        // Backed off for the resource errors (5 + 10 + 20 + 40 + 80 + 160 + 320 ms), not
        // for the aborted connection.
        assert!(
            t0.elapsed() >= Duration::from_millis(600),
            "{:?}",
            t0.elapsed()
        );
        // And it goes on serving.
        assert!(
            get(addr, "/metrics").contains("tierd_http_accept_errors_total{reason=\"emfile\"} 3")
        );
    }

    #[test]
    fn eviction_spares_connections_whose_request_is_being_answered() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let mut conns = BTreeMap::new();
        let _g = rt.enter();
        for (k, requested) in [(1u64, true), (2, false), (3, true), (4, false)] {
            let task = tokio::spawn(async {});
            conns.insert(
                k,
                Conn {
                    task,
                    requested: Arc::new(AtomicBool::new(requested)),
                },
            );
        }
        // The oldest that has not sent its request.
        assert_eq!(victim(&conns), Some(2));
        conns.remove(&2);
        assert_eq!(victim(&conns), Some(4));
        conns.remove(&4);
        // Every one being answered: the oldest (a slow reader).
        assert_eq!(victim(&conns), Some(1));
        conns.clear();
        assert_eq!(victim(&conns), None);
    }
}
