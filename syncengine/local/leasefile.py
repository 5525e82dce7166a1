"""What a state directory remembers of the durable root's lease: ``<state_dir>/lease.json``.

Owns the holder's identity (this state directory on this host) and the small
file that keeps, between processes sharing the state dir, the durable root it
is for, the generation it held last, the lease it holds now with when the
durable side last confirmed it, and which indexes a restore built from the
manifest of a released generation (`Synced`).  A ``syncengine checkpoint`` typed beside the
daemon recalls a lease the daemon confirmed a moment ago instead of asking
(`leaseholder.LeaseHolder`).
A cache: unreadable or another holder's, it is ignored; never fsynced.  Never
touches the durable side.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from syncengine.durable import lease
from syncengine.durable.lease import Found, LeaseRecord
from syncengine.fs import savefile

NAME = "lease.json"
log = logging.getLogger("syncengine")


@attrs.frozen
class Remembered:
    """``lease.json`` as values: the generation held last, and the lease held now (None:
    none, or not this holder's) with the wall-clock time it was last confirmed."""

    generation: int = 0
    record: LeaseRecord | None = None
    confirmed: float = 0.0
    moved: bool = False  # kept for another durable root: this state dir's indexes are not its
    synced: Synced = attrs.field(factory=lambda: Synced())


@attrs.frozen
class Synced:
    """Adapters whose indexes a restore built from the durable manifest as generation
    `generation` left it, released (or never taken): the next instance's take right
    after that generation keeps those indexes (`trusted`), so what the restore learnt
    (an object missing on the durable side) is not thrown away."""

    generation: int = -1
    adapters: frozenset[str] = frozenset()

    @staticmethod
    def free(found: Found) -> bool:
        """Nobody can write under the generation `found` any more: released, or none."""
        return found.unreadable is None and (found.record is None or found.record.released)

    def trusted(self, found: Found) -> frozenset[str]:
        """The indexes a take after `found` may keep."""
        same = found.generation == self.generation and self.free(found)
        return self.adapters if same else frozenset()

    def add(self, found: Found, adapters: Iterable[str]) -> Synced:
        """After a restore of `adapters` that found `found` free (`free`)."""
        if not self.free(found):
            return self
        kept = self.adapters if found.generation == self.generation else frozenset()
        return Synced(found.generation, kept | frozenset(adapters))


def holder_id(state_dir: Path) -> str:
    """This state directory on this host: a checkpoint beside the daemon, and an instance
    restarted in the same container (even with its state dir wiped), are the same
    holder; another container (another host name) is not."""
    where = f"{os.uname().nodename}\0{os.path.abspath(state_dir)}"
    return hashlib.sha256(where.encode()).hexdigest()[:16]


def load(state_dir: Path, me: str, root: str) -> Remembered:
    """What `save` kept for the durable root `root`; an empty `Remembered` when there is
    nothing usable, with `moved` when it was kept for another root (``DATA_DIR`` changed
    under the same state dir)."""
    try:
        raw = json.loads((state_dir / NAME).read_bytes())
    except (OSError, ValueError):
        return Remembered()
    if not isinstance(raw, dict):
        return Remembered()
    if isinstance(raw.get("root"), str) and raw["root"] != root:
        return Remembered(moved=True)
    generation = raw.get("generation")
    generation = generation if isinstance(generation, int) else 0
    confirmed = raw.get("confirmed")
    try:
        record = lease.decode(json.dumps(raw["record"]).encode())
    except (KeyError, ValueError):
        record = None
    synced = raw.get("synced")
    kept = Synced()
    if isinstance(synced, dict) and isinstance(synced.get("generation"), int):
        names = synced.get("adapters")
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            kept = Synced(synced["generation"], frozenset(names))
    if record is None or record.holder.id != me or not isinstance(confirmed, float):
        return Remembered(generation, synced=kept)
    return Remembered(generation, record, confirmed, synced=kept)


def save(
    state_dir: Path,
    me: str,
    root: str,
    generation: int,
    held: LeaseRecord | None,
    confirmed: float,
    synced: Synced,
) -> None:
    """Keep, for the durable root `root`, the generation held last, what a restore
    `synced` and, when `held`, the lease held now."""
    body: dict[str, Any] = {"id": me, "root": root, "generation": generation}
    if synced.adapters:
        body["synced"] = {"generation": synced.generation, "adapters": sorted(synced.adapters)}
    if held is not None:
        body.update(record=json.loads(held.encode()), confirmed=confirmed)
    path = state_dir / NAME
    try:
        try:
            savefile.write_file(path, json.dumps(body).encode(), mode=0o600, fsync=False)
        except FileNotFoundError:
            state_dir.mkdir(parents=True, exist_ok=True)
            savefile.write_file(path, json.dumps(body).encode(), mode=0o600, fsync=False)
    except OSError as exc:  # a full or read-only state dir: forget rather than mislead
        with contextlib.suppress(OSError):  # the next process asks the durable side
            path.unlink(missing_ok=True)
        # debug: the state dir's own error (an index it cannot save) is the one line
        log.debug(
            "lease.cache-unwritable path=%s: %s",
            path,
            exc,
            extra={"event": "lease.cache-unwritable"},
        )


__all__ = ["NAME", "Remembered", "holder_id", "load", "save"]
