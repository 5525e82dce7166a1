"""The durable root on a real rclone mount, in both VFS cache modes users run.

rclone (from Debian) mounts a local directory that plays the bucket
(tests/rclone_mount.py).  The real CLI checkpoints, appends to a transcript,
runs an idle pass and restores into an empty container.  Nothing here waits
for rclone's write-back: in ``writes`` mode every check reads through the
mount (`RcloneMount.view`), and only ``off`` mode, where close is the upload,
restarts rclone before the restore.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from syncengine.durable.posix.probe import probe
from tests.conftest import REPO
from tests.helpers import files
from tests.rclone_mount import MODES, RcloneMount

pytestmark = pytest.mark.parametrize("mode", MODES)

CONFIG = """\
adapters = []
[[adapter]]
name = "x"
live = "x"
durable = "state/x"
segments = ["sessions/*.jsonl"]
"""
TRANSCRIPT = "sessions/t.jsonl"
SEGMENTS = ".syncengine/segments/sessions/t.jsonl.d"


class Deployment:
    """A live tree on local disk, its durable root on an rclone mount, and the CLI."""

    def __init__(self, base: Path, rclone: RcloneMount) -> None:
        self.base, self.rclone = base, rclone
        self.live = base / "local" / "x"
        self.config = base / "syncengine.toml"
        self.config.write_text(CONFIG)

    @property
    def durable(self) -> Path:
        return self.rclone.view / "state/x"

    def write(self, rel: str, data: str, mode: int = 0o644) -> Path:
        path = self.live / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data)
        path.chmod(mode)
        return path

    def cli(
        self, *args: str, check: int = 0, data: Path | None = None, local: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The CLI with this deployment's config, on the mount unless `data` (a durable
        root) or `local` (a local root) say otherwise."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SYNCENGINE_")}
        env.update(
            AM_LOCAL=str(local or self.base / "local"),
            DATA_DIR=str(data or self.rclone.mountpoint),
            PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        )
        proc = subprocess.run(
            [sys.executable, "-m", "syncengine", "--config", str(self.config), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.base,
        )
        assert proc.returncode == check, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc


def listing(root: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime_ns) of every file below `root`: equal listings, nothing written."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            st = os.stat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), root)] = (st.st_size, st.st_mtime_ns)
    return out


def modes(root: Path) -> dict[str, int]:
    return {rel: (root / rel).stat().st_mode & 0o777 for rel in files(root)}


def test_probe_finds_what_each_mode_supports(
    mode: str, rclone_factory: Callable[..., RcloneMount]
) -> None:
    mount = rclone_factory(mode)
    caps = probe(mount.mountpoint)
    assert caps.mounted and caps.fstype == "fuse.rclone" and caps.rename_supported
    assert caps.append_refused == (mode == "off"), caps  # off: EPERM at close, not at open
    assert not caps.set_mode, "rclone accepts chmod and stores no mode"
    assert os.listdir(mount.mountpoint) == []  # the probe cleaned up


def test_checkpoint_append_idle_pass_and_restore_round_trip(
    mode: str, tmp_path: Path, rclone_factory: Callable[..., RcloneMount]
) -> None:
    d = Deployment(tmp_path, rclone_factory(mode))
    d.write("config.json", '{"model": "x"}\n', 0o600)
    d.write("notes/a.md", "a note\n", 0o640)
    transcript = d.write(TRANSCRIPT, '{"turn": 1}\n')
    d.cli("checkpoint")
    status = d.cli("status").stdout
    assert ("appends refused" in status) == (mode == "off"), status
    assert (d.durable / "config.json").read_text() == '{"model": "x"}\n'
    assert (d.durable / "notes/a.md").read_text() == "a note\n"
    chain = sorted((d.durable / SEGMENTS).rglob("*.seg"))
    assert len(chain) == 1

    with transcript.open("a") as f:  # an append is one new segment object, not a re-upload
        f.write('{"turn": 2}\n')
    assert "published 1 file(s)" in d.cli("checkpoint").stdout
    assert len(sorted((d.durable / SEGMENTS).rglob("*.seg"))) == 2
    assert not (d.durable / TRANSCRIPT).exists()

    before = listing(d.durable)
    assert "published 0 file(s)" in d.cli("checkpoint").stdout  # idle: nothing written
    assert listing(d.durable) == before

    expected, expected_modes = files(d.live), modes(d.live)
    shutil.rmtree(tmp_path / "local")  # a new container: no live tree, no state dir
    if mode == "off":  # close was the upload: a new rclone process sees it all
        d.rclone.unmount()
        d.rclone.mount()
    d.cli("restore")
    assert files(d.live) == expected
    assert modes(d.live) == expected_modes  # from the manifest: rclone keeps no modes

    with transcript.open("a") as f:  # the chain goes on after the restore
        f.write('{"turn": 3}\n')
    d.cli("checkpoint")
    shutil.rmtree(tmp_path / "local")
    d.cli("restore")
    assert transcript.read_text() == '{"turn": 1}\n{"turn": 2}\n{"turn": 3}\n'
