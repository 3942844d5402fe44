"""Objective mode (``shared.domain.serving.objective``): the cheapest measured knobs that meet
an availability objective, the default when none does, and the knobs that cannot be met."""

from __future__ import annotations

import pytest

from shared.domain.serving.objective import (
    AvailabilityObjective,
    Measured,
    PolicyTable,
    ServingPolicy,
    choose,
    cost_floor,
    default_policy,
)

PLAIN = ServingPolicy(0, 0, False)
HEDGE = ServingPolicy(0, 0, True)
FLOOR_1 = ServingPolicy(1, 0, True)
OVER = ServingPolicy(0, 1, False)
ALWAYS = ServingPolicy(4, 0, False)


def row(policy, any_, all_, spot, on_demand, replicas=4):
    return Measured(replicas, policy, any_, all_, spot, on_demand)


#: N = 4 at Spot/on-demand 0.4: plain Spot 0.36x, hedging 0.56x, a floor of one 0.61x,
#: over-provisioned 0.45x, always on-demand 1x.
TABLE = PolicyTable(
    (
        row(PLAIN, 0.90, 0.80, 0.9, 0.0),
        row(HEDGE, 0.97, 0.95, 0.9, 0.2),
        row(FLOOR_1, 1.0, 0.96, 0.7, 0.33),
        row(OVER, 0.92, 0.85, 1.125, 0.0),
        row(ALWAYS, 1.0, 1.0, 0.0, 1.0),
        row(ServingPolicy(0, 0, True), 0.5, 0.5, 0.1, 0.0, replicas=1),
    ),
    spot_ratio=0.4,
)


def test_the_cheapest_row_that_meets_the_objective_is_chosen():
    assert choose(AvailabilityObjective(0.9), 4, TABLE).policy == PLAIN
    assert choose(AvailabilityObjective(0.95), 4, TABLE).policy == HEDGE
    chosen = choose(AvailabilityObjective(0.999), 4, TABLE)
    assert chosen.policy == FLOOR_1 and chosen.row == TABLE.rows[2] and not chosen.default


def test_the_all_required_part_of_an_objective_counts_too():
    objective = AvailabilityObjective(0.95, all_required=0.99)
    assert choose(objective, 4, TABLE).policy == ALWAYS


def test_rows_of_another_replica_count_are_never_chosen():
    # The N = 1 row is the cheapest of all and meets 0.4, but it was measured for N = 1.
    assert choose(AvailabilityObjective(0.4), 4, TABLE).policy == PLAIN
    assert choose(AvailabilityObjective(0.4), 1, TABLE).policy == HEDGE


def test_the_order_follows_the_spot_price_the_caller_names():
    # Over-provisioning pays Spot only, a floor pays on-demand always: at Spot 0.4 of
    # on-demand the extra Spot replica is the cheaper way to 0.92 (0.45x against hedging's
    # 0.56x and the floor's 0.61x); at 0.9 the floor is (0.96x against 1.01x and 1.01x).
    objective = AvailabilityObjective(0.92)
    assert choose(objective, 4, TABLE).policy == OVER
    assert choose(objective, 4, TABLE, spot_ratio=0.9).policy == FLOOR_1


def test_ties_go_to_the_higher_availability_then_fewer_replicas_then_the_hedge():
    tied = PolicyTable(
        (
            row(ServingPolicy(0, 1, False), 0.99, 0.99, 1.0, 0.0),
            row(ServingPolicy(0, 1, True), 0.99, 0.99, 1.0, 0.0),
            row(ServingPolicy(0, 0, True), 0.995, 0.99, 0.6, 0.4),
        ),
        spot_ratio=1.0,
    )
    assert choose(AvailabilityObjective(0.99), 4, tied).policy == ServingPolicy(0, 0, True)
    assert choose(AvailabilityObjective(0.99), 4, tied, spot_ratio=0.5).policy == ServingPolicy(
        0, 1, True
    )


def test_when_no_row_meets_the_objective_the_default_is_always_on_demand():
    table = PolicyTable((row(PLAIN, 0.9, 0.8, 0.9, 0.0), row(HEDGE, 0.97, 0.9, 0.9, 0.2)), 0.4)
    chosen = choose(AvailabilityObjective(0.999), 4, table)
    assert chosen.default and chosen.row is None
    assert chosen.policy == default_policy(4) == ServingPolicy(4, 0, False)
    assert chosen.policy.spot_replicas(4) == 0
    assert "none of the 2 measured policies for 4 replica(s)" in chosen.reason


def test_a_replica_count_the_table_never_measured_gets_the_default():
    chosen = choose(AvailabilityObjective(0.5), 2, TABLE)
    assert chosen.default and chosen.policy == default_policy(2)
    assert "no row for 2 replica(s)" in chosen.reason


def test_a_row_whose_knobs_cannot_serve_its_replicas_is_never_chosen():
    # A table built by hand with a floor above N: cheap on paper, never a choice.
    bad = PolicyTable((row(ServingPolicy(5, 0, False), 1.0, 1.0, 0.0, 0.1),), spot_ratio=0.4)
    assert choose(AvailabilityObjective(0.9), 4, bad).default


def test_knobs_that_cannot_be_met_are_named_at_their_request_fields():
    assert ServingPolicy(5, 0, True).problems(4) == [
        "minOnDemandReplicas: 5 is more than the 4 replicas required"
    ]
    problems = ServingPolicy(-1, -2, "yes").problems(0)  # type: ignore[arg-type]
    assert [p.split(":")[0] for p in problems] == [
        "replicas",
        "minOnDemandReplicas",
        "extraSpotReplicas",
        "hedge",
    ]
    assert ServingPolicy(True, 0, True).problems(4)  # type: ignore[arg-type]  # a bool is no count
    with pytest.raises(ValueError, match="minOnDemandReplicas: 2 is more than the 1"):
        ServingPolicy(2).check(1)
    assert ServingPolicy(4, 3, False).check(4).spot_replicas(4) == 3


def test_objectives_are_fractions_of_minutes():
    with pytest.raises(ValueError) as err:
        AvailabilityObjective(99.9, all_required=0)
    assert "atLeastOneReplica: 99.9" in str(err.value) and "allRequired: 0" in str(err.value)
    with pytest.raises(ValueError):
        AvailabilityObjective(True)  # type: ignore[arg-type]
    assert AvailabilityObjective(1).met_by(1.0, 0.0)


def test_choose_refuses_a_replica_count_or_a_price_that_is_not_one():
    with pytest.raises(ValueError, match="replicas"):
        choose(AvailabilityObjective(0.9), 0, TABLE)
    with pytest.raises(ValueError, match="spot_ratio"):
        choose(AvailabilityObjective(0.9), 4, TABLE, spot_ratio=0.0)


def test_the_cost_floor_of_a_warm_floor_is_r_plus_its_on_demand_share():
    assert cost_floor(0.4, 4, 0) == 0.4
    assert cost_floor(0.4, 4, 4) == 1.0
    assert cost_floor(0.4, 1, 1) == 1.0
    assert cost_floor(0.4, 4, 1) == pytest.approx(0.55)


def test_labels_say_what_is_deployed():
    assert ServingPolicy(1, 1, True).label(4) == "floor 1 + Spot 4 + hedge"
    assert ServingPolicy(0, 2, False).label(1) == "Spot 3"
    assert ServingPolicy(4, 0, True).label(4) == "floor 4 (always on-demand)"
