"""A container's lives, as an operator runs them: the real ``syncengine`` CLI and a harness.

Owns the directories and environment of one test: a durable root shared by
every life (``DATA_DIR``), and per life a fresh local root (``AM_LOCAL``; its
default state dir inside it), ``$HOME`` and ``$TMPDIR``: a container restart
is a new life.  Every subprocess is bounded by a timeout, starts in a session
of its own, and carries a marker variable so `proctree` finds all of it.  The
environment is built from nothing but what the suite sets (no API key or
proxy setting of the machine leaks in); proxy variables and npm's registry
point at the fake server, so a harness that tries another host reaches
127.0.0.1 and is refused there.

The syncengine commands carry a key (``SYNCENGINE_KEY_FILE``, a file made with
``syncengine keygen`` outside the durable root), so the secret files a fake
login writes (`fake_login`, profiles.LOGINS) are sealed in the durable root.

What each command printed is kept in `transcript`, which a failing test prints
with the model server's request log.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import attrs

from tests.harness import proctree
from tests.harness.fakemodel import FakeModel, Request, new_token
from tests.harness.install import Installed
from tests.harness.profiles import LOGINS, Profile, Where

TURN_TIMEOUT = 300.0  # one harness turn (OpenClaw takes ~20-60 s on a loaded 2-core box)
SYNCENGINE_TIMEOUT = 180.0
# The operator's syncengine.toml (SYNCENGINE_CONFIG) for every life: a lease of 10 s
# instead of 60, so the life after a SIGKILLed one waits at most 10 s for the dead
# holder's lease to expire (the same wait, shorter) instead of a minute per harness.
SYNCENGINE_TOML = "lease_seconds = 10\n"


@attrs.frozen
class Turn:
    """One turn: its prompt token and the model requests it made (with their replies)."""

    prompt: str
    requests: tuple[Request, ...]
    returncode: int | None

    @property
    def replies(self) -> list[str]:
        return [r.reply for r in self.requests if r.reply]


@attrs.frozen
class Pending:
    """A turn in flight."""

    prompt: str
    mark: int  # requests the server had received before it
    proc: subprocess.Popen[str]
    what: str


@attrs.define
class Life:
    """One container life: its own local root, home and temp directory."""

    n: int
    root: Path
    where: Where

    @property
    def local(self) -> Path:
        return self.where.local


@attrs.define
class Lab:
    """One test's world: a harness, the fake server, a durable root, successive lives."""

    base: Path
    profile: Profile
    installed: Installed
    server: FakeModel
    marker: str = attrs.field(factory=lambda: uuid.uuid4().hex)
    lives: list[Life] = attrs.field(factory=list)
    transcript: list[str] = attrs.field(factory=list)
    pending: list[subprocess.Popen[str]] = attrs.field(factory=list)

    @property
    def durable(self) -> Path:
        return self.base / "data"

    @property
    def work(self) -> Path:
        return self.base / "work"

    @property
    def life(self) -> Life:
        return self.lives[-1]

    def new_life(self) -> Life:
        """Start a container: a new empty local root and no state dir; same durable root."""
        n = len(self.lives) + 1
        root = self.base / f"life-{n}"
        where = Where(local=root / "local", home=root / "home", work=self.work, url=self.server.url)
        for d in (where.local, where.home, root / "tmp", self.durable, self.work):
            d.mkdir(parents=True, exist_ok=True)
        if not (self.work / ".git").exists():  # opencode keys a project by its git root
            _git(self.work, "init", "-q", ".")
            _git(
                self.work,
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "init",
            )
        life = Life(n, root, where)
        self.lives.append(life)
        self.note(f"--- container life {n}: AM_LOCAL={where.local}")
        return life

    def env(self, life: Life) -> dict[str, str]:
        w = life.where
        url = self.server.url
        env = {
            "PATH": self.installed.env_path(os.environ.get("PATH", "/usr/bin:/bin")),
            "HOME": str(w.home),
            "TMPDIR": str(life.root / "tmp"),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "NO_COLOR": "1",
            "CI": "1",
            "AM_LOCAL": str(w.local),
            "DATA_DIR": str(self.durable),
            "SYNCENGINE_CONFIG": str(self._syncengine_toml()),
            "SYNCENGINE_KEY_FILE": str(self._key_file()),
            proctree.MARKER: self.marker,
            # Anything that tries another host comes here and is refused (escapes()).
            "HTTP_PROXY": url,
            "HTTPS_PROXY": url,
            "ALL_PROXY": url,
            "http_proxy": url,
            "https_proxy": url,
            "all_proxy": url,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "NODE_USE_ENV_PROXY": "1",
            "npm_config_registry": f"{url}/npm/",
            "npm_config_update_notifier": "false",
            "PIP_INDEX_URL": f"{url}/pypi/simple/",
        }
        env.update(self.profile.env(w))
        return env

    def _syncengine_toml(self) -> Path:
        path = self.base / "syncengine.toml"
        if not path.exists():
            path.write_text(SYNCENGINE_TOML)
        return path

    def _key_file(self) -> Path:
        path = self.base / "syncengine.key"  # outside the durable root, like a secret mount
        if not path.exists():
            with open(path, "x", opener=lambda p, f: os.open(p, f, 0o600)) as out:
                argv = [sys.executable, "-m", "syncengine", "keygen"]
                subprocess.run(argv, stdout=out, check=True, timeout=SYNCENGINE_TIMEOUT)
        return path

    def fake_login(self, life: Life) -> tuple[str, str, bytes]:
        """Write the harness's credential file (profiles.LOGINS) with a new token:
        its path in the live tree, the token and the bytes written."""
        rel, text = LOGINS[self.profile.name]
        token = new_token("LOGIN-")
        path = self.profile.live_dir(life.where) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text(token))
        path.chmod(0o600)
        self.note(f"--- fake login: {rel} holds {token}")
        return rel, token, path.read_bytes()

    def note(self, text: str) -> None:
        self.transcript.append(text)

    def _record(self, what: str, done: subprocess.CompletedProcess[str]) -> None:
        self.note(
            f"$ {what}\n  exit {done.returncode}\n  stdout: {done.stdout[-3000:]}"
            f"\n  stderr: {done.stderr[-6000:]}"
        )

    def start(self, life: Life, argv: list[str], what: str) -> Pending:
        """Start a command in a session of its own, with this life's environment."""
        proc = subprocess.Popen(
            argv,
            cwd=self.work,
            env=self.env(life),
            text=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.pending.append(proc)
        return Pending("", len(self.server.requests), proc, what)

    def wait(self, pending: Pending, timeout: float) -> subprocess.CompletedProcess[str]:
        """Wait for a started command (killing its whole tree on timeout); record it."""
        proc = pending.proc
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proctree.kill_tree(proc.pid, self.marker)
            out, err = proc.communicate()
            err += f"\n[killed by the suite after {timeout} s]"
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        self._record(pending.what, done)
        return done

    def run(
        self, life: Life, argv: list[str], *, timeout: float, what: str = ""
    ) -> subprocess.CompletedProcess[str]:
        """Run a command to completion (killing its whole tree on timeout)."""
        return self.wait(self.start(life, argv, what or " ".join(argv)), timeout)

    def syncengine(self, life: Life, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "syncengine", *args]
        return self.run(life, argv, timeout=SYNCENGINE_TIMEOUT, what="syncengine " + " ".join(args))

    def harness_argv(self, life: Life, prompt: str, resume: bool) -> list[str]:
        self.profile.configure(life.where, first_life=life.n == 1)
        return [str(self.installed.exe), *self.profile.turn(prompt, resume)]

    def turn(self, life: Life, n: int, *, resume: bool, run: bool = False) -> Turn:
        """One harness turn with a fresh prompt token (under ``syncengine run`` with
        `run`); the model requests it made."""
        return self.finish(self.start_turn(life, n, resume=resume, run=run))

    def start_turn(self, life: Life, n: int, *, resume: bool, run: bool = False) -> Pending:
        prompt = new_token(f"P{n}-")
        argv = self.harness_argv(life, f"Remember {prompt}.", resume)
        if run:
            argv = [sys.executable, "-m", "syncengine", "run", "--interval", "5", "--", *argv]
        what = f"{self.profile.name} turn {n} ({prompt}){' under syncengine run' if run else ''}"
        return attrs.evolve(self.start(life, argv, what), prompt=prompt)

    def finish(self, pending: Pending, *, timeout: float = TURN_TIMEOUT) -> Turn:
        """Wait for a turn started with `start_turn`; the model requests it made."""
        done = self.wait(pending, timeout)
        return Turn(
            pending.prompt, tuple(self.server.model_requests(pending.mark)), done.returncode
        )

    def kill(self, pending: Pending) -> list[int]:
        """SIGKILL the turn's whole process tree, each process by pid; none survives."""
        killed = proctree.kill_tree(pending.proc.pid, self.marker)
        out, err = pending.proc.communicate()
        self._record(
            f"{pending.what} [SIGKILLed: pids {killed}]",
            subprocess.CompletedProcess(pending.proc.args, pending.proc.returncode, out, err),
        )
        return killed

    def stop_all(self) -> None:
        """Kill whatever a failed test left running (each process carries the marker)."""
        for proc in self.pending:
            if proc.poll() is None:
                proctree.kill_tree(proc.pid, self.marker)
                proc.communicate()

    def report(self) -> str:
        escapes = self.server.escapes()
        return (
            "\n".join(self.transcript)
            + "\n--- model server requests:\n"
            + self.server.log()
            + (f"\n--- refused requests for other hosts: {len(escapes)}" if escapes else "")
        )


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, timeout=60, capture_output=True)


def carries(turn: Turn, earlier: list[Turn]) -> str | None:
    """None when one request of `turn` carries its own prompt and every earlier turn's
    prompt and one of its replies; else what is missing."""
    best: list[str] | None = None
    for req in turn.requests:
        if turn.prompt not in req.raw:
            continue
        missing = [t.prompt for t in earlier if t.prompt not in req.raw]
        missing += [
            f"a reply of turn {t.prompt} ({', '.join(t.replies) or 'none'})"
            for t in earlier
            if not any(r in req.raw for r in t.replies)
        ]
        if not missing:
            return None
        if best is None or len(missing) < len(best):
            best = missing
    if best is None:
        return f"no model request of the turn carried its prompt {turn.prompt}"
    return "the resumed turn's request lacks " + "; ".join(best)


# -- the tree as it is on disk -------------------------------------------------


@attrs.frozen
class Node:
    kind: str  # file, dir, symlink, special
    mode: int
    digest: str  # content hash of a file, target of a link, "" otherwise


def tree(root: Path) -> dict[str, Node]:
    """Every path under `root` (relative), with its type, mode bits and content hash."""
    out: dict[str, Node] = {}
    if not root.is_dir():
        return out
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                out[rel] = Node("dir", stat.S_IMODE(st.st_mode), "")
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = Node("symlink", 0, os.readlink(full))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = Node("file", stat.S_IMODE(st.st_mode), _digest(full))
            else:
                out[rel] = Node("special", stat.S_IMODE(st.st_mode), "")
    return out


def _digest(path: str) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    return h.hexdigest()
