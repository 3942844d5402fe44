"""A submission claim is a lease: a delivery that outlasted it before its create creates nothing.

The chaos soak (seed 368188) made two jobs for one attempt. A delivery held the claim of an
attempt, and its label lookup (retried through a Vertex outage), its checkpoint lookup or the
building of its create (a cold instance importing the proto types under load) took longer
than the claim lives; meanwhile another delivery (an overlapping tick, a redelivery) took the
expired claim over, looked the attempt up, found nothing and created. The first delivery then
sent its own create: a second job. It must see that its claim expired before it sends a
create, and leave the attempt to the next delivery's lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from shared.app import handlers
from shared.app.commands import SubmitJob
from shared.app.services.settle import run_retry, settle_current
from shared.ingress.envelopes import unwrap_message
from shared.kernel.errors import BackendUnavailable, TransientError
from tests.events import load, pubsub_cloud_event


def _lookup_outlasting_the_claim(backend: Any, clock: Any, ttl: float, meanwhile: Callable) -> None:
    """The next label lookup answers what Vertex held when it was asked (nothing), but only
    after the claim's lease ran out; ``meanwhile`` another delivery runs."""
    real_find = backend.find

    def slow_find(*args: Any, **kwargs: Any) -> Any:
        backend.find = real_find
        answer = real_find(*args, **kwargs)
        clock.advance(ttl + 1)  # retried through an outage, past the claim's expiry
        meanwhile()
        return answer

    backend.find = slow_find


def _raised(call: Callable[[], object]) -> TransientError | None:
    """What ``call`` raised for redelivery (None: it returned); anything else propagates."""
    try:
        call()
    except TransientError as exc:
        return exc
    return None


def _failed_first_delivery(intake: Any, message: Any) -> None:
    """Intake's first delivery: its create fails with nothing made, so its claim is released
    and every later claim of attempt 1 looks up first."""
    intake.backend.fail_with = BackendUnavailable("Vertex AI CreateCustomJob failed: 503")
    with pytest.raises(BackendUnavailable):
        handlers.submit_job(SubmitJob(message=message), intake)
    intake.backend.fail_with = None
    assert intake.backend.created == []


def test_a_redelivery_whose_lookup_outlasted_its_claim_creates_nothing(intake, tracker, clock):
    message = unwrap_message(pubsub_cloud_event(load("seed_request")))
    _failed_first_delivery(intake, message)
    backend, ttl = intake.backend, intake.settings.claim_ttl_seconds
    # Another redelivery takes the expired claim over, finds nothing, creates and records.
    _lookup_outlasting_the_claim(
        backend, clock, ttl, lambda: handlers.submit_job(SubmitJob(message=message), intake)
    )
    raised = _raised(lambda: handlers.submit_job(SubmitJob(message=message), intake))
    assert len(backend.created) == 1
    assert raised is not None  # redelivered: its lookup runs again
    assert backend.cancels == []
    assert intake.jobs.job_store.get("seed-1")["vertexJob"] == next(iter(backend.jobs))


def test_a_tick_whose_lookup_outlasted_its_claim_creates_nothing(intake, tracker, clock):
    message = unwrap_message(pubsub_cloud_event(load("seed_request")))
    _failed_first_delivery(intake, message)
    backend, ttl = intake.backend, tracker.settings.claim_ttl_seconds
    clock.advance(ttl + 1)  # the record is due on the tick: its claim has expired
    # An overlapping tick takes the expired claim over, finds nothing, creates and records.
    _lookup_outlasting_the_claim(backend, clock, ttl, lambda: run_retry(tracker, "seed-1"))
    raised = _raised(lambda: run_retry(tracker, "seed-1"))
    assert len(backend.created) == 1
    assert raised is not None  # left for the next tick, which looks up again
    assert backend.cancels == []
    assert intake.jobs.job_store.get("seed-1")["vertexJob"] == next(iter(backend.jobs))


def test_a_retry_whose_checkpoint_lookup_outlasted_its_claim_creates_nothing(
    intake, tracker, clock
):
    body = load("seed_request")
    body["customJob"]["jobSpec"]["baseOutputDirectory"] = {
        "outputUriPrefix": "gs://flexjobs-test/seed-1"
    }
    handlers.submit_job(SubmitJob(message=unwrap_message(pubsub_cloud_event(body))), intake)
    backend, checkpoints = tracker.backend, tracker.checkpoints
    first = intake.jobs.job_store.get("seed-1")["vertexJob"]
    backend.update(first, state="JOB_STATE_RUNNING", start_time=clock.now)
    clock.advance(60)
    backend.update(
        first,
        state="JOB_STATE_FAILED",
        end_time=clock.now,
        error_code=14,
        error_message="The replica workerpool0-0 was preempted",
    )
    ttl = tracker.settings.claim_ttl_seconds
    real_latest = checkpoints.latest

    def slow_latest(*args: Any, **kwargs: Any) -> Any:
        # Attempt 2's first claim is fresh (no lookup); what it resumes from is listed
        # slowly, past the claim's expiry, and meanwhile an overlapping tick takes the
        # expired claim over, finds nothing under attempt 2's labels, creates and records.
        checkpoints.latest = real_latest
        answer = real_latest(*args, **kwargs)
        clock.advance(ttl + 1)
        run_retry(tracker, "seed-1")
        return answer

    checkpoints.latest = slow_latest
    # The preemption settles RETRYING with no backoff: attempt 2 is submitted at once.
    raised = _raised(lambda: settle_current(tracker, "seed-1"))
    assert len(backend.created) == 2  # attempt 1, and attempt 2 once
    assert raised is not None
    assert backend.cancels == []
    record = intake.jobs.job_store.get("seed-1")
    assert (record["attempt"], record["vertexJob"]) == (2, list(backend.jobs)[1])
