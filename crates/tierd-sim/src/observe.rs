//! What an observer sees of a run while it goes: [`Observed`], handed to the callback of
//! [`crate::sim::World::run_observed`] once per sample (`tierd top --sim` draws it).
//!
//! It borrows the run's state instead of copying it into the [`Sample`] time series, so the
//! serialized results (and `tierd compare`'s output) do not change, and a run nobody observes
//! pays nothing for it.
//!
//! "Hot" here is the workload's ground truth, not what a mechanism believes: the pages of the
//! classes that a running process's access streams read (`access = [{ class, share }]`). For
//! a region with a hot table (`hot = { fraction, chunk_mib }`) that is its hot chunks only
//! (class `<process>.<region>.hot`; the cold rest has no stream); a paused or exited
//! process's memory, or memory nobody reads (a filler), is cold.

use std::collections::{BTreeMap, BTreeSet};

use tierd_engine::types::{CgroupId, NodeId};

use crate::mechanism::Accounting;
use crate::memory::{ClassId, Memory};
use crate::sim::Sample;
use crate::workload::Process;

/// The state of a run at one sample.
#[derive(Debug)]
pub struct Observed<'a> {
    pub(crate) sample: &'a Sample,
    pub(crate) mem: &'a Memory,
    pub(crate) procs: &'a [Process],
    pub(crate) cgroups: &'a BTreeMap<String, CgroupId>,
    pub(crate) acct: &'a Accounting,
}

/// One node's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePages {
    /// Node id.
    pub id: NodeId,
    /// Index of its memory tier, 0 = fastest.
    pub tier: u32,
    /// Capacity, base pages.
    pub capacity: u64,
    /// Used base pages (mapped units plus what the scenario reserves).
    pub used: u64,
}

/// One process's pages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerPages {
    /// Process name from the scenario.
    pub name: String,
    /// Its cgroup (`/` for the root, else `/<name>` from the scenario).
    pub cgroup: String,
    /// Whether its threads run (not yet started, paused or exited: false).
    pub running: bool,
    /// Base pages on each node.
    pub pages: BTreeMap<NodeId, u64>,
    /// Of which hot (see the module docs), base pages on each node.
    pub hot_pages: BTreeMap<NodeId, u64>,
}

impl Observed<'_> {
    /// The sample just taken (time, latency, counters so far).
    #[must_use]
    pub fn sample(&self) -> &Sample {
        self.sample
    }

    /// Base pages moved to a faster tier so far.
    #[must_use]
    pub fn promoted_pages(&self) -> u64 {
        self.acct.promoted_pages
    }

    /// Base pages moved to a slower tier so far.
    #[must_use]
    pub fn demoted_pages(&self) -> u64 {
        self.acct.demoted_pages
    }

    /// Every node with its tier and usage.
    #[must_use]
    pub fn nodes(&self) -> Vec<NodePages> {
        let tiers = self.mem.topology().tiers();
        self.mem
            .nodes()
            .iter()
            .map(|(id, m)| NodePages {
                id: *id,
                tier: tiers
                    .iter()
                    .position(|t| t.nodes.contains(*id))
                    .and_then(|i| u32::try_from(i).ok())
                    .unwrap_or(0),
                capacity: m.capacity.0,
                used: m.used.0,
            })
            .collect()
    }

    /// Every process with its pages and hot pages per node. Classes carry per-node unit
    /// counts, so this walks classes, not pages.
    #[must_use]
    pub fn owners(&self) -> Vec<OwnerPages> {
        let names: BTreeMap<CgroupId, &str> = self
            .cgroups
            .iter()
            .map(|(n, id)| (*id, n.as_str()))
            .collect();
        let mut out: Vec<OwnerPages> = self
            .procs
            .iter()
            .map(|p| OwnerPages {
                name: p.name.clone(),
                cgroup: match names.get(&p.cgroup) {
                    Some(n) if p.cgroup != CgroupId::ROOT => format!("/{n}"),
                    _ => "/".to_string(),
                },
                running: p.running,
                ..OwnerPages::default()
            })
            .collect();
        let mut region_owner = BTreeMap::new();
        for (i, p) in self.procs.iter().enumerate() {
            for r in &p.regions {
                region_owner.insert(*r, i);
            }
        }
        let read: BTreeSet<ClassId> = self
            .procs
            .iter()
            .filter(|p| p.running)
            .flat_map(|p| p.streams.iter().filter(|s| s.share > 0.0).map(|s| s.class))
            .collect();
        let regions = self.mem.regions();
        for (ci, c) in self.mem.classes().iter().enumerate() {
            let Some(&i) = region_owner.get(&c.region) else {
                continue;
            };
            let reg = &regions[c.region.0 as usize];
            if !reg.alive {
                continue;
            }
            let hot = u16::try_from(ci).is_ok_and(|ci| read.contains(&ClassId(ci)));
            for (n, units) in &c.units_on {
                let pages = units * reg.unit_pages();
                *out[i].pages.entry(*n).or_default() += pages;
                if hot {
                    *out[i].hot_pages.entry(*n).or_default() += pages;
                }
            }
        }
        out
    }
}
