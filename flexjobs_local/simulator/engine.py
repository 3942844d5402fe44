"""The pure Vertex AI simulation: a simulated clock, GPU capacity, and the jobs and endpoints.

Nothing here knows about gRPC or HTTP; :mod:`.grpc_server` and :mod:`.control` translate.
All state lives behind one lock. Time moves as a discrete-event simulation: every call (and
a background ticker) first replays, in simulated-time order, every transition that became due
since the last call, so timestamps are exact (a job that waits for capacity starts at the very
simulated instant the previous job ended) no matter how coarse the wall-clock ticks are.

:class:`Engine` holds the lock and composes the parts: :mod:`.specs` reads requests,
:mod:`.jobs` runs the lifecycle on :mod:`.capacity` (with :mod:`.checkpoints` and
:mod:`.failures`), :mod:`.endpoints` keeps endpoints and long-running operations (and, in
:mod:`.serving`, the nodes deployed models run on), :mod:`.faults` the call log and injected
faults. Jobs, operations and serving nodes are the event sources that :meth:`Engine._advance`
replays.

Side effects that leave the process (Pub/Sub hints, checkpoint objects) are not done here: the
engine hands :class:`~.common.StateChanged` and :class:`~.common.CheckpointWrite` events to
listeners, which must only enqueue them (they run under the lock).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from google.longrunning import operations_pb2

from flexjobs_local.simulator.capacity import Capacity, check_gpus
from flexjobs_local.simulator.checkpoints import Checkpoints
from flexjobs_local.simulator.clock import SimClock, rfc3339
from flexjobs_local.simulator.common import (
    Due,
    EventSource,
    Listener,
    Runtime,
    SimError,
    copy_message,
    parse_parent,
)
from flexjobs_local.simulator.endpoints import (
    ENDPOINT_UPDATE_PATHS,
    MUTATE_PATHS,
    Endpoints,
    Operations,
    check_deploy,
    check_mask,
    check_new_endpoint,
)
from flexjobs_local.simulator.faults import CallLog, FaultRule, Faults, fault_rule
from flexjobs_local.simulator.jobs import JobQuery, Jobs
from flexjobs_local.simulator.quota import Quota, pool_of
from flexjobs_local.simulator.serving import SpotTrace
from flexjobs_local.simulator.specs import KINDS, plan_job, scheduling_of


class Engine:
    """The simulated Vertex AI region(s): jobs, capacity, endpoints, call log and faults.

    Every public method is thread-safe and first brings the simulation up to the current
    simulated time.

    Examples:
        >>> from google.cloud import aiplatform_v1
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
        self._default_capacity = default_capacity
        self._default_run_seconds = float(default_run_seconds)
        self._queue_seconds = float(queue_seconds)
        self._cancel_seconds = float(cancel_seconds)
        self._lro_seconds = float(lro_seconds)
        self._checkpoint_every = checkpoint_every
        self._checkpointing = checkpointing
        self._seed = seed
        self._runtime = Runtime(self._clock.now(), seed)
        self._reset_state()

    def _reset_state(self) -> None:
        seed = self._seed
        self._capacity = Capacity(self._default_capacity)
        self._quota = Quota()
        self._jobs = Jobs(
            self._runtime,
            self._capacity,
            Checkpoints(self._runtime, enabled=self._checkpointing, seed=seed),
            queue_seconds=self._queue_seconds,
            cancel_seconds=self._cancel_seconds,
            seed=seed,
        )
        self._operations = Operations(self._runtime)
        self._endpoints = Endpoints(self._runtime, self._operations, self._lro_seconds)
        self._calls = CallLog(self._clock.now)
        self._faults = Faults()
        # On a tie in time, a job's transition goes before an operation's, and an operation's
        # before serving's (a replay's capacity change, a restart try or a placement).
        self._sources: tuple[EventSource, ...] = (
            self._jobs,
            self._operations,
            self._endpoints.serving,
        )

    # --- plumbing ------------------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        """Register a callback for :mod:`.common`'s StateChanged and CheckpointWrite events.

        It runs under the engine lock, so it must only enqueue (never block or call back).
        """
        with self._lock:
            self._runtime.listeners.append(listener)

    def _advance(self) -> None:
        """Replay, in simulated-time order, every transition due up to the clock's now."""
        runtime = self._runtime
        target = max(self._clock.now(), runtime.now)
        while True:
            due: Due | None = None
            for source in self._sources:
                candidate = source.due(target)
                if candidate is not None and (due is None or candidate.at < due.at):
                    due = candidate
            if due is None:
                break
            runtime.now = max(runtime.now, due.at)
            due.fire(runtime.now)
        runtime.now = target

    @contextmanager
    def _caught_up(self) -> Iterator[None]:
        """Hold the lock, with every transition due up to the clock's now replayed."""
        with self._lock:
            self._advance()
            yield

    def tick(self) -> None:
        """Replay everything due up to the current simulated time (the background ticker)."""
        with self._lock:
            self._advance()

    def now(self) -> float:
        """Current simulated time (epoch seconds), after catching up."""
        with self._caught_up():
            return self._runtime.now

    # --- clock control -------------------------------------------------------------------------

    def clock(self) -> dict[str, Any]:
        """``{"simNow": RFC 3339, "simNowEpoch": float, "timeFactor": float}``."""
        with self._caught_up():
            now = self._runtime.now
            return {"simNow": rfc3339(now), "simNowEpoch": now, "timeFactor": self._clock.factor}

    def set_time_factor(self, factor: float) -> dict[str, Any]:
        """Change the clock speed (0 freezes it) without a jump in simulated time."""
        with self._caught_up():
            self._clock.set_factor(factor)
        return self.clock()

    def advance(self, seconds: float) -> dict[str, Any]:
        """Jump the simulated clock forward, replaying every transition on the way in order."""
        with self._caught_up():
            self._clock.jump(seconds)
            self._advance()
        return self.clock()

    # --- capacity ------------------------------------------------------------------------------

    def set_capacity(self, location: str, accelerator_type: str, gpus: int) -> dict[str, Any]:
        """Set the total GPUs of one type in one location; waiting jobs that now fit start."""
        check_gpus(gpus, accelerator_type)
        with self._caught_up():
            self._capacity.set_total(location, accelerator_type, gpus)
            self._jobs.admit(self._runtime.now)
        return self.capacity()

    def set_default_capacity(self, gpus: int) -> dict[str, Any]:
        """Set the GPUs of every (location, type) pair not set explicitly."""
        check_gpus(gpus)
        with self._caught_up():
            self._capacity.default_gpus = int(gpus)
            self._jobs.admit(self._runtime.now)
        return self.capacity()

    def capacity(self) -> dict[str, Any]:
        """``{"defaultGpus": n, "pools": [{location, acceleratorType, gpus, inUse, explicit}]}``."""
        with self._caught_up():
            return self._capacity.to_json()

    # --- quota ---------------------------------------------------------------------------------

    def set_quota(
        self,
        location: str,
        accelerator_type: str,
        pool: str,
        limit: int | None,
        project: str | None = None,
    ) -> dict[str, Any]:
        """Set (``None``: remove) the GPU quota of one pool; jobs already made keep running.

        Raises:
            SimError: INVALID_ARGUMENT (unknown type or pool, negative limit).
        """
        with self._caught_up():
            self._quota.set_limit(location, accelerator_type, pool, limit, project)
        return self.quota()

    def quota(self) -> dict[str, Any]:
        """``{"limits": [...], "usage": [...]}`` (see :meth:`.quota.Quota.to_json`)."""
        with self._caught_up():
            return self._quota.to_json(self._jobs.held_all())

    def quota_limits(self, project: str) -> dict[str, dict[str, int]]:
        """The limit per region of each quota metric that applies to ``project`` (what the
        Cloud Quotas front lists: :mod:`.cloudquotas`)."""
        with self._caught_up():
            return self._quota.limits_by_metric(project)

    # --- call log and faults -------------------------------------------------------------------

    def record_call(
        self,
        method: str,
        request: dict[str, Any],
        code: str,
        message: str = "",
        *,
        took_effect: bool | None = None,
    ) -> None:
        """Append one RPC to the call log (the newest 10000 are kept). A call took effect
        when it answered ``OK``, unless ``took_effect`` says otherwise (a lost reply)."""
        with self._lock:
            effect = code == "OK" if took_effect is None else took_effect
            self._calls.record(method, request, code, message, effect)

    def calls(self, method: str | None = None) -> list[dict[str, Any]]:
        """The call log, oldest first, optionally only one method (short name)."""
        with self._lock:
            return self._calls.entries(method)

    def clear_calls(self) -> int:
        """Empty the call log; returns how many entries were dropped."""
        with self._lock:
            return self._calls.clear()

    def inject_faults(
        self,
        code: str,
        count: int = 1,
        methods: Iterable[str] | None = None,
        *,
        when: str = "before",
        message: str | None = None,
        late_seconds: float = 2.0,
        delay_seconds: float = 0.0,
    ) -> dict[str, Any]:
        """Make the next ``count`` calls (of ``methods``, or any) fail with status ``code``.

        ``when="before"`` fails the call before it has any effect; ``when="after"`` lets it take
        effect and then fails the response (a lost reply, to exercise idempotent retries);
        ``when="late"`` fails the response at once and lets the call take effect
        ``late_seconds`` later (a timed-out create that still happens).

        ``delay_seconds`` answers the caller that long after the call arrived (a slow Vertex);
        with code ``OK`` the calls only are slow: ``before`` takes effect after the wait,
        ``after`` takes effect (and is logged) at once and holds the answer.
        """
        rule = fault_rule(
            code,
            count,
            methods,
            when=when,
            message=message,
            late_seconds=late_seconds,
            delay_seconds=delay_seconds,
        )
        with self._lock:
            self._faults.arm(rule)
        return self.faults()

    def faults(self) -> dict[str, Any]:
        """``{"faults": [rule, ...]}`` still armed."""
        with self._lock:
            return self._faults.to_json()

    def clear_faults(self) -> dict[str, Any]:
        """Disarm every fault rule."""
        with self._lock:
            self._faults.clear()
        return self.faults()

    def take_fault(self, method: str) -> FaultRule | None:
        """Consume one shot of the first armed rule that matches ``method``, if any."""
        with self._lock:
            return self._faults.take(method)

    # --- jobs ----------------------------------------------------------------------------------

    def create_job(self, resource: str, parent: str, msg: Any) -> Any:
        """Create a CustomJob / HyperparameterTuningJob / TrainingPipeline; returns a copy.

        Raises:
            SimError: INVALID_ARGUMENT with every problem found, joined by "; ";
                RESOURCE_EXHAUSTED when its GPUs would pass a quota limit (:mod:`.quota`).
        """
        kind = KINDS[resource]
        project, location = parse_parent(parent)
        msg = copy_message(msg)
        plan = plan_job(
            kind,
            msg,
            default_run_seconds=self._default_run_seconds,
            checkpoint_every=self._checkpoint_every,
        )
        pool = pool_of(scheduling_of(plan.spec.scheduling).strategy)
        with self._caught_up():
            held = self._jobs.held(project, location, pool)
            self._quota.check(project, location, pool, plan.demand, held)
            job = self._jobs.create(kind, project, location, msg, plan)
            self._advance()
            return copy_message(job.msg)

    def get_job(self, resource: str, name: str) -> Any:
        """The job as the API returns it (a copy).

        Raises:
            SimError: NOT_FOUND.
        """
        with self._caught_up():
            return copy_message(self._jobs.find(resource, name).msg)

    def list_jobs(
        self, resource: str, parent: str, filter_text: str, page_size: int, page_token: str
    ) -> tuple[list[Any], str]:
        """One page of jobs under ``parent`` matching ``filter_text``, in creation order.

        Raises:
            SimError: INVALID_ARGUMENT for a bad parent, filter, page size or token.
        """
        query = JobQuery.parse(resource, parent, filter_text)
        with self._caught_up():
            return self._jobs.page(query, page_size, page_token)

    def jobs_json(
        self, resource: str | None = None, name: str | None = None
    ) -> list[dict[str, Any]]:
        """Every job as REST JSON (camelCase, enum names) plus a ``_sim`` block of internals."""
        with self._caught_up():
            return self._jobs.to_json(resource, name)

    def mark_checkpoint_written(self, job_name: str, object_uri: str) -> None:
        """Note that the storage worker finished writing ``object_uri`` for ``job_name``."""
        with self._lock:
            self._jobs.mark_checkpoint_written(job_name, object_uri)

    def cancel_job(self, resource: str, name: str) -> None:
        """Start cancelling: CANCELLING now (capacity freed), CANCELLED shortly after.

        Raises:
            SimError: NOT_FOUND; FAILED_PRECONDITION if the job already ended.
        """
        with self._caught_up():
            self._jobs.cancel(resource, name)

    def preempt(self, name: str) -> dict[str, Any]:
        """Preempt a RUNNING job now (any strategy); returns its JSON.

        Raises:
            SimError: NOT_FOUND; FAILED_PRECONDITION if it is not RUNNING.
        """
        with self._caught_up():
            return self._jobs.preempt(name)

    def fail(self, name: str, failure_class: str, message: str | None = None) -> dict[str, Any]:
        """Fail a not-yet-ended job now with a realistic error of ``failure_class``.

        Raises:
            SimError: NOT_FOUND; INVALID_ARGUMENT (unknown class); FAILED_PRECONDITION (ended).
        """
        with self._caught_up():
            return self._jobs.fail(name, failure_class, message)

    def set_preemption_rate(self, rate_per_hour: float, seed: int | None = None) -> dict[str, Any]:
        """Give every RUNNING SPOT job a seeded random preemption chance per simulated hour."""
        if rate_per_hour < 0:
            raise SimError("INVALID_ARGUMENT", "ratePerHour must not be negative.")
        with self._caught_up():
            self._jobs.set_preemption_rate(rate_per_hour, seed)
            return {"ratePerHour": float(rate_per_hour), "seed": seed}

    # --- endpoints and operations --------------------------------------------------------------

    def get_operation(self, name: str) -> operations_pb2.Operation:
        """The long-running operation ``name`` (a copy).

        Raises:
            SimError: NOT_FOUND.
        """
        with self._caught_up():
            return self._operations.get(name)

    def list_operations(
        self, parent: str, filter_: str = "", page_size: int = 0, page_token: str = ""
    ) -> operations_pb2.ListOperationsResponse:
        """The operations of resource ``parent`` (an endpoint), as ``ListOperations`` lists
        them. Raises SimError INVALID_ARGUMENT (a filter other than on ``done``)."""
        with self._caught_up():
            return self._operations.listed(parent, filter_, page_size, page_token)

    def operations_json(self) -> list[dict[str, Any]]:
        """Every operation as JSON (for debugging)."""
        with self._caught_up():
            return self._operations.to_json()

    def create_endpoint(
        self, parent: str, endpoint: Any, endpoint_id: str = ""
    ) -> operations_pb2.Operation:
        """Start creating an endpoint; the LRO finishes (and the endpoint appears) later.

        Raises:
            SimError: INVALID_ARGUMENT (parent, display_name); ALREADY_EXISTS (endpoint_id).
        """
        project, location = parse_parent(parent)
        check_new_endpoint(endpoint)
        with self._caught_up():
            return self._endpoints.create(project, location, endpoint, endpoint_id)

    def get_endpoint(self, name: str) -> Any:
        """The endpoint (a copy). Raises SimError NOT_FOUND."""
        with self._caught_up():
            return self._endpoints.get(name)

    def list_endpoints(self, parent: str, page_size: int, page_token: str) -> tuple[list[Any], str]:
        """Endpoints under ``parent`` in creation order (no filter support)."""
        project, location = parse_parent(parent)
        with self._caught_up():
            return self._endpoints.page(project, location, page_size, page_token)

    def endpoints_json(self) -> list[dict[str, Any]]:
        """Every endpoint as REST JSON."""
        with self._caught_up():
            return self._endpoints.to_json()

    def update_endpoint(self, endpoint: Any, update_mask: list[str]) -> Any:
        """UpdateEndpoint (synchronous in v1): the masked fields of ``endpoint`` replace the
        stored endpoint's; returns the updated endpoint (a copy).

        Raises:
            SimError: INVALID_ARGUMENT (mask, split, display name); NOT_FOUND; ABORTED (a set
                etag that is not the current one).
        """
        check_mask(update_mask, ENDPOINT_UPDATE_PATHS, "UpdateEndpointRequest")
        with self._caught_up():
            return self._endpoints.update(endpoint, update_mask)

    def deploy_model(
        self, endpoint: str, deployed_model: Any, traffic_split: dict[str, int]
    ) -> operations_pb2.Operation:
        """Start deploying; when the LRO finishes the endpoint lists the model with a new id.

        ``traffic_split`` uses key "0" for the model being deployed, like Vertex; an empty one
        leaves the endpoint's split unchanged (the new model gets no traffic).

        Raises:
            SimError: NOT_FOUND (endpoint); INVALID_ARGUMENT (no model, a split naming a model
                not on the endpoint, a negative share, shares not summing to 100).
        """
        check_deploy(deployed_model)
        with self._caught_up():
            return self._endpoints.deploy(endpoint, deployed_model, traffic_split)

    def undeploy_model(
        self, endpoint: str, deployed_model_id: str, traffic_split: dict[str, int]
    ) -> operations_pb2.Operation:
        """Start undeploying ``deployed_model_id``; the model leaves the endpoint at completion.

        Raises:
            SimError: NOT_FOUND (endpoint or deployed model); FAILED_PRECONDITION (it has
                traffic and no split takes it away, and it is not the last model);
                INVALID_ARGUMENT (a split giving it traffic or breaking the split rule).
        """
        with self._caught_up():
            return self._endpoints.undeploy(endpoint, deployed_model_id, traffic_split)

    def mutate_deployed_model(
        self, endpoint: str, deployed_model: Any, update_mask: list[str]
    ) -> operations_pb2.Operation:
        """Start MutateDeployedModel; the masked fields (replica counts, autoscaling metric
        specs, container logging) change, and nodes come or go, when the LRO finishes.

        Raises:
            SimError: INVALID_ARGUMENT (mask, replica counts); NOT_FOUND.
        """
        check_mask(update_mask, MUTATE_PATHS, "MutateDeployedModelRequest")
        with self._caught_up():
            return self._endpoints.mutate(endpoint, deployed_model, update_mask)

    # --- serving nodes -------------------------------------------------------------------------

    def serving_json(self) -> dict[str, Any]:
        """Spot capacity per location and the nodes of every Spot deployed model (``GET
        /serving``)."""
        with self._caught_up():
            return self._endpoints.serving.to_json()

    def set_spot_serving(
        self, location: str, available: bool, placement_seconds: float | None = None
    ) -> dict[str, Any]:
        """Spot serving capacity of ``location`` goes or returns now (:mod:`.serving`).

        Raises:
            SimError: INVALID_ARGUMENT (a negative placement delay).
        """
        with self._caught_up():
            self._endpoints.serving.set_spot(
                location, available, placement_seconds, self._runtime.now
            )
            return self._endpoints.serving.to_json()

    def replay_spot_trace(
        self,
        location: str,
        trace: Any,
        threshold: int = 1,
        placement_seconds: float | None = None,
    ) -> dict[str, Any]:
        """Replay a Spot trace document (``{"metadata": {"gap_seconds"}, "data"}``) as the Spot
        serving capacity of ``location`` from now, cyclically: there while the trace's value is
        at least ``threshold``.

        Raises:
            SimError: INVALID_ARGUMENT (the document, the threshold, the placement delay).
        """
        spot_trace = SpotTrace.from_json(trace)
        with self._caught_up():
            self._endpoints.serving.replay(
                location, spot_trace, threshold, placement_seconds, self._runtime.now
            )
            return self._endpoints.serving.to_json()

    def reclaim_nodes(self, endpoint: str, deployed_model_id: str, nodes: int) -> dict[str, Any]:
        """Reclaim ``nodes`` running nodes of one Spot deployed model now; restarts are tried.

        Raises:
            SimError: NOT_FOUND; INVALID_ARGUMENT; FAILED_PRECONDITION (on-demand, too few).
        """
        with self._caught_up():
            self._endpoints.serving.reclaim(endpoint, deployed_model_id, nodes, self._runtime.now)
            return self._endpoints.serving.to_json()

    # --- reset ---------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget jobs, endpoints (with their serving nodes and Spot capacity), operations,
        calls and faults; capacity, preemption rate, time factor and random seeds back to their
        start-up values. Simulated time keeps going.
        """
        with self._caught_up():
            self._clock.set_factor(self._initial_factor)
            self._reset_state()
