//! End to end: `tierd run` with the DAMON source promotes a hot set in a real tiered guest.
//!
//! The two-node HMAT guest (node 1: CPU-less, lower tier) runs the project's workload: a
//! pointer chase over the first 128 MiB of a 512 MiB buffer, placed on node 1 (bind, touch,
//! then reset to the default policy), hot and cold parts in separate VMAs so that
//! `/proc/PID/numa_maps` reports them apart. With the kernel's own NUMA balancing off, tierd
//! (scope: the workload's cgroup; source: DAMON) must
//! - move >= 90 % of the hot part to node 0 within `HOT_DEADLINE_S` of starting,
//! - leave >= 80 % of the cold part on node 1,
//! - report counters that agree with numa_maps: its `pgpromote_success` equals the pages that
//!   arrived on node 0, and the kernel's `pgmigrate_success` grew by what tierd moved.
//!
//! Placement is read from numa_maps inside the guest, every 2 s, independently of tierd. The
//! test prints the placement over time, tierd's CPU time and its move_pages throughput. tierd
//! is stopped with SIGTERM and must exit 0 and hand its kdamond back.
//!
//! THP stays `never` here, deliberately (issue 13): this test's point is a page-for-page match
//! between tierd's counters and numa_maps in 4 KiB pages. The same check with THP `always`
//! (tierd's migrated MiB and THP count against `pgmigrate_success` and
//! `thp_migration_success`, within 1 %) is the lab's A THP-always short run
//! (crates/tierd-lab/tests/lab_ci.rs), on the same guest and workload; running this test a
//! second time with THP on would add a ~3-minute guest to every test run and check nothing
//! that one does not.
//!
//! Needs what `guest_boot` needs; it SKIPs (or fails under `TIERD_REQUIRE_GUEST`) likewise.
//! It also builds statically linked `tierd` and `tierd-workload` (release, `target/guest`).
#![allow(clippy::tests_outside_test_module)]

use std::path::Path;
use std::time::Duration;

use tierd_linux::read::numa_maps::parse_numa_maps_line;
use tierd_linux::status::Snapshot;
use tierd_vm::initramfs::DEFAULT_BUSYBOX;
use tierd_vm::{
    binaries, default_cache_dir, guest, Guest, GuestSpec, Initramfs, Kernel, KernelChoice,
};

const TOTAL_MIB: u64 = 512;
const HOT_MIB: u64 = 128;
const HOT_PAGES: u64 = HOT_MIB * 256;
const COLD_PAGES: u64 = (TOTAL_MIB - HOT_MIB) * 256;
/// Seconds after tierd starts by which 90 % of the hot part must be on node 0: a generous
/// bound (it takes 4-8 s on a 2-core host, idle or busy), so that a slow or shared CI host is
/// not a failure.
const HOT_DEADLINE_S: f64 = 40.0;
/// How long tierd runs before it is sent SIGTERM.
const TIERD_SECS: u32 = 45;

const CONFIG: &str = r#"
[scope]
cgroups = ["/chase"]

[sources]
enabled = ["damon"]

[sources.damon]
sample_us = 5000
aggr_us = 100000
update_us = 1000000
min_nr_regions = 10
max_nr_regions = 1000

[engine]
freq_threshold = 2

[engine.demotion]
# Node 0 is nowhere near full here; without demotion, every page tierd moved is a promotion,
# which keeps the comparison with numa_maps exact.
enabled = false

[daemon]
refresh_ms = 1000
"#;

/// The reloads the script sends (SIGHUP): first a live change (the rate limit), then one that
/// needs a restart (DAMON's sampling interval), which is refused.
fn reloaded(live: bool) -> String {
    if live {
        CONFIG.replace(
            "freq_threshold = 2\n",
            "freq_threshold = 2\npromote_rate_limit_mbps = 4096\n",
        )
    } else {
        CONFIG.replace("sample_us = 5000\n", "sample_us = 10000\n")
    }
}

fn script() -> String {
    format!(
        r#"
# 4 KiB pages (the guest kernel defaults THP to always) and no kernel tiering: tierd alone.
echo never > /sys/kernel/mm/transparent_hugepage/enabled
echo 0 > /proc/sys/kernel/numa_balancing
# busybox init leaves loopback down; the metrics endpoint and `tierd status` need it.
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
mkdir -p /sys/fs/cgroup/chase
cat > /tmp/chase.sh <<'EOS'
echo $$ > /sys/fs/cgroup/chase/cgroup.procs
exec /bin/tierd-workload chase --total-mib {TOTAL_MIB} --hot-mib {HOT_MIB} --secs {chase} --node 1 --interval-ms 2000 --tick-us 1000
EOS
sh /tmp/chase.sh > /tmp/chase.log 2>&1 &
i=0
while ! grep -q ' ready' /tmp/chase.log; do sleep 0.2; i=$((i+1)); [ $i -gt 600 ] && break; done
READY=$(grep ' ready' /tmp/chase.log | head -n1)
echo "E2E $READY"
# Anchored: the line also has ticker_pid=.
PID=$(echo "$READY" | sed -n 's/^chase pid=\([0-9]*\) .*/\1/p')
HOT=$(echo "$READY" | sed -n 's/.* addr=0x\([0-9a-f]*\) .*/\1/p')
COLD=$(echo "$READY" | sed -n 's/.* cold_addr=0x\([0-9a-f]*\) .*/\1/p')
snap() {{
  T=$(cut -d' ' -f1 /proc/uptime)
  echo "E2E NUMA t=$T hot $(grep "^$HOT " /proc/$PID/numa_maps)"
  echo "E2E NUMA t=$T cold $(grep "^$COLD " /proc/$PID/numa_maps)"
}}
snap
echo "E2E VMSTAT0 $(grep '^pgmigrate_success ' /proc/vmstat)"
echo "E2E START $(cut -d' ' -f1 /proc/uptime)"
/bin/tierd run --config /lab/tierd.toml > /tmp/tierd.out 2> /tmp/tierd.err &
TPID=$!
k=0
while [ $k -lt {snaps} ]; do sleep 2; snap; k=$((k+1)); done
# SIGHUP: a live change applies (the store kept), a restart-only one is refused.
cat > /lab/tierd.toml <<'EOC'
{live}EOC
kill -HUP $TPID
sleep 1
cat > /lab/tierd.toml <<'EOC'
{restart}EOC
kill -HUP $TPID
sleep 1
/bin/tierd status --json > /tmp/status.json 2> /tmp/status.err
snap
echo "E2E VMSTAT1 $(grep '^pgmigrate_success ' /proc/vmstat)"
# SIGTERM: tierd finishes the batch in flight, hands DAMON back and exits 0.
kill -TERM $TPID
wait $TPID
echo "E2E TIERD_RC $?"
echo "E2E KDAMONDS $(cat /sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds)"
sed 's/^/E2E TIERD_ERR /' /tmp/tierd.err
tail -n 5 /tmp/tierd.out | sed 's/^/E2E TIERD_OUT /'
sed 's/^/E2E STATUS_ERR /' /tmp/status.err
tierd_export /tmp/status.json status.json
kill $PID 2>/dev/null
wait
sed 's/^/E2E CHASE /' /tmp/chase.log
"#,
        chase = TIERD_SECS + 30,
        snaps = (TIERD_SECS - 2) / 2,
        live = reloaded(true),
        restart = reloaded(false),
    )
}

fn skip_or_fail(why: &str) {
    if std::env::var_os("TIERD_REQUIRE_GUEST").is_some() {
        panic!("guest prerequisites missing and TIERD_REQUIRE_GUEST is set: {why}");
    }
    println!("SKIP daemon_e2e: {why} (set TIERD_REQUIRE_GUEST=1 to make this a failure)");
}

/// One numa_maps reading of one part.
#[derive(Clone, Copy, Debug)]
struct Reading {
    t: f64,
    n0: u64,
    n1: u64,
}

fn readings(console: &str, part: &str) -> Vec<Reading> {
    console
        .lines()
        .filter_map(|l| l.trim_end_matches('\r').strip_prefix("E2E NUMA t="))
        .filter_map(|rest| {
            let (t, rest) = rest.split_once(' ')?;
            let line = rest.strip_prefix(part)?.trim();
            let e = parse_numa_maps_line(line).ok()?;
            let on = |n: u16| {
                e.nodes
                    .get(&tierd_engine::types::NodeId(n))
                    .copied()
                    .unwrap_or(0)
            };
            Some(Reading {
                t: t.parse().ok()?,
                n0: on(0),
                n1: on(1),
            })
        })
        .collect()
}

fn value_after(console: &str, prefix: &str) -> Option<f64> {
    console.lines().find_map(|l| {
        l.trim_end_matches('\r')
            .strip_prefix(prefix)?
            .split_whitespace()
            .last()?
            .parse()
            .ok()
    })
}

#[test]
#[allow(clippy::cast_precision_loss)]
fn tierd_with_damon_promotes_the_hot_set_and_leaves_the_cold_part() {
    if !guest::qemu_available() {
        return skip_or_fail("qemu-system-x86_64 not found");
    }
    if !Path::new(DEFAULT_BUSYBOX).is_file() {
        return skip_or_fail("/bin/busybox (busybox-static) not found");
    }
    let kernel = match KernelChoice::from_env()
        .and_then(|k| Kernel::fetch_choice(&default_cache_dir(), k))
    {
        Ok(k) => k,
        Err(e) => return skip_or_fail(&format!("kernel fetch failed: {e}")),
    };
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bins = binaries::build_static(&workspace, &["tierd", "tierd-workload"])
        .expect("static build of tierd and tierd-workload");

    let mut fs = Initramfs::standard(Path::new(DEFAULT_BUSYBOX), &script()).expect("initramfs");
    fs.add_host_file(&bins.join("tierd"), "/bin/tierd", Some(0o755))
        .expect("tierd");
    fs.add_host_file(
        &bins.join("tierd-workload"),
        "/bin/tierd-workload",
        Some(0o755),
    )
    .expect("tierd-workload");
    fs.add_file("/lab/tierd.toml", CONFIG.as_bytes().to_vec(), 0o644)
        .expect("config");
    let dir = std::env::temp_dir().join(format!("tierd-vm-e2e-{}", std::process::id()));
    let out = Guest::new(kernel, dir.clone())
        .run(&GuestSpec::two_node(), &fs, "", Duration::from_secs(600))
        .expect("guest run");
    std::fs::remove_dir_all(&dir).ok();
    let c = &out.console;
    let log: String = c
        .lines()
        .filter(|l| l.starts_with("E2E"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(out.rc, Some(0), "guest script failed:\n{c}");
    assert!(
        c.contains("E2E TIERD_RC 0"),
        "tierd must exit 0 on SIGTERM:\n{log}"
    );
    assert!(
        c.contains("E2E KDAMONDS 0"),
        "tierd must give DAMON's kdamond back when it stops:\n{log}"
    );

    let start = value_after(c, "E2E START ").expect("start time");
    let hot = readings(c, "hot");
    let cold = readings(c, "cold");
    assert!(
        hot.len() > 5 && cold.len() > 5,
        "numa_maps readings:\n{log}"
    );
    let (h0, c0) = (hot[0], cold[0]);
    assert!(
        h0.n1 + h0.n0 == HOT_PAGES && c0.n1 + c0.n0 == COLD_PAGES,
        "both parts fully resident at start:\n{log}"
    );
    assert!(
        h0.n1 >= HOT_PAGES * 99 / 100,
        "hot part starts on node 1:\n{log}"
    );

    println!("placement over time (numa_maps, s since tierd started; hot/cold pages on node 0):");
    for (h, k) in hot.iter().zip(&cold) {
        println!(
            "  t={:6.1}  hot {:5.1} %  cold {:5.1} %",
            h.t - start,
            100.0 * h.n0 as f64 / HOT_PAGES as f64,
            100.0 * k.n0 as f64 / COLD_PAGES as f64
        );
    }
    let reached = hot
        .iter()
        .find(|r| r.n0 * 10 >= HOT_PAGES * 9)
        .map(|r| r.t - start);
    let Some(t90) = reached else {
        panic!("tierd never placed 90 % of the hot part on node 0:\n{log}")
    };
    println!("90 % of the hot part on node 0 after {t90:.1} s");
    assert!(
        t90 <= HOT_DEADLINE_S,
        "90 % of the hot part took {t90:.1} s (bound {HOT_DEADLINE_S} s):\n{log}"
    );
    let last_cold = *cold.last().expect("cold readings");
    assert!(
        last_cold.n1 * 10 >= COLD_PAGES * 8,
        "at least 80 % of the cold part must stay on node 1, got {} of {COLD_PAGES}:\n{log}",
        last_cold.n1
    );

    let status = out.file("status.json").expect("status.json exported");
    let snap: Snapshot = serde_json::from_slice(&status.data).expect("status JSON");
    let promoted = snap.engine.get("pgpromote_success").copied().unwrap_or(0);
    // The status was taken between the last two numa_maps readings of each part.
    let arrived_before = hot[hot.len() - 2].n0 + cold[cold.len() - 2].n0 - h0.n0 - c0.n0;
    let arrived_after = hot[hot.len() - 1].n0 + cold[cold.len() - 1].n0 - h0.n0 - c0.n0;
    println!(
        "tierd: pgpromote_success {promoted}, numa_maps node-0 growth {arrived_before}..{arrived_after}, \
         mover {} pages in {:.2} s ({:.0} MiB/s), daemon CPU {:.2} s ({:.2} s in the kernel)",
        snap.mover.pages_moved,
        snap.mover.seconds,
        snap.mover.pages_moved as f64 / 256.0 / snap.mover.seconds.max(1e-9),
        snap.daemon_cpu_s,
        snap.daemon_cpu_sys_s
    );
    assert!(
        promoted >= arrived_before && promoted <= arrived_after,
        "tierd's pgpromote_success ({promoted}) must match what numa_maps saw arrive on node 0 \
         ({arrived_before}..{arrived_after}):\n{log}"
    );
    assert_eq!(
        snap.mover.pages_moved, promoted,
        "with demotion off every moved page is a promotion"
    );
    let vm0 = value_after(c, "E2E VMSTAT0 pgmigrate_success").expect("vmstat before");
    let vm1 = value_after(c, "E2E VMSTAT1 pgmigrate_success").expect("vmstat after");
    assert!(
        vm1 - vm0 >= promoted as f64,
        "the kernel's pgmigrate_success grew by {} but tierd claims {promoted}",
        vm1 - vm0
    );
    // The reloads: one applied, one refused, and promotion went on (the store was kept).
    let reloads = |r: &str| snap.config_reloads.get(r).copied().unwrap_or(0);
    assert_eq!(
        (reloads("ok"), reloads("refused"), reloads("invalid")),
        (1, 1, 0),
        "{:?}:\n{log}",
        snap.config_reloads
    );
    assert!(
        log.contains("reloaded: engine.promote_rate_limit_mbps 65536 -> 4096"),
        "{log}"
    );
    assert!(
        log.contains("sources.damon.sample_us 5000 -> 10000 needs a restart"),
        "{log}"
    );
    assert!(
        snap.sources
            .iter()
            .any(|s| s.name == "damon" && s.available),
        "DAMON must be reported running: {:?}",
        snap.sources
    );
}
