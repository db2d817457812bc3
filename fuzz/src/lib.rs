//! Fuzz targets for every parser of kernel output tierd has (`/proc` and `/sys` files, DAMON's
//! region directories, the perf decoders, pagemap), for the daemon's config and the
//! simulator's scenario loaders, and for recorded traces (`tierd replay`).
//!
//! Each target takes the fuzzer's bytes, runs the parser the way tierd runs it (text files
//! decoded as UTF-8 lossily, as `tierd_linux::read` reads them), and asserts what must hold of
//! any input: no panic, errors that name a line inside the text, and a few cheap invariants of
//! the parsed values. `fuzz_targets/*.rs` wrap each one for libFuzzer; `tests/corpus.rs`
//! replays the seed corpus and every regression input through them in `cargo test`.
//! CONTRIBUTING.md ("Fuzzing") says how to run them.

use std::path::{Path, PathBuf};

use tierd_engine::types::{Nanos, NodeId};
use tierd_linux::read::{
    self, cgroup, lru_gen, meminfo, numa_maps, proc, task, topology, vmstat, ParseError,
};
use tierd_linux::source::damon;
use tierd_linux::source::perf::{ibs::IbsOp, sample, spe, MemSample};

/// The text a reader hands its parser (`read_text`: lossy UTF-8).
fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// An error names a line of the text (or the one after it, for a missing field).
fn check_line<T>(text: &str, r: &Result<T, ParseError>) {
    if let Err(e) = r {
        let lines = text.split('\n').count().max(1);
        assert!(
            e.line >= 1 && e.line <= lines + 1,
            "error on line {} of {lines}",
            e.line
        );
    }
}

/// `/proc/PID/numa_maps` and `/proc/PID/maps`, and the join of the two.
pub fn numa_maps(data: &[u8]) {
    let t = text(data);
    let nm = numa_maps::parse_numa_maps(&t);
    check_line(&t, &nm);
    let maps = numa_maps::parse_maps(&t);
    check_line(&t, &maps);
    if let Ok(nm) = &nm {
        assert!(nm.entries.len() <= t.split('\n').count());
        for e in &nm.entries {
            // Totals saturate, never overflow.
            let _ = (e.total_pages(), e.base_pages_per_page());
        }
        let _ = nm.node_totals();
    }
    if let Ok(maps) = &maps {
        assert!(maps.iter().all(|m| m.start <= m.end && m.perms.len() == 4));
        if let Ok(nm) = nm {
            let vmas = numa_maps::join_maps(nm, maps);
            let _ = numa_maps::policy_ranges(&vmas);
        }
    }
    for line in t.split('\n') {
        let _ = numa_maps::parse_numa_maps_line(line);
        let _ = numa_maps::parse_policy_prefix(line);
    }
}

/// `/proc/PID/status` and `/proc/PID/stat`.
pub fn proc_files(data: &[u8]) {
    let t = text(data);
    let status = proc::parse_status(&t);
    check_line(&t, &status);
    if let Ok(s) = status {
        assert!(s.cpus_allowed.windows(2).all(|w| w[0] < w[1]));
    }
    let stat = proc::parse_stat(&t);
    check_line(&t, &stat);
    if let Ok(s) = stat {
        let _ = s.cpu_time(proc::USER_HZ);
        let _ = s.cpu_time(0);
    }
    // The same line as a thread's `task/TID/stat`, and the accessing-node rule over it.
    let task = task::parse_task_stat(&t);
    check_line(&t, &task);
    if let Ok(ts) = task {
        let p = task::home_node(&[ts], &std::collections::BTreeMap::new(), |c| {
            (c < 4).then_some(NodeId(u16::try_from(c / 2).unwrap_or(0)))
        });
        if let task::Placement::Node(n) = p {
            assert!(ts.processor < 4 && n.0 == u16::try_from(ts.processor / 2).unwrap_or(9));
        }
    }
}

/// `/proc/meminfo`, `nodeN/meminfo`, `/proc/vmstat` and `nodeN/vmstat`.
pub fn meminfo_vmstat(data: &[u8]) {
    let t = text(data);
    check_line(&t, &meminfo::parse_meminfo(&t));
    check_line(&t, &meminfo::parse_node_meminfo(&t, NodeId(1)));
    check_line(&t, &vmstat::parse_vmstat(&t));
}

/// `/sys/kernel/debug/lru_gen`: what parses, printed back the way the kernel prints it
/// (`lru_gen_seq_show()`), parses to the same memcgs, nodes and generations.
pub fn lru_gen(data: &[u8]) {
    let t = text(data);
    let r = lru_gen::parse_lru_gen(&t);
    check_line(&t, &r);
    if let Ok(memcgs) = &r {
        let mut printed = String::new();
        for m in memcgs {
            printed += &format!("memcg {:5} {}\n", m.id, m.path);
            for l in &m.nodes {
                printed += &format!(" node {:5}\n", l.node.0);
                for g in &l.gens {
                    printed += &format!(
                        " {:10} {:10} {:10}  {:10} \n",
                        g.seq, g.age_ms, g.anon, g.file
                    );
                }
            }
        }
        assert_eq!(
            memcgs,
            &lru_gen::parse_lru_gen(&printed).expect("what parsed, printed back, parses")
        );
    }
}

/// cgroup v2 files (`memory.max` and friends, `memory.stat`, `memory.numa_stat`,
/// `cgroup.procs`) and `/proc/PID/cgroup`.
pub fn cgroup(data: &[u8]) {
    let t = text(data);
    check_line(&t, &cgroup::parse_limit(&t));
    check_line(&t, &cgroup::parse_flat_keyed(&t));
    check_line(&t, &cgroup::parse_numa_stat(&t));
    let pids = cgroup::parse_pids(&t);
    check_line(&t, &pids);
    check_line(&t, &cgroup::parse_proc_cgroup(&t));
}

/// Topology files: lists (`%*pbl`), `distance`, `numa_balancing`, sysfs booleans, numbers.
pub fn topology(data: &[u8]) {
    let t = text(data);
    if let Ok(ids) = read::parse_list(&t) {
        // Ascending, no duplicates, and printing them back as ranges gives the same set.
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        let printed: Vec<String> = ids.iter().map(u32::to_string).collect();
        assert_eq!(read::parse_list(&printed.join(",")).as_ref(), Ok(&ids));
    }
    if let Ok(mask) = read::parse_nodelist(&t) {
        assert_eq!(read::parse_nodelist(&mask.to_string()), Ok(mask));
    }
    check_line(&t, &topology::parse_distance(&t));
    check_line(&t, &topology::parse_nodelist_file(&t));
    check_line(&t, &topology::parse_cpulist_file(&t));
    check_line(&t, &topology::parse_numa_balancing(&t));
    check_line(&t, &topology::parse_sysfs_bool(&t));
    check_line(&t, &read::parse_u64(&t));
    // A node's hugetlb pool count (`nodeN/hugepages/hugepages-<kB>kB/free_hugepages`).
    if let Ok(n) = tierd_daemon::hugepages::parse_count(&t) {
        assert_eq!(
            tierd_daemon::hugepages::parse_count(&format!("{n}\n")),
            Ok(n)
        );
    }
    let _ = read::unescape_seq_path(&t, read::NUMA_MAPS_ESCAPED);
    let _ = read::unescape_octal(&t);
}

/// DAMON's region read-back (`damon::read_tried_regions`) over a directory the input
/// describes: the first line holds the entry names (space-separated: region numbers, and
/// anything else, such as `total_bytes`); each following line is the next region file's
/// content, in the order `start`, `end`, `nr_accesses`, `age` of each numbered entry; files
/// past the input's last line are missing.
pub fn damon_regions(data: &[u8]) {
    let t = text(data);
    let mut lines = t.split('\n');
    let names: Vec<String> = lines
        .next()
        .unwrap_or("")
        .split(' ')
        .map(str::to_owned)
        .collect();
    let dir = PathBuf::from("/r");
    let mut fs = damon::MemFs::default();
    for n in &names {
        if n.parse::<u64>().is_err() {
            continue;
        }
        for f in ["start", "end", "nr_accesses", "age"] {
            if let Some(l) = lines.next() {
                fs.files.insert(dir.join(n).join(f), l.to_owned());
            }
        }
    }
    fs.dirs.insert(dir.clone(), names.clone());
    if let Ok(regions) = damon::read_tried_regions(&fs, &dir, 7, Nanos(5)) {
        let numbered = names.iter().filter(|n| n.parse::<u64>().is_ok()).count();
        assert_eq!(regions.len(), numbered);
        assert!(regions.iter().all(|r| r.pid == 7 && r.time == Nanos(5)));
    }
    let _ = damon::parse_u64(&dir, &t);
}

/// DAMON's `damon_aggregated` trace lines (`damon_trace`): the input is `trace_pipe`'s text,
/// fed in two chunks cut at the first byte's value; every aggregation assembled must hold
/// `nr_regions` regions of one target in rising, non-empty address ranges.
pub fn damon_trace(data: &[u8]) {
    use tierd_linux::source::damon_trace::{feed_text, lost_events, parse_line, Assembler};
    let t = text(data);
    for line in t.lines() {
        if let Ok(Some(e)) = parse_line(line) {
            assert!(e.start < e.end && e.nr_regions > 0, "{e:?}");
        }
        let _ = lost_events(line);
    }
    let cut = data.first().map_or(0, |&b| usize::from(b)).min(t.len());
    let cut = (0..=cut)
        .rev()
        .find(|&i| t.is_char_boundary(i))
        .unwrap_or(0);
    let mut asm = Assembler::default();
    let mut pending = String::new();
    for task in [0, 1234] {
        feed_text(&mut asm, &mut pending, &t[..cut], task);
        feed_text(&mut asm, &mut pending, &t[cut..], task);
        for (idx, evs) in asm.take() {
            assert_eq!(evs.len(), evs[0].nr_regions as usize);
            for w in evs.windows(2) {
                assert!(w[0].end <= w[1].start, "{w:?}");
            }
            assert!(evs
                .iter()
                .all(|e| e.target_idx == idx && e.task_pid == task));
        }
    }
}

/// perf ring-buffer records (`perf_event_header` + sample body) for a `sample_type` taken
/// from the first 8 bytes; each sample goes through the IBS and `data_src` conversions.
pub fn perf_sample(data: &[u8]) {
    let Some((ty, mut buf)) = data.split_first_chunk::<8>() else {
        return;
    };
    let sample_type = u64::from_le_bytes(*ty);
    let _ = sample::parse_sample(buf, sample_type);
    while !buf.is_empty() {
        match sample::parse_record(buf, sample_type) {
            Ok((rec, size)) => {
                assert!(size >= 8 && size <= buf.len(), "record size {size}");
                if let Some(rec) = rec {
                    let _ = MemSample::from_ibs(&rec);
                    let _ = MemSample::from_data_src(&rec);
                }
                buf = &buf[size..];
            }
            Err(_) => break,
        }
    }
}

/// AMD IBS op raw data.
pub fn ibs(data: &[u8]) {
    if let Ok(op) = IbsOp::parse(data) {
        let _ = (
            op.ld_op(),
            op.st_op(),
            op.dc_miss(),
            op.l2_miss(),
            op.l3_miss(),
        );
        let _ = (op.dc_miss_lat(), op.rmt_node(), op.data_source());
        let _ = (op.lin_addr_valid(), op.phys_addr_valid());
    }
}

/// Arm SPE aux-buffer packets.
pub fn spe(data: &[u8]) {
    let mut off = 0;
    while off < data.len() {
        match spe::next_packet(data, off) {
            Ok((_, len)) => {
                assert!(
                    len >= 1 && off + len <= data.len(),
                    "packet at {off} of {len} bytes"
                );
                off += len;
            }
            Err(_) => break,
        }
    }
    if let Ok(records) = spe::decode_records(data) {
        for r in &records {
            let _ = (r.is_load(), r.is_store(), r.llc_miss(), r.remote_access());
            let _ = MemSample::from_spe(r, 1, 1, 0, Nanos(0));
        }
    }
}

/// `/proc/PID/pagemap` entries.
pub fn pagemap(data: &[u8]) {
    match tierd_linux::pagemap::decode_entries(data) {
        Ok(entries) => {
            assert_eq!(entries.len() * 8, data.len());
            for e in &entries {
                // The kernel sets at most one of present and swapped
                // (Documentation/admin-guide/mm/pagemap.rst): a present page has no swap
                // entry, a swapped one no PFN, and an entry with both bits has neither a PFN
                // nor a move to offer.
                if e.present() && !e.swapped() {
                    assert!(e.swap_type().is_none() && e.swap_offset().is_none());
                }
                if e.swapped() {
                    assert!(e.pfn().is_none());
                }
                let _ = (e.file_or_shared_anon(), e.uffd_wp(), e.exclusive());
                let _ = (e.soft_dirty(), e.raw_pfn_field());
            }
            let _ = tierd_linux::pagemap::pfn_visibility(&entries).reason();
        }
        Err(_) => assert_ne!(data.len() % 8, 0),
    }
}

/// `/proc/PID/smaps`, and what the folio map's smaps method makes of each VMA.
pub fn smaps(data: &[u8]) {
    use tierd_engine::types::Vpn;
    let t = text(data);
    let r = tierd_linux::read::smaps::parse_smaps(&t);
    check_line(&t, &r);
    for v in r.into_iter().flatten() {
        assert!(v.vma.start <= v.vma.end);
        let (start, end) = (v.start_vpn().0, v.end_vpn().0);
        // First, last and a middle page: a folio holds its page, at its natural alignment.
        for vpn in [start, end.saturating_sub(1), start + (end - start) / 2] {
            if vpn >= end {
                continue;
            }
            if let Some(f) = tierd_linux::source::folio::folio_in_vma(&v, Vpn(vpn)) {
                let n = f.size.nr_pages().0;
                assert!(f.head.0 <= vpn && vpn < f.head.0 + n, "{f:?} for {vpn:#x}");
                assert_eq!(f.head.0 % n, 0);
                assert!(!f.hugetlb || v.is_hugetlb());
            }
        }
    }
}

/// `/proc/kpageflags` entries: the folio of every frame of a table of flags.
pub fn kpageflags(data: &[u8]) {
    use tierd_linux::read::kpageflags::{decode_entries, folio_of_frame, FrameFolio, PageFlags};
    // At most 1024 frames: each compound one reads 513 entries.
    let data = &data[..data.len().min(8192)];
    let Ok(table) = decode_entries(&data[..data.len() - data.len() % 8]) else {
        panic!("a whole number of entries decodes");
    };
    // The table sits at frame `base`, just below a 1 GiB boundary half the time, so that
    // both the 2 MiB and the 1 GiB paths see its entries; frames outside it have no page.
    let base = if data.first().is_some_and(|b| b & 1 == 1) {
        (1 << 18) - 512
    } else {
        0
    };
    let read = |s: u64, n: u64| -> Result<Vec<PageFlags>, ()> {
        Ok((s..s + n)
            .map(|p| {
                p.checked_sub(base)
                    .and_then(|i| table.get(usize::try_from(i).ok()?))
                    .copied()
                    .unwrap_or(PageFlags(1 << 20))
            })
            .collect())
    };
    for (i, own) in (0u64..).zip(&table) {
        let pfn = base + i;
        match folio_of_frame(pfn, read) {
            Ok(FrameFolio::Huge { head, size, .. }) => {
                let n = size.nr_pages().0;
                assert!(head.0 <= pfn && pfn < head.0 + n && head.0 % n == 0);
                assert!(read(head.0, 1).is_ok_and(|f| f[0].head()));
            }
            Ok(FrameFolio::NoPage) => assert!(own.nopage()),
            Ok(FrameFolio::Base | FrameFolio::Untracked) => {}
            Err(()) => unreachable!(),
        }
    }
}

/// The daemon's configuration (TOML).
pub fn daemon_config(data: &[u8]) {
    let Ok(t) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = tierd_daemon::config::DaemonConfig::parse(t, Path::new("fuzz.toml")) {
        // What parses is valid: the engine accepts it.
        c.engine_config()
            .validate()
            .expect("a parsed config validates");
    }
}

/// The simulator's scenario files (TOML).
pub fn scenario(data: &[u8]) {
    let Ok(t) = std::str::from_utf8(data) else {
        return;
    };
    let _ = tierd_sim::scenario::Scenario::parse(t, Path::new("fuzz.toml"));
}

/// A recorded trace (`tierd replay`, docs/trace.md): decoding never panics; what decodes
/// encodes back to the same records; and the records, grouped into passes, replay through
/// an engine built from the header (the first 64 passes, to stay quick).
pub fn trace(data: &[u8]) {
    use tierd_trace::format::{decode, encode_header, encode_record};
    let Ok((header, records)) = decode(data) else {
        return;
    };
    let mut again = encode_header(&header);
    for r in &records {
        encode_record(r, &mut again);
    }
    let (h2, r2) = decode(&again).expect("what decodes encodes back");
    assert_eq!(r2, records);
    assert_eq!(h2.seq, header.seq);
    if let Ok(mut passes) = tierd_trace::passes(records) {
        passes.truncate(64);
        let _ = tierd_trace::replay(&header, passes, header.config.clone());
    }
}

/// A fuzz target: takes the fuzzer's bytes, panics on a bug.
pub type Target = fn(&[u8]);

/// Every target by name, for the corpus replay and scripts/fuzz.sh's list.
pub const TARGETS: [(&str, Target); 17] = [
    ("numa_maps", numa_maps),
    ("proc_files", proc_files),
    ("meminfo_vmstat", meminfo_vmstat),
    ("cgroup", cgroup),
    ("topology", topology),
    ("damon_regions", damon_regions),
    ("damon_trace", damon_trace),
    ("perf_sample", perf_sample),
    ("ibs", ibs),
    ("spe", spe),
    ("pagemap", pagemap),
    ("daemon_config", daemon_config),
    ("scenario", scenario),
    ("smaps", smaps),
    ("kpageflags", kpageflags),
    ("trace", trace),
    ("lru_gen", lru_gen),
];
