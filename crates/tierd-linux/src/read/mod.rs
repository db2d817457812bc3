//! Readers for the `/proc` and `/sys` files tierd uses.
//!
//! Every format has two halves:
//!
//! - a **parser**, a pure function from the file's text (`&str`) to a typed value, which fails
//!   with a [`ParseError`] naming the 1-based line and the reason; and
//! - a **reader**, which takes the root the file lives under (`/proc`, `/sys`, or a cgroup2
//!   mount), reads the file and runs the parser, turning any failure into a [`ReadError`] that
//!   also names the path.
//!
//! Tests point the readers at a fixture tree with the real layout (`tests/fixtures/*/proc`,
//! `.../sys`), copied from real kernels.
//!
//! Readers never panic on bad input. A process that exits between listing and reading shows up
//! as a [`ReadError::Io`] whose [`ReadError::is_gone`] is true, so callers can count the race
//! instead of failing.
//!
//! | module | files |
//! |---|---|
//! | [`topology`] | `/sys/devices/system/node/*`, `memory_tiering`, `numa_balancing`, `demotion_enabled` |
//! | [`vmstat`] | `/proc/vmstat`, `nodeN/vmstat` |
//! | [`numa_maps`] | `/proc/PID/numa_maps`, `/proc/PID/maps` |
//! | [`cgroup`] | cgroup v2 `memory.*`, `cgroup.procs`, `/proc/PID/cgroup` |
//! | [`meminfo`] | `/proc/meminfo`, `nodeN/meminfo` |
//! | [`proc`] | `/proc` pid list, `/proc/PID/status`, `/proc/PID/stat` |
//! | [`smaps`] | `/proc/PID/smaps` |
//! | [`task`] | `/proc/PID/task/TID/stat` (the CPU each thread last ran on) |
//! | [`kpageflags`] | `/proc/kpageflags` (binary, by frame) |
//! | [`lru_gen`] | `/sys/kernel/debug/lru_gen` (the multi-gen LRU's generations) |

use std::io;
use std::path::{Path, PathBuf};

use tierd_engine::types::{NodeId, NodeMask, MAX_NODES};

pub mod cgroup;
pub mod kpageflags;
pub mod lru_gen;
pub mod meminfo;
pub mod numa_maps;
pub mod proc;
pub mod smaps;
pub mod task;
pub mod topology;
pub mod vmstat;

/// A parse failure inside one file's text, before the path is known.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct ParseError {
    /// 1-based line number of the offending line (1 for single-value files).
    pub line: usize,
    /// What was wrong.
    pub reason: String,
}

impl ParseError {
    /// A parse error at `line` (1-based).
    #[must_use]
    pub fn new(line: usize, reason: impl Into<String>) -> Self {
        ParseError {
            line,
            reason: reason.into(),
        }
    }

    /// Attaches the path the text came from.
    #[must_use]
    pub fn at(self, path: impl Into<PathBuf>) -> ReadError {
        ReadError::Parse {
            path: path.into(),
            line: self.line,
            reason: self.reason,
        }
    }
}

/// Why a `/proc` or `/sys` file could not be read or understood.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be read (missing, permission, the process exited).
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The file was read but its content is not in the expected format.
    #[error("{}:{line}: {reason}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        reason: String,
    },
}

impl ReadError {
    /// Whether the file is missing or its process is gone (`ENOENT`, `ESRCH`): the expected race
    /// when a process exits between listing `/proc` and reading its files, to be counted rather
    /// than raised.
    #[must_use]
    pub fn is_gone(&self) -> bool {
        match self {
            ReadError::Io { source, .. } => {
                source.kind() == io::ErrorKind::NotFound || source.raw_os_error() == Some(ESRCH)
            }
            ReadError::Parse { .. } => false,
        }
    }

    /// The path that failed.
    #[must_use]
    pub fn path(&self) -> &Path {
        match self {
            ReadError::Io { path, .. } | ReadError::Parse { path, .. } => path,
        }
    }
}

/// `ESRCH` on Linux (asm-generic/errno-base.h); spelled out to keep this module free of libc.
const ESRCH: i32 = 3;

/// Reads a whole file as UTF-8 text, naming the path on failure.
pub(crate) fn read_text(path: &Path) -> Result<String, ReadError> {
    let bytes = std::fs::read(path).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    // /proc text is ASCII except for file names; a lossy decode keeps an odd name from
    // failing the whole file.
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Reads `path` and parses it with `parse`, attaching the path to a parse error.
pub(crate) fn read_parsed<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, ParseError>,
) -> Result<T, ReadError> {
    let text = read_text(path)?;
    parse(&text).map_err(|e| e.at(path))
}

/// Like [`read_parsed`], but a missing file is `Ok(None)` (optional kernel features).
pub(crate) fn read_optional<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, ParseError>,
) -> Result<Option<T>, ReadError> {
    match read_parsed(path, parse) {
        Ok(v) => Ok(Some(v)),
        Err(ReadError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Lists the entries of a directory named `<prefix><number>` (`node0`, `memory_tier4`, `1234`),
/// returning the numbers in ascending order. Other entries are skipped.
pub(crate) fn numbered_entries(dir: &Path, prefix: &str) -> Result<Vec<u32>, ReadError> {
    let io_err = |source| ReadError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err)? {
        let entry = entry.map_err(io_err)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(n) = name.strip_prefix(prefix).and_then(parse_decimal) {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// A plain decimal number, digits only (no sign, no `+`), as the kernel prints `%u`.
fn parse_decimal(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Most ids one list may expand to. Real lists (8192 CPUs at most on x86-64's `NR_CPUS`) are far
/// below; the bound keeps a corrupt `0-4000000000` from allocating gigabytes.
const MAX_LIST_ITEMS: u64 = 1 << 20;

/// Parses the kernel's list format, `%*pbl` (lib/vsprintf.c `bitmap_list_string()`, parsed back
/// by lib/bitmap-str.c `bitmap_parselist()`): comma-separated decimal ids and inclusive ranges,
/// `0-3,8,10-11`. An empty string (or only a newline) is the empty set. Returns the ids in
/// ascending order without duplicates.
///
/// The `a-b:used/group` stride form is accepted by `bitmap_parselist()` but never printed by the
/// kernel, so it is refused here.
///
/// # Errors
///
/// A reason for the first malformed item: a non-number, a range whose end is below its start,
/// or a list expanding to more than a million ids.
pub fn parse_list(text: &str) -> Result<Vec<u32>, String> {
    let text = text.trim();
    let mut out: Vec<u32> = Vec::new();
    if text.is_empty() {
        return Ok(out);
    }
    let mut total: u64 = 0;
    for item in text.split(',') {
        let (lo, hi) = match item.split_once('-') {
            Some((a, b)) => (a, b),
            None => (item, item),
        };
        let lo = parse_decimal(lo).ok_or_else(|| format!("bad list item {item:?}"))?;
        let hi = parse_decimal(hi).ok_or_else(|| format!("bad list item {item:?}"))?;
        if hi < lo {
            return Err(format!("range {item:?} ends before it starts"));
        }
        total += u64::from(hi - lo) + 1;
        if total > MAX_LIST_ITEMS {
            return Err(format!("list expands to more than {MAX_LIST_ITEMS} ids"));
        }
        out.extend(lo..=hi);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Parses a node list (`0-1,3`) into a [`NodeMask`].
///
/// # Errors
///
/// As [`parse_list`], and a node id at or above the engine's [`MAX_NODES`] (a mask cannot hold
/// it, and silently dropping it would misplace pages).
pub fn parse_nodelist(text: &str) -> Result<NodeMask, String> {
    let mut mask = NodeMask::EMPTY;
    for id in parse_list(text)? {
        mask.insert(node_id(id)?);
    }
    Ok(mask)
}

/// A node id the engine can hold, or a reason.
pub(crate) fn node_id(id: u32) -> Result<NodeId, String> {
    match u16::try_from(id) {
        Ok(n) if usize::from(n) < MAX_NODES => Ok(NodeId(n)),
        _ => Err(format!(
            "node {id} is beyond the {MAX_NODES} nodes tierd supports"
        )),
    }
}

/// Parses a file holding one unsigned decimal number (`"%u\n"`, `"%lu\n"`).
///
/// # Errors
///
/// A [`ParseError`] at line 1 if the text is not exactly one number.
pub fn parse_u64(text: &str) -> Result<u64, ParseError> {
    let t = text.trim();
    t.parse()
        .map_err(|_| ParseError::new(1, format!("expected a number, found {t:?}")))
}

/// Undoes the octal escapes `seq_path()`/`mangle_path()` (fs/seq_file.c) put in paths shown in
/// `/proc` files: each escaped byte is written as `\ooo`. Anything that is not a valid three-digit
/// octal escape is left as it is.
#[must_use]
pub fn unescape_octal(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let v = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(b) = u8::try_from(v) {
                    out.push(b);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Undoes `seq_path()`/`seq_file_path()`'s escaping (fs/seq_file.c `mangle_path()`) exactly:
/// the kernel writes each byte of `esc` as `\ooo` and every other byte as it is, a backslash
/// included. So only a three-digit octal escape of a byte in `esc` is decoded; any other `\`
/// is the file name's own (a name holding a literal `\040` is printed the same as one holding
/// a space, and reads back as the space: the kernel's output cannot tell them apart).
///
/// `/proc` text reaches the parsers as UTF-8 decoded lossily (`read_text`): a name's bytes
/// that are not UTF-8 read as U+FFFD; the escaped bytes are all ASCII, so decoding first loses
/// nothing they carry.
#[must_use]
pub fn unescape_seq_path(s: &str, esc: &[u8]) -> String {
    if !s.contains('\\') {
        return s.to_owned();
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            if let Some(b) = bytes.get(i + 1..i + 4).and_then(octal_byte) {
                if esc.contains(&b) {
                    out.push(b);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The byte three octal digits name, if they are octal digits and name a byte.
fn octal_byte(digits: &[u8]) -> Option<u8> {
    if !digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
        return None;
    }
    let v = digits
        .iter()
        .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
    u8::try_from(v).ok()
}

/// The bytes `show_numa_map()` escapes in a file name: `seq_file_path(m, file, "\n\t= ")`
/// (fs/proc/task_mmu.c).
pub const NUMA_MAPS_ESCAPED: &[u8] = b"\n\t= ";

/// The bytes `show_map_vma()` escapes in a file name: `seq_file_path(m, file, "\n")` (through
/// `get_vma_name()` on newer kernels, fs/proc/task_mmu.c).
pub const MAPS_ESCAPED: &[u8] = b"\n";

/// The lines of a `/proc` file: split on `\n` alone. `str::lines()` would also drop a `\r`
/// before each `\n`, which in `maps` and `numa_maps` can be the last byte of a file name (the
/// kernel does not escape it).
pub(crate) fn kernel_lines(text: &str) -> impl Iterator<Item = &str> {
    let text = text.strip_suffix('\n').unwrap_or(text);
    text.split('\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_in_kernel_format() {
        assert_eq!(
            parse_list("0-3,8,10-11\n").unwrap(),
            [0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_list("5").unwrap(), [5]);
        assert_eq!(parse_list("\n").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_list("3,1-2,2").unwrap(), [1, 2, 3]);
        assert!(parse_list("3-1").unwrap_err().contains("3-1"));
        assert!(parse_list("1,,2").is_err());
        assert!(parse_list("a").is_err());
        assert!(parse_list("-1").is_err());
        assert!(parse_list("0-4000000000").is_err());
        assert!(parse_list("0-3:1/2").is_err());
        assert_eq!(
            parse_nodelist("0-1,3").unwrap(),
            NodeMask::from_nodes([0, 1, 3].map(NodeId))
        );
        assert!(parse_nodelist("64").unwrap_err().contains("64"));
    }

    #[test]
    fn octal_escapes() {
        assert_eq!(unescape_octal(r"/tmp/a\040b\012c"), "/tmp/a b\nc");
        assert_eq!(unescape_octal(r"/x\075y"), "/x=y");
        assert_eq!(unescape_octal(r"\09"), r"\09");
        assert_eq!(unescape_octal(r"tail\04"), r"tail\04");
        assert_eq!(unescape_octal(r"\777"), r"\777");
    }

    #[test]
    fn seq_path_escapes_exactly() {
        let esc = NUMA_MAPS_ESCAPED;
        assert_eq!(
            unescape_seq_path(r"/a\040b\012c\011d\075e", esc),
            "/a b\nc\td=e"
        );
        // Not in the escaped set: the name's own backslash and digits.
        assert_eq!(unescape_seq_path(r"/a\101\134", esc), r"/a\101\134");
        assert_eq!(unescape_seq_path(r"/a\04", esc), r"/a\04");
        assert_eq!(unescape_seq_path(r"/a\", esc), r"/a\");
        assert_eq!(unescape_seq_path(r"/x\040y", MAPS_ESCAPED), r"/x\040y");
        assert_eq!(unescape_seq_path(r"/x\012y", MAPS_ESCAPED), "/x\ny");
        let lines: Vec<&str> = kernel_lines("a\r\n\nb\n").collect();
        assert_eq!(lines, ["a\r", "", "b"]);
        assert_eq!(kernel_lines("").collect::<Vec<_>>(), [""]);
    }

    #[test]
    fn single_numbers() {
        assert_eq!(parse_u64("42\n").unwrap(), 42);
        let e = parse_u64("x\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.reason.contains("\"x\""));
        let r = e.at("/sys/x");
        assert_eq!(r.to_string(), "/sys/x:1: expected a number, found \"x\"");
    }
}
