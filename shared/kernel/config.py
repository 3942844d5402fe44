"""Settings read from the environment once per function instance (the contract's env vars)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from shared.kernel.regions import REGION_HINT, is_region

DEFAULT_LOCATION = "us-central1"


#: Every environment variable :meth:`Settings.from_env` reads (a unit test holds it to that).
#: The Google clients also read the emulator variables (``*_EMULATOR_HOST``) themselves.
ENV_VARS = (
    "GOOGLE_CLOUD_PROJECT",
    "GCLOUD_PROJECT",
    "FLEXJOBS_LOCATION",
    "FLEXJOBS_VERTEX_ENDPOINT",
    "FLEXJOBS_CLOUDQUOTAS_ENDPOINT",
    "FLEXJOBS_REQUESTS_TOPIC",
    "FLEXJOBS_EVENTS_TOPIC",
    "FLEXJOBS_NOTIFICATIONS_TOPIC",
    "FLEXJOBS_CLAIM_TTL_SECONDS",
    "FLEXJOBS_CALL_TIMEOUT_SECONDS",
    "FLEXJOBS_HINT_COALESCE_SECONDS",
    "FLEXJOBS_HINT_RECENT_SECONDS",
    "FLEXJOBS_BACKOFF_BASE_SECONDS",
    "FLEXJOBS_BACKOFF_CAP_SECONDS",
    "FLEXJOBS_FAILURE_RULES",
    "FLEXJOBS_QUEUES",
    "FLEXJOBS_ALLOWED_IMAGE_PREFIXES",
    "FLEXJOBS_ALLOWED_SERVICE_ACCOUNTS",
    "FLEXJOBS_MAX_GPUS_PER_JOB",
    "FLEXJOBS_MAX_REPLICAS",
    "FLEXJOBS_MAX_MESSAGE_BYTES",
    "FLEXJOBS_FIELD_POLICY",
    "FLEXJOBS_UPLOAD_PREFIX",
    "FLEXJOBS_REQUEST_BUCKET",
    "FLEXJOBS_MAX_UPLOAD_BYTES",
    "FLEXJOBS_STATUS_PAGE_SIZE",
    "FLEXJOBS_AUTO_TIME_SCALE",
    "FLEXJOBS_EGRESS_USD_PER_GB",
    "FLEXJOBS_ALLOWED_REGIONS",
    "FLEXJOBS_SERVING_GRACE_SECONDS",
    "FLEXJOBS_SERVING_HOLD_SECONDS",
)


def _folder(prefix: str) -> str:
    """A prefix as a folder: ``requests`` means ``requests/`` (not ``requests-old/`` too)."""
    return prefix if prefix.endswith("/") else prefix + "/"


def _price(text: str) -> float | None:
    """A USD price per GB from 0 to 10 (no inter-region rate comes near 10), else None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and 0 <= value <= 10 else None


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """A period in seconds from 0 to a week; anything else fails at start-up, loudly."""
    text = env.get(name) or str(default)
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 <= value <= 7 * 86400:
        raise ValueError(f"{name} must be seconds from 0 to 604800, not {text!r}")
    return value


def _split_csv(value: str | None) -> tuple[str, ...]:
    return tuple(p.strip() for p in (value or "").split(",") if p.strip())


@dataclass(frozen=True)
class Settings:
    """Everything configurable by environment. Build with :meth:`from_env`."""

    project: str
    location: str = DEFAULT_LOCATION
    vertex_endpoint: str | None = None
    # host:port of the Cloud Quotas API (the tick reads the GPU quota limits there when
    # admission is on); None: cloudquotas.googleapis.com. A local host: plaintext gRPC.
    cloudquotas_endpoint: str | None = None
    requests_topic: str = "job-requests"
    events_topic: str = "job-events"
    notifications_topic: str = "job-notifications"
    # A claim older than this is presumed dead (its function crashed or timed out), so a
    # redelivery may take over. Keep it at or above the function timeout.
    claim_ttl_seconds: float = 120.0
    # The Vertex and Firestore calls each get this deadline, including api_core's retries.
    call_timeout_seconds: float = 30.0
    # At most one Vertex read per job per this many seconds, however many hints arrive.
    hint_coalesce_seconds: float = 10.0
    # A hint for a job no record names yet is redelivered while younger than this.
    hint_recent_seconds: float = 15.0
    backoff_base_seconds: float = 60.0
    backoff_cap_seconds: float = 1800.0
    # A failure-rule table (JSON or YAML text, or a path to one); None keeps the defaults.
    failure_rules: str | None = None
    # The admission queue file (YAML text, or a path to one; shared.domain.admission.config);
    # None: admission is off, and creates go straight to Vertex AI.
    queues: str | None = None
    allowed_image_prefixes: tuple[str, ...] = field(default_factory=tuple)
    allowed_service_accounts: tuple[str, ...] = field(default_factory=tuple)
    max_gpus_per_job: int = 64
    max_replicas: int = 64
    max_message_bytes: int = 256 * 1024
    # FLEXJOBS_FIELD_POLICY, JSON text (shared.domain.request.field_policy); None keeps
    # the defaults.
    field_policy: str | None = None
    # Objects under this prefix of the request bucket are request files.
    upload_prefix: str = "requests/"
    # The one bucket request files come from (FLEXJOBS_REQUEST_BUCKET). Every other bucket's
    # objects are checkpoints at most, and this bucket's never are: whoever may upload a
    # request must not steer a job's checkpoints, and a training job that writes checkpoints
    # must not submit requests. None: no bucket holds request files.
    request_bucket: str | None = None
    # A request file larger than this is refused unread.
    max_upload_bytes: int = 8 * 1024 * 1024
    # Rows per page of the status page when its query string names no limit.
    status_page_size: int = 100
    # Divides the AUTO capacity policy's time constants (shared.domain.capacity.model.Tuning): 1 for
    # jobs of hours; the embedded stack's AUTO test runs jobs of a minute at 60.
    auto_time_scale: float = 1.0
    # USD per GB of reading a checkpoint from another region: what the AUTO region rule
    # charges a move (shared.domain.capacity.regions). Within a continent, Google's 0.02.
    egress_usd_per_gb: float = 0.02
    # The regions a request may run in (its location, AUTO's regions, fallback rungs); empty:
    # any region name. FLEXJOBS_LOCATION is always one of them.
    allowed_regions: tuple[str, ...] = field(default_factory=tuple)
    # Spot serving (shared.domain.serving.model.ServingSettings, where the defaults are
    # explained): how long a Spot deployment may serve short before an on-demand fallback is
    # deployed, and how long Spot must serve again before the fallback goes.
    serving_grace_seconds: float = 300.0
    serving_hold_seconds: float = 1800.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        e: Mapping[str, str] = os.environ if env is None else env
        project = e.get("GOOGLE_CLOUD_PROJECT") or e.get("GCLOUD_PROJECT") or ""
        location = e.get("FLEXJOBS_LOCATION") or DEFAULT_LOCATION
        if not is_region(location):
            # It becomes part of the Vertex host name; fail loudly rather than call elsewhere.
            raise ValueError(f"FLEXJOBS_LOCATION must be {REGION_HINT}, not {location!r}")
        page_size = e.get("FLEXJOBS_STATUS_PAGE_SIZE") or "100"
        if not page_size.isascii() or not page_size.isdigit() or not 1 <= int(page_size) <= 1000:
            # Each page reads this many records: refuse a size that would read without bound.
            raise ValueError(f"FLEXJOBS_STATUS_PAGE_SIZE must be 1 to 1000, not {page_size!r}")
        scale = e.get("FLEXJOBS_AUTO_TIME_SCALE") or "1"
        try:
            auto_time_scale = float(scale)
        except ValueError:
            auto_time_scale = math.nan
        if not math.isfinite(auto_time_scale) or auto_time_scale <= 0:
            raise ValueError(f"FLEXJOBS_AUTO_TIME_SCALE must be a positive number, not {scale!r}")
        egress = _price(e.get("FLEXJOBS_EGRESS_USD_PER_GB") or "0.02")
        if egress is None:
            raise ValueError(
                "FLEXJOBS_EGRESS_USD_PER_GB must be a number from 0 to 10 (USD per GB), not "
                f"{e.get('FLEXJOBS_EGRESS_USD_PER_GB')!r}"
            )
        allowed_regions = _split_csv(e.get("FLEXJOBS_ALLOWED_REGIONS"))
        bad = [r for r in allowed_regions if not is_region(r)]
        if bad:
            raise ValueError(f"FLEXJOBS_ALLOWED_REGIONS must list region names, not {bad!r}")
        if allowed_regions and location not in allowed_regions:
            allowed_regions = (location, *allowed_regions)
        grace = _seconds(e, "FLEXJOBS_SERVING_GRACE_SECONDS", 300)
        hold = _seconds(e, "FLEXJOBS_SERVING_HOLD_SECONDS", 1800)
        return cls(
            project=project,
            location=location,
            vertex_endpoint=e.get("FLEXJOBS_VERTEX_ENDPOINT") or None,
            cloudquotas_endpoint=e.get("FLEXJOBS_CLOUDQUOTAS_ENDPOINT") or None,
            requests_topic=e.get("FLEXJOBS_REQUESTS_TOPIC") or "job-requests",
            events_topic=e.get("FLEXJOBS_EVENTS_TOPIC") or "job-events",
            notifications_topic=e.get("FLEXJOBS_NOTIFICATIONS_TOPIC") or "job-notifications",
            claim_ttl_seconds=float(e.get("FLEXJOBS_CLAIM_TTL_SECONDS") or 120),
            call_timeout_seconds=float(e.get("FLEXJOBS_CALL_TIMEOUT_SECONDS") or 30),
            hint_coalesce_seconds=float(e.get("FLEXJOBS_HINT_COALESCE_SECONDS") or 10),
            hint_recent_seconds=float(e.get("FLEXJOBS_HINT_RECENT_SECONDS") or 15),
            backoff_base_seconds=float(e.get("FLEXJOBS_BACKOFF_BASE_SECONDS") or 60),
            backoff_cap_seconds=float(e.get("FLEXJOBS_BACKOFF_CAP_SECONDS") or 1800),
            failure_rules=e.get("FLEXJOBS_FAILURE_RULES") or None,
            queues=e.get("FLEXJOBS_QUEUES") or None,
            allowed_image_prefixes=_split_csv(e.get("FLEXJOBS_ALLOWED_IMAGE_PREFIXES")),
            allowed_service_accounts=_split_csv(e.get("FLEXJOBS_ALLOWED_SERVICE_ACCOUNTS")),
            max_gpus_per_job=int(e.get("FLEXJOBS_MAX_GPUS_PER_JOB") or 64),
            max_replicas=int(e.get("FLEXJOBS_MAX_REPLICAS") or 64),
            max_message_bytes=int(e.get("FLEXJOBS_MAX_MESSAGE_BYTES") or 256 * 1024),
            field_policy=e.get("FLEXJOBS_FIELD_POLICY") or None,
            upload_prefix=_folder(e.get("FLEXJOBS_UPLOAD_PREFIX") or "requests/"),
            request_bucket=e.get("FLEXJOBS_REQUEST_BUCKET") or None,
            max_upload_bytes=int(e.get("FLEXJOBS_MAX_UPLOAD_BYTES") or 8 * 1024 * 1024),
            status_page_size=int(page_size),
            auto_time_scale=auto_time_scale,
            egress_usd_per_gb=egress,
            allowed_regions=allowed_regions,
            serving_grace_seconds=grace,
            serving_hold_seconds=hold,
        )

    @property
    def vertex_is_local(self) -> bool:
        """True when the Vertex endpoint is on this machine: plaintext gRPC, no credentials."""
        return _is_local(self.vertex_endpoint)

    @property
    def cloudquotas_is_local(self) -> bool:
        """True when the Cloud Quotas endpoint is on this machine (the simulator): plaintext
        gRPC, no credentials."""
        return _is_local(self.cloudquotas_endpoint)


def _is_local(endpoint: str | None) -> bool:
    if not endpoint:
        return False
    return urlsplit(f"//{endpoint}").hostname in {"127.0.0.1", "localhost"}
