"""The serving chart's geometry, from ``serving`` maps as the tick stores them (and as a hand
edit might leave them): steps, the required line, the shading, the marks, the summary."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain.serving.model import HISTORY_LIMIT
from shared.status.chart import AXIS_HEIGHT, RIGHT_PAD, WIDTH
from shared.status.serving_chart import (
    LEFT,
    MARK_ROOM,
    PLOT_HEIGHT,
    layout,
    serving_facts,
)

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
TOP = AXIS_HEIGHT + MARK_ROOM
BOTTOM = TOP + PLOT_HEIGHT


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def change(minutes: float, spot: Any, on_demand: Any = 0, required: Any = 2, cause: Any = ""):
    return {
        "at": at(minutes).isoformat(),
        "spot": spot,
        "onDemand": on_demand,
        "required": required,
        "cause": cause,
    }


def stored(*history: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A serving map as the tick writes it (the fields the chart does not read left out)."""
    return {
        "spotDeployedModelId": "111",
        "phase": "SERVING",
        "accountedAt": at(0).isoformat(),
        "last": {"spot": 2, "onDemand": 0, "required": 2},
        "hedges": 0,
        "history": list(history),
        **fields,
    }


def hedged_and_restored() -> dict[str, Any]:
    """Spot loses both nodes at +5m; hedged at +10m; the fallback serves at +30m; Spot is
    back at +40m; restored (fallback undeployed) at +75m."""
    return stored(
        change(0, 2),
        change(5, 0, cause="serving 2+0 -> 0+0 of 2 (Spot+on-demand)"),
        change(10, 0, cause="hedge: 2 on-demand replica(s) after 300 s with 0 of 2 Spot replicas"),
        change(30, 0, 2, cause="serving 0+0 -> 0+2 of 2 (Spot+on-demand); hedged: traffic"),
        change(40, 2, 2, cause="serving 0+2 -> 2+2 of 2 (Spot+on-demand)"),
        change(70, 2, 2, cause="restore: traffic back to Spot"),
        change(75, 2, 0, cause="serving 2+2 -> 2+0 of 2; restored: the fallback is undeployed"),
        hedges=1,
    )


def test_no_history_yet_is_an_empty_chart():
    for serving in ({}, stored(), None, "not a map", {"history": "nope"}):
        chart = layout(serving, now=T0)
        assert chart.steps == () and chart.marks == () and chart.required_path == ""
        assert chart.summary == "No serving-capacity change recorded yet."
        assert (chart.start, chart.end) == (T0 - timedelta(minutes=1), T0)


def test_one_change_holds_until_now():
    chart = layout(stored(change(0, 2)), now=at(60))
    (step,) = chart.steps
    assert (step.begin, step.end, step.spot, step.on_demand, step.short) == (
        at(0),
        at(60),
        2,
        0,
        False,
    )
    assert step.x == LEFT and step.x + step.width == pytest.approx(WIDTH - RIGHT_PAD, abs=0.2)
    # Two of two required: the Spot bar fills the plot, and the required line runs along its top.
    assert (step.spot_y, step.spot_height, step.on_demand_height) == (TOP, PLOT_HEIGHT, 0)
    assert chart.required_path == f"M{float(LEFT)},{float(TOP)} H{step.x + step.width}"
    assert [lv.label for lv in chart.levels] == ["0", "1", "2"]
    assert chart.axis[0].label == "+0" and chart.axis[-1].label == "+1h"
    assert chart.summary.startswith("1 change(s) over 1h00m, now 2 Spot and 0 on-demand of 2")


def test_a_change_made_just_now_still_has_a_minute_of_axis():
    chart = layout(stored(change(0, 1)), now=at(0))
    assert (chart.start, chart.end) == (at(-1), at(0))
    assert chart.steps[0].width == 0


def test_spot_and_on_demand_stack_under_the_required_line_and_short_time_is_shaded():
    chart = layout(hedged_and_restored(), now=at(90))
    steps = chart.steps
    assert [(s.spot, s.on_demand) for s in steps] == [
        (2, 0), (0, 0), (0, 0), (0, 2), (2, 2), (2, 2), (2, 0)
    ]  # fmt: skip
    assert [s.short for s in steps] == [False, True, True, False, False, False, False]
    # The scale reaches the most that ever served (4 replicas): two replicas are half of it.
    both = steps[4]
    assert both.spot_y + both.spot_height == BOTTOM
    assert both.on_demand_y + both.on_demand_height == both.spot_y
    assert both.spot_height == both.on_demand_height == PLOT_HEIGHT / 2
    # Each step runs to the next one's start: no gap, no overlap.
    for before, after in itertools.pairwise(steps):
        assert before.x + before.width == pytest.approx(after.x, abs=0.2)
    assert "fewer than required for 25m00s" in chart.summary


def test_hedge_and_restore_are_marked_with_their_causes():
    chart = layout(hedged_and_restored(), now=at(90))
    assert [(m.kind, m.label, m.at) for m in chart.marks] == [
        ("hedge", "hedge", at(10)),
        ("restore", "restored", at(75)),
    ]
    hedge, restore = chart.marks
    assert hedge.title.startswith("hedge at 2026-12-01 10:10:00Z: hedge: 2 on-demand")
    assert hedge.y2 == restore.y2 == BOTTOM and hedge.y1 < TOP
    # "restore: traffic back to Spot" is a step of the restore, not a mark of its own.
    assert "hedge at 2026-12-01 10:10:00Z, restored at 2026-12-01 11:15:00Z" in chart.summary


def test_marks_close_together_keep_their_labels_apart():
    chart = layout(
        stored(
            change(0, 0, cause="hedge: 2"),
            change(1, 0, cause="hedge failed: refused"),
            change(60, 2, cause="restored: gone"),
        ),
        now=at(60),
    )
    first, second, last = chart.marks
    assert second.kind == "failed" and first.label_y != second.label_y
    assert last.anchor == "end" and last.label_x < last.x  # kept inside the right edge


def test_the_current_phase_hedged_since_a_time_no_hedge_explains_is_marked():
    serving = hedged_and_restored()
    serving["history"] = serving["history"][:5]  # Spot back at +40m, then short again at +50m
    serving["history"].append(change(50, 1, 2, cause="serving 2+2 -> 1+2 of 2 (Spot+on-demand)"))
    serving.update(phase="HEDGED", since=at(50).isoformat())
    chart = layout(serving, now=at(60))
    assert [(m.label, m.at) for m in chart.marks] == [("hedge", at(10)), ("hedged", at(50))]
    # A phase HEDGED since the recorded hedge is that hedge, marked once.
    serving.update(since=at(10).isoformat())
    assert [m.label for m in layout(serving, now=at(60)).marks] == ["hedge"]


def test_at_most_the_last_40_changes_are_drawn():
    history = [change(i, i % 3, cause=f"change {i}") for i in range(100)]
    chart = layout(stored(*history), now=at(100))
    assert len(chart.steps) == HISTORY_LIMIT
    assert chart.steps[0].begin == at(100 - HISTORY_LIMIT)
    assert len(chart.axis) <= 9 and len(chart.levels) <= 5


def test_mistyped_values_read_as_defaults():
    serving = stored(
        change(0, "2", None, 2.5, cause=7),  # a digit string is a count; None and 2.5 are not
        {"at": 12, "spot": 1},  # not a time: left out
        {"spot": 1},
        "a string",
        change(10, True, -3, 10**12, cause="x" * 1000),  # bool is no count; negative is 0
        phase=12,
        since="yesterday",
        hedges="many",
    )
    chart = layout(serving, now=at(20))
    assert [(s.spot, s.on_demand, s.required) for s in chart.steps] == [
        (2, 0, 0),
        (0, 0, 2**31 - 1),
    ]
    assert len(chart.steps[1].label) < 300  # the cause is clipped to 160 characters
    assert [lv.label for lv in chart.levels][-1] == str(2**31 - 1)
    assert len(chart.levels) <= 5
    facts = dict(serving_facts(serving, at(20)))
    # An unknown phase reads as the tick reads it: paused, flexjobs changes nothing.
    assert facts["phase"] == "PAUSED_BY_HAND" and facts["hedges"] == "0"


def test_a_hand_edited_history_out_of_order_still_draws_left_to_right():
    chart = layout(stored(change(30, 1), change(0, 2)), now=at(60))
    assert [s.begin for s in chart.steps] == [at(0), at(30)]


def test_the_facts_say_phase_since_hedges_fallback_and_the_call_in_flight():
    serving = stored(
        change(0, 0),
        phase="HEDGED",
        since=at(10).isoformat(),
        hedges=3,
        fallbackDeployedModelId=None,
        fallbackDisplayName="served [flexjobs s-1] (on-demand fallback)",
        fallbackReplicas=2,
        shortSeconds=900,
        nodeSeconds={"SPOT": 7200, "ON_DEMAND": 1800},
        pending={"call": "DeployModel", "operation": None, "at": at(10).isoformat()},
    )
    assert serving_facts(serving, at(40)) == [
        ("phase", "HEDGED since 2026-12-01 10:10:00Z (30m00s)"),
        ("intent", "serve"),
        ("policy", "Spot 2 + hedge"),
        ("hedges", "3"),
        ("fallback", "being deployed (2 replica(s))"),
        # Recorded before the machine with no operation: it may have reached Vertex.
        ("call in flight", "DeployModel(fallback) since 2026-12-01 10:10:00Z: answer lost"),
        ("time short of replicas", "15m00s"),
        ("node-hours", "Spot 2.000, on-demand 0.500"),
    ]
    assert serving_facts({}, at(40)) == [] and serving_facts("nope", at(40)) == []


def test_the_facts_show_availability_against_the_objective_and_its_error_budget():
    serving = stored(
        policy={
            "required": 2,
            "minOnDemandReplicas": 0,
            "extraSpotReplicas": 0,
            "hedge": True,
            "objective": {"atLeastOneReplica": 0.999, "allRequired": 0.99},
            "why": "chosen for the objective: the cheapest",
        },
        followedSeconds=100_000,
        darkSeconds=50,
        shortSeconds=2000,
    )
    facts = dict(serving_facts(serving, at(40)))
    assert facts["policy"] == "Spot 2 + hedge (chosen for the objective: the cheapest)"
    # 100,000 s followed: 0.1% of it (100 s) may be dark, 1% (1000 s) short of all.
    assert facts["at least one replica"] == (
        "99.950% of 27h46m; objective 99.90% met; budget 50s of 1m40s lost"
    )
    assert facts["all required"].startswith("98.000% of 27h46m; objective 99.00% missed")


_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from([at(0).isoformat(), at(5).isoformat(), "HEDGED", "hedge: x", "restored: y"]),
)
_entries = st.one_of(
    _values,
    st.dictionaries(st.sampled_from(["at", "spot", "onDemand", "required", "cause"]), _values),
)


@settings(max_examples=200, deadline=None)
@given(
    history=st.one_of(_values, st.lists(_entries, max_size=60)),
    fields=st.dictionaries(
        st.sampled_from(["phase", "since", "hedges", "pending", "nodeSeconds", "last"]), _values
    ),
)
def test_any_stored_map_draws_without_raising(history, fields):
    serving = {**stored(), **fields, "history": history}
    chart = layout(serving, now=at(30))
    assert len(chart.steps) <= HISTORY_LIMIT and len(chart.marks) <= HISTORY_LIMIT + 1
    assert all(s.width >= 0 and s.spot_height >= 0 and s.on_demand_height >= 0 for s in chart.steps)
    assert set(chart.required_path) <= set("MHV0123456789.,- ")
    serving_facts(serving, at(30))
