//! # chaos: the pieces of the chaos lab's guest actors that need no system
//!
//! `tierd lab chaos` runs several `tierd-workload` subcommands beside tierd in the guest
//! (spawner, hostile names, hog, bound, HTTP abuse, prober, supervisor, hotplug). Their
//! bookkeeping lives here so it can be tested on the host: the hostile file names, the pid
//! wrap counter, the memory-hotplug event log every watcher reads, the classification of a
//! watched page, and the HTTP status line.

use std::collections::HashSet;

/// File names that the kernel prints in `/proc/PID/numa_maps` and `/proc/PID/maps` unescaped
/// or escaped in ways a naive parser gets wrong. `show_numa_map()` (fs/proc/task_mmu.c)
/// prints the path with `seq_file_path(m, file, "\n\t= ")`, so only newline, tab, space and
/// `=` become octal escapes (`mangle_path()`, fs/seq_file.c); a vertical tab, a no-break
/// space, other Unicode spaces, a backslash and bytes that are not UTF-8 are printed as they
/// are. `show_map_vma()` escapes only the newline. The last name is 255 bytes, NAME_MAX.
#[must_use]
pub fn hostile_names() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = [
        "vt\u{0b}name",
        "nbsp\u{a0}name",
        "new\nline",
        "eq=ual=",
        "two  spaces ",
        "tab\tname",
        "back\\slash\\",
        "nel\u{85}name",
        "line\u{2028}sep",
        "ideo\u{3000}space",
        "N0=7 N1=3 kernelpagesize_kB=4",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    v.push(b"not-utf8-\xff\xfe\x80-\xc3(".to_vec());
    let mut long = b"long-".to_vec();
    long.resize(255, b'x');
    v.push(long);
    v
}

/// Counts pid wraps and reuses over the pids of the processes a spawner started, in the order
/// they were started. The kernel hands out pids cyclically (`alloc_pid()`, kernel/pid.c:
/// `idr_alloc_cyclic()` from the last pid up to `pid_max`, then again from `RESERVED_PIDS`),
/// so a pid lower than the previous one means the counter wrapped.
#[derive(Clone, Debug, Default)]
pub struct PidTracker {
    last: Option<u32>,
    seen: HashSet<u32>,
    /// Times a pid was lower than the one before it.
    pub wraps: u64,
    /// Pids handed out again after an earlier process of ours had them.
    pub reuses: u64,
    /// Pids observed.
    pub observed: u64,
}

impl PidTracker {
    /// Records the pid of the next process started.
    pub fn observe(&mut self, pid: u32) {
        if self.last.is_some_and(|l| pid < l) {
            self.wraps += 1;
        }
        if !self.seen.insert(pid) {
            self.reuses += 1;
        }
        self.last = Some(pid);
        self.observed += 1;
    }
}

/// One memory block the hotplug actor started to offline, at guest uptime `t` seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OfflineEvent {
    /// `/proc/uptime` seconds when the offline write began.
    pub t: f64,
    /// The memory block number (`/sys/devices/system/memory/memoryN`).
    pub block: u64,
}

/// The line the hotplug actor appends before it writes `offline` to a block.
#[must_use]
pub fn offline_log_line(e: OfflineEvent) -> String {
    format!("offline-start {:.3} {}\n", e.t, e.block)
}

/// The events of an offline log (lines of [`offline_log_line`]; other lines are ignored).
#[must_use]
pub fn parse_offline_log(text: &str) -> Vec<OfflineEvent> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            if w.next()? != "offline-start" {
                return None;
            }
            Some(OfflineEvent {
                t: w.next()?.parse().ok()?,
                block: w.next()?.parse().ok()?,
            })
        })
        .collect()
}

/// The blocks offlined (or tried) at or after `since`: offlining migrates every page of the
/// block to another node (mm/memory_hotplug.c `do_migrate_range()` clears the page's own node
/// from the target mask), whatever the page's mempolicy, so a watched page whose block was
/// offlined while it lived was moved by the kernel, not by tierd.
#[must_use]
pub fn blocks_offlined_since(events: &[OfflineEvent], since: f64) -> HashSet<u64> {
    events
        .iter()
        .filter(|e| e.t >= since)
        .map(|e| e.block)
        .collect()
}

/// What a watched page's location says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageVerdict {
    /// Where it was put.
    Stayed,
    /// Somewhere else, and no hotplug can explain it: moved by someone (tierd).
    Moved,
    /// Somewhere else, but its first block was offlined while it lived (the kernel moved it).
    Hotplugged,
    /// No location (not present, an error).
    Unknown,
}

/// Classifies a watched page: `node` is its location now (a node, or an errno), `home` the
/// node it was placed on, `origin_block` the memory block of its first frame (`None` if the
/// pagemap showed no frame), `offlined` the blocks offlined since it was placed.
#[must_use]
pub fn classify_page(
    node: Result<u16, i32>,
    home: u16,
    origin_block: Option<u64>,
    offlined: &HashSet<u64>,
) -> PageVerdict {
    match node {
        Err(_) => PageVerdict::Unknown,
        Ok(n) if n == home => PageVerdict::Stayed,
        Ok(_) if origin_block.is_some_and(|b| offlined.contains(&b)) => PageVerdict::Hotplugged,
        Ok(_) => PageVerdict::Moved,
    }
}

/// The status code of an HTTP/1.x response's first line (`HTTP/1.1 200 OK`).
#[must_use]
pub fn http_status(response: &[u8]) -> Option<u16> {
    let end = response.iter().position(|b| *b == b'\n')?;
    let line = std::str::from_utf8(&response[..end]).ok()?;
    let mut w = line.split_whitespace();
    if !w.next()?.starts_with("HTTP/1.") {
        return None;
    }
    w.next()?.parse().ok()
}

/// `key=value` words of a report line, in order.
pub fn kv(line: &str) -> impl Iterator<Item = (&str, &str)> {
    line.split_whitespace().filter_map(|w| w.split_once('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_names_are_valid_file_names_with_the_awkward_bytes() {
        let names = hostile_names();
        for n in &names {
            assert!(!n.is_empty() && n.len() <= 255, "{n:?}");
            assert!(!n.contains(&b'/') && !n.contains(&0), "{n:?}");
        }
        let has = |b: &[u8]| names.iter().any(|n| n.windows(b.len()).any(|w| w == b));
        for needle in [
            &b"\x0b"[..],
            "\u{a0}".as_bytes(),
            b"\n",
            b"=",
            b" ",
            b"\t",
            b"\\",
        ] {
            assert!(has(needle), "{needle:?}");
        }
        assert!(names.iter().any(|n| std::str::from_utf8(n).is_err()));
        assert!(names.iter().any(|n| n.len() == 255));
    }

    #[test]
    fn pid_tracker_counts_wraps_and_reuses() {
        let mut t = PidTracker::default();
        for p in [400, 410, 1020, 300, 305, 410, 411] {
            t.observe(p);
        }
        assert_eq!((t.wraps, t.reuses, t.observed), (1, 1, 7));
    }

    #[test]
    fn offline_log_round_trips_and_filters_by_time() {
        let text = offline_log_line(OfflineEvent { t: 10.5, block: 17 })
            + "offline-end 11.0 17 ok\n"
            + &offline_log_line(OfflineEvent { t: 20.0, block: 18 })
            + "garbage\n";
        let ev = parse_offline_log(&text);
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[0], OfflineEvent { t: 10.5, block: 17 });
        assert_eq!(blocks_offlined_since(&ev, 15.0), HashSet::from([18]));
        assert_eq!(blocks_offlined_since(&ev, 0.0).len(), 2);
    }

    #[test]
    fn pages_elsewhere_are_moved_unless_their_block_went_offline() {
        let off = HashSet::from([5]);
        assert_eq!(classify_page(Ok(1), 1, Some(5), &off), PageVerdict::Stayed);
        assert_eq!(
            classify_page(Ok(0), 1, Some(5), &off),
            PageVerdict::Hotplugged
        );
        assert_eq!(classify_page(Ok(0), 1, Some(6), &off), PageVerdict::Moved);
        assert_eq!(classify_page(Ok(0), 1, None, &off), PageVerdict::Moved);
        assert_eq!(
            classify_page(Err(2), 1, Some(5), &off),
            PageVerdict::Unknown
        );
    }

    #[test]
    fn http_status_reads_the_first_line_only() {
        assert_eq!(http_status(b"HTTP/1.1 200 OK\r\nx: y\r\n\r\n"), Some(200));
        assert_eq!(http_status(b"HTTP/1.0 503 Busy\n"), Some(503));
        assert_eq!(http_status(b"HTTP/1.1 200"), None, "no complete line yet");
        assert_eq!(http_status(b"SSH-2.0 x\n"), None);
    }
}
