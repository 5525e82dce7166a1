"""Mount a real rclone over a local directory from tests: a context manager and fixtures.

``rclone mount BACKING MOUNTPOINT --vfs-cache-mode MODE`` (rclone from Debian),
BACKING a plain directory playing the bucket, in the two modes rclone users run
(docs/durable-target.md, measured with rclone 1.60):

- ``off`` (rclone's default): bytes stream into BACKING while a file is
  written and close finishes it; an open for writing without O_TRUNC (an
  append) is accepted and refused at close (EPERM); rename deletes, then moves.
- ``writes``: files are written to a local cache and uploaded after close,
  after a write-back delay, so BACKING lags behind what the mount shows.  Tests
  never wait for that upload: they look through the mount (`view`), and a
  restart that drops the cache is only done in ``off`` mode.

Neither mode stores modes (chmod is accepted and dropped) nor symlinks.

``remote=`` mounts an rclone remote instead of BACKING: `s3_remote` is a bucket
prefix of the test S3 server (tests/s3server.py, moto on 127.0.0.1), so
``writes`` mode is the deployment the issues were measured on (rclone write-back
over S3): a `kill` then loses what had not reached the bucket, and what did is
read back through the bucket's API (`tests.s3path.S3Path`).

``rc=True`` starts rclone's remote control on a free 127.0.0.1 port
(``--rc --rc-addr``): `uploads` reads its upload counts, `wait_uploads` waits
until nothing is queued or uploading.  `kill` is what a container stop does to
rclone in ``writes`` mode: SIGKILL, and its cache (with the uploads still
pending) is gone.  `settle` lands what a clean unmount left in the cache: rclone
uploads it when it starts again on the same cache, with the remote control on
to say when it is done.

The rclone process runs in the foreground, owned by the test (never
``--daemon``), gets SIGTERM if the test process dies (PR_SET_PDEATHSIG), is
unmounted with ``fusermount3 -u`` (``-uz`` if busy) and killed if it does not
exit.  Fixtures: `rclone_factory` (``make(mode, name="rclone")``), skipped with
the reason where rclone or FUSE is missing, and failing instead under CI.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from tests.bucket_mount import fuse_mountable, is_mounted

MODES = ("off", "writes")
TIMEOUT = 20.0  # seconds for rclone to mount, and to exit after unmount


def rclone_available() -> tuple[bool, str]:
    """(True, "") when an rclone FUSE mount can be made here, else (False, why not)."""
    if shutil.which("rclone") is None:
        return False, "rclone not found (Debian package rclone)"
    return fuse_mountable()


def require_rclone() -> None:
    """Skip (fail under CI, where .ci/run installs rclone) when rclone cannot mount."""
    ok, reason = rclone_available()
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(f"rclone mount tests must run in CI: {reason}")
        pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


class RcloneMount:
    """One ``rclone mount`` serving BACKING at MOUNTPOINT with a given VFS cache mode."""

    def __init__(
        self,
        backing: str | os.PathLike[str],
        mountpoint: str | os.PathLike[str],
        mode: str,
        *,
        rc: bool = False,
        write_back: str | None = None,
        remote: str | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"rclone vfs cache mode {mode!r}: one of {MODES}")
        self.backing = Path(backing)
        self.mountpoint = Path(mountpoint)
        self.mode = mode
        self.rc_addr = f"127.0.0.1:{free_port()}" if rc else None
        self.write_back = write_back  # --vfs-write-back (rclone's default: 5s)
        self.remote = remote  # an rclone remote to mount instead of `backing`
        self.process: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None

    @property
    def view(self) -> Path:
        """Where a test can read what is durable without depending on write-back timing:
        the bucket itself in ``off`` mode, the mount in ``writes`` mode."""
        return self.backing if self.mode == "off" else self.mountpoint

    def __enter__(self) -> RcloneMount:
        return self.mount()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.unmount()

    def mount(self) -> RcloneMount:
        """Start rclone and return once the kernel has the mount."""
        if self.process is not None:
            raise RuntimeError(f"{self.mountpoint} already mounted by this RcloneMount")
        if self.remote is None:
            self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        if self._workdir is None:  # else the cache a clean unmount left (settle)
            self._workdir = Path(
                tempfile.mkdtemp(
                    prefix=f".{self.mountpoint.name}.rclone-", dir=self.mountpoint.parent
                )
            )
        command = [
            "rclone",
            "mount",
            self.remote or str(self.backing),
            str(self.mountpoint),
            "--vfs-cache-mode",
            self.mode,
            "--cache-dir",
            str(self._workdir / "cache"),
            "--config",
            "/dev/null",
            "--log-file",
            str(self._workdir / "log"),
        ]
        if self.rc_addr is not None:
            command += ["--rc", "--rc-addr", self.rc_addr]
        if self.write_back is not None:
            command += ["--vfs-write-back", self.write_back]
        with open("/proc/self/mountinfo", "rb") as mounts:  # POLLPRI when the table changes
            self.process = subprocess.Popen(
                command,
                # a CA bundle set for the host's own TLS makes rclone's S3 client fail at
                # start ("unsupported transport"); the test server is plain HTTP
                env={k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
            poller = select.poll()
            poller.register(mounts, select.POLLPRI | select.POLLERR)
            deadline = time.monotonic() + TIMEOUT
            while not is_mounted(self.mountpoint):
                remaining = deadline - time.monotonic()
                if self.process.poll() is not None or remaining <= 0:
                    why = self._log() or ("timed out" if remaining <= 0 else "it exited")
                    self.unmount()
                    raise RuntimeError(f"rclone did not mount {self.mountpoint}: {why}")
                poller.poll(min(remaining, 1.0) * 1000)  # 1 s: rclone dying is no mount event
        return self

    def kill(self) -> None:
        """SIGKILL rclone and drop its cache (a container stop): pending uploads are lost."""
        if self.process is not None:
            self.process.kill()
        self.unmount()

    def uploads(self) -> dict[str, int]:
        """Queued, in progress and failed uploads, from the remote control."""
        assert self.rc_addr is not None, "mount with rc=True"
        request = urllib.request.Request(
            f"http://{self.rc_addr}/vfs/stats",
            data=b"{}",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            cache = json.load(response).get("diskCache", {})
        return {
            k: int(cache.get(k, 0)) for k in ("uploadsQueued", "uploadsInProgress", "erroredFiles")
        }

    def wait_uploads(self, timeout: float = 60.0) -> None:
        """Until the remote control reports nothing queued, uploading or failed."""
        deadline = time.monotonic() + timeout
        while any((counts := self.uploads()).values()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"rclone still has uploads after {timeout}s: {counts}")
            time.sleep(0.2)  # rclone has no event to wait on; its counts are the signal

    def settle(self, timeout: float = 60.0) -> None:
        """Land every upload a clean unmount left in the cache (rclone uploads them when
        it starts on that cache again), then unmount."""
        self.unmount(keep_cache=True)
        rc_addr, self.rc_addr = self.rc_addr, f"127.0.0.1:{free_port()}"
        try:
            self.mount()
            self.wait_uploads(timeout)
        finally:
            self.unmount()
            self.rc_addr = rc_addr

    def unmount(self, *, keep_cache: bool = False) -> None:
        """Unmount (lazily if busy), wait for rclone, remove its cache (unless
        `keep_cache`).  Idempotent."""
        process, self.process = self.process, None
        try:
            if is_mounted(self.mountpoint) and not _fusermount("-u", self.mountpoint):
                _fusermount("-uz", self.mountpoint)
            if process is not None:
                try:
                    process.wait(timeout=TIMEOUT)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        finally:
            if self._workdir is not None and not keep_cache:
                shutil.rmtree(self._workdir, ignore_errors=True)
                self._workdir = None

    def _log(self) -> str:
        if self._workdir is None:
            return ""
        with contextlib.suppress(OSError):
            return (self._workdir / "log").read_text(errors="replace").strip()[-2000:]
        return ""


def s3_remote(endpoint: str, bucket: str, prefix: str = "") -> str:
    """An rclone connection string for `bucket`/`prefix` on the test S3 server (its dummy
    credentials, no config file)."""
    options = (
        f"provider=Other,endpoint='{endpoint}',access_key_id=testing,"
        "secret_access_key=testing,region=us-east-1"
    )
    return f":s3,{options}:{bucket}/{prefix}".rstrip("/")


def _fusermount(flag: str, mountpoint: Path) -> bool:
    done = subprocess.run(["fusermount3", flag, str(mountpoint)], capture_output=True, check=False)
    return done.returncode == 0


@pytest.fixture
def rclone_factory(tmp_path: Path) -> Iterator[Callable[..., RcloneMount]]:
    """make(mode, name="rclone", **options): mounted over tmp_path/name, unmounted at
    teardown (options: rc=True, write_back="1s")."""
    require_rclone()
    mounts: list[RcloneMount] = []

    def make(mode: str, name: str = "rclone", **options: Any) -> RcloneMount:
        mount = RcloneMount(tmp_path / name, tmp_path / f"{name}.mnt", mode, **options)
        mounts.append(mount)
        return mount.mount()

    yield make
    for mount in reversed(mounts):
        mount.unmount()
