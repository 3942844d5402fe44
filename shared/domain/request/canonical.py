"""Normalize, then validate: read a Vertex body the way Vertex does, and write it canonically.

The Vertex AI v1 REST API parses a body with the proto3 JSON rules, which accept more than one
spelling of the same thing: int64 values as numbers or strings (``"replicaCount": "2"``), enum
values as names or numbers (``"acceleratorType": 11``), field names in camelCase or as in the
proto (``service_account``), default values that mean "absent" (``"serviceAccount": ""``), and
output-only fields it ignores (``"state": 0``, ``"name": ""``). Rules written against raw JSON
keys miss what the parser accepts, so :func:`canonical_body` parses the body with the v1 proto
first and returns its one canonical REST form:

- camelCase keys, enum names, default values dropped;
- output-only fields dropped (Vertex ignores them; a rule must never read them);
- int64 values as JSON integers, so the rules see ``2``, not ``"2"``;
- a trainingPipeline's ``trainingTaskInputs`` (a ``google.protobuf.Value``, which takes any
  JSON) parsed as the CustomJobSpec the custom task reads, unknown fields refused.

Every rule then runs on that form, and it is what a
:class:`~shared.domain.request.message.JobRequest` holds, so what is stored and sent to Vertex is
exactly what was validated.

The v1 types are imported on first use, never at import: the function entry points import
this module, and their cold start must stay cheap.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Final

from shared.domain.model.kinds import kind_named
from shared.domain.model.values import key_path, kind_of, show
from shared.kernel.errors import FieldError

_PACKAGE: Final = "google.cloud.aiplatform.v1."
_INT64_TYPES: Final = frozenset({3, 4, 6, 16, 18})  # INT64, UINT64, FIXED64, SFIXED64, SINT64
_TYPE_ENUM: Final = 14
# DOUBLE, FLOAT, the integer types and ENUM: none of them takes a JSON boolean.
_NUMERIC_TYPES: Final = frozenset({1, 2, 3, 4, 5, 6, 7, 13, 14, 15, 16, 17, 18})
# A field's line in a generated class docstring, then the first line of its description.
_DOC_FIELD: Final = re.compile(r"^ {8}(\w+) \([^\n]*\):\n {12}Output only\.", re.M)
# json_format's own error texts: the message path it names, and the chain of fields.
_AT_PATH: Final = re.compile(r' at "?([A-Za-z]\w*(?:\.\w+(?:\[[^\]"]*\])*)*)"?')
_SEGMENT: Final = re.compile(r"(\w+)((?:\[[^\]]*\])*)")
_CHAIN: Final = re.compile(r"Failed to parse (\w+) field: ")
_INVALID: Final = "not a valid Vertex AI v1 value"
# json_format passes some Python errors through; say what they mean for a JSON body.
_REASONS: Final = (
    (re.compile(r"expected string or bytes-like object, got '\w+'"), "must be a string"),
    (re.compile(r"unhashable type: '\w+'"), "must be an enum value name or number"),
    (re.compile(r"invalid literal for int\(\) with base 10: "), "must be an integer, not "),
)


def canonical_body(kind: str, body: dict[str, Any]) -> tuple[dict[str, Any], list[FieldError]]:
    """Parse ``body`` as the v1 message of ``kind``; return its canonical REST form.

    On any problem the body is returned unchanged with the problems, at camelCase REST paths
    under ``kind`` (such as ``customJob.jobSpec.workerPoolSpecs[0].replicaCount``).

    Examples:
        >>> body = {"displayName": "x", "state": 0, "jobSpec": {"service_account": "",
        ...     "workerPoolSpecs": [{"replicaCount": "2",
        ...                          "machineSpec": {"acceleratorType": 11}}]}}
        >>> canonical_body("customJob", body)
        ({'displayName': 'x', 'jobSpec': {'workerPoolSpecs': [{'machineSpec': \
{'acceleratorType': 'NVIDIA_L4'}, 'replicaCount': 2}]}}, [])
        >>> canonical_body("customJob", {"jobSpec": {"noSuchField": 1}})[1]
        [FieldError(path='customJob.jobSpec.noSuchField', message=...)]
    """
    declared = kind_named(kind)
    if declared is None:
        raise KeyError(kind)  # parse_request only passes a declared kind
    out, errors = _canonical(declared.message, body, kind)
    if errors or declared.untyped_spec is None:
        return out, errors
    # The proto holds this CustomJobSpec as a google.protobuf.Value, which takes any JSON:
    # read it as the message the custom task reads, unknown fields refused.
    (key,) = declared.job_spec  # an untyped spec is a field of the body itself
    inputs = out.get(key)
    if not isinstance(inputs, dict):
        return out, []  # the rules say what the custom task needs instead
    spec, errors = _canonical(declared.untyped_spec, inputs, f"{kind}.{key}")
    if errors:
        return body, errors
    out[key] = spec
    return out, []


def _canonical(
    message: str, body: dict[str, Any], base: str
) -> tuple[dict[str, Any], list[FieldError]]:
    from google.cloud.aiplatform_v1 import types
    from google.protobuf import json_format

    pb_class = getattr(types, message).pb()
    if unencodable := _unencodable(body, base):
        return body, unencodable
    try:
        errors = _spelling_errors(pb_class.DESCRIPTOR, body, base)
        if errors:
            return body, errors
        parsed = pb_class()
        json_format.ParseDict(body, parsed)
        _drop_output_only(parsed)
        out = json_format.MessageToDict(parsed)
        _int64_to_int(pb_class.DESCRIPTOR, out)
    except json_format.ParseError as exc:
        return body, [_parse_error(str(exc), pb_class.DESCRIPTOR, body, base)]
    except json_format.Error as exc:
        # Serializing back can fail too: an infinite number inside a google.protobuf.Value
        # (a pipeline's trainingTaskInputs) has no JSON form.
        return body, [FieldError(base, f"is not a valid Vertex AI v1 {message}: {exc}")]
    except RecursionError:
        return body, [FieldError(base, "is nested too deeply to process")]
    except (ValueError, TypeError, OverflowError) as exc:
        # json_format raises these for a few values it cannot convert: an int too large, or
        # an infinite number (JSON's 1e400) where an integer or an enum number belongs.
        return body, [FieldError(base, f"is not a valid Vertex AI v1 {message}: {exc}")]
    return out, []


# --- reading the body the way the parser does ------------------------------------------------


def _is_plain_message(field: Any) -> bool:
    """A message field the rules look into (google.protobuf types are values, not bodies)."""
    sub = field.message_type
    return sub is not None and not sub.full_name.startswith("google.protobuf.")


def _map_value(field: Any) -> Any:
    """The value field of a map field's entry, or None when ``field`` is not a map."""
    sub = field.message_type
    if sub is None or not sub.GetOptions().map_entry:
        return None
    return sub.fields_by_name["value"]


@functools.cache
def _fields_by_spelling(descriptor: Any) -> dict[str, Any]:
    """Every key the parser takes for a field: its camelCase (JSON) name and its proto name."""
    names: dict[str, Any] = {}
    for field in descriptor.fields:
        names[field.name] = field
        names[field.json_name] = field
    return names


def _unencodable(body: Any, base: str) -> list[FieldError]:
    """Strings (keys too) that are not valid Unicode: JSON's ``"\\udcff"`` decodes to a lone
    surrogate, which has no UTF-8 form, so protobuf cannot hold it (its C parser fails with a
    SystemError rather than a ParseError). At most 10 are named; walked without recursion, so
    a deeply nested body is left to the parser's own refusal.

    Examples:
        >>> _unencodable({"a": ["ok", "\\udcff"]}, "customJob")
        [FieldError(path='customJob.a[1]', message='is not valid Unicode: it holds a lone surrogate')]
    """  # noqa: E501
    try:
        # Every string of the body, keys too, in one pass of the C encoder: when they all
        # encode, there is nothing to name, and no walk is needed (the walk is for naming).
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, TypeError, ValueError, RecursionError):
        pass  # one does not encode, or a value is not JSON: the walk says which
    else:
        return []
    problem = "is not valid Unicode: it holds a lone surrogate"
    found: list[FieldError] = []
    stack: list[tuple[Any, str]] = [(body, base)]
    while stack and len(found) < 10:
        node, path = stack.pop()
        if isinstance(node, str):
            if not _encodes(node):
                found.append(FieldError(path, problem))
        elif isinstance(node, dict):
            for key, value in reversed(list(node.items())):
                here = key_path(path, key)
                if isinstance(key, str) and not _encodes(key):
                    found.append(FieldError(here, problem))
                else:
                    stack.append((value, here))
        elif isinstance(node, list):
            stack.extend((value, f"{path}[{i}]") for i, value in reversed(list(enumerate(node))))
    return found


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _spelling_errors(descriptor: Any, node: Any, path: str) -> list[FieldError]:
    """Unknown fields and fields named twice (``serviceAccount`` and ``service_account``).

    json_format takes the last of two spellings without a word; a body naming a field twice is
    ambiguous, so it is refused. Values are left to json_format.
    """
    if not isinstance(node, dict):
        return []
    errors: list[FieldError] = []
    spellings = _fields_by_spelling(descriptor)
    seen: dict[str, str] = {}
    for key, value in node.items():
        field = spellings.get(key) if isinstance(key, str) else None
        if field is None:
            errors.append(
                FieldError(
                    key_path(path, key),
                    f"unknown field: Vertex AI v1 {descriptor.name} has no field {show(key)}",
                )
            )
            continue
        here = f"{path}.{field.json_name}"
        if field.json_name in seen:
            errors.append(
                FieldError(here, f"is given twice, as {seen[field.json_name]} and {key}; keep one")
            )
            continue
        seen[field.json_name] = key
        errors.extend(_nested_spelling_errors(field, value, here))
    return errors


def _nested_spelling_errors(field: Any, value: Any, path: str) -> list[FieldError]:
    if value is None:
        return []  # null is the default value: absent
    entry = _map_value(field)
    if entry is not None:
        if not isinstance(value, dict):
            return [FieldError(path, f"must be a JSON object (a map), not {kind_of(value)}")]
        if not _is_plain_message(entry):
            return []
        return [
            error
            for key, item in value.items()
            for error in _spelling_errors(entry.message_type, item, key_path(path, key))
        ]
    if field.type == _TYPE_ENUM and not _all(value, _is_enum_value):
        # json_format reads false or 0.0 as the number 0, the enum's default: the strategy
        # false would become FLEX_START. proto3 JSON takes an enum's name or integer only.
        return [FieldError(path, "must be an enum value name or integer")]
    if field.type in _NUMERIC_TYPES and not _all(value, lambda item: not isinstance(item, bool)):
        return [FieldError(path, "must be a number, not a boolean")]
    if not _is_plain_message(field):
        return []
    what = f"a Vertex AI v1 {field.message_type.name}"
    if field.is_repeated:
        if not isinstance(value, list):
            return [FieldError(path, f"must be an array of {what}, not {kind_of(value)}")]
        return [
            error
            for i, item in enumerate(value)
            for error in (
                _spelling_errors(field.message_type, item, f"{path}[{i}]")
                if isinstance(item, dict)
                else [FieldError(f"{path}[{i}]", f"must be {what}, not {kind_of(item)}")]
            )
        ]
    if not isinstance(value, dict):
        return [FieldError(path, f"must be a JSON object ({what}), not {kind_of(value)}")]
    return _spelling_errors(field.message_type, value, path)


def _is_enum_value(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _all(value: Any, test: Any) -> bool:
    """``test`` holds for the value, or for every item of a repeated field's list."""
    return all(test(item) for item in value) if isinstance(value, list) else bool(test(value))


def _parse_error(text: str, descriptor: Any, body: dict[str, Any], base: str) -> FieldError:
    """Turn json_format's error text into a FieldError at the camelCase REST path it names.

    json_format names the message path (``at "CustomJob.jobSpec.workerPoolSpecs[0]"``) for most
    problems, with the keys as written (so proto names are turned into camelCase), and only the
    chain of fields (``Failed to parse replicaCount field: ...``) for some; then the elements
    of each array on the way are parsed alone to find the one at fault.
    """
    reason = _CHAIN.split(text)[-1].split("\n")[0].rstrip(".")
    for pattern, plain in _REASONS:
        reason = pattern.sub(plain, reason)
    chain = _CHAIN.findall(text)
    at = _AT_PATH.search(text)
    if at is None:
        return FieldError(_locate(descriptor, body, chain, base), f"{_INVALID}: {reason}")
    reason = _AT_PATH.split(reason)[0].rstrip(".")
    segments = [_SEGMENT.fullmatch(p) for p in at.group(1).split(".")[1:]]  # drop CustomJob
    named = [(m.group(1), re.findall(r"\[([^\]]*)\]", m.group(2))) for m in segments if m]
    # The path stops at the message holding the field; the chain names the rest.
    named += [(name, []) for name in chain[len(named) :]]
    return FieldError(_rest_path(descriptor, named, base), f"{_INVALID}: {reason}")


def _rest_path(descriptor: Any, named: list[tuple[str, list[str]]], base: str) -> str:
    """The camelCase REST path of (field name, [index or map key]) steps from ``descriptor``."""
    path = base
    for name, keys in named:
        field = _fields_by_spelling(descriptor).get(name) if descriptor else None
        path += f".{field.json_name if field else _camel(name)}"
        entry = _map_value(field) if field else None
        for key in keys:
            path = key_path(path, key) if entry is not None else f"{path}[{key}]"
        sub = entry if entry is not None else field
        descriptor = sub.message_type if sub is not None else None
    return path


def _locate(descriptor: Any, node: Any, chain: list[str], path: str) -> str:
    """The path of the chain of fields ``chain`` in ``node``, with the failing array index."""
    from google.protobuf import json_format, message_factory

    if not chain or not isinstance(node, dict):
        return ".".join([path, *(_camel(p) for p in chain)])
    spellings = _fields_by_spelling(descriptor)
    field = spellings.get(chain[0]) if chain[0] in node else None
    if field is None:
        # json_format's chain skips a message held in an array element: look one level down.
        for key, value in node.items():
            holder = spellings.get(key) if isinstance(key, str) else None
            if holder is None or not _is_plain_message(holder):
                continue
            if isinstance(value, dict) and chain[0] in value:
                return _locate(holder.message_type, value, chain, f"{path}.{holder.json_name}")
        return ".".join([path, *(_camel(p) for p in chain)])
    here = f"{path}.{field.json_name}"
    value = node[chain[0]]
    if len(chain) == 1 or not _is_plain_message(field):
        return here
    if field.is_repeated and isinstance(value, list):
        message_class = message_factory.GetMessageClass(field.message_type)
        for i, item in enumerate(value):
            try:
                json_format.ParseDict(item, message_class())
            except (json_format.ParseError, ValueError, TypeError, OverflowError):
                return _locate(field.message_type, item, chain[1:], f"{here}[{i}]")
        return here
    return _locate(field.message_type, value, chain[1:], here)


def _camel(name: str) -> str:
    return re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), name)


# --- writing the canonical form --------------------------------------------------------------


def _drop_output_only(message: Any) -> None:
    """Clear every output-only field of ``message`` and of the messages it holds."""
    for field, value in message.ListFields():
        if field.name in _output_only(field.containing_type):
            message.ClearField(field.name)
            continue
        entry = _map_value(field)
        if entry is not None:
            if _is_plain_message(entry):
                for item in value.values():
                    _drop_output_only(item)
        elif _is_plain_message(field):
            for item in value if field.is_repeated else [value]:
                _drop_output_only(item)


@functools.cache
def _output_only(descriptor: Any) -> frozenset[str]:
    """The output-only fields of a v1 message.

    The ``google.api.field_behavior`` annotation is read from the descriptor when it carries
    one; the proto-plus descriptors of ``google-cloud-aiplatform`` do not keep field options,
    so the generated docstring, written from the same proto file, is read too: each
    output-only field's description starts with "Output only.".
    """
    from google.api import field_behavior_pb2

    annotated = {
        field.name
        for field in descriptor.fields
        if field_behavior_pb2.OUTPUT_ONLY
        in field.GetOptions().Extensions[field_behavior_pb2.field_behavior]
    }
    return frozenset(annotated | set(_DOC_FIELD.findall(_proto_plus_doc(descriptor))))


def _proto_plus_doc(descriptor: Any) -> str:
    """The docstring of the proto-plus class of a v1 message ('' for other packages)."""
    from google.cloud.aiplatform_v1 import types

    if not descriptor.full_name.startswith(_PACKAGE):
        return ""
    node: Any = types
    for part in descriptor.full_name.removeprefix(_PACKAGE).split("."):
        node = getattr(node, part, None)
    return getattr(node, "__doc__", None) or ""


def _int64_to_int(descriptor: Any, node: dict[str, Any]) -> None:
    """Turn the int64 strings MessageToDict writes back into ints, in place."""
    by_json = {field.json_name: field for field in descriptor.fields}
    for key, value in node.items():
        field = by_json.get(key)
        if field is None:
            continue
        entry = _map_value(field)
        if entry is not None:
            for item_key, item in value.items():
                if entry.type in _INT64_TYPES:
                    value[item_key] = int(item)
                elif _is_plain_message(entry):
                    _int64_to_int(entry.message_type, item)
        elif field.type in _INT64_TYPES:
            node[key] = [int(v) for v in value] if isinstance(value, list) else int(value)
        elif _is_plain_message(field):
            for item in value if isinstance(value, list) else [value]:
                _int64_to_int(field.message_type, item)
