"""A real ``rclone mount --vfs-cache-mode writes``: detected, confirmed, or caught at start.

rclone (from Debian) over a local directory playing the bucket
(tests/rclone_mount.py).  In writes mode close returns before the upload; the
probe must say so, and where rclone's remote control is on, a checkpoint
returns only once rclone reports its uploads done.  Without it, killing
rclone with its cache dropped right after a checkpoint loses that checkpoint:
the next one must notice and publish it again.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from syncengine.durable.posix.probe import probe
from tests.helpers import files
from tests.rclone_mount import RcloneMount
from tests.test_rclone import Deployment


def write_tree(d: Deployment, n: int) -> None:
    for i in range(n):
        d.write(f"d{i % 4}/f{i:02d}.json", f'{{"file": {i}}}\n' * (i + 1))
    d.write("sessions/t.jsonl", '{"turn": 1}\n')


def restored_from_bucket(d: Deployment) -> dict[str, bytes]:
    """A restore into an empty tree straight from the backing directory (the bucket)."""
    target = d.base / "restored"
    shutil.rmtree(target, ignore_errors=True)
    d.cli("restore", data=d.rclone.backing, local=target)
    return files(target / "x")


def test_probe_recognises_rclone_write_back_and_its_remote_control(
    rclone_factory: Callable[..., RcloneMount],
) -> None:
    off = probe(rclone_factory("off", name="off").mountpoint)
    assert (off.client, off.write_back) == ("rclone", False), off
    writes = probe(rclone_factory("writes", name="writes").mountpoint)
    assert (writes.client, writes.write_back, writes.write_back_delay_s) == ("rclone", True, 5.0)
    assert writes.rclone_rc is None and "no remote control" in writes.client_detail
    rc_mount = rclone_factory("writes", name="rc", rc=True, write_back="2s")
    with_rc = probe(rc_mount.mountpoint)
    assert (with_rc.write_back, with_rc.write_back_delay_s) == (True, 2.0)
    assert with_rc.rclone_rc == rc_mount.rc_addr
    assert "WRITE-BACK" in with_rc.describe()


def test_rclone_killed_with_its_cache_right_after_a_checkpoint_is_noticed(
    tmp_path: Path, rclone_factory: Callable[..., RcloneMount]
) -> None:
    """The measured incident: 21 files checkpointed, rclone killed with its cache before
    its write-back delay (5 s), remounted.  The next checkpoint must notice and publish them
    again; status must say what a write-back mount without a remote control means."""
    d = Deployment(tmp_path, rclone_factory("writes"))
    write_tree(d, 20)
    d.cli("checkpoint")
    expected = files(d.live)
    d.rclone.kill()
    d.rclone.mount()
    out = d.cli("checkpoint")
    assert "durable.behind adapter=x" in out.stderr, out.stderr
    assert "published 21 file(s)" in out.stdout, out.stdout
    status = d.cli("status").stdout
    assert "WARNING: write-back mount, rclone" in status and "loss window" in status, status
    d.rclone.settle()  # land what rclone holds in its cache
    assert restored_from_bucket(d) == expected


def test_a_checkpoint_returns_once_rclone_reports_its_uploads_done(
    tmp_path: Path, rclone_factory: Callable[..., RcloneMount]
) -> None:
    """With rclone's remote control on, a pass waits until rclone reports nothing queued:
    right after a checkpoint returns, the bucket holds every file it published; after a
    final checkpoint it holds the manifest too, so a restore from the bucket is whole."""
    d = Deployment(tmp_path, rclone_factory("writes", rc=True, write_back="2s"))
    write_tree(d, 12)
    d.cli("checkpoint")
    bucket = d.rclone.backing / "state/x"
    live = {k: v for k, v in files(d.live).items() if not k.startswith("sessions/")}
    assert {k: v for k, v in files(bucket).items() if k in live} == live
    status = d.cli("status").stdout
    assert f"remote control at {d.rclone.rc_addr} reports its uploads done" in status, status
    (d.live / "d0" / "f00.json").write_text("changed\n")
    d.cli("checkpoint", "--final")
    assert restored_from_bucket(d) == files(d.live)
