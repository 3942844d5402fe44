"""The requests topic as a port (a :class:`Publisher`) and its Pub/Sub adapter."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Protocol

from flexjobs.connection import check_emulator, google_errors
from shared.kernel.errors import ConfigurationError


class Publisher(Protocol):
    """Publishes one message to a topic of the project; storage only, no rules."""

    def publish(self, topic: str, data: bytes, attributes: Mapping[str, str]) -> str:
        """Publish ``data`` with ``attributes`` to topic id ``topic``; the message id.

        Raises:
            ConfigurationError: the topic does not exist, or the publisher may not use it.
            PublishFailed: the publish did not complete (it may have: retry with the same
                requestId, which flexjobs creates at most one job for).
        """
        ...


class PubsubPublisher:
    """The Pub/Sub publisher client, built on first use (never at import)."""

    def __init__(self, project: str, timeout: float, client: Any = None) -> None:
        self._project = project
        self._timeout = timeout
        self._client = client
        self._lock = threading.Lock()

    def _publisher(self) -> Any:
        with self._lock:
            if self._client is None:
                check_emulator("PUBSUB_EMULATOR_HOST", "Pub/Sub")
                from google.cloud.pubsub_v1 import PublisherClient

                with google_errors("Pub/Sub", publishing=True):
                    self._client = PublisherClient()
            return self._client

    def publish(self, topic: str, data: bytes, attributes: Mapping[str, str]) -> str:
        from google.api_core import exceptions as gexc

        client = self._publisher()
        path = f"projects/{self._project}/topics/{topic}"
        with google_errors(f"publishing to {path}", publishing=True):
            try:
                future = client.publish(path, data, **attributes)
                return str(future.result(timeout=self._timeout))
            except gexc.NotFound as exc:
                raise ConfigurationError(
                    f"topic {path} not found: create it, or set FLEXJOBS_REQUESTS_TOPIC"
                    " (topic=) / --project to the deployed one"
                ) from exc
