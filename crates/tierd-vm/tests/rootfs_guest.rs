//! The Debian root filesystem of real servers (issue 14): memcached, redis-server and numactl
//! with their shared libraries, from bookworm's packages.
//!
//! - On the host: the tree's own dynamic linker runs the tree's binaries with only the tree's
//!   libraries (`ld.so --library-path`), so a library the closure lacks shows here without a
//!   guest.
//! - In the guest: the same binaries start from `/usr/bin` next to busybox's `/bin`, and
//!   `numactl --hardware` sees the two-node machine.
//!
//! Needs the Debian archive for the first download (cached after), and for the guest part
//! qemu and busybox-static like the other guest tests; SKIPs without them unless
//! `TIERD_REQUIRE_GUEST` is set.
#![allow(clippy::tests_outside_test_module)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tierd_vm::initramfs::DEFAULT_BUSYBOX;
use tierd_vm::rootfs::{Rootfs, SERVER_PACKAGES};
use tierd_vm::{default_cache_dir, guest, Guest, GuestSpec, Initramfs, Kernel, KernelChoice};

fn skip_or_fail(test: &str, why: &str) {
    assert!(
        std::env::var_os("TIERD_REQUIRE_GUEST").is_none(),
        "guest prerequisites missing and TIERD_REQUIRE_GUEST is set: {why}"
    );
    println!("SKIP {test}: {why} (set TIERD_REQUIRE_GUEST=1 to make this a failure)");
}

/// The rootfs, or `None` after a SKIP line when the archive cannot be reached. A fetch that
/// reached the archive but found the tree incomplete (a missing library) is a failure.
fn rootfs_or_skip(test: &str) -> Option<Rootfs> {
    match Rootfs::fetch(&default_cache_dir(), SERVER_PACKAGES) {
        Ok(r) => Some(r),
        Err(e @ tierd_vm::Error::Rootfs(_)) => panic!("rootfs incomplete: {e}"),
        Err(e) => {
            skip_or_fail(test, &format!("rootfs fetch failed: {e}"));
            None
        }
    }
}

#[test]
fn rootfs_binaries_run_with_only_the_trees_libraries() {
    let Some(r) = rootfs_or_skip("rootfs_host") else {
        return;
    };
    println!("rootfs {} ({} packages)", r.dir.display(), r.packages.len());
    for p in &r.packages {
        println!("  {} {}", p.name, p.version);
    }
    let names: Vec<&str> = r.packages.iter().map(|p| p.name.as_str()).collect();
    for want in [
        "memcached",
        "redis-tools",
        "numactl",
        "libc6",
        "libevent-2.1-7",
    ] {
        assert!(names.contains(&want), "{want} not in {names:?}");
    }
    for skipped in ["perl", "debconf", "adduser", "init-system-helpers"] {
        assert!(!names.contains(&skipped), "{skipped} unpacked");
    }
    let lib = r.dir.join("usr/lib/x86_64-linux-gnu");
    let ld = lib.join("ld-linux-x86-64.so.2");
    let run = |bin: &str, arg: &str| {
        let out = Command::new(&ld)
            .arg("--inhibit-cache")
            .arg("--library-path")
            .arg(&lib)
            .arg(r.dir.join(bin))
            .arg(arg)
            .output()
            .expect("run the tree's ld.so");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, v) = run("usr/bin/memcached", "-V");
    assert!(ok && v.starts_with("memcached 1."), "{v}");
    let (ok, v) = run("usr/bin/redis-server", "--version");
    assert!(ok && v.contains("Redis server v="), "{v}");
    // numactl's usage text names the options the lab uses.
    let (_, v) = run("usr/bin/numactl", "--usage");
    assert!(v.contains("--preferred-many"), "{v}");
    // The guest's files: the interpreter through the usr-merge link, and a passwd for `-u`.
    assert!(Path::new(&r.dir.join("lib64/ld-linux-x86-64.so.2")).exists());
    let passwd = std::fs::read_to_string(r.dir.join("etc/passwd")).expect("passwd");
    assert!(passwd.starts_with("root:x:0:0:"));
    assert!(
        !r.dir.join("bin").exists(),
        "the guest's /bin stays busybox's"
    );
}

const SCRIPT: &str = r#"
echo "MC $(/usr/bin/memcached -V 2>&1)"
echo "RS $(/usr/bin/redis-server --version 2>&1)"
/usr/bin/numactl --hardware 2>&1 | sed 's/^/NH /'
/usr/bin/migratepages 2>&1 | head -n1 | sed 's/^/MP /'
# A real server answers: memcached as root needs -u; set and get a key with busybox nc.
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
/usr/bin/memcached -u root -l 127.0.0.1 -p 11211 -m 64 -t 1 &
M=$!
sleep 2
printf 'set k 0 0 5\r\nhello\r\nget k\r\nquit\r\n' | nc 127.0.0.1 11211 | tr -d '\r' | sed 's/^/MCGET /'
kill $M
"#;

#[test]
fn guest_runs_memcached_redis_and_numactl_from_the_rootfs() {
    if !guest::qemu_available() {
        return skip_or_fail("rootfs_guest", "qemu-system-x86_64 not found");
    }
    if !Path::new(DEFAULT_BUSYBOX).is_file() {
        return skip_or_fail("rootfs_guest", "/bin/busybox (busybox-static) not found");
    }
    let kernel = match KernelChoice::from_env()
        .and_then(|k| Kernel::fetch_choice(&default_cache_dir(), k))
    {
        Ok(k) => k,
        Err(e) => return skip_or_fail("rootfs_guest", &format!("kernel fetch failed: {e}")),
    };
    let Some(r) = rootfs_or_skip("rootfs_guest") else {
        return;
    };
    let mut fs = Initramfs::standard(Path::new(DEFAULT_BUSYBOX), SCRIPT).expect("initramfs");
    fs.add_tree(&r.dir).expect("add the rootfs");
    let work = std::env::temp_dir().join(format!("tierd-vm-rootfs-guest-{}", std::process::id()));
    let out = Guest::new(kernel, work.clone())
        .run(&GuestSpec::two_node(), &fs, "", Duration::from_secs(300))
        .expect("guest run");
    std::fs::remove_dir_all(&work).ok();
    let lines: Vec<&str> = out
        .console
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| {
            ["MC ", "RS ", "NH ", "MP ", "MCGET "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .collect();
    for l in &lines {
        println!("{l}");
    }
    let has = |p: &str| lines.iter().any(|l| l.starts_with(p));
    assert!(has("MC memcached 1."), "memcached -V");
    assert!(has("RS Redis server v="), "redis-server --version");
    assert!(has("NH available: 2 nodes (0-1)"), "numactl --hardware");
    assert!(has("NH node 1 cpus:"), "numactl --hardware lists node 1");
    assert!(has("MP usage: migratepages"), "migratepages runs");
    assert!(
        has("MCGET VALUE k 0 5") && has("MCGET hello"),
        "memcached answers"
    );
}
