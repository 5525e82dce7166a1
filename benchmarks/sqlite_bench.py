"""Benchmark: syncengine's SQLite snapshot against the sqlite3 CLI, idle and under a writer.

Builds a WAL-mode database of about --size-mb MB, then measures, in the same
run, the median of --runs snapshots by

- syncengine: ``sqlite_backup.stage`` (read-only one-step backup into local
  staging + ``PRAGMA quick_check``), the part of a checkpoint that reads the db;
- the CLI: ``sqlite3 DB ".backup FILE"`` then ``sqlite3 FILE "PRAGMA quick_check"``;

first with the database idle, then while another process commits small
transactions at --rate per second.  The writer records each commit's latency;
the table shows max and p99 with no snapshot running (a baseline window) and
while each kind of snapshot runs.  Prints a Markdown table and, with
--results, appends it under "## SQLite snapshot" in benchmarks/RESULTS.md.

    python benchmarks/sqlite_bench.py --size-mb 150 --runs 5 --results benchmarks/RESULTS.md
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from syncengine.checkpoint import sqlite_backup
from syncengine.sqlite import check as sqlite_check

WRITER = r"""
import json, sqlite3, sys, time
db, rate, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
con = sqlite3.connect(db, isolation_level=None, timeout=30)
con.execute("PRAGMA journal_mode=WAL")
con.execute("PRAGMA synchronous=NORMAL")
con.execute("PRAGMA busy_timeout=30000")
con.execute("CREATE TABLE IF NOT EXISTS w(id INTEGER PRIMARY KEY, t REAL, v BLOB)")
period = 1.0 / rate
samples = []
print("ready", flush=True)
import select
nxt = time.monotonic()
while not select.select([sys.stdin], [], [], 0)[0]:
    t0 = time.monotonic()
    con.execute("BEGIN IMMEDIATE")
    con.execute("INSERT INTO w(t, v) VALUES (?, randomblob(200))", (t0,))
    con.execute("COMMIT")
    samples.append((t0, time.monotonic() - t0))
    nxt += period
    delay = nxt - time.monotonic()
    if delay > 0:
        time.sleep(delay)
con.close()
with open(out, "w") as f:
    json.dump(samples, f)
print("done", len(samples), flush=True)
"""


@contextlib.contextmanager
def writer_running(db: Path, rate: float, samples: Path) -> Iterator[list[str]]:
    """`WRITER` committing to `db` at `rate` per second while the block runs; the list
    yielded receives its last line ("done N") when the block ends."""
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db), str(rate), str(samples)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdin is not None and writer.stdout is not None
    said: list[str] = []
    try:
        assert writer.stdout.readline().strip() == "ready"
        yield said
        writer.stdin.write("stop\n")
        writer.stdin.flush()
        said.append(writer.stdout.readline().strip())
    finally:
        writer.stdin.close()
        writer.wait(timeout=60)
        writer.stdout.close()


def build_db(path: Path, size_mb: int) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE big(id INTEGER PRIMARY KEY, k TEXT, v BLOB)")
        con.execute("CREATE INDEX big_k ON big(k)")
        rows = size_mb * 1024 * 1024 // 1480  # row + index overhead
        batch = 5000
        for start in range(0, rows, batch):
            con.execute("BEGIN")
            con.executemany(
                "INSERT INTO big(k, v) VALUES (hex(randomblob(8)), randomblob(1000))",
                [()] * min(batch, rows - start),
            )
            con.execute("COMMIT")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        con.close()


def ours(db: Path, work: Path) -> float:
    opts = sqlite_backup.Options(staging=work / "staging", quarantine=work / "q", busy_timeout=2.0)
    t0 = time.perf_counter()
    staged = sqlite_backup.stage(str(db), db.name, opts)
    elapsed = time.perf_counter() - t0
    sqlite_backup.remove_set(staged.path)
    return elapsed


CLI_TIMEOUT = 60.0


def cli(db: Path, work: Path) -> float:
    out = work / "cli-backup.db"
    t0 = time.perf_counter()
    try:  # the CLI backs up 100 pages per step and restarts when another process writes
        subprocess.run(["sqlite3", str(db), f".backup '{out}'"], check=True, timeout=CLI_TIMEOUT)
    except subprocess.TimeoutExpired:
        return float("inf")
    res = subprocess.run(
        ["sqlite3", str(out), "PRAGMA quick_check"], check=True, capture_output=True, text=True
    )
    elapsed = time.perf_counter() - t0
    assert res.stdout.strip() == "ok", res.stdout
    for suffix in ("", "-wal", "-shm"):
        Path(f"{out}{suffix}").unlink(missing_ok=True)
    return elapsed


def measure(
    kind: str, db: Path, work: Path, runs: int, windows: list[tuple[str, float, float]]
) -> list[float]:
    func = ours if kind == "syncengine" else cli
    times = []
    for _ in range(runs):
        start = time.monotonic()
        times.append(func(db, work))
        windows.append((kind, start, time.monotonic()))
        if times[-1] == float("inf"):
            break  # did not finish within CLI_TIMEOUT: once is enough
    return times


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mb", type=int, default=150)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--rate", type=float, default=500.0, help="writer commits per second")
    p.add_argument("--baseline-s", type=float, default=3.0)
    p.add_argument("--results", type=Path, help="append the table to this Markdown file")
    p.add_argument("--dir", type=Path, help="work directory (default: a temp dir)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sqlite-bench-", dir=args.dir))
    try:
        db = work / "bench.db"
        t0 = time.perf_counter()
        build_db(db, args.size_mb)
        size = db.stat().st_size
        print(f"built {size / 1e6:.0f} MB in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        windows: list[tuple[str, float, float]] = []
        idle = {k: measure(k, db, work, args.runs, []) for k in ("syncengine", "sqlite3 CLI")}
        samples_file = work / "samples.json"
        with writer_running(db, args.rate, samples_file) as said:
            base_start = time.monotonic()
            time.sleep(args.baseline_s)  # the writer alone: the baseline latency window
            base_end = time.monotonic()
            busy = {
                k: measure(k, db, work, args.runs, windows) for k in ("syncengine", "sqlite3 CLI")
            }
        done = said[0]
        samples = json.loads(samples_file.read_text())
        rate = len(samples) / (samples[-1][0] - samples[0][0]) if len(samples) > 1 else 0.0
        print(f"writer {done}, {rate:.0f} commits/s", file=sys.stderr)

        def lat(kind: str | None) -> list[float]:
            if kind is None:
                return [d for t, d in samples if base_start <= t < base_end]
            return [d for t, d in samples if any(k == kind and s <= t < e for k, s, e in windows)]

        rows = []
        base = lat(None)
        rows.append(
            (
                "writer alone (baseline)",
                "",
                "",
                f"{max(base) * 1e3:.1f}",
                f"{pct(base, 0.99) * 1e3:.1f}",
                str(len(base)),
            )
        )

        def med(times: list[float]) -> str:
            m = statistics.median(times)
            return f"> {CLI_TIMEOUT:g} (did not finish)" if m == float("inf") else f"{m:.3f}"

        for kind in ("syncengine", "sqlite3 CLI"):
            lw = lat(kind)
            rows.append(
                (
                    kind,
                    med(idle[kind]),
                    med(busy[kind]),
                    f"{max(lw) * 1e3:.1f}" if lw else "-",
                    f"{pct(lw, 0.99) * 1e3:.1f}" if lw else "-",
                    str(len(lw)),
                )
            )
        ratio_idle = statistics.median(idle["syncengine"]) / statistics.median(idle["sqlite3 CLI"])
        ratio_busy = statistics.median(busy["syncengine"]) / statistics.median(busy["sqlite3 CLI"])
        lines = [
            f"db {size / 1e6:.0f} MB (WAL), {args.runs} runs each, writer at {rate:.0f} "
            f"commits/s, SQLite {sqlite_check.library_version()['version']} (syncengine), "
            f"{os.cpu_count()} CPUs; snapshot = "
            "backup + quick_check into local staging",
            "",
            "| what | median idle (s) | median under writer (s) | writer commit max (ms) "
            "| writer commit p99 (ms) | commits measured |",
            "|---|---|---|---|---|---|",
            *("| " + " | ".join(r) + " |" for r in rows),
            "",
            f"syncengine / sqlite3 CLI: {ratio_idle:.2f}x idle, {ratio_busy:.2f}x under writer "
            "(goal: <= 1.2x; writer never blocked longer than sqlite_busy_timeout = 2 s)",
        ]
        table = "\n".join(lines)
        print(table)
        if args.results:
            append_section(args.results, table)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def append_section(path: Path, table: str, section: str = "SQLite snapshot") -> None:
    """Append `table` under "## `section`", with the command line that made it."""
    if not path.exists():
        path.write_text("# Benchmark results\n")
    cmd = "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])
    stamp = time.strftime("%Y-%m-%d %H:%M")
    with path.open("a") as f:
        f.write(f"\n## {section}\n\n`{cmd}` ({stamp})\n\n{table}\n")


if __name__ == "__main__":
    sys.exit(main())
