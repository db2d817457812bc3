//! Access heat and working-set size per process, from a trace's observations (`tierd report
//! TRACE --heatmap`).
//!
//! The grid's x axis is time in `cols` equal windows over the trace; its y axis is the
//! process's observed pages in address order, in `rows` buckets of equally many distinct
//! pages. Ranking rather than a linear address scale squeezes out the unmapped gaps of an
//! address space (heap near 0x5555..., libraries and stacks near 0x7fff...), which would
//! otherwise leave every mapping a hairline. A cell's value is the observations' weight
//! (a DAMON region's `nr_accesses`, 1 for a sample or a fault). The working-set size of a
//! window is how many distinct pages were observed in it.

use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;
use tierd_engine::types::{SpaceId, Vpn};
use tierd_engine::OwnerUpdate;

use crate::replay::Pass;

/// One process's heat.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProcessHeat {
    /// The address space.
    pub space: u32,
    /// Its process id, where the trace says (else the space id).
    pub pid: u32,
    /// Observations of it.
    pub observations: u64,
    /// Distinct pages observed over the whole trace.
    pub pages: u64,
    /// Time windows (x).
    pub cols: usize,
    /// Address buckets (y).
    pub rows: usize,
    /// The trace's first and last observation, seconds.
    pub t0_s: f64,
    /// See `t0_s`.
    pub t1_s: f64,
    /// Lowest and highest observed address.
    pub addr_lo: u64,
    /// See `addr_lo`.
    pub addr_hi: u64,
    /// Weight per cell, row-major, row 0 the lowest addresses.
    pub cells: Vec<u64>,
    /// `(window start s, distinct pages observed in the window)`.
    pub wss: Vec<(f64, u64)>,
}

/// The heat of the `top` most observed processes, most observed first.
#[must_use]
pub fn heat(passes: &[Pass], cols: usize, rows: usize, top: usize) -> Vec<ProcessHeat> {
    let cols = cols.max(1);
    let rows = rows.max(1);
    let mut pid: FxHashMap<SpaceId, u32> = FxHashMap::default();
    let mut count: FxHashMap<SpaceId, u64> = FxHashMap::default();
    let (mut t0, mut t1) = (u64::MAX, 0_u64);
    for p in passes {
        for u in p.owners.iter().flatten() {
            if let OwnerUpdate::Owner { space, owner } = u {
                pid.insert(*space, owner.pid);
            }
        }
        for o in p.observations.iter().flatten() {
            *count.entry(o.page.space).or_default() += 1;
            t0 = t0.min(o.time.0);
            t1 = t1.max(o.time.0);
        }
    }
    if count.is_empty() {
        return Vec::new();
    }
    let span = (t1 - t0).max(1);
    let col_of = |t: u64| {
        let c = u128::from(t - t0) * cols as u128 / u128::from(span);
        usize::try_from(c).unwrap_or(usize::MAX).min(cols - 1)
    };
    let mut spaces: Vec<(SpaceId, u64)> = count.into_iter().collect();
    spaces.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    spaces.truncate(top);
    spaces
        .into_iter()
        .map(|(space, n)| {
            let mut vpns: Vec<Vpn> = passes
                .iter()
                .flat_map(|p| p.observations.iter().flatten())
                .filter(|o| o.page.space == space)
                .map(|o| o.page.vpn)
                .collect();
            vpns.sort_unstable();
            vpns.dedup();
            let distinct = vpns.len();
            let mut cells = vec![0_u64; rows * cols];
            let mut window: Vec<FxHashSet<Vpn>> = vec![FxHashSet::default(); cols];
            for o in passes
                .iter()
                .flat_map(|p| p.observations.iter().flatten())
                .filter(|o| o.page.space == space)
            {
                let rank = vpns.binary_search(&o.page.vpn).unwrap_or(0);
                let row = (rank * rows / distinct.max(1)).min(rows - 1);
                let col = col_of(o.time.0);
                cells[row * cols + col] += u64::from(o.weight.max(1));
                window[col].insert(o.page.vpn);
            }
            let secs = |t: u64| t as f64 / 1e9;
            let width = span as f64 / cols as f64;
            ProcessHeat {
                space: space.0,
                pid: pid.get(&space).copied().unwrap_or(space.0),
                observations: n,
                pages: distinct as u64,
                cols,
                rows,
                t0_s: secs(t0),
                t1_s: secs(t1),
                addr_lo: vpns.first().map_or(0, |v| v.addr()),
                addr_hi: vpns.last().map_or(0, |v| v.addr()),
                cells,
                wss: window
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (secs(t0) + i as f64 * width / 1e9, s.len() as u64))
                    .collect(),
            }
        })
        .collect()
}
