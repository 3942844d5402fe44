"""Attempt 1 of a validated training request, created exactly once (or queued, when admission
is on)."""

from __future__ import annotations

from shared.app.commands import CreateJob, Outcome
from shared.app.context import Intake
from shared.app.services.intake import create


def create_job(cmd: CreateJob, context: Intake) -> Outcome:
    """Handle :class:`~shared.app.commands.CreateJob` (see the module docstring)."""
    return create(cmd.request, context)
