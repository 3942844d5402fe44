"""The job-request message: parsing, defaults and the contract's minimal checks.

The wire format is a UTF-8 JSON object with exactly one *kind* key holding the Vertex REST body
unchanged, for example ``{"requestId": "r1", "customJob": {...}}``. The body is read the way
Vertex reads it and kept in its canonical REST form (:mod:`shared.domain.request.canonical`): every
rule, the record and the Vertex call see that one form. Parsing never stops at the first
problem: every problem found is reported in one :class:`InvalidRequest`.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.domain.model.ids import check_request_id
from shared.domain.model.kinds import DEPLOY_MODEL, KINDS, TRAINING_KINDS, kind_named
from shared.domain.model.strategies import (
    AUTO,
    DEFAULT_MAX_WAIT,
    DEFAULT_STRATEGY,
    DEFAULT_TIMEOUT,
    Strategy,
)
from shared.domain.model.values import parse_rfc3339, snake_case
from shared.domain.policy.checkpoints import check_checkpoint_uri
from shared.domain.policy.retry import check_fallback, check_retry_policy
from shared.domain.request.auto_regions import REGION_FIELDS, check_region_options
from shared.domain.request.canonical import canonical_body
from shared.domain.request.deadlines import DEADLINE_FIELDS, check_deadline_options
from shared.domain.request.schedule import SLOT, Slot, expand, read_slot
from shared.domain.request.serving_options import SERVING_FIELDS, check_serving_options
from shared.kernel.errors import FieldError, InvalidRequest
from shared.kernel.regions import REGION_HINT, is_region

#: The options of a training request: stored with the record, read by every later attempt.
OPTION_FIELDS = (
    "retryPolicy",
    "fallback",
    "checkpointUri",
    "totalSteps",
    # Admission (shared.domain.admission): the queue the request waits in and its priority,
    # checked against the queue file at intake; here only their shape.
    "queue",
    "priority",
    *DEADLINE_FIELDS,
    *REGION_FIELDS,
    # A deployModel's serving knobs and availability objective (serving_options).
    *SERVING_FIELDS,
)
ENVELOPE_FIELDS = {"requestId", "location", "schedule", *OPTION_FIELDS, *KINDS}

#: Vertex allows display names of up to 128 UTF-8 characters.
MAX_DISPLAY_NAME = 128

_DURATION = re.compile(r"^(-?)(\d+)(\.\d{1,9})?s$")


def parse_duration(value: str) -> float:
    """Parse a protobuf JSON Duration such as ``"1800s"`` or ``"3.5s"`` into seconds.

    Raises:
        ValueError: when ``value`` is not a Duration string.
    """
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if not match:
        raise ValueError(f"{value!r} is not a protobuf Duration such as '1800s' or '3.5s'")
    sign, whole, frac = match.groups()
    seconds = int(whole) + (float(frac) if frac else 0.0)
    return -seconds if sign else seconds


@dataclass(frozen=True)
class JobRequest:
    """A parsed request: the kind, its Vertex REST body with defaults applied, and options."""

    request_id: str
    kind: str
    spec: dict[str, Any]
    location: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    # A scheduled request's slot (its series and concurrency rule); None when unscheduled.
    slot: Slot | None = None
    # Where the request came from, written on its record and rejection as they are:
    # ``source`` ("pubsub" or "gcs"), and for an upload ``object`` and ``line``.
    origin: dict[str, Any] = field(default_factory=dict)
    # When the request was published (the message's publish time): a ``deadline`` is checked
    # against it, so every delivery of one message gets the same verdict. None when unknown.
    published_at: datetime | None = None

    @property
    def scheduling(self) -> dict[str, Any]:
        """The ``scheduling`` object of a training kind ({} for deployments)."""
        return scheduling_of(self.kind, self.spec) or {}

    @property
    def strategy(self) -> str:
        if self.kind == DEPLOY_MODEL.name:
            spot = _deployed_resources(self.spec).get("spot")
            return Strategy.SPOT if spot else Strategy.STANDARD
        return str(self.scheduling.get("strategy", DEFAULT_STRATEGY))

    @property
    def max_wait_seconds(self) -> float | None:
        """Seconds the job may wait for capacity; None means wait indefinitely (``0s``)."""
        raw = self.scheduling.get("maxWaitDuration")
        if not isinstance(raw, str):
            return None
        seconds = parse_duration(raw)
        return None if seconds == 0 else seconds

    @property
    def timeout_seconds(self) -> float | None:
        """The ``scheduling.timeout`` in seconds; None when absent or unreadable (the
        validation package reports a bad one)."""
        raw = self.scheduling.get("timeout")
        try:
            return parse_duration(raw) if isinstance(raw, str) else None
        except ValueError:
            return None

    @property
    def display_name(self) -> str:
        body = self.spec.get("deployedModel", self.spec)
        return str(body.get("displayName", "")) if isinstance(body, dict) else ""


def _deployed_resources(spec: dict[str, Any]) -> dict[str, Any]:
    deployed = spec.get("deployedModel")
    resources = deployed.get("dedicatedResources") if isinstance(deployed, dict) else None
    return resources if isinstance(resources, dict) else {}


def job_spec_path(kind: str) -> tuple[str, ...]:
    """Where the CustomJobSpec (worker pools and scheduling) of a kind lives; () for none.

    Examples:
        >>> job_spec_path("hyperparameterTuningJob"), job_spec_path("deployModel")
        (('trialJobSpec',), ())
    """
    declared = kind_named(kind)
    return declared.job_spec if declared else ()


def job_spec_of(kind: str, spec: dict[str, Any]) -> dict[str, Any] | None:
    """Return the CustomJobSpec dict of a training request, or None when it is not an object
    (or the kind has none)."""
    path = job_spec_path(kind)
    if not path:
        return None  # a deployment: the body itself is no CustomJobSpec
    node: Any = spec
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def scheduling_of(kind: str, spec: dict[str, Any]) -> dict[str, Any] | None:
    if kind not in TRAINING_KINDS:
        return None
    job_spec = job_spec_of(kind, spec)
    scheduling = job_spec.get("scheduling") if job_spec else None
    return scheduling if isinstance(scheduling, dict) else None


def strategy_path(kind: str) -> str:
    """The REST path of a training kind's ``scheduling.strategy``, for messages."""
    return ".".join((kind, *job_spec_path(kind), "scheduling", "strategy"))


def lift_auto(kind: str, body: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Take ``scheduling.strategy: "AUTO"`` out of a training body not read yet.

    AUTO is flexjobs' own strategy: the v1 protos, which read the body first, do not know it.
    So it is taken out (in a copy; the caller's body is left alone), the rest of the body is
    read as usual, and :func:`put_auto` writes it back into the canonical form. Either
    spelling of the path (``jobSpec`` or ``job_spec``) is looked at, as the proto reads both.

    Examples:
        >>> body = {"job_spec": {"scheduling": {"strategy": "AUTO", "timeout": "60s"}}}
        >>> lift_auto("customJob", body)
        (True, {'job_spec': {'scheduling': {'timeout': '60s'}}})
        >>> body["job_spec"]["scheduling"]["strategy"]
        'AUTO'
    """
    if kind not in TRAINING_KINDS:
        return False, body
    out = dict(body)
    node = out
    for key in job_spec_path(kind):
        name = key if key in node else snake_case(key)
        child = node.get(name)
        if not isinstance(child, dict):
            return False, body
        node[name] = node = dict(child)
    scheduling = node.get("scheduling")
    if not isinstance(scheduling, dict) or scheduling.get("strategy") != AUTO:
        return False, body
    node["scheduling"] = {k: v for k, v in scheduling.items() if k != "strategy"}
    return True, out


def put_auto(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Write AUTO back into a canonical training body (see :func:`lift_auto`), in place."""
    job_spec = job_spec_of(kind, spec)
    if job_spec is not None:
        scheduling = job_spec.get("scheduling")
        job_spec["scheduling"] = {**(scheduling if isinstance(scheduling, dict) else {})}
        job_spec["scheduling"]["strategy"] = AUTO
    return spec


def apply_defaults(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of ``spec`` with flexjobs' scheduling defaults filled in.

    The strategy defaults to FLEX_START, ``maxWaitDuration`` to one day (``0s`` is kept: it
    means wait indefinitely) and ``timeout`` to seven days, the most DWS allows.
    """
    return _fill_defaults(kind, copy.deepcopy(spec))


def _fill_defaults(kind: str, out: dict[str, Any]) -> dict[str, Any]:
    """:func:`apply_defaults`, into ``out`` itself."""
    if kind not in TRAINING_KINDS:
        return out
    job_spec = job_spec_of(kind, out)
    if job_spec is None:
        return out
    scheduling = job_spec.setdefault("scheduling", {})
    if not isinstance(scheduling, dict):
        return out
    # In the canonical form STRATEGY_UNSPECIFIED (or 0) is the default value, so it is absent.
    scheduling.setdefault("strategy", DEFAULT_STRATEGY)
    if scheduling["strategy"] == Strategy.FLEX_START:
        scheduling.setdefault("maxWaitDuration", DEFAULT_MAX_WAIT)
    scheduling.setdefault("timeout", DEFAULT_TIMEOUT)
    return out


def decode_message(data: bytes) -> dict[str, Any]:
    """Decode Pub/Sub message data into a JSON object, or raise :class:`InvalidRequest`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest([FieldError("$", f"message data is not UTF-8: {exc}")]) from exc
    try:
        body = json.loads(text)
    except (ValueError, RecursionError) as exc:
        # ValueError covers JSONDecodeError and an integer with more digits than Python converts.
        raise InvalidRequest([FieldError("$", f"message data is not JSON: {exc}")]) from exc
    if not isinstance(body, dict):
        kind = type(body).__name__
        raise InvalidRequest([FieldError("$", f"message must be a JSON object, not {kind}")])
    if "\\u" in text and _holds_lone_surrogate(body):
        # JSON may escape half a surrogate pair; such text is stored nowhere (Firestore and
        # Pub/Sub take UTF-8 only), so the message could never be recorded.
        problem = "message holds text that is not valid Unicode (a lone surrogate, \\udXXX)"
        raise InvalidRequest([FieldError("$", problem)])
    return body


def _holds_lone_surrogate(body: dict[str, Any]) -> bool:
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def read_request_id(body: dict[str, Any], attributes: dict[str, str], message_id: str) -> str:
    """The requestId field, else the ``requestId`` attribute, else the Pub/Sub message id."""
    value = body.get("requestId")
    if isinstance(value, str) and value.strip():
        return value
    return attributes.get("requestId") or message_id


def parse_request(
    body: dict[str, Any],
    attributes: dict[str, str],
    message_id: str,
    publish_time: str | None = None,
) -> JobRequest:
    """Check the envelope of a decoded request and build a :class:`JobRequest`.

    A scheduled request's ``{slot}`` is expanded from the ``scheduleTime`` attribute, else
    ``publish_time`` (see :mod:`shared.domain.request.schedule`).

    Raises:
        InvalidRequest: with every envelope problem found.
    """
    errors: list[FieldError] = []
    request_id = body.get("requestId")
    if request_id is not None and not (isinstance(request_id, str) and request_id.strip()):
        errors.append(FieldError("requestId", "must be a non-empty string when present"))
    location = body.get("location")
    if location is not None and not is_region(location):
        # The location becomes part of the Vertex host name: only a region name may get there.
        errors.append(FieldError("location", f"must be {REGION_HINT}"))
    kinds = [k for k in KINDS if k in body]
    if not kinds:
        errors.append(
            FieldError("$", f"exactly one of {', '.join(KINDS)} is required; none was given")
        )
    elif len(kinds) > 1:
        errors.append(FieldError("$", f"exactly one of {', '.join(KINDS)} is allowed; got {kinds}"))
    for key in sorted(set(body) - ENVELOPE_FIELDS, key=str):
        errors.append(FieldError(str(key), "unknown field; remove it or check its spelling"))
    template = read_request_id(body, attributes, message_id)
    slot, slot_errors = read_slot(template, body.get("schedule"), attributes, publish_time)
    errors.extend(slot_errors)
    if "schedule" in body and kinds and kinds[0] not in TRAINING_KINDS:
        errors.append(FieldError("schedule", f"applies to training jobs only, not {kinds[0]}"))
    checkpoints = body.get("checkpointUri")
    if isinstance(checkpoints, str) and SLOT in checkpoints and "schedule" not in body:
        errors.append(FieldError("checkpointUri", f"has {SLOT} but the request has no schedule"))
    spec = body.get(kinds[0]) if kinds else None
    if kinds and not isinstance(spec, dict):
        errors.append(FieldError(kinds[0], "must be a JSON object (the Vertex REST body)"))
    published_at = parse_rfc3339(publish_time)
    if len(kinds) == 1 and isinstance(spec, dict):
        auto, spec = lift_auto(kinds[0], spec)
        spec, body_errors = canonical_body(kinds[0], spec)
        if auto and not body_errors:
            spec = put_auto(kinds[0], spec)
        if body_errors:
            # The rules need the canonical body, but the options do not: report them too.
            bare = put_auto(kinds[0], _bare(kinds[0])) if auto else {}
            request = JobRequest(
                "", kinds[0], bare, options=_options(body), published_at=published_at
            )
            errors.extend([*body_errors, *check_options(request)])
    request_id = expand(template, slot.start) if slot else template
    errors.extend(check_request_id(request_id))
    if errors:
        raise InvalidRequest(errors)
    assert kinds and isinstance(spec, dict)
    kind = kinds[0]
    # The canonical body is this parse's own (canonical_body wrote it anew, and put_auto into
    # it): the defaults go into it, with no copy.
    spec = _fill_defaults(kind, spec)
    options = _options(body)
    if slot and isinstance(options.get("checkpointUri"), str):
        # Each run of a series checkpoints under its own prefix: with one shared prefix, a
        # replaced run's late checkpoint would count as the next run's progress.
        options["checkpointUri"] = expand(options["checkpointUri"], slot.start)
    return JobRequest(
        request_id=request_id,
        kind=kind,
        spec=spec,
        location=location,
        options=options,
        slot=slot,
        published_at=published_at,
    )


def _options(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in OPTION_FIELDS if k in body}


def _bare(kind: str) -> dict[str, Any]:
    """An empty body of ``kind`` with its CustomJobSpec, for :func:`put_auto` to mark."""
    spec: dict[str, Any] = {}
    node = spec
    for key in job_spec_path(kind):
        node[key] = node = {}
    return spec


def check_options(request: JobRequest) -> list[FieldError]:
    """Return every problem with the request's options: ``retryPolicy``, ``fallback``,
    ``checkpointUri``, ``totalSteps``, and the deadline and region fields of AUTO
    (:mod:`shared.domain.request.deadlines`, :mod:`shared.domain.request.auto_regions`), which
    :func:`~shared.domain.request.validation.check_request` leaves alone; empty means valid.

    The options steer retries of training jobs, so a ``deployModel`` request may not set them.
    AUTO chooses every attempt's strategy itself, so it takes no ``fallback`` ladder.

    Examples:
        >>> request = JobRequest("r1", "customJob", {}, options={"retryPolicy": {"user": -1}})
        >>> [e.path for e in check_options(request)]
        ['retryPolicy.user']
    """
    options = request.options if isinstance(request.options, dict) else {}
    if request.kind == DEPLOY_MODEL.name:
        return [
            *(
                FieldError(key, f"applies to training jobs only; remove it from a {request.kind}")
                for key in sorted(options)
                if key not in SERVING_FIELDS
            ),
            *check_serving_options(request.spec, options),
        ]
    if request.kind not in TRAINING_KINDS:
        return [
            FieldError(key, f"applies to training jobs only; remove it from a {request.kind}")
            for key in sorted(options)
        ]
    errors = [
        FieldError(key, "applies to deployModel requests only; remove it from a training job")
        for key in sorted(options)
        if key in SERVING_FIELDS
    ]
    auto = request.strategy == AUTO
    errors += [
        *check_retry_policy(options.get("retryPolicy")),
        *check_fallback(options.get("fallback")),
        *check_checkpoint_uri(options.get("checkpointUri")),
        *check_total_steps(options.get("totalSteps")),
        *check_admission_shape(options),
        *check_deadline_options(
            options,
            auto=auto,
            strategy_path=strategy_path(request.kind),
            published_at=request.published_at,
            timeout_seconds=request.timeout_seconds,
            scheduled=request.slot is not None,
        ),
        *check_region_options(
            options,
            auto=auto,
            strategy_path=strategy_path(request.kind),
            location=request.location,
        ),
    ]
    if auto and options.get("fallback") is not None:
        errors.append(
            FieldError(
                "fallback",
                "cannot be combined with scheduling.strategy AUTO, which chooses every "
                "attempt's strategy itself; remove fallback",
            )
        )
    return errors


#: The longest queue or priority class name (the queue file's bound).
MAX_QUEUE_NAME = 63


def check_admission_shape(options: dict[str, Any]) -> list[FieldError]:
    """The shape of ``queue`` (a name) and ``priority`` (an integer or a class name); that
    the queue exists and allows the priority is checked at intake against the queue file.

    Examples:
        >>> [e.path for e in check_admission_shape({"queue": 7, "priority": True})]
        ['queue', 'priority']
        >>> check_admission_shape({"queue": "team-a", "priority": "high"})
        []
    """
    errors: list[FieldError] = []
    queue = options.get("queue")
    if "queue" in options and not (isinstance(queue, str) and 0 < len(queue) <= MAX_QUEUE_NAME):
        errors.append(
            FieldError("queue", f"must be a queue name of 1 to {MAX_QUEUE_NAME} characters")
        )
    priority = options.get("priority")
    if "priority" in options:
        number = isinstance(priority, int) and not isinstance(priority, bool)
        name = isinstance(priority, str) and 0 < len(priority) <= MAX_QUEUE_NAME
        if not (number or name):
            errors.append(
                FieldError("priority", "must be an integer or a priority class name of the queue")
            )
    return errors


#: Far above any training run's step count; keeps the progress arithmetic exact.
MAX_TOTAL_STEPS = 10**15


def check_total_steps(raw: object) -> list[FieldError]:
    """Problems with ``totalSteps``, the step a run ends at (``progress`` = step / it).

    Examples:
        >>> check_total_steps(1000), [e.path for e in check_total_steps(0)]
        ([], ['totalSteps'])
    """
    if raw is None:
        return []
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= MAX_TOTAL_STEPS:
        return [FieldError("totalSteps", f"must be an integer from 1 to {MAX_TOTAL_STEPS}")]
    return []
