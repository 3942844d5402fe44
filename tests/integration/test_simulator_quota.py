"""The simulator's GPU quota, met by the product's own VertexJobBackend over gRPC."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

from flexjobs_local.simulator import SimulatorControl, SimulatorControlError, SimulatorHandle, serve
from shared.adapters.vertex.jobs import VertexJobBackend
from shared.domain.request.message import parse_request
from shared.kernel.config import Settings
from shared.kernel.errors import QuotaExhausted
from tests.events import load
from tests.integration.simulator_support import A100, LOCATION

pytestmark = pytest.mark.integration

PREEMPTIBLE_A100 = "aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_a100_gpus"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    handle = serve(time_factor=0, seed=5)
    yield handle
    handle.stop()


def _request(request_id: str, strategy: str):
    body = copy.deepcopy(load("seed_request"))
    body["requestId"] = request_id
    spec = body["customJob"]["jobSpec"]
    spec["workerPoolSpecs"][0]["machineSpec"] = {
        "machineType": "a2-highgpu-8g",
        "acceleratorType": A100,
        "acceleratorCount": 8,
    }
    spec["scheduling"] = {"strategy": strategy}
    return parse_request(body, {}, f"m-{request_id}")


def _labels(request_id: str) -> dict[str, str]:
    return {"flexjobs-request": request_id, "flexjobs-attempt": "1"}


def test_a_create_past_the_preemptible_quota_is_refused_until_a_job_ends(control, sim):
    control.set_default_capacity(64)
    control.set_quota(LOCATION, A100, "preemptible", 8)
    backend = VertexJobBackend(Settings(project="p", vertex_endpoint=sim.grpc_endpoint))

    first = backend.create(_request("spot-1", "SPOT"), _labels("spot-1"), LOCATION)
    with pytest.raises(QuotaExhausted) as refused:
        backend.create(_request("spot-2", "SPOT"), _labels("spot-2"), LOCATION)
    assert "The following quota metrics exceed quota limits: " + PREEMPTIBLE_A100 in str(
        refused.value
    )
    [call] = [c for c in control.calls("CreateCustomJob") if c["code"] != "OK"]
    assert call["code"] == "RESOURCE_EXHAUSTED"
    assert call["message"].endswith(PREEMPTIBLE_A100)

    # The on-demand pool is a quota of its own.
    backend.create(_request("standard-1", "STANDARD"), _labels("standard-1"), LOCATION)
    held = {u["pool"]: u["gpus"] for u in control.quota()["usage"] if u["project"] == "p"}
    assert held == {"preemptible": 8, "on-demand": 8}

    backend.cancel(first.name)
    control.advance(60)  # CANCELLING holds its quota until CANCELLED
    assert backend.get(first.name).state == "JOB_STATE_CANCELLED"
    backend.create(_request("spot-2", "SPOT"), _labels("spot-2"), LOCATION)


def test_without_a_limit_creates_are_never_refused_for_quota(control, sim):
    backend = VertexJobBackend(Settings(project="p", vertex_endpoint=sim.grpc_endpoint))
    for n in range(3):
        backend.create(_request(f"free-{n}", "SPOT"), _labels(f"free-{n}"), LOCATION)
    assert control.quota()["limits"] == []


def test_the_control_route_refuses_a_bad_limit(control: SimulatorControl):
    with pytest.raises(SimulatorControlError) as caught:
        control.set_quota(LOCATION, A100, "spot", 8)
    assert caught.value.status == 400
