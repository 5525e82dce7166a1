"""The input journal: one closed, immutable object per submitted prompt.

Owns the journal's durable layout and naming.  `Journal.record` writes the
prompt (any bytes) as one object and returns only once it is closed (the
commit on an object-store mount) and renamed into place::

    <journal_dir>/<session dir>/<seq:012d>-<time_ns:019d>-<random>.prompt

The session directory is ``s-`` plus the session id's UTF-8 bytes with
everything but ``[A-Za-z0-9_-]`` percent-encoded (so ``/``, ``..``, NUL and
non-ASCII cannot form a path; very long ids end in a hash instead).  Names
sort by a per-session sequence number, not by the clock: the counter lives in
``<state_dir>/journal/<session dir>.seq`` under a lock, and a fresh state
directory starts after the highest number found by listing that session's
durable directory once.  Time and a random suffix keep names unique even if
two state directories record for the same session.  An empty session id is a
usage error.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import xxhash

from syncengine.durable.lifecycle import DurableStore
from syncengine.durable.posix.store import PosixStore
from syncengine.errors import CommitRefused, ConfigError, DurableError, durable_error
from syncengine.fs import savefile

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_NAME = re.compile(r"^(\d{12})-(\d{19})-([0-9a-f]{8})\.prompt$")
_MAX_DIR = 200


def session_dir(session: str | bytes) -> str:
    """A safe, readable, reversible (when short) directory name for any session id."""
    raw = os.fsencode(session) if isinstance(session, str) else session
    if not raw:
        raise ConfigError("journal: the session id is empty: pass --session ID")
    enc = "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in raw)
    name = f"s-{enc}"
    if len(name) > _MAX_DIR:
        name = f"{name[: _MAX_DIR - 34]}~{xxhash.xxh3_128_hexdigest(raw)}"
    return name


@attrs.frozen
class Prompt:
    """One journal object."""

    seq: int
    time_ns: int
    name: str
    size: int


class Journal:
    """Prompts per session under `root` (durable), counters under `state_dir` (local)."""

    def __init__(
        self,
        root: str | os.PathLike[str] | DurableStore,
        state_dir: str | os.PathLike[str],
        *,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.store = PosixStore(root) if isinstance(root, str | os.PathLike) else root
        self.state_dir = Path(state_dir) / "journal"
        self.clock = clock

    def record(self, session: str | bytes, prompt: bytes) -> Prompt:
        """Write `prompt` as one closed object; return once it is durable."""
        sdir = session_dir(session)
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock_fd = os.open(
            self.state_dir / f"{sdir}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
        )
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            seq = self._next_seq(sdir)
            now = self.clock()
            name = f"{seq:012d}-{now:019d}-{os.urandom(4).hex()}.prompt"
            key = f"{sdir}/{name}"
            try:
                with self.store.writer(key, mode=0o600, unique=True, sync=True) as out:
                    out.write(prompt)
            except OSError as exc:
                raise durable_error("write", self.store.where(key), exc) from exc
            except CommitRefused as exc:
                raise DurableError(f"write (commit) {self.store.where(key)}: {exc.reason}") from exc
            self.store.barrier()
        finally:
            os.close(lock_fd)
        return Prompt(seq, now, name, len(prompt))

    def _next_seq(self, sdir: str) -> int:
        counter = self.state_dir / f"{sdir}.seq"
        try:
            last = int(counter.read_text().strip() or 0)
        except FileNotFoundError:  # a fresh state dir: continue after what is durable
            last = max((p.seq for p in self._scan(sdir)), default=0)
        except ValueError:
            last = max((p.seq for p in self._scan(sdir)), default=0)
        seq = last + 1
        # Reserve the number before writing: a crash leaves a gap, never a duplicate.
        savefile.write_file(counter, f"{seq}\n".encode(), mode=0o600, fsync=True)
        return seq

    def _scan(self, sdir: str) -> Iterator[Prompt]:
        for name in self.store.names(sdir):
            m = _NAME.match(name)
            if m:
                info = self.store.head(f"{sdir}/{name}")
                if info is not None:
                    yield Prompt(int(m.group(1)), int(m.group(2)), name, info.size)

    def list(self, session: str | bytes) -> list[Prompt]:
        """The session's prompts in order (sequence, then time, then name)."""
        return sorted(self._scan(session_dir(session)), key=lambda p: (p.seq, p.time_ns, p.name))

    def read(self, session: str | bytes, prompt: Prompt) -> bytes:
        return self.store.read_bytes(f"{session_dir(session)}/{prompt.name}")

    def export(self, session: str | bytes) -> Iterator[tuple[Prompt, bytes]]:
        """(prompt, bytes) in order."""
        for p in self.list(session):
            yield p, self.read(session, p)
