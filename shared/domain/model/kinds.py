"""The request kinds: one declaration each, which every module that tells kinds apart reads.

A request holds one Vertex REST body under its kind's key (``{"customJob": {...}}``). What
differs between kinds is declared here once: the body's key, the v1 message it is, the Vertex
collection and service of the resource it creates, where its CustomJobSpec sits, and how its
GPUs multiply. Parsing, the canonical form, the rules' dispatch, attempts, hints, the Vertex
adapter, the schema generator and the test fakes read these declarations; none names a kind.

Adding a kind means a declaration here, its checks (``shared.domain.request.validation``),
its body model in the request's model (``shared.domain.request.wire``) and the simulator's
support (which speaks Vertex's API and so keeps its own list).

Every training kind is labelled alike (:func:`shared.domain.model.ids.labels_for`): the
request's label and the attempt number, which is how a create is found again. A deployment
carries no labels of ours; its tag is in the deployed model's display name
(:mod:`shared.domain.decisions.deploy_model`).

Pure data: no Google import (the domain's contract), so the v1 names are plain strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class JobKind:
    """One request kind and how it maps onto Vertex AI v1.

    Examples:
        >>> CUSTOM_JOB.name, CUSTOM_JOB.collection, CUSTOM_JOB.training
        ('customJob', 'customJobs', True)
        >>> ".".join((TRAINING_PIPELINE.name, *TRAINING_PIPELINE.job_spec))
        'trainingPipeline.trainingTaskInputs'
    """

    #: The body's key in a request, camelCase as in the REST API (``customJob``).
    name: str
    #: The v1 message the body is, by its name in ``google.cloud.aiplatform_v1``.
    message: str
    #: The Vertex collection of the resource the kind creates or acts on, as in its resource
    #: names (``projects/P/locations/L/customJobs/ID``): how a name says its kind.
    collection: str
    #: The v1 service that owns the resource (its GAPIC client, its audit method names).
    service: str
    #: Whether flexjobs runs it as a training job: created, followed, retried from checkpoints
    #: and cancelled. A kind that is not (a deployment) takes no options and no schedule.
    training: bool = False
    #: Where the CustomJobSpec (worker pools and scheduling) sits in the body; () for none.
    job_spec: tuple[str, ...] = ()
    #: The v1 message the CustomJobSpec is parsed as when the proto holds it untyped (a
    #: pipeline's ``trainingTaskInputs`` is a ``google.protobuf.Value``, a field of the body
    #: itself); None when typed.
    untyped_spec: str | None = None
    #: The body field counting trials run at once: every trial holds the pools' GPUs.
    parallel_field: str | None = None
    #: The prefix of the v1 state names the resource reports (``JOB_STATE_QUEUED``).
    state_prefix: str = "JOB_STATE"
    #: The Cloud Logging resource type of the entries Vertex writes about the resource under
    #: its own id (``resource.labels.job_id``), which are hints; None when it writes none (a
    #: pipeline's changes reach flexjobs through audit entries and the tick).
    log_resource: str | None = None

    def __post_init__(self) -> None:
        # A training kind without a CustomJobSpec would have no scheduling to set or read.
        if self.training != bool(self.job_spec):
            raise ValueError(f"{self.name}: a training kind, and only one, has a job_spec path")
        # The canonical form parses an untyped spec where the body holds it, one level down.
        if self.untyped_spec is not None and len(self.job_spec) != 1:
            raise ValueError(f"{self.name}: an untyped spec must be a field of the body")


CUSTOM_JOB: Final = JobKind(
    "customJob",
    "CustomJob",
    "customJobs",
    "JobService",
    training=True,
    job_spec=("jobSpec",),
    log_resource="ml_job",
)
HYPERPARAMETER_TUNING_JOB: Final = JobKind(
    "hyperparameterTuningJob",
    "HyperparameterTuningJob",
    "hyperparameterTuningJobs",
    "JobService",
    training=True,
    job_spec=("trialJobSpec",),
    parallel_field="parallelTrialCount",
    log_resource="ml_job",
)
TRAINING_PIPELINE: Final = JobKind(
    "trainingPipeline",
    "TrainingPipeline",
    "trainingPipelines",
    "PipelineService",
    training=True,
    job_spec=("trainingTaskInputs",),
    untyped_spec="CustomJobSpec",
    state_prefix="PIPELINE_STATE",
)
#: A DeployModelRequest: deploys a model to an endpoint (on Spot VMs), not a job.
DEPLOY_MODEL: Final = JobKind("deployModel", "DeployModelRequest", "endpoints", "EndpointService")

#: Every kind, in the order messages list them.
ALL_KINDS: Final[tuple[JobKind, ...]] = (
    CUSTOM_JOB,
    HYPERPARAMETER_TUNING_JOB,
    TRAINING_PIPELINE,
    DEPLOY_MODEL,
)
#: The kinds flexjobs runs as training jobs.
TRAINING: Final = tuple(k for k in ALL_KINDS if k.training)

#: Every kind's body key, and the training kinds' (what most callers compare a kind with).
KINDS: Final = tuple(k.name for k in ALL_KINDS)
TRAINING_KINDS: Final = tuple(k.name for k in TRAINING)

_BY_NAME: Final = {k.name: k for k in ALL_KINDS}
_BY_COLLECTION: Final = {k.collection: k for k in TRAINING}


def kind_named(name: object) -> JobKind | None:
    """The kind whose body key is ``name``; None for anything else.

    Examples:
        >>> kind_named("trainingPipeline") is TRAINING_PIPELINE, kind_named("job")
        (True, None)
    """
    return _BY_NAME.get(name) if isinstance(name, str) else None


def training_kind_of(resource_name: str) -> JobKind | None:
    """The training kind a Vertex resource name belongs to, by its collection segment.

    Examples:
        >>> training_kind_of("projects/p/locations/l/hyperparameterTuningJobs/7").name
        'hyperparameterTuningJob'
        >>> training_kind_of("projects/p/locations/l/endpoints/7") is None
        True
    """
    parts = resource_name.split("/")
    return _BY_COLLECTION.get(parts[-2]) if len(parts) >= 2 else None
