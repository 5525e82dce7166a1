"""The engine's side of ``durable_root = "s3://BUCKET/PREFIX"``: a store per durable path,
and the health check that replaces the mount probe.

The Config holds the bucket (`S3Location`) and a virtual root path standing for its
prefix (``/s3:/BUCKET/PREFIX``); an adapter's durable directory, a path under that
root, becomes the store of the same relative prefix in the bucket, so the layout of
objects is the one a mount of the bucket would show; another path in the bucket
(``/s3:/BUCKET/KEY``: migrate's legacy ``home``) is the store of that prefix.
`migration` gives `syncengine migrate` its stores and renames.  The client library
is imported here, lazily: without the ``s3`` extra the engine stops with a one-line
error naming it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from syncengine.config import Config
from syncengine.config import s3location as location
from syncengine.config.s3location import S3Location
from syncengine.durable.lifecycle import DurableStore
from syncengine.durable.posix.store import PosixStore
from syncengine.errors import ConfigError

if TYPE_CHECKING:
    from syncengine.durable.s3.store import S3Store


def _location(config: Config) -> S3Location:
    assert config.s3 is not None, "not an s3:// durable_root"
    return config.s3


def _store(config: Config, path: Path) -> DurableStore:
    """The store of a path in the bucket: under the durable root, or (a legacy tree that
    migrate reads, config key ``home``) elsewhere in the same bucket."""
    from syncengine.durable.s3.store import S3Store

    base, root = _location(config), config.durable_root
    if path == root or root in path.parents:
        return S3Store(base.child(path.relative_to(root).as_posix() if path != root else ""))
    if not location.in_bucket(base, path):
        raise ConfigError(
            f"durable path {path} is not in the bucket of durable_root {base.url()}: with "
            "an s3:// durable_root, give adapters' durable directories as relative names"
        )
    rel = path.relative_to(location.bucket_root(base)).as_posix()
    return S3Store(attrs.evolve(base, prefix="" if rel == "." else rel))


def stores(config: Config) -> Callable[[Path], DurableStore]:
    """The engine's `stores` factory for an s3:// durable_root."""
    try:
        from syncengine.durable.s3.store import S3Store  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"durable_root {_location(config).url()}: {exc}") from exc
    return functools.partial(_store, config)


def migration(
    config: Config, durable: Callable[[Path], DurableStore]
) -> tuple[
    Callable[[Path], DurableStore],
    Callable[[Path, str, str], None],
    Callable[[Path, str, str], bool],
]:
    """What `syncengine migrate` works with on an s3:// durable_root: the store of a path
    (`durable` for one in the bucket, a local directory otherwise: a legacy ``home`` on
    this machine), the rename of an old-layout directory or cache file (copy and delete
    per object in the bucket, a rename on disk), and whether a new name holds a rename
    a killed run left half done (never on disk: a rename there is atomic)."""
    where = _location(config)

    def store(path: Path) -> DurableStore:
        return durable(path) if location.in_bucket(where, path) else PosixStore(path)

    def rename(path: Path, rel: str, new_rel: str) -> None:
        if location.in_bucket(where, path):
            _s3(config, path).rename_new(rel, new_rel)
        else:
            PosixStore(path).rename_new(rel, new_rel)

    def unfinished(path: Path, rel: str, new_rel: str) -> bool:
        return location.in_bucket(where, path) and _s3(config, path).unfinished_rename(rel, new_rel)

    return store, rename, unfinished


def _s3(config: Config, path: Path) -> S3Store:
    from syncengine.durable.s3.store import S3Store

    store = _store(config, path)
    assert isinstance(store, S3Store)
    return store


def check_bucket(config: Config) -> None:
    """Reach the bucket (one LIST of the prefix): a missing bucket, refused credentials or
    no network raise a one-line `DurableError` naming the bucket and the fix."""
    from syncengine.durable.s3.store import S3Store

    S3Store(_location(config)).exists()
