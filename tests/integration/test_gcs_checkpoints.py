"""GcsCheckpointStore against a real storage emulator started by this module.

The emulator runs as a subprocess in its own process group on a free port and is stopped at
teardown. ``STORAGE_EMULATOR_HOST`` is never left set: clients get the endpoint explicitly,
and the one test that checks the environment variable is honoured sets it with monkeypatch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from flexjobs_local import procs
from shared.adapters.gcs import GcsCheckpointStore
from shared.domain.model.checkpoint import Checkpoint
from shared.kernel.errors import StoreUnavailable

pytestmark = pytest.mark.integration

PROJECT = "flexjobs-test"
STARTUP_SECONDS = 30.0


def _wait_until_answering(proc: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            output = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
            raise RuntimeError(f"storage emulator exited with {proc.returncode}:\n{output}")
        try:
            with urllib.request.urlopen(f"{url}/storage/v1/b?project={PROJECT}", timeout=1):
                return
        except urllib.error.HTTPError:
            return  # any HTTP answer means the server is up
        except OSError:
            time.sleep(0.1)  # not listening yet
    raise RuntimeError(f"storage emulator did not answer at {url} within {STARTUP_SECONDS}s")


@pytest.fixture(scope="module")
def emulator() -> Iterator[str]:
    port = procs.free_port()
    executable = Path(sys.executable).with_name("gcp-storage-emulator")
    proc = subprocess.Popen(
        [str(executable), "start", "--host=127.0.0.1", f"--port={port}", "--in-memory", "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, so teardown stops it and its children
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_answering(proc, url)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()


@pytest.fixture
def client(emulator: str) -> storage.Client:
    return storage.Client(
        project=PROJECT,
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": emulator},
    )


@pytest.fixture
def bucket(client: storage.Client) -> Any:
    # A fresh bucket per test keeps tests independent inside the shared emulator.
    return client.create_bucket(f"ckpt-{uuid.uuid4().hex[:12]}")


def _write(bucket: Any, names: list[str]) -> None:
    for name in names:
        bucket.blob(name).upload_from_string(b"x" * 16)
        # Distinct update times, as real saves are seconds apart.
        time.sleep(0.01)


TORCH_LAYOUT = [
    # complete step 100
    "runs/r1/checkpoints/step-00000100/__0_0.distcp",
    "runs/r1/checkpoints/step-00000100/__1_0.distcp",
    "runs/r1/checkpoints/step-00000100/.metadata",
    # complete step 200
    "runs/r1/checkpoints/step-00000200/__0_0.distcp",
    "runs/r1/checkpoints/step-00000200/__1_0.distcp",
    "runs/r1/checkpoints/step-00000200/.metadata",
    # half-written step 300: preempted before .metadata was written
    "runs/r1/checkpoints/step-00000300/__0_0.distcp",
    "runs/r1/checkpoints/step-00000300/__1_0.distcp",
    # neighbours that must not be picked up
    "runs/r1/checkpoints-old/step-00000900/.metadata",
    "runs/r1/logs/events.out.tfevents",
]


def test_latest_skips_half_written_step(emulator: str, client: storage.Client, bucket: Any) -> None:
    _write(bucket, TORCH_LAYOUT)
    store = GcsCheckpointStore(client=client)
    found = store.latest(f"gs://{bucket.name}/runs/r1/checkpoints/")
    assert found is not None
    assert found.step == 200
    assert found.uri == f"gs://{bucket.name}/runs/r1/checkpoints/step-00000200/"
    # Without the trailing slash, the sibling "checkpoints-old/" must still be excluded.
    again = store.latest(f"gs://{bucket.name}/runs/r1/checkpoints")
    assert again is not None and again.step == 200


def test_orbax_layout(client: storage.Client, bucket: Any) -> None:
    _write(
        bucket,
        [
            "ck/100/default/_METADATA",
            "ck/100/default/commit_success.txt",
            "ck/100/commit_success.txt",
            "ck/200/default/_METADATA",
            "ck/200/default/commit_success.txt",
            "ck/200/commit_success.txt",
            "ck/300/default/_METADATA",
        ],
    )
    found = GcsCheckpointStore(client=client).latest(f"gs://{bucket.name}/ck/")
    assert found is not None and found.uri == f"gs://{bucket.name}/ck/200/"


def test_empty_prefix_returns_none(client: storage.Client, bucket: Any) -> None:
    assert GcsCheckpointStore(client=client).latest(f"gs://{bucket.name}/nothing/here/") is None


def test_missing_bucket_returns_none(client: storage.Client) -> None:
    missing = f"gs://no-such-bucket-{uuid.uuid4().hex[:8]}/ck/"
    assert GcsCheckpointStore(client=client).latest(missing) is None


def test_lazy_client_honours_emulator_env(
    emulator: str, client: storage.Client, bucket: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(bucket, ["ck/step-7/data", "ck/step-7/_SUCCESS", "ck/final.pt"])
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator)
    store = GcsCheckpointStore(project=PROJECT)  # builds its client on first use
    found = store.latest(f"gs://{bucket.name}/ck/")
    assert found is not None and found.step == 7


def test_explicit_emulator_host(emulator: str, client: storage.Client, bucket: Any) -> None:
    _write(bucket, ["ck/model_step40.pt"])
    store = GcsCheckpointStore(project=PROJECT, emulator_host=emulator.removeprefix("http://"))
    found = store.latest(f"gs://{bucket.name}/ck/")
    assert found is not None and found.uri == f"gs://{bucket.name}/ck/model_step40.pt"
    assert found.step == 40


def test_unreachable_storage_raises_store_unavailable() -> None:
    # Nothing listens on this port: connection errors are retried until the deadline.
    store = GcsCheckpointStore(
        project=PROJECT,
        emulator_host=f"127.0.0.1:{procs.free_port()}",
        timeout_seconds=0.5,
        deadline_seconds=1.0,
    )
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as info:
        store.latest("gs://any-bucket/ck/")
    assert info.value.retryable
    assert info.value.__cause__ is not None
    assert time.monotonic() - started < 15


def test_custom_time_and_not_before(client: storage.Client, bucket: Any) -> None:
    # A reused directory: the earlier run's step 500, copied in with the time it was taken
    # as its marker's Custom-Time (two hours ago), then this run's step 100, written now.
    _write(bucket, ["ck/step-500/__0_0.distcp", "ck/step-100/__0_0.distcp", "ck/step-100/_SUCCESS"])
    taken = datetime.now(UTC) - timedelta(hours=2)
    marker = bucket.blob("ck/step-500/_SUCCESS")
    marker.custom_time = taken
    marker.upload_from_string(b"")
    store = GcsCheckpointStore(client=client)
    found = store.latest(f"gs://{bucket.name}/ck/", not_before=taken + timedelta(hours=1))
    assert found is not None and found.uri == f"gs://{bucket.name}/ck/step-100/"
    stale = store.latest(f"gs://{bucket.name}/ck/")
    assert stale is not None and stale.step == 500 and stale.at == taken


def test_confirm_against_the_emulator(client: storage.Client, bucket: Any) -> None:
    _write(bucket, [*TORCH_LAYOUT, "runs/r1/checkpoints/step-00000400/.metadata"])
    store = GcsCheckpointStore(client=client)
    base = f"gs://{bucket.name}/runs/r1/checkpoints/"
    told = datetime.now(UTC) + timedelta(days=9)  # an event's claim: never what is recorded
    confirmed = store.confirm(Checkpoint(f"{base}step-00000200/", 200, told))
    assert confirmed is not None and confirmed.step == 200 and confirmed.at < told
    for step in (300, 400, 500):  # half-written, a marker alone, nothing there
        assert store.confirm(Checkpoint(f"{base}step-{step:08d}/", step, told)) is None
