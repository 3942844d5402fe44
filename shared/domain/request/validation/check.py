"""Check a whole request: its body by kind, then each ``fallback`` rung as the attempt it would
produce; and :func:`validators`, the list intake runs on every request."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from shared.domain.model.kinds import (
    CUSTOM_JOB,
    DEPLOY_MODEL,
    HYPERPARAMETER_TUNING_JOB,
    KINDS,
    TRAINING_KINDS,
    TRAINING_PIPELINE,
    JobKind,
    kind_named,
)
from shared.domain.model.strategies import AUTO, STRATEGIES
from shared.domain.model.values import kind_of, show
from shared.domain.model.vertex_jobs import location_of
from shared.domain.policy.checkpoints import split_gcs_uri
from shared.domain.policy.retry import check_fallback, placement_for
from shared.domain.request.attempts import attempt_spec
from shared.domain.request.auto_regions import RegionOptions, check_region_moves
from shared.domain.request.message import (
    JobRequest,
    check_options,
    job_spec_of,
    job_spec_path,
    strategy_path,
)
from shared.domain.request.serving_options import required_replicas
from shared.domain.request.validation.deploy_model import check_deploy_model
from shared.domain.request.validation.guards import Guards
from shared.domain.request.validation.readers import Context
from shared.domain.request.validation.training import (
    check_custom_job,
    check_training_pipeline,
    check_tuning_job,
)
from shared.kernel.errors import FieldError

#: A check of a parsed request: every problem found, empty when there is none.
Validator = Callable[[JobRequest], list[FieldError]]

#: Each declared kind's body check (tests/unit/test_kind_declarations.py holds every kind to one).
_BODY_CHECKS: dict[JobKind, Callable[[Context, dict[str, Any]], None]] = {
    CUSTOM_JOB: check_custom_job,
    HYPERPARAMETER_TUNING_JOB: check_tuning_job,
    TRAINING_PIPELINE: check_training_pipeline,
    DEPLOY_MODEL: check_deploy_model,
}


def validators(guards: Guards) -> tuple[Validator, ...]:
    """Every check intake runs on a parsed request, in order, under the operator's ``guards``.

    The body was already read with the v1 protos by
    :func:`~shared.domain.request.message.parse_request`, so these run on its canonical form.

    Examples:
        >>> from shared.domain.request.message import JobRequest
        >>> request = JobRequest("r1", "deployModel", {}, options={"fallback": []})
        >>> [e.path for check in validators(Guards()) for e in check(request)]
        ['deployModel.endpoint', 'deployModel.deployedModel', 'fallback']
    """
    return (
        functools.partial(check_request, guards=guards),
        check_options,
        functools.partial(check_checkpoints_apart, guards=guards),
    )


def check_checkpoints_apart(request: JobRequest, guards: Guards) -> list[FieldError]:
    """A training job may not checkpoint into the request bucket: whoever may upload a
    request there could forge its checkpoints (and its progress, and its resume point).

    Examples:
        >>> spec = {"jobSpec": {"baseOutputDirectory": {"outputUriPrefix": "gs://uploads/out"}}}
        >>> request = JobRequest("r1", "customJob", spec)
        >>> [e.path for e in check_checkpoints_apart(request, Guards(request_bucket="uploads"))]
        ['customJob.jobSpec.baseOutputDirectory.outputUriPrefix']
    """
    if guards.request_bucket is None or request.kind not in TRAINING_KINDS:
        return []
    output = (job_spec_of(request.kind, request.spec) or {}).get("baseOutputDirectory")
    output_path = ".".join((request.kind, *job_spec_path(request.kind), "baseOutputDirectory"))
    places = {
        "checkpointUri": request.options.get("checkpointUri"),
        f"{output_path}.outputUriPrefix": (
            output.get("outputUriPrefix") if isinstance(output, dict) else None
        ),
    }
    problem = (
        f"is in gs://{guards.request_bucket}, the request bucket (FLEXJOBS_REQUEST_BUCKET): "
        "outputs and checkpoints go to a bucket of their own, where uploaders cannot write"
    )
    return [
        FieldError(path, problem)
        for path, uri in places.items()
        if isinstance(uri, str) and _bucket_of(uri) == guards.request_bucket
    ]


def _bucket_of(uri: str) -> str | None:
    try:
        return split_gcs_uri(uri)[0]
    except ValueError:
        return None  # not a Cloud Storage URI: reported where it is checked


def check_request(request: JobRequest, guards: Guards) -> list[FieldError]:
    """Return every problem with ``request`` (a :class:`JobRequest`); empty means valid.

    Never raises, whatever JSON the request's body holds. The options (``retryPolicy``,
    ``fallback``, ``checkpointUri``) are :func:`~shared.domain.request.message.check_options`'s.

    Examples:
        >>> from shared.domain.request.message import parse_request
        >>> body = {"customJob": {"displayName": "x", "jobSpec": {"workerPoolSpecs": [{
        ...     "machineSpec": {"machineType": "g2-standard-4", "acceleratorType": "NVIDIA_L4",
        ...                     "acceleratorCount": 1},
        ...     "replicaCount": 1, "containerSpec": {"imageUri": "python:3.10"}}]}}}
        >>> check_request(parse_request(body, {}, "m1"), Guards())
        []
        >>> body["customJob"]["jobSpec"]["scheduling"] = {"strategy": "LOW_COST"}
        >>> [e.path for e in check_request(parse_request(body, {}, "m1"), Guards())]
        ['customJob.jobSpec.scheduling.strategy']
    """
    errors = _check_body(request, guards)
    return [
        *errors,
        *_check_rungs(request, guards, errors),
        *_check_auto_choices(request, guards, errors),
        *_check_region_moves(request, guards),
        *_check_allowed_regions(request, guards),
        *_check_serving_caps(request, guards),
    ]


def _count(value: object) -> int:
    """A count as a valid body holds it, else 0 (its own check reports it)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _check_serving_caps(request: JobRequest, guards: Guards) -> list[FieldError]:
    """A deployment's extra Spot replicas count against the operator's caps as its own do:
    its Spot model asks for the required replicas the floor does not cover, plus the extra
    ones (``FLEXJOBS_MAX_REPLICAS``), and every replica it may run at once, floor and extra
    included, holds its GPUs (``FLEXJOBS_MAX_GPUS_PER_JOB``)."""
    options = getattr(request, "options", None)
    options = options if isinstance(options, dict) else {}
    extra = _count(options.get("extraSpotReplicas"))
    if getattr(request, "kind", None) != DEPLOY_MODEL.name or extra == 0:
        return []
    spec = getattr(request, "spec", None)
    spec = spec if isinstance(spec, dict) else {}
    required = required_replicas(spec)
    floor = min(_count(options.get("minOnDemandReplicas")), required)
    spot = required - floor + extra
    errors = []
    if spot > guards.max_replicas:
        errors.append(
            FieldError(
                "extraSpotReplicas",
                f"makes the Spot model ask for {spot} replicas ({required} required - {floor} "
                f"on demand + {extra}); the operator limit is {guards.max_replicas} "
                "(FLEXJOBS_MAX_REPLICAS)",
            )
        )
    deployed = spec.get("deployedModel")
    resources = deployed.get("dedicatedResources") if isinstance(deployed, dict) else None
    machine = resources.get("machineSpec") if isinstance(resources, dict) else None
    per_replica = _count(machine.get("acceleratorCount") if isinstance(machine, dict) else None)
    gpus = per_replica * (required + extra)
    if gpus > guards.max_gpus_per_job:
        errors.append(
            FieldError(
                "extraSpotReplicas",
                f"asks for up to {gpus} GPUs ({per_replica} per replica x {required + extra} "
                f"replicas); the operator limit is {guards.max_gpus_per_job} GPUs per job "
                "(FLEXJOBS_MAX_GPUS_PER_JOB)",
            )
        )
    return errors


def _check_body(request: JobRequest, guards: Guards) -> list[FieldError]:
    kind = getattr(request, "kind", None)
    spec = getattr(request, "spec", None)
    location = getattr(request, "location", None)
    ctx = Context(guards, [], location if isinstance(location, str) else None)
    declared = kind_named(kind)
    if declared is None:
        ctx.add("$", f"unknown request kind {show(kind)}; use one of {', '.join(KINDS)}")
        return ctx.errors
    if not isinstance(spec, dict):
        ctx.add(declared.name, f"must be a JSON object (the Vertex REST body), not {kind_of(spec)}")
        return ctx.errors
    _BODY_CHECKS[declared](ctx, spec)
    return ctx.errors


def _check_auto_choices(
    request: JobRequest, guards: Guards, known: list[FieldError]
) -> list[FieldError]:
    """Check an AUTO request as each attempt its policy may produce.

    AUTO may run any attempt as FLEX_START, SPOT or STANDARD, so the body must be valid under
    each: a T4 (not a DWS GPU) or a 30-day ``timeout`` would make a FLEX_START attempt invalid
    days later. Reported at ``scheduling.strategy``, once per problem, as for fallback rungs.
    """
    if getattr(request, "kind", None) not in TRAINING_KINDS or request.strategy != AUTO:
        return []
    seen = {(e.path, e.message) for e in known}
    errors: list[FieldError] = []
    for strategy in STRATEGIES:
        spec = attempt_spec(
            request.kind,
            request.spec,
            run_id=request.request_id,
            attempt=1,
            resume_from=None,
            strategy=strategy,
        )
        for error in _check_body(replace(request, spec=spec), guards):
            if (error.path, error.message) in seen:
                continue
            seen.add((error.path, error.message))
            errors.append(
                FieldError(
                    strategy_path(request.kind),
                    f"AUTO may run an attempt as {strategy}, and that attempt is invalid: "
                    f"{error.path}: {error.message}",
                )
            )
    return errors


def _check_region_moves(request: JobRequest, guards: Guards) -> list[FieldError]:
    """An AUTO request allowing other ``regions``: nothing in its body may tie it to one. A
    request naming no location runs its first attempts in the default one
    (``FLEXJOBS_LOCATION``), which counts as one of its regions."""
    options = getattr(request, "options", None)
    if (
        getattr(request, "kind", None) not in TRAINING_KINDS
        or request.strategy != AUTO
        or not isinstance(options, dict)
    ):
        return []
    allowed = RegionOptions.read(options)
    regions = () if allowed.pinned else allowed.regions
    location = request.location or guards.default_location
    return check_region_moves(request.spec, request.kind, location, regions)


def _check_allowed_regions(request: JobRequest, guards: Guards) -> list[FieldError]:
    """Every region the request may run in (``location``, AUTO's ``regions``, the ``fallback``
    rungs' locations) must be one the operator allows (``FLEXJOBS_ALLOWED_REGIONS``; unset:
    any region name)."""
    allowed = guards.allowed_regions
    if not allowed:
        return []
    named: list[tuple[str, object]] = [_where(request, guards)]
    options = getattr(request, "options", None)
    if isinstance(options, dict):
        regions = options.get("regions")
        if isinstance(regions, list):
            named += [(f"regions[{i}]", r) for i, r in enumerate(regions)]
        fallback = options.get("fallback")
        if isinstance(fallback, list):
            named += [
                (f"fallback[{i}].location", rung.get("location"))
                for i, rung in enumerate(fallback)
                if isinstance(rung, dict)
            ]
    return [
        FieldError(
            path,
            f"{show(region)} is not a region this deployment runs jobs in; use one of "
            f"{', '.join(allowed)} (FLEXJOBS_ALLOWED_REGIONS)",
        )
        for path, region in named
        if isinstance(region, str) and region not in allowed
    ]


def _where(request: JobRequest, guards: Guards) -> tuple[str, str | None]:
    """The region a request runs in, and the field that says so: its ``location``; else, for
    a deployment, its endpoint's (a model deploys in its endpoint's region, whatever the
    default); else the default location (``FLEXJOBS_LOCATION``, where intake creates what
    names none)."""
    location = getattr(request, "location", None)
    if isinstance(location, str) and location:
        return "location", location
    if getattr(request, "kind", None) == DEPLOY_MODEL.name:
        spec = getattr(request, "spec", None)
        endpoint = spec.get("endpoint") if isinstance(spec, dict) else None
        found = location_of(endpoint) if isinstance(endpoint, str) else None
        return f"{DEPLOY_MODEL.name}.endpoint", found
    return "location", guards.default_location


def _check_rungs(request: JobRequest, guards: Guards, known: list[FieldError]) -> list[FieldError]:
    """Check each ``fallback`` rung as the attempt it would produce.

    A rung changes the strategy or the location of later attempts, so a request valid as
    submitted can turn invalid on a rung (FLEX_START on a T4, or with a 30-day timeout); that
    is found now, not when the rung is reached days later. Each problem is reported once: at
    the first rung that produces it, and not at all when the request itself has it.
    """
    options = getattr(request, "options", None)
    fallback = options.get("fallback") if isinstance(options, dict) else None
    if (
        getattr(request, "kind", None) not in TRAINING_KINDS
        or not fallback
        or check_fallback(fallback)
        or request.strategy == AUTO
    ):
        return []  # no ladder, or check_options reports what is wrong with it (AUTO takes none)
    seen = {(e.path, e.message) for e in known}
    base_strategy = request.strategy
    base_location = request.location or ""
    errors: list[FieldError] = []
    for i, rung in enumerate(fallback):
        placement = placement_for(
            fallback, rung["afterCapacityFailures"], base_strategy, base_location
        )
        spec = attempt_spec(
            request.kind,
            request.spec,
            run_id=request.request_id,
            attempt=i + 2,
            resume_from=None,
            strategy=placement.strategy,
        )
        attempt = replace(request, spec=spec, location=placement.location or None)
        changed = "strategy" if rung.get("strategy") is not None else "location"
        for error in _check_body(attempt, guards):
            if (error.path, error.message) in seen:
                continue
            seen.add((error.path, error.message))
            errors.append(
                FieldError(
                    f"fallback[{i}].{changed}",
                    f"the attempt this rung produces is invalid: {error.path}: {error.message}",
                )
            )
    return errors
