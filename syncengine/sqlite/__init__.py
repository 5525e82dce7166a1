"""SQLite, below every stage: the facts about a database's files (`files`) and the one
check of a database (`check`), which checkpoint, restore, verify and explain share."""
