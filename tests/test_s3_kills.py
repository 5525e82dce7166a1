"""Checkpoints SIGKILLed mid multipart upload, at least 50 times (issue 15), in bounded time.

Each trial changes a MiB of a large file and the small files, starts a
real ``syncengine checkpoint`` process, waits in the server's request log for the
upload to begin (the ``?uploads`` POST) and kills the process after a random
number of further requests, so the kill lands between the first part and the
completion.  Small uploads keep it fast: the child runs with the S3 minimum part
size (5 MiB) and a single-PUT limit of 8 MiB, set on the modules' own constants
before the command starts, so a 9 MiB file is two parts (one large file of two parts is
what a kill between the initiation, the parts and the completion needs; a second one
and a third part doubled the bytes each trial sends through moto).  After every kill a
restore (in process, into a fresh root, taking the killed holder's lease over)
gives each file one whole version it had and a log that is a prefix of the live
one; every fifth trial a complete
checkpoint follows, which must leave no upload open and restore the live tree
exactly.  The 50 kills are five tests of ten (each its own bucket and seed), so
they run in parallel workers.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from syncengine import Engine, config_from_dict
from tests.helpers import files
from tests.s3server import S3Server
from tests.test_s3 import RAW, Deployment

SHARES = 5  # independent tests of KILLS kills each (own bucket and seed): run in parallel
KILLS = 10  # 50 in all
MAX_TRIALS = 16  # a kill can land after the completion: trials until KILLS landed inside
BIG = 9 * 2**20  # two parts of PART_SIZE, over SINGLE_PUT_MAX
SMALL_PARTS = r"""
import sys
from syncengine.durable.s3 import multipart, store
multipart.PART_SIZE = 5 * 2**20  # the S3 minimum (but for the last part)
store.SINGLE_PUT_MAX = 8 * 2**20
from syncengine.cli import main
sys.exit(main(["checkpoint"]))
"""


@pytest.fixture
def dep(tmp_path: Path, s3_server: S3Server) -> Deployment:
    return Deployment(tmp_path, s3_server)


def _change(dep: Deployment, trial: int, rng: random.Random, seen: dict[str, set[bytes]]) -> None:
    """One MiB of each large file rewritten, the small files rewritten, a log line added;
    every version of each file is kept in `seen`."""
    root = dep.local / "x"
    (root / "logs").mkdir(exist_ok=True)
    with (root / "logs/s.jsonl").open("a") as f:
        f.write(f'{{"trial": {trial}}}\n')
    for i in range(3):
        (root / f"f{i}.txt").write_text(f"trial {trial} file {i}\n" * (i + 1))
    for name in ("big.bin",):
        path = root / name
        data = bytearray(path.read_bytes() if path.exists() else os.urandom(BIG))
        at = rng.randrange(0, BIG - 2**20)
        data[at : at + 2**20] = os.urandom(2**20)
        path.write_bytes(bytes(data))
    for path in root.rglob("*"):
        if path.is_file():
            seen.setdefault(path.relative_to(dep.local).as_posix(), set()).add(path.read_bytes())


def _kill_mid_upload(dep: Deployment, rng: random.Random) -> None:
    """Start a checkpoint; SIGKILL it 0-2 requests after its multipart upload began."""
    start = len(dep.server.requests(dep.bucket))
    proc = subprocess.Popen(
        [sys.executable, "-c", SMALL_PARTS],
        env=dep.env(),
        cwd=dep.base,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    after = rng.randint(0, 2)  # the initiation, the first part, the second: not the completion
    deadline = time.monotonic() + 60
    while proc.poll() is None:
        made = [p for _, p, _ in dep.server.requests(dep.bucket)[start:]]
        began = next((i for i, p in enumerate(made) if p.endswith("?uploads")), None)
        if began is not None and len(made) - began - 1 >= after:
            break
        assert time.monotonic() < deadline, "no multipart upload began"
        time.sleep(0.002)  # polling the server's log, which says when
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def _restore(dep: Deployment, root: Path) -> dict[str, bytes]:
    root.mkdir()
    eng = Engine(config_from_dict(RAW, env=dep.env(AM_LOCAL=str(root))))
    # a new instance (its own state dir): the killed checkpoint never released the lease,
    # and this verifier knows it is dead, so it takes it over (no wait for the expiry)
    # and releases it, so the next checkpoint need not wait for it either
    report = eng.restore(takeover=True)
    eng.lease.release()
    assert report.ok, report.errors
    return files(root)


@pytest.mark.slow
@pytest.mark.parametrize("share", range(SHARES))
def test_fifty_kills_mid_multipart_upload_restore_consistently(dep: Deployment, share: int) -> None:
    rng = random.Random(int(os.environ.get("SYNCENGINE_CRASH_SEED", "1550")) + share)
    seen: dict[str, set[bytes]] = {}
    kills = trials = 0
    t0 = time.monotonic()
    while kills < KILLS:
        assert trials < MAX_TRIALS, f"only {kills} of {trials} kills landed mid-upload"
        _change(dep, trials, rng, seen)
        _kill_mid_upload(dep, rng)
        kills += bool(dep.open_uploads())
        restored = _restore(dep, dep.base / f"restored-{trials}")
        live_log = (dep.local / "x/logs/s.jsonl").read_bytes()
        for rel, data in restored.items():  # whole versions only, never a torn object
            if rel == "x/logs/s.jsonl":
                assert live_log.startswith(data) and data.endswith(b"\n"), (trials, rel)
            else:
                assert data in seen[rel], (trials, rel, len(data))
        trials += 1
        if trials % 5 == 0:  # the next complete run aborts what the kills left open
            done = dep.run("checkpoint")
            assert done.returncode == 0, done.stderr
            assert dep.open_uploads() == [], trials
            assert _restore(dep, dep.base / f"complete-{trials}") == files(dep.local)
    done = dep.run("checkpoint")
    assert done.returncode == 0, done.stderr
    assert dep.open_uploads() == []
    assert _restore(dep, dep.base / "final") == files(dep.local)
    print(f"\n{kills} kills mid-upload in {trials} trials, {time.monotonic() - t0:.1f} s")
