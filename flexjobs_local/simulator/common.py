"""What every part of the simulation shares: status codes, job states, the error it answers
with, the events it hands to listeners, and :class:`Runtime`, the simulated now and id source.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

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

_PARENT = re.compile(r"^projects/([^/]+)/locations/([^/]+)$")


class SimError(Exception):
    """A request the simulator refuses, carrying the gRPC status code name to answer with."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def parse_parent(parent: str) -> tuple[str, str]:
    """``(project, location)`` of ``projects/P/locations/L``; SimError INVALID_ARGUMENT else."""
    match = _PARENT.match(parent)
    if match is None:
        raise SimError(
            "INVALID_ARGUMENT",
            f"Invalid parent {parent!r}: expected 'projects/{{project}}/locations/{{location}}'.",
        )
    return match.group(1), match.group(2)


def copy_message(msg: Any) -> Any:
    """Deep copy of a proto-plus message (so callers never share our mutable state)."""
    cls = type(msg)
    return cls.deserialize(cls.serialize(msg))


def rest_json(msg: Any) -> dict[str, Any]:
    """A proto-plus message as REST JSON: camelCase names, enum names, unset fields left out."""
    data: dict[str, Any] = json.loads(
        type(msg).to_json(
            msg, use_integers_for_enums=False, always_print_fields_with_no_presence=False
        )
    )
    return data


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


# --- the shared runtime and the event sources it drives ----------------------------------------


@dataclass(frozen=True)
class Due:
    """The earliest transition a source has due: at simulated time ``at``, run ``fire(at)``."""

    at: float
    fire: Callable[[float], None]


class EventSource(Protocol):
    """A part of the simulation with timed transitions (jobs, long-running operations)."""

    def due(self, until: float) -> Due | None:
        """The earliest transition due at or before ``until``, if any."""


class Runtime:
    """The simulated now, the listeners and the id source that every part of one engine shares.

    It outlives :meth:`Engine.reset`: ids are never reused, since a store outside the
    simulator may still remember a job from before the reset.
    """

    def __init__(self, now: float, seed: int | None) -> None:
        self.now = now
        self.listeners: list[Listener] = []
        self._id_rng = random.Random(seed)
        self._ids: set[str] = set()

    def emit(self, event: StateChanged | CheckpointWrite) -> None:
        """Hand ``event`` to every listener (they only enqueue: this runs under the lock)."""
        for listener in self.listeners:
            listener(event)

    def new_id(self) -> str:
        """A fresh 19-digit resource id, never handed out before by this runtime."""
        while True:
            candidate = str(self._id_rng.randrange(10**18, 10**19))
            if candidate not in self._ids:
                self._ids.add(candidate)
                return candidate
