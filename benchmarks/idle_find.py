"""An idle one-shot ``syncengine checkpoint`` against ``find -newer`` over the same tree.

    python benchmarks/idle_find.py --work /tmp/idle-find --files 100000 --dirs 2000 \\
        --syncengine .venv/bin/syncengine [--also OLD/.venv/bin/syncengine] [--reps 9]
    python benchmarks/idle_find.py --work /tmp/idle20k --tree /tmp/idle20k/live ...

Builds (once) a tree of ``--files`` small files spread evenly over ``--dirs``
directories, two levels deep (``pNN/sNN/fNN.json``), or takes ``--tree`` (e.g. the
20,000-directory tree ``run_tree.py`` generates).  Each build is brought up to date
with two untimed checkpoints (its own state and durable directories under
``--work``), then every repetition times, in turn, each build's idle checkpoint,
``find TREE -newer MARKER -type f -printf '%P\\n'`` and each build's
``syncengine --version`` (starting the CLI alone), each as a whole process,
alternating so a drift of the machine's speed hits every command alike.  It prints
wall and CPU seconds (user + system, children included: on a busy machine the CPU
figure moves less), medians (min-max) and each median over find's.  Writes only
under ``--work``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_tools import render_config


def build_tree(root: Path, files: int, dirs: int) -> None:
    """``files`` files of 64 bytes in ``dirs`` leaf directories under sqrt(dirs) parents."""
    if (root / ".complete").exists():
        return
    parents = max(1, int(dirs**0.5))
    per_dir = -(-files // dirs)
    n = 0
    for d in range(dirs):
        leaf = root / f"p{d % parents:03d}" / f"s{d // parents:03d}"
        leaf.mkdir(parents=True, exist_ok=True)
        for f in range(min(per_dir, files - n)):
            (leaf / f"f{f:03d}.json").write_bytes(b'{"k": %08d}\n' % n + b"x" * 50)
            n += 1
    (root / ".complete").touch()


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, the forked walkers included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.decode()[-800:]}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--tree", type=Path, help="an existing tree (default: build WORK/live)")
    p.add_argument("--files", type=int, default=100_000)
    p.add_argument("--dirs", type=int, default=2_000)
    p.add_argument("--syncengine", required=True, help="the build measured")
    p.add_argument("--also", help="a second build, e.g. main's, in the same run")
    p.add_argument("--reps", type=int, default=9)
    args = p.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    tree = args.tree.resolve() if args.tree else work / "live"
    if not args.tree:
        build_tree(tree, args.files, args.dirs)
    builds = {
        "syncengine": args.syncengine,
        **({"syncengine (also)": args.also} if args.also else {}),
    }
    cmds: dict[str, list[str]] = {}
    for i, (name, exe) in enumerate(builds.items()):
        cfg = work / f"b{i}.toml"
        (work / f"durable{i}").mkdir(exist_ok=True)
        cfg.write_text(render_config(tree, work / f"durable{i}", work / f"state{i}"))
        for _ in range(2):  # the first copies everything; the second sees all settled
            timed([exe, "--config", str(cfg), "checkpoint"])
            time.sleep(1.1)
        cmds[f"{name} checkpoint"] = [exe, "--config", str(cfg), "checkpoint"]
    marker = work / "marker"
    marker.touch()
    time.sleep(1.1)
    cmds["find -newer"] = [
        "find",
        str(tree),
        "-newer",
        str(marker),
        "-type",
        "f",
        "-printf",
        "%P\n",
    ]
    for name, exe in builds.items():
        cmds[f"{name} --version"] = [exe, "--version"]
    wall: dict[str, list[float]] = {name: [] for name in cmds}
    cpu: dict[str, list[float]] = {name: [] for name in cmds}
    for argv in cmds.values():  # warm the page cache once, untimed
        timed(argv)
    load = os.getloadavg()[0]
    for _ in range(args.reps):
        for name, argv in cmds.items():
            w, c = timed(argv)
            wall[name].append(w)
            cpu[name].append(c)
    ref_wall, ref_cpu = (statistics.median(v["find -newer"]) for v in (wall, cpu))
    print(f"tree {tree}: {args.reps} alternating runs, load {load:.1f} -> {os.getloadavg()[0]:.1f}")
    print("| command | wall median s (min-max) | / find | CPU median s (min-max) | / find |")
    print("|---|---:|---:|---:|---:|")
    for name in cmds:
        w, c = wall[name], cpu[name]
        mw, mc = statistics.median(w), statistics.median(c)
        print(
            f"| {name} | {mw:.3f} ({min(w):.3f}-{max(w):.3f}) | {mw / ref_wall:.2f} "
            f"| {mc:.3f} ({min(c):.3f}-{max(c):.3f}) | {mc / ref_cpu:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
