"""Recovery-gap benchmark (a script, not a test): prints its figures; ``./dev bench recovery``.

Measures, on the embedded stack, the wall time from a simulated preemption to the next
attempt's CreateCustomJob at the simulator, over N preemptions (one per Spot job), p50 and p95,
for two configurations measured in the same run:

* hints: the simulator publishes ml_job log-entry hints (as a log sink would), backoff 0,
  with the default 10 s coalescing window and with a 2 s one;
* poll-only: no hints, a scheduler tick every 60 s reconciles, backoff 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import datetime
from typing import Any

from flexjobs_local.procs import exit_on_sigterm
from flexjobs_local.stack import LocalStack, StackConfig

RUN_SECONDS = 1_000_000  # never finishes during the benchmark


def spot_request(request_id: str) -> dict[str, Any]:
    pool = {
        "machineSpec": {
            "machineType": "g2-standard-4",
            "acceleratorType": "NVIDIA_L4",
            "acceleratorCount": 1,
        },
        "replicaCount": 1,
        "containerSpec": {
            "imageUri": "python:3.10",
            "env": [{"name": "FLEXJOBS_SIM_RUN_SECONDS", "value": str(RUN_SECONDS)}],
        },
    }
    return {
        "requestId": request_id,
        "retryPolicy": {"preemption": 10},
        "customJob": {
            "displayName": request_id,
            "jobSpec": {"workerPoolSpecs": [pool], "scheduling": {"strategy": "SPOT"}},
        },
    }


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def measure(
    label: str, count: int, hints: bool, tick_seconds: float | None, coalesce: float = 10.0
) -> list[float]:
    config = StackConfig(
        time_factor=60.0,
        default_capacity=10_000,
        hints=hints,
        checkpoints=False,
        tick_seconds=tick_seconds,
        function_env={
            "FLEXJOBS_BACKOFF_BASE_SECONDS": "0",
            "FLEXJOBS_HINT_COALESCE_SECONDS": str(coalesce),
        },
    )
    with LocalStack(config) as stack:
        stack.apply_env()
        sim = stack.simulator
        ids = [f"{label}-{i:03d}" for i in range(count)]
        for rid in ids:
            stack.publish_request(spot_request(rid))
        names = _wait_for_first_attempts(stack, ids)
        preempted_at: dict[str, float] = {}
        for rid in ids:
            preempted_at[rid] = time.time()
            sim.preempt(names[rid])
            time.sleep(0.2)  # spread them, as real preemptions are
        created = _wait_for_second_attempts(stack, ids, timeout=300)
        return [created[rid] - preempted_at[rid] for rid in ids]


def _creates(stack: LocalStack, attempt: str) -> dict[str, dict[str, Any]]:
    out = {}
    for call in stack.simulator.calls(method="CreateCustomJob"):
        labels = call["request"]["customJob"].get("labels", {})
        if call["code"] == "OK" and labels.get("flexjobs-attempt") == attempt:
            out[labels["flexjobs-request"]] = call
    return out


def _wait_for_first_attempts(stack: LocalStack, ids: list[str]) -> dict[str, str]:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        jobs = {
            j["labels"]["flexjobs-request"]: j
            for j in stack.simulator.jobs()
            if j.get("labels", {}).get("flexjobs-attempt") == "1"
        }
        if len(jobs) == len(ids) and all(j["state"] == "JOB_STATE_RUNNING" for j in jobs.values()):
            return {rid: jobs[rid]["name"] for rid in ids}
        time.sleep(0.5)
    raise TimeoutError("first attempts did not all start")


def _wait_for_second_attempts(
    stack: LocalStack, ids: list[str], timeout: float
) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        calls = _creates(stack, "2")
        if len(calls) >= len(ids):
            return {rid: datetime.fromisoformat(calls[rid]["time"]).timestamp() for rid in ids}
        time.sleep(0.5)
    raise TimeoutError(f"only {len(_creates(stack, '2'))} of {len(ids)} retries were created")


def main() -> int:
    exit_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--preemptions", type=int, default=50)
    args = parser.parse_args()
    results = {
        "hints, coalesce 10 s (default), backoff 0": measure("hint", args.preemptions, True, None),
        "hints, coalesce 2 s, backoff 0": measure("hint2", args.preemptions, True, None, 2.0),
        "poll-only (tick every 60 s), backoff 0": measure("poll", args.preemptions, False, 60.0),
    }
    print("\n== flexjobs recovery-gap benchmark: preemption -> next CreateCustomJob ==")
    for name, gaps in results.items():
        print(
            f"{name:<44} n={len(gaps)}  p50={percentile(gaps, 50):6.2f} s  "
            f"p95={percentile(gaps, 95):6.2f} s  max={max(gaps):6.2f} s"
        )
    print(json.dumps({k: sorted(round(g, 3) for g in v) for k, v in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
