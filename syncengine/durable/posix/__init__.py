"""The store on a POSIX directory or FUSE mount (`PosixStore`): staged writes, reads
through safe path resolution, the durability primitives, the mount probe and write-back
detection."""
