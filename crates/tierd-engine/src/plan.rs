//! What goes into a tick and what comes out: node usage in, a migration plan out, a migration
//! report back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::types::{Bytes, CgroupId, NodeId, PageRef, Pages};

/// Free memory of one node, as the backend reads it (`/sys/devices/system/node/nodeN/meminfo`,
/// or the simulator's state).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeUsage {
    /// Free bytes.
    pub free: Bytes,
    /// The node's promotion watermark (`WMARK_PROMO`, summed over its zones), if the backend
    /// knows it (`/proc/zoneinfo` prints it as `promo`). If not, the engine estimates it from
    /// `watermark_scale_factor`.
    pub promo_watermark: Option<Bytes>,
}

/// A cgroup's protection and fast-tier use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupUsage {
    /// `memory.low`.
    pub low: Bytes,
    /// Bytes of the cgroup on top-tier nodes (sum of its `memory.stat` per-node usage on them).
    pub fast_usage: Bytes,
}

/// The machine's state at a tick.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemUsage {
    /// Per-node free memory. A node missing here is taken as full.
    pub nodes: BTreeMap<NodeId, NodeUsage>,
    /// Per-cgroup protection; cgroups missing here are unprotected.
    pub cgroups: BTreeMap<CgroupId, CgroupUsage>,
}

/// Promotion (slow to fast) or demotion (fast to slow).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MigrationKind {
    /// To a faster tier.
    Promote,
    /// To a slower tier.
    Demote,
}

/// One page to move.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedMove {
    /// The page.
    pub page: PageRef,
    /// The node it is on.
    pub from: NodeId,
}

/// Pages with one destination and one cgroup: the unit kmigrated hands to
/// `promote_misplaced_memcg_folios()` (mm/pghot.c flushes a batch when the target node or the
/// memcg changes, or at `kmigrated_batch_nr`). A Linux backend splits it per process for
/// `move_pages(2)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationBatch {
    /// Engine-assigned id, echoed in the report.
    pub id: u64,
    /// Promotion or demotion.
    pub kind: MigrationKind,
    /// Destination node.
    pub target: NodeId,
    /// The cgroup owning every page of the batch.
    pub cgroup: CgroupId,
    /// The pages (folios), at most `batch_nr` of them.
    pub pages: Vec<PlannedMove>,
}

impl MigrationBatch {
    /// Base pages in the batch (a huge page counts 512).
    #[must_use]
    pub fn nr_pages(&self) -> Pages {
        Pages(self.pages.iter().map(|m| m.page.size.nr_pages().0).sum())
    }
}

/// The output of a tick: batches to execute in order (demotions first, so that promotions
/// find the room they freed).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationPlan {
    /// Batches in execution order.
    pub batches: Vec<MigrationBatch>,
}

impl MigrationPlan {
    /// Whether there is nothing to do.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }
}

/// Why a page did not move; the errnos `move_pages(2)` puts in `status[]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MoveError {
    /// `EBUSY`: the page is busy (under I/O, pinned, locked).
    Busy,
    /// `ENOMEM`: no room on the target.
    NoMem,
    /// `EACCES` / `EPERM`: shared with other processes and `MPOL_MF_MOVE_ALL` not allowed.
    Access,
    /// `ESRCH`: the process is gone.
    NoProcess,
    /// `EFAULT`: no longer mapped.
    Fault,
    /// `ENOENT`: not present (never touched, or swapped out).
    NotPresent,
    /// Any other errno.
    Other(i32),
    /// Not an errno: the kernel split the huge folio while migrating it and moved only some of
    /// its base pages (mm/migrate.c `migrate_pages_batch()` splits a THP it cannot migrate
    /// whole, e.g. for want of a free huge page on the target, and retries its pages one by
    /// one; a page that then fails is left behind). The folio as planned no longer exists;
    /// the base pages that did move are reported as results of their own in the same report,
    /// so its pages are not counted as failed here.
    Split,
    /// Not an errno: the backend asks the page's own accessed bit before moving it (a
    /// region-granular source observed it with its region), and the answer is not in yet.
    /// Not a failure: the page is planned again when it is ready again.
    Deferred,
    /// Not an errno: the backend's check found the page untouched for a whole window: its
    /// region's accesses were its neighbours'. Not moved; it must earn readiness again.
    Untouched,
}

/// What happened to one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MoveOutcome {
    /// The page is now on this node (normally the batch's target).
    Moved(NodeId),
    /// It did not move.
    Failed(MoveError),
}

/// One page's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageResult {
    /// The page.
    pub page: PageRef,
    /// Where it was.
    pub from: NodeId,
    /// What happened.
    pub outcome: MoveOutcome,
}

/// The backend's account of one executed batch. Expected races (a page busy, a process gone)
/// are outcomes here, never errors. After the batch's own results (one per planned page, in
/// order) may come results for base pages that were not planned as such: the pages that moved
/// of a folio the kernel split ([`MoveError::Split`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationReport {
    /// The batch id.
    pub batch: u64,
    /// Promotion or demotion.
    pub kind: MigrationKind,
    /// The batch's target.
    pub target: NodeId,
    /// One result per page of the batch.
    pub results: Vec<PageResult>,
}

impl MigrationReport {
    /// A report for `batch` with one outcome per page, in the batch's order.
    ///
    /// Outcomes beyond the batch's pages are ignored; missing ones are reported as
    /// `Failed(Other(0))` so that every planned page is accounted for.
    #[must_use]
    pub fn for_batch(
        batch: &MigrationBatch,
        outcomes: impl IntoIterator<Item = MoveOutcome>,
    ) -> Self {
        let mut it = outcomes.into_iter();
        let results = batch
            .pages
            .iter()
            .map(|m| PageResult {
                page: m.page,
                from: m.from,
                outcome: it
                    .next()
                    .unwrap_or(MoveOutcome::Failed(MoveError::Other(0))),
            })
            .collect();
        MigrationReport {
            batch: batch.id,
            kind: batch.kind,
            target: batch.target,
            results,
        }
    }
}
