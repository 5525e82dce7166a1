"""Benchmark: the same SQLite snapshot with each Python SQLite library, idle and under a writer.

Why: syncengine carries its own SQLite (a wheel that bundles the library)
instead of the one Python was built with.  This measures what each candidate
costs for the work a checkpoint does with a database: open it read-only
(``mode=ro`` URI, 2 s busy timeout), copy it in one online-backup step into a
local file, and ``PRAGMA quick_check`` the copy on a read-only connection.

Candidates (each run in its own interpreter: two SQLite libraries in one
process would drop each other's POSIX locks on the same file):

- ``sqlite3``: the standard library (linked with the system's SQLite);
- ``apsw``: Another Python SQLite Wrapper, SQLite bundled in the wheel;
- ``sqlean``: sqlean.py, a sqlite3-compatible module with SQLite bundled;
- ``pysqlite3``: pysqlite3-binary, the same, x86_64 wheels only;
- ``syncengine``: `sqlite_backup.stage` (apsw; on an idle database without a
  ``-wal`` it copies the files and re-reads them instead, so nothing is
  created in the live directory).

A library that is not installed is reported as such.  The database (WAL
mode, about --size-mb MB) is built once; between the idle runs of two
libraries, the ``-wal``/``-shm`` a read-only connection left are removed, so
each starts from the same files.  Then a writer process commits small
transactions at --rate per second while each library snapshots again.
The libraries take turns, one snapshot each per round, so load from other
work on the machine falls on all of them alike.  Prints a Markdown table
(medians of --runs: wall time and the worker's CPU time) and, with
--results, appends it under "## SQLite library" in the given file.

    python benchmarks/sqlite_libs_bench.py --size-mb 150 --runs 5 --results benchmarks/RESULTS.md
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

from sqlite_bench import append_section, build_db, writer_running  # noqa: E402

LIBS = ("sqlite3", "apsw", "sqlean", "pysqlite3", "syncengine")

# A worker interpreter per library: argv = lib, db, work; prints its SQLite version, then
# answers each "snap" line with "<wall seconds> <cpu seconds>" of one snapshot.
ONE = r"""
import json, os, sys, time, urllib.parse
lib, db, work = sys.argv[1], sys.argv[2], sys.argv[3]
uri = "file:" + urllib.parse.quote(os.path.abspath(db)) + "?mode=ro"
out = os.path.join(work, f"{lib}-copy.db")

def clean():
    for s in ("", "-wal", "-shm", "-journal"):
        if os.path.exists(out + s):
            os.unlink(out + s)

if lib == "apsw":
    import apsw
    version = apsw.sqlite_lib_version()
    def snap():
        src = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        src.set_busy_timeout(2000)
        dst = apsw.Connection(out)
        with dst.backup("main", src, "main") as b:
            b.step(-1)
        dst.close(); src.close()
        chk = apsw.Connection("file:" + out + "?mode=ro",
                              flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        assert chk.execute("PRAGMA quick_check").fetchall() == [("ok",)]
        chk.close()
elif lib == "syncengine":
    from pathlib import Path
    from syncengine.checkpoint import sqlite_backup
    from syncengine.sqlite import check as sqlite_check
    version = sqlite_check.library_version()["version"]
    opts = sqlite_backup.Options(staging=Path(work) / "staging", quarantine=Path(work) / "q")
    def snap():
        staged = sqlite_backup.stage(db, "bench.db", opts)
        assert staged.verdict.ok
        sqlite_backup.remove_set(staged.path)
else:
    if lib == "sqlean":
        import sqlean as mod
    elif lib == "pysqlite3":
        from pysqlite3 import dbapi2 as mod
    else:
        import sqlite3 as mod
    version = mod.sqlite_version
    def snap():
        src = mod.connect(uri, uri=True, timeout=2.0)
        dst = mod.connect(out)
        src.backup(dst, pages=-1)
        dst.close(); src.close()
        chk = mod.connect("file:" + out + "?mode=ro", uri=True)
        assert chk.execute("PRAGMA quick_check").fetchall() == [("ok",)]
        chk.close()

print(version, flush=True)
for line in sys.stdin:
    clean()
    t0, c0 = time.perf_counter(), time.process_time()
    snap()
    print(time.perf_counter() - t0, time.process_time() - c0, flush=True)
    clean()
"""


class Worker:
    """One library's interpreter; `snap()` times one snapshot (wall, cpu) or gives None."""

    def __init__(self, lib: str, db: Path, work: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ONE, lib, str(db), str(work)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=HERE.parent,
        )
        assert self.proc.stdout is not None
        self.version = self.proc.stdout.readline().strip()
        self.error = None if self.version else self._error()

    def _error(self) -> str:
        assert self.proc.stderr is not None
        self.proc.wait(timeout=60)
        return (self.proc.stderr.read().strip().splitlines() or ["failed"])[-1]

    def snap(self) -> tuple[float, float] | None:
        if self.error is not None:
            return None
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("snap\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().split()
        if not line:
            self.error = self._error()
            return None
        return float(line[0]), float(line[1])

    def close(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()
        self.proc.wait(timeout=60)


def rounds(
    workers: dict[str, Worker], db: Path, runs: int, *, idle: bool
) -> dict[str, list[tuple[float, float]]]:
    """`runs` rounds, each library once per round (interleaved: load shared alike)."""
    out: dict[str, list[tuple[float, float]]] = {lib: [] for lib in workers}
    for _ in range(runs):
        for lib, worker in workers.items():
            if idle:
                leftovers(db)
            t = worker.snap()
            if t is not None:
                out[lib].append(t)
    return out


def leftovers(db: Path) -> None:
    """Remove the -wal/-shm a read-only connection left beside the idle database."""
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def fmt(samples: list[tuple[float, float]]) -> tuple[str, str]:
    """Median wall and median CPU seconds."""
    if not samples:
        return "-", "-"
    return (
        f"{statistics.median(t[0] for t in samples):.3f}",
        f"{statistics.median(t[1] for t in samples):.3f}",
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mb", type=int, default=150)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--rate", type=float, default=500.0, help="writer commits per second")
    p.add_argument("--libs", default=",".join(LIBS))
    p.add_argument("--results", type=Path, help="append the table to this Markdown file")
    p.add_argument("--dir", type=Path, help="work directory (default: a temp dir)")
    args = p.parse_args()
    libs = args.libs.split(",")
    work = Path(tempfile.mkdtemp(prefix="sqlite-libs-", dir=args.dir))
    try:
        db = work / "bench.db"
        build_db(db, args.size_mb)
        size = db.stat().st_size
        workers = {lib: Worker(lib, db, work) for lib in libs}
        try:
            idle = rounds(workers, db, args.runs, idle=True)
            leftovers(db)
            with writer_running(db, args.rate, work / "samples.json") as said:
                busy = rounds(workers, db, args.runs, idle=False)
            done = said[0]
        finally:
            for w in workers.values():
                w.close()
        samples = json.loads((work / "samples.json").read_text())
        span = samples[-1][0] - samples[0][0] if len(samples) > 1 else 0.0
        rate = len(samples) / span if span else 0.0
        print(f"writer {done}", file=sys.stderr)
        table = _table(workers, idle, busy, size, rate, args.runs)
        print(table)
        if args.results:
            append_section(args.results, table, "SQLite library")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _table(
    workers: dict[str, Worker],
    idle: dict[str, list[tuple[float, float]]],
    busy: dict[str, list[tuple[float, float]]],
    size: int,
    rate: float,
    runs: int,
) -> str:
    rows = []
    for lib, w in workers.items():
        if w.error is not None and not idle[lib]:
            rows.append(f"| {lib} | not available ({w.error}) | | | | |")
            continue
        rows.append(
            f"| {lib} | {w.version} | {' | '.join(fmt(idle[lib]))} | {' | '.join(fmt(busy[lib]))} |"
        )
    ratios = []
    base = idle.get("sqlite3")
    for lib in workers:
        if lib != "sqlite3" and idle[lib] and base:
            a = statistics.median(t[0] for t in idle[lib])
            b = statistics.median(t[0] for t in base)
            ratios.append(f"{lib} {a / b:.2f}x")
    return "\n".join(
        [
            f"db {size / 1e6:.0f} MB (WAL), {runs} interleaved rounds, writer at {rate:.0f} "
            f"commits/s, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; snapshot = "
            "read-only open + one-step backup + quick_check of the copy; cpu = the worker's "
            "user+system time",
            "",
            "| library | SQLite | idle wall (s) | idle cpu (s) | under writer wall (s) "
            "| under writer cpu (s) |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            "median wall time idle, against the standard library: " + (", ".join(ratios) or "-"),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
