//! The trace format: a header, then length-prefixed records (docs/trace.md documents it).
//!
//! ```text
//! file    := magic "TIERDTRC" (8 bytes) | version u16 LE | header_len u32 LE | header | record*
//! header  := JSON (UTF-8, header_len bytes): Header
//! record  := len u32 LE | payload (len bytes): Record in bincode 2, standard configuration
//! ```
//!
//! Why this shape:
//! - The header is JSON because it is read by people (`head -c 4096 trace.0 | strings`) and
//!   holds the engine configuration, whose serde form already has defaults for every key: a
//!   newer tierd reads an older header without a version bump for every added setting.
//! - The records are bincode 2 over the engine's own serde types (observations, owner
//!   updates, usage, batches, reports): varint integers make an observation 12-20 bytes, the
//!   encoder is a well-kept crate, and nothing is hand-written twice. The price is that the
//!   record layout follows the engine's types: `tests::record_layout_is_pinned` fixes the bytes
//!   of one record of each kind, so a change to those types fails it and must bump [`VERSION`].
//! - Each record carries its own length, so a reader can bound it ([`MAX_RECORD`]) before
//!   allocating, name the offset of a bad one, and a writer can append a whole pass at once.
//!
//! Decoding is total: any byte string gives records or a [`TraceError`] naming the offset,
//! never a panic (property tests below, and the `trace` fuzz target).

use serde::{Deserialize, Serialize};
use tierd_engine::plan::{MigrationBatch, MigrationReport, SystemUsage};
use tierd_engine::topology::{NodeSpec, Topology, TopologyError};
use tierd_engine::types::Nanos;
use tierd_engine::{EngineConfig, IdleObservation, Observation, OwnerUpdate};

/// The first bytes of every trace file.
pub const MAGIC: [u8; 8] = *b"TIERDTRC";
/// The format version this crate writes. Version 2 added [`Record::Config`], version 3
/// [`Record::Idle`]; an older file has none of them and reads the same.
pub const VERSION: u16 = 3;
/// The oldest format version this crate reads.
pub const MIN_VERSION: u16 = 1;
/// Bytes before the header: magic, version, header length.
pub const PREAMBLE: usize = 8 + 2 + 4;
/// The largest header accepted (a config and a topology are a few KiB).
pub const MAX_HEADER: usize = 1 << 20;
/// The largest record accepted: a pass of 512 Ki observations at 20 bytes is 10 MiB, a hostile
/// length field must not make the reader allocate gigabytes.
pub const MAX_RECORD: usize = 64 << 20;

/// What a trace file starts with: what the engine was built from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// The tierd version that wrote it.
    pub tierd_version: String,
    /// The file's number in a rotated set (0 for the first file of a run).
    pub seq: u32,
    /// The engine configuration as the engine got it.
    pub config: EngineConfig,
    /// The memory nodes ([`Topology::describe`]).
    pub nodes: Vec<NodeSpec>,
    /// The SLIT distances, in `nodes` order.
    pub distance: Vec<Vec<u32>>,
    /// The backend's [`tierd_engine::Backend::join_pages`]: how batches were joined into
    /// calls, which a replay must do the same way.
    pub join_pages: u64,
    /// Free text: where it was recorded (host, lab row).
    #[serde(default)]
    pub note: String,
}

impl Header {
    /// The header of file `seq` of a run of an engine built from `config` and `topology`.
    #[must_use]
    pub fn new(config: EngineConfig, topology: &Topology, join_pages: usize, seq: u32) -> Self {
        let (nodes, distance) = topology.describe();
        Header {
            tierd_version: env!("CARGO_PKG_VERSION").to_string(),
            seq,
            config,
            nodes,
            distance,
            join_pages: join_pages as u64,
            note: String::new(),
        }
    }

    /// The topology the engine ran on.
    ///
    /// # Errors
    /// [`TraceError::Topology`] when the recorded nodes do not make a topology.
    pub fn topology(&self) -> Result<Topology, TraceError> {
        Topology::new(self.nodes.clone(), self.distance.clone()).map_err(TraceError::Topology)
    }
}

/// One thing the engine was given or decided, in the order it happened. A pass is a `Pass`
/// record and what the backend returned during [`tierd_engine::step`]: `Owners`,
/// `Observations`, `Usage`, then a `Batch` (the engine's decision, as the backend got it) and
/// its `Report` per migration call. A backend failure ends the pass early: the records
/// stop where the call failed (a `Batch` without its `Report`, no `Usage`, ...).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Record {
    /// A pass starts at this time (the `now` of [`tierd_engine::step`]).
    Pass {
        /// The pass's time, from the daemon's start.
        now: Nanos,
    },
    /// What `drain_owner_updates` returned.
    Owners(Vec<OwnerUpdate>),
    /// What `drain_observations` returned: per-source observations with time, page (space,
    /// vpn, size), node and source.
    Observations(Vec<Observation>),
    /// What `usage` returned.
    Usage(SystemUsage),
    /// A batch the engine asked the backend to move (a decision).
    Batch(MigrationBatch),
    /// The backend's report for the batch before it.
    Report(MigrationReport),
    /// The engine was reconfigured before the next pass (SIGHUP reload): the new
    /// [`EngineConfig`] as JSON, as in the header (version 2).
    Config(String),
    /// What `drain_idle` returned, between `Observations` and `Usage`; written only when
    /// there were idle facts (version 3).
    Idle(Vec<IdleObservation>),
}

/// Why a trace could not be read. Each names the byte offset in the file.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file does not start with [`MAGIC`].
    #[error("not a tierd trace: it does not start with \"TIERDTRC\"")]
    BadMagic,
    /// A version this tierd does not read.
    #[error("trace format version {found}, this tierd reads versions {MIN_VERSION} to {VERSION}")]
    Version {
        /// The file's version.
        found: u16,
    },
    /// The file ends inside something.
    #[error("truncated at offset {offset}: {what} needs {need} bytes, {have} left")]
    Truncated {
        /// Where the cut item starts.
        offset: usize,
        /// What was being read.
        what: &'static str,
        /// Bytes it needs.
        need: usize,
        /// Bytes the file still has.
        have: usize,
    },
    /// A length field over its bound.
    #[error("{what} at offset {offset} claims {len} bytes, more than the {max} allowed")]
    TooLong {
        /// Where the length field is.
        offset: usize,
        /// What it is the length of.
        what: &'static str,
        /// The claimed length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The JSON header does not parse.
    #[error("header at offset {PREAMBLE} is not valid: {reason}")]
    Header {
        /// serde_json's message.
        reason: String,
    },
    /// A record's payload does not decode.
    #[error("record at offset {offset} does not decode: {reason}")]
    Record {
        /// Where its length field is.
        offset: usize,
        /// bincode's message.
        reason: String,
    },
    /// A record's payload has bytes after its content.
    #[error("record at offset {offset} has {extra} bytes after its content")]
    Trailing {
        /// Where its length field is.
        offset: usize,
        /// Bytes left over.
        extra: usize,
    },
    /// The recorded topology is refused by the engine. (Not a `source`: the message holds
    /// it, and a caller printing the chain would say it twice.)
    #[error("the recorded topology is not valid: {0}")]
    Topology(TopologyError),
}

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_RECORD>()
}

/// The file's first bytes: magic, version and the header.
///
/// # Panics
/// Never: the header is plain data that serde_json always serializes.
#[must_use]
pub fn encode_header(h: &Header) -> Vec<u8> {
    #[allow(clippy::expect_used)]
    let json = serde_json::to_vec(h).expect("a Header always serializes");
    let mut out = Vec::with_capacity(PREAMBLE + json.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&u32::try_from(json.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(&json);
    out
}

/// Appends one record (length and payload) to `out`.
pub fn encode_record(r: &Record, out: &mut Vec<u8>) {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    // Encoding into a Vec cannot fail for these types (no maps with non-string keys matter to
    // bincode, no I/O); were it to, the record is dropped rather than the daemon stopped.
    if bincode::serde::encode_into_std_write(r, out, bincode::config::standard()).is_err() {
        out.truncate(at);
        return;
    }
    let len = u32::try_from(out.len() - at - 4).unwrap_or(u32::MAX);
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

fn take<'a>(
    buf: &'a [u8],
    offset: usize,
    need: usize,
    what: &'static str,
) -> Result<&'a [u8], TraceError> {
    let have = buf.len().saturating_sub(offset);
    if have < need {
        return Err(TraceError::Truncated {
            offset,
            what,
            need,
            have,
        });
    }
    Ok(&buf[offset..offset + need])
}

fn u32_at(buf: &[u8], offset: usize, what: &'static str) -> Result<usize, TraceError> {
    let b = take(buf, offset, 4, what)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
}

/// Reads the header; returns it and the offset of the first record.
///
/// # Errors
/// A [`TraceError`] for a wrong magic or version, a cut or oversized header, bad JSON.
pub fn decode_header(buf: &[u8]) -> Result<(Header, usize), TraceError> {
    let magic = take(buf, 0, 8, "the magic")?;
    if magic != MAGIC {
        return Err(TraceError::BadMagic);
    }
    let v = take(buf, 8, 2, "the version")?;
    let found = u16::from_le_bytes([v[0], v[1]]);
    if !(MIN_VERSION..=VERSION).contains(&found) {
        return Err(TraceError::Version { found });
    }
    let len = u32_at(buf, 10, "the header length")?;
    if len > MAX_HEADER {
        return Err(TraceError::TooLong {
            offset: 10,
            what: "the header",
            len,
            max: MAX_HEADER,
        });
    }
    let json = take(buf, PREAMBLE, len, "the header")?;
    let h = serde_json::from_slice(json).map_err(|e| TraceError::Header {
        reason: e.to_string(),
    })?;
    Ok((h, PREAMBLE + len))
}

/// Decodes the record at `offset`; returns it and the offset of the next.
///
/// # Errors
/// A [`TraceError`] for a cut, oversized or undecodable record.
pub fn decode_record(buf: &[u8], offset: usize) -> Result<(Record, usize), TraceError> {
    let len = u32_at(buf, offset, "a record's length")?;
    if len > MAX_RECORD {
        return Err(TraceError::TooLong {
            offset,
            what: "a record",
            len,
            max: MAX_RECORD,
        });
    }
    let payload = take(buf, offset + 4, len, "a record")?;
    let (r, used): (Record, usize) = bincode::serde::decode_from_slice(payload, bincode_config())
        .map_err(|e| TraceError::Record {
        offset,
        reason: e.to_string(),
    })?;
    if used != len {
        return Err(TraceError::Trailing {
            offset,
            extra: len - used,
        });
    }
    Ok((r, offset + 4 + len))
}

/// A whole trace file in memory: its header and every record.
///
/// # Errors
/// The first [`TraceError`] met.
pub fn decode(buf: &[u8]) -> Result<(Header, Vec<Record>), TraceError> {
    let (h, mut at) = decode_header(buf)?;
    let mut records = Vec::new();
    while at < buf.len() {
        let (r, next) = decode_record(buf, at)?;
        records.push(r);
        at = next;
    }
    Ok((h, records))
}

/// A header for tests.
#[cfg(test)]
pub(crate) mod tests_support {
    use tierd_engine::topology::two_tier;
    use tierd_engine::types::Bytes;

    use super::{EngineConfig, Header};

    pub(crate) fn header() -> Header {
        Header::new(
            EngineConfig::default(),
            &two_tier(Bytes::gib(4), Bytes::gib(16)),
            0,
            0,
        )
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use tierd_engine::plan::{MigrationKind, MoveOutcome, NodeUsage, PageResult, PlannedMove};
    use tierd_engine::policy::{MemPolicy, Owner, PolicyMode};
    use tierd_engine::types::{Bytes, CgroupId, NodeId, NodeMask, PageRef, SpaceId, Vpn};
    use tierd_engine::SourceKind;

    use super::*;

    use super::tests_support::header;

    fn obs(space: u32, vpn: u64, t: u64) -> Observation {
        Observation {
            page: PageRef::base(SpaceId(space), Vpn(vpn)),
            page_node: NodeId(1),
            accessing_node: Some(NodeId(0)),
            source: SourceKind::HwSample,
            time: Nanos(t),
            weight: 1,
        }
    }

    fn one_of_each() -> Vec<Record> {
        let page = PageRef::base(SpaceId(7), Vpn(0x1234));
        vec![
            Record::Pass { now: Nanos(100) },
            Record::Owners(vec![
                OwnerUpdate::Owner {
                    space: SpaceId(7),
                    owner: Owner {
                        pid: 7,
                        cgroup: CgroupId(2),
                    },
                },
                OwnerUpdate::Policies {
                    space: SpaceId(7),
                    ranges: vec![(
                        Vpn(0),
                        Vpn(16),
                        MemPolicy {
                            mode: PolicyMode::Bind,
                            nodes: NodeMask(3),
                            numa_balancing: true,
                        },
                    )],
                },
                OwnerUpdate::HomeNode {
                    space: SpaceId(7),
                    node: None,
                },
                OwnerUpdate::Exited { space: SpaceId(8) },
            ]),
            Record::Observations(vec![obs(7, 0x1234, 99)]),
            Record::Usage(SystemUsage {
                nodes: [(
                    NodeId(0),
                    NodeUsage {
                        free: Bytes(4096),
                        promo_watermark: None,
                    },
                )]
                .into(),
                cgroups: Default::default(),
            }),
            Record::Batch(MigrationBatch {
                id: 1,
                kind: MigrationKind::Promote,
                target: NodeId(0),
                cgroup: CgroupId(2),
                pages: vec![PlannedMove {
                    page,
                    from: NodeId(1),
                }],
            }),
            Record::Report(MigrationReport {
                batch: 1,
                kind: MigrationKind::Promote,
                target: NodeId(0),
                results: vec![PageResult {
                    page,
                    from: NodeId(1),
                    outcome: MoveOutcome::Moved(NodeId(0)),
                }],
            }),
            Record::Config("{}".to_string()),
            Record::Idle(vec![IdleObservation {
                page,
                page_node: NodeId(0),
                idle_since: Nanos(50),
            }]),
        ]
    }

    #[test]
    fn a_file_round_trips() {
        let h = header();
        let mut buf = encode_header(&h);
        for r in one_of_each() {
            encode_record(&r, &mut buf);
        }
        let (h2, rs) = decode(&buf).unwrap();
        assert_eq!(h2, h);
        assert_eq!(rs, one_of_each());
        assert_eq!(h2.topology().unwrap().tiers().len(), 2);
    }

    /// The bytes of one record of each kind. If this fails, the engine's types changed the
    /// record layout: bump VERSION (old traces must then be refused, not misread), update
    /// docs/trace.md, and the bytes here.
    #[test]
    fn record_layout_is_pinned() {
        let mut buf = Vec::new();
        for r in one_of_each() {
            encode_record(&r, &mut buf);
        }
        let hex: String = buf.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, PINNED, "record layout changed: bump format::VERSION");
    }

    // Version 2 appended Config ("{}"), version 3 Idle (the last); the bytes before them are
    // version 1's.
    const PINNED: &str = "02000000006413000000010400070702010701001003030102070003080e000000020107fb3412000001010001630108000000030100fb001000000d00000004010000020107fb34120000010e000000050100000107fb341200000100000400000006027b7d0a000000070107fb341200000032";

    #[test]
    fn bad_input_gives_errors_that_name_the_place() {
        let h = header();
        let mut buf = encode_header(&h);
        encode_record(&Record::Pass { now: Nanos(5) }, &mut buf);
        let cut = &buf[..buf.len() - 1];
        let e = decode(cut).unwrap_err().to_string();
        assert!(e.starts_with("truncated at offset"), "{e}");
        assert!(decode(b"GIF89a....")
            .unwrap_err()
            .to_string()
            .contains("not a tierd trace"));
        let mut v = buf.clone();
        v[8] = 9;
        assert_eq!(
            decode(&v).unwrap_err().to_string(),
            "trace format version 9, this tierd reads versions 1 to 3"
        );
        let mut long = encode_header(&h);
        long.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&long).unwrap_err().to_string().contains("more than"));
        let mut junk = encode_header(&h);
        junk.extend_from_slice(&[2, 0, 0, 0, 0xff, 0xff]);
        let e = decode(&junk).unwrap_err().to_string();
        assert!(e.starts_with("record at offset"), "{e}");
    }

    fn arb_obs() -> impl Strategy<Value = Observation> {
        (
            any::<u32>(),
            any::<u64>(),
            0_u16..64,
            any::<u64>(),
            any::<u32>(),
            0_usize..3,
        )
            .prop_map(|(s, v, n, t, w, k)| Observation {
                page: PageRef::base(SpaceId(s), Vpn(v)),
                page_node: NodeId(n),
                accessing_node: (n % 2 == 0).then_some(NodeId(n)),
                source: SourceKind::ALL[k],
                time: Nanos(t),
                weight: w,
            })
    }

    proptest! {
        #[test]
        fn observations_round_trip(obs in proptest::collection::vec(arb_obs(), 0..200), now in any::<u64>()) {
            let mut buf = encode_header(&header());
            let recs = vec![Record::Pass { now: Nanos(now) }, Record::Observations(obs)];
            for r in &recs {
                encode_record(r, &mut buf);
            }
            let (_, back) = decode(&buf).unwrap();
            prop_assert_eq!(back, recs);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode(&bytes);
            let _ = decode_record(&bytes, 0);
        }

        #[test]
        fn arbitrary_records_after_a_good_header_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let mut buf = encode_header(&header());
            buf.extend_from_slice(&bytes);
            let _ = decode(&buf);
        }

        #[test]
        fn any_cut_of_a_good_file_is_an_error_or_a_prefix(cut in 0_usize..400) {
            let mut buf = encode_header(&header());
            for r in one_of_each() {
                encode_record(&r, &mut buf);
            }
            let cut = cut.min(buf.len());
            if let Ok((_, rs)) = decode(&buf[..cut]) {
                prop_assert_eq!(&rs[..], &one_of_each()[..rs.len()]);
            }
        }
    }
}
