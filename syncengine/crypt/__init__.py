"""Client-side encryption of an adapter's secret files (docs/SECRETS.md).

`keys` (the key text, fingerprints, a keyring: the first key writes, all
read), `sealed` (the sealed object format: AES-256-GCM from `cryptography`,
imported only when a key is used) and `secrets` (which paths of an adapter
are secret, and the rules the stages share: seal, open, never pack).  Nothing
here reads the environment or a config file: `syncengine.config` hands the
key text in.
"""
