//! The neutral view model: what `tierd top` shows, whichever source it came from, and the
//! pure functions over it (cgroup totals, rates between two views).

use std::collections::BTreeMap;

use tierd_linux::status::{printable, Snapshot};
use tierd_sim::observe::Observed;

/// Bytes of a base page: every count in a view is in base pages.
pub const PAGE_BYTES: u64 = 4096;

/// One NUMA node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeView {
    /// Node id.
    pub id: u32,
    /// Index of its memory tier, 0 = fastest.
    pub tier: u32,
    /// Memory, base pages.
    pub total_pages: u64,
    /// Free memory, base pages.
    pub free_pages: u64,
}

impl NodeView {
    /// Used base pages.
    #[must_use]
    pub fn used_pages(&self) -> u64 {
        self.total_pages.saturating_sub(self.free_pages)
    }
}

/// A process, or a cgroup (the sum of its processes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerView {
    /// Process id (None for a simulated process or a cgroup).
    pub pid: Option<u32>,
    /// Command name, or the cgroup path for a cgroup.
    pub name: String,
    /// cgroup v2 path.
    pub cgroup: String,
    /// Processes summed in (1 for a process).
    pub members: u32,
    /// Base pages on each node.
    pub pages: BTreeMap<u32, u64>,
    /// Of which hot, per node (what "hot" means depends on the source; see the crate docs).
    pub hot_pages: BTreeMap<u32, u64>,
}

impl OwnerView {
    /// All its base pages.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.pages.values().sum()
    }

    /// All its hot base pages.
    #[must_use]
    pub fn hot(&self) -> u64 {
        self.hot_pages.values().sum()
    }

    /// Base pages on the nodes in `nodes`.
    #[must_use]
    pub fn on(&self, nodes: &[u32]) -> u64 {
        nodes
            .iter()
            .map(|n| self.pages.get(n).copied().unwrap_or(0))
            .sum()
    }

    /// Hot base pages on the nodes in `nodes`.
    #[must_use]
    pub fn hot_on(&self, nodes: &[u32]) -> u64 {
        nodes
            .iter()
            .map(|n| self.hot_pages.get(n).copied().unwrap_or(0))
            .sum()
    }
}

/// Everything one refresh of `tierd top` shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TopView {
    /// Where it came from (`daemon 127.0.0.1:9464`, `sim pointer-chase T1`).
    pub source: String,
    /// Seconds since the daemon started, or simulated seconds.
    pub time_s: f64,
    /// Nodes, by id.
    pub nodes: Vec<NodeView>,
    /// Processes.
    pub processes: Vec<OwnerView>,
    /// Base pages promoted so far.
    pub promoted_pages: u64,
    /// Base pages demoted so far.
    pub demoted_pages: u64,
    /// Counters so far, by name (engine, kernel, mover: prefixed where they could clash).
    pub counters: BTreeMap<String, u64>,
    /// Lines about the source (hotness sources running, dry run).
    pub notes: Vec<String>,
}

impl TopView {
    /// Nodes of the fastest tier.
    #[must_use]
    pub fn fast_nodes(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter(|n| n.tier == 0)
            .map(|n| n.id)
            .collect()
    }

    /// Nodes of the slower tiers.
    #[must_use]
    pub fn slow_nodes(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter(|n| n.tier != 0)
            .map(|n| n.id)
            .collect()
    }

    /// The processes summed per cgroup, by cgroup path.
    #[must_use]
    pub fn cgroups(&self) -> Vec<OwnerView> {
        let mut by: BTreeMap<&str, OwnerView> = BTreeMap::new();
        for p in &self.processes {
            let c = by.entry(p.cgroup.as_str()).or_insert_with(|| OwnerView {
                pid: None,
                name: p.cgroup.clone(),
                cgroup: p.cgroup.clone(),
                ..OwnerView::default()
            });
            c.members += 1;
            for (n, v) in &p.pages {
                *c.pages.entry(*n).or_default() += v;
            }
            for (n, v) in &p.hot_pages {
                *c.hot_pages.entry(*n).or_default() += v;
            }
        }
        by.into_values().collect()
    }
}

/// Rates between two views.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rates {
    /// Seconds between the views.
    pub dt_s: f64,
    /// Base pages promoted per second.
    pub promote_pages_per_s: f64,
    /// Base pages demoted per second.
    pub demote_pages_per_s: f64,
    /// Each counter's growth per second.
    pub counters_per_s: BTreeMap<String, f64>,
}

/// The rates from `prev` to `cur`; None when no time passed between them or time went
/// backwards (the daemon restarted). A counter that went down counts as 0.
#[must_use]
pub fn rates(prev: &TopView, cur: &TopView) -> Option<Rates> {
    let dt_s = cur.time_s - prev.time_s;
    if dt_s <= 0.0 || !dt_s.is_finite() {
        return None;
    }
    // Counts of pages and events stay far below 2^53: exact as f64.
    #[allow(clippy::cast_precision_loss)]
    let per_s = |a: u64, b: u64| b.saturating_sub(a) as f64 / dt_s;
    Some(Rates {
        dt_s,
        promote_pages_per_s: per_s(prev.promoted_pages, cur.promoted_pages),
        demote_pages_per_s: per_s(prev.demoted_pages, cur.demoted_pages),
        counters_per_s: cur
            .counters
            .iter()
            .map(|(k, v)| {
                let before = prev.counters.get(k).copied().unwrap_or(0);
                (k.clone(), per_s(before, *v))
            })
            .collect(),
    })
}

/// The view of a daemon's `/status`. `source` names it (the address).
#[must_use]
pub fn from_snapshot(s: &Snapshot, source: &str) -> TopView {
    let mut counters: BTreeMap<String, u64> = s.engine.clone();
    for (k, v) in &s.kernel_vmstat_delta {
        counters.insert(format!("kernel.{k}"), *v);
    }
    counters.insert("mover.calls".into(), s.mover.calls);
    counters.insert("mover.pages_moved".into(), s.mover.pages_moved);
    for (k, v) in &s.mover.pages_failed {
        counters.insert(format!("mover.failed.{k}"), *v);
    }
    let mut notes: Vec<String> = s
        .sources
        .iter()
        .map(|src| format!("{} {}: {}", src.name, src.state(), src.reason))
        .collect();
    if s.dry_run {
        notes.push("dry run: migrations are only planned".into());
    }
    notes.push(format!("daemon CPU {:.1} s", s.daemon_cpu_s));
    TopView {
        source: format!("daemon {source} (tierd {})", s.version),
        time_s: s.uptime_s,
        nodes: s
            .nodes
            .iter()
            .map(|n| NodeView {
                id: n.id,
                tier: n.tier,
                total_pages: n.total_bytes / PAGE_BYTES,
                free_pages: n.free_bytes / PAGE_BYTES,
            })
            .collect(),
        processes: s
            .processes
            .iter()
            // Names are chosen by whoever runs the process (comm, cgroup directories): no
            // control character reaches the terminal.
            .map(|p| OwnerView {
                pid: Some(p.pid),
                name: printable(&p.comm).into_owned(),
                cgroup: printable(&p.cgroup).into_owned(),
                members: 1,
                pages: p.pages_per_node.clone(),
                hot_pages: p.hot_pages_per_node.clone(),
            })
            .collect(),
        promoted_pages: s.engine.get("pgpromote_success").copied().unwrap_or(0),
        demoted_pages: s.engine.get("pgdemote_success").copied().unwrap_or(0),
        counters,
        notes,
    }
}

/// The view of a simulated run at one sample. `source` names it (scenario and configuration).
#[must_use]
pub fn from_observed(o: &Observed<'_>, source: &str) -> TopView {
    let s = o.sample();
    TopView {
        source: source.to_string(),
        time_s: s.t_s,
        nodes: o
            .nodes()
            .into_iter()
            .map(|n| NodeView {
                id: u32::from(n.id.0),
                tier: n.tier,
                total_pages: n.capacity,
                free_pages: n.capacity.saturating_sub(n.used),
            })
            .collect(),
        processes: o
            .owners()
            .into_iter()
            .map(|p| OwnerView {
                pid: None,
                name: if p.running {
                    p.name
                } else {
                    format!("{} (stopped)", p.name)
                },
                cgroup: p.cgroup,
                members: 1,
                pages: p
                    .pages
                    .into_iter()
                    .map(|(n, v)| (u32::from(n.0), v))
                    .collect(),
                hot_pages: p
                    .hot_pages
                    .into_iter()
                    .map(|(n, v)| (u32::from(n.0), v))
                    .collect(),
            })
            .collect(),
        promoted_pages: o.promoted_pages(),
        demoted_pages: o.demoted_pages(),
        counters: s.counters.clone(),
        notes: vec![format!(
            "latency {:.0} ns/access, {:.1} M accesses/s, mechanism CPU {:.1} s",
            s.latency_ns,
            s.accesses_per_s / 1e6,
            s.promoter_cpu_s
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierd_linux::status::{NodeSnapshot, ProcessSnapshot};

    fn owner(name: &str, cgroup: &str, pages: &[(u32, u64)], hot: &[(u32, u64)]) -> OwnerView {
        OwnerView {
            pid: Some(1),
            name: name.into(),
            cgroup: cgroup.into(),
            members: 1,
            pages: pages.iter().copied().collect(),
            hot_pages: hot.iter().copied().collect(),
        }
    }

    #[test]
    fn cgroups_sum_their_processes() {
        let v = TopView {
            processes: vec![
                owner("a", "/x", &[(0, 10), (1, 5)], &[(0, 3)]),
                owner("b", "/y", &[(1, 7)], &[]),
                owner("c", "/x", &[(1, 1)], &[(1, 1)]),
            ],
            ..TopView::default()
        };
        let cg = v.cgroups();
        assert_eq!(cg.len(), 2);
        assert_eq!(cg[0].name, "/x");
        assert_eq!(cg[0].members, 2);
        assert_eq!(cg[0].pages, [(0, 10), (1, 6)].into_iter().collect());
        assert_eq!(cg[0].hot_pages, [(0, 3), (1, 1)].into_iter().collect());
        assert_eq!(cg[0].total(), 16);
        assert_eq!(cg[0].hot(), 4);
        assert_eq!(cg[1].name, "/y");
        assert_eq!(cg[1].total(), 7);
    }

    #[test]
    fn rates_are_growth_over_time_and_none_without_time() {
        let a = TopView {
            time_s: 10.0,
            promoted_pages: 100,
            demoted_pages: 50,
            counters: [("x".to_string(), 5), ("y".to_string(), 9)]
                .into_iter()
                .collect(),
            ..TopView::default()
        };
        let b = TopView {
            time_s: 12.0,
            promoted_pages: 300,
            demoted_pages: 50,
            counters: [("x".to_string(), 9), ("y".to_string(), 3), ("z".into(), 4)]
                .into_iter()
                .collect(),
            ..TopView::default()
        };
        let r = rates(&a, &b).expect("time passed");
        assert!((r.dt_s - 2.0).abs() < 1e-12);
        assert!((r.promote_pages_per_s - 100.0).abs() < 1e-12);
        assert!(r.demote_pages_per_s.abs() < 1e-12);
        assert!((r.counters_per_s["x"] - 2.0).abs() < 1e-12);
        assert!(
            r.counters_per_s["y"].abs() < 1e-12,
            "a counter that went down"
        );
        assert!((r.counters_per_s["z"] - 2.0).abs() < 1e-12, "a new counter");
        assert!(rates(&b, &a).is_none(), "time went backwards");
        assert!(rates(&a, &a).is_none());
    }

    #[test]
    fn names_from_a_daemon_reach_the_view_with_controls_escaped() {
        let s = Snapshot {
            processes: vec![ProcessSnapshot {
                pid: 7,
                comm: "\u{1b}]0;pwned\u{7}".into(),
                cgroup: "/evil\u{9b}2J/\u{e9}t\u{e9}".into(),
                ..ProcessSnapshot::default()
            }],
            ..Snapshot::default()
        };
        let v = from_snapshot(&s, "a");
        assert_eq!(v.processes[0].name, "\\x1b]0;pwned\\x07");
        assert_eq!(v.processes[0].cgroup, "/evil\\u{9b}2J/\u{e9}t\u{e9}");
        assert_eq!(v.cgroups()[0].name, "/evil\\u{9b}2J/\u{e9}t\u{e9}");
    }

    #[test]
    fn a_snapshot_becomes_a_view_in_pages() {
        let mut s = Snapshot {
            version: "9.9.9".into(),
            uptime_s: 3.5,
            nodes: vec![NodeSnapshot {
                id: 2,
                tier: 1,
                has_cpus: false,
                total_bytes: 8 << 20,
                free_bytes: 2 << 20,
            }],
            processes: vec![ProcessSnapshot {
                pid: 42,
                comm: "chase".into(),
                cgroup: "/w".into(),
                pages_per_node: [(2, 100)].into_iter().collect(),
                hot_pages_per_node: [(2, 40)].into_iter().collect(),
            }],
            ..Snapshot::default()
        };
        s.engine.insert("pgpromote_success".into(), 7);
        s.engine.insert("pgdemote_success".into(), 3);
        s.kernel_vmstat_delta.insert("pgpromote_success".into(), 11);
        let v = from_snapshot(&s, "127.0.0.1:1");
        assert_eq!(v.source, "daemon 127.0.0.1:1 (tierd 9.9.9)");
        assert!((v.time_s - 3.5).abs() < 1e-12);
        assert_eq!(
            v.nodes,
            vec![NodeView {
                id: 2,
                tier: 1,
                total_pages: 2048,
                free_pages: 512
            }]
        );
        assert_eq!(v.nodes[0].used_pages(), 1536);
        assert_eq!(v.processes[0].pid, Some(42));
        assert_eq!(v.processes[0].hot(), 40);
        assert_eq!(v.promoted_pages, 7);
        assert_eq!(v.demoted_pages, 3);
        // The engine's and the kernel's counter of the same name are both kept.
        assert_eq!(v.counters["pgpromote_success"], 7);
        assert_eq!(v.counters["kernel.pgpromote_success"], 11);
        assert_eq!(v.fast_nodes(), Vec::<u32>::new());
        assert_eq!(v.slow_nodes(), vec![2]);
    }
}
