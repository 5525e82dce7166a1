"""SIGKILL of ``syncengine gc --apply`` while it packs and collects: the root stays restorable.

Each round changes every small file, checkpoints, and runs the real command in a child
process that SIGKILLs itself at its k-th durable step under ``.syncengine/packs/`` (a
chunk written into a pack or an index, just before and just after each commit, each
deletion): the points are exact, not timed.  Then a restore into an empty live root
(its own state dir) must equal the tree the round checkpointed, and verify must pass.
Rounds build on what the killed ones left (packs without an index, cut indexes on a
mount without rename, packs half collected).  A plain directory and the bucket
emulator without rename (objects written in place), four kills each.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from syncengine import Engine
from syncengine.config import load_config
from tests.conftest import Tree
from tests.helpers import files

N = 60
CONFIG = """
adapters = []
lease_seconds = 5
[[adapter]]
name = "x"
live = "x"
durable = "state/x"
[gc]
pack_after_seconds = 0
pack_min_files = 40
pack_bytes = 65536
grace_seconds = 0
"""
# The step at which each round's gc kills itself.  A round packs 60 files into three
# packs (60 writes, then 5 steps a pack for the commits and the index: 75 steps), then
# collects the packs the round before left (index first): amid the first pack, around
# its commit and index, amid the last pack, amid the collection.
KILLS = {"dir": (3, 32, 50, 77), "no-rename": (31, 34, 66, 80)}
CHILD = r"""
import os, signal, sys
from contextlib import contextmanager
from syncengine.durable.posix.store import PosixStore

left = int(sys.argv[1])

def step(key):
    global left
    if key.startswith(".syncengine/packs/"):
        left -= 1
        if left == 0:
            os.kill(os.getpid(), signal.SIGKILL)

class Counted:
    def __init__(self, inner, key):
        self.inner, self.key = inner, key

    def write(self, data):
        step(self.key)
        self.inner.write(data)

writer, delete = PosixStore.writer, PosixStore.delete

@contextmanager
def counted_writer(self, key, **kw):
    with writer(self, key, **kw) as w:
        yield Counted(w, key)
        step(key)
    step(key)

def counted_delete(self, key):
    step(key)
    return delete(self, key)

PosixStore.writer, PosixStore.delete = counted_writer, counted_delete
from syncengine.cli import main
sys.argv = ["syncengine", "gc", "--apply"]
sys.exit(main())
"""


def _populate(tree: Tree, tag: str) -> None:
    for i in range(N):
        tree.write(f"x/d{i % 3}/f{i:03}.txt", f"{tag} file {i}\n" * (150 + i))


def _engine(env: dict[str, str]) -> Engine:
    return Engine(load_config(env=env))


@pytest.mark.dir_only("its own roots: a directory and a no-rename emulator mount")
@pytest.mark.parametrize("kind", sorted(KILLS))
def test_a_killed_gc_leaves_a_restorable_root(
    tree: Tree, kind: str, bucket_factory: object, tmp_path: Path
) -> None:
    conf = tmp_path / "syncengine.toml"
    conf.write_text(CONFIG)
    env = tree.env(SYNCENGINE_CONFIG=str(conf))
    if kind == "no-rename":
        env["DATA_DIR"] = str(bucket_factory(rename=False).mountpoint)  # type: ignore[operator]
    for round_, kill_at in enumerate(KILLS[kind]):
        _populate(tree, f"round {round_}")
        eng = _engine(env)
        assert eng.checkpoint().ok
        eng.close()
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(kill_at)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == -signal.SIGKILL, (kill_at, proc.stdout, proc.stderr)
        elsewhere = tmp_path / f"restored{round_}"
        check = _engine({**env, "AM_LOCAL": str(elsewhere)})
        # the killed gc held the lease: this verifier knows it is dead and takes it over
        assert check.restore(takeover=True).ok
        assert files(elsewhere / "x") == files(tree.local / "x"), f"kill at step {kill_at}"
        assert check.verify(sample=100).ok
        check.close()
    eng = _engine(env)  # an unkilled gc collects what the killed ones left
    assert eng.gc(apply=True).ok
    eng.close()
    left = os.listdir(Path(env["DATA_DIR"]) / "state/x/.syncengine/packs")
    ids = {name.split(".", 1)[0] for name in left}
    assert len(ids) == 3 and len(left) == 6, left
