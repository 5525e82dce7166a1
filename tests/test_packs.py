"""Packs: gc packs small files that stopped changing; a restore reads them in a few requests.

The packing and the reading are the same code on every store kind, so one test runs on
all of them (requests counted on the in-memory store and the S3 server); the fallback,
verify and collection tests run on a plain directory.
"""

from __future__ import annotations

import logging
import shutil
import time

import pytest

from syncengine import Engine, Runner, config_from_dict
from syncengine.crypt import keys
from syncengine.durable import packs
from syncengine.durable.store import Store
from syncengine.ops import gc
from tests.conftest import Tree
from tests.helpers import files

N = 60  # small files: two packs of 64 KiB
DAY = 86400 * 10**9
RAW = {
    "adapters": [],
    "adapter": [{"name": "x", "live": "x", "durable": "state/x"}],
    "gc": {
        "pack_after_seconds": 600,
        "pack_min_files": 40,
        "pack_bytes": 65536,
        "pack_max_file_bytes": 8192,
        "grace_seconds": 86400,
    },
}
WHY = "packing and reading packs are store-independent: test_gc_packs_... runs on every kind"


class Clock:
    def __init__(self) -> None:
        self.now = time.time_ns() + 3600 * 10**9  # the files are an hour old to gc

    def __call__(self) -> int:
        return self.now


def _engine(tree: Tree, clock: Clock) -> Engine:
    return Engine(config_from_dict(RAW, env=tree.env()), clock=clock, stores=tree.stores)


def _populate(tree: Tree, tag: str = "") -> None:
    for i in range(N):
        tree.write(f"x/d{i % 3}/f{i:03}.txt", f"{tag}file {i}\n" * (150 + i))
    tree.write("x/big.bin", b"B" * 20000)  # over pack_max_file_bytes: stays plain


def _packed(store: Store) -> dict[str, set[str]]:
    return packs.names(store)


def _restore_fresh(tree: Tree, clock: Clock) -> None:
    shutil.rmtree(tree.local)
    rep = _engine(tree, clock).restore()
    assert rep.ok, rep


@pytest.mark.memory
def test_gc_packs_small_files_and_a_restore_reads_them_in_a_few_requests(tree: Tree) -> None:
    clock = Clock()
    _populate(tree)
    assert _engine(tree, clock).checkpoint().ok
    rep = _engine(tree, clock).gc(apply=True)
    text = "\n".join(rep.lines())
    assert rep.ok and text.count("small file(s)") == 2, text
    store = tree.store("state/x")
    listed = _packed(store)
    assert len(listed) == 2 and all(k == {"pack", "index"} for k in listed.values())
    assert store.head("d0/f000.txt") is not None, "the plain objects stay"
    tree.write("x/d0/f000.txt", "changed since it was packed\n")
    assert _engine(tree, clock).checkpoint().ok
    want = files(tree.local / "x")
    count = _requests(tree)
    _restore_fresh(tree, clock)
    assert files(tree.local / "x") == want
    if count is not None:  # a plain restore makes one GET per file (N + 1 here)
        used = _requests(tree) - count  # type: ignore[operator]
        assert used <= N // 3, f"{used} requests for {N + 1} files"


@pytest.mark.memory
def test_runs_background_restore_reads_packed_files_in_a_few_requests(tree: Tree) -> None:
    """`run` brings most files back after COMMAND starts: a packed root must stay a few
    requests there too (each batch read every file plain before)."""
    clock = Clock()
    _populate(tree)
    assert _engine(tree, clock).checkpoint().ok
    assert _engine(tree, clock).gc(apply=True).ok
    want = files(tree.local / "x")
    shutil.rmtree(tree.local / "x")
    shutil.rmtree(tree.state)  # a fresh container
    count = _requests(tree)
    raw = {**RAW, "adapter": [{**RAW["adapter"][0], "restore_first": ["/big.bin"]}]}  # type: ignore[index]
    eng = Engine(config_from_dict(raw, env=tree.env()), clock=clock, stores=tree.stores)
    with Runner(eng, watch=False) as runner:
        assert runner.background is not None and runner.background.wait(60)
        assert runner.background.status()["state"] == "done", runner.background.status()
        used = None if count is None else _requests(tree) - count  # type: ignore[operator]
    assert files(tree.local / "x") == want
    if used is not None:  # plain: one GET per file (N + 1 here)
        assert used <= N // 3, f"{used} requests for {N + 1} files"


def _requests(tree: Tree) -> int | None:
    """GET-like requests so far (the in-memory store and the S3 server count them)."""
    if tree.memory is not None:
        return tree.memory.gets
    if tree.s3 is not None:
        return sum(1 for r in tree.s3_requests() if r[0] in ("GET", "HEAD"))
    return None


@pytest.mark.dir_only(WHY)
def test_a_damaged_or_missing_pack_falls_back_and_verify_reports_it(
    tree: Tree, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    _populate(tree)
    assert _engine(tree, clock).checkpoint().ok
    assert _engine(tree, clock).gc(apply=True).ok
    assert _engine(tree, clock).verify(sample=100).ok
    store = tree.store("state/x")
    first, second = sorted(_packed(store))
    key = packs.pack_key(first)
    data = bytearray(store.read_bytes(key))
    data[100:110] = b"XXXXXXXXXX"
    with store.writer(key, mode=0o600) as out:
        out.write(bytes(data))
    rep = _engine(tree, clock).verify(sample=100)
    assert not rep.ok and any(key in str(p) for p in rep.adapters[0].problems)
    store.delete(packs.pack_key(second))
    want = files(tree.local / "x")
    with caplog.at_level(logging.WARNING, logger="syncengine"):
        _restore_fresh(tree, clock)
    assert files(tree.local / "x") == want
    assert "restore.pack-mismatch" in caplog.text


@pytest.mark.dir_only(WHY)
def test_gc_collects_unreferenced_and_indexless_packs_after_the_grace(tree: Tree) -> None:
    clock = Clock()
    _populate(tree)
    assert _engine(tree, clock).checkpoint().ok
    assert _engine(tree, clock).gc(apply=True).ok
    store = tree.store("state/x")
    old = set(_packed(store))
    with store.writer(packs.pack_key("killed"), mode=0o600) as out:  # a killed gc's pack
        out.write(b"no index")
    _populate(tree, tag="v2 ")  # every packed file changes: the old packs serve nothing
    clock.now += 3600 * 10**9
    assert _engine(tree, clock).checkpoint().ok
    first = _engine(tree, clock).gc(apply=True)
    assert first.ok and first.adapters[0].objects == 0, "within the grace: kept"
    new = set(_packed(store)) - old - {"killed"}
    assert len(new) == 2, "the new versions are packed again"
    clock.now += 2 * DAY
    done = _engine(tree, clock).gc(apply=True)
    assert done.ok and done.adapters[0].objects == 5, done.lines()
    assert set(_packed(store)) == new
    want = files(tree.local / "x")
    _restore_fresh(tree, clock)
    assert files(tree.local / "x") == want


@pytest.mark.dir_only(WHY)
def test_only_files_old_enough_that_may_pack_allows_are_packed(tree: Tree) -> None:
    clock = Clock()
    _populate(tree)
    eng = _engine(tree, clock)
    assert eng.checkpoint().ok
    cfg = eng.config

    def run(may_pack: object = lambda _p: True) -> gc.GcReport:
        return gc.run(
            cfg.select(None),
            eng.adapter_state,
            cfg.gc,
            cfg.state_dir,
            clock=clock,
            apply=True,
            may_pack=may_pack,  # type: ignore[arg-type]
        )

    young = Clock()
    young.now -= 3600 * 10**9  # the files are 0 s old: not yet
    assert "small file(s)" not in "\n".join(
        gc.run(
            cfg.select(None), eng.adapter_state, cfg.gc, cfg.state_dir, clock=young, apply=True
        ).lines()
    )
    assert "small file(s)" not in "\n".join(run(lambda p: p.startswith("d0/")).lines()), (
        "20 files allowed: fewer than pack_min_files"
    )
    assert run(lambda p: not p.startswith("d1/")).ok
    store = tree.store("state/x")
    (pack_id,) = _packed(store)
    index = packs.decode_index(pack_id, store.read_bytes(packs.index_key(pack_id)))
    paths = {r.path for r in index.records}
    assert len(paths) == 40 and not any(p.startswith("d1/") for p in paths)
    assert "big.bin" not in paths


@pytest.mark.dir_only(WHY)
@pytest.mark.parametrize("key", [True, False], ids=["sealed", "plain"])
def test_secret_files_never_go_into_a_pack(tree: Tree, key: bool) -> None:
    """A secret file (the adapter's ``secrets``), sealed with a key or still plain
    without one, is never copied into a pack: a pack mixes files and its index names
    them; the rest is packed as usual."""
    clock = Clock()
    _populate(tree)
    token = "sk-live-PACKED-TOKEN-91ab"
    for i in range(45):  # enough secret files alone to fill a pack
        tree.write(f"x/creds/s{i:02}.json", f'{{"token": "{token}"}}\n', mode=0o600)
    raw = {**RAW, "adapter": [{**RAW["adapter"][0], "secrets": ["creds/**"]}]}  # type: ignore[dict-item]
    env = tree.env(SYNCENGINE_KEY=keys.generate()) if key else tree.env()

    def eng() -> Engine:
        return Engine(config_from_dict(raw, env=env), clock=clock, stores=tree.stores)

    assert eng().checkpoint().ok
    assert eng().gc(apply=True).ok
    store = tree.store("state/x")
    listed = _packed(store)
    assert listed, "the other small files are packed"
    for pack_id in listed:
        assert token.encode() not in store.read_bytes(packs.pack_key(pack_id))
        index = packs.decode_index(pack_id, store.read_bytes(packs.index_key(pack_id)))
        assert not any(r.path.startswith("creds/") for r in index.records)
    want = files(tree.local / "x")
    shutil.rmtree(tree.local)
    assert eng().restore().ok
    assert files(tree.local / "x") == want


def test_layout_of_an_index() -> None:
    """The index round-trips and a cut one is refused."""
    recs = [packs.Record("a/b", 0, 3, 0o644, 5, 7), packs.Record("c", 3, 2, 0o600, 6, 8)]
    data = packs.encode_index("p1", 5, recs, 1)
    assert packs.decode_index("p1", data).records == tuple(recs)
    for cut in (data[:-3], data.rsplit(b"\n", 2)[0]):
        with pytest.raises(ValueError):
            packs.decode_index("p1", cut)
