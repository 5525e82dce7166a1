"""SQLite databases: consistent snapshots with the backup API, and their restore.

Real SQLite and real processes: a writer child keeps a WAL-mode connection
open with uncheckpointed frames (``wal_autocheckpoint=0``) while the CLI
checkpoints; it tells the test over its stdout when a commit is done.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncengine.durable import manifest
from tests.conftest import CliRunner, Tree

pytestmark = pytest.mark.s3

WRITER = r"""
import select, sqlite3, sys
db, mode = sys.argv[1], sys.argv[2]
con = sqlite3.connect(db, isolation_level=None, timeout=30)
if mode == "wal":
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
else:
    con.execute("PRAGMA journal_mode=DELETE")
con.execute("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v TEXT)")
def insert(n):
    con.execute("BEGIN")
    con.executemany("INSERT INTO t(v) VALUES (?)", [("x" * 200,)] * n)
    con.execute("COMMIT")
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "insert":
        insert(int(cmd[1]))
        print("committed", con.execute("SELECT count(*) FROM t").fetchone()[0], flush=True)
    elif cmd[0] == "loop":  # commit in a tight loop until told to stop
        n = 0
        while True:
            insert(1)
            n += 1
            if n == 1:
                print("looping", flush=True)
            if select.select([sys.stdin], [], [], 0)[0]:
                sys.stdin.readline()
                break
        print("stopped", n, flush=True)
    elif cmd[0] == "quit":
        break
con.close()
print("closed", flush=True)
"""


class Writer:
    """A child process holding a write connection to a database."""

    def __init__(self, db: Path, mode: str = "wal") -> None:
        db.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def send(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def insert(self, n: int) -> int:
        reply = self.send(f"insert {n}")
        assert reply.startswith("committed"), reply
        return int(reply.split()[1])

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.send("quit") == "closed"
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.proc.wait(timeout=30)


def make_db(path: Path, n: int, mode: str = "wal") -> None:
    """A database with `n` rows, written by another process that then closes it."""
    w = Writer(path, mode)
    try:
        assert w.insert(n) == n
    finally:
        w.close()


@pytest.fixture
def writers() -> Iterator[list[Writer]]:
    started: list[Writer] = []
    yield started
    for w in started:
        if w.proc.poll() is None:
            w.proc.kill()
        w.proc.wait(timeout=30)
        for f in (w.proc.stdin, w.proc.stdout):
            if f is not None:
                f.close()


CONFIG = """
adapters = []
sqlite_busy_timeout = {timeout}
[[adapter]]
name = "app"
live = "app"
durable = "state/app"
exclude = ["*-wal", "*-shm", "*-journal"]
sqlite = ["app.db", "nested/*/x.sqlite"]
[[adapter]]
name = "tree"
live = "tree"
durable = "state/tree"
"""


@pytest.fixture
def cfg(tree: Tree) -> str:
    path = tree.base / "syncengine.toml"
    path.write_text(CONFIG.format(timeout=1.0))
    return str(path)


def rows(db: Path | str) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        assert con.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        return int(con.execute("SELECT count(*) FROM t").fetchone()[0])
    finally:
        con.close()


def snapshot_rows(tree: Tree, adapter: str, rel: str) -> int:
    """quick_check and count a published snapshot on a private copy (never open it in place)."""
    obj = tree.durable / "state" / adapter / "checkpoints" / rel
    copy = tree.base / f"check-{os.getpid()}.db"
    copy.write_bytes(obj.read_bytes())
    try:
        return rows(copy)
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{copy}{suffix}").unlink(missing_ok=True)


def entries(tree: Tree, adapter: str) -> dict[str, manifest.Entry]:
    return dict(manifest.load(tree.store(f"state/{adapter}")).entries)


def durable_files(tree: Tree, adapter: str) -> list[str]:
    root = tree.durable / "state" / adapter
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and ".syncengine" not in p.parts
    )


def test_wal_writer_open_snapshot_is_consistent_and_idle_is_not_rewritten(
    tree: Tree, cli: CliRunner, cfg: str, writers: list[Writer]
) -> None:
    w = Writer(tree.local / "app" / "app.db")
    writers.append(w)
    assert w.insert(50) == 50
    assert (tree.local / "app" / "app.db-wal").stat().st_size > 0  # frames not checkpointed
    tree.write("app/config.json", "{}")
    cli("--config", cfg, "checkpoint", "app", check=0)
    assert snapshot_rows(tree, "app", "app.db") == 50
    assert durable_files(tree, "app") == ["checkpoints/app.db", "config.json"]
    e = entries(tree, "app")["app.db"]
    assert (e.kind, e.object) == ("sqlite", "checkpoints/app.db")

    obj = tree.durable / "state" / "app" / "checkpoints" / "app.db"
    before = (tree.writes_of("state/app/checkpoints/app.db"), obj.stat().st_mtime_ns)
    manifests = sorted((tree.durable / "state/app/.syncengine/manifest").iterdir())
    for _ in range(2):  # the first may look again (recent mtime); neither publishes
        cli("--config", cfg, "checkpoint", "app", check=0)
    assert (tree.writes_of("state/app/checkpoints/app.db"), obj.stat().st_mtime_ns) == before
    assert sorted((tree.durable / "state/app/.syncengine/manifest").iterdir()) == manifests

    assert w.insert(25) == 75
    cli("--config", cfg, "checkpoint", "app", check=0)
    assert snapshot_rows(tree, "app", "app.db") == 75
    w.close()


def test_database_appears_after_config_files(tree: Tree, cli: CliRunner, cfg: str) -> None:
    tree.write("app/config.yaml", "a: 1")
    cli("--config", cfg, "checkpoint", "app", check=0)
    assert durable_files(tree, "app") == ["config.yaml"]


def test_hot_restart_keeps_newer_valid_local_database(
    tree: Tree, cli: CliRunner, cfg: str, writers: list[Writer]
) -> None:
    w = Writer(tree.local / "app" / "app.db")
    writers.append(w)
    w.insert(10)
    cli("--config", cfg, "checkpoint", "app", check=0)
    assert w.insert(5) == 15  # committed after the last snapshot
    w.close()
    proc = cli("--config", cfg, "restore", "app", check=0)
    assert "1 newer local kept" in proc.stdout
    assert rows(tree.local / "app" / "app.db") == 15
    cli("--config", cfg, "checkpoint", "app", check=0)  # the newer rows are published next
    assert snapshot_rows(tree, "app", "app.db") == 15


def test_corrupt_live_database_fails_and_keeps_previous_snapshot(
    tree: Tree, cli: CliRunner, cfg: str
) -> None:
    make_db(tree.local / "app" / "app.db", 30)
    cli("--config", cfg, "checkpoint", "app", check=0)
    obj = tree.durable / "state" / "app" / "checkpoints" / "app.db"
    published = obj.read_bytes()
    db = tree.local / "app" / "app.db"
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    db.write_bytes(b"garbage, not a database " * 400)
    proc = cli("--config", cfg, "checkpoint", "app", check=1)
    assert "app.db" in proc.stderr and "snapshot" in proc.stderr
    assert obj.read_bytes() == published
    assert snapshot_rows(tree, "app", "app.db") == 30
    cli("--config", cfg, "checkpoint", "app", check=1)  # retried, still refused


def test_restore_after_losing_the_live_tree_leaves_no_stale_wal(
    tree: Tree, cli: CliRunner, cfg: str, writers: list[Writer]
) -> None:
    w = Writer(tree.local / "app" / "nested" / "a" / "x.sqlite")
    writers.append(w)
    w.insert(40)
    tree.write("app/notes.txt", "hello")
    cli("--config", cfg, "checkpoint", "app", check=0)
    w.close()
    import shutil

    shutil.rmtree(tree.local / "app")
    shutil.rmtree(tree.state)
    out = cli("--config", cfg, "restore", "app", check=0)
    d = tree.local / "app" / "nested" / "a"
    assert sorted(os.listdir(d)) == ["x.sqlite"]
    assert rows(d / "x.sqlite") == 40
    # the snapshot's bytes count with the file's (once "restored 2 file(s), 5 bytes")
    assert f"restored 2 file(s), {(d / 'x.sqlite').stat().st_size + 5} bytes" in out.stdout
    assert (tree.local / "app" / "notes.txt").read_text() == "hello"
    # a stale WAL/SHM next to a missing database is moved aside, not kept
    (d / "x.sqlite").unlink()
    (d / "x.sqlite-wal").write_bytes(b"\x37\x7f\x06\x82" + b"\0" * 60)
    (d / "x.sqlite-shm").write_bytes(b"\0" * 100)
    cli("--config", cfg, "restore", "app", check=0)
    assert sorted(os.listdir(d)) == ["x.sqlite"]
    assert rows(d / "x.sqlite") == 40
    assert list((tree.state / "sqlite-quarantine").rglob("x.sqlite-wal"))


def test_invalid_local_database_is_replaced_and_quarantined(
    tree: Tree, cli: CliRunner, cfg: str
) -> None:
    make_db(tree.local / "app" / "app.db", 20)
    cli("--config", cfg, "checkpoint", "app", check=0)
    db = tree.local / "app" / "app.db"
    db.write_bytes(b"\0" * 8192)
    Path(f"{db}-wal").write_bytes(b"junk")
    cli("--config", cfg, "restore", "app", check=0)
    assert sorted(os.listdir(db.parent)) == ["app.db"]
    assert rows(db) == 20
    moved = sorted(p.name for p in (tree.state / "sqlite-quarantine").rglob("*") if p.is_file())
    assert {"app.db", "app.db-wal"} <= set(moved)


def test_invalid_local_database_without_snapshot_makes_restore_incomplete(
    tree: Tree, cli: CliRunner, cfg: str
) -> None:
    tree.write("app/config.json", "{}")
    cli("--config", cfg, "checkpoint", "app", check=0)
    tree.write("app/app.db", b"SQLite format 3\x00" + b"\xff" * 4000)
    proc = cli("--config", cfg, "restore", "app", check=1)
    assert "app.db" in proc.stderr and "no durable snapshot" in proc.stderr
    assert (tree.local / "app" / "app.db").exists()  # left where it is, for the operator


def test_rollback_journal_database(
    tree: Tree, cli: CliRunner, cfg: str, writers: list[Writer]
) -> None:
    w = Writer(tree.local / "app" / "app.db", mode="delete")
    writers.append(w)
    w.insert(12)
    cli("--config", cfg, "checkpoint", "app", check=0)
    assert snapshot_rows(tree, "app", "app.db") == 12
    assert durable_files(tree, "app") == ["checkpoints/app.db"]
    w.insert(3)
    cli("--config", cfg, "checkpoint", "app", check=0)
    assert snapshot_rows(tree, "app", "app.db") == 15
    w.close()
    (tree.local / "app" / "app.db").unlink()
    cli("--config", cfg, "restore", "app", check=0)
    assert sorted(os.listdir(tree.local / "app")) == ["app.db"]
    assert rows(tree.local / "app" / "app.db") == 15


def test_locked_database_is_reported_and_retried(tree: Tree, cli: CliRunner, cfg: str) -> None:
    db = tree.local / "app" / "app.db"
    db.parent.mkdir(parents=True)
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
        con.execute("BEGIN EXCLUSIVE")  # a writer that does not let go
        con.execute("INSERT INTO t(v) VALUES ('x')")
        proc = cli("--config", cfg, "checkpoint", "app", check=1)
        assert "app.db" in proc.stderr and "locked" in proc.stderr
        con.execute("COMMIT")
    finally:
        con.close()
    cli("--config", cfg, "checkpoint", "app", check=0)
    assert snapshot_rows(tree, "app", "app.db") == 1


def test_tight_loop_writer_does_not_stop_the_snapshot(
    tree: Tree, cli: CliRunner, cfg: str, writers: list[Writer]
) -> None:
    w = Writer(tree.local / "app" / "app.db")
    writers.append(w)
    w.insert(2000)
    assert w.send("loop") == "looping"
    try:
        cli("--config", cfg, "checkpoint", "app", check=0, timeout=60)
    finally:
        reply = w.send("stop")
    assert reply.startswith("stopped")
    assert snapshot_rows(tree, "app", "app.db") >= 2001
    w.close()


def test_unlisted_database_in_a_tree_is_snapshotted(
    tree: Tree, cli: CliRunner, cfg: str, writers: list[Writer]
) -> None:
    w = Writer(tree.local / "tree" / "sub" / "cache.db")
    writers.append(w)
    w.insert(7)
    tree.write("tree/readme.md", "x")
    proc = cli("--config", cfg, "-v", "checkpoint", "tree", check=0)
    assert "sqlite.unlisted adapter=tree path=sub/cache.db" in proc.stderr
    assert durable_files(tree, "tree") == ["checkpoints/sub/cache.db", "readme.md"]
    assert snapshot_rows(tree, "tree", "sub/cache.db") == 7
    assert entries(tree, "tree")["sub/cache.db"].kind == "sqlite"
    manifests = sorted((tree.durable / "state/tree/.syncengine/manifest").iterdir())
    for _ in range(2):
        cli("--config", cfg, "checkpoint", "tree", check=0)
    assert sorted((tree.durable / "state/tree/.syncengine/manifest").iterdir()) == manifests
    w.insert(3)  # only the WAL changes
    cli("--config", cfg, "checkpoint", "tree", check=0)
    assert snapshot_rows(tree, "tree", "sub/cache.db") == 10
    w.close()
    import shutil

    shutil.rmtree(tree.local / "tree")
    cli("--config", cfg, "restore", "tree", check=0)
    assert sorted(os.listdir(tree.local / "tree" / "sub")) == ["cache.db"]
    assert rows(tree.local / "tree" / "sub" / "cache.db") == 10


def test_old_raw_layout_is_restored_by_sqlite_recovery(
    tree: Tree, cli: CliRunner, cfg: str, writers: list[Writer]
) -> None:
    w = Writer(tree.local / "old" / "app.db")
    writers.append(w)
    w.insert(9)  # committed frames only in the WAL
    durable = tree.durable / "state" / "app"
    durable.mkdir(parents=True)
    for suffix in ("", "-wal", "-shm"):
        src = tree.local / "old" / f"app.db{suffix}"
        (durable / f"app.db{suffix}").write_bytes(src.read_bytes())
    (durable / "config.json").write_text("{}")
    w.close()
    cli("--config", cfg, "restore", "app", check=0)
    live = tree.local / "app"
    assert sorted(os.listdir(live)) == ["app.db", "config.json"]
    assert rows(live / "app.db") == 9
    cli("--config", cfg, "checkpoint", "app", check=0)
    assert snapshot_rows(tree, "app", "app.db") == 9


def test_status_shows_databases_and_library_version(tree: Tree, cli: CliRunner, cfg: str) -> None:
    make_db(tree.local / "app" / "app.db", 1)
    cli("--config", cfg, "checkpoint", "app", check=0)
    out = cli("--config", cfg, "status", check=0).stdout
    import apsw

    assert f"SQLite library: {apsw.sqlite_lib_version()} (apsw {apsw.apsw_version()}" in out
    assert "WAL-reset" not in out  # the bundled SQLite is newer than 3.51.2
    assert "database app.db: last snapshot" in out
    import json

    data = json.loads(cli("--config", cfg, "status", "--json", check=0).stdout)
    assert data["sqlite"]["version"] == apsw.sqlite_lib_version()
    assert data["sqlite"]["wal_reset_bug"] is False and data["sqlite"]["warning"] is None
    app = next(a for a in data["adapters"] if a["name"] == "app")
    assert app["databases"][0]["path"] == "app.db"
    assert app["databases"][0]["size"] > 0


def test_codex_snapshots_user_data_but_not_logs_or_projections(tree: Tree, cli: CliRunner) -> None:
    home = tree.local / "codex-home"
    for name in (
        "goals_1.sqlite",
        "memories_1.sqlite",
        "state_5.sqlite",
        "queue_1.sqlite",
        "logs_2.sqlite",
        "thread_history_1.sqlite",
    ):
        make_db(home / name, 2)
    tree.write("codex-home/history.jsonl", "{}\n")
    cli("checkpoint", "codex", check=0)
    assert durable_files(tree, "codex") == [
        "checkpoints/goals_1.sqlite",
        "checkpoints/memories_1.sqlite",
        "checkpoints/queue_1.sqlite",
        "checkpoints/state_5.sqlite",
        "history.jsonl",
    ]
    assert snapshot_rows(tree, "codex", "goals_1.sqlite") == 2
