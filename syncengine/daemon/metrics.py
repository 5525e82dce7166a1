"""The runner's Prometheus metrics: the values, and their text exposition format.

Owns what ``syncengine run --metrics-address`` (and a `Runner` given an
address) serves at ``/metrics``: per adapter the loss window, the last complete
checkpoint's time, files and bytes published, pass durations, failures by kind
and the restore's progress; the durable root's lease.  docs/METRICS.md lists
each metric; `render` writes them in the Prometheus text exposition format
0.0.4 (``# HELP``, ``# TYPE``, then ``name{label="value"} number`` lines),
written here with the standard library, so serving metrics needs no dependency.

The runner calls `passed` / `pass_failed` after each pass and hands `watch`
to the engine's progress `Reporter` (the restore's meters are read as they
advance); `render` runs on the HTTP server's thread, so every update and read
holds one lock.  Serving is `syncengine.daemon.metricserver`'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from syncengine.__about__ import __version__
from syncengine.progress import Progress
from syncengine.report import Report

# A failed pass, per adapter, by kind: "path" some paths were not published (the rest
# were), "stopped" the adapter stopped (its durable side failed), "error" the pass
# raised before any adapter reported (the state lock, the durable side), "lease_lost"
# another instance took the durable root over.
FAILURE_KINDS = ("path", "stopped", "error", "lease_lost")


@attrs.define
class AdapterMetrics:
    """One adapter's values; times in seconds since the epoch."""

    last_checkpoint: float | None = None  # the last complete checkpoint's start
    files: int = 0
    bytes: int = 0
    passes: int = 0
    duration_sum: float = 0.0
    last_duration: float = 0.0
    failures: dict[str, int] = attrs.field(factory=lambda: dict.fromkeys(FAILURE_KINDS, 0))
    restore: Progress | None = None


class Metrics:
    """The values a runner's metrics endpoint serves (thread-safe)."""

    def __init__(
        self,
        adapters: Iterable[str],
        lease: Callable[[], Mapping[str, Any]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._lock = threading.Lock()
        self._adapters = {name: AdapterMetrics() for name in adapters}
        self._lease = lease  # the holder's describe(): generation, holder, lost
        self._clock = clock
        # the background restore's status() (daemon.background), once one runs
        self.background: Callable[[], Mapping[str, Any]] | None = None

    def watch(self, meter: Progress) -> None:
        """The progress `Reporter`'s hook: a restore meter is read at each scrape."""
        if meter.operation == "restore" and meter.label in self._adapters:
            with self._lock:
                self._adapters[meter.label].restore = meter

    def started(self, last_checkpoint: Mapping[str, float | None]) -> None:
        """The last complete checkpoint of each adapter before this start (seconds; the
        status files'): the loss window runs from there until a pass completes."""
        with self._lock:
            for name, value in last_checkpoint.items():
                if name in self._adapters:
                    self._adapters[name].last_checkpoint = value

    def passed(self, report: Report) -> None:
        """A pass ended with a report (complete or not)."""
        if report.skipped_busy:
            return
        with self._lock:
            for a in report.adapters:
                m = self._adapters.get(a.name)
                if m is None:
                    continue
                m.files += a.files
                m.bytes += a.bytes
                m.passes += 1
                m.duration_sum += a.duration_s
                m.last_duration = a.duration_s
                if a.ok:
                    m.last_checkpoint = report.started_ns / 1e9
                else:
                    m.failures["stopped" if a.fatal else "path"] += 1

    def pass_failed(self, kind: str) -> None:
        """A pass raised (`kind`: "error" or "lease_lost"): a failure of every adapter."""
        with self._lock:
            for m in self._adapters.values():
                m.failures[kind] += 1

    def render(self) -> str:
        """Every metric, in the text exposition format."""
        lease = dict(self._lease())
        background = dict(self.background()) if self.background is not None else None
        with self._lock:
            now = self._clock()
            return "".join(_families(self._adapters, lease, now)) + _background(background)


def _families(
    adapters: Mapping[str, AdapterMetrics], lease: Mapping[str, Any], now: float
) -> Iterable[str]:
    yield _family(
        "syncengine_info", "gauge", "The running syncengine.", [(_labels(version=__version__), 1)]
    )
    yield _family(
        "syncengine_loss_window_seconds",
        "gauge",
        "Seconds since the last complete checkpoint started: changes made since are not "
        "durable yet (absent before the first).",
        _each(
            adapters,
            lambda m: None if m.last_checkpoint is None else max(0.0, now - m.last_checkpoint),
        ),
    )
    yield _family(
        "syncengine_last_checkpoint_timestamp_seconds",
        "gauge",
        "When the last complete checkpoint started (seconds since the epoch).",
        _each(adapters, lambda m: m.last_checkpoint),
    )
    yield _family(
        "syncengine_published_files_total",
        "counter",
        "Files published since the start, each a new closed object.",
        _each(adapters, lambda m: m.files),
    )
    yield _family(
        "syncengine_published_bytes_total",
        "counter",
        "Bytes published since the start.",
        _each(adapters, lambda m: m.bytes),
    )
    yield from _pass_families(adapters)
    yield from _restore_families(adapters)
    yield from _lease_families(lease)


def _family(name: str, kind: str, text: str, samples: Iterable[tuple[str, float]]) -> str:
    """One metric family: its HELP and TYPE lines, then a line per sample (labels, value)."""
    lines = [f"# HELP {name} {text}\n", f"# TYPE {name} {kind}\n"]
    lines.extend(f"{name}{labels} {_number(v)}\n" for labels, v in samples)
    return "".join(lines)


def _each(
    adapters: Mapping[str, AdapterMetrics], value: Callable[[AdapterMetrics], float | None]
) -> list[tuple[str, float]]:
    """One sample per adapter (labelled ``adapter``) whose value is known."""
    found = [(_labels(adapter=n), value(m)) for n, m in adapters.items()]
    return [(labels, v) for labels, v in found if v is not None]


def _pass_families(adapters: Mapping[str, AdapterMetrics]) -> Iterable[str]:
    yield _summary(adapters)
    yield _family(
        "syncengine_last_pass_duration_seconds",
        "gauge",
        "How long the last checkpoint pass took.",
        _each(adapters, lambda m: m.last_duration if m.passes else None),
    )
    yield _family(
        "syncengine_failures_total",
        "counter",
        "Checkpoint passes that failed, by kind: path (some paths not published), stopped "
        "(the durable side failed), error (the pass raised), lease_lost (fenced).",
        [
            (_labels(adapter=n, kind=kind), count)
            for n, m in adapters.items()
            for kind, count in m.failures.items()
        ],
    )


def _summary(adapters: Mapping[str, AdapterMetrics]) -> str:
    """A summary without quantiles: ``_sum`` and ``_count`` lines under one family."""
    name = "syncengine_pass_duration_seconds"
    head = _family(name, "summary", "How long checkpoint passes took (sum and count).", [])
    body = "".join(
        f"{name}_sum{_labels(adapter=n)} {_number(m.duration_sum)}\n"
        f"{name}_count{_labels(adapter=n)} {_number(m.passes)}\n"
        for n, m in adapters.items()
    )
    return head + body


def _restore_families(adapters: Mapping[str, AdapterMetrics]) -> Iterable[str]:
    meters = {n: m.restore for n, m in adapters.items() if m.restore is not None}
    for what, text in (
        ("files", "Files the start's restore has written"),
        ("bytes", "Bytes the start's restore has written"),
        ("planned_files", "Files the start's restore is to write"),
        ("planned_bytes", "Bytes the start's restore is to write"),
    ):
        field = what.replace("planned_", "") + ("_total" if what.startswith("planned") else "")
        yield _family(
            f"syncengine_restore_{what}",
            "gauge",
            f"{text}.",
            [(_labels(adapter=n), getattr(p, field)) for n, p in meters.items()],
        )


def _background(status: Mapping[str, Any] | None) -> str:
    """The background restore of `run` (absent when none ran)."""
    if status is None:
        return ""
    return "".join(
        _family(f"syncengine_restore_background_{name}", "gauge", text, [("", value)])
        for name, text, value in (
            ("files", "Files the background restore has written.", status["files"]),
            ("bytes", "Bytes the background restore has written.", status["bytes"]),
            ("planned_files", "Files the background restore is to write.", status["files_total"]),
            ("planned_bytes", "Bytes the background restore is to write.", status["bytes_total"]),
            (
                "running",
                "1 while the background restore runs, else 0.",
                status["state"] == "running",
            ),
            (
                "failed",
                "1 once the background restore failed (see status), else 0.",
                status["state"] == "failed",
            ),
        )
    )


def _lease_families(lease: Mapping[str, Any]) -> Iterable[str]:
    held = lease.get("holder") is not None and not lease.get("lost")
    yield _family(
        "syncengine_lease_held",
        "gauge",
        "1 while this instance holds the durable root's lease, else 0.",
        [("", 1 if held else 0)],
    )
    yield _family(
        "syncengine_lease_lost",
        "gauge",
        "1 once another instance took the lease over (this one publishes no more).",
        [("", 1 if lease.get("lost") else 0)],
    )
    yield _family(
        "syncengine_lease_generation",
        "gauge",
        "The lease generation this instance holds or held last (0: none yet).",
        [("", int(lease.get("generation") or 0))],
    )


_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n"})


def _labels(**labels: str) -> str:
    """``{a="x",b="y"}`` with the format's escapes (backslash, quote, newline)."""
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{v.translate(_ESCAPES)}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


__all__ = ["FAILURE_KINDS", "AdapterMetrics", "Metrics"]
