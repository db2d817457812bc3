//! # tierd-engine: the pghot model of hot-page tracking and promotion
//!
//! The engine decides which pages of a tiered-memory machine should move, and where. It is
//! pure: no I/O, no clock, no threads, no libc. Observations come in, a migration plan goes
//! out, a report of what moved comes back. The Linux daemon (`tierd-linux`) and the simulator
//! (`tierd-sim`) drive it through one trait, [`backend::Backend`], and one loop,
//! [`backend::step`].
//!
//! It follows the kernel's proposed pghot infrastructure (mm/pghot.c, Bharata B Rao, AMD,
//! RFC v3-v8), with NUMA balancing's promotion rules (kernel/sched/fair.c), memory tiers
//! (mm/memory-tiers.c), mempolicy semantics (mm/mempolicy.c), and per-cgroup fast-tier
//! fairness (Kaiyang Zhao's 2024 RFC).
//!
//! ## Data path
//!
//! ```text
//!  source (hint fault, hw sample, A-bit scan)
//!     │  Observation { page, page_node, accessing_node, source, time }
//!     ▼
//!  Engine::observe ── slow-tier page ──▶ HotnessStore (per slow node; 1 B or 4 B records)
//!     │              └ top-tier page ──▶ fast index (recency, for demotion)
//!     ▼
//!  Engine::tick(now, usage) ── demoter (watermarks) + promoter (kmigrated model)
//!     │  MigrationPlan { batches ≤ batch_nr folios, per (target node, cgroup) }
//!     ▼
//!  backend executes (move_pages(2) / simulated move)
//!     │  MigrationReport { per page: moved to node, or failed with errno }
//!     ▼
//!  Engine::apply ── counters (pgpromote_success, failures, pgdemote_*, ping-pong)
//! ```
//!
//! ## Layout
//!
//! - [`types`]: newtypes for nodes, spaces, pages, bytes, time.
//! - [`topology`]: nodes, abstract distances, tiers, demotion targets (mm/memory-tiers.c).
//! - [`hotness`]: both pghot record formats, bit-exact, the per-node record store, and the
//!   per-page heat histogram of the relative threshold (`hotness::heat`).
//! - [`sources`]: the observation type and the per-source enable mask.
//! - [`policy`]: owners, mempolicy nodemasks, the cgroup fast-tier share.
//! - [`ratelimit`]: the kernel's rate limiter and adaptive threshold, and tierd's sliding one.
//! - [`config`]: tunables with the kernel's defaults and ranges.
//! - [`engine`]: the promoter, the demoter, ping-pong, report accounting.
//! - [`feedback`]: DAMON's feedback loop, for backends that tune a sampling interval.
//! - [`regions`]: what a region-based source's (DAMON's) counts mean for a region's pages:
//!   the relative floor and the slow-part test, shared by the daemon and the simulator.
//! - [`plan`]: usage in, plan out, report back.
//! - [`stats`]: counters and gauges, each documented with kind and unit.
//! - [`backend`]: the backend trait and the step function.
//! - `chunk` and `chunkmap` (private): the chunk key and slot index both per-page arenas
//!   share, and the chunked page map behind the fast index, the move history, the back-off
//!   list and the heat histogram's entries.
//!
//! ## Huge pages
//!
//! A page the engine handles is a **folio** ([`types::PageRef`] with its [`types::PageSize`]:
//! 4 KiB, 2 MiB THP or hugetlb, 1 GiB hugetlb), named by its head, moved whole. Every
//! structure holds one entry per folio (one hotness record, one fast-index entry, one heat),
//! and never two folios over the same virtual page: a base page seen inside a tracked THP
//! (split), a THP over tracked base pages (collapse) or any size change inside a 1 GiB page
//! (unmap and remap: hugetlb pages are not split while mapped) drops the old folio's entries.
//! Planning charges a folio's full bytes (room, watermarks, demotion need, cgroup share, rate
//! limit; a folio larger than the whole per-second budget is admitted alone as a debt, see
//! [`ratelimit::SlidingWindowLimiter`]); `batch_nr` counts folios and a batch's bytes are
//! bounded ([`engine::batch_bytes`]); a pass never plans two moves over one page. Page counters
//! count base pages as the kernel's do, and `thp_migration_success` / `thp_migration_fail`
//! count huge folios ([`stats`]).
//!
//! ## Limitations
//!
//! - Time is modelled at `HZ=1000` (one jiffy = 1 ms) for the record time fields.
//! - A [`types::NodeMask`] holds 64 nodes; the kernel allows up to 1024.
#![forbid(unsafe_code)]

pub mod backend;
pub mod config;
pub mod engine;
pub mod feedback;

mod chunk;
mod chunkmap;
pub mod hotness;
pub mod plan;
pub mod policy;
pub mod ratelimit;
pub mod regions;
pub mod sources;
pub mod stats;
pub mod topology;
pub mod types;

pub use backend::{step, Backend, OwnerUpdate, StepBuffers, StepOutcome};
pub use config::{
    AccessingNode, ConfigError, DemotionConfig, EngineConfig, PreferredMany, ThresholdMode,
};
pub use engine::{Engine, ReconfigureError};
pub use plan::{
    CgroupUsage, MigrationBatch, MigrationKind, MigrationPlan, MigrationReport, MoveError,
    MoveOutcome, NodeUsage, PageResult, PlannedMove, SystemUsage,
};
pub use sources::{IdleObservation, Observation, SourceKind, SourceMask};
pub use stats::Stats;
