//! Replay: a recorded run's inputs through a fresh engine, with the recorded configuration or
//! another, against [`ReplayBackend`].
//!
//! With the recorded configuration the engine is the same deterministic function of the same
//! inputs, so it must make the same decisions: the backend hands back the recorded reports for
//! batches equal to the recorded ones, and [`Replay::same`] counts them. The first batch that
//! differs is the divergence ([`Replay::first_divergence`]).
//!
//! With another configuration (or after a divergence) the decisions differ, and what the
//! machine would then have looked like is modelled from the trace ("what-if"):
//! - every batch moves all its pages to its target (the recorded failure rate is not
//!   modelled);
//! - the free memory the engine reads is the recorded free memory corrected by the difference
//!   between the replay's moves and the recorded ones;
//! - an observation of a page the replay placed elsewhere than the recorded run says it is on
//!   the replay's node (the access itself is taken as it was recorded).
//!
//! Cgroup fast-tier usage is taken as recorded. The model holds while the replay's
//! placement stays near the recorded one; far from it, the recorded accesses (which depend on
//! where pages were) are only an approximation.

use rustc_hash::FxHashMap;
use serde::Serialize;
use tierd_engine::plan::{
    MigrationBatch, MigrationKind, MigrationReport, MoveOutcome, PlannedMove, SystemUsage,
};
use tierd_engine::types::{Bytes, CgroupId, Nanos, NodeId, PageKey};
use tierd_engine::{
    Backend, Engine, EngineConfig, IdleObservation, Observation, OwnerUpdate, StepBuffers,
};

use crate::format::{Header, Record, TraceError};

/// One pass of a trace, as recorded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pass {
    /// The pass's time.
    pub now: Nanos,
    /// The owner updates, if the call returned.
    pub owners: Option<Vec<OwnerUpdate>>,
    /// The observations, if the call returned.
    pub observations: Option<Vec<Observation>>,
    /// The idle facts (empty: none were recorded).
    pub idle: Vec<IdleObservation>,
    /// The usage, if the call returned.
    pub usage: Option<SystemUsage>,
    /// The batches asked for and their reports (none where the call failed).
    pub moves: Vec<(MigrationBatch, Option<MigrationReport>)>,
    /// The engine configuration (JSON) the recorded run reloaded to just before this pass.
    pub config: Option<String>,
}

/// Groups records into passes.
///
/// # Errors
/// [`ReplayError::Order`] for records outside a pass or out of order (a hand-made or damaged
/// file; the recorder never writes them).
pub fn passes(records: impl IntoIterator<Item = Record>) -> Result<Vec<Pass>, ReplayError> {
    let mut out: Vec<Pass> = Vec::new();
    // A reconfiguration is recorded between passes: it belongs to the pass after it.
    let mut config: Option<String> = None;
    for (i, r) in records.into_iter().enumerate() {
        if let Record::Pass { now } = r {
            out.push(Pass {
                now,
                config: config.take(),
                ..Pass::default()
            });
            continue;
        }
        if let Record::Config(c) = r {
            config = Some(c);
            continue;
        }
        let Some(p) = out.last_mut() else {
            return Err(ReplayError::Order {
                record: i,
                why: "before the first pass",
            });
        };
        let bad = |why| Err(ReplayError::Order { record: i, why });
        match r {
            Record::Pass { .. } | Record::Config(_) => {}
            Record::Owners(u) if p.owners.is_none() => p.owners = Some(u),
            Record::Observations(o) if p.owners.is_some() && p.observations.is_none() => {
                p.observations = Some(o);
            }
            Record::Idle(f)
                if p.observations.is_some() && p.usage.is_none() && p.idle.is_empty() =>
            {
                p.idle = f;
            }
            Record::Usage(u) if p.observations.is_some() && p.usage.is_none() => {
                p.usage = Some(u);
            }
            Record::Batch(b) if p.usage.is_some() => p.moves.push((b, None)),
            Record::Report(r) => match p.moves.last_mut() {
                Some((_, slot @ None)) => *slot = Some(r),
                _ => return bad("a report without its batch"),
            },
            _ => return bad("out of the order a pass has"),
        }
    }
    Ok(out)
}

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The trace's header is not usable.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The engine refused the configuration.
    #[error("the engine refuses the configuration: {0}")]
    Config(String),
    /// Records in an order the recorder does not write.
    #[error("record {record} is {why}")]
    Order {
        /// Its index in the trace.
        record: usize,
        /// What is wrong.
        why: &'static str,
    },
}

/// The recorded backend failed at this point of the pass; the replay fails the same way.
#[derive(Debug, thiserror::Error)]
#[error("the recorded backend failed here")]
pub struct RecordedFailure;

/// A decision of the replayed engine: one batch it asked to move.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Decision {
    /// When (the pass's time), seconds from the recorded start.
    pub time_s: f64,
    /// Promote or demote.
    pub kind: MigrationKind,
    /// The destination node.
    pub to: NodeId,
    /// The cgroup of its pages.
    pub cgroup: CgroupId,
    /// Base pages.
    pub pages: u64,
    /// The folios, each with the node it was on.
    pub moves: Vec<PlannedMove>,
    /// Whether the recorded run made the same batch at this point.
    pub same_as_recorded: bool,
}

/// Where replay and record first parted.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Divergence {
    /// The pass's time, seconds.
    pub time_s: f64,
    /// The pass's index.
    pub pass: usize,
    /// The migration call within the pass.
    pub call: usize,
    /// The replay's batch there (none: the replay made fewer).
    pub replayed: Option<String>,
    /// The recorded batch there (none: the recorded run made fewer).
    pub recorded: Option<String>,
}

/// Memory used per node after a pass (capacity less free).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Placement {
    /// Seconds from the recorded start.
    pub time_s: f64,
    /// `(node, bytes used)`, by node id.
    pub used: Vec<(NodeId, u64)>,
}

/// What a replay did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Replay {
    /// Passes replayed.
    pub passes: usize,
    /// Whether the configuration differs from the recorded one.
    pub what_if: bool,
    /// Batches the recorded run made.
    pub recorded: usize,
    /// Batches the replay made.
    pub replayed: usize,
    /// Replayed batches equal to the recorded one at the same place.
    pub same: usize,
    /// The first difference, if any.
    pub first_divergence: Option<Divergence>,
    /// Base pages promoted and demoted by the replay.
    pub promoted_pages: u64,
    /// See `promoted_pages`.
    pub demoted_pages: u64,
    /// Every decision, in order.
    pub decisions: Vec<Decision>,
    /// Memory per node over time, one point per pass.
    pub placement: Vec<Placement>,
    /// Reconfigurations (the recorded run's SIGHUP reloads) applied on the way.
    pub reconfigured: usize,
}

impl Replay {
    /// Whether every decision was the recorded one (and there were as many).
    #[must_use]
    pub fn identical(&self) -> bool {
        self.first_divergence.is_none() && self.same == self.recorded
    }

    /// `decisions: N of M same as recorded` and, if any, the first divergence.
    #[must_use]
    pub fn verdict(&self) -> String {
        let mut s = format!(
            "decisions: {} of {} same as recorded ({} replayed)",
            self.same, self.recorded, self.replayed
        );
        if let Some(d) = &self.first_divergence {
            s.push_str(&format!(
                "; first divergence at {:.3} s (pass {}, call {}): replay {}, recorded {}",
                d.time_s,
                d.pass,
                d.call,
                d.replayed.as_deref().unwrap_or("nothing"),
                d.recorded.as_deref().unwrap_or("nothing"),
            ));
        }
        s
    }
}

fn describe(b: &MigrationBatch) -> String {
    let kind = match b.kind {
        MigrationKind::Promote => "promote",
        MigrationKind::Demote => "demote",
    };
    format!(
        "{kind} {} pages to node {} (cgroup {})",
        b.nr_pages().0,
        b.target.0,
        b.cgroup.0
    )
}

/// A [`Backend`] that plays one recorded pass at a time back to the engine and models the
/// placement where the replay's moves differ from the recorded ones (module docs).
#[derive(Debug)]
pub struct ReplayBackend {
    pass: Pass,
    pass_index: usize,
    call: usize,
    join_pages: usize,
    /// Model the machine (what-if) rather than hand back the recorded run.
    modelled: bool,
    /// Replayed batches equal to the recorded one.
    same: usize,
    first_divergence: Option<Divergence>,
    /// Where the replay put a page.
    placed: FxHashMap<PageKey, NodeId>,
    /// Where a page the recorded run moved was before its first recorded move.
    recorded_from: FxHashMap<PageKey, NodeId>,
    /// Replay's free bytes less the recorded free bytes, per node.
    free_delta: FxHashMap<NodeId, i128>,
    decisions: Vec<Decision>,
}

impl ReplayBackend {
    fn new(join_pages: usize, what_if: bool) -> Self {
        ReplayBackend {
            pass: Pass::default(),
            pass_index: 0,
            call: 0,
            join_pages,
            modelled: what_if,
            same: 0,
            first_divergence: None,
            placed: FxHashMap::default(),
            recorded_from: FxHashMap::default(),
            free_delta: FxHashMap::default(),
            decisions: Vec::new(),
        }
    }

    fn begin(&mut self, index: usize, pass: Pass) {
        self.pass = pass;
        self.pass_index = index;
        self.call = 0;
    }

    /// Accounts the recorded batches the replay did not reach, and the recorded moves.
    fn end(&mut self) {
        if self.call < self.pass.moves.len() && self.first_divergence.is_none() {
            self.diverge(None, Some(describe(&self.pass.moves[self.call].0)));
        }
        for (_, report) in &self.pass.moves {
            let Some(report) = report else { continue };
            for r in &report.results {
                if let MoveOutcome::Moved(to) = r.outcome {
                    let key = r.page.key();
                    self.recorded_from.entry(key).or_insert(r.from);
                    let bytes = i128::from(r.page.size.nr_pages().bytes().0);
                    *self.free_delta.entry(r.from).or_default() -= bytes;
                    *self.free_delta.entry(to).or_default() += bytes;
                }
            }
        }
    }

    fn diverge(&mut self, replayed: Option<String>, recorded: Option<String>) {
        if self.first_divergence.is_none() {
            self.first_divergence = Some(Divergence {
                time_s: self.pass.now.as_secs_f64(),
                pass: self.pass_index,
                call: self.call,
                replayed,
                recorded,
            });
        }
        self.modelled = true;
    }

    fn apply(&mut self, report: &MigrationReport) {
        for r in &report.results {
            if let MoveOutcome::Moved(to) = r.outcome {
                self.placed.insert(r.page.key(), to);
                let bytes = i128::from(r.page.size.nr_pages().bytes().0);
                *self.free_delta.entry(r.from).or_default() += bytes;
                *self.free_delta.entry(to).or_default() -= bytes;
            }
        }
    }
}

impl Backend for ReplayBackend {
    type Error = RecordedFailure;

    fn drain_observations(
        &mut self,
        _now: Nanos,
        out: &mut Vec<Observation>,
    ) -> Result<(), RecordedFailure> {
        let obs = self.pass.observations.as_ref().ok_or(RecordedFailure)?;
        let start = out.len();
        out.extend_from_slice(obs);
        if self.modelled {
            for o in &mut out[start..] {
                let key = o.page.key();
                if let Some(&n) = self.placed.get(&key) {
                    o.page_node = n;
                } else if let Some(&n) = self.recorded_from.get(&key) {
                    o.page_node = n;
                }
            }
        }
        Ok(())
    }

    fn drain_idle(
        &mut self,
        _now: Nanos,
        out: &mut Vec<IdleObservation>,
    ) -> Result<(), RecordedFailure> {
        let start = out.len();
        out.extend_from_slice(&self.pass.idle);
        if self.modelled {
            for f in &mut out[start..] {
                let key = f.page.key();
                if let Some(&n) = self
                    .placed
                    .get(&key)
                    .or_else(|| self.recorded_from.get(&key))
                {
                    f.page_node = n;
                }
            }
        }
        Ok(())
    }

    fn drain_owner_updates(&mut self, out: &mut Vec<OwnerUpdate>) -> Result<(), RecordedFailure> {
        out.extend(self.pass.owners.iter().flatten().cloned());
        self.pass.owners.as_ref().map(|_| ()).ok_or(RecordedFailure)
    }

    fn usage(&mut self, _now: Nanos) -> Result<SystemUsage, RecordedFailure> {
        let mut u = self.pass.usage.clone().ok_or(RecordedFailure)?;
        for (node, d) in &self.free_delta {
            if *d == 0 {
                continue;
            }
            let nu = u.nodes.entry(*node).or_default();
            let free = i128::from(nu.free.0).saturating_add(*d).max(0);
            nu.free = Bytes(u64::try_from(free).unwrap_or(u64::MAX));
        }
        Ok(u)
    }

    fn migrate(
        &mut self,
        _now: Nanos,
        batch: &MigrationBatch,
    ) -> Result<MigrationReport, RecordedFailure> {
        let recorded = self.pass.moves.get(self.call).cloned();
        let same = recorded.as_ref().is_some_and(|(b, _)| b == batch);
        self.decisions.push(Decision {
            time_s: self.pass.now.as_secs_f64(),
            kind: batch.kind,
            to: batch.target,
            cgroup: batch.cgroup,
            pages: batch.nr_pages().0,
            moves: batch.pages.clone(),
            same_as_recorded: same,
        });
        let report = if same {
            self.same += 1;
            if self.modelled {
                MigrationReport::for_batch(
                    batch,
                    batch.pages.iter().map(|_| MoveOutcome::Moved(batch.target)),
                )
            } else {
                match recorded.and_then(|(_, r)| r) {
                    Some(r) => r,
                    None => {
                        self.call += 1;
                        return Err(RecordedFailure);
                    }
                }
            }
        } else {
            self.diverge(
                Some(describe(batch)),
                recorded.as_ref().map(|(b, _)| describe(b)),
            );
            MigrationReport::for_batch(
                batch,
                batch.pages.iter().map(|_| MoveOutcome::Moved(batch.target)),
            )
        };
        self.call += 1;
        self.apply(&report);
        Ok(report)
    }

    fn join_pages(&self) -> usize {
        self.join_pages
    }
}

/// Replays `passes` (recorded under `header`) through a fresh engine built from `config`.
///
/// # Errors
/// [`ReplayError`] when the recorded topology or the configuration is refused.
pub fn replay(
    header: &Header,
    passes: Vec<Pass>,
    config: EngineConfig,
) -> Result<Replay, ReplayError> {
    let topo = header.topology()?;
    let capacity: Vec<(NodeId, u64)> = topo.nodes().iter().map(|n| (n.id, n.capacity.0)).collect();
    let what_if = config != header.config;
    let mut engine = Engine::new(config, topo).map_err(|e| ReplayError::Config(e.to_string()))?;
    let join = usize::try_from(header.join_pages).unwrap_or(usize::MAX);
    let mut backend = ReplayBackend::new(join, what_if);
    let mut bufs = StepBuffers::default();
    let mut out = Replay {
        what_if,
        ..Replay::default()
    };
    for (i, mut pass) in passes.into_iter().enumerate() {
        let now = pass.now;
        // The recorded run's reload (SIGHUP): replayed with the recorded configuration, the
        // engine is reconfigured at the same point; a what-if replay keeps the caller's.
        if let Some(c) = pass.config.take().filter(|_| !what_if) {
            let cfg: EngineConfig =
                serde_json::from_str(&c).map_err(|e| ReplayError::Config(e.to_string()))?;
            engine
                .reconfigure(cfg)
                .map_err(|e| ReplayError::Config(e.to_string()))?;
            out.reconfigured += 1;
        }
        out.recorded += pass.moves.len();
        backend.begin(i, pass);
        // A recorded failure ends the pass where the recorded one ended; the engine's state
        // is then what the recorded engine's was.
        let _ = tierd_engine::step(&mut engine, &mut backend, now, &mut bufs);
        backend.end();
        if let Ok(u) = backend.usage(now) {
            out.placement.push(Placement {
                time_s: now.as_secs_f64(),
                used: capacity
                    .iter()
                    .map(|&(n, cap)| {
                        (
                            n,
                            cap.saturating_sub(u.nodes.get(&n).map_or(cap, |x| x.free.0)),
                        )
                    })
                    .collect(),
            });
        }
        out.passes += 1;
    }
    out.same = backend.same;
    out.first_divergence = backend.first_divergence;
    out.replayed = backend.decisions.len();
    for d in &backend.decisions {
        match d.kind {
            MigrationKind::Promote => out.promoted_pages += d.pages,
            MigrationKind::Demote => out.demoted_pages += d.pages,
        }
    }
    out.decisions = backend.decisions;
    Ok(out)
}
