"""The embedded Runner: restore gate, loop thread, checkpoint_now from threads, status."""

from __future__ import annotations

import json
import threading

import pytest

from syncengine import Incomplete, Runner
from syncengine.errors import LockBusy
from syncengine.local.lock import StateLock
from tests.conftest import CliRunner, EngineFactory, Tree

pytestmark = pytest.mark.s3

RAW = {"adapters": [], "adapter": [{"name": "x", "live": "x", "durable": "state/x"}]}


def test_start_stop_as_context_manager_leaves_no_threads(tree: Tree, engine: EngineFactory) -> None:
    tree.write("x/a.txt", "a")
    before = set(threading.enumerate())
    with Runner(engine(RAW), interval=0.05) as runner:
        assert runner.running and runner.mode == "events"
        tree.write("x/b.txt", "b")
        report = runner.checkpoint_now(timeout=30)
        assert report.ok
        assert (tree.durable / "state/x/b.txt").read_text() == "b"
    assert not runner.running
    assert set(threading.enumerate()) == before


def test_final_checkpoint_on_stop(tree: Tree, engine: EngineFactory) -> None:
    runner = Runner(engine(RAW), interval=3600)
    runner.start()
    tree.write("x/late.txt", "written just before stop")
    final = runner.stop()
    assert final is not None and final.files == 1
    assert (tree.durable / "state/x/late.txt").read_text() == "written just before stop"
    assert runner.stop() is None


def test_checkpoint_now_from_several_threads(tree: Tree, engine: EngineFactory) -> None:
    results: list[int] = []
    with Runner(engine(RAW), interval=0.01) as runner:

        def work(n: int) -> None:
            tree.write(f"x/t{n}.txt", str(n))
            report = runner.checkpoint_now(timeout=60)
            assert report.ok and not report.skipped_busy
            results.append(n)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(results) == list(range(6))
    for n in range(6):
        assert (tree.durable / f"state/x/t{n}.txt").read_text() == str(n)


def test_checkpoint_now_times_out_while_another_process_holds_the_lock(
    tree: Tree, engine: EngineFactory
) -> None:
    runner = Runner(engine(RAW), interval=3600, watch=False)
    with runner, StateLock(tree.state), pytest.raises(LockBusy):
        runner.checkpoint_now(timeout=0.2)


def test_incomplete_restore_raises_and_starts_nothing(tree: Tree, engine: EngineFactory) -> None:
    mdir = tree.durable / "state/x/.syncengine/manifest"
    mdir.mkdir(parents=True)
    lines = [
        {"syncengine_manifest": 1, "adapter": "x", "seq": 1, "type": "base", "created_ns": 1},
        {"path": "../out.txt", "kind": "file", "mtime_ns": 1, "size": 1, "mode": 420},
        {"end": 1},
    ]
    (mdir / "000000000001.base.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    before = set(threading.enumerate())
    runner = Runner(engine(RAW))
    with pytest.raises(Incomplete, match=r"\.\./out\.txt"):
        runner.start()
    assert not runner.running
    assert set(threading.enumerate()) == before


def test_status_file_is_shown_by_syncengine_status(
    tree: Tree, engine: EngineFactory, cli: CliRunner
) -> None:
    cfg = tree.base / "cfg.toml"
    cfg.write_text('adapters = []\n[[adapter]]\nname = "x"\nlive = "x"\ndurable = "state/x"\n')
    tree.write("x/a.txt", "a")
    with Runner(engine(RAW), interval=3600) as runner:
        runner.checkpoint_now()
        st = runner.status()
        assert st["mode"] == "events" and st["pending"] == {"x": 0}
        out = json.loads(cli("--config", str(cfg), "status", "--json", check=0).stdout)
        assert out["daemon"]["running"] is True and out["daemon"]["mode"] == "events"
        adapter = out["adapters"][0]
        assert adapter["pending"] == 0 and adapter["loss_window_s"] is not None
        text = cli("--config", str(cfg), "status", check=0).stdout
        assert "loss window" in text and "events" in text
    out = json.loads(cli("--config", str(cfg), "status", "--json", check=0).stdout)
    assert out["daemon"]["running"] is False
