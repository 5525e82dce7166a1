"""Deciding about a lease: may this writer take it, keep it, must it wait, has it lost it.

Pure functions over plain values (what `syncengine.durable.lease.read` found,
this writer's identity, the wall-clock time): no Store call, no sleep, so
tests state each case as data.  The holder (`syncengine.local.leaseholder`)
carries the decisions out.

The rules:

- No lease yet, a released one, or an expired one: take the next generation.
- Ours (the same state directory's id) and not released: keep it, same
  generation (a `syncengine checkpoint` typed beside the daemon shares its lease;
  the state-directory lock already serialises them).
- Another holder's live lease: wait until it expires or is released, for at
  most `lease_wait`; with takeover, take the next generation at once.
- A newest object that cannot be read (a holder killed while creating it on
  a mount without rename) counts as held until `lease_seconds` after it was
  listed first: its holder may be alive.
- A generation newer than ours on the durable side: we lost it.
- Never a generation at or below one that any lease or manifest object names
  (the *floor*: the newest generation the manifests of the root's adapters
  name, `manifestlist.Listing.generation`, listed before the lease is read).
  A write-back mount that lost the newest lease objects with their uploads,
  while its deletes of the older ones landed, shows no lease, or an older one,
  below a generation that already wrote manifest objects: that lease is
  superseded, and the next generation is taken above the floor, so readers
  never fence what it writes.  At once when this state directory held a
  generation at or above the floor last (`last`: nobody else can still hold
  the floor's); otherwise the floor's holder may be alive (its lease object
  lost, or a listing cached by the mount), so it counts as held like an
  unreadable object, until `lease_seconds` after it was first seen.  A holder
  whose own object vanished decides again with its own generation in the floor
  (`LeaseHolder.check`).

Whether the previous generation was someone else's (`Take.foreign`) decides
whether this writer's local index can be trusted: a new holder after a
foreign one starts from the durable manifest.
"""

from __future__ import annotations

import attrs

from syncengine.durable import lease
from syncengine.durable.lease import Found


@attrs.frozen
class Take:
    """Create generation `generation` (renewal 0)."""

    generation: int
    foreign: bool  # the previous generation was another holder's (or unknown)
    why: str

    def __str__(self) -> str:
        return f"take generation {self.generation}: {self.why}"


@attrs.frozen
class Keep:
    """The lease is ours already: go on under `generation`."""

    generation: int

    def __str__(self) -> str:
        return f"keep generation {self.generation} (ours)"


@attrs.frozen
class Wait:
    """Another holder's live lease: look again at `until` (wall-clock seconds) at the
    latest."""

    until: float
    holder: str

    def __str__(self) -> str:
        return f"wait: held by {self.holder} until {self.until:.0f}"

    def held(self, root: str, waited: float) -> str:
        """Why a writer gives up after waiting `waited` seconds, and what to do."""
        return (
            f"the durable root {root} is leased to {self.holder} until "
            f"{lease.when(self.until)}; waited {waited:g} s (lease_wait). Stop the other "
            "instance, wait for its lease to expire, or take it over with `restore "
            "--takeover` or `run --takeover` (the other instance then stops publishing); "
            "`syncengine lease release --force` if you know it is dead"
        )


Decision = Take | Keep | Wait


def decide(
    found: Found,
    me: str,
    now: float,
    *,
    takeover: bool,
    unreadable_until: float,
    last: int = 0,
    floor: int = 0,
) -> Decision:
    """What to do about the lease `found` for the state directory whose id is `me`.

    `unreadable_until`: when an unreadable newest object, or a floor above the
    lease, stops counting as held (the caller's first sight of it plus
    `lease_seconds`).  `last`: the
    generation this state directory held last; a newer one released under our
    id was taken by another copy of this state directory (a snapshot put back),
    so our indexes are as stale as after a foreign holder.  `floor`: the newest
    generation named outside the newest lease object (the manifests, or a lease
    object this writer listed before); a lease below it is superseded (see the
    module docstring).
    """
    if floor > found.generation:
        why = superseded(found, floor)
        if last >= floor or takeover or now >= unreadable_until:
            return Take(floor + 1, foreign=last < floor, why=why)
        return Wait(unreadable_until, f"generation {floor}, named by a manifest or listed")
    nxt = found.generation + 1
    record = found.record
    if record is None and found.unreadable is None:
        return Take(nxt, foreign=found.generation > 0, why="no lease yet")
    if record is None:
        if takeover:
            return Take(nxt, foreign=True, why=f"takeover of an unreadable {found.unreadable}")
        if now >= unreadable_until:
            return Take(nxt, foreign=True, why=f"{found.unreadable} unreadable and not renewed")
        return Wait(unreadable_until, f"an unreadable {found.unreadable}")
    ours = record.holder.id == me
    if record.released:
        foreign = not ours or record.generation != last
        return Take(nxt, foreign=foreign, why=f"released by {record.holder}")
    if ours:
        return Keep(record.generation)
    if now >= record.expires:
        return Take(nxt, foreign=True, why=f"expired, held by {record.holder}")
    if takeover:
        return Take(nxt, foreign=True, why=f"takeover from {record.holder}")
    return Wait(record.expires, str(record.holder))


def superseded(found: Found, floor: int) -> str:
    """Why a take goes above the floor: what the lease objects showed instead."""
    shown = f"generation {found.generation}'s lease" if found.generation else "no lease object"
    return (
        f"{shown}, but generation {floor} is named by a manifest or was listed before (its "
        "lease objects were lost: a write-back mount?)"
    )


def lost_message(root: str, newer: lease.LeaseRecord, ours: int) -> str:
    """What a fenced instance says (`LeaseLost`, `status`)."""
    return (
        f"lease lost on {root}: generation {newer.generation} is held by {newer.holder}, "
        f"and this instance held generation {ours}; it publishes nothing more (another "
        "instance took over)"
    )


def lost(ours: int, newest: int) -> bool:
    """Whether a newer generation than the one we hold exists (we were fenced)."""
    return newest > ours


FRESH = 1 / 4  # of lease_seconds: how long a confirmed lease is trusted without asking


def fresh(confirmed: float, now: float, lease_seconds: float) -> bool:
    """Whether a lease this holder confirmed (took, kept, checked or renewed) at
    `confirmed` may be trusted at `now` without asking the durable side: for a quarter of
    the lease (15 s by default).  A pass's first write skips its fence check within it,
    so an append costs one PUT; a manifest object is always checked.  Within the same
    quarter, renewal (due at a third) has not been due yet, so the lease is live."""
    return 0 <= now - confirmed < lease_seconds * FRESH


def renewal_due(expires: float, now: float, lease_seconds: float) -> bool:
    """Renew once a third of the lease has passed: two renewals may fail before it
    expires, and an engine checkpointing every `interval` renews every few passes."""
    return now >= expires - lease_seconds * 2 / 3


__all__ = [
    "FRESH",
    "Decision",
    "Keep",
    "Take",
    "Wait",
    "decide",
    "fresh",
    "lost",
    "lost_message",
    "renewal_due",
    "superseded",
]
