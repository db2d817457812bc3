#!/bin/bash
# Measures what one page costs the kernel's LRU reclaim when it finds the page referenced:
# the figure behind the simulator's LRU_SCAN_NS_PER_PAGE (docs/simulator.md, "Reclaim: the
# kernel's LRU"). Root only; it adds a swap file for the run (anonymous pages are scanned only
# when they can go somewhere: mm/vmscan.c can_reclaim_anon_pages()) and removes it after.
#
# A process in a memory cgroup holds MIB MiB of anonymous 4 KiB pages and reads each of them
# every few tens of ms; lowering the cgroup's limit by 256 MiB makes the writer reclaim
# (mm/memcontrol.c, the limit's write loops on try_to_free_mem_cgroup_pages()), and every
# page it looks at was referenced, so it activates instead of reclaiming until it gives up
# (the write fails with EBUSY: expected). The writer's system time over pgscan_anon is the
# cost of one inactive-list visit: isolation, the reverse-map walk of folio_referenced(),
# putback. New anonymous pages start on the inactive list and are activated on their second
# referenced visit (folio_check_references()), so a run scans each page about twice.
#
# usage: scripts/lru-scan-cost.sh [MIB] [RUNS]     (defaults 4096 MiB, 3 runs)
set -euo pipefail
MIB=${1:-4096}
RUNS=${2:-3}
[ "$(id -u)" = 0 ] || { echo "lru-scan-cost: needs root (cgroups, swapon)" >&2; exit 1; }
W=$(mktemp -d)
SWAP=$W/swapfile
cleanup() {
    [ -n "${PID:-}" ] && kill -9 "$PID" 2>/dev/null || true
    wait 2>/dev/null || true
    swapoff "$SWAP" 2>/dev/null || true
    [ -n "${CG:-}" ] && rmdir "$CG" 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT
cat > "$W/sweep.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
int main(int argc, char **argv) {
    size_t len = strtoul(argv[1], 0, 10) << 20;
    volatile unsigned char *p = mmap(0, len, PROT_READ | PROT_WRITE,
                                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    madvise((void *)p, len, MADV_NOHUGEPAGE); /* 4 KiB pages, as D's are */
    /* Non-zero contents: zero-filled pages would not be written to swap. */
    for (size_t i = 0; i < len; i += 4096) p[i] = (unsigned char)((i >> 12) | 1);
    printf("ready\n");
    fflush(stdout);
    unsigned long sum = 0;
    for (;;)
        for (size_t i = 0; i < len; i += 4096) sum += p[i];
}
C
cc -O2 -o "$W/sweep" "$W/sweep.c"
fallocate -l $((2 * MIB))M "$SWAP"
chmod 600 "$SWAP"
mkswap "$SWAP" >/dev/null
swapon "$SWAP"
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    CG=/sys/fs/cgroup/tierd-lru-scan-cost
    LIMIT=memory.max
else
    CG=/sys/fs/cgroup/memory/tierd-lru-scan-cost
    LIMIT=memory.limit_in_bytes
fi
vm() { awk -v k="$1" '$1 == k { print $2 }' /proc/vmstat; }
echo "kernel $(uname -r), $(nproc) CPUs, ${MIB} MiB referenced 4 KiB anonymous pages"
for run in $(seq "$RUNS"); do
    mkdir -p "$CG"
    sh -c "echo \$\$ > $CG/cgroup.procs; exec $W/sweep $MIB" > "$W/out" &
    PID=$!
    until grep -q ready "$W/out" 2>/dev/null; do sleep 0.2; done
    sleep 2
    if [ "$LIMIT" = memory.max ]; then USAGE=$(cat "$CG/memory.current"); else USAGE=$(cat "$CG/memory.usage_in_bytes"); fi
    S0=$(vm pgscan_anon); A0=$(vm pgactivate); R0=$(vm pgsteal_anon)
    # The write fails with EBUSY once reclaim gives up: expected, the time is what counts.
    /usr/bin/time -o "$W/time" -f "%S" \
        sh -c "echo $((USAGE - 256 * 1024 * 1024)) > $CG/$LIMIT" 2>/dev/null || true
    SYS=$(tail -1 "$W/time")
    S1=$(vm pgscan_anon); A1=$(vm pgactivate); R1=$(vm pgsteal_anon)
    kill -9 "$PID"; wait "$PID" 2>/dev/null || true; PID=
    sleep 0.5
    rmdir "$CG"
    awk -v r="$run" -v sys="$SYS" -v s=$((S1 - S0)) -v a=$((A1 - A0)) -v st=$((R1 - R0)) 'BEGIN {
        printf "run %d: writer %.2f s system, pgscan_anon %d, pgactivate %d, pgsteal_anon %d: %.0f ns per page scanned\n",
            r, sys, s, a, st, (s > 0 ? sys * 1e9 / s : 0) }'
done
