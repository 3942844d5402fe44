"""Backfill, rule 4 of the admission rule (shared.domain.admission.rule), and what the ledger
keeps for it (shared.domain.admission.ledger), on plain values: a workload behind a held one
goes first only when it keeps the held one's shadow: it is sure to have given its GPUs back
by then, or the held one still fits beside it then."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain.admission.config import Pool, Resource, read_queues
from shared.domain.admission.ledger import (
    MAX_LIMIT_SECONDS,
    Entry,
    Ledger,
    admission_fields,
    entry_of,
    hold_limit,
    workload_of,
)
from shared.domain.admission.quota import Ceiling, shortfalls, usage_of
from shared.domain.admission.rule import Release, Standing, Workload, admit, shadow_time

T0 = datetime(2026, 12, 1, tzinfo=UTC)
R = Resource("us-central1", "NVIDIA_H100_80GB", Pool.PREEMPTIBLE)
HOUR = 3600.0


def queue(name: str, nominal: int, **extra: Any) -> dict[str, Any]:
    quota = {"region": R.region, "acceleratorType": R.accelerator, "pool": R.pool.value}
    return {
        "name": name,
        "quotas": [{**quota, "nominal": nominal}],
        "priorities": {"high": 100, "mid": 50, "normal": 0},
        **extra,
    }


def work(rid: str, q: str, gpus: int, *, limit: float | None, priority: int = 0, minute: int = 0):
    return Workload(rid, q, priority, T0 + timedelta(minutes=minute), {R: gpus}, limit)


def ids(workloads: Any) -> list[str]:
    return [w.request_id for w in workloads]


#: One queue of 16 GPUs, 12 of them held by a job sure to end within two hours.
ONE = read_queues({"queues": [queue("a", 16)]})
RUNNING = Standing(
    usage={"a": {R: 12}},
    now=T0,
    releases=[Release(T0 + timedelta(hours=2), "a", {R: 12})],
)


def test_a_job_that_ends_before_the_held_heads_shadow_goes_first():
    waiting = [
        work("big", "a", 8, limit=None),  # the head: 4 free, it waits for the 12
        work("short", "a", 4, limit=1.5 * HOUR, minute=1),
        work("long", "a", 4, limit=3 * HOUR, minute=2),
    ]
    plan = admit(ONE, RUNNING, waiting)
    assert ids(plan.admitted) == ["short"]
    assert ids(h.workload for h in plan.held) == ["big"]
    # The shadow: the 12 are back in two hours; the backfilled 4 are back before then.
    assert shadow_time(ONE, RUNNING, RUNNING.releases, waiting[0]) == T0 + timedelta(hours=2)


def test_without_the_time_or_a_known_end_nothing_goes_before_a_held_head():
    short = work("short", "a", 4, limit=1.5 * HOUR, minute=1)
    big = work("big", "a", 8, limit=None)
    # No time: the rule is StrictFIFO behind the held head, as before backfill.
    plan = admit(ONE, dataclasses.replace(RUNNING, now=None), [big, short])
    assert ids(plan.admitted) == []
    # The running job's end is not known: the held head's shadow is never, so none goes.
    plan = admit(ONE, dataclasses.replace(RUNNING, releases=()), [big, short])
    assert ids(plan.admitted) == []


def test_a_job_with_no_limit_goes_only_into_the_room_the_held_head_leaves():
    # At the shadow (2 h) the 12 are back: 16 free, big takes 8, so 8 are never its.
    unknown = work("unknown", "a", 4, limit=None, minute=1)
    assert ids(admit(ONE, RUNNING, [work("big", "a", 8, limit=None), unknown]).admitted) == [
        "unknown"
    ]
    # A head of 14 leaves 2 at its shadow: 4 held for ever would delay it, for ever.
    plan = admit(ONE, RUNNING, [work("big", "a", 14, limit=None), unknown])
    assert ids(plan.admitted) == []
    assert ids(h.workload for h in plan.held) == ["big"]


def test_a_release_already_past_counts_as_now_so_only_the_room_backfills():
    # A retry under the same entry has outlived its first attempt's limit: any moment now.
    past = dataclasses.replace(RUNNING, releases=[Release(T0 - timedelta(hours=1), "a", {R: 12})])
    short = work("short", "a", 4, limit=60.0, minute=1)
    assert ids(admit(ONE, past, [work("big", "a", 14, limit=None), short]).admitted) == []
    # A head of 8 never needs the 4 free now: with the 12 back, it fits beside them.
    assert ids(admit(ONE, past, [work("big", "a", 8, limit=None), short]).admitted) == ["short"]


def test_a_higher_priority_that_fits_but_cannot_backfill_bars_every_lower_one():
    queues = read_queues({"queues": [queue("a", 16), queue("b", 16)]})
    standing = dataclasses.replace(RUNNING, ceiling=Ceiling({R: 16}))  # the project's 16
    head = work("head", "a", 14, limit=None, priority=100)  # leaves 2 at its shadow
    mid = work("mid", "b", 4, limit=3 * HOUR, priority=50)  # fits, ends after the shadow
    low = work("low", "b", 4, limit=HOUR, priority=0, minute=-5)  # would end before it
    plan = admit(queues, standing, [head, mid, low])
    # Backfilling "low" would admit a lower priority while a higher one that fits waits.
    assert ids(plan.admitted) == []
    plan = admit(queues, standing, [head, dataclasses.replace(mid, limit_seconds=HOUR), low])
    assert ids(plan.admitted) == ["mid"]  # then b's line is "low", behind the 4 it took


def test_this_passs_backfills_end_before_every_held_shadow():
    # Two held heads of different sizes: the smaller's shadow comes first, and bounds all.
    queues = read_queues({"queues": [queue("a", 32), queue("b", 32)]})
    standing = Standing(
        usage={"a": {R: 8}, "b": {R: 6}},
        ceiling=Ceiling({R: 18}),
        now=T0,
        releases=[
            Release(T0 + timedelta(hours=1), "a", {R: 8}),
            Release(T0 + timedelta(hours=4), "b", {R: 6}),
        ],
    )
    waiting = [
        work("a-head", "a", 12, limit=None, priority=100),  # fits at 1 h, when a's 8 go
        work("b-head", "b", 14, limit=None, priority=100, minute=1),  # fits at 4 h
        work("fill-45m", "a", 2, limit=0.75 * HOUR, minute=2),
        # Fits beside it, ends too late, and a-head needs all that is free at 1 h.
        work("fill-2h", "b", 2, limit=2 * HOUR, minute=3),
    ]
    plan = admit(queues, standing, waiting)
    assert ids(plan.admitted) == ["fill-45m"]


def test_a_job_that_runs_past_the_shadow_goes_when_the_held_head_still_fits_beside_it():
    """EASY backfilling's extra GPUs: what the releases due by the shadow free beyond the
    held head's demand may go to a job of any length, as long as this pass has not taken
    them already."""
    standing = Standing(
        usage={"a": {R: 12}},
        now=T0,
        releases=[
            Release(T0 + timedelta(hours=1), "a", {R: 8}),
            Release(T0 + timedelta(hours=6), "a", {R: 4}),
        ],
    )
    waiting = [
        work("big", "a", 10, limit=None),  # 4 free; at 1 h 12 free: 2 more than it needs
        work("four", "a", 4, limit=3 * HOUR, minute=1),  # would leave it 10 - 2 short
        work("two", "a", 2, limit=3 * HOUR, minute=2),  # takes the 2 extra
        work("two-more", "a", 2, limit=None, minute=3),  # fits now; the extra is taken
    ]
    plan = admit(ONE, standing, waiting)
    assert ids(plan.admitted) == ["two"]
    assert ids(h.workload for h in plan.held) == ["big"]
    # The shadow is kept: with "two" running until 3 h, big still fits at 1 h.
    after = dataclasses.replace(standing, usage={"a": {R: 14}})
    gone = [*standing.releases, Release(T0 + timedelta(hours=3), "a", {R: 2})]
    assert shadow_time(ONE, after, gone, waiting[0]) == T0 + timedelta(hours=1)


def test_a_backfill_leaves_every_held_head_its_room():
    queues = read_queues({"queues": [queue("a", 32), queue("b", 32)]})  # the project's 16 bind
    standing = Standing(
        usage={"a": {R: 8}, "b": {R: 4}},
        ceiling=Ceiling({R: 16}),
        now=T0,
        releases=[
            Release(T0 + timedelta(hours=1), "a", {R: 8}),
            Release(T0 + timedelta(hours=6), "b", {R: 4}),
        ],
    )
    # a-head's shadow is 1 h, with 2 to spare; b-head, charged a-head's 10 until 3 h, fits
    # at 3 h with none to spare.
    a_head = work("a-head", "a", 10, limit=2 * HOUR, priority=100)
    b_head = work("b-head", "b", 12, limit=None, priority=50)
    fill = work("fill", "a", 2, limit=4 * HOUR)  # past both shadows: it would delay b-head
    assert ids(admit(queues, standing, [a_head, b_head, fill]).admitted) == []
    # Back by b-head's shadow, it only takes a-head's 2 to spare at its own.
    fill = dataclasses.replace(fill, limit_seconds=2.5 * HOUR)
    assert ids(admit(queues, standing, [a_head, b_head, fill]).admitted) == ["fill"]


@st.composite
def backfill_configurations(draw: st.DrawFn):
    names = ("qa", "qb")
    queues = read_queues(
        {
            "queues": [
                queue(n, draw(st.integers(0, 16)), weight=draw(st.sampled_from([1, 2])))
                for n in names
            ]
        }
    )
    ceiling = Ceiling({R: draw(st.integers(4, 24))})
    running = [
        (
            draw(st.sampled_from(names)),
            draw(st.integers(1, 6)),
            draw(st.none() | st.integers(-2, 6)),
        )
        for _ in range(draw(st.integers(0, 4)))
    ]
    usage = usage_of((q, {R: n}) for q, n, _ in running)
    releases = [Release(T0 + timedelta(hours=h), q, {R: n}) for q, n, h in running if h is not None]
    waiting = [
        Workload(
            f"w{i}",
            draw(st.sampled_from(names)),
            draw(st.sampled_from([0, 50, 100])),
            T0 + timedelta(minutes=draw(st.integers(0, 30))),
            {R: draw(st.integers(1, 12))},
            draw(st.none() | st.sampled_from([HOUR, 3 * HOUR, 8 * HOUR])),
        )
        for i in range(draw(st.integers(0, 10)))
    ]
    return queues, Standing(usage, ceiling, now=T0, releases=releases), waiting


@settings(max_examples=300, deadline=None)
@given(backfill_configurations())
def test_with_no_end_known_backfill_changes_nothing(config):
    # No admitted job's end is known, nor any waiting one's: no held head has a shadow.
    queues, standing, waiting = config
    standing = dataclasses.replace(standing, releases=())
    plain = [dataclasses.replace(w, limit_seconds=None) for w in waiting]
    with_time = admit(queues, standing, plain)
    without = admit(queues, dataclasses.replace(standing, now=None), plain)
    assert with_time == without


def _ends(workloads: Any) -> list[Release]:
    return [
        Release(T0 + timedelta(seconds=w.limit_seconds), w.queue, w.demand)
        for w in workloads
        if w.limit_seconds is not None
    ]


@st.composite
def crowded_configurations(draw: st.DrawFn):
    """The project's quota binds, the running jobs' ends are known, a large head waits and
    small jobs of every length wait behind it: where a backfill may take the head's room."""
    queues = read_queues({"queues": [queue("qa", 32), queue("qb", 32)]})
    quota = draw(st.integers(8, 24))
    running = [
        (draw(st.sampled_from(["qa", "qb"])), draw(st.integers(1, 6)), draw(st.integers(-1, 6)))
        for _ in range(draw(st.integers(1, 5)))
    ]
    usage = usage_of((q, {R: n}) for q, n, _ in running)
    held = sum(n for _, n, _ in running)
    if held > quota:
        quota = held
    releases = [Release(T0 + timedelta(hours=h), q, {R: n}) for q, n, h in running]
    head = Workload("head", "qa", 100, T0, {R: draw(st.integers(quota - held + 1, quota))}, None)
    waiting = [
        Workload(
            f"w{i}",
            draw(st.sampled_from(["qa", "qb"])),
            draw(st.sampled_from([0, 50])),
            T0 + timedelta(minutes=i),
            {R: draw(st.integers(1, 4))},
            draw(st.none() | st.sampled_from([0.5 * HOUR, 2 * HOUR, 5 * HOUR, 9 * HOUR])),
        )
        for i in range(draw(st.integers(1, 6)))
    ]
    return queues, Standing(usage, Ceiling({R: quota}), now=T0, releases=releases), [head, *waiting]


@settings(max_examples=500, deadline=None)
@given(backfill_configurations() | crowded_configurations())
def test_a_backfill_stays_within_every_limit_and_never_delays_the_first_held_head(config):
    queues, standing, waiting = config
    plan = admit(queues, standing, waiting)
    without = admit(queues, dataclasses.replace(standing, now=None, releases=()), waiting)
    usage = {q: dict(h) for q, h in standing.usage.items()}
    for w in plan.admitted:
        assert not shortfalls(queues, usage, standing.ceiling, queues.queue(w.queue), w.demand)
        usage.setdefault(w.queue, {})[R] = usage.get(w.queue, {}).get(R, 0) + w.demand[R]
    decided = ids(plan.admitted) + ids(h.workload for h in plan.held) + ids(plan.inadmissible)
    assert len(decided) == len(set(decided))
    # What backfill added keeps the first head held without it: it fits, with all that was
    # admitted running until its limit, no later than it would have without backfill.
    extra = [w for w in plan.admitted if w not in without.admitted]
    if not (extra and without.held):
        return
    first = without.held[0].workload
    if first.priority < max(w.priority for w in waiting):
        return  # a lower head's shadow charges the higher ones held: not recomputed here
    promised = shadow_time(
        queues,
        dataclasses.replace(standing, usage=usage_of(_held(standing, without.admitted))),
        [*standing.releases, *_ends(without.admitted)],
        first,
    )
    assert promised is not None  # no shadow, no backfill
    kept = shadow_time(
        queues,
        dataclasses.replace(standing, usage=usage_of(_held(standing, plan.admitted))),
        [*standing.releases, *_ends(plan.admitted)],
        first,
    )
    assert kept is not None and kept <= promised


def _held(standing: Standing, admitted: Any) -> list[tuple[str, Any]]:
    return [
        *((q, held) for q, held in standing.usage.items()),
        *((w.queue, w.demand) for w in admitted),
    ]


def test_the_limit_is_known_only_where_vertex_enforces_it():
    assert hold_limit("customJob", "FLEX_START", 1800.0, 7200.0) == 9000.0
    assert hold_limit("customJob", "SPOT", None, 7200.0) is None  # pending has no end
    assert hold_limit("customJob", "STANDARD", None, 7200.0) is None
    assert hold_limit("customJob", "AUTO", 1800.0, 7200.0) is None  # chosen at its create
    assert hold_limit("hyperparameterTuningJob", "FLEX_START", 1800.0, 7200.0) is None
    assert hold_limit("customJob", "FLEX_START", None, 7200.0) is None  # 0s: waits for ever
    # A fallback ladder may move a retry to Spot, whose wait has no end.
    assert hold_limit("customJob", "FLEX_START", 1800.0, 7200.0, ladder=True) is None
    # Past DWS's longest wait and run: not a limit (and its end would not be a time).
    assert hold_limit("customJob", "FLEX_START", 7 * 86400.0, 7 * 86400.0) == MAX_LIMIT_SECONDS
    assert hold_limit("customJob", "FLEX_START", 315576000000.0, 7200.0) is None


def test_nothing_backfills_before_a_head_whose_queue_preempts():
    """Its victims' GPUs come back at its asking; a backfill beside it would take them (a
    job just created is never a victim), and the head would wait for the backfill."""
    queues = read_queues(
        {
            "queues": [
                queue("a", 16, preemption={"withinQueue": True}),
                queue("b", 16),
            ]
        }
    )
    standing = dataclasses.replace(RUNNING, ceiling=Ceiling({R: 16}))
    head = work("head", "a", 8, limit=None, priority=100)
    low = work("low", "b", 4, limit=600.0)
    plan = admit(queues, standing, [head, low])
    assert ids(plan.admitted) == []
    assert ids(h.workload for h in plan.held) == ["head", "low"]
    # The same queue without preemption: the short one backfills.
    plain = read_queues({"queues": [queue("a", 16), queue("b", 16)]})
    assert ids(admit(plain, standing, [head, low]).admitted) == ["low"]


def test_a_retry_in_its_backoff_is_held_and_keeps_its_place():
    queues = read_queues({"queues": [queue("a", 16), queue("b", 16)]})
    standing = Standing(ceiling=Ceiling({R: 8}), now=T0)
    retry = dataclasses.replace(
        work("retry", "a", 8, limit=HOUR, priority=100), not_before=T0 + timedelta(hours=1)
    )
    long = work("long", "b", 4, limit=2 * HOUR)
    short = work("short", "b", 4, limit=0.5 * HOUR, minute=1)
    plan = admit(queues, standing, [retry, long, short])
    # It may not start for an hour: held, and what it waits for is kept from lower
    # priorities, but for a job sure to be done by then.
    assert ids(h.workload for h in plan.held) == ["retry", "long"]
    assert ids(plan.admitted) == ["short"]
    # Once the backoff is over it goes; the estimate's replay (no time) takes it as due.
    later = dataclasses.replace(standing, now=T0 + timedelta(hours=1))
    assert ids(admit(queues, later, [retry, long, short]).admitted) == ["retry"]
    assert ids(admit(queues, Standing(ceiling=Ceiling({R: 8})), [retry]).admitted) == ["retry"]


def test_the_limit_travels_from_the_record_to_the_workload_the_entry_and_the_ledger():
    fields = admission_fields("a", 0, {R: 4}, T0, None, limit_seconds=9000.0)
    workload = workload_of("r1", fields)
    assert workload is not None and workload.limit_seconds == 9000.0
    admitted = {**fields, "stage": "ADMITTED", "admittedAt": T0}
    entry = entry_of({"admission": admitted})
    assert entry == Entry("a", {R: 4}, T0, 9000.0)
    ledger = Ledger({"r1": entry, "r2": Entry("a", {R: 2}, T0)})
    stored = Ledger.decode(ledger.to_dict())
    assert stored.held == ledger.held
    assert stored.releases() == [Release(T0 + timedelta(seconds=9000), "a", {R: 4})]
    # A stored limit that does not read is not known: never a backfill on a guess.
    for bad in (-1, 0, True, "9000", float("inf"), float("nan"), MAX_LIMIT_SECONDS + 1, 3e11):
        raw = ledger.to_dict()
        raw["held"][0]["limitSeconds"] = bad
        assert Ledger.decode(raw).held["r1"].limit_seconds is None
        assert workload_of("r1", {**fields, "limitSeconds": bad}).limit_seconds is None  # type: ignore[union-attr]


def test_a_retry_in_its_backoff_never_stalls_its_queue_nor_loses_its_place():
    queues = read_queues({"queues": [queue("a", 16)]})
    standing = Standing(ceiling=Ceiling({R: 12}), now=T0)
    retry = dataclasses.replace(
        work("retry", "a", 8, limit=None), not_before=T0 + timedelta(minutes=30)
    )
    beside = work("beside", "a", 4, limit=None, minute=1)  # fits beside the 8 it will need
    instead = work("instead", "a", 8, limit=None, minute=2)  # would take them
    plan = admit(queues, standing, [retry, instead, beside])
    assert ids(plan.admitted) == ["beside"]
    assert ids(h.workload for h in plan.held) == ["retry", "instead"]


def _two_queues(qa: int, qb: int) -> Any:
    return read_queues({"queues": [queue("qa", qa), queue("qb", qb)]})


def test_a_backfill_leaves_room_for_what_rule_2_still_lets_in_at_the_held_heads_priority():
    """Found by Hypothesis: qb's 9-GPU head is held (8 free of 10); qb's 1-GPU backfill would
    fit beside it at its shadow, but qa's head of the same priority, within qa's nominal,
    is let in after it by rule 2 without the held head charged: together they would leave
    the head no room. The backfill is judged beside it, so it does not go."""
    queues = _two_queues(3, 10)
    standing = Standing(
        usage={"qa": {R: 2}}, ceiling=Ceiling({R: 10}), now=T0, releases=[Release(T0, "qa", {R: 2})]
    )
    waiting = [
        work("w0", "qb", 9, limit=None, priority=50),
        work("w1", "qa", 1, limit=None),
        work("w2", "qa", 1, limit=None, priority=50),
        work("w3", "qb", 1, limit=None, priority=50),
    ]
    plan = admit(queues, standing, waiting)
    assert ids(plan.admitted) == ["w2"]
    assert ids(h.workload for h in plan.held)[:1] == ["w0"]


def test_a_shadow_taken_by_an_admission_of_its_priority_lets_nothing_backfill():
    """Found by Hypothesis: qa's 4-GPU head is held for qb's 1-hour job (shadow: 1 hour); qb's
    next head of the same priority, within qb's nominal, is let in by rule 2 and holds its GPU
    for ever: the held head has no shadow any more, so nothing backfills before it."""
    queues = _two_queues(5, 2)
    standing = Standing(usage={}, ceiling=Ceiling({R: 4}), now=T0, releases=[])
    waiting = [
        work("w0", "qb", 1, limit=HOUR, priority=50),
        work("w1", "qa", 1, limit=HOUR),
        work("w2", "qa", 4, limit=None, priority=50),
        work("w3", "qb", 1, limit=None, priority=50),
    ]
    plan = admit(queues, standing, waiting)
    assert ids(plan.admitted) == ["w0", "w3"]
    assert ids(h.workload for h in plan.held)[:1] == ["w2"]
