"""The command line: `main` is the ``syncengine`` console script.

`commands` runs a command and maps its outcome to an exit code, `args` is the
grammar, `printing` what a checkpoint or restore prints, `statusview` what
``status`` prints, `lease` the ``lease`` command.
"""

from syncengine.cli.commands import main

__all__ = ["main"]
