#!/usr/bin/env bash
# CI step (called by .ci/run after the default test run): the harness suite of
# docs/HARNESSES.md. Installs the six harness CLIs pinned in
# tests/harness/versions.toml into .harness/ (git-ignored; reused by a second run)
# and runs them against the suite's fake model server on 127.0.0.1. Needs npm, git
# and the npm and PyPI registries. Budget: ~15 minutes on 2 cores, installs included.
# SYNCENGINE_HARNESS_LATEST=1 runs it against the newest release of each harness.
set -euo pipefail
cd "$(dirname "$0")/../.."
for tool in npm git; do
  command -v "$tool" >/dev/null || { echo "harness suite: $tool is required" >&2; exit 1; }
done
start=$SECONDS
.venv/bin/python -m tests.harness.install
echo "harness suite: installs took $((SECONDS - start)) s"
# CI is set: a CLI that cannot be installed fails its tests instead of skipping them.
CI=${CI:-true} .venv/bin/python -m pytest -m harness tests/harness --durations=10
echo "harness suite: $((SECONDS - start)) s in all"
