"""The training kinds: ``customJob``, ``hyperparameterTuningJob`` and ``trainingPipeline``.

Each holds a CustomJobSpec (``jobSpec``, ``trialJobSpec``, ``trainingTaskInputs``), and that is
where most rules apply: the scheduling strategy and durations, the DWS rules (L4, A100, H100,
H200 and B200 GPUs only, a ``timeout`` of at most 7 days, the same machine configuration in
every worker pool), the field policy, and the operator's GPU and replica caps.
"""

from __future__ import annotations

from typing import Any

from shared.domain.model.strategies import (
    AUTO,
    DEFAULT_STRATEGY,
    DEPRECATED_STRATEGIES,
    MAX_DWS_TIMEOUT_SECONDS,
    STRATEGIES,
    Strategy,
)
from shared.domain.model.values import kind_of, show
from shared.domain.request.field_policy import check_field_policy
from shared.domain.request.message import MAX_DISPLAY_NAME
from shared.domain.request.validation.fields import (
    check_image,
    check_machine_spec,
    check_service_account,
)
from shared.domain.request.validation.readers import (
    Context,
    check_bool,
    check_string_list,
    read_duration,
    read_int,
    read_object,
    read_str,
)
from shared.domain.request.wire import (
    CUSTOM_TASK_DEFINITION,
    FAILED_TRIALS,
    POOL_REPLICAS,
    TRIALS,
)


def check_custom_job(ctx: Context, spec: dict[str, Any]) -> None:
    _check_display_name(ctx, spec, "customJob")
    _check_resource_policy(ctx, spec, "customJob")
    _check_job_spec(ctx, spec.get("jobSpec"), "customJob.jobSpec", trials=None)


def _check_resource_policy(ctx: Context, spec: dict[str, Any], base: str) -> None:
    """The field policy of the job, tuning job or pipeline itself (not its CustomJobSpec)."""
    ctx.errors.extend(check_field_policy(ctx.guards.field_policy, spec, base, where="resource"))


def check_tuning_job(ctx: Context, spec: dict[str, Any]) -> None:
    base = "hyperparameterTuningJob"
    _check_display_name(ctx, spec, base)
    _check_resource_policy(ctx, spec, base)
    study = read_object(
        ctx, spec, "studySpec", base, required=True, what="the metrics and parameters to tune"
    )
    if study is not None:
        for key in ("metrics", "parameters"):
            value = study.get(key)
            if not isinstance(value, list) or not value:
                ctx.add(f"{base}.studySpec.{key}", f"must be a non-empty array of {key} specs")
    read_int(
        ctx, spec, "maxTrialCount", base, required=True, bounds=TRIALS, what="total trials to run"
    )
    parallel = read_int(
        ctx,
        spec,
        "parallelTrialCount",
        base,
        required=True,
        bounds=TRIALS,
        what="trials run at the same time",
    )
    read_int(
        ctx,
        spec,
        "maxFailedTrialCount",
        base,
        required=False,
        bounds=FAILED_TRIALS,
        what="failed trials tolerated",
    )
    _check_job_spec(ctx, spec.get("trialJobSpec"), f"{base}.trialJobSpec", trials=parallel or 1)


def check_training_pipeline(ctx: Context, spec: dict[str, Any]) -> None:
    base = "trainingPipeline"
    _check_display_name(ctx, spec, base)
    _check_resource_policy(ctx, spec, base)
    # A model the pipeline registers serves later from its own image: the image allow-list
    # holds for it as for the training containers.
    model = spec.get("modelToUpload")
    container = model.get("containerSpec") if isinstance(model, dict) else None
    if isinstance(container, dict) and isinstance(container.get("imageUri"), str):
        check_image(ctx, container["imageUri"], f"{base}.modelToUpload.containerSpec.imageUri")
    definition = spec.get("trainingTaskDefinition")
    if definition != CUSTOM_TASK_DEFINITION:
        got = "missing" if definition is None else f"{show(definition)}"
        ctx.add(
            f"{base}.trainingTaskDefinition",
            f"must be {CUSTOM_TASK_DEFINITION} (flexjobs runs custom training pipelines "
            f"only); got {got}",
        )
    # For a custom task the inputs are a CustomJobSpec: worker pools, scheduling, account.
    _check_job_spec(ctx, spec.get("trainingTaskInputs"), f"{base}.trainingTaskInputs", trials=None)


def _check_display_name(ctx: Context, node: dict[str, Any], base: str) -> None:
    name = read_str(
        ctx, node, "displayName", base, required=True, what="a name for the job shown in Vertex AI"
    )
    if name is not None and len(name) > MAX_DISPLAY_NAME:
        ctx.add(f"{base}.displayName", f"must be at most {MAX_DISPLAY_NAME} characters")


def _check_job_spec(ctx: Context, node: Any, path: str, *, trials: int | None) -> None:
    """Check a CustomJobSpec; ``trials`` is the parallel trial count of a tuning job."""
    if node is None:
        ctx.add(path, "is required: the workerPoolSpecs (and scheduling) of the job")
        return
    if not isinstance(node, dict):
        ctx.add(path, f"must be a JSON object (a CustomJobSpec), not {kind_of(node)}")
        return
    strategy = _check_scheduling(ctx, node.get("scheduling"), f"{path}.scheduling")
    check_service_account(ctx, node, path)
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


def _check_scheduling(ctx: Context, node: Any, path: str) -> str | None:
    """Check ``scheduling`` and return its valid strategy, or None when it is unusable."""
    if node is None:
        return DEFAULT_STRATEGY
    if not isinstance(node, dict):
        message = f"must be a JSON object (strategy, maxWaitDuration, timeout), not {kind_of(node)}"
        ctx.add(path, message)
        return None
    strategy = _check_strategy(ctx, node.get("strategy", DEFAULT_STRATEGY), f"{path}.strategy")
    read_duration(ctx, node, "maxWaitDuration", path, allow_zero=True)
    if node.get("maxWaitDuration") is not None and strategy == AUTO:
        ctx.add(
            f"{path}.maxWaitDuration",
            "is chosen per attempt under AUTO (the longest wait that still leaves an on-demand "
            "attempt time to meet the deadline); remove it",
        )
    # Vertex documents maxWaitDuration as applying only when the strategy is FLEX_START; under
    # SPOT or STANDARD it would be silently ignored, so a request carrying it has a wrong
    # expectation about how long it may queue. Refusing it says so now.
    elif node.get("maxWaitDuration") is not None and strategy not in (None, Strategy.FLEX_START):
        ctx.add(
            f"{path}.maxWaitDuration",
            f"only applies to FLEX_START (DWS), not {strategy}; remove it or set strategy to "
            "FLEX_START",
        )
    timeout = read_duration(ctx, node, "timeout", path, allow_zero=False)
    if (
        timeout is not None
        and strategy == Strategy.FLEX_START
        and timeout > MAX_DWS_TIMEOUT_SECONDS
    ):
        ctx.add(
            f"{path}.timeout",
            f"must be at most {MAX_DWS_TIMEOUT_SECONDS}s (7 days): DWS (FLEX_START) runs a job "
            "for at most 7 days",
        )
    for key in ("restartJobOnWorkerRestart", "disableRetries"):
        check_bool(ctx, node, key, path)
    return strategy


def _check_strategy(ctx: Context, raw: Any, path: str) -> str | None:
    # AUTO passes here; the rules of each strategy it may choose are checked on the attempt
    # that choice produces (shared.domain.request.validation.check).
    if isinstance(raw, str) and raw in (*STRATEGIES, AUTO):
        return raw
    if not isinstance(raw, str):
        ctx.add(path, f"must be one of {', '.join(STRATEGIES)}, not {kind_of(raw)}")
    elif raw in DEPRECATED_STRATEGIES:
        ctx.add(
            path,
            f"{raw} is deprecated in Vertex AI; use {DEPRECATED_STRATEGIES[raw]} instead, or "
            "omit strategy for FLEX_START (DWS)",
        )
    else:
        ctx.add(
            path,
            f"unknown strategy {show(raw)}; use FLEX_START (DWS, the default), SPOT, STANDARD "
            "or AUTO (flexjobs chooses per attempt, to meet a deadline)",
        )
    return None


def _check_worker_pools(
    ctx: Context, node: dict[str, Any], base: str, *, strategy: str | None, trials: int | None
) -> None:
    path = f"{base}.workerPoolSpecs"
    pools = node.get("workerPoolSpecs")
    if pools is None:
        ctx.add(path, "is required: at least one worker pool")
        return
    if not isinstance(pools, list):
        ctx.add(path, f"must be an array of worker pools, not {kind_of(pools)}")
        return
    if not pools:
        ctx.add(path, "must list at least one worker pool")
        return
    gpus = replicas = 0
    reference: tuple[int, dict[str, Any]] | None = None
    for i, pool in enumerate(pools):
        pool_path = f"{path}[{i}]"
        if not isinstance(pool, dict):
            ctx.add(pool_path, f"must be a worker pool object ({{}} skips it), not {kind_of(pool)}")
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
        if strategy == Strategy.FLEX_START and isinstance(machine, dict):
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


def _check_totals(ctx: Context, path: str, *, gpus: int, replicas: int, trials: int | None) -> None:
    factor = trials or 1
    per = f" ({show(gpus)} per trial x {factor} parallel trials)" if trials else ""
    limit = ctx.guards.max_gpus_per_job
    if gpus * factor > limit:
        ctx.add(
            path,
            f"asks for {show(gpus * factor)} GPUs{per}; the operator limit is {limit} GPUs "
            "per job (FLEXJOBS_MAX_GPUS_PER_JOB)",
        )
    limit = ctx.guards.max_replicas
    if replicas * factor > limit:
        per = f" ({show(replicas)} per trial x {factor} parallel trials)" if trials else ""
        ctx.add(
            path,
            f"asks for {show(replicas * factor)} replicas{per}; the operator limit is {limit} "
            "replicas per job (FLEXJOBS_MAX_REPLICAS)",
        )


def _check_pool(
    ctx: Context, pool: dict[str, Any], path: str, strategy: str | None
) -> tuple[int, int]:
    """Check one worker pool; return (GPUs per replica, replica count) for the guards."""
    ctx.errors.extend(check_field_policy(ctx.guards.field_policy, pool, path, where="pool"))
    per_replica = check_machine_spec(
        ctx, pool.get("machineSpec"), f"{path}.machineSpec", strategy=strategy, default=None
    )
    count = read_int(
        ctx,
        pool,
        "replicaCount",
        path,
        required=True,
        bounds=POOL_REPLICAS,
        what="machines in this pool; use 1 for the first pool",
    )
    _check_task(ctx, pool, path)
    disk = pool.get("diskSpec")
    if disk is not None and not isinstance(disk, dict):
        ctx.add(f"{path}.diskSpec", f"must be a JSON object, not {kind_of(disk)}")
    return per_replica, count or 0


def _check_task(ctx: Context, pool: dict[str, Any], path: str) -> None:
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
            ctx.add(f"{path}.containerSpec", f"must be a JSON object, not {kind_of(container)}")
        else:
            base = f"{path}.containerSpec"
            image = read_str(
                ctx, container, "imageUri", base, required=True, what="the training image"
            )
            check_image(ctx, image, f"{base}.imageUri")
            check_string_list(ctx, container, "command", base)
            check_string_list(ctx, container, "args", base)
    if package is not None:
        if not isinstance(package, dict):
            ctx.add(f"{path}.pythonPackageSpec", f"must be a JSON object, not {kind_of(package)}")
            return
        base = f"{path}.pythonPackageSpec"
        image = read_str(
            ctx, package, "executorImageUri", base, required=True, what="the image that runs it"
        )
        check_image(ctx, image, f"{base}.executorImageUri")
        uris = package.get("packageUris")
        if not isinstance(uris, list) or not uris:
            ctx.add(f"{base}.packageUris", "must be a non-empty array of gs:// package URIs")
        else:
            check_string_list(ctx, package, "packageUris", base)
        read_str(ctx, package, "pythonModule", base, required=True, what="the module to run")
        check_string_list(ctx, package, "args", base)
