"""The request-validation rules: what a job request must satisfy before flexjobs submits it.

:func:`check_request` reads a parsed :class:`~shared.domain.request.JobRequest` (its Vertex REST
body already has flexjobs' defaults applied) and returns *every* problem as a
:class:`~shared.errors.FieldError` with an exact path such as
``customJob.jobSpec.workerPoolSpecs[1].machineSpec.acceleratorType``. It never raises: the body
is untrusted JSON, so each value is type-checked before it is used.

The rules come from three places:

- Dynamic Workload Scheduler (seed 000): under ``scheduling.strategy = FLEX_START`` only L4,
  A100, H100, H200 and B200 GPUs, a ``timeout`` of at most 7 days, and the same machine
  configuration in every worker pool.
- Vertex AI v1 REST semantics: the AcceleratorType and Strategy enums, Duration strings,
  ``maxWaitDuration`` applying to FLEX_START only, resource-name formats, ``trafficSplit``.
- Operator guards (:class:`Guards`): allowed images and service accounts, the field policy
  (:mod:`shared.domain.field_policy`), GPU and replica caps.

The body is the canonical REST form (:mod:`shared.domain.vertex_json`): whatever spelling the
requester used, a field has one name here, int64 values are integers and enums are names.
A training request's ``fallback`` rungs are checked as the attempts they would produce.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final

from shared.domain.attempts import attempt_spec
from shared.domain.field_policy import Allowance, check_field_policy, parse_field_policy
from shared.domain.machines import (
    ALL_ACCELERATORS,
    DWS_ACCELERATORS,
    MAX_INT32,
    NON_DWS_ACCELERATORS,
    TPU_ACCELERATORS,
    TPU_POD_ACCELERATORS,
    UNSPECIFIED_ACCELERATOR,
    describe,
    dws_accelerators_text,
    is_dws_accelerator,
    is_tpu_pod,
    machine_shape,
    machine_spec_problems,
)
from shared.domain.regions import REGION_HINT, is_region
from shared.domain.request import (
    DEFAULT_STRATEGY,
    KINDS,
    TRAINING_KINDS,
    JobRequest,
    check_options,
    parse_duration,
)
from shared.domain.retry import check_fallback, placement_for
from shared.domain.values import key_path as _key_path
from shared.domain.values import kind_of as _kind_of
from shared.domain.values import show as _show
from shared.errors import FieldError

if TYPE_CHECKING:
    from shared.config import Settings

#: Strategies flexjobs submits. FLEX_START (DWS) is the default.
STRATEGIES: Final = ("FLEX_START", "SPOT", "STANDARD")

#: Deprecated Vertex strategies and what to write instead (Scheduling.Strategy in Vertex v1).
DEPRECATED_STRATEGIES: Final = {"ON_DEMAND": "STANDARD", "LOW_COST": "SPOT"}

#: The only training task a trainingPipeline may run: a custom training job.
CUSTOM_TASK_DEFINITION: Final = (
    "gs://google-cloud-aiplatform/schema/trainingjob/definition/custom_task_1.0.0.yaml"
)

#: DWS runs a job for at most 7 days (seed 000).
MAX_DWS_TIMEOUT_SECONDS: Final = 7 * 24 * 3600

#: The largest value a google.protobuf.Duration can hold (10,000 years).
MAX_DURATION_SECONDS: Final = 315_576_000_000

#: Vertex allows display names of up to 128 UTF-8 characters.
MAX_DISPLAY_NAME: Final = 128

DEFAULT_DEPLOY_MACHINE: Final = "n1-standard-2"

_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9._-]*"
# Any location text is matched first, so a bad one is reported as a bad location.
_ENDPOINT_NAME = re.compile(
    rf"projects/(?P<project>{_SEGMENT})/locations/(?P<location>[^/]*)"
    rf"/endpoints/(?P<endpoint>{_SEGMENT})"
)
# A model may be named with a version or alias: models/123@2, models/123@default.
_MODEL_NAME = re.compile(
    rf"projects/(?P<project>{_SEGMENT})/locations/(?P<location>[^/]*)"
    rf"/models/(?P<model>{_SEGMENT})(@[A-Za-z0-9_-]+)?"
)
# DeployedModel ids are 1 to 10 digits; "0" stands for the model being deployed.
_DEPLOYED_MODEL_ID = re.compile(r"[0-9]{1,10}")
_DURATION_TEXT = re.compile(r"-?[0-9]+(\.[0-9]{1,9})?s")


@dataclass(frozen=True)
class Guards:
    """Operator limits applied on top of the DWS and Vertex rules.

    An empty ``allowed_image_prefixes`` allows any image. An empty
    ``allowed_service_accounts`` allows only the default Vertex AI service agent, that is, no
    ``serviceAccount`` field at all. ``field_policy`` is what ``FLEXJOBS_FIELD_POLICY`` allows
    (:mod:`shared.domain.field_policy`); empty keeps every field at its default.
    """

    allowed_image_prefixes: tuple[str, ...] = ()
    allowed_service_accounts: tuple[str, ...] = ()
    max_gpus_per_job: int = 64
    max_replicas: int = 64
    field_policy: Mapping[str, Allowance] = field(default_factory=dict, hash=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> Guards:
        """Take the guards from the function's :class:`~shared.config.Settings`."""
        return cls(
            allowed_image_prefixes=tuple(settings.allowed_image_prefixes),
            allowed_service_accounts=tuple(settings.allowed_service_accounts),
            max_gpus_per_job=settings.max_gpus_per_job,
            max_replicas=settings.max_replicas,
            field_policy=parse_field_policy(settings.field_policy),
        )


@dataclass(frozen=True)
class _Context:
    guards: Guards
    errors: list[FieldError]
    location: str | None = None

    def add(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))


def check_request(request: JobRequest, guards: Guards) -> list[FieldError]:
    """Return every problem with ``request`` (a :class:`JobRequest`); empty means valid.

    Never raises, whatever JSON the request's body holds.

    Examples:
        >>> from shared.domain.request import parse_request
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
    return [*errors, *_check_rungs(request, guards, errors)]


def _check_body(request: JobRequest, guards: Guards) -> list[FieldError]:
    kind = getattr(request, "kind", None)
    spec = getattr(request, "spec", None)
    location = getattr(request, "location", None)
    ctx = _Context(guards, [], location if isinstance(location, str) else None)
    if kind not in KINDS:
        ctx.add("$", f"unknown request kind {_show(kind)}; use one of {', '.join(KINDS)}")
        return ctx.errors
    if not isinstance(spec, dict):
        ctx.add(str(kind), f"must be a JSON object (the Vertex REST body), not {_kind_of(spec)}")
        return ctx.errors
    if kind == "customJob":
        _check_display_name(ctx, spec, "customJob")
        _check_job_spec(ctx, spec.get("jobSpec"), "customJob.jobSpec", trials=None)
    elif kind == "hyperparameterTuningJob":
        _check_tuning_job(ctx, spec)
    elif kind == "trainingPipeline":
        _check_training_pipeline(ctx, spec)
    else:
        _check_deploy_model(ctx, spec)
    return ctx.errors


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
    ):
        return []  # no ladder, or check_options reports what is wrong with it
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


# --- reading untrusted JSON ------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    # JSON booleans arrive as Python bools, which are ints; they are not counts.
    return isinstance(value, int) and not isinstance(value, bool)


def _read_str(
    ctx: _Context, node: dict[str, Any], key: str, base: str, *, required: bool, what: str
) -> str | None:
    """Read a non-empty string field; report it missing, empty or of the wrong type."""
    path = f"{base}.{key}"
    if key not in node or node[key] is None:
        if required:
            ctx.add(path, f"is required: {what}")
        return None
    value = node[key]
    if not isinstance(value, str):
        ctx.add(path, f"must be a string ({what}), not {_kind_of(value)}")
        return None
    if not value.strip():
        ctx.add(path, f"must not be empty: {what}")
        return None
    return value


def _read_int(
    ctx: _Context,
    node: dict[str, Any],
    key: str,
    base: str,
    *,
    required: bool,
    minimum: int,
    maximum: int | None = None,
    what: str,
) -> int | None:
    """Read an integer field in ``[minimum, maximum]``; booleans and floats are refused."""
    path = f"{base}.{key}"
    if key not in node or node[key] is None:
        if required:
            ctx.add(path, f"is required: {what}")
        return None
    value = node[key]
    if not _is_int(value):
        ctx.add(path, f"must be a JSON integer ({what}), not {_kind_of(value)} {_show(value)}")
        return None
    if value < minimum:
        ctx.add(path, f"must be at least {minimum} ({what}), not {_show(value)}")
        return None
    if maximum is not None and value > maximum:
        ctx.add(path, f"must be at most {maximum} ({what}), not {_show(value)}")
        return None
    return int(value)


def _read_object(
    ctx: _Context, node: dict[str, Any], key: str, base: str, *, required: bool, what: str
) -> dict[str, Any] | None:
    path = f"{base}.{key}"
    if key not in node or node[key] is None:
        if required:
            ctx.add(path, f"is required: {what}")
        return None
    value = node[key]
    if not isinstance(value, dict):
        ctx.add(path, f"must be a JSON object ({what}), not {_kind_of(value)}")
        return None
    return value


def _check_bool(ctx: _Context, node: dict[str, Any], key: str, base: str) -> None:
    if key in node and node[key] is not None and not isinstance(node[key], bool):
        ctx.add(f"{base}.{key}", f"must be true or false, not {_kind_of(node[key])}")


def _check_string_list(ctx: _Context, node: dict[str, Any], key: str, base: str) -> None:
    if key not in node or node[key] is None:
        return
    value = node[key]
    if not isinstance(value, list):
        ctx.add(f"{base}.{key}", f"must be an array of strings, not {_kind_of(value)}")
        return
    for i, item in enumerate(value):
        if not isinstance(item, str):
            ctx.add(f"{base}.{key}[{i}]", f"must be a string, not {_kind_of(item)}")


def _read_duration(
    ctx: _Context, node: dict[str, Any], key: str, base: str, *, allow_zero: bool
) -> float | None:
    """Read a protobuf JSON Duration such as ``"1800s"`` or ``"3.5s"``, in seconds."""
    path = f"{base}.{key}"
    if key not in node or node[key] is None:
        return None
    value = node[key]
    example = "a Duration string such as '1800s' or '3.5s'"
    if not isinstance(value, str):
        ctx.add(path, f"must be {example}, not {_kind_of(value)} {_show(value)}")
        return None
    # parse_duration's pattern tolerates a trailing newline; Vertex does not.
    if not _DURATION_TEXT.fullmatch(value):
        ctx.add(path, f"must be {example}, not {_show(value)}")
        return None
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        # Only a digit string too long to convert gets here; the pattern already matched.
        ctx.add(path, f"must be {example}: {exc}")
        return None
    if seconds < 0:
        ctx.add(path, f"must not be negative, not {_show(value)}")
        return None
    if seconds > MAX_DURATION_SECONDS:
        ctx.add(path, f"must be at most {MAX_DURATION_SECONDS}s, the largest Duration")
        return None
    if seconds == 0 and not allow_zero:
        ctx.add(path, "must be longer than 0s")
        return None
    return seconds


# --- fields shared by every kind -------------------------------------------------------------


def _check_display_name(ctx: _Context, node: dict[str, Any], base: str) -> None:
    name = _read_str(
        ctx, node, "displayName", base, required=True, what="a name for the job shown in Vertex AI"
    )
    if name is not None and len(name) > MAX_DISPLAY_NAME:
        ctx.add(f"{base}.displayName", f"must be at most {MAX_DISPLAY_NAME} characters")


def _check_service_account(ctx: _Context, node: dict[str, Any], base: str) -> None:
    path = f"{base}.serviceAccount"
    if "serviceAccount" not in node:
        return
    value = node["serviceAccount"]
    allowed = ctx.guards.allowed_service_accounts
    if not isinstance(value, str) or not value:
        ctx.add(path, f"must be a service account email, not {_kind_of(value)}")
    elif not allowed:
        ctx.add(
            path,
            "must be absent: only the default Vertex AI service agent is allowed here; remove "
            "serviceAccount (an operator can allow accounts with "
            "FLEXJOBS_ALLOWED_SERVICE_ACCOUNTS)",
        )
    elif value not in allowed:
        ctx.add(
            path,
            f"{_show(value)} is not allowed; use one of {', '.join(allowed)}, or remove the "
            "field to run as the default Vertex AI service agent",
        )


def _check_image(ctx: _Context, image: str | None, path: str) -> None:
    prefixes = ctx.guards.allowed_image_prefixes
    if image is not None and prefixes and not image.startswith(prefixes):
        ctx.add(
            path,
            f"image {_show(image)} is not allowed; images must start with one of "
            f"{', '.join(prefixes)} (FLEXJOBS_ALLOWED_IMAGE_PREFIXES)",
        )


# --- training kinds --------------------------------------------------------------------------


def _check_tuning_job(ctx: _Context, spec: dict[str, Any]) -> None:
    base = "hyperparameterTuningJob"
    _check_display_name(ctx, spec, base)
    study = _read_object(
        ctx, spec, "studySpec", base, required=True, what="the metrics and parameters to tune"
    )
    if study is not None:
        for key in ("metrics", "parameters"):
            value = study.get(key)
            if not isinstance(value, list) or not value:
                ctx.add(f"{base}.studySpec.{key}", f"must be a non-empty array of {key} specs")
    _read_int(
        ctx, spec, "maxTrialCount", base, required=True, minimum=1, what="total trials to run"
    )
    parallel = _read_int(
        ctx,
        spec,
        "parallelTrialCount",
        base,
        required=True,
        minimum=1,
        what="trials run at the same time",
    )
    _read_int(
        ctx,
        spec,
        "maxFailedTrialCount",
        base,
        required=False,
        minimum=0,
        what="failed trials tolerated",
    )
    _check_job_spec(ctx, spec.get("trialJobSpec"), f"{base}.trialJobSpec", trials=parallel or 1)


def _check_training_pipeline(ctx: _Context, spec: dict[str, Any]) -> None:
    base = "trainingPipeline"
    _check_display_name(ctx, spec, base)
    definition = spec.get("trainingTaskDefinition")
    if definition != CUSTOM_TASK_DEFINITION:
        got = "missing" if definition is None else f"{_show(definition)}"
        ctx.add(
            f"{base}.trainingTaskDefinition",
            f"must be {CUSTOM_TASK_DEFINITION} (flexjobs runs custom training pipelines "
            f"only); got {got}",
        )
    # For a custom task the inputs are a CustomJobSpec: worker pools, scheduling, account.
    _check_job_spec(ctx, spec.get("trainingTaskInputs"), f"{base}.trainingTaskInputs", trials=None)


def _check_job_spec(ctx: _Context, node: Any, path: str, *, trials: int | None) -> None:
    """Check a CustomJobSpec; ``trials`` is the parallel trial count of a tuning job."""
    if node is None:
        ctx.add(path, "is required: the workerPoolSpecs (and scheduling) of the job")
        return
    if not isinstance(node, dict):
        ctx.add(path, f"must be a JSON object (a CustomJobSpec), not {_kind_of(node)}")
        return
    strategy = _check_scheduling(ctx, node.get("scheduling"), f"{path}.scheduling")
    _check_service_account(ctx, node, path)
    ctx.errors.extend(check_field_policy(ctx.guards.field_policy, node, path))
    output = node.get("baseOutputDirectory")
    if output is not None:
        if not isinstance(output, dict):
            ctx.add(f"{path}.baseOutputDirectory", "must be an object with outputUriPrefix")
        else:
            prefix = output.get("outputUriPrefix")
            if not (isinstance(prefix, str) and prefix.startswith("gs://")):
                ctx.add(
                    f"{path}.baseOutputDirectory.outputUriPrefix",
                    "must be a Cloud Storage URI such as gs://bucket/dir",
                )
    _check_worker_pools(ctx, node, path, strategy=strategy, trials=trials)


def _check_scheduling(ctx: _Context, node: Any, path: str) -> str | None:
    """Check ``scheduling`` and return its valid strategy, or None when it is unusable."""
    if node is None:
        return DEFAULT_STRATEGY
    if not isinstance(node, dict):
        message = (
            f"must be a JSON object (strategy, maxWaitDuration, timeout), not {_kind_of(node)}"
        )
        ctx.add(path, message)
        return None
    strategy = _check_strategy(ctx, node.get("strategy", DEFAULT_STRATEGY), f"{path}.strategy")
    _read_duration(ctx, node, "maxWaitDuration", path, allow_zero=True)
    # Vertex documents maxWaitDuration as applying only when the strategy is FLEX_START; under
    # SPOT or STANDARD it would be silently ignored, so a request carrying it has a wrong
    # expectation about how long it may queue. Refusing it says so now.
    if node.get("maxWaitDuration") is not None and strategy not in (None, "FLEX_START"):
        ctx.add(
            f"{path}.maxWaitDuration",
            f"only applies to FLEX_START (DWS), not {strategy}; remove it or set strategy to "
            "FLEX_START",
        )
    timeout = _read_duration(ctx, node, "timeout", path, allow_zero=False)
    if timeout is not None and strategy == "FLEX_START" and timeout > MAX_DWS_TIMEOUT_SECONDS:
        ctx.add(
            f"{path}.timeout",
            f"must be at most {MAX_DWS_TIMEOUT_SECONDS}s (7 days): DWS (FLEX_START) runs a job "
            "for at most 7 days",
        )
    for key in ("restartJobOnWorkerRestart", "disableRetries"):
        _check_bool(ctx, node, key, path)
    return strategy


def _check_strategy(ctx: _Context, raw: Any, path: str) -> str | None:
    if isinstance(raw, str) and raw in STRATEGIES:
        return raw
    if not isinstance(raw, str):
        ctx.add(path, f"must be one of {', '.join(STRATEGIES)}, not {_kind_of(raw)}")
    elif raw in DEPRECATED_STRATEGIES:
        ctx.add(
            path,
            f"{raw} is deprecated in Vertex AI; use {DEPRECATED_STRATEGIES[raw]} instead, or "
            "omit strategy for FLEX_START (DWS)",
        )
    else:
        ctx.add(
            path,
            f"unknown strategy {_show(raw)}; use FLEX_START (DWS, the default), SPOT or STANDARD",
        )
    return None


def _check_worker_pools(
    ctx: _Context, node: dict[str, Any], base: str, *, strategy: str | None, trials: int | None
) -> None:
    path = f"{base}.workerPoolSpecs"
    pools = node.get("workerPoolSpecs")
    if pools is None:
        ctx.add(path, "is required: at least one worker pool")
        return
    if not isinstance(pools, list):
        ctx.add(path, f"must be an array of worker pools, not {_kind_of(pools)}")
        return
    if not pools:
        ctx.add(path, "must list at least one worker pool")
        return
    gpus = replicas = 0
    reference: tuple[int, dict[str, Any]] | None = None
    for i, pool in enumerate(pools):
        pool_path = f"{path}[{i}]"
        if not isinstance(pool, dict):
            ctx.add(
                pool_path, f"must be a worker pool object ({{}} skips it), not {_kind_of(pool)}"
            )
            continue
        if not pool:
            # Vertex allows {} as a placeholder for pools after the first (the primary).
            if i == 0:
                ctx.add(pool_path, "the first worker pool (the primary replica) cannot be empty")
            continue
        per_replica, count = _check_pool(ctx, pool, pool_path, strategy)
        gpus += per_replica * count
        replicas += count
        machine = pool.get("machineSpec")
        if strategy == "FLEX_START" and isinstance(machine, dict):
            if reference is None:
                reference = (i, machine)
            elif _differs(machine, reference[1]):
                ctx.add(
                    f"{pool_path}.machineSpec",
                    f"must equal workerPoolSpecs[{reference[0]}].machineSpec: DWS (FLEX_START) "
                    "needs the same machine configuration in every worker pool",
                )
    _check_totals(ctx, path, gpus=gpus, replicas=replicas, trials=trials)


def _differs(left: dict[str, Any], right: dict[str, Any]) -> bool:
    try:
        return left != right
    except RecursionError:
        # Only a JobRequest built without parse_request can nest this deep; two specs too deep
        # to compare cannot be shown to be the same machine configuration.
        return True


def _check_totals(
    ctx: _Context, path: str, *, gpus: int, replicas: int, trials: int | None
) -> None:
    factor = trials or 1
    per = f" ({_show(gpus)} per trial x {factor} parallel trials)" if trials else ""
    limit = ctx.guards.max_gpus_per_job
    if gpus * factor > limit:
        ctx.add(
            path,
            f"asks for {_show(gpus * factor)} GPUs{per}; the operator limit is {limit} GPUs "
            "per job (FLEXJOBS_MAX_GPUS_PER_JOB)",
        )
    limit = ctx.guards.max_replicas
    if replicas * factor > limit:
        per = f" ({_show(replicas)} per trial x {factor} parallel trials)" if trials else ""
        ctx.add(
            path,
            f"asks for {_show(replicas * factor)} replicas{per}; the operator limit is {limit} "
            "replicas per job (FLEXJOBS_MAX_REPLICAS)",
        )


def _check_pool(
    ctx: _Context, pool: dict[str, Any], path: str, strategy: str | None
) -> tuple[int, int]:
    """Check one worker pool; return (GPUs per replica, replica count) for the guards."""
    per_replica = _check_machine_spec(
        ctx, pool.get("machineSpec"), f"{path}.machineSpec", strategy=strategy, default=None
    )
    count = _read_int(
        ctx,
        pool,
        "replicaCount",
        path,
        required=True,
        minimum=1,
        what="machines in this pool; use 1 for the first pool",
    )
    _check_task(ctx, pool, path)
    disk = pool.get("diskSpec")
    if disk is not None and not isinstance(disk, dict):
        ctx.add(f"{path}.diskSpec", f"must be a JSON object, not {_kind_of(disk)}")
    return per_replica, count or 0


def _check_task(ctx: _Context, pool: dict[str, Any], path: str) -> None:
    """Check the pool's code: exactly one of containerSpec and pythonPackageSpec."""
    container = pool.get("containerSpec")
    package = pool.get("pythonPackageSpec")
    if container is None and package is None:
        ctx.add(
            f"{path}.containerSpec",
            "is required: set containerSpec.imageUri (or pythonPackageSpec.executorImageUri)",
        )
        return
    if container is not None and package is not None:
        ctx.add(path, "set containerSpec or pythonPackageSpec, not both")
    if container is not None:
        if not isinstance(container, dict):
            ctx.add(f"{path}.containerSpec", f"must be a JSON object, not {_kind_of(container)}")
        else:
            base = f"{path}.containerSpec"
            image = _read_str(
                ctx, container, "imageUri", base, required=True, what="the training image"
            )
            _check_image(ctx, image, f"{base}.imageUri")
            _check_string_list(ctx, container, "command", base)
            _check_string_list(ctx, container, "args", base)
    if package is not None:
        if not isinstance(package, dict):
            ctx.add(f"{path}.pythonPackageSpec", f"must be a JSON object, not {_kind_of(package)}")
            return
        base = f"{path}.pythonPackageSpec"
        image = _read_str(
            ctx, package, "executorImageUri", base, required=True, what="the image that runs it"
        )
        _check_image(ctx, image, f"{base}.executorImageUri")
        uris = package.get("packageUris")
        if not isinstance(uris, list) or not uris:
            ctx.add(f"{base}.packageUris", "must be a non-empty array of gs:// package URIs")
        else:
            _check_string_list(ctx, package, "packageUris", base)
        _read_str(ctx, package, "pythonModule", base, required=True, what="the module to run")
        _check_string_list(ctx, package, "args", base)


def _read_accelerator(ctx: _Context, spec: dict[str, Any], path: str) -> tuple[bool, str | None]:
    """Return (usable, acceleratorType); ACCELERATOR_TYPE_UNSPECIFIED means no accelerator."""
    raw = spec.get("acceleratorType")
    if raw is None or raw == UNSPECIFIED_ACCELERATOR:
        return True, None
    if not isinstance(raw, str):
        message = f"must be a string such as NVIDIA_L4, not {_kind_of(raw)}"
        ctx.add(f"{path}.acceleratorType", message)
        return False, None
    if raw not in ALL_ACCELERATORS:
        ctx.add(
            f"{path}.acceleratorType",
            f"{_show(raw)} is not a Vertex AI accelerator type; use one of "
            f"{', '.join(ALL_ACCELERATORS)}",
        )
        return False, None
    return True, raw


def _check_machine_spec(
    ctx: _Context, spec: Any, path: str, *, strategy: str | None, default: str | None
) -> int:
    """Check a machineSpec; return its GPUs per replica (0 when unknown or CPU-only).

    ``default`` is the machine type Vertex uses when machineType is absent (deployments only).
    """
    if spec is None:
        ctx.add(path, "is required: machineType, plus acceleratorType and acceleratorCount")
        return 0
    if not isinstance(spec, dict):
        ctx.add(path, f"must be a JSON object, not {_kind_of(spec)}")
        return 0
    machine = _read_str(
        ctx,
        spec,
        "machineType",
        path,
        required=default is None,
        what="a machine type such as a2-highgpu-1g",
    )
    if machine is None and "machineType" not in spec:
        machine = default
    usable, accelerator = _read_accelerator(ctx, spec, path)
    count = _read_int(
        ctx,
        spec,
        "acceleratorCount",
        path,
        required=False,
        minimum=0,
        maximum=MAX_INT32,
        what="accelerators per machine",
    )
    count_ok = spec.get("acceleratorCount") is None or count is not None
    topology = spec.get("tpuTopology")
    if topology is not None and not isinstance(topology, str):
        ctx.add(f"{path}.tpuTopology", f"must be a string such as 2x2, not {_kind_of(topology)}")
        topology = None
    if machine is not None and usable and count_ok:
        for field, message in machine_spec_problems(machine, accelerator, count):
            ctx.add(f"{path}.{field}", message)
    if strategy == "FLEX_START" and usable:
        _check_dws_accelerator(ctx, path, machine, accelerator)
    if strategy == "SPOT" and usable and is_tpu_pod(accelerator, machine or "", topology):
        field = (
            "acceleratorType"
            if accelerator in TPU_POD_ACCELERATORS
            else ("tpuTopology" if topology else "machineType")
        )
        ctx.add(
            f"{path}.{field}",
            "Spot VMs are not supported on TPU Pods; use a GPU machine type for Spot",
        )
    shape = machine_shape(machine) if machine else None
    if shape is not None:
        return shape.accelerator_count
    if accelerator is not None and accelerator not in TPU_ACCELERATORS and count:
        return count
    return 0


def _check_dws_accelerator(
    ctx: _Context, path: str, machine: str | None, accelerator: str | None
) -> None:
    field = f"{path}.acceleratorType"
    if accelerator is None:
        if machine is not None and machine_shape(machine) is not None:
            return  # machine_spec_problems already asked for this machine's GPU
        ctx.add(
            field,
            "is required under FLEX_START: DWS provisions GPUs only, so CPU-only pools are not "
            f"supported; use one of {dws_accelerators_text()}, or set scheduling.strategy to "
            "STANDARD or SPOT",
        )
    elif not is_dws_accelerator(accelerator):
        noun = "TPUs are" if accelerator in TPU_ACCELERATORS else f"{describe(accelerator)} is"
        ctx.add(
            field,
            f"{noun} not supported by DWS (FLEX_START); use one of {dws_accelerators_text()}, "
            "or set scheduling.strategy to SPOT or STANDARD",
        )


# --- deployments -----------------------------------------------------------------------------


def _check_deploy_model(ctx: _Context, spec: dict[str, Any]) -> None:
    base = "deployModel"
    endpoint = _read_str(
        ctx,
        spec,
        "endpoint",
        base,
        required=True,
        what="the endpoint resource name projects/P/locations/L/endpoints/E",
    )
    endpoint_location: str | None = None
    if endpoint is not None:
        match = _ENDPOINT_NAME.fullmatch(endpoint)
        if match is None:
            ctx.add(
                f"{base}.endpoint",
                f"{_show(endpoint)} is not an endpoint resource name; use "
                "projects/PROJECT/locations/LOCATION/endpoints/ENDPOINT_ID",
            )
        elif not is_region(match["location"]):
            ctx.add(
                f"{base}.endpoint",
                f"location {_show(match['location'])} is not {REGION_HINT}",
            )
        else:
            endpoint_location = match["location"]
            if ctx.location and ctx.location != endpoint_location:
                ctx.add(
                    f"{base}.endpoint",
                    f"is in {endpoint_location} but the request's location is "
                    f"{_show(ctx.location)}; make them the same",
                )
    deployed = _read_object(
        ctx, spec, "deployedModel", base, required=True, what="the model to deploy"
    )
    if deployed is not None:
        _check_deployed_model(ctx, deployed, f"{base}.deployedModel", endpoint_location)
    _check_traffic_split(ctx, spec, base)


def _check_deployed_model(
    ctx: _Context, deployed: dict[str, Any], base: str, endpoint_location: str | None
) -> None:
    model = _read_str(
        ctx,
        deployed,
        "model",
        base,
        required=True,
        what="the model resource name projects/P/locations/L/models/M",
    )
    if model is not None:
        match = _MODEL_NAME.fullmatch(model)
        if match is None:
            ctx.add(
                f"{base}.model",
                f"{_show(model)} is not a model resource name; use "
                "projects/PROJECT/locations/LOCATION/models/MODEL_ID (optionally @VERSION)",
            )
        elif not is_region(match["location"]):
            ctx.add(f"{base}.model", f"location {_show(match['location'])} is not {REGION_HINT}")
        elif endpoint_location and match["location"] != endpoint_location:
            ctx.add(
                f"{base}.model",
                f"is in {match['location']} but the endpoint is in {endpoint_location}; a "
                "model deploys only to an endpoint in its own location",
            )
    _read_str(ctx, deployed, "displayName", base, required=False, what="a name for the deployment")
    _check_service_account(ctx, deployed, base)
    if deployed.get("automaticResources") is not None:
        ctx.add(
            f"{base}.automaticResources",
            "is not supported: deployments run on Spot VMs; use dedicatedResources with spot: true",
        )
    resources = _read_object(
        ctx,
        deployed,
        "dedicatedResources",
        base,
        required=True,
        what="machineSpec, spot: true, minReplicaCount and maxReplicaCount",
    )
    if resources is not None:
        _check_dedicated_resources(ctx, resources, f"{base}.dedicatedResources")


def _check_dedicated_resources(ctx: _Context, resources: dict[str, Any], base: str) -> None:
    spot = resources.get("spot")
    if spot is not True:
        # In the canonical body false is the default value, so it arrives as missing.
        got = "false or missing" if spot is None else _show(spot)
        ctx.add(
            f"{base}.spot",
            f"must be true: this request kind deploys on Spot VMs (got {got}); deploy "
            "on-demand capacity another way",
        )
    per_replica = _check_machine_spec(
        ctx,
        resources.get("machineSpec"),
        f"{base}.machineSpec",
        strategy="SPOT",
        default=DEFAULT_DEPLOY_MACHINE,
    )
    low = _read_int(
        ctx,
        resources,
        "minReplicaCount",
        base,
        required=True,
        minimum=1,
        maximum=MAX_INT32,
        what="replicas always running",
    )
    high = _read_int(
        ctx,
        resources,
        "maxReplicaCount",
        base,
        required=False,
        minimum=1,
        maximum=MAX_INT32,
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


def _check_traffic_split(ctx: _Context, spec: dict[str, Any], base: str) -> None:
    path = f"{base}.trafficSplit"
    if spec.get("trafficSplit") is None:
        return  # Vertex then leaves the endpoint's traffic split as it is.
    split = spec["trafficSplit"]
    if not isinstance(split, dict):
        ctx.add(path, f'must be an object such as {{"0": 100}}, not {_kind_of(split)}')
        return
    if "0" not in split:
        ctx.add(path, 'must include "0", this deployment, for example {"0": 100}')
    total = 0
    all_valid = True
    for key, value in split.items():
        key_path = _key_path(path, key)
        if not (isinstance(key, str) and _DEPLOYED_MODEL_ID.fullmatch(key)):
            ctx.add(key_path, 'keys must be "0" (this deployment) or a deployed model id')
        if not _is_int(value) or not 0 <= value <= 100:
            ctx.add(
                key_path,
                f"must be an integer percentage from 0 to 100, not {_kind_of(value)} "
                f"{_show(value)}",
            )
            all_valid = False
        else:
            total += value
    if all_valid and split and total != 100:
        ctx.add(path, f"percentages must add up to 100, not {total}")


__all__ = [
    "CUSTOM_TASK_DEFINITION",
    "DEPRECATED_STRATEGIES",
    "DWS_ACCELERATORS",
    "MAX_DWS_TIMEOUT_SECONDS",
    "NON_DWS_ACCELERATORS",
    "STRATEGIES",
    "Guards",
    "check_options",
    "check_request",
]
