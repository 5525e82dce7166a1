"""This state directory as a lease holder: take, renew, check and release the lease.

Carries out what `syncengine.durable.leasing` decides, through the lease
objects of `syncengine.durable.lease`, for one engine.  The holder's identity
is its state directory on its host (`syncengine.local.leasefile`, which also
keeps the generation it held last and the lease it holds), so a ``syncengine
checkpoint`` typed beside the daemon shares the daemon's lease instead of
fencing it.  `commit` takes it before a pass's first durable write (`acquire`
at a `run` start; `wait_free` before a plain restore), `check` is the fence
before each manifest object (one HEAD of our own lease object, a listing only
when it is gone), `renew` runs when a third of the lease has passed, `release`
by whoever took it (or kept it after a killed taker: `leaseprocess`).  When
each talks to the durable side, and the windows this leaves: docs/DESIGN.md.
Never reads the environment; the clock and the sleep come in as parameters.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from syncengine.durable import lease, leasing
from syncengine.durable.lease import Holder, LeaseRecord
from syncengine.durable.store import Store
from syncengine.errors import LeaseHeld, LeaseLost
from syncengine.local import leasefile, leaseprocess

log = logging.getLogger("syncengine")
POLL = 0.25  # seconds between looks at a lease another holder keeps


class LeaseHolder:
    """The lease of one durable root as held from one state directory."""

    def __init__(
        self,
        store: Callable[[], Store],
        state_dir: Path,
        root: str,
        *,
        lease_seconds: float,
        lease_wait: float,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._store_factory = store
        self._store: Store | None = None
        self.state_dir, self.lease_seconds, self.lease_wait = state_dir, lease_seconds, lease_wait
        self.clock, self.sleep = clock, sleep
        self.takeover = False  # --takeover: do not wait for another holder's lease
        self.current: LeaseRecord | None = None  # what we hold (None: nothing)
        self.taken_here = False  # this process created the generation: it releases it
        self.lost: LeaseRecord | None = None  # the newer holder's lease, once we lost
        self.lost_generation = 0
        self.confirmed = 0.0  # wall clock when the durable side last said the lease is ours
        self._recalled = False  # `current` comes from lease.json, not yet confirmed here
        self._unreadable: dict[str, float] = {}
        self._pending: tuple[leasing.Take, lease.Found] | None = None  # taken at first write
        self.on_foreign: Callable[[frozenset[str]], None] = lambda keep: None  # drop indexes
        self.trusted: frozenset[str] = frozenset()  # indexes kept at the last foreign take
        self._free: lease.Found | None = None  # what `wait_free` found: no holder
        self.epoch = 0  # generations taken after another holder's, by this object
        self._mutex = threading.RLock()  # parallel copies reach `commit` at once
        self._taking, self._seen = False, 0  # _seen: below the newest generation ever listed
        self._at_exit = leaseprocess.AtExit()
        me = leasefile.holder_id(state_dir)
        self._me = Holder(me, socket.gethostname(), os.getpid(), time.time_ns())
        self.root = root  # the durable root, as configured (lease.json is kept for it)
        remembered = leasefile.load(state_dir, me, root)
        self.last = remembered.generation  # the generation we held last
        self._moved = remembered.moved  # this state dir wrote another root last
        self.synced = remembered.synced  # indexes a restore built (`leasefile.Synced`)

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = self._store_factory()
        return self._store

    @property
    def generation(self) -> int:
        return self.current.generation if self.current is not None else 0

    # -- taking ------------------------------------------------------------
    def wait_free(self) -> None:
        """Before a restore: wait until no other instance holds the lease (released,
        expired, or ours), at most `lease_wait` seconds (`LeaseHeld`), so a new instance
        restores the old one's final checkpoint.  Takes nothing: a restore writes nothing
        durable (with `takeover` the caller takes it instead, to fence the old one)."""
        if self.lost is not None:
            raise self._lost_error()
        if self.current is None:
            self.acquire(take=False)

    def commit(self) -> None:
        """Before the first durable write: take the lease (or create the generation
        `hold` decided on).  Waits for another holder like `acquire` (`LeaseHeld`); a
        generation taken after another holder's moves `epoch` on, which makes the
        manifest fence of every index loaded before it refuse (`AdapterFence`)."""
        with self._mutex:
            if self.lost is not None:
                raise self._lost_error()
            if self.current is not None or self._taking:  # the lease's own first write
                return
            self._taking = True
            try:
                pending, self._pending = self._pending, None
                if pending is None and self._recall():
                    return
                if pending is None or not self._take(*pending):
                    self.acquire()
            finally:
                self._taking = False

    def acquire(self, *, own: bool = False, lazy: bool = False, take: bool = True) -> None:
        """Read the lease and take or keep it; wait for another holder's lease at most
        `lease_wait` seconds (not at all with `takeover`).  A generation taken after
        another holder's calls `on_foreign`.  `own`: this process releases it at its end
        even when it kept a generation this state directory took before (a `run` after a
        crash of the previous one).  `lazy`: a generation after our own is only decided
        on (`commit` creates it).  `take=False`: only wait (`wait_free`)."""
        deadline = self.clock() + self.lease_wait
        said = False
        while True:
            asked = self.clock()
            found = lease.read(self.store)
            self._seen = max(self._seen, found.generation - 1)  # never take one listed
            now = self.clock()
            decision = leasing.decide(
                found,
                self._me.id,
                now,
                takeover=self.takeover,
                unreadable_until=self._unreadable_until(found.unreadable, now),
                last=self.last,
            )
            if isinstance(decision, leasing.Take) and self._moved:  # indexes of another root
                decision = attrs.evolve(decision, foreign=True)
            if isinstance(decision, leasing.Keep):
                assert found.record is not None
                self.confirmed = asked
                # its taker gone (a killed command): ours to release at our end
                self._adopt(found.record, taken=own or leaseprocess.gone(found.record.holder))
                return
            if isinstance(decision, leasing.Take):
                if not take:
                    self._free = found
                    if said:  # the operator saw the wait begin: say why it ended
                        log.info("lease.free %s", decision.why, extra={"event": "lease.free"})
                    return
                if lazy and not decision.foreign:
                    self._pending = (decision, found)
                    return
                if self._take(decision, found):
                    return
                continue  # another process created that generation first: look again
            if now >= deadline:
                raise LeaseHeld(decision.held(self.store.describe(), self.lease_wait))
            if not said:
                log.info(
                    "lease.waiting holder=%s until=%s",
                    decision.holder,
                    lease.when(decision.until),
                    extra={"event": "lease.waiting"},
                )
                said = True
            self.sleep(max(0.05, min(POLL, decision.until - now, deadline - now)))

    def _take(self, decision: leasing.Take, found: lease.Found) -> bool:
        if decision.generation <= self._seen:  # a listing older than one we saw: again
            return False
        asked = self.clock()
        record = LeaseRecord(decision.generation, 0, self._me, asked + self.lease_seconds)
        if not lease.create_and_keep(self.store, record, self.sleep):
            return False
        if decision.foreign:  # the indexes go before lease.json says the generation is ours
            self.epoch += 1
            self._moved = False
            self.trusted = self.synced.trusted(found)
            self.on_foreign(self.trusted)
        self.synced, self.confirmed = leasefile.Synced(), asked
        self._adopt(record, taken=True)
        # the generations before ours, listed after ours exists (see `renew`): a holder
        # whose own object is gone knows it lost (`check`)
        lease.remove(
            self.store, [k for g, _r, k in lease.names(self.store) if g < record.generation]
        )
        log.info(
            "lease.acquired generation=%d %s",
            record.generation,
            decision.why,
            extra={"event": "lease.acquired"},
        )
        return True

    def restored(self, adapters: list[str]) -> None:
        """After a restore that took nothing (`wait_free`): these adapters' indexes are
        the manifest as the generation it found free left it (`leasefile.Synced`)."""
        if self._free is not None and self.current is None and adapters:
            self.synced = self.synced.add(self._free, adapters)
            self._save()

    def forget_root(self) -> bool:
        """Whether this state dir wrote another durable root last (its indexes are that
        root's); from now on ``lease.json`` is this root's."""
        if not self._moved:
            return False
        self._moved, self.last = False, 0
        self._save()
        return True

    def fresh(self) -> bool:
        """Held and confirmed recently enough to write without asking (`leasing.fresh`)."""
        if self.current is None or self.lost is not None:
            return False
        return leasing.fresh(self.confirmed, self.clock(), self.lease_seconds)

    def _recall(self) -> bool:
        """Adopt the lease another process of this state dir confirmed a moment ago
        (``lease.json``), without asking; `check` finds out if it moved since."""
        kept = leasefile.load(self.state_dir, self._me.id, self.root)
        record, confirmed = kept.record, kept.confirmed
        if record is None or record.generation != self.last:
            return False
        if not leasing.fresh(confirmed, self.clock(), self.lease_seconds):
            return False
        self.confirmed, self.current, self._recalled = confirmed, record, True
        if leaseprocess.gone(record.holder):  # its taker was killed: ours to release
            self.taken_here = True
            self._at_exit.arm(self)
        return True

    def _adopt(self, record: LeaseRecord, *, taken: bool) -> None:
        self.current, self._recalled = record, False
        self.taken_here = self.taken_here or taken
        if self.taken_here:
            self._at_exit.arm(self)  # released at interpreter exit if still held
        self._save()

    def _unreadable_until(self, key: str | None, now: float) -> float:
        return now if key is None else self._unreadable.setdefault(key, now) + self.lease_seconds

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
                # released by force (an operator said we were dead) counts as lost too
                if (
                    record is None
                    or leasing.lost(held.generation, found.generation)
                    or record.holder.id != self._me.id
                    or record.released
                ):
                    if not self._recalled:
                        self._lose()
                    # only recalled (`_recall`): this process never held it; it starts
                    # like any new instance (wait, or take it after the other holder)
                    self.current, self._recalled, self.confirmed = None, False, 0.0
                    self.acquire()
                    return
                self.current = record  # a process sharing our state dir renewed it
            self._recalled = False
            self.confirmed = asked
            self._save()
            self.renew()

    def _retake(self, held: LeaseRecord, found: lease.Found) -> None:
        """Our lease object is gone and no newer generation exists: the durable side lost
        it (a write-back mount restarted before it landed).  Take the generation after
        ours, so whatever another instance took in the gap is older, and fenced."""
        why = f"the durable side lost generation {held.generation}'s object"
        log.warning("lease.vanished %s", why, extra={"event": "lease.vanished"})
        if not self._take(leasing.Take(held.generation + 1, foreign=False, why=why), found):
            self._lose()  # another instance took that generation first

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
        """Mark the lease released (whoever took it, after its final checkpoint)."""
        self._pending = None
        held = self.current
        if held is None or not self.taken_here or self.lost is not None:
            return
        nxt = attrs.evolve(held, renewal=held.renewal + 1, released=True)
        if self._replace(held, nxt):
            log.info(
                "lease.released generation=%d", held.generation, extra={"event": "lease.released"}
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

    def _lost_error(self) -> LeaseLost:
        assert self.lost is not None
        return LeaseLost(
            leasing.lost_message(self.store.describe(), self.lost, self.lost_generation)
        )

    def _save(self) -> None:
        held = self.current
        if held is not None:
            self.last = held.generation
        kept = held if self.lost is None else None  # a lost lease is recalled by nobody
        leasefile.save(
            self.state_dir, self._me.id, self.root, self.last, kept, self.confirmed, self.synced
        )

    def describe(self) -> dict[str, Any]:
        """For `status` and `Runner.status`: what this instance holds or lost."""
        held = self.current
        return {
            "generation": self.generation,
            "holder": str(held.holder) if held else None,
            "expires": held.expires if held else None,
            "lost": None if self.lost is None else str(self._lost_error()),
        }


__all__ = ["LeaseHolder"]
