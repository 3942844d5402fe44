"""The demo: three requests on the embedded stack, their Firestore records printed as they change.

1. the seed example (one A100, FLEX_START, max wait 1800 s);
2. a 2-node gang job that needs the capacity the seed holds, so it waits, then runs;
3. a job larger than the whole simulated capacity, which waits until its max wait expires.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from flexjobs_local.stack import LocalStack, StackConfig

LOCATION = "us-central1"
A100_CAPACITY = 4

SEED: dict[str, Any] = {
    "requestId": "seed-1",
    "customJob": {
        "displayName": "MyDwsJob",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {
                        "machineType": "a2-highgpu-1g",
                        "acceleratorType": "NVIDIA_TESLA_A100",
                        "acceleratorCount": 1,
                    },
                    "replicaCount": 1,
                    "diskSpec": {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100},
                    "containerSpec": {
                        "imageUri": "python:3.10",
                        "command": ["sleep"],
                        "args": ["100"],
                    },
                }
            ],
            "scheduling": {"maxWaitDuration": "1800s", "strategy": "FLEX_START"},
        },
    },
}


def _job(
    request_id: str, *, machine: str, gpus: int, replicas: int, seconds: int, wait: str
) -> dict[str, Any]:
    body = copy.deepcopy(SEED)
    body["requestId"] = request_id
    body["customJob"]["displayName"] = request_id
    pool = body["customJob"]["jobSpec"]["workerPoolSpecs"][0]
    pool["machineSpec"].update(machineType=machine, acceleratorCount=gpus)
    pool["replicaCount"] = replicas
    pool["containerSpec"]["args"] = [str(seconds)]
    body["customJob"]["jobSpec"]["scheduling"]["maxWaitDuration"] = wait
    return body


def requests() -> list[dict[str, Any]]:
    """The demo's three requests."""
    return [
        SEED,
        _job(
            "gang-2-nodes", machine="a2-highgpu-2g", gpus=2, replicas=2, seconds=600, wait="3600s"
        ),
        _job(
            "too-big-to-fit", machine="a2-highgpu-8g", gpus=8, replicas=2, seconds=600, wait="1200s"
        ),
    ]


def _row(record: dict[str, Any]) -> str:
    job = str(record.get("vertexJob") or "-").rsplit("/", 1)[-1]
    reason = str(record.get("reason") or "")
    reason = f"  ({reason[:90]}...)" if len(reason) > 90 else (f"  ({reason})" if reason else "")
    return (
        f"{record['requestId']:<16} {record['state']:<10} attempt={record.get('attempt')} "
        f"strategy={record.get('strategy')} vertexJob={job}{reason}"
    )


def run_demo(time_factor: float = 60.0, tick_seconds: float | None = None, limit: float = 180):
    """Run the demo; returns 0 when every record reached the state it should."""
    config = StackConfig(time_factor=time_factor, tick_seconds=tick_seconds or 2.0)
    print(f"starting the embedded stack (1 wall second = {time_factor:g} simulated seconds)...")
    with LocalStack(config) as stack:
        stack.apply_env()
        from google.cloud import firestore

        stack.simulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", A100_CAPACITY)
        print(f"simulated capacity: {A100_CAPACITY} x NVIDIA_TESLA_A100 in {LOCATION}\n")
        for body in requests():
            stack.publish_request(body)
            print(f"published {body['requestId']}")
        print()
        db = firestore.Client(project=config.project)
        seen: dict[str, tuple[Any, ...]] = {}
        deadline = time.monotonic() + limit
        started = time.monotonic()
        while time.monotonic() < deadline:
            records = [d.to_dict() for d in db.collection("jobs").stream()]
            for record in sorted(records, key=lambda r: r["requestId"]):
                key = (record["state"], record.get("attempt"), record.get("vertexJob"))
                if seen.get(record["requestId"]) != key:
                    seen[record["requestId"]] = key
                    print(f"[{time.monotonic() - started:6.1f}s] {_row(record)}")
            if len(records) == 3 and all(r["state"] in {"SUCCEEDED", "FAILED"} for r in records):
                break
            time.sleep(0.5)
        final = {
            r["requestId"]: r["state"]
            for r in (d.to_dict() for d in db.collection("jobs").stream())
        }
        print("\nfinal:", final)
        calls = stack.simulator.calls(method="CreateCustomJob")
        print(f"CreateCustomJob calls received by the simulator: {len(calls)}")
        expected = {"seed-1": "SUCCEEDED", "gang-2-nodes": "SUCCEEDED", "too-big-to-fit": "FAILED"}
        ok = final == expected and len(calls) == 3
        print("demo OK" if ok else f"demo did not reach the expected states: {expected}")
    print("stack stopped")
    return 0 if ok else 1
