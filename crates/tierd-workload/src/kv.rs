//! The pure parts of the key-value load generator (`tierd-workload kv`, `hotpages`, `where`):
//! key and value text, the Zipf sampler, request builders and reply parsers for memcached's
//! text protocol and redis's RESP, the latency histogram, the hot-page scanner over a memory
//! buffer, the `/proc/net/tcp` parser that finds a server's socket, and the `where`
//! arithmetic over `numa_maps`. The I/O around them lives in the binary (`kv_cmd.rs`).
//!
//! Keys are `tk:%08d:` (12 bytes); popularity rank `r` is key id `r`, so the hot keys are the
//! ids below `--hot-keys`. A value is its key text repeated to the value size, so every 4 KiB
//! page that holds any 12 bytes of a value holds a whole copy of its key, which is what the
//! hot-page scan looks for in the server's memory.

use std::collections::BTreeMap;
use std::fmt;

use tierd_engine::types::NodeId;
use tierd_linux::read::numa_maps::{Backing, NumaMaps};

use crate::chase::SplitMix64;

/// Length of a key's text, `tk:%08d:`.
pub const KEY_LEN: usize = 12;
/// The largest key id that fits the 8 digits.
pub const MAX_KEYS: u64 = 100_000_000;

/// The text of key `id` (`id < MAX_KEYS`; larger ids keep their low 8 digits).
#[must_use]
pub fn key_text(id: u64) -> [u8; KEY_LEN] {
    let mut k = *b"tk:00000000:";
    let mut v = id % MAX_KEYS;
    for i in (3..11).rev() {
        // `v % 10 < 10` fits a u8.
        k[i] = b'0' + u8::try_from(v % 10).unwrap_or(0);
        v /= 10;
    }
    k
}

/// The key id at the start of `b` if it is a key's text (`tk:` 8 digits `:`).
#[must_use]
pub fn parse_key(b: &[u8]) -> Option<u64> {
    let k = b.get(..KEY_LEN)?;
    if &k[..3] != b"tk:" || k[11] != b':' {
        return None;
    }
    k[3..11].iter().try_fold(0u64, |acc, &d| {
        d.is_ascii_digit().then(|| acc * 10 + u64::from(d - b'0'))
    })
}

/// Write the value of key `id` into `out` (its length is the value size): the key text
/// repeated, the last copy cut short.
pub fn fill_value(id: u64, out: &mut [u8]) {
    let k = key_text(id);
    for (i, b) in out.iter_mut().enumerate() {
        *b = k[i % KEY_LEN];
    }
}

/// Zipf key popularity as YCSB defines it (`ZipfianGenerator`, after Gray et al., "Quickly
/// generating billion-record synthetic databases", SIGMOD 1994): rank `r` in `0..n` with
/// probability `(r+1)^-theta / zeta(n, theta)`. YCSB draws from a closed-form approximation
/// of the inverse CDF that overstates the head (about 4% too many draws below rank 10 at
/// n = 10 000, theta 0.99); this one inverts the exact CDF by binary search over a table of
/// `n` f64 (8 bytes per key, built once), so `hot_share` matches `zeta(K)/zeta(n)`.
/// Any `theta >= 0` works; 0 is uniform.
#[derive(Clone, Debug)]
pub struct Zipf {
    theta: f64,
    zetan: f64,
    /// `cdf[r]`: probability of a rank `<= r`; the last entry is 1.
    cdf: Vec<f64>,
}

/// Why a [`Zipf`] cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ZipfError {
    /// `n` was 0.
    #[error("a Zipf distribution needs at least one key")]
    NoKeys,
    /// `theta` negative or not a number.
    #[error("Zipf exponent {0} is not a number >= 0")]
    Theta(f64),
}

/// `zeta(n, theta) = sum_{i=1..n} i^-theta`.
#[must_use]
pub fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| (i as f64).powf(-theta)).sum()
}

impl Zipf {
    /// The distribution over `n` ranks with exponent `theta` (O(n) to build).
    ///
    /// # Errors
    /// [`ZipfError`] for `n == 0` or `theta` negative or NaN.
    pub fn new(n: u64, theta: f64) -> Result<Self, ZipfError> {
        if n == 0 {
            return Err(ZipfError::NoKeys);
        }
        if !(theta >= 0.0 && theta.is_finite()) {
            return Err(ZipfError::Theta(theta));
        }
        let mut cdf = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
        let mut sum = 0.0f64;
        for i in 1..=n {
            sum += (i as f64).powf(-theta);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        if let Some(last) = cdf.last_mut() {
            // Rounding must not leave a sliver above the last rank.
            *last = 1.0;
        }
        Ok(Zipf {
            theta,
            zetan: sum,
            cdf,
        })
    }

    /// Ranks.
    #[must_use]
    pub fn n(&self) -> u64 {
        self.cdf.len() as u64
    }

    /// The probability of rank `r`.
    #[must_use]
    pub fn probability(&self, r: u64) -> f64 {
        ((r + 1) as f64).powf(-self.theta) / self.zetan
    }

    /// The probability that a rank is below `k`: `zeta(k) / zeta(n)`.
    #[must_use]
    pub fn share_below(&self, k: u64) -> f64 {
        zeta(k.min(self.n()), self.theta) / self.zetan
    }

    /// One rank from `rng`.
    pub fn sample(&self, rng: &mut SplitMix64) -> u64 {
        // 53 random bits: a uniform f64 in [0, 1).
        let u = (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        let r = self.cdf.partition_point(|&c| c <= u);
        (r as u64).min(self.n() - 1)
    }
}

/// The order in which the fill writes the keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FillOrder {
    /// Ids 0, 1, 2, ...: the hot keys are written first, so a slab (memcached) or arena
    /// (redis/jemalloc) allocator puts them next to each other.
    HotFirst,
    /// A seeded random permutation: hot keys spread over the whole store.
    Random,
    /// Ids n-1, ..., 1, 0: the hot keys are written last, packed together after every cold
    /// one. Under a preferred-node policy whose node has a little room left, the cold items
    /// fill that room and the hot ones land on the next node (lab `memcached-pm`).
    ColdFirst,
}

/// The ids `0..n` in fill order.
#[must_use]
pub fn fill_order(n: u64, order: FillOrder, seed: u64) -> Vec<u64> {
    let mut ids: Vec<u64> = (0..n).collect();
    if order == FillOrder::ColdFirst {
        ids.reverse();
    }
    if order == FillOrder::Random {
        let mut rng = SplitMix64::new(seed ^ 0x6b76_5f66_696c_6c00);
        for i in (1..ids.len()).rev() {
            let j = usize::try_from(rng.below(i as u64 + 1)).unwrap_or(0);
            ids.swap(i, j);
        }
    }
    ids
}

/// Which server protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// memcached's text protocol (`set`, `get k1 k2 ...`).
    Memcached,
    /// redis's RESP (`SET`, `GET`, `MGET`).
    Redis,
}

/// Append the request storing key `id` with a `value` (already filled) to `out`.
pub fn push_set(out: &mut Vec<u8>, proto: Proto, id: u64, value: &[u8]) {
    let k = key_text(id);
    match proto {
        Proto::Memcached => {
            out.extend_from_slice(b"set ");
            out.extend_from_slice(&k);
            out.extend_from_slice(b" 0 0 ");
            push_decimal(out, value.len() as u64);
            out.extend_from_slice(b"\r\n");
        }
        Proto::Redis => {
            out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
            push_bulk(out, &k);
            out.extend_from_slice(b"$");
            push_decimal(out, value.len() as u64);
            out.extend_from_slice(b"\r\n");
        }
    }
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Append the request reading keys `ids` (one round trip: `get k1 k2 ...`, `GET` or `MGET`).
pub fn push_get(out: &mut Vec<u8>, proto: Proto, ids: &[u64]) {
    match proto {
        Proto::Memcached => {
            out.extend_from_slice(b"get");
            for &id in ids {
                out.push(b' ');
                out.extend_from_slice(&key_text(id));
            }
            out.extend_from_slice(b"\r\n");
        }
        Proto::Redis => {
            out.push(b'*');
            push_decimal(out, ids.len() as u64 + 1);
            if ids.len() == 1 {
                out.extend_from_slice(b"\r\n$3\r\nGET\r\n");
            } else {
                out.extend_from_slice(b"\r\n$4\r\nMGET\r\n");
            }
            for &id in ids {
                push_bulk(out, &key_text(id));
            }
        }
    }
}

fn push_bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'$');
    push_decimal(out, b.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// Decimal digits without allocating.
fn push_decimal(out: &mut Vec<u8>, mut v: u64) {
    let mut d = [0u8; 20];
    let mut i = d.len();
    loop {
        i -= 1;
        d[i] = b'0' + u8::try_from(v % 10).unwrap_or(0);
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&d[i..]);
}

/// A reply that is not what the request asks for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// The server answered with an error (`ERROR`, `CLIENT_ERROR ..`, `SERVER_ERROR ..`,
    /// RESP `-ERR ..`).
    #[error("the server answered an error: {0}")]
    Server(String),
    /// Bytes no reply of this kind starts with.
    #[error("unexpected reply {0}")]
    Unexpected(String),
    /// More values than keys asked.
    #[error("{got} values for {asked} keys")]
    TooMany {
        /// Values in the reply.
        got: usize,
        /// Keys asked.
        asked: usize,
    },
}

/// At most this many bytes of a bad reply go into an error (escaped).
const SHOW: usize = 60;

fn show(b: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(&b[..b.len().min(SHOW)]))
}

/// Result of parsing the start of a receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed<T> {
    /// The reply is not complete yet: read more.
    Incomplete,
    /// A whole reply of `used` bytes.
    Done {
        /// Bytes of the buffer it took.
        used: usize,
        /// What it said.
        reply: T,
    },
}

/// What a read reply held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GetReply {
    /// Keys found.
    pub hits: u32,
    /// Keys not found (evicted or never stored).
    pub misses: u32,
    /// Values that do not start with their key's text.
    pub bad: u32,
}

/// The line at the start of `b` without its `\r\n`, and the bytes it took; `None` if no
/// `\r\n` yet.
fn line(b: &[u8]) -> Option<(&[u8], usize)> {
    let end = b.windows(2).position(|w| w == b"\r\n")?;
    Some((&b[..end], end + 2))
}

fn server_error(l: &[u8]) -> Option<ProtoError> {
    let is_err = l == b"ERROR"
        || l.starts_with(b"CLIENT_ERROR")
        || l.starts_with(b"SERVER_ERROR")
        || l.first() == Some(&b'-');
    is_err.then(|| ProtoError::Server(String::from_utf8_lossy(&l[..l.len().min(SHOW)]).into()))
}

fn decimal(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 19 {
        return None;
    }
    b.iter().try_fold(0u64, |acc, &d| {
        d.is_ascii_digit().then(|| acc * 10 + u64::from(d - b'0'))
    })
}

/// A memcached `set` reply: `STORED\r\n`.
///
/// # Errors
/// [`ProtoError`] for any other complete line.
pub fn parse_mc_store(b: &[u8]) -> Result<Parsed<()>, ProtoError> {
    let Some((l, used)) = line(b) else {
        return Ok(Parsed::Incomplete);
    };
    if l == b"STORED" {
        return Ok(Parsed::Done { used, reply: () });
    }
    Err(server_error(l).unwrap_or_else(|| ProtoError::Unexpected(show(l))))
}

/// A memcached `get` reply for `asked` keys: `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`
/// per key found, then `END\r\n` (memcached's protocol.txt, "Retrieval command").
///
/// # Errors
/// [`ProtoError`] for an error line, a malformed `VALUE` line or data block, or more values
/// than keys.
pub fn parse_mc_get(b: &[u8], asked: usize) -> Result<Parsed<GetReply>, ProtoError> {
    let mut at = 0usize;
    let mut r = GetReply::default();
    loop {
        let Some((l, n)) = line(&b[at..]) else {
            return Ok(Parsed::Incomplete);
        };
        if l == b"END" {
            let hits = r.hits as usize;
            r.misses = u32::try_from(asked.saturating_sub(hits)).unwrap_or(u32::MAX);
            return Ok(Parsed::Done {
                used: at + n,
                reply: r,
            });
        }
        if let Some(e) = server_error(l) {
            return Err(e);
        }
        let rest = l
            .strip_prefix(b"VALUE ")
            .ok_or_else(|| ProtoError::Unexpected(show(l)))?;
        let mut f = rest.split(|&c| c == b' ');
        let key = f.next().unwrap_or_default();
        let _flags = f.next();
        let len = f
            .next()
            .and_then(decimal)
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| ProtoError::Unexpected(show(l)))?;
        let data = at + n;
        let end = data
            .checked_add(len)
            .and_then(|e| e.checked_add(2))
            .ok_or_else(|| ProtoError::Unexpected(show(l)))?;
        if b.len() < end {
            return Ok(Parsed::Incomplete);
        }
        if &b[end - 2..end] != b"\r\n" {
            return Err(ProtoError::Unexpected(show(&b[at..])));
        }
        r.hits += 1;
        if r.hits as usize > asked {
            return Err(ProtoError::TooMany {
                got: r.hits as usize,
                asked,
            });
        }
        let value = &b[data..end - 2];
        if key.len() != KEY_LEN || !value.starts_with(&key[..KEY_LEN.min(value.len())]) {
            r.bad += 1;
        }
        at = end;
    }
}

/// A RESP simple-string `+OK\r\n` (the `SET` reply).
///
/// # Errors
/// [`ProtoError`] for an error or any other reply.
pub fn parse_resp_ok(b: &[u8]) -> Result<Parsed<()>, ProtoError> {
    let Some((l, used)) = line(b) else {
        return Ok(Parsed::Incomplete);
    };
    if l == b"+OK" {
        return Ok(Parsed::Done { used, reply: () });
    }
    Err(server_error(l).unwrap_or_else(|| ProtoError::Unexpected(show(l))))
}

/// One RESP bulk string at the start of `b`: `Some(value)` or `None` for a null (`$-1`, or
/// RESP3's `_`), with the bytes it took.
fn resp_bulk(b: &[u8]) -> Result<Parsed<Option<(usize, usize)>>, ProtoError> {
    let Some((l, n)) = line(b) else {
        return Ok(Parsed::Incomplete);
    };
    if l == b"$-1" || l == b"_" {
        return Ok(Parsed::Done {
            used: n,
            reply: None,
        });
    }
    if let Some(e) = server_error(l) {
        return Err(e);
    }
    let len = l
        .strip_prefix(b"$")
        .and_then(decimal)
        .and_then(|v| usize::try_from(v).ok())
        .ok_or_else(|| ProtoError::Unexpected(show(l)))?;
    let end = n
        .checked_add(len)
        .and_then(|e| e.checked_add(2))
        .ok_or_else(|| ProtoError::Unexpected(show(l)))?;
    if b.len() < end {
        return Ok(Parsed::Incomplete);
    }
    if &b[end - 2..end] != b"\r\n" {
        return Err(ProtoError::Unexpected(show(b)));
    }
    Ok(Parsed::Done {
        used: end,
        reply: Some((n, len)),
    })
}

/// The reply to [`push_get`] for redis: a bulk string for one key (`GET`), an array of
/// bulk strings for more (`MGET`). Each value must start with its key's text.
///
/// # Errors
/// [`ProtoError`] for an error, a malformed reply, or an array of another length.
pub fn parse_resp_get(b: &[u8], ids: &[u64]) -> Result<Parsed<GetReply>, ProtoError> {
    let mut r = GetReply::default();
    let mut at = 0usize;
    if ids.len() != 1 {
        let Some((l, n)) = line(b) else {
            return Ok(Parsed::Incomplete);
        };
        if let Some(e) = server_error(l) {
            return Err(e);
        }
        let count = l
            .strip_prefix(b"*")
            .and_then(decimal)
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| ProtoError::Unexpected(show(l)))?;
        if count != ids.len() {
            return Err(ProtoError::TooMany {
                got: count,
                asked: ids.len(),
            });
        }
        at = n;
    }
    for &id in ids {
        match resp_bulk(&b[at..])? {
            Parsed::Incomplete => return Ok(Parsed::Incomplete),
            Parsed::Done { used, reply } => {
                match reply {
                    None => r.misses += 1,
                    Some((off, len)) => {
                        r.hits += 1;
                        let v = &b[at + off..at + off + len];
                        if !v.starts_with(&key_text(id)) {
                            r.bad += 1;
                        }
                    }
                }
                at += used;
            }
        }
    }
    Ok(Parsed::Done { used: at, reply: r })
}

/// Latency histogram: 16 linear buckets per power of two (at most 1/16 relative error), fixed
/// size, so recording never allocates.
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64; HIST_BUCKETS]>,
    total: u64,
}

const SUB: u32 = 16;
const HIST_BUCKETS: usize = 61 * 16;

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: Box::new([0; HIST_BUCKETS]),
            total: 0,
        }
    }
}

impl fmt::Debug for Histogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Histogram({} samples)", self.total)
    }
}

fn bucket(v: u64) -> usize {
    if v < u64::from(SUB) {
        return usize::try_from(v).unwrap_or(0);
    }
    let e = 63 - v.leading_zeros(); // >= 4
    let sub = (v >> (e - 4)) & u64::from(SUB - 1);
    usize::try_from(u64::from(e - 3) * u64::from(SUB) + sub).unwrap_or(HIST_BUCKETS - 1)
}

/// The largest value in bucket `i`.
fn bucket_max(i: usize) -> u64 {
    let i = i as u64;
    if i < u64::from(SUB) {
        return i;
    }
    let e = i / u64::from(SUB) + 3;
    let sub = i % u64::from(SUB);
    let lo = (u64::from(SUB) + sub) << (e - 4);
    lo + ((1u64 << (e - 4)) - 1)
}

impl Histogram {
    /// Count one value.
    pub fn record(&mut self, v: u64) {
        self.counts[bucket(v)] += 1;
        self.total += 1;
    }

    /// Values counted.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Add another histogram's counts.
    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += b;
        }
        self.total += o.total;
    }

    /// The `q` quantile (0..=1): the upper end of the bucket holding it (0 when empty).
    #[must_use]
    // `q` is clamped to 0..=1, so the rank is in 0..=total: no sign or range to lose.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        // The rank of the quantile, 1-based: ceil(q * total), at least 1.
        let want = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return bucket_max(i);
            }
        }
        bucket_max(HIST_BUCKETS - 1)
    }
}

/// Scans memory for key texts. `scan` is given consecutive chunks of one mapping; a key text
/// cut by a chunk boundary is found through the last `KEY_LEN - 1` bytes it keeps.
#[derive(Debug)]
pub struct HotScanner {
    hot_keys: u64,
    page: u64,
    /// Per hot id: seen.
    seen: Vec<bool>,
    /// Pages holding a hot key's text, in scan order (sorted and deduplicated by `finish`).
    pages: Vec<u64>,
    /// Pages holding a cold key's text (id at or above `hot_keys`), in scan order.
    cold: Vec<u64>,
    /// The tail of the previous chunk and its address.
    carry: Vec<u8>,
    carry_addr: u64,
    /// Key texts of any id seen.
    pub matches: u64,
}

impl HotScanner {
    /// A scanner for ids below `hot_keys`, pages of `page` bytes (a power of two).
    #[must_use]
    pub fn new(hot_keys: u64, page: u64) -> Self {
        HotScanner {
            hot_keys,
            page,
            seen: vec![false; usize::try_from(hot_keys).unwrap_or(0)],
            pages: Vec::new(),
            cold: Vec::new(),
            carry: Vec::with_capacity(2 * KEY_LEN),
            carry_addr: 0,
            matches: 0,
        }
    }

    /// Start a new mapping (drop the carried tail).
    pub fn restart(&mut self) {
        self.carry.clear();
    }

    /// Scan `buf`, which lies at address `addr` and continues the previous chunk if that one
    /// ended at `addr` (since the last `restart`).
    pub fn scan(&mut self, addr: u64, buf: &[u8]) {
        let contiguous =
            !self.carry.is_empty() && self.carry_addr + self.carry.len() as u64 == addr;
        if !contiguous {
            self.carry.clear();
            self.carry_addr = addr;
        }
        // Key texts that start in the carried tail and end in `buf`.
        let mut joint = std::mem::take(&mut self.carry);
        let tail_len = joint.len();
        joint.extend_from_slice(&buf[..buf.len().min(KEY_LEN - 1)]);
        for i in 0..tail_len {
            self.check(&joint[i..], self.carry_addr + i as u64);
        }
        if buf.len() >= KEY_LEN {
            for i in 0..=buf.len() - KEY_LEN {
                if buf[i] == b't' {
                    self.check(&buf[i..], addr + i as u64);
                }
            }
        }
        // Keep the last `KEY_LEN - 1` bytes seen (of the tail and `buf` together when `buf`
        // is shorter than that).
        if buf.len() >= KEY_LEN - 1 {
            joint.clear();
            joint.extend_from_slice(&buf[buf.len() - (KEY_LEN - 1)..]);
            self.carry_addr = addr + (buf.len() - (KEY_LEN - 1)) as u64;
        } else {
            let drop = joint.len().saturating_sub(KEY_LEN - 1);
            joint.drain(..drop);
            self.carry_addr += drop as u64;
        }
        self.carry = joint;
    }

    fn check(&mut self, b: &[u8], at: u64) {
        let Some(id) = parse_key(b) else {
            return;
        };
        self.matches += 1;
        let first = at & !(self.page - 1);
        let last = (at + KEY_LEN as u64 - 1) & !(self.page - 1);
        let list = if id >= self.hot_keys {
            &mut self.cold
        } else {
            if let Some(s) = self.seen.get_mut(usize::try_from(id).unwrap_or(usize::MAX)) {
                *s = true;
            }
            &mut self.pages
        };
        for p in [first, last] {
            if list.last() != Some(&p) {
                list.push(p);
            }
        }
    }

    /// The hot pages, sorted and unique, and how many distinct hot ids were found.
    #[must_use]
    pub fn finish(self) -> (Vec<u64>, u64) {
        let s = self.finish_all();
        (s.hot, s.hot_keys_found)
    }

    /// Every page holding an item's text, split: the hot pages (a hot key's text, whatever
    /// else they hold), the cold item pages (only cold keys' texts), both sorted and unique,
    /// and how many distinct hot ids were found.
    #[must_use]
    pub fn finish_all(mut self) -> ScanResult {
        self.pages.sort_unstable();
        self.pages.dedup();
        self.cold.sort_unstable();
        self.cold.dedup();
        let hot = &self.pages;
        // A page with a hot key is hot, whatever cold keys it also holds.
        self.cold.retain(|p| hot.binary_search(p).is_err());
        let found = self.seen.iter().filter(|s| **s).count() as u64;
        ScanResult {
            hot: self.pages,
            cold: self.cold,
            hot_keys_found: found,
        }
    }
}

/// What a [`HotScanner`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanResult {
    /// Pages holding a hot key's text (key or value copy), sorted.
    pub hot: Vec<u64>,
    /// Pages holding only cold keys' texts, sorted.
    pub cold: Vec<u64>,
    /// Distinct hot ids seen.
    pub hot_keys_found: u64,
}

/// One socket of `/proc/net/tcp` or `tcp6` (net/ipv4/tcp_ipv4.c `get_tcp4_sock()`):
/// `sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...`,
/// addresses as hex `ADDR:PORT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSocket {
    /// Local port.
    pub port: u16,
    /// State (`0A` = `TCP_LISTEN`).
    pub state: u8,
    /// Socket inode (`/proc/PID/fd/N -> socket:[inode]`).
    pub inode: u64,
}

/// `TCP_LISTEN` in include/net/tcp_states.h.
pub const TCP_LISTEN: u8 = 0x0A;

/// Parses `/proc/net/tcp{,6}`; skips the header and lines it cannot read.
#[must_use]
pub fn parse_proc_net_tcp(text: &str) -> Vec<TcpSocket> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let port = f.get(1)?.rsplit_once(':')?.1;
            Some(TcpSocket {
                port: u16::from_str_radix(port, 16).ok()?,
                state: u8::from_str_radix(f.get(3)?, 16).ok()?,
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// Pages per node.
pub type NodeCounts = BTreeMap<NodeId, u64>;

/// The `where` arithmetic: the process's anonymous base pages per node from `numa_maps` (VMAs
/// that are not file-backed: anonymous, heap, stack), minus the hot ones. `numa_maps` counts
/// in units of the VMA's `kernelpagesize_kB`; for a THP-backed VMA that is 4 kB and the
/// counts are already base pages (fs/proc/task_mmu.c `gather_pte_stats()` adds
/// `HPAGE_PMD_SIZE/PAGE_SIZE` for a PMD-mapped THP), for hugetlb it is the huge page size
/// (`gather_hugetlb_stats()` adds 1 per huge page), which
/// [`tierd_linux::read::numa_maps::NumaMapsEntry::pages_on`] converts. Returns the lowest
/// address of such a VMA and the cold counts (every node present in either input).
#[must_use]
pub fn cold_counts(numa: &NumaMaps, hot: &NodeCounts) -> (Option<u64>, NodeCounts) {
    let mut total = NodeCounts::new();
    let mut lowest = None;
    for e in &numa.entries {
        if matches!(e.backing, Backing::File(_)) {
            continue;
        }
        if e.nodes.is_empty() {
            continue;
        }
        lowest = Some(lowest.map_or(e.start, |l: u64| l.min(e.start)));
        for &n in e.nodes.keys() {
            *total.entry(n).or_default() += e.pages_on(n).0;
        }
    }
    for &n in hot.keys() {
        total.entry(n).or_default();
    }
    let cold = total
        .into_iter()
        .map(|(n, t)| (n, t.saturating_sub(hot.get(&n).copied().unwrap_or(0))))
        .collect();
    (lowest, cold)
}

/// One `where` line in `numa_maps` format: `<addr hex> <label> N0=a N1=b kernelpagesize_kB=4`
/// (the label takes the policy's place, so `parse_numa_maps_line` reads it).
#[must_use]
pub fn where_line(addr: u64, label: &str, counts: &NodeCounts, nodes: &[NodeId]) -> String {
    use fmt::Write as _;
    let mut s = format!("{addr:x} {label}");
    for n in nodes {
        let _ = write!(s, " N{}={}", n.0, counts.get(n).copied().unwrap_or(0));
    }
    s.push_str(" kernelpagesize_kB=4");
    s
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;
    use tierd_linux::read::numa_maps::{parse_numa_maps, parse_numa_maps_line};

    #[test]
    fn key_text_round_trips() {
        assert_eq!(&key_text(42), b"tk:00000042:");
        assert_eq!(&key_text(99_999_999), b"tk:99999999:");
        assert_eq!(parse_key(b"tk:00000042:xyz"), Some(42));
        assert_eq!(parse_key(b"tk:0000004x:"), None);
        assert_eq!(parse_key(b"tk:00000042;"), None);
        assert_eq!(parse_key(b"tk:0000"), None);
        let mut v = [0u8; 30];
        fill_value(7, &mut v);
        assert_eq!(&v, b"tk:00000007:tk:00000007:tk:000");
    }

    #[test]
    fn zipf_rejects_bad_parameters() {
        assert_eq!(Zipf::new(0, 0.5).unwrap_err(), ZipfError::NoKeys);
        assert!(Zipf::new(10, 1.0).is_ok());
        assert!(matches!(Zipf::new(10, -0.1), Err(ZipfError::Theta(_))));
        assert!(matches!(Zipf::new(10, f64::NAN), Err(ZipfError::Theta(_))));
    }

    #[test]
    fn zipf_matches_the_formula() {
        let n = 10_000;
        let z = Zipf::new(n, 0.99).unwrap();
        let mut rng = SplitMix64::new(1);
        let draws = 400_000u64;
        let mut hist = vec![0u64; n as usize];
        for _ in 0..draws {
            let r = z.sample(&mut rng);
            assert!(r < n);
            hist[r as usize] += 1;
        }
        let frac = |c: u64| c as f64 / draws as f64;
        // Single ranks within 4 standard deviations of the formula.
        for r in [0u64, 1, 2, 10, 100] {
            let p = z.probability(r);
            let sd = (p * (1.0 - p) / draws as f64).sqrt();
            assert!(
                (frac(hist[r as usize]) - p).abs() < 4.0 * sd,
                "rank {r}: {} vs {p}",
                frac(hist[r as usize])
            );
        }
        // The CDF within 4 standard deviations of zeta(k)/zeta(n).
        for k in [10u64, 100, 1000, 5000] {
            let got = frac(hist[..k as usize].iter().sum());
            let want = z.share_below(k);
            let sd = (want * (1.0 - want) / draws as f64).sqrt();
            assert!(
                (got - want).abs() < 4.0 * sd,
                "share below {k}: {got} vs {want}"
            );
        }
        // Uniform at theta 0.
        let u = Zipf::new(1000, 0.0).unwrap();
        let below: u64 = (0..100_000).filter(|_| u.sample(&mut rng) < 100).count() as u64;
        assert!((9_000..11_000).contains(&below), "{below}");
    }

    #[test]
    fn zipf_is_reproducible() {
        let z = Zipf::new(1000, 0.99).unwrap();
        let (mut a, mut b) = (SplitMix64::new(5), SplitMix64::new(5));
        let x: Vec<u64> = (0..100).map(|_| z.sample(&mut a)).collect();
        let y: Vec<u64> = (0..100).map(|_| z.sample(&mut b)).collect();
        assert_eq!(x, y);
    }

    #[test]
    fn fill_orders() {
        assert_eq!(fill_order(5, FillOrder::HotFirst, 1), vec![0, 1, 2, 3, 4]);
        assert_eq!(fill_order(5, FillOrder::ColdFirst, 1), vec![4, 3, 2, 1, 0]);
        let mut r = fill_order(1000, FillOrder::Random, 1);
        assert_ne!(r[..10], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(r, fill_order(1000, FillOrder::Random, 1));
        r.sort_unstable();
        assert_eq!(r, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn requests() {
        let mut out = Vec::new();
        push_set(&mut out, Proto::Memcached, 3, b"tk:00000003:");
        assert_eq!(out, b"set tk:00000003: 0 0 12\r\ntk:00000003:\r\n");
        out.clear();
        push_get(&mut out, Proto::Memcached, &[1, 20]);
        assert_eq!(out, b"get tk:00000001: tk:00000020:\r\n");
        out.clear();
        push_set(&mut out, Proto::Redis, 3, b"abc");
        assert_eq!(
            out,
            b"*3\r\n$3\r\nSET\r\n$12\r\ntk:00000003:\r\n$3\r\nabc\r\n".as_slice()
        );
        out.clear();
        push_get(&mut out, Proto::Redis, &[1]);
        assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$12\r\ntk:00000001:\r\n");
        out.clear();
        push_get(&mut out, Proto::Redis, &[1, 2]);
        assert_eq!(
            out,
            b"*3\r\n$4\r\nMGET\r\n$12\r\ntk:00000001:\r\n$12\r\ntk:00000002:\r\n".as_slice()
        );
    }

    fn done<T>(p: Result<Parsed<T>, ProtoError>) -> (usize, T) {
        match p {
            Ok(Parsed::Done { used, reply }) => (used, reply),
            other => panic!("not done: {:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn memcached_get_replies() {
        let r = b"VALUE tk:00000001: 0 15\r\ntk:00000001:tk:\r\nVALUE tk:00000002: 0 3 99\r\nxyz\r\nEND\r\n";
        let (used, g) = done(parse_mc_get(r, 3));
        assert_eq!(used, r.len());
        assert_eq!(
            g,
            GetReply {
                hits: 2,
                misses: 1,
                bad: 1
            }
        );
        // Every prefix is incomplete, never an error.
        for i in 0..r.len() {
            assert_eq!(
                parse_mc_get(&r[..i], 3),
                Ok(Parsed::Incomplete),
                "prefix {i}"
            );
        }
        assert_eq!(done(parse_mc_get(b"END\r\nextra", 1)).0, 5);
        assert!(matches!(
            parse_mc_get(b"SERVER_ERROR out of memory\r\n", 1),
            Err(ProtoError::Server(_))
        ));
        assert!(matches!(
            parse_mc_get(b"ERROR\r\n", 1),
            Err(ProtoError::Server(_))
        ));
        assert!(matches!(
            parse_mc_get(b"VALUE k 0 x\r\n", 1),
            Err(ProtoError::Unexpected(_))
        ));
        assert!(matches!(
            parse_mc_get(b"VALUE k 0 3\r\nabcd\r\nEND\r\n", 1),
            Err(ProtoError::Unexpected(_))
        ));
        assert!(matches!(
            parse_mc_get(b"VALUE k 0 99999999999999999999999\r\n", 1),
            Err(ProtoError::Unexpected(_))
        ));
        assert!(matches!(
            parse_mc_get(b"VALUE a 0 1\r\nx\r\nVALUE b 0 1\r\nx\r\nEND\r\n", 1),
            Err(ProtoError::TooMany { got: 2, asked: 1 })
        ));
        assert!(matches!(
            parse_mc_get(b"HELLO\r\n", 1),
            Err(ProtoError::Unexpected(_))
        ));
        assert_eq!(done(parse_mc_store(b"STORED\r\n")).0, 8);
        assert_eq!(parse_mc_store(b"STOR"), Ok(Parsed::Incomplete));
        assert!(parse_mc_store(b"NOT_STORED\r\n").is_err());
    }

    #[test]
    fn resp_replies() {
        let ok = |ids: &[u64], b: &[u8]| done(parse_resp_get(b, ids));
        assert_eq!(
            ok(&[1], b"$12\r\ntk:00000001:\r\n"),
            (
                19,
                GetReply {
                    hits: 1,
                    misses: 0,
                    bad: 0
                }
            )
        );
        assert_eq!(ok(&[1], b"$-1\r\n").1.misses, 1);
        let r = b"*3\r\n$12\r\ntk:00000001:\r\n$-1\r\n$3\r\nabc\r\n";
        let (used, g) = ok(&[1, 2, 3], r);
        assert_eq!(used, r.len());
        assert_eq!(
            g,
            GetReply {
                hits: 2,
                misses: 1,
                bad: 1
            }
        );
        for i in 0..r.len() {
            assert_eq!(parse_resp_get(&r[..i], &[1, 2, 3]), Ok(Parsed::Incomplete));
        }
        assert!(matches!(
            parse_resp_get(b"-ERR wrong\r\n", &[1]),
            Err(ProtoError::Server(_))
        ));
        assert!(matches!(
            parse_resp_get(b"*2\r\n", &[1, 2, 3]),
            Err(ProtoError::TooMany { .. })
        ));
        assert!(matches!(
            parse_resp_get(b"$3\r\nabcd\r\n", &[1]),
            Err(ProtoError::Unexpected(_))
        ));
        assert!(matches!(
            parse_resp_get(b":12\r\n", &[1]),
            Err(ProtoError::Unexpected(_))
        ));
        assert_eq!(done(parse_resp_ok(b"+OK\r\n")).0, 5);
        assert!(parse_resp_ok(b"-OOM\r\n").is_err());
        assert_eq!(parse_resp_ok(b"+O"), Ok(Parsed::Incomplete));
    }

    #[test]
    fn histogram_quantiles() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile(0.5), 0);
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        for (q, want) in [(0.5, 500_000.0), (0.95, 950_000.0), (0.99, 990_000.0)] {
            let got = h.quantile(q) as f64;
            assert!(
                got >= want && got <= want * (1.0 + 1.0 / 16.0),
                "{q}: {got}"
            );
        }
        assert_eq!(h.quantile(0.0), 1023); // the bucket holding 1000
        let mut g = Histogram::default();
        g.record(5);
        g.merge(&h);
        assert_eq!(g.total(), 1001);
        assert_eq!(g.quantile(0.0), 5);
        // Every value lands in a bucket whose range holds it.
        for v in [0u64, 15, 16, 17, 31, 32, 1 << 40, u64::MAX] {
            let i = bucket(v);
            assert!(
                bucket_max(i) >= v && (i == 0 || bucket_max(i - 1) < v),
                "{v}"
            );
        }
    }

    #[test]
    fn scanner_finds_hot_pages() {
        let page = 4096u64;
        let mut mem = vec![0u8; 4 * 4096];
        // Hot key 3 inside page 0, cold key 50 in page 1, hot key 7 across pages 2 and 3.
        mem[100..112].copy_from_slice(&key_text(3));
        mem[5000..5012].copy_from_slice(&key_text(50));
        mem[3 * 4096 - 5..3 * 4096 + 7].copy_from_slice(&key_text(7));
        let base = 0x7f00_0000_0000u64;
        // Chunks of 1000 bytes: the key across pages also crosses a chunk boundary.
        let mut s = HotScanner::new(10, page);
        for (i, c) in mem.chunks(1000).enumerate() {
            s.scan(base + i as u64 * 1000, c);
        }
        assert_eq!(s.matches, 3);
        let (pages, found) = s.finish();
        assert_eq!(pages, vec![base, base + 2 * page, base + 3 * page]);
        assert_eq!(found, 2);
        // A gap between chunks (another mapping): no match across it.
        let mut s = HotScanner::new(10, page);
        s.scan(base, b"xxxxtk:0000");
        s.scan(base + 100, b"0001:");
        assert_eq!(s.matches, 0);
        // Tiny chunks, one byte at a time.
        let mut s = HotScanner::new(10, page);
        for (i, b) in b"..tk:00000009:..".iter().enumerate() {
            s.scan(base + i as u64, std::slice::from_ref(b));
        }
        assert_eq!(s.finish(), (vec![base], 1));
        // Cold item pages: page 1 holds only the cold key 50; page 0 holds hot key 3 and
        // cold key 60 and stays hot.
        let mut mem = vec![0u8; 3 * 4096];
        mem[100..112].copy_from_slice(&key_text(3));
        mem[200..212].copy_from_slice(&key_text(60));
        mem[5000..5012].copy_from_slice(&key_text(50));
        let mut s = HotScanner::new(10, page);
        s.scan(base, &mem);
        let r = s.finish_all();
        assert_eq!(r.hot, vec![base]);
        assert_eq!(r.cold, vec![base + page]);
        assert_eq!(r.hot_keys_found, 1);
    }

    #[test]
    fn proc_net_tcp() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000:2BCB 00000000:0000 0A 00000000:00000000 00:00000000 00000000   100        0 123456 1 0000000000000000 100 0 0 10 0\n   1: 0100007F:2BCB 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000   100        0 0 1\n";
        let s = parse_proc_net_tcp(text);
        assert_eq!(
            s,
            vec![
                TcpSocket {
                    port: 11211,
                    state: TCP_LISTEN,
                    inode: 123_456
                },
                TcpSocket {
                    port: 11211,
                    state: 1,
                    inode: 0
                }
            ]
        );
        let v6 = "   0: 00000000000000000000000000000000:18EB 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000   100        0 777 1\n";
        assert_eq!(parse_proc_net_tcp(v6)[0].port, 6379);
    }

    #[test]
    fn where_arithmetic() {
        let numa = parse_numa_maps(
            "55d000000000 default file=/usr/bin/memcached mapped=10 N0=10 kernelpagesize_kB=4\n\
             55d000100000 default heap anon=100 dirty=100 N0=60 N1=40 kernelpagesize_kB=4\n\
             7f0000000000 default anon=1024 dirty=1024 N0=512 N1=512 kernelpagesize_kB=4\n\
             7f1000000000 default huge anon=2 dirty=2 N1=2 kernelpagesize_kB=2048\n\
             7f2000000000 default\n",
        )
        .unwrap();
        let hot: NodeCounts = [(NodeId(0), 20), (NodeId(1), 30), (NodeId(2), 1)].into();
        let (lowest, cold) = cold_counts(&numa, &hot);
        assert_eq!(lowest, Some(0x55d0_0010_0000));
        // N0: 60 + 512 - 20; N1: 40 + 512 + 2*512 (hugetlb) - 30; N2 only in hot.
        assert_eq!(
            cold,
            [(NodeId(0), 552), (NodeId(1), 1546), (NodeId(2), 0)].into()
        );
        let nodes = [NodeId(0), NodeId(1)];
        let l = where_line(0x7f00_0000_1000, "hot", &hot, &nodes);
        assert_eq!(l, "7f0000001000 hot N0=20 N1=30 kernelpagesize_kB=4");
        let e = parse_numa_maps_line(&l).unwrap();
        assert_eq!(e.start, 0x7f00_0000_1000);
        assert_eq!(e.nodes, [(NodeId(0), 20), (NodeId(1), 30)].into());
        assert_eq!(
            where_line(1, "cold", &NodeCounts::new(), &nodes),
            "1 cold N0=0 N1=0 kernelpagesize_kB=4"
        );
    }
}
