"""``durable_root = "s3://BUCKET/PREFIX"`` end to end, against a real S3 server on 127.0.0.1.

The engine behaviour tests marked ``memory`` run on S3 too (the ``[s3]`` durable
kind, tests/conftest.py); these tests cover what only a real configuration has:
the real ``syncengine`` command selecting the backend from ``DATA_DIR`` and the
AWS variables, the requests a pass makes (counted in the server's log), a
multipart upload killed mid-way, and the one-line errors of a missing bucket,
refused credentials and a server that is down.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from syncengine import Engine, config_from_dict
from syncengine.durable import leasing
from syncengine.errors import LeaseLost
from tests.conftest import REPO
from tests.helpers import files
from tests.s3server import CREDENTIALS, Flaky, S3Server

RAW: dict[str, Any] = {
    "adapters": [],
    "adapter": [{"name": "x", "live": "x", "durable": "state/x", "segments": ["logs/*.jsonl"]}],
}
CONFIG = """
adapters = []
[[adapter]]
name = "x"
live = "x"
durable = "state/x"
segments = ["logs/*.jsonl"]
"""


class Deployment:
    """A live tree on disk and a durable root in a bucket of `server`."""

    def __init__(self, base: Path, server: S3Server, bucket: str | None = None) -> None:
        self.base, self.server = base, server
        self.bucket = bucket or server.bucket()
        self.local = base / "local"
        (self.local / "x").mkdir(parents=True)
        self.config = base / "syncengine.toml"
        self.config.write_text(CONFIG)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(
            CREDENTIALS,
            AM_LOCAL=str(self.local),
            HOME=str(self.base / "home"),
            DATA_DIR=f"s3://{self.bucket}/team/one",
            SYNCENGINE_CONFIG=str(self.config),
            AWS_ENDPOINT_URL=self.server.endpoint,
        )
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        env.update(extra)
        return env

    def run(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "syncengine", *args],
            capture_output=True,
            text=True,
            env=env or self.env(),
            timeout=300,
            cwd=self.base,
        )

    def engine(self) -> Engine:
        return Engine(config_from_dict(RAW, env=self.env()))

    def object_keys(self) -> list[str]:
        listed = self.server.client().list_objects_v2(Bucket=self.bucket)
        return sorted(o["Key"] for o in listed.get("Contents", []))

    def open_uploads(self) -> list[str]:
        listed = self.server.client().list_multipart_uploads(Bucket=self.bucket)
        return [u["Key"] for u in listed.get("Uploads", [])]


@pytest.fixture
def dep(tmp_path: Path, s3_server: S3Server) -> Iterator[Deployment]:
    yield Deployment(tmp_path, s3_server)


def _one_line_error(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    hits = [line for line in lines if all(w in line for w in words)]
    assert hits, proc.stderr  # the message, one line (then the run's one-line summary)
    assert len(lines) <= 2 and "Traceback" not in proc.stderr, proc.stderr
    return hits[0]


def test_the_command_checkpoints_to_and_restores_from_a_bucket(dep: Deployment) -> None:
    (dep.local / "x/a.txt").write_text("alpha\n")
    (dep.local / "x/sub").mkdir()
    (dep.local / "x/sub/b.bin").write_bytes(os.urandom(5000))
    (dep.local / "x/logs").mkdir()
    (dep.local / "x/logs/s.jsonl").write_text('{"n": 1}\n')
    proc = dep.run("checkpoint")
    assert proc.returncode == 0, proc.stderr
    keys = dep.object_keys()
    assert "team/one/state/x/a.txt" in keys and "team/one/state/x/sub/b.bin" in keys
    assert any(k.startswith("team/one/state/x/.syncengine/manifest/") for k in keys)
    before = files(dep.local)
    for path in sorted(dep.local.rglob("*"), reverse=True):
        if path.is_file():
            path.unlink()
    proc = dep.run("restore")
    assert proc.returncode == 0, proc.stderr
    assert files(dep.local) == before
    proc = dep.run("verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_status_shows_endpoint_and_bucket_and_no_secret(dep: Deployment) -> None:
    env = dep.env(AWS_SECRET_ACCESS_KEY="s3cr3t-value", AWS_SESSION_TOKEN="t0ken-value")
    proc = dep.run("status", "--settings", env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"endpoint={dep.server.endpoint}" in proc.stdout
    assert f"bucket={dep.bucket}" in proc.stdout
    assert f"s3://{dep.bucket}/team/one/state/x" in proc.stdout
    assert f"s3://{dep.bucket}/team/one/journal" in proc.stdout and "/s3:/" not in proc.stdout
    assert "s3cr3t" not in proc.stdout + proc.stderr and "t0ken" not in proc.stdout


def test_credentials_come_from_a_profile(dep: Deployment) -> None:
    aws = dep.base / "home/.aws"
    aws.mkdir(parents=True)
    (aws / "credentials").write_text(
        "[work]\naws_access_key_id = testing\naws_secret_access_key = testing\n"
    )
    (aws / "config").write_text(
        f"[profile work]\nregion = us-east-1\nendpoint_url = {dep.server.endpoint}\n"
    )
    env = {
        k: v
        for k, v in dep.env().items()
        if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL")
    }
    (dep.local / "x/a.txt").write_text("alpha\n")
    proc = dep.run("checkpoint", env={**env, "AWS_PROFILE": "work"})
    assert proc.returncode == 0, proc.stderr
    assert "team/one/state/x/a.txt" in dep.object_keys()


def test_an_idle_pass_makes_no_request_and_an_append_one_put(dep: Deployment) -> None:
    """Counted in the server's log (every request to the bucket, any method): an idle
    pass asks nothing; appending one line to a transcript (a segment log) makes exactly
    one request, the PUT of the new segment piece (the chain's pieces are found by
    name: no manifest object for an append), in the same engine and from a new
    ``syncengine checkpoint`` process alike, and a restore then has the lines."""
    (dep.local / "x/a.txt").write_text("alpha\n")
    (dep.local / "x/logs").mkdir()
    log = dep.local / "x/logs/s.jsonl"
    log.write_text('{"n": 1}\n' * 50)
    eng = dep.engine()
    assert eng.checkpoint().ok
    assert eng.checkpoint().ok
    count = len(dep.server.requests(dep.bucket))
    assert eng.checkpoint().ok
    assert dep.server.requests(dep.bucket)[count:] == []
    with log.open("a") as f:
        f.write('{"n": 2}\n')
    report = eng.checkpoint()
    assert report.ok
    made = dep.server.requests(dep.bucket)[count:]
    assert [m for m, _, _ in made] == ["PUT"], made
    assert "/.syncengine/segments/logs/s.jsonl.d/" in made[0][1]
    # the same from a new process each time, but for the one listing a process makes
    # to know the root is reachable (docs/IDLE.md)
    count = len(dep.server.requests(dep.bucket))
    assert dep.run("checkpoint").returncode == 0
    made = dep.server.requests(dep.bucket)[count:]
    assert [(m, "list-type=2" in u) for m, u, _ in made] == [("GET", True)], made
    count = len(dep.server.requests(dep.bucket))
    with log.open("a") as f:
        f.write('{"n": 3}\n')
    assert dep.run("checkpoint").returncode == 0
    made = dep.server.requests(dep.bucket)[count:]
    assert [m for m, u, _ in made if "list-type=2" not in u] == ["PUT"], made
    expected = log.read_bytes()
    log.unlink()
    assert dep.engine().restore().ok
    assert log.read_bytes() == expected


def test_a_pass_after_the_fresh_window_checks_the_lease_and_a_fenced_one_stops(
    dep: Deployment,
) -> None:
    """The append's single PUT holds only while the lease is fresh (a quarter of
    `lease_seconds`, `leasing.fresh`): once that has passed, the pass's first write is
    preceded by one HEAD of the lease object, and after another instance took the lease
    over that HEAD fences this one before it writes anything."""
    window = 2.0 * leasing.FRESH  # lease_seconds = 2
    log = dep.local / "x/logs/s.jsonl"
    log.parent.mkdir()
    log.write_text('{"n": 1}\n')
    eng = Engine(config_from_dict({**RAW, "lease_seconds": 2.0}, env=dep.env()))
    assert eng.checkpoint().ok
    time.sleep(window)  # the window passing is what is tested (no event to wait for)
    with log.open("a") as f:
        f.write('{"n": 2}\n')
    count = len(dep.server.requests(dep.bucket))
    assert eng.checkpoint().ok
    made = dep.server.requests(dep.bucket)[count:]
    assert made[0][0] == "HEAD" and "/.syncengine/lease/" in made[0][1], made  # the check
    # besides the lease (a renewal comes too when a slow machine made it due: its delete
    # is a POST ?delete naming the key in its body): the piece
    lease_dir = "/.syncengine/lease/"
    others = [(m, p) for m, p, _ in made if lease_dir not in p and not p.endswith("?delete")]
    assert len(others) == 1 and others[0][0] == "PUT" and "/segments/" in others[0][1], made
    other = dep.base / "other"
    other.mkdir()
    took = dep.run("restore", "--takeover", env=dep.env(AM_LOCAL=str(other)))
    assert took.returncode == 0, took.stderr
    time.sleep(window)
    with log.open("a") as f:
        f.write('{"n": 3}\n')
    count = len(dep.server.requests(dep.bucket))
    with pytest.raises(LeaseLost):
        eng.checkpoint()
    made = dep.server.requests(dep.bucket)[count:]
    assert made and made[0][0] == "HEAD", made
    assert [p for m, p, _ in made if m == "PUT"] == [], made  # not even the log piece
    assert files(other / "x") == {"logs/s.jsonl": b'{"n": 1}\n{"n": 2}\n'}


def test_a_multipart_upload_killed_midway_leaves_no_open_upload(dep: Deployment) -> None:
    big = dep.local / "x/big.bin"
    with big.open("wb") as f:
        for _ in range(80):
            f.write(os.urandom(1024 * 1024))
    proc = subprocess.Popen(
        [sys.executable, "-m", "syncengine", "checkpoint"],
        env=dep.env(),
        cwd=dep.base,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not any("partNumber=" in p for _, p, _ in dep.server.requests(dep.bucket)):
        assert proc.poll() is None, "the checkpoint ended before uploading a part"
        assert time.monotonic() < deadline, "no part uploaded"
        time.sleep(0.01)  # polling the server's log for the first part, not a guess
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert dep.open_uploads() == ["team/one/state/x/big.bin"]
    done = dep.run("checkpoint")
    assert done.returncode == 0, done.stderr
    assert dep.open_uploads() == []
    data = big.read_bytes()
    big.unlink()
    assert dep.run("restore").returncode == 0
    assert big.read_bytes() == data


def test_a_missing_bucket_is_one_line_and_exit_1(dep: Deployment) -> None:
    (dep.local / "x/a.txt").write_text("alpha\n")
    env = dep.env(DATA_DIR="s3://no-such-bucket/p")
    line = _one_line_error(dep.run("checkpoint", env=env), "no-such-bucket", "does not exist")
    assert "create it" in line


def test_a_server_that_is_down_is_one_line_and_exit_1(dep: Deployment) -> None:
    (dep.local / "x/a.txt").write_text("alpha\n")
    env = dep.env(AWS_ENDPOINT_URL="http://127.0.0.1:9")  # discard: nothing listens
    _one_line_error(dep.run("checkpoint", env=env), dep.bucket, "cannot reach")


def test_refused_credentials_are_one_line_and_exit_1(tmp_path: Path) -> None:
    """A server that checks signatures (moto with IAM authentication on) and knows no key."""
    server = S3Server(tmp_path / "auth.log", env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    try:
        dep = Deployment(tmp_path / "d", server, bucket="locked-bucket")
        (dep.local / "x/a.txt").write_text("alpha\n")
        _one_line_error(
            dep.run("checkpoint"), "locked-bucket", "refused the credentials", "AWS_ACCESS_KEY_ID"
        )
    finally:
        server.stop()


def test_without_the_extra_the_error_names_it(dep: Deployment, tmp_path: Path) -> None:
    """obstore hidden (a module that fails to import shadows it): one line, the extra."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "obstore.py").write_text("raise ImportError('No module named obstore')\n")
    env = dep.env()
    env["PYTHONPATH"] = os.pathsep.join([str(shadow), env["PYTHONPATH"]])
    (dep.local / "x/a.txt").write_text("alpha\n")
    proc = dep.run("checkpoint", env=env)
    assert proc.returncode == 2, proc.stderr
    assert "pip install -e '.[s3]'" in proc.stderr and "Traceback" not in proc.stderr
    local_root = {**env, "DATA_DIR": str(tmp_path / "data")}
    assert dep.run("status", env=local_root).returncode == 0  # the core runs without it


def _rewrite(dep: Deployment, trial: int, versions: dict[str, set[bytes]]) -> None:
    """Trial `trial`'s changes: ten small files rewritten, a line appended to the log, and
    (every other trial) the large file's first MiB changed, so a pass has uploads to do."""
    (dep.local / "x/logs").mkdir(exist_ok=True)
    with (dep.local / "x/logs/s.jsonl").open("a") as f:
        f.write(f'{{"trial": {trial}}}\n')
    for i in range(10):
        path = dep.local / f"x/f{i}.txt"
        path.write_bytes(f"trial {trial} file {i}\n".encode() * (i + 1))
    big = dep.local / "x/big.bin"
    if trial % 2 == 0:
        data = bytearray(big.read_bytes() if big.exists() else os.urandom(65 * 1024 * 1024))
        data[: 1024 * 1024] = os.urandom(1024 * 1024)
        big.write_bytes(bytes(data))
    for path in (dep.local / "x").rglob("*"):
        if path.is_file():
            versions.setdefault(path.relative_to(dep.local).as_posix(), set()).add(
                path.read_bytes()
            )


def _restored(dep: Deployment, name: str) -> dict[str, bytes]:
    """Restore the bucket into a fresh local root (a state directory of its own)."""
    root = dep.base / name
    root.mkdir()
    # the killed checkpoint never released the lease: this verifier takes it over
    proc = dep.run("restore", "--takeover", env=dep.env(AM_LOCAL=str(root)))
    assert proc.returncode == 0, proc.stderr
    return files(root)


@pytest.mark.slow
def test_checkpoints_killed_at_random_requests_restore_consistently(dep: Deployment) -> None:
    """SIGKILL of a real checkpoint after a random number of requests (the server's log
    says when), mid-multipart-upload included: a restore right after gives, for each
    file, one whole version it had and a log that is a prefix of the live one; the next
    complete pass leaves no upload open and restores exactly the live tree."""
    import random

    rng = random.Random(15)
    versions: dict[str, set[bytes]] = {}
    left_open = 0  # kills that interrupted a multipart upload
    for trial in range(8):
        _rewrite(dep, trial, versions)
        start = len(dep.server.requests(dep.bucket))
        kill_after = rng.randint(1, 21)  # a pass with the large file: ~22 requests
        proc = subprocess.Popen(
            [sys.executable, "-m", "syncengine", "checkpoint"],
            env=dep.env(),
            cwd=dep.base,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while proc.poll() is None and len(dep.server.requests(dep.bucket)) - start < kill_after:
            time.sleep(0.005)  # polling the server's log for the request count
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        left_open += bool(dep.open_uploads())
        restored = _restored(dep, f"restored-{trial}")
        live_log = (dep.local / "x/logs/s.jsonl").read_bytes()
        for rel, data in restored.items():
            if rel == "x/logs/s.jsonl":
                assert live_log.startswith(data) and data.endswith(b"\n"), (trial, data)
            else:
                assert data in versions[rel], (trial, rel, len(data))
    assert left_open >= 1, "no kill landed in a multipart upload"
    done = dep.run("checkpoint")
    assert done.returncode == 0, done.stderr
    assert dep.open_uploads() == []
    assert _restored(dep, "restored-final") == files(dep.local)


def test_throttling_is_retried_with_backoff(dep: Deployment) -> None:
    """Every other request answered 503 SlowDown: retried, the checkpoint completes."""
    (dep.local / "x/a.txt").write_text("alpha\n")
    (dep.local / "x/b.txt").write_text("beta\n")
    flaky = Flaky(dep.server, every=2)
    try:
        proc = dep.run("checkpoint", env=dep.env(AWS_ENDPOINT_URL=flaky.endpoint))
    finally:
        flaky.stop()
    assert proc.returncode == 0, proc.stderr
    assert "team/one/state/x/b.txt" in dep.object_keys()


def test_a_server_that_keeps_failing_is_one_line_after_bounded_retries(dep: Deployment) -> None:
    (dep.local / "x/a.txt").write_text("alpha\n")
    flaky = Flaky(dep.server, every=0)
    try:
        t0 = time.monotonic()
        proc = dep.run("checkpoint", env=dep.env(AWS_ENDPOINT_URL=flaky.endpoint))
        took = time.monotonic() - t0
    finally:
        flaky.stop()
    _one_line_error(proc, dep.bucket, "kept failing", "try again later")
    assert took < 60, took


def test_the_main_job_runs_on_a_bucket(dep: Deployment) -> None:
    """``syncengine run -- COMMAND`` (the container entrypoint) with one config line and
    the AWS variables: restore, the command, a final checkpoint, all in the bucket."""
    (dep.local / "x/a.txt").write_text("before\n")
    assert dep.run("checkpoint").returncode == 0
    (dep.local / "x/a.txt").unlink()  # a fresh container: the run restores it first
    script = f"cat {dep.local}/x/a.txt > {dep.base}/seen; echo after >> {dep.local}/x/a.txt"
    proc = dep.run("run", "--", "sh", "-c", script)
    assert proc.returncode == 0, proc.stderr
    assert (dep.base / "seen").read_text() == "before\n"
    body = dep.server.client().get_object(Bucket=dep.bucket, Key="team/one/state/x/a.txt")
    assert body["Body"].read() == b"before\nafter\n"
