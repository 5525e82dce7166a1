"""The local side failing: a full state directory is one clear line, and the next run recovers.

Uses a real full filesystem: a small tmpfs mounted by the test (root only;
skipped with the reason elsewhere), filled to the last byte.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CliRunner, Tree

CODEX = "codex-home"


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, unmounted after the test."""
    mnt = tmp_path / "small-fs"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def fill(fs: Path) -> Path:
    """Write a file until the filesystem refuses with ENOSPC; return it (delete to free)."""
    filler = fs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return filler


def one_line_error(stderr: str, *needles: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert stderr.count("\n") == 1, stderr
    for needle in needles:
        assert needle in stderr, stderr


def test_full_state_dir_is_one_line_and_the_next_run_recovers(
    tree: Tree, cli: CliRunner, small_fs: Path
) -> None:
    state = ["--state-dir", str(small_fs / "state")]
    old = time.time_ns() - 60 * 10**9
    tree.write(f"{CODEX}/h.json", "AAAA", mtime_ns=old)
    tree.write(f"{CODEX}/other.json", "kept", mtime_ns=old)
    cli(*state, "checkpoint", "codex", check=0)
    tree.write(f"{CODEX}/h.json", "BBBB", mtime_ns=old + 10**9)
    filler = fill(small_fs)
    out = cli(*state, "checkpoint", "codex", check=1)  # publishes B, then cannot save the index
    one_line_error(out.stderr, str(small_fs / "state"), "No space left on device", "free space")
    assert (tree.backing / "state/codex/h.json").read_bytes() == b"BBBB"
    # The dangerous case: back to the content the unsaved index remembers.  The next pass
    # must not trust that hash (the durable copy is B), or restore would bring B back.
    tree.write(f"{CODEX}/h.json", "AAAA", mtime_ns=old + 2 * 10**9)
    filler.unlink()
    cli(*state, "checkpoint", "codex", check=0)
    assert (tree.backing / "state/codex/h.json").read_bytes() == b"AAAA"
    # A restore into a full state dir: the same one line; then it recovers too.
    shutil.rmtree(tree.local / CODEX)
    filler = fill(small_fs)
    out = cli(*state, "restore", "codex", check=1)
    one_line_error(out.stderr, str(small_fs / "state"), "No space left on device")
    filler.unlink()
    shutil.rmtree(tree.local / CODEX)
    cli(*state, "restore", "codex", check=0)
    assert (tree.local / CODEX / "h.json").read_bytes() == b"AAAA"
    assert (tree.local / CODEX / "other.json").read_bytes() == b"kept"
    out = cli(*state, "checkpoint", "codex", check=0)
    assert "codex: published 0 file(s)" in out.stdout
    # verify saves its progress in the state dir too
    filler = fill(small_fs)
    out = cli(*state, "verify", "codex", "--max-entries", "1", check=1)
    one_line_error(out.stderr, str(small_fs / "state"), "No space left on device", "free space")
    filler.unlink()
    cli(*state, "verify", "codex", check=0)


@pytest.mark.dir_only("the state dir is local in both kinds; one run is enough")
def test_unwritable_state_dir_is_one_line_with_exit_1(
    tree: Tree, cli: CliRunner, small_fs: Path
) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    tree.write(f"{CODEX}/a.json", "a")
    out = cli("--state-dir", str(small_fs / "state"), "checkpoint", check=1)
    one_line_error(out.stderr, str(small_fs / "state"), "Read-only file system")
    out = cli("--state-dir", str(small_fs / "state"), "restore", check=1)
    one_line_error(out.stderr, str(small_fs / "state"), "Read-only file system")
