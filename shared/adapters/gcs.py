"""GcsCheckpointStore: find a job's latest complete checkpoint in Cloud Storage.

The store lists every object under the checkpoint prefix once (the client follows the pages)
and hands the listing to the pure :func:`shared.domain.checkpoints.latest_complete`.

Errors:
    * transient faults (429, 500, 502, 503, 504, connection resets) are retried by
      ``google.api_core.retry.Retry`` until ``deadline_seconds``; if they persist, the call
      raises :class:`shared.errors.StoreUnavailable` so the message is redelivered;
    * a bucket that does not exist returns None: nothing was checkpointed there, so the
      job resubmits from scratch, which is also what happens before its first checkpoint.
      A warning is logged because a typo in ``checkpointUri`` looks exactly like this;
    * anything else (403 Forbidden, 400) propagates unchanged: it is a configuration fault
      that no retry fixes.
"""

from __future__ import annotations

import logging
import os
import threading
from datetime import UTC, datetime
from typing import Any

import requests
from google.api_core import exceptions as gexc
from google.api_core.retry import Retry, if_exception_type
from google.auth.credentials import AnonymousCredentials

from shared.domain.checkpoints import Checkpoint, ObjectInfo, latest_complete, split_gcs_uri
from shared.errors import StoreUnavailable

logger = logging.getLogger(__name__)

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


class GcsCheckpointStore:
    """Checkpoint lookups in Cloud Storage; the client is built on first use.

    Args:
        client: a ``google.cloud.storage.Client``; built lazily when None.
        project: the project for a lazily built client.
        emulator_host: the storage emulator, such as ``http://127.0.0.1:9023``; defaults to
            the ``STORAGE_EMULATOR_HOST`` environment variable read at first use. With an
            emulator the client uses anonymous credentials.
        timeout_seconds: the timeout of each HTTP request.
        deadline_seconds: the total time allowed for a listing, retries included.

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
    ) -> None:
        self._client = client
        self._project = project
        self._emulator_host = emulator_host
        self._timeout = timeout_seconds
        self._retry = Retry(
            predicate=if_exception_type(*_RETRYABLE),
            initial=0.5,
            maximum=8.0,
            multiplier=2.0,
            timeout=deadline_seconds,
        )
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._build_client()
            return self._client

    def _build_client(self) -> Any:
        # google-cloud-storage has no type information; mypy only accepts the full path.
        import google.cloud.storage

        host = self._emulator_host or os.environ.get(EMULATOR_ENV)
        if not host:
            return google.cloud.storage.Client(project=self._project)
        endpoint = host if "://" in host else f"http://{host}"
        return google.cloud.storage.Client(
            project=self._project or EMULATOR_PROJECT,
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": endpoint},
        )

    def latest(self, prefix_uri: str) -> Checkpoint | None:
        """The latest complete checkpoint under ``prefix_uri`` (``gs://bucket/prefix/``).

        Raises:
            ValueError: when ``prefix_uri`` is not a ``gs://`` URI.
            StoreUnavailable: when Cloud Storage stays unreachable past the deadline.
        """
        bucket, prefix = split_gcs_uri(prefix_uri)
        if prefix and not prefix.endswith("/"):
            # Without the slash, "ck" would also match the objects of "ck-old/".
            prefix += "/"
        try:
            objects = [
                ObjectInfo(
                    name=blob.name,
                    # Custom-Time, when a writer sets it, says when the checkpoint was taken.
                    updated=blob.custom_time or blob.updated or blob.time_created or _EPOCH,
                    size=int(blob.size or 0),
                )
                for blob in self.client.list_blobs(
                    bucket,
                    prefix=prefix,
                    fields="items(name,updated,timeCreated,size),nextPageToken",
                    timeout=self._timeout,
                    retry=self._retry,
                )
            ]
        except gexc.NotFound:
            logger.warning(
                "checkpoint bucket %r does not exist; treating %s as holding no checkpoint",
                bucket,
                prefix_uri,
            )
            return None
        except _TRANSIENT as exc:
            raise StoreUnavailable(f"listing {prefix_uri} failed: {exc}") from exc
        return latest_complete(objects, bucket, prefix)
