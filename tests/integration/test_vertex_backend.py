"""VertexJobBackend against the simulator over gRPC: the tick's bounded listing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from flexjobs_local.simulator import serve
from shared.adapters.vertex.jobs import VertexJobBackend
from shared.domain.request.message import parse_request
from shared.kernel.config import Settings
from tests.events import load

pytestmark = pytest.mark.integration


def test_list_labelled_is_bounded_by_creation_time():
    handle = serve(time_factor=0)
    try:
        backend = VertexJobBackend(Settings(project="p", vertex_endpoint=handle.grpc_endpoint))
        request = parse_request(load("seed_request"), {}, "m")
        labels = {"flexjobs-request": "seed-1", "flexjobs-attempt": "1"}
        created = backend.create(request, labels, "us-central1")
        now = datetime.now(UTC)

        def names(since):
            return [j.name for j in backend.list_labelled("us-central1", created_since=since)]

        assert names(None) == [created.name]
        assert names(now - timedelta(hours=1)) == [created.name]
        assert names(now + timedelta(days=2)) == []
    finally:
        handle.stop()
