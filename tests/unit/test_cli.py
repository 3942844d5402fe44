"""The ``flexjobs`` command offline: validate, schema, exit codes, error lines."""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from flexjobs.cli import EXTRA_PACKAGES, main
from flexjobs.cli.app import parse_since
from tests.events import load

EVENTS = Path(__file__).parents[1] / "events"
ROOT = Path(__file__).parents[2]


def seed() -> dict[str, Any]:
    return json.loads((EVENTS / "seed_request.json").read_text())


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.fixture(autouse=True)
def _no_google(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "PUBSUB_EMULATOR_HOST"):
        monkeypatch.delenv(var, raising=False)
    # No Application Default Credentials either (this machine's gcloud config is not read).
    monkeypatch.setattr("flexjobs.connection.adc_project", lambda: None)


def test_a_good_request_file_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EVENTS / "seed_request.json")]) == 0
    assert "1 valid message" in capsys.readouterr().out


def test_a_bad_request_file_prints_each_problem_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = seed()
    pool = body["customJob"]["jobSpec"]["workerPoolSpecs"][0]
    pool["machineSpec"]["acceleratorType"] = "NVIDIA_TESLA_T4"
    body["location"] = "attacker.example:443#"
    body["bogus"] = 1
    assert main(["validate", write(tmp_path, "bad.json", json.dumps(body))]) == 2
    err = capsys.readouterr().err
    assert "location: must be" in err
    assert "bogus: unknown field" in err


def test_the_rules_run_after_parsing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = seed()
    pool = body["customJob"]["jobSpec"]["workerPoolSpecs"][0]
    pool["machineSpec"]["acceleratorType"] = "NVIDIA_TESLA_T4"
    assert main(["validate", write(tmp_path, "t4.json", json.dumps(body))]) == 2
    err = capsys.readouterr().err
    assert "customJob.jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType" in err


def test_a_jsonl_names_the_line_of_each_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = json.dumps(seed())
    text = f"{good}\n\n{{not json\n{json.dumps({'cancel': ''})}\n"
    assert main(["validate", write(tmp_path, "batch.jsonl", text)]) == 2
    err = capsys.readouterr().err
    assert "line 3: $: message data is not JSON" in err
    assert "line 4: cancel: must be a non-empty requestId string" in err
    assert "line 1:" not in err


def test_a_good_jsonl_and_a_cancel_are_valid(tmp_path: Path) -> None:
    text = f"{json.dumps(seed())}\n{json.dumps({'cancel': 'seed-1'})}\n"
    assert main(["validate", write(tmp_path, "batch.jsonl", text)]) == 0


def test_a_gcloud_yaml_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = """workerPoolSpecs:
  machineSpec:
    machineType: a2-highgpu-1g
    acceleratorType: NVIDIA_TESLA_A100
    acceleratorCount: 1
  replicaCount: 1
  containerSpec:
    imageUri: python:3.10
scheduling:
  strategy: FLEX_START
  maxWaitDuration: 1800s
"""
    assert main(["validate", write(tmp_path, "config.yaml", good)]) == 0
    assert main(["validate", write(tmp_path, "bad.yaml", "scheduling: {}\n")]) == 2
    assert "workerPoolSpecs: is required" in capsys.readouterr().err


def test_a_bare_vertex_body_with_kind(tmp_path: Path) -> None:
    path = write(tmp_path, "job.json", json.dumps(seed()["customJob"]))
    assert main(["validate", "--kind", "customJob", path]) == 0
    # Without --kind the body is no request message.
    assert main(["validate", path]) == 2
    assert main(["validate", "--kind", "nonsense", path]) == 2


def test_other_kinds_from_the_sample_events(tmp_path: Path) -> None:
    for name in ("hpt_request", "pipeline_request", "deploy_request"):
        assert main(["validate", str(EVENTS / f"{name}.json")]) == 0, name


def test_a_scheduled_request_is_expanded_for_now(tmp_path: Path) -> None:
    body = seed()
    body["requestId"] = "nightly-{slot}"
    body["schedule"] = {"slotSeconds": 86400, "concurrency": "forbid"}
    assert main(["validate", write(tmp_path, "nightly.json", json.dumps(body))]) == 0
    body.pop("schedule")
    assert main(["validate", write(tmp_path, "broken.json", json.dumps(body))]) == 2


def test_the_operator_guards_come_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FLEXJOBS_ALLOWED_IMAGE_PREFIXES", "us-docker.pkg.dev/mine/")
    assert main(["validate", str(EVENTS / "seed_request.json")]) == 2
    assert "imageUri" in capsys.readouterr().err


def test_stdin_is_read_with_dash(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    # A real stdin: text over a byte buffer, which the CLI reads as the upload path reads bytes.
    stdin = io.TextIOWrapper(io.BytesIO(json.dumps(seed()).encode()), encoding="utf-8")
    monkeypatch.setattr("sys.stdin", stdin)
    assert main(["validate", "-"]) == 0


def test_a_jsonl_is_split_as_intake_splits_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 20: U+2028 is legal inside a JSON string; splitlines() split the line there, so
    # validate refused a file the upload path accepts, and shifted the line numbers after it.
    first = seed()
    first["customJob"]["displayName"] = "a\u2028b"
    path = tmp_path / "two.jsonl"
    path.write_text(json.dumps(first, ensure_ascii=False) + "\n" + json.dumps(seed()) + "\n")
    assert main(["validate", str(path)]) == 0
    assert "2 valid message(s)" in capsys.readouterr().out


def test_a_yaml_alias_is_refused_by_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(f"big: &big {'x' * 20_000}\nworkerPoolSpecs: [" + "*big," * 20_000 + "]\n")
    assert main(["validate", str(path)]) == 2
    assert "anchors and aliases" in capsys.readouterr().err


def test_a_missing_file_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "/nonexistent/request.json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read /nonexistent/request.json")
    assert "Traceback" not in err


def test_schema_prints_the_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    shipped = json.loads((Path(__file__).parents[2] / "schema/job-request.schema.json").read_text())
    assert schema == shipped


def test_no_project_is_one_actionable_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "anything"]) == 3
    err = capsys.readouterr().err
    assert "GOOGLE_CLOUD_PROJECT" in err
    assert len(err.strip().splitlines()) == 1


def test_an_unreachable_emulator_is_one_actionable_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:9")
    assert main(["--project", "p", "submit", str(EVENTS / "seed_request.json")]) == 3
    err = capsys.readouterr().err
    assert "PUBSUB_EMULATOR_HOST=127.0.0.1:9 is not reachable" in err
    assert len(err.strip().splitlines()) == 1


def test_submit_publishes_nothing_when_invalid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    published: list[Any] = []
    monkeypatch.setattr(
        "flexjobs.publisher.PubsubPublisher.publish",
        lambda self, topic, data, attributes: published.append((json.loads(data), attributes)),
    )
    text = f"{json.dumps(seed())}\n{{bad\n"
    path = write(tmp_path, "batch.jsonl", text)
    assert main(["--project", "p", "submit", path]) == 2
    assert published == []


def test_submit_names_each_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    published: list[Any] = []
    monkeypatch.setattr(
        "flexjobs.publisher.PubsubPublisher.publish",
        lambda self, topic, data, attributes: published.append((json.loads(data), attributes)),
    )
    body = seed()
    body.pop("requestId")
    path = write(tmp_path, "job.json", json.dumps(body))
    assert main(["--project", "p", "submit", "--location", "europe-west4", path]) == 0
    [(sent, attributes)] = published
    printed = capsys.readouterr().out.strip()
    assert printed.startswith("cli-")
    assert sent["requestId"] == attributes["requestId"] == printed
    assert sent["location"] == "europe-west4"
    published.clear()
    assert main(["--project", "p", "submit", "--request-id", "mine", path]) == 0
    assert published[0][0]["requestId"] == published[0][1]["requestId"] == "mine"


def test_since_durations() -> None:
    assert parse_since("30m").total_seconds() == 1800
    assert parse_since("2h").total_seconds() == 7200
    assert parse_since("1d").total_seconds() == 86400
    with pytest.raises(Exception, match="duration"):
        parse_since("soon")


def test_the_local_commands_are_kept_beside_the_stack(capsys: pytest.CaptureFixture[str]) -> None:
    # ./dev up|down|demo: python -m flexjobs_local, through the command's own runner.
    from flexjobs_local.cli_local import main as local

    assert local(["up", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--time-factor" in out
    assert "--tick-seconds" in out
    assert local(["sideways"]) == 2
    assert "No such command" in capsys.readouterr().err


def test_the_product_command_has_no_local_stack(capsys: pytest.CaptureFixture[str]) -> None:
    # The client library never imports the local stack: its command has no `local`.
    assert main(["local", "up"]) == 2
    assert "No such command 'local'" in capsys.readouterr().err


def test_without_the_cli_extra_the_command_names_it_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # As after `pip install flexjobs`: Typer and Rich cannot be imported (None in sys.modules
    # is how Python marks a module as not importable).
    monkeypatch.setitem(sys.modules, "typer", None)
    monkeypatch.setitem(sys.modules, "rich", None)
    assert main(["--help"]) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "flexjobs: the command line needs its extra (typer, rich missing):"
        ' pip install "flexjobs[cli]"\n'
    )


def test_the_console_script_is_the_lazy_entry() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["scripts"] == {"flexjobs": "flexjobs.cli:main"}
    # What the entry needs is exactly the cli extra's packages.
    extra = {
        re.split(r"[<>=\[ ]", r)[0] for r in project["project"]["optional-dependencies"]["cli"]
    }
    assert extra == set(EXTRA_PACKAGES)


def test_the_seed_event_is_the_file_read() -> None:
    assert load("seed_request") == seed()


def test_list_refuses_an_unknown_state(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--project", "p", "list", "--state", "DONE"]) == 2
    assert "RUNNING" in capsys.readouterr().err


def test_cancel_refuses_an_empty_id_before_publishing():
    from flexjobs.cli import main

    assert main(["cancel", "  "]) == 2


def test_submit_keeps_a_malformed_request_id_for_validation_to_refuse(tmp_path):
    from flexjobs.messages import Message, assign_request_id

    message = Message({"requestId": "  ", "customJob": {}})
    assign_request_id(message, None)
    assert message.body == {"requestId": "  ", "customJob": {}}
    fresh = Message({"customJob": {}})
    assign_request_id(fresh, None, prefix="cli")
    assert fresh.body is not None and fresh.body["requestId"].startswith("cli-")


def test_the_size_limit_is_measured_as_published():
    import json
    from datetime import UTC, datetime

    from flexjobs.messages import Message, check
    from shared.kernel.config import Settings

    body = {"cancel": "r1", "pad": ["x"] * 40}
    compact = len(json.dumps(body, separators=(",", ":")))
    settings = Settings(project="", max_message_bytes=compact)
    errors = check(Message(body), settings, datetime(2026, 11, 30, tzinfo=UTC))
    assert not any("bytes" in e.message for e in errors)


def test_a_jsonl_line_over_the_message_limit_is_refused_as_an_upload_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its compact form fits, but an uploaded file's line is read as it is, spaces and all.
    compact = json.dumps({"cancel": "seed-1"}, separators=(",", ":"))
    monkeypatch.setenv("FLEXJOBS_MAX_MESSAGE_BYTES", str(len(compact)))
    padded = json.dumps({"cancel": "seed-1"}, indent=8).replace("\n", " ")
    assert main(["validate", write(tmp_path, "batch.jsonl", f"{compact}\n{padded}\n")]) == 2
    err = capsys.readouterr().err
    assert f"line 2: $: message is {len(padded)} bytes; the limit is {len(compact)} bytes" in err
    assert "line 1:" not in err


def test_a_cancel_of_a_request_id_over_its_byte_bound_is_refused_as_intake_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = json.dumps({"cancel": "r" * 1501})
    assert main(["validate", write(tmp_path, "cancel.json", body)]) == 2
    assert (
        "cancel: is 1501 bytes in UTF-8; a requestId may have at most 1500"
        in capsys.readouterr().err
    )


# -- the conventions, on the client library over in-memory fakes -----------------------------


class _Stores:
    def __init__(self) -> None:
        from tests.fakes import (
            InMemoryAttemptStore,
            InMemoryDeploymentStore,
            InMemoryJobStore,
            InMemoryJobViews,
            InMemoryPublisher,
            InMemoryRejectionLog,
        )

        self.jobs = InMemoryJobStore()
        self.attempts = InMemoryAttemptStore(self.jobs.database)
        self.deployments = InMemoryDeploymentStore()
        self.views = InMemoryJobViews(self.jobs.database, self.deployments)
        self.rejections = InMemoryRejectionLog()
        self.publisher = InMemoryPublisher()


@pytest.fixture
def stores(monkeypatch: pytest.MonkeyPatch) -> _Stores:
    """The command's client keeps its configuration (the project as the command resolves it)
    but reads and publishes through in-memory fakes of the library's ports."""
    import flexjobs

    held = _Stores()

    class FakeClient(flexjobs.Client):
        def __init__(self, project: str | None = None, **options: Any) -> None:
            super().__init__(
                project,
                publisher=held.publisher,
                views=held.views,
                rejections=held.rejections,
                **options,
            )

    monkeypatch.setattr("flexjobs.cli.app.Client", FakeClient)
    return held


def _published(stores: _Stores) -> list[dict[str, Any]]:
    return [json.loads(data) for _, data, _ in stores.publisher.messages]


def test_the_project_is_the_flag_then_the_environment_then_adc(
    stores: _Stores, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("flexjobs.connection.adc_project", lambda: "from-adc")

    def project_named(*args: str) -> str:
        assert main([*args, "status", "nobody"]) == 1  # unknown: the error names the project
        return capsys.readouterr().err.split(" in project ")[1].split(" ")[0]

    assert project_named() == "from-adc"
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "from-env")
    assert project_named() == "from-env"
    assert project_named("--project", "from-flag") == "from-flag"


def test_status_prints_a_table_json_or_yaml(
    stores: _Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    from datetime import UTC, datetime

    import yaml

    created = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
    record = {"requestId": "r1", "state": "RUNNING", "attempt": 1, "createdAt": created}
    stores.jobs.create("r1", record)
    stores.attempts.update_attempt("r1", 1, {"attempt": 1, "state": "RUNNING"})
    assert main(["--project", "p", "status", "r1", "--format", "json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert as_json["createdAt"] == "2026-12-02T09:00:00Z"
    assert as_json["attempts"] == [{"attempt": 1, "state": "RUNNING"}]
    assert main(["--project", "p", "status", "r1", "--json"]) == 0  # the deprecated alias
    assert json.loads(capsys.readouterr().out) == as_json
    assert main(["--project", "p", "status", "r1", "--format", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == as_json
    assert main(["--project", "p", "status", "r1"]) == 0
    assert "RUNNING" in capsys.readouterr().out
    assert main(["--project", "p", "status", "r1", "--format", "xml"]) == 2


def test_a_rejected_request_prints_its_errors_and_exits_1(
    stores: _Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    stores.rejections.record("bad", {"errors": [{"path": "location", "message": "must be"}]})
    assert main(["--project", "p", "status", "bad", "--format", "json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["rejected"] is True
    assert "  location: must be" in captured.err


def test_list_shows_jobs_and_deployments_newest_first(
    stores: _Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    stores.jobs.create(
        "old-job",
        {
            "requestId": "old-job",
            "kind": "customJob",
            "state": "SUCCEEDED",
            "createdAt": now - timedelta(hours=3),
        },
    )
    stores.jobs.create(
        "new-job",
        {
            "requestId": "new-job",
            "kind": "customJob",
            "state": "RUNNING",
            "createdAt": now - timedelta(minutes=1),
        },
    )
    stores.deployments.create(
        "dep",
        {
            "requestId": "dep",
            "state": "DEPLOYED",
            "spot": True,
            "createdAt": now - timedelta(minutes=30),
        },
    )
    assert main(["--project", "p", "list", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["requestId"], r["kind"]) for r in rows] == [
        ("new-job", "customJob"),
        ("dep", "deployModel"),
        ("old-job", "customJob"),
    ]
    assert main(["--project", "p", "list", "--json", "--since", "2h"]) == 0
    assert [r["requestId"] for r in json.loads(capsys.readouterr().out)] == ["new-job", "dep"]
    assert main(["--project", "p", "list", "--json", "--state", "DEPLOYED"]) == 0
    assert [r["requestId"] for r in json.loads(capsys.readouterr().out)] == ["dep"]
    assert main(["--project", "p", "list", "--json", "--state", "running"]) == 0
    assert [r["requestId"] for r in json.loads(capsys.readouterr().out)] == ["new-job"]
    assert main(["--project", "p", "list"]) == 0
    table = capsys.readouterr().out
    assert "deployModel" in table and "SPOT" in table


def test_submit_takes_region_or_location_and_a_display_name(
    stores: _Stores, tmp_path: Path
) -> None:
    path = write(tmp_path, "job.json", json.dumps(seed()))
    assert main(["--project", "p", "submit", "--region", "europe-west4", path]) == 0
    assert main(["--project", "p", "submit", "--location", "asia-east1", path]) == 0
    assert main(["--project", "p", "submit", "--display-name", "renamed", path]) == 0
    first, second, third = _published(stores)
    assert (first["location"], second["location"]) == ("europe-west4", "asia-east1")
    assert third["customJob"]["displayName"] == "renamed"
    assert "location" not in third


def test_the_input_format_is_input_format_and_the_old_flag_still_reads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    # JSON text, which is YAML too: sniffed, it is read as a message (of no kind); read as
    # YAML, it is a gcloud config, whose problems are at the paths of the customJob it becomes.
    config = '{"workerPoolSpecs": {"machineSpec": {"machineType": "g2-standard-4"}}}'

    def validate(*flags: str) -> str:
        stdin = io.TextIOWrapper(io.BytesIO(config.encode()), encoding="utf-8")
        monkeypatch.setattr("sys.stdin", stdin)
        assert main(["validate", *flags, "-"]) == 2
        return capsys.readouterr().err

    assert "customJob.jobSpec.workerPoolSpecs[0]" not in validate()
    assert "customJob.jobSpec.workerPoolSpecs[0]" in validate("--input-format", "yaml")
    assert "customJob.jobSpec.workerPoolSpecs[0]" in validate("--format", "yaml")


def test_completion_is_offered(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    help_text = capsys.readouterr().out
    assert "--install-completion" in help_text and "--show-completion" in help_text


def test_each_library_error_has_its_documented_exit_code() -> None:
    import flexjobs
    from flexjobs.cli.output import exit_code

    assert exit_code(flexjobs.InvalidRequest([])) == 2
    assert exit_code(flexjobs.RequestNotFound("r", "p")) == 1
    assert exit_code(flexjobs.ConfigurationError("no project")) == 3
    assert exit_code(flexjobs.PublishFailed("down")) == 3
    assert exit_code(flexjobs.StoreUnavailable("down")) == 3


def test_status_and_list_show_a_deployments_serving_capacity(
    stores: _Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    from datetime import UTC, datetime

    serving = {"phase": "DEFICIT", "last": {"spot": 1, "onDemand": 0, "required": 2}}
    stores.deployments.create(
        "dep",
        {
            "requestId": "dep",
            "state": "DEPLOYED",
            "spot": True,
            "createdAt": datetime.now(UTC),
            "serving": serving,
        },
    )
    assert main(["--project", "p", "status", "dep"]) == 0
    assert "1/2 replicas (DEFICIT)" in capsys.readouterr().out
    assert main(["--project", "p", "list"]) == 0
    assert "1/2 replicas" in capsys.readouterr().out


def test_status_of_a_deployment_shows_its_serving_phase_hedges_fallback_and_newest_changes(
    stores: _Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    t0 = now - timedelta(hours=2)

    def change(minutes: int, spot: int, on_demand: int, cause: str) -> dict[str, Any]:
        at = (t0 + timedelta(minutes=minutes)).isoformat()
        return {"at": at, "spot": spot, "onDemand": on_demand, "required": 2, "cause": cause}

    history = [change(i, 2, 0, f"old change {i}") for i in range(3)] + [
        change(10, 0, 0, "serving 2+0 -> 0+0 of 2 (Spot+on-demand)"),
        change(15, 0, 0, "hedge: 2 on-demand replica(s) after 300 s with 0 of 2 Spot replicas"),
        change(30, 0, 2, "serving 0+0 -> 0+2 of 2; hedged: traffic [follows] the replicas"),
        change(40, 1, 2, "serving 0+2 -> 1+2 of 2 (Spot+on-demand)"),
        change(50, 1, 1, "MutateDeployedModel done"),
    ]
    serving = {
        "spotDeployedModelId": "111",
        "phase": "HEDGED",
        "since": (t0 + timedelta(minutes=15)).isoformat(),
        "accountedAt": (t0 + timedelta(minutes=50)).isoformat(),
        "last": {"spot": 1, "onDemand": 1, "required": 2},
        "fallbackDeployedModelId": "222",
        "fallbackReplicas": 1,
        "hedges": 1,
        "history": history,
        "pending": {"call": "MutateDeployedModel", "operation": "projects/p/ops/9", "at": None},
    }
    stores.deployments.create(
        "dep",
        {
            "requestId": "dep",
            "state": "DEPLOYED",
            "spot": True,
            "createdAt": t0,
            "serving": serving,
        },
    )
    assert main(["--project", "p", "status", "dep"]) == 0
    text = capsys.readouterr().out
    assert "2/2 replicas (1 Spot, 1 on-demand) (HEDGED)" in text
    assert re.search(r"phase\s+HEDGED since \S+ \S+Z \(1h45m\)", text)
    assert re.search(r"hedges\s+1 *\n", text) and re.search(
        r"fallback\s+222 \(1 replica\(s\)\)", text
    )
    # A call recorded before the serving machine (no time): since the state was last written.
    assert re.search(r"MutateDeployedModel since \S+ \S+Z: projects/p/ops/9", text)
    assert "hedge at " in text  # the chart's summary
    assert "traffic [follows] the replicas" in text  # a cause is text, never markup
    assert "MutateDeployedModel done" in text and "serving 2+0 -> 0+0" in text
    assert "old change" not in text  # the five newest only
    assert text.index("MutateDeployedModel done") < text.index("serving 2+0 -> 0+0")  # newest first
    assert main(["--project", "p", "status", "dep", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["serving"]["hedges"] == 1
