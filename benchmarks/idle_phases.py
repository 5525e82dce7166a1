"""Where an idle checkpoint's time goes: imports, index and table load, walk, missing check.

    python benchmarks/idle_phases.py --config CFG [--runs 3]

CFG is a syncengine config whose first adapter has been checkpointed already
(run_tree.py leaves one at WORK/state/syncengine.toml).  Each run is a fresh
process, so the import time is real; the phases mirror Engine.checkpoint.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

PHASES = r"""
import sys, time
marks = [("start", time.perf_counter())]
import syncengine.cli  # noqa: F401  (what `syncengine checkpoint` imports)
marks.append(("imports", time.perf_counter()))
from syncengine.engine import passes  # noqa: F401  (the pass machinery, imported on first use)
from syncengine.walk import missing, tablewalk  # noqa: F401  (what a pass imports)
from syncengine.config import load_config
from syncengine.engine import Engine
from syncengine.walk.scan import scan
marks.append(("lazy imports", time.perf_counter()))
cfg = load_config(sys.argv[1])
eng = Engine(cfg)
marks.append(("config", time.perf_counter()))
spec = cfg.adapters[0]
state = eng.passes.adapters.state(spec)
marks.append(("index load", time.perf_counter()))
[job] = eng.passes.scan_jobs([state], time.time_ns())  # as Engine.checkpoint builds it
marks.append(("table load" if job.table else "no table", time.perf_counter()))
result = scan([job], workers=2)[state.name]
marks.append(("walk (2 workers)", time.perf_counter()))
if result.gone is None:
    missing.find_missing(state, result)
else:
    missing.missing_among(state, result.gone)
marks.append(("missing check", time.perf_counter()))
print(" | ".join(f"{b} {1000 * (t1 - t0):.0f} ms" for (_, t0), (b, t1) in zip(marks, marks[1:]))
      + f" | total {1000 * (marks[-1][1] - marks[0][1]):.0f} ms, changed {len(result.changed)}")
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    for _ in range(args.runs):
        subprocess.run([sys.executable, "-c", PHASES, args.config], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
