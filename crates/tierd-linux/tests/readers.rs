//! The readers on whole fixture trees copied from real kernels (`tests/fixtures/<name>/{proc,sys}`,
//! captured with `tests/fixtures/capture.sh`), on malformed trees, and the parsers on arbitrary
//! input.
#![allow(clippy::tests_outside_test_module)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use tierd_engine::policy::PolicyMode;
use tierd_engine::types::{Bytes, NodeId, NodeMask, Pages};
use tierd_linux::read::cgroup::{self, CgroupFs};
use tierd_linux::read::numa_maps::{self, Backing};
use tierd_linux::read::topology::{self, TierSource};
use tierd_linux::read::{meminfo, parse_list, parse_nodelist, proc, vmstat, ReadError};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn mask(ids: &[u16]) -> NodeMask {
    NodeMask::from_nodes(ids.iter().copied().map(NodeId))
}

/// A fresh scratch directory for a test that writes its own tree.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().expect("a parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

/// The numbers after `N<node>=` summed over a numa_maps text, done independently of the parser
/// (a plain token scan) to cross-check it.
fn scan_node_pages(text: &str) -> BTreeMap<u16, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let kb: u64 = line
            .split_whitespace()
            .find_map(|t| t.strip_prefix("kernelpagesize_kB="))
            .map_or(4, |v| v.parse().expect("a page size"));
        for tok in line.split_whitespace() {
            if let Some((n, v)) = tok.strip_prefix('N').and_then(|r| r.split_once('=')) {
                if let (Ok(n), Ok(v)) = (n.parse::<u16>(), v.parse::<u64>()) {
                    *out.entry(n).or_default() += v * (kb / 4);
                }
            }
        }
    }
    out
}

mod host {
    //! A one-node x86-64 VM host, kernel 6.18 (the machine the tests were written on), with
    //! cgroup v1+v2 hybrid mounts (`sys/fs/cgroup/unified` is the v2 hierarchy).

    use super::*;

    fn root() -> PathBuf {
        fixture("host-6.18.44-fc-v595")
    }

    fn pids() -> Vec<u32> {
        proc::list_pids(&root().join("proc")).expect("pids")
    }

    #[test]
    fn one_node_one_tier() {
        let sys = topology::read_system_topology(&root().join("sys")).unwrap();
        assert_eq!(sys.online, mask(&[0]));
        assert_eq!(sys.possible, mask(&[0]));
        assert_eq!(sys.has_cpu, mask(&[0]));
        assert_eq!(sys.has_memory, mask(&[0]));
        let n0 = sys.node(NodeId(0)).unwrap();
        assert_eq!(n0.cpus, [0, 1]);
        assert_eq!(n0.distance, [10]);
        assert_eq!(n0.meminfo.mem_total(), Some(Bytes(14_248_152 * 1024)));
        assert!(n0.access.is_empty());
        assert_eq!(sys.kernel_tier_of(NodeId(0)), Some(4));
        assert_eq!(sys.tier_source(), TierSource::Kernel);

        let t = sys.to_engine().unwrap();
        assert_eq!(t.nodes().len(), 1);
        assert_eq!(t.node(NodeId(0)).unwrap().tier, 4);
        assert_eq!(t.toptier_mask(), mask(&[0]));
        assert!(t.slow_mask().is_empty());

        let proc_root = root().join("proc");
        let nb = topology::read_numa_balancing(&proc_root).unwrap().unwrap();
        assert!(nb.disabled());
        assert_eq!(
            topology::read_demotion_enabled(&root().join("sys")).unwrap(),
            Some(false)
        );
    }

    #[test]
    fn vmstat_has_the_tiering_counters() {
        let v = vmstat::read_vmstat(&root().join("proc")).unwrap();
        assert!(v.counters.len() > 150, "{} counters", v.counters.len());
        let t = v.tiering();
        // 6.18 has every counter tierd reads, the `nrl` one included.
        assert!(t.pgpromote_success.is_some());
        assert!(t.pgpromote_candidate_nrl.is_some());
        assert!(t.pgdemote_proactive.is_some());
        assert!(t.numa_hint_faults.is_some());
        assert!(t.pgmigrate_success.is_some());
        let d = vmstat::Vmstat::delta(&v, &v);
        assert_eq!(d.counters.len(), v.counters.len());
        assert!(d.counters.values().all(|&x| x == 0));

        let node = vmstat::read_node_vmstat(&root().join("sys"), NodeId(0)).unwrap();
        assert!(node.get("nr_free_pages").is_some());
        // The node file has node stats, not global events.
        assert_eq!(node.get("numa_hint_faults"), None);
        assert_eq!(
            meminfo::read_meminfo(&root().join("proc"))
                .unwrap()
                .mem_total(),
            Some(Bytes(24_684_096 * 1024))
        );
    }

    #[test]
    fn every_process_parses() {
        let proc_root = root().join("proc");
        let pids = pids();
        assert_eq!(pids.len(), 2);
        for pid in pids {
            let text = std::fs::read_to_string(proc_root.join(format!("{pid}/numa_maps"))).unwrap();
            let nm = numa_maps::read_numa_maps(&proc_root, pid).unwrap();
            assert_eq!(nm.entries.len(), text.lines().count());
            assert!(nm
                .entries
                .iter()
                .all(|e| e.policy.policy.mode == PolicyMode::Default));
            let totals = nm.node_totals();
            let scanned: BTreeMap<NodeId, Pages> = scan_node_pages(&text)
                .into_iter()
                .map(|(n, p)| (NodeId(n), Pages(p)))
                .collect();
            assert_eq!(totals, scanned);
            assert!(nm.entries.iter().any(|e| e.backing == Backing::Stack));

            let vmas = numa_maps::read_vmas(&proc_root, pid).unwrap();
            // Both files were read at once: every VMA has its end, and ends follow starts.
            assert!(vmas.iter().all(|v| v.end.is_some_and(|e| e > v.start)));
            assert!(numa_maps::policy_ranges(&vmas).is_empty());

            let st = proc::read_status(&proc_root, pid).unwrap();
            assert_eq!(st.tgid, pid);
            assert_eq!(st.cpus_allowed, [0, 1]);
            assert_eq!(st.mems_allowed, mask(&[0]));
            let stat = proc::read_stat(&proc_root, pid).unwrap();
            assert_eq!(stat.pid, pid);
            assert_eq!(stat.comm, st.name);

            let cg = cgroup::read_proc_cgroup(&proc_root, pid).unwrap();
            assert_eq!(cg.len(), 10);
            assert_eq!(cgroup::unified_path(&cg), Some("/"));
            assert!(cg.iter().any(|m| m.controllers == ["memory"]));
        }
    }

    #[test]
    fn unified_root_without_memory_controller() {
        let fs = CgroupFs::new(root().join("sys/fs/cgroup/unified"));
        let procs = fs.procs("/").unwrap();
        assert!(!procs.is_empty());
        let mem = fs.read_memory("/").unwrap();
        assert_eq!(mem.max, None);
        assert_eq!(mem.stat, None);
        assert!(fs.children("/").unwrap().is_empty());
    }
}

mod guest {
    //! Debian 6.12 in QEMU: node 0 with 2 CPUs and 2 GiB, node 1 CPU-less 2 GiB behind HMAT
    //! numbers that put it in a lower tier; a cgroup `tierd-fx` confined to node 1. Expectations
    //! come from the capture's `meta/pids.env`, its README (the workload it set up) and the files
    //! themselves, not from counters copied out of this run.

    use tierd_engine::topology::{NodeSpec, Topology};

    use super::*;

    fn root() -> PathBuf {
        fixture("guest-6.12")
    }

    /// `meta/pids.env` as a map (`PID_SLOW` -> `152`).
    fn meta() -> BTreeMap<String, String> {
        let text = std::fs::read_to_string(root().join("meta/pids.env")).expect("pids.env");
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    fn pid(name: &str) -> u32 {
        meta()[name].parse().expect("a pid")
    }

    #[test]
    fn two_nodes_cpuless_node_in_a_lower_kernel_tier() {
        let sys_root = root().join("sys");
        let sys = topology::read_system_topology(&sys_root).unwrap();
        assert_eq!(sys.online, mask(&[0, 1]));
        assert_eq!(sys.has_cpu, mask(&[0]));
        assert_eq!(sys.has_memory, mask(&[0, 1]));
        let (n0, n1) = (sys.node(NodeId(0)).unwrap(), sys.node(NodeId(1)).unwrap());
        assert_eq!(n0.cpus, [0, 1]);
        assert!(n1.cpus.is_empty());
        assert_eq!(
            (n0.distance.clone(), n1.distance.clone()),
            (vec![10, 20], vec![20, 10])
        );

        // HMAT from the QEMU command line: 100 ns / 20 GiB/s and 300 ns / 5 GiB/s from node 0.
        for class in [0, 1] {
            let a1 = n1.access_class(class).unwrap();
            assert_eq!(a1.initiators, mask(&[0]));
            let p = a1.perf.unwrap();
            assert_eq!((p.read_latency_ns, p.read_bandwidth_mbps), (300, 5120));
            let a0 = n0.access_class(class).unwrap();
            assert_eq!(a0.targets, mask(&[0, 1]));
            assert_eq!(a0.perf.unwrap().write_latency_ns, 100);
        }

        let tiers = sys.memory_tiers.clone().unwrap();
        assert_eq!(tiers.len(), 2);
        assert_eq!(tiers[0].nodes, mask(&[0]));
        assert_eq!(tiers[1].nodes, mask(&[1]));
        assert!(tiers[0].id < tiers[1].id);
        assert_eq!(tiers[0].id, 4, "DRAM is memory_tier4");
        assert_eq!(sys.tier_source(), TierSource::Kernel);

        let t = sys.to_engine().unwrap();
        assert_eq!(t.toptier_mask(), mask(&[0]));
        assert_eq!(t.slow_mask(), mask(&[1]));
        assert_eq!(t.node(NodeId(1)).unwrap().tier, tiers[1].id);
        assert_eq!(t.demotion_targets(NodeId(0)), mask(&[1]));
        assert_eq!(t.promotion_candidates(NodeId(1)), &[NodeId(0)]);
        assert_eq!(t.distance(NodeId(0), NodeId(1)), Some(20));
        assert_eq!(
            t.capacity(NodeId(1)),
            n1.meminfo.mem_total().unwrap(),
            "capacity is MemTotal"
        );
        assert!(t.capacity(NodeId(1)) > Bytes::mib(1900));

        // The engine's own HMAT formula on the same numbers lands in the tier the kernel chose.
        let (specs, dist) = sys.node_specs().unwrap();
        let hmat_only: Vec<NodeSpec> = specs
            .into_iter()
            .map(|s| NodeSpec {
                adistance: None,
                ..s
            })
            .collect();
        let derived = Topology::new(hmat_only, dist).unwrap();
        assert_eq!(derived.node(NodeId(1)).unwrap().tier, tiers[1].id);
        assert_eq!(derived.node(NodeId(0)).unwrap().tier, tiers[0].id);

        let nb = topology::read_numa_balancing(&root().join("proc"))
            .unwrap()
            .unwrap();
        assert!(nb.normal() && !nb.memory_tiering());
        assert_eq!(
            topology::read_demotion_enabled(&sys_root).unwrap(),
            Some(false)
        );
    }

    #[test]
    fn vmstat_of_a_6_12_kernel() {
        let v = vmstat::read_vmstat(&root().join("proc")).unwrap();
        let t = v.tiering();
        assert!(t.pgpromote_success.is_some() && t.pgpromote_candidate.is_some());
        assert!(t.pgdemote_kswapd.is_some() && t.pgdemote_khugepaged.is_some());
        // Added after 6.12: absent, not zero.
        assert_eq!(t.pgpromote_candidate_nrl, None);
        assert_eq!(t.pgdemote_proactive, None);
        assert_eq!(t.pgdemote_total(), Some(0));
        // NUMA balancing ran in the guest (mode 1).
        assert!(t.numa_hint_faults.unwrap() > 0);
        assert!(t.numa_hint_faults_local.unwrap() <= t.numa_hint_faults.unwrap());
        assert!(t.numa_pte_updates.is_some() && t.numa_pages_migrated.is_some());

        let sys_root = root().join("sys");
        for node in [NodeId(0), NodeId(1)] {
            let nv = vmstat::read_node_vmstat(&sys_root, node).unwrap();
            // Node files carry the node's share of node stats, not global events.
            assert!(nv.tiering().pgpromote_success.is_some(), "{node}");
            assert_eq!(nv.tiering().numa_hint_faults, None, "{node}");
        }
        // A node stat is the sum of its per-node values.
        let n0 = vmstat::read_node_vmstat(&sys_root, NodeId(0)).unwrap();
        let n1 = vmstat::read_node_vmstat(&sys_root, NodeId(1)).unwrap();
        for key in ["pgpromote_success", "pgdemote_kswapd", "pgdemote_direct"] {
            assert_eq!(
                v.get(key),
                Some(n0.get(key).unwrap() + n1.get(key).unwrap()),
                "{key}"
            );
        }
    }

    #[test]
    fn numa_maps_place_each_buffer_on_its_node() {
        let proc_root = root().join("proc");
        for (name, node, mems) in [
            ("PID_FAST", NodeId(0), mask(&[0, 1])),
            ("PID_SLOW", NodeId(1), mask(&[1])),
        ] {
            let pid = pid(name);
            let text = std::fs::read_to_string(proc_root.join(format!("{pid}/numa_maps"))).unwrap();
            let vmas = numa_maps::read_vmas(&proc_root, pid).unwrap();
            assert_eq!(vmas.len(), text.lines().count());
            // Read together: every numa_maps VMA is in maps.
            assert!(
                vmas.iter().all(|v| v.end.is_some_and(|e| e > v.start)),
                "{name}"
            );
            assert!(vmas.iter().any(|v| v.numa.backing == Backing::Heap));
            assert!(vmas.iter().any(|v| v.numa.backing == Backing::Stack));
            assert!(vmas
                .iter()
                .any(|v| v.numa.backing == Backing::File("/bin/busybox".into())));
            // vdso/vvar have no pages: no counts, no page size.
            assert!(vmas
                .iter()
                .any(|v| v.numa.nodes.is_empty() && v.numa.kernel_page_size_kb.is_none()));

            // The 32 MiB buffer: the largest anonymous VMA, wholly resident on its node.
            let buf = vmas
                .iter()
                .filter(|v| v.numa.backing == Backing::Anon)
                .max_by_key(|v| v.numa.anon)
                .unwrap();
            let len = buf.end.unwrap().0 - buf.start.0;
            assert_eq!(len, Bytes::mib(32).pages().0, "{name}");
            assert_eq!(buf.numa.pages_on(node), Pages(len), "{name}");
            assert_eq!(buf.numa.total_pages(), Pages(len), "{name}");

            let nm = numa_maps::read_numa_maps(&proc_root, pid).unwrap();
            let scanned: BTreeMap<NodeId, Pages> = scan_node_pages(&text)
                .into_iter()
                .map(|(n, p)| (NodeId(n), Pages(p)))
                .collect();
            assert_eq!(nm.node_totals(), scanned, "{name}");
            // No process has a non-default policy (busybox cannot mbind).
            assert!(numa_maps::policy_ranges(&vmas).is_empty());

            let st = proc::read_status(&proc_root, pid).unwrap();
            assert_eq!(st.tgid, pid);
            assert_eq!(st.mems_allowed, mems, "{name}");
            assert_eq!(proc::read_stat(&proc_root, pid).unwrap().comm, st.name);
        }
        // Everything the slow process has is on node 1 (cpuset.mems = 1).
        let slow = numa_maps::read_numa_maps(&proc_root, pid("PID_SLOW")).unwrap();
        assert_eq!(
            slow.node_totals().keys().copied().collect::<Vec<_>>(),
            [NodeId(1)]
        );
    }

    #[test]
    fn processes_and_cpu_time() {
        let proc_root = root().join("proc");
        let pids = proc::list_pids(&proc_root).unwrap();
        let mut want: Vec<u32> = ["PID_INIT", "PID_FAST", "PID_SLOW", "PID_HOT"]
            .iter()
            .map(|n| pid(n))
            .collect();
        want.sort_unstable();
        assert_eq!(pids, want);
        for p in pids {
            let st = proc::read_stat(&proc_root, p).unwrap();
            assert_eq!(st.pid, p);
            assert_eq!(
                proc::read_status(&proc_root, p).unwrap().cpus_allowed,
                [0, 1]
            );
        }
        // The awk loop is the busiest process; dd only touched its buffer.
        let hot = proc::read_stat(&proc_root, pid("PID_HOT")).unwrap();
        let slow = proc::read_stat(&proc_root, pid("PID_SLOW")).unwrap();
        assert_eq!(hot.state, 'R');
        assert!(hot.cpu_time(100) > slow.cpu_time(100));
        assert_eq!(
            hot.cpu_time(100).0,
            (hot.utime_ticks + hot.stime_ticks) * 10_000_000
        );
    }

    #[test]
    fn cgroup_v2_memory_files() {
        let proc_root = root().join("proc");
        let meta = meta();
        let cg_path = meta["CGROUP"]
            .strip_prefix("/sys/fs/cgroup")
            .expect("a cgroup under /sys/fs/cgroup")
            .to_owned();
        let slow = pid("PID_SLOW");
        let m = cgroup::read_proc_cgroup(&proc_root, slow).unwrap();
        assert_eq!(cgroup::unified_path(&m), Some(cg_path.as_str()));
        let m = cgroup::read_proc_cgroup(&proc_root, pid("PID_FAST")).unwrap();
        assert_eq!(cgroup::unified_path(&m), Some("/"));

        let fs = CgroupFs::new(root().join("sys/fs/cgroup"));
        assert_eq!(fs.children("/").unwrap(), std::slice::from_ref(&cg_path));
        assert!(fs.children(&cg_path).unwrap().is_empty());
        assert_eq!(fs.procs(&cg_path).unwrap(), [slow]);
        assert!(fs.procs("/").unwrap().contains(&pid("PID_FAST")));

        // Set up by the capture (README): low 64 MiB, high 768 MiB, max and min untouched.
        let mem = fs.read_memory(&cg_path).unwrap();
        assert_eq!(mem.low, Some(cgroup::Limit::Bytes(Bytes::mib(64))));
        assert_eq!(mem.high, Some(cgroup::Limit::Bytes(Bytes::mib(768))));
        assert_eq!(mem.max, Some(cgroup::Limit::Max));
        assert_eq!(mem.min, Some(cgroup::Limit::Bytes(Bytes(0))));
        let current = mem.current.unwrap();
        assert!(current >= Bytes::mib(32), "{current}");
        let stat = mem.stat.unwrap();
        assert!(stat["anon"] >= Bytes::mib(32).0);
        assert!(stat.contains_key("pgpromote_success") && stat.contains_key("pgdemote_kswapd"));
        // Confined to node 1: its anonymous memory is all there.
        let ns = mem.numa_stat.unwrap();
        assert_eq!(ns.get("anon", NodeId(0)), Some(0));
        assert_eq!(ns.get("anon", NodeId(1)), Some(stat["anon"]));

        // The root cgroup has stat files but no limits.
        let root_mem = fs.read_memory("/").unwrap();
        assert_eq!(
            (root_mem.low, root_mem.max, root_mem.current),
            (None, None, None)
        );
        assert!(root_mem.stat.is_some());
        assert!(root_mem.numa_stat.unwrap().get("anon", NodeId(0)).is_some());
    }
}

mod malformed {
    //! Broken trees: every failure is a `ReadError` naming the file (and line), never a panic.

    use super::*;

    fn minimal_sys(root: &Path) {
        write(root, "devices/system/node/online", "0\n");
        write(root, "devices/system/node/possible", "0\n");
        write(root, "devices/system/node/has_cpu", "0\n");
        write(root, "devices/system/node/has_memory", "0\n");
        write(root, "devices/system/node/node0/cpulist", "0\n");
        write(
            root,
            "devices/system/node/node0/meminfo",
            "Node 0 MemTotal: 1024 kB\n",
        );
        write(root, "devices/system/node/node0/distance", "10\n");
    }

    #[test]
    fn minimal_tree_reads_and_each_break_is_named() {
        let root = scratch("malformed-topology");
        minimal_sys(&root);
        let sys = topology::read_system_topology(&root).unwrap();
        // No memory_tiering and no HMAT: one tier.
        assert_eq!(sys.memory_tiers, None);
        assert_eq!(sys.tier_source(), TierSource::SingleTier);
        assert_eq!(sys.to_engine().unwrap().tiers().len(), 1);

        write(
            &root,
            "devices/system/node/node0/meminfo",
            "Node 0 MemTotal: 1024 kB\nNode 0 MemFree: lots kB\n",
        );
        let e = topology::read_system_topology(&root).unwrap_err();
        match &e {
            ReadError::Parse { path, line, reason } => {
                assert!(path.ends_with("node0/meminfo"), "{}", path.display());
                assert_eq!(*line, 2);
                assert!(reason.contains("lots"));
            }
            ReadError::Io { .. } => panic!("expected a parse error, got {e}"),
        }
        assert!(e.to_string().contains("node0/meminfo:2:"), "{e}");
        assert!(!e.is_gone());

        minimal_sys(&root);
        write(&root, "devices/system/node/online", "0-1\n");
        let e = topology::read_system_topology(&root).unwrap_err();
        assert!(e.path().ends_with("node1/cpulist"), "{e}");
        assert!(e.is_gone());

        minimal_sys(&root);
        write(&root, "devices/system/node/has_cpu", "0-\n");
        let e = topology::read_system_topology(&root).unwrap_err();
        assert!(e.to_string().contains("has_cpu:1:"), "{e}");

        minimal_sys(&root);
        write(
            &root,
            "devices/virtual/memory_tiering/memory_tier4/nodelist",
            "0,x\n",
        );
        let e = topology::read_system_topology(&root).unwrap_err();
        assert!(e.path().ends_with("memory_tier4/nodelist"), "{e}");

        minimal_sys(&root);
        std::fs::remove_dir_all(root.join("devices/virtual")).unwrap();
        write(
            &root,
            "devices/system/node/node0/access1/initiators/read_latency",
            "ten\n",
        );
        let e = topology::read_system_topology(&root).unwrap_err();
        assert!(e.path().ends_with("access1/initiators/read_latency"), "{e}");
    }

    #[test]
    fn process_files() {
        let root = scratch("malformed-proc");
        // An unknown policy is a value (PolicyMode::Unknown); a bad count is an error.
        write(
            &root,
            "7/numa_maps",
            "1000 default N0=1\n2000 bogus N0=bogus\n",
        );
        write(&root, "7/maps", "1000-2000 rw-p 00000000 00:00 0\n");
        write(&root, "7/stat", "7 (x) S\n");
        write(&root, "7/status", "Name:\tx\n");
        write(&root, "7/cgroup", "0::/\nnonsense\n");
        write(&root, "not-a-pid/stat", "");
        assert_eq!(proc::list_pids(&root).unwrap(), [7]);
        let e = numa_maps::read_numa_maps(&root, 7).unwrap_err();
        assert!(e.to_string().contains("7/numa_maps:2:"), "{e}");
        assert!(e.to_string().contains("bogus"), "{e}");
        let e = proc::read_stat(&root, 7).unwrap_err();
        assert!(e.to_string().contains("7/stat:1:"), "{e}");
        assert!(proc::read_status(&root, 7).is_err());
        let e = cgroup::read_proc_cgroup(&root, 7).unwrap_err();
        assert!(e.to_string().contains("7/cgroup:2:"), "{e}");
        // A process that is gone: is_gone() lets the caller count it.
        let e = numa_maps::read_vmas(&root, 8).unwrap_err();
        assert!(e.is_gone());
        assert!(e.path().ends_with("8/maps"));
    }

    #[test]
    fn cgroup_files() {
        let root = scratch("malformed-cgroup");
        write(&root, "a/memory.max", "unlimited\n");
        write(&root, "a/cgroup.procs", "1\n2\n");
        write(&root, "b/memory.numa_stat", "anon N0=1 N1\n");
        let fs = CgroupFs::new(&root);
        assert_eq!(fs.children("/").unwrap(), ["/a", "/b"]);
        let e = fs.read_memory("/a").unwrap_err();
        assert!(e.to_string().contains("a/memory.max:1:"), "{e}");
        assert_eq!(fs.procs("/a").unwrap(), [1, 2]);
        let e = fs.read_memory("/b").unwrap_err();
        assert!(e.to_string().contains("memory.numa_stat:1:"), "{e}");
        assert!(fs.procs("/missing").unwrap_err().is_gone());
    }
}

/// Kernel-style `numa_maps` policy text for a mode, flags and mask (mm/mempolicy.c
/// `mpol_to_str()`).
fn mpol_text(mode: PolicyMode, flags: (bool, bool, bool), nodes: NodeMask) -> String {
    let name = match mode {
        PolicyMode::Default => "default",
        PolicyMode::Preferred => "prefer",
        PolicyMode::PreferredMany => "prefer (many)",
        PolicyMode::Bind => "bind",
        PolicyMode::Interleave => "interleave",
        PolicyMode::WeightedInterleave => "weighted interleave",
        PolicyMode::Local => "local",
        PolicyMode::Unknown => "unknown",
    };
    let mut s = name.to_owned();
    let (stat, rel, bal) = flags;
    if stat || rel || bal {
        s.push('=');
        let mut parts = Vec::new();
        if stat {
            parts.push("static");
        } else if rel {
            parts.push("relative");
        }
        if bal {
            parts.push("balancing");
        }
        s.push_str(&parts.join("|"));
    }
    if !nodes.is_empty() {
        s.push(':');
        s.push_str(&nodes.to_string());
    }
    s
}

fn arb_mode() -> impl Strategy<Value = PolicyMode> {
    prop_oneof![
        Just(PolicyMode::Default),
        Just(PolicyMode::Preferred),
        Just(PolicyMode::PreferredMany),
        Just(PolicyMode::Bind),
        Just(PolicyMode::Interleave),
        Just(PolicyMode::WeightedInterleave),
        Just(PolicyMode::Local),
    ]
}

/// Text made mostly of the characters the formats use, so the parsers get past their first
/// check.
fn arb_procish() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[0-9a-fA-FNk:=,() \\-\n\t|/]{0,120}",
        "([0-9a-f]{1,12} (default|bind|prefer \\(many\\)|interleave)[=:|a-z0-9,-]{0,12}( [a-zN0-9_]{1,8}=[0-9]{0,4}){0,6}\n){0,4}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// No parser panics, whatever it is fed; errors name a line inside the text.
    #[test]
    fn parsers_never_panic(text in arb_procish()) {
        let lines = text.lines().count().max(1);
        let check = |r: Result<(), tierd_linux::read::ParseError>| {
            if let Err(e) = r {
                assert!(e.line >= 1 && e.line <= lines + 1, "line {} of {}", e.line, lines);
            }
        };
        let _ = parse_list(&text);
        let _ = parse_nodelist(&text);
        let _ = tierd_linux::read::unescape_octal(&text);
        check(meminfo::parse_meminfo(&text).map(drop));
        check(meminfo::parse_node_meminfo(&text, NodeId(1)).map(drop));
        check(vmstat::parse_vmstat(&text).map(drop));
        check(numa_maps::parse_numa_maps(&text).map(drop));
        check(numa_maps::parse_maps(&text).map(drop));
        check(cgroup::parse_limit(&text).map(drop));
        check(cgroup::parse_numa_stat(&text).map(drop));
        check(cgroup::parse_pids(&text).map(drop));
        check(cgroup::parse_proc_cgroup(&text).map(drop));
        check(proc::parse_status(&text).map(drop));
        check(proc::parse_stat(&text).map(drop));
        check(topology::parse_distance(&text).map(drop));
        check(topology::parse_numa_balancing(&text).map(drop));
        check(topology::parse_sysfs_bool(&text).map(drop));
    }

    /// The engine's kernel-format mask printing and the list parser agree.
    #[test]
    fn nodelists_round_trip(bits in any::<u64>()) {
        let m = NodeMask(bits);
        prop_assert_eq!(parse_nodelist(&format!("{m}\n")).unwrap(), m);
    }

    /// A file name with any character (vertical tab, no-break space, '=' and the rest),
    /// escaped as seq_file_path(m, file, "\n\t= ") does in show_numa_map(), parses back to
    /// the same name, and the counts after it are still read.
    #[test]
    fn numa_maps_file_names_with_any_character_round_trip(
        name in "/[^\\\x00]{0,40}",
        anon in 1u64..1000,
    ) {
        let mut printed = String::new();
        for c in name.chars() {
            if matches!(c, '\n' | '\t' | ' ' | '=') {
                printed.push_str(&format!("\\{:03o}", u32::from(c)));
            } else {
                printed.push(c);
            }
        }
        let line = format!("7f0000000000 default file={printed} anon={anon} dirty={anon} N1={anon} kernelpagesize_kB=4");
        let e = numa_maps::parse_numa_maps_line(&line).unwrap();
        prop_assert_eq!(&e.backing, &Backing::File(name.clone()));
        prop_assert_eq!(e.anon, Some(anon));
        prop_assert_eq!(e.nodes.get(&NodeId(1)).copied(), Some(anon));
        let whole = numa_maps::parse_numa_maps(&format!("{line}\n{line}\n")).unwrap();
        prop_assert_eq!(whole.entries.len(), 2);
    }

    /// A numa_maps line printed the way show_numa_map() prints it parses back to its parts.
    #[test]
    fn numa_maps_lines_round_trip(
        start in 0u64..(1 << 47),
        mode in arb_mode(),
        nodes in 1u64..(1 << 8),
        flags in (any::<bool>(), any::<bool>(), any::<bool>()),
        counts in proptest::collection::btree_map(0u16..8, 1u64..1_000_000, 0..4),
        anon in proptest::option::of(1u64..1000),
        huge in any::<bool>(),
    ) {
        let nodes = if matches!(mode, PolicyMode::Default | PolicyMode::Local) {
            NodeMask::EMPTY
        } else {
            NodeMask(nodes)
        };
        let mut line = format!("{start:08x} {} file=/a\\040b", mpol_text(mode, flags, nodes));
        if huge {
            line.push_str(" huge");
        }
        if let Some(a) = anon {
            line.push_str(&format!(" anon={a}"));
        }
        for (n, c) in &counts {
            line.push_str(&format!(" N{n}={c}"));
        }
        let kb = if huge { 2048 } else { 4 };
        line.push_str(&format!(" kernelpagesize_kB={kb}"));

        let e = numa_maps::parse_numa_maps_line(&line).unwrap();
        prop_assert_eq!(e.start, start);
        prop_assert_eq!(e.policy.policy.mode, mode);
        prop_assert_eq!(e.policy.policy.nodes, nodes);
        prop_assert_eq!(e.policy.static_nodes, flags.0);
        prop_assert_eq!(e.policy.relative_nodes, flags.1 && !flags.0);
        prop_assert_eq!(e.policy.policy.numa_balancing, flags.2);
        prop_assert_eq!(&e.backing, &Backing::File("/a b".into()));
        prop_assert_eq!(e.huge, huge);
        prop_assert_eq!(e.anon, anon);
        let want: BTreeMap<NodeId, u64> = counts.iter().map(|(&n, &c)| (NodeId(n), c)).collect();
        prop_assert_eq!(&e.nodes, &want);
        let per = if huge { 512 } else { 1 };
        prop_assert_eq!(e.total_pages(), Pages(counts.values().sum::<u64>() * per));
    }
}

/// A tenant's file names that the kernel prints unescaped (vertical tab, no-break space) next to
/// what looks like a field name: the parse must keep them in the name (split_whitespace made
/// `/x\u{a0}anon` a name `/x` and a count-less `anon`, and the whole scope failed).
#[test]
fn numa_maps_names_with_unicode_spaces_stay_names() {
    for name in [
        "/x\u{a0}anon",
        "/x\u{b}N1",
        "/x\u{c}dirty\u{2003}N0",
        "/x\r",
    ] {
        let line = format!("7f0000000000 default file={name} anon=2 N1=2 kernelpagesize_kB=4");
        let e = numa_maps::parse_numa_maps_line(&line).unwrap();
        assert_eq!(e.backing, Backing::File(name.into()), "{line:?}");
        assert_eq!(e.anon, Some(2));
    }
}
