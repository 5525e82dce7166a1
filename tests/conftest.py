"""Shared fixtures: temp live/durable/state trees, a CLI runner, an engine factory.

`tree` lays out one deployment in a temp directory: ``local/`` (AM_LOCAL),
``data/`` (DATA_DIR, the durable root) and the default state dir under
``local/.syncengine``.  `cli` runs the real ``syncengine`` command in a child
process with that environment; `engine` builds an in-process Engine from the
same configuration.  Tests that need the bucket-like FUSE mount use the
`bucket` fixture from tests/bucket_mount.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

from syncengine import Engine, config_from_dict

REPO = Path(__file__).resolve().parent.parent


@attrs.define
class Tree:
    """One deployment in a temp directory."""

    base: Path
    local: Path
    data: Path

    @property
    def state(self) -> Path:
        return self.local / ".syncengine"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("SYNCENGINE_CONFIG", "AGENT_STATE_CHECKPOINT_SECONDS")}
        env.update(AM_LOCAL=str(self.local), DATA_DIR=str(self.data))
        # Child processes import this checkout's syncengine, installed or not.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        env.update(extra)
        return env

    def write(self, rel: str, data: bytes | str, *, mode: int | None = None,
              mtime_ns: int | None = None) -> Path:
        """Create a live file (relative to local/)."""
        path = self.local / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        if mode is not None:
            path.chmod(mode)
        if mtime_ns is not None:
            os.utime(path, ns=(mtime_ns, mtime_ns))
        return path


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    t = Tree(tmp_path, tmp_path / "local", tmp_path / "data")
    t.local.mkdir()
    t.data.mkdir()
    return t


CliRunner = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cli(tree: Tree) -> CliRunner:
    """Run ``syncengine ARGS...`` as a child process against `tree`."""

    def run(*args: str, env: Mapping[str, str] | None = None, check: int | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "syncengine", *args], capture_output=True, text=True,
            env=dict(env) if env is not None else tree.env(), timeout=timeout, cwd=tree.base,
        )
        if check is not None:
            assert proc.returncode == check, (
                f"exit {proc.returncode}, wanted {check}\nstdout:\n{proc.stdout}\n"
                f"stderr:\n{proc.stderr}")
        return proc

    return run


EngineFactory = Callable[..., Engine]


@pytest.fixture
def engine(tree: Tree) -> EngineFactory:
    """Build an Engine for `tree` (all built-in adapters unless `adapters` is given)."""

    def make(raw: Mapping[str, Any] | None = None, **env: str) -> Engine:
        return Engine(config_from_dict(dict(raw or {}), env=tree.env(**env)))

    return make


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """Fail a test that leaves a thread running (threads must be stopped and joined)."""
    before = set(threading.enumerate())
    yield
    leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    for t in leaked:
        t.join(timeout=5)
    still = [t.name for t in leaked if t.is_alive()]
    assert not still, f"threads left running: {still}"
