"""The one claim of every collection: how a delivery takes a record (job or deployment) before
it creates anything, and what it finds when another delivery holds it or has finished."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from shared.domain.decisions.submissions import Claimed, ClaimSeen, existing_claim
from shared.domain.model.records import Claim, Stored
from shared.kernel.errors import SubmissionInProgress


def new_claim(
    now: datetime, ttl_seconds: float, attempt: int | None = None
) -> tuple[str, dict[str, Any]]:
    """A fresh claim token and the claim as written on a record, expiring after the TTL."""
    token = uuid.uuid4().hex
    claim: dict[str, Any] = {"token": token, "expiresAt": now + timedelta(seconds=ttl_seconds)}
    if attempt is not None:
        claim["attempt"] = attempt
    return token, claim


#: A claim's write: ``write(decide, known)`` -> (whether it wrote, the record after it).
ClaimWrite = Callable[
    [Callable[[dict[str, Any]], dict[str, Any] | None], Stored | None],
    tuple[bool, Stored | None],
]


def claim_record(
    record: dict[str, Any],
    *,
    read: Callable[[], Stored | None],
    create: Callable[[dict[str, Any]], Stored | None],
    write: ClaimWrite,
    settled: Callable[[dict[str, Any]], bool],
    now: datetime,
    ttl_seconds: float,
    attempt: int | None = None,
) -> Claimed:
    """The one claim of every collection: a read, then a conditional create when there is no
    record, else a decision on the record found (a duplicate, a live claim held elsewhere, or
    a dead claim to take over).

    Read first, so that a duplicate delivery costs one read and nothing else; a create that
    loses a race to another delivery decides on a fresh read like any record found.
    """
    token, held = new_claim(now, ttl_seconds, attempt)
    # Due on the tick once the claim expires: a delivery that dies after its create (or whose
    # message runs out of deliveries while the claim holds) leaves nothing untracked, since
    # the tick then takes the claim over and looks the job up by its key.
    due = {"claim": held, "nextAttemptAt": held["expiresAt"]}
    found = read()
    if found is None:
        made = create({**record, **due})
        if made is not None:
            return Claimed(token=token, fresh=True, stored=made, expires_at=held["expiresAt"])
    seen: dict[str, Any] = {}

    def decide(current: dict[str, Any]) -> dict[str, Any] | None:
        seen.clear()
        seen.update(copy.deepcopy(current))
        verdict = existing_claim(Claim.of(current.get("claim")), now, settled(current))
        if verdict is ClaimSeen.SUBMITTED:
            return None
        if verdict is ClaimSeen.HELD:
            raise SubmissionInProgress(
                f"request {current.get('requestId')!r} is being submitted by another "
                f"delivery until {current['claim']['expiresAt'].isoformat()}"
            )
        return {**due, "updatedAt": now}

    wrote, after = write(decide, found)
    if not wrote:
        return Claimed(record=seen)
    return Claimed(token=token, stored=after, expires_at=held["expiresAt"])
