"""Sparse files: a checkpoint reads only a file's data extents, a restore leaves zero blocks
as holes.

Owns both halves of the sparse rule (issue 28: a 1 GiB file holding 4 KiB of data was read
whole, stored whole and restored whole).  `reader` reads a file whose allocation is smaller
than its size through `DataReader`: ``SEEK_DATA``/``SEEK_HOLE`` find the extents and a hole
is handed to the stream as zeros without a read, so the durable object stays whole (an
object store has no holes, and the design's rollback needs plain files: docs/FORMAT.md).
`HoleWriter` is the restore's sink: each all-zero block of `BLOCK` bytes, aligned in the
file, is skipped instead of written, and `end` sets the length (a file may end in a hole).
Hashing and copying stay in `syncengine.fs.stream`; this module only moves offsets.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

BLOCK = 4096  # a hole is made of whole blocks of this size, aligned in the file
_ZERO_BLOCK = bytes(BLOCK)
_ZEROS = memoryview(bytes(1 << 20))  # what a hole reads as, a chunk at a time


def reader(fd: int) -> Callable[[memoryview], int]:
    """The `readinto` for a live file: `DataReader`'s for a sparse one (fewer blocks
    allocated than its size), else a plain read at the descriptor's offset."""
    st = os.fstat(fd)
    if st.st_blocks * 512 < st.st_size:
        return DataReader(fd, st.st_size).readinto
    return lambda view: os.readv(fd, [view])


class DataReader:
    """Reads a file from its current offset, holes as zeros without reading them.

    The descriptor's offset follows what was handed out (a caller may read on).  Where
    the filesystem cannot seek to data (``EINVAL``), everything is read.
    """

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.pos = os.lseek(fd, 0, os.SEEK_CUR)
        self.size = size  # holes beyond it are not invented: a grown file is read
        self.data_end = 0  # the current data extent ends here (`pos` below it: read)

    def readinto(self, view: memoryview) -> int:
        if self.pos >= self.data_end and self.pos < self.size:
            hole = self._hole_ahead()
            if hole:
                n = min(len(view), hole, len(_ZEROS))
                view[:n] = _ZEROS[:n]
                self.pos = os.lseek(self.fd, self.pos + n, os.SEEK_SET)
                return n
        want = len(view) if self.pos >= self.data_end else min(len(view), self.data_end - self.pos)
        n = os.readv(self.fd, [view[:want]])
        self.pos += n
        return n

    def _hole_ahead(self) -> int:
        """Bytes of hole from `pos` (0: data starts here, and `data_end` says where it ends)."""
        try:
            data = os.lseek(self.fd, self.pos, os.SEEK_DATA)
            if data == self.pos:
                self.data_end = os.lseek(self.fd, self.pos, os.SEEK_HOLE)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data after pos: a hole up to the size
                data = self.size
            else:  # no extents here (EINVAL): read everything as data
                self.data_end = self.size = 0
                data = self.pos
        os.lseek(self.fd, self.pos, os.SEEK_SET)
        return min(data, self.size) - self.pos if data > self.pos else 0


class HoleWriter:
    """A sink for a new, empty file: writes its bytes from offset 0, skipping each aligned
    all-zero block (a hole); `end` gives the file its length."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.offset = 0

    def write(self, chunk: memoryview | bytes) -> None:
        data = bytes(chunk)  # bytes.find and == run at memory speed, memoryview's do not
        done = start = 0
        while len(data) - start >= BLOCK:
            found = data.find(_ZERO_BLOCK, start)
            if found < 0:
                break
            first = found + (-(self.offset + found)) % BLOCK  # the first aligned block in it
            last = first
            while data[last : last + BLOCK] == _ZERO_BLOCK:
                last += BLOCK
            if last > first:
                self._put(data, done, first)
                done = last
            start = max(last, first + 1)
        self._put(data, done, len(data))
        self.offset += len(data)

    def _put(self, data: bytes, start: int, stop: int) -> None:
        view = memoryview(data)[start:stop]
        at = self.offset + start
        while view:
            n = os.pwrite(self.fd, view, at)
            view, at = view[n:], at + n

    def end(self) -> None:
        """The file's length is what was written (the skipped tail is a hole)."""
        os.ftruncate(self.fd, self.offset)
