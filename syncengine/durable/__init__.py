"""The durable side: the `Store` interface (store.py) every other package reads and
writes through, the manifest and entry formats, segment chains, the rule that judges a
durable copy, and (``posix/``) the store on a directory or FUSE mount."""
