"""Append-only logs as segment chains: writer killed mid-line, non-append changes,
missing or corrupt segments, compaction, final checkpoint, export."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from syncengine import Engine, segments
from syncengine.manifest import load
from syncengine.store import Store
from tests.bucket_mount import BucketMount
from tests.bucket_mount import bucket as bucket
from tests.conftest import CliRunner, EngineFactory, Tree

RAW: dict[str, Any] = {"adapters": [], "adapter": [
    {"name": "x", "live": "x", "durable": "state/x", "segments": ["*.jsonl"]}]}
LOG = "sessions/rollout-1.jsonl"

WRITER = r"""
import sys
path = sys.argv[1]
with open(path, "ab", buffering=0) as f:
    n = 0
    for cmd in sys.stdin:
        if n:
            f.write(b'"}\n')  # complete the torn line
        for _ in range(int(cmd)):
            n += 1
            f.write(b'{"n": %d, "pad": "%s"}\n' % (n, b"x" * (n % 50)))
        f.write(b'{"n": "torn')  # half a line: must never be restored
        print("ok", flush=True)
"""


def chain_objects(tree: Tree, rel: str = LOG) -> list[Path]:
    base = tree.data / "state/x" / segments.SEG_DIR / f"{rel}.d"
    return sorted(base.rglob("*.seg")) if base.exists() else []


def entry(tree: Tree, rel: str = LOG) -> Any:
    return load(Store(tree.data / "state/x")).entries[rel]


def wipe_local(tree: Tree) -> None:
    shutil.rmtree(tree.local)
    tree.local.mkdir()


def complete_lines(data: bytes) -> bytes:
    return data[: data.rfind(b"\n") + 1]


def test_killed_writer_restores_exactly_the_published_lines(tree: Tree, engine: EngineFactory
                                                            ) -> None:
    live = tree.write(f"x/{LOG}", b"")
    eng = engine(RAW)
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(live)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    published = b""
    try:
        for lines in (5, 1, 40, 3):
            proc.stdin.write(b"%d\n" % lines)
            proc.stdin.flush()
            assert proc.stdout.readline() == b"ok\n"
            snapshot = live.read_bytes()
            assert not snapshot.endswith(b"\n")  # a torn line is in the file
            report = eng.checkpoint()
            assert report.ok, report.errors
            published = complete_lines(snapshot)
        proc.stdin.write(b"7\n")  # more lines the checkpoint never sees
        proc.stdin.flush()
        assert proc.stdout.readline() == b"ok\n"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()
    objects = chain_objects(tree)
    assert len(objects) == 4  # base + one segment per checkpoint, no rewrite
    assert all(o.read_bytes().endswith(b"\n") for o in objects)
    assert b"".join(o.read_bytes() for o in objects) == published  # cat rebuilds it
    wipe_local(tree)
    report = engine(RAW).restore()
    assert report.ok, report.errors
    assert (tree.local / "x" / LOG).read_bytes() == published


def _mutate(kind: str, path: Path) -> None:
    data = path.read_bytes()
    if kind == "shrink":
        os.truncate(path, data.index(b"\n") + 1)
        with path.open("ab") as f:
            f.write(b'{"after": "trim"}\n')
    elif kind == "rename":
        tmp = path.with_name(path.name + ".tmp-1")
        tmp.write_bytes(data.replace(b"line", b"LINE") + b'{"after": "rename"}\n')
        os.replace(tmp, path)
    else:  # the middle rewritten in place, same size, then an append
        with path.open("r+b") as f:
            f.seek(len(data) // 2)
            f.write(b"#" * 8)
        with path.open("ab") as f:
            f.write(b'{"after": "rewrite"}\n')


@pytest.mark.parametrize("kind", ["shrink", "rename", "rewrite"])
def test_non_append_change_starts_a_new_chain(tree: Tree, engine: EngineFactory,
                                              kind: str) -> None:
    path = tree.write(f"x/{LOG}", b"".join(b'{"line": %d, "text": "%s"}\n' % (i, b"y" * 40)
                                    for i in range(100)))
    eng = engine(RAW)
    assert eng.checkpoint().ok
    with path.open("ab") as f:
        f.write(b'{"line": "appended"}\n')
    assert eng.checkpoint().ok
    first_chain = entry(tree).extra["chain"]
    assert len(entry(tree).extra["lens"]) == 2
    _mutate(kind, path)
    report = eng.checkpoint()
    assert report.ok, report.errors
    expected = path.read_bytes()
    new = entry(tree)
    assert new.extra["chain"] != first_chain and new.extra["lens"] == [len(expected)]
    wipe_local(tree)
    assert engine(RAW).restore().ok
    assert (tree.local / "x" / LOG).read_bytes() == expected


@pytest.mark.parametrize("damage", ["missing", "corrupt", "truncated"])
def test_bad_segment_refuses_that_file(tree: Tree, engine: EngineFactory, cli: CliRunner,
                                       damage: str) -> None:
    path = tree.write(f"x/{LOG}", b"one\n")
    tree.write("x/other.jsonl", b"fine\n")
    eng = engine(RAW)
    for line in (b"two\n", b"three\n"):
        assert eng.checkpoint().ok
        with path.open("ab") as f:
            f.write(line)
    assert eng.checkpoint().ok
    victim = chain_objects(tree)[1]
    if damage == "missing":
        victim.unlink()
    elif damage == "corrupt":
        victim.write_bytes(b"TWO\n")
    else:
        victim.write_bytes(b"tw")
    wipe_local(tree)
    config = tree.base / "x.toml"
    config.write_text('adapters = []\n[[adapter]]\nname = "x"\nlive = "x"\n'
                      'durable = "state/x"\nsegments = ["*.jsonl"]\n')
    proc = cli("--config", str(config), "restore", check=1)
    assert LOG in proc.stderr and "restore incomplete" in proc.stderr
    assert not (tree.local / "x" / LOG).exists()  # never a silently shorter file
    assert (tree.local / "x/other.jsonl").read_bytes() == b"fine\n"
    assert not list((tree.local / "x/sessions").iterdir())  # no temp file left
    export = cli("--config", str(config), "export", LOG, "--adapter", "x", check=1)
    assert export.stdout == ""


def test_idle_compaction_then_restore(tree: Tree, engine: EngineFactory) -> None:
    path = tree.write(f"x/{LOG}", b"a\n")
    eng = engine(RAW)
    for i in range(4):
        with path.open("ab") as f:
            f.write(b"line %d\n" % i)
        assert eng.checkpoint().ok
    assert len(entry(tree).extra["lens"]) == 4
    assert engine(RAW).checkpoint().files == 0  # recently changed: not idle yet
    later = os.stat(path).st_mtime_ns + segments.IDLE_NS + 10**9
    report = Engine(eng.config, clock=lambda: later).checkpoint()
    assert report.ok and report.files == 1
    assert entry(tree).extra["lens"] == [path.stat().st_size]
    assert len(chain_objects(tree)) == 5  # old chain kept for gc
    expected = path.read_bytes()
    wipe_local(tree)
    assert engine(RAW).restore().ok
    assert (tree.local / "x" / LOG).read_bytes() == expected


def test_long_chain_is_compacted(tree: Tree, engine: EngineFactory,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segments, "MAX_SEGMENTS", 3)
    path = tree.write(f"x/{LOG}", b"0\n")
    eng = engine(RAW)
    lens = []
    for i in range(1, 6):
        assert eng.checkpoint().ok
        lens.append(len(entry(tree).extra["lens"]))
        with path.open("ab") as f:
            f.write(b"%d\n" % i)
    assert lens == [1, 2, 3, 1, 2]
    assert eng.checkpoint().ok
    expected = path.read_bytes()
    wipe_local(tree)
    assert engine(RAW).restore().ok
    assert (tree.local / "x" / LOG).read_bytes() == expected


def test_final_checkpoint_publishes_partial_line_and_chain_continues_after_restore(
        tree: Tree, engine: EngineFactory, cli: CliRunner) -> None:
    tree.write(f"x/{LOG}", b"done\nhalf")
    eng = engine(RAW)
    assert eng.checkpoint().ok
    assert entry(tree).size == 5
    assert eng.checkpoint().files == 0  # partial line still waiting: nothing written
    report = eng.checkpoint(final=True)
    assert report.files == 1 and report.bytes == 4
    wipe_local(tree)
    assert engine(RAW).restore().ok
    restored = tree.local / "x" / LOG
    assert restored.read_bytes() == b"done\nhalf"
    with restored.open("ab") as f:
        f.write(b" more\n")
    eng2 = engine(RAW)
    assert eng2.checkpoint().ok
    assert entry(tree).extra["lens"] == [5, 4, 6]  # same chain, one new segment
    assert len(chain_objects(tree)) == 3
    out = tree.base / "out.jsonl"
    config = tree.base / "x.toml"
    config.write_text('adapters = []\n[[adapter]]\nname = "x"\nlive = "x"\n'
                      'durable = "state/x"\nsegments = ["*.jsonl"]\n')
    proc = cli("--config", str(config), "export", str(restored), check=0)
    assert proc.stdout == "done\nhalf more\n"
    cli("--config", str(config), "export", LOG, "-o", str(out), check=0)
    assert out.read_bytes() == b"done\nhalf more\n"
    cli("--config", str(config), "export", "nope.jsonl", check=2)


def test_chain_on_the_bucket_emulator(tree: Tree, engine: EngineFactory,
                                      bucket: BucketMount) -> None:
    path = tree.write(f"x/{LOG}", b"one\n")
    data = str(bucket.mountpoint)
    eng = engine(RAW, DATA_DIR=data)
    assert eng.checkpoint().ok
    with path.open("ab") as f:
        f.write(b"two\nthr")
    assert eng.checkpoint().ok
    assert eng.checkpoint(final=True).ok
    objects = sorted((bucket.backing / "state/x" / segments.SEG_DIR).rglob("*.seg"))
    assert [o.read_bytes() for o in objects] == [b"one\n", b"two\n", b"thr"]
    wipe_local(tree)
    assert engine(RAW, DATA_DIR=data).restore().ok
    assert (tree.local / "x" / LOG).read_bytes() == b"one\ntwo\nthr"
