"""A state hint from the job-events topic: the job it names read, and its record settled."""

from __future__ import annotations

from shared.app.commands import TrackJob
from shared.app.context import Tracker
from shared.app.services.track import follow_hint


def track_job(cmd: TrackJob, context: Tracker) -> str | None:
    """Handle :class:`~shared.app.commands.TrackJob` (see the module docstring)."""
    return follow_hint(cmd.message, context)
