"""The Vertex AI simulator's JobService (CustomJobs), through the unmodified GAPIC client.

The simulator runs in-process on free ports with a frozen clock (time factor 0); tests move
simulated time with ``advance`` so every assertion about timestamps is exact, and only the
time-factor test lets the clock run.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import aiplatform_v1

from flexjobs_local.simulator import SimulatorControl, SimulatorControlError, SimulatorHandle, serve
from tests.integration.simulator_support import A100, LOCATION, PARENT, PROJECT

pytestmark = pytest.mark.integration

MACHINE = "a2-highgpu-2g"
ROOT = Path(__file__).resolve().parents[2]

State = aiplatform_v1.JobState


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    handle = serve(time_factor=0, seed=7)
    yield handle
    handle.stop()


def make_job(
    display_name: str = "job",
    *,
    pools: tuple[tuple[int, int], ...] = ((1, 2),),
    strategy: str = "FLEX_START",
    max_wait: str | None = None,
    labels: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
    args: list[str] | None = None,
    accelerator: str | None = A100,
) -> aiplatform_v1.CustomJob:
    """A CustomJob with one worker pool per (replicas, GPUs per replica) pair."""
    worker_pools = []
    for replicas, gpus in pools:
        machine: dict[str, Any] = {"machine_type": MACHINE if accelerator else "n1-standard-4"}
        if accelerator:
            machine |= {"accelerator_type": accelerator, "accelerator_count": gpus}
        worker_pools.append(
            {
                "machine_spec": machine,
                "replica_count": replicas,
                "container_spec": {
                    "image_uri": "us-docker.pkg.dev/p/r/trainer:1",
                    "command": command or [],
                    "args": args or [],
                    "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                },
            }
        )
    scheduling: dict[str, Any] = {"strategy": strategy}
    if max_wait is not None:
        scheduling["max_wait_duration"] = max_wait
    return aiplatform_v1.CustomJob(
        display_name=display_name,
        labels=labels or {},
        job_spec={"worker_pool_specs": worker_pools, "scheduling": scheduling},
    )


def create(client: aiplatform_v1.JobServiceClient, job: aiplatform_v1.CustomJob) -> str:
    return client.create_custom_job(parent=PARENT, custom_job=job, retry=None).name


def state_of(client: aiplatform_v1.JobServiceClient, name: str) -> Any:
    return client.get_custom_job(name=name, retry=None).state


def wait_until(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


def in_use(control: SimulatorControl, accelerator: str = A100) -> int:
    for pool in control.capacity()["pools"]:
        if pool["location"] == LOCATION and pool["acceleratorType"] == accelerator:
            return int(pool["inUse"])
    return 0


# --- create / get ------------------------------------------------------------------------------


def test_create_returns_queued_job_with_vertex_style_name(control, jobs):
    job = jobs.create_custom_job(
        parent=PARENT,
        custom_job=make_job("train-1", labels={"flexjobs-request": "r1"}),
        retry=None,
    )

    assert re.fullmatch(rf"{PARENT}/customJobs/\d{{19}}", job.name)
    assert job.state == State.JOB_STATE_QUEUED
    assert job.display_name == "train-1"
    assert dict(job.labels) == {"flexjobs-request": "r1"}
    assert job.job_spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.FLEX_START
    assert job.create_time.timestamp() == pytest.approx(control.clock()["simNowEpoch"])
    fetched = jobs.get_custom_job(name=job.name, retry=None)
    assert fetched.name == job.name
    assert fetched.job_spec == job.job_spec


def test_create_rejects_empty_worker_pools_and_bad_parent(control, jobs):
    empty = aiplatform_v1.CustomJob(display_name="x", job_spec={"worker_pool_specs": []})
    with pytest.raises(exceptions.InvalidArgument, match="worker_pool_specs"):
        jobs.create_custom_job(parent=PARENT, custom_job=empty, retry=None)
    with pytest.raises(exceptions.InvalidArgument, match="parent"):
        jobs.create_custom_job(parent="projects/p", custom_job=make_job(), retry=None)

    assert [c["code"] for c in control.calls("CreateCustomJob")] == [
        "INVALID_ARGUMENT",
        "INVALID_ARGUMENT",
    ]
    assert control.jobs() == []


def test_get_unknown_job_is_not_found(control, jobs):
    with pytest.raises(exceptions.NotFound):
        jobs.get_custom_job(name=f"{PARENT}/customJobs/123", retry=None)


# --- lifecycle ---------------------------------------------------------------------------------


def test_job_is_queued_then_runs_for_its_run_time_then_succeeds(control, jobs):
    name = create(jobs, make_job(command=["sleep"], args=["100"]))

    control.advance(4)
    assert state_of(jobs, name) == State.JOB_STATE_QUEUED
    control.advance(1)
    assert state_of(jobs, name) == State.JOB_STATE_RUNNING
    assert in_use(control) == 2
    control.advance(99)
    assert state_of(jobs, name) == State.JOB_STATE_RUNNING
    control.advance(1)

    job = jobs.get_custom_job(name=name, retry=None)
    assert job.state == State.JOB_STATE_SUCCEEDED
    assert job.start_time - job.create_time == timedelta(seconds=5)
    assert job.end_time - job.start_time == timedelta(seconds=100)
    assert job.update_time == job.end_time
    assert in_use(control) == 0


def test_run_time_comes_from_env_then_sleep_then_default(control, jobs):
    from_env = create(
        jobs, make_job(env={"FLEXJOBS_SIM_RUN_SECONDS": "42"}, command=["sleep"], args=["100"])
    )
    from_sleep = create(jobs, make_job(command=["sleep"], args=["100"]))
    default = create(jobs, make_job(command=["python", "train.py"]))

    control.advance(1000)

    durations = {}
    for name in (from_env, from_sleep, default):
        job = jobs.get_custom_job(name=name, retry=None)
        assert job.state == State.JOB_STATE_SUCCEEDED
        durations[name] = (job.end_time - job.start_time).total_seconds()
    assert durations == {from_env: 42, from_sleep: 100, default: 300}


def test_cancel_frees_capacity_and_ends_cancelled(control, jobs):
    running = create(jobs, make_job())
    control.advance(10)
    assert in_use(control) == 2

    jobs.cancel_custom_job(name=running, retry=None)

    assert state_of(jobs, running) == State.JOB_STATE_CANCELLING
    assert in_use(control) == 0
    control.advance(5)
    job = jobs.get_custom_job(name=running, retry=None)
    assert job.state == State.JOB_STATE_CANCELLED
    assert job.end_time > job.start_time
    with pytest.raises(exceptions.FailedPrecondition, match="JOB_STATE_CANCELLED"):
        jobs.cancel_custom_job(name=running, retry=None)
    with pytest.raises(exceptions.NotFound):
        jobs.cancel_custom_job(name=f"{PARENT}/customJobs/42", retry=None)


def test_cancel_of_queued_job(control, jobs):
    queued = create(jobs, make_job())
    jobs.cancel_custom_job(name=queued, retry=None)
    control.advance(10)
    job = jobs.get_custom_job(name=queued, retry=None)
    assert job.state == State.JOB_STATE_CANCELLED
    assert "start_time" not in job


# --- gang scheduling and backfill --------------------------------------------------------------


def test_gang_job_waits_for_all_replicas_while_smaller_job_backfills(control, jobs):
    control.set_capacity(LOCATION, A100, 4)
    # 1 x 2 GPUs + 2 x 2 GPUs: 6 GPUs that must all be granted at once.
    gang = create(jobs, make_job("gang", pools=((1, 2), (2, 2))))
    control.advance(10)
    assert state_of(jobs, gang) == State.JOB_STATE_PENDING
    assert in_use(control) == 0  # nothing is held while the gang waits

    small = create(jobs, make_job("small", pools=((1, 2),)))
    control.advance(10)
    assert state_of(jobs, small) == State.JOB_STATE_RUNNING
    assert state_of(jobs, gang) == State.JOB_STATE_PENDING
    assert in_use(control) == 2

    control.set_capacity(LOCATION, A100, 7)  # 5 free: still one replica short
    control.advance(1)
    assert state_of(jobs, gang) == State.JOB_STATE_PENDING

    raised_at = control.set_capacity(LOCATION, A100, 8)
    assert raised_at["pools"][0]["inUse"] == 8
    job = jobs.get_custom_job(name=gang, retry=None)
    assert job.state == State.JOB_STATE_RUNNING
    assert job.start_time.timestamp() == pytest.approx(control.clock()["simNowEpoch"])


def test_gang_job_starts_the_instant_another_job_frees_capacity(control, jobs):
    control.set_capacity(LOCATION, A100, 6)
    first = create(jobs, make_job("first", pools=((2, 2),), command=["sleep"], args=["100"]))
    gang = create(jobs, make_job("gang", pools=((1, 2), (2, 2))))
    control.advance(10)
    assert state_of(jobs, first) == State.JOB_STATE_RUNNING
    assert state_of(jobs, gang) == State.JOB_STATE_PENDING

    control.advance(500)

    first_job = jobs.get_custom_job(name=first, retry=None)
    gang_job = jobs.get_custom_job(name=gang, retry=None)
    assert first_job.state == State.JOB_STATE_SUCCEEDED
    assert gang_job.state == State.JOB_STATE_SUCCEEDED
    assert gang_job.start_time == first_job.end_time


def test_cpu_only_job_always_fits(control, jobs):
    control.set_default_capacity(0)
    name = create(jobs, make_job(accelerator=None))
    control.advance(10)
    assert state_of(jobs, name) == State.JOB_STATE_RUNNING


# --- FLEX_START max wait -----------------------------------------------------------------------


def test_flex_start_job_fails_when_max_wait_passes(control, jobs):
    control.set_capacity(LOCATION, A100, 0)
    name = create(jobs, make_job(pools=((2, 2),), max_wait="1800s"))

    control.advance(1799)
    assert state_of(jobs, name) == State.JOB_STATE_PENDING
    control.advance(2)

    job = jobs.get_custom_job(name=name, retry=None)
    assert job.state == State.JOB_STATE_FAILED
    assert job.error.code == 4
    assert job.error.message == (
        "Job did not start: the requested resources (2 x a2-highgpu-2g with 2 NVIDIA_TESLA_A100 "
        "each) were not available within the max wait duration (maxWaitDuration=1800s) of the "
        "FLEX_START scheduling strategy."
    )
    assert job.end_time - job.create_time == timedelta(seconds=1800)


def test_unset_max_wait_means_one_day(control, jobs):
    control.set_capacity(LOCATION, A100, 0)
    name = create(jobs, make_job())
    control.advance(86399)
    assert state_of(jobs, name) == State.JOB_STATE_PENDING
    control.advance(2)
    job = jobs.get_custom_job(name=name, retry=None)
    assert job.state == State.JOB_STATE_FAILED
    assert "maxWaitDuration=86400s" in job.error.message


def test_zero_max_wait_and_non_flex_jobs_wait_forever(control, jobs):
    control.set_capacity(LOCATION, A100, 0)
    forever = create(jobs, make_job(max_wait="0s"))
    standard = create(jobs, make_job(strategy="STANDARD", max_wait="60s"))
    spot = create(jobs, make_job(strategy="SPOT"))

    control.advance(10 * 86400)

    for name in (forever, standard, spot):
        assert state_of(jobs, name) == State.JOB_STATE_PENDING
    control.set_capacity(LOCATION, A100, 6)
    for name in (forever, standard, spot):
        assert state_of(jobs, name) == State.JOB_STATE_RUNNING


# --- list: filters and paging ------------------------------------------------------------------


def list_names(client: aiplatform_v1.JobServiceClient, filter_text: str, parent: str = PARENT):
    pager = client.list_custom_jobs(request={"parent": parent, "filter": filter_text}, retry=None)
    return [job.display_name for job in pager]


def test_list_filters_by_labels_state_and_display_name(control, jobs):
    control.set_capacity(LOCATION, A100, 2)
    for index, team in enumerate(["a", "a", "b", "a", "b"], start=1):
        cpu = index >= 4
        create(
            jobs,
            make_job(f"job-{index}", labels={"team": team}, accelerator=None if cpu else A100),
        )
    control.advance(10)  # job-1, job-4, job-5 run; job-2 and job-3 wait for GPUs

    assert list_names(jobs, "") == ["job-1", "job-2", "job-3", "job-4", "job-5"]
    assert list_names(jobs, 'labels.team="a"') == ["job-1", "job-2", "job-4"]
    assert list_names(jobs, "labels.team=a AND state=JOB_STATE_RUNNING") == ["job-1", "job-4"]
    assert list_names(jobs, "state!=JOB_STATE_RUNNING") == ["job-2", "job-3"]
    assert list_names(jobs, 'labels.team="b" OR state=JOB_STATE_PENDING') == [
        "job-2",
        "job-3",
        "job-5",
    ]
    assert list_names(
        jobs, '(labels.team="a" OR labels.team="b") AND state="JOB_STATE_PENDING"'
    ) == [
        "job-2",
        "job-3",
    ]
    assert list_names(jobs, 'display_name="job-3"') == ["job-3"]
    assert list_names(jobs, "labels.team:*") == ["job-1", "job-2", "job-3", "job-4", "job-5"]
    assert list_names(jobs, "labels.missing:*") == []
    assert list_names(jobs, "", parent=f"projects/{PROJECT}/locations/europe-west4") == []
    assert list_names(jobs, "", parent=f"projects/other/locations/{LOCATION}") == []


@pytest.mark.parametrize(
    "bad_filter",
    [
        'labels.team~"a"',
        "state=JOB_STATE_BOGUS",
        'foo="x"',
        "labels.team=",
        "(state=JOB_STATE_RUNNING",
    ],
)
def test_list_rejects_unsupported_filters(control, jobs, bad_filter):
    with pytest.raises(exceptions.InvalidArgument):
        list_names(jobs, bad_filter)


def test_list_pages_in_creation_order(control, jobs):
    names = [create(jobs, make_job(f"job-{i}")) for i in range(5)]

    pages = []
    token = ""
    while True:
        response = jobs.list_custom_jobs(
            request={"parent": PARENT, "page_size": 2, "page_token": token}, retry=None
        )
        page = [job.name for job in response.custom_jobs]
        pages.append(page)
        token = response.next_page_token
        if not token:
            break
    assert [len(page) for page in pages] == [2, 2, 1]
    assert [name for page in pages for name in page] == names

    pager = jobs.list_custom_jobs(request={"parent": PARENT, "page_size": 2}, retry=None)
    assert [job.name for job in pager] == names
    with pytest.raises(exceptions.InvalidArgument):
        jobs.list_custom_jobs(request={"parent": PARENT, "page_token": "garbage!"}, retry=None)


# --- time factor -------------------------------------------------------------------------------


def test_time_factor_scales_the_simulated_clock(control, jobs):
    control.set_time_factor(1000)
    # The server reads its clock somewhere inside each request, so the wall time between the
    # two readings is bracketed by [t2 - t1, t3 - t0] whatever the request latency.
    t0 = time.monotonic()
    before = control.clock()["simNowEpoch"]
    t1 = time.monotonic()
    time.sleep(0.5)
    t2 = time.monotonic()
    after = control.clock()["simNowEpoch"]
    t3 = time.monotonic()
    assert 300 * (t2 - t1) < after - before < 3000 * (t3 - t0)

    # A 100 s job finishes in about 0.1 wall seconds, and its timestamps are simulated ones.
    name = create(jobs, make_job(command=["sleep"], args=["100"]))
    wait_until(lambda: state_of(jobs, name) == State.JOB_STATE_SUCCEEDED)
    job = jobs.get_custom_job(name=name, retry=None)
    assert job.end_time - job.start_time == timedelta(seconds=100)

    control.set_time_factor(0)
    frozen = control.clock()
    time.sleep(0.1)
    assert control.clock()["simNowEpoch"] == frozen["simNowEpoch"]
    assert frozen["timeFactor"] == 0


# --- fault injection and the call log ----------------------------------------------------------


def test_unavailable_fault_fails_exactly_the_next_two_calls(control, jobs):
    name = create(jobs, make_job())
    control.clear_calls()
    control.inject_faults("UNAVAILABLE", count=2)

    for _ in range(2):
        with pytest.raises(exceptions.ServiceUnavailable):
            jobs.get_custom_job(name=name, retry=None)
    assert jobs.get_custom_job(name=name, retry=None).name == name

    calls = control.calls()
    assert [(c["method"], c["code"]) for c in calls] == [
        ("GetCustomJob", "UNAVAILABLE"),
        ("GetCustomJob", "UNAVAILABLE"),
        ("GetCustomJob", "OK"),
    ]
    assert calls[0]["request"] == {"name": name}
    assert control.faults() == []


def test_faults_can_target_methods_and_lose_replies(control, jobs):
    control.inject_faults("RESOURCE_EXHAUSTED", count=1, methods=["CreateCustomJob"])
    jobs.list_custom_jobs(request={"parent": PARENT}, retry=None)  # not targeted
    with pytest.raises(exceptions.ResourceExhausted):
        create(jobs, make_job("refused"))
    assert control.jobs() == []

    # "after": the job is created, but the caller sees an error (a lost reply).
    control.inject_faults("DEADLINE_EXCEEDED", count=1, methods=["CreateCustomJob"], when="after")
    with pytest.raises(exceptions.DeadlineExceeded):
        create(jobs, make_job("created-anyway", labels={"flexjobs-request": "r9"}))
    assert [job["displayName"] for job in control.jobs()] == ["created-anyway"]
    # The log says which failed call took effect all the same: its code alone cannot.
    assert [(c["code"], c["tookEffect"]) for c in control.calls("CreateCustomJob")] == [
        ("RESOURCE_EXHAUSTED", False),
        ("DEADLINE_EXCEEDED", True),
    ]


def test_call_log_keeps_requests_as_json(control, jobs):
    create(jobs, make_job("logged", labels={"flexjobs-request": "r1"}, max_wait="1800s"))

    (call,) = control.calls("CreateCustomJob")
    request = call["request"]
    assert request["parent"] == PARENT
    assert request["customJob"]["labels"] == {"flexjobs-request": "r1"}
    assert request["customJob"]["jobSpec"]["scheduling"] == {
        "strategy": "FLEX_START",
        "maxWaitDuration": "1800s",
    }
    assert call["code"] == "OK"
    assert control.clear_calls() == 1
    assert control.calls() == []


def test_control_surface_rejects_bad_input(control):
    with pytest.raises(SimulatorControlError) as bad_type:
        control.set_capacity(LOCATION, "NVIDIA_TESLA_Z999", 4)
    assert bad_type.value.status == 400
    with pytest.raises(SimulatorControlError) as bad_code:
        control.inject_faults("NOT_A_CODE")
    assert bad_code.value.status == 400
    with pytest.raises(SimulatorControlError) as missing:
        control.preempt(f"{PARENT}/customJobs/1")
    assert missing.value.status == 404


# --- the process entry point -------------------------------------------------------------------


def test_module_entry_point_prints_ready_line_and_stops_on_sigterm():
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flexjobs_local.simulator",
            "--grpc-port",
            "0",
            "--control-port",
            "0",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        match = re.fullmatch(
            r"SIMULATOR READY grpc=127\.0\.0\.1:(\d+) control=(http://127\.0\.0\.1:\d+)", line
        )
        assert match, line
        assert SimulatorControl(match.group(2)).healthz()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_late_fault_answers_at_once_and_takes_effect_later(control, jobs):
    control.inject_faults(
        "DEADLINE_EXCEEDED", count=1, methods=["CreateCustomJob"], when="late", late_seconds=1
    )
    with pytest.raises(exceptions.DeadlineExceeded):
        create(jobs, make_job("late", labels={"flexjobs-request": "r-late"}))
    assert control.jobs() == []  # not yet

    deadline = time.monotonic() + 10
    while not control.jobs() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [job["displayName"] for job in control.jobs()] == ["late"]


def test_a_slow_create_takes_effect_after_its_caller_gave_up(control, jobs):
    control.inject_faults("OK", count=1, methods=["CreateCustomJob"], delay_seconds=1.5)
    with pytest.raises(exceptions.DeadlineExceeded):
        jobs.create_custom_job(parent=PARENT, custom_job=make_job("slow"), retry=None, timeout=0.3)
    assert control.jobs() == []  # still in flight inside "Vertex"

    wait_until(lambda: bool(control.jobs()), timeout=10)
    assert [job["displayName"] for job in control.jobs()] == ["slow"]
    (call,) = control.calls("CreateCustomJob")
    assert call["code"] == "OK"
    assert "caller had gone" in call["message"]
    assert control.faults() == []


def test_a_held_answer_is_logged_when_the_call_takes_effect(control, jobs):
    control.inject_faults(
        "OK", count=1, methods=["CreateCustomJob"], when="after", delay_seconds=1.0
    )
    started = time.monotonic()
    name = create(jobs, make_job("held"))
    assert time.monotonic() - started >= 1.0
    (call,) = control.calls("CreateCustomJob")
    assert call["code"] == "OK" and call["message"] == ""
    assert [job["name"] for job in control.jobs()] == [name]


def test_an_ok_fault_must_be_slow(control):
    for bad in ({}, {"delay_seconds": 1, "when": "late"}, {"delay_seconds": -1}):
        with pytest.raises(SimulatorControlError) as refused:
            control.inject_faults("OK", **bad)
        assert refused.value.status == 400
