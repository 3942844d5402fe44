"""A Cloud Storage object event: a request file submitted, a checkpoint recorded, or nothing."""

from __future__ import annotations

from shared.app.commands import ReceiveUpload
from shared.app.context import Uploads
from shared.app.services.uploads import Received, receive


def receive_upload(cmd: ReceiveUpload, context: Uploads) -> Received:
    """Handle :class:`~shared.app.commands.ReceiveUpload` (see the module docstring)."""
    return receive(cmd.event, context)
