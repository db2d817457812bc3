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

/// CPU time to migrate one base page in the kernel (isolate, unmap, copy 4 KiB, remap, TLB
/// shootdown), ns. Derived from seed A H5: kmigrated used 38 s to promote 3.15 M pages =
/// 12.1 us per page (this includes walking the hot maps, which is small next to migration).
pub const MIGRATE_NS_PER_PAGE: f64 = 12_000.0;

/// Extra cost of one `move_pages(2)` call beyond its pages (syscall entry, per-call
/// `lru_add_drain_all()`, mm lock), ns. Assumption: a few microseconds, as for any syscall
/// that takes mmap_lock and drains per-CPU LRU lists.
pub const MOVE_PAGES_CALL_NS: f64 = 5_000.0;

/// tierd engine time per observation ingested, ns. Measured: the hotness store ingests 43-155 M
/// observations/s on one core (`cargo bench -p tierd-engine --bench hotness`); with the
/// engine's filtering around it, 10 ns is a conservative round figure.
pub const ENGINE_NS_PER_OBSERVATION: f64 = 10.0;

/// Cost of checking one page's accessed bit in a userspace scan (reading `/proc/PID/pagemap`
/// and the idle-page bitmap, or a DAMON region sample: an rmap walk plus a PTE test-and-clear),
/// ns. Assumption: DAMON's documentation puts its whole monitoring overhead at "0.x %" of one
/// CPU for thousands of regions sampled every 5 ms, i.e. a few microseconds per check.
pub const ABIT_CHECK_NS: f64 = 2_000.0;

/// Cost of a batched accessed-bit scan per page (idle page tracking walks the bitmap in
/// 64-page words, no rmap walk per page), ns. Assumption.
pub const ABIT_SCAN_NS_PER_PAGE: f64 = 50.0;
