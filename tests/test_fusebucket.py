"""The fusebucket emulator behaves like hf-mount's streaming writes.

Every test goes through a real FUSE mount with real system calls, and checks
the backing directory (the bucket) separately from what the mount shows.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import bucket_mount
from tests.bucket_mount import BucketMount, is_mounted

bucket = bucket_mount.bucket  # fixtures
bucket_factory = bucket_mount.bucket_factory

ROOT = Path(__file__).resolve().parent.parent
Factory = Callable[..., BucketMount]
# With atomic O_TRUNC the kernel sends open(O_TRUNC); without it (some kernels and
# libfuse versions) open without O_TRUNC, then a truncate to 0: both must behave alike.
TRUNC_MODES = pytest.mark.parametrize(
    "atomic_trunc", [True, False], ids=["atomic-trunc", "trunc-after-open"]
)

# Opens PATH for writing, writes, says so on fd READY, then waits to be killed
# (or, with "exit", leaves without closing).
WRITER = """
import os, sys, time
path, ready, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"partial")
os.write(ready, b"x")
if how == "exit":
    os._exit(0)
time.sleep(60)
"""


def errno_of(call: Callable[[], object]) -> int:
    with pytest.raises(OSError) as info:
        call()
    assert info.value.errno is not None
    return info.value.errno


@contextlib.contextmanager
def opened(path: Path, flags: int, mode: int = 0o644) -> Iterator[int]:
    fd = os.open(path, flags, mode)
    try:
        yield fd
    finally:
        os.close(fd)


def put(path: Path, data: bytes) -> None:
    with opened(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) as fd:
        os.write(fd, data)


def run_writer(path: Path, how: str) -> None:
    """Start WRITER on PATH, wait until it has written, then SIGKILL it (or let it exit)."""
    ready_r, ready_w = os.pipe()
    command = [sys.executable, "-c", WRITER, str(path), str(ready_w), how]
    with subprocess.Popen(command, pass_fds=(ready_w,)) as proc:
        os.close(ready_w)
        try:
            assert os.read(ready_r, 1) == b"x"
        finally:
            os.close(ready_r)
        if how == "kill":
            proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=10) == (-signal.SIGKILL if how == "kill" else 0)


def test_close_commits_the_whole_file_atomically(bucket: BucketMount) -> None:
    target = bucket.mountpoint / "state.json"
    with opened(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL) as fd:
        os.write(fd, b"hello ")
        os.write(fd, b"world")
        assert not (bucket.backing / "state.json").exists()
        assert os.stat(target).st_size == 11  # the mount shows the bytes written so far
        assert os.listdir(bucket.mountpoint) == ["state.json"]
    assert (bucket.backing / "state.json").read_bytes() == b"hello world"
    assert target.read_bytes() == b"hello world"
    assert os.listdir(bucket.backing / ".fusebucket-tmp") == []
    assert errno_of(lambda: os.stat(bucket.mountpoint / ".fusebucket-tmp")) == errno.ENOENT


def assert_truncate_mode(mount: BucketMount, atomic_trunc: bool) -> None:
    """The mount ran the way the test asked (a kernel may not offer atomic O_TRUNC at all)."""
    counts = mount.stats()
    if atomic_trunc and counts.get("init.offered_atomic_o_trunc"):
        assert counts.get("init.atomic_o_trunc") == 1, "the emulator did not ask for it"
        assert "truncate_after_open" not in counts
    else:
        assert counts.get("init.no_atomic_o_trunc") == 1
        assert counts.get("truncate_after_open", 0) >= 1, "the truncate after open never came"


@TRUNC_MODES
def test_overwrite_keeps_the_previous_object_until_close(
    bucket_factory: Factory, atomic_trunc: bool
) -> None:
    mount = bucket_factory(atomic_trunc=atomic_trunc, stats=True)
    put(mount.mountpoint / "f", b"old")
    with opened(mount.mountpoint / "f", os.O_WRONLY | os.O_TRUNC) as fd:
        os.write(fd, b"newer")
        assert (mount.backing / "f").read_bytes() == b"old"
    assert (mount.backing / "f").read_bytes() == b"newer"
    assert (mount.mountpoint / "f").read_bytes() == b"newer"
    assert_truncate_mode(mount, atomic_trunc)


@TRUNC_MODES
@pytest.mark.parametrize(
    "flags",
    [os.O_WRONLY | os.O_APPEND, os.O_RDWR, os.O_WRONLY, os.O_RDWR | os.O_CREAT],
    ids=["append", "rdwr", "wronly", "rdwr-creat"],
)
def test_write_to_existing_without_truncate_is_eperm(
    bucket_factory: Factory, flags: int, atomic_trunc: bool
) -> None:
    """hf-mount refuses at open; without atomic O_TRUNC the open cannot tell, the write does."""
    mount = bucket_factory(atomic_trunc=atomic_trunc)
    put(mount.mountpoint / "log", b"line\n")

    def open_and_write() -> None:
        with opened(mount.mountpoint / "log", flags) as fd:
            os.write(fd, b"more\n")

    assert errno_of(open_and_write) == errno.EPERM
    assert (mount.backing / "log").read_bytes() == b"line\n"
    assert (mount.mountpoint / "log").read_bytes() == b"line\n"


def test_truncate_works_on_a_write_handle_only(bucket: BucketMount) -> None:
    put(bucket.mountpoint / "done", b"12345")
    assert errno_of(lambda: os.truncate(bucket.mountpoint / "done", 0)) == errno.EPERM
    with opened(bucket.mountpoint / "new", os.O_WRONLY | os.O_CREAT) as fd:
        os.write(fd, b"abcdef")
        os.ftruncate(fd, 2)
        os.lseek(fd, 0, os.SEEK_END)
        os.write(fd, b"!")
    assert (bucket.backing / "new").read_bytes() == b"ab!"


def test_write_anywhere_but_the_end_is_einval(bucket: BucketMount) -> None:
    with opened(bucket.mountpoint / "f", os.O_WRONLY | os.O_CREAT) as fd:
        os.write(fd, b"abc")
        assert errno_of(lambda: os.pwrite(fd, b"x", 0)) == errno.EINVAL
        assert errno_of(lambda: os.pwrite(fd, b"x", 10)) == errno.EINVAL
        os.write(fd, b"def")  # the handle still works at the end
    assert (bucket.backing / "f").read_bytes() == b"abcdef"


def test_read_on_a_write_handle_is_ebadf(bucket: BucketMount) -> None:
    with opened(bucket.mountpoint / "f", os.O_RDWR | os.O_CREAT | os.O_EXCL) as fd:
        os.write(fd, b"abc")
        assert errno_of(lambda: os.pread(fd, 3, 0)) == errno.EBADF


def test_fsync_succeeds_and_commits_nothing(bucket: BucketMount) -> None:
    with opened(bucket.mountpoint / "f", os.O_WRONLY | os.O_CREAT) as fd:
        os.write(fd, b"data")
        os.fsync(fd)
        os.fdatasync(fd)
        assert not (bucket.backing / "f").exists()
    assert (bucket.backing / "f").read_bytes() == b"data"


def test_directories_exist_only_in_memory_until_a_file_lands(bucket: BucketMount) -> None:
    mnt, backing = bucket.mountpoint, bucket.backing
    os.makedirs(mnt / "a" / "b")
    assert (mnt / "a" / "b").is_dir() and os.listdir(mnt) == ["a"]
    assert not (backing / "a").exists()
    put(mnt / "a" / "b" / "f", b"x")
    assert (backing / "a" / "b" / "f").read_bytes() == b"x"
    os.unlink(mnt / "a" / "b" / "f")
    assert not (backing / "a").exists()  # a bucket stores no empty prefix
    assert os.listdir(mnt / "a") == ["b"]  # the mount keeps showing it
    assert errno_of(lambda: os.rmdir(mnt / "a")) == errno.ENOTEMPTY
    os.rmdir(mnt / "a" / "b")
    os.rmdir(mnt / "a")
    assert os.listdir(mnt) == []


def test_rename_replaces_the_target(bucket: BucketMount) -> None:
    mnt = bucket.mountpoint
    put(mnt / "current", b"v1")
    os.mkdir(mnt / "staging")
    put(mnt / "staging" / "next", b"v2")
    os.replace(mnt / "staging" / "next", mnt / "current")
    assert (bucket.backing / "current").read_bytes() == b"v2"
    assert not (bucket.backing / "staging").exists()
    assert sorted(os.listdir(mnt)) == ["current", "staging"]
    assert (mnt / "current").read_bytes() == b"v2"


def test_rename_of_an_open_file_commits_under_the_new_name(bucket: BucketMount) -> None:
    with opened(bucket.mountpoint / "tmp", os.O_WRONLY | os.O_CREAT) as fd:
        os.write(fd, b"abc")
        os.rename(bucket.mountpoint / "tmp", bucket.mountpoint / "final")
    assert sorted(os.listdir(bucket.backing)) == [".fusebucket-tmp", "final"]
    assert (bucket.backing / "final").read_bytes() == b"abc"


def test_rename_of_a_directory_moves_it(bucket: BucketMount) -> None:
    os.makedirs(bucket.mountpoint / "old" / "sub")
    put(bucket.mountpoint / "old" / "sub" / "f", b"x")
    os.rename(bucket.mountpoint / "old", bucket.mountpoint / "new")
    assert (bucket.backing / "new" / "sub" / "f").read_bytes() == b"x"
    assert not (bucket.backing / "old").exists()
    assert os.listdir(bucket.mountpoint) == ["new"]


@pytest.mark.parametrize("code", ["EXDEV", "ENOSYS"])
def test_rename_can_be_refused(bucket_factory: Factory, code: str) -> None:
    mount = bucket_factory(rename=False, rename_errno=code)
    put(mount.mountpoint / "a", b"x")
    rename = lambda: os.rename(mount.mountpoint / "a", mount.mountpoint / "b")  # noqa: E731
    assert errno_of(rename) == getattr(errno, code)
    assert sorted(os.listdir(mount.backing)) == [".fusebucket-tmp", "a"]


@TRUNC_MODES
@pytest.mark.parametrize("existing", [False, True], ids=["new", "overwrite"])
@pytest.mark.parametrize("kill_mode", ["commit", "discard"])
def test_killed_writer(
    bucket_factory: Factory, kill_mode: str, existing: bool, atomic_trunc: bool
) -> None:
    mount = bucket_factory(kill_mode=kill_mode, stats=True, atomic_trunc=atomic_trunc)
    if existing:
        put(mount.mountpoint / "f", b"previous")
    run_writer(mount.mountpoint / "f", "kill")
    # The kernel flushes a killed process's descriptors before it becomes a
    # zombie, so the outcome is settled once wait() returns.
    if kill_mode == "commit":  # hf-mount: the truncated file is published
        assert (mount.backing / "f").read_bytes() == b"partial"
    elif existing:
        assert (mount.backing / "f").read_bytes() == b"previous"
    else:
        assert not (mount.backing / "f").exists()
        assert os.listdir(mount.mountpoint) == []
    assert mount.stats().get("discard", 0) == (1 if kill_mode == "discard" else 0)
    if existing:
        assert_truncate_mode(mount, atomic_trunc)


def test_discard_mode_keeps_a_writer_that_exits_without_closing(bucket_factory: Factory) -> None:
    mount = bucket_factory(kill_mode="discard")
    run_writer(mount.mountpoint / "f", "exit")
    assert (mount.backing / "f").read_bytes() == b"partial"


def test_unlink_while_writing_uploads_nothing(bucket: BucketMount) -> None:
    with opened(bucket.mountpoint / "f", os.O_WRONLY | os.O_CREAT) as fd:
        os.write(fd, b"abc")
        os.unlink(bucket.mountpoint / "f")
        assert os.listdir(bucket.mountpoint) == []
    assert sorted(os.listdir(bucket.backing)) == [".fusebucket-tmp"]


def test_symlinks_are_stored_as_symlinks(bucket: BucketMount) -> None:
    put(bucket.mountpoint / "target", b"x")
    os.symlink("target", bucket.mountpoint / "link")
    assert os.readlink(bucket.backing / "link") == "target"
    assert os.readlink(bucket.mountpoint / "link") == "target"
    assert (bucket.mountpoint / "link").read_bytes() == b"x"


@pytest.mark.parametrize("setattr_mode", ["apply", "ignore", "deny"])
def test_setattr_modes(bucket_factory: Factory, setattr_mode: str) -> None:
    mount = bucket_factory(setattr_mode=setattr_mode)
    put(mount.mountpoint / "f", b"x")
    before = os.stat(mount.backing / "f")

    def change() -> None:
        os.chmod(mount.mountpoint / "f", 0o600)
        os.utime(mount.mountpoint / "f", ns=(10**18, 10**18))

    if setattr_mode == "deny":
        assert errno_of(change) == errno.EPERM
    else:
        change()
    after = os.stat(mount.backing / "f")
    if setattr_mode == "apply":
        assert (after.st_mode & 0o777, after.st_mtime_ns) == (0o600, 10**18)
    else:
        assert (after.st_mode, after.st_mtime_ns) == (before.st_mode, before.st_mtime_ns)


def test_stats_count_operations_and_latency_applies(bucket_factory: Factory) -> None:
    mount = bucket_factory(stats=True, latency_meta_ms=30, latency_list_ms=1, latency_commit_ms=1)
    put(mount.mountpoint / "a", b"x")
    os.rename(mount.mountpoint / "a", mount.mountpoint / "b")
    os.listdir(mount.mountpoint)
    started = time.monotonic()
    os.stat(mount.mountpoint / "b")
    assert time.monotonic() - started >= 0.03
    counts = mount.stats()
    assert counts["create"] == counts["commit"] == counts["rename"] == 1
    assert counts["readdir"] >= 1 and counts["getattr"] >= 1
    assert mount.stats()["getattr"] >= counts["getattr"]  # a second dump
    mount.unmount()
    assert mount.stats()["commit"] == 1  # final counts, written at exit


def test_killed_daemon_gives_enotconn_and_unmount_cleans_up(bucket: BucketMount) -> None:
    fd = os.open(bucket.mountpoint / "lost", os.O_WRONLY | os.O_CREAT)
    os.write(fd, b"never committed")
    bucket.kill()
    assert errno_of(lambda: os.stat(bucket.mountpoint)) == errno.ENOTCONN
    with contextlib.suppress(OSError):  # the mount is gone: close may report it
        os.close(fd)
    bucket.unmount()
    bucket.unmount()
    assert not is_mounted(bucket.mountpoint)
    assert os.listdir(bucket.mountpoint) == []
    assert not (bucket.backing / "lost").exists()


def test_unmount_of_a_busy_mount_detaches_it_and_says_so(bucket: BucketMount) -> None:
    put(bucket.mountpoint / "f", b"x")
    fd = os.open(bucket.mountpoint / "f", os.O_RDONLY)
    with pytest.raises(RuntimeError, match="busy"):
        bucket.unmount()  # detaches lazily, then stops the daemon
    assert not is_mounted(bucket.mountpoint)
    with contextlib.suppress(OSError):  # ENOTCONN: the daemon is gone
        os.close(fd)
    assert bucket.process is not None and bucket.process.returncode == 0


def test_sigterm_unmounts_cleanly(bucket: BucketMount) -> None:
    assert bucket.process is not None
    bucket.process.terminate()
    assert bucket.process.wait(timeout=10) == 0
    assert not is_mounted(bucket.mountpoint)


def test_daemon_unmounts_when_its_parent_dies(tmp_path: Path) -> None:
    script = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from tests.bucket_mount import BucketMount\n"
        "print(BucketMount(sys.argv[1], sys.argv[2]).mount().pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    mnt = tmp_path / "mnt"
    with subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "bucket"), str(mnt)], stdout=subprocess.PIPE
    ) as parent:
        assert parent.stdout is not None
        daemon = os.pidfd_open(int(parent.stdout.readline()))
        try:
            assert is_mounted(mnt)
            parent.kill()
            parent.wait()
            readable, _, _ = select.select([daemon], [], [], 10)  # readable once it has exited
            assert readable
        finally:
            os.close(daemon)
    assert not is_mounted(mnt)


@TRUNC_MODES
def test_refuse_at_close_accepts_the_open_and_fails_the_close(
    bucket_factory: Factory, atomic_trunc: bool
) -> None:
    """rclone --vfs-cache-mode off: an append is refused at write and close, not at open."""
    mount = bucket_factory(refuse_at_close=True, atomic_trunc=atomic_trunc)
    put(mount.mountpoint / "log", b"line\n")
    fd = os.open(mount.mountpoint / "log", os.O_WRONLY | os.O_APPEND)
    assert errno_of(lambda: os.write(fd, b"more\n")) == errno.EPERM
    assert errno_of(lambda: os.close(fd)) == errno.EPERM
    assert (mount.backing / "log").read_bytes() == b"line\n"
    put(mount.mountpoint / "log", b"replaced\n")  # O_TRUNC still works
    assert (mount.backing / "log").read_bytes() == b"replaced\n"


def test_refuse_containing_fails_that_commit_at_close(bucket_factory: Factory) -> None:
    mount = bucket_factory(refuse_containing="NOPE", stats=True)
    put(mount.mountpoint / "f", b"old")
    fd = os.open(mount.mountpoint / "f", os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"NOPE, not this")
    assert errno_of(lambda: os.close(fd)) == errno.EPERM
    assert (mount.backing / "f").read_bytes() == b"old"
    assert (mount.mountpoint / "f").read_bytes() == b"old"
    put(mount.mountpoint / "g", b"fine")
    assert (mount.backing / "g").read_bytes() == b"fine"
    assert mount.stats()["refused"] == 1


def test_write_back_acknowledges_close_and_lands_at_unmount_or_never(
    bucket_factory: Factory,
) -> None:
    """--write-back: the mount shows a closed object at once (content, chmod, mtime), the
    bucket does not; a rename moves the pending upload and leaves the older object in the
    bucket; a clean unmount lands what is pending, a kill loses it (rclone with its cache
    dropped)."""
    mount = bucket_factory(write_back_s=600.0)  # nothing lands by itself during the test
    mnt, backing = mount.mountpoint, mount.backing
    (mnt / "old").write_bytes(b"first\n")
    mount.unmount()  # lands it
    assert (backing / "old").read_bytes() == b"first\n"
    mount = bucket_factory(write_back_s=600.0)
    (mnt / "a").write_bytes(b"pending\n")
    (mnt / "a").chmod(0o600)
    os.utime(mnt / "a", ns=(1, 1_600_000_000_000_000_001))
    st = (mnt / "a").stat()
    assert (mnt / "a").read_bytes() == b"pending\n" and st.st_mode & 0o777 == 0o600
    assert st.st_mtime_ns == 1_600_000_000_000_000_001 and not (backing / "a").exists()
    (mnt / "tmp").write_bytes(b"second\n")
    os.replace(mnt / "tmp", mnt / "old")
    assert (mnt / "old").read_bytes() == b"second\n"
    assert (backing / "old").read_bytes() == b"first\n"  # until the upload lands
    assert sorted(os.listdir(mnt)) == ["a", "old"]
    mount.unmount()
    assert (backing / "a").read_bytes() == b"pending\n" and (backing / "old").read_bytes() == (
        b"second\n"
    )
    assert (backing / "a").stat().st_mtime_ns == 1_600_000_000_000_000_001
    assert (backing / "a").stat().st_mode & 0o777 == 0o600
    mount = bucket_factory(write_back_s=600.0)
    (mnt / "b").write_bytes(b"lost\n")
    (mnt / "a").unlink()
    mount.kill()
    assert not (backing / "b").exists()
    assert not (backing / "a").exists()  # an unlink is synchronous, write-back or not
