"""Which mounts write back, from what /proc tells (writeback.CLIENTS), and the config keys.

The rules read a mount's type and its serving process's command line; these
feed them command lines as rclone, hf-mount and s3fs are run (their own
environment, pid 0, reads as empty).
"""

from __future__ import annotations

import pytest

from syncengine.config import config_from_dict
from syncengine.durable.posix.fuseserver import Server
from syncengine.durable.posix.mount import MountInfo
from syncengine.durable.posix.writeback import RcloneControl, _duration, detect
from syncengine.errors import ConfigError


def judged(fstype: str, *argv: str) -> tuple[bool, float | None, str | None, str]:
    info = MountInfo(40, "/data", fstype, "remote:bucket")
    server = Server(0, 1, argv, "/") if argv else None  # pid 0: no environment to read
    verdict = detect(info, server)
    assert verdict is not None
    return verdict.write_back, verdict.delay_s, verdict.rclone_rc, verdict.detail


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("rclone", "mount", "remote:bucket", "/data"), (False, None, None)),
        (
            ("rclone", "mount", "remote:bucket", "/data", "--vfs-cache-mode", "minimal"),
            (False, None, None),
        ),
        (
            ("rclone", "mount", "remote:bucket", "/data", "--vfs-cache-mode=writes"),
            (True, 5.0, None),
        ),
        (
            (
                "rclone",
                "remote:bucket",
                "/data",
                "-o",
                "rw,vfs_cache_mode=full,vfs_write_back=1m30s",
            ),
            (True, 90.0, None),
        ),
        (
            (
                "rclone",
                "mount",
                "--rc",
                "remote:bucket",
                "/data",
                "--vfs-cache-mode",
                "writes",
                "--vfs-write-back",
                "500ms",
            ),
            (True, 0.5, "localhost:5572"),
        ),
        (
            (
                "rclone",
                "mount",
                "remote:bucket",
                "/data",
                "--vfs-cache-mode",
                "writes",
                "--rc-addr",
                ":5573",
            ),
            (True, 5.0, ":5573"),
        ),
    ],
)
def test_rclone_cache_mode_delay_and_remote_control(
    argv: tuple[str, ...], expected: tuple[bool, float | None, str | None]
) -> None:
    assert judged("fuse.rclone", *argv)[:3] == expected


def test_rclone_remote_control_with_a_login_is_not_asked() -> None:
    write_back, _, rc, detail = judged(
        "fuse.rclone",
        "rclone",
        "mount",
        "r:",
        "/data",
        "--vfs-cache-mode",
        "writes",
        "--rc",
        "--rc-user",
        "u",
        "--rc-pass",
        "secret",
    )
    assert write_back and rc is None and "needs a login" in detail and "secret" not in detail


def test_an_rclone_mount_whose_process_is_not_visible_is_assumed_to_write_back() -> None:
    assert judged("fuse.rclone")[0] is True


def test_other_clients() -> None:
    assert judged("fuse.hf-mount", "hf-mount", "mount", "repo", "/data", "--advanced-writes")[
        :2
    ] == (True, 2.0)
    assert judged("fuse.hf-mount", "hf-mount", "mount", "repo", "/data")[0] is False
    assert judged("fuse.s3fs", "s3fs", "bucket", "/data", "-o", "use_cache=/tmp")[0] is False
    assert detect(MountInfo(1, "/data", "ext4", "/dev/vda"), None) is None


def test_durations_and_the_remote_control_url() -> None:
    assert [_duration(t, 5.0) for t in ("10s", "1m", "2", "1h1s", "bogus", "")] == [
        10.0,
        60.0,
        2.0,
        3601.0,
        5.0,
        5.0,
    ]
    assert RcloneControl(":5572").url == "http://127.0.0.1:5572"
    assert RcloneControl("localhost:5572").url == "http://localhost:5572"


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("write_back", "yes", "write_back must be true, false or"),
        ("rclone_rc", "user:pass@127.0.0.1:5572", "no login"),
        ("rclone_rc", 5572, "rclone_rc must be the address"),
        ("confirm_timeout", -1, "confirm_timeout must be a number from 0"),
    ],
)
def test_config_refuses_bad_write_back_keys(key: str, value: object, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        config_from_dict({"local_root": "/tmp", key: value}, env={})


def test_config_write_back_keys() -> None:
    cfg = config_from_dict(
        {
            "local_root": "/tmp",
            "write_back": False,
            "rclone_rc": "127.0.0.1:5572",
            "confirm_timeout": 0,
        },
        env={},
    )
    assert (cfg.write_back, cfg.rclone_rc, cfg.confirm_timeout) == (False, "127.0.0.1:5572", 0)
    assert config_from_dict({"local_root": "/tmp"}, env={}).write_back is None
