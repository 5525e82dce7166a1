"""The encryption settings: where the key comes from, and each adapter's added secrets.

Owns reading the key (docs/SECRETS.md): the file named by ``key_file`` (flag,
config, or ``$SYNCENGINE_KEY_FILE``), else the key text in
``$SYNCENGINE_KEY`` (for platforms that inject secrets as variables); never
the config file's own text.  The key is parsed into a `Keyring` here, so a bad
or unreadable key is a `ConfigError` before anything runs, and the message
names the file and the line, never a key (the ``[secrets]`` table, patterns added
to an adapter's own, is `layers.add_secrets`'s).  Read by
`syncengine.config.config_from_dict` only.  `modes` resolves each adapter's
``encrypt`` ("secrets", the default, or "all": every file sealed);
`require_key` refuses to publish such an adapter without a key (a checkpoint
and `run` ask, through `Config.select`; restore, status, verify, export don't).
"""

from __future__ import annotations

from typing import Any

import attrs

from syncengine.config.adapterspec import AdapterSpec
from syncengine.config.layers import Layers
from syncengine.crypt import sealed
from syncengine.crypt.keys import KeyTextError, parse
from syncengine.errors import ConfigError

KEY_ENV = "SYNCENGINE_KEY"
ENCRYPT_MODES = ("secrets", "all")


def modes(layers: Layers, specs: tuple[AdapterSpec, ...]) -> tuple[AdapterSpec, ...]:
    """`specs` with ``encrypt`` resolved: an adapter's own, else the top-level key's,
    else "secrets" (only the secret files are sealed); "all" seals every file."""
    default = layers.get("encrypt", None, "secrets")
    out = []
    for spec in specs:
        mode = spec.encrypt or default
        if mode not in ENCRYPT_MODES:
            where = f"adapter {spec.name!r}" if spec.encrypt else layers.sources["encrypt"]
            raise ConfigError(f'{where}: encrypt must be "secrets" or "all", not {mode!r}')
        out.append(attrs.evolve(spec, encrypt=mode))
    return tuple(out)


def require_key(specs: tuple[AdapterSpec, ...], keys: object, source: str) -> None:
    """Raise `ConfigError` when an adapter of `specs` asks for ``encrypt = "all"`` and
    no key is configured (`keys` None): its whole tree would be published plain.
    `source`: the top-level ``encrypt``'s layer ("default": an adapter's own)."""
    unsealed = [s.name for s in specs if s.encrypt == "all"]
    if keys is None and unsealed:
        where = "[[adapter]] " if source == "default" else f"{source}: "
        raise ConfigError(
            f'{where}encrypt = "all" ({", ".join(unsealed)}) and no key is configured: nothing '
            "published; set SYNCENGINE_KEY_FILE (or key_file) to a key file "
            "(`syncengine keygen > FILE`), or SYNCENGINE_KEY to the key"
        )


def keyring(layers: Layers) -> dict[str, Any]:
    """`Config`'s ``keys`` and the ``key_file`` they came from (both None: no key)."""
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
        return {"keys": None, "key_file": None}
    try:
        keys = parse(text)
        sealed.require()
    except (KeyTextError, ImportError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return {"keys": keys, "key_file": key_file}
