"""The Spot serving machine (shared.domain.serving): one pure decision per fresh read of the
endpoint, the outcome of each call written back as an input, and never making serving worse.

Everything runs on plain values: an endpoint in memory that only stores what the calls set
(:class:`Vertex`), and a driver that runs the machine as the tick does (:class:`Driver`): one
read, one decision, its call (answered by Vertex unless the test says otherwise). Every
decision a driver takes is held to the machine's own table (``rule.TRANSITIONS``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain.decisions.deploy_model import tagged_display_name
from shared.domain.serving import rule
from shared.domain.serving.model import (
    HISTORY_LIMIT,
    MAX_CAUSE,
    MAX_ID,
    MAX_MODELS,
    MAX_NAME,
    MAX_STATE_BYTES,
    ActionKind,
    CallKind,
    Capacity,
    CapacityStep,
    InFlight,
    Intent,
    MachineSpec,
    ObservedEndpoint,
    ObservedModel,
    Ours,
    Phase,
    ServingAction,
    ServingSettings,
    ServingState,
    fallback_display_name,
    floor_display_name,
)
from shared.domain.serving.objective import ServingPolicy
from shared.domain.serving.rule import (
    CALL_LIMIT_SECONDS,
    DEPLOY_LIMIT_SECONDS,
    REFUSED_BACKOFF_SECONDS,
    OperationOutcome,
    answered,
    decide,
    lost,
    new_state,
    refused,
    released,
    told,
)
from shared.domain.serving.split import hedged_split, largest_remainder

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
MACHINE = MachineSpec("g2-standard-8", "NVIDIA_L4", 1)
MODEL = "projects/p/locations/us-central1/models/m"
NAME = "served [flexjobs s-1]"
FALLBACK = fallback_display_name(NAME)
SPOT_ID = "111"
SETTINGS = ServingSettings()  # grace 300 s, hold 1800 s

#: Every decision any driver of this module took: (the state before, the action).
DECIDED: list[tuple[ServingState, ServingAction]] = []


def check_transition(before: ServingState, action: ServingAction) -> None:
    """A decision names a transition of the table, and its phase change is one the row
    allows."""
    assert action.transition == "none" or action.transition in rule.TRANSITION_NAMES, action
    assert rule.allowed(action.transition, before.phase, action.state.phase), (
        f"{action.transition}: {before.phase} -> {action.state.phase} ({action.reason})"
    )


# --- an endpoint in memory and a driver ------------------------------------------------------


@dataclass
class Vertex:
    """An endpoint in memory: storage only. The test sets availability and says when a
    long-running call's effect shows (:meth:`land`); a deployed model appears with no available
    replica, as DeployModel leaves it."""

    models: dict[str, ObservedModel] = field(default_factory=dict)
    split: dict[str, int] = field(default_factory=dict)
    next_id: int = 200
    truncated: bool = False
    #: The DeployModel operations ListOperations shows still running (when each started):
    #: none unless a test says so (None: not known).
    deploying: tuple[datetime, ...] | None = ()

    def add(
        self, model_id: str, name: str, *, spot: bool, required: int, available: int
    ) -> ObservedModel:
        model = ObservedModel(model_id, MODEL, name, MACHINE, spot, required, available)
        self.models[model_id] = model
        return model

    def other(self, model_id: str, available: int = 1, share: int = 0) -> None:
        """A model no flexjobs deployment owns."""
        self.add(model_id, f"canary {model_id}", spot=False, required=1, available=available)
        if share:
            self.split[model_id] = share

    def read(self) -> ObservedEndpoint:
        return ObservedEndpoint(
            "e",
            tuple(self.models.values()),
            dict(self.split),
            "etag",
            self.truncated,
            self.deploying,
        )

    def set_available(self, model_id: str, available: int) -> None:
        self.models[model_id] = replace(self.models[model_id], available=available)

    def by_name(self, name: str) -> ObservedModel | None:
        return next((m for m in self.models.values() if m.display_name == name), None)

    def land(self, call: InFlight, *, available: int = 0, model_id: str | None = None) -> str:
        """The effect of ``call`` shows on the endpoint; the model it is about."""
        if call.kind.deploys:
            if model_id is None:
                self.next_id += 1
            new_id = model_id or str(self.next_id)
            spot = call.kind is CallKind.DEPLOY_SPOT
            self.add(new_id, call.target, spot=spot, required=call.replicas, available=available)
            return new_id
        if call.kind is CallKind.MUTATE:
            self.models[call.target] = replace(self.models[call.target], required=call.replicas)
            return call.target
        assert self.split.get(call.target, 0) == 0 or len(self.models) == 1, (
            "undeployed with traffic"
        )
        del self.models[call.target]
        self.split.pop(call.target, None)
        if not self.models:
            self.split.clear()
        return call.target


class Driver:
    """One deployment run as the tick runs it: a fresh read, one decision, its call. A call
    is answered by Vertex with an operation unless ``answer=False`` (its answer was lost, or it
    is still on its way); a traffic move is applied at once."""

    def __init__(
        self,
        vertex: Vertex,
        state: ServingState,
        cfg: ServingSettings = SETTINGS,
        now: datetime = T0,
    ) -> None:
        self.vertex, self.state, self.cfg, self.now = vertex, state, cfg, now
        self.actions: list[ServingAction] = []
        self.notices: list[str] = []
        self.operations = 0

    def __call__(
        self,
        minutes: float = 1,
        *,
        answer: bool = True,
        operation: OperationOutcome | None = None,
        leaving: frozenset[str] = frozenset(),
    ) -> ServingAction:
        self.now += minutes * MINUTE
        before = self.state
        action = decide(
            before, self.vertex.read(), self.now, self.cfg, operation=operation, leaving=leaving
        )
        check_transition(before, action)
        DECIDED.append((before, action))
        self.actions.append(action)
        self.notices.extend(action.notices)
        if action.kind is ActionKind.TRAFFIC:
            assert action.split is not None
            self.vertex.split = dict(action.split)
        self.state = action.state
        if action.kind is ActionKind.CALL:
            assert action.call is not None and action.state.call == action.call
            if answer:
                self.answer()
        return action

    def answer(self) -> str:
        """Vertex answers the call in flight with its operation."""
        assert self.state.call is not None
        self.operations += 1
        name = f"e/operations/{self.operations}"
        got = answered(self.state, self.state.call, name)
        assert got is not None
        before = self.state
        self.state, notices = got
        assert rule.allowed("call", before.phase, self.state.phase)
        self.notices.extend(notices)
        return name

    def tell(self, intent: Intent) -> None:
        after = told(self.state, intent, self.now)
        assert after is not None
        assert rule.allowed("told", self.state.phase, after.phase)
        self.state = after

    def land(self, *, available: int = 0) -> str:
        """The call in flight's effect shows on the endpoint."""
        assert self.state.call is not None
        return self.vertex.land(self.state.call, available=available)

    def kinds(self) -> list[ActionKind]:
        return [a.kind for a in self.actions]

    def transitions(self) -> list[str]:
        return [a.transition for a in self.actions]


def deployed(
    required: int = 4,
    *,
    policy: ServingPolicy | None = None,
    cfg: ServingSettings = SETTINGS,
    vertex: Vertex | None = None,
    name: str = NAME,
    spot_id: str = SPOT_ID,
    share: int = 100,
) -> Driver:
    """A deployment whose Spot model was deployed (with ``share`` of the traffic) and serves
    every replica: SERVING, DEPLOYED notified."""
    vertex = vertex if vertex is not None else Vertex()
    policy = policy or ServingPolicy()
    drive = Driver(vertex, new_state(name, required, policy, T0), cfg)
    first = drive(0)
    assert first.call is not None and first.call.kind is CallKind.DEPLOY_SPOT
    vertex.land(first.call, available=policy.spot_replicas(required), model_id=spot_id)
    if share:
        vertex.split[spot_id] = share
    up = drive()
    assert up.transition == "deployed" and up.notices == ("DEPLOYED",)
    return drive


def hedge_lost() -> tuple[Driver, ServingAction]:
    """A deployed deployment whose Spot model lost every replica, hedged 5 minutes later by
    a DeployModel whose answer was lost (timed out: it may have happened)."""
    drive = deployed()
    drive.vertex.set_available(SPOT_ID, 0)
    drive()
    hedge = drive(5, answer=False)
    assert hedge.call is not None
    drive.state = lost(drive.state, hedge.call) or drive.state
    # It did happen: Vertex runs its DeployModel from then (ListOperations lists it).
    drive.vertex.deploying = (hedge.call.at,)
    return drive, hedge


def hedged(spot: int = 0, required: int = 4, *, vertex: Vertex | None = None) -> Driver:
    """A deployment hedged after losing Spot replicas: the fallback serves and has traffic."""
    drive = deployed(required, vertex=vertex)
    drive.vertex.set_available(SPOT_ID, spot)
    drive()
    hedge = drive(5)
    assert hedge.transition == "hedge"
    fallback = drive.land(available=required - spot)
    shift = drive()
    assert shift.kind is ActionKind.TRAFFIC and drive.state.fallback is not None
    assert drive.state.fallback.id == fallback
    return drive


def fallback_id(drive: Driver) -> str:
    assert drive.state.fallback is not None and drive.state.fallback.id is not None
    return drive.state.fallback.id


# --- reading an endpoint ------------------------------------------------------------------


def test_required_replicas_are_required_replica_count_else_min_replica_count():
    def read(resources):
        raw = {"deployedModels": [{"id": "1", "dedicatedResources": resources}]}
        return ObservedEndpoint.from_json(raw).models[0].required

    assert read({"minReplicaCount": 4, "requiredReplicaCount": 2}) == 2
    assert read({"minReplicaCount": 4}) == 4
    assert read({"minReplicaCount": "3"}) == 3  # int64/int32 may come as strings
    assert read({"minReplicaCount": True}) == 0  # a bool is no count
    assert read({"minReplicaCount": 4, "requiredReplicaCount": 0}) == 4  # proto3's unset


def test_an_endpoint_read_is_bounded_in_models_and_strings():
    raw = {
        "name": "n" * 10_000,
        "etag": "t" * 10_000,
        "deployedModels": [
            {"id": str(i), "displayName": "x" * 10_000, "status": {"availableReplicaCount": 1}}
            for i in range(MAX_MODELS + 50)
        ],
        "trafficSplit": {str(i): 1 for i in range(MAX_MODELS + 50)} | {"ghost": 5},
    }
    endpoint = ObservedEndpoint.from_json(raw)
    assert len(endpoint.models) == MAX_MODELS
    assert endpoint.truncated  # the read is not the whole endpoint
    assert len(endpoint.name) <= MAX_NAME and len(endpoint.etag) <= MAX_NAME
    assert all(len(m.display_name) <= MAX_NAME for m in endpoint.models)
    # A share of a model not read (past the bound, or not deployed) is not kept.
    assert set(endpoint.traffic_split) <= {m.id for m in endpoint.models}
    exactly = ObservedEndpoint.from_json({"deployedModels": raw["deployedModels"][:MAX_MODELS]})
    assert not exactly.truncated


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
    huge = ObservedEndpoint.from_json(
        {
            "deployedModels": [
                {
                    "id": "1",
                    "dedicatedResources": {"minReplicaCount": "9" * 50},
                    "status": {"availableReplicaCount": 10**30},
                }
            ]
        }
    )
    # Counts are int32 in the protos: a larger number is held at the bound, a longer string
    # is no count.
    assert (huge.models[0].available, huge.models[0].required) == (2**31 - 1, 0)


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
    with pytest.raises(ValueError, match=">= 0"):
        largest_remainder(-1, [1])


@st.composite
def endpoints(draw):
    """An endpoint with Spot, a fallback and up to three other models, any valid split."""
    others = draw(st.integers(0, 3))
    ids = [SPOT_ID, "222"] + [f"o{i}" for i in range(others)]
    weights = draw(st.lists(st.integers(0, 10), min_size=len(ids), max_size=len(ids)))
    if sum(weights) == 0:
        weights[0] = 1
    split = dict(zip(ids, largest_remainder(100, weights), strict=True))
    return ObservedEndpoint("e", (), split)


@given(endpoint=endpoints(), spot=st.integers(0, 8), fallback=st.integers(0, 8))
def test_a_hedged_split_sums_to_100_keeps_the_others_and_never_feeds_an_empty_model(
    endpoint, spot, fallback
):
    split = hedged_split(endpoint, (SPOT_ID, "222"), (spot, fallback))
    if spot + fallback == 0:
        assert split is None  # nowhere to move traffic: the split stays as it is
        return
    assert split is not None
    assert sum(split.values()) == 100
    assert all(v > 0 for v in split.values())
    for other, share in endpoint.traffic_split.items():
        if other not in (SPOT_ID, "222"):
            assert split[other] == share
    pool = endpoint.share(SPOT_ID) + endpoint.share("222")
    assert split.get(SPOT_ID, 0) + split.get("222", 0) == pool
    if spot == 0:
        assert SPOT_ID not in split
    if fallback == 0:
        assert "222" not in split


def test_the_pool_follows_the_replicas_each_can_serve():
    endpoint = ObservedEndpoint("e", (), {SPOT_ID: 70, "other": 30})
    # 17.5 and 52.5: the remainders tie, and the point goes to the larger weight.
    assert dict(hedged_split(endpoint, (SPOT_ID, "222"), (1, 3)) or {}) == {
        SPOT_ID: 17,
        "222": 53,
        "other": 30,
    }
    assert hedged_split(ObservedEndpoint("e", (), {}), (SPOT_ID,), (1,)) is None  # no traffic


# --- deploying ------------------------------------------------------------------------------


def test_the_spot_model_is_deployed_once_then_followed_and_deployed_is_notified_once():
    vertex = Vertex()
    drive = Driver(vertex, new_state(NAME, 2, ServingPolicy(), T0))
    first = drive(0)
    assert (first.kind, first.transition) == (ActionKind.CALL, "deploy")
    assert first.deploy is not None
    assert (first.deploy.display_name, first.deploy.replicas, first.deploy.spot) == (NAME, 2, True)
    for _ in range(15):  # a GPU DeployModel runs for many minutes: never sent twice
        assert drive().kind is ActionKind.NOTHING
    drive.land(available=2)
    vertex.split = {"201": 100}
    up = drive()
    assert (up.transition, up.state.phase, up.state.spot.id) == ("deployed", Phase.SERVING, "201")
    assert drive.notices == ["DEPLOYED"]
    assert up.state.call is None and up.state.pool == 100


def test_a_spot_model_refused_for_quota_is_parked_then_sent_again():
    drive = Driver(Vertex(), new_state(NAME, 2, ServingPolicy(), T0))
    first = drive(0, answer=False)
    assert first.call is not None
    got = refused(drive.state, first.call, "quota", drive.now, retry_at=drive.now + 10 * MINUTE)
    assert got is not None and got[1] == ()
    drive.state = got[0]
    assert (drive.state.phase, drive.state.call) == (Phase.DEPLOYING, None)
    for _ in range(9):
        step = drive()
        assert step.kind is ActionKind.NOTHING and step.call is None
    again = drive()
    assert (again.kind, again.transition) == (ActionKind.CALL, "deploy")


def test_a_spot_model_refused_for_good_fails_the_deployment():
    drive = Driver(Vertex(), new_state(NAME, 2, ServingPolicy(), T0))
    first = drive(0, answer=False)
    assert first.call is not None
    got = refused(
        drive.state, first.call, "INVALID_ARGUMENT: no such model", drive.now, retry_at=None
    )
    assert got is not None
    state, notices = got
    assert (state.phase, notices) == (Phase.FAILED, ("FAILED",))
    assert "no such model" in state.history[-1].cause
    assert rule.allowed("call", Phase.DEPLOYING, Phase.FAILED)
    assert decide(state, Vertex().read(), T0 + MINUTE).kind is ActionKind.NOTHING  # ended


def test_the_spot_models_operation_decides_its_outcome_before_the_endpoint_lists_it():
    drive = Driver(Vertex(), new_state(NAME, 2, ServingPolicy(), T0))
    drive(0)
    operation = drive.state.call.operation  # type: ignore[union-attr]
    assert operation
    running = drive(operation=OperationOutcome(operation, False))
    assert running.kind is ActionKind.NOTHING
    other = drive(operation=OperationOutcome("e/operations/other", True, "9"))
    assert other.kind is ActionKind.NOTHING  # another call's operation says nothing of ours
    done = drive(operation=OperationOutcome(operation, True, "42"))
    assert (done.state.spot.id, done.state.call, done.state.phase) == ("42", None, Phase.DEPLOYING)
    failed = Driver(Vertex(), new_state(NAME, 2, ServingPolicy(), T0))
    failed(0)
    op = failed.state.call.operation  # type: ignore[union-attr]
    end = failed(operation=OperationOutcome(op or "", True, error="STOCKOUT"))
    assert (end.transition, end.state.phase, end.notices) == (
        "deploy-failed",
        Phase.FAILED,
        ("FAILED",),
    )


# --- grace period and hedge -----------------------------------------------------------------


def test_nothing_changes_and_nothing_is_written_while_spot_serves():
    drive = deployed()
    entries = len(drive.state.history)
    for _ in range(10):
        assert drive().kind is ActionKind.NOTHING
    assert drive.state.phase is Phase.SERVING
    assert len(drive.state.history) == entries


def test_no_hedge_before_the_grace_period_then_one_sized_to_the_deficit():
    drive = deployed()
    drive.vertex.set_available(SPOT_ID, 1)  # three of four Spot replicas reclaimed
    first = drive()
    assert (first.kind, first.state.phase) == (ActionKind.RECORD, Phase.DEFICIT)
    for _ in range(4):  # 1..4 minutes in deficit: Compute Engine's restarts may still win
        assert drive().kind is ActionKind.NOTHING
    hedge = drive(answer=False)  # 5 minutes: the grace period is over
    assert (hedge.kind, hedge.transition) == (ActionKind.CALL, "hedge")
    assert hedge.deploy is not None and hedge.call is not None
    assert (hedge.deploy.display_name, hedge.deploy.replicas, hedge.deploy.spot) == (
        FALLBACK,
        3,
        False,
    )
    assert (hedge.call.kind, hedge.call.target, hedge.call.replicas) == (
        CallKind.DEPLOY_FALLBACK,
        FALLBACK,
        3,
    )
    # The fallback has no replica yet: the split does not move with the deploy.
    assert hedge.split is None
    assert (hedge.state.phase, hedge.state.hedges) == (Phase.HEDGED, 1)


def test_a_blip_shorter_than_the_grace_period_costs_no_hedge():
    drive = deployed()
    drive.vertex.set_available(SPOT_ID, 0)
    drive(), drive(), drive()
    drive.vertex.set_available(SPOT_ID, 4)  # Compute Engine restarted the nodes in time
    assert drive().state.phase is Phase.SERVING
    drive.vertex.set_available(SPOT_ID, 0)
    for _ in range(5):  # a new deficit starts a new grace period (0 to 4 minutes in)
        assert drive().kind in (ActionKind.RECORD, ActionKind.NOTHING)
    assert "hedge" not in drive.transitions()
    assert drive(answer=False).transition == "hedge"


def test_hedged_is_notified_only_once_the_fallbacks_deploy_model_reached_vertex():
    drive = deployed()
    drive.vertex.set_available(SPOT_ID, 0)
    drive()
    hedge = drive(5, answer=False)
    assert "HEDGED" not in hedge.notices and drive.notices == ["DEPLOYED"]
    # Never sent (a fault before Vertex): the claim goes, the hedge is not counted, and the
    # deficit keeps its age, so the next read hedges again at once.
    back = released(drive.state, hedge.call)  # type: ignore[union-attr]
    assert back is not None
    assert (back.phase, back.call, back.fallback, back.hedges) == (Phase.DEFICIT, None, None, 0)
    assert rule.allowed("call", Phase.HEDGED, back.phase)
    drive.state = back
    again = drive(answer=False)
    assert again.transition == "hedge"
    assert drive.notices == ["DEPLOYED"]
    drive.answer()  # Vertex answered with its operation: HEDGED is owed now, once
    assert drive.notices == ["DEPLOYED", "HEDGED"]
    drive.land(available=4)
    drive()
    drive()
    assert drive.notices.count("HEDGED") == 1


def test_a_hedge_whose_answer_was_lost_owes_hedged_when_its_fallback_lands():
    drive, hedge = hedge_lost()
    assert drive.state.call is not None and drive.state.call.unknown
    assert lost(drive.state, hedge.call) is None  # lost once
    for _ in range(10):
        assert drive().kind is ActionKind.NOTHING  # not sent again while it may happen
    assert "HEDGED" not in drive.notices
    drive.land(available=4)
    landed = drive()
    assert landed.kind is ActionKind.TRAFFIC
    assert landed.notices == ("HEDGED",)
    assert landed.state.fallback is not None and landed.state.fallback.id == "201"


def test_the_fallback_gets_traffic_only_once_it_has_replicas_then_in_proportion():
    drive = deployed()
    drive.vertex.set_available(SPOT_ID, 1)
    drive()
    assert drive(5).transition == "hedge"
    drive.land(available=0)
    kinds = []
    for _ in range(10):  # a GPU DeployModel takes many minutes: no traffic to it meanwhile
        kinds.append(drive().kind)
        assert "201" not in drive.vertex.split
    # The first read that shows the fallback records it (its DeployModel is done), no call.
    assert kinds == [ActionKind.RECORD] + [ActionKind.NOTHING] * 9
    assert fallback_id(drive) == "201" and drive.state.call is None
    drive.vertex.set_available("201", 3)
    shift = drive()
    assert (shift.kind, shift.transition) == (ActionKind.TRAFFIC, "shift")
    assert dict(shift.split or {}) == {SPOT_ID: 25, "201": 75}


def test_a_fallback_whose_operation_is_done_is_recorded_with_its_id():
    drive = deployed()
    drive.vertex.set_available(SPOT_ID, 0)
    drive()
    drive(5)
    operation = drive.state.call.operation  # type: ignore[union-attr]
    drive.vertex.land(drive.state.call, model_id="777")  # type: ignore[arg-type]
    done = drive(operation=OperationOutcome(operation or "", True, "777"))
    assert done.state.fallback == Ours(FALLBACK, "777", 4)
    assert (done.state.call, done.state.phase) == (None, Phase.HEDGED)


def test_a_fallback_done_but_not_listed_yet_is_not_a_hand_edit():
    drive = deployed()
    drive.vertex.set_available(SPOT_ID, 0)
    drive()
    drive(5)
    operation = drive.state.call.operation  # type: ignore[union-attr]
    done = drive(operation=OperationOutcome(operation or "", True, "777"))
    # Not a hand edit: the DeployModel stays in flight until a read lists its model.
    assert done.state.phase is Phase.HEDGED and done.transition != "pause"
    assert done.state.call is not None and done.state.call.kind is CallKind.DEPLOY_FALLBACK


def test_a_failed_hedge_waits_a_new_grace_period_before_the_next():
    drive = deployed()
    drive.vertex.set_available(SPOT_ID, 0)
    drive()
    assert drive(5).transition == "hedge"
    operation = drive.state.call.operation  # type: ignore[union-attr]
    failed = drive(operation=OperationOutcome(operation or "", True, error="RESOURCE_EXHAUSTED"))
    assert (failed.state.phase, failed.state.fallback, failed.state.call) == (
        Phase.DEFICIT,
        None,
        None,
    )
    assert "RESOURCE_EXHAUSTED" in failed.state.history[-1].cause
    for _ in range(4):
        assert drive().kind is ActionKind.NOTHING
    assert drive().transition == "hedge"
    assert drive.state.hedges == 2


def test_a_hedge_failed_through_its_operation_is_recorded_as_a_failed_hedge():
    drive = deployed()
    drive.vertex.set_available(SPOT_ID, 0)
    drive()
    drive(5)
    operation = drive.state.call.operation  # type: ignore[union-attr]
    failed = drive(operation=OperationOutcome(operation or "", True, error="RESOURCE_EXHAUSTED"))
    causes = failed.state.history[-1].cause.split("; ")
    assert any(part.startswith(rule.HEDGE_FAILED_CAUSE) for part in causes), causes


def test_a_hedge_refused_at_once_waits_a_new_grace_period_too():
    drive = deployed()
    drive.vertex.set_available(SPOT_ID, 0)
    drive()
    hedge = drive(5, answer=False)
    got = refused(drive.state, hedge.call, "quota", drive.now, retry_at=None)  # type: ignore[union-attr]
    assert got is not None
    drive.state = got[0]
    assert (drive.state.phase, drive.state.since) == (Phase.DEFICIT, drive.now)
    assert [drive().transition for _ in range(4)].count("hedge") == 0
    assert drive().transition == "hedge"


def test_a_long_running_call_is_claimed_in_the_state_it_writes_and_never_sent_twice():
    drive = deployed()
    drive.vertex.set_available(SPOT_ID, 0)
    drive()
    hedge = drive(5)
    assert hedge.state.call is not None and hedge.state.call.at == drive.now
    for _ in range(30):  # the DeployModel operation is still running: nothing shows
        assert drive().kind is ActionKind.NOTHING
    assert drive.state.hedges == 1


def test_a_hedge_with_no_answer_is_given_up_and_a_late_fallback_is_adopted_by_its_name():
    drive, hedge = hedge_lost()
    drive.vertex.deploying = ()  # ListOperations lists no DeployModel of it running
    given_up = drive(2)
    assert (given_up.state.call, given_up.state.phase) == (None, Phase.DEFICIT)
    assert given_up.state.given_up is not None and given_up.state.given_up.target == FALLBACK
    assert any("no answer, and none of it runs" in c.cause for c in given_up.state.history)
    # A DeployModel given up that lands late is ours by its name, not a hand edit.
    drive.vertex.land(hedge.call)
    late = drive()
    assert (late.transition, late.state.phase) == ("hedged", Phase.HEDGED)
    assert fallback_id(drive) == "201" and late.notices == ("HEDGED",)
    drive.vertex.set_available("201", 4)
    assert drive().transition == "shift"
    assert drive.vertex.split == {"201": 100}


def test_a_second_fallback_under_our_name_is_undeployed_and_never_fed():
    drive, first = hedge_lost()
    assert first.call is not None
    drive.vertex.deploying = ()  # ListOperations lists no DeployModel of it running
    drive(2)  # given up
    second = drive(5)
    assert second.transition == "hedge"
    drive.vertex.land(first.call, available=4)  # the first lands: it answers the second's claim
    drive()
    drive()
    assert fallback_id(drive) == "201"
    drive.vertex.land(second.call, available=4)  # type: ignore[arg-type]
    cleanup = drive()
    assert (cleanup.transition, cleanup.call.kind, cleanup.call.target) == (  # type: ignore[union-attr]
        "cleanup",
        CallKind.UNDEPLOY,
        "202",
    )
    assert drive.vertex.split.get("202", 0) == 0


def test_a_deficit_that_grows_grows_the_fallback():
    drive = deployed()
    drive.vertex.set_available(SPOT_ID, 3)
    drive()
    assert drive(5).deploy.replicas == 1  # type: ignore[union-attr]
    drive.land(available=1)
    assert drive().kind is ActionKind.TRAFFIC
    drive.vertex.set_available(SPOT_ID, 1)  # two more reclaimed
    assert drive().kind is ActionKind.TRAFFIC  # traffic first: the replicas that serve now
    grow = drive()
    assert (grow.transition, grow.call.kind, grow.call.replicas) == (  # type: ignore[union-attr]
        "grow",
        CallKind.MUTATE,
        3,
    )
    assert grow.state.fallback is not None and grow.state.fallback.replicas == 3
    assert drive().kind is ActionKind.NOTHING  # grown once, not at every tick
    drive.land()
    done = drive()
    assert done.state.call is None and done.state.fallback.replicas == 3  # type: ignore[union-attr]


def test_a_grow_that_failed_is_asked_for_again_after_a_backoff():
    drive = deployed()
    drive.vertex.set_available(SPOT_ID, 3)
    drive()
    drive(5)
    drive.land(available=1)
    drive()
    drive.vertex.set_available(SPOT_ID, 1)
    drive()
    grow = drive()
    assert grow.transition == "grow"
    operation = drive.state.call.operation  # type: ignore[union-attr]
    failed = drive(operation=OperationOutcome(operation or "", True, error="INTERNAL"))
    assert failed.state.call is None
    assert failed.state.fallback is not None and failed.state.fallback.replicas == 0
    waits = [drive().kind for _ in range(int(REFUSED_BACKOFF_SECONDS // 60) - 1)]
    assert ActionKind.CALL not in waits
    again = drive()
    assert (again.transition, again.call.replicas) == ("grow", 3)  # type: ignore[union-attr]


def test_a_fallback_is_never_larger_than_the_replica_cap():
    drive = deployed(4, cfg=ServingSettings(max_replicas=3))
    drive.vertex.set_available(SPOT_ID, 0)
    drive()
    hedge = drive(5)
    assert (hedge.transition, hedge.deploy.replicas) == ("hedge", 3)  # type: ignore[union-attr]


def test_a_deployment_without_the_hedge_never_deploys_a_fallback():
    drive = deployed(policy=ServingPolicy(hedge=False))
    drive.vertex.set_available(SPOT_ID, 0)
    for _ in range(60):
        assert drive().call is None
    assert drive.state.phase is Phase.DEFICIT


def test_a_warm_floor_is_deployed_beside_spot_and_counts_against_the_deficit():
    drive = deployed(4, policy=ServingPolicy(min_on_demand=1))
    assert drive.state.spot.replicas == 3  # the floor is part of the N
    drive.vertex.set_available(SPOT_ID, 3)
    floor = drive.actions[-1]
    assert floor.transition == "deployed"
    floor = drive()
    assert (floor.transition, floor.call.kind, floor.call.target, floor.call.replicas) == (  # type: ignore[union-attr]
        "floor",
        CallKind.DEPLOY_FLOOR,
        floor_display_name(NAME),
        1,
    )
    drive.land(available=1)
    shift = drive()
    assert dict(shift.split or {}) == {SPOT_ID: 75, "201": 25}
    assert drive.state.floor == Ours(floor_display_name(NAME), "201", 1)
    drive.vertex.set_available(SPOT_ID, 2)
    drive()
    hedge = drive(5)
    assert (hedge.transition, hedge.deploy.replicas) == ("hedge", 1)  # type: ignore[union-attr]


# --- hold period and the way back --------------------------------------------------------------


def test_no_restore_before_the_hold_period_then_traffic_back_first_then_undeploy():
    drive = hedged(spot=0)
    fallback = fallback_id(drive)
    drive.vertex.set_available(SPOT_ID, 4)
    back = drive()
    assert back.state.phase is Phase.RECOVERING
    assert back.kind is ActionKind.TRAFFIC  # traffic follows the replicas at once
    assert dict(back.split or {}) == {SPOT_ID: 50, fallback: 50}
    for _ in range(29):
        assert drive().kind is ActionKind.NOTHING
    restore = drive()  # 30 minutes of Spot serving all its replicas
    assert (restore.kind, restore.transition) == (ActionKind.TRAFFIC, "restore")
    assert dict(restore.split or {}) == {SPOT_ID: 100}
    undeploy = drive()  # a fresh read shows the fallback without traffic
    assert (undeploy.transition, undeploy.call.kind, undeploy.call.target) == (  # type: ignore[union-attr]
        "restore",
        CallKind.UNDEPLOY,
        fallback,
    )
    for _ in range(5):  # the UndeployModel runs: never sent again meanwhile
        assert drive().kind is ActionKind.NOTHING
    drive.land()
    done = drive()
    assert (done.kind, done.state.phase, done.state.fallback) == (
        ActionKind.RECORD,
        Phase.SERVING,
        None,
    )
    assert done.notices == ("RESTORED",)
    assert drive().kind is ActionKind.NOTHING


def test_an_undeploy_whose_effect_never_shows_is_given_up_then_sent_again():
    drive = hedged(spot=0)
    fallback = fallback_id(drive)
    drive.vertex.set_available(SPOT_ID, 4)
    drive(), drive(30)
    undeploy = drive(answer=False)
    assert undeploy.call is not None and undeploy.call.kind is CallKind.UNDEPLOY
    drive.state = lost(drive.state, undeploy.call) or drive.state
    waited = [drive() for _ in range(int(CALL_LIMIT_SECONDS // 60) - 1)]
    assert all(a.kind is ActionKind.NOTHING for a in waited)
    given_up = drive()
    assert given_up.state.given_up is not None and given_up.state.given_up.target == fallback
    assert any("no effect after 10 min" in c.cause for c in given_up.state.history)
    again = [drive() for _ in range(2)]
    assert any(a.call is not None and a.call.target == fallback for a in [given_up, *again])
    # The first one happened after all: the fallback leaving is our doing, never a hand edit.
    del drive.vertex.models[fallback]
    gone = drive()
    assert gone.state.phase is not Phase.PAUSED_BY_HAND
    assert gone.state.fallback is None and "RESTORED" in drive.notices


def test_a_flap_during_the_hold_resets_it():
    drive = hedged(spot=0)
    drive.vertex.set_available(SPOT_ID, 4)
    drive(20)  # 20 minutes into the hold
    drive.vertex.set_available(SPOT_ID, 2)  # the zone flaps
    assert drive().state.phase is Phase.HEDGED
    drive.vertex.set_available(SPOT_ID, 4)
    recovering = drive()
    assert recovering.state.phase is Phase.RECOVERING
    assert recovering.state.since == drive.now  # the hold starts again
    for _ in range(29):
        assert drive().transition != "restore"
    assert drive().transition == "restore"


def test_the_fallback_is_never_undeployed_from_a_read_where_spot_is_short():
    drive = hedged(spot=0)
    fallback = fallback_id(drive)
    drive.vertex.set_available(SPOT_ID, 4)
    drive()
    assert drive(30).transition == "restore"  # traffic back to Spot
    drive.vertex.set_available(SPOT_ID, 1)  # Spot lost again between the two steps
    step = drive()
    assert step.call is None
    assert step.state.phase is Phase.HEDGED
    assert (step.kind, step.transition) == (ActionKind.TRAFFIC, "shift")
    assert dict(step.split or {}) == {SPOT_ID: 20, fallback: 80}  # back to the fallback, 1:4


def test_if_spot_never_comes_back_the_fallback_stays_and_the_record_says_so():
    drive = hedged(spot=0)
    for _ in range(600):
        assert drive(10).kind is ActionKind.NOTHING
    assert drive.state.phase is Phase.HEDGED
    assert drive.state.since is not None and drive.now - drive.state.since > timedelta(hours=99)
    assert drive.state.fallback is not None and drive.state.fallback.id == "201"


# --- never make serving worse ---------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 4), st.integers(1, 40), st.booleans()),
        min_size=1,
        max_size=60,
    ),
    others=st.sampled_from([{}, {"o1": 1}, {"o1": 1, "o2": 0}]),
)
def test_every_step_keeps_serving_valid(steps, others):
    """Random Spot and fallback availability over time, calls landing at random: at every step
    the split sums to 100, other models keep their shares, a written split feeds no model of
    ours without replicas, a model leaves only without traffic (the fallback only while Spot
    serves every replica), and none of our own moves is taken for a hand edit."""
    vertex = Vertex()
    share = 60 if others else 100
    for other in others:
        vertex.other(other, others[other], 40 // len(others))
    drive = deployed(vertex=vertex, share=share)
    vertex.split[SPOT_ID] += 100 - sum(vertex.split.values())
    theirs = {k: v for k, v in vertex.split.items() if k != SPOT_ID}
    for spot, fallback, minutes, land in steps:
        vertex.set_available(SPOT_ID, spot)
        ours = drive.state.fallback
        if ours is not None and ours.id in vertex.models:
            vertex.set_available(ours.id, fallback)
        if land and drive.state.call is not None:
            drive.land(available=fallback)
        before = vertex.read()
        action = drive(minutes)
        assert sum(vertex.split.values()) == 100
        assert {k: vertex.split.get(k, 0) for k in theirs} == theirs
        if action.split is not None:
            for model in before.models:
                if model.id in drive.state.our_ids and model.available == 0:
                    assert action.split.get(model.id, 0) == 0
        if action.call is not None and action.call.kind is CallKind.UNDEPLOY:
            assert before.share(action.call.target) == 0
            if action.transition == "restore":
                spot_now = before.model(SPOT_ID)
                assert spot_now is not None and spot_now.available >= spot_now.required
        assert action.state.phase is not Phase.PAUSED_BY_HAND, action.reason
        assert len(drive.state.history) <= HISTORY_LIMIT
        assert all(len(c.cause) <= MAX_CAUSE for c in drive.state.history)


def test_a_shift_written_but_not_recorded_is_not_a_hand_edit():
    drive = hedged(spot=2)
    stale = drive.actions[-2].state  # the shift's state write was lost; Vertex took the split
    assert drive.vertex.split != {SPOT_ID: 100}
    action = decide(stale, drive.vertex.read(), drive.now + MINUTE, SETTINGS)
    assert action.state.phase is not Phase.PAUSED_BY_HAND
    assert action.transition != "pause"


def test_a_traffic_move_vertex_refused_is_asked_for_again_from_the_next_read():
    drive = deployed()
    drive.vertex.set_available(SPOT_ID, 1)
    drive()
    drive(5)
    drive.land(available=3)
    read, state = drive.vertex.read(), drive.state
    first = decide(state, read, drive.now + MINUTE, SETTINGS)
    assert first.kind is ActionKind.TRAFFIC
    # UpdateEndpoint failed (or its etag no longer matched): nothing applied, nothing written.
    again = decide(state, drive.vertex.read(), drive.now + 2 * MINUTE, SETTINGS)
    assert (again.kind, again.split) == (first.kind, first.split)


def test_two_deliveries_deciding_from_the_same_read_decide_the_same():
    """The rule is a function of the state, the read and the time: both name the same call;
    the record's conditional write lets one of them claim it."""
    drive = deployed()
    drive.vertex.set_available(SPOT_ID, 0)
    drive()
    read, now = drive.vertex.read(), drive.now + 5 * MINUTE
    one, two = decide(drive.state, read, now, SETTINGS), decide(drive.state, read, now, SETTINGS)
    assert one == two
    assert one.transition == "hedge"
    # The second, deciding on the first's claim, sends nothing.
    assert decide(one.state, read, now, SETTINGS).kind is ActionKind.NOTHING


def test_a_read_older_than_the_last_one_decided_on_decides_nothing():
    drive = deployed()
    drive.vertex.set_available(SPOT_ID, 0)
    newer = decide(drive.state, drive.vertex.read(), T0 + 10 * MINUTE, SETTINGS)
    assert newer.state.read_at == T0 + 10 * MINUTE
    drive.vertex.set_available(SPOT_ID, 4)
    stale = decide(
        newer.state, drive.vertex.read(), T0 + 11 * MINUTE, SETTINGS, read_at=T0 + 9 * MINUTE
    )
    assert (stale.kind, stale.state) == (ActionKind.NOTHING, newer.state)
    fresh = decide(
        newer.state, drive.vertex.read(), T0 + 11 * MINUTE, SETTINGS, read_at=T0 + 11 * MINUTE
    )
    assert fresh.state.phase is Phase.SERVING


# --- hand edits -----------------------------------------------------------------------------


def _add_new(vertex: Vertex) -> None:
    vertex.other("new")


def _remove_other(vertex: Vertex) -> None:
    del vertex.models["o1"]
    vertex.split.pop("o1")
    vertex.split[SPOT_ID] = 100


def _edit_other_share(vertex: Vertex) -> None:
    vertex.split.update({"o1": 10, "o2": 10})


def _take_our_share(vertex: Vertex) -> None:
    vertex.split.update({SPOT_ID: 50, "o1": 50})


def _undeploy_spot(vertex: Vertex) -> None:
    del vertex.models[SPOT_ID]
    vertex.split = {"o1": 100}


def _no_traffic(vertex: Vertex) -> None:
    vertex.split = {}


def _scale_spot(vertex: Vertex) -> None:
    vertex.models[SPOT_ID] = replace(vertex.models[SPOT_ID], required=40, available=0)


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (_add_new, "added ['new']"),
        (_remove_other, "removed ['o1']"),
        (_edit_other_share, "traffic split of other deployed models"),
        (_take_our_share, "traffic of this deployment was changed by hand (80% before)"),
        (_undeploy_spot, f"Spot model {SPOT_ID} was undeployed by hand"),
        (_no_traffic, "traffic of this deployment was changed by hand (80% before)"),
        (_scale_spot, "required replicas were changed by hand (4 -> 40)"),
    ],
)
def test_a_hand_edit_pauses_the_deployment_and_is_recorded(edit, says):
    vertex = Vertex()
    vertex.other("o1", share=20)
    vertex.other("o2")
    drive = deployed(vertex=vertex, share=80)
    edit(vertex)
    pause = drive()
    assert (pause.kind, pause.transition) == (ActionKind.RECORD, "pause")
    assert says in pause.reason
    assert pause.state.phase is Phase.PAUSED_BY_HAND
    assert says in pause.state.history[-1].cause
    if SPOT_ID in vertex.models:
        vertex.set_available(SPOT_ID, 0)
    for _ in range(20):  # nothing is called while paused, however long
        action = drive(5)
        assert action.call is None and action.split is None


def test_a_fallback_undeployed_by_hand_pauses_and_capacity_is_still_recorded():
    drive = hedged(spot=1)
    fallback = fallback_id(drive)
    del drive.vertex.models[fallback]
    drive.vertex.split = {SPOT_ID: 100}
    pause = drive()
    assert (pause.transition, pause.state.phase) == ("pause", Phase.PAUSED_BY_HAND)
    assert f"fallback {fallback} was undeployed by hand" in pause.reason
    drive.vertex.set_available(SPOT_ID, 0)
    for _ in range(60):  # Spot gone for an hour: still no hedge, the user is in charge
        action = drive()
        assert action.kind in (ActionKind.NOTHING, ActionKind.RECORD)
        assert (action.split, action.call, action.deploy) == (None, None, None)
    assert drive.state.last == Capacity(0, 0, 4)


def test_an_endpoint_past_max_models_is_not_hedged():
    drive = deployed()
    drive.vertex.truncated = True
    drive.vertex.set_available(SPOT_ID, 0)
    pause = drive()
    assert (pause.transition, pause.state.phase) == ("pause", Phase.PAUSED_BY_HAND)
    assert f"more than {MAX_MODELS} deployed models" in pause.reason
    assert all(drive(5).call is None for _ in range(5))


def test_resume_takes_the_endpoint_as_it_is_and_hedging_goes_on():
    drive = deployed()
    drive.vertex.other("new")
    assert drive().transition == "pause"
    drive.tell(Intent.RESUME)
    resumed = drive()
    assert (resumed.transition, resumed.state.phase) == ("resume", Phase.SERVING)
    assert dict(resumed.state.others) == {"new": 0}
    assert resumed.state.resumed_at == resumed.state.intent_at
    drive.vertex.set_available(SPOT_ID, 0)
    drive()
    assert drive(5).transition == "hedge"
    assert told(drive.state, Intent.RESUME, drive.now) is not None  # a later resume is new


def test_resume_keeps_a_fallback_it_finds_as_its_own():
    drive = hedged(spot=0)
    drive.vertex.other("new")
    assert drive().transition == "pause"
    drive.tell(Intent.RESUME)
    resumed = drive()
    assert (resumed.transition, resumed.state.phase) == ("resume", Phase.HEDGED)
    assert resumed.state.fallback is not None and resumed.state.fallback.id == "201"
    drive.vertex.set_available(SPOT_ID, 4)
    assert drive().state.phase is Phase.RECOVERING  # and comes back as ever


def test_a_resume_is_ignored_before_anything_is_deployed_and_after_a_cancel():
    state = new_state(NAME, 2, ServingPolicy(), T0)
    assert told(state, Intent.RESUME, T0) is None
    assert told(state, Intent.SERVE, T0) is None
    going = told(state, Intent.UNDEPLOY, T0)
    assert going is not None and going.phase is Phase.UNDEPLOYING
    assert told(going, Intent.RESUME, T0 + MINUTE) is None  # an undeploy is the last word
    assert told(going, Intent.UNDEPLOY, T0 + MINUTE) is None  # asked once


def test_a_resume_of_a_deployment_not_paused_changes_nothing():
    drive = deployed()
    drive.vertex.set_available(SPOT_ID, 0)
    drive()
    drive(3)
    drive.tell(Intent.RESUME)  # three minutes into the grace period
    drive()
    drive()
    assert drive.actions[-1].transition == "hedge"  # five minutes after the deficit began


# --- other flexjobs deployments on the same endpoint ---------------------------------------


def two_deployments() -> tuple[Driver, Driver]:
    """Deployment a (Spot model 111, all the traffic) and b (Spot model 311, none yet) on one
    endpoint, both serving."""
    vertex = Vertex()
    a = deployed(2, vertex=vertex)
    b_name = tagged_display_name("other", "s-2")
    b = deployed(2, vertex=vertex, name=b_name, spot_id="311", share=0)
    a()  # a sees b's model come: another flexjobs deployment's doing
    assert a.actions[-1].transition == "rebaseline"
    return a, b


def test_another_deployments_hedge_shift_restore_and_undeploy_never_pause_ours():
    a, b = two_deployments()
    vertex = a.vertex
    b_fallback_name = fallback_display_name(b.state.spot.name)
    vertex.split = {SPOT_ID: 50, "311": 50}
    a.tell(Intent.RESUME)  # the owner split the traffic and asked a to follow again
    a()
    b.tell(Intent.RESUME)
    b()
    vertex.set_available("311", 0)
    b()
    assert b(5).transition == "hedge"
    assert a().transition == "none"  # b's claim changes nothing on the endpoint
    b.land(available=2)
    assert vertex.by_name(b_fallback_name) is not None
    came = a()
    assert (came.transition, came.state.phase) == ("rebaseline", Phase.SERVING)
    assert b().transition == "shift"  # b's traffic moves within its own pool
    assert a().state.phase is Phase.SERVING
    vertex.set_available("311", 2)
    b()
    b(30)  # traffic back to b's Spot model, then its fallback leaves
    b()
    b.land()
    b()
    assert "RESTORED" in b.notices
    assert a().state.phase is Phase.SERVING
    b.tell(Intent.UNDEPLOY)
    gave = b()  # b's traffic goes to the others that serve: a's Spot model
    assert gave.transition == "undeploy" and dict(gave.split or {}) == {SPOT_ID: 100}
    took = a()
    assert took.state.phase is Phase.SERVING and took.state.pool == 100
    b()
    b.land()
    assert b().state.phase is Phase.UNDEPLOYED
    assert a().state.phase is Phase.SERVING
    assert "pause" not in a.transitions()


def test_a_model_with_no_flexjobs_tag_added_beside_two_deployments_still_pauses_both():
    a, b = two_deployments()
    a.vertex.other("canary")
    assert a().transition == "pause"
    assert b().transition == "pause"


def test_the_flexjobs_name_pattern_is_the_deployment_tags_form():
    for request_id in ("s-1", "Team/Run 7", "x" * 300):
        name = tagged_display_name("served", request_id)
        spot = ObservedModel("1", MODEL, name, MACHINE, True, 1, 1)
        assert spot.flexjobs
        assert replace(spot, display_name=fallback_display_name(name)).flexjobs
    assert not ObservedModel("1", MODEL, "canary", MACHINE, True, 1, 1).flexjobs


def test_fallback_names_of_two_deployments_with_long_display_names_never_collide():
    long = "x" * 200
    a, b = tagged_display_name(long, "a"), tagged_display_name(long, "b")
    assert fallback_display_name(a) != fallback_display_name(b)
    assert floor_display_name(a) != floor_display_name(b)
    assert len(fallback_display_name(a)) <= 128 and fallback_display_name(a).endswith(
        "[flexjobs a] (on-demand fallback)"
    )
    # b's fallback on the endpoint is never taken for a's.
    vertex = Vertex()
    drive = deployed(2, vertex=vertex, name=a)
    vertex.add("3", fallback_display_name(b), spot=False, required=2, available=2)
    vertex.set_available(SPOT_ID, 0)
    step = drive()
    assert drive.state.fallback is None and step.transition != "hedged"


# --- a cancel: undeploy ---------------------------------------------------------------------


def test_undeploy_order_traffic_to_the_others_that_serve_then_the_fallback_then_spot():
    vertex = Vertex()
    vertex.other("o1", available=1, share=20)
    vertex.other("o2", available=3, share=10)
    vertex.other("o3", available=0)  # no replica: never a target
    drive = deployed(vertex=vertex, share=70)
    drive.vertex.set_available(SPOT_ID, 2)
    drive()
    drive(5)
    drive.land(available=2)
    drive()
    fallback = fallback_id(drive)
    drive.tell(Intent.UNDEPLOY)
    moved = drive()
    assert (moved.kind, moved.transition, moved.state.phase) == (
        ActionKind.TRAFFIC,
        "undeploy",
        Phase.UNDEPLOYING,
    )
    # 70 points in proportion to 1 and 3 replicas: 17.5 and 52.5, the tie to the larger.
    assert dict(moved.split or {}) == {"o1": 37, "o2": 63}
    first = drive()
    assert (first.call.kind, first.call.target) == (CallKind.UNDEPLOY, fallback)  # type: ignore[union-attr]
    assert drive().kind is ActionKind.NOTHING  # one call at a time
    drive.land()
    second = drive()
    assert second.call is not None and second.call.target == SPOT_ID
    drive.land()
    done = drive()
    assert (done.transition, done.state.phase, done.notices) == (
        "undeployed",
        Phase.UNDEPLOYED,
        ("UNDEPLOYED",),
    )
    assert drive().kind is ActionKind.NOTHING


def test_undeploy_with_no_other_model_that_serves_gathers_on_spot_and_never_feeds_an_empty_one():
    vertex = Vertex()
    vertex.other("empty", available=0)
    drive = hedged(spot=2, vertex=vertex)
    fallback = fallback_id(drive)
    drive.tell(Intent.UNDEPLOY)
    gather = drive()
    assert gather.transition == "undeploy"
    assert dict(gather.split or {}) == {SPOT_ID: 100}  # the fallback's share to Spot
    assert drive().call.target == fallback  # type: ignore[union-attr]
    drive.land()
    for _ in range(25):  # nothing else serves: wait, never give traffic to "empty"
        step = drive()
        assert step.call is None and "empty" not in (step.split or {})
    away = drive(5)  # the hold passed since the cancel: the endpoint takes no traffic
    assert (away.kind, dict(away.split or {})) == (ActionKind.TRAFFIC, {})
    last = drive()
    assert last.call is not None and last.call.target == SPOT_ID
    drive.land()
    assert drive().state.phase is Phase.UNDEPLOYED


def test_the_last_model_of_an_endpoint_takes_the_split_with_it():
    drive = deployed()
    drive.tell(Intent.UNDEPLOY)
    last = drive()
    assert last.call is not None and last.call.target == SPOT_ID
    drive.land()
    assert drive.vertex.split == {}
    assert drive().notices == ("UNDEPLOYED",)


def test_a_deployment_cancelled_before_anything_was_deployed_ends_at_once():
    drive = Driver(Vertex(), new_state(NAME, 2, ServingPolicy(), T0))
    first = drive(0, answer=False)
    assert first.call is not None
    got = refused(drive.state, first.call, "quota", drive.now, retry_at=drive.now + 30 * MINUTE)
    drive.state = got[0]  # type: ignore[index]
    drive.tell(Intent.UNDEPLOY)
    done = drive()
    assert (done.transition, done.state.phase, done.notices) == (
        "undeployed",
        Phase.UNDEPLOYED,
        ("UNDEPLOYED",),
    )


def test_a_cancel_during_the_spot_deploy_model_waits_for_it_then_takes_it_down():
    drive = Driver(Vertex(), new_state(NAME, 2, ServingPolicy(), T0))
    drive(0)
    drive.tell(Intent.UNDEPLOY)
    waiting = drive()
    assert waiting.state.landing is not None and waiting.state.call is None
    for _ in range(10):
        assert drive().state.phase is Phase.UNDEPLOYING  # its model may still land
    drive.vertex.land(waiting.state.landing, available=2)
    drive.vertex.split = {"201": 100}
    down = drive()
    assert down.call is not None and down.call.target == "201"
    drive.land()
    assert drive().state.phase is Phase.UNDEPLOYED


def test_a_cancel_during_the_spot_deploy_model_ends_once_its_operation_failed():
    drive = Driver(Vertex(), new_state(NAME, 2, ServingPolicy(), T0))
    drive(0)
    drive.tell(Intent.UNDEPLOY)
    waiting = drive()
    assert waiting.state.landing is not None
    operation = waiting.state.landing.operation or ""
    failed = drive(operation=OperationOutcome(operation, True, error="STOCKOUT"))
    assert failed.state.phase is Phase.UNDEPLOYED


def test_a_cancel_is_never_lost_to_a_call_that_failed_was_lost_or_given_up():
    for outcome in ("refused", "released", "lost", "given up", "failed"):
        drive = deployed()
        drive.vertex.set_available(SPOT_ID, 0)
        drive()
        hedge = drive(5, answer=outcome == "failed")
        assert hedge.call is not None
        drive.tell(Intent.UNDEPLOY)
        at = hedge.call
        if outcome == "refused":
            drive.state = refused(drive.state, at, "quota", drive.now, retry_at=None)[0]  # type: ignore[index]
        elif outcome == "released":
            drive.state = released(drive.state, at) or drive.state
        elif outcome == "lost":
            drive.state = lost(drive.state, at) or drive.state
        elif outcome == "given up":
            drive.state = lost(drive.state, at) or drive.state
            drive(DEPLOY_LIMIT_SECONDS / 60)
        else:
            op = OperationOutcome(drive.state.call.operation or "", True, error="x")  # type: ignore[union-attr]
            drive(operation=op)
        assert (drive.state.intent, drive.state.phase) == (Intent.UNDEPLOY, Phase.UNDEPLOYING)
        for _ in range(int(DEPLOY_LIMIT_SECONDS // 60) + 5):
            if drive.state.phase is Phase.UNDEPLOYED:
                break
            if drive.state.call is not None:
                drive.land()
            drive()
        assert drive.state.phase is Phase.UNDEPLOYED, outcome
        assert drive.vertex.models == {}, outcome


@pytest.mark.parametrize("intent", [Intent.SERVE, Intent.UNDEPLOY])
def test_a_lost_deploy_model_is_not_given_up_while_a_deploy_model_may_still_land(intent):
    """A DeployModel whose answer was lost (its operation's name never recorded) is given up
    at the limit only once ListOperations shows no DeployModel started since its claim still
    running on the endpoint: however late it runs, its model would land with nobody to
    follow it (a cancelled deployment ended, billing). Not listed (None): not given up."""
    drive, hedge = hedge_lost()
    if intent is Intent.UNDEPLOY:
        drive.tell(intent)

    def kept(state: ServingState) -> InFlight | None:
        # A cancel sets the DeployModel aside (landing); the models there leave meanwhile.
        return state.landing if intent is Intent.UNDEPLOY else state.call

    drive()
    held = kept(drive.state)
    assert held is not None and held.operation is None and held.target == hedge.call.target
    for running in (None, (hedge.call.at + timedelta(seconds=30),)):
        drive.vertex.deploying = running
        waiting = drive(DEPLOY_LIMIT_SECONDS / 60 + 60)
        assert rule.asks_running_deploys(waiting.state, drive.now)
        assert kept(waiting.state) == held, running
        assert waiting.state.phase is not Phase.UNDEPLOYED
        assert "UNDEPLOYED" not in drive.notices
    # One started before the claim (another deployment's, or a hand deploy) is not it.
    drive.vertex.deploying = (hedge.call.at - timedelta(minutes=5),)
    if intent is Intent.UNDEPLOY:
        for _ in range(10):
            if drive.state.phase is Phase.UNDEPLOYED:
                break
            if drive.state.call is not None:
                drive.land()
            drive()
        assert drive.state.phase is Phase.UNDEPLOYED
        assert drive.state.given_up == held
    else:
        given_up = drive()
        assert given_up.state.call is None and given_up.state.given_up == held


# --- what the record keeps -------------------------------------------------------------------


def test_time_short_and_node_hours_by_capacity_type_accrue():
    drive = deployed()
    start, short = drive.now, drive.state.short_seconds  # the deploy's minute was short
    drive(60)  # an hour on 4 Spot replicas (no write: nothing changed)
    drive.vertex.set_available(SPOT_ID, 0)
    drive()  # the change: the hour and a minute on 4 Spot replicas are accounted
    assert drive.state.spot_node_seconds == pytest.approx(4 * (drive.now - start).total_seconds())
    drive(5)  # hedge
    drive.land(available=4)
    drive(15)  # the fallback serves, after 20 minutes with nothing serving
    state = drive.state
    assert state.short_seconds - short == pytest.approx(20 * 60)
    assert state.on_demand_node_seconds == 0  # the fallback's replicas count from now
    drive(60)
    drive.vertex.set_available(SPOT_ID, 4)
    drive()
    assert drive.state.on_demand_node_seconds == pytest.approx(4 * 61 * 60)
    assert drive.state.short_seconds - short == pytest.approx(20 * 60)


def _largest_state(char: str) -> ServingState:
    """The largest state the bounds allow, every string ``char`` repeated to its bound."""
    text = char * MAX_NAME
    call = InFlight(CallKind.DEPLOY_FALLBACK, text, T0, 2**31 - 1, text, True, T0)
    ids = [f"{i:03}" + char * (MAX_ID - 3) for i in range(MAX_MODELS)]
    state = replace(
        new_state(text, 2**31 - 1, ServingPolicy(1, 10**3, True), T0),
        phase=Phase.HEDGED,
        since=T0,
        spot=Ours(text, ids[0], 2**31 - 1),
        floor=Ours(text, ids[1], 2**31 - 1),
        fallback=Ours(text, ids[2], 2**31 - 1),
        pool=100,
        theirs=100,
        # An endpoint read holds at most MAX_MODELS models, ours or another's.
        others={i: 100 for i in ids[: MAX_MODELS // 2]},
        neighbours=tuple(ids[MAX_MODELS // 2 :]),
        call=call,
        given_up=call,
        landing=call,
        retry_at=T0,
        read_at=T0,
        resumed_at=T0,
        hedges=2**31 - 1,
    )
    cap = Capacity(2**31 - 1, 2**31 - 1, 2**31 - 1)
    for _ in range(5 * HISTORY_LIMIT):
        change = CapacityStep(T0, cap, char * MAX_CAUSE)
        state = replace(state, history=(*state.history, change))
    assert len(state.history) == HISTORY_LIMIT
    return state


def test_the_state_is_bounded_in_items_and_bytes():
    for char in ("9", "é"):  # 1 and 2 bytes in UTF-8
        state = _largest_state(char)
        assert state.size_bytes() <= MAX_STATE_BYTES, (char, state.size_bytes())
        assert ServingState.decode(json.loads(json.dumps(state.to_dict()))) == state
    # The rule clips a cause however long the reason it gives.
    drive = deployed()
    for i in range(3 * HISTORY_LIMIT):
        drive.vertex.set_available(SPOT_ID, i % 2 * 4)
        drive()
    assert len(drive.state.history) == HISTORY_LIMIT
    assert all(len(c.cause) <= MAX_CAUSE for c in drive.state.history)
    assert ServingState.decode(json.loads(json.dumps(drive.state.to_dict()))) == drive.state


def test_the_state_stays_under_its_byte_bound_with_three_byte_characters():
    # A CJK display name is three bytes a character; Vertex's own ids and names pass through
    # the same character bounds.
    assert _largest_state("€").size_bytes() <= MAX_STATE_BYTES


def test_a_hostile_stored_state_reads_back_bounded():
    drive = hedged(spot=1)
    long = "x" * 10_000
    hostile = drive.state.to_dict() | {
        "history": [{"at": T0.isoformat(), "cause": long}] * 10_000,
        "phase": "NO_SUCH_PHASE",
        "pool": 10**9,
        "theirs": -4,
        "hedges": 10**100,
        "others": {str(i): 1 for i in range(10 * MAX_MODELS)},
        "neighbours": [long] * 1000,
        "spotDisplayName": long,
        "last": {"spot": 10**100, "onDemand": -5, "required": "9" * 50},
        "nodeSeconds": {"SPOT": True, "ON_DEMAND": -3},
        "pending": {"call": "Nope", "at": T0.isoformat()},
    }
    decoded = ServingState.decode(hostile)
    assert decoded is not None
    assert len(decoded.history) == HISTORY_LIMIT
    assert all(len(c.cause) <= MAX_CAUSE for c in decoded.history)
    assert decoded.phase is Phase.PAUSED_BY_HAND  # unknown: flexjobs changes nothing
    assert (decoded.pool, decoded.theirs) == (100, 0)
    assert (decoded.hedges, decoded.last) == (2**31 - 1, Capacity(2**31 - 1, 0, 0))
    assert len(decoded.others) == MAX_MODELS
    assert len(decoded.neighbours) == 1 and len(decoded.neighbours[0]) == MAX_ID
    assert len(decoded.spot.name) == MAX_NAME
    assert (decoded.spot_node_seconds, decoded.on_demand_node_seconds) == (0.0, 0.0)
    assert decoded.call is None
    assert decoded.size_bytes() <= MAX_STATE_BYTES
    assert ServingState.decode({"phase": "SERVING"}) is None  # no Spot model, no time


def test_settings_refuse_negative_periods_and_no_replicas():
    with pytest.raises(ValueError, match=">= 0"):
        ServingSettings(grace_seconds=-1)
    with pytest.raises(ValueError, match=">= 0"):
        ServingSettings(hold_seconds=-1)
    with pytest.raises(ValueError, match="max_replicas"):
        ServingSettings(max_replicas=0)


# --- the transition table ----------------------------------------------------------------------


def test_the_table_names_each_transition_once_and_allowed_holds_to_its_rows():
    names = [t.name for t in rule.TRANSITIONS]
    assert len(names) == len(set(names)) == len(rule.TRANSITION_NAMES)
    assert rule.allowed("hedge", Phase.DEFICIT, Phase.HEDGED)
    assert rule.allowed("hedge", Phase.SERVING, Phase.SERVING)  # staying put always is
    assert not rule.allowed("hedge", Phase.HEDGED, Phase.DEFICIT)
    assert not rule.allowed("pause", Phase.PAUSED_BY_HAND, Phase.SERVING)
    assert not rule.allowed("no such transition", Phase.SERVING, Phase.DEFICIT)
    assert not rule.allowed("undeployed", Phase.UNDEPLOYED, Phase.SERVING)
    for row in rule.TRANSITIONS:  # nothing leaves an end
        assert not row.sources & {Phase.UNDEPLOYED, Phase.FAILED}, row.name


def _scenario(run: Callable[[], object]) -> Callable[[], list[tuple[ServingState, ServingAction]]]:
    def collect() -> list[tuple[ServingState, ServingAction]]:
        start = len(DECIDED)
        run()
        return DECIDED[start:]

    return collect


#: The scenarios above, run again for the table check: each one's decisions.
SCENARIOS = {
    "deploy": _scenario(
        test_the_spot_model_is_deployed_once_then_followed_and_deployed_is_notified_once
    ),
    "parked": _scenario(test_a_spot_model_refused_for_quota_is_parked_then_sent_again),
    "deploy-failed": _scenario(
        test_the_spot_models_operation_decides_its_outcome_before_the_endpoint_lists_it
    ),
    "hedge": _scenario(test_no_hedge_before_the_grace_period_then_one_sized_to_the_deficit),
    "hedge-failed": _scenario(test_a_failed_hedge_waits_a_new_grace_period_before_the_next),
    "given-up-adopted": _scenario(
        test_a_hedge_with_no_answer_is_given_up_and_a_late_fallback_is_adopted_by_its_name
    ),
    "cleanup": _scenario(test_a_second_fallback_under_our_name_is_undeployed_and_never_fed),
    "grow": _scenario(test_a_deficit_that_grows_grows_the_fallback),
    "floor": _scenario(test_a_warm_floor_is_deployed_beside_spot_and_counts_against_the_deficit),
    "restore": _scenario(
        test_no_restore_before_the_hold_period_then_traffic_back_first_then_undeploy
    ),
    "flap": _scenario(test_the_fallback_is_never_undeployed_from_a_read_where_spot_is_short),
    "pause": _scenario(test_a_fallback_undeployed_by_hand_pauses_and_capacity_is_still_recorded),
    "resume": _scenario(test_resume_keeps_a_fallback_it_finds_as_its_own),
    "neighbours": _scenario(
        test_another_deployments_hedge_shift_restore_and_undeploy_never_pause_ours
    ),
    "undeploy": _scenario(
        test_undeploy_order_traffic_to_the_others_that_serve_then_the_fallback_then_spot
    ),
    "undeploy-gather": _scenario(
        test_undeploy_with_no_other_model_that_serves_gathers_on_spot_and_never_feeds_an_empty_one
    ),
    "undeploy-landing": _scenario(
        test_a_cancel_during_the_spot_deploy_model_waits_for_it_then_takes_it_down
    ),
    "cancel-kept": _scenario(
        test_a_cancel_is_never_lost_to_a_call_that_failed_was_lost_or_given_up
    ),
    "truncated": _scenario(test_an_endpoint_past_max_models_is_not_hedged),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_transition_decide_reports_is_in_the_table_and_allows_its_phase_change(name):
    decided = SCENARIOS[name]()
    assert decided, "the scenario decided nothing"
    for before, action in decided:
        check_transition(before, action)
    assert any(action.transition != "none" for _, action in decided)


def test_the_scenarios_take_every_transition_decide_can_report():
    taken: set[str] = set()
    for run in SCENARIOS.values():
        taken.update(action.transition for _, action in run() if action.transition != "none")
    # "told" is written by told(), never by decide; a quota park decided again is NOTHING
    # ("none").
    never = {"told", "parked"}
    assert taken == rule.TRANSITION_NAMES - never, taken ^ (rule.TRANSITION_NAMES - never)


def test_restored_is_owed_under_the_transition_whose_row_owes_it():
    drive = hedged(spot=0)
    drive.vertex.set_available(SPOT_ID, 4)
    drive(), drive(30), drive()
    drive.land()
    done = drive()
    assert done.notices == ("RESTORED",)
    row = next(t for t in rule.TRANSITIONS if t.name == done.transition)
    assert row.notice == "RESTORED", done.transition


def test_a_hedge_with_no_grace_period_is_a_move_the_table_allows():
    drive = deployed(cfg=ServingSettings(grace_seconds=0))
    drive.vertex.set_available(SPOT_ID, 0)
    assert drive().transition == "hedge"


def test_a_restore_with_no_hold_period_is_a_move_the_table_allows():
    drive = hedged(spot=0)
    drive.cfg = ServingSettings(hold_seconds=0)
    drive.vertex.set_available(SPOT_ID, 4)
    assert drive().transition == "restore"


def test_an_undeploy_on_an_endpoint_past_max_models_never_leaves_its_fallback():
    models = [
        {"id": f"o{i}", "displayName": f"o{i}", "status": {"availableReplicaCount": 1}}
        for i in range(MAX_MODELS)
    ]
    models.append(
        {
            "id": "222",
            "displayName": FALLBACK,
            "dedicatedResources": {"minReplicaCount": 2},
            "status": {"availableReplicaCount": 2},
        }
    )  # the Spot model already gone; the fallback is the 65th model
    split = {f"o{i}": 1 for i in range(MAX_MODELS)} | {"o0": 100 - MAX_MODELS + 1}
    read = ObservedEndpoint.from_json(
        {"name": "e", "deployedModels": models, "trafficSplit": split}
    )
    drive = deployed(2)
    state = replace(drive.state, fallback=Ours(FALLBACK, "222", 2))
    going = told(state, Intent.UNDEPLOY, T0)
    assert going is not None
    action = decide(going, read, T0 + MINUTE)
    assert action.state.phase is not Phase.UNDEPLOYED, "fallback 222 left on the endpoint"


def test_an_undeploy_on_an_endpoint_past_max_models_writes_no_partial_split():
    models = [
        {
            "id": SPOT_ID,
            "displayName": NAME,
            "dedicatedResources": {"minReplicaCount": 2, "spot": True},
            "status": {"availableReplicaCount": 2},
        }
    ] + [
        {"id": f"o{i}", "displayName": f"o{i}", "status": {"availableReplicaCount": 1}}
        for i in range(MAX_MODELS)
    ]
    split = {SPOT_ID: 30} | {f"o{i}": 1 for i in range(MAX_MODELS)} | {"o0": 7}
    read = ObservedEndpoint.from_json(
        {"name": "e", "deployedModels": models, "trafficSplit": split}
    )
    assert read.truncated
    going = told(deployed(2).state, Intent.UNDEPLOY, T0)
    assert going is not None
    action = decide(going, read, T0 + MINUTE)
    assert action.split is None or sum(action.split.values()) == 100


def test_another_deployments_warm_floor_never_pauses_ours():
    vertex = Vertex()
    a = deployed(2, vertex=vertex)
    b_name = tagged_display_name("other", "s-2")
    b = deployed(2, vertex=vertex, name=b_name, spot_id="311", share=0, policy=ServingPolicy(1))
    a()
    assert b().transition == "floor"
    b.land(available=1)
    step = a()
    assert step.state.phase is not Phase.PAUSED_BY_HAND, step.reason


def test_docs_serving_prints_the_state_table_the_machine_takes():
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "serving.md").read_text()
    printed = page.split("<!-- state-table -->\n", 1)[1].split("\n<!-- /state-table -->", 1)[0]
    assert printed == rule.state_table()


def test_vertex_answering_a_deploy_model_a_cancel_set_aside_is_waited_for():
    """Found by review: a cancel sets the Spot DeployModel aside while it is being sent;
    Vertex's answer (its operation) is kept on the landing, so a late operation is waited for,
    never given up at the 2-hour limit (its model would land with nobody following it)."""
    empty = ObservedEndpoint("e", (), {})
    first = decide(new_state(NAME, 1, ServingPolicy(), T0), empty, T0)
    assert first.call is not None and first.call.kind is CallKind.DEPLOY_SPOT
    told_state = told(first.state, Intent.UNDEPLOY, T0 + timedelta(seconds=5))
    assert told_state is not None
    step = decide(told_state, empty, T0 + timedelta(seconds=6))
    assert step.state.landing is not None and step.state.call is None
    got = answered(step.state, first.call, "operations/op-1")
    assert got is not None and got[0].landing is not None
    assert got[0].landing.operation == "operations/op-1" and got[1] == ()
    later = T0 + timedelta(seconds=DEPLOY_LIMIT_SECONDS + 60)
    running = OperationOutcome("operations/op-1", done=False)
    end = decide(got[0], empty, later, operation=running)
    assert end.state.phase is Phase.UNDEPLOYING and end.state.landing is not None
    failed = OperationOutcome("operations/op-1", done=True, error="no capacity")
    gone = decide(end.state, empty, later + timedelta(minutes=1), operation=failed)
    assert gone.state.phase is Phase.UNDEPLOYED


def test_our_take_of_an_endpoint_with_no_traffic_whose_answer_was_lost_is_no_hand_edit():
    """The Spot model landed while it served nothing, on an endpoint that takes no traffic;
    once it serves, it takes the traffic. That UpdateEndpoint timed out after it took effect
    (or its state's write lost to another delivery's): the next read shows ours with all the
    traffic and the state as before the move. Our own doing: the baseline moves, no pause."""
    vertex = Vertex()
    drive = Driver(vertex, rule.new_state(NAME, 4, ServingPolicy(), T0))
    first = drive(0)
    assert first.call is not None
    vertex.land(first.call, available=0, model_id=SPOT_ID)
    up = drive()
    assert (up.kind, up.state.pool) == (ActionKind.RECORD, 0)  # nothing serves: nothing taken
    vertex.set_available(SPOT_ID, 4)
    before = drive.state
    take = drive()
    assert (take.kind, dict(take.split or {})) == (ActionKind.TRAFFIC, {SPOT_ID: 100})
    drive.state = before  # the move's answer was lost: Vertex took it, the state did not

    again = drive()
    assert again.transition != "pause", again.reason
    assert (again.state.phase, again.state.pool) == (Phase.SERVING, 100)


def test_a_read_of_a_version_older_than_our_traffic_move_decides_nothing():
    """Versions are ordered by the endpoint's updateTime, the server's: a read taken by a
    process whose clock runs ahead, or at the same instant of a clock that stands still, is
    still known to be older than the version our move made."""
    drive = deployed(share=0)
    made = drive.now + timedelta(seconds=5)
    moved = rule.traffic_moved(drive.state, made, drive.now)
    # Spot lost every replica: on a read of a version before the move, that decides nothing,
    # even one whose reader's clock says it was taken a minute after.
    drive.vertex.set_available(SPOT_ID, 0)
    older = replace(drive.vertex.read(), updated_at=made - timedelta(seconds=1))
    stale = rule.decide(moved, older, drive.now + MINUTE, SETTINGS)
    assert (stale.kind, stale.reason) == (
        ActionKind.NOTHING,
        "a read of an older version of the endpoint",
    )
    for fresh in (made, made + MINUTE):  # the version the move made, or a later one
        read = replace(drive.vertex.read(), updated_at=fresh)
        decided = rule.decide(moved, read, drive.now + MINUTE, SETTINGS)
        assert decided.state.phase is Phase.DEFICIT
        assert decided.state.endpoint_at == fresh
    # A read taken past READ_SETTLE_SECONDS after the newest one cannot be from before it:
    # an older time is then the endpoint's own, and never holds the deployment for good.
    later = drive.now + timedelta(seconds=rule.READ_SETTLE_SECONDS + 1)
    assert rule.decide(moved, older, later, SETTINGS).state.phase is Phase.DEFICIT
    # An endpoint that gives no updateTime is ordered by the readers' clocks alone.
    unversioned = replace(drive.vertex.read(), updated_at=None)
    assert (
        rule.decide(moved, unversioned, drive.now + MINUTE, SETTINGS).state.phase is Phase.DEFICIT
    )
