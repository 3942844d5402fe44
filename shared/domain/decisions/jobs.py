"""Observing a Vertex job: the change it makes to the record, and which listed job to adopt."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared.domain.model.values import clip

if TYPE_CHECKING:
    from shared.domain.model.records import JobRecord
from shared.domain.model.changes import Change
from shared.domain.model.states import JobState, from_vertex
from shared.domain.model.vertex_jobs import VertexJob


def adoptable(jobs: list[VertexJob]) -> VertexJob | None:
    """The job to adopt among those found under an attempt's labels: a live one first.

    Usually there is none or one. After a create raced there may be more; the others are
    strays the tick cancels, and adopting one that already ended would settle the attempt on
    the wrong job.

    Examples:
        >>> ended = VertexJob("p/customJobs/1", "JOB_STATE_CANCELLED", {})
        >>> live = VertexJob("p/customJobs/2", "JOB_STATE_RUNNING", {})
        >>> adoptable([ended, live]).name
        'p/customJobs/2'
    """
    for job in jobs:
        state = from_vertex(job.state)
        if state is None or not state.terminal:
            return job
    return jobs[0] if jobs else None


def observe(record: JobRecord, job: VertexJob, now: datetime) -> Change | None:
    """Reconcile a record to the authoritative state of its current attempt's job.

    Returns None when nothing changes: the job is not the record's current attempt (a stale
    hint of an older attempt), the state is unknown, or the observation does not move the
    record strictly forward (a replay, or a stale RUNNING after SUCCEEDED).
    """
    if record.vertex_job != job.name:
        return None
    new = from_vertex(job.state)
    current = record.state
    # RETRYING: this job's attempt is over and settled; only attempt n+1's job matters now.
    if new is None or current.terminal or current is JobState.RETRYING:
        return None
    if new.rank <= current.rank:
        return None
    times = {"startedAt": job.start_time, "endedAt": job.end_time}
    attempt: dict[str, Any] = {"state": new.value, "vertexState": job.state}
    attempt.update({k: v for k, v in times.items() if v is not None})
    change: dict[str, Any] = {"state": new.value, "updatedAt": now, "vertexState": job.state}
    if job.start_time is not None:
        # On the record too, so a list of records shows a running attempt's time so far
        # without reading its attempt document.
        change["attemptStartedAt"] = job.start_time
    if new.terminal:
        change["endedAt"] = job.end_time or now
    if job.error_code:
        attempt["errorCode"] = job.error_code
        # Vertex's text is stored (and notified) bounded, whatever its length.
        attempt["errorMessage"] = clip(job.error_message)
        change["reason"] = clip(job.error_message)
    return Change(state=new, record=change, attempt=attempt)
