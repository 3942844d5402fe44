"""Endpoints and the long-running operations that change them (CreateEndpoint, DeployModel,
UndeployModel): an operation finishes, and its change shows, ``lro_seconds`` after it started.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.cloud import aiplatform_v1
from google.longrunning import operations_pb2
from google.protobuf import json_format
from google.rpc import status_pb2

from flexjobs_local.simulator import listing
from flexjobs_local.simulator.clock import to_datetime
from flexjobs_local.simulator.common import (
    STATUS_CODES,
    Due,
    Runtime,
    SimError,
    copy_message,
    rest_json,
)


@dataclass(eq=False)
class _Operation:
    pb: Any  # operations_pb2.Operation
    done_at: float
    metadata: Any  # proto-plus metadata message with generic_metadata
    finish: Callable[[float], Any]  # returns the proto-plus response message


def _op_copy(op: _Operation) -> operations_pb2.Operation:
    copy = operations_pb2.Operation()
    copy.CopyFrom(op.pb)
    return copy


class Operations:
    """Long-running operations, done or not. An :class:`~.common.EventSource`.

    Not thread-safe: the engine holds its lock.
    """

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._operations: dict[str, _Operation] = {}
        self._pending: list[_Operation] = []

    def start(
        self, resource_name: str, metadata: Any, finish: Callable[[float], Any], delay: float
    ) -> operations_pb2.Operation:
        """A new operation on ``resource_name`` that runs ``finish(at)`` ``delay`` from now."""
        now = self._runtime.now
        op_id = self._runtime.new_id()
        metadata.generic_metadata.create_time = to_datetime(now)
        metadata.generic_metadata.update_time = to_datetime(now)
        pb = operations_pb2.Operation(name=f"{resource_name}/operations/{op_id}", done=False)
        pb.metadata.Pack(type(metadata).pb(metadata))
        op = _Operation(pb=pb, done_at=now + delay, metadata=metadata, finish=finish)
        self._operations[pb.name] = op
        self._pending.append(op)
        return _op_copy(op)

    def get(self, name: str) -> operations_pb2.Operation:
        """A copy of operation ``name``. Raises SimError NOT_FOUND."""
        op = self._operations.get(name)
        if op is None:
            raise SimError("NOT_FOUND", f"Operation {name} not found.")
        return _op_copy(op)

    def to_json(self) -> list[dict[str, Any]]:
        return [json_format.MessageToDict(op.pb) for op in self._operations.values()]

    def due(self, until: float) -> Due | None:
        """The earliest operation that finishes at or before ``until``."""
        op = min(
            (op for op in self._pending if op.done_at <= until),
            key=lambda op: op.done_at,
            default=None,
        )
        if op is None:
            return None
        return Due(op.done_at, lambda at: self._complete(op, at))

    def _complete(self, op: _Operation, at: float) -> None:
        self._pending.remove(op)
        op.metadata.generic_metadata.update_time = to_datetime(at)
        op.pb.metadata.Pack(type(op.metadata).pb(op.metadata))
        try:
            response = op.finish(at)
        except SimError as err:
            # The operation itself failed (e.g. the endpoint vanished meanwhile): report it on
            # the operation, the way Vertex does, instead of on an RPC.
            op.pb.error.CopyFrom(
                status_pb2.Status(code=STATUS_CODES[err.code], message=err.message)
            )
        else:
            op.pb.response.Pack(type(response).pb(response))
        op.pb.done = True


@dataclass(eq=False)
class _EndpointRecord:
    msg: Any  # aiplatform_v1.Endpoint
    project: str
    location: str
    seq: int


def check_new_endpoint(endpoint: Any) -> None:
    """Raises SimError INVALID_ARGUMENT for an endpoint without a display name."""
    if not endpoint.display_name:
        raise SimError("INVALID_ARGUMENT", "endpoint.display_name is required.")


def check_deploy(deployed_model: Any, traffic_split: dict[str, int]) -> None:
    """Raises SimError INVALID_ARGUMENT for no model or a split not summing to 100."""
    if not deployed_model.model:
        raise SimError("INVALID_ARGUMENT", "deployed_model.model is required.")
    if traffic_split and sum(traffic_split.values()) != 100:
        raise SimError("INVALID_ARGUMENT", "traffic_split must sum to 100.")


class Endpoints:
    """Endpoints and the models deployed on them. Not thread-safe: the engine holds its lock."""

    def __init__(self, runtime: Runtime, operations: Operations, lro_seconds: float) -> None:
        self._runtime = runtime
        self._operations = operations
        self._lro_seconds = lro_seconds
        self._endpoints: dict[str, _EndpointRecord] = {}

    def create(
        self, project: str, location: str, endpoint: Any, endpoint_id: str
    ) -> operations_pb2.Operation:
        """Start creating a checked endpoint; it appears when the operation finishes."""
        eid = endpoint_id or self._runtime.new_id()
        name = f"projects/{project}/locations/{location}/endpoints/{eid}"
        if name in self._endpoints:
            raise SimError("ALREADY_EXISTS", f"Endpoint {name} already exists.")
        msg = copy_message(endpoint)
        msg.name = name
        seq = len(self._endpoints)

        def finish(at: float) -> Any:
            msg.create_time = to_datetime(at)
            msg.update_time = to_datetime(at)
            self._endpoints[name] = _EndpointRecord(msg, project, location, seq)
            return copy_message(msg)

        return self._operations.start(
            name, aiplatform_v1.CreateEndpointOperationMetadata(), finish, self._lro_seconds
        )

    def get(self, name: str) -> Any:
        """A copy of endpoint ``name``. Raises SimError NOT_FOUND."""
        return copy_message(self._find(name).msg)

    def page(
        self, project: str, location: str, page_size: int, page_token: str
    ) -> tuple[list[Any], str]:
        """One page of copies of the endpoints in one location, in creation order."""
        matches = [
            r
            for r in sorted(self._endpoints.values(), key=lambda r: r.seq)
            if r.project == project and r.location == location
        ]
        try:
            page, token = listing.paginate(matches, page_size, page_token)
        except ValueError as exc:
            raise SimError("INVALID_ARGUMENT", str(exc)) from exc
        return [copy_message(r.msg) for r in page], token

    def to_json(self) -> list[dict[str, Any]]:
        return [rest_json(r.msg) for r in self._endpoints.values()]

    def deploy(
        self, endpoint: str, deployed_model: Any, traffic_split: dict[str, int]
    ) -> operations_pb2.Operation:
        """Start deploying a checked model; it lists on the endpoint when the operation ends."""
        record = self._find(endpoint)
        model = copy_message(deployed_model)
        model.id = self._runtime.new_id()
        split = dict(traffic_split)

        def finish(at: float) -> Any:
            msg = record.msg
            model.create_time = to_datetime(at)
            # Vertex reports every required replica available once DeployModel is done
            # (DeployedModel.status.available_replica_count); the simulator reclaims no Spot
            # node yet, so that count stays.
            resources = model.dedicated_resources
            model.status.available_replica_count = (
                resources.required_replica_count or resources.min_replica_count or 1
            )
            model.status.last_update_time = to_datetime(at)
            msg.deployed_models.append(model)
            if split:
                new = {(model.id if k == "0" else k): v for k, v in split.items()}
                msg.traffic_split.clear()
                msg.traffic_split.update(new)
            elif len(msg.deployed_models) == 1:
                msg.traffic_split[model.id] = 100
            msg.update_time = to_datetime(at)
            return aiplatform_v1.DeployModelResponse(deployed_model=copy_message(model))

        return self._operations.start(
            endpoint, aiplatform_v1.DeployModelOperationMetadata(), finish, self._lro_seconds
        )

    def undeploy(
        self, endpoint: str, deployed_model_id: str, traffic_split: dict[str, int]
    ) -> operations_pb2.Operation:
        """Start undeploying; the model leaves the endpoint when the operation ends."""
        record = self._find(endpoint)
        if not any(m.id == deployed_model_id for m in record.msg.deployed_models):
            raise SimError(
                "NOT_FOUND", f"Deployed model {deployed_model_id} not found on {endpoint}."
            )
        split = dict(traffic_split)

        def finish(at: float) -> Any:
            msg = record.msg
            keep = [copy_message(m) for m in msg.deployed_models if m.id != deployed_model_id]
            msg.deployed_models = keep
            new = split or {k: v for k, v in msg.traffic_split.items() if k != deployed_model_id}
            if keep and not new:
                new = {keep[0].id: 100}
            msg.traffic_split.clear()
            msg.traffic_split.update(new)
            msg.update_time = to_datetime(at)
            return aiplatform_v1.UndeployModelResponse()

        return self._operations.start(
            endpoint, aiplatform_v1.UndeployModelOperationMetadata(), finish, self._lro_seconds
        )

    def _find(self, name: str) -> _EndpointRecord:
        record = self._endpoints.get(name)
        if record is None:
            raise SimError("NOT_FOUND", f"The Endpoint does not exist: {name}")
        return record
