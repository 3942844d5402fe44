"""The project's real quota as the ceiling, on the embedded stack's pieces: the product's own
CloudQuotasLimits (the official ``cloudquotas_v1`` client, over gRPC) reads the quota the
simulator enforces (its Cloud Quotas front), and the tick caches it in the Firestore ledger.

Two parts: the adapter against the simulator alone (the limits read are those Vertex refuses
creates by; a fault is QuotaUnreadable), then the tick on a stack of its own with the
simulator's quota lower than the queue file's: it admits no more than the simulator allows,
Vertex refuses none of its creates, and a failing read keeps the limit read and says why.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from flexjobs_local.simulator import SimulatorControl, SimulatorHandle, serve
from flexjobs_local.stack import LocalStack, StackConfig
from shared.adapters.cloudquotas import CloudQuotasLimits
from shared.domain.admission.config import Pool, Resource
from shared.kernel.config import Settings
from shared.kernel.errors import QuotaUnreadable
from tests.integration.helpers import running_stack, wait_for
from tests.integration.simulator_support import A100, LOCATION
from tests.integration.test_admission import request
from tests.integration.test_lifecycle import record

pytestmark = pytest.mark.integration

PROJECT = "quota-test"
ON_DEMAND_A100 = Resource(LOCATION, A100, Pool.ON_DEMAND)
PREEMPTIBLE_A100 = Resource(LOCATION, A100, Pool.PREEMPTIBLE)
L4_EAST = Resource("us-east4", "NVIDIA_L4", Pool.PREEMPTIBLE)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    handle = serve(time_factor=0, seed=7)
    yield handle
    handle.stop()


def limits_of(sim: SimulatorHandle, project: str = PROJECT) -> CloudQuotasLimits:
    settings = Settings(
        project=project, cloudquotas_endpoint=sim.grpc_endpoint, call_timeout_seconds=2
    )
    return CloudQuotasLimits(settings)


def test_the_limits_read_are_the_simulators(control: SimulatorControl, sim: SimulatorHandle):
    control.set_quota(LOCATION, A100, "preemptible", 8)
    control.set_quota(LOCATION, A100, "on-demand", 0)
    control.set_quota("us-east4", "NVIDIA_L4", "preemptible", 3, project=PROJECT)
    control.set_quota("us-east4", "NVIDIA_L4", "preemptible", 99, project="someone-else")
    read = limits_of(sim).limits([PREEMPTIBLE_A100, ON_DEMAND_A100, L4_EAST])
    # A limit of 0 is a limit; another project's limit is not this one's.
    assert dict(read) == {PREEMPTIBLE_A100: 8, ON_DEMAND_A100: 0, L4_EAST: 3}
    [call] = control.calls("ListQuotaInfos")
    assert call["code"] == "OK"
    assert call["request"]["parent"] == (
        f"projects/{PROJECT}/locations/global/services/aiplatform.googleapis.com"
    )


def test_a_resource_without_a_limit_is_left_out(control: SimulatorControl, sim: SimulatorHandle):
    control.set_quota(LOCATION, A100, "preemptible", 8)
    assert dict(limits_of(sim).limits([ON_DEMAND_A100, L4_EAST])) == {}


def test_many_pages_are_read(control: SimulatorControl, sim: SimulatorHandle, monkeypatch):
    monkeypatch.setattr("shared.adapters.cloudquotas.PAGE_SIZE", 1)
    control.set_quota(LOCATION, A100, "preemptible", 8)
    control.set_quota(LOCATION, A100, "on-demand", 4)
    control.set_quota("us-east4", "NVIDIA_L4", "preemptible", 3)
    read = limits_of(sim).limits([PREEMPTIBLE_A100, ON_DEMAND_A100, L4_EAST])
    assert dict(read) == {PREEMPTIBLE_A100: 8, ON_DEMAND_A100: 4, L4_EAST: 3}
    assert len(control.calls("ListQuotaInfos")) == 3


@pytest.mark.parametrize("code", ["PERMISSION_DENIED", "UNAVAILABLE"])
def test_a_refused_read_is_quota_unreadable(
    control: SimulatorControl, sim: SimulatorHandle, code: str
):
    control.set_quota(LOCATION, A100, "preemptible", 8)
    control.inject_faults(code, count=1000, methods=["ListQuotaInfos"])
    with pytest.raises(QuotaUnreadable, match="ListQuotaInfos failed") as raised:
        limits_of(sim).limits([PREEMPTIBLE_A100])
    assert raised.value.retryable


# --- the tick, on a stack of its own -----------------------------------------------------------

# The file says 16; the simulator (what Vertex enforces) says 8.
QUEUES = """
projectQuota:
  - {region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, limit: 16}
queues:
  - name: team-a
    quotas:
      - {region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, nominal: 16}
"""
REAL_QUOTA = 8


@pytest.fixture(scope="module")
def quota_stack() -> Iterator[LocalStack]:
    config = StackConfig(
        tick_seconds=2.0,
        default_capacity=64,
        function_env={"FLEXJOBS_QUEUES": QUEUES, "FLEXJOBS_BACKOFF_BASE_SECONDS": "0"},
    )
    with running_stack(config) as stack:
        yield stack


def test_the_tick_reads_the_simulators_quota_and_admits_no_more(quota_stack: LocalStack):
    from google.cloud import firestore

    stack, sim = quota_stack, quota_stack.simulator
    db = firestore.Client(project=stack.config.project)
    ledger = db.document("admission/ledger")
    sim.set_quota(stack.config.location, A100, "preemptible", REAL_QUOTA)

    def read_the_limit() -> bool:
        raw = ledger.get().to_dict() or {}
        if [o.get("gpus") for o in raw.get("observed") or []] == [REAL_QUOTA]:
            return True
        # A tick that read before the quota was set waits 10 minutes to read again: clearing
        # observedAt (a hand edit) makes the next tick read.
        if raw.get("observedAt") is not None:
            ledger.update({"observedAt": None})
        return False

    wait_for(read_the_limit, 60, "the tick to cache the simulator's quota in the ledger")
    raw = ledger.get().to_dict() or {}
    assert raw["observed"] == [
        {"region": "us-central1", "acceleratorType": A100, "pool": "PREEMPTIBLE", "gpus": 8}
    ]
    assert raw["quotaUnreadable"] is None

    rids = ["q1", "q2", "q3"]
    for rid in rids:
        stack.publish_request(request(rid, "team-a"))
        wait_for(lambda rid=rid: record(db, rid).get("admission"), 60, f"{rid}'s record")
    wait_for(
        lambda: len(sim.jobs("CustomJob")) == 2 and record(db, "q3").get("admission"),
        60,
        "two admitted and created",
    )
    # The third waits for the real quota (8), not the file's (16).
    third = record(db, "q3")
    assert third["admission"]["stage"] == "WAITING"
    assert "project quota" in (third["admission"].get("heldBy") or "")
    wait_for(
        lambda: all(record(db, rid).get("state") == "SUCCEEDED" for rid in rids),
        240,
        "every request admitted, run and ended",
    )
    refused = [c for c in sim.calls("CreateCustomJob") if c["code"] != "OK"]
    assert refused == []  # Vertex refused no create for quota

    # The API fails: the last limit read stays, and why is recorded.
    sim.inject_faults("PERMISSION_DENIED", count=1000, methods=["ListQuotaInfos"])
    ledger.update({"observedAt": None})

    def unreadable() -> Any:
        return (ledger.get().to_dict() or {}).get("quotaUnreadable")

    assert "ListQuotaInfos failed" in wait_for(unreadable, 60, "quotaUnreadable recorded")
    assert [o["gpus"] for o in (ledger.get().to_dict() or {})["observed"]] == [REAL_QUOTA]
    sim.clear_faults()
