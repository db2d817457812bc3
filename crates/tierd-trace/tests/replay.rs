//! Record a run of the engine on the synthetic machine, read the files back, replay them:
//! with the recorded configuration every decision is the recorded one; with another, they
//! differ and the replay says where first.
#![allow(clippy::tests_outside_test_module, clippy::unwrap_used)]

use tierd_engine::{Backend, EngineConfig};
use tierd_trace::files::Limits;
use tierd_trace::synth::{record_synthetic, SynthBackend};
use tierd_trace::{passes, read, replay, Record};

fn record(dir: &std::path::Path, limits: Limits) -> u64 {
    let mut b = SynthBackend::new(3, 4096, 4096);
    record_synthetic(&mut b, EngineConfig::default(), 40, 100, dir, limits).unwrap()
}

#[test]
fn replay_with_the_recorded_config_makes_the_recorded_decisions() {
    let d = tempfile::tempdir().unwrap();
    let moved = record(d.path(), Limits::default());
    assert!(moved > 1000, "the run must decide something: {moved}");
    let t = read(d.path()).unwrap();
    assert!(t.complete);
    let batches = t
        .records
        .iter()
        .filter(|r| matches!(r, Record::Batch(_)))
        .count();
    let cfg = t.header.config.clone();
    let r = replay(&t.header, passes(t.records).unwrap(), cfg).unwrap();
    assert!(!r.what_if);
    assert_eq!(r.recorded, batches);
    assert_eq!((r.same, r.replayed), (batches, batches), "{}", r.verdict());
    assert!(r.identical(), "{}", r.verdict());
    assert_eq!(
        r.verdict(),
        format!("decisions: {batches} of {batches} same as recorded ({batches} replayed)")
    );
    assert_eq!(r.passes, 401);
    assert!(r.promoted_pages > 0);
}

#[test]
fn replay_with_another_config_diverges_and_says_where() {
    let d = tempfile::tempdir().unwrap();
    record(d.path(), Limits::default());
    let t = read(d.path()).unwrap();
    let cfg = EngineConfig {
        promote_rate_limit_mbps: 1,
        ..t.header.config.clone()
    };
    let r = replay(&t.header, passes(t.records).unwrap(), cfg).unwrap();
    assert!(r.what_if);
    let d = r.first_divergence.clone().unwrap();
    assert!(
        r.verdict().contains("first divergence at"),
        "{}",
        r.verdict()
    );
    assert!(d.pass > 0);
    assert!(r.same < r.recorded);
    // Placement over time: the fast node fills as the replay promotes.
    let fast: Vec<u64> = r.placement.iter().map(|p| p.used[0].1).collect();
    assert!(fast.last() > fast.first());
}

#[test]
fn a_rotated_trace_replays_what_is_left_and_says_it_is_incomplete() {
    let d = tempfile::tempdir().unwrap();
    record(
        d.path(),
        Limits {
            max_bytes: 64 << 10,
            max_files: 4,
        },
    );
    let t = read(d.path()).unwrap();
    assert!(!t.complete);
    assert_eq!(t.files.len(), 4);
    assert!(t.header.seq > 0);
}

/// The small trace committed as the fuzz target's seed (fuzz/regressions/trace) still reads
/// and replays to its recorded decisions: a change of the format that forgot to bump its
/// version fails here. `TIERD_REGEN_TRACE=1` writes it anew (after a version bump).
#[test]
fn the_committed_trace_reads_and_replays_identically() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions/trace/synthetic-2s.trace");
    if std::env::var_os("TIERD_REGEN_TRACE").is_some() {
        let d = tempfile::tempdir().unwrap();
        let mut b = SynthBackend::new(1, 256, 64);
        record_synthetic(
            &mut b,
            EngineConfig::default(),
            2,
            100,
            d.path(),
            Limits::default(),
        )
        .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::copy(d.path().join("trace.0"), &path).unwrap();
    }
    let t = read(&path).unwrap();
    let cfg = t.header.config.clone();
    let r = replay(&t.header, passes(t.records).unwrap(), cfg).unwrap();
    assert!(r.recorded > 0 && r.identical(), "{}", r.verdict());
}

/// A backend whose calls fail now and then as a whole (a sysfs file gone, a syscall refused):
/// `usage` every 13th pass, `migrate` every 5th call.
struct Flaky {
    inner: SynthBackend,
    passes: u64,
    calls: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("flaky")]
struct Flake;

impl tierd_engine::Backend for Flaky {
    type Error = Flake;
    fn drain_observations(
        &mut self,
        now: tierd_engine::types::Nanos,
        out: &mut Vec<tierd_engine::Observation>,
    ) -> Result<(), Flake> {
        self.inner.drain_observations(now, out).map_err(|_| Flake)
    }
    fn drain_owner_updates(
        &mut self,
        out: &mut Vec<tierd_engine::OwnerUpdate>,
    ) -> Result<(), Flake> {
        self.passes += 1;
        self.inner.drain_owner_updates(out).map_err(|_| Flake)
    }
    fn usage(
        &mut self,
        now: tierd_engine::types::Nanos,
    ) -> Result<tierd_engine::SystemUsage, Flake> {
        if self.passes.is_multiple_of(13) {
            return Err(Flake);
        }
        self.inner.usage(now).map_err(|_| Flake)
    }
    fn migrate(
        &mut self,
        now: tierd_engine::types::Nanos,
        batch: &tierd_engine::MigrationBatch,
    ) -> Result<tierd_engine::MigrationReport, Flake> {
        self.calls += 1;
        if self.calls.is_multiple_of(5) {
            return Err(Flake);
        }
        self.inner.migrate(now, batch).map_err(|_| Flake)
    }
}

/// Calls that failed in the recorded run fail at the same place in the replay, so the engine
/// ends those passes as the recorded one did and the decisions stay the same.
#[test]
fn backend_failures_replay_as_they_happened() {
    use tierd_engine::types::Nanos;
    use tierd_trace::format::{decode, encode_header};
    let mut b = Flaky {
        inner: SynthBackend::new(2, 4096, 4096),
        passes: 0,
        calls: 0,
    };
    let cfg = EngineConfig::default();
    let topo = tierd_engine::topology::dram_cxl(b.inner.capacity[0], b.inner.capacity[1]).unwrap();
    let header = tierd_trace::Header::new(cfg.clone(), &topo, 0, 0);
    let mut engine = tierd_engine::Engine::new(cfg.clone(), topo).unwrap();
    let mut bufs = tierd_engine::StepBuffers::default();
    let mut file = encode_header(&header);
    let mut failed = 0;
    for pass in 0..300 {
        let now = Nanos::from_millis(pass * 100);
        let mut rec = tierd_trace::Recorder::pass(&mut b, &mut file, now);
        failed += usize::from(tierd_engine::step(&mut engine, &mut rec, now, &mut bufs).is_err());
    }
    assert!(failed > 20, "{failed} passes failed");
    let (h, records) = decode(&file).unwrap();
    let orphans = records
        .windows(2)
        .filter(|w| matches!(w[0], Record::Batch(_)) && !matches!(w[1], Record::Report(_)))
        .count();
    assert!(orphans > 0, "some batches failed");
    let r = replay(&h, passes(records).unwrap(), cfg).unwrap();
    assert!(r.identical(), "{}", r.verdict());
    assert!(r.recorded > 50);
}

/// Runs an engine built from `config` on `b` (a machine of `capacity`) for 40 s of passes
/// 100 ms apart, recording into `dir`; `before(t_ms, engine, writer)` runs before each pass
/// (a reload). Returns the engine.
fn record_40s<B: Backend<Error = tierd_trace::synth::Never>>(
    b: &mut B,
    capacity: [tierd_engine::types::Bytes; 2],
    config: EngineConfig,
    dir: &std::path::Path,
    mut before: impl FnMut(u64, &mut tierd_engine::Engine, &mut tierd_trace::files::TraceWriter),
) -> tierd_engine::Engine {
    use tierd_engine::types::Nanos;
    let topo = tierd_engine::topology::dram_cxl(capacity[0], capacity[1]).unwrap();
    let header = tierd_trace::format::Header::new(config.clone(), &topo, b.join_pages(), 0);
    let mut engine = tierd_engine::Engine::new(config, topo).unwrap();
    let mut w = tierd_trace::files::TraceWriter::create(dir, header, Limits::default()).unwrap();
    let (mut bufs, mut buf) = (tierd_engine::StepBuffers::default(), Vec::new());
    for t in (0..=40_000).step_by(100) {
        before(t, &mut engine, &mut w);
        buf.clear();
        let now = Nanos::from_millis(t);
        let mut rec = tierd_trace::record::Recorder::pass(b, &mut buf, now);
        let Ok(_) = tierd_engine::step(&mut engine, &mut rec, now, &mut bufs);
        w.append(&buf).unwrap();
    }
    engine
}

/// A run reconfigured mid-way (a SIGHUP reload: the rate limit cut to 1 MB/s at 20 s) is
/// recorded with a `Config` record; replayed with the recorded configuration, the engine is
/// reconfigured at the same point and every decision is the recorded one. Without the record
/// the replay diverges after it, which is what the record is for.
#[test]
fn a_recorded_reconfiguration_is_replayed_where_it_happened() {
    let d = tempfile::tempdir().unwrap();
    let mut b = SynthBackend::new(3, 4096, 4096);
    let config = EngineConfig::default();
    let slow = EngineConfig {
        promote_rate_limit_mbps: 1,
        ..config.clone()
    };
    let capacity = b.capacity;
    record_40s(&mut b, capacity, config, d.path(), |t, engine, w| {
        if t == 20_000 {
            engine.reconfigure(slow.clone()).unwrap();
            w.reconfigured(&slow).unwrap();
        }
    });
    let t = read(d.path()).unwrap();
    assert_eq!(
        t.records
            .iter()
            .filter(|r| matches!(r, Record::Config(_)))
            .count(),
        1
    );
    let cfg = t.header.config.clone();
    let r = replay(&t.header, passes(t.records.clone()).unwrap(), cfg.clone()).unwrap();
    assert_eq!(r.reconfigured, 1);
    assert!(r.identical(), "{}", r.verdict());
    let without: Vec<Record> = t
        .records
        .into_iter()
        .filter(|r| !matches!(r, Record::Config(_)))
        .collect();
    let r = replay(&t.header, passes(without).unwrap(), cfg).unwrap();
    assert!(
        !r.identical(),
        "the reload changed decisions: {}",
        r.verdict()
    );
}

/// The synthetic machine with an idle source: a parked process (space 99, 2000 pages)
/// whose pages sit on the fast node untouched since before the run, which no access source
/// ever reports; every pass its pages still there are reported idle since 0 (as DAMON's
/// zero-access regions would, located).
struct WithIdle {
    inner: SynthBackend,
    parked: std::collections::BTreeSet<u64>,
}

impl Backend for WithIdle {
    type Error = tierd_trace::synth::Never;
    fn drain_observations(
        &mut self,
        now: tierd_engine::types::Nanos,
        out: &mut Vec<tierd_engine::Observation>,
    ) -> Result<(), Self::Error> {
        self.inner.drain_observations(now, out)
    }
    fn drain_idle(
        &mut self,
        _now: tierd_engine::types::Nanos,
        out: &mut Vec<tierd_engine::IdleObservation>,
    ) -> Result<(), Self::Error> {
        use tierd_engine::types::{Nanos, NodeId, PageRef, SpaceId, Vpn};
        out.extend(self.parked.iter().map(|&v| tierd_engine::IdleObservation {
            page: PageRef::base(SpaceId(99), Vpn(v)),
            page_node: NodeId(0),
            idle_since: Nanos(0),
        }));
        Ok(())
    }
    fn drain_owner_updates(
        &mut self,
        out: &mut Vec<tierd_engine::OwnerUpdate>,
    ) -> Result<(), Self::Error> {
        self.inner.drain_owner_updates(out)
    }
    fn usage(
        &mut self,
        now: tierd_engine::types::Nanos,
    ) -> Result<tierd_engine::plan::SystemUsage, Self::Error> {
        self.inner.usage(now)
    }
    fn migrate(
        &mut self,
        now: tierd_engine::types::Nanos,
        batch: &tierd_engine::plan::MigrationBatch,
    ) -> Result<tierd_engine::plan::MigrationReport, Self::Error> {
        let r = self.inner.migrate(now, batch)?;
        for p in &r.results {
            if p.page.space.0 == 99
                && matches!(p.outcome, tierd_engine::plan::MoveOutcome::Moved(_))
            {
                self.parked.remove(&p.page.vpn.0);
            }
        }
        Ok(r)
    }
}

/// Idle facts are recorded (`Record::Idle`) and replayed: with idle demotion on, a run whose
/// backend reports idle pages no access source saw replays to the recorded decisions, idle
/// demotions included; without the records the replay's demoter does not know those pages
/// and diverges.
#[test]
fn recorded_idle_facts_replay_to_the_recorded_idle_demotions() {
    let d = tempfile::tempdir().unwrap();
    let mut b = WithIdle {
        inner: SynthBackend::new(3, 4096, 8192),
        parked: (0..2000).collect(),
    };
    let config = EngineConfig {
        demotion: tierd_engine::config::DemotionConfig {
            idle_after_ms: 5_000,
            ..tierd_engine::config::DemotionConfig::default()
        },
        ..EngineConfig::default()
    };
    let capacity = b.inner.capacity;
    let engine = record_40s(&mut b, capacity, config, d.path(), |_, _, _| {});
    let idle_demoted = engine.stats().engine.pgdemote_idle;
    assert!(
        idle_demoted > 1000,
        "the run must idle-demote: {idle_demoted}"
    );
    assert!(
        b.parked.len() < 1000,
        "{} parked pages left",
        b.parked.len()
    );
    let t = read(d.path()).unwrap();
    assert!(t.records.iter().any(|r| matches!(r, Record::Idle(_))));
    let cfg = t.header.config.clone();
    let r = replay(&t.header, passes(t.records.clone()).unwrap(), cfg.clone()).unwrap();
    assert!(r.identical(), "{}", r.verdict());
    let without: Vec<Record> = t
        .records
        .into_iter()
        .filter(|r| !matches!(r, Record::Idle(_)))
        .collect();
    let r = replay(&t.header, passes(without).unwrap(), cfg).unwrap();
    assert!(
        !r.identical(),
        "idle facts changed decisions: {}",
        r.verdict()
    );
}
