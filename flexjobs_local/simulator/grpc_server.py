"""gRPC front of the simulator: the real ``google.cloud.aiplatform.v1`` wire protocol.

The GAPIC package ships no servicer stubs, so each service is a generic handler mapping method
names to functions that deserialize with the proto-plus classes and call the engine. Every call
is written to the engine's call log with the status it got, and may be failed by an injected
fault.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from google.cloud import aiplatform_v1 as v1
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2, json_format

from flexjobs_local.simulator import cloudquotas
from flexjobs_local.simulator.common import SimError
from flexjobs_local.simulator.engine import Engine

JOB_SERVICE = "google.cloud.aiplatform.v1.JobService"
ENDPOINT_SERVICE = "google.cloud.aiplatform.v1.EndpointService"
PIPELINE_SERVICE = "google.cloud.aiplatform.v1.PipelineService"
OPERATIONS_SERVICE = "google.longrunning.Operations"
CLOUDQUOTAS_SERVICE = cloudquotas.SERVICE


def _request_json(request: Any) -> dict[str, Any]:
    if hasattr(type(request), "to_json"):  # proto-plus
        text = type(request).to_json(
            request, use_integers_for_enums=False, always_print_fields_with_no_presence=False
        )
        result: dict[str, Any] = json.loads(text)
    else:
        result = json_format.MessageToDict(request)
    return result


def _serialize_pb(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return data


class _Method:
    """One unary RPC: logging, fault injection and SimError → status translation around ``impl``."""

    def __init__(self, engine: Engine, name: str, impl: Callable[[Any], Any]) -> None:
        self._engine = engine
        self._name = name
        self._impl = impl

    def __call__(self, request: Any, context: grpc.ServicerContext) -> Any:
        request_json = _request_json(request)
        fault = self._engine.take_fault(self._name)
        delay = fault.delay_seconds if fault is not None else 0.0
        if fault is not None and fault.when == "before":
            time.sleep(delay)  # a slow call: it takes effect (if at all) only after the wait
            if fault.code != "OK":
                self._fail(context, request_json, fault.code, fault.message)
        if fault is not None and fault.when == "late":
            timer = threading.Timer(fault.late_seconds, self._late, args=(request,))
            timer.daemon = True
            timer.start()
            time.sleep(delay)
            self._fail(context, request_json, fault.code, fault.message)
        try:
            response = self._impl(request)
        except SimError as err:
            failure: SimError | None = err
        else:
            failure = None
        if failure is not None:
            self._fail(context, request_json, failure.code, failure.message)
        if fault is not None and fault.when == "after":
            if fault.code == "OK":
                # Logged when it took effect; the answer waits (its caller may die meanwhile).
                self._record_ok(context, request_json)
                time.sleep(delay)
                return response
            time.sleep(delay)
            # The call took effect, but the caller never learns so.
            self._fail(context, request_json, fault.code, fault.message, took_effect=True)
        self._record_ok(context, request_json)
        return response

    def _record_ok(self, context: grpc.ServicerContext, request_json: dict[str, Any]) -> None:
        # A slow call may take effect after its caller gave up (its deadline passed): it
        # happened all the same, and the log says who was no longer listening.
        gone = "" if context.is_active() else "the caller had gone (its deadline passed)"
        self._engine.record_call(self._name, request_json, "OK", gone)

    def _late(self, request: Any) -> None:
        """Let a call whose caller was already answered with a fault take effect now."""
        try:
            self._impl(request)
        except SimError as err:
            self._engine.record_call(self._name, _request_json(request), err.code, err.message)

    def _fail(
        self,
        context: grpc.ServicerContext,
        request_json: dict[str, Any],
        code: str,
        message: str,
        *,
        took_effect: bool = False,
    ) -> None:
        self._engine.record_call(self._name, request_json, code, message, took_effect=took_effect)
        context.abort(grpc.StatusCode[code], message)  # raises: the handler ends here


def _handler(
    engine: Engine,
    name: str,
    impl: Callable[[Any], Any],
    request_cls: Any,
    serializer: Callable[[Any], bytes],
) -> grpc.RpcMethodHandler:
    deserializer = (
        request_cls.deserialize if hasattr(request_cls, "deserialize") else request_cls.FromString
    )
    return grpc.unary_unary_rpc_method_handler(
        _Method(engine, name, impl),
        request_deserializer=deserializer,
        response_serializer=serializer,
    )


def _resource_handlers(
    engine: Engine, resource: str, field: str, plural: str
) -> dict[str, grpc.RpcMethodHandler]:
    """Create/Get/List/Cancel for one job-like resource (``CustomJob``, ...)."""
    msg_cls = getattr(v1, resource)
    list_response_cls = getattr(v1, f"List{plural}Response")
    plural_field = re.sub(r"(?<!^)(?=[A-Z])", "_", plural).lower()

    def create(req: Any) -> Any:
        return engine.create_job(resource, req.parent, getattr(req, field))

    def get(req: Any) -> Any:
        return engine.get_job(resource, req.name)

    def list_(req: Any) -> Any:
        items, token = engine.list_jobs(
            resource, req.parent, req.filter, req.page_size, req.page_token
        )
        return list_response_cls(**{plural_field: items, "next_page_token": token})

    def cancel(req: Any) -> Any:
        engine.cancel_job(resource, req.name)
        return empty_pb2.Empty()

    return {
        f"Create{resource}": _handler(
            engine,
            f"Create{resource}",
            create,
            getattr(v1, f"Create{resource}Request"),
            msg_cls.serialize,
        ),
        f"Get{resource}": _handler(
            engine, f"Get{resource}", get, getattr(v1, f"Get{resource}Request"), msg_cls.serialize
        ),
        f"List{plural}": _handler(
            engine,
            f"List{plural}",
            list_,
            getattr(v1, f"List{plural}Request"),
            list_response_cls.serialize,
        ),
        f"Cancel{resource}": _handler(
            engine,
            f"Cancel{resource}",
            cancel,
            getattr(v1, f"Cancel{resource}Request"),
            _serialize_pb,
        ),
    }


def _job_handlers(engine: Engine) -> dict[str, grpc.RpcMethodHandler]:
    return {
        **_resource_handlers(engine, "CustomJob", "custom_job", "CustomJobs"),
        **_resource_handlers(
            engine,
            "HyperparameterTuningJob",
            "hyperparameter_tuning_job",
            "HyperparameterTuningJobs",
        ),
    }


def _pipeline_handlers(engine: Engine) -> dict[str, grpc.RpcMethodHandler]:
    return _resource_handlers(engine, "TrainingPipeline", "training_pipeline", "TrainingPipelines")


def _endpoint_handlers(engine: Engine) -> dict[str, grpc.RpcMethodHandler]:
    def create(req: Any) -> Any:
        return engine.create_endpoint(req.parent, req.endpoint, req.endpoint_id)

    def get(req: Any) -> Any:
        return engine.get_endpoint(req.name)

    def list_(req: Any) -> Any:
        items, token = engine.list_endpoints(req.parent, req.page_size, req.page_token)
        return v1.ListEndpointsResponse(endpoints=items, next_page_token=token)

    def deploy(req: Any) -> Any:
        return engine.deploy_model(req.endpoint, req.deployed_model, dict(req.traffic_split))

    def undeploy(req: Any) -> Any:
        return engine.undeploy_model(req.endpoint, req.deployed_model_id, dict(req.traffic_split))

    def update(req: Any) -> Any:
        return engine.update_endpoint(req.endpoint, list(req.update_mask.paths))

    def mutate(req: Any) -> Any:
        return engine.mutate_deployed_model(
            req.endpoint, req.deployed_model, list(req.update_mask.paths)
        )

    return {
        "CreateEndpoint": _handler(
            engine, "CreateEndpoint", create, v1.CreateEndpointRequest, _serialize_pb
        ),
        "GetEndpoint": _handler(
            engine, "GetEndpoint", get, v1.GetEndpointRequest, v1.Endpoint.serialize
        ),
        "ListEndpoints": _handler(
            engine,
            "ListEndpoints",
            list_,
            v1.ListEndpointsRequest,
            v1.ListEndpointsResponse.serialize,
        ),
        "DeployModel": _handler(
            engine, "DeployModel", deploy, v1.DeployModelRequest, _serialize_pb
        ),
        "UndeployModel": _handler(
            engine, "UndeployModel", undeploy, v1.UndeployModelRequest, _serialize_pb
        ),
        # Synchronous in v1: the answer is the updated Endpoint, not an operation.
        "UpdateEndpoint": _handler(
            engine, "UpdateEndpoint", update, v1.UpdateEndpointRequest, v1.Endpoint.serialize
        ),
        "MutateDeployedModel": _handler(
            engine, "MutateDeployedModel", mutate, v1.MutateDeployedModelRequest, _serialize_pb
        ),
    }


def _operations_handlers(engine: Engine) -> dict[str, grpc.RpcMethodHandler]:
    def get(req: Any) -> Any:
        return engine.get_operation(req.name)

    def listed(req: Any) -> Any:
        return engine.list_operations(req.name, req.filter, req.page_size, req.page_token)

    return {
        "GetOperation": _handler(
            engine, "GetOperation", get, operations_pb2.GetOperationRequest, _serialize_pb
        ),
        "ListOperations": _handler(
            engine, "ListOperations", listed, operations_pb2.ListOperationsRequest, _serialize_pb
        ),
    }


def _cloudquotas_handlers(engine: Engine) -> dict[str, grpc.RpcMethodHandler]:
    from google.cloud import cloudquotas_v1 as cq

    return {
        "ListQuotaInfos": _handler(
            engine,
            "ListQuotaInfos",
            lambda req: cloudquotas.list_quota_infos(engine, req),
            cq.ListQuotaInfosRequest,
            cq.ListQuotaInfosResponse.serialize,
        ),
    }


def build_server(
    engine: Engine, port: int = 0, host: str = "127.0.0.1", max_workers: int = 8
) -> tuple[grpc.Server, int]:
    """A started-ready (not yet started) gRPC server bound to ``host:port``; returns the port.

    Raises:
        RuntimeError: the port could not be bound.
    """
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="sim-grpc"),
        # gRPC binds with SO_REUSEPORT by default: a port another gRPC server holds would be
        # shared without a word, the calls split between the two. Off, a taken port fails
        # the bind, and the stack starts again on new ports (flexjobs_local.procs.PortTaken).
        options=[("grpc.so_reuseport", 0)],
    )
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(JOB_SERVICE, _job_handlers(engine)),
            grpc.method_handlers_generic_handler(PIPELINE_SERVICE, _pipeline_handlers(engine)),
            grpc.method_handlers_generic_handler(ENDPOINT_SERVICE, _endpoint_handlers(engine)),
            grpc.method_handlers_generic_handler(OPERATIONS_SERVICE, _operations_handlers(engine)),
            # Cloud Quotas on the same port: FLEXJOBS_CLOUDQUOTAS_ENDPOINT names it too.
            grpc.method_handlers_generic_handler(
                cloudquotas.SERVICE, _cloudquotas_handlers(engine)
            ),
        )
    )
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise RuntimeError(f"could not bind the gRPC port {host}:{port}")
    return server, bound


__all__ = [
    "CLOUDQUOTAS_SERVICE",
    "ENDPOINT_SERVICE",
    "JOB_SERVICE",
    "OPERATIONS_SERVICE",
    "PIPELINE_SERVICE",
    "build_server",
]
