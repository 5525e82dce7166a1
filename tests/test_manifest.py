"""Manifest objects that cannot be read: when a restore is still complete, and when not.

Objects are damaged in the bucket (`tree.raw`), never through the mount.
The rules (syncengine/durable/manifest.py): an unreadable object loses what it
recorded unless a readable newer base supersedes it; only a torn newest
object written under its final name (a mount without rename, a killed
writer) is a checkpoint that never completed.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from syncengine.durable import manifest
from syncengine.durable.posix.store import Store
from syncengine.local.status import staging_marker
from tests.bucket_mount import BucketMount
from tests.conftest import CliRunner, Tree

pytestmark = pytest.mark.s3

MDIR = "state/codex/.syncengine/manifest"
OLD = 1_700_000_000 * 10**9


def _named(text: str, seq: int, kind: str) -> bool:
    """Whether `text` names manifest object `seq` of `kind` (any lease generation)."""
    return re.search(rf"{seq:012d}(\.g\d{{12}})?\.{kind}\.jsonl", text) is not None


def _object(root: Path, seq: int, kind: str) -> Path:
    """The object `seq` (named with the lease generation that wrote it), or where a
    generation-less one would be when there is none."""
    found = sorted((root / MDIR).glob(f"{seq:012d}.*{kind}.jsonl"))
    return found[-1] if found else root / MDIR / f"{seq:012d}.{kind}.jsonl"


def _checkpoints(
    tree: Tree, cli: CliRunner, *names: str, env: dict[str, str] | None = None
) -> None:
    """One checkpoint per name, each publishing codex-home/<name>.json (seq 1 is a base)."""
    for i, name in enumerate(names):
        tree.write(f"codex-home/{name}.json", f"{name} v1", mtime_ns=OLD + i)
        cli("checkpoint", "codex", env=env, check=0)


DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda data: data[: len(data) // 2],
    "garbage": lambda data: b"\x8f\x00 not a manifest \xff" * 20,
    "unknown format": lambda data: data.replace(
        b'"syncengine_manifest": 1', b'"syncengine_manifest": 7', 1
    ),
    "empty": lambda data: b"",
    "wrong end marker": lambda data: data.replace(b'{"end": 1}', b'{"end": 5}'),
}


def test_unreadable_base_makes_restore_incomplete_and_run_refuses(
    tree: Tree, cli: CliRunner
) -> None:
    """Before: nothing restored, a warning, exit 0, and `run` started the agent.  A base
    cut in half, on every store kind (the damage reaches the reader through each kind's
    reading); the other kinds of damage are the next test's, on a directory."""
    _unreadable_base(tree, cli, "truncated")


@pytest.mark.dir_only("how a damaged object is read is the manifest's, whatever the store")
@pytest.mark.parametrize("damage", sorted(set(DAMAGE) - {"truncated"}))
def test_each_damage_of_a_base_makes_restore_incomplete_and_run_refuse(
    tree: Tree, cli: CliRunner, damage: str
) -> None:
    _unreadable_base(tree, cli, damage)


def _unreadable_base(tree: Tree, cli: CliRunner, damage: str) -> None:
    _checkpoints(tree, cli, "a", "b")  # base 1 (a), delta 2 (b)
    base = _object(tree.raw, 1, "base")
    base.write_bytes(DAMAGE[damage](base.read_bytes()))
    shutil.rmtree(tree.local)
    out = cli("restore", "codex", check=1)
    assert _named(out.stderr, 1, "base") and "unreadable base" in out.stderr
    assert "codex" in out.stderr
    started = tree.base / "started"
    run = cli(
        "run",
        "--no-watch",
        "--",
        sys.executable,
        "-c",
        f"open({str(started)!r}, 'w').close()",
        check=1,
    )
    assert not started.exists(), run.stderr
    assert _named(run.stderr, 1, "base")


def test_unreadable_delta_is_lost_until_a_newer_base_supersedes_it(
    tree: Tree, cli: CliRunner
) -> None:
    _checkpoints(tree, cli, "a", "b", "c")  # base 1, deltas 2 and 3
    delta = _object(tree.raw, 2, "delta")
    delta.write_bytes(delta.read_bytes()[:-12])  # cut, but not the newest: never a kill
    shutil.rmtree(tree.local / "codex-home")
    out = cli("restore", "codex", check=1)
    assert _named(out.stderr, 2, "delta") and "unreadable delta" in out.stderr
    assert (tree.local / "codex-home/a.json").read_text() == "a v1"  # the rest goes on
    assert (tree.local / "codex-home/c.json").read_text() == "c v1"
    # the writer (its index knows b) writes a full base after a killed run: it supersedes
    tree.write("codex-home/b.json", "b v1", mtime_ns=OLD + 1)
    staging_marker(tree.state, "codex").touch()
    tree.write("codex-home/d.json", "d v1")
    cli("checkpoint", "codex", check=0)
    assert _object(tree.raw, 4, "base").exists()
    shutil.rmtree(tree.local)
    cli("restore", "codex", check=0)
    assert (tree.local / "codex-home/b.json").read_text() == "b v1"


def test_unreadable_old_base_superseded_by_a_newer_base_is_harmless(
    tree: Tree, cli: CliRunner
) -> None:
    _checkpoints(tree, cli, "a", "b")
    staging_marker(tree.state, "codex").touch()  # the next object is a base
    _checkpoints(tree, cli, "c")
    assert _object(tree.raw, 3, "base").exists()
    _object(tree.raw, 1, "base").write_bytes(b"garbage")
    _object(tree.raw, 2, "delta").write_bytes(b"")
    shutil.rmtree(tree.local)
    out = cli("restore", "codex", check=0)
    assert "manifest" not in out.stderr
    assert {p.name for p in (tree.local / "codex-home").iterdir()} == {"a.json", "b.json", "c.json"}


def test_cut_newest_delta_written_by_rename_is_incomplete(tree: Tree, cli: CliRunner) -> None:
    """With rename a killed writer's object never reaches its name: a cut one was cut later."""
    _checkpoints(tree, cli, "a", "b")
    delta = _object(tree.raw, 2, "delta")
    assert "in_place" not in delta.read_text()
    delta.write_bytes(delta.read_bytes().split(b"\n")[0] + b"\n")  # header only: a prefix
    shutil.rmtree(tree.local)
    out = cli("restore", "codex", check=1)
    assert _named(out.stderr, 2, "delta") and "written by rename" in out.stderr


@pytest.mark.dir_only("mounts its own emulator without rename")
@pytest.mark.parametrize("cut", ["after the header", "to nothing"])
def test_torn_newest_object_without_rename_is_a_checkpoint_that_never_completed(
    tree: Tree, cli: CliRunner, bucket_factory: Callable[..., BucketMount], cut: str
) -> None:
    """A mount without rename writes manifests under their final name; a killed writer's
    bytes are committed there.  The restore is as of the object before, complete, and the
    next object is a full base, so the torn one never sits inside the chain."""
    mount = bucket_factory(rename=False, rename_errno="ENOSYS", kill_mode="commit")
    env = tree.env(DATA_DIR=str(mount.mountpoint))
    _checkpoints(tree, cli, "a", env=env)
    tree.write("codex-home/a.json", "a v2", mtime_ns=OLD + 5)
    _checkpoints(tree, cli, "b", env=env)
    delta = _object(mount.backing, 2, "delta")
    data = delta.read_bytes()
    assert json.loads(data.split(b"\n")[0])["in_place"] is True
    delta.write_bytes(data.split(b"\n")[0] + b"\n" if cut == "after the header" else b"")
    shutil.rmtree(tree.local)
    out = cli("restore", "codex", env=env, check=0)
    assert _named(out.stderr, 2, "delta") and "never completed" in out.stderr
    assert (tree.local / "codex-home/a.json").read_text() == "a v1"  # as of the base
    assert not (tree.local / "codex-home/b.json").exists()
    tree.write("codex-home/c.json", "c")
    cli("checkpoint", "codex", env=env, check=0)
    assert _object(mount.backing, 3, "base").exists()
    state = manifest.load(Store(mount.mountpoint / "state/codex"))
    assert state.problems == () and state.warnings == () and state.base_seq == 3
    # torn, but no longer the newest and not superseded: lost information
    _object(mount.backing, 3, "base").unlink()
    tree.write("codex-home/d.json", "d")
    cli("checkpoint", "codex", env=env, check=0)  # delta 4 (this index wrote base 3)
    later = manifest.load(Store(mount.mountpoint / "state/codex"))
    assert any(_named(p, 2, "delta") for p in later.problems), later


def test_a_fork_fails_restore_and_verify_until_a_checkpoint_writes_a_base_above_it(
    tree: Tree, cli: CliRunner
) -> None:
    """Objects of older lease generations above the newest generation's last object (the
    issue-29 bucket: lease objects lost on a write-back mount, a generation taken too
    low) are a fork: the chain read is not the newest checkpoint, so restore exits 1
    instead of 0 with an older state, verify fails, and both name the repair.  A
    ``checkpoint --check-durable`` from the instance holding the newest local state
    writes a full base above the fork under a new generation; then a restore into an
    empty root is complete and has every file."""
    _checkpoints(tree, cli, "a", "b", "c", "d", "e")  # generations 1 to 5, one each
    for seq, gen in ((4, 1), (5, 2)):  # written as if the lease had restarted at 1
        path = _object(tree.raw, seq, "delta")
        path.rename(path.with_name(f"{seq:012d}.g{gen:012d}.delta.jsonl"))
    fresh = tree.env(AM_LOCAL=str(tree.base / "fresh"))
    out = cli("restore", env=fresh, check=1)
    assert "is not the newest checkpoint" in out.stderr, out.stderr
    assert "syncengine checkpoint --check-durable" in out.stderr
    out = cli("verify", "codex", check=1)
    assert "is not the newest checkpoint" in out.stdout, out.stdout
    cli("checkpoint", "codex", "--check-durable", check=0)
    assert sorted(p.name for p in (tree.raw / MDIR).iterdir())[-1].startswith(
        "000000000006.g000000000006.base"
    )
    again = tree.env(AM_LOCAL=str(tree.base / "again"))
    cli("restore", env=again, check=0)
    restored = tree.base / "again" / "codex-home"
    assert sorted(p.name for p in restored.glob("*.json")) == [f"{n}.json" for n in "abcde"]
    cli("verify", "codex", check=0)
