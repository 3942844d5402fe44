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
