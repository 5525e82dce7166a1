"""The tools ``run_tree`` compares, as argv lists, and how each one is timed.

Every tool is run as a whole process and timed from spawn to reaped exit.
Its peak RSS comes from GNU time (``/usr/bin/time -f %M``; Debian package
``time``), not from ``os.wait4`` of our own child: Linux charges a child with
the RSS of the process it was forked from, so a child of this Python runner
would report the runner's size. The peak is that of the largest single process
in the tool's tree (bash, find, rsync's sender/receiver/generator), not their
sum. This module builds commands and runs them; it decides nothing about
scenarios and deletes nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

# The design's checkpoint for one file-tree adapter (scripts/agent-state.sh in
# shared/seed/agent-state-checkpoints.md), reduced to what it costs.
DESIGN_CHECKPOINT = r"""
set -u
live=$1 durable=$2 marker=$3 list=$4
# The new timestamp is taken at the START, before the walk, so a file written
# while this run walks or copies is newer than it and is taken again next run.
touch "$marker.next"
if [ -e "$marker" ]; then
  # find -newer is strict (mtime > marker): a file written in the same
  # timestamp tick right after the touch above is never selected again.
  find "$live" -newer "$marker" -type f -printf '%P\n' > "$list"
else
  find "$live" -type f -printf '%P\n' > "$list"  # first checkpoint: everything
fi
mkdir -p "$durable"
rc=0
rsync -a --files-from="$list" --delay-updates "$live/" "$durable/" || rc=$?
# 24: source files vanished mid-copy (harnesses prune scratch files): not fatal.
if [ "$rc" -ne 0 ] && [ "$rc" -ne 24 ]; then exit "$rc"; fi
mv "$marker.next" "$marker"
"""


GNU_TIME = "/usr/bin/time"


@dataclass(frozen=True)
class Sample:
    """One timed run of one command; ``maxrss_kb`` is None without GNU time."""

    seconds: float
    maxrss_kb: int | None
    returncode: int


def run_timed(argv: list[str], stdout: Path, stderr: Path) -> Sample:
    """Run ``argv`` to completion; wall time from spawn to exit (GNU time adds ~1 ms)."""
    rss_file = stderr.with_suffix(".rss")
    rss_file.unlink(missing_ok=True)
    measure = os.access(GNU_TIME, os.X_OK)
    if measure:
        argv = [GNU_TIME, "-f", "%M", "-o", str(rss_file), "--", *argv]
    with stdout.open("wb") as out, stderr.open("ab") as err:
        start = time.perf_counter()
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, check=False)
        elapsed = time.perf_counter() - start
    return Sample(elapsed, _read_rss(rss_file) if measure else None, done.returncode)


def _read_rss(path: Path) -> int | None:
    """GNU time's last line is %M; a line before it may report the exit status."""
    try:
        return int(path.read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


class Tool(Protocol):
    """A checkpoint/restore implementation under test."""

    name: str
    scenarios: frozenset[str]

    def checkpoint(self, live: Path, durable: Path, state: Path) -> list[str]: ...

    def restore(self, durable: Path, target: Path, state: Path) -> list[str]: ...

    def describe(self, scenario: str) -> str: ...

    def accepts(self, returncode: int) -> bool: ...


class SyncEngine:
    """``syncengine --config CFG checkpoint|restore`` with one whole-tree adapter."""

    name = "syncengine"
    scenarios = frozenset({"idle", "changed", "full", "restore"})

    def __init__(self, executable: Path) -> None:
        self.executable = executable

    def checkpoint(self, live: Path, durable: Path, state: Path) -> list[str]:
        return [
            str(self.executable),
            "--config",
            str(self._config(live, durable, state)),
            "checkpoint",
        ]

    def restore(self, durable: Path, target: Path, state: Path) -> list[str]:
        return [
            str(self.executable),
            "--config",
            str(self._config(target, durable, state)),
            "restore",
        ]

    def describe(self, scenario: str) -> str:
        verb = "restore" if scenario == "restore" else "checkpoint"
        return f"`syncengine --config CFG {verb}` (one adapter: live `.`, durable `tree`)"

    def accepts(self, returncode: int) -> bool:
        return returncode == 0

    @staticmethod
    def _config(local_root: Path, durable_root: Path, state: Path) -> Path:
        """Write the TOML config beside (never inside) the state dir."""
        text = render_config(local_root, durable_root, state)
        path = state.parent / f"{state.name}.toml"
        path.write_text(text)
        return path


def render_config(local_root: Path, durable_root: Path, state: Path) -> str:
    """The engine's config for one adapter covering the whole local root."""
    # JSON string escapes are valid TOML basic-string escapes.
    text = (
        f"local_root = {json.dumps(str(local_root))}\n"
        f"durable_root = {json.dumps(str(durable_root))}\n"
        f"state_dir = {json.dumps(str(state))}\n"
        "adapters = []  # disable the built-in adapters\n\n"
        '[[adapter]]\nname = "tree"\nlive = "."\ndurable = "tree"\n'
    )
    tomllib.loads(text)  # fail here, not inside the engine, if a path breaks TOML
    return text


class DesignScript:
    """The rsync-based design: ``find -newer`` marker plus ``rsync --files-from``."""

    name = "rsync-files-from"
    scenarios = frozenset({"idle", "changed", "full", "restore"})

    def checkpoint(self, live: Path, durable: Path, state: Path) -> list[str]:
        state.mkdir(parents=True, exist_ok=True)
        marker, listing = state / "marker", state / "files-from.list"
        args = [str(live), str(durable), str(marker), str(listing)]
        return ["bash", "-c", DESIGN_CHECKPOINT, "design-checkpoint", *args]

    def restore(self, durable: Path, target: Path, state: Path) -> list[str]:
        # The design restores with --update: never overwrite a newer local file.
        return ["rsync", "-a", "--update", f"{durable}/", f"{target}/"]

    def describe(self, scenario: str) -> str:
        if scenario == "restore":
            return "design restore: `rsync -a --update DURABLE/ LIVE/`"
        walk = "find LIVE -type f" if scenario == "full" else "find LIVE -newer MARKER -type f"
        return (
            f"design checkpoint: `touch MARKER.next; {walk} -printf '%P\\n' > LIST; "
            "rsync -a --files-from=LIST --delay-updates LIVE/ DURABLE/; mv MARKER.next MARKER`"
        )

    def accepts(self, returncode: int) -> bool:
        return returncode == 0


class PlainRsync:
    """``rsync -a`` both ways: compares size and mtime on both sides."""

    name = "rsync"
    scenarios = frozenset({"idle", "changed", "full", "restore"})

    def checkpoint(self, live: Path, durable: Path, state: Path) -> list[str]:
        return ["rsync", "-a", f"{live}/", f"{durable}/"]

    def restore(self, durable: Path, target: Path, state: Path) -> list[str]:
        return ["rsync", "-a", f"{durable}/", f"{target}/"]

    def describe(self, scenario: str) -> str:
        if scenario == "restore":
            return "`rsync -a DURABLE/ LIVE/`"
        return "`rsync -a LIVE/ DURABLE/`"

    def accepts(self, returncode: int) -> bool:
        return returncode in (0, 24)  # 24: vanished source files


class FindFloor:
    """The walk alone: the floor for any checkpoint that stats the live tree."""

    name = "find"
    scenarios = frozenset({"idle", "changed"})

    def checkpoint(self, live: Path, durable: Path, state: Path) -> list[str]:
        marker = state / "marker"
        return ["find", str(live), "-newer", str(marker), "-type", "f", "-printf", "%P\\n"]

    def restore(self, durable: Path, target: Path, state: Path) -> list[str]:
        raise NotImplementedError("find has no restore")

    def describe(self, scenario: str) -> str:
        return "`find LIVE -newer MARKER -type f -printf '%P\\n'` (walk only, copies nothing)"

    def accepts(self, returncode: int) -> bool:
        return returncode == 0


def find_syncengine(explicit: str | None) -> tuple[Path | None, str]:
    """The engine's executable, or None and the reason it is missing."""
    if explicit:
        path = Path(explicit).absolute()
        if path.is_file() and os.access(path, os.X_OK):
            return path, ""
        return None, f"{explicit} is not an executable file"
    found = shutil.which("syncengine")
    if found:
        return Path(found), ""
    return None, "`syncengine` is not on PATH (pass --syncengine .venv/bin/syncengine)"
