"""A durable root's lifecycle: what the engine does around a store's data, not with it.

Owns the second, separate interface of a store (`Lifecycle`): adopting what
the mount probe found (`configure` with a `Target`), preparing lazily before
the first write (`before_first_write`: the probe and the lease run only when a
pass writes, so an idle pass touches nothing), the mount instance objects are
recorded under (`instance`), whether an object keeps the mtime given at commit
(`keeps_mtime`), making committed objects survive a power loss (`barrier`),
asking a write-back mount whether everything committed has reached the bucket
(`confirm`), and removing a killed run's temp objects (`sweep_staging`).
`syncengine.durable.store.Store` is the data (Litestream keeps its
``ReplicaClient`` to data access the same way): restore, verify, export, gc's
planning, the lease and the manifest take a `Store`; only the composition
root, the checkpoint executor and the few writers that need a barrier take a
`DurableStore`, a store with its lifecycle.  Implemented by
`syncengine.durable.posix.store.PosixStore` (from the probe) and, for stores
whose commit is one atomic PUT (`S3Store`, the tests' `MemoryStore`), by
`AtomicPutStore`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import attrs

from syncengine.durable.store import Store


class Uploads(Protocol):
    """A write-back mount's upload queue (`syncengine.durable.posix.writeback.Uploads`)."""

    @property
    def instance(self) -> str: ...

    def confirm(self, last_write: float) -> bool: ...


@attrs.frozen
class Target:
    """What the mount probe found about the durable target (defaults: a local disk)."""

    rename_supported: bool = True
    attrs_after_close: bool = False  # mode and mtime set on a handle are lost at close
    keeps_mtime: bool = False  # an object's mtime is the one given at commit
    uploads: Uploads | None = None  # None: close is the upload (no write-back)


class Lifecycle(Protocol):
    """A durable root's lifecycle around one store's objects (the module docstring)."""

    def configure(self, target: Target) -> None: ...

    def before_first_write(self, prepare: Callable[[], None]) -> None: ...

    @property
    def instance(self) -> str: ...

    @property
    def keeps_mtime(self) -> bool: ...

    def barrier(self) -> None: ...

    def confirm(self) -> bool: ...

    def sweep_staging(self) -> int: ...


class DurableStore(Store, Lifecycle, Protocol):
    """One adapter's store with its durable root's lifecycle: what the root builds."""


class AtomicPutStore:
    """What every store whose commit is one atomic PUT shares (S3, the tests' memory
    store): nothing to adopt from a probe, no mount instance, mtimes kept as given,
    objects whole or absent (never torn), nothing to confirm after the PUT, and the
    lazy preparation before the first write that an idle pass never triggers."""

    _before_write: Callable[[], None] | None = None

    def configure(self, target: Target) -> None:
        """Nothing to adopt: a PUT is atomic and its answer is the commit."""

    def before_first_write(self, prepare: Callable[[], None]) -> None:
        self._before_write = prepare

    def _writing(self) -> None:
        prepare = self._before_write
        if prepare is not None:
            prepare()
            self._before_write = None

    @property
    def instance(self) -> str:
        return ""

    @property
    def keeps_mtime(self) -> bool:
        return True

    def writes_in_place(self) -> bool:
        return False  # under the final name, but whole or not at all: never torn

    def barrier(self) -> None:
        self._writing()

    def confirm(self) -> bool:
        return True


__all__ = ["AtomicPutStore", "DurableStore", "Lifecycle", "Target", "Uploads"]
