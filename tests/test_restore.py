"""Restore into empty and populated live trees, and path safety against hostile durable trees."""

from __future__ import annotations

import json
import shutil
import stat
import time
from pathlib import Path

import pytest

from tests.conftest import CliRunner, Tree
from tests.helpers import files, set_mtime

pytestmark = pytest.mark.s3

# Realistic state per built-in adapter (harnesses.md), relative to AM_LOCAL.
HARNESS_FILES: dict[str, dict[str, tuple[str, int]]] = {
    "codex": {
        "codex-home/sessions/2026/11/29/rollout-2026-11-29T10-00-abc.jsonl": ('{"t":1}\n', 0o644),
        "codex-home/archived_sessions/rollout-old.jsonl": ('{"t":0}\n', 0o644),
        "codex-home/history.jsonl": ('{"h":1}\n', 0o644),
        "codex-home/auth.json": ('{"token":"s"}', 0o600),
        "codex-home/config.toml": ('model = "o"\n', 0o644),
    },
    "claude": {
        "agent-state/claude/projects/-srv-app/0b1c.jsonl": ('{"m":1}\n', 0o644),
        "agent-state/claude/projects/-srv-app/0b1c/subagents/agent-1.jsonl": ("{}\n", 0o644),
        "agent-state/claude/.credentials.json": ('{"k":1}', 0o600),
        "agent-state/claude/history.jsonl": ("{}\n", 0o644),
    },
    "gemini": {
        "agent-state/gemini-home/.gemini/tmp/slug/chats/session-1-abcd1234.jsonl": ("{}\n", 0o644),
        "agent-state/gemini-home/.gemini/projects.json": ("{}", 0o644),
        "agent-state/gemini-home/.gemini/oauth_creds.json": ("{}", 0o600),
    },
    "openclaw": {
        "oc-home/.openclaw/openclaw.json": ("{}", 0o644),
        "oc-home/.openclaw/credentials/key.json": ("{}", 0o600),
        "oc-home/.openclaw/agents/a1/sessions/s.jsonl": ("{}\n", 0o644),
    },
    "opencode": {
        "opencode-share/opencode/storage/session/x.json": ("{}", 0o644),
    },
    "hermes": {
        "hermes/config.yaml": ("a: 1\n", 0o644),
    },
}
OLD = time.time_ns() - 3600 * 10**9


def _populate(tree: Tree) -> None:
    for i, (_name, entries) in enumerate(HARNESS_FILES.items()):
        for rel, (text, mode) in entries.items():
            tree.write(rel, text, mode=mode, mtime_ns=OLD + i)


def _check_restored(tree: Tree) -> None:
    for i, (_name, entries) in enumerate(HARNESS_FILES.items()):
        for rel, (text, mode) in entries.items():
            path = tree.local / rel
            assert path.read_text() == text, rel
            st = path.stat()
            assert stat.S_IMODE(st.st_mode) == mode, rel
            assert st.st_mtime_ns == OLD + i, rel


@pytest.mark.rclone
def test_restore_each_builtin_adapter_into_an_empty_tree(tree: Tree, cli: CliRunner) -> None:
    _populate(tree)
    cli("checkpoint", check=0)
    cli("checkpoint", check=0)  # transcripts are quiet (old mtimes): now whole at their paths
    for name in HARNESS_FILES:
        assert (tree.durable / "state").exists(), name
    shutil.rmtree(tree.local)
    out = cli("restore", check=0)
    for name, entries in HARNESS_FILES.items():
        assert f"{name}: restored {len(entries)} file(s)" in out.stdout
    _check_restored(tree)
    # restored files are not uploaded again: the next checkpoint is idle
    with tree.no_durable_ops(reach=True):
        out = cli("checkpoint", check=0)
    assert "published 1" not in out.stdout and "unchanged" in out.stdout


def test_restore_old_rsync_layout_without_manifest(tree: Tree, cli: CliRunner) -> None:
    """State written by the old rsync script: plain files, mtimes preserved, no manifest."""
    durable_of = {
        "codex": "state/codex",
        "claude": "state/claude",
        "gemini": "state/gemini",
        "openclaw": "state/openclaw-backup",
        "opencode": "state/opencode",
        "hermes": "state/hermes",
    }
    live_of = {
        "codex": "codex-home",
        "claude": "agent-state/claude",
        "gemini": "agent-state/gemini-home/.gemini",
        "openclaw": "oc-home/.openclaw",
        "opencode": "opencode-share",
        "hermes": "hermes",
    }
    for i, (name, entries) in enumerate(HARNESS_FILES.items()):
        for rel, (text, mode) in entries.items():
            dst = tree.durable / durable_of[name] / Path(rel).relative_to(live_of[name])
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_text(text)
            dst.chmod(mode)
            set_mtime(dst, OLD + i)
    cli("restore", check=0)
    _check_restored(tree)


def test_old_layout_restore_keeps_a_local_file_newer_than_the_durable_mtime(
    tree: Tree, cli: CliRunner
) -> None:
    """No manifest: the durable file's own mtime decides, not when it reached the store (on
    S3 a LIST gives only the upload time, later than the local file here)."""
    durable = tree.durable / "state/codex/config.toml"
    durable.parent.mkdir(parents=True, exist_ok=True)
    durable.write_text("old durable\n")
    durable.chmod(0o600)
    set_mtime(durable, OLD)
    tree.write("codex-home/config.toml", "newer local\n", mtime_ns=OLD + 10**9)
    out = cli("restore", check=0)
    assert (tree.local / "codex-home/config.toml").read_text() == "newer local\n"
    assert "1 newer local kept" in out.stdout


def test_hot_restart_keeps_a_newer_local_file(tree: Tree, cli: CliRunner) -> None:
    tree.write("codex-home/history.jsonl", "durable\n", mtime_ns=OLD)
    tree.write("codex-home/config.toml", "old\n", mtime_ns=OLD)
    cli("checkpoint", check=0)
    tree.write("codex-home/history.jsonl", "durable\nnewer local\n", mtime_ns=OLD + 10**9)
    tree.write("codex-home/config.toml", "older local\n", mtime_ns=OLD - 10**9)
    out = cli("restore", check=0)
    assert "1 newer local kept" in out.stdout
    assert (tree.local / "codex-home/history.jsonl").read_text() == "durable\nnewer local\n"
    assert (tree.local / "codex-home/config.toml").read_text() == "old\n"  # older: replaced


def test_first_checkpoint_after_restore_over_populated_tree_uploads_newer_files(
    tree: Tree, cli: CliRunner
) -> None:
    for name in ("a", "b", "c"):
        tree.write(f"codex-home/{name}.json", f"{name} durable", mtime_ns=OLD)
    cli("checkpoint", check=0)
    shutil.rmtree(tree.local / ".syncengine")  # a new container: local index gone
    tree.write("codex-home/b.json", "b newer local", mtime_ns=OLD + 10**9)
    tree.write("codex-home/d.json", "d only local", mtime_ns=OLD)
    cli("restore", check=0)
    out = cli("checkpoint", "codex", check=0)
    assert "codex: published 2 file(s)" in out.stdout  # b (newer) and d (new), not a or c
    assert (tree.durable / "state/codex/b.json").read_text() == "b newer local"
    assert (tree.durable / "state/codex/d.json").read_text() == "d only local"


def test_checkpoint_with_lost_index_does_not_reupload(tree: Tree, cli: CliRunner) -> None:
    for i in range(20):
        tree.write(f"codex-home/s/{i}.jsonl", f"{i}\n", mtime_ns=OLD)
    cli("checkpoint", check=0)
    shutil.rmtree(tree.local / ".syncengine")
    out = cli("checkpoint", "codex", check=0)
    assert "codex: published 0 file(s), 0 bytes, 20 unchanged" in out.stdout


def _write_manifest(store: Path, entries: list[dict[str, object]]) -> None:
    mdir = store / ".syncengine/manifest"
    mdir.mkdir(parents=True)
    lines = [
        json.dumps(
            {
                "syncengine_manifest": 1,
                "adapter": "codex",
                "seq": 1,
                "type": "base",
                "created_ns": 1,
            }
        )
    ]
    lines += [json.dumps(e) for e in entries]
    lines.append(json.dumps({"end": len(entries)}))
    (mdir / "000000000001.base.jsonl").write_text("\n".join(lines) + "\n")


def test_hostile_manifest_cannot_make_restore_write_outside(tree: Tree, cli: CliRunner) -> None:
    outside = tree.base / "outside"
    outside.mkdir()
    store = tree.durable / "state/codex"
    (store / "sub").mkdir(parents=True)
    (store / "sub/ok.json").write_text("ok")
    (store / "payload").write_text("evil")
    _write_manifest(
        store,
        [
            {
                "path": "../escape",
                "kind": "file",
                "size": 4,
                "mtime_ns": 1,
                "mode": 420,
                "object": "payload",
            },
            {
                "path": "/abs/escape",
                "kind": "file",
                "size": 4,
                "mtime_ns": 1,
                "mode": 420,
                "object": "payload",
            },
            {"path": "link", "kind": "symlink", "mtime_ns": 1, "target": str(outside)},
            {
                "path": "link/escape",
                "kind": "file",
                "size": 4,
                "mtime_ns": 1,
                "mode": 420,
                "object": "payload",
            },
            {
                "path": "steal",
                "kind": "file",
                "size": 4,
                "mtime_ns": 1,
                "mode": 420,
                "object": "../../../../etc/passwd",
            },
            {"path": "sub/ok.json", "kind": "file", "size": 2, "mtime_ns": 1, "mode": 420},
        ],
    )
    out = cli("restore", "codex", check=1)
    assert list(outside.iterdir()) == []
    assert not (tree.local / "escape").exists() and not (tree.base / "escape").exists()
    assert not (tree.local / "codex-home/steal").exists()
    for name in ("../escape", "/abs/escape", "link/escape", "steal"):
        assert name in out.stderr
    assert "a parent is itself a file or symlink in the manifest" in out.stderr
    assert (tree.local / "codex-home/link").is_symlink()  # decided by the plan, not by timing
    assert (tree.local / "codex-home/sub/ok.json").read_text() == "ok"  # the rest goes on


@pytest.mark.posix_only("plants a symlink in the durable tree: a bucket holds none")
def test_symlinked_directory_in_durable_tree_is_not_followed(tree: Tree, cli: CliRunner) -> None:
    outside = tree.base / "outside"
    (outside / "secret").mkdir(parents=True)
    (outside / "secret/key").write_text("host secret")
    store = tree.durable / "state/codex"
    store.mkdir(parents=True)
    (store / "sessions").symlink_to(outside / "secret")  # old layout walk, no manifest
    (store / "config.toml").write_text("x")
    cli("restore", "codex", check=0)
    restored = tree.local / "codex-home/sessions"
    assert restored.is_symlink()  # recreated as a link, never copied through
    assert files(tree.local / "codex-home") == {"config.toml": b"x"}


def test_live_symlinked_directory_is_not_written_through(tree: Tree, cli: CliRunner) -> None:
    """Codex's old sessions -> /data symlink left in the live tree must not be written through."""
    outside = tree.base / "outside"
    outside.mkdir()
    tree.write("codex-home/sessions/r.jsonl", "durable\n")
    cli("checkpoint", check=0)
    shutil.rmtree(tree.local / "codex-home/sessions")
    (tree.local / "codex-home/sessions").symlink_to(outside)
    out = cli("restore", "codex", check=1)
    assert "sessions/r.jsonl" in out.stderr and "symlink" in out.stderr
    assert list(outside.iterdir()) == []


def test_missing_durable_object_fails_restore_naming_it(tree: Tree, cli: CliRunner) -> None:
    tree.write("codex-home/a.json", "a")
    tree.write("codex-home/b.json", "b")
    cli("checkpoint", check=0)
    (tree.raw / "state/codex/a.json").unlink()
    shutil.rmtree(tree.local)
    out = cli("restore", check=1)
    assert "a.json" in out.stderr and "missing on the durable side" in out.stderr
    assert (tree.local / "codex-home/b.json").read_text() == "b"
    status = json.loads(cli("status", "--json", check=0).stdout)
    assert status["restore"]["complete"] is False


def test_restore_dry_run_prints_plan_and_writes_nothing(tree: Tree, cli: CliRunner) -> None:
    tree.write("codex-home/a.json", "abc")
    cli("checkpoint", check=0)
    shutil.rmtree(tree.local / "codex-home")
    out = cli("restore", "--dry-run", "codex", check=0)
    assert "restore a.json (missing, 3 bytes)" in out.stdout
    assert not (tree.local / "codex-home").exists()


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o400])
def test_restored_temp_files_are_never_more_readable_than_the_source(
    tree: Tree, cli: CliRunner, mode: int
) -> None:
    from syncengine.fs.savefile import temp_mode

    assert temp_mode(mode) & 0o077 == 0
    assert temp_mode(mode) & 0o444 & ~mode == 0  # no read bit the source lacks
    tree.write("codex-home/auth.json", "s", mode=mode)
    cli("checkpoint", check=0)
    shutil.rmtree(tree.local)
    cli("restore", check=0)
    assert stat.S_IMODE((tree.local / "codex-home/auth.json").stat().st_mode) == mode


def test_gap_in_manifest_sequence_makes_restore_incomplete(tree: Tree, cli: CliRunner) -> None:
    for name in "abc":
        tree.write(f"codex-home/{name}.json", name)
        cli("checkpoint", check=0)
    mdir = tree.raw / "state/codex/.syncengine/manifest"
    (mdir / "000000000002.g000000000002.delta.jsonl").unlink()  # one-shot: generation 2
    shutil.rmtree(tree.local)
    out = cli("restore", check=1)
    assert "000000000002 to 000000000002 are missing" in out.stderr


LOW_FD_LIMIT = r"""
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))
from syncengine.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_restore_of_more_directories_than_open_files_allowed(tree: Tree, cli: CliRunner) -> None:
    """Found at 20,000 directories by the benchmark: every directory kept open, EMFILE."""
    import subprocess
    import sys

    for i in range(400):
        tree.write(f"opencode-share/opencode/storage/part/m{i:03d}/p.json", f"{i}")
    cli("checkpoint", "opencode", check=0)
    shutil.rmtree(tree.local)
    proc = subprocess.run(
        [sys.executable, "-c", LOW_FD_LIMIT, "restore", "opencode"],
        env=tree.env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "opencode: restored 400 file(s)" in proc.stdout
    assert (tree.local / "opencode-share/opencode/storage/part/m399/p.json").read_text() == "399"


@pytest.mark.dir_only("restore splits into processes on a local disk; on a mount it uses threads")
def test_large_restore_split_across_processes_restores_and_records_everything(
    tree: Tree, cli: CliRunner
) -> None:
    """1,500 files (over the fork threshold): contents, modes and mtimes come back, a
    missing object is named, and the index knows every restored file (nothing re-uploaded)."""
    expected = {}
    for i in range(1500):
        rel = f"hermes/d{i % 37:02d}/f{i:04d}.json"
        mode = 0o600 if i % 3 else 0o644
        expected[rel] = (f'{{"i":{i}}}' * (1 + i % 50), mode, OLD + i)
        tree.write(rel, expected[rel][0], mode=mode, mtime_ns=OLD + i)
    cli("checkpoint", "hermes", check=0)
    (tree.raw / "state/hermes/d04/f1114.json").unlink()  # in the second share
    shutil.rmtree(tree.local)
    out = cli("restore", "hermes", check=1)
    assert "d04/f1114.json" in out.stderr and "missing on the durable side" in out.stderr
    assert "restored 1499 file(s)" in out.stdout
    for rel, (text, mode, mtime_ns) in expected.items():
        path = tree.local / rel
        if rel == "hermes/d04/f1114.json":
            assert not path.exists()
            continue
        st = path.stat()
        assert (path.read_text(), stat.S_IMODE(st.st_mode), st.st_mtime_ns) == (
            text,
            mode,
            mtime_ns,
        ), rel
    tree.write("hermes/d04/f1114.json", expected["hermes/d04/f1114.json"][0])
    again = cli("checkpoint", "hermes", check=0)
    assert "published 1 file(s)" in again.stdout and " 0 unchanged" in again.stdout, again.stdout
