"""The job state machine: record states, how Vertex states map onto them, and ordering.

A record's state only moves forward within an attempt (ACCEPTED → QUEUED → RUNNING → a
terminal state), so a stale or replayed observation can never move it back. A new attempt
starts again from QUEUED; an observation of an older attempt is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from shared.domain.values import clip

if TYPE_CHECKING:
    from shared.domain.record import JobRecord


class JobState(StrEnum):
    """The record states of the contract."""

    ACCEPTED = "ACCEPTED"
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    RETRYING = "RETRYING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    # A scheduled slot that did not run: its series' earlier request was still active
    # (concurrency "forbid"), or a later slot already held the series.
    SKIPPED = "SKIPPED"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def rank(self) -> int:
        """Order within one attempt; a transition must strictly increase it."""
        return _RANK[self]


_TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.SKIPPED})
_RANK = {
    JobState.ACCEPTED: 0,
    JobState.QUEUED: 1,
    JobState.RETRYING: 1,
    JobState.RUNNING: 2,
    JobState.SUCCEEDED: 3,
    JobState.FAILED: 3,
    JobState.CANCELLED: 3,
    JobState.SKIPPED: 3,
}

# Vertex JobState (and PipelineState) names → record state of the attempt.
_FROM_VERTEX = {
    "JOB_STATE_QUEUED": JobState.QUEUED,
    "JOB_STATE_PENDING": JobState.QUEUED,
    "JOB_STATE_RUNNING": JobState.RUNNING,
    "JOB_STATE_UPDATING": JobState.RUNNING,
    "JOB_STATE_PAUSED": JobState.RUNNING,
    "JOB_STATE_SUCCEEDED": JobState.SUCCEEDED,
    "JOB_STATE_PARTIALLY_SUCCEEDED": JobState.SUCCEEDED,
    "JOB_STATE_FAILED": JobState.FAILED,
    "JOB_STATE_EXPIRED": JobState.FAILED,
    "JOB_STATE_CANCELLING": JobState.RUNNING,
    "JOB_STATE_CANCELLED": JobState.CANCELLED,
    "PIPELINE_STATE_QUEUED": JobState.QUEUED,
    "PIPELINE_STATE_PENDING": JobState.QUEUED,
    "PIPELINE_STATE_RUNNING": JobState.RUNNING,
    "PIPELINE_STATE_PAUSED": JobState.RUNNING,
    "PIPELINE_STATE_CANCELLING": JobState.RUNNING,
    "PIPELINE_STATE_SUCCEEDED": JobState.SUCCEEDED,
    "PIPELINE_STATE_FAILED": JobState.FAILED,
    "PIPELINE_STATE_CANCELLED": JobState.CANCELLED,
}


def from_vertex(vertex_state: str) -> JobState | None:
    """Map a Vertex state name onto a record state; None for UNSPECIFIED or unknown names.

    Examples:
        >>> from_vertex("JOB_STATE_PENDING")
        <JobState.QUEUED: 'QUEUED'>
    """
    return _FROM_VERTEX.get(vertex_state)


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


@dataclass(frozen=True)
class Change:
    """One write to a job record: fields to set on it, fields to delete from it, and fields
    merged into one of its attempt documents (``attempt_no``; the record's current attempt
    when None). ``state`` is the record's state after the write."""

    state: JobState
    record: dict[str, Any]
    attempt: dict[str, Any] = field(default_factory=dict)
    deletes: tuple[str, ...] = ()
    attempt_no: int | None = None

    def applied_to(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """The record document as this change leaves it (its top-level fields set or
        deleted, as Firestore's update does), for the next write to decide on without a
        read."""
        after = dict(document)
        after.update(self.record)
        for name in self.deletes:
            after.pop(name, None)
        return after


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
