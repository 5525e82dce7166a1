"""The design's crash/recovery suite, run against syncengine as a drop-in for its script.

The design (shared/seed/agent-state-checkpoints.md, "Verification") exercises
``scripts/agent-state.sh`` by mode, with the deployment's environment variables.
Here each mode is mapped one to one onto a syncengine command, and the environment
is passed through untouched: every harness's live and durable tree at a
non-default place named by its variable, no config file.

    restore            ->  syncengine restore
    checkpoint         ->  syncengine checkpoint --no-wait
    checkpoint-final   ->  syncengine checkpoint --final

Failures are made by real processes: a writer holding a Codex rollout open and
appending, ``kill -9`` of it, a SQLite writer in WAL mode in another process, a
corrupt live database, a second process holding the lock.

Every test runs on each store kind: a directory, the bucket emulator,
``[rclone-s3]`` (real rclone write-back over S3) and ``[s3]``
(``DATA_DIR=s3://BUCKET/data``; there the durable trees are at their default
places in the bucket, since a ``*_DURABLE`` variable names a directory).
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import attrs
import pytest

from tests import test_sqlite
from tests.conftest import CliRunner, Tree
from tests.helpers import Child, files, query_snapshot, start_appender
from tests.s3path import S3Path
from tests.test_sqlite import Writer, make_db

pytestmark = [pytest.mark.s3, pytest.mark.rclone_s3]  # and [s3], [rclone-s3]

MODES = {
    "restore": ("restore",),
    "checkpoint": ("checkpoint", "--no-wait"),
    "checkpoint-final": ("checkpoint", "--final"),
}
OLD = 1_700_000_000 * 10**9
writers = test_sqlite.writers  # WAL writers in other processes, killed after the test
ROLLOUT = "sessions/2026/12/01/rollout-2026-12-01T10-00-00-0000.jsonl"


@attrs.frozen
class Deployment:
    """The design's variables, every tree at a non-default place; `live`/`durable` by
    harness name; `mode` runs one of the script's modes as its syncengine command."""

    tree: Tree
    cli: CliRunner
    env: dict[str, str]
    live: dict[str, Path]
    durable: dict[str, Path | S3Path]

    def mode(self, name: str, check: int | None = 0) -> subprocess.CompletedProcess[str]:
        return self.cli(*MODES[name], env=self.env, check=check)

    def wipe_local(self) -> None:
        """A new container: AM_LOCAL (with syncengine's state dir) and every live tree gone."""
        for path in (self.tree.local, *self.live.values()):
            shutil.rmtree(path, ignore_errors=True)
        self.tree.local.mkdir()


@pytest.fixture
def dep(tree: Tree, cli: CliRunner) -> Deployment:
    live_root, durable_root = tree.base / "srv", tree.data / "elsewhere"
    live = {
        "codex": live_root / "codex",
        "claude": live_root / "claude",
        "gemini": live_root / "gemini-home/.gemini",
        "openclaw": live_root / "openclaw",
        "opencode": live_root / "opencode",
        "hermes": live_root / "hermes",
    }
    durable: dict[str, Path | S3Path] = {name: durable_root / name for name in live}
    places = {
        "CODEX_DURABLE": "codex",
        "CLAUDE_DURABLE": "claude",
        "GEMINI_DURABLE": "gemini",
        "OPENCLAW_DURABLE": "openclaw",
        "OPENCODE_DURABLE": "opencode",
        "HERMES_DURABLE": "hermes",
    }
    moved = {var: str(durable[name]) for var, name in places.items()}
    if tree.s3 is not None:  # the default places in the bucket (adapters/*.toml)
        default = {"openclaw": "openclaw-backup"}
        durable = {name: tree.durable / "state" / default.get(name, name) for name in live}
        moved = {}
    env = tree.env(
        CODEX_HOME=str(live["codex"]),
        CLAUDE_CONFIG_DIR=str(live["claude"]),
        GEMINI_CLI_HOME=str(live_root / "gemini-home"),  # GEMINI_LIVE: its default
        OPENCLAW_STATE_DIR=str(live["openclaw"]),
        OPENCODE_LIVE=str(live["opencode"]),
        HERMES_LIVE=str(live["hermes"]),
        **moved,
    )
    assert "SYNCENGINE_CONFIG" not in env
    return Deployment(tree, cli, env, live, durable)


# One file-backed state per harness, as each harness writes it (harnesses.md).
STATE = {
    "codex": {
        ROLLOUT: ('{"type":"session_meta"}\n{"type":"turn"}\n', 0o644),
        "history.jsonl": ('{"text":"hi"}\n', 0o644),
        "auth.json": ('{"t":"s"}', 0o600),
        "config.toml": ('model = "m"\n', 0o644),
    },
    "claude": {
        "projects/-work/0b1f.jsonl": ('{"type":"user"}\n', 0o644),
        ".credentials.json": ('{"k":"s"}', 0o600),
    },
    "gemini": {
        "tmp/work/chats/session-2026-12-01T10-00-abcd1234.jsonl": ("{}\n", 0o644),
        "settings.json": ("{}", 0o644),
        "oauth_creds.json": ("{}", 0o600),
    },
    "openclaw": {"openclaw.json": ("{}", 0o644), "credentials/whatsapp.json": ("{}", 0o600)},
    "opencode": {"storage/session/info/ses_1.json": ("{}", 0o644), "auth.json": ("{}", 0o600)},
    "hermes": {"config.yaml": ("model: m\n", 0o644), ".env": ("K=v\n", 0o600)},
}


def _write_state(dep: Deployment, mtime_ns: int = OLD) -> None:
    for name, entries in STATE.items():
        for rel, (text, mode) in entries.items():
            p = dep.live[name] / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
            p.chmod(mode)
            os.utime(p, ns=(mtime_ns, mtime_ns))


def _rows(db: Path) -> int:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        assert conn.execute("pragma quick_check").fetchone() == ("ok",)
        return int(conn.execute("select count(*) from t").fetchone()[0])


def test_restore_fills_each_harness_tree_into_a_fresh_local_tree(dep: Deployment) -> None:
    _write_state(dep)
    out = dep.mode("checkpoint-final").stdout
    for name in STATE:  # the variables are honoured: nothing is "published 0 file(s)"
        assert f"{name}: published {len(STATE[name])} file(s)" in out, out
    assert "and 1 plain log copy," in out.splitlines()[1], out  # the transcript, whole
    # a direct listing of each durable tree shows every file at its plain path
    for name, entries in STATE.items():
        assert set(files(dep.durable[name])) == set(entries), name
    dep.wipe_local()
    out = dep.mode("restore").stdout
    for name, entries in STATE.items():
        assert f"{name}: restored {len(entries)} file(s)" in out
        for rel, (text, mode) in entries.items():
            p = dep.live[name] / rel
            assert p.read_text() == text and p.stat().st_mode & 0o777 == mode, p
            assert p.stat().st_mtime_ns == OLD, p
    assert not (dep.tree.local / "codex-home").exists(), "nothing at the default places"
    if dep.tree.s3 is None:
        assert not (dep.tree.data / "state").exists()


def test_a_hot_restart_keeps_newer_local_state(dep: Deployment) -> None:
    _write_state(dep)
    dep.mode("checkpoint")
    newer = dep.live["claude"] / "projects/-work/0b1f.jsonl"
    newer.write_text('{"type":"user"}\n{"type":"assistant"}\n')
    os.utime(newer, ns=(OLD + 10**9, OLD + 10**9))
    older = dep.live["codex"] / "config.toml"
    older.write_text("model = 'older'\n")
    os.utime(older, ns=(OLD - 10**9, OLD - 10**9))
    out = dep.mode("restore").stdout
    # one claude file is the durable copy exactly (unchanged), the other newer here
    assert "claude: restored 0 file(s), 0 bytes, 1 unchanged, 1 newer local kept" in out
    assert "codex: restored 1 file(s)" in out
    assert newer.read_text().endswith('{"type":"assistant"}\n')
    assert older.read_text() == 'model = "m"\n', "an older local file is replaced"


def test_the_first_checkpoint_captures_pre_existing_newer_local_state(dep: Deployment) -> None:
    """The old script's checkpoint is on the bucket; the live trees hold newer state that
    no checkpoint saw (no stamp, no index): the first checkpoint publishes it."""
    for name, entries in STATE.items():
        for rel, (text, _) in entries.items():
            p = dep.durable[name] / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("old " + text)
            if isinstance(p, S3Path):
                p.utime(OLD)
            else:
                os.utime(p, ns=(OLD, OLD))
    _write_state(dep, mtime_ns=OLD + 60 * 10**9)
    dep.mode("checkpoint")
    dep.wipe_local()
    dep.mode("restore")
    for name, entries in STATE.items():
        for rel, (text, _) in entries.items():
            assert (dep.live[name] / rel).read_text() == text, (name, rel)


def test_opencode_and_hermes_files_checkpoint_before_their_database_exists(dep: Deployment) -> None:
    _write_state(dep)
    assert (
        not list(dep.live["opencode"].glob("*.db"))
        and not (dep.live["hermes"] / "state.db").exists()
    )
    out = dep.mode("checkpoint").stdout
    assert "opencode: published 2 file(s)" in out and "hermes: published 2 file(s)" in out
    assert (dep.durable["opencode"] / "storage/session/info/ses_1.json").is_file()
    assert (dep.durable["hermes"] / "config.yaml").read_text() == "model: m\n"


def test_an_open_codex_rollout_reaches_a_closed_durable_object(dep: Deployment) -> None:
    rollout = dep.live["codex"] / ROLLOUT
    rollout.parent.mkdir(parents=True)
    writer, size = start_appender(rollout, 200)  # holds the descriptor open, appending
    try:
        dep.mode("checkpoint")
        # what reached the durable side is closed: a new container restores it now,
        # while the writer still holds the file open
        restored = dep.tree.base / "restored"
        env = {**dep.env, "CODEX_HOME": str(restored), "AM_LOCAL": str(dep.tree.base / "c2")}
        os.mkdir(env["AM_LOCAL"])
        dep.cli("restore", "codex", env=env, check=0)
        got = (restored / ROLLOUT).read_bytes()
        assert writer.poll() is None, "the writer kept its descriptor open throughout"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        assert writer.stdout is not None
        writer.stdout.close()
    assert len(got) >= size and got.endswith(b"\n")
    assert rollout.read_bytes().startswith(got)


def test_a_killed_writer_is_reconstructed_by_a_fresh_local_restore(dep: Deployment) -> None:
    rollout = dep.live["codex"] / ROLLOUT
    rollout.parent.mkdir(parents=True)
    writer, _ = start_appender(rollout, 100)
    try:
        dep.mode("checkpoint")
    finally:
        writer.send_signal(signal.SIGKILL)  # kill -9: no flush, no close by the writer
        writer.wait()
        assert writer.stdout is not None
        writer.stdout.close()
    left = rollout.read_bytes()
    # the container dies too: a fresh restore has the last checkpoint, complete lines
    dep.wipe_local()
    dep.mode("restore")
    first = (dep.live["codex"] / ROLLOUT).read_bytes()
    assert first.endswith(b"\n") and left.startswith(first)
    # a clean stop instead: the final checkpoint has the rollout to its last byte
    dep.wipe_local()
    rollout.parent.mkdir(parents=True)
    rollout.write_bytes(left)
    dep.mode("checkpoint-final")
    dep.wipe_local()
    dep.mode("restore")
    assert (dep.live["codex"] / ROLLOUT).read_bytes() == left


def test_sqlite_snapshots_are_online_backups_with_the_wal_content(
    dep: Deployment, writers: list[Writer]
) -> None:
    dbs = {
        "opencode": dep.live["opencode"] / "opencode.db",
        "hermes": dep.live["hermes"] / "state.db",
    }
    for name, db in dbs.items():
        w = Writer(db)  # WAL mode, autocheckpoint off: the committed rows are in the WAL
        writers.append(w)
        assert w.insert(25 if name == "opencode" else 7) > 0
        assert Path(f"{db}-wal").stat().st_size > 0
    dep.mode("checkpoint")  # the writers stay alive, connections open
    for name, db in dbs.items():
        snap = dep.durable[name] / "checkpoints" / db.name
        assert query_snapshot(snap, dep.tree.base, "select count(*) from t") == [
            (25 if name == "opencode" else 7,)
        ], name
    published = [p for p in dep.tree.raw.rglob("*") if p.name.endswith(("-wal", "-shm"))]
    assert published == [], "no WAL or SHM is ever published"
    # an idle database (its writer alive, nothing committed) writes nothing durable
    with dep.tree.no_durable_ops(reach=True):
        assert "published 0 file(s)" in dep.mode("checkpoint").stdout
    writers[0].insert(5)  # a new commit: the next snapshot has it
    dep.mode("checkpoint")
    assert query_snapshot(
        dep.durable["opencode"] / "checkpoints/opencode.db", dep.tree.base, "select count(*) from t"
    ) == [(30,)]


def test_a_corrupt_live_database_fails_closed_and_keeps_the_prior_snapshot(dep: Deployment) -> None:
    db = dep.live["hermes"] / "state.db"
    make_db(db, 12)
    dep.mode("checkpoint")
    snap = dep.durable["hermes"] / "checkpoints/state.db"
    good = snap.read_bytes()
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    db.write_bytes(b"SQLite format 3\x00" + b"\xff" * 8192)  # a header, then garbage
    out = dep.mode("checkpoint", check=1)
    assert "state.db" in out.stderr
    assert snap.read_bytes() == good, "the previous snapshot stays authoritative"
    out = dep.mode("checkpoint-final", check=1)  # still refused
    assert snap.read_bytes() == good
    dep.wipe_local()
    dep.mode("restore")
    assert _rows(dep.live["hermes"] / "state.db") == 12


def test_restore_leaves_no_stale_wal_or_shm_beside_a_restored_database(
    dep: Deployment, writers: list[Writer]
) -> None:
    db = dep.live["opencode"] / "opencode.db"
    w = Writer(db)
    writers.append(w)
    w.insert(9)
    dep.mode("checkpoint")
    w.close()
    dep.wipe_local()
    dep.mode("restore")
    assert sorted(p.name for p in dep.live["opencode"].iterdir() if "opencode.db" in p.name) == [
        "opencode.db"
    ]
    assert _rows(db) == 9
    # a database lost with its stale companions left behind (a previous life's WAL)
    db.unlink()
    Path(f"{db}-wal").write_bytes(b"\x37\x7f\x06\x82" + b"\0" * 60)
    Path(f"{db}-shm").write_bytes(b"\0" * 100)
    dep.mode("restore")
    assert sorted(p.name for p in dep.live["opencode"].iterdir() if "opencode.db" in p.name) == [
        "opencode.db"
    ]
    assert _rows(db) == 9


HOLD_LOCK = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
print("unlocked", flush=True)
"""


@pytest.mark.dir_only("about the local lock; the durable root is not the point")
def test_the_periodic_mode_skips_while_locked_and_the_others_wait(dep: Deployment) -> None:
    _write_state(dep)
    dep.mode("checkpoint")
    lock = dep.tree.local / ".syncengine/lock"
    holder = Child(HOLD_LOCK, str(lock), ready="locked")
    try:
        out = dep.mode("checkpoint")
        assert out.stdout.strip() == "checkpoint skipped: another checkpoint or restore is running"
        final = subprocess.Popen(
            [sys.executable, "-m", "syncengine", *MODES["checkpoint-final"]],
            env=dep.env,
            cwd=dep.tree.base,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        with pytest.raises(subprocess.TimeoutExpired):
            final.wait(timeout=2)  # it waits for the lock instead of skipping
    finally:
        holder.stop()
    stdout, stderr = final.communicate(timeout=60)
    assert final.returncode == 0, stderr
    assert "codex: published 0 file(s)" in stdout


@pytest.mark.dir_only("argument parsing only")
def test_a_bad_mode_exits_2(dep: Deployment) -> None:
    out = dep.cli("checkpoint-final", env=dep.env, check=2)
    assert "invalid choice" in out.stderr


def _old_script_copy(src: Path, dst: Path) -> None:
    """What the old script's rsync -a --update did in both directions: copy every file
    that is missing at `dst` or older there, mode and mtimes kept (`.syncengine/`
    included; no extended attributes, which rsync -a leaves too and rclone refuses)."""
    for path in sorted(src.rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        target = dst / path.relative_to(src)
        if target.exists() and target.stat().st_mtime_ns >= path.stat().st_mtime_ns:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        st = path.stat()
        os.chmod(target, st.st_mode & 0o7777)
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.posix_only("the old script copies directory trees with rsync; a bucket has none")
def test_a_rollback_to_the_old_script_and_back_loses_nothing(dep: Deployment) -> None:
    _write_state(dep)
    rollout = dep.live["codex"] / ROLLOUT
    dep.mode("checkpoint")
    with rollout.open("a") as f:
        f.write('{"type":"turn","n":2}\n')
    dep.mode("checkpoint")
    dep.mode("checkpoint-final")  # a clean stop
    # a direct listing of the bucket shows every transcript whole at its plain path
    for name, entries in STATE.items():
        for rel in entries:
            assert (dep.durable[name] / rel).read_bytes() == (dep.live[name] / rel).read_bytes()
    expected = {name: files(dep.live[name]) for name in STATE}
    # rollback: the old script restores a fresh container from the plain paths
    dep.wipe_local()
    for name in STATE:
        _old_script_copy(dep.durable[name], dep.live[name])
        assert {k: v for k, v in files(dep.live[name]).items()} == expected[name], name
    # the old script's era: Codex appends, a file changes, its checkpoint copies them
    with rollout.open("a") as f:
        f.write('{"type":"turn","n":3,"under":"the old script"}\n')
    (dep.live["codex"] / "config.toml").write_text('model = "changed under the old script"\n')
    _old_script_copy(dep.live["codex"], dep.durable["codex"])
    # back to syncengine in a new container: everything the old script wrote comes back
    dep.wipe_local()
    dep.mode("restore")
    assert rollout.read_text().endswith('"under":"the old script"}\n')
    assert "changed under the old script" in (dep.live["codex"] / "config.toml").read_text()
    # or on the live trees the old script's restore left, with its .syncengine/ copies
    dep.wipe_local()
    _old_script_copy(dep.durable["codex"], dep.live["codex"])
    assert (dep.live["codex"] / ".syncengine/manifest").is_dir()
    dep.mode("restore")
    dep.mode("checkpoint-final")
    entries = _manifest_paths(dep.durable["codex"])
    assert ROLLOUT in entries and not [p for p in entries if p.startswith(".syncengine")]
    dep.wipe_local()
    dep.mode("restore")
    assert rollout.read_text().endswith('"under":"the old script"}\n')
    assert not (dep.live["codex"] / ".syncengine").exists()


def _manifest_paths(durable: Path) -> set[str]:
    from syncengine.durable import manifest
    from syncengine.durable.posix.store import Store

    return set(manifest.load(Store(durable)).entries)
