//! Named costs of the simulated mechanisms, each traced to a source or a stated assumption.
//!
//! "Derived" constants are computed from a published total divided by a published count;
//! "fitted" ones were chosen so that one published figure comes out, and that figure then no
//! longer checks the model (docs/simulator.md lists which).

/// Time an AMD IBS sample costs the CPU it interrupts (NMI handler, ring buffer push), ns.
/// Derived from seed B: 2,602,455 us of sample handling for 652,647 samples = 3.99 us.
pub const SAMPLE_INTERRUPT_NS: f64 = 3_990.0;

/// Hardware samples per memory access at a sampling period of one op: the product of ops
/// per access of a pointer chase, the fraction of tagged ops that are loads missing the L3
/// (l3miss-only keeps only those), and the share of time the profiler runs (it is stopped in
/// kernel mode). Samples per second = accesses per second x this / period.
///
/// **Fitted** to seed A H10 (1.40 M hwhint events in 240 s at period 10000); H5's event count
/// (5.91 M at period 5008) then checks it.
pub const IBS_SAMPLES_PER_ACCESS: f64 = 0.32;

/// kmigrated's CPU time per promoted page, ns, for configurations that model the kernel's
/// pghot (`kernel_pghot = true`). Derived from seed A H5: kmigrated used 38 s to promote
/// 3.15 M pages = 12.1 us per page. It includes walking every PFN of each section whose hot
/// bit is set (`kmigrated_walk_zone()`), which is why it is six times DAMON's per-page cost.
pub const KMIGRATED_NS_PER_PAGE: f64 = 12_000.0;

/// Fixed CPU cost of migrating one folio through the kernel's migrate path when no other
/// thread of its mm runs, ns: isolate it from the LRU, unmap it and install migration
/// entries (mm/migrate.c `migrate_folio_unmap()`, `try_to_migrate()`), allocate the new
/// folio, remap it (`remove_migration_ptes()`) and flush the TLB of the one CPU that ran it.
/// **Assumed**: 1.6 us, so that one 4 KiB page costs [`MOVE_PAGES_NS_PER_PAGE`] with
/// [`MIGRATE_COPY_NS_PER_KIB`]; bounded above by seed A D3 (13 s of kdamond for 6 M pages
/// allows at most 2.2 us per page with the copy).
pub const MIGRATE_FOLIO_NS: f64 = 1_600.0;

/// Cost of copying the folio's data, ns per KiB (`folio_mc_copy()` in
/// `migrate_folio_move()`): 100 ns per KiB is about 10 GB/s, one core's streaming copy
/// between two nodes. **Assumed** (no seed measures a copy alone); a 4 KiB page costs 0.4 us,
/// a 2 MiB folio 205 us.
pub const MIGRATE_COPY_NS_PER_KIB: f64 = 100.0;

/// [`MIGRATE_COPY_NS_PER_KIB`] for one 4 KiB base page, ns.
pub const MIGRATE_COPY_NS_PER_PAGE: f64 = MIGRATE_COPY_NS_PER_KIB * 4.0;

/// CPU time `move_pages(2)` spends per base page (isolate, unmap, copy 4 KiB, remap, TLB
/// shootdown), ns, for tierd's own configurations: one folio's fixed part plus one page's
/// copy, 1.6 + 0.4 = 2 us (**derived** from the two assumed parts above). The same kernel
/// migration path that DAMON's `migrate_hot` and NUMA balancing's `migrate_misplaced_folio()`
/// use, so the same figure as the DAMON model's migration cost (1.5 us per folio + 0.5 us
/// copy per page); NUMA balancing adds the contention of threads sharing the page
/// (crate::numab::migrate_cost_ns).
pub const MOVE_PAGES_NS_PER_PAGE: f64 = MIGRATE_FOLIO_NS + MIGRATE_COPY_NS_PER_PAGE;

/// Extra cost of one `move_pages(2)` call beyond its pages (syscall entry, per-call
/// `lru_add_drain_all()`, mm lock), ns. Assumption: a few microseconds, as for any syscall
/// that takes mmap_lock and drains per-CPU LRU lists.
pub const MOVE_PAGES_CALL_NS: f64 = 5_000.0;

/// tierd engine time per observation ingested, ns. Measured: the hotness store ingests 43-155 M
/// observations/s on one core (`cargo bench -p tierd-engine --bench hotness`); with the
/// engine's filtering around it, 10 ns is a conservative round figure.
pub const ENGINE_NS_PER_OBSERVATION: f64 = 10.0;

/// Cost of checking one page's accessed bit the way DAMON samples a region: an rmap walk to
/// the mapping PTEs, a test-and-clear of the accessed bit and a TLB flush of that page, ns.
/// Assumption: one to two microseconds, the usual cost of an rmap walk plus a single-page
/// shootdown; used by the DAMON model, not fitted.
pub const ABIT_CHECK_NS: f64 = 2_000.0;

/// Cost of one page of an accessed-bit scan by idle page tracking, ns: writing the idle
/// bitmap clears the page's young bits through an rmap walk (mm/page_idle.c
/// `page_idle_clear_pte_refs()`), and reading it back is cheap. Assumption: a quarter of a
/// microsecond per page, an rmap walk of a singly-mapped anonymous page.
pub const ABIT_SCAN_NS_PER_PAGE: f64 = 250.0;
