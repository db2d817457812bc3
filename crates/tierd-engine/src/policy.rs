//! Owners, memory policies and the fast-tier share of cgroups.
//!
//! Every tracked page has an owner (its process and that process's cgroup) and the owner's
//! memory policy for the page's address range. Two constraints follow:
//!
//! - **Nodemasks** (mm/mempolicy.c `mpol_misplaced()` as of commit 133d04b1eee9, 6.10):
//!   a page whose policy is `MPOL_BIND` or `MPOL_PREFERRED_MANY` is never moved to a node
//!   outside the policy's nodemask, by promotion or by demotion. A promotion toward the
//!   accessing node happens only if that node is in the mask. (The kernel's own demotion
//!   ignores mempolicy; tierd's does not, so that a mask that excludes a DRAM node, set to keep
//!   a process off it, is never undone by tierd.)
//! - **Fast-tier share** (Kaiyang Zhao's RFC "memory tiering fairness by per-cgroup control of
//!   promotion and demotion", 2024, patches 2/4 and 4/4): `memory.low` also protects a cgroup's
//!   use of the top tier, scaled by the top tier's share of all memory. While the fast tier is
//!   under pressure, a cgroup above that share has its promotions thinned by
//!   `(share / usage)^4`, never below 1/16; demotion takes from cgroups above their share first.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::config::PreferredMany;
use crate::types::{Bytes, CgroupId, NodeId, NodeMask, SpaceId, Vpn};

/// A mempolicy mode, as `numa_maps` names them (mm/mempolicy.c `policy_modes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyMode {
    /// `MPOL_DEFAULT`: local allocation, no restriction on moves.
    #[default]
    Default,
    /// `MPOL_PREFERRED`: one preferred node, falls back anywhere.
    Preferred,
    /// `MPOL_PREFERRED_MANY`: preferred set; NUMA migration never leaves the set.
    PreferredMany,
    /// `MPOL_BIND`: allocation strictly inside the set.
    Bind,
    /// `MPOL_INTERLEAVE`.
    Interleave,
    /// `MPOL_WEIGHTED_INTERLEAVE`.
    WeightedInterleave,
    /// `MPOL_LOCAL`.
    Local,
    /// A mode or flag tierd does not know: a newer kernel's `policy_modes[]` entry, the
    /// `unknown` that `mpol_to_str()` prints for a mode it cannot name, or a flag after `=`
    /// that is not `static`, `relative` or `balancing`. tierd cannot tell what such a policy
    /// allows, so its pages are never moved ([`MemPolicy::may_move`]). Never read from a
    /// configuration or scenario file.
    #[serde(skip_deserializing)]
    Unknown,
}

/// A memory policy for a range of an address space.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MemPolicy {
    /// The mode.
    pub mode: PolicyMode,
    /// The nodemask (ignored for `Default` and `Local`).
    #[serde(default)]
    pub nodes: NodeMask,
    /// `MPOL_F_NUMA_BALANCING` was set (accepted for BIND and PREFERRED_MANY).
    #[serde(default)]
    pub numa_balancing: bool,
}

impl MemPolicy {
    /// The default policy.
    pub const DEFAULT: MemPolicy = MemPolicy {
        mode: PolicyMode::Default,
        nodes: NodeMask::EMPTY,
        numa_balancing: false,
    };

    /// A policy of `mode` over `nodes`.
    #[must_use]
    pub fn new(mode: PolicyMode, nodes: NodeMask) -> Self {
        MemPolicy {
            mode,
            nodes,
            numa_balancing: false,
        }
    }

    /// Whether the policy confines migrations to its nodemask.
    #[must_use]
    pub fn restricts_moves(&self) -> bool {
        matches!(
            self.mode,
            PolicyMode::Bind | PolicyMode::PreferredMany | PolicyMode::Unknown
        )
    }

    /// Whether a page under this policy may be moved to `node`: anywhere for the modes that
    /// only prefer, inside the mask for BIND and PREFERRED_MANY, nowhere for an unknown policy.
    #[must_use]
    pub fn allows(&self, node: NodeId) -> bool {
        match self.mode {
            PolicyMode::Unknown => false,
            _ => !self.restricts_moves() || self.nodes.contains(node),
        }
    }

    /// Whether tierd may move pages under this policy at all. An unknown policy: never (what
    /// it allows cannot be told). INTERLEAVE and WEIGHTED_INTERLEAVE spread pages over their
    /// nodes on purpose (the user chose the spread, and `mpol_misplaced()` only moves an
    /// interleaved page back to the node its interleave index names): only when
    /// `move_interleaved` (`EngineConfig::move_interleaved`) says so.
    #[must_use]
    pub fn may_move(&self, move_interleaved: bool) -> bool {
        match self.mode {
            PolicyMode::Unknown => false,
            PolicyMode::Interleave | PolicyMode::WeightedInterleave => move_interleaved,
            PolicyMode::Default
            | PolicyMode::Preferred
            | PolicyMode::PreferredMany
            | PolicyMode::Bind
            | PolicyMode::Local => true,
        }
    }
}

impl MemPolicy {
    /// Whether pages under this policy may be promoted under `rule`: every policy that
    /// [`MemPolicy::may_move`] allows, except, with [`PreferredMany::FollowFlag`], a
    /// PREFERRED_MANY policy without `MPOL_F_NUMA_BALANCING` (the kernel never takes a hint
    /// fault on such a VMA: kernel/sched/fair.c `task_numa_work()` skips it unless
    /// `vma_policy_mof()`, which only the flag sets for this mode, mm/mempolicy.c
    /// `sanitize_mpol_flags()`).
    #[must_use]
    pub fn may_promote(&self, move_interleaved: bool, rule: PreferredMany) -> bool {
        if !self.may_move(move_interleaved) {
            return false;
        }
        match (self.mode, rule) {
            (PolicyMode::PreferredMany, PreferredMany::FollowFlag) => self.numa_balancing,
            _ => true,
        }
    }
}

/// Who owns an address space.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The process id (the address space's pid on Linux).
    pub pid: u32,
    /// The process's cgroup.
    pub cgroup: CgroupId,
}

/// The address space's owner and its policy ranges.
#[derive(Clone, Debug, Default)]
struct SpaceInfo {
    owner: Owner,
    /// Non-overlapping `[start, end)` ranges, sorted by start.
    ranges: Vec<(Vpn, Vpn, MemPolicy)>,
    /// The node all of its recently running threads run on, if one.
    home_node: Option<NodeId>,
}

/// Owners and policies of every address space the engine knows.
///
/// Pages of an unknown address space belong to the root cgroup under the default policy.
#[derive(Clone, Debug, Default)]
pub struct OwnerMap {
    spaces: FxHashMap<SpaceId, SpaceInfo>,
}

impl OwnerMap {
    /// The cgroups that own at least one known address space.
    pub fn cgroups(&self) -> impl Iterator<Item = CgroupId> + '_ {
        self.spaces.values().map(|i| i.owner.cgroup)
    }

    /// Sets the owner of `space`.
    pub fn set_owner(&mut self, space: SpaceId, owner: Owner) {
        self.spaces.entry(space).or_default().owner = owner;
    }

    /// Replaces all policy ranges of `space` (one `numa_maps` read gives them all at once).
    /// Ranges are `[start, end)`; overlapping input is resolved in favour of the later range.
    pub fn set_policies(&mut self, space: SpaceId, mut ranges: Vec<(Vpn, Vpn, MemPolicy)>) {
        ranges.retain(|(s, e, _)| s < e);
        let mut sorted = ranges.clone();
        sorted.sort_by_key(|r| r.0);
        let disjoint = sorted.windows(2).all(|w| w[0].1 <= w[1].0);
        let out = if disjoint {
            // The usual case: numa_maps VMAs never overlap.
            sorted
        } else {
            // Paint: each elementary segment between range boundaries takes the policy of the
            // last input range covering it. Quadratic, but only reached on odd input.
            let mut bounds: Vec<Vpn> = ranges.iter().flat_map(|r| [r.0, r.1]).collect();
            bounds.sort_unstable();
            bounds.dedup();
            let mut out: Vec<(Vpn, Vpn, MemPolicy)> = Vec::new();
            for w in bounds.windows(2) {
                let (s, e) = (w[0], w[1]);
                if let Some(r) = ranges.iter().rev().find(|r| r.0 <= s && e <= r.1) {
                    match out.last_mut() {
                        Some(last) if last.1 == s && last.2 == r.2 => last.1 = e,
                        _ => out.push((s, e, r.2)),
                    }
                }
            }
            out
        };
        self.spaces.entry(space).or_default().ranges = out;
    }

    /// Sets the node `space`'s threads run on (`None`: they span nodes, or unknown).
    pub fn set_home_node(&mut self, space: SpaceId, node: Option<NodeId>) {
        self.spaces.entry(space).or_default().home_node = node;
    }

    /// The node `space`'s threads run on, if the backend reported one.
    #[must_use]
    pub fn home_node(&self, space: SpaceId) -> Option<NodeId> {
        self.spaces.get(&space).and_then(|s| s.home_node)
    }

    /// Forgets `space` (the process exited).
    pub fn forget(&mut self, space: SpaceId) {
        self.spaces.remove(&space);
    }

    /// The owner of `space` (root cgroup, pid = space id, if unknown).
    #[must_use]
    pub fn owner(&self, space: SpaceId) -> Owner {
        self.spaces.get(&space).map_or(
            Owner {
                pid: space.0,
                cgroup: CgroupId::ROOT,
            },
            |s| s.owner,
        )
    }

    /// The policy of the page at `vpn` in `space`.
    #[must_use]
    pub fn policy(&self, space: SpaceId, vpn: Vpn) -> MemPolicy {
        let Some(info) = self.spaces.get(&space) else {
            return MemPolicy::DEFAULT;
        };
        let idx = info.ranges.partition_point(|(s, _, _)| *s <= vpn);
        if idx == 0 {
            return MemPolicy::DEFAULT;
        }
        let (_, end, pol) = info.ranges[idx - 1];
        if vpn < end {
            pol
        } else {
            MemPolicy::DEFAULT
        }
    }

    /// Known address spaces, ascending.
    #[must_use]
    pub fn spaces(&self) -> Vec<SpaceId> {
        let mut v: Vec<SpaceId> = self.spaces.keys().copied().collect();
        v.sort_unstable();
        v
    }
}

/// The smallest promotion scale for a cgroup over its share: 1/16 (Kaiyang Zhao's RFC, patch
/// 4/4: the scan size never drops below 1/16 of `numa_balancing_scan_size`).
pub const MIN_CGROUP_PROMOTION_SCALE: f64 = 1.0 / 16.0;

/// A cgroup's protected share of the fast tier: `memory.low × fast capacity / total capacity`
/// (RFC patch 2/4, `locallow`; the same scaling as the later `memory.toptier_low` series).
#[must_use]
pub fn fast_tier_share(low: Bytes, fast_capacity: Bytes, total_capacity: Bytes) -> Bytes {
    if total_capacity.0 == 0 {
        return Bytes(0);
    }
    let share = u128::from(low.0) * u128::from(fast_capacity.0) / u128::from(total_capacity.0);
    Bytes(u64::try_from(share).unwrap_or(u64::MAX))
}

/// The factor applied to a cgroup's promotions: 1 when it is within its share or the fast
/// tier has room; else `(share / usage)^4`, never below 1/16 (RFC patch 4/4: 10 % over
/// gives 68 %, 20 % 48 %, 50 % 20 %, 100 % 6.25 %).
#[must_use]
pub fn cgroup_promotion_scale(share: Bytes, fast_usage: Bytes, fast_under_pressure: bool) -> f64 {
    if !fast_under_pressure || fast_usage <= share {
        return 1.0;
    }
    // Ratios of byte counts: f64 precision is ample for a scale factor.
    #[allow(clippy::cast_precision_loss)]
    let ratio = share.0 as f64 / fast_usage.0 as f64;
    ratio.powi(4).max(MIN_CGROUP_PROMOTION_SCALE)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn bind_and_preferred_many_restrict_others_do_not() {
        let mask = NodeMask::from_nodes([NodeId(0)]);
        for mode in [PolicyMode::Bind, PolicyMode::PreferredMany] {
            let p = MemPolicy::new(mode, mask);
            assert!(p.allows(NodeId(0)));
            assert!(!p.allows(NodeId(1)));
        }
        for mode in [
            PolicyMode::Default,
            PolicyMode::Preferred,
            PolicyMode::Interleave,
        ] {
            assert!(MemPolicy::new(mode, mask).allows(NodeId(1)));
        }
    }

    #[test]
    fn unknown_policies_never_move_interleaved_only_when_asked() {
        let mask = NodeMask::from_nodes([NodeId(0), NodeId(1)]);
        let unknown = MemPolicy::new(PolicyMode::Unknown, mask);
        assert!(!unknown.allows(NodeId(0)) && !unknown.allows(NodeId(1)));
        assert!(!unknown.may_move(true) && !unknown.may_move(false));
        for mode in [PolicyMode::Interleave, PolicyMode::WeightedInterleave] {
            let p = MemPolicy::new(mode, mask);
            assert!(!p.may_move(false), "{mode:?}");
            assert!(p.may_move(true), "{mode:?}");
        }
        for mode in [PolicyMode::Default, PolicyMode::Bind, PolicyMode::Local] {
            assert!(MemPolicy::new(mode, mask).may_move(false), "{mode:?}");
        }
        // A scenario or config cannot ask for it; the engine can still report it.
        assert!(serde_json::from_str::<PolicyMode>("\"unknown\"").is_err());
        assert_eq!(
            serde_json::to_string(&PolicyMode::Unknown).unwrap(),
            "\"unknown\""
        );
    }

    #[test]
    fn preferred_many_follows_the_balancing_flag_only_when_asked() {
        let mask = NodeMask::from_nodes([NodeId(0), NodeId(2)]);
        let plain = MemPolicy::new(PolicyMode::PreferredMany, mask);
        let balancing = MemPolicy {
            numa_balancing: true,
            ..plain
        };
        assert!(plain.may_promote(false, PreferredMany::Always));
        assert!(!plain.may_promote(false, PreferredMany::FollowFlag));
        assert!(balancing.may_promote(false, PreferredMany::FollowFlag));
        assert!(balancing.may_promote(false, PreferredMany::Always));
        // The rule is about PREFERRED_MANY only: BIND without the flag still promotes inside
        // its mask (mpol_misplaced()'s nearest-allowed-node case), the default policy too.
        for mode in [PolicyMode::Bind, PolicyMode::Default, PolicyMode::Preferred] {
            let p = MemPolicy::new(mode, mask);
            assert!(p.may_promote(false, PreferredMany::FollowFlag), "{mode:?}");
        }
        // What may_move forbids stays forbidden.
        let unknown = MemPolicy {
            numa_balancing: true,
            ..MemPolicy::new(PolicyMode::Unknown, mask)
        };
        assert!(!unknown.may_promote(true, PreferredMany::Always));
        let il = MemPolicy::new(PolicyMode::Interleave, mask);
        assert!(!il.may_promote(false, PreferredMany::Always));
        assert!(il.may_promote(true, PreferredMany::FollowFlag));
    }

    #[test]
    fn home_node_is_per_space_and_forgotten_with_it() {
        let mut m = OwnerMap::default();
        assert_eq!(m.home_node(SpaceId(3)), None);
        m.set_home_node(SpaceId(3), Some(NodeId(1)));
        m.set_policies(SpaceId(3), vec![]);
        assert_eq!(m.home_node(SpaceId(3)), Some(NodeId(1)));
        assert_eq!(m.home_node(SpaceId(4)), None);
        m.set_home_node(SpaceId(3), None);
        assert_eq!(m.home_node(SpaceId(3)), None);
        m.set_home_node(SpaceId(3), Some(NodeId(0)));
        m.forget(SpaceId(3));
        assert_eq!(m.home_node(SpaceId(3)), None);
    }

    #[test]
    fn policy_lookup_by_range() {
        let mut m = OwnerMap::default();
        let bind = MemPolicy::new(PolicyMode::Bind, NodeMask::from_nodes([NodeId(1)]));
        m.set_policies(SpaceId(7), vec![(Vpn(100), Vpn(200), bind)]);
        assert_eq!(m.policy(SpaceId(7), Vpn(99)), MemPolicy::DEFAULT);
        assert_eq!(m.policy(SpaceId(7), Vpn(100)), bind);
        assert_eq!(m.policy(SpaceId(7), Vpn(199)), bind);
        assert_eq!(m.policy(SpaceId(7), Vpn(200)), MemPolicy::DEFAULT);
        assert_eq!(m.policy(SpaceId(8), Vpn(150)), MemPolicy::DEFAULT);
        assert_eq!(m.owner(SpaceId(8)).cgroup, CgroupId::ROOT);
    }

    #[test]
    fn later_overlapping_range_wins() {
        let mut m = OwnerMap::default();
        let a = MemPolicy::new(PolicyMode::Bind, NodeMask::from_nodes([NodeId(0)]));
        let b = MemPolicy::new(PolicyMode::PreferredMany, NodeMask::from_nodes([NodeId(1)]));
        m.set_policies(
            SpaceId(1),
            vec![(Vpn(0), Vpn(100), a), (Vpn(40), Vpn(60), b)],
        );
        assert_eq!(m.policy(SpaceId(1), Vpn(39)), a);
        assert_eq!(m.policy(SpaceId(1), Vpn(40)), b);
        assert_eq!(m.policy(SpaceId(1), Vpn(59)), b);
        assert_eq!(m.policy(SpaceId(1), Vpn(60)), a);
        assert_eq!(m.policy(SpaceId(1), Vpn(99)), a);
    }

    proptest! {
        /// set_policies agrees with a naive "last range covering vpn wins" oracle.
        #[test]
        fn policy_ranges_match_last_writer_oracle(
            ranges in proptest::collection::vec((0u64..64, 1u64..32, 0u64..4), 0..8),
            probe in 0u64..100,
        ) {
            let pols: Vec<MemPolicy> = (0..4).map(|i| MemPolicy::new(PolicyMode::Bind, NodeMask(1 << i))).collect();
            let input: Vec<(Vpn, Vpn, MemPolicy)> = ranges.iter()
                .map(|&(s, len, p)| (Vpn(s), Vpn(s + len), pols[usize::try_from(p).unwrap()])).collect();
            let mut m = OwnerMap::default();
            m.set_policies(SpaceId(1), input.clone());
            let oracle = input.iter().rev().find(|(s, e, _)| s.0 <= probe && probe < e.0)
                .map_or(MemPolicy::DEFAULT, |r| r.2);
            prop_assert_eq!(m.policy(SpaceId(1), Vpn(probe)), oracle);
        }
    }

    #[test]
    fn share_scales_low_by_fast_fraction() {
        // Kaiyang Zhao's setup: 256 GB DRAM + 64 GB CXL, memory.low 19 GB -> 15.2 GB.
        let share = fast_tier_share(Bytes::gib(19), Bytes::gib(256), Bytes::gib(320));
        assert_eq!(share, Bytes(Bytes::gib(19).0 * 256 / 320));
        // The toptier_low series' example: 150G:50G, low 20G -> 15G.
        assert_eq!(
            fast_tier_share(Bytes::gib(20), Bytes::gib(150), Bytes::gib(200)),
            Bytes::gib(15)
        );
    }

    #[test]
    fn scale_is_fourth_power_with_floor() {
        let share = Bytes(1000);
        assert!((cgroup_promotion_scale(share, Bytes(1000), true) - 1.0).abs() < 1e-12);
        // Within share or no pressure: unscaled.
        assert!((cgroup_promotion_scale(share, Bytes(900), true) - 1.0).abs() < 1e-12);
        assert!((cgroup_promotion_scale(share, Bytes(5000), false) - 1.0).abs() < 1e-12);
        // 10 % over -> (1/1.1)^4 = 0.683; 20 % -> 0.482; 50 % -> 0.1975.
        assert!((cgroup_promotion_scale(share, Bytes(1100), true) - 0.683).abs() < 1e-3);
        assert!((cgroup_promotion_scale(share, Bytes(1200), true) - 0.482).abs() < 1e-3);
        assert!((cgroup_promotion_scale(share, Bytes(1500), true) - 0.1975).abs() < 1e-3);
        // 100 % over: 0.0625 = exactly the floor; far over stays at the floor.
        assert!((cgroup_promotion_scale(share, Bytes(2000), true) - 0.0625).abs() < 1e-12);
        assert!((cgroup_promotion_scale(share, Bytes(100_000), true) - 0.0625).abs() < 1e-12);
    }
}
