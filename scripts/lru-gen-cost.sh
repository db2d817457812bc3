#!/bin/bash
# Measures what one aging pass of the multi-gen LRU costs per page, in lab A's TCG guest on the
# lab's two kernels (both built with CONFIG_LRU_GEN_ENABLED): the figure behind docs/simulator.md
# "D under MGLRU". `tierd-workload lru-gen-cost` maps MIB MiB of base pages on node 0, makes
# every PTE young, and times the aging pass it asks for through /sys/kernel/debug/lru_gen
# (mm/vmscan.c run_aging() -> try_to_inc_max_seq() -> walk_mm()), then a second pass over the
# same, now old, PTEs.
#
# In the same boot it runs `tierd-workload pte-cost` (mprotect(2) round trips, the NUMA
# scanner's walk), whose host figure this script also prints: the two walks are loops of the
# same kind over the same PTEs, so the guest's ratio between them carries the aging pass over
# to the host, which has no MGLRU (its kernel is built without CONFIG_LRU_GEN).
#
# The passes are forced (`force_scan`: every page table walked). kswapd's own passes skip
# tables whose PMD entry is old or that the Bloom filter dropped, but a table whose entries are
# all young, as a sweeper's are, is walked either way, entry by entry. Unforced passes cannot be
# measured here: 6.12 refuses them while four generations exist (run_aging(): -ERANGE), and
# under TCG the accessed bits, once the walk cleared them, are not set again by the next reads
# (x86 clears them without a TLB flush, and QEMU's software TLB holds the whole buffer), so
# they find nothing young. Each pass's `young=` says how many pages it found young and moved.
#
# usage: scripts/lru-gen-cost.sh [MIB] [ROUNDS] [KERNEL...]   (defaults 1024 MiB, 11, "6.12 newest")
set -euo pipefail
cd "$(dirname "$0")/.."
MIB=${1:-1024}
ROUNDS=${2:-11}
shift $(( $# > 2 ? 2 : $# ))
KERNELS=${*:-6.12 newest}
. scripts/guest-tools.sh
echo "host: $(uname -r), $(nproc) CPUs"
"$BIN" pte-cost --mib 256 --rounds "$ROUNDS" | tail -1
cat > "$W/run.sh" <<SH
#!/bin/sh
echo "guest: \$(uname -r) lru_gen \$(cat /sys/kernel/mm/lru_gen/enabled)"
/lab/tierd-workload lru-gen-cost --mib $MIB --rounds $ROUNDS --force | tail -1
/lab/tierd-workload pte-cost --mib 256 --rounds $ROUNDS | tail -1
SH
chmod +x "$W/run.sh"
in_guests '^(guest:|lru-gen-cost|pte-cost pages|Error|tierd-workload)' 900
