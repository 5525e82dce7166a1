"""``syncengine status`` from the outside: what an operator asks first comes first.

Each test runs the CLI as a subprocess against a state a real run left: a
``syncengine run`` that was SIGKILLed (status must say the daemon died without a
final checkpoint, not show a live-looking lease), one that stopped cleanly, a
fresh restore (status says what it did), and ``--json`` with one time format.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from typing import Any

import pytest

from tests.conftest import CliRunner, Tree
from tests.test_supervisor import CONFIG, Lines, finish, run_cmd

TIME_KEYS = {"expires", "updated", "probed", "finished", "started", "snapshot"} | {
    "last_checkpoint",
    "last_attempt",
    "last_pass",
    "last_ok",
}
WRITE = "import os; open(os.environ['AM_LOCAL'] + '/x/f.txt', 'w').write('f' * {})"
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def _times(value: Any, key: str = "") -> list[tuple[str, Any]]:
    """Every (key, value) in a JSON document whose key names a time or ends in _ns."""
    if isinstance(value, list):
        return [t for v in value for t in _times(v, key)]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in _times(v, k)]
    timed = key.endswith("_ns") or key in TIME_KEYS
    return [(key, value)] if timed and value is not None else []


def _status(cli: CliRunner, tree: Tree, *args: str) -> str:
    return cli("--config", str(tree.base / "cfg.toml"), "status", *args, check=0).stdout


@pytest.mark.dir_only("what status says of a dead daemon is local state; the store is not used")
def test_status_after_run_was_sigkilled_says_it_died_without_a_final_checkpoint(
    tree: Tree, cli: CliRunner
) -> None:
    """Before: protected, with the lease held.  After kill -9: not protected, the
    daemon died without a final checkpoint, and the lease it left is named as the
    dead daemon's (the next instance waits for its expiry).  Fails if status reads
    the stale daemon.json as running, or says nothing of the missing final pass."""
    proc = run_cmd(tree, "import time; time.sleep(600)", "--interval", "3600")
    assert proc.stderr is not None
    reader = Lines(proc.stderr)
    line = reader.lines[reader.wait_for(lambda s: "run.started" in s, timeout=60)]
    child = int(line.split("pid=", 1)[1].split()[0])
    try:
        alive = _status(cli, tree)
        assert alive.startswith(f"protected: yes: `syncengine run` (pid {proc.pid})"), alive
        assert "last stop:" not in alive
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        os.kill(child, signal.SIGKILL)  # orphaned by the kill: not ours to leave behind
    finish(proc, reader)  # its stderr closes once both are gone
    text = _status(cli, tree)
    lines = text.splitlines()
    assert lines[0] == (
        f"protected: NO: the daemon (pid {proc.pid}) died without a final checkpoint; "
        "nothing checkpoints this state now"
    ), text
    assert lines[1].startswith("could lose: ")
    assert lines[2].startswith(f"last stop: the daemon (pid {proc.pid}) died without a final")
    assert "held by the daemon that died" in text and "lease release --force" in text
    data = json.loads(_status(cli, tree, "--json"))
    assert data["daemon"]["died"] is True and data["daemon"]["running"] is False
    assert ISO.match(data["lease"]["expires"]) and ISO.match(data["daemon"]["lease"]["expires"])


@pytest.mark.dir_only(
    "how a clean stop is shown; the final checkpoint on stores is tested elsewhere"
)
def test_status_after_a_clean_stop_says_the_final_checkpoint_completed(
    tree: Tree, cli: CliRunner
) -> None:
    proc = run_cmd(tree, WRITE.format(3000), "--interval", "3600")
    rc, err = finish(proc)
    assert rc == 0, err
    text = _status(cli, tree)
    lines = text.splitlines()
    assert lines[0].startswith("protected: no: no daemon running"), text
    assert re.match(r"could lose: up to [\d.]+ s of changes \(the loss window of x\)", lines[1])
    assert lines[2].startswith("last stop: final checkpoint complete, 20"), text
    assert "its pass published 1 file(s), 2.9 KiB" in text  # human units
    assert "1 file(s) in the checkpoint" in text and "total" not in text
    assert "configuration:\n" not in text and "local_root" not in text  # behind --settings
    assert "local_root" in _status(cli, tree, "--settings")


def test_status_after_a_fresh_restore_says_what_it_restored(tree: Tree, cli: CliRunner) -> None:
    """A new container: the state dir and live tree gone, restored from the durable side.
    Status says when the restore ran and what it brought back, not only "never"."""
    (tree.base / "cfg.toml").write_text(CONFIG)
    tree.write("x/a.txt", "a" * 2048)
    tree.write("x/b.txt", "b")
    cli("--config", str(tree.base / "cfg.toml"), "checkpoint", check=0)
    shutil.rmtree(tree.local)
    cli("--config", str(tree.base / "cfg.toml"), "restore", check=0)
    text = _status(cli, tree)
    assert re.search(
        r"^last restore: complete, 20.* UTC \(.* ago\): 2 file\(s\), 2.0 KiB restored", text, re.M
    ), text
    assert "last checkpoint: none since the restore, which brought back 2 file(s)" in text
    assert "could lose: changes in x since its restore (no checkpoint yet)" in text


@pytest.mark.dir_only("the JSON's time format; the values come from local files")
def test_status_json_gives_every_time_in_one_format(tree: Tree, cli: CliRunner) -> None:
    """ISO 8601 UTC strings everywhere: the lease's expiry, the checkpoint's, the
    restore's and the probe's times.  Fails on any ``*_ns`` number or epoch float left."""
    proc = run_cmd(tree, WRITE.format(1), "--interval", "3600")
    assert finish(proc)[0] == 0
    data = json.loads(_status(cli, tree, "--json"))
    times = _times(data)
    keys = {k for k, _ in times}
    assert {"expires", "updated", "last_checkpoint", "last_pass", "finished", "probed"} <= keys
    assert not [k for k in keys if k.endswith("_ns")], keys
    bad = [(k, v) for k, v in times if not (isinstance(v, str) and ISO.match(v))]
    assert not bad, bad
