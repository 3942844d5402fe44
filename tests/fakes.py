"""In-memory fakes of flexjobs' own ports, for unit and functional tests."""

from __future__ import annotations

import copy
import itertools
import threading
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from shared.domain.jobs import JobState, VertexJob, from_vertex
from shared.domain.request import JobRequest
from shared.errors import FieldError, SubmissionInProgress
from shared.ports import Claim, Submission


class InMemoryJobStore:
    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.attempts: dict[tuple[str, int], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.fail_next_record = False

    def claim(self, request: JobRequest, now: datetime, ttl_seconds: float) -> Claim:
        with self._lock:
            token = uuid.uuid4().hex
            lease = {"token": token, "expiresAt": now + timedelta(seconds=ttl_seconds)}
            current = self.jobs.get(request.request_id)
            if current is None:
                self.jobs[request.request_id] = {
                    "requestId": request.request_id,
                    "kind": request.kind,
                    "state": JobState.ACCEPTED.value,
                    "attempt": 1,
                    "vertexJob": None,
                    "strategy": request.strategy,
                    "createdAt": now,
                    "updatedAt": now,
                    "claim": lease,
                }
                return Claim(token=token)
            if current["vertexJob"] or current["state"] != JobState.ACCEPTED.value:
                return Claim(record=copy.deepcopy(current))
            if current["claim"]["expiresAt"] > now:
                raise SubmissionInProgress("held")
            current["claim"] = lease
            return Claim(token=token, taken_over=True)

    def record_submission(self, token: str, submission: Submission, now: datetime) -> None:
        if self.fail_next_record:
            self.fail_next_record = False
            # BaseException, like the process dying: nothing after it runs, not even release.
            raise KeyboardInterrupt("injected crash between create and record")
        with self._lock:
            current = self.jobs[submission.request_id]
            if current.get("vertexJob"):
                return
            state = from_vertex(submission.vertex_job.state) or JobState.QUEUED
            current.update(
                state=state.value,
                attempt=submission.attempt,
                vertexJob=submission.vertex_job.name,
                vertexJobId=submission.vertex_job.job_id,
                updatedAt=now,
            )
            current.pop("claim", None)
            self.attempts[(submission.request_id, submission.attempt)] = {
                "vertexJob": submission.vertex_job.name
            }

    def release(self, request_id: str, token: str, now: datetime) -> None:
        with self._lock:
            current = self.jobs[request_id]
            if current.get("claim", {}).get("token") == token:
                current["claim"] = {"token": None, "expiresAt": now}

    def record_failure(self, request_id: str, reason: str, now: datetime) -> None:
        with self._lock:
            self.jobs[request_id].update(state=JobState.FAILED.value, reason=reason)

    def get(self, request_id: str) -> dict[str, Any] | None:
        with self._lock:
            return copy.deepcopy(self.jobs.get(request_id))


class InMemoryJobBackend:
    def __init__(self, project: str = "p") -> None:
        self.project = project
        self.jobs: dict[str, VertexJob] = {}
        self.created: list[tuple[JobRequest, dict[str, str]]] = []
        self._ids = itertools.count(1000)
        self.fail_with: Exception | None = None

    def check(self, request: JobRequest) -> list[FieldError]:
        return []

    def find(self, request_label: str, attempt: int, location: str) -> VertexJob | None:
        for job in self.jobs.values():
            if job.labels == {"flexjobs-request": request_label, "flexjobs-attempt": str(attempt)}:
                return job
        return None

    def create(self, request: JobRequest, labels: Mapping[str, str], location: str) -> VertexJob:
        if self.fail_with is not None:
            raise self.fail_with
        name = f"projects/{self.project}/locations/{location}/customJobs/{next(self._ids)}"
        job = VertexJob(name=name, state="JOB_STATE_QUEUED", labels=dict(labels))
        self.jobs[name] = job
        self.created.append((request, dict(labels)))
        return job

    def get(self, name: str) -> VertexJob:
        return self.jobs[name]

    def list_labelled(self, location: str) -> Iterable[VertexJob]:
        return list(self.jobs.values())

    def cancel(self, name: str) -> None:
        job = self.jobs[name]
        self.jobs[name] = VertexJob(name=name, state="JOB_STATE_CANCELLED", labels=job.labels)


class InMemoryRejectionLog:
    def __init__(self) -> None:
        self.documents: dict[str, dict[str, Any]] = {}

    def record(self, rejection_id: str, document: Mapping[str, Any]) -> None:
        self.documents[rejection_id] = dict(document)


class InMemoryNotifier:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def notify(self, message: Mapping[str, Any]) -> None:
        self.messages.append(dict(message))
