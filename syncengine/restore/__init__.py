"""Doing a restore: the executor (`restorer`), placing entries, SQLite databases and
open files."""
