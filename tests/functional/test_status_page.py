"""The status page through functions-framework (``http`` signature), on records the domain
wrote: a request submitted through handle_job_request, moved on by hints as Vertex would, on
the in-memory fakes. Every page is checked for escaping and for its security headers."""

from __future__ import annotations

import html
import itertools
import json
import logging
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import markupsafe
import pytest
from functions_framework import create_app

from shared import bootstrap
from shared.domain.policy.pricing import PriceTable
from shared.kernel.errors import StoreUnavailable
from shared.status.page import CSP
from shared.status.site import StatusSite
from tests.events import load, published_at, pubsub_cloud_event
from tests.fakes import InMemoryJobViews
from tests.functional.conftest import ENDPOINT, PRICES, SOURCE

NAME = "<script>alert('name')</script>"
RID = "team/run 1%<b>"
OUTPUT = "gs://flexjobs-test/team-run-1"
CHECKPOINTS = f"{OUTPUT}/checkpoints/"
PREEMPTED = "The replica workerpool0-0 was preempted"
HOSTILE = "<img src=x onerror=alert(1)> exited with a non-zero status of 1."
_ids = itertools.count(1)


@pytest.fixture
def site(intake, tracker, clock) -> Iterator[StatusSite]:
    views = InMemoryJobViews(
        tracker.jobs.job_store.database, intake.deployments.records.deployment_store
    )
    wired = StatusSite(views, PriceTable.load(PRICES), clock, totals_seconds=0)
    bootstrap.override_status_site(wired)
    yield wired
    bootstrap.override_status_site(None)


@pytest.fixture
def client(site):
    return create_app("status_page", SOURCE, "http").test_client()


# --- records, as the handlers write them ----------------------------------------------------


def submit(post_event, request_id: str = RID, name: str = NAME) -> None:
    body = load("seed_request")
    body["requestId"] = request_id
    body["customJob"]["displayName"] = name
    body["customJob"]["jobSpec"]["baseOutputDirectory"] = {"outputUriPrefix": OUTPUT}
    event = pubsub_cloud_event(body, message_id=f"req-{next(_ids)}")
    assert post_event("handle_job_request", event).status_code == 200


def hint(post_event, clock, name: str) -> None:
    clock.advance(60)
    event = pubsub_cloud_event({"jobName": name}, message_id=f"hint-{next(_ids)}")
    published_at(event, clock.now)
    clock.advance(0.5)
    assert post_event("handle_job_event", event).status_code == 200


def vertex(tracker, clock, name: str, state: str, message: str | None = None, code: int = 0):
    times = {"start_time": clock.now} if state == "JOB_STATE_RUNNING" else {"end_time": clock.now}
    tracker.backend.update(
        name, state=state, error_code=code or None, error_message=message, **times
    )


def record(tracker, request_id: str = RID) -> dict[str, Any]:
    found = tracker.jobs.job_store.get(request_id)
    assert found is not None
    return found


def preempted_then_resumed(tracker, clock, post_event) -> None:
    """Attempt 1 runs, checkpoints, is preempted; attempt 2 resumes from step 200, succeeds."""
    submit(post_event)
    first = record(tracker)["vertexJob"]
    clock.advance(120)
    vertex(tracker, clock, first, "JOB_STATE_RUNNING")
    hint(post_event, clock, first)
    tracker.checkpoints.commit(CHECKPOINTS, 200, clock.advance(600))
    clock.advance(300)
    vertex(tracker, clock, first, "JOB_STATE_FAILED", PREEMPTED, code=14)
    hint(post_event, clock, first)
    second = record(tracker)["vertexJob"]
    assert second != first
    clock.advance(90)
    vertex(tracker, clock, second, "JOB_STATE_RUNNING")
    hint(post_event, clock, second)
    clock.advance(1800)
    vertex(tracker, clock, second, "JOB_STATE_SUCCEEDED")
    hint(post_event, clock, second)
    assert record(tracker)["state"] == "SUCCEEDED"
    tick(post_event, clock)  # publishes nothing new: the handlers flushed their outboxes


def tick(post_event, clock) -> None:
    clock.advance(1)
    event = pubsub_cloud_event(b"tick", message_id=f"tick-{next(_ids)}")
    assert post_event("handle_scheduler_tick", event).status_code == 200


def secure(response) -> None:
    """The security headers every answer carries."""
    assert response.headers["Content-Security-Policy"] == CSP
    assert "script-src" not in CSP and "'unsafe-inline'" not in CSP
    for directive in (
        "default-src 'none'",
        "style-src 'self'",
        "img-src 'self' data:",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'self'",
    ):
        assert directive in CSP  # fmt: skip
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "no-referrer"
    assert response.headers["X-Frame-Options"] == "DENY"
    assert re.fullmatch(r"app;dur=[0-9.]+", response.headers["Server-Timing"])


def page(client, path: str, status: int = 200) -> str:
    response = client.get(path)
    assert response.status_code == status, response.get_data(as_text=True)[:2000]
    secure(response)
    text = response.get_data(as_text=True)
    if response.mimetype == "text/html":
        assert response.headers["Cache-Control"] == "no-store"
        # Nothing from a record or a request became markup (the tests write some in).
        assert "<script" not in text.lower() and "<img" not in text and "<svg onload" not in text
    return text


def job_path(request_id: str = RID) -> str:
    return f"/jobs/{quote(request_id, safe='')}"


# --- the jobs -------------------------------------------------------------------------------


def test_the_jobs_page_lists_the_job_escaped_with_the_totals(client, tracker, clock, post_event):
    preempted_then_resumed(tracker, clock, post_event)
    text = page(client, "/")

    assert str(markupsafe.escape(NAME)) in text
    assert f'href="{job_path()}"' in text  # "/" and "%" escaped: one path segment
    assert "team/run 1%&lt;b&gt;" in text
    assert 'class="state state-SUCCEEDED">SUCCEEDED<' in text
    figures = record(tracker)
    cost = figures["cost"]
    # One job ended in each window, with all its attempts' GPU time, cost and savings.
    assert text.count(f"{figures['gpuSeconds'] / 3600:.3f}") >= 3  # the row and both windows
    assert text.count(f"${cost['savingsUsd']:,.2f}") >= 3
    assert f"${cost['onDemandUsd']:,.2f}" in text
    assert re.search(r'<link rel="stylesheet" href="/assets/status.css\?v=[0-9a-f]{12}">', text)


def test_a_running_job_shows_its_time_so_far(client, tracker, clock, post_event):
    submit(post_event, "live-1", "live")
    name = record(tracker, "live-1")["vertexJob"]
    clock.advance(300)
    vertex(tracker, clock, name, "JOB_STATE_RUNNING")
    hint(post_event, clock, name)
    clock.advance(3600)

    body = json.loads(page(client, "/api/jobs"))
    (row,) = body["jobs"]
    assert row["state"] == "RUNNING" and row["live"] is True
    # Since Vertex started it (the hint came a minute and a half-second later).
    assert row["runningSeconds"] == 3660.5
    # One A100 at FLEX_START 2.00 vs 4.00 on demand (PRICES), for the time so far.
    so_far = PriceTable.load(PRICES).estimate("NVIDIA_TESLA_A100", "FLEX_START", 3660.5)
    assert row["cost"] == so_far.to_dict() and so_far.savings_usd > 2
    assert body["totals"]["active"]["RUNNING"] == 1
    assert "(so far)" in page(client, "/")


def test_the_job_page_draws_the_attempts_on_a_timeline(client, tracker, clock, post_event):
    preempted_then_resumed(tracker, clock, post_event)
    text = page(client, job_path())

    svg = text[text.index("<svg") : text.index("</svg>")]
    assert [int(n) for n in re.findall(r'<g class="lane" data-attempt="(\d+)"', svg)] == [1, 2]
    lanes = svg.split('<g class="lane"')[1:]
    kinds = [re.findall(r'data-kind="(\w+)"', lane) for lane in lanes]
    assert kinds[0] == ["queued", "running", "lost", "checkpoint", "mark"]
    assert kinds[1] == ["queued", "running", "mark"]
    assert 'fill="url(#pattern-queued)"' in svg and 'fill="url(#pattern-lost)"' in svg
    assert ">preempted</text>" in lanes[0] and ">succeeded</text>" in lanes[1]
    assert ">step 200</text>" in lanes[0]  # the checkpoint attempt 2 resumed from
    assert "work lost 5m00s" in lanes[0]
    assert "Attempts of team/run 1%&lt;b&gt;" in svg and "attempt 1: preempted" in svg
    # The record, the attempts' table and the notifications below it.
    assert str(markupsafe.escape(NAME)) in text
    assert f"{CHECKPOINTS}step-00000200/" in text
    table = text[text.index('<table class="attempts">') :]
    assert ">preempted</td>" in table and "5m00s" in table
    notes = text[text.index('<table class="notifications">') :]
    assert re.findall(r"state-(\w+)\">", notes) == ["RETRYING", "SUCCEEDED"]
    assert str(markupsafe.escape(f"preempted: retry 1 of 6: {PREEMPTED}")) in notes


def test_text_from_vertex_and_requests_is_escaped_everywhere(client, tracker, clock, post_event):
    submit(post_event, "hostile-<i>1</i>", "<svg onload=alert(1)>")
    name = record(tracker, "hostile-<i>1</i>")["vertexJob"]
    vertex(tracker, clock, name, "JOB_STATE_RUNNING")
    hint(post_event, clock, name)
    vertex(tracker, clock, name, "JOB_STATE_FAILED", HOSTILE, code=3)
    hint(post_event, clock, name)

    for path in ("/", job_path("hostile-<i>1</i>"), "/?state=FAILED"):
        text = page(client, path)
        assert "<svg onload" not in text and "<i>1</i>" not in text
        assert "&lt;svg onload=alert(1)&gt;" in text
    text = page(client, job_path("hostile-<i>1</i>"))
    assert str(markupsafe.escape(HOSTILE)) in text  # the reason and the attempt's error
    data = json.loads(page(client, "/api/jobs/" + quote("hostile-<i>1</i>", safe="")))
    assert data["job"]["displayName"] == "<svg onload=alert(1)>"  # JSON carries the data as is


def test_the_json_api_has_the_list_and_a_job(client, tracker, clock, post_event):
    preempted_then_resumed(tracker, clock, post_event)
    response = client.get("/api/jobs")
    secure(response)
    assert response.mimetype == "application/json"
    body = response.get_json()
    (row,) = body["jobs"]
    assert (row["requestId"], row["displayName"], row["attempt"]) == (RID, NAME, 2)
    assert row["cost"] == record(tracker)["cost"] and body["next"] is None
    assert [w["jobs"] for w in body["totals"]["windows"]] == [1, 1]

    job = client.get("/api" + job_path()).get_json()
    assert job["job"]["requestId"] == RID and job["job"]["state"] == "SUCCEEDED"
    assert [a["attempt"] for a in job["attempts"]] == [1, 2]
    assert job["attempts"][0]["errorClass"] == "preempted"
    assert job["attempts"][1]["resumedFrom"] == f"{CHECKPOINTS}step-00000200/"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", job["job"]["createdAt"])
    assert [(n["state"], n["published"]) for n in job["notifications"]] == [
        ("RETRYING", True),
        ("SUCCEEDED", True),
    ]
    assert "request" not in job["job"]  # the job page reads the fields it shows, not the body


# --- filters and pages --------------------------------------------------------------------


def three_jobs(tracker, clock, post_event) -> None:
    for n in (1, 2, 3):
        submit(post_event, f"job-{n}", f"job {n}")
        clock.advance(3600)
    name = record(tracker, "job-2")["vertexJob"]
    vertex(tracker, clock, name, "JOB_STATE_RUNNING")
    hint(post_event, clock, name)


def listed(client, path: str) -> list[str]:
    return [row["requestId"] for row in json.loads(page(client, path))["jobs"]]


def test_filters_by_state_and_age(client, tracker, clock, post_event):
    three_jobs(tracker, clock, post_event)
    assert listed(client, "/api/jobs") == ["job-3", "job-2", "job-1"]
    assert listed(client, "/api/jobs?state=RUNNING") == ["job-2"]
    assert listed(client, "/api/jobs?state=QUEUED&state=RUNNING") == ["job-3", "job-2", "job-1"]
    assert listed(client, "/api/jobs?state=SUCCEEDED") == []
    assert listed(client, "/api/jobs?age=90m") == ["job-3"]
    assert listed(client, "/api/jobs?age=3h&state=QUEUED") == ["job-3"]
    text = page(client, "/?state=RUNNING&age=24h")
    assert 'value="RUNNING" checked' in text and '<option value="24h" selected>' in text
    assert "job-1" not in text and "job-2" in text


def test_pages_follow_their_cursor_with_the_same_filters(client, tracker, clock, post_event):
    three_jobs(tracker, clock, post_event)
    first = json.loads(page(client, "/api/jobs?limit=2"))
    assert [r["requestId"] for r in first["jobs"]] == ["job-3", "job-2"]
    assert listed(client, f"/api/jobs?limit=2&cursor={first['next']}") == ["job-1"]

    text = page(client, "/?limit=1&state=QUEUED")
    (link,) = re.findall(r'<a href="([^"]+)" rel="next">', text)
    link = html.unescape(link)
    assert link.startswith("/?limit=1&state=QUEUED&cursor=")
    second = page(client, link)
    assert "job-1" in second and "job-3" not in second
    assert '<a href="/?limit=1&amp;state=QUEUED">First page</a>' in second


def test_the_longest_request_ids_have_their_page_and_their_next_page(
    client, tracker, clock, post_event
):
    # Issue 20: a requestId of multi-byte characters at the 1,500-byte bound answered 404 on
    # its job page, and the list's own "Next page" link after it answered 400.
    long_ids = ["é" * 749 + suffix for suffix in ("a", "b")]
    for request_id in long_ids:
        submit(post_event, request_id, "long")
        clock.advance(60)
    text = page(client, job_path(long_ids[0]))
    assert html.escape(long_ids[0]) in text
    listing = page(client, "/?limit=1")
    (link,) = re.findall(r'<a href="([^"]+)" rel="next">', listing)
    assert html.escape(long_ids[0][:40]) in page(client, html.unescape(link))


def test_a_next_page_after_a_request_id_that_json_escapes_is_followed(client, clock, post_event):
    # 1,500 bytes (within the bound), but each character takes 6 in the cursor's JSON.
    long_ids = ["\x01" * 1499 + suffix for suffix in ("a", "b")]
    for request_id in long_ids:
        submit(post_event, request_id, "long")
        clock.advance(60)
    listing = page(client, "/?limit=1")
    (link,) = re.findall(r'<a href="([^"]+)" rel="next">', listing)
    page(client, html.unescape(link))


@pytest.mark.parametrize(
    ("query", "bad"),
    [
        ("state=BOGUS", ["state"]),
        ("age=forever", ["age"]),
        ("limit=0", ["limit"]),
        ("limit=1001", ["limit"]),
        ("cursor=%3Cscript%3E", ["cursor"]),
        ("state=RUNNING&%3Cscript%3E=1&age=-1h", ["<script>", "age"]),
    ],
)
def test_bad_filters_answer_400_naming_each_problem(client, site, query, bad):
    text = page(client, f"/?{query}", 400)
    found = re.findall(r"<li><code>(.*?)</code>", text)
    assert [html.unescape(p) for p in found] == bad
    body = json.loads(page(client, f"/api/jobs?{query}", 400))
    assert [e["path"] for e in body["errors"]] == bad


def test_a_record_page_takes_no_parameters(client, tracker, clock, post_event):
    submit(post_event, "job-1")
    assert "is not a parameter of this page" in page(client, "/jobs/job-1?debug=1", 400)


# --- errors and methods --------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/jobs/nope", "/deployments/nope", "/nowhere", "/jobs/", "/api/jobs/nope"]
)
def test_unknown_ids_and_paths_answer_404(client, site, path):
    text = page(client, path, 404)
    if path.startswith("/api/"):
        assert json.loads(text)["error"] == "Not found"
    else:
        assert "404 · Not found" in text


def test_an_unknown_id_is_escaped_on_its_404_page(client, site):
    text = page(client, "/jobs/%3Cscript%3Ealert(1)%3C%2Fscript%3E", 404)
    assert "/jobs/&lt;script&gt;alert(1)&lt;/script&gt;" in text


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
@pytest.mark.parametrize("path", ["/", "/jobs/x", "/api/jobs", "/assets/status.css"])
def test_only_get_and_head_are_answered(client, site, method, path):
    response = client.open(path, method=method, data=b"x=1")
    assert response.status_code == 405
    assert response.headers["Allow"] == "GET, HEAD"
    secure(response)


def test_head_answers_like_get_without_a_body(client, tracker, clock, post_event):
    submit(post_event, "job-1")
    got, head = client.get("/"), client.head("/")
    assert head.status_code == 200 and head.get_data() == b""
    assert head.headers["Content-Length"] == str(len(got.get_data()))
    secure(head)


@pytest.fixture
def logged() -> Iterator[list[logging.LogRecord]]:
    """What the status page logs, as records."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("flexjobs.status_page")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def test_a_firestore_failure_answers_503_and_is_logged(client, site, logged):
    outage = StoreUnavailable("Firestore query failed: 503 unavailable")
    site.views.fail = outage
    for path in ("/", "/jobs/x", "/deployments"):
        assert "503 · Unavailable" in page(client, path, 503)
    assert json.loads(page(client, "/api/jobs", 503))["error"] == "Unavailable"
    assert [r.levelname for r in logged] == ["ERROR"] * 4
    assert logged[0].getMessage() == "status page: Firestore failed for /"
    assert logged[0].exc_info[1] is outage  # with its traceback


def test_a_bug_answers_500_with_the_headers_and_is_logged(client, site, logged, monkeypatch):
    def broken(_listing):
        raise RuntimeError("a bug")

    monkeypatch.setattr(site.views, "jobs", broken)
    assert "500 · Internal error" in page(client, "/", 500)
    assert [(r.levelname, repr(r.exc_info[1])) for r in logged] == [
        ("ERROR", "RuntimeError('a bug')")
    ]


# --- deployments and the stylesheet ---------------------------------------------------------


def test_the_deployments_pages(client, tracker, post_event):
    body = load("deploy_request")
    body["deployModel"]["deployedModel"]["displayName"] = NAME
    event = pubsub_cloud_event(body, message_id="deploy-1")
    assert post_event("handle_job_request", event).status_code == 200

    text = page(client, "/deployments")
    assert 'href="/deployments/deploy-1"' in text and "DEPLOYING" in text
    detail = page(client, "/deployments/deploy-1")
    assert "projects/p/locations/us-central1/endpoints/123" in detail
    assert "/operations/" in detail
    refused = page(client, "/deployments?state=DEPLOYED", 400)
    assert re.findall(r"<li>(.*?)</li>", refused) == [
        "<code>state</code>: is not a parameter of this page"
    ]


def test_the_stylesheet_is_served_by_the_function(client, site):
    response = client.get("/assets/status.css")
    assert response.status_code == 200 and response.mimetype == "text/css"
    secure(response)
    assert b"svg.timeline" in response.get_data()


def test_the_totals_are_reused_for_a_while(client, site, tracker, clock, post_event):
    site.totals_seconds = 30
    assert json.loads(page(client, "/api/jobs"))["totals"]["active"]["QUEUED"] == 0
    submit(post_event, "job-1")
    clock.advance(29)
    assert json.loads(page(client, "/api/jobs"))["totals"]["active"]["QUEUED"] == 0
    clock.advance(1)
    totals = json.loads(page(client, "/api/jobs"))["totals"]
    assert totals["active"]["QUEUED"] == 1 and totals["asOf"].startswith("2026-11-30T12:")


def test_a_followed_deployment_shows_its_serving_capacity_and_history(
    client, tracker, clock, post_event
):
    from shared.app.services.deploy import refresh_deployments

    deployments = tracker.deployments
    body = load("deploy_request")
    body["deployModel"]["deployedModel"]["dedicatedResources"]["minReplicaCount"] = 2
    assert post_event("handle_job_request", pubsub_cloud_event(body)).status_code == 200
    deployments.backend.finish(deployments.records.deployment_store.get("deploy-1")["operation"])
    refresh_deployments(deployments)
    model = deployments.records.deployment_store.get("deploy-1")["deployedModelId"]
    clock.advance(120)
    deployments.backend.set_available(ENDPOINT, model, 1)
    refresh_deployments(deployments)

    detail = page(client, "/deployments/deploy-1")
    assert "1/2 replicas (DEFICIT)" in detail
    rows = re.findall(r"<tr><td>(.*?)</td><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td>", detail)
    # Newest first: the loss, following it, its DeployModel.
    assert [r[1:] for r in rows] == [("1", "0", "2"), ("2", "0", "2"), ("0", "0", "2")]


def test_a_hedged_and_restored_deployment_draws_its_serving_chart_and_lists_its_notifications(
    client, tracker, clock, post_event
):
    """Spot loses both nodes, is hedged past the grace period, the fallback serves, Spot comes
    back and after the hold the fallback is undeployed: the page draws it and lists
    DEPLOYED, HEDGED, RESTORED; a cause holding markup (a hand edit) is shown as text."""
    from shared.app.services.deploy import refresh_deployments

    deployments = tracker.deployments
    body = load("deploy_request")
    body["deployModel"]["deployedModel"]["dedicatedResources"]["minReplicaCount"] = 2
    assert post_event("handle_job_request", pubsub_cloud_event(body)).status_code == 200
    deployments.backend.finish(deployments.records.deployment_store.get("deploy-1")["operation"])
    refresh_deployments(deployments)
    model = deployments.records.deployment_store.get("deploy-1")["deployedModelId"]

    def ticks(count: int = 1) -> None:
        for _ in range(count):
            clock.advance(60)
            refresh_deployments(deployments)

    deployments.backend.set_available(ENDPOINT, model, 0)
    ticks(6)  # past the grace period: hedged
    hedged = page(client, "/deployments/deploy-1")
    assert "<dt>phase</dt><dd>HEDGED since " in hedged
    assert "<dt>call in flight</dt><dd>DeployModel(fallback) since " in hedged
    deployments.backend.finish(next(iter(deployments.backend._pending)))
    ticks()  # the fallback serves: traffic follows
    deployments.backend.set_available(ENDPOINT, model, 2)
    ticks(33)  # the hold, traffic back to Spot, the fallback's UndeployModel
    deployments.backend.finish(next(iter(deployments.backend._undeploys)))
    ticks(2)
    stored = deployments.records.deployment_store.records["deploy-1"]
    assert stored["serving"]["phase"] == "SERVING"
    stored["serving"]["history"][0]["cause"] = "<script>alert('cause')</script>"

    detail = page(client, "/deployments/deploy-1")
    svg = detail[detail.index('<svg class="timeline serving"') : detail.index("</svg>")]
    assert svg.count('data-kind="spot"') >= 2 and 'data-kind="onDemand"' in svg
    assert 'data-kind="short"' in svg and 'class="required" data-kind="required"' in svg
    assert re.findall(r'<line class="mark mark-(\w+)" data-kind=', svg) == ["hedge", "restore"]
    assert "style=" not in svg and "<script" not in svg
    assert "&lt;script&gt;alert(&#39;cause&#39;)&lt;/script&gt;" in detail  # text, not markup
    # The summary is the chart's words for screen readers, and under it for everyone.
    desc = re.search(r'<desc id="serving-desc">(.*?)</desc>', svg)
    assert desc and "hedge at " in desc[1] and "restored at " in desc[1]
    assert "<dt>hedges</dt><dd>1</dd>" in detail
    notes = detail[detail.index("<h2>Notifications</h2>") :]
    assert re.findall(r'<span class="state state-\w+">(\w+)</span>', notes) == [
        "DEPLOYED",
        "HEDGED",
        "RESTORED",
    ]  # newest last


# --- the tick's tally (issue 26) -------------------------------------------------------------


def test_the_first_page_and_the_totals_come_from_the_tick_s_tally(
    client, site, tracker, clock, post_event, monkeypatch
):
    three_jobs(tracker, clock, post_event)
    tick(post_event, clock)  # the tick writes its tally

    def no_query(*_args: Any) -> Any:
        raise AssertionError("a query or a count where the tally serves")

    monkeypatch.setattr(site.views, "jobs", no_query)
    monkeypatch.setattr(site.views, "count", no_query)
    monkeypatch.setattr(site.views, "ended_since", no_query)
    body = json.loads(page(client, "/api/jobs?limit=2"))
    assert [r["requestId"] for r in body["jobs"]] == ["job-3", "job-2"]
    assert body["totals"]["active"]["QUEUED"] == 2 and body["totals"]["active"]["RUNNING"] == 1
    # The rows are the records as they are now, not as the tick saw them.
    name = record(tracker, "job-3")["vertexJob"]
    vertex(tracker, clock, name, "JOB_STATE_RUNNING")
    hint(post_event, clock, name)
    assert json.loads(page(client, "/api/jobs?limit=1"))["jobs"][0]["state"] == "RUNNING"


def test_a_first_page_missing_a_record_is_read_from_a_query_with_its_next_page(
    client, tracker, clock, post_event
):
    three_jobs(tracker, clock, post_event)
    submit(post_event, "job-4", "job 4")
    tick(post_event, clock)
    del tracker.jobs.job_store.database.jobs[
        "job-4"
    ]  # expired (a tombstone's TTL), or deleted by hand
    first = json.loads(page(client, "/api/jobs?limit=2"))
    assert [r["requestId"] for r in first["jobs"]] == ["job-3", "job-2"]
    assert listed(client, f"/api/jobs?limit=2&cursor={first['next']}") == ["job-1"]


def test_a_stale_tally_is_not_used(client, site, tracker, clock, post_event):
    three_jobs(tracker, clock, post_event)
    tick(post_event, clock)
    clock.advance(3600)  # no tick for an hour: the page reads the records
    submit(post_event, "job-4", "job 4")
    assert listed(client, "/api/jobs?limit=2") == ["job-4", "job-3"]
