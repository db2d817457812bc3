#!/bin/bash
# Measures what a NUMA hint fault costs lab A's guest under TCG, apart from the migration it
# makes: the figures behind lab A's twin's `numab.fault_time_scale` and `migrate_time_scale`
# (docs/simulator.md, "The fault and the migration under TCG, measured").
#
# Each run boots the lab's two-node guest (crates/tierd-vm) with THP off, leaves ~600 MiB free
# on node 0 (`tierd-workload hold`, as lab A's eater does: more free memory than the promotion
# watermark plus 1 GiB would promote every page unconditionally, kernel/sched/fair.c
# pgdat_free_space_enough()), starts lab A's chase (128 MiB hot of 256 MiB, one thread, on
# node 1), then switches numa_balancing to 2 with the debugfs hot threshold at TH ms. Every
# 0.25 s it prints the chase's utime and stime (/proc/PID/stat, the whole process, in 10 ms
# ticks) and /proc/vmstat's NUMA counters.
#
# - TH=0 refuses every promotion (a fault's latency is never below 0 ms,
#   should_numa_migrate_memory()): the scan pass's storm is 32,768 faults that migrate nothing,
#   and its stime over the faults is the cost of a fault alone.
# - TH=1000 (the default) promotes the pages whose fault comes within 1 s of their scan: in
#   the storm's first intervals nearly every fault promotes and the chase thread spends the
#   whole interval in the kernel (no utime), so the interval over its faults is the cost of a
#   promoting fault.
#
# The chase's own location sampler (move_pages queries every 250 ms) adds stime too; the
# analysis takes the median stime rate of the intervals without faults as background and
# subtracts it. Runs on a busy host come out slower (TCG shares the host's CPUs): run it on
# an idle one.
#
# usage: scripts/fault-cost.sh [KERNEL...]   (default "newest 6.12")
set -euo pipefail
cd "$(dirname "$0")/.."
KERNELS=${*:-newest 6.12}
. scripts/guest-tools.sh
cat > "$W/run.sh" <<'SH'
#!/bin/sh
mount -t debugfs none /sys/kernel/debug 2>/dev/null
echo 0 > /proc/sys/kernel/numa_balancing
echo never > /sys/kernel/mm/transparent_hugepage/enabled
/lab/tierd-workload hold --leave-free-mib 600 --node 0 --secs 120 > /tmp/eater.log 2>&1 &
EAT=$!
j=0
while ! grep -q ' ready' /tmp/eater.log && [ $j -lt 300 ]; do sleep 0.2; j=$((j+1)); done
echo "guest: $(uname -r) th=$TH $(grep MemFree /sys/devices/system/node/node0/meminfo | tr -s ' ')"
/lab/tierd-workload chase --total-mib 256 --hot-mib 128 --secs 14 --node 1 --interval-ms 250 > /tmp/chase.log 2>&1 &
i=0
while ! grep -q ' ready' /tmp/chase.log && [ $i -lt 300 ]; do sleep 0.2; i=$((i+1)); done
PID=$(sed -n 's/^chase pid=\([0-9]*\) .*/\1/p' /tmp/chase.log | head -1)
echo $TH > /sys/kernel/debug/sched/numa_balancing/hot_threshold_ms
echo 2 > /proc/sys/kernel/numa_balancing
n=0
while [ $n -lt 48 ] && [ -d /proc/$PID ]; do
  set -- $(cat /proc/$PID/stat)
  V=$(grep -E '^(numa_hint_faults|pgpromote_success) ' /proc/vmstat | tr ' \n' '= ')
  echo "S up=$(cut -d' ' -f1 /proc/uptime) utime=${14} stime=${15} $V"
  sleep 0.25
  n=$((n+1))
done
wait $PID 2>/dev/null
kill $EAT 2>/dev/null
SH
chmod +x "$W/run.sh"
for k in $KERNELS; do
    for th in 0 1000; do
        target/release/tierd-vm --kernel "$k" run --script "$W/run.sh" \
            --file "$BIN:/lab/tierd-workload" --timeout 600 --append "TH=$th" 2>&1 |
            grep -E '^(guest:|S )' > "$W/$k-$th.log" || true
        head -n 1 "$W/$k-$th.log"
        # Per interval with faults: faults, promotions, stime net of the background, and
        # the cost per fault; the chase's utime ticks say whether it ran at all.
        awk '/^S /{for(i=2;i<=NF;i++){split($i,kv,"=");v[kv[1]]=kv[2]}
               if(n++){dt=v["up"]-up;ds=(v["stime"]-st)/100;df=v["numa_hint_faults"]-f;dp=v["pgpromote_success"]-p;du=v["utime"]-ut
                 if(df==0){q[nq++]=ds/dt}else{r[nr++]=dt" "ds" "df" "dp" "du}}
               up=v["up"];st=v["stime"];f=v["numa_hint_faults"];p=v["pgpromote_success"];ut=v["utime"]}
             END{for(i=1;i<nq;i++)for(j=i;j>0&&q[j-1]>q[j];j--){t=q[j];q[j]=q[j-1];q[j-1]=t};bg=nq?q[int(nq/2)]:0;printf "  background stime %.0f ms/s\n",bg*1000
               for(i=0;i<nr;i++){split(r[i],x," ");net=x[2]-bg*x[1]
                 printf "  faults=%d promoted=%d utime_ticks=%d stime_net=%.0f ms -> %.1f us/fault\n",x[3],x[4],x[5],net*1000,net/x[3]*1e6}}' \
            "$W/$k-$th.log"
    done
done
