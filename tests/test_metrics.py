"""Prometheus metrics, scraped from a really serving runner (docs/METRICS.md).

The embedded `Runner` given an address, and ``syncengine run --metrics-address``
in a subprocess, are scraped over HTTP and the answer parsed by the ecosystem's
own parser (`prometheus_client`, a test dependency only): the values follow
the passes (a checkpoint moves them, a failing pass counts a failure of its
kind), the restore's progress is there, and the server stops with the run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from syncengine import Runner
from syncengine.daemon.metricserver import CONTENT_TYPE
from syncengine.errors import ConfigError
from tests.conftest import CliRunner, EngineFactory, Tree
from tests.test_notices import lock
from tests.test_sqlite import make_db
from tests.test_supervisor import Lines, finish, run_cmd

RAW = {"adapters": [], "adapter": [{"name": "x", "live": "x", "durable": "state/x"}]}
Samples = dict[tuple[str, str], float]  # (name, "label=value,...") -> value


def scrape(address: str | None) -> Samples:
    """The samples at http://ADDRESS/metrics, parsed as Prometheus parses them; every
    family says its type, and each sample belongs to the family it follows."""
    assert address is not None
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as answer:
        assert answer.headers["Content-Type"] == CONTENT_TYPE
        text = answer.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        assert family.type in ("gauge", "counter", "summary"), family
        assert f"# TYPE {family.name}" in text and family.documentation
        for s in family.samples:
            out[(s.name, ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, labels: str = "adapter=x") -> float:
    return samples[(name, labels)]


@pytest.mark.dir_only("the runner's counters and the HTTP endpoint; no store decides them")
def test_embedded_runner_serves_metrics_that_follow_its_passes(
    tree: Tree, engine: EngineFactory
) -> None:
    tree.write("x/a.txt", "a")
    runner = Runner(engine(RAW), interval=3600, metrics_address="127.0.0.1:0")
    runner.start()
    try:
        address = runner.metrics_address
        assert address is not None and not address.endswith(":0")  # the bound port
        first = scrape(address)
        assert value(first, "syncengine_published_files_total") == 0
        assert ("syncengine_loss_window_seconds", "adapter=x") not in first  # never yet
        assert value(first, "syncengine_lease_held", "") == 1
        assert value(first, "syncengine_lease_generation", "") >= 1
        assert value(first, "syncengine_restore_planned_files") == 0
        tree.write("x/b.txt", "bb")
        report = runner.checkpoint_now(timeout=60)
        assert report.ok
        after = scrape(address)
        assert value(after, "syncengine_published_files_total") == 2
        assert value(after, "syncengine_published_bytes_total") == 3
        stamp = value(after, "syncengine_last_checkpoint_timestamp_seconds")
        assert stamp == report.started_ns / 1e9
        assert 0 <= value(after, "syncengine_loss_window_seconds") < 3600
        assert value(after, "syncengine_pass_duration_seconds_count") == 1
        assert value(after, "syncengine_failures_total", "adapter=x,kind=path") == 0
    finally:
        runner.stop()
    with pytest.raises(urllib.error.URLError):  # the server went with the runner
        scrape(address)


@pytest.mark.dir_only("a failing path is counted by the runner, whatever the store")
def test_a_failing_pass_counts_a_failure_of_its_kind(tree: Tree, engine: EngineFactory) -> None:
    """A database held locked by another process cannot be snapshotted: the pass is
    incomplete, ``syncengine_failures_total{kind="path"}`` counts it, and the loss
    window keeps running from the last complete checkpoint."""
    raw = {**RAW, "sqlite_busy_timeout": 0.2}
    tree.write("x/a.txt", "a")
    with Runner(engine(raw), interval=3600, metrics_address="127.0.0.1:0") as runner:
        assert runner.checkpoint_now(timeout=60).ok
        good = scrape(runner.metrics_address)
        db = tree.local / "x" / "cache.db"  # new, then held locked
        make_db(db, 2, mode="delete")
        locker = lock(str(db))
        try:
            assert not runner.checkpoint_now(timeout=60).ok
            bad = scrape(runner.metrics_address)
        finally:
            locker.stop("go")
    assert value(bad, "syncengine_failures_total", "adapter=x,kind=path") == 1
    assert value(bad, "syncengine_failures_total", "adapter=x,kind=stopped") == 0
    stamp = "syncengine_last_checkpoint_timestamp_seconds"
    assert value(bad, stamp) == value(good, stamp)  # the failed pass is not a checkpoint
    assert value(bad, "syncengine_pass_duration_seconds_count") == 2


@pytest.mark.dir_only("the restore's meters, read through the progress hook")
def test_the_start_restore_progress_is_served(tree: Tree, engine: EngineFactory) -> None:
    for i in range(5):
        tree.write(f"x/f{i}.txt", "x" * (i + 1))
    with Runner(engine(RAW), interval=3600) as runner:  # no address: nothing served
        assert runner.metrics_address is None
    shutil.rmtree(tree.local / "x")
    with Runner(engine(RAW), interval=3600, metrics_address="127.0.0.1:0") as runner:
        done = scrape(runner.metrics_address)
    assert value(done, "syncengine_restore_planned_files") == 5
    assert value(done, "syncengine_restore_files") == 5
    assert value(done, "syncengine_restore_planned_bytes") == 15
    assert value(done, "syncengine_restore_bytes") == 15


@pytest.mark.dir_only("refused by the configuration, before any store is used")
def test_a_bad_metrics_address_is_one_clear_line(tree: Tree, cli: CliRunner) -> None:
    out = cli("run", "--metrics-address", "localhost", "--", "true", check=2)
    assert "metrics_address 'localhost' is not HOST:PORT" in out.stderr
    assert out.stderr.count("\n") == 1


@pytest.mark.dir_only("a port in use is refused before anything starts; no store is used")
def test_a_port_in_use_stops_the_start_with_one_line(tree: Tree, engine: EngineFactory) -> None:
    with Runner(engine(RAW), interval=3600, metrics_address="127.0.0.1:0") as first:
        taken = first.metrics_address
        assert taken is not None
        with pytest.raises(ConfigError, match=f"cannot serve metrics on {taken}"):
            Runner(engine(RAW), interval=3600, metrics_address=taken).start()


def _serving(reader: Lines) -> str:
    line = reader.lines[reader.wait_for(lambda s: "metrics.serving address=" in s, timeout=60)]
    return line.split("address=", 1)[1].split()[0]


@pytest.mark.dir_only("the process's endpoint; the passes on each store are tested elsewhere")
def test_syncengine_run_serves_metrics_until_it_exits(tree: Tree) -> None:
    """A real ``syncengine run``: scraped before and after a pass that publishes a
    file; ``status`` names the address while it runs; gone once it has exited."""
    (tree.local / "x").mkdir()
    child = "import time; time.sleep(600)"  # until run forwards it the SIGTERM
    proc = run_cmd(tree, child, "--interval", "0.2", "--metrics-address", "127.0.0.1:0")
    assert proc.stderr is not None
    reader = Lines(proc.stderr)
    try:
        address = _serving(reader)
        reader.wait_for(lambda s: "run.started" in s, timeout=60)
        assert value(scrape(address), "syncengine_published_files_total") == 0
        tree.write("x/new.txt", "12345")
        reader.wait_for(lambda s: "runner.pass-end" in s and " files=1 " in s, timeout=60)
        after = scrape(address)
        assert value(after, "syncengine_published_files_total") == 1
        assert value(after, "syncengine_published_bytes_total") == 5
        assert value(after, "syncengine_lease_held", "") == 1
        status = _status_json(tree)
        assert status["daemon"]["metrics_address"] == address
    finally:
        proc.terminate()
        rc, err = finish(proc, reader)
    assert rc in (0, 143), err
    with pytest.raises(urllib.error.URLError):
        scrape(address)


def _status_json(tree: Tree) -> Any:
    config = str(tree.base / "cfg.toml")
    out = subprocess.run(
        [sys.executable, "-m", "syncengine", "--config", config, "status", "--json"],
        capture_output=True,
        text=True,
        env=tree.env(),
        cwd=tree.base,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)
