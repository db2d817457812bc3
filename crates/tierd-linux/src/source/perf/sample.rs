//! `PERF_RECORD_SAMPLE` bodies, for a given `sample_type`.
//!
//! Layout from include/uapi/linux/perf_event.h (`enum perf_event_type`, PERF_RECORD_SAMPLE):
//! the fields appear in this order, each only when its bit is in `sample_type`:
//!
//! ```text
//! u64 id                 IDENTIFIER (1<<16)
//! u64 ip                 IP (1<<0)
//! u32 pid, tid           TID (1<<1)
//! u64 time               TIME (1<<2)
//! u64 addr               ADDR (1<<3)
//! u64 id                 ID (1<<6)
//! u64 stream_id          STREAM_ID (1<<9)
//! u32 cpu, res           CPU (1<<7)
//! u64 period             PERIOD (1<<8)
//! read_format values     READ (1<<4)            -- not supported here
//! u64 nr, ips[nr]        CALLCHAIN (1<<5)       -- skipped
//! u32 size, data[size]   RAW (1<<10)            -- size includes padding to 8 bytes
//! branch stack           BRANCH_STACK (1<<11)   -- not supported here
//! regs / stack           REGS_USER, STACK_USER  -- not supported here
//! u64 weight             WEIGHT (1<<14) or WEIGHT_STRUCT (1<<24): {u32 var1_dw; u16 var2_w; u16 var3_w}
//! u64 data_src           DATA_SRC (1<<15)
//! u64 transaction        TRANSACTION (1<<17)
//! regs                   REGS_INTR (1<<18)      -- not supported here
//! u64 phys_addr          PHYS_ADDR (1<<19)
//! u64 cgroup             CGROUP (1<<21)
//! u64 data_page_size     DATA_PAGE_SIZE (1<<22)
//! u64 code_page_size     CODE_PAGE_SIZE (1<<23)
//! u64 size, data[size]   AUX (1<<20)            -- not supported here
//! ```
//!
//! The `perf-event-data` crate parses the same, but needs a full `perf_event_attr` to build its
//! parse configuration and does not decode `WEIGHT_STRUCT`'s parts; the memory sampler needs
//! only these fixed fields, so this small parser is kept instead. Byte order is the host's.

/// `sample_type` bits (include/uapi/linux/perf_event.h `enum perf_event_sample_format`).
pub mod bits {
    /// Instruction pointer.
    pub const IP: u64 = 1 << 0;
    /// pid and tid.
    pub const TID: u64 = 1 << 1;
    /// Timestamp.
    pub const TIME: u64 = 1 << 2;
    /// Data virtual address.
    pub const ADDR: u64 = 1 << 3;
    /// Counter values (read_format).
    pub const READ: u64 = 1 << 4;
    /// Call chain.
    pub const CALLCHAIN: u64 = 1 << 5;
    /// Event id.
    pub const ID: u64 = 1 << 6;
    /// CPU.
    pub const CPU: u64 = 1 << 7;
    /// Sampling period.
    pub const PERIOD: u64 = 1 << 8;
    /// Stream id.
    pub const STREAM_ID: u64 = 1 << 9;
    /// Raw PMU data.
    pub const RAW: u64 = 1 << 10;
    /// Branch stack.
    pub const BRANCH_STACK: u64 = 1 << 11;
    /// User registers.
    pub const REGS_USER: u64 = 1 << 12;
    /// User stack.
    pub const STACK_USER: u64 = 1 << 13;
    /// Weight (u64).
    pub const WEIGHT: u64 = 1 << 14;
    /// Data source.
    pub const DATA_SRC: u64 = 1 << 15;
    /// Identifier, first in the record.
    pub const IDENTIFIER: u64 = 1 << 16;
    /// Transaction flags.
    pub const TRANSACTION: u64 = 1 << 17;
    /// Interrupt registers.
    pub const REGS_INTR: u64 = 1 << 18;
    /// Data physical address.
    pub const PHYS_ADDR: u64 = 1 << 19;
    /// AUX data.
    pub const AUX: u64 = 1 << 20;
    /// cgroup id.
    pub const CGROUP: u64 = 1 << 21;
    /// Data page size.
    pub const DATA_PAGE_SIZE: u64 = 1 << 22;
    /// Code page size.
    pub const CODE_PAGE_SIZE: u64 = 1 << 23;
    /// Weight as {var1_dw, var2_w, var3_w}.
    pub const WEIGHT_STRUCT: u64 = 1 << 24;
}

/// `PERF_RECORD_SAMPLE` in `perf_event_header.type`.
pub const PERF_RECORD_SAMPLE: u32 = 9;

/// Errors decoding samples.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SampleError {
    /// The record ended before a field.
    #[error(
        "sample record truncated: {field} needs {need} bytes at offset {offset}, record has {len}"
    )]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Its offset.
        offset: usize,
        /// Bytes it needs.
        need: usize,
        /// The record length.
        len: usize,
    },
    /// A `sample_type` this parser does not handle.
    #[error("sample_type {0:#x} has fields this parser does not decode (READ, BRANCH_STACK, REGS_*, STACK_USER, AUX)")]
    Unsupported(u64),
    /// Both weight formats requested (the kernel refuses this too).
    #[error("sample_type has both WEIGHT and WEIGHT_STRUCT")]
    BothWeights,
    /// A header with a size smaller than the header or larger than the buffer.
    #[error("perf_event_header size {size} invalid for a buffer of {len} bytes")]
    BadHeader {
        /// The header's size field.
        size: u16,
        /// Bytes available.
        len: usize,
    },
}

/// `union perf_sample_weight`: `full`, or `{u32 var1_dw; u16 var2_w; u16 var3_w}` (little-endian
/// layout; var1 is the memory access latency on Intel and AMD, var2 the instruction latency on
/// Intel, var3 the retire latency on newer Intel).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Weight(pub u64);

impl Weight {
    /// The low 32 bits.
    #[must_use]
    pub fn var1_dw(self) -> u32 {
        u32::try_from(self.0 & 0xffff_ffff).unwrap_or(u32::MAX)
    }
    /// Bits 32-47.
    #[must_use]
    pub fn var2_w(self) -> u16 {
        u16::try_from((self.0 >> 32) & 0xffff).unwrap_or(u16::MAX)
    }
    /// Bits 48-63.
    #[must_use]
    pub fn var3_w(self) -> u16 {
        u16::try_from(self.0 >> 48).unwrap_or(u16::MAX)
    }
}

/// The decoded fields of a sample; absent fields are `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SampleRecord {
    /// IDENTIFIER or ID.
    pub id: Option<u64>,
    /// Instruction pointer.
    pub ip: Option<u64>,
    /// Process id.
    pub pid: Option<u32>,
    /// Thread id.
    pub tid: Option<u32>,
    /// Timestamp (perf clock, ns).
    pub time: Option<u64>,
    /// Data virtual address.
    pub addr: Option<u64>,
    /// Stream id.
    pub stream_id: Option<u64>,
    /// CPU.
    pub cpu: Option<u32>,
    /// Period.
    pub period: Option<u64>,
    /// Raw PMU data (the `size` bytes, padding included).
    pub raw: Option<Vec<u8>>,
    /// WEIGHT or WEIGHT_STRUCT.
    pub weight: Option<Weight>,
    /// `union perf_mem_data_src`.
    pub data_src: Option<u64>,
    /// Transaction flags.
    pub transaction: Option<u64>,
    /// Data physical address.
    pub phys_addr: Option<u64>,
    /// cgroup id.
    pub cgroup: Option<u64>,
    /// Data page size.
    pub data_page_size: Option<u64>,
    /// Code page size.
    pub code_page_size: Option<u64>,
}

struct Cursor<'a> {
    buf: &'a [u8],
    off: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&[u8], SampleError> {
        let end = self.off.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(SampleError::Truncated {
                field,
                offset: self.off,
                need: n,
                len: self.buf.len(),
            });
        };
        let s = &self.buf[self.off..end];
        self.off = end;
        Ok(s)
    }
    fn u64(&mut self, field: &'static str) -> Result<u64, SampleError> {
        let b = self.take(8, field)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        Ok(u64::from_ne_bytes(w))
    }
    fn u32(&mut self, field: &'static str) -> Result<u32, SampleError> {
        let b = self.take(4, field)?;
        let mut w = [0u8; 4];
        w.copy_from_slice(b);
        Ok(u32::from_ne_bytes(w))
    }
}

const UNSUPPORTED: u64 = bits::READ
    | bits::BRANCH_STACK
    | bits::REGS_USER
    | bits::STACK_USER
    | bits::REGS_INTR
    | bits::AUX;

/// Parses a sample body (the bytes after `perf_event_header`).
///
/// # Errors
/// [`SampleError`] on a truncated body or a `sample_type` with fields not handled here.
pub fn parse_sample(body: &[u8], sample_type: u64) -> Result<SampleRecord, SampleError> {
    if sample_type & UNSUPPORTED != 0 {
        return Err(SampleError::Unsupported(sample_type & UNSUPPORTED));
    }
    if sample_type & bits::WEIGHT != 0 && sample_type & bits::WEIGHT_STRUCT != 0 {
        return Err(SampleError::BothWeights);
    }
    let has = |b: u64| sample_type & b != 0;
    let mut c = Cursor { buf: body, off: 0 };
    let mut r = SampleRecord::default();
    if has(bits::IDENTIFIER) {
        r.id = Some(c.u64("identifier")?);
    }
    if has(bits::IP) {
        r.ip = Some(c.u64("ip")?);
    }
    if has(bits::TID) {
        r.pid = Some(c.u32("pid")?);
        r.tid = Some(c.u32("tid")?);
    }
    if has(bits::TIME) {
        r.time = Some(c.u64("time")?);
    }
    if has(bits::ADDR) {
        r.addr = Some(c.u64("addr")?);
    }
    if has(bits::ID) {
        r.id = Some(c.u64("id")?);
    }
    if has(bits::STREAM_ID) {
        r.stream_id = Some(c.u64("stream_id")?);
    }
    if has(bits::CPU) {
        r.cpu = Some(c.u32("cpu")?);
        c.u32("cpu res")?;
    }
    if has(bits::PERIOD) {
        r.period = Some(c.u64("period")?);
    }
    if has(bits::CALLCHAIN) {
        let nr = c.u64("callchain nr")?;
        let n = usize::try_from(nr)
            .ok()
            .and_then(|n| n.checked_mul(8))
            .unwrap_or(usize::MAX);
        c.take(n, "callchain ips")?;
    }
    if has(bits::RAW) {
        let size = c.u32("raw size")?;
        let n = usize::try_from(size).unwrap_or(usize::MAX);
        r.raw = Some(c.take(n, "raw data")?.to_vec());
    }
    if has(bits::WEIGHT) || has(bits::WEIGHT_STRUCT) {
        r.weight = Some(Weight(c.u64("weight")?));
    }
    if has(bits::DATA_SRC) {
        r.data_src = Some(c.u64("data_src")?);
    }
    if has(bits::TRANSACTION) {
        r.transaction = Some(c.u64("transaction")?);
    }
    if has(bits::PHYS_ADDR) {
        r.phys_addr = Some(c.u64("phys_addr")?);
    }
    if has(bits::CGROUP) {
        r.cgroup = Some(c.u64("cgroup")?);
    }
    if has(bits::DATA_PAGE_SIZE) {
        r.data_page_size = Some(c.u64("data_page_size")?);
    }
    if has(bits::CODE_PAGE_SIZE) {
        r.code_page_size = Some(c.u64("code_page_size")?);
    }
    Ok(r)
}

/// Parses one record with its `perf_event_header {u32 type; u16 misc; u16 size}`: returns the
/// sample (or `None` for another record type) and the record's size, to step to the next.
///
/// # Errors
/// [`SampleError::BadHeader`] or the body's error.
pub fn parse_record(
    buf: &[u8],
    sample_type: u64,
) -> Result<(Option<SampleRecord>, usize), SampleError> {
    let mut c = Cursor { buf, off: 0 };
    let ty = c.u32("header type")?;
    let b = c.take(4, "header misc/size")?;
    let size = u16::from_ne_bytes([b[2], b[3]]);
    let len = usize::from(size);
    if len < 8 || len > buf.len() {
        return Err(SampleError::BadHeader {
            size,
            len: buf.len(),
        });
    }
    if ty != PERF_RECORD_SAMPLE {
        return Ok((None, len));
    }
    Ok((Some(parse_sample(&buf[8..len], sample_type)?), len))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds sample bodies byte by byte from the documented layout.
    #[derive(Default)]
    pub(crate) struct Builder(pub Vec<u8>);
    impl Builder {
        pub(crate) fn u64(mut self, v: u64) -> Self {
            self.0.extend(v.to_ne_bytes());
            self
        }
        pub(crate) fn u32(mut self, v: u32) -> Self {
            self.0.extend(v.to_ne_bytes());
            self
        }
        pub(crate) fn bytes(mut self, b: &[u8]) -> Self {
            self.0.extend_from_slice(b);
            self
        }
        pub(crate) fn record(self) -> Vec<u8> {
            let size = u16::try_from(self.0.len() + 8).unwrap();
            let mut out = PERF_RECORD_SAMPLE.to_ne_bytes().to_vec();
            out.extend(0u16.to_ne_bytes());
            out.extend(size.to_ne_bytes());
            out.extend(self.0);
            out
        }
    }

    #[test]
    fn fields_in_kernel_order() {
        use bits::*;
        let st = IP | TID | TIME | ADDR | CPU | PERIOD | WEIGHT_STRUCT | DATA_SRC | PHYS_ADDR;
        let body = Builder::default()
            .u64(0xffff_1234) // ip
            .u32(100) // pid
            .u32(101) // tid
            .u64(5_000_000) // time
            .u64(0x7f00_dead_b000) // addr
            .u32(3) // cpu
            .u32(0) // res
            .u64(10_000) // period
            .u64(0x0003_0002_0000_0150) // weight struct: var1 0x150, var2 2, var3 3
            .u64(0x1_0000_0042) // data_src
            .u64(0x1_2345_6000) // phys
            .0;
        let r = parse_sample(&body, st).unwrap();
        assert_eq!(r.ip, Some(0xffff_1234));
        assert_eq!((r.pid, r.tid), (Some(100), Some(101)));
        assert_eq!(r.time, Some(5_000_000));
        assert_eq!(r.addr, Some(0x7f00_dead_b000));
        assert_eq!(r.cpu, Some(3));
        assert_eq!(r.period, Some(10_000));
        let w = r.weight.unwrap();
        assert_eq!((w.var1_dw(), w.var2_w(), w.var3_w()), (0x150, 2, 3));
        assert_eq!(r.data_src, Some(0x1_0000_0042));
        assert_eq!(r.phys_addr, Some(0x1_2345_6000));
        assert_eq!(r.raw, None);
    }

    /// The same bytes through the independent parser of the `perf-event-data` crate (built
    /// from a `perf_event_attr` with the same `sample_type`) give the same fields.
    #[test]
    fn agrees_with_perf_event_data() {
        use bits::*;
        use perf_event::data::endian::Native;
        use perf_event::data::parse::{ParseConfig, Parser};
        use perf_event::data::Sample;
        use perf_event::SampleFlag;
        let st = IDENTIFIER
            | IP
            | TID
            | TIME
            | ADDR
            | CPU
            | PERIOD
            | RAW
            | WEIGHT
            | DATA_SRC
            | PHYS_ADDR
            | DATA_PAGE_SIZE;
        let body = Builder::default()
            .u64(77) // identifier
            .u64(0x40_1234) // ip
            .u32(300)
            .u32(301)
            .u64(123_456_789) // time
            .u64(0x7ffd_0000_0040) // addr
            .u32(9) // cpu
            .u32(0)
            .u64(4_000) // period
            .u32(20) // raw size (4 + 20 = 24)
            .bytes(&[0xab; 20])
            .u64(412) // weight
            .u64(0x2_0000_1142) // data_src
            .u64(0x8_1234_5040) // phys
            .u64(4096) // data page size
            .0;
        let mine = parse_sample(&body, st).unwrap();
        let mut b = perf_event::Builder::new(perf_event::events::Software::DUMMY);
        b.sample(SampleFlag::from_bits_retain(st));
        let cfg: ParseConfig<Native> = ParseConfig::from(*b.attrs());
        let theirs: Sample = Parser::new(&body[..], cfg).parse().unwrap();
        assert_eq!(mine.id, theirs.id());
        assert_eq!(mine.ip, theirs.ip());
        assert_eq!(mine.pid, theirs.pid());
        assert_eq!(mine.tid, theirs.tid());
        assert_eq!(mine.time, theirs.time());
        assert_eq!(mine.addr, theirs.addr());
        assert_eq!(mine.cpu, theirs.cpu());
        assert_eq!(mine.period, theirs.period());
        assert_eq!(mine.raw.as_deref(), theirs.raw());
        assert_eq!(mine.weight.map(|w| w.0), theirs.weight());
        assert_eq!(mine.phys_addr, theirs.phys_addr());
        assert_eq!(mine.data_page_size, theirs.data_page_size());
        let ds = theirs.data_src().unwrap();
        let d = super::super::datasrc::DataSrc(mine.data_src.unwrap());
        assert_eq!(d.mem_op(), ds.mem_op().bits());
        assert_eq!(d.mem_lvl_num(), u64::from(ds.mem_lvl_num().0));
        assert_eq!(d.mem_remote(), ds.mem_remote());
    }

    #[test]
    fn raw_and_callchain_are_sized() {
        use bits::*;
        let st = TID | CALLCHAIN | RAW | ADDR;
        let body = Builder::default()
            .u32(1)
            .u32(2)
            .u64(0xabc) // addr
            .u64(2) // callchain nr
            .u64(0x10)
            .u64(0x20)
            .u32(12) // raw size (4 + 12 = 16, 8-aligned)
            .bytes(&[7; 12])
            .0;
        let r = parse_sample(&body, st).unwrap();
        assert_eq!(r.addr, Some(0xabc));
        assert_eq!(r.raw.as_deref(), Some(&[7u8; 12][..]));
    }

    #[test]
    fn truncation_and_unsupported_types_are_errors() {
        let body = Builder::default().u64(1).0;
        let e = parse_sample(&body, bits::IP | bits::TIME).unwrap_err();
        assert!(
            matches!(
                e,
                SampleError::Truncated {
                    field: "time",
                    offset: 8,
                    ..
                }
            ),
            "{e}"
        );
        assert!(matches!(
            parse_sample(&body, bits::IP | bits::REGS_USER),
            Err(SampleError::Unsupported(_))
        ));
        assert_eq!(
            parse_sample(&body, bits::WEIGHT | bits::WEIGHT_STRUCT),
            Err(SampleError::BothWeights)
        );
        let huge_raw = Builder::default().u32(u32::MAX).0;
        assert!(parse_sample(&huge_raw, bits::RAW).is_err());
    }

    #[test]
    fn records_with_headers() {
        let rec = Builder::default().u64(0x42).record();
        let (s, len) = parse_record(&rec, bits::ADDR).unwrap();
        assert_eq!(len, 16);
        assert_eq!(s.unwrap().addr, Some(0x42));
        let mut other = rec.clone();
        other[0] = 1; // PERF_RECORD_MMAP
        assert_eq!(parse_record(&other, bits::ADDR).unwrap(), (None, 16));
        assert!(matches!(
            parse_record(&rec[..12], bits::ADDR),
            Err(SampleError::BadHeader { size: 16, len: 12 })
        ));
    }
}
