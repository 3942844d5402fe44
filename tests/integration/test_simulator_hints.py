"""State hints: each job state change is published as Cloud Logging LogEntry JSON (what a log
sink for ``resource.type="ml_job"`` delivers) to a Pub/Sub topic on the Pub/Sub emulator."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.cloud import aiplatform_v1, pubsub_v1
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

from flexjobs_local import procs
from flexjobs_local.simulator import SimulatorControl, SimulatorHandle, serve

pytestmark = pytest.mark.integration

PROJECT = "sim-test"
PARENT = f"projects/{PROJECT}/locations/us-central1"
TOPIC = f"projects/{PROJECT}/topics/vertex-hints"


def emulator_command() -> list[str]:
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        pytest.skip("the Pub/Sub emulator needs the Google Cloud CLI")
    script = (
        Path(gcloud).resolve().parent.parent / "platform/pubsub-emulator/bin/cloud-pubsub-emulator"
    )
    if not script.exists():
        pytest.skip("the gcloud pubsub-emulator component is not installed")
    return [str(script)]


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the Pub/Sub emulator exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("the Pub/Sub emulator did not start listening")


@pytest.fixture(scope="module")
def pubsub_host() -> Iterator[str]:
    port = procs.free_port()
    proc = subprocess.Popen(
        [*emulator_command(), "--host=127.0.0.1", f"--port={port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, so the JVM it starts is stopped too
    )
    try:
        wait_for_port(port, proc)
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def subscriber(pubsub_host: str) -> Iterator[pubsub_v1.SubscriberClient]:
    publisher = pubsub_v1.PublisherClient(
        transport=PublisherGrpcTransport(channel=grpc.insecure_channel(pubsub_host))
    )
    publisher.create_topic(name=TOPIC)
    client = pubsub_v1.SubscriberClient(
        transport=SubscriberGrpcTransport(channel=grpc.insecure_channel(pubsub_host))
    )
    yield client
    client.close()


@pytest.fixture(scope="module")
def sim(pubsub_host: str, subscriber: pubsub_v1.SubscriberClient) -> Iterator[SimulatorHandle]:
    handle = serve(
        time_factor=0,
        seed=9,
        project=PROJECT,
        events_topic="vertex-hints",
        pubsub_host=pubsub_host,
    )
    yield handle
    handle.stop()


@pytest.fixture
def control(sim: SimulatorHandle) -> SimulatorControl:
    ctl = SimulatorControl(sim.control_url)
    ctl.reset()
    ctl.set_hints(True, copies=3)
    assert ctl.flush()
    return ctl


@pytest.fixture
def subscription(control: SimulatorControl, subscriber: pubsub_v1.SubscriberClient) -> str:
    # A fresh subscription per test sees only what this test publishes.
    name = f"projects/{PROJECT}/subscriptions/hints-{uuid.uuid4().hex[:8]}"
    subscriber.create_subscription(name=name, topic=TOPIC)
    return name


def pull(
    subscriber: pubsub_v1.SubscriberClient, subscription: str, expected: int, timeout: float = 60
) -> list[Any]:
    """Pull until ``expected`` messages arrived, then once more briefly to catch any extras."""
    received: list[Any] = []
    deadline = time.monotonic() + timeout
    confirming = False
    while time.monotonic() < deadline:
        confirming = len(received) >= expected
        response = subscriber.pull(
            subscription=subscription, max_messages=100, timeout=2 if confirming else 10
        )
        if response.received_messages:
            subscriber.acknowledge(
                subscription=subscription,
                ack_ids=[m.ack_id for m in response.received_messages],
            )
            received.extend(m.message for m in response.received_messages)
        elif confirming:
            break
    return received


def create(client: aiplatform_v1.JobServiceClient, run_seconds: int = 50) -> str:
    job = aiplatform_v1.CustomJob(
        display_name="hinted",
        job_spec={
            "worker_pool_specs": [
                {
                    "machine_spec": {"machine_type": "n1-standard-4"},
                    "replica_count": 1,
                    "container_spec": {
                        "image_uri": "trainer",
                        "env": [{"name": "FLEXJOBS_SIM_RUN_SECONDS", "value": str(run_seconds)}],
                    },
                }
            ],
            "scheduling": {"strategy": "SPOT"},
        },
    )
    return client.create_custom_job(parent=PARENT, custom_job=job, retry=None).name


def test_every_state_change_is_published_as_ml_job_log_entries(
    control, subscription, subscriber, jobs
):
    name = create(jobs)
    job_id = name.rsplit("/", 1)[1]
    control.advance(100)
    assert control.flush()

    messages = pull(subscriber, subscription, expected=12)

    entries = [json.loads(m.data) for m in messages]
    texts = [e["textPayload"] for e in entries]
    assert sorted(set(texts)) == sorted(
        {
            "Job is queued.",
            "Waiting for job to be provisioned.",
            "Job is running.",
            "Job completed successfully.",
        }
    )
    assert all(texts.count(text) == 3 for text in set(texts))
    assert len({e["insertId"] for e in entries}) == 12
    entry = entries[0]
    assert entry["logName"] == f"projects/{PROJECT}/logs/ml.googleapis.com%2F{job_id}"
    assert entry["resource"] == {
        "type": "ml_job",
        "labels": {"job_id": job_id, "project_id": PROJECT, "task_name": "service"},
    }
    assert entry["severity"] == "INFO"
    assert entry["labels"] == {"ml.googleapis.com/endpoint": ""}
    assert messages[0].attributes["logging.googleapis.com/timestamp"] == entry["timestamp"]
    job = jobs.get_custom_job(name=name, retry=None)
    running = next(e for e in entries if e["textPayload"] == "Job is running.")
    assert running["timestamp"] == job.start_time.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_failure_hint_carries_the_error_and_hints_can_be_toggled(
    control, subscription, subscriber, jobs
):
    control.set_hints(True, copies=1)
    name = create(jobs, run_seconds=1000)
    control.advance(10)
    control.preempt(name)
    assert control.flush()
    entries = [json.loads(m.data) for m in pull(subscriber, subscription, expected=4)]
    failed = [e for e in entries if e["severity"] == "ERROR"]
    assert len(failed) == 1
    assert failed[0]["textPayload"].startswith(
        "Job failed. The replica workerpool0-0 was preempted"
    )

    control.set_hints(False)
    create(jobs)
    control.advance(100)
    assert control.flush()
    assert pull(subscriber, subscription, expected=0, timeout=5) == []
    status = control.side_effects()["hints"]
    assert status["enabled"] is False
    assert status["failed"] == 0
    assert status["topic"] == TOPIC


def test_hints_can_be_dropped_repeated_and_delayed_reproducibly(
    control, subscription, subscriber, jobs
):
    control.set_hints(True, copies=1, drop=1.0, seed=3)
    create(jobs)
    control.advance(100)
    assert control.flush()
    assert pull(subscriber, subscription, expected=0, timeout=5) == []
    assert control.side_effects()["hints"]["chaos"]["dropped"] == 4

    control.set_hints(True, drop=0.0, repeat=1.0)
    create(jobs)
    control.advance(100)
    assert control.flush()
    texts = [json.loads(m.data)["textPayload"] for m in pull(subscriber, subscription, 8)]
    assert len(texts) == 8 and all(texts.count(t) == 2 for t in texts)

    # Delayed: the QUEUED hint is held back, so the ones after it overtake it.
    # Held 10 s of wall time: long enough that a loaded machine still checks it while held.
    control.set_hints(True, repeat=0.0, delay=1.0, delay_seconds=10.0, seed=5)
    name = create(jobs)
    control.set_hints(True, delay=0.0)
    control.advance(100)
    assert control.side_effects()["hints"]["held"] == 1
    assert control.flush()
    entries = [json.loads(m.data) for m in pull(subscriber, subscription, 4)]
    assert [e["textPayload"] for e in entries][-1] == "Job is queued."
    assert {e["resource"]["labels"]["job_id"] for e in entries} == {name.rsplit("/", 1)[1]}
    chaos = control.side_effects()["hints"]["chaos"]
    assert (chaos["dropped"], chaos["repeated"], chaos["delayed"]) == (4, 4, 1)

    control.reset()
    assert control.side_effects()["hints"]["chaos"]["dropped"] == 0
