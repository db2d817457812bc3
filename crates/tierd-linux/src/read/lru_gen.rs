//! `/sys/kernel/debug/lru_gen`: the multi-gen LRU's generations per memcg and node.
//!
//! Format (mm/vmscan.c `lru_gen_seq_show()`, Documentation/admin-guide/mm/multigen_lru.rst):
//! for each memcg, a line `memcg ID PATH` (`%5hu` on 6.1-6.x, `%llu` since the id became
//! 64-bit; PATH is the cgroup's path, empty when memcg is disabled), then for each node with
//! memory ` node NID` (`%5d`), then one line per generation from the oldest evictable one to
//! `max_seq`: ` SEQ AGE_MS ANON FILE`, each size `%10lu` followed by a mark character, `x` in
//! the full file for a type whose `min_seq` is past that generation, a space otherwise. Kernels
//! before 6.2 printed `-0` instead of the size of such a type.
//!
//! The writable file takes commands (`+ MEMCG NID SEQ [SWAPPINESS [FORCE_SCAN]]` ages, `-`
//! evicts); [`aging_command`] spells the first.

use std::path::Path;

use tierd_engine::types::NodeId;

use super::{read_parsed, ParseError, ReadError};

/// One generation of one lruvec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generation {
    /// Its sequence number (`max_seq` for the youngest).
    pub seq: u64,
    /// Milliseconds since it was created (`jiffies_to_msecs(jiffies - birth)`).
    pub age_ms: u32,
    /// Anonymous pages in it (0 where the kernel printed `-0`).
    pub anon: u64,
    /// File pages in it.
    pub file: u64,
}

/// The generations of one memcg on one node, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lruvec {
    /// The node.
    pub node: NodeId,
    /// Oldest first; the last is `max_seq`.
    pub gens: Vec<Generation>,
}

impl Lruvec {
    /// The youngest generation's sequence number (`max_seq`), if any is printed.
    #[must_use]
    pub fn max_seq(&self) -> Option<u64> {
        self.gens.last().map(|g| g.seq)
    }
}

/// One memcg's lruvecs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memcg {
    /// The id the file prints and its commands take (`mem_cgroup_id()`, or the inode number
    /// on kernels that printed `mem_cgroup_ino()`).
    pub id: u64,
    /// The cgroup's path (`/` for the root), empty when memcg is disabled.
    pub path: String,
    /// One per node with memory.
    pub nodes: Vec<Lruvec>,
}

impl Memcg {
    /// The lruvec of `node`.
    #[must_use]
    pub fn node(&self, node: NodeId) -> Option<&Lruvec> {
        self.nodes.iter().find(|l| l.node == node)
    }
}

/// Parses the text of `/sys/kernel/debug/lru_gen`.
///
/// # Errors
///
/// A [`ParseError`] for a line that is none of the three kinds, a generation before any
/// node, a node before any memcg, or a number out of range.
pub fn parse_lru_gen(text: &str) -> Result<Vec<Memcg>, ParseError> {
    let mut out: Vec<Memcg> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        let err = |reason: String| ParseError::new(lineno, reason);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("memcg ") {
            let rest = rest.trim_start();
            // The path may hold spaces; it is everything after the id and one space.
            // A carriage return left at the end (a file without its last newline) is not part
            // of a path the kernel printed.
            let (id, path) = rest.split_once(' ').unwrap_or((rest, ""));
            let path = path.trim_end_matches('\r');
            let id = id
                .parse()
                .map_err(|_| err(format!("memcg id {id:?} is not a number")))?;
            out.push(Memcg {
                id,
                path: path.to_owned(),
                nodes: Vec::new(),
            });
            continue;
        }
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or("");
        if first == "node" {
            let memcg = out
                .last_mut()
                .ok_or_else(|| err("a node before any memcg".into()))?;
            let nid = fields.next().unwrap_or("");
            let node = nid
                .parse()
                .map(NodeId)
                .map_err(|_| err(format!("node id {nid:?} is not a number")))?;
            if let Some(extra) = fields.next() {
                return Err(err(format!("unexpected {extra:?} after the node id")));
            }
            memcg.nodes.push(Lruvec {
                node,
                gens: Vec::new(),
            });
            continue;
        }
        let lruvec = out
            .last_mut()
            .and_then(|m| m.nodes.last_mut())
            .ok_or_else(|| err(format!("{line:?} before any memcg and node")))?;
        let seq = first
            .parse()
            .map_err(|_| err(format!("generation {first:?} is not a number")))?;
        let age = fields.next().unwrap_or("");
        let age_ms = age
            .parse()
            .map_err(|_| err(format!("age {age:?} is not a number of ms")))?;
        let mut size = |what: &str| -> Result<u64, ParseError> {
            let f = fields.next().unwrap_or("");
            if f == "-0" {
                return Ok(0);
            }
            f.strip_suffix('x')
                .unwrap_or(f)
                .parse()
                .map_err(|_| err(format!("{what} size {f:?} is not a number")))
        };
        let anon = size("anon")?;
        let file = size("file")?;
        if let Some(extra) = fields.next() {
            return Err(err(format!("unexpected {extra:?} after the sizes")));
        }
        lruvec.gens.push(Generation {
            seq,
            age_ms,
            anon,
            file,
        });
    }
    Ok(out)
}

/// Reads and parses `<debugfs>/lru_gen`.
///
/// # Errors
///
/// A [`ReadError`] naming the path (missing without `CONFIG_LRU_GEN` or debugfs).
pub fn read_lru_gen(debugfs: &Path) -> Result<Vec<Memcg>, ReadError> {
    read_parsed(&debugfs.join("lru_gen"), parse_lru_gen)
}

/// The command that asks for one aging pass of `memcg` on `node`, whose youngest generation
/// is `max_seq` (mm/vmscan.c `run_aging()` -> `try_to_inc_max_seq()`): `swappiness` above
/// zero has the page-table walk include anonymous memory (`should_skip_vma()`), and
/// `force_scan` walks every page table, not only those the Bloom filter kept.
#[must_use]
pub fn aging_command(
    memcg: u64,
    node: NodeId,
    max_seq: u64,
    swappiness: u32,
    force_scan: bool,
) -> String {
    format!(
        "+ {memcg} {} {max_seq} {swappiness} {}\n",
        node.0,
        u8::from(force_scan)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As 6.12 prints it (two memcgs, two nodes, three and four generations).
    const SAMPLE: &str = "memcg     1 /
 node     0
          5       9120       1234        567 
          6       4000          0         12 
          7         30      65536          3 
 node     1
          5       9120          0          0 
          6       4000         10          0 
          7         30          0          0 
memcg     2 /sys fs/lab
 node     0
          3        100          7x         8 
          4         50          9          1 
";

    #[test]
    fn a_sample_parses_to_its_generations() {
        let m = parse_lru_gen(SAMPLE).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].id, m[0].path.as_str()), (1, "/"));
        let n0 = m[0].node(NodeId(0)).unwrap();
        assert_eq!(n0.max_seq(), Some(7));
        assert_eq!(
            n0.gens[2],
            Generation {
                seq: 7,
                age_ms: 30,
                anon: 65536,
                file: 3
            }
        );
        assert_eq!(m[0].node(NodeId(1)).unwrap().gens[1].anon, 10);
        assert_eq!(m[1].path, "/sys fs/lab");
        assert_eq!(m[1].nodes[0].gens[0].anon, 7);
    }

    #[test]
    fn what_the_lab_guest_printed_parses() {
        // 7.3.4+deb13-amd64 in lab A's guest, 2026-12-05 (memcg ids printed with `%llu`).
        let text = "memcg 1 /\n node     0\n          0       3316          0           0 \n          \
                    1       3316          0           0 \n          2       3316        521           0 \n          \
                    3       3316          0           0 \n node     1\n          0       3316          0           0 \n";
        let m = parse_lru_gen(text).unwrap();
        assert_eq!(m[0].id, 1);
        assert_eq!(m[0].node(NodeId(0)).unwrap().max_seq(), Some(3));
        assert_eq!(m[0].node(NodeId(0)).unwrap().gens[2].anon, 521);
        assert_eq!(m[0].node(NodeId(1)).unwrap().gens.len(), 1);
    }

    #[test]
    fn old_kernels_minus_zero_is_an_empty_type() {
        let m = parse_lru_gen("memcg 0 \n node 0\n 3 10 -0 5 \n").unwrap();
        assert_eq!(m[0].path, "");
        assert_eq!(m[0].nodes[0].gens[0].anon, 0);
        assert_eq!(m[0].nodes[0].gens[0].file, 5);
    }

    #[test]
    fn bad_lines_name_their_line() {
        for (text, line) in [
            (" node 0\n", 1),
            ("memcg 1 /\n 5 1 2 3\n", 2),
            ("memcg 1 /\n node 0\n 5 1 2\n", 3),
            ("memcg 1 /\n node 0\n 5 1 2 3 4\n", 3),
            ("memcg x /\n", 1),
            ("memcg 1 /\n node 0\n 5 -1 2 3\n", 3),
        ] {
            assert_eq!(parse_lru_gen(text).unwrap_err().line, line, "{text:?}");
        }
    }

    #[test]
    fn the_aging_command_is_what_run_cmd_parses() {
        assert_eq!(aging_command(1, NodeId(0), 7, 100, true), "+ 1 0 7 100 1\n");
    }
}
