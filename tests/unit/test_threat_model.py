"""docs/threat-model.md keeps up with infra/ and functions/main.py.

Every Pub/Sub topic, bucket, function, scheduler job and log sink that infra/ defines must be
named in the threat model by its deployed name (with the variables' defaults; a variable with
no default, such as ``project_id``, is written ``<project_id>``), and so must every entry point
of functions/main.py. A new door without its rows fails here.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from tests.unit.test_infra import REPO, Infra, entry_points, push_paths

THREAT_MODEL = REPO / "docs" / "threat-model.md"

#: The resource types whose instances are doors (or the walls around them) in the model.
NAMED_TYPES = (
    "google_pubsub_topic",
    "google_storage_bucket",
    "google_cloudfunctions2_function",
    "google_cloud_scheduler_job",
    "google_logging_project_sink",
)


def _split_template(text: str) -> list[tuple[bool, str]]:
    """A template as (is_interpolation, text) parts; ``${...}`` may nest."""
    parts: list[tuple[bool, str]] = []
    i = start = 0
    while i < len(text):
        if text.startswith("${", i):
            parts.append((False, text[start:i]))
            depth, j = 1, i + 2
            while depth:
                if text.startswith("${", j):
                    depth, j = depth + 1, j + 2
                    continue
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            parts.append((True, text[i + 2 : j - 1]))
            i = start = j
        else:
            i += 1
    parts.append((False, text[start:]))
    return [(code, part) for code, part in parts if part]


class Names:
    """Resolves the name expressions of infra/ to deployed names, with the defaults."""

    def __init__(self, infra: Infra) -> None:
        self.infra = infra

    def template(self, text: str, each: dict[str, Any] | None = None) -> str | None:
        out = []
        for code, part in _split_template(text):
            value = self.expression(part.strip(), each) if code else part
            if value is None:
                return None
            out.append(value)
        return "".join(out)

    def expression(self, expr: str, each: dict[str, Any] | None) -> str | None:
        if match := re.fullmatch(r'"(.*)"', expr):
            return self.template(match.group(1), each)
        if match := re.fullmatch(r"var\.(\w+)", expr):
            variable = self.infra.variables[match.group(1)]
            return variable.get("default") if "default" in variable else f"<{match.group(1)}>"
        if match := re.fullmatch(r"local\.(\w+(?:\.\w+)*)", expr):
            value: Any = self.infra.locals
            for key in match.group(1).split("."):
                value = value[key]
            return self.template(value, each) if isinstance(value, str) else str(value)
        if match := re.fullmatch(r"coalesce\((.+?), (.+)\)", expr):
            first = self.expression(match.group(1), each)
            return first if first is not None else self.expression(match.group(2), each)
        if match := re.fullmatch(r"each\.value\.(\w+)", expr):
            return (each or {})[match.group(1)]
        if match := re.fullmatch(r"(?:one\()?google_pubsub_topic\.(\w+)(?:\[\*\])?\.name\)?", expr):
            return self.resource("google_pubsub_topic", match.group(1))[0]
        raise ValueError(f"cannot resolve {expr!r}: teach Names how, or name it plainly")

    def resource(self, kind: str, name: str) -> list[str]:
        """The deployed names of one resource: one, or one per push path for the resources
        made for each of them (every path, whichever the variables turn on)."""
        body = self.infra.resources[(kind, name)]
        local = re.fullmatch(r"\$\{local\.(\w+)\}", str(body.get("for_each", "")))
        entries = self.infra.locals.get(local.group(1)) if local else None
        if isinstance(entries, dict):
            # One instance per entry of a map written out (the event functions'
            # local.functions), each named with its entry.
            return [n for e in entries.values() if (n := self.template(body["name"], e))]
        if body.get("for_each") == "${local.push_paths}":
            paths = push_paths(self.infra).values()
            topics = [self.expression(fields["topic"], None) for fields in paths]
            each = [{"topic": topic} for topic in topics if topic]
            return [n for e in each if (n := self.template(body["name"], e))]
        resolved = self.template(body["name"])
        return [resolved] if resolved else []


def named_things(infra: Infra) -> dict[str, list[str]]:
    """Terraform address → the deployed names the threat model must carry."""
    names = Names(infra)
    return {
        f"{kind}.{name}": names.resource(kind, name)
        for (kind, name) in infra.resources
        if kind in NAMED_TYPES
    }


def coverage_problems(infra: Infra, document: str, entries: set[str]) -> list[str]:
    problems = [
        f"{address}: {name} is not named in docs/threat-model.md"
        for address, names in sorted(named_things(infra).items())
        for name in names
        if f"`{name}`" not in document
    ]
    problems += [
        f"functions/main.py {entry}: not named in docs/threat-model.md"
        for entry in sorted(entries)
        if f"`{entry}`" not in document
    ]
    return problems


@pytest.fixture(scope="module")
def infra() -> Infra:
    return Infra.load()


@pytest.fixture(scope="module")
def document() -> str:
    return THREAT_MODEL.read_text(encoding="utf-8")


def test_every_door_of_infra_is_in_the_threat_model(infra, document):
    assert coverage_problems(infra, document, entry_points()) == []
    # And the check saw what it must: the topics, every dead-letter topic, both buckets, the
    # five functions, the tick and the sink (a resolver that found nothing would pass).
    things = named_things(infra)
    assert all(things.values()), [address for address, names in things.items() if not names]
    everything = {name for names in things.values() for name in names}
    assert {
        "job-requests",
        "checkpoint-events",
        "checkpoint-events-dead-letter",
        "upload-notifications-dead-letter",
        "<project_id>-flexjobs-uploads",
        "flexjobs-handle-job-request",
        "flexjobs-handle-job-event",
        "flexjobs-handle-scheduler-tick",
        "flexjobs-handle-upload",
        "flexjobs-status-page",
        "flexjobs-tick",
        "flexjobs-job-hints",
    } <= everything


def test_the_coverage_check_fails_when_the_model_falls_behind(infra, document):
    broken = copy.deepcopy(infra)
    broken.variables["scheduler_ticks_topic"]["default"] = "scheduler-pulses"
    broken.resources[("google_storage_bucket", "exports")] = {
        "name": "${var.project_id}-flexjobs-exports"
    }
    assert coverage_problems(broken, document, {*entry_points(), "handle_export"}) == [
        "google_pubsub_topic.dead_letter: scheduler-pulses-dead-letter is not named in "
        "docs/threat-model.md",
        "google_pubsub_topic.ticks: scheduler-pulses is not named in docs/threat-model.md",
        "google_storage_bucket.exports: <project_id>-flexjobs-exports is not named in "
        "docs/threat-model.md",
        "functions/main.py handle_export: not named in docs/threat-model.md",
    ]
    with pytest.raises(ValueError, match="cannot resolve"):
        Names(infra).template("${lower(var.project_id)}")


def test_the_threat_model_says_what_is_not_isolated(document):
    headings = re.findall(r"^#+ (.+)$", document, flags=re.MULTILINE)
    assert {"Actors", "Surfaces", "Not isolated", "How to extend"} <= set(headings)
    assert "cancel any requestId" in document
    assert "same `checkpointUri`" in document
