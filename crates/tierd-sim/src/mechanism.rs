//! The interface every promotion mechanism implements, and what they share: the step
//! context, the accounting of costs and counters, and the kernel's reclaim (kswapd demotion).

use std::collections::BTreeMap;

use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use tierd_engine::types::{NodeId, Pages};
use tierd_engine::MoveError;

use crate::memory::{Memory, UnitId};
use crate::workload::{Load, Process};

/// The random number generator of a run: ChaCha8, seeded from the scenario seed, so the same
/// seed gives the same run on every platform.
pub type SimRng = ChaCha8Rng;

/// Costs and counters of one configuration's run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Accounting {
    /// vmstat-like counters, named as the kernel names them (`numa_hint_faults`,
    /// `pgpromote_success`, `damos_sz_applied`, `hwhint_total_events`, ...).
    pub vmstat: BTreeMap<String, u64>,
    /// Time charged to each process's threads during the current step (hint-fault handling,
    /// sample interrupts), ns; turned into a per-access tax for the next step.
    pub app_overhead_ns: Vec<f64>,
    /// All time ever charged to application threads, ns.
    pub app_overhead_total_ns: f64,
    /// CPU time of the mechanism's own thread (kdamond, kmigrated, the tierd daemon), ns.
    pub promoter_cpu_ns: f64,
    /// Base pages moved to a faster tier.
    pub promoted_pages: u64,
    /// Base pages moved to a slower tier.
    pub demoted_pages: u64,
}

impl Accounting {
    /// Adds `n` to a counter.
    pub fn count(&mut self, name: &str, n: u64) {
        *self.vmstat.entry(name.to_string()).or_default() += n;
    }
    /// A counter's value.
    #[must_use]
    pub fn get(&self, name: &str) -> u64 {
        self.vmstat.get(name).copied().unwrap_or(0)
    }
}

/// What a mechanism sees and may do during one step `[now, now + dt)`.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// Start of the step, ns since the start of the run.
    pub now: u64,
    /// Step length, ns.
    pub dt: u64,
    /// The machine's memory.
    pub mem: &'a mut Memory,
    /// The workload's access rates during the step.
    pub load: &'a Load,
    /// The processes.
    pub procs: &'a [Process],
    /// The run's random numbers.
    pub rng: &'a mut SimRng,
    /// Costs and counters.
    pub acct: &'a mut Accounting,
    /// Scenario-wide switches the kernel mechanisms read.
    pub kernel: &'a KernelKnobs,
}

impl Ctx<'_> {
    /// Charges `ns` of work to process `p`'s threads.
    pub fn charge_app(&mut self, p: usize, ns: f64) {
        if let Some(x) = self.acct.app_overhead_ns.get_mut(p) {
            *x += ns;
        }
        self.acct.app_overhead_total_ns += ns;
    }

    /// Charges `ns` to the mechanism's own thread.
    pub fn charge_promoter(&mut self, ns: f64) {
        self.acct.promoter_cpu_ns += ns;
    }

    /// Moves a unit, counting it as a promotion or demotion by the tiers involved.
    ///
    /// # Errors
    /// The [`MoveError`] the move failed with (no room, region gone).
    pub fn migrate(&mut self, u: UnitId, to: NodeId) -> Result<(), MoveError> {
        let from = self.mem.node_of(u);
        let pages = self.mem.unit_pages(u);
        self.mem.migrate(u, to)?;
        let topo = self.mem.topology();
        match (topo.is_toptier(from), topo.is_toptier(to)) {
            (false, true) => self.acct.promoted_pages += pages,
            (true, false) => self.acct.demoted_pages += pages,
            _ => {}
        }
        Ok(())
    }
}

/// Machine-wide kernel settings that the models of kernel mechanisms read.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct KernelKnobs {
    /// `/sys/kernel/mm/numa/demotion_enabled`: kswapd demotes to the next tier instead of
    /// reclaiming.
    pub demotion_enabled: bool,
    /// `vm.watermark_scale_factor` (default 10 = 0.1 % of a node per watermark step).
    pub watermark_scale_factor: u32,
    /// Whether NUMA balancing's tiering mode is on: kswapd then balances top-tier nodes up to
    /// the promotion watermark (2022 "memory tiering: hot page selection" series).
    pub tiering_kswapd: bool,
}

impl Default for KernelKnobs {
    fn default() -> Self {
        KernelKnobs {
            demotion_enabled: false,
            watermark_scale_factor: 10,
            tiering_kswapd: false,
        }
    }
}

/// The watermarks of a node, in base pages: one `watermark_scale_factor` step apart, with
/// `min` taken as one step (mm/page_alloc.c `__setup_per_zone_wmarks()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watermarks {
    /// `WMARK_MIN`.
    pub min: Pages,
    /// `WMARK_LOW`: kswapd wakes below it.
    pub low: Pages,
    /// `WMARK_HIGH`: kswapd sleeps above it.
    pub high: Pages,
    /// `WMARK_PROMO`: kswapd's goal in tiering mode.
    pub promo: Pages,
}

impl Watermarks {
    /// The watermarks of a node of `capacity` pages.
    #[must_use]
    pub fn of(capacity: Pages, wsf: u32) -> Watermarks {
        let step = capacity.0 * u64::from(wsf) / 10_000;
        Watermarks {
            min: Pages(step),
            low: Pages(2 * step),
            high: Pages(3 * step),
            promo: Pages(4 * step),
        }
    }
}

/// A promotion strategy under test.
pub trait Mechanism: std::fmt::Debug {
    /// Runs one step: observe what the mechanism can observe, migrate what it decides to,
    /// charge the costs.
    fn step(&mut self, ctx: &mut Ctx<'_>);
}

/// No promotion at all (`numa_balancing=0`, no DAMON): the baseline.
#[derive(Debug, Default)]
pub struct Baseline;

impl Mechanism for Baseline {
    fn step(&mut self, _ctx: &mut Ctx<'_>) {}
}

/// The kernel's reclaim on top-tier nodes with demotion enabled: when a node's free memory
/// falls below its low watermark, kswapd demotes its coldest pages to the node's demotion
/// target until free memory reaches the high watermark (the promotion watermark in tiering
/// mode). Counted as `pgdemote_kswapd`.
///
/// "Coldest" approximates the kernel's LRU: units of the classes with the lowest access rate
/// per unit go first, older regions before newer ones at equal rates (an idle process's
/// pages are older on the LRU than a memory eater's fresh ones). Demotion follows the kernel
/// in ignoring mempolicy except for BIND and PREFERRED_MANY masks, which tierd's models never
/// cross (every mechanism is held to that).
pub fn kswapd(ctx: &mut Ctx<'_>) {
    if !ctx.kernel.demotion_enabled {
        return;
    }
    let top: Vec<NodeId> = ctx.mem.topology().toptier_mask().iter().collect();
    for node in top {
        let Some(m) = ctx.mem.node(node) else {
            continue;
        };
        let wm = Watermarks::of(m.capacity, ctx.kernel.watermark_scale_factor);
        if m.free() >= wm.low {
            continue;
        }
        let goal = if ctx.kernel.tiering_kswapd {
            wm.promo
        } else {
            wm.high
        };
        demote_coldest(ctx, node, goal);
    }
}

/// Demotes the coldest units of `node` until its free memory reaches `goal`.
pub fn demote_coldest(ctx: &mut Ctx<'_>, node: NodeId, goal: Pages) {
    let topo = ctx.mem.topology().clone();
    let targets = topo.demotion_targets(node);
    if targets.is_empty() {
        return;
    }
    // Classes with units on this node, coldest first.
    let mut order: Vec<(f64, u32, u16)> = ctx
        .mem
        .classes()
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            c.units_on.get(&node).copied().unwrap_or(0) > 0
                && ctx.mem.regions()[c.region.0 as usize].alive
        })
        .map(|(i, c)| {
            // Per-unit rate of the class; classes fit u16 by construction.
            #[allow(clippy::cast_possible_truncation)]
            let id = i as u16;
            (
                ctx.load.class_rate[i] / f64::from(c.len.max(1)),
                c.region.0,
                id,
            )
        })
        .collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    for (_, _, cid) in order {
        let class = ctx.mem.class(crate::memory::ClassId(cid)).clone();
        let region = ctx.mem.regions()[class.region.0 as usize].clone();
        for idx in 0..class.len {
            if ctx.mem.node(node).is_none_or(|m| m.free() >= goal) {
                return;
            }
            let u = class.unit_at(idx);
            if ctx.mem.node_of(u) != node {
                continue;
            }
            let allowed = targets.iter().filter(|t| region.policy.allows(*t));
            let Some(to) = allowed
                .filter(|t| ctx.mem.free(*t).pages().0 >= region.unit_pages())
                .min_by_key(|t| topo.distance(node, *t).unwrap_or(u32::MAX))
            else {
                continue;
            };
            if ctx.migrate(u, to).is_ok() {
                ctx.acct.count("pgdemote_kswapd", region.unit_pages());
            }
        }
    }
}
