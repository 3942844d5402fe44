"""Cloud Functions entry points: unwrap the envelope, build a command, hand it to its handler.

Returning acknowledges the message; raising makes Pub/Sub redeliver it. ``pubsub_handler``
applies that policy: non-retryable errors are logged and acknowledged, transient ones raised.
``status_page`` is the one HTTP function: it reads and renders, and answers every request.

Importing this module registers every entry point with functions-framework, and of flexjobs
loads only the acknowledgement policy (with the kernel's errors and logs): each entry point
imports its command, its handler and the wiring on its first call. A burst scales the
functions out and every new instance imports this module before its first delivery, so an
instance pays only for what its own entry point needs (issue 41; ``./dev bench coldstart``,
and tests/unit/test_coldstart.py, which keeps it so).
"""

from __future__ import annotations

from typing import Any

import functions_framework

from shared.ingress.acknowledgement import http_handler, pubsub_handler


@functions_framework.cloud_event
@pubsub_handler
def handle_job_request(event: Any) -> None:
    """Pub/Sub trigger on the requests topic: submit one job request."""
    from shared import bootstrap
    from shared.app.commands import SubmitJob
    from shared.app.handlers import handle
    from shared.ingress.envelopes import unwrap_message

    handle(SubmitJob(message=unwrap_message(event)), bootstrap.intake())


@functions_framework.cloud_event
@pubsub_handler
def handle_job_event(event: Any) -> None:
    """Pub/Sub trigger on the events topic: re-read the job a state hint names."""
    from shared import bootstrap
    from shared.app.commands import TrackJob
    from shared.app.handlers import handle
    from shared.ingress.envelopes import unwrap_message

    handle(TrackJob(message=unwrap_message(event)), bootstrap.tracker())


@functions_framework.cloud_event
@pubsub_handler
def handle_scheduler_tick(event: Any) -> None:
    """Pub/Sub trigger from Cloud Scheduler: reconcile every active job against Vertex."""
    from shared import bootstrap
    from shared.app.commands import Reconcile
    from shared.app.handlers import handle

    handle(Reconcile(), bootstrap.tracker())


@functions_framework.cloud_event
@pubsub_handler
def handle_upload(event: Any) -> None:
    """Eventarc storage trigger (or a bucket's Pub/Sub notification): submit a request file,
    or record the checkpoint an upload completed."""
    from shared import bootstrap
    from shared.app.commands import ReceiveUpload
    from shared.app.handlers import handle
    from shared.ingress.envelopes import unwrap_object_event

    handle(ReceiveUpload(event=unwrap_object_event(event)), bootstrap.uploads())


@functions_framework.http
@http_handler
def status_page(request: Any) -> Any:
    """HTTP, for authenticated callers only (infra/): the read-only status page."""
    from shared import bootstrap
    from shared.status import site as pages

    return pages.serve(request, bootstrap.status_site())
