"""The durable root as one engine knows it: its health, what it supports, its stores.

Owns `DurableRoot`: the health check of the durable root (`probe.check_root`;
for an ``s3://`` root, one LIST per engine), the probe of what the mount
supports (once per mount instance: a remounted client is probed again),
the stores built on it configured to publish the way the mount supports, and
how many copies run at once.  The `Engine` builds one and hands it to the
parts that need it (the lease, the passes' hooks).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path

from syncengine.config import Config
from syncengine.durable.lifecycle import DurableStore, Target
from syncengine.durable.posix import mount, probe, writeback

log = logging.getLogger("syncengine")


class DurableRoot:
    """The durable root of one `Config`, and the stores built on it."""

    def __init__(self, config: Config, stores: Callable[[Path], DurableStore]) -> None:
        self.config = config
        self.stores = stores
        self._caps: mount.Capabilities | None = None
        self._uploads: writeback.Uploads | None = None  # for self._caps's mount instance
        self._jobs: int | None = None
        self._bucket_checked = False  # s3:// durable_root: reached once (one LIST)
        self._reached = False  # `reach`: checked once by this engine

    def check(self) -> None:
        """Refuse a durable root that is missing, not mounted when it must be, or unhealthy."""
        if self.config.s3 is not None:  # a bucket: one LIST per engine, no mount to check
            from syncengine.durable.s3 import select as s3_select

            if not self._bucket_checked:
                s3_select.check_bucket(self.config)
                self._bucket_checked = True
            return None
        probe.check_root(
            self.config.durable_root,
            require_mount=self.config.require_mount,
            state_dir=self.config.state_dir,
        )

    def reach(self) -> None:
        """`check`, once per engine: a pass with nothing to publish still finds out that
        the store is unreachable, missing or refuses our credentials (docs/IDLE.md)."""
        if not self._reached:
            self.check()
            self._reached = True

    def copy_jobs(self) -> int:
        """Parallel copies: `jobs` on a FUSE or network mount, one thread on a local disk
        (unless `jobs` was set explicitly)."""
        if self._jobs is None:
            explicit = self.config.sources.get("jobs", "default") != "default"
            remote = self.config.s3 is not None or mount.is_remote(self.config.durable_root)
            self._jobs = self.config.jobs if explicit or remote else 1
        return self._jobs

    def prepare_store(self, store: DurableStore) -> None:
        """Make `store` publish the way the mount supports (probed once per instance)."""
        caps = self._ready()
        store.configure(
            Target(
                rename_supported=caps.rename_supported,
                attrs_after_close=caps.attrs_after_close,
                keeps_mtime=caps.set_mtime or caps.attrs_on_handle,
                uploads=self._uploads,
            )
        )

    def _ready(self) -> mount.Capabilities:
        """Health-check the durable root and learn what it supports (once per mount
        instance: a remounted client is probed again; a bucket: checked once, no probe)."""
        if self.config.s3 is not None:  # no health check: a failed PUT says what a LIST would
            self._caps = self._caps or mount.Capabilities()
            return self._caps
        self.check()
        root = self.config.durable_root
        if self._caps is None or self._caps.instance != probe.instance(root):
            self._caps = probe.capabilities(root, self.config.state_dir)
            self._uploads = writeback.uploads(self._caps, self.config)
            log.info(
                "probe.durable root=%s %s",
                root,
                self._caps.describe(),
                extra={"event": "probe.durable"},
            )
        return self._caps

    def writable_store(self, root: Path) -> DurableStore:
        """A Store under the durable root that publishes the way the mount supports
        (probed once per Engine; a mount without rename gets unique objects)."""
        store = self.stores(root)
        self.prepare_store(store)
        return store

    def lazy_store(self, root: Path) -> DurableStore:
        """`writable_store`, probed just before its first write (reads need no probe)."""
        store = self.stores(root)
        store.before_first_write(functools.partial(self.prepare_store, store))
        return store
