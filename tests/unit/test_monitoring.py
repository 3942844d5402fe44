"""Drift between the monitoring in infra/ (monitoring.tf, read with python-hcl2) and the code.

* every log-based metric, alert and dashboard filter names only events that
  :class:`shared.kernel.events.Event` declares, and only the jsonPayload fields that
  :data:`shared.kernel.events.FIELDS` declares for those events (and
  ``tests/functional/test_events.py`` shows the code logs every field declared there);
* the end states the metrics count are terminal states of the record;
* every log-based metric an alert or the dashboard references is defined here, under the
  name it is defined with, and a label it groups by is one the metric extracts;
* the monitoring inputs are documented.

As in test_infra.py, each check returns the problems it finds, so the tests show it failing.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from shared.domain.model.states import JobState
from shared.kernel.events import FIELDS, Event
from tests.docs import first_cells, section
from tests.unit.test_infra import INFRA, Infra

#: The resource types whose filters read the log lines or the metrics made of them.
MONITORING = ("google_logging_metric", "google_monitoring_alert_policy")
METRIC = "google_logging_metric"
#: A log-based distribution's name in PromQL, written out (not built from the resource).
PROMQL_NAME = r"logging_googleapis_com:user_(\w+?)_(?:sum|count|bucket)\b"
#: What every log line carries besides its event's fields (shared/kernel/logs.py).
EVERY_LINE = {"event", "message", "severity", "logger"}
VARIABLES = (
    "alert_notification_channels",
    "push_backlog_age_seconds",
    "error_ratio_threshold",
    "gpu_daily_budget_usd",
)


def units(infra: Infra) -> dict[str, str]:
    """Each filter unit, as text: a log-based metric (filter, extractors), an alert policy,
    a dashboard widget. Events and fields are judged within one unit."""
    found = {
        f"{kind}.{name}": str(body)
        for kind in MONITORING
        for name, body in infra.of_type(kind).items()
    }
    for i, widget in enumerate(infra.locals.get("dashboard_widgets", [])):
        found[f"dashboard widget {i} ({widget.get('title')})"] = str(widget)
    return found


def payload_problems(infra: Infra) -> list[str]:
    """Events and jsonPayload fields a filter names that no log line of the code carries."""
    declared = {event.value: FIELDS[event] | EVERY_LINE for event in Event}
    anywhere = set().union(*declared.values())
    problems = []
    for unit, text in units(infra).items():
        events = set(re.findall(r'jsonPayload\.event\s*=\s*\\*"([^"\\]*)', text))
        fields = set(re.findall(r"jsonPayload\.(\w+)", text))
        problems += [
            f"{unit}: names event {e!r}, which no log line carries" for e in sorted(events)
            if e not in declared
        ]  # fmt: skip
        valid = events & set(declared)
        known = set().union(*(declared[e] for e in valid)) if valid else anywhere
        named = ", ".join(sorted(valid)) or "flexjobs"
        problems += [
            f"{unit}: names jsonPayload.{f}, which no {named} line carries"
            for f in sorted(fields - known)
        ]
        if unit.startswith(f"{METRIC}.") and not events:
            problems.append(f"{unit}: names no event (a metric counts one kind of line)")
    return problems


def state_problems(infra: Infra) -> list[str]:
    """The end states counted are the record's terminal states."""
    terminal = {s.value for s in JobState if s.terminal}
    return [
        f"local.end_states: {s!r} is not a terminal state"
        for s in infra.locals.get("end_states", [])
        if s not in terminal
    ]


def defined_metrics(infra: Infra) -> dict[str, dict[str, Any]]:
    """Log-based metric resource → its body."""
    return infra.of_type(METRIC)


def reference_problems(infra: Infra) -> list[str]:
    """Every log-based metric referenced is defined, by resource or by its name."""
    metrics = defined_metrics(infra)
    names = {body["name"]: resource for resource, body in metrics.items()}
    promql = {name.replace("/", "_").replace(".", "_"): r for name, r in names.items()}
    problems = []
    if infra.locals.get("user_metric") != "logging.googleapis.com/user":
        problems.append("local.user_metric: not logging.googleapis.com/user")
    texts = {u: t for u, t in units(infra).items() if not u.startswith(f"{METRIC}.")}
    texts["local.promql_metric"] = str(infra.locals.get("promql_metric"))
    for unit, text in texts.items():
        for resource in sorted(set(re.findall(rf"{METRIC}\.(\w+)", text))):
            if resource not in metrics:
                problems.append(f"{unit}: references {METRIC}.{resource}, not defined")
        for name in sorted(set(re.findall(r"logging\.googleapis\.com/user/([\w./-]+)", text))):
            if name not in names:
                problems.append(f"{unit}: references the log-based metric {name}, not defined")
        for name in sorted(set(re.findall(PROMQL_NAME, text)) - set(promql)):
            problems.append(f"{unit}: references the log-based metric {name} (PromQL), undefined")
        # The PromQL suffixes exist for distributions only.
        for resource in re.findall(
            rf"logging_googleapis_com:user_\$\{{replace\({METRIC}\.(\w+)\.name[^}}]*\}}_(?:sum|count|bucket)",
            text,
        ):
            kind = metrics.get(resource, {}).get("metric_descriptor", [{}])[0].get("value_type")
            if resource in metrics and kind != "DISTRIBUTION":
                problems.append(f"{unit}: reads {METRIC}.{resource} as a distribution ({kind})")
    return problems


def label_problems(infra: Infra) -> list[str]:
    """A chart or alert over a log-based metric groups only by labels it extracts."""
    metrics = defined_metrics(infra)
    problems = []
    for unit, text in units(infra).items():
        if unit.startswith(f"{METRIC}."):
            continue
        used = set(re.findall(rf"{METRIC}\.(\w+)", text))
        labels = set(re.findall(r"metric\.labels?\.(\w+)", text))
        labels |= {
            label.strip()
            for group in re.findall(r"by \(([^)]*)\)", text)
            for label in group.split(",")
        }
        labels -= {"response_code_class"}  # Cloud Run's own label, on run.googleapis.com
        for resource in sorted(used & set(metrics)):
            descriptor = metrics[resource].get("metric_descriptor", [{}])[0]
            extracted = {label["key"] for label in descriptor.get("labels", [])}
            if set(metrics[resource].get("label_extractors") or {}) != extracted:
                problems.append(f"{METRIC}.{resource}: its labels and extractors differ")
            problems += [
                f"{unit}: groups {METRIC}.{resource} by {label!r}, which it does not extract"
                for label in sorted(labels - extracted)
                if len(used) == 1
            ]
    return problems


@pytest.fixture(scope="module")
def infra() -> Infra:
    return Infra.load()


def test_every_filter_names_only_what_the_code_logs(infra):
    assert defined_metrics(infra), "infra defines no log-based metric"
    assert payload_problems(infra) == []
    assert state_problems(infra) == []
    # Every event is counted by some metric.
    named = " ".join(str(body) for body in defined_metrics(infra).values())
    assert [e.value for e in Event if f'"{e.value}"' not in named] == []


def test_every_referenced_metric_exists(infra):
    assert reference_problems(infra) == []
    assert label_problems(infra) == []


def test_the_monitoring_inputs_are_documented(infra):
    infra_readme = (INFRA / "README.md").read_text(encoding="utf-8")
    alerts = section("monitoring.md", "Alerts")
    assert [v for v in VARIABLES if v not in infra.variables] == []
    assert [v for v in VARIABLES if f"`{v}`" not in infra_readme] == []
    assert [v for v in VARIABLES if f"`{v}`" not in alerts] == []


def documented_problems(infra: Infra, metrics: str, alerts: str) -> list[str]:
    """Each log-based metric has its row under the Monitoring page's "Log-based metrics" (by
    the name after flexjobs/), each alert policy under "Alerts" (by its resource name), and
    no row names one that infra/ does not define."""
    rows = {
        "metric": {c.strip("`") for c in first_cells(metrics)},
        "alert policy": {c.split()[0].strip("`") for c in first_cells(alerts)},
    }
    defined = {
        "metric": {
            body["name"].removeprefix("flexjobs/") for body in defined_metrics(infra).values()
        },
        "alert policy": set(infra.of_type("google_monitoring_alert_policy")),
    }
    problems = []
    for kind, named in rows.items():
        problems += [f"{kind} {n}: not documented" for n in sorted(defined[kind] - named)]
        problems += [
            f"{kind} {n}: documented, not in infra/" for n in sorted(named - defined[kind])
        ]
    return problems


def test_every_metric_and_alert_is_documented(infra):
    metrics = section("monitoring.md", "Log-based metrics")
    alerts = section("monitoring.md", "Alerts")
    assert first_cells(metrics) and first_cells(alerts)
    assert documented_problems(infra, metrics, alerts) == []
    broken = copy.deepcopy(infra)
    broken.resources[(METRIC, "retries")] = {"name": "flexjobs/retries"}
    del broken.resources[("google_monitoring_alert_policy", "tick_silent")]
    assert documented_problems(broken, metrics, alerts) == [
        "metric retries: not documented",
        "alert policy tick_silent: documented, not in infra/",
    ]


def test_the_monitoring_checks_fail_when_either_side_drifts(infra):
    broken = copy.deepcopy(infra)
    metric = broken.resources[(METRIC, "cost_usd")]
    metric["value_extractor"] = "EXTRACT(jsonPayload.costUSD)"
    broken.resources[(METRIC, "rejections")]["filter"] += ' AND jsonPayload.event="job.refused"'
    broken.resources[(METRIC, "ticks")]["filter"] = "${local.log_source}"
    broken.locals["end_states"] = ["SUCCEEDED", "RUNNING"]
    assert payload_problems(broken) == [
        "google_logging_metric.cost_usd: names jsonPayload.costUSD, which no "
        "job.state_changed line carries",
        "google_logging_metric.rejections: names event 'job.refused', which no log line carries",
        "google_logging_metric.ticks: names no event (a metric counts one kind of line)",
    ]
    assert state_problems(broken) == ["local.end_states: 'RUNNING' is not a terminal state"]
    # A field that exists, but on another event's lines.
    broken = copy.deepcopy(infra)
    broken.resources[(METRIC, "preemptions")]["filter"] += " AND jsonPayload.gpuSeconds>0"
    assert payload_problems(broken) == [
        "google_logging_metric.preemptions: names jsonPayload.gpuSeconds, which no "
        "job.preempted line carries"
    ]

    broken = copy.deepcopy(infra)
    del broken.resources[(METRIC, "ticks")]
    widget = broken.locals["dashboard_widgets"][0]["xyChart"]["dataSets"][0]
    widget["timeSeriesQuery"]["timeSeriesFilter"]["filter"] = (
        'metric.type="logging.googleapis.com/user/flexjobs/jobs_done"'
    )
    broken.locals["promql_metric"]["cost_usd"] = (
        "logging_googleapis_com:user_${replace(google_logging_metric.rejections.name, "
        '"/", "_")}_sum'
    )
    broken.locals["dashboard_widgets"][4]["xyChart"]["dataSets"][0]["timeSeriesQuery"][
        "prometheusQuery"
    ] = "sum(increase(logging_googleapis_com:user_flexjobs_gpu_hours_sum[1h]))"
    title = broken.locals["dashboard_widgets"][0]["title"]
    problems = reference_problems(broken)
    assert (
        "google_monitoring_alert_policy.tick_silent: references google_logging_metric.ticks, "
        "not defined" in problems
    )
    assert (
        f"dashboard widget 0 ({title}): references the log-based metric flexjobs/jobs_done, "
        "not defined" in problems
    )
    assert (
        "local.promql_metric: reads google_logging_metric.rejections as a distribution (INT64)"
        in problems
    )
    assert (
        "dashboard widget 4 (GPU-hours of ended attempts, by strategy (per hour)): references "
        "the log-based metric flexjobs_gpu_hours (PromQL), undefined" in problems
    )

    broken = copy.deepcopy(infra)
    aggregation = broken.locals["dashboard_widgets"][1]["xyChart"]["dataSets"][0][
        "timeSeriesQuery"
    ]["timeSeriesFilter"]["aggregation"]
    aggregation["groupByFields"] = ["metric.label.location"]
    assert label_problems(broken) == [
        "dashboard widget 1 (Preemptions, by strategy (per minute)): groups "
        "google_logging_metric.preemptions by 'location', which it does not extract"
    ]
