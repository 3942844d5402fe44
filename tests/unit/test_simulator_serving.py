"""The Vertex AI simulator's serving on its engine, on a frozen clock: Spot nodes reclaimed and
restarted as Compute Engine does, the endpoint's etag, UpdateEndpoint, MutateDeployedModel and
the v1 traffic-split rules of DeployModel and UndeployModel. (Over real gRPC with the official
client: tests/integration/test_simulator_services.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud import aiplatform_v1

from flexjobs_local.simulator.common import SimError
from flexjobs_local.simulator.engine import Engine
from flexjobs_local.simulator.serving import (
    DEFAULT_PLACEMENT_SECONDS,
    RESTART_INTERVAL_SECONDS,
    RESTART_TRIES,
)

PARENT = "projects/p/locations/us-central1"
ENDPOINT = f"{PARENT}/endpoints/e1"
LRO = 5.0  # the engine's default lro_seconds


def deployed(replicas: int, *, spot: bool, required: int = 0) -> aiplatform_v1.DeployedModel:
    return aiplatform_v1.DeployedModel(
        model=f"{PARENT}/models/1",
        dedicated_resources={
            "machine_spec": {"machine_type": "g2-standard-8"},
            "min_replica_count": replicas,
            "max_replica_count": replicas,
            "required_replica_count": required,
            "spot": spot,
        },
    )


@pytest.fixture
def engine() -> Engine:
    sim = Engine(time_factor=0, seed=3)
    sim.create_endpoint(PARENT, aiplatform_v1.Endpoint(display_name="e"), "e1")
    sim.advance(LRO)
    return sim


def deploy(engine: Engine, model: Any, split: dict[str, int]) -> str:
    """Deploy and let the operation finish; returns the new deployed model's id."""
    before = {m.id for m in engine.get_endpoint(ENDPOINT).deployed_models}
    engine.deploy_model(ENDPOINT, model, split)
    engine.advance(LRO)
    (new,) = {m.id for m in engine.get_endpoint(ENDPOINT).deployed_models} - before
    return new


def available(engine: Engine, model_id: str) -> int:
    (model,) = [m for m in engine.get_endpoint(ENDPOINT).deployed_models if m.id == model_id]
    return int(model.status.available_replica_count)


def spot_model(engine: Engine) -> dict[str, Any]:
    (model,) = engine.serving_json()["deployedModels"]
    return dict(model)


def error(code: str) -> Any:
    return pytest.raises(SimError, match=f"^{code}:")


# --- Spot nodes --------------------------------------------------------------------------------


def test_spot_capacity_going_reclaims_every_node_and_a_restart_try_brings_it_back(engine):
    spot = deploy(engine, deployed(2, spot=True), {"0": 100})
    on_demand = deploy(engine, deployed(1, spot=False), {})
    assert available(engine, spot) == 2

    engine.set_spot_serving("us-central1", False)
    assert available(engine, spot) == 0
    assert available(engine, on_demand) == 1  # never reclaimed
    engine.advance(RESTART_INTERVAL_SECONDS * 2)  # two failed tries
    assert [n["restartTries"] for n in spot_model(engine)["nodesDown"]] == [2, 2]

    engine.set_spot_serving("us-central1", True)
    engine.advance(RESTART_INTERVAL_SECONDS - 1)
    assert available(engine, spot) == 0  # the next try has not come yet
    engine.advance(1)
    assert available(engine, spot) == 2
    assert spot_model(engine)["nodesDown"] == []


def test_after_six_failed_tries_a_node_waits_for_capacity_then_its_placement(engine):
    spot = deploy(engine, deployed(1, spot=True), {"0": 100})
    engine.set_spot_serving("us-central1", False)
    engine.advance(RESTART_INTERVAL_SECONDS * RESTART_TRIES)
    (node,) = spot_model(engine)["nodesDown"]
    assert (node["phase"], node["restartTries"], node["nextAt"]) == ("WAITING", RESTART_TRIES, None)
    engine.advance(3600)
    assert available(engine, spot) == 0  # no more tries: down until capacity returns

    engine.set_spot_serving("us-central1", True)
    assert spot_model(engine)["nodesDown"][0]["phase"] == "PLACING"
    engine.advance(DEFAULT_PLACEMENT_SECONDS - 1)
    assert available(engine, spot) == 0
    engine.advance(1)
    assert available(engine, spot) == 1


def test_capacity_going_again_cancels_a_placement_and_the_delay_is_settable(engine):
    spot = deploy(engine, deployed(1, spot=True), {"0": 100})
    engine.set_spot_serving("us-central1", False)
    engine.advance(RESTART_INTERVAL_SECONDS * RESTART_TRIES)
    engine.set_spot_serving("us-central1", True, placement_seconds=30)
    engine.advance(10)
    engine.set_spot_serving("us-central1", False)
    engine.advance(600)
    assert available(engine, spot) == 0
    engine.set_spot_serving("us-central1", True)  # the location keeps its 30 s
    engine.advance(30)
    assert available(engine, spot) == 1
    assert engine.serving_json()["locations"] == [
        {"location": "us-central1", "spotAvailable": True, "placementSeconds": 30.0, "trace": None}
    ]
    with error("INVALID_ARGUMENT"):
        engine.set_spot_serving("us-central1", True, placement_seconds=-1)


def test_advance_replays_serving_events_in_order_with_operations(engine):
    spot = deploy(engine, deployed(1, spot=True), {"0": 100})
    engine.set_spot_serving("us-central1", False)
    engine.set_spot_serving("us-central1", True)
    with error("FAILED_PRECONDITION"):
        engine.reclaim_nodes(ENDPOINT, spot, 1)  # already reclaimed: no running node
    # One jump over a restart try and a deploy's end: both happen, each at its own time.
    engine.deploy_model(ENDPOINT, deployed(1, spot=False), {})
    engine.advance(RESTART_INTERVAL_SECONDS + LRO)
    endpoint = engine.get_endpoint(ENDPOINT)
    (back,) = [m for m in endpoint.deployed_models if m.id == spot]
    assert back.status.available_replica_count == 1
    start = engine.now() - RESTART_INTERVAL_SECONDS - LRO
    assert back.status.last_update_time.timestamp() == pytest.approx(
        start + RESTART_INTERVAL_SECONDS
    )


def test_reclaim_takes_some_nodes_and_refuses_what_it_cannot(engine):
    spot = deploy(engine, deployed(3, spot=True), {"0": 100})
    on_demand = deploy(engine, deployed(1, spot=False), {})
    engine.reclaim_nodes(ENDPOINT, spot, 2)
    assert available(engine, spot) == 1
    with error("FAILED_PRECONDITION"):
        engine.reclaim_nodes(ENDPOINT, spot, 2)  # one node runs
    with error("FAILED_PRECONDITION"):
        engine.reclaim_nodes(ENDPOINT, on_demand, 1)
    with error("INVALID_ARGUMENT"):
        engine.reclaim_nodes(ENDPOINT, spot, 0)
    with error("NOT_FOUND"):
        engine.reclaim_nodes(ENDPOINT, "404", 1)
    engine.advance(RESTART_INTERVAL_SECONDS)  # capacity is there: the first try succeeds
    assert available(engine, spot) == 3


def test_a_spot_model_deployed_without_capacity_waits_for_it(engine):
    engine.set_spot_serving("us-central1", False)
    spot = deploy(engine, deployed(2, spot=True, required=1), {"0": 100})
    assert available(engine, spot) == 0
    model = spot_model(engine)
    assert (model["replicas"], model["required"]) == (2, 1)
    assert {n["phase"] for n in model["nodesDown"]} == {"WAITING"}
    engine.set_spot_serving("us-central1", True)
    engine.advance(DEFAULT_PLACEMENT_SECONDS)
    assert available(engine, spot) == 2


def test_a_replayed_trace_is_the_locations_spot_capacity_step_by_step_cyclically(engine):
    spot = deploy(engine, deployed(1, spot=True), {"0": 100})
    trace = {"metadata": {"gap_seconds": 600}, "data": [1, 1, 0, 0, 1]}
    engine.replay_spot_trace("us-central1", trace, placement_seconds=30)
    (location,) = engine.serving_json()["locations"]
    assert location["trace"]["steps"] == 5
    engine.advance(1199)
    assert available(engine, spot) == 1
    engine.advance(1)  # step 2: the value 0, capacity goes
    assert available(engine, spot) == 0
    engine.advance(1200)  # step 4: back; six tries (360 s) have failed: placed 30 s later
    assert spot_model(engine)["nodesDown"][0]["phase"] == "PLACING"
    engine.advance(30)
    assert available(engine, spot) == 1
    # Cyclic: steps 5 and 6 are the first two again (1, 1), step 7 is 0 once more.
    engine.advance(600 * 7 - 2400 - 30 - 1)
    assert available(engine, spot) == 1
    engine.advance(1)
    assert available(engine, spot) == 0
    # Setting the capacity by hand ends the replay.
    engine.set_spot_serving("us-central1", True)
    assert engine.serving_json()["locations"][0]["trace"] is None


def test_a_restart_try_at_the_instant_capacity_returns_succeeds(engine):
    spot = deploy(engine, deployed(1, spot=True), {"0": 100})
    # Capacity goes at 0 and returns at 60: the first restart try, at 60 too, sees it back.
    engine.replay_spot_trace("us-central1", {"metadata": {"gap_seconds": 60}, "data": [0, 1]})
    engine.advance(60)
    assert available(engine, spot) == 1


def test_a_threshold_reads_a_multi_node_trace(engine):
    spot = deploy(engine, deployed(1, spot=True), {"0": 100})
    trace = {"metadata": {"gap_seconds": 300}, "data": [4, 3, 4]}
    engine.replay_spot_trace("us-central1", trace, threshold=4)
    engine.advance(300)
    assert available(engine, spot) == 0


@pytest.mark.parametrize(
    "trace",
    [
        [],
        {"data": [1]},
        {"metadata": {"gap_seconds": 0}, "data": [1]},
        {"metadata": {"gap_seconds": True}, "data": [1]},
        {"metadata": {"gap_seconds": 90000}, "data": [1]},
        {"metadata": {"gap_seconds": 30}, "data": []},
        {"metadata": {"gap_seconds": 30}, "data": [1, -1]},
        {"metadata": {"gap_seconds": 30}, "data": [1, 0.5]},
        {"metadata": {"gap_seconds": 30}, "data": [1, True]},
        {"metadata": {"gap_seconds": 30}, "data": [1] * 100_001},
    ],
)
def test_a_trace_is_decoded_bounded(engine, trace):
    with error("INVALID_ARGUMENT"):
        engine.replay_spot_trace("us-central1", trace)


def test_reset_forgets_serving(engine):
    deploy(engine, deployed(1, spot=True), {"0": 100})
    engine.set_spot_serving("us-central1", False)
    engine.reset()
    assert engine.serving_json() == {"locations": [], "deployedModels": []}


# --- etag and UpdateEndpoint -------------------------------------------------------------------


def test_every_change_to_the_endpoint_changes_its_etag_and_a_failed_try_does_not(engine):
    etags = [engine.get_endpoint(ENDPOINT).etag]

    def changed() -> bool:
        etag = engine.get_endpoint(ENDPOINT).etag
        new = etag not in etags
        etags.append(etag)
        return new

    spot = deploy(engine, deployed(1, spot=True), {"0": 100})
    assert changed()
    fallback = deploy(engine, deployed(1, spot=False), {})
    assert changed()
    engine.update_endpoint(
        aiplatform_v1.Endpoint(name=ENDPOINT, traffic_split={fallback: 100}), ["traffic_split"]
    )
    assert changed()
    engine.mutate_deployed_model(
        ENDPOINT,
        aiplatform_v1.DeployedModel(
            id=fallback, dedicated_resources={"min_replica_count": 2, "max_replica_count": 2}
        ),
        ["dedicated_resources.min_replica_count", "dedicated_resources.max_replica_count"],
    )
    assert not changed()  # the operation has not ended
    engine.advance(LRO)
    assert changed()
    engine.set_spot_serving("us-central1", False)  # availability is part of the endpoint
    assert changed()
    engine.advance(RESTART_INTERVAL_SECONDS)  # a failed try: nothing changed
    assert not changed()
    engine.undeploy_model(ENDPOINT, spot, {})
    engine.advance(LRO)
    assert changed()
    assert all(etags)


def test_update_endpoint_with_a_stale_etag_is_aborted_and_changes_nothing(engine):
    model = deploy(engine, deployed(1, spot=True), {"0": 100})
    read = engine.get_endpoint(ENDPOINT)
    engine.update_endpoint(
        aiplatform_v1.Endpoint(name=ENDPOINT, display_name="renamed"), ["display_name"]
    )
    stale = aiplatform_v1.Endpoint(name=ENDPOINT, traffic_split={}, etag=read.etag)
    with error("ABORTED"):
        engine.update_endpoint(stale, ["traffic_split"])
    assert dict(engine.get_endpoint(ENDPOINT).traffic_split) == {model: 100}
    fresh = engine.get_endpoint(ENDPOINT)
    fresh.traffic_split.clear()
    updated = engine.update_endpoint(fresh, ["traffic_split"])
    assert dict(updated.traffic_split) == {}
    assert updated.display_name == "renamed"
    assert updated.etag != fresh.etag


def test_update_endpoint_applies_only_the_mask(engine):
    change = aiplatform_v1.Endpoint(
        name=ENDPOINT, display_name="new", description="d", labels={"a": "1"}
    )
    updated = engine.update_endpoint(change, ["description", "labels"])
    assert (updated.display_name, updated.description, dict(updated.labels)) == (
        "e",
        "d",
        {"a": "1"},
    )
    assert updated == engine.get_endpoint(ENDPOINT)
    assert updated.update_time >= updated.create_time


@pytest.mark.parametrize(
    ("mask", "split", "code"),
    [
        ([], None, "INVALID_ARGUMENT"),
        (["deployed_models"], None, "INVALID_ARGUMENT"),
        (["trafficSplit"], None, "INVALID_ARGUMENT"),
        (["traffic_split"], {"404": 100}, "INVALID_ARGUMENT"),
        (["traffic_split"], {"MODEL": 90}, "INVALID_ARGUMENT"),
        (["traffic_split"], {"MODEL": 110, "OTHER": -10}, "INVALID_ARGUMENT"),
        (["display_name"], None, "INVALID_ARGUMENT"),
    ],
)
def test_update_endpoint_refuses(engine, mask, split, code):
    model = deploy(engine, deployed(1, spot=True), {"0": 100})
    other = deploy(engine, deployed(1, spot=False), {})
    names = {"MODEL": model, "OTHER": other}
    change = aiplatform_v1.Endpoint(
        name=ENDPOINT, traffic_split={names.get(k, k): v for k, v in (split or {}).items()}
    )
    with error(code):
        engine.update_endpoint(change, mask)
    with error("NOT_FOUND"):
        engine.update_endpoint(aiplatform_v1.Endpoint(name=f"{PARENT}/endpoints/9"), ["labels"])


# --- DeployModel and UndeployModel traffic split -----------------------------------------------


def test_deploy_with_an_empty_split_leaves_the_endpoints_split(engine):
    first = deploy(engine, deployed(1, spot=True), {})
    assert dict(engine.get_endpoint(ENDPOINT).traffic_split) == {}  # even the first model
    engine.update_endpoint(
        aiplatform_v1.Endpoint(name=ENDPOINT, traffic_split={first: 100}), ["traffic_split"]
    )
    second = deploy(engine, deployed(1, spot=False), {})
    assert dict(engine.get_endpoint(ENDPOINT).traffic_split) == {first: 100}
    third = deploy(engine, deployed(1, spot=False), {"0": 50, second: 50})
    assert dict(engine.get_endpoint(ENDPOINT).traffic_split) == {third: 50, second: 50}


def test_deploy_refuses_a_bad_split(engine):
    for split in ({"0": 90}, {"404": 100}, {"0": 110, "x": -10}):
        with error("INVALID_ARGUMENT"):
            engine.deploy_model(ENDPOINT, deployed(1, spot=True), split)


def test_undeploy_refuses_a_model_with_traffic_unless_the_split_unassigns_it(engine):
    spot = deploy(engine, deployed(1, spot=True), {"0": 100})
    fallback = deploy(engine, deployed(1, spot=False), {})
    with error("FAILED_PRECONDITION"):
        engine.undeploy_model(ENDPOINT, spot, {})
    with error("INVALID_ARGUMENT"):
        engine.undeploy_model(ENDPOINT, spot, {spot: 50, fallback: 50})
    engine.undeploy_model(ENDPOINT, spot, {fallback: 100, spot: 0})
    engine.advance(LRO)
    endpoint = engine.get_endpoint(ENDPOINT)
    assert [m.id for m in endpoint.deployed_models] == [fallback]
    assert dict(endpoint.traffic_split) == {fallback: 100}
    assert engine.serving_json()["deployedModels"] == []


def test_undeploy_of_a_model_without_traffic_keeps_the_split_and_the_last_one_empties_it(engine):
    spot = deploy(engine, deployed(1, spot=True), {"0": 100})
    fallback = deploy(engine, deployed(1, spot=False), {})
    engine.undeploy_model(ENDPOINT, fallback, {})
    engine.advance(LRO)
    assert dict(engine.get_endpoint(ENDPOINT).traffic_split) == {spot: 100}
    engine.undeploy_model(ENDPOINT, spot, {})  # the last model: its traffic goes with it
    engine.advance(LRO)
    endpoint = engine.get_endpoint(ENDPOINT)
    assert (list(endpoint.deployed_models), dict(endpoint.traffic_split)) == ([], {})


def test_an_undeploy_whose_model_gained_traffic_meanwhile_fails_its_operation(engine):
    spot = deploy(engine, deployed(1, spot=True), {"0": 100})
    fallback = deploy(engine, deployed(1, spot=False), {})
    operation = engine.undeploy_model(ENDPOINT, fallback, {})
    engine.update_endpoint(
        aiplatform_v1.Endpoint(name=ENDPOINT, traffic_split={fallback: 100}), ["traffic_split"]
    )
    engine.advance(LRO)
    done = engine.get_operation(operation.name)
    assert done.done and done.error.code == 9  # FAILED_PRECONDITION, on the operation
    assert {m.id for m in engine.get_endpoint(ENDPOINT).deployed_models} == {spot, fallback}


# --- MutateDeployedModel -----------------------------------------------------------------------


def test_mutate_grows_an_on_demand_model_when_its_operation_ends(engine):
    fallback = deploy(engine, deployed(1, spot=False), {"0": 100})
    operation = engine.mutate_deployed_model(
        ENDPOINT,
        aiplatform_v1.DeployedModel(
            id=fallback,
            dedicated_resources={"min_replica_count": 3, "max_replica_count": 4},
            disable_container_logging=True,
        ),
        [
            "dedicated_resources.min_replica_count",
            "dedicated_resources.max_replica_count",
            "disable_container_logging",
        ],
    )
    assert available(engine, fallback) == 1
    engine.advance(LRO)
    (model,) = engine.get_endpoint(ENDPOINT).deployed_models
    resources = model.dedicated_resources
    assert (resources.min_replica_count, resources.max_replica_count) == (3, 4)
    assert resources.machine_spec.machine_type == "g2-standard-8"  # outside the mask: kept
    assert model.disable_container_logging is True
    assert model.status.available_replica_count == 3
    done = engine.get_operation(operation.name)
    response = aiplatform_v1.MutateDeployedModelResponse.deserialize(done.response.value)
    assert response.deployed_model.dedicated_resources.min_replica_count == 3


def test_mutate_shrinks_a_spot_model_dropping_down_nodes_first(engine):
    spot = deploy(engine, deployed(3, spot=True), {"0": 100})
    engine.reclaim_nodes(ENDPOINT, spot, 1)
    engine.mutate_deployed_model(
        ENDPOINT,
        aiplatform_v1.DeployedModel(id=spot, dedicated_resources={"min_replica_count": 2}),
        ["dedicated_resources.min_replica_count"],
    )
    engine.advance(LRO)
    model = spot_model(engine)
    assert (model["replicas"], model["available"], model["nodesDown"]) == (2, 2, [])


@pytest.mark.parametrize(
    ("mask", "resources", "code"),
    [
        ([], {"min_replica_count": 2}, "INVALID_ARGUMENT"),
        (["dedicated_resources.machine_spec"], {"min_replica_count": 2}, "INVALID_ARGUMENT"),
        (["automatic_resources.min_replica_count"], {}, "INVALID_ARGUMENT"),
        (["dedicated_resources.min_replica_count"], {"min_replica_count": 0}, "INVALID_ARGUMENT"),
        (["dedicated_resources.max_replica_count"], {"max_replica_count": 1}, "INVALID_ARGUMENT"),
        (
            ["dedicated_resources.required_replica_count"],
            {"required_replica_count": 3},
            "INVALID_ARGUMENT",
        ),
    ],
)
def test_mutate_refuses(engine, mask, resources, code):
    model = deploy(engine, deployed(2, spot=False), {"0": 100})
    with error(code):
        engine.mutate_deployed_model(
            ENDPOINT, aiplatform_v1.DeployedModel(id=model, dedicated_resources=resources), mask
        )
    with error("NOT_FOUND"):
        engine.mutate_deployed_model(
            ENDPOINT,
            aiplatform_v1.DeployedModel(id="404", dedicated_resources={"min_replica_count": 2}),
            ["dedicated_resources.min_replica_count"],
        )
