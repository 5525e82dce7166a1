"""A FUSE mount that behaves like hf-mount's streaming writes over a bucket.

    python -m tests.fusebucket BACKING MOUNTPOINT [options]   (or tests/fusebucket.py)

BACKING plays the bucket, MOUNTPOINT plays `/data` (docs/durable-target.md);
tests mount it through tests/bucket_mount.py. Emulated, as hf-mount v0.9 does:
- A write handle is a bytearray made by create() or open(O_TRUNC); any other
  open for writing is EPERM, a write off the end EINVAL, a read EBADF, and
  truncate() works on it alone (EPERM on a committed file). fsync does nothing.
- open(O_TRUNC) reaches a FUSE filesystem as one call only if it asked for
  atomic O_TRUNC at init (FUSE_CAP_ATOMIC_O_TRUNC): the emulator asks for it.
  Without it (`--no-atomic-trunc`, or a kernel that does not offer it) the
  kernel strips O_TRUNC from open and truncates to 0 by path right after: an
  open for writing without O_APPEND is then held as "truncate pending", the
  truncate to 0 by the same process makes it a write handle, a write before it
  is EPERM (what hf-mount says at open), and a close before it changes nothing.
- `--refuse-at-close` behaves like rclone's `--vfs-cache-mode off` instead: an
  open for writing without O_TRUNC (O_APPEND included) succeeds, its writes
  fail with EPERM, and so does its close; the object is unchanged.
  `--refuse-containing TEXT`: a commit whose bytes contain TEXT fails at close
  with EPERM and is dropped (a mount refusing one object).
- Commit = temp file in BACKING/.fusebucket-tmp (hidden from the mount), then
  os.replace. It happens in flush(), inside close(), when the closer is the
  process that opened the handle, as hf-mount's `flush` does: release() reaches
  us after close() has returned, so committing there races with the caller.
  A close from another process (an inherited descriptor) commits on release.
- Until then stat shows the bytes written so far; readers and the bucket see
  the previous object. unlink of an open file uploads nothing.
- `--write-back SECONDS` behaves like rclone's `--vfs-cache-mode writes`
  instead: a close is acknowledged at once and the object reaches BACKING
  SECONDS later (plus up to `--write-back-jitter` more, drawn per object, so
  uploads land out of order). Meanwhile the mount shows it (stat, reads,
  listings), chmod and utimens apply to it (its mtime is kept), renames move
  it, and a rename over an older object leaves that one in BACKING until the
  upload lands. SIGKILL loses every pending upload (rclone with its cache
  dropped); a clean unmount lands them first.
- A killed writer's descriptors are closed (flushed) by the kernel as it dies:
  `--kill-mode commit` (hf-mount) publishes the truncated bytes, `discard`
  keeps the previous object. A writer that exits without closing commits.
- mkdir is in memory only, and backing directories left empty are removed
  (a bucket has no empty prefix) but stay visible until unmount.
- File rename is one os.replace. Directory rename moves the backing directory;
  hf-mount re-adds and deletes each file below it: slow, not atomic.
  `--no-rename`/`--rename-errno` refuse renames, like Mountpoint for S3.
- Symlinks are real symlinks in BACKING. chmod/chown/utimens apply to the
  backing file (`--ignore-setattr`: no-op, `--no-setattr`: EPERM); a pending
  file's mtime is its commit time.
Metadata caches are off by default (timeouts 0: every lookup reaches us);
`--attr-timeout 10 --negative-timeout 30` gives the kernel hf-mount's caching
(metadata 10 s, negative lookups 30 s). Not emulated: phantom prefix directories
(hf-mount < 0.9.2), advanced writes, failing commits, locks, xattrs, hard
links, other writers to the bucket.

Foreground, multithreaded: one lock guards the state, latency sleeps happen
outside it. Dies with its parent (PR_SET_PDEATHSIG) and unmounts on
SIGTERM/SIGINT. `--stats FILE` gets {"seq": n, "counts": {...}} on SIGUSR1 and
at exit. libfuse 3.14's "Ignoring invalid max threads value" is harmless.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import functools
import itertools
import json
import logging
import os
import random
import signal
import stat
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Concatenate, NoReturn, ParamSpec, TypeVar

import mfusepy

STAGING = ".fusebucket-tmp"
PF_EXITING = 0x4  # include/linux/sched.h
FUSE_CAP_ATOMIC_O_TRUNC = 1 << 3  # libfuse fuse_common.h (2.x and 3.x)
UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2  # libfuse 3 sends them with tv_sec 0
RENAME_NOREPLACE = 1
STAT_KEYS = ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_blocks")
log = logging.getLogger("fusebucket")
P = ParamSpec("P")
R = TypeVar("R")


def _fail(code: int) -> NoReturn:
    raise mfusepy.FuseOSError(code)


@dataclass
class WriteHandle:
    path: str
    mode: int
    uid: int
    gid: int
    opener: int  # thread-group id of the process that opened it
    buf: bytearray = field(default_factory=bytearray)
    mtime_ns: int = field(default_factory=time.time_ns)
    dirty: bool = True  # holds bytes the bucket has not seen
    dropped: bool = False  # unlinked, overwritten or discarded: never committed


@dataclass
class Upload:
    """A close acknowledged in write-back mode, reaching the bucket at `due`."""

    path: str
    data: bytes
    mode: int
    mtime_ns: int
    due: float  # time.monotonic()
    dropped: bool = False  # unlinked or overwritten before it landed


@dataclass
class PendingTruncate:
    """An open for writing whose O_TRUNC the kernel stripped: the truncate to 0 follows."""

    path: str
    opener: int


def _tgid(tid: int) -> int:
    """FUSE gives the calling thread; a handle belongs to its process."""
    with contextlib.suppress(OSError), open(f"/proc/{tid}/status") as f:
        for line in f:
            if line.startswith("Tgid:"):
                return int(line.split()[1])
    return tid


def _killed_by_signal(tid: int) -> bool:
    """Whether TID is exiting because of a signal.

    do_exit() sets PF_EXITING and exit_code before closing the files, and the
    dying task waits for our flush reply, so it is still there to look at.
    Fields 9 (flags) and 52 (exit_code, root only) of proc_pid_stat(5).
    """
    try:
        with open(f"/proc/{tid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return False
    return len(fields) > 49 and bool(int(fields[6]) & PF_EXITING) and int(fields[49]) & 0x7F != 0


def _op(
    kind: str, latency: str | None = "meta", locked: bool = True
) -> Callable[[Callable[Concatenate[Bucket, P], R]], Callable[Concatenate[Bucket, P], R]]:
    """Count the call as KIND (a failure also as KIND.ERRNO), sleep, then run it locked."""

    def wrap(fn: Callable[Concatenate[Bucket, P], R]) -> Callable[Concatenate[Bucket, P], R]:
        def run(self: Bucket, /, *args: P.args, **kwargs: P.kwargs) -> R:
            self.count(kind)
            if latency:
                time.sleep(getattr(self.args, f"latency_{latency}") / 1000)
            try:
                with self._lock if locked else contextlib.nullcontext():
                    return fn(self, *args, **kwargs)
            except OSError as e:
                self.count(f"{kind}.{errno.errorcode.get(e.errno or 0, e.errno)}")
                raise
            except Exception:
                self.count("internal_error")  # makes the daemon exit 1
                log.exception("fusebucket: internal error in %s%r", kind, args)
                raise

        functools.update_wrapper(run, fn)  # mfusepy inspects create()'s signature
        return run

    return wrap


class Bucket(mfusepy.Operations):  # type: ignore[misc]
    use_ns = True

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root = os.path.realpath(args.backing)
        self.staging = os.path.join(self.root, STAGING)
        os.makedirs(self.staging, exist_ok=True)
        for stale in os.listdir(self.staging):  # commits cut short by SIGKILL
            os.unlink(os.path.join(self.staging, stale))
        self._lock = threading.Lock()  # not `lock`: mfusepy would take it for fcntl locking
        self.dirs: dict[str, int] = {}  # in-memory directories: path -> mode
        self.writers: dict[int, WriteHandle] = {}
        self.readers: dict[int, int | bytes | None] = {}  # fh -> backing fd, a pending
        # upload's bytes, or None: nothing committed
        self.pending: dict[int, PendingTruncate] = {}  # opens waiting for their truncate to 0
        self.atomic_trunc = False  # what init negotiated
        self.fhs = itertools.count(1)
        self.counts: Counter[str] = Counter()
        self.stats_lock = threading.Lock()
        self.seq = 0
        self.uploads: list[Upload] = []  # write-back mode: acknowledged, not in BACKING yet
        self._landing = threading.Condition(self._lock)
        self._stopping = False
        self._uploader = threading.Thread(target=self._upload_loop, name="fusebucket-upload")

    def count(self, key: str) -> None:
        with self.stats_lock:
            self.counts[key] += 1

    def dump_stats(self, path: str) -> None:
        with self.stats_lock:
            self.seq += 1
            data = {"seq": self.seq, "counts": dict(self.counts)}
        with open(path + ".tmp", "w") as f:
            json.dump(data, f)
        os.replace(path + ".tmp", path)

    # -- the merged view: backing tree + in-memory dirs + pending writes --
    def _real(self, path: str) -> str:
        rel = path.lstrip("/")
        if rel.split("/", 1)[0] == STAGING:
            _fail(errno.ENOENT)
        return os.path.join(self.root, rel)

    def _lstat(self, path: str) -> os.stat_result | None:
        try:
            return os.lstat(self._real(path))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _writer(self, path: str) -> WriteHandle | None:
        """The newest live write handle on PATH."""
        live = [h for _, h in sorted(self.writers.items()) if h.path == path and not h.dropped]
        return live[-1] if live else None

    def _pending(self, path: str) -> Upload | None:
        """The newest upload of PATH still to land (write-back mode)."""
        live = [u for u in self.uploads if u.path == path and not u.dropped]
        return live[-1] if live else None

    def _kind(self, path: str) -> str | None:
        if self._writer(path) or self._pending(path):
            return "file"
        st = self._lstat(path)
        if st is not None:
            return "dir" if stat.S_ISDIR(st.st_mode) else "file"
        return "dir" if path in self.dirs else None

    def _children(self, path: str) -> set[str]:
        real = self._real(path)
        names = set(os.listdir(real)) if os.path.isdir(real) and not os.path.islink(real) else set()
        names.discard(STAGING)
        prefix = path.rstrip("/") + "/"
        pending = (h.path for h in self.writers.values() if not h.dropped)
        landing = (u.path for u in self.uploads if not u.dropped)
        for p in itertools.chain(self.dirs, pending, landing):
            if p.startswith(prefix) and "/" not in p[len(prefix) :]:
                names.add(p[len(prefix) :])
        return names

    def _prune(self, path: str) -> None:
        """Remove backing directories left empty; they stay visible in memory."""
        while path != "/":
            try:
                os.rmdir(self._real(path))
            except OSError:
                return
            self.dirs.setdefault(path, 0o755)
            path = os.path.dirname(path)

    def _new_writer(self, path: str, mode: int) -> int:
        uid, gid, tid = mfusepy.fuse_get_context()
        fh = next(self.fhs)
        self.writers[fh] = WriteHandle(path, stat.S_IMODE(mode), uid, gid, _tgid(tid))
        return fh

    def _commit(self, h: WriteHandle) -> None:
        time.sleep(self.args.latency_commit / 1000)
        with self._lock:
            if h.dropped or not h.dirty:
                return
            if self.args.write_back is not None:
                self._acknowledge(h)
                return
            self._write_backing(h.path, h.buf, h.mode)
            h.dirty = False
            for other in self.writers.values():  # older handles whose bytes landed before:
                if other is not h and other.path == h.path and not other.dirty:
                    other.dropped = True  # not the path's size or bytes any more (their
                    # release may come after this one's under load; getattr must not see them)
        self.count("commit")

    def _write_backing(
        self, path: str, data: bytes | bytearray, mode: int, mtime_ns: int | None = None
    ) -> None:
        """Replace PATH's object in BACKING at once (a temp file, then os.replace)."""
        dest = self._real(path)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.staging)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                os.fchmod(f.fileno(), mode)
            if mtime_ns is not None:
                os.utime(tmp, ns=(mtime_ns, mtime_ns))
            os.replace(tmp, dest)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def _acknowledge(self, h: WriteHandle) -> None:
        """Write-back mode: the close succeeds now, the bucket gets the bytes later."""
        for old in self.uploads:
            if old.path == h.path:
                old.dropped = True  # only the newest version is uploaded
        delay = self.args.write_back + random.uniform(0, self.args.write_back_jitter)
        self.uploads.append(
            Upload(h.path, bytes(h.buf), h.mode, h.mtime_ns, time.monotonic() + delay)
        )
        h.dirty, h.dropped = False, True  # the upload stands for it from now on
        self._landing.notify()
        self.count("acknowledge")

    def _land(self, u: Upload) -> None:
        """Put one upload in BACKING (lock held)."""
        self.uploads.remove(u)
        if u.dropped:
            return
        self._write_backing(u.path, u.data, u.mode, u.mtime_ns)
        self.count("commit")

    def _upload_loop(self) -> None:
        with self._landing:
            while not self._stopping:
                live = [u for u in self.uploads if not u.dropped]
                self.uploads = live
                if not live:
                    self._landing.wait()
                    continue
                first = min(live, key=lambda u: u.due)
                wait = first.due - time.monotonic()
                if wait > 0:
                    self._landing.wait(wait)
                    continue
                self._land(first)

    def land_all(self) -> None:
        """A clean unmount: stop the uploader after landing what is pending."""
        if not self._uploader.is_alive():
            return
        with self._landing:
            self._stopping = True
            for u in sorted(self.uploads, key=lambda u: u.due):
                self._land(u)
            self._landing.notify()
        self._uploader.join()

    def _setattr(
        self,
        path: str | None,
        apply: Callable[[str, os.stat_result], object],
        landing: Callable[[Upload], object] | None = None,
    ) -> int:
        """chmod/chown/utimens reach committed objects, and pending uploads."""
        if self.args.no_setattr:
            _fail(errno.EPERM)
        upload = self._pending(path) if path and landing else None
        if upload is not None and landing is not None:
            if not self.args.ignore_setattr:
                landing(upload)
            return 0
        st = self._lstat(path) if path else None
        # A handle whose bytes are still to commit would replace the object (and its
        # attributes) at close: ignored.  One already committed at flush only waits for
        # the kernel's release, which comes asynchronously after close() returned: the
        # object is there, so chmod/utime reach it (else a close, rename, utime raced the
        # release and lost the utime on a loaded machine).
        writer = self._writer(path) if path else None
        if path and st and not self.args.ignore_setattr and not (writer and writer.dirty):
            apply(self._real(path), st)
        return 0

    def _open_for_write(self, path: str, flags: int) -> int:
        """open() for writing: a write handle (O_TRUNC), a pending truncate, or EPERM."""
        if flags & os.O_TRUNC:
            h, st = self._writer(path) or self._pending(path), self._lstat(path)
            self.count("open_write")
            return self._new_writer(path, h.mode if h else st.st_mode if st else 0o644)
        refuse_later = self.args.refuse_at_close  # rclone off: EPERM at write and close
        if not refuse_later and (self.atomic_trunc or flags & os.O_APPEND):
            _fail(errno.EPERM)  # hf-mount: no append, no read-modify-write
        fh = next(self.fhs)  # O_TRUNC may have been stripped: wait for the truncate
        self.pending[fh] = PendingTruncate(path, _tgid(mfusepy.fuse_get_context()[2]))
        self.count("open_pending_truncate")
        return fh

    def _refused(self, h: WriteHandle) -> bool:
        marker = self.args.refuse_containing
        return marker is not None and marker.encode() in h.buf

    def _truncated_open(self, path: str | None, fh: int | None) -> int | None:
        """The pending open (of the calling process) that this truncate to 0 completes."""
        if fh in self.pending:
            return fh
        caller = _tgid(mfusepy.fuse_get_context()[2])  # the kernel sends it by path, no fh
        mine = [f for f, p in self.pending.items() if p.path == path and p.opener == caller]
        return mine[-1] if mine else None

    # -- FUSE operations --
    def init_with_config(self, conn: Any, config: Any) -> None:
        """Ask for atomic O_TRUNC (unless told not to), then tell BucketMount we are up."""
        if conn is not None:
            offered = bool(conn.capable & FUSE_CAP_ATOMIC_O_TRUNC)
            if offered:
                self.count("init.offered_atomic_o_trunc")
            want = offered and not self.args.no_atomic_trunc
            for field_name in ("want", "want_ext"):  # want_ext: libfuse >= 3.17
                if hasattr(conn, field_name):
                    value = getattr(conn, field_name) & ~FUSE_CAP_ATOMIC_O_TRUNC
                    setattr(conn, field_name, value | (FUSE_CAP_ATOMIC_O_TRUNC if want else 0))
            self.atomic_trunc = want
        self.count("init.atomic_o_trunc" if self.atomic_trunc else "init.no_atomic_o_trunc")
        if self.args.write_back is not None:  # here: SIGUSR1 is blocked in this thread too
            self._uploader.start()
        if self.args.ready_fd is not None:  # the kernel has the mount: tell BucketMount
            os.write(self.args.ready_fd, b"ready\n")
            os.close(self.args.ready_fd)

    @_op("getattr")
    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
        h = self.writers.get(fh or 0) or self._writer(path or "")
        if h:
            t = h.mtime_ns
            return {
                "st_mode": stat.S_IFREG | h.mode,
                "st_nlink": 1,
                "st_size": len(h.buf),
                "st_uid": h.uid,
                "st_gid": h.gid,
                "st_atime": t,
                "st_mtime": t,
                "st_ctime": t,
            }
        u = self._pending(path or "")
        if u:
            t = u.mtime_ns
            return {
                "st_mode": stat.S_IFREG | u.mode,
                "st_nlink": 1,
                "st_size": len(u.data),
                "st_uid": os.getuid(),
                "st_gid": os.getgid(),
                "st_atime": t,
                "st_mtime": t,
                "st_ctime": t,
            }
        st = self._lstat(path) if path else None
        if st is not None:
            mode = st.st_mode
        elif path in self.dirs:
            st, mode = os.lstat(self.root), stat.S_IFDIR | self.dirs[path]
        else:
            _fail(errno.ENOENT)
        attrs = {key: getattr(st, key) for key in STAT_KEYS}
        return attrs | {
            "st_mode": mode,
            "st_atime": st.st_atime_ns,
            "st_mtime": st.st_mtime_ns,
            "st_ctime": st.st_ctime_ns,
        }

    @_op("access")
    def access(self, path: str, amode: int) -> int:
        return 0 if self._kind(path) else _fail(errno.ENOENT)

    @_op("opendir")
    def opendir(self, path: str) -> int:
        return 0

    @_op("readdir", latency="list")
    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *sorted(self._children(path))]

    @_op("create")
    def create(self, path: str, mode: int, flags: int) -> int:
        self._real(path)
        return self._new_writer(path, mode)

    @_op("open")
    def open(self, path: str, flags: int) -> int:
        if flags & os.O_ACCMODE == os.O_RDONLY:
            upload = self._pending(path)
            try:
                fd: int | bytes | None = (
                    upload.data if upload is not None else os.open(self._real(path), os.O_RDONLY)
                )
            except FileNotFoundError:
                if self._writer(path) is None:
                    raise
                fd = None
            fh = next(self.fhs)
            self.readers[fh] = fd
            self.count("open_read")
            return fh
        return self._open_for_write(path, flags)

    @_op("read", latency=None)
    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        if fh not in self.readers:
            _fail(errno.EBADF)  # a write handle cannot be read
        fd = self.readers[fh]
        if isinstance(fd, bytes):
            return fd[offset : offset + size]
        return b"" if fd is None else os.pread(fd, size, offset)

    @_op("write", latency=None)
    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        h = self.writers.get(fh)
        if h is None:
            _fail(errno.EPERM if fh in self.pending else errno.EBADF)
        if offset != len(h.buf):
            _fail(errno.EINVAL)
        h.buf += data
        h.mtime_ns, h.dirty = time.time_ns(), True
        return len(data)

    @_op("truncate")
    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        opened = self._truncated_open(path, fh) if length == 0 else None
        if opened is not None:  # the second half of open(O_TRUNC) without atomic O_TRUNC
            pending = self.pending.pop(opened)
            h = self._writer(pending.path) or self._pending(pending.path)
            st = self._lstat(pending.path)
            uid, gid, _ = mfusepy.fuse_get_context()
            mode = h.mode if h else stat.S_IMODE(st.st_mode) if st else 0o644
            self.writers[opened] = WriteHandle(pending.path, mode, uid, gid, pending.opener)
            self.count("truncate_after_open")
            return 0
        h = self.writers.get(fh or 0) or self._writer(path or "")
        if h is None:
            _fail(errno.EPERM if path and self._kind(path) else errno.ENOENT)
        del h.buf[length:]
        h.buf += bytes(length - len(h.buf))
        h.mtime_ns, h.dirty = time.time_ns(), True
        return 0

    @_op("fsync", latency=None)
    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        return 0  # hf-mount: success, and nothing reaches the bucket

    @_op("flush", latency=None, locked=False)
    def flush(self, path: str | None, fh: int) -> int:
        tid = mfusepy.fuse_get_context()[2]
        with self._lock:
            h = self.writers.get(fh)
            if fh in self.pending and self.args.refuse_at_close:
                _fail(errno.EPERM)
            if h is None or h.dropped:
                return 0
            if self._refused(h):
                h.dropped = True
                self.count("refused")
                _fail(errno.EPERM)
            if self.args.kill_mode == "discard" and _killed_by_signal(tid):
                h.dropped = True
                self.count("discard")
                return 0
            if _tgid(tid) != h.opener:
                return 0  # another process's copy of the descriptor: commit on release
        self._commit(h)
        return 0

    @_op("release", latency=None, locked=False)
    def release(self, path: str | None, fh: int) -> int:
        with self._lock:
            fd, h = self.readers.pop(fh, None), self.writers.get(fh)
            self.pending.pop(fh, None)  # opened for writing, never truncated: nothing changed
        if isinstance(fd, int):
            os.close(fd)
        if h is not None:
            with self._lock:
                h.dropped = h.dropped or self._refused(h)
            try:
                self._commit(h)
            finally:
                with self._lock:
                    del self.writers[fh]
        return 0

    @_op("mkdir")
    def mkdir(self, path: str, mode: int) -> int:
        self._real(path)
        if self._kind(path) is not None:
            _fail(errno.EEXIST)
        self.dirs[path] = stat.S_IMODE(mode)
        return 0

    @_op("rmdir")
    def rmdir(self, path: str) -> int:
        real, kind = self._real(path), self._kind(path)
        if kind != "dir":
            _fail(errno.ENOTDIR if kind else errno.ENOENT)
        if self._children(path):
            _fail(errno.ENOTEMPTY)
        self.dirs.pop(path, None)
        if os.path.isdir(real):
            os.rmdir(real)
            self._prune(os.path.dirname(path))
        return 0

    @_op("unlink")
    def unlink(self, path: str) -> int:
        real, st = self._real(path), self._lstat(path)
        if st is not None and stat.S_ISDIR(st.st_mode):
            _fail(errno.EISDIR)
        live = [h for h in self.writers.values() if h.path == path and not h.dropped]
        landing = [u for u in self.uploads if u.path == path and not u.dropped]
        if st is None and not live and not landing:
            _fail(errno.ENOENT)
        for h in [*live, *landing]:  # hf-mount: an unlinked file is not uploaded on close
            h.dropped = True
        if st is not None:
            os.unlink(real)
            self._prune(os.path.dirname(path))
        return 0

    @_op("rename")
    def rename(self, old: str, new: str, flags: int = 0) -> int:
        if self.args.rename_errno:
            _fail(getattr(errno, self.args.rename_errno))
        if flags & ~RENAME_NOREPLACE:
            _fail(errno.EINVAL)  # RENAME_EXCHANGE, RENAME_WHITEOUT: hf-mount refuses them too
        src, dst = self._real(old), self._real(new)
        kind, target = self._kind(old), self._kind(new)
        if kind is None:
            _fail(errno.ENOENT)
        if kind == "dir" and new.startswith(old + "/"):
            _fail(errno.EINVAL)
        if old == new:
            return 0
        if target is not None:
            if flags & RENAME_NOREPLACE:
                _fail(errno.EEXIST)
            if kind != target:
                _fail(errno.EISDIR if target == "dir" else errno.ENOTDIR)
            if target == "dir" and self._children(new):
                _fail(errno.ENOTEMPTY)
        if os.path.lexists(src):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.replace(src, dst)
            self._prune(os.path.dirname(old))
        elif os.path.isdir(dst) and not os.path.islink(dst):
            os.rmdir(dst)  # an in-memory directory replaces an empty one
        elif os.path.lexists(dst) and not self._pending(old):
            os.unlink(dst)  # a file not committed yet takes over the name
        # (an upload still to land leaves the old object in the bucket until it does)
        for h in [*self.writers.values(), *self.uploads]:
            if h.path == new:
                h.dropped = True  # the overwritten file's pending bytes go with it
            elif h.path == old or h.path.startswith(old + "/"):
                h.path = new + h.path[len(old) :]
        self.dirs.pop(new, None)
        for d in [d for d in self.dirs if d == old or d.startswith(old + "/")]:
            self.dirs[new + d[len(old) :]] = self.dirs.pop(d)
        return 0

    @_op("symlink")
    def symlink(self, target: str, source: str) -> int:
        real = self._real(target)  # mfusepy: TARGET is the link, SOURCE what it points to
        if self._kind(target) is not None:
            _fail(errno.EEXIST)
        os.makedirs(os.path.dirname(real), exist_ok=True)
        os.symlink(source, real)
        return 0

    @_op("readlink")
    def readlink(self, path: str) -> str:
        return os.readlink(self._real(path))

    @_op("chmod")
    def chmod(self, path: str | None, mode: int) -> int:
        def landing(u: Upload) -> None:
            u.mode = stat.S_IMODE(mode)

        return self._setattr(path, lambda real, st: os.chmod(real, stat.S_IMODE(mode)), landing)

    @_op("chown")
    def chown(self, path: str | None, uid: int, gid: int) -> int:
        return self._setattr(path, lambda real, st: os.chown(real, uid, gid, follow_symlinks=False))

    @_op("utimens")
    def utimens(self, path: str | None, times: tuple[int, int] | None = None) -> int:
        def resolve(old: tuple[int, int]) -> tuple[int, int]:
            now, new = time.time_ns(), times or (UTIME_NOW, UTIME_NOW)
            a, m = (
                now if t == UTIME_NOW else o if t == UTIME_OMIT else t
                for t, o in zip(new, old, strict=True)
            )
            return a, m

        def apply(real: str, st: os.stat_result) -> None:
            os.utime(real, ns=resolve((st.st_atime_ns, st.st_mtime_ns)), follow_symlinks=False)

        def landing(u: Upload) -> None:
            u.mtime_ns = resolve((u.mtime_ns, u.mtime_ns))[1]

        return self._setattr(path, apply, landing)

    @_op("statfs", latency=None)
    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self.root)
        keys = ["f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree"]
        return {key: getattr(sv, key) for key in [*keys, "f_namemax"]}


class _FUSE(mfusepy.FUSE):  # type: ignore[misc]
    """mfusepy 3.1.1 drops rename's flags and truncate's file handle under libfuse 3."""

    def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
        return int(self.operations.rename(old.decode(), new.decode(), flags))

    def truncate_fuse_3(self, path: bytes | None, length: int, fip: Any) -> int:
        fh = fip.contents.fh if fip else None
        return int(self.operations.truncate(path.decode() if path else None, length, fh))


def _die_with_parent() -> None:
    """Get SIGTERM when the parent dies, so a killed test run leaves no mount."""
    parent = os.getppid()
    if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:
        sys.exit("fusebucket: parent exited during startup")


def _serve_stats(bucket: Bucket, path: str, stop: threading.Event) -> None:
    """Write the counts on each SIGUSR1 (blocked in every thread, taken here)."""
    while signal.sigwait({signal.SIGUSR1}) and not stop.is_set():
        bucket.dump_stats(path)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fusebucket", description=__doc__.split("\n", 1)[0])
    p.add_argument("backing")
    p.add_argument("mountpoint")
    for kind in ("meta", "list", "commit"):
        p.add_argument(f"--latency-{kind}", type=float, default=0.0, metavar="MS")
    p.add_argument("--kill-mode", choices=("commit", "discard"), default="commit")
    p.add_argument(
        "--no-atomic-trunc",
        action="store_true",
        help="do not ask for atomic O_TRUNC: the kernel truncates after open",
    )
    p.add_argument(
        "--refuse-at-close",
        action="store_true",
        help="accept opens for writing without O_TRUNC, fail their close (rclone)",
    )
    p.add_argument(
        "--write-back",
        type=float,
        metavar="S",
        help="acknowledge close at once, land the object S seconds later (rclone "
        "--vfs-cache-mode writes); SIGKILL loses what has not landed",
    )
    p.add_argument(
        "--write-back-jitter",
        type=float,
        default=0.0,
        metavar="S",
        help="add up to S seconds per object, so uploads land out of order",
    )
    p.add_argument(
        "--refuse-containing",
        metavar="TEXT",
        help="fail (EPERM) and drop at close any object whose bytes contain TEXT",
    )
    p.add_argument(
        "--attr-timeout",
        type=float,
        default=0.0,
        metavar="S",
        help="kernel cache of attributes and names (hf-mount: 10)",
    )
    p.add_argument(
        "--negative-timeout",
        type=float,
        default=0.0,
        metavar="S",
        help="kernel cache of failed lookups (hf-mount: 30)",
    )
    p.add_argument("--no-rename", action="store_const", const="EXDEV", dest="rename_errno")
    p.add_argument("--rename-errno", choices=("EXDEV", "ENOSYS", "EPERM", "EOPNOTSUPP"))
    setattr_mode = p.add_mutually_exclusive_group()  # chmod/chown/utimens: no-op, or EPERM
    setattr_mode.add_argument("--ignore-setattr", action="store_true")
    setattr_mode.add_argument("--no-setattr", action="store_true")
    p.add_argument("--stats", metavar="FILE", help="JSON counts, on SIGUSR1 and at exit")
    p.add_argument("--ready-fd", type=int, metavar="FD", help="write 'ready' to FD once mounted")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _die_with_parent()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    bucket = Bucket(args)
    stop = threading.Event()
    stats_thread = threading.Thread(target=_serve_stats, args=(bucket, args.stats, stop))
    if args.stats:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})  # before libfuse starts threads
        stats_thread.start()
    try:
        # hard_remove: else libfuse renames an open file on unlink to .fuse_hidden*.
        _FUSE(
            bucket,
            args.mountpoint,
            foreground=True,
            fsname="fusebucket",
            hard_remove=True,
            attr_timeout=args.attr_timeout,
            entry_timeout=args.attr_timeout,
            negative_timeout=args.negative_timeout,
        )
    except RuntimeError as e:
        if e.args != (8,):  # libfuse's fuse_main_real: the loop ended on SIGTERM/SIGINT
            raise
    finally:
        bucket.land_all()  # unmounted cleanly (SIGKILL never gets here)
        if stats_thread.ident is not None:
            stop.set()
            signal.pthread_kill(stats_thread.ident, signal.SIGUSR1)
            stats_thread.join()
            bucket.dump_stats(args.stats)
    return 1 if bucket.counts["internal_error"] else 0


if __name__ == "__main__":
    sys.exit(main())
