"""This state directory as a lease holder: check, renew and release the lease.

Carries out what `syncengine.durable.leasing` decides, through the lease
objects of `syncengine.durable.lease`, for one engine.  The holder's identity
is its state directory on its host (`syncengine.local.leasefile`, which also
keeps the generation it held last and the lease it holds), so a ``syncengine
checkpoint`` typed beside the daemon shares the daemon's lease instead of
fencing it.  `commit` takes it before a pass's first durable write (`acquire`
at a `run` start; `wait_free` before a plain restore), `check` is the fence
before each manifest object (one HEAD of our own lease object, a listing only
when it is gone), `renew` runs when a third of the lease has passed, `release`
by whoever took it (or kept it after a killed taker: `leaseprocess`), never
by a fenced one.  Taking it is `syncengine.local.leasetaking.Taking`'s.  When
each talks to the durable side, and the windows this leaves: docs/DESIGN.md.
Never reads the environment; the clock and the sleep come in as parameters.
"""

from __future__ import annotations

import logging
import math

import attrs

from syncengine.durable import lease, leasing
from syncengine.durable.lease import Holder, LeaseRecord
from syncengine.local import leasefile
from syncengine.local.leasetaking import Taking

log = logging.getLogger("syncengine")


class LeaseHolder(Taking):
    """The lease of one durable root as held from one state directory (taking it:
    `Taking`)."""

    # -- keeping -------------------------------------------------------------
    def check(self) -> None:
        """The fence before a manifest object: raise `LeaseLost` if a newer generation
        took over; renew when due.  One HEAD of our own lease object (a new holder
        deletes the objects of the generations before its own right after creating
        it); a listing only when it is gone."""
        with self._mutex:
            if self.lost is not None:
                raise self._lost_error()
            self.commit()
            held = self.current
            assert held is not None
            asked = self.clock()
            if self.store.head(held.name) is None:
                found = lease.read(self.store)
                record = found.record
                if found.generation < held.generation:  # nobody newer: the durable side lost it
                    self._retake(held, found)
                    return
                newer = leasing.lost(held.generation, found.generation)
                # released by force (an operator said we were dead) counts as lost too
                if not (newer and self._shared(record)) and (
                    record is None or newer or record.holder.id != self._me.id or record.released
                ):
                    if not self._recalled:
                        self._lose()
                    # only recalled (`_recall`): this process never held it; it starts
                    # like any new instance (wait, or take it after the other holder)
                    self.current, self._recalled, self.confirmed = None, False, 0.0
                    self.acquire()
                    return
                assert record is not None  # a process sharing our state dir renewed it, or
                self.current = record  # took the next generation when ours vanished (_retake)
            self._recalled = False
            self.confirmed = asked
            self._save()
            self.renew()

    def _retake(self, held: LeaseRecord, found: lease.Found) -> None:
        """Our lease object is gone and no newer one exists: the durable side lost it (a
        write-back mount restarted before it landed).  Decide again with our generation
        in the floor (`leasing.decide`): the one after the newest any object names, so
        whatever another instance took in the gap is older, and fenced; when a manifest
        names a newer generation than ours, or another instance took that one first, we
        lost.  Taken for whoever holds ours (`taken_here` unchanged), so a checkpoint
        beside the daemon that finds this leaves the daemon the lease (`_shared`)."""
        log.warning(
            "lease.vanished the durable side lost generation %d's object",
            held.generation,
            extra={"event": "lease.vanished"},
        )
        floor = max(self.floor(), held.generation)
        decision = leasing.decide(
            found,
            self._me.id,
            self.clock(),
            takeover=False,
            unreadable_until=math.inf,
            last=held.generation,
            floor=floor,
        )
        if (
            not isinstance(decision, leasing.Take)
            or decision.foreign
            or not self._take(decision, found, taken=self.taken_here)
        ):
            self._lose()

    def _shared(self, record: LeaseRecord | None) -> bool:
        """Whether `record` is a generation a process sharing our state dir holds for us
        (`_retake` there): ours, live, and what ``lease.json`` keeps."""
        if record is None or record.holder.id != self._me.id or record.released:
            return False
        return leasefile.load(self.state_dir, self._me.id, self.root).record == record

    def renew(self) -> None:
        """Renew the lease if a third of it has passed (nothing to do otherwise)."""
        held = self.current
        if held is None or self.lost is not None:
            return
        now = self.clock()
        if not leasing.renewal_due(held.expires, now, self.lease_seconds):
            return
        if self._recalled:  # see first whether it is still ours (`check` renews)
            self.check()
            return
        holder = self._me if self.taken_here else held.holder  # one we took over: us
        nxt = attrs.evolve(
            held, renewal=held.renewal + 1, expires=now + self.lease_seconds, holder=holder
        )
        if not self._replace(held, nxt):
            return
        # A takeover that read the lease before our renewal existed deletes only what it
        # listed after creating its own generation: look once more, after ours.
        if leasing.lost(held.generation, lease.newest_generation(self.store)):
            self._lose()
        self.confirmed = now
        self._save()
        log.debug(
            "lease.renewed generation=%d expires=%s",
            nxt.generation,
            lease.when(nxt.expires),
            extra={"event": "lease.renewed"},
        )

    def release(self) -> None:
        """Mark the lease released (whoever took it, after its final checkpoint).  Not by
        a fenced holder; a newer generation a process of our state dir took for us
        (`_retake` there) is ours to release."""
        self._pending = None
        held = self.current
        if held is None or not self.taken_here or self.lost is not None:
            return
        mine: LeaseRecord | None = held
        if leasing.lost(held.generation, lease.newest_generation(self.store)):
            newer = lease.read(self.store).record
            mine = newer if newer is not None and self._shared(newer) else None
        if mine is None:
            log.info(  # fenced: a released renewal of ours would only sit beside the newer one
                "lease.not-released generation=%d: a newer generation holds the lease",
                held.generation,
                extra={"event": "lease.not-released"},
            )
        elif self._replace(mine, attrs.evolve(mine, renewal=mine.renewal + 1, released=True)):
            log.info(
                "lease.released generation=%d", mine.generation, extra={"event": "lease.released"}
            )
        self.current, self.taken_here = None, False
        self._save()
        self._at_exit.disarm()

    def _replace(self, held: LeaseRecord, nxt: LeaseRecord) -> bool:
        """Create `nxt` after `held`; when its name is taken, see who took it."""
        if lease.create(self.store, nxt):
            self.current = nxt
            lease.remove(self.store, [held.name])
            return True
        found = lease.read(self.store)
        if leasing.lost(held.generation, found.generation):
            self._lose()
        if found.record is not None and found.record.holder.id == self._me.id:
            self.current = found.record  # a process sharing our state dir renewed it
        return False

    def _lose(self) -> None:
        found = lease.read(self.store)
        self.lost = found.record or LeaseRecord(found.generation, 0, Holder("?", "?", 0, 0), 0.0)
        self.lost_generation = self.generation
        self._save()  # nobody sharing this state dir trusts it any more (`_recall`)
        log.error(
            "lease.lost generation=%d newer=%d holder=%s: this instance stops publishing",
            self.generation,
            found.generation,
            found.record.holder if found.record else "unknown",
            extra={"event": "lease.lost"},
        )
        raise self._lost_error()


__all__ = ["LeaseHolder"]
