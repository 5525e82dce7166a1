"""The durable `Store` contract, on both implementations, and the engine on an object store.

The first half holds `PosixStore` and `tests.memstore.MemoryStore` to the same
contract (syncengine/durable/store.py): a write is visible whole at commit or
not at all, put-if-absent never replaces, reads and listings return plain
values.  The second half runs checkpoint, restore, verify and an idle pass
against every durable kind, the in-memory object store included, and counts
what the object store was asked.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from syncengine.durable import manifest
from syncengine.durable.posix.store import PosixStore
from syncengine.durable.store import Store
from syncengine.errors import CommitRefused, NameTaken
from tests.conftest import EngineFactory, Tree
from tests.memstore import MemoryBucket

T = 1_700_000_000 * 10**9
RAW: dict[str, Any] = {
    "adapters": [],
    "adapter": [{"name": "x", "live": "x", "durable": "state/x", "segments": ["logs/*.jsonl"]}],
}


@pytest.fixture(params=["posix", "memory", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "posix":
        yield PosixStore(tmp_path)
    elif request.param == "s3":
        from syncengine.durable.s3.store import S3Store

        server = request.getfixturevalue("s3_server")
        yield S3Store(server.location(server.bucket(), "some/prefix"))
    else:
        yield MemoryBucket().store(tmp_path)


def _put(store: Store, key: str, data: bytes, mtime_ns: int = T, mode: int = 0o640) -> None:
    with store.writer(key, mode=mode, mtime_ns=mtime_ns) as out:
        out.write(data)
    assert out.object is None  # both replace in place: nothing to record instead


def test_a_write_is_visible_whole_at_commit_or_not_at_all(store: Store) -> None:
    _put(store, "a/b.txt", b"one")
    with pytest.raises(RuntimeError), store.writer("a/b.txt", mode=0o600, mtime_ns=T) as out:
        out.write(b"two, interrupted")
        raise RuntimeError("the source changed")
    assert store.read_bytes("a/b.txt") == b"one"
    with pytest.raises(RuntimeError), store.writer("a/c.txt", mode=0o600) as out:
        raise RuntimeError
    assert store.head("a/c.txt") is None
    assert [i.key for i in store.list()] == ["a/b.txt"]  # no temp object left in sight


def test_put_if_absent_never_replaces(store: Store) -> None:
    store.put_bytes(".syncengine/manifest/1.jsonl", b"first", if_absent=True)
    with pytest.raises(NameTaken):
        store.put_bytes(".syncengine/manifest/1.jsonl", b"second", if_absent=True)
    assert store.read_bytes(".syncengine/manifest/1.jsonl") == b"first"
    store.put_bytes("plain", b"x", if_absent=False)
    store.put_bytes("plain", b"y", if_absent=False)
    assert store.read_bytes("plain") == b"y"


def test_reads_and_listings_are_plain_values(store: Store) -> None:
    _put(store, "d/e/f.bin", bytes(range(10)), mtime_ns=T + 5)
    _put(store, "d/g.bin", b"g")
    _put(store, ".syncengine/segments/x.d/c/1.seg", b"s")
    info = store.head("d/e/f.bin")
    assert info is not None
    assert (info.key, info.size, info.mtime_ns, info.mode, info.kind) == (
        "d/e/f.bin",
        10,
        T + 5,
        0o640,
        "file",
    )
    assert store.read_range("d/e/f.bin", 3, 4) == bytes([3, 4, 5, 6])
    with store.open("d/e/f.bin") as obj:
        assert obj.info.size == 10
        obj.file.seek(8)
        assert obj.file.read() == bytes([8, 9])
    with pytest.raises(FileNotFoundError):
        store.read_bytes("d/missing")
    with pytest.raises(FileNotFoundError), store.open("d/missing"):
        pass
    assert store.head("d/missing") is None
    assert store.names("d") == ["e", "g.bin"]
    assert store.names("nowhere") == []
    assert sorted(i.key for i in store.list()) == ["d/e/f.bin", "d/g.bin"]  # no .syncengine/
    assert [i.key for i in store.list(".syncengine/segments")] == [
        ".syncengine/segments/x.d/c/1.seg"
    ]
    with store.batch():
        assert store.read_bytes("d/g.bin") == b"g"
    assert store.delete("d/g.bin") and not store.delete("d/g.bin")
    assert store.head("d/g.bin") is None


def test_the_first_write_runs_the_preparation_once(store: Store) -> None:
    calls: list[int] = []
    store.before_first_write(lambda: calls.append(1))
    assert store.head("a") is None and store.names("") == []  # reads prepare nothing
    _put(store, "a", b"1")
    _put(store, "b", b"2")
    assert calls == [1]
    assert store.confirm()


def test_an_s3_key_the_store_cannot_hold_is_that_path_s_error(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A name with a control character: refused for that path (the run goes on)."""
    from syncengine.durable.s3.store import S3Store

    server = request.getfixturevalue("s3_server")
    store = S3Store(server.location(server.bucket(), "p"))
    with (
        pytest.raises(CommitRefused, match="control character"),
        store.writer("odd\rname", mode=0o644) as out,
    ):
        out.write(b"x")
    _put(store, "fine name #1 ü.txt", b"y")
    assert [i.key for i in store.list()] == ["fine name #1 ü.txt"]


def test_a_posix_listing_reports_a_link_with_its_target(tmp_path: Path) -> None:
    """The old rsync layout kept symlinks in the durable tree: listed, never followed."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real/f").write_text("f")
    os.symlink("real", tmp_path / "link")
    listed = {i.key: (i.kind, i.target) for i in PosixStore(tmp_path).list()}
    assert listed == {"real/f": ("file", None), "link": ("link", "real")}


# -- the engine against every durable kind -------------------------------------


def _live(tree: Tree) -> None:
    tree.write("x/a.txt", "alpha\n", mode=0o600, mtime_ns=T)
    tree.write("x/sub/b.bin", os.urandom(3000), mtime_ns=T + 10**9)
    tree.write("x/logs/s.jsonl", '{"n": 1}\n{"n": 2}\n', mtime_ns=T)
    os.symlink("sub/b.bin", tree.local / "x/link")


def _tree(root: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path))
            else:
                st = path.stat()
                out[rel] = (path.read_bytes(), st.st_mode & 0o7777, st.st_mtime_ns)
    return out


@pytest.mark.memory
def test_checkpoint_then_restore_round_trips(tree: Tree, engine: EngineFactory) -> None:
    _live(tree)
    assert engine(RAW).checkpoint().ok
    before = _tree(tree.local / "x")
    shutil.rmtree(tree.local)
    gets = tree.memory.gets if tree.memory is not None else 0
    report = engine(RAW).restore()
    assert report.ok, report.errors
    assert _tree(tree.local / "x") == before
    if tree.memory is not None:  # each manifest object and each file object read once
        objects = len(manifest.list_objects(tree.store("state/x")))
        # two files; a log: its chain, plain; the lease (one read: the restore waits for it)
        assert tree.memory.gets - gets == objects + 2 + 2 + 1


@pytest.mark.memory
def test_an_idle_checkpoint_asks_the_store_nothing(tree: Tree, engine: EngineFactory) -> None:
    _live(tree)
    eng = engine(RAW)
    assert eng.checkpoint().ok
    assert eng.checkpoint().ok
    with tree.no_durable_ops():
        report = eng.checkpoint()
    assert report.ok and report.files == 0


@pytest.mark.memory
def test_verify_names_a_missing_and_a_changed_object(tree: Tree, engine: EngineFactory) -> None:
    _live(tree)
    assert engine(RAW).checkpoint().ok
    assert engine(RAW).verify(sample=100.0).ok
    durable = tree.store("state/x")
    entries = manifest.load(durable).entries
    assert durable.delete(entries["a.txt"].location)
    b = entries["sub/b.bin"]
    with durable.writer(b.location, mode=0o644, mtime_ns=b.mtime_ns) as out:
        out.write(b"\0" * b.size)  # same size and mtime: only the content differs
    report = engine(RAW).verify(sample=100.0)
    problems = {p.path: p.what for a in report.adapters for p in a.problems}
    assert not report.ok
    assert "missing" in problems["a.txt"]
    assert "sub/b.bin" in problems and "a.txt" in problems and len(problems) == 2


def _manifest(store: Store, rows: list[dict[str, object]]) -> None:
    lines = [
        json.dumps(
            {"syncengine_manifest": 1, "adapter": "x", "seq": 1, "type": "base", "created_ns": 1}
        ),
        *map(json.dumps, rows),
        json.dumps({"end": len(rows)}),
    ]
    store.put_bytes(
        ".syncengine/manifest/000000000001.base.jsonl",
        ("\n".join(lines) + "\n").encode(),
        if_absent=True,
    )


@pytest.mark.memory
def test_restore_from_a_hostile_manifest_stays_in_the_live_tree(
    tree: Tree, engine: EngineFactory
) -> None:
    """Whatever names the durable side holds, restore writes only below the live root, and
    a missing object fails that path only."""
    outside = tree.base / "outside"
    outside.mkdir()
    durable = tree.store("state/x")
    _put(durable, "sub/ok.json", b"ok")
    _put(durable, "payload", b"evil")
    file: dict[str, object] = {"kind": "file", "size": 4, "mtime_ns": 1, "mode": 0o644}
    _manifest(
        durable,
        [
            {**file, "path": "../escape", "object": "payload"},
            {**file, "path": "/abs/escape", "object": "payload"},
            {"path": "link", "kind": "symlink", "mtime_ns": 1, "target": str(outside)},
            {**file, "path": "link/escape", "object": "payload"},
            {**file, "path": "steal", "object": "../../../../etc/passwd"},
            {**file, "path": "gone.json"},
            {**file, "path": "sub/ok.json", "size": 2},
        ],
    )
    report = engine(RAW).restore()
    failed = {e.path: e.reason for e in report.errors}
    assert set(failed) == {"../escape", "/abs/escape", "link/escape", "steal", "gone.json"}
    assert "missing on the durable side" in failed["gone.json"]
    assert list(outside.iterdir()) == [] and not (tree.base / "escape").exists()
    assert (tree.local / "x/link").is_symlink()
    assert (tree.local / "x/sub/ok.json").read_bytes() == b"ok"
    assert not (tree.local / "x/steal").exists()
