//! The daemon's hotness feeds: each configured source, started if the machine allows it,
//! behind the daemon's [`Feed`] trait.
//!
//! A source that is configured but unavailable is reported with its reason and skipped; the
//! daemon refuses to start only when no configured source can run.

use std::path::{Path, PathBuf};

use tierd_engine::types::{Nanos, NodeId, Vpn, PAGE_SHIFT};
use tierd_engine::SourceKind;

use crate::config::{DaemonConfig, SourceName as ConfigSource};
use crate::daemon::{AccessedRange, DaemonError, Feed};
use crate::metrics::{IntervalsSnapshot, SourceSnapshot};
use tierd_linux::read::numa_maps::read_maps;
use tierd_linux::source::damon::{
    self, DamonConfig as DamonSysfsConfig, DamonMonitor, IntervalsGoal, RealFs,
};
use tierd_linux::source::idle::{self, IdleBitmap, IdleTracker, ScanRange};
use tierd_linux::source::perf::live::{HwPmu, LiveConfig, LiveSampler, Target};
use tierd_linux::source::perf::{self, MemSample};
use tierd_linux::source::SourceName;

/// DAMON regions as accessed ranges, read once per aggregation interval.
struct DamonFeed {
    mon: DamonMonitor<RealFs>,
    /// The configured read interval: regions are read at most this often, and at most once
    /// per aggregation interval (which tuning changes).
    read_interval: Nanos,
    min_nr_accesses: u64,
    last: Option<Nanos>,
    /// The targets' mapped bytes, DAMON vaddr's monitored size (for the tuning score).
    monitored_bytes: u64,
}

impl Feed for DamonFeed {
    fn name(&self) -> &'static str {
        "damon"
    }

    fn set_targets(&mut self, pids: &[u32]) -> Result<(), DaemonError> {
        self.mon.set_targets(pids).map_err(|e| DaemonError::Source {
            name: "damon",
            reason: e.to_string(),
        })
    }

    fn set_monitored_bytes(&mut self, bytes: u64) {
        self.monitored_bytes = bytes;
    }

    fn intervals(&self) -> Option<IntervalsSnapshot> {
        let (sample_us, aggr_us) = self.mon.intervals();
        Some(IntervalsSnapshot {
            tuning: self.mon.tuning().name().to_string(),
            sample_us,
            aggr_us,
        })
    }

    fn poll(&mut self, now: Nanos, out: &mut Vec<AccessedRange>) -> Result<(), DaemonError> {
        // tried_regions only change once per aggregation; reading more often re-reports the
        // same aggregation as new accesses.
        let every = Nanos(self.mon.intervals().1 * 1000).max(self.read_interval);
        if self.last.is_some_and(|t| now.saturating_sub(t) < every) {
            return Ok(());
        }
        self.last = Some(now);
        let (mut regions, _) = self.mon.collect(now).map_err(|e| DaemonError::Source {
            name: "damon",
            reason: e.to_string(),
        })?;
        // The daemon reports changes of the intervals (status, metrics, its log).
        self.mon
            .tune(now, &regions, self.monitored_bytes)
            .map_err(|e| DaemonError::Source {
                name: "damon",
                reason: e.to_string(),
            })?;
        // Hottest first: the daemon's per-pass page budget is taken from the front.
        regions.sort_by(|a, b| {
            b.nr_accesses
                .cmp(&a.nr_accesses)
                .then(b.age.cmp(&a.age))
                .then(a.pid.cmp(&b.pid))
                .then(a.start.cmp(&b.start))
        });
        for r in regions
            .iter()
            .filter(|r| r.nr_accesses >= self.min_nr_accesses && r.end > r.start)
        {
            let start = r.start >> PAGE_SHIFT;
            let end = r.end.div_ceil(1 << PAGE_SHIFT);
            out.push(AccessedRange {
                pid: r.pid,
                start: Vpn(start),
                nr_pages: end - start,
                time: now,
                kind: SourceKind::AccessedBitScan,
                accessing_node: None,
                nr_accesses: u32::try_from(r.nr_accesses).unwrap_or(u32::MAX),
            });
        }
        Ok(())
    }

    fn stop(&mut self) {
        // Best effort: the kdamond is handed back on drop as well.
        let _ = self.mon.stop();
    }
}

/// Idle page tracking over the anonymous writable mappings of the scope.
struct IdleFeed {
    proc_root: PathBuf,
    tracker: IdleTracker,
    pids: Vec<u32>,
    interval: Nanos,
    last: Option<Nanos>,
}

impl Feed for IdleFeed {
    fn name(&self) -> &'static str {
        "idle"
    }

    fn set_targets(&mut self, pids: &[u32]) -> Result<(), DaemonError> {
        self.pids = pids.to_vec();
        Ok(())
    }

    fn poll(&mut self, now: Nanos, out: &mut Vec<AccessedRange>) -> Result<(), DaemonError> {
        if self
            .last
            .is_some_and(|t| now.saturating_sub(t) < self.interval)
        {
            return Ok(());
        }
        self.last = Some(now);
        let mut scope = Vec::new();
        for &pid in &self.pids {
            // A process that exited since the last refresh simply has no ranges.
            let Ok(maps) = read_maps(&self.proc_root, pid) else {
                continue;
            };
            for m in maps.iter().filter(|m| m.perms.starts_with("rw")) {
                let start = m.start >> PAGE_SHIFT;
                let end = m.end >> PAGE_SHIFT;
                if end > start {
                    scope.push(ScanRange {
                        pid,
                        start: Vpn(start),
                        pages: end - start,
                    });
                }
            }
        }
        let scan = self
            .tracker
            .scan(&scope, now)
            .map_err(|e| DaemonError::Source {
                name: "idle",
                reason: e.to_string(),
            })?;
        out.extend(scan.facts.iter().map(|f| AccessedRange {
            pid: f.pid,
            start: f.vpn,
            nr_pages: 1,
            time: f.time,
            kind: SourceKind::AccessedBitScan,
            accessing_node: None,
            nr_accesses: 0,
        }));
        Ok(())
    }

    fn stop(&mut self) {}
}

/// Hardware samples: each sampled load or store names its page and, through the CPU, the
/// accessing node.
struct PerfFeed {
    sampler: LiveSampler,
    cpu_node: Vec<Option<NodeId>>,
    buf: Vec<MemSample>,
}

impl Feed for PerfFeed {
    fn name(&self) -> &'static str {
        "perf"
    }

    fn set_targets(&mut self, _pids: &[u32]) -> Result<(), DaemonError> {
        // Sampling is system-wide; samples of processes out of scope are dropped by the
        // backend, which only looks up pages of processes in scope.
        Ok(())
    }

    fn poll(&mut self, now: Nanos, out: &mut Vec<AccessedRange>) -> Result<(), DaemonError> {
        self.buf.clear();
        self.sampler.drain(1 << 16, &mut self.buf);
        for s in &self.buf {
            let cpu = usize::try_from(s.cpu).unwrap_or(usize::MAX);
            out.push(AccessedRange {
                pid: s.pid,
                start: Vpn(s.vaddr >> PAGE_SHIFT),
                nr_pages: 1,
                // The perf clock is not the daemon's clock; the engine wants its own time.
                time: now,
                kind: SourceKind::HwSample,
                accessing_node: self.cpu_node.get(cpu).copied().flatten(),
                nr_accesses: 0,
            });
        }
        Ok(())
    }

    fn stop(&mut self) {}
}

/// The running feeds and one status line per configured source.
pub type StartedFeeds = (Vec<Box<dyn Feed>>, Vec<SourceSnapshot>);

fn snapshot(name: &str, available: bool, reason: impl Into<String>) -> SourceSnapshot {
    SourceSnapshot {
        name: name.to_string(),
        available,
        reason: reason.into(),
        intervals: None,
    }
}

/// Starts the configured sources that the machine allows. Returns the running feeds and a
/// status line per configured source (and per PMU probed for `perf`).
///
/// # Errors
/// [`DaemonError::NoSource`] when none of the configured sources can run.
pub fn start_feeds(
    cfg: &DaemonConfig,
    cpu_node: &[Option<NodeId>],
) -> Result<StartedFeeds, DaemonError> {
    let sys: &Path = &cfg.system.sys_root;
    let proc: &Path = &cfg.system.proc_root;
    let mut feeds: Vec<Box<dyn Feed>> = Vec::new();
    let mut statuses = Vec::new();
    for src in &cfg.sources.enabled {
        match src {
            ConfigSource::Damon => {
                let probe = damon::probe(sys, proc);
                if !probe.available {
                    statuses.push(snapshot("damon", false, probe.reason));
                    continue;
                }
                let d = cfg.sources.damon;
                let dc = DamonSysfsConfig {
                    sample_us: d.sample_us,
                    aggr_us: d.aggr_us,
                    update_us: d.update_us,
                    min_regions: d.min_nr_regions,
                    max_regions: d.max_nr_regions,
                    min_nr_accesses: u64::from(d.min_nr_accesses),
                    intervals_goal: (d.intervals_goal_bp > 0).then_some(IntervalsGoal {
                        access_bp: d.intervals_goal_bp,
                        aggrs: d.intervals_goal_aggrs,
                        min_sample_us: d.min_sample_us,
                        max_sample_us: d.max_sample_us,
                    }),
                    ..DamonSysfsConfig::default()
                };
                match DamonMonitor::new(RealFs, sys, dc) {
                    Ok(mon) => {
                        statuses.push(snapshot("damon", true, probe.reason));
                        feeds.push(Box::new(DamonFeed {
                            mon,
                            read_interval: Nanos::from_millis(d.read_interval_ms),
                            min_nr_accesses: u64::from(d.min_nr_accesses),
                            last: None,
                            monitored_bytes: 0,
                        }));
                    }
                    Err(e) => statuses.push(snapshot("damon", false, e.to_string())),
                }
            }
            ConfigSource::Idle => {
                let probe = idle::probe(sys, proc);
                if !probe.available {
                    statuses.push(snapshot("idle", false, probe.reason));
                    continue;
                }
                match IdleBitmap::open(sys) {
                    Ok(bitmap) => {
                        statuses.push(snapshot("idle", true, probe.reason));
                        feeds.push(Box::new(IdleFeed {
                            proc_root: proc.to_path_buf(),
                            tracker: IdleTracker::new(proc, bitmap),
                            pids: Vec::new(),
                            interval: Nanos::from_millis(cfg.sources.idle.interval_ms),
                            last: None,
                        }));
                    }
                    Err(e) => statuses.push(snapshot("idle", false, e.to_string())),
                }
            }
            ConfigSource::Perf => {
                let probes = perf::probe(sys, proc);
                let mut started = false;
                for p in &probes {
                    let pmu = match p.kind {
                        SourceName::AmdIbsOp => Some(HwPmu::AmdIbsOp),
                        SourceName::IntelPebs => Some(HwPmu::IntelPebs),
                        // SPE delivers through the AUX area; its decoder is tested on
                        // recorded packets, live SPE sampling is not wired yet.
                        _ => None,
                    };
                    let name = format!("perf/{}", p.kind.name());
                    let (Some(pmu), true, false) = (pmu, p.available, started) else {
                        statuses.push(snapshot(&name, false, p.reason.clone()));
                        continue;
                    };
                    let cpus: Vec<usize> = (0..cpu_node.len()).collect();
                    let lc = LiveConfig {
                        period: cfg.sources.perf.period,
                        l3_miss_only: cfg.sources.perf.l3_miss_only,
                        ..LiveConfig::default()
                    };
                    match LiveSampler::open(sys, proc, pmu, &Target::Cpus(cpus), lc) {
                        Ok(sampler) => {
                            started = true;
                            statuses.push(snapshot(&name, true, p.reason.clone()));
                            feeds.push(Box::new(PerfFeed {
                                sampler,
                                cpu_node: cpu_node.to_vec(),
                                buf: Vec::new(),
                            }));
                        }
                        Err(e) => statuses.push(snapshot(&name, false, e.to_string())),
                    }
                }
                if probes.is_empty() {
                    statuses.push(snapshot("perf", false, "no sampling PMU found"));
                }
            }
        }
    }
    if feeds.is_empty() {
        let why: Vec<String> = statuses
            .iter()
            .map(|s| format!("{}: {}", s.name, s.reason))
            .collect();
        return Err(DaemonError::NoSource(why.join("; ")));
    }
    Ok((feeds, statuses))
}
