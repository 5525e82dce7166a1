"""verify: missing, truncated and corrupt durable objects, bad SQLite snapshots, unlisted files."""

from __future__ import annotations

import json
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from syncengine import Engine, config_from_dict
from syncengine.durable import lease, manifest
from syncengine.durable.manifest import Entry
from syncengine.durable.posix.store import Store
from syncengine.local.status import staging_marker
from syncengine.ops.verify import sampled
from tests.conftest import CliRunner, EngineFactory, Tree
from tests.helpers import set_mtime

pytestmark = pytest.mark.s3

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


class _Generation:
    """The lease generation the last checkpoint wrote under, as a manifest `Fence`: a
    hand-written delta continues that writer's chain (a generation-0 name after it
    would be fenced, `manifest.listing`)."""

    def __init__(self, generation: int) -> None:
        self.generation = generation

    def check(self) -> None:
        pass


def _add_sqlite_entry(tree: Tree, store: Store, name: str, data: bytes) -> None:
    """A manifest delta with a hand-written entry of kind "sqlite" (issue 3's format)."""
    store.put_bytes(f"checkpoints/{name}", data, if_absent=True)
    fence = _Generation(lease.read(tree.store("")).generation)
    last = manifest.load(store).last_seq
    manifest.write(
        store,
        "x",
        last + 1,
        "delta",
        [Entry(name, "sqlite", len(data), OLD, 0o600, object=f"checkpoints/{name}")],
        created_ns=OLD,
        fence=fence,
    )


def _damage(path: Path, change: Callable[[bytes], bytes]) -> None:
    """Change a durable file in the bucket and keep its mtime, as bit rot would."""
    st = path.stat()
    path.write_bytes(change(path.read_bytes()))
    set_mtime(path, st.st_mtime_ns)


def _good_db(path: Path) -> bytes:
    with closing(sqlite3.connect(path)) as db:
        db.execute("create table t (a)")
        db.executemany("insert into t values (?)", [(i,) for i in range(200)])
        db.commit()
    return path.read_bytes()


def test_a_sound_store_verifies(tree: Tree, cli: CliRunner) -> None:
    conf = _setup(tree, cli)
    store = tree.store("state/x")
    _add_sqlite_entry(tree, store, "good.db", _good_db(tree.base / "good.db"))
    out = cli("--config", str(conf), "verify", "--sample", "100", check=0)
    assert "verify: OK" in out.stdout
    assert "9 entries, 9 checked, 8 read back" in out.stdout  # logs/ is recorded, not read


def test_each_problem_is_named(tree: Tree, cli: CliRunner) -> None:
    conf = _setup(tree, cli)
    durable = tree.raw / "state/x"  # damaged in the bucket, mtimes kept (bit rot)
    store = tree.store("state/x")
    _damage(durable / "f1.txt", lambda data: b"content 1\n")  # truncated
    (durable / "f2.txt").unlink()  # missing
    _damage(durable / "f3.txt", lambda data: data.replace(b"3", b"9"))  # same size, corrupt
    (durable / "stray.txt").write_text("no entry\n")  # unlisted
    good = bytearray(_good_db(tree.base / "good.db"))
    good[4096 + 200 : 4096 + 400] = b"\xff" * 200  # damage a table page
    _add_sqlite_entry(tree, store, "bad.db", bytes(good))
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
    js = json.loads(
        cli("--config", str(conf), "verify", "--sample", "100", "--json", check=1).stdout
    )
    problems = {p["path"] for p in js["adapters"][0]["problems"]}
    assert problems == {"f1.txt", "f2.txt", "f3.txt", "bad.db", "logs/a.jsonl"}
    assert js["adapters"][0]["unlisted"] == ["stray.txt"]


def test_unlisted_files_fail_only_with_strict(tree: Tree, cli: CliRunner) -> None:
    conf = _setup(tree, cli)
    (tree.raw / "state/x/stray.txt").write_text("x")
    cli("--config", str(conf), "verify", check=0)
    out = cli("--config", str(conf), "verify", "--strict", check=1)
    assert "PROBLEM x: stray.txt" in out.stdout


def test_resumes_where_it_stopped(tree: Tree, cli: CliRunner, engine: EngineFactory) -> None:
    _setup(tree, cli)
    (tree.raw / "state/x/f5.txt").unlink()
    eng = engine(
        {
            "adapters": [],
            "adapter": [
                {"name": "x", "live": "x", "durable": "state/x", "segments": ["logs/*.jsonl"]}
            ],
        }
    )
    first = eng.verify(sample=100, limit=3)
    a = first.adapters[0]
    assert not a.complete and a.checked == 3 and not a.problems
    assert (tree.state / "verify/x.json").exists()
    second = eng.verify(sample=100)
    b = second.adapters[0]
    # 8 entries: six files, a log, and the directory logs/
    assert b.complete and b.resumed_after == "f2.txt" and b.checked == 8
    assert [p.path for p in b.problems] == ["f5.txt"]
    assert not (tree.state / "verify/x.json").exists()
    # --restart ignores saved progress; a finished run starts from the beginning anyway
    eng.verify(sample=100, limit=2)
    again = eng.verify(sample=100, restart=True).adapters[0]
    assert again.resumed_after is None and again.checked == 8


def test_sampling_is_deterministic_per_manifest_seq() -> None:
    paths = [f"p{i}" for i in range(2000)]
    picked = [p for p in paths if sampled(p, 7, 10)]
    assert picked == [p for p in paths if sampled(p, 7, 10)]
    assert 120 < len(picked) < 280
    assert picked != [p for p in paths if sampled(p, 8, 10)]
    assert all(sampled(p, 7, 100) for p in paths)


def test_unreadable_manifest_object_and_invalid_entry_fail_verify(
    tree: Tree, cli: CliRunner
) -> None:
    """verify fails wherever restore would be incomplete (before: skipped with a note)."""
    conf = _setup(tree, cli)
    raw = tree.raw / "state/x"
    gen = lease.read(tree.store("")).generation  # the checkpoint's: not fenced
    bad = {"path": "f0.txt", "kind": "file", "size": -5, "mtime_ns": OLD, "mode": 0o644}
    (raw / manifest.object_name(2, "delta", gen)).write_text(
        '{"syncengine_manifest": 1, "seq": 2, "type": "delta"}\n'
        + json.dumps(bad)
        + '\n{"end": 1}\n'
    )
    (raw / manifest.object_name(3, "delta", gen)).write_bytes(b"\x00garbage")
    out = cli("--config", str(conf), "verify", "--sample", "100", check=1)
    assert "PROBLEM x: f0.txt: malformed manifest entry (size -5 is out of range)" in out.stdout
    assert "PROBLEM x: .syncengine/manifest:" in out.stdout
    assert f"000000000003.g{gen:012d}.delta.jsonl: unreadable delta" in out.stdout


KILL_CONFIG = """adapters = []
[[adapter]]
name = "k"
live = "k"
durable = "state/k"
"""
KILLS = 20
KILL_BUDGET_S = 90.0


@pytest.mark.slow
def test_verify_strict_after_killed_checkpoints_reports_only_real_corruption(
    tree: Tree, cli: CliRunner, engine: EngineFactory
) -> None:
    """Before: "content hash differs (corrupt)" for newer complete versions that a killed
    checkpoint renamed into place (18 of 24 runs).  Real `syncengine checkpoint` children,
    SIGKILLed at varied points; after each, `verify --strict` finds no problem; a restore
    into a new container right after the last kill is complete; a flipped bit (mtime kept)
    is still reported, by verify and by restore."""
    rng = random.Random(20261201)
    conf = tree.base / "k.toml"
    conf.write_text(KILL_CONFIG)
    sizes = {f"f{i}.bin": (2 << 20) if i < 4 else 3000 for i in range(8)}

    def rewrite(name: str) -> None:
        size = sizes[name] if rng.random() < 0.5 else sizes[name] + rng.randrange(1, 5000)
        tree.write(f"k/{name}", rng.randbytes(size))

    for name in sizes:
        rewrite(name)
    cli("--config", str(conf), "checkpoint", check=0)
    eng = engine({"adapters": [], "adapter": [{"name": "k", "live": "k", "durable": "state/k"}]})
    marker = staging_marker(tree.state, "k")
    env = tree.env()
    t0 = time.monotonic()
    interrupted = kills = 0
    while kills < KILLS and time.monotonic() - t0 < KILL_BUDGET_S:
        for name in rng.sample(sorted(sizes), 4):
            rewrite(name)
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "syncengine", "--config", str(conf), "-q", "checkpoint"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while proc.poll() is None and not marker.exists():  # the pass is about to publish
            time.sleep(0.002)
        time.sleep(rng.uniform(0, min(0.3, time.monotonic() - start)))
        proc.kill()
        proc.wait(timeout=60)
        kills += 1
        interrupted += proc.returncode == -signal.SIGKILL and marker.exists()
        report = eng.verify(sample=100, strict=True, restart=True)
        assert report.ok, "\n".join(report.lines())
    print(f"\n{kills} kills, {interrupted} interrupted a pass")
    assert interrupted >= 1, "no kill landed inside a pass"
    fresh = tree.base / "fresh"
    raw = {
        "local_root": str(fresh),
        "state_dir": str(fresh / ".state"),
        "adapters": [],
        "adapter": [{"name": "k", "live": "k", "durable": "state/k"}],
    }
    # a new container after a killed holder: without --takeover it would wait for the
    # dead holder's lease to expire; the engine's close releases the generation it took
    with Engine(config_from_dict(raw, env=env)) as new_container:
        assert new_container.restore(takeover=True).ok
    cli("--config", str(conf), "checkpoint", check=0)  # records everything: all copies match
    _damage(tree.raw / "state/k/f5.bin", lambda d: d[:100] + bytes([d[100] ^ 1]) + d[101:])
    report = eng.verify(sample=100, strict=True, restart=True)
    assert [p.path for p in report.adapters[0].problems] == ["f5.bin"]
    assert "corrupt" in report.adapters[0].problems[0].what
    shutil.rmtree(fresh)
    rep = Engine(config_from_dict(raw, env=env)).restore()
    assert [e.path for e in rep.errors] == ["f5.bin"]
