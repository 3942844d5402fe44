"""The bounds of an integer field, declared once for the model and the checks.

A request's integer fields (a pool's replicaCount, a retry budget, a traffic share) are bounded.
The request's model (:mod:`shared.domain.request.wire`) states each bound in the JSON Schema it
generates, and the checks refuse what is out of bounds with their own words: both read the
same :class:`Count`, so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field


@dataclass(frozen=True)
class Count:
    """A JSON integer from ``minimum`` to ``maximum`` (no upper bound when ``maximum`` is None).

    As the metadata of ``Annotated[int, count]`` pydantic reads it as ``ge`` and ``le`` (it is
    an annotated-types group of constraints), so a model's field, and the JSON Schema generated
    from it, carry these bounds; a check reads the same two numbers.

    Examples:
        >>> budget = Count(0, 100)
        >>> budget.holds(3), budget.holds(101), budget.holds(True), budget.holds(3.0)
        (True, False, False, False)
        >>> budget.json_schema()
        {'type': 'integer', 'minimum': 0, 'maximum': 100}
        >>> from typing import Annotated
        >>> from pydantic import TypeAdapter
        >>> TypeAdapter(Annotated[int, budget]).json_schema() == budget.json_schema()
        True
    """

    minimum: int
    maximum: int | None = None

    # annotated-types' mark of a group of constraints: pydantic expands it through __iter__.
    __is_annotated_types_grouped_metadata__: ClassVar[Literal[True]] = True

    def __iter__(self) -> Iterator[Any]:
        yield Field(ge=self.minimum, le=self.maximum)

    def holds(self, value: object) -> bool:
        """``value`` is a JSON integer (never a boolean or a float) within the bounds."""
        # A JSON boolean arrives as a Python bool, an int to Python but never a count (is_int).
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        return self.minimum <= value and (self.maximum is None or value <= self.maximum)

    def json_schema(self) -> dict[str, Any]:
        """The bounds as JSON Schema, for a schema written by hand (a map's values)."""
        upper = {} if self.maximum is None else {"maximum": self.maximum}
        return {"type": "integer", "minimum": self.minimum, **upper}
