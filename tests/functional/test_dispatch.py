"""The one dispatch table: every command has its handler, and each runs through ``handle``
in the context its entry point is wired with (on the in-memory fakes)."""

from __future__ import annotations

import dataclasses
import inspect
import json

from shared.app import commands, handlers
from shared.app.commands import (
    CancelJob,
    CreateJob,
    DeployModel,
    Outcome,
    ResumeServing,
    SubmitJob,
)
from shared.app.handlers import COMMAND_HANDLERS, handle
from shared.app.services import intake as intake_service
from shared.domain.model.delivery import Delivery
from tests.events import load


def _command_classes() -> set[type]:
    return {
        value
        for name, value in vars(commands).items()
        if inspect.isclass(value)
        and dataclasses.is_dataclass(value)
        and value.__module__ == commands.__name__
    }


def test_every_command_has_its_handler_and_nothing_else_is_in_the_table():
    assert set(COMMAND_HANDLERS) == _command_classes()
    # Each handler is its own module's, named after the command.
    for command, handler in COMMAND_HANDLERS.items():
        assert handler.__module__.startswith(handlers.__name__ + "."), command


def test_the_table_check_finds_a_command_without_a_handler(monkeypatch):
    @dataclasses.dataclass(frozen=True)
    class Forgotten:
        request_id: str

    Forgotten.__module__ = commands.__name__
    monkeypatch.setattr(commands, "Forgotten", Forgotten, raising=False)
    assert set(COMMAND_HANDLERS) != _command_classes()


def _request(intake, body):
    message = Delivery(json.dumps(body).encode(), message_id="m-1")
    asked = intake_service.read_command(SubmitJob(message=message), intake)
    return asked.request


def test_create_job_runs_through_the_table(intake):
    request = _request(intake, load("seed_request"))
    assert handle(CreateJob(request), intake) is Outcome.SUBMITTED
    assert handle(CreateJob(request), intake) is Outcome.DUPLICATE
    assert len(intake.backend.created) == 1


def test_cancel_job_runs_through_the_table(intake):
    request = _request(intake, load("seed_request"))
    handle(CreateJob(request), intake)
    assert handle(CancelJob(request.request_id), intake) is Outcome.CANCELLED
    assert intake.jobs.get(request.request_id).state.value == "CANCELLED"


def test_deploy_model_and_resume_serving_run_through_the_table(tracker, intake):
    request = _request(intake, load("deploy_request"))
    assert handle(DeployModel(request), intake) is Outcome.SUBMITTED
    assert handle(DeployModel(request), intake) is Outcome.DUPLICATE
    # Followed and not paused, or never deployed: nothing to resume (a paused one is resumed
    # in test_serving.py, through the request topic).
    assert handle(ResumeServing(request.request_id), intake) is Outcome.DUPLICATE
    assert handle(ResumeServing("never-deployed"), intake) is Outcome.DUPLICATE
    assert intake.deployments.records.get(request.request_id) is not None
