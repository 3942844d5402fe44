"""GcsCheckpointStore with the real storage client over a fake JSON API transport.

The storage emulator returns every field whatever ``fields`` asks for and ignores
``maxResults``, so it cannot show what a listing *asks* for. This transport answers
``objects.list`` the way Cloud Storage does: only the fields named in ``fields`` (partial
response), ``items`` and ``prefixes`` together at most ``maxResults`` per page (default 1,000),
in name order, with ``nextPageToken`` while more remain. It records every request.
"""

from __future__ import annotations

import bisect
import json
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
import requests
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from shared.adapters import gcs
from shared.adapters.gcs import GcsCheckpointStore
from shared.domain.model.checkpoint import Checkpoint

ENDPOINT = "http://fake-gcs.invalid"
BUCKET = "ckpt-bucket"
PREFIX = "runs/r1/checkpoints/"
T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def _rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _split_top_level(spec: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in spec:
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += (ch == "(") - (ch == ")")
        current += ch
    return [*parts, current] if current else parts


def _select(response: dict[str, Any], fields: str | None) -> dict[str, Any]:
    """Partial response: keep only what ``fields`` names, as Cloud Storage does."""
    if fields is None:
        return response
    kept: dict[str, Any] = {}
    for part in _split_top_level(fields):
        name, _, sub = part.partition("(")
        if name not in response:
            continue
        if sub:
            wanted = set(_split_top_level(sub.rstrip(")")))
            kept[name] = [{k: v for k, v in item.items() if k in wanted} for item in response[name]]
        else:
            kept[name] = response[name]
    return kept


class FakeGcs(requests.adapters.BaseAdapter):
    """Cloud Storage's ``objects.list`` for one bucket, held in memory."""

    def __init__(self) -> None:
        super().__init__()
        self.objects: dict[str, dict[str, Any]] = {}
        self.names: list[str] = []
        self.requests: list[dict[str, list[str]]] = []

    def put(self, name: str, updated: datetime, custom_time: datetime | None = None) -> None:
        resource = {
            "kind": "storage#object",
            "name": name,
            "bucket": BUCKET,
            "size": "16",
            "timeCreated": _rfc3339(updated),
            "updated": _rfc3339(updated),
        }
        if custom_time is not None:
            resource["customTime"] = _rfc3339(custom_time)
        if name not in self.objects:
            bisect.insort(self.names, name)
        self.objects[name] = resource

    def entries(self, prefix: str, delimiter: str | None) -> list[tuple[str, str]]:
        """("item" | "prefix", name) in name order, as one listing sees them."""
        out: list[tuple[str, str]] = []
        start = bisect.bisect_left(self.names, prefix)
        for name in self.names[start:]:
            if not name.startswith(prefix):
                break
            cut = name.find(delimiter, len(prefix)) if delimiter else -1
            if cut == -1:
                out.append(("item", name))
            elif not out or out[-1] != ("prefix", name[: cut + 1]):
                out.append(("prefix", name[: cut + 1]))
        return out

    def send(  # type: ignore[override]
        self, request: requests.PreparedRequest, **kwargs: Any
    ) -> requests.Response:
        url = urlsplit(str(request.url))
        query = parse_qs(url.query)
        if unquote(url.path) == f"/storage/v1/b/{BUCKET}":
            # The client fetches the bucket's metadata in the background, for its tracing.
            return self._answer(request, {"kind": "storage#bucket", "name": BUCKET})
        assert unquote(url.path) == f"/storage/v1/b/{BUCKET}/o", url.path
        self.requests.append(query)

        def first(key: str) -> str | None:
            return query[key][0] if key in query else None

        entries = self.entries(first("prefix") or "", first("delimiter"))
        offset = int(first("pageToken") or 0)
        size = min(int(first("maxResults") or 1000), 1000)
        page = entries[offset : offset + size]
        body: dict[str, Any] = {
            "kind": "storage#objects",
            "items": [self.objects[name] for kind, name in page if kind == "item"],
            "prefixes": [name for kind, name in page if kind == "prefix"],
        }
        if offset + size < len(entries):
            body["nextPageToken"] = str(offset + size)
        return self._answer(request, _select(body, first("fields")))

    @staticmethod
    def _answer(request: requests.PreparedRequest, body: dict[str, Any]) -> requests.Response:
        response = requests.Response()
        response.status_code = 200
        response.headers["Content-Type"] = "application/json"
        response._content = json.dumps(body).encode()
        response.request = request
        response.url = str(request.url)
        return response

    def close(self) -> None:
        pass


@pytest.fixture
def fake() -> FakeGcs:
    return FakeGcs()


@pytest.fixture
def store(fake: FakeGcs) -> GcsCheckpointStore:
    session = requests.Session()
    session.mount(ENDPOINT, fake)
    client = storage.Client(
        project="demo",
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        _http=session,
        client_options={"api_endpoint": ENDPOINT},
    )
    return GcsCheckpointStore(client=client)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def uri(rel: str) -> str:
    return f"gs://{BUCKET}/{PREFIX}{rel}"


# Custom-Time -------------------------------------------------------------------------------------


def test_custom_time_of_the_marker_is_the_checkpoint_time(
    fake: FakeGcs, store: GcsCheckpointStore
) -> None:
    # Copied into place an hour after it was taken: Custom-Time says when it was taken.
    fake.put(PREFIX + "step-00000100/__0_0.distcp", at(60))
    fake.put(PREFIX + "step-00000100/.metadata", at(61), custom_time=at(1))
    found = store.latest(f"gs://{BUCKET}/{PREFIX}")
    assert found == Checkpoint(uri("step-00000100/"), 100, at(1))


def test_custom_time_orders_single_files(fake: FakeGcs, store: GcsCheckpointStore) -> None:
    fake.put(PREFIX + "a.pt", at(50), custom_time=at(5))  # uploaded last, taken first
    fake.put(PREFIX + "b.pt", at(40), custom_time=at(30))
    found = store.latest(f"gs://{BUCKET}/{PREFIX}")
    assert found == Checkpoint(uri("b.pt"), None, at(30))


def test_without_custom_time_the_update_time_counts(
    fake: FakeGcs, store: GcsCheckpointStore
) -> None:
    fake.put(PREFIX + "step-7/data", at(7))
    fake.put(PREFIX + "step-7/_SUCCESS", at(7))
    assert store.latest(f"gs://{BUCKET}/{PREFIX}") == Checkpoint(uri("step-7/"), 7, at(7))


# Bounded listing ---------------------------------------------------------------------------------


def test_work_does_not_grow_with_the_shards_below_the_steps(
    fake: FakeGcs, store: GcsCheckpointStore
) -> None:
    # 20 complete steps of 1,500 shards each: 30,000 objects, which one flat listing reads in
    # 30 pages. The step directories come from one delimited page, and the highest is complete.
    for step in range(1, 21):
        for shard in range(1500):
            fake.put(PREFIX + f"step-{step:08d}/__{shard}_0.distcp", at(step))
        fake.put(PREFIX + f"step-{step:08d}/.metadata", at(step))
    found = store.latest(f"gs://{BUCKET}/{PREFIX}")
    assert found is not None and found.uri == uri("step-00000020/")
    assert len(fake.requests) == 2
    assert all(q.get("delimiter") == ["/"] for q in fake.requests)


def test_half_written_steps_are_skipped_one_request_each(
    fake: FakeGcs, store: GcsCheckpointStore
) -> None:
    fake.put(PREFIX + "step-00000100/.metadata", at(1))
    fake.put(PREFIX + "step-00000100/__0_0.distcp", at(1))
    for step in (200, 300, 400):  # preempted mid-save, each
        fake.put(PREFIX + f"step-{step:08d}/__0_0.distcp", at(step))
    found = store.latest(f"gs://{BUCKET}/{PREFIX}")
    assert found is not None and found.step == 100
    # The prefix, then 400, 300, 200 and 100: highest first.
    assert [q["prefix"][0] for q in fake.requests] == [
        PREFIX,
        *(PREFIX + f"step-{s:08d}/" for s in (400, 300, 200, 100)),
    ]


def test_orbax_item_markers_through_the_store(fake: FakeGcs, store: GcsCheckpointStore) -> None:
    fake.put(PREFIX + "100/commit_success.txt", at(1))
    fake.put(PREFIX + "200/default/ocdbt.process_0/d/abc", at(5))
    fake.put(PREFIX + "200/default/commit_success.txt", at(6))
    fake.put(PREFIX + "200/dataset/commit_success.txt", at(7))
    fake.put(PREFIX + "300/default/ocdbt.process_0/d/abc", at(9))  # never committed
    found = store.latest(f"gs://{BUCKET}/{PREFIX}")
    assert found == Checkpoint(uri("200/"), 200, at(7))


def test_request_bound_stops_the_search_and_falls_back(
    fake: FakeGcs, store: GcsCheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 80 half-written steps above a complete one: the bound stops the search before reaching it.
    fake.put(PREFIX + "step-00000001/_SUCCESS", at(1))
    for step in range(2, 82):
        fake.put(PREFIX + f"step-{step:08d}/__0_0.distcp", at(step))
    fake.put(PREFIX + "final.pt", at(90))
    warnings: list[str] = []
    monkeypatch.setattr(gcs.logger, "warning", lambda msg, *a, **k: warnings.append(msg))
    found = store.latest(f"gs://{BUCKET}/{PREFIX}")
    assert len(fake.requests) == gcs.MAX_REQUESTS
    assert found is not None and found.uri == uri("final.pt")
    assert any("reached its bound" in w for w in warnings)


def test_top_level_pages_are_bounded(
    fake: FakeGcs, store: GcsCheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gcs, "PAGE_SIZE", 3)
    for step in range(1, 41):  # 40 step directories: 14 pages of 3
        fake.put(PREFIX + f"step-{step:08d}/_SUCCESS", at(step))
        fake.put(PREFIX + f"step-{step:08d}/data", at(step))
    found = store.latest(f"gs://{BUCKET}/{PREFIX}")
    top = [q for q in fake.requests if q["prefix"] == [PREFIX]]
    assert len(top) == gcs.MAX_TOP_PAGES
    assert all(q["maxResults"] == ["3"] for q in fake.requests)
    # Name order: the first 30 steps were seen, and the highest of those is complete.
    assert found is not None and found.step == 30


# Stale checkpoints -------------------------------------------------------------------------------


def test_not_before_ignores_another_runs_checkpoints(
    fake: FakeGcs, store: GcsCheckpointStore
) -> None:
    fake.put(PREFIX + "step-00000500/.metadata", at(0))  # the earlier run's
    fake.put(PREFIX + "step-00000500/data", at(0))
    fake.put(PREFIX + "step-00000100/.metadata", at(0), custom_time=at(30))  # this run's
    fake.put(PREFIX + "step-00000100/data", at(0))
    prefix_uri = f"gs://{BUCKET}/{PREFIX}"
    assert store.latest(prefix_uri) == Checkpoint(uri("step-00000500/"), 500, at(0))
    found = store.latest(prefix_uri, not_before=at(10))
    assert found == Checkpoint(uri("step-00000100/"), 100, at(30))
    assert store.latest(prefix_uri, not_before=at(31)) is None


# Confirming one checkpoint -----------------------------------------------------------------------


def test_confirm_lists_the_checkpoint_itself(fake: FakeGcs, store: GcsCheckpointStore) -> None:
    fake.put(PREFIX + "step-00000100/__0_0.distcp", at(1))
    fake.put(PREFIX + "step-00000100/.metadata", at(2))
    fake.put(PREFIX + "step-00000200/.metadata", at(5))  # a marker alone: forged, or stray
    fake.put(PREFIX + "last.pt", at(9))
    told = at(999)  # what the event said: the listing's own time is what counts
    assert store.confirm(Checkpoint(uri("step-00000100/"), 100, told)) == Checkpoint(
        uri("step-00000100/"), 100, at(2)
    )
    assert store.confirm(Checkpoint(uri("step-00000200/"), 200, told)) is None
    assert store.confirm(Checkpoint(uri("step-00000300/"), 300, told)) is None
    assert store.confirm(Checkpoint(uri("last.pt"), None, told)) == Checkpoint(
        uri("last.pt"), None, at(9)
    )
    # One delimited request per checkpoint, each of its own directory or file.
    assert [q["prefix"][0] for q in fake.requests] == [
        PREFIX + "step-00000100/",
        PREFIX + "step-00000200/",
        PREFIX + "step-00000300/",
        PREFIX + "last.pt",
    ]
