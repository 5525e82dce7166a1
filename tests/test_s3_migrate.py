"""``syncengine migrate`` with ``durable_root = "s3://BUCKET/PREFIX"``, against a real S3 server.

The old rsync layout's trees are already in the bucket (uploaded here with rclone's
metadata, as a mount of the bucket writes them), the legacy home named by
``home = "s3://BUCKET/PREFIX/home"``.  The real command migrates them: the
checkpoints get the files and a manifest, the legacy directories are kept (Gemini's
in place, Hermes's renamed to its rollback name: copies and deletes per object),
Codex's cache files go to quarantine, a second run and a dry run write nothing
(counted in the server's log), and a restore into an empty local root brings the
files back.  A migrate killed in the middle of a rename and run again ends with
every object under the new name exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncengine.durable import manifest
from syncengine.durable.s3.store import S3Store
from tests.conftest import DESIGN_VARIABLES, REPO
from tests.helpers import files
from tests.s3server import CREDENTIALS, S3Server

OLD = (time.time_ns() - 3600 * 10**9) // 10**9 * 10**9 + 123456789
WRITES = ("PUT", "POST", "DELETE")
LEGACY = {
    "home/.gemini/settings.json": b"{}",
    "home/.gemini/tmp/slug/chats/session-1-abcd1234.jsonl": b'{"t":1}\n',
    "home/.hermes/config.yaml": b"a: 1\n",
    "home/.hermes/memories/MEMORY.md": b"remember\n",
    "state/codex/history.jsonl": b'{"h":1}\n',
    "state/codex/logs_2.sqlite": b"cache",
    "state/codex/goals_1.sqlite-wal": b"wal",
}


class Bucket:
    """A local root and a durable root ``s3://BUCKET/data`` with the legacy home in it."""

    def __init__(self, base: Path, server: S3Server, adapters: str) -> None:
        self.base, self.server = base, server
        self.bucket = server.bucket()
        self.client = server.client()
        self.local = base / "local"
        self.local.mkdir()
        self.config = base / "syncengine.toml"
        self.config.write_text(f'adapters = {adapters}\nhome = "s3://{self.bucket}/data/home"\n')

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("AWS_") and k not in DESIGN_VARIABLES
        }
        env.update(
            CREDENTIALS,
            AM_LOCAL=str(self.local),
            HOME=str(self.base / "home"),  # this machine's: the legacy one is in the bucket
            DATA_DIR=f"s3://{self.bucket}/data",
            SYNCENGINE_CONFIG=str(self.config),
            AWS_ENDPOINT_URL=self.server.endpoint,
        )
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        env.update(extra)
        return env

    def run(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "syncengine", *args],
            capture_output=True,
            text=True,
            env=self.env(**extra),
            timeout=300,
            cwd=self.base,
        )

    def upload(self, rel: str, data: bytes, *, metadata: bool = True) -> None:
        """An object as an rclone mount writes a file (mode and mtime as metadata)."""
        meta = {"mtime": f"{OLD // 10**9}.{OLD % 10**9:09d}", "mode": "100640"}
        self.client.put_object(
            Bucket=self.bucket, Key=f"data/{rel}", Body=data, Metadata=meta if metadata else {}
        )

    def objects(self, under: str = "") -> dict[str, bytes]:
        """Key (below data/) -> bytes of every object under ``data/<under>``."""
        client, out = self.client, {}
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"data/{under}"
        )
        for page in pages:
            for obj in page.get("Contents", []):
                body = client.get_object(Bucket=self.bucket, Key=obj["Key"])["Body"].read()
                out[obj["Key"].removeprefix("data/")] = body
        return out

    def writes(self, since: int) -> list[tuple[str, str, int]]:
        return [r for r in self.server.requests(self.bucket)[since:] if r[0] in WRITES]

    def store(self, rel: str) -> S3Store:
        return S3Store(self.server.location(self.bucket, f"data/{rel}"))


@pytest.fixture
def old(tmp_path: Path, s3_server: S3Server) -> Iterator[Bucket]:
    b = Bucket(tmp_path, s3_server, '["codex", "gemini", "hermes"]')
    for rel, data in LEGACY.items():
        b.upload(rel, data, metadata=rel != "home/.hermes/memories/MEMORY.md")
    yield b


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_a_legacy_tree_in_the_bucket_migrates_and_restores(old: Bucket) -> None:
    url = f"s3://{old.bucket}/data"
    count = len(old.server.requests(old.bucket))
    dry = _ok(old.run("migrate", "--dry-run"))
    assert old.writes(count) == [], "a dry run writes nothing"
    assert old.objects() == LEGACY
    assert f"would copy {url}/home/.hermes/config.yaml -> hermes:config.yaml" in dry
    assert f"would rename {url}/home/.hermes -> {url}/home/.hermes.pre-agent-state" in dry
    assert "/s3:/" not in dry

    out = _ok(old.run("migrate"))
    assert f"{url}/home/.hermes is in the bucket: no link" in out
    now = old.objects()
    # Hermes: copied into its checkpoint, the legacy directory renamed (kept whole)
    assert now["state/hermes/config.yaml"] == b"a: 1\n"
    assert now["state/hermes/memories/MEMORY.md"] == b"remember\n"
    assert not any(k.startswith("home/.hermes/") for k in now)
    assert now["home/.hermes.pre-agent-state/config.yaml"] == b"a: 1\n"
    assert now["home/.hermes.pre-agent-state/memories/MEMORY.md"] == b"remember\n"
    # Gemini: copied, and kept in place as the rollback copy
    assert now["state/gemini/settings.json"] == b"{}"
    assert now["home/.gemini/settings.json"] == b"{}"
    # Codex: the cache files moved to quarantine, the rest in place
    quarantine = "state/codex/db-backups/am-quarantine"
    assert now[f"{quarantine}/logs_2.sqlite"] == b"cache"
    assert now[f"{quarantine}/goals_1.sqlite-wal"] == b"wal"
    assert "state/codex/logs_2.sqlite" not in now and "state/codex/history.jsonl" in now
    # the rename kept mode and mtime (CopyObject copies the metadata)
    kept = old.store("home/.hermes.pre-agent-state").head("config.yaml")
    assert kept is not None and (kept.mtime_ns, kept.mode) == (OLD, 0o640)
    entries = manifest.load(old.store("state/hermes")).entries
    assert set(entries) == {"config.yaml", "memories/MEMORY.md"}
    assert (entries["config.yaml"].mtime_ns, entries["config.yaml"].mode) == (OLD, 0o640)
    assert "tmp/slug/chats/session-1-abcd1234.jsonl" in (
        manifest.load(old.store("state/gemini")).entries
    )

    count = len(old.server.requests(old.bucket))
    again = _ok(old.run("migrate"))
    assert "nothing to do (already migrated)" in again
    assert old.writes(count) == [], "a second run writes nothing"
    assert old.objects() == now

    fresh = old.base / "fresh"
    fresh.mkdir()
    _ok(old.run("restore", AM_LOCAL=str(fresh)))
    restored = files(fresh)
    assert restored["hermes/config.yaml"] == b"a: 1\n"
    assert restored["hermes/memories/MEMORY.md"] == b"remember\n"
    assert restored["agent-state/gemini-home/.gemini/settings.json"] == b"{}"
    assert os.stat(fresh / "hermes/config.yaml").st_mtime_ns == OLD


def test_status_names_the_legacy_home_by_its_url(old: Bucket) -> None:
    out = _ok(old.run("status", "--settings"))
    assert f"s3://{old.bucket}/data/home  (config {old.config})" in out and "/s3:" not in out


def test_a_local_home_is_copied_into_the_bucket(tmp_path: Path, s3_server: S3Server) -> None:
    """No ``home`` in the bucket: the legacy tree under $HOME on this machine is read
    from disk, as with a mount, and copied into the checkpoint in the bucket (kept)."""
    b = Bucket(tmp_path, s3_server, '["gemini"]')
    b.config.write_text('adapters = ["gemini"]\n')
    legacy = b.base / "home/.gemini/settings.json"
    legacy.parent.mkdir(parents=True)
    legacy.write_text('{"a": 1}')
    os.utime(legacy, ns=(OLD, OLD))
    _ok(b.run("migrate"))
    assert b.objects() == {"state/gemini/settings.json": b'{"a": 1}'} | {
        k: v for k, v in b.objects().items() if "/.syncengine/" in k
    }
    entry = manifest.load(b.store("state/gemini")).entries["settings.json"]
    assert entry.mtime_ns == OLD and legacy.exists()
    assert "nothing to do (already migrated)" in _ok(b.run("migrate"))


def test_a_home_in_another_bucket_is_refused(old: Bucket) -> None:
    old.config.write_text('adapters = ["gemini"]\nhome = "s3://other-bucket/home"\n')
    proc = old.run("migrate")
    assert proc.returncode == 2, proc.stderr
    assert "other-bucket" in proc.stderr and "Traceback" not in proc.stderr


def _kill_when(
    proc: subprocess.Popen[bytes], b: Bucket, since: int, method: str, path: str
) -> None:
    """SIGKILL `proc` once the server has logged 20 `method` requests whose path starts
    with `path` (polling the server's log: the event itself, not a guess at the time)."""
    deadline = time.monotonic() + 120
    while sum(m == method and p.startswith(path) for m, p, _ in b.server.requests()[since:]) < 20:
        assert proc.poll() is None, "migrate ended before it was killed"
        assert time.monotonic() < deadline, f"no {method} {path}"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


@pytest.mark.parametrize("phase", ["copying", "deleting"])
def test_a_rename_killed_midway_is_completed_by_the_next_run(
    tmp_path: Path, s3_server: S3Server, phase: str
) -> None:
    b = Bucket(tmp_path, s3_server, '["hermes"]')
    legacy = {f"home/.hermes/f{i:03d}.txt": f"file {i}\n".encode() for i in range(150)}
    for rel, data in legacy.items():
        b.upload(rel, data)
    since = len(s3_server.requests())
    proc = subprocess.Popen(
        [sys.executable, "-m", "syncengine", "migrate"],
        env=b.env(),
        cwd=b.base,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if phase == "copying":  # CopyObject: a PUT to the new key
        _kill_when(proc, b, since, "PUT", f"/{b.bucket}/data/home/.hermes.pre-agent-state/")
    else:  # the deletes of the old keys, one DeleteObjects request each
        _kill_when(proc, b, since, "POST", f"/{b.bucket}?delete")
    left, moved = b.objects("home/.hermes/"), b.objects("home/.hermes.pre-agent-state/")
    if phase == "copying":  # the old name stays whole until every copy is confirmed
        assert len(left) == 150 and 0 < len(moved) < 150, (len(left), len(moved))
    else:
        assert 0 < len(left) < 150 and len(moved) == 150, (len(left), len(moved))

    out = _ok(b.run("migrate"))
    assert "complete the rename a killed run began" in out
    assert "done: recorded" in out  # the first run was killed before its manifest
    assert len(manifest.load(b.store("state/hermes")).entries) == 150
    now = b.objects("home/")
    want = {k.replace("/.hermes/", "/.hermes.pre-agent-state/"): v for k, v in legacy.items()}
    assert now == want, "every object exactly once, under the new name"
    assert "nothing to do (already migrated)" in _ok(b.run("migrate"))
    fresh = b.base / "fresh"
    fresh.mkdir()
    _ok(b.run("restore", AM_LOCAL=str(fresh)))
    assert files(fresh) == {k.replace("home/.hermes/", "hermes/"): v for k, v in legacy.items()}
