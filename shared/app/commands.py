"""Commands: what an entry point asks the service layer to do (imperative, frozen)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.domain.request.message import JobRequest
from shared.ingress.envelopes import PubsubMessage, StorageObjectEvent


@dataclass(frozen=True)
class SubmitJob:
    """Turn one delivered request message into exactly one Vertex job and record."""

    message: PubsubMessage
    source: str = "pubsub"
    # More about where it came from, written on the record and the rejection as is: an
    # upload's ``object`` (``gs://bucket/name#generation``) and ``.jsonl`` ``line``.
    origin: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReceiveUpload:
    """A Cloud Storage object event: a request file to submit, a checkpoint to record, or
    nothing for flexjobs."""

    event: StorageObjectEvent


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
class ResumeServing:
    """Follow a deployment paused by a hand edit again, from its endpoint as it is now."""

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
