"""A deployment paused by a hand edit, followed again from its endpoint as it is now."""

from __future__ import annotations

from shared.app.commands import Outcome, ResumeServing
from shared.app.context import Intake
from shared.app.services.intake import resume


def resume_serving(cmd: ResumeServing, context: Intake) -> Outcome:
    """Handle :class:`~shared.app.commands.ResumeServing` (see the module docstring)."""
    return resume(cmd.request_id, context)
