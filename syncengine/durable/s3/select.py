"""The engine's side of ``durable_root = "s3://BUCKET/PREFIX"``: a store per durable path,
and the health check that replaces the mount probe.

The Config holds the bucket (`S3Location`) and a virtual root path standing for its
prefix (``/s3:/BUCKET/PREFIX``); an adapter's durable directory, a path under that
root, becomes the store of the same relative prefix in the bucket, so the layout of
objects is the one a mount of the bucket would show.  The client library is
imported here, lazily: without the ``s3`` extra the engine stops with a one-line
error naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from syncengine.config import Config
from syncengine.durable.s3.location import S3Location
from syncengine.durable.store import Store
from syncengine.errors import ConfigError


def _location(config: Config) -> S3Location:
    assert config.s3 is not None, "not an s3:// durable_root"
    return config.s3


def stores(config: Config) -> Callable[[Path], Store]:
    """The engine's `stores` factory for an s3:// durable_root."""
    base, root = _location(config), config.durable_root
    try:
        from syncengine.durable.s3.store import S3Store
    except ImportError as exc:
        raise ConfigError(f"durable_root {base.url()}: {exc}") from exc

    def make(path: Path) -> Store:
        if path != root and root not in path.parents:
            raise ConfigError(
                f"durable path {path} is not in the bucket of durable_root {base.url()}: with "
                "an s3:// durable_root, give adapters' durable directories as relative names"
            )
        return S3Store(base.child(path.relative_to(root).as_posix() if path != root else ""))

    return make


def check_bucket(config: Config) -> None:
    """Reach the bucket (one LIST of the prefix): a missing bucket, refused credentials or
    no network raise a one-line `DurableError` naming the bucket and the fix."""
    from syncengine.durable.s3.store import S3Store

    S3Store(_location(config)).exists()
