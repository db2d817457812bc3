//! DAMON's regions from its `damon_aggregated` tracepoint, read from a tracefs instance of
//! tierd's own: the cheap way to read a kdamond's regions back.
//!
//! Why: reading the regions back through sysfs (`update_schemes_tried_regions`, then a
//! directory of four files per region) costs five system calls a region and a kernfs walk;
//! with DAMON's regions fitted to a server's size (a few hundred regions) that was half of
//! tierd's CPU in the lab (docs/lab.md, "Real servers in the guest": 15 s of 31 s in 120 s).
//! The kernel emits every region of every target at the end of each aggregation interval
//! through the `damon_aggregated` tracepoint (mm/damon/core.c `kdamond_reset_aggregated()`,
//! format in include/trace/events/damon.h):
//!
//! ```text
//! target_id=%lu nr_regions=%u %lu-%lu: %u %u      (target index, regions of the target,
//!                                                   start-end, nr_accesses, age)
//! ```
//!
//! so one consuming read of `trace_pipe` hands over what hundreds of sysfs files did. Older
//! kernels (before 5.17) print no age; it reads as 0. Text after the age is ignored, so a
//! field added later does not break the reader.
//!
//! The instance (Documentation/trace/ftrace.rst, "Instances": `mkdir instances/<name>` makes
//! a trace buffer of its own) keeps tierd out of the global buffer others use; the event's
//! `filter` (`common_pid == PID`, Documentation/trace/events.rst "Event filtering") keeps
//! tierd's kdamond only (another kdamond, e.g. DAMON_RECLAIM's, writes nothing into it), and
//! the reader checks the task pid of each line as well. A filter, not the instance's
//! `set_event_pid`: pid filtering hooks `sched_switch`, `sched_wakeup`, `sched_wakeup_new` and
//! `sched_waking` on every CPU (kernel/trace/trace_events.c `ftrace_event_set_pid_open()` and
//! `__ftrace_clear_event_pids()`), a cost on every context switch of the host for a filter
//! that one event of one kernel thread needs, and turning on a tracepoint on the context-switch
//! path patches the kernel text of the hottest code there is (a jump label; in the lab, the
//! moment a TCG guest's vCPUs were most likely to run into QEMU's cross-modifying code bug:
//! crates/tierd-vm/src/guest.rs `emulator_int3_oops`). The filter is evaluated when the event
//! fires, in kdamond, once per region. For the same reason the instance records no task names
//! when nobody else traces (`quiet_comm_recording`). Its buffer is
//! [`BUFFER_KIB`] per CPU, in overwrite mode (the default), so if tierd reads late the oldest
//! aggregations are the ones lost, and only the newest complete aggregation of each target
//! is used.
//!
//! Assembly ([`Assembler`]): the kernel emits a target's regions one after the other in
//! address order, `nr_regions` of them, target after target. A run of lines of one target
//! with rising addresses is one aggregation once it holds `nr_regions` lines; a run broken by
//! lost events (a `CPU:N [LOST M EVENTS]` line, an address that goes back, another target)
//! is dropped, never half used.
//!
//! Target indexes are the context's order of targets, which [`super::damon::DamonMonitor`]
//! keeps equal to its pid list; when the targets change, what the buffer holds is discarded
//! (the kernel's `commit` returns once applied, mm/damon/sysfs.c, so lines after it use the
//! new order).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::damon::DamonError;

/// The tracefs instance tierd creates.
pub const INSTANCE: &str = "tierd";

/// The instance's ring buffer per CPU, KiB. An event is about 56 bytes in the buffer (ring
/// buffer header, `trace_entry`, six fields), so this holds ~4500 regions, above the regions
/// one aggregation of a fitted kdamond has (at most twice `MAX_FIT_REGIONS` unless configured
/// more); the kdamond is one thread, so one CPU's buffer takes most of an aggregation. Far
/// below ftrace's 1.4 MiB default, since it is allocated for every possible CPU.
pub const BUFFER_KIB: u64 = 256;

/// The event's directory under an instance.
const EVENT: &str = "events/damon/damon_aggregated";

/// One `damon_aggregated` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AggregatedEvent {
    /// The task that emitted it (the kdamond's thread id).
    pub task_pid: u32,
    /// The target's index in the context.
    pub target_idx: u64,
    /// How many regions the target has (lines of one aggregation).
    pub nr_regions: u32,
    /// First byte.
    pub start: u64,
    /// End (exclusive).
    pub end: u64,
    /// Samples that found the region accessed in this aggregation.
    pub nr_accesses: u32,
    /// Aggregations since the region's access pattern last changed much (0 before 5.17).
    pub age: u32,
}

/// A `damon_aggregated` line that does not read as the kernel prints it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("damon_aggregated line {line:?}: {what}")]
pub struct TraceLineError {
    /// The line.
    pub line: String,
    /// What is wrong with it.
    pub what: &'static str,
}

/// The marker between a line's context and its event's text
/// (kernel/trace/trace_output.c `print_trace_fmt()`: `<context>: <event name>: <text>`).
const MARKER: &str = ": damon_aggregated: ";

fn bad(line: &str, what: &'static str) -> TraceLineError {
    TraceLineError {
        line: line.to_owned(),
        what,
    }
}

/// Parses one line of `trace_pipe`. `Ok(None)`: not a `damon_aggregated` event (another
/// event, a lost-events note, an empty line).
///
/// The context before the event is `comm-pid [cpu] flags timestamp` (trace_output.c
/// `trace_print_context()`), with ` (tgid)` after the pid when the `record-tgid` option is
/// on; a comm may hold spaces, dashes and brackets, so the pid is found from the CPU field
/// (` [digits]`) leftwards.
///
/// # Errors
/// A `damon_aggregated` line whose fields are missing, not numbers, or out of range (an
/// empty region).
pub fn parse_line(line: &str) -> Result<Option<AggregatedEvent>, TraceLineError> {
    let line = line.trim_end_matches(['\n', '\r']);
    let Some(at) = line.find(MARKER) else {
        return Ok(None);
    };
    let (context, text) = (&line[..at], &line[at + MARKER.len()..]);
    let task_pid =
        context_pid(context).ok_or_else(|| bad(line, "no task pid before the CPU field"))?;
    let text = text
        .strip_prefix("target_id=")
        .ok_or_else(|| bad(line, "no target_id="))?;
    let (target_idx, text) = number(text, ' ').ok_or_else(|| bad(line, "bad target_id"))?;
    let text = text
        .strip_prefix("nr_regions=")
        .ok_or_else(|| bad(line, "no nr_regions="))?;
    let (nr_regions, text) = number(text, ' ').ok_or_else(|| bad(line, "bad nr_regions"))?;
    let (start, text) = number(text, '-').ok_or_else(|| bad(line, "bad region start"))?;
    let (end, text) = number(text, ':').ok_or_else(|| bad(line, "bad region end"))?;
    let mut rest = text.split_ascii_whitespace();
    let nr_accesses = rest
        .next()
        .and_then(|t| t.parse::<u32>().ok())
        .ok_or_else(|| bad(line, "bad nr_accesses"))?;
    let age = match rest.next() {
        None => 0,
        Some(t) => t.parse::<u32>().map_err(|_| bad(line, "bad age"))?,
    };
    let nr_regions = u32::try_from(nr_regions).map_err(|_| bad(line, "nr_regions above u32"))?;
    if end <= start {
        return Err(bad(line, "empty region (end <= start)"));
    }
    if nr_regions == 0 {
        return Err(bad(line, "a region of a target with nr_regions=0"));
    }
    Ok(Some(AggregatedEvent {
        task_pid,
        target_idx,
        nr_regions,
        start,
        end,
        nr_accesses,
        age,
    }))
}

/// The number at the start of `text`, ended by `sep` (consumed).
fn number(text: &str, sep: char) -> Option<(u64, &str)> {
    let (n, rest) = text.split_once(sep)?;
    Some((n.parse().ok()?, rest))
}

/// The task pid in a line's context: the digits after the last `-` before the CPU field,
/// skipping a ` (tgid)`.
fn context_pid(context: &str) -> Option<u32> {
    // The CPU field is the last ` [digits]` of the context: what follows it (flags and a
    // timestamp) has no brackets.
    let mut head = None;
    let mut from = context.len();
    while let Some(i) = context[..from].rfind(" [") {
        let tail = &context[i + 2..];
        if let Some(close) = tail.find(']') {
            let cpu = &tail[..close];
            if !cpu.is_empty() && cpu.bytes().all(|b| b.is_ascii_digit()) {
                head = Some(&context[..i]);
                break;
            }
        }
        from = i;
    }
    let mut head = head?.trim_end();
    if let Some(open) = head.strip_suffix(')').and_then(|h| h.rfind(" (")) {
        head = head[..open].trim_end();
    }
    let (_, pid) = head.rsplit_once('-')?;
    pid.parse().ok()
}

/// The count of lost events in a `CPU:N [LOST M EVENTS]` line (kernel/trace/trace.c
/// `print_trace_line()`), if it is one.
#[must_use]
pub fn lost_events(line: &str) -> Option<u64> {
    let rest = line.trim().strip_prefix("CPU:")?;
    let (_, rest) = rest.split_once(" [LOST ")?;
    rest.strip_suffix(" EVENTS]")?.parse().ok()
}

/// Counters of the trace reader, for `/status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceStats {
    /// Lines read.
    pub lines: u64,
    /// Complete aggregations of a target assembled.
    pub aggregations: u64,
    /// Runs dropped incomplete (events lost or the buffer read mid-way at a change).
    pub partial: u64,
    /// Events the kernel reported lost (the buffer overwrote them before tierd read).
    pub lost: u64,
    /// Lines that did not parse (skipped).
    pub malformed: u64,
    /// Lines of another task (not tierd's kdamond; skipped).
    pub foreign: u64,
}

/// Turns a stream of events into complete aggregations per target (see the module docs).
#[derive(Debug, Default)]
pub struct Assembler {
    run: Vec<AggregatedEvent>,
    latest: BTreeMap<u64, Vec<AggregatedEvent>>,
    stats: TraceStats,
}

impl Assembler {
    /// Adds one event.
    pub fn push(&mut self, e: AggregatedEvent) {
        let continues = self.run.last().is_some_and(|l| {
            l.target_idx == e.target_idx
                && l.nr_regions == e.nr_regions
                && e.start >= l.end
                && self.run.len() < e.nr_regions as usize
        });
        if !continues && !self.run.is_empty() {
            self.stats.partial += 1;
            self.run.clear();
        }
        self.run.push(e);
        if self.run.len() == e.nr_regions as usize {
            self.latest
                .insert(e.target_idx, std::mem::take(&mut self.run));
            self.stats.aggregations += 1;
        }
    }

    /// Events were lost: the run under way is not whole.
    pub fn lost(&mut self, n: u64) {
        self.stats.lost += n;
        if !self.run.is_empty() {
            self.stats.partial += 1;
            self.run.clear();
        }
    }

    /// The newest complete aggregation of each target since the last take, by target index.
    pub fn take(&mut self) -> BTreeMap<u64, Vec<AggregatedEvent>> {
        std::mem::take(&mut self.latest)
    }

    /// Forgets everything assembled (the targets changed).
    pub fn reset(&mut self) {
        self.run.clear();
        self.latest.clear();
    }

    /// The counters.
    #[must_use]
    pub fn stats(&self) -> TraceStats {
        self.stats
    }

    fn stats_mut(&mut self) -> &mut TraceStats {
        &mut self.stats
    }
}

/// Feeds the text of `trace_pipe` to `asm`, line by line; a line cut at the end of `text` is
/// kept in `pending` for the next call. Only events of `pid` are used.
pub fn feed_text(asm: &mut Assembler, pending: &mut String, text: &str, pid: u32) {
    pending.push_str(text);
    let Some(last_nl) = pending.rfind('\n') else {
        return;
    };
    let whole: String = pending.drain(..=last_nl).collect();
    for line in whole.lines() {
        asm.stats_mut().lines += 1;
        if let Some(n) = lost_events(line) {
            asm.lost(n);
            continue;
        }
        match parse_line(line) {
            Ok(Some(e)) if e.task_pid == pid => asm.push(e),
            Ok(Some(_)) => asm.stats_mut().foreign += 1,
            Ok(None) => {}
            Err(_) => asm.stats_mut().malformed += 1,
        }
    }
}

/// The tracefs mount under a `/sys` root: `kernel/tracing` (where systemd and the kernel's
/// documentation mount it), else debugfs's `kernel/debug/tracing` automount; the first with
/// an `instances` directory.
#[must_use]
pub fn find_tracefs(sys_root: &Path) -> Option<PathBuf> {
    ["kernel/tracing", "kernel/debug/tracing"]
        .iter()
        .map(|p| sys_root.join(p))
        .find(|p| p.join("instances").is_dir())
}

fn io_err(op: &str, path: &Path, source: io::Error) -> DamonError {
    DamonError::Io {
        op: op.to_owned(),
        path: path.to_path_buf(),
        source,
    }
}

/// Writes a tracefs file as `echo >` does: with `O_TRUNC`, which matters here (not
/// [`super::damon::RealFs`], which writes sysfs without it): some tracefs files add to what
/// they hold when opened without it (`set_event_pid`, `set_event`: kernel/trace/trace_events.c
/// `ftrace_event_set_pid_open()`), and a file that replaces its value anyway loses nothing.
fn write_file(path: &Path, value: &str) -> Result<(), DamonError> {
    std::fs::write(path, value).map_err(|e| io_err(&format!("writing {value:?} to"), path, e))
}

/// Turns the instance's task-name recording off (`options/record-cmd` 0) when nobody traces
/// events, and says whether it is off.
///
/// Why: an instance inherits `record-cmd` on, and enabling an event of an instance that has it
/// starts the kernel's comm cache (kernel/trace/trace_events.c `__ftrace_event_enable_disable()`
/// calls `tracing_start_cmdline_record()`, which hooks `sched_switch` and `sched_wakeup`:
/// kernel/trace/trace_sched_switch.c): a probe on every context switch of the host to name
/// the tasks of lines tierd reads only the pid of (`<...>-PID` then, which [`parse_line`]
/// reads the same). Only when no event is enabled anywhere: the kernel applies a change of the
/// flag to the enabled events of every trace array, not of this one only
/// (`set_tracer_flag()` -> `trace_event_enable_cmd_record()`), which would take another
/// tracer's task names away. Anything unreadable counts as someone tracing.
fn quiet_comm_recording(tracefs: &Path, dir: &Path) -> bool {
    let opt = dir.join("options/record-cmd");
    match std::fs::read_to_string(&opt) {
        Ok(v) if v.trim() == "0" => return true,
        Ok(_) => {}
        Err(_) => return false,
    }
    let mut lists = vec![tracefs.join("set_event")];
    if let Ok(rd) = std::fs::read_dir(tracefs.join("instances")) {
        lists.extend(rd.flatten().map(|e| e.path().join("set_event")));
    }
    let someone = lists.iter().any(|f| {
        std::fs::read_to_string(f).map_or(true, |s| s.lines().any(|l| !l.trim().is_empty()))
    });
    !someone && write_file(&opt, "0").is_ok()
}

/// The event filter that keeps the kdamond with thread id `pid` only.
fn filter(pid: u32) -> String {
    format!("common_pid == {pid}")
}

/// Reads `pipe` until it is empty, handing each chunk to `each`.
fn drain(
    pipe: Option<&mut File>,
    buf: &mut [u8],
    dir: &Path,
    mut each: impl FnMut(&str),
) -> Result<(), DamonError> {
    let Some(pipe) = pipe else {
        return Ok(());
    };
    // A read of trace_pipe returns at most about a page (trace.c `tracing_read_pipe()`);
    // bound the loop so a kdamond emitting faster than tierd reads cannot hold it here.
    for _ in 0..4096 {
        let n = match pipe.read(buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_err("reading", &dir.join("trace_pipe"), e)),
        };
        each(&String::from_utf8_lossy(&buf[..n]));
    }
    Ok(())
}

/// tierd's tracefs instance with the `damon_aggregated` event of its kdamond.
#[derive(Debug)]
pub struct DamonTrace {
    dir: PathBuf,
    pipe: Option<File>,
    pending: String,
    asm: Assembler,
    pid: Option<u32>,
    buf: Vec<u8>,
}

impl DamonTrace {
    /// Creates (or reuses, after an unclean exit) the instance under the tracefs at
    /// `tracefs`, sizes its buffer and opens its `trace_pipe` without blocking. The event is
    /// enabled by [`Self::follow`], once the kdamond's thread id is known.
    ///
    /// # Errors
    /// [`DamonError::NoTracepoint`] when the kernel has no `damon_aggregated` event, or an
    /// I/O error naming the file.
    pub fn open(tracefs: &Path) -> Result<Self, DamonError> {
        let dir = tracefs.join("instances").join(INSTANCE);
        if !dir.is_dir() {
            // mkdir in tracefs's instances directory makes a new trace array.
            std::fs::create_dir(&dir).map_err(|e| io_err("creating", &dir, e))?;
        }
        let enable = dir.join(EVENT).join("enable");
        if !enable.exists() {
            let _ = std::fs::remove_dir(&dir);
            return Err(DamonError::NoTracepoint { path: enable });
        }
        write_file(&enable, "0")?;
        quiet_comm_recording(tracefs, &dir);
        write_file(&dir.join("buffer_size_kb"), &BUFFER_KIB.to_string())?;
        let pipe_path = dir.join("trace_pipe");
        let pipe = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&pipe_path)
            .map_err(|e| io_err("opening", &pipe_path, e))?;
        Ok(DamonTrace {
            dir,
            pipe: Some(pipe),
            pending: String::new(),
            asm: Assembler::default(),
            pid: None,
            buf: vec![0; 64 << 10],
        })
    }

    /// The instance's directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Follows the kdamond with thread id `pid` (a kdamond turned on again gets a new one):
    /// the event's filter keeps its pid (`common_pid`, a field of every event:
    /// kernel/trace/trace_events.c `trace_define_common_fields()`), the event is enabled, and
    /// what the buffer held is dropped.
    ///
    /// # Errors
    /// An I/O error naming the file.
    pub fn follow(&mut self, pid: u32) -> Result<(), DamonError> {
        if self.pid == Some(pid) {
            return Ok(());
        }
        write_file(&self.dir.join(EVENT).join("filter"), &filter(pid))?;
        write_file(&self.dir.join(EVENT).join("enable"), "1")?;
        write_file(&self.dir.join("tracing_on"), "1")?;
        self.pid = Some(pid);
        self.discard()
    }

    /// Drops what the buffer holds and what was assembled (the targets changed).
    ///
    /// # Errors
    /// An I/O error reading the pipe.
    pub fn discard(&mut self) -> Result<(), DamonError> {
        drain(self.pipe.as_mut(), &mut self.buf, &self.dir, |_| {})?;
        self.pending.clear();
        self.asm.reset();
        Ok(())
    }

    /// Reads what the kernel emitted since the last read: the newest complete aggregation of
    /// each target, by target index (empty: none finished since).
    ///
    /// # Errors
    /// An I/O error reading the pipe (not `EAGAIN`: an empty pipe is no error).
    pub fn read(&mut self) -> Result<BTreeMap<u64, Vec<AggregatedEvent>>, DamonError> {
        let Some(pid) = self.pid else {
            return Ok(BTreeMap::new());
        };
        drain(self.pipe.as_mut(), &mut self.buf, &self.dir, |text| {
            feed_text(&mut self.asm, &mut self.pending, text, pid);
        })?;
        Ok(self.asm.take())
    }

    /// The reader's counters.
    #[must_use]
    pub fn stats(&self) -> TraceStats {
        self.asm.stats()
    }

    /// Disables the event and removes the instance. Idempotent; errors cannot be reported
    /// (the instance is reused by the next start if it stays).
    pub fn close(&mut self) {
        if self.pipe.take().is_some() {
            let _ = std::fs::write(self.dir.join(EVENT).join("enable"), "0");
            // rmdir of an instance fails with EBUSY while a file of it is open: the pipe was
            // closed above.
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

impl Drop for DamonTrace {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: &str = "        kdamond.0-1234    [001] ..... 12345.678901: damon_aggregated: \
                     target_id=0 nr_regions=2 140000000-140002000: 5 3";

    #[test]
    fn a_line_without_the_task_name_reads_the_same() {
        // An instance with record-cmd off prints `<...>` for the comm.
        let l = L.replace("kdamond.0-1234", "<...>-1234");
        let e = parse_line(&l).unwrap().unwrap();
        assert_eq!((e.task_pid, e.start, e.nr_accesses), (1234, 140_000_000, 5));
    }

    #[test]
    fn comm_recording_goes_off_only_when_nobody_traces() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let dir = root.join("instances").join(INSTANCE);
        let other = root.join("instances/perfetto");
        std::fs::create_dir_all(dir.join("options")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let opt = dir.join("options/record-cmd");
        let put = |p: &Path, v: &str| std::fs::write(p, v).unwrap();
        put(&opt, "1\n");
        put(&root.join("set_event"), "");
        put(&dir.join("set_event"), "");
        // Another instance traces sched_switch: the flag stays (the kernel would take that
        // tracer's task names away).
        put(&other.join("set_event"), "sched:sched_switch\n");
        assert!(!quiet_comm_recording(root, &dir));
        assert_eq!(std::fs::read_to_string(&opt).unwrap(), "1\n");
        // An unreadable list counts as someone tracing.
        std::fs::remove_file(other.join("set_event")).unwrap();
        assert!(!quiet_comm_recording(root, &dir));
        assert_eq!(std::fs::read_to_string(&opt).unwrap(), "1\n");
        // Nobody: off.
        put(&other.join("set_event"), "\n");
        assert!(quiet_comm_recording(root, &dir));
        assert_eq!(std::fs::read_to_string(&opt).unwrap(), "0");
        assert!(quiet_comm_recording(root, &dir), "already off");
        // A kernel without the option: nothing to do, and it says so.
        std::fs::remove_file(&opt).unwrap();
        assert!(!quiet_comm_recording(root, &dir));
    }

    fn ev(target: u64, nr: u32, start: u64, end: u64) -> AggregatedEvent {
        AggregatedEvent {
            task_pid: 9,
            target_idx: target,
            nr_regions: nr,
            start,
            end,
            nr_accesses: 1,
            age: 0,
        }
    }

    #[test]
    fn a_kernel_line_reads_with_its_task() {
        let e = parse_line(L).unwrap().unwrap();
        assert_eq!(
            e,
            AggregatedEvent {
                task_pid: 1234,
                target_idx: 0,
                nr_regions: 2,
                start: 140_000_000,
                end: 140_002_000,
                nr_accesses: 5,
                age: 3,
            }
        );
    }

    #[test]
    fn tgid_odd_comms_old_and_newer_formats_read() {
        let tgid = "kdamond.0-77 (  77) [000] d..1. 1.000000: damon_aggregated: \
                    target_id=1 nr_regions=3 4096-8192: 0 9";
        assert_eq!(parse_line(tgid).unwrap().unwrap().task_pid, 77);
        let odd = "a [1] b-c-88 [002] .... 2.5: damon_aggregated: target_id=0 nr_regions=1 1-2: 3";
        let e = parse_line(odd).unwrap().unwrap();
        assert_eq!((e.task_pid, e.age, e.nr_accesses), (88, 0, 3));
        let newer = "k-5 [000] .... 1.0: damon_aggregated: target_id=0 nr_regions=1 1-2: 3 4 7 -1";
        assert_eq!(parse_line(newer).unwrap().unwrap().age, 4);
    }

    #[test]
    fn other_lines_are_not_events_and_broken_ones_are_errors() {
        assert_eq!(parse_line("").unwrap(), None);
        assert_eq!(
            parse_line("k-5 [000] .... 1.0: sched_switch: prev_comm=a").unwrap(),
            None
        );
        for broken in [
            "k-5 [000] .... 1.0: damon_aggregated: target_id=x nr_regions=1 1-2: 3 4",
            "k-5 [000] .... 1.0: damon_aggregated: target_id=0 nr_regions=1 2-2: 3 4",
            "k-5 [000] .... 1.0: damon_aggregated: target_id=0 nr_regions=0 1-2: 3 4",
            "k-5 [000] .... 1.0: damon_aggregated: target_id=0 nr_regions=1 1-2:",
            "k-5 [000] .... 1.0: damon_aggregated: target_id=0 nr_regions=1 1-2: 3 z",
            "nopid [000] .... 1.0: damon_aggregated: target_id=0 nr_regions=1 1-2: 3 4",
        ] {
            assert!(parse_line(broken).is_err(), "{broken}");
        }
        assert_eq!(lost_events("CPU:3 [LOST 120 EVENTS]"), Some(120));
        assert_eq!(lost_events(L), None);
    }

    #[test]
    fn whole_aggregations_are_kept_and_broken_runs_dropped() {
        let mut a = Assembler::default();
        // Target 0: a whole aggregation of 2, then a broken one (address goes back).
        a.push(ev(0, 2, 0, 10));
        a.push(ev(0, 2, 10, 20));
        a.push(ev(0, 2, 0, 10));
        a.push(ev(1, 1, 5, 6));
        let got = a.take();
        assert_eq!(got[&0].len(), 2);
        assert_eq!(got[&1], vec![ev(1, 1, 5, 6)]);
        assert_eq!(a.stats().partial, 1);
        assert_eq!(a.stats().aggregations, 2);
        // A run cut by lost events is dropped; the newest whole one wins.
        a.push(ev(0, 3, 0, 1));
        a.lost(5);
        a.push(ev(0, 2, 30, 40));
        a.push(ev(0, 2, 40, 50));
        a.push(ev(0, 2, 60, 70));
        a.push(ev(0, 2, 70, 80));
        let got = a.take();
        assert_eq!(got[&0], vec![ev(0, 2, 60, 70), ev(0, 2, 70, 80)]);
        assert_eq!(a.stats().lost, 5);
        assert!(a.take().is_empty());
    }

    #[test]
    fn text_cut_mid_line_is_finished_by_the_next_read() {
        let mut a = Assembler::default();
        let mut pending = String::new();
        let text = format!(
            "{L}\n{}\n",
            L.replace("140000000-140002000", "140002000-140003000")
        );
        let (x, y) = text.split_at(50);
        feed_text(&mut a, &mut pending, x, 1234);
        assert!(a.take().is_empty());
        feed_text(&mut a, &mut pending, y, 1234);
        let got = a.take();
        assert_eq!(got[&0].len(), 2);
        assert!(pending.is_empty());
        // Another task's lines are skipped.
        feed_text(&mut a, &mut pending, &format!("{L}\n"), 1);
        assert_eq!(a.stats().foreign, 1);
    }
}
