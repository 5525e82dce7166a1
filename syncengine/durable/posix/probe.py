"""What the durable root supports, found by trying it; and whether it is there at all.

Owns the mount probe and the durable-root health check.  The probe runs in a
scratch directory of its own (``<durable_root>/.syncengine-probe/``, removed
afterwards) at the start of a run that will write, never on an idle pass, and
its result is cached in ``state_dir/probe/<hash of the root>.json`` for as long
as the same mount (per ``/proc/self/mountinfo``, read locally) holds the root.
It answers: can a closed file be renamed over an existing name, and is the new
content visible at once under it; do mode and mtime set on an open handle
survive its commit, and can they be set by name afterwards; is an append to an
existing file refused (an object-store mount in streaming mode: EPERM at open
like hf-mount, or at close like rclone without a VFS cache).  Each question is
one check in `checks.CHECKS`; an error a check does not expect stops the probe.  And
one question no trial can answer: does the mount acknowledge a close before the
bucket has the object (a write-back mount)?  That comes from what the system
tells about the client serving it (`writeback.CLIENTS`, from the mount type and
the serving process's command line: `fuseserver`).  The cache is keyed by the
mount instance (`fuseserver.instance`), so a remounted client is probed again.

The values it answers with (`mount.Capabilities`, `mount.MountInfo`) live in
`syncengine.durable.posix.mount`, below the probe and the modules it asks.

The health check turns a durable root that is missing, not a mount point
where one is required (``require_mount``), no longer the mount it was when
probed, or a dead FUSE mount (ENOTCONN) into a `DurableError`, so a restore
never mistakes an absent bucket for an empty one.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import xxhash

from syncengine.durable.posix import fuseserver, writeback
from syncengine.durable.posix.checks import CHECKS, Trial
from syncengine.durable.posix.mount import Capabilities, MountInfo, is_mountpoint, mount_of
from syncengine.errors import DurableError, durable_error
from syncengine.fs import savefile

SCRATCH = ".syncengine-probe"


def cache_path(state_dir: Path, durable_root: Path) -> Path:
    digest = xxhash.xxh3_64_hexdigest(os.fsencode(os.path.abspath(durable_root)))
    return state_dir / "probe" / f"{digest}.json"


def read_cache(state_dir: Path, durable_root: Path) -> dict[str, Any] | None:
    try:
        with open(cache_path(state_dir, durable_root), "rb") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_root(root: Path, *, require_mount: bool, state_dir: Path | None = None) -> None:
    """Raise DurableError unless the durable root is there, mounted as expected, and alive."""
    mounted = is_mountpoint(root)
    if require_mount and not mounted:
        raise DurableError(
            f"durable root {root} is not a mount point (require_mount = true): the bucket is "
            "not mounted; mount it, or set require_mount = false for a plain directory"
        )
    cached = read_cache(state_dir, root) if state_dir is not None else None
    if cached and cached.get("mounted") and not mounted:
        raise DurableError(
            f"durable root {root} was a mount point ({cached.get('fstype')}) when probed, and is "
            "not one now: the bucket is not mounted; remount it before checkpoint or restore"
        )
    try:
        st = os.stat(root)
    except FileNotFoundError as exc:
        raise DurableError(
            f"durable root {root} does not exist: mount it, or set "
            "durable_root (DATA_DIR) to the checkpoint location"
        ) from exc
    except OSError as exc:
        raise durable_error("stat durable root", root, exc) from exc
    if not stat.S_ISDIR(st.st_mode):
        raise DurableError(f"durable root {root} is not a directory")


def instance(root: Path) -> str:
    """The mount instance holding `root` (`fuseserver.instance`; /proc reads only)."""
    return fuseserver.instance(mount_of(root))


def capabilities(root: Path, state_dir: Path) -> Capabilities:
    """The cached probe result for `root` if the same mount instance still holds it, else a
    new probe."""
    key = instance(root)
    cached = read_cache(state_dir, root)
    if cached and cached.get("mount_key") == key and cached.get("root") == str(root):
        known = Capabilities.from_json(cached)
        if known is not None:
            return known
    caps = probe(root)
    data = {**caps.to_json(), "root": str(root), "mount_key": key}
    try:
        savefile.write_file(
            cache_path(state_dir, root), json.dumps(data).encode(), mode=0o600, fsync=False
        )
    except OSError:
        pass  # a cache: probing again next run is the only cost
    return caps


def probe(root: Path) -> Capabilities:
    """Run `checks.CHECKS` in a scratch directory under `root`; clean up."""
    info = mount_of(root)
    scratch = root / SCRATCH
    token = os.urandom(6).hex()
    trial = Trial(scratch / f"{token}-a", scratch / f"{token}-b")
    try:
        os.makedirs(scratch, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise durable_error("create probe directory", scratch, exc) from exc
    try:
        for what, check in CHECKS:
            try:
                trial.found.update(check(trial))
            except OSError as exc:
                raise durable_error(f"probe ({what})", scratch, exc) from exc
    finally:
        _clean(scratch, (trial.a, trial.b))
    return Capabilities(
        mounted=info is not None and info.mount_point == os.path.abspath(root),
        mount=info.mount_point if info else "",
        fstype=info.fstype if info else "",
        source=info.source if info else "",
        probed_ns=time.time_ns(),
        instance=fuseserver.instance(info),
        **trial.found,
        **_client(info),
    )


def _client(info: MountInfo | None) -> dict[str, Any]:
    """What `writeback.CLIENTS` say about the mount: Capabilities fields."""
    server = fuseserver.find_server(info) if info is not None else None
    verdict = writeback.detect(info, server)
    if verdict is None:
        return {}
    return {
        "client": verdict.client,
        "client_detail": verdict.detail,
        "write_back": verdict.write_back,
        "write_back_delay_s": verdict.delay_s,
        "rclone_rc": verdict.rclone_rc,
    }


def _clean(scratch: Path, paths: tuple[Path, ...]) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass
    try:
        os.rmdir(scratch)
    except OSError:
        pass  # another probe's files, or the mount is gone: harmless
