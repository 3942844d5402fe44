"""The simulator's quota rule: pools, metric names, and which creates a limit refuses."""

from __future__ import annotations

import pytest
from google.cloud import aiplatform_v1

from flexjobs_local.simulator.common import SimError
from flexjobs_local.simulator.engine import Engine
from flexjobs_local.simulator.quota import (
    ACCELERATOR_METRIC_NAMES,
    ON_DEMAND,
    PREEMPTIBLE,
    Quota,
    exceeded,
    metric,
    pool_of,
)

A100 = "NVIDIA_TESLA_A100"
PREEMPTIBLE_A100 = "aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_a100_gpus"
ON_DEMAND_A100 = "aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus"


@pytest.mark.parametrize(
    ("strategy", "pool"),
    [
        ("SPOT", PREEMPTIBLE),
        ("FLEX_START", PREEMPTIBLE),
        ("STANDARD", ON_DEMAND),
        ("ON_DEMAND", ON_DEMAND),
        ("STRATEGY_UNSPECIFIED", ON_DEMAND),
    ],
)
def test_spot_and_flex_start_draw_on_the_preemptible_pool(strategy, pool):
    assert pool_of(strategy) == pool


def test_metric_names_follow_vertex():
    assert metric(A100, PREEMPTIBLE) == PREEMPTIBLE_A100
    assert metric(A100, ON_DEMAND) == ON_DEMAND_A100
    assert metric("NVIDIA_H100_80GB", PREEMPTIBLE) == (
        "aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_h100_gpus"
    )
    assert metric("NVIDIA_A100_80GB", ON_DEMAND).endswith("_nvidia_a100_80gb_gpus")
    assert metric("NVIDIA_TESLA_K80", ON_DEMAND).endswith("_nvidia_k80_gpus")


def test_every_accelerator_type_has_a_metric():
    known = set(aiplatform_v1.AcceleratorType.__members__) - {"ACCELERATOR_TYPE_UNSPECIFIED"}
    assert set(ACCELERATOR_METRIC_NAMES) == known


def test_a_job_may_fill_the_limit_but_not_pass_it():
    assert exceeded({A100: 8}, {}, {A100: 8}, PREEMPTIBLE) == []
    assert exceeded({A100: 4}, {A100: 4}, {A100: 8}, PREEMPTIBLE) == []
    assert exceeded({A100: 1}, {A100: 8}, {A100: 8}, PREEMPTIBLE) == [PREEMPTIBLE_A100]


def test_no_limit_means_unlimited():
    assert exceeded({A100: 10_000}, {A100: 10_000}, {}, ON_DEMAND) == []
    assert exceeded({A100: 8, "NVIDIA_L4": 8}, {}, {"NVIDIA_L4": 16}, ON_DEMAND) == []


def test_every_metric_passed_is_named():
    over = exceeded({A100: 2, "NVIDIA_L4": 2}, {}, {A100: 1, "NVIDIA_L4": 1}, ON_DEMAND)
    assert over == [
        ON_DEMAND_A100,
        "aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus",
    ]


def test_a_projects_own_limit_overrides_every_projects():
    quota = Quota()
    quota.set_limit("us-central1", A100, PREEMPTIBLE, 8)
    quota.set_limit("us-central1", A100, PREEMPTIBLE, 16, project="big")
    assert quota.limit("small", "us-central1", A100, PREEMPTIBLE) == 8
    assert quota.limit("big", "us-central1", A100, PREEMPTIBLE) == 16
    assert quota.limit("small", "europe-west4", A100, PREEMPTIBLE) is None
    assert quota.limit("small", "us-central1", A100, ON_DEMAND) is None
    quota.set_limit("us-central1", A100, PREEMPTIBLE, None)
    assert quota.limit("small", "us-central1", A100, PREEMPTIBLE) is None


def test_check_refuses_with_vertex_text():
    quota = Quota()
    quota.set_limit("us-central1", A100, PREEMPTIBLE, 8)
    with pytest.raises(SimError) as caught:
        quota.check("p", "us-central1", PREEMPTIBLE, {A100: 8}, {A100: 8})
    assert caught.value.code == "RESOURCE_EXHAUSTED"
    assert caught.value.message == (
        f"The following quota metrics exceed quota limits: {PREEMPTIBLE_A100}"
    )
    quota.check("p", "us-central1", ON_DEMAND, {A100: 8}, {A100: 8})


@pytest.mark.parametrize(
    ("accelerator", "pool", "limit"),
    [("NVIDIA_NOPE", PREEMPTIBLE, 1), (A100, "spot", 1), (A100, PREEMPTIBLE, -1)],
)
def test_bad_limits_are_refused(accelerator, pool, limit):
    with pytest.raises(SimError) as caught:
        Quota().set_limit("us-central1", accelerator, pool, limit)
    assert caught.value.code == "INVALID_ARGUMENT"


def _job(strategy: str, gpus: int, replicas: int = 1) -> aiplatform_v1.CustomJob:
    return aiplatform_v1.CustomJob(
        display_name="j",
        job_spec={
            "worker_pool_specs": [
                {
                    "machine_spec": {
                        "machine_type": "a2-highgpu-8g",
                        "accelerator_type": A100,
                        "accelerator_count": gpus,
                    },
                    "replica_count": replicas,
                }
            ],
            "scheduling": {"strategy": strategy},
        },
    )


def test_the_engine_counts_live_jobs_of_the_project_region_and_pool():
    engine = Engine(time_factor=0, seed=1, default_capacity=1000)
    parent = "projects/p/locations/us-central1"
    engine.set_quota("us-central1", A100, PREEMPTIBLE, 8)
    first = engine.create_job("CustomJob", parent, _job("SPOT", 4, replicas=2))
    with pytest.raises(SimError) as caught:
        engine.create_job("CustomJob", parent, _job("FLEX_START", 1))
    assert PREEMPTIBLE_A100 in caught.value.message
    engine.create_job("CustomJob", parent, _job("STANDARD", 8))  # its own pool
    engine.create_job("CustomJob", "projects/q/locations/us-central1", _job("SPOT", 8))
    engine.create_job("CustomJob", "projects/p/locations/europe-west4", _job("SPOT", 8))
    held = {(u["project"], u["location"], u["pool"]): u["gpus"] for u in engine.quota()["usage"]}
    assert held[("p", "us-central1", PREEMPTIBLE)] == 8
    engine.cancel_job("CustomJob", first.name)
    with pytest.raises(SimError):  # CANCELLING still holds its quota
        engine.create_job("CustomJob", parent, _job("SPOT", 8))
    engine.advance(60)
    engine.create_job("CustomJob", parent, _job("SPOT", 8))


def test_hyperparameter_tuning_demand_counts_parallel_trials():
    engine = Engine(time_factor=0, seed=1, default_capacity=1000)
    engine.set_quota("us-central1", A100, ON_DEMAND, 8)
    trial = _job("STANDARD", 4).job_spec
    hpt = aiplatform_v1.HyperparameterTuningJob(
        display_name="h",
        max_trial_count=4,
        parallel_trial_count=3,
        study_spec={
            "metrics": [{"metric_id": "loss", "goal": "MINIMIZE"}],
            "parameters": [
                {"parameter_id": "lr", "double_value_spec": {"min_value": 0.1, "max_value": 1}}
            ],
        },
        trial_job_spec=trial,
    )
    with pytest.raises(SimError) as caught:  # 3 trials x 4 GPUs = 12 > 8
        engine.create_job("HyperparameterTuningJob", "projects/p/locations/us-central1", hpt)
    assert caught.value.code == "RESOURCE_EXHAUSTED"
    assert ON_DEMAND_A100 in caught.value.message
