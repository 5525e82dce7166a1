"""An s3:// durable root is one store: its endpoint is part of what it is, and even an idle
checkpoint reaches it once (issue 28, "never silently wrong").

Real moto servers on 127.0.0.1 (tests/s3server.py), the real command as a child process.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers import files
from tests.s3server import S3Server
from tests.test_s3 import Deployment, _one_line_error


def test_another_endpoint_is_another_store_and_gets_everything(
    tmp_path: Path, s3_server: S3Server
) -> None:
    """The same bucket name and prefix, the same state dir, another server: the state dir's
    indexes are the first server's, so everything is published again and the new store
    restores whole.  Fails with "published 0 file(s)" (and an empty second store, whose
    restore brings nothing back) when the endpoint is not part of the root's identity."""
    other = S3Server(tmp_path / "other.log")
    try:
        dep = Deployment(tmp_path / "d", s3_server)
        other.client().create_bucket(Bucket=dep.bucket)
        (dep.local / "x/a.txt").write_text("alpha\n")
        (dep.local / "x/b.txt").write_text("beta\n")
        assert dep.run("checkpoint").returncode == 0
        moved = dep.run("checkpoint", env=dep.env(AWS_ENDPOINT_URL=other.endpoint))
        assert moved.returncode == 0, moved.stderr
        assert "x: published 2 file(s)" in moved.stdout, moved.stdout
        assert f"not s3://{dep.bucket}/team/one at {other.endpoint}" in moved.stderr
        assert "/s3:" not in moved.stdout + moved.stderr  # the URL, never the placeholder
        shutil.rmtree(dep.local / "x")
        back = dep.run("restore", env=dep.env(AWS_ENDPOINT_URL=other.endpoint))
        assert back.returncode == 0, back.stderr
        assert files(dep.local / "x") == {"a.txt": b"alpha\n", "b.txt": b"beta\n"}
    finally:
        other.stop()


def test_an_idle_checkpoint_reaches_the_store_and_says_when_it_cannot(tmp_path: Path) -> None:
    """Nothing changed, so nothing is published; the store is still asked once, and a
    server that went away is one line, exit 1.  Fails with "published 0 file(s)" and
    exit 0 (no request at all) when an idle pass never reaches the store."""
    server = S3Server(tmp_path / "own.log")
    try:
        dep = Deployment(tmp_path / "d", server)
        (dep.local / "x/a.txt").write_text("alpha\n")
        assert dep.run("checkpoint").returncode == 0
        before = len(server.requests(dep.bucket))
        idle = dep.run("checkpoint")
        assert idle.returncode == 0, idle.stderr
        assert len(server.requests(dep.bucket)) > before  # reached, though nothing changed
    finally:
        server.stop()
    _one_line_error(dep.run("checkpoint"), "cannot reach", server.endpoint, dep.bucket)
