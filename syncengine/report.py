"""Frozen results returned by the engine: what a run did, per adapter and per path.

Also `published`, the words every report line uses for what a checkpoint wrote.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class PathError:
    """One path that could not be handled, and why."""

    adapter: str
    path: str
    operation: str
    reason: str

    def __str__(self) -> str:
        return f"{self.adapter}: {self.operation} {self.path}: {self.reason}"


@attrs.frozen
class AdapterReport:
    """The outcome of one operation on one adapter."""

    name: str
    files: int = 0  # published (checkpoint) or restored (restore)
    bytes: int = 0
    unchanged: int = 0  # looked at, content equal: nothing written
    kept_local: int = 0  # restore: newer local files left alone
    links: int = 0
    dirs: int = 0  # directories recorded (checkpoint) or made (restore)
    skipped: int = 0  # special files, vanished files
    changed: int = 0  # changed while copied: previous durable copy kept, taken next pass
    plain_copies: int = 0  # transcripts published whole at their plain path (segments.py)
    manifest: str | None = None  # the manifest object written, if any
    errors: tuple[PathError, ...] = ()
    fatal: str | None = None  # the durable side failed: the adapter stopped
    absent: bool = False  # checkpoint: no live tree yet; restore: no durable checkpoint yet
    # (nothing to do either way: all such adapters share one quiet line)
    plan: tuple[str, ...] = ()  # dry run: the actions, one line each
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.errors and self.fatal is None


@attrs.frozen
class Report:
    """The outcome of `checkpoint` or `restore` across adapters."""

    operation: str
    started_ns: int
    duration_s: float
    adapters: tuple[AdapterReport, ...]
    skipped_busy: bool = False  # a periodic checkpoint found another run holding the lock
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return all(a.ok for a in self.adapters)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    @property
    def errors(self) -> tuple[PathError, ...]:
        return tuple(e for a in self.adapters for e in a.errors)

    @property
    def files(self) -> int:
        return sum(a.files for a in self.adapters)

    @property
    def bytes(self) -> int:
        return sum(a.bytes for a in self.adapters)

    @property
    def plain_copies(self) -> int:
        return sum(a.plain_copies for a in self.adapters)


def published(files: int, plain_copies: int, nbytes: int) -> str:
    """What a checkpoint wrote: its files, the plain copies of logs (written whole at a
    final checkpoint, segments.py: not counted as files), and the bytes of both."""
    copies = f" and {plain_copies} plain log cop{'y' if plain_copies == 1 else 'ies'}"
    return f"{files} file(s){copies if plain_copies else ''}, {nbytes} bytes"
