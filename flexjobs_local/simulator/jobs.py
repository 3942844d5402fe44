"""The job lifecycle: QUEUED, then PENDING until every replica fits at once (gang scheduling,
with backfill), RUNNING for the simulated run time, and an end: SUCCEEDED, FAILED (expiry,
timeout, preemption, an injected failure) or CANCELLED.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from flexjobs_local.simulator import listing
from flexjobs_local.simulator.capacity import Capacity
from flexjobs_local.simulator.checkpoints import Checkpoints
from flexjobs_local.simulator.common import (
    CANCELLED,
    CANCELLING,
    FAILED,
    PENDING,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    TERMINAL_STATES,
    Due,
    Runtime,
    SimError,
    copy_message,
    parse_parent,
)
from flexjobs_local.simulator.failures import expiry_error, failure_error, timeout_error
from flexjobs_local.simulator.job import Job
from flexjobs_local.simulator.quota import pool_of
from flexjobs_local.simulator.specs import KINDS, JobPlan, Kind, resume_of, scheduling_of


@dataclass(frozen=True)
class JobQuery:
    """A checked list request: jobs of ``kind`` under one parent that pass ``predicate``."""

    kind: Kind
    project: str
    location: str
    predicate: listing.Predicate

    @classmethod
    def parse(cls, resource: str, parent: str, filter_text: str) -> JobQuery:
        """Raises SimError INVALID_ARGUMENT for a bad parent or filter."""
        kind = KINDS[resource]
        project, location = parse_parent(parent)
        try:
            predicate = listing.parse_filter(filter_text, kind.valid_states())
        except listing.FilterError as exc:
            raise SimError("INVALID_ARGUMENT", f"Invalid filter: {exc}") from exc
        return cls(kind, project, location, predicate)

    def matches(self, job: Job) -> bool:
        return (
            job.kind is self.kind
            and job.project == self.project
            and job.location == self.location
            and self.predicate(job.filter_record())
        )


class Jobs:
    """Every job, in submission order, and the transitions of those not yet ended.

    An :class:`~.common.EventSource`. Not thread-safe: the engine holds its lock.
    """

    def __init__(
        self,
        runtime: Runtime,
        capacity: Capacity,
        checkpoints: Checkpoints,
        *,
        queue_seconds: float,
        cancel_seconds: float,
        seed: int | None,
    ) -> None:
        self._runtime = runtime
        self._capacity = capacity
        self._checkpoints = checkpoints
        self._queue_seconds = queue_seconds
        self._cancel_seconds = cancel_seconds
        self._preempt_rng = random.Random(None if seed is None else seed + 1)
        self._preemption_rate = 0.0
        self._jobs: dict[str, Job] = {}
        self._order: list[Job] = []
        self._active: list[Job] = []

    # --- creation and reads --------------------------------------------------------------------

    def create(self, kind: Kind, project: str, location: str, msg: Any, plan: JobPlan) -> Job:
        """Add a QUEUED job for a checked request (``msg`` is ours to keep)."""
        now = self._runtime.now
        job_id = self._runtime.new_id()
        name = f"projects/{project}/locations/{location}/{kind.collection}/{job_id}"
        scheduling = scheduling_of(plan.spec.scheduling)
        resume = resume_of(plan.env)
        msg.name = name
        job = Job(
            kind=kind,
            name=name,
            project=project,
            location=location,
            job_id=job_id,
            msg=msg,
            pools=plan.pools,
            demand=plan.demand,
            strategy=scheduling.strategy,
            max_wait=scheduling.max_wait,
            timeout=scheduling.timeout,
            run_seconds=plan.run_seconds,
            checkpoint_every=plan.checkpoint_every,
            output_uri_prefix=plan.spec.output_uri_prefix,
            resume_from=resume.resume_from,
            resumed_step=resume.step,
            resume_error=resume.error,
            create=now,
            update=now,
        )
        self._jobs[job.name] = job
        self._order.append(job)
        self._active.append(job)
        job.sync()
        self._runtime.emit(job.state_changed())
        return job

    def held(self, project: str, location: str, pool: str) -> dict[str, int]:
        """GPUs per accelerator type that the project's jobs not yet ended hold of a quota pool.

        A job holds its whole demand from create to its end (QUEUED, PENDING, RUNNING and
        CANCELLING), whether it runs yet or not: see :mod:`.quota`.
        """
        gpus: dict[str, int] = {}
        for job in self._active:
            if (
                job.project == project
                and job.location == location
                and pool_of(job.strategy) == pool
            ):
                for accel, count in job.demand.items():
                    gpus[accel] = gpus.get(accel, 0) + count
        return gpus

    def held_all(self) -> dict[tuple[str, str, str, str], int]:
        """GPUs held per (project, location, accelerator type, pool), for the quota view."""
        gpus: dict[tuple[str, str, str, str], int] = {}
        for job in self._active:
            for accel, count in job.demand.items():
                key = (job.project, job.location, accel, pool_of(job.strategy))
                gpus[key] = gpus.get(key, 0) + count
        return gpus

    def find(self, resource: str, name: str) -> Job:
        """Raises SimError NOT_FOUND unless ``name`` is a job of ``resource``."""
        job = self._jobs.get(name)
        if job is None or job.kind.resource != resource:
            raise SimError("NOT_FOUND", f"The {resource} does not exist: {name}")
        return job

    def _find_any(self, name: str) -> Job:
        job = self._jobs.get(name)
        if job is None:
            raise SimError("NOT_FOUND", f"No job named {name}")
        return job

    def page(self, query: JobQuery, page_size: int, page_token: str) -> tuple[list[Any], str]:
        """One page of copies of the matching jobs, in creation order, and the next token."""
        matches = [job for job in self._order if query.matches(job)]
        try:
            page, token = listing.paginate(matches, page_size, page_token)
        except ValueError as exc:  # PageTokenError is a ValueError too
            raise SimError("INVALID_ARGUMENT", str(exc)) from exc
        return [copy_message(job.msg) for job in page], token

    def to_json(self, resource: str | None, name: str | None) -> list[dict[str, Any]]:
        return [
            job.to_json(self._runtime.now)
            for job in self._order
            if (resource is None or job.kind.resource == resource)
            and (name is None or job.name == name)
        ]

    def mark_checkpoint_written(self, job_name: str, object_uri: str) -> None:
        job = self._jobs.get(job_name)
        if job is not None:
            job.written.append(object_uri)

    # --- commands ------------------------------------------------------------------------------

    def cancel(self, resource: str, name: str) -> None:
        """CANCELLING now (capacity freed), CANCELLED ``cancel_seconds`` later."""
        job = self.find(resource, name)
        if job.state in TERMINAL_STATES:
            raise SimError(
                "FAILED_PRECONDITION",
                f"Cannot cancel {resource} {name} because it is in state "
                f"{job.kind.state_name(job.state)}.",
            )
        if job.state == CANCELLING:
            return  # already on its way; cancelling twice is harmless
        now = self._runtime.now
        job.cancel_done_at = now + self._cancel_seconds
        self._transition(job, CANCELLING, now)
        self.admit(now)

    def preempt(self, name: str) -> dict[str, Any]:
        """Preempt a RUNNING job now; its JSON."""
        job = self._find_any(name)
        if job.state != RUNNING:
            raise SimError(
                "FAILED_PRECONDITION",
                f"Only a running job can be preempted; {name} is {job.state}.",
            )
        now = self._runtime.now
        self._preempt(job, now)
        self.admit(now)
        return job.to_json(now)

    def fail(self, name: str, failure_class: str, message: str | None) -> dict[str, Any]:
        """Fail a job that has not ended with an error of ``failure_class``; its JSON."""
        job = self._find_any(name)
        if job.state in TERMINAL_STATES:
            raise SimError("FAILED_PRECONDITION", f"{name} already ended in {job.state}.")
        now = self._runtime.now
        code, text = failure_error(failure_class, job)
        if failure_class == "preempted" and job.state == RUNNING:
            self._preempt(job, now)
        else:
            self._transition(job, FAILED, now, (code, message or text))
        self.admit(now)
        return job.to_json(now)

    def set_preemption_rate(self, rate_per_hour: float, seed: int | None) -> None:
        """Redraw every RUNNING SPOT job's preemption time at the new rate."""
        if seed is not None:
            self._preempt_rng = random.Random(seed)
        self._preemption_rate = float(rate_per_hour)
        # Exponential waiting times are memoryless, so redrawing from now is exact.
        for job in self._active:
            if job.state == RUNNING:
                self._draw_preemption(job, self._runtime.now)

    def admit(self, at: float) -> None:
        """Start every PENDING job that fits, in submission order; one that does not fit does
        not block smaller ones behind it (backfill)."""
        for job in list(self._active):
            if job.state == PENDING and self._capacity.fits(job.location, job.demand):
                self._start(job, at)

    # --- timed transitions ---------------------------------------------------------------------

    def due(self, until: float) -> Due | None:
        """The earliest transition of any job due at or before ``until``."""
        best: tuple[float, int, str] | None = None
        best_job: Job | None = None
        for job in self._active:
            for event in self._events_of(job):
                if event[0] <= until and (best is None or event[:2] < best[:2]):
                    best, best_job = event, job
        if best is None or best_job is None:
            return None
        job, action = best_job, best[2]

        def fire(at: float) -> None:
            self._apply(job, action, at)
            self.admit(at)

        return Due(best[0], fire)

    def _events_of(self, job: Job) -> list[tuple[float, int, str]]:
        # The middle element orders simultaneous events: a checkpoint due at the very end is
        # written before completion, and an expiry wins over reaching PENDING.
        events: list[tuple[float, int, str]] = []
        if job.state in (QUEUED, PENDING) and job.expire_at is not None:
            events.append((job.expire_at, 1, "expire"))
        if job.state == QUEUED:
            events.append((job.create + self._queue_seconds, 5, "pending"))
        elif job.state == RUNNING:
            assert job.start is not None
            checkpoint_at = self._checkpoints.due_at(job)
            if checkpoint_at is not None:
                events.append((checkpoint_at, 0, "checkpoint"))
            events.append((job.finish_at, 2, "complete"))
            if job.preempt_at is not None:
                events.append((job.preempt_at, 3, "preempt"))
            if job.timeout is not None:
                events.append((job.start + job.timeout, 4, "timeout"))
        elif job.state == CANCELLING and job.cancel_done_at is not None:
            events.append((job.cancel_done_at, 6, "cancelled"))
        return events

    def _apply(self, job: Job, action: str, at: float) -> None:
        if action == "pending":
            self._transition(job, PENDING, at)
        elif action == "expire":
            self._transition(job, FAILED, at, expiry_error(job))
        elif action == "checkpoint":
            self._checkpoints.on_due(job, at)
        elif action == "complete":
            self._checkpoints.on_complete(job, at)
            self._transition(job, SUCCEEDED, at)
        elif action == "preempt":
            self._preempt(job, at)
        elif action == "timeout":
            self._transition(job, FAILED, at, timeout_error(job))
        elif action == "cancelled":
            self._transition(job, CANCELLED, at)

    def _transition(
        self, job: Job, state: str, at: float, error: tuple[int, str] | None = None
    ) -> None:
        if job.state == RUNNING and state != RUNNING:
            job.progress_final = job.progress(at)
            self._capacity.allocate(job.location, job.demand, -1)
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
        job.sync()
        self._runtime.emit(job.state_changed())

    def _start(self, job: Job, at: float) -> None:
        self._capacity.allocate(job.location, job.demand, +1)
        self._transition(job, RUNNING, at)
        self._draw_preemption(job, at)
        self._checkpoints.on_start(job)

    def _preempt(self, job: Job, at: float) -> None:
        self._checkpoints.on_preempt(job, at)
        self._transition(job, FAILED, at, failure_error("preempted", job))

    def _draw_preemption(self, job: Job, at: float) -> None:
        if job.strategy == "SPOT" and self._preemption_rate > 0:
            job.preempt_at = at + self._preempt_rng.expovariate(self._preemption_rate / 3600.0)
        else:
            job.preempt_at = None
