//! The one entry point for access observations.
//!
//! Every hotness source (hint faults, hardware samples, accessed-bit scans) reports what it
//! saw as [`Observation`]s, in batches, to `Engine::observe`. This mirrors pghot's single
//! reporting API `pghot_record_access(pfn, nid, src, now)` (include/linux/pghot.h), with the
//! page named the way userspace can move it: `move_pages(2)` takes a pid and a virtual
//! address, so a page is (address space, virtual page), with the frame carried along where the
//! source knew it.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::types::{Nanos, NodeId, PageRef};

/// Where an observation came from. The names follow pghot's sources (`PGHOT_HINTFAULTS`,
/// `PGHOT_HWHINTS`, and v3-v5's `PGHOT_PGTABLE_SCAN`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// A NUMA hint fault: knows the faulting CPU's node.
    HintFault,
    /// A hardware sample (AMD IBS, Intel PEBS, ARM SPE): knows the sampling CPU's node.
    HwSample,
    /// An accessed-bit scan (DAMON, idle page tracking, MGLRU walks): does not know who
    /// accessed the page.
    AccessedBitScan,
}

impl SourceKind {
    /// All sources, in bit order.
    pub const ALL: [SourceKind; 3] = [
        SourceKind::HintFault,
        SourceKind::HwSample,
        SourceKind::AccessedBitScan,
    ];

    /// The source's bit in a [`SourceMask`]: bit 0 hint faults, bit 1 hardware hints as in
    /// `pghot_enabled_sources` (mm/pghot.c), bit 2 page-table scans (tierd's addition; v3-v5
    /// used a different order for `records_enabled`).
    #[must_use]
    pub fn bit(self) -> u8 {
        match self {
            SourceKind::HintFault => 1 << 0,
            SourceKind::HwSample => 1 << 1,
            SourceKind::AccessedBitScan => 1 << 2,
        }
    }

    /// A short name for tables and metrics labels.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            SourceKind::HintFault => "hint_fault",
            SourceKind::HwSample => "hw_sample",
            SourceKind::AccessedBitScan => "accessed_bit_scan",
        }
    }

    /// Whether a sighting stands for accesses, so that a folio collects one per access to
    /// any of its pages (a hardware sample). A hint fault (one per scan for a whole PMD) or
    /// an accessed bit (DAMON regions, idle page tracking) only says the folio was touched.
    /// The engine weighs a folio's heat and idleness per base page accordingly
    /// (`Engine`'s `heat_weight`, `FastPage::sampled`).
    #[must_use]
    pub fn counts_accesses(self) -> bool {
        self == SourceKind::HwSample
    }
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which sources are enabled (`pghot_enabled_sources`). Serialized as a list of names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SourceMask(pub u8);

impl SourceMask {
    /// Every source enabled.
    pub const ALL: SourceMask = SourceMask(0b111);
    /// No source enabled.
    pub const NONE: SourceMask = SourceMask(0);

    /// Whether `kind` is enabled.
    #[must_use]
    pub fn contains(self, kind: SourceKind) -> bool {
        self.0 & kind.bit() != 0
    }

    /// The mask holding exactly `kinds`.
    #[must_use]
    pub fn of(kinds: &[SourceKind]) -> Self {
        SourceMask(kinds.iter().fold(0, |m, k| m | k.bit()))
    }

    /// The enabled sources, in bit order.
    #[must_use]
    pub fn kinds(self) -> Vec<SourceKind> {
        SourceKind::ALL
            .into_iter()
            .filter(|k| self.contains(*k))
            .collect()
    }
}

impl Default for SourceMask {
    fn default() -> Self {
        SourceMask::ALL
    }
}

impl Serialize for SourceMask {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.kinds().serialize(s)
    }
}

impl<'de> Deserialize<'de> for SourceMask {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let kinds = Vec::<SourceKind>::deserialize(d)?;
        Ok(SourceMask::of(&kinds))
    }
}

/// One observed access (or a sample standing for many).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// The page accessed.
    pub page: PageRef,
    /// The node the page is on now (the source, or the backend, knows it: hint faults and
    /// samples see the frame, scans of a process's pages resolve it).
    pub page_node: NodeId,
    /// The node of the CPU that accessed it, if the source knows (scans do not).
    pub accessing_node: Option<NodeId>,
    /// The source.
    pub source: SourceKind,
    /// When it was observed.
    pub time: Nanos,
    /// How many accesses it stands for, as its source counts them: a DAMON region's
    /// `nr_accesses`, 1 for a hint fault or a sample. Only the relative threshold uses it (as
    /// heat); 0 counts as 1.
    pub weight: u32,
}

/// A page a source found *not* accessed since `idle_since` (a DAMON region with no access
/// for its age: the fact DAMOS `migrate_cold` acts on, mm/damon/core.c `damos_valid_target()`
/// with `nr_accesses` 0 and `min_age`). Only the demoter uses it: a top-tier page no access
/// source ever reported (touched before tierd started, or never since) enters its index
/// with this as its last access, so idle demotion (`demotion.idle_after_ms`) can find it.
/// It never counts as an access: a slow-tier idle fact is ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdleObservation {
    /// The page (or folio, at its head).
    pub page: PageRef,
    /// The node it is on.
    pub page_node: NodeId,
    /// No access since then.
    pub idle_since: Nanos,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_bits_follow_pghot_enabled_sources() {
        // pghot_enabled_sources: bit0 hint faults, bit1 hwhints.
        assert_eq!(SourceMask::of(&[SourceKind::HintFault]).0, 0x1);
        assert_eq!(SourceMask::of(&[SourceKind::HwSample]).0, 0x2);
        let m = SourceMask::of(&[SourceKind::HwSample, SourceKind::AccessedBitScan]);
        assert!(!m.contains(SourceKind::HintFault));
        assert!(m.contains(SourceKind::AccessedBitScan));
    }

    #[test]
    fn mask_serializes_as_names() {
        let m = SourceMask::of(&[SourceKind::HintFault, SourceKind::HwSample]);
        let j = serde_json::to_string(&m).unwrap();
        assert_eq!(j, r#"["hint_fault","hw_sample"]"#);
        let back: SourceMask = serde_json::from_str(&j).unwrap();
        assert_eq!(back, m);
        assert!(serde_json::from_str::<SourceMask>(r#"["ibs"]"#).is_err());
    }
}
