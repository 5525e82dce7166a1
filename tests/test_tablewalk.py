"""The directory table: an idle walk lists no directory, and never misses a change.

The engine here runs with a clock 10 s ahead, so the directories the tests
just created are outside the timestamp-granularity window and their
signatures are trusted (with the real clock they would be listed again until
they are 2 s old, which is the rule that keeps a same-tick change visible).
"""

from __future__ import annotations

import marshal
import os
import random
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import xxhash

from syncengine import Engine
from syncengine.durable import manifest
from syncengine.local import dirtable, indexfile
from syncengine.local.index import Index, file_signature
from syncengine.walk import tablewalk
from syncengine.walk.job import ScanResult
from syncengine.walk.missing import find_missing, missing_among, missing_dirs
from syncengine.walk.scan import scan
from tests.conftest import EngineFactory, Tree
from tests.helpers import dir_modes, files

pytestmark = pytest.mark.s3

pytestmark = pytest.mark.dir_only(
    "the directory table is local state; the durable side is "
    "exercised by every other checkpoint test"
)

RAW = {
    "adapters": [],
    "adapter": [{"name": "t", "live": "t", "durable": "state/t", "exclude": ["*.tmp", "cache/"]}],
}
AHEAD_NS = 10 * 10**9


@pytest.fixture
def ahead(engine: EngineFactory) -> Engine:
    """The adapter `t`, walked in this process (no fork), with its clock 10 s ahead."""
    return Engine(engine(RAW).config, clock=lambda: time.time_ns() + AHEAD_NS, scan_workers=1)


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every directory the walk lists (os.scandir still runs: this only records)."""
    seen: list[Any] = []
    real = os.scandir

    def spy(path: Any = ".") -> Any:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(os, "scandir", spy)
    yield seen


def _live(tree: Tree) -> Path:
    return tree.local / "t"


def _durable(tree: Tree) -> dict[str, bytes]:
    return files(tree.durable / "state" / "t")


def _expected(tree: Tree) -> dict[str, bytes]:
    """What the durable tree must hold for every regular live file (not excluded)."""
    out = {}
    root = _live(tree)
    for dirpath, dirnames, names in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if d != "cache"]
        for name in names:
            path = Path(dirpath) / name
            if name.endswith(".tmp") or not stat.S_ISREG(path.lstat().st_mode):
                continue
            out[os.path.normpath(f"{rel_dir}/{name}")] = path.read_bytes()
    return out


def _write(path: Path, data: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data)


def _seed(tree: Tree) -> None:
    live = _live(tree)
    for d in ("a/b/c", "a/d", "e", "f/g/h/i"):
        for k in range(3):
            _write(live / d / f"f{k}.jsonl", f"{d} {k}\n")
    _write(live / "cache" / "x", "excluded dir\n")
    _write(live / "a" / "scratch.tmp", "excluded file\n")
    (live / "empty").mkdir()


def test_an_idle_pass_lists_no_directory(tree: Tree, ahead: Engine, listings: list[Any]) -> None:
    _seed(tree)
    ahead.checkpoint()  # first pass: lists everything and builds the table
    assert tablewalk.table_path(tree.state / "index" / "t.idx").exists()
    listings.clear()
    report = ahead.checkpoint()
    assert listings == [], "an idle pass listed directories"
    assert report.adapters[0].files == 0
    # A new file in a directory that holds no indexed file, and one in a new
    # nested directory: only the directories whose signature moved are listed.
    _write(_live(tree) / "empty" / "new.jsonl", "found\n")
    _write(_live(tree) / "a" / "b" / "c" / "n1" / "n2" / "deep.jsonl", "deep\n")
    listings.clear()
    ahead.checkpoint()
    assert len(listings) == 4  # empty/, a/b/c/, and the two new directories
    assert _durable(tree) == _expected(tree)


def test_a_directory_replaced_by_a_symlink_is_never_followed(
    tree: Tree, ahead: Engine, tmp_path: Path
) -> None:
    _seed(tree)
    ahead.checkpoint()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f0.jsonl").write_text("secret from outside the tree\n")
    shutil.rmtree(_live(tree) / "a" / "d")
    (_live(tree) / "a" / "d").symlink_to(outside)
    ahead.checkpoint()
    index = Index.load(tree.state / "index" / "t.idx")
    assert index is not None
    rec = index.get("a/d/f0.jsonl")
    assert rec is not None and rec.absent == 1  # missing in the tree, not read via the link
    assert index.get("a/d") is not None and index.get("a/d").kind == "symlink"  # type: ignore[union-attr]
    assert _durable(tree)["a/d/f0.jsonl"] == b"a/d 0\n"  # the old copy, not the outside file


def test_changed_exclusions_make_the_table_stale(tree: Tree, engine: EngineFactory) -> None:
    _seed(tree)
    clock = lambda: time.time_ns() + AHEAD_NS  # noqa: E731
    Engine(engine(RAW).config, clock=clock, scan_workers=1).checkpoint()
    raw = {"adapters": [], "adapter": [dict(RAW["adapter"][0], exclude=["*.tmp", "cache/", "e/"])]}
    narrower = Engine(engine(raw).config, clock=clock, scan_workers=1)
    _write(_live(tree) / "e" / "f0.jsonl", "changed after e/ was excluded\n")
    narrower.checkpoint()
    assert _durable(tree)["e/f0.jsonl"] == b"e 0\n"  # an excluded path is not published
    # e/ still holds indexed paths, so the table keeps its signature; a file
    # created there moves it, and the directory is still never listed.
    _write(_live(tree) / "e" / "new.jsonl", "in an excluded directory\n")
    narrower.checkpoint()
    assert "e/new.jsonl" not in _durable(tree)


def test_a_torn_or_foreign_table_is_ignored(tree: Tree, ahead: Engine, listings: list[Any]) -> None:
    _seed(tree)
    ahead.checkpoint()
    idx = tree.state / "index" / "t.idx"
    table = tablewalk.table_path(idx)
    table.write_bytes(table.read_bytes()[:-5])  # torn: fails its checksum
    _write(_live(tree) / "e" / "new.jsonl", "new\n")
    listings.clear()
    ahead.checkpoint()
    assert len(listings) > 5, "a torn table was trusted"
    assert _durable(tree) == _expected(tree)
    # The index saved by something else (a copy has a new inode): the table is stale.
    shutil.copy2(idx, tree.state / "copy")
    os.replace(tree.state / "copy", idx)
    _write(_live(tree) / "f" / "g" / "new.jsonl", "new\n")
    listings.clear()
    ahead.checkpoint()
    assert len(listings) > 5, "a table of another index file was trusted"
    assert _durable(tree) == _expected(tree)


# -- the walk with a table decides exactly what the full listing decides --------


def _both(eng: Engine) -> tuple[ScanResult, ScanResult, Any]:
    spec = eng.config.adapter("t")
    state = eng.passes.adapters.state(spec)
    [job] = eng.passes.scan_jobs([state], eng.clock())
    full = scan([attrs.evolve(job, table=None)], workers=1)["t"]
    fast = scan([job], workers=2)["t"]  # forks when this process has one thread
    return full, fast, (state, job)


def _decisions(state: Any, result: ScanResult) -> tuple[Any, ...]:
    missing = (
        find_missing(state, result) if result.gone is None else missing_among(state, result.gone)
    )
    return (
        sorted(s.path for s in result.changed),
        sorted(missing),
        sorted(result.specials),
        sorted(result.errors),
        sorted(result.dirs),
        sorted(missing_dirs(state, result)),
    )


def _live_dirs(tree: Tree) -> dict[str, int]:
    """Every directory of the live tree a walk enters (not cache/), with its mode."""
    return dir_modes(_live(tree), skip=("cache",))


def _recorded_dirs(tree: Tree) -> dict[str, int]:
    """The directories the manifest records and the index does not count as missing."""
    index = Index.load(tree.state / "index" / "t.idx")
    assert index is not None
    entries = manifest.load(tree.store("state/t")).entries
    present = {p for p, _, absent in index.dir_items() if not absent}
    return {p: e.mode for p, e in entries.items() if e.kind == "dir" and p in present}


def _mutate(rng: random.Random, root: Path, outside: Path, step: str, decide_only: bool) -> str:
    dirs = [Path(d) for d, _, _ in os.walk(root)]
    regular = [
        Path(d) / n
        for d, _, names in os.walk(root)
        for n in names
        if (Path(d) / n).is_file() and not (Path(d) / n).is_symlink()
    ]
    d = rng.choice(dirs)
    ops = [
        "new",
        "nested",
        "append",
        "delete",
        "rename",
        "rmdir",
        "mkdir",
        "dir-to-link",
        "fifo",
        "excluded",
        "chmod",
        "touch",
        "file-to-link",
        "mvdir",
        "chmod-dir",
        "rmdir-empty",
    ]
    op = rng.choice([*ops, "file-to-dir"] if decide_only else ops)
    if op == "new":
        _write(d / f"n{step}.jsonl", f"new {step}\n")
    elif op == "nested":
        _write(d / f"d{step}" / "x" / f"n{step}.jsonl", f"nested {step}\n")
    elif op == "mkdir":
        (d / f"e{step}").mkdir()
    elif op == "excluded":
        _write(d / f"n{step}.tmp", "excluded\n")
    elif op == "fifo":
        os.mkfifo(d / f"p{step}")
    elif op == "dir-to-link" and d != root:
        shutil.rmtree(d)
        d.symlink_to(outside)
    elif op == "mvdir" and d != root and not (root / f"moved{step}").exists():
        d.rename(root / f"moved{step}")
    elif op == "rmdir" and d != root:
        shutil.rmtree(d)
    elif op == "chmod-dir" and d != root:
        d.chmod(rng.choice([0o700, 0o750, 0o755, 0o711]))
    elif op == "rmdir-empty" and d != root and not any(d.iterdir()):
        d.rmdir()
    elif regular:
        f = rng.choice(regular)
        if op == "append":
            with open(f, "a") as fh:
                fh.write(f"more {step}\n")
        elif op == "delete":
            f.unlink()
        elif op == "rename":
            f.rename(f.with_name(f"r{step}-{f.name}"))
        elif op == "file-to-dir":
            f.unlink()
            _write(f / "inner.jsonl", f"was a file {step}\n")
        elif op == "file-to-link":
            f.unlink()
            f.symlink_to("/etc/passwd")
        elif op == "chmod":
            f.chmod(0o600)
        elif op == "touch":
            os.utime(f)
    return op


def _difference(got: tuple[Any, ...], want: tuple[Any, ...]) -> str:
    parts = ("changed", "missing", "specials", "errors", "dirs", "missing dirs")
    return "; ".join(
        f"{name}: with the table only {sorted(set(a) - set(b))}, "
        f"without only {sorted(set(b) - set(a))}"
        for name, a, b in zip(parts, got, want, strict=True)
        if a != b
    )


def test_a_directory_recorded_by_a_hinted_pass_is_looked_at_by_the_next_walk(
    tree: Tree, ahead: Engine
) -> None:
    """A watcher-driven pass that records a new directory adds no path to the index, but
    the table does not know that directory: it must not be trusted afterwards, or the
    directory's removal before the next walk would go unseen."""
    _seed(tree)
    ahead.checkpoint()
    ahead.checkpoint()
    (_live(tree) / "new").mkdir()
    report = ahead.checkpoint(hints={"t": {"new"}})
    assert report.adapters[0].dirs == 1
    (_live(tree) / "new").rmdir()
    full, fast, (state, _) = _both(ahead)
    assert _decisions(state, fast) == _decisions(state, full)
    assert missing_dirs(state, fast) == ["new"]


def test_recently_changed_directories_are_listed_again(
    tree: Tree, engine: EngineFactory, listings: list[Any]
) -> None:
    """Within the timestamp granularity of the pass start a directory's signature is
    not trusted: a change in the same clock tick as the walk is never missed."""
    _seed(tree)
    now = Engine(engine(RAW).config, scan_workers=1)  # the real clock: all just created
    now.checkpoint()
    listings.clear()
    now.checkpoint()
    assert len(listings) == 11  # every directory but the excluded cache/


@pytest.mark.parametrize("seed", [1, 2, 3, 4] if not os.environ.get("FISH") else range(4, 80))
def test_random_changes_are_decided_as_a_full_listing_would(
    tree: Tree, ahead: Engine, tmp_path: Path, seed: int
) -> None:
    """Each step: the same decisions with and without the table, then a checkpoint
    after which every live file is durable.  (A file replaced by a directory of
    the same name cannot be published over its durable copy, which is kept: a
    PathConflict, see test_checkpoint.  That step is only taken with seed 4,
    which checks decisions only.)"""
    decide_only = seed == 4
    rng = random.Random(seed)
    _seed(tree)
    outside = tmp_path / "outside"
    _write(outside / "f0.jsonl", "outside\n")
    for d in ("b/c", "d", "g/h/i", "x"):  # a path below a link finds a directory there
        (outside / d).mkdir(parents=True)
    ahead.checkpoint()
    ahead.checkpoint()
    used = []
    unlisted = total = 0  # directories the table spared a listing: what makes this count
    for step in range(30):
        used += [
            _mutate(rng, _live(tree), outside, f"{step}-{i}", decide_only)
            for i in range(rng.randint(1, 4))
        ]
        hinted = rng.random() < 0.3
        if hinted:  # a watcher-driven pass in between (the daemon's way)
            live = sorted(_expected(tree)) + sorted(_live_dirs(tree))
            ahead.checkpoint(hints={"t": set(rng.sample(live, min(len(live), 3)))})
        full, fast, (state, job) = _both(ahead)
        # A full pass always leaves a valid table; a hinted pass that added paths
        # leaves it stale (the next full walk lists everything and rebuilds it).
        assert job.table is not None or hinted, "the full pass before left no valid table"
        assert fast.walk is not None and full.walk is not None
        unlisted += len(full.walk.listed) - len(fast.walk.listed)
        total += len(full.walk.listed)
        got, want = _decisions(state, fast), _decisions(state, full)
        assert got == want, f"step {step}: {used[-4:]}: {_difference(got, want)}"
        report = ahead.checkpoint()
        if not decide_only:
            assert report.ok, f"step {step}: {used[-4:]}"
            assert _durable(tree).items() >= _expected(tree).items(), f"step {step}: {used[-4:]}"
            assert _recorded_dirs(tree) == _live_dirs(tree), f"step {step}: {used[-4:]}"
    # a hinted pass that records a directory leaves the table stale, like one that adds a
    # path: with directories among the hints, a quarter is what the worst seed keeps
    assert unlisted > total // 4, (unlisted, total)


def test_checkpoints_killed_at_random_points_lose_nothing(tree: Tree, cli: Any) -> None:
    """The real CLI, SIGKILLed at random points of passes that trust the table: the
    table is written after the index and names the index file it belongs with, so
    a pass killed anywhere leaves either the old table (its directories are listed
    again) or none that matches (everything is listed).  Then nothing is missed."""
    rng = random.Random(7)
    live = tree.local / "codex-home" / "memories"
    for d in range(5):
        for k in range(4):
            _write(live / f"d{d}" / f"f{k}.md", f"d{d} f{k}\n")
    cli("checkpoint", check=0)
    for cycle in range(6):
        _write(live / f"d{rng.randrange(5)}" / f"new{cycle}.md", f"new {cycle}\n")
        _write(live / f"n{cycle}" / "x" / "deep.md", f"deep {cycle}\n")
        with open(live / f"d{rng.randrange(5)}" / "f0.md", "a") as fh:
            fh.write(f"edit {cycle}\n")
        # Not a synchronisation: directories changed within 2 s of a pass are always
        # listed again, so the table is trusted for these only once they are older.
        time.sleep(2.1)
        proc = subprocess.Popen(
            [sys.executable, "-m", "syncengine", "-q", "checkpoint"],
            env=tree.env(),
            cwd=tree.base,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            proc.wait(timeout=rng.uniform(0.05, 0.5))  # the kill point: random
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    cli("checkpoint", check=0)
    durable = files(tree.durable / "state" / "codex" / "memories")
    assert durable == files(live)


def test_an_index_and_table_saved_by_an_older_version_still_drive_the_walk(
    tree: Tree, engine: EngineFactory, listings: list[Any]
) -> None:
    """SYNCIDX1 (the records as one dict) and a table without its directory order, as
    older versions wrote them: an idle pass lists nothing, an appended file is found."""
    _seed(tree)
    clock = lambda: time.time_ns() + AHEAD_NS  # noqa: E731
    Engine(engine(RAW).config, clock=clock, scan_workers=1).checkpoint()
    idx_path = tree.state / "index" / "t.idx"
    index = Index.load(idx_path)
    assert index is not None
    old = {"records": index.records, "links": index.links, "extras": index.extras}
    old.update(meta=index.meta, absent=index.absent, dirs=indexfile.pack_dirs(index.dirs))
    idx_path.write_bytes(b"SYNCIDX1" + marshal.dumps(old))
    table = tablewalk.table_path(idx_path)
    saved = marshal.loads(table.read_bytes()[16:])
    del saved["order"]
    saved["index_sig"] = list(file_signature(idx_path) or ())
    payload = marshal.dumps(saved)
    table.write_bytes(dirtable.MAGIC + xxhash.xxh3_64_digest(payload) + payload)
    for appended in (False, True):  # idle; one file appended (its directory unchanged)
        if appended:
            with open(_live(tree) / "a" / "d" / "f1.jsonl", "a") as f:
                f.write("appended\n")
        eng = Engine(engine(RAW).config, clock=clock, scan_workers=1)
        listings.clear()
        eng.checkpoint()
        assert listings == [], "the older table was not used"
    assert _durable(tree) == _expected(tree)
    assert idx_path.read_bytes().startswith(b"SYNCIDX2")
