"""A file rewritten in place while a checkpoint copies it is never published as a mix;
nor is a log whose published beginning is rewritten while its new segment is copied.

The checkpoint runs as its own process; a read gate (tests/readgate.py) holds
its copy after the first chunk, a second process overwrites the beginning and
the end of the file in place (no truncate, same size), then the copy goes on:
it has the old beginning and the new end, bytes the file never held together.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from syncengine.fs.stream import CHUNK
from tests.conftest import CliRunner, Tree
from tests.helpers import files
from tests.readgate import ReadGate, offset

pytestmark = pytest.mark.s3

CODEX = "codex-home"
SIZE = 64 * 2**20  # many chunks to copy
MARK = 4096

REWRITE = r"""
import os, sys
path, size, mark = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(path, os.O_WRONLY)  # no O_TRUNC: in place, same size
os.pwrite(fd, b"C" * mark, 0)
os.pwrite(fd, b"C" * mark, size - mark)
os.close(fd)
"""


def _version(path: os.PathLike[str], fill: bytes) -> None:
    """Data all the way (no holes: a sparse file's copy would skip from its first data
    to its last, fs/sparse.py, and read no chunk in between)."""
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(fill * SIZE)


def test_rewrite_in_place_during_the_copy_keeps_the_previous_durable_copy(
    tree: Tree, cli: CliRunner
) -> None:
    live = tree.write(f"{CODEX}/big.bin", b"A" * 100)
    cli("checkpoint", "codex", check=0)
    _version(live, b"B")  # version B: a new size, so it is copied without hashing first

    def rewrite(pos: int | None) -> None:
        assert pos is not None and CHUNK <= pos < SIZE - MARK  # mid-copy, end not read
        subprocess.run(
            [sys.executable, "-c", REWRITE, str(live), str(SIZE), str(MARK)], check=True, timeout=60
        )

    # let reads through until the copy has read its first chunk
    out, err = _checkpoint_held(tree, live, CHUNK, rewrite)
    assert "copy.changed adapter=codex path=big.bin" in err
    assert "1 changed while copied (taken again next pass)" in out
    durable = tree.raw / "state/codex/big.bin"
    assert durable.read_bytes() == b"A" * 100  # the previous copy, not old B + new C
    staging = tree.raw / "state/codex/.syncengine/staging"
    assert not list(staging.glob("*")) if staging.exists() else True
    cli("checkpoint", "codex", check=0)  # the next pass takes the file again
    data = durable.read_bytes()
    assert data[:MARK] == data[SIZE - MARK :] == b"C" * MARK
    assert len(data) == SIZE
    assert files(tree.raw / "state/codex").keys() == {"big.bin"}


LOG = f"{CODEX}/sessions/rollout-1.jsonl"  # codex's segments pattern: a log of segments


def _lines(fill: bytes, first: int, count: int) -> bytes:
    return b"".join(
        b'{"n": %06d, "v": "%s"}\n' % (i, fill * 40) for i in range(first, first + count)
    )


def test_a_log_rewritten_in_place_while_its_new_segment_is_copied_publishes_nothing(
    tree: Tree, cli: CliRunner
) -> None:
    live = tree.write(LOG, _lines(b"A", 0, 100))
    cli("checkpoint", "codex", check=0)  # the chain's base: A lines
    covered = live.stat().st_size
    with open(live, "ab") as f:
        f.write(_lines(b"B", 100, 50))  # appended: the next pass publishes one segment
    rewritten = _lines(b"C", 0, 150)  # then the whole log rewritten in place, same size

    def rewrite(pos: int | None) -> None:
        with open(live, "r+b") as f:  # no truncate: in place, while the pass waits
            f.write(rewritten)

    # held once the published prefix was checked, before the new lines are read
    _, err = _checkpoint_held(tree, live, covered, rewrite)
    restored = tree.base / "restored"

    def restore() -> bytes:  # into a new container: an empty local root
        shutil.rmtree(restored, ignore_errors=True)
        cli("restore", "codex", env=tree.env(AM_LOCAL=str(restored)), check=0)
        return (restored / LOG).read_bytes()

    assert restore() == _lines(b"A", 0, 100)  # the last published state, not A + C
    assert "copy.changed adapter=codex path=sessions/rollout-1.jsonl" in err
    cli("checkpoint", "codex", check=0)  # the next pass sees the rewrite: a new chain
    assert restore() == rewritten


def _checkpoint_held(
    tree: Tree, live: Path, at: int, meanwhile: Callable[[int | None], None]
) -> tuple[str, str]:
    """`syncengine -v checkpoint codex` in its own process, its reads of `live` held at the
    first one from offset `at` on while `meanwhile(offset)` runs; its (stdout, stderr),
    once it exited 0."""
    try:
        gate = ReadGate(live)
    except OSError as exc:
        pytest.skip(
            f"fanotify permission events unavailable (root, "
            f"CONFIG_FANOTIFY_ACCESS_PERMISSIONS): {exc}"
        )
    with gate:
        proc = subprocess.Popen(
            [sys.executable, "-m", "syncengine", "-v", "checkpoint", "codex"],
            env=tree.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        pidfd = os.pidfd_open(proc.pid)
        try:
            held = None
            while held is None:
                reads = gate.wait(120, pidfd)
                assert reads, "the checkpoint ended (or hung) before reading that far"
                for read in reads:
                    if held is None and (offset(proc.pid, live) or 0) >= at:
                        held = read
                    else:
                        gate.allow(read)
            meanwhile(offset(proc.pid, live))
            gate.allow(held)
        except BaseException:
            proc.kill()  # never leave the checkpoint running when the test fails
            proc.communicate()
            raise
        finally:
            os.close(pidfd)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return out, err
