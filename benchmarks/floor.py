"""Intake CPU against the client-library floor (issue 26's third scenario), for ``./dev bench
scale``.

What Cloud Functions bills, and what flexjobs controls, is the function's own CPU per request.
Its floor is the cheapest way to make the same calls: a *floor* handler, in the same process,
on the very same client objects (the Firestore client, the ``aiplatform_v1`` JobServiceClient
built by the product's channel setup, the Pub/Sub publisher), makes exactly the RPCs the real
handler makes for one request, in the same order and with the same payloads, and nothing
else: no envelope, no parsing, no validation, no policy, no logging. Its payloads are the
product's own, captured from one real request of the same shape (the Python values handed
to the Firestore client, the CustomJob and the published bytes) and replayed on other
documents; the only work per request is putting the created job's name where the product
put it. Before the timed rounds, a few requests of each side run on counting channels, and
their RPCs per request (method by method) must be the same: the benchmark stops otherwise.

Two paths, each with its own floor:

- **Fresh request**: the CloudEvent of a new request through ``handle_job_request``
  (functions/main.py, with the production wiring) against its RPCs: the claim's read, the
  claim's create, CreateCustomJob, the recording commit. The issue names three RPCs (the
  read is the product's choice, so that a duplicate delivery costs one read): a second floor
  without it is measured too, and both ratios are printed.
- **Hint path**: a preemption's hint through ``handle_job_event`` (backoff 0, as
  benchmarks/economy.py's scenario: the hint settles the record and creates the next attempt)
  against its RPCs: the query by job id, the read lease's commit, GetCustomJob, the
  settlement's commit, the notification's publish, the outbox's commit, the retry's claim,
  the previous attempt's read and its update, CreateCustomJob, the recording commit.

Each round runs every side over the same number of requests from 8 threads, one after the
other (their order alternating from round to round, so that drift on the shared machine
falls on both alike), and takes this process's CPU time (``time.process_time``: every
thread of this process, gRPC's included; the emulators are other processes). The figures
are each side's min and median CPU per request over the rounds, and the ratio of the
medians, against its target.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc

FRESH_TARGET = 1.3
HINT_TARGET = 1.5
THREADS = 8
REPO = Path(__file__).resolve().parent.parent


# --- pure helpers (tests/unit/test_scale_cpu.py) ---------------------------------------------


@dataclasses.dataclass(frozen=True)
class Sides:
    """CPU milliseconds per request of each side, one value per round."""

    floor: tuple[float, ...]
    real: tuple[float, ...]

    @property
    def ratio(self) -> float:
        """The real handler's median over the floor's: the figure held to the target."""
        return statistics.median(self.real) / statistics.median(self.floor)

    @property
    def round_ratios(self) -> tuple[float, ...]:
        """Each round's ratio (its two batches ran back to back)."""
        return tuple(r / f for r, f in zip(self.real, self.floor, strict=True))


def spread(values: Iterable[float]) -> str:
    """``min / median`` of some figures, in milliseconds.

    >>> spread([3.0, 1.0, 2.0])
    '1.000 / 2.000'
    """
    ordered = sorted(values)
    return f"{ordered[0]:.3f} / {statistics.median(ordered):.3f}"


def job_keys(data: Mapping[str, Any], name: str) -> dict[str, str]:
    """The top-level keys of a captured write whose value names the job ``name``: its full
    name (``name``), its id (``id``) or a list of ids ending with it (``ids``).

    >>> job_keys({"vertexJob": "p/customJobs/7", "vertexJobId": "7", "vertexJobIds": ["7"],
    ...           "state": "QUEUED"}, "p/customJobs/7")
    {'vertexJob': 'name', 'vertexJobId': 'id', 'vertexJobIds': 'ids'}
    """
    job_id = name.rsplit("/", 1)[-1]
    keys: dict[str, str] = {}
    for key, value in data.items():
        if value == name:
            keys[key] = "name"
        elif value == job_id:
            keys[key] = "id"
        elif isinstance(value, list) and value and value[-1] == job_id:
            keys[key] = "ids"
    return keys


def with_job(data: Mapping[str, Any], keys: Mapping[str, str], name: str) -> dict[str, Any]:
    """``data`` naming the job ``name`` where the captured write named its own.

    >>> with_job({"vertexJob": "a/1", "vertexJobIds": ["0", "1"], "x": 1},
    ...          {"vertexJob": "name", "vertexJobIds": "ids"}, "a/2")
    {'vertexJob': 'a/2', 'vertexJobIds': ['0', '2'], 'x': 1}
    """
    out = dict(data)
    job_id = name.rsplit("/", 1)[-1]
    for key, kind in keys.items():
        if kind == "name":
            out[key] = name
        elif kind == "id":
            out[key] = job_id
        else:
            out[key] = [*data[key][:-1], job_id]
    return out


def collapsed(text: str) -> Counter[str]:
    """py-spy's raw (collapsed) output: each stack, root first and ``;``-separated, with its
    sample count.

    >>> collapsed("a (x.py:1);b (y.py:2) 3\\na (x.py:1) 1\\n")
    Counter({'a (x.py:1);b (y.py:2)': 3, 'a (x.py:1)': 1})
    """
    stacks: Counter[str] = Counter()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks[stack] += int(count)
    return stacks


def function_of(frame: str) -> str:
    """A frame's function and file, without the line: ``read_message (shared/x.py)``.

    >>> function_of(f"read_message ({REPO}/shared/domain/request/reading.py:123)")
    'read_message (shared/domain/request/reading.py)'
    >>> function_of("dumps (json/__init__.py:231)")
    'dumps (json/__init__.py)'
    """
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rpartition(":")[0] or where.rstrip(")")
    for marker in ("/site-packages/", f"{REPO}/", "/lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{name} ({path})"


def inclusive(stacks: Mapping[str, int]) -> Counter[str]:
    """Samples per function, each counted once per stack it appears in (its own time and
    its callees')."""
    totals: Counter[str] = Counter()
    for stack, count in stacks.items():
        for function in dict.fromkeys(function_of(f) for f in stack.split(";")):
            totals[function] += count
    return totals


def exclusive(stacks: Mapping[str, int]) -> Counter[str]:
    """Samples per function where it was the innermost frame (its own time)."""
    totals: Counter[str] = Counter()
    for stack, count in stacks.items():
        totals[function_of(stack.rsplit(";", 1)[-1])] += count
    return totals


# --- the clients both sides share, and the product wired on them ----------------------------


class Wire(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
):
    """Counts RPCs and their request bytes by method, and keeps each method's last request
    (the capture's CreateCustomJob and Publish payloads)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()
        self.last: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _seen(self, details: Any, request: Any) -> None:
        method = str(details.method).rsplit("/", 1)[-1]
        pb = request if hasattr(request, "ByteSize") else type(request).pb(request)
        with self._lock:
            self.calls[method] += 1
            self.bytes[method] += pb.ByteSize()
            self.last[method] = request

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        self._seen(details, request)
        return continuation(details, request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        self._seen(details, request)
        return continuation(details, request)

    def take(self) -> tuple[Counter[str], Counter[str]]:
        with self._lock:
            taken = (self.calls, self.bytes)
            self.calls, self.bytes = Counter(), Counter()
        return taken


@dataclasses.dataclass(frozen=True)
class Write:
    """One write of a captured commit, on a path relative to the request's record."""

    kind: str  # create, set or update
    path: str  # "" for the record, "attempts/1" for an attempt document
    data: dict[str, Any]
    merge: bool = False
    conditional: bool = False  # an update with the record's last update time as precondition


def _keep_sentinels(data: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy that keeps Firestore's sentinels (DELETE_FIELD is compared by identity)."""
    from google.cloud import firestore

    memo = {id(s): s for s in (firestore.DELETE_FIELD, firestore.SERVER_TIMESTAMP)}
    return copy.deepcopy(dict(data), memo)


def firestore_client(project: str, wire: Wire | None, capture: bool) -> Any:
    """The product's Firestore client class; with ``wire``, its channel counted; with
    ``capture``, each committed batch's writes kept in ``client.commits``."""
    from google.cloud import firestore
    from google.cloud.firestore_v1.batch import WriteBatch

    class Capturing(WriteBatch):
        def __init__(self, client: Any) -> None:
            super().__init__(client)
            self.kept: list[Write] = []

        def create(self, reference: Any, document_data: Any) -> Any:
            self.kept.append(Write("create", reference.path, _keep_sentinels(document_data)))
            return super().create(reference, document_data)

        def set(self, reference: Any, document_data: Any, merge: Any = False) -> Any:
            data = _keep_sentinels(document_data)
            self.kept.append(Write("set", reference.path, data, merge=bool(merge)))
            return super().set(reference, document_data, merge=merge)

        def update(self, reference: Any, field_updates: Any, option: Any = None) -> Any:
            data = _keep_sentinels(field_updates)
            self.kept.append(Write("update", reference.path, data, conditional=option is not None))
            return super().update(reference, field_updates, option=option)

        def commit(self, *args: Any, **kwargs: Any) -> Any:
            self._client.commits.append(tuple(self.kept))
            return super().commit(*args, **kwargs)

    class Client(firestore.Client):
        commits: list[tuple[Write, ...]]

        def _emulator_channel(self, transport: Any) -> Any:
            # google-cloud-firestore leaves BaseClient._emulator_channel unannotated.
            channel = super()._emulator_channel(transport)  # type: ignore[no-untyped-call]
            return channel if wire is None else grpc.intercept_channel(channel, wire)

        def batch(self) -> Any:
            return Capturing(self) if capture else super().batch()

    client = Client(project=project)
    client.commits = []
    return client


def job_client(settings: Any, wire: Wire | None) -> Any:
    """The JobServiceClient of the product's channel setup (``build_gapic_client``'s local
    branch), its channel counted with ``wire``."""
    from shared.adapters.vertex.jobs import JOB_SERVICE, build_gapic_client

    if wire is None:
        return build_gapic_client(settings, JOB_SERVICE, settings.location)
    from google.cloud import aiplatform_v1
    from google.cloud.aiplatform_v1.services.job_service.transports.grpc import (
        JobServiceGrpcTransport,
    )

    channel = grpc.intercept_channel(grpc.insecure_channel(str(settings.vertex_endpoint)), wire)
    return aiplatform_v1.JobServiceClient(transport=JobServiceGrpcTransport(channel=channel))


def publisher_client(wire: Wire | None) -> Any:
    """The product's publisher (``PubsubNotifier``'s ``PublisherClient()``), its channel
    counted with ``wire``."""
    from google.cloud.pubsub_v1 import PublisherClient
    from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

    if wire is None:
        return PublisherClient()
    host = os.environ["PUBSUB_EMULATOR_HOST"]
    channel = grpc.intercept_channel(grpc.insecure_channel(host), wire)
    return PublisherClient(transport=PublisherGrpcTransport(channel=channel))


@dataclasses.dataclass
class Clients:
    """The client objects the product and its floor share, and the product wired on them."""

    settings: Any
    db: Any
    vertex: Any
    publisher: Any
    intake: Any
    tracker: Any

    def jobs(self) -> Any:
        return self.db.collection("jobs")


def wired(wire: Wire | None = None, capture: bool = False) -> Clients:
    """The production wiring (``build_intake``, ``build_tracker``) on clients this module
    built, so the floor can use the very same objects. Backoff 0: a preemption's hint
    creates the next attempt (benchmarks/economy.py's scenario)."""
    from shared.adapters.firestore.database import Firestore
    from shared.adapters.pubsub import PubsubNotifier
    from shared.adapters.vertex.jobs import JOB_SERVICE, VertexJobBackend
    from shared.bootstrap import Ports, build_intake, build_tracker
    from shared.kernel.config import Settings

    settings = dataclasses.replace(Settings.from_env(), backoff_base_seconds=0.0)
    db = firestore_client(settings.project, wire, capture)
    vertex = job_client(settings, wire)
    publisher = publisher_client(wire)

    def factory(service: str, location: str) -> Any:
        # Custom jobs only: any other service is a wiring mistake here.
        assert (service, location) == (JOB_SERVICE, settings.location), (service, location)
        return vertex

    ports = Ports(
        firestore=Firestore(settings, client=db),
        job_backend=VertexJobBackend(settings, client_factory=factory),
        notifier=PubsubNotifier(settings, client=publisher),
    )
    intake = build_intake(settings, ports=ports)
    tracker = build_tracker(settings, ports=ports)
    return Clients(settings, db, vertex, publisher, intake, tracker)


# --- the requests, as the functions receive them --------------------------------------------


def cloud_event(data: bytes, message_id: str) -> Any:
    """A Pub/Sub push as functions-framework hands it to a handler (a cloudevents v1
    ``CloudEvent``)."""
    import base64

    from cloudevents.http import CloudEvent

    stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    attributes = {
        "type": "google.cloud.pubsub.topic.v1.messagePublished",
        "source": "//pubsub.googleapis.com/projects/flexjobs-local/topics/t",
        "id": message_id,
    }
    message = {
        "data": base64.b64encode(data).decode(),
        "messageId": message_id,
        "publishTime": stamp,
        "attributes": {},
    }
    return CloudEvent(attributes, {"message": message, "subscription": "s"})


def request_ids(tag: str, count: int) -> list[str]:
    """Request ids of one batch, all of one length (so every side's payloads and document
    paths are as long as the captured ones): ``tag`` is 3 characters.

    >>> request_ids("01a", 2)
    ['cpu-01a-000000', 'cpu-01a-000001']
    """
    assert len(tag) == 3, tag
    return [f"cpu-{tag}-{i:06d}" for i in range(count)]


def fresh_body(request_id: str) -> dict[str, Any]:
    """The seed example (a FLEX_START custom job on one A100), under ``request_id``."""
    from tests.events import load

    body: dict[str, Any] = copy.deepcopy(load("seed_request"))
    body["requestId"] = request_id
    body["customJob"]["displayName"] = request_id
    return body


def functions_main() -> Any:
    """functions/main.py, the module the functions deploy (its handlers, decorated)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("flexjobs_main", REPO / "functions" / "main.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def quiet_logs() -> Any:
    """The functions' logging, configured as in production, written to /dev/null: each line
    is still formatted (that is the function's work), just not read."""
    import logging

    from shared.kernel.logs import configure

    configure()
    sink = open(os.devnull, "w")  # noqa: SIM115 - open for the whole run
    for handler in logging.getLogger("flexjobs").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sink)
    return sink


# --- fresh requests --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FreshCapture:
    """One real fresh request's payloads: the record created, CreateCustomJob's CustomJob, the
    recording commit's writes, and where those name the created job."""

    record: dict[str, Any]
    job: Any
    recording: tuple[Write, ...]
    keys: tuple[dict[str, str], ...]


def capture_fresh(main: Any, request_id: str) -> FreshCapture:
    """Run one real fresh request on capturing clients; its payloads."""
    from shared import bootstrap
    from shared.domain.model.ids import doc_id

    wire = Wire()
    clients = wired(wire, capture=True)
    bootstrap.override(clients.intake)
    try:
        main.handle_job_request(cloud_event(json.dumps(fresh_body(request_id)).encode(), "m-0"))
    finally:
        bootstrap.override(None)
    create, recording = clients.db.commits
    record_path = f"jobs/{doc_id(request_id)}"
    assert [(w.kind, w.path) for w in create] == [("create", record_path)], create
    assert [(w.kind, w.conditional, w.merge) for w in recording] == [
        ("update", True, False),
        ("set", False, True),
    ], recording
    made = wire.last["CreateCustomJob"]
    name = _created_name(clients, request_id)
    writes = tuple(dataclasses.replace(w, path=w.path.removeprefix(record_path)) for w in recording)
    return FreshCapture(
        record=create[0].data,
        job=made.custom_job,
        recording=writes,
        keys=tuple(job_keys(w.data, name) for w in writes),
    )


def _created_name(clients: Clients, request_id: str) -> str:
    from shared.domain.model.ids import doc_id

    snap = clients.jobs().document(doc_id(request_id)).get()
    return str(snap.get("vertexJob"))


class FreshFloor:
    """The RPCs of one fresh request, made with the captured payloads, and nothing else."""

    def __init__(self, clients: Clients, captured: FreshCapture, read: bool = True) -> None:
        self.db, self.vertex = clients.db, clients.vertex
        self.jobs = clients.jobs()
        self.parent = f"projects/{clients.settings.project}/locations/{clients.settings.location}"
        self.timeout = clients.settings.call_timeout_seconds
        self.captured = captured
        self.read = read

    def __call__(self, doc: str) -> None:
        captured = self.captured
        ref = self.jobs.document(doc)
        if self.read:
            ref.get()  # the claim's read
        made = ref.create(captured.record)  # the claim: a conditional put
        job = self.vertex.create_custom_job(
            parent=self.parent, custom_job=captured.job, retry=None, timeout=self.timeout
        )
        batch = self.db.batch()
        unchanged = self.db.write_option(last_update_time=made.update_time)
        for write, keys in zip(captured.recording, captured.keys, strict=True):
            data = with_job(write.data, keys, job.name) if keys else write.data
            if write.kind == "update":
                batch.update(ref, data, option=unchanged)
            else:
                batch.set(_at(ref, write.path), data, merge=write.merge)
        batch.commit()


def _at(ref: Any, path: str) -> Any:
    """The document at ``path`` (``/attempts/1``) under the record ``ref``."""
    if not path:
        return ref
    collection, document = path.lstrip("/").split("/")
    return ref.collection(collection).document(document)


# --- the hint path ---------------------------------------------------------------------------


def hint_body(request_id: str) -> dict[str, Any]:
    """A Spot custom job that runs until preempted, with retries (benchmarks/recovery.py)."""
    from benchmarks.recovery import spot_request

    return spot_request(request_id)


@dataclasses.dataclass(frozen=True)
class Seeded:
    """Records following RUNNING jobs, then preempted: each job's name and record's id."""

    names: tuple[str, ...]
    docs: tuple[str, ...]


def seed_preempted(clients: Clients, sim: Any, ids: list[str]) -> Seeded:
    """One RUNNING Spot job per request, recorded as the lifecycle records it (the domain's
    ``new_record``, ``submission_change``, ``observe``), then preempted in the simulator."""
    from shared.adapters.vertex.jobs import VertexJobBackend
    from shared.domain.decisions.jobs import observe
    from shared.domain.decisions.submissions import Submission, new_record, submission_change
    from shared.domain.model.ids import doc_id, labels_for
    from shared.domain.model.records import JobRecord
    from shared.domain.request.message import parse_request

    settings = clients.settings
    location = settings.location
    # The seeding's own clients (its listing reads every training kind's service).
    backend = VertexJobBackend(settings)

    def create(request_id: str) -> tuple[Any, Any, datetime]:
        request = parse_request(hint_body(request_id), {}, f"m-{request_id}")
        created = datetime.now(UTC)
        return request, backend.create(request, labels_for(request_id, 1), location), created

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        made = list(pool.map(create, ids))
    names = [job.name for _, job, _ in made]
    running = _wait_listed(backend, location, set(names), "JOB_STATE_RUNNING")
    batch, pending = clients.db.batch(), 0
    for request, job, created in made:
        record = new_record(request, location, created)
        sub = Submission(request.request_id, 1, job, request.strategy, location)
        change = submission_change(JobRecord.decode(record), sub, created)
        record.update(change.record)
        for name in change.deletes:
            record.pop(name, None)
        attempt = dict(change.attempt)
        ran = observe(JobRecord.decode(record), running[job.name], datetime.now(UTC))
        if ran is not None:
            record.update(ran.record)
            attempt.update(ran.attempt)
        ref = clients.jobs().document(doc_id(request.request_id))
        batch.set(ref, record)
        batch.set(ref.collection("attempts").document("1"), attempt)
        pending += 2
        if pending >= 400:
            batch.commit()
            batch, pending = clients.db.batch(), 0
    if pending:
        batch.commit()
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        list(pool.map(sim.preempt, names))
    _wait_listed(backend, location, set(names), "JOB_STATE_FAILED")
    return Seeded(tuple(names), tuple(doc_id(r) for r in ids))


def _wait_listed(backend: Any, location: str, names: set[str], state: str) -> dict[str, Any]:
    """Every job of ``names`` as the paged listing shows it, once all are in ``state``."""
    deadline = time.monotonic() + 300
    while True:
        listed = {j.name: j for j in backend.list_labelled(location) if j.name in names}
        if sum(j.state == state for j in listed.values()) == len(names):
            return listed
        if time.monotonic() > deadline:
            raise TimeoutError(f"not every one of {len(names)} jobs is {state} after 300 s")
        time.sleep(0.5)


def hint_event(name: str) -> Any:
    """A hint naming the job (the ``{"jobName": ...}`` shape), as delivered."""
    return cloud_event(json.dumps({"jobName": name}).encode(), f"h-{uuid.uuid4().hex[:12]}")


#: The hint path's commits as the product makes them (benchmarks/economy.py counts them):
#: (kind, conditional, merge, path) of each write, commit by commit.
HINT_COMMITS = (
    (("update", True, False, ""),),  # the read lease
    (("update", True, False, ""), ("set", False, True, "/attempts/1")),  # the settlement
    (("update", True, False, ""),),  # the published notification leaves the outbox
    (("update", True, False, ""),),  # the retry's claim
    (("set", False, True, "/attempts/1"),),  # the work attempt 1 lost
    (("update", True, False, ""), ("set", False, True, "/attempts/2")),  # attempt 2 recorded
)


@dataclasses.dataclass(frozen=True)
class HintCapture:
    """One real hint's payloads: each commit's writes (with where they name the created job),
    the published notification, and CreateCustomJob's CustomJob."""

    commits: tuple[tuple[Write, ...], ...]
    keys: tuple[tuple[dict[str, str], ...], ...]
    topic: str
    data: bytes
    attributes: dict[str, str]
    job: Any


def capture_hint(main: Any, sim: Any, request_id: str) -> HintCapture:
    """Run one real preemption hint on capturing clients; its payloads."""
    from shared import bootstrap

    wire = Wire()
    clients = wired(wire, capture=True)
    seeded = seed_preempted(clients, sim, [request_id])
    clients.db.commits.clear()  # the seeding's
    bootstrap.override_tracker(clients.tracker)
    try:
        main.handle_job_event(hint_event(seeded.names[0]))
    finally:
        bootstrap.override_tracker(None)
    prefix = f"jobs/{seeded.docs[0]}"
    commits = tuple(
        tuple(dataclasses.replace(w, path=w.path.removeprefix(prefix)) for w in commit)
        for commit in clients.db.commits
    )
    shape = tuple(tuple((w.kind, w.conditional, w.merge, w.path) for w in c) for c in commits)
    assert shape == HINT_COMMITS, shape
    published = wire.last["Publish"]
    (message,) = published.messages
    created = wire.last["CreateCustomJob"].custom_job
    name = str(clients.jobs().document(seeded.docs[0]).get().get("vertexJob"))
    return HintCapture(
        commits=commits,
        keys=tuple(tuple(job_keys(w.data, name) for w in c) for c in commits),
        topic=published.topic,
        data=bytes(message.data),
        attributes=dict(message.attributes),
        job=created,
    )


class HintFloor:
    """The RPCs of one preemption hint, made with the captured payloads, and nothing else."""

    def __init__(self, clients: Clients, captured: HintCapture) -> None:
        from google.cloud.firestore_v1.base_query import FieldFilter

        self.db, self.vertex, self.publisher = clients.db, clients.vertex, clients.publisher
        self.jobs = clients.jobs()
        self.filter = FieldFilter
        self.parent = f"projects/{clients.settings.project}/locations/{clients.settings.location}"
        self.timeout = clients.settings.call_timeout_seconds
        self.captured = captured

    def _commit(self, ref: Any, n: int, version: Any, job: str | None = None) -> Any:
        batch = self.db.batch()
        for write, keys in zip(self.captured.commits[n], self.captured.keys[n], strict=True):
            data = with_job(write.data, keys, job) if keys and job else write.data
            if write.conditional:
                option = self.db.write_option(last_update_time=version)
                batch.update(_at(ref, write.path), data, option=option)
            else:
                batch.set(_at(ref, write.path), data, merge=write.merge)
        return batch.commit()[0].update_time

    def __call__(self, job: str) -> None:
        job_id = job.rsplit("/", 1)[-1]
        query = self.jobs.where(filter=self.filter("vertexJobIds", "array_contains", job_id))
        (snap,) = list(query.limit(1).stream())  # the record, by its job id
        ref = snap.reference
        leased = self._commit(ref, 0, snap.update_time)
        self.vertex.get_custom_job(name=job, retry=None, timeout=self.timeout)
        settled = self._commit(ref, 1, leased)
        captured = self.captured
        self.publisher.publish(captured.topic, captured.data, **captured.attributes).result(
            timeout=self.timeout
        )
        sent = self._commit(ref, 2, settled)
        claimed = self._commit(ref, 3, sent)
        ref.collection("attempts").document("1").get()
        self._commit(ref, 4, None)
        made = self.vertex.create_custom_job(
            parent=self.parent, custom_job=captured.job, retry=None, timeout=self.timeout
        )
        self._commit(ref, 5, claimed, made.name)


# --- running the sides -----------------------------------------------------------------------


def cpu_ms(step: Callable[[Any], None], items: list[Any]) -> float:
    """This process's CPU milliseconds per item, ``step`` run over ``items`` from 8 threads."""
    gc.collect()
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        cpu0 = time.process_time()
        list(pool.map(step, items))
        cpu = time.process_time() - cpu0
    return cpu * 1000 / len(items)


#: The client-library methods a fresh request's two sides both call, by (module, class,
#: method): :class:`LibraryClock` adds up the thread CPU spent inside them.
LIBRARY_METHODS = (
    ("google.cloud.firestore_v1.document", "DocumentReference", "get"),
    ("google.cloud.firestore_v1.document", "DocumentReference", "create"),
    ("google.cloud.firestore_v1.collection", "CollectionReference", "document"),
    ("google.cloud.firestore_v1.base_batch", "BaseBatch", "create"),
    ("google.cloud.firestore_v1.base_batch", "BaseBatch", "set"),
    ("google.cloud.firestore_v1.base_batch", "BaseBatch", "update"),
    ("google.cloud.firestore_v1.batch", "WriteBatch", "commit"),
    ("google.cloud.aiplatform_v1", "JobServiceClient", "create_custom_job"),
)


@dataclasses.dataclass(frozen=True)
class Split:
    """One batch of one side, from one thread: its thread CPU ms per request, in all and
    inside the client-library methods both sides call."""

    total: float
    inside: float

    @property
    def outside(self) -> float:
        """The side's own work: everything but the library calls."""
        return self.total - self.inside


def median_split(found: Iterable[Split]) -> Split:
    """The median CPU in all and the median inside the library calls of some rounds.

    >>> median_split([Split(3.0, 2.0), Split(5.0, 4.5), Split(4.0, 3.0)])
    Split(total=4.0, inside=3.0)
    """
    kept = list(found)
    return Split(
        statistics.median(s.total for s in kept), statistics.median(s.inside for s in kept)
    )


def own_work_budget(floor: Split, real: Split, target: float) -> float:
    """The most the real handler's own work may cost (ms per request) for ``real`` to stay
    within ``target`` times ``floor``, its library calls as they are.

    >>> round(own_work_budget(Split(3.5, 3.4), Split(5.0, 3.4), 1.3), 3)
    1.15
    """
    return target * floor.total - real.inside


class LibraryClock:
    """Adds up the calling thread's CPU (``clock``: ``time.thread_time``) inside the wrapped
    methods: the outermost call only, so a method calling another is counted once.
    :meth:`installed` wraps them on their classes, for every caller, and puts them back
    after. One thread at a time: :attr:`spent` is a plain sum."""

    def __init__(self, clock: Callable[[], float] = time.thread_time) -> None:
        self.spent = 0.0
        self._clock = clock
        self._depth = threading.local()

    def wrapped(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._depth, "n", 0)
            self._depth.n = depth + 1
            start = self._clock() if depth == 0 else 0.0
            try:
                return method(*args, **kwargs)
            finally:
                self._depth.n = depth
                if depth == 0:
                    self.spent += self._clock() - start

        return timed

    @contextlib.contextmanager
    def installed(self, methods: Iterable[tuple[Any, str]]) -> Any:
        originals = [(cls, name, cls.__dict__[name]) for cls, name in methods]
        try:
            for cls, name, method in originals:
                setattr(cls, name, self.wrapped(method))
            yield self
        finally:
            for cls, name, method in originals:
                setattr(cls, name, method)


def library_classes() -> list[tuple[Any, str]]:
    """:data:`LIBRARY_METHODS`, imported."""
    import importlib

    return [
        (getattr(importlib.import_module(module), cls), name)
        for module, cls, name in LIBRARY_METHODS
    ]


class Profiler:
    """py-spy, attached to this process while a batch runs; ``--gil`` samples only the thread
    holding the GIL, so the waits on the emulators are left out. Absent py-spy, nothing."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.spy = Path(sys.executable).with_name("py-spy")

    def run(self, name: str, batch: Callable[[], Any]) -> Counter[str] | None:
        if self.folder is None or not self.spy.exists():
            batch()
            return None
        self.folder.mkdir(parents=True, exist_ok=True)
        out = self.folder / f"{name}.txt"
        spy = subprocess.Popen(
            [str(self.spy), "record", "--pid", str(os.getpid()), "--rate", "1000", "--gil",
             "--format", "raw", "--output", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            time.sleep(1.0)  # attached
            batch()
        finally:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
        return collapsed(out.read_text()) if out.exists() else None


#: The client-library calls the floor makes too, by their frame in a py-spy stack: a sample
#: under one of them is the RPC's own cost, on either side.
LIBRARY_CALLS = (
    "DocumentReference.get ",
    "DocumentReference.create ",
    "DocumentReference.set ",
    "BaseBatch.update ",
    "BaseBatch.set ",
    "BaseBatch.create ",
    "WriteBatch.commit ",
    "Query.stream ",
    "StreamGenerator.__next__ ",  # a query's stream is read as it is iterated
    "JobServiceClient.create_custom_job ",
    "JobServiceClient.get_custom_job ",
    "Client.publish ",
    "Future.result ",
)


#: The floor handlers' own frames (their side of the profile's split).
FLOORS = ("FreshFloor.", "HintFloor.")
#: Samples in no handler: the benchmark's pool handing out work, gRPC's and Pub/Sub's threads.
NOT_A_HANDLER = "(in no handler: the thread pool, gRPC's and the publisher's threads)"


def outside_library(stacks: Mapping[str, int]) -> tuple[int, Counter[str]]:
    """The samples inside a client-library call the floor also makes, and the others by the
    innermost flexjobs frame above them (what the handler does besides its RPCs)."""
    inside = 0
    rest: Counter[str] = Counter()
    for stack, count in stacks.items():
        frames = stack.split(";")
        if any(frame.startswith(LIBRARY_CALLS) for frame in frames):
            inside += count
            continue
        ours = [f for f in frames if " (shared/" in f or " (main.py" in f or f.startswith(FLOORS)]
        rest[function_of(ours[-1]) if ours else NOT_A_HANDLER] += count
    return inside, rest


def print_profile(label: str, stacks: Counter[str] | None, top: int = 18) -> None:
    if stacks is None:
        return
    total = sum(stacks.values())
    inside, rest = outside_library(stacks)
    print(
        f"  profile, {label}: {total} samples (py-spy --gil, 1,000 Hz); in the client-library "
        f"calls the floor makes too {inside * 100 / total:.1f}%, the rest "
        f"{(total - inside) * 100 / total:.1f}%:"
    )
    for name, n in rest.most_common(top):
        print(f"      {n * 100 / total:5.1f}%  {name}")
    print("    innermost frames (own time):")
    for name, n in exclusive(stacks).most_common(top // 2):
        print(f"      {n * 100 / total:5.1f}%  {name}")


@dataclasses.dataclass
class CpuResult:
    fresh: Sides
    fresh_no_read: Sides
    hint: Sides
    requests: int
    hint_requests: int
    fresh_rpcs: str
    hint_rpcs: str
    split: dict[str, list[Split]] | None = None


def same_rpcs(label: str, floor: tuple[Counter[str], Counter[str]],
              real: tuple[Counter[str], Counter[str]], n: int) -> str:  # fmt: skip
    """Check both sides made the same RPCs; a line saying which, with bytes per request."""
    if floor[0] != real[0]:
        raise AssertionError(f"{label}: the floor made {dict(floor[0])}, the real {dict(real[0])}")
    calls = ", ".join(f"{m} {c / n:g}" for m, c in sorted(real[0].items()))
    return (
        f"{label}, RPCs per request on both sides: {calls}; request bytes per request: "
        f"floor {sum(floor[1].values()) / n:,.0f}, real {sum(real[1].values()) / n:,.0f}"
    )


def verify(main: Any, sim: Any, fresh: FreshCapture, hint: HintCapture, n: int = 4) -> list[str]:
    """A few requests of each side on counting channels: the same RPCs, or stop."""
    from shared import bootstrap

    wire = Wire()
    clients = wired(wire)
    floor = FreshFloor(clients, fresh)
    for request_id in request_ids("vfa", n):
        floor(request_id)
    floor_counts = wire.take()
    bootstrap.override(clients.intake)
    try:
        for request_id in request_ids("vfc", n):
            main.handle_job_request(fresh_event(request_id))
    finally:
        bootstrap.override(None)
    lines = [same_rpcs("fresh request", floor_counts, wire.take(), n)]
    seeded = seed_preempted(clients, sim, request_ids("vh0", 2 * n))
    wire.take()
    hint_floor = HintFloor(clients, hint)
    for name in seeded.names[:n]:
        hint_floor(name)
    floor_counts = wire.take()
    bootstrap.override_tracker(clients.tracker)
    try:
        for name in seeded.names[n:]:
            main.handle_job_event(hint_event(name))
    finally:
        bootstrap.override_tracker(None)
    lines.append(same_rpcs("hint path", floor_counts, wire.take(), n))
    return lines


def rounds_of(
    run: Callable[[int, str], dict[str, float]], rounds: int, sides: tuple[str, ...]
) -> dict[str, list[float]]:
    """``rounds`` rounds of every side, their order turning round by round."""
    results: dict[str, list[float]] = {side: [] for side in sides}
    for r in range(rounds):
        order = sides[r % len(sides) :] + sides[: r % len(sides)]
        figures: dict[str, float] = {}
        for side in order:
            figures.update(run(r, side))
        for side in sides:
            results[side].append(figures[side])
        print(
            f"  round {r + 1}: " + ", ".join(f"{s} {figures[s]:.3f} ms" for s in sides),
            flush=True,
        )
    return results


def fresh_event(request_id: str) -> Any:
    return cloud_event(json.dumps(fresh_body(request_id)).encode(), f"m-{request_id}")


#: Each side's letter in its request ids.
SIDE_CODES = {"floor": "a", "floor without the read": "b", "real": "c"}
WARM_UP = 200
#: Hints a side on one seeding: the Firestore emulator scans its documents for each query
#: (the record by its job id), so a round's 4,000 records at once would make it the
#: bottleneck of the whole machine (its wall time, not this process's CPU).
HINT_CHUNK = 250


class Bench:
    """The sides on one wiring: the real handlers (functions/main.py, production wiring) and
    their floors, all on the same client objects."""

    def __init__(self, main: Any, clients: Clients, fresh: FreshCapture, hint: HintCapture):
        self.main, self.clients = main, clients
        self.fresh_floors = {
            "floor": FreshFloor(clients, fresh),
            "floor without the read": FreshFloor(clients, fresh, read=False),
        }
        self.hint_floor = HintFloor(clients, hint)

    def fresh(self, tag: str, side: str, count: int) -> float:
        """One batch of fresh requests; CPU ms per request."""
        ids = request_ids(f"{tag}{SIDE_CODES[side]}", count)
        if side in self.fresh_floors:
            return cpu_ms(self.fresh_floors[side], ids)
        return cpu_ms(self.main.handle_job_request, [fresh_event(i) for i in ids])

    def split(self, tag: str, side: str, count: int, clock: LibraryClock) -> Split:
        """One batch of fresh requests from this thread alone (no pool, no other thread of
        this process's own to wait for): its thread CPU per request, and the part of it
        inside the library methods ``clock`` wraps."""
        ids = request_ids(f"{tag}{SIDE_CODES[side]}", count)
        floor = self.fresh_floors.get(side)
        step = floor if floor is not None else self.main.handle_job_request
        items: list[Any] = ids if floor is not None else [fresh_event(i) for i in ids]
        gc.collect()
        clock.spent = 0.0
        start = time.thread_time()
        for item in items:
            step(item)
        total = time.thread_time() - start
        return Split(total * 1000 / count, clock.spent * 1000 / count)

    def hints(self, side: str, names: list[str]) -> float:
        """One batch of preemption hints, one per job of ``names``; CPU ms per hint."""
        if side == "floor":
            return cpu_ms(self.hint_floor, names)
        return cpu_ms(self.main.handle_job_event, [hint_event(name) for name in names])

    def hint_round(self, stack: Any, r: int, count: int) -> dict[str, float]:
        """``count`` hints a side, in chunks of :data:`HINT_CHUNK` on a database and
        simulator seeded anew for each, the sides alternating; CPU ms per hint of each."""
        cpu = {"floor": 0.0, "real": 0.0}
        done = 0
        while done < count:
            size = min(HINT_CHUNK, count - done)
            seeded = self.seed(stack, f"h{r % 100:02d}", size)
            sides = ("floor", "real") if (r + done // HINT_CHUNK) % 2 == 0 else ("real", "floor")
            for side in sides:
                cpu[side] += self.hints(side, seeded[side]) * size
            done += size
        return {side: total / count for side, total in cpu.items()}

    def seed(self, stack: Any, tag: str, count: int) -> dict[str, list[str]]:
        """A clean database and simulator, and ``count`` preempted jobs a side. Clean,
        because the emulator scans for a query: what earlier rounds left would slow this
        one's (its wall time, not this process's CPU)."""
        stack.reset_firestore()
        stack.simulator.reset()
        made = seed_preempted(self.clients, stack.simulator, request_ids(tag, 2 * count))
        return {"floor": list(made.names[:count]), "real": list(made.names[count:])}


def measure(
    requests: int, hint_requests: int, rounds: int, profile: Path | None, split_rounds: int = 0
) -> CpuResult:
    """Issue 26's third scenario on a stack of its own (see the module docstring);
    ``split_rounds`` rounds of :meth:`Bench.split` after it (none by default)."""
    from flexjobs_local.stack import LocalStack, StackConfig
    from shared import bootstrap

    config = StackConfig(
        functions=(),
        hints=False,  # the benchmark delivers each hint itself, once
        checkpoints=False,
        default_capacity=100_000_000,
        time_factor=60.0,
    )
    with LocalStack(config) as stack, quiet_logs():
        stack.apply_env()
        main = functions_main()
        fresh = capture_fresh(main, request_ids("cap", 1)[0])
        hint = capture_hint(main, stack.simulator, request_ids("hcp", 1)[0])
        checks = verify(main, stack.simulator, fresh, hint)
        for line in checks:
            print(f"  {line}", flush=True)
        bench = Bench(main, wired(), fresh, hint)
        bootstrap.override(bench.clients.intake)
        bootstrap.override_tracker(bench.clients.tracker)
        try:
            # Warm-up, not counted: each side's first calls import modules, build caches and
            # open channels.
            for side in SIDE_CODES:
                bench.fresh("wu", side, WARM_UP)
            warm = bench.seed(stack, "hwu", WARM_UP // 4)
            for side, names in warm.items():
                bench.hints(side, names)
            print(f"  fresh request, {requests} requests a side, {THREADS} threads:", flush=True)
            fresh_rounds = rounds_of(
                lambda r, side: {side: bench.fresh(f"{r:02d}", side, requests)},
                rounds,
                tuple(SIDE_CODES),
            )
            print(f"  hint path, {hint_requests} hints a side, {THREADS} threads:", flush=True)
            hint_rounds: dict[str, list[float]] = {"floor": [], "real": []}
            for r in range(rounds):
                figures = bench.hint_round(stack, r, hint_requests)
                for side, ms in figures.items():
                    hint_rounds[side].append(ms)
                print(
                    f"  round {r + 1}: floor {figures['floor']:.3f} ms, real "
                    f"{figures['real']:.3f} ms",
                    flush=True,
                )
            if profile is not None:
                profiled = profiles(bench, stack, profile, requests, hint_requests)
                for label, found in profiled.items():
                    print_profile(label, found)
            splits = split_rounds_of(bench, split_rounds, requests // 2)
        finally:
            bootstrap.override(None)
            bootstrap.override_tracker(None)
    return CpuResult(
        fresh=Sides(tuple(fresh_rounds["floor"]), tuple(fresh_rounds["real"])),
        fresh_no_read=Sides(
            tuple(fresh_rounds["floor without the read"]), tuple(fresh_rounds["real"])
        ),
        hint=Sides(tuple(hint_rounds["floor"]), tuple(hint_rounds["real"])),
        requests=requests,
        hint_requests=hint_requests,
        fresh_rpcs=checks[0],
        hint_rpcs=checks[1],
        split=splits,
    )


#: One digit of the request ids' tag a round (``s0`` to ``s9``): no id is used twice.
MAX_SPLIT_ROUNDS = 10


def split_rounds_of(bench: Bench, rounds: int, count: int) -> dict[str, list[Split]] | None:
    """``rounds`` rounds of each fresh-request side from one thread, the library methods
    timed (:class:`LibraryClock`), the sides' order alternating; None for no rounds."""
    if rounds <= 0:
        return None
    if rounds > MAX_SPLIT_ROUNDS or count < 1:
        raise ValueError(f"{rounds} rounds of {count}: at most {MAX_SPLIT_ROUNDS}, of 1 or more")
    clock = LibraryClock()
    found: dict[str, list[Split]] = {"floor": [], "real": []}
    print(f"  fresh request from one thread, {count} requests a side:", flush=True)
    with clock.installed(library_classes()):
        for r in range(rounds):
            for side in ("floor", "real") if r % 2 == 0 else ("real", "floor"):
                found[side].append(bench.split(f"s{r}", side, count, clock))
            print(
                f"  round {r + 1}: "
                + ", ".join(
                    f"{side} {s[-1].total:.3f} ms ({s[-1].inside:.3f} in the library calls)"
                    for side, s in found.items()
                ),
                flush=True,
            )
    return found


def print_split(splits: Mapping[str, list[Split]], target: float = FRESH_TARGET) -> None:
    """Each side's thread CPU inside the library calls and outside them (its own work), and
    what the real handler's own work may cost at ``target``."""
    rounds = len(splits["floor"])
    print(
        f"fresh request from one thread, thread CPU ms per request, min / median of {rounds} "
        "rounds (the client-library methods both sides call timed on their own):"
    )
    for side, found in splits.items():
        print(
            f"{side}: in all {spread(s.total for s in found)}, inside the library calls "
            f"{spread(s.inside for s in found)}, its own work {spread(s.outside for s in found)}"
        )
    floor, real = median_split(splits["floor"]), median_split(splits["real"])
    own = {side: statistics.median(s.outside for s in found) for side, found in splits.items()}
    print(
        f"the real handler's own work at {target}x its floor: at most "
        f"{own_work_budget(floor, real, target):.3f} ms a request (from the medians of each "
        f"side's CPU in all and in the library calls); its median own work {own['real']:.3f} "
        f"ms, the floor's {own['floor']:.3f} ms"
    )


def profiles(
    bench: Bench, stack: Any, folder: Path, requests: int, hint_requests: int
) -> dict[str, Counter[str] | None]:
    """One more batch of each side under py-spy (not timed): the collapsed stacks of each."""
    profiler = Profiler(folder)
    found = {
        "fresh request, real": profiler.run(
            "fresh-real", lambda: bench.fresh("pf", "real", requests)
        ),
        "fresh request, floor": profiler.run(
            "fresh-floor", lambda: bench.fresh("pf", "floor", requests)
        ),
    }
    seeded = bench.seed(stack, "hpf", min(hint_requests, 2 * HINT_CHUNK))
    found["hint path, real"] = profiler.run(
        "hint-real", lambda: bench.hints("real", seeded["real"])
    )
    found["hint path, floor"] = profiler.run(
        "hint-floor", lambda: bench.hints("floor", seeded["floor"])
    )
    return found


def print_cpu(result: CpuResult) -> list[bool]:
    """The figures against their targets; the PASS/FAIL of each."""
    checks: list[bool] = []
    rows = (
        ("fresh request", result.fresh, FRESH_TARGET, result.requests),
        ("fresh request, floor without the claim's read", result.fresh_no_read, FRESH_TARGET,
         result.requests),
        ("hint path (preemption -> attempt 2 recorded)", result.hint, HINT_TARGET,
         result.hint_requests),
    )  # fmt: skip
    print(f"CPU per request, ms, min / median of {len(result.fresh.floor)} rounds:")
    for label, sides, target, n in rows:
        ok = sides.ratio <= target
        checks.append(ok)
        ratios = ", ".join(f"{x:.2f}" for x in sides.round_ratios)
        print(
            f"{label}: floor {spread(sides.floor)}, real {spread(sides.real)} ({n} requests a "
            f"side a round, {THREADS} threads); real / floor {sides.ratio:.2f} (rounds: "
            f"{ratios}); target <= {target}x: {'PASS' if ok else 'FAIL'}"
        )
    if result.split is not None:
        print_split(result.split)
    return checks
