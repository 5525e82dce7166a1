"""Doing a checkpoint: the executor, SQLite snapshots and append-only segments."""
