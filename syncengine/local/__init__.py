"""The local side: the change index, the directory table, the state lock and the
status files under ``state_dir``, and the start-up check of the index against the
durable manifest."""
