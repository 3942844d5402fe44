"""Commands: what an entry point asks the application to do (imperative, frozen), and the
:class:`Outcome` of the ones that create something.

A command carries plain domain values (:mod:`shared.domain.model.delivery`), never a
transport's envelope: the entry point unwraps the envelope, the handler never sees it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from shared.domain.model.delivery import Delivery, ObjectEvent
from shared.domain.request.message import JobRequest


class Outcome(StrEnum):
    """What became of one delivery that wanted to create something."""

    SUBMITTED = "submitted"
    ADOPTED = "adopted"  # it existed already (created before a crash), now recorded
    DUPLICATE = "duplicate"
    REJECTED = "rejected"
    FAILED = "failed"
    PARKED = "parked"  # Vertex refused it for quota; the tick submits it again
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # a scheduled slot that did not run (concurrency forbid, or stale)
    WAITING = "waiting"  # waits in its admission queue; an admission creates it later


@dataclass(frozen=True)
class SubmitJob:
    """Turn one delivered request message into exactly one Vertex job and record."""

    message: Delivery
    source: str = "pubsub"
    # More about where it came from, written on the record and the rejection as is: an
    # upload's ``object`` (``gs://bucket/name#generation``) and ``.jsonl`` ``line``.
    origin: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReceiveUpload:
    """A Cloud Storage object event: a request file to submit, a checkpoint to record, or
    nothing for flexjobs."""

    event: ObjectEvent


@dataclass(frozen=True)
class TrackJob:
    """Re-read the job a state hint names and reconcile its record."""

    message: Delivery


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


#: What a delivered request message asks for, once read.
Asked = CancelJob | CreateJob | DeployModel | ResumeServing
