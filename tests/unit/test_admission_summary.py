"""What operators see of admission (shared/domain/admission/summary.py), and the bounds in
bytes of the two admission documents: the summary and the ledger, on the largest inputs the
queue file and a requestId allow, measured as the fake store measures a Firestore document."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from shared.domain.admission.config import (
    MAX_QUEUES,
    MAX_QUOTAS,
    Pool,
    Resource,
    read_queues,
)
from shared.domain.admission.estimate import Running
from shared.domain.admission.ledger import (
    MAX_LEDGER_BYTES,
    Entry,
    Ledger,
    admission_fields,
    admit_one,
)
from shared.domain.admission.quota import Ceiling
from shared.domain.admission.rule import Standing, Workload
from shared.domain.admission.summary import LINE_PER_QUEUE, MAX_LINE, place_of, summarise
from shared.domain.model.ids import MAX_REQUEST_ID_BYTES
from tests.fakes import MAX_DOCUMENT_BYTES, document_size
from tests.unit.test_admission_rule import T0, R, where


def long_id(n: int) -> str:
    """A requestId of the most bytes a requestId may have."""
    head = f"r{n}-"
    return head + "x" * (MAX_REQUEST_ID_BYTES - len(head))


def test_a_queue_shows_its_nominal_use_borrowing_line_and_estimates():
    queues = read_queues(
        {
            "queues": [
                {"name": "a", "cohort": "c", "quotas": [{**where(R), "nominal": 4}]},
                {"name": "b", "cohort": "c", "quotas": [{**where(R), "nominal": 4}]},
            ]
        }
    )
    # a borrows 2 of b's; b's 2 left are free; a request of 4 in b waits for a's job to end.
    running = [
        Running("big", "a", 0, {R: 6}, started=T0, expected_end=T0 + timedelta(hours=2)),
    ]
    standing = Standing({"a": {R: 6}}, Ceiling({R: 8}, frozenset({R})))
    waiting = [
        Workload("late", "b", 0, T0 + timedelta(minutes=5), {R: 4}),
        Workload("first", "b", 0, T0, {R: 4}),
        Workload("urgent", "b", 10, T0 + timedelta(minutes=9), {R: 4}),
    ]
    summary = summarise(queues, standing, waiting, running, now=T0 + timedelta(minutes=10))
    by_name = {q["name"]: q for q in summary["queues"]}
    a, b = by_name["a"], by_name["b"]
    assert [(r["nominal"], r["used"], r["borrowed"]) for r in a["resources"]] == [(4, 6, 2)]
    assert [(r["nominal"], r["used"], r["borrowed"]) for r in b["resources"]] == [(4, 0, 0)]
    assert (a["admitted"], a["waiting"], b["waiting"]) == (1, 0, 3)
    assert b["oldestWaitingSince"] == T0
    # Priority first, then arrival.
    assert [(w["requestId"], w["position"]) for w in b["line"]] == [
        ("urgent", 1),
        ("first", 2),
        ("late", 3),
    ]
    # Once "big" ends (as expected, in two hours) urgent and first fit (first borrows a's
    # nominal); late would need an end nobody expects: unknown, never a guess.
    starts = {w["requestId"]: w["estimatedStart"] for w in b["line"]}
    at_two = T0 + timedelta(hours=2)
    assert starts == {"urgent": at_two, "first": at_two, "late": None}
    assert summary["projectQuota"] == [{**where(R), "limit": 8, "source": "configured"}]
    assert place_of(summary, "first") == {**b["line"][1], "queue": "b", "waiting": 3}
    assert place_of(summary, "big") is None


def test_the_summary_stays_under_a_firestore_document_at_its_worst():
    resources = [
        Resource(f"us-central{i + 1}", "NVIDIA_H100_80GB", Pool.PREEMPTIBLE)
        for i in range(MAX_QUOTAS)
    ]
    raw: dict[str, Any] = {
        "projectQuota": [{**where(r), "limit": 10**6} for r in resources],
        "queues": [
            {
                "name": f"queue-{q:02d}-" + "n" * 50,
                "quotas": [{**where(r), "nominal": 1} for r in resources],
            }
            for q in range(MAX_QUEUES - 1)  # and the implicit default
        ],
    }
    queues = read_queues(raw)
    names = sorted(queues.queues)
    usage = {name: {r: 1000 for r in resources} for name in names}
    waiting = [
        Workload(long_id(n), names[n % len(names)], 0, T0 + timedelta(seconds=n), {resources[0]: 1})
        for n in range(5000)
    ]
    running = [
        Running(long_id(10_000 + n), names[n % len(names)], 0, {resources[0]: 1}) for n in range(50)
    ]
    summary = summarise(
        queues,
        Standing(usage, Ceiling.of(queues, {})),
        waiting,
        running,
        now=T0,
        unreadable="x" * 500,
    )
    listed = sum(len(q["line"]) for q in summary["queues"])
    assert 0 < listed <= MAX_LINE
    assert all(len(q["line"]) <= LINE_PER_QUEUE for q in summary["queues"])
    assert sum(q["waiting"] for q in summary["queues"]) == 5000  # counted, even when not listed
    assert document_size("admission/summary", summary) < MAX_DOCUMENT_BYTES


def test_the_ledger_is_full_in_bytes_before_it_outgrows_a_firestore_document():
    queues = read_queues({"queues": [{"name": "a", "quotas": [{**where(R), "nominal": 10**6}]}]})
    ledger = Ledger()
    admitted = 0
    for n in range(2000):
        rid = long_id(n)
        workload = Workload(rid, "a", 0, T0, {R: 1})
        record = {"state": "QUEUED", "admission": admission_fields("a", 0, {R: 1}, T0)}
        made = admit_one(ledger, queues, workload, record, ceiling=Ceiling(), now=T0)
        if made is None:
            break
        ledger = made.ledger
        admitted += 1
    assert 100 < admitted < 2000  # full in bytes, long before the count
    assert ledger.size_bytes() <= MAX_LEDGER_BYTES
    assert document_size("admission/ledger", ledger.to_dict()) < MAX_DOCUMENT_BYTES
    # Short ids: the count bounds it first, still within the bytes.
    short = Ledger({f"r{n}": Entry("a", {R: 1}, T0) for n in range(2000)})
    assert document_size("admission/ledger", short.to_dict()) < MAX_DOCUMENT_BYTES


def test_a_heal_drops_only_the_entry_it_saw():
    from shared.domain.admission.ledger import healed

    seen = Ledger({"a": Entry("a", {R: 1}, T0), "b": Entry("a", {R: 1}, T0)})
    # Between the tick's read and its write, "a" was released and admitted again.
    now = seen.replace(held={**seen.held, "a": Entry("a", {R: 1}, T0 + timedelta(minutes=1))})
    after = healed(now, {"a": T0, "b": T0}, {})
    assert after is not None and list(after.held) == ["a"]
    assert after.held["a"].at == T0 + timedelta(minutes=1)
    assert healed(now, {"a": T0}, {}) is None  # nothing it saw is left to drop
