"""The mount probe's individual checks, each one trial in the scratch directory.

Owns `CHECKS` (in order: write and close a new file, rename it over an
existing one, set mode and mtime, append to an existing file), the `Trial`
they share, and the errno sets that tell "this mount refuses that" from a
broken mount.  Each check returns `mount.Capabilities` fields; an error it
does not expect propagates and stops the probe.  Making and removing the
scratch directory, the cache and the health check are `probe`'s.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

NO_RENAME_ERRNOS = (
    errno.EXDEV,
    errno.ENOSYS,
    errno.EPERM,
    errno.EOPNOTSUPP,
    errno.ENOTSUP,
    errno.EACCES,
)


# How mounts refuse an append, at open, write or close (rclone off: ESPIPE at write,
# EPERM at close); anything else (ENOTCONN, EIO, ENOSPC) is a broken mount.
APPEND_REFUSED_ERRNOS = (
    errno.EPERM,
    errno.EOPNOTSUPP,
    errno.ENOTSUP,
    errno.EACCES,
    errno.EINVAL,
    errno.ESPIPE,
    errno.EBADF,
)


_MTIME = 1_600_000_000_123_456_789  # an unmistakable mtime to set and read back


@attrs.define
class Trial:
    """The two scratch files one probe works on, and what it has found so far."""

    a: Path
    b: Path
    found: dict[str, Any] = attrs.Factory(dict)

    @property
    def newest(self) -> Path:
        """The file holding the second version: `a` once renamed over it, else `b`."""
        return self.a if self.found.get("rename") else self.b


def _check_write(t: Trial) -> dict[str, Any]:
    _write(t.a, b"first", attrs_on_handle=False)
    return {"attrs_on_handle": _write(t.b, b"second", attrs_on_handle=True)}


def _check_rename(t: Trial) -> dict[str, Any]:
    return _try_rename(t.b, t.a)


def _check_set_attrs(t: Trial) -> dict[str, Any]:
    target = t.newest
    return {
        "set_mtime": _try(lambda: os.utime(target, ns=(_MTIME, _MTIME)))
        and os.stat(target).st_mtime_ns == _MTIME,
        "set_mode": _try(lambda: os.chmod(target, 0o640))
        and stat.S_IMODE(os.stat(target).st_mode) == 0o640,
    }


def _check_append(t: Trial) -> dict[str, Any]:
    return {"append_refused": _append_refused(t.newest, b"second")}


# (what it tries, check): run in order, each returns Capabilities fields and sees what
# the earlier ones found.  To probe something new, add a field to Capabilities, a
# check here, and its words to Capabilities.describe().
CHECKS: tuple[tuple[str, Callable[[Trial], dict[str, Any]]], ...] = (
    ("write and close a new file", _check_write),
    ("rename over an existing file", _check_rename),
    ("set mode and mtime", _check_set_attrs),
    ("append to an existing file", _check_append),
)


def _write(path: Path, data: bytes, *, attrs_on_handle: bool) -> bool:
    """Write and close a file; with attrs_on_handle, say whether fd-set mode/mtime survived."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
        if attrs_on_handle:
            _try(lambda: os.fchmod(fd, 0o604))
            _try(lambda: os.utime(fd, ns=(_MTIME, _MTIME)))
    finally:
        os.close(fd)
    if not attrs_on_handle:
        return True
    st = os.stat(path)
    return st.st_mtime_ns == _MTIME and stat.S_IMODE(st.st_mode) == 0o604


def _try_rename(src: Path, dst: Path) -> dict[str, Any]:
    try:
        os.replace(src, dst)
    except OSError as exc:
        if exc.errno in NO_RENAME_ERRNOS:
            return {
                "rename": False,
                "rename_visible": False,
                "rename_error": errno.errorcode.get(exc.errno or 0, str(exc.errno)),
            }
        raise
    with open(dst, "rb") as f:
        visible = f.read() == b"second"
    return {"rename": True, "rename_visible": visible and not os.path.lexists(src)}


def _try(call: Any) -> bool:
    try:
        call()
    except OSError as exc:
        if exc.errno in (errno.ENOTCONN, errno.EIO):
            raise
        return False
    return True


def _append_refused(path: Path, content: bytes) -> bool:
    """Append one byte to `path` (holding `content`): refused at open, write or close?

    Object-store mounts refuse at open (hf-mount: EPERM) or accept the open and
    refuse later (rclone --vfs-cache-mode off: ESPIPE at write, EPERM at close).
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    except OSError as exc:
        return _refused(exc)
    try:
        os.write(fd, b"+")
    except OSError as exc:
        _close_refused(fd)  # os.close frees the descriptor even when it fails
        return _refused(exc)
    if _close_refused(fd):
        return True
    with open(path, "rb") as f:
        return f.read() != content + b"+"  # accepted, and dropped: refused all the same


def _close_refused(fd: int) -> bool:
    try:
        os.close(fd)
    except OSError as exc:
        return _refused(exc)
    return False


def _refused(exc: OSError) -> bool:
    """True for the errors a mount refuses an append with; raise any other."""
    if exc.errno in APPEND_REFUSED_ERRNOS:
        return True
    raise exc
