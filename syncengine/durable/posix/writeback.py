"""Write-back mounts: which acknowledge a close before the bucket has the object, and
asking them when it has.

Owns `CLIENTS`, the table of FUSE clients this version recognises.  Each rule
looks at the mount type (/proc/self/mountinfo) and the serving process's
command line (`fuseserver`) and says whether that mount writes back, with
what delay, and how it can be asked.  What we know of each (docs/durable-target.md):

- rclone with ``--vfs-cache-mode writes`` or ``full``: close returns once the
  file is in rclone's local cache; the upload follows after
  ``--vfs-write-back`` (5 s by default).  Killed with its cache dropped, it
  loses what it had not uploaded.  Its remote control (``--rc``) reports the
  uploads queued and in progress (``vfs/stats``).  ``off`` and ``minimal``
  upload during close.
- hf-mount with ``--advanced-writes``: close queues an upload sent about 2 s
  after the last change (30 s at most); no control interface.
- s3fs and gcsfuse upload at close (their maintainers' documentation: the
  local cache holds a copy, not a pending write).

To teach it another client, add a rule to `CLIENTS`.  The configuration can
override the verdict (``write_back = true | false``).

Owns `Uploads` too: after a pass has closed its objects, `Uploads.confirm`
waits (bounded) until the mount says they reached the bucket.  rclone queues
an upload when the kernel releases the file, which comes after close()
returns; an upload cannot finish before the write-back delay has passed since
that release.  So the uploads of everything closed before `since` are done
once that delay (rclone's own setting, from ``vfs/stats``) has passed since
`since` and rclone reports nothing queued, uploading or failed.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    import urllib.error

    from syncengine.config import Config
    from syncengine.durable.posix.fuseserver import Server
    from syncengine.durable.posix.mount import Capabilities, MountInfo

log = logging.getLogger("syncengine")
RCLONE_RC_DEFAULT = "localhost:5572"  # rclone's --rc-addr default
FLOOR_S = 1.0  # the least wait after the last close: the kernel's release reaches rclone
POLL_S = 0.25


@attrs.frozen
class Verdict:
    """What a rule found about one mount."""

    client: str
    write_back: bool
    detail: str = ""
    delay_s: float | None = None  # the write-back delay, where known
    rclone_rc: str | None = None  # rclone's remote control address, from its command line


# Flags whose value is the next argument when not given as --name=value (any other
# --name is read as a switch: positional arguments are never interpreted).
_VALUED = frozenset(
    {"vfs-cache-mode", "vfs-write-back", "rc-addr", "rc-user", "rc-pass", "rc-htpasswd"}
)


def _flags(argv: tuple[str, ...]) -> dict[str, str]:
    """``--name value``, ``--name=value`` and ``-o name=value,...`` as {name: value};
    a switch is ``"true"``.  Names use dashes."""
    out: dict[str, str] = {}
    args = list(argv[1:])
    for i, arg in enumerate(args):
        nxt = args[i + 1] if i + 1 < len(args) else None
        if arg == "-o" and nxt is not None:
            for opt in nxt.split(","):
                name, eq, value = opt.partition("=")
                out[name.replace("_", "-")] = value if eq else "true"
        elif arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if eq:
                out[name] = value
            elif name in _VALUED and nxt is not None:
                out[name] = nxt
            else:
                out[name] = "true"
    return out


def _duration(text: str | None, default: float) -> float:
    """rclone durations: "5s", "500ms", "1m30s", "2" (seconds)."""
    if not text:
        return default
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    total, number = 0.0, ""
    i = 0
    try:
        while i < len(text):
            if text[i].isdigit() or text[i] == ".":
                number += text[i]
                i += 1
                continue
            unit = "ms" if text.startswith("ms", i) else text[i]
            total += float(number) * units[unit]
            number, i = "", i + len(unit)
        return total + (float(number) if number else 0.0)
    except (KeyError, ValueError):
        return default


def _rclone(info: MountInfo, server: Server | None) -> Verdict | None:
    if info.fstype != "fuse.rclone" and (server is None or server.program != "rclone"):
        return None
    if server is None:
        return Verdict(
            "rclone",
            True,
            "its process is not visible from here, so its cache "
            "mode is unknown: assumed to write back",
        )
    flags = _flags(server.argv)
    mode = (flags.get("vfs-cache-mode") or server.env("RCLONE_VFS_CACHE_MODE") or "off").lower()
    if mode in ("off", "minimal"):
        return Verdict("rclone", False, f"--vfs-cache-mode {mode}: uploads during close")
    delay = _duration(flags.get("vfs-write-back") or server.env("RCLONE_VFS_WRITE_BACK"), 5.0)
    rc = None
    if (
        flags.get("rc") == "true"
        or (server.env("RCLONE_RC") or "").lower() in ("true", "1")
        or "rc-addr" in flags
    ):
        rc = flags.get("rc-addr") or server.env("RCLONE_RC_ADDR") or RCLONE_RC_DEFAULT
    login = any(k in flags for k in ("rc-user", "rc-pass", "rc-htpasswd"))
    detail = f"--vfs-cache-mode {mode}, write-back delay {delay:g}s"
    if rc is None:
        detail += ", no remote control (--rc)"
    elif login:
        detail += f", remote control at {rc} needs a login (--rc-user), so cannot be asked"
        rc = None
    else:
        detail += f", remote control at {rc}"
    return Verdict("rclone", True, detail, delay, rc)


def _hf_mount(info: MountInfo, server: Server | None) -> Verdict | None:
    if server is None or not server.program.startswith("hf-mount"):
        return None
    if "--advanced-writes" in server.argv:
        return Verdict(
            "hf-mount",
            True,
            "--advanced-writes: uploads about 2s after the last change (30s at most)",
            2.0,
        )
    return Verdict("hf-mount", False, "streaming writes: uploads during close")


def _uploads_at_close(name: str) -> Callable[[MountInfo, Server | None], Verdict | None]:
    def rule(info: MountInfo, server: Server | None) -> Verdict | None:
        if info.fstype == f"fuse.{name}" or (server is not None and server.program == name):
            return Verdict(name, False, "uploads during close")
        return None

    return rule


# (client, rule): the first rule that recognises the mount decides.
CLIENTS: tuple[tuple[str, Callable[[MountInfo, Server | None], Verdict | None]], ...] = (
    ("rclone", _rclone),
    ("hf-mount", _hf_mount),
    ("s3fs", _uploads_at_close("s3fs")),
    ("gcsfuse", _uploads_at_close("gcsfuse")),
)


def detect(info: MountInfo | None, server: Server | None) -> Verdict | None:
    """What the known clients say about this mount (None: not one they recognise)."""
    if info is None:
        return None
    for _name, rule in CLIENTS:
        verdict = rule(info, server)
        if verdict is not None:
            return verdict
    return None


class RcError(Exception):
    """rclone's remote control could not be asked, or answered with an error."""


@attrs.frozen
class RcloneControl:
    """rclone's remote control (``rclone mount ... --rc``): its upload counts."""

    addr: str
    vfs: str | None = None  # the mount's remote, as rclone names it (the mount's source)
    timeout_s: float = 5.0

    @property
    def url(self) -> str:
        addr = self.addr if "://" in self.addr else f"http://{self.addr}"
        host = addr.split("://", 1)[1]
        return addr.replace("://:", "://127.0.0.1:", 1) if host.startswith(":") else addr

    def call(self, command: str, **params: Any) -> dict[str, Any]:
        # Imported here: urllib.request (http.client, ssl, email) would add ~15 ms to
        # every CLI start, and only a write-back mount with rclone's remote control
        # ever calls this.
        import urllib.error
        import urllib.request

        request = urllib.request.Request(
            f"{self.url.rstrip('/')}/{command}",
            data=json.dumps(params).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                data = json.load(response)
        except urllib.error.HTTPError as exc:
            raise RcError(f"{command} at {self.url}: HTTP {exc.code} {_rc_message(exc)}") from exc
        except (OSError, ValueError) as exc:
            raise RcError(f"{command} at {self.url}: {exc}") from exc
        if not isinstance(data, dict):
            raise RcError(f"{command} at {self.url}: not a JSON object")
        return data

    def disk_cache(self) -> dict[str, Any]:
        """The ``diskCache`` part of ``vfs/stats`` for this mount ({}: no cache)."""
        try:
            stats = self.call("vfs/stats", **({"fs": self.vfs} if self.vfs else {}))
        except RcError:
            if not self.vfs:
                raise
            stats = self.call("vfs/stats")  # one VFS: rclone's name may differ from ours
        cache = stats.get("diskCache")
        if not isinstance(cache, dict):
            return {}
        opt = stats.get("opt")
        delay = opt.get("WriteBack") if isinstance(opt, dict) else None
        return {**cache, "write_back_s": delay / 1e9 if isinstance(delay, int) else None}


def _rc_message(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read() or b"{}")
    except ValueError:
        return ""
    return str(body.get("error", "")) if isinstance(body, dict) else ""


@attrs.define
class Uploads:
    """How one write-back mount's uploads are confirmed (or that they cannot be)."""

    verdict: Verdict
    instance: str  # the mount instance (`fuseserver.instance`) objects are recorded under
    control: RcloneControl | None = None
    timeout_s: float = 60.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    said: str = ""  # the last reason logged, so a repeat is a debug line

    @property
    def confirmable(self) -> bool:
        return self.control is not None and self.timeout_s > 0

    def confirm(self, since: float) -> bool:
        """Wait until the mount reports everything closed before `since` (a `clock` time)
        uploaded: True; False when it cannot say so within the timeout."""
        if self.control is None or self.timeout_s <= 0:
            return False
        deadline = self.clock() + self.timeout_s
        delay = self.verdict.delay_s or 0.0
        while True:
            try:
                cache = self.control.disk_cache()
            except RcError as exc:
                self._say(f"cannot ask rclone's remote control: {exc}")
                return False
            if cache.get("write_back_s") is not None:
                delay = cache["write_back_s"]
            busy = {
                k: int(cache.get(k) or 0)
                for k in ("uploadsQueued", "uploadsInProgress", "erroredFiles")
            }
            now = self.clock()
            earliest = since + max(delay, FLOOR_S)
            if now >= earliest and not any(busy.values()):
                self.said = ""
                return True
            if now >= deadline:
                self._say(
                    f"uploads not confirmed within {self.timeout_s:g}s ("
                    f"{busy['uploadsQueued']} queued, {busy['uploadsInProgress']} "
                    f"uploading, {busy['erroredFiles']} failed)"
                )
                return False
            self.sleep(max(0.0, min(deadline, max(earliest, now + POLL_S)) - now))

    def _say(self, reason: str) -> None:
        level = logging.DEBUG if reason == self.said else logging.WARNING
        self.said = reason
        log.log(
            level,
            "durable.unconfirmed client=%s: %s; this pass's objects are recorded "
            "as unconfirmed and checked against the bucket at the next start",
            self.verdict.client,
            reason,
            extra={"event": "durable.unconfirmed"},
        )


def uploads(caps: Capabilities, config: Config) -> Uploads | None:
    """How the engine confirms uploads on the mount `caps` describes (None: close is the
    upload).  The configuration's ``write_back`` overrides what was detected, and its
    ``rclone_rc`` the remote control found on rclone's command line."""
    write_back = caps.write_back if config.write_back is None else config.write_back
    if not write_back:
        return None
    rc = config.rclone_rc or caps.rclone_rc
    verdict = Verdict(
        caps.client or "declared",
        True,
        caps.client_detail if caps.write_back else "write_back = true in the configuration",
        caps.write_back_delay_s,
        rc,
    )
    control = RcloneControl(rc, vfs=caps.source or None) if rc else None
    return Uploads(verdict, caps.instance, control, config.confirm_timeout)
