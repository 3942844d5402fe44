"""The deployable artifact stands on its own, as the Cloud Functions build uses it.

The zip ``./dev package`` builds (twice: the same file) is unpacked into a clean virtualenv that
gets nothing but its ``requirements.txt``, uv.lock's resolution of the function's set with the
lock's hashes (``--no-deps``: the pinned list itself must be complete, and ``pip check`` must
pass); ``main`` is imported from it, and every entry point is served by that venv's
functions-framework and sent one CloudEvent against the session's emulators and simulator (the
status page: one GET of each of its pages, templates and stylesheet read from the zip).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.request
import uuid
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flexjobs_local import procs
from flexjobs_local.package import ZIP_NAME, package, runtime_requirements
from flexjobs_local.stack import HTTP_FUNCTIONS, STATUS_PAGE, UPLOAD_FUNCTION
from shared.domain.model.ids import doc_id
from tests.events import load, object_resource, seed_line
from tests.integration.helpers import upload_id, wait_for
from tests.unit.test_package import check_generated_from_the_lock, locked_versions, pins

pytestmark = pytest.mark.integration

ENTRY_POINTS = (
    "handle_job_request",
    "handle_job_event",
    "handle_scheduler_tick",
    "handle_upload",
    "status_page",
)
# The artifact's own upload prefix: the stack's handle_upload ignores these objects, so the
# job the upload makes can only come from the artifact's handle_upload.
PREFIX = "artifact-requests/"


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The unpacked zip, with a virtualenv holding only its requirements."""
    root = tmp_path_factory.mktemp("artifact")
    zipped = package(root / "dist")
    assert ZIP_NAME.match(zipped.name)
    again = package(root / "dist2")  # an unchanged tree and lock: the same file
    assert again.name == zipped.name and again.read_bytes() == zipped.read_bytes()
    source = root / "source"
    with zipfile.ZipFile(zipped) as archive:
        names = archive.namelist()
        archive.extractall(source)
    assert "main.py" in names and "requirements.txt" in names and "shared/__init__.py" in names
    # The status page's templates and stylesheet are package data the function reads (at
    # whatever depth of shared/ they sit).
    for data in ("templates/job.html", "static/status.css", "prices.yaml"):
        assert [n for n in names if n.startswith("shared/") and n.endswith(f"/{data}")], data
    assert not [
        n for n in names if n.startswith(("flexjobs/", "flexjobs_local/", "tests/", "functions/"))
    ]
    # Generated from uv.lock: every pin is the lock's, with its hashes, and nothing else.
    requirements = (source / "requirements.txt").read_text()
    assert requirements == runtime_requirements()
    assert "jinja2" in check_generated_from_the_lock(requirements)
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "install", "--no-deps", "-r", str(source / "requirements.txt")],
        check=True,
        timeout=900,
    )
    subprocess.run([*pip, "check"], check=True, timeout=120)
    yield source


def _python(artifact: Path) -> Path:
    return artifact.parent / "venv" / "bin" / "python"


def test_main_imports_from_the_artifact_alone(artifact: Path) -> None:
    code = "import main, sys; print(sorted(m for m in sys.modules if m.startswith('flexjobs')))"
    done = subprocess.run(
        [str(_python(artifact)), "-c", code],
        cwd=artifact,
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def servers(artifact: Path, local_stack: Any) -> Iterator[dict[str, str]]:
    """Every entry point served from the artifact's venv; their URLs by name."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        **local_stack.env,
        "FLEXJOBS_UPLOAD_PREFIX": PREFIX,
        "PYTHONUNBUFFERED": "1",
    }
    serve = _python(artifact).with_name("functions-framework")
    children, urls = [], {}
    logs = artifact.parent / "logs"
    logs.mkdir(exist_ok=True)
    try:
        for target in ENTRY_POINTS:
            port = procs.free_port()
            argv = [
                str(serve),
                f"--source={artifact / 'main.py'}",
                f"--target={target}",
                "--signature-type=" + ("http" if target in HTTP_FUNCTIONS else "cloudevent"),
                "--host=127.0.0.1",
                f"--port={port}",
            ]
            children.append(procs.start(target, argv, env, logs))
            urls[target] = f"http://127.0.0.1:{port}/"
        for child in children:
            procs.wait_until(child, procs.http_ok(urls[child.name]), 60)
        yield urls
    finally:
        procs.kill_groups([c.pgid for c in children], children=[c.proc for c in children])


def post(url: str, headers: dict[str, str], body: dict[str, Any]) -> int:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return int(answer.status)


def pushed(data: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """A Pub/Sub push body, as infra/'s push subscriptions post it to the functions
    (functions-framework turns it into the messagePublished CloudEvent)."""
    message_id = str(uuid.uuid4().int % 10**15)
    message = {
        "data": base64.b64encode(json.dumps(data).encode()).decode(),
        "messageId": message_id,
        "publishTime": "2026-11-30T12:00:00Z",
    }
    headers = {"Content-Type": "application/json"}
    return headers, {"message": message, "subscription": "projects/p/subscriptions/s"}


def record(db: Any, request_id: str) -> dict[str, Any] | None:
    snap = db.collection("jobs").document(doc_id(request_id)).get()
    return snap.to_dict() if snap.exists else None


def test_every_entry_point_serves_from_the_artifact(servers, stack, db, unique):
    rid = unique("artifact")
    body = {**load("seed_request"), "requestId": rid}
    assert post(servers["handle_job_request"], *pushed(body)) == 200
    job = wait_for(lambda: (r := record(db, rid)) and r.get("vertexJob"), what="the job")

    assert post(servers["handle_job_event"], *pushed({"jobName": job})) == 200
    wait_for(lambda: record(db, rid).get("lastReadAt"), what="the hint's read")

    assert post(servers["handle_scheduler_tick"], *pushed({"tick": "now"})) == 200

    name = f"{PREFIX}{unique('file')}.json"
    generation = stack.upload(name, seed_line())
    resource = object_resource(name, generation, 1)
    resource["bucket"] = stack.config.bucket
    headers = {
        "ce-specversion": "1.0",
        "ce-type": "google.cloud.storage.object.v1.finalized",
        "ce-source": f"//storage.googleapis.com/projects/_/buckets/{stack.config.bucket}",
        "ce-subject": f"objects/{name}",
        "ce-id": generation,
        "ce-bucket": stack.config.bucket,
        "Content-Type": "application/json",
    }
    resource.pop("size")  # read it for real: the artifact's storage client does the work
    assert post(servers[UPLOAD_FUNCTION], headers, resource) == 200
    uploaded = upload_id(stack, name, seed_line())
    assert wait_for(lambda: record(db, uploaded), what="the upload's job")["source"] == "gcs"

    page = servers[STATUS_PAGE]
    for path, kind in (
        ("", "text/html"),
        (f"jobs/{rid}", "text/html"),
        ("api/jobs", "application/json"),
        ("assets/status.css", "text/css"),
    ):
        with urllib.request.urlopen(page + path, timeout=60) as answer:
            assert answer.status == 200 and answer.headers.get_content_type() == kind
            assert "default-src 'none'" in answer.headers["Content-Security-Policy"]
            assert rid.encode() in answer.read() or kind == "text/css"


def test_the_packager_pins_what_the_lock_resolves() -> None:
    """The function pins uv.lock's versions, the ones ./dev installed for these tests."""
    from importlib import metadata

    pinned = pins(runtime_requirements())
    versions = locked_versions()
    for name in ("functions-framework", "google-cloud-firestore", "pyyaml", "pydantic"):
        assert pinned[name] == metadata.version(name)
        assert versions[name] == {pinned[name]}
    assert sys.version_info >= (3, 11)
