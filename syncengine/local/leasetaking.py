"""This state directory taking the durable root's lease: the holder's state, and taking.

The half of `syncengine.local.leaseholder.LeaseHolder` that reads the lease
and takes or keeps it: `acquire` (and `commit` before a pass's first durable
write, `wait_free` before a plain restore), what decides it being
`syncengine.durable.leasing` (the floor: the newest generation the manifests
name, asked of `floor` before the lease is read), and what this state dir
remembers in ``lease.json`` (`syncengine.local.leasefile`: `_recall`, `_save`).
The fence, renewal and release are `LeaseHolder`'s.  Never reads the
environment; the clock and the sleep come in as parameters.
"""

from __future__ import annotations

import logging
import os
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


class Taking:
    """The lease of one durable root as held from one state directory: its state, and
    taking it (the rest: `syncengine.local.leaseholder.LeaseHolder`)."""

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
        floor: Callable[[], int] = lambda: 0,
    ) -> None:
        self._store_factory = store
        self.floor = floor  # the newest generation the manifests name (`leasing` rules)
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
        self._taking, self._listed = False, 0  # _listed: the newest generation ever listed
        self._at_exit = leaseprocess.AtExit()
        me = leasefile.holder_id(state_dir)
        self._me = Holder(me, os.uname().nodename, os.getpid(), time.time_ns())
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
        named = self.floor() if take else 0  # listed before the lease is read
        while True:
            asked = self.clock()
            found = lease.read(self.store)
            # A generation listed once is part of the floor: a listing that went back (lease
            # objects lost, a mount gone) waits like a floor above the lease, never retakes
            # a number nor spins on a take `_take` refuses.
            self._listed = max(self._listed, found.generation)
            floor = max(named, self._listed)
            now = self.clock()
            held = found.unreadable if floor <= found.generation else f"generation {floor}"
            decision = leasing.decide(
                found,
                self._me.id,
                now,
                takeover=self.takeover,
                unreadable_until=self._unreadable_until(held, now),
                last=self.last,
                floor=floor,
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
                text = self._waiting(decision.holder, decision.until, deadline - now)
                log.warning("lease.waiting %s", text, extra={"event": "lease.waiting"})
                said = True
            self.sleep(max(0.05, min(POLL, decision.until - now, deadline - now)))

    def _waiting(self, holder: str, until: float, left: float) -> str:
        """Said at once, without -v (the command is not hung): who holds the lease, until
        when, and that this one waits."""
        return (
            f"holder={holder} until={lease.when(until)}: another instance writes "
            f"{self.store.describe()}; waiting up to {max(0.0, left):.0f}s for its lease "
            "(--takeover takes it now)"
        )

    def _take(self, decision: leasing.Take, found: lease.Found, *, taken: bool = True) -> bool:
        """Create the generation `decision` names; `taken`: this process releases it (else
        it is taken for the process that holds ours, and names that one)."""
        if decision.generation <= self._listed:  # decided on a listing older than one seen
            return False
        asked = self.clock()
        who = self._me if taken or self.current is None else self.current.holder
        record = LeaseRecord(decision.generation, 0, who, asked + self.lease_seconds)
        if not lease.create_and_keep(self.store, record, self.sleep):
            return False
        if decision.foreign:  # the indexes go before lease.json says the generation is ours
            self.epoch += 1
            self._moved = False
            self.trusted = self.synced.trusted(found)
            self.on_foreign(self.trusted)
        self.synced, self.confirmed = leasefile.Synced(), asked
        self._adopt(record, taken=taken)
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

    def release(self) -> None:
        """`LeaseHolder.release` (what `leaseprocess.AtExit` calls)."""
        raise NotImplementedError


__all__ = ["POLL", "Taking"]
