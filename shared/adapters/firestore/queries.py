"""The queries the Firestore adapters run: each declared once (:class:`Query`), and read in
pages of a few fields.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from google.cloud.firestore_v1.base_query import FieldFilter

from shared.adapters.firestore.database import call_firestore, fields_of
from shared.domain.model.records import Stored

#: Every query the Firestore adapters run, in the order declared (see :class:`Query`).
DECLARED: list[Query] = []


@dataclass(frozen=True)
class Query:
    """A query an adapter runs, declared once: its collection, the field and operator of
    each filter, and the field and direction (``ASCENDING``, ``DESCENDING``) of each order.
    The adapters build every query from a declaration, so the declarations are the queries;
    the infra drift test checks that each composite one has its index.
    """

    collection: str
    filters: tuple[tuple[str, str], ...]
    order: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        DECLARED.append(self)

    @property
    def fields(self) -> tuple[str, ...]:
        """Every field the query filters or orders on, each once, filters first."""
        return tuple(dict.fromkeys(name for name, _ in (*self.filters, *self.order)))

    @property
    def composite(self) -> bool:
        """Filters or orders on more than one field need a composite index (Firestore builds
        the single-field ones itself)."""
        return len(self.fields) > 1

    def on(self, db: Any, *values: Any, ordered: bool = True) -> Any:
        """The query on ``db``, with one value per filter, in order, then its orders (none
        when not ``ordered``: a count)."""
        query = db.collection(self.collection)
        for (field, op), value in zip(self.filters, values, strict=True):
            query = query.where(filter=FieldFilter(field, op, value))
        for field, direction in self.order if ordered else ():
            query = query.order_by(field, direction=direction)
        return query


#: Documents per page of the tick's reads: each page is one query, and holds no more than
#: this many partial records in flight.
PAGE_SIZE = 500


def pages(
    query: Any, fields: tuple[str, ...], most: int | None = None, at: Any = None
) -> list[Any]:
    """Every document ``query`` finds (the first ``most`` when given), of ``fields`` only,
    read :data:`PAGE_SIZE` at a time (each page a query of its own, resumed after the last
    document of the one before), as of ``at`` (a read time; now when None)."""
    found: list[Any] = []
    for doc in stream(query, fields, PAGE_SIZE, at):
        found.append(doc)
        if most is not None and len(found) >= most:
            break
    return found


def stream(query: Any, fields: tuple[str, ...], size: int, at: Any = None) -> Iterator[Any]:
    """:func:`pages` one page at a time: only a page is held in memory. The query's order
    fields must be among ``fields`` (a page resumes after the last document's values)."""
    query = query.select(list(fields)).limit(size)
    last = None
    while True:
        page = query.start_after(last) if last is not None else query
        docs: list[Any] = call_firestore("query", functools.partial(read_all, page, at))
        yield from docs
        if len(docs) < size:
            return
        last = docs[-1]


def read_all(query: Any, at: Any = None) -> list[Any]:
    """Every document ``query`` finds, as of ``at`` (now when None), in one call."""
    return list(query.stream(read_time=at))


def partial(docs: Iterable[Any]) -> list[Stored]:
    """Documents a query of some fields returned, as partial records keyed by document id."""
    return [Stored(fields_of(d), d.update_time, partial=True, key=d.id) for d in docs]
