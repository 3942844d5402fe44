"""VertexDeploymentBackend.read: one GetEndpoint, the real v1 Endpoint proto decoded into the
serving rule's ObservedEndpoint."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from google.cloud.aiplatform_v1.types import (
    DedicatedResources,
    DeployedModel,
    Endpoint,
    MachineSpec,
)

from shared.adapters.vertex.endpoints import VertexDeploymentBackend
from shared.domain.serving.model import Fallback, ServingSettings
from shared.domain.serving.model import MachineSpec as ServingMachine
from shared.domain.serving.rule import decide, start
from shared.kernel.config import Settings

NAME = "projects/p/locations/us-central1/endpoints/1"


class _Client:
    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.calls: list[dict[str, Any]] = []

    def get_endpoint(self, **kwargs: Any) -> Endpoint:
        self.calls.append(kwargs)
        return self.endpoint


def test_read_decodes_replicas_split_and_spot_from_the_v1_proto() -> None:
    spot = DeployedModel(
        id="7",
        model="projects/p/locations/us-central1/models/m",
        display_name="served [flexjobs s-1]",
        dedicated_resources=DedicatedResources(
            machine_spec=MachineSpec(machine_type="g2-standard-8"),
            min_replica_count=1,
            required_replica_count=3,
            spot=True,
        ),
    )
    spot.status.available_replica_count = 2
    other = DeployedModel(
        id="8", dedicated_resources=DedicatedResources(min_replica_count=2, spot=False)
    )
    client = _Client(
        Endpoint(name=NAME, deployed_models=[spot, other], traffic_split={"7": 60, "8": 40})
    )
    backend = VertexDeploymentBackend(Settings(project="p"), lambda _s, _l: client)

    observed = backend.read(NAME)

    assert [c["name"] for c in client.calls] == [NAME]
    assert client.calls[0]["retry"] is not None  # idempotent: api_core retries it
    first, second = observed.models
    assert (first.spot, first.required, first.available) == (True, 3, 2)
    assert first.machine.machine_type == "g2-standard-8"
    assert (second.spot, second.required, second.available) == (False, 2, 0)
    assert dict(observed.traffic_split) == {"7": 60, "8": 40}


class _DeployingClient(_Client):
    def deploy_model(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        # An api_core Operation future: its raw operation has the name.
        return SimpleNamespace(operation=SimpleNamespace(name=f"{NAME}/operations/1"))


def test_the_fallback_copied_from_a_read_keeps_the_spot_models_accelerator() -> None:
    """The accelerator type is an enum: read as a number (proto-plus's default JSON), it was
    lost, and the on-demand fallback was deployed on the bare machine, without its GPU."""
    spot = DeployedModel(
        id="7",
        model="projects/p/locations/us-central1/models/m",
        display_name="served [flexjobs s-1]",
        dedicated_resources=DedicatedResources(
            machine_spec=MachineSpec(
                machine_type="g2-standard-8", accelerator_type="NVIDIA_L4", accelerator_count=1
            ),
            min_replica_count=2,
            spot=True,
        ),
    )
    client = _DeployingClient(Endpoint(name=NAME, deployed_models=[spot], traffic_split={"7": 100}))
    backend = VertexDeploymentBackend(Settings(project="p"), lambda _s, _l: client)

    served = backend.read(NAME)
    assert served.models[0].machine.accelerator_type == "NVIDIA_L4"
    assert served.models[0].machine.accelerator_count == 1
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    state = start("7", served, t0)
    spot.status.available_replica_count = 0
    lost = decide(backend.read(NAME), state, t0 + timedelta(minutes=1), ServingSettings())
    hedge = decide(backend.read(NAME), lost.state, t0 + timedelta(minutes=7), ServingSettings())
    assert hedge.deploy is not None
    backend.deploy_fallback(NAME, hedge.deploy)

    sent = client.calls[-1]["deployed_model"].dedicated_resources
    assert sent.spot is False
    assert sent.machine_spec == spot.dedicated_resources.machine_spec


def test_the_fallback_runs_as_the_requested_deployed_model_does_on_demand() -> None:
    """The requested deployedModel is the template: its service account and logging are the
    fallback's too; Spot, the replica counts, the id and the name are the fallback's own."""
    client = _DeployingClient(Endpoint(name=NAME))
    backend = VertexDeploymentBackend(Settings(project="p"), lambda _s, _l: client)
    template = {
        "model": "projects/p/locations/us-central1/models/m",
        "displayName": "served",
        "id": "123",
        "serviceAccount": "serving@p.iam.gserviceaccount.com",
        "disableContainerLogging": True,
        "dedicatedResources": {
            "machineSpec": {"machineType": "g2-standard-8"},
            "minReplicaCount": 4,
            "spot": True,
        },
    }
    fallback = Fallback(
        "projects/p/locations/us-central1/models/m",
        "served [flexjobs s-1] (on-demand fallback)",
        ServingMachine("g2-standard-8", "NVIDIA_L4", 1),
        2,
    )

    backend.deploy_fallback(NAME, fallback, template)

    sent = client.calls[-1]["deployed_model"]
    assert (sent.service_account, sent.disable_container_logging) == (
        "serving@p.iam.gserviceaccount.com",
        True,
    )
    assert (sent.id, sent.display_name) == ("", fallback.display_name)
    resources = sent.dedicated_resources
    assert (resources.spot, resources.min_replica_count, resources.max_replica_count) == (
        False,
        2,
        2,
    )
    assert resources.machine_spec.accelerator_count == 1
    assert "traffic_split" not in client.calls[-1]  # no traffic until it serves
