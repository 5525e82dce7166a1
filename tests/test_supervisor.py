"""`syncengine run`: restore gate, signals, exit status, crash loss window, PID 1 reaping.

Every test runs the real command in a child process and talks to it with
signals; synchronisation is by lines (the child's "ready" on stdout, the
supervisor's log lines on stderr), never by sleeping.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import pytest

from tests.conftest import Tree

CONFIG = """\
adapters = []
[[adapter]]
name = "x"
live = "x"
durable = "state/x"
"""


class Lines:
    """Read a pipe line by line with a deadline (no reader thread, no sleeps)."""

    def __init__(self, stream: object) -> None:
        self.fd = stream.fileno()  # type: ignore[attr-defined]
        os.set_blocking(self.fd, False)
        self.buf = b""
        self.lines: list[str] = []

    def _fill(self, deadline: float) -> bool:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        ready, _, _ = select.select([self.fd], [], [], remaining)
        if not ready:
            return False
        data = os.read(self.fd, 65536)
        if not data:
            return False
        self.buf += data
        *done, self.buf = self.buf.split(b"\n")
        self.lines.extend(d.decode() for d in done)
        return True

    def wait_for(self, pred: Callable[[str], bool], timeout: float = 30, start: int = 0) -> int:
        """Index of the first line from `start` on that matches (reading more as needed)."""
        deadline = time.monotonic() + timeout
        i = start
        while True:
            while i < len(self.lines):
                if pred(self.lines[i]):
                    return i
                i += 1
            if not self._fill(deadline):
                raise AssertionError(f"line not seen in {timeout}s; got:\n" + "\n".join(self.lines))

    def rest(self, timeout: float = 30) -> list[str]:
        deadline = time.monotonic() + timeout
        while self._fill(deadline):
            pass
        if self.buf:
            self.lines.append(self.buf.decode())
            self.buf = b""
        return self.lines


def run_cmd(
    tree: Tree,
    child: str,
    *run_args: str,
    new_session: bool = False,
    prefix: tuple[str, ...] = (),
    log_json: bool = False,
    config: str = CONFIG,
) -> subprocess.Popen[bytes]:
    cfg = tree.base / "cfg.toml"
    cfg.write_text(config)
    (tree.local / "x").mkdir(exist_ok=True)
    argv = [
        *prefix,
        sys.executable,
        "-m",
        "syncengine",
        "--config",
        str(cfg),
        "-v",
        *(["--log-json"] if log_json else []),
        "run",
        *run_args,
        "--",
        sys.executable,
        "-c",
        textwrap.dedent(child),
    ]
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=tree.env(),
        cwd=tree.base,
        start_new_session=new_session,
    )


def finish(
    proc: subprocess.Popen[bytes], reader: Lines | None = None, timeout: float = 60
) -> tuple[int, list[str]]:
    assert proc.stderr is not None and proc.stdout is not None
    err = (reader or Lines(proc.stderr)).rest(timeout)
    rc = proc.wait(timeout)
    proc.stdout.close()
    proc.stderr.close()
    return rc, err


HANDLER_CHILD = """\
import os, signal, sys
path = os.path.join(os.environ["AM_LOCAL"], "x", "transcript.jsonl")
f = open(path, "a")
def bye(signum, frame):
    f.write('{"last": "goodbye"}\\n'); f.flush(); f.close()
    sys.exit(7)
signal.signal(signal.SIGTERM, bye)
f.write('{"first": 1}\\n'); f.flush()
print("ready", flush=True)
while True:
    signal.pause()
"""


def test_sigterm_reaches_child_and_its_last_line_is_durable(tree: Tree) -> None:
    proc = run_cmd(tree, HANDLER_CHILD, "--interval", "30")
    assert proc.stdout is not None
    Lines(proc.stdout).wait_for(lambda line: line == "ready")
    proc.send_signal(signal.SIGTERM)
    rc, err = finish(proc)
    assert rc == 7, "\n".join(err)
    durable = (tree.data / "state/x/transcript.jsonl").read_text()
    assert durable.endswith('{"last": "goodbye"}\n'), durable
    assert any("run.signal sig=SIGTERM" in line for line in err)


def test_child_killed_by_signal_exits_128_plus_signum(tree: Tree) -> None:
    child = 'print("ready", flush=True)\nimport time\ntime.sleep(60)\n'
    proc = run_cmd(tree, child, "--interval", "30")
    assert proc.stdout is not None
    Lines(proc.stdout).wait_for(lambda line: line == "ready")
    proc.send_signal(signal.SIGINT)
    rc, err = finish(proc)
    assert rc == 128 + signal.SIGINT, "\n".join(err)


def test_a_signal_that_lands_while_the_child_starts_still_reaches_it() -> None:
    """The child can print "ready" before `Popen` returns in `run`: a signal sent then
    finds no child to forward to (CI saw the child killed after the stop timeout).  The
    wait loop must forward it once the child is known."""
    from types import SimpleNamespace

    from syncengine.daemon.supervisor import Supervisor

    runner = SimpleNamespace(on_lease_lost=None, on_background_end=None)
    sup = Supervisor(runner, [])  # type: ignore[arg-type]
    old = sup._install()
    try:
        sup._on_signal(signal.SIGINT, None)  # recorded: no child yet
        sup.child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        sup._wait_child(time.monotonic() + 30)
        if sup.status is None:
            sup.child.kill()
            sup.child.wait()
    finally:
        sup._uninstall(old)
    assert sup.status == -signal.SIGINT


def test_child_exit_status_and_final_checkpoint(tree: Tree) -> None:
    child = """\
    import os
    p = os.path.join(os.environ["AM_LOCAL"], "x", "out.txt")
    open(p, "w").write("written just before exit\\n")
    raise SystemExit(5)
    """
    rc, err = finish(run_cmd(tree, child, "--interval", "30"))
    assert rc == 5, "\n".join(err)
    assert (tree.data / "state/x/out.txt").read_text() == "written just before exit\n"


def test_stubborn_child_is_killed_after_stop_timeout_and_checkpointed_again(tree: Tree) -> None:
    child = """\
    import os, signal, time
    p = os.path.join(os.environ["AM_LOCAL"], "x", "late.txt")
    def later(signum, frame):
        open(p, "w").write("after the final checkpoint\\n")
        print("ignored", flush=True)
    signal.signal(signal.SIGTERM, later)
    print("ready", flush=True)
    while True:
        time.sleep(60)
    """
    proc = run_cmd(tree, child, "--interval", "30", "--grace", "0.2", "--stop-timeout", "1")
    assert proc.stdout is not None
    out = Lines(proc.stdout)
    out.wait_for(lambda line: line == "ready")
    proc.send_signal(signal.SIGTERM)
    rc, err = finish(proc)
    assert rc == 128 + signal.SIGKILL, "\n".join(err)
    assert any("run.kill" in line for line in err)
    assert (tree.data / "state/x/late.txt").read_text() == "after the final checkpoint\n"


def test_incomplete_restore_refuses_to_start_the_child(tree: Tree) -> None:
    mdir = tree.data / "state/x/.syncengine/manifest"
    mdir.mkdir(parents=True)
    (tree.data / "state/x/ok.txt").write_text("ok")
    header = {"syncengine_manifest": 1, "adapter": "x", "seq": 1, "type": "base", "created_ns": 1}
    good = {"path": "ok.txt", "kind": "file", "mtime_ns": 1, "size": 2, "mode": 420}
    bad = {"path": "../escape.txt", "kind": "file", "mtime_ns": 1, "size": 2, "mode": 420}
    (mdir / "000000000001.base.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in (header, good, bad, {"end": 2}))
    )
    marker = tree.base / "child-started"
    child = f"open({str(marker)!r}, 'w').close()"
    rc, err = finish(run_cmd(tree, child))
    text = "\n".join(err)
    assert rc == 1, text
    assert not marker.exists()
    assert "restore incomplete" in text and "../escape.txt" in text
    assert "not starting" in text


def test_final_checkpoint_incomplete_exits_75_when_the_child_succeeded(tree: Tree) -> None:
    """An operator sees an incomplete final checkpoint in the exit status, not only in logs."""
    from tests.test_notices import lock
    from tests.test_sqlite import make_db

    db = tree.local / "x" / "cache.db"  # unlisted: found by its header, snapshotted
    make_db(db, 2, mode="delete")
    cfg = tree.base / "cfg.toml"
    cfg.write_text("sqlite_busy_timeout = 0.2\n" + CONFIG)

    def run(code: int) -> tuple[int, str]:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "syncengine",
                "--config",
                str(cfg),
                "run",
                "--interval",
                "30",
                "--",
                sys.executable,
                "-c",
                f"raise SystemExit({code})",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=tree.env(),
            cwd=tree.base,
        )
        rc, err = finish(proc)
        return rc, "\n".join(err)

    locker = lock(str(db))  # held across the final checkpoint: it cannot complete
    try:
        rc, err = run(0)
        assert rc == 75, err
        assert "cache.db" in err and "locked" in err and "run.exit status=75" in err
        daemon = json.loads((tree.state / "daemon.json").read_text())
        assert daemon["final_ok"] is False
        status = subprocess.run(
            [sys.executable, "-m", "syncengine", "--config", str(cfg), "status"],
            capture_output=True,
            text=True,
            env=tree.env(),
            cwd=tree.base,
            timeout=60,
        )
        assert "FINAL CHECKPOINT INCOMPLETE" in status.stdout, status.stdout
        rc, err = run(3)  # a failing child's own status wins
        assert rc == 3, err
    finally:
        locker.stop("go")
    rc, err = run(0)
    assert rc == 0, err
    assert json.loads((tree.state / "daemon.json").read_text())["final_ok"] is True


# Appends numbered lines; after each write has returned, says so on stdout with the time.
WRITER = """\
import os, time
p = os.path.join(os.environ["AM_LOCAL"], "x", "log.txt")
with open(p, "a") as f:
    print("ready", flush=True)
    n = 0
    while True:
        n += 1
        f.write(f"{n}\\n"); f.flush()
        print(n, time.time(), flush=True)
        time.sleep(0.005)
"""


@pytest.mark.parametrize("watch", [True, False], ids=["events", "scanning"])
def test_sigkill_of_the_group_loses_only_what_the_last_pass_could_not_see(
    tree: Tree, watch: bool
) -> None:
    """Killed with its whole group, `run` has kept every line written before the last
    completed pass that copied the log started: the loss window is that pass, however
    long a loaded machine makes it (no bound in seconds)."""
    args = ["--interval", "0.5"] + ([] if watch else ["--no-watch"])
    proc = run_cmd(tree, WRITER, *args, new_session=True, log_json=True)
    assert proc.stderr is not None and proc.stdout is not None
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    out.wait_for(lambda line: line == "ready")
    i = err.wait_for(lambda line: "pass-end kind=timer files=1" in line)
    last = err.wait_for(lambda line: "pass-end kind=timer files=1" in line, start=i + 1)
    os.killpg(proc.pid, signal.SIGKILL)
    written = {int(n): float(t) for n, t in (line.split() for line in out.rest()[1:] if line)}
    rc, lines = finish(proc, err)
    assert rc == -signal.SIGKILL
    start = max(k for k in range(last) if "runner.pass-start" in lines[k])
    started = json.loads(lines[start])["ts"]  # logged before that pass looked at anything
    durable = [int(n) for n in (tree.data / "state/x/log.txt").read_text().splitlines()]
    assert durable == list(range(1, len(durable) + 1)), "not a prefix of what was written"
    seen = max(n for n, t in written.items() if t < started)
    assert durable[-1] >= seen, f"line {seen} was written before the last pass started"


def test_timer_checkpoint_running_at_shutdown_is_waited_for(tree: Tree) -> None:
    """A timer pass held up by a locked database when SIGTERM arrives: `run` lets it
    finish, then takes the final pass.  The test holds the lock until the signal is
    logged, so the pass is still running then however loaded the machine is."""
    child = 'print("ready", flush=True)\nimport time\ntime.sleep(60)\n'
    config = CONFIG.replace("adapters = []", "adapters = []\nsqlite_busy_timeout = 120")
    config += 'sqlite = ["app.db"]\n'
    # scanning: the first pass that starts after the rename below walks into the database
    proc = run_cmd(tree, child, "--interval", "0.2", "--no-watch", log_json=True, config=config)
    assert proc.stderr is not None and proc.stdout is not None
    Lines(proc.stdout).wait_for(lambda line: line == "ready")
    err = Lines(proc.stderr)
    err.wait_for(lambda line: "pass-end kind=timer" in line)
    staged = tree.base / "app.db"  # made and locked outside the tree, then renamed in
    con = sqlite3.connect(staged, isolation_level=None)
    try:
        con.execute("CREATE TABLE t(v TEXT)")
        con.execute("BEGIN EXCLUSIVE")  # readers wait in SQLite's busy handler
        con.execute("INSERT INTO t VALUES ('x')")
        staged.rename(tree.local / "x/app.db")
        written = time.time()
        start = err.wait_for(
            lambda line: "pass-start kind=timer" in line and json.loads(line)["ts"] > written
        )
        proc.send_signal(signal.SIGTERM)
        err.wait_for(lambda line: "run.signal" in line, start=start)
        con.execute("COMMIT")
    finally:
        con.close()
    rc, lines = finish(proc, err)
    assert rc == 128 + signal.SIGTERM
    events = [json.loads(line) for line in lines[start:]]

    def index(event: str, text: str = "") -> int:
        return next(i for i, e in enumerate(events) if e["event"] == event and text in e["msg"])

    got_signal = index("run.signal")
    timer_end = index("runner.pass-end", "kind=timer")
    final_start = index("runner.pass-start", "kind=final")
    final_end = index("runner.pass-end", "kind=final")
    assert got_signal < timer_end < final_start, lines[start:]
    assert "files=1 " in events[timer_end]["msg"], events[timer_end]
    assert "busy=False" in events[final_end]["msg"]
    assert (tree.backing / "state/x/checkpoints/app.db").exists()


@pytest.mark.skipif(
    shutil.which("unshare") is None or os.geteuid() != 0,
    reason="needs unshare and root for a PID namespace",
)
def test_reaps_orphans_as_pid_1(tree: Tree) -> None:
    child = """\
    import os, sys, time
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                      # its child becomes an orphan, then exits
        gpid = os.fork()
        if gpid == 0:
            os._exit(0)
        os.write(w, str(gpid).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    gpid = int(os.read(r, 100))
    def state(p):
        try:
            return open(f"/proc/{p}/stat").read().split(") ")[1][0]
        except (FileNotFoundError, ProcessLookupError):  # ESRCH: reaped while we read
            return "gone"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:   # a zombie until PID 1 reaps it
        if state(gpid) == "gone":
            sys.exit(0)
        time.sleep(0.05)
    sys.exit(3)
    """
    proc = run_cmd(tree, child, prefix=("unshare", "--pid", "--fork", "--mount-proc"))
    rc, err = finish(proc)
    if rc != 0 and any("unshare:" in line for line in err):
        pytest.skip("PID namespaces unavailable: " + err[0])
    assert rc == 0, "\n".join(err)
