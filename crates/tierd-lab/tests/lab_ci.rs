//! The short versions of lab experiments A and integrity, run by the README's test command:
//! tierd (DAMON source) in the two-node HMAT guest must
//! - place >= 90 % of the hot set on node 0, with <= 10 % over-promotion (experiment A, node 0
//!   filled by an eater so the kernel's free-space shortcut does not apply);
//! - the same with THP `always`, and count what it moved as the kernel does: its migrated MiB
//!   and THPs within 1 % of `pgmigrate_success` and `thp_migration_success` (issue 13);
//! - move pages both ways while every page is checksummed and the workload splits its own
//!   THPs (THP `always`), with 0 checksum failures, the workload finishing normally and the
//!   kernel reporting split THP mappings (integrity).
//!
//! Needs qemu, busybox-static and the kernel download like the tierd-vm guest tests; SKIPs
//! without them unless `TIERD_REQUIRE_GUEST` is set.
#![allow(clippy::tests_outside_test_module)]

use std::path::Path;

use tierd_lab::{experiment, experiment_thp, run_experiment, summary, LabEnv, Thp};
use tierd_vm::guest;
use tierd_vm::initramfs::DEFAULT_BUSYBOX;

/// One guest at a time: the test harness runs tests in parallel, and two TCG guests on a
/// 2-core host halve each other's speed, which is a different experiment.
static GUEST: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn env_or_skip(test: &str) -> Option<LabEnv> {
    let why = if !guest::qemu_available() {
        Some("qemu-system-x86_64 not found".to_string())
    } else if !Path::new(DEFAULT_BUSYBOX).is_file() {
        Some("/bin/busybox (busybox-static) not found".to_string())
    } else {
        None
    };
    let why = why.or_else(|| {
        tierd_vm::KernelChoice::from_env()
            .and_then(|k| tierd_vm::Kernel::fetch_choice(&tierd_vm::default_cache_dir(), k))
            .err()
            .map(|e| format!("kernel fetch failed: {e}"))
    });
    if let Some(why) = why {
        assert!(
            std::env::var_os("TIERD_REQUIRE_GUEST").is_none(),
            "guest prerequisites missing and TIERD_REQUIRE_GUEST is set: {why}"
        );
        println!("SKIP {test}: {why} (set TIERD_REQUIRE_GUEST=1 to make this a failure)");
        return None;
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    Some(LabEnv::prepare(&workspace).expect("kernel and static guest binaries"))
}

/// tierd's `/status` at the end of a run, key by key (each cut to 3000 characters), for the
/// reader of a failed run.
fn print_status(d: &tierd_lab::RunData) {
    if let Some(serde_json::Value::Object(st)) = d.tierd_status.as_ref() {
        for (k, v) in st {
            let v = v.to_string();
            let cut = v.char_indices().nth(3000).map_or(v.len(), |(i, _)| i);
            println!("tierd status {k}: {}", &v[..cut]);
        }
    }
}

#[test]
fn experiment_a_short_tierd_places_the_hot_set_without_over_promoting() {
    let _one = GUEST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(env) = env_or_skip("experiment_a_short") else {
        return;
    };
    let exp = experiment("a", true).expect("experiment a");
    let res = run_experiment(&env, &exp, &[], &mut |_| {}).expect("lab run");
    println!("{}", res.host.line());
    println!("{}", summary::table(&res.experiment, &res.rows));
    let t1 = res.rows.iter().find(|r| r.id == "T1").expect("tierd row");
    if let Some(d) = res.runs.iter().find(|(id, _)| id == "T1").map(|(_, d)| d) {
        for n in d
            .notes
            .iter()
            .filter(|n| n.contains("intervals") || n.starts_with("UNTIL"))
        {
            println!("{n}");
        }
    }
    assert!(t1.error.is_none(), "the run failed: {:?}", t1.error);
    assert_placed_the_hot_set(t1);
    let d = res.runs.iter().find(|(id, _)| id == "T1").map(|(_, d)| d);
    assert_trace_replays(d.expect("T1's data"));
}

/// A tierd row's recorded trace replays to the decisions the daemon made: in the guest (its
/// `tierd replay` verdict, a LAB line) and here, from the trace the row exported.
fn assert_trace_replays(d: &tierd_lab::RunData) {
    let verdict = d
        .notes
        .iter()
        .find_map(|n| n.strip_prefix("TIERD_REPLAY "))
        .expect("the guest replayed the row's trace");
    println!("guest replay: {verdict}");
    let path = d
        .notes
        .iter()
        .find_map(|n| n.strip_prefix("TIERD_TRACE "))
        .expect("the row's trace was saved");
    let dir = tempfile::tempdir().expect("tempdir");
    let ok = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(path)
        .arg("-C")
        .arg(dir.path())
        .status()
        .expect("tar")
        .success();
    assert!(ok, "tar -xzf {path}");
    let t = tierd_trace::read(dir.path()).expect("the trace reads back");
    let cfg = t.header.config.clone();
    let complete = t.complete;
    let passes = tierd_trace::passes(t.records).expect("passes");
    let r = tierd_trace::replay(&t.header, passes, cfg).expect("replay");
    println!("host replay: {}", r.verdict());
    assert!(r.recorded > 0, "the row decided something");
    if complete {
        assert!(r.identical(), "{}", r.verdict());
        assert!(verdict.starts_with(&format!("decisions: {0} of {0} same", r.recorded)));
    }
}

/// Experiment A's placement bounds for tierd's row: >= 90 % of the hot set on node 0 and 90 %
/// reached within the run, over-promotion <= 10 %, no hint faults, the chase ended normally.
fn assert_placed_the_hot_set(t1: &summary::Summary) {
    assert!(
        t1.hot_on_fast_pct >= 90.0,
        "tierd placed {:.1} % of the hot set on node 0",
        t1.hot_on_fast_pct
    );
    // The run waits (up to 120 s) for 95 % of the hot set to hold on node 0 for 3 s, at least
    // 20 s: a slow or busy host takes longer, it does not fail.
    assert!(t1.t90_s.is_some(), "90 % reached within the run");
    assert!(
        t1.over_pct <= 10.0,
        "over-promotion {:+.1} % (bound 10 %)",
        t1.over_pct
    );
    assert_eq!(t1.hint_faults, 0, "numa_balancing was off: no hint faults");
    assert!(t1.workload_finished, "the chase ended normally");
}

/// Experiment A's short run with THP `always` (issue 13): the same placement bounds, and
/// tierd's own count of what it moved must agree with the kernel's, in base pages (its
/// `pgpromote_success + pgdemote_success` against `pgmigrate_success`) and in THPs (its
/// `thp_migration_success` against the kernel's), within 1 %. tierd is the only migrator in
/// the window: NUMA balancing and kernel demotion are off, and proactive compaction is off
/// (its migrations count in `pgmigrate_success` too); compaction on demand is measured and
/// must not have run, or the comparison would not be tierd's alone.
#[test]
fn experiment_a_short_thp_always_places_the_hot_set_and_counts_what_the_kernel_counts() {
    let _one = GUEST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(env) = env_or_skip("experiment_a_short_thp_always") else {
        return;
    };
    let exp = experiment_thp("a", true, Thp::Always).expect("experiment a");
    let res = run_experiment(&env, &exp, &[], &mut |_| {}).expect("lab run");
    println!("{}", res.host.line());
    println!("{}", summary::table(&res.experiment, &res.rows));
    let t1 = res.rows.iter().find(|r| r.id == "T1").expect("tierd row");
    if let Some(d) = res.runs.iter().find(|(id, _)| id == "T1").map(|(_, d)| d) {
        for n in d
            .notes
            .iter()
            .filter(|n| n.starts_with("THP") || n.starts_with("UNTIL") || n.starts_with("TIERD_RC"))
        {
            println!("{n}");
        }
        if let (Some(a), Some(b)) = (d.samples.first(), d.samples.last()) {
            for k in tierd_lab::run::VMSTAT_KEYS {
                let (x, y) = (a.vmstat.get(*k), b.vmstat.get(*k));
                println!("vmstat {k}: {x:?} -> {y:?}");
            }
        }
        print_status(d);
    }
    println!("{t1:?}");
    assert!(t1.error.is_none(), "the run failed: {:?}", t1.error);
    assert_eq!(t1.thp, Thp::Always);
    assert!(
        t1.thp_seen
            .as_deref()
            .is_some_and(|s| s.starts_with("always/")),
        "the guest had THP {:?}",
        t1.thp_seen
    );
    let (thp_start, _) = t1.workload_thp_mib.expect("the workload's AnonHugePages");
    assert!(
        thp_start >= 256.0,
        "THPs backed only {thp_start:.0} MiB of the 512 MiB chase: not a THP run"
    );
    assert_placed_the_hot_set(t1);
    assert_eq!(
        t1.compact_isolated, 0,
        "compaction ran in the window: pgmigrate_success is not tierd's alone"
    );
    assert!(t1.thp_migrated > 0, "the kernel moved no THP");
    let mib = t1.tierd_mib_agreement_pct.expect("tierd's migrated MiB");
    assert!(
        (mib - 100.0).abs() <= 1.0,
        "tierd counts {:.1} MiB moved, the kernel's pgmigrate_success {:.1} MiB ({mib:.1} %)",
        t1.tierd_migrated_mib.unwrap_or(0.0),
        t1.migrated_mib
    );
    let thps = t1
        .tierd_thp_agreement_pct
        .expect("tierd's status has a thp_migration_success engine counter");
    assert!(
        (thps - 100.0).abs() <= 1.0,
        "tierd counts {:?} THPs moved, the kernel's thp_migration_success {} ({thps:.1} %)",
        t1.tierd_thp_migrated,
        t1.thp_migrated
    );
}

/// Integrity with THP `always` while the workload splits its own THPs (issue 13): it replaces
/// the THP-never integrity short run, to keep CI time flat (`tierd lab integrity` runs both).
#[test]
fn integrity_short_thp_always_with_splits_moves_pages_both_ways_with_no_checksum_failure() {
    let _one = GUEST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(env) = env_or_skip("integrity_short_thp_always") else {
        return;
    };
    let exp = experiment_thp("integrity", true, Thp::Always).expect("experiment integrity");
    let res = run_experiment(&env, &exp, &[], &mut |_| {}).expect("lab run");
    println!("{}", summary::table(&res.experiment, &res.rows));
    let t1 = &res.rows[0];
    println!("{t1:?}");
    if let Some(d) = res.runs.first().map(|(_, d)| d) {
        if let (Some(a), Some(b)) = (d.samples.first(), d.samples.last()) {
            for k in tierd_lab::run::VMSTAT_KEYS {
                let (x, y) = (a.vmstat.get(*k), b.vmstat.get(*k));
                println!("vmstat {k}: {x:?} -> {y:?}");
            }
        }
        print_status(d);
    }
    assert!(t1.error.is_none(), "the run failed: {:?}", t1.error);
    assert!(
        t1.thp_seen
            .as_deref()
            .is_some_and(|s| s.starts_with("always/")),
        "the guest had THP {:?}",
        t1.thp_seen
    );
    let (_, unmapped, blocks) = t1.workload_cuts.expect("the workload cut its buffer");
    assert!(blocks > 0 && unmapped > 0, "cuts {:?}", t1.workload_cuts);
    assert!(
        t1.thp_split_pmd > 0,
        "the kernel split no THP mapping (thp_split_pmd did not grow)"
    );
    assert_eq!(t1.checksum_failures, Some(0), "checksum failures");
    assert!(
        t1.workload_finished,
        "the integrity workload must not crash"
    );
    let promoted = t1.tierd_promoted.expect("tierd status");
    let demoted = t1.tierd_demoted.expect("tierd status");
    println!("tierd promoted {promoted} and demoted {demoted} pages under checksumming");
    assert!(promoted > 0 && demoted > 0, "pages moved both ways");
}

/// Issue 12's acceptance run: a minute of chaos (pid reuse with `pid_max` 1024, hostile file
/// names, an out-of-scope hog and a bound VMA on the slow node, THP always, three SIGKILLs,
/// 1000 idle connections, an endless header, a slow reader, memory blocks offlined) while
/// tierd promotes and demotes the checksummed integrity workload.
#[test]
fn chaos_short_tierd_survives_and_never_moves_what_it_must_not() {
    let _one = GUEST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(mut env) = env_or_skip("chaos_short") else {
        return;
    };
    // The chaos bounds (issue 12: /metrics within 1 s, tiering resumed within 30 s of a
    // SIGKILL) were set on Debian's 6.12 guest; under TCG the newest kernel's guest runs
    // about 4 times slower on the same host (docs/lab.md), which turns a 1 s bound into a
    // measure of the host's speed. The run is about the daemon, not the kernel's
    // mechanisms: 6.12 unless TIERD_LAB_KERNEL names one (`tierd lab chaos --kernel newest`
    // for the other).
    if std::env::var_os(tierd_vm::kernel::KERNEL_ENV).is_none() {
        env.kernel = tierd_vm::Kernel::fetch_choice(
            &tierd_vm::default_cache_dir(),
            tierd_vm::KernelChoice::Lts,
        )
        .expect("the 6.12 kernel");
    }
    let (r, console) = tierd_lab::chaos::run_chaos(&env, &tierd_lab::chaos::ChaosParams::quick())
        .expect("chaos run");
    if let Some(h) = &r.host {
        println!("{}", h.line());
    }
    println!("{}", tierd_lab::chaos::table(&r));
    for e in &r.events {
        println!("  {e}");
    }
    println!("guest wall time {:.0} s", r.wall_s);
    let failures = r.failures();
    if !failures.is_empty() {
        let lab: Vec<&str> = console.lines().filter(|l| l.starts_with("LAB")).collect();
        panic!(
            "chaos bounds broken:\n  {}\nguest log:\n{}",
            failures.join("\n  "),
            lab.join("\n")
        );
    }
}

/// Issue 14's real-server run: memcached from Debian's packages, filled by `tierd-workload kv`,
/// its pages moved to the slow node, node 0 filled by an eater, then tierd while the Zipf load
/// runs. tierd must bring >= 90 % of the pages holding the hot items (`hotpages`' scan) to
/// node 0 with <= 10 % over-promotion (the server's other pages that reach node 0, against the
/// hot pages), or <= 25 % where the kernel has no idle page tracking for tierd's access check
/// (see the assertion). The run ends once 90 % held for 3 s (at least 20 s, at most
/// `apps::QUICK_MAX_S`, 240 s: a run that never gets there fails then; CI's host once placed
/// 87.6 % in the earlier 120 s, a bound on the host's speed rather than on tierd). ops/s is printed, not asserted: under TCG both nodes cost
/// the same per access, so ops/s shows overhead, not placement.
///
/// Ignored until DAMON's regions were read from the tracepoint: with the sysfs read-back each
/// daemon pass blocked up to an aggregation and tierd placed 79-85 % in 120 s (docs/lab.md,
/// "Real servers in the guest").
#[test]
fn memcached_short_tierd_row_brings_the_hot_items_to_the_fast_node_without_over_promoting() {
    let _one = GUEST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(env) = env_or_skip("memcached_short") else {
        return;
    };
    if let Err(e) = tierd_vm::rootfs::Rootfs::fetch(
        &tierd_vm::default_cache_dir(),
        tierd_vm::rootfs::SERVER_PACKAGES,
    ) {
        assert!(
            std::env::var_os("TIERD_REQUIRE_GUEST").is_none(),
            "rootfs fetch failed and TIERD_REQUIRE_GUEST is set: {e}"
        );
        println!("SKIP memcached_short: rootfs fetch failed: {e}");
        return;
    }
    let exp = experiment("memcached", true).expect("experiment memcached");
    let res = run_experiment(&env, &exp, &[], &mut |_| {}).expect("lab run");
    println!("{}", res.host.line());
    println!("{}", summary::table(&res.experiment, &res.rows));
    let t1 = res.rows.iter().find(|r| r.id == "T1").expect("tierd row");
    let d = &res
        .runs
        .iter()
        .find(|(id, _)| id == "T1")
        .expect("T1 run")
        .1;
    for n in d.notes.iter().filter(|n| {
        ["APP", "READY", "UNTIL", "TIERD", "GUEST"]
            .iter()
            .any(|p| n.starts_with(p))
    }) {
        println!("{n}");
    }
    for l in d.workload_lines.iter().filter(|l| l.starts_with("kv done")) {
        println!("{l}");
    }
    print_status(d);
    println!(
        "T1: t50 {:?} s, t90 {:?} s, hot on fast {:.1} %, over-promotion {:+.1} %, ops/s {:?}, \
         p95 {:?} us ({})",
        t1.t50_s,
        t1.t90_s,
        t1.hot_on_fast_pct,
        t1.over_pct,
        t1.kv_ops_s,
        t1.kv_p95_us,
        tierd_lab::apps::TCG_NOTE
    );
    assert!(t1.error.is_none(), "the run failed: {:?}", t1.error);
    assert!(
        t1.hot_on_fast_pct >= 90.0,
        "tierd placed {:.1} % of the hot items' pages on node 0",
        t1.hot_on_fast_pct
    );
    // Over-promotion is bounded by what tierd can tell apart. With its access check (idle
    // page tracking: a DAMON candidate moves only if its own accessed bit says so) a cold
    // item's page is refused even inside a hot region: 10 %. A kernel without
    // /sys/kernel/mm/page_idle (Debian's 7.3 is built without it) leaves the check off, and
    // the cold items sharing a hot DAMON region with hot ones go with it. With regions of
    // 2 MiB the runs measured +6.7 % to +20.8 %, and once +214 % and once +81 %: one edge
    // region of 512 pages is more than the bound's 307. Without the check tierd now keeps
    // regions to 512 KiB (`unchecked_max_region_kib`, 128 pages a mistake): nine runs of ten
    // measured -0.9 % to +16.5 %, and one +241.5 %, the relative floor falling once the hot
    // set had moved (docs/lab.md, "Without the access check, finer regions"); since then the
    // hot set tierd promoted keeps setting the floor (docs/daemon.md, "The relative floor
    // keeps the hot set tierd moved"). The bound stays a third of NUMA balancing's
    // over-promotion on this workload (+74 %): such a run is a real miss, not a host's speed.
    let check_off = d.notes.iter().any(|n| n.contains("access check off"));
    let bound = if check_off { 25.0 } else { 10.0 };
    assert!(
        t1.over_pct <= bound,
        "over-promotion {:+.1} % (bound {bound} %, access check {})",
        t1.over_pct,
        if check_off { "off" } else { "on" }
    );
    assert!(t1.workload_finished, "the load generator ended normally");
    assert!(t1.kv_ops_s.is_some_and(|o| o > 0.0), "the load ran");
    // DAMON's regions came from the tracepoint (the event filtered by the kdamond's pid), not
    // the sysfs fallback, which would pass the bounds above more slowly and hide a broken
    // trace reader.
    let intervals = d
        .tierd_status
        .as_ref()
        .and_then(|s| {
            s.get("sources")?
                .as_array()?
                .first()?
                .get("intervals")
                .cloned()
        })
        .expect("tierd's /status has the DAMON source's intervals");
    assert_eq!(
        intervals.get("read_from").and_then(|v| v.as_str()),
        Some("tracepoint"),
        "{intervals}"
    );
    assert!(
        intervals
            .get("reads")
            .and_then(serde_json::Value::as_u64)
            .is_some_and(|n| n > 0),
        "{intervals}"
    );
}

/// Flat tiers (issue 16): on the two-node guest without HMAT the kernel puts both nodes in
/// `memory_tier4`; tierd with `[topology] fast = [0], slow = [1]` says it overrides the
/// kernel (both views in its start-up warning) and promotes the hot set: >= 90 % of it on
/// node 0, 90 % reached within the run (up to 120 s, ending early once 95 % holds for 3 s),
/// over-promotion <= 10 %.
#[test]
fn flat_short_tierd_with_topology_override_places_the_hot_set() {
    let _one = GUEST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(env) = env_or_skip("flat_short") else {
        return;
    };
    let exp = experiment("flat", true).expect("experiment flat");
    let res = run_experiment(&env, &exp, &[], &mut |_| {}).expect("lab run");
    println!("{}", res.host.line());
    println!("{}", summary::table(&res.experiment, &res.rows));
    let t1 = res.rows.iter().find(|r| r.id == "T1").expect("tierd row");
    let d = &res
        .runs
        .iter()
        .find(|(id, _)| id == "T1")
        .expect("T1 run")
        .1;
    for n in d
        .notes
        .iter()
        .filter(|n| n.starts_with("TIERD") || n.starts_with("UNTIL"))
    {
        println!("{n}");
    }
    assert!(t1.error.is_none(), "the run failed: {:?}", t1.error);
    // The guest was flat, and tierd said it overrides it.
    let warned = d.notes.iter().find(|n| n.contains("[topology] overrides"));
    let warned = warned.expect("tierd warned that it overrides the kernel's tiers");
    assert!(
        warned.contains("the kernel has memory_tier4 = nodes 0,1"),
        "the guest kernel was not flat: {warned}"
    );
    assert_placed_the_hot_set(t1);
}

/// Idle demotion's short run: a tenant in tierd's scope fills node 0 down to 96 MiB free
/// and goes idle; the chase places its 128 MiB hot set on node 1 and starts touching it 60 s
/// later. tierd (idle demotion at 30 s) must have demoted tenant pages it never saw accessed
/// (DAMON's idle regions), and the newcomer's hot set must reach node 0: the room was made
/// by idle demotion, not by reclaim (node 0 stays above its watermarks, kernel demotion is
/// off in the lab's tierd rows).
#[test]
fn idle_short_tierd_demotes_the_idle_tenant_and_the_newcomer_finds_room() {
    let _one = GUEST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(env) = env_or_skip("idle_short") else {
        return;
    };
    let exp = experiment("idle", true).expect("experiment idle");
    let res = run_experiment(&env, &exp, &[], &mut |_| {}).expect("lab run");
    println!("{}", res.host.line());
    println!("{}", summary::table(&res.experiment, &res.rows));
    let row = res
        .rows
        .iter()
        .find(|r| r.id == "T-idle")
        .expect("tierd row");
    let d = &res
        .runs
        .iter()
        .find(|(id, _)| id == "T-idle")
        .expect("T-idle run")
        .1;
    for n in d.notes.iter().filter(|n| n.starts_with("UNTIL")) {
        println!("{n}");
    }
    assert!(row.error.is_none(), "the run failed: {:?}", row.error);
    let stat = |k: &str| d.tierd_engine_stat(k).unwrap_or(0);
    println!(
        "idle_noted {} pgdemote_idle {} pgdemote_success {} pingpong_promoted {}",
        stat("idle_noted"),
        stat("pgdemote_idle"),
        stat("pgdemote_success"),
        stat("pingpong_promoted")
    );
    // At least the room the hot set needed beyond the 96 MiB left free (128 MiB of pages).
    assert!(
        stat("idle_noted") > 0,
        "DAMON's idle regions reached the engine"
    );
    assert!(
        stat("pgdemote_idle") >= 32 * 256,
        "idle demotion made room: {} pages",
        stat("pgdemote_idle")
    );
    if row.hot_on_fast_pct < 90.0 {
        // One run in CI-like conditions ended with the hot set promoted (tierd's counters)
        // and 0 % of it on node 0, and did not recur in three reruns: say what the run saw.
        print_run_on_failure(d);
        print_status(d);
    }
    assert_placed_the_hot_set(row);
}

/// A failed run's record: the workload's ready line, the harness's notes and each sample's
/// parts by node, so that a failure that does not recur can still be read from the log.
fn print_run_on_failure(d: &tierd_lab::RunData) {
    for l in d.workload_lines.iter().filter(|l| l.ends_with(" ready")) {
        println!("ready: {l}");
    }
    for n in d.notes.iter().filter(|n| !n.starts_with("TIERD_TRACE ")) {
        println!("note: {}", n.chars().take(300).collect::<String>());
    }
    for s in &d.samples {
        println!("t={:.1} parts={:?}", s.t, s.parts);
    }
}
