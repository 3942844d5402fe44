"""Simulated preemption and failure injection, observed through the real JobServiceClient."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from google.cloud import aiplatform_v1

from flexjobs_local.simulator import SimulatorControlError, SimulatorHandle, serve
from tests.integration.simulator_support import A100, LOCATION, PARENT

pytestmark = pytest.mark.integration

State = aiplatform_v1.JobState


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    handle = serve(time_factor=0, seed=3)
    yield handle
    handle.stop()


def create(
    client: aiplatform_v1.JobServiceClient,
    strategy: str,
    run_seconds: int = 3600,
    display_name: str = "job",
) -> str:
    job = aiplatform_v1.CustomJob(
        display_name=display_name,
        job_spec={
            "worker_pool_specs": [
                {
                    "machine_spec": {
                        "machine_type": "a2-highgpu-2g",
                        "accelerator_type": A100,
                        "accelerator_count": 2,
                    },
                    "replica_count": 1,
                    "container_spec": {
                        "image_uri": "us-docker.pkg.dev/p/r/trainer:1",
                        "env": [{"name": "FLEXJOBS_SIM_RUN_SECONDS", "value": str(run_seconds)}],
                    },
                }
            ],
            "scheduling": {"strategy": strategy},
        },
    )
    return client.create_custom_job(parent=PARENT, custom_job=job, retry=None).name


def get(client: aiplatform_v1.JobServiceClient, name: str) -> aiplatform_v1.CustomJob:
    return client.get_custom_job(name=name, retry=None)


# --- preemption --------------------------------------------------------------------------------


def test_preempting_a_running_spot_job_fails_it_and_frees_capacity(control, jobs):
    control.set_capacity(LOCATION, A100, 2)
    spot = create(jobs, "SPOT")
    waiting = create(jobs, "SPOT")
    control.advance(10)
    assert get(jobs, waiting).state == State.JOB_STATE_PENDING

    answer = control.preempt(spot)

    job = get(jobs, spot)
    assert answer["state"] == "JOB_STATE_FAILED"
    assert job.state == State.JOB_STATE_FAILED
    assert job.error.code == 14
    assert job.error.message == (
        "The replica workerpool0-0 was preempted by Compute Engine (Spot VM capacity was "
        "reclaimed). Resubmit the job to continue."
    )
    assert job.end_time == job.update_time
    assert get(jobs, waiting).state == State.JOB_STATE_RUNNING  # the freed GPUs went to it


def test_only_running_jobs_can_be_preempted(control, jobs):
    control.set_capacity(LOCATION, A100, 0)
    queued = create(jobs, "SPOT")
    with pytest.raises(SimulatorControlError) as refused:
        control.preempt(queued)
    assert refused.value.status == 409


def preemption_offsets(control, jobs) -> tuple[dict[str, float], str]:
    control.set_preemption_rate(2.0, seed=42)
    spot = [create(jobs, "SPOT", run_seconds=36000, display_name=f"spot-{i}") for i in range(4)]
    flex = create(jobs, "FLEX_START", run_seconds=36000, display_name="flex")
    control.advance(10 * 3600 + 10)
    offsets = {}
    for name in spot:
        job = get(jobs, name)
        assert job.state == State.JOB_STATE_FAILED
        assert job.error.code == 14
        assert "preempted" in job.error.message
        offsets[job.display_name] = (job.end_time - job.start_time).total_seconds()
    return offsets, flex


def test_preemption_rate_preempts_spot_jobs_reproducibly(control, jobs):
    # At 2 per hour over 10 hours, a SPOT job survives with probability e^-20: never.
    offsets, flex = preemption_offsets(control, jobs)
    flex_job = get(jobs, flex)
    assert flex_job.state == State.JOB_STATE_SUCCEEDED  # only SPOT jobs are preempted at random
    assert flex_job.end_time - flex_job.start_time == timedelta(hours=10)
    assert len(set(offsets.values())) == 4

    control.reset()
    again, _ = preemption_offsets(control, jobs)
    assert again == offsets


# --- injected failures -------------------------------------------------------------------------


def test_failure_classes_have_vertex_codes_and_messages(control, jobs):
    control.set_capacity(LOCATION, A100, 6)
    running = [create(jobs, "SPOT") for _ in range(3)]
    control.advance(10)
    waiting = create(jobs, "FLEX_START")
    control.advance(10)
    assert get(jobs, waiting).state == State.JOB_STATE_PENDING

    control.fail(waiting, "stockout")
    control.fail(running[0], "user")
    control.fail(running[1], "infrastructure")
    control.fail(running[2], "preempted")

    stockout = get(jobs, waiting).error
    assert (stockout.code, stockout.message) == (
        8,
        "The zone 'us-central1-a' does not have enough resources available to fulfill the "
        "request. Try a different zone, or try again later. (ZONE_RESOURCE_POOL_EXHAUSTED)",
    )
    user = get(jobs, running[0]).error
    assert user.code == 3
    assert user.message.startswith(
        "The replica workerpool0-0 exited with a non-zero status of 1. To find out more about "
        "why your job exited please check the logs: https://console.cloud.google.com/logs/viewer?"
    )
    infra = get(jobs, running[1]).error
    assert (infra.code, infra.message) == (13, "Internal error occurred for the current attempt.")
    preempted = get(jobs, running[2]).error
    assert preempted.code == 14
    assert "preempted" in preempted.message
    assert all(get(jobs, n).state == State.JOB_STATE_FAILED for n in [waiting, *running])
    assert control.capacity()["pools"][0]["inUse"] == 0


def test_fail_rejects_unknown_class_and_ended_jobs(control, jobs):
    name = create(jobs, "FLEX_START", run_seconds=10)
    with pytest.raises(SimulatorControlError) as unknown:
        control.fail(name, "cosmic-rays")
    assert unknown.value.status == 400
    control.advance(100)
    with pytest.raises(SimulatorControlError) as ended:
        control.fail(name, "user")
    assert ended.value.status == 409
