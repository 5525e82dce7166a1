"""Mount the fusebucket emulator from tests: a context manager and fixtures.

Owns the daemon's lifetime (start, wait for the mount, stats, kill, unmount);
the emulated behaviour lives in tests/fusebucket.py. Fixtures:

- `bucket`: a mounted BucketMount with default options
  (`.backing` and `.mountpoint` under tmp_path);
- `bucket_factory`: `make(name="bucket", **options) -> BucketMount`, for
  options such as `rename=False`, `kill_mode="discard"` or
  `atomic_trunc=False` (the kernel then truncates in a call after open),
  `refuse_at_close=True` (rclone without a VFS cache: appends fail at close),
  `refuse_containing="TEXT"` (objects holding TEXT fail at close) or
  `write_back_s=S` (rclone with a VFS cache: close is acknowledged, the object
  lands S seconds later, up to `write_back_jitter_s` more; `kill()` loses what
  has not landed, `unmount()` lands it first).

Both skip with the reason from fuse_available() when FUSE is missing. A
conftest can use them with `pytest_plugins = ["tests.bucket_mount"]` or by
importing both names.

The daemon is started from the calling thread and dies with it
(PR_SET_PDEATHSIG): keep a BucketMount in the thread that created it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

EMULATOR = Path(__file__).with_name("fusebucket.py")
READY_TIMEOUT = 10.0  # seconds for the daemon to mount, and to exit after unmount
# Whether mounts ask the kernel for atomic O_TRUNC unless told (pytest
# --fusebucket-no-atomic-trunc: run as on a kernel/libfuse that does not grant it).
ATOMIC_TRUNC = True


@functools.cache
def fuse_mountable() -> tuple[bool, str]:
    """(True, "") when this process can make any FUSE mount, else (False, why not)."""
    if shutil.which("fusermount3") is None:
        return False, "fusermount3 not found (Debian package fuse3)"
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError as e:
        return False, f"cannot open /dev/fuse read-write: {e.strerror}"
    return True, ""


@functools.cache
def fuse_available() -> tuple[bool, str]:
    """(True, "") when the emulator can be mounted here, else (False, why not)."""
    ok, reason = fuse_mountable()
    if not ok:
        return ok, reason
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as e:
        return False, f"mfusepy unavailable: {e}"
    return True, ""


def is_mounted(path: Path) -> bool:
    """Whether PATH is a mount point, even one whose daemon is dead.

    os.path.ismount() says False for a dead FUSE mount (stat gives ENOTCONN).
    """
    target = os.path.join(os.path.realpath(path.parent), path.name)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            field = line.split()[4]  # octal escapes: \040 is a space
            mount_point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)
            if mount_point == target:
                return True
    return False


class BucketMount:
    """One fusebucket daemon serving BACKING at MOUNTPOINT."""

    def __init__(
        self,
        backing: str | os.PathLike[str],
        mountpoint: str | os.PathLike[str],
        *,
        latency_meta_ms: float = 0,
        latency_list_ms: float = 0,
        latency_commit_ms: float = 0,
        kill_mode: str = "commit",
        atomic_trunc: bool | None = None,
        refuse_at_close: bool = False,
        refuse_containing: str | None = None,
        rename: bool = True,
        rename_errno: str = "EXDEV",
        setattr_mode: str = "apply",
        stats: bool = False,
        attr_timeout_s: float = 0,
        negative_timeout_s: float = 0,
        write_back_s: float | None = None,
        write_back_jitter_s: float = 0,
    ) -> None:
        self.backing = Path(backing)
        self.mountpoint = Path(mountpoint)
        self.options = [
            f"--latency-meta={latency_meta_ms}",
            f"--latency-list={latency_list_ms}",
            f"--latency-commit={latency_commit_ms}",
            f"--kill-mode={kill_mode}",
            f"--attr-timeout={attr_timeout_s}",
            f"--negative-timeout={negative_timeout_s}",
        ]
        if not (ATOMIC_TRUNC if atomic_trunc is None else atomic_trunc):
            self.options.append("--no-atomic-trunc")
        if refuse_at_close:
            self.options.append("--refuse-at-close")
        if refuse_containing is not None:
            self.options.append(f"--refuse-containing={refuse_containing}")
        if write_back_s is not None:
            self.options += [
                f"--write-back={write_back_s}",
                f"--write-back-jitter={write_back_jitter_s}",
            ]
        if not rename:
            self.options.append(f"--rename-errno={rename_errno}")
        if setattr_mode != "apply":
            flags = {"ignore": "--ignore-setattr", "deny": "--no-setattr"}
            self.options.append(flags[setattr_mode])
        self.stats_enabled = stats
        self.process: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._final_stats: dict[str, int] | None = None
        self._killed = False
        self._done = False

    def __enter__(self) -> BucketMount:
        return self.mount()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.unmount()

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("fusebucket is not running")
        return self.process.pid

    def mount(self) -> BucketMount:
        """Start the daemon and return once the kernel has the mount."""
        if self.process is not None:
            raise RuntimeError(f"{self.mountpoint} already mounted by this BucketMount")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        # Beside the mountpoint, never in the backing dir (that is the bucket).
        prefix = f".{self.mountpoint.name}.fusebucket-"
        self._workdir = Path(tempfile.mkdtemp(prefix=prefix, dir=self.mountpoint.parent))
        command = [sys.executable, str(EMULATOR), str(self.backing), str(self.mountpoint)]
        command += self.options
        if self.stats_enabled:
            command.append(f"--stats={self._workdir / 'stats.json'}")
        ready_r, ready_w = os.pipe()  # the daemon writes "ready" from FUSE init
        try:
            with open(self._workdir / "stderr", "wb") as log:
                try:
                    self.process = subprocess.Popen(
                        [*command, f"--ready-fd={ready_w}"],
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=log,
                        pass_fds=(ready_w,),
                    )
                finally:
                    os.close(ready_w)  # so that its death reads as EOF
            readable, _, _ = select.select([ready_r], [], [], READY_TIMEOUT)
            message = os.read(ready_r, 16) if readable else b""
        finally:
            os.close(ready_r)
        if message != b"ready\n":  # EOF: it died; nothing: it hangs
            self.kill()
            reason = self._stderr()
            self.unmount()
            why = reason or "timed out"
            raise RuntimeError(f"fusebucket did not mount {self.mountpoint}: {why}")
        return self

    def stats(self, timeout: float = 5.0) -> dict[str, int]:
        """Operation counts so far (final counts once unmounted)."""
        if not self.stats_enabled:
            raise RuntimeError("mount with stats=True to count operations")
        if self._final_stats is not None:
            return dict(self._final_stats)
        before, _ = self._read_stats()
        process = self.process
        if process is None:
            raise RuntimeError("fusebucket is not running")
        process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while True:  # the daemon replaces the file with a higher seq
            seq, counts = self._read_stats()
            if seq > before:
                return counts
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"fusebucket wrote no stats: {self._stderr()}")
            time.sleep(0.005)

    def kill(self) -> None:
        """SIGKILL the daemon: the mount itself dies and pending writes are lost.

        Paths under the mount then fail with ENOTCONN until unmount().
        """
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._killed = True

    def unmount(self) -> None:
        """Unmount (lazily if busy) and wait for the daemon. Idempotent."""
        if self.process is None or self._done:
            return
        self._done = True
        busy = False
        try:
            if is_mounted(self.mountpoint) and not _fusermount("-u", self.mountpoint):
                busy = True  # something still has files open under it
                _fusermount("-uz", self.mountpoint)
                if self.process.poll() is None:
                    self.process.terminate()
            try:
                code = self.process.wait(timeout=READY_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()
                why = self._stderr()
                raise RuntimeError(f"fusebucket did not exit after unmount: {why}") from None
            if self.stats_enabled:
                self._final_stats = self._read_stats()[1]
            if code != 0 and not self._killed:
                raise RuntimeError(f"fusebucket exited with {code}: {self._stderr()}")
            if busy:
                raise RuntimeError(f"{self.mountpoint} was busy at unmount: a file was open")
        finally:
            if self._workdir is not None:
                shutil.rmtree(self._workdir, ignore_errors=True)

    def _read_stats(self) -> tuple[int, dict[str, int]]:
        try:
            data = json.loads((self._workdir_path() / "stats.json").read_text())
        except FileNotFoundError:
            return 0, {}
        return int(data["seq"]), dict(data["counts"])

    def _stderr(self) -> str:
        with contextlib.suppress(OSError):
            return (self._workdir_path() / "stderr").read_text(errors="replace").strip()
        return ""

    def _workdir_path(self) -> Path:
        if self._workdir is None:
            raise RuntimeError("fusebucket was never started")
        return self._workdir


def _fusermount(flag: str, mountpoint: Path) -> bool:
    done = subprocess.run(["fusermount3", flag, str(mountpoint)], capture_output=True, check=False)
    return done.returncode == 0


def _require_fuse() -> None:
    ok, reason = fuse_available()
    if not ok:
        pytest.skip(reason)


@pytest.fixture
def bucket(tmp_path: Path) -> Iterator[BucketMount]:
    """A mounted emulator: writes under .mountpoint land in .backing on close."""
    _require_fuse()
    with BucketMount(tmp_path / "bucket", tmp_path / "mnt") as mount:
        yield mount


@pytest.fixture
def bucket_factory(tmp_path: Path) -> Iterator[Callable[..., BucketMount]]:
    """make(name="bucket", **BucketMount options): mounted, unmounted at teardown."""
    _require_fuse()
    mounts: list[BucketMount] = []

    def make(name: str = "bucket", **options: Any) -> BucketMount:
        mount = BucketMount(tmp_path / name, tmp_path / f"{name}.mnt", **options)
        mount.mount()
        mounts.append(mount)
        return mount

    yield make
    errors: list[Exception] = []
    for mount in reversed(mounts):
        try:
            mount.unmount()
        except Exception as e:  # unmount them all, then report
            errors.append(e)
    if errors:
        raise errors[0]
