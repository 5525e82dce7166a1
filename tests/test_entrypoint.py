"""examples/entrypoint.sh, the one-line entrypoint docs/MIGRATING.md "Switching from
agent-state.sh" gives, run as a shell script against local directories with a fake server.

It must do what the design's entrypoint did: migrate the old layout, restore before
the server starts, checkpoint while it runs, and on SIGTERM forward the signal and take
the final checkpoint.  Synchronisation is by lines on the script's stdout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import REPO, Tree
from tests.test_supervisor import Lines

SCRIPT = REPO / "examples" / "entrypoint.sh"
ROLLOUT = "sessions/2026/12/01/rollout-1.jsonl"

SERVER = r"""
import os, signal, sys
home = os.environ["CODEX_HOME"]
restored = open(os.path.join(home, "history.jsonl")).read()
os.makedirs(os.path.dirname(os.path.join(home, sys.argv[1])), exist_ok=True)
rollout = open(os.path.join(home, sys.argv[1]), "a")
rollout.write('{"turn": 1}\n')
rollout.flush()
def stop(signum, frame):
    rollout.write('{"turn": "cut short by SIGTERM"')  # written after the signal
    rollout.close()
    print("stopping", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", restored.strip(), flush=True)
while True:
    signal.pause()
"""


@pytest.mark.dir_only("the example is tested against local directories, as in CI")
def test_the_entrypoint_example_migrates_restores_runs_and_takes_the_final_checkpoint(
    tree: Tree,
) -> None:
    shim = tree.base / "bin"
    shim.mkdir()
    (shim / "syncengine").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m syncengine "$@"\n')
    (shim / "syncengine").chmod(0o755)
    home, live, durable = tree.base / "home", tree.base / "srv", tree.data / "state"
    env = tree.env(
        PATH=f"{shim}{os.pathsep}{os.environ['PATH']}",
        HOME=str(home),
        CODEX_HOME=str(live / "codex"),
        CODEX_DURABLE=str(durable / "codex"),
        HERMES_LIVE=str(live / "hermes"),
        AGENT_STATE_CHECKPOINT_SECONDS="0.2",
    )
    # the old layout: a checkpoint of the old script, and Hermes's home on the bucket
    (durable / "codex").mkdir(parents=True)
    (durable / "codex/history.jsonl").write_text('{"restored": true}\n')
    (home / ".hermes").mkdir(parents=True)
    (home / ".hermes/config.yaml").write_text("model: m\n")
    (shim / "server.py").write_text(SERVER)
    proc = subprocess.Popen(
        [str(SCRIPT), sys.executable, str(shim / "server.py"), ROLLOUT],
        env=env,
        cwd=tree.base,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out = Lines(proc.stdout)
        ready = out.wait_for(lambda line: line.startswith("ready"))
        assert out.lines[ready] == 'ready {"restored": true}', "restored before the server"
        assert any(
            line.startswith("done: copy") and ".hermes" in line for line in out.lines[:ready]
        ), "migrated first"
        proc.send_signal(signal.SIGTERM)  # what the container runtime sends
        out.wait_for(lambda line: line == "stopping", start=ready)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()
    written = (live / "codex" / ROLLOUT).read_bytes()
    assert written.endswith(b'"cut short by SIGTERM"'), written
    # the final checkpoint has it to the last byte, whole at its plain path too
    assert (durable / "codex" / ROLLOUT).read_bytes() == written
    fresh = tree.base / "fresh"
    subprocess.run(
        [str(shim / "syncengine"), "restore", "codex"],
        check=True,
        cwd=tree.base,
        env={**env, "CODEX_HOME": str(fresh), "AM_LOCAL": str(tree.base / "l2")},
        capture_output=True,
    )
    assert (fresh / ROLLOUT).read_bytes() == written
    assert os.readlink(home / ".hermes") == str(live / "hermes")
    assert (live / "hermes/config.yaml").read_text() == "model: m\n"


def test_the_migration_page_gives_the_tested_line() -> None:
    line = 'syncengine migrate && exec syncengine run -- "$@"'
    assert line in SCRIPT.read_text().splitlines()
    page = (REPO / "docs/MIGRATING.md").read_text()
    assert line in page
    assert (
        'ENTRYPOINT ["/bin/sh", "-c", "syncengine migrate && exec syncengine run -- '
        '\\"$@\\"", "entrypoint"]'
    ) in page
