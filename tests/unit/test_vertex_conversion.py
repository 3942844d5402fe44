"""to_vertex_job reads the protobuf message under the proto-plus one (it is on every create,
read and listed job): it must give exactly what reading each field through proto-plus gave,
for every kind, set or unset, including the odd truth of an empty spec."""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud import aiplatform_v1

from shared.adapters.vertex.jobs import (
    TRAINING_KINDS,
    _spec_attribute,
    to_vertex_job,
)
from shared.domain.model.strategies import runs_as
from shared.domain.model.vertex_jobs import VertexJob
from shared.domain.request.message import parse_duration


def by_proto_plus(job: Any) -> VertexJob:
    """The conversion as it read every field through proto-plus (the reference)."""
    error = getattr(job, "error", None)
    code = int(error.code) if error is not None and error.code else None
    typed: Any = None
    for kind in TRAINING_KINDS.values():
        if not kind.untyped_spec:
            typed = typed or _spec_attribute(job, kind)
    strategy: str | None = None
    wait: float | None = None
    if typed is not None:
        scheduling = typed.scheduling
        strategy = runs_as(scheduling.strategy.name)
        if "max_wait_duration" in scheduling:
            wait = scheduling.max_wait_duration.total_seconds()
    else:
        inputs = next(
            (
                spec
                for kind in TRAINING_KINDS.values()
                if kind.untyped_spec and (spec := _spec_attribute(job, kind)) is not None
            ),
            None,
        )
        found = inputs.get("scheduling") if inputs is not None else None
        if found:
            raw = found.get("maxWaitDuration")
            strategy = found.get("strategy") if isinstance(found.get("strategy"), str) else None
            wait = parse_duration(raw) if isinstance(raw, str) else None
    return VertexJob(
        name=job.name,
        state=job.state.name,
        labels=dict(job.labels),
        create_time=job.create_time,
        start_time=job.start_time,
        end_time=job.end_time,
        error_code=code,
        error_message=(error.message or None) if error is not None and code else None,
        strategy=strategy,
        max_wait_seconds=wait,
    )


POOL = {
    "machineSpec": {"machineType": "g2-standard-4", "acceleratorType": "NVIDIA_L4"},
    "replicaCount": "1",
    "containerSpec": {"imageUri": "python:3.10"},
}
TIMES = {"createTime": "2026-12-05T08:00:00.123456789Z", "startTime": "2026-12-05T08:01:00Z"}
ERROR = {"error": {"code": 13, "message": "preempted"}}

CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("CustomJob", "JOB_STATE_QUEUED", {"jobSpec": {"workerPoolSpecs": [POOL]}}),
    (
        "CustomJob",
        "JOB_STATE_RUNNING",
        {
            **TIMES,
            "labels": {"flexjobs-request": "r", "flexjobs-attempt": "2"},
            "jobSpec": {
                "workerPoolSpecs": [POOL],
                "scheduling": {"strategy": "FLEX_START", "maxWaitDuration": "1800.0000015s"},
            },
        },
    ),
    ("CustomJob", "JOB_STATE_FAILED", {**TIMES, **ERROR, "endTime": "2026-12-05T09:00:00Z"}),
    # No spec, an empty one, one holding only a message (false to proto-plus), only zeros.
    ("CustomJob", "JOB_STATE_PENDING", {}),
    ("CustomJob", "JOB_STATE_PENDING", {"jobSpec": {}}),
    ("CustomJob", "JOB_STATE_PENDING", {"jobSpec": {"scheduling": {}}}),
    ("CustomJob", "JOB_STATE_PENDING", {"jobSpec": {"scheduling": {"timeout": "0s"}}}),
    ("CustomJob", "JOB_STATE_PENDING", {"jobSpec": {"scheduling": {"strategy": "SPOT"}}}),
    ("CustomJob", "JOB_STATE_PENDING", {"jobSpec": {"scheduling": {"timeout": "60s"}}}),
    ("CustomJob", "JOB_STATE_PENDING", {"jobSpec": {"enableWebAccess": True}}),
    ("HyperparameterTuningJob", "JOB_STATE_QUEUED", {}),
    ("HyperparameterTuningJob", "JOB_STATE_QUEUED", {"trialJobSpec": {}}),
    (
        "HyperparameterTuningJob",
        "JOB_STATE_SUCCEEDED",
        {
            **TIMES,
            "trialJobSpec": {"workerPoolSpecs": [POOL], "scheduling": {"strategy": "SPOT"}},
        },
    ),
    ("TrainingPipeline", "PIPELINE_STATE_RUNNING", {}),
    (
        "TrainingPipeline",
        "PIPELINE_STATE_RUNNING",
        {
            **ERROR,
            "trainingTaskInputs": {
                "workerPoolSpecs": [],
                "scheduling": {"strategy": "FLEX_START", "maxWaitDuration": "600s"},
            },
        },
    ),
]


@pytest.mark.parametrize(("message", "state", "fields"), CASES)
def test_the_conversion_is_what_proto_plus_reads(
    message: str, state: str, fields: dict[str, Any]
) -> None:
    import json

    body = {"name": f"projects/p/locations/us-central1/x/{len(fields)}", "state": state, **fields}
    job = getattr(aiplatform_v1, message).from_json(json.dumps(body))
    converted = to_vertex_job(job)
    assert converted == by_proto_plus(job)
    assert [type(t) for t in (converted.create_time, converted.start_time, converted.end_time)] == [
        type(t) for t in (job.create_time, job.start_time, job.end_time)
    ]
