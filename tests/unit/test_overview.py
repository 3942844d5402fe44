"""What the status page says about records: rows (with the current attempt so far), the
totals of each window, the attempts' table and the notifications."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.domain.model.records import JobRecord
from shared.domain.policy.pricing import PriceTable
from shared.status.overview import (
    ACTIVE_STATES,
    Money,
    attempt_rows,
    current_usage,
    job_row,
    notifications,
    totals,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
PRICES = PriceTable.load("accelerators: {NVIDIA_L4: {STANDARD: 1.0, SPOT: 0.4, FLEX_START: 0.5}}")
ENDED_COST = {"costUsd": 0.4, "onDemandUsd": 1.0, "savingsUsd": 0.6, "priced": True}


def ago(hours: float) -> datetime:
    return NOW - timedelta(hours=hours)


def record(state: str, **fields) -> dict:
    return {
        "requestId": "r1",
        "displayName": "<b>name</b>",
        "kind": "customJob",
        "state": state,
        "attempt": 2,
        "acceleratorType": "NVIDIA_L4",
        "gpus": 1,
        "strategy": "SPOT",
        "createdAt": ago(5),
        "vertexJob": "projects/p/locations/l/customJobs/2",
        "queuedSeconds": 600.0,
        "runningSeconds": 3600.0,
        "gpuSeconds": 3600.0,
        "cost": ENDED_COST,
        **fields,
    }


def test_an_ended_job_shows_what_its_attempts_recorded():
    row = job_row(record("SUCCEEDED"), NOW, PRICES)
    assert (row.queued_seconds, row.running_seconds, row.gpu_seconds) == (600, 3600, 3600)
    assert row.money == Money(0.4, 1.0, 0.6, True) and not row.live
    assert (row.request_id, row.display_name, row.attempt) == ("r1", "<b>name</b>", 2)


def test_a_queued_attempt_adds_its_wait_so_far():
    row = job_row(record("QUEUED", attemptSubmittedAt=ago(0.5)), NOW, PRICES)
    assert (row.queued_seconds, row.running_seconds) == (600 + 1800, 3600)
    assert row.money == Money(0.4, 1.0, 0.6, True) and row.live  # waiting is free


def test_a_running_attempt_adds_its_time_and_price_so_far():
    raw = record("RUNNING", attemptSubmittedAt=ago(2), attemptStartedAt=ago(1), gpus=2)
    row = job_row(raw, NOW, PRICES)
    assert (row.queued_seconds, row.running_seconds) == (600 + 3600, 3600 + 3600)
    assert row.gpu_seconds == 3600 + 7200
    # 2 GPU-hours so far at 0.4 (SPOT) against 1.0 on demand.
    assert row.money == Money(1.2, 3.0, 1.8, True)


def test_vertex_create_time_is_when_the_attempt_began_waiting():
    raw = record("QUEUED", attemptSubmittedAt=ago(1), vertexCreateTime=ago(3))
    assert current_usage(JobRecord.decode(raw), NOW)["queuedSeconds"] == 3 * 3600


@pytest.mark.parametrize(
    "fields",
    [
        {"state": "RETRYING"},  # attempt n ended and is counted; n+1 has not begun
        {"state": "RUNNING"},  # no attemptStartedAt (an older record): the split is unknown
        {"state": "QUEUED", "vertexJob": None},  # parked for quota: no Vertex job waits
        {"state": "FAILED"},
    ],
)
def test_no_time_so_far_without_a_current_attempt(fields):
    raw = record(fields.pop("state"), attemptSubmittedAt=ago(1), **fields)
    assert current_usage(JobRecord.decode(raw), NOW) is None
    assert not job_row(raw, NOW, PRICES).live


def test_an_accelerator_without_a_price_is_marked_unpriced():
    raw = record("RUNNING", attemptSubmittedAt=ago(2), attemptStartedAt=ago(1))
    raw["acceleratorType"] = "NVIDIA_NEW"
    assert job_row(raw, NOW, PRICES).money.priced is False


def test_a_state_the_code_does_not_know_is_shown_as_stored():
    assert job_row(record("PAUSED?"), NOW, PRICES).state == "PAUSED?"


def ended(hours: float, gpu: float = 3600.0, cost=ENDED_COST) -> dict:
    return {"endedAt": ago(hours), "gpuSeconds": gpu, "cost": cost}


def test_totals_count_each_job_in_the_window_it_ended_in():
    rows = [ended(1), ended(23), ended(30), ended(24 * 6), {"endedAt": None}]
    figures = totals({"RUNNING": 3, "QUEUED": 1, "DONE": 9}, rows, NOW, capped=False)
    assert figures.active == tuple(
        (s, {"RUNNING": 3, "QUEUED": 1}.get(s, 0)) for s in ACTIVE_STATES
    )
    assert figures.active_total == 4
    day, week = figures.windows
    assert (day.label, day.jobs, day.gpu_seconds) == ("24 hours", 2, 7200)
    assert day.money == Money(0.8, 2.0, 1.2, True)
    assert (week.label, week.jobs, week.since) == ("7 days", 4, NOW - timedelta(days=7))
    assert week.money.savings_usd == pytest.approx(2.4)
    assert not day.truncated and not week.truncated


def test_totals_that_hit_their_bound_say_which_windows_are_incomplete():
    day, week = totals({}, [ended(1), ended(30)], NOW, capped=True).windows
    assert not day.truncated  # the read reached past 24 hours: the day is whole
    assert week.truncated
    day, week = totals({}, [ended(1)], NOW - timedelta(hours=30), capped=True).windows
    assert day.truncated and week.truncated


def test_an_unpriced_job_marks_its_windows():
    rows = [ended(1), ended(2, cost={"priced": False})]
    assert totals({}, rows, NOW, capped=False).windows[0].money.priced is False


def test_attempts_are_in_number_order_with_their_figures():
    docs = [
        {"attempt": 10, "state": "SUCCEEDED", "cost": ENDED_COST, "runningSeconds": 5},
        {"attempt": 9, "state": "FAILED", "errorClass": "preempted", "workLostSeconds": 30.0},
    ]
    rows = attempt_rows(docs)
    assert [r.number for r in rows] == [9, 10]
    assert (rows[0].error_class, rows[0].work_lost_seconds, rows[0].money) == (
        "preempted",
        30.0,
        None,
    )
    assert rows[1].money == Money(0.4, 1.0, 0.6, True) and rows[1].running_seconds == 5


def test_notifications_published_then_pending():
    message = {"requestId": "r1", "state": "RETRYING", "attempt": 1, "reason": "preempted: x"}
    pending = {"requestId": "r1", "state": "SUCCEEDED", "attempt": 2, "reason": None}
    rows = notifications(
        JobRecord.decode(record("SUCCEEDED", notified=[message], outbox=[pending]))
    )
    assert [(n.state, n.attempt, n.reason, n.published) for n in rows] == [
        ("RETRYING", 1, "preempted: x", True),
        ("SUCCEEDED", 2, None, False),
    ]
