//! `/proc/vmstat` and the per-node `/sys/devices/system/node/nodeN/vmstat`.
//!
//! Both are `name value` lines (mm/vmstat.c `vmstat_show()`; drivers/base/node.c
//! `node_read_vmstat()` for the node file, which holds the zone and node stats but not the
//! global event counters such as `numa_hint_faults`). Which counters exist depends on the kernel
//! version and config, so every typed field is an `Option`: `pgpromote_candidate_nrl`, for
//! instance, is only in kernels with the 2025 "not rate-limited" patch (lkml.kernel.org/r/20250729035101.1601407-1-ruansy.fnst@fujitsu.com).

use std::collections::BTreeMap;
use std::path::Path;

use tierd_engine::types::NodeId;

use super::{read_parsed, ParseError, ReadError};

/// All counters of one vmstat file, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vmstat {
    /// Counter name to value, sorted by name.
    pub counters: BTreeMap<String, u64>,
}

/// The counters tierd watches, `None` where the kernel does not have them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TieringCounters {
    /// Pages promoted from a slow tier by NUMA balancing (`PGPROMOTE_SUCCESS`).
    pub pgpromote_success: Option<u64>,
    /// Hint faults on slow-tier pages that passed the hot test (`PGPROMOTE_CANDIDATE`).
    pub pgpromote_candidate: Option<u64>,
    /// Candidates promoted without the rate limit because the fast tier had room.
    pub pgpromote_candidate_nrl: Option<u64>,
    /// Pages demoted by kswapd.
    pub pgdemote_kswapd: Option<u64>,
    /// Pages demoted by direct reclaim.
    pub pgdemote_direct: Option<u64>,
    /// Pages demoted by khugepaged.
    pub pgdemote_khugepaged: Option<u64>,
    /// Pages demoted by proactive reclaim (`memory.reclaim`).
    pub pgdemote_proactive: Option<u64>,
    /// Pages migrated successfully, for any reason (including `move_pages(2)`).
    pub pgmigrate_success: Option<u64>,
    /// Pages that failed to migrate.
    pub pgmigrate_fail: Option<u64>,
    /// NUMA hinting faults taken.
    pub numa_hint_faults: Option<u64>,
    /// NUMA hinting faults on a page already on the faulting CPU's node.
    pub numa_hint_faults_local: Option<u64>,
    /// PTEs made PROT_NONE by the NUMA scanner.
    pub numa_pte_updates: Option<u64>,
    /// Pages migrated by NUMA balancing.
    pub numa_pages_migrated: Option<u64>,
}

macro_rules! tiering_fields {
    ($m:ident, $f:ident) => {
        TieringCounters {
            pgpromote_success: $f($m, "pgpromote_success"),
            pgpromote_candidate: $f($m, "pgpromote_candidate"),
            pgpromote_candidate_nrl: $f($m, "pgpromote_candidate_nrl"),
            pgdemote_kswapd: $f($m, "pgdemote_kswapd"),
            pgdemote_direct: $f($m, "pgdemote_direct"),
            pgdemote_khugepaged: $f($m, "pgdemote_khugepaged"),
            pgdemote_proactive: $f($m, "pgdemote_proactive"),
            pgmigrate_success: $f($m, "pgmigrate_success"),
            pgmigrate_fail: $f($m, "pgmigrate_fail"),
            numa_hint_faults: $f($m, "numa_hint_faults"),
            numa_hint_faults_local: $f($m, "numa_hint_faults_local"),
            numa_pte_updates: $f($m, "numa_pte_updates"),
            numa_pages_migrated: $f($m, "numa_pages_migrated"),
        }
    };
}

impl Vmstat {
    /// A counter by name.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<u64> {
        self.counters.get(name).copied()
    }

    /// The counters tierd uses.
    #[must_use]
    pub fn tiering(&self) -> TieringCounters {
        fn get(m: &Vmstat, k: &str) -> Option<u64> {
            m.get(k)
        }
        let m = self;
        tiering_fields!(m, get)
    }

    /// `later - earlier` for every counter present in both; a counter that went backwards (a
    /// gauge, or a counter reset by node hotplug) gives 0 rather than wrapping.
    #[must_use]
    pub fn delta(later: &Vmstat, earlier: &Vmstat) -> Vmstat {
        let counters = later
            .counters
            .iter()
            .filter_map(|(k, &v)| {
                earlier
                    .counters
                    .get(k)
                    .map(|&e| (k.clone(), v.saturating_sub(e)))
            })
            .collect();
        Vmstat { counters }
    }
}

impl TieringCounters {
    /// Field-wise `later - earlier`: `None` where either side lacks the counter, 0 where it went
    /// backwards.
    #[must_use]
    pub fn delta(later: &TieringCounters, earlier: &TieringCounters) -> TieringCounters {
        fn d(l: Option<u64>, e: Option<u64>) -> Option<u64> {
            Some(l?.saturating_sub(e?))
        }
        TieringCounters {
            pgpromote_success: d(later.pgpromote_success, earlier.pgpromote_success),
            pgpromote_candidate: d(later.pgpromote_candidate, earlier.pgpromote_candidate),
            pgpromote_candidate_nrl: d(
                later.pgpromote_candidate_nrl,
                earlier.pgpromote_candidate_nrl,
            ),
            pgdemote_kswapd: d(later.pgdemote_kswapd, earlier.pgdemote_kswapd),
            pgdemote_direct: d(later.pgdemote_direct, earlier.pgdemote_direct),
            pgdemote_khugepaged: d(later.pgdemote_khugepaged, earlier.pgdemote_khugepaged),
            pgdemote_proactive: d(later.pgdemote_proactive, earlier.pgdemote_proactive),
            pgmigrate_success: d(later.pgmigrate_success, earlier.pgmigrate_success),
            pgmigrate_fail: d(later.pgmigrate_fail, earlier.pgmigrate_fail),
            numa_hint_faults: d(later.numa_hint_faults, earlier.numa_hint_faults),
            numa_hint_faults_local: d(later.numa_hint_faults_local, earlier.numa_hint_faults_local),
            numa_pte_updates: d(later.numa_pte_updates, earlier.numa_pte_updates),
            numa_pages_migrated: d(later.numa_pages_migrated, earlier.numa_pages_migrated),
        }
    }

    /// All demotions (`pgdemote_*` summed over the counters present), `None` if none is.
    #[must_use]
    pub fn pgdemote_total(&self) -> Option<u64> {
        [
            self.pgdemote_kswapd,
            self.pgdemote_direct,
            self.pgdemote_khugepaged,
            self.pgdemote_proactive,
        ]
        .into_iter()
        .flatten()
        .reduce(u64::saturating_add)
    }
}

/// Parses a vmstat file.
///
/// # Errors
///
/// A [`ParseError`] for a line that is not `name value` with an unsigned value, or a name seen
/// twice.
pub fn parse_vmstat(text: &str) -> Result<Vmstat, ParseError> {
    let mut counters = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(name), Some(value), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(ParseError::new(
                lineno,
                format!("expected `name value`, found {line:?}"),
            ));
        };
        let value: u64 = value
            .parse()
            .map_err(|_| ParseError::new(lineno, format!("bad value {value:?} for {name}")))?;
        if counters.insert(name.to_owned(), value).is_some() {
            return Err(ParseError::new(lineno, format!("{name} appears twice")));
        }
    }
    Ok(Vmstat { counters })
}

/// Reads `<proc_root>/vmstat`.
///
/// # Errors
///
/// A [`ReadError`] naming the file.
pub fn read_vmstat(proc_root: &Path) -> Result<Vmstat, ReadError> {
    read_parsed(&proc_root.join("vmstat"), parse_vmstat)
}

/// Reads `<sys_root>/devices/system/node/node<node>/vmstat`.
///
/// # Errors
///
/// A [`ReadError`] naming the file.
pub fn read_node_vmstat(sys_root: &Path, node: NodeId) -> Result<Vmstat, ReadError> {
    read_parsed(
        &super::topology::node_dir(sys_root, node).join("vmstat"),
        parse_vmstat,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_types_counters() {
        let v = parse_vmstat(
            "nr_free_pages 1000\npgpromote_success 7\npgpromote_candidate 9\n\
             pgdemote_kswapd 3\npgdemote_direct 1\nnuma_hint_faults 50\n",
        )
        .unwrap();
        assert_eq!(v.get("nr_free_pages"), Some(1000));
        let t = v.tiering();
        assert_eq!(t.pgpromote_success, Some(7));
        assert_eq!(t.pgpromote_candidate_nrl, None);
        assert_eq!(t.numa_hint_faults, Some(50));
        assert_eq!(t.pgdemote_total(), Some(4));
        assert_eq!(TieringCounters::default().pgdemote_total(), None);
        // Ordered by name.
        let names: Vec<&str> = v.counters.keys().map(String::as_str).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
    }

    #[test]
    fn delta_handles_missing_and_backwards() {
        let a = parse_vmstat("pgpromote_success 10\nnr_free_pages 500\nonly_a 1\n").unwrap();
        let b =
            parse_vmstat("pgpromote_success 25\nnr_free_pages 400\npgpromote_candidate_nrl 4\n")
                .unwrap();
        let d = Vmstat::delta(&b, &a);
        assert_eq!(d.get("pgpromote_success"), Some(15));
        assert_eq!(d.get("nr_free_pages"), Some(0));
        assert_eq!(d.get("only_a"), None);
        assert_eq!(d.get("pgpromote_candidate_nrl"), None);
        let t = TieringCounters::delta(&b.tiering(), &a.tiering());
        assert_eq!(t.pgpromote_success, Some(15));
        assert_eq!(t.pgpromote_candidate_nrl, None);
        assert_eq!(t.numa_hint_faults, None);
    }

    #[test]
    fn malformed_lines() {
        let e = parse_vmstat("a 1\nb\n").unwrap_err();
        assert_eq!(e.line, 2);
        let e = parse_vmstat("a -1\n").unwrap_err();
        assert!(e.reason.contains("-1"));
        let e = parse_vmstat("a 1 2\n").unwrap_err();
        assert_eq!(e.line, 1);
        let e = parse_vmstat("a 1\na 2\n").unwrap_err();
        assert!(e.reason.contains("twice"));
    }
}
