"""A request message from the requests topic, or one request of an uploaded file: decoded,
validated, then carried out once; a bad one recorded as a rejection."""

from __future__ import annotations

from shared.app.commands import Outcome, SubmitJob
from shared.app.context import Intake
from shared.app.services.intake import submit


def submit_job(cmd: SubmitJob, context: Intake) -> Outcome:
    """Handle :class:`~shared.app.commands.SubmitJob` (see the module docstring)."""
    return submit(cmd, context)
