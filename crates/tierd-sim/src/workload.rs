//! Workloads: processes, their threads, and how their accesses spread over memory.
//!
//! A process has thread groups bound to nodes and access **streams**, each a share of the
//! process's accesses going to one class of units. Threads run back to back: each issues its
//! next access when the previous one completes, so a thread's access rate is
//! `1 / (mean latency + compute time + per-access tax)`, and the mean latency depends on where
//! the pages of the classes it reads are. That feedback is what makes placement matter.
//!
//! A process may define an **operation** ([`Op`], the scenario's `[process.op]`): a request
//! served or a unit of work made of `accesses` memory accesses plus CPU work and I/O (system
//! calls, the network stack) that do not depend on placement. Its threads then serve one
//! operation after another: `ops/s = threads / (accesses x per-access time + compute + io)`,
//! and its access rate is that times `accesses`. Placement then moves throughput only as much
//! as memory is a share of the operation's time, which is what a load generator sees (seed E:
//! a memcached get is a few memory accesses inside microseconds of network work).
//!
//! [`Load`] is the state of the workload for one simulation step: accesses per second per
//! class and per thread group, and a sampler that draws individual accesses in proportion to
//! those rates. Mechanisms draw only the accesses they can observe (a hardware sample, the
//! first access after a PTE was made PROT_NONE, an accessed bit found set), never all of them:
//! a 64 GiB, 240 s, 64-thread run is about 10^11 accesses.

use std::collections::BTreeMap;

use rand::Rng;
use rand_distr::{Distribution, Zipf};
use serde::Serialize;
use tierd_engine::types::{CgroupId, NodeId, SpaceId};

use crate::memory::{Class, ClassId, Memory, RegionId, Spread, UnitId};

/// Threads bound to one node.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ThreadGroup {
    /// The node whose CPUs run them.
    pub node: NodeId,
    /// How many.
    pub threads: u32,
    /// How many threads the group stands for at full scale: `threads` before `--scale`
    /// shrank it ([`crate::scenario::Scenario::scaled`]); 0 for a process of private copies
    /// (`private_threads`). Contention between threads sharing a
    /// page is a property of the real machine, not of the scaled-down one, so the cost of a
    /// hint fault or a migration counts these ([`Load::sharing_threads`]).
    pub sharing: u32,
}

/// A share of a process's accesses that goes to one class.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Stream {
    /// The class.
    pub class: ClassId,
    /// Fraction of the process's accesses (a process's shares add up to 1).
    pub share: f64,
}

/// A simulated process.
#[derive(Clone, Debug, Serialize)]
pub struct Process {
    /// Its name in the scenario.
    pub name: String,
    /// Its address space (pid).
    pub space: SpaceId,
    /// Its cgroup.
    pub cgroup: CgroupId,
    /// Thread groups.
    pub groups: Vec<ThreadGroup>,
    /// Access streams.
    pub streams: Vec<Stream>,
    /// Non-memory work per access, ns (a pure pointer chase has none).
    pub compute_ns: f64,
    /// Whether its threads are running (a paused or idle process issues no accesses).
    pub running: bool,
    /// Its regions.
    pub regions: Vec<RegionId>,
    /// Multiplies its access rates (the scenario's `rate_scale`; 1 = unchanged).
    pub rate_scale: f64,
    /// What one of its operations is, when it counts operations (`None`: one access is one
    /// operation).
    pub op: Option<Op>,
}

/// One operation of a process (see the module docs): memory accesses plus work that does
/// not depend on placement.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Op {
    /// Its name in the report (`get`).
    pub name: String,
    /// Memory accesses per operation (a mean, at least 1).
    pub accesses: f64,
    /// CPU work per operation besides the accesses, ns.
    pub compute_ns: f64,
    /// System-call and network-stack time per operation, ns.
    pub io_ns: f64,
}

impl Op {
    /// Operations per second of one thread whose accesses each take `per_access_ns`
    /// (memory latency + per-access compute + tax).
    #[must_use]
    pub fn rate(&self, per_access_ns: f64) -> f64 {
        1e9 / (self.accesses * per_access_ns + self.compute_ns + self.io_ns).max(1.0)
    }
}

/// Loaded access latency between an initiator node (CPUs) and a memory node.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LatencyTable {
    /// ns per access, by (initiator, target).
    pub ns: BTreeMap<(NodeId, NodeId), f64>,
}

impl LatencyTable {
    /// The latency from `initiator` to `target`; unknown pairs cost the worst known latency.
    #[must_use]
    pub fn get(&self, initiator: NodeId, target: NodeId) -> f64 {
        self.ns
            .get(&(initiator, target))
            .copied()
            .unwrap_or_else(|| self.ns.values().copied().fold(0.0, f64::max))
    }
}

/// One (process, group, stream) source of accesses with its current rate.
#[derive(Clone, Copy, Debug)]
struct Flow {
    process: usize,
    node: NodeId,
    class: ClassId,
    rate: f64,
    /// The group's threads at full scale ([`ThreadGroup::sharing`]).
    threads: u32,
}

/// The workload's access rates during one step.
#[derive(Debug)]
pub struct Load {
    flows: Vec<Flow>,
    cumulative: Vec<f64>,
    /// Accesses per second to each class.
    pub class_rate: Vec<f64>,
    /// Accesses per second per process.
    pub process_rate: Vec<f64>,
    /// Operations per second per process (its accesses per second when it defines no
    /// operation).
    pub process_ops: Vec<f64>,
    /// Mean latency per access per process, ns (placement plus tax).
    pub process_latency_ns: Vec<f64>,
    /// All accesses per second.
    pub total_rate: f64,
    zipf: BTreeMap<ClassId, Zipf<f64>>,
    /// The flows of each class, in flow order, as index ranges into `class_flow`: class `c`'s
    /// are `class_flow[class_start[c]..class_start[c + 1]]`. A hint fault asks who accesses
    /// its page's class three times (the accessing node, the main accessor, the sharing
    /// threads); a walk over every flow each time (C: 48) was a tenth of a churning run.
    class_start: Vec<u32>,
    class_flow: Vec<u32>,
}

impl Load {
    /// Computes the rates from the current placement. `tax_ns[p]` is the extra time per access
    /// that mechanisms charged to process `p`'s threads in the last step.
    #[must_use]
    pub fn compute(procs: &[Process], mem: &Memory, lat: &LatencyTable, tax_ns: &[f64]) -> Load {
        let nclasses = mem.classes().len();
        let mut load = Load {
            flows: Vec::new(),
            cumulative: Vec::new(),
            class_rate: vec![0.0; nclasses],
            process_rate: vec![0.0; procs.len()],
            process_ops: vec![0.0; procs.len()],
            process_latency_ns: vec![0.0; procs.len()],
            total_rate: 0.0,
            zipf: BTreeMap::new(),
            class_start: Vec::new(),
            class_flow: Vec::new(),
        };
        for (pi, p) in procs.iter().enumerate() {
            if !p.running || p.streams.is_empty() {
                continue;
            }
            let tax = tax_ns.get(pi).copied().unwrap_or(0.0);
            let mut weighted_lat = 0.0;
            let mut total_threads = 0.0;
            for g in &p.groups {
                let mem_lat: f64 = p
                    .streams
                    .iter()
                    .map(|s| {
                        let c = mem.class(s.class);
                        let on: f64 = c
                            .weight_on
                            .keys()
                            .map(|n| c.fraction_on(*n) * lat.get(g.node, *n))
                            .sum();
                        s.share * on
                    })
                    .sum();
                let per_access = mem_lat + p.compute_ns + tax;
                // `rate_scale` is 1 unless a scenario asks otherwise; x * 1.0 is x exactly.
                let (rate, ops) = match &p.op {
                    None => {
                        let rate = f64::from(g.threads) * 1e9 / per_access.max(1.0) * p.rate_scale;
                        (rate, rate)
                    }
                    Some(op) => {
                        let ops = f64::from(g.threads) * op.rate(per_access) * p.rate_scale;
                        (ops * op.accesses, ops)
                    }
                };
                weighted_lat += f64::from(g.threads) * (mem_lat + tax);
                total_threads += f64::from(g.threads);
                load.process_rate[pi] += rate;
                load.process_ops[pi] += ops;
                for s in &p.streams {
                    let r = rate * s.share;
                    load.class_rate[usize::from(s.class.0)] += r;
                    load.flows.push(Flow {
                        process: pi,
                        node: g.node,
                        class: s.class,
                        rate: r,
                        threads: g.sharing,
                    });
                }
            }
            load.process_latency_ns[pi] = if total_threads > 0.0 {
                weighted_lat / total_threads
            } else {
                0.0
            };
        }
        let mut acc = 0.0;
        for f in &load.flows {
            acc += f.rate;
            load.cumulative.push(acc);
        }
        load.total_rate = acc;
        // A counting sort of the flows by class, stable: each class keeps its flows in order.
        let mut start = vec![0u32; nclasses + 1];
        for f in &load.flows {
            start[usize::from(f.class.0) + 1] += 1;
        }
        for c in 0..nclasses {
            start[c + 1] += start[c];
        }
        let mut next = start.clone();
        load.class_flow = vec![0; load.flows.len()];
        for (i, f) in load.flows.iter().enumerate() {
            let at = &mut next[usize::from(f.class.0)];
            load.class_flow[*at as usize] = i as u32;
            *at += 1;
        }
        load.class_start = start;
        for c in load.flows.iter().map(|f| f.class) {
            let class = mem.class(c);
            if let Spread::Zipf { s } = class.spread {
                if class.len > 0 {
                    if let Ok(z) = Zipf::new(u64::from(class.len), s) {
                        load.zipf.insert(c, z);
                    }
                }
            }
        }
        load
    }

    /// The access rate of one unit, per second.
    #[must_use]
    #[inline]
    pub fn unit_rate(&self, mem: &Memory, u: UnitId) -> f64 {
        let c = mem.class_of(u);
        let class = mem.class(c);
        let Some(rate) = self.accessed_rate(c, class) else {
            return 0.0;
        };
        match class.spread {
            // Uniform classes need no lookup of the unit's position.
            Spread::Uniform => rate / class.total_weight,
            Spread::Zipf { .. } => class
                .index_of(u)
                .map_or(0.0, |i| rate * class.weight(i) / class.total_weight),
        }
    }

    /// The access rate of one of unit `u`'s pages, per second: [`Load::unit_rate`] over the
    /// unit's grain ([`Memory::grain_of`]; the unit's rate itself but in a grained region).
    /// What draws an event per page (a hint fault after a scan, a reference bit) draws it
    /// at this rate.
    #[must_use]
    #[inline]
    pub fn page_rate(&self, mem: &Memory, u: UnitId) -> f64 {
        let rate = self.unit_rate(mem, u);
        match mem.grain_of(u) {
            1 => rate,
            g => rate / g as f64,
        }
    }

    /// Whether unit `u` is accessed at all: [`Load::unit_rate`] `> 0`, without its Zipf
    /// weight. A weight `(rank + 1)^-s` is never 0, so the rate is positive exactly when its
    /// class is accessed and the unit has a position in it; a hint fault asks only that, once
    /// per fault, and the `pow` of the weight was a tenth of a churning run.
    #[must_use]
    #[inline]
    pub fn unit_accessed(&self, mem: &Memory, u: UnitId) -> bool {
        let c = mem.class_of(u);
        let class = mem.class(c);
        self.accessed_rate(c, class).is_some_and(|rate| rate > 0.0)
            && match class.spread {
                Spread::Uniform => true,
                Spread::Zipf { .. } => class.index_of(u).is_some(),
            }
    }

    /// The rate of class `c`, when it is accessed and has weight (else every unit's rate is 0).
    #[inline]
    fn accessed_rate(&self, c: ClassId, class: &Class) -> Option<f64> {
        let rate = self.class_rate[usize::from(c.0)];
        (rate != 0.0 && class.total_weight > 0.0).then_some(rate)
    }

    /// The access rate of every page of `c`'s units when the class is uniform (then it is
    /// the same for all, the value [`Load::page_rate`] gives), `None` for a Zipf class.
    #[must_use]
    #[inline]
    pub fn uniform_page_rate(&self, mem: &Memory, c: ClassId) -> Option<f64> {
        let class = mem.class(c);
        let grain = mem.regions()[class.region.0 as usize].grain;
        (class.spread == Spread::Uniform).then(|| {
            let unit_rate = self
                .accessed_rate(c, class)
                .map_or(0.0, |rate| rate / class.total_weight);
            match grain {
                1 => unit_rate,
                g => unit_rate / f64::from(g),
            }
        })
    }

    /// Draws one unit of `class` in proportion to the class's access weights.
    pub fn sample_unit<R: Rng>(&self, mem: &Memory, class: ClassId, rng: &mut R) -> Option<UnitId> {
        let c = mem.class(class);
        if c.len == 0 {
            return None;
        }
        let idx = match (c.spread, self.zipf.get(&class)) {
            (Spread::Zipf { .. }, Some(z)) => {
                // Zipf samples are integers 1..=len as floats.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let rank = z.sample(rng) as u64;
                c.index_of_rank(rank.saturating_sub(1))
            }
            _ => rng.gen_range(0..c.len),
        };
        Some(c.unit_at(idx))
    }

    /// Draws one access of the whole workload: the unit and the node of the CPU that made it.
    pub fn sample_access<R: Rng>(
        &self,
        mem: &Memory,
        rng: &mut R,
    ) -> Option<(UnitId, NodeId, usize)> {
        self.sample_access_with_class(mem, rng)
            .map(|(u, node, process, _)| (u, node, process))
    }

    /// [`Load::sample_access`], with the class the unit was drawn from (its
    /// [`Memory::class_of`], known without looking it up).
    pub fn sample_access_with_class<R: Rng>(
        &self,
        mem: &Memory,
        rng: &mut R,
    ) -> Option<(UnitId, NodeId, usize, ClassId)> {
        if self.total_rate <= 0.0 {
            return None;
        }
        let x = rng.gen_range(0.0..self.total_rate);
        let i = self
            .cumulative
            .partition_point(|&c| c <= x)
            .min(self.flows.len() - 1);
        let f = self.flows[i];
        self.sample_unit(mem, f.class, rng)
            .map(|u| (u, f.node, f.process, f.class))
    }

    /// The flows to `class`, in flow order.
    fn flows_of(&self, class: ClassId) -> impl Iterator<Item = &Flow> + '_ {
        let c = usize::from(class.0);
        let (a, b) = match (self.class_start.get(c), self.class_start.get(c + 1)) {
            (Some(&a), Some(&b)) => (a as usize, b as usize),
            _ => (0, 0),
        };
        self.class_flow[a..b]
            .iter()
            .map(|&i| &self.flows[i as usize])
    }

    /// The node of a CPU that accesses `class`, drawn in proportion to the accessing groups'
    /// rates (the node a hint fault on one of its pages would come from).
    pub fn sample_accessor<R: Rng>(&self, class: ClassId, rng: &mut R) -> Option<NodeId> {
        let flows = || self.flows_of(class).filter(|f| f.rate > 0.0);
        let total: f64 = flows().map(|f| f.rate).sum();
        if total <= 0.0 {
            return None;
        }
        let mut x = rng.gen_range(0.0..total);
        for f in flows() {
            if x < f.rate {
                return Some(f.node);
            }
            x -= f.rate;
        }
        flows().last().map(|f| f.node)
    }

    /// How many threads of process `p` access `class` now: the threads of its running groups
    /// with a stream to the class, counted at full scale ([`ThreadGroup::sharing`]). Threads of one mm that touch the same pages contend when
    /// one of them takes a hint fault on, or migrates, one of those pages (the PTE lock, the
    /// migration entries, TLB shootdowns to every CPU running the mm), so the cost of a
    /// fault or a migration grows with this (crate::numab::hint_fault_cost_ns). At least 1:
    /// the faulting thread itself.
    #[must_use]
    pub fn sharing_threads(&self, p: usize, class: ClassId) -> u32 {
        self.flows_of(class)
            .filter(|f| f.process == p && f.rate > 0.0)
            .map(|f| f.threads)
            .sum::<u32>()
            .max(1)
    }

    /// The process index that accesses `class` most (for charging per-access taxes).
    #[must_use]
    pub fn main_accessor(&self, class: ClassId) -> Option<usize> {
        let mut best: Option<(usize, f64)> = None;
        for f in self.flows_of(class) {
            if best.is_none_or(|(_, r)| f.rate > r) {
                best = Some((f.process, f.rate));
            }
        }
        best.map(|b| b.0)
    }
}
