"""The demo: four requests on the embedded stack, their Firestore records printed as they change.

1. the seed example (one A100, FLEX_START, max wait 1800 s);
2. a 2-node gang job that needs the capacity the seed holds, so it waits, then runs;
3. a job larger than the whole simulated capacity, which waits until its max wait expires
   (its capacity retry budget is 0, so it then fails for good);
4. a Spot job that writes checkpoints, is preempted twice, resumes each time from its latest
   complete checkpoint, and finishes; its progress moves with each checkpoint upload, before
   any retry (handle_upload, no Vertex call);
5. a ``.jsonl`` of three requests uploaded to the bucket (one bad: a rejection with its line);
6. a nightly template (``concurrency: forbid``) fired twice in one slot and once in the next
   while the first run is still active: one job, and one SKIPPED slot.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from flexjobs_local.stack import LocalStack, StackConfig
from shared.domain.request.files import StoredObject

LOCATION = "us-central1"
A100_CAPACITY = 4
# Where the demo's jobs write outputs and checkpoints: a bucket apart from the request bucket.
OUTPUTS = StackConfig().checkpoint_bucket
SPOT_ID = "spot-preempted-twice"
PREEMPTIONS = 2
SPOT_STEPS = 1800
UPLOAD_NAME = "requests/demo-batch.jsonl"
NIGHTLY = "nightly-finetune-{slot}"
# Two nights ago and last night, at 02:00 UTC: a schedule time may not lie in the future.
_NIGHT = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=2)
NIGHTLY_FIRES = tuple(
    (_NIGHT + offset).strftime("%Y-%m-%dT%H:%M:%SZ")
    for offset in (timedelta(hours=2), timedelta(hours=2, seconds=40), timedelta(days=1, hours=2))
)
SLOT_1, SLOT_2 = (
    NIGHTLY.replace("{slot}", (_NIGHT + timedelta(days=n)).strftime("%Y%m%dT%H%M%SZ"))
    for n in (0, 1)
)

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
            {"name": "FLEXJOBS_SIM_RUN_SECONDS", "value": str(SPOT_STEPS)},
            {"name": "FLEXJOBS_SIM_CHECKPOINT_EVERY", "value": "120"},
        ],
    }
    job["scheduling"] = {"strategy": "SPOT"}
    job["baseOutputDirectory"] = {"outputUriPrefix": f"gs://{OUTPUTS}/{request_id}"}
    body["totalSteps"] = SPOT_STEPS  # its checkpoints' steps are simulated seconds of work
    return body


def _l4_job(request_id: str | None, seconds: int) -> dict[str, Any]:
    body = _job("x", machine="g2-standard-8", gpus=1, replicas=1, seconds=seconds, wait="3600s")
    body["customJob"]["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] = (
        "NVIDIA_L4"
    )
    body["customJob"]["displayName"] = request_id or "uploaded"
    if request_id is None:
        del body["requestId"]  # an uploaded line gets gcs:{bucket}/{name}#sha256:{digest}:{line}
    else:
        body["requestId"] = request_id
    return body


def upload_lines() -> str:
    """The uploaded ``.jsonl``: two good requests around a bad one (FLEX_START on a T4)."""
    bad = _l4_job(None, 300)
    bad["customJob"]["jobSpec"]["workerPoolSpecs"][0]["machineSpec"].update(
        machineType="n1-standard-8", acceleratorType="NVIDIA_TESLA_T4"
    )
    return "\n".join(json.dumps(b) for b in (_l4_job(None, 300), bad, _l4_job(None, 420))) + "\n"


def nightly() -> dict[str, Any]:
    """The Cloud Scheduler template: one run a day, none while the last is still active."""
    body = _l4_job(NIGHTLY, 900)
    body["customJob"]["displayName"] = "nightly-finetune"
    body["schedule"] = {"slotSeconds": 86400, "concurrency": "forbid"}
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


def _short(request_id: str) -> str:
    """An upload's requestId without its bucket and digest, to fit a line."""
    if not request_id.startswith("gcs:"):
        return request_id
    name, _, rest = request_id.partition("#")
    line = rest.rsplit(":", 1)[-1] if rest.count(":") > 1 else ""
    return f"gcs:…/{name.rsplit('/', 1)[-1]}:{line}"


def _row(record: dict[str, Any]) -> str:
    job = str(record.get("vertexJob") or "-").rsplit("/", 1)[-1]
    reason = str(record.get("reason") or "")
    reason = f"  ({reason[:90]}...)" if len(reason) > 90 else (f"  ({reason})" if reason else "")
    latest = record.get("latestCheckpoint") or {}
    progress = record.get("progress")
    share = f" ({progress:.0%})" if isinstance(progress, float) else ""
    resumed = f" checkpoint=step {latest.get('step')}{share}" if latest else ""
    gpu = f" gpuSeconds={record['gpuSeconds']:.0f}" if record.get("gpuSeconds") else ""
    return (
        f"{_short(record['requestId']):<33} {record['state']:<10} attempt={record.get('attempt')} "
        f"strategy={record.get('strategy'):<10} vertexJob=…{job[-6:]}{gpu}{resumed}{reason}"
    )


class Preempter:
    """Plays Compute Engine reclaiming Spot capacity: preempts the Spot job's running attempt
    once its record shows a checkpoint of that attempt (the upload reached handle_upload),
    ``PREEMPTIONS`` times."""

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
        recorded = ((record or {}).get("latestCheckpoint") or {}).get("step")
        if job.get("state") == "JOB_STATE_RUNNING" and recorded in fresh:
            self.stack.simulator.preempt(str(name))
            self.done.add(str(name))
            print(f"          >>> simulator: Spot capacity reclaimed, {SPOT_ID} preempted")


def run_demo(
    time_factor: float = 60.0, tick_seconds: float | None = None, limit: float = 180
) -> int:
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
        print(f"simulated capacity: {A100_CAPACITY} x NVIDIA_TESLA_A100 in {LOCATION}")
        print(f"status page (while the demo runs): {stack.status_page_url}\n")
        # As a user would: the requests go through ``flexjobs submit`` (validated, then
        # published to the requests topic), one message a line on its stdin.
        batch_lines = "".join(json.dumps(body) + "\n" for body in requests())
        submitted = flexjobs(stack, "submit", "--format", "jsonl", "-", stdin=batch_lines)
        for request_id in submitted.stdout.split():
            print(f"flexjobs submit: published {request_id}")
        uploaded = upload_lines()
        stack.upload(UPLOAD_NAME, uploaded, "application/jsonl")
        print(f"uploaded {stack.upload_uri}{UPLOAD_NAME.rpartition('/')[2]} (3 lines, 1 bad)")
        # Each line's requestId derives from the file's name, the line and its bytes.
        obj = StoredObject(stack.config.bucket, UPLOAD_NAME, "")
        lines = uploaded.split("\n")
        batch = [obj.request_id(lines[n - 1].encode(), n) for n in (1, 3)]
        for at in NIGHTLY_FIRES[:2]:
            stack.publish_request(nightly(), scheduleTime=at)
            print(f"Cloud Scheduler fired {NIGHTLY} at {at}")
        print()
        db = firestore.Client(project=config.project)
        progress_before_retry = _watch(stack, db, limit)
        ok = _report(stack, db, batch, progress_before_retry)
    print("stack stopped")
    return 0 if ok else 1


def flexjobs(stack: LocalStack, *args: str, stdin: str | None = None) -> Any:
    """Run the ``flexjobs`` command (installed beside this Python) against the stack."""
    command = [str(Path(sys.executable).with_name("flexjobs")), *args]
    env = {**os.environ, **stack.env}
    done = subprocess.run(
        command, input=stdin, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode not in {0, 1}:
        raise RuntimeError(f"flexjobs {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done


def _watch(stack: LocalStack, db: Any, limit: float) -> bool:
    """Print every record as it changes, play the Spot preemptions and fire the next nightly
    slot, until every record ended; returns whether the Spot job's progress was recorded from
    its checkpoint uploads before its first retry."""
    seen: dict[str, tuple[Any, ...]] = {}
    preempter = Preempter(stack)
    progress_before_retry = False
    next_slot_fired = False
    deadline = time.monotonic() + limit
    started = time.monotonic()
    while time.monotonic() < deadline:
        records = [d.to_dict() for d in db.collection("jobs").stream()]
        by_id = {r["requestId"]: r for r in records}
        spot = by_id.get(SPOT_ID) or {}
        preempter.poke(spot)
        if spot.get("attempt") == 1 and spot.get("latestCheckpoint"):
            progress_before_retry = True
        first = by_id.get(SLOT_1) or {}
        if not next_slot_fired and first.get("vertexJob"):
            # The next night's slot, while the first run is still queued or running.
            stack.publish_request(nightly(), scheduleTime=NIGHTLY_FIRES[2])
            print(f"          >>> Cloud Scheduler fired {NIGHTLY} at {NIGHTLY_FIRES[2]}")
            next_slot_fired = True
        for record in sorted(records, key=lambda r: r["requestId"]):
            checkpoint = (record.get("latestCheckpoint") or {}).get("step")
            key = (record["state"], record.get("attempt"), record.get("vertexJob"), checkpoint)
            if seen.get(record["requestId"]) != key:
                seen[record["requestId"]] = key
                print(f"[{time.monotonic() - started:6.1f}s] {_row(record)}")
        ended = {"SUCCEEDED", "FAILED", "SKIPPED", "CANCELLED"}
        if len(records) == 8 and all(r["state"] in ended for r in records):
            break
        time.sleep(0.5)
    return progress_before_retry


def _report(stack: LocalStack, db: Any, batch: list[str], progress_before_retry: bool) -> bool:
    """Print the outcome; True when it is what the demo promises."""
    final = {
        r["requestId"]: r["state"] for r in (d.to_dict() for d in db.collection("jobs").stream())
    }
    print("\nfinal:", {_short(k): v for k, v in final.items()})
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
        f"est. ${cost.get('costUsd')} vs ${cost.get('onDemandUsd')} on demand; "
        f"progress recorded from uploads before the first retry: {progress_before_retry}"
    )
    print(f"  its page: {stack.status_page_url}jobs/{SPOT_ID}")
    print(f"\n$ flexjobs status {SPOT_ID}")
    print(flexjobs(stack, "status", SPOT_ID).stdout)
    rejections = [d.to_dict() for d in db.collection("rejections").stream()]
    for rejection in rejections:
        error = rejection["errors"][0]
        print(
            f"  rejected {_short(rejection['requestId'])} (source={rejection.get('source')}, "
            f"line {rejection.get('line')}): {error['path']}: {error['message'][:80]}"
        )
    skipped = final.get(SLOT_2) == "SKIPPED"
    reason = (db.collection("jobs").document(SLOT_2).get().to_dict() or {}).get("reason")
    print(f"  {SLOT_2}: {final.get(SLOT_2)} (reason: {reason})")
    expected = {
        "seed-1": "SUCCEEDED",
        "gang-2-nodes": "SUCCEEDED",
        "too-big-to-fit": "FAILED",
        SPOT_ID: "SUCCEEDED",
        batch[0]: "SUCCEEDED",
        batch[1]: "SUCCEEDED",
        SLOT_1: "SUCCEEDED",
        SLOT_2: "SKIPPED",
    }
    ok = (
        final == expected
        and len(calls) == 4 + PREEMPTIONS + 2 + 1
        and spot.get("attempt") == 3
        and progress_before_retry
        and skipped
        and reason == SLOT_1
        and [(r.get("source"), r.get("line")) for r in rejections] == [("gcs", 2)]
    )
    print("demo OK" if ok else f"demo did not reach the expected states: {expected}")
    return ok
