"""The local side: the change index, one adapter as a run sees it (`adapter`), the
directory table, the state lock and the status files under ``state_dir``, the lease as
this state dir holds it, and the start-up check of the index against the durable
manifest."""
