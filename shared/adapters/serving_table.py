"""The policy table objective mode chooses from: its file, read bounded and validated.

``./dev bench serving --write-table`` replays every combination of the serving knobs on one
half of the preemption traces and writes what it measured to
``shared/domain/serving/policy_table.json`` (:func:`encode_table`); the functions read it back
with :func:`load_policy_table` and hand the :class:`~shared.domain.serving.objective.PolicyTable`
to :func:`~shared.domain.serving.objective.choose`, which does no I/O. The loader follows
:mod:`shared.adapters.packaged_prices`: the file is package data, read with
``importlib.resources``.

The format (one row per line, columns named once)::

    {"format": 1, "accelerator": "NVIDIA_L4", "spotRatio": 0.41,
     "learnedOn": ["preemption/1-node/aws-04-19-2023/us-east-1b_intel_64.json", ...],
     "columns": ["replicas", "minOnDemandReplicas", "extraSpotReplicas", "hedge",
                 "atLeastOneReplica", "allRequired", "spotShare", "onDemandShare"],
     "rows": [
      [1, 0, 0, true, 0.924321, 0.920261, 0.6182, 0.1349],
      ...]}

**Bounded and strict**: at most :data:`MAX_TABLE_BYTES` bytes and :data:`MAX_ROWS` rows,
UTF-8 JSON with no NaN or Infinity and no key twice, every value of its type and range, and
no two rows for the same replicas and knobs. A file that breaks any rule is refused whole
with :class:`~shared.kernel.errors.InvalidConfiguration`, every problem at its path
(``rows[3].minOnDemandReplicas``): a table read in part could choose a policy the full table
would not.
"""

from __future__ import annotations

import json
import math
from importlib import resources
from typing import Any, Final, TypeGuard

from shared.domain.serving.objective import (
    MAX_REPLICAS,
    Measured,
    PolicyTable,
    ServingPolicy,
)
from shared.kernel.errors import FieldError, InvalidConfiguration

#: The package and file the table is shipped as (package data, like prices.yaml).
PACKAGE: Final = "shared.domain.serving"
FILE_NAME: Final = "policy_table.json"
FORMAT: Final = 1
#: A row is about 50 bytes and a replica count has a few dozen knob combinations, so 16 KiB
#: holds several replica counts; anything larger is not a table this benchmark wrote.
MAX_TABLE_BYTES: Final = 16 * 1024
MAX_ROWS: Final = 256
#: Trace names recorded in ``learnedOn``, and the length of each (and of the accelerator).
MAX_TRACES: Final = 64
MAX_NAME: Final = 200
#: A node-hour share is at most (N + extra Spot) / N on Spot, 2 on-demand (floor + fallback).
MAX_SHARE: Final = 1.0 + MAX_REPLICAS
COLUMNS: Final = (
    "replicas",
    "minOnDemandReplicas",
    "extraSpotReplicas",
    "hedge",
    "atLeastOneReplica",
    "allRequired",
    "spotShare",
    "onDemandShare",
)
KEYS: Final = frozenset({"format", "accelerator", "spotRatio", "learnedOn", "columns", "rows"})


def encode_table(table: PolicyTable) -> str:
    """The table as its file's text: one row a line, so that a new run's diff reads row by
    row. :func:`decode_table` reads it back equal."""
    head = {
        "format": FORMAT,
        "accelerator": table.accelerator,
        "spotRatio": table.spot_ratio,
        "learnedOn": list(table.learned_on),
        "columns": list(COLUMNS),
    }
    rows = [
        json.dumps(
            [
                row.replicas,
                row.policy.min_on_demand,
                row.policy.extra_spot,
                row.policy.hedge,
                row.at_least_one,
                row.all_required,
                row.spot_share,
                row.on_demand_share,
            ]
        )
        for row in table.rows
    ]
    return json.dumps(head)[:-1] + ', "rows": [\n ' + ",\n ".join(rows) + "]}\n"


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"key(s) {twice} given twice")
    return dict(pairs)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[int | float]:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def _row(path: str, raw: object, problems: list[FieldError]) -> Measured | None:
    if not isinstance(raw, list) or len(raw) != len(COLUMNS):
        problems.append(FieldError(path, f"must be a list of the {len(COLUMNS)} columns"))
        return None
    replicas, floor, extra, hedge, any_, all_, spot, on_demand = raw
    found = len(problems)
    if not _is_count(replicas) or not 1 <= replicas <= MAX_REPLICAS:
        problems.append(FieldError(f"{path}.replicas", f"must be a count from 1 to {MAX_REPLICAS}"))
        return None
    policy = ServingPolicy(floor, extra, hedge)
    for problem in policy.problems(replicas):
        field, _, message = problem.partition(": ")
        problems.append(FieldError(f"{path}.{field}", message))
    for name, value in (("atLeastOneReplica", any_), ("allRequired", all_)):
        if not _is_number(value) or not 0 <= value <= 1:
            problems.append(FieldError(f"{path}.{name}", "must be a fraction from 0 to 1"))
    for name, value in (("spotShare", spot), ("onDemandShare", on_demand)):
        if not _is_number(value) or not 0 <= value <= MAX_SHARE:
            problems.append(FieldError(f"{path}.{name}", f"must be a number from 0 to {MAX_SHARE}"))
    if len(problems) > found:
        return None
    return Measured(replicas, policy, float(any_), float(all_), float(spot), float(on_demand))


def _names(raw: object, problems: list[FieldError]) -> tuple[str, ...]:
    if (
        not isinstance(raw, list)
        or len(raw) > MAX_TRACES
        or not all(isinstance(n, str) and 0 < len(n) <= MAX_NAME for n in raw)
    ):
        problems.append(
            FieldError(
                "learnedOn", f"must list at most {MAX_TRACES} names of 1 to {MAX_NAME} characters"
            )
        )
        return ()
    return tuple(raw)


def _document(data: bytes) -> dict[str, Any]:
    """The file's JSON object, or a refusal that says why it is not one."""
    if len(data) > MAX_TABLE_BYTES:
        raise InvalidConfiguration(
            [FieldError(FILE_NAME, f"{len(data)} bytes, more than the {MAX_TABLE_BYTES} allowed")]
        )
    try:
        document = json.loads(
            data.decode("utf-8"),
            parse_constant=_refuse_constant,
            object_pairs_hook=_no_duplicates,
        )
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        # json.JSONDecodeError is a ValueError; a deep nest of brackets is a RecursionError.
        raise InvalidConfiguration([FieldError(FILE_NAME, f"not a JSON table: {exc}")]) from exc
    if not isinstance(document, dict):
        raise InvalidConfiguration([FieldError(FILE_NAME, "must be a JSON object")])
    return document


def decode_table(data: bytes) -> PolicyTable:
    """Read a policy table file's bytes.

    Examples:
        >>> table = decode_table(b'{"format": 1, "accelerator": "NVIDIA_L4", "spotRatio": 0.4,'
        ...     b' "learnedOn": [], "columns": ' + json.dumps(COLUMNS).encode() +
        ...     b', "rows": [[1, 1, 0, false, 1.0, 1.0, 0.0, 1.0]]}')
        >>> table.rows[0].policy
        ServingPolicy(min_on_demand=1, extra_spot=0, hedge=False)
        >>> try:
        ...     decode_table(b'{"format": 1, "rows": [[1, 2, 0, false, 1, 1, 0, 1]]}')
        ... except InvalidConfiguration as exc:
        ...     [error.path for error in exc.errors]
        ['accelerator', 'spotRatio', 'learnedOn', 'columns', 'rows[0].minOnDemandReplicas']

    Raises:
        InvalidConfiguration: the file is too large, not JSON, or breaks any rule of the
            format; every problem at its path.
    """
    document = _document(data)
    problems: list[FieldError] = []
    problems += [
        FieldError(k, "is not a key of the policy table") for k in document if k not in KEYS
    ]
    if document.get("format") != FORMAT:
        problems.append(FieldError("format", f"must be {FORMAT}"))
    accelerator = document.get("accelerator")
    if not isinstance(accelerator, str) or len(accelerator) > MAX_NAME:
        problems.append(
            FieldError("accelerator", f"must be a name of at most {MAX_NAME} characters")
        )
    raw_ratio = document.get("spotRatio")
    ratio = float(raw_ratio) if _is_number(raw_ratio) else math.nan
    if not 0 < ratio <= 1:
        problems.append(FieldError("spotRatio", "must be Spot/on-demand, a number in (0, 1]"))
    learned = _names(document.get("learnedOn"), problems)
    if document.get("columns") != list(COLUMNS):
        problems.append(FieldError("columns", f"must be {list(COLUMNS)}"))
    raw_rows = document.get("rows")
    rows: list[Measured] = []
    if not isinstance(raw_rows, list) or len(raw_rows) > MAX_ROWS:
        problems.append(FieldError("rows", f"must be a list of at most {MAX_ROWS} rows"))
    else:
        seen: set[tuple[int, ServingPolicy]] = set()
        for i, raw in enumerate(raw_rows):
            row = _row(f"rows[{i}]", raw, problems)
            if row is None:
                continue
            # Two rows for the same replicas and knobs would leave the choice to their order.
            if (row.replicas, row.policy) in seen:
                problems.append(
                    FieldError(f"rows[{i}]", "repeats the replicas and knobs of an earlier row")
                )
            seen.add((row.replicas, row.policy))
            rows.append(row)
    if problems:
        raise InvalidConfiguration(problems)
    return PolicyTable(tuple(rows), ratio, str(accelerator), learned)


def load_policy_table() -> PolicyTable:
    """The table shipped with the functions (``shared/domain/serving/policy_table.json``).

    Reads at most :data:`MAX_TABLE_BYTES` + 1 bytes, so an oversized file is refused without
    being read whole.

    Raises:
        InvalidConfiguration: as :func:`decode_table`.
        FileNotFoundError: the package holds no table.
    """
    with resources.files(PACKAGE).joinpath(FILE_NAME).open("rb") as handle:
        data = handle.read(MAX_TABLE_BYTES + 1)
    return decode_table(data)
