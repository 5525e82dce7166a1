"""The process behind a FUSE mount, and the identity of one mount instance.

Owns reading what the system tells about the client that serves the durable
root, from /proc only (never an operation on the mount, so an idle pass may
ask): its process, found by a command-line argument that names the mount
point and confirmed by holding ``/dev/fuse`` open where that can be read; its
command line; single environment values asked for by name (a client's
environment holds its credentials: nothing else is read from it, and nothing
read here is logged); and `instance`, a string that changes whenever the
mount is replaced.

Why the serving process is part of the identity: mount ids and FUSE device
numbers are handed out lowest-free-first, so a client killed and mounted
again on the same mount point usually gets the old ones back; a new process
has a new pid and start time.  Where the process cannot be seen (another PID
namespace, another user's process without root) the instance is the boot and
the mount only, and a remount that reuses the mount id is not noticed (the
docs/OPERATING.md says so).
"""

from __future__ import annotations

import os

import attrs

from syncengine.durable.posix.mount import MountInfo

_PROC = "/proc"
_CACHE: dict[str, Server] = {}  # mount key -> the server found last (checked by start time)


@attrs.frozen
class Server:
    """One process serving a FUSE mount."""

    pid: int
    start: int  # clock ticks after boot (field 22 of /proc/PID/stat): never reused with pid
    argv: tuple[str, ...]
    cwd: str

    @property
    def program(self) -> str:
        return os.path.basename(self.argv[0]) if self.argv else ""

    def env(self, name: str) -> str | None:
        """One variable of the process's environment (None: unset or unreadable)."""
        try:
            with open(f"{_PROC}/{self.pid}/environ", "rb") as f:
                data = f.read()
        except OSError:
            return None
        prefix = os.fsencode(name) + b"="
        for item in data.split(b"\0"):
            if item.startswith(prefix):
                return os.fsdecode(item[len(prefix) :])
        return None


def boot_id() -> str:
    try:
        with open(f"{_PROC}/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return "unknown-boot"


def _start_time(pid: int) -> int | None:
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except OSError:
        return None
    return int(fields[19]) if len(fields) > 19 else None


def _argv(pid: int) -> tuple[str, ...]:
    try:
        with open(f"{_PROC}/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return ()
    return tuple(os.fsdecode(a) for a in raw.split(b"\0")[:-1])


def _names(argv: tuple[str, ...], cwd: str, mount_point: str) -> bool:
    """Whether an argument (``PATH`` or ``--flag=PATH``) is the mount point.  Symlinks are
    resolved above the last part only, and never for a path under the mount point: a
    lookup there would be an operation on the mount."""
    base = os.path.basename(mount_point.rstrip("/"))
    for arg in argv[1:]:
        value = arg.partition("=")[2] if arg.startswith("-") else arg
        if not value or value.startswith("-"):
            continue
        path = os.path.normpath(os.path.join(cwd, value))
        if path == mount_point:
            return True
        if os.path.basename(path) != base or path.startswith(mount_point.rstrip("/") + "/"):
            continue
        parent = os.path.realpath(os.path.dirname(path))
        if os.path.join(parent, base) == mount_point:
            return True
    return False


def _holds_fuse(pid: int) -> bool | None:
    """Whether the process has /dev/fuse open (None: its descriptors cannot be read)."""
    try:
        fds = os.listdir(f"{_PROC}/{pid}/fd")
    except PermissionError:
        return None
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"{_PROC}/{pid}/fd/{fd}") == "/dev/fuse":
                return True
        except OSError:
            continue
    return False


def find_server(info: MountInfo) -> Server | None:
    """The process serving the FUSE mount `info`, or None (not FUSE, or not visible)."""
    if not info.fstype.startswith("fuse"):
        return None
    known = _CACHE.get(info.key)
    if known is not None and _start_time(known.pid) == known.start:
        return known
    needle = os.fsencode(os.path.basename(info.mount_point.rstrip("/")) or "/")
    best: tuple[int, Server] | None = None
    for name in os.listdir(_PROC):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        pid = int(name)
        try:
            with open(f"{_PROC}/{pid}/cmdline", "rb") as f:
                if needle not in f.read():
                    continue
            cwd = os.readlink(f"{_PROC}/{pid}/cwd")
        except OSError:
            continue
        argv, start = _argv(pid), _start_time(pid)
        if start is None or not _names(argv, cwd, info.mount_point):
            continue
        holds = _holds_fuse(pid)
        rank = {True: 2, None: 1, False: 0}[holds]
        if rank and (best is None or rank > best[0]):
            best = (rank, Server(pid, start, argv, cwd))
    if best is None:
        _CACHE.pop(info.key, None)
        return None
    _CACHE[info.key] = best[1]
    return best[1]


def instance(info: MountInfo | None) -> str:
    """A string naming the mount instance `info` (from `mount.mount_of`): it changes when
    the mount is replaced, and at every boot.  Local reads of /proc only."""
    if info is None:
        return f"{boot_id()}/unknown-mount"
    server = find_server(info)
    serving = f"/{server.pid}:{server.start}" if server is not None else ""
    return f"{boot_id()}/{info.key}{serving}"
