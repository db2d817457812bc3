//! `/proc/meminfo` and the per-node `/sys/devices/system/node/nodeN/meminfo`.
//!
//! Formats: fs/proc/meminfo.c `meminfo_proc_show()` prints `Key:  <value> kB` (`show_val_kb()`)
//! or, for the HugePages counts, `Key:  <value>` without a unit; drivers/base/node.c
//! `node_read_meminfo()` prints the same lines prefixed with `Node <nid> `.
//!
//! Values with the `kB` unit are stored in bytes; unit-less values (page counts) as printed.

use std::collections::BTreeMap;
use std::path::Path;

use tierd_engine::types::{Bytes, NodeId};

use super::{read_parsed, ParseError, ReadError};

/// The lines of a meminfo file, by key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meminfo {
    /// Key (without the colon) to value: bytes for `kB` lines, the bare number otherwise.
    pub entries: BTreeMap<String, u64>,
}

impl Meminfo {
    /// A value by key (`"MemTotal"`, `"HugePages_Total"`).
    #[must_use]
    pub fn get(&self, key: &str) -> Option<u64> {
        self.entries.get(key).copied()
    }

    /// `MemTotal`.
    #[must_use]
    pub fn mem_total(&self) -> Option<Bytes> {
        self.get("MemTotal").map(Bytes)
    }

    /// `MemFree`.
    #[must_use]
    pub fn mem_free(&self) -> Option<Bytes> {
        self.get("MemFree").map(Bytes)
    }

    /// `MemAvailable` (system-wide file only; nodes do not print it).
    #[must_use]
    pub fn mem_available(&self) -> Option<Bytes> {
        self.get("MemAvailable").map(Bytes)
    }
}

/// Parses `/proc/meminfo`.
///
/// # Errors
///
/// A [`ParseError`] for a line without `Key:`, a non-numeric value, or a unit other than `kB`.
pub fn parse_meminfo(text: &str) -> Result<Meminfo, ParseError> {
    parse_lines(text, None)
}

/// Parses `/sys/devices/system/node/node<node>/meminfo`; every line must carry the
/// `Node <node> ` prefix.
///
/// # Errors
///
/// As [`parse_meminfo`], and a line without the prefix or for another node.
pub fn parse_node_meminfo(text: &str, node: NodeId) -> Result<Meminfo, ParseError> {
    parse_lines(text, Some(node))
}

fn parse_lines(text: &str, node: Option<NodeId>) -> Result<Meminfo, ParseError> {
    let mut entries = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let body = match node {
            None => line,
            Some(node) => strip_node_prefix(line, node).map_err(|r| ParseError::new(lineno, r))?,
        };
        let (key, rest) = body
            .split_once(':')
            .ok_or_else(|| ParseError::new(lineno, format!("no `Key:` in {line:?}")))?;
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(ParseError::new(lineno, format!("bad key in {line:?}")));
        }
        let mut fields = rest.split_whitespace();
        let value: u64 = fields
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| ParseError::new(lineno, format!("no numeric value in {line:?}")))?;
        let value = match (fields.next(), fields.next()) {
            (None, None) => value,
            (Some("kB"), None) => value.checked_mul(1024).ok_or_else(|| {
                ParseError::new(lineno, format!("value overflows bytes in {line:?}"))
            })?,
            _ => {
                return Err(ParseError::new(
                    lineno,
                    format!("expected `<n>` or `<n> kB` in {line:?}"),
                ))
            }
        };
        entries.insert(key.to_owned(), value);
    }
    Ok(Meminfo { entries })
}

/// Strips `Node <node> ` from a per-node line.
fn strip_node_prefix(line: &str, node: NodeId) -> Result<&str, String> {
    let rest = line
        .strip_prefix("Node ")
        .ok_or_else(|| format!("no `Node N` prefix in {line:?}"))?;
    let (id, body) = rest
        .split_once(' ')
        .ok_or_else(|| format!("no `Node N` prefix in {line:?}"))?;
    if id.parse::<u16>().ok() != Some(node.0) {
        return Err(format!("line for node {id} in the file of {node}"));
    }
    Ok(body)
}

/// Reads `<proc_root>/meminfo`.
///
/// # Errors
///
/// A [`ReadError`] naming the file.
pub fn read_meminfo(proc_root: &Path) -> Result<Meminfo, ReadError> {
    read_parsed(&proc_root.join("meminfo"), parse_meminfo)
}

/// Reads `<sys_root>/devices/system/node/node<node>/meminfo`.
///
/// # Errors
///
/// A [`ReadError`] naming the file.
pub fn read_node_meminfo(sys_root: &Path, node: NodeId) -> Result<Meminfo, ReadError> {
    let path = super::topology::node_dir(sys_root, node).join("meminfo");
    read_parsed(&path, |t| parse_node_meminfo(t, node))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_meminfo_lines() {
        let m = parse_meminfo(
            "MemTotal:       16318488 kB\nMemAvailable:   12000000 kB\nHugePages_Total:       3\n",
        )
        .unwrap();
        assert_eq!(m.mem_total(), Some(Bytes(16_318_488 * 1024)));
        assert_eq!(m.mem_available(), Some(Bytes(12_000_000 * 1024)));
        assert_eq!(m.get("HugePages_Total"), Some(3));
        assert_eq!(m.mem_free(), None);
    }

    #[test]
    fn node_meminfo_needs_its_prefix() {
        let text = "Node 1 MemTotal:        2097152 kB\nNode 1 HugePages_Free:      0\n";
        let m = parse_node_meminfo(text, NodeId(1)).unwrap();
        assert_eq!(m.mem_total(), Some(Bytes::gib(2)));
        assert_eq!(m.get("HugePages_Free"), Some(0));
        let e = parse_node_meminfo(text, NodeId(0)).unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.reason.contains("node1") || e.reason.contains("node 1"));
        let e = parse_node_meminfo("MemTotal: 1 kB\n", NodeId(0)).unwrap_err();
        assert!(e.reason.contains("prefix"));
    }

    #[test]
    fn malformed_lines_name_the_line() {
        let e = parse_meminfo("MemTotal: 1 kB\nMemFree: x kB\n").unwrap_err();
        assert_eq!(e.line, 2);
        let e = parse_meminfo("MemTotal: 1 MB\n").unwrap_err();
        assert!(e.reason.contains("kB"));
        let e = parse_meminfo("MemTotal 1 kB\n").unwrap_err();
        assert!(e.reason.contains("Key:"));
        let e = parse_meminfo("Big: 18446744073709551615 kB\n").unwrap_err();
        assert!(e.reason.contains("overflow"));
    }
}
