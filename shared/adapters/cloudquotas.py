"""CloudQuotasLimits: the QuotaLimits port on the Cloud Quotas API (``cloudquotas_v1``).

One read lists the QuotaInfos of Vertex AI (``ListQuotaInfos`` on
``projects/{project}/locations/global/services/aiplatform.googleapis.com``) and keeps the GPU
limits of the resources asked for. A resource is found by its quota *metric*, the name Vertex
also gives in its RESOURCE_EXHAUSTED answers: STANDARD draws on
``aiplatform.googleapis.com/custom_model_training_<accelerator>_gpus``, SPOT and FLEX_START on
``aiplatform.googleapis.com/custom_model_training_preemptible_<accelerator>_gpus``; its region
by the ``region`` dimension of the QuotaInfo's ``dimensions_infos``. A dimensions info that
names the region holds that region's limit; one that names no region holds the limit of every
region no other one names (the API's rule for a dimension absent from the map).

**Bounded**: at most :data:`MAX_PAGES` pages of :data:`PAGE_SIZE`, :data:`MAX_BYTES` in all,
within the call timeout. A read that would pass a bound is not a read: it raises
:class:`~shared.kernel.errors.QuotaUnreadable` rather than return limits for part of the
list (a limit left out of a partial read would let the queue file's fallback lift it).

The client is built on the first read, not at import or construction (a function instance
with admission off never builds one).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from shared.domain.admission.config import Pool, Resource
from shared.kernel.config import Settings
from shared.kernel.errors import QuotaUnreadable

#: The service whose quotas are read.
SERVICE: Final = "aiplatform.googleapis.com"
#: The prefix of every Vertex AI custom training GPU quota metric.
METRIC_PREFIX: Final = f"{SERVICE}/custom_model_training_"
#: QuotaInfos asked per page, pages read at most, and bytes read at most in one read.
PAGE_SIZE: Final = 100
MAX_PAGES: Final = 50
MAX_BYTES: Final = 32 * 1024 * 1024
#: Dimensions infos of one QuotaInfo looked at, at most (one per region and a default).
MAX_DIMENSIONS: Final = 512

# The accelerator part of each quota metric, by AcceleratorType name: Vertex drops "TESLA_"
# and the memory of most types (NVIDIA_H100_80GB is nvidia_h100_gpus) but not of the A100
# 80GB. The same table as the simulator's (flexjobs_local/simulator/quota.py, where its
# sources are named); a unit test holds the two equal.
METRIC_NAMES: Final[Mapping[str, str]] = {
    "NVIDIA_TESLA_K80": "nvidia_k80_gpus",
    "NVIDIA_TESLA_P100": "nvidia_p100_gpus",
    "NVIDIA_TESLA_V100": "nvidia_v100_gpus",
    "NVIDIA_TESLA_P4": "nvidia_p4_gpus",
    "NVIDIA_TESLA_T4": "nvidia_t4_gpus",
    "NVIDIA_TESLA_A100": "nvidia_a100_gpus",
    "NVIDIA_A100_80GB": "nvidia_a100_80gb_gpus",
    "NVIDIA_L4": "nvidia_l4_gpus",
    "NVIDIA_H100_80GB": "nvidia_h100_gpus",
    "NVIDIA_H100_MEGA_80GB": "nvidia_h100_mega_gpus",
    "NVIDIA_H200_141GB": "nvidia_h200_gpus",
    "NVIDIA_B200": "nvidia_b200_gpus",
    "NVIDIA_GB200": "nvidia_gb200_gpus",
    "NVIDIA_RTX_PRO_6000": "nvidia_rtx_pro_6000_gpus",
}


def metric_of(resource: Resource) -> str | None:
    """The quota metric ``resource`` draws on; None for an accelerator type with none known.

    Examples:
        >>> metric_of(Resource("us-central1", "NVIDIA_TESLA_A100", Pool.PREEMPTIBLE))
        'aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_a100_gpus'
        >>> metric_of(Resource("us-central1", "NVIDIA_H100_80GB", Pool.ON_DEMAND))
        'aiplatform.googleapis.com/custom_model_training_nvidia_h100_gpus'
    """
    name = METRIC_NAMES.get(resource.accelerator)
    if name is None:
        return None
    preemptible = "preemptible_" if resource.pool is Pool.PREEMPTIBLE else ""
    return f"{METRIC_PREFIX}{preemptible}{name}"


@dataclass(frozen=True)
class DimensionsValue:
    """One dimensions info of a QuotaInfo, as plain values: its dimensions, the value in
    effect, and the locations it applies to (empty: not said)."""

    dimensions: Mapping[str, str]
    value: int
    locations: tuple[str, ...] = ()


@dataclass(frozen=True)
class QuotaValue:
    """One QuotaInfo, as plain values: its metric and its dimensions infos (most specific
    first, as the API orders them)."""

    metric: str
    infos: tuple[DimensionsValue, ...] = field(default_factory=tuple)


def value_of(info: Any) -> QuotaValue:
    """A ``cloudquotas_v1.QuotaInfo`` as plain values (at most :data:`MAX_DIMENSIONS`
    dimensions infos)."""
    infos = tuple(
        DimensionsValue(
            dict(d.dimensions),
            int(d.details.value),
            tuple(d.applicable_locations),
        )
        for d in list(info.dimensions_infos)[:MAX_DIMENSIONS]
    )
    return QuotaValue(str(info.metric), infos)


def region_limit(quota: QuotaValue, region: str) -> int | None:
    """The limit of ``quota`` in ``region``: the dimensions info naming the region, else the
    one naming none (when it applies there); None when neither holds a limit (a negative value
    is no limit, as the quota system writes "unlimited"). Infos with dimensions other than the
    region are not project-wide limits of the metric and are left aside.

    Examples:
        >>> q = QuotaValue("m", (DimensionsValue({"region": "us-east5"}, 16),
        ...                      DimensionsValue({}, 0)))
        >>> region_limit(q, "us-east5"), region_limit(q, "us-central1")
        (16, 0)
        >>> region_limit(QuotaValue("m", (DimensionsValue({}, -1),)), "us-east5") is None
        True
    """
    chosen: DimensionsValue | None = None
    for info in quota.infos:
        if set(info.dimensions) - {"region"}:
            continue
        named = info.dimensions.get("region")
        if named == region:
            chosen = info
            break
        applies = not info.locations or region in info.locations or "global" in info.locations
        if named is None and chosen is None and applies:
            chosen = info
    if chosen is None or chosen.value < 0:
        return None
    return chosen.value


def limits_from(
    quotas: Iterable[QuotaValue], resources: Collection[Resource]
) -> dict[Resource, int]:
    """The limit of each of ``resources`` that ``quotas`` hold; the rest are left out.

    Examples:
        >>> r = Resource("us-central1", "NVIDIA_L4", Pool.PREEMPTIBLE)
        >>> q = QuotaValue(metric_of(r) or "", (DimensionsValue({"region": "us-central1"}, 8),))
        >>> limits_from([q], [r])
        {Resource(region='us-central1', accelerator='NVIDIA_L4', pool=<Pool.PREEMPTIBLE: 'PREEMPTIBLE'>): 8}
    """  # noqa: E501
    wanted: dict[str, list[Resource]] = {}
    for resource in resources:
        name = metric_of(resource)
        if name is not None:
            wanted.setdefault(name, []).append(resource)
    found: dict[Resource, int] = {}
    for quota in quotas:
        for resource in wanted.get(quota.metric, ()):
            limit = region_limit(quota, resource.region)
            if limit is not None:
                found[resource] = limit
    return found


@dataclass(frozen=True)
class Page:
    """One page of a listing: its QuotaInfos (of Vertex AI training GPUs only) and its size."""

    quotas: Sequence[QuotaValue]
    size: int


def read_bounded(
    pages: Iterator[Page],
    *,
    max_pages: int = MAX_PAGES,
    max_bytes: int = MAX_BYTES,
    deadline: float | None = None,
    clock: Any = time.monotonic,
) -> list[QuotaValue]:
    """Every QuotaInfo of ``pages``, within the bounds.

    Raises:
        QuotaUnreadable: the listing has more than ``max_pages`` pages, more than
            ``max_bytes``, or was not read by ``deadline`` (of ``clock``).

    Examples:
        >>> read_bounded(iter([Page([QuotaValue("m")], 10)] * 3), max_pages=2)
        Traceback (most recent call last):
        shared.kernel.errors.QuotaUnreadable: the quota list has more than 2 pages
    """
    out: list[QuotaValue] = []
    read = 0
    for number, page in enumerate(pages, start=1):
        if number > max_pages:
            raise QuotaUnreadable(f"the quota list has more than {max_pages} pages")
        read += page.size
        if read > max_bytes:
            raise QuotaUnreadable(f"the quota list is larger than {max_bytes} bytes")
        if deadline is not None and clock() > deadline:
            raise QuotaUnreadable("the quota list was not read within the call timeout")
        out.extend(page.quotas)
    return out


def build_client(settings: Settings) -> Any:
    """The ``cloudquotas_v1`` client: on a plaintext channel with no credentials when the
    endpoint is local (the simulator), else on ``FLEXJOBS_CLOUDQUOTAS_ENDPOINT`` or the
    global endpoint."""
    from google.cloud import cloudquotas_v1

    if settings.cloudquotas_is_local:
        import grpc
        from google.cloud.cloudquotas_v1.services.cloud_quotas.transports.grpc import (
            CloudQuotasGrpcTransport,
        )

        channel = grpc.insecure_channel(str(settings.cloudquotas_endpoint))
        return cloudquotas_v1.CloudQuotasClient(transport=CloudQuotasGrpcTransport(channel=channel))
    if settings.cloudquotas_endpoint:
        return cloudquotas_v1.CloudQuotasClient(
            client_options={"api_endpoint": settings.cloudquotas_endpoint}
        )
    return cloudquotas_v1.CloudQuotasClient()


class CloudQuotasLimits:
    """The QuotaLimits port on Cloud Quotas v1. ``client`` replaces the one built on the
    first read (tests)."""

    def __init__(self, settings: Settings, client: Any = None) -> None:
        self._settings = settings
        self._client = client
        self._lock = threading.Lock()

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = build_client(self._settings)
            return self._client

    def limits(self, resources: Collection[Resource]) -> Mapping[Resource, int]:
        """See :meth:`shared.app.ports.QuotaLimits.limits`."""
        if not resources:
            return {}
        if not self._settings.project:
            raise QuotaUnreadable("no project is configured (GOOGLE_CLOUD_PROJECT)")
        from google.api_core import exceptions as gexc
        from google.auth import exceptions as auth_exc

        timeout = self._settings.call_timeout_seconds
        try:
            quotas = read_bounded(self._pages(timeout), deadline=time.monotonic() + timeout)
        except (gexc.GoogleAPIError, auth_exc.GoogleAuthError) as exc:
            # Not enabled answers PERMISSION_DENIED (reason SERVICE_DISABLED); a missing
            # grant PERMISSION_DENIED too; the rest are faults that may pass. All keep the
            # last limits read, and the next read tries again.
            raise QuotaUnreadable(f"Cloud Quotas ListQuotaInfos failed: {exc}") from exc
        return limits_from(quotas, resources)

    def _pages(self, timeout: float) -> Iterator[Page]:
        from google.cloud import cloudquotas_v1

        parent = f"projects/{self._settings.project}/locations/global/services/{SERVICE}"
        request = cloudquotas_v1.ListQuotaInfosRequest(parent=parent, page_size=PAGE_SIZE)
        from google.api_core import exceptions as gexc
        from google.api_core import retry as gretry

        # A read is idempotent: faults that may pass are retried briefly, within the timeout.
        retry = gretry.Retry(
            predicate=gretry.if_exception_type(gexc.ServiceUnavailable, gexc.DeadlineExceeded),
            initial=0.2,
            maximum=2.0,
            multiplier=2.0,
            timeout=timeout,
        )
        pager = self._get_client().list_quota_infos(request=request, retry=retry, timeout=timeout)
        for response in pager.pages:
            size = type(response).pb(response).ByteSize()
            quotas = [
                value_of(info)
                for info in response.quota_infos
                if str(info.metric).startswith(METRIC_PREFIX)
            ]
            yield Page(quotas, size)
