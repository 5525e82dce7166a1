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
from syncengine.local.status import staging_marker
from tests.conftest import Tree

RAW = {
    "adapters": [],
    "adapter": [
        {
            "name": "x",
            "live": "x",
            "durable": "state/x",
            "segments": ["logs/*.jsonl"],
            "sqlite": ["listed.db"],
        }
    ],
}
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
    for rel, text in [
        ("a.txt", "aaa"),
        ("same.txt", "1234"),
        ("gone.txt", "g"),
        ("logs/app.jsonl", "line1\n"),
        ("logs/idle.jsonl", "l1\n"),
    ]:
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
    copies = [line for line in again.plan if line.split()[0] in ("upload", "append", "segments")]
    assert copies == [] and "absent gone.txt (durable copy kept)" in again.plan
    # two objects now, idle by the fixed clock: its compaction is due
    assert (
        "compact logs/app.jsonl (idle log: a new chain of one base, 12 bytes; and whole "
        "at its plain path unless it is there)"
    ) in again.plan


KINDS = {
    "adapters": [],
    "adapter": [
        {
            "name": "k",
            "live": "k",
            "durable": "state/k",
            "segments": ["logs/*.jsonl"],
            "sqlite": ["app.db"],
            "exclude": ["cache/"],
        }
    ],
}


def test_each_kind_of_change_is_one_line_of_the_plan(tree: Tree) -> None:
    """New, changed and deleted files, a listed database and an unlisted one with its WAL,
    an appended transcript, a directory and a symlink: one line each, in plan order; an
    excluded path: none."""
    live = tree.local / "k"
    for rel, text in [
        ("kept.txt", "same"),
        ("changed.txt", "v1"),
        ("deleted.txt", "d"),
        ("logs/t.jsonl", "turn 1\n"),
    ]:
        tree.write(f"k/{rel}", text, mtime_ns=OLD)
    _db(live / "app.db", 1)
    eng = Engine(config_from_dict(KINDS, env=tree.env()), clock=lambda: NOW)
    assert eng.checkpoint().ok
    tree.write("k/new.txt", "brand new")
    tree.write("k/changed.txt", "v2 longer")
    (live / "deleted.txt").unlink()
    with open(live / "logs/t.jsonl", "a") as f:
        f.write("turn 2\n")
    _db(live / "app.db", 2)
    _db(live / "notes.sqlite", 1)
    tree.write("k/notes.sqlite-wal", b"\0" * 32)
    (live / "sub").mkdir()
    (live / "sub").chmod(0o750)
    (live / "link").symlink_to("kept.txt")
    tree.write("k/cache/blob", "excluded")
    (report,) = eng.checkpoint(dry_run=True).adapters
    assert list(report.plan) == [
        "upload changed.txt (size 2 -> 9, 9 bytes)",
        "link link",
        "append logs/t.jsonl (7 bytes after 7: one segment of complete lines)",
        "upload new.txt (new, 9 bytes)",
        "snapshot notes.sqlite (unlisted database, new)",
        "skip notes.sqlite-wal (companion of SQLite database notes.sqlite: snapshotted)",
        "absent deleted.txt (durable copy kept)",
        "dir sub/ (new, mode 0750)",
        "snapshot app.db (database changed)",
    ]
    # carried out as planned: then no line of it is left to do
    (done,) = eng.checkpoint().adapters
    assert done.ok and done.links == 1 and done.dirs == 1, done
    durable = tree.backing / "state/k"
    assert (durable / "new.txt").read_text() == "brand new"
    assert (durable / "changed.txt").read_text() == "v2 longer"
    assert (durable / "deleted.txt").is_file()  # kept: deletions wait for gc
    assert (durable / "checkpoints/notes.sqlite").is_file()
    assert not (durable / "notes.sqlite-wal").exists() and not (durable / "cache").exists()
    (again,) = eng.checkpoint(dry_run=True).adapters
    assert not set(report.plan) & set(again.plan) - {"absent deleted.txt (durable copy kept)"}


def test_after_a_killed_pass_the_plan_says_same_size_files_are_copied_whole(tree: Tree) -> None:
    """The staging marker of a killed pass: the durable path may hold an unrecorded
    version, so the recorded hash is not trusted, and the plan says so."""
    tree.write("k/same.txt", "1234", mtime_ns=OLD)
    eng = Engine(config_from_dict(KINDS, env=tree.env()), clock=lambda: NOW)
    assert eng.checkpoint().ok
    tree.write("k/same.txt", "abcd")
    (report,) = eng.checkpoint(dry_run=True).adapters
    assert list(report.plan) == ["upload same.txt (same size: hash first, 4 bytes)"]
    staging_marker(tree.state, "k").touch()  # what a killed pass leaves
    (report,) = eng.checkpoint(dry_run=True).adapters
    assert list(report.plan) == [
        "upload same.txt (same size, copied whole: a killed pass may have left versions "
        "unrecorded, 4 bytes)"
    ]
    (done,) = eng.checkpoint().adapters
    assert done.ok and done.files == 1 and not staging_marker(tree.state, "k").exists()
