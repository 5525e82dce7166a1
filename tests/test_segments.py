"""Append-only logs as segment chains: writer killed mid-line, non-append changes,
missing or corrupt segments, compaction, final checkpoint, export; appends that
publish one object and no manifest, and chains resolved from their listing."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from syncengine import Engine
from syncengine.checkpoint import segments
from syncengine.durable import chain, chainread, manifest
from syncengine.durable.manifest import load
from syncengine.errors import SourceError
from syncengine.local import chainstate
from tests.bucket_mount import BucketMount
from tests.conftest import CliRunner, EngineFactory, Tree

pytestmark = pytest.mark.s3

RAW: dict[str, Any] = {
    "adapters": [],
    "adapter": [{"name": "x", "live": "x", "durable": "state/x", "segments": ["*.jsonl"]}],
}
LOG = "sessions/rollout-1.jsonl"

WRITER = r"""
import sys
import time
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
    """The chain's objects in the bucket itself: tests damage them there, as a user could."""
    base = tree.raw / "state/x" / segments.SEG_DIR / f"{rel}.d"
    return sorted(base.rglob("*.seg")) if base.exists() else []


def entry(tree: Tree, rel: str = LOG) -> Any:
    return load(tree.store("state/x")).entries[rel]


def resolved_lens(tree: Tree, rel: str = LOG) -> list[int]:
    """The lengths of the chain's objects as restore resolves them (manifest + listing)."""
    durable = tree.store("state/x")
    return [p.length for p in chain.load(durable, entry(tree, rel)).pieces]


def chain_keys(tree: Tree, rel: str = LOG) -> list[str]:
    """The chain's objects as the store lists them (any durable kind, memory included)."""
    return sorted(i.key for i in tree.store("state/x").list(f"{segments.SEG_DIR}/{rel}.d"))


def manifest_objects(tree: Tree) -> list[str]:
    return [name for _, _, name in manifest.list_objects(tree.store("state/x"))]


def durable_files(tree: Tree) -> dict[str, bytes]:
    root = tree.raw / "state/x"
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and "staging" not in p.parts
    }


def wipe_local(tree: Tree) -> None:
    shutil.rmtree(tree.local)
    tree.local.mkdir()


def complete_lines(data: bytes) -> bytes:
    return data[: data.rfind(b"\n") + 1]


def test_killed_writer_restores_exactly_the_published_lines(
    tree: Tree, engine: EngineFactory
) -> None:
    live = tree.write(f"x/{LOG}", b"")
    eng = engine(RAW)
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(live)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
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
    assert len(manifest_objects(tree)) == 1  # the appends wrote no manifest object
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


@pytest.mark.memory
@pytest.mark.parametrize("kind", ["shrink", "rename", "rewrite"])
def test_non_append_change_starts_a_new_chain(tree: Tree, engine: EngineFactory, kind: str) -> None:
    path = tree.write(
        f"x/{LOG}", b"".join(b'{"line": %d, "text": "%s"}\n' % (i, b"y" * 40) for i in range(100))
    )
    eng = engine(RAW)
    assert eng.checkpoint().ok
    with path.open("ab") as f:
        f.write(b'{"line": "appended"}\n')
    assert eng.checkpoint().ok
    first_chain = entry(tree).extra["chain"]
    assert len(resolved_lens(tree)) == 2
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
def test_bad_segment_refuses_that_file(
    tree: Tree, engine: EngineFactory, cli: CliRunner, damage: str
) -> None:
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
    config.write_text(
        'adapters = []\n[[adapter]]\nname = "x"\nlive = "x"\n'
        'durable = "state/x"\nsegments = ["*.jsonl"]\n'
    )
    proc = cli("--config", str(config), "restore", check=1)
    assert LOG in proc.stderr and "restore incomplete" in proc.stderr
    assert not (tree.local / "x" / LOG).exists()  # never a silently shorter file
    assert (tree.local / "x/other.jsonl").read_bytes() == b"fine\n"
    sessions = tree.local / "x/sessions"
    assert not sessions.exists() or not list(sessions.iterdir())  # no temp file left
    export = cli("--config", str(config), "export", LOG, "--adapter", "x", check=1)
    assert export.stdout == ""


@pytest.mark.memory
def test_idle_compaction_then_restore(tree: Tree, engine: EngineFactory) -> None:
    path = tree.write(f"x/{LOG}", b"a\n")
    eng = engine(RAW)
    for i in range(4):
        with path.open("ab") as f:
            f.write(b"line %d\n" % i)
        assert eng.checkpoint().ok
    assert len(resolved_lens(tree)) == 4
    assert engine(RAW).checkpoint().files == 0  # recently changed: not idle yet
    later = os.stat(path).st_mtime_ns + chainstate.IDLE_NS + 10**9
    report = Engine(eng.config, stores=eng.stores, clock=lambda: later).checkpoint()
    assert report.ok and report.files == 1
    assert entry(tree).extra["lens"] == [path.stat().st_size]
    assert len(chain_keys(tree)) == 5  # old chain kept for gc
    expected = path.read_bytes()
    wipe_local(tree)
    assert engine(RAW).restore().ok
    assert (tree.local / "x" / LOG).read_bytes() == expected


@pytest.mark.memory
def test_long_chain_is_compacted(
    tree: Tree, engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(segments, "MAX_SEGMENTS", 3)
    path = tree.write(f"x/{LOG}", b"0\n")
    eng = engine(RAW)
    lens = []
    for i in range(1, 6):
        assert eng.checkpoint().ok
        lens.append(len(resolved_lens(tree)))
        with path.open("ab") as f:
            f.write(b"%d\n" % i)
    assert lens == [1, 2, 3, 1, 2]
    assert eng.checkpoint().ok
    expected = path.read_bytes()
    wipe_local(tree)
    assert engine(RAW).restore().ok
    assert (tree.local / "x" / LOG).read_bytes() == expected


@pytest.mark.rclone
def test_final_checkpoint_publishes_partial_line_and_chain_continues_after_restore(
    tree: Tree, engine: EngineFactory, cli: CliRunner
) -> None:
    tree.write(f"x/{LOG}", b"done\nhalf")
    eng = engine(RAW)
    assert eng.checkpoint().ok
    assert entry(tree).size == 5
    assert eng.checkpoint().files == 0  # partial line still waiting: nothing written
    report = eng.checkpoint(final=True)
    # the last 4 bytes as a segment, then (writers stopped) the whole log at its plain path
    assert report.files == 1 and report.adapters[0].plain_copies == 1
    assert report.bytes == 4 + 9
    assert (tree.raw / "state/x" / LOG).read_bytes() == b"done\nhalf"
    wipe_local(tree)
    assert engine(RAW).restore().ok
    restored = tree.local / "x" / LOG
    assert restored.read_bytes() == b"done\nhalf"
    with restored.open("ab") as f:
        f.write(b" more\n")
    eng2 = engine(RAW)
    assert eng2.checkpoint().ok
    assert entry(tree).extra["lens"] == [5, 4]  # the final checkpoint recorded the chain
    assert resolved_lens(tree) == [5, 4, 6]  # same chain, one new segment
    assert len(chain_objects(tree)) == 3
    out = tree.base / "out.jsonl"
    config = tree.base / "x.toml"
    config.write_text(
        'adapters = []\n[[adapter]]\nname = "x"\nlive = "x"\n'
        'durable = "state/x"\nsegments = ["*.jsonl"]\n'
    )
    proc = cli("--config", str(config), "export", str(restored), check=0)
    assert proc.stdout == "done\nhalf more\n"
    cli("--config", str(config), "export", LOG, "-o", str(out), check=0)
    assert out.read_bytes() == b"done\nhalf more\n"
    cli("--config", str(config), "export", "nope.jsonl", check=2)


def test_chain_on_the_bucket_emulator(
    tree: Tree, engine: EngineFactory, bucket: BucketMount
) -> None:
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


def _append(path: Path, data: bytes, mtime_ns: int | None = None) -> None:
    with path.open("ab") as f:
        f.write(data)
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))


def three_lines(tree: Tree, engine: EngineFactory) -> tuple[Path, Engine]:
    """A log of three objects ("one\n", "two\n", "three\n"); the manifest lists the first."""
    path = tree.write(f"x/{LOG}", b"one\n")
    eng = engine(RAW)
    for line in (b"two\n", b"three\n"):
        assert eng.checkpoint().ok
        _append(path, line)
    assert eng.checkpoint().ok
    return path, eng


@pytest.mark.rclone
def test_an_append_publishes_one_object_and_no_manifest(tree: Tree, engine: EngineFactory) -> None:
    path = tree.write(f"x/{LOG}", b'{"line": 0}\n' * 100)
    notes = tree.write("x/notes.txt", b"v1\n")
    eng = engine(RAW)
    assert eng.checkpoint().ok
    kb = b'{"event": "' + b"e" * 1010 + b'"}\n'
    assert len(kb) == 1024
    before, ops = durable_files(tree), tree.ops()
    _append(path, kb)
    report = eng.checkpoint()
    assert report.ok and report.adapters[0].manifest is None and report.bytes == 1024
    after = durable_files(tree)
    new = {k: v for k, v in after.items() if before.get(k) != v}
    assert list(new.values()) == [kb] and next(iter(new)).endswith(".seg")
    assert set(before) <= set(after)
    if tree.mount is not None:  # a periodic checkpoint never lists the durable tree
        done = {k: n - ops.get(k, 0) for k, n in tree.ops().items()}
        assert not done.get("readdir"), done
    # A manifest object written anyway (another file changed) records the chain...
    _append(path, kb)
    notes.write_bytes(b"v2\n")
    assert eng.checkpoint().adapters[0].manifest is not None
    assert entry(tree).extra["lens"] == resolved_lens(tree) == [1200, 1024, 1024]
    # ...and so does the final checkpoint, for appends no manifest lists yet.
    _append(path, kb)
    assert eng.checkpoint().adapters[0].manifest is None
    assert len(entry(tree).extra["lens"]) == 3 and len(resolved_lens(tree)) == 4
    final = eng.checkpoint(final=True)
    assert final.ok and final.adapters[0].manifest is not None
    assert final.files == 0 and final.adapters[0].plain_copies == 1, "the plain copy only"
    assert final.bytes == path.stat().st_size
    assert (tree.raw / "state/x" / LOG).read_bytes() == path.read_bytes()
    assert entry(tree).extra["lens"] == [1200] + [1024] * 3
    with tree.no_durable_ops():
        assert eng.checkpoint(final=True).adapters[0].manifest is None  # nothing left to record
    expected = path.read_bytes()
    wipe_local(tree)
    assert engine(RAW).restore().ok
    assert (tree.local / "x" / LOG).read_bytes() == expected


@pytest.mark.memory
def test_several_unrecorded_appends_restore_exactly_and_the_chain_continues(
    tree: Tree, engine: EngineFactory
) -> None:
    path = tree.write(f"x/{LOG}", b"base\n")
    eng = engine(RAW)
    for i in range(5):
        assert eng.checkpoint().ok
        _append(path, b"line %d\n" % i)
    assert eng.checkpoint().ok
    assert len(manifest_objects(tree)) == 1 and entry(tree).extra["lens"] == [5]
    expected = path.read_bytes()
    wipe_local(tree)
    report = engine(RAW).restore()
    assert report.ok and report.files == 1 and report.bytes == len(expected)
    restored = tree.local / "x" / LOG
    assert restored.read_bytes() == expected
    before = chain_keys(tree)
    _append(restored, b"after restore\n")
    eng = engine(RAW)
    report = eng.checkpoint()  # the index knows the whole chain: one segment, same chain
    assert report.ok and report.bytes == len(b"after restore\n")
    assert report.adapters[0].manifest is None
    assert len(chain_keys(tree)) == len(before) + 1
    assert eng.checkpoint(final=True).adapters[0].manifest is not None
    assert entry(tree).extra["lens"] == resolved_lens(tree) and len(resolved_lens(tree)) == 7


@pytest.mark.parametrize("damage", ["last-corrupt", "base-missing"])
def test_more_bad_segments_refuse_the_file(tree: Tree, engine: EngineFactory, damage: str) -> None:
    three_lines(tree, engine)
    objects = chain_objects(tree)
    if damage == "last-corrupt":  # same size, other bytes: its own hash says no
        objects[-1].write_bytes(b"THREE\n")
    else:
        objects[0].unlink()
    wipe_local(tree)
    report = engine(RAW).restore()
    assert not report.ok and [e.path for e in report.errors] == [LOG]
    assert "segment" in report.errors[0].reason
    assert not (tree.local / "x" / LOG).exists()


def test_torn_last_unrecorded_segment_is_left_out(
    tree: Tree, engine: EngineFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A mount without rename that commits a killed publish keeps a short last object."""
    three_lines(tree, engine)
    last = chain_objects(tree)[-1]
    last.write_bytes(b"thr")
    wipe_local(tree)
    report = engine(RAW).restore()
    assert report.ok, report.errors
    assert (tree.local / "x" / LOG).read_bytes() == b"one\ntwo\n"
    assert "segments.torn-ignored" in caplog.text
    durable = tree.store("state/x")
    with durable.batch():
        c = chain.load(durable, entry(tree))
        short_then_more = attrs.evolve(c, pieces=(*c.pieces, *c.pieces[-1:]))
        with pytest.raises(SourceError, match="corrupt"):  # not the last one: refused
            chainread.read(short_then_more, durable, None)


def test_duplicate_seq_of_a_killed_run_resolves_to_the_newest(
    tree: Tree, engine: EngineFactory
) -> None:
    t = time.time_ns() - 60 * 10**9  # recent: an idle chain would be compacted
    path = tree.write(f"x/{LOG}", b"base\n", mtime_ns=t)
    assert engine(RAW).checkpoint().ok
    index_path = engine(RAW).adapter_state(engine(RAW).config.adapter("x")).index_path
    saved = index_path.read_bytes()
    _append(path, b"published by a run killed before saving its index\n", t + 10**9)
    assert engine(RAW).checkpoint().ok
    index_path.write_bytes(saved)  # the killed run's index never happened
    _append(path, b"more\n", t + 2 * 10**9)
    assert engine(RAW).checkpoint().ok  # publishes seq 1 again, with more bytes
    names = [o.name[:8] for o in chain_objects(tree)]
    assert names == ["00000000", "00000001", "00000001"]
    expected = path.read_bytes()
    wipe_local(tree)
    assert engine(RAW).restore().ok
    assert (tree.local / "x" / LOG).read_bytes() == expected
    restored = tree.local / "x" / LOG
    _append(restored, b"continued\n", t + 3 * 10**9)
    assert engine(RAW).checkpoint().ok
    assert len(chain_objects(tree)) == 4
    expected = restored.read_bytes()
    wipe_local(tree)
    assert engine(RAW).restore().ok
    assert (tree.local / "x" / LOG).read_bytes() == expected


def test_resolve_prefers_the_branch_published_last_and_refuses_gaps() -> None:
    e = manifest.Entry("a.jsonl", "segments", 10, 5, extra={"chain": "c", "lens": [10]})
    d = chain.chain_dir("a.jsonl", "c")

    def piece(seq: int, start: int, end: int, mtime: int | None = 7) -> chain.Piece:
        name = (
            f"{seq:08d}-{start:012d}-{end:012d}.seg"
            if mtime is None
            else f"{seq:08d}-{start:012d}-{end:012d}-{0:016x}-{mtime}.seg"
        )
        p = chain.parse(d, name)
        assert p is not None
        return p

    base = piece(0, 0, 10, None)  # an old name, no hash
    old = [piece(1, 10, 20, 6), piece(2, 20, 30, 8)]  # a killed run's branch...
    new = [piece(1, 10, 25, 9)]  # ...and the one published after it, newer
    got = chain.resolve(e, [base, *old, *new])
    assert [p.end for p in got.pieces] == [10, 25] and got.recorded == 1
    assert got.size == 25 and got.mtime_ns == 9
    assert [p.end for p in chain.resolve(e, [base, *old]).pieces] == [10, 20, 30]
    with pytest.raises(SourceError, match=r"00000002-\.\.\.-000000000040 is missing"):
        chain.resolve(e, [base, *old, piece(3, 40, 50)])
    with pytest.raises(SourceError, match="00000000-000000000000-000000000010"):
        chain.resolve(e, old)
    assert chain.parse(d, "00000001-000000000010-000000000005.seg") is None  # end < start
    assert chain.parse(d, "notes.txt") is None


def test_old_names_still_restore(tree: Tree, engine: EngineFactory) -> None:
    path = tree.write(f"x/{LOG}", b"one\n")
    eng = engine(RAW)
    assert eng.checkpoint().ok
    _append(path, b"two\n")
    assert eng.checkpoint(final=True).ok
    for obj in chain_objects(tree):  # as a chain written before names carried hashes
        obj.rename(obj.with_name("-".join(obj.name.split("-")[:3]) + ".seg"))
    wipe_local(tree)
    assert engine(RAW).restore().ok
    assert (tree.local / "x" / LOG).read_bytes() == b"one\ntwo\n"


@pytest.mark.memory
def test_export_verify_and_gc_see_unrecorded_segments(tree: Tree, engine: EngineFactory) -> None:
    import io

    _, eng = three_lines(tree, engine)
    out = io.BytesIO()
    assert eng.export(LOG, out) == len(b"one\ntwo\nthree\n")
    assert out.getvalue() == b"one\ntwo\nthree\n"
    for sample in (0.0, 100.0):
        result = eng.verify(sample=sample).adapters[0]
        assert not result.problems and not result.unlisted, result
    later = eng.clock() + 30 * 86400 * 10**9
    gc = Engine(eng.config, stores=eng.stores, clock=lambda: later).gc(apply=True)
    assert gc.exit_code == 0 and gc.adapters[0].objects == 0
    assert len(chain_keys(tree)) == 3
    assert tree.store("state/x").delete(chain_keys(tree)[1])
    problems = eng.verify(sample=0.0).adapters[0].problems
    assert [p.path for p in problems] == [LOG] and "missing" in problems[0].what


@pytest.mark.memory
def test_hot_restart_compares_the_local_copy_with_the_chain(
    tree: Tree, engine: EngineFactory
) -> None:
    t = time.time_ns() - 60 * 10**9  # recent: an idle chain would be compacted
    path = tree.write(f"x/{LOG}", b"one\n", mtime_ns=t)
    assert engine(RAW).checkpoint().ok  # the manifest records t
    _append(path, b"two\n", t + 2 * 10**9)
    assert engine(RAW).checkpoint().ok  # recorded only by the segment's name
    report = engine(RAW).restore()  # the local copy is the chain's: unchanged, kept
    assert report.ok and report.adapters[0].unchanged == 1 and report.files == 0
    _append(path, b"three\n", t + 3 * 10**9)
    report = engine(RAW).checkpoint()  # and the index still continues the same chain
    assert report.bytes == len(b"three\n") and len(chain_keys(tree)) == 3
    # A stale local copy, newer than the manifest's record but older than the chain
    path.write_bytes(b"one\n")
    os.utime(path, ns=(t + 10**9, t + 10**9))
    report = engine(RAW).restore()
    assert report.ok and report.files == 1 and report.adapters[0].kept_local == 0
    assert path.read_bytes() == b"one\ntwo\nthree\n"
    assert path.stat().st_mtime_ns == t + 3 * 10**9


@pytest.mark.memory
def test_a_compacted_manifest_base_keeps_logs(
    tree: Tree, engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manifest, "COMPACT_AFTER", 1)
    tree.write(f"x/{LOG}", b"one\n")
    notes = tree.write("x/notes.txt", b"v1\n")
    eng = engine(RAW)
    for text in (b"v2\n", b"v3\n", b"v4\n"):
        assert eng.checkpoint().ok
        notes.write_bytes(text)
    assert eng.checkpoint().ok
    assert [n for n in manifest_objects(tree) if n.endswith("base.jsonl")][-1] != manifest_objects(
        tree
    )[0]
    wipe_local(tree)
    assert engine(RAW).restore().ok
    assert (tree.local / "x" / LOG).read_bytes() == b"one\n"


@pytest.mark.memory
def test_runner_stop_records_every_chain(tree: Tree, engine: EngineFactory) -> None:
    from syncengine import Runner

    path = tree.write(f"x/{LOG}", b"one\n")
    runner = Runner(engine(RAW), interval=3600, watch=False)
    runner.start()  # restore (nothing yet), then the first checkpoint on demand
    runner.checkpoint_now(timeout=30)
    _append(path, b"two\nhal")
    runner.checkpoint_now(timeout=30)  # an append: recorded only by the segment's name
    assert entry(tree).extra["lens"] == [4]
    final = runner.stop()
    assert final is not None and final.ok
    assert entry(tree).extra["lens"] == [4, 4, 3]  # the partial line too, after the writer
