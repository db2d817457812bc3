//! ARM SPE (Statistical Profiling Extension) packets, as the `arm_spe_N` PMU writes them to the
//! AUX buffer.
//!
//! Packet format from tools/perf/util/arm-spe-decoder/arm-spe-pkt-decoder.{c,h}:
//! a one-byte header (or a two-byte extended header `0b001000xx` + header, whose low two bits
//! extend the index) followed by a little-endian payload of `1 << hdr[5:4]` bytes:
//!
//! | header (mask)          | packet      | index / payload                                  |
//! |------------------------|-------------|--------------------------------------------------|
//! | `0x00`                 | PAD         | none                                             |
//! | `0x01`                 | END         | ends a record                                    |
//! | `0x71`                 | TIMESTAMP   | 8 bytes; also ends a record                      |
//! | `0x42` (`& 0xcf`)      | EVENTS      | bit 9 LLC miss (refill), bit 10 remote access    |
//! | `0x43` (`& 0xcf`)      | DATA SOURCE | implementation defined                           |
//! | `0x64` (`& 0xfc`)      | CONTEXT     | index = hdr & 3 (0: CONTEXTIDR_EL1, 1: _EL2)     |
//! | `0x48` (`& 0xfc`)      | OP TYPE     | class = hdr & 3 (1: load/store, payload bit 0 = store) |
//! | `0xb0` (`& 0xf8`)      | ADDRESS     | index = hdr & 7: 0 PC, 1 branch target, 2 data VA, 3 data PA |
//! | `0x98` (`& 0xf8`)      | COUNTER     | index = hdr & 7: 0 total, 1 issue, 2 translation latency |
//!
//! Data virtual addresses carry a tag in the top byte: like arm-spe-decoder.c, the top byte is
//! filled with 0xff when byte 6 is 0xff (a kernel address) and cleared otherwise. Physical
//! addresses are bits 0-55 (bit 63 NS).

/// Errors decoding SPE data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpeError {
    /// A header byte that is no known packet.
    #[error("bad SPE packet header {header:#04x} at offset {offset}")]
    BadPacket {
        /// The header byte.
        header: u8,
        /// Its offset.
        offset: usize,
    },
    /// The buffer ends inside a packet.
    #[error("SPE packet at offset {offset} needs {need} bytes, {have} left")]
    Truncated {
        /// Packet offset.
        offset: usize,
        /// Bytes it needs.
        need: usize,
        /// Bytes left.
        have: usize,
    },
}

/// One SPE packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpePacket {
    /// Padding.
    Pad,
    /// End of record.
    End,
    /// Timestamp (generic timer), ends a record.
    Timestamp(u64),
    /// Events bit mask.
    Events(u64),
    /// Data source.
    DataSource(u64),
    /// Context (CONTEXTIDR: the pid with CONFIG_PID_IN_CONTEXTIDR).
    Context {
        /// 0: EL1, 1: EL2.
        index: u8,
        /// The value.
        value: u64,
    },
    /// Operation type.
    OpType {
        /// Class: 0 other, 1 load/store/atomic, 2 branch.
        class: u8,
        /// Subclass payload.
        payload: u64,
    },
    /// An address.
    Address {
        /// 0 PC, 1 branch target, 2 data virtual, 3 data physical, 4 previous branch.
        index: u8,
        /// Raw payload (with tag/EL/NS bits).
        payload: u64,
    },
    /// A counter.
    Counter {
        /// 0 total latency, 1 issue latency, 2 translation latency.
        index: u8,
        /// The count (cycles).
        value: u64,
    },
}

/// Decodes the packet at `buf[offset..]`; returns it and its length.
///
/// # Errors
/// [`SpeError`] on an unknown header or a truncated packet.
pub fn next_packet(buf: &[u8], offset: usize) -> Result<(SpePacket, usize), SpeError> {
    let b = &buf[offset.min(buf.len())..];
    let Some(&h0) = b.first() else {
        return Err(SpeError::Truncated {
            offset,
            need: 1,
            have: 0,
        });
    };
    let payload = |ext: usize, hdr: u8| -> Result<(u64, usize), SpeError> {
        let n = 1usize << ((hdr >> 4) & 3);
        let total = 1 + ext + n;
        if b.len() < total {
            return Err(SpeError::Truncated {
                offset,
                need: total,
                have: b.len(),
            });
        }
        let mut w = [0u8; 8];
        w[..n].copy_from_slice(&b[1 + ext..total]);
        Ok((u64::from_le_bytes(w), total))
    };
    if h0 == 0x00 {
        return Ok((SpePacket::Pad, 1));
    }
    if h0 == 0x01 {
        return Ok((SpePacket::End, 1));
    }
    if h0 == 0x71 {
        let (v, n) = payload(0, h0)?;
        return Ok((SpePacket::Timestamp(v), n));
    }
    if h0 & 0xcf == 0x42 {
        let (v, n) = payload(0, h0)?;
        return Ok((SpePacket::Events(v), n));
    }
    if h0 & 0xcf == 0x43 {
        let (v, n) = payload(0, h0)?;
        return Ok((SpePacket::DataSource(v), n));
    }
    if h0 & 0xfc == 0x64 {
        let (v, n) = payload(0, h0)?;
        return Ok((
            SpePacket::Context {
                index: h0 & 3,
                value: v,
            },
            n,
        ));
    }
    if h0 & 0xfc == 0x48 {
        let (v, n) = payload(0, h0)?;
        return Ok((
            SpePacket::OpType {
                class: h0 & 3,
                payload: v,
            },
            n,
        ));
    }
    let (hdr, ext, hi) = if h0 & 0xfc == 0x20 {
        let Some(&h1) = b.get(1) else {
            return Err(SpeError::Truncated {
                offset,
                need: 2,
                have: 1,
            });
        };
        if h1 == 0x00 {
            // Alignment padding: pads to 1 << (low nibble + 1) bytes. Our buffer offsets are
            // not the trace's memory addresses, so skip just the two header bytes; the zero
            // bytes after it decode as PAD.
            return Ok((SpePacket::Pad, 2));
        }
        (h1, 1, (h0 & 3) << 3)
    } else {
        (h0, 0, 0)
    };
    if hdr & 0xf8 == 0xb0 {
        let (v, n) = payload(ext, hdr)?;
        return Ok((
            SpePacket::Address {
                index: hi | (hdr & 7),
                payload: v,
            },
            n,
        ));
    }
    if hdr & 0xf8 == 0x98 {
        let (v, n) = payload(ext, hdr)?;
        return Ok((
            SpePacket::Counter {
                index: hi | (hdr & 7),
                value: v,
            },
            n,
        ));
    }
    Err(SpeError::BadPacket { header: h0, offset })
}

/// One SPE record: the packets up to an END or TIMESTAMP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpeRecord {
    /// Sampled instruction address (bits 0-55, sign-filled like the data VA).
    pub pc: Option<u64>,
    /// Data virtual address.
    pub virt_addr: Option<u64>,
    /// Data physical address (needs `pa_enable`, privileged).
    pub phys_addr: Option<u64>,
    /// Total latency, cycles.
    pub total_lat: Option<u64>,
    /// Issue latency, cycles.
    pub issue_lat: Option<u64>,
    /// Translation latency, cycles.
    pub trans_lat: Option<u64>,
    /// Events bit mask.
    pub events: u64,
    /// Operation class and payload.
    pub op: Option<(u8, u64)>,
    /// Data source.
    pub data_source: Option<u64>,
    /// CONTEXTIDR value.
    pub context: Option<u64>,
    /// Timestamp.
    pub timestamp: Option<u64>,
}

/// Event bit: last-level cache miss (refill), `EV_LLC_MISS`.
pub const EV_LLC_MISS: u32 = 9;
/// Event bit: remote access, `EV_REMOTE_ACCESS`.
pub const EV_REMOTE_ACCESS: u32 = 10;

fn fill_top_byte(addr: u64) -> u64 {
    if (addr >> 48) & 0xff == 0xff {
        addr | 0xff << 56
    } else {
        addr & !(0xff << 56)
    }
}

impl SpeRecord {
    /// A load (op class 1, payload bit 0 clear).
    #[must_use]
    pub fn is_load(&self) -> bool {
        matches!(self.op, Some((1, p)) if p & 1 == 0)
    }
    /// A store.
    #[must_use]
    pub fn is_store(&self) -> bool {
        matches!(self.op, Some((1, p)) if p & 1 == 1)
    }
    /// LLC miss event.
    #[must_use]
    pub fn llc_miss(&self) -> bool {
        self.events >> EV_LLC_MISS & 1 != 0
    }
    /// Remote access event.
    #[must_use]
    pub fn remote_access(&self) -> bool {
        self.events >> EV_REMOTE_ACCESS & 1 != 0
    }

    fn apply(&mut self, p: SpePacket) {
        match p {
            SpePacket::Address { index, payload } => match index {
                0 => self.pc = Some(fill_top_byte(payload & ((1 << 56) - 1))),
                2 => self.virt_addr = Some(fill_top_byte(payload)),
                3 => self.phys_addr = Some(payload & ((1 << 56) - 1)),
                _ => {}
            },
            SpePacket::Counter { index, value } => match index {
                0 => self.total_lat = Some(value),
                1 => self.issue_lat = Some(value),
                2 => self.trans_lat = Some(value),
                _ => {}
            },
            SpePacket::Events(e) => self.events = e,
            SpePacket::OpType { class, payload } => self.op = Some((class, payload)),
            SpePacket::DataSource(d) => self.data_source = Some(d),
            SpePacket::Context { value, .. } => self.context = Some(value),
            SpePacket::Timestamp(t) => self.timestamp = Some(t),
            SpePacket::Pad | SpePacket::End => {}
        }
    }
}

/// Decodes a buffer into records. Trailing packets without an END or TIMESTAMP are dropped
/// (an incomplete record at the end of the AUX data).
///
/// # Errors
/// [`SpeError`] on a bad or truncated packet.
pub fn decode_records(buf: &[u8]) -> Result<Vec<SpeRecord>, SpeError> {
    let mut out = Vec::new();
    let mut cur = SpeRecord::default();
    let mut has_content = false;
    let mut off = 0;
    while off < buf.len() {
        let (p, n) = next_packet(buf, off)?;
        off += n;
        match p {
            SpePacket::Pad => {}
            SpePacket::End | SpePacket::Timestamp(_) => {
                cur.apply(p);
                if has_content {
                    out.push(cur);
                }
                cur = SpeRecord::default();
                has_content = false;
            }
            _ => {
                cur.apply(p);
                has_content = true;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        s.split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect()
    }

    /// The two records of google/perf_data_converter's quipper test
    /// (src/quipper/arm_spe_decoder_test.cc, `SampleSPEPackets`), recorded on hardware; the
    /// expected values are that test's.
    const QUIPPER: &str = "b0 d0 c2 a1 ed 66 ba ff c0 00 00 00 00 00 65 80 5f 00 00 49 00 \
        52 16 00 99 04 00 98 0c 00 b2 28 6b 09 03 37 0e ff 00 9a 01 00 \
        00 00 00 00 00 00 00 00 00 43 00 00 00 71 2e 65 2f 6a 0a 00 00 00 \
        b0 e0 b0 ef ed 66 ba ff c0 00 00 00 00 00 65 0e 00 00 00 4a 01 52 42 00 \
        99 10 00 98 11 00 b1 e4 b0 ef ed 66 ba ff c0 \
        00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 71 8d 65 2f 6a 0a 00 00 00";

    #[test]
    fn decodes_quipper_records() {
        let recs = decode_records(&hex(QUIPPER)).unwrap();
        assert_eq!(recs.len(), 2);
        let r = recs[0];
        assert!(r.is_load() && !r.is_store());
        assert_eq!(r.total_lat, Some(12));
        assert_eq!(r.issue_lat, Some(4));
        assert_eq!(r.trans_lat, Some(1));
        assert_eq!(r.pc, Some(0xffff_ba66_eda1_c2d0));
        assert_eq!(r.virt_addr, Some(0xffff_0e37_0309_6b28));
        assert_eq!(r.timestamp, Some(44_731_163_950));
        assert_eq!(r.context, Some(0x5f80));
        assert_eq!(r.data_source, Some(0));
        // EV RETIRED L1D-ACCESS TLB-ACCESS = bits 1, 2, 4.
        assert_eq!(r.events, 0x16);
        assert!(!r.llc_miss() && !r.remote_access());
        let b = recs[1];
        assert_eq!(b.op.map(|o| o.0), Some(2));
        assert!(!b.is_load());
        assert_eq!(b.virt_addr, None);
        assert_eq!(b.timestamp, Some(44_731_164_045));
        assert_eq!((b.total_lat, b.issue_lat), (Some(17), Some(16)));
    }

    /// A record from a `perf report --dump-raw-trace` of `arm_spe/ts_enable=1,pa_enable=1,
    /// pct_enable=1/` in a KVM guest, posted with a kernel SPE virtualization patch to the
    /// arm-kernel/perf lists (the same dump appears in several revisions).
    #[test]
    fn decodes_list_dump_record() {
        let d = hex(
            "b0 f4 d3 29 10 00 80 ff a0 99 0b 00 98 0d 00 52 16 00 49 00 \
             b2 d0 40 d8 70 00 00 ff 00 9a 01 00 00 00 00 71 a5 1f b3 20 14 00 00 00",
        );
        let recs = decode_records(&d).unwrap();
        assert_eq!(recs.len(), 1);
        let r = recs[0];
        assert_eq!(r.pc, Some(0xffff_8000_1029_d3f4));
        assert_eq!(
            (r.issue_lat, r.total_lat, r.trans_lat),
            (Some(11), Some(13), Some(1))
        );
        // The dump printed "VA 0xff000070d840d0" (older perf, no top-byte fill).
        assert_eq!(r.virt_addr, Some(0xffff_0000_70d8_40d0));
        assert_eq!(r.timestamp, Some(86_447_955_877));
        assert!(r.is_load());
    }

    #[test]
    fn physical_address_and_miss_events_from_layout() {
        // Built from the documented layout: ST op, events with LLC miss (9) and remote (10)
        // in a 2-byte events packet, user VA, PA with NS bit, END.
        let mut d = vec![0x49, 0x01];
        d.extend([0x52, 0x00, 0x06]); // events = 0x600
        d.push(0xb2);
        d.extend(0x0000_7fff_1234_5678u64.to_le_bytes());
        d.push(0xb3);
        d.extend((1u64 << 63 | 0x0803_2c95_5a43).to_le_bytes());
        d.push(0x98);
        d.extend(300u16.to_le_bytes());
        d.push(0x01);
        let recs = decode_records(&d).unwrap();
        let r = recs[0];
        assert!(r.is_store());
        assert!(r.llc_miss() && r.remote_access());
        assert_eq!(r.virt_addr, Some(0x7fff_1234_5678));
        assert_eq!(r.phys_addr, Some(0x0803_2c95_5a43));
        assert_eq!(r.total_lat, Some(300));
    }

    #[test]
    fn extended_header_index() {
        // Extended header 0x21 + address header 0xb2: index (1 << 3) | 2 = 10.
        let mut d = vec![0x21, 0xb2];
        d.extend(5u64.to_le_bytes());
        let (p, n) = next_packet(&d, 0).unwrap();
        assert_eq!(n, 10);
        assert_eq!(
            p,
            SpePacket::Address {
                index: 10,
                payload: 5
            }
        );
    }

    #[test]
    fn bad_and_truncated_packets() {
        assert_eq!(
            next_packet(&[0xff], 0),
            Err(SpeError::BadPacket {
                header: 0xff,
                offset: 0
            })
        );
        assert!(matches!(
            next_packet(&[0xb2, 1, 2], 0),
            Err(SpeError::Truncated {
                need: 9,
                have: 3,
                ..
            })
        ));
        assert!(decode_records(&[0x49, 0x00, 0x71, 1]).is_err());
    }
}
