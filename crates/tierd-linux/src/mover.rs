//! # mover: executing the engine's migration batches with `move_pages(2)`
//!
//! A [`MigrationBatch`] names pages by address space ([`SpaceId`]) and virtual page; the kernel
//! wants a pid and addresses. The [`Mover`] groups a batch's pages by space, asks the caller for
//! the space's pid, and calls `move_pages(pid, ..., MPOL_MF_MOVE)` in chunks of
//! [`MoverConfig::chunk_pages`] addresses. A huge page
//! ([`PageSize::Huge2M`](tierd_engine::types::PageSize::Huge2M) or `Huge1G`: a THP or a hugetlb
//! page) is one address, its head's: the kernel isolates and migrates the whole folio
//! (mm/migrate.c `add_folio_for_migration()` isolates the folio of the page it is given), and
//! its status counts all its base pages.
//!
//! A folio is passed once. Two refs of a batch whose ranges overlap (a huge ref and a base page
//! inside it, or two huge refs of one folio) are one folio: only the first (the lowest address,
//! the larger on a tie) reaches the kernel, and the others take its outcome without being
//! counted again. Passing a second page of a folio the same call already isolated would fail
//! with `-EBUSY` (`add_folio_for_migration()`: `folio_isolate_lru()` fails on an isolated
//! folio; `isolate_hugetlb()` likewise) and be counted as a failure of pages that moved. The
//! engine never plans such a batch (it keys pages by their folio's head); this is the mover's
//! own guard.
//!
//! ## How results are read (mm/migrate.c, `do_pages_move()`)
//!
//! - `status[i] >= 0`: the page is on that node now (moved, or already there).
//! - `status[i] < 0`: that page's errno — `-EBUSY` (could not isolate), `-ENOMEM`, `-EACCES`
//!   (mapped by several processes without `MPOL_MF_MOVE_ALL`), `-ENOENT` (not present),
//!   `-EFAULT` (not mapped; also what `-EEXIST` is turned into).
//! - A positive return value: `migrate_pages()` gave up on that many pages and the kernel
//!   returned early, **without writing** the status of the group it was migrating. The mover
//!   prefills `status` with a value the kernel never writes, and locates the pages left unset
//!   with a query (`nodes = NULL`): on the target they count as moved, elsewhere as
//!   `Other(EAGAIN)` (tried, not done, reason not reported).
//! - Whole-call failures. Expected races become per-page outcomes and are counted, never
//!   raised: `ESRCH` (the process exited and was reaped) and `EINVAL` for another pid (the
//!   process has no mm any more: a zombie; `find_mm_struct()` turns a NULL `get_task_mm()` into
//!   `-EINVAL`, and our flags are checked before the call so they cannot be the cause) become
//!   [`MoveError::NoProcess`]; `EPERM` (ptrace access denied) and `EACCES` (target node outside
//!   the process's cpuset) become [`MoveError::Access`]. `ENODEV` (the target node does not
//!   exist or has no memory) is a configuration error: [`MoverError::NoSuchNode`]. Anything
//!   else is [`MoverError::Sys`].
//!
//! The mover measures the time spent inside `move_pages` with [`std::time::Instant`] (this crate
//! may read clocks; the engine may not) so that its throughput can be reported.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use thiserror::Error;
use tierd_engine::plan::{MigrationBatch, MigrationReport, MoveError, MoveOutcome, PageResult};
use tierd_engine::types::{NodeId, PageRef, SpaceId, Vpn, HPAGE_PMD_NR, PAGE_SIZE};

use crate::sys::{self, SysError, MPOL_MF_MOVE, MPOL_MF_MOVE_ALL};

/// A status value the kernel never writes (it writes node ids and small negative errnos).
const UNSET: i32 = i32::MIN;

/// How the mover calls the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoverConfig {
    /// Addresses per `move_pages` call. The kernel walks them one by one under `mmap_lock`
    /// (taken per page), so this bounds the arrays (16 bytes an address) and the latency of
    /// one call, and sets the calls per batch. Each call pays a fixed price that
    /// `migrate_pages(2)` pays once for a whole process: mm/migrate.c `do_pages_move()`
    /// brackets it with `lru_cache_disable()` / `lru_cache_enable()` (mm/swap.c: an expedited
    /// RCU grace period and a drain of every CPU's LRU batches, waiting for a kworker on each
    /// CPU), so small chunks make a busy machine's moves slow.
    pub chunk_pages: usize,
    /// `MPOL_MF_MOVE_ALL` instead of `MPOL_MF_MOVE`: also move pages mapped by other processes
    /// (needs `CAP_SYS_NICE`).
    pub move_all: bool,
}

impl Default for MoverConfig {
    fn default() -> Self {
        // 32 MiB of base pages a call (128 KiB of arrays): with 512 (2 MiB) the lab's
        // migration check moved 41 MiB/s against migratepages' 66 MiB/s (docs/lab.md, scale).
        MoverConfig {
            chunk_pages: 8192,
            move_all: false,
        }
    }
}

/// Failed pages by reason, in base pages (a huge page counts 512).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FailureCounts {
    /// `EBUSY`.
    pub busy: u64,
    /// `ENOMEM`.
    pub no_mem: u64,
    /// `EACCES` / `EPERM`.
    pub access: u64,
    /// The process was gone.
    pub no_process: u64,
    /// `EFAULT`.
    pub fault: u64,
    /// `ENOENT`.
    pub not_present: u64,
    /// Any other errno.
    pub other: u64,
    /// Base pages of huge folios the kernel split while moving them and moved only in part
    /// ([`MoveError::Split`]): not failures as such (the pages that moved are counted as
    /// moved, one by one), so not in [`FailureCounts::total`].
    pub split: u64,
}

impl FailureCounts {
    fn add(&mut self, e: MoveError, pages: u64) {
        let slot = match e {
            MoveError::Busy => &mut self.busy,
            MoveError::NoMem => &mut self.no_mem,
            MoveError::Access => &mut self.access,
            MoveError::NoProcess => &mut self.no_process,
            MoveError::Fault => &mut self.fault,
            MoveError::NotPresent => &mut self.not_present,
            // The mover never makes the access check's outcomes (the daemon does, before
            // calling it); counted as other should one come here.
            MoveError::Other(_) | MoveError::Deferred | MoveError::Untouched => &mut self.other,
            MoveError::Split => &mut self.split,
        };
        *slot += pages;
    }

    /// All failed pages.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.busy
            + self.no_mem
            + self.access
            + self.no_process
            + self.fault
            + self.not_present
            + self.other
    }
}

/// What the mover has done since it was created. Page counts are base pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MoverStats {
    /// `move_pages` calls that migrate.
    pub move_calls: u64,
    /// `move_pages` calls that only locate (queries, and re-queries after a partial failure).
    pub query_calls: u64,
    /// Pages handed to the kernel for migration.
    pub pages_requested: u64,
    /// Pages that ended on the target and, per the plan, were elsewhere before.
    pub pages_moved: u64,
    /// Pages the plan said were already on the target (the kernel leaves them alone).
    pub pages_already_there: u64,
    /// `pages_moved` in bytes.
    pub bytes_moved: u64,
    /// Pages that did not move, by reason.
    pub failures: FailureCounts,
    /// Refs of a batch dropped because an earlier ref of the same batch covers their pages
    /// (the same folio): not passed to the kernel, not counted above.
    pub overlapping_refs: u64,
    /// Wall time spent inside migrating `move_pages` calls.
    pub move_time: Duration,
}

impl MoverStats {
    /// Migration throughput in MiB/s (moved bytes over time in `move_pages`), if any time was
    /// spent.
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn moved_mib_per_s(&self) -> Option<f64> {
        let t = self.move_time.as_secs_f64();
        (t > 0.0).then(|| self.bytes_moved as f64 / (1u64 << 20) as f64 / t)
    }

    /// Requested pages processed per second, in MiB/s of requested memory: what a call costs
    /// even when nothing needs copying (pages already on the target).
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn requested_mib_per_s(&self) -> Option<f64> {
        let t = self.move_time.as_secs_f64();
        (t > 0.0).then(|| (self.pages_requested * PAGE_SIZE) as f64 / (1u64 << 20) as f64 / t)
    }
}

/// A failure of the mover that is not an expected race.
#[derive(Debug, Error)]
pub enum MoverError {
    /// The target node does not exist or has no memory (`ENODEV` from `move_pages`).
    #[error(
        "target node {node} does not exist or has no memory (move_pages on pid {pid}: ENODEV)"
    )]
    NoSuchNode {
        /// The batch's target.
        node: NodeId,
        /// The process being moved.
        pid: i32,
    },
    /// A page address does not fit this platform's pointers.
    #[error("page {vpn:#x} of space {space:?} is not a valid address here")]
    BadAddress {
        /// The address space.
        space: SpaceId,
        /// The virtual page number.
        vpn: u64,
    },
    /// An unexpected syscall failure.
    #[error(transparent)]
    Sys(#[from] SysError),
}

impl MoverError {
    /// The OS error number behind it, when there is one (for counting by reason).
    #[must_use]
    pub fn errno(&self) -> Option<i32> {
        match self {
            MoverError::NoSuchNode { .. } => Some(libc::ENODEV),
            MoverError::BadAddress { .. } => None,
            MoverError::Sys(e) => e.errno(),
        }
    }
}

/// A whole-call errno the mover treats as a per-page outcome, or `None` if it is an error.
fn whole_call_outcome(pid: i32, errno: i32) -> Option<MoveError> {
    match errno {
        libc::ESRCH => Some(MoveError::NoProcess),
        libc::EINVAL if pid != 0 => Some(MoveError::NoProcess),
        libc::EPERM | libc::EACCES => Some(MoveError::Access),
        _ => None,
    }
}

/// One per-page status from `move_pages` as an outcome.
#[must_use]
pub fn status_outcome(status: i32) -> MoveOutcome {
    if let Ok(n) = u16::try_from(status) {
        return MoveOutcome::Moved(NodeId(n));
    }
    MoveOutcome::Failed(match status.checked_neg().unwrap_or(0) {
        libc::EBUSY => MoveError::Busy,
        libc::ENOMEM => MoveError::NoMem,
        libc::EACCES | libc::EPERM => MoveError::Access,
        libc::ESRCH => MoveError::NoProcess,
        libc::ENOENT => MoveError::NotPresent,
        libc::EFAULT => MoveError::Fault,
        e => MoveError::Other(e),
    })
}

/// Fill the status entries the kernel left unset (`unset` indexes `status`) from a follow-up
/// location query (`located[k]` for `unset[k]`, `None` if the query failed): a page found on
/// the target moved; any other page was tried and not moved, reason unknown (`-EAGAIN`).
fn resolve_unset(status: &mut [i32], unset: &[usize], located: Option<&[i32]>, target: NodeId) {
    for (k, &i) in unset.iter().enumerate() {
        let here = located.and_then(|l| l.get(k).copied());
        status[i] = match here {
            Some(n) if n == i32::from(target.0) => n,
            _ => -libc::EAGAIN,
        };
    }
}

/// One page to move: its index in the batch (or address list) and its address.
#[derive(Clone, Copy, Debug)]
struct Item {
    index: usize,
    addr: usize,
    /// Base pages of the ref (512 for a 2 MiB folio).
    pages: u64,
}

/// For each of `items` (one space's pages; `bytes[index]` the size of each), the index of the
/// earlier item whose range covers its start, if any: the same folio, to be passed once.
/// "Earlier" is by address, the larger first on a tie, so that a huge ref covers the base
/// pages inside it whatever the batch's order.
fn overlapping(items: &[Item], bytes: &[u64]) -> Vec<(usize, usize)> {
    let mut by_addr: Vec<&Item> = items.iter().collect();
    by_addr.sort_by_key(|it| (it.addr, std::cmp::Reverse(bytes[it.index])));
    let mut out = Vec::new();
    let mut cover: Option<(usize, u64)> = None;
    for it in by_addr {
        let start = it.addr as u64;
        let end = start.saturating_add(bytes[it.index]);
        match cover {
            Some((by, cover_end)) if start < cover_end => out.push((it.index, by)),
            _ => cover = Some((it.index, end)),
        }
    }
    out
}

/// The addresses of the 512 base pages of the 2 MiB folio whose head is at `head`.
fn thp_page_addrs(head: usize) -> Vec<usize> {
    // PageSize::Huge2M in bytes, and the base page size, as usize.
    (head..head.saturating_add(2 << 20)).step_by(4096).collect()
}

/// Executes migration batches with `move_pages(2)` and counts what happened.
#[derive(Debug, Default)]
pub struct Mover {
    cfg: MoverConfig,
    stats: MoverStats,
    /// The `/proc` whose `vmstat` tells THP splits during migration
    /// ([`Mover::with_split_counter`]).
    split_counter: Option<std::path::PathBuf>,
}

impl Mover {
    /// A mover with `cfg` (a `chunk_pages` of 0 is taken as 1).
    #[must_use]
    pub fn new(cfg: MoverConfig) -> Self {
        Mover {
            cfg: MoverConfig {
                chunk_pages: cfg.chunk_pages.max(1),
                ..cfg
            },
            stats: MoverStats::default(),
            split_counter: None,
        }
    }

    /// Tells THPs the kernel split while moving them from those it moved whole, by the
    /// kernel's `thp_migration_split` in `<proc_root>/vmstat` read around each call that
    /// moves a 2 MiB folio; such a folio then goes to the kernel in a call of its own, so that
    /// a split is its. A THP split and then moved completely leaves no other trace (the call
    /// succeeds, every page is on the target), and the kernel counts it as a THP failure
    /// (`thp_migration_fail`, mm/migrate.c `migrate_pages_batch()`), so tierd does too:
    /// [`MoveError::Split`] and its 512 pages as moved base pages. The counter is global: a
    /// split by another migrator (NUMA balancing, compaction) during the call is taken for
    /// this folio's (its bytes still count right).
    #[must_use]
    pub fn with_split_counter(mut self, proc_root: &std::path::Path) -> Self {
        self.split_counter = Some(proc_root.to_path_buf());
        self
    }

    fn thp_migration_split(&self) -> Option<u64> {
        let root = self.split_counter.as_ref()?;
        crate::read::vmstat::read_vmstat(root)
            .ok()?
            .get("thp_migration_split")
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> MoverConfig {
        self.cfg
    }

    /// Counters since creation.
    #[must_use]
    pub fn stats(&self) -> &MoverStats {
        &self.stats
    }

    /// Execute `batch`: every page is moved to `batch.target` in the process `pid_of` names for
    /// its space (`None`: the space has no live process, its pages fail with `NoProcess`).
    /// The report has one result per page, in the batch's order.
    ///
    /// # Errors
    /// [`MoverError::NoSuchNode`] if the target node has no memory, [`MoverError::BadAddress`]
    /// for a page beyond the address width, [`MoverError::Sys`] for an unexpected whole-call
    /// failure. Pages processed before the error have moved; no report is returned.
    pub fn execute(
        &mut self,
        batch: &MigrationBatch,
        mut pid_of: impl FnMut(SpaceId) -> Option<i32>,
    ) -> Result<MigrationReport, MoverError> {
        let mut outcomes = vec![MoveOutcome::Failed(MoveError::Other(0)); batch.pages.len()];
        // (index of a split folio's ref, addresses of its base pages now on the target)
        let mut split: Vec<(usize, Vec<usize>)> = Vec::new();
        let bytes: Vec<u64> = batch.pages.iter().map(|m| m.page.size.bytes().0).collect();
        // (duplicate, the index whose outcome it takes)
        let mut dups: Vec<(usize, usize)> = Vec::new();
        let mut by_space: BTreeMap<SpaceId, Vec<Item>> = BTreeMap::new();
        for (index, m) in batch.pages.iter().enumerate() {
            let addr = usize::try_from(m.page.vpn.addr()).map_err(|_| MoverError::BadAddress {
                space: m.page.space,
                vpn: m.page.vpn.0,
            })?;
            by_space.entry(m.page.space).or_default().push(Item {
                index,
                addr,
                pages: m.page.size.nr_pages().0,
            });
        }
        for (space, mut items) in by_space {
            let dup = overlapping(&items, &bytes);
            if !dup.is_empty() {
                let gone: std::collections::BTreeSet<usize> = dup.iter().map(|d| d.0).collect();
                items.retain(|it| !gone.contains(&it.index));
                dups.extend(dup);
            }
            let Some(pid) = pid_of(space) else {
                for it in &items {
                    outcomes[it.index] = MoveOutcome::Failed(MoveError::NoProcess);
                }
                continue;
            };
            // With the split counter, each 2 MiB folio goes alone (see with_split_counter).
            let alone = |it: &Item| self.split_counter.is_some() && it.pages == HPAGE_PMD_NR;
            let (thps, rest): (Vec<Item>, Vec<Item>) = items.into_iter().partition(alone);
            for chunk in rest.chunks(self.cfg.chunk_pages) {
                self.move_chunk(pid, chunk, batch.target, &mut outcomes, &mut split)?;
            }
            for it in &thps {
                let before = self.thp_migration_split();
                self.move_chunk(
                    pid,
                    std::slice::from_ref(it),
                    batch.target,
                    &mut outcomes,
                    &mut split,
                )?;
                let after = self.thp_migration_split();
                let was_split = matches!((before, after), (Some(b), Some(a)) if a > b);
                let whole = outcomes[it.index] == MoveOutcome::Moved(batch.target);
                if was_split && whole && !split.iter().any(|(i, _)| *i == it.index) {
                    outcomes[it.index] = MoveOutcome::Failed(MoveError::Split);
                    split.push((it.index, thp_page_addrs(it.addr)));
                }
            }
        }
        let mut is_dup = vec![false; batch.pages.len()];
        for &(d, by) in &dups {
            outcomes[d] = outcomes[by];
            is_dup[d] = true;
        }
        self.stats.overlapping_refs += dups.len() as u64;
        for ((m, o), dup) in batch.pages.iter().zip(&outcomes).zip(is_dup) {
            if !dup {
                self.count(m.page.size.nr_pages().0, m.from, batch.target, *o);
            }
        }
        let mut report = MigrationReport::for_batch(batch, outcomes);
        for (index, addrs) in split {
            let m = batch.pages[index];
            // Requested with their folio; counted as moved one by one.
            self.stats.pages_moved += addrs.len() as u64;
            self.stats.bytes_moved += addrs.len() as u64 * PAGE_SIZE;
            for addr in addrs {
                report.results.push(PageResult {
                    page: PageRef::base(m.page.space, Vpn::from_addr(addr as u64)),
                    from: m.from,
                    outcome: MoveOutcome::Moved(batch.target),
                });
            }
        }
        Ok(report)
    }

    /// Move the pages at `addrs` (base pages) of process `pid` (0 = self) to `target`, and
    /// return one outcome per address. `from` is where the caller believes the pages are (for
    /// the moved / already-there counters). This is [`Mover::execute`] without a batch, for
    /// callers that own addresses directly (the workload, benchmarks).
    ///
    /// # Errors
    /// As [`Mover::execute`].
    pub fn move_addrs(
        &mut self,
        pid: i32,
        addrs: &[usize],
        from: NodeId,
        target: NodeId,
    ) -> Result<Vec<MoveOutcome>, MoverError> {
        let items: Vec<Item> = addrs
            .iter()
            .enumerate()
            .map(|(index, &addr)| Item {
                index,
                addr,
                pages: 1,
            })
            .collect();
        let mut outcomes = vec![MoveOutcome::Failed(MoveError::Other(0)); addrs.len()];
        let mut split = Vec::new();
        for chunk in items.chunks(self.cfg.chunk_pages) {
            self.move_chunk(pid, chunk, target, &mut outcomes, &mut split)?;
        }
        for o in &outcomes {
            self.count(1, from, target, *o);
        }
        Ok(outcomes)
    }

    fn count(&mut self, nr: u64, from: NodeId, target: NodeId, o: MoveOutcome) {
        let s = &mut self.stats;
        s.pages_requested += nr;
        match o {
            MoveOutcome::Moved(n) if n == target && from != target => {
                s.pages_moved += nr;
                s.bytes_moved += nr * PAGE_SIZE;
            }
            MoveOutcome::Moved(_) => s.pages_already_there += nr,
            MoveOutcome::Failed(e) => s.failures.add(e, nr),
        }
    }

    fn move_chunk(
        &mut self,
        pid: i32,
        chunk: &[Item],
        target: NodeId,
        outcomes: &mut [MoveOutcome],
        split: &mut Vec<(usize, Vec<usize>)>,
    ) -> Result<(), MoverError> {
        let addrs: Vec<usize> = chunk.iter().map(|it| it.addr).collect();
        let nodes = vec![i32::from(target.0); chunk.len()];
        let mut status = vec![UNSET; chunk.len()];
        let flags = if self.cfg.move_all {
            MPOL_MF_MOVE_ALL
        } else {
            MPOL_MF_MOVE
        };
        let t0 = Instant::now();
        let r = sys::move_pages(pid, &addrs, Some(&nodes), &mut status, flags);
        self.stats.move_time += t0.elapsed();
        self.stats.move_calls += 1;
        let left_behind = match r {
            Ok(n) => n,
            Err(e) => {
                let errno = e.errno().unwrap_or(0);
                if errno == libc::ENODEV {
                    return Err(MoverError::NoSuchNode { node: target, pid });
                }
                let Some(fail) = whole_call_outcome(pid, errno) else {
                    return Err(e.into());
                };
                for it in chunk {
                    outcomes[it.index] = MoveOutcome::Failed(fail);
                }
                return Ok(());
            }
        };
        let unset: Vec<usize> = (0..chunk.len()).filter(|&i| status[i] == UNSET).collect();
        if !unset.is_empty() {
            // The kernel returned early (positive result); find out where those pages are.
            let q: Vec<usize> = unset.iter().map(|&i| addrs[i]).collect();
            let mut qs = vec![UNSET; q.len()];
            self.stats.query_calls += 1;
            let located = sys::move_pages(pid, &q, None, &mut qs, 0).is_ok();
            resolve_unset(&mut status, &unset, located.then_some(&qs[..]), target);
        }
        for (it, st) in chunk.iter().zip(&status) {
            outcomes[it.index] = status_outcome(*st);
        }
        if left_behind > 0 {
            self.find_split_folios(pid, chunk, target, outcomes, split);
        }
        Ok(())
    }

    /// After a call that left pages behind: where each 2 MiB folio of `chunk` is now, page by
    /// page. `migrate_pages_batch()` (mm/migrate.c) splits a THP it cannot migrate whole
    /// (`-ENOMEM` on the target, among others) and retries its base pages one by one; when
    /// some of them fail the call returns how many, and the head's status tells only where
    /// the head went. A folio whose pages all ended on the target moved (whole or split, the
    /// same bytes); one with none there did not move; one in between was split and moved in
    /// part: [`MoveError::Split`], with the addresses of its pages on the target in `split`.
    /// 1 GiB pages are hugetlb, which the kernel never splits, and are not asked (262 144
    /// addresses). A failed query leaves the head's outcome.
    fn find_split_folios(
        &mut self,
        pid: i32,
        chunk: &[Item],
        target: NodeId,
        outcomes: &mut [MoveOutcome],
        split: &mut Vec<(usize, Vec<usize>)>,
    ) {
        for it in chunk.iter().filter(|it| it.pages == HPAGE_PMD_NR) {
            let pages = thp_page_addrs(it.addr);
            let mut where_ = vec![UNSET; pages.len()];
            self.stats.query_calls += 1;
            if sys::move_pages(pid, &pages, None, &mut where_, 0).is_err() {
                continue;
            }
            let here = i32::from(target.0);
            let on_target: Vec<usize> = pages
                .iter()
                .zip(&where_)
                .filter(|(_, &w)| w == here)
                .map(|(&a, _)| a)
                .collect();
            if on_target.len() == pages.len() {
                outcomes[it.index] = MoveOutcome::Moved(target);
            } else if !on_target.is_empty() {
                outcomes[it.index] = MoveOutcome::Failed(MoveError::Split);
                split.push((it.index, on_target));
            }
        }
    }

    /// Where the pages at `addrs` of process `pid` (0 = self) are: a node, or the errno for that
    /// page (`ENOENT` not present, `EFAULT` not mapped; `ESRCH` for every page if the process is
    /// gone, `EPERM`/`EACCES` if it may not be inspected).
    ///
    /// # Errors
    /// [`MoverError::Sys`] for an unexpected whole-call failure.
    pub fn query(
        &mut self,
        pid: i32,
        addrs: &[usize],
    ) -> Result<Vec<Result<NodeId, i32>>, MoverError> {
        let mut out = Vec::with_capacity(addrs.len());
        let mut status = vec![UNSET; self.cfg.chunk_pages.min(addrs.len())];
        for chunk in addrs.chunks(self.cfg.chunk_pages) {
            let st = &mut status[..chunk.len()];
            st.fill(UNSET);
            self.stats.query_calls += 1;
            match sys::move_pages(pid, chunk, None, st, 0) {
                Ok(_) => out.extend(st.iter().map(|&s| match u16::try_from(s) {
                    Ok(n) => Ok(NodeId(n)),
                    Err(_) => Err(s.checked_neg().unwrap_or(0)),
                })),
                Err(e) => {
                    let errno = e.errno().unwrap_or(0);
                    if whole_call_outcome(pid, errno).is_none() {
                        return Err(e.into());
                    }
                    out.extend(chunk.iter().map(|_| Err(errno)));
                }
            }
        }
        Ok(out)
    }
}

/// The daemon's page locator: `move_pages(2)` with no target nodes.
impl crate::source::locate::Locator for Mover {
    type Error = MoverError;

    fn nodes(&mut self, pid: u32, addrs: &[u64]) -> Result<Vec<Result<NodeId, i32>>, MoverError> {
        let pid = i32::try_from(pid).unwrap_or(i32::MAX);
        // Addresses above usize cannot be mapped here: reported not mapped (EFAULT).
        let ok: Vec<usize> = addrs
            .iter()
            .map(|a| usize::try_from(*a).unwrap_or(usize::MAX))
            .collect();
        self.query(pid, &ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::{page_size, AnonMapping};
    use tierd_engine::plan::{MigrationKind, PlannedMove};
    use tierd_engine::types::{CgroupId, PageRef, PageSize, Vpn};

    fn batch_of(addrs: &[usize], target: u16) -> MigrationBatch {
        MigrationBatch {
            id: 7,
            kind: MigrationKind::Promote,
            target: NodeId(target),
            cgroup: CgroupId::ROOT,
            pages: addrs
                .iter()
                .map(|&a| PlannedMove {
                    page: PageRef::base(SpaceId(1), Vpn::from_addr(a as u64)),
                    from: NodeId(1),
                })
                .collect(),
        }
    }

    fn touched(pages: usize) -> AnonMapping {
        let mut m = AnonMapping::new(pages * page_size()).expect("mmap");
        for p in m.as_mut_slice().chunks_mut(page_size()) {
            p[0] = 1;
        }
        m
    }

    #[test]
    fn status_values_map_to_outcomes() {
        assert_eq!(status_outcome(1), MoveOutcome::Moved(NodeId(1)));
        let f = |e: i32| status_outcome(-e);
        assert_eq!(f(libc::EBUSY), MoveOutcome::Failed(MoveError::Busy));
        assert_eq!(f(libc::ENOMEM), MoveOutcome::Failed(MoveError::NoMem));
        assert_eq!(f(libc::EACCES), MoveOutcome::Failed(MoveError::Access));
        assert_eq!(f(libc::ENOENT), MoveOutcome::Failed(MoveError::NotPresent));
        assert_eq!(f(libc::EFAULT), MoveOutcome::Failed(MoveError::Fault));
        assert_eq!(
            f(libc::EIO),
            MoveOutcome::Failed(MoveError::Other(libc::EIO))
        );
        assert_eq!(
            status_outcome(i32::MIN),
            MoveOutcome::Failed(MoveError::Other(0))
        );
    }

    #[test]
    fn unset_statuses_are_resolved_by_location() {
        let mut st = [1, UNSET, UNSET, -libc::EBUSY, UNSET];
        resolve_unset(&mut st, &[1, 2, 4], Some(&[1, 0, -libc::ENOENT]), NodeId(1));
        assert_eq!(st, [1, 1, -libc::EAGAIN, -libc::EBUSY, -libc::EAGAIN]);
        let mut st = [UNSET, UNSET];
        resolve_unset(&mut st, &[0, 1], None, NodeId(0));
        assert_eq!(st, [-libc::EAGAIN, -libc::EAGAIN]);
        assert_eq!(
            status_outcome(-libc::EAGAIN),
            MoveOutcome::Failed(MoveError::Other(libc::EAGAIN))
        );
    }

    #[test]
    fn own_pages_to_node0_in_chunks() {
        let m = touched(100);
        let addrs = m.page_addrs();
        let batch = batch_of(&addrs, 0);
        let mut mover = Mover::new(MoverConfig {
            chunk_pages: 32,
            move_all: false,
        });
        let report = mover
            .execute(&batch, |s| (s == SpaceId(1)).then_some(0))
            .expect("move");
        assert_eq!(report.batch, 7);
        assert_eq!(report.results.len(), 100);
        assert!(report
            .results
            .iter()
            .all(|r| r.outcome == MoveOutcome::Moved(NodeId(0))));
        let s = mover.stats();
        assert_eq!(s.move_calls, 4, "100 pages in chunks of 32");
        assert_eq!(s.pages_requested, 100);
        // The plan said node 1, so the mover counts them as moved.
        assert_eq!(s.pages_moved, 100);
        assert_eq!(s.bytes_moved, 100 * PAGE_SIZE);
        assert_eq!(s.failures.total(), 0);
        assert!(s.move_time > Duration::ZERO);
    }

    #[test]
    fn query_tells_touched_from_untouched() {
        let mut m = AnonMapping::new(8 * page_size()).expect("mmap");
        for i in [0usize, 3, 5] {
            m.as_mut_slice()[i * page_size()] = 1;
        }
        let mut mover = Mover::default();
        let q = mover.query(0, &m.page_addrs()).expect("query");
        for (i, r) in q.iter().enumerate() {
            if [0, 3, 5].contains(&i) {
                assert_eq!(*r, Ok(NodeId(0)), "page {i}");
            } else {
                assert_eq!(*r, Err(libc::ENOENT), "page {i}");
            }
        }
    }

    #[test]
    fn unmapped_address_is_a_fault_outcome() {
        // A page below vm.mmap_min_addr (64 KiB by default): no mapping can ever be there.
        // (Unmapping a buffer of our own raced with the other test threads, whose next mmap
        // could land on the freed range and make the page "not present" instead.)
        let a = 0x1000;
        let mut mover = Mover::default();
        let report = mover
            .execute(&batch_of(&[a], 0), |_| Some(0))
            .expect("move");
        assert_eq!(
            report.results[0].outcome,
            MoveOutcome::Failed(MoveError::Fault)
        );
        assert_eq!(mover.stats().failures.fault, 1);
        assert_eq!(mover.query(0, &[a]).expect("q"), vec![Err(libc::EFAULT)]);
    }

    #[test]
    fn missing_space_is_no_process() {
        let m = touched(3);
        let mut mover = Mover::default();
        let report = mover
            .execute(&batch_of(&m.page_addrs(), 0), |_| None)
            .expect("move");
        assert!(report
            .results
            .iter()
            .all(|r| r.outcome == MoveOutcome::Failed(MoveError::NoProcess)));
        assert_eq!(mover.stats().failures.no_process, 3);
        assert_eq!(mover.stats().move_calls, 0);
    }

    fn pid_of(child: &std::process::Child) -> i32 {
        i32::try_from(child.id()).expect("pid")
    }

    #[test]
    fn reaped_process_is_counted_not_raised() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = pid_of(&child);
        child.wait().expect("wait");
        let m = touched(4);
        let mut mover = Mover::default();
        let report = mover
            .execute(&batch_of(&m.page_addrs(), 0), |_| Some(pid))
            .expect("ESRCH is an outcome");
        assert!(report
            .results
            .iter()
            .all(|r| r.outcome == MoveOutcome::Failed(MoveError::NoProcess)));
        assert_eq!(mover.stats().failures.no_process, 4);
        assert_eq!(mover.stats().move_calls, 1);
        assert_eq!(
            mover.query(pid, &m.page_addrs()[..1]).expect("q"),
            vec![Err(libc::ESRCH)]
        );
    }

    #[test]
    fn zombie_process_is_no_process() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = pid_of(&child);
        // Wait (without reaping) until it is a zombie: state 'Z' in /proc/PID/stat.
        let stat = format!("/proc/{pid}/stat");
        let zombie = (0..400).any(|_| {
            let s = std::fs::read_to_string(&stat).unwrap_or_default();
            let z = s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'));
            if !z {
                std::thread::sleep(Duration::from_millis(5));
            }
            z
        });
        assert!(zombie, "child {pid} did not become a zombie");
        let mut mover = Mover::default();
        let report = mover
            .execute(&batch_of(&[0x10_0000], 0), |_| Some(pid))
            .expect("zombie is an outcome");
        assert_eq!(
            report.results[0].outcome,
            MoveOutcome::Failed(MoveError::NoProcess)
        );
        // What the kernel says for a zombie: find_mm_struct() finds the task but no mm.
        assert_eq!(
            mover.query(pid, &[0x10_0000]).expect("q"),
            vec![Err(libc::EINVAL)]
        );
        assert_eq!(mover.stats().failures.no_process, 1);
        child.wait().expect("reap");
    }

    #[test]
    fn missing_target_node_is_an_error() {
        let m = touched(2);
        let mut mover = Mover::default();
        let e = mover
            .execute(&batch_of(&m.page_addrs(), 7), |_| Some(0))
            .expect_err("node 7 has no memory");
        assert!(
            matches!(
                e,
                MoverError::NoSuchNode {
                    node: NodeId(7),
                    pid: 0
                }
            ),
            "{e}"
        );
        // Nothing moved, and the pages are still where they were.
        let q = mover.query(0, &m.page_addrs()).expect("q");
        assert!(q.iter().all(|r| *r == Ok(NodeId(0))), "{q:?}");
    }

    const HUGE: usize = 2 << 20;

    /// A 4 MiB anonymous mapping advised for THP, with the 2 MiB at its first aligned address
    /// (returned) faulted in: a THP where the host gives one.
    fn thp_mapping() -> (AnonMapping, usize) {
        let mut m = AnonMapping::new(2 * HUGE).expect("mmap");
        m.advise_hugepage().expect("madvise");
        let head = m.addr().next_multiple_of(HUGE);
        let off = head - m.addr();
        for p in m.as_mut_slice()[off..off + HUGE].chunks_mut(page_size()) {
            p[0] = 1;
        }
        (m, head)
    }

    #[test]
    fn huge_page_is_one_address_of_512_pages() {
        // Held to the end: the mapping is unmapped on drop.
        let (_m, head) = thp_mapping();
        let batch = MigrationBatch {
            id: 1,
            kind: MigrationKind::Promote,
            target: NodeId(0),
            cgroup: CgroupId::ROOT,
            pages: vec![PlannedMove {
                page: PageRef::huge(SpaceId(3), Vpn::from_addr(head as u64)),
                from: NodeId(1),
            }],
        };
        let mut mover = Mover::default();
        let report = mover.execute(&batch, |_| Some(0)).expect("move");
        assert_eq!(report.results.len(), 1);
        assert_eq!(report.results[0].outcome, MoveOutcome::Moved(NodeId(0)));
        let s = mover.stats();
        assert_eq!(
            (s.move_calls, s.pages_requested, s.pages_moved),
            (1, 512, 512)
        );
        assert_eq!(s.bytes_moved, 2 << 20);
        // Every subpage is where its head went.
        let subpages: Vec<usize> = (0..512).map(|i| head + i * page_size()).collect();
        let q = mover.query(0, &subpages).expect("query");
        assert!(q.iter().all(|r| *r == Ok(NodeId(0))), "{q:?}");
        // With a second memory node, move the folio there and back through its head alone:
        // all 512 subpages follow it (a THP moves whole; base pages would not have).
        let is_thp = anon_huge_kib(head) >= 2048;
        let there = MigrationBatch {
            target: NodeId(1),
            ..batch.clone()
        };
        match mover.execute(&there, |_| Some(0)) {
            // One memory node (this host): nothing more to see.
            Err(MoverError::NoSuchNode { .. }) => {}
            Err(e) => panic!("{e}"),
            Ok(r) => {
                assert_eq!(r.results[0].outcome, MoveOutcome::Moved(NodeId(1)));
                let q = mover.query(0, &subpages).expect("query");
                if is_thp {
                    assert!(q.iter().all(|r| *r == Ok(NodeId(1))), "{q:?}");
                } else {
                    // THP off here: the head was a base page and moved alone.
                    assert_eq!(q[0], Ok(NodeId(1)));
                }
            }
        }
    }

    /// `AnonHugePages` of the mapping of ours that holds `addr`, in KiB (0 when not found).
    fn anon_huge_kib(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((a, b)) = range.split_once('-') {
                    if let (Ok(a), Ok(b)) =
                        (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                    {
                        inside = a <= addr && addr < b;
                        continue;
                    }
                }
            }
            if inside {
                if let Some(v) = line.strip_prefix("AnonHugePages:") {
                    return v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                }
            }
        }
        0
    }

    #[test]
    fn overlapping_refs_are_found_whatever_the_batch_order() {
        let huge = 2u64 << 20;
        let items = |addrs: &[usize]| -> Vec<Item> {
            addrs
                .iter()
                .enumerate()
                .map(|(index, &addr)| Item {
                    index,
                    addr,
                    pages: 1,
                })
                .collect()
        };
        // A base page inside a huge ref, listed first; the huge ref; a base page after it; the
        // huge ref again.
        let h = 0x4000_0000usize;
        let it = items(&[h + 0x3000, h, h + (2 << 20), h]);
        let bytes = [PAGE_SIZE, huge, PAGE_SIZE, huge];
        let mut d = overlapping(&it, &bytes);
        d.sort_unstable();
        assert_eq!(d, vec![(0, 1), (3, 1)]);
        // Disjoint refs: nothing dropped.
        let it = items(&[h, h + (2 << 20), h + (4 << 20) + 0x1000]);
        assert!(overlapping(&it, &[huge, huge, PAGE_SIZE]).is_empty());
        // The same base page twice.
        let it = items(&[h + 0x1000, h + 0x1000]);
        assert_eq!(overlapping(&it, &[PAGE_SIZE, PAGE_SIZE]), vec![(1, 0)]);
    }

    #[test]
    fn a_folio_named_twice_in_a_batch_reaches_the_kernel_once() {
        // Held to the end: the mapping is unmapped on drop.
        let (_m, head) = thp_mapping();
        let at = |addr: usize, size: PageSize| PlannedMove {
            page: PageRef::sized(SpaceId(3), Vpn::from_addr(addr as u64), size),
            from: NodeId(1),
        };
        // A subpage of the folio first, then the folio, then the folio again.
        let batch = MigrationBatch {
            id: 2,
            kind: MigrationKind::Promote,
            target: NodeId(0),
            cgroup: CgroupId::ROOT,
            pages: vec![
                at(head + 5 * page_size(), PageSize::Base),
                at(head, PageSize::Huge2M),
                at(head, PageSize::Huge2M),
            ],
        };
        let mut mover = Mover::default();
        let report = mover.execute(&batch, |_| Some(0)).expect("move");
        assert_eq!(report.results.len(), 3, "one result per ref");
        assert!(report
            .results
            .iter()
            .all(|r| r.outcome == MoveOutcome::Moved(NodeId(0))));
        let s = mover.stats();
        // One address in one call; the folio's 512 pages counted once, not 1025 times.
        assert_eq!(
            (
                s.move_calls,
                s.pages_requested,
                s.pages_moved,
                s.overlapping_refs
            ),
            (1, 512, 512, 2)
        );
        assert_eq!(s.failures.total(), 0);
    }

    #[test]
    fn move_addrs_counts_already_there() {
        let m = touched(16);
        let mut mover = Mover::default();
        let out = mover
            .move_addrs(0, &m.page_addrs(), NodeId(0), NodeId(0))
            .expect("move");
        assert!(out.iter().all(|o| *o == MoveOutcome::Moved(NodeId(0))));
        let s = mover.stats();
        assert_eq!(
            (s.pages_already_there, s.pages_moved, s.bytes_moved),
            (16, 0, 0)
        );
        assert!(s.requested_mib_per_s().is_some_and(|r| r > 0.0));
        assert_eq!(s.moved_mib_per_s(), Some(0.0));
    }
}
