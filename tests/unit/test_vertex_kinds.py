"""The per-kind table of VertexJobBackend against the real aiplatform_v1 clients and protos."""

from __future__ import annotations

from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud import aiplatform_v1

from shared.adapters.vertex.jobs import (
    JOB_SERVICE,
    PIPELINE_SERVICE,
    TRAINING_KINDS,
    VertexJobBackend,
    call_vertex,
    kind_of_name,
)
from shared.domain.decisions.hints import parse_hint
from shared.domain.request.message import parse_request
from shared.kernel.config import Settings
from shared.kernel.errors import (
    BackendRejected,
    BackendUnavailable,
    ClaimExpired,
    InvalidRequest,
    OutcomeUnknown,
    QuotaExhausted,
)
from tests.events import load

CLIENTS = {
    JOB_SERVICE: aiplatform_v1.JobServiceClient,
    PIPELINE_SERVICE: aiplatform_v1.PipelineServiceClient,
}
EVENTS = {
    "customJob": "seed_request",
    "hyperparameterTuningJob": "hpt_request",
    "trainingPipeline": "pipeline_request",
}


@pytest.mark.parametrize("kind", list(TRAINING_KINDS.values()), ids=list(TRAINING_KINDS))
def test_every_kind_names_real_client_methods_and_requests(kind):
    client = CLIENTS[kind.service]
    for verb in ("create", "get", "cancel"):
        assert callable(getattr(client, f"{verb}_{kind.field}"))
    assert callable(getattr(client, f"list_{kind.plural_field}"))
    for verb in ("Create", "Get", "List", "Cancel"):
        assert hasattr(aiplatform_v1, f"{kind.rpc(verb)}Request")
    assert kind_of_name(f"projects/p/locations/l/{kind.collection}/1") is kind


class RecordingClient:
    """Answers any GAPIC method by recording it; creates echo the resource with a name."""

    def __init__(self, service: str) -> None:
        self.service = service
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, method: str) -> Any:
        def call(**kwargs: Any) -> Any:
            self.calls.append((method, kwargs))
            if method.startswith("create_"):
                field = method.removeprefix("create_")
                resource = kwargs[field]
                collection = kind_of_field(field).collection
                resource.name = f"projects/p/locations/us-central1/{collection}/7"
                return resource
            if method.startswith("list_"):
                return iter([])
            return None

        return call


def kind_of_field(field: str) -> Any:
    return next(k for k in TRAINING_KINDS.values() if k.field == field)


@pytest.fixture
def clients() -> dict[tuple[str, str], RecordingClient]:
    return {}


@pytest.fixture
def backend(clients) -> VertexJobBackend:
    def factory(service: str, location: str) -> RecordingClient:
        return clients.setdefault((service, location), RecordingClient(service))

    return VertexJobBackend(Settings(project="p"), client_factory=factory)


@pytest.mark.parametrize("kind", list(TRAINING_KINDS))
def test_create_dispatches_on_the_request_kind_with_labels_on_the_resource(backend, clients, kind):
    request = parse_request(load(EVENTS[kind]), {}, "m")
    labels = {"flexjobs-request": "r", "flexjobs-attempt": "1"}
    job = backend.create(request, labels, "us-central1")

    spec = TRAINING_KINDS[kind]
    client = clients[(spec.service, "us-central1")]
    ((method, kwargs),) = client.calls
    assert method == f"create_{spec.field}"
    assert kwargs["parent"] == "projects/p/locations/us-central1"
    assert kwargs["retry"] is None and kwargs["timeout"] == 30.0
    assert dict(kwargs[spec.field].labels) == labels
    assert f"/{spec.collection}/" in job.name


def test_before_send_runs_once_the_create_is_built_and_what_it_raises_sends_nothing(
    backend, clients
):
    request = parse_request(load("seed_request"), {}, "m")
    labels = {"flexjobs-request": "r", "flexjobs-attempt": "1"}
    seen: list[int] = []

    def held() -> None:  # building the request may be slow: checked after it, before the call
        seen.append(len(clients))
        raise ClaimExpired("the claim expired")

    with pytest.raises(ClaimExpired):
        backend.create(request, labels, "us-central1", before_send=held)
    assert seen == [1]  # the client was built, and nothing was sent on it
    assert clients[(JOB_SERVICE, "us-central1")].calls == []


@pytest.mark.parametrize("kind", list(TRAINING_KINDS.values()), ids=list(TRAINING_KINDS))
def test_get_and_cancel_dispatch_on_the_collection_in_the_name(backend, clients, kind):
    name = f"projects/p/locations/europe-west4/{kind.collection}/7"
    with pytest.raises(AttributeError):
        backend.get(name)  # the recording client answers None, which is not a job
    backend.cancel(name)
    client = clients[(kind.service, "europe-west4")]
    assert [m for m, _ in client.calls] == [f"get_{kind.field}", f"cancel_{kind.field}"]


def test_list_labelled_pages_through_every_kind(backend, clients):
    assert list(backend.list_labelled("us-central1")) == []
    methods = sorted(m for client in clients.values() for m, _ in client.calls)
    assert methods == [
        "list_custom_jobs",
        "list_hyperparameter_tuning_jobs",
        "list_training_pipelines",
    ]
    for client in clients.values():
        for _, kwargs in client.calls:
            assert kwargs["request"]["filter"] == "labels.flexjobs-request:*"


def test_find_narrows_to_one_kind_when_told(backend, clients):
    assert backend.find("r", 1, "us-central1", kind="trainingPipeline") == []
    ((method, _),) = clients[(PIPELINE_SERVICE, "us-central1")].calls
    assert method == "list_training_pipelines"
    assert (JOB_SERVICE, "us-central1") not in clients


def test_names_of_other_resources_are_refused():
    with pytest.raises(BackendRejected):
        kind_of_name("projects/p/locations/l/endpoints/1")


def test_what_the_v1_protos_refuse_is_refused_at_parse_time_at_its_rest_path():
    body = load("pipeline_request")
    body["trainingPipeline"]["inputDataConfig"] = {"noSuchField": 1}
    with pytest.raises(InvalidRequest) as err:
        parse_request(body, {}, "m")
    assert [e.path for e in err.value.errors] == ["trainingPipeline.inputDataConfig.noSuchField"]
    body = load("deploy_request")
    body["deployModel"]["deployedModel"]["dedicatedResources"]["spotty"] = True
    with pytest.raises(InvalidRequest) as err:
        parse_request(body, {}, "m")
    (error,) = err.value.errors
    assert error.path == "deployModel.deployedModel.dedicatedResources.spotty"


@pytest.mark.parametrize("collection", ["hyperparameterTuningJobs", "trainingPipelines"])
def test_hints_name_tuning_jobs_and_pipelines_too(collection):
    hint = parse_hint({"jobName": f"projects/p/locations/asia-east1/{collection}/42"})
    assert hint is not None
    assert hint.job_id == "42"


@pytest.mark.parametrize(
    ("fault", "creates", "expected"),
    [
        (gexc.ResourceExhausted("quota"), True, QuotaExhausted),
        (gexc.ResourceExhausted("quota"), False, QuotaExhausted),
        (gexc.ServiceUnavailable("reset"), True, OutcomeUnknown),
        (gexc.DeadlineExceeded("slow"), True, OutcomeUnknown),
        (gexc.InternalServerError("oops"), True, OutcomeUnknown),
        (gexc.ServiceUnavailable("reset"), False, BackendUnavailable),
        (gexc.DeadlineExceeded("slow"), False, BackendUnavailable),
        (gexc.Unauthenticated("token"), True, BackendUnavailable),
        (gexc.PermissionDenied("iam"), True, BackendRejected),
        (gexc.FailedPrecondition("sa disabled"), True, BackendRejected),
        (gexc.InvalidArgument("bad"), True, BackendRejected),
    ],
)
def test_every_vertex_error_is_classified(fault, creates, expected):
    def call():
        raise fault

    with pytest.raises(expected) as raised:
        call_vertex("CreateCustomJob", call, creates=creates)
    # Exactly that class: an OutcomeUnknown is a BackendUnavailable, not the other way round.
    assert type(raised.value) is expected


@pytest.mark.parametrize("fault", [gexc.FailedPrecondition("ended"), gexc.NotFound("gone")])
def test_cancelling_a_job_that_ended_or_went_counts_as_cancelled(fault):
    class Refusing:
        def cancel_custom_job(self, **kwargs):
            raise fault

    backend = VertexJobBackend(Settings(project="p"), lambda service, location: Refusing())
    backend.cancel("projects/p/locations/us-central1/customJobs/1")  # no error


def test_a_cancel_vertex_refuses_for_another_reason_is_not_confirmed():
    class Refusing:
        def cancel_custom_job(self, **kwargs):
            raise gexc.PermissionDenied("iam")

    backend = VertexJobBackend(Settings(project="p"), lambda service, location: Refusing())
    with pytest.raises(BackendRejected):
        backend.cancel("projects/p/locations/us-central1/customJobs/1")
