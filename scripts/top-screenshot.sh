#!/usr/bin/env bash
# Regenerates docs/img/top.txt (tmux capture of `tierd top --sim`) and, when chromium is
# installed, docs/img/top.png (the capture's colours through a small ANSI -> HTML step).
# Usage: scripts/top-screenshot.sh [path/to/tierd]   (default target/release/tierd)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/tierd}
session=tierd-top-shot-$$
out=docs/img
mkdir -p "$out"
tmux new-session -d -s "$session" -x 120 -y 36 \
  "$bin top --sim three-node --config PP --scale 0.125 --interval 0.1; sleep 60"
trap 'tmux kill-session -t "$session" 2>/dev/null || true' EXIT
# Wait until the simulated clock passes 30 s: the ranks' memory, moved to CXL at 10 s, is
# being promoted back then.
for _ in $(seq 1 600); do
  if tmux capture-pane -p -t "$session" | grep -q 't = \([3-9][0-9]\|1[0-9][0-9]\)\.'; then break; fi
  sleep 0.1
done
tmux send-keys -t "$session" s s   # sort by the fast tier, to show a key's effect
sleep 0.3
tmux capture-pane -p -t "$session" > "$out/top.txt"
tmux capture-pane -p -e -t "$session" > "$out/top.ansi.tmp"
tmux send-keys -t "$session" q
if command -v chromium >/dev/null; then
  html=$(mktemp --suffix=.html)
  python3 scripts/ansi2html.py < "$out/top.ansi.tmp" > "$html"
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --window-size=1010,640 --screenshot="$PWD/$out/top.png" "file://$html" 2>/dev/null
  rm -f "$html"
else
  echo "chromium not installed: $out/top.png not regenerated" >&2
fi
rm -f "$out/top.ansi.tmp"
