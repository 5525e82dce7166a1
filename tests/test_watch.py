"""Event hints: partial passes, overflow and bursts, fallback to scanning.

The watcher runs for real (inotify through watchdog) against temp trees; the
engine is driven pass by pass with the hints it hands out.  Waiting for an
event to arrive polls the watcher's pending count with a deadline (inotify
delivery is asynchronous; there is no line to wait for).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from syncengine.daemon import watch
from syncengine.daemon.watch import Watcher
from syncengine.local.index import Index
from tests.conftest import EngineFactory, Tree

RAW = {"adapters": [], "adapter": [{"name": "x", "live": "x", "durable": "state/x"}]}
MAX_QUEUED = Path("/proc/sys/fs/inotify/max_queued_events")
# The overflow test lowers a system-wide inotify limit for a moment: every test here (and
# any other that asserts on hints) runs on one xdist worker, so none creates its watcher
# in that moment.
pytestmark = pytest.mark.xdist_group("inotify")


def until(cond: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


@pytest.fixture
def watcher(tree: Tree) -> Iterator[Watcher]:
    (tree.local / "x").mkdir(exist_ok=True)
    w = Watcher({"x": tree.local / "x"}, rescan_interval=600)
    yield w
    w.stop()


def durable_files(tree: Tree) -> set[str]:
    root = tree.data / "state/x"
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and ".syncengine" not in p.parts
    }


def test_event_pass_in_a_50000_file_tree_copies_only_the_changed_file(
    tree: Tree, engine: EngineFactory, watcher: Watcher
) -> None:
    live = tree.local / "x"
    seed = tree.base / "seed"
    seed.write_bytes(b"same content\n")
    for d in range(100):  # hard links: 50,000 paths, one syscall each
        (live / f"d{d:02}").mkdir()
        for i in range(500):
            os.link(seed, live / f"d{d:02}/f{i:03}.json")
    st = os.lstat(seed)
    index = Index()  # as if a checkpoint had published them all
    for d in range(100):
        for i in range(500):
            index.record(
                f"d{d:02}/f{i:03}.json",
                size=st.st_size,
                mtime_ns=st.st_mtime_ns,
                ctime_ns=st.st_ctime_ns,
                hash64=1,
                mode=st.st_mode,
            )
    index.save(tree.state / "index" / "x.idx")
    eng = engine(RAW)
    assert watcher.start() and watcher.mode == "events"
    first = watcher.take()
    assert first == {"x": None}, "the first pass walks the tree"
    assert eng.checkpoint(hints=first).files == 0
    assert watcher.take() == {"x": set()}
    assert eng.checkpoint(hints={"x": set()}).files == 0, "idle event pass"

    new = tree.base / "new"
    new.write_bytes(b"changed content\n")
    os.replace(new, live / "d42/f123.json")
    until(lambda: watcher.pending()["x"] == 1)
    hints = watcher.take()
    assert hints == {"x": {"d42/f123.json"}}
    report = eng.checkpoint(hints=hints)
    assert (report.files, report.adapters[0].unchanged) == (1, 0)
    assert durable_files(tree) == {"d42/f123.json"}


def test_hinted_pass_marks_only_hinted_paths_absent_and_walks_new_dirs(
    tree: Tree, engine: EngineFactory
) -> None:
    for rel in ("a.txt", "b.txt", "gone/1.txt", "gone/2.txt"):
        tree.write(f"x/{rel}", rel, mtime_ns=time.time_ns() - 10**10)  # settled, not dirty
    eng = engine(RAW)
    assert eng.checkpoint().files == 4
    (tree.local / "x/a.txt").unlink()
    (tree.local / "x/b.txt").unlink()  # not hinted: not marked absent by a partial pass
    (tree.local / "x/gone/1.txt").unlink()
    (tree.local / "x/gone/2.txt").unlink()
    (tree.local / "x/gone").rmdir()
    tree.write("x/new/deep/c.txt", "c")
    plan = eng.checkpoint(hints={"x": {"a.txt", "gone", "new"}}, dry_run=True).adapters[0].plan
    mode = f"{os.stat(tree.local / 'x/new').st_mode & 0o7777:04o}"
    assert sorted(plan) == sorted(
        [
            "upload new/deep/c.txt (new, 1 bytes)",
            "absent a.txt (durable copy kept)",
            "absent gone/1.txt (durable copy kept)",
            "absent gone/2.txt (durable copy kept)",
            "absent gone/ (directory: its manifest entry is kept until gc)",
            f"dir new/ (new, mode {mode})",
            f"dir new/deep/ (new, mode {mode})",
        ]
    )


def test_burst_above_the_hint_limit_falls_back_to_a_walk(
    tree: Tree, engine: EngineFactory, watcher: Watcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "HINT_LIMIT", 100)
    eng = engine(RAW)
    watcher.start()
    eng.checkpoint(hints=watcher.take())
    for i in range(500):
        tree.write(f"x/burst/{i:04}.txt", str(i))
    until(lambda: watcher.pending()["x"] is None)
    hints = watcher.take()
    assert hints == {"x": None}
    assert eng.checkpoint(hints=hints).files == 500


@pytest.mark.skipif(
    not os.access(MAX_QUEUED, os.W_OK), reason="needs root to lower fs.inotify.max_queued_events"
)
def test_queue_overflow_is_detected_and_every_file_becomes_durable(
    tree: Tree, engine: EngineFactory, watcher: Watcher
) -> None:
    eng = engine(RAW)
    old = MAX_QUEUED.read_text()
    try:  # the limit is read when the inotify instance is created: restore it at once
        MAX_QUEUED.write_text("16\n")
        watcher.start()
    finally:
        MAX_QUEUED.write_text(old)
    eng.checkpoint(hints=watcher.take())
    # Write in bursts of 300 files (each one is several events for a queue of 16) until
    # the watcher reports the overflow: the first burst does it, the bound is a failure.
    written = 0
    while watcher.overflows == 0:
        assert written < 3000, "no inotify overflow after 3000 files"
        for i in range(written, written + 300):
            tree.write(f"x/burst/{i % 30:02}/{i:05}.txt", str(i))
        written += 300
        with contextlib.suppress(AssertionError):
            until(lambda: watcher.overflows > 0, timeout=2)
    hints = watcher.take()
    assert hints == {"x": None}  # the next pass walks: events were lost
    assert eng.checkpoint(hints=hints).files == written
    assert len(durable_files(tree)) == written


def test_watcher_that_cannot_start_falls_back_to_scanning(
    tree: Tree, watcher: Watcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_inotify(*args: object) -> object:
        raise OSError(24, "inotify instance limit reached")

    monkeypatch.setattr(watch, "_make_observer", no_inotify)
    assert watcher.start() is False
    assert watcher.mode == "scanning"
    assert "inotify instance limit" in (watcher.last_error or "")
    assert watcher.take() == {"x": None}


def test_watcher_thread_death_forces_a_walk(tree: Tree, watcher: Watcher) -> None:
    watcher.start()
    watcher.take()
    watcher._failed("ENOSPC: inotify watch limit reached")  # as the inotify thread reports it
    assert watcher.take() == {"x": None}
    assert watcher.mode == "scanning"
    assert "ENOSPC" in (watcher.last_error or "")


def test_live_tree_created_after_start_is_watched(tree: Tree) -> None:
    w = Watcher({"y": tree.local / "y"}, rescan_interval=600)
    try:
        w.start()
        assert w.take() == {"y": None}
        (tree.local / "y").mkdir()
        assert w.take() == {"y": None}, "first pass after the watch starts walks"
        assert w.take() == {"y": set()}
        (tree.local / "y/f.txt").write_text("f")
        until(lambda: w.pending()["y"] == 1)
        assert w.take() == {"y": {"f.txt"}}
    finally:
        w.stop()


def test_periodic_rescan(tree: Tree) -> None:
    now = [0.0]
    (tree.local / "x").mkdir()
    w = Watcher({"x": tree.local / "x"}, rescan_interval=60, clock=lambda: now[0])
    try:
        w.start()
        assert w.take() == {"x": None}
        assert w.take() == {"x": set()}
        now[0] = 61.0
        assert w.take() == {"x": None}
    finally:
        w.stop()


NESTED = """
import os, sys
root = sys.argv[1]
for i in range(300):
    deep = os.path.join(root, f"a{i}", "b", "c", "d", "e")
    os.makedirs(deep)
    open(os.path.join(deep, "f"), "w").close()
"""


@pytest.mark.dir_only("watches the local tree only")
def test_nested_directories_created_quickly_raise_no_library_warning(
    tree: Tree, watcher: Watcher
) -> None:
    """watchdog re-adds the watch of a directory created while it walks the parent and
    warns each time (a RuntimeWarning: an error here, as pytest makes every warning);
    the watcher must neither print it nor fail over it."""
    live = tree.local / "x"
    assert watcher.start()
    watcher.take()
    subprocess.run([sys.executable, "-c", NESTED, str(live)], check=True, timeout=60)
    files = {f"a{i}/b/c/d/e/f" for i in range(300)}
    until(lambda: (watcher.pending()["x"] or 0) >= 6 * 300 or watcher._error is not None)
    assert watcher._error is None and watcher.last_error is None
    hints = watcher.take()
    assert watcher.mode == "events" and watcher.last_error is None
    assert hints["x"] is not None and files <= hints["x"]


def test_start_after_walks_every_pass_until_ready_then_watches(
    tree: Tree, watcher: Watcher
) -> None:
    """`run`'s background restore defers inotify (`Watcher.start_after`): nothing is
    watched meanwhile, so every pass walks; once ready, the watcher starts and its
    first pass walks once more, then events flow."""
    ready = [False]
    watcher.start_after(lambda: ready[0])
    (tree.local / "x/during.txt").write_text("written during the restore\n")
    for _ in range(2):
        assert watcher.take() == {"x": None} and watcher.mode == "scanning"
    ready[0] = True
    assert watcher.take() == {"x": None} and watcher.mode == "events"
    assert watcher.take() == {"x": set()}
    (tree.local / "x/after.txt").write_text("after\n")
    until(lambda: watcher.pending()["x"] == 1)
    assert watcher.take() == {"x": {"after.txt"}}
