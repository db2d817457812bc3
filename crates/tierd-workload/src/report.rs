//! # report: the workload's machine-readable output lines, written and parsed in one place
//!
//! Every line the workload prints for a harness is `<tag> [word] key=value ...` on one line:
//!
//! ```text
//! chase pid=812 addr=0x7f0c2e400000 node=1 total_pages=131072 hot_pages=32768 tick_us=0 ticker_pid=0 ready
//! chase t=0.500 hot_n0=120 hot_n1=32648 hot_other=0 cold_n0=0 cold_n1=98304 cold_other=0 steps_per_s=3391772 ns_per_step=294.83
//! chase done t=15.001 steps=50593792 hot_n0=... cold_other=0 steps_per_s=3372734 ns_per_step=296.49
//! hold pid=900 addr=0x7f... node=0 mib=1200 n0=307200 n1=0 other=0 ready
//! hold done n0=290000 n1=17200 other=0
//! move pages=65536 from=0 to=1 secs=1.234 moved=65536 already=0 failed=0 busy=0 moved_mib_s=207.4 requested_mib_s=207.4
//! ```
//!
//! Placement counts are 4 KiB pages from a `move_pages(2)` location query: `n0`/`n1` pages on
//! node 0 / node 1, `other` pages on another node or not located (not present, error).
//! Unknown keys are ignored by the parsers so that fields can be added; missing keys are an
//! error. The [`std::fmt::Display`] impls are the writers, so a parsed line prints back the same.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;
use tierd_engine::types::NodeId;

/// A line that is not what the parser expected.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("cannot parse {what} in line {line:?}")]
pub struct ParseError {
    /// The offending line.
    pub line: String,
    /// What was missing or malformed.
    pub what: String,
}

/// Pages per node of a region.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// Pages on node 0.
    pub n0: u64,
    /// Pages on node 1.
    pub n1: u64,
    /// Pages elsewhere or not located.
    pub other: u64,
}

impl Placement {
    /// All pages counted.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.n0 + self.n1 + self.other
    }

    /// Count one location-query result (a node, or an errno).
    pub fn add(&mut self, r: Result<NodeId, i32>) {
        match r {
            Ok(NodeId(0)) => self.n0 += 1,
            Ok(NodeId(1)) => self.n1 += 1,
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
        write!(
            f,
            "{prefix}n0={} {prefix}n1={} {prefix}other={}",
            self.n0, self.n1, self.other
        )
    }

    fn read(x: &Fields<'_>, prefix: &str) -> Result<Self, ParseError> {
        Ok(Placement {
            n0: x.get(&format!("{prefix}n0"))?,
            n1: x.get(&format!("{prefix}n1"))?,
            other: x.get(&format!("{prefix}other"))?,
        })
    }
}

/// `chase ... ready`: the buffer is placed and the chase starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// The ticker's pid (0: none).
    pub ticker_pid: i32,
}

/// One interval's sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChaseSample {
    /// Seconds since the chase started.
    pub t: f64,
    /// Where the hot pages are.
    pub hot: Placement,
    /// Where the cold pages are.
    pub cold: Placement,
    /// Chase steps (dependent loads) per second during the interval.
    pub steps_per_s: f64,
    /// Nanoseconds per step (1e9 / `steps_per_s`).
    pub ns_per_step: f64,
}

/// `chase done ...`: totals at the end.
#[derive(Clone, Copy, Debug, PartialEq)]
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
}

/// A line of `tierd-workload chase`.
#[derive(Clone, Copy, Debug, PartialEq)]
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
            }));
        }
        let hot = Placement::read(&x, "hot_")?;
        let cold = Placement::read(&x, "cold_")?;
        let (t, steps_per_s, ns_per_step) =
            (x.get("t")?, x.get("steps_per_s")?, x.get("ns_per_step")?);
        if x.has("done") {
            return Ok(ChaseLine::Done(ChaseDone {
                t,
                steps: x.get("steps")?,
                hot,
                cold,
                steps_per_s,
                ns_per_step,
            }));
        }
        Ok(ChaseLine::Sample(ChaseSample {
            t,
            hot,
            cold,
            steps_per_s,
            ns_per_step,
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

impl fmt::Display for ChaseLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChaseLine::Ready(r) => write!(
                f,
                "chase pid={} addr={:#x} cold_addr={:#x} node={} total_pages={} hot_pages={} tick_us={} ticker_pid={} ready",
                r.pid, r.addr, r.cold_addr, r.node, r.total_pages, r.hot_pages, r.tick_us, r.ticker_pid
            ),
            ChaseLine::Sample(s) => {
                write!(f, "chase t={:.3} ", s.t)?;
                s.hot.write(f, "hot_")?;
                f.write_str(" ")?;
                s.cold.write(f, "cold_")?;
                write!(
                    f,
                    " steps_per_s={:.0} ns_per_step={:.2}",
                    s.steps_per_s, s.ns_per_step
                )
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
                )
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

#[cfg(test)]
mod tests {
    use super::*;

    /// ENOENT, the status of a page that is not present.
    fn libc_enoent() -> i32 {
        2
    }

    #[test]
    fn parses_the_documented_chase_lines() {
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
            })
        );
        let s = ChaseLine::parse(
            "chase t=0.500 hot_n0=120 hot_n1=32648 hot_other=0 cold_n0=0 cold_n1=98304 cold_other=0 steps_per_s=3391772 ns_per_step=294.83",
        )
        .expect("sample");
        let ChaseLine::Sample(s) = s else {
            panic!("not a sample: {s:?}")
        };
        assert_eq!(
            s.hot,
            Placement {
                n0: 120,
                n1: 32648,
                other: 0
            }
        );
        assert_eq!(s.cold.n1, 98_304);
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
    fn display_roundtrips() {
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
            }),
            ChaseLine::Sample(ChaseSample {
                t: 1.25,
                hot: Placement {
                    n0: 1,
                    n1: 0,
                    other: 0,
                },
                cold: Placement {
                    n0: 0,
                    n1: 2,
                    other: 1,
                },
                steps_per_s: 1000.0,
                ns_per_step: 1.0e6,
            }),
            ChaseLine::Done(ChaseDone {
                t: 2.5,
                steps: 99,
                hot: Placement::default(),
                cold: Placement {
                    n0: 3,
                    n1: 0,
                    other: 0,
                },
                steps_per_s: 40.0,
                ns_per_step: 25_000_000.0,
            }),
        ];
        for l in lines {
            assert_eq!(ChaseLine::parse(&l.to_string()), Ok(l), "{l}");
        }
        let h = HoldLine::Ready {
            pid: 5,
            addr: 0xabc000,
            node: 0,
            mib: 8,
            placement: Placement {
                n0: 2048,
                n1: 0,
                other: 0,
            },
        };
        assert_eq!(HoldLine::parse(&h.to_string()), Ok(h));
        let h = HoldLine::Done {
            placement: Placement {
                n0: 1,
                n1: 2,
                other: 3,
            },
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
    }

    #[test]
    fn rejects_other_tags_missing_and_bad_values() {
        let e = ChaseLine::parse("hold done n0=1 n1=2 other=3").expect_err("tag");
        assert!(e.what.contains("chase"), "{e}");
        let e =
            ChaseLine::parse("chase t=1 hot_n0=1 hot_n1=0 hot_other=0 steps_per_s=1 ns_per_step=1")
                .expect_err("no cold");
        assert!(e.what.contains("cold_n0"), "{e}");
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
    }

    #[test]
    fn unknown_keys_are_ignored() {
        let l = HoldLine::parse("hold done n0=1 n1=2 other=3 extra=9 thp").expect("hold");
        assert_eq!(
            l,
            HoldLine::Done {
                placement: Placement {
                    n0: 1,
                    n1: 2,
                    other: 3
                }
            }
        );
    }

    #[test]
    fn placement_counts_nodes_and_errors() {
        let p = Placement::of(&[
            Ok(NodeId(0)),
            Ok(NodeId(1)),
            Ok(NodeId(1)),
            Ok(NodeId(2)),
            Err(libc_enoent()),
        ]);
        assert_eq!(
            p,
            Placement {
                n0: 1,
                n1: 2,
                other: 2
            }
        );
        assert_eq!(p.total(), 5);
    }
}
