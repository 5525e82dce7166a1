"""Long-running parts: the embedded runner, the ``run`` supervisor and the watcher."""
