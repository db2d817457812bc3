//! A small live sampler on top of the `perf-event2` crate (which owns the `perf_event_open`
//! syscall and the ring-buffer `mmap`; this crate stays free of `unsafe` outside `sys.rs`).
//!
//! One sampling event per CPU of the scope (system-wide; samples of processes outside the
//! scope are dropped by the backend) or per pid, each with its own ring buffer, drained by
//! [`LiveSampler::drain`]. AMD IBS op and Intel PEBS load latency are supported; ARM SPE needs
//! the AUX buffer, which this sampler does not map.
//!
//! Not exercised on real hardware here: this machine and the TCG guest have no sampling PMU,
//! so opening reports [`LiveError::Unavailable`] with the reason.

use std::path::Path;

use perf_event::events::Dynamic;
use perf_event::{Builder, SampleFlag, SampleSkid, Sampler};

use super::sample::{bits, parse_sample, PERF_RECORD_SAMPLE};
use super::{read_pmu, MemSample, PerfAccess, PEBS_PMUS, PMU_DEVICES};

/// `PERF_RECORD_LOST` (include/uapi/linux/perf_event.h).
const PERF_RECORD_LOST: u32 = 2;

/// Which PMU to sample with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HwPmu {
    /// AMD IBS op.
    AmdIbsOp,
    /// Intel PEBS load latency (`mem-loads`).
    IntelPebs,
}

/// What to sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Every process, on these CPUs.
    Cpus(Vec<usize>),
    /// These processes (and their threads created later are not followed), on any CPU.
    Pids(Vec<u32>),
}

/// Sampler settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveConfig {
    /// Sampling period: ops (IBS, in units of the op counter) or events (PEBS).
    pub period: u64,
    /// PEBS: minimum load latency in cycles (`ldlat`).
    pub ldlat: u64,
    /// IBS: keep only L3 misses when the PMU has `l3missonly`.
    pub l3_miss_only: bool,
    /// Ring buffer data pages per event (a power of two).
    pub ring_pages: usize,
}

impl Default for LiveConfig {
    fn default() -> Self {
        LiveConfig {
            period: 10_000,
            ldlat: 30,
            l3_miss_only: true,
            ring_pages: 16,
        }
    }
}

/// Errors of the live sampler.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The PMU is not there or not permitted.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// `perf_event_open` or `mmap` failed.
    #[error("opening {pmu:?} sampling on {target}: {source}")]
    Open {
        /// PMU.
        pmu: HwPmu,
        /// "cpu N" or "pid N".
        target: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Counters of the sampler since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveStats {
    /// Samples decoded into [`MemSample`]s.
    pub samples: u64,
    /// Samples that did not decode or were not memory ops.
    pub undecodable: u64,
    /// Samples the kernel dropped (PERF_RECORD_LOST).
    pub lost: u64,
}

/// Open sampling events.
pub struct LiveSampler {
    pmu: HwPmu,
    sample_type: u64,
    samplers: Vec<Sampler>,
    stats: LiveStats,
}

impl std::fmt::Debug for LiveSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveSampler")
            .field("pmu", &self.pmu)
            .field("sample_type", &self.sample_type)
            .field("events", &self.samplers.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl LiveSampler {
    /// Opens one event per CPU or pid of `target`.
    ///
    /// # Errors
    /// [`LiveError::Unavailable`] when the PMU is absent or perf is not permitted;
    /// [`LiveError::Open`] when the kernel refuses the event.
    pub fn open(
        sys_root: &Path,
        proc_root: &Path,
        pmu: HwPmu,
        target: &Target,
        cfg: LiveConfig,
    ) -> Result<Self, LiveError> {
        let access = PerfAccess::read(proc_root);
        match target {
            Target::Cpus(_) if !access.system_wide() => {
                return Err(LiveError::Unavailable(format!(
                    "system-wide sampling not permitted ({})",
                    access.describe()
                )))
            }
            Target::Pids(_) if !access.per_process() => {
                return Err(LiveError::Unavailable(format!(
                    "perf not permitted ({})",
                    access.describe()
                )))
            }
            _ => {}
        }
        let (event, mut sample_type) = Self::event(sys_root, pmu, cfg)?;
        if access.phys_addr() {
            sample_type |= bits::PHYS_ADDR;
        }
        let mut samplers = Vec::new();
        let items: Vec<(Option<usize>, Option<u32>)> = match target {
            Target::Cpus(c) => c.iter().map(|&c| (Some(c), None)).collect(),
            Target::Pids(p) => p.iter().map(|&p| (None, Some(p))).collect(),
        };
        for (cpu, pid) in items {
            let mut b = Builder::new(event);
            b.sample_period(cfg.period)
                .sample(SampleFlag::from_bits_retain(sample_type))
                .precise_ip(SampleSkid::RequestZero);
            if pmu == HwPmu::AmdIbsOp {
                // IBS before 6.2 rejects exclude_* (PERF_PMU_CAP_NO_EXCLUDE); kernel samples
                // are dropped when converting instead.
                b.include_kernel()
                    .include_hv()
                    .precise_ip(SampleSkid::Arbitrary);
            }
            match (cpu, pid) {
                (Some(c), _) => {
                    b.any_pid().one_cpu(c);
                }
                (None, Some(p)) => {
                    b.observe_pid(i32::try_from(p).unwrap_or(i32::MAX))
                        .any_cpu();
                }
                (None, None) => {}
            }
            let describe = || match (cpu, pid) {
                (Some(c), _) => format!("cpu {c}"),
                (_, p) => format!("pid {}", p.unwrap_or(0)),
            };
            let mut s = b
                .build()
                .and_then(|c| c.sampled(cfg.ring_pages.next_power_of_two() * 4096))
                .map_err(|source| LiveError::Open {
                    pmu,
                    target: describe(),
                    source,
                })?;
            s.enable().map_err(|source| LiveError::Open {
                pmu,
                target: describe(),
                source,
            })?;
            samplers.push(s);
        }
        Ok(LiveSampler {
            pmu,
            sample_type,
            samplers,
            stats: LiveStats::default(),
        })
    }

    fn event(sys_root: &Path, pmu: HwPmu, cfg: LiveConfig) -> Result<(Dynamic, u64), LiveError> {
        let base = bits::TID | bits::TIME | bits::CPU | bits::ADDR;
        let unavailable = |what: String| LiveError::Unavailable(what);
        match pmu {
            HwPmu::AmdIbsOp => {
                let info = read_pmu(sys_root, "ibs_op")
                    .ok_or_else(|| unavailable(format!("no {PMU_DEVICES}/ibs_op")))?;
                let mut b = Dynamic::builder(&info.dir)
                    .map_err(|e| unavailable(format!("{}: {e}", info.dir.display())))?;
                if cfg.l3_miss_only && info.formats.iter().any(|f| f == "l3missonly") {
                    b.field("l3missonly", 1)
                        .map_err(|e| unavailable(format!("ibs_op l3missonly: {e}")))?;
                }
                let ev = b
                    .build()
                    .map_err(|e| unavailable(format!("ibs_op event: {e}")))?;
                Ok((ev, base | bits::RAW))
            }
            HwPmu::IntelPebs => {
                for name in PEBS_PMUS {
                    let Some(info) = read_pmu(sys_root, name) else {
                        continue;
                    };
                    if !info.dir.join("events/mem-loads").exists() {
                        continue;
                    }
                    let mut b = Dynamic::builder(&info.dir)
                        .map_err(|e| unavailable(format!("{}: {e}", info.dir.display())))?;
                    b.event("mem-loads")
                        .map_err(|e| unavailable(format!("{name}/mem-loads: {e}")))?;
                    b.field("ldlat", cfg.ldlat)
                        .map_err(|e| unavailable(format!("{name} ldlat: {e}")))?;
                    let ev = b
                        .build()
                        .map_err(|e| unavailable(format!("{name}/mem-loads: {e}")))?;
                    return Ok((ev, base | bits::WEIGHT_STRUCT | bits::DATA_SRC));
                }
                Err(unavailable(format!(
                    "no cpu/events/mem-loads under {PMU_DEVICES}"
                )))
            }
        }
    }

    /// Moves up to `max` decoded samples from the ring buffers into `out`; returns how many.
    pub fn drain(&mut self, max: usize, out: &mut Vec<MemSample>) -> usize {
        let mut n = 0;
        for s in &mut self.samplers {
            while n < max {
                let Some(rec) = s.next_record() else { break };
                match rec.ty() {
                    PERF_RECORD_SAMPLE => {
                        let body = rec.to_contiguous();
                        let m = parse_sample(&body, self.sample_type)
                            .ok()
                            .and_then(|r| match self.pmu {
                                HwPmu::AmdIbsOp => MemSample::from_ibs(&r),
                                HwPmu::IntelPebs => MemSample::from_data_src(&r),
                            });
                        match m {
                            Some(m) => {
                                out.push(m);
                                n += 1;
                                self.stats.samples += 1;
                            }
                            None => self.stats.undecodable += 1,
                        }
                    }
                    PERF_RECORD_LOST => {
                        // struct { u64 id; u64 lost; }
                        let body = rec.to_contiguous();
                        if let Some(b) = body.get(8..16) {
                            let mut w = [0u8; 8];
                            w.copy_from_slice(b);
                            self.stats.lost += u64::from_ne_bytes(w);
                        }
                    }
                    _ => {}
                }
            }
        }
        n
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> LiveStats {
        self.stats
    }

    /// Number of open events.
    #[must_use]
    pub fn events(&self) -> usize {
        self.samplers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_unavailable_without_pmu() {
        let t = tempfile::tempdir().unwrap();
        // Permitted (paranoid -1) but no PMU in the tree.
        std::fs::create_dir_all(t.path().join("proc/sys/kernel")).unwrap();
        std::fs::write(t.path().join("proc/sys/kernel/perf_event_paranoid"), "-1\n").unwrap();
        for pmu in [HwPmu::AmdIbsOp, HwPmu::IntelPebs] {
            let e = LiveSampler::open(
                &t.path().join("sys"),
                &t.path().join("proc"),
                pmu,
                &Target::Cpus(vec![0]),
                LiveConfig::default(),
            )
            .unwrap_err();
            assert!(matches!(e, LiveError::Unavailable(_)), "{e}");
            assert!(e.to_string().starts_with("unavailable: no "), "{e}");
        }
    }

    #[test]
    fn reports_unavailable_without_permission() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("proc/sys/kernel")).unwrap();
        std::fs::write(t.path().join("proc/sys/kernel/perf_event_paranoid"), "3\n").unwrap();
        let e = LiveSampler::open(
            &t.path().join("sys"),
            &t.path().join("proc"),
            HwPmu::IntelPebs,
            &Target::Pids(vec![1]),
            LiveConfig::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("perf_event_paranoid=3"), "{e}");
    }

    #[test]
    fn real_machine_reports_a_reason() {
        // Whatever this machine has, opening IBS on CPU 0 either works or says why not.
        match LiveSampler::open(
            Path::new(crate::DEFAULT_SYS_ROOT),
            Path::new(crate::DEFAULT_PROC_ROOT),
            HwPmu::AmdIbsOp,
            &Target::Cpus(vec![0]),
            LiveConfig::default(),
        ) {
            Ok(s) => assert_eq!(s.events(), 1),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}
