"""Time syncengine side by side with the rsync-based design it replaces.

``python benchmarks/run_tree.py [--files 100000] [--bytes 800M] [--reps 5]``
generates (once, reused while its parameters match) a realistic agent tree
under ``--work`` and, for each scenario, runs each tool ``--reps`` times:

- ``idle``: a checkpoint when nothing changed since the last one;
- ``changed``: a checkpoint after ``--changed`` files got one more line;
- ``full``: a first checkpoint into an empty durable directory;
- ``restore``: a restore from a complete durable directory into an empty one.

Each tool writes to its own durable directory under ``--durable`` and keeps
its own state (index, marker) under ``--work/state``; both are recreated at
the start of every run. Setup, resets and correctness checks are untimed.
Timings are warm-cache: nothing is dropped from the page cache, and ``sync``
runs before every timed run so no earlier writeback competes with it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import bench_report
from bench_report import Row
from bench_tools import (
    DesignScript,
    FindFloor,
    PlainRsync,
    SyncEngine,
    Tool,
    find_syncengine,
    run_timed,
)
from gen_tree import GENERATOR_VERSION, generate, list_jsonl, mutate, parse_size

SCENARIOS = ("idle", "changed", "full", "restore")
TOOL_NAMES = ("syncengine", "rsync-files-from", "rsync", "find")
OWNER_FILE = ".syncengine-bench"
# Pause before changing files, so a change never shares a timestamp tick with
# the previous checkpoint (find -newer is strict) and an engine that refuses
# to trust very recent mtimes (borg's rule) has had a chance to record them,
# as a 15 s checkpoint loop would.
SETTLE_S = 1.0


class BenchError(Exception):
    """A setup problem that stops the run (bad directory, failed preparation)."""


class Layout:
    """Where everything lives; owns the directories it resets."""

    def __init__(self, work: Path, durable: Path) -> None:
        self.work, self.durable = work.absolute(), durable.absolute()
        self.live = self.work / "live"
        self.stamp = self.work / "tree.json"
        self.state = self.work / "state"
        self.restored = self.work / "restore"
        self.logs = self.work / "logs"
        if self.durable == self.live or self.live in self.durable.parents:
            raise BenchError(f"--durable {self.durable} must not be inside the live tree")

    def claim(self) -> None:
        """Create (or check ownership of) work and durable, and clear old results."""
        for root in (self.work, self.durable):
            _claim(root)
        for old in (
            self.state,
            self.restored,
            self.logs,
            self.durable / "sync",
            self.durable / "full",
        ):
            reset(old)


def _claim(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    owner = root / OWNER_FILE
    if owner.exists():
        return
    if any(root.iterdir()):
        raise BenchError(f"{root} is not empty and was not made by run_tree; choose another")
    owner.write_text("Made by benchmarks/run_tree.py, which deletes what is below on each run.\n")


def reset(path: Path) -> None:
    """Make ``path`` an empty directory (untimed; may take seconds for big trees)."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)


def ensure_tree(layout: Layout, files: int, total_bytes: int, seed: int) -> dict[str, object]:
    """Reuse the generated tree if its stamp matches, else generate it."""
    wanted = {"files": files, "bytes": total_bytes, "seed": seed, "generator": GENERATOR_VERSION}
    if layout.stamp.exists() and layout.live.is_dir():
        stamp = json.loads(layout.stamp.read_text())
        if {k: stamp.get(k) for k in wanted} == wanted:
            log(f"reusing the tree in {layout.live} ({files} files, seed {seed})")
            return stamp  # type: ignore[no-any-return]
    layout.stamp.unlink(missing_ok=True)
    if layout.live.exists():
        shutil.rmtree(layout.live)
    log(f"generating {files} files, {total_bytes / 2**20:.0f} MiB into {layout.live} ...")
    summary = generate(layout.live, files, total_bytes, seed)
    log(f"generated {summary.files} files, {summary.dirs} dirs in {summary.seconds:.1f} s")
    stamp = {**wanted, "dirs": summary.dirs, "written": summary.bytes, "seconds": summary.seconds}
    layout.stamp.write_text(json.dumps(stamp, indent=2) + "\n")
    return stamp


def tree_totals(root: Path) -> tuple[int, int]:
    """(regular files, bytes) below ``root``; the correctness check for copies."""
    files = size = 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            st = os.lstat(os.path.join(dirpath, name))
            files += 1
            size += st.st_size
    return files, size


def log(message: str) -> None:
    print(f"run_tree: {message}", file=sys.stderr, flush=True)


class Bench:
    """Runs the scenarios for one tool at a time."""

    def __init__(self, layout: Layout, reps: int, changed: int) -> None:
        self.layout, self.reps, self.changed = layout, reps, changed
        self._candidates: list[str] | None = None
        self._mutations = 0

    def run(self, scenario: str, tool: Tool) -> Row:
        row = Row(scenario, tool.name, tool.describe(scenario))
        steps: dict[str, Callable[[Tool, Row], None]] = {
            "idle": self._idle,
            "changed": self._changed,
            "full": self._full,
            "restore": self._restore,
        }
        try:
            steps[scenario](tool, row)
        except BenchError as exc:
            row.status = f"failed: {exc}"
            log(f"{scenario} / {tool.name}: {exc}")
        return row

    # -- scenarios ---------------------------------------------------------

    def _idle(self, tool: Tool, row: Row) -> None:
        self._catch_up(tool)
        for rep in range(self.reps):
            if not self._timed(row, tool, self._checkpoint_argv(tool), rep):
                return
            self._check_selection(row, tool, rep, expected=0)

    def _changed(self, tool: Tool, row: Row) -> None:
        self._catch_up(tool)
        for rep in range(self.reps):
            if tool.name == "find":
                (self._state(tool) / "marker").touch()
            time.sleep(SETTLE_S)
            changed = self._mutate()
            if not self._timed(row, tool, self._checkpoint_argv(tool), rep):
                return
            self._check_selection(row, tool, rep, expected=len(changed))
            self._check_copied(row, tool, rep, changed)

    def _full(self, tool: Tool, row: Row) -> None:
        durable = self.layout.durable / "full" / tool.name
        state = self.layout.state / f"{tool.name}-full"
        live_totals = tree_totals(self.layout.live)
        for rep in range(self.reps):
            reset(durable)
            reset(state)
            argv = tool.checkpoint(self.layout.live, durable, state)
            if not self._timed(row, tool, argv, rep):
                break
            if tool.name != "syncengine":  # the engine's durable layout is its own
                self._check_totals(row, rep, durable, live_totals)
        shutil.rmtree(durable, ignore_errors=True)

    def _restore(self, tool: Tool, row: Row) -> None:
        self._catch_up(tool)
        live_totals = tree_totals(self.layout.live)
        target = self.layout.restored / tool.name
        state = self.layout.state / f"{tool.name}-restore"
        for rep in range(self.reps):
            reset(target)
            reset(state)
            argv = tool.restore(self._durable(tool), target, state)
            if not self._timed(row, tool, argv, rep):
                break
            self._check_totals(row, rep, target, live_totals)
        shutil.rmtree(target, ignore_errors=True)

    # -- helpers -----------------------------------------------------------

    def _state(self, tool: Tool) -> Path:
        path = self.layout.state / tool.name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _durable(self, tool: Tool) -> Path:
        # Created up front: the engine treats a missing durable root as an
        # unmounted bucket and refuses to write into it.
        path = self.layout.durable / "sync" / tool.name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _checkpoint_argv(self, tool: Tool) -> list[str]:
        return tool.checkpoint(self.layout.live, self._durable(tool), self._state(tool))

    def _catch_up(self, tool: Tool) -> None:
        """Bring the tool's durable copy up to date with the live tree (untimed).

        Runs twice, SETTLE_S apart, so the second pass sees every file as
        settled; the first pass of a run is a full copy.
        """
        if tool.name == "find":
            time.sleep(SETTLE_S)
            (self._state(tool) / "marker").touch()
            return
        for _ in range(2):
            argv = self._checkpoint_argv(tool)
            done = subprocess.run(argv, capture_output=True, check=False)
            if not tool.accepts(done.returncode):
                tail = done.stderr.decode(errors="replace").strip()[-400:]
                raise BenchError(f"preparing checkpoint exited {done.returncode}: {tail}")
            time.sleep(SETTLE_S)

    def _mutate(self) -> list[str]:
        if self._candidates is None:
            self._candidates = list_jsonl(self.layout.live)
        self._mutations += 1
        return mutate(self.layout.live, self.changed, 1000 + self._mutations, self._candidates)

    def _log_paths(self, row: Row) -> tuple[Path, Path]:
        stem = self.layout.logs / f"{row.scenario}-{row.tool}"
        return stem.with_suffix(".out"), stem.with_suffix(".err")

    def _timed(self, row: Row, tool: Tool, argv: list[str], rep: int) -> bool:
        os.sync()
        out, err = self._log_paths(row)
        sample = run_timed(argv, out, err)
        row.samples.append(sample)
        log(f"{row.scenario} / {row.tool} rep {rep + 1}/{self.reps}: {sample.seconds:.3f} s")
        if tool.accepts(sample.returncode):
            return True
        row.status = f"failed: exit {sample.returncode} (stderr in {err})"
        tail = err.read_text(errors="replace").strip()[-600:]
        log(f"{row.scenario} / {row.tool} exited {sample.returncode}; {err}:\n{tail}")
        return False

    def _check_selection(self, row: Row, tool: Tool, rep: int, expected: int) -> None:
        """find and the design script must select exactly the changed files."""
        if tool.name == "find":
            listing = self._log_paths(row)[0]
        elif tool.name == "rsync-files-from":
            listing = self._state(tool) / "files-from.list"
        else:
            return
        got = len(listing.read_bytes().splitlines())
        if got != expected:
            row.problems.append(f"rep {rep + 1}: selected {got} files, expected {expected}")

    def _check_copied(self, row: Row, tool: Tool, rep: int, changed: list[str]) -> None:
        """Mirror tools must leave each changed file at its live size."""
        if tool.name not in ("rsync", "rsync-files-from"):
            return
        durable = self._durable(tool)
        stale = [
            rel
            for rel in changed
            if not (durable / rel).is_file()
            or (durable / rel).stat().st_size != (self.layout.live / rel).stat().st_size
        ]
        if stale:
            row.problems.append(f"rep {rep + 1}: {len(stale)} changed files not copied")

    def _check_totals(self, row: Row, rep: int, copy: Path, expected: tuple[int, int]) -> None:
        got = tree_totals(copy)
        if got != expected:
            row.problems.append(f"rep {rep + 1}: {got[0]} files/{got[1]} B, live has {expected}")


def build_tools(names: list[str], syncengine: str | None) -> tuple[dict[str, Tool], dict[str, str]]:
    """The requested tools, and the reason for each one that is unavailable."""
    tools: dict[str, Tool] = {}
    missing: dict[str, str] = {}
    for name in names:
        if name == "syncengine":
            exe, why = find_syncengine(syncengine)
            if exe is None:
                missing[name] = why
                log(f"syncengine rows skipped: {why}")
            else:
                tools[name] = SyncEngine(exe)
        elif name == "rsync-files-from":
            tools[name] = DesignScript()
        elif name == "rsync":
            tools[name] = PlainRsync()
        else:
            tools[name] = FindFloor()
    return tools, missing


def _csv(allowed: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"choose from {','.join(allowed)}; got {text!r}")
        return items

    return parse


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Time syncengine against rsync-based checkpoints.")
    p.add_argument("--work", type=Path, default=Path("/tmp/syncengine-bench"), help="work dir")
    p.add_argument("--durable", type=Path, help="durable root (default WORK/durable)")
    p.add_argument("--files", type=int, default=100_000, help="files in the tree (100000)")
    p.add_argument("--bytes", type=parse_size, default=800 * 2**20, help="tree size (800M)")
    p.add_argument("--seed", type=int, default=1, help="generator seed (1)")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions per row (5)")
    p.add_argument("--changed", type=int, default=100, help="files changed per rep (100)")
    p.add_argument("--scenarios", type=_csv(SCENARIOS), default=list(SCENARIOS))
    p.add_argument("--tools", type=_csv(TOOL_NAMES), default=list(TOOL_NAMES))
    p.add_argument("--syncengine", help="engine executable (default: `syncengine` on PATH)")
    p.add_argument("--out", type=Path, help="append a Markdown section to this file")
    p.add_argument("--json", type=Path, help="write raw numbers to this file")
    p.add_argument("--prepare-only", action="store_true", help="generate the tree and stop")
    return p


def run(args: argparse.Namespace) -> list[Row]:
    load = bench_report.load_average()
    if os.getloadavg()[0] > 0.5:
        log(f"warning: load average {load}: other work on this machine will add noise")
    layout = Layout(args.work, args.durable or args.work / "durable")
    layout.claim()
    tree = ensure_tree(layout, args.files, args.bytes, args.seed)
    if args.prepare_only:
        return []
    tools, missing = build_tools(args.tools, args.syncengine)
    bench = Bench(layout, args.reps, args.changed)
    rows: list[Row] = []
    for scenario in args.scenarios:
        for name in args.tools:
            if name in missing:
                rows.append(Row(scenario, name, "", status=f"skipped: {missing[name]}"))
            elif scenario in tools[name].scenarios:
                rows.append(bench.run(scenario, tools[name]))
    report(args, layout, tree, rows, load)
    return rows


def report(
    args: argparse.Namespace, layout: Layout, tree: dict[str, object], rows: list[Row], load: str
) -> None:
    files, size = tree_totals(layout.live)
    tree_facts: dict[str, object] = {
        "files": files,
        "MiB": round(size / 2**20, 1),
        "dirs": tree.get("dirs"),
        "seed": tree.get("seed"),
        "generator": f"v{tree.get('generator')}",
        "reps": args.reps,
        "changed per rep": args.changed,
    }
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = shlex.join(["python", *sys.argv])
    machine = bench_report.machine_info(layout.live, layout.durable, load)
    print(bench_report.markdown_table(rows))
    print()
    print(bench_report.legend(rows))
    if args.out:
        section = bench_report.markdown_section(when, command, machine, tree_facts, rows)
        with args.out.open("a") as fh:
            fh.write("\n" + section)
    if args.json:
        args.json.write_text(bench_report.json_report(when, command, machine, tree_facts, rows))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        rows = run(args)
    except (BenchError, ValueError) as exc:
        log(str(exc))
        return 2
    failed = [r for r in rows if r.status.startswith("failed") or r.problems]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
