"""What the command says, run as a user runs it: a real process, a real pipe, a real signal.

Each test drives ``python -m syncengine`` as a child process (issue 28, "say what it is
doing"): a reader that closes the pipe early, Ctrl-C in the middle of a checkpoint, a
restore over an identical tree, adapters with no live tree, ``run``'s own lines.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys

import pytest

from tests.conftest import CliRunner, Tree
from tests.helpers import files
from tests.readgate import ReadGate

CODEX = "codex-home"


def _many(tree: Tree, count: int) -> list[str]:
    names = [f"sessions/s{i:05d}.json" for i in range(count)]
    for name in names:
        tree.write(f"{CODEX}/{name}", name)
    return names


def _first_line_then_close(tree: Tree, *args: str) -> tuple[str, subprocess.CompletedProcess[str]]:
    """``syncengine ARGS | head -1``: read one line, close the pipe, let it finish."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "syncengine", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=tree.env(),
        cwd=tree.base,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader is gone: the writer's next write gets EPIPE
    with proc.stderr:
        err = proc.stderr.read()
    code = proc.wait(timeout=120)
    return first, subprocess.CompletedProcess(proc.args, code, "", err)


@pytest.mark.dir_only("what the command prints: no store is involved in a closed pipe")
def test_a_reader_that_stops_early_is_not_an_error(tree: Tree, cli: CliRunner) -> None:
    """Fails (traceback, or "Broken pipe ... check the local disk" and exit 1) when a
    closed stdout is treated as a failure.  The output (well over a pipe's 64 KiB) cannot
    all be written before the reader closes, so the write after it does fail."""
    names = _many(tree, 3000)
    cli("checkpoint", "codex", check=0)
    (tree.local / CODEX / "sessions").rename(tree.base / "gone")  # restore has work to list
    first, done = _first_line_then_close(tree, "restore", "--dry-run", "codex")
    assert first.startswith("codex:")
    assert (done.returncode, done.stderr) == (0, "")
    first, done = _first_line_then_close(tree, "explain", "codex", *names)
    assert first.startswith("codex:")
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.dir_only("the signal handling of the command, not a store")
def test_ctrl_c_in_a_checkpoint_is_one_line_exit_130_and_the_next_one_completes(
    tree: Tree, cli: CliRunner
) -> None:
    """SIGINT while the checkpoint is held on a read in the middle of the tree (a read gate,
    no timing).  Fails with a KeyboardInterrupt traceback (exit 1) without the handling;
    the next checkpoint and a restore into an empty root show the state intact."""
    names = _many(tree, 2000)
    held = tree.local / CODEX / names[1000]
    try:
        gate = ReadGate(held)
    except OSError as exc:
        pytest.skip(f"fanotify permission events unavailable: {exc}")
    with gate:
        proc = subprocess.Popen(
            [sys.executable, "-m", "syncengine", "checkpoint", "codex"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=tree.env(),
            cwd=tree.base,
        )
        pidfd = os.pidfd_open(proc.pid)
        try:
            reads = gate.wait(120, pidfd)
            assert reads, "the checkpoint ended before it read the gated file"
            proc.send_signal(signal.SIGINT)  # pending until the read is allowed
        finally:
            os.close(pidfd)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "checkpoint interrupted" in err
    cli("checkpoint", "codex", check=0)
    fresh = tree.base / "fresh"
    cli("restore", "codex", env=tree.env(AM_LOCAL=str(fresh)), check=0)
    assert files(fresh / CODEX) == files(tree.local / CODEX)


@pytest.mark.dir_only("counting what restore found: the same on every store")
def test_restore_over_an_identical_tree_counts_it_unchanged(tree: Tree, cli: CliRunner) -> None:
    """Fails with "0 unchanged, 20 newer local kept" when identical counts as newer."""
    _many(tree, 20)
    cli("checkpoint", "codex", check=0)
    out = cli("restore", "codex", check=0)
    assert "codex: restored 0 file(s), 0 bytes, 20 unchanged, 0 newer local kept" in out.stdout


@pytest.mark.dir_only("what is printed for adapters without a live tree")
def test_adapters_without_a_live_tree_are_one_quiet_line(tree: Tree, cli: CliRunner) -> None:
    """Fails when each of them prints "published 0 file(s)"."""
    tree.write(f"{CODEX}/a.json", "a")
    out = cli("checkpoint", check=0)
    assert out.stdout.splitlines()[0].startswith("codex: published 1 file(s)")
    assert out.stdout.splitlines()[1].startswith("no live tree yet (nothing to checkpoint): ")
    assert "claude" in out.stdout.splitlines()[1]
    assert len(out.stdout.splitlines()) == 2 and "published 0" not in out.stdout
    assert cli("checkpoint", "-q", check=0).stdout == ""


@pytest.mark.dir_only("what run prints, not how a store is written")
def test_run_says_what_it_restored_and_that_the_final_checkpoint_is_durable(
    tree: Tree, cli: CliRunner
) -> None:
    """Fails when `run` is silent without -v (the lines were debug/info logs only)."""
    _many(tree, 3)
    cli("checkpoint", "codex", check=0)
    new = tree.local / CODEX / "new.json"
    out = cli("run", "--", sys.executable, "-c", f"open({str(new)!r}, 'w').write('n')", check=0)
    lines = out.stderr.splitlines()
    assert lines[0].startswith("syncengine run: restored 0 file(s), 0 bytes, 3 unchanged"), lines
    assert lines[1] == "syncengine run: final checkpoint: published 1 file(s), 1 bytes; all durable"
    assert len(lines) == 2
    assert cli("run", "-q", "--", "true", check=0).stderr == ""


@pytest.mark.dir_only("what a final checkpoint prints")
def test_a_final_checkpoint_counts_the_plain_copies_it_writes(tree: Tree, cli: CliRunner) -> None:
    """Fails with "final checkpoint: published 0 file(s), 27 bytes" (the bytes of plain
    copies of logs, counted nowhere else)."""
    for i in range(3):
        tree.write(f"{CODEX}/sessions/rollout-{i}.jsonl", f'{{"n": {i}}}\n')
    cli("checkpoint", "codex", check=0)
    for i in range(3):  # restored: each log's plain copy is behind its chain
        (tree.local / CODEX / f"sessions/rollout-{i}.jsonl").unlink()
    cli("restore", "codex", check=0)
    out = cli("run", "--", "true", check=0)
    assert "final checkpoint: published 0 file(s) and 3 plain log copies, 27 bytes;" in out.stderr
    with open(tree.local / CODEX / "sessions/rollout-0.jsonl", "a") as log:
        log.write('{"n": 9}\n')
    out = cli("checkpoint", "--final", "codex", check=0)
    assert out.stdout.startswith("codex: published 1 file(s) and 1 plain log copy, "), out


@pytest.mark.dir_only("argument errors: nothing is run")
@pytest.mark.parametrize(
    "args",
    [
        ("run", "--interval", "abc", "--", "true"),
        ("checkpoint", "--jobs", "many"),
        ("--jobs", "1.5", "status"),
    ],
)
def test_every_numeric_option_says_what_it_wants(
    tree: Tree, cli: CliRunner, args: tuple[str, ...]
) -> None:
    """Fails with argparse's raw "invalid float value: 'abc'"."""
    out = cli(*args, check=2)
    assert "is not a number: " in out.stderr and "invalid" not in out.stderr, out.stderr


@pytest.mark.dir_only("which entries a sample picks: the same on every store")
def test_verify_at_its_default_sample_reads_at_least_one_file_back(
    tree: Tree, cli: CliRunner
) -> None:
    """Three files, none of them in the 10% the hash picks for manifest seq 1 (asserted
    first): fails with "0 read back" when a sample can be empty."""
    from syncengine.ops.verify import sampled

    names = [f"f{i}.json" for i in range(1, 4)]
    assert not any(sampled(n, 1, 10) for n in names)
    for name in names:
        tree.write(f"{CODEX}/{name}", name)
    cli("checkpoint", "codex", check=0)
    out = cli("verify", "codex", check=0)
    assert "codex: manifest seq 1, 3 entries, 3 checked, 1 read back" in out.stdout, out.stdout
    assert cli("-q", "verify", check=0).stdout == "", "-q: only what is wrong"
    (tree.data / "state/codex/f2.json").write_text("damaged")
    out = cli("verify", "-q", "--sample", "100", check=1)
    assert out.stdout.splitlines()[-1] == "verify: PROBLEMS FOUND", out.stdout
    assert [line.split(":")[0] for line in out.stdout.splitlines()[:-1]] == ["PROBLEM codex"]


@pytest.mark.dir_only("reading the live file: no store is involved")
def test_a_plain_file_at_a_database_path_is_named_as_such(tree: Tree, cli: CliRunner) -> None:
    """Fails with "cannot read the database: not an error" (the backup's destination's
    message, and a result code the extended table does not hold)."""
    tree.write(f"{CODEX}/memories_1.sqlite", "hello, not a database\n" * 10)
    out = cli("checkpoint", "codex", check=1)
    assert "memories_1.sqlite" in out.stderr and "not a SQLite database" in out.stderr
    assert "not an error" not in out.stderr, out.stderr
    # nothing was ever published for it: it must not claim a previous snapshot is kept
    assert "no snapshot yet" in out.stderr and "previous snapshot" not in out.stderr
    db = tree.local / CODEX / "memories_2.sqlite"
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("CREATE TABLE t (x)")
    cli("checkpoint", "codex", check=1)  # memories_1 still fails; memories_2 is published
    db.write_text("overwritten\n" * 100)
    out = cli("checkpoint", "codex", check=1)
    said = [line for line in out.stderr.splitlines() if "memories_2" in line]
    assert said and all("the previous snapshot is kept" in line for line in said), out.stderr
