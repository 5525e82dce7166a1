"""A write-back mount that loses what it acknowledged: the index must never stay ahead.

The bucket emulator in write-back mode (tests/fusebucket.py ``--write-back``)
acknowledges a close at once and lands the object later, out of order, and
loses what has not landed when it is killed: rclone ``--vfs-cache-mode
writes`` with its cache dropped.  The engine must notice at the next start
(a new mount instance), rebuild or repair its index, publish again, and end
with a complete restore; a pass between starts must not look at the bucket.

The kill points, and their combination with the lease (issue 29: lease objects
lost with the uploads), also run ``[rclone-s3]``: real ``rclone mount
--vfs-cache-mode writes`` over the test S3 server, killed with its cache dropped,
as a container stop does.  The other store kinds have no write-back to lose (a
directory and ``s3://`` straight hold what a close or a PUT returned), so their
kill points are the crash matrix's and the design suite's.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from syncengine import Engine, config_from_dict
from syncengine.config import Config
from syncengine.durable.posix.store import PosixStore
from syncengine.durable.store import Store
from tests.bucket_mount import BucketMount, fuse_available
from tests.helpers import files
from tests.rclone_mount import RcloneMount, require_rclone, s3_remote
from tests.s3server import S3Server

LIVE = "x"
DUR = "state/x"
WRITE_BACK_S = 0.15
JITTER_S = 0.5  # uploads land out of order: a manifest object may land before its files
KILL_POINTS = 24
RCLONE_WRITE_BACK = "1s"  # rclone's --vfs-write-back: a kill right after a return loses all
# kill points per kind, and the window a kill is drawn from (seconds after the return).
# rclone's 4: one right after the return (everything lost), three while uploads land (a
# part lost); its losses are rclone's own, so what the emulator's 24 points vary (the
# order uploads land in) need not be drawn again over a real mount, at 6 s a point.
KILLS = {"bucket": (KILL_POINTS, WRITE_BACK_S + JITTER_S), "rclone-s3": (4, 1.5)}


class Deployment:
    """A live tree, a write-back mount that can be killed and remounted, engines: the
    bucket emulator, or (`server`) real rclone in writes mode over a bucket of it."""

    def __init__(self, base: Path, server: S3Server | None = None, **mount: Any) -> None:
        self.base = base
        self.live = base / "local" / LIVE
        self.live.mkdir(parents=True)
        self.backing, self.mnt = base / "bucket", base / "data"
        self.options = {
            "write_back_s": WRITE_BACK_S,
            "write_back_jitter_s": JITTER_S,
            "stats": True,
            **mount,
        }
        self.server, self.bucket = server, server.bucket() if server is not None else ""
        self.mount: BucketMount | RcloneMount = self._mount()
        self.restores = 0
        self.made: list[Engine] = []

    def _mount(self) -> BucketMount | RcloneMount:
        if self.server is None:
            return BucketMount(self.backing, self.mnt, **self.options).mount()
        remote = s3_remote(self.server.endpoint, self.bucket, "data")
        return RcloneMount(
            self.backing, self.mnt, "writes", write_back=RCLONE_WRITE_BACK, remote=remote
        ).mount()

    def raw(self) -> Store:
        """The adapter's durable directory as it landed (the bucket, not the mount)."""
        if self.server is None:
            return PosixStore(self.backing / DUR)
        from syncengine.durable.s3.store import S3Store

        return S3Store(self.server.location(self.bucket, f"data/{DUR}"))

    def config(self, local: Path | None = None, state: Path | None = None, **extra: Any) -> Config:
        raw = {
            "local_root": str(local or self.base / "local"),
            "durable_root": str(self.mnt),
            "state_dir": str(state or self.base / "state"),
            "adapters": [],
            "adapter": [
                {"name": "x", "live": LIVE, "durable": DUR, "segments": ["sessions/*.jsonl"]}
            ],
            "write_back": True,
            **extra,
        }
        return config_from_dict(raw, env={})

    def engine(self, **extra: Any) -> Engine:
        """A new engine, as a new process (a one-shot ``syncengine checkpoint``) makes one."""
        self.made.append(Engine(self.config(**extra)))
        return self.made[-1]

    def kill_and_remount(self) -> None:
        """The mount dies with its pending uploads, and is mounted again."""
        self.mount.kill()
        self.mount.unmount()
        self.mount = self._mount()

    def land_and_remount(self) -> None:
        """A clean unmount lands every pending upload (rclone: on its next start)."""
        if isinstance(self.mount, RcloneMount):
            self.mount.settle()
        else:
            self.mount.unmount()
        self.mount = self._mount()

    def restored(self) -> dict[str, bytes]:
        """What a restore into an empty tree (a new container) brings back."""
        self.restores += 1
        where = self.base / f"restore-{self.restores}"
        for engine in self.made:  # those one-shot processes have ended: their lease too
            engine.close()
        self.made.clear()
        report = Engine(self.config(where / "local", where / "state")).restore()
        assert report.ok, [str(e) for e in report.errors] + [
            str(a.fatal) for a in report.adapters if a.fatal
        ]
        return files(where / "local" / LIVE)

    def close(self) -> None:
        """The engines closed (their lease released while the mount is up), unmounted."""
        for engine in self.made:
            engine.close()
        self.mount.unmount()

    def write(self, rel: str, data: bytes) -> None:
        path = self.live / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    ok, reason = fuse_available()
    if not ok:
        pytest.skip(f"bucket emulator: {reason}")
    d = Deployment(tmp_path)
    try:
        yield d
    finally:
        d.close()


@pytest.fixture(params=["bucket", pytest.param("rclone-s3", marks=pytest.mark.slow)])
def any_mount(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Deployment]:
    """`deployment` on each write-back kind: the emulator, and real rclone over S3 (slow:
    a real mount and server, seconds a kill point)."""
    if request.param == "bucket":
        ok, reason = fuse_available()
        if not ok:
            pytest.skip(f"bucket emulator: {reason}")
        d = Deployment(tmp_path)
    else:
        require_rclone()
        d = Deployment(tmp_path, request.getfixturevalue("s3_server"))
    try:
        yield d
    finally:
        d.close()


def behind_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    found = [r.getMessage() for r in caplog.records if r.getMessage().startswith("durable.behind")]
    caplog.clear()
    return found


def mutate(d: Deployment, rng: random.Random, point: int) -> None:
    """Rewrite a few files (one keeping its size: only its mtime tells the versions apart),
    add one, append to a transcript."""
    for i in rng.sample(range(10), 3):
        d.write(f"notes/{i}.md", f"note {i} at point {point}\n".encode() * rng.randint(1, 40))
    same = d.live / "same-size.json"
    same.write_bytes(f'{{"point": {point:06d}}}\n'.encode())
    d.write(f"new/{point}.json", b"{}\n" * rng.randint(1, 200))
    with open(d.live / "sessions" / "t.jsonl", "ab") as f:
        f.write(
            b"".join(
                f'{{"point": {point}, "n": {n}}}\n'.encode() for n in range(rng.randint(1, 30))
            )
        )


def test_mount_killed_after_each_checkpoint_is_noticed_and_republished(
    any_mount: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    """Kill the mount right after a checkpoint returns (and at random times up to the
    last upload), remount, run a one-shot checkpoint: what the bucket lost is noticed and
    published again, and a restore into an empty tree is complete, at every kill point."""
    caplog.set_level(logging.WARNING, logger="syncengine")
    d, rng = any_mount, random.Random(17)
    points, window = KILLS["bucket" if d.server is None else "rclone-s3"]
    (d.live / "sessions").mkdir()
    for i in range(10):
        d.write(f"notes/{i}.md", f"note {i}\n".encode())
    noticed = 0
    for point in range(points):
        mutate(d, rng, point)
        assert d.engine().checkpoint().ok
        expected = files(d.live)
        if point % 3:  # else right after return; here later, while uploads land
            time.sleep(rng.uniform(0, window))  # the kill point itself
        d.kill_and_remount()
        report = d.engine().checkpoint()
        assert report.ok, [a.fatal for a in report.adapters]
        noticed += bool(behind_warnings(caplog))
        d.land_and_remount()
        assert d.restored() == expected, f"kill point {point}"
    print(f"kill points: {points}, noticed: {noticed}")
    assert noticed >= max(1, points // 3), f"only {noticed} kill points lost anything"


def test_an_object_lost_while_its_manifest_landed_is_published_again(
    deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    """A write-back mount uploads in its own order: the manifest object can land and one
    object it names be lost (or only its older version stay, of the same size).  The
    unconfirmed objects are looked at when the mount instance changes."""
    caplog.set_level(logging.WARNING, logger="syncengine")
    d = deployment
    d.write("a.md", b"version 1\n")
    d.write("b.md", b"only b\n")
    assert d.engine().checkpoint().ok
    d.land_and_remount()
    older = (d.backing / DUR / "a.md").read_bytes(), (d.backing / DUR / "a.md").stat()
    d.write("a.md", b"version 2\n")  # same size
    d.write("c.md", b"new\n")
    assert d.engine().checkpoint().ok
    d.land_and_remount()
    (d.backing / DUR / "c.md").unlink()  # lost, though the manifest object landed
    (d.backing / DUR / "a.md").write_bytes(older[0])  # the older version stayed
    os.utime(d.backing / DUR / "a.md", ns=(older[1].st_atime_ns, older[1].st_mtime_ns))
    d.land_and_remount()  # a new mount instance: the next one-shot checkpoint is a start
    assert d.engine().checkpoint().ok
    said = behind_warnings(caplog)
    assert len(said) == 1 and "c.md" in said[0] and "a.md" in said[0], said
    d.land_and_remount()
    assert d.restored() == files(d.live)


def test_a_pass_between_starts_does_not_look_at_the_bucket(deployment: Deployment) -> None:
    """The check costs one listing of the manifest folder at a start and nothing after:
    a second one-shot checkpoint on the same mount instance is idle: no operation but
    the one stat of the root every new engine makes to know it is reachable (IDLE.md)."""
    d = deployment
    d.write("a.md", b"a\n")
    assert d.engine().checkpoint().ok
    d.land_and_remount()
    d.engine(write_back=False).checkpoint()  # a start: one listing, nothing published
    before = d.mount.stats()
    assert d.engine(write_back=False).checkpoint().ok
    after = d.mount.stats()
    assert {
        k: after[k] - before.get(k, 0)
        for k in after
        if after[k] != before.get(k, 0) and k != "release"
    } in ({}, {"getattr": 1})
    d.land_and_remount()
    before = d.mount.stats()
    assert d.engine(write_back=False).checkpoint().ok
    after = d.mount.stats()
    assert after.get("readdir", 0) - before.get("readdir", 0) == 1  # the manifest folder


def test_verify_reports_a_durable_side_behind_and_the_runner_checks_at_start(
    deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    """verify says a durable side behind the index is a problem (exit 1), both when the
    manifest ends early and when nothing landed at all; the embedded Runner compares at
    start, before its first pass, which then publishes again what was lost."""
    from syncengine import Runner

    caplog.set_level(logging.WARNING, logger="syncengine")
    d = deployment
    d.write("a.md", b"a\n")
    assert d.engine().checkpoint().ok
    d.kill_and_remount()  # nothing had landed: no durable directory at all
    result = d.engine().verify()
    assert not result.ok and any("behind" in line for line in result.lines()), result.lines()
    assert d.engine().checkpoint().files == 1  # a start: published again
    d.land_and_remount()
    d.write("b.md", b"b\n")
    assert d.engine().checkpoint().ok
    d.kill_and_remount()  # the first manifest object landed, not the second
    result = d.engine().verify()
    assert [p.path for a in result.adapters for p in a.problems] == [
        ".syncengine/manifest",
        "b.md",
    ], result.lines()
    assert result.exit_code == 1
    with Runner(d.engine(), watch=False, interval=3600) as runner:
        assert behind_warnings(caplog)  # at start, before any pass
        assert runner.checkpoint_now().files == 1
    d.land_and_remount()
    assert d.engine().verify(sample=100).ok
    assert d.restored() == files(d.live)


def test_an_engine_keeps_writing_and_releases_after_the_mount_restarted(
    deployment: Deployment,
) -> None:
    """The daemon's engine outlives a mount restart that lost what had not landed (its
    staging directory too): its next pass publishes, and its release lets the next
    instance's restore start at once instead of waiting for the lease to expire."""
    d = deployment
    engine = d.engine()
    d.write("a.md", b"a\n")
    assert engine.checkpoint().ok
    d.kill_and_remount()
    d.write("b.md", b"b\n")
    report = engine.checkpoint()
    assert report.ok and report.files >= 1, [a.fatal for a in report.adapters]
    d.land_and_remount()
    t0 = time.monotonic()
    assert d.restored() == files(d.live)  # closes `engine` first: its release lands
    assert time.monotonic() - t0 < 30, "the restore waited for the lease to expire"


def _generations(d: Deployment) -> list[tuple[int, int]]:
    """(seq, lease generation) of every manifest object in the bucket, in seq order."""
    from syncengine.durable import manifest

    listed = manifest.listing(d.raw())
    names = [name for _s, _k, name in sorted(listed.objects + listed.fenced)]
    return [(int(n[:12]), int(n[14:26])) for n in names]


def test_lease_objects_lost_with_the_uploads_never_lower_the_generation(
    any_mount: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue-29 stack: three commands name generations 1 to 3 in the manifest; a
    checkpoint of 22 files, then the mount is killed before anything of it lands (its lease
    objects too, while its deletes of the older ones did land); remount, checkpoint
    (the start-up check republishes), change one file, checkpoint.  The generations after
    the loss must follow the highest the manifest names, else their objects are fenced
    and the restore is the old chain, exit 0, without the 22 files."""
    caplog.set_level(logging.WARNING, logger="syncengine")
    d = any_mount
    for i in range(3):  # one command each: each takes the generation after the last
        d.write(f"early/{i}.md", f"early {i}\n".encode())
        with d.engine() as engine:
            assert engine.checkpoint().ok
    d.land_and_remount()
    for i in range(22):
        d.write(f"lost/{i:02d}.md", f"lost {i}\n".encode())
    with d.engine() as engine:
        assert engine.checkpoint().files == 22
    d.kill_and_remount()  # right after the checkpoint returned: nothing of it landed
    with d.engine() as engine:
        assert engine.checkpoint().ok
    assert behind_warnings(caplog), "the start-up check did not see the loss"
    d.write("early/0.md", b"changed\n")
    with d.engine() as engine:
        assert engine.checkpoint().ok
    d.land_and_remount()
    assert d.restored() == files(d.live)
    assert d.engine().verify(sample=100).ok
    seen = _generations(d)
    assert [g for _s, g in seen] == sorted(g for _s, g in seen), seen
