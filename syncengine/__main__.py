"""``python -m syncengine`` runs the CLI."""

import sys

from syncengine.cli import main

sys.exit(main())
