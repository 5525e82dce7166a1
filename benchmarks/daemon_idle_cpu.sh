#!/usr/bin/env bash
# CPU of an idle `syncengine run` over SECONDS (default 600) after start-up, on a tree
# that is already checkpointed (run_tree.py leaves one: WORK/state/syncengine.toml).
#   benchmarks/daemon_idle_cpu.sh CONFIG [SECONDS] [SYNCENGINE]
set -euo pipefail
config=$1; seconds=${2:-600}; se=${3:-syncengine}
"$se" --config "$config" run --interval 15 -- sleep $((seconds + 160)) >/dev/null 2>&1 &
pid=$!
sleep 90  # restore plan, first walk, inotify watches
tick=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
a=$(cpu); t0=$(date +%s.%N)
sleep "$seconds"
b=$(cpu); t1=$(date +%s.%N)
kill -TERM "$pid"; wait "$pid" || true
python3 -c "d=($b-$a)/$tick; w=$t1-$t0; print(f'idle CPU: {d:.2f} s over {w:.0f} s = {100*d/w:.3f}% of one core (start-up: {$a/$tick:.2f} s)')"
