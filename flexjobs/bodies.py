"""Request bodies from what a publisher holds: a request message, or a Vertex job built with the
official SDK (``aiplatform.CustomJob``, ``aiplatform.HyperparameterTuningJob``) or its v1 proto.

An SDK job is read as built: its resource (``job._gca_resource``, the v1 proto the SDK's
``submit()`` would send) is written in the v1 REST form (camelCase, enum names, int64 as
strings, no defaults), so whatever the SDK object holds, its ``jobSpec.scheduling`` included
(``job.job_spec.scheduling.strategy = FLEX_START``), is what flexjobs receives. The
scheduling knobs the SDK's ``submit()`` takes can be given here instead, since ``submit()``
is never called.

Examples:
    >>> scheduling_fields(scheduling_strategy="FLEX_START", max_wait_duration=0, timeout=None)
    {'strategy': 'FLEX_START', 'maxWaitDuration': '0s'}
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from shared.domain.model.kinds import ALL_KINDS, JobKind, kind_named
from shared.kernel.errors import FieldError, InvalidRequest

#: The SDK kinds flexjobs takes as objects, by their v1 message name.
_BY_MESSAGE = {kind.message: kind for kind in ALL_KINDS}


def _resource(job: Any) -> Any:
    """The v1 resource of an SDK job (its ``_gca_resource``), or the proto itself."""
    return getattr(job, "_gca_resource", job)


def _message_name(resource: Any) -> str | None:
    descriptor = getattr(resource, "DESCRIPTOR", None)  # a raw protobuf message
    if descriptor is not None and hasattr(descriptor, "full_name"):
        return str(descriptor.name)
    pb = getattr(type(resource), "pb", None)  # a proto-plus message
    if callable(pb) and hasattr(type(resource), "to_json"):
        return type(resource).__name__
    return None


def is_vertex_object(value: Any) -> bool:
    """An SDK job or a v1 proto of a kind flexjobs takes (not a plain mapping)."""
    if isinstance(value, Mapping):
        return False
    name = _message_name(_resource(value))
    return name in _BY_MESSAGE


def vertex_body(job: Any) -> tuple[JobKind, dict[str, Any]]:
    """(kind, v1 REST body) of an SDK job or a v1 proto (proto-plus or raw protobuf).

    Raises:
        InvalidRequest: ``job`` is none of the kinds flexjobs runs.
    """
    resource = _resource(job)
    name = _message_name(resource)
    kind = _BY_MESSAGE.get(name or "")
    if kind is None:
        what = type(job).__name__
        raise InvalidRequest(
            [FieldError("$", f"a {what} is not a request message nor a Vertex job flexjobs runs")]
        )
    if hasattr(resource, "DESCRIPTOR"):
        from google.protobuf import json_format

        body: dict[str, Any] = json_format.MessageToDict(resource)
    else:
        # The REST form, as the SDK's own types write it (the form Vertex's REST API takes).
        text = type(resource).to_json(
            resource, use_integers_for_enums=False, always_print_fields_with_no_presence=False
        )
        body = json.loads(text)
    if resource is not job:
        _as_sdk_sends(job, kind, body)
    return kind, body


#: What the SDK's own ``submit()`` (a CustomJob) and ``run()`` (a HyperparameterTuningJob) take
#: from ``aiplatform.init`` when the job does not set it: the service account for both, the
#: network for a tuning job only (``CustomJob.submit`` takes the network from its argument
#: alone; google-cloud-aiplatform's ``jobs.py``).
_FROM_INIT = {
    "customJob": ("jobSpec", ("service_account",)),
    "hyperparameterTuningJob": ("trialJobSpec", ("service_account", "network")),
}


def _as_sdk_sends(job: Any, kind: JobKind, body: dict[str, Any]) -> None:
    """Fill in what the SDK's own ``submit()``/``run()`` would have set on ``body`` from its
    global configuration, where the job leaves it unset: published as built, the job must run
    as the SDK would have run it (as ``aiplatform.init(service_account=...)``'s identity, not
    Vertex's default one)."""
    taken = _FROM_INIT.get(kind.name)
    if taken is None:
        return
    try:
        from google.cloud.aiplatform import initializer
    except ImportError:  # not an SDK object after all: nothing was configured
        return
    spec_key, fields = taken
    spec = body.setdefault(spec_key, {})
    if not isinstance(spec, dict):
        return
    for field in fields:
        value = getattr(initializer.global_config, field, None)
        key = "serviceAccount" if field == "service_account" else "network"
        if isinstance(value, str) and value and not spec.get(key):
            spec[key] = value


def _duration(seconds: int | float | None) -> str | None:
    """A duration in the proto3 JSON form the SDK sends (``Duration(seconds=...)``): the
    seconds exactly, ``2592000s``, never ``2.592e+06s`` (which Vertex refuses)."""
    if seconds is None:
        return None
    from google.protobuf.duration_pb2 import Duration

    duration = Duration()
    duration.FromNanoseconds(round(seconds * 1_000_000_000))
    return str(duration.ToJsonString())


def scheduling_fields(
    *,
    scheduling_strategy: Any = None,
    max_wait_duration: int | None = None,
    timeout: int | None = None,
    restart_job_on_worker_restart: bool | None = None,
) -> dict[str, Any]:
    """The ``scheduling`` fields the SDK's ``submit()`` would set from its keyword arguments
    (seconds as durations, the strategy enum by name; ``AUTO`` is flexjobs' own)."""
    fields: dict[str, Any] = {}
    if scheduling_strategy is not None:
        strategy = getattr(scheduling_strategy, "name", scheduling_strategy)
        fields["strategy"] = str(strategy)
    if (wait := _duration(max_wait_duration)) is not None:
        fields["maxWaitDuration"] = wait
    if (limit := _duration(timeout)) is not None:
        fields["timeout"] = limit
    if restart_job_on_worker_restart is not None:
        fields["restartJobOnWorkerRestart"] = restart_job_on_worker_restart
    return fields


def with_scheduling(kind: JobKind, body: dict[str, Any], fields: Mapping[str, Any]) -> None:
    """Set ``fields`` in the body's scheduling (where the kind keeps its CustomJobSpec), over
    what the body holds; the others stay."""
    if not fields:
        return
    if not kind.training:
        raise InvalidRequest(
            [FieldError(kind.name, "takes no scheduling: a deployment runs on Spot VMs")]
        )
    spec = body
    for key in kind.job_spec:
        spec = spec.setdefault(key, {})
        if not isinstance(spec, dict):
            raise InvalidRequest([FieldError(f"{kind.name}.{key}", "must be an object")])
    scheduling = spec.setdefault("scheduling", {})
    if not isinstance(scheduling, dict):
        raise InvalidRequest([FieldError("scheduling", "must be an object")])
    scheduling.update(fields)


def request_body(
    request: Any,
    *,
    region: str | None = None,
    display_name: str | None = None,
    scheduling: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The request message for ``request`` (a message mapping, an SDK job or a v1 proto): a
    copy, never the caller's object. An SDK job's ``location`` becomes the envelope's
    ``location`` unless ``region`` names one; ``display_name`` sets the body's
    ``displayName``."""
    if is_vertex_object(request):
        kind, vertex = vertex_body(request)
        body: dict[str, Any] = {kind.name: vertex}
        sdk_location = getattr(request, "location", None)
        if region is None and isinstance(sdk_location, str) and sdk_location:
            region = sdk_location
    elif isinstance(request, Mapping):
        body = copy.deepcopy(dict(request))
    else:
        raise InvalidRequest(
            [FieldError("$", f"a {type(request).__name__} is not a request message")]
        )
    if region is not None:
        body["location"] = region
    kind_of = next((k for k in (kind_named(key) for key in body) if k is not None), None)
    if display_name is not None and kind_of is not None and isinstance(body[kind_of.name], dict):
        body[kind_of.name]["displayName"] = display_name
    if scheduling and kind_of is not None and isinstance(body[kind_of.name], dict):
        with_scheduling(kind_of, body[kind_of.name], scheduling)
    return body
