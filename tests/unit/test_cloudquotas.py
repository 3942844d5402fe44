"""The Cloud Quotas adapter's mapping, on plain values: which QuotaInfo holds a resource's
limit, which dimensions info holds a region's, and the bounds of a read."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from google.cloud import cloudquotas_v1 as cq

from flexjobs_local.simulator.quota import ACCELERATOR_METRIC_NAMES
from shared.adapters.cloudquotas import (
    METRIC_NAMES,
    CloudQuotasLimits,
    DimensionsValue,
    Page,
    QuotaValue,
    limits_from,
    metric_of,
    read_bounded,
    region_limit,
    value_of,
)
from shared.domain.admission.config import Pool, Resource
from shared.domain.admission.ledger import Ledger
from shared.domain.request.machines import DWS_ACCELERATORS, NON_DWS_GPUS
from shared.kernel.config import Settings
from shared.kernel.errors import QuotaUnreadable

A100 = Resource("us-central1", "NVIDIA_TESLA_A100", Pool.PREEMPTIBLE)
A100_ON_DEMAND = Resource("us-central1", "NVIDIA_TESLA_A100", Pool.ON_DEMAND)
H100_EAST = Resource("us-east5", "NVIDIA_H100_80GB", Pool.PREEMPTIBLE)
PREEMPTIBLE_A100 = "aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_a100_gpus"
ON_DEMAND_A100 = "aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus"


def region(name: str, value: int, *locations: str) -> DimensionsValue:
    return DimensionsValue({"region": name}, value, locations)


def test_every_gpu_a_request_may_name_has_a_metric():
    for accelerator in (*DWS_ACCELERATORS, *NON_DWS_GPUS):
        for pool in Pool:
            assert metric_of(Resource("us-central1", accelerator, pool)) is not None


def test_the_metric_names_are_the_simulators():
    gpus = {k: v for k, v in ACCELERATOR_METRIC_NAMES.items() if not k.startswith("TPU_")}
    assert dict(METRIC_NAMES) == gpus


def test_the_pools_are_distinct_metrics():
    assert metric_of(A100) == PREEMPTIBLE_A100
    assert metric_of(A100_ON_DEMAND) == ON_DEMAND_A100
    assert metric_of(Resource("us-central1", "TPU_V3", Pool.ON_DEMAND)) is None


def test_the_region_named_wins_over_the_default_whatever_their_order():
    quota = QuotaValue("m", (DimensionsValue({}, 2), region("us-east5", 16)))
    assert region_limit(quota, "us-east5") == 16
    assert region_limit(quota, "europe-west4") == 2


def test_a_default_that_does_not_apply_in_the_region_is_no_limit_there():
    quota = QuotaValue("m", (DimensionsValue({}, 4, ("us-central1", "us-east4")),))
    assert region_limit(quota, "us-central1") == 4
    assert region_limit(quota, "asia-east1") is None
    assert region_limit(QuotaValue("m", (DimensionsValue({}, 4, ("global",)),)), "x") == 4


def test_infos_of_other_dimensions_and_unlimited_values_hold_no_limit():
    other = DimensionsValue({"region": "us-east5", "network": "n"}, 1)
    assert region_limit(QuotaValue("m", (other,)), "us-east5") is None
    assert region_limit(QuotaValue("m", (region("us-east5", -1),)), "us-east5") is None
    assert region_limit(QuotaValue("m", ()), "us-east5") is None


def test_limits_are_matched_by_metric_and_region():
    quotas = [
        QuotaValue(PREEMPTIBLE_A100, (region("us-central1", 8), DimensionsValue({}, 0))),
        QuotaValue(ON_DEMAND_A100, (region("us-central1", 0),)),
        QuotaValue("aiplatform.googleapis.com/custom_model_training_cpus", (region("x", 9),)),
    ]
    asked = [A100, A100_ON_DEMAND, H100_EAST, Resource("us-east5", "NVIDIA_TESLA_A100", A100.pool)]
    assert limits_from(quotas, asked) == {
        A100: 8,
        A100_ON_DEMAND: 0,
        Resource("us-east5", "NVIDIA_TESLA_A100", Pool.PREEMPTIBLE): 0,
    }


def test_a_quota_info_reads_as_plain_values():
    info = cq.QuotaInfo(
        metric=PREEMPTIBLE_A100,
        dimensions_infos=[
            cq.DimensionsInfo(
                dimensions={"region": "us-central1"},
                details=cq.QuotaDetails(value=8),
                applicable_locations=["us-central1"],
            ),
            cq.DimensionsInfo(details=cq.QuotaDetails(value=0)),
        ],
    )
    assert value_of(info) == QuotaValue(
        PREEMPTIBLE_A100,
        (region("us-central1", 8, "us-central1"), DimensionsValue({}, 0, ())),
    )


def test_a_read_past_its_bounds_is_unreadable():
    page = Page([QuotaValue("m")], 100)
    assert len(read_bounded(iter([page] * 3), max_pages=3)) == 3
    with pytest.raises(QuotaUnreadable, match="more than 2 pages"):
        read_bounded(iter([page] * 3), max_pages=2)
    with pytest.raises(QuotaUnreadable, match="larger than 250 bytes"):
        read_bounded(iter([page] * 3), max_bytes=250)
    ticks = iter([0.0, 5.0, 11.0])
    with pytest.raises(QuotaUnreadable, match="call timeout"):
        read_bounded(iter([page] * 3), deadline=10.0, clock=lambda: next(ticks))


def test_no_project_is_unreadable_and_nothing_asked_reads_nothing():
    limits = CloudQuotasLimits(Settings(project=""), client=object())
    assert limits.limits([]) == {}
    with pytest.raises(QuotaUnreadable) as raised:
        limits.limits([A100])
    assert raised.value.retryable


def test_the_endpoint_setting():
    settings = Settings.from_env({"FLEXJOBS_CLOUDQUOTAS_ENDPOINT": "127.0.0.1:9000"})
    assert settings.cloudquotas_endpoint == "127.0.0.1:9000" and settings.cloudquotas_is_local
    assert not Settings.from_env({}).cloudquotas_is_local
    assert Settings.from_env({}).cloudquotas_endpoint is None


def test_the_ledger_keeps_a_limit_of_zero():
    at = datetime(2026, 12, 1, tzinfo=UTC)
    ledger = Ledger(observed={A100: 0, H100_EAST: 32}, observed_at=at, unreadable=None)
    back = Ledger.decode(ledger.to_dict())
    assert dict(back.observed) == {A100: 0, H100_EAST: 32} and back.observed_at == at
