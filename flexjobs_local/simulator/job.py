"""One simulated job: its record, its progress, and how it reads back through the API."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from google.rpc import status_pb2

from flexjobs_local.simulator.clock import rfc3339, to_datetime
from flexjobs_local.simulator.common import QUEUED, StateChanged, rest_json
from flexjobs_local.simulator.specs import Kind, PoolDemand, describe


@dataclass(eq=False)
class Job:
    """A CustomJob, HyperparameterTuningJob or TrainingPipeline and its simulated internals."""

    kind: Kind
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

    def sync(self) -> None:
        """Copy state and times into the API message."""
        msg = self.msg
        msg.state = self.kind.state_value(self.state)
        msg.create_time = to_datetime(self.create)
        msg.update_time = to_datetime(self.update)
        if self.start is not None:
            msg.start_time = to_datetime(self.start)
        if self.end is not None:
            msg.end_time = to_datetime(self.end)
        if self.error is not None:
            msg.error = status_pb2.Status(code=self.error[0], message=self.error[1])

    def state_changed(self) -> StateChanged:
        """The event announcing the job's current state."""
        return StateChanged(
            resource=self.kind.resource,
            name=self.name,
            project=self.project,
            location=self.location,
            job_id=self.job_id,
            state=self.state,
            sim_time=self.update,
            error_code=self.error[0] if self.error else None,
            error_message=self.error[1] if self.error else None,
        )

    def filter_record(self) -> dict[str, Any]:
        """The fields a list filter may test (see :mod:`.listing`)."""
        return {
            "labels": dict(self.msg.labels),
            "state": self.kind.state_name(self.state),
            "display_name": self.msg.display_name,
            "create_time": self.create,
            "update_time": self.update,
            "start_time": self.start,
            "end_time": self.end,
        }

    def to_json(self, now: float) -> dict[str, Any]:
        """REST JSON (camelCase, enum names) plus a ``_sim`` block of internals."""
        data = rest_json(self.msg)
        data["_sim"] = {
            "resource": self.kind.resource,
            "demand": dict(self.demand),
            "resources": describe(self.pools),
            "strategy": self.strategy,
            "maxWaitSeconds": self.max_wait,
            "expireTime": rfc3339(self.expire_at) if self.expire_at is not None else None,
            "runSeconds": self.run_seconds,
            "resumeFrom": self.resume_from or None,
            "resumedStep": self.resumed_step,
            "resumeError": self.resume_error,
            "progressSeconds": self.progress(now),
            "checkpointEverySeconds": self.checkpoint_every,
            "checkpointSteps": list(self.committed),
            "halfWrittenStep": self.half_written,
            "checkpointObjectsWritten": list(self.written),
            "preemptTime": rfc3339(self.preempt_at) if self.preempt_at is not None else None,
        }
        return data
