//! AMD IBS op samples: the registers the `ibs_op` PMU puts in `PERF_SAMPLE_RAW`.
//!
//! arch/x86/events/amd/ibs.c `perf_ibs_handle_irq()` fills `struct perf_ibs_data`
//! (arch/x86/include/asm/amd-ibs.h) as `{u32 caps; u64 regs[]}` and hands `ibs_data.data`
//! (starting at `caps`) to the raw record, `raw.frag.size = sizeof(u32) + ibs_data.size`:
//! so the raw bytes are the 4-byte `ibs_caps` followed by the MSRs read from `IbsOpCtl`
//! (0xc0011033) onwards: `IbsOpCtl, IbsOpRip, IbsOpData, IbsOpData2, IbsOpData3,
//! IbsDcLinAd, IbsDcPhysAd`, then `IbsBrTarget` and `IbsOpData4` when the caps have them.
//!
//! Bits used (amd-ibs.h):
//! - IbsOpData2: `data_src_lo` 0-2, `rmt_node` 4, `cache_hit_st` 5, `data_src_hi` 6-7 (the
//!   extended data source, used when `ibs_caps` has `IBS_CAPS_ZEN4`).
//! - IbsOpData3: `ld_op` 0, `st_op` 1, `dc_miss` 7, `dc_lin_addr_valid` 17,
//!   `dc_phy_addr_valid` 18, `l2_miss` 20, `dc_miss_lat` 32-47.
//! - Data sources: legacy `LOC_CACHE` 2, `DRAM` 3, `REM_CACHE` 4, `IO` 7; extended (Zen 4)
//!   `LOC_CACHE` 1, `NEAR_CCX_CACHE` 2, `DRAM` 3, `FAR_CCX_CACHE` 5, `PMEM` 6, `IO` 7,
//!   `EXT_MEM` 8 (CXL), `PEER_AGENT_MEM` 12.

/// `IBS_CAPS_ZEN4` (arch/x86/include/asm/perf_event.h): extended data source valid.
pub const IBS_CAPS_ZEN4: u32 = 1 << 11;

/// Errors decoding IBS raw data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("IBS op raw data of {len} bytes is shorter than caps + 7 registers (60 bytes)")]
pub struct IbsError {
    /// The raw data length.
    pub len: usize,
}

/// Where a load's data came from, per IbsOpData2's data source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IbsDataSource {
    /// Not reported (0) or a value not listed.
    Unknown(u8),
    /// The local L3 (or, on pre-Zen 4, another cache in the same node).
    LocalCache,
    /// Another CCX's cache in the same node (Zen 4).
    NearCcxCache,
    /// A cache in another node or socket.
    RemoteCache,
    /// DRAM.
    Dram,
    /// Persistent memory (Zen 4).
    Pmem,
    /// Memory behind an extension (CXL) (Zen 4).
    ExtMem,
    /// Memory of a peer agent (Zen 4).
    PeerAgentMem,
    /// I/O.
    Io,
}

impl IbsDataSource {
    fn decode(value: u8, extended: bool) -> Self {
        if extended {
            match value {
                1 => IbsDataSource::LocalCache,
                2 => IbsDataSource::NearCcxCache,
                3 => IbsDataSource::Dram,
                5 => IbsDataSource::RemoteCache,
                6 => IbsDataSource::Pmem,
                7 => IbsDataSource::Io,
                8 => IbsDataSource::ExtMem,
                12 => IbsDataSource::PeerAgentMem,
                v => IbsDataSource::Unknown(v),
            }
        } else {
            match value {
                2 => IbsDataSource::LocalCache,
                3 => IbsDataSource::Dram,
                4 => IbsDataSource::RemoteCache,
                7 => IbsDataSource::Io,
                v => IbsDataSource::Unknown(v),
            }
        }
    }

    /// Whether the data came from beyond the local L3.
    #[must_use]
    pub fn beyond_l3(self) -> bool {
        !matches!(self, IbsDataSource::LocalCache | IbsDataSource::Unknown(_))
    }
}

/// The decoded IBS op registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IbsOp {
    /// `ibs_caps`.
    pub caps: u32,
    /// IbsOpCtl.
    pub op_ctl: u64,
    /// IbsOpRip.
    pub rip: u64,
    /// IbsOpData.
    pub op_data: u64,
    /// IbsOpData2.
    pub op_data2: u64,
    /// IbsOpData3.
    pub op_data3: u64,
    /// IbsDcLinAd.
    pub dc_lin_addr: u64,
    /// IbsDcPhysAd.
    pub dc_phys_addr: u64,
}

fn bit(v: u64, n: u32) -> bool {
    v >> n & 1 != 0
}

impl IbsOp {
    /// Decodes the raw data of an `ibs_op` sample.
    ///
    /// # Errors
    /// [`IbsError`] when it is too short.
    pub fn parse(raw: &[u8]) -> Result<Self, IbsError> {
        if raw.len() < 4 + 7 * 8 {
            return Err(IbsError { len: raw.len() });
        }
        let reg = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&raw[4 + i * 8..12 + i * 8]);
            u64::from_ne_bytes(w)
        };
        Ok(IbsOp {
            caps: u32::from_ne_bytes([raw[0], raw[1], raw[2], raw[3]]),
            op_ctl: reg(0),
            rip: reg(1),
            op_data: reg(2),
            op_data2: reg(3),
            op_data3: reg(4),
            dc_lin_addr: reg(5),
            dc_phys_addr: reg(6),
        })
    }
    /// IbsOpData3 `ld_op`.
    #[must_use]
    pub fn ld_op(&self) -> bool {
        bit(self.op_data3, 0)
    }
    /// IbsOpData3 `st_op`.
    #[must_use]
    pub fn st_op(&self) -> bool {
        bit(self.op_data3, 1)
    }
    /// IbsOpData3 `dc_miss`.
    #[must_use]
    pub fn dc_miss(&self) -> bool {
        bit(self.op_data3, 7)
    }
    /// IbsOpData3 `dc_lin_addr_valid`.
    #[must_use]
    pub fn lin_addr_valid(&self) -> bool {
        bit(self.op_data3, 17)
    }
    /// IbsOpData3 `dc_phy_addr_valid`.
    #[must_use]
    pub fn phys_addr_valid(&self) -> bool {
        bit(self.op_data3, 18)
    }
    /// IbsOpData3 `l2_miss`.
    #[must_use]
    pub fn l2_miss(&self) -> bool {
        bit(self.op_data3, 20)
    }
    /// IbsOpData3 `dc_miss_lat`: cycles from the miss to the fill.
    #[must_use]
    pub fn dc_miss_lat(&self) -> u16 {
        u16::try_from((self.op_data3 >> 32) & 0xffff).unwrap_or(u16::MAX)
    }
    /// IbsOpData2 `rmt_node`: the data came from another node.
    #[must_use]
    pub fn rmt_node(&self) -> bool {
        bit(self.op_data2, 4)
    }
    /// The data source, extended on Zen 4 (`(data_src_hi << 3) | data_src_lo`).
    #[must_use]
    pub fn data_source(&self) -> IbsDataSource {
        let lo = self.op_data2 & 0x7;
        let extended = self.caps & IBS_CAPS_ZEN4 != 0;
        let v = if extended {
            ((self.op_data2 >> 6) & 0x3) << 3 | lo
        } else {
            lo
        };
        IbsDataSource::decode(u8::try_from(v).unwrap_or(0), extended)
    }
    /// Whether this load missed L1, L2 and the local L3 (data source beyond L3). The data
    /// source is only reported for loads that missed the data cache and L2 (ibs.c
    /// `perf_ibs_get_mem_lvl()`).
    #[must_use]
    pub fn l3_miss(&self) -> bool {
        self.ld_op() && self.dc_miss() && self.l2_miss() && self.data_source().beyond_l3()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Raw bytes built from the documented layout (caps, then IbsOpCtl..IbsDcPhysAd). No raw
    /// byte dump was found; the register *values* of the `recorded_*` tests are real ones
    /// that perf printed, the others are built from amd-ibs.h. This machine has no IBS.
    pub(crate) fn raw(caps: u32, data2: u64, data3: u64, lin: u64, phys: u64) -> Vec<u8> {
        let mut v = caps.to_ne_bytes().to_vec();
        for r in [
            1u64 << 18, // IbsOpCtl: op_val
            0x40_1000,  // rip
            0,          // IbsOpData
            data2,
            data3,
            lin,
            phys,
        ] {
            v.extend(r.to_ne_bytes());
        }
        v
    }

    const LD: u64 = 1;
    const DC_MISS: u64 = 1 << 7;
    const LIN_VALID: u64 = 1 << 17;
    const PHY_VALID: u64 = 1 << 18;
    const L2_MISS: u64 = 1 << 20;

    #[test]
    fn zen4_dram_load_from_remote_node() {
        // data_src_lo 3 (DRAM), rmt_node, data_src_hi 0; latency 300 cycles.
        let d3 = LD | DC_MISS | LIN_VALID | PHY_VALID | L2_MISS | (300 << 32);
        let op = IbsOp::parse(&raw(
            IBS_CAPS_ZEN4,
            3 | 1 << 4,
            d3,
            0x7f00_1000,
            0x2_0000_1000,
        ))
        .unwrap();
        assert!(op.ld_op() && !op.st_op());
        assert_eq!(op.data_source(), IbsDataSource::Dram);
        assert!(op.rmt_node());
        assert!(op.l3_miss());
        assert_eq!(op.dc_miss_lat(), 300);
        assert_eq!(op.dc_lin_addr, 0x7f00_1000);
        assert_eq!(op.rip, 0x40_1000);
    }

    #[test]
    fn zen4_extended_source_cxl() {
        // EXT_MEM = 8 = hi 1, lo 0 -> bits 6-7 = 1.
        let d3 = LD | DC_MISS | L2_MISS;
        let op = IbsOp::parse(&raw(IBS_CAPS_ZEN4, 1 << 6, d3, 0, 0)).unwrap();
        assert_eq!(op.data_source(), IbsDataSource::ExtMem);
        assert!(op.l3_miss());
        // Without the Zen 4 cap the high bits are ignored: lo 0 = unknown.
        let old = IbsOp::parse(&raw(0, 1 << 6, d3, 0, 0)).unwrap();
        assert_eq!(old.data_source(), IbsDataSource::Unknown(0));
        assert!(!old.l3_miss());
    }

    #[test]
    fn l3_hits_and_l1_hits_are_not_misses() {
        let hit_l3 = IbsOp::parse(&raw(IBS_CAPS_ZEN4, 1, LD | DC_MISS | L2_MISS, 0, 0)).unwrap();
        assert_eq!(hit_l3.data_source(), IbsDataSource::LocalCache);
        assert!(!hit_l3.l3_miss());
        let hit_l1 = IbsOp::parse(&raw(0, 3, LD, 0, 0)).unwrap();
        assert!(!hit_l1.l3_miss());
        let legacy_remote = IbsOp::parse(&raw(0, 4, LD | DC_MISS | L2_MISS, 0, 0)).unwrap();
        assert_eq!(legacy_remote.data_source(), IbsDataSource::RemoteCache);
    }

    /// Register values recorded on Zen 4 hardware and decoded by perf itself: the
    /// `perf report -D` of `perf record -a -e ibs_op/l3missonly=1/ --raw-samples` in Ravi
    /// Bangoria's LKML patch to tools/perf/util/amd-sample-raw.c (2022-05-23, "Interpret
    /// Additional set of IBS register bits"). perf's decode: `ibs_op_data2 0x2`: RmtNode 0,
    /// DataSrc 2 = a peer cache in a near CCX; `ibs_op_data3 0x000000681d1700a1`: LdOp 1,
    /// DcMiss 1, DcLinAddrValid 1, DcPhyAddrValid 1, L2Miss 1, DcMissLat 104.
    #[test]
    fn recorded_zen4_l3_miss_load() {
        let op = IbsOp::parse(&raw(IBS_CAPS_ZEN4, 0x2, 0x0000_0068_1d17_00a1, 0, 0)).unwrap();
        assert!(op.ld_op() && !op.st_op());
        assert!(op.dc_miss() && op.l2_miss());
        assert!(op.lin_addr_valid() && op.phys_addr_valid());
        assert_eq!(op.dc_miss_lat(), 104);
        assert!(!op.rmt_node());
        assert_eq!(op.data_source(), IbsDataSource::NearCcxCache);
        // Sampled with l3missonly=1: the hardware counted it as an L3 miss, and so do we.
        assert!(op.l3_miss());
    }

    /// The "Example register raw dump" of the AMD IBS documentation patch
    /// (Documentation/arch/x86/amd-ibs.rst, `perf report -D` of `ibs_op//`): a store to DRAM on
    /// another node. perf's decode: `ibs_op_data2 0x13`: RmtNode 1, DataSrc 3 = DRAM;
    /// `ibs_op_data3 0x31960092`: LdOp 0, StOp 1, DcMiss 1, DcLinAddrValid 1, DcPhyAddrValid 1,
    /// L2Miss 1; IbsDCLinAd ff110008a5398920, IbsDCPhysAd 00000008a5398920.
    #[test]
    fn recorded_remote_dram_store() {
        for caps in [0, IBS_CAPS_ZEN4] {
            let op = IbsOp::parse(&raw(
                caps,
                0x13,
                0x3196_0092,
                0xff11_0008_a539_8920,
                0x0000_0008_a539_8920,
            ))
            .unwrap();
            assert!(op.st_op() && !op.ld_op());
            assert!(op.dc_miss() && op.l2_miss());
            assert!(op.lin_addr_valid() && op.phys_addr_valid());
            assert!(op.rmt_node());
            assert_eq!(op.data_source(), IbsDataSource::Dram);
            // Only loads are classified as L3 misses (the data source describes the fill).
            assert!(!op.l3_miss());
            assert_eq!(op.dc_phys_addr, 0x8_a539_8920);
        }
    }

    #[test]
    fn short_raw_is_an_error() {
        assert_eq!(IbsOp::parse(&[0; 59]), Err(IbsError { len: 59 }));
    }
}
