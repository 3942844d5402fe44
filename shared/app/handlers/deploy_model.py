"""A validated ``deployModel`` request, deployed on Spot VMs exactly once."""

from __future__ import annotations

from shared.app.commands import DeployModel, Outcome
from shared.app.context import Intake
from shared.app.services.intake import deploy


def deploy_model(cmd: DeployModel, context: Intake) -> Outcome:
    """Handle :class:`~shared.app.commands.DeployModel` (see the module docstring)."""
    return deploy(cmd.request, context)
