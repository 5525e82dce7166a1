"""Filesystem primitives shared by every side that writes files: the durability
primitives (`savefile`: temp, write, close, rename, fsync of a directory), path
safety (`safepath`: relative names opened without following links) and moving bytes
(`stream`: a live file read safely, streamed with its hash).  The live tree, the local
state directory and the POSIX store all write through here."""
