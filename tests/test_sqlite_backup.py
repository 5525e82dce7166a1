"""A snapshot never writes into the live tree, and stays consistent while writers come and go.

Writers are real processes using Python's own SQLite (another library than
the engine's, as a harness is); they report over stdout, never by timing.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncengine.checkpoint import sqlite_backup
from tests.conftest import CliRunner, EngineFactory, Tree
from tests.helpers import Child, query_snapshot
from tests.test_sqlite import make_db

pytestmark = pytest.mark.s3

CONFIG = {
    "adapters": [],
    "sqlite_busy_timeout": 2.0,
    "adapter": [{"name": "app", "live": "app", "durable": "state/app", "sqlite": ["app.db"]}],
}


def listing(d: Path) -> dict[str, tuple[int, int, str]]:
    """Name -> (size, mtime_ns, content digest) of every entry, and the directory's own
    mtime under "."."""
    out = {".": (0, d.stat().st_mtime_ns, "")}
    for name in os.listdir(d):
        st = os.lstat(d / name)
        out[name] = (
            st.st_size,
            st.st_mtime_ns,
            hashlib.sha256((d / name).read_bytes()).hexdigest(),
        )
    return out


def snapshot_count(tree: Tree) -> int:
    """Rows of the published snapshot (checked, on a private copy)."""
    rows = query_snapshot(
        tree.durable / "state/app/checkpoints/app.db", tree.base, "SELECT count(*) FROM t"
    )
    return int(str(rows[0][0]))


@pytest.fixture
def cfg(tree: Tree) -> str:
    path = tree.base / "syncengine.toml"
    path.write_text(
        'adapters = []\n[[adapter]]\nname = "app"\nlive = "app"\n'
        'durable = "state/app"\nsqlite = ["app.db"]\n'
    )
    return str(path)


def test_snapshot_of_a_closed_wal_database_creates_nothing(
    tree: Tree, cli: CliRunner, cfg: str
) -> None:
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
    tree: Tree, cli: CliRunner, cfg: str
) -> None:
    db = tree.local / "app" / "app.db"
    db.parent.mkdir(parents=True)
    holder = Child(HOLDER, str(db), ready="committed")
    try:
        assert sorted(os.listdir(db.parent)) == ["app.db", "app.db-shm", "app.db-wal"]
        before = listing(db.parent)
        # sizes and mtimes: as root, SQLite chowns an existing -wal it opens (its ctime);
        # a reader that set a read mark in the -shm would change the -shm's mtime
        cli("--config", cfg, "checkpoint", check=0)
        assert listing(db.parent) == before
        assert snapshot_count(tree) == 30
    finally:
        holder.stop("bye")


KILLED = r"""
import os, signal, sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("PRAGMA journal_mode=WAL")
con.execute("PRAGMA wal_autocheckpoint=0")
con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
con.execute("BEGIN")
con.executemany("INSERT INTO t(v) VALUES (?)", [("x" * 300,)] * 25)
con.execute("COMMIT")  # committed in the -wal only
if sys.argv[2] == "truncated":  # as OpenClaw leaves its session store when it exits:
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all in the main file, an empty -wal,
    os._exit(0)  # and a -shm whose wal-index says so; no close
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize(
    "left_by", ["read-only reader", "killed writer", "writer exiting without close"]
)
def test_companions_no_process_uses_are_read_and_left_alone(
    tree: Tree, cli: CliRunner, cfg: str, left_by: str
) -> None:
    db = tree.local / "app" / "app.db"
    if left_by == "read-only reader":  # Python's own SQLite leaves an empty -wal and a -shm
        make_db(db, 20)
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        con.execute("SELECT count(*) FROM t").fetchall()
        con.close()
        rows = 20
    else:
        db.parent.mkdir(parents=True)
        how = "killed" if left_by == "killed writer" else "truncated"
        proc = subprocess.run([sys.executable, "-c", KILLED, str(db), how], timeout=60)
        assert proc.returncode == (-9 if how == "killed" else 0)
        rows = 25
    assert sorted(os.listdir(db.parent)) == ["app.db", "app.db-shm", "app.db-wal"]
    before = listing(db.parent)
    opts = sqlite_backup.Options(staging=tree.base / "staging", quarantine=tree.base / "q")
    for _ in range(3):  # one process, one open after the other, as a daemon does
        staged = sqlite_backup.stage(str(db), "app.db", opts)
        sqlite_backup.remove_set(staged.path)
        assert listing(db.parent) == before
    cli("--config", cfg, "checkpoint", check=0)
    assert listing(db.parent) == before
    assert snapshot_count(tree) == rows


HOT = r"""
import os, signal, sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)  # rollback-journal mode
con.execute("PRAGMA cache_size=1")  # the open transaction spills into the main file
con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
con.execute("BEGIN")
con.executemany("INSERT INTO t(v) VALUES (?)", [("x" * 300,)] * 20)
con.execute("COMMIT")
con.execute("BEGIN")
con.executemany("INSERT INTO t(v) VALUES (?)", [("y" * 3000,)] * 200)
os.kill(os.getpid(), signal.SIGKILL)  # a hot journal: the main file has uncommitted pages
"""


def test_a_hot_journal_of_a_killed_writer_is_rolled_back_in_staging_only(
    tree: Tree, cli: CliRunner, cfg: str
) -> None:
    db = tree.local / "app" / "app.db"
    db.parent.mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-c", HOT, str(db)], timeout=60)
    assert proc.returncode == -9
    assert sorted(os.listdir(db.parent)) == ["app.db", "app.db-journal"]
    before = listing(db.parent)
    cli("--config", cfg, "checkpoint", check=0)
    assert listing(db.parent) == before  # the live file still needs its rollback
    assert snapshot_count(tree) == 20  # the last committed state


BUSY = r"""
import random, select, sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("PRAGMA journal_mode=WAL")
con.execute("PRAGMA synchronous=NORMAL")
con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, n INTEGER, v TEXT)")
con.execute("CREATE TABLE c(k INTEGER)")
con.execute("BEGIN")
con.executemany("INSERT INTO t(n, v) VALUES (0, ?)", [("x" * 300,)] * 2000)
con.execute("INSERT INTO c VALUES (0)")
con.execute("COMMIT")
k = 0
while not select.select([sys.stdin], [], [], 0)[0]:
    con.execute("BEGIN")  # ten rows and the counter, one transaction
    for _ in range(10):
        con.execute("UPDATE t SET n = n + 1 WHERE id = ?", (random.randint(1, 2000),))
    con.execute("UPDATE c SET k = k + 1")
    con.execute("COMMIT")
    k += 1
    if k == 100:
        print("busy", flush=True)
sys.stdin.readline()
print("stopped", k, flush=True)
con.close()
"""


def _writer(tree: Tree, script: str, ready: str) -> Iterator[Child]:
    """`script` running on app/app.db in another process until the test ends."""
    db = tree.local / "app" / "app.db"
    db.parent.mkdir(parents=True)
    child = Child(script, str(db), ready=ready)
    yield child
    child.stop()


@pytest.fixture
def busy(tree: Tree) -> Iterator[Child]:
    yield from _writer(tree, BUSY, "busy")


def test_snapshots_beside_a_writer_committing_all_the_time_hold_whole_transactions(
    tree: Tree, engine: EngineFactory, busy: Child
) -> None:
    # Its files change all the time; each snapshot still holds whole transactions only
    # (the counter matches the rows), and none fails.
    eng = engine(CONFIG)
    seen = []
    for _ in range(3):
        report = eng.checkpoint()
        assert report.ok, report.errors
        rows = query_snapshot(
            tree.durable / "state/app/checkpoints/app.db",
            tree.base,
            "SELECT (SELECT sum(n) FROM t), (SELECT k FROM c)",
        )
        total, commits = (int(str(v)) for v in rows[0])
        assert total == 10 * commits  # whole transactions only
        seen.append(commits)
    assert seen == sorted(seen)
    commits = int(busy.stop().split()[1])
    assert commits >= seen[-1]
    assert sorted(os.listdir(tree.local / "app")) == ["app.db"]  # the writer's close


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
def opener(tree: Tree) -> Iterator[Child]:
    yield from _writer(tree, OPENER, "running")


@pytest.mark.dir_only("about the live side: snapshots of a database whose writer comes and goes")
def test_writer_opening_and_closing_meanwhile_never_spoils_a_snapshot(
    tree: Tree, engine: EngineFactory, opener: Child
) -> None:
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
    sessions = int(opener.stop().split()[1])
    assert counts and counts == sorted(counts)
    live = tree.local / "app"
    assert os.listdir(live) == ["app.db"]  # the writer's last close removed its companions
    assert eng.checkpoint().ok
    assert os.listdir(live) == ["app.db"]  # and the last snapshot created none
    assert snapshot_count(tree) == sessions * 10
