"""Reading a job request: which resource it is, its worker pools and what they ask for, its
scheduling, and the simulation knobs in the first pool's environment (run seconds, checkpoint
interval, resume point). Pure functions; nothing here holds state.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from google.cloud import aiplatform_v1
from google.protobuf import json_format

from flexjobs_local.simulator.common import SimError

DEFAULT_MAX_WAIT_SECONDS = 86400.0
"""FLEX_START's max wait when scheduling.max_wait_duration is unset (one day)."""

_RESUME_STEP = re.compile(r"step-(\d+)/?$")


@dataclass(frozen=True)
class PoolDemand:
    """One worker pool's hardware: ``replicas`` machines, each with ``accelerator_count`` GPUs."""

    machine_type: str
    accelerator_type: str  # AcceleratorType name, "" for CPU-only
    accelerator_count: int
    replicas: int

    def describe(self) -> str:
        """Human text such as ``2 x a2-highgpu-2g with 2 NVIDIA_TESLA_A100 each``."""
        text = f"{self.replicas} x {self.machine_type or 'default machine'}"
        if self.accelerator_type:
            text += f" with {self.accelerator_count} {self.accelerator_type} each"
        return text


def describe(pools: Iterable[PoolDemand]) -> str:
    """Every pool's :meth:`PoolDemand.describe`, identical hardware merged, comma-separated."""
    merged: dict[tuple[str, str, int], int] = {}
    for pool in pools:
        key = (pool.machine_type, pool.accelerator_type, pool.accelerator_count)
        merged[key] = merged.get(key, 0) + pool.replicas
    return ", ".join(
        PoolDemand(machine, accel, count, replicas).describe()
        for (machine, accel, count), replicas in merged.items()
    )


@dataclass(frozen=True)
class Kind:
    """One job resource of the API and where its worker pools live in the request."""

    resource: str
    collection: str
    msg_cls: Any
    spec_field: str  # the request field that holds the worker pool specs
    pipeline: bool = False
    hints: bool = True

    def state_value(self, state: str) -> Any:
        """The state enum value (JobState, or PipelineState for pipelines) of a JobState name."""
        if self.pipeline:
            pipeline_state = state.replace("JOB_STATE_", "PIPELINE_STATE_")
            return aiplatform_v1.PipelineState.__members__[pipeline_state]
        return aiplatform_v1.JobState.__members__[state]

    def state_name(self, state: str) -> str:
        """The state name this resource shows for a JobState name."""
        return state.replace("JOB_STATE_", "PIPELINE_STATE_") if self.pipeline else state

    def valid_states(self) -> frozenset[str]:
        """Every state name a list filter may name for this resource."""
        enum = aiplatform_v1.PipelineState if self.pipeline else aiplatform_v1.JobState
        return frozenset(enum.__members__)


CUSTOM_JOB = Kind("CustomJob", "customJobs", aiplatform_v1.CustomJob, "job_spec")
HPT_JOB = Kind(
    "HyperparameterTuningJob",
    "hyperparameterTuningJobs",
    aiplatform_v1.HyperparameterTuningJob,
    "trial_job_spec",
)
PIPELINE = Kind(
    "TrainingPipeline",
    "trainingPipelines",
    aiplatform_v1.TrainingPipeline,
    "training_task_inputs",
    pipeline=True,
    hints=False,
)
KINDS = {kind.resource: kind for kind in (CUSTOM_JOB, HPT_JOB, PIPELINE)}


@dataclass
class JobSpec:
    """What the simulation needs from a request, whatever resource it came in."""

    pools: list[Any]  # WorkerPoolSpec protobufs
    scheduling: Any  # Scheduling protobuf
    output_uri_prefix: str
    multiplier: int = 1


@dataclass
class JobPlan:
    """A valid request, read: the hardware it needs and how long it runs."""

    spec: JobSpec
    pools: list[PoolDemand]  # replicas already multiplied by parallel trials
    demand: dict[str, int]  # GPUs per accelerator type, all pools at once
    run_seconds: float
    checkpoint_every: int
    env: dict[str, str]  # the first pool's


@dataclass(frozen=True)
class Scheduling:
    """The scheduling fields the simulation acts on."""

    strategy: str  # Scheduling.Strategy name
    max_wait: float | None  # None: waits forever
    timeout: float | None


@dataclass(frozen=True)
class Resume:
    """Where ``FLEXJOBS_RESUME_FROM`` says training starts."""

    resume_from: str
    step: int
    error: str | None


def env_of(pool: Any) -> dict[str, str]:
    """The environment of a WorkerPoolSpec protobuf (container or python package)."""
    env = list(pool.container_spec.env) + list(pool.python_package_spec.env)
    return {var.name: var.value for var in env}


def plan_job(
    kind: Kind, msg: Any, *, default_run_seconds: float, checkpoint_every: int | None
) -> JobPlan:
    """Read a create request, collecting every problem.

    Raises:
        SimError: INVALID_ARGUMENT with every problem found, joined by "; ".
    """
    problems: list[str] = []
    if not msg.display_name:
        problems.append("display_name is required.")
    spec = _spec_of(kind, msg, problems)
    where = kind.spec_field
    if not spec.pools:
        problems.append(f"{where}.worker_pool_specs must contain at least one worker pool.")
    pools = [
        pool_demand
        for index, pool in enumerate(spec.pools)
        if (pool_demand := _pool_demand(index, pool, where, problems)) is not None
    ]
    run_seconds = _run_seconds(spec.pools[0], default_run_seconds, problems) if spec.pools else 0.0
    _refuse(problems)
    pools = [
        PoolDemand(
            p.machine_type,
            p.accelerator_type,
            p.accelerator_count,
            p.replicas * spec.multiplier,
        )
        for p in pools
    ]
    demand: dict[str, int] = {}
    for pool in pools:
        if pool.accelerator_type:
            demand[pool.accelerator_type] = (
                demand.get(pool.accelerator_type, 0) + pool.replicas * pool.accelerator_count
            )
    env = env_of(spec.pools[0])
    every = _checkpoint_every(env, run_seconds, checkpoint_every, problems)
    _refuse(problems)
    return JobPlan(spec, pools, demand, run_seconds, every, env)


def scheduling_of(scheduling: Any) -> Scheduling:
    """The strategy, max wait and timeout of a Scheduling protobuf."""
    strategy = aiplatform_v1.Scheduling.Strategy(scheduling.strategy).name
    if scheduling.HasField("max_wait_duration"):
        wait = _duration_seconds(scheduling.max_wait_duration)
        max_wait: float | None = wait if wait > 0 else None  # 0s means wait forever
    else:
        max_wait = DEFAULT_MAX_WAIT_SECONDS
    timeout = _duration_seconds(scheduling.timeout) if scheduling.HasField("timeout") else None
    return Scheduling(strategy, max_wait, timeout if timeout else None)


def resume_of(env: dict[str, str]) -> Resume:
    """The step ``FLEXJOBS_RESUME_FROM`` names (0 when unset or not a step directory)."""
    resume_from = env.get("FLEXJOBS_RESUME_FROM", "")
    if not resume_from:
        return Resume(resume_from, 0, None)
    match = _RESUME_STEP.search(resume_from)
    if match is None or not resume_from.startswith("gs://"):
        error = (
            f"FLEXJOBS_RESUME_FROM={resume_from!r} is not a gs://.../step-NNNNNNNN "
            "checkpoint directory; training starts from step 0."
        )
        return Resume(resume_from, 0, error)
    return Resume(resume_from, int(match.group(1)), None)


def _refuse(problems: list[str]) -> None:
    if problems:
        raise SimError("INVALID_ARGUMENT", "; ".join(problems))


def _pool_demand(index: int, pool: Any, where: str, problems: list[str]) -> PoolDemand | None:
    machine = pool.machine_spec
    if index > 0 and pool.replica_count == 0 and not machine.machine_type:
        return None  # an empty placeholder pool, as Vertex allows after the first
    accel = aiplatform_v1.AcceleratorType(machine.accelerator_type).name
    accel = "" if accel == "ACCELERATOR_TYPE_UNSPECIFIED" else accel
    if not machine.machine_type:
        problems.append(
            f"{where}.worker_pool_specs[{index}].machine_spec.machine_type is required."
        )
    if accel and machine.accelerator_count <= 0:
        problems.append(
            f"{where}.worker_pool_specs[{index}].machine_spec.accelerator_count must be positive "
            f"when accelerator_type is {accel}."
        )
    if not accel and machine.accelerator_count > 0:
        problems.append(
            f"{where}.worker_pool_specs[{index}].machine_spec.accelerator_type is required "
            "when accelerator_count is set."
        )
    replicas = pool.replica_count if pool.replica_count > 0 else (1 if index == 0 else 0)
    return PoolDemand(machine.machine_type, accel, machine.accelerator_count, replicas)


def _run_seconds(pool0: Any, default: float, problems: list[str]) -> float:
    env = env_of(pool0)
    if "FLEXJOBS_SIM_RUN_SECONDS" in env:
        try:
            value = float(env["FLEXJOBS_SIM_RUN_SECONDS"])
        except ValueError:
            problems.append("FLEXJOBS_SIM_RUN_SECONDS must be a number of seconds.")
            return default
        if value < 0:
            problems.append("FLEXJOBS_SIM_RUN_SECONDS must not be negative.")
            return default
        return value
    spec = pool0.container_spec
    if list(spec.command) == ["sleep"] and spec.args:
        try:
            return max(float(spec.args[0]), 0.0)
        except ValueError:
            # `sleep infinity` and friends are real commands; the default run time stands in.
            return default
    return default


def _checkpoint_every(
    env: dict[str, str], run_seconds: float, default: int | None, problems: list[str]
) -> int:
    raw = env.get("FLEXJOBS_SIM_CHECKPOINT_EVERY")
    if raw is not None:
        try:
            return max(int(float(raw)), 1)
        except ValueError:
            problems.append("FLEXJOBS_SIM_CHECKPOINT_EVERY must be a number of seconds.")
    if default:
        return max(int(default), 1)
    return max(int(run_seconds // 10), 1)


def _duration_seconds(duration: Any) -> float:
    return float(duration.seconds) + float(duration.nanos) / 1e9


def _spec_of(kind: Kind, msg: Any, problems: list[str]) -> JobSpec:
    if kind.pipeline:
        return _spec_of_pipeline(msg, problems)
    pb = type(msg).pb(msg)
    spec = getattr(pb, kind.spec_field)
    return JobSpec(
        list(spec.worker_pool_specs),
        spec.scheduling,
        spec.base_output_directory.output_uri_prefix,
        multiplier=max(pb.parallel_trial_count, 1) if kind is HPT_JOB else 1,
    )


def _spec_of_pipeline(msg: Any, problems: list[str]) -> JobSpec:
    pb = type(msg).pb(msg)
    inputs = (
        json_format.MessageToDict(pb.training_task_inputs)
        if pb.HasField("training_task_inputs")
        else {}
    )
    if not isinstance(inputs, dict):
        problems.append("training_task_inputs must be a struct.")
        inputs = {}
    pools = []
    for index, raw in enumerate(inputs.get("workerPoolSpecs") or []):
        try:
            wps = aiplatform_v1.WorkerPoolSpec.from_json(
                json.dumps(raw), ignore_unknown_fields=True
            )
        except (json_format.ParseError, TypeError, ValueError) as exc:
            problems.append(f"training_task_inputs.workerPoolSpecs[{index}] is invalid: {exc}")
            continue
        pools.append(aiplatform_v1.WorkerPoolSpec.pb(wps))
    scheduling = aiplatform_v1.Scheduling.pb(aiplatform_v1.Scheduling())
    if "scheduling" in inputs:
        try:
            parsed = aiplatform_v1.Scheduling.from_json(json.dumps(inputs["scheduling"]))
        except (json_format.ParseError, TypeError, ValueError) as exc:
            problems.append(f"training_task_inputs.scheduling is invalid: {exc}")
        else:
            scheduling = aiplatform_v1.Scheduling.pb(parsed)
    output = (inputs.get("baseOutputDirectory") or {}).get("outputUriPrefix", "")
    return JobSpec(pools, scheduling, str(output))
