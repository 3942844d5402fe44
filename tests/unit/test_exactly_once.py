"""The one exactly-once routine: what each step's failure does to the claim (pure values)."""

from __future__ import annotations

import pytest

from shared.app.commands import Outcome
from shared.app.steps.exactly_once import Creation, create_once
from shared.domain.decisions.submissions import Claimed
from shared.kernel.errors import (
    BackendRejected,
    BackendUnavailable,
    OutcomeUnknown,
    QuotaExhausted,
    StoreUnavailable,
)


class Steps:
    """Plain recording steps; each may be told to fail."""

    def __init__(self, *, found=None, create_error=None, record_error=None, token="t", fresh=False):
        self.calls: list[str] = []
        self.fresh = fresh
        self.found = found
        self.create_error = create_error
        self.record_error = record_error
        self.token = token

    def creation(self) -> Creation[str]:
        return self

    def claim(self):
        self.calls.append("claim")
        return None if self.token is None else Claimed(token=self.token, fresh=self.fresh)

    def find(self):
        self.calls.append("find")
        return self.found

    def create(self, claimed):
        self.calls.append("create")
        if self.create_error is not None:
            raise self.create_error
        return "job"

    def record(self, claimed, made, adopted):
        self.calls.append(f"record {made} adopted={adopted}")
        if self.record_error is not None:
            raise self.record_error
        return Outcome.ADOPTED if adopted else Outcome.SUBMITTED

    def release(self, token):
        self.calls.append("release")

    def refused(self, token, exc):
        self.calls.append("refused")
        return Outcome.FAILED

    def parked(self, token, exc):
        self.calls.append("parked")
        return Outcome.PARKED


def test_a_claim_taken_over_looks_up_creates_and_records():
    steps = Steps()
    assert create_once(steps.creation()) is Outcome.SUBMITTED
    assert steps.calls == ["claim", "find", "create", "record job adopted=False"]


def test_a_fresh_claim_creates_without_a_lookup():
    # No delivery held the key before: nothing can exist under it, so no lookup is spent.
    steps = Steps(fresh=True, found="never-looked-up")
    assert create_once(steps.creation()) is Outcome.SUBMITTED
    assert steps.calls == ["claim", "create", "record job adopted=False"]


def test_what_an_earlier_delivery_created_is_adopted_not_created_again():
    steps = Steps(found="old-job")
    assert create_once(steps.creation()) is Outcome.ADOPTED
    assert steps.calls == ["claim", "find", "record old-job adopted=True"]


def test_no_claim_means_nothing_to_do():
    steps = Steps(token=None)
    assert create_once(steps.creation()) is Outcome.DUPLICATE
    assert steps.calls == ["claim"]


def test_a_refusal_for_good_settles_the_record():
    steps = Steps(create_error=BackendRejected("400"))
    assert create_once(steps.creation()) is Outcome.FAILED
    assert steps.calls[-1] == "refused"


def test_quota_parks_the_submission():
    steps = Steps(create_error=QuotaExhausted("429"))
    assert create_once(steps.creation()) is Outcome.PARKED
    assert steps.calls[-1] == "parked"


def test_a_create_whose_outcome_is_unknown_keeps_the_claim():
    steps = Steps(create_error=OutcomeUnknown("504"))
    with pytest.raises(OutcomeUnknown):
        create_once(steps.creation())
    assert "release" not in steps.calls


@pytest.mark.parametrize("error", [BackendUnavailable("503"), RuntimeError("bug")])
def test_a_create_that_did_not_happen_releases_the_claim(error):
    steps = Steps(create_error=error)
    with pytest.raises(type(error)):
        create_once(steps.creation())
    assert steps.calls[-1] == "release"


def test_a_failed_record_releases_so_the_redelivery_adopts():
    steps = Steps(record_error=StoreUnavailable("firestore down"))
    with pytest.raises(StoreUnavailable):
        create_once(steps.creation())
    assert steps.calls[-2:] == ["record job adopted=False", "release"]


def test_a_crash_releases_nothing():
    # A process that dies runs nothing more; its claim expires after the TTL instead.
    steps = Steps(record_error=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        create_once(steps.creation())
    assert "release" not in steps.calls
