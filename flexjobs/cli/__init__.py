"""The ``flexjobs`` command: the console script's entry point.

The command is built on Typer and Rich, which come with the ``cli`` extra
(``pip install "flexjobs[cli]"``); the client library itself needs neither. So this module
imports nothing of the command until :func:`main` has found them: a ``pip install flexjobs``
without the extra gets one line naming the extra to install, never a traceback. The commands
themselves are :mod:`flexjobs.cli.app`.
"""

from __future__ import annotations

import sys
from importlib.util import find_spec
from typing import Final

#: What the command imports beyond the client library: the ``cli`` extra of pyproject.toml.
EXTRA_PACKAGES: Final = ("typer", "rich", "requests")
#: Exit code when the extra is missing: the installation is what needs fixing (as for a
#: configuration problem, see docs/cli.md).
MISSING_EXTRA: Final = 3


def missing_packages() -> list[str]:
    """The packages of the ``cli`` extra that cannot be imported here (found, not imported)."""
    return [name for name in EXTRA_PACKAGES if find_spec(name) is None]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``flexjobs`` console script; returns the exit code."""
    missing = missing_packages()
    if missing:
        sys.stderr.write(
            f"flexjobs: the command line needs its extra ({', '.join(missing)} missing):"
            ' pip install "flexjobs[cli]"\n'
        )
        return MISSING_EXTRA
    from flexjobs.cli.app import main as run

    return run(argv)


__all__ = ["EXTRA_PACKAGES", "MISSING_EXTRA", "main", "missing_packages"]
