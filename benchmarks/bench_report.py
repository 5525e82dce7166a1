"""Results of a ``run_tree`` run: rows, statistics, Markdown and JSON output.

Owns how numbers are summarised (median, min, max, ratio to the reference
tool) and what machine facts go with them. It runs only read-only probes
(``rsync --version``, ``find --version``, ``/proc``) and writes only the
files it is asked to.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench_tools import Sample

# Ratios are against the cheapest honest baseline for each kind of scenario:
# the bare walk for incremental checkpoints, plain rsync for full copies.
REFERENCE = {"idle": "find", "changed": "find", "full": "rsync", "restore": "rsync"}
COLUMNS = ("scenario", "tool", "median s", "min s", "max s", "ratio vs reference", "peak RSS MB")


@dataclass
class Row:
    """All repetitions of one tool in one scenario."""

    scenario: str
    tool: str
    description: str
    samples: list[Sample] = field(default_factory=list)
    status: str = "ok"  # "ok", "failed: ..." or "skipped: ..."
    problems: list[str] = field(default_factory=list)  # failed correctness checks

    @property
    def ok(self) -> bool:
        return self.status == "ok" and bool(self.samples)

    def median(self) -> float | None:
        return statistics.median(s.seconds for s in self.samples) if self.ok else None

    def peak_rss_mb(self) -> float | None:
        known = [s.maxrss_kb for s in self.samples if s.maxrss_kb is not None]
        return max(known) / 1024 if known else None


def ratio(row: Row, rows: list[Row]) -> float | None:
    """``row``'s median over its scenario's reference median, if both exist."""
    ref = next(
        (r for r in rows if r.scenario == row.scenario and r.tool == REFERENCE[row.scenario]), None
    )
    mine, theirs = row.median(), ref.median() if ref else None
    if mine is None or not theirs:
        return None
    return mine / theirs


def markdown_table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|---|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        tool = row.tool + (" (check failed)" if row.problems else "")
        if not row.ok:
            lines.append(f"| {row.scenario} | {tool} | {_cell(row.status)} | | | | |")
            continue
        times = [s.seconds for s in row.samples]
        r = ratio(row, rows)
        rss = row.peak_rss_mb()
        cells = [
            row.scenario,
            tool,
            f"{row.median():.3f}",
            f"{min(times):.3f}",
            f"{max(times):.3f}",
            "n/a" if r is None else f"{r:.2f}",
            "n/a" if rss is None else f"{rss:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(text: str, limit: int = 160) -> str:
    """One table cell: one line, no pipes, bounded (the full text is in the log)."""
    flat = " ".join(text.split()).replace("|", "/")
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def legend(rows: list[Row]) -> str:
    """What each row ran, and any failed correctness check."""
    scenarios: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        if r.description:
            scenarios.setdefault((r.tool, r.description), []).append(r.scenario)
    out = ["Commands:"]
    out += [f"- {tool} ({', '.join(sc)}): {desc}" for (tool, desc), sc in scenarios.items()]
    problems = [f"- {r.scenario} / {r.tool}: {p}" for r in rows for p in r.problems]
    out += ["", "Checks: " + ("all passed." if not problems else "FAILED:"), *problems]
    return "\n".join(out)


def _first_line(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as exc:
        return f"unavailable ({exc.strerror})"
    return done.stdout.splitlines()[0].strip() if done.stdout else "unknown"


def fs_type(path: Path) -> str:
    """Filesystem type of the mount holding ``path`` (longest /proc/mounts match)."""
    target, best, kind = os.path.realpath(path), "", "unknown"
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    for line in mounts:
        fields = line.split()
        mnt = fields[1].replace("\\040", " ")
        inside = target == mnt or target.startswith(mnt.rstrip("/") + "/")
        if inside and len(mnt) >= len(best):
            best, kind = mnt, fields[2]
    return kind


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine_info(live: Path, durable: Path, load_at_start: str) -> dict[str, str]:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "load average (1/5/15 min) at start, at end": f"{load_at_start}; {load_average()}",
        "cpus": f"{os.cpu_count()} ({len(os.sched_getaffinity(0))} usable), {_cpu_model()}",
        "memory": f"{mem:.1f} GiB",
        "kernel": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "rsync": _first_line(["rsync", "--version"]),
        "find": _first_line(["find", "--version"]),
        "live fs": f"{fs_type(live)} ({live})",
        "durable fs": f"{fs_type(durable)} ({durable})",
    }


def markdown_section(
    when: str, command: str, machine: dict[str, str], tree: dict[str, object], rows: list[Row]
) -> str:
    facts = "\n".join(f"- {k}: {v}" for k, v in machine.items())
    tree_line = ", ".join(f"{k} {v}" for k, v in tree.items())
    return (
        f"## {when}: run_tree\n\n"
        f"Command: `{command}`\n\nMachine:\n{facts}\n\nTree: {tree_line}\n\n"
        "Warm cache: nothing is dropped from the page cache; `sync` runs before each timed "
        "run. Ratios: idle/changed vs `find`, full/restore vs `rsync`. Peak RSS is the "
        "largest single process of the tool's process tree.\n\n"
        f"{markdown_table(rows)}\n\n{legend(rows)}\n"
    )


def json_report(
    when: str, command: str, machine: dict[str, str], tree: dict[str, object], rows: list[Row]
) -> str:
    data = {
        "date": when,
        "command": command,
        "machine": machine,
        "tree": tree,
        "rows": [
            {
                **asdict(r),
                "median_s": r.median(),
                "ratio": ratio(r, rows),
                "peak_rss_mb": r.peak_rss_mb(),
            }
            for r in rows
        ],
    }
    return json.dumps(data, indent=2) + "\n"
