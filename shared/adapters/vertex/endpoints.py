"""VertexDeploymentBackend: the DeploymentBackend port on ``aiplatform_v1.EndpointServiceClient``.

``DeployModel`` is a long-running operation: :meth:`VertexDeploymentBackend.deploy` starts it
and returns the operation's name without waiting (a deployment takes minutes; the scheduler
tick follows it with ``GetOperation``). The deployed model's display name carries the request's
tag (:mod:`shared.domain.decisions.deploy_model`): the serving machine recognises its models
on every read by their names (:mod:`shared.domain.serving.rule`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from shared.adapters.vertex.jobs import (
    ENDPOINT_SERVICE,
    IDEMPOTENT_RETRY,
    GapicClients,
    call_vertex,
    location_of,
)
from shared.domain.decisions.deploy_model import OperationStatus
from shared.domain.request.message import JobRequest
from shared.domain.serving.model import ObservedEndpoint
from shared.kernel.config import Settings
from shared.kernel.errors import BackendRejected, EndpointGone


def _deployed_model(request: JobRequest) -> Any:
    from google.cloud.aiplatform_v1.types import DeployedModel

    return DeployedModel.from_json(json.dumps(request.spec.get("deployedModel")))


#: The type of a DeployModel operation's response (``Operation.response`` is an Any).
DEPLOY_RESPONSE = "google.cloud.aiplatform.v1.DeployModelResponse"
#: The type of a DeployModel operation's metadata: how a listed operation is known for one.
DEPLOY_METADATA = "google.cloud.aiplatform.v1.DeployModelOperationMetadata"
#: Operations listed a page, and pages read at most: an endpoint runs a few at a time (and,
#: where the ``done`` filter is not taken, keeps its finished ones for a while); past them,
#: which run is not known (``running_deploys`` says None, and nothing is given up).
RUNNING_PAGE = 100
RUNNING_PAGES = 10


def _listing(client: Any, request: Any, timeout: float) -> Callable[[], Any]:
    """One ``ListOperations`` page, as :func:`call_vertex` calls it (retried: a read)."""
    return lambda: client.list_operations(request=request, retry=IDEMPOTENT_RETRY, timeout=timeout)


class VertexDeploymentBackend:
    """Deploys models to Vertex AI endpoints on Spot VMs and follows the operations."""

    def __init__(
        self, settings: Settings, client_factory: Callable[[str, str], Any] | None = None
    ) -> None:
        """``client_factory(service, location)`` replaces the GAPIC client builder (tests)."""
        self._settings = settings
        self._clients = GapicClients(settings, client_factory)

    def _client(self, resource_name: str) -> Any:
        return self._clients.get(ENDPOINT_SERVICE, location_of(resource_name))

    def _start(self, what: str, method: str, **request: Any) -> str:
        """Start one long-running EndpointService call; its operation's name at once.

        Never retried in-process (``retry=None``): a call that timed out may have started,
        and only a later read can tell (``creates=True`` makes that OutcomeUnknown).
        """
        client = self._client(str(request["endpoint"]))
        call = getattr(client, method)
        started = call_vertex(
            what,
            lambda: call(**request, retry=None, timeout=self._settings.call_timeout_seconds),
            creates=True,
        )
        # An api_core Operation future; its raw operations_pb2.Operation has the name.
        return str(started.operation.name)

    def deploy(self, request: JobRequest, display_name: str, replicas: int) -> str:
        """Start DeployModel of the request's Spot model under ``display_name``, with
        ``replicas`` as its min and required replica count (its max at least as many), and the
        request's ``trafficSplit``; returns the operation name at once (never waits for it).

        Never retried in-process: a DeployModel that timed out may have started, and only a
        later read of the endpoint can tell.
        """
        from google.cloud.aiplatform_v1.types import DedicatedResources

        endpoint = str(request.spec["endpoint"])
        deployed = _deployed_model(request)
        deployed.display_name = display_name
        resources = deployed.dedicated_resources or DedicatedResources()
        resources.min_replica_count = replicas
        resources.required_replica_count = replicas
        resources.max_replica_count = max(resources.max_replica_count, replicas)
        deployed.dedicated_resources = resources
        split = request.spec.get("trafficSplit") or {}
        return self._start(
            "DeployModel",
            "deploy_model",
            endpoint=endpoint,
            deployed_model=deployed,
            traffic_split={str(k): int(v) for k, v in split.items()},
        )

    def read(self, endpoint: str) -> ObservedEndpoint:
        """One ``GetEndpoint`` (idempotent, so retried by api_core), as the serving rule reads
        it: the v1 ``Endpoint`` in its JSON form (camelCase), decoded bounded by
        :meth:`ObservedEndpoint.from_json`. Enums are written by name, as the REST API writes
        them (proto-plus writes them as integers by default, and an accelerator type read as
        a number would be lost, so the fallback copied from the read would have no GPU)."""
        from google.api_core import exceptions as gexc

        client = self._client(endpoint)
        try:
            found = call_vertex(
                "GetEndpoint",
                lambda: client.get_endpoint(
                    name=endpoint,
                    retry=IDEMPOTENT_RETRY,
                    timeout=self._settings.call_timeout_seconds,
                ),
            )
        except BackendRejected as exc:
            if isinstance(exc.__cause__, gexc.NotFound):
                raise EndpointGone(f"{endpoint}: {exc}") from exc
            raise
        text = type(found).to_json(found, use_integers_for_enums=False)
        return ObservedEndpoint.from_json(json.loads(text))

    def operation(self, name: str) -> OperationStatus:
        """Read one DeployModel operation (``…/endpoints/E/operations/ID``)."""
        from google.cloud.aiplatform_v1.types import DeployModelResponse

        client = self._client(name)
        op = call_vertex(
            "GetOperation",
            lambda: client.get_operation(
                request={"name": name},
                retry=IDEMPOTENT_RETRY,
                timeout=self._settings.call_timeout_seconds,
            ),
        )
        if not op.done:
            return OperationStatus(name=name, done=False)
        if op.HasField("error") and op.error.code:
            return OperationStatus(
                name=name, done=True, error_code=op.error.code, error_message=op.error.message
            )
        if op.response.type_url.rsplit("/", 1)[-1] != DEPLOY_RESPONSE:
            # MutateDeployedModel and UndeployModel: done is all there is to know.
            return OperationStatus(name=name, done=True)
        response = DeployModelResponse.deserialize(op.response.value)
        return OperationStatus(
            name=name, done=True, deployed_model_id=str(response.deployed_model.id) or None
        )

    def running_deploys(self, endpoint: str) -> tuple[datetime, ...] | None:
        """``ListOperations`` of the endpoint's operations not done: when each DeployModel
        among them started. A DeployModel's metadata does not name the model it deploys, so
        this is all a caller can know of one whose answer was lost. Asked with the ``done``
        filter Vertex's operations take; refused it (INVALID_ARGUMENT), the list is read
        whole and filtered here. At most :data:`RUNNING_PAGES` pages: past them, None."""
        from google.api_core import exceptions as gexc
        from google.cloud.aiplatform_v1.types import DeployModelOperationMetadata

        try:
            listed = self._operations(endpoint, "done=false")
        except BackendRejected as exc:
            if not isinstance(exc.__cause__, gexc.InvalidArgument):
                raise
            listed = self._operations(endpoint, "")
        if listed is None:
            return None
        started: list[datetime] = []
        for op in listed:
            if op.done or op.metadata.type_url.rsplit("/", 1)[-1] != DEPLOY_METADATA:
                continue
            metadata = DeployModelOperationMetadata.deserialize(op.metadata.value)
            created = metadata.generic_metadata.create_time
            # No start time: when it started is not known, so it may be anyone's.
            started.append(created if created else datetime.max.replace(tzinfo=UTC))
        return tuple(sorted(started))

    def _operations(self, endpoint: str, filter_: str) -> list[Any] | None:
        """The endpoint's operations matching ``filter_``, page by page, at most
        :data:`RUNNING_PAGES` pages of :data:`RUNNING_PAGE` (None: there are more)."""
        from google.longrunning import operations_pb2

        client = self._client(endpoint)
        timeout = self._settings.call_timeout_seconds
        found: list[Any] = []
        token = ""
        for _ in range(RUNNING_PAGES):
            request = operations_pb2.ListOperationsRequest(
                name=endpoint, filter=filter_, page_size=RUNNING_PAGE, page_token=token
            )
            listed = call_vertex("ListOperations", _listing(client, request, timeout))
            found.extend(list(listed.operations)[:RUNNING_PAGE])
            token = listed.next_page_token
            if not token:
                return found
        return None

    def deploy_on_demand(
        self,
        endpoint: str,
        display_name: str,
        replicas: int,
        template: Mapping[str, Any],
    ) -> str:
        """Start DeployModel of an on-demand model (a warm floor, or a fallback): the
        deployment's requested ``deployedModel`` (its model, machine, service account,
        logging, autoscaling: ``template``, validated at intake) with
        ``dedicatedResources.spot = false``, ``replicas`` as its min, max and required replica
        count, its own display name, and an empty ``traffic_split`` ("If this field is empty,
        then the Endpoint's trafficSplit is not updated": no traffic to it yet).

        Never retried in-process, like every creating call.
        """
        from google.cloud.aiplatform_v1.types import DedicatedResources, DeployedModel

        deployed = DeployedModel.from_json(json.dumps(dict(template)))
        deployed.id = ""
        deployed.display_name = display_name
        asked = deployed.dedicated_resources
        deployed.dedicated_resources = DedicatedResources(
            machine_spec=asked.machine_spec,
            min_replica_count=replicas,
            max_replica_count=replicas,
            required_replica_count=replicas,
            autoscaling_metric_specs=asked.autoscaling_metric_specs,
            spot=False,
        )
        return self._start(
            "DeployModel",
            "deploy_model",
            endpoint=endpoint,
            deployed_model=deployed,
        )

    def set_traffic(self, endpoint: str, split: Mapping[str, int], etag: str) -> datetime | None:
        """``UpdateEndpoint`` with update mask ``traffic_split`` and the read's ``etag``
        ("used to perform consistent read-modify-write updates"): an endpoint changed since
        that read is refused, and nothing moves. Not retried in-process: the next tick
        decides again from a fresh read. Returns the updated Endpoint's ``updateTime`` (the
        method returns the Endpoint), as a read decodes it."""
        from google.cloud.aiplatform_v1.types import Endpoint
        from google.protobuf import field_mask_pb2

        body = Endpoint(name=endpoint, traffic_split={str(k): int(v) for k, v in split.items()})
        if etag:
            body.etag = etag
        client = self._client(endpoint)
        updated = call_vertex(
            "UpdateEndpoint",
            lambda: client.update_endpoint(
                endpoint=body,
                update_mask=field_mask_pb2.FieldMask(paths=["traffic_split"]),
                retry=None,
                timeout=self._settings.call_timeout_seconds,
            ),
        )
        text = type(updated).to_json(updated, use_integers_for_enums=False)
        return ObservedEndpoint.from_json(json.loads(text)).updated_at

    def resize(self, endpoint: str, deployed_model_id: str, replicas: int) -> str:
        """Start MutateDeployedModel of the fallback's min, max and required replica count
        (the fields the v1 method may change); returns the operation's name."""
        from google.cloud.aiplatform_v1.types import DedicatedResources, DeployedModel
        from google.protobuf import field_mask_pb2

        deployed = DeployedModel(
            id=deployed_model_id,
            dedicated_resources=DedicatedResources(
                min_replica_count=replicas,
                max_replica_count=replicas,
                required_replica_count=replicas,
            ),
        )
        paths = [
            f"dedicated_resources.{field}_replica_count" for field in ("min", "max", "required")
        ]
        return self._start(
            "MutateDeployedModel",
            "mutate_deployed_model",
            endpoint=endpoint,
            deployed_model=deployed,
            update_mask=field_mask_pb2.FieldMask(paths=paths),
        )

    def undeploy(self, endpoint: str, deployed_model_id: str) -> str:
        """Start UndeployModel with no ``traffic_split``: the model has none (the rule only
        undeploys a model without traffic), and the endpoint's split is left as it is."""
        return self._start(
            "UndeployModel",
            "undeploy_model",
            endpoint=endpoint,
            deployed_model_id=deployed_model_id,
        )
