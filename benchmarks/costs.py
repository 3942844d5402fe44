"""The control plane's dollars per job, from counted operations and the price table.

:class:`Operations` is what one job's life (or one handler call) spent, as counted by the
scale benchmark: billed Firestore reads and writes, Pub/Sub requests with their sizes, Vertex
API calls, and function invocations with their wall time. :func:`dollars` prices it with
``benchmarks/control_plane_prices.yaml``; :func:`gpu_dollars` prices the job's own GPU time
with ``shared/domain/policy/prices.yaml``.

Functions are billed as Cloud Run bills them with request-based billing: the CPU and memory
allocated for each request's wall time, rounded up to 100 ms, plus a fee per request. That is
an upper bound of the CPU the handler used (the benchmark prints the CPU as well).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PRICES = Path(__file__).resolve().parent / "control_plane_prices.yaml"
TIB = 2**40


@dataclass(frozen=True)
class Invocation:
    """One function call: its wall seconds and the instance's allocation."""

    seconds: float
    vcpu: float
    gib: float


@dataclass
class Operations:
    reads: int = 0
    writes: int = 0
    pubsub_request_bytes: list[int] = field(default_factory=list)  # one entry per request
    vertex_calls: int = 0
    invocations: list[Invocation] = field(default_factory=list)

    def __add__(self, other: Operations) -> Operations:
        return Operations(
            self.reads + other.reads,
            self.writes + other.writes,
            self.pubsub_request_bytes + other.pubsub_request_bytes,
            self.vertex_calls + other.vertex_calls,
            self.invocations + other.invocations,
        )


@dataclass(frozen=True)
class Priced:
    firestore: float
    pubsub: float
    vertex: float
    functions: float

    @property
    def total(self) -> float:
        return self.firestore + self.pubsub + self.vertex + self.functions


def load_prices(path: Path = PRICES) -> dict[str, Any]:
    prices: dict[str, Any] = yaml.safe_load(path.read_text())
    return prices


def billed_seconds(seconds: float, increment: float) -> float:
    """Wall time rounded up to the billing increment (never less than one increment).

    >>> billed_seconds(0.01, 0.1), billed_seconds(0.1, 0.1), billed_seconds(0.1001, 0.1)
    (0.1, 0.1, 0.2)
    """
    steps = max(1, math.ceil(round(seconds / increment, 9)))
    return round(steps * increment, 9)


def dollars(ops: Operations, prices: dict[str, Any]) -> Priced:
    fs, ps, vx, fn = (prices[k] for k in ("firestore", "pubsub", "vertex_api", "functions"))
    firestore = ops.reads * fs["reads_per_100k"] / 1e5 + ops.writes * fs["writes_per_100k"] / 1e5
    floor = ps["min_bytes_per_request"]
    pubsub = sum(max(floor, b) for b in ops.pubsub_request_bytes) * ps["per_tib"] / TIB
    vertex = ops.vertex_calls * vx["per_call"]
    functions = 0.0
    for call in ops.invocations:
        billed = billed_seconds(call.seconds, fn["billing_increment_seconds"])
        functions += billed * (call.vcpu * fn["vcpu_second"] + call.gib * fn["gib_second"])
        functions += fn["per_million_requests"] / 1e6
    return Priced(firestore, pubsub, vertex, functions)


def gpu_dollars(accelerator: str, gpus: int, hours: float) -> tuple[float, str]:
    """The cheapest price ``prices.yaml`` lists for the accelerator (the worst case for a
    ratio against it), times ``gpus`` x ``hours``; with the strategy that price is for."""
    from shared.adapters.packaged_prices import load_packaged_prices

    table = load_packaged_prices()
    strategies = ("STANDARD", "SPOT", "FLEX_START")
    per_hour = {s: table.estimate(accelerator, s, 3600.0).cost_usd for s in strategies}
    cheapest = min(per_hour, key=lambda s: per_hour[s])
    return per_hour[cheapest] * gpus * hours, cheapest


GIB = 2**30
DAYS_PER_MONTH = 365 / 12


def scheduler_dollars(jobs: int, days: float, prices: dict[str, Any]) -> float:
    """Cloud Scheduler: ``jobs`` jobs for ``days`` days, at the price of a job-month (the
    free jobs not applied).

    >>> round(scheduler_dollars(1, 365 / 12, {"scheduler": {"per_job_month": 0.10}}), 6)
    0.1
    """
    return float(jobs * prices["scheduler"]["per_job_month"] * days / DAYS_PER_MONTH)


def logged_bytes(lines: int, written: int, invocations: int, prices: dict[str, Any]) -> int:
    """The bytes Cloud Logging ingests for ``lines`` log lines of ``written`` bytes in all
    from ``invocations`` function calls: each line with its LogEntry's metadata, and each
    call's request log (both assumed in the price table, not measured).

    >>> table = {"logging": {"entry_overhead_bytes": 1000, "request_log_bytes": 2000}}
    >>> logged_bytes(3, 600, 2, table)
    7600
    """
    log = prices["logging"]
    overhead = (
        int(log["entry_overhead_bytes"]) * lines + int(log["request_log_bytes"]) * invocations
    )
    return written + overhead


def logging_dollars(ingested_bytes: float, prices: dict[str, Any]) -> float:
    """Cloud Logging ingestion of ``ingested_bytes`` (the free 50 GiB not applied).

    >>> logging_dollars(2**30, {"logging": {"per_gib": 0.5}})
    0.5
    """
    return float(ingested_bytes / GIB * prices["logging"]["per_gib"])


def spot_gpu_dollars(accelerator: str, gpus: float, hours: float) -> float:
    """``gpus`` of ``accelerator`` for ``hours`` at the Spot price of ``prices.yaml``.

    >>> spot_gpu_dollars("NVIDIA_L4", 2, 10.0)
    6.6
    """
    from shared.adapters.packaged_prices import load_packaged_prices

    per_hour = load_packaged_prices().estimate(accelerator, "SPOT", 3600.0).cost_usd
    return round(per_hour * gpus * hours, 6)
