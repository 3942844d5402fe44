"""Admission queues end to end on the fakes: intake, hints, ticks and cancels through
functions-framework, with a queue file (``FLEXJOBS_QUEUES``) in the settings.

Two queues of 4 preemptible A100s each in us-central1, under a project quota of 8; every
request asks 4 GPUs (one a2-highgpu-4g). The interleavings that matter are controlled here:
two passes that read the same snapshot, a create that fails after its admission, a cancel
before the create, a ledger that lost or kept an entry it should not have.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from shared import bootstrap
from shared.app.context import Intake, Tracker
from shared.app.services import admission
from shared.bootstrap import Ports
from shared.domain.admission.config import Pool, Resource
from shared.domain.model.states import from_vertex
from shared.kernel.config import Settings
from shared.kernel.errors import BackendUnavailable, QuotaUnreadable
from tests.events import load, pubsub_cloud_event
from tests.fakes import FakeClock, InMemoryQuotaLimits
from tests.functional.conftest import ENV
from tests.functional.test_lifecycle_handlers import end, hint, run, tick

QUEUES = """
projectQuota:
  - {region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, limit: 8}
queues:
  - name: team-a
    weight: 2
    quotas:
      - {region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, nominal: 4}
    priorities: {high: 100, normal: 0}
    defaultPriority: normal
  - name: team-b
    quotas:
      - {region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, nominal: 4}
"""
GPUS_EACH = 4
QUOTA = 8

_ids = itertools.count(1)


@contextlib.contextmanager
def wired(
    ports: Ports, clock: FakeClock, queues: str, *, backoff: str | None = "0"
) -> Iterator[tuple[Intake, Tracker]]:
    """Intake and tracker wired with the queue file ``queues``, on the shared fakes and
    clock; ``backoff``: the retries' backoff base in seconds (None: the product's)."""
    env = {**ENV, "FLEXJOBS_QUEUES": queues}
    intake = bootstrap.build_intake(Settings.from_env(env), ports=ports)
    intake.clock = clock
    tracked = env if backoff is None else {**env, "FLEXJOBS_BACKOFF_BASE_SECONDS": backoff}
    tracker = bootstrap.build_tracker(Settings.from_env(tracked), clock, ports)
    bootstrap.override(intake)
    bootstrap.override_tracker(tracker)
    try:
        yield intake, tracker
    finally:
        bootstrap.override(None)
        bootstrap.override_tracker(None)


@pytest.fixture
def queued(ports: Ports, clock: FakeClock) -> Iterator[tuple[Intake, Tracker]]:
    """Intake and tracker wired with the queue file, on the shared fakes and clock."""
    with wired(ports, clock, QUEUES) as both:
        yield both


def body(request_id: str, queue: str | None = "team-a", **options: Any) -> dict[str, Any]:
    """A FLEX_START request of 4 A100s in ``queue``."""
    request = copy.deepcopy(load("seed_request"))
    request["requestId"] = request_id
    pool = request["customJob"]["jobSpec"]["workerPoolSpecs"][0]
    pool["machineSpec"].update(machineType="a2-highgpu-4g", acceleratorCount=GPUS_EACH)
    if queue is not None:
        request["queue"] = queue
    return {**request, **options}


def publish(post_event, clock, data: dict[str, Any]) -> int:
    clock.advance(1)
    event = pubsub_cloud_event(data, message_id=f"adm-{next(_ids)}")
    return post_event("handle_job_request", event).status_code


def record(tracker: Tracker, request_id: str) -> dict[str, Any]:
    stored = tracker.jobs.job_store.get(request_id)
    assert stored is not None, request_id
    return stored


def in_flight(tracker: Tracker) -> int:
    """GPUs of the Vertex jobs not ended: what Vertex would count against the quota."""
    live = 0
    for job in tracker.backend.jobs.values():
        state = from_vertex(job.state)
        if state is None or not state.terminal:
            live += GPUS_EACH
    return live


def created(tracker: Tracker) -> list[str]:
    """The requestIds Vertex was asked to create, in order."""
    return [request.request_id for request, _labels in tracker.backend.created]


def finish(post_event, clock, tracker: Tracker, request_id: str) -> None:
    """The request's job runs and succeeds; the hint settles it."""
    name = record(tracker, request_id)["vertexJob"]
    run(tracker, clock, name)
    clock.advance(600)
    end(tracker, clock, name, "JOB_STATE_SUCCEEDED")
    assert hint(post_event, clock, name) == 200
    assert in_flight(tracker) <= QUOTA


def test_requests_wait_in_their_queues_and_are_admitted_as_capacity_returns(
    queued, clock, post_event
):
    _, tracker = queued
    for request_id in ["a1", "b1", "a2", "b2", "a3", "b3"]:
        queue = "team-a" if request_id.startswith("a") else "team-b"
        assert publish(post_event, clock, body(request_id, queue)) == 200
        assert in_flight(tracker) <= QUOTA

    # Each queue's 4 GPUs went to its first request; the rest wait, never sent to Vertex.
    assert created(tracker) == ["a1", "b1"]
    for request_id in ["a2", "b2", "a3", "b3"]:
        waiting = record(tracker, request_id)
        assert (waiting["state"], waiting["reason"]) == ("QUEUED", "admission")
        assert waiting["admission"]["stage"] == "WAITING"
        assert "vertexJob" not in waiting or waiting["vertexJob"] is None
    admitted = record(tracker, "a1")["admission"]
    assert admitted["stage"] == "ADMITTED" and admitted["queue"] == "team-a"

    # Capacity comes back one job at a time; each queue's next in arrival order takes it.
    finish(post_event, clock, tracker, "a1")
    assert created(tracker) == ["a1", "b1", "a2"]
    finish(post_event, clock, tracker, "b1")
    assert created(tracker) == ["a1", "b1", "a2", "b2"]
    finish(post_event, clock, tracker, "a2")
    finish(post_event, clock, tracker, "b2")
    assert created(tracker) == ["a1", "b1", "a2", "b2", "a3", "b3"]
    assert tracker.backend.calls["create"] == 6  # none refused, none repeated
    assert tick(post_event, clock) == 200
    assert tracker.jobs.admissions.ledger().usage() == {
        "team-a": {next(iter(admission_demand(tracker, "a3"))): GPUS_EACH},
        "team-b": {next(iter(admission_demand(tracker, "b3"))): GPUS_EACH},
    }
    # ADMITTED was told for every request, through its outbox.
    admitted_notes = [m for m in tracker.notifier.messages if m["state"] == "ADMITTED"]
    assert sorted(m["requestId"] for m in admitted_notes) == ["a1", "a2", "a3", "b1", "b2", "b3"]


def admission_demand(tracker: Tracker, request_id: str) -> dict[Any, int]:
    from shared.domain.admission.ledger import demand_from_list

    return dict(demand_from_list(record(tracker, request_id)["admission"]["demand"]))


def test_a_higher_priority_request_goes_first_whatever_its_arrival(queued, clock, post_event):
    _, tracker = queued
    assert publish(post_event, clock, body("running")) == 200
    assert publish(post_event, clock, body("early")) == 200
    assert publish(post_event, clock, body("urgent", priority="high")) == 200
    assert record(tracker, "urgent")["admission"]["priority"] == 100

    finish(post_event, clock, tracker, "running")

    assert created(tracker) == ["running", "urgent"]
    assert record(tracker, "early")["admission"]["stage"] == "WAITING"


def test_two_passes_on_one_snapshot_never_admit_past_the_quota(queued, clock, post_event):
    """Two passes read the same ledger (team-a's 4 GPUs free) and each plans a different
    request; only the first admission fits on its batch's fresh read of the ledger."""
    _, tracker = queued
    for request_id in ["held", "x", "y"]:
        assert publish(post_event, clock, body(request_id)) == 200
    assert created(tracker) == ["held"]
    # "held" ends and its entry is given back, without the pass a release runs: the two
    # passes below race for its GPUs.
    end(tracker, clock, record(tracker, "held")["vertexJob"], "JOB_STATE_SUCCEEDED")
    assert tracker.jobs.admissions.release(["held"])

    store = tracker.jobs.admissions.admission_store
    read_waiting = store.waiting_admission
    both_read = threading.Barrier(2, timeout=10)
    sees = {"pass-x": "x", "pass-y": "y"}

    def waiting(queue, most):
        rows = read_waiting(queue, most)
        if queue == "team-b":  # the last line a pass reads (in the file's order)
            both_read.wait()  # each has read the ledger and the waiting records: one snapshot
        return [
            row for row in rows if row.raw["requestId"] == sees[threading.current_thread().name]
        ]

    store.waiting_admission = waiting  # type: ignore[method-assign]
    results: dict[str, list[str]] = {}

    def one_pass() -> None:
        name = threading.current_thread().name
        results[name] = admission.admit_waiting(
            tracker, tracker.queues, lambda rid: admission.submit_admitted(tracker, rid)
        )

    threads = [threading.Thread(target=one_pass, name=name) for name in sees]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    del store.waiting_admission

    assert sorted(results) == ["pass-x", "pass-y"]
    won = results["pass-x"] + results["pass-y"]
    assert len(won) == 1, results
    assert created(tracker) == ["held", *won]
    assert in_flight(tracker) == GPUS_EACH
    lost = ({"x", "y"} - set(won)).pop()
    assert record(tracker, lost)["admission"]["stage"] == "WAITING"
    usage = tracker.jobs.admissions.ledger().usage()
    assert sum(usage["team-a"].values()) == GPUS_EACH


def test_a_create_that_fails_after_admission_is_finished_by_the_tick(queued, clock, post_event):
    _, tracker = queued
    tracker.backend.fail_with = BackendUnavailable("Vertex AI did not answer")
    assert publish(post_event, clock, body("a1")) == 200

    # Admitted (its GPUs held), but no job yet: a due submission, not a lost one.
    waiting = record(tracker, "a1")
    assert waiting["admission"]["stage"] == "ADMITTED"
    assert not waiting.get("vertexJob")
    assert publish(post_event, clock, body("a2")) == 200
    assert record(tracker, "a2")["admission"]["stage"] == "WAITING"

    tracker.backend.fail_with = None
    assert tick(post_event, clock) == 200
    assert created(tracker) == ["a1"]
    assert record(tracker, "a1")["vertexJob"]
    # A second delivery of the request creates nothing more.
    assert publish(post_event, clock, body("a1")) == 200
    assert tick(post_event, clock) == 200
    assert created(tracker) == ["a1"]
    assert record(tracker, "a2")["admission"]["stage"] == "WAITING"


def test_a_cancel_before_the_create_gives_the_capacity_back(queued, clock, post_event):
    _, tracker = queued
    tracker.backend.fail_with = BackendUnavailable("Vertex AI did not answer")
    assert publish(post_event, clock, body("a1")) == 200
    assert publish(post_event, clock, body("a2")) == 200
    tracker.backend.fail_with = None

    assert publish(post_event, clock, {"cancel": "a1"}) == 200
    assert record(tracker, "a1")["state"] == "CANCELLED"
    # a1 never reached Vertex; its GPUs went to a2 at once.
    assert created(tracker) == ["a2"]
    assert record(tracker, "a2")["admission"]["stage"] == "ADMITTED"
    assert tick(post_event, clock) == 200
    assert created(tracker) == ["a2"]


def test_a_cancel_of_a_running_job_gives_its_gpus_back_only_once_vertex_has_ended_it(
    queued, clock, post_event
):
    """Vertex's cancel is asynchronous: a CANCELLING job still holds its GPUs, so the next
    request is admitted only at the tick after Vertex reports the job ended."""
    _, tracker = queued
    tracker.backend.cancel_lands = False
    for request_id in ["a1", "a2"]:
        assert publish(post_event, clock, body(request_id)) == 200
    name = record(tracker, "a1")["vertexJob"]
    run(tracker, clock, name)

    assert publish(post_event, clock, {"cancel": "a1"}) == 200
    assert record(tracker, "a1")["state"] == "CANCELLED"
    assert tracker.backend.jobs[name].state == "JOB_STATE_CANCELLING"
    assert tick(post_event, clock) == 200  # still CANCELLING: still held
    assert created(tracker) == ["a1"]
    assert in_flight(tracker) <= QUOTA
    assert "a1" in tracker.jobs.admissions.ledger().held

    end(tracker, clock, name, "JOB_STATE_CANCELLED")
    tracker.backend.fail_get_with = BackendUnavailable("Vertex AI did not answer")
    assert tick(post_event, clock) == 200  # not known: still held
    assert created(tracker) == ["a1"]
    tracker.backend.fail_get_with = None
    assert tick(post_event, clock) == 200  # read ended: its GPUs go back, a2 takes them
    assert created(tracker) == ["a1", "a2"]
    assert "a1" not in tracker.jobs.admissions.ledger().held
    assert record(tracker, "a1")["admission"]["stage"] == "ENDED"


def test_a_request_that_ends_while_it_waits_leaves_its_queues_line(queued, clock, post_event):
    """Cancelled while waiting, a record is out of the line: it holds nothing, blocks
    nobody, and shows as waiting nowhere; one stored before records said so (stage still
    WAITING) is taken out by the next pass."""
    _, tracker = queued
    for request_id in ["a1", "a2", "a3"]:
        assert publish(post_event, clock, body(request_id)) == 200
    assert publish(post_event, clock, {"cancel": "a2"}) == 200
    assert record(tracker, "a2")["admission"]["stage"] == "ENDED"
    # A record ended before finish() said so: its stage is WAITING still.
    tracker.jobs.job_store.database.jobs["a3"]["state"] = "FAILED"
    tracker.jobs.job_store.database.jobs["a3"]["admission"]["stage"] = "WAITING"
    assert publish(post_event, clock, body("a4")) == 200
    assert record(tracker, "a3")["admission"]["stage"] == "ENDED"
    assert [r.request_id for r in tracker.jobs.admissions.waiting(None, 10)] == ["a4"]

    finish(post_event, clock, tracker, "a1")
    assert created(tracker) == ["a1", "a4"]


def test_a_low_quota_read_holds_waiting_requests_rather_than_fail_them(queued, clock, post_event):
    _, tracker = queued
    for request_id in ["a1", "a2"]:
        assert publish(post_event, clock, body(request_id)) == 200
    quota_of(tracker).values = {A100_PREEMPTIBLE: 0}  # one odd read
    assert tick(post_event, clock, 700) == 200
    waiting = record(tracker, "a2")
    assert (waiting["state"], waiting["admission"]["stage"]) == ("QUEUED", "WAITING")
    assert "Cloud Quotas" in waiting["admission"]["heldBy"]

    quota_of(tracker).values = {A100_PREEMPTIBLE: 8}  # the next read is sane again
    assert tick(post_event, clock, 700) == 200
    finish(post_event, clock, tracker, "a1")
    assert created(tracker) == ["a1", "a2"]


def test_a_cancel_of_a_waiting_request_holds_nothing(queued, clock, post_event):
    _, tracker = queued
    assert publish(post_event, clock, body("a1")) == 200
    assert publish(post_event, clock, body("a2")) == 200
    assert publish(post_event, clock, {"cancel": "a2"}) == 200
    assert record(tracker, "a2")["state"] == "CANCELLED"
    finish(post_event, clock, tracker, "a1")
    assert tick(post_event, clock) == 200
    assert created(tracker) == ["a1"]
    assert not tracker.jobs.admissions.ledger().held


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"queue": "team-c"}, "queue"),
        ({"priority": "urgent"}, "priority"),
        ({"priority": 1000}, "priority"),
    ],
)
def test_a_request_that_names_what_its_queue_lacks_is_refused(
    queued, clock, post_event, options, error
):
    intake, tracker = queued
    assert publish(post_event, clock, {**body("bad"), **options}) == 200
    assert tracker.jobs.job_store.get("bad") is None
    assert not created(tracker)
    rejection = next(iter(intake.rejections.documents.values()))
    assert error in str(rejection).lower()


def test_a_request_that_could_never_fit_its_queue_is_refused_at_intake(queued, clock, post_event):
    intake, tracker = queued
    big = body("big")
    pools = big["customJob"]["jobSpec"]["workerPoolSpecs"]
    pools[0]["replicaCount"] = 2  # 8 GPUs, in a queue of 4 with no cohort to borrow from
    assert publish(post_event, clock, big) == 200
    assert tracker.jobs.job_store.get("big") is None
    assert not created(tracker)
    rejection = str(next(iter(intake.rejections.documents.values())))
    assert "never" in rejection and "team-a" in rejection


def test_a_queue_is_refused_when_admission_is_off(intake, tracker, clock, post_event):
    assert publish(post_event, clock, body("q", "team-a")) == 200
    assert tracker.jobs.job_store.get("q") is None
    assert "queue" in str(next(iter(intake.rejections.documents.values()))).lower()
    assert publish(post_event, clock, body("d", "default")) == 200
    assert tracker.jobs.job_store.get("d") is not None  # the default queue, with no quota


def test_the_tick_heals_a_ledger_that_lost_or_kept_an_entry(queued, clock, post_event):
    _, tracker = queued
    assert publish(post_event, clock, body("a1")) == 200
    assert publish(post_event, clock, body("b1", "team-b")) == 200
    assert publish(post_event, clock, body("b2", "team-b")) == 200
    store = tracker.jobs.job_store.database
    # A hand edit lost a1's entry, and b1's record was deleted with its entry kept.
    store.ledger = {
        **store.ledger,
        "held": [h for h in store.ledger["held"] if h["requestId"] != "a1"],
    }
    end(tracker, clock, record(tracker, "b1")["vertexJob"], "JOB_STATE_CANCELLED")
    del store.jobs["b1"]

    assert tick(post_event, clock) == 200

    held = {h["requestId"] for h in store.ledger["held"]}
    assert "a1" in held and "b1" not in held
    # b1's GPUs went to b2; a1's restored entry let nothing pass team-a's quota.
    assert created(tracker) == ["a1", "b1", "b2"]
    assert publish(post_event, clock, body("a2")) == 200
    assert record(tracker, "a2")["admission"]["stage"] == "WAITING"


# -- preemption -----------------------------------------------------------------------------

PREEMPTING = """
projectQuota:
  - {region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, limit: 8}
queues:
  - name: team-a
    quotas:
      - {region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, nominal: 8}
    priorities: {high: 100, low: 0}
    defaultPriority: low
    preemption: {withinQueue: true}
"""


@pytest.fixture
def preempting(ports: Ports, clock: FakeClock, checkpoints) -> Iterator[tuple[Tracker, Any]]:
    """A tracker, intake and upload function wired with a queue that preempts within itself
    (low-priority jobs need a checkpoint to be preempted: the default)."""
    with preempting_wired(ports, clock, checkpoints) as both:
        yield both


@contextlib.contextmanager
def preempting_wired(ports: Ports, clock: FakeClock, checkpoints) -> Iterator[tuple[Tracker, Any]]:
    """:func:`preempting`'s wiring, for a module of its own to make a fixture of."""
    from functions_framework import create_app

    from shared.app.context import Uploads
    from tests.fakes import InMemoryStoredObjects
    from tests.functional.conftest import SOURCE

    with wired(ports, clock, PREEMPTING) as (intake, tracker):
        uploads = Uploads(intake=intake, objects=InMemoryStoredObjects(), checkpoints=checkpoints)
        bootstrap.override_uploads(uploads)
        try:
            client = create_app("handle_upload", SOURCE, "cloudevent").test_client()
            yield tracker, (uploads, client)
        finally:
            bootstrap.override_uploads(None)


def checkpointing(request_id: str, **options: Any) -> dict[str, Any]:
    """A 4-GPU request of team-a that writes checkpoints under its own folder."""
    from tests.functional.test_uploads import CKPT_BUCKET

    uri = f"gs://{CKPT_BUCKET}/runs/{request_id}/checkpoints/"
    return body(request_id, checkpointUri=uri, **options)


def save_checkpoint(upload, clock, request_id: str, step: int) -> str:
    """The job writes checkpoint ``step`` now (its data, then its marker), and the upload
    function is told; returns the checkpoint's URI."""
    from tests.functional.test_uploads import CKPT_BUCKET, checkpoint_object, eventarc

    uploads, client = upload
    directory = f"runs/{request_id}/checkpoints/step-{step:08d}"
    at = clock.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    checkpoint_object(uploads, f"{directory}/state.bin", at, size=1024)
    marker = checkpoint_object(uploads, f"{directory}/commit_success.txt", at)
    assert eventarc(client, marker).status_code == 200
    return f"gs://{CKPT_BUCKET}/{directory}/"


def start(post_event, clock, tracker: Tracker, request_id: str) -> str:
    """The request's job starts in Vertex and a hint says so; its job name."""
    name = record(tracker, request_id)["vertexJob"]
    run(tracker, clock, name)
    assert hint(post_event, clock, name) == 200
    assert record(tracker, request_id)["state"] == "RUNNING"
    return name


def test_a_higher_priority_request_preempts_at_the_latest_checkpoint_and_the_job_resumes(
    preempting, clock, post_event
):
    from tests.functional.test_lifecycle_handlers import env_of

    tracker, upload = preempting
    tracker.backend.cancel_lands = False  # CANCELLING until Vertex ends it, as Vertex does
    for request_id in ["stale", "fresh"]:
        assert publish(post_event, clock, checkpointing(request_id)) == 200
    names = {rid: start(post_event, clock, tracker, rid) for rid in ["stale", "fresh"]}
    save_checkpoint(upload, clock, "stale", 100)
    clock.advance(3 * 3600)
    saved = save_checkpoint(upload, clock, "fresh", 300)
    assert record(tracker, "fresh")["latestCheckpoint"]["uri"] == saved

    # The quota is full; an urgent request arrives. The job that loses least is ended.
    assert publish(post_event, clock, checkpointing("urgent", priority="high")) == 200
    assert created(tracker) == ["stale", "fresh"]
    assert tracker.backend.cancels == [names["fresh"]]
    assert record(tracker, "fresh")["yielding"]["why"] == "preempted"
    assert record(tracker, "urgent")["admission"]["stage"] == "WAITING"

    # Ticks and retried deliveries before Vertex confirms the cancel end nobody else: the
    # GPUs being freed already count as free.
    assert tick(post_event, clock) == 200
    assert publish(post_event, clock, checkpointing("urgent", priority="high")) == 200
    assert tracker.backend.jobs[names["fresh"]].state == "JOB_STATE_CANCELLING"
    assert tracker.backend.cancels == [names["fresh"]]
    assert created(tracker) == ["stale", "fresh"]  # its GPUs are not free yet
    assert in_flight(tracker) <= QUOTA

    # Vertex ends it: the victim waits again, with no budget charged; urgent takes its GPUs.
    end(tracker, clock, names["fresh"], "JOB_STATE_CANCELLED")
    assert hint(post_event, clock, names["fresh"]) == 200
    victim = record(tracker, "fresh")
    assert (victim["state"], victim["admission"]["stage"]) == ("RETRYING", "WAITING")
    assert victim["reason"] == "preempted by urgent (priority 100) in queue team-a"
    assert victim.get("retries", {}) == {} and victim.get("switches", 0) == 0
    assert tracker.jobs.get_attempt("fresh", 1)["endedBy"] == "preempted"
    assert created(tracker) == ["stale", "fresh", "urgent"]
    assert in_flight(tracker) <= QUOTA
    preempted = [m for m in tracker.notifier.messages if m["state"] == "PREEMPTED"]
    assert [(m["requestId"], m["attempt"]) for m in preempted] == [("fresh", 1)]

    # Urgent ends: the victim is admitted again and resumes from its checkpoint.
    finish(post_event, clock, tracker, "urgent")
    assert created(tracker) == ["stale", "fresh", "urgent", "fresh"]
    resumed = record(tracker, "fresh")
    assert (resumed["attempt"], resumed["admission"]["stage"]) == (2, "ADMITTED")
    assert env_of(tracker.backend.created[-1])["FLEXJOBS_RESUME_FROM"] == saved
    assert tracker.jobs.get_attempt("fresh", 2)["resumedFrom"] == saved
    assert record(tracker, "stale")["state"] == "RUNNING"  # never touched
    admitted = [m for m in tracker.notifier.messages if m["requestId"] == "fresh"]
    assert [(m["state"], m["attempt"]) for m in admitted if m["state"] == "ADMITTED"] == [
        ("ADMITTED", 1),
        ("ADMITTED", 2),
    ]


def test_a_job_without_a_checkpoint_is_never_preempted(preempting, clock, post_event):
    tracker, _upload = preempting
    for request_id in ["one", "two"]:
        assert publish(post_event, clock, checkpointing(request_id)) == 200
        start(post_event, clock, tracker, request_id)

    assert publish(post_event, clock, checkpointing("urgent", priority="high")) == 200
    assert tick(post_event, clock) == 200

    assert tracker.backend.cancels == []
    assert record(tracker, "urgent")["admission"]["stage"] == "WAITING"
    assert all(record(tracker, rid)["state"] == "RUNNING" for rid in ["one", "two"])


def test_a_cancel_of_a_preempted_request_while_it_waits_ends_it(preempting, clock, post_event):
    tracker, upload = preempting
    for request_id in ["victim", "other"]:
        assert publish(post_event, clock, checkpointing(request_id)) == 200
        start(post_event, clock, tracker, request_id)
    save_checkpoint(upload, clock, "victim", 10)
    assert publish(post_event, clock, checkpointing("urgent", priority="high")) == 200
    name = record(tracker, "victim")["vertexJob"]
    end(tracker, clock, name, "JOB_STATE_CANCELLED")
    assert hint(post_event, clock, name) == 200
    assert record(tracker, "victim")["admission"]["stage"] == "WAITING"

    assert publish(post_event, clock, {"cancel": "victim"}) == 200

    assert record(tracker, "victim")["state"] == "CANCELLED"
    finish(post_event, clock, tracker, "urgent")
    assert created(tracker).count("victim") == 1  # never created again


# -- what operators see ---------------------------------------------------------------------


def test_the_tick_shows_operators_each_queue_its_line_and_a_waiting_requests_place(
    queued, clock, post_event, monkeypatch, capsys
):
    """After a tick: the status page's queues view (HTML and JSON), a waiting request's job
    page, ``flexjobs queues`` and ``flexjobs status`` all show the tick's summary."""
    import flexjobs
    from flexjobs.cli import main
    from shared.domain.policy.pricing import PriceTable
    from shared.status.site import StatusSite
    from tests.fakes import InMemoryJobViews, InMemoryPublisher, InMemoryRejectionLog
    from tests.functional.conftest import PRICES, SOURCE

    _, tracker = queued
    for request_id in ["a1", "a2", "a3", "b1"]:
        queue = "team-a" if request_id.startswith("a") else "team-b"
        assert publish(post_event, clock, body(request_id, queue)) == 200
    views = InMemoryJobViews(tracker.jobs.job_store.database)
    assert views.admission_summary() is None  # no tick yet: nothing to show
    assert tick(post_event, clock) == 200

    summary = views.admission_summary()
    assert summary is not None and summary["at"] == clock.now
    by_name = {q["name"]: q for q in summary["queues"]}
    team_a = by_name["team-a"]
    assert [(r["nominal"], r["used"], r["borrowed"]) for r in team_a["resources"]] == [(4, 4, 0)]
    assert team_a["waiting"] == 2 and team_a["admitted"] == 1
    assert [(w["requestId"], w["position"]) for w in team_a["line"]] == [("a2", 1), ("a3", 2)]
    assert team_a["oldestWaitingSince"] == record(tracker, "a2")["admission"]["waitingSince"]
    assert by_name["team-b"]["waiting"] == 0
    assert [(p["limit"], p["source"]) for p in summary["projectQuota"]] == [(8, "configured")]

    # The status page.
    from functions_framework import create_app

    site = StatusSite(views, PriceTable.load(PRICES), lambda: clock.now, totals_seconds=0)
    bootstrap.override_status_site(site)
    try:
        page = create_app("status_page", SOURCE, "http").test_client()
        html = page.get("/queues").get_data(as_text=True)
        assert "team-a" in html and "team-b" in html and 'href="/jobs/a3"' in html
        api = page.get("/api/queues").get_json()["summary"]["queues"]
        assert {q["name"]: q["waiting"] for q in api}["team-a"] == 2
        assert page.get("/queues?x=1").status_code == 400
        job = page.get("/jobs/a3").get_data(as_text=True)
        assert "waiting in queue team-a: position 2 of 2" in job
        assert "waiting in queue" not in page.get("/jobs/a1").get_data(as_text=True)
    finally:
        bootstrap.override_status_site(None)

    # The command, through the client library on the same records.
    class FakeClient(flexjobs.Client):
        def __init__(self, project: str | None = None, **options: Any) -> None:
            super().__init__(
                project,
                publisher=InMemoryPublisher(),
                views=views,
                rejections=InMemoryRejectionLog(),
                **options,
            )

    monkeypatch.setattr("flexjobs.cli.app.Client", FakeClient)
    capsys.readouterr()
    assert main(["--project", "p", "queues"]) == 0
    table = capsys.readouterr().out
    assert "team-a" in table and "configured" in table
    assert main(["--project", "p", "queues", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)["queues"]
    assert {q["name"]: q["waiting"] for q in listed}["team-a"] == 2
    assert main(["--project", "p", "status", "a2", "--format", "json"]) == 0
    place = json.loads(capsys.readouterr().out)["admissionPlace"]
    assert (place["queue"], place["position"], place["waiting"]) == ("team-a", 1, 2)
    assert main(["--project", "p", "status", "a2"]) == 0
    assert "position 1 of 2" in capsys.readouterr().out
    assert main(["--project", "p", "status", "a1", "--format", "json"]) == 0
    assert "admissionPlace" not in json.loads(capsys.readouterr().out)


# --- the project's real quota (Cloud Quotas) ---------------------------------------------------

A100_PREEMPTIBLE = Resource("us-central1", "NVIDIA_TESLA_A100", Pool.PREEMPTIBLE)


def quota_of(tracker: Tracker) -> InMemoryQuotaLimits:
    limits = tracker.quota_limits
    assert isinstance(limits, InMemoryQuotaLimits)
    return limits


def test_the_tick_reads_the_quota_at_most_every_ten_minutes_and_caches_it(
    queued, clock, post_event
):
    _, tracker = queued
    quota = quota_of(tracker)
    quota.values = {A100_PREEMPTIBLE: 12}
    assert tick(post_event, clock) == 200
    # The resources the queues and the file name were asked for.
    assert quota.reads == [[A100_PREEMPTIBLE]]
    ledger = tracker.jobs.admissions.ledger()
    assert dict(ledger.observed) == {A100_PREEMPTIBLE: 12}
    assert ledger.observed_at == clock.now and ledger.unreadable is None
    stored = tracker.jobs.admissions.admission_store.read_ledger()
    assert stored is not None and stored.raw["observed"] == [
        {
            "region": "us-central1",
            "acceleratorType": "NVIDIA_TESLA_A100",
            "pool": "PREEMPTIBLE",
            "gpus": 12,
        }
    ]

    quota.values = {A100_PREEMPTIBLE: 6}
    assert tick(post_event, clock, seconds=60) == 200
    assert len(quota.reads) == 1  # not due yet: the cached limit stands
    assert dict(tracker.jobs.admissions.ledger().observed) == {A100_PREEMPTIBLE: 12}
    assert tick(post_event, clock, seconds=admission.QUOTA_READ_EVERY.total_seconds()) == 200
    assert len(quota.reads) == 2
    assert dict(tracker.jobs.admissions.ledger().observed) == {A100_PREEMPTIBLE: 6}


def test_a_failed_read_keeps_the_last_limits_and_records_why(queued, clock, post_event, caplog):
    _, tracker = queued
    quota = quota_of(tracker)
    quota.values = {A100_PREEMPTIBLE: 4}
    assert tick(post_event, clock) == 200
    quota.failing = QuotaUnreadable("Cloud Quotas ListQuotaInfos failed: 403 SERVICE_DISABLED")
    with caplog.at_level(logging.WARNING):
        assert tick(post_event, clock, seconds=admission.QUOTA_READ_EVERY.total_seconds()) == 200
    ledger = tracker.jobs.admissions.ledger()
    assert dict(ledger.observed) == {A100_PREEMPTIBLE: 4}  # never lifted to the file's 8
    assert ledger.unreadable is not None and "SERVICE_DISABLED" in ledger.unreadable
    assert any("quota limits unreadable" in r.getMessage() for r in caplog.records)

    # The ceiling is still the last limit read: one 4-GPU request runs, the next waits.
    assert publish(post_event, clock, body("a1", "team-a")) == 200
    assert publish(post_event, clock, body("b1", "team-b")) == 200
    assert created(tracker) == ["a1"]
    assert "project quota" in record(tracker, "b1")["admission"]["heldBy"]

    # Readable again: the reason goes, the new limit applies.
    quota.failing = None
    quota.values = {A100_PREEMPTIBLE: 8}
    assert tick(post_event, clock, seconds=admission.QUOTA_READ_EVERY.total_seconds()) == 200
    ledger = tracker.jobs.admissions.ledger()
    assert ledger.unreadable is None and dict(ledger.observed) == {A100_PREEMPTIBLE: 8}
    assert created(tracker) == ["a1", "b1"]


def test_an_unexpected_fault_of_the_read_never_fails_the_tick(queued, clock, post_event):
    _, tracker = queued
    assert publish(post_event, clock, body("a1", "team-a")) == 200
    quota_of(tracker).failing = RuntimeError("a bug in the adapter")
    assert tick(post_event, clock) == 200
    # Nothing recorded (not a read that failed), and the file's quota still applies.
    assert tracker.jobs.admissions.ledger().observed_at is None
    assert created(tracker) == ["a1"]


def test_an_observed_limit_lower_than_the_files_stops_admission_past_it(queued, clock, post_event):
    _, tracker = queued
    quota_of(tracker).values = {A100_PREEMPTIBLE: 4}  # the file says 8
    assert tick(post_event, clock) == 200
    assert publish(post_event, clock, body("a1", "team-a")) == 200
    assert publish(post_event, clock, body("b1", "team-b")) == 200
    # team-b's nominal has room; the project's real quota does not.
    assert created(tracker) == ["a1"]
    waiting = record(tracker, "b1")["admission"]
    assert waiting["stage"] == "WAITING"
    assert "project quota of NVIDIA_TESLA_A100 PREEMPTIBLE in us-central1" in waiting["heldBy"]
    assert in_flight(tracker) <= 4
    finish(post_event, clock, tracker, "a1")
    assert created(tracker) == ["a1", "b1"]


def test_a_limit_of_zero_is_a_limit(queued, clock, post_event):
    _, tracker = queued
    quota_of(tracker).values = {A100_PREEMPTIBLE: 0}
    assert tick(post_event, clock) == 200
    assert dict(tracker.jobs.admissions.ledger().observed) == {A100_PREEMPTIBLE: 0}
    # Nothing is admitted past a limit of 0; the request waits, saying why (a read, not the
    # queue file, keeps it out: the next read may lift it), and goes in once it does.
    assert publish(post_event, clock, body("a1", "team-a")) == 200
    assert created(tracker) == []
    waiting = record(tracker, "a1")
    assert (waiting["state"], waiting["admission"]["stage"]) == ("QUEUED", "WAITING")
    assert "Cloud Quotas" in waiting["admission"]["heldBy"]
    quota_of(tracker).values = {A100_PREEMPTIBLE: 8}
    assert tick(post_event, clock, 700) == 200
    assert created(tracker) == ["a1"]


def test_without_queues_the_quota_is_never_read(intake, tracker, clock, post_event):
    assert tracker.quota_limits is None
    assert tick(post_event, clock) == 200


def test_a_victim_reclaimed_by_vertex_before_its_cancel_lands_waits_again(
    preempting, clock, post_event
):
    """A Spot preemption ends the victim first: the same end by another hand. It waits
    again with no budget charged, and its GPUs go to the head, not to a second victim."""
    from tests.functional.test_lifecycle_handlers import PREEMPTED as RECLAIMED

    tracker, upload = preempting
    tracker.backend.cancel_lands = False
    for request_id in ["victim", "other"]:
        assert publish(post_event, clock, checkpointing(request_id)) == 200
        start(post_event, clock, tracker, request_id)
    save_checkpoint(upload, clock, "victim", 10)
    save_checkpoint(upload, clock, "other", 5)
    clock.advance(60)
    save_checkpoint(upload, clock, "victim", 20)  # the most recent: the victim
    assert publish(post_event, clock, checkpointing("urgent", priority="high")) == 200
    name = record(tracker, "victim")["vertexJob"]
    assert tracker.backend.cancels == [name]

    end(tracker, clock, name, "JOB_STATE_FAILED", RECLAIMED, code=14)
    assert hint(post_event, clock, name) == 200

    victim = record(tracker, "victim")
    assert (victim["state"], victim["admission"]["stage"]) == ("RETRYING", "WAITING")
    assert victim.get("retries", {}) == {}
    assert created(tracker) == ["victim", "other", "urgent"]
    assert tick(post_event, clock) == 200
    assert tracker.backend.cancels == [name]  # nobody else ended
    assert record(tracker, "other")["state"] == "RUNNING"


def test_a_users_cancel_still_in_flight_counts_as_freed_so_nobody_else_is_preempted(
    preempting, clock, post_event
):
    tracker, upload = preempting
    tracker.backend.cancel_lands = False
    for request_id in ["cancelled", "other"]:
        assert publish(post_event, clock, checkpointing(request_id)) == 200
        start(post_event, clock, tracker, request_id)
        save_checkpoint(upload, clock, request_id, 10)
    name = record(tracker, "cancelled")["vertexJob"]
    assert publish(post_event, clock, {"cancel": "cancelled"}) == 200
    assert tracker.backend.jobs[name].state == "JOB_STATE_CANCELLING"
    # Its entry is kept (Vertex still holds the GPUs) and counts as on its way back.
    assert record(tracker, "cancelled")["admission"]["jobs"] == [name]

    assert publish(post_event, clock, checkpointing("urgent", priority="high")) == 200
    assert tick(post_event, clock) == 200
    assert tracker.backend.cancels == [name]  # "other" is not preempted
    assert record(tracker, "other")["state"] == "RUNNING"

    end(tracker, clock, name, "JOB_STATE_CANCELLED")
    assert tick(post_event, clock) == 200
    assert created(tracker) == ["cancelled", "other", "urgent"]


BACKFILL_QUEUES = """
projectQuota:
  - {region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, limit: 8}
queues:
  - name: team-a
    quotas:
      - {region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, nominal: 8}
"""


@pytest.fixture
def backfilling(ports: Ports, clock: FakeClock) -> Iterator[Tracker]:
    """Intake and tracker with one queue of the project's 8 A100s, and the product's
    retry backoff (a retry's wait in its line is what is tested)."""
    with wired(ports, clock, BACKFILL_QUEUES, backoff=None) as (_, tracker):
        yield tracker


def sized(request_id: str, gpus: int, **scheduling: str) -> dict[str, Any]:
    """A FLEX_START request of ``gpus`` A100s in team-a, with ``scheduling``'s fields."""
    request = body(request_id)
    pool = request["customJob"]["jobSpec"]["workerPoolSpecs"][0]
    pool["machineSpec"].update(machineType=f"a2-highgpu-{gpus}g", acceleratorCount=gpus)
    request["customJob"]["jobSpec"]["scheduling"].update(scheduling)
    return request


def test_a_job_sure_to_end_before_a_held_one_could_start_goes_first(backfilling, clock, post_event):
    tracker = backfilling
    # 4 of the 8 GPUs for at most 30 minutes' wait and an hour's run: back in 90 minutes.
    assert publish(post_event, clock, sized("running", 4, timeout="3600s")) == 200
    assert record(tracker, "running")["admission"]["limitSeconds"] == 1800 + 3600
    # The 8-GPU job waits for them; StrictFIFO alone would keep the 4 free idle until then.
    assert publish(post_event, clock, sized("big", 8)) == 200
    # Seven days' default timeout: it could hold the 4 past the big one's start. It waits.
    assert publish(post_event, clock, sized("long", 4)) == 200
    # Ten minutes' wait and half an hour's run: back before the big one's start. It goes.
    assert (
        publish(post_event, clock, sized("short", 4, maxWaitDuration="600s", timeout="1800s"))
        == 200
    )
    # Waits for ever ("0s"), or ten thousand years: no certain end, so it backfills only into
    # a room, and the big one needs all 8 at its start (no pass ever computes a time past the
    # calendar's end).
    assert publish(post_event, clock, sized("forever", 4, maxWaitDuration="0s")) == 200
    assert publish(post_event, clock, sized("ages", 4, maxWaitDuration="315576000000s")) == 200
    assert record(tracker, "ages")["admission"]["limitSeconds"] is None

    assert created(tracker) == ["running", "short"]
    for request_id in ("big", "long", "forever", "ages"):
        assert record(tracker, request_id)["admission"]["stage"] == "WAITING"
    assert record(tracker, "forever")["admission"]["limitSeconds"] is None
    ledger = tracker.jobs.admissions.ledger()
    assert {rid: e.limit_seconds for rid, e in ledger.held.items()} == {
        "running": 5400.0,
        "short": 2400.0,
    }
    # Both end; the big one goes next, ahead of the long one that arrived after it.
    finish(post_event, clock, tracker, "running")
    assert created(tracker) == ["running", "short"]
    finish(post_event, clock, tracker, "short")
    assert created(tracker) == ["running", "short", "big"]


def test_a_job_with_no_known_end_takes_only_the_room_a_held_one_leaves(
    backfilling, clock, post_event
):
    tracker = backfilling
    # 4 GPUs back in 90 minutes at the latest; 2 for the default eight days.
    assert publish(post_event, clock, sized("soon", 4, timeout="3600s")) == 200
    assert publish(post_event, clock, sized("later", 2)) == 200
    # The 4-GPU job waits for "soon": at 90 minutes it has 6 free and needs 4.
    assert publish(post_event, clock, sized("big", 4)) == 200
    # No end known: it may hold the 2 free for ever, which big never needs.
    assert publish(post_event, clock, sized("forever", 2, maxWaitDuration="0s")) == 200
    assert created(tracker) == ["soon", "later", "forever"]
    assert record(tracker, "big")["admission"]["stage"] == "WAITING"
    # "soon" ends: big goes, beside the two that hold their GPUs still (finish() counts
    # GPUS_EACH a job: the ledger counts these sizes).
    name = record(tracker, "soon")["vertexJob"]
    run(tracker, clock, name)
    clock.advance(600)
    end(tracker, clock, name, "JOB_STATE_SUCCEEDED")
    assert hint(post_event, clock, name) == 200
    assert created(tracker) == ["soon", "later", "forever", "big"]
    held = tracker.jobs.admissions.ledger().held
    assert {rid: sum(e.demand.values()) for rid, e in held.items()} == {
        "later": 2,
        "forever": 2,
        "big": 4,
    }


def test_a_retry_of_a_job_with_a_limit_waits_in_line_again_after_its_backoff(
    backfilling, clock, post_event
):
    """Backfill counted on a job's GPUs coming back within its limit, which a retry would
    outlive: the retry gives its entry back and waits in its queue again, held (its place
    kept) until its backoff is over, and is created only once admitted again."""
    tracker = backfilling
    assert publish(post_event, clock, sized("first", 8, timeout="3600s")) == 200
    assert publish(post_event, clock, sized("next", 8, timeout="3600s")) == 200
    name = record(tracker, "first")["vertexJob"]
    clock.advance(1800)  # DWS placed nothing within its maxWaitDuration
    end(tracker, clock, name, "JOB_STATE_EXPIRED")
    assert hint(post_event, clock, name) == 200

    first = record(tracker, "first")
    assert (first["state"], first["admission"]["stage"]) == ("RETRYING", "WAITING")
    assert first["retries"] == {"capacity": 1}
    # Its backoff: it may not start yet, and nothing is due (the tick's sweep lists none).
    until = first["admission"]["notBefore"]
    assert until > clock.now and "nextAttemptAt" not in first
    assert first["admission"]["heldBy"].startswith("its retry's backoff, until")
    # Its entry is given back, and "next", behind it in the line, does not take its place.
    assert tracker.jobs.admissions.ledger().held == {}
    assert record(tracker, "next")["admission"]["stage"] == "WAITING"
    assert created(tracker) == ["first"]

    # The backoff over, the tick admits it again: attempt 2, from a fresh admission.
    clock.advance((until - clock.now).total_seconds())
    assert tick(post_event, clock) == 200
    first = record(tracker, "first")
    assert (first["attempt"], first["admission"]["stage"]) == (2, "ADMITTED")
    assert first["admission"]["notBefore"] is None
    assert created(tracker) == ["first", "first"]
    assert tracker.jobs.admissions.ledger().held["first"].at == first["admission"]["admittedAt"]
    assert record(tracker, "next")["admission"]["stage"] == "WAITING"
