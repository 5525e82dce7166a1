"""Verify's check of the packs (format: `syncengine.durable.packs`).

Owns `check`: every pack with a readable index is read whole (one request
each) and every record's bytes are hashed against the index.  A pack that is
missing, shorter than its index says, or holds bytes that differ from a
record is a problem: restore would fall back to the plain objects, so nothing
is lost, but the pack is damaged.  An index that cannot be read (cut by a
killed gc on a mount without rename) is a note: restore ignores it and gc
collects it.  Reads only.
"""

from __future__ import annotations

import xxhash

from syncengine.durable import packs
from syncengine.durable.store import Store


def check(store: Store, notes: list[str]) -> list[tuple[str, str]]:
    """The problems of one adapter's packs as (key, what); notes go to `notes`."""
    catalog = packs.load(store)
    problems: list[tuple[str, str]] = []
    for pack in catalog.packs:
        try:
            data = store.read_bytes(pack.key)
        except FileNotFoundError:
            problems.append((pack.key, "its index names it but the pack is missing"))
            continue
        if len(data) != pack.size:
            problems.append((pack.key, f"{len(data)} bytes, its index says {pack.size}"))
            continue
        bad = [r.path for r, b in packs.sliced(pack, data) if xxhash.xxh3_64_intdigest(b) != r.hash]
        if bad:
            problems.append(
                (
                    pack.key,
                    f"the packed bytes of {len(bad)} file(s) differ from its index (first: "
                    f"{bad[0]}); restore reads those plain; `syncengine gc --apply` packs anew",
                )
            )
    notes.extend(f"unreadable pack index {u} (ignored; gc collects it)" for u in catalog.unreadable)
    return problems
