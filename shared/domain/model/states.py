"""Record states: a job's (how Vertex states map onto them, and their order) and a
deployment's.

A record's state only moves forward within an attempt (ACCEPTED → QUEUED → RUNNING → a
terminal state), so a stale or replayed observation can never move it back. A new attempt
starts again from QUEUED; an observation of an older attempt is ignored.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


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


class DeploymentState(StrEnum):
    """The record states of ``deployments/{id}``."""

    ACCEPTED = "ACCEPTED"  # claimed; DeployModel not yet called (or its operation not recorded)
    DEPLOYING = "DEPLOYING"  # the DeployModel operation is running
    DEPLOYED = "DEPLOYED"
    FAILED = "FAILED"
    UNDEPLOYED = "UNDEPLOYED"  # taken down on request (a cancel): nothing of it is deployed

    @property
    def terminal(self) -> bool:
        """The deployment is settled: no DeployModel of it will move it again (a DEPLOYED
        one is still followed, and may still be undeployed)."""
        return self in (
            DeploymentState.DEPLOYED,
            DeploymentState.FAILED,
            DeploymentState.UNDEPLOYED,
        )
