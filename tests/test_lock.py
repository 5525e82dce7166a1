"""One checkpoint or restore at a time per state_dir: timers skip, people wait."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import CliRunner, Tree

HOLD = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()  # hold the lock until the test says so
"""


def test_periodic_checkpoint_skips_while_another_run_holds_the_lock_and_manual_one_waits(
    tree: Tree, cli: CliRunner
) -> None:
    tree.write("codex-home/a.json", "a")
    tree.state.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tree.state / "lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline() == "locked\n"
        out = cli("checkpoint", "--no-wait", check=0)
        assert "skipped" in out.stdout
        assert not (tree.data / "state/codex/a.json").exists()
        waiting = subprocess.Popen(
            [sys.executable, "-m", "syncengine", "checkpoint"],
            env=tree.env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            waiting.wait(timeout=0.5)  # it must still be waiting for the lock
            raise AssertionError("a manual checkpoint did not wait for the lock")
        except subprocess.TimeoutExpired:
            pass
        holder.stdin.write("release\n")
        holder.stdin.flush()
        out_text, _ = waiting.communicate(timeout=60)
        assert waiting.returncode == 0 and "codex: published 1 file(s)" in out_text
    finally:
        holder.stdin.close()
        holder.wait()
        holder.stdout.close()
