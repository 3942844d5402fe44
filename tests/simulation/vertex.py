"""Vertex AI as the simulator's world holds it: where capacity is, what each job does with it,
and what each endpoint serves.

The storage is the fakes' (``tests.fakes``: :class:`InMemoryJobBackend` holds the jobs,
:class:`InMemoryDeploymentBackend` the endpoints and their operations); this module is the
world model around them, written by hand (the one part of the simulator besides the
scheduler that is):

- **Regions.** Each answers, or not (a region that stops answering: every call times out; a
  create's outcome is then unknown and nothing is made), and may refuse creates of an
  accelerator for good (no such machine there).
- **Quota.** The project's real GPU quota per (region, accelerator, pool): a create past it is
  refused for quota, as Vertex refuses it, whatever flexjobs' own bookkeeping says.
- **Capacity.** Spot capacity per (region, machine type) is there or lost; FLEX_START capacity
  per region likewise. A Spot job starts when its capacity is there and is preempted when it
  is lost; a FLEX_START job waits for its capacity at most ``maxWaitDuration``; on-demand
  starts after a placement delay.
- **Work.** Each request's job runs for the work the scenario gave it. An attempt spends its
  restart overhead first, and reading its checkpoint from another region (8 s per GB, as
  :mod:`shared.domain.capacity.regions` assumes) before it makes progress again; it writes a
  complete checkpoint every interval of progress (a step directory and its marker, then the
  storage event), and succeeds when its work is done.
- **Endpoints.** A Spot deployed model serves its required replicas while its Spot capacity
  is there and none while it is lost; an operation (DeployModel, MutateDeployedModel,
  UndeployModel) ends when its time comes, or late, or with an error.

Every job state change is published as a hint (``{"jobName": ...}``), and every checkpoint
as a storage event: the world says what happened; flexjobs has to find out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from shared.domain.admission.config import Pool, Resource, pool_of
from shared.domain.decisions.deploy_model import OperationStatus
from shared.domain.model.ids import LABEL_ATTEMPT, LABEL_REQUEST
from shared.domain.model.states import from_vertex
from shared.domain.model.vertex_jobs import location_of
from shared.domain.request.attempts import ENV_RESUME_FROM
from shared.domain.request.auto_regions import region_bound
from shared.domain.request.message import JobRequest, job_spec_of
from shared.kernel.errors import (
    BackendRejected,
    BackendUnavailable,
    OutcomeUnknown,
    QuotaExhausted,
)
from tests.fakes import InMemoryCheckpointStore, InMemoryDeploymentBackend, InMemoryJobBackend

#: Seconds to read one GB of checkpoint across regions (shared.domain.capacity.regions').
SECONDS_PER_GB = 8.0
#: How long on-demand and Spot capacity take to place a job that has it.
PLACEMENT = timedelta(seconds=60)
#: How long each long-running endpoint operation takes.
OPERATION_TIME = {
    "DeployModel": timedelta(minutes=12),
    "MutateDeployedModel": timedelta(minutes=4),
    "UndeployModel": timedelta(minutes=2),
}
#: The errors a job ends with, worded as Vertex words them (flexjobs_local.simulator.failures).
PREEMPTED = (
    14,
    "The replica workerpool0-0 was preempted by Compute Engine (Spot VM capacity was "
    "reclaimed). Resubmit the job to continue.",
)
STOCKOUT = (
    8,
    "The zone does not have enough resources available to fulfill the request. "
    "(ZONE_RESOURCE_POOL_EXHAUSTED)",
)
EXPIRED = (
    4,
    "Job did not start: the requested resources were not available within the max wait "
    "duration (maxWaitDuration) of the FLEX_START scheduling strategy.",
)
USER_ERROR = (3, "The replica workerpool0-0 exited with a non-zero status of 1.")


def region_of(name: str) -> str:
    """The region a Vertex resource name says (``projects/P/locations/R/...``)."""
    return location_of(name) or ""


@dataclass(frozen=True)
class Work:
    """What a request's training does, as the world runs it."""

    seconds: float
    checkpoint_every: float | None = None
    restart_overhead: float = 120.0
    checkpoint_gb: float = 0.0
    #: The region of its checkpoints' bucket: reading them elsewhere costs the transfer.
    home: str = "us-central1"
    #: The job fails on its own (a bug in the training code) after this much progress.
    fails_after: float | None = None


@dataclass
class Run:
    """The world's side of one Vertex job (one attempt)."""

    name: str
    request_id: str
    attempt: int
    location: str
    strategy: str
    machine: str
    accelerator: str | None
    gpus: int
    created: datetime
    max_wait: float | None
    work: Work
    checkpoint_prefix: str | None
    progress: float = 0.0
    overhead_left: float = 0.0
    started: datetime | None = None
    ended: datetime | None = None


@dataclass
class Operation:
    """A long-running endpoint operation the world will end."""

    name: str
    call: str
    endpoint: str
    due: datetime
    error: str | None = None
    #: The deployment whose tag the deployed model carries, for the checks.
    tag: str | None = None


@dataclass
class Fact:
    """Something that happened in Vertex, for the checks (when, what, about whom)."""

    at: datetime
    what: str
    about: str
    detail: dict[str, Any] = field(default_factory=dict)


def _pools(request: JobRequest) -> list[dict[str, Any]]:
    spec = job_spec_of(request.kind, request.spec) or {}
    pools = spec.get("workerPoolSpecs")
    return [p for p in pools if isinstance(p, dict)] if isinstance(pools, list) else []


def _resumed_from(request: JobRequest) -> str | None:
    for pool in _pools(request):
        container = pool.get("containerSpec") or {}
        for env in container.get("env") or []:
            if isinstance(env, dict) and env.get("name") == ENV_RESUME_FROM:
                value = env.get("value")
                return value if isinstance(value, str) else None
    return None


def step_of_uri(uri: str) -> int:
    """The step of a checkpoint URI the world wrote (``.../step-00000003/``)."""
    leaf = uri.rstrip("/").rsplit("/", 1)[-1]
    return int(leaf.removeprefix("step-")) if leaf.startswith("step-") else 0


class Vertex:
    """The world's Vertex AI (see the module docstring)."""

    def __init__(
        self,
        now: Callable[[], datetime],
        checkpoints: InMemoryCheckpointStore,
        *,
        project: str = "p",
    ) -> None:
        self.now = now
        self.project = project
        self.jobs = InMemoryJobBackend(project)
        self.endpoints = InMemoryDeploymentBackend(now)
        self.checkpoints = checkpoints
        self.runs: dict[str, Run] = {}
        self.work: dict[str, Work] = {}
        self.quota: dict[Resource, int] = {}
        self.down: set[str] = set()
        self.refusing: set[tuple[str, str]] = set()
        self.spot_out: set[tuple[str, str]] = set()
        self.flex_out: set[str] = set()
        #: Regions whose Spot serving quota is used up: a deployModel's DeployModel (the Spot
        #: model) there is refused for quota (RESOURCE_EXHAUSTED), so the request is parked.
        self.serving_quota_out: set[str] = set()
        self.operations: dict[str, Operation] = {}
        #: How long each long-running endpoint operation takes in this world (a scenario may
        #: draw a DeployModel's: a GPU model takes minutes to tens of minutes to deploy).
        self.operation_time = dict(OPERATION_TIME)
        #: Jobs whose state changed, to publish as hints; checkpoints written, to publish as
        #: storage events (bucket, object name); both taken by the world.
        self.hints: list[str] = []
        self.objects: list[tuple[str, str]] = []
        self.facts: list[Fact] = []
        #: Regions where a region was ever down (the deadline check skips what it delayed).
        self.ever_down: set[str] = set()
        #: Each outage: the region and when it stopped answering.
        self.outages: list[tuple[str, datetime]] = []
        #: Set traffic calls seen, with the split before each, for the serving checks.
        self._split_before: dict[str, dict[str, int]] = {}

    # -- what flexjobs asks: gates before a call, observers after it ------------------------

    def gate(
        self, port: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Exception | None:
        """The world's own answer to a call before it is made: a region that does not
        answer, a region that refuses the accelerator, the project's quota used up."""
        if port == "vertex":
            return self._job_gate(method, args, kwargs)
        if port == "endpoints":
            endpoint = str(args[0]) if args and isinstance(args[0], str) else ""
            if method == "deploy" and args:
                endpoint = str(args[0].spec.get("endpoint") or "")
            if method == "operation" and args:
                endpoint = str(args[0]).split("/operations/")[0]
            if region_of(endpoint) in self.down:
                if method in ("deploy", "deploy_on_demand", "resize", "undeploy"):
                    return OutcomeUnknown(f"simulated: {region_of(endpoint)} does not answer")
                return BackendUnavailable(f"simulated: {region_of(endpoint)} does not answer")
            if method == "deploy" and region_of(endpoint) in self.serving_quota_out:
                return QuotaExhausted(
                    f"simulated: 429 RESOURCE_EXHAUSTED: Spot serving quota in "
                    f"{region_of(endpoint)} is used up"
                )
            if method == "set_traffic":
                self._split_before[endpoint] = dict(self.endpoints.splits.get(endpoint, {}))
        return None

    def _job_gate(
        self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Exception | None:
        if method in ("create", "find"):
            location = str(kwargs.get("location") or args[2])
        elif method == "list_labelled":
            location = str(args[0])
        else:
            location = region_of(str(args[0]))
        if location in self.down:
            if method == "create":
                return OutcomeUnknown(f"simulated: Vertex AI in {location} does not answer")
            return BackendUnavailable(f"simulated: Vertex AI in {location} does not answer")
        if method != "create":
            return None
        request: JobRequest = args[0]
        pools = _pools(request)
        accelerator = (pools[0].get("machineSpec") or {}).get("acceleratorType") if pools else None
        elsewhere = sorted({r for _, r in region_bound(request.spec) if r and r != location})
        self.facts.append(
            Fact(
                self.now(),
                "create asked",
                request.request_id,
                {"location": location, "bound": elsewhere},
            )
        )
        if elsewhere:
            return BackendRejected(
                f"simulated: Vertex AI refused the create in {location}: the body names "
                f"resources of {elsewhere} (400 INVALID_ARGUMENT)"
            )
        if (location, str(accelerator)) in self.refusing:
            return BackendRejected(
                f"simulated: Vertex AI refused the create: {accelerator} is not offered in "
                f"{location} (400 INVALID_ARGUMENT)"
            )
        strategy = str(request.scheduling.get("strategy") or "STANDARD")
        demand = sum(self._gpus_of(p) for p in pools)
        if accelerator and demand:
            resource = Resource(location, str(accelerator), pool_of(_concrete(strategy)))
            limit = self.quota.get(resource)
            if limit is not None and self.in_use(resource) + demand > limit:
                return QuotaExhausted(
                    f"simulated: 429 RESOURCE_EXHAUSTED: {resource}: {limit} GPUs, "
                    f"{self.in_use(resource)} in use, {demand} asked"
                )
        return None

    def observe(
        self, port: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
    ) -> None:
        """What a call that was made did in the world."""
        if port == "vertex" and method == "create":
            self._created(args[0], result, str(kwargs.get("location") or args[2]))
        elif port == "vertex" and method == "cancel":
            self._cancelled(str(args[0]))
        elif port == "endpoints":
            self._endpoint_call(method, args, result)

    @staticmethod
    def _gpus_of(pool: Mapping[str, Any]) -> int:
        spec = pool.get("machineSpec") or {}
        count = spec.get("acceleratorCount") or 0
        replicas = pool.get("replicaCount") or 1
        try:
            return int(count) * int(replicas)
        except (TypeError, ValueError):
            return 0

    def _created(self, request: JobRequest, job: Any, location: str) -> None:
        pools = _pools(request)
        spec = (pools[0].get("machineSpec") or {}) if pools else {}
        strategy = _concrete(str(request.scheduling.get("strategy") or "STANDARD"))
        work = self.work.get(request.request_id, Work(600.0))
        resumed = _resumed_from(request)
        overhead = work.restart_overhead
        step = step_of_uri(resumed) if resumed else 0
        if resumed and location != work.home:
            overhead += work.checkpoint_gb * SECONDS_PER_GB
        wait = request.scheduling.get("maxWaitDuration")
        max_wait = None
        if strategy == "FLEX_START" and isinstance(wait, str) and wait.endswith("s"):
            seconds = float(wait[:-1])
            max_wait = seconds if seconds > 0 else None
        from shared.domain.decisions.submissions import request_checkpoint_prefix

        run = Run(
            name=job.name,
            request_id=request.request_id,
            attempt=int(job.labels.get(LABEL_ATTEMPT, "1")),
            location=location,
            strategy=strategy,
            machine=str(spec.get("machineType") or ""),
            accelerator=spec.get("acceleratorType"),
            gpus=sum(self._gpus_of(p) for p in pools),
            created=self.now(),
            max_wait=max_wait,
            work=work,
            checkpoint_prefix=request_checkpoint_prefix(request),
            progress=(step * work.checkpoint_every) if work.checkpoint_every else 0.0,
            overhead_left=overhead,
        )
        self.jobs.update(job.name, create_time=self.now())
        self.runs[job.name] = run
        self.facts.append(
            Fact(
                self.now(),
                "job created",
                request.request_id,
                {
                    "job": job.name,
                    "location": location,
                    "strategy": strategy,
                    "attempt": run.attempt,
                    "label": job.labels.get(LABEL_REQUEST),
                    "spec": request.spec,
                },
            )
        )
        self.hints.append(job.name)

    def _cancelled(self, name: str) -> None:
        run = self.runs.get(name)
        if run is not None and run.ended is None:
            run.ended = self.now()
            self.jobs.update(name, end_time=self.now())
            self.hints.append(name)

    # -- the project's quota ----------------------------------------------------------------

    def in_use(self, resource: Resource) -> int:
        """GPUs of ``resource`` held by jobs Vertex has not ended."""
        return sum(
            run.gpus
            for run in self.runs.values()
            if run.ended is None
            and run.location == resource.region
            and run.accelerator == resource.accelerator
            and pool_of(run.strategy) is resource.pool
            and not self._ended(run.name)
        )

    def _ended(self, name: str) -> bool:
        state = from_vertex(self.jobs.jobs[name].state)
        return state is not None and state.terminal

    # -- time ---------------------------------------------------------------------------------

    def advance(self, before: datetime, now: datetime) -> None:
        """Everything that happens between ``before`` and ``now``: placements, progress,
        checkpoints, ends, expiries, and the operations that come due."""
        for run in list(self.runs.values()):
            if run.ended is None and not self._ended(run.name):
                self._run(run, before, now)
        for operation in sorted(self.operations.values(), key=lambda o: (o.due, o.name)):
            if operation.due <= now and operation.name in self.operations:
                self.end_operation(operation.name, operation.error)

    def _run(self, run: Run, before: datetime, now: datetime) -> None:
        state = self.jobs.jobs[run.name].state
        if state.endswith("_QUEUED") or state.endswith("_PENDING"):
            if self._can_start(run) and now - run.created >= PLACEMENT:
                at = max(before, run.created + PLACEMENT)
                self._set(run, "RUNNING", start_time=at)
                run.started = at
                self._progress(run, at, now)
            elif run.max_wait is not None and (now - run.created).total_seconds() >= run.max_wait:
                self._end(run, "FAILED", EXPIRED)
            return
        if state.endswith("_RUNNING"):
            if run.strategy == "SPOT" and (run.location, run.machine) in self.spot_out:
                self._end(run, "FAILED", PREEMPTED)
                return
            self._progress(run, before, now)

    def _can_start(self, run: Run) -> bool:
        if run.strategy == "SPOT":
            return (run.location, run.machine) not in self.spot_out
        if run.strategy == "FLEX_START":
            return run.location not in self.flex_out
        return True

    def _progress(self, run: Run, start: datetime, now: datetime) -> None:
        """Work done from ``start`` to ``now``: the overhead first, then progress with a
        checkpoint at each interval, then the end (success, or the code's own failure)."""
        seconds = (now - start).total_seconds()
        spent = min(seconds, run.overhead_left)
        run.overhead_left -= spent
        seconds -= spent
        at = start + timedelta(seconds=spent)
        work = run.work
        while seconds > 0:
            goal = work.seconds
            if work.fails_after is not None:
                goal = min(goal, work.fails_after)
            step_gap = work.checkpoint_every or float("inf")
            next_checkpoint = (int(run.progress // step_gap) + 1) * step_gap
            target = min(goal, next_checkpoint)
            needed = target - run.progress
            if needed > seconds:
                run.progress += seconds
                return
            run.progress = target
            seconds -= needed
            at += timedelta(seconds=needed)
            if target >= goal:
                if work.fails_after is not None and goal == work.fails_after:
                    self._end(run, "FAILED", USER_ERROR, at)
                else:
                    self._end(run, "SUCCEEDED", None, at)
                return
            self._checkpoint(run, round(target / step_gap), at)

    def _checkpoint(self, run: Run, step: int, at: datetime) -> None:
        if run.checkpoint_prefix is None:
            return
        checkpoint = self.checkpoints.commit(run.checkpoint_prefix, step, at)
        bucket, _, rest = checkpoint.uri.removeprefix("gs://").partition("/")
        self.objects.append((bucket, f"{rest}commit_success.txt"))
        self.facts.append(Fact(at, "checkpoint", run.request_id, {"job": run.name, "step": step}))

    def _set(self, run: Run, state: str, **fields: Any) -> None:
        prefix = self.jobs.jobs[run.name].state.rsplit("_", 1)[0]
        self.jobs.update(run.name, state=f"{prefix}_{state}", **fields)
        self.hints.append(run.name)

    def _end(
        self, run: Run, state: str, error: tuple[int, str] | None, at: datetime | None = None
    ) -> None:
        at = at or self.now()
        code, message = error if error is not None else (None, None)
        self._set(run, state, end_time=at, error_code=code, error_message=message)
        run.ended = at
        self.facts.append(
            Fact(at, f"job {state.lower()}", run.request_id, {"job": run.name, "error": message})
        )

    # -- capacity and faults the world injects ------------------------------------------------

    def lose_spot(self, region: str, machine: str) -> None:
        """Spot capacity of ``machine`` in ``region`` is reclaimed: its running Spot jobs are
        preempted, and its Spot deployed models serve no replica."""
        self.spot_out.add((region, machine))
        for run in list(self.runs.values()):
            state = self.jobs.jobs[run.name].state
            if (
                run.strategy == "SPOT"
                and (run.location, run.machine) == (region, machine)
                and state.endswith("_RUNNING")
            ):
                self._end(run, "FAILED", PREEMPTED)
        self._serve(region, machine)
        self.facts.append(Fact(self.now(), "spot lost", f"{region}/{machine}"))

    def return_spot(self, region: str, machine: str) -> None:
        self.spot_out.discard((region, machine))
        self._serve(region, machine)
        self.facts.append(Fact(self.now(), "spot returned", f"{region}/{machine}"))

    def _serve(self, region: str, machine: str) -> None:
        """Each Spot deployed model of ``machine`` in ``region``: its replicas as capacity
        allows (every required one, or none)."""
        out = (region, machine) in self.spot_out
        for endpoint, models in self.endpoints.endpoints.items():
            if region_of(endpoint) != region:
                continue
            for model in models:
                resources = model.get("dedicatedResources") or {}
                spec = resources.get("machineSpec") or {}
                if resources.get("spot") is True and spec.get("machineType") == machine:
                    required = resources.get("requiredReplicaCount") or resources.get(
                        "minReplicaCount", 1
                    )
                    self.endpoints.set_available(endpoint, model["id"], 0 if out else required)
                    self.endpoints._changed(endpoint)

    def preempt(self, name: str) -> bool:
        """One running Spot job is preempted on its own (its node was reclaimed)."""
        run = self.runs.get(name)
        if run is None or run.ended is not None or run.strategy != "SPOT":
            return False
        if not self.jobs.jobs[name].state.endswith("_RUNNING"):
            return False
        self._end(run, "FAILED", PREEMPTED)
        return True

    def stock_out(self, name: str) -> bool:
        """A queued job is refused its capacity at placement (STOCKOUT)."""
        run = self.runs.get(name)
        if run is None or run.ended is not None:
            return False
        state = self.jobs.jobs[name].state
        if not (state.endswith("_QUEUED") or state.endswith("_PENDING")):
            return False
        self._end(run, "FAILED", STOCKOUT)
        return True

    # -- endpoints ----------------------------------------------------------------------------

    def _endpoint_call(self, method: str, args: tuple[Any, ...], result: Any) -> None:
        if method in ("deploy", "deploy_on_demand", "resize", "undeploy"):
            call = {
                "deploy": "DeployModel",
                "deploy_on_demand": "DeployModel",
                "resize": "MutateDeployedModel",
                "undeploy": "UndeployModel",
            }[method]
            if method == "deploy":
                endpoint = str(args[0].spec.get("endpoint"))
                tag = args[0].request_id
            else:
                endpoint = str(args[0])
                tag = None
            detail: dict[str, Any] = {"operation": result, "call": call}
            if method in ("deploy", "deploy_on_demand"):
                detail["displayName"] = args[1]
            if method == "undeploy":
                detail["deployedModelId"] = args[1]
            self.operations[result] = Operation(
                result, call, endpoint, self.now() + self.operation_time[call], tag=tag
            )
            self.facts.append(Fact(self.now(), f"{method} sent", endpoint, detail))
        elif method == "set_traffic":
            endpoint = str(args[0])
            before = self._split_before.pop(endpoint, {})
            # The endpoint as it was when the split was set: which models served, and which
            # an UndeployModel in flight was taking away.
            models = self.endpoints.endpoints.get(endpoint, [])
            available = {
                m["id"]: int((m.get("status") or {}).get("availableReplicaCount") or 0)
                for m in models
            }
            leaving = sorted(
                model_id
                for op in self.operations.values()
                if op.call == "UndeployModel" and op.endpoint == endpoint
                for _, model_id in [self.endpoints._undeploys.get(op.name, ("", ""))]
            )
            detail = {
                "split": dict(args[1]),
                "before": before,
                "available": available,
                "leaving": leaving,
                "names": {m["id"]: str(m.get("displayName") or "") for m in models},
            }
            self.facts.append(Fact(self.now(), "traffic set", endpoint, detail))

    def end_operation(self, name: str, error: str | None = None) -> None:
        """A pending endpoint operation ends, done or with ``error``."""
        operation = self.operations.pop(name, None)
        if operation is None:
            return
        self.endpoints.finish(name, error)
        endpoint = operation.endpoint
        if not error and operation.call == "DeployModel":
            for model in self.endpoints.endpoints.get(endpoint, []):
                resources = model.get("dedicatedResources") or {}
                spec = resources.get("machineSpec") or {}
                if resources.get("spot") is True:
                    self._serve(region_of(endpoint), str(spec.get("machineType")))
        self.facts.append(
            Fact(self.now(), "operation ended", endpoint, {"operation": name, "error": error})
        )

    def delay_operation(self, name: str, by: timedelta) -> None:
        operation = self.operations.get(name)
        if operation is not None:
            self.operations[name] = dataclasses.replace(operation, due=operation.due + by)

    def on_time(self) -> None:
        """Operations made late end in their usual time from now (the faults stopped)."""
        for name, operation in list(self.operations.items()):
            usual = self.now() + self.operation_time[operation.call]
            if operation.due > usual:
                self.operations[name] = dataclasses.replace(operation, due=usual)

    def fail_operation(self, name: str, error: str) -> None:
        operation = self.operations.get(name)
        if operation is not None:
            self.operations[name] = dataclasses.replace(operation, error=error)

    def split_before(self, endpoint: str) -> dict[str, int]:
        return dict(self._split_before.get(endpoint, {}))

    def operation_status(self, name: str) -> OperationStatus | None:
        return self.endpoints.operations.get(name)


def _concrete(strategy: str) -> str:
    """The capacity a strategy name draws (AUTO never reaches Vertex; STANDARD otherwise)."""
    return strategy if strategy in ("SPOT", "FLEX_START") else "STANDARD"


__all__ = ["Fact", "Operation", "Pool", "Run", "Vertex", "Work"]
