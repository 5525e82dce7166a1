"""What one engine knows about each adapter between passes: its loaded index, and the start check.

Owns `AdapterStates`: each adapter's `AdapterState` (live root, store, and
its index, loaded once and reloaded when another process saved it), which
indexes are new and not yet rebuilt from the manifest (`unseeded`: rebuilt
only when a pass is about to write, so an idle pass never reads the durable
side), and the index against the durable side at a start (a new mount
instance since the last check: `start_checks`, see `syncengine.local.seed`).
`syncengine.engine.passes` runs the passes on top of it.  It is handed the
engine's `Context`, the durable root's health check (`check_durable`) and the
lease's fence for an index loaded now (`fence`); the root calls
`forget_indexes` when the lease says another instance wrote last.  An index
dropped while a background restore runs hands its pending paths to the one
that replaces it (`drop`, `syncengine.local.pending.carry`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from syncengine.config import AdapterSpec
from syncengine.crypt.secrets import Secrets, of_adapters
from syncengine.durable.manifest import Fence
from syncengine.durable.posix import probe
from syncengine.engine.context import Context
from syncengine.errors import DurableError
from syncengine.local import pending, status
from syncengine.local import seed as seeding
from syncengine.local.adapter import AdapterState
from syncengine.local.index import Index, file_signature
from syncengine.report import AdapterReport
from syncengine.sqlite import files


class AdapterStates:
    """The adapters' states of one engine, with what it remembers between passes: the
    loaded indexes, which are not yet seeded from the manifest, and which mount instance
    each adapter was last checked against."""

    def __init__(
        self, ctx: Context, check_durable: Callable[[], None], fence: Callable[[str], Fence]
    ) -> None:
        self.ctx, self.check_root, self.fence = ctx, check_durable, fence
        self.config = ctx.config
        self.indexes: dict[str, Index] = {}
        self.unseeded: set[str] = set()  # fresh indexes not yet rebuilt from the manifest
        self._restored_fresh: set[str] = set()  # indexes this engine's restore built whole
        self._checked: dict[str, str] = {}  # adapter -> mount instance checked (seed.due)
        self.sealed: set[str] = set()  # adapters whose secret files were all seen sealed
        self._carry: dict[str, Index] = {}  # dropped indexes whose pending paths pass on
        # secrets by (adapter, patterns, encrypt): compiled once, a state is made every pass
        self._secrets: dict[tuple[str, tuple[str, ...], str], Secrets] = {}

    def forget_indexes(self, keep: frozenset[str] = frozenset()) -> None:
        """Another instance held the lease since these indexes were saved: each adapter
        but `keep` starts again from the durable manifest (`syncengine.engine.rootlease`)."""
        for name in [n for n in self.indexes if n not in keep]:
            self.drop(name)
        self.unseeded &= keep
        self.sealed &= keep

    def drop(self, name: str) -> None:
        """Forget one adapter's loaded index (reloaded, or rebuilt from the manifest, next);
        a background restore's pending paths pass to the next one (`_carry_pending`)."""
        old = self.indexes.pop(name, None)
        if old is not None and pending.count(old):
            self._carry[name] = old

    def state(self, spec: AdapterSpec) -> AdapterState:
        """One adapter's live root, store and index (reloaded when another process saved it)."""
        index_path = status.index_path(self.config.state_dir, spec.name)
        index = self.indexes.get(spec.name)
        if index is not None and index.file_sig != file_signature(index_path):
            # Another process (a checkpoint typed by a person) saved it since: never
            # continue from a stale manifest sequence.
            self.drop(spec.name)
            index = None
        if index is None:
            index = Index.load(index_path)
            if index is None:
                index = Index()
                self.unseeded.add(spec.name)
            self.indexes[spec.name] = index
        state_dir, keys = self.config.state_dir, self.config.keys
        secrets = self._secrets_of(spec) if spec.secrets or keys else None
        options = files.Options(
            staging=state_dir / "sqlite-staging",
            quarantine=state_dir / "sqlite-quarantine",
            busy_timeout=self.config.sqlite_busy_timeout,
            secrets=secrets,
        )
        state = AdapterState(
            name=spec.name,
            live=spec.live,
            store=self.ctx.stores(spec.durable),
            index=index,
            index_path=index_path,
            staging_marker=status.staging_marker(state_dir, spec.name),
            segments=self.ctx.log_matcher(spec.name),
            sqlite=options,
            sqlite_patterns=spec.sqlite,
            notices=self.ctx.notices,
            fence=self.fence(spec.name),
            secrets=secrets,
        )
        if spec.name in self._carry:
            self._carry_pending(state)
        return state

    def _secrets_of(self, spec: AdapterSpec) -> Secrets:
        key = (spec.name, spec.secrets, spec.encrypt)
        if key not in self._secrets:
            self._secrets[key] = of_adapters([spec], self.config.keys)[spec.name]
        return self._secrets[key]

    def _carry_pending(self, state: AdapterState) -> None:
        """The files a background restore has still to bring back stay pending in the
        index that replaces a dropped one: no pass marks them absent, and each batch still
        finds its seeded entry.  A new index is rebuilt from the manifest first (this
        reads the durable side, only while a background restore runs)."""
        if state.name in self.unseeded:
            seeding.from_manifest(state)
            self.unseeded.discard(state.name)
        pending.carry(self._carry.pop(state.name), state.index)

    def adapter_state(self, spec: AdapterSpec, *, seed: bool = True) -> AdapterState:
        """`state`, its index rebuilt from the manifest first if it is new (`seed`)."""
        state = self.state(spec)
        if seed and spec.name in self.unseeded:
            self.unseeded.discard(spec.name)
            seeding.from_manifest(state)
        return state

    def states(
        self, specs: Sequence[AdapterSpec], reports: list[AdapterReport]
    ) -> list[AdapterState]:
        states = []
        for spec in specs:
            try:
                states.append(self.state(spec))
            except DurableError as exc:
                reports.append(AdapterReport(spec.name, fatal=str(exc)))
        return states

    def start_checks(
        self,
        states: list[AdapterState],
        reports: list[AdapterReport],
        *,
        force: bool = False,
        rebase: bool = False,
    ) -> list[AdapterState]:
        """The index against the durable side, for each adapter at a start (a new mount
        instance since its last check, or `force`): see `syncengine.local.seed`.  Forced
        by the operator (`rebase`), a fork is repaired from here whatever the index."""
        now = probe.instance(self.config.durable_root)
        kept, healthy = [], False
        for state in states:
            try:
                forced = force and state.name not in self._restored_fresh
                if forced or (
                    self._checked.get(state.name) != now
                    and seeding.due(self.config.state_dir, state.name, now)
                ):
                    if not healthy:  # an unmounted root must never look like an empty bucket
                        self.check_root()
                        healthy = True
                    if state.name not in self.unseeded:
                        seeding.check(state, now, rebase=rebase)
                        self.indexes[state.name] = state.index
                    seeding.remember(self.config.state_dir, state.name, now, self.ctx.clock())
                self._checked[state.name] = now
            except DurableError as exc:
                reports.append(AdapterReport(state.name, fatal=str(exc)))
                continue
            kept.append(state)
        return kept

    def check_durable(self, specs: Sequence[AdapterSpec]) -> list[AdapterReport]:
        """`start_checks` forced for `specs`; the adapters that failed, as fatal reports."""
        reports: list[AdapterReport] = []
        self.start_checks(self.states(specs, reports), reports, force=True)
        return reports

    def remember_checked(self, name: str) -> None:
        now = probe.instance(self.config.durable_root)
        seeding.remember(self.config.state_dir, name, now, self.ctx.clock())
        self._checked[name] = now
        self._restored_fresh.add(name)
