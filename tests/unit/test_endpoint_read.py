"""VertexDeploymentBackend: one GetEndpoint, the real v1 Endpoint proto decoded into the
serving machine's ObservedEndpoint; and the on-demand model a hedge decided on, sent as the
requested deployedModel runs, on demand."""

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
from shared.domain.serving.model import CallKind, ServingSettings, fallback_display_name
from shared.domain.serving.objective import ServingPolicy
from shared.domain.serving.rule import decide, new_state
from shared.kernel.config import Settings

NAME = "projects/p/locations/us-central1/endpoints/1"
SPOT_NAME = "served [flexjobs s-1]"


class _Client:
    """The EndpointService client, as plain values: it returns the endpoint it holds and keeps
    every call's arguments."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.calls: list[dict[str, Any]] = []

    def get_endpoint(self, **kwargs: Any) -> Endpoint:
        self.calls.append(kwargs)
        return self.endpoint

    def deploy_model(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        # An api_core Operation future: its raw operation has the name.
        return SimpleNamespace(operation=SimpleNamespace(name=f"{NAME}/operations/1"))


def _spot(available: int = 0) -> DeployedModel:
    spot = DeployedModel(
        id="7",
        model="projects/p/locations/us-central1/models/m",
        display_name=SPOT_NAME,
        dedicated_resources=DedicatedResources(
            machine_spec=MachineSpec(
                machine_type="g2-standard-8", accelerator_type="NVIDIA_L4", accelerator_count=1
            ),
            min_replica_count=1,
            required_replica_count=3,
            spot=True,
        ),
    )
    spot.status.available_replica_count = available
    return spot


def test_read_decodes_replicas_split_and_spot_from_the_v1_proto() -> None:
    other = DeployedModel(
        id="8", dedicated_resources=DedicatedResources(min_replica_count=2, spot=False)
    )
    client = _Client(
        Endpoint(
            name=NAME,
            deployed_models=[_spot(2), other],
            traffic_split={"7": 60, "8": 40},
            etag="abc",
        )
    )
    backend = VertexDeploymentBackend(Settings(project="p"), lambda _s, _l: client)

    observed = backend.read(NAME)

    assert [c["name"] for c in client.calls] == [NAME]
    assert client.calls[0]["retry"] is not None  # idempotent: api_core retries it
    first, second = observed.models
    assert (first.spot, first.required, first.available) == (True, 3, 2)
    assert (first.display_name, first.flexjobs) == (SPOT_NAME, True)
    assert (second.spot, second.required, second.available) == (False, 2, 0)
    assert dict(observed.traffic_split) == {"7": 60, "8": 40}
    assert (observed.name, observed.etag, observed.truncated) == (NAME, "abc", False)


def test_the_accelerator_is_read_by_name_not_as_an_enum_number() -> None:
    """proto-plus writes enums as numbers by default: an accelerator read as a number would be
    lost from the machine the read shows."""
    client = _Client(Endpoint(name=NAME, deployed_models=[_spot()], traffic_split={"7": 100}))
    backend = VertexDeploymentBackend(Settings(project="p"), lambda _s, _l: client)

    machine = backend.read(NAME).models[0].machine

    assert (machine.machine_type, machine.accelerator_type, machine.accelerator_count) == (
        "g2-standard-8",
        "NVIDIA_L4",
        1,
    )


def test_an_endpoint_past_max_models_reads_as_truncated() -> None:
    models = [DeployedModel(id=str(i)) for i in range(70)]
    client = _Client(Endpoint(name=NAME, deployed_models=models))
    backend = VertexDeploymentBackend(Settings(project="p"), lambda _s, _l: client)

    observed = backend.read(NAME)

    assert observed.truncated and len(observed.models) == 64


def test_the_hedge_decided_from_a_read_is_sent_as_the_requested_model_on_demand() -> None:
    """The requested deployedModel is the template: its model, machine (with its GPU), service
    account and logging are the fallback's too; Spot, the replica counts, the id and the name
    are the fallback's own, and it gets no traffic until it serves."""
    client = _Client(Endpoint(name=NAME, deployed_models=[_spot()], traffic_split={"7": 100}))
    backend = VertexDeploymentBackend(Settings(project="p"), lambda _s, _l: client)
    template = {
        "model": "projects/p/locations/us-central1/models/m",
        "displayName": "served",
        "id": "123",
        "serviceAccount": "serving@p.iam.gserviceaccount.com",
        "disableContainerLogging": True,
        "dedicatedResources": {
            "machineSpec": {
                "machineType": "g2-standard-8",
                "acceleratorType": "NVIDIA_L4",
                "acceleratorCount": 1,
            },
            "minReplicaCount": 3,
            "maxReplicaCount": 6,
            "spot": True,
        },
    }
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    state = new_state(SPOT_NAME, 3, ServingPolicy(), t0)
    # The Spot model under its tagged name is on the endpoint already: followed at once.
    short = decide(state, backend.read(NAME), t0, ServingSettings())
    assert (short.transition, short.state.spot.id, short.state.phase.value) == (
        "deployed",
        "7",
        "DEFICIT",
    )
    hedge = decide(short.state, backend.read(NAME), t0 + timedelta(minutes=5))
    assert hedge.call is not None and hedge.call.kind is CallKind.DEPLOY_FALLBACK

    operation = backend.deploy_on_demand(NAME, hedge.call.target, hedge.call.replicas, template)

    assert operation == f"{NAME}/operations/1"
    call = client.calls[-1]
    assert call["retry"] is None  # a create is never retried in-process
    sent = call["deployed_model"]
    assert (sent.id, sent.display_name) == ("", fallback_display_name(SPOT_NAME))
    assert (sent.service_account, sent.disable_container_logging) == (
        "serving@p.iam.gserviceaccount.com",
        True,
    )
    resources = sent.dedicated_resources
    assert resources.spot is False
    assert (
        resources.min_replica_count,
        resources.max_replica_count,
        resources.required_replica_count,
    ) == (3, 3, 3)
    assert resources.machine_spec == _spot().dedicated_resources.machine_spec
    assert "traffic_split" not in call  # no traffic until it serves


class _Operations:
    """ListOperations as plain values: ``ops`` the endpoint's operations, pages of
    ``size``, the ``done`` filter taken unless ``filters`` is False (INVALID_ARGUMENT)."""

    def __init__(self, ops: list[Any], *, size: int, filters: bool = True) -> None:
        self.ops, self.size, self.filters = ops, size, filters
        self.requests: list[Any] = []

    def list_operations(self, *, request: Any, **_: Any) -> Any:
        from google.api_core import exceptions as gexc
        from google.longrunning import operations_pb2

        self.requests.append(request)
        if request.filter and not self.filters:
            raise gexc.InvalidArgument("unsupported filter")
        ops = [op for op in self.ops if not request.filter or not op.done]
        start = int(request.page_token or 0)
        page = operations_pb2.ListOperationsResponse(operations=ops[start : start + self.size])
        if len(ops) > start + self.size:
            page.next_page_token = str(start + self.size)
        return page


def _operation(number: int, *, done: bool, deploy: bool = True, at: datetime | None = None) -> Any:
    from google.cloud.aiplatform_v1.types import (
        DeployModelOperationMetadata,
        UndeployModelOperationMetadata,
    )
    from google.longrunning import operations_pb2

    kind = DeployModelOperationMetadata if deploy else UndeployModelOperationMetadata
    metadata = kind()
    metadata.generic_metadata.create_time = at or T_OPS + timedelta(minutes=number)
    op = operations_pb2.Operation(name=f"{NAME}/operations/{number}", done=done)
    op.metadata.Pack(kind.pb(metadata))
    return op


T_OPS = datetime(2026, 12, 1, tzinfo=UTC)


def test_running_deploys_are_the_deploy_models_not_done_by_their_start() -> None:
    ops = [_operation(1, done=True), _operation(2, done=False, deploy=False)]
    ops += [_operation(3, done=False), _operation(4, done=False)]
    client = _Operations(ops, size=100)
    backend = VertexDeploymentBackend(Settings(project="p"), lambda _s, _l: client)
    assert backend.running_deploys(NAME) == (
        T_OPS + timedelta(minutes=3),
        T_OPS + timedelta(minutes=4),
    )
    assert [r.filter for r in client.requests] == ["done=false"]


def test_running_deploys_without_the_done_filter_read_every_page_and_filter_here() -> None:
    ops = [_operation(n, done=n != 7) for n in range(1, 10)]
    client = _Operations(ops, size=2, filters=False)
    backend = VertexDeploymentBackend(Settings(project="p"), lambda _s, _l: client)
    assert backend.running_deploys(NAME) == (T_OPS + timedelta(minutes=7),)
    assert [r.filter for r in client.requests] == ["done=false"] + [""] * 5
    assert [r.page_token for r in client.requests[1:]] == ["", "2", "4", "6", "8"]


def test_running_deploys_past_their_pages_are_not_known() -> None:
    from shared.adapters.vertex.endpoints import RUNNING_PAGES

    ops = [_operation(n, done=True) for n in range(RUNNING_PAGES * 2 + 1)]
    client = _Operations(ops, size=2, filters=False)
    backend = VertexDeploymentBackend(Settings(project="p"), lambda _s, _l: client)
    assert backend.running_deploys(NAME) is None  # nothing is given up on a partial list
    assert len(client.requests) == 1 + RUNNING_PAGES
