"""GcsCheckpointStore: find a job's latest complete checkpoint in Cloud Storage.

The pure :func:`shared.domain.policy.checkpoints.latest_checkpoint` decides; this store only lists,
always with ``delimiter="/"`` so a request shows one directory's own entries, never the
(possibly millions of) shards below it:

1. the prefix itself, for its step directories and single-file checkpoints;
2. each step directory, from the highest step down, until one holds its completion marker
   (and, for an Orbax step without its step-level marker, each item directory).

Work is bounded (docs/lifecycle.md says the same): at most ``max_requests`` list
requests (50) of at most 1,000 entries each, the prefix's own listing taking at most
``max_top_pages`` of them (10 pages: 10,000 step directories and files), one page per step
directory, and ``deadline_seconds`` (60 s) for the whole lookup, retries included. One page
per step directory suffices: torch's ``.metadata`` and ``_SUCCESS`` sort before its
``__0_0.distcp`` shards, and an Orbax step holds only a few entries of its own (its items'
files sit one level down). When a bound is reached the search decides on what it has seen and
logs a warning: the prefix's listing arrives in name order, so a cut one misses the last names.

Errors:
    * transient faults (429, 500, 502, 503, 504, connection resets) are retried by
      ``google.api_core.retry.Retry`` until ``deadline_seconds``; if they persist, the call
      raises :class:`shared.kernel.errors.StoreUnavailable` so the message is redelivered;
    * a bucket that does not exist returns None: nothing was checkpointed there, so the
      job resubmits from scratch, which is also what happens before its first checkpoint.
      A warning is logged because a typo in ``checkpointUri`` looks exactly like this;
    * anything else (403 Forbidden, 400) propagates unchanged: it is a configuration fault
      that no retry fixes.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime
from typing import Any

import requests
from google.api_core import exceptions as gexc
from google.api_core.retry import Retry, if_exception_type
from google.auth.credentials import AnonymousCredentials

from shared.domain.model.checkpoint import Checkpoint, Listing, ObjectInfo
from shared.domain.policy.checkpoints import confirm, latest_checkpoint, split_gcs_uri
from shared.kernel.errors import ObjectGone, StoreUnavailable
from shared.kernel.logs import get_logger

# Through the flexjobs hierarchy, so warnings are JSON lines carrying the requestId label.
logger = get_logger("gcs")

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
EMULATOR_PROJECT = "flexjobs-local"

_RETRYABLE = (
    gexc.TooManyRequests,
    gexc.InternalServerError,
    gexc.BadGateway,
    gexc.ServiceUnavailable,
    gexc.GatewayTimeout,
    requests.ConnectionError,
    requests.Timeout,
)
_TRANSIENT = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.InternalServerError,
    gexc.TooManyRequests,
    gexc.BadGateway,
    gexc.GatewayTimeout,
    gexc.RetryError,
    requests.ConnectionError,
    requests.Timeout,
)
# Objects without timestamps (never seen from GCS itself) sort as the oldest.
_EPOCH = datetime.fromtimestamp(0, UTC)

# Entries (objects and prefixes together) per list request: the most GCS returns.
PAGE_SIZE = 1000
MAX_REQUESTS = 50
MAX_TOP_PAGES = 10
# Confirming one checkpoint: its directory's page, and an Orbax step's item directories.
MAX_CONFIRM_REQUESTS = 10
# JSON API v1 object resource names: a field left out here is absent from the response, so
# ``customTime`` must be named for Custom-Time to be read, and ``prefixes`` for directories.
LIST_FIELDS = "items(name,updated,timeCreated,customTime,size),prefixes,nextPageToken"


class _Budget:
    """List requests and time left for one lookup."""

    def __init__(self, requests: int, seconds: float) -> None:
        self.requests = requests
        self.deadline = time.monotonic() + seconds
        self.spent = False

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def take(self) -> bool:
        """Spend one request; False (and ``spent``) when none or no time is left."""
        if self.requests <= 0 or self.remaining() <= 0:
            self.spent = True
            return False
        self.requests -= 1
        return True


def storage_client(project: str | None, emulator_host: str | None = None) -> Any:
    """A Cloud Storage client; with an emulator (``emulator_host``, else
    ``STORAGE_EMULATOR_HOST``), anonymous and pointed at it."""
    # google-cloud-storage has no type information; mypy only accepts the full path.
    import google.cloud.storage

    host = emulator_host or os.environ.get(EMULATOR_ENV)
    if not host:
        return google.cloud.storage.Client(project=project)
    endpoint = host if "://" in host else f"http://{host}"
    return google.cloud.storage.Client(
        project=project or EMULATOR_PROJECT,
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": endpoint},
    )


def _retry(deadline_seconds: float) -> Retry:
    return Retry(
        predicate=if_exception_type(*_RETRYABLE),
        initial=0.5,
        maximum=8.0,
        multiplier=2.0,
        timeout=deadline_seconds,
    )


class _Gcs:
    """What both Cloud Storage adapters hold: a client built on first use, the timeout of each
    HTTP request, and api_core's retry of transient faults within a deadline."""

    def __init__(
        self,
        client: Any | None = None,
        project: str | None = None,
        *,
        emulator_host: str | None = None,
        timeout_seconds: float = 30.0,
        deadline_seconds: float = 60.0,
    ) -> None:
        self._client = client
        self._project = project
        self._emulator_host = emulator_host
        self._timeout = timeout_seconds
        self._deadline = deadline_seconds
        self._retry = _retry(deadline_seconds)
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = storage_client(self._project, self._emulator_host)
            return self._client


class GcsCheckpointStore(_Gcs):
    """Checkpoint lookups in Cloud Storage; the client is built on first use.

    Args:
        client: a ``google.cloud.storage.Client``; built lazily when None.
        project: the project for a lazily built client.
        emulator_host: the storage emulator, such as ``http://127.0.0.1:9023``; defaults to
            the ``STORAGE_EMULATOR_HOST`` environment variable read at first use. With an
            emulator the client uses anonymous credentials.
        timeout_seconds: the timeout of each HTTP request.
        deadline_seconds: the total time allowed for one lookup, retries included.
        max_requests: the list requests allowed for one lookup.
        max_top_pages: the pages of the prefix's own listing, within ``max_requests``.

    Examples:
        >>> store = GcsCheckpointStore(project="demo")  # no client, no network yet
    """

    def __init__(
        self,
        client: Any | None = None,
        project: str | None = None,
        *,
        emulator_host: str | None = None,
        timeout_seconds: float = 30.0,
        deadline_seconds: float = 60.0,
        max_requests: int = MAX_REQUESTS,
        max_top_pages: int = MAX_TOP_PAGES,
    ) -> None:
        super().__init__(
            client,
            project,
            emulator_host=emulator_host,
            timeout_seconds=timeout_seconds,
            deadline_seconds=deadline_seconds,
        )
        self._max_requests = max_requests
        self._max_top_pages = max_top_pages

    def latest(self, prefix_uri: str, *, not_before: datetime | None = None) -> Checkpoint | None:
        """The latest complete checkpoint under ``prefix_uri`` (``gs://bucket/prefix/``).

        Checkpoints whose time is earlier than ``not_before`` (timezone-aware) are ignored.

        Raises:
            ValueError: when ``prefix_uri`` is not a ``gs://`` URI, or ``not_before`` is naive.
            StoreUnavailable: when Cloud Storage stays unreachable past the deadline.
        """
        bucket, prefix = split_gcs_uri(prefix_uri)
        if prefix and not prefix.endswith("/"):
            # Without the slash, "ck" would also match the objects of "ck-old/".
            prefix += "/"
        budget = _Budget(self._max_requests, self._deadline)
        try:
            top = self._list(bucket, prefix, budget, self._max_top_pages) or Listing()
            found = latest_checkpoint(
                top,
                lambda directory: self._list(bucket, directory, budget, 1),
                bucket,
                prefix,
                not_before=not_before,
            )
        except gexc.NotFound:
            logger.warning(
                "checkpoint bucket %r does not exist; treating %s as holding no checkpoint",
                bucket,
                prefix_uri,
            )
            return None
        except _TRANSIENT as exc:
            raise StoreUnavailable(f"listing {prefix_uri} failed: {exc}") from exc
        if top.truncated or budget.spent:
            logger.warning(
                "checkpoint lookup under %s reached its bound (%d requests, %d top-level "
                "pages, %.0f s); decided on a partial listing: %s",
                prefix_uri,
                self._max_requests,
                self._max_top_pages,
                self._deadline,
                found.uri if found else None,
            )
        return found

    def confirm(self, checkpoint: Checkpoint) -> Checkpoint | None:
        """The checkpoint as its own listing shows it (one list request for a step directory
        or a file; an Orbax step without its step-level marker also reads its items), or
        None when the listing shows no complete checkpoint there.

        Raises:
            StoreUnavailable: when Cloud Storage stays unreachable past the deadline.
        """
        try:
            bucket, _ = split_gcs_uri(checkpoint.uri)
        except ValueError:
            return None  # not a Cloud Storage URI (a hand-edited record): nothing to confirm
        budget = _Budget(MAX_CONFIRM_REQUESTS, self._deadline)
        try:
            return confirm(checkpoint, lambda directory: self._list(bucket, directory, budget, 1))
        except gexc.NotFound:
            return None  # no such bucket: nothing there to confirm
        except _TRANSIENT as exc:
            raise StoreUnavailable(f"listing {checkpoint.uri} failed: {exc}") from exc

    def _list(self, bucket: str, directory: str, budget: _Budget, max_pages: int) -> Listing | None:
        """One directory's own entries (``delimiter="/"``), at most ``max_pages`` pages; None
        when the budget allows no request at all."""
        if not budget.take():
            return None
        remaining = budget.remaining()
        iterator = self.client.list_blobs(
            bucket,
            prefix=directory,
            delimiter="/",
            fields=LIST_FIELDS,
            page_size=PAGE_SIZE,
            timeout=min(self._timeout, remaining),
            retry=self._retry.with_timeout(remaining),
        )
        objects: list[ObjectInfo] = []
        subdirectories: list[str] = []
        # Each step of ``pages`` is one request, so the budget is spent before the next one.
        for number, page in enumerate(iterator.pages, start=1):
            objects.extend(_object_info(blob) for blob in page)
            subdirectories.extend(page.prefixes)
            if iterator.next_page_token is None or number >= max_pages or not budget.take():
                break
        return Listing(
            tuple(objects),
            tuple(subdirectories),
            truncated=iterator.next_page_token is not None,
        )


def _object_info(blob: Any) -> ObjectInfo:
    return ObjectInfo(
        name=blob.name,
        # Custom-Time, when a writer sets it, says when the checkpoint was taken.
        updated=blob.custom_time or blob.updated or blob.time_created or _EPOCH,
        size=int(blob.size or 0),
    )


class GcsStoredObjects(_Gcs):
    """Uploaded request files in Cloud Storage; the client is built on first use.

    Reads one *generation*, the one the event named: a file replaced since is another
    generation, with its own event, and must not be read in this one's place.
    """

    def read(self, bucket: str, name: str, generation: str, limit: int) -> bytes:
        """At most ``limit`` + 1 bytes of ``gs://bucket/name#generation`` (one ranged read).

        Raises:
            ObjectGone: that generation no longer exists.
            StoreUnavailable: Cloud Storage stayed unreachable past the deadline.
        """
        blob = self.client.bucket(bucket).blob(name, generation=int(generation))
        try:
            # raw_download: the stored bytes, never decompressed here, so the limit bounds
            # what is read and held (a gzip-encoded object could inflate without bound).
            data = blob.download_as_bytes(
                start=0, end=limit, raw_download=True, timeout=self._timeout, retry=self._retry
            )
        except gexc.NotFound as exc:
            raise ObjectGone(f"gs://{bucket}/{name}#{generation} no longer exists") from exc
        except gexc.RequestRangeNotSatisfiable:
            return b""  # an empty object has no byte 0 to range over
        except _TRANSIENT as exc:
            raise StoreUnavailable(f"reading gs://{bucket}/{name} failed: {exc}") from exc
        return bytes(data)
