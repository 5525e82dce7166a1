"""`run`'s background restore (issue 27 part 1): COMMAND starts after each adapter's first
set, the rest follows newest first, and nothing restore or checkpoint promises breaks.

The CLI tests run `syncengine run` as a real process; the one that shows COMMAND
starting early holds the background part on a read gate (tests/readgate.py) on the
oldest file's durable object, so the order is shown without timing.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from syncengine import Engine, Runner, config_from_dict
from syncengine.durable import manifest
from syncengine.errors import ConfigError
from syncengine.local import pending
from syncengine.restore import later as restore_later
from tests.conftest import CliRunner, EngineFactory, Tree
from tests.readgate import ReadGate

ADAPTER = {
    "name": "x",
    "live": "x",
    "durable": "state/x",
    "segments": ["chats/*.jsonl"],
    "restore_first": ["/*", "/config/"],
    "restore_newest": ["chats/*.jsonl"],
    "restore_newest_count": 2,
}
RAW = {"adapters": [], "adapter": [ADAPTER]}
T0 = 1_700_000_000_000_000_000
OLD = [f"history/h{i:02d}.txt" for i in range(30)]  # h00 the oldest: restored last
CHATS = [f"chats/c{i}.jsonl" for i in range(5)]  # c3, c4 the newest: first


def _make(tree: Tree) -> None:
    tree.write("x/settings.json", "{}")
    tree.write("x/config/deep/rules.md", "rules")
    for i, rel in enumerate(OLD):
        tree.write(f"x/{rel}", f"old {i}\n", mtime_ns=T0 + i * 10**9)
    for i, rel in enumerate(CHATS):
        tree.write(f"x/{rel}", f'{{"chat": {i}}}\n', mtime_ns=T0 + (100 + i) * 10**9)


def _config(tree: Tree, **top: object) -> dict[str, str]:
    """The deployment's environment with RAW (and `top`) as its config file."""
    lines = [f"{k} = {json.dumps(v)}" for k, v in top.items()]
    lines += ["adapters = []", "[[adapter]]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in ADAPTER.items()]
    path = tree.base / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return tree.env(SYNCENGINE_CONFIG=str(path))


def _wipe(tree: Tree) -> None:
    shutil.rmtree(tree.local / "x")
    shutil.rmtree(tree.state)


def _checkpointed(tree: Tree, cli: CliRunner, **top: object) -> dict[str, str]:
    """`_make`'s tree checkpointed by the CLI, then the local tree and state dir wiped
    (a fresh container); the environment with the config file (`_config`)."""
    _make(tree)
    env = _config(tree, **top)
    cli("checkpoint", env=env, check=0)
    _wipe(tree)
    return env


def _restarted(tree: Tree, engine: EngineFactory) -> Engine:
    """A checkpoint of `_make`'s tree, both wiped, and `run`'s restore in process: the
    first set back, the rest waiting in `passes.later` (no batch runs until the test's)."""
    _make(tree)
    eng = engine(RAW)
    assert eng.checkpoint().ok
    eng.close()
    _wipe(tree)
    eng = engine(RAW)
    assert eng.restore(later=True).ok
    return eng


def _popen_run(tree: Tree, env: dict[str, str], *cmd: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "syncengine", "run", "--", *cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tree.base,
    )


@pytest.mark.dir_only(reason="the read gate holds a durable object read on a local disk")
def test_command_starts_before_the_rest_is_restored(tree: Tree, cli: CliRunner) -> None:
    env = _checkpointed(tree, cli)
    live = tree.local / "x"
    verdict = (
        f"test -f {live}/settings.json && test -f {live}/config/deep/rules.md "
        f"&& test -f {live}/chats/c4.jsonl && test -f {live}/chats/c3.jsonl "
        f"&& test ! -e {live}/{OLD[0]} && echo early || echo late"
    )
    try:
        gate = ReadGate(tree.data / "state/x" / OLD[0])
    except OSError as exc:
        pytest.skip(f"fanotify permission events unavailable: {exc}")
    with gate:
        proc = _popen_run(tree, env, "sh", "-c", verdict)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready, "COMMAND did not start while the oldest file was held"
        line = proc.stdout.readline()
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert line == "early\n", (line, err)
    assert "33 more in the background" in err, err
    assert "background restore complete" in err, err
    assert (live / OLD[0]).read_text() == "old 0\n"
    assert (live / "chats/c0.jsonl").read_text() == '{"chat": 0}\n'


def test_checkpoints_and_gc_during_the_background_part_lose_nothing(
    tree: Tree, engine: EngineFactory
) -> None:
    """A file the agent writes at a path still to come is kept; a checkpoint and gc in the
    middle keep every pending path in the manifest; the end state restores whole."""
    eng = _restarted(tree, engine)
    waiting = eng.passes.later["x"]
    assert [a.entry.path for a in waiting[:3]] == [
        "chats/c2.jsonl",
        "chats/c1.jsonl",
        "chats/c0.jsonl",
    ]
    assert waiting[-1].entry.path == OLD[0] and len(waiting) == 33
    live = tree.local / "x"
    assert (live / "chats/c4.jsonl").exists() and not (live / OLD[5]).exists()
    mine = tree.write(f"x/{OLD[5]}", "written by the agent\n")
    assert eng.checkpoint().ok
    rep = eng.gc(apply=True)  # the files still to come are neither missing nor waited on
    text = "\n".join(rep.lines())
    assert rep.ok and "min_present_ratio" not in text and "missing in" not in text, text
    listed = manifest.load(tree.store("state/x")).entries
    assert {*OLD, *CHATS} <= set(listed)
    spec = eng.config.adapter("x")
    batches = list(restore_later.batches(waiting, files=10))
    assert len(batches) == 4
    for i, batch in enumerate(batches):
        rep = eng.passes.restore_batch(spec, batch)
        assert rep.ok, rep
        if i == 1:  # a pass between two batches
            assert eng.checkpoint().ok
    assert mine.read_text() == "written by the agent\n"
    assert (live / OLD[0]).read_text() == "old 0\n"
    assert not pending.count(eng.adapters.state(spec).index)
    assert eng.checkpoint(final=True).ok
    eng.close()
    fresh = tree.base / "fresh"
    fresh.mkdir()
    again = engine(RAW, AM_LOCAL=str(fresh))
    assert again.restore().ok
    assert (fresh / "x" / OLD[5]).read_text() == "written by the agent\n"
    for i, rel in enumerate(OLD):
        if i != 5:
            assert (fresh / "x" / rel).read_text() == f"old {i}\n"
    assert sorted(p.name for p in (fresh / "x/chats").iterdir()) == sorted(
        Path(c).name for c in CHATS
    )


@pytest.mark.dir_only(reason="the state dir's index, not the durable kind, is the point")
def test_a_kept_state_dir_does_not_hide_the_files_still_to_come(
    tree: Tree, engine: EngineFactory
) -> None:
    """The index still holds every file clean (a state dir outside the wiped live tree):
    the background part restores them all the same."""
    _make(tree)
    eng = engine(RAW)
    assert eng.checkpoint().ok
    eng.close()
    shutil.rmtree(tree.local / "x")
    eng = engine(RAW)
    assert eng.restore(later=True).ok
    spec = eng.config.adapter("x")
    for batch in restore_later.batches(eng.passes.later["x"]):
        assert eng.passes.restore_batch(spec, batch).files == len(batch)
    assert (tree.local / "x" / OLD[0]).read_text() == "old 0\n"


@pytest.mark.dir_only(reason="removes a durable object behind the manifest's back")
def test_a_background_failure_is_reported(tree: Tree, cli: CliRunner) -> None:
    env = _checkpointed(tree, cli)
    os.unlink(tree.data / "state/x" / OLD[7])
    done = cli("run", "--", "true", env=env)
    assert done.returncode == 1, done.stderr
    assert "background restore INCOMPLETE" in done.stderr and OLD[7] in done.stderr
    assert (tree.local / "x" / OLD[6]).exists()  # the rest came back
    status = json.loads(cli("status", "--json", env=env, check=0).stdout)
    assert status["restore"]["complete"] is False
    assert status["restore"]["background"]["state"] == "failed"
    text = cli("status", env=env, check=0).stdout
    assert "background restore: failed, 32/33 file(s)" in text, text
    assert "gc refused" in cli("gc", env=env, check=1).stdout  # until a restore completes


@pytest.mark.dir_only(reason="the order is the same on every durable kind")
def test_all_first_restores_the_whole_tree_before_command(tree: Tree, cli: CliRunner) -> None:
    env = _checkpointed(tree, cli, restore="all-first")
    whole = f"test -f {tree.local}/x/{OLD[0]} && echo whole"
    done = cli("run", "--", "sh", "-c", whole, env=env, check=0)
    assert done.stdout == "whole\n" and "background" not in done.stderr
    _wipe(tree)
    flag = cli("run", "--restore", "all-first", "--", "sh", "-c", whole, env=_config(tree))
    assert flag.stdout == "whole\n", flag.stderr


def test_the_runner_restores_in_the_background_with_metrics(
    tree: Tree, engine: EngineFactory
) -> None:
    _make(tree)
    eng = engine(RAW)
    assert eng.checkpoint().ok
    eng.close()
    _wipe(tree)
    with Runner(engine(RAW), metrics_address="127.0.0.1:0") as runner:
        assert runner.background is not None
        assert runner.mode == "scanning"  # inotify waits: each file placed is an event
        runner.background.wait()
        assert runner.checkpoint_now().ok and runner.mode == "events"
        status = runner.status()["restore_background"]
        assert runner.metrics is not None
        text = runner.metrics.render()
    assert status["state"] == "done" and status["files"] == 33, status
    assert "syncengine_restore_background_files 33\n" in text
    assert "syncengine_restore_background_failed 0\n" in text
    assert (tree.local / "x" / OLD[0]).read_text() == "old 0\n"


@pytest.mark.dir_only(reason="reads the configuration only")
def test_the_restore_order_is_configurable(tree: Tree) -> None:
    env = tree.env()
    over = {**RAW, "restore_order": {"x": {"first": ["/history/"], "newest_count": 0}}}
    spec = config_from_dict(over, env=env).adapter("x")
    assert spec.restore_first == ("/history/",) and spec.restore_newest_count == 0
    assert config_from_dict(RAW, env=env).restore == "background"
    with pytest.raises(ConfigError, match="restore must be"):
        config_from_dict({**RAW, "restore": "later"}, env=env)
    with pytest.raises(ConfigError, match="no such adapter"):
        config_from_dict({**RAW, "restore_order": {"y": {}}}, env=env)


def _behind(tree: Tree, engine: EngineFactory, eng: Engine, cause: str) -> None:
    """Leave `eng`'s index behind the durable manifest: an older copy of the state dir put
    back after a checkpoint, or another instance (its own state dir) checkpointing."""
    if cause == "older-state-dir":
        index_file = tree.state / "index" / "x.idx"
        older = index_file.read_bytes()
        tree.write("x/new.txt", "new\n")
        assert eng.checkpoint().ok
        index_file.write_bytes(older)
    else:
        other = tree.base / "other"
        (other / "x").mkdir(parents=True)
        (other / "x/new.txt").write_text("new\n")
        elsewhere = engine(RAW, AM_LOCAL=str(other))
        assert elsewhere.checkpoint().ok
        elsewhere.close()


@pytest.mark.dir_only(reason="the index, not the durable kind, is the point")
@pytest.mark.parametrize("cause", ["older-state-dir", "another-instance"])
def test_an_index_rebuilt_mid_run_keeps_the_files_still_to_come(
    tree: Tree, engine: EngineFactory, cause: str
) -> None:
    """The durable manifest turns out ahead of the index while the rest waits, and the
    index is rebuilt from the manifest: it keeps the pending files, so no pass marks them
    absent, and the background part still brings them back."""
    eng = _restarted(tree, engine)
    waiting = eng.passes.later["x"]  # held: no batch runs until after the rebuild
    _behind(tree, engine, eng, cause)
    tree.write("x/newer.txt", "newer\n")
    for _ in range(eng.config.gc.absent_passes + 1):
        assert eng.checkpoint().ok
    eng.gc(apply=True)
    assert {*OLD, *CHATS} <= set(manifest.load(tree.store("state/x")).entries)
    spec = eng.config.adapter("x")
    index = eng.adapters.state(spec).index
    assert pending.paths(index) == {a.entry.path for a in waiting}
    assert not any(index.get(a.entry.path).absent for a in waiting)  # type: ignore[union-attr]
    for batch in restore_later.batches(waiting, files=10):
        assert eng.passes.restore_batch(spec, batch).files == len(batch)
    assert not pending.count(eng.adapters.state(spec).index)
    assert eng.checkpoint(final=True).ok
    eng.close()
    fresh = tree.base / "fresh"
    fresh.mkdir()
    assert engine(RAW, AM_LOCAL=str(fresh)).restore().ok
    for i, rel in enumerate(OLD):
        assert (fresh / "x" / rel).read_text() == f"old {i}\n"
    assert (fresh / "x/new.txt").read_text() == "new\n"
    assert (fresh / "x/newer.txt").read_text() == "newer\n"
    assert len(list((fresh / "x/chats").iterdir())) == len(CHATS)
