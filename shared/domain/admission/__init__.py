"""Admission: queues, quotas, priorities and fair share in front of Vertex AI's GPU quota
(issue 25). Pure: no clock, no client; the caller reads the quota, the records and the time.

- :mod:`.config`: the queue file (queues, quotas per region, accelerator and pool, weights,
  cohorts, priorities, preemption) and its records; :func:`~.config.pool_of`.
- :mod:`.quota`: whether a demand fits its queue, its cohort and the project's quota, and the
  most it could ever get (the one place those limits are computed).
- :mod:`.demand`: a request's demand, and its check at intake (queue, priority, inadmissible).
- :mod:`.rule`: :func:`~.rule.admit`, the order (priority, fair share, arrival) and the
  blocking rule; :func:`~.rule.decayed_usage`.
- :mod:`.estimate`: a waiting workload's position in its queue and when it may start.
- :mod:`.preemption`: which running jobs to preempt for a higher priority (opt-in).
"""
