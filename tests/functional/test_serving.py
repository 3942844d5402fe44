"""Following Spot deployments after DEPLOYED (issue 24, first step; hedging not actuated):
the tick reads each endpoint once and records serving capacity on the deployment's record."""

from __future__ import annotations

import pytest

from shared.app.deploy import refresh_deployments
from shared.domain.serving.model import HISTORY_LIMIT, MAX_STATE_BYTES, ServingState
from shared.kernel.errors import BackendUnavailable
from tests.events import load, pubsub_cloud_event
from tests.functional.conftest import ENDPOINT

OTHER = "projects/p/locations/us-central1/endpoints/456"


def deploy(post_event, deployments, request_id, endpoint=ENDPOINT, replicas=2):
    body = load("deploy_request")
    body["requestId"] = request_id
    body["deployModel"]["endpoint"] = endpoint
    body["deployModel"]["deployedModel"]["dedicatedResources"]["minReplicaCount"] = replicas
    # Share the endpoint: the first model takes all traffic, later ones none.
    body["deployModel"]["trafficSplit"] = (
        {"0": 100} if not deployments.backend.endpoints.get(endpoint) else {}
    )
    response = post_event("handle_job_request", pubsub_cloud_event(body))
    assert response.status_code == 200
    record = deployments.store.store.get(request_id)
    deployments.backend.finish(record["operation"])
    refresh_deployments(deployments)
    return deployments.store.store.get(request_id)["deployedModelId"]


def serving(deployments, request_id) -> ServingState:
    state = ServingState.decode(deployments.store.store.get(request_id)["serving"])
    assert state is not None
    return state


@pytest.fixture
def deployments(tracker):
    """The tick's deployments, on the fake clock (intake shares the same fakes)."""
    tracker.deployments.backend.add_endpoint(OTHER)
    return tracker.deployments


def test_one_get_endpoint_per_endpoint_however_many_deployments(post_event, deployments, clock):
    deploy(post_event, deployments, "s-1")
    deploy(post_event, deployments, "s-2")
    deploy(post_event, deployments, "s-3", endpoint=OTHER)
    deployments.backend.reads.clear()

    clock.advance(60)
    assert refresh_deployments(deployments) == 0  # nothing changed: nothing written

    assert sorted(deployments.backend.reads) == [ENDPOINT, OTHER]
    for rid in ("s-1", "s-2", "s-3"):
        assert serving(deployments, rid).last.spot == 2


def test_a_capacity_drop_is_recorded_with_its_time(post_event, deployments, clock):
    model = deploy(post_event, deployments, "s-1")
    clock.advance(600)
    deployments.backend.set_available(ENDPOINT, model, 1)
    dropped_at = clock()

    assert refresh_deployments(deployments) == 1

    state = serving(deployments, "s-1")
    change = state.history[-1]
    assert (change.at, change.capacity.spot, change.capacity.required) == (dropped_at, 1, 2)
    assert "2+0 -> 1+0 of 2" in change.cause
    assert state.phase.value == "DEFICIT"
    assert state.spot_node_seconds == 600 * 2  # two Spot replicas served the first ten minutes
    record = deployments.store.store.get("s-1")
    assert record["serving"]["phase"] == "DEFICIT"

    clock.advance(300)
    deployments.backend.set_available(ENDPOINT, model, 2)
    assert refresh_deployments(deployments) == 1
    state = serving(deployments, "s-1")
    assert state.short_seconds == 300
    assert state.phase.value == "SERVING"
    assert state.history[-1].capacity.spot == 2


def test_the_grace_period_passing_hedges_nothing(post_event, deployments, clock):
    model = deploy(post_event, deployments, "s-1")
    deployments.backend.set_available(ENDPOINT, model, 0)
    refresh_deployments(deployments)
    before = deployments.store.store.get("s-1")
    calls = len(deployments.backend.deployed)

    clock.advance(3600)  # far past the default grace period of five minutes
    assert refresh_deployments(deployments) == 0

    assert len(deployments.backend.deployed) == calls  # no fallback deployed
    assert deployments.store.store.get("s-1") == before


def test_a_failed_get_endpoint_changes_nothing(post_event, deployments, clock):
    model = deploy(post_event, deployments, "s-1")
    before = deployments.store.store.get("s-1")
    deployments.backend.set_available(ENDPOINT, model, 0)
    deployments.backend.read_fails_with = BackendUnavailable("Vertex AI GetEndpoint: 503")
    clock.advance(60)

    assert refresh_deployments(deployments) == 0
    assert deployments.store.store.get("s-1") == before

    deployments.backend.read_fails_with = None  # the next tick reads again and records it
    assert refresh_deployments(deployments) == 1
    assert serving(deployments, "s-1").last.spot == 0


def test_two_ticks_at_once_record_once(post_event, deployments, clock):
    model = deploy(post_event, deployments, "s-1")
    deployments.backend.set_available(ENDPOINT, model, 1)
    clock.advance(60)
    inner: list[int] = []
    # The second tick runs whole while the first holds its read, before its write.
    deployments.backend.during_read = lambda: inner.append(refresh_deployments(deployments))

    outer = refresh_deployments(deployments)

    assert sorted([outer, *inner]) == [0, 1]
    history = serving(deployments, "s-1").history
    assert [c.capacity.spot for c in history] == [2, 1]


def test_a_deployment_removed_by_hand_is_recorded_as_paused_not_fought(
    post_event, deployments, clock
):
    model = deploy(post_event, deployments, "s-1")
    calls = len(deployments.backend.deployed)
    deployments.backend.undeploy(ENDPOINT, model)
    clock.advance(60)

    assert refresh_deployments(deployments) == 1

    state = serving(deployments, "s-1")
    assert state.phase.value == "PAUSED_BY_HAND"
    assert "undeployed by hand" in state.history[-1].cause
    assert len(deployments.backend.deployed) == calls  # not redeployed
    clock.advance(3600)
    assert refresh_deployments(deployments) == 0


def test_the_record_stays_bounded_after_a_thousand_changes(post_event, deployments, clock):
    model = deploy(post_event, deployments, "s-1")
    for n in range(1000):
        clock.advance(60)
        deployments.backend.set_available(ENDPOINT, model, n % 3)
        refresh_deployments(deployments)

    stored = deployments.store.store.get("s-1")["serving"]
    assert len(stored["history"]) == HISTORY_LIMIT
    state = serving(deployments, "s-1")
    assert state.size_bytes() <= MAX_STATE_BYTES
    assert state.history[-1].at == clock()
