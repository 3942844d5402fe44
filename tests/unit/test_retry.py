"""Retry budgets per group, per-request overrides, backoff bounds and the fallback ladder."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.domain.policy.failures import FailureClass
from shared.domain.policy.retry import (
    GROUP_OF,
    Budgets,
    FallbackRung,
    Placement,
    backoff_seconds,
    check_fallback,
    check_retry_policy,
    decide,
    parse_fallback,
    placement_for,
)
from shared.kernel.errors import InvalidRequest


def test_default_budgets() -> None:
    assert Budgets().to_dict() == {
        "preemption": 6,
        "capacity": 3,
        "infrastructure": 3,
        "user": 0,
    }


@pytest.mark.parametrize(
    ("failure", "group"),
    [
        (FailureClass.PREEMPTED, "preemption"),
        (FailureClass.STOCKOUT, "capacity"),
        (FailureClass.MAX_WAIT_EXPIRED, "capacity"),
        (FailureClass.INFRASTRUCTURE, "infrastructure"),
        (FailureClass.USER_ERROR, "user"),
        (FailureClass.CANCELLED, None),
        (FailureClass.UNKNOWN, None),
    ],
)
def test_every_failure_class_has_a_group(failure: FailureClass, group: str | None) -> None:
    assert GROUP_OF[failure] == group


def test_first_retry_reason() -> None:
    decision = decide(Budgets(), FailureClass.PREEMPTED, {})
    assert decision.retry
    assert decision.group == "preemption"
    assert decision.used_after == 1
    assert decision.budget == 6
    assert decision.reason == "preempted: retry 1 of 6"


def test_seven_preemptions_with_budget_six_stop_at_the_seventh() -> None:
    policy, used = Budgets(), {"preemption": 0}
    outcomes = []
    for _ in range(7):
        decision = decide(policy, FailureClass.PREEMPTED, used)
        outcomes.append(decision.retry)
        used = {"preemption": decision.used_after}
    assert outcomes == [True] * 6 + [False]
    assert used == {"preemption": 6}
    assert decision.reason == "preempted: preemption budget exhausted (6 of 6 retries used)"


def test_groups_are_independent() -> None:
    used = {"preemption": 6, "capacity": 0}
    assert not decide(Budgets(), FailureClass.PREEMPTED, used).retry
    stockout = decide(Budgets(), FailureClass.STOCKOUT, used)
    assert stockout.retry and stockout.reason == "stockout: retry 1 of 3"


def test_stockout_and_max_wait_share_the_capacity_budget() -> None:
    used: dict[str, int] = {}
    for failure in (FailureClass.STOCKOUT, FailureClass.MAX_WAIT_EXPIRED, FailureClass.STOCKOUT):
        decision = decide(Budgets(), failure, used)
        assert decision.retry
        used = {"capacity": decision.used_after}
    last = decide(Budgets(), FailureClass.MAX_WAIT_EXPIRED, used)
    assert not last.retry and last.used_after == 3


def test_user_error_never_retried_by_default() -> None:
    decision = decide(Budgets(), FailureClass.USER_ERROR, {})
    assert not decision.retry
    assert decision.budget == 0
    assert decision.reason == "user-error: not retried (user budget is 0)"


@pytest.mark.parametrize("failure", [FailureClass.CANCELLED, FailureClass.UNKNOWN])
def test_cancelled_and_unknown_never_retry_even_with_big_budgets(failure: FailureClass) -> None:
    policy = Budgets(preemption=100, capacity=100, infrastructure=100, user=100)
    decision = decide(policy, failure, {})
    assert (decision.retry, decision.group, decision.budget) == (False, None, 0)
    assert "never retried" in decision.reason


def test_per_request_overrides() -> None:
    policy = Budgets.from_request({"preemption": 10, "capacity": 1, "infrastructure": 2, "user": 1})
    assert (
        decide(policy, FailureClass.PREEMPTED, {"preemption": 6}).reason
        == "preempted: retry 7 of 10"
    )
    assert not decide(policy, FailureClass.STOCKOUT, {"capacity": 1}).retry
    assert decide(policy, FailureClass.USER_ERROR, {}).retry


def test_partial_override_keeps_other_defaults() -> None:
    assert Budgets.from_request({"capacity": 0}) == Budgets(capacity=0)
    assert Budgets.from_request(None) == Budgets()


@pytest.mark.parametrize(
    ("raw", "paths"),
    [
        ("lots", ["retryPolicy"]),
        ([1], ["retryPolicy"]),
        ({"preemption": -1}, ["retryPolicy.preemption"]),
        ({"preemption": 101}, ["retryPolicy.preemption"]),
        ({"capacity": 1.5}, ["retryPolicy.capacity"]),
        ({"capacity": "2"}, ["retryPolicy.capacity"]),
        ({"user": True}, ["retryPolicy.user"]),
        ({"spot": 1, "user": None}, ["retryPolicy.spot", "retryPolicy.user"]),
    ],
)
def test_invalid_retry_policies(raw: object, paths: list[str]) -> None:
    assert [e.path for e in check_retry_policy(raw)] == paths
    with pytest.raises(InvalidRequest) as info:
        Budgets.from_request(raw)
    assert [e.path for e in info.value.errors] == paths


def test_negative_used_count_is_a_bug_not_a_retry() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        decide(Budgets(), FailureClass.PREEMPTED, {"preemption": -1})


# Backoff -------------------------------------------------------------------------------------


@pytest.mark.parametrize("retry_number", range(1, 12))
def test_backoff_stays_within_the_window(retry_number: int) -> None:
    window = min(300.0, 5.0 * 2 ** (retry_number - 1))
    assert backoff_seconds(retry_number, 5.0, 300.0, lambda: 0.0) == 0.0
    assert backoff_seconds(retry_number, 5.0, 300.0, lambda: 0.999) == pytest.approx(0.999 * window)
    assert backoff_seconds(retry_number, 5.0, 300.0, lambda: 1.0) <= 300.0


def test_backoff_grows_exponentially_with_fixed_rand() -> None:
    waits = [backoff_seconds(n, 10.0, 10_000.0, lambda: 0.5) for n in range(1, 6)]
    assert waits == [5.0, 10.0, 20.0, 40.0, 80.0]


def test_backoff_cap_respected_even_for_huge_retry_numbers() -> None:
    assert backoff_seconds(50, 10.0, 600.0, lambda: 1.0) == 600.0
    assert backoff_seconds(5000, 10.0, 600.0, lambda: 1.0) == 600.0


def test_backoff_base_zero_is_exactly_zero() -> None:
    assert backoff_seconds(1, 0.0, 300.0, lambda: 0.7) == 0.0
    assert backoff_seconds(40, 0, 300.0, lambda: 1.0) == 0.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 1.0, 10.0, lambda: 0.5), "counts from 1"),
        ((1, -1.0, 10.0, lambda: 0.5), "non-negative"),
        ((1, 1.0, -10.0, lambda: 0.5), "non-negative"),
        ((1, 1.0, 10.0, lambda: 1.5), r"\[0, 1\]"),
    ],
)
def test_backoff_rejects_nonsense(args: tuple, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=message):
        backoff_seconds(*args)


# Fallback ladder ------------------------------------------------------------------------------

LADDER = [
    {"afterCapacityFailures": 2, "strategy": "STANDARD"},
    {"afterCapacityFailures": 3, "location": "europe-west4"},
]


@pytest.mark.parametrize(
    ("failures", "expected"),
    [
        (0, Placement("FLEX_START", "us-central1")),
        (1, Placement("FLEX_START", "us-central1")),
        (2, Placement("STANDARD", "us-central1")),
        (3, Placement("STANDARD", "europe-west4")),
        (9, Placement("STANDARD", "europe-west4")),
    ],
)
def test_ladder_rungs_apply_cumulatively(failures: int, expected: Placement) -> None:
    assert placement_for(LADDER, failures, "FLEX_START", "us-central1") == expected


def test_later_rung_overrides_earlier_fields() -> None:
    ladder = [
        {"afterCapacityFailures": 1, "strategy": "SPOT", "location": "us-east5"},
        {"afterCapacityFailures": 1, "strategy": "STANDARD"},
    ]
    assert placement_for(ladder, 1, "FLEX_START", "us-central1") == Placement(
        "STANDARD", "us-east5"
    )


def test_no_ladder_keeps_the_base_placement() -> None:
    assert placement_for(None, 5, "SPOT", "us-central1") == Placement("SPOT", "us-central1")
    assert placement_for([], 5, "SPOT", "us-central1") == Placement("SPOT", "us-central1")


def test_parsed_rungs_are_accepted() -> None:
    rungs = parse_fallback(LADDER)
    assert rungs == (FallbackRung(2, "STANDARD", None), FallbackRung(3, None, "europe-west4"))
    assert placement_for(rungs, 3, "FLEX_START", "us-central1") == Placement(
        "STANDARD", "europe-west4"
    )


@pytest.mark.parametrize(
    ("raw", "paths"),
    [
        ({"afterCapacityFailures": 2}, ["fallback"]),
        (["STANDARD"], ["fallback[0]"]),
        ([{"strategy": "STANDARD"}], ["fallback[0].afterCapacityFailures"]),
        ([{"afterCapacityFailures": 0, "strategy": "SPOT"}], ["fallback[0].afterCapacityFailures"]),
        (
            [{"afterCapacityFailures": True, "strategy": "SPOT"}],
            ["fallback[0].afterCapacityFailures"],
        ),
        ([{"afterCapacityFailures": 1, "strategy": "CHEAP"}], ["fallback[0].strategy"]),
        ([{"afterCapacityFailures": 1, "location": "Europe West"}], ["fallback[0].location"]),
        ([{"afterCapacityFailures": 1}], ["fallback[0]"]),
        ([{"afterCapacityFailures": 1, "zone": "a", "strategy": "SPOT"}], ["fallback[0].zone"]),
        (
            [
                {"afterCapacityFailures": 3, "strategy": "SPOT"},
                {"afterCapacityFailures": 2, "strategy": "STANDARD"},
            ],
            ["fallback[1].afterCapacityFailures"],
        ),
        ([{"afterCapacityFailures": 1, "strategy": "SPOT"}] * 11, ["fallback"]),
    ],
)
def test_invalid_fallbacks(raw: object, paths: list[str]) -> None:
    assert [e.path for e in check_fallback(raw)] == paths
    with pytest.raises(InvalidRequest):
        placement_for(raw, 1, "FLEX_START", "us-central1")  # type: ignore[arg-type]


def test_valid_fallback_has_no_errors() -> None:
    assert check_fallback(LADDER) == []
    assert check_fallback(None) == []


@given(
    retry_number=st.integers(min_value=1, max_value=10_000),
    base=st.floats(min_value=0, max_value=1e6),
    cap=st.floats(min_value=0, max_value=1e6),
    fraction=st.floats(min_value=0, max_value=1),
)
def test_property_backoff_within_zero_and_cap(
    retry_number: int, base: float, cap: float, fraction: float
) -> None:
    wait = backoff_seconds(retry_number, base, cap, lambda: fraction)
    assert 0.0 <= wait <= cap
    if base == 0:
        assert wait == 0.0
