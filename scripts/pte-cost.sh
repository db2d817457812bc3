#!/bin/bash
# Measures what one PTE update of NUMA balancing's scanner costs, on this host and in lab A's
# TCG guest: the figure behind lab A's twin's `numab.pte_time_scale` (docs/simulator.md, "The
# runtime throttle"). `tierd-workload pte-cost` maps MIB MiB of base pages, writes each, and
# times mprotect(2) round trips over them: PROT_NONE is the walk change_prot_numa() makes
# (mm/mprotect.c change_protection()), one rewritten PTE per page and one TLB flush.
#
# The guest is the lab's two-node guest (crates/tierd-vm, `tierd-vm run`) with the kernel
# KERNEL (6.12 or newest, the lab's two); its pages are on node 0, as the PTE pages of lab A's
# chase are (they are allocated where the faulting thread runs; the data pages' node does not
# enter the walk).
#
# usage: scripts/pte-cost.sh [MIB] [ROUNDS] [KERNEL...]   (defaults 256 MiB, 11, "6.12 newest")
set -euo pipefail
cd "$(dirname "$0")/.."
MIB=${1:-256}
ROUNDS=${2:-11}
shift $(( $# > 2 ? 2 : $# ))
KERNELS=${*:-6.12 newest}
. scripts/guest-tools.sh
echo "host: $(uname -r), $(nproc) CPUs"
"$BIN" pte-cost --mib "$MIB" --rounds "$ROUNDS" | tail -1
cat > "$W/run.sh" <<SH
#!/bin/sh
echo "guest: \$(uname -r)"
/lab/tierd-workload pte-cost --mib $MIB --rounds $ROUNDS
SH
chmod +x "$W/run.sh"
in_guests '^(guest:|pte-cost pages)' 600
