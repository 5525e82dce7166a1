#!/bin/sh
# Container entrypoint for a deployment of the design's agent-state.sh
# (docs/MIGRATING.md "Switching from agent-state.sh"): move the old layout over
# (a no-op once done), then restore, run the server, checkpoint every
# $AGENT_STATE_CHECKPOINT_SECONDS, and on
# SIGTERM/SIGINT/SIGHUP forward the signal and take the final checkpoint.
# Usage: entrypoint.sh SERVER-COMMAND [ARGS...]; in a Dockerfile, the same line:
#   ENTRYPOINT ["/bin/sh", "-c", "syncengine migrate && exec syncengine run -- \"$@\"", "entrypoint"]
syncengine migrate && exec syncengine run -- "$@"
