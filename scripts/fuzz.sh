#!/usr/bin/env bash
# Builds the fuzz targets (fuzz/, CONTRIBUTING.md "Fuzzing") with libFuzzer on the pinned
# stable toolchain and runs each for a bounded time; fails if any target crashes.
#
#   scripts/fuzz.sh                 every target, TIERD_FUZZ_SECONDS (default 8) seconds each
#   scripts/fuzz.sh 600 numa_maps   one target for ten minutes
#
# Stable rustc has no -Zsanitizer, so the coverage instrumentation libFuzzer needs is asked of
# LLVM directly: the sancov module pass with inline 8-bit counters, the PC table and compare
# tracing, which is what cargo-fuzz turns on (without its nightly-only AddressSanitizer; safe
# Rust needs none, and overflow checks and debug assertions turn silent bugs into crashes).
# Corpora grow under target/fuzz/corpus/<target> (kept between runs); seeds come from the
# fixtures (crates/tierd-linux/tests/fixtures, deploy/, scenarios/) and fuzz/regressions/.
# Without a C++ compiler (libFuzzer is C++) this prints SKIP, or fails if TIERD_REQUIRE_FUZZ
# is set (scripts/test.sh sets it once scripts/fuzz-deps.sh has installed g++).
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-${TIERD_FUZZ_SECONDS:-8}}"
shift || true
all=(numa_maps proc_files meminfo_vmstat cgroup topology damon_regions damon_trace perf_sample ibs spe
  pagemap daemon_config scenario smaps kpageflags trace lru_gen)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

if ! command -v c++ >/dev/null 2>&1; then
  if [ -n "${TIERD_REQUIRE_FUZZ:-}" ]; then
    echo "fuzz: no C++ compiler, but TIERD_REQUIRE_FUZZ is set" >&2
    exit 1
  fi
  echo "SKIP fuzz: no C++ compiler (as root, scripts/fuzz-deps.sh installs g++)"
  exit 0
fi

start=$SECONDS
out=target/fuzz
triple=$(rustc -vV | sed -n 's/^host: //p')
# RUSTFLAGS reach only the --target build, not build scripts or proc macros.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions=on \
-Coverflow-checks=on"
# The workspace's release profile is tuned for the simulator (thin LTO, one codegen unit,
# debug info for profiling); a fuzz build wants a short build more than the last few per cent
# of speed, and a crash's panic message names its file and line without debug info.
cargo build --locked --release -p tierd-fuzz --features fuzz --bins --target "$triple" \
  --target-dir "$out" --config profile.release.lto=false \
  --config profile.release.codegen-units=16 --config profile.release.debug=false
bin="$out/$triple/release"
echo "fuzz: built in $((SECONDS - start)) s"

fixtures=crates/tierd-linux/tests/fixtures
# Seed files of a target from the repository, each cut to 16 KiB.
seeds() {
  case "$1" in
    numa_maps) find "$fixtures" -path '*/proc/*' \( -name numa_maps -o -name maps \) ;;
    proc_files) find "$fixtures" -path '*/proc/*' \( -name status -o -name stat \) ;;
    meminfo_vmstat) find "$fixtures" \( -name meminfo -o -name vmstat \) ;;
    cgroup) find "$fixtures" \( -path '*/proc/*/cgroup' -o -name 'memory.*' -o -name cgroup.procs \) ;;
    topology) find "$fixtures" \( -path '*/system/node/*' -o -name nodelist -o -name numa_balancing \
      -o -name demotion_enabled \) -type f ;;
    pagemap) find "$fixtures" -name pagemap ;;
    smaps) find "$fixtures" -name smaps ;;
    kpageflags) find "$fixtures" -name 'kpageflags.bin' ;;
    lru_gen) find "$fixtures" -name lru_gen ;;
    daemon_config) find deploy -name '*.toml' ;;
    scenario) find scenarios -name '*.toml' ;;
    # A small recorded trace is committed under fuzz/regressions/trace (a corpus of its own).
    trace) find fuzz/regressions/trace -type f ;;
  esac
}

failed=()
printf '%-16s %12s %8s\n' target executions cov
for t in "${targets[@]}"; do
  corpus="$out/corpus/$t"
  seed="$out/seeds/$t"
  art="$out/artifacts/$t"
  rm -rf "$seed"
  mkdir -p "$corpus" "$seed" "$art"
  n=0
  while IFS= read -r f; do
    n=$((n + 1))
    head -c 16384 "$f" >"$seed/$n"
  done < <(seeds "$t")
  dirs=("$corpus" "$seed")
  [ -d "fuzz/regressions/$t" ] && dirs+=("fuzz/regressions/$t")
  log="$out/$t.log"
  rc=0
  "$bin/$t" -max_total_time="$secs" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$art/" "${dirs[@]}" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  printf '%-16s %12s %8s\n' "$t" "${execs:-?}" "${cov:-?}"
  if [ "$rc" != 0 ]; then
    failed+=("$t")
    echo "fuzz: $t failed (exit $rc); the input is under $art/ (log $log):" >&2
    grep -A2 'panicked at' "$log" >&2 || true
    grep -v '^#' "$log" | grep -v '^ *[0-9]*: \|^ *at ' | tail -12 >&2
  fi
done
echo "fuzz: ${#targets[@]} targets, ${secs} s each, $((SECONDS - start)) s in all"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
