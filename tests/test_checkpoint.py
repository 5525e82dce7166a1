"""Checkpoint of file trees, end to end through the CLI and the API."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import CliRunner, EngineFactory, Tree
from tests.helpers import files, start_appender

pytestmark = pytest.mark.s3

CODEX = "codex-home"
DUR = "state/codex"


def test_first_checkpoint_publishes_files_with_modes(tree: Tree, cli: CliRunner) -> None:
    tree.write(f"{CODEX}/auth.json", '{"token": "s"}', mode=0o600)
    tree.write(f"{CODEX}/archived_sessions/rollout-1.jsonl", '{"a": 1}\n')
    tree.write(f"{CODEX}/logs_2.sqlite", b"SQLite format 3\x00junk")
    tree.write(f"{CODEX}/cache/blob", "cached")
    cli("checkpoint", check=0)
    durable = tree.durable / DUR
    assert files(durable) == {
        "auth.json": b'{"token": "s"}',
        "archived_sessions/rollout-1.jsonl": b'{"a": 1}\n',
    }
    assert stat.S_IMODE((durable / "auth.json").stat().st_mode) == 0o600
    assert (durable / "auth.json").stat().st_mtime_ns == (
        tree.local / CODEX / "auth.json"
    ).stat().st_mtime_ns
    assert not list((durable / ".syncengine" / "staging").iterdir())


@pytest.mark.rclone
def test_idle_and_touch_only_checkpoints_write_nothing_durable(tree: Tree, cli: CliRunner) -> None:
    old = time.time_ns() - 10 * 10**9  # older than the timestamp-granularity window
    tree.write(f"{CODEX}/history.jsonl", "one\n", mtime_ns=old)
    tree.write(f"{CODEX}/config.toml", "model = 'x'\n", mtime_ns=old)
    cli("checkpoint", check=0)
    with tree.no_durable_ops(reach=True):  # the store reached once (docs/IDLE.md), no more
        out = cli("checkpoint", check=0)
    assert "codex: published 0 file(s)" in out.stdout
    # touch: mtime moves (still outside the granularity window), content does not
    os.utime(tree.local / CODEX / "history.jsonl", ns=(old + 10**9, old + 10**9))
    with tree.no_durable_ops(reach=True):  # re-hashed locally
        out = cli("checkpoint", check=0)
    assert "codex: published 0 file(s), 0 bytes, 1 unchanged" in out.stdout
    with tree.no_durable_ops(reach=True):  # and the touched file is clean again
        out = cli("checkpoint", check=0)
    assert "codex: published 0 file(s), 0 bytes, 0 unchanged" in out.stdout


@pytest.mark.rclone
def test_changed_file_is_published_and_manifest_grows_by_a_delta(
    tree: Tree, cli: CliRunner
) -> None:
    tree.write(f"{CODEX}/history.jsonl", "one\n")
    cli("checkpoint", check=0)
    tree.write(f"{CODEX}/history.jsonl", "one\ntwo\n")
    cli("checkpoint", check=0)
    assert (tree.durable / DUR / "history.jsonl").read_bytes() == b"one\ntwo\n"
    names = sorted(p.name for p in (tree.durable / DUR / ".syncengine/manifest").iterdir())
    # each one-shot checkpoint takes the lease anew: generations 1 and 2 (lease.py)
    assert names == [
        "000000000001.g000000000001.base.jsonl",
        "000000000002.g000000000002.delta.jsonl",
    ]


@pytest.mark.rclone
def test_shrunk_file_is_published(tree: Tree, cli: CliRunner) -> None:
    tree.write(f"{CODEX}/history.jsonl", "a\n" * 1000)
    cli("checkpoint", check=0)
    tree.write(f"{CODEX}/history.jsonl", "b\n" * 10)  # Codex trims history.jsonl
    cli("checkpoint", check=0)
    assert (tree.durable / DUR / "history.jsonl").read_bytes() == b"b\n" * 10


@pytest.mark.rclone
def test_deleted_local_file_stays_durable(tree: Tree, cli: CliRunner) -> None:
    tree.write(f"{CODEX}/sessions/old.jsonl", "kept\n")
    tree.write(f"{CODEX}/history.jsonl", "h\n")
    cli("checkpoint", check=0)
    (tree.local / CODEX / "sessions/old.jsonl").unlink()
    cli("checkpoint", check=0)
    assert (tree.durable / DUR / "sessions/old.jsonl").read_bytes() == b"kept\n"
    shutil.rmtree(tree.local)
    cli("restore", check=0)
    assert (tree.local / CODEX / "sessions/old.jsonl").read_bytes() == b"kept\n"


def test_symlink_is_recorded_not_followed(tree: Tree, cli: CliRunner) -> None:
    tree.write(f"{CODEX}/config.toml", "x")
    (tree.local / CODEX / "passwd").symlink_to("/etc/passwd")
    cli("checkpoint", check=0)
    durable = tree.durable / DUR
    assert not (durable / "passwd").exists() and not (durable / "passwd").is_symlink()
    manifest = (durable / ".syncengine/manifest/000000000001.g000000000001.base.jsonl").read_text()
    assert '"target":"/etc/passwd"' in manifest
    assert "root:" not in "".join(
        p.read_text(errors="replace") for p in durable.rglob("*") if p.is_file()
    )
    shutil.rmtree(tree.local)
    cli("restore", check=0)
    link = tree.local / CODEX / "passwd"
    assert link.is_symlink() and os.readlink(link) == "/etc/passwd"


def test_special_files_are_skipped_never_opened(tree: Tree, cli: CliRunner) -> None:
    tree.write(f"{CODEX}/config.toml", "x")
    os.mkfifo(tree.local / CODEX / "agent.fifo")  # opening it for read would block forever
    out = cli("-v", "checkpoint", check=0, timeout=60)
    assert "scan.skip-special adapter=codex path=agent.fifo" in out.stderr
    assert not (tree.durable / DUR / "agent.fifo").exists()


@pytest.mark.parametrize(
    "rel",
    [
        "archived_sessions/rollout-a.jsonl",  # a whole-file copy
        "sessions/2026/11/29/rollout-a.jsonl",  # an append-only log published as segments
    ],
)
def test_appending_writer_is_copied_up_to_what_it_wrote_then_restored_after_kill(
    tree: Tree, cli: CliRunner, rel: str
) -> None:
    rollout = tree.write(f"{CODEX}/{rel}", "")
    writer, size_before = start_appender(rollout, 2000)
    try:
        cli("checkpoint", check=0)
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        assert writer.stdout is not None
        writer.stdout.close()
    live = rollout.read_bytes()
    shutil.rmtree(tree.local)
    cli("restore", check=0)
    restored = (tree.local / CODEX / rel).read_bytes()
    assert len(restored) >= size_before  # everything written before the checkpoint began
    assert live.startswith(restored)  # a prefix of what the writer wrote, no garbage


@pytest.mark.memory
def test_file_growing_during_copy_is_taken_again(tree: Tree, engine: EngineFactory) -> None:
    rollout = tree.write(f"{CODEX}/sessions/r.jsonl", "")
    writer, _ = start_appender(rollout, 100)
    try:
        eng = engine({"adapters": ["codex"]})
        first = eng.checkpoint()
        assert first.ok and first.files == 1
        second = eng.checkpoint()  # the writer kept appending: not recorded as clean
        assert second.ok and second.files == 1
    finally:
        writer.kill()
        writer.wait()
        assert writer.stdout is not None
        writer.stdout.close()


KILL_DURING_COPY = r"""
import sys
from syncengine.cli import main
sys.exit(main(["checkpoint", "codex"]))
"""


@pytest.mark.posix_only(
    "waits for the staging temp file, which S3 has not (one PUT); a kill mid multipart "
    "upload is tests/test_s3.py's"
)
def test_checkpoint_killed_mid_copy_keeps_old_copy_and_next_run_completes(
    tree: Tree, cli: CliRunner
) -> None:
    big = tree.write(f"{CODEX}/sessions/big.jsonl", b"A" * 1_000_000)
    cli("checkpoint", check=0)
    with open(big, "r+b") as f:  # version B: 400 MB, mostly a hole (cheap to create)
        f.truncate(400 * 2**20)
        f.seek(0)
        f.write(b"B" * 1000)
    staging = tree.durable / DUR / ".syncengine/staging"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILL_DURING_COPY],
        env=tree.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:  # wait for the temp object
        temps = list(staging.glob("*.syncengine-tmp")) if staging.exists() else []
        if temps and temps[0].stat().st_size > 0:
            break
    proc.kill()
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "checkpoint finished before it could be killed"
    durable = tree.durable / DUR / "sessions/big.jsonl"
    assert durable.read_bytes() == b"A" * 1_000_000  # the old copy, intact
    cli("checkpoint", check=0)
    assert durable.stat().st_size == 400 * 2**20
    with open(durable, "rb") as f:
        assert f.read(1000) == b"B" * 1000
    assert not list(staging.glob("*.syncengine-tmp"))  # the killed run's temp was swept
    newest = max((tree.durable / DUR / ".syncengine/manifest").iterdir())
    assert newest.name.endswith(".base.jsonl")  # supersedes whatever the killed run left


@pytest.mark.memory
def test_vanishing_file_is_not_an_error(tree: Tree, engine: EngineFactory) -> None:
    tree.write(f"{CODEX}/a.json", "a")
    eng = engine({"adapters": ["codex"]})
    from syncengine.checkpoint import checkpointer as cp
    from syncengine.plan import Upload

    state = eng.passes.adapters.state(eng.config.adapter("codex"))
    (tree.local / CODEX / "a.json").unlink()  # deleted between scan and copy
    rep = cp.run(state, [Upload("a.json", 1, "new")], started_ns=time.time_ns(), jobs=1)
    assert rep.ok and rep.skipped == 1 and rep.files == 0


@pytest.fixture
def ro_data(tree: Tree) -> Path:
    """Make the durable root a read-only bind mount (EROFS), as a full/locked target."""
    ro = tree.base / "ro-data"
    ro.mkdir()
    r = subprocess.run(["mount", "--bind", str(tree.data), str(ro)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {r.stderr.decode().strip()}")
    subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
    yield ro
    subprocess.run(["umount", str(ro)], check=True)


@pytest.mark.dir_only(
    "bind-mounts data/ read-only: a FUSE mountpoint cannot be bind-mounted "
    "by its owner's test like this, and EROFS is a local-disk failure"
)
def test_read_only_durable_root_fails_clearly_with_exit_1(
    tree: Tree, cli: CliRunner, ro_data: Path
) -> None:
    tree.write(f"{CODEX}/auth.json", "secret", mode=0o600)
    out = cli("checkpoint", env=tree.env(DATA_DIR=str(ro_data)), check=1)
    assert "Read-only file system" in out.stderr
    assert str(ro_data) in out.stderr
    assert "mounted read-write" in out.stderr


def test_unreadable_file_is_reported_and_the_rest_goes_on(tree: Tree, cli: CliRunner) -> None:
    setpriv = shutil.which("setpriv")
    if os.getuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv (util-linux) to drop the DAC override capability")
    tree.write(f"{CODEX}/ok.json", "ok")
    tree.write(f"{CODEX}/locked.json", "no", mode=0o000)
    drop = "-dac_override,-dac_read_search"  # root without these obeys file modes
    proc = subprocess.run(
        [
            setpriv,
            f"--inh-caps={drop}",
            f"--bounding-set={drop}",
            sys.executable,
            "-m",
            "syncengine",
            "checkpoint",
            "codex",
        ],
        env=tree.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert "locked.json" in proc.stderr and "Permission denied" in proc.stderr
    assert "incomplete" in proc.stderr
    assert (tree.durable / DUR / "ok.json").read_text() == "ok"
    assert not (tree.durable / DUR / "locked.json").exists()


@pytest.mark.dir_only("points DATA_DIR at a path that does not exist; data/ is not used")
def test_missing_durable_root_is_an_error_not_created(tree: Tree, cli: CliRunner) -> None:
    tree.write(f"{CODEX}/a.json", "a")
    missing = tree.base / "not-mounted"
    out = cli("checkpoint", env=tree.env(DATA_DIR=str(missing)), check=1)
    assert "does not exist" in out.stderr and str(missing) in out.stderr
    assert not missing.exists()


def test_dry_run_prints_the_plan_and_writes_nothing(tree: Tree, cli: CliRunner) -> None:
    import sqlite3

    tree.write(f"{CODEX}/a.json", "abc")
    tree.write(f"{CODEX}/sessions/2026/01/01/rollout-a.jsonl", "x\n")
    with sqlite3.connect(tree.local / CODEX / "memories_1.sqlite") as con:
        con.execute("CREATE TABLE t (v)")
    con.close()
    with tree.no_durable_ops(reach=True):  # a dry run reaches the store too, writes nothing
        out = cli("checkpoint", "--dry-run", "codex", check=0)
    assert "upload a.json (new, 3 bytes)" in out.stdout
    # the action that will really be taken, not "upload" for everything
    assert (
        "segments sessions/2026/01/01/rollout-a.jsonl (new chain: new log, 2 bytes)" in out.stdout
    )
    assert "snapshot memories_1.sqlite (new)" in out.stdout


def test_long_lived_engine_continues_after_a_checkpoint_by_another_process(
    tree: Tree, cli: CliRunner, engine: EngineFactory
) -> None:
    """A daemon's cached index must not reuse a manifest name another process wrote."""
    from syncengine.durable.manifest import load

    eng = engine({"adapters": ["codex"]})
    tree.write(f"{CODEX}/a.json", "a")
    assert eng.checkpoint().files == 1  # manifest 1
    tree.write(f"{CODEX}/b.json", "b")
    cli("checkpoint", "codex", check=0)  # manifest 2, by another process
    tree.write(f"{CODEX}/c.json", "c")
    assert eng.checkpoint().files == 1  # must be manifest 3, not a second "2"
    state = load(tree.store(DUR))
    assert state.last_seq == 3
    assert sorted(state.entries) == ["a.json", "b.json", "c.json"]


def test_version_published_by_an_interrupted_run_is_not_trusted_away(
    tree: Tree, engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the crash matrix: renamed into place, never recorded, then changed back."""
    from syncengine.durable import manifest
    from syncengine.errors import DurableError

    old = time.time_ns() - 10 * 10**9
    eng = engine({"adapters": ["codex"]})
    tree.write(f"{CODEX}/h.json", "AAAA", mtime_ns=old)
    assert eng.checkpoint().ok
    tree.write(f"{CODEX}/h.json", "BBBB", mtime_ns=old + 10**9)

    def gone(*args: object, **kwargs: object) -> str:
        raise DurableError("the mount went away before the manifest was written")

    with monkeypatch.context() as m:
        m.setattr(manifest, "write", gone)
        assert not eng.checkpoint().ok
    durable = tree.raw / DUR / "h.json"
    assert durable.read_bytes() == b"BBBB"  # published, but the index still says AAAA
    tree.write(f"{CODEX}/h.json", "AAAA", mtime_ns=old + 2 * 10**9)
    assert eng.checkpoint().ok
    assert durable.read_bytes() == b"AAAA"
    shutil.rmtree(tree.local / CODEX)
    assert eng.restore().ok
    assert (tree.local / CODEX / "h.json").read_bytes() == b"AAAA"


@pytest.mark.posix_only(
    "a file/directory conflict: in a bucket memo.md and memo.md/inner.md are two keys"
)
def test_a_path_whose_durable_copy_is_of_another_kind_is_reported_and_the_rest_goes_on(
    tree: Tree, cli: CliRunner
) -> None:
    """Deletions are not propagated, so a file replaced by a directory of the same
    name (or the reverse) meets its old durable copy: that path fails with a
    message that says what to do, every other file is still published."""
    tree.write(f"{CODEX}/memo.md", "a file\n")
    tree.write(f"{CODEX}/notes/n1.md", "in a directory\n")
    cli("checkpoint", check=0)
    (tree.local / CODEX / "memo.md").unlink()
    tree.write(f"{CODEX}/memo.md/inner.md", "now a directory\n")
    shutil.rmtree(tree.local / CODEX / "notes")
    tree.write(f"{CODEX}/notes", "now a file\n")
    tree.write(f"{CODEX}/other.md", "published anyway\n")
    out = cli("checkpoint", check=1)
    assert "memo.md/inner.md" in out.stderr and "move the old entry" in out.stderr
    assert "notes" in out.stderr
    durable = files(tree.durable / DUR)
    assert durable["other.md"] == b"published anyway\n"
    assert durable["memo.md"] == b"a file\n" and durable["notes/n1.md"] == b"in a directory\n"
    # Once the old entries are moved aside, the paths are published.
    (tree.durable / "aside").mkdir()
    shutil.move(tree.durable / DUR / "memo.md", tree.durable / "aside" / "memo.md")
    shutil.move(tree.durable / DUR / "notes", tree.durable / "aside" / "notes")
    cli("checkpoint", check=0)
    durable = files(tree.durable / DUR)
    assert durable["memo.md/inner.md"] == b"now a directory\n"
    assert durable["notes"] == b"now a file\n"


def test_an_older_copy_of_the_state_dir_never_overwrites_a_manifest_object(
    tree: Tree, cli: CliRunner
) -> None:
    """A state dir put back from an older copy (a VM or volume snapshot; or a pass
    killed between its manifest object and its index) names the next manifest
    object after its own last one, which the durable side already holds: that
    object is never replaced; the pass rebuilds the index from the manifest and
    publishes what differs, without copying the unchanged files again."""
    tree.write(f"{CODEX}/a.md", "a1\n")
    tree.write(f"{CODEX}/b.md", "b1\n")
    tree.write(f"{CODEX}/c.md", "never changes\n")
    cli("checkpoint", check=0)
    shutil.copytree(tree.state, tree.base / "old-state")
    tree.write(f"{CODEX}/a.md", "a2\n")
    cli("checkpoint", check=0)
    manifest_dir = tree.durable / DUR / ".syncengine" / "manifest"
    before = {p.name: p.read_bytes() for p in manifest_dir.iterdir()}
    shutil.rmtree(tree.state)
    shutil.copytree(tree.base / "old-state", tree.state)
    tree.write(f"{CODEX}/b.md", "b2\n")
    c_object = tree.writes_of(f"{DUR}/c.md")
    out = cli("-v", "checkpoint", check=0)
    assert "rebuilding the index from the durable manifest" in out.stderr
    after = {p.name: p.read_bytes() for p in manifest_dir.iterdir()}
    assert {k: after[k] for k in before} == before  # nothing replaced
    assert len(after) == len(before) + 1
    assert tree.writes_of(f"{DUR}/c.md") == c_object  # not copied again
    out = cli("checkpoint", check=0)
    assert "codex: published 0 file(s)" in out.stdout
    shutil.rmtree(tree.local / CODEX)
    cli("restore", check=0)
    assert (tree.local / CODEX / "a.md").read_text() == "a2\n"
    assert (tree.local / CODEX / "b.md").read_text() == "b2\n"
