"""``syncengine export``: the durable copy of one live path, found and written out.

Owns finding which adapter and manifest entry a path means (absolute under a
live tree, or relative with the adapter named or unambiguous) and handing it
to `chainread.export`, which rebuilds and checks it; a sealed secret file
(docs/SECRETS.md) is opened with the configured keys and checked against its
hash instead.  Reads the durable side only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from syncengine.config import Config
from syncengine.crypt import chunked, sealed
from syncengine.crypt.secrets import Secrets, sealed_with
from syncengine.durable import chainread
from syncengine.durable.manifest import Entry
from syncengine.durable.manifest import load as load_manifest
from syncengine.durable.store import Store
from syncengine.errors import ConfigError, SourceError
from syncengine.fs.stream import stream


def export(
    config: Config,
    path: str,
    out: BinaryIO,
    *,
    adapter: str | None = None,
    open_store: Callable[[Path], Store],
) -> int:
    """Write the durable copy of `path` to `out` (`open_store`: an adapter's durable side);
    return the bytes written.

    Raises ConfigError when the path is unknown, SourceError when the durable
    copy is missing or corrupt.
    """
    specs = config.select([adapter] if adapter else None)
    rel = path
    if os.path.isabs(path):
        full = Path(os.path.normpath(path))
        specs = tuple(s for s in specs if s.live in full.parents)
        if not specs:
            raise ConfigError(f"{path} is not inside any adapter's live tree")
        rel = full.relative_to(specs[0].live).as_posix()
        specs = specs[:1]
    found = []
    for spec in specs:
        store = open_store(spec.durable)
        entry = load_manifest(store).entries.get(rel) if store.exists() else None
        if entry is not None:
            found.append((store, entry, spec.name))
    if not found:
        raise ConfigError(
            f"{rel}: no checkpoint of this path in "
            f"{', '.join(s.name for s in specs) or 'any adapter'}"
        )
    if len(found) > 1:
        raise ConfigError(
            f"{rel} is checkpointed by adapters "
            f"{', '.join(f[2] for f in found)}: choose one with --adapter"
        )
    store, entry, name = found[0]
    if sealed_with(entry.extra):
        return _unsealed(store, entry, Secrets(name, keys=config.keys), out)
    return chainread.export(store, entry, out)


def _unsealed(store: Store, entry: Entry, secrets: Secrets, out: BinaryIO) -> int:
    """Write a sealed file's plaintext; SourceError when it cannot be opened or differs."""
    with store.open(entry.location) as src:
        try:
            plain = chunked.reader(src.file, secrets.keys, secrets.name(entry.path), marked=True)
            n, h = stream(plain, None, out.write, src_name=entry.location)
        except sealed.SealError as exc:
            raise SourceError(entry.path, "export", f"{exc.why}: {exc.fix}") from None
    if entry.hash is not None and h != entry.hash:
        raise SourceError(entry.path, "export", "the opened copy differs from its manifest hash")
    return n
