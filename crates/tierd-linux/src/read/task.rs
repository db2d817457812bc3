//! A process's threads and the CPU each last ran on: `/proc/PID/task/TID/stat`, and from it
//! the node the process runs on (the daemon's accessing node for sources that cannot see who
//! made an access).
//!
//! - `/proc/PID/task`: one numeric directory per thread (Documentation/filesystems/proc.rst,
//!   section 1.1, "/proc/PID/task").
//! - `task/TID/stat` has the layout of `/proc/PID/stat` (fs/proc/array.c `do_task_stat()`,
//!   per thread when `whole` is 0): field 3 the state, 14 and 15 `utime`/`stime` in clock
//!   ticks, 39 `processor`, "CPU number last executed on" (`task_cpu(task)`;
//!   Documentation/filesystems/proc.rst Table 1-4 `task_cpu`; man 5 proc). Fields are counted
//!   from the last `)`, as the comm may hold spaces and parentheses.
//!
//! The rule ([`home_node`]) follows the kernel's NUMA placement: a task's hint faults are
//! charged to the node of the CPU it faults on (mm/mempolicy.c `mpol_misplaced()`,
//! `thisnid = numa_node_id()`), and kernel/sched/fair.c `task_numa_placement()` settles its
//! `numa_preferred_nid` on the node those faults come from. A process whose running threads
//! are all on one node makes its accesses from there; one whose threads span nodes has no
//! single such node, and none is claimed.

use std::collections::BTreeMap;
use std::path::Path;

use tierd_engine::types::NodeId;

use super::{numbered_entries, read_parsed, ParseError, ReadError};

/// The fields of `/proc/PID/task/TID/stat` the accessing-node rule uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskStat {
    /// Field 1, the thread id.
    pub tid: u32,
    /// Field 3, the state letter (`R` running or runnable).
    pub state: char,
    /// Fields 14 + 15, user plus kernel CPU time in clock ticks.
    pub cpu_ticks: u64,
    /// Field 39, the CPU the thread last ran on.
    pub processor: u32,
}

/// Parses one `/proc/PID/task/TID/stat` (or `/proc/PID/stat`) line.
///
/// # Errors
///
/// A [`ParseError`] for a missing `(comm)`, or a missing or malformed tid, state, utime,
/// stime or processor (kernels before 2.2.8 had no field 39).
pub fn parse_task_stat(text: &str) -> Result<TaskStat, ParseError> {
    let err = |r: String| ParseError::new(1, r);
    let open = text
        .find(" (")
        .ok_or_else(|| err("no `(comm)` in stat".into()))?;
    let close = text
        .rfind(')')
        .filter(|&c| c > open)
        .ok_or_else(|| err("no closing `)` after comm".into()))?;
    let tid = text[..open]
        .trim()
        .parse()
        .map_err(|_| err(format!("bad tid {:?}", &text[..open])))?;
    // After ')' come fields 3, 4, ...: field k is the (k - 3)th word.
    let mut words = text[close + 1..].split_whitespace();
    let mut field = 2;
    let mut next = |k: usize| -> Result<&str, ParseError> {
        let mut w = None;
        while field < k {
            w = words.next();
            field += 1;
        }
        w.ok_or_else(|| err(format!("stat has no field {k}")))
    };
    let state_word = next(3)?;
    let mut state_chars = state_word.chars();
    let state = match (state_chars.next(), state_chars.next()) {
        (Some(c), None) => c,
        _ => return Err(err(format!("bad state {state_word:?}"))),
    };
    let mut number = |k: usize| -> Result<u64, ParseError> {
        let v = next(k)?;
        v.parse().map_err(|_| err(format!("bad field {k} {v:?}")))
    };
    let utime = number(14)?;
    let stime = number(15)?;
    let processor = number(39)?;
    Ok(TaskStat {
        tid,
        state,
        cpu_ticks: utime.saturating_add(stime),
        processor: u32::try_from(processor)
            .map_err(|_| err(format!("bad processor {processor}")))?,
    })
}

/// The thread ids of `pid` (`<proc_root>/<pid>/task`), ascending.
///
/// # Errors
///
/// A [`ReadError`] naming the directory; [`ReadError::is_gone`] when the process exited.
pub fn list_tasks(proc_root: &Path, pid: u32) -> Result<Vec<u32>, ReadError> {
    numbered_entries(&proc_root.join(pid.to_string()).join("task"), "")
}

/// Reads `<proc_root>/<pid>/task/<tid>/stat`.
///
/// # Errors
///
/// A [`ReadError`] naming the file; [`ReadError::is_gone`] when the thread exited.
pub fn read_task_stat(proc_root: &Path, pid: u32, tid: u32) -> Result<TaskStat, ReadError> {
    read_parsed(
        &proc_root
            .join(pid.to_string())
            .join("task")
            .join(tid.to_string())
            .join("stat"),
        parse_task_stat,
    )
}

/// Reads every thread of `pid`. A thread that exits between the listing and its read is left
/// out (an expected race); the process itself being gone is an error that
/// [`ReadError::is_gone`] recognises.
///
/// # Errors
///
/// A [`ReadError`] for the listing, or for a thread file that failed for another reason than
/// the thread exiting.
pub fn read_tasks(proc_root: &Path, pid: u32) -> Result<Vec<TaskStat>, ReadError> {
    let mut out = Vec::new();
    for tid in list_tasks(proc_root, pid)? {
        match read_task_stat(proc_root, pid, tid) {
            Ok(t) => out.push(t),
            Err(e) if e.is_gone() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// What one reading of a process's threads says about where it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Every thread that ran since the last reading last ran on this node.
    Node(NodeId),
    /// The threads that ran are on more than one node (or on a CPU of no known node).
    Spread,
    /// No thread ran since the last reading: nothing new to say (keep the last answer).
    Idle,
}

/// The accessing-node rule: which node `tasks` (one reading) run on.
///
/// A thread counts when it ran since `prev` (its CPU time grew), or, not in `prev` (new, or
/// the first reading), when it has run at all or is runnable now (`R`): a thread that sleeps
/// (a main thread waiting for its workers, a housekeeping thread) makes no accesses, and
/// where it last ran says nothing. `cpu_node` maps a CPU to its node (sysfs
/// `nodeN/cpulist`, [`super::topology`]).
#[must_use]
pub fn home_node(
    tasks: &[TaskStat],
    prev: &BTreeMap<u32, u64>,
    cpu_node: impl Fn(u32) -> Option<NodeId>,
) -> Placement {
    let mut found: Option<NodeId> = None;
    for t in tasks {
        let ran = match prev.get(&t.tid) {
            Some(&before) => t.cpu_ticks > before,
            None => t.cpu_ticks > 0 || t.state == 'R',
        };
        if !ran {
            continue;
        }
        match (cpu_node(t.processor), found) {
            (Some(n), None) => found = Some(n),
            (Some(n), Some(f)) if n == f => {}
            _ => return Placement::Spread,
        }
    }
    found.map_or(Placement::Idle, Placement::Node)
}

/// Each thread's CPU time in `tasks`, for the next reading's [`home_node`].
#[must_use]
pub fn cpu_ticks_by_tid(tasks: &[TaskStat]) -> BTreeMap<u32, u64> {
    tasks.iter().map(|t| (t.tid, t.cpu_ticks)).collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A stat line as do_task_stat() prints it (52 fields) with the given values.
    fn line(tid: u32, comm: &str, state: char, utime: u64, stime: u64, cpu: u32) -> String {
        let mut f: Vec<String> = (3..=52).map(|_| "0".to_string()).collect();
        f[0] = state.to_string();
        f[14 - 3] = utime.to_string();
        f[15 - 3] = stime.to_string();
        f[39 - 3] = cpu.to_string();
        format!("{tid} ({comm}) {}\n", f.join(" "))
    }

    #[test]
    fn the_processor_field_of_a_real_stat() {
        // crates/tierd-linux/tests/fixtures/guest-6.12/proc/152/stat: dd on CPU 0.
        let s = "152 (dd) S 145 0 0 0 -1 0 8258 0 0 0 1 31 0 0 20 0 1 0 361 35868672 8587 \
                 18446744073709551615 4198400 5785993 140737488350560 0 0 0 0 6 66048 1 0 0 \
                 17 0 0 0 0 0 0 6141704 6178576 6209536 140737488351040 140737488351167 \
                 140737488351167 140737488351209 0\n";
        let t = parse_task_stat(s).unwrap();
        assert_eq!(
            t,
            TaskStat {
                tid: 152,
                state: 'S',
                cpu_ticks: 32,
                processor: 0
            }
        );
        let t = parse_task_stat(&line(9, "a) b (c", 'R', 5, 6, 3)).unwrap();
        assert_eq!((t.tid, t.state, t.cpu_ticks, t.processor), (9, 'R', 11, 3));
    }

    #[test]
    fn stat_errors_name_the_field() {
        assert!(parse_task_stat("1 x S").is_err());
        let short = "1 (x) S 1 1 1 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 5 0 0";
        assert!(parse_task_stat(short)
            .unwrap_err()
            .reason
            .contains("field 39"));
        let bad = line(1, "x", 'S', 1, 1, 0).replace(" 0\n", "\n");
        assert!(
            parse_task_stat(&bad).is_ok(),
            "52 -> 51 fields still has 39"
        );
        assert!(
            parse_task_stat(&line(1, "x", 'S', 1, 1, 0).replacen(" 1 1 ", " 1 q ", 1)).is_err()
        );
        assert!(parse_task_stat("q (x) S 1").is_err());
        let huge = line(1, "x", 'S', 1, 1, 0);
        let mut f: Vec<&str> = huge.split(' ').collect();
        f[38] = "99999999999";
        assert!(parse_task_stat(&f.join(" ")).is_err());
    }

    fn t(tid: u32, state: char, ticks: u64, cpu: u32) -> TaskStat {
        TaskStat {
            tid,
            state,
            cpu_ticks: ticks,
            processor: cpu,
        }
    }

    /// CPUs 0-1 on node 0, 2-3 on node 1 (the lab's guest), 9 on no node.
    fn node_of(cpu: u32) -> Option<NodeId> {
        match cpu {
            0 | 1 => Some(NodeId(0)),
            2 | 3 => Some(NodeId(1)),
            _ => None,
        }
    }

    #[test]
    fn one_node_spread_or_idle() {
        let none = BTreeMap::new();
        // One process per node: every thread on node 1.
        assert_eq!(
            home_node(&[t(1, 'R', 5, 2), t(2, 'S', 9, 3)], &none, node_of),
            Placement::Node(NodeId(1))
        );
        // Two threads, one per node: no single node.
        assert_eq!(
            home_node(&[t(1, 'R', 5, 0), t(2, 'R', 9, 2)], &none, node_of),
            Placement::Spread
        );
        // A CPU tierd cannot place is not evidence of any node.
        assert_eq!(
            home_node(&[t(1, 'R', 5, 9)], &none, node_of),
            Placement::Spread
        );
        // A thread that never ran and is not runnable does not count.
        assert_eq!(
            home_node(&[t(1, 'S', 0, 0), t(2, 'R', 0, 2)], &none, node_of),
            Placement::Node(NodeId(1))
        );
        assert_eq!(home_node(&[], &none, node_of), Placement::Idle);
    }

    #[test]
    fn only_threads_that_ran_since_the_last_reading_count() {
        // The main thread ran on node 0 before it started its workers on node 1 and waits.
        let first = [t(1, 'S', 3, 0), t(2, 'R', 50, 2), t(3, 'R', 40, 3)];
        assert_eq!(
            home_node(&first, &BTreeMap::new(), node_of),
            Placement::Spread
        );
        let prev = cpu_ticks_by_tid(&first);
        let second = [t(1, 'S', 3, 0), t(2, 'R', 90, 2), t(3, 'S', 80, 3)];
        assert_eq!(
            home_node(&second, &prev, node_of),
            Placement::Node(NodeId(1))
        );
        // Nothing ran: nothing to say.
        let prev = cpu_ticks_by_tid(&second);
        assert_eq!(home_node(&second, &prev, node_of), Placement::Idle);
        // A new thread seen for the first time counts if it ran.
        let third = [t(1, 'S', 3, 0), t(2, 'S', 90, 2), t(4, 'S', 1, 1)];
        assert_eq!(
            home_node(&third, &prev, node_of),
            Placement::Node(NodeId(0))
        );
    }

    #[test]
    fn reads_a_task_tree_and_skips_nothing_that_is_there() {
        let dir = tempfile::tempdir().unwrap();
        for (tid, cpu) in [(40, 2), (41, 3)] {
            let d = dir.path().join(format!("40/task/{tid}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("stat"), line(tid, "w", 'R', 7, 1, cpu)).unwrap();
        }
        // A thread directory without its stat (it exited between listing and read).
        std::fs::create_dir_all(dir.path().join("40/task/42")).unwrap();
        let tasks = read_tasks(dir.path(), 40).unwrap();
        assert_eq!(tasks.iter().map(|t| t.tid).collect::<Vec<_>>(), [40, 41]);
        assert_eq!(
            home_node(&tasks, &BTreeMap::new(), node_of),
            Placement::Node(NodeId(1))
        );
        assert!(read_tasks(dir.path(), 7).unwrap_err().is_gone());
    }

    proptest! {
        /// Whatever the comm, the parser reads back the fields it was given.
        #[test]
        fn round_trip(
            tid in 1u32..4_000_000,
            comm in "[ -~]{0,16}",
            state in proptest::sample::select(vec!['R', 'S', 'D', 'T', 't', 'Z', 'X', 'I']),
            utime in 0u64..1 << 40,
            stime in 0u64..1 << 40,
            cpu in 0u32..8192,
        ) {
            let got = parse_task_stat(&line(tid, &comm, state, utime, stime, cpu)).unwrap();
            prop_assert_eq!(got, TaskStat { tid, state, cpu_ticks: utime + stime, processor: cpu });
        }

        /// `home_node` agrees with the plain definition: the set of nodes of the threads that
        /// ran has one element -> that node; none -> idle; else spread.
        #[test]
        fn home_node_matches_its_definition(
            tasks in proptest::collection::vec((0u64..4, 0u32..10, any::<bool>()), 0..8),
            prev_ticks in proptest::collection::vec(proptest::option::of(0u64..4), 8),
        ) {
            let ts: Vec<TaskStat> = tasks.iter().enumerate()
                .map(|(i, &(ticks, cpu, r))| t(u32::try_from(i).unwrap(), if r { 'R' } else { 'S' }, ticks, cpu))
                .collect();
            let prev: BTreeMap<u32, u64> = prev_ticks.iter().enumerate()
                .filter_map(|(i, p)| p.map(|v| (u32::try_from(i).unwrap(), v))).collect();
            let ran: Vec<&TaskStat> = ts.iter().filter(|t| match prev.get(&t.tid) {
                Some(&b) => t.cpu_ticks > b,
                None => t.cpu_ticks > 0 || t.state == 'R',
            }).collect();
            let nodes: Vec<Option<NodeId>> = ran.iter().map(|t| node_of(t.processor)).collect();
            let want = if ran.is_empty() {
                Placement::Idle
            } else if nodes.iter().all(|n| n.is_some() && *n == nodes[0]) {
                Placement::Node(nodes[0].unwrap())
            } else {
                Placement::Spread
            };
            prop_assert_eq!(home_node(&ts, &prev, node_of), want);
        }
    }
}
