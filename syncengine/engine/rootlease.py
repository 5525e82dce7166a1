"""The engine's side of the durable root's lease: when to take, renew and release it.

Owns the hooks the `Engine` calls (issue 16): `commit` just before a pass's first
durable write (`prepare_store`: an idle pass, or one whose copies all
turn out unchanged, asks the durable side nothing), `before_restore` (a new
instance waits for the old one's lease, or takes it over), `renew` (when
due), `acquire` and `release` for a `Runner`, which keeps the lease from its
start to its final checkpoint; the CLI releases at the end of each command,
an embedded `Engine` at `close()` (``with Engine(...)``) or when the
interpreter exits (a killed one's lease expires).  When the previous
generation was another instance's, this state dir's indexes may be behind
the manifest: they are dropped, and each adapter starts from the durable
manifest (`AdapterFence`): the files here, the loaded ones through the
`forget` callback the root hands in.  A take never goes at or below a
generation the adapters' manifests name (`_floor`, `syncengine.durable.leasing`).
The lease itself is `syncengine.local.leaseholder.LeaseHolder`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from syncengine.config import Config
from syncengine.durable import lease, manifestlist
from syncengine.durable.lifecycle import DurableStore as Store
from syncengine.engine.context import Stores
from syncengine.engine.durableroot import DurableRoot
from syncengine.errors import DurableError, LeaseHeld, LeaseLost, NameTaken
from syncengine.local import durabletrees, status
from syncengine.local.leaseholder import LeaseHolder

log = logging.getLogger("syncengine")


class RootLease:
    """One engine's lease on its durable root.  `forget` is the root's: drop the loaded
    indexes of every adapter but those named (their files are gone already)."""

    def __init__(
        self,
        config: Config,
        stores: Stores,
        durable: DurableRoot,
        forget: Callable[[frozenset[str]], None],
    ) -> None:
        self.config, self.stores, self.durable, self.forget = config, stores, durable, forget
        self.holder = LeaseHolder(
            lambda: durable.lazy_store(config.durable_root),
            config.state_dir,
            config.durable_id,  # a bucket: with its endpoint
            lease_seconds=config.lease_seconds,
            lease_wait=config.lease_wait,
            floor=self._floor,
        )
        self.holder.on_foreign = lambda keep: self._forget_indexes(
            "another instance wrote last", keep
        )
        self.held: LeaseHeld | None = None  # the last pass stopped: another holder's lease

    def acquire(self, *, takeover: bool = False) -> None:
        """Take (or keep) the lease now and keep it until `release` (a `Runner` at its
        start, before the restore).  Waits at most `lease_wait` for another holder
        (`LeaseHeld`); `takeover`: takes it at once."""
        self.holder.takeover = self.holder.takeover or takeover
        if self.holder.current is None:
            self.holder.acquire(own=True)

    def before_restore(self, *, takeover: bool = False) -> None:
        """A restore waits until no other instance holds the lease (a new container
        restores the old one's final checkpoint) and takes nothing; with `takeover` it
        takes the lease at once, which fences the old instance."""
        self.holder.takeover = self.holder.takeover or takeover
        if self.holder.takeover:
            self.acquire()
        else:
            self.holder.wait_free()

    def before_pass(self) -> None:
        """Before a checkpoint or restore plans: a state dir that wrote another durable
        root last has indexes of that root; they go, so this root gets everything.  So do
        the indexes of adapters whose durable tree changed (`durabletrees`)."""
        if self.holder.forget_root():
            self._forget_indexes(
                f"this state dir wrote another durable root last, not {self.config.durable_id}"
            )
        config = self.config
        trees = {spec.name: str(spec.durable) for spec in config.adapters}
        changed = durabletrees.moved(config.state_dir, trees)
        if changed:
            self._forget_indexes(
                f"the durable tree of {', '.join(changed)} is not the one this state dir "
                "wrote last",
                frozenset(trees) - frozenset(changed),
            )

    def after_restore(self, adapters: list[str]) -> None:
        """After a restore that took nothing: these adapters' indexes were built from the
        manifest of a generation nobody holds, so the next take keeps them (an object the
        restore found missing is published again)."""
        self.holder.restored(adapters)

    def prepare_store(self, store: Store) -> None:
        """An adapter's store before its first write in a pass: the lease, then the
        probe (`DurableRoot.prepare_store`)."""
        self.commit()
        self.durable.prepare_store(store)

    def commit(self) -> None:
        """Just before a store's first durable write in a pass (`prepare_store`):
        take the lease, or check that we still hold it (one HEAD), so a fenced instance
        does not even copy files.  No check while the lease is fresh (confirmed less
        than a quarter of `lease_seconds` ago: `leasing.fresh`), so a one-line append
        costs one PUT; each manifest object is still checked (`AdapterFence`)."""
        try:
            self.holder.commit()
            if not self.holder.fresh():
                self.holder.check()
        except LeaseHeld as exc:  # each adapter stops alike; the command exits 77
            self.held = exc
            raise

    def release(self) -> None:
        """After a Runner's final checkpoint, at the end of a CLI command: the next
        instance may take over at once.  Only what this process took is released."""
        self.holder.release()

    def fence(self, adapter: str) -> AdapterFence:
        """The manifest fence of an adapter whose index is loaded now."""
        return AdapterFence(self.holder, self.holder.epoch, adapter)

    def renew(self) -> None:
        """Renew when due: after each pass (an idle pass between renewals asks nothing) and
        from a Runner between passes (its interval may be longer than a third of the lease).
        A lost lease is never renewed (`LeaseHolder.renew`)."""
        self.holder.renew()

    def raise_if_stopped(self) -> None:
        """After a pass: raise what stopped it for the lease (`LeaseLost`: fenced, exit
        76; `LeaseHeld`: another instance's lease did not come free, exit 77)."""
        if self.holder.lost is not None:
            raise LeaseLost(self.holder.describe()["lost"])
        held, self.held = self.held, None
        if held is not None:
            raise held

    @property
    def lost(self) -> str | None:
        return self.holder.describe()["lost"] if self.holder.lost is not None else None

    def status(self) -> dict[str, Any]:
        """The lease as the durable side has it (`syncengine status`: one listing, one
        read), and what this engine holds."""
        try:
            out = lease.status(self.stores(self.config.durable_root))
        except (DurableError, OSError) as exc:
            out = {"error": str(exc)}
        if self.holder.current is not None or self.holder.lost is not None:
            out["this_engine"] = self.holder.describe()
        return out

    def _floor(self) -> int:
        """The newest lease generation any manifest object of this engine's adapters names
        (`leasing` never takes one at or below it): one listing per adapter, at a take."""
        stores = (self.stores(spec.durable) for spec in self.config.adapters)
        return max((manifestlist.listing(store).generation for store in stores), default=0)

    def _forget_indexes(self, why: str, keep: frozenset[str] = frozenset()) -> None:
        config = self.config
        names = [spec.name for spec in config.adapters if spec.name not in keep]
        stale = [p for p in (status.index_path(config.state_dir, n) for n in names) if p.exists()]
        for path in stale:
            path.unlink(missing_ok=True)
        self.forget(keep)
        if stale:  # a fresh state dir has nothing to forget: nothing to say
            log.warning(
                "index.rebuilt state_dir=%s: %s; indexes are rebuilt from the durable manifest",
                config.state_dir,
                why,
                extra={"event": "index.rebuilt"},
            )


class AdapterFence:
    """One loaded index's view of the lease (`manifest.Fence`): `check` also refuses
    (`NameTaken`: the pass runs again from an index rebuilt from the manifest) once this
    engine took the lease after another instance's, since that index was loaded, unless a
    restore built it from the manifest that instance left (`LeaseHolder.trusted`)."""

    def __init__(self, holder: LeaseHolder, epoch: int, adapter: str) -> None:
        self.holder, self.epoch, self.adapter = holder, epoch, adapter

    @property
    def generation(self) -> int:
        return self.holder.generation

    def check(self) -> None:
        self.holder.check()
        if self.holder.epoch != self.epoch:
            self.epoch = self.holder.epoch
            if self.adapter in self.holder.trusted:
                return
            raise NameTaken(
                "another instance held the durable root's lease since this index was loaded"
            )


__all__ = ["AdapterFence", "RootLease"]
