"""Sparse files (issue 28): a checkpoint reads only the data, a restore writes holes.

The command runs as a child process; what it read comes from its own ``/proc/self/io``
(``rchar``: bytes returned by read calls, page cache or not), printed at its exit.
"""

from __future__ import annotations

import os

import pytest

from syncengine.fs import sparse
from tests.conftest import Tree, run_cli

SIZE = 128 << 20
DATA = 8 << 10
_MEASURED = (
    "import atexit, sys\n"
    "atexit.register(lambda: sys.stderr.write(open('/proc/self/io').read()))\n"
    "from syncengine.cli import main\n"
    "sys.exit(main())\n"
)


def _rchar(tree: Tree, *args: str) -> int:
    done = run_cli(tree, *args, check=0, python=("-c", _MEASURED))
    fields = dict(line.split(": ") for line in done.stderr.splitlines() if ": " in line)
    return int(fields["rchar"])


@pytest.mark.dir_only("the live side's holes: the durable kind holds the object whole")
def test_a_sparse_file_is_read_by_its_data_and_restored_with_holes(tree: Tree) -> None:
    """Fails without `syncengine.fs.sparse`: the checkpoint reads all 128 MiB, the restored
    file allocates all of it."""
    if not os.access("/proc/self/io", os.R_OK):
        pytest.skip("no /proc/self/io: what the command read cannot be counted")
    path = tree.write("codex-home/sessions/big.img", b"")
    with path.open("r+b") as f:
        f.truncate(SIZE)
        f.seek(SIZE // 2)
        f.write(b"\x01" * (DATA // 2))
        f.seek(SIZE - DATA // 2)
        f.write(b"\x02" * (DATA // 2))
    if path.stat().st_blocks * 512 >= SIZE // 4:
        pytest.skip(f"{tree.local} makes no holes (a sparse file is allocated whole)")
    assert _rchar(tree, "checkpoint", "codex") < SIZE // 4
    stored = tree.data / "state/codex/sessions/big.img"
    assert stored.stat().st_size == SIZE  # the durable object stays whole
    path.rename(tree.base / "original.img")
    _rchar(tree, "restore", "codex")
    assert path.stat().st_size == SIZE
    assert path.stat().st_blocks * 512 <= DATA + (128 << 10)
    with path.open("rb") as got, (tree.base / "original.img").open("rb") as want:
        while chunk := want.read(1 << 22):
            assert got.read(1 << 22) == chunk
    assert _rchar(tree, "checkpoint", "codex") < SIZE // 4  # the idle pass hashes nothing


@pytest.mark.parametrize("offset", [0, 1000])
def test_the_hole_writer_skips_aligned_zero_blocks_only(
    tmp_path: os.PathLike[str], offset: int
) -> None:
    """Bytes stay equal whatever the chunking; only whole aligned zero blocks become holes."""
    block = sparse.BLOCK
    data = b"a" * offset + bytes(3 * block) + b"b" * 10 + bytes(block + 5) + bytes(2 * block)
    path = os.path.join(tmp_path, "f")
    fd = os.open(path, os.O_CREAT | os.O_RDWR)
    try:
        writer = sparse.HoleWriter(fd)
        for start in range(0, len(data), 5000):
            writer.write(memoryview(data)[start : start + 5000])
        writer.end()
        assert os.pread(fd, len(data) + 1, 0) == data
        reader = sparse.DataReader(fd, len(data))
        os.lseek(fd, 0, os.SEEK_SET)
        buf = bytearray(len(data))
        got = 0
        while n := reader.readinto(memoryview(buf)[got:]):
            got += n
        assert bytes(buf) == data
    finally:
        os.close(fd)
