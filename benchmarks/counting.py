"""Firestore operations counted as Firestore bills them, on the client's own gRPC channel.

:class:`DocumentCounter` is a gRPC client interceptor (unary and streaming) that counts, per
RPC, the documents the server actually returned and the writes the client sent:

- ``RunQuery``: one read per response that carries a ``document``; a query that returns none
  is billed one read all the same (Firestore's minimum of one read per query), counted apart
  as ``empty_queries``;
- ``BatchGetDocuments``: one read per ``found`` and per ``missing`` response (a get of a
  missing document is billed too);
- ``GetDocument``: one read;
- ``RunAggregationQuery``: one read per batch of up to 1,000 index entries matched, read from
  the ``count()`` the answer carries (Firestore's pricing page, "Aggregation queries": a
  ``count()`` that matches 0 to 1,000 index entries is billed one document read, 1,500 two;
  https://firebase.google.com/docs/firestore/pricing#aggregation_queries); an aggregation
  without a count is billed as one batch (a lower bound);
- ``Commit`` and ``BatchWrite``: one write per ``Write`` sent (a field transform rides in its
  write); ``CreateDocument``/``UpdateDocument``: one write.

google-cloud-firestore 2.x has no public argument for a channel or transport
(``client_options`` only names an endpoint): :func:`counted_firestore` subclasses the client and
wraps the one channel it builds for the emulator, so everything above the channel (the GAPIC
client, its retries, the product's adapters) is unchanged.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc


@dataclass
class Counts:
    """What went over the wire since the last :meth:`DocumentCounter.take`."""

    reads: int = 0  # billed document reads (documents returned, gets, aggregation batches)
    documents: int = 0  # documents actually returned by queries and gets
    empty_queries: int = 0  # queries that returned nothing (each billed one read)
    writes: int = 0
    rpcs: Counter[str] = field(default_factory=Counter)
    # Documents returned, per RPC (RunQuery, BatchGetDocuments, GetDocument).
    returned: Counter[str] = field(default_factory=Counter)

    @property
    def billed_reads(self) -> int:
        return self.reads + self.empty_queries


def _method(details: Any) -> str:
    return str(details.method).rsplit("/", 1)[-1]


class _CountedStream:
    """A response stream that counts each response as the client reads it; every other
    attribute (the ``grpc.Call`` methods api_core's wrappers use) is the stream's own."""

    def __init__(self, inner: Any, on_response: Any, on_end: Any) -> None:
        self._inner = inner
        self._on_response = on_response
        self._on_end = on_end
        self._seen = 0

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            response = next(self._inner)
        except StopIteration:
            self._on_end(self._seen)
            raise
        self._seen += self._on_response(response)
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


# grpcio ships no type information, so its classes are Any to mypy (see benchmarks/economy.py).
class DocumentCounter(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
    grpc.StreamStreamClientInterceptor,  # type: ignore[misc]
):
    """Counts Firestore's billed reads and writes on one channel (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = Counts()

    def _add(self, **amounts: int) -> None:
        with self._lock:
            for name, n in amounts.items():
                setattr(self._counts, name, getattr(self._counts, name) + n)

    def _rpc(self, method: str) -> None:
        with self._lock:
            self._counts.rpcs[method] += 1

    def _returned(self, method: str) -> None:
        with self._lock:
            self._counts.returned[method] += 1

    def take(self) -> Counts:
        with self._lock:
            taken, self._counts = self._counts, Counts()
        return taken

    def peek(self) -> Counts:
        with self._lock:
            c = self._counts
            return Counts(
                c.reads,
                c.documents,
                c.empty_queries,
                c.writes,
                Counter(c.rpcs),
                Counter(c.returned),
            )

    # --- unary: the request says it all ---------------------------------------------------

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        method = _method(details)
        self._rpc(method)
        if method in ("Commit", "BatchWrite"):
            self._add(writes=len(request.writes))
        elif method in ("CreateDocument", "UpdateDocument"):
            self._add(writes=1)
        elif method == "GetDocument":
            self._add(reads=1, documents=1)
            self._returned(method)
        return continuation(details, request)

    # --- streams: count what comes back ----------------------------------------------------

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        method = _method(details)
        self._rpc(method)
        stream = continuation(details, request)
        if method == "RunQuery":
            return _CountedStream(stream, self._query_response, self._query_end)
        if method == "BatchGetDocuments":
            return _CountedStream(stream, self._get_response, lambda _seen: None)
        if method == "RunAggregationQuery":
            return _CountedStream(stream, self._aggregation_response, self._aggregation_end)
        return stream

    def _query_response(self, response: Any) -> int:
        if "document" in response:
            self._add(reads=1, documents=1)
            self._returned("RunQuery")
            return 1
        return 0

    def _query_end(self, seen: int) -> None:
        if seen == 0:
            self._add(empty_queries=1)

    def _get_response(self, response: Any) -> int:
        if "found" in response:
            self._add(reads=1, documents=1)
            self._returned("BatchGetDocuments")
            return 1
        if "missing" in response:
            self._add(reads=1)
            return 1
        return 0

    def _aggregation_response(self, response: Any) -> int:
        if "result" not in response:
            return 0
        entries = None
        for value in response.result.aggregate_fields.values():
            if "integer_value" in value:
                entries = max(entries or 0, int(value.integer_value))
        self._add(reads=aggregation_reads(entries))
        return 1

    def _aggregation_end(self, seen: int) -> None:
        if seen == 0:
            self._add(reads=1)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        self._rpc(_method(details))
        return continuation(details, requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        self._rpc(_method(details))
        return continuation(details, requests)


def aggregation_reads(entries: int | None) -> int:
    """Billed reads of one aggregation that matched ``entries`` index entries (None: unknown,
    billed as one batch).

    >>> [aggregation_reads(n) for n in (None, 0, 1, 1000, 1001, 1500, 10_000)]
    [1, 1, 1, 1, 2, 2, 10]
    """
    if not entries:
        return 1
    return max(1, math.ceil(entries / 1000))


def counted_firestore(project: str, counter: DocumentCounter) -> Any:
    """A ``google.cloud.firestore.Client`` for the emulator whose channel ``counter`` sees."""
    from google.cloud import firestore

    class CountedFirestore(firestore.Client):
        def _emulator_channel(self, transport: Any) -> Any:
            # google-cloud-firestore leaves BaseClient._emulator_channel unannotated.
            channel = super()._emulator_channel(transport)  # type: ignore[no-untyped-call]
            return grpc.intercept_channel(channel, counter)

    return CountedFirestore(project=project)
