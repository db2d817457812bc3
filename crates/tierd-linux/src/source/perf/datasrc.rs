//! `union perf_mem_data_src` (`PERF_SAMPLE_DATA_SRC`), as Intel PEBS load-latency samples
//! (and AMD IBS through `perf mem`) report it.
//!
//! Bit fields from include/uapi/linux/perf_event.h (little-endian layout): `mem_op` 0-4,
//! `mem_lvl` 5-18, `mem_snoop` 19-23, `mem_lock` 24-25, `mem_dtlb` 26-32, `mem_lvl_num` 33-36,
//! `mem_remote` 37, `mem_snoopx` 38-39, `mem_blk` 40-42, `mem_hops` 43-45.
//! For PEBS load latency the sample's weight (`var1_dw` of `WEIGHT_STRUCT`, or `WEIGHT`) is
//! the load latency in core cycles (arch/x86/events/intel/ds.c).

/// `PERF_MEM_OP_*`.
pub mod op {
    /// Not available.
    pub const NA: u64 = 0x01;
    /// Load.
    pub const LOAD: u64 = 0x02;
    /// Store.
    pub const STORE: u64 = 0x04;
    /// Prefetch.
    pub const PFETCH: u64 = 0x08;
    /// Code (execute).
    pub const EXEC: u64 = 0x10;
}

/// `PERF_MEM_LVL_*` (the older, bit-mask level field).
pub mod lvl {
    /// Not available.
    pub const NA: u64 = 0x01;
    /// Hit.
    pub const HIT: u64 = 0x02;
    /// Miss.
    pub const MISS: u64 = 0x04;
    /// L1.
    pub const L1: u64 = 0x08;
    /// Line fill buffer.
    pub const LFB: u64 = 0x10;
    /// L2.
    pub const L2: u64 = 0x20;
    /// L3.
    pub const L3: u64 = 0x40;
    /// Local DRAM.
    pub const LOC_RAM: u64 = 0x80;
    /// Remote DRAM, 1 hop.
    pub const REM_RAM1: u64 = 0x100;
    /// Remote DRAM, 2 hops.
    pub const REM_RAM2: u64 = 0x200;
    /// Remote cache, 1 hop.
    pub const REM_CCE1: u64 = 0x400;
    /// Remote cache, 2 hops.
    pub const REM_CCE2: u64 = 0x800;
    /// I/O.
    pub const IO: u64 = 0x1000;
    /// Uncached.
    pub const UNC: u64 = 0x2000;
}

/// `PERF_MEM_LVLNUM_*`.
pub mod lvlnum {
    /// L1.
    pub const L1: u64 = 0x01;
    /// L2.
    pub const L2: u64 = 0x02;
    /// L3.
    pub const L3: u64 = 0x03;
    /// L4.
    pub const L4: u64 = 0x04;
    /// CXL memory.
    pub const CXL: u64 = 0x09;
    /// I/O.
    pub const IO: u64 = 0x0a;
    /// Any cache.
    pub const ANY_CACHE: u64 = 0x0b;
    /// Line fill buffer.
    pub const LFB: u64 = 0x0c;
    /// RAM.
    pub const RAM: u64 = 0x0d;
    /// Persistent memory.
    pub const PMEM: u64 = 0x0e;
    /// Not available.
    pub const NA: u64 = 0x0f;
}

/// A decoded `perf_mem_data_src`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DataSrc(pub u64);

impl DataSrc {
    /// `mem_op` (5 bits).
    #[must_use]
    pub fn mem_op(self) -> u64 {
        self.0 & 0x1f
    }
    /// `mem_lvl` (14 bits).
    #[must_use]
    pub fn mem_lvl(self) -> u64 {
        (self.0 >> 5) & 0x3fff
    }
    /// `mem_snoop` (5 bits).
    #[must_use]
    pub fn mem_snoop(self) -> u64 {
        (self.0 >> 19) & 0x1f
    }
    /// `mem_dtlb` (7 bits).
    #[must_use]
    pub fn mem_dtlb(self) -> u64 {
        (self.0 >> 26) & 0x7f
    }
    /// `mem_lvl_num` (4 bits).
    #[must_use]
    pub fn mem_lvl_num(self) -> u64 {
        (self.0 >> 33) & 0xf
    }
    /// `mem_remote`.
    #[must_use]
    pub fn mem_remote(self) -> bool {
        (self.0 >> 37) & 1 != 0
    }
    /// `mem_hops` (3 bits).
    #[must_use]
    pub fn mem_hops(self) -> u64 {
        (self.0 >> 43) & 0x7
    }
    /// A load.
    #[must_use]
    pub fn is_load(self) -> bool {
        self.mem_op() & op::LOAD != 0
    }
    /// A store.
    #[must_use]
    pub fn is_store(self) -> bool {
        self.mem_op() & op::STORE != 0
    }

    /// Whether the level is known at all (neither field says "not available").
    #[must_use]
    pub fn level_known(self) -> bool {
        let num = self.mem_lvl_num();
        let l = self.mem_lvl();
        (num != 0 && num != lvlnum::NA) || (l != 0 && l & lvl::NA == 0)
    }

    /// Served from beyond the L3: memory (local, remote, CXL, PMEM) or a remote cache. Uses
    /// `mem_lvl_num` when set (newer kernels fill both), else the `mem_lvl` hit bits.
    #[must_use]
    pub fn l3_miss(self) -> bool {
        match self.mem_lvl_num() {
            lvlnum::RAM | lvlnum::CXL | lvlnum::PMEM | lvlnum::L4 => true,
            // "Any cache" with the remote bit: another socket's cache.
            lvlnum::ANY_CACHE => self.mem_remote(),
            0 | lvlnum::NA => {
                let l = self.mem_lvl();
                let beyond =
                    lvl::LOC_RAM | lvl::REM_RAM1 | lvl::REM_RAM2 | lvl::REM_CCE1 | lvl::REM_CCE2;
                (l & lvl::HIT != 0 && l & beyond != 0) || (l & lvl::MISS != 0 && l & lvl::L3 != 0)
            }
            _ => false,
        }
    }

    /// Whether the data came from another node; `None` when the level is not known.
    #[must_use]
    pub fn remote(self) -> Option<bool> {
        if !self.level_known() {
            return None;
        }
        let l = self.mem_lvl();
        let rem = lvl::REM_RAM1 | lvl::REM_RAM2 | lvl::REM_CCE1 | lvl::REM_CCE2;
        Some(self.mem_remote() || l & rem != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(op_: u64, lvl_: u64, num: u64, remote: bool) -> DataSrc {
        DataSrc(op_ | lvl_ << 5 | num << 33 | u64::from(remote) << 37)
    }

    #[test]
    fn local_dram_load() {
        // As arch/x86/events/intel/ds.c encodes "Local DRAM" for a load: LVL(LOC_RAM, HIT),
        // LEVEL(RAM).
        let d = src(op::LOAD, lvl::LOC_RAM | lvl::HIT, lvlnum::RAM, false);
        assert!(d.is_load() && !d.is_store());
        assert!(d.l3_miss());
        assert_eq!(d.remote(), Some(false));
        assert_eq!(d.mem_lvl_num(), lvlnum::RAM);
    }

    #[test]
    fn remote_dram_and_cxl() {
        let d = src(op::LOAD, lvl::REM_RAM1 | lvl::HIT, lvlnum::RAM, true);
        assert!(d.l3_miss());
        assert_eq!(d.remote(), Some(true));
        let cxl = src(op::LOAD, 0, lvlnum::CXL, false);
        assert!(cxl.l3_miss());
    }

    #[test]
    fn cache_hits_are_not_misses() {
        let l3 = src(op::LOAD, lvl::L3 | lvl::HIT, lvlnum::L3, false);
        assert!(!l3.l3_miss());
        let l1 = src(op::LOAD, lvl::L1 | lvl::HIT, lvlnum::L1, false);
        assert!(!l1.l3_miss());
        // Old kernels: only mem_lvl, "L3 miss".
        let old = src(op::LOAD, lvl::L3 | lvl::MISS, 0, false);
        assert!(old.l3_miss());
    }

    #[test]
    fn unknown_level() {
        let na = src(op::NA, lvl::NA, lvlnum::NA, false);
        assert_eq!(na.remote(), None);
        assert!(!na.l3_miss());
    }
}
