"""Spot deployments after DEPLOYED: the tick reads each endpoint once, records serving
capacity, hedges with an on-demand fallback, moves traffic and comes back; and it never makes
serving worse (two ticks at once, failed calls, hand edits, a deployment removed by hand)."""

from __future__ import annotations

import pytest

from shared.app.services.deploy import Seen, advance, read_endpoint, refresh_deployments
from shared.domain.serving.model import (
    HISTORY_LIMIT,
    MAX_STATE_BYTES,
    ActionKind,
    CallKind,
    ServingState,
)
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
    record = deployments.records.deployment_store.get(request_id)
    deployments.backend.finish(record["operation"])
    refresh_deployments(deployments)
    return deployments.records.deployment_store.get(request_id)["deployedModelId"]


def serving(deployments, request_id) -> ServingState:
    state = ServingState.decode(deployments.records.deployment_store.get(request_id)["serving"])
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
    record = deployments.records.deployment_store.get("s-1")
    assert record["serving"]["phase"] == "DEFICIT"

    clock.advance(300)
    deployments.backend.set_available(ENDPOINT, model, 2)
    assert refresh_deployments(deployments) == 1
    state = serving(deployments, "s-1")
    assert state.short_seconds == 300
    assert state.phase.value == "SERVING"
    assert state.history[-1].capacity.spot == 2


def notices(deployments, request_id):
    messages = deployments.notifier.messages
    return [m["state"] for m in messages if m["requestId"] == request_id]


def hedge(deployments, clock, model, replicas=2):
    """Spot loses every node; the grace period passes; the tick deploys the fallback."""
    deployments.backend.set_available(ENDPOINT, model, 0)
    refresh_deployments(deployments)
    clock.advance(300)
    refresh_deployments(deployments)
    return deployments.backend.calls[-1]


def fallback_serves(deployments, clock):
    """The fallback's DeployModel finishes: the next tick reads its operation first (the
    fallback is ours), then the endpoint, which shows it serving: traffic follows."""
    operation = next(iter(deployments.backend._pending))
    deployments.backend.finish(operation)
    clock.advance(60)
    refresh_deployments(deployments)
    fallback = serving(deployments, "s-1").fallback
    return fallback.id if fallback is not None else None


def test_a_spot_deployment_short_past_the_grace_period_is_hedged_once_and_notified(
    post_event, deployments, clock
):
    model = deploy(post_event, deployments, "s-1")
    assert notices(deployments, "s-1") == ["DEPLOYED"]
    deployments.backend.set_available(ENDPOINT, model, 0)
    refresh_deployments(deployments)
    clock.advance(240)  # still inside the grace period: nothing deployed
    refresh_deployments(deployments)
    assert deployments.backend.calls == []

    clock.advance(60)
    refresh_deployments(deployments)
    assert deployments.backend.calls == [
        ("DeployModel", ENDPOINT, "served [flexjobs s-1] (on-demand fallback)")
    ]
    state = serving(deployments, "s-1")
    assert state.call is not None
    assert (state.phase.value, state.hedges, state.call.kind) == (
        "HEDGED",
        1,
        CallKind.DEPLOY_FALLBACK,
    )
    assert state.call.operation  # the operation the next ticks follow
    # HEDGED once the DeployModel reached Vertex (its operation answered), never before.
    assert notices(deployments, "s-1") == ["DEPLOYED", "HEDGED"]
    # The fallback is deployed from the deployment's own requested deployedModel.
    request = deployments.records.get("s-1").request
    assert deployments.backend.templates == [request["deployedModel"]]
    for _ in range(20):  # the DeployModel runs for many ticks: never sent again
        clock.advance(60)
        refresh_deployments(deployments)
    assert [c[0] for c in deployments.backend.calls] == ["DeployModel"]
    assert ENDPOINT not in deployments.backend.splits or (
        set(deployments.backend.splits[ENDPOINT]) == {model}
    )


def test_the_fallback_gets_the_traffic_once_it_serves_and_gives_it_back_after_the_hold(
    post_event, deployments, clock
):
    model = deploy(post_event, deployments, "s-1")
    hedge(deployments, clock, model)
    fallback = fallback_serves(deployments, clock)
    assert deployments.backend.splits[ENDPOINT] == {fallback: 100}

    deployments.backend.set_available(ENDPOINT, model, 2)  # Spot is back
    clock.advance(60)
    refresh_deployments(deployments)
    assert deployments.backend.splits[ENDPOINT] == {model: 50, fallback: 50}
    for _ in range(29):  # the hold period: the fallback stays
        clock.advance(60)
        refresh_deployments(deployments)
    assert fallback in deployments.backend.splits[ENDPOINT]
    clock.advance(60)
    refresh_deployments(deployments)  # traffic back to Spot
    assert deployments.backend.splits[ENDPOINT] == {model: 100}
    clock.advance(60)
    refresh_deployments(deployments)  # a fresh read shows the fallback without traffic
    assert deployments.backend.calls[-1] == ("UndeployModel", ENDPOINT, fallback)
    operation = next(iter(deployments.backend._undeploys))
    deployments.backend.finish(operation)
    clock.advance(60)
    refresh_deployments(deployments)
    clock.advance(60)
    refresh_deployments(deployments)

    state = serving(deployments, "s-1")
    assert (state.phase.value, state.fallback, state.call) == ("SERVING", None, None)
    assert notices(deployments, "s-1") == ["DEPLOYED", "HEDGED", "RESTORED"]
    assert [m["id"] for m in deployments.backend.endpoints[ENDPOINT]] == [model]
    assert state.on_demand_node_seconds > 0 and state.hedges == 1
    record = deployments.records.deployment_store.get("s-1")
    assert record["outboxPending"] is False and len(record["notified"]) == 3


def test_two_ticks_at_once_deploy_one_fallback(post_event, deployments, clock):
    model = deploy(post_event, deployments, "s-1")
    deployments.backend.set_available(ENDPOINT, model, 0)
    refresh_deployments(deployments)
    clock.advance(300)
    inner: list[int] = []
    # The second tick runs whole while the first holds its read, before its decision.
    deployments.backend.during_read = lambda: inner.append(refresh_deployments(deployments))

    refresh_deployments(deployments)

    assert [c[0] for c in deployments.backend.calls] == ["DeployModel"]
    assert serving(deployments, "s-1").hedges == 1


def test_a_hedge_that_timed_out_is_not_sent_again_and_its_fallback_is_adopted(
    post_event, deployments, clock
):
    from shared.kernel.errors import OutcomeUnknown

    model = deploy(post_event, deployments, "s-1")
    backend = deployments.backend
    sent = backend.deploy_on_demand

    def happened_then_timed_out(*args, **kwargs):
        sent(*args, **kwargs)  # Vertex runs it (ListOperations lists it) ...
        raise OutcomeUnknown("Vertex AI DeployModel timed out")  # ... its answer is lost

    backend.deploy_on_demand = happened_then_timed_out
    hedge(deployments, clock, model)
    backend.deploy_on_demand = sent
    state = serving(deployments, "s-1")
    assert state.call is not None  # the claim is kept, its answer lost
    assert (state.call.kind, state.call.operation, state.call.unknown) == (
        CallKind.DEPLOY_FALLBACK,
        None,
        True,
    )
    assert notices(deployments, "s-1") == ["DEPLOYED"]  # not known to have reached Vertex
    for _ in range(10):
        clock.advance(60)
        refresh_deployments(deployments)
    # It runs: never sent again meanwhile, however long (a GPU DeployModel takes minutes).
    assert [c[0] for c in deployments.backend.calls] == ["DeployModel"]
    # It lands: the fallback lists under its name, and is ours.
    deployments.backend.finish(next(iter(deployments.backend._pending)))
    clock.advance(60)
    refresh_deployments(deployments)
    clock.advance(60)
    refresh_deployments(deployments)
    state = serving(deployments, "s-1")
    assert state.fallback is not None and state.fallback.id is not None and state.call is None
    assert state.fallback.id in deployments.backend.splits[ENDPOINT]
    assert state.phase.value == "HEDGED"
    assert notices(deployments, "s-1") == ["DEPLOYED", "HEDGED"]  # once it showed


def test_a_hedge_refused_waits_a_new_grace_period_and_says_why(post_event, deployments, clock):
    from shared.kernel.errors import QuotaExhausted

    model = deploy(post_event, deployments, "s-1")
    deployments.backend.call_fails_with = QuotaExhausted("on-demand L4 quota")
    hedge(deployments, clock, model)
    deployments.backend.call_fails_with = None
    state = serving(deployments, "s-1")
    assert (state.phase.value, state.call, state.fallback) == ("DEFICIT", None, None)
    assert any("hedge failed" in c.cause for c in state.history)
    clock.advance(240)
    refresh_deployments(deployments)
    assert len(deployments.backend.calls) == 1  # not resent every minute
    clock.advance(60)
    refresh_deployments(deployments)
    assert [c[0] for c in deployments.backend.calls] == ["DeployModel", "DeployModel"]


def test_a_failed_traffic_update_changes_nothing_and_is_retried_next_tick(
    post_event, deployments, clock
):
    from shared.kernel.errors import BackendUnavailable as Unavailable

    model = deploy(post_event, deployments, "s-1")
    hedge(deployments, clock, model)
    before = deployments.records.deployment_store.get("s-1")["serving"]
    split = dict(deployments.backend.splits[ENDPOINT])
    deployments.backend.finish(next(iter(deployments.backend._pending)))
    deployments.backend.call_fails_with = Unavailable("Vertex AI UpdateEndpoint failed: 503")
    clock.advance(60)
    refresh_deployments(deployments)
    assert deployments.backend.splits[ENDPOINT] == split  # nothing moved
    after = deployments.records.deployment_store.get("s-1")["serving"]
    # Nothing was written: the move's state (the fallback deployed and serving) waits for a
    # move Vertex takes; the next read finds the fallback again.
    assert after == before

    deployments.backend.call_fails_with = None
    clock.advance(60)
    refresh_deployments(deployments)
    state = serving(deployments, "s-1")
    assert state.fallback is not None
    assert deployments.backend.splits[ENDPOINT] == {state.fallback.id: 100}


def test_a_split_written_from_a_stale_read_is_refused_by_the_etag(post_event, deployments, clock):
    model = deploy(post_event, deployments, "s-1")
    hedge(deployments, clock, model)
    deployments.backend.finish(next(iter(deployments.backend._pending)))
    # Between the tick's read and its UpdateEndpoint, someone changes the endpoint.
    backend = deployments.backend
    read = backend.read

    def read_then_changed(endpoint):
        observed = read(endpoint)
        backend._changed(endpoint)
        return observed

    backend.read = read_then_changed
    clock.advance(60)
    refresh_deployments(deployments)
    del backend.read
    assert deployments.backend.splits[ENDPOINT] == {model: 100}  # refused: nothing moved
    clock.advance(60)
    refresh_deployments(deployments)  # the next read has the new etag
    assert model not in deployments.backend.splits[ENDPOINT]


def test_a_hand_edited_split_pauses_hedging_and_is_not_fought(post_event, deployments, clock):
    model = deploy(post_event, deployments, "s-1")
    hedge(deployments, clock, model)
    fallback = fallback_serves(deployments, clock)
    # Someone deploys another model by hand and gives it a share of the traffic.
    deployments.backend.endpoints[ENDPOINT].append(
        {"id": "777", "displayName": "canary", "status": {"availableReplicaCount": 1}}
    )
    deployments.backend.set_split_by_hand(ENDPOINT, {fallback: 70, "777": 30})
    calls = len(deployments.backend.calls)
    deployments.backend.set_available(ENDPOINT, model, 2)
    for _ in range(40):  # Spot is back past the hold period: still nothing is changed
        clock.advance(60)
        refresh_deployments(deployments)
    assert len(deployments.backend.calls) == calls
    assert deployments.backend.splits[ENDPOINT] == {fallback: 70, "777": 30}
    state = serving(deployments, "s-1")
    assert state.phase.value == "PAUSED_BY_HAND"
    assert any("changed by hand" in c.cause for c in state.history)


def test_a_fallback_undeployed_by_hand_pauses_and_is_not_redeployed(post_event, deployments, clock):
    model = deploy(post_event, deployments, "s-1")
    hedge(deployments, clock, model)
    fallback = fallback_serves(deployments, clock)
    deployments.backend.undeploy_by_hand(ENDPOINT, fallback)
    deployments.backend.set_split_by_hand(ENDPOINT, {model: 100})
    for _ in range(20):
        clock.advance(60)
        refresh_deployments(deployments)
    assert [c[0] for c in deployments.backend.calls].count("DeployModel") == 1
    assert serving(deployments, "s-1").phase.value == "PAUSED_BY_HAND"


def test_a_notification_whose_publish_failed_is_sent_by_the_next_tick(
    post_event, deployments, clock
):
    model = deploy(post_event, deployments, "s-1")
    notifier = deployments.notifier

    def down(message):
        raise RuntimeError("Pub/Sub publish failed")

    notifier.notify = down  # Pub/Sub is down for the whole tick
    hedge(deployments, clock, model)
    del notifier.notify
    assert notices(deployments, "s-1") == ["DEPLOYED"]
    assert deployments.records.deployment_store.get("s-1")["outboxPending"] is True
    clock.advance(60)
    refresh_deployments(deployments)
    assert notices(deployments, "s-1") == ["DEPLOYED", "HEDGED"]
    assert deployments.records.deployment_store.get("s-1")["outboxPending"] is False


def test_a_failed_get_endpoint_changes_nothing(post_event, deployments, clock):
    model = deploy(post_event, deployments, "s-1")
    before = deployments.records.deployment_store.get("s-1")
    deployments.backend.set_available(ENDPOINT, model, 0)
    deployments.backend.read_fails_with = BackendUnavailable("Vertex AI GetEndpoint: 503")
    clock.advance(60)

    assert refresh_deployments(deployments) == 0
    assert deployments.records.deployment_store.get("s-1") == before

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
    assert [c.capacity.spot for c in history][-2:] == [2, 1]
    assert [c.capacity.spot for c in history].count(1) == 1


def test_a_deployment_removed_by_hand_is_recorded_as_paused_not_fought(
    post_event, deployments, clock
):
    model = deploy(post_event, deployments, "s-1")
    calls = len(deployments.backend.deployed)
    deployments.backend.undeploy_by_hand(ENDPOINT, model)
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

    stored = deployments.records.deployment_store.get("s-1")["serving"]
    assert len(stored["history"]) == HISTORY_LIMIT
    state = serving(deployments, "s-1")
    assert state.size_bytes() <= MAX_STATE_BYTES
    assert state.history[-1].at == clock()


# --- undeploy (a cancel) and resume -------------------------------------------------------------


def cancel(post_event, request_id):
    response = post_event("handle_job_request", pubsub_cloud_event({"cancel": request_id}))
    assert response.status_code == 200


def tick_until_settled(deployments, clock, ticks=10):
    """Ticks, finishing each long-running operation the tick started, as Vertex would."""
    backend = deployments.backend
    for _ in range(ticks):
        clock.advance(60)
        refresh_deployments(deployments)
        for name in [*backend._pending, *backend._undeploys, *backend._mutations]:
            backend.finish(name)


def test_a_cancel_takes_a_hedged_deployment_down_fallback_first(post_event, deployments, clock):
    model = deploy(post_event, deployments, "s-1")
    hedge(deployments, clock, model)
    fallback = fallback_serves(deployments, clock)
    deployments.backend.calls.clear()

    cancel(post_event, "s-1")
    assert (
        deployments.records.deployment_store.get("s-1")["state"] == "DEPLOYED"
    )  # the tick does it
    tick_until_settled(deployments, clock)

    calls = deployments.backend.calls
    undeploys = [c[2] for c in calls if c[0] == "UndeployModel"]
    # Spot serves nothing (hedge() took its replicas): its model goes first, with no traffic;
    # the fallback, which serves, keeps the traffic to the end and, the endpoint's last
    # model, takes the split with it. No traffic is ever given to the Spot model that has no
    # replica (each model is undeployed once).
    assert undeploys == [model, fallback]
    assert not [c for c in calls if c[0] == "UpdateEndpoint" and c[2].get(model)]
    assert deployments.backend.endpoints[ENDPOINT] == []
    record = deployments.records.deployment_store.get("s-1")
    assert record["state"] == "UNDEPLOYED" and record["serving"]["phase"] == "UNDEPLOYED"
    assert notices(deployments, "s-1")[-1] == "UNDEPLOYED"
    assert "undeployRequested" not in record
    tick_until_settled(deployments, clock, ticks=3)
    assert [c for c in deployments.backend.calls if c[0] == "UndeployModel"] == [
        ("UndeployModel", ENDPOINT, model),
        ("UndeployModel", ENDPOINT, fallback),
    ]


def test_a_cancel_moves_the_traffic_to_the_endpoints_other_models_first(
    post_event, deployments, clock
):
    model = deploy(post_event, deployments, "s-1")
    backend = deployments.backend
    backend.endpoints[ENDPOINT].append(
        {"id": "777", "displayName": "stable", "status": {"availableReplicaCount": 1}}
    )
    backend.set_split_by_hand(ENDPOINT, {model: 80, "777": 20})
    clock.advance(60)
    refresh_deployments(deployments)  # the new baseline: a hand edit, recorded as paused
    cancel(post_event, "s-1")
    tick_until_settled(deployments, clock)

    assert backend.calls[0] == ("UpdateEndpoint", ENDPOINT, {"777": 100})
    assert [m["id"] for m in backend.endpoints[ENDPOINT]] == ["777"]
    assert backend.splits[ENDPOINT] == {"777": 100}  # the other model kept serving
    assert deployments.records.deployment_store.get("s-1")["state"] == "UNDEPLOYED"


def test_a_cancel_of_a_deployment_parked_for_quota_ends_it_at_once(post_event, deployments, clock):
    from shared.kernel.errors import QuotaExhausted

    deployments.backend.fail_with = QuotaExhausted("Spot L4 quota")
    body = load("deploy_request")
    body["requestId"] = "s-9"
    post_event("handle_job_request", pubsub_cloud_event(body))
    deployments.backend.fail_with = None
    assert deployments.records.deployment_store.get("s-9")["state"] == "ACCEPTED"

    cancel(post_event, "s-9")

    record = deployments.records.deployment_store.get("s-9")
    assert record["state"] == "UNDEPLOYED" and record.get("nextAttemptAt") is None
    clock.advance(3600)
    refresh_deployments(deployments)  # the parked deployment is not deployed again
    assert deployments.backend.deployed == []
    assert notices(deployments, "s-9") == ["UNDEPLOYED"]


def test_a_cancel_while_deploying_takes_it_down_once_deployed(post_event, deployments, clock):
    body = load("deploy_request")
    body["requestId"] = "s-2"
    post_event("handle_job_request", pubsub_cloud_event(body))
    operation = deployments.records.deployment_store.get("s-2")["operation"]
    cancel(post_event, "s-2")
    deployments.backend.finish(operation)
    tick_until_settled(deployments, clock)
    assert deployments.records.deployment_store.get("s-2")["state"] == "UNDEPLOYED"
    assert deployments.backend.endpoints[ENDPOINT] == []
    # It never served its owner, who cancelled it first: nothing says DEPLOYED.
    assert notices(deployments, "s-2") == ["UNDEPLOYED"]


def test_a_resume_follows_a_paused_deployment_again_and_hedging_goes_on(
    post_event, deployments, clock
):
    model = deploy(post_event, deployments, "s-1")
    backend = deployments.backend
    backend.set_split_by_hand(ENDPOINT, {})  # the endpoint is set to take no traffic
    clock.advance(60)
    refresh_deployments(deployments)
    assert serving(deployments, "s-1").phase.value == "PAUSED_BY_HAND"
    backend.set_split_by_hand(ENDPOINT, {model: 100})

    response = post_event("handle_job_request", pubsub_cloud_event({"resume": "s-1"}))
    assert response.status_code == 200
    clock.advance(60)
    refresh_deployments(deployments)
    state = serving(deployments, "s-1")
    assert state.phase.value == "SERVING" and state.pool == 100
    assert "resumeRequested" not in deployments.records.deployment_store.get("s-1")
    hedge(deployments, clock, model)
    assert [c[0] for c in backend.calls] == ["DeployModel"]


def test_a_hedge_that_never_reached_vertex_is_released_and_sent_by_the_next_tick(
    post_event, deployments, clock
):
    from shared.kernel.errors import BackendUnavailable as Unavailable

    model = deploy(post_event, deployments, "s-1")
    deployments.backend.call_fails_with = Unavailable("Vertex AI DeployModel failed: 503")
    hedge(deployments, clock, model)
    deployments.backend.call_fails_with = None
    state = serving(deployments, "s-1")
    # The claim goes: no call in flight, no hedge counted, nothing notified; the phase says
    # what the next read decides from.
    assert (state.call, state.hedges) == (None, 0)
    assert notices(deployments, "s-1") == ["DEPLOYED"]
    clock.advance(60)
    refresh_deployments(deployments)  # no new grace period: the deficit is as old as it was
    assert [c[0] for c in deployments.backend.calls] == ["DeployModel", "DeployModel"]
    assert serving(deployments, "s-1").hedges == 1


# --- review (adversarial): failing tests, one per finding -------------------------------


def test_a_hedge_of_one_deployment_does_not_pause_another_on_the_same_endpoint(
    post_event, deployments, clock
):
    """(h)/(f) Two flexjobs deployments on one endpoint: each baseline counts the other's models as
    "others": deploying s-2 already pauses s-1 (added [s-2 model]); s-1's fallback would pause s-2;
    which pauses and stops hedging until someone sends {"resume": "s-2"}."""
    model = deploy(post_event, deployments, "s-1")
    deploy(post_event, deployments, "s-2")
    clock.advance(60)
    refresh_deployments(deployments)
    # Deploying s-2 (a flexjobs deployment, not a hand edit) must not pause s-1.
    first = serving(deployments, "s-1")
    assert first.phase.value == "SERVING", first.history[-1].cause
    hedge(deployments, clock, model)
    fallback_serves(deployments, clock)
    clock.advance(60)
    refresh_deployments(deployments)
    assert serving(deployments, "s-2").phase.value == "SERVING", (
        serving(deployments, "s-2").history[-1].cause
    )


def test_a_notification_queued_while_an_alike_one_is_published_is_not_lost(
    post_event, deployments, clock
):
    """(e) Messages carry no id (requestId, state, attempt, reason) and drop_from_outbox drops
    every message equal to one published: a RESTORED queued by another tick while an earlier,
    identical RESTORED ("restored: the fallback is undeployed") was being published is
    dropped unpublished."""
    from shared.domain.model.changes import DeploymentChange

    deploy(post_event, deployments, "s-1")
    message = {
        "requestId": "s-1",
        "state": "RESTORED",
        "attempt": 0,
        "reason": "restored: the fallback is undeployed",
        "kind": "deployModel",
        "at": "2026-12-01T12:00:00+00:00",
    }
    records = deployments.records
    records.deployment_store.transact(
        "s-1", lambda raw: DeploymentChange({"outbox": [message], "outboxPending": True})
    )
    published = list(records.get("s-1").outbox)  # tick A reads the outbox and publishes it
    records.deployment_store.transact(  # tick B: the next incident's RESTORED is queued meanwhile
        "s-1",
        lambda raw: DeploymentChange(
            {
                "outbox": [*raw["outbox"], {**message, "at": "2026-12-01T13:00:00+00:00"}],
                "outboxPending": True,
            }
        ),
    )
    records.drop_from_outbox("s-1", published)  # tick A forgets what it published
    assert len(records.get("s-1").outbox) == 1, "the second RESTORED was never published"


def test_a_tick_that_died_between_the_hedge_claim_and_its_call_hedges_again_after_the_limit(
    post_event, deployments, clock
):
    """A claim nobody answered (the instance died at the call, or before Vertex's answer)
    cannot tell a call never sent from one that will land: it holds until, a minute after
    it (LOST_DEPLOY_SECONDS), the endpoint runs no DeployModel started since (one that
    reached Vertex would run from then), then a new grace period, then a hedge."""
    from shared.domain.serving.rule import LOST_DEPLOY_SECONDS

    class Killed(BaseException):
        pass

    model = deploy(post_event, deployments, "s-1")
    deployments.backend.call_fails_with = Killed()  # the instance dies at the call
    with pytest.raises(Killed):
        hedge(deployments, clock, model)
    deployments.backend.call_fails_with = None
    clock.advance(LOST_DEPLOY_SECONDS / 2)
    refresh_deployments(deployments)
    assert [c[0] for c in deployments.backend.calls].count("DeployModel") == 1  # held
    for _ in range(7):  # the limit, then the grace period
        clock.advance(60)
        refresh_deployments(deployments)
    assert [c[0] for c in deployments.backend.calls].count("DeployModel") == 2


def test_a_cancel_that_arrives_before_its_deploy_request_is_kept(post_event, deployments, clock):
    """(g) docs/contract.md, Tombstones: a cancel for a requestId not seen yet leaves a
    tombstone, and the request arriving later (Pub/Sub keeps no order) creates nothing. The
    tombstone is in jobs/{id}; deploy_model never looks at it, so the model is deployed and
    serves, and the owner's cancel is lost."""
    cancel(post_event, "s-9")
    body = load("deploy_request")
    body["requestId"] = "s-9"
    body["deployModel"]["endpoint"] = ENDPOINT
    response = post_event("handle_job_request", pubsub_cloud_event(body))
    assert response.status_code == 200
    assert deployments.backend.deployed == [], "deployed after its cancel"


# -- the knobs and objective mode (issue 39) ------------------------------------------------


def request_with(request_id, replicas=2, **fields):
    body = load("deploy_request")
    body["requestId"] = request_id
    resources = body["deployModel"]["deployedModel"]["dedicatedResources"]
    resources["minReplicaCount"] = resources["maxReplicaCount"] = replicas
    body["deployModel"]["trafficSplit"] = {"0": 100}
    return {**body, **fields}


def test_a_floor_is_deployed_beside_a_smaller_spot_model_and_serves_through_a_spot_loss(
    post_event, deployments, clock
):
    body = request_with("s-1", replicas=2, minOnDemandReplicas=1, hedge=False)
    assert post_event("handle_job_request", pubsub_cloud_event(body)).status_code == 200
    record = deployments.records.deployment_store.get("s-1")
    assert record["serving"]["policy"]["minOnDemandReplicas"] == 1
    assert record["serving"]["policy"]["why"] == "named by the request"
    deployments.backend.finish(record["operation"])
    refresh_deployments(deployments)  # DEPLOYED: the Spot model (1 replica) is followed
    spot = deployments.records.deployment_store.get("s-1")["deployedModelId"]
    assert (
        next(m for m in deployments.backend.endpoints[ENDPOINT] if m["id"] == spot)[
            "dedicatedResources"
        ]["minReplicaCount"]
        == 1
    )
    # The next step: the floor's DeployModel (on demand, one replica); then it serves and
    # traffic follows both.
    refresh_deployments(deployments)
    assert deployments.backend.calls[-1] == (
        "DeployModel",
        ENDPOINT,
        "served [flexjobs s-1] (on-demand floor)",
    )
    deployments.backend.finish(next(iter(deployments.backend._pending)))
    clock.advance(60)
    refresh_deployments(deployments)
    state = serving(deployments, "s-1")
    assert state.floor is not None and state.floor.id is not None
    assert deployments.backend.splits[ENDPOINT] == {spot: 50, state.floor.id: 50}

    deployments.backend.set_available(ENDPOINT, spot, 0)  # Spot lost
    clock.advance(60)
    refresh_deployments(deployments)
    assert deployments.backend.splits[ENDPOINT] == {state.floor.id: 100}
    clock.advance(3600)
    refresh_deployments(deployments)  # no hedge asked for: the floor alone serves
    assert serving(deployments, "s-1").fallback is None
    assert serving(deployments, "s-1").dark_seconds == 0


def test_every_replica_on_demand_deploys_the_floor_alone_and_a_cancel_takes_it_down(
    post_event, deployments, clock
):
    body = request_with("s-1", replicas=1, minOnDemandReplicas=1, hedge=False)
    assert post_event("handle_job_request", pubsub_cloud_event(body)).status_code == 200
    assert deployments.backend.deployed == []  # no Spot model
    ((call, _endpoint, name),) = deployments.backend.calls
    assert (call, name) == ("DeployModel", "served [flexjobs s-1] (on-demand floor)")
    record = deployments.records.deployment_store.get("s-1")
    assert record["state"] == "DEPLOYING"
    deployments.backend.finish(record["operation"])
    refresh_deployments(deployments)
    record = deployments.records.deployment_store.get("s-1")
    assert record["state"] == "DEPLOYED" and record["deployedModelId"]
    assert notices(deployments, "s-1") == ["DEPLOYED"]

    cancel(post_event, "s-1")
    tick_until_settled(deployments, clock)
    assert deployments.records.deployment_store.get("s-1")["state"] == "UNDEPLOYED"
    assert deployments.backend.endpoints[ENDPOINT] == []


def test_an_objective_without_knobs_gets_the_cheapest_measured_policy_and_says_why(
    post_event, deployments
):
    body = request_with("s-4", replicas=4, availabilityObjective={"atLeastOneReplica": 0.99})
    assert post_event("handle_job_request", pubsub_cloud_event(body)).status_code == 200
    policy = deployments.records.deployment_store.get("s-4")["serving"]["policy"]
    # The committed table: a floor of one beside three Spot replicas, no hedge (docs/serving.md).
    assert (policy["minOnDemandReplicas"], policy["extraSpotReplicas"], policy["hedge"]) == (
        1,
        0,
        False,
    )
    assert policy["objective"] == {"atLeastOneReplica": 0.99}
    assert policy["why"].startswith("chosen for the objective: the cheapest of the")


def test_an_objective_no_spot_policy_meets_keeps_every_replica_on_demand(post_event, deployments):
    body = request_with("s-1", replicas=1, availabilityObjective={"atLeastOneReplica": 0.999})
    assert post_event("handle_job_request", pubsub_cloud_event(body)).status_code == 200
    policy = deployments.records.deployment_store.get("s-1")["serving"]["policy"]
    assert (policy["minOnDemandReplicas"], policy["hedge"]) == (1, False)
    assert deployments.backend.deployed == []  # the floor, not a Spot model


@pytest.mark.parametrize(
    ("fields", "path", "words"),
    [
        ({"minOnDemandReplicas": 3}, "minOnDemandReplicas", "more than the 2 replicas required"),
        ({"minOnDemandReplicas": -1}, "minOnDemandReplicas", "whole number"),
        ({"extraSpotReplicas": 2.5}, "extraSpotReplicas", "whole number"),
        ({"hedge": "yes"}, "hedge", "true or false"),
        ({"availabilityObjective": 0.99}, "availabilityObjective", "must be an object"),
        (
            {"availabilityObjective": {"atLeastOneReplica": 1.5}},
            "availabilityObjective.atLeastOneReplica",
            "fraction",
        ),
        (
            {"availabilityObjective": {"atLeastOneReplica": 0.9, "nines": 3}},
            "availabilityObjective.nines",
            "is not a field",
        ),
    ],
)
def test_a_knob_that_cannot_be_met_is_a_recorded_rejection(
    post_event, deployments, intake, fields, path, words
):
    body = request_with("bad-1", replicas=2, **fields)
    assert post_event("handle_job_request", pubsub_cloud_event(body)).status_code == 200
    errors = intake.rejections.documents["bad-1"]["errors"]
    assert any(e["path"] == path and words in e["message"] for e in errors), errors
    assert deployments.backend.deployed == [] and deployments.backend.calls == []
    assert deployments.records.deployment_store.get("bad-1") is None


def test_serving_fields_on_a_training_job_are_refused(post_event, intake):
    body = {**load("seed_request"), "hedge": True}
    assert post_event("handle_job_request", pubsub_cloud_event(body)).status_code == 200
    errors = intake.rejections.documents[body["requestId"]]["errors"]
    assert [e["path"] for e in errors] == ["hedge"]


def test_extra_spot_replicas_count_against_the_operators_replica_cap(post_event, intake):
    # FLEXJOBS_MAX_REPLICAS is 64 in the functional settings: 2 required + 63 extra is 65.
    body = request_with("bad-2", replicas=2, extraSpotReplicas=63)
    assert post_event("handle_job_request", pubsub_cloud_event(body)).status_code == 200
    errors = intake.rejections.documents["bad-2"]["errors"]
    assert any(
        e["path"] == "extraSpotReplicas" and "FLEXJOBS_MAX_REPLICAS" in e["message"] for e in errors
    ), errors


# -- found by review of the machine (regressions) ------------------------------------------


def deploy_sharing(post_event, deployments, rid, split):
    body = load("deploy_request")
    body["requestId"] = rid
    body["deployModel"]["endpoint"] = ENDPOINT
    body["deployModel"]["deployedModel"]["dedicatedResources"]["minReplicaCount"] = 2
    body["deployModel"]["trafficSplit"] = split
    assert post_event("handle_job_request", pubsub_cloud_event(body)).status_code == 200
    deployments.backend.finish(deployments.records.deployment_store.get(rid)["operation"])
    refresh_deployments(deployments)
    return deployments.records.deployment_store.get(rid)["deployedModelId"]


def test_two_deployments_alone_on_an_endpoint_both_cancelled_go_without_the_hold(
    post_event, deployments, clock
):
    backend = deployments.backend
    a = deploy_sharing(post_event, deployments, "a", {"0": 100})
    deploy_sharing(post_event, deployments, "b", {"0": 50, a: 50})
    # Both cancels are recorded before either steps (each cancel's own read fails).
    backend.read_fails_with = BackendUnavailable("GetEndpoint 503")
    cancel(post_event, "a")
    cancel(post_event, "b")
    backend.read_fails_with = None
    start = clock()
    for _ in range(40):
        for name in [*backend._pending, *backend._undeploys, *backend._mutations]:
            backend.finish(name)
        if not backend.endpoints[ENDPOINT]:
            break
        clock.advance(60)
        refresh_deployments(deployments)
    # Neither waits the 30-minute hold for the other, which is leaving too.
    assert backend.endpoints[ENDPOINT] == []
    assert (clock() - start).total_seconds() <= 10 * 60
    refresh_deployments(deployments)  # the reads that see them gone
    assert [deployments.records.deployment_store.get(r)["state"] for r in ("a", "b")] == [
        "UNDEPLOYED"
    ] * 2


def test_a_neighbours_traffic_never_lands_on_a_fallback_whose_undeploy_this_tick_sent(
    post_event, deployments, clock
):
    backend = deployments.backend
    a = deploy_sharing(post_event, deployments, "a", {"0": 100})
    b = deploy_sharing(post_event, deployments, "b", {"0": 50, a: 50})
    assert backend.splits[ENDPOINT] == {a: 50, b: 50}
    # a is hedged, its fallback serves, Spot comes back, the hold runs, traffic goes back.
    backend.set_available(ENDPOINT, a, 0)
    refresh_deployments(deployments)
    clock.advance(300)
    refresh_deployments(deployments)
    backend.finish(next(iter(backend._pending)))
    clock.advance(60)
    refresh_deployments(deployments)
    fallback = serving(deployments, "a").fallback
    assert fallback is not None and fallback.id
    backend.set_available(ENDPOINT, a, 2)
    for _ in range(32):
        clock.advance(60)
        refresh_deployments(deployments)
        if backend.splits[ENDPOINT].get(fallback.id, 0) == 0:
            break
    assert backend.splits[ENDPOINT].get(fallback.id, 0) == 0 and not backend._undeploys
    # b is cancelled (its own step's read fails: the tick takes it from there). The next
    # tick steps a first (its restore sends the fallback's UndeployModel), then b.
    backend.read_fails_with = BackendUnavailable("GetEndpoint 503")
    cancel(post_event, "b")
    backend.read_fails_with = None
    clock.advance(60)
    refresh_deployments(deployments)
    leaving = {model for (_, model) in backend._undeploys.values()}
    given = {k for k, v in backend.splits[ENDPOINT].items() if v}
    assert not leaving & given, (backend.splits[ENDPOINT], leaving)
    assert sum(backend.splits[ENDPOINT].values()) == 100


def test_a_deployment_deployed_before_the_machine_is_not_notified_deployed_again(
    post_event, deployments, clock
):
    import json

    backend = deployments.backend
    body = load("deploy_request")
    backend.endpoints[ENDPOINT].append(
        {
            "id": "7",
            "displayName": "served [flexjobs old-1]",
            "dedicatedResources": {"spot": True, "minReplicaCount": 1},
            "status": {"availableReplicaCount": 1},
        }
    )
    backend.splits[ENDPOINT] = {"7": 100}
    # As the revision before the machine wrote it: DEPLOYED, notified, no serving yet.
    deployments.records.deployment_store.records["old-1"] = {
        "requestId": "old-1",
        "kind": "deployModel",
        "state": "DEPLOYED",
        "endpoint": ENDPOINT,
        "deployedModelId": "7",
        "operation": f"{ENDPOINT}/operations/1",
        "request": json.dumps(body["deployModel"]),
        "options": "{}",
        "notified": [{"requestId": "old-1", "state": "DEPLOYED"}],
        "createdAt": clock(),
        "updatedAt": clock(),
    }
    clock.advance(60)
    refresh_deployments(deployments)
    record = deployments.records.deployment_store.get("old-1")
    assert record["serving"]["phase"] == "SERVING" and record["state"] == "DEPLOYED"
    assert notices(deployments, "old-1") == []


def test_an_endpoint_left_without_traffic_is_taken_by_a_deployment_that_serves_again(
    post_event, deployments, clock
):
    """Found by the chaos soak: a cancelled deployment takes the split with it after the hold
    while its neighbour does not serve; once the neighbour serves again, the endpoint must not
    stay dark: the deployment asked for traffic, so it takes it."""
    backend = deployments.backend
    a = deploy_sharing(post_event, deployments, "a", {"0": 100})
    b = deploy_sharing(post_event, deployments, "b", {"0": 50, a: 50})
    backend.set_available(ENDPOINT, b, 0)
    clock.advance(60)
    refresh_deployments(deployments)
    cancel(post_event, "a")
    for _ in range(40):
        for name in [*backend._undeploys]:
            backend.finish(name)
        clock.advance(60)
        refresh_deployments(deployments)
        if deployments.records.deployment_store.get("a")["state"] == "UNDEPLOYED":
            break
    assert deployments.records.deployment_store.get("a")["state"] == "UNDEPLOYED"
    assert backend.splits[ENDPOINT] == {}  # a took it with it: nothing else served
    backend.set_available(ENDPOINT, b, 2)
    clock.advance(60)
    refresh_deployments(deployments)
    assert backend.splits[ENDPOINT] == {b: 100}
    clock.advance(60)
    refresh_deployments(deployments)
    assert serving(deployments, "b").phase.value != "PAUSED_BY_HAND"


# --- an endpoint that takes no traffic (the chaos soak, seed 359349) -----------------------


def deploy_without_split(post_event, deployments, request_id):
    """A deployModel that names no trafficSplit; the name of its DeployModel operation."""
    body = load("deploy_request")
    body["requestId"] = request_id
    body["deployModel"]["endpoint"] = ENDPOINT
    body["deployModel"].pop("trafficSplit", None)
    assert post_event("handle_job_request", pubsub_cloud_event(body)).status_code == 200
    return deployments.records.deployment_store.get(request_id)["operation"]


def test_our_traffic_move_is_not_taken_for_a_hand_edit_by_a_step_that_read_before_it(
    post_event, deployments, clock
):
    """Two steps at once (a delivery and the tick) read an endpoint that takes no traffic, on
    which the deployment's model landed. The first takes the traffic; the second, whose read
    is as new as the first's but older than the move, must decide nothing: decided on the
    state the move wrote, it took our own move for a hand edit and paused for good."""
    backend = deployments.backend
    backend.endpoints[ENDPOINT].append(
        {"id": "777", "displayName": "canary", "status": {"availableReplicaCount": 1}}
    )
    backend.set_split_by_hand(ENDPOINT, {"777": 100})
    operation = deploy_without_split(post_event, deployments, "s-1")
    assert not backend._split_of[operation]  # none asked for
    # While it deploys, the canary goes, and its split with it: the model lands dark.
    backend.undeploy_by_hand(ENDPOINT, "777")
    backend.finish(operation)
    clock.advance(60)
    landed = advance(deployments, "s-1")
    assert landed is not None and landed.action.transition == "deployed"
    clock.advance(60)
    first = Seen(read_endpoint(deployments, ENDPOINT), clock(), {})
    second = Seen(read_endpoint(deployments, ENDPOINT), clock(), {})

    took = advance(deployments, "s-1", first)
    assert took is not None and took.action.kind is ActionKind.TRAFFIC
    late = advance(deployments, "s-1", second)
    assert late is not None and late.action.kind is ActionKind.NOTHING

    model = deployments.records.deployment_store.get("s-1")["deployedModelId"]
    assert backend.splits[ENDPOINT] == {model: 100}
    for _ in range(3):
        clock.advance(60)
        refresh_deployments(deployments)
    state = serving(deployments, "s-1")
    assert (state.phase.value, state.pool) == ("SERVING", 100), state.history[-1].cause
    assert notices(deployments, "s-1") == ["DEPLOYED"]
