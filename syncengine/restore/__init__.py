"""Doing a restore: the executor, placing entries, SQLite databases and open files."""
