"""Progress of long operations: log lines on a driven clock, a bar on a terminal, and the
one line `run` logs at start.  The clock is a parameter: no sleep, no thread."""

from __future__ import annotations

import contextlib
import io
import logging
import shutil
from collections.abc import Iterator

import pytest

from syncengine import Engine, Runner
from syncengine.progress import CHECK_FILES, Reporter
from tests.conftest import EngineFactory, Tree

RAW = {"adapters": [], "adapter": [{"name": "x", "live": "x", "durable": "state/x"}]}


class Clock:
    """A monotonic clock the test moves; counts how often it is read."""

    def __init__(self, step: float = 0.0) -> None:
        self.now = 0.0
        self.step = step
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        self.now += self.step
        return self.now


@contextlib.contextmanager
def log_lines() -> Iterator[list[str]]:
    """INFO lines of the syncengine logger, whatever an earlier in-process CLI set up."""
    logger = logging.getLogger("syncengine")
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_a_line_every_interval_with_counts_rate_and_time_left() -> None:
    clock = Clock()
    meter = Reporter(clock=clock, every=5.0).start("restore", "codex", 1000, 1000 * 1000)
    with log_lines() as lines:
        for _ in range(200):  # no time passes: a short run says nothing
            meter.advance(1, 1000)
        assert lines == []
        clock.now = 6.0
        for _ in range(CHECK_FILES):
            meter.advance(1, 1000)
    # the clock is looked at every CHECK_FILES files: the line comes at 256
    assert lines == [
        "restore.progress adapter=codex files=256/1000 bytes=250.0KiB/976.6KiB "
        "rate=41.7KiB/s eta=17s"
    ]


def test_the_clock_is_read_only_every_few_files() -> None:
    clock = Clock()
    meter = Reporter(clock=clock).start("checkpoint", "x", 100_000, 10**7)
    for _ in range(100_000):
        meter.advance(1, 100)
    assert clock.reads <= 1 + 100_000 // CHECK_FILES + 1


def test_large_files_look_at_the_clock_each_time() -> None:
    clock = Clock(step=10.0)  # 10 s per file
    meter = Reporter(clock=clock, every=5.0).start("verify", "x", 3, 3 << 30)
    with log_lines() as lines:
        for _ in range(3):
            meter.advance(1, 1 << 30)
    assert [line.split(" eta=")[0] for line in lines] == [
        "verify.progress adapter=x files=1/3 bytes=1.0GiB/3.0GiB rate=102.4MiB/s",
        "verify.progress adapter=x files=2/3 bytes=2.0GiB/3.0GiB rate=102.4MiB/s",
        "verify.progress adapter=x files=3/3 bytes=3.0GiB/3.0GiB rate=102.4MiB/s",
    ]
    assert lines[0].endswith("eta=20s")


def test_one_large_file_first_does_not_pin_the_bar_at_99_percent() -> None:
    """A 1 GiB file (10 s), then 19,999 files of 1 KiB (1 ms each): after 1,000 files the
    time left is the small files' 19 s, the bar a third full.  By bytes alone (the old
    estimate) it said "ETA 0s" at 99% for the rest of the run."""
    clock = Clock()
    bar = io.StringIO()
    total = (1 << 30) + 19_999 * 1024
    meter = Reporter(clock=clock, every=1e9, bar=bar).start("restore", "x", 20_000, total)
    clock.now = 10.0
    meter.advance(1, 1 << 30)
    for _ in range(999):
        clock.now += 0.001
        meter.advance(1, 1024)
    elapsed = clock.now
    left = meter._eta(elapsed)
    assert left is not None and 19.0 * 0.9 < left < 19.0 * 1.1
    assert 0.3 < meter.share(clock.now) < 0.4
    line = bar.getvalue().rsplit("\r", 1)[1]
    assert "[########................]" in line and "ETA 0s" not in line, line


def test_a_bar_on_a_terminal_redrawn_in_place_and_ended() -> None:
    clock = Clock(step=0.3)
    bar = io.StringIO()
    meter = Reporter(clock=clock, every=1e9, bar=bar).start("checkpoint", "codex", 640, 640)
    for _ in range(640):
        meter.advance(1, 1)
    meter.finish()
    out = bar.getvalue()
    assert out.startswith("\rcheckpoint codex [") and out.endswith("\n")
    assert out.count("\r") >= 5  # redrawn, never scrolled
    last = out.rsplit("\r", 1)[1]
    assert "[########################] 640/640 files" in last and "ETA 0s" in last


def test_engine_operations_report_progress_on_the_engine_clock(
    tree: Tree, engine: EngineFactory
) -> None:
    for i in range(300):
        tree.write(f"x/f{i:03}.txt", "x" * 100)
    progress = Reporter(clock=Clock(step=3.0), every=5.0)  # 3 s per look
    eng = Engine(engine(RAW).config, stores=tree.stores, progress=progress)
    with eng, log_lines() as lines:
        assert eng.checkpoint().ok
        shutil.rmtree(tree.local / "x")
        assert eng.restore().ok
        assert eng.verify(sample=100).exit_code == 0
    for op in ("checkpoint", "restore", "verify"):
        mine = [line for line in lines if line.startswith(f"{op}.progress adapter=x ")]
        assert mine, (op, lines)
        assert all("/300 " in line and " rate=" in line and " eta=" in line for line in mine)


@pytest.mark.dir_only("the bar's decision is made before anything runs")
def test_the_cli_draws_a_bar_only_on_a_terminal() -> None:
    from syncengine.cli.args import build_parser
    from syncengine.cli.commands import _progress_bar

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    def bar(*argv: str, stream: io.StringIO) -> bool:
        return _progress_bar(build_parser().parse_args(list(argv)), stream) is not None

    assert bar("restore", stream=Tty()) and bar("verify", stream=Tty())
    assert not bar("restore", stream=io.StringIO())  # a pipe or a log file: log lines only
    assert not bar("-q", "checkpoint", stream=Tty()) and not bar("checkpoint", "-v", stream=Tty())
    assert not bar("checkpoint", "--dry-run", stream=Tty())
    assert not bar("run", "--", "true", stream=Tty())  # the agent owns the terminal


def test_run_logs_one_line_at_start_saying_what_it_restored_and_will_checkpoint(
    tree: Tree, engine: EngineFactory
) -> None:
    raw = {
        "adapters": [],
        "adapter": [
            {"name": "x", "live": "x", "durable": "state/x"},
            {"name": "later", "live": "later", "durable": "state/later"},
        ],
    }
    tree.write("x/a.txt", "abc")
    assert engine(raw).checkpoint().ok
    shutil.rmtree(tree.local / "x")
    with log_lines() as lines, Runner(engine(raw), interval=3600, watch=False):
        pass
    (start,) = [line for line in lines if line.startswith("runner.started ")]
    assert start == (
        "runner.started restored 1 file(s), 3 bytes; checkpointing x every 3600s "
        "(mode scanning); no live tree yet (taken once it appears): later"
    )
