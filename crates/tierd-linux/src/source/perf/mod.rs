//! Hardware memory-access sampling through `perf_event_open(2)`.
//!
//! Three PMUs give the data address of sampled loads (and stores):
//! - AMD IBS op (`/sys/bus/event_source/devices/ibs_op`): registers in `PERF_SAMPLE_RAW`
//!   ([`ibs`]); `l3missonly` (format bit, Zen 4+) keeps only L3 misses.
//! - Intel PEBS load latency (`cpu/mem-loads,ldlat=N/`): `ADDR`, `DATA_SRC` ([`datasrc`]),
//!   weight = latency in cycles.
//! - ARM SPE (`arm_spe_N`): packets in the AUX buffer ([`spe`]).
//!
//! [`sample`] parses `PERF_RECORD_SAMPLE` bodies. Each decoder ends in a [`MemSample`], and
//! [`to_ranges`] turns those into accessed ranges for [`super::locate`] (`HwSample`, with the
//! sampling CPU's node as the accessing node).
//!
//! Neither the development machine nor the QEMU TCG guest has a sampling PMU (TCG emulates no
//! PMU; the host is itself a VM without IBS/PEBS/SPE). So the decoders are tested on recorded
//! data where public dumps exist (SPE: google/perf_data_converter's quipper test vectors and a
//! `perf report -D` byte dump from the kernel lists; IBS: register values from two `perf
//! report -D` dumps on the kernel lists, with perf's own decoding) and otherwise on records
//! built byte by byte from the documented layouts (the `PERF_RECORD_SAMPLE` framing, PEBS
//! `data_src`), cross-checked against the `perf-event-data` crate's parser; [`live`] compiles
//! and reports "unavailable" here.
//!
//! Permissions (kernel/events/core.c): system-wide (per-CPU) sampling needs
//! `perf_event_paranoid <= 0` or `CAP_PERFMON`/`CAP_SYS_ADMIN`; per-process sampling of one's
//! own processes needs `<= 2`; `PERF_SAMPLE_PHYS_ADDR` needs `perf_allow_kernel()`
//! (`<= 1` or the capabilities).

pub mod datasrc;
pub mod ibs;
pub mod live;
pub mod sample;
pub mod spe;

use std::path::{Path, PathBuf};

use tierd_engine::types::{Nanos, NodeId, Pfn, Vpn, PAGE_SHIFT};
use tierd_engine::SourceKind;

use super::{AccessedRange, Privileges, SourceName, SourceStatus, CAP_PERFMON, CAP_SYS_ADMIN};
use datasrc::DataSrc;
use ibs::IbsOp;
use sample::SampleRecord;
use spe::SpeRecord;

/// PMU devices, relative to the `/sys` root.
pub const PMU_DEVICES: &str = "bus/event_source/devices";

/// One sampled memory access, whatever the PMU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemSample {
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// CPU that executed the access.
    pub cpu: u32,
    /// When (perf clock).
    pub time: Nanos,
    /// Data virtual address.
    pub vaddr: u64,
    /// Data physical address, when the PMU gave it and we may see it.
    pub paddr: Option<u64>,
    /// Served from beyond the last-level cache.
    pub l3_miss: bool,
    /// Access latency in core cycles, when known.
    pub latency_cycles: Option<u32>,
    /// Served from another node, when known.
    pub remote: Option<bool>,
}

fn cycles(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl MemSample {
    /// From an `ibs_op` sample (`RAW` required; `TID`, `TIME`, `CPU` used when present).
    /// `None` for ops that are neither load nor store, or without a valid linear address.
    #[must_use]
    pub fn from_ibs(rec: &SampleRecord) -> Option<MemSample> {
        let op = IbsOp::parse(rec.raw.as_deref()?).ok()?;
        if !op.ld_op() && !op.st_op() {
            return None;
        }
        let vaddr = if op.lin_addr_valid() {
            op.dc_lin_addr
        } else {
            rec.addr.filter(|&a| a != 0)?
        };
        let paddr = if op.phys_addr_valid() {
            Some(op.dc_phys_addr)
        } else {
            rec.phys_addr.filter(|&a| a != 0)
        };
        let missed = op.ld_op() && op.dc_miss();
        Some(MemSample {
            pid: rec.pid.unwrap_or(0),
            tid: rec.tid.unwrap_or(0),
            cpu: rec.cpu.unwrap_or(0),
            time: Nanos(rec.time.unwrap_or(0)),
            vaddr,
            paddr,
            l3_miss: op.l3_miss(),
            latency_cycles: missed.then(|| u32::from(op.dc_miss_lat())),
            remote: (missed && op.l2_miss()).then(|| op.rmt_node()),
        })
    }

    /// From a PEBS (or any `DATA_SRC`-reporting) sample: needs `ADDR`; the latency is the
    /// weight's `var1_dw` (full weight with `WEIGHT`).
    #[must_use]
    pub fn from_data_src(rec: &SampleRecord) -> Option<MemSample> {
        let vaddr = rec.addr.filter(|&a| a != 0)?;
        let ds = rec.data_src.map(DataSrc);
        Some(MemSample {
            pid: rec.pid.unwrap_or(0),
            tid: rec.tid.unwrap_or(0),
            cpu: rec.cpu.unwrap_or(0),
            time: Nanos(rec.time.unwrap_or(0)),
            vaddr,
            paddr: rec.phys_addr.filter(|&a| a != 0),
            l3_miss: ds.is_some_and(DataSrc::l3_miss),
            latency_cycles: rec
                .weight
                .map(|w| w.var1_dw())
                .filter(|&w| w != 0)
                .map(|w| cycles(u64::from(w))),
            remote: ds.and_then(DataSrc::remote),
        })
    }

    /// From an SPE record. SPE records carry no pid/tid/cpu (the CONTEXT packet holds the pid
    /// only with `CONFIG_PID_IN_CONTEXTIDR`) and their timestamp is the generic timer, so the
    /// caller passes what the surrounding perf records (AUX, ITRACE_START, SWITCH) told it.
    #[must_use]
    pub fn from_spe(r: &SpeRecord, pid: u32, tid: u32, cpu: u32, time: Nanos) -> Option<MemSample> {
        if !r.is_load() && !r.is_store() {
            return None;
        }
        Some(MemSample {
            pid: r
                .context
                .and_then(|c| u32::try_from(c).ok())
                .filter(|&c| c != 0)
                .unwrap_or(pid),
            tid,
            cpu,
            time,
            vaddr: r.virt_addr?,
            paddr: r.phys_addr,
            l3_miss: r.llc_miss(),
            latency_cycles: r.total_lat.map(cycles),
            remote: r.llc_miss().then(|| r.remote_access()),
        })
    }
}

/// Whether an address is a user-space address (bit 63 clear on x86-64 and arm64): kernel
/// addresses cannot be moved with `move_pages(2)`.
#[must_use]
pub fn is_user_addr(vaddr: u64) -> bool {
    vaddr >> 63 == 0
}

/// Turns samples into accessed ranges of one page: user-space samples of a real process
/// (pid > 0; kernel addresses cannot be moved with `move_pages(2)`), the accessing node from
/// `cpu_node`, and the frame when the sample had a physical address. Stamped `now`: the perf
/// clock is not the daemon's, and the engine wants its own time.
pub fn to_ranges(
    samples: &[MemSample],
    mut cpu_node: impl FnMut(u32) -> Option<NodeId>,
    now: Nanos,
    out: &mut Vec<AccessedRange>,
) {
    out.extend(
        samples
            .iter()
            .filter(|s| s.pid != 0 && is_user_addr(s.vaddr))
            .map(|s| AccessedRange {
                pid: s.pid,
                start: Vpn::from_addr(s.vaddr),
                nr_pages: 1,
                time: now,
                kind: SourceKind::HwSample,
                accessing_node: cpu_node(s.cpu),
                nr_accesses: 0,
                pfn: s.paddr.map(|p| Pfn(p >> PAGE_SHIFT)),
            }),
    );
}

/// What the process may do with perf.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PerfAccess {
    /// `/proc/sys/kernel/perf_event_paranoid`, if readable.
    pub paranoid: Option<i32>,
    /// Capabilities.
    pub privileges: Privileges,
}

impl PerfAccess {
    /// Reads `<proc_root>/sys/kernel/perf_event_paranoid` and `<proc_root>/self/status`.
    #[must_use]
    pub fn read(proc_root: &Path) -> Self {
        let paranoid = std::fs::read_to_string(proc_root.join("sys/kernel/perf_event_paranoid"))
            .ok()
            .and_then(|s| s.trim().parse().ok());
        PerfAccess {
            paranoid,
            privileges: Privileges::read(proc_root),
        }
    }

    fn capable(self) -> bool {
        self.privileges.has(CAP_PERFMON) || self.privileges.has(CAP_SYS_ADMIN)
    }

    /// Per-CPU (system-wide) sampling allowed.
    #[must_use]
    pub fn system_wide(self) -> bool {
        self.capable() || self.paranoid.is_some_and(|p| p <= 0)
    }

    /// Sampling one's own processes allowed.
    #[must_use]
    pub fn per_process(self) -> bool {
        self.capable() || self.paranoid.is_some_and(|p| p <= 2)
    }

    /// `PERF_SAMPLE_PHYS_ADDR` allowed.
    #[must_use]
    pub fn phys_addr(self) -> bool {
        self.capable() || self.paranoid.is_some_and(|p| p <= 1)
    }

    /// A short description for status lines.
    #[must_use]
    pub fn describe(self) -> String {
        let p = self
            .paranoid
            .map_or_else(|| "unreadable".to_string(), |p| p.to_string());
        let caps = match (
            self.privileges.has(CAP_PERFMON),
            self.privileges.has(CAP_SYS_ADMIN),
        ) {
            (true, true) => "CAP_PERFMON+CAP_SYS_ADMIN",
            (true, false) => "CAP_PERFMON",
            (false, true) => "CAP_SYS_ADMIN",
            (false, false) => "no perf capabilities",
        };
        format!("perf_event_paranoid={p}, {caps}")
    }
}

/// A PMU found under the devices directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmuInfo {
    /// Its name (directory).
    pub name: String,
    /// Its directory.
    pub dir: PathBuf,
    /// `type` (the `perf_event_attr.type` to use).
    pub ty: Option<u32>,
    /// Names under `format/`.
    pub formats: Vec<String>,
    /// Names under `caps/`.
    pub caps: Vec<String>,
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Reads a PMU's directory; `None` when absent.
#[must_use]
pub fn read_pmu(sys_root: &Path, name: &str) -> Option<PmuInfo> {
    let dir = sys_root.join(PMU_DEVICES).join(name);
    if !dir.is_dir() {
        return None;
    }
    let ty = std::fs::read_to_string(dir.join("type"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    Some(PmuInfo {
        name: name.to_string(),
        formats: names(&dir.join("format")),
        caps: names(&dir.join("caps")),
        ty,
        dir,
    })
}

fn gate(kind: SourceName, found: String, access: PerfAccess) -> SourceStatus {
    let acc = access.describe();
    let pa = if access.phys_addr() {
        "physical addresses allowed"
    } else {
        "no physical addresses"
    };
    if access.system_wide() {
        SourceStatus::available(kind, format!("{found}; system-wide sampling ({acc}; {pa})"))
    } else if access.per_process() {
        SourceStatus::available(
            kind,
            format!("{found}; per-process sampling only ({acc}; {pa})"),
        )
    } else {
        SourceStatus::unavailable(kind, format!("{found}, but perf is not permitted ({acc})"))
    }
}

/// Probes AMD IBS op.
#[must_use]
pub fn probe_ibs(sys_root: &Path, access: PerfAccess) -> SourceStatus {
    let Some(pmu) = read_pmu(sys_root, "ibs_op") else {
        return SourceStatus::unavailable(
            SourceName::AmdIbsOp,
            format!("no {PMU_DEVICES}/ibs_op (not an AMD CPU with IBS, or a VM without it)"),
        );
    };
    let l3 = if pmu.formats.iter().any(|f| f == "l3missonly") {
        "l3missonly supported"
    } else {
        "no l3missonly (pre-Zen 4): every op is sampled"
    };
    let caps = if pmu.caps.is_empty() {
        String::new()
    } else {
        format!(", caps {}", pmu.caps.join(" "))
    };
    let ty = pmu.ty.map_or_else(|| "?".into(), |t| t.to_string());
    gate(
        SourceName::AmdIbsOp,
        format!("ibs_op type {ty}, {l3}{caps}"),
        access,
    )
}

/// The PMUs that may carry Intel's `mem-loads` event (hybrid parts have `cpu_core`).
pub const PEBS_PMUS: [&str; 2] = ["cpu", "cpu_core"];

/// Probes Intel PEBS load latency.
#[must_use]
pub fn probe_pebs(sys_root: &Path, access: PerfAccess) -> SourceStatus {
    for name in PEBS_PMUS {
        let Some(pmu) = read_pmu(sys_root, name) else {
            continue;
        };
        let ev = pmu.dir.join("events/mem-loads");
        if let Ok(enc) = std::fs::read_to_string(&ev) {
            if !pmu.formats.iter().any(|f| f == "ldlat") {
                return SourceStatus::unavailable(
                    SourceName::IntelPebs,
                    format!("{name}/events/mem-loads present but no ldlat format"),
                );
            }
            return gate(
                SourceName::IntelPebs,
                format!("{name}/mem-loads = {}", enc.trim()),
                access,
            );
        }
    }
    SourceStatus::unavailable(
        SourceName::IntelPebs,
        "no cpu/events/mem-loads (not an Intel CPU with PEBS load latency, or a VM without it)",
    )
}

/// Probes ARM SPE. The decoder is implemented, the live AUX-buffer sampler is not.
#[must_use]
pub fn probe_spe(sys_root: &Path, access: PerfAccess) -> SourceStatus {
    let spe: Vec<String> = names(&sys_root.join(PMU_DEVICES))
        .into_iter()
        .filter(|n| n.starts_with("arm_spe"))
        .collect();
    if spe.is_empty() {
        return SourceStatus::unavailable(
            SourceName::ArmSpe,
            "no arm_spe_* PMU (not an ARM CPU with SPE)",
        );
    }
    SourceStatus::unavailable(
        SourceName::ArmSpe,
        format!(
            "{} present ({}), but tierd's live sampler has no AUX-buffer support yet (decoder only)",
            spe.join(" "),
            access.describe()
        ),
    )
}

/// Probes the three PMUs.
#[must_use]
pub fn probe(sys_root: &Path, proc_root: &Path) -> Vec<SourceStatus> {
    let access = PerfAccess::read(proc_root);
    vec![
        probe_ibs(sys_root, access),
        probe_pebs(sys_root, access),
        probe_spe(sys_root, access),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use sample::{bits, parse_record, tests::Builder};

    fn tree() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    fn put(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn access(paranoid: i32, caps: u64) -> PerfAccess {
        PerfAccess {
            paranoid: Some(paranoid),
            privileges: Privileges {
                cap_eff: caps,
                euid: Some(1000),
            },
        }
    }

    #[test]
    fn ibs_probe_reads_pmu_and_permissions() {
        let t = tree();
        let root = t.path();
        assert!(!probe_ibs(root, access(0, 0)).available);
        put(root, "bus/event_source/devices/ibs_op/type", "11\n");
        put(
            root,
            "bus/event_source/devices/ibs_op/format/cnt_ctl",
            "config:19\n",
        );
        put(
            root,
            "bus/event_source/devices/ibs_op/format/l3missonly",
            "config:16\n",
        );
        put(
            root,
            "bus/event_source/devices/ibs_op/caps/zen4_ibs_extensions",
            "1\n",
        );
        let s = probe_ibs(root, access(2, 1 << CAP_PERFMON));
        assert!(s.available, "{}", s.reason);
        assert!(s.reason.contains("type 11") && s.reason.contains("l3missonly supported"));
        assert!(s.reason.contains("system-wide"), "{}", s.reason);
        let s = probe_ibs(root, access(2, 0));
        assert!(
            s.available && s.reason.contains("per-process sampling only"),
            "{}",
            s.reason
        );
        let s = probe_ibs(root, access(3, 0));
        assert!(
            !s.available && s.reason.contains("not permitted"),
            "{}",
            s.reason
        );
    }

    #[test]
    fn pebs_and_spe_probes() {
        let t = tree();
        let root = t.path();
        put(root, "bus/event_source/devices/cpu/type", "4\n");
        let s = probe_pebs(root, access(-1, 0));
        assert!(!s.available && s.reason.contains("mem-loads"));
        put(
            root,
            "bus/event_source/devices/cpu/events/mem-loads",
            "event=0xcd,umask=0x1,ldlat=3\n",
        );
        put(
            root,
            "bus/event_source/devices/cpu/format/ldlat",
            "config1:0-15\n",
        );
        let s = probe_pebs(root, access(-1, 0));
        assert!(s.available, "{}", s.reason);
        assert!(s.reason.contains("event=0xcd"));
        assert!(s.reason.contains("physical addresses allowed"));
        put(root, "bus/event_source/devices/arm_spe_0/type", "8\n");
        let s = probe_spe(root, access(0, 0));
        assert!(
            !s.available && s.reason.contains("arm_spe_0"),
            "{}",
            s.reason
        );
    }

    #[test]
    fn paranoid_file_is_read() {
        let t = tree();
        put(t.path(), "sys/kernel/perf_event_paranoid", "1\n");
        put(t.path(), "self/status", "Uid:\t5\t5\t5\t5\nCapEff:\t0\n");
        let a = PerfAccess::read(t.path());
        assert_eq!(a.paranoid, Some(1));
        assert!(a.phys_addr() && a.per_process() && !a.system_wide());
    }

    #[test]
    fn ibs_record_to_mem_sample() {
        let raw = ibs::tests::raw(
            ibs::IBS_CAPS_ZEN4,
            3 | 1 << 4,
            1 | 1 << 7 | 1 << 17 | 1 << 18 | 1 << 20 | 250 << 32,
            0x7f12_3456_7890,
            0x1_8000_0890,
        );
        let st = bits::TID | bits::TIME | bits::CPU | bits::RAW;
        let rec = Builder::default()
            .u32(42)
            .u32(43)
            .u64(1_000)
            .u32(5)
            .u32(0)
            .u32(u32::try_from(raw.len()).unwrap())
            .bytes(&raw)
            .record();
        let (s, _) = parse_record(&rec, st).unwrap();
        let m = MemSample::from_ibs(&s.unwrap()).unwrap();
        assert_eq!(
            m,
            MemSample {
                pid: 42,
                tid: 43,
                cpu: 5,
                time: Nanos(1_000),
                vaddr: 0x7f12_3456_7890,
                paddr: Some(0x1_8000_0890),
                l3_miss: true,
                latency_cycles: Some(250),
                remote: Some(true),
            }
        );
    }

    #[test]
    fn ibs_non_memory_op_is_skipped() {
        let raw = ibs::tests::raw(0, 0, 0, 0, 0);
        let rec = SampleRecord {
            raw: Some(raw),
            ..SampleRecord::default()
        };
        assert_eq!(MemSample::from_ibs(&rec), None);
    }

    #[test]
    fn pebs_record_to_mem_sample() {
        // Local DRAM load, 180-cycle latency in WEIGHT_STRUCT.var1_dw.
        let ds = datasrc::op::LOAD
            | (datasrc::lvl::LOC_RAM | datasrc::lvl::HIT) << 5
            | datasrc::lvlnum::RAM << 33;
        let st = bits::TID
            | bits::TIME
            | bits::ADDR
            | bits::CPU
            | bits::WEIGHT_STRUCT
            | bits::DATA_SRC
            | bits::PHYS_ADDR;
        let body = Builder::default()
            .u32(7)
            .u32(8)
            .u64(99)
            .u64(0x5555_0000_1008)
            .u32(2)
            .u32(0)
            .u64(180)
            .u64(ds)
            .u64(0);
        let rec = sample::parse_sample(&body.0, st).unwrap();
        let m = MemSample::from_data_src(&rec).unwrap();
        assert_eq!(m.vaddr, 0x5555_0000_1008);
        assert_eq!(m.paddr, None); // 0 = not visible
        assert_eq!(m.latency_cycles, Some(180));
        assert!(m.l3_miss);
        assert_eq!(m.remote, Some(false));
        assert_eq!((m.pid, m.tid, m.cpu), (7, 8, 2));
    }

    #[test]
    fn spe_record_to_mem_sample() {
        let r = SpeRecord {
            virt_addr: Some(0x7fff_0000_2000),
            phys_addr: Some(0x9_0000_2000),
            total_lat: Some(400),
            events: 1 << spe::EV_LLC_MISS,
            op: Some((1, 0)),
            context: Some(0),
            ..SpeRecord::default()
        };
        let m = MemSample::from_spe(&r, 11, 12, 3, Nanos(5)).unwrap();
        assert_eq!(m.pid, 11);
        assert!(m.l3_miss);
        assert_eq!(m.remote, Some(false));
        assert_eq!(m.latency_cycles, Some(400));
        let branch = SpeRecord {
            op: Some((2, 1)),
            ..r
        };
        assert_eq!(MemSample::from_spe(&branch, 1, 1, 1, Nanos(0)), None);
    }

    #[test]
    fn samples_become_one_page_ranges_of_user_addresses() {
        let base = MemSample {
            pid: 9,
            tid: 9,
            cpu: 3,
            time: Nanos(77),
            vaddr: 0x4000_1234,
            paddr: Some(0x20_0000_1234),
            l3_miss: true,
            latency_cycles: None,
            remote: None,
        };
        let kernel = MemSample {
            vaddr: 0xffff_8000_0000_0000,
            ..base
        };
        let idle = MemSample { pid: 0, ..base };
        let mut out = Vec::new();
        to_ranges(
            &[base, kernel, idle],
            |cpu| (cpu == 3).then_some(NodeId(0)),
            Nanos(500),
            &mut out,
        );
        assert_eq!(out.len(), 1);
        let r = out[0];
        assert_eq!(r.pid, 9);
        assert_eq!(r.start, Vpn(0x4_0001));
        assert_eq!(r.nr_pages, 1);
        assert_eq!(r.pfn, Some(Pfn(0x200_0001)));
        assert_eq!(r.accessing_node, Some(NodeId(0)));
        assert_eq!(r.kind, SourceKind::HwSample);
        assert_eq!(r.time, Nanos(500), "the daemon's clock, not perf's");
        assert_eq!(r.nr_accesses, 0);
    }
}
