"""A snapshot never writes into the live tree, and stays consistent while writers come and go.

Writers are real processes using Python's own SQLite (another library than
the engine's, as a harness is); they report over stdout, never by timing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from syncengine import sqlite_check
from tests.conftest import CliRunner, EngineFactory, Tree
from tests.test_sqlite import make_db

CONFIG = {"adapters": [], "sqlite_busy_timeout": 2.0,
          "adapter": [{"name": "app", "live": "app", "durable": "state/app",
                       "sqlite": ["app.db"]}]}


def listing(d: Path) -> dict[str, tuple[int, int]]:
    """Name -> (size, mtime_ns) of every entry, and the directory's own mtime under "."."""
    out = {".": (0, d.stat().st_mtime_ns)}
    for name in os.listdir(d):
        st = os.lstat(d / name)
        out[name] = (st.st_size, st.st_mtime_ns)
    return out


def snapshot_count(tree: Tree) -> int:
    """quick_check and count rows of the published snapshot, on a private copy."""
    copy = tree.base / "snap-check.db"
    shutil.copyfile(tree.data / "state/app/checkpoints/app.db", copy)
    try:
        assert sqlite_check.check(str(copy)).ok
        con = apsw.Connection(f"file:{copy}?mode=ro&immutable=1",
                              flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        try:
            return int(con.execute("SELECT count(*) FROM t").fetchall()[0][0])
        finally:
            con.close()
    finally:
        copy.unlink()


@pytest.fixture
def cfg(tree: Tree) -> str:
    path = tree.base / "syncengine.toml"
    path.write_text('adapters = []\n[[adapter]]\nname = "app"\nlive = "app"\n'
                    'durable = "state/app"\nsqlite = ["app.db"]\n')
    return str(path)


def test_snapshot_of_a_closed_wal_database_creates_nothing(
        tree: Tree, cli: CliRunner, cfg: str) -> None:
    db = tree.local / "app" / "app.db"
    make_db(db, 40)  # WAL mode; the writer closed it, so no -wal or -shm is left
    assert os.listdir(db.parent) == ["app.db"]
    before = listing(db.parent)
    cli("--config", cfg, "checkpoint", check=0)
    assert listing(db.parent) == before
    assert snapshot_count(tree) == 40


HOLDER = r"""
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("PRAGMA journal_mode=WAL")
con.execute("PRAGMA wal_autocheckpoint=0")
con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
con.execute("BEGIN")
con.executemany("INSERT INTO t(v) VALUES (?)", [("x" * 300,)] * 30)
con.execute("COMMIT")  # and no read after it: no reader has marked the newest frame yet
print("committed", flush=True)
sys.stdin.readline()
con.close()
"""


def test_snapshot_beside_an_open_writer_changes_no_file(
        tree: Tree, cli: CliRunner, cfg: str) -> None:
    db = tree.local / "app" / "app.db"
    db.parent.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "committed"
        assert sorted(os.listdir(db.parent)) == ["app.db", "app.db-shm", "app.db-wal"]
        before = listing(db.parent)
        # sizes and mtimes: as root, SQLite chowns an existing -wal it opens (its ctime);
        # a reader that set a read mark in the -shm would change the -shm's mtime
        cli("--config", cfg, "checkpoint", check=0)
        assert listing(db.parent) == before
        assert snapshot_count(tree) == 30
    finally:
        assert holder.stdin is not None
        holder.stdin.write("bye\n")
        holder.stdin.close()
        holder.wait(timeout=30)
        assert holder.stdout is not None
        holder.stdout.close()


OPENER = r"""
import select, sqlite3, sys
db = sys.argv[1]
n = 0
while not select.select([sys.stdin], [], [], 0)[0]:
    con = sqlite3.connect(db, isolation_level=None, timeout=30)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v TEXT)")
    con.execute("BEGIN")
    con.executemany("INSERT INTO t(v) VALUES (?)", [("x" * 300,)] * 10)
    con.execute("COMMIT")
    con.close()  # the last connection: checkpoints, deletes -wal and -shm
    n += 1
    if n == 1:
        print("running", flush=True)
sys.stdin.readline()
print("stopped", n, flush=True)
"""


@pytest.fixture
def opener(tree: Tree) -> Iterator[subprocess.Popen[str]]:
    db = tree.local / "app" / "app.db"
    db.parent.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", OPENER, str(db)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "running"
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)
    for f in (proc.stdin, proc.stdout):
        if f is not None:
            f.close()


@pytest.mark.dir_only("about the live side: snapshots of a database whose writer comes and goes")
def test_writer_opening_and_closing_meanwhile_never_spoils_a_snapshot(
        tree: Tree, engine: EngineFactory, opener: subprocess.Popen[str]) -> None:
    eng = engine(CONFIG)
    counts = []
    for _ in range(12):
        report = eng.checkpoint()
        for err in report.errors:  # a busy writer may only delay a snapshot to the next pass
            assert "changed each time it was copied" in err.reason, err
        if report.ok:
            count = snapshot_count(tree)
            assert count % 10 == 0, count  # whole transactions only
            counts.append(count)
    assert opener.stdin is not None and opener.stdout is not None
    opener.stdin.write("stop\n")
    opener.stdin.flush()
    sessions = int(opener.stdout.readline().split()[1])
    assert counts and counts == sorted(counts)
    live = tree.local / "app"
    assert os.listdir(live) == ["app.db"]  # the writer's last close removed its companions
    assert eng.checkpoint().ok
    assert os.listdir(live) == ["app.db"]  # and the last snapshot created none
    assert snapshot_count(tree) == sessions * 10
