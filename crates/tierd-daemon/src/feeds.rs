//! The daemon's hotness feeds: each configured source, started if the machine allows it,
//! behind the daemon's [`Feed`] trait.
//!
//! A source that is configured but unavailable is reported with its reason and skipped; the
//! daemon refuses to start only when no configured source can run.

use std::path::{Path, PathBuf};

use tierd_engine::types::{Nanos, NodeId, Vpn, PAGE_SHIFT};

use crate::config::{DaemonConfig, SourceName as ConfigSource};
use crate::error::{chain, DaemonError};
use crate::marker::{Marker, Stale};
use crate::metrics::{IntervalsSnapshot, SourceSnapshot};
use tierd_linux::read::numa_maps::read_maps;
use tierd_linux::source::damon::{
    self, DamonConfig as DamonSysfsConfig, DamonMonitor, IntervalsGoal, RealFs,
};
use tierd_linux::source::idle::{self, IdleBitmap, IdleTracker, ScanRange};
use tierd_linux::source::perf::live::{HwPmu, LiveConfig, LiveSampler, Target};
use tierd_linux::source::perf::{self, MemSample};
use tierd_linux::source::SourceName;
use tierd_linux::source::{AccessedRange, Feed, IdleRange, SourceError};

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
    /// `sources.damon.max_region_kib` in bytes (0: DAMON's regions as configured).
    region_cap: u64,
    /// `sources.damon.unchecked_max_region_kib` in bytes (0: `region_cap`).
    unchecked_region_cap: u64,
    /// Whether the daemon's access check is on ([`Feed::set_access_check`]).
    access_check: bool,
    /// The marker a restart reads to take this kdamond over.
    marker: Marker,
    /// [`DamonMonitor::on_count`] when the marker was last written.
    marked: u64,
    /// Things survived since the last drain, for the daemon's fault counters.
    events: Vec<&'static str>,
    /// Reads so far, regions of the last one, most regions of one.
    reads: (u64, u64, u64),
    /// The sampling interval's range while active (configured) and while idle (`None`: never
    /// backs off), µs.
    active_range: (u64, u64),
    idle_range: Option<(u64, u64)>,
    /// Reads that fell back from the tracepoint to sysfs.
    trace_fallbacks: u64,
    /// Whether DAMON reports idle regions (idle demotion on at start), and the idle ranges
    /// of the last read (every age: the daemon compares them with the age in force).
    report_idle: bool,
    idle: Vec<IdleRange>,
}

/// The region size DAMON's regions are fitted to: `checked` with the daemon's access check
/// on, `unchecked` (when set) without it. Without the check every page of a region the floors
/// let through moves, so the size of a region is what one mistake costs; with it, a cold page
/// inside a hot region is refused on its own accessed bit and coarser regions (fewer
/// samples for the kdamond) lose nothing. `checked` 0 turns fitting off either way.
fn fitted_cap(checked: u64, unchecked: u64, access_check: bool) -> u64 {
    if access_check || unchecked == 0 || checked == 0 {
        checked
    } else {
        unchecked
    }
}

impl DamonFeed {
    /// Rewrites the marker when the kdamond was turned on again (its thread id changed).
    fn mark(&mut self) {
        if self.mon.on_count() == self.marked {
            return;
        }
        if let Some(lb) = self.mon.left_behind() {
            match self.marker.write(lb) {
                Ok(()) => self.marked = self.mon.on_count(),
                Err(e) => {
                    tracing::warn!(error = %chain(&e), "damon: cannot write the restart marker; a restart after an unclean exit will refuse this kdamond");
                    self.events.push("damon_marker_write");
                    self.marked = self.mon.on_count();
                }
            }
        }
    }
}

impl Feed for DamonFeed {
    fn name(&self) -> &'static str {
        "damon"
    }

    fn set_targets(&mut self, pids: &[u32]) -> Result<(), SourceError> {
        let r = self.mon.set_targets(pids);
        self.mark();
        Ok(r?)
    }

    fn drain_events(&mut self, out: &mut Vec<&'static str>) {
        out.append(&mut self.events);
    }

    fn set_monitored_bytes(&mut self, bytes: u64) {
        self.monitored_bytes = bytes;
        let cap = fitted_cap(
            self.region_cap,
            self.unchecked_region_cap,
            self.access_check,
        );
        match self.mon.fit_regions(bytes, cap) {
            Ok(true) => {
                let (min, max) = self.mon.nr_regions();
                tracing::info!(
                    monitored_mib = bytes >> 20,
                    region_cap_kib = cap >> 10,
                    access_check = self.access_check,
                    min_nr_regions = min,
                    max_nr_regions = max,
                    "damon: regions fitted to the targets' size"
                );
            }
            Ok(false) => {}
            // Typically EINVAL from the commit when a target exited meanwhile; the next
            // refresh tries again.
            Err(e) => {
                tracing::debug!(error = %chain(&e), "damon: cannot fit the regions");
                self.events.push("damon_fit_regions");
            }
        }
    }

    fn set_access_check(&mut self, on: bool) {
        self.access_check = on;
    }

    fn set_pace(&mut self, idle: bool) -> Result<(), SourceError> {
        let Some(idle_range) = self.idle_range else {
            return Ok(());
        };
        let (min, max) = if idle { idle_range } else { self.active_range };
        self.mon.set_sample_range(min, max)?;
        Ok(())
    }

    fn intervals(&self) -> Option<IntervalsSnapshot> {
        let (sample_us, aggr_us) = self.mon.intervals();
        let trace = self.mon.trace_stats();
        let ts = trace.unwrap_or_default();
        Some(IntervalsSnapshot {
            tuning: self.mon.tuning().name().to_string(),
            sample_us,
            aggr_us,
            reads: self.reads.0,
            last_regions: self.reads.1,
            max_regions: self.reads.2,
            read_from: if trace.is_some() {
                "tracepoint".into()
            } else {
                "sysfs".into()
            },
            trace_fallbacks: self.trace_fallbacks,
            trace_partial: ts.partial,
            trace_lost: ts.lost,
            trace_malformed: ts.malformed,
        })
    }

    fn poll(&mut self, now: Nanos, out: &mut Vec<AccessedRange>) -> Result<(), SourceError> {
        // tried_regions only change once per aggregation; reading more often re-reports the
        // same aggregation as new accesses.
        let every = Nanos(self.mon.intervals().1 * 1000).max(self.read_interval);
        if self.last.is_some_and(|t| now.saturating_sub(t) < every) {
            return Ok(());
        }
        let (regions, stats) = self.mon.collect(now)?;
        if stats.stale {
            // The tracepoint had no aggregation finished yet: ask again at the next pass
            // (the pipe is read without blocking, so an early read costs one system call).
            return Ok(());
        }
        self.last = Some(now);
        if stats.trace_fallback {
            self.trace_fallbacks += 1;
            self.events.push("damon_trace_fallback");
        }
        self.reads = (
            self.reads.0 + 1,
            stats.regions,
            self.reads.2.max(stats.regions),
        );
        if stats.kdamond_stopped {
            // Every target exited: DAMON stops by itself (mm/damon/core.c kdamond_fn ends
            // when damon_targets_empty / all targets' processes are gone); the next scope
            // refresh turns it on again with the processes left.
            self.events.push("damon_kdamond_stopped");
        }
        // The daemon reports changes of the intervals (status, metrics, its log).
        self.mon.tune(now, &regions, self.monitored_bytes)?;
        damon::to_ranges(&regions, self.min_nr_accesses, now, out);
        if self.report_idle {
            self.idle.clear();
            damon::idle_ranges(&regions, self.mon.intervals().1, now, &mut self.idle);
        }
        Ok(())
    }

    fn drain_idle(&mut self, out: &mut Vec<IdleRange>) {
        out.append(&mut self.idle);
    }

    fn stop(&mut self) {
        // The kdamond is handed back (on drop as well); only then is the marker removed, so
        // that a kdamond left on is still recognised by the next start.
        match self.mon.stop() {
            Ok(()) => {
                if let Err(e) = self.marker.remove() {
                    tracing::warn!(error = %chain(&e), "damon: cannot remove the restart marker");
                }
            }
            Err(e) => {
                tracing::warn!(error = %chain(&e), "damon: cannot hand the kdamond back; the restart marker stays")
            }
        }
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

    fn set_targets(&mut self, pids: &[u32]) -> Result<(), SourceError> {
        self.pids = pids.to_vec();
        Ok(())
    }

    fn poll(&mut self, now: Nanos, out: &mut Vec<AccessedRange>) -> Result<(), SourceError> {
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
        let scan = self.tracker.scan(&scope, now)?;
        idle::to_ranges(&scan.facts, out);
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

    fn set_targets(&mut self, _pids: &[u32]) -> Result<(), SourceError> {
        // Sampling is system-wide; samples of processes out of scope are dropped by the
        // backend, which only looks up pages of processes in scope.
        Ok(())
    }

    fn poll(&mut self, now: Nanos, out: &mut Vec<AccessedRange>) -> Result<(), SourceError> {
        self.buf.clear();
        self.sampler.drain(1 << 16, &mut self.buf);
        let cpu_node = &self.cpu_node;
        perf::to_ranges(
            &self.buf,
            |cpu| {
                usize::try_from(cpu)
                    .ok()
                    .and_then(|c| cpu_node.get(c).copied().flatten())
            },
            now,
            out,
        );
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
                let marker = Marker::new(&cfg.daemon.state_dir, proc);
                let left = match marker.left_behind() {
                    Ok(lb) => Some(lb),
                    Err(Stale::Absent) => None,
                    Err(why) => {
                        tracing::info!(marker = %marker.path().display(), ?why, "damon: restart marker not used");
                        None
                    }
                };
                let probe = damon::probe(sys, proc);
                // A kdamond a previous tierd left on makes the probe say "busy"; the marker
                // says whose it is, and take_over checks its thread id.
                if !probe.available && left.is_none() {
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
                    report_idle: cfg.engine.demotion.idle_after_ms > 0,
                    intervals_goal: (d.intervals_goal_bp > 0).then_some(IntervalsGoal {
                        access_bp: d.intervals_goal_bp,
                        aggrs: d.intervals_goal_aggrs,
                        min_sample_us: d.min_sample_us,
                        max_sample_us: d.max_sample_us,
                    }),
                    ..DamonSysfsConfig::default()
                };
                match DamonMonitor::take_over(RealFs, sys, dc, left) {
                    Ok(mut mon) => {
                        if d.tracepoint {
                            match mon.read_from_trace(sys) {
                                Ok(dir) => tracing::info!(
                                    instance = %dir.display(),
                                    "damon: regions read from the damon_aggregated tracepoint"
                                ),
                                Err(e) => tracing::info!(
                                    reason = %chain(&e),
                                    "damon: regions read through sysfs (tried_regions)"
                                ),
                            }
                        }
                        let reason = if mon.took_over() {
                            // Not the probe's reason: with the old kdamond still on, the
                            // probe said "busy".
                            format!(
                                "{} (vaddr; took over the kdamond of a previous tierd, {})",
                                sys.join(damon::ADMIN_PATH).display(),
                                marker.path().display()
                            )
                        } else {
                            probe.reason
                        };
                        statuses.push(snapshot("damon", true, reason));
                        feeds.push(Box::new(DamonFeed {
                            mon,
                            read_interval: Nanos::from_millis(d.read_interval_ms),
                            min_nr_accesses: u64::from(d.min_nr_accesses),
                            last: None,
                            monitored_bytes: 0,
                            region_cap: d.max_region_kib << 10,
                            unchecked_region_cap: d.unchecked_max_region_kib << 10,
                            // The backend says, before the first refresh fits the regions.
                            access_check: true,
                            marker,
                            marked: 0,
                            events: Vec::new(),
                            reads: (0, 0, 0),
                            // Without a goal the intervals are fixed at sample_us.
                            active_range: if d.intervals_goal_bp > 0 {
                                (d.min_sample_us, d.max_sample_us)
                            } else {
                                (d.sample_us, d.sample_us)
                            },
                            idle_range: (d.idle_min_sample_us > 0)
                                .then_some((d.idle_min_sample_us, d.idle_max_sample_us)),
                            trace_fallbacks: 0,
                            report_idle: cfg.engine.demotion.idle_after_ms > 0,
                            idle: Vec::new(),
                        }));
                    }
                    Err(e) => statuses.push(snapshot("damon", false, chain(&e))),
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
                    Err(e) => statuses.push(snapshot("idle", false, chain(&e))),
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
                        Err(e) => statuses.push(snapshot(&name, false, chain(&e))),
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

#[cfg(test)]
mod tests {
    use super::fitted_cap;

    #[test]
    fn regions_are_fitted_finer_only_without_the_access_check() {
        let (checked, unchecked) = (2048 << 10, 512 << 10);
        assert_eq!(fitted_cap(checked, unchecked, true), checked);
        assert_eq!(fitted_cap(checked, unchecked, false), unchecked);
        // unchecked 0: the one cap either way; checked 0 turns fitting off either way.
        assert_eq!(fitted_cap(checked, 0, false), checked);
        assert_eq!(fitted_cap(0, 0, false), 0);
        assert_eq!(fitted_cap(0, unchecked, false), 0);
    }
}
