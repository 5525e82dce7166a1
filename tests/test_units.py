"""Unit-level properties: exclusion patterns, index round trip, manifest, restore rule."""

from __future__ import annotations

import marshal
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncengine.durable.manifest import Entry, decode, encode
from syncengine.fs.safepath import UnsafePath, check_relpath
from syncengine.local.index import DIRTY, Index
from syncengine.patterns import compile_patterns
from syncengine.plan import Fetch, KeepLocal, LocalState, MakeDir, plan_restore_entry
from syncengine.walk import forked


@pytest.mark.parametrize(
    ("path", "is_dir", "excluded"),
    [
        ("x.sqlite", False, True),
        ("deep/y.sqlite-wal", False, True),
        ("cache", True, True),
        ("a/cache", True, True),
        ("a/cache.json", False, False),
        ("p.lock", True, True),
        ("p.lock", False, False),
        ("top.txt", False, True),
        ("s/top.txt", False, False),
        ("a/b.json", False, True),
        ("a/x/y/b.json", False, True),
    ],
)
def test_gitignore_style_patterns(path: str, is_dir: bool, excluded: bool) -> None:
    m = compile_patterns(["*.sqlite*", "cache", "*.lock/", "/top.txt", "a/**/b.json"])
    assert m.excluded(path, is_dir) is excluded


paths = st.lists(
    st.text(
        st.characters(blacklist_characters="/\0", min_codepoint=32), min_size=1, max_size=12
    ).filter(lambda s: s not in (".", "..")),
    min_size=1,
    max_size=4,
).map("/".join)
ints = st.integers(min_value=0, max_value=2**62)


@settings(max_examples=200)
@given(
    st.dictionaries(
        paths,
        st.tuples(ints, ints, ints, st.integers(0, 2**64 - 1), st.integers(0, 0o7777)),
        max_size=30,
    )
)
def test_index_round_trip(records: dict[str, tuple[int, int, int, int, int]]) -> None:
    idx = Index()
    for p, (size, mtime, ctime, h, mode) in records.items():
        idx.record(p, size=size, mtime_ns=mtime, ctime_ns=ctime, hash64=h, mode=mode)
    idx.record("bad\udcff name", size=1, mtime_ns=2, ctime_ns=3, hash64=4, mode=0o644)
    idx.mark_absent("bad\udcff name")
    records.pop("bad\udcff name", None)
    idx.meta["manifest_seq"] = 7
    packed = Index.loads(idx.dumps())  # saved again without being unpacked
    assert len(packed) == len(idx) and packed.present_count() == len(idx) - 1
    assert packed.packed() == (list(idx.records), b"".join(idx.records.values()))
    back = Index.loads(packed.dumps())
    assert list(back.records.items()) == list(idx.records.items())  # the same order
    assert back.meta == {"manifest_seq": 7} and back.absent == 1
    for p, (size, mtime, ctime, h, mode) in records.items():
        rec = back.get(p)
        assert rec is not None
        assert (rec.size, rec.mtime_ns, rec.ctime_ns, rec.hash64, rec.mode) == (
            size,
            mtime,
            ctime,
            h,
            mode,
        )
        assert back.unchanged(p, size, mtime, ctime)
        back.mark_dirty(p)
        assert not back.unchanged(p, size, mtime, ctime)
        assert back.get(p).ctime_ns == DIRTY  # type: ignore[union-attr]


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["dir", "absent", "file", "forget"]),
            st.sampled_from(["a", "a/b", "c", "c/d/e", "bad\udcff name"]),
            st.integers(0, 0o7777),
        ),
        max_size=40,
    )
)
def test_index_directory_records_round_trip(steps: list[tuple[str, str, int]]) -> None:
    """Directory records survive a save, count their absences, and never share a path
    with a file's record (a file recorded at a directory's path replaces it)."""
    idx = Index()
    for op, path, mode in steps:
        if op == "dir":
            assert idx.record_dir(path, mode) == (path not in idx.records)
        elif op == "absent":
            idx.mark_absent(path, 1)
        elif op == "file":
            idx.record(path, size=1, mtime_ns=1, ctime_ns=1, hash64=1, mode=0o644)
        else:
            idx.forget(path)
        assert not idx.dirs.keys() & idx.records.keys()
        assert idx.dirs_absent == sum(1 for _, _, n in idx.dir_items() if n)
    packed = Index.loads(idx.dumps())  # saved again without being unpacked
    assert packed.dir_count() == len(idx.dirs)
    back = Index.loads(packed.dumps())
    assert back.dirs == idx.dirs and back.dirs_absent == idx.dirs_absent
    assert Index.loads(Index().dumps()).dirs == {}


@given(st.integers(0, 0o7777), st.integers(0, 0o7777), st.integers(0, 10**12))
def test_an_existing_local_directory_keeps_its_mode(
    local_mode: int, durable_mode: int, mtime: int
) -> None:
    """Invariant 5 for directories: nothing tells which mode is newer, so an existing
    directory is never changed; only a missing one is made."""
    entry = Entry("d", "dir", mode=durable_mode)
    kept = plan_restore_entry(
        entry,
        LocalState("dir", 4096, mtime, local_mode),
        unsafe=None,
        known_kinds=frozenset({"dir"}),
    )
    assert isinstance(kept, KeepLocal)
    made = plan_restore_entry(entry, None, unsafe=None, known_kinds=frozenset({"dir"}))
    assert isinstance(made, MakeDir) and made.deferred == (durable_mode & 0o700 != 0o700)


def test_an_index_saved_by_an_older_version_still_loads(tmp_path: Path) -> None:
    """SYNCIDX1 (the records as one marshalled dict, and before directories were
    recorded no "dirs"): read as it was written; saved again, it is SYNCIDX2."""
    new = Index()
    new.record("a/b", size=1, mtime_ns=2, ctime_ns=3, hash64=4, mode=0o644)
    new.record("c", size=5, mtime_ns=6, ctime_ns=7, hash64=8, mode=0o600)
    payload = {"records": new.records, "links": {}, "extras": {}, "meta": {}, "absent": 0}
    (tmp_path / "x.idx").write_bytes(b"SYNCIDX1" + marshal.dumps(payload))
    old = Index.load(tmp_path / "x.idx")
    assert old is not None and old.records == new.records and old.dirs == {}
    old.save(tmp_path / "x.idx")
    assert (tmp_path / "x.idx").read_bytes().startswith(b"SYNCIDX2")
    again = Index.load(tmp_path / "x.idx")
    assert again is not None and again.packed() == new.packed()


def test_corrupt_index_is_treated_as_missing(tmp_path: object) -> None:
    from pathlib import Path

    p = Path(str(tmp_path)) / "x.idx"
    p.write_bytes(b"SYNCIDX1garbage")
    assert Index.load(p) is None


def test_manifest_round_trip_and_truncation_detected() -> None:
    entries = [
        Entry("a", "file", 3, 5, 0o600, 0xABC),
        Entry("l", "symlink", mtime_ns=9, target="/etc/passwd"),
        Entry("db", "sqlite", 10, 11, 0o644, 1, object="checkpoints/db", extra={"wal": [1, 2]}),
        Entry("empty/dir", "dir", mode=0o700),
    ]
    data = encode("codex", 1, "base", entries, created_ns=1)
    header, back = decode(data)
    assert header["seq"] == 1 and back == entries
    assert back[2].extra == {"wal": [1, 2]}  # unknown fields survive
    with pytest.raises(ValueError, match="truncated"):
        decode(data[: len(data) // 2].rsplit(b"\n", 1)[0] + b"\n")


@given(st.integers(0, 10**12), st.integers(0, 10**12), st.integers(0, 100), st.integers(0, 100))
def test_newer_local_file_is_never_overwritten(
    local_mtime: int, durable_mtime: int, local_size: int, durable_size: int
) -> None:
    action = plan_restore_entry(
        Entry("p", "file", durable_size, durable_mtime),
        LocalState("file", local_size, local_mtime),
        unsafe=None,
    )
    if local_mtime >= durable_mtime:
        assert isinstance(action, KeepLocal)
    else:
        assert isinstance(action, Fetch)


@pytest.mark.parametrize("bad", ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a\0b"])
def test_unsafe_relative_paths_are_refused(bad: str) -> None:
    with pytest.raises(UnsafePath):
        check_relpath(bad)


def test_scan_split_follows_the_index_so_one_deep_subtree_cannot_starve_a_worker(
    tmp_path: object,
) -> None:
    """The frontier is split where the index says the files are, then bin-packed."""
    from pathlib import Path

    from syncengine.walk.job import ScanJob, ScanResult
    from syncengine.walk.listing import _balance, _pack, walk_listing

    root = Path(str(tmp_path))
    for i in range(3):  # three small siblings ...
        (root / f"small{i}").mkdir()
        (root / f"small{i}/f").write_text("x")
    deep = root / "big/storage/part"  # ... and one subtree with nearly all the files
    records = {}
    for i in range(200):
        d = deep / f"m{i}"
        d.mkdir(parents=True)
        (d / "p.json").write_text("{}")
        records[f"big/storage/part/m{i}/p.json"] = b""
    job = ScanJob("t", str(root), compile_patterns([]), records)
    out = ScanResult()
    frontier = walk_listing(job, "", out, limit=1)  # the root's subdirectories only
    balanced = _balance(job, frontier, out, workers=2)
    assert len(balanced) > 100  # the deep directory was split down to its members
    shares = _pack([(w, 0, d) for w, d in balanced], 2)
    sizes = [sum(1 for _, d in s if d.startswith("big/")) for s in shares]
    assert abs(sizes[0] - sizes[1]) <= 1


def test_fork_map_runs_shares_in_children_and_reports_a_failed_child() -> None:
    parent = os.getpid()

    def work(share: list[int]) -> tuple[int, int]:
        if share == [2] and os.getpid() != parent:
            os._exit(3)  # this child dies: its share comes back as None
        return os.getpid(), sum(share)

    results = forked.fork_map([[1, 10], [2], [3, 4]], work)
    assert results[0] == (parent, 11)  # the first share runs in the caller
    assert results[1] is None
    assert results[2] is not None and results[2][1] == 7 and results[2][0] != parent


def test_forked_restore_redoes_the_share_of_a_child_killed_mid_way() -> None:
    """A worker process SIGKILLed in the middle of its share: the parent copies that share
    itself, so every action still gets exactly one outcome, in order."""
    import signal

    from syncengine.restore import parallel

    parent = os.getpid()
    actions = [Fetch(Entry(f"d/f{i}", size=10), "missing") for i in range(6)]

    def one(action: Fetch) -> tuple[Entry, os.stat_result, int]:
        if os.getpid() != parent and action.entry.path == "d/f4":
            os.kill(os.getpid(), signal.SIGKILL)  # the child dies after doing d/f3
        return action.entry, os.stat("/"), int(action.entry.path[-1])

    out = list(parallel.execute_forked(actions, one, 2))  # type: ignore[arg-type]
    assert [a.entry.path for a, _ in out] == [a.entry.path for a in actions]
    assert [r[2] for _, r in out] == list(range(6))  # type: ignore[index]


def test_the_listing_walk_and_the_table_walk_do_not_import_each_other() -> None:
    """One dispatcher (walk/scan.py) chooses the walk; each walk stands alone."""
    import ast
    from pathlib import Path

    import syncengine.walk

    folder = Path(syncengine.walk.__file__).parent

    def imported(name: str) -> set[str]:
        tree = ast.parse((folder / f"{name}.py").read_text())
        out = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                out.add(node.module)
                out.update(f"{node.module}.{a.name}" for a in node.names)
        return out

    assert not {"syncengine.walk.tablewalk", "syncengine.walk.scan"} & imported("listing")
    assert not {"syncengine.walk.listing", "syncengine.walk.scan"} & imported("tablewalk")
    assert {"syncengine.walk.listing", "syncengine.walk.tablewalk"} <= imported("scan")
