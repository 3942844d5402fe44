"""AUTO capacity end to end: a deadline-bound request through preemptions and a capacity
drought to SUCCEEDED, on an embedded stack of its own.

The stack runs in real time (the simulator's clock is the wall clock, factor 1), so the
deadline, the simulator's jobs and flexjobs' decisions share one clock. The job is a minute of
work due in a few minutes, and the policy's time constants are scaled alike
(``FLEXJOBS_AUTO_TIME_SCALE=60``: a 10 s safety margin, a 5 s Spot probe, FLEX_START looked at
again after 60 s), and so is the time Vertex takes to place a job that fits (the simulator's
QUEUED delay: 1 s). The scheduler ticks every second.

The story, driven through the simulator's control API and watched in Firestore:
1. attempt 1 runs on Spot (plenty of slack) and is preempted after a checkpoint;
2. attempt 2 runs on Spot again, from that checkpoint, and is preempted while the pool has no
   capacity left;
3. attempt 3 (Spot) waits for capacity until its ``waitUntil`` and is given up by the tick,
   free of charge;
4. the policy then looks elsewhere (FLEX_START, or on-demand once the slack is too small),
   capacity returns, and the job finishes before its deadline.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flexjobs_local.stack import LocalStack, StackConfig
from shared.domain.capacity.model import Tuning
from tests.integration.helpers import running_stack, wait_for
from tests.integration.test_lifecycle import attempts, record, spot_request

pytestmark = pytest.mark.integration

WORK_SECONDS = 60
DEADLINE_SECONDS = 170
ACCELERATOR = "NVIDIA_TESLA_A100"  # the seed request's
TIME_SCALE = 60
# A queued Spot attempt is given up by the first tick that lists it still queued at its
# decision's waitUntil: a probe's length after the decision, which comes before the create
# (the claim, the checkpoint lookup, the create call: 0.1 to 0.3 s, more on a loaded machine).
# The simulator places a job that fits this long after its create (QUEUED, then PENDING and
# RUNNING at once). Vertex starts a Spot job that fits well inside the 5-minute probe; a minute,
# scaled by 60, is a second. At the simulator's default 5 s, placement came after the probe's
# end every time, by the decision-to-create latency: a tick in that gap gave attempt 1 or 2 up
# (cancelled it, queued) just before it would have started.
PLACEMENT_SECONDS = 1.0
# The probe must outlast the placement by that latency and a tick, with room for a loaded
# machine's stalls.
assert Tuning().scaled(TIME_SCALE).spot_probe_seconds >= PLACEMENT_SECONDS + 3


@pytest.fixture(scope="module")
def auto_stack() -> Iterator[LocalStack]:
    config = StackConfig(
        time_factor=1.0,
        queue_seconds=PLACEMENT_SECONDS,
        tick_seconds=1.0,
        function_env={
            "FLEXJOBS_AUTO_TIME_SCALE": str(TIME_SCALE),
            "FLEXJOBS_BACKOFF_BASE_SECONDS": "0",
            "FLEXJOBS_HINT_COALESCE_SECONDS": "1",
        },
    )
    # This module's clients talk to this stack, not the session's, until it stops.
    with running_stack(config) as stack:
        yield stack


@pytest.fixture
def db(auto_stack: LocalStack) -> Any:
    from google.cloud import firestore

    return firestore.Client(project=auto_stack.config.project)


def auto_request(rid: str, deadline: datetime) -> dict[str, Any]:
    """A minute of training (a step a second, a checkpoint every 5) due at ``deadline``."""
    body = spot_request(rid, run_seconds=WORK_SECONDS, every=5)
    body["customJob"]["jobSpec"]["scheduling"] = {"strategy": "AUTO"}
    body.update(
        deadline=deadline.isoformat().replace("+00:00", "Z"),
        estimatedRunSeconds=WORK_SECONDS,
        checkpointIntervalSeconds=5,
        restartOverheadSeconds=2,
        totalSteps=WORK_SECONDS,  # the simulator's step is a second of work
    )
    return body


def attempt_running(stack: LocalStack, db: Any, rid: str, attempt: int) -> str:
    """Wait until attempt ``attempt`` runs and has recorded a checkpoint of its own; its job."""

    def submitted() -> str | None:
        r = record(db, rid)
        return r.get("vertexJob") if r.get("attempt") == attempt else None

    name = str(wait_for(submitted, 60, f"attempt {attempt}"))
    stack.simulator.wait_for_job(name, "JOB_STATE_RUNNING", timeout=60)
    began = stack.simulator.job(name)["_sim"].get("resumedStep") or 0

    def checkpointed() -> bool:
        step = (record(db, rid).get("latestCheckpoint") or {}).get("step") or 0
        return record(db, rid).get("attempt") == attempt and step > began

    # Long for a loaded CI machine: the upload goes through the storage bridge to a function.
    wait_for(checkpointed, 120, f"a checkpoint of attempt {attempt} recorded from its upload")
    return name


def test_auto_request_moves_across_capacity_as_its_slack_runs_down_and_meets_the_deadline(
    auto_stack: LocalStack, db: Any
) -> None:
    stack = auto_stack
    sim = stack.simulator
    rid = "auto-deadline"
    deadline = datetime.now(UTC) + timedelta(seconds=DEADLINE_SECONDS)
    stack.publish_request(auto_request(rid, deadline))

    # 1. Plenty of slack: Spot. Preempted after its first checkpoint.
    first = attempt_running(stack, db, rid, 1)
    sim.preempt(first)

    # 2. Spot again, from that checkpoint; preempted when the pool has nothing left.
    second = attempt_running(stack, db, rid, 2)
    sim.set_capacity(stack.config.location, ACCELERATOR, 0)
    sim.preempt(second)

    # 3. Attempt 3 waits for capacity that does not come, and the tick gives it up.
    wait_for(lambda: record(db, rid).get("attempt") == 3, 60, "attempt 3")
    wait_for(lambda: record(db, rid).get("attempt") == 4, 90, "attempt 3 given up")
    # 4. Capacity returns; the job finishes on what the policy chose now.
    sim.set_capacity(stack.config.location, ACCELERATOR, 16)

    final = wait_for(
        lambda: (r := record(db, rid)).get("state") in ("SUCCEEDED", "FAILED", "CANCELLED") and r,
        DEADLINE_SECONDS + 60,
        "the end",
    )
    docs = attempts(db, rid)
    strategies = [docs[n]["strategy"] for n in sorted(docs)]
    summary = [(n, d["strategy"], d.get("capacity", {}).get("reason")) for n, d in docs.items()]
    print("attempts:", *summary, sep="\n  ")  # shown with -s, and on a failure
    assert final["state"] == "SUCCEEDED", summary
    assert final["endedAt"] <= deadline, (final["endedAt"], deadline, summary)

    # Every attempt ran on a strategy the policy chose, and says why; none was AUTO itself.
    for n, doc in docs.items():
        assert doc["capacity"]["strategy"] == doc["strategy"], (n, doc)
        assert doc["capacity"]["reason"], (n, doc)
    assert strategies[:3] == ["SPOT", "SPOT", "SPOT"], summary
    assert set(strategies[3:]) <= {"FLEX_START", "STANDARD"} and strategies[3:], summary
    # The slack ran down: each decision saw less of it than the one before.
    slack = [docs[n]["capacity"]["slackSeconds"] for n in sorted(docs)]
    assert slack == sorted(slack, reverse=True), summary

    # Two preemptions charged the budget; the given-up wait charged nothing.
    assert [docs[n].get("errorClass") for n in (1, 2)] == ["preempted", "preempted"]
    assert docs[3]["endedBy"] == "gave-up" and "errorClass" not in docs[3]
    assert final["retries"] == {"preemption": 2}
    # Never restarted from scratch: every retry resumed from a checkpoint of the one before.
    for n in sorted(docs)[1:]:
        assert docs[n]["resumedFrom"], (n, docs[n])
    # No job is left holding GPUs, and the request's jobs never overlapped in running.
    mine = [j for j in sim.jobs() if j.get("labels", {}).get("flexjobs-request") == rid]
    assert len(mine) == len(docs)
    assert all(j["state"] in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED")
               for j in mine)  # fmt: skip
