"""Spot serving's whole cycle on the embedded stack (issue 24's acceptance): a Spot deployment
loses its nodes, flexjobs hedges with an on-demand fallback within the grace period plus one
tick, traffic moves to it, Spot comes back, and after the hold period the traffic returns and
the fallback is undeployed; a notification is published at each step and the record's history
shows it.

Real parts throughout: the deployModel request goes through the Pub/Sub emulator to the
``handle_job_request`` function server; the ticks are the real ``handle_scheduler_tick``
handler, driven through functions-framework in this process, with the production wiring
(Firestore emulator, the ``aiplatform_v1`` clients of the Vertex adapters over gRPC to the
simulator, the Pub/Sub notifier) but one port: its clock is the simulator's. The simulator's
clock is frozen for the test and moved with ``POST /advance``, a simulated minute per tick, so
the product and the simulator share one time, and the grace (300 s) and hold (1800 s) periods
are their defaults' order, in simulated seconds, run in a few wall seconds.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from flexjobs_local.stack import LocalStack
from shared import bootstrap
from shared.kernel.config import Settings
from tests.events import load, pubsub_cloud_event
from tests.functional import conftest as functional
from tests.integration import test_kinds
from tests.integration.helpers import wait_for
from tests.integration.test_kinds import deployment_record

pytestmark = pytest.mark.integration

# The fixtures this module shares: a fresh endpoint in the simulator (test_kinds), and an
# entry point driven through functions-framework in this process (the functional tests').
endpoint = test_kinds.endpoint
post_event = functional.post_event

GRACE_SECONDS = 300
HOLD_SECONDS = 1800
TICK_SECONDS = 60  # simulated seconds between two ticks, as Cloud Scheduler's minute
PLACEMENT_SECONDS = 120  # Spot returns: the simulator places the nodes again this much later
REPLICAS = 2
# Wall-time bounds: every loop below ticks at most this many times, and polls with a deadline.
MAX_TICKS = 80


@pytest.fixture
def sim_clock(stack: LocalStack, endpoint: str) -> Callable[[], datetime]:
    """The simulator's clock, frozen once the endpoint exists (its CreateEndpoint operation
    ran on the running clock): only ``POST /advance`` moves it (reset restores it)."""
    sim = stack.simulator
    sim.set_time_factor(0)
    return lambda: datetime.fromtimestamp(sim.clock()["simNowEpoch"], UTC)


@pytest.fixture
def ticks(
    stack: LocalStack,
    sim_clock: Callable[[], datetime],
    post_event: Any,
) -> Iterator[Callable[[], int]]:
    """Fire the real ``handle_scheduler_tick`` once (returns its HTTP status), wired as in
    production, with the serving grace and hold periods set, on the simulator's clock."""
    env = {
        **os.environ,
        "FLEXJOBS_SERVING_GRACE_SECONDS": str(GRACE_SECONDS),
        "FLEXJOBS_SERVING_HOLD_SECONDS": str(HOLD_SECONDS),
    }
    bootstrap.override_tracker(bootstrap.build_tracker(Settings.from_env(env), sim_clock))
    fired = iter(range(1_000_000))

    def tick() -> int:
        event = pubsub_cloud_event(b"tick", message_id=f"tick-{next(fired)}")
        return int(post_event("handle_scheduler_tick", event).status_code)

    yield tick
    bootstrap.override_tracker(None)


def deploy_body(rid: str, endpoint: str, replicas: int) -> dict[str, Any]:
    """A deployModel request (Spot, ``replicas`` replicas, all the endpoint's traffic)."""
    body = load("deploy_request")
    body["requestId"] = rid
    body["deployModel"]["endpoint"] = endpoint
    body["deployModel"]["deployedModel"]["model"] = endpoint.replace("endpoints/123", "models/456")
    resources = body["deployModel"]["deployedModel"]["dedicatedResources"]
    resources.update(spot=True, minReplicaCount=replicas, maxReplicaCount=replicas)
    body["deployModel"]["trafficSplit"] = {"0": 100}
    return body


def spot_deployment(stack: LocalStack, db: Any, rid: str, endpoint: str) -> dict[str, Any]:
    """Publish a deployModel request (Spot, ``REPLICAS`` replicas, all traffic); its record
    once DEPLOYING."""
    stack.publish_request(deploy_body(rid, endpoint, REPLICAS))
    return wait_for(
        lambda: (r := deployment_record(db, rid)) and r.get("operation") and r,
        what="the DEPLOYING record",
    )


def serving(db: Any, rid: str) -> dict[str, Any]:
    return (deployment_record(db, rid) or {}).get("serving") or {}


def the_endpoint(stack: LocalStack, name: str) -> dict[str, Any]:
    return next(e for e in stack.simulator.endpoints() if e["name"] == name)


def shares(stack: LocalStack, name: str) -> dict[str, int]:
    """The endpoint's traffic split, its models with some traffic only (a 0 may be left out)."""
    split = the_endpoint(stack, name).get("trafficSplit") or {}
    assert sum(split.values()) == 100, split  # valid at every step
    return {model: share for model, share in split.items() if share}


def ok_calls(stack: LocalStack, method: str) -> list[dict[str, Any]]:
    return [c["request"] for c in stack.simulator.calls(method=method) if c["code"] == "OK"]


def fallback_deploys(stack: LocalStack) -> list[dict[str, Any]]:
    """Every DeployModel of an on-demand fallback in the call log, whatever its answer."""
    return [
        c["request"]
        for c in stack.simulator.calls(method="DeployModel")
        if c["request"]["deployedModel"]["displayName"].endswith("(on-demand fallback)")
    ]


def tick_until(
    stack: LocalStack, tick: Callable[[], int], done: Callable[[], Any], what: str
) -> tuple[Any, int]:
    """Advance a simulated minute and tick, until ``done()``; its value and the ticks fired.
    Fails after ``MAX_TICKS`` ticks."""
    for n in range(1, MAX_TICKS + 1):
        stack.simulator.advance(TICK_SECONDS)
        assert tick() == 200
        value = done()
        if value:
            return value, n
    raise AssertionError(f"no {what} after {MAX_TICKS} ticks")


def deployed(
    stack: LocalStack,
    db: Any,
    tick: Callable[[], int],
    rid: str,
    endpoint: str,
) -> str:
    """Deploy on Spot and tick until DEPLOYED and followed; the Spot deployed model's id."""
    spot_deployment(stack, db, rid, endpoint)
    tick_until(stack, tick, lambda: serving(db, rid).get("phase") == "SERVING", "serving")
    record = deployment_record(db, rid)
    assert record is not None and record["state"] == "DEPLOYED"
    spot_id = str(record["deployedModelId"])
    (model,) = the_endpoint(stack, endpoint)["deployedModels"]
    assert model["id"] == spot_id and model["dedicatedResources"]["spot"] is True
    assert serving(db, rid)["last"] == {"spot": REPLICAS, "onDemand": 0, "required": REPLICAS}
    return spot_id


def spot_goes(stack: LocalStack) -> datetime:
    """Spot capacity goes in the deployment's location: every node reclaimed; when."""
    location = stack.config.location
    state = stack.simulator.set_spot_serving(location, available=False)
    (model,) = state["deployedModels"]
    assert model["available"] == 0 and len(model["nodesDown"]) == REPLICAS
    assert all(node["phase"] == "RESTARTING" for node in model["nodesDown"])
    return datetime.fromtimestamp(stack.simulator.clock()["simNowEpoch"], UTC)


def test_spot_deployment_is_hedged_shifted_and_restored_with_a_notice_at_each_step(
    stack,
    db,
    unique,
    endpoint,
    ticks,
    notifications,
):
    sim = stack.simulator
    rid = unique("spot-serving")

    # 1. Deployed on Spot, two replicas, all the traffic.
    spot_id = deployed(stack, db, ticks, rid, endpoint)
    (spot_call,) = ok_calls(stack, "DeployModel")
    spot_model = spot_call["deployedModel"]
    assert [m["state"] for m in notifications(rid)] == ["DEPLOYED"]

    # 2. Spot capacity goes: the nodes are reclaimed, and their restarts fail.
    lost_at = spot_goes(stack)

    # 3. Hedged within the grace period plus one tick.
    _, n = tick_until(
        stack, ticks, lambda: serving(db, rid).get("phase") == "HEDGED", "hedge (HEDGED)"
    )
    hedged_at = datetime.fromisoformat(serving(db, rid)["since"])
    assert GRACE_SECONDS <= (hedged_at - lost_at).total_seconds() <= GRACE_SECONDS + TICK_SECONDS
    assert n <= (GRACE_SECONDS + TICK_SECONDS) // TICK_SECONDS
    # Compute Engine's restarts were tried, and failed: no Spot capacity.
    (down,) = sim.serving()["deployedModels"]
    assert down["available"] == 0
    assert all(node["restartTries"] >= 1 for node in down["nodesDown"]), down
    # More ticks while the fallback's DeployModel is in flight send nothing more.
    for _ in range(3):
        assert ticks() == 200
    deploys = ok_calls(stack, "DeployModel")
    assert len(deploys) == 2, deploys
    (fallback_call,) = fallback_deploys(stack)
    assert fallback_call == deploys[1]
    fallback = fallback_call["deployedModel"]
    assert fallback["dedicatedResources"].get("spot", False) is False
    assert fallback["model"] == spot_model["model"]
    assert (
        fallback["dedicatedResources"]["machineSpec"]
        == (spot_model["dedicatedResources"]["machineSpec"])
    )
    assert fallback["dedicatedResources"]["minReplicaCount"] == REPLICAS  # sized to the deficit
    assert fallback["displayName"] == f"served [flexjobs {rid}] (on-demand fallback)"
    assert not fallback_call.get("trafficSplit")  # deployed without traffic
    assert serving(db, rid)["phase"] == "HEDGED"
    assert [m["state"] for m in notifications(rid)] == ["DEPLOYED", "HEDGED"]

    # 4. The fallback's operation ends and it serves: the split gives it all the traffic.
    def fallback_takes_the_traffic() -> str | None:
        fallback_id = serving(db, rid).get("fallbackDeployedModelId")
        split = shares(stack, endpoint)
        return fallback_id if fallback_id and split.get(fallback_id) == 100 else None

    fallback_id, _ = tick_until(stack, ticks, fallback_takes_the_traffic, "shift to the fallback")
    assert shares(stack, endpoint) == {fallback_id: 100}  # Spot has none available
    assert serving(db, rid)["last"] == {"spot": 0, "onDemand": REPLICAS, "required": REPLICAS}
    assert len(fallback_deploys(stack)) == 1

    # 5. Spot returns; after the placement delay it serves, and the split follows the replicas.
    sim.set_spot_serving(stack.config.location, available=True, placement_seconds=PLACEMENT_SECONDS)
    splits: list[dict[str, int]] = []

    def recovering() -> bool:
        splits.append(shares(stack, endpoint))
        return serving(db, rid).get("phase") == "RECOVERING"

    _, n = tick_until(stack, ticks, recovering, "Spot serving again (RECOVERING)")
    assert n <= PLACEMENT_SECONDS // TICK_SECONDS + 1
    # Until Spot reported its replicas, the fallback kept all the traffic; the tick that saw
    # Spot serve again moved the split to follow the replicas, two and two.
    *before, after = splits
    assert before and all(split == {fallback_id: 100} for split in before), splits
    assert after == {spot_id: 50, fallback_id: 50}
    recovered_at = datetime.fromisoformat(serving(db, rid)["since"])
    assert serving(db, rid)["last"] == {
        "spot": REPLICAS,
        "onDemand": REPLICAS,
        "required": REPLICAS,
    }

    held: list[tuple[float, dict[str, int]]] = []  # (seconds into the hold, split) per tick

    def restored() -> bool:
        now = datetime.fromtimestamp(sim.clock()["simNowEpoch"], UTC)
        seen = the_endpoint(stack, endpoint)
        held.append(((now - recovered_at).total_seconds(), shares(stack, endpoint)))
        models = [m["id"] for m in seen.get("deployedModels") or []]
        return serving(db, rid).get("phase") == "SERVING" and models == [spot_id]

    tick_until(stack, ticks, restored, "the fallback undeployed (SERVING)")
    restored_at = datetime.fromtimestamp(sim.clock()["simNowEpoch"], UTC)
    # The hold period ran in full, the split kept as the replicas put it; then, within a few
    # ticks: the traffic back to Spot, then the UndeployModel, then a read that sees it gone.
    assert all(split == {spot_id: 50, fallback_id: 50} for at, split in held if at < HOLD_SECONDS)
    assert any(split == {spot_id: 100} and at >= HOLD_SECONDS for at, split in held), held
    assert (restored_at - recovered_at).total_seconds() >= HOLD_SECONDS
    assert (restored_at - recovered_at).total_seconds() <= HOLD_SECONDS + 3 * TICK_SECONDS
    (undeploy,) = [c["request"] for c in sim.calls(method="UndeployModel")]
    assert undeploy["deployedModelId"] == fallback_id
    final = the_endpoint(stack, endpoint)
    assert shares(stack, endpoint) == {spot_id: 100}
    (only,) = final["deployedModels"]
    assert only["id"] == spot_id and only["dedicatedResources"]["spot"] is True
    assert [m["state"] for m in notifications(rid)] == ["DEPLOYED", "HEDGED", "RESTORED"]
    assert len(fallback_deploys(stack)) == 1  # still one fallback, whatever the ticks

    # 6. The record shows each step.
    record = deployment_record(db, rid)
    assert record is not None
    state = record["serving"]
    causes = [change["cause"] for change in state["history"]]
    print("history:", *causes, sep="\n  ")  # shown with -s, and on a failure
    capacities = [(c["spot"], c["onDemand"]) for c in state["history"]]
    assert (0, 0) in capacities  # the nodes lost
    assert (0, REPLICAS) in capacities  # the fallback serving alone
    assert (REPLICAS, REPLICAS) in capacities  # Spot back beside it
    assert capacities[-1] == (REPLICAS, 0)  # Spot alone again
    assert any(f"{REPLICAS}+0 -> 0+0" in cause for cause in causes), causes
    assert any(cause.startswith("hedge:") or "; hedge:" in cause for cause in causes), causes
    assert any("restore: traffic back to Spot" in cause for cause in causes), causes
    assert any("restore: undeploy the fallback" in cause for cause in causes), causes
    assert any("restored" in cause for cause in causes[-1:]), causes
    assert state["hedges"] == 1
    assert state["phase"] == "SERVING" and state["fallbackDeployedModelId"] is None
    assert state["nodeSeconds"]["ON_DEMAND"] > 0
    assert state["nodeSeconds"]["SPOT"] > 0
    assert state["shortSeconds"] > 0
    assert state["pending"] is None
    assert record["outboxPending"] is False and not record.get("outbox")
    assert [m["state"] for m in record["notified"]] == ["DEPLOYED", "HEDGED", "RESTORED"]


def test_two_ticks_at_once_past_the_grace_period_deploy_one_fallback(
    stack,
    db,
    unique,
    endpoint,
    ticks,
    notifications,
):
    rid = unique("spot-race")
    deployed(stack, db, ticks, rid, endpoint)
    spot_goes(stack)
    tick_until(stack, ticks, lambda: serving(db, rid).get("phase") == "DEFICIT", "the deficit")
    stack.simulator.advance(GRACE_SECONDS)  # the grace period is over: the next tick hedges

    start = threading.Barrier(2)
    statuses: list[int] = []

    def race() -> None:
        start.wait(timeout=10)
        statuses.append(ticks())

    threads = [threading.Thread(target=race) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    assert statuses == [200, 200]

    fallbacks = fallback_deploys(stack)
    assert len(fallbacks) == 1, fallbacks
    state = serving(db, rid)
    assert state["phase"] == "HEDGED" and state["hedges"] == 1
    # The fallback lands; later ticks still deploy nothing more.
    tick_until(
        stack, ticks, lambda: serving(db, rid).get("fallbackDeployedModelId"), "the fallback"
    )
    assert len(fallback_deploys(stack)) == 1
    # One HEDGED owed and recorded; both ticks may have flushed the outbox before either
    # emptied it, so a consumer may see it twice (docs/contract.md, *Notifications*).
    published = [m["state"] for m in notifications(rid)]
    assert list(dict.fromkeys(published)) == ["DEPLOYED", "HEDGED"], published
    record = deployment_record(db, rid)
    assert record is not None
    assert [m["state"] for m in record["notified"]] == ["DEPLOYED", "HEDGED"]


# -- the knobs and objective mode (issue 39) ------------------------------------------------


def knob_deployment(
    stack: LocalStack, db: Any, rid: str, endpoint: str, replicas: int, **fields: Any
) -> None:
    """Publish a Spot deployModel of ``replicas`` with the serving ``fields`` beside it."""
    stack.publish_request({**deploy_body(rid, endpoint, replicas), **fields})
    wait_for(lambda: deployment_record(db, rid), what="the deployment's record")


def floor_serves_through_a_spot_loss(
    stack: LocalStack,
    db: Any,
    tick: Callable[[], int],
    rid: str,
    endpoint: str,
    spot: int,
    split: tuple[int, int],
) -> None:
    """Tick until the Spot model (``spot`` replicas) and a one-replica floor both serve and
    share the traffic by their replicas (``split``: the Spot model's share, the floor's); then
    Spot goes, and the floor keeps serving with all the traffic, no fallback deployed."""

    def both_serving() -> tuple[str, str] | None:
        state = serving(db, rid)
        floor = (state.get("floor") or {}).get("deployedModelId")
        spot_id = state.get("spotDeployedModelId")
        last = state.get("last") or {}
        if floor and spot_id and last.get("spot") == spot and last.get("onDemand") == 1:
            return str(spot_id), str(floor)
        return None

    (spot_id, floor_id), _ = tick_until(stack, tick, both_serving, "the Spot model and the floor")
    expected = {spot_id: split[0], floor_id: split[1]}
    tick_until(stack, tick, lambda: shares(stack, endpoint) == expected, "traffic on both")
    floor_model = next(
        m for m in the_endpoint(stack, endpoint)["deployedModels"] if m["id"] == floor_id
    )
    assert floor_model["dedicatedResources"].get("spot", False) is False
    assert floor_model["displayName"] == f"served [flexjobs {rid}] (on-demand floor)"

    stack.simulator.set_spot_serving(stack.config.location, available=False)
    tick_until(
        stack,
        tick,
        lambda: shares(stack, endpoint) == {floor_id: 100},
        "traffic to the floor alone",
    )
    for _ in range((GRACE_SECONDS + 2 * TICK_SECONDS) // TICK_SECONDS):
        stack.simulator.advance(TICK_SECONDS)
        assert tick() == 200
        # The floor stays up, with every share of traffic, and nothing else is deployed.
        assert shares(stack, endpoint) == {floor_id: 100}
        ids = {m["id"] for m in the_endpoint(stack, endpoint)["deployedModels"]}
        assert ids == {spot_id, floor_id}
    assert fallback_deploys(stack) == []
    state = serving(db, rid)
    assert state["last"] == {"spot": 0, "onDemand": 1, "required": spot + 1}
    assert state["darkSeconds"] == 0


def test_a_warm_floor_stays_up_through_a_spot_loss_and_traffic_follows_the_replicas(
    stack, db, unique, endpoint, ticks, notifications
):
    rid = unique("spot-floor")
    knob_deployment(stack, db, rid, endpoint, 2, minOnDemandReplicas=1, hedge=False)
    policy = deployment_record(db, rid)["serving"]["policy"]  # type: ignore[index]
    assert (policy["minOnDemandReplicas"], policy["hedge"], policy["why"]) == (
        1,
        False,
        "named by the request",
    )
    floor_serves_through_a_spot_loss(stack, db, ticks, rid, endpoint, spot=1, split=(50, 50))
    (spot_call, floor_call) = ok_calls(stack, "DeployModel")
    assert spot_call["deployedModel"]["dedicatedResources"]["minReplicaCount"] == 1
    assert floor_call["deployedModel"]["dedicatedResources"]["minReplicaCount"] == 1
    assert [m["state"] for m in notifications(rid)] == ["DEPLOYED"]


def test_an_objective_chooses_a_floor_that_stays_up_through_a_spot_loss(
    stack, db, unique, endpoint, ticks, notifications
):
    rid = unique("spot-objective")
    knob_deployment(stack, db, rid, endpoint, 4, availabilityObjective={"atLeastOneReplica": 0.99})
    policy = deployment_record(db, rid)["serving"]["policy"]  # type: ignore[index]
    # The committed table's cheapest for 4 replicas at 99% with at least one (docs/serving.md).
    assert (policy["minOnDemandReplicas"], policy["extraSpotReplicas"], policy["hedge"]) == (
        1,
        0,
        False,
    )
    assert policy["objective"] == {"atLeastOneReplica": 0.99}
    assert policy["why"].startswith("chosen for the objective:")
    floor_serves_through_a_spot_loss(stack, db, ticks, rid, endpoint, spot=3, split=(75, 25))
    assert [m["state"] for m in notifications(rid)] == ["DEPLOYED"]
