//! `/proc/PID/numa_maps` and `/proc/PID/maps`.
//!
//! `numa_maps` (fs/proc/task_mmu.c `show_numa_map()`) prints one line per VMA:
//!
//! ```text
//! <start hex> <policy> [file=<path>|heap|stack] [huge] [anon=N] [dirty=N] [mapped=N]
//!     [mapmax=N] [swapcache=N] [active=N] [writeback=N] [N<nid>=N ...] [kernelpagesize_kB=N]
//! ```
//!
//! The policy is `mpol_to_str()` (mm/mempolicy.c): a mode from `policy_modes[]` (`default`,
//! `prefer`, `bind`, `interleave`, `weighted interleave`, `local`, `prefer (many)`; two of them
//! contain a space), then `=` and the flags (`static` or `relative`, and `balancing`, joined by
//! `|`), then `:` and the node list. The kernel formats it into a 64-byte buffer, so a very long
//! node list can be cut short ([`VmaPolicy::truncated`]). A mode or flag from a newer kernel
//! (or the `unknown` `mpol_to_str()` prints for a mode it cannot name) parses as
//! [`PolicyMode::Unknown`], never as an error ([`parse_policy_prefix`]).
//!
//! The file path goes through `seq_file_path(m, file, "\n\t= ")`, which octal-escapes
//! newline, tab, `=` and space and prints every other byte as it is (vertical tab, carriage
//! return, a no-break space, bytes that are not UTF-8): so fields are split on the ASCII space
//! alone and lines on `\n` alone, and only those four escapes are decoded
//! ([`super::unescape_seq_path`]). Page counts are in units of the VMA's kernel page size
//! (`kernelpagesize_kB`, 2048 for a 2 MiB hugetlb VMA).
//!
//! `numa_maps` has no end address; `/proc/PID/maps` (`show_map_vma()`:
//! `start-end perms offset major:minor inode [path]`) has it. There a file's path goes through
//! `seq_file_path(m, file, "\n")` (newline escaped, nothing else: spaces stay, and a deleted
//! file ends in ` (deleted)`); other VMAs print a pseudo-name as it is: `[heap]`, `[stack]`,
//! `[vdso]`, `[vvar]`, `[vsyscall]`, `[uprobes]`, `[anon:<name>]` and `[anon_shmem:<name>]`
//! (`anon_vma_name()`, whose names `prctl(PR_SET_VMA_ANON_NAME)` limits to printable
//! characters other than `\`, `` ` ``, `$`, `[` and `]`). [`join_maps`] pairs the two files by
//! start address.

use std::collections::BTreeMap;
use std::path::Path;

use tierd_engine::policy::{MemPolicy, PolicyMode};
use tierd_engine::types::{NodeId, Pages, Vpn, PAGE_SIZE};

use super::{
    kernel_lines, node_id, parse_nodelist, read_parsed, unescape_seq_path, ParseError, ReadError,
    MAPS_ESCAPED, NUMA_MAPS_ESCAPED,
};

/// What a VMA maps, from the token after the policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Backing {
    /// Anonymous memory other than the heap and stack.
    #[default]
    Anon,
    /// `file=<path>` (unescaped).
    File(String),
    /// `heap`.
    Heap,
    /// `stack`.
    Stack,
}

/// The policy of a VMA as `numa_maps` prints it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmaPolicy {
    /// Mode, nodes and `MPOL_F_NUMA_BALANCING`, as the engine models them.
    pub policy: MemPolicy,
    /// `MPOL_F_STATIC_NODES` (`=static`).
    pub static_nodes: bool,
    /// `MPOL_F_RELATIVE_NODES` (`=relative`).
    pub relative_nodes: bool,
    /// The policy text filled `show_numa_map()`'s 64-byte buffer, so its node list may have
    /// been cut: `nodes` then holds only the ids that were printed whole (a subset of the real
    /// mask, which is the cautious side for a mask that restricts moves).
    pub truncated: bool,
}

/// One `numa_maps` line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NumaMapsEntry {
    /// Start address of the VMA.
    pub start: u64,
    /// Its policy.
    pub policy: VmaPolicy,
    /// What it maps.
    pub backing: Backing,
    /// `huge`: a hugetlb VMA.
    pub huge: bool,
    /// `anon=`.
    pub anon: Option<u64>,
    /// `dirty=`.
    pub dirty: Option<u64>,
    /// `mapped=` (printed only when it differs from both `anon` and `dirty`).
    pub mapped: Option<u64>,
    /// `mapmax=`.
    pub mapmax: Option<u64>,
    /// `swapcache=`.
    pub swapcache: Option<u64>,
    /// `active=`.
    pub active: Option<u64>,
    /// `writeback=`.
    pub writeback: Option<u64>,
    /// `unevictable=` (older kernels).
    pub unevictable: Option<u64>,
    /// `kernelpagesize_kB=`; absent when the VMA has no pages.
    pub kernel_page_size_kb: Option<u64>,
    /// `N<nid>=<pages>`: pages (of the kernel page size) on each node.
    pub nodes: BTreeMap<NodeId, u64>,
    /// Tokens this parser does not know, kept as `(key, value)` (value empty for a bare word).
    pub other: Vec<(String, String)>,
}

impl NumaMapsEntry {
    /// The first virtual page of the VMA.
    #[must_use]
    pub fn start_vpn(&self) -> Vpn {
        Vpn::from_addr(self.start)
    }

    /// Base (4 KiB) pages per kernel page of this VMA: 512 for a 2 MiB hugetlb VMA, 1 otherwise.
    #[must_use]
    pub fn base_pages_per_page(&self) -> u64 {
        self.kernel_page_size_kb
            .map_or(1, |kb| (kb.saturating_mul(1024) / PAGE_SIZE).max(1))
    }

    /// Resident base pages on `node`.
    #[must_use]
    pub fn pages_on(&self, node: NodeId) -> Pages {
        Pages(
            self.nodes
                .get(&node)
                .map_or(0, |&n| n.saturating_mul(self.base_pages_per_page())),
        )
    }

    /// Resident base pages on all nodes.
    #[must_use]
    pub fn total_pages(&self) -> Pages {
        Pages(
            self.nodes
                .values()
                .fold(0u64, |s, &n| s.saturating_add(n))
                .saturating_mul(self.base_pages_per_page()),
        )
    }
}

/// A whole `numa_maps` file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NumaMaps {
    /// One entry per VMA, in address order.
    pub entries: Vec<NumaMapsEntry>,
}

impl NumaMaps {
    /// Resident base pages per node over all VMAs: the process total.
    #[must_use]
    pub fn node_totals(&self) -> BTreeMap<NodeId, Pages> {
        let mut out: BTreeMap<NodeId, Pages> = BTreeMap::new();
        for e in &self.entries {
            for &node in e.nodes.keys() {
                let p = out.entry(node).or_default();
                p.0 = p.0.saturating_add(e.pages_on(node).0);
            }
        }
        out
    }
}

/// The longest policy text `show_numa_map()` prints: its buffer is `char buffer[64]`, and
/// `mpol_to_str()` stops one byte short for the terminating NUL.
const MPOL_TEXT_MAX: usize = 63;

/// Mode names from `policy_modes[]`, longest first so `prefer (many)` is tried before `prefer`.
const MODES: [(&str, PolicyMode); 7] = [
    ("weighted interleave", PolicyMode::WeightedInterleave),
    ("prefer (many)", PolicyMode::PreferredMany),
    ("interleave", PolicyMode::Interleave),
    ("default", PolicyMode::Default),
    ("prefer", PolicyMode::Preferred),
    ("local", PolicyMode::Local),
    ("bind", PolicyMode::Bind),
];

/// Whether `tok` is one of the fields `show_numa_map()` prints after the policy (`file=`,
/// `heap`, `stack`, `huge`, the counts, `N<nid>=`, `kernelpagesize_kB=`): where the policy text
/// of a mode this parser does not know ends (a newer kernel's mode name may hold spaces, as
/// `weighted interleave` and `prefer (many)` do).
fn is_field(tok: &str) -> bool {
    match tok.split_once('=') {
        None => matches!(tok, "heap" | "stack" | "huge"),
        Some((key, _)) => {
            matches!(
                key,
                "file"
                    | "anon"
                    | "dirty"
                    | "mapped"
                    | "mapmax"
                    | "swapcache"
                    | "active"
                    | "writeback"
                    | "unevictable"
                    | "kernelpagesize_kB"
            ) || (key.len() > 1
                && key.starts_with('N')
                && key[1..].bytes().all(|b| b.is_ascii_digit()))
        }
    }
}

/// Parses an `mpol_to_str()` string at the start of `s`; returns the policy and the rest of
/// `s` after it.
///
/// `mpol_to_str()` (mm/mempolicy.c) prints `<mode>[=<flags>][:<nodelist>]`: the mode from
/// `policy_modes[]`; `=` only when a mode flag is set, then `static` or `relative` (mutually
/// exclusive) and `balancing` (`MPOL_F_NUMA_BALANCING`), joined by `|` when both are there
/// (`static|balancing`), or `balancing` alone; `:` and `%*pbl` only for a non-empty mask. A
/// mode it cannot name prints `unknown` (with a `WARN_ON_ONCE`).
///
/// A mode or flag this parser does not know (`unknown`, or a newer kernel's) is not an error:
/// the policy is [`PolicyMode::Unknown`], which the engine never moves, and what could be read
/// of its flags and nodes is kept. The text of an unknown mode runs to the first field
/// `show_numa_map()` prints after the policy, or the end of the line.
///
/// # Errors
///
/// A reason for an empty policy or a malformed node list of a known mode.
pub fn parse_policy_prefix(s: &str) -> Result<(VmaPolicy, &str), String> {
    let known = MODES.iter().find(|(name, _)| {
        s.strip_prefix(name)
            .is_some_and(|r| r.is_empty() || r.starts_with([' ', '=', ':']))
    });
    let Some((name, mode)) = known else {
        return Ok(unknown_policy(s));
    };
    let mut rest = &s[name.len()..];
    // A known name followed by a word that is neither a field nor `key=value` with a
    // field-like key is the start of a longer name a newer kernel added (as `prefer (many)`
    // came after `prefer`). A new bare-word field would read as such a name too: the cautious
    // side, as its VMA is then never moved.
    if let Some(next) = rest.split(' ').find(|t| !t.is_empty()) {
        let field_like = next.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        });
        if rest.starts_with(' ') && !is_field(next) && !field_like {
            return Ok(unknown_policy(s));
        }
    }
    let mut out = VmaPolicy {
        policy: MemPolicy::new(*mode, tierd_engine::types::NodeMask::EMPTY),
        ..VmaPolicy::default()
    };
    if let Some(r) = rest.strip_prefix('=') {
        let end = r.find([':', ' ']).unwrap_or(r.len());
        if !set_flags(&mut out, &r[..end]) {
            out.policy.mode = PolicyMode::Unknown;
        }
        rest = &r[end..];
    }
    if let Some(r) = rest.strip_prefix(':') {
        let end = r.find(' ').unwrap_or(r.len());
        let list = &r[..end];
        rest = &r[end..];
        out.truncated = s.len() - rest.len() >= MPOL_TEXT_MAX;
        out.policy.nodes = match parse_nodelist(list) {
            Ok(mask) if !out.truncated => mask,
            _ if out.truncated => parse_nodelist(whole_items(list))?,
            Ok(mask) => mask,
            Err(e) => return Err(e),
        };
    } else {
        out.truncated = s.len() - rest.len() >= MPOL_TEXT_MAX;
    }
    Ok((out, rest))
}

/// The items of a node list cut short by the kernel's buffer that were printed whole: those
/// before the last comma (the last one, `14`, may be the start of `14-15`).
fn whole_items(list: &str) -> &str {
    list.rfind(',').map_or("", |c| &list[..c])
}

/// Sets the flags of `flags` (the text between `=` and `:`); false if one is not known.
fn set_flags(out: &mut VmaPolicy, flags: &str) -> bool {
    let mut all_known = true;
    for flag in flags.split('|') {
        match flag {
            "static" => out.static_nodes = true,
            "relative" => out.relative_nodes = true,
            "balancing" => out.policy.numa_balancing = true,
            _ => all_known = false,
        }
    }
    all_known
}

/// A policy whose mode this parser does not know: [`PolicyMode::Unknown`], with the flags and
/// nodes that could be read (`<mode>[=<flags>][:<nodelist>]` taken from the last `=` and `:`).
fn unknown_policy(s: &str) -> (VmaPolicy, &str) {
    let mut end = 0;
    let mut at = 0;
    for tok in s.split(' ') {
        if at > 0 && is_field(tok) {
            break;
        }
        at += tok.len() + 1;
        if !tok.is_empty() {
            end = at - 1;
        }
    }
    let text = &s[..end.min(s.len())];
    let mut out = VmaPolicy {
        policy: MemPolicy::new(PolicyMode::Unknown, tierd_engine::types::NodeMask::EMPTY),
        truncated: end >= MPOL_TEXT_MAX,
        ..VmaPolicy::default()
    };
    let (head, mut list) = text.rsplit_once(':').unwrap_or((text, ""));
    if out.truncated {
        list = whole_items(list);
    }
    // Nodes of an unknown policy only inform; a list that does not read is left empty.
    out.policy.nodes = parse_nodelist(list).unwrap_or_default();
    if let Some((_, flags)) = head.rsplit_once('=') {
        set_flags(&mut out, flags);
    }
    (out, &s[end.min(s.len())..])
}

fn count(key: &str, value: &str) -> Result<u64, String> {
    value
        .parse()
        .map_err(|_| format!("bad count {value:?} for {key}"))
}

/// Parses one `numa_maps` line.
///
/// # Errors
///
/// A reason for a bad address, policy, count or node.
pub fn parse_numa_maps_line(line: &str) -> Result<NumaMapsEntry, String> {
    let (addr, rest) = line
        .split_once(' ')
        .ok_or_else(|| format!("no policy after the address in {line:?}"))?;
    let start = u64::from_str_radix(addr, 16).map_err(|_| format!("bad address {addr:?}"))?;
    if rest.is_empty() || rest.starts_with(' ') {
        return Err(format!("no policy after the address in {line:?}"));
    }
    let (policy, rest) = parse_policy_prefix(rest)?;
    let mut e = NumaMapsEntry {
        start,
        policy,
        ..NumaMapsEntry::default()
    };
    // show_numa_map() (fs/proc/task_mmu.c) separates fields with one ASCII space and prints
    // the file name through seq_file_path(m, file, "\n\t= "), which escapes only newline,
    // tab, space and '=' (as \ooo): any other byte, a vertical tab or a no-break space among
    // them, is printed as it is. So split on ' ' alone, never on Unicode whitespace.
    for tok in rest.split(' ').filter(|t| !t.is_empty()) {
        let (key, value) = tok.split_once('=').unwrap_or((tok, ""));
        match key {
            "heap" if value.is_empty() => e.backing = Backing::Heap,
            "stack" if value.is_empty() => e.backing = Backing::Stack,
            "huge" if value.is_empty() => e.huge = true,
            "file" => e.backing = Backing::File(unescape_seq_path(value, NUMA_MAPS_ESCAPED)),
            "anon" => e.anon = Some(count(key, value)?),
            "dirty" => e.dirty = Some(count(key, value)?),
            "mapped" => e.mapped = Some(count(key, value)?),
            "mapmax" => e.mapmax = Some(count(key, value)?),
            "swapcache" => e.swapcache = Some(count(key, value)?),
            "active" => e.active = Some(count(key, value)?),
            "writeback" => e.writeback = Some(count(key, value)?),
            "unevictable" => e.unevictable = Some(count(key, value)?),
            "kernelpagesize_kB" => e.kernel_page_size_kb = Some(count(key, value)?),
            _ if key.len() > 1
                && key.starts_with('N')
                && key[1..].bytes().all(|b| b.is_ascii_digit()) =>
            {
                let nid: u32 = key[1..]
                    .parse()
                    .map_err(|_| format!("bad node in {tok:?}"))?;
                e.nodes.insert(node_id(nid)?, count(key, value)?);
            }
            _ => e.other.push((key.to_owned(), value.to_owned())),
        }
    }
    Ok(e)
}

/// Parses a whole `numa_maps` file.
///
/// # Errors
///
/// A [`ParseError`] naming the first bad line.
pub fn parse_numa_maps(text: &str) -> Result<NumaMaps, ParseError> {
    let entries = kernel_lines(text)
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| parse_numa_maps_line(l).map_err(|r| ParseError::new(i + 1, r)))
        .collect::<Result<_, _>>()?;
    Ok(NumaMaps { entries })
}

/// One `/proc/PID/maps` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapsEntry {
    /// Start address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// `rwxp`-style permissions.
    pub perms: String,
    /// File offset.
    pub offset: u64,
    /// Device `major:minor`, hex.
    pub dev: (u32, u32),
    /// Inode.
    pub inode: u64,
    /// Path or pseudo-name (`[heap]`, `[stack]`, `[vdso]`); `None` for anonymous memory.
    pub path: Option<String>,
}

/// Parses one `maps` line.
///
/// # Errors
///
/// A reason for a missing or malformed field.
pub fn parse_maps_line(line: &str) -> Result<MapsEntry, String> {
    let mut rest = line;
    let mut field = |what: &str| -> Result<&str, String> {
        let t = rest.trim_start_matches(' ');
        let end = t.find(' ').unwrap_or(t.len());
        if end == 0 {
            return Err(format!("no {what} in {line:?}"));
        }
        rest = &t[end..];
        Ok(&t[..end])
    };
    let range = field("address range")?;
    let perms = field("permissions")?.to_owned();
    let offset = field("offset")?;
    let dev = field("device")?;
    let inode = field("inode")?;
    let path = rest.trim_start_matches(' ');
    let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|_| format!("bad hex {s:?}"));
    let (start, end) = range
        .split_once('-')
        .ok_or_else(|| format!("bad address range {range:?}"))?;
    let (start, end) = (hex(start)?, hex(end)?);
    if end < start {
        return Err(format!("address range {range:?} ends before it starts"));
    }
    if perms.len() != 4 {
        return Err(format!("bad permissions {perms:?}"));
    }
    let (major, minor) = dev
        .split_once(':')
        .ok_or_else(|| format!("bad device {dev:?}"))?;
    let devnum = |s: &str| u32::from_str_radix(s, 16).map_err(|_| format!("bad device {dev:?}"));
    Ok(MapsEntry {
        start,
        end,
        perms,
        offset: hex(offset)?,
        dev: (devnum(major)?, devnum(minor)?),
        inode: inode.parse().map_err(|_| format!("bad inode {inode:?}"))?,
        path: (!path.is_empty()).then(|| unescape_seq_path(path, MAPS_ESCAPED)),
    })
}

/// Parses a whole `maps` file.
///
/// # Errors
///
/// A [`ParseError`] naming the first bad line.
pub fn parse_maps(text: &str) -> Result<Vec<MapsEntry>, ParseError> {
    kernel_lines(text)
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| parse_maps_line(l).map_err(|r| ParseError::new(i + 1, r)))
        .collect()
}

/// A VMA with its `numa_maps` data and, where `maps` had it, its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vma {
    /// First page.
    pub start: Vpn,
    /// One past the last page; `None` when `maps` had no VMA starting at `start` (the VMA
    /// changed between the two reads).
    pub end: Option<Vpn>,
    /// The `numa_maps` line.
    pub numa: NumaMapsEntry,
}

/// Pairs `numa_maps` entries with `maps` entries by start address (the two files are read at
/// different times, so a VMA that changed in between has no end).
#[must_use]
pub fn join_maps(numa: NumaMaps, maps: &[MapsEntry]) -> Vec<Vma> {
    let ends: BTreeMap<u64, u64> = maps.iter().map(|m| (m.start, m.end)).collect();
    numa.entries
        .into_iter()
        .map(|e| Vma {
            start: e.start_vpn(),
            // Round the end up: a VMA end is page aligned, but a rounded-down end would drop
            // the last page of an odd one.
            end: ends.get(&e.start).map(|&end| Vpn(end.div_ceil(PAGE_SIZE))),
            numa: e,
        })
        .collect()
}

/// The `[start, end)` policy ranges of the VMAs with a known end, for
/// `OwnerMap::set_policies`. Default-policy VMAs are left out (the default is what an unlisted
/// range gets).
#[must_use]
pub fn policy_ranges(vmas: &[Vma]) -> Vec<(Vpn, Vpn, MemPolicy)> {
    vmas.iter()
        .filter(|v| v.numa.policy.policy != MemPolicy::DEFAULT)
        .filter_map(|v| Some((v.start, v.end?, v.numa.policy.policy)))
        .collect()
}

fn pid_dir(proc_root: &Path, pid: u32) -> std::path::PathBuf {
    proc_root.join(pid.to_string())
}

/// Reads `<proc_root>/<pid>/numa_maps`.
///
/// # Errors
///
/// A [`ReadError`] naming the file; [`ReadError::is_gone`] when the process exited.
pub fn read_numa_maps(proc_root: &Path, pid: u32) -> Result<NumaMaps, ReadError> {
    read_parsed(&pid_dir(proc_root, pid).join("numa_maps"), parse_numa_maps)
}

/// Reads `<proc_root>/<pid>/maps`.
///
/// # Errors
///
/// A [`ReadError`] naming the file; [`ReadError::is_gone`] when the process exited.
pub fn read_maps(proc_root: &Path, pid: u32) -> Result<Vec<MapsEntry>, ReadError> {
    read_parsed(&pid_dir(proc_root, pid).join("maps"), parse_maps)
}

/// Reads `numa_maps` and `maps` of `pid` and joins them.
///
/// # Errors
///
/// As [`read_numa_maps`] and [`read_maps`].
pub fn read_vmas(proc_root: &Path, pid: u32) -> Result<Vec<Vma>, ReadError> {
    let maps = read_maps(proc_root, pid)?;
    Ok(join_maps(read_numa_maps(proc_root, pid)?, &maps))
}

#[cfg(test)]
mod tests {
    use tierd_engine::types::NodeMask;

    use super::*;

    fn mask(ids: &[u16]) -> NodeMask {
        NodeMask::from_nodes(ids.iter().copied().map(NodeId))
    }

    #[test]
    fn every_policy_spelling() {
        /// Text, mode, nodes, static, relative, balancing.
        type Case<'a> = (&'a str, PolicyMode, &'a [u16], bool, bool, bool);
        let cases: [Case; 10] = [
            ("default", PolicyMode::Default, &[], false, false, false),
            ("local", PolicyMode::Local, &[], false, false, false),
            ("bind:0-1", PolicyMode::Bind, &[0, 1], false, false, false),
            ("prefer:1", PolicyMode::Preferred, &[1], false, false, false),
            (
                "prefer (many):0-1",
                PolicyMode::PreferredMany,
                &[0, 1],
                false,
                false,
                false,
            ),
            (
                "interleave:0,2",
                PolicyMode::Interleave,
                &[0, 2],
                false,
                false,
                false,
            ),
            (
                "weighted interleave:0-1",
                PolicyMode::WeightedInterleave,
                &[0, 1],
                false,
                false,
                false,
            ),
            ("bind=static:1", PolicyMode::Bind, &[1], true, false, false),
            (
                "interleave=relative:0-1",
                PolicyMode::Interleave,
                &[0, 1],
                false,
                true,
                false,
            ),
            (
                "prefer (many)=balancing:0-1",
                PolicyMode::PreferredMany,
                &[0, 1],
                false,
                false,
                true,
            ),
        ];
        for (text, mode, nodes, stat, rel, bal) in cases {
            let line = format!("7f0000000000 {text} anon=3 N0=3 kernelpagesize_kB=4");
            let e = parse_numa_maps_line(&line).unwrap_or_else(|r| panic!("{text}: {r}"));
            assert_eq!(e.policy.policy.mode, mode, "{text}");
            assert_eq!(e.policy.policy.nodes, mask(nodes), "{text}");
            assert_eq!(e.policy.static_nodes, stat, "{text}");
            assert_eq!(e.policy.relative_nodes, rel, "{text}");
            assert_eq!(e.policy.policy.numa_balancing, bal, "{text}");
            assert_eq!(e.anon, Some(3), "{text}");
        }
        let e = parse_numa_maps_line("1000 bind=relative|balancing:0 N0=1").unwrap();
        assert!(e.policy.relative_nodes && e.policy.policy.numa_balancing);
        let e = parse_numa_maps_line("1000 interleave=balancing:0-1 N0=1").unwrap();
        assert_eq!(e.policy.policy.mode, PolicyMode::Interleave);
        assert!(e.policy.policy.numa_balancing && !e.policy.static_nodes);
        assert!(parse_numa_maps_line("1000 ").is_err());
        assert!(parse_numa_maps_line("1000 bind:0-x").is_err());
    }

    /// Modes and flags from a newer kernel, and the kernel's own `unknown`, parse as
    /// PolicyMode::Unknown with the rest of the line intact.
    #[test]
    fn unknown_modes_and_flags_are_values_not_errors() {
        type Case<'a> = (&'a str, &'a [u16], bool);
        let cases: [Case; 8] = [
            ("unknown", &[], false),
            ("binder", &[], false),
            ("preferred:1", &[1], false),
            ("bind=sticky:0", &[0], false),
            ("bind=static|sticky:0-1", &[0, 1], true),
            ("weighted tiered interleave=static:2-3", &[2, 3], true),
            ("prefer (many)x:1", &[1], false),
            ("future (mode):zz", &[], false),
        ];
        for (text, nodes, stat) in cases {
            for tail in [
                "",
                " file=/a\\040b",
                " heap huge anon=2 N1=2 kernelpagesize_kB=4",
            ] {
                let line = format!("7f00 {text}{tail}");
                let e = parse_numa_maps_line(&line).unwrap_or_else(|r| panic!("{line}: {r}"));
                assert_eq!(e.policy.policy.mode, PolicyMode::Unknown, "{line}");
                assert_eq!(e.policy.policy.nodes, mask(nodes), "{line}");
                assert_eq!(e.policy.static_nodes, stat, "{line}");
                assert!(e.other.is_empty(), "{line}: {:?}", e.other);
                match tail {
                    "" => assert_eq!(e.backing, Backing::Anon),
                    " file=/a\\040b" => assert_eq!(e.backing, Backing::File("/a b".into())),
                    _ => {
                        assert_eq!(e.backing, Backing::Heap);
                        assert!(e.huge);
                        assert_eq!(e.pages_on(NodeId(1)), Pages(2));
                    }
                }
            }
        }
    }

    #[test]
    fn a_policy_cut_by_the_kernel_buffer() {
        let evens: Vec<String> = (0..64).step_by(2).map(|n: u16| n.to_string()).collect();
        // "bind=static:0,2,...,34,36": 63 bytes; "36" may be the start of "360" as far as the
        // parser can tell, so only the ids before the last comma count.
        let full = format!("bind=static:{}", evens.join(","));
        let cut = &full[..MPOL_TEXT_MAX];
        assert!(cut.ends_with(",34,36"), "{cut}");
        let e = parse_numa_maps_line(&format!("1000 {cut} anon=1 N0=1")).unwrap();
        assert!(e.policy.truncated && e.policy.static_nodes);
        let whole: Vec<u16> = (0..=34).step_by(2).collect();
        assert_eq!(e.policy.policy.nodes, mask(&whole));
        assert_eq!(e.anon, Some(1));
        // "bind:0,...,38,40,": the trailing comma shows 40 was printed whole.
        let full = format!("bind:{}", evens.join(","));
        let cut = &full[..MPOL_TEXT_MAX];
        assert!(cut.ends_with("40,"), "{cut}");
        let e = parse_numa_maps_line(&format!("1000 {cut} N0=1")).unwrap();
        let whole: Vec<u16> = (0..=40).step_by(2).collect();
        assert_eq!(e.policy.policy.nodes, mask(&whole));
        // Cut right after a dash: still readable.
        let text = format!("bind:0-1,{}", "3,".repeat(27));
        let cut = format!("{}-", &text[..MPOL_TEXT_MAX - 1]);
        let e = parse_numa_maps_line(&format!("1000 {cut} N0=1")).unwrap();
        assert!(e.policy.truncated);
        assert!(e.policy.policy.nodes.contains(NodeId(1)));
        // A mode from a newer kernel, cut the same way: its last item is dropped as well.
        let cut = "weighted tiered interleave=relative|sticky:0-1,4,6-7,9-10,12,14";
        assert_eq!(cut.len(), MPOL_TEXT_MAX);
        let e = parse_numa_maps_line(&format!("1000 {cut} N0=1")).unwrap();
        assert_eq!(e.policy.policy.mode, PolicyMode::Unknown);
        assert!(e.policy.truncated && e.policy.relative_nodes);
        assert_eq!(e.policy.policy.nodes, mask(&[0, 1, 4, 6, 7, 9, 10, 12]));
        // Short policies are never marked.
        assert!(
            !parse_numa_maps_line("1000 bind:0-1")
                .unwrap()
                .policy
                .truncated
        );
    }

    #[test]
    fn tokens_of_a_line() {
        let e = parse_numa_maps_line(
            "7f1c2a000000 default file=/dev/shm/a\\040b huge dirty=2 mapmax=3 swapcache=1 \
             active=0 writeback=1 N0=1 N1=2 kernelpagesize_kB=2048",
        )
        .unwrap();
        assert_eq!(e.backing, Backing::File("/dev/shm/a b".into()));
        assert!(e.huge);
        assert_eq!(e.kernel_page_size_kb, Some(2048));
        assert_eq!(e.pages_on(NodeId(1)), Pages(1024));
        assert_eq!(e.total_pages(), Pages(1536));
        assert_eq!(e.writeback, Some(1));
        let e = parse_numa_maps_line("55a0 default heap anon=5 dirty=5 N1=5 kernelpagesize_kB=4")
            .unwrap();
        assert_eq!(e.backing, Backing::Heap);
        assert_eq!(e.pages_on(NodeId(1)), Pages(5));
        let e = parse_numa_maps_line("7ffc0 default stack future=1 newword").unwrap();
        assert_eq!(e.backing, Backing::Stack);
        assert_eq!(
            e.other,
            [
                ("future".into(), "1".into()),
                ("newword".into(), String::new())
            ]
        );
        // A VMA with no pages stops after the backing.
        let e = parse_numa_maps_line("7f00 bind:1 file=/x").unwrap();
        assert!(e.nodes.is_empty() && e.kernel_page_size_kb.is_none());
        assert!(parse_numa_maps_line("zz default").is_err());
        assert!(parse_numa_maps_line("1000 default anon=x").is_err());
        assert!(parse_numa_maps_line("1000 default N99=1").is_err());
    }

    #[test]
    fn maps_lines() {
        let m = parse_maps_line(
            "7f1c2a000000-7f1c2a400000 rw-s 00001000 00:1a 12345     /dev/shm/with space (deleted)",
        )
        .unwrap();
        assert_eq!((m.start, m.end), (0x7f1c_2a00_0000, 0x7f1c_2a40_0000));
        assert_eq!(m.perms, "rw-s");
        assert_eq!(m.offset, 0x1000);
        assert_eq!(m.dev, (0, 0x1a));
        assert_eq!(m.inode, 12345);
        assert_eq!(m.path.as_deref(), Some("/dev/shm/with space (deleted)"));
        let m = parse_maps_line("1000-2000 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!(m.path, None);
        assert!(parse_maps_line("2000-1000 rw-p 00000000 00:00 0").is_err());
        assert!(parse_maps_line("1000-2000 rw-p 00000000").is_err());
        assert!(parse_maps_line("1000-2000 rw-p 0 0000 0").is_err());
        let e = parse_maps("1000-2000 rw-p 00000000 00:00 0\nbad\n").unwrap_err();
        assert_eq!(e.line, 2);
    }

    #[test]
    fn join_gives_ranges_and_totals() {
        let numa = parse_numa_maps(
            "1000 bind:1 anon=2 dirty=2 N1=2 kernelpagesize_kB=4\n\
             5000 default anon=1 dirty=1 N0=1 kernelpagesize_kB=4\n\
             9000 prefer (many):0-1 anon=4 dirty=4 N0=1 N1=3 kernelpagesize_kB=4\n",
        )
        .unwrap();
        let maps = parse_maps("1000-3000 rw-p 00000000 00:00 0\n5000-6000 rw-p 00000000 00:00 0\n")
            .unwrap();
        let totals = numa.node_totals();
        assert_eq!(totals[&NodeId(0)], Pages(2));
        assert_eq!(totals[&NodeId(1)], Pages(5));
        let vmas = join_maps(numa, &maps);
        assert_eq!(vmas[0].end, Some(Vpn(3)));
        assert_eq!(vmas[2].end, None);
        let ranges = policy_ranges(&vmas);
        assert_eq!(ranges.len(), 1);
        assert_eq!((ranges[0].0, ranges[0].1), (Vpn(1), Vpn(3)));
        assert_eq!(ranges[0].2.mode, PolicyMode::Bind);
    }
}
