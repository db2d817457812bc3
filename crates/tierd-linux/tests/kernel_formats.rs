//! Property tests: files generated the way the kernel prints them parse back to the values
//! they were printed from (not only without a panic).
//!
//! Each generator models the kernel's printing function, cited at the generator: numa_maps
//! and maps (fs/proc/task_mmu.c), policies (mm/mempolicy.c `mpol_to_str()`), meminfo and
//! vmstat, `/proc/PID/status` and `stat` (fs/proc/array.c), cgroup v2 files, `%*pbl` lists,
//! DAMON's region files (mm/damon/sysfs-schemes.c) and `damon_aggregated` trace lines, and
//! pagemap entries
//! (Documentation/admin-guide/mm/pagemap.rst).
//!
//! File names are arbitrary bytes (NUL and, in paths, nothing else excluded). The readers
//! decode `/proc` text as UTF-8 lossily (`read::read_text`), so a name's bytes that are not
//! UTF-8 come back as U+FFFD: the expected value is the lossy decoding of the name printed.
#![allow(clippy::tests_outside_test_module)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use proptest::prelude::*;
use tierd_engine::policy::PolicyMode;
use tierd_engine::types::{Bytes, Nanos, NodeId, NodeMask};
use tierd_linux::pagemap::decode_entries;
use tierd_linux::read::cgroup::{self, Limit};
use tierd_linux::read::numa_maps::{self, Backing};
use tierd_linux::read::{meminfo, parse_list, parse_nodelist, proc, vmstat};
use tierd_linux::source::damon;

/// `seq_file_path()`'s escaping (fs/seq_file.c `mangle_path()`): each byte of `esc` as `\ooo`.
fn escape(name: &[u8], esc: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for &b in name {
        if esc.contains(&b) {
            out.extend(format!("\\{b:03o}").bytes());
        } else {
            out.push(b);
        }
    }
    out
}

/// Whether a name holds a backslash that reads like one of the kernel's escapes: the printed
/// form cannot be told from the escape (the kernel does not escape `\`), so such names cannot
/// round-trip and are left out.
fn ambiguous(name: &[u8], esc: &[u8]) -> bool {
    name.windows(4).any(|w| {
        w[0] == b'\\'
            && esc
                .iter()
                .any(|&e| w[1..] == *format!("{e:03o}").as_bytes())
    })
}

/// What the reader gives back for a printed name: the lossy UTF-8 decoding.
fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A file name: bytes, no NUL (a path cannot hold one); any other byte, `\n`, `\t`, `\r`,
/// `\x0b`, spaces, `=`, UTF-8 no-break spaces and invalid UTF-8 included.
fn arb_name() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        4 => b'!'..=b'~',
        2 => prop::sample::select(b"\n\t\r\x0b\x0c =\\/".to_vec()),
        1 => 0x80u8..=0xff,
        1 => 1u8..0x20,
    ];
    let chunk = prop_oneof![
        4 => byte.prop_map(|b| vec![b]),
        1 => Just("\u{a0}".as_bytes().to_vec()),
        1 => Just("\u{2003}".as_bytes().to_vec()),
        1 => Just(" anon=1 N0=".as_bytes().to_vec()),
    ];
    prop::collection::vec(chunk, 0..24).prop_map(|v| {
        let mut name = b"/".to_vec();
        name.extend(v.into_iter().flatten());
        name
    })
}

/// A policy as `mpol_to_str()` prints it, with what it must parse to: mode, nodes, static,
/// relative, balancing. Unknown modes are a newer kernel's names (spaces and parentheses
/// included) or the kernel's own `unknown`; unknown flags likewise.
#[derive(Clone, Debug)]
struct Policy {
    text: String,
    mode: PolicyMode,
    nodes: NodeMask,
    flags: (bool, bool, bool),
}

fn known_name(mode: PolicyMode) -> &'static str {
    match mode {
        PolicyMode::Default => "default",
        PolicyMode::Preferred => "prefer",
        PolicyMode::PreferredMany => "prefer (many)",
        PolicyMode::Bind => "bind",
        PolicyMode::Interleave => "interleave",
        PolicyMode::WeightedInterleave => "weighted interleave",
        PolicyMode::Local => "local",
        PolicyMode::Unknown => "unknown",
    }
}

fn arb_policy() -> impl Strategy<Value = Policy> {
    let mode = prop::sample::select(vec![
        PolicyMode::Default,
        PolicyMode::Preferred,
        PolicyMode::PreferredMany,
        PolicyMode::Bind,
        PolicyMode::Interleave,
        PolicyMode::WeightedInterleave,
        PolicyMode::Local,
        PolicyMode::Unknown,
    ]);
    let new_name = prop::sample::select(vec![
        "unknown",
        "tiered",
        "weighted tiered interleave",
        "prefer (few)",
        "bindx",
    ]);
    let new_flag = prop::option::weighted(0.2, prop::sample::select(vec!["sticky", "future"]));
    (
        mode,
        new_name,
        any::<(bool, bool, bool)>(),
        new_flag,
        1u64..=0xffff,
    )
        .prop_map(|(mode, new_name, (stat, rel, bal), new_flag, bits)| {
            // mpol_to_str(): no nodes for default and local (MPOL_DEFAULT/MPOL_LOCAL print
            // none), one node for prefer; `=` only with a mode flag; static and relative are
            // exclusive; `|` only between two flags.
            let nodes = match mode {
                PolicyMode::Default | PolicyMode::Local => NodeMask::EMPTY,
                PolicyMode::Preferred => NodeMask(1 << bits.trailing_zeros()),
                _ => NodeMask(bits),
            };
            let stat = stat && !matches!(mode, PolicyMode::Default | PolicyMode::Local);
            let rel = rel && !stat && !matches!(mode, PolicyMode::Default | PolicyMode::Local);
            let bal = bal && matches!(mode, PolicyMode::Bind | PolicyMode::PreferredMany);
            let mut text = if mode == PolicyMode::Unknown {
                new_name.to_owned()
            } else {
                known_name(mode).to_owned()
            };
            let mut flags: Vec<&str> = Vec::new();
            if stat {
                flags.push("static");
            } else if rel {
                flags.push("relative");
            }
            if bal {
                flags.push("balancing");
            }
            let unknown_flag = new_flag.filter(|_| mode != PolicyMode::Default);
            flags.extend(unknown_flag);
            if !flags.is_empty() {
                text.push('=');
                text.push_str(&flags.join("|"));
            }
            let mut nodes = nodes;
            if !nodes.is_empty() {
                text.push(':');
                text.push_str(&nodes.to_string());
            }
            // show_numa_map() prints into `char buffer[64]`: mpol_to_str() cuts a longer text
            // to 63 bytes. A text of 63 bytes may have been cut, so only the node items
            // before its last comma are known whole (the parser's rule, and the kernel's
            // output as a reader sees it). Every prefix here is under 63 bytes: the cut falls
            // in the node list.
            if text.len() >= MPOL_TEXT_MAX {
                text.truncate(MPOL_TEXT_MAX);
                let list = text.rsplit_once(':').map_or("", |(_, l)| l);
                let whole = list.rfind(',').map_or("", |c| &list[..c]);
                // parse_nodelist is checked on every printed mask (readers.rs).
                nodes = parse_nodelist(whole).expect("whole items of a printed list");
            }
            let mode = if unknown_flag.is_some() {
                PolicyMode::Unknown
            } else {
                mode
            };
            Policy {
                text,
                mode,
                nodes,
                flags: (stat, rel, bal),
            }
        })
}

/// The longest policy text `show_numa_map()` prints (`char buffer[64]`, less the NUL).
const MPOL_TEXT_MAX: usize = 63;

/// The per-VMA statistics `show_numa_map()` prints, in its order and under its conditions.
#[derive(Clone, Debug)]
struct Counts {
    anon: u64,
    dirty: u64,
    pages: u64,
    mapmax: u64,
    swapcache: u64,
    active: u64,
    writeback: u64,
    nodes: BTreeMap<u16, u64>,
}

fn arb_counts() -> impl Strategy<Value = Counts> {
    (
        prop::collection::btree_map(0u16..64, 1u64..1 << 40, 0..5),
        any::<[u64; 6]>(),
    )
        .prop_map(|(nodes, r)| {
            let pages: u64 = nodes.values().sum();
            let upto = |x: u64| if pages == 0 { 0 } else { x % (pages + 1) };
            Counts {
                anon: upto(r[0]),
                dirty: upto(r[1]),
                pages,
                mapmax: r[2] % 5,
                swapcache: upto(r[3]),
                active: upto(r[4]),
                writeback: upto(r[5]),
                nodes,
            }
        })
}

/// The backing token of a line: `file=<escaped name>`, `heap`, `stack`, or none.
#[derive(Clone, Debug)]
enum Back {
    File(Vec<u8>),
    Heap,
    Stack,
    Anon,
}

fn arb_back() -> impl Strategy<Value = Back> {
    prop_oneof![
        4 => arb_name().prop_map(Back::File),
        1 => Just(Back::Heap),
        1 => Just(Back::Stack),
        1 => Just(Back::Anon),
    ]
}

/// One line as fs/proc/task_mmu.c `show_numa_map()` prints it.
fn numa_maps_line(start: u64, pol: &Policy, back: &Back, huge: bool, c: &Counts) -> Vec<u8> {
    let mut l = format!("{start:08x} {}", pol.text).into_bytes();
    match back {
        Back::File(name) => {
            l.extend(b" file=");
            l.extend(escape(name, b"\n\t= "));
        }
        Back::Heap => l.extend(b" heap"),
        Back::Stack => l.extend(b" stack"),
        Back::Anon => {}
    }
    if huge {
        l.extend(b" huge");
    }
    if c.pages > 0 {
        let mut s = String::new();
        if c.anon > 0 {
            s += &format!(" anon={}", c.anon);
        }
        if c.dirty > 0 {
            s += &format!(" dirty={}", c.dirty);
        }
        if c.pages != c.anon && c.pages != c.dirty {
            s += &format!(" mapped={}", c.pages);
        }
        if c.mapmax > 1 {
            s += &format!(" mapmax={}", c.mapmax);
        }
        if c.swapcache > 0 {
            s += &format!(" swapcache={}", c.swapcache);
        }
        if c.active < c.pages && !huge {
            s += &format!(" active={}", c.active);
        }
        if c.writeback > 0 {
            s += &format!(" writeback={}", c.writeback);
        }
        for (n, p) in &c.nodes {
            s += &format!(" N{n}={p}");
        }
        s += &format!(" kernelpagesize_kB={}", if huge { 2048 } else { 4 });
        l.extend(s.bytes());
    }
    l
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(384))]

    /// Every field of a numa_maps line, every policy form (unknown ones included) and file
    /// names of any bytes parse back to what was printed.
    #[test]
    fn numa_maps_lines_parse_to_what_the_kernel_printed(
        start in 0u64..(1 << 57),
        pol in arb_policy(),
        back in arb_back(),
        huge in any::<bool>(),
        c in arb_counts(),
        lines in 1usize..3,
    ) {
        if let Back::File(name) = &back {
            prop_assume!(!ambiguous(name, b"\n\t= "));
        }
        let line = numa_maps_line(start, &pol, &back, huge, &c);
        let mut file = Vec::new();
        for _ in 0..lines {
            file.extend(&line);
            file.push(b'\n');
        }
        let text = lossy(&file);
        let parsed = numa_maps::parse_numa_maps(&text)
            .map_err(|e| TestCaseError::fail(format!("{e} in {text:?}")))?;
        prop_assert_eq!(parsed.entries.len(), lines);
        let e = &parsed.entries[0];
        prop_assert_eq!(e.start, start);
        prop_assert_eq!(e.policy.policy.mode, pol.mode, "{}", pol.text);
        prop_assert_eq!(e.policy.policy.nodes, pol.nodes, "{}", pol.text);
        prop_assert_eq!(e.policy.static_nodes, pol.flags.0);
        prop_assert_eq!(e.policy.relative_nodes, pol.flags.1);
        prop_assert_eq!(e.policy.policy.numa_balancing, pol.flags.2);
        let want = match &back {
            Back::File(name) => Backing::File(lossy(name)),
            Back::Heap => Backing::Heap,
            Back::Stack => Backing::Stack,
            Back::Anon => Backing::Anon,
        };
        prop_assert_eq!(&e.backing, &want);
        prop_assert_eq!(e.huge, huge);
        let nz = |v: u64| (c.pages > 0 && v > 0).then_some(v);
        prop_assert_eq!(e.anon, nz(c.anon));
        prop_assert_eq!(e.dirty, nz(c.dirty));
        prop_assert_eq!(e.mapped, (c.pages > 0 && c.pages != c.anon && c.pages != c.dirty).then_some(c.pages));
        prop_assert_eq!(e.mapmax, (c.pages > 0 && c.mapmax > 1).then_some(c.mapmax));
        prop_assert_eq!(e.swapcache, nz(c.swapcache));
        prop_assert_eq!(e.active, (c.pages > 0 && c.active < c.pages && !huge).then_some(c.active));
        prop_assert_eq!(e.writeback, nz(c.writeback));
        let nodes: BTreeMap<NodeId, u64> = c.nodes.iter().map(|(&n, &p)| (NodeId(n), p)).collect();
        prop_assert_eq!(&e.nodes, &nodes);
        prop_assert_eq!(e.kernel_page_size_kb, (c.pages > 0).then_some(if huge { 2048 } else { 4 }));
        prop_assert!(e.other.is_empty(), "{:?}", e.other);
    }

    /// maps lines as `show_map_vma()` prints them: the header padded to its column, then a
    /// file path (newline escaped, nothing else, ` (deleted)` possibly appended) or a
    /// pseudo-name, or nothing.
    #[test]
    fn maps_lines_parse_to_what_the_kernel_printed(
        start in 0u64..(1 << 47),
        len in 1u64..(1 << 30),
        perms in prop::sample::select(vec!["r--p", "rw-p", "r-xp", "rw-s", "---p", "rwxs"]),
        offset in any::<u32>(),
        dev in (0u32..0x1000, 0u32..0x100000),
        inode in any::<u64>(),
        name in prop_oneof![
            3 => arb_name().prop_map(Some),
            1 => prop::sample::select(vec!["[heap]", "[stack]", "[vdso]", "[vvar]", "[vsyscall]",
                "[anon:tenant a]", "[anon_shmem:x y]", "/memfd:buf (deleted)"])
                .prop_map(|s| Some(s.as_bytes().to_vec())),
            1 => Just(None),
        ],
    ) {
        if let Some(n) = &name {
            prop_assume!(!ambiguous(n, b"\n"));
        }
        let end = start + len * 4096;
        // show_vma_header_prefix(): seq_put_hex_ll(.., 8) pads hex to 8 digits, the device to
        // 2; the line is padded (seq_pad) to 25 + 6 * sizeof(void *) - 1 = 72 columns before
        // a name.
        let mut l = format!(
            "{start:08x}-{end:08x} {perms} {offset:08x} {:02x}:{:02x} {inode} ",
            dev.0, dev.1
        )
        .into_bytes();
        if let Some(n) = &name {
            while l.len() < 72 {
                l.push(b' ');
            }
            l.extend(escape(n, b"\n"));
        }
        l.push(b'\n');
        let text = lossy(&l);
        let m = numa_maps::parse_maps(&text)
            .map_err(|e| TestCaseError::fail(format!("{e} in {text:?}")))?;
        prop_assert_eq!(m.len(), 1);
        let m = &m[0];
        prop_assert_eq!((m.start, m.end), (start, end));
        prop_assert_eq!(m.perms.as_str(), perms);
        prop_assert_eq!(m.offset, u64::from(offset));
        prop_assert_eq!(m.dev, dev);
        prop_assert_eq!(m.inode, inode);
        prop_assert_eq!(m.path.clone(), name.map(|n| lossy(&n)));
    }

    /// /proc/meminfo (`%-16s%8lu kB` style, fs/proc/meminfo.c show_val_kb()) and a node's
    /// meminfo (`Node %d %s:%8lu kB`, drivers/base/node.c node_read_meminfo()).
    #[test]
    fn meminfo_parses_to_what_was_printed(
        vals in prop::collection::btree_map(
            "(Mem|Swap|Active\\(anon\\)|Inactive\\(file\\)|HugePages_|Direct)[A-Za-z0-9_]{0,12}",
            (0u64..1 << 50, any::<bool>()),
            1..20,
        ),
        node in 0u16..64,
    ) {
        let mut sys = String::new();
        let mut per_node = String::new();
        for (k, (v, kb)) in &vals {
            let unit = if *kb { " kB" } else { "" };
            sys += &format!("{:<16}{v:>8}{unit}\n", format!("{k}:"));
            per_node += &format!("Node {node} {k}:{v:>15}{unit}\n");
        }
        let want: BTreeMap<String, u64> = vals.iter()
            .map(|(k, (v, kb))| (k.clone(), if *kb { v * 1024 } else { *v }))
            .collect();
        prop_assert_eq!(meminfo::parse_meminfo(&sys).unwrap().entries, want.clone());
        prop_assert_eq!(meminfo::parse_node_meminfo(&per_node, NodeId(node)).unwrap().entries, want);
        // Another node's file is refused, not misread.
        prop_assert!(meminfo::parse_node_meminfo(&per_node, NodeId(node + 1)).is_err());
    }

    /// vmstat (`%s %lu`, mm/vmstat.c vmstat_show()) and cgroup flat-keyed files
    /// (memory.stat) parse to their counters.
    #[test]
    fn vmstat_and_memory_stat_parse_to_their_counters(
        vals in prop::collection::btree_map("[a-z][a-z0-9_]{0,30}", any::<u64>(), 0..40),
    ) {
        let text: String = vals.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
        prop_assert_eq!(&vmstat::parse_vmstat(&text).unwrap().counters, &vals);
        prop_assert_eq!(&cgroup::parse_flat_keyed(&text).unwrap(), &vals);
    }

    /// memory.numa_stat (`%s N%d=%llu ...`, mm/memcontrol.c memory_numa_stat_show()),
    /// cgroup.procs (one pid a line), memory.max/low (`max` or bytes).
    #[test]
    fn cgroup_files_parse_to_what_was_printed(
        stat in prop::collection::btree_map(
            "[a-z][a-z_]{0,20}",
            prop::collection::btree_map(0u16..64, any::<u64>(), 0..6),
            0..12,
        ),
        pids in prop::collection::vec(1u32..=4_194_304, 0..30),
        limit in prop::option::of(any::<u64>()),
    ) {
        let mut text = String::new();
        for (k, per) in &stat {
            text += k;
            for (n, v) in per {
                text += &format!(" N{n}={v}");
            }
            text.push('\n');
        }
        let parsed = cgroup::parse_numa_stat(&text).unwrap();
        for (k, per) in &stat {
            for (n, v) in per {
                prop_assert_eq!(parsed.get(k, NodeId(*n)), Some(*v));
            }
            prop_assert_eq!(parsed.entries[k].len(), per.len());
        }
        let procs: String = pids.iter().map(|p| format!("{p}\n")).collect();
        prop_assert_eq!(cgroup::parse_pids(&procs).unwrap(), pids);
        let (text, want) = match limit {
            Some(b) => (format!("{b}\n"), Limit::Bytes(Bytes(b))),
            None => ("max\n".to_owned(), Limit::Max),
        };
        prop_assert_eq!(cgroup::parse_limit(&text).unwrap(), want);
    }

    /// /proc/PID/cgroup (`%d:%s:%s`, kernel/cgroup/cgroup.c proc_cgroup_show()): the path
    /// printed raw, so any byte a cgroup name may hold but `/`, NUL and newline (which would
    /// split the line: the kernel does not escape it), and ` (deleted)` for a removed one.
    #[test]
    fn proc_cgroup_parses_to_what_was_printed(
        v1 in prop::collection::vec(
            (1u32..20, prop::collection::vec("[a-z_]{1,10}", 1..3), "(/[^/\n\0]{1,12}){0,3}"), 0..4),
        v2 in "(/[^/\n\0]{1,12}){0,4}( \\(deleted\\))?",
    ) {
        let mut text = String::new();
        for (id, ctl, path) in &v1 {
            let path = if path.is_empty() { "/" } else { path };
            text += &format!("{id}:{}:{path}\n", ctl.join(","));
        }
        let v2 = if v2.is_empty() { "/".to_owned() } else { v2 };
        text += &format!("0::{v2}\n");
        let m = cgroup::parse_proc_cgroup(&text).unwrap();
        prop_assert_eq!(m.len(), v1.len() + 1);
        let last = m.last().unwrap();
        prop_assert_eq!(last.hierarchy, 0);
        prop_assert!(last.controllers.is_empty());
        prop_assert_eq!(&last.path, &v2);
        for (got, (id, ctl, _)) in m.iter().zip(&v1) {
            prop_assert_eq!(got.hierarchy, *id);
            prop_assert_eq!(&got.controllers, ctl);
        }
    }

    /// /proc/PID/status and stat with any comm (fs/proc/array.c): status escapes `\n` and
    /// `\` in `Name:` (proc_task_name(.., true)); stat prints it raw inside parentheses.
    #[test]
    fn status_and_stat_give_back_any_comm(
        comm in prop::collection::vec(
            prop_oneof![4 => b' '..=b'~', 1 => prop::sample::select(b"()\n\t\r\\ ".to_vec()),
                1 => 0x80u8..=0xff], 0..15),
        pid in 1u32..=4_194_304,
        cpus in prop::collection::btree_set(0u32..512, 1..20),
        mems in 1u64..,
        utime in any::<u64>(),
        stime in any::<u64>(),
    ) {
        let mut name = Vec::new();
        for &b in &comm {
            match b {
                b'\n' => name.extend(b"\\n"),
                b'\\' => name.extend(b"\\\\"),
                b => name.push(b),
            }
        }
        let cpulist = list_string(&cpus);
        let mut status = b"Name:\t".to_vec();
        status.extend(&name);
        status.extend(format!(
            "\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nNgid:\t0\nPid:\t{pid}\n\
             Cpus_allowed_list:\t{cpulist}\nMems_allowed:\t{mems:x}\nMems_allowed_list:\t{}\n",
            NodeMask(mems)
        ).bytes());
        let s = proc::parse_status(&lossy(&status)).unwrap();
        prop_assert_eq!(&s.name, &lossy(&comm));
        prop_assert_eq!(s.tgid, pid);
        prop_assert_eq!(s.cpus_allowed, cpus.iter().copied().collect::<Vec<_>>());
        prop_assert_eq!(s.mems_allowed, NodeMask(mems));

        let mut stat = format!("{pid} (").into_bytes();
        stat.extend(&comm);
        stat.extend(format!(
            ") S 1 {pid} {pid} 0 -1 4194560 100 0 0 0 {utime} {stime} 0 0 20 0 1 0 12345 \
             1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n"
        ).bytes());
        let st = proc::parse_stat(&lossy(&stat)).unwrap();
        prop_assert_eq!(st.pid, pid);
        prop_assert_eq!(&st.comm, &lossy(&comm));
        prop_assert_eq!(st.state, 'S');
        prop_assert_eq!((st.utime_ticks, st.stime_ticks), (utime, stime));
        // The same line as a thread's task/TID/stat: field 39, the last CPU, is 3.
        let task = tierd_linux::read::task::parse_task_stat(&lossy(&stat)).unwrap();
        prop_assert_eq!((task.tid, task.state, task.processor), (pid, 'S', 3));
        prop_assert_eq!(task.cpu_ticks, utime.saturating_add(stime));
    }

    /// `%*pbl` lists (lib/vsprintf.c bitmap_list_string(): ascending ids, runs as `a-b`) of
    /// CPUs up to 8191 parse to the set printed.
    #[test]
    fn cpu_lists_parse_to_the_set(ids in prop::collection::btree_set(0u32..8192, 0..300)) {
        prop_assert_eq!(parse_list(&format!("{}\n", list_string(&ids))).unwrap(),
            ids.iter().copied().collect::<Vec<_>>());
    }

    /// DAMON's tried regions (mm/damon/sysfs-schemes.c: one directory per region, numbered
    /// from 0, each `start`, `end`, `nr_accesses`, `age` as `%lu\n`; `total_bytes` beside
    /// them) read back as the regions, in address order.
    #[test]
    fn damon_tried_regions_read_back(
        regions in prop::collection::vec((any::<u64>(), 1u64..1 << 30, 0u64..=20, any::<u32>()), 0..20),
        pid in 1u32..,
    ) {
        let dir = PathBuf::from("/s/tried_regions");
        let mut fs = damon::MemFs::default();
        let mut names = vec!["total_bytes".to_owned()];
        fs.files.insert(dir.join("total_bytes"), "0\n".into());
        for (i, (start, len, nr, age)) in regions.iter().enumerate() {
            let r = dir.join(i.to_string());
            names.push(i.to_string());
            fs.files.insert(r.join("start"), format!("{start}\n"));
            fs.files.insert(r.join("end"), format!("{}\n", start.saturating_add(*len)));
            fs.files.insert(r.join("nr_accesses"), format!("{nr}\n"));
            fs.files.insert(r.join("age"), format!("{age}\n"));
        }
        // The directory lists in any order; regions come back numbered.
        names.reverse();
        fs.dirs.insert(dir.clone(), names);
        let got = damon::read_tried_regions(&fs, &dir, pid, Nanos(9)).unwrap();
        prop_assert_eq!(got.len(), regions.len());
        for (g, (start, len, nr, age)) in got.iter().zip(&regions) {
            prop_assert_eq!((g.start, g.end), (*start, start.saturating_add(*len)));
            prop_assert_eq!((g.nr_accesses, g.age), (*nr, u64::from(*age)));
            prop_assert_eq!((g.pid, g.time), (pid, Nanos(9)));
        }
    }

    /// DAMON's `damon_aggregated` events as trace_pipe prints them (kernel/trace/
    /// trace_output.c `trace_print_context()`: `%16s-%-7d`, with `(%7d) ` under
    /// `record-tgid`, `[%03d]`, the irq flags, `%5lu.%06lu: `; the event's `TP_printk` in
    /// include/trace/events/damon.h), read in chunks cut anywhere, come back as the regions
    /// of each target's aggregation, whatever the task's comm holds.
    #[test]
    fn damon_aggregated_lines_read_back_as_whole_aggregations(
        comm in "[a-z0-9 ()\\[\\]._-]{1,15}",
        task in 1u32..4_194_304,
        tgid in any::<bool>(),
        cpu in 0u32..4096,
        targets in prop::collection::vec(
            prop::collection::vec((1u64..1 << 20, 0u32..=20, any::<u32>()), 1..12), 1..4),
        base in 0u64..1 << 46,
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        use tierd_linux::source::damon_trace::{feed_text, Assembler};
        let mut text = String::new();
        for (ti, regions) in targets.iter().enumerate() {
            let mut at = base;
            for (len, nr, age) in regions {
                let tg = if tgid { format!("({task:>7}) ") } else { String::new() };
                text.push_str(&format!(
                    "{comm:>16}-{task:<7} {tg}[{cpu:03}] d..2. {:>5}.{:06}: damon_aggregated: \
                     target_id={ti} nr_regions={} {}-{}: {nr} {age}\n",
                    12, 345, regions.len(), at << 12, (at + len) << 12
                ));
                at += len;
            }
        }
        let mut idx: Vec<usize> = cuts.iter().map(|c| c.index(text.len() + 1)).collect();
        idx.push(text.len());
        idx.sort_unstable();
        let mut asm = Assembler::default();
        let mut pending = String::new();
        let mut from = 0;
        for to in idx {
            feed_text(&mut asm, &mut pending, &text[from..to], task);
            from = to;
        }
        let got = asm.take();
        prop_assert!(pending.is_empty());
        prop_assert_eq!(got.len(), targets.len());
        for (ti, regions) in targets.iter().enumerate() {
            let evs = &got[&(ti as u64)];
            prop_assert_eq!(evs.len(), regions.len());
            let mut at = base;
            for (e, (len, nr, age)) in evs.iter().zip(regions) {
                prop_assert_eq!((e.start, e.end), (at << 12, (at + len) << 12));
                prop_assert_eq!((e.nr_accesses, e.age, e.task_pid), (*nr, *age, task));
                at += len;
            }
        }
        prop_assert_eq!(asm.stats().malformed + asm.stats().partial, 0);
    }

    /// pagemap entries as pagemap_read() builds them (PM_PFRAME_BITS 55, PM_SOFT_DIRTY 55,
    /// PM_MMAP_EXCLUSIVE 56, PM_UFFD_WP 57, PM_FILE 61, PM_SWAP 62, PM_PRESENT 63; a swap
    /// entry's type in bits 0-4 and offset above) decode to their fields.
    #[test]
    fn pagemap_entries_decode_to_their_fields(
        entries in prop::collection::vec(
            (0u8..3, 0u64..1 << 55, 0u8..32, 0u64..1 << 50, any::<[bool; 4]>()), 0..64),
    ) {
        let mut raw = Vec::new();
        for (kind, pfn, ty, off, [sd, ex, wp, file]) in &entries {
            let mut v = match kind {
                0 => 0,
                1 => (1 << 63) | pfn,
                _ => (1 << 62) | (off << 5) | u64::from(*ty),
            };
            v |= u64::from(*sd) << 55 | u64::from(*ex) << 56 | u64::from(*wp) << 57
                | u64::from(*file) << 61;
            raw.extend(v.to_ne_bytes());
        }
        let got = decode_entries(&raw).unwrap();
        prop_assert_eq!(got.len(), entries.len());
        for (e, (kind, pfn, ty, off, [sd, ex, wp, file])) in got.iter().zip(&entries) {
            prop_assert_eq!(e.present(), *kind == 1);
            prop_assert_eq!(e.swapped(), *kind == 2);
            prop_assert_eq!(e.pfn().map(|p| p.0), (*kind == 1 && *pfn != 0).then_some(*pfn));
            prop_assert_eq!(e.swap_type(), (*kind == 2).then_some(*ty));
            prop_assert_eq!(e.swap_offset(), (*kind == 2).then_some(*off));
            prop_assert_eq!((e.soft_dirty(), e.exclusive(), e.uffd_wp(), e.file_or_shared_anon()),
                (*sd, *ex, *wp, *file));
        }
        prop_assert!(decode_entries(&raw[..raw.len().saturating_sub(3)]).is_err() || raw.is_empty());
    }
}

/// `bitmap_list_string()`: ascending ids, runs of two or more as `a-b`, joined by commas.
fn list_string(ids: &BTreeSet<u32>) -> String {
    let mut parts = Vec::new();
    let mut it = ids.iter().copied().peekable();
    while let Some(a) = it.next() {
        let mut b = a;
        while it.peek() == Some(&(b + 1)) {
            b = it.next().unwrap_or(b);
        }
        parts.push(if a == b {
            a.to_string()
        } else {
            format!("{a}-{b}")
        });
    }
    parts.join(",")
}

/// One VMA of a generated smaps file: header fields, which known kB keys the kernel printed
/// (a kernel version drops some: `Pss_Dirty` is 6.0+, `KSM` 6.7+, `FilePmdMapped` 5.4+), their
/// values, unknown keys and where they go, `THPeligible` and its form, the protection key
/// and the flags.
#[derive(Clone, Debug)]
struct SmapsGen {
    start: u64,
    pages: u64,
    name: Option<Vec<u8>>,
    kb: Vec<Option<u64>>,
    unknown: Vec<(usize, String, u64)>,
    thp: Option<(bool, bool)>,
    pkey: Option<u32>,
    flags: Vec<&'static str>,
}

fn arb_smaps_vma() -> impl Strategy<Value = SmapsGen> {
    use tierd_linux::read::smaps::KB_KEYS;
    (
        (0u64..(1 << 35), 1u64..(1 << 18)),
        prop_oneof![3 => arb_name().prop_map(Some), 1 => Just(None)],
        prop::collection::vec(prop::option::weighted(0.85, 0u64..(1 << 40)), KB_KEYS.len()),
        prop::collection::vec(
            (
                0..=KB_KEYS.len(),
                "(AnonCont|FileCont|Pss_)[A-Za-z0-9_]{1,8}",
                any::<u64>(),
            ),
            0..3,
        ),
        prop::option::of((any::<bool>(), any::<bool>())),
        prop::option::of(0u32..16),
        prop::sample::subsequence(
            vec![
                "rd", "wr", "ex", "sh", "mr", "mw", "me", "ms", "gd", "pf", "lo", "io", "sr", "rr",
                "dc", "de", "ac", "nr", "ht", "sf", "ar", "wf", "dd", "mm", "hg", "nh", "mg", "um",
                "uw", "ss", "sl",
            ],
            0..8,
        ),
    )
        .prop_map(
            |((start, pages), name, kb, unknown, thp, pkey, flags)| SmapsGen {
                start,
                pages,
                name,
                kb,
                unknown,
                thp,
                pkey,
                flags,
            },
        )
}

/// `show_smap()` (fs/proc/task_mmu.c): `show_map_vma()`'s header, `SEQ_PUT_DEC()` lines
/// (`seq_put_decimal_ull_width(m, "Key:   ", kB, 8)`, the key and at least one space in 16
/// columns, except `Private_Hugetlb: ` at width 7), `THPeligible:    %d` (older kernels: `THPeligible:\t\t%d`),
/// `ProtectionKey:  %8u`, and `VmFlags:` with each two-letter flag followed by a space.
fn smaps_text(g: &SmapsGen) -> Vec<u8> {
    use tierd_linux::read::smaps::KB_KEYS;
    let end = g.start + g.pages;
    let mut l = format!(
        "{:08x}-{:08x} rw-p 00000000 00:00 0 ",
        g.start << 12,
        end << 12
    )
    .into_bytes();
    if let Some(n) = &g.name {
        while l.len() < 72 {
            l.push(b' ');
        }
        l.extend(escape(n, b"\n"));
    }
    l.push(b'\n');
    let unknown_at = |i: usize, l: &mut Vec<u8>| {
        for (at, k, v) in &g.unknown {
            if *at == i {
                l.extend(format!("{:<15} {v:>8} kB\n", format!("{k}:")).bytes());
            }
        }
    };
    for (i, key) in KB_KEYS.iter().enumerate() {
        unknown_at(i, &mut l);
        if let Some(v) = g.kb[i] {
            if *key == "Private_Hugetlb" {
                l.extend(format!("Private_Hugetlb: {v:>7} kB\n").bytes());
            } else {
                l.extend(format!("{:<15} {v:>8} kB\n", format!("{key}:")).bytes());
            }
        }
    }
    unknown_at(KB_KEYS.len(), &mut l);
    if let Some((eligible, tabs)) = g.thp {
        let sep = if tabs { ":\t\t" } else { ":    " };
        l.extend(format!("THPeligible{sep}{}\n", u8::from(eligible)).bytes());
    }
    if let Some(k) = g.pkey {
        l.extend(format!("ProtectionKey:  {k:>8}\n").bytes());
    }
    l.extend(b"VmFlags: ");
    for f in &g.flags {
        l.extend(format!("{f} ").bytes());
    }
    l.push(b'\n');
    l
}

proptest! {
    /// smaps files as `show_smap()` prints them, any subset of the known keys in the kernel's
    /// order, keys it does not know anywhere among them: the known values come back, the
    /// unknown keys are skipped.
    #[test]
    fn smaps_parses_to_what_the_kernel_printed(
        vmas in prop::collection::vec(arb_smaps_vma(), 1..5),
    ) {
        use tierd_linux::read::smaps::{parse_smaps, SmapsCounters, KB_KEYS};
        for g in &vmas {
            if let Some(n) = &g.name {
                prop_assume!(!ambiguous(n, b"\n"));
            }
        }
        let mut raw = Vec::new();
        for g in &vmas {
            raw.extend(smaps_text(g));
        }
        let text = lossy(&raw);
        let got = parse_smaps(&text).map_err(|e| TestCaseError::fail(format!("{e} in {text:?}")))?;
        prop_assert_eq!(got.len(), vmas.len());
        for (v, g) in got.iter().zip(&vmas) {
            prop_assert_eq!((v.vma.start, v.vma.end), (g.start << 12, (g.start + g.pages) << 12));
            prop_assert_eq!(v.vma.path.clone(), g.name.as_ref().map(|n| lossy(n)));
            let mut want = SmapsCounters::default();
            for (key, val) in KB_KEYS.iter().zip(&g.kb) {
                if let Some(f) = want.field_mut(key) {
                    *f = *val;
                }
            }
            prop_assert_eq!(&v.kb, &want);
            prop_assert_eq!(v.thp_eligible, g.thp.map(|t| t.0));
            prop_assert_eq!(v.protection_key, g.pkey);
            let flags: Vec<String> = g.flags.iter().map(|f| (*f).to_owned()).collect();
            prop_assert_eq!(v.vm_flags.clone(), Some(flags));
            prop_assert_eq!(v.is_hugetlb(), g.flags.contains(&"ht")
                || g.kb[1].is_some_and(|k| k != 4));
            let pmd: u64 = [14, 15, 16].iter().map(|&i| g.kb[i].unwrap_or(0)).sum();
            prop_assert_eq!(v.pmd_mapped_kb(), pmd);
        }
    }

    /// kpageflags entries decode to the bits they were written with, and a folio table
    /// written the way `stable_page_flags()` marks folios (a head, then tails; `KPF_THP` or
    /// `KPF_HUGE` on every page of the folio) gives each frame its folio.
    #[test]
    fn kpageflags_folios_are_found_from_any_frame(
        folios in prop::collection::vec((0u32..4, 0u8..3), 1..12),
        extra in any::<u64>(),
        probe in any::<prop::sample::Index>(),
    ) {
        use tierd_engine::types::PageSize;
        use tierd_linux::read::kpageflags::{
            decode_entries, folio_of_frame, FrameFolio, PageFlags, KPF_COMPOUND_HEAD,
            KPF_COMPOUND_TAIL, KPF_HUGE, KPF_THP,
        };
        // Lay the folios out back to back, each at its natural alignment: orders 0, 4, 9, 18.
        let mut table = BTreeMap::new();
        let mut laid = Vec::new();
        let mut next = 0u64;
        for (o, k) in &folios {
            let order = [0u32, 4, 9, 18][*o as usize];
            let n = 1u64 << order;
            let head = next.next_multiple_of(n);
            let kind = match k { 0 => 1 << KPF_THP, 1 => 1 << KPF_HUGE, _ => 0 };
            if n == 1 {
                table.insert(head, extra & !(1 << KPF_COMPOUND_HEAD | 1 << KPF_COMPOUND_TAIL
                    | 1 << 20));
            } else {
                table.insert(head, 1 << KPF_COMPOUND_HEAD | kind);
                for p in head + 1..head + n {
                    table.insert(p, 1 << KPF_COMPOUND_TAIL | kind);
                }
            }
            laid.push((head, n, *k));
            next = head + n;
        }
        let (head, n, k) = laid[probe.index(laid.len())];
        let pfn = head + probe.index(usize::try_from(n).unwrap()) as u64;
        let got = folio_of_frame(pfn, |s, c| -> Result<Vec<PageFlags>, ()> {
            let raw: Vec<u8> = (s..s + c)
                .flat_map(|p| table.get(&p).copied().unwrap_or(0).to_ne_bytes())
                .collect();
            Ok(decode_entries(&raw).unwrap())
        }).unwrap();
        let want = match (n, k) {
            (1, _) => FrameFolio::Base,
            (512, 0 | 1) => FrameFolio::Huge {
                head: tierd_engine::types::Pfn(head), size: PageSize::Huge2M, hugetlb: k == 1 },
            (262_144, 0 | 1) => FrameFolio::Huge {
                head: tierd_engine::types::Pfn(head), size: PageSize::Huge1G, hugetlb: k == 1 },
            _ => FrameFolio::Untracked,
        };
        prop_assert_eq!(got, want);
    }
}

/// One generation as `lru_gen_seq_show()` prints it: seq, age, and per type a size and its
/// mark, or (before 6.2) `-0` for a type whose `min_seq` is past it.
type GenLine = (u64, u32, (u64, u8), (u64, u8));
/// One memcg: its id, path, and per node its generations.
type MemcgLines = (u64, String, Vec<(u16, Vec<GenLine>)>);

fn arb_lru_gen() -> impl Strategy<Value = Vec<MemcgLines>> {
    let size = (any::<u64>(), 0u8..3);
    let gen = (any::<u64>(), any::<u32>(), size.clone(), size);
    let node = (0u16..1024, prop::collection::vec(gen, 0..5));
    let path = prop_oneof![Just(String::new()), "/[ -~]{0,40}"];
    prop::collection::vec(
        (any::<u64>(), path, prop::collection::vec(node, 0..4)),
        0..5,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// `/sys/kernel/debug/lru_gen` (mm/vmscan.c `lru_gen_seq_show()`: `memcg %5hu %s` or
    /// `memcg %llu %s`, ` node %5d`, ` %10lu %10u` and per type `%10lu%c` with the mark `x`
    /// or a space, or `-0` before 6.2) parses back to every memcg, node and generation.
    #[test]
    fn lru_gen_parses_to_what_was_printed(memcgs in arb_lru_gen(), wide in any::<bool>()) {
        use tierd_linux::read::lru_gen::{parse_lru_gen, Generation};
        let mut text = String::new();
        for (id, path, nodes) in &memcgs {
            text += &if wide { format!("memcg {id} {path}\n") } else { format!("memcg {id:5} {path}\n") };
            for (nid, gens) in nodes {
                text += &format!(" node {nid:5}\n");
                for (seq, age, anon, file) in gens {
                    text += &format!(" {seq:10} {age:10}");
                    for (n, mark) in [anon, file] {
                        text += &match mark {
                            0 => format!(" {n:10} "),
                            1 => format!(" {n:10}x"),
                            _ => "         -0 ".to_owned(),
                        };
                    }
                    text += "\n";
                }
            }
        }
        let got = parse_lru_gen(&text).unwrap();
        prop_assert_eq!(got.len(), memcgs.len());
        for (m, (id, path, nodes)) in got.iter().zip(&memcgs) {
            prop_assert_eq!(m.id, *id);
            prop_assert_eq!(&m.path, path);
            prop_assert_eq!(m.nodes.len(), nodes.len());
            for (l, (nid, gens)) in m.nodes.iter().zip(nodes) {
                prop_assert_eq!(l.node, NodeId(*nid));
                let want: Vec<Generation> = gens
                    .iter()
                    .map(|(seq, age, (a, am), (f, fm))| Generation {
                        seq: *seq,
                        age_ms: *age,
                        anon: if *am == 2 { 0 } else { *a },
                        file: if *fm == 2 { 0 } else { *f },
                    })
                    .collect();
                prop_assert_eq!(&l.gens, &want);
            }
        }
    }
}
