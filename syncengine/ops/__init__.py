"""Maintenance commands: verify, gc, migrate, the input journal, export and explain."""
