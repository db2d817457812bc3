//! Boots the two-node HMAT guest and checks what the kernel made of it: node 1 has no CPUs
//! and sits in a lower memory tier (a larger `memory_tierN` id) than node 0; a binary file
//! (a pagemap slice) survives the trip through the console.
//!
//! Needs qemu-system-x86, busybox-static and zstd (`scripts/vm-deps.sh`) and the Debian
//! archive for the first kernel download. When any of that is missing the test prints a
//! `SKIP` line and passes, unless `TIERD_REQUIRE_GUEST` is set (CI with the packages sets
//! it, so a broken harness cannot hide as a skip).
#![allow(clippy::tests_outside_test_module)]

use std::path::Path;
use std::time::{Duration, Instant};

use tierd_vm::initramfs::DEFAULT_BUSYBOX;
use tierd_vm::{default_cache_dir, guest, Guest, GuestSpec, Initramfs, Kernel, KernelChoice};

const SCRIPT: &str = r#"
echo "UNAME $(uname -r)"
for t in /sys/devices/virtual/memory_tiering/memory_tier*; do echo "TIER ${t##*memory_tier} $(cat $t/nodelist)"; done
for n in /sys/devices/system/node/node[0-9]*; do echo "NODE ${n##*node} cpus=[$(cat $n/cpulist)]"; done
echo "HAS_CPU $(cat /sys/devices/system/node/has_cpu)"
dd if=/proc/self/pagemap bs=8 skip=1024 count=512 of=/tmp/pm 2>/dev/null
tierd_export /tmp/pm pagemap-slice
"#;

fn skip_or_fail(why: &str) {
    if std::env::var_os("TIERD_REQUIRE_GUEST").is_some() {
        panic!("guest prerequisites missing and TIERD_REQUIRE_GUEST is set: {why}");
    }
    println!("SKIP guest_boot: {why} (set TIERD_REQUIRE_GUEST=1 to make this a failure)");
}

/// Expands a kernel node list such as `0-1,3` (lib/bitmap-str.c format).
fn nodelist(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().expect("node"), b.parse().expect("node"));
                out.extend(a..=b);
            }
            None => out.push(part.parse().expect("node")),
        }
    }
    out
}

fn tier_of(console: &str, node: u32) -> Option<u32> {
    console
        .lines()
        .filter_map(|l| l.trim_end_matches('\r').strip_prefix("TIER "))
        .find_map(|rest| {
            let (id, list) = rest.split_once(' ').unwrap_or((rest, ""));
            nodelist(list)
                .contains(&node)
                .then(|| id.parse().expect("tier id"))
        })
}

#[test]
fn two_node_guest_puts_the_cpuless_node_in_a_lower_tier() {
    if !guest::qemu_available() {
        return skip_or_fail("qemu-system-x86_64 not found");
    }
    if !Path::new(DEFAULT_BUSYBOX).is_file() {
        return skip_or_fail("/bin/busybox (busybox-static) not found");
    }
    let t = Instant::now();
    let kernel = match KernelChoice::from_env()
        .and_then(|k| Kernel::fetch_choice(&default_cache_dir(), k))
    {
        Ok(k) => k,
        Err(e) => return skip_or_fail(&format!("kernel fetch failed: {e}")),
    };
    let fetch = t.elapsed();

    let t = Instant::now();
    let fs = Initramfs::standard(Path::new(DEFAULT_BUSYBOX), SCRIPT).expect("initramfs");
    // Timed on its own for the report (Guest::run compresses it again).
    let gz_bytes = fs.to_cpio_gz().expect("gzip").len();
    let build = t.elapsed();
    let dir = std::env::temp_dir().join(format!("tierd-vm-boot-{}", std::process::id()));
    let guest = Guest::new(kernel.clone(), dir.clone());
    let out = guest
        .run(&GuestSpec::two_node(), &fs, "", Duration::from_secs(180))
        .expect("guest run");
    std::fs::remove_dir_all(&dir).ok();
    println!(
        "guest_boot: kernel {} fetch {:.2} s, initramfs {:.3} s ({gz_bytes} bytes), boot-to-END {:.2} s ({})",
        kernel.version,
        fetch.as_secs_f64(),
        build.as_secs_f64(),
        out.wall.as_secs_f64(),
        out.accel
    );
    let c = &out.console;
    assert_eq!(out.rc, Some(0), "run.sh failed:\n{c}");
    assert!(
        c.contains(&format!("UNAME {}", kernel.version)),
        "guest runs the fetched kernel:\n{c}"
    );

    let (t0, t1) = (tier_of(c, 0), tier_of(c, 1));
    let (Some(t0), Some(t1)) = (t0, t1) else {
        panic!("both nodes must be in a memory tier:\n{c}")
    };
    assert!(
        t1 > t0,
        "node 1 (tier {t1}) must be below node 0 (tier {t0}):\n{c}"
    );

    assert!(
        c.lines().any(|l| l.trim_end() == "NODE 1 cpus=[]"),
        "node 1 has no CPUs:\n{c}"
    );
    assert!(
        c.lines().any(|l| l.trim_end() == "NODE 0 cpus=[0-1]"),
        "node 0 has both vCPUs:\n{c}"
    );
    let has_cpu = c
        .lines()
        .find_map(|l| l.trim_end().strip_prefix("HAS_CPU "))
        .expect("has_cpu line");
    assert_eq!(nodelist(has_cpu), [0]);

    // 512 pagemap entries of busybox's text (vpn 1024 = 0x400000, static non-PIE): binary
    // data with bit 63 set for present pages.
    let pm = out.file("pagemap-slice").expect("exported pagemap slice");
    assert_eq!(pm.data.len(), 512 * 8);
    let present = pm
        .data
        .chunks_exact(8)
        .filter(|e| u64::from_le_bytes((*e).try_into().expect("8 bytes")) >> 63 == 1)
        .count();
    assert!(present > 0, "busybox's own text is mapped and present");
}
