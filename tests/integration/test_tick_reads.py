"""A steady tick reads no record whose job is unchanged (issue 26), counted on the wire.

The tick runs in this process on the production wiring (``bootstrap.build_tracker``) against
the emulator and the simulator, its Firestore client's channel counted
(:mod:`benchmarks.counting`): what is pinned is what Firestore would bill, not what the fakes
say.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.counting import DocumentCounter, counted_firestore
from benchmarks.scale import seed_tick
from flexjobs_local.stack import LocalStack
from shared.adapters.firestore.database import Firestore
from shared.app import handlers
from shared.app.commands import Reconcile
from shared.bootstrap import Ports, build_tracker
from shared.domain.model.watch import MAX_SHARDS
from shared.kernel.config import Settings

pytestmark = pytest.mark.integration

ACTIVE = 12


def tracker_counted(counter: DocumentCounter) -> Any:
    settings = Settings.from_env()
    # Every Firestore adapter of the tracker on the one counted client.
    database = Firestore(settings, client=counted_firestore(settings.project, counter))
    return build_tracker(settings, ports=Ports(firestore=database))


def test_a_steady_tick_reads_no_record_and_a_changed_job_only_its_own(
    stack: LocalStack, unique: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in stack.env.items():
        monkeypatch.setenv(name, value)
    # No hints: a hint's handler writes its job's record (its read lease), and a record
    # written between two ticks is rightly read by the second. Here only the ticks write.
    stack.simulator.set_hints(enabled=False)
    names = seed_tick(stack, ACTIVE, unique("steady"))
    counter = DocumentCounter()
    tracker = tracker_counted(counter)

    handlers.reconcile(Reconcile(), tracker)  # builds the watch list: every record once
    built = counter.take()
    assert built.returned["RunQuery"] >= ACTIVE

    assert handlers.reconcile(Reconcile(), tracker) == 0
    steady = counter.take()
    # The watch list's one batch get (its head, its tally, its shards), the followed list's
    # (the deployments', its head and shards), and queries that return nothing: no record
    # is read, by a query or by its key.
    assert steady.returned["RunQuery"] == 0
    assert steady.rpcs["BatchGetDocuments"] == 2 and steady.rpcs["GetDocument"] == 0
    assert steady.returned["BatchGetDocuments"] <= (2 + MAX_SHARDS) + (1 + MAX_SHARDS)

    # Two jobs preempted: only their records are read, each whole before it is settled.
    for name in names[:2]:
        stack.simulator.preempt(name)
    for name in names[:2]:
        stack.simulator.wait_for_job(name, "JOB_STATE_FAILED", timeout=120)
    assert handlers.reconcile(Reconcile(), tracker) == 2
    changed = counter.take()
    assert changed.returned["RunQuery"] == 0  # nothing was written since the last tick
    records = changed.returned["BatchGetDocuments"] - steady.returned["BatchGetDocuments"]
    assert 2 <= records <= 2 * 2, changed  # each changed record read, its attempt at most

    # The next tick reads the two records the last one wrote, and nothing else.
    assert handlers.reconcile(Reconcile(), tracker) == 0
    after = counter.take()
    assert after.returned["RunQuery"] == 2
