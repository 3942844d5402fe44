"""Commands: what an entry point asks the service layer to do (imperative, frozen)."""

from __future__ import annotations

from dataclasses import dataclass

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
