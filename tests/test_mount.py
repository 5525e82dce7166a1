"""On object-storage mounts: the probe, the no-rename fallback, and a durable root that is gone.

These tests mount the fusebucket emulator with specific options themselves
(`bucket_factory`), so they use `tree` for its local side only.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from syncengine.durable import manifest
from syncengine.durable.posix.mount import Capabilities, is_mountpoint
from syncengine.durable.posix.probe import probe
from tests.bucket_mount import BucketMount
from tests.conftest import CliRunner, EngineFactory, Tree
from tests.helpers import files

pytestmark = pytest.mark.dir_only("mounts its own emulator with specific options")
Factory = Callable[..., BucketMount]
DUR = "state/codex"


def _env(tree: Tree, data: Path, **extra: str) -> dict[str, str]:
    return tree.env(DATA_DIR=str(data), **extra)


def test_probe_of_a_plain_directory_and_of_the_emulator(
    tree: Tree, bucket_factory: Factory
) -> None:
    local = probe(tree.data)
    assert local.rename_supported and local.attrs_on_handle and not local.append_refused
    assert not local.mounted and not local.attrs_after_close
    mount = bucket_factory("renaming")
    caps = probe(mount.mountpoint)
    assert caps.rename_supported and caps.append_refused and caps.mounted
    assert caps.fstype.startswith("fuse") and not caps.attrs_on_handle and caps.attrs_after_close
    assert caps.set_mtime and caps.set_mode
    for errno_name in ("EXDEV", "ENOSYS"):
        m = bucket_factory(f"no-{errno_name}", rename=False, rename_errno=errno_name)
        caps = probe(m.mountpoint)
        assert not caps.rename_supported and caps.rename_error == errno_name
        assert "switching the manifest" in caps.describe()
    # the scratch directory is gone from both the bucket and the mount
    assert list(mount.backing.iterdir()) == [mount.backing / ".fusebucket-tmp"]
    assert list(mount.mountpoint.iterdir()) == []
    assert list(tree.data.iterdir()) == []


def test_no_rename_mount_publishes_new_objects_and_switches_the_manifest(
    tree: Tree, cli: CliRunner, bucket_factory: Factory
) -> None:
    mount = bucket_factory(rename=False, rename_errno="ENOSYS", stats=True)
    env = _env(tree, mount.mountpoint)
    tree.write("codex-home/history.jsonl", "one\n", mode=0o640)
    tree.write("codex-home/auth.json", "s", mode=0o600)
    cli("checkpoint", env=env, check=0)
    status = cli("status", env=env, check=0).stdout
    assert "rename: no (ENOSYS)" in status and "appends refused" in status
    store = mount.backing / DUR
    assert files(store) == {}  # nothing at the plain paths: every version is a unique object
    base = (store / ".syncengine/manifest/000000000001.g000000000001.base.jsonl").read_text()
    entries = {e.path: e for e in manifest.decode(base.encode())[1]}
    first = entries["history.jsonl"].object
    assert first and first.startswith(".syncengine/objects/history.jsonl/")
    assert (store / first).read_bytes() == b"one\n"
    assert not (store / ".syncengine/staging").exists()
    tree.write("codex-home/history.jsonl", "one\ntwo\n")
    cli("checkpoint", env=env, check=0)
    delta = (store / ".syncengine/manifest/000000000002.g000000000002.delta.jsonl").read_text()
    second = manifest.decode(delta.encode())[1][0].object
    assert second and second != first and (store / second).read_bytes() == b"one\ntwo\n"
    assert (store / first).read_bytes() == b"one\n"  # the old version is left for gc
    ops = mount.stats()
    assert ops["rename"] == ops["rename.ENOSYS"] == 1  # the probe's attempt, never again
    shutil.rmtree(tree.local)
    cli("restore", env=env, check=0)
    assert (tree.local / "codex-home/history.jsonl").read_text() == "one\ntwo\n"
    assert (tree.local / "codex-home/auth.json").stat().st_mode & 0o777 == 0o600
    assert (tree.local / "codex-home/history.jsonl").stat().st_mode & 0o777 == 0o640


def test_base_manifest_keeps_objects_after_the_index_is_lost(
    tree: Tree, engine: EngineFactory, bucket_factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    mount = bucket_factory(rename=False)
    raw = {"adapters": ["codex"]}
    for i in range(3):
        tree.write(f"codex-home/s/{i}.jsonl", f"{i}\n")
    assert engine(raw, DATA_DIR=str(mount.mountpoint)).checkpoint().ok
    shutil.rmtree(tree.state)  # a new container: the index is rebuilt from the manifest
    monkeypatch.setattr(manifest, "COMPACT_AFTER", 0)  # the next manifest is a base
    tree.write("codex-home/s/new.jsonl", "new\n")
    report = engine(raw, DATA_DIR=str(mount.mountpoint)).checkpoint()
    assert report.ok and report.files == 1
    from syncengine.durable.posix.store import Store

    state = manifest.load(Store(mount.mountpoint / DUR))
    assert state.base_seq == 2
    assert all(e.object for e in state.entries.values() if e.kind != "dir"), state.entries
    shutil.rmtree(tree.local)
    assert engine(raw, DATA_DIR=str(mount.mountpoint)).restore().ok
    assert (tree.local / "codex-home/s/1.jsonl").read_text() == "1\n"
    assert (tree.local / "codex-home/s/new.jsonl").read_text() == "new\n"


def test_dead_mount_is_a_clear_error_never_an_empty_store(
    tree: Tree, cli: CliRunner, bucket_factory: Factory
) -> None:
    mount = bucket_factory()
    env = _env(tree, mount.mountpoint)
    tree.write("codex-home/a.json", "a")
    cli("checkpoint", env=env, check=0)
    mount.kill()  # the FUSE daemon dies: every path under the mount is ENOTCONN
    shutil.rmtree(tree.local)
    out = cli("restore", env=env, check=1)
    assert "Transport endpoint is not connected" in out.stderr and "remount" in out.stderr
    assert "restored" not in out.stdout  # no success line for a stopped adapter
    assert out.stderr.count("Transport endpoint is not connected") == 1  # said once
    tree.write("codex-home/b.json", "b")
    out = cli("checkpoint", env=env, check=1)
    assert "Transport endpoint is not connected" in out.stderr


def test_unmounted_mountpoint_is_refused_by_restore(
    tree: Tree, cli: CliRunner, bucket_factory: Factory
) -> None:
    mount = bucket_factory()
    env = _env(tree, mount.mountpoint)
    tree.write("codex-home/a.json", "a")
    cli("checkpoint", env=env, check=0)
    mount.unmount()  # an empty directory where the bucket was
    assert not is_mountpoint(mount.mountpoint) and list(mount.mountpoint.iterdir()) == []
    out = cli("restore", env=env, check=1)
    assert "was a mount point" in out.stderr and "not mounted" in out.stderr


def test_require_mount(tree: Tree, cli: CliRunner, bucket_factory: Factory) -> None:
    conf = tree.base / "syncengine.toml"
    conf.write_text("require_mount = true\n")
    tree.write("codex-home/a.json", "a")
    env = tree.env(SYNCENGINE_CONFIG=str(conf))
    out = cli("restore", env=env, check=1)  # data/ is a plain directory here
    assert "is not a mount point (require_mount = true)" in out.stderr
    out = cli("checkpoint", env=env, check=1)
    assert "is not a mount point" in out.stderr
    mount = bucket_factory()
    env = tree.env(SYNCENGINE_CONFIG=str(conf), DATA_DIR=str(mount.mountpoint))
    cli("checkpoint", env=env, check=0)
    status = json.loads(cli("status", "--json", env=env, check=0).stdout)
    assert status["config"]["require_mount"][0] is True
    assert status["durable_probe"]["mounted"] is True
    conf.write_text('require_mount = "yes"\n')
    assert "require_mount must be true or false" in cli("status", env=env, check=2).stderr


def test_capabilities_round_trip() -> None:
    caps = Capabilities(rename=False, rename_error="EXDEV", rename_visible=False)
    assert Capabilities.from_json(caps.to_json()) == caps
    assert Capabilities.from_json({"rename": 1, "bogus": 2}) is not None


def test_no_rename_mount_holds_segments_sqlite_snapshots_and_journal(
    tree: Tree, cli: CliRunner, bucket_factory: Factory
) -> None:
    """Every writer publishes without rename: log segments, snapshots, prompts."""
    import sqlite3
    from contextlib import closing

    mount = bucket_factory(rename=False, rename_errno="EXDEV", stats=True)
    env = _env(tree, mount.mountpoint)
    rollout = tree.write("codex-home/sessions/2026/11/29/rollout-a.jsonl", '{"n": 1}\n')
    db = tree.local / "codex-home/goals_1.sqlite"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("pragma journal_mode=wal")
        conn.execute("create table g (id)")
        conn.executemany("insert into g values (?)", [(i,) for i in range(10)])
        conn.commit()
    cli("checkpoint", "codex", env=env, check=0)
    with rollout.open("a") as f:
        f.write('{"n": 2}\n')
    cli("checkpoint", "codex", env=env, check=0)
    out = subprocess.run(
        [sys.executable, "-m", "syncengine", "journal", "record", "--session", "s1"],
        input=b"a prompt",
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert mount.stats().get("rename", 0) == mount.stats().get("rename.EXDEV", 0) == 1
    shutil.rmtree(tree.local)
    cli("restore", "codex", env=env, check=0)
    assert (tree.local / "codex-home/sessions/2026/11/29/rollout-a.jsonl").read_text() == (
        '{"n": 1}\n{"n": 2}\n'
    )
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        assert conn.execute("select count(*) from g").fetchone() == (10,)
    exported = subprocess.run(
        [sys.executable, "-m", "syncengine", "journal", "export", "--session", "s1"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert exported.returncode == 0 and b"a prompt" in exported.stdout


def test_mount_that_refuses_appends_at_close_is_probed_and_used(
    tree: Tree, cli: CliRunner, bucket_factory: Factory
) -> None:
    """rclone without a VFS cache accepts an O_APPEND open and fails its close (EPERM):
    the probe records it as 'appends refused' and checkpoints publish."""
    mount = bucket_factory(refuse_at_close=True)
    env = _env(tree, mount.mountpoint)
    tree.write("codex-home/a.json", "a")
    cli("checkpoint", env=env, check=0)
    assert "appends refused" in cli("status", env=env, check=0).stdout
    assert (mount.backing / DUR / "a.json").read_text() == "a"
    assert sorted(p.name for p in (mount.backing / DUR).iterdir()) == [".syncengine", "a.json"]


RAW_X = {
    "adapters": [],
    "adapter": [{"name": "x", "live": "x", "durable": "state/x", "segments": ["*.jsonl"]}],
}


def test_object_refused_at_close_keeps_the_previous_version_and_says_so(
    tree: Tree, engine: EngineFactory, bucket_factory: Factory
) -> None:
    """An error at close is the mount refusing that object: it was not written, the
    previous version stays (for a file and for a transcript's new segment), the run
    goes on with the rest, ends incomplete, and the path is retried next pass."""
    mount = bucket_factory(refuse_containing="REFUSE")
    data = str(mount.mountpoint)
    log = tree.write("x/log.jsonl", "one\n")
    tree.write("x/a.json", "a1")
    tree.write("x/b.json", "b1")
    assert engine(RAW_X, DATA_DIR=data).checkpoint().ok
    tree.write("x/a.json", "a2 REFUSE")
    tree.write("x/b.json", "b2")
    with log.open("a") as f:
        f.write("two REFUSE\n")
    report = engine(RAW_X, DATA_DIR=data).checkpoint()
    assert not report.ok and report.adapters[0].fatal is None
    assert sorted(e.path for e in report.errors) == ["a.json", "log.jsonl"]
    assert all("refused the object at close" in e.reason for e in report.errors), report.errors
    durable = mount.backing / "state/x"
    assert (durable / "a.json").read_text() == "a1"
    assert (durable / "b.json").read_text() == "b2"
    assert not list(mount.backing.rglob("*.syncengine-tmp")), "a refused object was left"
    shutil.rmtree(tree.local / "x")
    assert engine(RAW_X, DATA_DIR=data).restore().ok
    assert [(tree.local / "x" / n).read_text() for n in ("a.json", "b.json", "log.jsonl")] == [
        "a1",
        "b2",
        "one\n",
    ]
    tree.write("x/a.json", "a3")
    with log.open("a") as f:
        f.write("three\n")
    assert engine(RAW_X, DATA_DIR=data).checkpoint().ok
    shutil.rmtree(tree.local / "x")
    assert engine(RAW_X, DATA_DIR=data).restore().ok
    assert (tree.local / "x/a.json").read_text() == "a3"
    assert (tree.local / "x/log.jsonl").read_text() == "one\nthree\n"


def test_manifest_refused_at_close_stops_the_adapter_and_says_so(
    tree: Tree, engine: EngineFactory, bucket_factory: Factory
) -> None:
    mount = bucket_factory(refuse_containing="REFUSE")
    tree.write("x/REFUSE.json", "only its name is refused: it is in the manifest")
    report = engine(RAW_X, DATA_DIR=str(mount.mountpoint)).checkpoint()
    fatal = report.adapters[0].fatal or ""
    assert "manifest" in fatal and "refused the object at close" in fatal, report
    assert not list((mount.backing / "state/x/.syncengine/manifest").glob("*.jsonl"))
