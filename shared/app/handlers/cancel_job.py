"""A request's cancel: every Vertex job of it and every attempt that would follow, or its
deployment."""

from __future__ import annotations

from shared.app.commands import CancelJob, Outcome
from shared.app.context import Intake
from shared.app.services.cancel import cancel_request


def cancel_job(cmd: CancelJob, context: Intake) -> Outcome:
    """Handle :class:`~shared.app.commands.CancelJob` (see the module docstring)."""
    return cancel_request(cmd.request_id, context)
