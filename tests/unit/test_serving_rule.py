"""The Spot serving rule (shared.domain.serving): hedge, shift, come back, and never make
serving worse, on plain values and an in-memory endpoint that only stores what the calls set."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain.serving.model import (
    HISTORY_LIMIT,
    MAX_CAUSE,
    MAX_MODELS,
    MAX_NAME,
    MAX_STATE_BYTES,
    ActionKind,
    Capacity,
    Change,
    MachineSpec,
    ObservedEndpoint,
    ObservedModel,
    Phase,
    ServingAction,
    ServingSettings,
    ServingState,
)
from shared.domain.serving.rule import (
    OPERATION_LIMIT_SECONDS,
    call_finished,
    call_started,
    decide,
    fallback_display_name,
    hedge_failed,
    resume,
    start,
)
from shared.domain.serving.split import hedged_split, largest_remainder

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
MACHINE = MachineSpec("g2-standard-8", "NVIDIA_L4", 1)
MODEL = "projects/p/locations/us-central1/models/m"
SPOT_ID = "111"
FALLBACK_ID = "222"
SETTINGS = ServingSettings()  # grace 300 s, hold 1800 s


def spot_model(available: int, required: int = 4) -> ObservedModel:
    return ObservedModel(
        SPOT_ID, MODEL, "served [flexjobs s-1]", MACHINE, True, required, available
    )


@dataclass
class Endpoint:
    """An endpoint in memory: it stores what the calls set, and the test sets availability.

    Storage only: the fallback a HEDGE deploys appears with no available replica and its own
    id, as Vertex's DeployModel leaves it; nothing here decides anything."""

    spot: int = 4
    required: int = 4
    split: dict[str, int] = field(default_factory=lambda: {SPOT_ID: 100})
    others: dict[str, int] = field(default_factory=dict)  # id -> available replicas
    fallback: ObservedModel | None = None
    spot_deployed: bool = True

    def read(self) -> ObservedEndpoint:
        models = []
        if self.spot_deployed:
            models.append(spot_model(self.spot, self.required))
        if self.fallback is not None:
            models.append(self.fallback)
        for other, available in self.others.items():
            models.append(ObservedModel(other, "other", other, MACHINE, False, 1, available))
        return ObservedEndpoint("e", tuple(models), self.split)

    def set_fallback_available(self, available: int) -> None:
        assert self.fallback is not None
        self.fallback = replace(self.fallback, available=available)

    def apply(self, action: ServingAction) -> None:
        if action.deploy is not None:
            self.fallback = ObservedModel(
                FALLBACK_ID,
                action.deploy.model,
                action.deploy.display_name,
                action.deploy.machine,
                False,
                action.deploy.replicas,
                0,
            )
        if action.split is not None:
            self.split = dict(action.split)
        if action.resize is not None:
            assert self.fallback is not None
            self.fallback = replace(self.fallback, required=action.resize)
        if action.undeploy is not None:
            assert action.undeploy == FALLBACK_ID
            self.fallback = None


class Tick:
    """Drives the rule as the tick will: one read, one decision, its call, then the write."""

    def __init__(self, endpoint: Endpoint, cfg: ServingSettings = SETTINGS) -> None:
        self.endpoint, self.cfg, self.now = endpoint, cfg, T0
        self.state = start(SPOT_ID, endpoint.read(), T0)
        self.actions: list[ServingAction] = []

    def __call__(self, minutes: int = 1) -> ServingAction:
        self.now += minutes * MINUTE
        action = decide(self.endpoint.read(), self.state, self.now, self.cfg)
        self.endpoint.apply(action)
        self.state = action.state
        self.actions.append(action)
        return action

    def kinds(self) -> list[ActionKind]:
        return [a.kind for a in self.actions]


def hedged_tick(spot: int = 0, *, others: dict[str, int] | None = None) -> Tick:
    """A deployment hedged after losing Spot replicas, the fallback available and shifted."""
    split = {SPOT_ID: 100}
    if others:
        split = {SPOT_ID: 70, **{k: 30 // len(others) for k in others}}
        split[SPOT_ID] += 100 - sum(split.values())
    tick = Tick(Endpoint(split=split, others=dict(others or {})))
    tick.endpoint.spot = spot
    tick()
    assert tick(5).kind is ActionKind.HEDGE
    tick.endpoint.set_fallback_available(4 - spot)
    assert tick().kind is ActionKind.SHIFT
    return tick


# --- reading an endpoint ------------------------------------------------------------------


def test_required_replicas_are_required_replica_count_else_min_replica_count():
    def read(resources):
        raw = {"deployedModels": [{"id": "1", "dedicatedResources": resources}]}
        return ObservedEndpoint.from_json(raw).models[0].required

    assert read({"minReplicaCount": 4, "requiredReplicaCount": 2}) == 2
    assert read({"minReplicaCount": 4}) == 4
    assert read({"minReplicaCount": "3"}) == 3  # int64/int32 may come as strings
    assert read({"minReplicaCount": True}) == 0  # a bool is no count
    # Missing requiredReplicaCount is 0 in proto3: min is the one that holds.
    assert read({"minReplicaCount": 4, "requiredReplicaCount": 0}) == 4


def test_an_endpoint_read_is_bounded_in_models_and_strings():
    raw = {
        "name": "n" * 10_000,
        "deployedModels": [
            {"id": str(i), "displayName": "x" * 10_000, "status": {"availableReplicaCount": 1}}
            for i in range(MAX_MODELS + 50)
        ],
        "trafficSplit": {str(i): 1 for i in range(MAX_MODELS + 50)} | {"ghost": 5},
    }
    endpoint = ObservedEndpoint.from_json(raw)
    assert len(endpoint.models) == MAX_MODELS
    assert len(endpoint.name) <= 256
    assert all(len(m.display_name) <= 256 for m in endpoint.models)
    # A share of a model not read (past the bound, or not deployed) is not kept.
    assert set(endpoint.traffic_split) <= {m.id for m in endpoint.models}


def test_a_read_of_mistyped_fields_takes_defaults_and_never_raises():
    raw = {
        "name": 7,
        "deployedModels": [
            {"id": 7, "displayName": ["x"], "dedicatedResources": "spot", "status": 3},
            "not a model",
        ],
        "trafficSplit": ["7"],
    }
    endpoint = ObservedEndpoint.from_json(raw)
    (model,) = endpoint.models
    assert (model.id, model.display_name, model.required, model.available) == ("", "", 0, 0)
    assert (endpoint.name, dict(endpoint.traffic_split)) == ("", {})


def test_spot_flag_available_replicas_and_machine_are_read():
    raw = {
        "deployedModels": [
            {
                "id": "7",
                "model": MODEL,
                "dedicatedResources": {
                    "machineSpec": {
                        "machineType": "g2-standard-8",
                        "acceleratorType": "NVIDIA_L4",
                        "acceleratorCount": 1,
                    },
                    "minReplicaCount": 2,
                    "spot": True,
                },
                "status": {"availableReplicaCount": 1},
            },
            {"id": "8", "dedicatedResources": {"spot": "yes"}},
        ],
        "trafficSplit": {"7": 100, "8": 0},
    }
    endpoint = ObservedEndpoint.from_json(raw)
    seven, eight = endpoint.models
    assert (seven.spot, seven.available, seven.machine) == (True, 1, MACHINE)
    assert eight.spot is False  # only a JSON true is Spot
    assert dict(endpoint.traffic_split) == {"7": 100}  # a 0 share is no share


# --- the split ------------------------------------------------------------------------------


@given(
    total=st.integers(0, 100),
    weights=st.lists(st.integers(0, 64), min_size=1, max_size=8).filter(lambda w: sum(w) > 0),
)
def test_largest_remainder_sums_exactly_and_stays_within_a_point_of_each_quota(total, weights):
    parts = largest_remainder(total, weights)
    assert sum(parts) == total
    for part, weight in zip(parts, weights, strict=True):
        quota = total * weight / sum(weights)
        assert abs(part - quota) < 1
        if weight == 0:
            assert part == 0


def test_largest_remainder_refuses_nothing_to_divide_by():
    with pytest.raises(ValueError, match="positive"):
        largest_remainder(100, [0, 0])


@st.composite
def endpoints(draw):
    """An endpoint with Spot, a fallback and up to three other models, any valid split."""
    others = draw(st.integers(0, 3))
    ids = [SPOT_ID, FALLBACK_ID] + [f"o{i}" for i in range(others)]
    weights = draw(st.lists(st.integers(0, 10), min_size=len(ids), max_size=len(ids)))
    if sum(weights) == 0:
        weights[0] = 1
    split = dict(zip(ids, largest_remainder(100, weights), strict=True))
    return ObservedEndpoint("e", (), split)


@given(endpoint=endpoints(), spot=st.integers(0, 8), fallback=st.integers(0, 8))
def test_a_hedged_split_sums_to_100_keeps_the_others_and_never_feeds_an_empty_model(
    endpoint, spot, fallback
):
    split = hedged_split(endpoint, (SPOT_ID, FALLBACK_ID), (spot, fallback))
    if spot + fallback == 0:
        assert split is None  # nowhere to move traffic: the split stays as it is
        return
    assert split is not None
    assert sum(split.values()) == 100
    assert all(v > 0 for v in split.values())
    for other, share in endpoint.traffic_split.items():
        if other not in (SPOT_ID, FALLBACK_ID):
            assert split[other] == share
    pool = endpoint.share(SPOT_ID) + endpoint.share(FALLBACK_ID)
    assert split.get(SPOT_ID, 0) + split.get(FALLBACK_ID, 0) == pool
    if spot == 0:
        assert SPOT_ID not in split
    if fallback == 0:
        assert FALLBACK_ID not in split


def test_the_pool_follows_the_replicas_each_can_serve():
    endpoint = ObservedEndpoint("e", (), {SPOT_ID: 70, "other": 30})
    assert dict(hedged_split(endpoint, (SPOT_ID, FALLBACK_ID), (1, 3)) or {}) == {
        # 17.5 and 52.5: the remainders tie, and the point goes to the larger weight.
        SPOT_ID: 17,
        FALLBACK_ID: 53,
        "other": 30,
    }


# --- grace period and hedge -----------------------------------------------------------------


def test_nothing_changes_and_nothing_is_written_while_spot_serves():
    tick = Tick(Endpoint())
    for _ in range(10):
        assert tick().kind is ActionKind.NOTHING
    assert tick.state.phase is Phase.SERVING
    assert len(tick.state.history) == 1  # the start only


def test_no_hedge_before_the_grace_period_then_one_sized_to_the_deficit():
    tick = Tick(Endpoint())
    tick.endpoint.spot = 1  # three of four Spot replicas reclaimed
    first = tick()
    assert (first.kind, first.state.phase) == (ActionKind.RECORD, Phase.DEFICIT)
    for _ in range(4):  # 1..4 minutes in deficit: Compute Engine's restarts may still win
        assert tick().kind is ActionKind.NOTHING
    hedge = tick()  # 5 minutes: the grace period is over
    assert hedge.kind is ActionKind.HEDGE
    assert hedge.deploy is not None
    assert (hedge.deploy.model, hedge.deploy.machine, hedge.deploy.replicas) == (MODEL, MACHINE, 3)
    assert hedge.deploy.display_name == fallback_display_name(spot_model(1))
    # The fallback has no replica yet: the split does not move with the deploy.
    assert hedge.split is None
    assert (hedge.state.phase, hedge.state.hedges) == (Phase.HEDGED, 1)


def test_a_blip_shorter_than_the_grace_period_costs_no_hedge():
    tick = Tick(Endpoint())
    tick.endpoint.spot = 0
    tick(), tick(), tick()
    tick.endpoint.spot = 4  # Compute Engine restarted the nodes in time
    assert tick().state.phase is Phase.SERVING
    tick.endpoint.spot = 0
    for _ in range(4):  # a new deficit starts a new grace period
        assert tick().kind in (ActionKind.RECORD, ActionKind.NOTHING)
    assert ActionKind.HEDGE not in tick.kinds()


def test_the_fallback_gets_traffic_only_once_it_has_replicas_then_in_proportion():
    tick = Tick(Endpoint())
    tick.endpoint.spot = 1
    tick()
    assert tick(5).kind is ActionKind.HEDGE
    kinds = []
    for _ in range(10):  # a GPU DeployModel takes many minutes: no traffic to it meanwhile
        kinds.append(tick().kind)
        assert FALLBACK_ID not in tick.endpoint.split
    # The first read that shows the fallback records it (its DeployModel is done), no call.
    assert kinds == [ActionKind.RECORD] + [ActionKind.NOTHING] * 9
    assert tick.state.fallback_id == FALLBACK_ID and tick.state.operation_call is None
    tick.endpoint.set_fallback_available(3)
    shift = tick()
    assert shift.kind is ActionKind.SHIFT
    assert dict(shift.split or {}) == {SPOT_ID: 25, FALLBACK_ID: 75}


def test_a_fallback_deployed_by_a_call_that_timed_out_is_recognised_by_its_name():
    tick = Tick(Endpoint())
    tick.endpoint.spot = 0
    tick()
    tick(5)
    assert tick.state.fallback_id is None  # the DeployModel's answer was never recorded
    tick.endpoint.set_fallback_available(4)
    shift = tick()
    assert (shift.kind, shift.state.fallback_id) == (ActionKind.SHIFT, FALLBACK_ID)
    assert dict(shift.split or {}) == {FALLBACK_ID: 100}


def test_a_deficit_that_grows_grows_the_fallback():
    tick = Tick(Endpoint())
    tick.endpoint.spot = 3
    tick()
    assert tick(5).deploy.replicas == 1  # type: ignore[union-attr]
    tick.endpoint.set_fallback_available(1)
    assert tick().kind is ActionKind.SHIFT
    tick.endpoint.spot = 1  # two more reclaimed
    assert tick().kind is ActionKind.SHIFT  # traffic first: the replicas that serve now
    grow = tick()
    assert (grow.kind, grow.resize, grow.state.fallback_replicas) == (ActionKind.GROW, 3, 3)
    assert tick().kind is ActionKind.NOTHING  # grown once, not at every tick


def test_a_failed_hedge_waits_a_new_grace_period_before_the_next():
    tick = Tick(Endpoint())
    tick.endpoint.spot = 0
    tick()
    assert tick(5).kind is ActionKind.HEDGE
    tick.endpoint.fallback = None  # the DeployModel operation ended with an error
    tick.state = hedge_failed(tick.state, tick.now, "RESOURCE_EXHAUSTED")
    assert (tick.state.phase, tick.state.fallback_name) == (Phase.DEFICIT, None)
    assert "hedge failed: RESOURCE_EXHAUSTED" in tick.state.history[-1].cause
    for _ in range(4):
        assert tick().kind is ActionKind.NOTHING
    assert tick().kind is ActionKind.HEDGE
    assert tick.state.hedges == 2


def test_a_long_running_call_is_claimed_in_the_state_it_writes_and_never_sent_twice():
    tick = Tick(Endpoint())
    tick.endpoint.spot = 0
    tick()
    hedge = tick(5)
    assert (hedge.state.operation_call, hedge.state.operation_at) == ("DeployModel", tick.now)
    tick.endpoint.fallback = None  # the DeployModel operation is still running: nothing shows
    for _ in range(30):
        assert tick().kind is ActionKind.NOTHING  # not resent while it runs
    assert tick.state.hedges == 1


def test_an_undeploy_in_flight_is_not_sent_again_at_every_tick():
    tick = hedged_tick(spot=0)
    tick.endpoint.spot = 4
    tick(), tick(30)  # traffic follows the replicas; then the hold passes: traffic back
    now = tick.now + MINUTE
    undeploy = decide(tick.endpoint.read(), tick.state, now, SETTINGS)
    assert (undeploy.kind, undeploy.undeploy) == (ActionKind.RESTORE, FALLBACK_ID)
    assert undeploy.state.operation_call == "UndeployModel"
    # The UndeployModel operation runs (the fallback is still listed) for many ticks.
    state = undeploy.state
    for minute in range(2, 20):
        again = decide(tick.endpoint.read(), state, tick.now + minute * MINUTE, SETTINGS)
        assert again.kind is ActionKind.NOTHING and again.undeploy is None
        state = again.state
    tick.endpoint.fallback = None  # done: the fallback is gone
    done = decide(tick.endpoint.read(), state, tick.now + 21 * MINUTE, SETTINGS)
    assert (done.state.phase, done.state.operation_call, done.notice) == (
        Phase.SERVING,
        None,
        "RESTORED",
    )


def test_a_hedge_whose_outcome_is_unknown_is_given_up_then_a_late_fallback_is_adopted():
    tick = Tick(Endpoint())
    tick.endpoint.spot = 0
    tick()
    assert tick(5).kind is ActionKind.HEDGE
    tick.endpoint.fallback = None  # the DeployModel timed out: nothing ever showed
    limit = int(OPERATION_LIMIT_SECONDS // 60)
    given_up = tick(limit)
    assert given_up.state.operation_call is None
    assert given_up.state.phase is Phase.DEFICIT  # a new grace period before the next hedge
    assert any("no answer after 2 h" in c.cause for c in given_up.state.history)
    assert tick(5).kind is ActionKind.HEDGE  # the grace period passed: hedged again
    assert tick.state.hedges == 2
    # A DeployModel given up that lands late is ours by its name, not a hand edit.
    tick.state = replace(tick.state, phase=Phase.DEFICIT, fallback_name=None, operation_call=None)
    tick.endpoint.apply(tick.actions[-1])
    tick.endpoint.set_fallback_available(4)
    late = tick()
    assert (late.kind, late.state.fallback_id, late.state.phase) == (
        ActionKind.SHIFT,
        FALLBACK_ID,
        Phase.HEDGED,
    )


def test_a_call_answered_after_its_claim_was_given_up_changes_nothing():
    tick = Tick(Endpoint())
    tick.endpoint.spot = 0
    tick()
    claimed_at = tick(5).state.operation_at
    assert claimed_at is not None
    named = call_started(tick.state, claimed_at, "e/operations/1")
    assert named.operation == "e/operations/1"
    assert call_started(tick.state, claimed_at - MINUTE, "e/operations/2") == tick.state
    failed = call_finished(named, tick.now, "RESOURCE_EXHAUSTED: on-demand quota")
    assert (failed.phase, failed.operation_call, failed.fallback_name) == (
        Phase.DEFICIT,
        None,
        None,
    )


def test_a_grow_that_failed_is_asked_for_again_on_the_next_read():
    tick = Tick(Endpoint())
    tick.endpoint.spot = 3
    tick()
    tick(5)
    tick.endpoint.set_fallback_available(1)
    tick()
    tick.endpoint.spot = 1
    tick()
    grow = tick()
    assert grow.kind is ActionKind.GROW
    tick.endpoint.fallback = replace(tick.endpoint.fallback, required=1)  # type: ignore[arg-type]
    tick.state = call_finished(tick.state, tick.now, "INTERNAL")
    assert tick.state.operation_call is None
    again = tick()
    assert (again.kind, again.resize) == (ActionKind.GROW, 3)


# --- hold period and the way back --------------------------------------------------------------


def test_no_restore_before_the_hold_period_then_traffic_back_then_undeploy():
    tick = hedged_tick(spot=0)
    tick.endpoint.spot = 4
    back = tick()
    assert back.state.phase is Phase.RECOVERING
    assert back.kind is ActionKind.SHIFT  # traffic follows the replicas at once
    for _ in range(29):
        assert tick().kind is ActionKind.NOTHING
    restore = tick()  # 30 minutes of Spot serving all its replicas
    assert restore.kind is ActionKind.RESTORE
    assert (dict(restore.split or {}), restore.undeploy) == ({SPOT_ID: 100}, None)
    undeploy = tick()  # a fresh read shows the fallback without traffic
    assert (undeploy.kind, undeploy.undeploy, undeploy.split) == (
        ActionKind.RESTORE,
        FALLBACK_ID,
        None,
    )
    done = tick()
    assert (done.kind, done.state.phase, done.state.fallback_id) == (
        ActionKind.RECORD,
        Phase.SERVING,
        None,
    )
    assert tick().kind is ActionKind.NOTHING


def test_a_flap_during_the_hold_resets_it():
    tick = hedged_tick(spot=0)
    tick.endpoint.spot = 4
    tick(20)  # 20 minutes into the hold
    tick.endpoint.spot = 2  # the zone flaps
    assert tick().state.phase is Phase.HEDGED
    tick.endpoint.spot = 4
    recovering = tick()
    assert recovering.state.phase is Phase.RECOVERING
    assert recovering.state.since == tick.now  # the hold starts again
    for _ in range(29):
        assert tick().kind is not ActionKind.RESTORE
    assert tick().kind is ActionKind.RESTORE


def test_the_fallback_is_never_undeployed_from_a_read_where_spot_is_short():
    tick = hedged_tick(spot=0)
    tick.endpoint.spot = 4
    tick()
    tick(30)
    assert tick.actions[-1].kind is ActionKind.RESTORE  # traffic back to Spot
    tick.endpoint.spot = 1  # Spot lost again between the two steps
    step = tick()
    assert step.undeploy is None
    assert step.state.phase is Phase.HEDGED
    assert step.kind is ActionKind.SHIFT  # and traffic goes back to the fallback (1:4)
    assert dict(step.split or {}) == {SPOT_ID: 20, FALLBACK_ID: 80}


def test_if_spot_never_comes_back_the_fallback_stays_and_the_record_says_so():
    tick = hedged_tick(spot=0)
    for _ in range(600):
        assert tick(10).kind is ActionKind.NOTHING
    assert tick.state.phase is Phase.HEDGED
    assert tick.state.since is not None and tick.now - tick.state.since > timedelta(hours=99)
    assert tick.state.fallback_id == FALLBACK_ID


# --- never make serving worse ---------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 4), st.integers(1, 40)),
        min_size=1,
        max_size=60,
    ),
    others=st.sampled_from([{}, {"o1": 1}, {"o1": 1, "o2": 0}]),
)
def test_every_step_keeps_serving_valid(steps, others):
    """Random Spot and fallback availability over time: at every step the split sums to 100,
    other models keep their shares, a written split feeds no model of ours without replicas,
    and a model is undeployed only without traffic while Spot serves every replica."""
    split = {SPOT_ID: 60, **{k: 40 // len(others) for k in others}} if others else {SPOT_ID: 100}
    split[SPOT_ID] += 100 - sum(split.values())
    tick = Tick(Endpoint(split=split, others=dict(others)))
    theirs = {k: v for k, v in split.items() if k != SPOT_ID}
    for spot, fallback, minutes in steps:
        tick.endpoint.spot = spot
        if tick.endpoint.fallback is not None:
            tick.endpoint.set_fallback_available(fallback)
        before = tick.endpoint.read()
        action = tick(minutes)
        assert sum(tick.endpoint.split.values()) == 100
        assert {k: tick.endpoint.split.get(k, 0) for k in theirs} == theirs
        if action.split is not None:
            for model in before.models:
                if model.id in (SPOT_ID, FALLBACK_ID) and model.available == 0:
                    assert action.split.get(model.id, 0) == 0
        if action.undeploy is not None:
            assert before.share(action.undeploy) == 0
            spot_model_now = before.model(SPOT_ID)
            assert spot_model_now is not None
            assert spot_model_now.available >= spot_model_now.required
        assert action.kind is not ActionKind.PAUSE  # the rule's own moves are no hand edit
        assert len(tick.state.history) <= HISTORY_LIMIT


def test_a_shift_that_timed_out_but_happened_is_not_a_hand_edit():
    tick = hedged_tick(spot=2)
    # The last SHIFT's write was lost: the state still holds the split before it.
    stale = tick.actions[-2].state
    assert tick.endpoint.split != {SPOT_ID: 100}
    action = decide(tick.endpoint.read(), stale, tick.now + MINUTE, SETTINGS)
    assert action.kind is not ActionKind.PAUSE


def test_a_failed_call_changes_nothing_and_the_next_tick_asks_for_it_again():
    tick = Tick(Endpoint())
    tick.endpoint.spot = 1
    tick()
    tick(5)
    tick.endpoint.set_fallback_available(3)
    read, state = tick.endpoint.read(), tick.state
    first = decide(read, state, tick.now + MINUTE, SETTINGS)
    assert first.kind is ActionKind.SHIFT
    # UpdateEndpoint failed: nothing applied, nothing written. The next tick, from a new read
    # of the same endpoint, asks for the same split.
    again = decide(tick.endpoint.read(), state, tick.now + 2 * MINUTE, SETTINGS)
    assert (again.kind, again.split) == (first.kind, first.split)


def test_two_ticks_deciding_from_the_same_read_decide_the_same():
    """Two deliveries of a tick at once: the rule is a function of the read, the state and the
    time, so both name the same call; the record's conditional write lets one of them win."""
    tick = Tick(Endpoint())
    tick.endpoint.spot = 0
    tick()
    read, now = tick.endpoint.read(), tick.now + 5 * MINUTE
    one, two = decide(read, tick.state, now, SETTINGS), decide(read, tick.state, now, SETTINGS)
    assert one == two
    assert one.kind is ActionKind.HEDGE


# --- hand edits -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda e: e.others.update({"new": 1}), "added ['new']"),
        (
            lambda e: (e.others.pop("o1"), e.split.pop("o1"), e.split.update({SPOT_ID: 100})),
            "removed",
        ),
        (lambda e: e.split.update({SPOT_ID: 50, "o1": 50}), "other deployed models"),
        (lambda e: setattr(e, "spot_deployed", False), "Spot model 111 was undeployed by hand"),
    ],
)
def test_a_hand_edit_pauses_the_deployment_and_is_recorded(edit, says):
    tick = Tick(Endpoint(split={SPOT_ID: 80, "o1": 20}, others={"o1": 1}))
    tick()
    edit(tick.endpoint)
    pause = tick()
    assert pause.kind is ActionKind.PAUSE
    assert says in pause.reason
    assert pause.state.phase is Phase.PAUSED_BY_HAND
    assert says in pause.state.history[-1].cause


def test_a_fallback_undeployed_by_hand_pauses_and_nothing_is_called_while_paused():
    tick = hedged_tick(spot=1)
    tick.endpoint.fallback = None
    tick.endpoint.split = {SPOT_ID: 100}
    assert tick().kind is ActionKind.PAUSE
    tick.endpoint.spot = 0
    for _ in range(60):  # Spot gone for an hour: still no hedge, the user is in charge
        action = tick()
        assert action.kind in (ActionKind.NOTHING, ActionKind.RECORD)
        assert (action.split, action.deploy, action.undeploy, action.resize) == (None,) * 4
    assert tick.state.last == Capacity(0, 0, 4)  # capacity is still recorded


def test_an_endpoint_set_by_hand_to_take_no_traffic_pauses():
    tick = Tick(Endpoint())
    tick.endpoint.split = {}
    pause = tick()
    assert pause.kind is ActionKind.PAUSE
    assert "changed by hand (100% before)" in pause.reason


def test_our_own_pool_changed_by_hand_pauses():
    tick = Tick(Endpoint(split={SPOT_ID: 80, "o1": 20}, others={"o1": 1}))
    tick.endpoint.others["o2"] = 1  # the user adds a model, and the read sees it
    tick.state = resume(tick.state, tick.endpoint.read(), tick.now)
    tick.endpoint.split = {SPOT_ID: 60, "o1": 20, "o2": 20}
    assert tick().kind is ActionKind.PAUSE


def test_resume_takes_the_endpoint_as_it_is_and_hedging_goes_on():
    tick = Tick(Endpoint(split={SPOT_ID: 100}))
    tick.endpoint.others["new"] = 1
    assert tick().kind is ActionKind.PAUSE
    tick.state = resume(tick.state, tick.endpoint.read(), tick.now)
    assert tick.state.phase is Phase.SERVING
    assert dict(tick.state.others) == {"new": 0}
    tick.endpoint.spot = 0
    tick()
    assert tick(5).kind is ActionKind.HEDGE


# --- what the record keeps -------------------------------------------------------------------


def test_time_short_and_node_hours_by_capacity_type_accrue():
    tick = Tick(Endpoint())
    tick(60)  # an hour on 4 Spot replicas (no write: nothing changed)
    tick.endpoint.spot = 0
    tick()  # the change: the hour and a minute on 4 Spot replicas are accounted
    tick(5)  # hedge
    tick.endpoint.set_fallback_available(4)
    tick(15)  # shift, after 20 minutes with nothing serving
    state = tick.state
    assert state.spot_node_seconds == pytest.approx(4 * 61 * 60)
    assert state.short_seconds == pytest.approx(20 * 60)
    assert state.on_demand_node_seconds == 0  # the fallback's replicas count from now
    tick(60)
    tick.endpoint.spot = 4
    tick()
    assert tick.state.on_demand_node_seconds == pytest.approx(4 * 61 * 60)


def test_the_history_is_bounded_in_items_and_bytes():
    long = "x" * 10_000
    state = ServingState(
        # Every string at the longest a read keeps (MAX_NAME), and every model an endpoint
        # read keeps (MAX_MODELS), multi-byte where UTF-8 makes it longest.
        spot_id="9" * MAX_NAME,
        phase=Phase.HEDGED,
        accounted_at=T0,
        last=Capacity(2, 2, 4),
        pool=100,
        others={f"{i:0>3}" + "é" * (MAX_NAME - 3): 100 for i in range(MAX_MODELS)},
        since=T0,
        fallback_id="8" * MAX_NAME,
        fallback_name="ñ" * MAX_NAME,
    )
    for _ in range(5 * HISTORY_LIMIT):
        cap = Capacity(10**9, 10**9, 10**9)
        state = replace(state, history=(*state.history, Change(T0, cap, "€" * MAX_CAUSE)))
    assert len(state.history) == HISTORY_LIMIT
    assert state.size_bytes() <= MAX_STATE_BYTES
    # The rule clips a cause however long the reason it gives.
    tick = Tick(Endpoint())
    for i in range(3 * HISTORY_LIMIT):
        tick.endpoint.spot = i % 2 * 4
        tick()
    assert len(tick.state.history) == HISTORY_LIMIT
    assert all(len(c.cause) <= MAX_CAUSE for c in tick.state.history)
    # The stored form reads back the same, and a hostile stored form reads back bounded.
    assert ServingState.decode(json.loads(json.dumps(tick.state.to_dict()))) == tick.state
    hostile = tick.state.to_dict() | {
        "history": [{"at": T0.isoformat(), "cause": long}] * 10_000,
        "phase": "NO_SUCH_PHASE",
        "pool": 10**9,
        "hedges": 10**100,
        "last": {"spot": 10**100, "onDemand": -5, "required": "9" * 50},
    }
    decoded = ServingState.decode(hostile)
    assert decoded is not None
    assert len(decoded.history) == HISTORY_LIMIT
    assert all(len(c.cause) <= MAX_CAUSE for c in decoded.history)
    assert decoded.phase is Phase.PAUSED_BY_HAND  # unknown: flexjobs changes nothing
    assert decoded.pool == 100
    assert (decoded.hedges, decoded.last) == (2**31 - 1, Capacity(2**31 - 1, 0, 0))
    assert decoded.size_bytes() <= MAX_STATE_BYTES


def test_settings_refuse_negative_periods():
    with pytest.raises(ValueError, match=">= 0"):
        ServingSettings(grace_seconds=-1)


def test_a_fallback_is_never_larger_than_the_replica_cap():
    capped = ServingSettings(max_replicas=3)
    tick = Tick(Endpoint(spot=0, required=4), capped)
    tick()
    hedge = tick(5)
    assert (hedge.kind, hedge.deploy.replicas) == (ActionKind.HEDGE, 3)  # type: ignore[union-attr]


def test_the_spot_models_replicas_changed_by_hand_pause_the_deployment():
    tick = Tick(Endpoint())
    tick.endpoint.required = 40  # someone scaled the Spot model by hand: never hedged for it
    tick.endpoint.spot = 0
    paused = tick()
    assert (paused.kind, paused.state.phase) == (ActionKind.PAUSE, Phase.PAUSED_BY_HAND)
    assert "required replicas were changed by hand (4 -> 40)" in paused.state.history[-1].cause
    assert ActionKind.HEDGE not in [tick(5).kind for _ in range(3)]


# --- review (adversarial): failing tests, one per finding -------------------------------


def test_fallback_names_of_two_deployments_with_long_display_names_never_collide():
    """(h) The tag sits at the end of a Spot model's display name; fallback_display_name clips
    the name to 107 characters before the suffix, so a long name loses its tag and two
    deployments' fallbacks get the same name: _adopt then takes the other's fallback."""
    from shared.domain.decisions.deploy_model import tagged_display_name

    long = "x" * 200
    a = ObservedModel("1", MODEL, tagged_display_name(long, "a"), MACHINE, True, 2, 0)
    b = ObservedModel("2", MODEL, tagged_display_name(long, "b"), MACHINE, True, 2, 0)
    b_fallback = ObservedModel("3", MODEL, fallback_display_name(b), MACHINE, False, 2, 2)
    read = ObservedEndpoint("e", (a, b, b_fallback), {"1": 50, "2": 50})
    state = replace(start("1", read, T0), phase=Phase.DEFICIT, since=T0)
    action = decide(read, state, T0 + MINUTE)
    assert action.state.fallback_id != "3", "deployment a adopted deployment b's fallback"
    assert fallback_display_name(a) != fallback_display_name(b)


def test_undeploy_never_moves_traffic_to_a_model_with_no_replicas():
    """(c) A cancel's first step gives the pool to the endpoint's other models by their
    available replicas, else by their shares, else equally: a model with no replica gets
    all of the endpoint's traffic."""
    from shared.domain.serving.rule import begin_undeploy

    other = ObservedModel("333", "other", "other", MACHINE, False, 1, 0)
    read = ObservedEndpoint("e", (spot_model(4), other), {SPOT_ID: 100})
    state = begin_undeploy(start(SPOT_ID, read, T0), T0)
    action = decide(read, state, T0 + MINUTE)
    if action.split is not None:
        assert action.split.get("333", 0) == 0, f"traffic to a model with 0 replicas: {action}"


def test_a_split_written_on_an_endpoint_past_max_models_sums_to_100():
    """(c)/(h) from_json keeps MAX_MODELS models and drops the shares of the rest; a SHIFT
    computed from that read writes a split that does not sum to 100 (and would take their
    traffic from models flexjobs does not own)."""
    models = [
        {
            "id": SPOT_ID,
            "model": MODEL,
            "displayName": "served [flexjobs s-1]",
            "dedicatedResources": {
                "machineSpec": {"machineType": "g2"},
                "spot": True,
                "minReplicaCount": 4,
            },
            "status": {"availableReplicaCount": 0},
        },
        {
            "id": FALLBACK_ID,
            "model": MODEL,
            "displayName": "served [flexjobs s-1] (on-demand fallback)",
            "dedicatedResources": {"machineSpec": {"machineType": "g2"}, "minReplicaCount": 4},
            "status": {"availableReplicaCount": 4},
        },
    ]
    models += [{"id": f"o{i}", "displayName": f"o{i}"} for i in range(MAX_MODELS)]
    split = {SPOT_ID: 36, **{f"o{i}": 1 for i in range(MAX_MODELS)}}
    read = ObservedEndpoint.from_json(
        {"name": "e", "deployedModels": models, "trafficSplit": split, "etag": "1"}
    )
    # The baseline taken as resume takes it: the fallback is ours, 62 others are read.
    state = resume(
        replace(start(SPOT_ID, read, T0), phase=Phase.PAUSED_BY_HAND, fallback_id=FALLBACK_ID),
        read,
        T0,
    )
    assert state.phase is Phase.HEDGED
    action = decide(read, state, T0 + MINUTE)
    if action.split is not None:
        assert sum(action.split.values()) == 100, f"split sums to {sum(action.split.values())}"
    else:
        assert action.kind in (ActionKind.PAUSE, ActionKind.NOTHING, ActionKind.RECORD)


def test_an_undeploy_on_an_endpoint_past_max_models_never_leaves_its_fallback():
    """(b) With MAX_MODELS other models, the fallback (deployed last) is past what from_json
    reads: the undeploy takes the Spot model down and calls the deployment UNDEPLOYED, and
    the on-demand fallback it recorded stays on the endpoint, paid for, followed by nobody."""
    from shared.domain.serving.rule import begin_undeploy

    others = [{"id": f"o{i}", "displayName": f"o{i}"} for i in range(MAX_MODELS)]
    fallback = {
        "id": FALLBACK_ID,
        "displayName": "served [flexjobs s-1] (on-demand fallback)",
        "dedicatedResources": {"minReplicaCount": 2},
        "status": {"availableReplicaCount": 2},
    }
    split = {f"o{i}": (100 - MAX_MODELS) + 1 if i == 0 else 1 for i in range(MAX_MODELS)}
    read = ObservedEndpoint.from_json(
        {"name": "e", "deployedModels": [*others, fallback], "trafficSplit": split}
    )  # the Spot model is already gone; the fallback is the 65th model
    state = replace(
        begin_undeploy(start(SPOT_ID, ObservedEndpoint("e", (spot_model(2, 2),), {}), T0), T0),
        fallback_id=FALLBACK_ID,
        fallback_name=fallback["displayName"],
        fallback_replicas=2,
    )
    action = decide(read, state, T0 + MINUTE)
    assert action.state.phase is not Phase.UNDEPLOYED, "fallback 222 left on the endpoint"


def test_the_flexjobs_name_pattern_is_the_deployment_tags_form():
    from shared.domain.decisions.deploy_model import tagged_display_name

    for request_id in ("s-1", "Team/Run 7", "x" * 300):
        name = tagged_display_name("served", request_id)
        spot = ObservedModel("1", MODEL, name, MACHINE, True, 1, 1)
        assert spot.flexjobs
        assert replace(spot, display_name=fallback_display_name(spot)).flexjobs
    assert not replace(spot_model(1), display_name="canary").flexjobs
