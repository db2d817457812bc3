#!/bin/sh
# Guest smoke test for tierd-workload: boots the two-node tiered QEMU guest of
# docs/lab.md (node 1 = CPU-less, slower per HMAT) with a minimal initramfs
# (busybox-static + the static tierd-workload), then measures move_pages throughput
# between the nodes and runs a chase with NUMA balancing in tiering mode (=2).
#
#   crates/tierd-workload/guest/smoke.sh VMLINUX [WORKDIR]
#
# VMLINUX: the decompressed 6.12+ kernel (docs/lab.md, first guest runs, 1). Needs
# qemu-system-x86_64, busybox (static) and root (mknod). Takes about 1-2 min under TCG.
set -eu
KERNEL=${1:?usage: smoke.sh VMLINUX [WORKDIR]}
W=${2:-$(mktemp -d)}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
BIN=${BIN:-$ROOT/target/x86_64-unknown-linux-gnu/release/tierd-workload}
if [ ! -x "$BIN" ]; then
  (cd "$ROOT" && RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --target x86_64-unknown-linux-gnu -p tierd-workload)
fi
rm -rf "$W/root"; mkdir -p "$W/root/bin" "$W/root/proc" "$W/root/sys" "$W/root/dev"
cp "$(command -v busybox)" "$W/root/bin/busybox"
objcopy --strip-debug "$BIN" "$W/root/bin/tierd-workload"
mknod "$W/root/dev/console" c 5 1   # without it /init has no stdout
cat > "$W/root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev 2>/dev/null
echo "nodes online: $(cat /sys/devices/system/node/online)"
echo 0 > /proc/sys/kernel/numa_balancing
T=/bin/tierd-workload
for thp in never always; do
  echo $thp > /sys/kernel/mm/transparent_hugepage/enabled
  echo "== thp=$thp"
  for chunk in 512 65536; do
    $T move --mib 256 --from 0 --to 1 --chunk-pages $chunk
    $T move --mib 256 --from 1 --to 0 --chunk-pages $chunk
  done
  $T move --mib 256 --from 0 --to 0
done
echo never > /sys/kernel/mm/transparent_hugepage/enabled
$T move --mib 16 --from 0 --to 7 2>&1 | head -1
echo 2 > /proc/sys/kernel/numa_balancing
echo "== chase, numa_balancing=2, thp=never"
$T chase --total-mib 512 --hot-mib 128 --secs 10 --node 1 --interval-ms 1000
grep -E "^(pgpromote_success|pgmigrate_success|numa_hint_faults) " /proc/vmstat | tr '\n' ' '; echo
poweroff -f
INIT
chmod +x "$W/root/init"
(cd "$W/root" && find . | busybox cpio -o -H newc -R 0:0 2>/dev/null | gzip -1 > "$W/initramfs.cpio.gz")
exec qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp 2 -m 4G -machine q35,hmat=on \
  -object memory-backend-ram,id=m0,size=2G -object memory-backend-ram,id=m1,size=2G \
  -numa node,nodeid=0,cpus=0-1,memdev=m0,initiator=0 -numa node,nodeid=1,memdev=m1,initiator=0 \
  -numa dist,src=0,dst=1,val=20 \
  -numa hmat-lb,initiator=0,target=0,hierarchy=memory,data-type=access-latency,latency=100 \
  -numa hmat-lb,initiator=0,target=0,hierarchy=memory,data-type=access-bandwidth,bandwidth=20G \
  -numa hmat-lb,initiator=0,target=1,hierarchy=memory,data-type=access-latency,latency=300 \
  -numa hmat-lb,initiator=0,target=1,hierarchy=memory,data-type=access-bandwidth,bandwidth=5G \
  -kernel "$KERNEL" -initrd "$W/initramfs.cpio.gz" -append "console=ttyS0 quiet panic=-1" \
  -nographic -no-reboot
