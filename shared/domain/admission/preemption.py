"""Preemption (opt-in per queue): which running jobs a higher-priority waiting workload may
end to take their GPUs.

The rule:

- Only a queue whose ``preemption`` allows it preempts: ``withinQueue``, its own running jobs;
  ``withinCohort``, jobs of the other queues of its cohort that borrow the resource it needs
  (they hold more than their nominal: Kueue's ``reclaimWithinCohort``, what was lent is taken
  back; a queue within its nominal is never preempted by another). Whether a queue still
  borrows is asked again before each victim, on the usage the victims chosen before it left.
- Only a job of a lower priority is ever a victim, and only one that holds a resource the
  waiting workload asks for.
- A job with no complete checkpoint is never a victim unless its own queue says
  ``requireCheckpoint: false``: preempted, it would lose all its work.
- **The least work lost goes first**: candidates are taken by their latest complete
  checkpoint, most recent first (a job preempted resumes from it, so the work lost is what it
  did since), then lower priority first, then the most recently started. They are added until
  the workload fits every limit (:func:`~.quota.shortfalls`); then each chosen one, last first,
  is spared if the workload still fits without it, so no job is ended for nothing.
- No set of candidates that makes it fit: nobody is preempted (a partial preemption would end
  jobs and still leave it waiting).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from shared.domain.admission.config import Queue, Queues, Resource
from shared.domain.admission.estimate import Running
from shared.domain.admission.quota import Usage, add, shortfalls
from shared.domain.admission.rule import Standing, Workload

_EARLIEST = datetime.min.replace(tzinfo=UTC)


def choose_victims(
    queues: Queues, standing: Standing, running: Sequence[Running], workload: Workload
) -> tuple[Running, ...] | None:
    """The running jobs to preempt so that ``workload`` fits: () when it fits already, None
    when its queue does not preempt or no allowed set of victims makes it fit.
    ``standing.usage`` includes what ``running`` holds.

    Examples:
        >>> from datetime import UTC, datetime, timedelta
        >>> from shared.domain.admission.config import Pool, read_queues
        >>> where = {"region": "us-central1", "acceleratorType": "NVIDIA_L4",
        ...          "pool": "PREEMPTIBLE"}
        >>> qs = read_queues({"queues": [{"name": "a", "quotas": [{**where, "nominal": 8}],
        ...     "priorities": {"high": 100, "low": 0}, "preemption": {"withinQueue": True}}]})
        >>> r = Resource("us-central1", "NVIDIA_L4", Pool.PREEMPTIBLE)
        >>> t = datetime(2026, 12, 1, tzinfo=UTC)
        >>> jobs = [Running("stale", "a", 0, {r: 4}, checkpoint=t - timedelta(hours=3)),
        ...         Running("fresh", "a", 0, {r: 4}, checkpoint=t - timedelta(minutes=5))]
        >>> victims = choose_victims(qs, Standing({"a": {r: 8}}), jobs,
        ...                          Workload("urgent", "a", 100, t, {r: 4}))
        >>> [v.request_id for v in victims]
        ['fresh']
    """
    queue = queues.queues.get(workload.queue)
    if queue is None:
        return None
    usage: dict[str, dict[Resource, int]] = {q: dict(h) for q, h in standing.usage.items()}
    if not shortfalls(queues, usage, standing.ceiling, queue, workload.demand):
        return ()
    candidates = sorted(
        (job for job in running if _may_preempt(queues, usage, queue, workload, job)),
        key=lambda job: (
            job.checkpoint is None,
            -(job.checkpoint or _EARLIEST).timestamp(),
            job.priority,
            -(job.started or _EARLIEST).timestamp(),
            job.request_id,
        ),
    )
    chosen: list[Running] = []
    for job in candidates:
        # Asked again after each victim: a queue that borrowed is reclaimed only while it
        # still borrows, never below its own nominal by the victims chosen before this one.
        if not _may_preempt(queues, usage, queue, workload, job):
            continue
        chosen.append(job)
        add(usage, job.queue, job.demand, -1)
        if not shortfalls(queues, usage, standing.ceiling, queue, workload.demand):
            break
    else:
        return None
    for job in reversed(chosen[:-1]):
        add(usage, job.queue, job.demand, 1)
        if shortfalls(queues, usage, standing.ceiling, queue, workload.demand):
            add(usage, job.queue, job.demand, -1)  # needed after all
        else:
            chosen.remove(job)
    return tuple(chosen)


def _may_preempt(
    queues: Queues, usage: Usage, queue: Queue, workload: Workload, job: Running
) -> bool:
    if job.priority >= workload.priority or job.request_id == workload.request_id:
        return False
    shared = [r for r in job.demand if workload.demand.get(r, 0) > 0 and job.demand[r] > 0]
    victim = queues.queues.get(job.queue)
    if not shared or victim is None:
        return False
    if victim.preemption.require_checkpoint and job.checkpoint is None:
        return False
    if job.queue == queue.name:
        return queue.preemption.within_queue
    if not queue.preemption.within_cohort or queue.cohort is None or victim.cohort != queue.cohort:
        return False
    held = usage.get(victim.name, {})
    return any(held.get(r, 0) > victim.quota(r).nominal for r in shared)
