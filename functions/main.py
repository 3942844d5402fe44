"""Cloud Functions entry points: unwrap the envelope, build a command, hand it to its handler.

Returning acknowledges the message; raising makes Pub/Sub redeliver it. ``pubsub_handler``
applies that policy: non-retryable errors are logged and acknowledged, transient ones raised.
``status_page`` is the one HTTP function: it reads and renders, and answers every request.
"""

from __future__ import annotations

from typing import Any

import functions_framework

from shared import bootstrap
from shared.app.commands import ReceiveUpload, Reconcile, SubmitJob, TrackJob
from shared.app.handlers import handle
from shared.ingress.acknowledgement import http_handler, pubsub_handler
from shared.ingress.envelopes import unwrap_message, unwrap_object_event
from shared.status import site as pages


@functions_framework.cloud_event
@pubsub_handler
def handle_job_request(event: Any) -> None:
    """Pub/Sub trigger on the requests topic: submit one job request."""
    handle(SubmitJob(message=unwrap_message(event)), bootstrap.intake())


@functions_framework.cloud_event
@pubsub_handler
def handle_job_event(event: Any) -> None:
    """Pub/Sub trigger on the events topic: re-read the job a state hint names."""
    handle(TrackJob(message=unwrap_message(event)), bootstrap.tracker())


@functions_framework.cloud_event
@pubsub_handler
def handle_scheduler_tick(event: Any) -> None:
    """Pub/Sub trigger from Cloud Scheduler: reconcile every active job against Vertex."""
    handle(Reconcile(), bootstrap.tracker())


@functions_framework.cloud_event
@pubsub_handler
def handle_upload(event: Any) -> None:
    """Eventarc storage trigger (or a bucket's Pub/Sub notification): submit a request file,
    or record the checkpoint an upload completed."""
    handle(ReceiveUpload(event=unwrap_object_event(event)), bootstrap.uploads())


@functions_framework.http
@http_handler
def status_page(request: Any) -> Any:
    """HTTP, for authenticated callers only (infra/): the read-only status page."""
    return pages.serve(request, bootstrap.status_site())
