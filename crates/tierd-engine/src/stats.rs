//! The engine's counters and gauges.
//!
//! Every statistic is a documented field with a kind and a unit, declared once in a table;
//! exporters (Prometheus text, JSON, the compare table) read the descriptions from
//! [`StatDesc`] lists instead of repeating names. Names follow the kernel's vmstat names where
//! the kernel has one (mm/vmstat.c `vmstat_text`: `pgpromote_success`, `pgpromote_candidate`,
//! `pgpromote_candidate_nrl`, `pgdemote_*`; pghot's `pghot_recorded_*`, Documentation/admin-guide/mm/pghot.rst);
//! tierd's own additions say so in their description.
//!
//! Huge pages: every `Pages` statistic counts base pages (a 2 MiB folio counts 512, a 1 GiB
//! folio 262144), as the kernel's `pgpromote_success` and `pgdemote_*` count
//! `folio_nr_pages()`; so bytes migrated = (`pgpromote_success` + `pgdemote_success`) * 4096.
//! `thp_migration_success` / `thp_migration_fail` count huge folios, one each, as the
//! kernel's vmstat events of those names count THPs (mm/migrate.c `migrate_pages()`). The
//! kernel leaves hugetlb folios out of them (they migrate through `migrate_hugetlbs()` and
//! count only in `pgmigrate_success`); tierd counts every huge folio it moves, hugetlb too.
//!
//! The table is a small `macro_rules!` because no maintained crate derives "struct + static
//! metadata" without also owning the export format (scx_stats is tied to scx's socket
//! protocol); the macro is twenty lines and keeps names, docs, kinds and units in one place.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::sources::SourceKind;
use crate::types::NodeId;

/// Counter (only goes up) or gauge (a level).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StatKind {
    /// Monotonic count since start.
    Counter,
    /// A current level.
    Gauge,
}

/// What a statistic counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StatUnit {
    /// Base (4 KiB) pages; a 2 MiB folio counts 512 and a 1 GiB folio 262144, as in the
    /// kernel's page-based counters (`pgpromote_success` counts `folio_nr_pages()`).
    Pages,
    /// Events (observations, runs, batches).
    Events,
    /// Bytes.
    Bytes,
    /// Milliseconds.
    Milliseconds,
}

/// The description of one statistic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StatDesc {
    /// The name (kernel name where there is one).
    pub name: &'static str,
    /// Counter or gauge.
    pub kind: StatKind,
    /// Unit.
    pub unit: StatUnit,
    /// One-line description.
    pub help: &'static str,
}

macro_rules! stats_struct {
    ($(#[$meta:meta])* $name:ident { $( $field:ident : $kind:ident, $unit:ident, $help:literal; )* }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
        pub struct $name {
            $( #[doc = $help] pub $field: u64, )*
        }
        impl $name {
            /// Descriptions of every field, in declaration order.
            pub const FIELDS: &'static [StatDesc] = &[
                $( StatDesc { name: stringify!($field), kind: StatKind::$kind, unit: StatUnit::$unit, help: $help }, )*
            ];
            /// Every field's description with its value, in declaration order.
            #[must_use]
            pub fn values(&self) -> Vec<(&'static StatDesc, u64)> {
                let v = [ $( self.$field, )* ];
                Self::FIELDS.iter().zip(v).collect()
            }
        }
    };
}

stats_struct! {
    /// Engine-wide counters and gauges.
    EngineStats {
        pghot_recorded_accesses: Counter, Events, "Observations recorded into a slow-tier page's hotness record (pghot_recorded_accesses).";
        pghot_recorded_hintfaults: Counter, Events, "Hint-fault observations recorded (pghot_recorded_hintfaults).";
        pghot_recorded_hwhints: Counter, Events, "Hardware-sample observations recorded (pghot_recorded_hwhints).";
        pghot_recorded_pgtscans: Counter, Events, "Accessed-bit scan observations recorded (pghot_recorded_pgtscans, pghot v2-v5).";
        pghot_dropped_disabled: Counter, Events, "tierd: observations from a disabled source, dropped.";
        pghot_ignored_same_node: Counter, Events, "tierd: observations where the accessing node is the page's node (pghot returns early).";
        pghot_ignored_unknown_node: Counter, Events, "tierd: observations naming a node the topology does not have.";
        fast_observed: Counter, Events, "tierd: observations of pages on the top tier, kept for demotion only.";
        idle_noted: Counter, Events, "tierd: idle facts (a page not accessed since a time, from DAMON's zero-access regions) about top-tier pages, given to the demoter; slow-tier ones are ignored.";
        pgpromote_candidate: Counter, Pages, "Pages that passed the hot test and were charged to the rate limiter (pgpromote_candidate).";
        pgpromote_candidate_nrl: Counter, Pages, "Pages promoted without the hot test because the target had plenty of free space (pgpromote_candidate_nrl).";
        pgpromote_planned: Counter, Pages, "tierd: pages put in a promotion plan.";
        pgpromote_success: Counter, Pages, "Pages promoted (pgpromote_success).";
        pgpromote_fail_busy: Counter, Pages, "tierd: promotions that failed with EBUSY (page busy or pinned).";
        pgpromote_fail_nomem: Counter, Pages, "tierd: promotions that failed with ENOMEM (target full).";
        pgpromote_fail_access: Counter, Pages, "tierd: promotions that failed with EACCES or EPERM (shared page, no right).";
        pgpromote_fail_gone: Counter, Pages, "tierd: promotions whose process had exited (ESRCH).";
        pgpromote_fail_fault: Counter, Pages, "tierd: promotions of pages no longer mapped or present (EFAULT, ENOENT).";
        pgpromote_fail_other: Counter, Pages, "tierd: promotions that failed for another reason.";
        pgpromote_deferred: Counter, Pages, "tierd: planned promotions held back while the backend asks the page's own accessed bit (idle page tracking) before moving it.";
        pgpromote_untouched: Counter, Pages, "tierd: planned promotions refused because the page was found untouched for a whole verification window (its region's accesses were its neighbours').";
        pgpromote_cold: Counter, Pages, "tierd: ready pages rejected as not hot enough: last access older than the hot threshold (fixed mode), or heat below the relative threshold.";
        pgpromote_rate_limited: Counter, Pages, "tierd: ready pages rejected by the per-node rate limit.";
        pgpromote_policy_skipped: Counter, Pages, "tierd: ready pages with no fast node allowed by their mempolicy.";
        pgpromote_cgroup_throttled: Counter, Pages, "tierd: ready pages thinned because their cgroup is over its fast-tier share under pressure.";
        pgpromote_no_room: Counter, Pages, "tierd: ready pages not promoted because the target would drop below its demotion high watermark (as migrate_balanced_pgdat() refuses).";
        pgpromote_already_there: Counter, Pages, "tierd: ready pages already on their target node.";
        pgdemote_candidate: Counter, Pages, "tierd: pages put in a demotion plan.";
        pgdemote_idle: Counter, Pages, "tierd: pages put in a demotion plan because no source saw them accessed for demotion.idle_after_ms, with no memory pressure (also in pgdemote_candidate); pingpong_promoted counts those that came back.";
        pgdemote_success: Counter, Pages, "Pages demoted by tierd (the kernel's pgdemote_* count its own demotions).";
        pgdemote_fail: Counter, Pages, "tierd: demotions that failed, any reason.";
        thp_migration_success: Counter, Events, "Huge folios (2 MiB THP or hugetlb, 1 GiB hugetlb) moved by tierd, promotion or demotion, one per folio as the kernel's vmstat thp_migration_success counts a THP (the kernel's leaves hugetlb out); their base pages are in pgpromote_success / pgdemote_success.";
        thp_migration_fail: Counter, Events, "Huge folios tierd failed to move, promotion or demotion, one per folio (thp_migration_fail); their base pages are in the pgpromote_fail_* / pgdemote_fail counters.";
        pgmigrate_overlap_skipped: Counter, Pages, "tierd: pages not planned because a folio over the same virtual pages was already in this pass's plan (a page is never planned twice).";
        pgmigrate_backoff: Counter, Pages, "tierd: pages put in back-off after failing to move for a reason of their own (EBUSY: pinned or busy; EACCES: shared or outside the cpuset); each further failure doubles the wait, 1 s up to 10 min.";
        pgmigrate_backoff_skipped: Counter, Pages, "tierd: ready pages skipped because they are backed off.";
        pgdemote_policy_skipped: Counter, Pages, "tierd: cold pages not demoted because no lower node is allowed by their mempolicy.";
        pingpong_demoted: Counter, Pages, "tierd: pages demoted within pingpong_window_ms of their promotion.";
        pingpong_promoted: Counter, Pages, "tierd: pages promoted within pingpong_window_ms of their demotion.";
        promoter_runs: Counter, Events, "tierd: promoter passes (one per slow node per interval).";
        plan_batches: Counter, Events, "tierd: migration batches planned.";
        tracked_pages: Gauge, Pages, "tierd: slow-tier pages with a live hotness record (one record per folio; a 2 MiB folio counts 512 pages).";
        ready_pages: Gauge, Pages, "tierd: pages whose record is marked ready and not yet consumed (a 2 MiB folio counts 512).";
        hotness_store_bytes: Gauge, Bytes, "tierd: memory used by the hotness records and their index.";
        fast_index_pages: Gauge, Pages, "tierd: top-tier pages known to the demoter.";
        heat_tracked_pages: Gauge, Pages, "tierd: pages with a heat (relative threshold), both tiers.";
        promote_heat_threshold: Gauge, Events, "tierd: the heat bin a slow page needs (relative threshold): heat per base page >= 2^(bin-1) decayed accesses; 33 promotes nothing; 0 below one base page's least heat (huge folios only).";
        promote_room_pages: Gauge, Pages, "tierd: free room on the promotion targets above their watermarks, as the relative threshold sized it.";
    }
}

stats_struct! {
    /// Per-node counters, keyed by node in [`Stats::nodes`]; promotion figures are per
    /// target node, as the kernel keeps them in the target's `pglist_data`.
    NodeStats {
        pgpromote_candidate: Counter, Pages, "Pages charged to this node's rate limiter.";
        pgpromote_candidate_nrl: Counter, Pages, "Pages promoted to this node without the hot test.";
        pgpromote_success: Counter, Pages, "Pages promoted to this node.";
        pgdemote_success: Counter, Pages, "Pages demoted from this node.";
        promote_threshold_ms: Gauge, Milliseconds, "The adaptive hot threshold in force for this target node.";
    }
}

stats_struct! {
    /// Per-source counters, keyed by source in [`Stats::sources`].
    SourceStats {
        observed: Counter, Events, "Observations received from the source.";
        recorded: Counter, Events, "Observations recorded into a slow-tier record.";
        dropped_disabled: Counter, Events, "Observations dropped because the source is disabled.";
    }
}

/// Everything the engine counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Engine-wide statistics.
    pub engine: EngineStats,
    /// Per-node statistics.
    pub nodes: BTreeMap<NodeId, NodeStats>,
    /// Per-source statistics.
    pub sources: BTreeMap<SourceKind, SourceStats>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_cover_every_field_once() {
        let s = EngineStats {
            pgpromote_success: 7,
            ..EngineStats::default()
        };
        let v = s.values();
        assert_eq!(v.len(), EngineStats::FIELDS.len());
        let (d, n) = v
            .iter()
            .find(|(d, _)| d.name == "pgpromote_success")
            .unwrap();
        assert_eq!(
            (*n, d.kind, d.unit),
            (7, StatKind::Counter, StatUnit::Pages)
        );
        let mut names: Vec<_> = EngineStats::FIELDS.iter().map(|d| d.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), EngineStats::FIELDS.len());
        assert!(EngineStats::FIELDS.iter().all(|d| !d.help.is_empty()));
        // JSON field names equal the declared names.
        let j = serde_json::to_value(&s).unwrap();
        for d in EngineStats::FIELDS {
            assert!(j.get(d.name).is_some(), "{} missing from JSON", d.name);
        }
    }
}
