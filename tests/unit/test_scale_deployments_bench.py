"""The deployments scale benchmark's inputs and helpers (benchmarks/scale_deployments.py): its
requests are valid Spot deployModel requests that share their endpoint as issue 41 says, 1%
of the endpoints lose Spot, and a seeded record's outbox is flushed as the product flushes it."""

from __future__ import annotations

from benchmarks import scale_deployments as bench
from shared.domain.decisions.deploy_model import serving_plan
from shared.domain.model.kinds import DEPLOY_MODEL
from shared.domain.request.message import parse_request

ENDPOINT = "projects/p/locations/us-central1/endpoints/7003"


def test_a_deployment_is_one_spot_replica_and_the_first_of_an_endpoint_takes_its_traffic():
    first = parse_request(bench.deploy_body("dep-1", ENDPOINT, first=True), {}, "m-1")
    later = parse_request(bench.deploy_body("dep-2", ENDPOINT, first=False), {}, "m-2")
    for request in (first, later):
        assert request.kind == DEPLOY_MODEL.name
        assert request.spec["endpoint"] == ENDPOINT
        model = request.spec["deployedModel"]
        assert model["model"] == "projects/p/locations/us-central1/models/456"
        assert model["dedicatedResources"]["spot"] is True
        assert serving_plan(request.spec, request.options).required == 1
    assert first.spec["trafficSplit"] == {"0": 100}
    assert not later.spec.get("trafficSplit")


def test_one_percent_of_the_endpoints_lose_spot_at_least_one():
    names = [bench.endpoint_name("p", "us-central1", i) for i in range(200)]
    lost = bench.spot_loss_endpoints(names)
    assert len(lost) == 2 and len(set(lost)) == 2
    assert len(bench.spot_loss_endpoints(names[:20])) == 1


def test_a_flushed_record_keeps_its_notifications_as_notified_and_an_empty_outbox():
    message = {"requestId": "dep-1", "state": "DEPLOYED", "attempt": 0}
    record = {"outbox": [message], "outboxPending": True, "notified": []}
    flushed = bench._flushed(record)
    assert flushed["outbox"] == [] and flushed["outboxPending"] is False
    assert flushed["notified"] == [message]
    assert bench._flushed({"outbox": []}) == {"outbox": []}


def test_the_steady_targets_are_one_get_endpoint_per_endpoint_and_100_reads():
    tick = {"vertex": {"GetEndpoint": 200}, "reads": 100, "wall": 59.0}
    assert bench.steady_checks(tick, 200) == [True, True, True]
    worse = {"vertex": {"GetEndpoint": 201}, "reads": 101, "wall": 60.0}
    assert bench.steady_checks(worse, 200) == [False, False, False]
