"""The command line: `main` is the ``syncengine`` console script.

`commands` runs a command and maps its outcome to an exit code, `args` is the
grammar, `printing` what is printed, `lease` the ``lease`` command and the
lease lines of ``status``.
"""

from syncengine.cli.commands import main

__all__ = ["main"]
