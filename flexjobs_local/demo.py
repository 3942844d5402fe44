"""The demo: four requests on the embedded stack, their Firestore records printed as they change.

1. the seed example (one A100, FLEX_START, max wait 1800 s);
2. a 2-node gang job that needs the capacity the seed holds, so it waits, then runs;
3. a job larger than the whole simulated capacity, which waits until its max wait expires
   (its capacity retry budget is 0, so it then fails for good);
4. a Spot job that writes checkpoints, is preempted twice, resumes each time from its latest
   complete checkpoint, and finishes.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from flexjobs_local.stack import LocalStack, StackConfig

LOCATION = "us-central1"
A100_CAPACITY = 4
BUCKET = "flexjobs-local"
SPOT_ID = "spot-preempted-twice"
PREEMPTIONS = 2

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


def _spot_job(request_id: str) -> dict[str, Any]:
    body = _job(request_id, machine="g2-standard-8", gpus=1, replicas=1, seconds=0, wait="0s")
    job = body["customJob"]["jobSpec"]
    job["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] = "NVIDIA_L4"
    job["workerPoolSpecs"][0]["containerSpec"] = {
        "imageUri": "python:3.10",
        "command": ["python", "train.py"],
        "env": [
            {"name": "FLEXJOBS_SIM_RUN_SECONDS", "value": "1800"},
            {"name": "FLEXJOBS_SIM_CHECKPOINT_EVERY", "value": "120"},
        ],
    }
    job["scheduling"] = {"strategy": "SPOT"}
    job["baseOutputDirectory"] = {"outputUriPrefix": f"gs://{BUCKET}/{request_id}"}
    return body


def requests() -> list[dict[str, Any]]:
    """The demo's four requests."""
    too_big = _job(
        "too-big-to-fit", machine="a2-highgpu-8g", gpus=8, replicas=2, seconds=600, wait="1200s"
    )
    too_big["retryPolicy"] = {"capacity": 0}
    return [
        SEED,
        _job(
            "gang-2-nodes", machine="a2-highgpu-2g", gpus=2, replicas=2, seconds=600, wait="3600s"
        ),
        too_big,
        _spot_job(SPOT_ID),
    ]


def _row(record: dict[str, Any]) -> str:
    job = str(record.get("vertexJob") or "-").rsplit("/", 1)[-1]
    reason = str(record.get("reason") or "")
    reason = f"  ({reason[:90]}...)" if len(reason) > 90 else (f"  ({reason})" if reason else "")
    checkpoint = (record.get("latestCheckpoint") or {}).get("uri")
    resumed = f" resumeFrom={checkpoint}" if checkpoint else ""
    gpu = f" gpuSeconds={record['gpuSeconds']:.0f}" if record.get("gpuSeconds") else ""
    return (
        f"{record['requestId']:<21} {record['state']:<10} attempt={record.get('attempt')} "
        f"strategy={record.get('strategy'):<10} vertexJob=…{job[-6:]}{gpu}{resumed}{reason}"
    )


class Preempter:
    """Plays Compute Engine reclaiming Spot capacity: preempts the Spot job's running attempt
    once it has written a checkpoint of its own, ``PREEMPTIONS`` times."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self.done: set[str] = set()

    def poke(self, record: dict[str, Any] | None) -> None:
        name = (record or {}).get("vertexJob")
        if not name or name in self.done or len(self.done) >= PREEMPTIONS:
            return
        job = self.stack.simulator.job(str(name))
        sim = job.get("_sim", {})
        fresh = [s for s in sim.get("checkpointSteps", []) if s > (sim.get("resumedStep") or 0)]
        if job.get("state") == "JOB_STATE_RUNNING" and fresh:
            self.stack.simulator.preempt(str(name))
            self.done.add(str(name))
            print(f"          >>> simulator: Spot capacity reclaimed, {SPOT_ID} preempted")


def run_demo(time_factor: float = 60.0, tick_seconds: float | None = None, limit: float = 180):
    """Run the demo; returns 0 when every record reached the state it should."""
    # A short backoff so the demo's retries happen while you watch.
    config = StackConfig(
        time_factor=time_factor,
        tick_seconds=tick_seconds or 10.0,
        function_env={"FLEXJOBS_BACKOFF_BASE_SECONDS": "2", "FLEXJOBS_HINT_COALESCE_SECONDS": "2"},
    )
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
        preempter = Preempter(stack)
        deadline = time.monotonic() + limit
        started = time.monotonic()
        while time.monotonic() < deadline:
            records = [d.to_dict() for d in db.collection("jobs").stream()]
            preempter.poke(next((r for r in records if r["requestId"] == SPOT_ID), None))
            for record in sorted(records, key=lambda r: r["requestId"]):
                key = (record["state"], record.get("attempt"), record.get("vertexJob"))
                if seen.get(record["requestId"]) != key:
                    seen[record["requestId"]] = key
                    print(f"[{time.monotonic() - started:6.1f}s] {_row(record)}")
            if len(records) == 4 and all(r["state"] in {"SUCCEEDED", "FAILED"} for r in records):
                break
            time.sleep(0.5)
        final = {
            r["requestId"]: r["state"]
            for r in (d.to_dict() for d in db.collection("jobs").stream())
        }
        print("\nfinal:", final)
        calls = stack.simulator.calls(method="CreateCustomJob")
        print(f"CreateCustomJob calls received by the simulator: {len(calls)}")
        spot = db.collection("jobs").document(SPOT_ID).get().to_dict() or {}
        for attempt in db.collection("jobs").document(SPOT_ID).collection("attempts").stream():
            a = attempt.to_dict()
            print(
                f"  {SPOT_ID} attempt {attempt.id}: {a.get('state'):<9} "
                f"resumedFrom={a.get('resumedFrom') or '-'} "
                f"gpuSeconds={a.get('gpuSeconds', 0):.0f} "
                f"workLost={a.get('workLostSeconds', 0):.0f}s"
            )
        cost = spot.get("cost") or {}
        print(
            f"  {SPOT_ID}: {spot.get('gpuSeconds', 0):.0f} GPU-seconds, "
            f"est. ${cost.get('costUsd')} vs ${cost.get('onDemandUsd')} on demand"
        )
        expected = {
            "seed-1": "SUCCEEDED",
            "gang-2-nodes": "SUCCEEDED",
            "too-big-to-fit": "FAILED",
            SPOT_ID: "SUCCEEDED",
        }
        ok = final == expected and len(calls) == 4 + PREEMPTIONS and spot.get("attempt") == 3
        print("demo OK" if ok else f"demo did not reach the expected states: {expected}")
    print("stack stopped")
    return 0 if ok else 1
