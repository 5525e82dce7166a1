"""The checkpoint plan as text, with a fixed clock: each line names the action that is taken.

As in b2sdk's sync tests, the expected plan is a list of strings.  The same
plan is then carried out, and the durable side shows that the executor did
what each line said (a snapshot, not a raw copy; a segment, not a whole file).
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from syncengine import Engine, config_from_dict
from syncengine.durable.chain import SEG_DIR
from tests.conftest import Tree

RAW = {"adapters": [], "adapter": [{"name": "x", "live": "x", "durable": "state/x",
                                    "segments": ["logs/*.jsonl"], "sqlite": ["listed.db"]}]}
NOW = time.time_ns() + 3600 * 10**9  # the engine's clock: every file is older than it
OLD = NOW - 7200 * 10**9


def _db(path: Path, rows: int) -> None:
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE IF NOT EXISTS t (v TEXT)")
        con.executemany("INSERT INTO t VALUES (?)", [("x" * 100,)] * rows)
    con.close()


def _engine(tree: Tree) -> Engine:
    return Engine(config_from_dict(RAW, env=tree.env()), clock=lambda: NOW)


def _setup(tree: Tree) -> Engine:
    live = tree.local / "x"
    for rel, text in [("a.txt", "aaa"), ("same.txt", "1234"), ("gone.txt", "g"),
                      ("logs/app.jsonl", "line1\n"), ("logs/idle.jsonl", "l1\n")]:
        tree.write(f"x/{rel}", text, mtime_ns=OLD)
    _db(live / "listed.db", 1)
    _db(live / "quiet.sqlite", 1)
    eng = _engine(tree)
    assert eng.checkpoint().ok
    with open(live / "logs/idle.jsonl", "a") as f:
        f.write("l2\n")  # a second object in its chain: compacted once idle
    os.utime(live / "logs/idle.jsonl", ns=(OLD + 10**9, OLD + 10**9))
    assert eng.checkpoint().ok
    return eng


def _change(tree: Tree) -> None:
    live = tree.local / "x"
    tree.write("x/a.txt", "aaaa")
    tree.write("x/same.txt", "abcd")
    tree.write("x/new.txt", "new file")
    with open(live / "logs/app.jsonl", "a") as f:
        f.write("line2\n")
    tree.write("x/logs/new.jsonl", "first\n")
    _db(live / "unlisted.sqlite", 3)
    tree.write("x/unlisted.sqlite-wal", b"\0" * 32)  # never copied raw
    tree.write("x/quiet.sqlite-wal", b"\0" * 32)  # its database did not change: snapshot it
    _db(live / "listed.db", 2)
    (live / "gone.txt").unlink()
    (live / "link").symlink_to("a.txt")
    os.mkfifo(live / "fifo")


def test_the_dry_run_names_each_action_that_will_be_taken(tree: Tree) -> None:
    eng = _setup(tree)
    _change(tree)
    db_size = (tree.local / "x/unlisted.sqlite").stat().st_size
    (report,) = eng.checkpoint(dry_run=True).adapters
    assert list(report.plan) == [
        "upload a.txt (size 3 -> 4, 4 bytes)",
        "link link",
        "append logs/app.jsonl (6 bytes after 6: one segment of complete lines)",
        "segments logs/new.jsonl (new chain: new log, 6 bytes)",
        "upload new.txt (new, 8 bytes)",
        "skip quiet.sqlite-wal (companion of SQLite database quiet.sqlite: snapshotted)",
        "upload same.txt (same size: hash first, 4 bytes)",
        "snapshot unlisted.sqlite (unlisted database, new)",
        "skip unlisted.sqlite-wal (companion of SQLite database unlisted.sqlite: snapshotted)",
        "compact logs/idle.jsonl (idle log: a new chain of one base, 6 bytes; and whole at "
        "its plain path unless it is there)",
        "snapshot quiet.sqlite (unlisted database: its WAL or journal changed)",
        "absent gone.txt (durable copy kept)",
        "skip fifo (not a regular file or symlink)",
        "snapshot listed.db (database changed)",
    ], db_size
    # carried out as planned
    (done,) = eng.checkpoint().adapters
    assert done.ok, done.errors
    durable = tree.backing / "state/x"
    assert (durable / "checkpoints/unlisted.sqlite").is_file()
    assert not (durable / "unlisted.sqlite").exists()
    assert not (durable / "unlisted.sqlite-wal").exists()
    assert not (durable / "quiet.sqlite-wal").exists()
    assert (durable / "a.txt").read_text() == "aaaa"
    app = sorted(p.name for p in (durable / SEG_DIR / "logs/app.jsonl.d").rglob("*.seg"))
    assert len(app) == 2 and app[1].startswith("00000001-")  # one appended segment
    idle = sorted(p.name for p in (durable / SEG_DIR / "logs/idle.jsonl.d").iterdir())
    assert len(idle) == 2  # the old chain (left for gc) and its one-base compaction
    (again,) = eng.checkpoint(dry_run=True).adapters
    copies = [line for line in again.plan if line.split()[0] in ("upload", "append",
                                                                  "segments")]
    assert copies == [] and "absent gone.txt (durable copy kept)" in again.plan
    # two objects now, idle by the fixed clock: its compaction is due
    assert ("compact logs/app.jsonl (idle log: a new chain of one base, 12 bytes; and whole "
            "at its plain path unless it is there)") in again.plan
