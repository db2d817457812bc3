//! The seam between the engine and a machine, and the one loop both backends run.
//!
//! ```text
//!   backend ──observations──▶ Engine::observe ──▶ hotness records
//!   backend ──idle facts─────▶ Engine::note_idle ──▶ the demoter's index (idle demotion)
//!   backend ──owners/policies─▶ Engine::update_owner
//!   backend ──usage(now)──────▶ Engine::tick(now, usage) ──▶ MigrationPlan
//!   backend ◀─batches─────────  (executes each batch: move_pages(2) or the simulator)
//!   backend ──reports─────────▶ Engine::apply(now, report) ──▶ counters
//! ```
//!
//! The Linux daemon calls [`step`] from a real-time loop, the simulator from a virtual-time
//! loop; the engine cannot tell which.

use crate::engine::Engine;
use crate::plan::{MigrationBatch, MigrationReport, MoveOutcome, SystemUsage};
use crate::policy::{MemPolicy, Owner};
use crate::sources::{IdleObservation, Observation};
use crate::types::{Nanos, NodeId, SpaceId, Vpn};

/// A change in who owns an address space or what policy its ranges have. Serializable so that
/// a recorded run (the `tierd-trace` crate) can feed the same updates to an engine again.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum OwnerUpdate {
    /// The space's owner (process and cgroup).
    Owner {
        /// The address space.
        space: SpaceId,
        /// Its owner.
        owner: Owner,
    },
    /// All policy ranges of the space, `[start, end)` (one `numa_maps` read).
    Policies {
        /// The address space.
        space: SpaceId,
        /// Ranges and their policies.
        ranges: Vec<(Vpn, Vpn, MemPolicy)>,
    },
    /// The node all of the space's recently running threads run on, or `None` when they span
    /// nodes or it is not known (the Linux backend reads `/proc/PID/task/*/stat`). In precise
    /// mode, with `accessing_node = "threads"`, it is the accessing node of the space's
    /// observations that do not carry one ([`crate::config::AccessingNode`]).
    HomeNode {
        /// The address space.
        space: SpaceId,
        /// The node, if there is one.
        node: Option<NodeId>,
    },
    /// The space is gone.
    Exited {
        /// The address space.
        space: SpaceId,
    },
}

/// What the engine may observe and do on a machine. Implemented by the Linux backend and by the
/// simulator.
pub trait Backend {
    /// The backend's error: only failures of the backend itself (a sysfs file vanished, a
    /// syscall refused for the whole batch). Per-page failures are outcomes in the report.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Appends the observations gathered since the last call.
    fn drain_observations(
        &mut self,
        now: Nanos,
        out: &mut Vec<Observation>,
    ) -> Result<(), Self::Error>;

    /// Appends the idle facts gathered since the last call ([`Engine::note_idle`]); a backend
    /// whose sources see no idle memory has none (the default).
    fn drain_idle(
        &mut self,
        _now: Nanos,
        _out: &mut Vec<IdleObservation>,
    ) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Appends owner and policy changes since the last call.
    fn drain_owner_updates(&mut self, out: &mut Vec<OwnerUpdate>) -> Result<(), Self::Error>;

    /// Reads free memory per node and cgroup protection.
    fn usage(&mut self, now: Nanos) -> Result<SystemUsage, Self::Error>;

    /// Executes one batch.
    fn migrate(
        &mut self,
        now: Nanos,
        batch: &MigrationBatch,
    ) -> Result<MigrationReport, Self::Error>;

    /// The most folios one [`Backend::migrate`] call should get when [`step`] joins a plan's
    /// consecutive batches going the same way ([`crate::plan::join_batches`]); 0 (the
    /// default) or 1: one call per batch. For a backend whose calls have a fixed price.
    fn join_pages(&self) -> usize {
        0
    }
}

/// What one [`step`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepOutcome {
    /// Observations fed to the engine.
    pub observations: usize,
    /// Reports applied: one per batch, or per joined batch where the backend joins them
    /// ([`Backend::join_pages`]).
    pub batches: usize,
    /// Base pages moved.
    pub moved_pages: u64,
    /// Base pages that failed to move.
    pub failed_pages: u64,
}

/// Reusable buffers for [`step`], so that a long-running loop does not allocate per pass.
#[derive(Debug, Default)]
pub struct StepBuffers {
    observations: Vec<Observation>,
    idle: Vec<IdleObservation>,
    updates: Vec<OwnerUpdate>,
    reports: Vec<MigrationReport>,
}

/// One pass of the control loop: owners, observations, tick, migrate, apply.
pub fn step<B: Backend>(
    engine: &mut Engine,
    backend: &mut B,
    now: Nanos,
    bufs: &mut StepBuffers,
) -> Result<StepOutcome, B::Error> {
    let mut out = StepOutcome::default();
    bufs.updates.clear();
    backend.drain_owner_updates(&mut bufs.updates)?;
    for u in bufs.updates.drain(..) {
        engine.update_owner(u);
    }
    bufs.observations.clear();
    backend.drain_observations(now, &mut bufs.observations)?;
    out.observations = bufs.observations.len();
    engine.observe(&bufs.observations);
    bufs.idle.clear();
    backend.drain_idle(now, &mut bufs.idle)?;
    engine.note_idle(&bufs.idle);
    let usage = backend.usage(now)?;
    let plan = engine.tick(now, &usage);
    bufs.reports.clear();
    let moved = migrate_all(backend, now, &plan.batches, &mut bufs.reports);
    for report in bufs.reports.drain(..) {
        for r in &report.results {
            let n = r.page.size.nr_pages().0;
            match r.outcome {
                MoveOutcome::Moved(_) => out.moved_pages += n,
                // A split folio's pages that moved come as results of their own; a page
                // held back for (or refused by) the access check did not fail to move.
                MoveOutcome::Failed(
                    crate::plan::MoveError::Split
                    | crate::plan::MoveError::Deferred
                    | crate::plan::MoveError::Untouched,
                ) => {}
                MoveOutcome::Failed(_) => out.failed_pages += n,
            }
        }
        engine.apply(now, &report);
        out.batches += 1;
    }
    moved?;
    Ok(out)
}

/// Executes `batches` in order, joined up to [`Backend::join_pages`], appending one report per
/// call: the engine applies whatever reports come back, whichever batches they cover, and on
/// an error the reports already appended are still applied.
fn migrate_all<B: Backend>(
    backend: &mut B,
    now: Nanos,
    batches: &[MigrationBatch],
    out: &mut Vec<MigrationReport>,
) -> Result<(), B::Error> {
    let joined;
    let batches = match backend.join_pages() {
        cap if cap > 1 => {
            joined = crate::plan::join_batches(batches, cap);
            &joined[..]
        }
        _ => batches,
    };
    for b in batches {
        out.push(backend.migrate(now, b)?);
    }
    Ok(())
}
