"""Directories are state: recorded in the manifest with their mode, restored, tombstoned.

On a bucket a directory exists only as a prefix of its objects (``mkdir`` on
the mount is kept in memory), so an empty one survives a container restart
only through its manifest entry.  These tests restart the way a container
does: the local tree and its state dir are gone, the durable side stays.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from syncengine import Engine, Runner
from syncengine.durable import manifest
from syncengine.durable.posix.store import MANIFEST_DIR
from syncengine.local.index import Index
from tests.conftest import CliRunner, EngineFactory, Tree
from tests.helpers import dir_modes

pytestmark = pytest.mark.s3

CONFIG = """adapters = []
[[adapter]]
name = "t"
live = "t"
durable = "state/t"
exclude = ["cache/"]
"""
RAW = {
    "adapters": [],
    "adapter": [{"name": "t", "live": "t", "durable": "state/t", "exclude": ["cache/"]}],
}
AHEAD_NS = 10 * 10**9  # a clock ahead: the directories just made are trusted by the table


def _conf(tree: Tree) -> str:
    conf = tree.base / "c.toml"
    conf.write_text(CONFIG)
    return str(conf)


def _live(tree: Tree) -> Path:
    return tree.local / "t"


def _restart(tree: Tree) -> None:
    """A container restart: the local root (state dir included) is empty again."""
    shutil.rmtree(tree.local)
    tree.local.mkdir()


def _entries(tree: Tree) -> dict[str, manifest.Entry]:
    return dict(manifest.load(tree.store("state/t")).entries)


def _mkdir(path: Path, mode: int) -> None:
    path.mkdir(parents=True)
    path.chmod(mode)  # whatever the umask


@pytest.mark.rclone
def test_empty_and_nested_empty_directories_round_trip(tree: Tree, cli: CliRunner) -> None:
    conf = _conf(tree)
    live = _live(tree)
    for d in ("empty", "a/b/c", "a/b/d", "x/y"):
        _mkdir(live / d, 0o755)
    tree.write("t/x/f.txt", "f\n")
    tree.write("t/cache/skipped/z.txt", "excluded\n")
    before = dir_modes(live)
    cli("--config", conf, "checkpoint", check=0)
    _restart(tree)
    out = cli("--config", conf, "restore", check=0)
    assert "7 directories" in out.stdout  # empty a a/b a/b/c a/b/d x x/y; never cache/
    assert dir_modes(live) == {d: m for d, m in before.items() if not d.startswith("cache")}
    assert (live / "x/f.txt").read_text() == "f\n"
    with tree.no_durable_ops(reach=True):  # restored dirs are recorded: idle next pass
        assert " 0 unchanged" in cli("--config", conf, "checkpoint", check=0).stdout


@pytest.mark.rclone
def test_directory_modes_round_trip(tree: Tree, cli: CliRunner) -> None:
    """Directory modes: 0700, 0750, 0755 round-trip on every store kind."""
    conf = _conf(tree)
    live = _live(tree)
    modes = {
        "credentials": 0o700,
        "shared": 0o750,
        "public": 0o755,
        "public/inner": 0o700,
        "empty700": 0o700,
        "empty750": 0o750,
    }
    for d in modes:
        _mkdir(live / d, 0o755)
    tree.write("t/credentials/key.json", "{}", mode=0o600)
    tree.write("t/shared/notes.md", "n\n")
    for d, mode in modes.items():
        (live / d).chmod(mode)
    cli("--config", conf, "checkpoint", check=0)
    assert {p: e.mode for p, e in _entries(tree).items() if e.kind == "dir"} == modes
    _restart(tree)
    cli("--config", conf, "restore", check=0)
    assert dir_modes(live) == modes
    assert stat.S_IMODE((live / "credentials/key.json").stat().st_mode) == 0o600


@pytest.mark.memory
def test_a_new_or_changed_directory_is_in_the_next_manifest_and_idle_stays_idle(
    tree: Tree, engine: EngineFactory
) -> None:
    """With the directory table trusted (a clock ahead): a new directory and a chmod reach
    the next pass's manifest object; an idle pass writes nothing; a removed directory is
    counted absent and kept in the manifest (gc drops it)."""
    base = engine(RAW)
    eng = Engine(
        base.config, stores=base.stores, clock=lambda: time.time_ns() + AHEAD_NS, scan_workers=1
    )
    live = _live(tree)
    for d in ("a/b", "c", "full"):
        _mkdir(live / d, 0o755)
    tree.write("t/full/f.txt", "f\n")
    eng.checkpoint()
    eng.checkpoint()
    with tree.no_durable_ops():
        report = eng.checkpoint()
    assert (report.files, report.adapters[0].dirs, report.adapters[0].manifest) == (0, 0, None)
    (live / "a/b").chmod(0o700)
    (live / "full").chmod(0o750)
    _mkdir(live / "c/new/deeper", 0o711)
    report = eng.checkpoint()
    assert (report.files, report.adapters[0].dirs) == (0, 4)  # a/b full c/new c/new/deeper
    recorded = {p: e.mode for p, e in _entries(tree).items() if e.kind == "dir"}
    assert recorded == dir_modes(live)
    assert (recorded["a/b"], recorded["full"], recorded["c/new/deeper"]) == (0o700, 0o750, 0o711)
    with tree.no_durable_ops():
        eng.checkpoint()
    (live / "c/new/deeper").rmdir()
    with tree.no_durable_ops():  # nothing durable holds a directory: nothing to write
        eng.checkpoint()
    index = Index.load(tree.state / "index" / "t.idx")
    assert index is not None and index.dir_record("c/new/deeper") == (0o711, 1)
    assert "c/new/deeper" in _entries(tree)  # until gc's tombstone drops it


def test_a_git_repository_with_empty_refs_works_after_restore(tree: Tree, cli: CliRunner) -> None:
    """opencode keeps a git repository per project; git needs its empty refs/ to call it
    one (refs/heads, refs/tags, objects/pack, branches are empty after `git init`)."""
    conf = _conf(tree)
    repo = _live(tree) / "snapshot/proj"
    repo.mkdir(parents=True)
    env = {
        **os.environ,
        "HOME": str(tree.base),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, timeout=60
        )

    assert git("init", "-q").returncode == 0
    (repo / "a.txt").write_text("a\n")
    empty = [
        d
        for d in ("refs/heads", "refs/tags", "objects/pack", "branches")
        if not any((repo / ".git" / d).iterdir())
    ]
    assert empty, "git init made no empty directory: nothing to test"
    assert git("status", "--porcelain").returncode == 0
    cli("--config", conf, "checkpoint", check=0)
    _restart(tree)
    cli("--config", conf, "restore", check=0)
    for d in empty:
        assert (repo / ".git" / d).is_dir(), d
    status = git("status", "--porcelain")
    assert status.returncode == 0, status.stderr
    assert status.stdout == "?? a.txt\n"


def _write_manifest(store_root: Path, lines: list[dict[str, object]]) -> None:
    """A hand-written base manifest object (what anyone who can write the bucket can do)."""
    header = {
        "syncengine_manifest": manifest.FORMAT,
        "adapter": "t",
        "seq": 1,
        "type": "base",
        "created_ns": 1,
    }
    body = [json.dumps(header), *map(json.dumps, lines), json.dumps({"end": len(lines)})]
    (store_root / MANIFEST_DIR).mkdir(parents=True)
    (store_root / MANIFEST_DIR / f"{1:012d}.base.jsonl").write_text("\n".join(body) + "\n")


def test_special_bits_on_directories_are_dropped_and_bad_modes_refused(
    tree: Tree, cli: CliRunner
) -> None:
    conf = _conf(tree)
    _write_manifest(
        tree.durable / "state/t",
        [
            {"path": "sgid", "kind": "dir", "mode": 0o2755},
            {"path": "suid/inner", "kind": "dir", "mode": 0o4700},
            {"path": "sticky", "kind": "dir", "mode": 0o1777},
            {"path": "huge", "kind": "dir", "mode": 0o17777},
            {"path": "nomode", "kind": "dir"},
            {"path": "text", "kind": "dir", "mode": "0755"},
        ],
    )
    out = cli("--config", conf, "restore", check=1)
    live = _live(tree)
    assert dir_modes(live) == {"sgid": 0o755, "suid": 0o700, "suid/inner": 0o700, "sticky": 0o777}
    assert "restore.mode-dropped path=sgid mode=2755 restored=0755" in out.stderr
    assert "restore.mode-dropped path=suid/inner mode=4700 restored=0700" in out.stderr
    for path in ("huge", "nomode", "text"):
        assert f"t: restore {path}: malformed manifest entry" in out.stderr, path
        assert not (live / path).exists()


def _without_dac_override() -> None:  # in the child, before exec
    """Drop the capabilities that let root ignore permission bits, so a root test run sees
    what any other user sees (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH; PR_CAPBSET_DROP)."""
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in (1, 2):
            if libc.prctl(24, cap, 0, 0, 0) != 0:
                os._exit(97)


def _unprivileged(tree: Tree, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "syncengine", *args],
        capture_output=True,
        text=True,
        env=tree.env(),
        cwd=tree.base,
        timeout=120,
        preexec_fn=_without_dac_override,
    )


def test_a_read_only_directory_is_restored_with_everything_inside(
    tree: Tree, cli: CliRunner
) -> None:
    """A 0500 directory's mode is set after its files are placed: set first, it would keep
    restore from writing them (permission bits bind root too once it drops DAC override)."""
    conf = _conf(tree)
    live = _live(tree)
    probe = tree.base / "probe"
    _mkdir(probe, 0o500)
    denied = subprocess.run(
        [sys.executable, "-c", f"open({str(probe / 'x')!r}, 'w')"],
        capture_output=True,
        preexec_fn=_without_dac_override,
        timeout=60,
    )
    if denied.returncode in (0, 97):
        pytest.skip("cannot drop CAP_DAC_OVERRIDE here: a 0500 directory would not bind")
    tree.write("t/ro/a.txt", "a\n")
    tree.write("t/ro/sub/b.txt", "b\n")
    (live / "ro/sub").chmod(0o555)
    (live / "ro").chmod(0o500)
    cli("--config", conf, "checkpoint", check=0)
    _restart(tree)
    out = _unprivileged(tree, "--config", conf, "restore")
    assert out.returncode == 0, out.stderr
    assert (live / "ro/a.txt").read_text() == "a\n"
    assert (live / "ro/sub/b.txt").read_text() == "b\n"
    assert dir_modes(live) == {"ro": 0o500, "ro/sub": 0o555}


@pytest.mark.dir_only("the watcher watches the local tree only")
@pytest.mark.xdist_group("inotify")  # waits for hints: not beside test_watch's overflow test
def test_a_watcher_driven_pass_records_a_new_empty_directory_and_a_chmod(
    tree: Tree, engine: EngineFactory
) -> None:
    live = _live(tree)
    _mkdir(live / "old", 0o755)
    tree.write("t/f.txt", "f\n")
    runner = Runner(engine(RAW), interval=0.05, rescan_interval=3600)
    with runner:
        _until(
            lambda: (
                runner.passes >= 1
                and runner.watcher is not None
                and runner.watcher.pending()["t"] is not None
            )
        )  # the first (full) walk is done
        assert runner.mode == "events"
        _mkdir(live / "new", 0o755)
        (live / "old").chmod(0o700)
        _until(
            lambda: (
                {p: e.mode for p, e in _entries(tree).items() if e.kind == "dir"}
                == {"old": 0o700, "new": 0o755}
            )
        )


def _until(cond: Callable[[], bool], timeout: float = 20) -> None:
    """Poll `cond` with a deadline (a watcher's events arrive asynchronously)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


@pytest.mark.memory
def test_removed_directories_are_tombstoned_and_a_file_turned_directory_waits_for_gc(
    tree: Tree, engine: EngineFactory
) -> None:
    """A removed directory is counted absent; gc drops its entry (no object to delete).  A
    file replaced by a directory of its name: the directory is not recorded while the file's
    entry (whose durable copy sits where the directory would go) is kept, is looked at again
    each pass, and is recorded in the pass after gc deleted the file."""
    raw = {**RAW, "gc": {"absent_passes": 1, "grace_seconds": 0}}
    base = engine(raw)
    eng = Engine(
        base.config, stores=base.stores, clock=lambda: time.time_ns() + AHEAD_NS, scan_workers=1
    )
    live = _live(tree)
    _mkdir(live / "gone/inner", 0o755)
    tree.write("t/f", "a file\n")
    for i in range(4):  # gc refuses when most of the manifest's paths are missing locally
        tree.write(f"t/keep{i}.txt", "k\n")
    eng.checkpoint()
    eng.checkpoint()
    shutil.rmtree(live / "gone")
    (live / "f").unlink()
    _mkdir(live / "f", 0o700)
    skip = (
        "skip f/ (a file of that name is still recorded; the directory is recorded once "
        "gc has dropped it)"
    )
    plan = eng.checkpoint(dry_run=True).adapters[0].plan
    assert skip in plan
    assert "absent gone/ (directory: its manifest entry is kept until gc)" in plan
    assert "absent gone/inner/ (directory: its manifest entry is kept until gc)" in plan
    eng.checkpoint()
    assert skip in eng.checkpoint(dry_run=True).adapters[0].plan  # the table walk, too
    eng.checkpoint()
    assert {"gone", "gone/inner", "f"} <= _entries(tree).keys()
    rep = eng.gc(apply=True).adapters[0]
    deleted = {a.split(" (")[0]: a.rsplit("; ", 1)[-1] for a in rep.actions if "(tombstone" in a}
    assert deleted == {
        "delete f": "1 object(s), 7 bytes)",
        "delete gone": "0 object(s), 0 bytes)",
        "delete gone/inner": "0 object(s), 0 bytes)",
    }, rep
    assert not {"gone", "gone/inner", "f"} & _entries(tree).keys()
    assert eng.checkpoint().adapters[0].dirs == 1
    assert _entries(tree)["f"] == manifest.Entry("f", "dir", mode=0o700)


def test_an_index_rebuilt_from_the_manifest_records_no_directory_again(
    tree: Tree, cli: CliRunner
) -> None:
    conf = _conf(tree)
    for d in ("a/b", "c"):
        _mkdir(_live(tree) / d, 0o750)
    tree.write("t/c/f.txt", "f\n")
    cli("--config", conf, "checkpoint", check=0)
    objects = manifest.list_objects(tree.store("state/t"))
    shutil.rmtree(tree.state / "index")  # lost: the next pass rebuilds it from the manifest
    out = cli("--config", conf, "checkpoint", check=0)
    assert "directories" not in out.stdout
    assert manifest.list_objects(tree.store("state/t")) == objects


def test_a_hot_restart_keeps_the_local_directory_mode_and_records_it(
    tree: Tree, cli: CliRunner
) -> None:
    """Invariant 5: the local tree of a hot restart is newer; a directory there keeps its
    mode, and the next checkpoint records that mode.  A missing one is made as recorded."""
    conf = _conf(tree)
    live = _live(tree)
    for d in ("kept", "gone"):
        _mkdir(live / d, 0o750)
    tree.write("t/kept/f.txt", "f\n")
    cli("--config", conf, "checkpoint", check=0)
    (live / "kept").chmod(0o700)  # after the checkpoint: the newer state
    (live / "gone").rmdir()
    out = cli("--config", conf, "restore", "--dry-run", check=0)
    assert "keep kept (exists locally with mode 0700; its mode is kept)" in out.stdout
    assert "mkdir gone/ (missing, mode 0750)" in out.stdout
    cli("--config", conf, "restore", check=0)
    assert dir_modes(live) == {"kept": 0o700, "gone": 0o750}
    assert "1 directory" in cli("--config", conf, "checkpoint", check=0).stdout
    assert _entries(tree)["kept"].mode == 0o700
