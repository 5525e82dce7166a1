"""Progress of long checkpoints, restores and verifies: a log line every few seconds, a bar
on a terminal.

Owns the counting and the two ways of telling it: an ``<operation>.progress``
log event (INFO: files and bytes done of total, rate, estimated time left)
every `Reporter.every` seconds, the first one only once that much time has
passed (a short run says nothing), and, when the caller gives a stream (the
CLI does when stderr is a terminal), a one-line bar redrawn in place.

The time left and the bar come from a cost per file plus a cost per byte,
fitted (least squares) to the looks at the clock so far: by bytes alone, one
large file first left the bar at 99% and "ETA 0s" for the thousands of small
files after it; by files alone, the reverse (issue 28).

No thread: the executor's own loop calls `Progress.advance` once per file,
and the hot path is two additions and a comparison; the clock (a parameter,
so tests drive it) is read only every `CHECK_FILES` files or `CHECK_BYTES`
bytes.  An idle checkpoint creates no `Progress` at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TextIO

import attrs

log = logging.getLogger("syncengine")

CHECK_FILES = 64  # files between two looks at the clock
CHECK_BYTES = 8 << 20  # or this many bytes (a few large files)
BAR_WIDTH = 24
MIB = float(1 << 20)  # the fit counts bytes in MiB (sums of squares stay small)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    raise AssertionError("unreachable")


def human_seconds(s: float) -> str:
    s = int(s + 0.5)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


@attrs.frozen
class Reporter:
    """How progress is told (the engine holds one): the clock, the log interval, a bar."""

    clock: Callable[[], float] = time.monotonic
    every: float = 5.0  # seconds between log lines
    bar: TextIO | None = None  # a terminal: redraw a bar here
    bar_every: float = 0.5
    # handed each new meter (the runner's metrics add theirs): shared, never replaced
    watchers: list[Callable[[Progress], None]] = attrs.field(factory=list, eq=False)

    def start(self, operation: str, label: str, files: int, nbytes: int) -> Progress:
        """A meter for one operation on one adapter, with its totals."""
        meter = Progress(self, operation, label, files, nbytes, self.clock())
        for watch in self.watchers:
            watch(meter)
        return meter


@attrs.define
class Progress:
    """Files and bytes done of a known total; `advance` once per file, `finish` at the end."""

    reporter: Reporter
    operation: str  # "checkpoint", "restore", "verify": the event is "<operation>.progress"
    label: str  # the adapter
    files_total: int
    bytes_total: int
    started: float
    files: int = 0
    bytes: int = 0
    _next_files: int = CHECK_FILES
    _next_bytes: int = CHECK_BYTES
    _next_log: float = attrs.field(init=False)
    _next_bar: float = attrs.field(init=False)
    _bar_drawn: bool = False
    # sums of the looks (files f, MiB m, seconds t) for the fit t = a*f + b*m
    _sums: list[float] = attrs.field(factory=lambda: [0.0] * 5)  # ff fm mm ft mt

    def __attrs_post_init__(self) -> None:
        self._next_log = self.started + self.reporter.every
        self._next_bar = self.started + self.reporter.bar_every

    def advance(self, files: int = 1, nbytes: int = 0) -> None:
        self.files += files
        self.bytes += nbytes
        if self.files >= self._next_files or self.bytes >= self._next_bytes:
            self._look()

    def _look(self) -> None:
        self._next_files = self.files + CHECK_FILES
        self._next_bytes = self.bytes + CHECK_BYTES
        now = self.reporter.clock()
        f, m, t = self.files, self.bytes / MIB, now - self.started
        for i, term in enumerate((f * f, f * m, m * m, f * t, m * t)):
            self._sums[i] += term
        if now >= self._next_log:
            self._next_log = now + self.reporter.every
            log.info(
                "%s.progress adapter=%s %s",
                self.operation,
                self.label,
                self.describe(now),
                extra={"event": f"{self.operation}.progress"},
            )
        if self.reporter.bar is not None and now >= self._next_bar:
            self._next_bar = now + self.reporter.bar_every
            self._draw(now)

    def describe(self, now: float) -> str:
        """``files=A/B bytes=X/Y rate=R/s eta=T`` as of `now`."""
        elapsed = max(now - self.started, 1e-9)
        rate = self.bytes / elapsed
        eta = self._eta(elapsed)
        return (
            f"files={self.files}/{self.files_total} bytes={human_bytes(self.bytes)}/"
            f"{human_bytes(self.bytes_total)} rate={human_bytes(rate)}/s "
            f"eta={'?' if eta is None else human_seconds(eta)}"
        )

    def _eta(self, elapsed: float) -> float | None:
        """Time left: the files and bytes to go at the fitted costs (None: nothing done)."""
        files_left = max(self.files_total - self.files, 0)
        mib_left = max(self.bytes_total - self.bytes, 0) / MIB
        fit = self._fit()
        if fit is not None:
            return fit[0] * files_left + fit[1] * mib_left
        # no fit yet (one look, or files and bytes grew in step): the larger of the two
        # single-cost estimates, never the "0s" of the one that is nearly done
        guesses = [
            elapsed / done * left
            for done, left in ((self.files, files_left), (self.bytes / MIB, mib_left))
            if done
        ]
        return max(guesses) if guesses else None

    def _fit(self) -> tuple[float, float] | None:
        """Seconds per file and per MiB, least squares over the looks (neither negative);
        None when the looks cannot tell the two costs apart."""
        ff, fm, mm, ft, mt = self._sums
        det = ff * mm - fm * fm
        if ff <= 0 or mm <= 0 or det <= 1e-6 * ff * mm:
            return None
        a, b = (ft * mm - mt * fm) / det, (mt * ff - ft * fm) / det
        if a < 0:  # the time is all in the bytes
            return 0.0, max(mt / mm, 0.0)
        if b < 0:
            return max(ft / ff, 0.0), 0.0
        return a, b

    def share(self, now: float) -> float:
        """How much of the work is done (0..1): the time spent of the time spent and left."""
        elapsed = max(now - self.started, 1e-9)
        eta = self._eta(elapsed)
        if eta is None:
            return self.files / self.files_total if self.files_total else 1.0
        return elapsed / (elapsed + eta)

    def _draw(self, now: float) -> None:
        bar = self.reporter.bar
        assert bar is not None
        filled = int(BAR_WIDTH * min(self.share(now), 1.0))
        elapsed = max(now - self.started, 1e-9)
        eta = self._eta(elapsed)
        bar.write(
            f"\r{self.operation} {self.label} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
            f"{self.files}/{self.files_total} files {human_bytes(self.bytes)}/"
            f"{human_bytes(self.bytes_total)} {human_bytes(self.bytes / elapsed)}/s "
            f"ETA {'?' if eta is None else human_seconds(eta)}\x1b[K"
        )
        bar.flush()
        self._bar_drawn = True

    def finish(self) -> None:
        """End the bar's line (if one was drawn); the report says the rest."""
        if self._bar_drawn and self.reporter.bar is not None:
            self._draw(self.reporter.clock())
            self.reporter.bar.write("\n")
            self.reporter.bar.flush()
            self._bar_drawn = False


SILENT = Reporter(every=float("inf"))  # no log line (the first is never due), no bar
