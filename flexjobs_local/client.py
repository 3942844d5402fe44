"""The CLI's Google clients and configuration, with one-line actionable errors.

Configuration follows the Google conventions: ``GOOGLE_CLOUD_PROJECT`` (or ``--project``),
Application Default Credentials, ``PUBSUB_EMULATOR_HOST`` / ``FIRESTORE_EMULATOR_HOST`` (the
clients honour them), and the ``FLEXJOBS_*`` settings the functions read
(:meth:`shared.kernel.config.Settings.from_env`). Clients are built on first use, never at import.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from shared.domain.model.ids import doc_id
from shared.kernel.config import Settings

JOBS = "jobs"
DEPLOYMENTS = "deployments"
REJECTIONS = "rejections"
#: The fields ``list`` reads (a projection: a record's ``request`` text can be 256 KiB).
LIST_FIELDS = (
    "requestId",
    "kind",
    "state",
    "attempt",
    "strategy",
    "location",
    "displayName",
    "createdAt",
    "updatedAt",
    "progress",
    "gpuSeconds",
    "cost",
    "reason",
)


class CliError(Exception):
    """A failure the user can act on: printed as one line, exit ``code``."""

    def __init__(self, message: str, code: int = 3) -> None:
        super().__init__(message)
        self.code = code


def _check_emulator(variable: str, what: str) -> None:
    host = os.environ.get(variable)
    if not host:
        return
    parts = urlsplit(f"//{host}")
    try:
        with socket.create_connection((parts.hostname or "localhost", parts.port or 80), 2):
            pass
    except OSError as exc:
        raise CliError(
            f"the {what} emulator at {variable}={host} is not reachable ({exc.strerror or exc});"
            f" start it with 'flexjobs local up', or unset {variable} to use Google Cloud"
        ) from exc


@contextlib.contextmanager
def google_errors(what: str) -> Iterator[None]:
    """Turn the Google client exceptions into one-line :class:`CliError`s."""
    from google.api_core import exceptions as gexc
    from google.auth.exceptions import DefaultCredentialsError, RefreshError, TransportError

    try:
        yield
    except DefaultCredentialsError as exc:
        raise CliError(
            "no Google credentials: run 'gcloud auth application-default login', set"
            " GOOGLE_APPLICATION_CREDENTIALS, or point at the emulators ('flexjobs local up')"
        ) from exc
    except (RefreshError, TransportError) as exc:
        raise CliError(f"{what}: cannot get credentials: {_first_line(exc)}") from exc
    except gexc.PermissionDenied as exc:
        raise CliError(f"{what}: permission denied: {_first_line(exc.message)}") from exc
    except gexc.Unauthenticated as exc:
        raise CliError(f"{what}: not authenticated: {_first_line(exc.message)}") from exc
    except (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.RetryError) as exc:
        raise CliError(f"{what}: service not reachable: {_first_line(exc)}") from exc
    except gexc.GoogleAPICallError as exc:
        raise CliError(f"{what}: {_first_line(exc)}") from exc
    except TimeoutError as exc:
        raise CliError(f"{what}: timed out; check the network or the emulator host") from exc


def _first_line(value: object) -> str:
    return (str(value).strip().splitlines() or [""])[0]


@dataclass
class Config:
    """Where the CLI points: the project, the requests topic and the call deadline."""

    settings: Settings
    project: str
    _publisher: Any = field(default=None, repr=False)
    _db: Any = field(default=None, repr=False)

    @classmethod
    def load(cls, project: str | None) -> Config:
        try:
            settings = Settings.from_env()
        except ValueError as exc:
            raise CliError(str(exc)) from exc
        return cls(settings=settings, project=project or settings.project)

    @property
    def timeout(self) -> float:
        return self.settings.call_timeout_seconds

    def _need_project(self) -> str:
        if not self.project:
            raise CliError(
                "no project: set GOOGLE_CLOUD_PROJECT or pass --project"
                " (for the local stack: eval the exports 'flexjobs local up' prints)"
            )
        return self.project

    @property
    def topic_path(self) -> str:
        return f"projects/{self._need_project()}/topics/{self.settings.requests_topic}"

    def publisher(self) -> Any:
        if self._publisher is None:
            self._need_project()
            _check_emulator("PUBSUB_EMULATOR_HOST", "Pub/Sub")
            from google.cloud.pubsub_v1 import PublisherClient

            with google_errors("Pub/Sub"):
                self._publisher = PublisherClient()
        return self._publisher

    def db(self) -> Any:
        if self._db is None:
            project = self._need_project()
            _check_emulator("FIRESTORE_EMULATOR_HOST", "Firestore")
            from google.cloud import firestore

            with google_errors("Firestore"):
                self._db = firestore.Client(project=project)
        return self._db

    def publish(self, body: dict[str, Any], attributes: dict[str, str]) -> str:
        """Publish one message on the requests topic; returns the Pub/Sub message id."""
        from google.api_core import exceptions as gexc

        publisher = self.publisher()
        topic = self.topic_path
        data = json.dumps(body, separators=(",", ":")).encode("utf-8")
        with google_errors(f"publishing to {topic}"):
            try:
                future = publisher.publish(topic, data, **attributes)
                return str(future.result(timeout=self.timeout))
            except gexc.NotFound as exc:
                raise CliError(
                    f"topic {topic} not found: create it, or set FLEXJOBS_REQUESTS_TOPIC"
                    " / --project to the deployed one"
                ) from exc

    def job(self, request_id: str) -> Any:
        return self.db().collection(JOBS).document(doc_id(request_id))

    def get(self, collection: str, request_id: str) -> dict[str, Any] | None:
        ref = self.db().collection(collection).document(doc_id(request_id))
        with google_errors("Firestore"):
            snapshot = ref.get(timeout=self.timeout)
        return snapshot.to_dict() if snapshot.exists else None

    def attempts(self, request_id: str) -> list[dict[str, Any]]:
        ref = self.job(request_id).collection("attempts")
        with google_errors("Firestore"):
            docs = [d.to_dict() or {} for d in ref.stream(timeout=self.timeout)]
        return sorted(docs, key=lambda a: int(a.get("attempt") or 0))

    def recent(
        self, states: list[str], since: timedelta | None, limit: int, now: datetime
    ) -> list[dict[str, Any]]:
        """Records newest first by ``createdAt``.

        Only single-field indexes are used (``createdAt``): the states are filtered as the
        ordered stream is read, so no composite index is needed in production.
        """
        from google.cloud import firestore
        from google.cloud.firestore_v1.base_query import FieldFilter

        query = self.db().collection(JOBS).select(list(LIST_FIELDS))
        if since is not None:
            query = query.where(filter=FieldFilter("createdAt", ">=", now - since))
        query = query.order_by("createdAt", direction=firestore.Query.DESCENDING)
        if not states:
            query = query.limit(limit)
        found: list[dict[str, Any]] = []
        with google_errors("Firestore"):
            for snapshot in query.stream(timeout=self.timeout):
                record = snapshot.to_dict() or {}
                if states and record.get("state") not in states:
                    continue
                found.append(record)
                if len(found) >= limit:
                    break
        return found
