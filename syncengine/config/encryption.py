"""The encryption settings: where the key comes from, and each adapter's added secrets.

Owns reading the key (docs/SECRETS.md): the file named by ``key_file`` (flag,
config, or ``$SYNCENGINE_KEY_FILE``), else the key text in
``$SYNCENGINE_KEY`` (for platforms that inject secrets as variables); never
the config file's own text.  The key is parsed into a `Keyring` here, so a bad
or unreadable key is a `ConfigError` before anything runs, and the message
names the file and the line, never a key.  Also owns the ``[secrets]`` table
(adapter name = patterns added to the adapter's own).  Read by
`syncengine.config.config_from_dict` only.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from syncengine.config.adapterspec import AdapterSpec, plain_text
from syncengine.config.layers import Layers
from syncengine.crypt import sealed
from syncengine.crypt.keys import Keyring, KeyTextError, parse
from syncengine.errors import ConfigError

KEY_ENV = "SYNCENGINE_KEY"


def keyring(layers: Layers) -> tuple[Keyring | None, Path | None]:
    """The configured keys and the key file they came from (None, None: no key)."""
    key_file = (
        layers.path("key_file", env_key="SYNCENGINE_KEY_FILE")
        if layers.has("key_file", "SYNCENGINE_KEY_FILE")
        else None
    )
    if key_file is not None:
        where = f"{layers.sources['key_file']}: key file {key_file}"
        try:
            text = key_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ConfigError(
                f"{where}: cannot read ({why}): make one with `syncengine keygen > FILE`"
            ) from None
    elif layers.env.get(KEY_ENV):
        where, text = f"env ${KEY_ENV}", layers.env[KEY_ENV]
        layers.sources["key"] = where
    else:
        return None, None
    try:
        keys = parse(text)
        sealed.require()
    except (KeyTextError, ImportError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return keys, key_file


def add_secrets(layers: Layers, specs: tuple[AdapterSpec, ...]) -> tuple[AdapterSpec, ...]:
    """`specs` with the ``[secrets]`` table's patterns added to each named adapter's."""
    table = layers.table("secrets")
    names = {s.name for s in specs}
    for name, patterns in table.items():
        if name not in names:
            raise ConfigError(
                f"{layers.origin}: [secrets] no enabled adapter {name!r}: enabled adapters "
                f"are {', '.join(sorted(names))}"
            )
        if not isinstance(patterns, list) or not all(plain_text(p) for p in patterns):
            raise ConfigError(
                f"{layers.origin}: [secrets] {name} must be a list of non-empty patterns"
            )
    return tuple(attrs.evolve(s, secrets=s.secrets + tuple(table.get(s.name, ()))) for s in specs)
