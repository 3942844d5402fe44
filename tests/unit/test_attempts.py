"""Attempt bodies and accounting (pure): our env in every pool, strategy switches, GPU shape."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.domain.request.attempts import attempt_spec, gpu_shape, seconds_between, usage
from tests.events import load

OURS = ("FLEXJOBS_RUN_ID", "FLEXJOBS_ATTEMPT", "FLEXJOBS_RESUME_FROM")
RESUME = "gs://b/run/checkpoints/step-00000200/"


def custom_job() -> dict[str, Any]:
    """Two pools: a container with the user's env (and stale flexjobs entries), a package."""
    return {
        "displayName": "j",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {
                        "machineType": "a2-highgpu-1g",
                        "acceleratorType": "NVIDIA_TESLA_A100",
                        "acceleratorCount": 1,
                    },
                    "replicaCount": 2,
                    "containerSpec": {
                        "imageUri": "x",
                        "env": [
                            {"name": "LR", "value": "0.1"},
                            {"name": "FLEXJOBS_ATTEMPT", "value": "1"},
                            {"name": "FLEXJOBS_RESUME_FROM", "value": "gs://old/"},
                            {"name": "EPOCHS", "value": "3"},
                        ],
                    },
                },
                {
                    "machineSpec": {"machineType": "n1-standard-8"},
                    "replicaCount": 1,
                    "pythonPackageSpec": {
                        "executorImageUri": "y",
                        "packageUris": ["gs://b/p.tar.gz"],
                        "pythonModule": "trainer.task",
                    },
                },
            ],
            "scheduling": {"strategy": "FLEX_START", "maxWaitDuration": "1800s", "timeout": "60s"},
        },
    }


def envs(body: dict[str, Any], path: tuple[str, ...] = ("jobSpec",)) -> list[list[dict]]:
    node: Any = body
    for key in path:
        node = node[key]
    return [
        (pool.get("containerSpec") or pool.get("pythonPackageSpec"))["env"]
        for pool in node["workerPoolSpecs"]
    ]


def ours(run_id: str, attempt: int, resume: str | None) -> list[dict[str, str]]:
    env = [
        {"name": "FLEXJOBS_RUN_ID", "value": run_id},
        {"name": "FLEXJOBS_ATTEMPT", "value": str(attempt)},
    ]
    return env + ([{"name": "FLEXJOBS_RESUME_FROM", "value": RESUME}] if resume else [])


# --- attempt_spec -----------------------------------------------------------------------


def test_every_pool_gets_our_env_including_python_packages():
    out = attempt_spec("customJob", custom_job(), run_id="run-1", attempt=3, resume_from=RESUME)
    container, package = envs(out)
    assert container == [
        {"name": "LR", "value": "0.1"},
        {"name": "EPOCHS", "value": "3"},
        *ours("run-1", 3, RESUME),
    ]
    assert package == ours("run-1", 3, RESUME)


def test_stale_entries_are_replaced_not_duplicated():
    first = attempt_spec("customJob", custom_job(), run_id="r", attempt=2, resume_from=RESUME)
    second = attempt_spec("customJob", first, run_id="r", attempt=3, resume_from=None)
    for env in envs(second):
        names = [e["name"] for e in env]
        assert names.count("FLEXJOBS_ATTEMPT") == 1
        assert "FLEXJOBS_RESUME_FROM" not in names  # no checkpoint this time: none inherited
        assert {e["name"]: e["value"] for e in env}["FLEXJOBS_ATTEMPT"] == "3"


def test_without_a_checkpoint_there_is_no_resume_variable():
    out = attempt_spec("customJob", custom_job(), run_id="r", attempt=1, resume_from=None)
    assert envs(out)[1] == ours("r", 1, None)


def test_the_input_is_never_mutated():
    spec = custom_job()
    before = copy.deepcopy(spec)
    out = attempt_spec(
        "customJob", spec, run_id="r", attempt=2, resume_from=RESUME, strategy="STANDARD"
    )
    assert spec == before
    # Nor shared: changing the output cannot reach back into the input or across pools.
    envs(out)[0].append({"name": "X"})
    assert spec == before
    assert {"name": "X"} not in envs(out)[1]


def test_everything_else_is_kept_as_submitted():
    spec = custom_job()
    out = attempt_spec("customJob", spec, run_id="r", attempt=2, resume_from=RESUME)
    for pool in (*out["jobSpec"]["workerPoolSpecs"], *spec["jobSpec"]["workerPoolSpecs"]):
        (pool.get("containerSpec") or pool["pythonPackageSpec"]).pop("env", None)
    assert out == spec


@pytest.mark.parametrize(
    ("strategy", "scheduling"),
    [
        # Leaving FLEX_START drops its max wait, keeps everything else.
        ("STANDARD", {"strategy": "STANDARD", "timeout": "60s"}),
        ("SPOT", {"strategy": "SPOT", "timeout": "60s"}),
        # Staying, or no strategy asked: untouched.
        ("FLEX_START", {"strategy": "FLEX_START", "maxWaitDuration": "1800s", "timeout": "60s"}),
        (None, {"strategy": "FLEX_START", "maxWaitDuration": "1800s", "timeout": "60s"}),
    ],
)
def test_strategy_switch(strategy, scheduling):
    out = attempt_spec(
        "customJob", custom_job(), run_id="r", attempt=2, resume_from=None, strategy=strategy
    )
    assert out["jobSpec"]["scheduling"] == scheduling


def test_switching_between_other_strategies_keeps_the_rest():
    spec = custom_job()
    spec["jobSpec"]["scheduling"] = {"strategy": "SPOT", "timeout": "60s"}
    out = attempt_spec(
        "customJob", spec, run_id="r", attempt=2, resume_from=None, strategy="STANDARD"
    )
    assert out["jobSpec"]["scheduling"] == {"strategy": "STANDARD", "timeout": "60s"}


@pytest.mark.parametrize(
    ("event", "path"),
    [
        ("hpt_request", ("hyperparameterTuningJob", "trialJobSpec")),
        ("pipeline_request", ("trainingPipeline", "trainingTaskInputs")),
    ],
)
def test_tuning_jobs_and_pipelines_get_env_and_strategy_where_their_spec_lives(event, path):
    kind, spec_key = path
    spec = load(event)[kind]
    out = attempt_spec(kind, spec, run_id="r", attempt=4, resume_from=RESUME, strategy="SPOT")
    assert envs(out, (spec_key,)) == [ours("r", 4, RESUME)]
    assert out[spec_key]["scheduling"] == {"strategy": "SPOT"}
    assert "env" not in spec[spec_key]["workerPoolSpecs"][0]["containerSpec"]


def test_deployments_are_left_alone():
    spec = load("deploy_request")["deployModel"]
    out = attempt_spec("deployModel", spec, run_id="r", attempt=2, resume_from=RESUME)
    assert out == spec


# --- gpu_shape --------------------------------------------------------------------------


def pool(accelerator: str | None, count: Any, replicas: Any) -> dict[str, Any]:
    machine: dict[str, Any] = {"machineType": "m"}
    if accelerator:
        machine.update(acceleratorType=accelerator, acceleratorCount=count)
    return {"machineSpec": machine, "replicaCount": replicas, "containerSpec": {"imageUri": "x"}}


def custom(*pools: dict[str, Any]) -> dict[str, Any]:
    return {"jobSpec": {"workerPoolSpecs": list(pools)}}


@pytest.mark.parametrize(
    ("spec", "shape"),
    [
        (custom_job(), ("NVIDIA_TESLA_A100", 2)),  # 1 GPU x 2 replicas; the CPU pool adds none
        (custom(pool("NVIDIA_L4", 2, 3), pool("NVIDIA_L4", 1, 1)), ("NVIDIA_L4", 7)),
        (custom(pool(None, 0, 4)), (None, 0)),
        (custom(pool("NVIDIA_L4", "2", 1)), (None, 0)),  # not an int: not counted
        ({"jobSpec": {}}, (None, 0)),
    ],
)
def test_gpu_shape_of_custom_jobs(spec, shape):
    assert gpu_shape("customJob", spec) == shape


@pytest.mark.parametrize(("parallel", "gpus"), [(2, 2), (5, 5), (None, 1), (0, 1), ("3", 1)])
def test_tuning_jobs_hold_gpus_for_every_parallel_trial(parallel, gpus):
    spec = load("hpt_request")["hyperparameterTuningJob"]
    if parallel is None:
        del spec["parallelTrialCount"]
    else:
        spec["parallelTrialCount"] = parallel
    assert gpu_shape("hyperparameterTuningJob", spec) == ("NVIDIA_L4", gpus)


def test_gpu_shape_of_pipelines_and_deployments():
    assert gpu_shape("trainingPipeline", load("pipeline_request")["trainingPipeline"]) == (
        "NVIDIA_L4",
        1,
    )
    assert gpu_shape("deployModel", load("deploy_request")["deployModel"]) == (None, 0)


# --- usage ------------------------------------------------------------------------------

T0 = datetime(2026, 11, 30, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("submitted", "started", "ended", "gpus", "expected"),
    [
        (at(0), at(600), at(4200), 8, (600.0, 3600.0, 28800.0)),
        # Expired in the queue: never started, so nothing ran and nothing was billed.
        (at(0), None, at(1800), 8, (1800.0, 0.0, 0.0)),
        # Unknown submission time: only the running part can be measured.
        (None, at(600), at(4200), 2, (0.0, 3600.0, 7200.0)),
        # Clocks out of order never give negative time.
        (at(600), at(0), at(300), 1, (0.0, 300.0, 300.0)),
        (None, None, None, 4, (0.0, 0.0, 0.0)),
    ],
)
def test_usage(submitted, started, ended, gpus, expected):
    queued, running, gpu_seconds = expected
    assert usage(submitted, started, ended, gpus) == {
        "queuedSeconds": queued,
        "runningSeconds": running,
        "gpuSeconds": gpu_seconds,
    }


def test_seconds_between():
    assert seconds_between(at(0), at(90.5)) == 90.5
    assert seconds_between(at(90), at(0)) == 0.0
    assert seconds_between(None, at(0)) == 0.0
    assert seconds_between(at(0), None) == 0.0
