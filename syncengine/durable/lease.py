"""The lease object on the durable side: its names, its bytes, and the Store calls on it.

One writer per durable root (issue 16).  The lease lives under the root as
small closed JSON objects, one per state::

    <durable_root>/.syncengine/lease/<generation:012d>.<renewal:06d>.json

A new holder creates renewal 0 of the next generation; renewing, and
releasing, create the next renewal of the same generation.  Every one is
written with ``put_bytes(if_absent=True)`` (an exclusive create on a mount,
``If-None-Match: *`` on S3), so two processes can never both create the same
name: the one that loses learns it (`NameTaken` or `SharedRoot`) and looks
again.  No object is ever rewritten, which is what a mount without rename and
an object store can guarantee; the holder deletes its own superseded renewals
(the lease's objects only, never state), so the directory holds one or two
objects.  The newest name (highest generation, then renewal) is the lease.

This module only reads and writes; what a lease means for a writer (free,
expired, ours, lost) is decided in `syncengine.durable.leasing`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import attrs

from syncengine.durable.store import META_DIR, Store
from syncengine.errors import DurableError, NameTaken, SharedRoot

LEASE_DIR = f"{META_DIR}/lease"
_NAME = re.compile(r"^(\d{12})\.(\d{6})\.json$")


@attrs.frozen
class Holder:
    """Who holds a lease: `id` names a state directory (one instance); the rest is for
    people reading `status` and `lease.lost`."""

    id: str
    host: str
    pid: int
    started_ns: int

    def __str__(self) -> str:
        return f"{self.host} pid {self.pid} (id {self.id})"


@attrs.frozen
class LeaseRecord:
    """One lease object as plain values; `expires` is wall-clock seconds since the epoch."""

    generation: int
    renewal: int
    holder: Holder
    expires: float
    released: bool = False

    @property
    def name(self) -> str:
        return name_of(self.generation, self.renewal)

    def encode(self) -> bytes:
        body = attrs.asdict(self)
        return (json.dumps(body, sort_keys=True) + "\n").encode()


def name_of(generation: int, renewal: int) -> str:
    return f"{LEASE_DIR}/{generation:012d}.{renewal:06d}.json"


def decode(data: bytes) -> LeaseRecord:
    """Parse one lease object; ValueError when it is not one (cut short, garbage)."""
    try:
        raw = json.loads(data)
        holder = Holder(
            id=str(raw["holder"]["id"]),
            host=str(raw["holder"]["host"]),
            pid=int(raw["holder"]["pid"]),
            started_ns=int(raw["holder"]["started_ns"]),
        )
        return LeaseRecord(
            generation=int(raw["generation"]),
            renewal=int(raw["renewal"]),
            holder=holder,
            expires=float(raw["expires"]),
            released=bool(raw.get("released", False)),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"not a lease object ({exc})") from exc


def names(store: Store) -> list[tuple[int, int, str]]:
    """(generation, renewal, key) of every lease object, oldest first (one listing)."""
    out = []
    for name in store.names(LEASE_DIR):
        m = _NAME.match(name)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), f"{LEASE_DIR}/{name}"))
    return sorted(out)


def newest_generation(store: Store) -> int:
    """The newest generation named on the durable side (0: no lease yet): one listing,
    no read; what the fence check before each manifest object costs."""
    listed = names(store)
    return listed[-1][0] if listed else 0


@attrs.frozen
class Found:
    """What `read` found: the newest lease object (None: none, or unreadable), its
    generation, and every lease object's key (for clean-up)."""

    record: LeaseRecord | None
    generation: int
    keys: tuple[str, ...]
    unreadable: str | None = None  # the newest key, when it could not be parsed


def read(store: Store, attempts: int = 20) -> Found:
    """The newest lease object.  A holder deletes its previous renewal right after
    writing the next one, so a name listed a moment ago may be gone: list again.  Never
    "no lease" once one was listed: a lease that keeps moving is reported unreadable
    (held), so nobody takes a generation already used."""
    found = Found(None, 0, ())
    for _attempt in range(attempts):
        listed = names(store)
        if not listed:
            return found
        generation, _renewal, key = listed[-1]
        keys = tuple(k for _g, _r, k in listed)
        found = Found(None, generation, keys, unreadable=key)
        try:
            data = store.read_bytes(key)
        except FileNotFoundError:
            continue
        except DurableError:  # a mount: deleted between the open and the read
            if store.head(key) is None:
                continue
            raise
        try:
            return Found(decode(data), generation, keys)
        except ValueError:  # a holder killed while creating it (mount without rename)
            return found
    return found


def create(store: Store, record: LeaseRecord) -> bool:
    """Create `record`'s object if its name is free; False: another process has it."""
    return _create(store, record) is not None


def _create(store: Store, record: LeaseRecord) -> bool | None:
    """None: another process has the name; else whether the store refused any replace."""
    try:
        return store.put_bytes(record.name, record.encode(), if_absent=True, mode=0o644)
    except (NameTaken, SharedRoot):
        return None


def create_and_keep(store: Store, record: LeaseRecord, sleep: Callable[[float], None]) -> bool:
    """`create`; where the store could not refuse a replace itself (a mount without
    ``RENAME_NOREPLACE``: it only read back at once), read the new generation back again
    after twice the time the create took: a second taker, who decided before our object
    existed, may replace it a moment later, within the time a create takes.  A store
    that refuses replaces (S3, a mount with ``RENAME_NOREPLACE``) needs no wait, which
    would otherwise hold up every start by twice the first write's cost (the mount's
    probe included: a second on the emulator's latency)."""
    t0 = time.monotonic()
    guarded = _create(store, record)
    if guarded is None:
        return False
    if guarded:
        return True
    sleep(max(0.02, 2 * (time.monotonic() - t0)))
    try:
        return store.read_bytes(record.name) == record.encode()
    except (FileNotFoundError, DurableError):  # replaced, then deleted by its taker
        return False


def remove(store: Store, keys: tuple[str, ...] | list[str]) -> None:
    """Delete superseded lease objects (best effort: another process may have)."""
    for key in keys:
        store.delete(key)


def status(store: Store) -> dict[str, Any]:
    """The lease as the durable side has it (`syncengine status`): one listing, one read."""
    found = read(store)
    record = found.record
    if record is None:
        return {"generation": found.generation, "holder": None, "unreadable": found.unreadable}
    return {
        "generation": record.generation,
        "holder": str(record.holder),
        "pid": record.holder.pid,
        "host": record.holder.host,
        "expires": record.expires,  # seconds since the epoch, as every time status gives
        "released": record.released,
    }


def force_release(store: Store, clock: Callable[[], float] = time.time) -> LeaseRecord | None:
    """`syncengine lease release --force`: mark the newest generation released, whoever
    holds it (the operator knows it is dead).  None: there was no lease."""
    found = read(store)
    if found.generation == 0:
        return None
    base = found.record or LeaseRecord(found.generation, 0, Holder("?", "?", 0, 0), clock())
    renewal = max(r for g, r, _k in names(store) if g == found.generation) + 1
    nxt = attrs.evolve(base, renewal=renewal, released=True, expires=clock())
    if not create(store, nxt):
        return None
    return nxt


def when(seconds: float) -> str:
    """A wall-clock time for people: ``2026-12-02T17:20:00Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


__all__ = [
    "LEASE_DIR",
    "Found",
    "Holder",
    "LeaseRecord",
    "create",
    "create_and_keep",
    "decode",
    "force_release",
    "name_of",
    "names",
    "newest_generation",
    "read",
    "remove",
    "status",
    "when",
]
