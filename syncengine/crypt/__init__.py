"""Client-side encryption of an adapter's secret files (docs/SECRETS.md).

`keys` (the key text, fingerprints, a keyring: the first key writes, all
read), `sealed` (the whole-object sealed format, version 1: AES-256-GCM from
`cryptography`, imported only when a key is used), `chunked` (the streaming
format, version 2, which every new object is written in, and the reader of
both) and `secrets` (which paths of an adapter are sealed, its ``secrets`` or
every path with ``encrypt = "all"``, and the rules the stages share: seal,
open, never pack).  Nothing
here reads the environment or a config file: `syncengine.config` hands the
key text in.
"""
