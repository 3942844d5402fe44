"""The followed list (issue 41): the tick decides every deployment on its listed state and one
read of its endpoint, and reads a record only to step it. A quiet deployment costs no read;
a write between ticks is read by the next; what a stamp cannot tell (a hand edit) is in the
list within the hour; a list too large to store falls back to reading every record."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from shared.app.services.deploy import refresh_deployments
from shared.domain.model import watch as watches
from shared.domain.serving.followed import REBUILD_AFTER
from shared.domain.serving.model import Intent
from tests.functional.conftest import ENDPOINT
from tests.functional.test_serving import OTHER, deploy, serving

#: The reads that mean a record was read whole (to step it, or because there was no list).
RECORD_READS = ("get", "transact", "alive")


@pytest.fixture
def deployments(tracker):
    tracker.deployments.backend.add_endpoint(OTHER)
    return tracker.deployments


def store_of(deployments):
    return deployments.records.deployment_store


def steady(deployments, clock):
    """Ticks until one writes nothing and finds nothing written since the list's mark (the
    ticks' own writes are read by the tick after them), then forgets the reads counted."""
    for _ in range(5):
        clock.advance(60)
        store = store_of(deployments)
        before = store.version
        written = refresh_deployments(deployments)
        if written == 0 and store.version == before and store.reads["changed_since"] <= 1:
            store.reads.clear()
            deployments.backend.reads.clear()
            return
        store.reads.clear()
    raise AssertionError("the deployments did not settle")


def record_reads(deployments) -> int:
    return sum(store_of(deployments).reads[name] for name in RECORD_READS)


@pytest.fixture
def five(post_event, deployments, clock):
    """Five deployed Spot deployments: three on ENDPOINT, two on OTHER, settled."""
    models = {}
    for rid, endpoint in (
        ("s-1", ENDPOINT),
        ("s-2", ENDPOINT),
        ("s-3", ENDPOINT),
        ("s-4", OTHER),
        ("s-5", OTHER),
    ):
        models[rid] = deploy(post_event, deployments, rid, endpoint=endpoint)
    steady(deployments, clock)
    return models


def test_a_steady_tick_reads_each_endpoint_once_and_no_deployment_record(five, deployments, clock):
    clock.advance(60)
    assert refresh_deployments(deployments) == 0

    assert sorted(deployments.backend.reads) == [ENDPOINT, OTHER]
    assert record_reads(deployments) == 0
    # The list (one batch get), the records stamped since its mark (none: one billed read),
    # the count, the outbox query: a handful, whatever the number of deployments.
    assert sum(store_of(deployments).reads.values()) <= 8


def test_a_spot_loss_steps_only_the_deployments_of_its_endpoint(five, deployments, clock):
    deployments.backend.set_available(OTHER, five["s-4"], 0)
    clock.advance(60)

    assert refresh_deployments(deployments) == 1

    assert serving(deployments, "s-4").phase.value == "DEFICIT"
    assert store_of(deployments).reads["transact"] == 1  # s-4's step, and no other
    assert serving(deployments, "s-5").phase.value == "SERVING"


def test_an_intent_recorded_between_ticks_is_stepped_by_the_next(five, deployments, clock):
    # A cancel delivery that recorded its intent and died before its step.
    assert deployments.records.tell("s-2", Intent.UNDEPLOY, clock()) is not None
    deployments.backend.calls.clear()
    clock.advance(60)

    refresh_deployments(deployments)

    assert store_of(deployments).reads["changed_since"] == 1  # s-2, stamped by the cancel
    calls = deployments.backend.calls
    assert calls and all(c[1] == ENDPOINT for c in calls)
    assert serving(deployments, "s-2").intent is Intent.UNDEPLOY


def test_an_unstamped_edit_is_in_the_list_within_the_hour(five, deployments, clock):
    store = store_of(deployments)
    store.unstamped = True  # an older revision's write, or a hand edit: no stamp
    deployments.records.tell("s-4", Intent.UNDEPLOY, clock())
    store.unstamped = False
    store.reads.clear()
    deployments.backend.calls.clear()
    clock.advance(60)

    refresh_deployments(deployments)
    # The list still holds s-4 as it was: decided on it, nothing is done, nothing read.
    assert deployments.backend.calls == []
    assert record_reads(deployments) == 0

    clock.advance(REBUILD_AFTER.total_seconds())
    refresh_deployments(deployments)
    # Built again from the records: s-4's cancel is seen, and its undeploy begins.
    assert store.reads["alive"] == 5
    assert deployments.backend.calls
    assert {c[1] for c in deployments.backend.calls} == {OTHER}


def test_a_record_deleted_by_hand_is_dropped_by_the_count(five, deployments, clock):
    store = store_of(deployments)
    del store.records["s-5"]
    clock.advance(60)

    refresh_deployments(deployments)

    assert store.reads["alive"] == 4  # read again as of the count that saw it drift
    saved = watches.decode(store.followed_shards)
    assert saved is not None
    assert sorted(s.raw["requestId"] for s in saved.active.values()) == [
        "s-1",
        "s-2",
        "s-3",
        "s-4",
    ]


def test_a_list_too_large_to_store_falls_back_to_reading_every_record(
    five, deployments, clock, monkeypatch
):
    monkeypatch.setattr(watches, "SHARD_BYTES", 16)
    clock.advance(REBUILD_AFTER.total_seconds())
    refresh_deployments(deployments)  # built, and too large: saved as overflowed
    store = store_of(deployments)
    assert store.followed_head is not None and store.followed_head["overflowedAt"] is not None
    store.reads.clear()
    deployments.backend.set_available(ENDPOINT, five["s-1"], 1)
    clock.advance(60)

    assert refresh_deployments(deployments) == 1

    assert store.reads["alive"] == 5  # every record, as before there was a list
    assert serving(deployments, "s-1").phase.value == "DEFICIT"


def test_a_list_that_says_it_was_built_in_the_future_is_built_again(five, deployments, clock):
    """Found by review: a list whose ``builtAt`` is later than any tick could have written
    it (forged, or a clock gone wrong) would never be built again within the hour."""
    store = store_of(deployments)
    saved = watches.decode(store.followed_shards)
    assert saved is not None
    forged = dataclasses.replace(saved, built_at=clock() + timedelta(days=365))
    store.followed_shards = watches.encode(forged)
    clock.advance(60)

    refresh_deployments(deployments)

    assert store.reads["alive"] == 5  # built again from the records


def test_two_ticks_at_once_save_one_list(five, deployments, clock):
    from shared.app.steps.followed import followed_deployments, save_followed

    store = store_of(deployments)
    deployments.records.tell("s-1", Intent.UNDEPLOY, clock())
    first = followed_deployments(store, clock())
    second = followed_deployments(store, clock())

    assert save_followed(store, first) is True
    assert save_followed(store, second) is False  # the first's save moved the version


def test_a_tick_within_the_hour_of_a_build_does_not_build_again(five, deployments, clock):
    clock.advance((REBUILD_AFTER - timedelta(minutes=10)).total_seconds())
    refresh_deployments(deployments)
    assert store_of(deployments).reads["alive"] == 0
