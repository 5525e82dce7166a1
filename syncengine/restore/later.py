"""The background part of `run`'s restore: what waits, and carrying out one batch of it.

Owns the doing side of issue 27's order (the rule is `syncengine.plan.order`'s):
`defer` splits a restore plan, seeds the index with each waiting file's durable
entry (dirty, as a kept local file is: a base manifest still lists it, and a
file the agent writes there is hashed and published) and records the waiting
paths as pending (`syncengine.local.pending`); `arrange` asks the packs once which
waiting files they serve and puts those last, pack by pack in offset order (gc packs
only small files older than its cutoff, so they are older than the rest but for
large files, which are never packed); `batches` cuts the waiting files into
batches; `run_batch` places one batch with `new_only`
(restorer.py): never over a file that appeared since the plan, never outside
the live tree (the same `DirCache` as every restore).  The daemon's
`BackgroundRestore` runs the batches between checkpoint passes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import attrs

from syncengine.config import AdapterSpec
from syncengine.durable.manifest import Entry
from syncengine.durable.store import Store
from syncengine.local import chainstate, pending, seed
from syncengine.local.adapter import AdapterState
from syncengine.local.index import DIRTY, Index
from syncengine.plan import Fetch, RestoreAction
from syncengine.plan.order import Order, split
from syncengine.progress import SILENT
from syncengine.report import AdapterReport
from syncengine.restore import packed, restorer

BATCH_FILES = 1000  # a checkpoint pass waits at most one batch
BATCH_BYTES = 64 << 20


def order_of(spec: AdapterSpec) -> Order:
    return Order(spec.restore_first, spec.restore_newest, spec.restore_newest_count)


def defer(
    state: AdapterState, actions: Sequence[RestoreAction], order: Order
) -> tuple[list[RestoreAction], list[Fetch]]:
    """(now, later) of a plan; the later files are pending from here on."""
    now, later = split(actions, order)
    for action in later:  # always the durable entry, dirty: `_still_seeded` reads it so
        if action.entry.kind == "segments":
            chainstate.seed(state.index, action.entry)
        else:
            seed.record_dirty(state.index, action.entry)
    pending.reset(state.index, (a.entry.path for a in later))
    return now, later


def arrange(store: Store, later: Sequence[Fetch]) -> tuple[list[Fetch], packed.Served]:
    """The waiting files in the order the background takes them, and the packed ones
    (`packed.serving`, one listing for all batches): the files no pack serves first, in
    the planned order (newest first), then the packed ones, grouped by pack in offset
    order, so that each batch reads a few contiguous spans."""
    served = packed.serving(store, [a.entry for a in later])
    if not served:
        return list(later), served
    plain = [a for a in later if a.entry.path not in served]
    inpacks = [a for a in later if a.entry.path in served]
    inpacks.sort(key=lambda a: (served[a.entry.path][0].key, served[a.entry.path][1].offset))
    return plain + inpacks, served


def batches(
    later: Sequence[Fetch], files: int = BATCH_FILES, size: int = BATCH_BYTES
) -> Iterator[list[Fetch]]:
    """The waiting files in order, cut at `files` files or `size` bytes."""
    batch: list[Fetch] = []
    total = 0
    for action in later:
        batch.append(action)
        total += action.entry.size or 0
        if len(batch) >= files or total >= size:
            yield batch
            batch, total = [], 0
    if batch:
        yield batch


def run_batch(
    state: AdapterState,
    batch: list[Fetch],
    jobs: int,
    *,
    save: bool = True,
    served: packed.Served | None = None,
) -> AdapterReport:
    """Place one batch (the caller holds the state lock and keeps passes out); `save`: the
    index too (a pass saves it as well; on disk, pending is a superset until then, which a
    crash leaves harmless: the next start plans again).

    Each file is placed only where none appeared since the plan (one there is
    left to the next checkpoint), and each path handled without an error
    leaves the pending set.  A path whose index record is no longer the seeded
    durable entry was
    checkpointed from a file the agent wrote there meanwhile: it is left alone
    (kept) without reading the durable side, whose object may be that file now.
    """
    index = state.index
    todo: list[RestoreAction] = [a for a in batch if _still_seeded(index, a.entry)]
    written = [a.entry.path for a in batch if not _still_seeded(index, a.entry)]
    pending.settle(index, written)
    rep = restorer.run(
        state, todo, jobs=jobs, progress=SILENT, new_only=True, save=save, served=served
    )
    return attrs.evolve(rep, kept_local=rep.kept_local + len(written))


def _still_seeded(index: Index, entry: Entry) -> bool:
    rec = index.get(entry.path)
    return (
        rec is not None
        and rec.ctime_ns == DIRTY
        and (rec.size, rec.mtime_ns, rec.hash64) == (entry.size, entry.mtime_ns, entry.hash or 0)
    )
