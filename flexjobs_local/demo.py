"""The demo: the whole product on one embedded stack, its Firestore records printed as they
change, every time on one clock (the Vertex AI simulator's, 60 times the wall clock's).

1. the seed example (one A100, FLEX_START, max wait 1800 s);
2. a 2-node gang job that needs all four A100s, so it and the seed never run at once (one
   waits for the other); the gang's two nodes start together;
3. a job larger than the whole simulated capacity, which waits until its max wait expires
   (its capacity retry budget is 0, so it then fails for good);
4. a Spot job that writes checkpoints, is preempted twice, resumes each time from its latest
   complete checkpoint, and finishes; its progress moves with each checkpoint upload, before
   any retry (handle_upload, no Vertex call);
5. a ``.jsonl`` of three requests uploaded to the bucket (one bad: a rejection with its line);
6. a nightly template (``concurrency: forbid``) fired twice in one slot and once in the next
   while the first run is still active: one job, and one SKIPPED slot;
7. a Spot deployment (``deployModel``, two replicas) whose Spot serving capacity the
   simulator takes away: after the grace period it is HEDGED (an on-demand fallback takes the
   traffic); capacity comes back, and after the hold period it is RESTORED (traffic back to
   Spot, the fallback undeployed);
8. AUTO against a deadline: the same 40 minutes of work twice, AUTO choosing each attempt's
   capacity. Due in 3 hours, it runs on Spot; its region's capacity then goes while it runs,
   and every retry is decided again on what is left of the slack (it may move to its other
   allowed region). Due in 1 hour, the slack covers neither a preemption nor a wait, so it
   runs on-demand from the start. Both end before their deadlines;
9. two admission queues sharing a quota of 8 GPUs (a cohort, FLEXJOBS_QUEUES): team-a fills
   it, borrowing team-b's idle share; team-b's requests wait, then are admitted as GPUs come
   back, ahead of team-a's last; never more GPUs in use than the quota.

The stack runs with ``StackConfig.sim_clock``: the functions stamp records with the
simulator's time, and every time printed here is read from it, so nothing shows as ended
after the "now" it is printed at (the demo checks that too). A part that does not show what
it claims fails the demo (exit 1, the reason printed); success ends with ``demo OK``.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from flexjobs_local.simclock import SimulatedClock
from flexjobs_local.stack import LocalStack, StackConfig
from shared.domain.request.files import StoredObject
from shared.status.display import duration

LOCATION = "us-central1"
A100_CAPACITY = 4
# Where the demo's jobs write outputs and checkpoints: a bucket apart from the request bucket.
OUTPUTS = StackConfig().checkpoint_bucket
SPOT_ID = "spot-preempted-twice"
PREEMPTIONS = 2
SPOT_STEPS = 1800
UPLOAD_NAME = "requests/demo-batch.jsonl"
NIGHTLY = "nightly-finetune-{slot}"
ENDED = frozenset({"SUCCEEDED", "FAILED", "SKIPPED", "CANCELLED"})

# 7. The Spot deployment: two L4 replicas on an endpoint of its own.
DEPLOY_ID = "serve-spot-l4"
ENDPOINT_ID = "4242"
REPLICAS = 2
# Simulated seconds Spot serving capacity takes to place the nodes again once it is back.
PLACEMENT_SECONDS = 120.0

# 8. AUTO: 40 minutes of work on one A100 80GB (where Spot is cheaper than FLEX_START), twice:
# due in 3 hours (in us-central1, or us-east1), and due in 1 hour (in us-east1).
AUTO_RELAXED = "auto-due-in-3h"
AUTO_TIGHT = "auto-due-in-1h"
AUTO_DUE = {AUTO_RELAXED: timedelta(hours=3), AUTO_TIGHT: timedelta(hours=1)}
AUTO_ACCELERATOR = "NVIDIA_A100_80GB"
AUTO_OTHER_REGION = "us-east1"
AUTO_WORK_SECONDS = 2400
AUTO_CHECKPOINT_SECONDS = 300
AUTO_RESTART_SECONDS = 120

# 9. Two queues of one cohort, 4 GPUs each, under a project quota of 8 (the simulator refuses
# a create past it, as Vertex would). The demo's other requests go to ``default``, whose
# quotas are generous: declared queues leave a request naming none no quota at all.
QUEUE_ACCELERATOR = "NVIDIA_H100_80GB"
QUEUE_QUOTA = 8
QUEUE_GPUS = 4
QUEUE_RUN_SECONDS = 900
TEAM_A = ("team-a-1", "team-a-2", "team-a-3")
TEAM_B = ("team-b-1", "team-b-2")


def _quota(region: str, accelerator: str, pool: str, **amount: int) -> str:
    """One quota of the queue file, as a YAML flow mapping."""
    ((key, value),) = amount.items()
    return f"{{region: {region}, acceleratorType: {accelerator}, pool: {pool}, {key}: {value}}}"


_TEAM_QUOTA = _quota(LOCATION, QUEUE_ACCELERATOR, "PREEMPTIBLE", nominal=QUEUE_GPUS)
QUEUES = (
    "\n".join(
        [
            "projectQuota:",
            f"  - {_quota(LOCATION, QUEUE_ACCELERATOR, 'PREEMPTIBLE', limit=QUEUE_QUOTA)}",
            "queues:",
            *(
                f"  - {{name: {team}, cohort: research, quotas: [{_TEAM_QUOTA}]}}"
                for team in ("team-a", "team-b")
            ),
            "  - name: default",
            "    quotas:",
            f"      - {_quota(LOCATION, 'NVIDIA_TESLA_A100', 'PREEMPTIBLE', nominal=32)}",
            f"      - {_quota(LOCATION, 'NVIDIA_L4', 'PREEMPTIBLE', nominal=32)}",
            *(
                f"      - {_quota(region, AUTO_ACCELERATOR, pool, nominal=8)}"
                for region in (LOCATION, AUTO_OTHER_REGION)
                for pool in ("PREEMPTIBLE", "ON_DEMAND")
            ),
        ]
    )
    + "\n"
)

# The product's settings keep their defaults, in simulated seconds (a 60 s retry backoff, a
# 300 s serving grace period, a 1800 s hold, AUTO's 10-minute margin); those that bound
# wall-clock waits are scaled by the stack (StackConfig.sim_clock).
TICK_SECONDS = 2.0  # wall seconds between scheduler ticks: two simulated minutes
# Every part ends within about an hour of simulated time; the watch gives up after two.
WATCH_LIMIT = timedelta(hours=2)

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


def _training(request_id: str, run_seconds: int, checkpoint_every: int | None) -> dict[str, Any]:
    """The container of a job that trains ``run_seconds`` simulated seconds (a step each),
    writing a checkpoint every ``checkpoint_every`` to its own folder of the outputs bucket."""
    env = [{"name": "FLEXJOBS_SIM_RUN_SECONDS", "value": str(run_seconds)}]
    if checkpoint_every:
        env.append({"name": "FLEXJOBS_SIM_CHECKPOINT_EVERY", "value": str(checkpoint_every)})
    return {"imageUri": "python:3.10", "command": ["python", "train.py"], "env": env}


def _spot_job(request_id: str) -> dict[str, Any]:
    body = _job(request_id, machine="g2-standard-8", gpus=1, replicas=1, seconds=0, wait="0s")
    job = body["customJob"]["jobSpec"]
    job["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] = "NVIDIA_L4"
    job["workerPoolSpecs"][0]["containerSpec"] = _training(request_id, SPOT_STEPS, 120)
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


def deploy_request(endpoint: str) -> dict[str, Any]:
    """7: a deployModel request: two Spot L4 replicas, all the endpoint's traffic."""
    return {
        "requestId": DEPLOY_ID,
        "deployModel": {
            "endpoint": endpoint,
            "deployedModel": {
                "model": endpoint.replace(f"endpoints/{ENDPOINT_ID}", "models/456"),
                "displayName": "served",
                "dedicatedResources": {
                    "machineSpec": {
                        "machineType": "g2-standard-8",
                        "acceleratorType": "NVIDIA_L4",
                        "acceleratorCount": 1,
                    },
                    "spot": True,
                    "minReplicaCount": REPLICAS,
                    "maxReplicaCount": REPLICAS,
                },
            },
            "trafficSplit": {"0": 100},
        },
    }


def auto_request(request_id: str, deadline: datetime) -> dict[str, Any]:
    """8: 40 minutes of training on an A100 80GB (a step a second, a checkpoint every 5
    minutes), due at ``deadline``, AUTO choosing each attempt's capacity: the relaxed one in
    us-central1 or us-east1, the tight one in us-east1."""
    body = _job(request_id, machine="a2-ultragpu-1g", gpus=1, replicas=1, seconds=0, wait="0s")
    job = body["customJob"]["jobSpec"]
    job["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] = AUTO_ACCELERATOR
    job["workerPoolSpecs"][0]["containerSpec"] = _training(
        request_id, AUTO_WORK_SECONDS, AUTO_CHECKPOINT_SECONDS
    )
    job["scheduling"] = {"strategy": "AUTO"}
    job["baseOutputDirectory"] = {"outputUriPrefix": f"gs://{OUTPUTS}/{request_id}"}
    body.update(
        deadline=_rfc3339(deadline),
        estimatedRunSeconds=AUTO_WORK_SECONDS,
        checkpointIntervalSeconds=AUTO_CHECKPOINT_SECONDS,
        restartOverheadSeconds=AUTO_RESTART_SECONDS,
        totalSteps=AUTO_WORK_SECONDS,
    )
    if request_id == AUTO_RELAXED:
        body.update(location=LOCATION, regions=[AUTO_OTHER_REGION], checkpointSizeGb=1)
    else:
        body.update(location=AUTO_OTHER_REGION)
    return body


def queue_request(request_id: str) -> dict[str, Any]:
    """9: a FLEX_START job of 4 H100 GPUs, 15 simulated minutes long, in its team's queue."""
    body = _job(
        request_id, machine="a3-highgpu-4g", gpus=QUEUE_GPUS, replicas=1, seconds=0, wait="3600s"
    )
    pool = body["customJob"]["jobSpec"]["workerPoolSpecs"][0]
    pool["machineSpec"]["acceleratorType"] = QUEUE_ACCELERATOR
    pool["containerSpec"] = _training(request_id, QUEUE_RUN_SECONDS, None)
    body["queue"] = request_id.rsplit("-", 1)[0]
    return body


def requests() -> list[dict[str, Any]]:
    """The training requests submitted at the start (1-4)."""
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


def demo_config(time_factor: float = 60.0, tick_seconds: float | None = None) -> StackConfig:
    """The stack the demo runs on: the simulator's clock for everything, the queue file."""
    return StackConfig(
        time_factor=time_factor,
        tick_seconds=tick_seconds or TICK_SECONDS,
        sim_clock=True,
        function_env={"FLEXJOBS_QUEUES": QUEUES},
    )


def _rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hms(at: datetime | None) -> str:
    return at.astimezone(UTC).strftime("%H:%M:%S") if at else "-"


def _time(value: Any) -> datetime | None:
    """A record's time (a Firestore timestamp, or RFC 3339 text as the serving state keeps)."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else None
    return None


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
    where = record.get("location")
    place = f" location={where}" if where and where != LOCATION else ""
    admission = record.get("admission") or {}
    queued = (
        f" queue={admission.get('queue')}:{admission.get('stage')}"
        if admission.get("queue") not in (None, "default")
        else ""
    )
    slack = (record.get("capacity") or {}).get("slackSeconds")
    slack_text = f" slack={duration(slack)}" if isinstance(slack, int | float) else ""
    return (
        f"{_short(record['requestId']):<33} {record['state']:<10} attempt={record.get('attempt')} "
        f"strategy={record.get('strategy'):<10} vertexJob=…{job[-6:]}{place}{queued}{slack_text}"
        f"{gpu}{resumed}{reason}"
    )


def _serving_row(record: Mapping[str, Any]) -> str:
    serving = record.get("serving") or {}
    last = serving.get("last") or {}
    told = ",".join(str(n.get("state")) for n in record.get("notified") or []) or "-"
    return (
        f"{DEPLOY_ID:<33} {record.get('state'):<10} phase={serving.get('phase'):<10} "
        f"spot={last.get('spot', '-')} onDemand={last.get('onDemand', '-')} "
        f"required={last.get('required', '-')} notified={told}"
    )


class Printer:
    """Prints lines stamped with the simulator's time: the one clock of the demo."""

    def __init__(self, clock: SimulatedClock) -> None:
        self.clock = clock

    def line(self, text: str) -> None:
        print(f"[{_hms(self.clock.now())}] {text}", flush=True)

    def event(self, text: str) -> None:
        print(f"[{_hms(self.clock.now())}]   >>> {text}", flush=True)


class Preempter:
    """Plays Compute Engine reclaiming Spot capacity: preempts the Spot job's running attempt
    once its record shows a checkpoint of that attempt (the upload reached handle_upload),
    ``PREEMPTIONS`` times."""

    def __init__(self, stack: LocalStack, out: Printer) -> None:
        self.stack = stack
        self.out = out
        self.done: set[str] = set()

    def poke(self, record: dict[str, Any] | None) -> None:
        name = (record or {}).get("vertexJob")
        if not name or name in self.done or len(self.done) >= PREEMPTIONS:
            return
        if _fresh_checkpoint(self.stack, str(name), record or {}):
            self.stack.simulator.preempt(str(name))
            self.done.add(str(name))
            self.out.event(f"simulator: Spot capacity reclaimed, {SPOT_ID} preempted")


def _fresh_checkpoint(stack: LocalStack, name: str, record: Mapping[str, Any]) -> bool:
    """Whether job ``name`` runs and its record shows a checkpoint that attempt wrote."""
    job = stack.simulator.job(name)
    sim = job.get("_sim", {})
    fresh = [s for s in sim.get("checkpointSteps", []) if s > (sim.get("resumedStep") or 0)]
    recorded = (record.get("latestCheckpoint") or {}).get("step")
    return job.get("state") == "JOB_STATE_RUNNING" and recorded in fresh


class ServingDriver:
    """7: takes the Spot serving capacity of the deployment's location away once it serves,
    and gives it back once the on-demand fallback serves every replica."""

    def __init__(self, stack: LocalStack, out: Printer) -> None:
        self.stack = stack
        self.out = out
        self.taken = False
        self.returned = False
        self.phases: list[str] = []

    def poke(self, record: Mapping[str, Any] | None) -> None:
        serving = (record or {}).get("serving") or {}
        phase = serving.get("phase")
        if phase and (not self.phases or self.phases[-1] != phase):
            self.phases.append(str(phase))
        last = serving.get("last") or {}
        if not self.taken and phase == "SERVING" and last.get("spot") == REPLICAS:
            self.stack.simulator.set_spot_serving(LOCATION, available=False)
            self.taken = True
            self.out.event(f"simulator: Spot serving capacity gone in {LOCATION}, nodes reclaimed")
        elif (
            self.taken
            and not self.returned
            and phase == "HEDGED"
            and last.get("onDemand") == REPLICAS
        ):
            self.stack.simulator.set_spot_serving(
                LOCATION, available=True, placement_seconds=PLACEMENT_SECONDS
            )
            self.returned = True
            self.out.event(f"simulator: Spot serving capacity back in {LOCATION}")

    @staticmethod
    def done(record: Mapping[str, Any] | None) -> bool:
        told = [n.get("state") for n in (record or {}).get("notified") or []]
        return "RESTORED" in told


class AutoDriver:
    """8: once the relaxed AUTO job's first attempt runs on Spot and has recorded a checkpoint
    of its own, its region's A100 80GB pool empties and the attempt is preempted; the pool
    comes back once the job has left the region or a retry there has been given up."""

    def __init__(self, stack: LocalStack, out: Printer) -> None:
        self.stack = stack
        self.out = out
        self.struck = False
        self.restored = False

    def poke(self, record: Mapping[str, Any] | None) -> None:
        record = record or {}
        name, attempt = record.get("vertexJob"), record.get("attempt") or 0
        if not self.struck and name and attempt == 1 and record.get("strategy") == "SPOT":
            if _fresh_checkpoint(self.stack, str(name), record):
                self.stack.simulator.set_capacity(LOCATION, AUTO_ACCELERATOR, 0)
                self.stack.simulator.preempt(str(name))
                self.struck = True
                self.out.event(
                    f"simulator: {LOCATION} runs out of {AUTO_ACCELERATOR},"
                    f" {AUTO_RELAXED} preempted"
                )
        elif self.struck and not self.restored:
            # Given up there, gone elsewhere, or decided on capacity that does not wait for it.
            elsewhere = record.get("location") not in (None, LOCATION)
            waits = record.get("strategy") != "SPOT"
            if attempt >= 3 or (attempt == 2 and (elsewhere or waits)):
                gpus = self.stack.config.default_capacity
                self.stack.simulator.set_capacity(LOCATION, AUTO_ACCELERATOR, gpus)
                self.restored = True
                self.out.event(f"simulator: {AUTO_ACCELERATOR} capacity is back in {LOCATION}")


@dataclass
class QueueDriver:
    """9: submits team-b's requests once team-a's fill the quota, and samples the GPUs the
    queues' jobs hold in the simulator."""

    stack: LocalStack
    out: Printer
    db: Any
    submitted_b: bool = False
    most_in_use: int = 0
    most_by_queue: dict[str, int] = field(default_factory=dict)
    waited: set[str] = field(default_factory=set)
    shown_queues: bool = False
    cli: threading.Thread | None = None

    def poke(self, by_id: Mapping[str, dict[str, Any]], live_jobs: list[dict[str, Any]]) -> None:
        in_use: dict[str, int] = {}
        for job in live_jobs:
            rid = (job.get("labels") or {}).get("flexjobs-request", "")
            if rid in TEAM_A or rid in TEAM_B:
                queue = rid.rsplit("-", 1)[0]
                in_use[queue] = in_use.get(queue, 0) + QUEUE_GPUS
        self.most_in_use = max(self.most_in_use, sum(in_use.values()))
        for queue, gpus in in_use.items():
            self.most_by_queue[queue] = max(self.most_by_queue.get(queue, 0), gpus)
        for rid in (*TEAM_A, *TEAM_B):
            if ((by_id.get(rid) or {}).get("admission") or {}).get("stage") == "WAITING":
                self.waited.add(rid)
        stages = [((by_id.get(r) or {}).get("admission") or {}).get("stage") for r in TEAM_A]
        # Team-a holds the quota: two of its requests admitted (its own share and team-b's
        # idle one, borrowed), its third waiting.
        holds = stages.count("ADMITTED") == 2 and "WAITING" in stages
        if not self.submitted_b and holds:
            for rid in TEAM_B:
                self.stack.publish_request(queue_request(rid))
            self.submitted_b = True
            self.out.event(f"team-b publishes {', '.join(TEAM_B)} while team-a holds the quota")
        waiting_b = [r for r in TEAM_B if r in self.waited]
        if self.submitted_b and not self.shown_queues and waiting_b:
            summary = _admission_summary(self.db)
            by_name = {q.get("name"): q for q in (summary or {}).get("queues") or []}
            if (by_name.get("team-b") or {}).get("waiting"):
                self.shown_queues = True
                # In a thread of its own: the watch goes on while the command starts.
                self.cli = threading.Thread(target=self._show_queues, daemon=True)
                self.cli.start()

    def _show_queues(self) -> None:
        shown = flexjobs(self.stack, "queues").stdout
        print(f"\n$ flexjobs queues\n{shown}", flush=True)


def _admission_summary(db: Any) -> dict[str, Any] | None:
    snap = db.collection("admission").document("summary").get()
    return snap.to_dict() if snap.exists else None


def create_endpoint(stack: LocalStack) -> str:
    """An endpoint in the simulator, created through the real EndpointService client."""
    from shared.adapters.vertex.jobs import ENDPOINT_SERVICE, build_gapic_client
    from shared.kernel.config import Settings

    settings = Settings.from_env()
    client = build_gapic_client(settings, ENDPOINT_SERVICE, LOCATION)
    parent = f"projects/{stack.config.project}/locations/{LOCATION}"
    client.create_endpoint(
        parent=parent,
        endpoint={"display_name": "demo-endpoint"},
        endpoint_id=ENDPOINT_ID,
        timeout=30,
    )
    name = f"{parent}/endpoints/{ENDPOINT_ID}"
    deadline = time.monotonic() + 30
    while not any(e["name"] == name for e in stack.simulator.endpoints()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the endpoint {name} was never created")
        time.sleep(0.1)
    return name


@dataclass
class Demo:
    """What the watch saw, for the report."""

    stack: LocalStack
    clock: SimulatedClock
    out: Printer
    batch: list[str]
    slot_1: str
    slot_2: str
    deadlines: dict[str, datetime]
    started: datetime
    progress_before_retry: bool = False
    preempter: Preempter | None = None
    serving: ServingDriver | None = None
    auto: AutoDriver | None = None
    queues: QueueDriver | None = None
    finished: bool = False


def run_demo(
    time_factor: float = 60.0,
    tick_seconds: float | None = None,
    limit: timedelta = WATCH_LIMIT,
) -> int:
    """Run the demo; returns 0 when every part showed what it claims."""
    config = demo_config(time_factor, tick_seconds)
    print(f"starting the embedded stack (1 wall second = {time_factor:g} simulated seconds)...")
    with LocalStack(config) as stack:
        stack.apply_env()
        from google.cloud import firestore

        clock = stack.clock()
        out = Printer(clock)
        started = clock.now()
        print(f"simulated clock: {started:%Y-%m-%d %H:%M:%S}Z, every time below is on it")
        sim = stack.simulator
        sim.set_capacity(LOCATION, "NVIDIA_TESLA_A100", A100_CAPACITY)
        sim.set_quota(LOCATION, QUEUE_ACCELERATOR, "preemptible", QUEUE_QUOTA)
        print(f"simulated capacity: {A100_CAPACITY} x NVIDIA_TESLA_A100 in {LOCATION}")
        print(
            f"preemptible quota: {QUEUE_QUOTA} x {QUEUE_ACCELERATOR} in {LOCATION}, shared"
            " by the queues team-a and team-b (4 each, one cohort)"
        )
        print(f"status page (while the demo runs): {stack.status_page_url}\n")
        endpoint = create_endpoint(stack)
        now = clock.now().replace(second=0, microsecond=0)
        deadlines = {rid: now + due for rid, due in AUTO_DUE.items()}
        # As a user would: the requests go through ``flexjobs submit`` (validated, then
        # published to the requests topic), one message a line on its stdin.
        bodies = [
            *requests(),
            deploy_request(endpoint),
            *(auto_request(rid, at) for rid, at in deadlines.items()),
            *(queue_request(rid) for rid in TEAM_A),
        ]
        out.line(f"$ flexjobs submit --format jsonl -  ({len(bodies)} requests on stdin)")
        for request_id in flexjobs_submit(stack, bodies):
            out.line(f"flexjobs submit: published {request_id}")
        for rid, at in deadlines.items():
            out.line(f"  ({rid}: {AUTO_WORK_SECONDS // 60} min of work due {_hms(at)})")
        uploaded = upload_lines()
        stack.upload(UPLOAD_NAME, uploaded, "application/jsonl")
        out.line(f"uploaded {stack.upload_uri}{UPLOAD_NAME.rpartition('/')[2]} (3 lines, 1 bad)")
        # Each line's requestId derives from the file's name, the line and its bytes.
        obj = StoredObject(stack.config.bucket, UPLOAD_NAME, "")
        lines = uploaded.split("\n")
        batch = [obj.request_id(lines[n - 1].encode(), n) for n in (1, 3)]
        # Two nights ago and last night, at 02:00 UTC: a schedule time may not lie in the
        # future (the functions' clock: the simulator's).
        night = started.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=2)
        fires = [
            _rfc3339(night + offset)
            for offset in (
                timedelta(hours=2),
                timedelta(hours=2, seconds=40),
                timedelta(days=1, hours=2),
            )
        ]
        slot_1, slot_2 = (
            NIGHTLY.replace("{slot}", (night + timedelta(days=n)).strftime("%Y%m%dT%H%M%SZ"))
            for n in (0, 1)
        )
        for fired in fires[:2]:
            stack.publish_request(nightly(), scheduleTime=fired)
            out.line(f"Cloud Scheduler fired {NIGHTLY} at {fired}")
        print()
        demo = Demo(stack, clock, out, batch, slot_1, slot_2, deadlines, started)
        db = firestore.Client(project=config.project)
        _watch(demo, db, fires[2], limit)
        if demo.queues is not None and demo.queues.cli is not None:
            demo.queues.cli.join(timeout=60)  # its output before the report's
        ok = _report(demo, db)
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


def flexjobs_submit(stack: LocalStack, bodies: list[dict[str, Any]]) -> list[str]:
    """``flexjobs submit --format jsonl -``: the requestIds it published."""
    lines = "".join(json.dumps(body) + "\n" for body in bodies)
    done = flexjobs(stack, "submit", "--format", "jsonl", "-", stdin=lines)
    published = [str(rid) for rid in done.stdout.split()]
    if done.returncode != 0 or len(published) != len(bodies):
        raise RuntimeError(f"flexjobs submit published {published}: {done.stderr}")
    return published


def _records(db: Any, collection: str) -> Iterator[dict[str, Any]]:
    for doc in db.collection(collection).stream():
        record = doc.to_dict()
        if record:
            yield record


def _watch(demo: Demo, db: Any, next_fire: str, limit: timedelta) -> None:
    """Print every record as it changes, play the simulator's part (Spot preemptions, Spot
    serving capacity going and coming back, an AUTO job's region running dry) and fire the
    next nightly slot, until every part has ended or ``limit`` of simulated time passed (or
    as much wall time, should the simulated clock stand still)."""
    stack, out = demo.stack, demo.out
    seen: dict[str, tuple[Any, ...]] = {}
    demo.preempter = Preempter(stack, out)
    demo.serving = ServingDriver(stack, out)
    demo.auto = AutoDriver(stack, out)
    demo.queues = QueueDriver(stack, out, db)
    next_slot_fired = False
    give_up = demo.started + limit
    wall_limit = time.monotonic() + limit.total_seconds()
    expected = 8 + len(AUTO_DUE) + len(TEAM_A) + len(TEAM_B)
    while demo.clock.now() < give_up and time.monotonic() < wall_limit:
        records = list(_records(db, "jobs"))
        by_id = {r["requestId"]: r for r in records}
        deployment = next((d for d in _records(db, "deployments")), None)
        spot = by_id.get(SPOT_ID) or {}
        demo.preempter.poke(spot)
        if spot.get("attempt") == 1 and spot.get("latestCheckpoint"):
            demo.progress_before_retry = True
        first = by_id.get(demo.slot_1) or {}
        if not next_slot_fired and first.get("vertexJob"):
            # The next night's slot, while the first run is still queued or running.
            stack.publish_request(nightly(), scheduleTime=next_fire)
            out.event(f"Cloud Scheduler fired {NIGHTLY} at {next_fire}")
            next_slot_fired = True
        demo.serving.poke(deployment)
        demo.auto.poke(by_id.get(AUTO_RELAXED))
        live = [
            j
            for j in stack.simulator.jobs("CustomJob")
            if j.get("state")
            not in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED")
        ]
        demo.queues.poke(by_id, live)
        for record in sorted(records, key=lambda r: r["requestId"]):
            checkpoint = (record.get("latestCheckpoint") or {}).get("step")
            stage = (record.get("admission") or {}).get("stage")
            key = (
                record["state"],
                record.get("attempt"),
                record.get("vertexJob"),
                checkpoint,
                stage,
            )
            if seen.get(record["requestId"]) != key:
                seen[record["requestId"]] = key
                out.line(_row(record))
        if deployment is not None:
            serving = deployment.get("serving") or {}
            serving_key = (
                deployment.get("state"),
                serving.get("phase"),
                json.dumps(serving.get("last"), sort_keys=True),
                len(deployment.get("notified") or []),
            )
            if seen.get(DEPLOY_ID) != serving_key:
                seen[DEPLOY_ID] = serving_key
                out.line(_serving_row(deployment))
        jobs_ended = len(records) == expected and all(r["state"] in ENDED for r in records)
        if jobs_ended and ServingDriver.done(deployment):
            demo.finished = True
            return
        time.sleep(0.5)


# -- the report ----------------------------------------------------------------------------


@dataclass
class Part:
    """One part of the demo: what it showed, in one sentence, or why it did not."""

    name: str
    shown: str = ""
    problems: list[str] = field(default_factory=list)

    def check(self, ok: bool, problem: str) -> bool:
        if not ok:
            self.problems.append(problem)
        return ok


def _report(demo: Demo, db: Any) -> bool:
    """Print what each part showed, check it, and the closing summary; True when every part
    showed what it claims."""
    clock = demo.clock
    jobs = {r["requestId"]: r for r in _records(db, "jobs")}
    final = {k: r["state"] for k, r in jobs.items()}
    print("\nfinal:", {_short(k): v for k, v in sorted(final.items())})
    parts = [
        _seed(jobs),
        _gang(demo, jobs),
        _too_big(jobs),
        _spot(demo, db, jobs),
        _upload(demo, db, jobs),
        _nightly(demo, jobs),
        _deployment(demo, db),
        _auto(demo, db, jobs),
        _queues(demo, jobs),
    ]
    now = clock.now()
    clocks = Part("one clock")
    late = list(_after(db, now))
    clocks.check(not late, f"recorded after the demo's now ({_hms(now)}): {late[:5]}")
    if not demo.finished:
        clocks.problems.append("the watch ended before every part did (see above)")
    span = duration((now - demo.started).total_seconds())
    print(
        f"\nwhat the demo showed ({_hms(demo.started)} to {_hms(now)} on the simulator's"
        f" clock, {span}):"
    )
    for n, part in enumerate(parts, 1):
        print(f"  {n}. {part.name}: {part.shown or '(not shown)'}")
    failed = [p for p in (*parts, clocks) if p.problems]
    if failed:
        print("\ndemo FAILED:", file=sys.stderr)
        for part in failed:
            for problem in part.problems:
                print(f"  {part.name}: {problem}", file=sys.stderr)
        return False
    print("demo OK")
    return True


def _state(jobs: Mapping[str, Mapping[str, Any]], rid: str) -> str | None:
    return (jobs.get(rid) or {}).get("state")


def _seed(jobs: Mapping[str, dict[str, Any]]) -> Part:
    part = Part("seed job")
    seed = jobs.get("seed-1") or {}
    if part.check(seed.get("state") == "SUCCEEDED", f"seed-1 is {seed.get('state')}"):
        part.shown = (
            f"the seed example (1 A100, FLEX_START) waited {duration(seed.get('queuedSeconds'))}"
            f" for capacity, ran {duration(seed.get('runningSeconds'))} and SUCCEEDED."
        )
    return part


def _gang(demo: Demo, jobs: Mapping[str, dict[str, Any]]) -> Part:
    part = Part("gang job")
    gang, seed = jobs.get("gang-2-nodes") or {}, jobs.get("seed-1") or {}
    if not part.check(gang.get("state") == "SUCCEEDED", f"gang-2-nodes is {gang.get('state')}"):
        return part
    # The gang needs all the A100s: it and the seed never ran at once, as Vertex ran them.
    times = []
    for record in (gang, seed):
        job = demo.stack.simulator.job(str(record.get("vertexJob")))
        times += [_time(job.get("startTime")), _time(job.get("endTime"))]
    known = [t for t in times if t is not None]
    if not part.check(len(known) == 4, f"the gang's and the seed's runs: {times}"):
        return part
    gang_start, gang_end, seed_start, seed_end = known
    seed_first = seed_end <= gang_start
    if part.check(seed_first or gang_end <= seed_start, f"the gang ran beside the seed: {times}"):
        part.shown = (
            f"the 2-node gang needs all {A100_CAPACITY} A100s, so it and the seed never ran at"
            f" once ({'the seed ran first' if seed_first else 'it ran first'}); it waited"
            f" {duration(gang.get('queuedSeconds'))} until both its nodes could start together,"
            " then ran and SUCCEEDED."
        )
    return part


def _too_big(jobs: Mapping[str, dict[str, Any]]) -> Part:
    part = Part("too-large job")
    big = jobs.get("too-big-to-fit") or {}
    ok = part.check(big.get("state") == "FAILED", f"too-big-to-fit is {big.get('state')}")
    ok &= part.check(
        "max-wait-expired" in str(big.get("reason")), f"it failed for {big.get('reason')}"
    )
    if ok:
        part.shown = (
            f"16 A100s never fit in {A100_CAPACITY}: Vertex ended its wait at its 1200s max wait"
            " and, its capacity retry budget 0, it FAILED for good."
        )
    return part


def _spot(demo: Demo, db: Any, jobs: Mapping[str, dict[str, Any]]) -> Part:
    part = Part("Spot preemptions with checkpoints")
    stack = demo.stack
    spot = jobs.get(SPOT_ID) or {}
    attempts = {
        d.id: d.to_dict() or {}
        for d in db.collection("jobs").document(SPOT_ID).collection("attempts").stream()
    }
    for n, a in sorted(attempts.items()):
        print(
            f"  {SPOT_ID} attempt {n}: {a.get('state'):<9} "
            f"resumedFrom={a.get('resumedFrom') or '-'} "
            f"gpuSeconds={a.get('gpuSeconds', 0):.0f} "
            f"workLost={a.get('workLostSeconds', 0):.0f}s"
        )
    cost = spot.get("cost") or {}
    print(
        f"  {SPOT_ID}: {spot.get('gpuSeconds', 0):.0f} GPU-seconds, "
        f"est. ${cost.get('costUsd')} vs ${cost.get('onDemandUsd')} on demand; "
        f"progress recorded from uploads before the first retry: {demo.progress_before_retry}"
    )
    print(f"  its page: {stack.status_page_url}jobs/{SPOT_ID}")
    print(f"\n$ flexjobs status {SPOT_ID}")
    print(flexjobs(stack, "status", SPOT_ID).stdout)
    creates = _creates(stack, SPOT_ID)
    ok = part.check(spot.get("state") == "SUCCEEDED", f"{SPOT_ID} is {spot.get('state')}")
    ok &= part.check(spot.get("attempt") == PREEMPTIONS + 1, f"attempt {spot.get('attempt')}")
    ok &= part.check(len(creates) == PREEMPTIONS + 1, f"{len(creates)} CreateCustomJob calls")
    ok &= part.check(demo.progress_before_retry, "no progress recorded before the first retry")
    resumed = [str(a.get("resumedFrom") or "") for _, a in sorted(attempts.items())][1:]
    ok &= part.check(all(resumed), f"a retry did not resume from a checkpoint: {resumed}")
    if ok:
        steps = [r.rstrip("/").rsplit("-", 1)[-1].lstrip("0") for r in resumed]
        part.shown = (
            f"the Spot job was preempted {PREEMPTIONS} times, resumed from steps"
            f" {' and '.join(steps)} (its progress recorded from each checkpoint upload), and"
            f" SUCCEEDED for ${cost.get('costUsd')} instead of ${cost.get('onDemandUsd')}"
            " on demand."
        )
    return part


def _upload(demo: Demo, db: Any, jobs: Mapping[str, dict[str, Any]]) -> Part:
    part = Part("jsonl upload")
    rejections = list(_records(db, "rejections"))
    for rejection in rejections:
        error = rejection["errors"][0]
        print(
            f"  rejected {_short(rejection['requestId'])} (source={rejection.get('source')}, "
            f"line {rejection.get('line')}): {error['path']}: {error['message'][:80]}"
        )
    states = [_state(jobs, rid) for rid in demo.batch]
    ok = part.check(states == ["SUCCEEDED", "SUCCEEDED"], f"lines 1 and 3 are {states}")
    lines = [(r.get("source"), r.get("line")) for r in rejections]
    ok &= part.check(lines == [("gcs", 2)], f"rejections {lines}")
    if ok:
        part.shown = (
            "a .jsonl of 3 requests dropped in the bucket made 2 jobs that SUCCEEDED and one"
            " rejection naming line 2 (a T4 is not a DWS GPU)."
        )
    return part


def _nightly(demo: Demo, jobs: Mapping[str, dict[str, Any]]) -> Part:
    part = Part("nightly template")
    second = jobs.get(demo.slot_2) or {}
    print(f"  {demo.slot_2}: {second.get('state')} (reason: {second.get('reason')})")
    ok = part.check(_state(jobs, demo.slot_1) == "SUCCEEDED", f"{demo.slot_1} did not succeed")
    ok &= part.check(second.get("state") == "SKIPPED", f"{demo.slot_2} is {second.get('state')}")
    ok &= part.check(second.get("reason") == demo.slot_1, f"skipped for {second.get('reason')}")
    ok &= part.check(not second.get("vertexJob"), f"{demo.slot_2} made a job")
    if ok:
        part.shown = (
            "fired three times over two nights, the forbid template made one job for the first"
            " night and SKIPPED the second while that run was still active."
        )
    return part


def _deployment(demo: Demo, db: Any) -> Part:
    part = Part("Spot deployment")
    record = (db.collection("deployments").document(DEPLOY_ID).get().to_dict()) or {}
    serving = record.get("serving") or {}
    history = serving.get("history") or []
    print(f"\n{DEPLOY_ID}: serving capacity changes (Spot+on-demand of required):")
    for change in history:
        at = _time(change.get("at"))
        print(
            f"  [{_hms(at)}] {change.get('spot')}+{change.get('onDemand')} of"
            f" {change.get('required')}: {str(change.get('cause'))[:100]}"
        )
    told = [str(n.get("state")) for n in record.get("notified") or []]
    endpoint = next(
        (e for e in demo.stack.simulator.endpoints() if e["name"].endswith(ENDPOINT_ID)), {}
    )
    models = endpoint.get("deployedModels") or []
    split = {k: v for k, v in (endpoint.get("trafficSplit") or {}).items() if v}
    ok = part.check(told == ["DEPLOYED", "HEDGED", "RESTORED"], f"notified {told}")
    ok &= part.check(serving.get("phase") == "SERVING", f"phase {serving.get('phase')}")
    ok &= part.check(serving.get("hedges") == 1, f"{serving.get('hedges')} hedges")
    spot_only = len(models) == 1 and bool(models[0].get("dedicatedResources", {}).get("spot"))
    ok &= part.check(spot_only, f"the endpoint serves {[m.get('displayName') for m in models]}")
    ok &= part.check(
        list(split.values()) == [100] and spot_only and models[0]["id"] in split,
        f"traffic {split}",
    )
    phases = demo.serving.phases if demo.serving else []
    ok &= part.check("HEDGED" in phases, f"phases seen {phases}")
    if ok:
        told_at = {str(n.get("state")): _time(n.get("at")) for n in record.get("notified") or []}
        spot = [c.get("spot") for c in history]
        served = spot.index(REPLICAS) if REPLICAS in spot else len(history)
        lost = next((_time(c.get("at")) for c in history[served:] if c.get("spot") == 0), None)
        part.shown = (
            f"a 2-replica Spot deployment lost its Spot nodes at {_hms(lost)}, was HEDGED at"
            f" {_hms(told_at.get('HEDGED'))} (an on-demand fallback took the traffic), and once"
            f" Spot was back was RESTORED at {_hms(told_at.get('RESTORED'))}: traffic back to"
            " Spot, the fallback undeployed."
        )
    return part


def _auto(demo: Demo, db: Any, jobs: Mapping[str, dict[str, Any]]) -> Part:
    part = Part("AUTO against a deadline")
    seen: dict[str, tuple[list[str], datetime]] = {}
    for rid, deadline in demo.deadlines.items():
        record = jobs.get(rid) or {}
        attempts = {
            int(d.id): d.to_dict() or {}
            for d in db.collection("jobs").document(rid).collection("attempts").stream()
        }
        print(f"\n{rid}: due {_hms(deadline)}, each attempt as AUTO decided it:")
        for n, a in sorted(attempts.items()):
            decision = a.get("capacity") or {}
            print(
                f"  attempt {n}: {a.get('strategy'):<10} {a.get('location')}"
                f" {a.get('state') or '-':<9} slack={duration(decision.get('slackSeconds'))}:"
                f" {str(decision.get('reason'))[:110]}"
            )
        ended = _time(record.get("endedAt"))
        path = [f"{a.get('strategy')} in {a.get('location')}" for _, a in sorted(attempts.items())]
        slack = [(attempts[n].get("capacity") or {}).get("slackSeconds") for n in sorted(attempts)]
        ok = part.check(record.get("state") == "SUCCEEDED", f"{rid} is {record.get('state')}")
        ok &= part.check(
            ended is not None and ended <= deadline,
            f"{rid} ended {_hms(ended)}, after its deadline {_hms(deadline)}",
        )
        decided = bool(attempts) and all(
            (a.get("capacity") or {}).get("reason") for a in attempts.values()
        )
        ok &= part.check(decided, f"{rid}: an attempt without AUTO's decision")
        numbers = [float(s) for s in slack if isinstance(s, int | float)]
        ok &= part.check(
            len(numbers) == len(slack) and numbers == sorted(numbers, reverse=True),
            f"{rid}: the slack did not run down: {slack}",
        )
        first = (attempts.get(1) or {}).get("strategy")
        if rid == AUTO_RELAXED:
            ok &= part.check(first == "SPOT", f"{rid}: attempt 1 on {first}, not Spot")
            ok &= part.check(len(attempts) >= 2, f"{rid}: never decided again")
        else:
            ok &= part.check(first not in (None, "SPOT"), f"{rid}: attempt 1 on {first}")
        if ok and ended is not None:
            seen[rid] = (path, ended)
    if not part.problems:
        (relaxed, relaxed_end), (tight, tight_end) = seen[AUTO_RELAXED], seen[AUTO_TIGHT]
        due = demo.deadlines
        part.shown = (
            f"the same {AUTO_WORK_SECONDS // 60} min of work due in 3 h ran on Spot, and after"
            f" losing its capacity each retry was decided again on less slack"
            f" ({' -> '.join(relaxed)}); due in 1 h it ran on {tight[0]} from the start;"
            f" they ended {duration((due[AUTO_RELAXED] - relaxed_end).total_seconds())} and"
            f" {duration((due[AUTO_TIGHT] - tight_end).total_seconds())} before their deadlines."
        )
    return part


def _queues(demo: Demo, jobs: Mapping[str, dict[str, Any]]) -> Part:
    part = Part("two queues sharing a quota")
    driver = demo.queues or QueueDriver(demo.stack, demo.out, None)
    rids = (*TEAM_A, *TEAM_B)
    admitted = {
        rid: _time(((jobs.get(rid) or {}).get("admission") or {}).get("admittedAt")) for rid in rids
    }
    print("\nqueues: admitted (simulated time), in order:")
    for rid in sorted(rids, key=lambda r: admitted[r] or datetime.max.replace(tzinfo=UTC)):
        print(f"  {rid}: {_hms(admitted[rid])}{' after waiting' if rid in driver.waited else ''}")
    refused = [
        c
        for c in demo.stack.simulator.calls(method="CreateCustomJob")
        if c["code"] != "OK" and c["request"]["customJob"]["labels"].get("flexjobs-request") in rids
    ]
    states = {rid: _state(jobs, rid) for rid in rids}
    ok = part.check(set(states.values()) == {"SUCCEEDED"}, f"states {states}")
    ok &= part.check(
        driver.most_in_use <= QUEUE_QUOTA,
        f"{driver.most_in_use} GPUs in use at once, past the quota of {QUEUE_QUOTA}",
    )
    ok &= part.check(not refused, f"Vertex refused {len(refused)} creates for quota")
    borrowed = driver.most_by_queue.get("team-a", 0)
    ok &= part.check(borrowed > 4, f"team-a never held more than its nominal ({borrowed})")
    ok &= part.check(bool(set(TEAM_B) & driver.waited), "no team-b request waited")
    b_times = [t for r in TEAM_B if (t := admitted[r]) is not None]
    a_times = [t for r in TEAM_A if (t := admitted[r]) is not None]
    b_first, a_last = min(b_times, default=None), max(a_times, default=None)
    ok &= part.check(
        b_first is not None and a_last is not None and b_first <= a_last,
        f"team-b's first admitted {_hms(b_first)}, after team-a's last ({_hms(a_last)})",
    )
    if ok:
        part.shown = (
            f"team-a filled the shared quota ({borrowed} of {QUEUE_QUOTA} GPUs, borrowing"
            f" team-b's idle share); team-b's requests waited and got the next GPUs ahead of"
            f" team-a's last; never more than {driver.most_in_use} of {QUEUE_QUOTA} GPUs in use,"
            " no create refused."
        )
    return part


def _creates(stack: LocalStack, rid: str) -> list[dict[str, Any]]:
    return [
        c
        for c in stack.simulator.calls(method="CreateCustomJob")
        if c["code"] == "OK" and c["request"]["customJob"]["labels"].get("flexjobs-request") == rid
    ]


# The times a record holds that are past events (what status, the page and this demo print):
# none may be later than the "now" they are printed at.
PAST = frozenset(
    {"createdAt", "updatedAt", "endedAt", "startedAt", "deployedAt", "admittedAt", "waitingSince"}
)


def _after(db: Any, now: datetime, slack: float = 5.0) -> Iterator[str]:
    """``collection/id field=time`` of every past event recorded later than ``now``."""
    bound = now + timedelta(seconds=slack)

    def walk(value: Any, path: str) -> Iterator[str]:
        if isinstance(value, Mapping):
            for key, item in value.items():
                at = _time(item) if key in PAST or key == "at" else None
                if at is not None and at > bound:
                    yield f"{path}.{key}={at.isoformat()}"
                yield from walk(item, f"{path}.{key}")
        elif isinstance(value, list):
            for n, item in enumerate(value):
                yield from walk(item, f"{path}[{n}]")

    for collection in ("jobs", "deployments"):
        for doc in db.collection(collection).stream():
            yield from walk(doc.to_dict() or {}, f"{collection}/{doc.id}")
            if collection == "jobs":
                for attempt in doc.reference.collection("attempts").stream():
                    yield from walk(attempt.to_dict() or {}, f"jobs/{doc.id}/attempts/{attempt.id}")
