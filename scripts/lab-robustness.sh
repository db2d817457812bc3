#!/usr/bin/env bash
# Runs the README test command's short lab A (tierd row) N times in a row, optionally with a
# CPU hog beside it, and prints each run's placement, t90 and over-promotion: how CONTRIBUTING.md
# checks that the lab's CI assertions hold on a host of CI's kind, idle or busy.
#
#   scripts/lab-robustness.sh [RUNS] [--hog]
#
# --hog runs `stress-ng --cpu 1` (Debian's stress-ng; installed when missing and root) for the
# whole time. Needs what the guest tests need (scripts/vm-deps.sh). Each run takes 1-3 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
hog=${2:-}
if [ "$hog" = "--hog" ]; then
  if ! command -v stress-ng >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then ./scripts/apt-install.sh stress-ng >/dev/null; else
      echo "stress-ng not found (apt-get install stress-ng)" >&2; exit 1; fi
  fi
  stress-ng --cpu 1 --timeout 7200s --quiet &
  hog_pid=$!
  trap 'kill $hog_pid 2>/dev/null || true' EXIT
fi
pass=0
for i in $(seq 1 "$runs"); do
  log=$(mktemp)
  if TIERD_REQUIRE_GUEST=1 cargo test -q -p tierd-lab --test lab_ci \
      experiment_a_short -- --nocapture >"$log" 2>&1; then
    pass=$((pass + 1)); verdict=pass
  else
    verdict=FAIL
  fi
  row=$(grep '^| T1 ' "$log" | head -n1)
  host=$(grep '^host: ' "$log" | head -n1)
  # | T1 | tierd | t50 | t90 | t95 | hot on fast | fast MiB | over | ...
  echo "run $i: $verdict | t50 $(echo "$row" | cut -d'|' -f4) s | t90 $(echo "$row" | cut -d'|' -f5) s | t95 $(echo "$row" | cut -d'|' -f6) s | hot on fast $(echo "$row" | cut -d'|' -f7) | over $(echo "$row" | cut -d'|' -f9) | acc/hot page/s $(echo "$row" | cut -d'|' -f17) | $host"
  [ "$verdict" = pass ] || tail -n 30 "$log"
  rm -f "$log"
done
echo "$pass passed, $((runs - pass)) failed"
