"""GPU quota per (project, location, accelerator type, pool), checked when a job is created.

Vertex AI refuses a create whose GPUs, added to those the project's jobs already hold in the
region, would pass the limit of the quota metric they draw on. It answers RESOURCE_EXHAUSTED
with ``The following quota metrics exceed quota limits: <metrics>`` (the text of real answers,
for example GoogleCloudPlatform/vertex-ai-samples#700 and
GoogleCloudPlatform/stable-diffusion-on-gcp#12). The job is never made.

Two pools per accelerator type, as Vertex keeps them: a SPOT or FLEX_START job draws on the
*preemptible* quota (``custom_model_training_preemptible_<accelerator>_gpus``; the Dynamic
Workload Scheduler page says FLEX_START consumes it "instead of" the on-demand one, and
Spot VMs use it too); any other strategy (STANDARD, ON_DEMAND, unset) on the *on-demand*
quota (``custom_model_training_<accelerator>_gpus``).

What holds quota: every job that has not ended (QUEUED, PENDING, RUNNING and CANCELLING), so a
job waiting for capacity keeps its GPUs of quota, and they return when it reaches SUCCEEDED,
FAILED or CANCELLED. Vertex checks quota at create time against the project's active jobs, and
a queued job is active.

No limit is set by default: every pool is unlimited until a limit is set (``POST /quota``), so
a simulator without one behaves as it always did.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flexjobs_local.simulator.common import SimError

PREEMPTIBLE = "preemptible"
ON_DEMAND = "on-demand"
POOLS = (PREEMPTIBLE, ON_DEMAND)
_PREEMPTIBLE_STRATEGIES = frozenset({"SPOT", "FLEX_START"})

METRIC_PREFIX = "aiplatform.googleapis.com/custom_model_training_"
EXCEEDED = "The following quota metrics exceed quota limits: "

# The accelerator part of each quota metric, by AcceleratorType name. Vertex drops "TESLA_" and
# the memory of most types (NVIDIA_H100_80GB is nvidia_h100_gpus) but not of the A100 80GB.
# Sources: the training map of GoogleCloudPlatform/vertex-ai-samples
# community-content/vertex_model_garden/model_oss/notebook_util/common_util.py
# (get_resource_id: V100, L4, A100, A100 80GB, H100 80GB, T4, TPU v3, TPU v5e); the Dynamic
# Workload Scheduler page, cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws
# (custom_model_training_preemptible_nvidia_h100_gpus); real 429 answers naming
# custom_model_training_nvidia_k80_gpus (vertex-ai-samples#700),
# custom_model_training_nvidia_p4_gpus and custom_model_training_tpu_v2
# (google-deepmind/xmanager#29). The rest follow that pattern and are not confirmed by a source.
ACCELERATOR_METRIC_NAMES: dict[str, str] = {
    "NVIDIA_TESLA_K80": "nvidia_k80_gpus",
    "NVIDIA_TESLA_P100": "nvidia_p100_gpus",  # the pattern
    "NVIDIA_TESLA_V100": "nvidia_v100_gpus",
    "NVIDIA_TESLA_P4": "nvidia_p4_gpus",
    "NVIDIA_TESLA_T4": "nvidia_t4_gpus",
    "NVIDIA_TESLA_A100": "nvidia_a100_gpus",
    "NVIDIA_A100_80GB": "nvidia_a100_80gb_gpus",
    "NVIDIA_L4": "nvidia_l4_gpus",
    "NVIDIA_H100_80GB": "nvidia_h100_gpus",
    "NVIDIA_H100_MEGA_80GB": "nvidia_h100_mega_gpus",  # the pattern
    "NVIDIA_H200_141GB": "nvidia_h200_gpus",  # the pattern
    "NVIDIA_B200": "nvidia_b200_gpus",  # the pattern
    "NVIDIA_GB200": "nvidia_gb200_gpus",  # the pattern
    "NVIDIA_RTX_PRO_6000": "nvidia_rtx_pro_6000_gpus",  # the pattern
    "TPU_V2": "tpu_v2",
    "TPU_V3": "tpu_v3",
    "TPU_V4_POD": "tpu_v4_pod",  # the pattern
    "TPU_V5_LITEPOD": "tpu_v5e",
}


def pool_of(strategy: str) -> str:
    """The quota pool a job of this ``Scheduling.Strategy`` name draws on.

    Examples:
        >>> pool_of("SPOT"), pool_of("FLEX_START"), pool_of("STANDARD"), pool_of("ON_DEMAND")
        ('preemptible', 'preemptible', 'on-demand', 'on-demand')
    """
    return PREEMPTIBLE if strategy in _PREEMPTIBLE_STRATEGIES else ON_DEMAND


def metric(accelerator_type: str, pool: str) -> str:
    """The full quota metric of an accelerator type in a pool.

    Examples:
        >>> metric("NVIDIA_TESLA_A100", "preemptible")
        'aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_a100_gpus'
        >>> metric("NVIDIA_H100_80GB", "on-demand")
        'aiplatform.googleapis.com/custom_model_training_nvidia_h100_gpus'
    """
    name = ACCELERATOR_METRIC_NAMES[accelerator_type]
    return METRIC_PREFIX + ("preemptible_" if pool == PREEMPTIBLE else "") + name


def exceeded(
    demand: Mapping[str, int],
    usage: Mapping[str, int],
    limits: Mapping[str, int],
    pool: str,
) -> list[str]:
    """The metrics a new job's ``demand`` would take past their limits; empty when it fits.

    ``demand`` and ``usage`` are GPUs per accelerator type (the new job's; what the project's
    live jobs in the pool hold), ``limits`` the limit per type (a type without one is
    unlimited). A job may use a limit up to and including it.

    Examples:
        >>> exceeded({"NVIDIA_TESLA_A100": 8}, {"NVIDIA_TESLA_A100": 8},
        ...          {"NVIDIA_TESLA_A100": 8}, "preemptible")
        ['aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_a100_gpus']
        >>> exceeded({"NVIDIA_TESLA_A100": 8}, {}, {"NVIDIA_TESLA_A100": 8}, "preemptible")
        []
    """
    return sorted(
        metric(accel, pool)
        for accel, gpus in demand.items()
        if gpus > 0 and accel in limits and usage.get(accel, 0) + gpus > limits[accel]
    )


def check_limit(accelerator_type: str, pool: str, limit: int | None) -> None:
    """Refuse an accelerator type without a quota metric, an unknown pool or a negative limit.

    Raises:
        SimError: INVALID_ARGUMENT.
    """
    if accelerator_type not in ACCELERATOR_METRIC_NAMES:
        raise SimError("INVALID_ARGUMENT", f"Unknown accelerator type {accelerator_type!r}.")
    if pool not in POOLS:
        raise SimError("INVALID_ARGUMENT", f"pool must be one of {', '.join(POOLS)}.")
    if limit is not None and limit < 0:
        raise SimError("INVALID_ARGUMENT", "limit must not be negative.")


Key = tuple[str | None, str, str, str]  # project (None: every project), location, type, pool


class Quota:
    """The limits set; everything else is unlimited.

    A limit set without a project applies to each project on its own (as a region's default
    quota does); one set for a project overrides it there. Not thread-safe: the engine holds
    its lock.
    """

    def __init__(self) -> None:
        self._limits: dict[Key, int] = {}

    def set_limit(
        self,
        location: str,
        accelerator_type: str,
        pool: str,
        limit: int | None,
        project: str | None = None,
    ) -> None:
        """Set one limit in GPUs; ``None`` removes it (unlimited again).

        Raises:
            SimError: INVALID_ARGUMENT (see :func:`check_limit`).
        """
        check_limit(accelerator_type, pool, limit)
        key = (project, location, accelerator_type, pool)
        if limit is None:
            self._limits.pop(key, None)
        else:
            self._limits[key] = int(limit)

    def limit(self, project: str, location: str, accelerator_type: str, pool: str) -> int | None:
        """The limit that applies to ``project`` (its own, else every project's), or None."""
        own = self._limits.get((project, location, accelerator_type, pool))
        return (
            own if own is not None else self._limits.get((None, location, accelerator_type, pool))
        )

    def limits_for(self, project: str, location: str, pool: str) -> dict[str, int]:
        """The limit per accelerator type that applies to ``project`` in one location and pool."""
        limits: dict[str, int] = {}
        for key_project, key_location, accel, key_pool in self._limits:
            if key_location == location and key_pool == pool and key_project in (None, project):
                found = self.limit(project, location, accel, pool)
                if found is not None:
                    limits[accel] = found
        return limits

    def check(
        self,
        project: str,
        location: str,
        pool: str,
        demand: Mapping[str, int],
        usage: Mapping[str, int],
    ) -> None:
        """Refuse a create that would pass a limit, as Vertex refuses it.

        Raises:
            SimError: RESOURCE_EXHAUSTED naming every metric the job would exceed.
        """
        over = exceeded(demand, usage, self.limits_for(project, location, pool), pool)
        if over:
            raise SimError("RESOURCE_EXHAUSTED", EXCEEDED + ", ".join(over))

    def limits_by_metric(self, project: str) -> dict[str, dict[str, int]]:
        """The limits that apply to ``project``, as the Cloud Quotas API lists them: the limit
        per region of each quota metric that has one (:mod:`.cloudquotas` serves them).

        Examples:
            >>> q = Quota()
            >>> q.set_limit("us-central1", "NVIDIA_L4", PREEMPTIBLE, 8)
            >>> q.set_limit("us-central1", "NVIDIA_L4", PREEMPTIBLE, 2, project="p")
            >>> q.limits_by_metric("p"), q.limits_by_metric("other")[metric("NVIDIA_L4", PREEMPTIBLE)]
            ({'aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_l4_gpus': {'us-central1': 2}}, {'us-central1': 8})
        """  # noqa: E501
        out: dict[str, dict[str, int]] = {}
        for key_project, location, accel, pool in sorted(
            self._limits, key=lambda key: tuple(part or "" for part in key)
        ):
            if key_project not in (None, project):
                continue
            found = self.limit(project, location, accel, pool)
            if found is not None:
                out.setdefault(metric(accel, pool), {})[location] = found
        return out

    def to_json(self, usage: Mapping[tuple[str, str, str, str], int]) -> dict[str, Any]:
        """``{"limits": [...], "usage": [...]}``.

        ``usage`` is GPUs held per (project, location, accelerator type, pool). Each limit is
        ``{project (null: every project), location, acceleratorType, pool, metric, limit}``;
        each held pool ``{project, location, acceleratorType, pool, metric, gpus, limit}``
        (``limit`` null when unlimited).
        """
        limits = [
            {
                "project": project,
                "location": location,
                "acceleratorType": accel,
                "pool": pool,
                "metric": metric(accel, pool),
                "limit": limit,
            }
            for (project, location, accel, pool), limit in sorted(
                self._limits.items(), key=lambda item: tuple(part or "" for part in item[0])
            )
        ]
        held = [
            {
                "project": project,
                "location": location,
                "acceleratorType": accel,
                "pool": pool,
                "metric": metric(accel, pool) if accel in ACCELERATOR_METRIC_NAMES else None,
                "gpus": gpus,
                "limit": self.limit(project, location, accel, pool),
            }
            for (project, location, accel, pool), gpus in sorted(usage.items())
            if gpus
        ]
        return {"limits": limits, "usage": held}
