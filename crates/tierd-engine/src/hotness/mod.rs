//! Per-page hotness records: pghot's record formats and a store for them per slow node.
//!
//! # Model
//!
//! pghot (the kernel's proposed "mm: Hot page tracking and promotion infrastructure", source:
//! mm/pghot.c) keeps one small record per page of a lower-tier node. Every reported access
//! (`pghot_record_access()`) updates the page's record: an access more than
//! `pghot_promote_freq_window_ms` after the previous one starts a new window (frequency 1);
//! otherwise the frequency grows by one, saturating. Once the frequency reaches
//! `pghot_freq_threshold` the record is marked migrate-ready and the memory section it lives in
//! is flagged hot (`PGHOT_SECTION_HOT_BIT`). A per-node thread, kmigrated, walks the hot
//! sections, consumes every ready record (consuming resets it to 0, `pghot_get_record()`),
//! and promotes the pages.
//!
//! tierd does the same in userspace: [`record`] holds both record formats bit-exact,
//! [`store::HotnessStore`] holds the records of one slow node and plays kmigrated's walk
//! ([`HotnessStore::drain_ready`]). Promotion policy (rate limit, adaptive threshold,
//! free-space bypass) is elsewhere; this module only answers "which pages are ready".
//!
//! # The two formats (source: include/linux/pghot.h)
//!
//! ```text
//! default (u8, mm/pghot-default.c)
//!   bit 7 ready | bits 2-6 time = (jiffies >> 7) & 0x1F | bits 0-1 freq
//!   freq max 3; window default 3000 ms, max 3968; ages in 128 ms buckets, alias after 4096 ms
//! precise (u32, mm/pghot-precise.c)
//!   bit 31 ready | bits 27-30 unused | bits 13-26 time = jiffies & 0x3FFF | bits 10-12 freq
//!   | bits 0-9 nid
//!   freq max 7; window default 5000 ms, max 16383; ages exact to 1 ms, alias after 16384 ms
//! ```
//!
//! Default mode promotes every page to `pghot_target_nid`; precise mode stores the accessing
//! node (the target node when the source does not know it) and promotes there.
//!
//! # Memory
//!
//! Records live in chunks of 512 consecutive virtual pages (one PMD, so a 2 MiB huge page is
//! exactly one chunk), allocated on the first access to the chunk, so memory grows with the
//! pages that are tracked, not with machine RAM. A huge folio (2 MiB, or 1 GiB in the chunk
//! of its head) costs one chunk for one record. Measured with
//! [`HotnessStore::memory_bytes`] (record arena + chunk metadata + hash index, as allocated;
//! `benches/hotness.rs` prints the table):
//!
//! | mode    | 1M pages, dense       | 100k pages, one per chunk   |
//! |---------|-----------------------|-----------------------------|
//! | default | 1.26 B/page           | 713 B/page                  |
//! | precise | 4.55 B/page           | 2626 B/page                 |
//!
//! A dense page costs its record (1 or 4 B) plus 32 B of chunk metadata and about 50 B of
//! index per 512 pages (0.16 B/page), plus the arena's growth slack (it grows by a quarter, so
//! at most ~25% of it is spare; about 10% in these figures). A sparse page pays for a whole
//! chunk: 512 B or 2 KiB plus metadata and index. The kernel's cost is 1 or 4 B per page of
//! the whole lower tier (256 MiB or 1 GiB per TiB), whether accessed or not.
//!
//! # Deviations from the kernel
//!
//! * **Ready is sticky in both formats.** Default mode keeps the ready bit across updates
//!   because it starts from the old word; mm/pghot-precise.c rebuilds the word from 0, so a
//!   ready page whose next access opens a new window loses its ready bit before kmigrated
//!   sees it. tierd keeps it until consumed in both modes: a page that became ready must not
//!   lose candidacy because the promoter was late.
//! * **Keyed by (address space, vpn), not PFN.** Unprivileged userspace sees virtual pages;
//!   a shared page mapped in two processes has two records.
//! * **Records are allocated per 512-page chunk on demand** (kernel: one hot map per 128 MiB
//!   memory section of every lower-tier node, allocated at boot/hotplug), and the hot flag is
//!   per chunk rather than per section. Chunks are freed when their last record is consumed
//!   or removed, when their address space is forgotten, or by [`HotnessStore::sweep`] when
//!   idle (the kernel never frees records).
//! * **Huge pages.** One record per folio: a 2 MiB or 1 GiB folio is tracked by the record at
//!   slot 0 of its head's chunk (the chunk holds the folio size), as the kernel uses the
//!   folio's first PFN, and drained with its size. Records never overlap: a base-page access
//!   inside a tracked THP (split), a THP access over base records (collapse), or any other
//!   size inside or over a tracked 1 GiB page (an unmap and remap: hugetlb pages are not split
//!   while mapped, mm/hugetlb.c) drops the old records, whose folio is gone
//!   ([`store`]'s docs). The kernel keeps per-PFN records across a split.
//!   [`HotnessStore::tracked_pages`] counts records (folios),
//!   [`HotnessStore::tracked_base_pages`] their base pages.
//! * **No filtering.** The kernel drops accesses to toptier pages, non-LRU pages, and
//!   accesses from the page's own node; the caller does that here (a store is per slow node).
//! * **Single-threaded.** Records are reached through `&mut`, so the kernel's `try_cmpxchg`
//!   loops are plain stores; the words produced are the same.
//! * **`HZ=1000` fixed**: one jiffy is one millisecond ([`crate::types::Nanos::jiffies`]).
//! * **Node ids above 1023** are masked to the 10-bit field in precise mode (the kernel
//!   refuses them; [`HotnessParams::validate`] does for the target node).

pub mod heat;
pub mod record;
pub mod store;

pub use heat::{
    density_bin, fit_threshold, heat_bin, size_shift, HeatMap, Tier, DENSITY_BINS, HEAT_BINS,
    NO_PROMOTION_BIN, SIZE_SHIFT_MAX,
};
pub use record::{Consumed, DefaultRecord, PreciseRecord};
pub use store::{HotnessMode, HotnessParams, HotnessParamsError, HotnessStore, ReadyPage};
