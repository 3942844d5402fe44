"""Scheduled requests: one job per schedule slot, and what a slot does while another runs.

Cloud Scheduler publishes the same body on every run, and publishes it again when a delivery
fails. A request that carries ``"schedule": {"slotSeconds": N, "concurrency": ...}`` and a
requestId template with ``{slot}`` gets one requestId per slot: ``{slot}`` becomes the start
of the slot the message's schedule time falls in (UTC, ``%Y%m%dT%H%M%SZ``). Every publish
inside one slot is then one request, and the template itself names the *series*.

``concurrency`` follows Kubernetes CronJob: ``allow`` runs every slot; ``forbid`` skips a
slot while the series' current request is active; ``replace`` cancels it and runs the new
slot. :func:`turn` decides, from the series document and the record of its current request.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from shared.domain.model.states import JobState
from shared.domain.model.values import parse_rfc3339
from shared.kernel.errors import FieldError

SLOT = "{slot}"
SLOT_FORMAT = "%Y%m%dT%H%M%SZ"
DEFAULT_SLOT_SECONDS = 60
#: A slot longer than a year is no schedule anyone runs; the bound keeps the arithmetic sane.
MAX_SLOT_SECONDS = 366 * 86400
#: The Pub/Sub attribute that overrides the publish time (backfills, tests).
SCHEDULE_TIME_ATTRIBUTE = "scheduleTime"


class Concurrency(StrEnum):
    """What a new slot does while an earlier slot of its series is still active."""

    ALLOW = "allow"
    FORBID = "forbid"
    REPLACE = "replace"


@dataclass(frozen=True)
class Slot:
    """The slot a scheduled request runs in: its series (the unexpanded requestId), the slot
    start, and the series' concurrency rule."""

    series: str
    start: datetime
    concurrency: Concurrency


def check_schedule(raw: object) -> list[FieldError]:
    """The problems with a request's ``schedule`` object ([] when valid or absent).

    Examples:
        >>> [e.path for e in check_schedule({"slotSeconds": 0, "concurrency": "never"})]
        ['schedule.slotSeconds', 'schedule.concurrency']
    """
    if raw is None:
        return []
    if not isinstance(raw, dict):
        return [FieldError("schedule", 'must be an object such as {"slotSeconds": 86400}')]
    errors = [
        FieldError(f"schedule.{key}", "unknown field; the fields are slotSeconds, concurrency")
        for key in sorted(set(raw) - {"slotSeconds", "concurrency"}, key=str)
    ]
    seconds = raw.get("slotSeconds", DEFAULT_SLOT_SECONDS)
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        errors.append(FieldError("schedule.slotSeconds", "must be an integer number of seconds"))
    elif not 1 <= seconds <= MAX_SLOT_SECONDS:
        errors.append(
            FieldError("schedule.slotSeconds", f"must be between 1 and {MAX_SLOT_SECONDS}")
        )
    concurrency = raw.get("concurrency", Concurrency.ALLOW.value)
    if concurrency not in {c.value for c in Concurrency}:
        allowed = ", ".join(c.value for c in Concurrency)
        errors.append(FieldError("schedule.concurrency", f"must be one of {allowed}"))
    return errors


def schedule_time(attributes: dict[str, str], publish_time: str | None) -> datetime:
    """When the message was scheduled: the ``scheduleTime`` attribute (RFC 3339) when present,
    else the Pub/Sub publish time.

    Raises:
        ValueError: neither is a readable RFC 3339 time.

    Examples:
        >>> schedule_time({"scheduleTime": "2026-11-30T02:00:07Z"}, None).isoformat()
        '2026-11-30T02:00:07+00:00'
    """
    raw = attributes.get(SCHEDULE_TIME_ATTRIBUTE) or publish_time
    if not raw:
        raise ValueError("the message has neither a scheduleTime attribute nor a publish time")
    when = parse_rfc3339(raw)
    if when is None:
        raise ValueError(f"{raw!r} is not an RFC 3339 time such as '2026-11-30T02:00:00Z'")
    return when


def slot_start(when: datetime, slot_seconds: int) -> datetime:
    """``when`` floored to a multiple of ``slot_seconds`` since the Unix epoch (UTC).

    Examples:
        >>> slot_start(datetime(2026, 11, 30, 2, 0, 59, tzinfo=UTC), 60).isoformat()
        '2026-11-30T02:00:00+00:00'
    """
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    seconds = int((when - epoch).total_seconds()) // slot_seconds * slot_seconds
    return epoch + timedelta(seconds=seconds)


def expand(template: str, start: datetime) -> str:
    """The requestId of one slot: every ``{slot}`` replaced by the slot start.

    Examples:
        >>> expand("nightly-{slot}", datetime(2026, 11, 30, tzinfo=UTC))
        'nightly-20261130T000000Z'
    """
    return template.replace(SLOT, start.astimezone(UTC).strftime(SLOT_FORMAT))


def read_slot(
    template: str | None,
    raw: object,
    attributes: dict[str, str],
    publish_time: str | None,
) -> tuple[Slot | None, list[FieldError]]:
    """The slot of a request whose requestId is ``template`` and ``schedule`` is ``raw``.

    Both or neither: a ``{slot}`` without a schedule, or a schedule without a ``{slot}``, is
    refused. ``(None, [])`` for an unscheduled request.
    """
    has_slot = template is not None and SLOT in template
    if raw is None and not has_slot:
        return None, []
    if raw is None:
        return None, [FieldError("requestId", f"has {SLOT} but the request has no schedule")]
    errors = check_schedule(raw)
    if not has_slot:
        errors.append(
            FieldError("schedule", f"needs a requestId template with {SLOT}, such as 'x-{SLOT}'")
        )
    try:
        when = schedule_time(attributes, publish_time)
    except ValueError as exc:
        errors.append(FieldError(SCHEDULE_TIME_ATTRIBUTE, str(exc)))
    if errors:
        return None, errors
    assert isinstance(raw, dict) and template is not None
    seconds = int(raw.get("slotSeconds", DEFAULT_SLOT_SECONDS))
    concurrency = Concurrency(raw.get("concurrency", Concurrency.ALLOW.value))
    return Slot(template, slot_start(when, seconds), concurrency), []


class Move(StrEnum):
    """What a slot does about its series (see :func:`turn`)."""

    RUN = "run"  # the series is this slot's now (or already was): submit it
    SKIP = "skip"  # recorded SKIPPED, nothing created
    REPLACE = "replace"  # cancel the series' current request, then decide again
    WAIT = "wait"  # the current request is being submitted: redeliver later


@dataclass(frozen=True)
class Turn:
    """A decision about a series: the move, the other request it concerns, and the series
    document to write (None: write nothing)."""

    move: Move
    other: str | None = None
    write: dict[str, Any] | None = None


def series_document(slot: Slot, request_id: str, now: datetime) -> dict[str, Any]:
    """The series document naming ``request_id`` as its current request."""
    return {"series": slot.series, "current": request_id, "slot": slot.start, "updatedAt": now}


def turn(
    series: dict[str, Any] | None,
    current: JobState | None,
    slot: Slot,
    request_id: str,
    *,
    now: datetime,
    claim_seconds: float,
) -> Turn:
    """Decide a slot's move from its series document and the state of the series' current
    request (``current``; None when it has no record yet).

    * No series yet, or the current request ended: this slot takes the series and runs (an
      older slot too: a backfill runs once the series is idle).
    * This slot already holds it (a redelivery): it runs.
    * An earlier slot is active: ``forbid`` skips, ``replace`` cancels it first.
    * A later slot is active: this slot is skipped, whatever the rule (an old slot never
      cancels a newer run).
    * The current request took the series but has no record yet: its delivery is between the
      two writes, so wait for it, unless that is longer ago than a claim lives (it died).

    Examples:
        >>> slot = Slot("n-{slot}", datetime(2026, 1, 2, tzinfo=UTC), Concurrency.FORBID)
        >>> now = datetime(2026, 1, 2, tzinfo=UTC)
        >>> turn(None, None, slot, "n-20260102T000000Z", now=now, claim_seconds=120).move
        <Move.RUN: 'run'>
    """
    take = Turn(Move.RUN, write=series_document(slot, request_id, now))
    if series is None:
        return take
    holder = str(series.get("current") or "")
    if holder == request_id:
        return Turn(Move.RUN)
    if current is None:
        updated = series.get("updatedAt")
        fresh = isinstance(updated, datetime) and now - updated < timedelta(seconds=claim_seconds)
        return Turn(Move.WAIT, other=holder) if fresh else take
    if current.terminal:
        return take
    held_slot = series.get("slot")
    newer = not isinstance(held_slot, datetime) or slot.start > held_slot
    if slot.concurrency is Concurrency.REPLACE and newer:
        return Turn(Move.REPLACE, other=holder)
    return Turn(Move.SKIP, other=holder)


#: A schedule time further ahead than this is refused: such a slot would hold its series.
MAX_CLOCK_SKEW = timedelta(minutes=5)


def check_not_ahead(slot: Slot, now: datetime) -> list[FieldError]:
    """A slot may not start in the future (allowing for clock skew): a ``scheduleTime`` years
    ahead, a typo, would otherwise take its series until then.

    Examples:
        >>> slot = Slot("n-{slot}", datetime(2036, 1, 1, tzinfo=UTC), Concurrency.FORBID)
        >>> [e.path for e in check_not_ahead(slot, datetime(2026, 1, 1, tzinfo=UTC))]
        ['scheduleTime']
    """
    if slot.start <= now + MAX_CLOCK_SKEW:
        return []
    when = slot.start.strftime(SLOT_FORMAT)
    return [FieldError(SCHEDULE_TIME_ATTRIBUTE, f"the slot starts at {when}, in the future")]
