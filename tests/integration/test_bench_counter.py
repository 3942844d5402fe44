"""The scale benchmark's Firestore counter against the emulator: it counts what came back.

A counter that counted zero documents when documents were returned would make the tick's
reads look free; these pin it to the documents the emulator actually answered with. They use
the session's emulator, under a collection of their own.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from google.cloud.firestore import FieldFilter

from benchmarks.counting import DocumentCounter, counted_firestore
from flexjobs_local.stack import LocalStack

pytestmark = pytest.mark.integration


@pytest.fixture
def counted(local_stack: LocalStack) -> tuple[Any, DocumentCounter, Any]:
    counter = DocumentCounter()
    db = counted_firestore(local_stack.config.project, counter)
    collection = db.collection(f"counter-{uuid.uuid4().hex[:8]}")
    return db, counter, collection


@pytest.mark.parametrize("k", [1, 7, 250])
def test_a_query_of_k_documents_counts_k_reads(counted: Any, k: int) -> None:
    db, counter, collection = counted
    batch = db.batch()
    for i in range(k):
        batch.set(collection.document(f"d{i:04d}"), {"i": i, "even": i % 2 == 0})
    batch.commit()
    assert counter.take().writes == k

    found = list(collection.stream())
    counts = counter.take()
    assert len(found) == k
    assert (counts.documents, counts.reads, counts.empty_queries) == (k, k, 0)
    assert counts.rpcs["RunQuery"] == 1

    evens = list(collection.where(filter=FieldFilter("even", "==", True)).select(["i"]).stream())
    assert counter.take().reads == len(evens) == (k + 1) // 2


def test_an_empty_query_is_billed_one_read_and_gets_count_found_and_missing(
    counted: Any,
) -> None:
    _db, counter, collection = counted
    collection.document("here").set({"x": 1})
    counter.take()

    assert list(collection.where(filter=FieldFilter("x", "==", 2)).stream()) == []
    empty = counter.take()
    assert (empty.documents, empty.billed_reads) == (0, 1)

    assert collection.document("here").get().exists
    assert not collection.document("absent").get().exists
    gets = counter.take()
    assert (gets.documents, gets.reads) == (1, 2)


def test_a_count_is_billed_per_thousand_index_entries(counted: Any) -> None:
    db, counter, collection = counted
    for start in range(0, 1500, 500):
        batch = db.batch()
        for i in range(start, start + 500):
            batch.set(collection.document(f"c{i:05d}"), {"n": i})
        batch.commit()
    counter.take()
    result = collection.count().get()
    assert result[0][0].value == 1500
    counts = counter.take()
    assert (counts.reads, counts.documents) == (2, 0)


def test_transactional_reads_and_writes_are_counted(counted: Any) -> None:
    from google.cloud import firestore

    db, counter, collection = counted
    ref = collection.document("t")
    ref.set({"n": 0})
    counter.take()

    @firestore.transactional
    def bump(transaction: Any) -> None:
        snap = ref.get(transaction=transaction)
        transaction.set(ref, {"n": snap.get("n") + 1})
        transaction.set(collection.document("u"), {"n": 1})

    bump(db.transaction())
    counts = counter.take()
    assert (counts.reads, counts.writes) == (1, 2)
