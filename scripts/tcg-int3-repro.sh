# Guest script (busybox sh) reproducing the TCG `Oops: int3` that the guest harness boots
# around (crates/tierd-vm/src/guest.rs `emulator_int3_oops`, docs/lab.md "When the emulator,
# not the guest, fails"): it switches the sched_switch tracepoint on and off while both vCPUs
# are busy, so the kernel patches the text of the context switch (a jump label, int3 first:
# arch/x86/kernel/alternative.c) under vCPUs that run it. Run it with
#   cargo run -q -p tierd-vm -- --kernel newest run --script scripts/tcg-int3-repro.sh --append N=300
# Seen 2026-12-02 (7.3.4 guest, 2-CPU host): Oops: int3 after 100-150 toggles.
T=/sys/kernel/tracing
echo "LAB clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
for i in 1 2; do ( while :; do :; done ) & done
( while :; do usleep 500; done ) &
( while :; do usleep 700; done ) &
n=0
while [ $n -lt ${N:-200} ]; do
  echo 1 > $T/events/sched/sched_switch/enable
  echo 0 > $T/events/sched/sched_switch/enable
  n=$((n+1))
  [ $((n % 50)) -eq 0 ] && echo "LAB toggled $n"
done
echo "LAB TOGGLED $n (no Oops)"
