"""The one routine that creates a Vertex AI job exactly once.

Intake's attempt 1 and every retry go through :func:`create_once` (a Spot deployment claims
each call in its serving state instead: :mod:`shared.domain.serving.rule`). Each caller
describes its own steps (:class:`Creation`); the order, and what happens when a step fails,
is decided here and nowhere else:

1. **claim** the record (a conditional put, or a transaction for a retry). No claim: nothing
   to do (a duplicate delivery, a retry not due).
2. **find** what an earlier delivery may have created, by its idempotency key (labels, or the
   deployed model's tag). Found: it is adopted. A *fresh* claim skips it: no delivery ever
   held this key before (the record was just created, or the attempt was never claimed), so
   nothing can exist under it, and the lookup would only spend a call of the project's quota.
3. **create**, never retried in-process, and only while the claim holds (checked last
   before it is sent): a claim that expired meanwhile may have been taken over by a
   delivery that looked up and created already.
4. **record** it, in one transaction. A record that will not take it (the request was
   cancelled meanwhile, or another job already holds the attempt) makes the caller cancel it.

When a step fails:

- Vertex refused for good (:class:`~shared.kernel.errors.BackendRejected`): nothing was created; the
  record ends FAILED, with its notification.
- Quota (:class:`~shared.kernel.errors.QuotaExhausted`): nothing was created; the submission is
  parked and the scheduler tick retries it with backoff.
- The create's outcome is unknown (:class:`~shared.kernel.errors.OutcomeUnknown`): the claim is
*kept*
  until it expires, so the redelivery looks the key up only once the job, if Vertex made it,
  exists. (A create that lands later still is a stray under the attempt's labels, which the
  tick cancels.)
- Anything else: the claim is released, so the redelivery runs at once; and it is raised.

Examples:
    A duplicate delivery: another delivery holds the claim, so no other step runs.

    >>> class Duplicate:
    ...     def claim(self):
    ...         return None
    >>> create_once(Duplicate())
    <Outcome.DUPLICATE: 'duplicate'>
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from shared.app.commands import Outcome
from shared.domain.decisions.submissions import Claimed
from shared.kernel.errors import BackendRejected, OutcomeUnknown, QuotaExhausted
from shared.kernel.logs import get_logger

log = get_logger("exactly_once")

T = TypeVar("T")


class Creation(Protocol[T]):
    """The steps of one creation, as the caller's object provides them; see the module
    docstring for their order and failures. Each step returns what it found or made, and
    :func:`create_once` hands it to the next: the claim taken goes to ``create`` (a job names
    the claim that made it) and to ``record`` (the record as claimed, so recording needs no
    read); ``record`` returns the outcome (it handles a record that will not take ``made``);
    ``refused`` and ``parked`` settle the record for those two failures."""

    def claim(self) -> Claimed | None: ...

    def find(self) -> T | None: ...

    def create(self, claimed: Claimed) -> T: ...

    def record(self, claimed: Claimed, made: T, adopted: bool) -> Outcome: ...

    def release(self, token: str) -> None: ...

    def refused(self, token: str, exc: BackendRejected) -> Outcome: ...

    def parked(self, token: str, exc: QuotaExhausted) -> Outcome: ...


def create_once(steps: Creation[T]) -> Outcome:
    """Run ``steps`` so that exactly one thing exists per key, and the record names it.

    Raises:
        TransientError: a fault that redelivery may cure (the claim is released, unless the
            create's outcome is unknown).
    """
    claimed = steps.claim()
    if claimed is None or claimed.token is None:
        return Outcome.DUPLICATE  # another delivery's record: nothing held, nothing to do
    token = claimed.token
    try:
        # A fresh claim (no delivery held the key before) skips the lookup of what an earlier
        # one made: nothing can exist under its key yet.
        found = None if claimed.fresh else steps.find()
        made = found if found is not None else steps.create(claimed)
    except BackendRejected as exc:
        log.error("Vertex AI refused it for good", extra={"fields": {"reason": str(exc)}})
        return steps.refused(token, exc)
    except QuotaExhausted as exc:
        log.warning("Vertex AI quota exhausted: parked", extra={"fields": {"reason": str(exc)}})
        return steps.parked(token, exc)
    except OutcomeUnknown:
        # Keep the claim: released now, the redelivery's lookup could run before Vertex
        # finishes the create it did receive, and create a second job.
        log.warning("create outcome unknown; the claim is kept until it expires")
        raise
    except Exception:
        steps.release(token)
        raise
    try:
        return steps.record(claimed, made, found is not None)
    except Exception:
        # The job exists and carries its key: the redelivery finds and adopts it.
        steps.release(token)
        raise
