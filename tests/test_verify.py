"""verify: missing, truncated and corrupt durable objects, bad SQLite snapshots, unlisted files."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

from syncengine import manifest
from syncengine.manifest import Entry
from syncengine.store import Store
from syncengine.verify import sampled
from tests.conftest import CliRunner, EngineFactory, Tree

CONFIG = """adapters = []
[[adapter]]
name = "x"
live = "x"
durable = "state/x"
segments = ["logs/*.jsonl"]
"""
OLD = 1_700_000_000 * 10**9


def _setup(tree: Tree, cli: CliRunner) -> Path:
    conf = tree.base / "c.toml"
    conf.write_text(CONFIG)
    for i in range(6):
        tree.write(f"x/f{i}.txt", f"content {i}\n" * 50, mtime_ns=OLD)
    tree.write("x/logs/a.jsonl", '{"a": 1}\n{"a": 2}\n', mtime_ns=OLD)
    cli("--config", str(conf), "checkpoint", check=0)
    return conf


def _add_sqlite_entry(store: Store, name: str, data: bytes) -> None:
    """A manifest delta with a hand-written entry of kind "sqlite" (issue 3's format)."""
    store.put_bytes(f"checkpoints/{name}", data)
    last = manifest.load(store).last_seq
    manifest.write(store, "x", last + 1, "delta",
                   [Entry(name, "sqlite", len(data), OLD, 0o600, object=f"checkpoints/{name}")],
                   created_ns=OLD)


def _good_db(path: Path) -> bytes:
    with closing(sqlite3.connect(path)) as db:
        db.execute("create table t (a)")
        db.executemany("insert into t values (?)", [(i,) for i in range(200)])
        db.commit()
    return path.read_bytes()


def test_a_sound_store_verifies(tree: Tree, cli: CliRunner) -> None:
    conf = _setup(tree, cli)
    store = Store(tree.data / "state/x")
    _add_sqlite_entry(store, "good.db", _good_db(tree.base / "good.db"))
    out = cli("--config", str(conf), "verify", "--sample", "100", check=0)
    assert "verify: OK" in out.stdout
    assert "8 entries, 8 checked, 8 read back" in out.stdout


def test_each_problem_is_named(tree: Tree, cli: CliRunner) -> None:
    conf = _setup(tree, cli)
    store = Store(tree.data / "state/x")
    durable = tree.backing / "state/x"  # damage the bucket itself, not through the mount
    (durable / "f1.txt").write_bytes(b"content 1\n")  # truncated
    (durable / "f2.txt").unlink()  # missing
    data = (durable / "f3.txt").read_bytes()
    (durable / "f3.txt").write_bytes(data.replace(b"3", b"9"))  # same size, corrupt
    (durable / "stray.txt").write_text("no entry\n")  # unlisted
    good = bytearray(_good_db(tree.base / "good.db"))
    good[4096 + 200: 4096 + 400] = b"\xff" * 200  # damage a table page
    _add_sqlite_entry(store, "bad.db", bytes(good))
    seg = next((durable / ".syncengine/segments/logs/a.jsonl.d").rglob("*.seg"))
    seg.write_bytes(seg.read_bytes()[:-3])
    out = cli("--config", str(conf), "verify", "--sample", "100", check=1)
    lines = out.stdout.splitlines()

    def line(path: str) -> str:
        found = [ln for ln in lines if f"x: {path}:" in ln]
        assert found, f"{path} not reported:\n{out.stdout}"
        return found[0]

    assert "truncated" in line("f1.txt")
    assert "missing" in line("f2.txt")
    assert "hash differs" in line("f3.txt")
    assert "quick_check" in line("bad.db") or "not a usable" in line("bad.db")
    assert "segment" in line("logs/a.jsonl") and "truncated" in line("logs/a.jsonl")
    assert "unlisted x: stray.txt" in out.stdout
    assert "verify: PROBLEMS FOUND" in out.stdout
    js = json.loads(cli("--config", str(conf), "verify", "--sample", "100", "--json",
                        check=1).stdout)
    problems = {p["path"] for p in js["adapters"][0]["problems"]}
    assert problems == {"f1.txt", "f2.txt", "f3.txt", "bad.db", "logs/a.jsonl"}
    assert js["adapters"][0]["unlisted"] == ["stray.txt"]


def test_unlisted_files_fail_only_with_strict(tree: Tree, cli: CliRunner) -> None:
    conf = _setup(tree, cli)
    (tree.backing / "state/x/stray.txt").write_text("x")
    cli("--config", str(conf), "verify", check=0)
    out = cli("--config", str(conf), "verify", "--strict", check=1)
    assert "PROBLEM x: stray.txt" in out.stdout


def test_resumes_where_it_stopped(tree: Tree, cli: CliRunner, engine: EngineFactory) -> None:
    _setup(tree, cli)
    (tree.backing / "state/x/f5.txt").unlink()
    eng = engine({"adapters": [], "adapter": [{"name": "x", "live": "x", "durable": "state/x",
                                               "segments": ["logs/*.jsonl"]}]})
    first = eng.verify(sample=100, limit=3)
    a = first.adapters[0]
    assert not a.complete and a.checked == 3 and not a.problems
    assert (tree.state / "verify/x.json").exists()
    second = eng.verify(sample=100)
    b = second.adapters[0]
    assert b.complete and b.resumed_after == "f2.txt" and b.checked == 7
    assert [p.path for p in b.problems] == ["f5.txt"]
    assert not (tree.state / "verify/x.json").exists()
    # --restart ignores saved progress; a finished run starts from the beginning anyway
    eng.verify(sample=100, limit=2)
    again = eng.verify(sample=100, restart=True).adapters[0]
    assert again.resumed_after is None and again.checked == 7


def test_sampling_is_deterministic_per_manifest_seq() -> None:
    paths = [f"p{i}" for i in range(2000)]
    picked = [p for p in paths if sampled(p, 7, 10)]
    assert picked == [p for p in paths if sampled(p, 7, 10)]
    assert 120 < len(picked) < 280
    assert picked != [p for p in paths if sampled(p, 8, 10)]
    assert all(sampled(p, 7, 100) for p in paths)
