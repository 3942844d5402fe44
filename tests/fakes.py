"""In-memory fakes of flexjobs' own ports, for unit and functional tests."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from shared.domain.checkpoints import Checkpoint
from shared.domain.deployments import (
    DeploymentState,
    OperationStatus,
    carries_tag,
    deploy_failed,
    deploy_parked,
    deployment_settled,
    new_deployment,
    observe_operation,
    tagged_display_name,
)
from shared.domain.hints import HintAction, take_hint
from shared.domain.ids import LABEL_ATTEMPT, LABEL_REQUEST
from shared.domain.jobs import Change, JobState, VertexJob
from shared.domain.records import (
    Claim,
    ClaimSeen,
    Submission,
    existing_claim,
    job_settled,
    new_record,
    submission_claimable,
    submission_write,
)
from shared.domain.request import JobRequest
from shared.errors import BackendRejected, SubmissionInProgress

# Request kind -> the Vertex collection its resources are named in.
COLLECTIONS = {
    "customJob": "customJobs",
    "hyperparameterTuningJob": "hyperparameterTuningJobs",
    "trainingPipeline": "trainingPipelines",
}


def _stored(value: Any) -> Any:
    """A value as Firestore keeps it: a deep copy, with every sequence read back as a list."""
    if isinstance(value, Mapping):
        return {key: _stored(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_stored(item) for item in value]
    return value


def _merge(target: dict[str, Any], fields: Mapping[str, Any]) -> None:
    """Firestore's ``set(..., merge=True)``: nested maps merge key by key."""
    for key, value in fields.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = _stored(value)


class InMemoryJobStore:
    """The JobStore port in memory: storage only; the record rules are the domain's, applied
    as the Firestore adapter applies them (tests/integration/test_store_contract.py runs the
    same cases on both)."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.attempts: dict[tuple[str, int], dict[str, Any]] = {}
        self._lock = threading.RLock()
        self.fail_next_record = False
        self.default_location = "us-central1"

    def claim(self, request: JobRequest, now: datetime, ttl_seconds: float) -> Claim:
        with self._lock:
            token = uuid.uuid4().hex
            lease = {"token": token, "expiresAt": now + timedelta(seconds=ttl_seconds)}
            current = self.jobs.get(request.request_id)
            if current is None:
                record = new_record(request, self.default_location, now)
                self.jobs[request.request_id] = {**record, "claim": lease}
                return Claim(token=token)
            seen = existing_claim(current, now, job_settled(current))
            if seen is ClaimSeen.SUBMITTED:
                return Claim(record=copy.deepcopy(current))
            if seen is ClaimSeen.HELD:
                raise SubmissionInProgress("held")
            current.update(claim=lease, updatedAt=now)
            return Claim(token=token, taken_over=True)

    def record_submission(self, token: str, submission: Submission, now: datetime) -> bool:
        if self.fail_next_record:
            self.fail_next_record = False
            # BaseException, like the process dying: nothing after it runs, not even release.
            raise KeyboardInterrupt("injected crash between create and record")
        with self._lock:
            current = self.jobs[submission.request_id]
            plan = submission_write(current, submission, now)
            if plan.record:
                current.update(_stored(plan.record))
                for name in plan.deletes:
                    current.pop(name, None)
                self.attempts[(submission.request_id, submission.attempt)] = _stored(plan.attempt)
            return plan.recorded

    def release(self, request_id: str, token: str, now: datetime) -> None:
        with self._lock:
            current = self.jobs.get(request_id) or {}
            if (current.get("claim") or {}).get("token") == token:
                current.pop("claim")
                current["updatedAt"] = now

    def create_tombstone(self, request_id: str, record: Mapping[str, Any]) -> bool:
        with self._lock:
            if request_id in self.jobs:
                return False
            self.jobs[request_id] = _stored(record)
            return True

    def get(self, request_id: str) -> dict[str, Any] | None:
        with self._lock:
            return copy.deepcopy(self.jobs.get(request_id))

    def get_attempt(self, request_id: str, attempt: int) -> dict[str, Any] | None:
        with self._lock:
            return copy.deepcopy(self.attempts.get((request_id, attempt)))

    def update_attempt(self, request_id: str, attempt: int, fields: Mapping[str, Any]) -> None:
        with self._lock:
            _merge(self.attempts.setdefault((request_id, attempt), {}), fields)

    def find_by_job_id(self, job_id: str) -> str | None:
        with self._lock:
            for record in self.jobs.values():
                if job_id in (record.get("vertexJobIds") or []):
                    return str(record["requestId"])
            return None

    def active(self) -> list[dict[str, Any]]:
        with self._lock:
            return [
                copy.deepcopy(r) for r in self.jobs.values() if not JobState(r["state"]).terminal
            ]

    def ended_since(self, since: datetime) -> list[dict[str, Any]]:
        with self._lock:
            return [
                copy.deepcopy(r)
                for r in self.jobs.values()
                if isinstance(r.get("endedAt"), datetime) and r["endedAt"] >= since
            ]

    def begin_read(
        self, request_id: str, now: datetime, interval_seconds: float, published: datetime
    ) -> tuple[HintAction, datetime | None]:
        with self._lock:
            current = self.jobs[request_id]
            last_read = current.get("lastReadAt")
            action, fields = take_hint(current, published, now, interval_seconds)
            current.update(fields)
            return action, last_read

    def renew_read(self, request_id: str, now: datetime) -> None:
        with self._lock:
            self.jobs[request_id].update(lastReadAt=now, hintPending=False)

    def release_reader(self, request_id: str) -> None:
        with self._lock:
            self.jobs[request_id].update(lastReadAt=None, hintPending=False)

    def transact(
        self, request_id: str, decide: Callable[[dict[str, Any]], Change | None]
    ) -> Change | None:
        with self._lock:
            current = self.jobs.get(request_id)
            change = decide(copy.deepcopy(current)) if current else None
            if change is None or current is None:
                return None
            current.update(_stored(change.record))
            if change.attempt:
                key = (request_id, int(current.get("attempt", 1)))
                _merge(self.attempts.setdefault(key, {}), change.attempt)
            return change

    def due_submissions(self, now: datetime) -> list[str]:
        with self._lock:
            return [
                r["requestId"]
                for r in self.jobs.values()
                if r.get("nextAttemptAt") is not None and r["nextAttemptAt"] <= now
            ]

    def claim_retry(
        self, request_id: str, attempt: int, now: datetime, ttl_seconds: float
    ) -> str | None:
        with self._lock:
            current = self.jobs.get(request_id)
            if current is None or not submission_claimable(copy.deepcopy(current), attempt, now):
                return None
            token = uuid.uuid4().hex
            current["claim"] = {"token": token, "expiresAt": now + timedelta(seconds=ttl_seconds)}
            current["updatedAt"] = now
            return token

    def with_outbox(self) -> list[str]:
        with self._lock:
            return [r["requestId"] for r in self.jobs.values() if r.get("outboxPending")]

    def drop_from_outbox(self, request_id: str, sent: list[dict[str, Any]]) -> None:
        with self._lock:
            current = self.jobs[request_id]
            current["outbox"] = [m for m in current.get("outbox") or [] if m not in sent]
            current["outboxPending"] = bool(current["outbox"])

    def with_pending_cancels(self) -> list[str]:
        with self._lock:
            return [r["requestId"] for r in self.jobs.values() if r.get("cancelPending")]


class InMemoryJobBackend:
    def __init__(self, project: str = "p") -> None:
        self.project = project
        self.jobs: dict[str, VertexJob] = {}
        self.created: list[tuple[JobRequest, dict[str, str]]] = []
        self._ids = itertools.count(1000)
        self.fail_with: Exception | None = None
        # Raised by create() *after* the job was made, like a create whose answer was lost.
        self.fail_after_create: Exception | None = None
        # Raised by cancel(), like a cancel Vertex did not confirm.
        self.fail_cancel_with: Exception | None = None
        # Raised by get(), like a Vertex read that failed (e.g. BackendUnavailable).
        self.fail_get_with: Exception | None = None
        self.reads: list[str] = []
        self.cancels: list[str] = []

    def update(self, name: str, **fields: Any) -> VertexJob:
        """Move a job on, as Vertex would: ``update(name, state="JOB_STATE_RUNNING", ...)``."""
        self.jobs[name] = dataclasses.replace(self.jobs[name], **fields)
        return self.jobs[name]

    def find(
        self, request_label: str, attempt: int, location: str, kind: str | None = None
    ) -> list[VertexJob]:
        collections = [COLLECTIONS[kind]] if kind else list(COLLECTIONS.values())
        wanted = {LABEL_REQUEST: request_label, LABEL_ATTEMPT: str(attempt)}
        return [
            job
            for job in self.list_labelled(location)
            if job.name.split("/")[-2] in collections and job.labels == wanted
        ]

    def create(self, request: JobRequest, labels: Mapping[str, str], location: str) -> VertexJob:
        if self.fail_with is not None:
            raise self.fail_with
        collection = COLLECTIONS[request.kind]  # KeyError: a deployModel must never get here
        name = f"projects/{self.project}/locations/{location}/{collection}/{next(self._ids)}"
        state = (
            "PIPELINE_STATE_QUEUED" if request.kind == "trainingPipeline" else "JOB_STATE_QUEUED"
        )
        job = VertexJob(name=name, state=state, labels=dict(labels))
        self.jobs[name] = job
        self.created.append((request, dict(labels)))
        if self.fail_after_create is not None:
            error, self.fail_after_create = self.fail_after_create, None
            raise error
        return job

    def get(self, name: str) -> VertexJob:
        self.reads.append(name)
        if self.fail_get_with is not None:
            raise self.fail_get_with
        return self.jobs[name]

    def list_labelled(
        self, location: str, created_since: datetime | None = None
    ) -> Iterable[VertexJob]:
        # Like Vertex: a listing covers one location only.
        return [
            job
            for job in self.jobs.values()
            if f"/locations/{location}/" in job.name
            and (
                created_since is None or job.create_time is None or job.create_time >= created_since
            )
        ]

    def cancel(self, name: str) -> None:
        self.cancels.append(name)
        if self.fail_cancel_with is not None:
            raise self.fail_cancel_with
        job = self.jobs[name]
        if job.state.endswith(("SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED")):
            return  # ended already: as cancelled as it gets (the Vertex adapter's contract)
        state = (
            "PIPELINE_STATE_CANCELLED" if "/trainingPipelines/" in name else "JOB_STATE_CANCELLED"
        )
        self.jobs[name] = dataclasses.replace(job, state=state)


class InMemoryRejectionLog:
    def __init__(self) -> None:
        self.documents: dict[str, dict[str, Any]] = {}

    def record(self, rejection_id: str, document: Mapping[str, Any]) -> None:
        self.documents[rejection_id] = _stored(document)


class InMemoryNotifier:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        # Raised (once) by the next notify(), like a publish that did not complete.
        self.fail_next: Exception | None = None

    def notify(self, message: Mapping[str, Any]) -> None:
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        self.messages.append(dict(message))


class InMemoryCheckpointStore:
    """The CheckpointStore port: complete checkpoints by prefix, committed by the test."""

    def __init__(self) -> None:
        self.checkpoints: dict[str, list[Checkpoint]] = {}
        self.asked: list[str] = []

    def commit(self, prefix_uri: str, step: int, at: datetime) -> Checkpoint:
        """A complete step directory under ``prefix_uri`` (which ends with ``/``)."""
        checkpoint = Checkpoint(f"{prefix_uri}step-{step:08d}/", step, at)
        self.checkpoints.setdefault(prefix_uri, []).append(checkpoint)
        return checkpoint

    def latest(self, prefix_uri: str, *, not_before: datetime | None = None) -> Checkpoint | None:
        self.asked.append(prefix_uri)
        found = [
            c
            for c in self.checkpoints.get(prefix_uri) or []
            if not_before is None or c.at >= not_before
        ]
        return max(found, key=lambda c: (c.step or 0, c.at)) if found else None


class FakeClock:
    """A clock that moves only when a test says so."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


class InMemoryDeploymentStore:
    """Deployment records by requestId: storage only, the Firestore store's rules applied."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def claim(self, request: JobRequest, now: datetime, ttl_seconds: float) -> Claim:
        with self._lock:
            token = uuid.uuid4().hex
            lease = {"token": token, "expiresAt": now + timedelta(seconds=ttl_seconds)}
            current = self.records.get(request.request_id)
            if current is None:
                self.records[request.request_id] = {**new_deployment(request, now), "claim": lease}
                return Claim(token=token)
            seen = existing_claim(current, now, deployment_settled(current))
            if seen is ClaimSeen.SUBMITTED:
                return Claim(record=copy.deepcopy(current))
            if seen is ClaimSeen.HELD:
                raise SubmissionInProgress("held")
            current.update(claim=lease, updatedAt=now)
            return Claim(token=token, taken_over=True)

    def _update(self, request_id: str, fields: Mapping[str, Any] | None) -> None:
        """Firestore's transactional update: a missing record, or no fields, changes nothing."""
        current = self.records.get(request_id)
        if current is not None and fields:
            current.update(_stored(fields))

    def _finish(self, request_id: str, fields: dict[str, Any]) -> None:
        with self._lock:
            current = self.records.get(request_id)
            if current is not None and not deployment_settled(current):
                current.update(_stored(fields), nextAttemptAt=None, reason=None)
                current.pop("claim", None)

    def record_operation(self, token: str, request_id: str, operation: str, now: datetime) -> None:
        self._finish(
            request_id,
            {"state": DeploymentState.DEPLOYING.value, "operation": operation, "updatedAt": now},
        )

    def record_adopted(
        self, token: str, request_id: str, deployed_model_id: str, now: datetime
    ) -> None:
        self._finish(
            request_id,
            {
                "state": DeploymentState.DEPLOYED.value,
                "deployedModelId": deployed_model_id,
                "deployedAt": now,
                "updatedAt": now,
            },
        )

    def record_failure(self, request_id: str, reason: str, now: datetime) -> None:
        with self._lock:
            self._update(request_id, deploy_failed(self.records.get(request_id) or {}, reason, now))

    def park(self, request_id: str, now: datetime, delay_seconds: float, detail: str) -> None:
        with self._lock:
            current = self.records.get(request_id) or {}
            self._update(request_id, deploy_parked(current, now, delay_seconds, detail))

    def parked_due(self, now: datetime) -> list[dict[str, Any]]:
        with self._lock:
            return [
                copy.deepcopy(r)
                for r in self.records.values()
                if r.get("nextAttemptAt") is not None and r["nextAttemptAt"] <= now
            ]

    def release(self, request_id: str, token: str, now: datetime) -> None:
        with self._lock:
            current = self.records.get(request_id) or {}
            if (current.get("claim") or {}).get("token") == token:
                current.pop("claim")
                current["updatedAt"] = now

    def get(self, request_id: str) -> dict[str, Any] | None:
        with self._lock:
            return copy.deepcopy(self.records.get(request_id))

    def deploying(self) -> list[dict[str, Any]]:
        with self._lock:
            return [
                copy.deepcopy(r)
                for r in self.records.values()
                if r["state"] == DeploymentState.DEPLOYING.value
            ]

    def apply_operation(
        self, request_id: str, status: OperationStatus, now: datetime
    ) -> str | None:
        with self._lock:
            change = observe_operation(self.records.get(request_id) or {}, status, now)
            if change is None:
                return None
            self._update(request_id, change)
            return str(change["state"])


class InMemoryDeploymentBackend:
    """Endpoints and DeployModel operations; an operation finishes when ``finish()`` says so."""

    def __init__(self) -> None:
        self.endpoints: dict[str, list[dict[str, Any]]] = {}
        self.operations: dict[str, OperationStatus] = {}
        self.deployed: list[tuple[JobRequest, str]] = []  # (request, tagged display name)
        self._pending: dict[str, tuple[str, dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self.fail_with: Exception | None = None

    def add_endpoint(self, name: str) -> None:
        self.endpoints.setdefault(name, [])

    def find(self, endpoint: str, request_id: str) -> str | None:
        if endpoint not in self.endpoints:
            raise BackendRejected(f"Vertex AI refused GetEndpoint: 404 {endpoint} not found")
        for model in self.endpoints[endpoint]:
            if carries_tag(model["displayName"], request_id):
                return str(model["id"])
        return None

    def deploy(self, request: JobRequest) -> str:
        if self.fail_with is not None:
            raise self.fail_with
        endpoint = request.spec["endpoint"]
        number = next(self._ids)
        name = f"{endpoint}/operations/{number}"
        deployed = dict(request.spec["deployedModel"])
        deployed["displayName"] = tagged_display_name(
            deployed.get("displayName"), request.request_id
        )
        deployed["id"] = str(9000 + number)
        self.deployed.append((request, deployed["displayName"]))
        self._pending[name] = (endpoint, deployed)
        self.operations[name] = OperationStatus(name=name, done=False)
        return name

    def finish(self, name: str, error: str | None = None) -> None:
        """Complete a pending operation: the model appears on its endpoint, or it fails."""
        endpoint, deployed = self._pending.pop(name)
        if error:
            self.operations[name] = OperationStatus(name, True, error_code=9, error_message=error)
            return
        self.endpoints[endpoint].append(deployed)
        self.operations[name] = OperationStatus(name, True, deployed_model_id=deployed["id"])

    def operation(self, name: str) -> OperationStatus:
        return self.operations[name]
