"""The pure Vertex AI simulation: a simulated clock, GPU capacity, and the jobs and endpoints.

Nothing here knows about gRPC or HTTP; :mod:`.grpc_server` and :mod:`.control` translate.
All state lives behind one lock. Time moves as a discrete-event simulation: every call (and
a background ticker) first replays, in simulated-time order, every transition that became due
since the last call, so timestamps are exact (a job that waits for capacity starts at the very
simulated instant the previous job ended) no matter how coarse the wall-clock ticks are.

Side effects that leave the process (Pub/Sub hints, checkpoint objects) are not done here: the
engine hands :class:`StateChanged` and :class:`CheckpointWrite` events to listeners, which must
only enqueue them (they run under the lock).
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from google.cloud import aiplatform_v1
from google.longrunning import operations_pb2
from google.protobuf import json_format
from google.rpc import status_pb2

from flexjobs_local.simulator import listing

# --- constants ---------------------------------------------------------------------------------

STATUS_CODES: dict[str, int] = {
    "OK": 0,
    "CANCELLED": 1,
    "UNKNOWN": 2,
    "INVALID_ARGUMENT": 3,
    "DEADLINE_EXCEEDED": 4,
    "NOT_FOUND": 5,
    "ALREADY_EXISTS": 6,
    "PERMISSION_DENIED": 7,
    "RESOURCE_EXHAUSTED": 8,
    "FAILED_PRECONDITION": 9,
    "ABORTED": 10,
    "OUT_OF_RANGE": 11,
    "UNIMPLEMENTED": 12,
    "INTERNAL": 13,
    "UNAVAILABLE": 14,
    "DATA_LOSS": 15,
    "UNAUTHENTICATED": 16,
}

QUEUED = "JOB_STATE_QUEUED"
PENDING = "JOB_STATE_PENDING"
RUNNING = "JOB_STATE_RUNNING"
SUCCEEDED = "JOB_STATE_SUCCEEDED"
FAILED = "JOB_STATE_FAILED"
CANCELLING = "JOB_STATE_CANCELLING"
CANCELLED = "JOB_STATE_CANCELLED"
TERMINAL_STATES = frozenset({SUCCEEDED, FAILED, CANCELLED})

DEFAULT_MAX_WAIT_SECONDS = 86400.0
"""FLEX_START's max wait when scheduling.max_wait_duration is unset (one day)."""

FAILURE_CLASSES = ("stockout", "user", "infrastructure", "preempted")

_DEFAULT_FAULT_MESSAGES = {
    "UNAVAILABLE": "The service is currently unavailable.",
    "RESOURCE_EXHAUSTED": (
        "Quota exceeded for quota metric 'Resource management (CRUD) requests' and limit "
        "'Resource management (CRUD) requests per minute per region' of service "
        "'aiplatform.googleapis.com'."
    ),
    "DEADLINE_EXCEEDED": "Deadline Exceeded",
    "INTERNAL": "Internal error encountered.",
}

_PARENT = re.compile(r"^projects/([^/]+)/locations/([^/]+)$")
_RESUME_STEP = re.compile(r"step-(\d+)/?$")
_MAX_CALL_LOG = 10000

# --- small helpers -----------------------------------------------------------------------------


def rfc3339(epoch: float) -> str:
    """RFC 3339 UTC text for an epoch time, microsecond precision, 'Z' suffix."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _dt(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def format_duration(seconds: float) -> str:
    """Duration in protobuf JSON form: ``1800s``, ``1.5s``."""
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"


def _copy(msg: Any) -> Any:
    """Deep copy of a proto-plus message (so callers never share our mutable state)."""
    cls = type(msg)
    return cls.deserialize(cls.serialize(msg))


class SimError(Exception):
    """A request the simulator refuses, carrying the gRPC status code name to answer with."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _parse_parent(parent: str) -> tuple[str, str]:
    match = _PARENT.match(parent)
    if match is None:
        raise SimError(
            "INVALID_ARGUMENT",
            f"Invalid parent {parent!r}: expected 'projects/{{project}}/locations/{{location}}'.",
        )
    return match.group(1), match.group(2)


# --- clock -------------------------------------------------------------------------------------


class SimClock:
    """sim_now = t0 + (wall - wall0) * factor; re-anchored on every factor change or jump.

    Not thread-safe on its own: the engine calls it under its lock.
    """

    def __init__(
        self,
        factor: float,
        start: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if factor < 0:
            raise ValueError("time factor must not be negative")
        self._monotonic = monotonic
        self._factor = float(factor)
        self._wall0 = monotonic()
        self._t0 = time.time() if start is None else start

    @property
    def factor(self) -> float:
        """Simulated seconds per wall second (0 freezes the clock)."""
        return self._factor

    def now(self) -> float:
        """Current simulated time, epoch seconds."""
        return self._t0 + (self._monotonic() - self._wall0) * self._factor

    def set_factor(self, factor: float) -> None:
        """Change speed without a jump: the new line starts where the old one is now."""
        if factor < 0:
            raise ValueError("time factor must not be negative")
        self._t0 = self.now()
        self._wall0 = self._monotonic()
        self._factor = float(factor)

    def jump(self, seconds: float) -> None:
        """Move simulated time forward by ``seconds`` at once."""
        if seconds < 0:
            raise ValueError("the simulated clock only moves forward")
        self._t0 += seconds


# --- events for listeners ----------------------------------------------------------------------


@dataclass(frozen=True)
class StateChanged:
    """A job changed state at simulated time ``sim_time``."""

    resource: str  # "CustomJob", "HyperparameterTuningJob", "TrainingPipeline"
    name: str
    project: str
    location: str
    job_id: str
    state: str  # always a JobState name, also for pipelines
    sim_time: float
    error_code: int | None
    error_message: str | None


@dataclass(frozen=True)
class CheckpointWrite:
    """Write ``{prefix}/state.bin`` and, if ``commit``, then ``{prefix}/commit_success.txt``."""

    job_name: str
    project: str
    bucket: str
    prefix: str  # object path of the checkpoint directory, no trailing slash
    step: int
    commit: bool
    sim_time: float


Listener = Callable[[StateChanged | CheckpointWrite], None]


# --- jobs --------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class _Kind:
    resource: str
    collection: str
    msg_cls: Any
    pipeline: bool = False
    hints: bool = True

    def state_value(self, state: str) -> Any:
        if self.pipeline:
            pipeline_state = state.replace("JOB_STATE_", "PIPELINE_STATE_")
            return aiplatform_v1.PipelineState.__members__[pipeline_state]
        return aiplatform_v1.JobState.__members__[state]

    def state_name(self, state: str) -> str:
        return state.replace("JOB_STATE_", "PIPELINE_STATE_") if self.pipeline else state

    def valid_states(self) -> frozenset[str]:
        enum = aiplatform_v1.PipelineState if self.pipeline else aiplatform_v1.JobState
        return frozenset(enum.__members__)


CUSTOM_JOB = _Kind("CustomJob", "customJobs", aiplatform_v1.CustomJob)
HPT_JOB = _Kind(
    "HyperparameterTuningJob", "hyperparameterTuningJobs", aiplatform_v1.HyperparameterTuningJob
)
PIPELINE = _Kind(
    "TrainingPipeline",
    "trainingPipelines",
    aiplatform_v1.TrainingPipeline,
    pipeline=True,
    hints=False,
)
KINDS = {kind.resource: kind for kind in (CUSTOM_JOB, HPT_JOB, PIPELINE)}


@dataclass
class _JobSpec:
    """What the simulation needs from a request, whatever resource it came in."""

    pools: list[Any]  # WorkerPoolSpec protobufs
    scheduling: Any  # Scheduling protobuf
    output_uri_prefix: str
    multiplier: int = 1


@dataclass(eq=False)
class _Job:
    kind: _Kind
    name: str
    project: str
    location: str
    job_id: str
    msg: Any
    pools: list[PoolDemand]
    demand: dict[str, int]
    strategy: str
    max_wait: float | None  # None: waits forever
    timeout: float | None
    run_seconds: float
    checkpoint_every: int | None
    output_uri_prefix: str
    resume_from: str
    resumed_step: int
    resume_error: str | None
    create: float
    update: float
    state: str = QUEUED
    start: float | None = None
    end: float | None = None
    error: tuple[int, str] | None = None
    cancel_done_at: float | None = None
    preempt_at: float | None = None
    next_ckpt_step: int | None = None
    progress_final: float | None = None
    committed: list[int] = field(default_factory=list)
    half_written: int | None = None
    written: list[str] = field(default_factory=list)

    @property
    def expire_at(self) -> float | None:
        if self.strategy != "FLEX_START" or self.max_wait is None:
            return None
        return self.create + self.max_wait

    @property
    def finish_at(self) -> float:
        assert self.start is not None
        return self.start + max(self.run_seconds - self.resumed_step, 0.0)

    def progress(self, now: float) -> float:
        if self.progress_final is not None:
            return self.progress_final
        if self.start is None:
            return float(self.resumed_step)
        return min(self.resumed_step + (now - self.start), self.run_seconds)


# --- endpoints ---------------------------------------------------------------------------------


@dataclass(eq=False)
class _Operation:
    pb: Any  # operations_pb2.Operation
    done_at: float
    metadata: Any  # proto-plus metadata message with generic_metadata
    finish: Callable[[float], Any]  # returns the proto-plus response message


@dataclass(eq=False)
class _EndpointRecord:
    msg: Any  # aiplatform_v1.Endpoint
    project: str
    location: str
    seq: int


@dataclass
class FaultRule:
    """The next ``remaining`` calls of ``methods`` (all if empty) fail with ``code``."""

    code: str
    remaining: int
    methods: frozenset[str]
    message: str
    # "before": the call has no effect; "after": it takes effect first; "late": the caller is
    # answered at once, and the call takes effect ``late_seconds`` (wall time) afterwards, like
    # a create still in flight inside Vertex when its caller's deadline passed.
    when: str = "before"
    late_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "remaining": self.remaining,
            "methods": sorted(self.methods),
            "message": self.message,
            "when": self.when,
            "lateSeconds": self.late_seconds,
        }


# --- spec extraction ---------------------------------------------------------------------------


def _env_of(pool: Any) -> dict[str, str]:
    env = list(pool.container_spec.env) + list(pool.python_package_spec.env)
    return {var.name: var.value for var in env}


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
    env = _env_of(pool0)
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


def _duration_seconds(duration: Any) -> float:
    return float(duration.seconds) + float(duration.nanos) / 1e9


def _spec_of_pipeline(msg: Any, problems: list[str]) -> _JobSpec:
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
    return _JobSpec(pools, scheduling, str(output))


def _spec_of(kind: _Kind, msg: Any, problems: list[str]) -> _JobSpec:
    pb = type(msg).pb(msg)
    if kind is CUSTOM_JOB:
        spec = pb.job_spec
        return _JobSpec(
            list(spec.worker_pool_specs),
            spec.scheduling,
            spec.base_output_directory.output_uri_prefix,
        )
    if kind is HPT_JOB:
        spec = pb.trial_job_spec
        return _JobSpec(
            list(spec.worker_pool_specs),
            spec.scheduling,
            spec.base_output_directory.output_uri_prefix,
            multiplier=max(pb.parallel_trial_count, 1),
        )
    return _spec_of_pipeline(msg, problems)


_SPEC_FIELD = {
    "CustomJob": "job_spec",
    "HyperparameterTuningJob": "trial_job_spec",
    "TrainingPipeline": "training_task_inputs",
}


def _describe(pools: Iterable[PoolDemand]) -> str:
    merged: dict[tuple[str, str, int], int] = {}
    for pool in pools:
        key = (pool.machine_type, pool.accelerator_type, pool.accelerator_count)
        merged[key] = merged.get(key, 0) + pool.replicas
    return ", ".join(
        PoolDemand(machine, accel, count, replicas).describe()
        for (machine, accel, count), replicas in merged.items()
    )


# --- the engine --------------------------------------------------------------------------------


class Engine:
    """The simulated Vertex AI region(s): jobs, capacity, endpoints, call log and faults.

    Every public method is thread-safe and first brings the simulation up to the current
    simulated time.

    Examples:
        >>> engine = Engine(time_factor=0, seed=1)  # a frozen clock: only advance() moves it
        >>> job = engine.create_job("CustomJob", "projects/p/locations/us-central1",
        ...     aiplatform_v1.CustomJob(display_name="j", job_spec={"worker_pool_specs": [
        ...         {"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1}]}))
        >>> engine.advance(10)["timeFactor"]
        0.0
        >>> engine.get_job("CustomJob", job.name).state.name
        'JOB_STATE_RUNNING'
    """

    def __init__(
        self,
        *,
        time_factor: float = 60.0,
        default_capacity: int = 16,
        default_run_seconds: float = 300.0,
        queue_seconds: float = 5.0,
        cancel_seconds: float = 2.0,
        lro_seconds: float = 5.0,
        checkpoint_every: int | None = None,
        checkpointing: bool = False,
        seed: int | None = None,
        start_time: float | None = None,
    ) -> None:
        self._lock = threading.RLock()
        self._clock = SimClock(time_factor, start_time)
        self._initial_factor = float(time_factor)
        self._default_capacity_initial = default_capacity
        self._default_run_seconds = float(default_run_seconds)
        self._queue_seconds = float(queue_seconds)
        self._cancel_seconds = float(cancel_seconds)
        self._lro_seconds = float(lro_seconds)
        self._checkpoint_every = checkpoint_every
        self._checkpointing = checkpointing
        self._seed = seed
        self._listeners: list[Listener] = []
        self._now = self._clock.now()
        # Ids survive reset(): reusing a name from before a reset would confuse any store
        # outside the simulator that still remembers the old job.
        self._id_rng = random.Random(seed)
        self._ids: set[str] = set()
        self._reset_state()

    def _reset_state(self) -> None:
        seed = self._seed
        self._preempt_rng = random.Random(None if seed is None else seed + 1)
        self._ckpt_rng = random.Random(None if seed is None else seed + 2)
        self._jobs: dict[str, _Job] = {}
        self._order: list[_Job] = []
        self._active: list[_Job] = []
        self._default_capacity = self._default_capacity_initial
        self._capacity: dict[tuple[str, str], int] = {}
        self._in_use: dict[tuple[str, str], int] = {}
        self._preemption_rate = 0.0
        self._endpoints: dict[str, _EndpointRecord] = {}
        self._operations: dict[str, _Operation] = {}
        self._pending_ops: list[_Operation] = []
        self._calls: deque[dict[str, Any]] = deque(maxlen=_MAX_CALL_LOG)
        self._faults: list[FaultRule] = []

    # --- plumbing ------------------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        """Register a callback for :class:`StateChanged`/:class:`CheckpointWrite` events.

        It runs under the engine lock, so it must only enqueue (never block or call back).
        """
        with self._lock:
            self._listeners.append(listener)

    def _emit(self, event: StateChanged | CheckpointWrite) -> None:
        for listener in self._listeners:
            listener(event)

    def _new_id(self) -> str:
        while True:
            candidate = str(self._id_rng.randrange(10**18, 10**19))
            if candidate not in self._ids:
                self._ids.add(candidate)
                return candidate

    def tick(self) -> None:
        """Replay everything due up to the current simulated time (the background ticker)."""
        with self._lock:
            self._advance()

    def now(self) -> float:
        """Current simulated time (epoch seconds), after catching up."""
        with self._lock:
            self._advance()
            return self._now

    # --- clock control -------------------------------------------------------------------------

    def clock(self) -> dict[str, Any]:
        """``{"simNow": RFC 3339, "simNowEpoch": float, "timeFactor": float}``."""
        with self._lock:
            self._advance()
            return {
                "simNow": rfc3339(self._now),
                "simNowEpoch": self._now,
                "timeFactor": self._clock.factor,
            }

    def set_time_factor(self, factor: float) -> dict[str, Any]:
        """Change the clock speed (0 freezes it) without a jump in simulated time."""
        with self._lock:
            self._advance()
            self._clock.set_factor(factor)
        return self.clock()

    def advance(self, seconds: float) -> dict[str, Any]:
        """Jump the simulated clock forward, replaying every transition on the way in order."""
        with self._lock:
            self._advance()
            self._clock.jump(seconds)
            self._advance()
        return self.clock()

    # --- capacity ------------------------------------------------------------------------------

    def set_capacity(self, location: str, accelerator_type: str, gpus: int) -> dict[str, Any]:
        """Set the total GPUs of one type in one location; waiting jobs that now fit start."""
        if accelerator_type not in aiplatform_v1.AcceleratorType.__members__:
            raise SimError("INVALID_ARGUMENT", f"Unknown accelerator type {accelerator_type!r}.")
        if gpus < 0:
            raise SimError("INVALID_ARGUMENT", "gpus must not be negative.")
        with self._lock:
            self._advance()
            self._capacity[(location, accelerator_type)] = int(gpus)
            self._admit(self._now)
        return self.capacity()

    def set_default_capacity(self, gpus: int) -> dict[str, Any]:
        """Set the GPUs of every (location, type) pair not set explicitly."""
        if gpus < 0:
            raise SimError("INVALID_ARGUMENT", "gpus must not be negative.")
        with self._lock:
            self._advance()
            self._default_capacity = int(gpus)
            self._admit(self._now)
        return self.capacity()

    def _total(self, location: str, accelerator_type: str) -> int:
        return self._capacity.get((location, accelerator_type), self._default_capacity)

    def capacity(self) -> dict[str, Any]:
        """``{"defaultGpus": n, "pools": [{location, acceleratorType, gpus, inUse, explicit}]}``."""
        with self._lock:
            self._advance()
            keys = sorted(set(self._capacity) | {k for k, v in self._in_use.items() if v})
            return {
                "defaultGpus": self._default_capacity,
                "pools": [
                    {
                        "location": location,
                        "acceleratorType": accel,
                        "gpus": self._total(location, accel),
                        "inUse": self._in_use.get((location, accel), 0),
                        "explicit": (location, accel) in self._capacity,
                    }
                    for location, accel in keys
                ],
            }

    def _fits(self, job: _Job) -> bool:
        return all(
            self._total(job.location, accel) - self._in_use.get((job.location, accel), 0) >= gpus
            for accel, gpus in job.demand.items()
        )

    def _allocate(self, job: _Job, sign: int) -> None:
        for accel, gpus in job.demand.items():
            key = (job.location, accel)
            self._in_use[key] = self._in_use.get(key, 0) + sign * gpus

    # --- call log and faults -------------------------------------------------------------------

    def record_call(
        self, method: str, request: dict[str, Any], code: str, message: str = ""
    ) -> None:
        """Append one RPC to the call log (the newest 10000 are kept)."""
        with self._lock:
            self._calls.append(
                {
                    "method": method,
                    "time": datetime.now(UTC).isoformat(),
                    "simTime": rfc3339(self._clock.now()),
                    "request": request,
                    "code": code,
                    "message": message,
                }
            )

    def calls(self, method: str | None = None) -> list[dict[str, Any]]:
        """The call log, oldest first, optionally only one method (short name)."""
        with self._lock:
            return [dict(c) for c in self._calls if method is None or c["method"] == method]

    def clear_calls(self) -> int:
        """Empty the call log; returns how many entries were dropped."""
        with self._lock:
            count = len(self._calls)
            self._calls.clear()
            return count

    def inject_faults(
        self,
        code: str,
        count: int = 1,
        methods: Iterable[str] | None = None,
        *,
        when: str = "before",
        message: str | None = None,
        late_seconds: float = 2.0,
    ) -> dict[str, Any]:
        """Make the next ``count`` calls (of ``methods``, or any) fail with status ``code``.

        ``when="before"`` fails the call before it has any effect; ``when="after"`` lets it take
        effect and then fails the response (a lost reply, to exercise idempotent retries);
        ``when="late"`` fails the response at once and lets the call take effect
        ``late_seconds`` later (a timed-out create that still happens).
        """
        if code not in STATUS_CODES or code == "OK":
            raise SimError("INVALID_ARGUMENT", f"Unknown gRPC status code {code!r}.")
        if count < 1:
            raise SimError("INVALID_ARGUMENT", "count must be at least 1.")
        if when not in ("before", "after", "late"):
            raise SimError("INVALID_ARGUMENT", "when must be 'before', 'after' or 'late'.")
        if late_seconds < 0:
            raise SimError("INVALID_ARGUMENT", "lateSeconds must not be negative.")
        rule = FaultRule(
            code=code,
            remaining=int(count),
            methods=frozenset(methods or ()),
            message=message or _DEFAULT_FAULT_MESSAGES.get(code, f"Injected fault ({code})."),
            when=when,
            late_seconds=float(late_seconds),
        )
        with self._lock:
            self._faults.append(rule)
        return self.faults()

    def faults(self) -> dict[str, Any]:
        """``{"faults": [rule, ...]}`` still armed."""
        with self._lock:
            return {"faults": [rule.to_json() for rule in self._faults]}

    def clear_faults(self) -> dict[str, Any]:
        """Disarm every fault rule."""
        with self._lock:
            self._faults.clear()
        return self.faults()

    def take_fault(self, method: str) -> FaultRule | None:
        """Consume one shot of the first armed rule that matches ``method``, if any."""
        with self._lock:
            for rule in self._faults:
                if not rule.methods or method in rule.methods:
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._faults.remove(rule)
                    return rule
            return None

    # --- job creation --------------------------------------------------------------------------

    def create_job(self, resource: str, parent: str, msg: Any) -> Any:
        """Create a CustomJob / HyperparameterTuningJob / TrainingPipeline; returns a copy.

        Raises:
            SimError: INVALID_ARGUMENT with every problem found, joined by "; ".
        """
        kind = KINDS[resource]
        project, location = _parse_parent(parent)
        msg = _copy(msg)
        problems: list[str] = []
        if not msg.display_name:
            problems.append("display_name is required.")
        spec = _spec_of(kind, msg, problems)
        where = _SPEC_FIELD[resource]
        if not spec.pools:
            problems.append(f"{where}.worker_pool_specs must contain at least one worker pool.")
        pools = [
            pool_demand
            for index, pool in enumerate(spec.pools)
            if (pool_demand := _pool_demand(index, pool, where, problems)) is not None
        ]
        run_seconds = (
            _run_seconds(spec.pools[0], self._default_run_seconds, problems) if spec.pools else 0.0
        )
        if problems:
            raise SimError("INVALID_ARGUMENT", "; ".join(problems))
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
        env = _env_of(spec.pools[0])
        every = self._checkpoint_every_for(env, run_seconds, problems)
        if problems:
            raise SimError("INVALID_ARGUMENT", "; ".join(problems))
        with self._lock:
            self._advance()
            job = self._new_job(
                kind=kind,
                project=project,
                location=location,
                msg=msg,
                spec=spec,
                pools=pools,
                demand=demand,
                run_seconds=run_seconds,
            )
            job.checkpoint_every = every
            self._jobs[job.name] = job
            self._order.append(job)
            self._active.append(job)
            self._sync(job)
            self._emit_state(job)
            self._advance()
            return _copy(job.msg)

    def _new_job(
        self,
        *,
        kind: _Kind,
        project: str,
        location: str,
        msg: Any,
        spec: _JobSpec,
        pools: list[PoolDemand],
        demand: dict[str, int],
        run_seconds: float,
    ) -> _Job:
        job_id = self._new_id()
        name = f"projects/{project}/locations/{location}/{kind.collection}/{job_id}"
        scheduling = spec.scheduling
        strategy = aiplatform_v1.Scheduling.Strategy(scheduling.strategy).name
        if scheduling.HasField("max_wait_duration"):
            wait = _duration_seconds(scheduling.max_wait_duration)
            max_wait: float | None = wait if wait > 0 else None  # 0s means wait forever
        else:
            max_wait = DEFAULT_MAX_WAIT_SECONDS
        timeout = _duration_seconds(scheduling.timeout) if scheduling.HasField("timeout") else None
        resume_from = _env_of(spec.pools[0]).get("FLEXJOBS_RESUME_FROM", "")
        resumed, resume_error = 0, None
        if resume_from:
            match = _RESUME_STEP.search(resume_from)
            if match is None or not resume_from.startswith("gs://"):
                resume_error = (
                    f"FLEXJOBS_RESUME_FROM={resume_from!r} is not a gs://.../step-NNNNNNNN "
                    "checkpoint directory; training starts from step 0."
                )
            else:
                resumed = int(match.group(1))
        msg.name = name
        return _Job(
            kind=kind,
            name=name,
            project=project,
            location=location,
            job_id=job_id,
            msg=msg,
            pools=pools,
            demand=demand,
            strategy=strategy,
            max_wait=max_wait,
            timeout=timeout if timeout else None,
            run_seconds=run_seconds,
            checkpoint_every=None,
            output_uri_prefix=spec.output_uri_prefix,
            resume_from=resume_from,
            resumed_step=resumed,
            resume_error=resume_error,
            create=self._now,
            update=self._now,
        )

    def _checkpoint_every_for(
        self, env: dict[str, str], run_seconds: float, problems: list[str]
    ) -> int:
        raw = env.get("FLEXJOBS_SIM_CHECKPOINT_EVERY")
        if raw is not None:
            try:
                return max(int(float(raw)), 1)
            except ValueError:
                problems.append("FLEXJOBS_SIM_CHECKPOINT_EVERY must be a number of seconds.")
        if self._checkpoint_every:
            return max(int(self._checkpoint_every), 1)
        return max(int(run_seconds // 10), 1)

    # --- job reads -----------------------------------------------------------------------------

    def _find(self, resource: str, name: str) -> _Job:
        job = self._jobs.get(name)
        if job is None or job.kind.resource != resource:
            raise SimError("NOT_FOUND", f"The {resource} does not exist: {name}")
        return job

    def get_job(self, resource: str, name: str) -> Any:
        """The job as the API returns it (a copy).

        Raises:
            SimError: NOT_FOUND.
        """
        with self._lock:
            self._advance()
            return _copy(self._find(resource, name).msg)

    def list_jobs(
        self, resource: str, parent: str, filter_text: str, page_size: int, page_token: str
    ) -> tuple[list[Any], str]:
        """One page of jobs under ``parent`` matching ``filter_text``, in creation order.

        Raises:
            SimError: INVALID_ARGUMENT for a bad parent, filter, page size or token.
        """
        kind = KINDS[resource]
        project, location = _parse_parent(parent)
        try:
            predicate = listing.parse_filter(filter_text, kind.valid_states())
        except listing.FilterError as exc:
            raise SimError("INVALID_ARGUMENT", f"Invalid filter: {exc}") from exc
        with self._lock:
            self._advance()
            matches = [
                job
                for job in self._order
                if job.kind is kind
                and job.project == project
                and job.location == location
                and predicate(self._record(job))
            ]
            try:
                page, token = listing.paginate(matches, page_size, page_token)
            except ValueError as exc:  # PageTokenError is a ValueError too
                raise SimError("INVALID_ARGUMENT", str(exc)) from exc
            return [_copy(job.msg) for job in page], token

    def _record(self, job: _Job) -> dict[str, Any]:
        return {
            "labels": dict(job.msg.labels),
            "state": job.kind.state_name(job.state),
            "display_name": job.msg.display_name,
            "create_time": job.create,
            "update_time": job.update,
            "start_time": job.start,
            "end_time": job.end,
        }

    def jobs_json(
        self, resource: str | None = None, name: str | None = None
    ) -> list[dict[str, Any]]:
        """Every job as REST JSON (camelCase, enum names) plus a ``_sim`` block of internals."""
        with self._lock:
            self._advance()
            return [
                self._job_json(job)
                for job in self._order
                if (resource is None or job.kind.resource == resource)
                and (name is None or job.name == name)
            ]

    def _job_json(self, job: _Job) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(
            type(job.msg).to_json(
                job.msg, use_integers_for_enums=False, always_print_fields_with_no_presence=False
            )
        )
        data["_sim"] = {
            "resource": job.kind.resource,
            "demand": dict(job.demand),
            "resources": _describe(job.pools),
            "strategy": job.strategy,
            "maxWaitSeconds": job.max_wait,
            "expireTime": rfc3339(job.expire_at) if job.expire_at is not None else None,
            "runSeconds": job.run_seconds,
            "resumeFrom": job.resume_from or None,
            "resumedStep": job.resumed_step,
            "resumeError": job.resume_error,
            "progressSeconds": job.progress(self._now),
            "checkpointEverySeconds": job.checkpoint_every,
            "checkpointSteps": list(job.committed),
            "halfWrittenStep": job.half_written,
            "checkpointObjectsWritten": list(job.written),
            "preemptTime": rfc3339(job.preempt_at) if job.preempt_at is not None else None,
        }
        return data

    # --- job transitions -----------------------------------------------------------------------

    def _sync(self, job: _Job) -> None:
        msg = job.msg
        msg.state = job.kind.state_value(job.state)
        msg.create_time = _dt(job.create)
        msg.update_time = _dt(job.update)
        if job.start is not None:
            msg.start_time = _dt(job.start)
        if job.end is not None:
            msg.end_time = _dt(job.end)
        if job.error is not None:
            msg.error = status_pb2.Status(code=job.error[0], message=job.error[1])

    def _emit_state(self, job: _Job) -> None:
        self._emit(
            StateChanged(
                resource=job.kind.resource,
                name=job.name,
                project=job.project,
                location=job.location,
                job_id=job.job_id,
                state=job.state,
                sim_time=job.update,
                error_code=job.error[0] if job.error else None,
                error_message=job.error[1] if job.error else None,
            )
        )

    def _transition(
        self, job: _Job, state: str, at: float, error: tuple[int, str] | None = None
    ) -> None:
        was_running = job.state == RUNNING
        if was_running and state != RUNNING:
            job.progress_final = job.progress(at)
            self._allocate(job, -1)
            job.preempt_at = None
            job.next_ckpt_step = None
        job.state = state
        job.update = at
        if state == RUNNING:
            job.start = at
        if state in TERMINAL_STATES:
            job.end = at
            if job in self._active:
                self._active.remove(job)
        if error is not None:
            job.error = error
        self._sync(job)
        self._emit_state(job)

    def _start(self, job: _Job, at: float) -> None:
        self._allocate(job, +1)
        self._transition(job, RUNNING, at)
        self._draw_preemption(job, at)
        if self._checkpoints_enabled(job) and job.checkpoint_every:
            step = (job.resumed_step // job.checkpoint_every + 1) * job.checkpoint_every
            job.next_ckpt_step = step if step < job.run_seconds else None

    def _checkpoints_enabled(self, job: _Job) -> bool:
        return self._checkpointing and job.output_uri_prefix.startswith("gs://")

    def _draw_preemption(self, job: _Job, at: float) -> None:
        if job.strategy == "SPOT" and self._preemption_rate > 0:
            job.preempt_at = at + self._preempt_rng.expovariate(self._preemption_rate / 3600.0)
        else:
            job.preempt_at = None

    def _admit(self, at: float) -> None:
        # Submission order, but a job that does not fit does not block smaller ones (backfill).
        for job in list(self._active):
            if job.state == PENDING and self._fits(job):
                self._start(job, at)

    def _events_of(self, job: _Job) -> list[tuple[float, int, str]]:
        # The middle element orders simultaneous events: a checkpoint due at the very end is
        # written before completion, and an expiry wins over reaching PENDING.
        events: list[tuple[float, int, str]] = []
        if job.state in (QUEUED, PENDING) and job.expire_at is not None:
            events.append((job.expire_at, 1, "expire"))
        if job.state == QUEUED:
            events.append((job.create + self._queue_seconds, 5, "pending"))
        elif job.state == RUNNING:
            assert job.start is not None
            if job.next_ckpt_step is not None:
                at = job.start + (job.next_ckpt_step - job.resumed_step)
                events.append((at, 0, "checkpoint"))
            events.append((job.finish_at, 2, "complete"))
            if job.preempt_at is not None:
                events.append((job.preempt_at, 3, "preempt"))
            if job.timeout is not None:
                events.append((job.start + job.timeout, 4, "timeout"))
        elif job.state == CANCELLING and job.cancel_done_at is not None:
            events.append((job.cancel_done_at, 6, "cancelled"))
        return events

    def _advance(self) -> None:
        target = max(self._clock.now(), self._now)
        while True:
            best: tuple[float, int, str] | None = None
            best_job: _Job | None = None
            for job in self._active:
                for event in self._events_of(job):
                    if event[0] <= target and (best is None or event[:2] < best[:2]):
                        best, best_job = event, job
            best_op = min(
                (op for op in self._pending_ops if op.done_at <= target),
                key=lambda op: op.done_at,
                default=None,
            )
            if best_op is not None and (best is None or best_op.done_at < best[0]):
                self._now = max(self._now, best_op.done_at)
                self._complete_operation(best_op, self._now)
                continue
            if best is None or best_job is None:
                break
            self._now = max(self._now, best[0])
            self._apply(best_job, best[2], self._now)
            self._admit(self._now)
        self._now = target

    def _apply(self, job: _Job, action: str, at: float) -> None:
        if action == "pending":
            self._transition(job, PENDING, at)
        elif action == "expire":
            self._transition(job, FAILED, at, self._expiry_error(job))
        elif action == "checkpoint":
            assert job.next_ckpt_step is not None
            self._write_checkpoint(job, job.next_ckpt_step, commit=True, at=at)
            following = job.next_ckpt_step + (job.checkpoint_every or 1)
            job.next_ckpt_step = following if following < job.run_seconds else None
        elif action == "complete":
            if self._checkpoints_enabled(job):
                final = int(job.run_seconds)
                if final > max(job.committed, default=job.resumed_step):
                    self._write_checkpoint(job, final, commit=True, at=at)
            self._transition(job, SUCCEEDED, at)
        elif action == "preempt":
            self._preempt(job, at)
        elif action == "timeout":
            assert job.timeout is not None
            message = (
                "The job was stopped because it ran longer than the timeout set in its "
                f"scheduling (timeout={format_duration(job.timeout)})."
            )
            self._transition(job, FAILED, at, (STATUS_CODES["DEADLINE_EXCEEDED"], message))
        elif action == "cancelled":
            self._transition(job, CANCELLED, at)

    def _expiry_error(self, job: _Job) -> tuple[int, str]:
        assert job.max_wait is not None
        message = (
            f"Job did not start: the requested resources ({_describe(job.pools)}) were not "
            f"available within the max wait duration (maxWaitDuration="
            f"{format_duration(job.max_wait)}) of the FLEX_START scheduling strategy."
        )
        return STATUS_CODES["DEADLINE_EXCEEDED"], message

    def _write_checkpoint(self, job: _Job, step: int, *, commit: bool, at: float) -> None:
        bucket, _, path = job.output_uri_prefix[len("gs://") :].partition("/")
        path = path.strip("/")
        prefix = f"{path}/checkpoints/step-{step:08d}" if path else f"checkpoints/step-{step:08d}"
        if commit:
            job.committed.append(step)
        else:
            job.half_written = step
        self._emit(CheckpointWrite(job.name, job.project, bucket, prefix, step, commit, at))

    def mark_checkpoint_written(self, job_name: str, object_uri: str) -> None:
        """Note that the storage worker finished writing ``object_uri`` for ``job_name``."""
        with self._lock:
            job = self._jobs.get(job_name)
            if job is not None:
                job.written.append(object_uri)

    # --- cancellation, preemption, failures ----------------------------------------------------

    def cancel_job(self, resource: str, name: str) -> None:
        """Start cancelling: CANCELLING now (capacity freed), CANCELLED shortly after.

        Raises:
            SimError: NOT_FOUND; FAILED_PRECONDITION if the job already ended.
        """
        with self._lock:
            self._advance()
            job = self._find(resource, name)
            if job.state in TERMINAL_STATES:
                raise SimError(
                    "FAILED_PRECONDITION",
                    f"Cannot cancel {resource} {name} because it is in state "
                    f"{job.kind.state_name(job.state)}.",
                )
            if job.state == CANCELLING:
                return  # already on its way; cancelling twice is harmless
            job.cancel_done_at = self._now + self._cancel_seconds
            self._transition(job, CANCELLING, self._now)
            self._admit(self._now)

    def _preempt(self, job: _Job, at: float) -> None:
        progress = job.progress(at)
        last = max(job.committed, default=job.resumed_step)
        if self._checkpoints_enabled(job) and self._ckpt_rng.random() < 0.5:
            step = int(progress)
            if step > last:
                # Reclaimed mid-save: the data is there but the commit marker never got written.
                self._write_checkpoint(job, step, commit=False, at=at)
        self._transition(job, FAILED, at, self._failure("preempted", job))

    def _failure(self, failure_class: str, job: _Job) -> tuple[int, str]:
        if failure_class == "preempted":
            reason = (
                "Spot VM capacity was reclaimed"
                if job.strategy == "SPOT"
                else "the reserved capacity was reclaimed"
            )
            return STATUS_CODES["UNAVAILABLE"], (
                f"The replica workerpool0-0 was preempted by Compute Engine ({reason}). "
                "Resubmit the job to continue."
            )
        if failure_class == "stockout":
            return STATUS_CODES["RESOURCE_EXHAUSTED"], (
                f"The zone '{job.location}-a' does not have enough resources available to "
                "fulfill the request. Try a different zone, or try again later. "
                "(ZONE_RESOURCE_POOL_EXHAUSTED)"
            )
        if failure_class == "user":
            return STATUS_CODES["INVALID_ARGUMENT"], (
                "The replica workerpool0-0 exited with a non-zero status of 1. To find out more "
                "about why your job exited please check the logs: "
                f"https://console.cloud.google.com/logs/viewer?project={job.project}"
                f"&resource=ml_job%2Fjob_id%2F{job.job_id}&advancedFilter=resource.type"
                f"%3D%22ml_job%22%0Aresource.labels.job_id%3D%22{job.job_id}%22"
            )
        if failure_class == "infrastructure":
            return STATUS_CODES["INTERNAL"], "Internal error occurred for the current attempt."
        raise SimError(
            "INVALID_ARGUMENT",
            f"Unknown failure class {failure_class!r}; "
            f"expected one of {', '.join(FAILURE_CLASSES)}.",
        )

    def _find_any(self, name: str) -> _Job:
        job = self._jobs.get(name)
        if job is None:
            raise SimError("NOT_FOUND", f"No job named {name}")
        return job

    def preempt(self, name: str) -> dict[str, Any]:
        """Preempt a RUNNING job now (any strategy); returns its JSON.

        Raises:
            SimError: NOT_FOUND; FAILED_PRECONDITION if it is not RUNNING.
        """
        with self._lock:
            self._advance()
            job = self._find_any(name)
            if job.state != RUNNING:
                raise SimError(
                    "FAILED_PRECONDITION",
                    f"Only a running job can be preempted; {name} is {job.state}.",
                )
            self._preempt(job, self._now)
            self._admit(self._now)
            return self._job_json(job)

    def fail(self, name: str, failure_class: str, message: str | None = None) -> dict[str, Any]:
        """Fail a not-yet-ended job now with a realistic error of ``failure_class``.

        Raises:
            SimError: NOT_FOUND; INVALID_ARGUMENT (unknown class); FAILED_PRECONDITION (ended).
        """
        with self._lock:
            self._advance()
            job = self._find_any(name)
            if job.state in TERMINAL_STATES:
                raise SimError("FAILED_PRECONDITION", f"{name} already ended in {job.state}.")
            code, text = self._failure(failure_class, job)
            if failure_class == "preempted" and job.state == RUNNING:
                self._preempt(job, self._now)
            else:
                self._transition(job, FAILED, self._now, (code, message or text))
            self._admit(self._now)
            return self._job_json(job)

    def set_preemption_rate(self, rate_per_hour: float, seed: int | None = None) -> dict[str, Any]:
        """Give every RUNNING SPOT job a seeded random preemption chance per simulated hour."""
        if rate_per_hour < 0:
            raise SimError("INVALID_ARGUMENT", "ratePerHour must not be negative.")
        with self._lock:
            self._advance()
            if seed is not None:
                self._preempt_rng = random.Random(seed)
            self._preemption_rate = float(rate_per_hour)
            # Exponential waiting times are memoryless, so redrawing from now is exact.
            for job in self._active:
                if job.state == RUNNING:
                    self._draw_preemption(job, self._now)
            return {"ratePerHour": self._preemption_rate, "seed": seed}

    # --- endpoints -----------------------------------------------------------------------------

    def _new_operation(
        self, resource_name: str, metadata: Any, finish: Callable[[float], Any], delay: float
    ) -> operations_pb2.Operation:
        op_id = self._new_id()
        metadata.generic_metadata.create_time = _dt(self._now)
        metadata.generic_metadata.update_time = _dt(self._now)
        pb = operations_pb2.Operation(name=f"{resource_name}/operations/{op_id}", done=False)
        pb.metadata.Pack(type(metadata).pb(metadata))
        op = _Operation(pb=pb, done_at=self._now + delay, metadata=metadata, finish=finish)
        self._operations[pb.name] = op
        self._pending_ops.append(op)
        return self._op_copy(op)

    @staticmethod
    def _op_copy(op: _Operation) -> operations_pb2.Operation:
        copy = operations_pb2.Operation()
        copy.CopyFrom(op.pb)
        return copy

    def _complete_operation(self, op: _Operation, at: float) -> None:
        self._pending_ops.remove(op)
        op.metadata.generic_metadata.update_time = _dt(at)
        op.pb.metadata.Pack(type(op.metadata).pb(op.metadata))
        try:
            response = op.finish(at)
        except SimError as err:
            # The operation itself failed (e.g. the endpoint vanished meanwhile): report it on
            # the operation, the way Vertex does, instead of on an RPC.
            op.pb.error.CopyFrom(
                status_pb2.Status(code=STATUS_CODES[err.code], message=err.message)
            )
        else:
            op.pb.response.Pack(type(response).pb(response))
        op.pb.done = True

    def get_operation(self, name: str) -> operations_pb2.Operation:
        """The long-running operation ``name`` (a copy).

        Raises:
            SimError: NOT_FOUND.
        """
        with self._lock:
            self._advance()
            op = self._operations.get(name)
            if op is None:
                raise SimError("NOT_FOUND", f"Operation {name} not found.")
            return self._op_copy(op)

    def operations_json(self) -> list[dict[str, Any]]:
        """Every operation as JSON (for debugging)."""
        with self._lock:
            self._advance()
            return [json_format.MessageToDict(op.pb) for op in self._operations.values()]

    def create_endpoint(
        self, parent: str, endpoint: Any, endpoint_id: str = ""
    ) -> operations_pb2.Operation:
        """Start creating an endpoint; the LRO finishes (and the endpoint appears) later.

        Raises:
            SimError: INVALID_ARGUMENT (parent, display_name); ALREADY_EXISTS (endpoint_id).
        """
        project, location = _parse_parent(parent)
        if not endpoint.display_name:
            raise SimError("INVALID_ARGUMENT", "endpoint.display_name is required.")
        with self._lock:
            self._advance()
            eid = endpoint_id or self._new_id()
            name = f"projects/{project}/locations/{location}/endpoints/{eid}"
            if name in self._endpoints:
                raise SimError("ALREADY_EXISTS", f"Endpoint {name} already exists.")
            msg = _copy(endpoint)
            msg.name = name
            seq = len(self._endpoints)

            def finish(at: float) -> Any:
                msg.create_time = _dt(at)
                msg.update_time = _dt(at)
                self._endpoints[name] = _EndpointRecord(msg, project, location, seq)
                return _copy(msg)

            return self._new_operation(
                name, aiplatform_v1.CreateEndpointOperationMetadata(), finish, self._lro_seconds
            )

    def _find_endpoint(self, name: str) -> _EndpointRecord:
        record = self._endpoints.get(name)
        if record is None:
            raise SimError("NOT_FOUND", f"The Endpoint does not exist: {name}")
        return record

    def get_endpoint(self, name: str) -> Any:
        """The endpoint (a copy). Raises SimError NOT_FOUND."""
        with self._lock:
            self._advance()
            return _copy(self._find_endpoint(name).msg)

    def list_endpoints(self, parent: str, page_size: int, page_token: str) -> tuple[list[Any], str]:
        """Endpoints under ``parent`` in creation order (no filter support)."""
        project, location = _parse_parent(parent)
        with self._lock:
            self._advance()
            matches = [
                r
                for r in sorted(self._endpoints.values(), key=lambda r: r.seq)
                if r.project == project and r.location == location
            ]
            try:
                page, token = listing.paginate(matches, page_size, page_token)
            except ValueError as exc:
                raise SimError("INVALID_ARGUMENT", str(exc)) from exc
            return [_copy(r.msg) for r in page], token

    def endpoints_json(self) -> list[dict[str, Any]]:
        """Every endpoint as REST JSON."""
        with self._lock:
            self._advance()
            return [
                json.loads(
                    aiplatform_v1.Endpoint.to_json(
                        r.msg,
                        use_integers_for_enums=False,
                        always_print_fields_with_no_presence=False,
                    )
                )
                for r in self._endpoints.values()
            ]

    def deploy_model(
        self, endpoint: str, deployed_model: Any, traffic_split: dict[str, int]
    ) -> operations_pb2.Operation:
        """Start deploying; when the LRO finishes the endpoint lists the model with a new id.

        ``traffic_split`` uses key "0" for the model being deployed, like Vertex. Without one,
        the first model on an endpoint gets 100 and later ones get none.

        Raises:
            SimError: NOT_FOUND (endpoint); INVALID_ARGUMENT (no model, split not summing to 100).
        """
        if not deployed_model.model:
            raise SimError("INVALID_ARGUMENT", "deployed_model.model is required.")
        if traffic_split and sum(traffic_split.values()) != 100:
            raise SimError("INVALID_ARGUMENT", "traffic_split must sum to 100.")
        with self._lock:
            self._advance()
            record = self._find_endpoint(endpoint)
            model = _copy(deployed_model)
            model.id = self._new_id()
            split = dict(traffic_split)

            def finish(at: float) -> Any:
                msg = record.msg
                model.create_time = _dt(at)
                msg.deployed_models.append(model)
                if split:
                    new = {(model.id if k == "0" else k): v for k, v in split.items()}
                    msg.traffic_split.clear()
                    msg.traffic_split.update(new)
                elif len(msg.deployed_models) == 1:
                    msg.traffic_split[model.id] = 100
                msg.update_time = _dt(at)
                return aiplatform_v1.DeployModelResponse(deployed_model=_copy(model))

            return self._new_operation(
                endpoint, aiplatform_v1.DeployModelOperationMetadata(), finish, self._lro_seconds
            )

    def undeploy_model(
        self, endpoint: str, deployed_model_id: str, traffic_split: dict[str, int]
    ) -> operations_pb2.Operation:
        """Start undeploying ``deployed_model_id``; the model leaves the endpoint at completion.

        Raises:
            SimError: NOT_FOUND (endpoint or deployed model).
        """
        with self._lock:
            self._advance()
            record = self._find_endpoint(endpoint)
            if not any(m.id == deployed_model_id for m in record.msg.deployed_models):
                raise SimError(
                    "NOT_FOUND", f"Deployed model {deployed_model_id} not found on {endpoint}."
                )
            split = dict(traffic_split)

            def finish(at: float) -> Any:
                msg = record.msg
                keep = [_copy(m) for m in msg.deployed_models if m.id != deployed_model_id]
                msg.deployed_models = keep
                new = split or {
                    k: v for k, v in msg.traffic_split.items() if k != deployed_model_id
                }
                if keep and not new:
                    new = {keep[0].id: 100}
                msg.traffic_split.clear()
                msg.traffic_split.update(new)
                msg.update_time = _dt(at)
                return aiplatform_v1.UndeployModelResponse()

            return self._new_operation(
                endpoint, aiplatform_v1.UndeployModelOperationMetadata(), finish, self._lro_seconds
            )

    # --- reset ---------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget jobs, endpoints, operations, calls and faults; capacity, preemption rate,
        time factor and random seeds back to their start-up values. Simulated time keeps going.
        """
        with self._lock:
            self._advance()
            self._clock.set_factor(self._initial_factor)
            self._reset_state()
