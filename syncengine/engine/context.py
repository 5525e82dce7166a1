"""What the composition root hands down: one engine's frozen `Context`.

Owns the values the root's parts share, built once when an `Engine` is made
(`build`): the configuration, the clock, the store factory (a durable
directory's `Store`; an ``s3://`` root's when the config names one), the
notices said once per engine, the progress reporter, how many processes a walk
may use, and each adapter's compiled patterns.  The parts below the `Engine`
(`durableroot`, `rootlease`, `adapterstates`, `passes`) are given this context
or the pieces of it they use, and a callback where they must tell the root
something; none of them imports the `Engine`, not even for typing
(tests/test_layout.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import attrs

from syncengine.config import AdapterSpec, Config
from syncengine.config.adapterspec import exclusion_patterns, skip_dirs
from syncengine.durable.lifecycle import DurableStore
from syncengine.durable.posix.store import PosixStore
from syncengine.notices import Notices
from syncengine.patterns import Matcher, compile_patterns
from syncengine.progress import Reporter

Stores = Callable[[Path], DurableStore]
"""A durable directory -> its Store (`PosixStore`; tests: an in-memory one)."""


@attrs.frozen
class Context:
    """One engine's shared, unchanging values (the mutable ones, `notices` and the
    reporter's meters, are objects the parts share, never replaced)."""

    config: Config
    clock: Callable[[], int]  # wall-clock nanoseconds (tests drive it)
    stores: Stores
    notices: Notices  # a path's repeated warning is said once per engine
    progress: Reporter  # *.progress lines every 5 s; a bar if given
    scan_workers: int  # processes a one-shot walk may fork into
    exclusions: Mapping[str, Matcher]  # adapter -> its exclusions, compiled
    logs: Mapping[str, Matcher]  # adapter -> its append-only logs (`segments`); absent: none

    def matcher(self, name: str) -> Matcher:
        """An adapter's exclusions (`exclusion_patterns`), compiled."""
        return self.exclusions[name]

    def log_matcher(self, name: str) -> Matcher | None:
        """An adapter's append-only logs (its `segments` patterns), compiled; None: none."""
        return self.logs.get(name)

    def skip_dirs(self, spec: AdapterSpec) -> frozenset[str]:
        """What a walk of `spec`'s live tree never enters (`adapterspec.skip_dirs`)."""
        return skip_dirs(spec, self.config.state_dir)

    def quiet_ns(self) -> int:
        """How long a log stays unchanged before its plain copy is published."""
        return int(self.config.plain_after * 1e9)


def build(
    config: Config,
    *,
    clock: Callable[[], int],
    stores: Stores,
    progress: Reporter | None,
    scan_workers: int,
) -> Context:
    """The context of an engine on `config`: patterns compiled once, and the store
    factory of an ``s3://`` durable root when the caller left the default."""
    if config.s3 is not None and stores is PosixStore:  # durable_root = "s3://..."
        from syncengine.durable.s3 import select as s3_select

        stores = s3_select.stores(config)
    return Context(
        config=config,
        clock=clock,
        stores=stores,
        notices=Notices(),
        progress=progress or Reporter(),
        scan_workers=scan_workers,
        exclusions={
            s.name: compile_patterns(exclusion_patterns(s), where=f"adapter {s.name!r} exclude")
            for s in config.adapters
        },
        logs={
            s.name: compile_patterns(s.segments, where=f"adapter {s.name!r} segments")
            for s in config.adapters
            if s.segments
        },
    )
