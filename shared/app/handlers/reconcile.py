"""The scheduler tick: every active record reconciled against Vertex, each item isolated."""

from __future__ import annotations

from shared.app.commands import Reconcile
from shared.app.context import Tracker
from shared.app.services import tick


def reconcile(cmd: Reconcile, context: Tracker) -> int:
    """Handle :class:`~shared.app.commands.Reconcile` (see the module docstring)."""
    return tick.reconcile(context)
