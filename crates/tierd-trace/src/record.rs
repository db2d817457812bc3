//! Recording: a [`Backend`] that wraps the real one for one [`tierd_engine::step`] and writes
//! down everything the real one returned to the engine.
//!
//! Every engine input of a pass goes through the backend's four calls (module docs of
//! `tierd_engine::backend`), so wrapping the backend records exactly what the engine saw, in
//! the order it saw it, and the batches it asked to move, without touching the engine or the
//! daemon's backend. The records go to a byte buffer; the caller writes it out after the
//! pass (the daemon through [`crate::files::TraceWriter`]), so recording adds no I/O inside
//! the pass.

use tierd_engine::plan::{MigrationBatch, MigrationReport, SystemUsage};
use tierd_engine::types::Nanos;
use tierd_engine::{Backend, IdleObservation, Observation, OwnerUpdate};

use crate::format::{encode_record, Record};

/// The real backend and the buffer the pass's records go to.
#[derive(Debug)]
pub struct Recorder<'a, B> {
    inner: &'a mut B,
    out: &'a mut Vec<u8>,
}

impl<'a, B: Backend> Recorder<'a, B> {
    /// Starts recording the pass at `now` (pass the same `now` to `step`).
    pub fn pass(inner: &'a mut B, out: &'a mut Vec<u8>, now: Nanos) -> Self {
        encode_record(&Record::Pass { now }, out);
        Recorder { inner, out }
    }
}

impl<B: Backend> Backend for Recorder<'_, B> {
    type Error = B::Error;

    fn drain_observations(
        &mut self,
        now: Nanos,
        out: &mut Vec<Observation>,
    ) -> Result<(), Self::Error> {
        let start = out.len();
        self.inner.drain_observations(now, out)?;
        encode_record(&Record::Observations(out[start..].to_vec()), self.out);
        Ok(())
    }

    fn drain_idle(
        &mut self,
        now: Nanos,
        out: &mut Vec<IdleObservation>,
    ) -> Result<(), Self::Error> {
        let start = out.len();
        self.inner.drain_idle(now, out)?;
        // Most passes (and every run with idle demotion off) have none: no record, so such a
        // trace's records are byte for byte what version 2 wrote (its header says 3).
        if out.len() > start {
            encode_record(&Record::Idle(out[start..].to_vec()), self.out);
        }
        Ok(())
    }

    fn drain_owner_updates(&mut self, out: &mut Vec<OwnerUpdate>) -> Result<(), Self::Error> {
        let start = out.len();
        self.inner.drain_owner_updates(out)?;
        encode_record(&Record::Owners(out[start..].to_vec()), self.out);
        Ok(())
    }

    fn usage(&mut self, now: Nanos) -> Result<SystemUsage, Self::Error> {
        let u = self.inner.usage(now)?;
        encode_record(&Record::Usage(u.clone()), self.out);
        Ok(u)
    }

    fn migrate(
        &mut self,
        now: Nanos,
        batch: &MigrationBatch,
    ) -> Result<MigrationReport, Self::Error> {
        // The decision is written before the call: a failed call leaves a Batch without a
        // Report, which the replay turns into the same failure.
        encode_record(&Record::Batch(batch.clone()), self.out);
        let r = self.inner.migrate(now, batch)?;
        encode_record(&Record::Report(r.clone()), self.out);
        Ok(r)
    }

    fn join_pages(&self) -> usize {
        self.inner.join_pages()
    }
}
