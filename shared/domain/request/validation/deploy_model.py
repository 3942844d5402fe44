"""The ``deployModel`` kind: a DeployModelRequest deploying a model on Spot VMs.

Its endpoint and model must be resource names in one region (the request's location, when it
names one), its ``dedicatedResources`` must set ``spot: true`` and stay within the operator's
replica and GPU caps, and its ``trafficSplit`` must give this deployment (``"0"``) a share that,
with the others', adds up to 100.
"""

from __future__ import annotations

import re
from typing import Any, Final

from shared.domain.model.strategies import Strategy
from shared.domain.model.values import key_path, kind_of, show
from shared.domain.request.validation.fields import check_machine_spec, check_service_account
from shared.domain.request.validation.readers import Context, read_int, read_object, read_str
from shared.domain.request.wire import (
    DEPLOYED_MODEL_ID,
    DEPLOYED_REPLICAS,
    MODEL_VERSION,
    RESOURCE_SEGMENT,
    TRAFFIC_SHARE,
)
from shared.kernel.regions import REGION_HINT, is_region

DEFAULT_DEPLOY_MACHINE: Final = "n1-standard-2"

# The names' forms are the request model's (its schema states them with a valid region); here
# any location text is matched first, so that a bad one is reported as a bad location.
_ENDPOINT_NAME = re.compile(
    rf"projects/(?P<project>{RESOURCE_SEGMENT})/locations/(?P<location>[^/]*)"
    rf"/endpoints/(?P<endpoint>{RESOURCE_SEGMENT})"
)
_MODEL_NAME = re.compile(
    rf"projects/(?P<project>{RESOURCE_SEGMENT})/locations/(?P<location>[^/]*)"
    rf"/models/(?P<model>{RESOURCE_SEGMENT}){MODEL_VERSION}"
)
_DEPLOYED_MODEL_ID = re.compile(DEPLOYED_MODEL_ID)


def check_deploy_model(ctx: Context, spec: dict[str, Any]) -> None:
    base = "deployModel"
    endpoint_location = _read_location(
        ctx,
        spec,
        "endpoint",
        base,
        pattern=_ENDPOINT_NAME,
        what="the endpoint resource name projects/P/locations/L/endpoints/E",
        form="an endpoint resource name; use "
        "projects/PROJECT/locations/LOCATION/endpoints/ENDPOINT_ID",
    )
    if endpoint_location and ctx.location and ctx.location != endpoint_location:
        ctx.add(
            f"{base}.endpoint",
            f"is in {endpoint_location} but the request's location is "
            f"{show(ctx.location)}; make them the same",
        )
    deployed = read_object(
        ctx, spec, "deployedModel", base, required=True, what="the model to deploy"
    )
    if deployed is not None:
        _check_deployed_model(ctx, deployed, f"{base}.deployedModel", endpoint_location)
    _check_traffic_split(ctx, spec, base)


def _check_deployed_model(
    ctx: Context, deployed: dict[str, Any], base: str, endpoint_location: str | None
) -> None:
    model_location = _read_location(
        ctx,
        deployed,
        "model",
        base,
        pattern=_MODEL_NAME,
        what="the model resource name projects/P/locations/L/models/M",
        form="a model resource name; use "
        "projects/PROJECT/locations/LOCATION/models/MODEL_ID (optionally @VERSION)",
    )
    if model_location and endpoint_location and model_location != endpoint_location:
        ctx.add(
            f"{base}.model",
            f"is in {model_location} but the endpoint is in {endpoint_location}; a "
            "model deploys only to an endpoint in its own location",
        )
    read_str(ctx, deployed, "displayName", base, required=False, what="a name for the deployment")
    check_service_account(ctx, deployed, base)
    if deployed.get("automaticResources") is not None:
        ctx.add(
            f"{base}.automaticResources",
            "is not supported: deployments run on Spot VMs; use dedicatedResources with spot: true",
        )
    resources = read_object(
        ctx,
        deployed,
        "dedicatedResources",
        base,
        required=True,
        what="machineSpec, spot: true, minReplicaCount and maxReplicaCount",
    )
    if resources is not None:
        _check_dedicated_resources(ctx, resources, f"{base}.dedicatedResources")


def _read_location(
    ctx: Context,
    node: dict[str, Any],
    key: str,
    base: str,
    *,
    pattern: re.Pattern[str],
    what: str,
    form: str,
) -> str | None:
    """Read a resource name; return its location when the name and the region are valid."""
    name = read_str(ctx, node, key, base, required=True, what=what)
    if name is None:
        return None
    match = pattern.fullmatch(name)
    if match is None:
        ctx.add(f"{base}.{key}", f"{show(name)} is not {form}")
        return None
    if not is_region(match["location"]):
        ctx.add(f"{base}.{key}", f"location {show(match['location'])} is not {REGION_HINT}")
        return None
    return str(match["location"])


def _check_dedicated_resources(ctx: Context, resources: dict[str, Any], base: str) -> None:
    spot = resources.get("spot")
    if spot is not True:
        # In the canonical body false is the default value, so it arrives as missing.
        got = "false or missing" if spot is None else show(spot)
        ctx.add(
            f"{base}.spot",
            f"must be true: this request kind deploys on Spot VMs (got {got}); deploy "
            "on-demand capacity another way",
        )
    per_replica = check_machine_spec(
        ctx,
        resources.get("machineSpec"),
        f"{base}.machineSpec",
        strategy=Strategy.SPOT,
        default=DEFAULT_DEPLOY_MACHINE,
    )
    low = read_int(
        ctx,
        resources,
        "minReplicaCount",
        base,
        required=True,
        bounds=DEPLOYED_REPLICAS,
        what="replicas always running",
    )
    high = read_int(
        ctx,
        resources,
        "maxReplicaCount",
        base,
        required=False,
        # The model allows 0 (proto3's default, read as absent), which the canonical form
        # drops before any check: what is left to check is a replica count, 1 or more.
        bounds=DEPLOYED_REPLICAS,
        what="replicas under peak load",
    )
    if low is not None and high is not None and high < low:
        ctx.add(
            f"{base}.maxReplicaCount",
            f"must be at least minReplicaCount ({low}), not {high}",
        )
    # Vertex uses minReplicaCount when maxReplicaCount is absent; the peak is what is charged.
    peak = high if high is not None else low
    if peak is None:
        return
    replicas_field = "maxReplicaCount" if high is not None else "minReplicaCount"
    if peak > ctx.guards.max_replicas:
        ctx.add(
            f"{base}.{replicas_field}",
            f"asks for up to {peak} replicas; the operator limit is "
            f"{ctx.guards.max_replicas} (FLEXJOBS_MAX_REPLICAS)",
        )
    if per_replica * peak > ctx.guards.max_gpus_per_job:
        ctx.add(
            base,
            f"asks for up to {per_replica * peak} GPUs ({per_replica} per replica x {peak} "
            f"replicas); the operator limit is {ctx.guards.max_gpus_per_job} GPUs per job "
            "(FLEXJOBS_MAX_GPUS_PER_JOB)",
        )


def _check_traffic_split(ctx: Context, spec: dict[str, Any], base: str) -> None:
    path = f"{base}.trafficSplit"
    if spec.get("trafficSplit") is None:
        return  # Vertex then leaves the endpoint's traffic split as it is.
    split = spec["trafficSplit"]
    if not isinstance(split, dict):
        ctx.add(path, f'must be an object such as {{"0": 100}}, not {kind_of(split)}')
        return
    if "0" not in split:
        ctx.add(path, 'must include "0", this deployment, for example {"0": 100}')
    total = 0
    all_valid = True
    for key, value in split.items():
        share_path = key_path(path, key)
        if not (isinstance(key, str) and _DEPLOYED_MODEL_ID.fullmatch(key)):
            ctx.add(share_path, 'keys must be "0" (this deployment) or a deployed model id')
        if not TRAFFIC_SHARE.holds(value):
            ctx.add(
                share_path,
                f"must be an integer percentage from {TRAFFIC_SHARE.minimum} to "
                f"{TRAFFIC_SHARE.maximum}, not {kind_of(value)} {show(value)}",
            )
            all_valid = False
        else:
            total += value
    if all_valid and split and total != 100:
        ctx.add(path, f"percentages must add up to 100, not {total}")
