"""VertexDeploymentBackend: the DeploymentBackend port on ``aiplatform_v1.EndpointServiceClient``.

``DeployModel`` is a long-running operation: :meth:`VertexDeploymentBackend.deploy` starts it
and returns the operation's name without waiting (a deployment takes minutes; the scheduler
tick follows it with ``GetOperation``). The deployed model's display name carries the request's
tag (:mod:`shared.domain.decisions.deploy_model`), which :meth:`~VertexDeploymentBackend.find`
looks for on the endpoint before anything is deployed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from shared.adapters.vertex.jobs import (
    ENDPOINT_SERVICE,
    IDEMPOTENT_RETRY,
    GapicClients,
    call_vertex,
    location_of,
)
from shared.domain.decisions.deploy_model import OperationStatus, carries_tag, tagged_display_name
from shared.domain.request.message import JobRequest
from shared.domain.serving.model import ObservedEndpoint
from shared.kernel.config import Settings


def _deployed_model(request: JobRequest) -> Any:
    from google.cloud.aiplatform_v1.types import DeployedModel

    return DeployedModel.from_json(json.dumps(request.spec.get("deployedModel")))


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

    def find(self, endpoint: str, request_id: str) -> str | None:
        """The id of the deployed model on ``endpoint`` whose display name carries the tag."""
        client = self._client(endpoint)
        found = call_vertex(
            "GetEndpoint",
            lambda: client.get_endpoint(
                name=endpoint, retry=IDEMPOTENT_RETRY, timeout=self._settings.call_timeout_seconds
            ),
        )
        for deployed in found.deployed_models:
            if carries_tag(deployed.display_name, request_id):
                return str(deployed.id)
        return None

    def deploy(self, request: JobRequest) -> str:
        """Start DeployModel; returns the operation name at once (never waits for it).

        Never retried in-process: a DeployModel that timed out may have started, and only the
        redelivery's :meth:`find` can tell.
        """
        endpoint = str(request.spec["endpoint"])
        deployed = _deployed_model(request)
        deployed.display_name = tagged_display_name(deployed.display_name, request.request_id)
        split = request.spec.get("trafficSplit") or {}
        client = self._client(endpoint)
        started = call_vertex(
            "DeployModel",
            lambda: client.deploy_model(
                endpoint=endpoint,
                deployed_model=deployed,
                traffic_split={str(k): int(v) for k, v in split.items()},
                retry=None,
                timeout=self._settings.call_timeout_seconds,
            ),
            creates=True,
        )
        # An api_core Operation future; its raw operations_pb2.Operation has the name.
        return str(started.operation.name)

    def read(self, endpoint: str) -> ObservedEndpoint:
        """One ``GetEndpoint`` (idempotent, so retried by api_core), as the serving rule reads
        it: the v1 ``Endpoint`` in its JSON form (camelCase), decoded bounded by
        :meth:`ObservedEndpoint.from_json`."""
        client = self._client(endpoint)
        found = call_vertex(
            "GetEndpoint",
            lambda: client.get_endpoint(
                name=endpoint, retry=IDEMPOTENT_RETRY, timeout=self._settings.call_timeout_seconds
            ),
        )
        return ObservedEndpoint.from_json(json.loads(type(found).to_json(found)))

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
        response = DeployModelResponse.deserialize(op.response.value)
        return OperationStatus(
            name=name, done=True, deployed_model_id=str(response.deployed_model.id) or None
        )
