"""The simulator's Cloud Quotas front: ``google.api.cloudquotas.v1.CloudQuotas`` ListQuotaInfos,
serving the GPU quota limits the simulator enforces (:mod:`.quota`), so that what flexjobs'
tick reads is what the simulated Vertex AI refuses creates by.

Only what the tick asks is served: ``ListQuotaInfos`` of
``projects/{project}/locations/global/services/aiplatform.googleapis.com``, one QuotaInfo per
quota metric that has a limit set for the project (its own, else every project's), with one
dimensions info per region (``{"region": ...}``). A metric without a limit is unlimited here
and not listed (real Vertex lists every metric, most with a default dimensions info). Quota
ids are made up from the metric (flexjobs matches metrics, not ids). Paged by ``page_size``
(default 100) and an offset ``page_token``. The call goes through the simulator's call log and
fault injection like every other RPC (``POST /faults`` with ``method: ListQuotaInfos``).
"""

from __future__ import annotations

import re
from typing import Any

from google.cloud import cloudquotas_v1 as cq

from flexjobs_local.simulator.common import SimError
from flexjobs_local.simulator.engine import Engine

SERVICE = "google.api.cloudquotas.v1.CloudQuotas"
AIPLATFORM = "aiplatform.googleapis.com"
_PARENT = re.compile(r"^projects/([^/]+)/locations/global/services/([^/]+)$")
DEFAULT_PAGE_SIZE = 100


def quota_id(metric: str) -> str:
    """A quota id for ``metric``, in the style of real ones (not matched by flexjobs).

    Examples:
        >>> quota_id("aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_l4_gpus")
        'CustomModelTrainingPreemptibleNvidiaL4GpusPerProjectPerRegion'
    """
    name = metric.split("/", 1)[-1]
    return "".join(part.capitalize() for part in name.split("_")) + "PerProjectPerRegion"


def list_quota_infos(engine: Engine, request: Any) -> Any:
    """One page of ``ListQuotaInfos``.

    Raises:
        SimError: INVALID_ARGUMENT for a parent that is not a project's global service, or a
            page token that does not read.
    """
    match = _PARENT.match(request.parent)
    if match is None:
        raise SimError(
            "INVALID_ARGUMENT",
            "parent must be projects/{project}/locations/global/services/{service}.",
        )
    project, service = match.groups()
    infos: list[Any] = []
    if service == AIPLATFORM:
        for metric, regions in sorted(engine.quota_limits(project).items()):
            qid = quota_id(metric)
            infos.append(
                cq.QuotaInfo(
                    name=f"projects/{project}/locations/global/services/{service}/quotaInfos/{qid}",
                    quota_id=qid,
                    metric=metric,
                    service=service,
                    is_precise=True,
                    container_type=cq.QuotaInfo.ContainerType.PROJECT,
                    dimensions=["region"],
                    dimensions_infos=[
                        cq.DimensionsInfo(
                            dimensions={"region": region},
                            details=cq.QuotaDetails(value=limit),
                            applicable_locations=[region],
                        )
                        for region, limit in sorted(regions.items())
                    ],
                )
            )
    size = request.page_size if request.page_size > 0 else DEFAULT_PAGE_SIZE
    token = request.page_token or "0"
    if not token.isdigit():
        raise SimError("INVALID_ARGUMENT", "page_token does not read.")
    start = int(token)
    page = infos[start : start + size]
    more = start + size < len(infos)
    return cq.ListQuotaInfosResponse(
        quota_infos=page, next_page_token=str(start + size) if more else ""
    )
