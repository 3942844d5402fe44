"""The request message's one model: its envelope and each kind's Vertex REST body, as pydantic
models of the wire form (camelCase, the canonical spelling).

This is the one description of what a request may hold. The JSON Schema shipped in ``schema/``
is generated from it (:mod:`flexjobs.schema`), and the checks
(:mod:`shared.domain.request.validation`) enforce what it declares rather than writing it
again: each integer field's bounds are a :class:`~shared.domain.model.bounds.Count` the model
carries and the check reads (the retry budgets' are the retry policy's, a layer below), the
resource names' forms and a trafficSplit's keys are patterns both build from, and the custom
training task is one constant. The checks still read every value themselves: a body is
untrusted JSON, each problem is reported with its exact path and the words that say what to do,
what is required may depend on where a field sits (a placeholder pool, a deployment's default
machine type), and the rules across fields (DWS, the operator's guards, regions) are theirs.
The other enums and limits are taken from the modules that enforce them. Vertex bodies allow
additional properties (they are the Vertex REST API's, and flexjobs passes them through); the
envelope does not.

Pure: pydantic and the domain's own declarations, nothing of Google's.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, create_model
from pydantic.json_schema import SkipJsonSchema

from shared.domain.model.bounds import Count
from shared.domain.model.kinds import (
    ALL_KINDS,
    CUSTOM_JOB,
    DEPLOY_MODEL,
    HYPERPARAMETER_TUNING_JOB,
    KINDS,
    TRAINING_PIPELINE,
    JobKind,
)
from shared.domain.model.strategies import (
    AUTO,
    DEFAULT_MAX_WAIT,
    DEFAULT_STRATEGY,
    DEFAULT_TIMEOUT,
    DEPRECATED_STRATEGIES,
    MAX_DWS_TIMEOUT_SECONDS,
    STRATEGIES,
)
from shared.domain.policy.retry import GROUPS, MAX_FALLBACK_RUNGS, RETRY_BUDGET, RUNG_THRESHOLD
from shared.domain.policy.serving_knobs import MAX_EXTRA_SPOT, MAX_REPLICAS
from shared.domain.request.auto_regions import MAX_CHECKPOINT_GB, MAX_REGIONS
from shared.domain.request.deadlines import (
    DEFAULT_RESTART_OVERHEAD_SECONDS,
    MAX_RESTART_OVERHEAD_SECONDS,
    MAX_WORK_SECONDS,
)
from shared.domain.request.machines import (
    ALL_ACCELERATORS,
    DWS_ACCELERATORS,
    MAX_INT32,
    UNSPECIFIED_ACCELERATOR,
)
from shared.domain.request.message import MAX_DISPLAY_NAME, MAX_QUEUE_NAME, MAX_TOTAL_STEPS
from shared.domain.request.schedule import DEFAULT_SLOT_SECONDS, MAX_SLOT_SECONDS, Concurrency
from shared.kernel.regions import REGION_PATTERN

#: The only training task a trainingPipeline may run: a custom training job.
CUSTOM_TASK_DEFINITION: Final = (
    "gs://google-cloud-aiplatform/schema/trainingjob/definition/custom_task_1.0.0.yaml"
)

#: A segment of a resource name: a project, an endpoint's or a model's id.
RESOURCE_SEGMENT: Final = r"[A-Za-z0-9][A-Za-z0-9._-]*"
#: What may follow a model's id: a version or an alias (models/123@2, models/123@default).
MODEL_VERSION: Final = r"(@[A-Za-z0-9_-]+)?"
#: A key of a trafficSplit: a deployed model's id, 1 to 10 digits ("0" is this deployment).
DEPLOYED_MODEL_ID: Final = r"[0-9]{1,10}"

# The bounds of the bodies' integer fields (the retry budgets' are the retry policy's): the
# models below carry them into the schema, and the checks enforce the same objects.
ACCELERATOR_COUNT: Final = Count(0, MAX_INT32)
POOL_REPLICAS: Final = Count(1)
TRIALS: Final = Count(1)
FAILED_TRIALS: Final = Count(0)
DEPLOYED_REPLICAS: Final = Count(1, MAX_INT32)
# maxReplicaCount 0 is proto3's default value: Vertex reads it as absent (minReplicaCount then),
# and so does flexjobs, whose canonical form drops it before any check.
PEAK_REPLICAS: Final = Count(0, MAX_INT32)
TRAFFIC_SHARE: Final = Count(0, 100)

_DURATION_PATTERN: Final = r"^[0-9]+(\.[0-9]{1,9})?s$"
_GCS_PATTERN: Final = r"^gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/.*)?$"
_REGION_PATTERN: Final = rf"^{REGION_PATTERN}$"

Duration = Annotated[str, StringConstraints(pattern=_DURATION_PATTERN)]
GcsUri = Annotated[str, StringConstraints(pattern=_GCS_PATTERN)]
Region = Annotated[str, StringConstraints(pattern=_REGION_PATTERN)]

# Optional fields are typed ``X | SkipJsonSchema[None]`` so the schema says "a string" rather
# than "a string or null": flexjobs leaves a field out instead of sending null.


class _VertexBody(BaseModel):
    """A Vertex REST object: the fields flexjobs checks; any other Vertex field passes through."""

    model_config = ConfigDict(extra="allow")


class MachineSpec(_VertexBody):
    """Vertex ``MachineSpec``: the machine type and the accelerators attached to it."""

    machineType: str | SkipJsonSchema[None] = Field(
        default=None,
        description="Compute Engine machine type, e.g. a2-highgpu-1g. Accelerator-optimized "
        "types need the exact acceleratorType and acceleratorCount they come with.",
    )
    acceleratorType: str | SkipJsonSchema[None] = Field(
        default=None,
        description="Vertex AcceleratorType. Under FLEX_START only the DWS GPUs are accepted: "
        + ", ".join(DWS_ACCELERATORS)
        + ".",
        json_schema_extra={"enum": [*ALL_ACCELERATORS, UNSPECIFIED_ACCELERATOR]},
    )
    acceleratorCount: Annotated[int, ACCELERATOR_COUNT] | SkipJsonSchema[None] = Field(
        default=None, description="Accelerators per machine."
    )
    tpuTopology: str | SkipJsonSchema[None] = Field(default=None, description="TPU topology.")


class ContainerSpec(_VertexBody):
    """Vertex ``ContainerSpec``: the training image and its command."""

    imageUri: str = Field(min_length=1, description="The training container image.")
    command: list[str] | SkipJsonSchema[None] = None
    args: list[str] | SkipJsonSchema[None] = None


class PythonPackageSpec(_VertexBody):
    """Vertex ``PythonPackageSpec``: a Python package run in a prebuilt image."""

    executorImageUri: str = Field(min_length=1, description="The image that runs the package.")
    packageUris: list[str] = Field(min_length=1, description="gs:// URIs of the packages.")
    pythonModule: str = Field(min_length=1, description="The module to run.")
    args: list[str] | SkipJsonSchema[None] = None


class WorkerPoolSpec(_VertexBody):
    """Vertex ``WorkerPoolSpec``. ``{}`` is allowed after the first pool as a placeholder."""

    machineSpec: MachineSpec | SkipJsonSchema[None] = None
    replicaCount: Annotated[int, POOL_REPLICAS] | SkipJsonSchema[None] = Field(
        default=None, description="Machines in this pool (required in a non-empty pool)."
    )
    containerSpec: ContainerSpec | SkipJsonSchema[None] = None
    pythonPackageSpec: PythonPackageSpec | SkipJsonSchema[None] = None
    diskSpec: dict[str, Any] | SkipJsonSchema[None] = None


class Scheduling(_VertexBody):
    """Vertex ``Scheduling``: how the job is provisioned and how long it may wait and run."""

    strategy: str | SkipJsonSchema[None] = Field(
        default=None,
        description=f"Provisioning strategy; defaults to {DEFAULT_STRATEGY} (DWS). The "
        f"deprecated {', '.join(DEPRECATED_STRATEGIES)} are refused. {AUTO} (flexjobs' own, "
        "never sent to Vertex) chooses each attempt's strategy to meet the request's deadline.",
        # STRATEGY_UNSPECIFIED is the default value: absent, so FLEX_START.
        json_schema_extra={"enum": [*STRATEGIES, AUTO, "STRATEGY_UNSPECIFIED"]},
    )
    maxWaitDuration: Duration | SkipJsonSchema[None] = Field(
        default=None,
        description=f"FLEX_START only: how long to wait for capacity; '0s' waits "
        f"indefinitely. Defaults to {DEFAULT_MAX_WAIT}.",
    )
    timeout: Duration | SkipJsonSchema[None] = Field(
        default=None,
        description=f"Maximum running time; at most {MAX_DWS_TIMEOUT_SECONDS}s under "
        f"FLEX_START. Defaults to {DEFAULT_TIMEOUT}.",
    )
    restartJobOnWorkerRestart: bool | SkipJsonSchema[None] = None
    disableRetries: bool | SkipJsonSchema[None] = None


class CustomJobSpec(_VertexBody):
    """Vertex ``CustomJobSpec``: worker pools, scheduling and the run-as account."""

    workerPoolSpecs: list[WorkerPoolSpec] = Field(
        min_length=1,
        description="Worker pools; under FLEX_START every non-empty pool has the same machineSpec.",
    )
    scheduling: Scheduling | SkipJsonSchema[None] = None
    serviceAccount: str | SkipJsonSchema[None] = Field(
        default=None,
        description="Run-as account; only accounts the operator allows (none by default).",
    )
    baseOutputDirectory: dict[str, Any] | SkipJsonSchema[None] = None


class CustomJob(_VertexBody):
    """Vertex ``CustomJob`` body."""

    displayName: str = Field(min_length=1, max_length=MAX_DISPLAY_NAME)
    jobSpec: CustomJobSpec


class HyperparameterTuningJob(_VertexBody):
    """Vertex ``HyperparameterTuningJob`` body."""

    displayName: str = Field(min_length=1, max_length=MAX_DISPLAY_NAME)
    studySpec: dict[str, Any] = Field(description="Metrics and parameters to tune.")
    maxTrialCount: Annotated[int, TRIALS]
    parallelTrialCount: Annotated[int, TRIALS] = Field(
        description="Trials at once; the GPU cap counts per-trial GPUs times this."
    )
    maxFailedTrialCount: Annotated[int, FAILED_TRIALS] | SkipJsonSchema[None] = None
    trialJobSpec: CustomJobSpec


class TrainingPipeline(_VertexBody):
    """Vertex ``TrainingPipeline`` body running a custom training task."""

    displayName: str = Field(min_length=1, max_length=MAX_DISPLAY_NAME)
    trainingTaskDefinition: str = Field(
        description="Must be the custom training task.",
        json_schema_extra={"const": CUSTOM_TASK_DEFINITION},
    )
    trainingTaskInputs: CustomJobSpec = Field(
        description="The CustomJobSpec of the custom task, scheduling included."
    )


class DedicatedResources(_VertexBody):
    """Vertex ``DedicatedResources`` of a Spot deployment."""

    machineSpec: MachineSpec
    spot: bool = Field(
        description="Must be true: this kind deploys on Spot VMs.",
        json_schema_extra={"const": True},
    )
    minReplicaCount: Annotated[int, DEPLOYED_REPLICAS]
    maxReplicaCount: Annotated[int, PEAK_REPLICAS] | SkipJsonSchema[None] = Field(
        default=None,
        description="At least minReplicaCount; 0 (proto3's default) is read as absent, when "
        "Vertex uses minReplicaCount.",
    )


class DeployedModel(_VertexBody):
    """Vertex ``DeployedModel`` to create on the endpoint."""

    model: str = Field(
        pattern=rf"^projects/{RESOURCE_SEGMENT}/locations/{REGION_PATTERN}"
        rf"/models/{RESOURCE_SEGMENT}{MODEL_VERSION}$",
        description="projects/PROJECT/locations/LOCATION/models/MODEL_ID[@VERSION]",
    )
    displayName: str | SkipJsonSchema[None] = None
    serviceAccount: str | SkipJsonSchema[None] = None
    dedicatedResources: DedicatedResources


class DeployModel(_VertexBody):
    """A Vertex ``DeployModelRequest``: deploy a model to an endpoint on Spot VMs."""

    endpoint: str = Field(
        pattern=rf"^projects/{RESOURCE_SEGMENT}/locations/{REGION_PATTERN}"
        rf"/endpoints/{RESOURCE_SEGMENT}$",
        description="projects/PROJECT/locations/LOCATION/endpoints/ENDPOINT_ID",
    )
    deployedModel: DeployedModel
    trafficSplit: dict[str, int] | SkipJsonSchema[None] = Field(
        default=None,
        description='Percent of traffic per deployed model id; "0" is this deployment. '
        "Integers from 0 to 100 adding up to 100.",
        json_schema_extra={
            "propertyNames": {"pattern": f"^{DEPLOYED_MODEL_ID}$"},
            "additionalProperties": TRAFFIC_SHARE.json_schema(),
            "required": ["0"],
        },
    )


class RetryPolicy(BaseModel):
    """Retry budgets per failure group; groups left out keep their defaults."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "propertyNames": {"enum": list(GROUPS)},
            "additionalProperties": RETRY_BUDGET.json_schema(),
        },
    )


class FallbackRung(BaseModel):
    """One rung of the capacity fallback ladder."""

    model_config = ConfigDict(extra="forbid")

    afterCapacityFailures: Annotated[int, RUNG_THRESHOLD]
    strategy: str | SkipJsonSchema[None] = Field(
        default=None, json_schema_extra={"enum": list(STRATEGIES)}
    )
    location: Region | SkipJsonSchema[None] = None


class Schedule(BaseModel):
    """A scheduled request: one run per slot; the requestId must hold ``{slot}``."""

    model_config = ConfigDict(extra="forbid")

    slotSeconds: int = Field(
        default=DEFAULT_SLOT_SECONDS,
        ge=1,
        le=MAX_SLOT_SECONDS,
        description="Slot length: publishes inside one slot make one job.",
    )
    concurrency: str = Field(
        default=Concurrency.ALLOW.value,
        description="While the series' last run is active: run anyway, skip, or cancel it.",
        json_schema_extra={"enum": [c.value for c in Concurrency]},
    )


#: Each declared kind's body model: the message has one optional field per kind, in order.
BODY_MODELS: Final[dict[JobKind, type[_VertexBody]]] = {
    CUSTOM_JOB: CustomJob,
    HYPERPARAMETER_TUNING_JOB: HyperparameterTuningJob,
    TRAINING_PIPELINE: TrainingPipeline,
    DEPLOY_MODEL: DeployModel,
}


class AvailabilityObjectiveField(BaseModel):
    """A deployModel's availability objective: shares of minutes served."""

    model_config = ConfigDict(extra="forbid", title="availabilityObjective")

    atLeastOneReplica: Annotated[float, Field(gt=0, le=1)] = Field(
        description="Share of minutes with at least one replica serving, e.g. 0.999."
    )
    allRequired: Annotated[float, Field(gt=0, le=1)] | SkipJsonSchema[None] = Field(
        default=None, description="Share of minutes with every required replica serving."
    )


class _Envelope(BaseModel):
    """The message's own fields; :data:`JobRequestMessage` adds one field per kind."""

    model_config = ConfigDict(
        extra="forbid",
        title="flexjobs job request",
        json_schema_extra={"oneOf": [{"required": [kind]} for kind in KINDS]},
    )

    requestId: str | SkipJsonSchema[None] = Field(
        default=None,
        min_length=1,
        description="Idempotency key; defaults to the Pub/Sub message id.",
    )
    location: Region | SkipJsonSchema[None] = Field(
        default=None, description="Vertex AI region, e.g. us-central1."
    )
    retryPolicy: RetryPolicy | SkipJsonSchema[None] = None
    fallback: list[FallbackRung] | SkipJsonSchema[None] = Field(
        default=None,
        description="Capacity fallback ladder, applied in order.",
        json_schema_extra={"maxItems": MAX_FALLBACK_RUNGS},
    )
    checkpointUri: GcsUri | SkipJsonSchema[None] = Field(
        default=None, description="gs:// prefix of the job's checkpoints."
    )
    totalSteps: Annotated[int, Field(ge=1, le=MAX_TOTAL_STEPS)] | SkipJsonSchema[None] = Field(
        default=None,
        description="The step training ends at: progress is the checkpoint step over it.",
    )
    schedule: Schedule | SkipJsonSchema[None] = Field(
        default=None, description="Cloud Scheduler runs: {slot} in requestId becomes the slot."
    )
    queue: Annotated[str, Field(min_length=1, max_length=MAX_QUEUE_NAME)] | SkipJsonSchema[None] = (
        Field(
            default=None,
            description="The admission queue the request waits in (default: default).",
        )
    )
    priority: (
        Annotated[str, Field(min_length=1, max_length=MAX_QUEUE_NAME)] | int | SkipJsonSchema[None]
    ) = Field(
        default=None,
        description="Its priority in the queue: an integer, or a class name the queue defines.",
    )
    deadline: str | SkipJsonSchema[None] = Field(
        default=None,
        description=f"With scheduling.strategy {AUTO} (and only then): RFC 3339 time, with an "
        "offset, by which the job must be done.",
        json_schema_extra={"format": "date-time"},
    )
    estimatedRunSeconds: Annotated[int, Field(ge=1, le=MAX_WORK_SECONDS)] | SkipJsonSchema[None] = (
        Field(
            default=None,
            description=f"With {AUTO}: the work in seconds, if it ran uninterrupted.",
        )
    )
    checkpointIntervalSeconds: (
        Annotated[int, Field(ge=1, le=MAX_WORK_SECONDS)] | SkipJsonSchema[None]
    ) = Field(
        default=None,
        description=f"With {AUTO}: running seconds between complete checkpoints (what a "
        "preemption can lose).",
    )
    restartOverheadSeconds: (
        Annotated[int, Field(ge=0, le=MAX_RESTART_OVERHEAD_SECONDS)] | SkipJsonSchema[None]
    ) = Field(
        default=None,
        description=f"With {AUTO}: seconds each start costs before progress resumes; default "
        f"{DEFAULT_RESTART_OVERHEAD_SECONDS}.",
    )
    regions: (
        Annotated[list[Region], Field(min_length=1, max_length=MAX_REGIONS)] | SkipJsonSchema[None]
    ) = Field(
        default=None,
        description=f"With {AUTO}: other regions AUTO may move the job to, each once (at most "
        f"{MAX_REGIONS} with location).",
        json_schema_extra={"uniqueItems": True},
    )
    checkpointSizeGb: Annotated[float, Field(gt=0, le=MAX_CHECKPOINT_GB)] | SkipJsonSchema[None] = (
        Field(
            default=None,
            description=f"With {AUTO} and regions: the checkpoint's size in GB, what a move reads "
            "across regions.",
        )
    )
    pinnedRegion: bool | SkipJsonSchema[None] = Field(
        default=None,
        description=f"With {AUTO}: true keeps the job (and its data) in location; no regions.",
    )
    minOnDemandReplicas: Annotated[int, Field(ge=0, le=MAX_REPLICAS)] | SkipJsonSchema[None] = (
        Field(
            default=None,
            description="With deployModel: a warm on-demand floor of this many of the required "
            "replicas, always deployed beside the Spot model (at most the required).",
        )
    )
    extraSpotReplicas: Annotated[int, Field(ge=0, le=MAX_EXTRA_SPOT)] | SkipJsonSchema[None] = (
        Field(
            default=None,
            description="With deployModel: Spot replicas over the required (over-provisioning).",
        )
    )
    hedge: bool | SkipJsonSchema[None] = Field(
        default=None,
        description="With deployModel: the reactive on-demand fallback when Spot serves too "
        "few replicas (default true).",
    )
    availabilityObjective: AvailabilityObjectiveField | SkipJsonSchema[None] = Field(
        default=None,
        description="With deployModel and none of the knobs: flexjobs chooses the cheapest "
        "measured knobs that meet it.",
    )


#: What an absent body is: left out of the schema (never null), as for the envelope's fields.
Absent: TypeAlias = SkipJsonSchema[None]


def _body_field(kind: JobKind) -> Any:
    """The message's optional field of one kind: its body model (a KeyError: none declared)."""
    return (BODY_MODELS[kind] | Absent, None)


#: The whole message: the envelope and, after its fields, one optional body per kind.
JobRequestMessage = create_model(
    "JobRequestMessage",
    __base__=_Envelope,
    __doc__="A flexjobs job request: an envelope around exactly one Vertex REST body.",
    **{kind.name: _body_field(kind) for kind in ALL_KINDS},
)
