"""Simulated training checkpoints in Cloud Storage (the in-process storage emulator).

A RUNNING job with a gs:// base output directory writes ``checkpoints/step-NNNNNNNN/state.bin``
then ``commit_success.txt``; a preempted one may leave a half-written checkpoint; a job started
with FLEXJOBS_RESUME_FROM resumes from that step.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from gcp_storage_emulator.server import create_server
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1, storage

from flexjobs_local import procs
from flexjobs_local.simulator import SimulatorHandle, serve

pytestmark = pytest.mark.integration

PROJECT = "sim-test"
PARENT = f"projects/{PROJECT}/locations/us-central1"
BUCKET = "sim-checkpoints"


@pytest.fixture(scope="module")
def storage_url() -> Iterator[str]:
    port = procs.free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(scope="module")
def gcs(storage_url: str) -> storage.Client:
    client = storage.Client(
        project=PROJECT,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": storage_url},
    )
    client.create_bucket(BUCKET)
    return client


@pytest.fixture(scope="module")
def sim(storage_url: str, gcs: storage.Client) -> Iterator[SimulatorHandle]:
    handle = serve(time_factor=0, seed=5, project=PROJECT, storage=True, storage_host=storage_url)
    yield handle
    handle.stop()


def create(client: aiplatform_v1.JobServiceClient, run: str, resume_from: str | None = None) -> str:
    env = [{"name": "FLEXJOBS_SIM_RUN_SECONDS", "value": "100"}]
    if resume_from:
        env.append({"name": "FLEXJOBS_RESUME_FROM", "value": resume_from})
    job = aiplatform_v1.CustomJob(
        display_name=run,
        job_spec={
            "worker_pool_specs": [
                {
                    "machine_spec": {"machine_type": "n1-standard-4"},
                    "replica_count": 1,
                    "container_spec": {"image_uri": "trainer", "env": env},
                }
            ],
            "scheduling": {"strategy": "SPOT"},
            "base_output_directory": {"output_uri_prefix": f"gs://{BUCKET}/runs/{run}"},
        },
    )
    return client.create_custom_job(parent=PARENT, custom_job=job, retry=None).name


def objects(gcs: storage.Client, run: str) -> list[str]:
    prefix = f"runs/{run}/checkpoints/"
    return sorted(blob.name[len(prefix) :] for blob in gcs.list_blobs(BUCKET, prefix=prefix))


def committed(step: int) -> list[str]:
    return [f"step-{step:08d}/commit_success.txt", f"step-{step:08d}/state.bin"]


def test_running_job_writes_committed_checkpoints_every_tenth_of_its_run(control, jobs, gcs):
    name = create(jobs, "steady")
    control.advance(5 + 35)  # queued for 5 s, then 35 s of training

    assert control.flush()
    assert objects(gcs, "steady") == committed(10) + committed(20) + committed(30)
    sim_view = control.job(name)["_sim"]
    assert sim_view["checkpointSteps"] == [10, 20, 30]
    assert sim_view["progressSeconds"] == 35
    assert sim_view["checkpointEverySeconds"] == 10
    assert len(sim_view["checkpointObjectsWritten"]) == 6

    control.advance(100)
    assert control.flush()
    assert objects(gcs, "steady") == [obj for step in range(10, 101, 10) for obj in committed(step)]
    assert control.side_effects()["storage"]["failed"] == 0


def test_preempted_jobs_sometimes_leave_a_half_written_checkpoint(control, jobs, gcs):
    runs = [f"preempt-{i}" for i in range(8)]
    names = [create(jobs, run) for run in runs]
    control.advance(5 + 37)
    for name in names:
        control.preempt(name)
    assert control.flush()

    half_written = 0
    for run, name in zip(runs, names, strict=True):
        view = control.job(name)["_sim"]
        expected = committed(10) + committed(20) + committed(30)
        if view["halfWrittenStep"] is not None:
            half_written += 1
            assert view["halfWrittenStep"] == 37
            expected += ["step-00000037/state.bin"]  # no commit_success.txt
        assert objects(gcs, run) == expected
    assert 0 < half_written < len(runs)  # seeded coin flips: some of each


def test_job_resumes_from_the_checkpoint_it_is_given(control, jobs, gcs):
    resume = f"gs://{BUCKET}/runs/resumed/checkpoints/step-00000030"
    name = create(jobs, "resumed", resume_from=resume)
    control.advance(5 + 20)

    view = control.job(name)["_sim"]
    assert view["resumeFrom"] == resume
    assert view["resumedStep"] == 30
    assert view["progressSeconds"] == 50
    control.advance(100)
    job = jobs.get_custom_job(name=name, retry=None)
    assert job.state == aiplatform_v1.JobState.JOB_STATE_SUCCEEDED
    assert job.end_time - job.start_time == timedelta(seconds=70)  # 100 s run minus 30 resumed
    assert control.flush()
    assert objects(gcs, "resumed") == [
        obj for step in range(40, 101, 10) for obj in committed(step)
    ]
