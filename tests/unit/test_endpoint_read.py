"""VertexDeploymentBackend.read: one GetEndpoint, the real v1 Endpoint proto decoded into the
serving rule's ObservedEndpoint."""

from __future__ import annotations

from typing import Any

from google.cloud.aiplatform_v1.types import (
    DedicatedResources,
    DeployedModel,
    Endpoint,
    MachineSpec,
)

from shared.adapters.vertex.endpoints import VertexDeploymentBackend
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
