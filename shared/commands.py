"""Commands: what an entry point asks the service layer to do (imperative, frozen)."""

from __future__ import annotations

from dataclasses import dataclass

from shared.domain.request import JobRequest
from shared.envelopes import PubsubMessage


@dataclass(frozen=True)
class SubmitJob:
    """Turn one delivered request message into exactly one Vertex job and record."""

    message: PubsubMessage
    source: str = "pubsub"


@dataclass(frozen=True)
class TrackJob:
    """Re-read the job a state hint names and reconcile its record."""

    message: PubsubMessage


@dataclass(frozen=True)
class Reconcile:
    """The scheduler tick: reconcile every active record against Vertex."""


@dataclass(frozen=True)
class CancelJob:
    """Cancel a request's current Vertex job and every retry that would follow."""

    request_id: str


@dataclass(frozen=True)
class CreateJob:
    """Create attempt 1 of a validated training request (a custom job, tuning job or
    pipeline) exactly once."""

    request: JobRequest


@dataclass(frozen=True)
class DeployModel:
    """Deploy a validated ``deployModel`` request on Spot VMs exactly once."""

    request: JobRequest
