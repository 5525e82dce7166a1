"""Benchmarks with the bucket-mount emulator (tests/fusebucket.py) as the durable target.

``python benchmarks/mount_bench.py [--large 100000] [--small 5000] [--reps 3]``

The emulator adds latency like the real mount (default 2 ms per metadata
operation, 50 ms per directory listing, 30 ms per commit) and, unless
--no-cache, hf-mount's kernel metadata cache (10 s; failed lookups 30 s), and
counts its operations.  Trees come from gen_tree.generate(); changes from gen_tree.mutate().
Scenarios, each tool in the same run, median of --reps:

- ``start``: syncengine only, the first checkpoint of the large tree after the
  mount was (re)mounted, nothing changed: a start, so it compares the durable
  manifest with the local index (issue 17: one listing of the manifest folder);
- ``idle``: a checkpoint of the large tree when nothing changed, on the same
  mount right after ``start``;
- ``changed``: a checkpoint after 100 files of the large tree got one line;
- ``full``: a first checkpoint of the small tree into an empty bucket;
- ``restore``: a restore of the small tree from the bucket into an empty dir.

Tools: syncengine; the design's ``find -newer`` + ``rsync --files-from
--delay-updates`` (restore: ``rsync -a``); plain ``rsync -a``.  Preparation
(trees, first copies) is untimed: syncengine's first copy runs on the mount
without latency, rsync's is the tree copied into the bucket directly.
``--peer-reps`` sets the repetitions of the rsync tools (minutes each at this
latency).  With
--plot, a PNG of checkpoint time ("changed") against tree size per tool
(needs matplotlib: ``pip install -e '.[bench]'``).  Prints a Markdown table;
--record appends it to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO)]

from gen_tree import generate, list_jsonl, mutate  # noqa: E402

from tests.bucket_mount import BucketMount  # noqa: E402

TOOLS = ("syncengine", "find+rsync-files-from", "rsync -a")
LATENCY = {"latency_meta_ms": 2.0, "latency_list_ms": 50.0, "latency_commit_ms": 30.0}
CACHE = {"attr_timeout_s": 10.0, "negative_timeout_s": 30.0}  # hf-mount's metadata caches
BYTES_PER_FILE = 8000


def run(argv: list[str], **kw: object) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, **kw)  # type: ignore[call-overload]
    return time.perf_counter() - t0


class Setup:
    """One tool's bucket, live tree copy and local state for one tree size."""

    cache = True  # main() sets it from --no-cache

    def __init__(self, work: Path, tool: str, live: Path) -> None:
        self.dir = work / tool.replace(" ", "").replace("+", "_")
        self.tool, self.live = tool, live
        self.backing, self.mnt = self.dir / "bucket", self.dir / "mnt"
        self.state, self.marker = self.dir / "state", self.dir / "marker"
        self.durable = self.mnt / "state/bench"

    def reset(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.state.mkdir()

    def mount(self, latency: bool) -> BucketMount:
        return BucketMount(
            self.backing,
            self.mnt,
            stats=True,
            **(LATENCY if latency else {}),
            **(CACHE if self.cache else {}),
        )  # type: ignore[arg-type]

    def config(self, local_root: Path, state: Path) -> Path:
        path = self.dir / f"cfg-{state.name}.toml"
        path.write_text(
            f'local_root = "{local_root}"\ndurable_root = "{self.mnt}"\nstate_dir = "{state}"\n'
            f'adapters = []\njobs = 16\n[[adapter]]\nname = "bench"\nlive = "{self.live.name}"\n'
            f'durable = "state/bench"\n'
        )
        return path

    def seed(self) -> None:
        """The first full copy (untimed).  syncengine's goes through the mount without
        latency (its own layout and index); rsync's is the tree copied into the
        bucket directly, which is what ``rsync -a`` through the mount leaves there
        (through the mount, 100,000 files took 24 minutes)."""
        if self.tool == "syncengine":
            with self.mount(latency=False):
                self.checkpoint(full=True)
            return
        target = self.backing / "state/bench"
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", f"{self.live}/.", f"{target}/"], check=True)
        self.marker.touch()  # the design's loop: only files newer than this next time

    def checkpoint(self, full: bool = False) -> float:
        if self.tool == "syncengine":
            cfg = self.config(self.live.parent, self.state)
            with open(self.dir / "checkpoint.log", "w") as log:  # -v: the durable.* lines
                return run(
                    [sys.executable, "-m", "syncengine", "--config", str(cfg), "-v", "checkpoint"],
                    env={**os.environ, "PYTHONPATH": str(REPO)},
                    stderr=log,
                )
        if self.tool == "rsync -a":
            self.durable.mkdir(parents=True, exist_ok=True)
            return run(["rsync", "-a", f"{self.live}/", f"{self.durable}/"])
        t0 = time.perf_counter()  # the design: find -newer marker, rsync those, move marker
        new_marker = self.dir / "marker.next"
        new_marker.touch()
        find = ["find", ".", "-type", "f"] + (
            [] if full or not self.marker.exists() else ["-newer", str(self.marker)]
        )
        listing = subprocess.run(find, cwd=self.live, check=True, capture_output=True).stdout
        if listing:
            self.durable.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                ["rsync", "-a", "--delay-updates", "--files-from=-", ".", f"{self.durable}/"],
                cwd=self.live,
                input=listing,
                check=True,
            )
        new_marker.replace(self.marker)
        return time.perf_counter() - t0

    def restore(self, target: Path) -> float:
        if self.tool == "syncengine":
            cfg = self.config(target, target / ".state")
            return run(
                [sys.executable, "-m", "syncengine", "--config", str(cfg), "-q", "restore"],
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
        (target / self.live.name).mkdir(parents=True, exist_ok=True)
        return run(["rsync", "-a", f"{self.durable}/", f"{target / self.live.name}/"])


STARTED = time.monotonic()


def timed(
    setup: Setup, action: Callable[[], float], what: str = ""
) -> tuple[float, dict[str, int]]:
    with setup.mount(latency=True) as mount:
        return timed_on(mount, setup, action, what)


def timed_on(
    mount: BucketMount, setup: Setup, action: Callable[[], float], what: str = ""
) -> tuple[float, dict[str, int]]:
    before = mount.stats()
    seconds = action()
    after = mount.stats()
    print(
        f"[{time.monotonic() - STARTED:7.0f} s] {setup.dir.parent.name} {setup.tool}: {what} "
        f"{seconds:.3f} s",
        file=sys.stderr,
        flush=True,
    )
    return seconds, {
        k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)
    }


def _check_seconds(log: Path) -> float:
    """The start check's duration from a checkpoint's -v log (0 when it did not run)."""
    for line in log.read_text().splitlines():
        if "durable.checked " in line:
            return float(line.rpartition("seconds=")[2].split()[0])
    return 0.0


def tree(work: Path, files: int) -> Path:
    live = work / f"tree-{files}" / "live"
    if not live.exists():
        generate(live, files, files * BYTES_PER_FILE, seed=7)
    return live


def bench(
    work: Path,
    large: int,
    small: int,
    reps: int,
    sizes: list[int],
    peer_reps: int,
    tools: tuple[str, ...] = TOOLS,
) -> dict[str, object]:
    rows: list[dict[str, object]] = []
    curve: dict[str, dict[int, float]] = {t: {} for t in tools}
    for files in sorted({*sizes, large} - {0}):
        live = tree(work, files)
        candidates = list_jsonl(live)
        for tool in tools:
            s = Setup(work / f"run-{files}", tool, live)
            s.reset()
            s.seed()
            time.sleep(1.1)  # changes never share a timestamp tick with the marker
            idle, changed, idle_ops, changed_ops = [], [], {}, {}
            start: list[float] = []
            check: list[float] = []  # the start check's own time (its durable.checked line)
            start_ops: dict[str, int] = {}
            for r in range(reps if tool == "syncengine" else peer_reps):
                with s.mount(latency=True) as mount:  # a new mount instance: a start
                    if tool == "syncengine":
                        t, start_ops = timed_on(mount, s, s.checkpoint, "start (idle)")
                        start.append(t)
                        check.append(_check_seconds(s.dir / "checkpoint.log"))
                    t, idle_ops = timed_on(mount, s, s.checkpoint, "idle")
                    idle.append(t)
                    mutate(
                        live,
                        min(100, len(candidates)),
                        seed=1000 * files + r,
                        candidates=candidates,
                    )
                    t, changed_ops = timed_on(mount, s, s.checkpoint, "100 changed")
                    changed.append(t)
                time.sleep(1.1)
            curve[tool][files] = statistics.median(changed)
            if files == large and start:
                rows.append(
                    {
                        "scenario": f"start (idle, first after a mount; the check itself "
                        f"{statistics.median(check):.3f} s), {files} files",
                        "tool": tool,
                        "median_s": statistics.median(start),
                        "ops": start_ops,
                    }
                )
            if files == large:
                rows.append(
                    {
                        "scenario": f"idle, {files} files",
                        "tool": tool,
                        "median_s": statistics.median(idle),
                        "ops": idle_ops,
                    }
                )
                rows.append(
                    {
                        "scenario": f"100 changed, {files} files",
                        "tool": tool,
                        "median_s": statistics.median(changed),
                        "ops": changed_ops,
                    }
                )
            shutil.rmtree(s.dir)
    if not small:
        return {
            "rows": rows,
            "curve": {t: {str(k): v for k, v in c.items()} for t, c in curve.items()},
        }
    live = tree(work, small)
    for tool in tools:
        s = Setup(work / f"full-{small}", tool, live)
        full, rest, full_ops, rest_ops = [], [], {}, {}
        for _ in range(reps if tool == "syncengine" else peer_reps):
            s.reset()
            t, full_ops = timed(s, lambda s=s: s.checkpoint(full=True), "full")  # type: ignore[misc]
            full.append(t)
            target = s.dir / "restored"
            t, rest_ops = timed(
                s,
                lambda s=s, target=target: s.restore(target),  # type: ignore[misc]
                "restore",
            )
            rest.append(t)
        rows.append(
            {
                "scenario": f"full checkpoint, {small} files",
                "tool": tool,
                "median_s": statistics.median(full),
                "ops": full_ops,
            }
        )
        rows.append(
            {
                "scenario": f"full restore, {small} files",
                "tool": tool,
                "median_s": statistics.median(rest),
                "ops": rest_ops,
            }
        )
        shutil.rmtree(s.dir)
    return {"rows": rows, "curve": {t: {str(k): v for k, v in c.items()} for t, c in curve.items()}}


def _ops(ops: dict[str, int]) -> str:
    keys = ("commit", "readdir", "getattr", "create", "rename")
    return ", ".join(f"{k} {ops.get(k, 0)}" for k in keys) + f" (all: {sum(ops.values())})"


def markdown(result: dict[str, object], args: argparse.Namespace) -> str:
    rows = result["rows"]
    assert isinstance(rows, list)
    out = [
        "| scenario | tool | median s | vs syncengine | mount operations |",
        "|---|---|---|---|---|",
    ]
    base = {r["scenario"]: r["median_s"] for r in rows if r["tool"] == "syncengine"}
    for r in rows:
        ratio = r["median_s"] / base[r["scenario"]] if base.get(r["scenario"]) else 0
        out.append(
            f"| {r['scenario']} | {r['tool']} | {r['median_s']:.3f} | "
            f"{ratio:.1f}x | {_ops(r['ops'])} |"
        )
    return "\n".join(out)


def plot(result: dict[str, object], path: Path) -> None:
    import matplotlib  # only for the benchmark: pip install -e '.[bench]'

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = result["curve"]
    assert isinstance(curve, dict)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for tool, points in curve.items():
        xs = sorted(int(k) for k in points)
        ax.plot(xs, [points[str(x)] for x in xs], marker="o", label=tool)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("files in the live tree")
    ax.set_ylabel("checkpoint after 100 changed files (s)")
    ax.set_title("Checkpoint to the bucket-mount emulator (2/50/30 ms latency)")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--large", type=int, default=100_000, help="files for idle/changed (0: skip)")
    p.add_argument(
        "--small", type=int, default=5_000, help="files for full checkpoint/restore (0: skip)"
    )
    p.add_argument("--sizes", default="", help="extra tree sizes for the plot, comma-separated")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--peer-reps", type=int, help="repetitions of rsync's runs (default: --reps)")
    p.add_argument(
        "--tools", default=",".join(TOOLS), help=f"comma-separated subset of: {', '.join(TOOLS)}"
    )
    p.add_argument("--work", type=Path, default=Path("/tmp/syncengine-mount-bench"))
    p.add_argument("--plot", type=Path, help="write a PNG here")
    p.add_argument("--record", action="store_true", help="append to benchmarks/RESULTS.md")
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="no kernel metadata cache (default: hf-mount's 10 s, 30 s negative)",
    )
    args = p.parse_args(argv)
    Setup.cache = not args.no_cache
    args.work.mkdir(parents=True, exist_ok=True)
    sizes = [int(x) for x in args.sizes.split(",") if x]
    t0 = time.monotonic()
    peer_reps = args.peer_reps or args.reps
    tools = tuple(t for t in TOOLS if t in args.tools.split(","))
    result = bench(args.work, args.large, args.small, args.reps, sizes, peer_reps, tools)
    table = markdown(result, args)
    (args.work / "mount-bench.json").write_text(json.dumps(result, indent=2))
    if args.plot:
        plot(result, args.plot)
    cmd = "python benchmarks/mount_bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = (
        f"\n## On the bucket-mount emulator\n\n`{cmd}` ({time.strftime('%Y-%m-%d')}, "
        f"{os.cpu_count()} cores, {time.monotonic() - t0:.0f} s; latency 2 ms per metadata "
        f"operation, 50 ms per listing, 30 ms per commit; "
        f"{'no metadata cache' if args.no_cache else 'metadata cached 10 s, negatives 30 s'}"
        f"; median of {args.reps} runs, rsync's of {peer_reps})\n\n{table}\n"
    )
    if args.plot:
        text += f"\n![checkpoint time against tree size]({args.plot.name})\n"
    print(text)
    if args.record:
        results = HERE / "RESULTS.md"
        old = results.read_text() if results.exists() else "# Benchmark results\n"
        results.write_text(old.rstrip("\n") + "\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
