"""Two builds of syncengine side by side: CPU time of the same commands on the same tree.

``python benchmarks/ab_cpu.py --a OLD/.venv/bin/syncengine --b NEW/.venv/bin/syncengine
[--tree /dev/shm/ab/live] [--reps 5] [--starts 12]`` runs, alternating A and B in
each repetition:

- a full checkpoint into an empty durable root, an idle checkpoint after it, and a
  full restore into an empty directory (one whole-tree adapter, as run_tree.py);
- ``status`` and ``journal record --help``: the cost of starting the CLI.

Each figure is CPU time (user + system, children included: the forked walk and
restore workers), which a busy machine disturbs less than wall time; the table
gives the median over the repetitions (the minimum too for the start-up rows) and
B / A.  Generate a tree first, e.g. ``python benchmarks/run_tree.py --work
/dev/shm/ab --files 20000 --bytes 160M --prepare-only``; it writes only under
``--work`` (default: beside the tree).  Unset PYTHONDONTWRITEBYTECODE, or every
start of a fresh checkout compiles its modules.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from bench_tools import render_config

SCENARIOS = ("full checkpoint", "idle checkpoint", "full restore")
STARTS = ("status", "journal record --help")


def cpu(argv: list[str]) -> float:
    """CPU seconds of one command and everything it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, capture_output=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.decode()[-1000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def config(work: Path, name: str, live: Path, durable: Path, state: Path) -> str:
    path = work / f"{name}.toml"
    path.write_text(render_config(live, durable, state))
    return str(path)


def one_round(exe: str, tree: Path, work: Path, out: dict[str, list[float]]) -> None:
    """Full, idle and restore for one build, from empty directories."""
    dirs = {name: work / name for name in ("durable", "state", "restored", "restore-state")}
    for path in dirs.values():
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
    cfg = config(work, "checkpoint", tree, dirs["durable"], dirs["state"])
    out["full checkpoint"].append(cpu([exe, "--config", cfg, "checkpoint"]))
    out["idle checkpoint"].append(cpu([exe, "--config", cfg, "checkpoint"]))
    back = config(work, "restore", dirs["restored"], dirs["durable"], dirs["restore-state"])
    out["full restore"].append(cpu([exe, "--config", back, "restore"]))
    for command in STARTS:
        out[command].append(cpu([exe, "--config", cfg, *command.split()]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--a", required=True, help="the build to compare against (executable)")
    p.add_argument("--b", required=True, help="the build measured (executable)")
    p.add_argument("--tree", type=Path, default=Path("/dev/shm/ab/live"))
    p.add_argument("--work", type=Path, help="scratch directory (default: TREE/../cpu-ab)")
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    if not args.tree.is_dir():
        sys.exit(f"{args.tree}: no tree (benchmarks/run_tree.py --prepare-only makes one)")
    work = args.work or args.tree.parent / "cpu-ab"
    results: dict[str, dict[str, list[float]]] = {
        build: {row: [] for row in (*SCENARIOS, *STARTS)} for build in ("a", "b")
    }
    for _ in range(args.reps):
        for build in ("a", "b"):
            one_round(getattr(args, build), args.tree, work / build, results[build])
    shutil.rmtree(work, ignore_errors=True)
    print(f"CPU seconds, median of {args.reps} (min), load average {os.getloadavg()[0]:.2f}")
    print("| command | A | B | B / A |")
    print("|---|---:|---:|---:|")
    for row in (*SCENARIOS, *STARTS):
        a, b = results["a"][row], results["b"][row]
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"| {row} | {ma:.3f} ({min(a):.3f}) | {mb:.3f} ({min(b):.3f}) | {mb / ma:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
