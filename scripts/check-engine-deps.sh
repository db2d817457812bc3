#!/usr/bin/env bash
# The engine crate must stay pure: no libc, nix or tokio anywhere in its normal dependency
# tree (DEVELOPERS.md, "a pure engine crate (no I/O, no clock, no libc)").
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$(cargo tree -p tierd-engine -e normal --prefix none --format '{p}' | awk '{print $1}' | sort -u)
bad=$(printf '%s\n' "$tree" | grep -E '^(libc|nix|tokio)$' || true)
if [ -n "$bad" ]; then
  echo "tierd-engine depends on forbidden crates: $bad" >&2
  cargo tree -p tierd-engine -e normal -i "$(printf '%s' "$bad" | head -1)" >&2 || true
  exit 1
fi
echo "tierd-engine dependency check: ok ($(printf '%s\n' "$tree" | wc -l) crates, no libc/nix/tokio)"
