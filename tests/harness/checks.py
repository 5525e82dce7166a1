"""What a user sees of a harness beyond the resumed turn, read through the harness itself.

Codex: the session list (thread ids, names, goals) through ``codex app-server``
(JSON-RPC on stdio: ``thread/name/set``, ``thread/goal/set``, ``thread/list``,
``thread/goal/get``), the same data its pickers show.  opencode: each per-project
snapshot repository under ``snapshot/`` is a git repository (``git rev-parse``),
or opencode's undo/diff tracking is silently gone.  A fake login's token: in no
file of the durable root (sealed with the lab's key), back byte for byte after restore.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.harness import proctree
from tests.harness.lab import SYNCENGINE_TIMEOUT, Lab, Life


class AppServer:
    """A `codex app-server` on stdio, answering one request at a time."""

    def __init__(self, lab: Lab, life: Life) -> None:
        self.lab = lab
        self.proc = subprocess.Popen(
            [str(lab.installed.exe), "app-server"],
            cwd=lab.work,
            env=lab.env(life),
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.n = 0
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, name="codex-app-server", daemon=True)
        self.reader.start()
        self.call("initialize", {"clientInfo": {"name": "syncengine-tests", "version": "1"}})
        self._send({"jsonrpc": "2.0", "method": "initialized"})

    def _send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def call(self, method: str, params: dict[str, Any]) -> Any:
        """Send one request; its result (notifications in between are skipped)."""
        self.n += 1
        self._send({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params})
        deadline = time.monotonic() + SYNCENGINE_TIMEOUT
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"codex app-server: no answer to {method}") from None
            if line is None:
                raise AssertionError(f"codex app-server exited during {method}")
            msg = json.loads(line)
            if msg.get("id") == self.n and "method" not in msg:
                if "error" in msg:
                    raise AssertionError(f"codex app-server {method}: {msg['error']}")
                return msg.get("result")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # end of input: it exits
        try:
            self.proc.wait(timeout=SYNCENGINE_TIMEOUT)
        except subprocess.TimeoutExpired:
            proctree.kill_tree(self.proc.pid, self.lab.marker)
            self.proc.wait()
        self.reader.join(timeout=SYNCENGINE_TIMEOUT)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


SOURCES = ["cli", "vscode", "exec", "appServer"]


def codex_threads(lab: Lab, life: Life) -> dict[str, dict[str, Any]]:
    """Codex's session list: per thread id, its name, goal and preview."""
    server = AppServer(lab, life)
    try:
        listed = server.call("thread/list", {"sourceKinds": SOURCES})["data"]
        out = {}
        for t in listed:
            goal = (server.call("thread/goal/get", {"threadId": t["id"]}) or {}).get("goal")
            out[t["id"]] = {
                "name": t.get("name"),
                "preview": t.get("preview"),
                "goal": (goal or {}).get("objective"),
            }
        return out
    finally:
        server.close()


def codex_name_threads(lab: Lab, life: Life) -> None:
    """Give every thread a name and a goal, as a user does in Codex's UI."""
    server = AppServer(lab, life)
    try:
        for i, t in enumerate(server.call("thread/list", {"sourceKinds": SOURCES})["data"]):
            server.call("thread/name/set", {"threadId": t["id"], "name": f"thread {i} named"})
            server.call("thread/goal/set", {"threadId": t["id"], "objective": f"goal {i}"})
    finally:
        server.close()


def opencode_repos(lab: Lab, life: Life) -> list[str]:
    """Problems: snapshot repositories git does not recognise as repositories."""
    snap = lab.profile.live_dir(life.where) / "snapshot"
    problems = []
    repos = [p for p in snap.glob("*/*") if p.is_dir()] if snap.is_dir() else []
    if not repos:
        problems.append(f"no opencode snapshot repository under {snap}")
    for repo in repos:
        done = _git_dir(repo)
        if done.returncode != 0:
            problems.append(
                f"opencode snapshot repository {repo.relative_to(snap.parent)} "
                f"is not a git repository after restore: {done.stderr.strip()}"
            )
    return problems


def _git_dir(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", f"--git-dir={repo}", "rev-parse", "--git-dir"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def token_hits(lab: Lab, token: str) -> list[str]:
    """Every file under the durable root whose bytes hold `token` (a secret in the clear)."""
    needle = token.encode()
    return [
        f"the durable root holds the login token {token} in the clear: {p.relative_to(lab.durable)}"
        for p in sorted(lab.durable.rglob("*"))
        if p.is_file() and not p.is_symlink() and needle in p.read_bytes()
    ]


def login_restored(lab: Lab, life: Life, rel: str, written: bytes) -> list[str]:
    """The fake login's credential file is back in `life` byte for byte."""
    path = lab.profile.live_dir(life.where) / rel
    if not path.is_file():
        return [f"life {life.n}: the credential file {rel} did not come back"]
    if path.read_bytes() != written:
        return [f"life {life.n}: the credential file {rel} came back with other bytes"]
    return []
