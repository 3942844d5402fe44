"""Hints and observations (pure): which job a hint names, and monotonic reconciliation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.domain.decisions.hints import (
    CLOCK_SKEW_SECONDS,
    HintAction,
    hint_action,
    parse_hint,
    read_start,
)
from shared.domain.decisions.jobs import observe
from shared.domain.model.vertex_jobs import VertexJob
from tests.events import load
from tests.records_support import decoded

# The decisions read records decoded; these tests write them as stored documents.
observe = decoded(observe)

NAME = "projects/p/locations/us-central1/customJobs/123"
NOW = datetime(2026, 11, 30, tzinfo=UTC)


def test_ml_job_log_entry():
    hint = parse_hint(load("ml_job_log_entry"))
    assert hint.job_id == "123"


def test_audit_log_entry():
    hint = parse_hint(load("audit_log_entry"))
    assert hint.job_id == "123"


def test_job_name_hint():
    assert parse_hint({"jobName": NAME}).job_id == "123"


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        {"jobName": "projects/p/locations/l/endpoints/1"},
        {"resource": {"type": "gce_instance", "labels": {"job_id": "1"}}},
        {"resource": {"type": "ml_job", "labels": {"job_id": "abc"}}},
        {"protoPayload": {"resourceName": 5}},
    ],
)
def test_foreign_or_malformed_hints(body):
    assert parse_hint(body) is None


def record(state: str, vertex_job: str = NAME) -> dict:
    return {"requestId": "r", "state": state, "attempt": 1, "vertexJob": vertex_job}


def job(state: str, **kw) -> VertexJob:
    return VertexJob(name=NAME, state=state, labels={}, **kw)


def test_forward_moves_apply():
    change = observe(record("QUEUED"), job("JOB_STATE_RUNNING", start_time=NOW), NOW)
    assert change.state == "RUNNING"
    assert change.attempt["startedAt"] == NOW
    assert change.record["attemptStartedAt"] == NOW  # a list shows its time running so far


@pytest.mark.parametrize(
    ("current", "seen"),
    [
        ("SUCCEEDED", "JOB_STATE_RUNNING"),  # stale RUNNING after SUCCEEDED
        ("RUNNING", "JOB_STATE_RUNNING"),  # replay
        ("RUNNING", "JOB_STATE_PENDING"),  # stale
        ("QUEUED", "JOB_STATE_UNSPECIFIED"),
    ],
)
def test_stale_and_replayed_observations_change_nothing(current, seen):
    assert observe(record(current), job(seen), NOW) is None


def test_observation_of_another_attempt_is_ignored():
    assert observe(record("QUEUED", vertex_job=NAME + "9"), job("JOB_STATE_SUCCEEDED"), NOW) is None


def test_failure_keeps_the_error():
    seen = job("JOB_STATE_FAILED", error_code=4, error_message="max wait duration passed")
    change = observe(record("QUEUED"), seen, NOW)
    assert change.state == "FAILED"
    assert change.record["reason"] == "max wait duration passed"
    assert change.attempt["errorCode"] == 4


def seconds(n: float) -> datetime:
    return NOW + timedelta(seconds=n)


# (last read began, hint published, now): interval 10 s, clock skew allowance 1 s.
@pytest.mark.parametrize(
    ("last_read", "published", "now", "action"),
    [
        # Nobody reads this job: read.
        (None, seconds(0), seconds(0), HintAction.READ),
        (None, seconds(100), seconds(0), HintAction.READ),  # publisher clock ahead of ours
        # A read that began well after publication saw what the hint is about.
        (seconds(5), seconds(0), seconds(6), HintAction.COVERED),
        (seconds(5), seconds(0), seconds(500), HintAction.COVERED),  # however long ago
        # A read that began at the publication covers it (the hint was published after the
        # change it announces); one that began a hair before does not.
        (seconds(0), seconds(0), seconds(3), HintAction.COVERED),
        (seconds(0), seconds(0.001), seconds(3), HintAction.PENDING),
        (seconds(0), seconds(0.4), seconds(3), HintAction.PENDING),
        (seconds(0), seconds(8), seconds(9), HintAction.PENDING),
        # Inside the window the reader reads again later; once it closes, read now.
        (seconds(0), seconds(5), seconds(9.999), HintAction.PENDING),
        (seconds(0), seconds(5), seconds(10), HintAction.READ),
        (seconds(0), seconds(50), seconds(60), HintAction.READ),
        # A hint published in the future by our clock is never covered by a past read.
        (seconds(0), seconds(30), seconds(20), HintAction.READ),
    ],
)
def test_hint_action(last_read, published, now, action):
    # The window's second read is spent already (two reads began at ``last_read``).
    assert hint_action(last_read, published, now, 10, last_read) is action


def test_the_second_read_of_a_window_begins_at_once_the_third_waits():
    # A job seen starting, then preempted two seconds later: read again at once.
    assert hint_action(seconds(0), seconds(2), seconds(2.1), 10) is HintAction.READ
    assert hint_action(seconds(0), seconds(2), seconds(2.1), 10, seconds(-20)) is (HintAction.READ)
    # A third change inside the window of the first of two reads waits for it.
    assert hint_action(seconds(2.1), seconds(4), seconds(4.1), 10, seconds(0)) is (
        HintAction.PENDING
    )
    assert hint_action(seconds(2.1), seconds(4), seconds(10), 10, seconds(0)) is HintAction.READ


def test_clock_skew_allowance_is_none():
    # The table above is written around this allowance.
    assert CLOCK_SKEW_SECONDS == 0.0


def test_a_read_begins_at_once_and_covers_the_copies_published_with_its_hint():
    assert read_start(seconds(0), seconds(0.1)) == seconds(0.1)
    assert read_start(seconds(0), seconds(3)) == seconds(3)
    # Published "later" by our clock (clocks disagree): wait for it, at most a second.
    assert read_start(seconds(0.3), seconds(0.1)) == seconds(0.3)
    assert read_start(seconds(30), seconds(0.1)) == seconds(1.1)
    # Copies published with the first hint are covered by its read, and read nothing.
    lease = read_start(seconds(0), seconds(0.1))
    assert hint_action(lease, seconds(0), seconds(0.2), 10) is HintAction.COVERED


def test_a_zero_interval_never_coalesces():
    assert hint_action(seconds(0), seconds(0.5), seconds(0), 0) is HintAction.READ
