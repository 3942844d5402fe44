"""Cancelling a record's Vertex jobs until Vertex confirms each one.

A cancel is marked on the record first (``pendingCancels``), then asked of Vertex, then
cleared once the job is seen ended, so a crash between any two steps leaves a mark that the
next delivery or the tick finishes."""

from __future__ import annotations

from shared.app.context import AttemptPorts
from shared.domain.decisions.recovery import (
    cancels_confirmed,
    cancels_pending,
)
from shared.kernel.errors import FlexjobsError
from shared.kernel.logs import get_logger

log = get_logger("cancels")


def cancel_until_confirmed(ports: AttemptPorts, request_id: str, names: list[str]) -> list[str]:
    """Keep ``names`` on the record as pending cancels, then cancel them; returns those left."""
    if not names:
        return []
    ports.jobs.apply(request_id, lambda rec: cancels_pending(rec, names, ports.clock()))
    return drive_cancels(ports, request_id, names)


def drive_cancels(ports: AttemptPorts, request_id: str, names: list[str]) -> list[str]:
    """Ask Vertex to cancel each job; forget those it confirmed. Returns the ones left.

    A job that already ended counts as confirmed (the backend's cancel is idempotent); any
    other fault leaves the name pending, for the redelivery or the next tick.
    """
    confirmed: list[str] = []
    for name in names:
        try:
            ports.backend.cancel(name)
        except FlexjobsError as exc:
            log.warning(
                f"cancel not confirmed, kept pending: {exc}", extra={"fields": {"vertexJob": name}}
            )
            continue
        confirmed.append(name)
    if confirmed:
        ports.jobs.apply(request_id, lambda rec: cancels_confirmed(rec, confirmed, ports.clock()))
    return [n for n in names if n not in confirmed]
