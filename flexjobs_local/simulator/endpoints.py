"""Endpoints and the long-running operations that change them (CreateEndpoint, DeployModel,
UndeployModel, MutateDeployedModel): an operation finishes, and its change shows,
``lro_seconds`` after it started. UpdateEndpoint is synchronous, as in v1.

**Etag.** Every endpoint carries an ``etag`` that changes with every change to the endpoint as
GetEndpoint returns it: a deploy, an undeploy, a mutation or an UpdateEndpoint when its
operation or call takes effect, and also a change in a deployed model's
``status.available_replica_count`` (Spot nodes reclaimed or back, :mod:`.serving`): the etag
covers the whole resource, output-only status included, so one rule holds and a client's
read-modify-write never rests on a stale read. ``update_time`` moves with it. A failed restart
try changes nothing on the endpoint, so neither.

**Traffic split**, exactly as the v1 request comments say: a DeployModel with an empty split
leaves the endpoint's split as it is ("If this field is empty, then the Endpoint's
traffic_split is not updated"); an UndeployModel of a model that has traffic, without a split
that takes it away, is refused ("A DeployedModel will be successfully undeployed only if it
doesn't have any traffic assigned to it when this method executes, or if this field unassigns
any traffic to it"), except the last model, whose undeploy always leaves the split empty.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Collection, Mapping
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
from flexjobs_local.simulator.serving import Serving


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

    def listed(
        self, parent: str, filter_: str, page_size: int, page_token: str = ""
    ) -> operations_pb2.ListOperationsResponse:
        """``ListOperations`` of one resource's operations, oldest first. The filter is the
        one Vertex's operations document for ``done`` (``done=true``, ``done = false``, ``!=``);
        any other is refused. A page holds ``page_size`` (at most 100; 0: 100); its
        ``next_page_token`` gives the next.

        Raises:
            SimError: INVALID_ARGUMENT (a filter other than on ``done``, a bad page token).
        """
        wanted = _done_filter(filter_)
        if page_token and not page_token.isdigit():
            raise SimError("INVALID_ARGUMENT", f"Invalid page token {page_token!r}.")
        start = int(page_token or 0)
        prefix = f"{parent}/operations/"
        found = [
            op
            for name, op in self._operations.items()
            if name.startswith(prefix) and (wanted is None or op.pb.done == wanted)
        ]
        size = min(page_size or 100, 100)
        response = operations_pb2.ListOperationsResponse(
            operations=[_op_copy(op) for op in found[start : start + size]]
        )
        if len(found) > start + size:
            response.next_page_token = str(start + size)
        return response

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


def _done_filter(filter_: str) -> bool | None:
    """``done=true`` / ``done != false`` ... as a bool (None: no filter)."""
    text = filter_.replace(" ", "").lower()
    if not text:
        return None
    for op, negate in (("!=", True), ("=", False)):
        field_, sep, value = text.partition(op)
        if sep and field_ == "done" and value in ("true", "false"):
            return (value == "true") != negate
    raise SimError("INVALID_ARGUMENT", f"Unsupported filter {filter_!r}: only done is filtered.")


#: UpdateEndpointRequest.update_mask paths the simulator applies (any other is refused).
ENDPOINT_UPDATE_PATHS = frozenset({"display_name", "description", "labels", "traffic_split"})

#: MutateDeployedModelRequest.update_mask paths: the fields its v1 comment says can be mutated.
MUTATE_PATHS = frozenset(
    {
        "dedicated_resources.min_replica_count",
        "dedicated_resources.max_replica_count",
        "dedicated_resources.required_replica_count",
        "dedicated_resources.autoscaling_metric_specs",
        "automatic_resources.min_replica_count",
        "automatic_resources.max_replica_count",
        "disable_container_logging",
    }
)


@dataclass(eq=False)
class _EndpointRecord:
    msg: Any  # aiplatform_v1.Endpoint
    project: str
    location: str
    seq: int
    version: int = 0  # bumped on every change; the etag is derived from it


def check_new_endpoint(endpoint: Any) -> None:
    """Raises SimError INVALID_ARGUMENT for an endpoint without a display name."""
    if not endpoint.display_name:
        raise SimError("INVALID_ARGUMENT", "endpoint.display_name is required.")


def check_deploy(deployed_model: Any) -> None:
    """Raises SimError INVALID_ARGUMENT for a deployed model naming no model."""
    if not deployed_model.model:
        raise SimError("INVALID_ARGUMENT", "deployed_model.model is required.")


def check_mask(paths: Collection[str], allowed: frozenset[str], request: str) -> None:
    """Raises SimError INVALID_ARGUMENT for an empty mask or a path not in ``allowed``."""
    if not paths:
        raise SimError("INVALID_ARGUMENT", f"{request}.update_mask is required.")
    unknown = sorted(set(paths) - allowed)
    if unknown:
        raise SimError(
            "INVALID_ARGUMENT",
            f"{request}.update_mask paths {unknown} cannot be updated; allowed: {sorted(allowed)}.",
        )


def check_split(split: Mapping[str, int], ids: Collection[str]) -> None:
    """The one rule for a traffic split (Endpoint.traffic_split's v1 comment): every key one of
    ``ids`` (the endpoint's deployed models, "0" too for a DeployModel), no value negative, and
    the values adding up to 100, or the map empty (no traffic at all).

    Raises:
        SimError: INVALID_ARGUMENT.
    """
    unknown = sorted(set(split) - set(ids))
    if unknown:
        raise SimError(
            "INVALID_ARGUMENT", f"traffic_split names {unknown}, not deployed on the endpoint."
        )
    if any(value < 0 for value in split.values()):
        raise SimError("INVALID_ARGUMENT", "traffic_split percentages must not be negative.")
    if split and sum(split.values()) != 100:
        raise SimError("INVALID_ARGUMENT", "traffic_split must sum to 100.")


def _replicas(model: Any) -> tuple[int, int]:
    """``(nodes, required)`` of a deployed model: one node per ``min_replica_count`` (Vertex
    keeps that many running), and the replicas it needs available (``required_replica_count``,
    else ``min_replica_count``)."""
    if "automatic_resources" in model:
        nodes = max(model.automatic_resources.min_replica_count, 1)
        return nodes, nodes
    resources = model.dedicated_resources
    nodes = max(resources.min_replica_count, 1)
    return nodes, resources.required_replica_count or nodes


def _etag(record: _EndpointRecord) -> str:
    # Opaque, as Vertex's are; the creation time keeps an endpoint re-created under the same
    # id (after a reset) from repeating an old one.
    msg = record.msg
    text = f"{msg.name}\n{msg.create_time.timestamp()}\n{record.version}"
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()[:12]).decode()


def _undeploy_split(msg: Any, model_id: str, given: Mapping[str, int]) -> dict[str, int]:
    """The endpoint's split once ``model_id`` is undeployed, per UndeployModelRequest's v1
    comment.

    Raises:
        SimError: INVALID_ARGUMENT (``given`` gives the model traffic, or breaks the split
            rule); FAILED_PRECONDITION (the model has traffic and no ``given`` split).
    """
    remaining = [m.id for m in msg.deployed_models if m.id != model_id]
    if not remaining:
        # "If last DeployedModel is being undeployed from the Endpoint, the
        # [Endpoint.traffic_split] will always end up empty when this call returns."
        return {}
    if given:
        if given.get(model_id, 0) > 0:
            raise SimError(
                "INVALID_ARGUMENT",
                f"traffic_split gives traffic to deployed model {model_id}, being undeployed.",
            )
        split = {k: v for k, v in given.items() if k != model_id}
        check_split(split, remaining)
        return split
    share = msg.traffic_split.get(model_id, 0)
    if share > 0:
        # "A DeployedModel will be successfully undeployed only if it doesn't have any traffic
        # assigned to it when this method executes, or if this field unassigns any traffic to
        # it." The endpoint's state, not the request, is what is wrong: FAILED_PRECONDITION.
        raise SimError(
            "FAILED_PRECONDITION",
            f"Deployed model {model_id} has {share}% of the endpoint's traffic: undeploy it "
            "with a traffic_split that unassigns it, or move its traffic first.",
        )
    return {k: v for k, v in msg.traffic_split.items() if k != model_id}


def _mutated(current: Any, request: Any, paths: Collection[str]) -> Any:
    """A copy of ``current`` with the ``paths`` of ``request`` (a checked mask) taken over.

    Raises:
        SimError: INVALID_ARGUMENT (a path for resources the model does not use, or replica
            counts that do not fit together).
    """
    result = copy_message(current)
    for path in sorted(paths):
        head, _, leaf = path.rpartition(".")
        if head and head not in result:
            raise SimError(
                "INVALID_ARGUMENT",
                f"Deployed model {current.id} has no {head} to mutate ({path}).",
            )
        target = getattr(result, head) if head else result
        source = getattr(request, head) if head else request
        value = getattr(source, leaf)
        setattr(target, leaf, list(value) if leaf == "autoscaling_metric_specs" else value)
    resources = (
        result.automatic_resources
        if "automatic_resources" in result
        else result.dedicated_resources
    )
    low, high = resources.min_replica_count, resources.max_replica_count
    if low < 1:
        raise SimError("INVALID_ARGUMENT", "min_replica_count must be at least 1.")
    if high and high < low:
        raise SimError("INVALID_ARGUMENT", "max_replica_count must not be below min_replica_count.")
    required = result.dedicated_resources.required_replica_count
    if "dedicated_resources" in result and required > low:
        raise SimError(
            "INVALID_ARGUMENT", "required_replica_count must not exceed min_replica_count."
        )
    return result


class Endpoints:
    """Endpoints and the models deployed on them. Not thread-safe: the engine holds its lock.

    ``serving`` keeps the nodes the deployed models run on (an event source of its own).
    """

    def __init__(self, runtime: Runtime, operations: Operations, lro_seconds: float) -> None:
        self._runtime = runtime
        self._operations = operations
        self._lro_seconds = lro_seconds
        self._endpoints: dict[str, _EndpointRecord] = {}
        self.serving = Serving(self._report_available)

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
        msg.etag = ""  # output: the server's, never the caller's
        seq = len(self._endpoints)

        def finish(at: float) -> Any:
            msg.create_time = to_datetime(at)
            record = _EndpointRecord(msg, project, location, seq)
            self._endpoints[name] = record
            self._changed(record, at)
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

    def update(self, endpoint: Any, paths: Collection[str]) -> Any:
        """UpdateEndpoint: the ``paths`` (a checked mask) of ``endpoint`` replace the stored
        endpoint's at once; returns a copy of the result.

        Raises:
            SimError: NOT_FOUND; ABORTED (a stale etag); INVALID_ARGUMENT (the split rule, an
                empty display name).
        """
        record = self._find(endpoint.name)
        msg = record.msg
        # Google APIs' read-modify-write rule (AIP-154, "Resource freshness validation"): an
        # update whose etag is set and not the current one fails with ABORTED, as e.g. GKE's
        # ClusterUpdate.etag documents ("update will be blocked and an ABORTED error will be
        # returned"). An unset etag is the blind overwrite Endpoint.etag's comment allows.
        if endpoint.etag and endpoint.etag != msg.etag:
            raise SimError(
                "ABORTED",
                f"The etag {endpoint.etag!r} of Endpoint {msg.name} is not its current one: "
                "read it again.",
            )
        if "traffic_split" in paths:
            check_split(dict(endpoint.traffic_split), [m.id for m in msg.deployed_models])
        if "display_name" in paths and not endpoint.display_name:
            raise SimError("INVALID_ARGUMENT", "endpoint.display_name must not be empty.")
        for path in paths:
            if path in ("labels", "traffic_split"):
                getattr(msg, path).clear()
                getattr(msg, path).update(dict(getattr(endpoint, path)))
            else:
                setattr(msg, path, getattr(endpoint, path))
        self._changed(record, self._runtime.now)
        return copy_message(msg)

    def deploy(
        self, endpoint: str, deployed_model: Any, traffic_split: dict[str, int]
    ) -> operations_pb2.Operation:
        """Start deploying a checked model; it lists on the endpoint when the operation ends.

        Raises:
            SimError: NOT_FOUND; INVALID_ARGUMENT (the split rule, "0" the model deployed).
        """
        record = self._find(endpoint)
        split = dict(traffic_split)
        check_split(split, ["0", *(m.id for m in record.msg.deployed_models)])
        model = copy_message(deployed_model)
        model.id = self._runtime.new_id()
        model.status = aiplatform_v1.DeployedModel.Status()  # output only: ours to set

        def finish(at: float) -> Any:
            msg = record.msg
            # Checked again: a model the split names may have been undeployed meanwhile.
            check_split(split, ["0", *(m.id for m in msg.deployed_models)])
            model.create_time = to_datetime(at)
            msg.deployed_models.append(model)
            if split:
                msg.traffic_split.clear()
                msg.traffic_split.update(
                    {(model.id if k == "0" else k): v for k, v in split.items()}
                )
            # An empty split leaves the endpoint's as it is (DeployModelRequest.traffic_split).
            nodes, required = _replicas(model)
            self.serving.place(
                endpoint,
                model.id,
                record.location,
                spot=model.dedicated_resources.spot,
                replicas=nodes,
                required=required,
                at=at,
            )
            self._changed(record, at)
            return aiplatform_v1.DeployModelResponse(deployed_model=self._model(record, model.id))

        return self._operations.start(
            endpoint, aiplatform_v1.DeployModelOperationMetadata(), finish, self._lro_seconds
        )

    def undeploy(
        self, endpoint: str, deployed_model_id: str, traffic_split: dict[str, int]
    ) -> operations_pb2.Operation:
        """Start undeploying; the model leaves the endpoint when the operation ends.

        Raises:
            SimError: NOT_FOUND; INVALID_ARGUMENT or FAILED_PRECONDITION (the split, see
                :func:`_undeploy_split`; checked again when the operation ends, since the split
                may change meanwhile: then the operation fails).
        """
        record = self._find(endpoint)
        self._model(record, deployed_model_id)
        split = dict(traffic_split)
        _undeploy_split(record.msg, deployed_model_id, split)

        def finish(at: float) -> Any:
            msg = record.msg
            self._model(record, deployed_model_id)
            new = _undeploy_split(msg, deployed_model_id, split)
            keep = [copy_message(m) for m in msg.deployed_models if m.id != deployed_model_id]
            msg.deployed_models = keep
            msg.traffic_split.clear()
            msg.traffic_split.update(new)
            self.serving.remove(endpoint, deployed_model_id)
            self._changed(record, at)
            return aiplatform_v1.UndeployModelResponse()

        return self._operations.start(
            endpoint, aiplatform_v1.UndeployModelOperationMetadata(), finish, self._lro_seconds
        )

    def mutate(
        self, endpoint: str, deployed_model: Any, paths: Collection[str]
    ) -> operations_pb2.Operation:
        """Start MutateDeployedModel (a checked mask); the change, and the nodes it adds or
        drops, show when the operation ends.

        Raises:
            SimError: NOT_FOUND; INVALID_ARGUMENT (see :func:`_mutated`).
        """
        record = self._find(endpoint)
        model_id = deployed_model.id
        if not model_id:
            raise SimError("INVALID_ARGUMENT", "deployed_model.id is required.")
        _mutated(self._model(record, model_id), deployed_model, paths)
        request = copy_message(deployed_model)

        def finish(at: float) -> Any:
            msg = record.msg
            current = self._model(record, model_id)  # it may have been undeployed meanwhile
            result = _mutated(current, request, paths)
            msg.deployed_models = [
                result if m.id == model_id else copy_message(m) for m in msg.deployed_models
            ]
            nodes, required = _replicas(result)
            self.serving.resize(endpoint, model_id, nodes, required, at)
            self._changed(record, at)
            return aiplatform_v1.MutateDeployedModelResponse(
                deployed_model=self._model(record, model_id)
            )

        return self._operations.start(
            endpoint,
            aiplatform_v1.MutateDeployedModelOperationMetadata(),
            finish,
            self._lro_seconds,
        )

    def _report_available(self, endpoint: str, model_id: str, available: int, at: float) -> None:
        """:class:`~.serving.Serving`'s report: the model's running nodes are its available
        replicas (``DeployedModel.status``), a change to the endpoint."""
        record = self._find(endpoint)
        for model in record.msg.deployed_models:
            if model.id == model_id:
                model.status.available_replica_count = available
                model.status.last_update_time = to_datetime(at)
        self._changed(record, at)

    def _changed(self, record: _EndpointRecord, at: float) -> None:
        """The one place an endpoint changes: a new etag and update_time (see the module doc).
        The update time never goes back: an event the engine applies late (an operation that
        ended at ``at``, before a change already applied) is a change made now, after it, as
        a server stamps its changes."""
        record.version += 1
        last = record.msg.update_time
        stamp = max(at, last.timestamp()) if last is not None else at
        record.msg.update_time = to_datetime(stamp)
        record.msg.etag = _etag(record)

    def _model(self, record: _EndpointRecord, model_id: str) -> Any:
        """A copy of deployed model ``model_id`` of the endpoint. Raises SimError NOT_FOUND."""
        for model in record.msg.deployed_models:
            if model.id == model_id:
                return copy_message(model)
        raise SimError("NOT_FOUND", f"Deployed model {model_id} not found on {record.msg.name}.")

    def _find(self, name: str) -> _EndpointRecord:
        record = self._endpoints.get(name)
        if record is None:
            raise SimError("NOT_FOUND", f"The Endpoint does not exist: {name}")
        return record
