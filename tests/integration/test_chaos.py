"""The chaos soak (issue 20) at CI size, and the invariants' own checks on made-up facts.

The soak (``tests/integration/chaos.py``) starts an embedded stack of its own, so the session's
stack and its settings are left alone. It prints its seed first and every figure at the end;
``FLEXJOBS_SOAK_SEED=N`` replays a run's plan and chaos here, ``./dev soak --seed N`` at soak
size, and ``FLEXJOBS_STACK_LOGS=DIR`` keeps every process's log and the harness's timeline.
"""

from __future__ import annotations

import os
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.integration.chaos import Observed, Planned, SoakConfig, check, run_soak


@pytest.mark.integration
def test_chaos_soak_keeps_every_invariant() -> None:
    seed = int(os.environ.get("FLEXJOBS_SOAK_SEED") or random.SystemRandom().randrange(1, 10**6))
    logs = os.environ.get("FLEXJOBS_STACK_LOGS")
    report = run_soak(SoakConfig(seed=seed, logs=Path(logs) if logs else None))
    assert report.ok, report.text()


# --- the checks fail for real violations (made-up facts, no stack) ------------------------

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def stamp(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def job(n: int, attempt: int, state: str, start: float, end: float | None, *, ran: bool = True,
        rid: str = "r1", error: str | None = None) -> dict[str, Any]:  # fmt: skip
    made = {
        "name": f"projects/p/locations/us-central1/customJobs/{n}",
        "labels": {"flexjobs-request": rid, "flexjobs-attempt": str(attempt)},
        "state": f"JOB_STATE_{state}",
        "createTime": stamp(start),
        "_sim": {"resumedStep": 0},
    }
    if ran:
        made["startTime"] = stamp(start + 5)
    if end is not None:
        made["endTime"] = stamp(end)
    if error:
        made["error"] = {"code": 14, "message": error}
    return made


PREEMPTED = "The replica workerpool0-0 was preempted by Compute Engine."


def clean() -> Observed:
    """One SPOT request preempted once, then SUCCEEDED, with a stray that never ran."""
    first, second = job(1, 1, "FAILED", 0, 20, error=PREEMPTED), job(2, 2, "SUCCEEDED", 21, 40)
    stray = job(3, 2, "CANCELLED", 25, 27, ran=False)
    record = {
        "requestId": "r1",
        "state": "SUCCEEDED",
        "attempt": 2,
        "vertexJob": second["name"],
        "retries": {"preemption": 1},
    }
    attempts = {
        1: {"vertexJob": first["name"], "errorClass": "preempted"},
        2: {"vertexJob": second["name"], "state": "SUCCEEDED"},
    }
    return Observed(
        plan=[Planned("r1", "SPOT", 0, 20, True), Planned("bad", "BAD", 0, 20, False)],
        records={"r1": record},
        attempts={"r1": attempts},
        rejections={"bad": {"requestId": "bad"}},
        jobs=[first, second, stray],
        creates=[],
        cancels=[{"request": {"name": stray["name"]}, "code": "OK"}],
        calls_complete=True,
        notifications=[
            {"requestId": "r1", "state": "RETRYING"},
            {"requestId": "r1", "state": "SUCCEEDED"},
            {"requestId": "bad", "state": "REJECTED"},
        ],
        preempted_by_harness={first["name"]},
    )


def failing(obs: Observed) -> list[int]:
    return [v.number for v in check(obs) if not v.ok]


def test_the_clean_history_passes_every_invariant() -> None:
    assert failing(clean()) == []


def test_a_lost_request_or_rejection_and_a_record_stuck_accepted_fail_1() -> None:
    obs = clean()
    obs.plan.append(Planned("r2", "SPOT", 0, 20, True))
    del obs.rejections["bad"]
    assert failing(obs) == [1]
    obs = clean()
    obs.records["r1"] = {**obs.records["r1"], "state": "ACCEPTED"}
    assert 1 in failing(obs)


def test_two_live_jobs_at_once_fail_2_and_a_stray_that_ran_fails_3() -> None:
    obs = clean()
    obs.jobs[1]["createTime"] = stamp(10)  # attempt 2 created while attempt 1 ran
    assert 2 in failing(obs)
    obs = clean()
    obs.jobs[2]["startTime"] = stamp(26)  # the stray ran
    assert {2, 3} <= set(failing(obs))
    obs = clean()
    obs.jobs[2]["state"] = "JOB_STATE_SUCCEEDED"  # nothing cancelled the stray
    assert {2, 3} <= set(failing(obs))


def test_miscounted_attempts_fail_4() -> None:
    obs = clean()
    obs.records["r1"]["retries"] = {}
    assert 4 in failing(obs)
    obs = clean()
    obs.jobs[0].pop("error")  # Vertex says attempt 1 was not preempted
    assert 4 in failing(obs)


def test_a_live_job_fails_5_and_an_unnotified_end_fails_6() -> None:
    obs = clean()
    obs.jobs[1]["state"] = "JOB_STATE_RUNNING"
    del obs.jobs[1]["endTime"]
    assert 5 in failing(obs)
    obs = clean()
    obs.notifications = [m for m in obs.notifications if m["state"] != "SUCCEEDED"]
    assert failing(obs) == [6]
    obs = clean()
    obs.notifications.append({"requestId": "r1", "state": "FAILED"})
    assert failing(obs) == [6]


def test_a_cancel_before_any_job_or_with_its_retry_owed_is_accounted() -> None:
    obs = clean()
    obs.plan.append(Planned("r2", "FLEX_START", 0, 20, True, cancel_at=3))
    obs.records["r2"] = {"requestId": "r2", "state": "CANCELLED", "attempt": 1, "vertexJob": None}
    obs.notifications.append({"requestId": "r2", "state": "CANCELLED"})
    assert failing(obs) == []
    obs = clean()  # cancelled while RETRYING: the retry was owed, never made
    obs.jobs = obs.jobs[:1]
    obs.records["r1"] = {**obs.records["r1"], "state": "CANCELLED", "attempt": 1}
    obs.records["r1"]["vertexJob"] = obs.jobs[0]["name"]
    del obs.attempts["r1"][2]
    obs.notifications = [{"requestId": "r1", "state": "CANCELLED"}, obs.notifications[-1]]
    assert failing(obs) == []
    obs.records["r1"]["state"] = "SUCCEEDED"  # but an end other than a cancel owes nothing
    obs.notifications.append({"requestId": "r1", "state": "SUCCEEDED"})
    assert 4 in failing(obs)
