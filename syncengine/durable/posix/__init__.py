"""The store on a POSIX directory or FUSE mount: staged writes, the durability
primitives, safe path resolution, the mount probe and write-back detection."""
