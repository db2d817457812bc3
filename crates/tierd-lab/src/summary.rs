//! From a run's samples to the seed-style row, and the table, JSON and CSV.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::experiment::{Experiment, Thp};
use crate::run::RunData;

/// USER_HZ, the unit of `/proc/PID/stat` CPU times, as a float for dividing.
#[allow(clippy::cast_precision_loss)]
const USER_HZ: f64 = tierd_linux::read::proc::USER_HZ as f64;
const PAGE_MIB: f64 = 1.0 / 256.0;

/// One row of an experiment's table.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Row id.
    pub id: String,
    /// Mechanism name.
    pub mechanism: String,
    /// The guest's THP mode the run was set up with (the experiment's).
    #[serde(default)]
    pub thp: Thp,
    /// What the guest had, read back after setting it: `enabled` and `defrag` of
    /// /sys/kernel/mm/transparent_hugepage (the bracketed words), e.g. `always/madvise`.
    #[serde(default)]
    pub thp_seen: Option<String>,
    /// The workload's `AnonHugePages` (/proc/PID/smaps_rollup) when the mechanism started and
    /// at the end, MiB: how much of it THPs backed.
    #[serde(default)]
    pub workload_thp_mib: Option<(f64, f64)>,
    /// Seconds after the start until 50 / 90 / 95 % of the first part (the hot set) was on
    /// the fast node (`None`: never within the run).
    pub t50_s: Option<f64>,
    /// As above, 90 %.
    pub t90_s: Option<f64>,
    /// As above, 95 %.
    pub t95_s: Option<f64>,
    /// Share of the hot part on the fast node at the end, percent.
    pub hot_on_fast_pct: f64,
    /// All parts' pages on the fast node at the end, MiB.
    pub fast_mib: f64,
    /// `(hot pages on fast + cold pages that came to fast - hot pages) / hot pages`, percent
    /// (the seed's over-promotion, `(fast_mib - hot MiB) / hot MiB`, where nothing starts on
    /// the fast node; cold pages already there before the mechanism started are not counted).
    pub over_pct: f64,
    /// Share of the other parts (cold) that came to the fast node during the run, percent.
    pub cold_moved_pct: f64,
    /// MiB migrated as the kernel counts it (growth of `pgmigrate_success` * 4 KiB, which every
    /// mechanism's moves count in, a THP as 512 pages).
    pub migrated_mib: f64,
    /// THPs migrated (growth of `thp_migration_success`).
    #[serde(default)]
    pub thp_migrated: u64,
    /// THPs that failed to migrate (growth of `thp_migration_fail`), and of those the ones
    /// split to be moved (`thp_migration_split`).
    #[serde(default)]
    pub thp_migration_fail: u64,
    /// Growth of `thp_migration_split`.
    #[serde(default)]
    pub thp_migration_split: u64,
    /// THP folios split (growth of `thp_split_page`).
    #[serde(default)]
    pub thp_split_page: u64,
    /// THP PMD mappings split (growth of `thp_split_pmd`).
    #[serde(default)]
    pub thp_split_pmd: u64,
    /// THPs queued for a deferred split (growth of `thp_deferred_split_page`).
    #[serde(default)]
    pub thp_deferred_split: u64,
    /// Pages compaction isolated (growth of `compact_isolated`: pages isolated to be migrated
    /// plus free pages isolated as targets): non-zero means compaction ran in the window and
    /// its migrations are part of `migrated_mib`.
    #[serde(default)]
    pub compact_isolated: u64,
    /// tierd's own count of what it moved, MiB: (`pgpromote_success` + `pgdemote_success` of
    /// its status) * 4 KiB, when tierd ran.
    #[serde(default)]
    pub tierd_migrated_mib: Option<f64>,
    /// tierd's own count of the THPs it moved (its `thp_migration_success` engine counter,
    /// when its status has one).
    #[serde(default)]
    pub tierd_thp_migrated: Option<u64>,
    /// `100 * tierd_migrated_mib / migrated_mib`: 100 when tierd's count and the kernel's
    /// agree (tierd is then the only migrator of the run).
    #[serde(default)]
    pub tierd_mib_agreement_pct: Option<f64>,
    /// `100 * tierd_thp_migrated / thp_migrated`.
    #[serde(default)]
    pub tierd_thp_agreement_pct: Option<f64>,
    /// Growth of `pgpromote_success` (NUMA balancing's promotions only).
    pub pgpromote_success: u64,
    /// Growth of `numa_hint_faults`.
    pub hint_faults: u64,
    /// Growth of `numa_pte_updates`.
    pub pte_updates: u64,
    /// Growth of `pgdemote_kswapd + pgdemote_direct`.
    pub kernel_demoted: u64,
    /// CPU seconds of the promoter (tierd or kdamond) and of tierd's kdamond, if any.
    pub promoter_cpu_s: Option<f64>,
    /// CPU seconds of the workload.
    pub workload_cpu_s: f64,
    /// Mean steps per second of the workload over the last quarter of the run.
    pub throughput: Option<f64>,
    /// Real servers ([`crate::apps`]): the load generator's mean ops/s over the last quarter
    /// of the run (under TCG both nodes cost the same per access, so this shows overhead, not
    /// placement), and its p95 latency in µs.
    #[serde(default)]
    pub kv_ops_s: Option<f64>,
    /// See `kv_ops_s`.
    #[serde(default)]
    pub kv_p95_us: Option<f64>,
    /// The workload's accesses per hot page per second over the whole run (its steps per
    /// second, each one access to a hot page, over the hot part's pages): under TCG this is
    /// set by the host's speed, and it is what a source sees of the hot set, so it is what
    /// rows from different hosts are compared by.
    #[serde(default)]
    pub hot_accesses_per_page_s: Option<f64>,
    /// tierd's DAMON sampling interval over the run, µs: (first, last, changes), from its
    /// log of every change.
    #[serde(default)]
    pub damon_sample_us: Option<(u64, u64, usize)>,
    /// MiB of the parts not counted in over-promotion (a server's own structures) on the
    /// fast node at the end; `None` when the experiment has none.
    #[serde(default)]
    pub uncounted_fast_mib: Option<f64>,
    /// tierd's loop CPU by phase at the end (its `/status` `loop_cpu_s`), seconds, with the
    /// process's system time (`daemon_cpu_sys_s`) as `"sys"`; empty for other rows.
    #[serde(default)]
    pub tierd_cpu_phases: BTreeMap<String, f64>,
    /// Checksum failures the workload reported (integrity runs).
    pub checksum_failures: Option<u64>,
    /// The integrity workload's cuts into its own buffer (`--split-every-ms`): pages
    /// discarded, pages unmapped, 2 MiB blocks cut into; `None` when it made none.
    #[serde(default)]
    pub workload_cuts: Option<(u64, u64, u64)>,
    /// Whether the workload printed its `done` line (it did not crash and was not killed).
    pub workload_finished: bool,
    /// Multi-threaded chases: hot pages on a fast node other than their thread's, percent of
    /// the hot pages on fast nodes (promotions that landed on the wrong fast node).
    pub wrong_node_pct: Option<f64>,
    /// Pages tierd demoted (its `pgdemote_success`, from its status), when tierd ran.
    pub tierd_demoted: Option<u64>,
    /// Pages tierd promoted (`pgpromote_success` of its status), when tierd ran.
    pub tierd_promoted: Option<u64>,
    /// Wall time of the guest, seconds.
    pub wall_s: f64,
    /// Why the run produced no measurements (the guest hung, failed to boot, ...).
    pub error: Option<String>,
    /// Why the mechanism did not run: the guest kernel lacks what it needs (the row is not a
    /// failure, and not a result).
    #[serde(default)]
    pub skipped: Option<String>,
}

fn delta(d: &RunData, key: &str) -> u64 {
    let get = |i: usize| {
        d.samples
            .get(i)
            .and_then(|s| s.vmstat.get(key))
            .copied()
            .unwrap_or(0)
    };
    get(d.samples.len().saturating_sub(1)).saturating_sub(get(0))
}

fn cpu_delta(d: &RunData, who: &str) -> Option<u64> {
    let first = d.samples.iter().find_map(|s| s.cpu_ticks.get(who).copied());
    let last = d
        .samples
        .iter()
        .rev()
        .find_map(|s| s.cpu_ticks.get(who).copied())?;
    // A promoter that started with the mechanism had no reading before it: count from 0.
    let first_t = d
        .samples
        .iter()
        .find(|s| s.cpu_ticks.contains_key(who))
        .map_or(0.0, |s| s.t);
    Some(if first_t > 0.0 {
        last
    } else {
        last - first.unwrap_or(0)
    })
}

#[allow(clippy::cast_precision_loss)]
fn pages_mib(p: u64) -> f64 {
    p as f64 * PAGE_MIB
}

/// The summary row of one run.
#[must_use]
#[allow(clippy::cast_precision_loss)]
pub fn summarize(exp: &Experiment, id: &str, mechanism: &str, d: &RunData) -> Summary {
    // A real server's parts are sized in the guest (its hot items' pages).
    let sized = crate::apps::sized(exp, d);
    let exp = sized.as_ref().unwrap_or(exp);
    let (kv_ops_s, kv_p95_us) = crate::apps::kv_figures(d);
    let hot = &exp.parts[0];
    let on_fast = |s: &crate::run::Sample, part: &str| part_on_fast(exp, s, part);
    // Times count from when the workload starts touching its memory.
    let from = f64::from(exp.accesses_from_s);
    let reach = |frac: f64| {
        d.samples
            .iter()
            .filter(|s| s.t >= from)
            .find(|s| on_fast(s, &hot.name) as f64 >= frac * hot.pages as f64)
            .map(|s| s.t - from)
    };
    let last = d.samples.last();
    let hot_fast = last.map_or(0, |s| on_fast(s, &hot.name));
    // Over-promotion counts the other parts that are the workload's data (cold items, the
    // cold part); a server's own structures are reported apart.
    let counted = || exp.parts[1..].iter().filter(|p| p.in_over);
    let others: u64 = counted().map(|p| p.pages).sum();
    let others_fast: u64 = last.map_or(0, |s| counted().map(|p| on_fast(s, &p.name)).sum());
    let uncounted_fast: u64 = last.map_or(0, |s| {
        exp.parts[1..]
            .iter()
            .filter(|p| !p.in_over)
            .map(|p| on_fast(s, &p.name))
            .sum()
    });
    let uncounted_fast_mib = exp.parts[1..]
        .iter()
        .any(|p| !p.in_over)
        .then(|| pages_mib(uncounted_fast));
    // Pages of the counted parts already on a fast node in the first sample, before the
    // mechanism started, got there at allocation (a preferred-node policy with room left:
    // lab memcached-pm), not by promotion: over-promotion counts what arrived after it.
    // Nothing starts there in the other experiments, where this is 0.
    let others_fast_start: u64 = d
        .samples
        .first()
        .map_or(0, |s| counted().map(|p| on_fast(s, &p.name)).sum());
    let others_moved = others_fast.saturating_sub(others_fast_start);
    let fast_pages = hot_fast + others_fast;
    let promoter = match (cpu_delta(d, "promoter"), cpu_delta(d, "kdamond")) {
        (None, None) => None,
        (a, b) => Some((a.unwrap_or(0) + b.unwrap_or(0)) as f64 / USER_HZ),
    };
    // The last quarter of the workload's interval lines (seed A's "mean of the last 25 %").
    let rates: Vec<f64> = d
        .workload_lines
        .iter()
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("steps_per_s="))
                .and_then(|v| v.parse().ok())
        })
        .collect();
    let tail = &rates[rates.len() - rates.len() / 4..];
    let throughput = (!tail.is_empty()).then(|| tail.iter().sum::<f64>() / tail.len() as f64);
    let chase = exp.workload.starts_with("chase");
    let hot_accesses_per_page_s = (chase && !rates.is_empty())
        .then(|| rates.iter().sum::<f64>() / rates.len() as f64 / hot.pages.max(1) as f64);
    let failures = d
        .workload_lines
        .iter()
        .filter(|l| l.starts_with("integrity") && l.contains(" done"))
        .find_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("failures="))
                .and_then(|v| v.parse().ok())
        });
    let workload_cuts = d
        .workload_lines
        .iter()
        .filter(|l| l.starts_with("integrity") && l.contains(" done"))
        .find_map(|l| match tierd_workload::report::IntegrityLine::parse(l) {
            Ok(tierd_workload::report::IntegrityLine::Done(s))
                if s.discarded_pages + s.unmapped_pages + s.cut_blocks > 0 =>
            {
                Some((s.discarded_pages, s.unmapped_pages, s.cut_blocks))
            }
            _ => None,
        });
    let finished = d
        .workload_lines
        .iter()
        .any(|l| l.split_whitespace().nth(1) == Some("done"));
    let wrong_node_pct = wrong_node(exp, d);
    let tierd_stat = |k: &str| d.tierd_engine_stat(k);
    let samples_us: Vec<u64> = d
        .notes
        .iter()
        .filter_map(|n| n.strip_prefix("TIERD_OUT "))
        .filter_map(|n| n.split(" intervals sample ").nth(1))
        .filter_map(|r| r.split_whitespace().next()?.parse().ok())
        .collect();
    let mut tierd_cpu_phases: BTreeMap<String, f64> = d
        .tierd_status
        .as_ref()
        .and_then(|s| s.get("loop_cpu_s"))
        .and_then(serde_json::Value::as_object)
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
                .collect()
        })
        .unwrap_or_default();
    // DAMON reads and regions (what a read costs grows with the regions).
    if let Some(iv) = d
        .tierd_status
        .as_ref()
        .and_then(|s| s.get("sources"))
        .and_then(serde_json::Value::as_array)
        .and_then(|a| a.iter().find_map(|s| s.get("intervals")))
    {
        for k in ["reads", "last_regions", "max_regions"] {
            if let Some(v) = iv.get(k).and_then(serde_json::Value::as_f64) {
                tierd_cpu_phases.insert(format!("damon_{k}"), v);
            }
        }
    }
    if let Some(sys) = d
        .tierd_status
        .as_ref()
        .and_then(|s| s.get("daemon_cpu_sys_s"))
        .and_then(serde_json::Value::as_f64)
    {
        if !tierd_cpu_phases.is_empty() {
            tierd_cpu_phases.insert("sys".into(), sys);
        }
    }
    let damon_sample_us = match (samples_us.first(), samples_us.last()) {
        (Some(a), Some(b)) => Some((*a, *b, samples_us.len() - 1)),
        _ => None,
    };
    let migrated_pages = delta(d, "pgmigrate_success");
    let thp_migrated = delta(d, "thp_migration_success");
    let tierd_pages = match (
        tierd_stat("pgpromote_success"),
        tierd_stat("pgdemote_success"),
    ) {
        (None, None) => None,
        (p, q) => Some(p.unwrap_or(0) + q.unwrap_or(0)),
    };
    let tierd_thp = tierd_stat("thp_migration_success");
    Summary {
        thp: exp.thp,
        thp_seen: thp_seen(d),
        workload_thp_mib: workload_thp_mib(d),
        thp_migrated,
        thp_migration_fail: delta(d, "thp_migration_fail"),
        thp_migration_split: delta(d, "thp_migration_split"),
        thp_split_page: delta(d, "thp_split_page"),
        thp_split_pmd: delta(d, "thp_split_pmd"),
        thp_deferred_split: delta(d, "thp_deferred_split_page"),
        compact_isolated: delta(d, "compact_isolated"),
        tierd_migrated_mib: tierd_pages.map(pages_mib),
        tierd_thp_migrated: tierd_thp,
        tierd_mib_agreement_pct: tierd_pages.and_then(|t| agreement_pct(t, migrated_pages)),
        tierd_thp_agreement_pct: tierd_thp.and_then(|t| agreement_pct(t, thp_migrated)),
        damon_sample_us,
        tierd_cpu_phases,
        uncounted_fast_mib,
        workload_finished: finished,
        wrong_node_pct,
        tierd_demoted: tierd_stat("pgdemote_success"),
        tierd_promoted: tierd_stat("pgpromote_success"),
        id: id.to_string(),
        mechanism: mechanism.to_string(),
        t50_s: reach(0.50),
        t90_s: reach(0.90),
        t95_s: reach(0.95),
        hot_on_fast_pct: 100.0 * hot_fast as f64 / hot.pages.max(1) as f64,
        fast_mib: pages_mib(fast_pages),
        over_pct: 100.0 * ((hot_fast + others_moved) as f64 - hot.pages as f64)
            / hot.pages.max(1) as f64,
        cold_moved_pct: if others == 0 {
            0.0
        } else {
            100.0 * others_moved as f64 / others as f64
        },
        migrated_mib: pages_mib(migrated_pages),
        pgpromote_success: delta(d, "pgpromote_success"),
        hint_faults: delta(d, "numa_hint_faults"),
        pte_updates: delta(d, "numa_pte_updates"),
        kernel_demoted: delta(d, "pgdemote_kswapd") + delta(d, "pgdemote_direct"),
        promoter_cpu_s: promoter,
        workload_cpu_s: cpu_delta(d, "workload").unwrap_or(0) as f64 / USER_HZ,
        throughput,
        kv_ops_s,
        kv_p95_us,
        hot_accesses_per_page_s,
        checksum_failures: failures,
        workload_cuts,
        wall_s: d.wall_s,
        error: unmeasured(d),
        skipped: d
            .notes
            .iter()
            .find_map(|n| n.strip_prefix("SKIP "))
            .map(str::to_string),
    }
}

/// `100 * ours / kernel`: 100 when the two counts agree; `None` when the kernel counted
/// nothing but we did (no ratio), 100 when both are 0.
#[allow(clippy::cast_precision_loss)]
fn agreement_pct(ours: u64, kernel: u64) -> Option<f64> {
    match (ours, kernel) {
        (0, 0) => Some(100.0),
        (_, 0) => None,
        (a, k) => Some(100.0 * a as f64 / k as f64),
    }
}

/// `enabled/defrag` from the run's `LAB THP enabled=.. defrag=..` line.
fn thp_seen(d: &RunData) -> Option<String> {
    let line = d.notes.iter().find_map(|n| n.strip_prefix("THP "))?;
    let get = |k: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .filter(|v| !v.is_empty())
    };
    Some(format!("{}/{}", get("enabled=")?, get("defrag=")?))
}

/// The workload's `AnonHugePages` at the start and at the end (`LAB THPMAP at=.. anon_huge_kb=..`
/// lines), MiB.
#[allow(clippy::cast_precision_loss)]
fn workload_thp_mib(d: &RunData) -> Option<(f64, f64)> {
    let at = |when: &str| {
        d.notes
            .iter()
            .filter_map(|n| n.strip_prefix("THPMAP "))
            .find(|n| n.split_whitespace().any(|w| w == format!("at={when}")))
            .and_then(|n| {
                n.split_whitespace()
                    .find_map(|w| w.strip_prefix("anon_huge_kb="))?
                    .parse::<u64>()
                    .ok()
            })
            .map(|kb| kb as f64 / 1024.0)
    };
    Some((at("start")?, at("end")?))
}

/// From the workload's last interval line: for each thread i with home node `home[i]`, its
/// hot pages on fast nodes other than home (`hot_t<i>_n<j>` keys).
#[allow(clippy::cast_precision_loss)]
fn wrong_node(exp: &Experiment, d: &RunData) -> Option<f64> {
    if !d.procs.is_empty() {
        return wrong_node_procs(exp, d);
    }
    if exp.home_nodes.is_empty() {
        return None;
    }
    let line = d
        .workload_lines
        .iter()
        .rev()
        .find(|l| l.starts_with("chase t=") || l.starts_with("chase done"))?;
    let (mut on_fast, mut wrong) = (0u64, 0u64);
    for w in line.split_whitespace() {
        let Some((k, v)) = w.split_once('=') else {
            continue;
        };
        let Some(rest) = k.strip_prefix("hot_t") else {
            continue;
        };
        let Some((t, n)) = rest.split_once("_n") else {
            continue;
        };
        let (Ok(t), Ok(n), Ok(v)) = (t.parse::<usize>(), n.parse::<u32>(), v.parse::<u64>()) else {
            continue;
        };
        if exp.fast.contains(&n) {
            on_fast += v;
            if exp.home_nodes.get(t) != Some(&n) {
                wrong += v;
            }
        }
    }
    (on_fast > 0).then(|| 100.0 * wrong as f64 / on_fast as f64)
}

/// A multi-process workload, from its last sample's per-process placement: each process's
/// hot pages on a fast node other than its home node (its CPU's), percent of all hot pages
/// on fast nodes.
#[allow(clippy::cast_precision_loss)]
fn wrong_node_procs(exp: &Experiment, d: &RunData) -> Option<f64> {
    let hot = &exp.parts.first()?.name;
    let last = d.samples.iter().rev().find(|s| !s.proc_parts.is_empty())?;
    let (mut on_fast, mut wrong) = (0u64, 0u64);
    for p in &d.procs {
        let Some(nodes) = last.proc_parts.get(&p.proc).and_then(|m| m.get(hot)) else {
            continue;
        };
        for (n, c) in nodes {
            if exp.fast.contains(n) {
                on_fast += c;
                if *n != p.node {
                    wrong += c;
                }
            }
        }
    }
    (on_fast > 0).then(|| 100.0 * wrong as f64 / on_fast as f64)
}

/// Why a run that sampled placement measured none of it: no sample holds any part, so every
/// figure read from placement would be 0 (the workload's pid or part addresses were never
/// known: a `LAB WARN` line says which, and is quoted). A run is then an error, not a row
/// that placed nothing.
fn unmeasured(d: &RunData) -> Option<String> {
    if d.samples.is_empty() || d.samples.iter().any(|s| !s.parts.is_empty()) {
        return None;
    }
    let warn = d
        .notes
        .iter()
        .find_map(|n| n.strip_prefix("WARN "))
        .map_or_else(String::new, |w| format!(": {w}"));
    Some(format!(
        "no sample measured the parts' placement ({} samples){warn}",
        d.samples.len()
    ))
}

/// Pages of `part` on the experiment's fast nodes in one sample.
fn part_on_fast(exp: &Experiment, s: &crate::run::Sample, part: &str) -> u64 {
    s.parts.get(part).map_or(0, |m| {
        m.iter()
            .filter(|(n, _)| exp.fast.contains(n))
            .map(|(_, c)| *c)
            .sum()
    })
}

/// The hot part's share on the fast nodes over the run: `(seconds since the mechanism
/// started, percent)` per sample (what the table's t50/t90 and "hot on fast" are read from).
#[must_use]
#[allow(clippy::cast_precision_loss)]
pub fn hot_on_fast_series(exp: &Experiment, d: &RunData) -> Vec<(f64, f64)> {
    let Some(hot) = exp.parts.first() else {
        return Vec::new();
    };
    d.samples
        .iter()
        .map(|s| {
            let on = part_on_fast(exp, s, &hot.name) as f64;
            (s.t, 100.0 * on / hot.pages.max(1) as f64)
        })
        .collect()
}

/// The chase's latency per step over the run, from its interval lines: `(seconds since the
/// chase started, ns)`. A multi-threaded chase's line counts all threads' steps together, so
/// the latency is the mean over its threads of `1e9 / steps_per_s_t<i>` (one thread: the
/// line's `ns_per_step`). Lines that are not chase samples are skipped.
#[must_use]
#[allow(clippy::cast_precision_loss)]
pub fn latency_series(d: &RunData) -> Vec<(f64, f64)> {
    use tierd_workload::report::ChaseLine;
    d.workload_lines
        .iter()
        .filter_map(|l| match ChaseLine::parse(l) {
            Ok(ChaseLine::Sample(s)) => {
                let per_thread: Vec<f64> = s
                    .threads
                    .iter()
                    .filter(|t| t.steps_per_s > 0.0)
                    .map(|t| 1e9 / t.steps_per_s)
                    .collect();
                let ns = if per_thread.is_empty() {
                    s.ns_per_step
                } else {
                    per_thread.iter().sum::<f64>() / per_thread.len() as f64
                };
                ns.is_finite().then_some((s.t, ns))
            }
            _ => None,
        })
        .collect()
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.prec$}"))
}

/// What only some experiments have: churn, wrong nodes, checksums.
fn notes(r: &Summary) -> String {
    let mut n = Vec::new();
    if let Some(e) = &r.error {
        let first = e.lines().next().unwrap_or_default();
        return format!("FAILED: {first}");
    }
    if let Some(why) = &r.skipped {
        return format!("SKIPPED: {why}");
    }
    if let Some(seen) = &r.thp_seen {
        if seen.split('/').next() != Some(r.thp.name()) {
            n.push(format!("THP asked {} but guest had {seen}", r.thp));
        }
    }
    if let Some(ops) = r.kv_ops_s {
        // The experiment's title says it too: ops/s is overhead, not placement, under TCG.
        n.push(format!(
            "kv {ops:.0} ops/s (TCG: overhead, not placement), p95 {} us",
            r.kv_p95_us
                .map_or_else(|| "-".to_string(), |p| format!("{p:.0}"))
        ));
    }
    if let Some((a, b)) = r.workload_thp_mib {
        if a > 0.0 || b > 0.0 {
            n.push(format!("workload THP {a:.0} -> {b:.0} MiB"));
        }
    }
    if r.thp_migration_fail > 0 {
        n.push(format!(
            "THP migration failed {} (split {})",
            r.thp_migration_fail, r.thp_migration_split
        ));
    }
    if r.thp_deferred_split > 0 {
        n.push(format!("deferred splits {}", r.thp_deferred_split));
    }
    if r.compact_isolated > 0 {
        n.push(format!(
            "compaction isolated {} pages (in migrated MiB)",
            r.compact_isolated
        ));
    }
    if r.kernel_demoted > 0 {
        n.push(format!("kernel demoted {}", r.kernel_demoted));
    }
    if let (Some(p), Some(d)) = (r.tierd_promoted, r.tierd_demoted) {
        if d > 0 {
            n.push(format!("tierd promoted {p} demoted {d}"));
        }
    }
    if let Some((first, last, changes)) = r.damon_sample_us {
        let changes = match changes {
            0 => "fixed".to_string(),
            1 => "1 change".to_string(),
            c => format!("{c} changes"),
        };
        // Microseconds to milliseconds for display only.
        #[allow(clippy::cast_precision_loss)]
        let ms = |us: u64| us as f64 / 1000.0;
        n.push(format!(
            "DAMON sample {:.0} -> {:.0} ms ({changes})",
            ms(first),
            ms(last)
        ));
    }
    if let Some(m) = r.uncounted_fast_mib {
        n.push(format!(
            "server's own pages on fast {m:.1} MiB (not in over)"
        ));
    }
    if !r.tierd_cpu_phases.is_empty() {
        // The phases that took at least 0.1 s, largest first.
        let mut p: Vec<(&String, &f64)> = r
            .tierd_cpu_phases
            .iter()
            .filter(|(k, v)| k.as_str() != "sys" && !k.starts_with("damon_") && **v >= 0.1)
            .collect();
        p.sort_by(|a, b| b.1.total_cmp(a.1));
        let parts: Vec<String> = p.iter().map(|(k, v)| format!("{k} {v:.1}")).collect();
        n.push(format!(
            "tierd CPU s: {} (sys {:.1})",
            if parts.is_empty() {
                "-".to_string()
            } else {
                parts.join(", ")
            },
            r.tierd_cpu_phases.get("sys").copied().unwrap_or(0.0)
        ));
        let g = |k: &str| r.tierd_cpu_phases.get(k).copied().unwrap_or(0.0);
        if g("damon_reads") > 0.0 {
            n.push(format!(
                "DAMON reads {:.0}, regions last {:.0} max {:.0}",
                g("damon_reads"),
                g("damon_last_regions"),
                g("damon_max_regions")
            ));
        }
    }
    if let Some(w) = r.wrong_node_pct {
        n.push(format!("wrong fast node {w:.1} %"));
    }
    if let Some(f) = r.checksum_failures {
        n.push(format!("checksum failures {f}"));
    }
    if let Some((discarded, unmapped, blocks)) = r.workload_cuts {
        n.push(format!(
            "workload cut {blocks} blocks ({discarded} pages discarded, {unmapped} unmapped)"
        ));
    }
    if !r.workload_finished {
        n.push("workload did not finish".into());
    }
    n.join("; ")
}

/// The experiment's table, one row per run.
#[must_use]
pub fn table(exp: &Experiment, rows: &[Summary]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{}", exp.title);
    let _ = writeln!(
        o,
        "| id | mechanism | THP | t50 s | t90 s | t95 s | hot on fast | fast MiB | over | cold moved | migrated MiB | THPs migrated | THP splits (pmd/folio) | tierd MiB (agree) | tierd THPs (agree) | pgpromote | hint faults | promoter CPU s | workload CPU s | steps/s | acc/hot page/s | notes |"
    );
    let _ = writeln!(
        o,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let agree = |v: Option<String>, pct: Option<f64>| match (v, pct) {
            (Some(v), Some(p)) => format!("{v} ({p:.1} %)"),
            (Some(v), None) => format!("{v} (-)"),
            _ => "-".to_string(),
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {:.1} % | {:.0} | {:+.1} % | {:.1} % | {:.0} | {} | {}/{} | {} | {} | {} | {} | {} | {:.1} | {} | {} | {} |",
            r.id,
            r.mechanism,
            r.thp,
            opt(r.t50_s, 1),
            opt(r.t90_s, 1),
            opt(r.t95_s, 1),
            r.hot_on_fast_pct,
            r.fast_mib,
            r.over_pct,
            r.cold_moved_pct,
            r.migrated_mib,
            r.thp_migrated,
            r.thp_split_pmd,
            r.thp_split_page,
            agree(r.tierd_migrated_mib.map(|m| format!("{m:.0}")), r.tierd_mib_agreement_pct),
            agree(r.tierd_thp_migrated.map(|t| t.to_string()), r.tierd_thp_agreement_pct),
            r.pgpromote_success,
            r.hint_faults,
            opt(r.promoter_cpu_s, 2),
            r.workload_cpu_s,
            opt(r.throughput, 0),
            opt(r.hot_accesses_per_page_s, 1),
            notes(r),
        );
    }
    o
}

/// The spread of repeated runs of one experiment: per row id, the median and the range of
/// each figure over the runs (`runs[i]` holds the rows of run i).
#[must_use]
pub fn spread_table(exp: &Experiment, runs: &[Vec<Summary>]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{} ({} runs: median [min - max])", exp.title, runs.len());
    let _ = writeln!(
        o,
        "| id | mechanism | THP | t50 s | t90 s | t95 s | hot on fast % | over % | migrated MiB | promoter CPU s | acc/hot page/s | failed |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    let Some(first) = runs.first() else {
        return o;
    };
    for r0 in first {
        let rows: Vec<&Summary> = runs
            .iter()
            .filter_map(|rs| rs.iter().find(|r| r.id == r0.id))
            .collect();
        let ok: Vec<&&Summary> = rows.iter().filter(|r| r.error.is_none()).collect();
        let cell = |f: &dyn Fn(&Summary) -> Option<f64>, prec: usize| -> String {
            let mut v: Vec<f64> = ok.iter().filter_map(|r| f(r)).collect();
            let missing = ok.len() - v.len();
            if v.is_empty() {
                return "-".into();
            }
            v.sort_by(f64::total_cmp);
            let med = v[v.len() / 2];
            let s = format!("{med:.prec$} [{:.prec$} - {:.prec$}]", v[0], v[v.len() - 1]);
            if missing > 0 {
                format!("{s} ({missing} never)")
            } else {
                s
            }
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r0.id,
            r0.mechanism,
            r0.thp,
            cell(&|r| r.t50_s, 1),
            cell(&|r| r.t90_s, 1),
            cell(&|r| r.t95_s, 1),
            cell(&|r| Some(r.hot_on_fast_pct), 1),
            cell(&|r| Some(r.over_pct), 1),
            cell(&|r| Some(r.migrated_mib), 0),
            cell(&|r| r.promoter_cpu_s, 1),
            cell(&|r| r.hot_accesses_per_page_s, 1),
            rows.len() - ok.len(),
        );
    }
    o
}

/// A figure "tierd vs the best kernel mechanism" compares (issue 14's acceptance rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Seconds to 90 % of the hot set on the fast nodes (never: worst).
    T90,
    /// Seconds to 95 %.
    T95,
    /// Pages outside the hot set on the fast nodes at the end, percent of the hot set (the
    /// over-promotion of a row that promoted everything; a row that promoted little does not
    /// get a negative figure for it).
    OverPromotion,
    /// MiB migrated as the kernel counts it.
    MigratedMib,
    /// CPU seconds of the promoter (tierd plus its kdamond; a DAMON row's kdamonds). Compared
    /// with the DAMON rows only, and won only at half of the best one's or less.
    PromoterCpu,
    /// Hot pages on a fast node other than their thread's or process's, percent.
    WrongFastNode,
}

impl Metric {
    /// Every metric, in table order.
    pub const ALL: [Metric; 6] = [
        Metric::T90,
        Metric::T95,
        Metric::OverPromotion,
        Metric::MigratedMib,
        Metric::PromoterCpu,
        Metric::WrongFastNode,
    ];

    /// The name in tables.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Metric::T90 => "t90 s",
            Metric::T95 => "t95 s",
            Metric::OverPromotion => "over-promotion %",
            Metric::MigratedMib => "migrated MiB",
            Metric::PromoterCpu => "promoter CPU s",
            Metric::WrongFastNode => "wrong fast node %",
        }
    }

    /// How far apart two figures may be and still tie: one sampling period for times,
    /// one percentage point for shares, 5 % (at least 4 MiB) for migrated MiB. CPU has no
    /// tie: its goal is a ratio.
    fn tolerance(self, a: f64, b: f64) -> f64 {
        match self {
            Metric::T90 | Metric::T95 => 1.0,
            Metric::OverPromotion | Metric::WrongFastNode => 1.0,
            Metric::MigratedMib => (0.05 * a.max(b)).max(4.0),
            Metric::PromoterCpu => 0.0,
        }
    }

    /// Whether the metric is a cost of promoting (compared among rows that reached 90 %).
    fn is_cost(self) -> bool {
        matches!(
            self,
            Metric::OverPromotion | Metric::MigratedMib | Metric::PromoterCpu
        )
    }
}

/// tierd's best row against the kernel's best row for one metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// tierd is better by more than the metric's tolerance (CPU: at most half).
    Win,
    /// Within the tolerance.
    Tie,
    /// The kernel is better.
    Lose,
    /// No row to compare with (no kernel row, or no tierd row, measured the metric).
    NoData,
}

impl Outcome {
    /// The word in tables.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Win => "win",
            Outcome::Tie => "tie",
            Outcome::Lose => "LOSE",
            Outcome::NoData => "-",
        }
    }
}

/// One row of "tierd vs the best kernel mechanism".
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The experiment id.
    pub experiment: String,
    /// Its THP mode.
    pub thp: Thp,
    /// `uname -r` of the guest.
    pub guest_kernel: String,
    /// The metric.
    pub metric: Metric,
    /// The kernel row best at it (`id (mechanism)`), if any.
    pub kernel_row: Option<String>,
    /// Its figure (`None` for a time: never reached).
    pub kernel_value: Option<f64>,
    /// tierd's row best at it.
    pub tierd_row: Option<String>,
    /// Its figure.
    pub tierd_value: Option<f64>,
    /// The result.
    pub outcome: Outcome,
}

fn metric_value(exp: &Experiment, m: Metric, r: &Summary) -> Option<f64> {
    #[allow(clippy::cast_precision_loss)]
    let hot_mib = exp.parts.first().map_or(0.0, |p| p.pages as f64 * PAGE_MIB);
    match m {
        Metric::T90 => r.t90_s,
        Metric::T95 => r.t95_s,
        // The cold pages that came to the fast node, per hot page: the row's over-promotion
        // without its shortfall of hot pages (both against the part's real size).
        Metric::OverPromotion => {
            (hot_mib > 0.0).then(|| (r.over_pct + 100.0 - r.hot_on_fast_pct).max(0.0))
        }
        Metric::MigratedMib => Some(r.migrated_mib),
        Metric::PromoterCpu => r.promoter_cpu_s,
        Metric::WrongFastNode => r.wrong_node_pct,
    }
}

/// Lower is better for every metric; a time that was never reached (`None`) is the worst.
fn better(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(x), Some(y)) => x < y,
        (Some(_), None) => true,
        _ => false,
    }
}

/// "tierd vs the best kernel mechanism" for one experiment's rows: per metric, the kernel
/// row best at it, tierd's row best at it, and who wins. Rows that failed or were skipped
/// take no part, nor does the no-promotion baseline (it would win every cost for doing
/// nothing). Costs are compared among the rows that reached 90 % of the hot set (all rows of
/// a side when none did); when only one side reached it, its costs have nothing to compare
/// with (a mechanism that placed nothing spent nothing: no outcome). Promoter CPU is tierd
/// against the DAMON rows only (NUMA balancing has no promoter thread: its work is in the
/// workload's faults), won at <= 1/2 of the best DAMON row's (issue 14's goal). Times: `None` (never reached) loses to any time and ties
/// with `None`.
#[must_use]
pub fn versus(exp: &Experiment, rows: &[Summary], guest_kernel: &str) -> Vec<Verdict> {
    let ok = |r: &&Summary| r.error.is_none() && r.skipped.is_none();
    let tierd: Vec<&Summary> = rows
        .iter()
        .filter(ok)
        .filter(|r| r.mechanism == "tierd")
        .collect();
    let kernel: Vec<&Summary> = rows
        .iter()
        .filter(ok)
        .filter(|r| r.mechanism != "tierd" && r.mechanism != "baseline")
        .collect();
    let reached = |rs: &[&Summary]| rs.iter().any(|r| r.t90_s.is_some());
    let one_side_placed = reached(&kernel) != reached(&tierd);
    let mut out = Vec::new();
    for m in Metric::ALL {
        let side = |rs: &[&Summary], damon_only: bool| -> Option<(String, Option<f64>)> {
            let mut c: Vec<&Summary> = rs
                .iter()
                .copied()
                .filter(|r| !damon_only || r.mechanism == "damos" || r.mechanism == "damon-tiering")
                .filter(|r| {
                    m == Metric::T90 || m == Metric::T95 || metric_value(exp, m, r).is_some()
                })
                .collect();
            if m.is_cost() && c.iter().any(|r| r.t90_s.is_some()) {
                c.retain(|r| r.t90_s.is_some());
            }
            let mut best: Option<&Summary> = None;
            for r in c {
                if best.is_none_or(|b| better(metric_value(exp, m, r), metric_value(exp, m, b))) {
                    best = Some(r);
                }
            }
            best.map(|r| {
                (
                    format!("{} ({})", r.id, r.mechanism),
                    metric_value(exp, m, r),
                )
            })
        };
        let k = side(&kernel, m == Metric::PromoterCpu);
        let t = side(&tierd, false);
        let outcome = match (&k, &t) {
            _ if m.is_cost() && one_side_placed => Outcome::NoData,
            (Some((_, kv)), Some((_, tv))) => match (m, kv, tv) {
                (Metric::PromoterCpu, Some(k), Some(t)) => {
                    if *t <= 0.5 * k {
                        Outcome::Win
                    } else {
                        Outcome::Lose
                    }
                }
                (_, Some(k), Some(t)) => {
                    if (t - k).abs() <= m.tolerance(*k, *t) {
                        Outcome::Tie
                    } else if t < k {
                        Outcome::Win
                    } else {
                        Outcome::Lose
                    }
                }
                (_, None, None) => Outcome::Tie,
                (_, None, Some(_)) => Outcome::Win,
                (_, Some(_), None) => Outcome::Lose,
            },
            _ => Outcome::NoData,
        };
        if matches!(m, Metric::WrongFastNode | Metric::PromoterCpu) && outcome == Outcome::NoData {
            // Not measured in this experiment (one fast node; no DAMON row): no line.
            continue;
        }
        out.push(Verdict {
            experiment: exp.id.clone(),
            thp: exp.thp,
            guest_kernel: guest_kernel.to_string(),
            metric: m,
            kernel_row: k.as_ref().map(|(n, _)| n.clone()),
            kernel_value: k.and_then(|(_, v)| v),
            tierd_row: t.as_ref().map(|(n, _)| n.clone()),
            tierd_value: t.and_then(|(_, v)| v),
            outcome,
        });
    }
    out
}

/// The "tierd vs the best kernel mechanism" table of verdicts (several experiments, kernels
/// and THP modes may be mixed; each line names its own).
#[must_use]
pub fn versus_table(verdicts: &[Verdict]) -> String {
    let mut o = String::from("tierd vs the best kernel mechanism\n");
    let _ = writeln!(
        o,
        "| experiment | THP | guest kernel | metric | best kernel row | kernel | tierd row | tierd | result |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|");
    for v in verdicts {
        let val = |row: &Option<String>, x: Option<f64>| match (row, x) {
            (None, _) => "-".to_string(),
            (Some(_), None) => "never".to_string(),
            (Some(_), Some(x)) => match v.metric {
                Metric::MigratedMib => format!("{x:.0}"),
                Metric::PromoterCpu => format!("{x:.2}"),
                _ => format!("{x:.1}"),
            },
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            v.experiment,
            v.thp,
            v.guest_kernel,
            v.metric.name(),
            v.kernel_row.as_deref().unwrap_or("-"),
            val(&v.kernel_row, v.kernel_value),
            v.tierd_row.as_deref().unwrap_or("-"),
            val(&v.tierd_row, v.tierd_value),
            v.outcome.name(),
        );
    }
    o
}

/// CSV of the placement time series: one row per (run, second, part, node), with the
/// experiment's THP mode.
#[must_use]
pub fn csv(exp: &Experiment, runs: &[(String, RunData)]) -> String {
    let mut o = String::from("experiment,thp,run,t_s,part,node,pages\n");
    for (id, d) in runs {
        for s in &d.samples {
            for (part, nodes) in &s.parts {
                for (n, c) in nodes {
                    let _ = writeln!(o, "{},{},{id},{:.2},{part},{n},{c}", exp.id, exp.thp, s.t);
                }
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::experiment_a;
    use crate::run::Sample;

    fn sample(t: f64, hot0: u64, cold0: u64, migrated: u64, promoter: Option<u64>) -> Sample {
        let mut s = Sample {
            t,
            ..Sample::default()
        };
        s.parts
            .insert("hot".into(), [(0, hot0), (1, 32768 - hot0)].into());
        s.parts
            .insert("cold".into(), [(0, cold0), (1, 98304 - cold0)].into());
        s.vmstat.insert("pgmigrate_success".into(), migrated);
        if let Some(p) = promoter {
            s.cpu_ticks.insert("promoter".into(), p);
        }
        s.cpu_ticks
            .insert("workload".into(), if t > 0.0 { 100 } else { 0 });
        s
    }

    /// A run whose samples hold no part (the workload's part addresses never known) is an
    /// error naming why, not a row that placed 0 % of the hot set; one sample with its parts
    /// is enough for a row.
    #[test]
    fn a_run_that_measured_no_placement_is_an_error() {
        let exp = experiment_a(true);
        let bare = |t: f64| Sample {
            t,
            ..Sample::default()
        };
        let mut d = RunData {
            samples: vec![bare(0.0), bare(1.0)],
            notes: vec!["WARN no ready line from the workload after 180 s".into()],
            ..RunData::default()
        };
        let s = summarize(&exp, "T1", "tierd", &d);
        let e = s.error.expect("an error");
        assert!(
            e.contains("no sample measured") && e.contains("no ready line"),
            "{e}"
        );
        d.samples.push(sample(2.0, 32768, 0, 32768, None));
        assert_eq!(summarize(&exp, "T1", "tierd", &d).error, None);
    }

    #[test]
    fn times_over_promotion_and_costs_come_from_the_samples() {
        let exp = experiment_a(true);
        let d = RunData {
            samples: vec![
                sample(-0.1, 0, 0, 100, None),
                sample(1.0, 16384, 0, 16484, Some(50)),
                sample(2.0, 30000, 100, 30200, Some(80)),
                sample(3.0, 32768, 3276, 36144, Some(90)),
            ],
            workload_lines: vec![
                "chase t=1 steps_per_s=100".into(),
                "chase t=2 steps_per_s=200".into(),
                "chase t=3 steps_per_s=300".into(),
                "chase t=4 steps_per_s=400".into(),
            ],
            notes: vec![
                "TIERD_OUT damon: intervals sample 5000 us, aggregation 100000 us (tuning: userspace) at 0.5 s".into(),
                "TIERD_OUT damon: intervals sample 10000 us, aggregation 200000 us (tuning: userspace) at 1.2 s".into(),
            ],
            ..RunData::default()
        };
        let s = summarize(&exp, "T1", "tierd", &d);
        // Accesses per hot page per second: the mean of all the chase's lines (250 steps/s)
        // over the 32768 hot pages.
        let rate = s.hot_accesses_per_page_s.unwrap();
        assert!((rate - 250.0 / 32768.0).abs() < 1e-12, "{rate}");
        assert_eq!(s.damon_sample_us, Some((5000, 10000, 1)));
        assert_eq!(s.t50_s, Some(1.0));
        assert_eq!(s.t90_s, Some(2.0));
        assert_eq!(s.t95_s, Some(3.0));
        assert!((s.hot_on_fast_pct - 100.0).abs() < 1e-9);
        // 3276 cold pages on top of the 32768 hot: +10.0 %.
        assert!((s.over_pct - 10.0).abs() < 0.01, "{}", s.over_pct);
        assert!((s.cold_moved_pct - 3.33).abs() < 0.01);
        assert!((s.migrated_mib - 36044.0 / 256.0).abs() < 1e-9);
        // The promoter appeared after the start: its whole count is the run's.
        assert_eq!(s.promoter_cpu_s, Some(0.9));
        assert_eq!(s.throughput, Some(400.0));
        let t = table(&exp, &[s]);
        assert!(
            t.contains("| T1 | tierd | never | 1.0 | 2.0 | 3.0 | 100.0 % |"),
            "{t}"
        );
        assert!(t.contains("workload did not finish"), "{t}");
        assert!(t.contains("DAMON sample 5 -> 10 ms (1 change)"), "{t}");
    }

    #[test]
    fn cold_pages_on_the_fast_node_before_the_start_are_not_over_promotion() {
        let exp = experiment_a(true);
        // 9830 cold pages were allocated on node 0 (a preferred-node policy with room) before
        // the mechanism started; 3276 more came during the run.
        let d = RunData {
            samples: vec![
                sample(-0.1, 0, 9830, 100, None),
                sample(1.0, 32768, 9830, 32868, Some(50)),
                sample(2.0, 32768, 9830 + 3276, 36144, Some(80)),
            ],
            ..RunData::default()
        };
        let s = summarize(&exp, "T1", "tierd", &d);
        assert!((s.over_pct - 10.0).abs() < 0.01, "{}", s.over_pct);
        assert!(
            (s.cold_moved_pct - 3.33).abs() < 0.01,
            "{}",
            s.cold_moved_pct
        );
        // What is on the fast node at the end is still all of it.
        assert!((s.fast_mib - (32768.0 + 9830.0 + 3276.0) / 256.0).abs() < 1e-9);
        // A mechanism that demoted some of those cold pages promoted none: 0, not below.
        let d = RunData {
            samples: vec![
                sample(-0.1, 0, 9830, 100, None),
                sample(1.0, 32768, 5000, 32868, Some(50)),
            ],
            ..RunData::default()
        };
        let s = summarize(&exp, "T1", "tierd", &d);
        assert!(s.over_pct.abs() < 1e-9, "{}", s.over_pct);
        assert!(s.cold_moved_pct.abs() < 1e-9);
    }

    #[test]
    fn the_spread_table_gives_median_and_range_per_row() {
        let exp = experiment_a(false);
        let row = |t90: Option<f64>, over: f64| Summary {
            id: "T1".into(),
            mechanism: "tierd".into(),
            t90_s: t90,
            over_pct: over,
            hot_on_fast_pct: 99.0,
            ..Summary::default()
        };
        let failed = Summary {
            error: Some("guest timed out".into()),
            ..row(None, 0.0)
        };
        let runs = vec![
            vec![row(Some(4.0), 1.0)],
            vec![row(Some(9.0), -0.5)],
            vec![row(Some(5.0), 0.5)],
            vec![row(None, 0.0)],
            vec![failed],
        ];
        let t = spread_table(&exp, &runs);
        assert!(t.contains("(5 runs: median [min - max])"), "{t}");
        // t90 over the four runs that worked: one never got there.
        assert!(t.contains("| 5.0 [4.0 - 9.0] (1 never) |"), "{t}");
        assert!(t.contains("| 0.5 [-0.5 - 1.0] |"), "{t}");
        assert!(t.trim_end().ends_with("| 1 |"), "one failed run: {t}");
    }

    #[test]
    fn wrong_node_and_checksums_come_from_the_workload_lines() {
        let mut exp = experiment_a(true);
        exp.fast = vec![0, 1];
        exp.home_nodes = vec![0, 1];
        let d = RunData {
            samples: vec![sample(0.0, 0, 0, 0, None)],
            workload_lines: vec![
                "chase t=9 threads=2 hot_t0_n0=90 hot_t0_n1=10 hot_t0_n2=0 hot_t1_n0=30 hot_t1_n1=70 hot_t1_n2=50".into(),
                "integrity done t=9 verified_pages=100 failures=0 passes=3".into(),
            ],
            ..RunData::default()
        };
        let s = summarize(&exp, "X", "tierd", &d);
        // Fast-node pages: 90+10+30+70 = 200; wrong: t0 on n1 (10) + t1 on n0 (30).
        assert!((s.wrong_node_pct.expect("threads") - 20.0).abs() < 1e-9);
        assert_eq!(s.checksum_failures, Some(0));
        assert!(s.workload_finished);
    }

    #[test]
    fn the_plotted_series_follow_the_samples_and_the_chase_lines() {
        let exp = experiment_a(true);
        let d = RunData {
            samples: vec![
                sample(-0.1, 0, 0, 0, None),
                sample(1.0, 16384, 0, 0, None),
                sample(2.0, 32768, 0, 0, None),
            ],
            workload_lines: vec![
                "chase pid=1 addr=0x1000 cold_addr=0x2000 node=1 total_pages=131072 hot_pages=32768 tick_us=0 ticker_pid=0 ready".into(),
                // One thread, the older line format: the line's own ns_per_step.
                "chase t=0.500 hot_n0=0 hot_n1=32768 hot_other=0 cold_n0=0 cold_n1=98304 cold_other=0 steps_per_s=2000000 ns_per_step=500.00".into(),
                // Two threads at 4 and 1 M steps/s: 250 and 1000 ns, mean 625 (not the
                // line's 200 ns, which counts both threads' steps together).
                format!(
                    "chase t=1.000 hot_n0=0 hot_n1=32768 hot_n2=0 hot_n3=0 hot_other=0 cold_n0=0 cold_n1=98304 cold_n2=0 cold_n3=0 cold_other=0 steps_per_s=5000000 ns_per_step=200.00 threads=2 {} {}",
                    "steps_per_s_t0=4000000 hot_t0_n0=0 hot_t0_n1=16384 hot_t0_n2=0 hot_t0_n3=0 hot_t0_other=0",
                    "steps_per_s_t1=1000000 hot_t1_n0=0 hot_t1_n1=16384 hot_t1_n2=0 hot_t1_n3=0 hot_t1_other=0"
                ),
                "integrity t=1.000 verified_pages=1 failures=0 passes=1 rewritten_pages=0 n0=1 n1=0 n2=0 n3=0 other=0".into(),
            ],
            ..RunData::default()
        };
        assert_eq!(
            hot_on_fast_series(&exp, &d),
            vec![(-0.1, 0.0), (1.0, 50.0), (2.0, 100.0)]
        );
        let lat = latency_series(&d);
        assert_eq!(lat.len(), 2, "{lat:?}");
        assert_eq!(lat[0], (0.5, 500.0));
        assert!(
            (lat[1].0 - 1.0).abs() < 1e-9 && (lat[1].1 - 625.0).abs() < 1e-6,
            "{lat:?}"
        );
    }

    #[test]
    fn thp_rows_compare_tierds_counts_with_the_kernels() {
        use crate::experiment::Thp;
        let exp = experiment_a(true).with_thp(Thp::Always);
        let mut a = sample(-0.1, 0, 0, 1000, None);
        let mut b = sample(30.0, 32768, 512, 1000 + 33_280, Some(90));
        for (s, thp, pmd, split, compact) in [(&mut a, 3, 0, 0, 7), (&mut b, 3 + 65, 2, 1, 7)] {
            s.vmstat.insert("thp_migration_success".into(), thp);
            s.vmstat.insert("thp_split_pmd".into(), pmd);
            s.vmstat.insert("thp_split_page".into(), split);
            s.vmstat.insert("compact_isolated".into(), compact);
        }
        let status = |thp: Option<u64>| {
            let mut e = serde_json::json!({"pgpromote_success": 33_024, "pgdemote_success": 0});
            if let Some(t) = thp {
                e["thp_migration_success"] = t.into();
            }
            Some(serde_json::json!({ "engine": e }))
        };
        let d = RunData {
            samples: vec![a, b],
            notes: vec![
                "THP enabled=always defrag=madvise khugepaged_defrag=1 compaction_proactiveness=0"
                    .into(),
                "THPMAP at=start anon_huge_kb=524288".into(),
                "THPMAP at=end anon_huge_kb=522240".into(),
            ],
            tierd_status: status(Some(64)),
            ..RunData::default()
        };
        let s = summarize(&exp, "T1", "tierd", &d);
        assert_eq!(s.thp, Thp::Always);
        assert_eq!(s.thp_seen.as_deref(), Some("always/madvise"));
        assert_eq!(s.workload_thp_mib, Some((512.0, 510.0)));
        // The kernel: 33 280 pages (130 MiB), 65 THPs; tierd: 33 024 pages, 64 THPs.
        assert!((s.migrated_mib - 130.0).abs() < 1e-9);
        assert_eq!(
            (s.thp_migrated, s.thp_split_pmd, s.thp_split_page),
            (65, 2, 1)
        );
        assert_eq!(
            s.compact_isolated, 0,
            "compaction did not grow in the window"
        );
        assert_eq!(s.tierd_migrated_mib, Some(129.0));
        let pct = s.tierd_mib_agreement_pct.expect("ratio");
        assert!((pct - 100.0 * 33_024.0 / 33_280.0).abs() < 1e-9, "{pct}");
        let thp = s.tierd_thp_agreement_pct.expect("ratio");
        assert!((thp - 100.0 * 64.0 / 65.0).abs() < 1e-9, "{thp}");
        let t = table(&exp, std::slice::from_ref(&s));
        assert!(t.contains("| T1 | tierd | always | "), "{t}");
        assert!(
            t.contains("| 130 | 65 | 2/1 | 129 (99.2 %) | 64 (98.5 %) |"),
            "{t}"
        );
        assert!(t.contains("workload THP 512 -> 510 MiB"), "{t}");
        // A status without the engine's THP counter (before tierd knew folios): no THP count.
        let old = summarize(
            &exp,
            "T1",
            "tierd",
            &RunData {
                tierd_status: status(None),
                ..d.clone()
            },
        );
        assert_eq!(
            (old.tierd_thp_migrated, old.tierd_thp_agreement_pct),
            (None, None)
        );
        // A guest that had another mode than asked says so.
        let mut other = d;
        other.notes[0] = "THP enabled=never defrag=madvise".into();
        let t = table(&exp, &[summarize(&exp, "T1", "tierd", &other)]);
        assert!(
            t.contains("THP asked always but guest had never/madvise"),
            "{t}"
        );
        // The CSV carries the mode.
        let c = csv(&exp, &[("T1".into(), RunData::default())]);
        assert!(c.starts_with("experiment,thp,run,"), "{c}");
    }

    fn row(id: &str, mech: &str, t90: Option<f64>, t95: Option<f64>) -> Summary {
        Summary {
            id: id.into(),
            mechanism: mech.into(),
            t90_s: t90,
            t95_s: t95,
            hot_on_fast_pct: 100.0,
            fast_mib: 128.0,
            migrated_mib: 130.0,
            ..Summary::default()
        }
    }

    fn verdict(v: &[Verdict], m: Metric) -> &Verdict {
        v.iter().find(|x| x.metric == m).expect("metric present")
    }

    #[test]
    fn versus_picks_each_sides_best_row_per_metric() {
        let exp = experiment_a(false);
        let rows = vec![
            // The baseline would win every cost for promoting nothing: it takes no part.
            Summary {
                fast_mib: 0.0,
                hot_on_fast_pct: 0.0,
                migrated_mib: 0.0,
                ..row("B0", "baseline", None, None)
            },
            // NUMA balancing: the fastest kernel row, 4 MiB of cold pages promoted.
            Summary {
                fast_mib: 132.0,
                over_pct: 3.125,
                migrated_mib: 135.0,
                ..row("N2", "numab2", Some(3.0), Some(9.0))
            },
            // DAMOS: slower, 64 MiB over, 8 s of kdamond CPU.
            Summary {
                fast_mib: 192.0,
                over_pct: 50.0,
                migrated_mib: 200.0,
                promoter_cpu_s: Some(8.0),
                ..row("D3", "damos", Some(6.0), Some(7.5))
            },
            // DT reached 50 % only: a cheap kdamond that did not do the job is no CPU target.
            Summary {
                fast_mib: 64.0,
                hot_on_fast_pct: 50.0,
                over_pct: -50.0,
                migrated_mib: 64.0,
                promoter_cpu_s: Some(1.0),
                ..row("DT", "damon-tiering", None, None)
            },
            Summary {
                error: Some("guest timed out".into()),
                ..row("N2+", "numab-tiering", Some(1.0), Some(1.0))
            },
            Summary {
                promoter_cpu_s: Some(4.5),
                ..row("T1", "tierd", Some(2.5), Some(7.0))
            },
        ];
        let v = versus(&exp, &rows, "7.3.4+deb13-amd64");
        assert!(v
            .iter()
            .all(|x| x.guest_kernel == "7.3.4+deb13-amd64" && x.experiment == "a"));
        // One fast node: no wrong-node line.
        assert_eq!(v.len(), 5, "{v:?}");
        let t90 = verdict(&v, Metric::T90);
        assert_eq!(t90.kernel_row.as_deref(), Some("N2 (numab2)"));
        assert_eq!((t90.kernel_value, t90.tierd_value), (Some(3.0), Some(2.5)));
        // Half a second apart: inside one sampling period.
        assert_eq!(t90.outcome, Outcome::Tie);
        let t95 = verdict(&v, Metric::T95);
        assert_eq!(t95.kernel_row.as_deref(), Some("D3 (damos)"));
        assert_eq!(t95.outcome, Outcome::Tie);
        let over = verdict(&v, Metric::OverPromotion);
        assert_eq!(over.kernel_row.as_deref(), Some("N2 (numab2)"));
        assert!((over.kernel_value.unwrap() - 3.125).abs() < 1e-9);
        assert_eq!((over.tierd_value, over.outcome), (Some(0.0), Outcome::Win));
        let mig = verdict(&v, Metric::MigratedMib);
        assert_eq!(mig.kernel_row.as_deref(), Some("N2 (numab2)"));
        assert_eq!(mig.outcome, Outcome::Tie, "130 vs 135 MiB is within 5 %");
        // CPU: against D3 (DT did not reach 90 %), 4.5 s is more than half of 8 s.
        let cpu = verdict(&v, Metric::PromoterCpu);
        assert_eq!(cpu.kernel_row.as_deref(), Some("D3 (damos)"));
        assert_eq!(cpu.outcome, Outcome::Lose);
        let mut cheaper = rows.clone();
        cheaper[5].promoter_cpu_s = Some(4.0);
        let cpu = versus(&exp, &cheaper, "k")
            .into_iter()
            .find(|x| x.metric == Metric::PromoterCpu)
            .unwrap();
        assert_eq!(cpu.outcome, Outcome::Win, "4 s is half of 8 s");
        let t = versus_table(&v);
        assert!(
            t.contains("| a | never | 7.3.4+deb13-amd64 | t90 s | N2 (numab2) | 3.0 | T1 (tierd) | 2.5 | tie |"),
            "{t}"
        );
        assert!(
            t.contains("| promoter CPU s | D3 (damos) | 8.00 | T1 (tierd) | 4.50 | LOSE |"),
            "{t}"
        );
    }

    #[test]
    fn costs_are_not_compared_with_a_side_that_placed_nothing() {
        let exp = experiment_a(false);
        // The kernel skips the policy's pages (memcached-pm without the flag): it moves
        // nothing and never reaches 90 %; tierd places the hot set and moves 6 MiB of it,
        // with cold pages that were on the fast node from the start not counted as over.
        let rows = vec![
            Summary {
                hot_on_fast_pct: 1.7,
                over_pct: -98.3,
                fast_mib: 38.0,
                migrated_mib: 0.0,
                ..row("N2", "numab2", None, None)
            },
            Summary {
                hot_on_fast_pct: 97.4,
                over_pct: -1.7,
                fast_mib: 33.0,
                migrated_mib: 6.0,
                ..row("T1", "tierd", Some(2.7), Some(2.7))
            },
        ];
        let v = versus(&exp, &rows, "k");
        assert_eq!(verdict(&v, Metric::T90).outcome, Outcome::Win);
        for m in [Metric::MigratedMib, Metric::OverPromotion] {
            let x = verdict(&v, m);
            assert_eq!(x.outcome, Outcome::NoData, "{m:?}");
        }
        // tierd's own over-promotion: 0.9 % of the hot pages' worth of cold pages came.
        let over = verdict(&v, Metric::OverPromotion);
        assert!((over.tierd_value.unwrap() - 0.9).abs() < 1e-9, "{over:?}");
        // Both placed: compared as usual.
        let mut both = rows.clone();
        both[0].t90_s = Some(1.1);
        let v = versus(&exp, &both, "k");
        assert_eq!(verdict(&v, Metric::MigratedMib).outcome, Outcome::Lose);
    }

    #[test]
    fn versus_treats_never_as_the_worst_time_and_skipped_rows_as_absent() {
        let mut exp = experiment_a(false);
        exp.fast = vec![0, 1];
        let rows = vec![
            Summary {
                wrong_node_pct: Some(0.0),
                ..row("N2", "numab2", None, None)
            },
            Summary {
                skipped: Some("needs kernel 6.16+".into()),
                ..row("DT", "damon-tiering", Some(1.0), Some(1.0))
            },
            Summary {
                wrong_node_pct: Some(50.0),
                ..row("Tdef", "tierd", Some(20.0), None)
            },
            Summary {
                wrong_node_pct: Some(3.0),
                ..row("Tprec", "tierd", Some(25.0), None)
            },
        ];
        let v = versus(&exp, &rows, "k");
        let t90 = verdict(&v, Metric::T90);
        assert_eq!((t90.kernel_value, t90.tierd_value), (None, Some(20.0)));
        assert_eq!(t90.tierd_row.as_deref(), Some("Tdef (tierd)"));
        assert_eq!(t90.outcome, Outcome::Win);
        assert_eq!(verdict(&v, Metric::T95).outcome, Outcome::Tie, "both never");
        let w = verdict(&v, Metric::WrongFastNode);
        assert_eq!(w.tierd_row.as_deref(), Some("Tprec (tierd)"));
        assert_eq!(w.outcome, Outcome::Lose, "3 % against NUMA balancing's 0 %");
        assert!(versus_table(&v)
            .contains("| t95 s | N2 (numab2) | never | Tdef (tierd) | never | tie |"));
        // No DAMON row ran: no CPU line.
        assert!(v.iter().all(|x| x.metric != Metric::PromoterCpu));
        // Without tierd rows there is nothing to compare.
        let only_kernel = versus(&exp, &rows[..2], "k");
        assert!(only_kernel.iter().all(|x| x.outcome == Outcome::NoData));
    }

    #[test]
    fn a_skip_note_makes_a_skipped_row() {
        let exp = experiment_a(false);
        let d = RunData {
            samples: vec![sample(-0.1, 0, 0, 0, None)],
            notes: vec!["SKIP DAMON self-tuning tiering needs what kernel 6.12.95+deb12-amd64 lacks: kdamonds/0/contexts/0/schemes/0/quotas/goals/0/nid".into()],
            ..RunData::default()
        };
        let s = summarize(&exp, "DT", "damon-tiering", &d);
        assert!(s
            .skipped
            .as_deref()
            .unwrap()
            .starts_with("DAMON self-tuning tiering needs"));
        assert!(s.error.is_none());
        assert!(table(&exp, &[s]).contains("SKIPPED: DAMON self-tuning tiering needs"));
    }

    #[test]
    fn agreement_is_a_ratio_with_the_kernel_count_as_reference() {
        assert_eq!(agreement_pct(0, 0), Some(100.0));
        assert_eq!(agreement_pct(5, 0), None);
        assert_eq!(agreement_pct(0, 5), Some(0.0));
        assert_eq!(agreement_pct(101, 100), Some(101.0));
    }

    #[test]
    fn the_integrity_workloads_cuts_come_from_its_done_line() {
        let exp = crate::experiment::experiment_integrity(true);
        let d = RunData {
            samples: vec![sample(0.0, 0, 0, 0, None)],
            workload_lines: vec![
                "integrity done t=45.000 verified_pages=900 failures=0 passes=9 rewritten_pages=90 discarded_pages=44 unmapped_pages=32 cut_blocks=32 n0=1 n1=2 n2=0 n3=0 other=0".into(),
            ],
            ..RunData::default()
        };
        let s = summarize(&exp, "T1", "tierd", &d);
        assert_eq!(s.workload_cuts, Some((44, 32, 32)));
        assert_eq!(s.checksum_failures, Some(0));
        let t = table(&exp, &[s]);
        assert!(
            t.contains("workload cut 32 blocks (44 pages discarded, 32 unmapped)"),
            "{t}"
        );
    }

    #[test]
    fn a_mechanism_that_never_gets_there_has_no_time() {
        let exp = experiment_a(true);
        let d = RunData {
            samples: vec![sample(-0.1, 0, 0, 0, None), sample(5.0, 10, 0, 10, None)],
            ..RunData::default()
        };
        let s = summarize(&exp, "B0", "baseline", &d);
        assert_eq!((s.t50_s, s.t90_s), (None, None));
        assert_eq!(s.promoter_cpu_s, None);
        assert!(s.over_pct < -99.0);
    }
}
