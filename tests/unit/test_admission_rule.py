"""The admission rule (shared.domain.admission.rule) and its quota arithmetic
(shared.domain.admission.quota), on plain values: the order, the blocking rule, and properties
over random queues, cohorts, usage and workloads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain.admission.config import Pool, Queues, Resource, read_queues
from shared.domain.admission.quota import Ceiling, Limit, add, most_ever, shortfalls, usage_of
from shared.domain.admission.rule import (
    Standing,
    Workload,
    admit,
    decayed_usage,
    fair_share,
    queue_order,
)

T0 = datetime(2026, 12, 1, tzinfo=UTC)
R = Resource("us-central1", "NVIDIA_H100_80GB", Pool.PREEMPTIBLE)
OTHER = Resource("europe-west4", "NVIDIA_H100_80GB", Pool.PREEMPTIBLE)


def where(resource: Resource) -> dict[str, str]:
    return {
        "region": resource.region,
        "acceleratorType": resource.accelerator,
        "pool": resource.pool.value,
    }


def queue(name: str, nominal: int, **extra: Any) -> dict[str, Any]:
    quotas = [{**where(R), "nominal": nominal}]
    if "other" in extra:
        quotas.append({**where(OTHER), "nominal": extra.pop("other")})
    limits = {k: extra.pop(k) for k in ("borrowingLimit", "lendingLimit") if k in extra}
    quotas[0].update(limits)
    return {"name": name, "quotas": quotas, "priorities": {"high": 100, "normal": 0}, **extra}


def work(rid: str, q: str, gpus: int, priority: int = 0, minute: int = 0, resource: Resource = R):
    return Workload(rid, q, priority, T0 + timedelta(minutes=minute), {resource: gpus})


def ids(workloads: Any) -> list[str]:
    return [w.request_id for w in workloads]


def test_priority_goes_first_then_fair_share_then_arrival():
    queues = read_queues(
        {"queues": [queue("a", 32, weight=2), queue("b", 32, weight=1)], "projectQuota": []}
    )
    waiting = [
        work("a-early", "a", 4, minute=0),
        work("a-late", "a", 4, minute=2),
        work("b-mid", "b", 4, minute=1),
        work("b-high", "b", 4, priority=100, minute=9),
    ]
    # b holds 4 with weight 1 (share 4); a holds 4 with weight 2 (share 2): a goes first, then
    # a is at 4 and b at 4: a tie broken by arrival (b-mid before a-late).
    standing = Standing(usage={"a": {R: 4}, "b": {R: 4}})
    plan = admit(queues, standing, waiting)
    assert ids(plan.admitted) == ["b-high", "a-early", "a-late", "b-mid"]
    # Decayed usage moves a behind b.
    plan = admit(queues, Standing(decayed={"a": 40.0}), waiting)
    assert ids(plan.admitted) == ["b-high", "b-mid", "a-early", "a-late"]


def test_fair_share_is_decayed_plus_held_over_weight():
    queues = read_queues({"queues": [queue("a", 8, weight=4)]})
    assert fair_share(queues.queue("a"), {"a": {R: 6}}, {"a": 2.0}) == 2.0


def test_decay_halves_usage_after_one_half_life_and_is_sampling_free():
    assert decayed_usage(10.0, 0.0, 3600, 3600) == 5.0
    assert decayed_usage(10.0, 0.0, 7200, 3600) == 2.5
    stepped = 10.0
    for _ in range(60):
        stepped = decayed_usage(stepped, 4.0, 60, 3600)
    assert stepped == pytest.approx(decayed_usage(10.0, 4.0, 3600, 3600))
    with pytest.raises(ValueError):
        decayed_usage(1.0, 0.0, -1, 3600)


def test_a_held_head_keeps_lower_priority_off_what_it_waits_for():
    queues = read_queues({"queues": [queue("a", 32, other=8), queue("b", 16, other=8)]})
    ceiling = Ceiling({R: 16})
    standing = Standing(usage={"a": {R: 10}}, ceiling=ceiling)
    waiting = [
        work("a-big-high", "a", 8, priority=100),
        work("b-small-low", "b", 4),  # would fit the 6 free, but the high one waits for them
        work("b-elsewhere-low", "b", 4, resource=OTHER, minute=1),
    ]
    plan = admit(queues, standing, waiting)
    assert [h.workload.request_id for h in plan.held] == ["a-big-high", "b-small-low"]
    assert plan.held[0].shortfalls[0].limit is Limit.PROJECT
    # b's queue is StrictFIFO behind its held head: its other workload waits this pass.
    assert ids(plan.admitted) == []
    plan = admit(queues, standing, [waiting[0], waiting[2]])
    assert ids(plan.admitted) == ["b-elsewhere-low"]


def test_same_priority_elsewhere_goes_within_its_nominal_or_to_catch_up_never_past():
    queues = read_queues(
        {
            "queues": [
                queue("a", 8, cohort="c", weight=10),
                queue("b", 8, cohort="c"),
            ]
        }
    )
    # a borrows 4 of b's 8. b's share (0) is below a's (12 / 10): b-small goes first, then
    # a-next would need 18 of the cohort's 16.
    standing = Standing(usage={"a": {R: 12}})
    waiting = [work("a-next", "a", 4), work("b-small", "b", 2, minute=1)]
    plan = admit(queues, standing, waiting)
    assert ids(plan.admitted) == ["b-small"]
    assert ids(h.workload for h in plan.held) == ["a-next"]
    # b's head of 8 does not fit (a holds 10 of 16); a's next of the same priority would
    # borrow what b waits for, and would leave a's share (100 + 12) / 10 above b's with its
    # head admitted (8): held too.
    waiting = [work("b-big", "b", 8), work("a-borrow", "a", 2, minute=1)]
    plan = admit(queues, Standing(usage={"a": {R: 10}}, decayed={"a": 100.0}), waiting)
    assert ids(plan.admitted) == []
    # Without that history a's share would be 12 / 10, below b's 8: it catches up, and goes.
    plan = admit(queues, Standing(usage={"a": {R: 10}}), waiting)
    assert ids(plan.admitted) == ["a-borrow"]
    # b goes first (share 6 against a's (100 + 4) / 10) and is held; a's next fits within
    # a's own nominal, so it goes beside b's held head.
    plan = admit(
        queues,
        Standing(usage={"a": {R: 4}, "b": {R: 6}}, decayed={"a": 100.0}),
        [
            work("b-big", "b", 8),
            work("a-own", "a", 2, minute=1),
        ],
    )
    assert ids(plan.admitted) == ["a-own"]


def test_cohort_borrowing_respects_borrowing_and_lending_limits():
    queues = read_queues(
        {
            "queues": [
                queue("a", 8, cohort="c", borrowingLimit=4),
                queue("b", 8, cohort="c", lendingLimit=2),
            ]
        }
    )
    a, b = queues.queue("a"), queues.queue("b")
    assert most_ever(queues, a, R) == 10  # 8 + min(4 borrowing, 2 lent)
    assert most_ever(queues, b, R) == 16  # its 8 + a lends all 8
    assert not shortfalls(queues, {"a": {R: 8}}, Ceiling(), a, {R: 2})
    assert shortfalls(queues, {"a": {R: 10}}, Ceiling(), a, {R: 1})
    # b keeps 6 of its 8: a at 10 cannot have them, b can.
    assert not shortfalls(queues, {"a": {R: 10}}, Ceiling(), b, {R: 6})


def test_an_inadmissible_workload_is_set_aside_and_blocks_nothing():
    queues = read_queues({"queues": [queue("a", 8)]})
    waiting = [work("huge", "a", 9, priority=100), work("ok", "a", 8), work("lost", "z", 1)]
    plan = admit(queues, Standing(), waiting)
    assert ids(plan.inadmissible) == ["huge", "lost"]
    assert ids(plan.admitted) == ["ok"]


def test_queue_order_is_priority_then_arrival_then_id():
    ws = [work("b", "a", 1, minute=1), work("a", "a", 1, minute=1), work("c", "a", 1, 100, 5)]
    assert ids(queue_order(ws)) == ["c", "a", "b"]


# Properties over random configurations: three queues, some in a cohort, two resources.

NAMES = ("qa", "qb", "qc")


@st.composite
def configurations(draw: st.DrawFn) -> tuple[Queues, Standing, list[Workload]]:
    entries = []
    for name in NAMES:
        cohort = draw(st.sampled_from([None, "c", "c"]))
        quota: dict[str, Any] = {**where(R), "nominal": draw(st.integers(0, 16))}
        if cohort is not None:
            for key in ("borrowingLimit", "lendingLimit"):
                limit = draw(st.none() | st.integers(0, 16))
                if limit is not None and (key == "borrowingLimit" or limit <= quota["nominal"]):
                    quota[key] = limit
        other = {**where(OTHER), "nominal": draw(st.integers(0, 8))}
        entry: dict[str, Any] = {
            "name": name,
            "weight": draw(st.sampled_from([1, 2, 3])),
            "quotas": [quota, other],
            "priorities": {"high": 100, "normal": 0},
        }
        if cohort is not None:
            entry["cohort"] = cohort
        entries.append(entry)
    queues = read_queues({"queues": entries})
    limit = draw(st.none() | st.integers(0, 40))
    ceiling = Ceiling({R: limit} if limit is not None else {})
    waiting = [
        Workload(
            f"w{i}",
            draw(st.sampled_from(NAMES)),
            draw(st.sampled_from([0, 50, 100])),
            T0 + timedelta(minutes=draw(st.integers(0, 30))),
            {draw(st.sampled_from([R, R, OTHER])): draw(st.integers(1, 12))},
        )
        for i in range(draw(st.integers(0, 14)))
    ]
    decayed = {name: draw(st.floats(0, 20)) for name in NAMES}
    return queues, Standing({}, ceiling, decayed), waiting


def within_every_limit(queues: Queues, usage: dict[str, dict[Resource, int]], ceiling: Ceiling):
    for resource in (R, OTHER):
        limit = ceiling.limit(resource)
        total = sum(held.get(resource, 0) for held in usage.values())
        assert limit is None or total <= limit
        cohorts: dict[str | None, list[str]] = {}
        for q in queues.queues.values():
            quota = q.quota(resource)
            used = usage.get(q.name, {}).get(resource, 0)
            if q.unbounded:
                continue
            if quota.borrowing_limit is not None:
                assert used <= quota.nominal + quota.borrowing_limit
            if q.cohort is None:
                assert used <= quota.nominal
            else:
                cohorts.setdefault(q.cohort, []).append(q.name)
        for members in cohorts.values():
            pool = sum(queues.queue(m).quota(resource).lendable for m in members)
            drawn = sum(
                max(0, usage.get(m, {}).get(resource, 0) - queues.queue(m).quota(resource).kept)
                for m in members
            )
            assert drawn <= pool


@settings(max_examples=300, deadline=None)
@given(configurations())
def test_admitting_never_exceeds_a_queue_a_cohort_or_the_project(config):
    queues, standing, waiting = config
    plan = admit(queues, standing, waiting)
    usage = usage_of((w.queue, w.demand) for w in plan.admitted)
    within_every_limit(queues, usage, standing.ceiling)
    decided = ids(plan.admitted) + ids(h.workload for h in plan.held) + ids(plan.inadmissible)
    assert len(decided) == len(set(decided))


@settings(max_examples=300, deadline=None)
@given(configurations())
def test_no_lower_priority_takes_what_a_held_higher_one_waits_for(config):
    queues, standing, waiting = config
    plan = admit(queues, standing, waiting)
    for held in plan.held:
        h = held.workload
        # Without every lower-priority admission, and with every other head held at its
        # priority or above charged, it still would not fit: the lower ones took nothing of it.
        usage = usage_of((w.queue, w.demand) for w in plan.admitted if w.priority >= h.priority)
        for other in plan.held:
            if other.workload is not h and other.workload.priority >= h.priority:
                add(usage, other.workload.queue, other.workload.demand, 1)
        assert shortfalls(queues, usage, standing.ceiling, queues.queue(h.queue), h.demand)


@settings(max_examples=200, deadline=None)
@given(configurations())
def test_queues_keep_their_order_and_no_workload_is_dropped(config):
    queues, standing, waiting = config
    plan = admit(queues, standing, waiting)
    # Within a queue, admissions keep the queue's order.
    for name in NAMES:
        mine = [w for w in plan.admitted if w.queue == name]
        assert mine == queue_order(mine)
    # Every workload is admitted, inadmissible, or waits in a queue whose head is held.
    blocked = {h.workload.queue for h in plan.held}
    decided = {w.request_id for w in (*plan.admitted, *plan.inadmissible)}
    for w in waiting:
        if w.request_id in decided or w.queue in blocked:
            continue
        raise AssertionError(f"{w.request_id} neither admitted, held nor behind a held head")
