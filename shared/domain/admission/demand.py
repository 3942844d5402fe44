"""A request's demand and its check at intake: the queue it names, its priority, and whether
it could ever be admitted.

**Demand** is the GPUs a request holds at once: replicas x accelerators over every worker pool,
times ``parallelTrialCount`` for a tuning job
(:func:`shared.domain.request.attempts.gpus_by_accelerator`, the one place that counts them),
in the request's region, on the pool its strategy draws on (:func:`~.config.pool_of`). AUTO
draws on the pool of the strategy its decision chose, so the caller passes the pool.

**Inadmissible** (Kueue's word): a demand larger than its queue could ever hold with all it
could borrow (:func:`~.quota.out_of_reach`), or larger than the project's quota where that is
known, can never be admitted. It is refused at intake rather than left waiting for ever.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.domain.admission.config import DEFAULT_QUEUE, Pool, Queues, Resource
from shared.domain.admission.quota import Ceiling, Demand, out_of_reach
from shared.domain.model.values import show
from shared.domain.request.attempts import gpus_by_accelerator
from shared.kernel.errors import FieldError, InvalidRequest


def demand_of(kind: str, spec: dict[str, Any], *, region: str, pool: Pool) -> Demand:
    """The GPUs a validated request body asks of each resource.

    Examples:
        >>> pool = {"machineSpec": {"acceleratorType": "NVIDIA_L4", "acceleratorCount": 1},
        ...         "replicaCount": 2}
        >>> tuning = {"parallelTrialCount": 4,
        ...           "trialJobSpec": {"workerPoolSpecs": [pool]}}
        >>> demand = demand_of("hyperparameterTuningJob", tuning, region="us-central1",
        ...                    pool=Pool.PREEMPTIBLE)
        >>> [(str(r), gpus) for r, gpus in demand.items()]
        [('NVIDIA_L4 PREEMPTIBLE in us-central1', 8)]
    """
    return {
        Resource(region, accelerator, pool): gpus
        for accelerator, gpus in gpus_by_accelerator(kind, spec).items()
        if gpus > 0
    }


@dataclass(frozen=True)
class Admission:
    """Where an admissible request waits: its queue and its priority (resolved to a number)."""

    queue: str
    priority: int


def check_request(
    queues: Queues,
    queue: object,
    priority: object,
    demand: Demand,
    ceiling: Ceiling | None = None,
) -> list[FieldError]:
    """Every problem with a request's ``queue`` and ``priority``, and its demand ([] when it
    may wait for admission).

    Examples:
        >>> from shared.domain.admission.config import Resource, read_queues
        >>> r = {"region": "us-central1", "acceleratorType": "NVIDIA_L4", "pool": "PREEMPTIBLE"}
        >>> qs = read_queues({"queues": [{"name": "a", "quotas": [{**r, "nominal": 8}]}]})
        >>> demand = {Resource("us-central1", "NVIDIA_L4", Pool.PREEMPTIBLE): 16}
        >>> for e in check_request(qs, "a", "high", demand): print(e.path, "|", e.message)
        priority | "high" is not allowed in queue 'a' (normal: 0)
        queue | asks 16 GPUs of NVIDIA_L4 PREEMPTIBLE in us-central1, more than queue 'a' can ever hold (8): it could never be admitted
    """  # noqa: E501
    name = DEFAULT_QUEUE if queue is None else queue
    if not isinstance(name, str) or name not in queues.queues:
        known = ", ".join(sorted(queues.queues))
        return [FieldError("queue", f"{show(name)} is not a queue; the queues are {known}")]
    target = queues.queue(name)
    errors: list[FieldError] = []
    if target.priority_of(priority) is None:
        problem = f"{show(priority)} is not allowed in queue {name!r} ({target.allowed()})"
        errors.append(FieldError("priority", problem))
    for far in out_of_reach(queues, target, demand, ceiling):
        if far.bound == "queue":
            problem = (
                f"asks {far.gpus} GPUs of {far.resource}, more than queue {name!r} can ever"
                f" hold ({far.most}): it could never be admitted"
            )
        else:
            problem = (
                f"asks {far.gpus} GPUs of {far.resource}, more than the project's quota"
                f" ({far.most}): it could never be admitted until the quota is raised"
            )
        errors.append(FieldError("queue", problem))
    return errors


def admission_of(
    queues: Queues,
    queue: object,
    priority: object,
    demand: Demand,
    ceiling: Ceiling | None = None,
) -> Admission:
    """The queue and priority a request waits with.

    Raises:
        InvalidRequest: with every problem :func:`check_request` finds.

    Examples:
        >>> from shared.domain.admission.config import read_queues
        >>> admission_of(read_queues({}), None, None, {})
        Admission(queue='default', priority=0)
    """
    errors = check_request(queues, queue, priority, demand, ceiling)
    if errors:
        raise InvalidRequest(errors)
    name = DEFAULT_QUEUE if queue is None else str(queue)
    resolved = queues.queue(name).priority_of(priority)
    assert resolved is not None
    return Admission(name, resolved)
