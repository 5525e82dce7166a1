"""Crash matrix: SIGKILL a checkpoint (or the mount under it) at random points, then check.

Each batch mounts the fusebucket emulator once in one mode (kill mode commit
or discard, rename or no rename) and repeats: change the live tree (large and
small files rewritten, a transcript appended, a file shrunk), start
``python -m syncengine checkpoint`` as a child, SIGKILL it after a random
delay drawn from the measured duration of an unkilled checkpoint, then check:

- every durable file the reader can reach (rename mode: each file at its
  path; no-rename mode: each object a manifest entry names) is one complete
  version of that file as the test wrote it, never a prefix; with no rename,
  each object also matches its entry's hash exactly;
- every manifest object decodes, or the reader reports it and skips it;
- a following checkpoint completes, and a restore into an empty live tree
  succeeds and equals the live tree that checkpoint saw.

One batch kills the FUSE daemon itself instead (pending writes are lost, the
child gets ENOTCONN) and remounts the same bucket afterwards.

The same matrix runs on every store kind (`CASES`, a test per batch): ``[bucket]``
the emulator batches above; ``[dir]`` a plain directory; ``[s3]``
``DATA_DIR=s3://...`` on the test S3 server; ``[rclone-s3]`` real ``rclone mount
--vfs-cache-mode writes`` over it, its checkpoints killed, then rclone itself
killed with its cache dropped (what had not landed is lost).  There, what is
checked is what landed in the bucket.  A kill point is drawn *stratified*:
point k of n falls at a random moment of the k-th n-th of a measured unkilled
checkpoint, so every phase of a pass longer than 1/n of it (before the first
copy, amid the copies, between the copies and the manifest object, before the
index is saved) is killed at least once per batch, which random delays over the
whole pass do not promise (with 30 uniform points a phase of 5% of a pass is
missed one time in five): n = 20 for each of the emulator's five modes, 12 on a
directory and on S3 (their passes have no mount to vary), 8 + 6 over rclone
(seconds a point).  The large files are hundreds of KiB outside the emulator,
not MiB: the phases are the same, and
multipart uploads killed midway are test_s3_kills's.  The counts of
kill points and failures are printed and written to crash-matrix-<id>.json in the
test's tmp dir.  Each batch is a test of its own (independent: its own mount,
tree and seed), so batches run in parallel; each must reach its number of kill
points that landed while the checkpoint was still running (up to five tries
per point; a pass that finished before its kill shortens the delays drawn next,
since the machine's load moves what a pass takes); with
SYNCENGINE_RECORD_RESULTS=1 each batch writes its row of the table in
benchmarks/RESULTS.md.  A live SQLite database in WAL mode, written
between checkpoints, is part of the tree: every published snapshot and every
restored copy must pass ``PRAGMA quick_check``.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import xxhash

from syncengine import Engine, config_from_dict
from syncengine.durable import manifest
from syncengine.durable.posix.store import PosixStore
from syncengine.durable.store import Store
from tests.bucket_mount import BucketMount, fuse_available
from tests.conftest import REPO
from tests.rclone_mount import RcloneMount, require_rclone, s3_remote
from tests.s3server import CREDENTIALS, S3Server

pytestmark = pytest.mark.slow  # mounts the emulator itself, once per batch and mode

LIVE = "crash-live"
DUR = "state/crash"
HAS_SQLITE = True  # a WAL database in the tree (the constant keeps the checks readable)
# (name, BucketMount options, kill points, kill the daemon instead of the checkpoint)
Batch = tuple[str, dict[str, Any], int, bool]
BATCHES: list[Batch] = [
    ("commit", {"kill_mode": "commit"}, 20, False),
    ("discard", {"kill_mode": "discard"}, 20, False),
    ("commit-no-rename", {"kill_mode": "commit", "rename": False}, 20, False),
    (
        "discard-no-rename",
        {"kill_mode": "discard", "rename": False, "rename_errno": "ENOSYS"},
        20,
        False,
    ),
    ("daemon-killed", {"kill_mode": "commit"}, 20, True),
]
TRIES = 5  # attempts per kill point at most (one whose pass finished first does not count)
# (store kind, batch): one test each; the emulator's batches, then the other kinds'
CASES: list[tuple[str, Batch]] = [
    *(("bucket", b) for b in BATCHES),
    ("dir", ("dir", {}, 12, False)),
    ("s3", ("s3", {}, 12, False)),
    ("rclone-s3", ("rclone-writes", {}, 8, False)),
    ("rclone-s3", ("rclone-killed", {}, 6, True)),
]


def _h(data: bytes) -> int:
    return int(xxhash.xxh3_64_intdigest(data))


class LiveTree:
    """The live tree and every complete version of each file ever written (`shift`: the
    large files' unit, 20 for MiB)."""

    def __init__(self, root: Path, rng: random.Random, shift: int = 20) -> None:
        self.root = root
        self.rng = rng
        self.shift = shift
        self.versions: dict[str, set[int]] = {}
        self.round = 0

    def put(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.versions.setdefault(rel, set()).add(_h(data))

    def body(self, rel: str, size: int) -> bytes:
        head = f"{rel} round={self.round} len={size}\n".encode()
        return head + self.rng.randbytes(max(0, size - len(head)))

    def populate(self) -> None:
        for i in range(24):
            self.put(f"small/{i:02d}.json", self.body(f"small/{i}", self.rng.randint(50, 8000)))
        for i in range(3):
            self.put(
                f"large/{i}.bin", self.body(f"large/{i}", self.rng.randint(2, 5) << self.shift)
            )
        self.put("sessions/transcript.jsonl", b"")
        self.mutate()

    def mutate(self) -> None:
        self.round += 1
        for i in self.rng.sample(range(24), 5):
            self.put(f"small/{i:02d}.json", self.body(f"small/{i}", self.rng.randint(50, 8000)))
        i = self.rng.randrange(3)
        self.put(f"large/{i}.bin", self.body(f"large/{i}", self.rng.randint(1, 5) << self.shift))
        transcript = self.root / "sessions/transcript.jsonl"
        lines = b"".join(
            json.dumps({"round": self.round, "n": n, "text": "x" * 60}).encode() + b"\n"
            for n in range(self.rng.randint(20, 400))
        )
        self.put("sessions/transcript.jsonl", transcript.read_bytes() + lines)
        if self.rng.random() < 0.2:  # a file that shrinks (Codex trims history.jsonl)
            self.put("small/00.json", b"trimmed\n")

    def snapshot(self) -> dict[str, bytes]:
        out = {}
        for path in self.root.rglob("*"):
            if path.is_file() and ".syncengine" not in path.parts:
                out[str(path.relative_to(self.root))] = path.read_bytes()
        return out


class Target:
    """One batch's durable root: where the config points, how it is mounted, killed and
    remounted, and the adapter's durable directory as it landed (`store`)."""

    def __init__(self, kind: str, base: Path, options: dict[str, Any], server: S3Server | None):
        self.kind, self.options, self.server = kind, options, server
        self.backing, self.mnt = base / "bucket", base / "mnt"
        self.bucket = server.bucket() if server is not None else ""
        self.mount: BucketMount | RcloneMount | None = None
        self.no_rename = options.get("rename") is False

    @property
    def root(self) -> Path | str:
        if self.kind == "dir":
            return self.backing
        return f"s3://{self.bucket}/data" if self.kind == "s3" else self.mnt

    def env(self) -> dict[str, str]:
        """The engines' environment: the S3 server's, for an s3:// root."""
        if self.kind != "s3":
            return {}
        assert self.server is not None
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.server.endpoint}

    def start(self) -> None:
        if self.kind == "bucket":
            self.mount = BucketMount(self.backing, self.mnt, **self.options).mount()
        elif self.kind == "rclone-s3":
            assert self.server is not None
            remote = s3_remote(self.server.endpoint, self.bucket, "data")
            self.mount = RcloneMount(self.backing, self.mnt, "writes", remote=remote).mount()
        else:
            self.backing.mkdir(parents=True, exist_ok=True)

    def kill(self) -> None:
        """The mount dies with what it had not written (the emulator's daemon, rclone with
        its cache); `stop` unmounts it once the killed checkpoint has ended, and `start`
        mounts it again."""
        assert self.mount is not None
        self.mount.kill()

    def stop(self) -> None:
        if self.mount is not None:
            self.mount.unmount()

    def store(self, landed: bool = False) -> Store:
        """The adapter's durable directory as a reader sees it: through a write-back mount
        (rclone's cache), or as it `landed` in the bucket (after rclone was killed)."""
        if self.kind == "rclone-s3" and not landed:
            return PosixStore(self.mnt / DUR)
        if self.server is None:
            return PosixStore(self.backing / DUR)
        from syncengine.durable.s3.store import S3Store

        return S3Store(self.server.location(self.bucket, f"data/{DUR}"))


class Matrix:
    """Runs the kill points of one batch and records what went wrong."""

    def __init__(self, base: Path, rng: random.Random, env: dict[str, str]) -> None:
        self.base = base
        self.rng = rng
        self.env = env  # the engines' environment (the S3 server's, for an s3:// root)
        self.failures: list[str] = []
        self.kill_points = 0
        self.completed_before_kill = 0
        self.checks = 0

    def raw(self, local: Path, data: Path | str, state: Path) -> dict[str, Any]:
        adapter: dict[str, Any] = {"name": "crash", "live": LIVE, "durable": DUR}
        if HAS_SQLITE:
            adapter["sqlite"] = ["db/state.sqlite"]
        return {
            "local_root": str(local),
            "durable_root": str(data),
            "state_dir": str(state),
            "adapters": [],
            "adapter": [adapter],
            "jobs": 4,
            # a torn lease object (a kill mid-create) holds the lease this long: not 60 s
            "lease_seconds": 5,
        }

    def config_file(self, local: Path, data: Path | str, state: Path) -> Path:
        path = self.base / "crash.toml"
        raw = self.raw(local, data, state)
        adapter = raw.pop("adapter")[0]
        lines = [f"{k} = {json.dumps(v)}" for k, v in raw.items()]
        lines.append("[[adapter]]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in adapter.items()]
        path.write_text("\n".join(lines) + "\n")
        return path

    def fail(self, where: str, what: str) -> None:
        self.failures.append(f"{where}: {what}")

    def check_durable(
        self, store: Store, live: LiveTree, where: str, no_rename: bool, *, lagging: bool = False
    ) -> None:
        """Complete versions only, manifest objects decode or are skipped (`store`: the
        adapter's durable directory as a reader sees it).  `lagging`: what a killed
        write-back mount left, whose manifest may have landed before objects it names
        (the next start publishes them again: the follow-up's check)."""
        self.checks += 1
        if not store.exists():
            return
        try:
            state = manifest.load(store)
        except Exception as exc:
            self.fail(where, f"manifest.load raised {exc!r}")
            return
        skipped = " ".join(state.problems + state.warnings)  # a torn newest: a warning
        for _seq, _kind, name in manifest.list_objects(store):
            data = store.read_bytes(f"{manifest.MANIFEST_DIR}/{name}")
            try:
                manifest.decode(data)
            except (ValueError, KeyError) as exc:
                if name not in skipped and _seq > state.base_seq:
                    self.fail(where, f"undecodable manifest {name} not reported ({exc})")
        for entry in state.entries.values():
            if entry.kind == "sqlite":
                self.check_snapshot(store, entry.location, where, lagging=lagging)
            if entry.kind != "file":
                continue
            try:
                data = store.read_bytes(entry.location)
            except FileNotFoundError:
                if not lagging:
                    self.fail(where, f"{entry.path}: manifest names missing {entry.location}")
                continue
            if _h(data) not in live.versions.get(entry.path, set()):
                self.fail(
                    where,
                    f"{entry.path}: {entry.location} is not a complete version ({len(data)} bytes)",
                )
            elif no_rename and entry.hash is not None and _h(data) != entry.hash:
                self.fail(where, f"{entry.path}: object differs from its manifest entry")
        if not no_rename:
            for info in store.list():
                if info.kind != "file" or info.key.startswith(".syncengine"):
                    continue
                if info.key.startswith("checkpoints/"):  # a SQLite snapshot, whole and valid
                    self.check_snapshot(store, info.key, where, lagging=lagging)
                elif _h(store.read_bytes(info.key)) not in live.versions.get(info.key, set()):
                    self.fail(where, f"{info.key}: durable file is a prefix or garbage")

    def check_snapshot(self, store: Store, key: str, where: str, *, lagging: bool = False) -> None:
        """A published SQLite snapshot passes quick_check (on a local copy, never in place).
        `lagging`: a killed write-back mount may have landed the manifest before the
        snapshot it names, like any other object (`check_durable`)."""
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / "snap.db"
            try:
                local.write_bytes(store.read_bytes(key))
            except FileNotFoundError:
                if not lagging:
                    self.fail(where, f"{key}: the manifest names a missing snapshot")
                return
            conn = sqlite3.connect(f"file:{local}?mode=ro", uri=True)
            try:
                ok = conn.execute("PRAGMA quick_check").fetchone()[0]
            except sqlite3.DatabaseError as exc:
                ok = str(exc)
            finally:
                conn.close()
        if ok != "ok":
            self.fail(where, f"{key}: SQLite snapshot fails quick_check ({ok})")

    def follow_up(
        self, root: Path | str, live: LiveTree, state_dir: Path, where: str, n: int
    ) -> None:
        """A following checkpoint completes; a restore into an empty tree matches it."""
        local = live.root.parent
        eng = Engine(config_from_dict(self.raw(local, root, state_dir), env=self.env))
        with eng:  # closed like a command's end: the restore below need not wait
            report = eng.checkpoint()
        if not report.ok:
            self.fail(
                where,
                f"following checkpoint failed: {[a.fatal for a in report.adapters]}"
                f" {[str(e) for e in report.errors]}",
            )
            return
        expected = live.snapshot()
        target = self.base / f"restore-{n}"
        cfg = self.raw(target, root, target / ".state")
        rep = Engine(config_from_dict(cfg, env=self.env)).restore()  # a new instance
        if not rep.ok:
            self.fail(
                where,
                f"restore failed: {[a.fatal for a in rep.adapters]} {[str(e) for e in rep.errors]}",
            )
            return
        got = LiveTree(target / LIVE, self.rng).snapshot()
        got = {k: v for k, v in got.items() if not k.startswith("db/")}
        expected = {k: v for k, v in expected.items() if not k.startswith("db/")}
        if got != expected:
            diff = sorted(set(got) ^ set(expected)) or [k for k in got if got[k] != expected[k]]
            self.fail(where, f"restore differs from the last checkpoint: {diff[:5]}")
        if HAS_SQLITE:
            db = target / LIVE / "db/state.sqlite"
            with sqlite3.connect(db) as conn:
                ok = conn.execute("PRAGMA quick_check").fetchone()[0]
            conn.close()
            if ok != "ok":
                self.fail(where, f"restored SQLite fails quick_check: {ok}")
        shutil.rmtree(target)


def _start_checkpoint(config: Path, extra: dict[str, str]) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNCENGINE")}
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-m", "syncengine", "--config", str(config), "-q", "checkpoint"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _sqlite_writer(live: Path) -> Callable[[int], None]:
    db = live / "db/state.sqlite"
    db.parent.mkdir(parents=True, exist_ok=True)

    def write(round_: int) -> None:
        with sqlite3.connect(db) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("CREATE TABLE IF NOT EXISTS t (round INTEGER, body TEXT)")
            conn.executemany(
                "INSERT INTO t VALUES (?, ?)", [(round_, "y" * 200) for _ in range(50)]
            )
        conn.close()

    return write


@pytest.mark.parametrize(
    "case", range(len(CASES)), ids=[f"{k}-{b[0]}" if k == "bucket" else b[0] for k, b in CASES]
)
def test_crash_matrix(tmp_path: Path, case: int, request: pytest.FixtureRequest) -> None:
    kind, (name, options, points, kill_daemon) = CASES[case]
    server = None
    if kind in ("bucket", "rclone-s3"):
        ok, reason = fuse_available()
        if not ok:
            pytest.skip(f"bucket emulator: {reason}")
    if kind == "rclone-s3":
        require_rclone()
    if kind in ("s3", "rclone-s3"):
        server = request.getfixturevalue("s3_server")
    seed = int(os.environ.get("SYNCENGINE_CRASH_SEED", "20261129")) + case
    rng = random.Random(seed)
    matrix = Matrix(tmp_path, rng, {})
    started = time.monotonic()
    target = Target(kind, tmp_path / "b", options, server)
    matrix.env = target.env()
    _run_batch(matrix, target, name, points, kill_daemon, rng)
    result = {
        "kind": kind,
        "batch": name,
        "kill_points": matrix.kill_points,
        "failures": len(matrix.failures),
        "checks": matrix.checks,
        "finished_before_kill": matrix.completed_before_kill,
        "sqlite": HAS_SQLITE,
        "seed": seed,
        "seconds": round(time.monotonic() - started, 1),
        "failure_list": matrix.failures[:50],
    }
    (tmp_path / f"crash-matrix-{kind}-{name}.json").write_text(json.dumps(result, indent=2))
    print(f"\ncrash matrix: {json.dumps(result)}")
    if os.environ.get("SYNCENGINE_RECORD_RESULTS") == "1":
        _record(result)
    assert matrix.kill_points == points, "too few checkpoints were still running when killed"
    assert not matrix.failures, "\n".join(matrix.failures[:20])


def _run_batch(
    matrix: Matrix,
    target: Target,
    name: str,
    points: int,
    kill_daemon: bool,
    rng: random.Random,
) -> None:
    base = target.backing.parent
    local, state = base / "local", base / "state"
    live = LiveTree(local / LIVE, rng, shift=20 if target.kind == "bucket" else 17)
    live.populate()
    db_write = _sqlite_writer(live.root) if HAS_SQLITE else None
    target.start()
    config = matrix.config_file(local, target.root, state)
    try:
        # measure unkilled checkpoints (the first one also probes the mount): kill delays are
        # drawn from their duration
        durations = []
        for _ in range(4):
            live.mutate()
            if db_write:
                db_write(live.round)
            t0 = time.monotonic()
            proc = _start_checkpoint(config, matrix.env)
            if proc.wait(timeout=120) != 0:
                matrix.fail(name, "an unkilled checkpoint failed")
            durations.append(time.monotonic() - t0)
        typical = sorted(durations[1:])[1]
        kills = n = 0
        while kills < points and n < TRIES * points:
            n += 1
            where = f"{name}#{n}"
            live.mutate()
            if db_write:
                db_write(live.round)
            proc = _start_checkpoint(config, matrix.env)
            # stratified: the k-th of `points` slices of a pass (module docstring)
            time.sleep(typical * ((kills % points) + rng.random()) / points)
            running = proc.poll() is None
            if not running:  # the pass was quicker than measured (the load moves): the next
                typical *= 0.8  # delays come from a shorter pass, so kills land inside again
            kills += running
            matrix.kill_points += running
            matrix.completed_before_kill += not running
            if kill_daemon:
                target.kill()
                proc.wait(timeout=60)
                target.stop()
                lagging = target.kind == "rclone-s3"  # write-back: what landed, in any order
                store = target.store(landed=True)
                matrix.check_durable(store, live, where, target.no_rename, lagging=lagging)
                target.start()
            else:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=60)
                matrix.check_durable(target.store(), live, where, target.no_rename)
            if n % 3 == 0 or kills == points:  # follow-up and restore (costly): every third
                matrix.follow_up(target.root, live, state, where, n)
                matrix.check_durable(target.store(), live, where + "+", target.no_rename)
    finally:
        target.stop()


_ROW = re.compile(r"^\| (?!\*\*)(\S+) \| (\d+) \| (\d+) \|$", re.M)


def _record(result: dict[str, Any]) -> None:
    """Write this batch's row of the crash matrix table in benchmarks/RESULTS.md (the
    other batches' rows stay as their last run wrote them) and the total."""
    path = REPO / "benchmarks" / "RESULTS.md"
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    marker = "\n## Crash matrix\n"
    head, _, rest = text.partition(marker)
    nxt = rest.find("\n## ")
    old, tail = (rest[:nxt], rest[nxt:]) if nxt >= 0 else (rest, "")
    rows = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in _ROW.finditer(old)}
    rows = {f"{k}/{b[0]}": rows.get(f"{k}/{b[0]}", (0, 0)) for k, b in CASES}
    rows[f"{result['kind']}/{result['batch']}"] = (result["kill_points"], result["failures"])
    table = "\n".join(f"| {n} | {k} | {f} |" for n, (k, f) in rows.items())
    total_k, total_f = sum(k for k, _ in rows.values()), sum(f for _, f in rows.values())
    section = (
        f"\n## Crash matrix\n\n`SYNCENGINE_RECORD_RESULTS=1 python -m pytest -q -s "
        f"tests/test_crash_matrix.py` (each batch is a test; the last run of "
        f"{result['batch']}: {time.strftime('%Y-%m-%d')}, {result['seconds']} s, seed "
        f"{result['seed']}, a WAL database in the tree)\n\n"
        f"| kind/batch | kill points | failures |\n|---|---|---|\n{table}\n"
        f"| **total** | **{total_k}** | **{total_f}** |\n"
    )
    path.write_text((head if marker in text else text.rstrip("\n") + "\n") + section + tail)
