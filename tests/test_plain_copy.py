"""A transcript's plain copy: the whole log at its own durable path, beside its chain.

Published when the log goes quiet, at compaction, when its first chain replaces a plain
copy, and after a final checkpoint; restore takes it only where it extends the chain.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from syncengine import Engine, config_from_dict
from syncengine.durable import chain, manifest
from tests.bucket_mount import BucketMount
from tests.conftest import CliRunner, Tree
from tests.helpers import set_mtime

pytestmark = pytest.mark.s3

LOG = "sessions/rollout-1.jsonl"
T0 = 1_800_000_000 * 10**9  # the log's mtime; the engine's clock counts from here
S = 10**9


def _engine(
    tree: Tree, now_s: float, *, plain_after: float = 60, data: Path | None = None
) -> Engine:
    raw: dict[str, Any] = {
        "adapters": [],
        "plain_after": plain_after,
        "adapter": [{"name": "x", "live": "x", "durable": "state/x", "segments": ["*.jsonl"]}],
    }
    env = tree.env(**({"DATA_DIR": str(data)} if data else {}))
    return Engine(config_from_dict(raw, env=env), clock=lambda: T0 + int(now_s * S))


def _append(path: Path, data: bytes, mtime_s: float) -> None:
    with path.open("ab") as f:
        f.write(data)
    os.utime(path, ns=(T0 + int(mtime_s * S),) * 2)


def _plain(tree: Tree) -> Path:
    return tree.raw / "state/x" / LOG


def _entry(tree: Tree) -> manifest.Entry:
    return manifest.load(tree.store("state/x")).entries[LOG]


def test_a_quiet_log_is_published_whole_at_its_plain_path_once(tree: Tree) -> None:
    path = tree.write(f"x/{LOG}", b'{"n": 1}\n', mtime_ns=T0)
    assert _engine(tree, 5).checkpoint().ok
    _append(path, b'{"n": 2}\n', 15)
    assert _engine(tree, 20).checkpoint().ok  # appending: a segment, no plain copy yet
    assert not _plain(tree).exists()
    plan = _engine(tree, 15 + 59).checkpoint(dry_run=True).adapters[0].plan
    assert plan == (), "not quiet for plain_after yet"
    plan = _engine(tree, 15 + 61).checkpoint(dry_run=True).adapters[0].plan
    assert plan == (f"plain {LOG} (quiet for 60 s: the whole log at its plain path, 18 bytes)",)
    report = _engine(tree, 15 + 61).checkpoint()
    assert report.ok and report.files == 0 and report.bytes == 18
    assert report.adapters[0].plain_copies == 1
    assert _plain(tree).read_bytes() == path.read_bytes()  # a direct listing shows it whole
    assert _plain(tree).stat().st_mtime_ns == path.stat().st_mtime_ns
    assert _entry(tree).extra["plain"]["size"] == 18, "the manifest records what is there"
    with tree.no_durable_ops(reach=True):  # current: an idle pass writes nothing
        assert _engine(tree, 15 + 200).checkpoint().files == 0
    # the next appends go to the chain again; once quiet, the plain copy follows
    _append(path, b'{"n": 3}\n', 220)
    assert _engine(tree, 225).checkpoint().files == 1
    assert _plain(tree).stat().st_size == 18, "appending: the plain path lags"
    _engine(tree, 290).checkpoint()
    assert _plain(tree).read_bytes() == path.read_bytes()


def test_compaction_publishes_the_plain_copy(tree: Tree) -> None:
    path = tree.write(f"x/{LOG}", b"a\n", mtime_ns=T0)
    assert _engine(tree, 5, plain_after=86400).checkpoint().ok
    _append(path, b"b\n", 10)
    assert _engine(tree, 15, plain_after=86400).checkpoint().ok
    assert not _plain(tree).exists()
    plan = _engine(tree, 400, plain_after=86400).checkpoint(dry_run=True).adapters[0].plan
    assert plan[0].startswith(f"compact {LOG} (idle log") and "plain path" in plan[0]
    assert _engine(tree, 400, plain_after=86400).checkpoint().ok
    assert _plain(tree).read_bytes() == b"a\nb\n"


def test_the_first_chain_over_an_old_plain_copy_refreshes_it_at_once(
    tree: Tree, cli: CliRunner
) -> None:
    old = tree.durable / "state/x" / LOG  # the rsync script's copy: no manifest
    old.parent.mkdir(parents=True)
    old.write_bytes(b"1\n")
    set_mtime(old, T0)
    assert _engine(tree, 1).restore().ok
    _append(tree.local / "x" / LOG, b"2\n", 5)
    plan = _engine(tree, 10).checkpoint(dry_run=True).adapters[0].plan
    assert set(plan) == {
        f"segments {LOG} (new chain: not a segment chain yet, 4 bytes; then whole "
        "at its plain path: first chain over its plain copy)",
        "dir sessions/ (new, mode 0700)",
    }  # made by restore for the log, not yet recorded
    assert _engine(tree, 10).checkpoint().ok
    assert _plain(tree).read_bytes() == b"1\n2\n", "not stale until the log goes quiet"


def test_a_final_checkpoint_leaves_every_log_whole_at_its_plain_path(tree: Tree) -> None:
    path = tree.write(f"x/{LOG}", b"1\n", mtime_ns=T0)
    other = tree.write("x/sessions/rollout-2.jsonl", b"x\n", mtime_ns=T0)
    assert _engine(tree, 5).checkpoint().ok
    _append(path, b"2\nhalf", 10)
    report = _engine(tree, 15).checkpoint(final=True)
    assert report.ok
    assert _plain(tree).read_bytes() == b"1\n2\nhalf"
    assert (tree.raw / "state/x/sessions/rollout-2.jsonl").read_bytes() == other.read_bytes()
    with tree.no_durable_ops(reach=True):
        assert _engine(tree, 20).checkpoint(final=True).files == 0


def _chain_then_plain(tree: Tree, plain: bytes) -> bytes:
    """A log checkpointed as a chain of b"1\\n2\\n", then `plain` written at its plain path
    (as the old script would after a rollback); the local tree wiped (a new container)."""
    path = tree.write(f"x/{LOG}", b"1\n", mtime_ns=T0)
    assert _engine(tree, 5).checkpoint().ok
    _append(path, b"2\n", 6)
    assert _engine(tree, 10).checkpoint().ok
    target = tree.durable / "state/x" / LOG
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(plain)
    set_mtime(target, T0 + 10 * S)
    shutil.rmtree(tree.local)
    return path.read_bytes() if path.exists() else b"1\n2\n"


@pytest.mark.parametrize(
    ("plain", "restored"),
    [
        (b"1\n2\n3\n", b"1\n2\n3\n"),  # newer, extends the chain: its extra line is restored
        (b"1\n", b"1\n2\n"),  # stale: the chain is newer
        (b"1\n2\n3", b"1\n2\n"),  # longer but torn mid-line: never wins
        (b"1\nX\n3\n", b"1\n2\n"),  # longer but not the chain's content: never wins
    ],
)
def test_restore_takes_the_newest_of_the_plain_copy_and_the_chain(
    tree: Tree, cli: CliRunner, plain: bytes, restored: bytes
) -> None:
    _chain_then_plain(tree, plain)
    assert _engine(tree, 20).restore().ok
    assert (tree.local / "x" / LOG).read_bytes() == restored
    _append(tree.local / "x" / LOG, b"4\n", 25)
    assert _engine(tree, 30).checkpoint().ok
    shutil.rmtree(tree.local)  # what the chain holds now is all of it, in order
    assert _engine(tree, 35).restore().ok
    assert (tree.local / "x" / LOG).read_bytes() == restored + b"4\n"
    lens = [p.length for p in chain.load(tree.store("state/x"), _entry(tree)).pieces]
    assert lens == [2, 2, len(restored) + 2 - 4], "the same chain, continued once"


def test_a_hot_restart_keeps_a_local_log_as_new_as_the_plain_copy(tree: Tree) -> None:
    _chain_then_plain(tree, b"1\n2\n3\n")
    (tree.local / "x/sessions").mkdir(parents=True)
    local = tree.write(f"x/{LOG}", b"1\n2\n3\nlocal\n", mtime_ns=T0 + 11 * S)
    report = _engine(tree, 20).restore()
    assert report.ok and report.adapters[0].kept_local == 1
    assert local.read_bytes() == b"1\n2\n3\nlocal\n"


def test_export_includes_what_the_plain_copy_adds(tree: Tree, cli: CliRunner) -> None:
    _chain_then_plain(tree, b"1\n2\n3\n")
    conf = tree.base / "x.toml"
    conf.write_text(
        'adapters = []\n[[adapter]]\nname = "x"\nlive = "x"\n'
        'durable = "state/x"\nsegments = ["*.jsonl"]\n'
    )
    assert cli("--config", str(conf), "export", LOG, check=0).stdout == "1\n2\n3\n"


@pytest.mark.dir_only("mounts its own emulator without rename")
def test_no_plain_copy_on_a_mount_without_rename(
    tree: Tree, bucket_factory: Callable[..., BucketMount]
) -> None:
    mount = bucket_factory(rename=False, rename_errno="ENOSYS")
    path = tree.write(f"x/{LOG}", b"1\n", mtime_ns=T0)
    assert _engine(tree, 5, data=mount.mountpoint).checkpoint().ok
    assert _engine(tree, 100, data=mount.mountpoint).checkpoint().ok
    assert not (mount.backing / "state/x" / LOG).exists()
    assert not list((mount.backing / "state/x/.syncengine").glob("objects/sessions/**/*"))
    with tree.no_durable_ops():  # and it is not tried again every pass
        before = sorted(p for p in mount.backing.rglob("*"))
        assert _engine(tree, 200, data=mount.mountpoint).checkpoint().files == 0
        assert sorted(p for p in mount.backing.rglob("*")) == before
    assert path.exists()


def test_gc_deletes_a_deleted_logs_plain_copy_with_its_chains(tree: Tree) -> None:
    path = tree.write(f"x/{LOG}", b"1\n", mtime_ns=T0)
    tree.write("x/keep.txt", "k", mtime_ns=T0)
    assert _engine(tree, 5).checkpoint().ok
    assert _engine(tree, 100).checkpoint().ok
    assert _plain(tree).exists()
    path.unlink()
    for t in (200, 210, 220):
        assert _engine(tree, t).checkpoint().ok
    raw: dict[str, Any] = {
        "adapters": [],
        "gc": {"grace_seconds": 0},
        "adapter": [{"name": "x", "live": "x", "durable": "state/x", "segments": ["*.jsonl"]}],
    }
    eng = Engine(config_from_dict(raw, env=tree.env()), clock=lambda: T0 + 300 * S)
    report = eng.gc(apply=True)
    assert report.ok, report.lines()
    assert not _plain(tree).exists()
    assert (tree.raw / "state/x/keep.txt").exists()


@pytest.mark.dir_only("counts the objects written: the same rule on every store")
@pytest.mark.parametrize("seeded_final", [True, False])
def test_a_restored_log_is_not_published_again(tree: Tree, seeded_final: bool) -> None:
    """Restore into an empty local root, then a final checkpoint: no segment, no chain;
    only the plain copy a non-final checkpoint had not written yet (what any final
    checkpoint writes), once.  Fails when the restored copy is taken for new bytes."""
    tree.write(f"x/{LOG}", b"1\n2\n", mtime_ns=T0)
    assert _engine(tree, 5).checkpoint(final=seeded_final).ok
    shutil.rmtree(tree.local)
    tree.local.mkdir()
    assert _engine(tree, 10).restore().ok
    segments = sorted(tree.raw.glob("state/x/.syncengine/segments/**/*.seg"))
    report = _engine(tree, 15).checkpoint(final=True)
    assert report.ok and report.files == 0
    assert sorted(tree.raw.glob("state/x/.syncengine/segments/**/*.seg")) == segments
    assert report.adapters[0].plain_copies == (0 if seeded_final else 1)
    assert _plain(tree).read_bytes() == b"1\n2\n"
    with tree.no_durable_ops(reach=True):
        assert _engine(tree, 20).checkpoint(final=True).files == 0
