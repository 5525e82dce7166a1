"""Restore reports success only when it can vouch for the result, and places nothing unsafe.

Hostile or damaged durable content is written into the bucket (`tree.raw`),
never through the mount: malformed manifest entries, setuid modes, a flipped
bit, a durable file that vanishes while an old-layout tree is restored, an
invalid live database with no snapshot on a fresh durable root.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import stat
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from syncengine import Engine, config_from_dict
from syncengine.durable.manifest import format_hash
from syncengine.local.status import staging_marker
from syncengine.restore import restorer as restore
from tests.conftest import CliRunner, Tree
from tests.helpers import set_mtime, snapshot

pytestmark = pytest.mark.s3

OLD = 1_700_000_000 * 10**9
DUR = "state/codex"


def _manifest(store: Path, rows: list[Any], *, seq: int = 1) -> None:
    """A base manifest object with these rows (dicts, or raw text lines) in the bucket."""
    mdir = store / ".syncengine/manifest"
    mdir.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(
            {
                "syncengine_manifest": 1,
                "adapter": "codex",
                "seq": seq,
                "type": "base",
                "created_ns": 1,
            }
        )
    ]
    lines += [r if isinstance(r, str) else json.dumps(r) for r in rows]
    lines.append(json.dumps({"end": len(rows)}))
    (mdir / f"{seq:012d}.base.jsonl").write_text("\n".join(lines) + "\n")


def _file(store: Path, rel: str, data: bytes, **fields: Any) -> dict[str, Any]:
    """Put `data` in the bucket at `rel`; return its (valid) manifest row, with `fields`."""
    path = store / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    set_mtime(path, OLD)
    row = {
        "path": rel,
        "kind": "file",
        "size": len(data),
        "mtime_ns": OLD,
        "mode": 0o644,
        "hash": format_hash(xxhash.xxh3_64_intdigest(data)),
    }
    row.update(fields)
    return row


BAD_ROWS: dict[str, dict[str, Any]] = {
    "link-no-target": {"path": "l1", "kind": "symlink", "mtime_ns": 1},
    "link-empty-target": {"path": "l2", "kind": "symlink", "mtime_ns": 1, "target": ""},
    "link-nul-target": {"path": "l3", "kind": "symlink", "mtime_ns": 1, "target": "a\0b"},
    "link-target-number": {"path": "l4", "kind": "symlink", "mtime_ns": 1, "target": 7},
    "mtime-huge": {"path": "m1", "mtime_ns": 10**30},
    "mtime-string": {"path": "m2", "mtime_ns": "1"},
    "mtime-float": {"path": "m3", "mtime_ns": 1.5},
    "size-negative": {"path": "s1", "size": -1},
    "size-string": {"path": "s2", "size": "12"},
    "size-bool": {"path": "s3", "size": True},
    "mode-negative": {"path": "o1", "mode": -1},
    "mode-too-large": {"path": "o2", "mode": 0o10000},
    "mode-string": {"path": "o3", "mode": "0644"},
    "hash-other-algorithm": {"path": "h1", "hash": "md5:d41d8cd98f00b204e9800998ecf8427e"},
    "hash-not-hex": {"path": "h2", "hash": "xxh3_64:zzzzzzzzzzzzzzzz"},
    "hash-short": {"path": "h3", "hash": "xxh3_64:123"},
    "kind-number": {"path": "k1", "kind": 7},
    "kind-reserved": {"path": "k2", "kind": "invalid"},
    "kind-malformed": {"path": "k3", "kind": "Not A Kind"},
    "object-number": {"path": "b1", "object": 5},
    "path-surrogate": {"path": "p\ud800"},
}


def test_each_malformed_entry_is_that_paths_error_and_the_rest_restores(
    tree: Tree, cli: CliRunner
) -> None:
    """Before: AssertionError / ValueError / OverflowError tracebacks, nothing restored."""
    store = tree.raw / DUR
    rows: list[Any] = [_file(store, "good.json", b'{"ok": 1}')]
    base = {"kind": "file", "size": 1, "mtime_ns": 1, "mode": 0o644}
    rows += [row if row.get("kind") == "symlink" else base | row for row in BAD_ROWS.values()]
    rows += [{"kind": "file", "size": 1}, "[1, 2]", "{not json"]  # no path; no object; no JSON
    _manifest(store, rows)
    out = cli("restore", "codex", check=1)
    assert "Traceback" not in out.stderr
    for name, row in BAD_ROWS.items():
        if name != "path-surrogate":
            assert f"restore {row['path']}:" in out.stderr, (name, out.stderr)
    unnamed = [
        i
        for i, r in enumerate(rows)
        if isinstance(r, str) or "path" not in r or r["path"] == "p\ud800"
    ]
    assert len(unnamed) == 4
    for i in unnamed:  # the header is line 1
        assert f"restore 000000000001.base.jsonl line {i + 2}:" in out.stderr, out.stderr
    assert "mtime_ns 1000000000000000000000000000000 is out of range" in out.stderr
    assert (tree.local / "codex-home/good.json").read_text() == '{"ok": 1}'
    assert sorted(os.listdir(tree.local / "codex-home")) == ["good.json"]


def test_manifest_modes_never_restore_setuid_setgid_or_sticky(tree: Tree, cli: CliRunner) -> None:
    """Anyone who can write the bucket could otherwise plant a setuid root file."""
    store = tree.raw / DUR
    rows = [
        _file(store, "suid", b"#!/bin/sh\n", mode=0o6755),
        _file(store, "sticky", b"x", mode=0o1777),
        _file(store, "plain", b"x", mode=0o640),
    ]
    _manifest(store, rows)
    out = cli("restore", "codex", check=0)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tree.local / "codex-home").iterdir()}
    assert modes == {"suid": 0o755, "sticky": 0o777, "plain": 0o640}
    assert "restore.mode-dropped path=suid mode=6755 restored=0755" in out.stderr


def test_setuid_local_file_comes_back_without_the_bits(tree: Tree, cli: CliRunner) -> None:
    tree.write("codex-home/tool", "#!/bin/sh\n", mode=0o4755)
    cli("checkpoint", "codex", check=0)
    shutil.rmtree(tree.local)
    cli("restore", "codex", check=0)
    assert stat.S_IMODE((tree.local / "codex-home/tool").stat().st_mode) == 0o755


def _flip(path: Path) -> None:
    """One flipped bit in a durable file, its mtime kept (bit rot changes no metadata)."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    set_mtime(path, st.st_mtime_ns)


def _no_temp_files(root: Path) -> None:
    left = [p for p in root.rglob("*") if p.name.endswith(".syncengine-tmp")]
    assert not left, left


def test_a_flipped_bit_is_that_paths_error_and_nothing_corrupt_is_placed(
    tree: Tree, cli: CliRunner
) -> None:
    """Before: restored with exit 0 and a warning although the manifest holds its hash."""
    tree.write("codex-home/a.json", "a" * 1000, mtime_ns=OLD)
    tree.write("codex-home/b.json", "b" * 1000, mtime_ns=OLD)
    cli("checkpoint", "codex", check=0)
    _flip(tree.raw / DUR / "a.json")
    shutil.rmtree(tree.local)  # a new container: no local state
    out = cli("restore", "codex", check=1)
    assert "a.json" in out.stderr and "corrupt" in out.stderr
    assert not (tree.local / "codex-home/a.json").exists()
    assert (tree.local / "codex-home/b.json").read_text() == "b" * 1000
    _no_temp_files(tree.local)
    # an older local copy stays as it was; a newer one is kept without reading the bucket
    tree.write("codex-home/a.json", "older local", mtime_ns=OLD - 10**9)
    cli("restore", "codex", check=1)
    assert (tree.local / "codex-home/a.json").read_text() == "older local"
    tree.write("codex-home/a.json", "newer local", mtime_ns=OLD + 10**9)
    cli("restore", "codex", check=0)
    assert (tree.local / "codex-home/a.json").read_text() == "newer local"
    _no_temp_files(tree.local)


def test_a_rewrite_with_a_new_mtime_is_corrupt_when_no_checkpoint_was_interrupted(
    tree: Tree, cli: CliRunner
) -> None:
    """This state dir wrote the newest manifest object and no pass is pending: nothing
    unrecorded can be at a path, whatever its mtime says."""
    tree.write("codex-home/a.json", "a" * 100, mtime_ns=OLD)
    cli("checkpoint", "codex", check=0)
    (tree.raw / DUR / "a.json").write_bytes(b"A" * 100)  # mtime: now
    os.unlink(tree.local / "codex-home/a.json")
    out = cli("restore", "codex", check=1)
    assert "no checkpoint was interrupted" in out.stderr
    assert not (tree.local / "codex-home/a.json").exists()


def test_newer_complete_version_of_an_interrupted_checkpoint_is_restored(
    tree: Tree, cli: CliRunner
) -> None:
    """A checkpoint killed after renaming a new version into place and before its manifest
    (laid out here by hand; test_verify kills real ones): restore takes it, with its own
    mtime, and the next checkpoint records it in a full base."""
    tree.write("codex-home/a.json", "v1", mtime_ns=OLD)
    cli("checkpoint", "codex", check=0)
    durable = tree.raw / DUR / "a.json"
    durable.write_bytes(b"version 2")
    set_mtime(durable, OLD + 10**9)  # the live mtime, as copied
    staging_marker(tree.state, "codex").touch()  # the killed pass's marker
    os.unlink(tree.local / "codex-home/a.json")
    out = cli("restore", "codex", check=0)
    assert "restore.newer-than-manifest path=a.json" in out.stderr
    live = tree.local / "codex-home/a.json"
    assert live.read_text() == "version 2" and live.stat().st_mtime_ns == OLD + 10**9
    tree.write("codex-home/other.json", "x")
    cli("checkpoint", "codex", check=0)
    # a full base (each one-shot command takes the next lease generation: .gNNN.)
    assert list((tree.raw / DUR / ".syncengine/manifest").glob("000000000002.g*.base.jsonl"))
    shutil.rmtree(tree.local)
    cli("restore", "codex", check=0)  # recorded now: nothing left to judge
    assert (tree.local / "codex-home/a.json").read_text() == "version 2"


SQLITE_CONFIG = """adapters = []
[[adapter]]
name = "app"
live = "app"
durable = "state/app"
sqlite = ["app.db"]
"""


def test_invalid_live_database_without_snapshot_on_a_fresh_durable_root(
    tree: Tree, cli: CliRunner
) -> None:
    """Before: exit 0 when the adapter's durable directory did not exist yet, and `run`
    started the server over the invalid database."""
    conf = tree.base / "c.toml"
    conf.write_text(SQLITE_CONFIG)
    tree.write("app/app.db", b"SQLite format 3\x00" + b"\xff" * 4000)
    assert not (tree.durable / "state/app").exists()
    out = cli("--config", str(conf), "restore", check=1)
    assert "app.db" in out.stderr and "no durable snapshot" in out.stderr
    started = tree.base / "started"
    cli(
        "--config",
        str(conf),
        "run",
        "--no-watch",
        "--",
        sys.executable,
        "-c",
        f"open({str(started)!r}, 'w').close()",
        check=1,
    )
    assert not started.exists()
    (tree.local / "app/app.db").unlink()  # a valid one (or none) restores fine
    with closing(sqlite3.connect(tree.local / "app/app.db")) as db:
        db.execute("create table t (a)")
    cli("--config", str(conf), "restore", check=0)


def _old_layout(tree: Tree) -> Path:
    store = tree.raw / DUR
    for name in ("a", "b", "c"):
        path = store / "sessions" / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{name}\n")
    return store


def _restore_after_listing(tree: Tree, monkeypatch: pytest.MonkeyPatch, change: Any) -> Any:
    """Restore in-process, changing the bucket right after the durable tree was listed."""
    listed = restore.durable_entries

    def then_change(*args: Any) -> Any:
        result = listed(*args)
        change()
        return result

    monkeypatch.setattr(restore, "durable_entries", then_change)
    eng = Engine(config_from_dict({"adapters": ["codex"]}, env=tree.env()))
    return eng.restore()


def test_old_layout_file_vanishing_after_listing_is_skipped(
    tree: Tree, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """rsync exit 24: a harness pruned scratch while the copy ran; `run` must still boot."""
    store = _old_layout(tree)
    with caplog.at_level(logging.INFO, logger="syncengine"):
        report = _restore_after_listing(
            tree, monkeypatch, lambda: (store / "sessions/b.jsonl").unlink()
        )
    assert report.ok, report.errors
    assert sorted(os.listdir(tree.local / "codex-home/sessions")) == ["a.jsonl", "c.jsonl"]
    assert report.adapters[0].skipped == 1
    assert "restore.vanished path=sessions/b.jsonl" in caplog.text


@pytest.mark.posix_only("puts a directory where a durable file was: a bucket cannot")
def test_old_layout_file_that_cannot_be_read_still_fails(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _old_layout(tree)

    def replace_by_directory() -> None:
        (store / "sessions/b.jsonl").unlink()
        (store / "sessions/b.jsonl").mkdir()

    report = _restore_after_listing(tree, monkeypatch, replace_by_directory)
    [error] = report.errors
    assert error.path == "sessions/b.jsonl" and "not a regular file" in error.reason
    assert "manifest" not in error.reason


def test_restore_never_writes_outside_the_live_root_with_hostile_objects(
    tree: Tree, cli: CliRunner
) -> None:
    """Malformed and hostile entries together: the tree outside the live root is untouched."""
    store = tree.raw / DUR
    outside = tree.base / "outside"
    outside.mkdir()
    rows = [
        _file(store, "ok", b"ok"),
        {"path": "../up", "kind": "file", "size": 1, "mtime_ns": 1, "mode": 0o644},
        {"path": "x", "kind": "symlink", "mtime_ns": 1, "target": str(outside)},
        {"path": "x/y", "kind": "file", "size": 2, "mtime_ns": 1, "object": "ok"},
        {"path": "z", "kind": "file", "size": 2, "mtime_ns": 10**30, "object": "ok"},
    ]
    _manifest(store, rows)
    before = {k: v for k, v in snapshot(tree.base).items() if not k.startswith("local")}
    out = cli("restore", "codex", check=1)
    assert "Traceback" not in out.stderr
    after = {k: v for k, v in snapshot(tree.base).items() if not k.startswith("local")}
    assert after == before
    assert list(outside.iterdir()) == []


BAD_VALUES: dict[str, list[Any]] = {
    "kind": [7, "", "Bad Kind", "invalid", None, ["file"]],
    "size": [-1, "12", 1.5, True, 2**63, None, {}],
    "mtime_ns": [10**30, -(10**30), "1", 1.0, False, 2**63],
    "mode": [-1, 0o10000, 2**40, "0644", 4.0, True],
    "hash": ["md5:abc", "xxh3_64:zz", "xxh3_64:" + "0" * 15, 5, []],
    "object": [5, "", "a\0b", []],
    "path": [None, 5, "", "a\0b", "p\ud800", [], "../up", "/abs", "a/../../b", "a//b"],
    "target": [None, "", "a\0b", 7, "\udfff\ud800"],
}
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
_entry = st.one_of(
    st.tuples(
        st.just("good"),
        st.sampled_from([0o644, 0o600, 0o6755, 0o1777, 0o4711, 0]),
        st.integers(-(10**18), 4 * 10**18),
    ),
    st.tuples(st.just("bad"), st.sampled_from(sorted(BAD_VALUES)), st.data()),
    st.tuples(
        st.just("garbage"),
        _json.filter(lambda v: not (isinstance(v, dict) and "path" in v)),
        st.none(),
    ),
)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(_entry, min_size=1, max_size=8))
def test_property_malformed_entries_never_raise_never_escape_and_are_each_reported(
    tree: Tree, drawn: list[tuple[Any, Any, Any]]
) -> None:
    """Whatever the entry lines hold, restore returns a report (no exception), writes
    nothing outside the live root, names every bad entry, and restores every good one
    (without setuid, setgid or sticky bits)."""
    n = len(list((tree.base / "states").glob("*"))) if (tree.base / "states").exists() else 0
    store, live = tree.raw / f"state/h{n}", tree.local / f"h{n}"
    rows: list[Any] = []
    good: dict[str, tuple[bytes, int]] = {}
    named: list[str] = []
    for i, (what, a, b) in enumerate(drawn):
        if what == "good":
            data = f"content {i}".encode()
            rows.append(_file(store, f"g/{i}", data, mode=a, mtime_ns=b))
            good[f"g/{i}"] = (data, a & 0o777)
        elif what == "bad":
            value = b.draw(st.sampled_from(BAD_VALUES[a]))
            row = (
                {"path": f"b/{i}", "kind": "symlink", "mtime_ns": 1}
                if a == "target"
                else {"path": f"b/{i}", "kind": "file", "size": 1, "mtime_ns": 1, "mode": 0o644}
            )
            row[a] = value
            rows.append(row)
            usable = (
                isinstance(row["path"], str)
                and row["path"]
                and "\0" not in row["path"]
                and "\ud800" not in row["path"]
            )
            named.append(row["path"] if usable else f"line {i + 2}")
        else:
            rows.append(a)
            named.append(f"line {i + 2}")
    _manifest(store, rows)
    raw = {
        "state_dir": str(tree.base / "states" / str(n)),
        "adapters": [],
        "adapter": [{"name": "h", "live": f"h{n}", "durable": f"state/h{n}"}],
    }

    def outside() -> tuple[dict[str, Any], ...]:  # the bucket, and the local side but h<n>
        return snapshot(tree.raw), {
            k: v
            for k, v in snapshot(tree.local).items()
            if k != f"h{n}" and not k.startswith(f"h{n}/")
        }

    before = outside()
    report = Engine(config_from_dict(raw, env=tree.env())).restore()
    assert outside() == before and not os.path.lexists("/abs")
    reported = [e.path for e in report.errors]
    for name in named:
        assert any(name == p or (name.startswith("line") and p.endswith(name)) for p in reported), (
            name,
            reported,
        )
    assert report.ok == (not named)
    for rel, (data, mode) in good.items():
        st_ = (live / rel).stat()
        assert (live / rel).read_bytes() == data and stat.S_IMODE(st_.st_mode) == mode
