"""The tick's watch list and tally (shared.domain.model.watch, .tally): pure, plain values."""

from __future__ import annotations

import json
import random
import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.domain.model import tally as tallies
from shared.domain.model import watch as watches
from shared.domain.model.records import TICK_FIELDS, Stored
from shared.domain.model.tally import BUCKET, KEEP, NEWEST, added, built
from shared.domain.model.watch import ENDED_FIELDS, Watch, reread, synced
from shared.kernel.errors import WatchTooLarge

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
STRAY = timedelta(hours=2)


def record(rid: str, state: str = "RUNNING", version: Any = 1, **fields: Any) -> Stored:
    raw = {"requestId": rid, "state": state, "request": "x" * 100, **fields}
    return Stored(raw, version, partial=True, key=rid)


def sync(watch: Watch, changed: list[Stored], now: datetime, mark: Any = 9) -> watches.Synced:
    keyed = [(s.key or "", s) for s in changed]
    return synced(watch, changed=keyed, mark=mark, now=now, watch_since=now - STRAY)


def empty(now: datetime = T0) -> Watch:
    return watches.built([], [], 0, now, now - STRAY)


# --- the sync --------------------------------------------------------------------------


def test_a_new_record_joins_and_keeps_only_the_tick_fields():
    after = sync(empty(), [record("a", capacity={"strategy": "SPOT"})], T0)
    entry = after.watch.active["a"]
    assert entry.partial and set(entry.raw) <= set(TICK_FIELDS)
    assert entry.raw["capacity"] == {"strategy": "SPOT"} and "request" not in entry.raw
    assert after.watch.mark == 9 and after.newly_ended == []


def test_an_unchanged_record_keeps_its_entry_and_a_changed_one_is_replaced():
    watch = watches.built([("a", record("a")), ("b", record("b"))], [], 0, T0, T0 - STRAY)
    after = sync(watch, [record("b", "QUEUED", version=2)], T0)
    assert after.watch.active["a"] is watch.active["a"]
    assert after.watch.active["b"].raw["state"] == "QUEUED"


def test_an_end_is_tallied_once_however_often_the_record_is_written_again():
    watch = watches.built([("a", record("a"))], [], 0, T0, T0 - STRAY)
    done = record("a", "SUCCEEDED", version=2, endedAt=T0, gpuSeconds=10.0)
    first = sync(watch, [done], T0)
    assert "a" not in first.watch.active and set(first.watch.ended) == {"a"}
    assert set(first.watch.ended["a"].raw) <= set(ENDED_FIELDS)
    assert [s.raw["requestId"] for s in first.newly_ended] == ["a"]
    # Written again (an outbox flushed, a stray cancelled): not tallied again.
    later = T0 + timedelta(minutes=30)
    again = sync(first.watch, [record("a", "SUCCEEDED", 3, endedAt=T0)], later)
    assert again.newly_ended == []


def test_an_end_older_than_what_the_last_sync_could_see_is_not_tallied_again():
    # The ended entry left the list two hours after its end; a write after that finds it
    # neither listed nor new: its end is before the last sync less the stray watch.
    watch = empty(T0 + timedelta(hours=3))
    late = record("a", "FAILED", 5, endedAt=T0)
    after = sync(watch, [late], T0 + timedelta(hours=3, minutes=1))
    assert after.newly_ended == [] and "a" not in after.watch.ended


def test_ends_while_no_tick_ran_are_tallied_when_the_ticks_come_back():
    # The last sync was three hours ago: every end since it is new, even those older than
    # the stray watch (they are tallied, not watched for strays).
    watch = empty(T0)
    back = T0 + timedelta(hours=3)
    ended = [record(f"r{n}", "SUCCEEDED", n, endedAt=T0 + timedelta(minutes=n)) for n in (30, 90)]
    after = sync(watch, ended, back)
    assert sorted(s.raw["requestId"] for s in after.newly_ended) == ["r30", "r90"]
    assert set(after.watch.ended) == {"r90"}  # only r90 ended within the stray watch


def test_ended_entries_leave_once_past_the_stray_watch():
    watch = watches.built([], [("a", record("a", "FAILED", endedAt=T0))], 0, T0, T0 - STRAY)
    assert set(sync(watch, [], T0 + STRAY).watch.ended) == {"a"}
    assert sync(watch, [], T0 + STRAY + timedelta(seconds=1)).watch.ended == {}


def test_a_record_of_an_unknown_state_is_left_out():
    after = sync(empty(), [record("a", "MYSTERY")], T0)
    assert after.watch.active == {} and after.watch.ended == {}


def test_a_reread_replaces_the_active_entries_and_keeps_the_ended():
    watch = watches.built(
        [("ghost", record("ghost"))], [("e", record("e", "FAILED", endedAt=T0))], 4, T0, T0
    )
    again = reread(watch, [("a", record("a"))])
    assert set(again.active) == {"a"} and set(again.ended) == {"e"} and again.mark == 4


# --- the stored form -------------------------------------------------------------------


def big_watch(count: int, seed: int = 1) -> Watch:
    rng = random.Random(seed)
    active = {}
    for n in range(count):
        fields = {
            "vertexJob": f"projects/p/locations/us-central1/customJobs/{rng.getrandbits(60)}",
            "runId": f"run-{rng.getrandbits(40):x}",
            "attemptSubmittedAt": T0 - timedelta(seconds=rng.randrange(86_400)),
            "capacity": {"strategy": "SPOT", "reason": "ahead of the line " * 3},
        }
        active[f"r{n}"] = record(f"r{n}", **fields)
    return Watch(active, {}, T0, T0)


def test_the_stored_form_round_trips_times_and_versions():
    watch = watches.built(
        [("a", record("a", version=T0, vertexCreateTime=T0, capacity={"waitUntil": T0}))],
        [("e", record("e", "FAILED", 7, endedAt=T0))],
        T0 - timedelta(seconds=1),
        T0,
        T0 - STRAY,
    )
    back = watches.decode(watches.encode(watch))
    assert back is not None
    assert back.active["a"].raw == watch.active["a"].raw and back.active["a"].version == T0
    assert back.active["a"].raw["capacity"]["waitUntil"] == T0
    assert back.ended["e"].version == 7 and back.mark == watch.mark and back.synced_at == T0
    assert back.active["a"].key == "a"


def test_ten_thousand_records_fit_in_a_few_shards():
    shards = watches.encode(big_watch(10_000))
    assert len(shards) <= 2 and all(len(s) <= watches.SHARD_BYTES for s in shards)


def test_a_list_past_its_bound_is_refused(monkeypatch):
    monkeypatch.setattr(watches, "SHARD_BYTES", 2_000)
    with pytest.raises(WatchTooLarge, match="more than"):
        watches.encode(big_watch(2_000))


@pytest.mark.parametrize(
    "shards",
    [
        [],
        [b"not zlib"],
        [zlib.compress(b"[1, 2]")],
        [zlib.compress(json.dumps({"format": 99}).encode())],
        [zlib.compress(b"{" * 10)],
    ],
)
def test_a_stored_form_that_does_not_read_is_rebuilt(shards):
    assert watches.decode(shards) is None


def test_a_stored_form_that_inflates_past_its_bound_is_not_decoded(monkeypatch):
    monkeypatch.setattr(watches, "MAX_TEXT_BYTES", 1_000)
    bomb = zlib.compress(b" " * 1_000_000)  # a kilobyte that inflates to a megabyte
    assert len(bomb) < 2_000 and watches.decode([bomb]) is None


# --- the tally -------------------------------------------------------------------------


def ended(at: datetime, gpu: float = 3600.0, **cost: Any) -> dict[str, Any]:
    return {"endedAt": at, "gpuSeconds": gpu, "cost": cost}


def test_windows_add_whole_buckets_and_a_week_is_kept():
    tally = built({}, [], [], T0)
    tally = added(
        tally,
        {},
        [
            ended(T0 - timedelta(hours=1), costUsd=1.0, onDemandUsd=3.0, savingsUsd=2.0),
            ended(T0 - timedelta(days=2), costUsd=2.0),
            ended(T0 - KEEP - BUCKET, costUsd=99.0),  # older than the week: dropped
        ],
        [],
        T0,
    )
    day, week = tally.window(T0 - timedelta(hours=24)), tally.window(T0 - KEEP)
    assert (day.jobs, day.cost_usd, day.on_demand_usd, day.savings_usd) == (1, 1.0, 3.0, 2.0)
    assert (week.jobs, week.cost_usd) == (2, 3.0)


def test_an_unpriced_job_is_counted_as_such():
    tally = built({}, [ended(T0, costUsd=0.0, priced=False), ended(T0, costUsd=1.0)], [], T0)
    assert tally.window(T0 - timedelta(hours=1)).unpriced == 1


def test_the_newest_are_the_list_s_first_page_in_its_order():
    seen = [{"requestId": f"r{n:03d}", "createdAt": T0 + timedelta(seconds=n)} for n in range(150)]
    tie = [{"requestId": "a", "createdAt": T0}, {"requestId": "b", "createdAt": T0}]
    tally = added(built({}, [], seen[:100], T0), {}, [], seen[100:] + tie, T0)
    assert len(tally.newest) == NEWEST
    assert tallies.first_ids(tally, 3) == ["r149", "r148", "r147"]
    # Ties in time are broken by document id, descending, as the list's query orders them.
    few = added(built({}, [], [], T0), {}, [], tie, T0)
    assert tallies.first_ids(few, 2) == ["b", "a"]


def test_the_tally_round_trips_and_a_bad_one_reads_as_none():
    seen = [{"requestId": "é/1", "createdAt": T0}]
    tally = built({"RUNNING": 2}, [ended(T0, costUsd=1.25)], seen, T0)
    back = tallies.decode(tallies.encode(tally))
    assert back == tally
    broken = {**tallies.encode(tally), "buckets": "[[1, 2]]"}
    assert tallies.decode(broken) is None
    assert tallies.decode({**tallies.encode(tally), "format": 2}) is None
    assert tallies.decode({**tallies.encode(tally), "newest": "x" * 600_000}) is None
    assert tallies.decode(None) is None


def test_the_stored_tally_stays_small_at_its_bounds():
    seen = [{"requestId": "x" * 1500 + str(n), "createdAt": T0} for n in range(NEWEST)]
    at = [T0 - n * BUCKET for n in range(int(KEEP / BUCKET))]
    tally = built({"RUNNING": 10**6}, [ended(t, costUsd=123456.789) for t in at], seen, T0)
    stored = tallies.encode(tally)
    size = sum(len(str(v)) for v in stored.values())
    assert size < 300 * 1024 and tallies.decode(stored) == tally


def test_a_forged_list_of_containers_is_refused_before_it_is_decoded():
    text = b'{"format":1,"active":{"a":[[' + b"[]," * 500_000 + b"[]],1]}}"
    assert len(text) < watches.MAX_TEXT_BYTES
    assert watches.decode([zlib.compress(text)]) is None


def test_a_time_without_its_zone_or_a_number_that_is_no_number_reads_as_nothing():
    good = big_watch(2)
    text = zlib.decompress(b"".join(watches.encode(good))).decode()
    naive = text.replace("+00:00", "", 1)
    assert watches.decode([zlib.compress(naive.encode())]) is None
    assert (
        watches.decode([zlib.compress(text.replace('"format":1', '"format":NaN').encode())]) is None
    )
    stored = tallies.encode(built({}, [ended(T0)], [{"requestId": "a", "createdAt": T0}], T0))
    for field, forged in (
        ("buckets", "[[Infinity,1,0,0,0,0,0]]"),
        ("buckets", "[[1e300,1,0,0,0,0,0]]"),
        ("newest", '[["2026-01-01T00:00:00","a"]]'),
    ):
        assert tallies.decode({**stored, field: forged}) is None


def test_an_end_the_list_held_active_is_new_however_far_back_its_time():
    watch = watches.built([("a", record("a"))], [], 0, T0, T0 - STRAY)
    later = T0 + timedelta(hours=3)
    late = record("a", "SUCCEEDED", 2, endedAt=T0 - timedelta(hours=1))
    assert [s.raw["requestId"] for s in sync(watch, [late], later).newly_ended] == ["a"]
