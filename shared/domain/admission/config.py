"""The queue file: admission queues, their GPU quotas, weights, cohorts and priorities.

Operators declare queues in one YAML file deployed with the functions. The caller reads the
file; :func:`parse_queue_file` bounds its bytes and parses it (no anchors or aliases, as for a
gcloud config), and :func:`read_queues` validates the mapping with pydantic and returns typed,
frozen records. Every problem is reported at once, at its path (``queues[1].quotas[0].pool``),
in one :class:`~shared.kernel.errors.InvalidConfiguration`.

The format (every key but ``queues[].name`` is optional)::

    fairSharing:
      usageHalfLifeSeconds: 3600       # how fast past usage is forgiven (default 1 h)
    projectQuota:                      # the fallback ceiling when the Cloud Quotas API is
      - region: us-central1            # not readable: the project's real quota limits
        acceleratorType: NVIDIA_H100_80GB
        pool: PREEMPTIBLE
        limit: 32
    queues:
      - name: team-a
        weight: 3                      # fair share: usage / weight, lower goes first
        cohort: research               # queues of one cohort lend and borrow
        quotas:
          - region: us-central1
            acceleratorType: NVIDIA_H100_80GB
            pool: PREEMPTIBLE          # ON_DEMAND (STANDARD) or PREEMPTIBLE (SPOT, FLEX_START)
            nominal: 16                # GPUs the queue may always use
            borrowingLimit: 8          # at most this much more from the cohort (absent: all)
            lendingLimit: 8            # at most this much of its nominal lent (absent: all)
        priorities: {high: 100, normal: 0}
        defaultPriority: normal
        preemption: {withinQueue: false, withinCohort: false, requireCheckpoint: true}

Why these rules:

- **Pools follow Vertex's quota metrics.** STANDARD draws on
  ``custom_model_training_nvidia_*_gpus``; SPOT and FLEX_START both draw on
  ``custom_model_training_preemptible_nvidia_*_gpus`` (seed 000), so they share one pool.
- **Cohorts as Kueue has them.** A queue's ``nominal`` is its own. Of it, ``lendingLimit``
  (default: all of it) is lent to its cohort; the rest is kept for the queue alone. A queue
  may use, beyond what it keeps, up to the cohort's lent capacity, and at most
  ``borrowingLimit`` past its nominal (default: no limit). Without a cohort there is nothing
  to borrow, so a limit on borrowing or lending there is a mistake and refused.
- **Priorities.** A queue names its priority classes; a request names a class or an integer
  between the queue's lowest and highest class (so a team cannot outrank what its queue
  allows). Without ``priorities`` a queue has one class, ``normal: 0``. ``defaultPriority``
  (a class or an integer in range; default: the class valued 0 if any, else the lowest) is
  what a request naming none gets.
- **Preemption is opt-in** (off unless ``withinQueue`` or ``withinCohort`` is true), and a
  job with no complete checkpoint is never preempted unless its queue sets
  ``requireCheckpoint: false``: ending it would lose all its work.
- **The ``default`` queue.** A request that names no queue goes to ``default``. A file with
  no queues (or no file) is one implicit ``default`` queue with no quota of its own: only the
  project's quota bounds it, and admission then orders requests by priority and arrival, and
  keeps creates within quota. A file that declares queues but no ``default`` gets an implicit
  ``default`` with no quota at all, so a request naming no queue is refused at intake: an
  operator who declared quotas did not mean an unlisted queue to pass them by.
- **Bounded**: :data:`MAX_FILE_BYTES` of text, :data:`MAX_QUEUES` queues,
  :data:`MAX_QUOTAS` quotas and :data:`MAX_PRIORITY_CLASSES` classes per queue, names of at
  most :data:`MAX_NAME` characters, and every number within a range, so the records built
  here are bounded in bytes whatever the file says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Annotated, Any, Final

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError

from shared.domain.model.strategies import AUTO, Strategy
from shared.domain.model.values import clip, key_path
from shared.domain.request.gcloud_yaml import NoAliasLoader
from shared.domain.request.machines import DWS_ACCELERATORS, NON_DWS_GPUS
from shared.kernel.errors import FieldError, InvalidConfiguration
from shared.kernel.regions import REGION_PATTERN

#: The queue file's text, in bytes (UTF-8): a few hundred bytes a queue, so far above any real
#: file, and small enough that PyYAML composing it stays a few megabytes.
MAX_FILE_BYTES: Final = 256 * 1024
#: Queues a file may declare (Kueue clusters run a few dozen ClusterQueues).
MAX_QUEUES: Final = 64
#: Quotas (one per region, accelerator and pool) per queue, and project quotas per file.
MAX_QUOTAS: Final = 32
MAX_PROJECT_QUOTAS: Final = 256
#: Priority classes per queue.
MAX_PRIORITY_CLASSES: Final = 16
#: A queue, cohort or class name: a DNS label (as Kueue names its queues), at most 63.
MAX_NAME: Final = 63
NAME_PATTERN: Final = r"[a-z]([-a-z0-9]*[a-z0-9])?"
#: Priorities lie within Kubernetes' PriorityClass range for user classes.
MAX_PRIORITY: Final = 1_000_000_000
#: GPUs in one quota: far above any project's quota, low enough for exact arithmetic.
MAX_GPUS: Final = 1_000_000
MAX_WEIGHT: Final = 1000.0
#: The half-life of past usage: a minute (usage forgotten at once) to 30 days.
DEFAULT_HALF_LIFE_SECONDS: Final = 3600
MIN_HALF_LIFE_SECONDS: Final = 60
MAX_HALF_LIFE_SECONDS: Final = 30 * 24 * 3600
#: The queue a request that names none goes to.
DEFAULT_QUEUE: Final = "default"
#: The priority classes of a queue that names none.
DEFAULT_PRIORITIES: Final = MappingProxyType({"normal": 0})

_GPUS: Final = tuple(DWS_ACCELERATORS + NON_DWS_GPUS)


class Pool(StrEnum):
    """The Vertex GPU quota a job draws on: on-demand or preemptible."""

    ON_DEMAND = "ON_DEMAND"
    PREEMPTIBLE = "PREEMPTIBLE"


_POOL_OF: Final = MappingProxyType(
    {
        Strategy.STANDARD: Pool.ON_DEMAND,
        Strategy.SPOT: Pool.PREEMPTIBLE,
        Strategy.FLEX_START: Pool.PREEMPTIBLE,
    }
)


def pool_of(strategy: str) -> Pool:
    """The quota pool a strategy draws on.

    Raises:
        ValueError: for AUTO (its decision chose a strategy: pass that) or an unknown name.

    Examples:
        >>> pool_of("FLEX_START"), pool_of("SPOT"), pool_of("STANDARD")
        (<Pool.PREEMPTIBLE: 'PREEMPTIBLE'>, <Pool.PREEMPTIBLE: 'PREEMPTIBLE'>, <Pool.ON_DEMAND: 'ON_DEMAND'>)
    """  # noqa: E501
    if strategy == AUTO:
        raise ValueError("AUTO draws on the pool of the strategy its decision chose: pass that")
    try:
        return _POOL_OF[Strategy(strategy)]
    except ValueError:
        raise ValueError(f"unknown strategy {strategy!r}") from None


@dataclass(frozen=True, order=True)
class Resource:
    """One Vertex GPU quota: a region, an accelerator type and a pool."""

    region: str
    accelerator: str
    pool: Pool

    def __str__(self) -> str:
        return f"{self.accelerator} {self.pool.value} in {self.region}"


@dataclass(frozen=True)
class Quota:
    """A queue's quota of one resource, in GPUs. ``borrowing_limit`` None: it may borrow all
    its cohort lends; ``lending_limit`` None: it lends all its nominal."""

    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None

    @property
    def lendable(self) -> int:
        """GPUs of its nominal the queue lends to its cohort."""
        return self.nominal if self.lending_limit is None else min(self.lending_limit, self.nominal)

    @property
    def kept(self) -> int:
        """GPUs of its nominal no other queue may use."""
        return self.nominal - self.lendable


@dataclass(frozen=True)
class Preemption:
    """Whom a queue's waiting workloads may preempt (opt-in), and whether its own running
    jobs need a checkpoint to be preempted."""

    within_queue: bool = False
    within_cohort: bool = False
    require_checkpoint: bool = True


@dataclass(frozen=True)
class Queue:
    """One admission queue. ``unbounded``: the implicit ``default`` of a file with no queues,
    which only the project's quota bounds."""

    name: str
    weight: float = 1.0
    cohort: str | None = None
    quotas: Mapping[Resource, Quota] = field(default_factory=dict)
    priorities: Mapping[str, int] = field(default_factory=lambda: DEFAULT_PRIORITIES)
    default_priority: int = 0
    preemption: Preemption = field(default_factory=Preemption)
    unbounded: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "quotas", MappingProxyType(dict(self.quotas)))
        object.__setattr__(self, "priorities", MappingProxyType(dict(self.priorities)))

    def quota(self, resource: Resource) -> Quota:
        """Its quota of ``resource``; none listed is a nominal of 0 (it may still borrow)."""
        return self.quotas.get(resource, _NONE)

    def priority_range(self) -> tuple[int, int]:
        values = self.priorities.values()
        return min(values), max(values)

    def allowed(self) -> str:
        """The priorities a request may name, for messages.

        Examples:
            >>> Queue("a", priorities={"high": 100, "normal": 0}).allowed()
            'high: 100, normal: 0; or an integer 0..100'
        """
        classes = _names(self.priorities)
        low, high = self.priority_range()
        return classes if low == high else f"{classes}; or an integer {low}..{high}"

    def priority_of(self, raw: object) -> int | None:
        """The priority a request's ``priority`` value names in this queue (None: absent
        names the default), or None when the queue does not allow it.

        Examples:
            >>> q = Queue("a", priorities={"high": 100, "normal": 0})
            >>> q.priority_of("high"), q.priority_of(50), q.priority_of(101), q.priority_of(None)
            (100, 50, None, 0)
        """
        if raw is None:
            return self.default_priority
        if isinstance(raw, str):
            return self.priorities.get(raw)
        low, high = self.priority_range()
        if isinstance(raw, int) and not isinstance(raw, bool) and low <= raw <= high:
            return raw
        return None


_NONE: Final = Quota(0, borrowing_limit=0, lending_limit=0)


@dataclass(frozen=True)
class Queues:
    """The whole configuration: the queues by name, the half-life of fair sharing and the
    project quotas configured as the fallback ceiling.

    Examples:
        >>> queues = read_queues({})
        >>> list(queues.queues), queues.queue("default").unbounded
        (['default'], True)
    """

    queues: Mapping[str, Queue]
    half_life_seconds: float = DEFAULT_HALF_LIFE_SECONDS
    project_quota: Mapping[Resource, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "queues", MappingProxyType(dict(self.queues)))
        object.__setattr__(self, "project_quota", MappingProxyType(dict(self.project_quota)))

    def queue(self, name: str) -> Queue:
        return self.queues[name]

    def cohort_of(self, queue: Queue) -> tuple[Queue, ...]:
        """The queues of ``queue``'s cohort, itself included (itself alone without one)."""
        if queue.cohort is None:
            return (queue,)
        return tuple(q for q in self.queues.values() if q.cohort == queue.cohort)


# The wire form, exactly as the file writes it (camelCase), validated by pydantic. Strict
# types: YAML's "10" is a string, and true is not a count.
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME, pattern=f"^{NAME_PATTERN}$")]
Gpus = Annotated[StrictInt, Field(ge=0, le=MAX_GPUS)]
PriorityValue = Annotated[StrictInt, Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY)]
Region = Annotated[str, Field(max_length=MAX_NAME, pattern=f"^{REGION_PATTERN}$")]
Accelerator = Annotated[str, Field(max_length=MAX_NAME)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _ResourceModel(_Strict):
    region: Region
    acceleratorType: Accelerator
    # Strict mode takes only Pool instances; the file writes the name.
    pool: Annotated[Pool, Field(strict=False)]

    def resource(self) -> Resource:
        return Resource(self.region, self.acceleratorType, self.pool)


class _QuotaModel(_ResourceModel):
    nominal: Gpus
    borrowingLimit: Gpus | None = None
    lendingLimit: Gpus | None = None


class _ProjectQuotaModel(_ResourceModel):
    limit: Gpus


class _PreemptionModel(_Strict):
    withinQueue: bool = False
    withinCohort: bool = False
    requireCheckpoint: bool = True


class _QueueModel(_Strict):
    name: Name
    weight: Annotated[StrictInt | StrictFloat, Field(gt=0, le=MAX_WEIGHT)] = 1
    cohort: Name | None = None
    quotas: Annotated[list[_QuotaModel], Field(max_length=MAX_QUOTAS)] = []
    priorities: Annotated[dict[Name, PriorityValue], Field(max_length=MAX_PRIORITY_CLASSES)] = {}
    defaultPriority: Name | PriorityValue | None = None
    preemption: _PreemptionModel = _PreemptionModel()


class _FairSharingModel(_Strict):
    usageHalfLifeSeconds: Annotated[
        StrictInt, Field(ge=MIN_HALF_LIFE_SECONDS, le=MAX_HALF_LIFE_SECONDS)
    ] = DEFAULT_HALF_LIFE_SECONDS


class _FileModel(_Strict):
    fairSharing: _FairSharingModel = _FairSharingModel()
    projectQuota: Annotated[list[_ProjectQuotaModel], Field(max_length=MAX_PROJECT_QUOTAS)] = []
    # Each queue is validated on its own (:func:`read_queues`), so that one queue's problems
    # do not hide the checks across queues.
    queues: Annotated[list[Any], Field(max_length=MAX_QUEUES)] = []


def parse_queue_file(text: str) -> Queues:
    """Read the queue file's text: at most :data:`MAX_FILE_BYTES`, YAML without anchors or
    aliases (an alias multiplies what the bytes bound sees), then :func:`read_queues`. An
    empty file is no queues.

    Raises:
        InvalidConfiguration: with every problem found.

    Examples:
        >>> parse_queue_file("queues:\\n  - name: team-a\\n").queue("team-a").weight
        1.0
    """
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_FILE_BYTES:
        problem = f"the queue file is {size} bytes; at most {MAX_FILE_BYTES} are read"
        raise InvalidConfiguration([FieldError("$", problem)])
    try:
        document = yaml.load(text, Loader=NoAliasLoader)  # a SafeLoader: no Python tags
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = f"not valid YAML{where}: {exc.problem or 'invalid YAML'}"
        raise InvalidConfiguration([FieldError("$", problem)]) from exc
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        problem = f"not valid YAML: {type(exc).__name__}"
        raise InvalidConfiguration([FieldError("$", problem)]) from exc
    if document is None:
        document = {}
    if not isinstance(document, Mapping):
        problem = f"the queue file must be a mapping with queues, not a {type(document).__name__}"
        raise InvalidConfiguration([FieldError("$", problem)])
    return read_queues(document)


def read_queues(raw: Mapping[str, Any]) -> Queues:
    """Validate a parsed queue file and build its records (see the module's docstring).

    Raises:
        InvalidConfiguration: with every problem found, at its path.

    Examples:
        >>> read_queues({"queues": [{"name": "a", "weight": 0}, {"name": "b"}, {"name": "b"}]})
        Traceback (most recent call last):
        ...
        shared.kernel.errors.InvalidConfiguration: invalid configuration: queues[0].weight: Input should be greater than 0; queues[2].name: 'b' is declared twice
    """  # noqa: E501
    try:
        model = _FileModel.model_validate(raw)
    except ValidationError as exc:
        raise InvalidConfiguration([_field_error(e, ()) for e in exc.errors()]) from None
    errors: list[FieldError] = []
    queues: dict[str, Queue] = {}
    for i, item in enumerate(model.queues):
        path = f"queues[{i}]"
        try:
            entry = _QueueModel.model_validate(item)
        except ValidationError as exc:
            errors.extend(_field_error(e, ("queues", i)) for e in exc.errors())
            continue
        if entry.name in queues:
            errors.append(FieldError(f"{path}.name", f"{entry.name!r} is declared twice"))
            continue
        queues[entry.name] = _queue(entry, path, errors)
    project: dict[Resource, int] = {}
    for i, item in enumerate(model.projectQuota):
        errors.extend(_check_accelerator(f"projectQuota[{i}]", item))
        if item.resource() in project:
            errors.append(FieldError(f"projectQuota[{i}]", f"{item.resource()} is listed twice"))
        project[item.resource()] = item.limit
    if errors:
        raise InvalidConfiguration(errors)
    if DEFAULT_QUEUE not in queues:
        # No queue at all: today's behaviour, within the project's quota. Queues but no
        # default: a request naming none is refused (see the module's docstring).
        queues[DEFAULT_QUEUE] = Queue(DEFAULT_QUEUE, unbounded=not queues)
    return Queues(queues, float(model.fairSharing.usageHalfLifeSeconds), project)


def _queue(entry: _QueueModel, path: str, errors: list[FieldError]) -> Queue:
    quotas: dict[Resource, Quota] = {}
    for j, item in enumerate(entry.quotas):
        where = f"{path}.quotas[{j}]"
        errors.extend(_check_accelerator(where, item))
        if item.resource() in quotas:
            errors.append(FieldError(where, f"{item.resource()} is listed twice in this queue"))
        limits = (("borrowingLimit", item.borrowingLimit), ("lendingLimit", item.lendingLimit))
        for key, value in limits:
            if value is not None and entry.cohort is None:
                errors.append(
                    FieldError(f"{where}.{key}", "only a queue in a cohort borrows or lends")
                )
        if item.lendingLimit is not None and item.lendingLimit > item.nominal:
            errors.append(
                FieldError(f"{where}.lendingLimit", f"must not exceed nominal ({item.nominal})")
            )
        quotas[item.resource()] = Quota(item.nominal, item.borrowingLimit, item.lendingLimit)
    priorities = dict(entry.priorities) or dict(DEFAULT_PRIORITIES)
    default = _default_priority(entry, priorities, f"{path}.defaultPriority", errors)
    preemption = Preemption(
        entry.preemption.withinQueue,
        entry.preemption.withinCohort,
        entry.preemption.requireCheckpoint,
    )
    if preemption.within_cohort and entry.cohort is None:
        errors.append(FieldError(f"{path}.preemption.withinCohort", "the queue is in no cohort"))
    return Queue(
        entry.name, float(entry.weight), entry.cohort, quotas, priorities, default, preemption
    )


def _default_priority(
    entry: _QueueModel, priorities: dict[str, int], path: str, errors: list[FieldError]
) -> int:
    low, high = min(priorities.values()), max(priorities.values())
    raw = entry.defaultPriority
    if raw is None:
        return 0 if 0 in priorities.values() else low
    if isinstance(raw, str):
        if raw not in priorities:
            errors.append(FieldError(path, f"names no class of the queue ({_names(priorities)})"))
            return low
        return priorities[raw]
    if not low <= raw <= high:
        errors.append(FieldError(path, f"must be a class ({_names(priorities)}) or {low}..{high}"))
        return low
    return raw


def _names(priorities: Mapping[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(priorities.items(), key=lambda kv: -kv[1]))


def _check_accelerator(path: str, item: _ResourceModel) -> list[FieldError]:
    if item.acceleratorType in _GPUS:
        return []
    return [FieldError(f"{path}.acceleratorType", "must be a Vertex AI GPU type such as NVIDIA_L4")]


def _field_error(error: Mapping[str, Any], prefix: tuple[str | int, ...]) -> FieldError:
    path = "$"
    for part in (*prefix, *error.get("loc", ())):
        path = f"{path}[{part}]" if isinstance(part, int) else key_path(path, part)
    path = path.removeprefix("$.") if path != "$" else path
    return FieldError(path, clip(str(error.get("msg", "is not valid")), 200) or "is not valid")
