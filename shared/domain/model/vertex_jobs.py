"""A Vertex job as flexjobs reads it: name, state, times and labels, whatever its kind."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class VertexJob:
    """What flexjobs reads back from Vertex about one job (one attempt)."""

    name: str
    state: str
    labels: dict[str, str]
    create_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    error_code: int | None = None
    error_message: str | None = None
    # What the job runs on, as Vertex holds it (its scheduling): an adopted job is recorded
    # with these, not with what the delivery adopting it would have chosen. None: not known.
    strategy: str | None = None
    # FLEX_START's maxWaitDuration in seconds (0: indefinitely); None when the job has none.
    max_wait_seconds: float | None = None

    @property
    def job_id(self) -> str:
        return self.name.rsplit("/", 1)[-1]


def location_of(name: str) -> str | None:
    """The location a Vertex resource name says (``projects/P/locations/L/...``), or None.

    Examples:
        >>> location_of("projects/p/locations/us-east1/customJobs/7")
        'us-east1'
        >>> location_of("customJobs/7") is None
        True
    """
    parts = name.split("/")
    return parts[3] if len(parts) > 3 and parts[2] == "locations" and parts[3] else None
