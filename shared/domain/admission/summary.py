"""What operators see of admission: each queue's quota, usage, borrowing and waiting line,
and the project's quota with where its limits came from.

The tick computes it after its pass (the records it read, the ledger, the waiting records)
and writes it as one document (``admission/summary``), so ``flexjobs queues``, a waiting
request's ``flexjobs status`` and the status page's queues view each read one document,
never the waiting list or the ledger, and never recompute the rule. It is as of the tick
(``at``): at most a tick old.

- **Per queue and resource**: ``nominal`` (its quota), ``used`` (GPUs admitted now) and
  ``borrowed`` (what it uses past its nominal, from its cohort).
- **The line**: each queue's waiting requests in its admission order (priority, then
  arrival: :func:`~.estimate.position`'s order), the first :data:`LINE_PER_QUEUE`, each with
  an estimated start (:func:`~.estimate.estimate_starts`: one replay of the rule, over the
  listed requests, through the running jobs' expected ends; None when no known end frees
  enough). A request further back shows the queue's count, not a position.
- **The project's quota**: each limit, its source (``observed``: read from the Cloud Quotas
  API; ``configured``: the queue file's ``projectQuota``) and why the API could not be read.

**Bounded**: at most :data:`LINE_PER_QUEUE` ids per queue, :data:`MAX_LINE` in all and
:data:`LINE_BYTES` of them (a requestId may be 1,500 bytes), on top of the queue file's own
bounds (64 queues of 32 quotas): below Firestore's 1 MiB document at worst
(``tests/unit/test_admission_summary.py`` builds the worst).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from shared.domain.admission.config import Queues, Resource
from shared.domain.admission.estimate import Running, estimate_starts
from shared.domain.admission.rule import Standing, Workload, queue_order

#: Waiting requests listed per queue, in order.
LINE_PER_QUEUE: Final = 50
#: Waiting requests listed in all queues together.
MAX_LINE: Final = 1000
#: Bytes the listed lines take at most (each entry: its requestId and ~200 bytes more).
LINE_BYTES: Final = 384 * 1024
_ENTRY_BYTES: Final = 200


def summarise(
    queues: Queues,
    standing: Standing,
    waiting: Sequence[Workload],
    running: Sequence[Running],
    *,
    now: datetime,
    unreadable: str | None = None,
) -> dict[str, Any]:
    """The summary document as of ``now`` (``standing.usage``: what the ledger holds).

    Examples:
        >>> from datetime import UTC, datetime, timedelta
        >>> from shared.domain.admission.config import Pool, read_queues
        >>> from shared.domain.admission.quota import Ceiling
        >>> where = {"region": "us-central1", "acceleratorType": "NVIDIA_L4",
        ...          "pool": "PREEMPTIBLE"}
        >>> qs = read_queues({"queues": [{"name": "a", "quotas": [{**where, "nominal": 4}]}]})
        >>> r = Resource("us-central1", "NVIDIA_L4", Pool.PREEMPTIBLE)
        >>> t = datetime(2026, 12, 1, tzinfo=UTC)
        >>> job = Running("run", "a", 0, {r: 4}, expected_end=t + timedelta(hours=1))
        >>> s = summarise(qs, Standing({"a": {r: 4}}, Ceiling({r: 8})),
        ...               [Workload("next", "a", 0, t, {r: 4})], [job], now=t)
        >>> q = s["queues"][0]
        >>> q["resources"][0]["used"], q["waiting"], q["line"][0]["position"]
        (4, 1, 1)
        >>> q["line"][0]["estimatedStart"] - t
        datetime.timedelta(seconds=3600)
    """
    by_queue: dict[str, list[Workload]] = {}
    for workload in waiting:
        by_queue.setdefault(workload.queue, []).append(workload)
    # The replay runs over each queue's first LINE_PER_QUEUE only: what waits behind them in
    # their own order rarely goes first, and a replay of 5,000 over a hundred ends would
    # cost the tick seconds (benchmarked: ~2 s against ~0.2 s).
    heads = [w for line in by_queue.values() for w in queue_order(line)[:LINE_PER_QUEUE]]
    starts = estimate_starts(queues, standing, heads, running, now=now)
    listed = 0
    budget = LINE_BYTES
    rows = []
    for name, queue in sorted(queues.queues.items()):
        used = standing.usage.get(name, {})
        resources = sorted(set(queue.quotas) | {r for r, n in used.items() if n > 0})
        line = queue_order(by_queue.get(name, []))
        shown = []
        for workload in line[: max(0, min(LINE_PER_QUEUE, MAX_LINE - listed))]:
            cost = len(workload.request_id.encode("utf-8")) + _ENTRY_BYTES
            if cost > budget:
                break
            budget -= cost
            shown.append(workload)
        listed += len(shown)
        entries = []
        for index, workload in enumerate(shown):
            entries.append(
                {
                    "requestId": workload.request_id,
                    "position": index + 1,
                    "priority": workload.priority,
                    "gpus": sum(workload.demand.values()),
                    "waitingSince": workload.arrival,
                    "estimatedStart": starts.get(workload.request_id),
                }
            )
        rows.append(
            {
                "name": name,
                "cohort": queue.cohort,
                "weight": queue.weight,
                "resources": [
                    _resource(r, queue.quota(r).nominal, used.get(r, 0)) for r in resources
                ],
                "admitted": sum(1 for job in running if job.queue == name),
                "waiting": len(line),
                "oldestWaitingSince": min((w.arrival for w in line), default=None),
                "line": entries,
            }
        )
    ceiling = standing.ceiling
    return {
        "at": now,
        "queues": rows,
        "projectQuota": [
            {
                **_where(r),
                "limit": limit,
                "source": "configured" if r in ceiling.configured else "observed",
            }
            for r, limit in sorted(ceiling.limits.items())
        ],
        "quotaUnreadable": unreadable,
    }


def place_of(summary: Mapping[str, Any], request_id: str) -> dict[str, Any] | None:
    """Where ``request_id`` stands in the summary's lines: its entry with ``queue`` and the
    queue's ``waiting`` count, or None when it is not listed (not waiting, or too far back).

    Examples:
        >>> s = {"queues": [{"name": "a", "waiting": 7, "line": [{"requestId": "x",
        ...      "position": 1}]}]}
        >>> place_of(s, "x"), place_of(s, "y")
        ({'requestId': 'x', 'position': 1, 'queue': 'a', 'waiting': 7}, None)
    """
    queues = summary.get("queues")
    for queue in queues if isinstance(queues, list) else []:
        if not isinstance(queue, Mapping):
            continue
        line = queue.get("line")
        for entry in line if isinstance(line, list) else []:
            if isinstance(entry, Mapping) and entry.get("requestId") == request_id:
                return {**entry, "queue": queue.get("name"), "waiting": queue.get("waiting")}
    return None


def _where(resource: Resource) -> dict[str, Any]:
    return {
        "region": resource.region,
        "acceleratorType": resource.accelerator,
        "pool": resource.pool.value,
    }


def _resource(resource: Resource, nominal: int, used: int) -> dict[str, Any]:
    borrowed = max(0, used - nominal)
    return {**_where(resource), "nominal": nominal, "used": used, "borrowed": borrowed}
