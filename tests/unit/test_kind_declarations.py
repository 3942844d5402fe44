"""The kinds' declarations (shared/domain/model/kinds.py) against everything that must follow
them: the v1 protos, the rules, the schema, the adapter, the CLI, the simulator and infra/.

A new kind is a declaration, its checks, its schema model and the simulator's support; these
tests name whatever else it still needs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from google.cloud import aiplatform_v1

from flexjobs.cli.app import Kind
from flexjobs_local.simulator import specs as simulator
from shared.adapters.vertex.jobs import TRAINING_KINDS as ADAPTER_KINDS
from shared.domain.model.kinds import ALL_KINDS, KINDS, TRAINING, TRAINING_KINDS, kind_named
from shared.domain.model.states import from_vertex
from shared.domain.model.values import snake_case
from shared.domain.request.message import JobRequest
from shared.domain.request.validation import Guards, check_request
from shared.domain.request.wire import BODY_MODELS

INFRA = Path(__file__).resolve().parents[2] / "infra"


def test_names_collections_and_messages_are_one_each():
    assert len(set(KINDS)) == len(ALL_KINDS)
    assert len({k.collection for k in ALL_KINDS}) == len(ALL_KINDS)
    assert tuple(k.name for k in ALL_KINDS if k.training) == TRAINING_KINDS
    assert all(kind_named(k.name) is k for k in ALL_KINDS)


@pytest.mark.parametrize("kind", ALL_KINDS, ids=KINDS)
def test_every_kind_names_real_v1_messages(kind):
    message = getattr(aiplatform_v1.types, kind.message).pb().DESCRIPTOR
    if kind.job_spec:
        assert snake_case(kind.job_spec[0]) in message.fields_by_name
    if kind.parallel_field:
        assert snake_case(kind.parallel_field) in message.fields_by_name
    if kind.untyped_spec:
        assert hasattr(aiplatform_v1.types, kind.untyped_spec)
    assert hasattr(aiplatform_v1, f"{kind.service}Client")


@pytest.mark.parametrize("kind", TRAINING, ids=TRAINING_KINDS)
def test_every_training_kind_reports_states_flexjobs_maps(kind):
    pipeline = kind.state_prefix == "PIPELINE_STATE"
    enum = aiplatform_v1.PipelineState if pipeline else aiplatform_v1.JobState
    for state in ("QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"):
        name = f"{kind.state_prefix}_{state}"
        assert name in enum.__members__
        assert from_vertex(name) is not None


@pytest.mark.parametrize("kind", ALL_KINDS, ids=KINDS)
def test_every_kind_has_its_checks(kind):
    # An empty body is invalid for every kind; a kind without checks would raise instead.
    assert check_request(JobRequest("r1", kind.name, {}), Guards())


def test_every_kind_has_a_schema_model_and_a_cli_choice():
    assert list(BODY_MODELS) == list(ALL_KINDS)
    assert [k.value for k in Kind] == list(KINDS)


def test_the_adapter_drives_every_training_kind():
    assert list(ADAPTER_KINDS) == list(TRAINING_KINDS)


def test_the_simulator_serves_every_training_kind_as_declared():
    # The simulator keeps its own list (it speaks Vertex's API, never imports shared).
    served = {kind.collection: kind for kind in simulator.KINDS.values()}
    assert set(served) == {kind.collection for kind in TRAINING}
    for kind in TRAINING:
        assert served[kind.collection].resource == kind.message
        assert served[kind.collection].spec_field == snake_case(kind.job_spec[0])
        assert served[kind.collection].pipeline == (kind.state_prefix == "PIPELINE_STATE")
        assert served[kind.collection].hints == (kind.log_resource is not None)


@pytest.mark.parametrize("kind", TRAINING, ids=TRAINING_KINDS)
def test_infra_grants_and_hints_every_training_kind(kind):
    iam = (INFRA / "iam.tf").read_text()
    for verb in ("create", "get", "list", "cancel"):
        assert f'"aiplatform.{kind.collection}.{verb}"' in iam
    logging = (INFRA / "logging.tf").read_text()
    for verb in ("Create", "Cancel", "Delete"):
        assert f'"{kind.service}.{verb}{kind.message}"' in logging
    if kind.log_resource:
        assert re.search(rf'resource\.type=\\"{kind.log_resource}\\"', logging)
