"""migrate: an old rsync-layout deployment moves over, restores, checkpoints; twice: no-op."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import tempfile
import time
from contextlib import closing
from pathlib import Path

import pytest

from syncengine import ConfigError, config_from_dict
from syncengine.durable import manifest
from syncengine.durable.posix.store import Store
from syncengine.restore.openfiles import OPEN_DIR
from tests.conftest import CliRunner, Tree
from tests.helpers import files, snapshot, start_appender

OLD = time.time_ns() - 3600 * 10**9
ROLLOUT = "sessions/2026/11/29/rollout-2026-11-29T10-00-abc.jsonl"


def _old_layout(tree: Tree) -> None:
    """The layout the rsync script left: see the design's "Migration and rollback"."""
    d = tree.data
    codex = d / "state/codex"
    for rel, text in {
        ROLLOUT: '{"t":1}\n{"t":2}\n',
        "history.jsonl": '{"h":1}\n',
        "auth.json": '{"token":"s"}',
        "logs_2.sqlite": "cache",
        "goals_1.sqlite-wal": "wal",
        "memories_1.sqlite": "mem",
    }.items():
        p = codex / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        os.utime(p, ns=(OLD, OLD))
    (tree.local / "codex-home").mkdir()
    (tree.local / "codex-home/sessions").symlink_to(codex / "sessions")
    for rel, text in {
        "home/.gemini/tmp/slug/chats/session-1-abcd1234.jsonl": "{}\n",
        "home/.gemini/settings.json": "{}",
        "home/.hermes/config.yaml": "a: 1\n",
        "home/.local/share/opencode/storage/session/x.json": "{}",
        "home/.openclaw.pre-symlink/openclaw.json": '{"v":1}',
    }.items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        os.utime(p, ns=(OLD, OLD))
    _raw_wal_db(d / "home/.local/share/opencode/opencode.db")
    (tree.base / "elsewhere").mkdir()
    (tree.base / "elsewhere/keep.txt").write_text("target of the old link")
    (d / "home/.openclaw").symlink_to(tree.base / "elsewhere")


def _raw_wal_db(path: Path) -> None:
    """A WAL-mode database whose -wal holds the data, as a file copy caught it.

    Built on local disk (SQLite cannot run on the bucket mount), then copied in.
    """
    scratch = Path(tempfile.mkdtemp(prefix="rawdb-"))
    db = scratch / "opencode.db"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("pragma journal_mode=wal")
        conn.execute("pragma wal_autocheckpoint=0")
        conn.execute("create table s (id)")
        conn.executemany("insert into s values (?)", [(i,) for i in range(100)])
        conn.commit()
        assert (scratch / "opencode.db-wal").stat().st_size > 0
        for suffix in ("", "-wal"):  # copied while the connection is open
            (path.parent / f"opencode.db{suffix}").write_bytes(
                (scratch / f"opencode.db{suffix}").read_bytes()
            )
    shutil.rmtree(scratch)


def test_old_layout_migrates_restores_and_checkpoints(tree: Tree, cli: CliRunner) -> None:
    _old_layout(tree)
    env = tree.env(HOME=str(tree.data / "home"))  # the old layout's HOME is on the bucket
    before = (snapshot(tree.data), snapshot(tree.local))
    dry = cli("migrate", "--dry-run", env=env, check=0)
    assert (snapshot(tree.data), snapshot(tree.local)) == before, "a dry run touches nothing"
    assert "would unlink symlink" in dry.stdout and "would copy" in dry.stdout
    assert f"would link {tree.data}/home/.hermes -> {tree.local}/hermes" in dry.stdout

    out = cli("migrate", env=env, check=0)
    d = tree.data
    assert "done: unlink symlink" in out.stdout
    sessions = tree.local / "codex-home/sessions"
    assert sessions.is_dir() and not sessions.is_symlink() and not list(sessions.iterdir())
    assert (d / "state/codex" / ROLLOUT).read_text() == '{"t":1}\n{"t":2}\n'
    assert sorted(p.name for p in (d / "state/codex/db-backups/am-quarantine").iterdir()) == [
        "goals_1.sqlite-wal",
        "logs_2.sqlite",
        "memories_1.sqlite",
    ]
    assert not list((d / "state/codex").glob("*.sqlite*"))
    # Gemini: copied, and kept in place as the rollback copy
    assert (d / "state/gemini/settings.json").read_text() == "{}"
    assert (d / "home/.gemini/settings.json").exists()
    # opencode and Hermes: copied into the checkpoint itself, renamed to *.pre-agent-state,
    # and the old place is a link to the live tree (the harness writes on local disk)
    assert (d / "state/opencode/storage/session/x.json").exists()
    assert os.readlink(d / "home/.local/share/opencode") == str(tree.local / "opencode-share")
    assert (d / "home/.local/share/opencode.pre-agent-state/opencode.db-wal").exists()
    assert (d / "state/hermes/config.yaml").read_text() == "a: 1\n"
    assert (d / "home/.hermes.pre-agent-state/config.yaml").exists()
    assert os.readlink(d / "home/.hermes") == str(tree.local / "hermes")
    # OpenClaw: the symlink at home/.openclaw is removed (not its target), the
    # pre-symlink copy is copied and kept
    assert not os.path.lexists(d / "home/.openclaw")
    assert (tree.base / "elsewhere/keep.txt").exists()
    assert (d / "state/openclaw-backup/openclaw.json").read_text() == '{"v":1}'
    assert (d / "home/.openclaw.pre-symlink/openclaw.json").exists()
    # the raw database and its WAL are copied for restore's raw-layout fallback, unlisted
    raw = d / "state/opencode"
    assert (raw / "opencode.db-wal").read_bytes() == (
        d / "home/.local/share/opencode.pre-agent-state/opencode.db-wal"
    ).read_bytes()
    listed = manifest.load(Store(d / "state/opencode")).entries
    assert set(listed) == {"storage/session/x.json"}
    assert (
        "tmp/slug/chats/session-1-abcd1234.jsonl"
        in manifest.load(Store(d / "state/gemini")).entries
    )

    migrated = (snapshot(tree.data), snapshot(tree.local))
    again = cli("migrate", env=env, check=0)
    assert "nothing to do (already migrated)" in again.stdout
    assert (snapshot(tree.data), snapshot(tree.local)) == migrated

    rest = cli("restore", env=env, check=0)
    assert "gemini: restored 2 file(s)" in rest.stdout
    local = tree.local
    assert (local / "codex-home" / ROLLOUT).read_text() == '{"t":1}\n{"t":2}\n'
    assert not (local / "codex-home/sessions").is_symlink()
    assert (local / "agent-state/gemini-home/.gemini/settings.json").exists()
    assert (local / "opencode-share/storage/session/x.json").exists()
    assert (d / "home/.local/share/opencode/storage/session/x.json").exists(), "via the link"
    assert (local / "hermes/config.yaml").read_text() == "a: 1\n"
    assert (local / "oc-home/.openclaw/openclaw.json").read_text() == '{"v":1}'
    # the raw opencode.db + WAL was recovered by SQLite into a valid database with its rows
    db = local / "opencode-share/opencode.db"
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        assert conn.execute("pragma quick_check").fetchone() == ("ok",)
        assert conn.execute("select count(*) from s").fetchone() == (100,)
    cli("checkpoint", env=env, check=0)
    snap = d / "state/opencode/checkpoints/opencode.db"
    with closing(sqlite3.connect(f"file:{snap}?mode=ro&immutable=1", uri=True)) as conn:
        assert conn.execute("select count(*) from s").fetchone() == (100,)
    quiet = snapshot(tree.data)
    second = cli("checkpoint", env=env, check=0)
    assert "published 0 file(s)" in second.stdout and snapshot(tree.data) == quiet
    third = cli("migrate", env=env, check=0)
    assert "nothing to do (already migrated)" in third.stdout


@pytest.mark.dir_only(
    "a writer's uncommitted bytes on the bucket mount cannot be read by "
    "another process (hf-mount serves committed objects only)"
)
def test_open_rollout_is_preserved_through_migration(tree: Tree, cli: CliRunner) -> None:
    _old_layout(tree)
    live_path = tree.local / "codex-home/sessions/2026/11/29/rollout-live.jsonl"
    canonical = tree.data / "state/codex/sessions/2026/11/29/rollout-live.jsonl"
    writer, size = start_appender(live_path, 50)  # through the old symlink, onto the "bucket"
    try:
        # What the bucket held while the writer kept its descriptor open: a stale prefix
        # (the measured 767 B of a 9.6 MB rollout).  The writer's view is unaffected.
        first_line = canonical.read_bytes().split(b"\n", 1)[0] + b"\n"
        stale = canonical.with_name("stale.tmp")
        stale.write_bytes(first_line)
        os.replace(stale, canonical)
        out = cli("migrate", check=0)
        assert f"(held by pid {writer.pid}" in out.stdout
        assert canonical.read_bytes() == first_line, "the canonical path is never written"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        assert writer.stdout is not None
        writer.stdout.close()
    copies = list((tree.data / "state/codex" / OPEN_DIR / "sessions/2026/11/29").iterdir())
    assert len(copies) == 1 and copies[0].name.startswith("rollout-live.jsonl.")
    copy = copies[0].read_bytes()
    assert len(copy) >= size and copy.endswith(b"\n") and copy.startswith(first_line)
    cli("restore", "codex", check=0)
    restored = tree.local / "codex-home/sessions/2026/11/29/rollout-live.jsonl"
    assert restored.read_bytes() == copy
    cli("checkpoint", "codex", check=0)
    entry = manifest.load(Store(tree.data / "state/codex")).entries[
        "sessions/2026/11/29/rollout-live.jsonl"
    ]
    assert entry.size == len(copy), "the next checkpoint publishes the longer copy"
    assert files(tree.local / "codex-home")["history.jsonl"] == b'{"h":1}\n'


@pytest.mark.parametrize(
    "step, message",
    [
        ({"action": "explode"}, "action must be one of"),
        ({"action": "copy_tree"}, "'from' is missing"),
        ({"action": "copy_tree", "from": "x", "path": "y"}, "'path' is not valid here"),
        ({"action": "quarantine", "patterns": "x", "to": "q"}, "patterns has the wrong type"),
        ({"action": "copy_tree", "from": "x", "if_symlink": "follow"}, "if_symlink"),
    ],
)
def test_migrate_steps_are_validated(tree: Tree, step: dict[str, object], message: str) -> None:
    raw = {
        "adapters": [],
        "adapter": [{"name": "x", "live": "x", "durable": "state/x", "migrate": [step]}],
    }
    with pytest.raises(ConfigError, match=message):
        config_from_dict(raw, env=tree.env())


def _put(root: Path, files_: dict[str, str], mode: int | None = None) -> None:
    for rel, text in files_.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        if mode is not None:
            p.chmod(mode)
        os.utime(p, ns=(OLD, OLD))


def test_migrate_then_restore_puts_every_old_file_where_each_harness_reads_it(
    tree: Tree, cli: CliRunner
) -> None:
    """The design's deployment, every tree at a non-default place named by its variable,
    HOME on the bucket holding the old directories, the old script's checkpoints in the
    durable trees: after migrate + restore each harness finds every old file."""
    live, d = tree.base / "live", tree.data
    home = d / "home"
    env = tree.env(
        HOME=str(home),
        CODEX_HOME=str(live / "cx"),
        CODEX_DURABLE=str(d / "old/cx"),
        CLAUDE_CONFIG_DIR=str(live / "cl"),
        CLAUDE_DURABLE=str(d / "old/cl"),
        GEMINI_CLI_HOME=str(live / "gh"),
        GEMINI_DURABLE=str(d / "old/ge"),
        OPENCLAW_STATE_DIR=str(live / "oc"),
        OPENCLAW_DURABLE=str(d / "old/oc"),
        OPENCODE_LIVE=str(live / "ocd"),
        OPENCODE_DURABLE=str(d / "old/ocd"),
        HERMES_LIVE=str(live / "he"),
        HERMES_DURABLE=str(d / "old/he"),
    )
    # What the old script and entrypoint left: Codex's sessions linked into the bucket,
    # the other harnesses' checkpoints and their old directories under HOME.
    _put(
        d / "old/cx",
        {
            ROLLOUT: '{"t":1}\n',
            "history.jsonl": "{}\n",
            "config.toml": "m=1\n",
            "logs_2.sqlite": "cache",
        },
    )
    _put(d / "old/cx", {"auth.json": "{}"}, mode=0o600)
    (live / "cx").mkdir(parents=True)
    (live / "cx/sessions").symlink_to(d / "old/cx/sessions")
    _put(d / "old/cl", {"projects/-w/u1.jsonl": '{"c":1}\n', "history.jsonl": "{}\n"})
    _put(d / "old/cl", {".credentials.json": "{}"}, mode=0o600)
    _put(
        home / ".gemini",
        {
            "tmp/w/chats/session-1-abcd1234.jsonl": "{}\n",
            "settings.json": "{}",
            "projects.json": "{}",
        },
    )
    _put(home / ".gemini", {"oauth_creds.json": "{}"}, mode=0o600)
    _put(
        home / ".openclaw.pre-symlink",
        {"openclaw.json": "{}", "agents/main/sessions/s1.jsonl": "{}\n"},
    )
    _put(home / ".openclaw.pre-symlink", {"credentials/c.json": "{}"}, mode=0o600)
    (home / ".openclaw").symlink_to(d / "old/oc")
    _put(home / ".local/share/opencode", {"storage/session/x/ses_1.json": "{}", "auth.json": "{}"})
    _raw_wal_db(home / ".local/share/opencode/opencode.db")
    _put(home / ".hermes", {"config.yaml": "a: 1\n", "sessions/s.json": "{}"})
    _raw_wal_db(home / ".hermes/opencode.db")
    (home / ".hermes/opencode.db").rename(home / ".hermes/state.db")
    (home / ".hermes/opencode.db-wal").rename(home / ".hermes/state.db-wal")

    cli("migrate", env=env, check=0)
    cli("restore", env=env, check=0)

    where_read = {  # each harness's own path (the variable, or HOME for opencode/Hermes)
        live / "cx": [ROLLOUT, "history.jsonl", "config.toml", "auth.json"],
        live / "cl": ["projects/-w/u1.jsonl", "history.jsonl", ".credentials.json"],
        live / "gh/.gemini": [
            "tmp/w/chats/session-1-abcd1234.jsonl",
            "settings.json",
            "projects.json",
            "oauth_creds.json",
        ],
        live / "oc": ["openclaw.json", "agents/main/sessions/s1.jsonl", "credentials/c.json"],
        home / ".local/share/opencode": ["storage/session/x/ses_1.json", "auth.json"],
        home / ".hermes": ["config.yaml", "sessions/s.json"],
    }
    for root, rels in where_read.items():
        for rel in rels:
            assert (root / rel).is_file(), f"{root}/{rel} is not where the harness reads it"
    assert not (live / "cx/logs_2.sqlite").exists(), "Codex caches stay quarantined"
    for secret in (
        live / "cx/auth.json",
        live / "cl/.credentials.json",
        live / "gh/.gemini/oauth_creds.json",
        live / "oc/credentials/c.json",
    ):
        assert secret.stat().st_mode & 0o777 == 0o600, secret
    # opencode and Hermes read their databases through the links, from local disk
    assert os.readlink(home / ".local/share/opencode") == str(live / "ocd")
    assert os.readlink(home / ".hermes") == str(live / "he")
    for db in (home / ".local/share/opencode/opencode.db", home / ".hermes/state.db"):
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            assert conn.execute("select count(*) from s").fetchone() == (100,), db
    # the rollback copies are kept, renamed; nothing was deleted
    assert (home / ".local/share/opencode.pre-agent-state/storage/session/x/ses_1.json").is_file()
    assert (home / ".hermes.pre-agent-state/config.yaml").is_file()
    assert (home / ".gemini/settings.json").is_file()
    assert (home / ".openclaw.pre-symlink/openclaw.json").is_file()


@pytest.mark.dir_only("about links under HOME; the durable root is not involved")
def test_links_replace_an_old_symlink_but_never_a_real_file(tree: Tree, cli: CliRunner) -> None:
    home = tree.base / "home"
    (tree.base / "old-hermes").mkdir()
    (tree.base / "old-hermes/keep.yaml").write_text("kept")
    home.mkdir()
    (home / ".hermes").symlink_to(tree.base / "old-hermes")  # `ln -sfn` replaces it
    (home / ".local/share").mkdir(parents=True)
    (home / ".local/share/opencode").write_text("a file, not the harness's directory")
    out = cli("migrate", "--dry-run", check=0)
    assert f"would link {home}/.hermes -> {tree.local}/hermes (replaces the link to " in out.stdout
    out = cli("migrate", check=0)
    assert os.readlink(home / ".hermes") == str(tree.local / "hermes")
    assert (tree.base / "old-hermes/keep.yaml").read_text() == "kept", "the target is kept"
    assert (home / ".local/share/opencode").read_text().startswith("a file")
    assert "is not a directory: skipped" in out.stdout
    assert "already linked" in cli("migrate", check=0).stdout
