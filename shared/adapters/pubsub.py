"""PubsubNotifier: the Notifier port on the Pub/Sub publisher client."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from google.api_core import exceptions as gexc

from shared.kernel.config import Settings
from shared.kernel.errors import PublishFailed


class PubsubNotifier:
    """Publishes JSON notifications to the notifications topic; the client is built lazily."""

    def __init__(self, settings: Settings, topic: str | None = None, client: Any = None) -> None:
        self._settings = settings
        self._topic_id = topic or settings.notifications_topic
        self._client = client
        self._lock = threading.Lock()

    def _publisher(self) -> Any:
        with self._lock:
            if self._client is None:
                from google.cloud.pubsub_v1 import PublisherClient

                self._client = PublisherClient()
            return self._client

    def notify(self, message: Mapping[str, Any]) -> None:
        client = self._publisher()
        topic = client.topic_path(self._settings.project, self._topic_id)
        data = json.dumps(dict(message), default=str, sort_keys=True).encode("utf-8")
        attributes = {
            "state": str(message.get("state", "")),
            "requestId": bounded_attribute(str(message.get("requestId", ""))),
        }
        try:
            client.publish(topic, data, **attributes).result(
                timeout=self._settings.call_timeout_seconds
            )
        except (gexc.GoogleAPICallError, gexc.RetryError, TimeoutError) as exc:
            raise PublishFailed(f"publish to {topic} failed: {exc}") from exc


#: Pub/Sub refuses an attribute value over this many bytes (not characters).
MAX_ATTRIBUTE_BYTES = 1024


def bounded_attribute(value: str) -> str:
    """An attribute value cut to 1,024 UTF-8 bytes on a character boundary (a requestId's
    whole text is in the data). Cut by characters, an id of multi-byte characters would make
    every publish fail, and a rejection that notifies first would never be recorded.

    Examples:
        >>> len(bounded_attribute("é" * 1000).encode())
        1024
    """
    raw = value.encode("utf-8", errors="replace")
    return raw[:MAX_ATTRIBUTE_BYTES].decode("utf-8", errors="ignore")
