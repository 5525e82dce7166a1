"""The durable side: the `Store` interface (store.py) every other package reads and
writes through, a durable root's lifecycle around it (lifecycle.py), the manifest and
entry formats, segment chains, the rule that judges a durable copy, the lease, and the
stores on a directory or FUSE mount (``posix/``) and on S3 (``s3/``)."""
