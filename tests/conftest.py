"""Shared fixtures: temp live/durable/state trees, a CLI runner, an engine factory.

`tree` lays out one deployment in a temp directory: ``local/`` (AM_LOCAL),
``data/`` (DATA_DIR, the durable root) and the default state dir under
``local/.syncengine``.  `cli` runs the real ``syncengine`` command in a child
process with that environment; `engine` builds an in-process Engine from the
same configuration.

Every test that uses `tree` (directly or through `cli`/`engine`) runs twice:
``[dir]`` with ``data/`` a plain directory, and ``[bucket]`` with ``data/`` the
mountpoint of the fusebucket emulator (tests/bucket_mount.py) over
``bucket/``, so what the engine does is checked against a mount that behaves
like the bucket.  `tree.backing` is where the durable bytes really land (the
bucket; ``data/`` itself for ``dir``): inspect it, not the mount, when a test
must not cause mount operations.  ``tree.mount.stats()`` counts operations.
A test that is about local behaviour only, or cannot work on a FUSE mount
(a bind mount of ``data/``), is marked ``@pytest.mark.dir_only("reason")``
and runs once.  The ``[bucket]`` runs skip, with the reason, where FUSE is
unavailable.

A test marked ``@pytest.mark.memory`` also runs ``[memory]``: the engine's
durable side is a `tests.memstore.MemoryStore` (an object store in memory:
no rename, no links, closed writes only) through the engine's ``stores``
factory.  Such a test is in-process only (`engine`, not `cli`) and reads the
durable side through ``tree.store(rel)``, never `tree.backing`.

The same tests also run ``[s3]``, and so do the engine's behaviour tests (the
modules marked ``pytestmark = pytest.mark.s3``: checkpoint, restore, SQLite,
segments, journal, verify, gc, manifest, directories, runner...): each test
has its own bucket of one real S3 server on 127.0.0.1 (moto in a child
process for the session,
tests/s3server.py), the tree's ``DATA_DIR`` is ``s3://BUCKET/data`` with the AWS
variables pointing at the server, so the real ``syncengine`` command (`cli`) and
the in-process `engine` select `S3Store` from the configuration as a user's
would.  ``data/`` stays an empty local directory; read and damage the durable
side through ``tree.durable`` (``data/``, or the bucket prefix as a
tests.s3path.S3Path) and ``tree.raw`` (`tree.backing`, or the same prefix),
which take the same path calls.  `tree.s3_requests()` lists the requests the
bucket received.  A test about something only a directory or a mount has
(inode numbers, staging files, bind mounts, absolute durable paths) is marked
``@pytest.mark.posix_only("reason")`` and skips ``[s3]``.

A test marked ``@pytest.mark.rclone`` also runs on real rclone mounts
(tests/rclone_mount.py): ``[rclone-off]`` and ``[rclone-writes]``, ``data/``
mounted over ``bucket/``.  `tree.backing` is then what can be read without
waiting for rclone's write-back: ``bucket/`` in off mode, the mount itself in
writes mode; ``tree.ops()`` is ``{}``.  Mark tests that hold on any mount that
commits on close; they skip where rclone is missing (and fail under CI).
A test marked ``@pytest.mark.rclone_s3`` also runs ``[rclone-s3]``: ``data/`` a
real ``rclone mount --vfs-cache-mode writes`` over its own bucket of the S3
server (tests/rclone_mount.py `s3_remote`), the deployment write-back issues
were measured on; `tree.backing` is the mount.
"""

from __future__ import annotations

import contextlib
import functools
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
from syncengine.durable.posix.store import PosixStore
from syncengine.durable.store import Store
from tests import bucket_mount, rclone_mount
from tests.bucket_mount import BucketMount, fuse_available
from tests.helpers import snapshot
from tests.memstore import MemoryBucket
from tests.rclone_mount import RcloneMount, require_rclone, s3_remote
from tests.s3path import S3Path
from tests.s3server import CREDENTIALS, S3Server, s3_server

bucket = bucket_mount.bucket  # fixtures for the emulator tests
bucket_factory = bucket_mount.bucket_factory
rclone_factory = rclone_mount.rclone_factory  # real rclone mounts (tests/rclone_mount.py)
__all__ = ["bucket", "bucket_factory", "rclone_factory", "s3_server"]

DURABLE_KINDS = ("dir", "bucket")
# Read by syncengine's configuration (docs/CONFIGURATION.md): never from the caller's shell.
DESIGN_VARIABLES = frozenset(
    {
        "SYNCENGINE_CONFIG",
        "AGENT_STATE_CHECKPOINT_SECONDS",
        "CODEX_HOME",
        "CODEX_DURABLE",
        "CLAUDE_CONFIG_DIR",
        "CLAUDE_DURABLE",
        "GEMINI_CLI_HOME",
        "GEMINI_LIVE",
        "GEMINI_DURABLE",
        "OPENCLAW_STATE_DIR",
        "OPENCLAW_DURABLE",
        "OPENCODE_LIVE",
        "OPENCODE_DURABLE",
        "HERMES_LIVE",
        "HERMES_DURABLE",
    }
)
RCLONE_KINDS = ("rclone-off", "rclone-writes")
S3_PREFIX = "data"  # the [s3] kind's DATA_DIR is s3://BUCKET/data
REPO = Path(__file__).resolve().parent.parent


@attrs.define
class Tree:
    """One deployment in a temp directory."""

    base: Path
    local: Path
    data: Path
    kind: str = "dir"
    backing: Path = attrs.field(default=attrs.Factory(lambda self: self.data, takes_self=True))
    mount: BucketMount | None = None
    rclone: RcloneMount | None = None
    memory: MemoryBucket | None = None
    s3: tuple[S3Server, str] | None = None  # the server and this test's bucket

    @property
    def stores(self) -> Callable[[Path], Store]:
        """The engine's `stores` factory for this tree (for s3, the default: the engine
        selects S3Store from ``DATA_DIR=s3://...``)."""
        return self.memory.store if self.memory is not None else PosixStore

    def store(self, rel: str) -> Store:
        """The durable directory `rel` (under ``data/``) as the engine sees it."""
        if self.s3 is not None:
            from syncengine.durable.s3.store import S3Store

            server, name = self.s3
            return S3Store(server.location(name, f"{S3_PREFIX}/{rel}".rstrip("/")))
        if self.memory is not None:
            return self.memory.store(self.data / rel)
        return PosixStore(self.data / rel)

    @property
    def durable(self) -> Path | S3Path:
        """The durable root as the engine writes it: ``data/`` (through the mount for
        ``bucket``), or the bucket prefix for ``s3``."""
        return self._prefix() if self.s3 is not None else self.data

    @property
    def raw(self) -> Path | S3Path:
        """Where the durable bytes land (`backing`; the bucket prefix for ``s3``)."""
        return self._prefix() if self.s3 is not None else self.backing

    def _prefix(self) -> S3Path:
        assert self.s3 is not None
        server, name = self.s3
        return S3Path(server.client(), name, S3_PREFIX)

    def writes_of(self, rel: str) -> object:
        """What changes when the durable object `rel` (under ``data/``) is written again:
        its inode in `raw`, or on S3 the PUTs of its key the server logged so far."""
        if self.s3 is None:
            return (self.backing / rel).stat().st_ino
        key = f"/{self.s3[1]}/{S3_PREFIX}/{rel}"
        return [r for r in self.s3_requests() if r[0] == "PUT" and r[1].split("?")[0] == key]

    def s3_requests(self) -> list[tuple[str, str, int]]:
        """(method, path, status) of each request this test's bucket received so far."""
        assert self.s3 is not None
        server, name = self.s3
        return server.requests(name)

    def ops(self) -> dict[str, int]:
        """Operation counts on the durable mount so far ({} for a plain directory)."""
        return self.mount.stats() if self.mount is not None else {}

    @contextlib.contextmanager
    def no_durable_ops(self, allow: tuple[str, ...] = (), *, reach: bool = False) -> Iterator[None]:
        """Assert the body does nothing durable: no change in the bucket, no mount operation.

        `allow`: operation kinds that may happen (e.g. "getattr"), still without a write.
        `reach`: the body is a new process's pass, which reaches the store once whatever it
        has to do (docs/IDLE.md): one listing of the bucket, a stat of the mount.
        """
        before, ops = snapshot(self.backing), self.ops()
        allow = (*allow, "getattr") if reach else allow
        if self.s3 is not None:  # no request at all, or that one listing
            count = len(self.s3_requests())
            yield
            new = self.s3_requests()[count:]
            reached = [r for r in new if r[0] == "GET" and "list-type=2" in r[1]]
            assert new == reached[: int(reach)], "requests to the bucket"
            return
        if self.memory is not None:  # the bucket in memory: no PUT, and no GET either
            calls = (self.memory.puts, self.memory.gets)
            yield
            assert (self.memory.puts, self.memory.gets) == calls, "operations on the store"
            return
        yield
        assert snapshot(self.backing) == before, "the durable tree changed"
        # "release" is the kernel ending a handle closed before the body began (it
        # arrives asynchronously); a handle opened in the body shows as open/create.
        done = {
            k: n for k, n in _diff(ops, self.ops()).items() if k not in allow and k != "release"
        }
        assert not done, f"operations on the mount: {done}"

    @property
    def state(self) -> Path:
        return self.local / ".syncengine"

    def env(self, **extra: str) -> dict[str, str]:
        """The deployment's environment: this tree's roots, none of the caller's settings
        (the design's per-harness variables would move the trees), and a HOME of its own
        (`migrate` copies, renames and links what it finds under $HOME)."""
        env = {k: v for k, v in os.environ.items() if k not in DESIGN_VARIABLES}
        env.update(AM_LOCAL=str(self.local), DATA_DIR=str(self.data), HOME=str(self.base / "home"))
        if self.s3 is not None:  # the bucket, reached as a user's configuration reaches it
            server, name = self.s3
            env = {k: v for k, v in env.items() if not k.startswith("AWS_")}
            env.update(CREDENTIALS, AWS_ENDPOINT_URL=server.endpoint)
            env["DATA_DIR"] = f"s3://{name}/{S3_PREFIX}"
        # Child processes import this checkout's syncengine, installed or not.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        env.update(extra)
        return env

    def write(
        self, rel: str, data: bytes | str, *, mode: int | None = None, mtime_ns: int | None = None
    ) -> Path:
        """Create a live file (relative to local/)."""
        path = self.local / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        if mode is not None:
            path.chmod(mode)
        if mtime_ns is not None:
            os.utime(path, ns=(mtime_ns, mtime_ns))
        return path


def objects_holding(root: Path | S3Path, needle: str) -> list[str]:
    """Every durable object under `root` (a directory, or an S3 prefix) holding `needle`."""
    if isinstance(root, Path):
        found = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    else:
        found = root.files(skip=None)
    return sorted(name for name, data in found.items() if needle.encode() in data)


def _diff(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    return {
        k: after.get(k, 0) - before.get(k, 0)
        for k in sorted(set(before) | set(after))
        if after.get(k, 0) != before.get(k, 0)
    }


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """How many workers ``-n auto`` (the default, pyproject addopts) starts: two per core
    this process may run on, at most 8.  Most tests wait more than they compute (child
    processes starting, FUSE round trips, the S3 server, kill points), so one worker per
    core leaves the cores idle half the time.  Tests are independent: each has its own
    tmp_path (mount points under it), its worker's S3 server on a port the OS picked,
    and the few that change something system-wide share an ``xdist_group``."""
    return max(2, min(8, 2 * len(os.sched_getaffinity(0))))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fusebucket-no-atomic-trunc",
        action="store_true",
        help="mount the bucket emulator without atomic O_TRUNC, as some kernels and libfuse "
        "versions run it (open, then a separate truncate)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--fusebucket-no-atomic-trunc"):
        bucket_mount.ATOMIC_TRUNC = False
    config.addinivalue_line(
        "markers",
        "dir_only(reason): run with a plain-directory durable root only (not on the "
        "bucket emulator); say why",
    )
    config.addinivalue_line(
        "markers",
        "memory: also run with the durable side in memory (tests/memstore.py) and on "
        "a real S3 server (tests/s3server.py); "
        "in-process only",
    )
    config.addinivalue_line(
        "markers",
        "s3: also run with DATA_DIR=s3://BUCKET/data on a real S3 server (tests/s3server.py), "
        "through the real command and the in-process engine alike",
    )
    config.addinivalue_line(
        "markers",
        "posix_only(reason): in a module marked s3, run on the directory and the bucket "
        "emulator only (not on S3); say why",
    )
    config.addinivalue_line(
        "markers",
        "rclone: also run with the durable root on real rclone mounts "
        "(--vfs-cache-mode off and writes)",
    )
    config.addinivalue_line(
        "markers",
        "rclone_s3: also run with the durable root on real rclone (--vfs-cache-mode writes) "
        "over a bucket of the S3 server",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test using `tree` against each durable kind (dir_only: the directory)."""
    if "durable_kind" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("dir_only")
    if marker is not None and not (marker.args or marker.kwargs.get("reason")):
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: dir_only needs a reason")
    kinds = ["dir"] if marker is not None else list(DURABLE_KINDS)
    if marker is None and metafunc.definition.get_closest_marker("rclone") is not None:
        kinds += RCLONE_KINDS
    if marker is None and metafunc.definition.get_closest_marker("rclone_s3") is not None:
        kinds += ["rclone-s3"]
    posix = metafunc.definition.get_closest_marker("posix_only")
    if posix is not None and not (posix.args or posix.kwargs.get("reason")):
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: posix_only needs a reason")
    s3 = marker is None and posix is None
    if metafunc.definition.get_closest_marker("memory") is not None:
        kinds += ["memory", "s3"] if posix is None else ["memory"]
    elif s3 and metafunc.definition.get_closest_marker("s3") is not None:
        kinds += ["s3"]
    metafunc.parametrize("durable_kind", kinds, indirect=True)


@pytest.fixture
def durable_kind(request: pytest.FixtureRequest) -> str:
    """ "dir" or "bucket": what `tree.data` is (parametrized by pytest_generate_tests)."""
    return str(getattr(request, "param", "dir"))


@pytest.fixture
def tree(tmp_path: Path, durable_kind: str, request: pytest.FixtureRequest) -> Iterator[Tree]:
    local, data = tmp_path / "local", tmp_path / "data"
    local.mkdir()
    data.mkdir()
    if durable_kind == "dir":
        yield Tree(tmp_path, local, data)
        return
    if durable_kind == "memory":  # data/ stays an empty directory: the root the engine checks
        yield Tree(tmp_path, local, data, kind="memory", memory=MemoryBucket())
        return
    if durable_kind == "s3":  # data/ stays an empty directory, as for memory
        server: S3Server = request.getfixturevalue("s3_server")
        yield Tree(tmp_path, local, data, kind="s3", s3=(server, server.bucket()))
        return
    if durable_kind == "rclone-s3":
        require_rclone()
        server = request.getfixturevalue("s3_server")
        remote = s3_remote(server.endpoint, server.bucket(), S3_PREFIX)
        with RcloneMount(tmp_path / "bucket", data, "writes", remote=remote) as rclone:
            yield Tree(tmp_path, local, data, kind=durable_kind, backing=data, rclone=rclone)
        return
    if durable_kind in RCLONE_KINDS:
        require_rclone()
        with RcloneMount(tmp_path / "bucket", data, durable_kind.split("-", 1)[1]) as rclone:
            yield Tree(tmp_path, local, data, kind=durable_kind, backing=rclone.view, rclone=rclone)
        return
    ok, reason = fuse_available()
    if not ok:
        pytest.skip(f"bucket emulator: {reason}")
    with BucketMount(tmp_path / "bucket", data, stats=True) as mount:
        yield Tree(tmp_path, local, data, kind="bucket", backing=mount.backing, mount=mount)


CliRunner = Callable[..., subprocess.CompletedProcess[str]]


def run_cli(
    tree: Tree,
    *args: str,
    env: Mapping[str, str] | None = None,
    check: int | None = None,
    timeout: float = 120,
    python: tuple[str, ...] = ("-m", "syncengine"),
) -> subprocess.CompletedProcess[str]:
    """Run ``syncengine ARGS...`` (``python ... ARGS``) as a child process against `tree`;
    `check`: the exit status it must have."""
    if tree.memory is not None:
        raise pytest.UsageError(
            "a child process cannot reach the test's store factory: "
            "a test marked memory uses `engine`, not `cli`"
        )
    proc = subprocess.run(
        [sys.executable, *python, *args],
        capture_output=True,
        text=True,
        env=dict(env) if env is not None else tree.env(),
        timeout=timeout,
        cwd=tree.base,
    )
    if check is not None:
        assert proc.returncode == check, (
            f"{args}: exit {proc.returncode}, wanted {check}\nstdout:\n{proc.stdout}\n"
            f"stderr:\n{proc.stderr}"
        )
    return proc


@pytest.fixture
def cli(tree: Tree) -> CliRunner:
    """Run ``syncengine ARGS...`` as a child process against `tree` (`run_cli`)."""
    return functools.partial(run_cli, tree)


EngineFactory = Callable[..., Engine]


@pytest.fixture
def engine(tree: Tree) -> Iterator[EngineFactory]:
    """Build an Engine for `tree` (all built-in adapters unless `adapters` is given);
    each is closed at the test's end (its lease released while the durable side is up)."""
    made: list[Engine] = []

    def make(raw: Mapping[str, Any] | None = None, **env: str) -> Engine:
        eng = Engine(config_from_dict(dict(raw or {}), env=tree.env(**env)), stores=tree.stores)
        made.append(eng)
        return eng

    yield make
    for eng in made:
        eng.close()


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
