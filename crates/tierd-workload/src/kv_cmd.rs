//! `kv`, `hotpages` and `where`: the load generator for real servers (memcached, redis) and
//! the two probes the lab uses to find and locate the pages of the hot keys. The parsing and
//! arithmetic are in [`tierd_workload::kv`]; this is the I/O around them.

use std::fs::File;
use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use clap::Subcommand;
use tierd_linux::mover::Mover;
use tierd_linux::read::numa_maps::{read_maps, read_numa_maps};
use tierd_linux::sys;
use tierd_workload::chase::SplitMix64;
use tierd_workload::kv::{
    cold_counts, fill_order, fill_value, parse_mc_get, parse_mc_store, parse_proc_net_tcp,
    parse_resp_get, parse_resp_ok, push_get, push_set, where_line, FillOrder, GetReply, Histogram,
    HotScanner, NodeCounts, Parsed, Proto, ProtoError, Zipf, MAX_KEYS,
};

use crate::{emit, terminated};

/// The server to drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Server {
    /// memcached, text protocol.
    Memcached,
    /// redis-server, RESP.
    Redis,
}

/// `--fill-order`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Order {
    /// Ids 0, 1, 2, ...: the hot keys end up packed together in the server's memory.
    HotFirst,
    /// A seeded random permutation: the hot keys are spread over the store.
    Random,
    /// Ids n-1, ..., 0: the hot keys are written last, packed together after the cold ones.
    ColdFirst,
}

#[derive(Subcommand, Debug)]
pub enum KvCmd {
    /// Fill a memcached or redis server on 127.0.0.1 with keys `tk:%08d:`, then read them
    /// with Zipf popularity (rank r = key id r) and report ops/s and latency percentiles.
    Kv {
        /// Which server (and protocol).
        #[arg(long, value_enum)]
        server: Server,
        /// TCP port on 127.0.0.1 (default: 11211 for memcached, 6379 for redis).
        #[arg(long)]
        port: Option<u16>,
        /// Keys to store.
        #[arg(long, default_value_t = 131_072)]
        keys: u64,
        /// Bytes per value (the key text repeated; at least 12).
        #[arg(long, default_value_t = 1024)]
        value_bytes: usize,
        /// Zipf exponent of the key popularity (YCSB's 0.99 by default; 0 is uniform).
        #[arg(long, default_value_t = 0.99)]
        zipf: f64,
        /// The hot keys: ids below this (reported as hot_share).
        #[arg(long, default_value_t = 4096)]
        hot_keys: u64,
        /// Reads choose among the ids below this (Zipf over them); the keys above are stored
        /// and never read, as most of a cache's items are not read again (default: --keys).
        #[arg(long)]
        read_keys: Option<u64>,
        /// Order of the fill.
        #[arg(long, value_enum, default_value = "hot-first")]
        fill_order: Order,
        /// Seconds of load after the fill.
        #[arg(long)]
        secs: f64,
        /// Report period in milliseconds.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// Connections, one thread each.
        #[arg(long, default_value_t = 1)]
        conns: usize,
        /// Keys per request (memcached `get k1 k2 ..`, redis `MGET`).
        #[arg(long, default_value_t = 16)]
        batch: usize,
        /// Seed of the key choice (connection i uses seed + i) and of the random fill.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The server's pid for the ready line (default: the process listening on --port).
        #[arg(long)]
        server_pid: Option<u32>,
    },
    /// Scan a process's anonymous memory once for key texts `tk:%08d:` and write the pages
    /// that hold keys with id below --hot-keys (hex, one per line).
    Hotpages {
        /// The server's pid.
        #[arg(long)]
        pid: u32,
        /// Ids below this are hot.
        #[arg(long)]
        hot_keys: u64,
        /// File to write the page addresses to.
        #[arg(long)]
        out: PathBuf,
        /// Also write the pages that hold only cold keys' texts (the cold items) here.
        #[arg(long)]
        cold_out: Option<PathBuf>,
    },
    /// Print, in numa_maps line format, the nodes of the pages listed in --pages (`hot`) and
    /// of the process's other anonymous pages (`cold`); with --cold-pages, `cold` is the pages
    /// listed there (the cold items) and `other` the rest of its anonymous pages (the server's
    /// own structures: hash table, buffers, stacks).
    Where {
        /// The server's pid.
        #[arg(long)]
        pid: u32,
        /// The file `hotpages` wrote.
        #[arg(long)]
        pages: PathBuf,
        /// The file `hotpages --cold-out` wrote.
        #[arg(long)]
        cold_pages: Option<PathBuf>,
    },
}

/// Run one of the subcommands.
pub fn run(cmd: KvCmd) -> Result<()> {
    match cmd {
        KvCmd::Kv {
            server,
            port,
            keys,
            value_bytes,
            zipf,
            hot_keys,
            read_keys,
            fill_order,
            secs,
            interval_ms,
            conns,
            batch,
            seed,
            server_pid,
        } => {
            let proto = match server {
                Server::Memcached => Proto::Memcached,
                Server::Redis => Proto::Redis,
            };
            let cfg = KvArgs {
                proto,
                port: port.unwrap_or(match server {
                    Server::Memcached => 11211,
                    Server::Redis => 6379,
                }),
                keys,
                value_bytes,
                zipf,
                hot_keys,
                read_keys: read_keys.unwrap_or(keys),
                order: match fill_order {
                    Order::HotFirst => FillOrder::HotFirst,
                    Order::Random => FillOrder::Random,
                    Order::ColdFirst => FillOrder::ColdFirst,
                },
                secs,
                interval: Duration::from_millis(interval_ms.max(1)),
                conns,
                batch,
                seed,
                server_pid,
            };
            run_kv(&cfg)
        }
        KvCmd::Hotpages {
            pid,
            hot_keys,
            out,
            cold_out,
        } => run_hotpages(pid, hot_keys, &out, cold_out.as_deref()),
        KvCmd::Where {
            pid,
            pages,
            cold_pages,
        } => run_where(pid, &pages, cold_pages.as_deref()),
    }
}

struct KvArgs {
    proto: Proto,
    port: u16,
    keys: u64,
    value_bytes: usize,
    zipf: f64,
    hot_keys: u64,
    read_keys: u64,
    order: FillOrder,
    secs: f64,
    interval: Duration,
    conns: usize,
    batch: usize,
    seed: u64,
    server_pid: Option<u32>,
}

/// memcached's largest item is 1 MiB by default (`-I`), key and header included.
const MAX_VALUE: usize = 1000 * 1000;
/// Sets in flight during the fill (pipelined, then their replies read).
const FILL_WINDOW: usize = 64;
/// A blocked read wakes this often to look at the stop flag.
const READ_WAKE: Duration = Duration::from_millis(500);
/// `hotpages` reads `/proc/PID/mem` in chunks of this size.
const SCAN_CHUNK: usize = 4 << 20;
/// Addresses per `move_pages(2)` query in `where`.
const WHERE_BATCH: usize = 4096;

/// Per-connection counters, read by the report loop (own cache line each).
#[repr(align(64))]
#[derive(Default)]
struct ConnCounters {
    /// Keys read.
    ops: AtomicU64,
    /// Of them, ids below --hot-keys.
    hot: AtomicU64,
    /// Round trips.
    reqs: AtomicU64,
    misses: AtomicU64,
    bad: AtomicU64,
}

fn connect(port: u16) -> Result<TcpStream> {
    let s = TcpStream::connect(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
        .with_context(|| format!("connecting to 127.0.0.1:{port}"))?;
    // Requests are small and each waits for its reply: Nagle would only add delay.
    s.set_nodelay(true).context("TCP_NODELAY")?;
    s.set_read_timeout(Some(READ_WAKE))
        .context("setting the read timeout")?;
    Ok(s)
}

/// A connection with a reusable receive buffer: no allocation per request once it has grown
/// to the largest reply.
struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
    /// Bytes of `buf` received and not yet parsed (pipelined replies of the fill).
    filled: usize,
}

impl Conn {
    /// Read until `parse` accepts the start of the buffer; drop those bytes. Returns `None`
    /// when `stop` is set while waiting.
    fn reply<T>(
        &mut self,
        stop: &AtomicBool,
        mut parse: impl FnMut(&[u8]) -> Result<Parsed<T>, ProtoError>,
    ) -> Result<Option<T>> {
        loop {
            let filled = self.filled;
            if let Parsed::Done { used, reply } = parse(&self.buf[..filled])? {
                // The fill pipelines its sets: what follows is the next reply.
                self.buf.copy_within(used..filled, 0);
                self.filled = filled - used;
                return Ok(Some(reply));
            }
            if filled == self.buf.len() {
                let n = self.buf.len().max(4096) * 2;
                self.buf.resize(n, 0);
            }
            match self.s.read(&mut self.buf[filled..]) {
                Ok(0) => bail!("the server closed the connection"),
                Ok(n) => self.filled += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if stop.load(Relaxed) || terminated() {
                        return Ok(None);
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("reading a reply"),
            }
        }
    }
}

/// The pid of the process with a listening TCP socket on `port` (IPv4 or IPv6): the socket's
/// inode from `/proc/net/tcp{,6}`, then the process whose `/proc/PID/fd/*` links to
/// `socket:[inode]`.
fn listener_pid(port: u16) -> Result<u32> {
    let mut inodes = Vec::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        // tcp6 is missing without IPv6.
        if let Ok(t) = std::fs::read_to_string(f) {
            inodes.extend(
                parse_proc_net_tcp(&t)
                    .into_iter()
                    .filter(|s| s.port == port && s.state == tierd_workload::kv::TCP_LISTEN)
                    .map(|s| format!("socket:[{}]", s.inode)),
            );
        }
    }
    ensure!(
        !inodes.is_empty(),
        "no socket listens on port {port} (/proc/net/tcp): is the server running? (or give --server-pid)"
    );
    for e in std::fs::read_dir("/proc").context("listing /proc")? {
        let Ok(e) = e else { continue };
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        // Processes we may not inspect, or that exit meanwhile, are skipped.
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(l) = std::fs::read_link(fd.path()) {
                if inodes.iter().any(|i| l.as_os_str() == i.as_str()) {
                    return Ok(pid);
                }
            }
        }
    }
    bail!("no process owns the socket listening on port {port}; give --server-pid")
}

/// Store every key (pipelined windows of [`FILL_WINDOW`] sets). Returns false when SIGTERM
/// came first.
fn fill(a: &KvArgs, conn: &mut Conn) -> Result<bool> {
    let stop = AtomicBool::new(false);
    let mut value = vec![0u8; a.value_bytes];
    let mut req = Vec::with_capacity(FILL_WINDOW * (a.value_bytes + 64));
    let ids = fill_order(a.keys, a.order, a.seed);
    for w in ids.chunks(FILL_WINDOW) {
        if terminated() {
            return Ok(false);
        }
        req.clear();
        for &id in w {
            fill_value(id, &mut value);
            push_set(&mut req, a.proto, id, &value);
        }
        conn.s.write_all(&req).context("sending sets")?;
        for _ in w {
            let r = match a.proto {
                Proto::Memcached => conn.reply(&stop, parse_mc_store),
                Proto::Redis => conn.reply(&stop, parse_resp_ok),
            };
            if r.context("storing a key")?.is_none() {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// One connection's load: Zipf batches until `stop`, latency per round trip.
fn load(
    a: &KvArgs,
    zipf: &Zipf,
    i: usize,
    c: &ConnCounters,
    stop: &AtomicBool,
) -> Result<Histogram> {
    let mut conn = Conn {
        s: connect(a.port)?,
        buf: vec![0u8; a.batch * (a.value_bytes + 64) + 4096],
        filled: 0,
    };
    let mut rng = SplitMix64::new(a.seed.wrapping_add(i as u64));
    let mut ids = vec![0u64; a.batch];
    let mut req = Vec::with_capacity(a.batch * 32 + 64);
    let mut hist = Histogram::default();
    while !stop.load(Relaxed) {
        let mut hot = 0u64;
        for id in &mut ids {
            *id = zipf.sample(&mut rng);
            hot += u64::from(*id < a.hot_keys);
        }
        req.clear();
        push_get(&mut req, a.proto, &ids);
        let t = Instant::now();
        conn.s.write_all(&req).context("sending a read")?;
        let r: Option<GetReply> = match a.proto {
            Proto::Memcached => conn.reply(stop, |b| parse_mc_get(b, ids.len()))?,
            Proto::Redis => conn.reply(stop, |b| parse_resp_get(b, &ids))?,
        };
        let Some(r) = r else { break };
        hist.record(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
        c.ops.fetch_add(ids.len() as u64, Relaxed);
        c.hot.fetch_add(hot, Relaxed);
        c.reqs.fetch_add(1, Relaxed);
        c.misses.fetch_add(u64::from(r.misses), Relaxed);
        c.bad.fetch_add(u64::from(r.bad), Relaxed);
    }
    Ok(hist)
}

fn sum(c: &[ConnCounters], f: impl Fn(&ConnCounters) -> &AtomicU64) -> u64 {
    c.iter().map(|x| f(x).load(Relaxed)).sum()
}

#[allow(clippy::cast_precision_loss)]
fn per_sec(n: u64, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s > 0.0 {
        n as f64 / s
    } else {
        0.0
    }
}

#[allow(clippy::cast_precision_loss)]
fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

#[allow(
    clippy::too_many_lines,
    reason = "the load generator's setup, run and report, in the order its output lines come"
)]
fn run_kv(a: &KvArgs) -> Result<()> {
    ensure!(
        a.keys >= 1 && a.keys <= MAX_KEYS,
        "--keys must be in 1..={MAX_KEYS}"
    );
    ensure!(
        (12..=MAX_VALUE).contains(&a.value_bytes),
        "--value-bytes must be in 12..={MAX_VALUE} (a value holds at least its key text)"
    );
    ensure!(a.hot_keys <= a.keys, "--hot-keys exceeds --keys");
    ensure!(
        (1..=a.keys).contains(&a.read_keys),
        "--read-keys must be in 1..=--keys"
    );
    ensure!(a.secs.is_finite() && a.secs >= 0.0, "--secs must be >= 0");
    ensure!((1..=1024).contains(&a.conns), "--conns must be in 1..=1024");
    ensure!((1..=4096).contains(&a.batch), "--batch must be in 1..=4096");
    let zipf = Zipf::new(a.read_keys, a.zipf).context("--zipf")?;
    crate::graceful_sigterm()?;
    let server_pid = match a.server_pid {
        Some(p) => p,
        None => listener_pid(a.port)?,
    };
    let t_fill = Instant::now();
    let mut conn = Conn {
        s: connect(a.port)?,
        buf: vec![0u8; 4096],
        filled: 0,
    };
    let filled = fill(a, &mut conn)?;
    drop(conn);
    let order = match a.order {
        FillOrder::HotFirst => "hot-first",
        FillOrder::Random => "random",
        FillOrder::ColdFirst => "cold-first",
    };
    emit(&format_args!(
        "kv pid={server_pid} server={} port={} keys={} read_keys={} value_bytes={} hot_keys={} zipf={} \
         expected_hot_share={:.4} fill_order={order} batch={} conns={} fill_s={:.2} ready",
        match a.proto {
            Proto::Memcached => "memcached",
            Proto::Redis => "redis",
        },
        a.port,
        a.keys,
        a.read_keys,
        a.value_bytes,
        a.hot_keys,
        a.zipf,
        zipf.share_below(a.hot_keys),
        a.batch,
        a.conns,
        t_fill.elapsed().as_secs_f64(),
    ))?;
    let counters: Vec<ConnCounters> = (0..a.conns).map(|_| ConnCounters::default()).collect();
    let stop = AtomicBool::new(!filled);
    let t0 = Instant::now();
    let total = Duration::from_secs_f64(a.secs);
    let (hist, elapsed) = std::thread::scope(|s| -> Result<(Histogram, Duration)> {
        let handles: Vec<_> = counters
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let (zipf, stop) = (&zipf, &stop);
                s.spawn(move || {
                    let r = load(a, zipf, i, c, stop);
                    if r.is_err() {
                        // The others stop too; the error is returned below.
                        stop.store(true, Relaxed);
                    }
                    r
                })
            })
            .collect();
        let mut next = a.interval;
        let mut last = (Duration::ZERO, 0u64);
        while !stop.load(Relaxed) && !terminated() {
            let now = t0.elapsed();
            if now >= next {
                let ops = sum(&counters, |c| &c.ops);
                emit(&format_args!(
                    "kv t={:.3} ops={ops} ops_s={:.0}",
                    now.as_secs_f64(),
                    per_sec(ops - last.1, now - last.0)
                ))?;
                last = (now, ops);
                while next <= t0.elapsed() {
                    next += a.interval;
                }
            }
            if now >= total {
                break;
            }
            crate::nap(t0, next.min(total));
        }
        stop.store(true, Relaxed);
        let elapsed = t0.elapsed();
        let mut hist = Histogram::default();
        let mut err = None;
        for h in handles {
            match h.join().map_err(|_| anyhow!("a load thread panicked"))? {
                Ok(x) => hist.merge(&x),
                // After SIGTERM the server may already be gone: the totals still count.
                Err(_) if terminated() => {}
                Err(e) => err = err.or(Some(e)),
            }
        }
        match err {
            Some(e) => Err(e),
            None => Ok((hist, elapsed)),
        }
    })?;
    let ops = sum(&counters, |c| &c.ops);
    let hot = sum(&counters, |c| &c.hot);
    #[allow(clippy::cast_precision_loss)]
    let hot_share = if ops > 0 {
        hot as f64 / ops as f64
    } else {
        0.0
    };
    emit(&format_args!(
        "kv done ops={ops} ops_s={:.0} reqs={} p50_us={:.1} p95_us={:.1} p99_us={:.1} \
         hot_share={hot_share:.4} last_hot_key_hz={:.2} misses={} bad={} secs={:.3}",
        per_sec(ops, elapsed),
        sum(&counters, |c| &c.reqs),
        us(hist.quantile(0.50)),
        us(hist.quantile(0.95)),
        us(hist.quantile(0.99)),
        // How often the least popular hot key was read: times the keys per hot page (K over
        // `hotpages`'s page count) it is how often the coldest hot page is touched.
        per_sec(ops, elapsed) * zipf.probability(a.hot_keys.saturating_sub(1)),
        sum(&counters, |c| &c.misses),
        sum(&counters, |c| &c.bad),
        elapsed.as_secs_f64(),
    ))?;
    Ok(())
}

/// Whether `hotpages` scans a `/proc/PID/maps` entry: readable anonymous memory (no path),
/// the heap, or a named anonymous region (`[anon:..]`), where the servers keep their items.
fn scanned(path: Option<&str>, perms: &str) -> bool {
    perms.starts_with('r') && path.is_none_or(|p| p == "[heap]" || p.starts_with("[anon:"))
}

/// `hotpages`: one pass over the process's anonymous memory.
///
/// Reading `/proc/PID/mem` goes through `access_remote_vm()` and `get_user_pages_remote()`
/// (mm/memory.c, mm/gup.c), which fault pages in and mark them accessed (`FOLL_TOUCH` sets the
/// page-table Accessed bit and the folio's referenced flag): to DAMON and the LRU the whole
/// scanned memory looks touched once. That is why the lab runs this once, right after the
/// fill, before any mechanism starts watching. Never-written anonymous pages read as the
/// shared zero page and cost no memory.
fn run_hotpages(pid: u32, hot_keys: u64, out: &Path, cold_out: Option<&Path>) -> Result<()> {
    let maps =
        read_maps(Path::new("/proc"), pid).with_context(|| format!("reading /proc/{pid}/maps"))?;
    let mem_path = format!("/proc/{pid}/mem");
    let mem = File::open(&mem_path).with_context(|| format!("opening {mem_path}"))?;
    let page = sys::page_size();
    let mut scanner = HotScanner::new(hot_keys, page as u64);
    let mut buf = vec![0u8; SCAN_CHUNK];
    let (mut scanned_bytes, mut skipped) = (0u64, 0u64);
    for m in maps.iter().filter(|m| scanned(m.path.as_deref(), &m.perms)) {
        scanner.restart();
        let mut a = m.start;
        while a < m.end {
            let len = usize::try_from(m.end - a)
                .unwrap_or(SCAN_CHUNK)
                .min(SCAN_CHUNK);
            match mem.read_at(&mut buf[..len], a) {
                Ok(n) if n > 0 => {
                    scanner.scan(a, &buf[..n]);
                    a += n as u64;
                    scanned_bytes += n as u64;
                }
                // An unreadable page (gone, or an I/O error): skip it, the next read starts
                // at the following page.
                _ => {
                    let next = (a | (page as u64 - 1)) + 1;
                    skipped += 1;
                    scanner.restart();
                    a = next;
                }
            }
        }
    }
    let matches = scanner.matches;
    let r = scanner.finish_all();
    write_pages(out, &r.hot)?;
    if let Some(c) = cold_out {
        write_pages(c, &r.cold)?;
    }
    emit(&format_args!(
        "hotpages pid={pid} pages={} cold_item_pages={} keys_found={} hot_keys={hot_keys} \
         key_texts={matches} scanned_mib={} skipped_pages={skipped}",
        r.hot.len(),
        r.cold.len(),
        r.hot_keys_found,
        scanned_bytes >> 20,
    ))?;
    Ok(())
}

/// Writes page addresses, hex, one per line.
fn write_pages(path: &Path, pages: &[u64]) -> Result<()> {
    let mut text = String::with_capacity(pages.len() * 13);
    for p in pages {
        text.push_str(&format!("{p:x}\n"));
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Parses the page list `hotpages` writes: hex addresses (a `0x` prefix allowed), one per
/// line, blank lines ignored.
fn parse_pages(text: &str) -> Result<Vec<usize>> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let t = l.trim();
            let h = t.strip_prefix("0x").unwrap_or(t);
            usize::from_str_radix(h, 16)
                .map_err(|_| anyhow!("line {}: {t:?} is not a hex address", i + 1))
        })
        .collect()
}

/// `where`: the hot pages' nodes by `move_pages(2)` with no target (a lookup in the page
/// tables, mm/migrate.c `do_pages_stat()`: it neither faults pages in nor sets Accessed bits),
/// the cold ones from `numa_maps`.
fn run_where(pid: u32, pages: &Path, cold_pages: Option<&Path>) -> Result<()> {
    let ipid = i32::try_from(pid).context("--pid out of range")?;
    let mut mover = Mover::default();
    let (hot_first, hot) = locate_listed(&mut mover, ipid, pages)?;
    let listed_cold = cold_pages
        .map(|c| locate_listed(&mut mover, ipid, c))
        .transpose()?;
    let numa = read_numa_maps(Path::new("/proc"), pid)
        .with_context(|| format!("reading /proc/{pid}/numa_maps"))?;
    // Everything anonymous that is not listed: with the cold items listed, the server's own
    // structures; without, everything but the hot pages.
    let mut listed = hot.clone();
    if let Some((_, c)) = &listed_cold {
        for (n, v) in c {
            *listed.entry(*n).or_default() += v;
        }
    }
    let (lowest, rest) = cold_counts(&numa, &listed);
    let mut nodes: Vec<_> = hot.keys().chain(rest.keys()).copied().collect();
    if let Some((_, c)) = &listed_cold {
        nodes.extend(c.keys().copied());
    }
    nodes.sort_unstable();
    nodes.dedup();
    emit(&where_line(hot_first, "hot", &hot, &nodes))?;
    match &listed_cold {
        Some((first, cold)) => {
            emit(&where_line(*first, "cold", cold, &nodes))?;
            emit(&where_line(lowest.unwrap_or(0), "other", &rest, &nodes))?;
        }
        None => emit(&where_line(lowest.unwrap_or(0), "cold", &rest, &nodes))?,
    }
    Ok(())
}

/// The nodes of the pages listed in `file` (by `move_pages(2)` with no target), and the
/// lowest listed address.
fn locate_listed(mover: &mut Mover, pid: i32, file: &Path) -> Result<(u64, NodeCounts)> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let addrs = parse_pages(&text).with_context(|| format!("in {}", file.display()))?;
    let mut counts = NodeCounts::new();
    for chunk in addrs.chunks(WHERE_BATCH) {
        // A page not present (ENOENT) or no longer mapped (EFAULT) is on no node: its
        // per-page errno is dropped.
        for n in mover
            .query(pid, chunk)
            .with_context(|| format!("locating pages of {pid} (move_pages)"))?
            .into_iter()
            .flatten()
        {
            *counts.entry(n).or_default() += 1;
        }
    }
    Ok((addrs.iter().min().map_or(0, |&a| a as u64), counts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_lists() {
        assert_eq!(
            parse_pages("7f00\n\n0x1000\n").unwrap(),
            vec![0x7f00, 0x1000]
        );
        let e = parse_pages("1000\nzz\n").unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn scanned_mappings() {
        assert!(scanned(None, "rw-p"));
        assert!(scanned(Some("[heap]"), "rw-p"));
        assert!(scanned(Some("[anon:jemalloc]"), "rw-p"));
        assert!(!scanned(None, "---p"));
        assert!(!scanned(Some("/usr/bin/redis-server"), "rw-p"));
        assert!(!scanned(Some("[stack]"), "rw-p"));
    }
}
