//! cgroup v2 memory files and the cgroup of a process.
//!
//! Formats (Documentation/admin-guide/cgroup-v2.rst, mm/memcontrol.c):
//!
//! - `memory.min`, `memory.low`, `memory.high`, `memory.max`: a byte count or `max` for no limit
//!   (`seq_puts_memcg_tunable()`).
//! - `memory.current`: a byte count.
//! - `memory.stat`: flat keyed, `key value` per line (`memory_stat_format()`), bytes for sizes,
//!   counts for events such as `pgpromote_success` and `pgdemote_*`.
//! - `memory.numa_stat`: nested keyed, `key N0=<bytes> N1=<bytes> ...` (`memory_numa_stat_show()`).
//! - `cgroup.procs`: one pid per line.
//! - `/proc/PID/cgroup`: `hierarchy-id:controllers:path` per line (kernel/cgroup/cgroup.c
//!   `proc_cgroup_show()`); the v2 line is `0::/path`. Hybrid systems add v1 lines.
//!
//! Readers take the cgroup2 mount (`/sys/fs/cgroup` on a live system) as their root and a
//! cgroup path as `/proc/PID/cgroup` shows it (`/` for the root cgroup).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tierd_engine::types::{Bytes, NodeId};

use super::{node_id, read_optional, read_parsed, ParseError, ReadError};

/// A memory limit or protection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Limit {
    /// A byte count.
    Bytes(Bytes),
    /// `max`: unlimited.
    Max,
}

impl Limit {
    /// The byte count, or `None` for `max`.
    #[must_use]
    pub fn bytes(self) -> Option<Bytes> {
        match self {
            Limit::Bytes(b) => Some(b),
            Limit::Max => None,
        }
    }
}

/// Parses `memory.{min,low,high,max}`.
///
/// # Errors
///
/// A [`ParseError`] for anything but a number or `max`.
pub fn parse_limit(text: &str) -> Result<Limit, ParseError> {
    match text.trim() {
        "max" => Ok(Limit::Max),
        t => t
            .parse()
            .map(|b| Limit::Bytes(Bytes(b)))
            .map_err(|_| ParseError::new(1, format!("expected bytes or `max`, found {t:?}"))),
    }
}

/// Parses a flat keyed file (`memory.stat`): `key value` per line.
///
/// # Errors
///
/// A [`ParseError`] for a line that is not `key <unsigned>`.
pub fn parse_flat_keyed(text: &str) -> Result<BTreeMap<String, u64>, ParseError> {
    // Same shape as vmstat, duplicates included.
    super::vmstat::parse_vmstat(text).map(|v| v.counters)
}

/// `memory.numa_stat`: per key, bytes on each node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NumaStat {
    /// Key (`anon`, `file`, ...) to node to bytes (page counts for the few non-size keys).
    pub entries: BTreeMap<String, BTreeMap<NodeId, u64>>,
}

impl NumaStat {
    /// The value of `key` on `node`.
    #[must_use]
    pub fn get(&self, key: &str, node: NodeId) -> Option<u64> {
        self.entries.get(key)?.get(&node).copied()
    }
}

/// Parses `memory.numa_stat`.
///
/// # Errors
///
/// A [`ParseError`] for a line whose fields are not `N<node>=<unsigned>`.
pub fn parse_numa_stat(text: &str) -> Result<NumaStat, ParseError> {
    let mut entries = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        let mut fields = line.split_whitespace();
        let Some(key) = fields.next() else { continue };
        let mut per_node = BTreeMap::new();
        for f in fields {
            let bad = || ParseError::new(lineno, format!("bad field {f:?} for {key}"));
            let (n, v) = f
                .strip_prefix('N')
                .and_then(|r| r.split_once('='))
                .ok_or_else(bad)?;
            let n: u32 = n.parse().map_err(|_| bad())?;
            let node = node_id(n).map_err(|r| ParseError::new(lineno, r))?;
            per_node.insert(node, v.parse().map_err(|_| bad())?);
        }
        entries.insert(key.to_owned(), per_node);
    }
    Ok(NumaStat { entries })
}

/// Parses `cgroup.procs` (or `cgroup.threads`): one pid per line.
///
/// # Errors
///
/// A [`ParseError`] naming a line that is not a pid.
pub fn parse_pids(text: &str) -> Result<Vec<u32>, ParseError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            l.trim()
                .parse()
                .map_err(|_| ParseError::new(i + 1, format!("bad pid {l:?}")))
        })
        .collect()
}

/// One line of `/proc/PID/cgroup`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupMembership {
    /// Hierarchy id; 0 for cgroup v2.
    pub hierarchy: u32,
    /// Controllers bound to the hierarchy (empty for v2).
    pub controllers: Vec<String>,
    /// The cgroup's path in that hierarchy.
    pub path: String,
}

/// Parses `/proc/PID/cgroup`.
///
/// # Errors
///
/// A [`ParseError`] for a line that is not `id:controllers:path`.
pub fn parse_proc_cgroup(text: &str) -> Result<Vec<CgroupMembership>, ParseError> {
    let mut out = Vec::new();
    // cgroup names may end in '\r' (only '/' and NUL are refused), so lines split on '\n' alone.
    for (i, line) in super::kernel_lines(text).enumerate() {
        if line.is_empty() {
            continue;
        }
        // The path may itself contain ':', so split only twice.
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctl), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(ParseError::new(
                i + 1,
                format!("expected `id:controllers:path`, found {line:?}"),
            ));
        };
        let hierarchy = id
            .parse()
            .map_err(|_| ParseError::new(i + 1, format!("bad hierarchy id {id:?}")))?;
        out.push(CgroupMembership {
            hierarchy,
            controllers: ctl
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect(),
            path: path.to_owned(),
        });
    }
    Ok(out)
}

/// The cgroup v2 path (`0::/path`) among the memberships, if the process is in the unified
/// hierarchy.
#[must_use]
pub fn unified_path(memberships: &[CgroupMembership]) -> Option<&str> {
    memberships
        .iter()
        .find(|m| m.hierarchy == 0 && m.controllers.is_empty())
        .map(|m| m.path.as_str())
}

/// Reads `<proc_root>/<pid>/cgroup`.
///
/// # Errors
///
/// A [`ReadError`] naming the file; [`ReadError::is_gone`] when the process exited.
pub fn read_proc_cgroup(proc_root: &Path, pid: u32) -> Result<Vec<CgroupMembership>, ReadError> {
    read_parsed(
        &proc_root.join(pid.to_string()).join("cgroup"),
        parse_proc_cgroup,
    )
}

/// The memory controller files of one cgroup; `None` where the file does not exist (the root
/// cgroup has no limits, a cgroup without the memory controller has none of them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryCgroup {
    /// The cgroup path (`/` for the root).
    pub path: String,
    /// `memory.min`.
    pub min: Option<Limit>,
    /// `memory.low`.
    pub low: Option<Limit>,
    /// `memory.high`.
    pub high: Option<Limit>,
    /// `memory.max`.
    pub max: Option<Limit>,
    /// `memory.current`.
    pub current: Option<Bytes>,
    /// `memory.stat`.
    pub stat: Option<BTreeMap<String, u64>>,
    /// `memory.numa_stat`.
    pub numa_stat: Option<NumaStat>,
}

/// A cgroup2 hierarchy rooted at a mount point.
#[derive(Clone, Debug)]
pub struct CgroupFs {
    root: PathBuf,
}

impl CgroupFs {
    /// The hierarchy mounted at `root` (`/sys/fs/cgroup`, or a fixture directory).
    #[must_use]
    pub fn new(root: impl Into<PathBuf>) -> Self {
        CgroupFs { root: root.into() }
    }

    /// The directory of the cgroup at `path` (`/` or `/a/b`).
    #[must_use]
    pub fn dir(&self, path: &str) -> PathBuf {
        let rel = path.trim_start_matches('/');
        if rel.is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        }
    }

    /// Reads the memory files of the cgroup at `path`.
    ///
    /// # Errors
    ///
    /// A [`ReadError`] naming a file that exists but cannot be read or parsed.
    pub fn read_memory(&self, path: &str) -> Result<MemoryCgroup, ReadError> {
        let dir = self.dir(path);
        Ok(MemoryCgroup {
            path: path.to_owned(),
            min: read_optional(&dir.join("memory.min"), parse_limit)?,
            low: read_optional(&dir.join("memory.low"), parse_limit)?,
            high: read_optional(&dir.join("memory.high"), parse_limit)?,
            max: read_optional(&dir.join("memory.max"), parse_limit)?,
            current: read_optional(&dir.join("memory.current"), |t| {
                super::parse_u64(t).map(Bytes)
            })?,
            stat: read_optional(&dir.join("memory.stat"), parse_flat_keyed)?,
            numa_stat: read_optional(&dir.join("memory.numa_stat"), parse_numa_stat)?,
        })
    }

    /// The pids in the cgroup at `path` (`cgroup.procs`).
    ///
    /// # Errors
    ///
    /// A [`ReadError`] naming the file.
    pub fn procs(&self, path: &str) -> Result<Vec<u32>, ReadError> {
        read_parsed(&self.dir(path).join("cgroup.procs"), parse_pids)
    }

    /// The child cgroups of `path`, as paths (`/a/b/c`), sorted.
    ///
    /// # Errors
    ///
    /// A [`ReadError`] naming the directory.
    pub fn children(&self, path: &str) -> Result<Vec<String>, ReadError> {
        let dir = self.dir(path);
        let io_err = |source| ReadError::Io {
            path: dir.clone(),
            source,
        };
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(io_err)? {
            let entry = entry.map_err(io_err)?;
            if !entry.file_type().map_err(io_err)?.is_dir() {
                continue;
            }
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let base = path.trim_end_matches('/');
            out.push(format!("{base}/{name}"));
        }
        out.sort_unstable();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert_eq!(parse_limit("max\n").unwrap(), Limit::Max);
        assert_eq!(parse_limit("0\n").unwrap(), Limit::Bytes(Bytes(0)));
        assert_eq!(
            parse_limit("1073741824\n").unwrap().bytes(),
            Some(Bytes::gib(1))
        );
        assert!(parse_limit("1G\n").is_err());
        assert!(Limit::Bytes(Bytes(u64::MAX)) < Limit::Max);
    }

    #[test]
    fn numa_stat_lines() {
        let s = parse_numa_stat("anon N0=4096 N1=8192\nfile N0=0 N1=12288\n").unwrap();
        assert_eq!(s.get("anon", NodeId(1)), Some(8192));
        assert_eq!(s.get("file", NodeId(1)), Some(12288));
        assert_eq!(s.get("shmem", NodeId(0)), None);
        assert_eq!(parse_numa_stat("anon N0=1\nfile 5\n").unwrap_err().line, 2);
        assert!(parse_numa_stat("anon N0=x\n").is_err());
        assert!(parse_numa_stat("anon N64=1\n").is_err());
    }

    #[test]
    fn proc_cgroup_v2_and_hybrid() {
        let m = parse_proc_cgroup("0::/user.slice/app.scope\n").unwrap();
        assert_eq!(unified_path(&m), Some("/user.slice/app.scope"));
        let m = parse_proc_cgroup("4:memory:/x\n1:cpu,cpuacct:/\n0::/\n").unwrap();
        assert_eq!(m[1].controllers, ["cpu", "cpuacct"]);
        assert_eq!(unified_path(&m), Some("/"));
        let m = parse_proc_cgroup("1:name=systemd:/a:b\n").unwrap();
        assert_eq!(m[0].path, "/a:b");
        assert_eq!(unified_path(&m), None);
        assert_eq!(parse_proc_cgroup("0::/\nbad\n").unwrap_err().line, 2);
        assert!(parse_proc_cgroup("x::/\n").is_err());
    }

    #[test]
    fn pids_and_dirs() {
        assert_eq!(parse_pids("1\n22\n").unwrap(), [1, 22]);
        assert_eq!(parse_pids("1\n-2\n").unwrap_err().line, 2);
        let fs = CgroupFs::new("/sys/fs/cgroup");
        assert_eq!(fs.dir("/"), PathBuf::from("/sys/fs/cgroup"));
        assert_eq!(fs.dir("/a/b"), PathBuf::from("/sys/fs/cgroup/a/b"));
    }
}
