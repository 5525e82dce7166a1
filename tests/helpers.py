"""Small helpers shared by tests: tree snapshots and writer processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.s3path import S3Path


def snapshot(root: Path | S3Path) -> dict[str, tuple[object, ...]]:
    """(inode, size, mtime_ns, ctime_ns) of every entry below `root`, links not followed
    (of a bucket prefix: `S3Path.snapshot`).

    Two equal snapshots mean nothing under `root` was written, renamed or created.
    """
    if isinstance(root, S3Path):
        return root.snapshot()
    out: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            out[os.path.relpath(path, root)] = (
                st.st_ino,
                st.st_size,
                st.st_mtime_ns,
                st.st_ctime_ns,
            )
    return out


def files(root: Path | S3Path) -> dict[str, bytes]:
    """Relative path -> content of every regular file below `root`, skipping .syncengine
    (`root` may be a bucket prefix: `Tree.durable` of the ``[s3]`` kind)."""
    if isinstance(root, S3Path):
        return root.files()
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".syncengine"]
        for name in filenames:
            path = Path(dirpath, name)
            if path.is_file() and not path.is_symlink():
                out[str(path.relative_to(root))] = path.read_bytes()
    return out


def set_mtime(path: Path | S3Path, mtime_ns: int) -> None:
    """`os.utime` of a file, or the mtime metadata of an object (`Tree.durable` on S3)."""
    if isinstance(path, S3Path):
        path.utime(mtime_ns)
    else:
        os.utime(path, ns=(mtime_ns, mtime_ns))


def dir_modes(root: Path, skip: tuple[str, ...] = ()) -> dict[str, int]:
    """Relative path -> permission bits of every directory below `root` (links not
    followed or listed), not entering directories named in `skip`."""
    out = {}
    for dirpath, dirnames, _ in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip]
        for name in dirnames:
            path = Path(dirpath, name)
            if not path.is_symlink():
                out[path.relative_to(root).as_posix()] = path.lstat().st_mode & 0o7777
    return out


APPENDER = r"""
import os, sys, time
path, first = sys.argv[1], int(sys.argv[2])
f = open(path, "a", buffering=1)
n = 0
for n in range(first):
    f.write(f'{{"n": {n}, "text": "{"x" * 80}"}}\n')
f.flush()
print(os.path.getsize(path), flush=True)
while True:  # keep appending, holding the descriptor open, until killed
    n += 1
    f.write(f'{{"n": {n}, "text": "{"y" * 80}"}}\n')
    f.flush()
    time.sleep(0.001)
"""


def start_appender(path: Path, first_lines: int) -> tuple[subprocess.Popen[str], int]:
    """A process that appends to `path` forever; returns it and the size it first reported."""
    proc = subprocess.Popen(
        [sys.executable, "-c", APPENDER, str(path), str(first_lines)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "appender died before writing"
    return proc, int(line)


class Child:
    """A Python script in another process that says `ready` on stdout when it is set up.

    `say` writes a line to its stdin and returns its next line of output;
    `stop` writes `line` (if it still runs), closes the pipes and waits.
    """

    def __init__(self, script: str, *args: str, ready: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        first = self.readline()
        assert first == ready, f"child said {first!r}, not {ready!r}"

    def readline(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def say(self, line: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.readline()

    def stop(self, line: str = "stop") -> str:
        """Tell it to stop; return what it said last ("" if nothing)."""
        last = ""
        if self.proc.poll() is None:
            last = self.say(line)
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()
        self.proc.wait(timeout=30)
        return last


def query_closed_db(path: Path, sql: str) -> list[tuple[object, ...]]:
    """Rows of `sql` on a database no process has open (nothing is created beside it)."""
    import apsw

    con = apsw.Connection(
        f"file:{path}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        con.execute("PRAGMA writable_schema=ON")  # a schema this SQLite cannot parse, too
        return con.execute(sql).fetchall()
    finally:
        con.close()


def query_snapshot(obj: Path, scratch: Path, sql: str) -> list[tuple[object, ...]]:
    """`sql` on a private local copy of a published snapshot (never opened in place),
    after it passes the engine's check."""
    from syncengine.sqlite import check as sqlite_check

    copy = scratch / f"snapshot-{os.getpid()}.db"
    copy.write_bytes(obj.read_bytes())
    try:
        assert sqlite_check.check(str(copy)).ok
        return query_closed_db(copy, sql)
    finally:
        copy.unlink()
