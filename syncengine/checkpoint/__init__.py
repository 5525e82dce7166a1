"""Doing a checkpoint: the executor (`checkpointer`), the upload of a live file
(`copier`), SQLite snapshots and append-only segments."""
