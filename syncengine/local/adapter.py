"""One adapter as a run sees it on this machine: its live root, store and loaded index.

Owns `AdapterState`, which checkpoint, restore, gc, seeding and the missing-path
search all work on, so that none of them imports another's executor for it.
It lives in `local/` because it holds this machine's `Index` and the stages
above read it; what it names below (the store, the SQLite options, the lease
fence) comes from the layers under `local/`.  Holds no behaviour: what is done
with an adapter lives with the stage doing it.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from syncengine.crypt.secrets import Secrets
from syncengine.durable.lifecycle import DurableStore
from syncengine.durable.manifest import Fence
from syncengine.local.index import Index
from syncengine.notices import Notices
from syncengine.patterns import Matcher
from syncengine.sqlite.files import Options


@attrs.define
class AdapterState:
    """One adapter at run time: its live root, store and loaded index."""

    name: str
    live: Path
    store: DurableStore  # its data, and the lifecycle the checkpoint executor uses
    index: Index
    index_path: Path
    staging_marker: Path
    segments: Matcher | None = None  # append-only logs (segments.py), if any
    sqlite: Options | None = None
    sqlite_patterns: tuple[str, ...] = ()
    notices: Notices = attrs.field(factory=Notices)  # warnings said once per run
    fence: Fence | None = None  # the durable root's lease (manifest objects check it)
    secrets: Secrets | None = None  # its secret files and the keys sealing them (crypt/)
