"""Turn a gcloud ``config.yaml`` (``gcloud ai custom-jobs create --config``) into a request.

The file holds a CustomJobSpec in YAML, as in seed 000::

    workerPoolSpecs:
      machineSpec:
        machineType: a2-highgpu-1g
        acceleratorType: NVIDIA_TESLA_A100
        acceleratorCount: 1
      replicaCount: 1
      containerSpec:
        imageUri: gcr.io/ucaip-test/ucaip-training-test
    scheduling:
      strategy: FLEX_START
      maxWaitDuration: 7200s

gcloud accepts ``workerPoolSpecs`` as one mapping or a list of them; flexjobs always sends a
list. Every other top-level key (``scheduling``, ``serviceAccount``, ``baseOutputDirectory``,
...) is a CustomJobSpec field and goes into ``jobSpec`` unchanged, except ``displayName``, which
gcloud takes as a flag and flexjobs also accepts in the file. The result is the request message
``{"requestId": ..., "customJob": {"displayName": ..., "jobSpec": {...}}}`` that
:func:`shared.domain.request.message.parse_request` accepts, so the YAML form is checked by exactly
the same rules as the JSON form.

Clients use it (a CLI, a script publishing requests), and so does ``handle_upload`` for
``.yaml`` request files dropped in the upload bucket.
"""

from __future__ import annotations

import datetime
import json
import math
from typing import Any, Final

import yaml

from shared.kernel.errors import FieldError, InvalidRequest

DEFAULT_DISPLAY_NAME: Final = "flexjobs-job"

# A node count alone does not bound bytes: one 20 KB string referenced 50,000 times through an
# alias is 50,000 nodes and a gigabyte of JSON. So aliases and anchors are refused outright (a
# gcloud config never needs them), and the copy counts the bytes of the JSON it builds against
# ``max_bytes`` (the message limit), so nothing read from a file can expand past it. Both
# bounds below are far above any real job spec.
MAX_NODES: Final = 100_000
MAX_DEPTH: Final = 64
#: What the JSON form of a config may hold when the caller names no budget: the default
#: ``FLEXJOBS_MAX_MESSAGE_BYTES``.
DEFAULT_MAX_BYTES: Final = 256 * 1024


class NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing anchors and aliases, and more than :data:`MAX_NODES`
    nodes, as it composes the document (before anything is built of it)."""

    nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None,
                None,
                "anchors and aliases (&name, *name, <<: *name) are not accepted: write each "
                "value out",
                event.start_mark,
            )
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise yaml.composer.ComposerError(
                None, None, f"the config has over {MAX_NODES} values", event.start_mark
            )
        return super().compose_node(parent, index)


def parse_gcloud_config(
    text: str,
    request_id: str | None = None,
    *,
    display_name: str | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> dict[str, Any]:
    """Build the request message for a gcloud ``config.yaml``.

    ``display_name`` (gcloud's ``--display-name``) wins over a ``displayName`` key in the file;
    without either the job is named after ``request_id``, else ``flexjobs-job``. The JSON form
    may hold at most ``max_bytes`` (the message limit: it is submitted as one message).

    Raises:
        InvalidRequest: with every problem found: YAML syntax, anchors or aliases, a
            non-mapping document, a missing or malformed ``workerPoolSpecs``, values JSON
            cannot carry, a config whose JSON form passes ``max_bytes``.

    Examples:
        >>> msg = parse_gcloud_config("workerPoolSpecs:\\n  replicaCount: 1\\n", "r1")
        >>> msg["customJob"]["jobSpec"]["workerPoolSpecs"]
        [{'replicaCount': 1}]
        >>> msg["requestId"], msg["customJob"]["displayName"]
        ('r1', 'r1')
    """
    if not isinstance(text, str):
        raise InvalidRequest([FieldError("$", "the gcloud config must be YAML text")])
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > max_bytes:
        # PyYAML holds every node of a document while it composes it (some hundred bytes a
        # value): a text past the message limit could never become a message, and parsed, a
        # few megabytes of it exhaust the function's memory.
        problem = f"the config is {size} bytes; it becomes one message of at most {max_bytes}"
        raise InvalidRequest([FieldError("$", problem)])
    try:
        document = yaml.load(text, Loader=NoAliasLoader)  # a SafeLoader: no Python tags
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or "invalid YAML"
        raise InvalidRequest([FieldError("$", f"not valid YAML{where}: {problem}")]) from exc
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        # ValueError: an integer with more digits than Python converts; RecursionError: nesting
        # deeper than the parser can follow.
        raise InvalidRequest([FieldError("$", f"not valid YAML: {type(exc).__name__}")]) from exc

    errors: list[FieldError] = []
    if not isinstance(document, dict):
        kind = "empty" if document is None else f"a {type(document).__name__}"
        problem = f"the config must be a mapping with workerPoolSpecs, not {kind}"
        raise InvalidRequest([FieldError("$", problem)])
    spec = _to_json(document, "", errors, _Budget(max_bytes))
    if errors:
        raise InvalidRequest(errors)
    assert isinstance(spec, dict)

    pools = spec.get("workerPoolSpecs")
    if pools is None:
        errors.append(FieldError("workerPoolSpecs", "is required: at least one worker pool"))
    elif isinstance(pools, dict):
        spec["workerPoolSpecs"] = [pools]
    elif not isinstance(pools, list):
        errors.append(
            FieldError("workerPoolSpecs", "must be a worker pool mapping or a list of them")
        )
    name_in_file = spec.pop("displayName", None)
    if name_in_file is not None and not isinstance(name_in_file, str):
        errors.append(FieldError("displayName", "must be a string"))
    if errors:
        raise InvalidRequest(errors)

    name = display_name or name_in_file or request_id or DEFAULT_DISPLAY_NAME
    request: dict[str, Any] = {"customJob": {"displayName": name, "jobSpec": spec}}
    if request_id is not None:
        request = {"requestId": request_id, **request}
    return request


class _Budget:
    """What the copy may still build: values, and bytes of the JSON form (an upper bound:
    each value's text plus its punctuation, each key's too)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.nodes = MAX_NODES
        self.bytes = max_bytes
        self.spent = False

    def take(self, where: str, value: Any, errors: list[FieldError]) -> bool:
        """Charge one value; False (and one error, the first time) once the budget is spent."""
        if self.spent:
            return False
        self.nodes -= 1
        self.bytes -= _json_bytes(value)
        if self.nodes < 0:
            errors.append(FieldError(where, f"the config expands to over {MAX_NODES} values"))
        elif self.bytes < 0:
            problem = (
                f"the config expands to over {self.max_bytes} bytes of JSON, the message limit"
            )
            errors.append(FieldError(where, problem))
        self.spent = self.nodes < 0 or self.bytes < 0
        return not self.spent


def _json_bytes(value: Any) -> int:
    """What ``value`` adds to the JSON text (``json.dumps``' default form), its children
    aside: a scalar's own text, a container's brackets and each key's text, and the
    separators."""
    if isinstance(value, dict):
        return 2 + sum(len(json.dumps(k)) + 4 for k in value if isinstance(k, str))
    if isinstance(value, list):
        return 2 + 2 * len(value)
    if isinstance(value, str | int | float | bool) or value is None:
        try:
            return len(json.dumps(value))
        except ValueError:
            return 24  # an integer too long to print: refused by the copy anyway
    return 24


def _to_json(
    value: Any, path: str, errors: list[FieldError], budget: _Budget, depth: int = 0
) -> Any:
    """Copy a YAML value into plain JSON types, reporting what JSON cannot carry, within the
    budget's values and bytes."""
    where = path or "$"
    if not budget.take(where, value, errors):
        return None
    if depth > MAX_DEPTH:
        errors.append(FieldError(where, f"is nested more than {MAX_DEPTH} levels deep"))
        return None
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            errors.append(FieldError(where, "must be a finite number"))
        return value
    if isinstance(value, list):
        return [
            _to_json(item, f"{path}[{i}]", errors, budget, depth + 1)
            for i, item in enumerate(value)
        ]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                kind = type(key).__name__
                errors.append(FieldError(where, f"has a {kind} key; quote keys to make them text"))
                continue
            out[key] = _to_json(item, f"{path}.{key}" if path else key, errors, budget, depth + 1)
        return out
    if isinstance(value, datetime.date):
        # YAML reads 2024-01-01 as a date; Vertex fields want the text.
        errors.append(FieldError(where, "is a YAML date/time; quote it to send text"))
        return None
    errors.append(FieldError(where, f"a YAML {type(value).__name__} cannot be sent as JSON"))
    return None
