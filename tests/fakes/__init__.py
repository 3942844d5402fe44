"""In-memory fakes of flexjobs' own ports, for unit and functional tests.

The job stores, which share one in-memory database, are :mod:`tests.fakes.jobs`'; Firestore's
rules for a document (copies, the 1 MiB bound) are :mod:`tests.fakes.documents`'. Both are
exported from here too.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from google.api_core import exceptions as gexc

from shared.app.ports import ON_ENDPOINT_LIMIT, DecideDeployment
from shared.domain.decisions.deploy_model import OperationStatus
from shared.domain.model import tally as tallies
from shared.domain.model import watch as watches
from shared.domain.model.changes import Decided, DeploymentChange, Written
from shared.domain.model.checkpoint import Checkpoint, ObjectInfo
from shared.domain.model.ids import LABEL_ATTEMPT, LABEL_CLAIM, LABEL_REQUEST, doc_id
from shared.domain.model.kinds import TRAINING, kind_named, training_kind_of
from shared.domain.model.records import Stored
from shared.domain.model.states import from_vertex
from shared.domain.model.tally import Tally
from shared.domain.model.vertex_jobs import VertexJob
from shared.domain.model.watch import Saved, Watch
from shared.domain.policy.checkpoints import (
    COMMIT_SUCCESS,
    confirm,
    latest_complete,
    listings,
    split_gcs_uri,
)
from shared.domain.request.message import JobRequest, parse_duration
from shared.domain.serving.followed import FOLLOWED_FIELDS, followed
from shared.domain.serving.model import ObservedEndpoint
from shared.kernel.errors import (
    BackendRejected,
    BackendUnavailable,
    EndpointGone,
    JobGone,
    ObjectGone,
)
from shared.status.listing import (
    ATTEMPT_FIELDS,
    DEPLOYMENT_FIELDS,
    DEPLOYMENT_LIST_FIELDS,
    JOB_FIELDS,
    LIST_FIELDS,
    MAX_ATTEMPTS,
    TOTAL_FIELDS,
    Listing,
    Page,
    next_cursor,
)
from tests.fakes.documents import MAX_DOCUMENT_BYTES, as_stored, check_size, document_size, select
from tests.fakes.jobs import (
    InMemoryAdmissionStore,
    InMemoryAttemptStore,
    InMemoryJobDatabase,
    InMemoryJobStore,
    InMemorySeriesStore,
    InMemoryWatchStore,
    in_memory_job_stores,
    in_memory_records,
)

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "FakeClock",
    "InMemoryAdmissionStore",
    "InMemoryAttemptStore",
    "InMemoryCheckpointStore",
    "InMemoryDeploymentBackend",
    "InMemoryDeploymentStore",
    "InMemoryJobBackend",
    "InMemoryJobDatabase",
    "InMemoryJobStore",
    "InMemoryJobViews",
    "InMemoryNotifier",
    "InMemoryPublisher",
    "InMemoryQuotaLimits",
    "InMemoryRejectionLog",
    "InMemorySeriesStore",
    "InMemoryStoredObjects",
    "InMemoryWatchStore",
    "crash_on_next_record",
    "document_size",
    "in_memory_job_stores",
    "in_memory_records",
    "key_labels",
]

# Request kind -> the Vertex collection its resources are named in.
COLLECTIONS = {kind.name: kind.collection for kind in TRAINING}


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
        # False: a cancel leaves the job CANCELLING (still holding its GPUs) until a test
        # ends it, as Vertex's asynchronous cancel does; True: cancelled at once.
        self.cancel_lands = True
        # Raised by get(), like a Vertex read that failed (e.g. BackendUnavailable).
        self.fail_get_with: Exception | None = None
        self.reads: list[str] = []
        self.cancels: list[str] = []
        # Calls per method, as Vertex would count them against the project's quota.
        self.calls: Counter[str] = Counter()

    def update(self, name: str, **fields: Any) -> VertexJob:
        """Move a job on, as Vertex would: ``update(name, state="JOB_STATE_RUNNING", ...)``."""
        self.jobs[name] = dataclasses.replace(self.jobs[name], **fields)
        return self.jobs[name]

    def find(
        self, request_label: str, attempt: int, location: str, kind: str | None = None
    ) -> list[VertexJob]:
        self.calls["find"] += 1
        collections = [COLLECTIONS[kind]] if kind else list(COLLECTIONS.values())
        wanted = {LABEL_REQUEST: request_label, LABEL_ATTEMPT: str(attempt)}
        return [
            job
            for job in self._in(location)
            if job.name.split("/")[-2] in collections
            and all(job.labels.get(k) == v for k, v in wanted.items())
        ]

    def create(
        self,
        request: JobRequest,
        labels: Mapping[str, str],
        location: str,
        *,
        before_send: Callable[[], None] | None = None,
    ) -> VertexJob:
        if before_send is not None:
            before_send()  # what it raises sends nothing: no call is counted
        self.calls["create"] += 1
        if self.fail_with is not None:
            raise self.fail_with
        collection = COLLECTIONS[request.kind]  # KeyError: a deployModel must never get here
        name = f"projects/{self.project}/locations/{location}/{collection}/{next(self._ids)}"
        state = f"{kind_named(request.kind).state_prefix}_QUEUED"
        scheduling = request.scheduling
        wait = scheduling.get("maxWaitDuration")
        job = VertexJob(
            name=name,
            state=state,
            labels=dict(labels),
            # What Vertex holds of the job's scheduling, as the adapter reads it back.
            strategy=scheduling.get("strategy"),
            max_wait_seconds=parse_duration(wait) if isinstance(wait, str) else None,
        )
        self.jobs[name] = job
        self.created.append((request, dict(labels)))
        if self.fail_after_create is not None:
            error, self.fail_after_create = self.fail_after_create, None
            raise error
        return job

    def get(self, name: str) -> VertexJob:
        self.calls["get"] += 1
        self.reads.append(name)
        if self.fail_get_with is not None:
            raise self.fail_get_with
        if name not in self.jobs:
            raise JobGone(f"{name}: 404 not found")  # as the Vertex adapter says NOT_FOUND
        return self.jobs[name]

    def list_labelled(
        self, location: str, created_since: datetime | None = None
    ) -> Iterable[VertexJob]:
        self.calls["list_labelled"] += 1
        return [
            job
            for job in self._in(location)
            if created_since is None or job.create_time is None or job.create_time >= created_since
        ]

    def _in(self, location: str) -> list[VertexJob]:
        # Like Vertex: a listing covers one location only.
        return [job for job in self.jobs.values() if f"/locations/{location}/" in job.name]

    def cancel(self, name: str) -> None:
        self.calls["cancel"] += 1
        self.cancels.append(name)
        if self.fail_cancel_with is not None:
            raise self.fail_cancel_with
        job = self.jobs[name]
        ended = from_vertex(job.state)
        if ended is not None and ended.terminal:
            return  # ended already: as cancelled as it gets (the Vertex adapter's contract)
        kind = training_kind_of(name)  # a name a test made up reads as a job's
        end = "CANCELLED" if self.cancel_lands else "CANCELLING"
        state = f"{kind.state_prefix if kind else 'JOB_STATE'}_{end}"
        self.jobs[name] = dataclasses.replace(job, state=state)


class InMemoryRejectionLog:
    def __init__(self) -> None:
        self.documents: dict[str, dict[str, Any]] = {}

    def get(self, rejection_id: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.documents.get(rejection_id))

    def record(self, rejection_id: str, document: Mapping[str, Any]) -> None:
        check_size(f"rejections/{doc_id(rejection_id)}", document)
        self.documents[rejection_id] = as_stored(document)


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


class InMemoryQuotaLimits:
    """The QuotaLimits port in memory: the limits the quota system would report, and each
    read's resources. ``failing``: raised by every read while set (an API down or not
    enabled)."""

    def __init__(self, limits: Mapping[Any, int] | None = None) -> None:
        self.values: dict[Any, int] = dict(limits or {})
        self.reads: list[list[Any]] = []
        self.failing: Exception | None = None

    def limits(self, resources: Any) -> dict[Any, int]:
        self.reads.append(list(resources))
        if self.failing is not None:
            raise self.failing
        return {r: n for r, n in self.values.items() if r in set(resources)}


class InMemoryPublisher:
    """The client library's Publisher port in memory: what was published, per topic, with a
    message id each; storage only. Pub/Sub's own bound is kept: an attribute value over
    1,024 bytes is refused, as the service refuses it."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes, dict[str, str]]] = []
        # Raised (once) by the next publish(), like a publish that did not complete.
        self.fail_next: Exception | None = None

    def publish(self, topic: str, data: bytes, attributes: Mapping[str, str]) -> str:
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        for key, value in attributes.items():
            if len(value.encode("utf-8")) > 1024:
                raise gexc.InvalidArgument(f"attribute {key} is over 1024 bytes")
        self.messages.append((topic, bytes(data), dict(attributes)))
        return str(len(self.messages))


class InMemoryCheckpointStore:
    """The CheckpointStore port in memory: objects by bucket, searched by the domain's own
    rules (:func:`~shared.domain.policy.checkpoints.latest_complete` and
    :func:`~shared.domain.policy.checkpoints.confirm`), as the GCS adapter searches its listings."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, ObjectInfo]] = {}
        self.asked: list[str] = []
        self.confirmed: list[str] = []

    def put(self, uri: str, at: datetime, size: int = 16) -> None:
        """Write one object, ``gs://bucket/name``, at ``at``."""
        bucket, name = split_gcs_uri(uri)
        self.objects.setdefault(bucket, {})[name] = ObjectInfo(name, at, size)

    def commit(self, prefix_uri: str, step: int, at: datetime) -> Checkpoint:
        """A complete step directory under ``prefix_uri`` (which ends with ``/``): its data,
        then its marker, as frameworks write them."""
        directory = f"{prefix_uri}step-{step:08d}/"
        self.put(f"{directory}state.bin", at, 1024)
        self.put(f"{directory}{COMMIT_SUCCESS}", at, 32)
        return Checkpoint(directory, step, at)

    def _read(self, bucket: str, prefix: str) -> Callable[[str], Any]:
        return listings(self.objects.get(bucket, {}).values(), prefix)

    def latest(self, prefix_uri: str, *, not_before: datetime | None = None) -> Checkpoint | None:
        self.asked.append(prefix_uri)
        bucket, prefix = split_gcs_uri(prefix_uri)
        objects = self.objects.get(bucket, {}).values()
        return latest_complete(objects, bucket, prefix, not_before=not_before)

    def confirm(self, checkpoint: Checkpoint) -> Checkpoint | None:
        self.confirmed.append(checkpoint.uri)
        try:
            bucket, _ = split_gcs_uri(checkpoint.uri)
        except ValueError:
            return None  # not a Cloud Storage URI (a hand-edited record): nothing to confirm
        return confirm(checkpoint, self._read(bucket, ""))


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
    """The DeploymentStore port in memory: storage only, like Firestore. Every write stamps the
    record with the store's next version (its ``touchedAt``; a write made as an older revision
    or by hand, ``unstamped``, leaves none), and the followed list is kept in its stored form
    (``followed/head``, ``followed/shard-N``), read and saved on the same precondition as the
    Firestore adapter's."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        # The store's time: the version of its latest write, and each record's last stamp.
        self.version = 0
        self.touched: dict[str, int] = {}
        # The followed list as saved: its head (None: none yet), shards, and version.
        self.followed_head: dict[str, Any] | None = None
        self.followed_shards: list[bytes] = []
        self.followed_version = 0
        # Documents returned by each read (Firestore's billed reads), by method.
        self.reads: Counter[str] = Counter()
        #: When set, writes leave no stamp (an older revision, or a hand edit).
        self.unstamped = False

    def _stamp(self, request_id: str) -> None:
        self.version += 1
        if not self.unstamped:
            self.touched[request_id] = self.version

    def get(self, request_id: str) -> dict[str, Any] | None:
        with self._lock:
            self.reads["get"] += 1
            return copy.deepcopy(self.records.get(request_id))

    def create(self, request_id: str, record: Mapping[str, Any]) -> bool:
        with self._lock:
            if request_id in self.records:
                return False
            check_size(f"deployments/{doc_id(request_id)}", record)
            self.records[request_id] = as_stored(record)
            self._stamp(request_id)
            return True

    def transact(
        self,
        request_id: str,
        decide: DecideDeployment,
    ) -> Written[DeploymentChange, Stored] | None:
        with self._lock:
            current = self.records.get(request_id)
            if current is None:
                return None
            self.reads["transact"] += 1
            made = decide(copy.deepcopy(current))
            change = made.change if isinstance(made, Decided) else made
            result = made.result if isinstance(made, Decided) else None
            if change is not None:
                after = {**current, **change.fields}
                for name in change.deletes:
                    after.pop(name, None)
                check_size(f"deployments/{doc_id(request_id)}", after)
                current.update(as_stored(change.fields))
                for name in change.deletes:
                    current.pop(name, None)
                self._stamp(request_id)
            # No version: deployments are written without one (the fake holds no clock).
            return Written(change, Stored(copy.deepcopy(current), None), result)

    def _partial(self, request_id: str) -> Stored:
        raw = self.records[request_id]
        kept = {name: copy.deepcopy(raw[name]) for name in FOLLOWED_FIELDS if name in raw}
        return Stored(kept, None, partial=True, key=doc_id(request_id))

    def _alive_ids(self) -> list[str]:
        return sorted(r for r, raw in self.records.items() if followed(raw))

    def alive(self, at: Any = None) -> list[Stored]:
        with self._lock:
            found = [self._partial(r) for r in self._alive_ids()]
            self.reads["alive"] += max(len(found), 1)
            return found

    def count_alive(self, at: Any) -> int:
        with self._lock:
            counted = len(self._alive_ids())
            self.reads["count_alive"] += 1 + counted // 1000
            return counted

    def changed_since(self, mark: Any, at: Any, most: int) -> list[Stored]:
        with self._lock:
            # As of ``at``: a record last written after it is left for the next sync (its stamp
            # is past the next mark), as Firestore's read at that time would not show it.
            until = at if isinstance(at, int) else self.version + 1
            ids = sorted(
                (v, r) for r, v in self.touched.items() if mark <= v < until and r in self.records
            )
            found = [self._partial(r) for _, r in ids[: most + 1]]
            self.reads["changed_since"] += max(len(found), 1)
            return found

    def read_followed(self) -> Saved:
        with self._lock:
            # One batch get of the head and every shard a list may have.
            self.reads["read_followed"] += 1 + watches.MAX_SHARDS
            # Reads as of this one are as of the latest write (the next mark: a write after it
            # has a later version, and the next sync reads it).
            at = self.version + 1
            head = self.followed_head
            if head is None:
                return Saved(None, None, None, None, at)
            overflowed = head.get("overflowedAt")
            if isinstance(overflowed, datetime):
                return Saved(None, None, overflowed, self.followed_version, at)
            return Saved(
                watches.decode(list(self.followed_shards)), None, None, self.followed_version, at
            )

    def save_followed(self, listed: Watch | None, version: Any) -> bool:
        with self._lock:
            shards = watches.encode(listed) if listed is not None else []
            for i, shard in enumerate(shards):
                check_size(f"followed/shard-{i}", {"data": shard})
            current = self.followed_version if self.followed_head is not None else None
            if version != current:
                return False  # another tick saved since this one read: the precondition fails
            overflowed = None if listed is not None else datetime.now(UTC)
            self.followed_head = {"shards": len(shards), "overflowedAt": overflowed}
            self.followed_shards = shards
            self.followed_version += 1
            return True

    def on_endpoint(self, endpoint: str) -> list[dict[str, Any]]:
        alive = ("ACCEPTED", "DEPLOYING", "DEPLOYED")
        with self._lock:
            found = [
                copy.deepcopy(r)
                for r in self.records.values()
                if r.get("endpoint") == endpoint and r.get("state") in alive
            ]
            self.reads["on_endpoint"] += max(len(found[:ON_ENDPOINT_LIMIT]), 1)
        return found[:ON_ENDPOINT_LIMIT]

    def with_outbox(self) -> list[dict[str, Any]]:
        with self._lock:
            found = [copy.deepcopy(r) for r in self.records.values() if r.get("outboxPending")]
            self.reads["with_outbox"] += max(len(found), 1)
            return found


class InMemoryDeploymentBackend:
    """Endpoints and DeployModel operations; an operation finishes when ``finish()`` says so."""

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self.endpoints: dict[str, list[dict[str, Any]]] = {}
        self.operations: dict[str, OperationStatus] = {}
        self.deployed: list[tuple[JobRequest, str]] = []  # (request, tagged display name)
        self._pending: dict[str, tuple[str, dict[str, Any]]] = {}
        # When each pending DeployModel started, by ``clock`` (without one, not known).
        self._clock = clock
        self._started: dict[str, datetime] = {}
        self.listings: list[str] = []  # the endpoints whose running DeployModels were listed
        self._ids = itertools.count(1)
        self.fail_with: Exception | None = None
        # GetEndpoint: each endpoint's traffic split, the reads made, a fault to raise, and a
        # hook run inside a read (a test interleaves another tick there).
        self.splits: dict[str, dict[str, int]] = {}
        self._split_of: dict[str, Any] = {}
        self.reads: list[str] = []
        self.read_fails_with: Exception | None = None
        self.during_read: Callable[[], None] | None = None
        # The serving calls (method, endpoint, what), a fault they raise, the etags, and the
        # long-running MutateDeployedModel and UndeployModel operations until finish().
        self.calls: list[tuple[str, str, Any]] = []
        self.call_fails_with: Exception | None = None
        self.templates: list[Any] = []  # each fallback's template (the requested deployedModel)
        self.etags: dict[str, str] = {}
        # Endpoint.update_time: the server's time of each endpoint's last change; the server
        # stamps each change later than the one before (a clock of its own), so versions
        # order even when the caller's clock stands still.
        self.updated: dict[str, datetime] = {}
        self._mutations: dict[str, tuple[str, str, int]] = {}
        self._undeploys: dict[str, tuple[str, str]] = {}

    def add_endpoint(self, name: str) -> None:
        self.endpoints.setdefault(name, [])

    def set_available(self, endpoint: str, deployed_model_id: str, available: int) -> None:
        """What ``status.availableReplicaCount`` reports for one deployed model."""
        for model in self.endpoints[endpoint]:
            if model["id"] == deployed_model_id:
                model["status"] = {"availableReplicaCount": available}

    def undeploy_by_hand(self, endpoint: str, deployed_model_id: str) -> None:
        """The model is undeployed (by hand): gone from the endpoint and its split."""
        self._remove(endpoint, deployed_model_id)

    def _remove(self, endpoint: str, deployed_model_id: str) -> None:
        self.endpoints[endpoint] = [
            m for m in self.endpoints[endpoint] if m["id"] != deployed_model_id
        ]
        self.splits.get(endpoint, {}).pop(deployed_model_id, None)
        self._changed(endpoint)

    def _changed(self, endpoint: str) -> None:
        # Endpoint.etag: every change to the endpoint gives it a new one.
        self.etags[endpoint] = str(next(self._ids))
        now = self._clock() if self._clock is not None else datetime(2026, 1, 1, tzinfo=UTC)
        last = max(self.updated.values(), default=now)
        self.updated[endpoint] = max(now, last + timedelta(microseconds=1))

    def set_split_by_hand(self, endpoint: str, split: dict[str, int]) -> None:
        self.splits[endpoint] = dict(split)
        self._changed(endpoint)

    def deploy_on_demand(
        self, endpoint: str, display_name: str, replicas: int, template: Mapping[str, Any]
    ) -> str:
        """DeployModel of an on-demand model (a floor, a fallback) with an empty split (the
        split is not updated)."""
        self.calls.append(("DeployModel", endpoint, display_name))
        self.templates.append(template)
        if self.call_fails_with is not None:
            raise self.call_fails_with
        if endpoint not in self.endpoints:
            raise BackendRejected(f"Vertex AI refused DeployModel: 404 {endpoint} not found")
        number = next(self._ids)
        name = f"{endpoint}/operations/{number}"
        resources = dict(template.get("dedicatedResources") or {})
        deployed = {
            "id": str(9000 + number),
            "model": template.get("model"),
            "displayName": display_name,
            "dedicatedResources": {
                "machineSpec": dict(resources.get("machineSpec") or {}),
                "minReplicaCount": replicas,
                "requiredReplicaCount": replicas,
                "spot": False,
            },
        }
        self._pending[name] = (endpoint, deployed)
        self._start(name)
        self.operations[name] = OperationStatus(name=name, done=False)
        return name

    def _start(self, name: str) -> None:
        if self._clock is not None:
            self._started[name] = self._clock()

    def running_deploys(self, endpoint: str) -> tuple[datetime, ...] | None:
        """When each DeployModel of ``endpoint`` not yet finished started; None when one's
        start is not known (no clock)."""
        self.listings.append(endpoint)
        if self.read_fails_with is not None:
            raise self.read_fails_with
        names = sorted(n for n, (e, _) in self._pending.items() if e == endpoint)
        if any(n not in self._started for n in names):
            return None
        return tuple(self._started[n] for n in names)

    def set_traffic(self, endpoint: str, split: Mapping[str, int], etag: str) -> datetime | None:
        """UpdateEndpoint of the split: refused (ABORTED) when the etag is not the current one,
        and refused when the shares do not sum to 100 or name a model not deployed."""
        self.calls.append(("UpdateEndpoint", endpoint, dict(split)))
        if self.call_fails_with is not None:
            raise self.call_fails_with
        if etag != self.etags.get(endpoint, ""):
            raise BackendUnavailable("Vertex AI UpdateEndpoint failed: 409 ABORTED etag mismatch")
        ids = {m["id"] for m in self.endpoints[endpoint]}
        if (split and sum(split.values()) != 100) or not set(split) <= ids:
            raise BackendRejected(f"Vertex AI refused UpdateEndpoint: 400 bad split {split}")
        self.splits[endpoint] = {k: int(v) for k, v in split.items() if int(v) > 0}
        self._changed(endpoint)
        return self.updated[endpoint]

    def resize(self, endpoint: str, deployed_model_id: str, replicas: int) -> str:
        self.calls.append(("MutateDeployedModel", endpoint, replicas))
        if self.call_fails_with is not None:
            raise self.call_fails_with
        name = f"{endpoint}/operations/{next(self._ids)}"
        self._mutations[name] = (endpoint, deployed_model_id, replicas)
        self.operations[name] = OperationStatus(name=name, done=False)
        return name

    def undeploy(self, endpoint: str, deployed_model_id: str) -> str:
        """UndeployModel: refused (FAILED_PRECONDITION) while the model has traffic."""
        self.calls.append(("UndeployModel", endpoint, deployed_model_id))
        if self.call_fails_with is not None:
            raise self.call_fails_with
        # "A DeployedModel will be successfully undeployed only if it doesn't have any traffic
        # assigned to it" -- unless it is the endpoint's last, which takes the split with it.
        last = len(self.endpoints[endpoint]) == 1
        if self.splits.get(endpoint, {}).get(deployed_model_id) and not last:
            raise BackendRejected("Vertex AI refused UndeployModel: 400 the model has traffic")
        name = f"{endpoint}/operations/{next(self._ids)}"
        self._undeploys[name] = (endpoint, deployed_model_id)
        self.operations[name] = OperationStatus(name=name, done=False)
        return name

    def read(self, endpoint: str) -> ObservedEndpoint:
        self.reads.append(endpoint)
        if self.during_read is not None:
            hook, self.during_read = self.during_read, None
            hook()
        if self.read_fails_with is not None:
            raise self.read_fails_with
        if endpoint not in self.endpoints:
            raise EndpointGone(f"Vertex AI refused GetEndpoint: 404 {endpoint} not found")
        raw = {
            "name": endpoint,
            "deployedModels": copy.deepcopy(self.endpoints[endpoint]),
            "trafficSplit": dict(self.splits.get(endpoint, {})),
            "etag": self.etags.get(endpoint, ""),
        }
        if endpoint in self.updated:
            raw["updateTime"] = self.updated[endpoint].isoformat().replace("+00:00", "Z")
        return ObservedEndpoint.from_json(raw)

    def deploy(self, request: JobRequest, display_name: str, replicas: int) -> str:
        """DeployModel of the request's Spot model under ``display_name``, ``replicas`` as
        its min and required count, with the request's traffic split once it is done."""
        if self.fail_with is not None:
            raise self.fail_with
        endpoint = request.spec["endpoint"]
        if endpoint not in self.endpoints:
            raise BackendRejected(f"Vertex AI refused DeployModel: 404 {endpoint} not found")
        number = next(self._ids)
        name = f"{endpoint}/operations/{number}"
        deployed = copy.deepcopy(dict(request.spec["deployedModel"]))
        deployed["displayName"] = display_name
        resources = deployed.setdefault("dedicatedResources", {})
        resources["minReplicaCount"] = replicas
        resources["requiredReplicaCount"] = replicas
        resources["maxReplicaCount"] = max(int(resources.get("maxReplicaCount") or 0), replicas)
        deployed["id"] = str(9000 + number)
        self.deployed.append((request, display_name))
        self._pending[name] = (endpoint, deployed)
        self._split_of[name] = request.spec.get("trafficSplit")
        self._start(name)
        self.operations[name] = OperationStatus(name=name, done=False)
        return name

    def finish(self, name: str, error: str | None = None) -> None:
        """Complete a pending operation: the model appears on its endpoint (or is resized,
        or leaves it), or it fails."""
        if name in self._mutations:
            endpoint, model_id, replicas = self._mutations.pop(name)
            if not error:
                for model in self.endpoints[endpoint]:
                    if model["id"] == model_id:
                        model["dedicatedResources"]["minReplicaCount"] = replicas
                        model["dedicatedResources"]["requiredReplicaCount"] = replicas
                self._changed(endpoint)
            self.operations[name] = OperationStatus(
                name, True, error_code=9 if error else 0, error_message=error
            )
            return
        if name in self._undeploys:
            endpoint, model_id = self._undeploys.pop(name)
            if not error:
                self._remove(endpoint, model_id)
            self.operations[name] = OperationStatus(
                name, True, error_code=9 if error else 0, error_message=error
            )
            return
        endpoint, deployed = self._pending.pop(name)
        self._started.pop(name, None)
        self._changed(endpoint)
        if error:
            self.operations[name] = OperationStatus(name, True, error_code=9, error_message=error)
            return
        resources = deployed.get("dedicatedResources") or {}
        # Once deployed, every required replica serves until a test says otherwise.
        required = resources.get("requiredReplicaCount") or resources.get("minReplicaCount") or 1
        deployed["status"] = {"availableReplicaCount": int(required)}
        self.endpoints[endpoint].append(deployed)
        request_split = self._split_of.pop(name, None)
        if request_split:
            # DeployModelRequest.traffic_split: key "0" stands for the model being deployed.
            self.splits[endpoint] = {
                (deployed["id"] if k == "0" else k): int(v) for k, v in request_split.items()
            }
        self.operations[name] = OperationStatus(name, True, deployed_model_id=deployed["id"])

    def operation(self, name: str) -> OperationStatus:
        return self.operations[name]


def crash_on_next_record(records: Any) -> None:
    """The process dies between create and record: the next ``record_submission`` of
    ``records`` (a :class:`~shared.app.repository.jobs.JobRecords`) raises a BaseException, which no
    handler catches, so nothing after it runs (not even a claim release)."""
    original = records.record_submission

    def crash(*args: Any, **kwargs: Any) -> bool:
        records.record_submission = original
        raise KeyboardInterrupt("injected crash between create and record")

    records.record_submission = crash


class InMemoryStoredObjects:
    """The StoredObjects port in memory: objects by (bucket, name, generation)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], bytes] = {}
        self.reads: list[tuple[str, str, str]] = []
        # Raised by read(), like Cloud Storage being unreachable.
        self.fail_with: Exception | None = None

    def put(self, bucket: str, name: str, generation: str, data: bytes) -> None:
        self.objects[(bucket, name, generation)] = data

    def read(self, bucket: str, name: str, generation: str, limit: int) -> bytes:
        self.reads.append((bucket, name, generation))
        if self.fail_with is not None:
            raise self.fail_with
        try:
            return self.objects[(bucket, name, generation)][: limit + 1]
        except KeyError:
            raise ObjectGone(f"gs://{bucket}/{name}#{generation} does not exist") from None


def _newest_first(
    documents: Iterable[dict[str, Any]], listing: Listing, fields: tuple[str, ...]
) -> Page:
    """A page ordered as Firestore orders it (``createdAt`` then document id, descending);
    documents without a ``createdAt`` are in no such order, so in no page."""

    def key(document: dict[str, Any]) -> tuple[datetime, str]:
        return document["createdAt"], doc_id(str(document.get("requestId")))

    rows = sorted(
        (d for d in documents if isinstance(d.get("createdAt"), datetime)), key=key, reverse=True
    )
    if listing.after is not None:
        place = (listing.after.created_at, doc_id(listing.after.request_id))
        rows = [d for d in rows if key(d) < place]
    rows = [select(d, fields) for d in rows[: listing.size + 1]]
    return Page(rows[: listing.size], next_cursor(rows, listing.size))


class InMemoryJobViews:
    """The JobViews port over the in-memory stores' documents: storage only, what the
    Firestore queries return (the same filters, order, page bounds and selected fields).
    tests/integration/test_views_contract.py runs the same cases on both."""

    def __init__(
        self, database: InMemoryJobDatabase, deployments: InMemoryDeploymentStore | None = None
    ) -> None:
        self.database = database
        self.deployment_store = deployments or InMemoryDeploymentStore()
        # Set to an exception to make every read raise it (a Firestore outage).
        self.fail: Exception | None = None

    def _documents(self) -> list[dict[str, Any]]:
        if self.fail is not None:
            raise self.fail
        with self.database.lock:
            return list(self.database.jobs.values())

    def jobs(self, listing: Listing) -> Page:
        chosen = [
            d
            for d in self._documents()
            if (not listing.states or d.get("state") in listing.states)
            and (listing.since is None or _at_or_after(d.get("createdAt"), listing.since))
        ]
        return _newest_first(chosen, listing, LIST_FIELDS)

    def job(self, request_id: str) -> dict[str, Any] | None:
        found = [d for d in self._documents() if d.get("requestId") == request_id]
        return select(found[0], JOB_FIELDS) if found else None

    def attempts(self, request_id: str, numbers: Sequence[int]) -> list[dict[str, Any]]:
        self._documents()
        with self.database.lock:
            found = [self.database.attempts.get((request_id, n)) for n in numbers[:MAX_ATTEMPTS]]
        return [select(d, ATTEMPT_FIELDS) for d in found if d is not None]

    def count(self, state: str) -> int:
        return sum(1 for d in self._documents() if d.get("state") == state)

    def rows(self, request_ids: Sequence[str]) -> list[dict[str, Any]]:
        by_id = {d.get("requestId"): d for d in self._documents()}
        return [select(by_id[rid], LIST_FIELDS) for rid in request_ids if rid in by_id]

    def tally(self) -> Tally | None:
        self._documents()
        with self.database.lock:
            return tallies.decode(copy.deepcopy(self.database.watch_tally))

    def ended_since(self, since: datetime, limit: int) -> list[dict[str, Any]]:
        ended = [d for d in self._documents() if _at_or_after(d.get("endedAt"), since)]
        ended.sort(key=lambda d: d["endedAt"], reverse=True)
        return [select(d, TOTAL_FIELDS) for d in ended[:limit]]

    def deployments(self, listing: Listing) -> Page:
        self._documents()
        with self.deployment_store._lock:
            documents = list(self.deployment_store.records.values())
        return _newest_first(documents, listing, DEPLOYMENT_LIST_FIELDS)

    def deployment(self, request_id: str) -> dict[str, Any] | None:
        self._documents()
        found = self.deployment_store.records.get(request_id)
        return select(found, DEPLOYMENT_FIELDS) if found is not None else None

    def admission_summary(self) -> dict[str, Any] | None:
        self._documents()
        with self.database.lock:
            found = self.database.admission_summary
            return copy.deepcopy(found) if found is not None else None


def _at_or_after(value: Any, since: datetime) -> bool:
    return isinstance(value, datetime) and value >= since


def key_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """A created job's labels without ``flexjobs-claim``, which must be a claim's token (32
    hex digits, the token of the delivery whose create made it)."""
    rest = dict(labels)
    token = rest.pop(LABEL_CLAIM, "")
    assert re.fullmatch(r"[0-9a-f]{32}", token), f"flexjobs-claim label {token!r}"
    return rest
