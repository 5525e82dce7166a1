"""gc: tombstones after absent passes and a grace period, only with --apply, never on a bad view."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from syncengine import ConfigError, Engine, config_from_dict
from syncengine.checkpoint.record import write_base
from syncengine.durable import manifest
from syncengine.durable.posix.store import Store
from syncengine.local.index import Index
from syncengine.ops import gc, gcplan
from tests.conftest import CliRunner, Tree
from tests.helpers import files

pytestmark = pytest.mark.s3

DAY = 86400 * 10**9
RAW = {
    "adapters": [],
    "adapter": [{"name": "x", "live": "x", "durable": "state/x", "segments": ["logs/*.jsonl"]}],
    "gc": {"absent_passes": 3, "grace_seconds": 7 * 86400},
}


class Clock:
    def __init__(self) -> None:
        self.now = time.time_ns()

    def __call__(self) -> int:
        return self.now


def _engine(tree: Tree, clock: Clock) -> Engine:
    return Engine(config_from_dict(RAW, env=tree.env()), clock=clock, stores=tree.stores)


def _populate(tree: Tree, n: int = 10) -> None:
    for i in range(n):
        tree.write(f"x/f{i}.txt", f"file {i}\n" * 20)


def _passes(tree: Tree, clock: Clock, n: int) -> None:
    for _ in range(n):
        clock.now += 60 * 10**9
        assert _engine(tree, clock).checkpoint().ok


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.mark.memory
def test_tombstone_waits_for_passes_grace_and_apply(tree: Tree, clock: Clock) -> None:
    _populate(tree)
    _passes(tree, clock, 1)
    durable = tree.store("state/x")
    (tree.local / "x/f0.txt").unlink()
    _passes(tree, clock, 2)
    rep = _engine(tree, clock).gc(apply=True)
    assert rep.ok and "keep f0.txt (missing in 2 of 3 checkpoints)" in "\n".join(rep.lines())
    _passes(tree, clock, 1)
    rep = _engine(tree, clock).gc(apply=True)
    assert "keep f0.txt (tombstone; grace period ends" in "\n".join(rep.lines())
    assert durable.head("f0.txt") is not None
    clock.now += 7 * DAY
    dry = _engine(tree, clock).gc()
    text = "\n".join(dry.lines())
    assert dry.ok and "delete f0.txt (tombstone" in text and "would delete" in text
    assert durable.head("f0.txt") is not None, "a dry run deletes nothing"
    done = _engine(tree, clock).gc(apply=True)
    assert done.ok and done.adapters[0].manifest
    assert durable.head("f0.txt") is None
    state = manifest.load(durable)
    assert "f0.txt" not in state.entries and len(state.entries) == 9
    assert [k for _, k, _ in manifest.list_objects(durable)] == ["base"]
    idx = Index.load(tree.state / "index/x.idx")
    assert idx is not None and "f0.txt" not in idx
    # a fresh machine restores the rest without complaining about the deleted file
    shutil.rmtree(tree.local)
    rep2 = _engine(tree, clock).restore()
    assert rep2.ok and rep2.files == 9
    # and a second gc has nothing left to do
    again = _engine(tree, clock).gc(apply=True)
    assert again.ok and again.adapters[0].objects == 0


@pytest.mark.memory
def test_never_deletes_a_file_that_exists_locally(tree: Tree, clock: Clock) -> None:
    _populate(tree)
    _passes(tree, clock, 1)
    (tree.local / "x/f0.txt").unlink()
    (tree.local / "x/f1.txt").unlink()
    _passes(tree, clock, 3)
    clock.now += 8 * DAY
    tree.write("x/f0.txt", "back again\n")  # reappeared before gc ran
    eng = _engine(tree, clock)
    state = eng.adapter_state(eng.config.adapter("x"))
    facts = gc.gather(state)
    actions = gcplan.plan(facts, eng.config.gc, clock.now)
    assert [str(a).split(" (")[0] for a in actions if isinstance(a, gcplan.DeletePath)] == [
        "delete f1.txt"
    ]
    tree.write("x/f1.txt", "reappeared between plan and delete\n")
    result = gc.execute(state, facts, actions, clock.now)
    assert result.kept == ("f1.txt",) and result.objects == 0
    durable = tree.store("state/x")
    assert durable.head("f0.txt") is not None and durable.head("f1.txt") is not None


def test_refuses_an_empty_or_partial_local_view(tree: Tree, clock: Clock, cli: CliRunner) -> None:
    _populate(tree)
    _passes(tree, clock, 1)
    for i in range(6):
        (tree.local / f"x/f{i}.txt").unlink()
    _passes(tree, clock, 3)
    clock.now += 8 * DAY
    before = files(tree.durable)
    rep = _engine(tree, clock).gc(apply=True)
    assert not rep.ok and "only 4 of 10 manifest paths exist locally" in rep.lines()[0]
    for i in range(6, 10):
        (tree.local / f"x/f{i}.txt").unlink()
    rep = _engine(tree, clock).gc(apply=True)
    assert not rep.ok and "live tree is empty" in rep.lines()[0]
    shutil.rmtree(tree.local / "x")
    conf = tree.base / "c.toml"
    conf.write_text('adapters = []\n[[adapter]]\nname = "x"\nlive = "x"\ndurable = "state/x"\n')
    out = cli("--config", str(conf), "gc", "--apply", check=1)
    assert "live tree does not exist" in out.stdout
    assert files(tree.durable) == before


def test_refuses_while_a_restore_is_incomplete(tree: Tree, clock: Clock, cli: CliRunner) -> None:
    _populate(tree)
    _passes(tree, clock, 1)
    (tree.state / "restore.json").write_text(json.dumps({"complete": False}))
    rep = _engine(tree, clock).gc()
    assert rep.exit_code == 1 and "restore is incomplete" in rep.lines()[0]


@pytest.mark.posix_only("plants stale staging temp files: S3 stages nothing (one PUT)")
def test_cleans_staging_superseded_manifests_and_chains(tree: Tree, clock: Clock) -> None:
    _populate(tree, 4)
    tree.write("x/logs/a.jsonl", '{"a": 1}\n' * 10)
    _passes(tree, clock, 1)
    tree.write("x/f0.txt", "changed\n")
    _passes(tree, clock, 1)
    tree.write("x/logs/a.jsonl", '{"b": 1}\n')  # shrank: a new chain
    _passes(tree, clock, 1)
    durable = tree.durable / "state/x"
    chains = sorted(p.name for p in (durable / ".syncengine/segments/logs/a.jsonl.d").iterdir())
    assert len(chains) == 2
    staging = durable / ".syncengine/staging"
    staging.mkdir(parents=True, exist_ok=True)
    (staging / "dead.syncengine-tmp").write_bytes(b"partial")
    (staging / "fresh.syncengine-tmp").write_bytes(b"in flight")
    old = clock.now - 2 * 3600 * 10**9
    os.utime(staging / "dead.syncengine-tmp", ns=(old, old))
    store = Store(durable)
    # force a second base so older objects are superseded
    eng = _engine(tree, clock)
    st = eng.adapter_state(eng.config.adapter("x"))
    mstate = manifest.load(store)
    write_base(st, mstate.entries.values(), clock.now)
    st.index.save(st.index_path)
    assert len(manifest.list_objects(store)) == 4
    rep = _engine(tree, clock).gc(apply=True)
    text = "\n".join(rep.lines())
    assert "staging leftovers (1 object(s)" in text
    assert "superseded manifest objects (3 object(s)" in text
    assert "superseded chain" not in text, "within the grace period"
    assert not (staging / "dead.syncengine-tmp").exists()
    assert (staging / "fresh.syncengine-tmp").exists()
    assert [k for _, k, _ in manifest.list_objects(store)] == ["base"]
    clock.now += 8 * DAY
    rep = _engine(tree, clock).gc(apply=True)
    assert "superseded chain" in "\n".join(rep.lines())
    assert len(list((durable / ".syncengine/segments/logs/a.jsonl.d").iterdir())) == 1
    assert not (staging / "fresh.syncengine-tmp").exists(), "old by the clock now"
    shutil.rmtree(tree.local)
    assert _engine(tree, clock).restore().ok
    assert (tree.local / "x/logs/a.jsonl").read_text() == '{"b": 1}\n'
    assert Path(tree.local / "x/f0.txt").read_text() == "changed\n"


def test_gc_config_is_validated(tree: Tree) -> None:
    for bad in ({"absent_passes": 0}, {"grace_seconds": -1}, {"nope": 1}, {"min_present_ratio": 2}):
        with pytest.raises(ConfigError):
            config_from_dict({**RAW, "gc": bad}, env=tree.env())
    cfg = config_from_dict(RAW, env=tree.env())
    assert cfg.gc.absent_passes == 3 and cfg.gc.grace_seconds == 604800
