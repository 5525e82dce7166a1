"""Order within a pass: a database snapshot is never newer than the files it refers to.

A real writer process does what Codex does with a rollout and its
projection: append a line to a log, then record the log's new length in a
WAL-mode database, step after step.  Whatever moment a checkpoint catches,
the durable pair must satisfy: recorded length <= durable log length (a
restore of the pair never points past the end of the log).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import EngineFactory, Tree
from tests.helpers import Child, query_snapshot

pytestmark = pytest.mark.s3

PAIR_WRITER = r"""
import os, select, sqlite3, sys, time
log_path, db_path = sys.argv[1], sys.argv[2]
con = sqlite3.connect(db_path, isolation_level=None, timeout=30)
con.execute("PRAGMA journal_mode=WAL")
con.execute("CREATE TABLE IF NOT EXISTS pos(id INTEGER PRIMARY KEY CHECK (id = 1), len INT)")
con.execute("INSERT OR IGNORE INTO pos VALUES (1, 0)")
log = open(log_path, "ab", buffering=0)
n = 0
while not select.select([sys.stdin], [], [], 0)[0]:
    log.write(b'{"turn": %d, "text": "%s"}\n' % (n, b"y" * 200))
    con.execute("UPDATE pos SET len = ? WHERE id = 1", (os.fstat(log.fileno()).st_size,))
    n += 1
    if n == 1:
        print("writing", flush=True)
    time.sleep(0.0005)  # pacing only, so two cores are left for the checkpoints
sys.stdin.readline()
print("stopped", n, flush=True)
"""

CONFIG = {
    "adapters": [],
    "adapter": [
        {"name": "cx", "live": "cx", "durable": "state/cx", "sqlite": ["thread_history.sqlite"]}
    ],
}


@pytest.fixture
def pair_writer(tree: Tree) -> Iterator[Child]:
    live = tree.local / "cx"
    live.mkdir()
    child = Child(
        PAIR_WRITER,
        str(live / "rollout.jsonl"),
        str(live / "thread_history.sqlite"),
        ready="writing",
    )
    yield child
    child.stop()


def recorded_length(tree: Tree) -> int:
    rows = query_snapshot(
        tree.durable / "state/cx/checkpoints/thread_history.sqlite",
        tree.base,
        "SELECT len FROM pos",
    )
    return int(str(rows[0][0]))


def test_database_snapshot_is_never_ahead_of_the_log_it_indexes(
    tree: Tree, engine: EngineFactory, pair_writer: Child
) -> None:
    eng = engine(CONFIG)
    seen = []
    for _ in range(10):
        report = eng.checkpoint()
        assert report.ok, report.errors
        durable_log = (tree.durable / "state/cx/rollout.jsonl").stat().st_size
        recorded = recorded_length(tree)
        assert recorded <= durable_log, (recorded, durable_log, seen)
        seen.append((recorded, durable_log))
    assert seen[-1][0] > seen[0][0]  # the writer was writing all along
