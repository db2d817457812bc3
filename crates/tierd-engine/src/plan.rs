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

/// Joins runs of consecutive batches that go the same way (kind and target) into batches of
/// at most `max_pages` folios (never splitting one), keeping the plan's order: demotions stay
/// ahead of the promotions that need their room. The joined batch keeps the first one's id and
/// cgroup.
///
/// For a backend whose every call has a fixed price that does not depend on its size:
/// `move_pages(2)` brackets each call with `lru_cache_disable()` (mm/migrate.c
/// `do_pages_move()`: an expedited RCU grace period and a drain of every CPU's LRU batches), so
/// kmigrated's 512-folio batches, moved one call each, cost a 128 MiB hot set 64 of them. The
/// engine still plans (and counts) `batch_nr`-sized batches; only the calls are fewer.
/// `max_pages` 0 or 1 returns the batches as they are.
#[must_use]
pub fn join_batches(batches: &[MigrationBatch], max_pages: usize) -> Vec<MigrationBatch> {
    let mut out: Vec<MigrationBatch> = Vec::with_capacity(batches.len());
    for b in batches {
        match out.last_mut() {
            Some(last)
                if max_pages > 1
                    && last.kind == b.kind
                    && last.target == b.target
                    && last.pages.len() + b.pages.len() <= max_pages =>
            {
                last.pages.extend_from_slice(&b.pages);
            }
            _ => out.push(b.clone()),
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{SpaceId, Vpn};

    fn batch(
        id: u64,
        kind: MigrationKind,
        target: u16,
        cgroup: u32,
        vpns: &[u64],
    ) -> MigrationBatch {
        MigrationBatch {
            id,
            kind,
            target: NodeId(target),
            cgroup: CgroupId(cgroup),
            pages: vpns
                .iter()
                .map(|v| PlannedMove {
                    page: PageRef::base(SpaceId(7), Vpn(*v)),
                    from: NodeId(1),
                })
                .collect(),
        }
    }

    fn shape(b: &[MigrationBatch]) -> Vec<(u64, MigrationKind, u16, Vec<u64>)> {
        b.iter()
            .map(|b| {
                (
                    b.id,
                    b.kind,
                    b.target.0,
                    b.pages.iter().map(|m| m.page.vpn.0).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn batches_going_the_same_way_are_joined_in_order_up_to_the_cap() {
        use MigrationKind::{Demote, Promote};
        let plan = [
            batch(1, Demote, 1, 0, &[100, 101]),
            batch(2, Promote, 0, 0, &[1, 2]),
            batch(3, Promote, 0, 5, &[3, 4]), // another cgroup: joined all the same
            batch(4, Promote, 0, 0, &[5, 8]), // 6 would pass the cap of 5: a new batch
            batch(5, Promote, 2, 0, &[6]),    // another target: never joined
            batch(6, Promote, 0, 0, &[7]),    // same way as 4, but not next to it
        ];
        let got = join_batches(&plan, 5);
        assert_eq!(
            shape(&got),
            vec![
                (1, Demote, 1, vec![100, 101]),
                (2, Promote, 0, vec![1, 2, 3, 4]),
                (4, Promote, 0, vec![5, 8]),
                (5, Promote, 2, vec![6]),
                (6, Promote, 0, vec![7]),
            ]
        );
        // Every planned page is in exactly one joined batch, in the plan's order.
        let flat = |b: &[MigrationBatch]| -> Vec<u64> {
            b.iter()
                .flat_map(|b| b.pages.iter().map(|m| m.page.vpn.0))
                .collect()
        };
        assert_eq!(flat(&got), flat(&plan));
        // A cap of 0 or 1 leaves the plan as it is.
        assert_eq!(join_batches(&plan, 1), plan.to_vec());
        assert_eq!(join_batches(&plan, 0), plan.to_vec());
    }
}
