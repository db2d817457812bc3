//! Processes: the pid list, `/proc/PID/status` and `/proc/PID/stat`.
//!
//! - `/proc`: one numeric directory per process (thread-group leader).
//! - `status` (fs/proc/array.c `proc_pid_status()`): `Key:\tvalue` lines; tierd uses `Name`,
//!   `Tgid`, `Cpus_allowed_list` and `Mems_allowed_list` (lists in `%*pbl` format).
//! - `stat` (fs/proc/array.c `do_task_stat()`): `pid (comm) state ppid ...`; `comm` may hold
//!   spaces and parentheses, so fields are counted from the *last* `)`. `utime` and `stime` are
//!   fields 14 and 15 (man 5 proc), in clock ticks (`USER_HZ`, 100 on every mainstream
//!   architecture; `sysconf(_SC_CLK_TCK)` says).

use std::path::Path;

use tierd_engine::types::{Nanos, NodeMask};

use super::{numbered_entries, parse_list, parse_nodelist, read_parsed, ParseError, ReadError};

/// The pids under `proc_root` (numeric directory names), ascending.
///
/// # Errors
///
/// A [`ReadError`] if `proc_root` cannot be listed.
pub fn list_pids(proc_root: &Path) -> Result<Vec<u32>, ReadError> {
    numbered_entries(proc_root, "")
}

/// Ticks per second of `/proc/PID/stat` CPU times: USER_HZ, 100 on every architecture
/// Linux builds for userspace today (include/asm-generic/param.h).
pub const USER_HZ: u64 = 100;

/// The fields of `/proc/PID/status` tierd uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcStatus {
    /// `Name`: the comm, its kernel escapes (`\n`, `\\`) undone; may hold any byte but NUL.
    pub name: String,
    /// `Tgid`.
    pub tgid: u32,
    /// `Cpus_allowed_list`.
    pub cpus_allowed: Vec<u32>,
    /// `Mems_allowed_list`.
    pub mems_allowed: NodeMask,
    /// `Threads`, the number of threads (`None` if absent or malformed: only a hint for when
    /// to re-read the threads, see [`super::task`]).
    pub threads: Option<u32>,
}

/// Parses `/proc/PID/status`.
///
/// # Errors
///
/// A [`ParseError`] for a missing field or a malformed value of a used field (unused fields are
/// not checked).
pub fn parse_status(text: &str) -> Result<ProcStatus, ParseError> {
    let mut name = None;
    let mut tgid = None;
    let mut cpus = None;
    let mut mems = None;
    let mut threads = None;
    for (i, line) in super::kernel_lines(text).enumerate() {
        let lineno = i + 1;
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key {
            // proc_task_name(m, p, true) (fs/proc/array.c) prints the comm after "Name:\t"
            // through seq_escape_str(.., ESCAPE_SPACE | ESCAPE_SPECIAL, "\n\\"): a newline
            // as `\n`, a backslash as `\\`, every other byte (tabs, spaces at either end) as
            // it is. So the name is not trimmed.
            "Name" => name = Some(unescape_comm(value.strip_prefix('\t').unwrap_or(value))),
            "Tgid" => {
                let value = value.trim();
                tgid = Some(
                    value
                        .parse()
                        .map_err(|_| ParseError::new(lineno, format!("bad Tgid {value:?}")))?,
                );
            }
            "Cpus_allowed_list" => {
                let value = value.trim();
                cpus = Some(parse_list(value).map_err(|r| ParseError::new(lineno, r))?);
            }
            "Mems_allowed_list" => {
                let value = value.trim();
                mems = Some(parse_nodelist(value).map_err(|r| ParseError::new(lineno, r))?);
            }
            "Threads" => threads = value.trim().parse().ok(),
            _ => {}
        }
    }
    let missing = |f: &str| ParseError::new(text.lines().count().max(1), format!("no {f} line"));
    Ok(ProcStatus {
        name: name.ok_or_else(|| missing("Name"))?,
        tgid: tgid.ok_or_else(|| missing("Tgid"))?,
        cpus_allowed: cpus.ok_or_else(|| missing("Cpus_allowed_list"))?,
        mems_allowed: mems.ok_or_else(|| missing("Mems_allowed_list"))?,
        threads,
    })
}

/// Undoes the escaping of `Name:` in `/proc/PID/status`: `\n` is a newline, `\\` a
/// backslash; any other backslash is kept.
fn unescape_comm(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.clone().next() {
                Some('n') => {
                    out.push('\n');
                    chars.next();
                    continue;
                }
                Some('\\') => {
                    out.push('\\');
                    chars.next();
                    continue;
                }
                _ => {}
            }
        }
        out.push(c);
    }
    out
}

/// The fields of `/proc/PID/stat` tierd uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 1, the pid.
    pub pid: u32,
    /// Field 2 without the parentheses.
    pub comm: String,
    /// Field 3, the state letter.
    pub state: char,
    /// Field 14, user-mode CPU time in clock ticks.
    pub utime_ticks: u64,
    /// Field 15, kernel-mode CPU time in clock ticks.
    pub stime_ticks: u64,
    /// Field 22, the start time in clock ticks after boot: with the pid, it names one
    /// process (a reused pid has a later start time).
    pub start_ticks: u64,
}

impl ProcStat {
    /// User plus kernel CPU time, given the clock tick rate (`sysconf(_SC_CLK_TCK)`).
    #[must_use]
    pub fn cpu_time(&self, ticks_per_second: u64) -> Nanos {
        let ticks = u128::from(self.utime_ticks) + u128::from(self.stime_ticks);
        let ns = ticks * 1_000_000_000 / u128::from(ticks_per_second.max(1));
        Nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

/// Parses `/proc/PID/stat`.
///
/// # Errors
///
/// A [`ParseError`] for a missing `(comm)`, or a missing or malformed pid, state, utime, stime
/// or start time.
pub fn parse_stat(text: &str) -> Result<ProcStat, ParseError> {
    let err = |r: String| ParseError::new(1, r);
    let open = text
        .find(" (")
        .ok_or_else(|| err("no `(comm)` in stat".into()))?;
    let close = text
        .rfind(')')
        .filter(|&c| c > open)
        .ok_or_else(|| err("no closing `)` after comm".into()))?;
    let pid = text[..open]
        .trim()
        .parse()
        .map_err(|_| err(format!("bad pid {:?}", &text[..open])))?;
    let comm = text[open + 2..close].to_owned();
    // After ')' come fields 3, 4, ...: field k is at index k - 3.
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let field = |k: usize| -> Result<&str, ParseError> {
        rest.get(k - 3)
            .copied()
            .ok_or_else(|| err(format!("stat has no field {k}")))
    };
    let mut state_chars = field(3)?.chars();
    let state = match (state_chars.next(), state_chars.next()) {
        (Some(c), None) => c,
        _ => return Err(err(format!("bad state {:?}", field(3)?))),
    };
    let ticks = |k: usize| -> Result<u64, ParseError> {
        let v = field(k)?;
        v.parse().map_err(|_| err(format!("bad field {k} {v:?}")))
    };
    Ok(ProcStat {
        pid,
        comm,
        state,
        utime_ticks: ticks(14)?,
        stime_ticks: ticks(15)?,
        start_ticks: ticks(22)?,
    })
}

/// Reads `<proc_root>/<pid>/status`.
///
/// # Errors
///
/// A [`ReadError`] naming the file; [`ReadError::is_gone`] when the process exited.
pub fn read_status(proc_root: &Path, pid: u32) -> Result<ProcStatus, ReadError> {
    read_parsed(
        &proc_root.join(pid.to_string()).join("status"),
        parse_status,
    )
}

/// Reads `<proc_root>/<pid>/stat`.
///
/// # Errors
///
/// A [`ReadError`] naming the file; [`ReadError::is_gone`] when the process exited.
pub fn read_stat(proc_root: &Path, pid: u32) -> Result<ProcStat, ReadError> {
    read_parsed(&proc_root.join(pid.to_string()).join("stat"), parse_stat)
}

#[cfg(test)]
mod tests {
    use tierd_engine::types::NodeId;

    use super::*;

    #[test]
    fn stat_with_a_hostile_comm() {
        // comm "a) b (c" as the kernel would print it.
        let s = "1234 (a) b (c) R 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 1 0 5 0 0\n";
        let st = parse_stat(s).unwrap();
        assert_eq!(st.pid, 1234);
        assert_eq!(st.comm, "a) b (c");
        assert_eq!(st.state, 'R');
        assert_eq!((st.utime_ticks, st.stime_ticks), (250, 75));
        assert_eq!(st.cpu_time(100), Nanos::from_millis(3250));
    }

    #[test]
    fn stat_errors() {
        assert!(parse_stat("1234 bash S 1").is_err());
        assert!(parse_stat("1234 (bash) S 1 2 3")
            .unwrap_err()
            .reason
            .contains("field"));
        assert!(parse_stat("x (bash) S 1 1 1 0 -1 0 0 0 0 0 1 1").is_err());
        assert!(parse_stat("1 (bash) S 1 1 1 0 -1 0 0 0 0 0 x 1").is_err());
        assert!(parse_stat("1 (bash) SS 1 1 1 0 -1 0 0 0 0 0 1 1").is_err());
    }

    #[test]
    fn status_fields() {
        let s = parse_status(
            "Name:\tmy prog\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t42\n\
             Cpus_allowed:\tff\nCpus_allowed_list:\t0-3,6\nMems_allowed:\t00000003\n\
             Mems_allowed_list:\t0-1\n",
        )
        .unwrap();
        assert_eq!(s.name, "my prog");
        assert_eq!(s.tgid, 42);
        assert_eq!(s.cpus_allowed, [0, 1, 2, 3, 6]);
        assert_eq!(s.mems_allowed, NodeMask::from_nodes([NodeId(0), NodeId(1)]));
        assert_eq!(s.threads, None);
        let with = parse_status(
            "Name:\tx\nTgid:\t1\nThreads:\t12\nCpus_allowed_list:\t0\nMems_allowed_list:\t0\n",
        )
        .unwrap();
        assert_eq!(with.threads, Some(12));
        let e = parse_status("Name:\tx\nTgid:\t1\nCpus_allowed_list:\t0\n").unwrap_err();
        assert!(e.reason.contains("Mems_allowed_list"));
        let e = parse_status("Name:\tx\nTgid:\tq\n").unwrap_err();
        assert_eq!(e.line, 2);
    }

    #[test]
    fn status_name_as_the_kernel_escapes_it() {
        // comm " a\tb\\n\n\r" (set by prctl(PR_SET_NAME)): the newline and the backslash
        // escaped, the rest raw, spaces at the ends kept.
        let s = parse_status(
            "Name:\t a\tb\\\\n\\n\r\nTgid:\t7\nCpus_allowed_list:\t0\nMems_allowed_list:\t0\n",
        )
        .unwrap();
        assert_eq!(s.name, " a\tb\\n\n\r");
        assert_eq!(s.tgid, 7);
    }

    #[test]
    fn stat_comm_with_a_newline() {
        // do_task_stat() prints the comm unescaped (proc_task_name(m, task, false)).
        let st =
            parse_stat("9 (x\n) S (y) S 1 9 9 0 -1 0 0 0 0 0 4 2 0 0 20 0 1 0 77 0 0\n").unwrap();
        assert_eq!(st.comm, "x\n) S (y");
        assert_eq!((st.utime_ticks, st.stime_ticks), (4, 2));
    }
}
