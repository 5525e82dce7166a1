"""A gate on the reads of one file: every read, by any process, waits for the test's answer.

Built on fanotify permission events (``FAN_ACCESS_PERM``; root and a kernel
with ``CONFIG_FANOTIFY_ACCESS_PERMISSIONS``, as distribution kernels have):
the kernel asks before each read of the marked file and the reader blocks
until the gate allows it.  A test can so stop another process between two
reads of a copy, at a known offset, with no sleep and no timing: a writer can
then change the file exactly while the copy is half done.  Closing the gate
allows everything pending and later.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import struct
from pathlib import Path

import attrs

_FAN_CLASS_CONTENT = 0x04
_FAN_CLOEXEC = 0x01
_FAN_ACCESS_PERM = 0x0002_0000
_FAN_MARK_ADD = 0x01
_FAN_ALLOW = 0x01
_AT_FDCWD = -100
_META = struct.Struct("=IBBHQii")  # struct fanotify_event_metadata
_RESPONSE = struct.Struct("=iI")  # struct fanotify_response


@attrs.frozen
class Read:
    """One pending read: the process asking, and the descriptor the kernel gave us."""

    pid: int
    fd: int


class ReadGate:
    """Hold every read of `path` until `allow` (see module doc); a context manager."""

    def __init__(self, path: Path) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.fanotify_mark.argtypes = [
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint64,
            ctypes.c_int,
            ctypes.c_char_p,
        ]
        fd = libc.fanotify_init(_FAN_CLASS_CONTENT | _FAN_CLOEXEC, os.O_RDONLY)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"fanotify_init: {os.strerror(err)}")
        if (
            libc.fanotify_mark(fd, _FAN_MARK_ADD, _FAN_ACCESS_PERM, _AT_FDCWD, os.fsencode(path))
            != 0
        ):
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, f"fanotify_mark {path}: {os.strerror(err)}")
        self.fd = fd

    def wait(self, timeout: float, *others: int) -> list[Read]:
        """The reads now waiting (maybe none when one of `others` became readable first)."""
        ready, _, _ = select.select([self.fd, *others], [], [], timeout)
        if self.fd not in ready:
            return []
        data = os.read(self.fd, 4096)
        reads = []
        for off in range(0, len(data), _META.size):
            _len, _vers, _res, _mlen, _mask, fd, pid = _META.unpack_from(data, off)
            reads.append(Read(pid, fd))
        return reads

    def allow(self, read: Read) -> None:
        os.write(self.fd, _RESPONSE.pack(read.fd, _FAN_ALLOW))
        os.close(read.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # the kernel allows what is pending, and stops asking
            self.fd = -1

    def __enter__(self) -> ReadGate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def offset(pid: int, path: Path) -> int | None:
    """The file offset of `pid`'s descriptor on `path` (how far it has read), or None."""
    fds = Path(f"/proc/{pid}/fd")
    for fd in fds.iterdir():
        try:
            if os.readlink(fd) != os.fspath(path):
                continue
            info = (Path(f"/proc/{pid}/fdinfo") / fd.name).read_text()
        except OSError:
            continue
        for line in info.splitlines():
            if line.startswith("pos:"):
                return int(line.split()[1])
    return None
