//! # report: the workload's machine-readable output lines, written and parsed in one place
//!
//! Every line the workload prints for a harness is `<tag> [word] key=value ...` on one line:
//!
//! ```text
//! chase pid=812 addr=0x7f0c2e400000 cold_addr=0x7f0c26400000 node=1 total_pages=131072 hot_pages=32768 tick_us=0 ticker_pid=0 threads=2 cpus=0,1 policy=preferred-many-balancing policy_nodes=0-1 ready
//! chase t=0.500 hot_n0=120 hot_n1=32648 hot_n2=0 hot_n3=0 hot_other=0 cold_n0=0 cold_n1=98304 cold_n2=0 cold_n3=0 cold_other=0 steps_per_s=3391772 ns_per_step=294.83 threads=2 steps_per_s_t0=1695886 hot_t0_n0=120 hot_t0_n1=16264 hot_t0_n2=0 hot_t0_n3=0 hot_t0_other=0 steps_per_s_t1=1695886 hot_t1_n0=0 ...
//! chase done t=15.001 steps=50593792 hot_n0=... cold_other=0 steps_per_s=3372734 ns_per_step=296.49 threads=2 steps_per_s_t0=... hot_t1_other=0
//! hold pid=900 addr=0x7f... node=0 mib=1200 n0=307200 n1=0 n2=0 n3=0 other=0 ready
//! hold done n0=290000 n1=17200 n2=0 n3=0 other=0
//! move pages=65536 from=0 to=1 secs=1.234 moved=65536 already=0 failed=0 busy=0 moved_mib_s=207.4 requested_mib_s=207.4
//! integrity pid=901 addr=0x7f... node=0 mib=256 pages=65536 threads=1 n0=65536 n1=0 n2=0 n3=0 other=0 ready
//! integrity t=1.000 verified_pages=196608 failures=0 passes=3 rewritten_pages=12288 n0=60000 n1=5536 n2=0 n3=0 other=0
//! integrity bad addr=0x7f0c2e401008 got=0x0 want=0x5be2a9c1d3f0e471
//! integrity done t=10.002 verified_pages=1966080 failures=0 passes=30 rewritten_pages=122880 n0=... other=0
//! ```
//!
//! Placement counts are 4 KiB pages from a `move_pages(2)` location query: `n0` .. `n3` pages
//! on nodes 0 .. 3, `other` pages on a higher node or not located (not present, error). Lines
//! of the earlier format (`n0`, `n1`, `other` only, node 2 counted as `other`) still parse,
//! with `n2 = n3 = 0`; so do chase lines without the `threads`/`cpus`/`policy` keys.
//! With `--procs N` each started process adds `proc=<i>` to its lines (the ready line also
//! `cpu=<c>`), so that their shared stdout can be told apart.
//! Unknown keys are ignored by the parsers so that fields can be added; missing keys are an
//! error. The [`std::fmt::Display`] impls are the writers, so a parsed line prints back the same.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;
use tierd_engine::types::{NodeId, NodeMask};
use tierd_linux::read::{parse_list, parse_nodelist};

/// A line that is not what the parser expected.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("cannot parse {what} in line {line:?}")]
pub struct ParseError {
    /// The offending line.
    pub line: String,
    /// What was missing or malformed.
    pub what: String,
}

/// Nodes that [`Placement`] counts one by one (`n0` .. `n3`); pages on higher nodes count as
/// `other`. Four covers the lab's guests (two or three nodes) with room for one more.
pub const PLACEMENT_NODES: usize = 4;

/// Pages per node of a region.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// Pages on node `i` for `i < PLACEMENT_NODES` (keys `n0` .. `n3`).
    pub nodes: [u64; PLACEMENT_NODES],
    /// Pages on a node >= [`PLACEMENT_NODES`] or not located (not present, error).
    pub other: u64,
}

impl Placement {
    /// Pages on node `n` (0 for nodes that are not counted one by one).
    #[must_use]
    pub fn node(&self, n: usize) -> u64 {
        self.nodes.get(n).copied().unwrap_or(0)
    }

    /// A placement with `pages` pages on node `n` (< [`PLACEMENT_NODES`]) and nothing else.
    #[must_use]
    pub fn all_on(n: usize, pages: u64) -> Self {
        let mut p = Placement::default();
        if let Some(c) = p.nodes.get_mut(n) {
            *c = pages;
        } else {
            p.other = pages;
        }
        p
    }

    /// All pages counted.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.nodes.iter().sum::<u64>() + self.other
    }

    /// Count one location-query result (a node, or an errno).
    pub fn add(&mut self, r: Result<NodeId, i32>) {
        match r {
            Ok(n) if n.index() < PLACEMENT_NODES => self.nodes[n.index()] += 1,
            _ => self.other += 1,
        }
    }

    /// Count a slice of location-query results.
    #[must_use]
    pub fn of(results: &[Result<NodeId, i32>]) -> Self {
        let mut p = Placement::default();
        for r in results {
            p.add(*r);
        }
        p
    }

    fn write(&self, f: &mut fmt::Formatter<'_>, prefix: &str) -> fmt::Result {
        for (i, c) in self.nodes.iter().enumerate() {
            write!(f, "{prefix}n{i}={c} ")?;
        }
        write!(f, "{prefix}other={}", self.other)
    }

    /// `n0`, `n1` and `other` are required; `n2`, `n3` are optional (0) so that lines of the
    /// earlier two-node format, which counted node 2 and above as `other`, still parse.
    fn read(x: &Fields<'_>, prefix: &str) -> Result<Self, ParseError> {
        let mut p = Placement {
            other: x.get(&format!("{prefix}other"))?,
            ..Placement::default()
        };
        for (i, c) in p.nodes.iter_mut().enumerate() {
            let key = format!("{prefix}n{i}");
            *c = if i < 2 {
                x.get(&key)?
            } else {
                x.get_or(&key, 0)?
            };
        }
        Ok(p)
    }
}

/// The policy `chase` leaves on its buffer after placing it (`--policy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChasePolicy {
    /// `MPOL_DEFAULT`: NUMA balancing / DAMOS / tierd may move the pages anywhere.
    #[default]
    Default,
    /// `MPOL_PREFERRED_MANY` over `--policy-nodes`, without mode flags.
    PreferredMany,
    /// `MPOL_PREFERRED_MANY | MPOL_F_NUMA_BALANCING` over `--policy-nodes`.
    PreferredManyBalancing,
}

impl ChasePolicy {
    /// The word on the command line and in the ready line.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ChasePolicy::Default => "default",
            ChasePolicy::PreferredMany => "preferred-many",
            ChasePolicy::PreferredManyBalancing => "preferred-many-balancing",
        }
    }
}

impl fmt::Display for ChasePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ChasePolicy {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            ChasePolicy::Default,
            ChasePolicy::PreferredMany,
            ChasePolicy::PreferredManyBalancing,
        ]
        .into_iter()
        .find(|p| p.as_str() == s)
        .ok_or_else(|| {
            err(
                s,
                "policy (default, preferred-many or preferred-many-balancing)",
            )
        })
    }
}

/// `chase ... ready`: the buffer is placed and the chase starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChaseReady {
    /// The workload's pid.
    pub pid: i32,
    /// Start of the hot part (its own VMA).
    pub addr: u64,
    /// Start of the cold part (a separate VMA, so `numa_maps` reports the parts apart).
    pub cold_addr: u64,
    /// The node the buffer was first placed on (-1: default policy).
    pub node: i32,
    /// Pages of the whole buffer.
    pub total_pages: u64,
    /// Pages of the hot part (the buffer's start).
    pub hot_pages: u64,
    /// The ticker's period in µs (0: no ticker).
    pub tick_us: u64,
    /// The (first) ticker's pid (0: none).
    pub ticker_pid: i32,
    /// Chase threads (key `threads`, 1 when absent).
    pub threads: u32,
    /// CPUs the threads are pinned to, round-robin (key `cpus`, a list like `0,1`; `-` or
    /// absent: not pinned).
    pub cpus: Vec<u32>,
    /// The policy left on the buffer (key `policy`, `default` when absent).
    pub policy: ChasePolicy,
    /// Its nodes (key `policy_nodes`, kernel list format; `-` or absent: none).
    pub policy_nodes: NodeMask,
}

/// One chase thread's share of an interval (or of the whole run, in [`ChaseDone`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThreadSample {
    /// The thread's steps per second (key `steps_per_s_t<i>`); `1e9 / steps_per_s` is its
    /// latency per step.
    pub steps_per_s: f64,
    /// Where the thread's slice of the hot part is (keys `hot_t<i>_n0` .. `hot_t<i>_other`).
    pub hot: Placement,
}

/// One interval's sample.
#[derive(Clone, Debug, PartialEq)]
pub struct ChaseSample {
    /// Seconds since the chase started.
    pub t: f64,
    /// Where the hot pages are.
    pub hot: Placement,
    /// Where the cold pages are.
    pub cold: Placement,
    /// Chase steps (dependent loads) per second during the interval, all threads together.
    pub steps_per_s: f64,
    /// Nanoseconds per step (1e9 / `steps_per_s`; per thread latency: see [`ThreadSample`]).
    pub ns_per_step: f64,
    /// Per thread (key `threads` = its length; empty for lines without it).
    pub threads: Vec<ThreadSample>,
}

/// `chase done ...`: totals at the end.
#[derive(Clone, Debug, PartialEq)]
pub struct ChaseDone {
    /// Seconds the chase ran.
    pub t: f64,
    /// Steps in total.
    pub steps: u64,
    /// Final placement of the hot pages.
    pub hot: Placement,
    /// Final placement of the cold pages.
    pub cold: Placement,
    /// Mean steps per second.
    pub steps_per_s: f64,
    /// Mean nanoseconds per step.
    pub ns_per_step: f64,
    /// Per thread: mean speed and final placement of its slice.
    pub threads: Vec<ThreadSample>,
}

/// A line of `tierd-workload chase`.
#[derive(Clone, Debug, PartialEq)]
pub enum ChaseLine {
    /// The start line.
    Ready(ChaseReady),
    /// A periodic sample.
    Sample(ChaseSample),
    /// The end line.
    Done(ChaseDone),
}

/// A line of `tierd-workload hold`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldLine {
    /// Allocated and touched.
    Ready {
        /// The workload's pid.
        pid: i32,
        /// Start of the buffer.
        addr: u64,
        /// Bound node (-1: default policy).
        node: i32,
        /// MiB held.
        mib: u64,
        /// Placement after touching.
        placement: Placement,
    },
    /// After the hold.
    Done {
        /// Placement at the end.
        placement: Placement,
    },
}

/// The line of `tierd-workload move`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoveLine {
    /// Pages asked to move.
    pub pages: u64,
    /// The node they were placed on.
    pub from: i32,
    /// The target.
    pub to: u16,
    /// Seconds inside `move_pages`.
    pub secs: f64,
    /// Pages that changed node.
    pub moved: u64,
    /// Pages already on the target.
    pub already: u64,
    /// Pages that failed.
    pub failed: u64,
    /// Of those, pages that failed with `EBUSY` (with THP, passing every 4 KiB subpage yields
    /// one per huge page: the folio is still isolated when its next subpage is looked up).
    pub busy: u64,
    /// Moved MiB per second.
    pub moved_mib_s: f64,
    /// Requested MiB per second.
    pub requested_mib_s: f64,
}

/// One interval of `tierd-workload integrity`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IntegritySample {
    /// Seconds since the check loop started.
    pub t: f64,
    /// Page verifications so far (a page verified in two passes counts twice).
    pub verified_pages: u64,
    /// Page verifications that found at least one wrong word (checksum failures).
    pub failures: u64,
    /// Complete passes over the whole buffer (the slowest thread's count).
    pub passes: u64,
    /// Pages rewritten with a new generation so far.
    pub rewritten_pages: u64,
    /// Pages given back with `MADV_DONTNEED` (each then read back as zeros and rewritten) by
    /// `--split-every-ms` so far (0 and absent from lines without it).
    pub discarded_pages: u64,
    /// Pages unmapped (and dropped from the checked set) by `--split-every-ms` so far.
    pub unmapped_pages: u64,
    /// 2 MiB-aligned blocks cut into so far (the first discard or unmap there): each split a
    /// THP if one backed the block, as the kernel's `thp_split_pmd` tells.
    pub cut_blocks: u64,
    /// Where the buffer's pages are (`move_pages(2)` location query of the pages still
    /// mapped; keys `n0` .. `other`).
    pub placement: Placement,
}

/// A line of `tierd-workload integrity`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum IntegrityLine {
    /// `integrity pid=.. addr=0x.. node=.. mib=.. pages=.. threads=.. n0=.. .. ready`: filled,
    /// policy reset to `MPOL_DEFAULT`, the check starts.
    Ready {
        /// The workload's pid.
        pid: i32,
        /// Start of the buffer.
        addr: u64,
        /// The node it was filled on (-1: default policy).
        node: i32,
        /// Its size in MiB.
        mib: u64,
        /// Its pages.
        pages: u64,
        /// Checking threads.
        threads: u32,
        /// Placement after filling.
        placement: Placement,
    },
    /// `integrity t=.. verified_pages=.. failures=.. passes=.. rewritten_pages=.. n0=.. ..`.
    Sample(IntegritySample),
    /// `integrity bad addr=0x.. got=0x.. want=0x..`: the first wrong word of a failing page
    /// (only the first few failures are printed).
    Bad {
        /// Address of the word.
        addr: u64,
        /// What it held.
        got: u64,
        /// What it should have held.
        want: u64,
    },
    /// `integrity done t=.. failures=.. verified_pages=.. passes=.. rewritten_pages=.. n0=.. ..`.
    Done(IntegritySample),
}

/// A line split into bare words and `key=value` pairs.
struct Fields<'a> {
    line: &'a str,
    words: Vec<&'a str>,
    kv: Vec<(&'a str, &'a str)>,
}

impl<'a> Fields<'a> {
    fn split(line: &'a str, tag: &str) -> Result<Self, ParseError> {
        let line = line.trim();
        let mut it = line.split_whitespace();
        if it.next() != Some(tag) {
            return Err(err(line, &format!("tag {tag:?}")));
        }
        let (mut words, mut kv) = (Vec::new(), Vec::new());
        for tok in it {
            match tok.split_once('=') {
                Some(p) => kv.push(p),
                None => words.push(tok),
            }
        }
        Ok(Fields { line, words, kv })
    }

    fn has(&self, word: &str) -> bool {
        self.words.contains(&word)
    }

    fn raw(&self, key: &str) -> Result<&'a str, ParseError> {
        self.kv
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
            .ok_or_else(|| err(self.line, &format!("missing {key}")))
    }

    fn get<T: FromStr>(&self, key: &str) -> Result<T, ParseError> {
        let v = self.raw(key)?;
        v.parse().map_err(|_| err(self.line, &format!("{key}={v}")))
    }

    fn get_or<T: FromStr>(&self, key: &str, default: T) -> Result<T, ParseError> {
        if self.kv.iter().any(|(k, _)| *k == key) {
            self.get(key)
        } else {
            Ok(default)
        }
    }

    /// An optional list key (`0-1,3`; `-` or absent: empty).
    fn list(&self, key: &str) -> Result<Vec<u32>, ParseError> {
        match self.kv.iter().find(|(k, _)| *k == key) {
            None | Some((_, "-")) => Ok(Vec::new()),
            Some((_, v)) => parse_list(v).map_err(|e| err(self.line, &format!("{key}={v}: {e}"))),
        }
    }

    fn nodes(&self, key: &str) -> Result<NodeMask, ParseError> {
        match self.kv.iter().find(|(k, _)| *k == key) {
            None | Some((_, "-")) => Ok(NodeMask::EMPTY),
            Some((_, v)) => {
                parse_nodelist(v).map_err(|e| err(self.line, &format!("{key}={v}: {e}")))
            }
        }
    }

    /// The per-thread keys of a sample or done line (none when `threads` is absent).
    fn threads(&self) -> Result<Vec<ThreadSample>, ParseError> {
        let n: usize = self.get_or("threads", 0)?;
        (0..n)
            .map(|i| {
                Ok(ThreadSample {
                    steps_per_s: self.get(&format!("steps_per_s_t{i}"))?,
                    hot: Placement::read(self, &format!("hot_t{i}_"))?,
                })
            })
            .collect()
    }

    fn hex(&self, key: &str) -> Result<u64, ParseError> {
        let v = self.raw(key)?;
        v.strip_prefix("0x")
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .ok_or_else(|| err(self.line, &format!("{key}={v} (want 0x hex)")))
    }
}

fn err(line: &str, what: &str) -> ParseError {
    ParseError {
        line: line.to_owned(),
        what: what.to_owned(),
    }
}

impl ChaseLine {
    /// Parse a `chase ...` line (surrounding whitespace, e.g. a console's `\r`, is ignored).
    ///
    /// # Errors
    /// [`ParseError`] for another tag, a missing key or a malformed value.
    pub fn parse(line: &str) -> Result<Self, ParseError> {
        let x = Fields::split(line, "chase")?;
        if x.has("ready") {
            return Ok(ChaseLine::Ready(ChaseReady {
                pid: x.get("pid")?,
                addr: x.hex("addr")?,
                cold_addr: x.hex("cold_addr")?,
                node: x.get("node")?,
                total_pages: x.get("total_pages")?,
                hot_pages: x.get("hot_pages")?,
                tick_us: x.get("tick_us")?,
                ticker_pid: x.get("ticker_pid")?,
                threads: x.get_or("threads", 1)?,
                cpus: x.list("cpus")?,
                policy: x.get_or("policy", ChasePolicy::Default)?,
                policy_nodes: x.nodes("policy_nodes")?,
            }));
        }
        let hot = Placement::read(&x, "hot_")?;
        let cold = Placement::read(&x, "cold_")?;
        let (t, steps_per_s, ns_per_step) =
            (x.get("t")?, x.get("steps_per_s")?, x.get("ns_per_step")?);
        let threads = x.threads()?;
        if x.has("done") {
            return Ok(ChaseLine::Done(ChaseDone {
                t,
                steps: x.get("steps")?,
                hot,
                cold,
                steps_per_s,
                ns_per_step,
                threads,
            }));
        }
        Ok(ChaseLine::Sample(ChaseSample {
            t,
            hot,
            cold,
            steps_per_s,
            ns_per_step,
            threads,
        }))
    }
}

impl HoldLine {
    /// Parse a `hold ...` line.
    ///
    /// # Errors
    /// [`ParseError`] for another tag, a missing key or a malformed value.
    pub fn parse(line: &str) -> Result<Self, ParseError> {
        let x = Fields::split(line, "hold")?;
        let placement = Placement::read(&x, "")?;
        if x.has("done") {
            return Ok(HoldLine::Done { placement });
        }
        if !x.has("ready") {
            return Err(err(x.line, "word ready or done"));
        }
        Ok(HoldLine::Ready {
            pid: x.get("pid")?,
            addr: x.hex("addr")?,
            node: x.get("node")?,
            mib: x.get("mib")?,
            placement,
        })
    }
}

impl MoveLine {
    /// Parse a `move ...` line.
    ///
    /// # Errors
    /// [`ParseError`] for another tag, a missing key or a malformed value.
    pub fn parse(line: &str) -> Result<Self, ParseError> {
        let x = Fields::split(line, "move")?;
        Ok(MoveLine {
            pages: x.get("pages")?,
            from: x.get("from")?,
            to: x.get("to")?,
            secs: x.get("secs")?,
            moved: x.get("moved")?,
            already: x.get("already")?,
            failed: x.get("failed")?,
            busy: x.get("busy")?,
            moved_mib_s: x.get("moved_mib_s")?,
            requested_mib_s: x.get("requested_mib_s")?,
        })
    }
}

impl IntegrityLine {
    /// Parse an `integrity ...` line.
    ///
    /// # Errors
    /// [`ParseError`] for another tag, a missing key or a malformed value.
    pub fn parse(line: &str) -> Result<Self, ParseError> {
        let x = Fields::split(line, "integrity")?;
        if x.has("bad") {
            return Ok(IntegrityLine::Bad {
                addr: x.hex("addr")?,
                got: x.hex("got")?,
                want: x.hex("want")?,
            });
        }
        let placement = Placement::read(&x, "")?;
        if x.has("ready") {
            return Ok(IntegrityLine::Ready {
                pid: x.get("pid")?,
                addr: x.hex("addr")?,
                node: x.get("node")?,
                mib: x.get("mib")?,
                pages: x.get("pages")?,
                threads: x.get("threads")?,
                placement,
            });
        }
        let s = IntegritySample {
            t: x.get("t")?,
            verified_pages: x.get("verified_pages")?,
            failures: x.get("failures")?,
            passes: x.get("passes")?,
            rewritten_pages: x.get("rewritten_pages")?,
            discarded_pages: x.get_or("discarded_pages", 0)?,
            unmapped_pages: x.get_or("unmapped_pages", 0)?,
            cut_blocks: x.get_or("cut_blocks", 0)?,
            placement,
        };
        Ok(if x.has("done") {
            IntegrityLine::Done(s)
        } else {
            IntegrityLine::Sample(s)
        })
    }
}

impl fmt::Display for IntegrityLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sample = |f: &mut fmt::Formatter<'_>, s: &IntegritySample| {
            write!(
                f,
                "t={:.3} verified_pages={} failures={} passes={} rewritten_pages={} ",
                s.t, s.verified_pages, s.failures, s.passes, s.rewritten_pages
            )?;
            // Only a run that cuts its buffer has these (older lines parse without them).
            if s.discarded_pages + s.unmapped_pages + s.cut_blocks > 0 {
                write!(
                    f,
                    "discarded_pages={} unmapped_pages={} cut_blocks={} ",
                    s.discarded_pages, s.unmapped_pages, s.cut_blocks
                )?;
            }
            s.placement.write(f, "")
        };
        match self {
            IntegrityLine::Ready {
                pid,
                addr,
                node,
                mib,
                pages,
                threads,
                placement,
            } => {
                write!(
                    f,
                    "integrity pid={pid} addr={addr:#x} node={node} mib={mib} pages={pages} threads={threads} "
                )?;
                placement.write(f, "")?;
                f.write_str(" ready")
            }
            IntegrityLine::Sample(s) => {
                f.write_str("integrity ")?;
                sample(f, s)
            }
            IntegrityLine::Bad { addr, got, want } => {
                write!(
                    f,
                    "integrity bad addr={addr:#x} got={got:#x} want={want:#x}"
                )
            }
            IntegrityLine::Done(s) => {
                f.write_str("integrity done ")?;
                sample(f, s)
            }
        }
    }
}

/// ` threads=N steps_per_s_t0=.. hot_t0_n0=.. ..` (nothing for an empty list).
fn write_threads(f: &mut fmt::Formatter<'_>, threads: &[ThreadSample]) -> fmt::Result {
    if threads.is_empty() {
        return Ok(());
    }
    write!(f, " threads={}", threads.len())?;
    for (i, t) in threads.iter().enumerate() {
        write!(f, " steps_per_s_t{i}={:.0} ", t.steps_per_s)?;
        t.hot.write(f, &format!("hot_t{i}_"))?;
    }
    Ok(())
}

/// A list in the kernel's format, `-` when empty.
fn write_list(f: &mut fmt::Formatter<'_>, key: &str, items: &[u32]) -> fmt::Result {
    write!(f, " {key}=")?;
    if items.is_empty() {
        return f.write_str("-");
    }
    let strs: Vec<String> = items.iter().map(u32::to_string).collect();
    f.write_str(&strs.join(","))
}

impl fmt::Display for ChaseLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChaseLine::Ready(r) => {
                write!(
                    f,
                    "chase pid={} addr={:#x} cold_addr={:#x} node={} total_pages={} hot_pages={} tick_us={} ticker_pid={} threads={}",
                    r.pid, r.addr, r.cold_addr, r.node, r.total_pages, r.hot_pages, r.tick_us, r.ticker_pid, r.threads
                )?;
                write_list(f, "cpus", &r.cpus)?;
                write!(f, " policy={} policy_nodes=", r.policy)?;
                if r.policy_nodes.is_empty() {
                    f.write_str("-")?;
                } else {
                    write!(f, "{}", r.policy_nodes)?;
                }
                f.write_str(" ready")
            }
            ChaseLine::Sample(s) => {
                write!(f, "chase t={:.3} ", s.t)?;
                s.hot.write(f, "hot_")?;
                f.write_str(" ")?;
                s.cold.write(f, "cold_")?;
                write!(
                    f,
                    " steps_per_s={:.0} ns_per_step={:.2}",
                    s.steps_per_s, s.ns_per_step
                )?;
                write_threads(f, &s.threads)
            }
            ChaseLine::Done(d) => {
                write!(f, "chase done t={:.3} steps={} ", d.t, d.steps)?;
                d.hot.write(f, "hot_")?;
                f.write_str(" ")?;
                d.cold.write(f, "cold_")?;
                write!(
                    f,
                    " steps_per_s={:.0} ns_per_step={:.2}",
                    d.steps_per_s, d.ns_per_step
                )?;
                write_threads(f, &d.threads)
            }
        }
    }
}

impl fmt::Display for HoldLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HoldLine::Ready {
                pid,
                addr,
                node,
                mib,
                placement,
            } => {
                write!(f, "hold pid={pid} addr={addr:#x} node={node} mib={mib} ")?;
                placement.write(f, "")?;
                f.write_str(" ready")
            }
            HoldLine::Done { placement } => {
                f.write_str("hold done ")?;
                placement.write(f, "")
            }
        }
    }
}

impl fmt::Display for MoveLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "move pages={} from={} to={} secs={:.6} moved={} already={} failed={} busy={} moved_mib_s={:.1} requested_mib_s={:.1}",
            self.pages,
            self.from,
            self.to,
            self.secs,
            self.moved,
            self.already,
            self.failed,
            self.busy,
            self.moved_mib_s,
            self.requested_mib_s
        )
    }
}

/// The median of repeated figures a harness reads from these lines (`pte-cost` rounds, `tierd
/// lab scale`'s moves); `None` when there are none. An even count takes the mean of the middle
/// two.
#[must_use]
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        f64::midpoint(v[m - 1], v[m])
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(Vec::new()), None);
    }

    use super::*;

    /// ENOENT, the status of a page that is not present.
    fn libc_enoent() -> i32 {
        2
    }

    fn p(n0: u64, n1: u64, other: u64) -> Placement {
        Placement {
            nodes: [n0, n1, 0, 0],
            other,
        }
    }

    #[test]
    fn parses_the_earlier_chase_lines() {
        let r = ChaseLine::parse(
            "chase pid=812 addr=0x7f0c2e400000 cold_addr=0x7f0c26400000 node=1 total_pages=131072 hot_pages=32768 tick_us=1000 ticker_pid=813 ready\r",
        )
        .expect("ready");
        assert_eq!(
            r,
            ChaseLine::Ready(ChaseReady {
                pid: 812,
                addr: 0x7f0c_2e40_0000,
                cold_addr: 0x7f0c_2640_0000,
                node: 1,
                total_pages: 131_072,
                hot_pages: 32_768,
                tick_us: 1000,
                ticker_pid: 813,
                threads: 1,
                cpus: vec![],
                policy: ChasePolicy::Default,
                policy_nodes: NodeMask::EMPTY,
            })
        );
        let s = ChaseLine::parse(
            "chase t=0.500 hot_n0=120 hot_n1=32648 hot_other=0 cold_n0=0 cold_n1=98304 cold_other=0 steps_per_s=3391772 ns_per_step=294.83",
        )
        .expect("sample");
        let ChaseLine::Sample(s) = s else {
            panic!("not a sample: {s:?}")
        };
        assert_eq!(s.hot, p(120, 32648, 0));
        assert_eq!(s.cold.node(1), 98_304);
        assert!(s.threads.is_empty());
        assert!((s.t - 0.5).abs() < 1e-9 && (s.ns_per_step - 294.83).abs() < 1e-9);
        let d = ChaseLine::parse(
            "chase done t=15.001 steps=50593792 hot_n0=1 hot_n1=2 hot_other=3 cold_n0=4 cold_n1=5 cold_other=6 steps_per_s=10 ns_per_step=1e8",
        )
        .expect("done");
        let ChaseLine::Done(d) = d else {
            panic!("not done: {d:?}")
        };
        assert_eq!((d.steps, d.hot.other, d.cold.other), (50_593_792, 3, 6));
    }

    #[test]
    fn parses_threads_cpus_and_policy() {
        let r = ChaseLine::parse(
            "chase pid=1 addr=0x1000 cold_addr=0x0 node=1 total_pages=2 hot_pages=2 tick_us=0 ticker_pid=0 threads=2 cpus=0-1,3 policy=preferred-many-balancing policy_nodes=0-1 ready",
        )
        .expect("ready");
        let ChaseLine::Ready(r) = r else {
            panic!("{r:?}")
        };
        assert_eq!(r.threads, 2);
        assert_eq!(r.cpus, vec![0, 1, 3]);
        assert_eq!(r.policy, ChasePolicy::PreferredManyBalancing);
        assert_eq!(r.policy_nodes, NodeMask(0b11));
        let s = ChaseLine::parse(
            "chase t=1 hot_n0=1 hot_n1=1 hot_n2=0 hot_n3=0 hot_other=0 cold_n0=0 cold_n1=0 cold_other=0 steps_per_s=30 ns_per_step=1 threads=2 steps_per_s_t0=10 hot_t0_n0=1 hot_t0_n1=0 hot_t0_other=0 steps_per_s_t1=20 hot_t1_n0=0 hot_t1_n1=0 hot_t1_n2=1 hot_t1_other=0",
        )
        .expect("sample");
        let ChaseLine::Sample(s) = s else {
            panic!("{s:?}")
        };
        assert_eq!(s.threads.len(), 2);
        assert_eq!(s.threads[0].hot, p(1, 0, 0));
        assert_eq!(s.threads[1].hot.node(2), 1);
        assert!((s.threads[1].steps_per_s - 20.0).abs() < 1e-9);
        let e = ChaseLine::parse(
            "chase t=1 hot_n0=1 hot_n1=1 hot_other=0 cold_n0=0 cold_n1=0 cold_other=0 steps_per_s=30 ns_per_step=1 threads=2 steps_per_s_t0=10 hot_t0_n0=1 hot_t0_n1=0 hot_t0_other=0",
        )
        .expect_err("thread 1 missing");
        assert!(e.what.contains("steps_per_s_t1"), "{e}");
        assert!("preferred".parse::<ChasePolicy>().is_err());
        let e = ChaseLine::parse(
            "chase pid=1 addr=0x1000 cold_addr=0x0 node=1 total_pages=2 hot_pages=2 tick_us=0 ticker_pid=0 policy_nodes=0-x ready",
        )
        .expect_err("bad nodelist");
        assert!(e.what.contains("policy_nodes"), "{e}");
    }

    #[test]
    fn display_roundtrips() {
        let th = vec![
            ThreadSample {
                steps_per_s: 10.0,
                hot: p(1, 0, 0),
            },
            ThreadSample {
                steps_per_s: 20.0,
                hot: Placement {
                    nodes: [0, 0, 1, 0],
                    other: 0,
                },
            },
        ];
        let lines = [
            ChaseLine::Ready(ChaseReady {
                pid: 1,
                addr: 0x1000,
                cold_addr: 0x3000,
                node: -1,
                total_pages: 4,
                hot_pages: 1,
                tick_us: 0,
                ticker_pid: 0,
                threads: 1,
                cpus: vec![],
                policy: ChasePolicy::Default,
                policy_nodes: NodeMask::EMPTY,
            }),
            ChaseLine::Ready(ChaseReady {
                pid: 1,
                addr: 0x1000,
                cold_addr: 0x3000,
                node: 0,
                total_pages: 4,
                hot_pages: 2,
                tick_us: 10,
                ticker_pid: 7,
                threads: 2,
                cpus: vec![0, 1],
                policy: ChasePolicy::PreferredMany,
                policy_nodes: NodeMask(0b101),
            }),
            ChaseLine::Sample(ChaseSample {
                t: 1.25,
                hot: p(1, 0, 0),
                cold: p(0, 2, 1),
                steps_per_s: 1000.0,
                ns_per_step: 1.0e6,
                threads: vec![],
            }),
            ChaseLine::Sample(ChaseSample {
                t: 1.25,
                hot: p(1, 0, 1),
                cold: Placement {
                    nodes: [0, 2, 3, 4],
                    other: 1,
                },
                steps_per_s: 30.0,
                ns_per_step: 1.0e6,
                threads: th.clone(),
            }),
            ChaseLine::Done(ChaseDone {
                t: 2.5,
                steps: 99,
                hot: Placement::default(),
                cold: p(3, 0, 0),
                steps_per_s: 40.0,
                ns_per_step: 25_000_000.0,
                threads: th,
            }),
        ];
        for l in lines {
            assert_eq!(ChaseLine::parse(&l.to_string()), Ok(l.clone()), "{l}");
        }
        let h = HoldLine::Ready {
            pid: 5,
            addr: 0xabc000,
            node: 0,
            mib: 8,
            placement: p(2048, 0, 0),
        };
        assert_eq!(HoldLine::parse(&h.to_string()), Ok(h));
        let h = HoldLine::Done {
            placement: p(1, 2, 3),
        };
        assert_eq!(HoldLine::parse(&h.to_string()), Ok(h));
        let m = MoveLine {
            pages: 10,
            from: 0,
            to: 1,
            secs: 0.5,
            moved: 9,
            already: 0,
            failed: 1,
            busy: 1,
            moved_mib_s: 0.1,
            requested_mib_s: 0.1,
        };
        assert_eq!(MoveLine::parse(&m.to_string()), Ok(m));
        let s = IntegritySample {
            t: 1.5,
            verified_pages: 100,
            failures: 2,
            passes: 3,
            rewritten_pages: 7,
            discarded_pages: 0,
            unmapped_pages: 0,
            cut_blocks: 0,
            placement: Placement {
                nodes: [1, 2, 3, 4],
                other: 5,
            },
        };
        // A run that cuts its buffer (--split-every-ms) reports its cuts.
        let cut = IntegritySample {
            discarded_pages: 9,
            unmapped_pages: 4,
            cut_blocks: 6,
            ..s
        };
        assert!(IntegrityLine::Sample(cut)
            .to_string()
            .contains(" discarded_pages=9 unmapped_pages=4 cut_blocks=6 "));
        assert!(!IntegrityLine::Sample(s).to_string().contains("discarded"));
        for l in [
            IntegrityLine::Sample(cut),
            IntegrityLine::Done(cut),
            IntegrityLine::Ready {
                pid: 3,
                addr: 0x7000,
                node: 1,
                mib: 4,
                pages: 1024,
                threads: 2,
                placement: p(0, 1024, 0),
            },
            IntegrityLine::Sample(s),
            IntegrityLine::Bad {
                addr: 0x7008,
                got: 0,
                want: u64::MAX,
            },
            IntegrityLine::Done(s),
        ] {
            assert_eq!(IntegrityLine::parse(&l.to_string()), Ok(l), "{l}");
        }
    }

    #[test]
    fn parses_the_documented_integrity_lines() {
        let l = IntegrityLine::parse(
            "integrity t=1.000 verified_pages=196608 failures=1 passes=3 rewritten_pages=12288 n0=60000 n1=5536 n2=0 n3=0 other=0",
        )
        .expect("sample");
        let IntegrityLine::Sample(s) = l else {
            panic!("{l:?}")
        };
        assert_eq!((s.verified_pages, s.failures, s.passes), (196_608, 1, 3));
        assert_eq!(s.placement, p(60_000, 5_536, 0));
        let l = IntegrityLine::parse("integrity done t=2 verified_pages=5 failures=0 passes=1 rewritten_pages=0 n0=1 n1=0 other=0").expect("done");
        assert!(matches!(l, IntegrityLine::Done(s) if s.verified_pages == 5));
        let e = IntegrityLine::parse("integrity done t=2 failures=0 passes=1 n0=1 n1=0 other=0")
            .expect_err("no verified_pages");
        assert!(e.what.contains("verified_pages"), "{e}");
        assert!(IntegrityLine::parse("integrity bad addr=16 got=0x0 want=0x1").is_err());
    }

    #[test]
    fn rejects_other_tags_missing_and_bad_values() {
        let e = ChaseLine::parse("hold done n0=1 n1=2 other=3").expect_err("tag");
        assert!(e.what.contains("chase"), "{e}");
        let e =
            ChaseLine::parse("chase t=1 hot_n0=1 hot_n1=0 hot_other=0 steps_per_s=1 ns_per_step=1")
                .expect_err("no cold");
        assert!(e.what.contains("cold_"), "{e}");
        let e = ChaseLine::parse(
            "chase pid=x addr=0x10 node=0 total_pages=1 hot_pages=1 tick_us=0 ticker_pid=0 ready",
        )
        .expect_err("pid");
        assert_eq!(e.what, "pid=x");
        let e = ChaseLine::parse(
            "chase pid=1 addr=16 node=0 total_pages=1 hot_pages=1 tick_us=0 ticker_pid=0 ready",
        )
        .expect_err("addr");
        assert!(e.what.contains("hex"), "{e}");
        assert!(HoldLine::parse("hold n0=1 n1=2 other=3").is_err());
        assert!(ChaseLine::parse("").is_err());
        assert!(IntegrityLine::parse("chase done").is_err());
    }

    #[test]
    fn unknown_keys_are_ignored() {
        let l = HoldLine::parse("hold done n0=1 n1=2 other=3 extra=9 thp").expect("hold");
        assert_eq!(
            l,
            HoldLine::Done {
                placement: p(1, 2, 3)
            }
        );
    }

    #[test]
    fn placement_counts_nodes_and_errors() {
        let pl = Placement::of(&[
            Ok(NodeId(0)),
            Ok(NodeId(1)),
            Ok(NodeId(1)),
            Ok(NodeId(2)),
            Ok(NodeId(3)),
            Ok(NodeId(4)),
            Err(libc_enoent()),
        ]);
        assert_eq!(
            pl,
            Placement {
                nodes: [1, 2, 1, 1],
                other: 2
            }
        );
        assert_eq!(pl.total(), 7);
        assert_eq!(Placement::all_on(2, 5).node(2), 5);
        assert_eq!(Placement::all_on(9, 5).other, 5);
        assert_eq!(pl.node(7), 0);
    }
}
