"""Operator guards: the limits an operator sets on top of the DWS and Vertex rules."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shared.domain.request.field_policy import Allowance, parse_field_policy

if TYPE_CHECKING:
    from shared.kernel.config import Settings


@dataclass(frozen=True)
class Guards:
    """Operator limits applied on top of the DWS and Vertex rules.

    An empty ``allowed_image_prefixes`` allows any image. An empty
    ``allowed_service_accounts`` allows only the default Vertex AI service agent, that is, no
    ``serviceAccount`` field at all. ``field_policy`` is what ``FLEXJOBS_FIELD_POLICY`` allows
    (:mod:`shared.domain.request.field_policy`); empty keeps every field at its default.
    ``request_bucket`` (``FLEXJOBS_REQUEST_BUCKET``) is where request files come from: no job
    may write its checkpoints there, where an uploader could forge them. A non-empty
    ``allowed_regions`` (``FLEXJOBS_ALLOWED_REGIONS``) is every region a request may run in;
    a request naming no location runs in ``default_location`` (a deployment, in its
    endpoint's region).
    """

    allowed_image_prefixes: tuple[str, ...] = ()
    allowed_service_accounts: tuple[str, ...] = ()
    max_gpus_per_job: int = 64
    max_replicas: int = 64
    field_policy: Mapping[str, Allowance] = field(default_factory=dict, hash=False)
    request_bucket: str | None = None
    allowed_regions: tuple[str, ...] = ()
    #: Where a request that names no location runs (``FLEXJOBS_LOCATION``); None: unknown
    #: (offline checks with no settings), and then only named locations are checked.
    default_location: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> Guards:
        """Take the guards from the function's :class:`~shared.kernel.config.Settings`."""
        return cls(
            allowed_image_prefixes=tuple(settings.allowed_image_prefixes),
            allowed_service_accounts=tuple(settings.allowed_service_accounts),
            max_gpus_per_job=settings.max_gpus_per_job,
            max_replicas=settings.max_replicas,
            field_policy=parse_field_policy(settings.field_policy),
            request_bucket=settings.request_bucket,
            allowed_regions=tuple(settings.allowed_regions),
            default_location=settings.location,
        )
