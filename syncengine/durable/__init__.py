"""The durable side: the manifest and segment-chain formats, the rule that judges a
durable copy, and (``posix/``) the store on a directory or FUSE mount."""
