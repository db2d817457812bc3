//! Captures real `/proc` and `/sys` files from the 6.12 two-node guest into a directory
//! that keeps their paths (`proc/...`, `sys/...`), so the Linux backend's readers can use
//! it as their `/proc` or `/sys` root in tests.
//!
//! The guest script ([`CAPTURE_SCRIPT`]) first creates something worth capturing: a cgroup
//! with `memory.low`/`memory.high` and `cpuset.mems=1` holding a process whose 32 MiB
//! buffer therefore sits on the slow node, a process with a 32 MiB buffer on node 0, and a
//! busy `awk` loop that is the target of a DAMON `vaddr` context with a `stat` scheme.
//! It then copies files with `cat` (sysfs reports a size of 4096 for every attribute, so
//! anything that trusts `st_size` would copy garbage), records unreadable (write-only)
//! attributes, and exports the tree as one gzip'd tar through the console.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::guest::{run, GuestOutput};
use crate::initramfs::{Initramfs, DEFAULT_BUSYBOX};
use crate::kernel::Kernel;
use crate::spec::GuestSpec;
use crate::Error;

/// Extra kernel arguments of the capture: no address-space randomization, so the `[heap]`
/// of the static (non-PIE) busybox starts right after its data and a short `pagemap`
/// prefix (virtual page 0 to the end of the heap) covers text, data and heap.
pub const APPEND: &str = "norandmaps";

/// Name under which the guest exports the fixture tree.
pub const TREE_NAME: &str = "fixtures.tgz";

/// The guest side of `tierd-vm capture-fixtures` (runs as `/lab/run.sh`).
pub const CAPTURE_SCRIPT: &str = r#"# tierd-vm capture-fixtures: copy real /proc and /sys files to /tmp/fx keeping their paths
FX=/tmp/fx
mkdir -p $FX/meta
ERR=$FX/meta/UNREADABLE.txt
: > $ERR
# cap PATH...: files by content (cat: sysfs sizes are fake), symlinks as links, dirs recursively
cap() {
  local p q
  for p in "$@"; do
    if [ -L "$p" ]; then
      [ -d "$FX${p%/*}" ] || mkdir -p "$FX${p%/*}"
      ln -sf "$(readlink "$p")" "$FX$p"
    elif [ -d "$p" ]; then
      # git keeps no empty directories: list them (e.g. node1/access0/targets of a CPU-less node)
      find "$p" -type d -empty >> $FX/meta/EMPTY-DIRS.txt
      find "$p" -mindepth 1 \( -type f -o -type l \) > /tmp/cap.list
      while read -r q; do cap "$q"; done < /tmp/cap.list
    elif [ -f "$p" ]; then
      [ -d "$FX${p%/*}" ] || mkdir -p "$FX${p%/*}"
      cat "$p" > "$FX$p" 2>/dev/null || { rm -f "$FX$p"; echo "$p" >> $ERR; }
    else
      echo "$p (absent)" >> $ERR
    fi
  done
}
t0=$(cut -d' ' -f1 /proc/uptime)
uname -r > $FX/meta/uname-r

# --- workload: a cgroup whose memory comes from node 1, two 32 MiB buffers, a hot loop
echo +cpuset > /sys/fs/cgroup/cgroup.subtree_control
CG=/sys/fs/cgroup/tierd-fx
mkdir -p $CG
echo 1 > $CG/cpuset.mems
echo $((64 << 20)) > $CG/memory.low
echo $((768 << 20)) > $CG/memory.high
# dd keeps its 32 MiB buffer (filled from /dev/zero) while blocked on a pipe nobody reads
sh -c 'echo $$ > /tmp/pid.fast; exec dd if=/dev/zero bs=32M count=1 2>/dev/null' | sleep 100000 &
sh -c "echo \$\$ > $CG/cgroup.procs; echo \$\$ > /tmp/pid.slow; exec dd if=/dev/zero bs=32M count=1 2>/dev/null" | sleep 100000 &
echo 'BEGIN { n = 200000; for (i = 0; i < n; i++) a[i] = i; for (;;) for (i = 0; i < n; i++) s += a[i] }' > /tmp/hot.awk
sh -c 'echo $$ > /tmp/pid.hot; exec awk -f /tmp/hot.awk' &
sleep 3
PF=$(cat /tmp/pid.fast); PS=$(cat /tmp/pid.slow); PH=$(cat /tmp/pid.hot)
cat > $FX/meta/pids.env <<EOF
# which guest PID is which (the proc/<pid> directories of this fixture)
PID_INIT=1
# dd holding a 32 MiB anonymous buffer, root cgroup, default policy: node 0
PID_FAST=$PF
# dd holding a 32 MiB buffer in cgroup tierd-fx (cpuset.mems=1): node 1
PID_SLOW=$PS
# busybox awk looping over a 200000-entry array; the DAMON vaddr target
PID_HOT=$PH
CGROUP=/sys/fs/cgroup/tierd-fx
EOF

# --- DAMON: one kdamond, vaddr target = the hot loop, one `stat` scheme
D=/sys/kernel/mm/damon/admin/kdamonds
echo 1 > $D/nr_kdamonds; K=$D/0
echo 1 > $K/contexts/nr_contexts; C=$K/contexts/0
echo vaddr > $C/operations
echo 5000 > $C/monitoring_attrs/intervals/sample_us
echo 100000 > $C/monitoring_attrs/intervals/aggr_us
echo 1 > $C/targets/nr_targets
echo $PH > $C/targets/0/pid_target
echo 1 > $C/schemes/nr_schemes; S=$C/schemes/0
echo stat > $S/action
BIG=18446744073709551615
echo 0 > $S/access_pattern/sz/min; echo $BIG > $S/access_pattern/sz/max
echo 0 > $S/access_pattern/nr_accesses/min; echo 1000000 > $S/access_pattern/nr_accesses/max
echo 0 > $S/access_pattern/age/min; echo $BIG > $S/access_pattern/age/max
echo on > $K/state
sleep 4
echo update_schemes_stats > $K/state
echo update_schemes_tried_regions > $K/state
cap /sys/kernel/mm/damon
ls -lR /sys/kernel/mm/damon/admin > $FX/meta/damon-admin.ls-lR.txt
echo "damon: state=$(cat $K/state) regions=$(ls -d $C/schemes/0/tried_regions/[0-9]* 2>/dev/null | wc -l)"

# --- processes
: > $FX/meta/pagemap-entries.txt
for pid in 1 $PF $PS $PH; do
  cap /proc/$pid/numa_maps /proc/$pid/maps /proc/$pid/smaps /proc/$pid/status /proc/$pid/cgroup /proc/$pid/cmdline /proc/$pid/stat
  end=$(awk '$6 == "[heap]" { split($1, r, "-"); print r[2] }' /proc/$pid/maps)
  [ -n "$end" ] || end=$(awk 'NR == 1 { split($1, r, "-"); print r[2] }' /proc/$pid/maps)
  n=$(( 0x$end / 4096 ))
  [ $n -gt 65536 ] && n=65536
  dd if=/proc/$pid/pagemap of=$FX/proc/$pid/pagemap bs=8 count=$n 2>/dev/null || echo "/proc/$pid/pagemap" >> $ERR
  echo "$pid $n 0x$end" >> $FX/meta/pagemap-entries.txt
done
# the 32 MiB buffers live far up (mmap area): slices of pagemap for the largest anonymous mapping
: > $FX/meta/pagemap-slices.txt
for pid in $PF $PS; do
  set -- $(awk 'NF == 5 { split($1, r, "-"); print r[1], r[2] }' /proc/$pid/maps | while read a b; do
    echo "$(( 0x$b - 0x$a )) $a"; done | sort -n | tail -1)
  vpn=$(( 0x$2 / 4096 )); n=$(( $1 / 4096 ))
  dd if=/proc/$pid/pagemap of=$FX/meta/pagemap-$pid-$2.bin bs=8 skip=$vpn count=$n 2>/dev/null || echo "/proc/$pid/pagemap@$2" >> $ERR
  echo "$pid 0x$2 $n meta/pagemap-$pid-$2.bin" >> $FX/meta/pagemap-slices.txt
done

# --- cgroups
cap $CG /sys/fs/cgroup/cgroup.controllers /sys/fs/cgroup/cgroup.subtree_control /sys/fs/cgroup/cgroup.procs \
    /sys/fs/cgroup/memory.stat /sys/fs/cgroup/memory.numa_stat

# --- topology, tiers, knobs, counters
cap /sys/devices/system/node /sys/devices/virtual/memory_tiering /sys/kernel/mm/numa \
    /sys/kernel/mm/transparent_hugepage /sys/devices/system/memory/block_size_bytes \
    /sys/devices/system/cpu/online /sys/devices/system/cpu/possible /sys/devices/system/cpu/present \
    /proc/sys/kernel/numa_balancing /proc/sys/kernel/numa_balancing_promote_rate_limit_MBps \
    /proc/sys/vm/zone_reclaim_mode /sys/kernel/debug/sched/numa_balancing \
    /proc/vmstat /proc/meminfo /proc/zoneinfo /proc/buddyinfo /proc/cmdline
for m in /sys/devices/system/memory/memory[0-9]*; do
  cap $m/phys_index $m/state $m/online $m/valid_zones $m/removable
  for l in $m/node[0-9]*; do cap $l; done
done
echo off > $K/state
dmesg > $FX/meta/dmesg.txt
echo "capture took $(cut -d' ' -f1 /proc/uptime) - $t0 s of guest time; $(find $FX -type f | wc -l) files"
tierd_export_tree $FX fixtures.tgz
"#;

/// Name under which the folio capture exports its tree.
pub const FOLIO_TREE_NAME: &str = "folio-fixtures.tgz";

/// Extra kernel arguments of the folio capture: as [`APPEND`], and one 1 GiB hugetlb page
/// reserved at boot (mm/hugetlb.c `hugepages=`), when memory is not yet fragmented: the
/// guest rarely finds a free aligned GiB later.
pub const FOLIO_APPEND: &str = "norandmaps hugepagesz=1G hugepages=1";

/// Guest path of the static `tierd-workload` in the folio capture's initramfs.
pub const FOLIO_WORKLOAD: &str = "/bin/tierd-workload";

/// The guest side of `tierd-vm capture-folio-fixtures` (runs as `/lab/run.sh`): THP
/// `always`, khugepaged asleep (so nothing is collapsed back), 2 MiB hugetlb pages reserved
/// (and the 1 GiB one of [`FOLIO_APPEND`]), then `tierd-workload folios` holding an 18 MiB
/// anonymous `MADV_HUGEPAGE` buffer and files mapped from hugetlbfs mounts. It snapshots that
/// process (`whole/`), splits two of the buffer's huge pages through debugfs
/// (`split_huge_pages`, mm/huge_memory.c `split_huge_pages_write()`:
/// `pid,0xstart,0xend[,new_order]`): the 2nd to base pages, the 4th to order-4 (64 KiB)
/// folios, a size tierd does not track, and snapshots it again (`split/`). A snapshot holds
/// the process's `smaps`, `maps`, `numa_maps`, the pagemap entries of each of its buffers, and
/// the `/proc/kpageflags` entries tierd's folio reader needs for the frames they map (the 513
/// entries from each 2 MiB-aligned frame block, and three entries per 1 GiB block), never the
/// whole file (8 bytes per frame of the machine).
pub const FOLIO_CAPTURE_SCRIPT: &str = r#"# tierd-vm capture-folio-fixtures
FX=/tmp/fx
mkdir -p $FX/meta
uname -r > $FX/meta/uname-r
mount -t debugfs none /sys/kernel/debug 2>/dev/null
THP=/sys/kernel/mm/transparent_hugepage
echo always > $THP/enabled
echo 3600000 > $THP/khugepaged/scan_sleep_millisecs
echo 3600000 > $THP/khugepaged/alloc_sleep_millisecs
HP=/sys/kernel/mm/hugepages
echo 8 > $HP/hugepages-2048kB/nr_hugepages
mkdir -p /mnt/h2m /mnt/h1g
mount -t hugetlbfs -o pagesize=2M none /mnt/h2m
H="--hugetlb /mnt/h2m/fx:4"
n1g=$(cat $HP/hugepages-1048576kB/nr_hugepages 2>/dev/null)
if [ "${n1g:-0}" -ge 1 ] && mount -t hugetlbfs -o pagesize=1G none /mnt/h1g; then
  H="$H --hugetlb /mnt/h1g/fx:1024"
fi
/bin/tierd-workload folios --thp-mib 16 $H --secs 100000 > /tmp/folios.out 2>&1 &
for i in $(seq 1 1200); do grep -q ready /tmp/folios.out && break; sleep 0.1; done
cat /tmp/folios.out
line=$(grep ready /tmp/folios.out)
[ -n "$line" ] || { echo "folios workload not ready"; exit 1; }
P=${line#*pid=}; P=${P%% *}
T=${line#*thp=}; T=${T%% *}; TS=$((${T%+*}))
M=$((2 << 20))
# snap DIR: the process's smaps, maps, numa_maps, the pagemap of each buffer's VMA (a 1 GiB
# hugetlb VMA: its first 1024 entries only) and the kpageflags entries of the frames they map
# (each 2 MiB block and the next frame; each 1 GiB block's first, last and next frame)
snap() {
  D=$FX/$1
  mkdir -p $D/proc/$P $D/meta
  for f in smaps maps numa_maps; do cat /proc/$P/$f > $D/proc/$P/$f; done
  : > $D/meta/pagemap-slices.txt
  for b in $(echo "$line" | tr ' ' '\n' | sed -n 's/^[a-z]*=\(0x[0-9a-f]*\)+.*/\1/p'); do
    while read r rest; do
      a=$((0x${r%-*})); e=$((0x${r#*-}))
      if [ $a -le $((b)) ] && [ $((b)) -lt $e ]; then
        n=$(( (e - a) / 4096 ))
        [ $((e - a)) -ge $((1 << 30)) ] && n=1024
        name=$(printf 'meta/pagemap-%x.bin' $a)
        dd if=/proc/$P/pagemap of=$D/$name bs=8 skip=$((a / 4096)) count=$n 2>/dev/null
        printf '0x%x %d %s\n' $a $n $name >> $D/meta/pagemap-slices.txt
      fi
    done < /proc/$P/maps
  done
  for f in $D/meta/pagemap-*.bin; do od -An -v -t x8 $f; done | tr ' ' '\n' | grep -v '^$' > /tmp/entries
  : > /tmp/blocks
  while read e; do
    case $e in [89ab]*) ;; *) continue ;; esac
    pfn=$(( 0x${e#??} & 0x7fffffffffffff ))
    echo "$((pfn / 512 * 512)) 513" >> /tmp/blocks
    g=$((pfn / 262144 * 262144))
    echo "$g 1" >> /tmp/blocks
    echo "$((g + 262143)) 2" >> /tmp/blocks
  done < /tmp/entries
  # unique by both fields: a 1 GiB block's first frame is also a 2 MiB block's
  sort -u -k1,1n -k2,2n /tmp/blocks > /tmp/blocks.u
  : > $D/meta/kpageflags.bin
  : > $D/meta/kpageflags.idx
  while read pfn n; do
    off=$(wc -c < $D/meta/kpageflags.bin)
    dd if=/proc/kpageflags bs=8 skip=$pfn count=$n 2>/dev/null >> $D/meta/kpageflags.bin
    echo "$pfn $n $off" >> $D/meta/kpageflags.idx
  done < /tmp/blocks.u
  echo "snap $1: $(wc -l < /tmp/entries) pagemap entries, $(wc -l < $D/meta/kpageflags.idx) kpageflags slices"
}
snap whole
printf '%d,0x%x,0x%x\n' $P $((TS + M)) $((TS + 2 * M)) > /sys/kernel/debug/split_huge_pages || echo "split to base pages refused"
printf '%d,0x%x,0x%x,4\n' $P $((TS + 3 * M)) $((TS + 4 * M)) > /sys/kernel/debug/split_huge_pages || echo "split to order 4 refused"
sleep 1
snap split
cat > $FX/meta/folios.env <<ENVEOF
# the tierd-workload folios process (proc/<PID> of whole/ and split/) and its buffers
PID=$P
# the workload's line: thp=START+BYTES (from the buffer's first 2 MiB boundary), hugetlb=START+BYTES per file
LINE='$line'
# huge pages split through debugfs between whole/ and split/: the 2nd to base pages, the 4th to order-4 folios
SPLIT_BASE=$(printf '0x%x' $((TS + M)))
SPLIT_ORDER4=$(printf '0x%x' $((TS + 3 * M)))
ENVEOF
mkdir -p $FX$THP
for f in enabled hpage_pmd_size; do cat $THP/$f > $FX$THP/$f; done
for d in $HP/hugepages-*; do
  mkdir -p $FX$d; for f in nr_hugepages free_hugepages; do cat $d/$f > $FX$d/$f; done
done
mkdir -p $FX/proc; cat /proc/meminfo > $FX/proc/meminfo
cat /proc/cmdline > $FX/meta/cmdline
dmesg > $FX/meta/dmesg.txt
tierd_export_tree $FX folio-fixtures.tgz
"#;

/// What [`capture`] wrote.
#[derive(Debug, Clone)]
pub struct Capture {
    /// The output directory.
    pub out: PathBuf,
    /// Relative paths of the regular files written, sorted.
    pub files: Vec<String>,
    /// Relative paths of symlinks kept (their targets are inside the fixture).
    pub symlinks: Vec<String>,
    /// Symlinks dropped because their targets were not captured.
    pub dropped_symlinks: Vec<String>,
    /// The run that produced it.
    pub output: GuestOutput,
    /// The QEMU command line used (for the README).
    pub qemu_command: String,
    /// The initramfs build time.
    pub initramfs_build: Duration,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>, links: &mut Vec<PathBuf>) -> Result<(), Error> {
    for e in std::fs::read_dir(dir).map_err(io(dir))? {
        let e = e.map_err(io(dir))?;
        let p = e.path();
        let ft = e.file_type().map_err(io(&p))?;
        if ft.is_symlink() {
            links.push(p);
        } else if ft.is_dir() {
            walk(&p, files, links)?;
        } else {
            files.push(p);
        }
    }
    Ok(())
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

/// Relative paths written by [`unpack_tree`], each list sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unpacked {
    /// Regular files.
    pub files: Vec<String>,
    /// Symlinks kept (their targets exist in the tree).
    pub symlinks: Vec<String>,
    /// Symlinks removed because their targets were not captured.
    pub dropped_symlinks: Vec<String>,
}

/// Unpacks the exported tar into `out` (after removing earlier `proc`, `sys`, `meta`) and
/// drops symlinks whose targets are outside what was captured.
///
/// # Errors
/// [`Error::Io`] and [`Error::Export`] for a damaged archive.
pub fn unpack_tree(tgz: &[u8], out: &Path) -> Result<Unpacked, Error> {
    std::fs::create_dir_all(out).map_err(io(out))?;
    for d in ["proc", "sys", "meta"] {
        let p = out.join(d);
        if p.exists() {
            std::fs::remove_dir_all(&p).map_err(io(&p))?;
        }
    }
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(tgz));
    ar.set_preserve_permissions(false);
    ar.unpack(out).map_err(|e| Error::Export {
        name: TREE_NAME.into(),
        reason: format!("unpack: {e}"),
    })?;
    let (mut files, mut links) = (Vec::new(), Vec::new());
    walk(out, &mut files, &mut links)?;
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for l in links {
        if std::fs::metadata(&l).is_ok() {
            kept.push(rel(out, &l));
        } else {
            std::fs::remove_file(&l).map_err(io(&l))?;
            dropped.push(rel(out, &l));
        }
    }
    // Files the guest made read-only (0444 sysfs modes) stay writable for the next capture.
    let mut names = Vec::new();
    for f in &files {
        use std::os::unix::fs::PermissionsExt as _;
        let _ = std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644));
        names.push(rel(out, f));
    }
    names.sort();
    kept.sort();
    dropped.sort();
    Ok(Unpacked {
        files: names,
        symlinks: kept,
        dropped_symlinks: dropped,
    })
}

/// Boots the two-node guest, runs [`CAPTURE_SCRIPT`] and writes the tree plus a README
/// into `out`.
///
/// # Errors
/// Everything [`run`] returns, [`Error::Guest`] when the script fails or exports nothing,
/// [`Error::Io`].
pub fn capture(
    kernel: &Kernel,
    out: &Path,
    work: &Path,
    timeout: Duration,
) -> Result<Capture, Error> {
    capture_with(
        kernel,
        CaptureRun {
            what: "capture script",
            initramfs: "capture-initramfs.cpio.gz",
            append: APPEND,
            tree: TREE_NAME,
            readme: readme_text,
        },
        || Initramfs::standard(Path::new(DEFAULT_BUSYBOX), CAPTURE_SCRIPT),
        |_| Ok(()),
        out,
        work,
        timeout,
    )
}

/// What differs between the fixture captures: the script's name in errors, the initramfs
/// file, the extra kernel arguments, the exported tree's name and the README.
struct CaptureRun {
    what: &'static str,
    initramfs: &'static str,
    append: &'static str,
    tree: &'static str,
    readme: fn(&Kernel, &Capture) -> String,
}

/// Builds the initramfs (`build`), boots the two-node guest with it, and unpacks the tree
/// the script exports into `out` (after `prepare(out)`), with a README.
fn capture_with(
    kernel: &Kernel,
    c: CaptureRun,
    build: impl FnOnce() -> Result<Initramfs, Error>,
    prepare: impl FnOnce(&Path) -> Result<(), Error>,
    out: &Path,
    work: &Path,
    timeout: Duration,
) -> Result<Capture, Error> {
    let spec = GuestSpec::two_node();
    std::fs::create_dir_all(work).map_err(io(work))?;
    let t = Instant::now();
    let initrd = build()?.write_gz(&work.join(c.initramfs))?;
    let initramfs_build = t.elapsed();
    let append = format!("{} {}", crate::guest::BASE_APPEND, c.append);
    // The README shows file names, not this machine's cache paths.
    let args = spec.qemu_args(
        crate::guest::detect_accel(),
        Path::new("vmlinux"),
        Path::new("initramfs.cpio.gz"),
        &append,
    )?;
    let qemu_command = format!("{} {}", crate::guest::QEMU, shell_join(&args));
    let output = run(&spec, &kernel.vmlinux, &initrd, c.append, timeout)?;
    let tail = || {
        let lines: Vec<&str> = output.console.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    };
    if output.rc != Some(0) {
        return Err(Error::Guest {
            reason: format!("{} ended with rc {:?}", c.what, output.rc),
            tail: tail(),
        });
    }
    let tree = output.file(c.tree).ok_or_else(|| Error::Guest {
        reason: format!("guest exported no {}", c.tree),
        tail: tail(),
    })?;
    prepare(out)?;
    let Unpacked {
        files,
        symlinks,
        dropped_symlinks,
    } = unpack_tree(&tree.data, out)?;
    let cap = Capture {
        out: out.to_path_buf(),
        files,
        symlinks,
        dropped_symlinks,
        output,
        qemu_command,
        initramfs_build,
    };
    let readme = out.join("README.md");
    std::fs::write(&readme, (c.readme)(kernel, &cap)).map_err(io(&readme))?;
    Ok(cap)
}

/// Boots the two-node guest with the static `tierd-workload` (`workload`, put at
/// [`FOLIO_WORKLOAD`]), runs [`FOLIO_CAPTURE_SCRIPT`] and writes the tree plus a README into
/// `out`.
///
/// # Errors
/// Everything [`run`] returns, [`Error::Guest`] when the script fails or exports nothing,
/// [`Error::Io`].
pub fn capture_folios(
    kernel: &Kernel,
    workload: &Path,
    out: &Path,
    work: &Path,
    timeout: Duration,
) -> Result<Capture, Error> {
    capture_with(
        kernel,
        CaptureRun {
            what: "folio capture script",
            initramfs: "folio-capture-initramfs.cpio.gz",
            append: FOLIO_APPEND,
            tree: FOLIO_TREE_NAME,
            readme: folio_readme_text,
        },
        || {
            let mut fs = Initramfs::standard(Path::new(DEFAULT_BUSYBOX), FOLIO_CAPTURE_SCRIPT)?;
            fs.add_host_file(workload, FOLIO_WORKLOAD, Some(0o755))?;
            Ok(fs)
        },
        // A capture replaces the previous snapshots whole.
        |out| {
            for d in ["whole", "split"] {
                let p = out.join(d);
                if p.exists() {
                    std::fs::remove_dir_all(&p).map_err(io(&p))?;
                }
            }
            Ok(())
        },
        out,
        work,
        timeout,
    )
}

fn folio_readme_text(kernel: &Kernel, cap: &Capture) -> String {
    let read = |p: &str| std::fs::read_to_string(cap.out.join(p)).unwrap_or_default();
    let env = read("meta/folios.env");
    let slices = format!(
        "whole/:\n{}split/:\n{}",
        read("whole/meta/pagemap-slices.txt"),
        read("split/meta/pagemap-slices.txt")
    );
    format!(
        "# Folio fixtures: THP and hugetlb pages of one process, from a Linux {ver} guest\n\n\
Captured {date} by `tierd-vm capture-folio-fixtures` (crates/tierd-vm/src/fixtures.rs, guest script\n\
`FOLIO_CAPTURE_SCRIPT`). Regenerate with:\n\n\
```sh\ncargo run -p tierd-vm --release -- capture-folio-fixtures --out crates/tierd-linux/tests/fixtures/guest-6.12-folios\n```\n\n\
Used by crates/tierd-linux/tests/folio_fixture.rs. PIDs, addresses and frames change from run to run:\n\
tests derive them from `meta/`.\n\n\
## Guest\n\n\
Kernel `{ver}`, QEMU {accel}, two nodes (as guest-6.12), kernel arguments `{append}`. THP `enabled` =\n\
`always`, khugepaged asleep (`scan_sleep_millisecs` = 1 h). 8 hugetlb pages of 2 MiB reserved at run\n\
time, one of 1 GiB at boot (`sys/kernel/mm/hugepages/*/nr_hugepages` says what the kernel found).\n\n\
QEMU command:\n\n```sh\n{qemu}\n```\n\n\
## The process (`meta/folios.env`)\n\n```sh\n{env}```\n\n\
`tierd-workload folios --thp-mib 16 --hugetlb /mnt/h2m/fx:4 [--hugetlb /mnt/h1g/fx:1024]`: an 18 MiB\n\
anonymous mapping with `MADV_HUGEPAGE`, every page written; files on hugetlbfs mounts (`pagesize=2M`,\n\
`pagesize=1G`, the latter when a 1 GiB page was reserved) mapped shared and read. Snapshot `whole/`\n\
is taken then; after it, through `/sys/kernel/debug/split_huge_pages`, the huge page at `SPLIT_BASE`\n\
is split to base pages and the one at `SPLIT_ORDER4` to order-4 (64 KiB) folios, and snapshot\n\
`split/` is taken.\n\n\
## Files\n\n\
| path | what |\n|---|---|\n\
| `{{whole,split}}/proc/<pid>/{{smaps,maps,numa_maps}}` | the process's files, read with `cat` |\n\
| `{{whole,split}}/meta/pagemap-<start>.bin` | raw `/proc/<pid>/pagemap` entries (8 bytes each, native endian) of the VMA starting at virtual address `<start>` (hex); `meta/pagemap-slices.txt` lists `start entries file` (a 1 GiB hugetlb VMA: its first 1024 entries only) |\n\
| `{{whole,split}}/meta/kpageflags.{{bin,idx}}` | raw `/proc/kpageflags` entries (8 bytes each): the index lists `pfn count byte_offset` per slice, the slices concatenated in the `.bin` in that order. Slices: the 513 entries from each 2 MiB-aligned block (frame & !511) of every frame the pagemap slices map, and per 1 GiB block its first entry and the two from its last frame: what tierd's folio reader reads |\n\
| `sys/kernel/mm/transparent_hugepage/{{enabled,hpage_pmd_size}}`, `sys/kernel/mm/hugepages/*/{{nr,free}}_hugepages`, `proc/meminfo` | settings and counters at capture time |\n\
| `meta/uname-r`, `meta/cmdline`, `meta/dmesg.txt` | context |\n\n\
A test rebuilds a `/proc` root from a snapshot: sparse `<pid>/pagemap` and `kpageflags` files with\n\
the slices written at `vpn * 8` and `pfn * 8`.\n\n\
Pagemap slices:\n\n```\n{slices}```\n",
        ver = kernel.version,
        date = utc_now(),
        accel = cap.output.accel,
        append = FOLIO_APPEND,
        qemu = cap.qemu_command,
        env = env,
        slices = slices,
    )
}

fn shell_join(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if a.contains([' ', '"']) {
                format!("'{a}'")
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn utc_now() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn readme_text(kernel: &Kernel, cap: &Capture) -> String {
    let mut s = String::new();
    let pids = std::fs::read_to_string(cap.out.join("meta/pids.env")).unwrap_or_default();
    let unreadable =
        std::fs::read_to_string(cap.out.join("meta/UNREADABLE.txt")).unwrap_or_default();
    s.push_str(&format!(
        "# Real /proc and /sys files from a Linux {ver} guest with a CPU-less slow memory node\n\n\
Captured {date} by `tierd-vm capture-fixtures` (crates/tierd-vm/src/fixtures.rs, guest script\n\
`CAPTURE_SCRIPT`). Regenerate with:\n\n\
```sh\nscripts/vm-deps.sh   # qemu-system-x86, busybox-static, zstd (root, Debian)\n\
cargo run -p tierd-vm --release -- capture-fixtures --out crates/tierd-linux/tests/fixtures/guest-6.12\n```\n\n\
PIDs, buffer addresses and counters change from run to run; tests should derive expectations\n\
from `meta/` and the files themselves, not from constants copied out of this capture.\n\n\
## Guest\n\n\
- Kernel: `{ver}` (Debian package `{pkg}` {pver}, bookworm-backports), booted as ELF vmlinux (PVH).\n\
- Machine: QEMU {accel}, node 0 = 2 vCPUs + 2 GiB, node 1 = 2 GiB without CPUs. HMAT from node 0:\n\
  100 ns / 20 GiB/s to node 0, 300 ns / 5 GiB/s to node 1; SLIT distance 20. The kernel puts node 1\n\
  in a lower memory tier (see `sys/devices/virtual/memory_tiering`).\n\
- Userland: busybox-static as `/init` (crates/tierd-vm/src/initramfs.rs). Kernel argument\n\
  `norandmaps` (no ASLR), so each `[heap]` lies low and the `pagemap` prefix covers it.\n\
- Boot-to-end wall time of this capture: {wall:.1} s.\n\n\
QEMU command (initramfs built by the harness):\n\n```sh\n{qemu}\n```\n\n\
## Workload inside the guest at capture time (`meta/pids.env`)\n\n```sh\n{pids}```\n\n\
- cgroup `/sys/fs/cgroup/tierd-fx`: `memory.low` = 64 MiB, `memory.high` = 768 MiB, `cpuset.mems` = 1, holds `PID_SLOW`.\n\
- DAMON (`sys/kernel/mm/damon/admin`): kdamond 0, one `vaddr` context (sample 5 ms, aggregation 100 ms),\n\
  target = `PID_HOT`, one `stat` scheme over every region; captured while on, after\n\
  `update_schemes_stats` and `update_schemes_tried_regions` were written to `state`.\n\
  Write-only files cannot be read: they are listed in `meta/UNREADABLE.txt`;\n\
  `meta/damon-admin.ls-lR.txt` is the full listing with modes.\n\
- Not covered: no process has a non-default NUMA memory policy (busybox cannot call `mbind`/\n\
  `set_mempolicy`, so `numa_maps` shows `default` everywhere; node 1 placement comes from the cpuset),\n\
  and no promotion or demotion has happened yet (`pgpromote_*`, `pgdemote_*` are 0).\n\n\
## Files\n\n\
Paths are the guest's real paths under `proc/` and `sys/`, so a reader can use this directory as\n\
its `/proc` or `/sys` root. Every file was read with `cat` (sysfs reports st_size 4096 for every\n\
attribute). Symlinks inside the captured set (e.g. `access0/initiators/node0`, `node1/memory32`) are kept,\n\
so the tree has the same directory loops as sysfs (`node0/memory0/node0` ...): do not walk it following links;\n\
{ndrop} symlinks pointing outside it (e.g. `node0/cpu0`, `subsystem`) were dropped.\n\n\
| path | what |\n|---|---|\n\
| `sys/devices/system/node/{{online,possible,has_cpu,has_memory,has_normal_memory}}` | node masks |\n\
| `sys/devices/system/node/node*/{{cpulist,cpumap,meminfo,distance,numastat,vmstat}}` | per-node topology and counters |\n\
| `sys/devices/system/node/node*/access{{0,1}}/{{initiators,targets}}` | HMAT access classes (drivers/base/node.c) |\n\
| `sys/devices/system/node/node*/memory*`, `sys/devices/system/memory/*` | memory blocks of each node (for DAMON `paddr` ranges) |\n\
| `sys/devices/virtual/memory_tiering/memory_tier*/nodelist` | memory tiers (mm/memory-tiers.c) |\n\
| `sys/kernel/mm/numa/demotion_enabled` | demotion switch |\n\
| `sys/kernel/mm/transparent_hugepage/**` | THP (and mTHP) settings and stats |\n\
| `sys/kernel/mm/damon/admin/**` | DAMON sysfs tree, see above |\n\
| `sys/kernel/debug/sched/numa_balancing/*` | NUMA balancing scan parameters (debugfs) |\n\
| `sys/fs/cgroup/tierd-fx/*` | the cgroup: `memory.{{low,high,max,current,stat,numa_stat}}`, `cgroup.procs`, `cpuset.*` |\n\
| `sys/fs/cgroup/{{cgroup.controllers,cgroup.subtree_control,cgroup.procs,memory.stat,memory.numa_stat}}` | root cgroup |\n\
| `proc/sys/kernel/numa_balancing*`, `proc/sys/vm/zone_reclaim_mode` | sysctls |\n\
| `proc/{{vmstat,meminfo,zoneinfo,buddyinfo,cmdline}}` | system counters |\n\
| `proc/<pid>/{{numa_maps,maps,smaps,status,cgroup,cmdline,stat}}` | per process (PIDs in `meta/pids.env`) |\n\
| `proc/<pid>/pagemap` | **prefix** of the real binary file: entries for virtual pages 0 .. end of `[heap]` (count in `meta/pagemap-entries.txt`: pid, entries, end address); read as root, so PFNs are present |\n\
| `meta/pagemap-<pid>-<start>.bin` | pagemap entries of the 32 MiB buffers of `PID_FAST` (node 0) and `PID_SLOW` (node 1), from virtual address `<start>` (hex); listed in `meta/pagemap-slices.txt` (pid, start, entries, file). PFNs map to nodes through `sys/devices/system/node/node*/memory*` and `block_size_bytes` |\n\
| `meta/EMPTY-DIRS.txt` | directories that were empty in the guest (git cannot store them, so they are absent here; e.g. `access0/targets` of the CPU-less node): a reader should treat a missing one as empty |\n\
| `meta/uname-r`, `meta/dmesg.txt`, `meta/pids.env`, `meta/UNREADABLE.txt`, `meta/damon-admin.ls-lR.txt`, `meta/pagemap-entries.txt` | context, not part of /proc or /sys |\n\n\
Unreadable (write-only or erroring) attributes:\n\n```\n{unreadable}```\n\n\
{nfiles} files, {nlinks} symlinks:\n\n```\n{list}\n```\n",
        ver = kernel.version,
        date = utc_now(),
        pkg = kernel.package,
        pver = kernel.package_version,
        accel = cap.output.accel,
        wall = cap.output.wall.as_secs_f64(),
        qemu = cap.qemu_command,
        pids = pids,
        ndrop = cap.dropped_symlinks.len(),
        unreadable = unreadable,
        nfiles = cap.files.len(),
        nlinks = cap.symlinks.len(),
        list = cap.files.iter().chain(cap.symlinks.iter()).cloned().collect::<Vec<_>>().join("\n"),
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpack_keeps_inner_links_and_drops_dangling_ones() {
        let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::fast(),
        ));
        let add_file = |b: &mut tar::Builder<_>, path: &str, data: &[u8]| {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o444);
            h.set_entry_type(tar::EntryType::Regular);
            b.append_data(&mut h, path, data).expect("append");
        };
        add_file(
            &mut builder,
            "sys/devices/system/node/node0/cpulist",
            b"0-1\n",
        );
        add_file(&mut builder, "sys/devices/system/node/node1/cpulist", b"\n");
        add_file(&mut builder, "meta/uname-r", b"6.12\n");
        for (link, target) in [
            (
                "sys/devices/system/node/node1/access0/initiators/node0",
                "../../../node0",
            ),
            ("sys/devices/system/node/node0/cpu0", "../../cpu/cpu0"),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            builder.append_link(&mut h, link, target).expect("link");
        }
        let tgz = builder.into_inner().expect("tar").finish().expect("gz");
        let out = std::env::temp_dir().join(format!("tierd-vm-unpack-{}", std::process::id()));
        std::fs::create_dir_all(out.join("proc/stale")).expect("mk");
        let Unpacked {
            files,
            symlinks: kept,
            dropped_symlinks: dropped,
        } = unpack_tree(&tgz, &out).expect("unpack");
        assert_eq!(
            files,
            [
                "meta/uname-r",
                "sys/devices/system/node/node0/cpulist",
                "sys/devices/system/node/node1/cpulist"
            ]
        );
        assert_eq!(
            kept,
            ["sys/devices/system/node/node1/access0/initiators/node0"]
        );
        assert_eq!(dropped, ["sys/devices/system/node/node0/cpu0"]);
        assert!(!out.join("proc/stale").exists(), "old capture removed");
        let via_link = std::fs::read_to_string(
            out.join("sys/devices/system/node/node1/access0/initiators/node0/cpulist"),
        )
        .expect("read");
        assert_eq!(via_link, "0-1\n");
        std::fs::remove_dir_all(&out).ok();
    }
}
