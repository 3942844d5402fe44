"""Attempts: the body of attempt n+1, and what an ended attempt cost (pure).

Every attempt runs the request's own Vertex body, with three container env vars added to every
worker pool so the training code can resume:

* ``FLEXJOBS_RUN_ID``: stable across attempts (the request's label value);
* ``FLEXJOBS_ATTEMPT``: 1-based;
* ``FLEXJOBS_RESUME_FROM``: the latest complete checkpoint's URI, absent when there is none.

``baseOutputDirectory`` is never touched, so Vertex's ``AIP_CHECKPOINT_DIR`` stays the same.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from shared.domain.model.kinds import kind_named
from shared.domain.model.strategies import AUTO, DEFAULT_MAX_WAIT, Strategy
from shared.domain.model.values import copy_json
from shared.domain.request.message import job_spec_of

ENV_RUN_ID = "FLEXJOBS_RUN_ID"
ENV_ATTEMPT = "FLEXJOBS_ATTEMPT"
ENV_RESUME_FROM = "FLEXJOBS_RESUME_FROM"
_OURS = {ENV_RUN_ID, ENV_ATTEMPT, ENV_RESUME_FROM}


def _pools(kind: str, spec: dict[str, Any]) -> list[dict[str, Any]]:
    job_spec = job_spec_of(kind, spec)  # None for a deployment: it has no worker pools
    pools = job_spec.get("workerPoolSpecs") if job_spec else None
    return [p for p in pools if isinstance(p, dict)] if isinstance(pools, list) else []


def attempt_spec(
    kind: str,
    spec: dict[str, Any],
    *,
    run_id: str,
    attempt: int,
    resume_from: str | None,
    strategy: str | None = None,
    max_wait_seconds: int | None = None,
) -> dict[str, Any]:
    """Return a copy of ``spec`` for one attempt: our env in every pool, and the strategy.

    ``max_wait_seconds`` sets a FLEX_START attempt's ``maxWaitDuration`` (AUTO's choice, see
    :mod:`shared.domain.capacity.rule`); it must be positive, as ``0s`` would mean wait forever.

    Raises:
        ValueError: the body would still say AUTO, which Vertex does not know: the capacity
            policy must have chosen the attempt's strategy first. Or ``max_wait_seconds`` is
            not positive.

    Examples:
        >>> body = {"jobSpec": {"workerPoolSpecs": [{"containerSpec": {"imageUri": "x"}}]}}
        >>> out = attempt_spec("customJob", body, run_id="r", attempt=2, resume_from=None)
        >>> out["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["env"]
        [{'name': 'FLEXJOBS_RUN_ID', 'value': 'r'}, {'name': 'FLEXJOBS_ATTEMPT', 'value': '2'}]
    """
    # A request body is JSON (canonical, or read back from the record's text): copy_json
    # copies it as deepcopy would, for much less.
    out: dict[str, Any] = copy_json(spec)
    env = [{"name": ENV_RUN_ID, "value": run_id}, {"name": ENV_ATTEMPT, "value": str(attempt)}]
    if resume_from:
        env.append({"name": ENV_RESUME_FROM, "value": resume_from})
    for pool in _pools(kind, out):
        for key in ("containerSpec", "pythonPackageSpec"):
            container = pool.get(key)
            if isinstance(container, dict):
                kept = [
                    e
                    for e in container.get("env") or []
                    if not (isinstance(e, dict) and e.get("name") in _OURS)
                ]
                container["env"] = kept + [dict(e) for e in env]
    job_spec = job_spec_of(kind, out)
    scheduling = job_spec.get("scheduling") if job_spec else None
    if strategy and isinstance(scheduling, dict) and scheduling.get("strategy") != strategy:
        scheduling["strategy"] = strategy
        if strategy == Strategy.FLEX_START:
            scheduling.setdefault("maxWaitDuration", DEFAULT_MAX_WAIT)
        else:
            # maxWaitDuration only applies to FLEX_START; Vertex would ignore it elsewhere.
            scheduling.pop("maxWaitDuration", None)
    if max_wait_seconds is not None and isinstance(scheduling, dict):
        if max_wait_seconds <= 0:
            raise ValueError(f"max_wait_seconds must be positive, got {max_wait_seconds}")
        if scheduling.get("strategy") == Strategy.FLEX_START:
            scheduling["maxWaitDuration"] = f"{int(max_wait_seconds)}s"
    if isinstance(scheduling, dict) and scheduling.get("strategy") == AUTO:
        # The one place every attempt's body is built: AUTO must never reach Vertex.
        raise ValueError(
            "an AUTO request's attempt needs the strategy the capacity policy chose "
            "(shared.domain.capacity.rule.decide); Vertex knows only FLEX_START, SPOT and STANDARD"
        )
    return out


def gpu_shape(kind: str, spec: dict[str, Any]) -> tuple[str | None, int]:
    """The accelerator type and the total GPUs all pools hold at once (validated bodies)."""
    by_type = gpus_by_accelerator(kind, spec)
    return next(iter(by_type), None), sum(by_type.values())


def gpus_by_accelerator(kind: str, spec: dict[str, Any]) -> dict[str, int]:
    """The GPUs all pools hold at once, by accelerator type in the order the pools name them:
    replicas x accelerators over every worker pool, times the parallel trials of a tuning job
    (validated bodies). What a request asks of each Vertex GPU quota.

    Examples:
        >>> pool = {"machineSpec": {"acceleratorType": "NVIDIA_L4", "acceleratorCount": 2},
        ...         "replicaCount": 3}
        >>> gpus_by_accelerator("customJob", {"jobSpec": {"workerPoolSpecs": [pool]}})
        {'NVIDIA_L4': 6}
    """
    totals: dict[str, int] = {}
    for pool in _pools(kind, spec):
        machine = pool.get("machineSpec") or {}
        count = machine.get("acceleratorCount") or 0
        replicas = pool.get("replicaCount") or 0
        if machine.get("acceleratorType") and isinstance(count, int) and isinstance(replicas, int):
            name = str(machine["acceleratorType"])
            totals[name] = totals.get(name, 0) + count * replicas
    declared = kind_named(kind)
    if declared is not None and declared.parallel_field is not None:
        # Trials run side by side, each on the pools' GPUs (a tuning job's parallelTrialCount).
        parallel = spec.get(declared.parallel_field)
        times = parallel if isinstance(parallel, int) and parallel > 0 else 1
        totals = {name: gpus * times for name, gpus in totals.items()}
    return totals


def seconds_between(start: datetime | None, end: datetime | None) -> float:
    """Non-negative seconds from ``start`` to ``end``; 0 when either is unknown."""
    if start is None or end is None:
        return 0.0
    return max(0.0, (end - start).total_seconds())


def usage(
    submitted: datetime | None,
    started: datetime | None,
    ended: datetime | None,
    gpus: int,
) -> dict[str, float]:
    """Queued and running seconds and GPU-seconds of one ended attempt.

    Vertex bills GPUs only while the job runs: queued time (waiting for capacity) is free.
    """
    running = seconds_between(started, ended)
    queued = seconds_between(submitted, started if started is not None else ended)
    return {"queuedSeconds": queued, "runningSeconds": running, "gpuSeconds": running * gpus}
