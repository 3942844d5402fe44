"""The handlers: one thin module per command, and the one table that maps each command to its
handler (as cosmicpython's ``COMMAND_HANDLERS``).

A handler takes its command and the context it runs in (:mod:`shared.app.context`), and calls
the services (:mod:`shared.app.services`), which do the work. No handler calls another: a
service another command also needs is called as a service. An entry point builds the
command and calls :func:`handle`; returning acknowledges the delivery, raising redelivers it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, overload

from shared.app.commands import (
    CancelJob,
    CreateJob,
    DeployModel,
    Outcome,
    ReceiveUpload,
    Reconcile,
    ResumeServing,
    SubmitJob,
    TrackJob,
)
from shared.app.context import Intake, Tracker, Uploads
from shared.app.handlers.cancel_job import cancel_job
from shared.app.handlers.create_job import create_job
from shared.app.handlers.deploy_model import deploy_model
from shared.app.handlers.receive_upload import receive_upload
from shared.app.handlers.reconcile import reconcile
from shared.app.handlers.resume_serving import resume_serving
from shared.app.handlers.submit_job import submit_job
from shared.app.handlers.track_job import track_job
from shared.app.services.uploads import Received

__all__ = [
    "COMMAND_HANDLERS",
    "cancel_job",
    "create_job",
    "deploy_model",
    "handle",
    "receive_upload",
    "reconcile",
    "resume_serving",
    "submit_job",
    "track_job",
]

#: Every command, and its handler.
COMMAND_HANDLERS: Mapping[type, Callable[[Any, Any], Any]] = {
    SubmitJob: submit_job,
    CreateJob: create_job,
    DeployModel: deploy_model,
    CancelJob: cancel_job,
    ResumeServing: resume_serving,
    TrackJob: track_job,
    Reconcile: reconcile,
    ReceiveUpload: receive_upload,
}


# Each command with the one context its handler runs in, so that mypy refuses an entry point
# that hands a command the wrong context (the table alone is typed by what it holds: Any).
@overload
def handle(command: SubmitJob | CreateJob | DeployModel, context: Intake) -> Outcome: ...
@overload
def handle(command: CancelJob | ResumeServing, context: Intake) -> Outcome: ...
@overload
def handle(command: TrackJob, context: Tracker) -> str | None: ...
@overload
def handle(command: Reconcile, context: Tracker) -> int: ...
@overload
def handle(command: ReceiveUpload, context: Uploads) -> Received: ...
def handle(command: object, context: Any) -> Any:
    """Run ``command``'s handler in ``context`` (the one its entry point is wired with)."""
    return COMMAND_HANDLERS[type(command)](command, context)
