"""A warning that repeats every pass for the same path is said once per run.

Repeated `Engine.checkpoint` calls (what the daemon does) and the embedded
`Runner`, with log records captured: the first occurrence is a warning, the
repeats are debug lines, a new reason is a warning again, and so is the
same problem after the path succeeded in between.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from syncengine import Runner
from tests.conftest import EngineFactory, Tree
from tests.helpers import Child
from tests.test_sqlite import Writer, make_db

LOCKER = r"""
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("PRAGMA journal_mode=DELETE")
con.execute("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v TEXT)")
con.execute("BEGIN EXCLUSIVE")
con.execute("INSERT INTO t(v) VALUES ('held')")
print("locked", flush=True)
sys.stdin.readline()
con.execute("COMMIT")
con.close()
"""

CONFIG = {
    "adapters": [],
    "sqlite_busy_timeout": 0.2,
    "adapter": [
        {"name": "app", "live": "app", "durable": "state/app", "sqlite": ["app.db"]},
        {"name": "tree", "live": "tree", "durable": "state/tree"},
    ],
}


def lock(db: str) -> Child:
    """Another process holding an exclusive lock on a rollback-journal database
    (`stop("go")`: it commits and exits)."""
    return Child(LOCKER, db, ready="locked")


@pytest.fixture
def lockers() -> Iterator[list[Child]]:
    held: list[Child] = []
    yield held
    for locker in held:
        locker.stop("go")


def said(
    caplog: pytest.LogCaptureFixture, event: str, path: str, *, clear: bool = True
) -> list[int]:
    """Levels of the records of `event` about `path`, in order; then forget all records."""
    levels = [
        r.levelno
        for r in caplog.records
        if r.getMessage().startswith(event) and f"path={path}" in r.getMessage()
    ]
    if clear:
        caplog.clear()
    return levels


W, D = logging.WARNING, logging.DEBUG


@pytest.mark.dir_only("about log lines of the live side")
def test_repeated_path_warnings_are_said_once_per_run(
    tree: Tree, engine: EngineFactory, caplog: pytest.LogCaptureFixture, lockers: list[Child]
) -> None:
    caplog.set_level(logging.DEBUG, logger="syncengine")
    db = tree.local / "app" / "app.db"
    make_db(db, 3, mode="delete")
    cache = tree.local / "tree" / "cache.db"
    make_db(cache, 2)
    eng = engine(CONFIG)
    lockers.append(lock(str(db)))
    for _ in range(3):
        w = Writer(cache)  # the unlisted database changes every pass: snapshotted each time
        w.insert(1)
        w.close()
        assert not eng.checkpoint().ok
    assert said(caplog, "sqlite.unlisted", "cache.db", clear=False) == [W, D, D]
    assert said(caplog, "copy.failed", "app.db") == [W, D, D]  # locked, pass after pass
    eng.checkpoint()
    assert said(caplog, "copy.failed", "app.db") == [D]  # still locked: no news
    lockers.pop().stop("go")
    db.write_bytes(db.read_bytes()[:100] + b"\xa5" * 4000)  # a new reason: corrupt
    eng.checkpoint()
    assert said(caplog, "copy.failed", "app.db") == [W]
    eng.checkpoint()
    assert said(caplog, "copy.failed", "app.db") == [D]
    db.unlink()
    make_db(db, 5, mode="delete")
    assert eng.checkpoint().ok  # it succeeded: the next problem is news again
    lockers.append(lock(str(db)))
    eng.checkpoint()
    assert said(caplog, "copy.failed", "app.db") == [W]
    fresh = engine(CONFIG)  # another run warns again
    fresh.checkpoint()
    assert said(caplog, "copy.failed", "app.db") == [W]


@pytest.mark.dir_only("about log lines of the live side")
def test_runner_says_a_repeated_failed_pass_once(
    tree: Tree, engine: EngineFactory, caplog: pytest.LogCaptureFixture, lockers: list[Child]
) -> None:
    caplog.set_level(logging.DEBUG, logger="syncengine")
    db = tree.local / "app" / "app.db"
    make_db(db, 3, mode="delete")
    runner = Runner(engine(CONFIG), interval=3600, watch=False)
    runner.start()  # restores first: a database locked then is an incomplete restore
    lockers.append(lock(str(db)))
    try:
        for _ in range(3):
            assert not runner.checkpoint_now().ok
    finally:
        lockers.pop().stop("go")
        runner.stop()
    levels = [
        r.levelno for r in caplog.records if r.getMessage().startswith("runner.pass-incomplete")
    ]
    assert levels == [logging.ERROR, D, D]
    assert [r.levelno for r in caplog.records if r.getMessage().startswith("copy.failed")] == [
        W,
        D,
        D,
    ]
