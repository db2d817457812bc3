#!/bin/bash
# Measures what one page costs the kernel's LRU reclaim per turn when it finds the page
# referenced: the figure behind the simulator's LRU_SCAN_NS_PER_PAGE (docs/simulator.md, "The
# scan cost, measured"). Root only; it adds a swap file for the run (anonymous pages are scanned
# only when they can go somewhere: mm/vmscan.c can_reclaim_anon_pages()) and removes it after.
#
# A process in a memory cgroup holds MIB MiB of anonymous 4 KiB pages and reads each of them
# every few tens of ms. Each run has two phases.
#
# 1. The inactive-list visit. Lowering the cgroup's limit by 256 MiB makes the writer reclaim
#    (mm/memcontrol.c, the limit's write loops on try_to_free_mem_cgroup_pages()), and every
#    page it looks at was referenced, so it activates instead of reclaiming until it gives up
#    (the write fails with EBUSY: expected). The writer's system time over pgscan_anon is the
#    cost of one inactive-list visit: isolation, the reverse-map walk of folio_referenced(),
#    putback. New anonymous pages start on the inactive list and are activated on their second
#    referenced visit (folio_check_references()), so the phase scans each page about twice.
# 2. The active-list visit. Every page is now active and the inactive list empty. The reader
#    is stopped (its swap-ins would contend with reclaim) and the limit lowered again:
#    shrink_active_list() deactivates pages (isolation, the same reverse-map walk, the move to
#    the inactive list), and the inactive list then swaps them out, so the writer's time mixes
#    the two. perf samples the whole machine every 100 us of CPU time (cpu-clock), and the
#    samples with shrink_active_list() on their stack, times 100 us, over pgdeactivate is the
#    cost of one active-list visit. (pgrefill would be the right counter, but cgroup reclaim
#    counts it only in the memcg's stats, which cgroup v1 does not show; every anonymous page
#    an active visit isolates is deactivated, so the two are equal here.) Needs perf; skipped
#    without it.
#
# An activated page keeps PG_referenced (folio_check_references() sets it before it returns
# FOLIOREF_ACTIVATE), so once a page has been active, each turn of the LRU visits it once on
# each list: the sum of the two figures is what the model charges per page and turn.
#
# usage: scripts/lru-scan-cost.sh [MIB] [RUNS]     (defaults 2048 MiB, 3 runs)
set -euo pipefail
MIB=${1:-2048}
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
    awk -v r="$run" -v sys="$SYS" -v s=$((S1 - S0)) -v a=$((A1 - A0)) -v st=$((R1 - R0)) 'BEGIN {
        printf "run %d inactive: writer %.2f s system, pgscan_anon %d, pgactivate %d, pgsteal_anon %d: %.0f ns per page scanned\n",
            r, sys, s, a, st, (s > 0 ? sys * 1e9 / s : 0) }'
    if command -v perf >/dev/null; then
        if [ "$LIMIT" = memory.max ]; then echo max > "$CG/$LIMIT"; else echo -1 > "$CG/$LIMIT"; fi
        sleep 1
        kill -STOP "$PID"
        # Reading memory.stat flushes the memcg's statistics (mm/memcontrol.c): reclaim
        # decides whether the inactive list is low from them, and with stale ones (all pages
        # still counted inactive) it skips the active list and gives up at once.
        cat "$CG/memory.stat" >/dev/null
        D0=$(vm pgdeactivate)
        perf record -q -a -g -e cpu-clock -c 100000 -o "$W/perf.data" -- \
            sh -c "echo $((USAGE - 256 * 1024 * 1024)) > $CG/$LIMIT" >/dev/null 2>&1 || true
        D1=$(vm pgdeactivate)
        # Every sample is 100 us of one CPU; the first column of the children report is the
        # share of all samples with the function on the stack.
        TOTAL=$(perf report -i "$W/perf.data" -n --stdio --sort comm -g none 2>/dev/null |
            awk '/^ +[0-9.]+%/ { s += $3 } END { print s + 0 }')
        PCT=$(perf report -i "$W/perf.data" --children --stdio --sort sym -g none 2>/dev/null |
            awk '$NF == "shrink_active_list" && !seen { sub("%", "", $1); print $1; seen = 1 }')
        awk -v r="$run" -v n="$TOTAL" -v p="${PCT:-0}" -v d=$((D1 - D0)) 'BEGIN {
            t = n * p / 100 * 100e-6
            printf "run %d active:   shrink_active_list %.2f s of CPU, pgdeactivate %d: %.0f ns per page deactivated\n",
                r, t, d, (d > 0 ? t * 1e9 / d : 0) }'
    else
        echo "run $run active:   skipped (no perf)"
    fi
    kill -9 "$PID"; wait "$PID" 2>/dev/null || true; PID=
    sleep 0.5
    rmdir "$CG"
done
