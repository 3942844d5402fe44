"""Drift between infra/ (Terraform, read with python-hcl2) and the code.

Each check returns the problems it finds, so the tests can also show a check failing when one
side loses something:

* every entry point in functions/main.py is deployed, with the trigger the contract names
  (the status page: HTTP, invoked by the group variable's members only);
* nothing is granted to allUsers or allAuthenticatedUsers, and the status page only reads;
* every environment variable the code reads is set on every function, or listed as left at
  the code's default (in infra/README.md too);
* the topic names are the contract's;
* every composite query the Firestore adapters declare has its composite index, with the
  direction of each field it orders on;
* requests and checkpoints never share trust: the request bucket is FLEXJOBS_REQUEST_BUCKET,
  only handle_upload reads it and only the uploaders write it, no checkpoint reader or bucket
  is it, and live progress comes from the checkpoint buckets' own notifications;
* no grant reaches further than its use: no project-wide Pub/Sub publisher, no unconditional
  project-wide Cloud Storage role (the build reads the source buckets only);
* a live claim can never use up a request's deliveries: the push subscriptions' precondition,
  evaluated over the defaults and against a model of Pub/Sub's shortest retry schedule;
* the four event functions, one resource with ``for_each`` over ``local.functions``, set per
  entry point what the four resources they replaced set, and ``moved`` blocks take the old
  addresses to the instances (so an installation's plan neither destroys nor creates one).
"""

from __future__ import annotations

import ast
import copy
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hcl2
import pytest
from hcl2.utils import SerializationOptions

# Imported for what they declare: their queries (DECLARED; the job store's come first, as the
# admission store imports it).
import shared.adapters.firestore.admission_store
import shared.adapters.firestore.deployment_store
import shared.adapters.firestore.views  # noqa: F401
from shared.adapters.firestore.queries import DECLARED, Query
from shared.domain.model.states import JobState
from shared.kernel.config import ENV_VARS, Settings
from shared.kernel.logs import BUILD_ENV

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "infra"
MAIN = REPO / "functions" / "main.py"

#: The contract's delivery of each entry point: the Terraform variable naming its topic (a
#: Pub/Sub push subscription), the Eventarc event type it is triggered by, or (HTTP, called
#: by people) the variable naming the group that may invoke it.
TRIGGERS = {
    "handle_job_request": ("topic", "requests_topic"),
    "handle_job_event": ("topic", "events_topic"),
    "handle_scheduler_tick": ("topic", "scheduler_ticks_topic"),
    # A Pub/Sub trigger on the request bucket's notification topic (its storage agent then
    # publishes to that topic only); notification mode pushes that topic instead.
    "handle_upload": ("event", "google.cloud.pubsub.topic.v1.messagePublished"),
    "status_page": ("http", "status_page_invokers"),
}
PUBLIC = ("allUsers", "allAuthenticatedUsers")
#: The contract's topics: Terraform variable → default name (README "Environment").
TOPICS = {
    "requests_topic": Settings(project="p").requests_topic,
    "events_topic": Settings(project="p").events_topic,
    "notifications_topic": Settings(project="p").notifications_topic,
    "scheduler_ticks_topic": "scheduler-ticks",
}
#: Read by the code but deliberately not set by infra: the code's default is the production
#: value (infra/README.md lists the same names).
LEFT_AT_DEFAULT = {
    "GCLOUD_PROJECT",
    "FLEXJOBS_VERTEX_ENDPOINT",
    "FLEXJOBS_CLOUDQUOTAS_ENDPOINT",
    "FLEXJOBS_HINT_RECENT_SECONDS",
    "FLEXJOBS_BACKOFF_BASE_SECONDS",
    "FLEXJOBS_BACKOFF_CAP_SECONDS",
    "FLEXJOBS_FAILURE_RULES",
    "FLEXJOBS_MAX_GPUS_PER_JOB",
    "FLEXJOBS_MAX_REPLICAS",
    "FLEXJOBS_MAX_MESSAGE_BYTES",
    "FLEXJOBS_FIELD_POLICY",
    "FLEXJOBS_STATUS_PAGE_SIZE",
    "FLEXJOBS_AUTO_TIME_SCALE",
}

#: Variables of the functions' runtime itself, not of flexjobs: functions-framework's threads.
FRAMEWORK_ENV = {"THREADS"}

OPTIONS = SerializationOptions(with_comments=False, explicit_blocks=False, strip_string_quotes=True)


@dataclass
class Infra:
    """The Terraform module, as python-hcl2 reads it: resources by (type, name), variables
    and locals by name."""

    resources: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    variables: dict[str, dict[str, Any]] = field(default_factory=dict)
    locals: dict[str, Any] = field(default_factory=dict)
    moved: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def load(cls, folder: Path = INFRA) -> Infra:
        infra = cls()
        for path in sorted(folder.glob("*.tf")):
            with path.open(encoding="utf-8") as handle:
                module = hcl2.load(handle, serialization_options=OPTIONS)
            for block in module.get("resource", []):
                for kind, named in block.items():
                    for name, body in named.items():
                        infra.resources[(kind, name)] = body
            for block in module.get("variable", []):
                infra.variables.update(block)
            for block in module.get("locals", []):
                infra.locals.update(block)
            infra.moved += module.get("moved", [])
        return infra

    def of_type(self, kind: str) -> dict[str, dict[str, Any]]:
        return {name: body for (k, name), body in self.resources.items() if k == kind}

    def instances(self, kind: str) -> dict[str, dict[str, Any]]:
        """The resources of ``kind`` as Terraform makes them: one with ``for_each`` over a
        local map is one body per key (named ``name["key"]``, :func:`expand`)."""
        found = {}
        for name, body in self.of_type(kind).items():
            if "for_each" not in body:
                found[name] = body
                continue
            local = re.fullmatch(r"\$\{local\.(\w+)\}", str(body["for_each"]))
            if not local:
                raise ValueError(f"{kind}.{name}: for_each {body['for_each']!r} is not a local")
            for key, value in self.locals[local.group(1)].items():
                each = {k: v for k, v in body.items() if k != "for_each"}
                found[f'{name}["{key}"]'] = expand(each, key, value)
        return found


def _hcl_literal(value: Any) -> str:
    """``value`` written as HCL, the way python-hcl2 prints it inside an expression."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str) and "${" not in value:
        return json.dumps(value)
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return "{" + ", ".join(f"{k} = {_hcl_literal(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"cannot write {value!r} into an expression here")


def expand(body: Any, key: str, value: dict[str, Any]) -> Any:
    """One instance of a ``for_each`` resource's body: ``each.key`` and ``each.value.NAME``
    replaced by the key and the map entry's values (a whole expression by the value itself).
    A name the entry lacks raises KeyError, as Terraform refuses it."""
    if isinstance(body, dict):
        return {k: expand(v, key, value) for k, v in body.items()}
    if isinstance(body, list):
        return [expand(v, key, value) for v in body]
    if not isinstance(body, str):
        return body
    if body == "${each.key}":
        return key
    whole = re.fullmatch(r"\$\{each\.value\.(\w+)\}", body)
    if whole:
        return value[whole.group(1)]
    body = re.sub(r"\beach\.key\b", json.dumps(key), body)
    return re.sub(r"\beach\.value\.(\w+)", lambda m: _hcl_literal(value[m.group(1)]), body)


def entry_points(source: Path = MAIN) -> set[str]:
    """The functions of main.py registered with functions-framework."""
    tree = ast.parse(source.read_text(encoding="utf-8"))
    found = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "functions_framework"
                ):
                    found.add(node.name)
    return found


def deployed(infra: Infra) -> dict[str, dict[str, Any]]:
    """The deployed functions' bodies, by the entry point each runs."""
    functions = {}
    for body in infra.instances("google_cloudfunctions2_function").values():
        (build,) = body["build_config"]
        functions[build["entry_point"]] = body
    return functions


def _reference(expression: str, pattern: str) -> str | None:
    match = re.fullmatch(r"\$\{" + pattern + r"\}", expression)
    return match.group(1) if match else None


def topic_of(infra: Infra, resource: str) -> str | None:
    """The variable a google_pubsub_topic takes its name from."""
    body = infra.resources.get(("google_pubsub_topic", resource))
    return _reference(body["name"], r"var\.(\w+)") if body else None


def push_paths(infra: Infra) -> dict[str, dict[str, str]]:
    """The entries of ``local.push_paths`` (every one, whatever the variables filter), each as
    its fields' expressions: ``{"handle_job_request": {"topic": "google_pubsub_topic...",
    "function": '"handle_job_request"', "requests": "true", ...}}``."""
    paths = str(infra.locals.get("push_paths", ""))
    entries = {}
    for entry, fields in re.findall(r"(\w+) = \{([^{}]*)\}", paths):
        entries[entry] = dict(field.split(" = ", 1) for field in fields.split(", "))
    return entries


def pushed(infra: Infra) -> dict[str, set[str]]:
    """Entry point → the variables naming the topics its push subscriptions read."""
    subscription = infra.resources.get(("google_pubsub_subscription", "push"), {})
    if subscription.get("for_each") != "${local.push_paths}":
        return {}
    (config,) = subscription["push_config"]
    if "local.function_uris[each.value.function]" not in config["push_endpoint"]:
        return {}
    found: dict[str, set[str]] = {}
    for fields in push_paths(infra).values():
        topic = re.fullmatch(
            r"(?:one\()?google_pubsub_topic\.(\w+)(?:\[\*\])?\.name\)?", fields["topic"]
        )
        topic_id = re.fullmatch(
            r"(?:one\()?google_pubsub_topic\.(\w+)(?:\[\*\])?\.id\)?", fields["topic_id"]
        )
        variable = topic_of(infra, topic.group(1)) if topic else None
        # The subscription reads topic_id; the name only labels it.
        if variable and topic_id and topic.group(1) == topic_id.group(1):
            found.setdefault(fields["function"].strip('"'), set()).add(variable)
    return found


def event_types(infra: Infra, function: dict[str, Any]) -> set[str]:
    """The Eventarc event types a function is triggered by with the variables' defaults: a
    static block, or a dynamic one whose ``for_each`` is on by default."""
    triggers = list(function.get("event_trigger", []))
    for block in function.get("dynamic", []):
        dynamic = block.get("event_trigger", {})
        if yields_block(infra, str(dynamic.get("for_each", ""))):
            triggers.extend(dynamic.get("content", []))
    return {t["event_type"] for t in triggers}


def yields_block(infra: Infra, for_each: str, **overrides: Any) -> bool:
    """Whether a dynamic block's ``${CONDITION ? [1] : []}`` yields its block with the
    variables' defaults (and the overrides); any other ``for_each`` counts as none."""
    match = re.fullmatch(r"\$\{(.+) \? \[1\] : \[\]\}", for_each)
    if not match:
        return False
    return bool(evaluate(f"${{{match.group(1)}}}", defaults(infra, **overrides)))


def trigger_problems(infra: Infra, entries: set[str]) -> list[str]:
    functions = deployed(infra)
    problems = [f"{e}: in functions/main.py but not deployed" for e in entries - set(functions)]
    problems += [f"{e}: deployed but not in functions/main.py" for e in set(functions) - entries]
    topics = pushed(infra)
    for entry in entries & set(functions):
        how, what = TRIGGERS.get(entry, ("?", "?"))
        if how == "topic" and what not in topics.get(entry, set()):
            problems.append(f"{entry}: not pushed from the topic of var.{what}")
        elif how == "event" and what not in event_types(infra, functions[entry]):
            problems.append(f"{entry}: no Eventarc trigger for {what}")
        elif how == "http":
            problems += http_problems(infra, entry, what)
        elif how == "?":
            problems.append(f"{entry}: the contract names no trigger for it (TRIGGERS)")
        ingress = functions[entry]["service_config"][0]["ingress_settings"]
        if how != "http" and ingress != "ALLOW_INTERNAL_ONLY":
            problems.append(f"{entry}: an event function must be ALLOW_INTERNAL_ONLY")
    return problems


def _resource_name(infra: Infra, entry: str) -> str:
    (name,) = [
        name
        for name, body in infra.of_type("google_cloudfunctions2_function").items()
        if body["build_config"][0]["entry_point"] == entry
    ]
    return name


def http_problems(infra: Infra, entry: str, group: str) -> list[str]:
    """An HTTP function: no event trigger, no push subscription, and roles/run.invoker on its
    service granted once, to the group ``var.<group>`` names (a validated variable)."""
    name = _resource_name(infra, entry)
    body = infra.resources[("google_cloudfunctions2_function", name)]
    problems = []
    if body.get("event_trigger") or body.get("dynamic") or entry in pushed(infra):
        problems.append(f"{entry}: an HTTP function has no trigger")
    service = f"${{google_cloudfunctions2_function.{name}.service_config[0].service}}"
    grants = [
        g for g in infra.of_type("google_cloud_run_service_iam_member").values()
        if g["service"] == service
    ]  # fmt: skip
    wanted = {"role": "roles/run.invoker", "member": f"group:${{var.{group}}}"}
    if [{k: g[k] for k in wanted} for g in grants] != [wanted]:
        problems.append(f"{entry}: invoker must be granted once, to the group var.{group}")
    if not infra.variables.get(group, {}).get("validation"):
        problems.append(f"var.{group}: not validated")
    return problems


def public_problems(infra: Infra) -> list[str]:
    """Every grant or binding naming allUsers or allAuthenticatedUsers."""
    return [
        f"{kind}.{name}: grants to {who}"
        for (kind, name), body in infra.resources.items()
        for key in ("member", "members")
        for who in PUBLIC
        if who in str(body.get(key, ""))
    ]


def reader_problems(infra: Infra) -> list[str]:
    """The status page's service account: Firestore read on the project, nothing else."""
    member = "${google_service_account.status_page.member}"
    roles = sorted(
        f"{kind} {body.get('role')}"
        for (kind, _), body in infra.resources.items()
        if body.get("member") == member
    )
    wanted = ["google_project_iam_member roles/datastore.viewer"]
    return [] if roles == wanted else [f"the status page's account holds {roles}"]


def env_problems(infra: Infra, read: tuple[str, ...] = (*ENV_VARS, BUILD_ENV)) -> list[str]:
    env = infra.locals.get("function_env", {})
    problems = []
    for name, function in deployed(infra).items():
        given = str(function["service_config"][0].get("environment_variables"))
        extra = re.fullmatch(r"\$\{merge\(local\.function_env, \{(.*)\}\)\}", given)
        added = set(re.findall(r"(\w+) = ", extra.group(1))) if extra else set()
        if given != "${local.function_env}" and not extra:
            problems.append(f"{name}: its environment is not local.function_env")
        problems += [
            f"{name}: sets {v}, neither flexjobs' nor the runtime's"
            for v in sorted(added - FRAMEWORK_ENV)
        ]
    problems += [
        f"{v}: read by the code, neither set by infra nor left at its default on purpose"
        for v in sorted(set(read) - set(env) - LEFT_AT_DEFAULT)
    ]
    problems += [f"{v}: set by infra, read by no code" for v in sorted(set(env) - set(read))]
    return problems


def topic_problems(infra: Infra) -> list[str]:
    problems = []
    for variable, name in TOPICS.items():
        default = infra.variables.get(variable, {}).get("default")
        if default != name:
            problems.append(f"var.{variable}: default {default!r}, the contract says {name!r}")
    env = infra.locals.get("function_env", {})
    for key, resource in (
        ("FLEXJOBS_REQUESTS_TOPIC", "requests"),
        ("FLEXJOBS_EVENTS_TOPIC", "events"),
        ("FLEXJOBS_NOTIFICATIONS_TOPIC", "notifications"),
    ):
        if env.get(key) != f"${{google_pubsub_topic.{resource}.name}}":
            problems.append(f"{key}: not the name of google_pubsub_topic.{resource}")
    return problems


def index_problems(infra: Infra, queries: list[Query] = DECLARED) -> list[str]:
    indexes = [
        (body["collection"], {f["field_path"]: f["order"] for f in body["fields"]})
        for body in infra.of_type("google_firestore_index").values()
    ]
    problems = []
    for query in queries:
        if not query.composite:
            continue
        fields = query.fields
        if not any(
            collection == query.collection
            and set(index) == set(fields)
            and all(index[name] == direction for name, direction in query.order)
            for collection, index in indexes
        ):
            problems.append(f"{query.collection} {fields}: a composite query with no index")
    return problems


def reference_problems(folder: Path = INFRA) -> list[str]:
    """Every variable and local is declared once and used; every one used is declared."""
    text = "\n".join(path.read_text(encoding="utf-8") for path in sorted(folder.glob("*.tf")))
    code = re.sub(r"(?m)^\s*#.*$", "", text)  # comments may name anything
    declared_vars = re.findall(r'^variable "(\w+)"', code, flags=re.MULTILINE)
    declared_locals = [
        name
        for block in re.findall(r"^locals \{\n(.*?)^\}", code, flags=re.MULTILINE | re.DOTALL)
        for name in re.findall(r"^  (\w+)\s*=", block, flags=re.MULTILINE)
    ]
    problems = []
    for kind, declared in (("var", declared_vars), ("local", declared_locals)):
        used = set(re.findall(rf"\b{kind}\.(\w+)", code))
        problems += [
            f"{kind}.{n}: declared twice" for n in sorted(set(declared)) if declared.count(n) > 1
        ]
        problems += [f"{kind}.{n}: declared, never used" for n in sorted(set(declared) - used)]
        problems += [f"{kind}.{n}: used, never declared" for n in sorted(used - set(declared))]
    return problems


UPLOADS = "${google_storage_bucket.uploads.name}"
UPLOAD_SA = '${google_service_account.function["handle_upload"].member}'
#: The grants on the request bucket, all of them: handle_upload reads request files, the
#: uploaders create them. Nobody else reads it, nobody else writes it.
REQUEST_BUCKET_GRANTS = {
    ("upload_reader", "roles/storage.objectViewer", UPLOAD_SA),
    ("request_uploaders", "roles/storage.objectCreator", "${each.value}"),
}


def trust_problems(infra: Infra) -> list[str]:
    """Requests and checkpoints never share trust (storage.tf, iam.tf)."""
    problems = []
    env = infra.locals.get("function_env", {})
    if env.get("FLEXJOBS_REQUEST_BUCKET") != UPLOADS:
        problems.append("FLEXJOBS_REQUEST_BUCKET: not the request bucket's name")
    grants = {
        (name, body["role"], body["member"])
        for name, body in infra.of_type("google_storage_bucket_iam_member").items()
        if body["bucket"] == UPLOADS
    }
    problems += [
        f"the request bucket grants {g[1]} to {g[2]} ({g[0]})"
        for g in sorted(grants - REQUEST_BUCKET_GRANTS)
    ]
    problems += [
        f"the request bucket lacks {g[1]} for {g[2]} ({g[0]})"
        for g in sorted(REQUEST_BUCKET_GRANTS - grants)
    ]
    uploaders = infra.resources.get(("google_storage_bucket_iam_member", "request_uploaders"), {})
    if "var.training_service_accounts" not in str(uploaders.get("lifecycle")):
        problems.append("request_uploaders: no precondition keeps training service accounts out")
    readers = str(infra.locals.get("checkpoint_readers"))
    if "upload_bucket_name" in readers or "google_storage_bucket.uploads" in readers:
        problems.append("checkpoint_readers: reads checkpoints in the request bucket")
    bucket = infra.resources.get(("google_storage_bucket", "uploads"), {})
    if "!contains(var.checkpoint_buckets, local.upload_bucket_name)" not in str(
        bucket.get("lifecycle")
    ):
        problems.append(
            "google_storage_bucket.uploads: no precondition keeps it out of checkpoint_buckets"
        )
    wanted = {"payload_format": "JSON_API_V1", "event_types": ["OBJECT_FINALIZE"]}
    notifications = {
        "uploads": (
            "${google_storage_bucket.uploads.name}",
            "${google_pubsub_topic.upload_notifications.id}",
        ),
        "checkpoints": ("${each.value}", "${google_pubsub_topic.checkpoint_events[0].id}"),
    }
    for name, (on, topic) in notifications.items():
        body = infra.resources.get(("google_storage_notification", name), {})
        route = (body.get("bucket"), body.get("topic"))
        if {k: body.get(k) for k in wanted} != wanted or route != (on, topic):
            problems.append(
                f"google_storage_notification.{name}: not OBJECT_FINALIZE, JSON_API_V1 "
                f"from {on} to {topic}"
            )
    uploads = infra.resources.get(("google_storage_notification", "uploads"), {})
    if uploads.get("object_name_prefix") != "${local.upload_prefix}":
        problems.append("google_storage_notification.uploads: not limited to the request prefix")
    if infra.resources.get(("google_storage_notification", "checkpoints"), {}).get("for_each") != (
        "${local.checkpoint_notify_buckets}"
    ):
        problems.append(
            "google_storage_notification.checkpoints: not one per notifying checkpoint bucket"
        )
    if "checkpoint_events_topic" not in pushed(infra).get("handle_upload", set()):
        problems.append(
            "handle_upload: checkpoint events are not pushed to it (with a dead-letter topic)"
        )
    trigger = (
        deployed(infra).get("handle_upload", {}).get("dynamic", [{}])[0].get("event_trigger", {})
    )
    if [c.get("pubsub_topic") for c in trigger.get("content", [])] != [
        "${google_pubsub_topic.upload_notifications.id}"
    ]:
        problems.append(
            "handle_upload: the Eventarc trigger is not on the request bucket's notification topic"
        )
    return problems


def grant_problems(infra: Infra) -> list[str]:
    """No grant reaches further than what it is used for (iam.tf, storage.tf)."""
    problems = [
        f"{kind}.{name}: {body['role']}"
        for (kind, name), body in infra.resources.items()
        if body.get("role") in {"roles/owner", "roles/editor", "roles/viewer"}
    ]
    problems += [f"{kind}.{name}: a key" for kind, name in infra.resources if kind.endswith("_key")]
    for name, body in infra.of_type("google_project_iam_member").items():
        if body["role"] == "roles/pubsub.publisher":
            problems.append(
                f"google_project_iam_member.{name}: publisher on every topic of the project"
            )
        if body["role"].startswith("roles/storage.") and not body.get("condition"):
            problems.append(
                f"google_project_iam_member.{name}: {body['role']} on every bucket of the project"
            )
    # Quota information is read by the tick alone (admission's ceiling), and only read.
    tick = '${google_service_account.function["handle_scheduler_tick"].member}'
    quota_grants = sorted(
        (str(body.get("role")), str(body.get("member")))
        for (kind, name), body in infra.resources.items()
        if str(body.get("role")).startswith("roles/cloudquotas.")
    )
    if quota_grants != [("roles/cloudquotas.viewer", tick)]:
        problems.append(f"quota information is granted as {quota_grants}")
    build = "${google_service_account.build.member}"
    reads = sorted(
        f"{kind}.{name}"
        for (kind, name), body in infra.resources.items()
        if body.get("member") == build and str(body.get("role")).startswith("roles/storage.")
    )
    if reads != [
        "google_project_iam_member.build_gcf_sources_reader",
        "google_storage_bucket_iam_member.build_source_reader",
    ]:
        problems.append(f"the build reads storage through {reads}")
    staging = infra.resources.get(("google_project_iam_member", "build_gcf_sources_reader"), {})
    expression = (staging.get("condition") or [{}])[0].get("expression")
    bucket = "projects/_/buckets/${local.gcf_sources_bucket}"
    if expression != f'resource.name == "{bucket}" || resource.name.startsWith("{bucket}/")':
        problems.append(
            f"build_gcf_sources_reader: condition {expression!r} is not that one bucket "
            "and its objects"
        )
    if (
        infra.locals.get("gcf_sources_bucket")
        != "gcf-v2-sources-${data.google_project.this.number}-${var.region}"
    ):
        problems.append("local.gcf_sources_bucket: not gcf-v2-sources-PROJECT_NUMBER-REGION")
    source = infra.resources.get(("google_storage_bucket_iam_member", "build_source_reader"), {})
    if source.get("bucket") != "${google_storage_bucket.source.name}":
        problems.append("build_source_reader: not on the source bucket")
    for name, body in infra.of_type("google_pubsub_topic_iam_member").items():
        if (
            body["member"] == "${local.storage_service_agent}"
            and name != "storage_agent_notifications"
        ):
            problems.append(
                f"google_pubsub_topic_iam_member.{name}: the storage agent publishes elsewhere"
            )
    return problems


# --- The claim TTL, the delivery attempts and the backoff -------------------------------------

#: The nodes an HCL condition may use here: arithmetic, comparisons, and/or/not, names.
_SAFE = (
    ast.Expression, ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.Compare, ast.Constant, ast.Name,
    ast.Subscript, ast.Load, ast.And, ast.Or, ast.Not, ast.USub, ast.Add, ast.Sub, ast.Mult,
    ast.Div, ast.Gt, ast.GtE, ast.Lt, ast.LtE, ast.Eq, ast.NotEq,
)  # fmt: skip


def evaluate(expression: str, names: dict[str, Any]) -> Any:
    """Evaluate a small HCL expression (numbers, ``var.``/``each.value.``/``local.`` names,
    ``+ - * /``, comparisons, ``! || &&``) with ``names`` for its references. Anything else is
    refused, so an expression this cannot read fails the test instead of passing it."""
    body = expression.removeprefix("${").removesuffix("}")
    body = re.sub(r"!(?!=)", " not ", body).replace("||", " or ").replace("&&", " and ")
    body = re.sub(r"\b(?:var|each\.value|local)\.\w+", lambda m: f"_[{m.group(0)!r}]", body)
    tree = ast.parse(body.strip(), mode="eval")
    for node in ast.walk(tree):
        if not isinstance(node, _SAFE) or (
            isinstance(node, ast.Name) and node.id not in {"_", "true", "false"}
        ):
            raise ValueError(f"cannot evaluate {expression!r} here ({type(node).__name__})")
    scope = {"_": names, "true": True, "false": False}
    return eval(
        compile(tree, "<hcl>", "eval"), {"__builtins__": {}}, scope
    )  # the nodes are checked above


def defaults(infra: Infra, **overrides: Any) -> dict[str, Any]:
    """``var.NAME`` → its default (or the override given)."""
    values = {f"var.{name}": body.get("default") for name, body in infra.variables.items()}
    values.update({f"var.{name}": value for name, value in overrides.items()})
    values["local.longest_timeout"] = max(f["timeout"] for f in infra.locals["functions"].values())
    return values


def delivery_verdicts(infra: Infra, **overrides: Any) -> dict[str, bool]:
    """Push path → whether the push subscription's precondition holds with the defaults (and
    the overrides): the HCL condition itself, evaluated."""
    subscription = infra.resources[("google_pubsub_subscription", "push")]
    (lifecycle,) = subscription["lifecycle"]
    (precondition,) = lifecycle["precondition"]
    names = defaults(infra, **overrides)
    verdicts = {}
    for path, fields in push_paths(infra).items():
        each = {
            f"each.value.{k}": evaluate(fields[k], names) for k in ("requests", "minimum_backoff")
        }
        verdicts[path] = evaluate(precondition["condition"], {**names, **each})
    return verdicts


def outlasts_claim(attempts: int, minimum_backoff: float, claim_ttl: float) -> bool:
    """The model: does a request whose first delivery took a claim and crashed at once get a
    delivery after the claim expired, on the shortest schedule Pub/Sub may keep (every
    redelivery ``minimum_backoff`` after the last, each failing at once on the live claim)?"""
    now = 0.0  # the claim is taken, and the delivery holding it dies
    for _ in range(attempts - 1):
        now += minimum_backoff  # the next delivery
        if now > claim_ttl:  # the claim has expired: this delivery takes it over
            return True
    return False  # every delivery met the live claim: dead-lettered


def delivery_problems(infra: Infra) -> list[str]:
    """The precondition reads the subscription's own retry policy and delivery attempts, and
    the defaults pass it."""
    problems = []
    subscription = infra.resources[("google_pubsub_subscription", "push")]
    (retry,) = subscription["retry_policy"]
    (dead_letter,) = subscription["dead_letter_policy"]
    if retry["minimum_backoff"] != "${each.value.minimum_backoff}s":
        problems.append("retry_policy.minimum_backoff: not the push path's minimum_backoff")
    if dead_letter["max_delivery_attempts"] != "${var.max_delivery_attempts}":
        problems.append("dead_letter_policy.max_delivery_attempts: not var.max_delivery_attempts")
    carries = {
        path for path, fields in push_paths(infra).items() if fields.get("requests") == "true"
    }
    if carries != {"handle_job_request", "handle_upload"}:
        problems.append(f"the paths that carry requests are {sorted(carries)}")
    problems += [
        f"{path}: the defaults fail the precondition"
        for path, ok in delivery_verdicts(infra).items()
        if not ok
    ]
    return problems


@pytest.fixture(scope="module")
def infra() -> Infra:
    return Infra.load()


def test_every_entry_point_is_deployed_with_its_trigger(infra):
    assert entry_points() == set(TRIGGERS)
    assert trigger_problems(infra, entry_points()) == []


def test_nothing_is_public_and_the_status_page_only_reads(infra):
    assert public_problems(infra) == []
    assert reader_problems(infra) == []
    page = deployed(infra)["status_page"]["service_config"][0]
    assert page["ingress_settings"] == "${var.status_page_ingress}"
    assert infra.variables["status_page_ingress"]["default"] == "ALLOW_ALL"


def test_every_environment_variable_is_set_or_deliberately_defaulted(infra):
    assert env_problems(infra) == []
    readme = (INFRA / "README.md").read_text(encoding="utf-8")
    assert [name for name in sorted(LEFT_AT_DEFAULT) if f"`{name}`" not in readme] == []


def test_the_topics_are_the_contracts(infra):
    assert topic_problems(infra) == []


def test_every_composite_query_has_its_index(infra):
    assert [q for q in DECLARED if q.composite], "the adapters declare no composite query"
    assert index_problems(infra) == []


def test_the_drift_checks_fail_when_either_side_loses_something(infra):
    broken = copy.deepcopy(infra)
    del broken.locals["functions"]["handle_scheduler_tick"]
    assert trigger_problems(broken, entry_points()) == [
        "handle_scheduler_tick: in functions/main.py but not deployed"
    ]
    assert trigger_problems(infra, {*entry_points(), "handle_new"}) == [
        "handle_new: in functions/main.py but not deployed"
    ]

    broken = copy.deepcopy(infra)
    del broken.locals["function_env"]["FLEXJOBS_UPLOAD_PREFIX"]
    assert env_problems(broken) == [
        "FLEXJOBS_UPLOAD_PREFIX: read by the code, neither set by infra nor left at its "
        "default on purpose"
    ]
    assert env_problems(infra, (*ENV_VARS, BUILD_ENV, "FLEXJOBS_NEW")) == [
        "FLEXJOBS_NEW: read by the code, neither set by infra nor left at its default on purpose"
    ]

    broken = copy.deepcopy(infra)
    broken.locals["push_paths"] = broken.locals["push_paths"].replace(
        "topic_id = google_pubsub_topic.requests.id", "topic_id = google_pubsub_topic.events.id"
    )
    assert trigger_problems(broken, entry_points()) == [
        "handle_job_request: not pushed from the topic of var.requests_topic"
    ]
    broken = copy.deepcopy(infra)
    broken.variables["upload_delivery"]["default"] = "notification"
    assert (
        "handle_upload: no Eventarc trigger for google.cloud.pubsub.topic.v1.messagePublished"
        in (trigger_problems(broken, entry_points()))
    )

    broken = copy.deepcopy(infra)
    broken.variables["events_topic"]["default"] = "events"
    assert topic_problems(broken) == [
        "var.events_topic: default 'events', the contract says 'job-events'"
    ]

    broken = copy.deepcopy(infra)
    for key in [k for k in broken.resources if k[0] == "google_firestore_index"]:
        del broken.resources[key]
    assert index_problems(broken) == [
        "jobs ('checkpointPrefix', 'state'): a composite query with no index",
        "jobs ('admission.stage', 'admission.waitingSince'): a composite query with no index",
        "jobs ('admission.stage', 'admission.queue', 'admission.waitingSince'): a composite"
        " query with no index",
        "deployments ('endpoint', 'state'): a composite query with no index",
        "jobs ('state', 'createdAt'): a composite query with no index",
        "jobs ('state', 'createdAt'): a composite query with no index",
    ]
    extra = Query.__new__(Query)  # declared here only: kept out of DECLARED
    object.__setattr__(extra, "collection", "jobs")
    object.__setattr__(extra, "filters", (("endedAt", ">="),))
    object.__setattr__(extra, "order", (("createdAt", "DESCENDING"),))
    assert index_problems(infra, [extra]) == [
        "jobs ('endedAt', 'createdAt'): a composite query with no index"
    ]
    object.__setattr__(extra, "filters", (("state", "in"),))
    object.__setattr__(extra, "order", (("createdAt", "ASCENDING"),))  # the index is DESCENDING
    assert index_problems(infra, [extra]) == [
        "jobs ('state', 'createdAt'): a composite query with no index"
    ]

    broken = copy.deepcopy(infra)
    grant = broken.resources[("google_cloud_run_service_iam_member", "status_page_invokers")]
    grant["member"] = "allAuthenticatedUsers"
    assert public_problems(broken) == [
        "google_cloud_run_service_iam_member.status_page_invokers: grants to allAuthenticatedUsers"
    ]
    assert trigger_problems(broken, entry_points()) == [
        "status_page: invoker must be granted once, to the group var.status_page_invokers"
    ]
    broken = copy.deepcopy(infra)
    broken.resources[("google_project_iam_member", "status_page_writer")] = {
        "role": "roles/datastore.user",
        "member": "${google_service_account.status_page.member}",
    }
    assert reader_problems(broken) == [
        "the status page's account holds ['google_project_iam_member roles/datastore.user', "
        "'google_project_iam_member roles/datastore.viewer']"
    ]


def test_the_checkpoint_watch_query_covers_every_active_state():
    from shared.adapters.firestore.job_store import ACTIVE_STATES

    assert set(ACTIVE_STATES) == {s.value for s in JobState if not s.terminal}


def test_every_variable_and_local_is_declared_and_used(tmp_path):
    assert reference_problems() == []
    for path in INFRA.glob("*.tf"):
        (tmp_path / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    with (tmp_path / "extra.tf").open("w", encoding="utf-8") as extra:
        extra.write('variable "unused" {}\nlocals {\n  twice = var.undeclared\n}\n')
        extra.write('output "x" {\n  value = local.nowhere\n}\n')
    assert reference_problems(tmp_path) == [
        "var.unused: declared, never used",
        "var.undeclared: used, never declared",
        "local.twice: declared, never used",
        "local.nowhere: used, never declared",
    ]


def test_requests_and_checkpoints_never_share_trust(infra):
    assert trust_problems(infra) == []


def test_no_grant_reaches_further_than_its_use(infra):
    assert grant_problems(infra) == []


def test_quota_information_is_read_by_the_tick_alone(infra):
    broken = copy.deepcopy(infra)
    grant = broken.resources[("google_project_iam_member", "tick_quota_viewer")]
    grant["role"] = "roles/cloudquotas.admin"
    assert [p for p in grant_problems(broken) if "quota" in p] == [
        "quota information is granted as [('roles/cloudquotas.admin', "
        "'${google_service_account.function[\"handle_scheduler_tick\"].member}')]"
    ]
    del broken.resources[("google_project_iam_member", "tick_quota_viewer")]
    assert [p for p in grant_problems(broken) if "quota" in p] == [
        "quota information is granted as []"
    ]


def test_a_live_claim_never_uses_up_a_requests_deliveries(infra):
    assert delivery_problems(infra) == []
    requests = {"handle_job_request", "handle_upload"}
    # max_delivery_attempts = 5 is a valid value on its own, yet with the default claim TTL
    # and backoff a crash between create and record always dead-letters the request: the
    # precondition refuses it, on the request paths only.
    (validation,) = infra.variables["max_delivery_attempts"]["validation"]
    assert evaluate(validation["condition"], defaults(infra, max_delivery_attempts=5))
    verdicts = delivery_verdicts(infra, max_delivery_attempts=5)
    assert {path for path, ok in verdicts.items() if not ok} == requests
    # So does the backoff every path had before (10 s: 9 x 10 s = 90 s, the claim lives 600 s).
    verdicts = delivery_verdicts(infra, request_minimum_backoff_seconds=10)
    assert {path for path, ok in verdicts.items() if not ok} == requests
    (lifecycle,) = infra.resources[("google_pubsub_subscription", "push")]["lifecycle"]
    message = lifecycle["precondition"][0]["error_message"]
    assert "Raise max_delivery_attempts or request_minimum_backoff_seconds" in message
    # The condition is the model, wherever the three meet.
    grid = itertools.product(
        (5, 6, 9, 10, 11, 20, 100), (0, 10, 60, 66, 67, 75, 600), (540, 600, 900)
    )
    for attempts, backoff, ttl in grid:
        overrides = {"max_delivery_attempts": attempts, "request_minimum_backoff_seconds": backoff,
                     "claim_ttl_seconds": ttl}  # fmt: skip
        verdict = delivery_verdicts(infra, **overrides)["handle_job_request"]
        assert verdict == outlasts_claim(attempts, backoff, ttl), overrides


def test_the_trust_checks_fail_when_a_door_opens(infra):
    broken = copy.deepcopy(infra)
    broken.locals["checkpoint_readers"] += " ${local.upload_bucket_name}"
    broken.resources[("google_storage_bucket_iam_member", "trainer_writes_requests")] = {
        "bucket": UPLOADS,
        "role": "roles/storage.objectAdmin",
        "member": "serviceAccount:trainer@p.iam.gserviceaccount.com",
    }
    del broken.locals["function_env"]["FLEXJOBS_REQUEST_BUCKET"]
    broken.resources[("google_storage_notification", "checkpoints")]["topic"] = (
        "${google_pubsub_topic.upload_notifications.id}"
    )
    assert trust_problems(broken) == [
        "FLEXJOBS_REQUEST_BUCKET: not the request bucket's name",
        "the request bucket grants roles/storage.objectAdmin to "
        "serviceAccount:trainer@p.iam.gserviceaccount.com (trainer_writes_requests)",
        "checkpoint_readers: reads checkpoints in the request bucket",
        "google_storage_notification.checkpoints: not OBJECT_FINALIZE, JSON_API_V1 from "
        "${each.value} to ${google_pubsub_topic.checkpoint_events[0].id}",
    ]
    broken = copy.deepcopy(infra)
    broken.locals["push_paths"] = broken.locals["push_paths"].replace(
        "one(google_pubsub_topic.checkpoint_events[*].id)",
        "one(google_pubsub_topic.requests[*].id)",
    )
    assert trust_problems(broken) == [
        "handle_upload: checkpoint events are not pushed to it (with a dead-letter topic)"
    ]

    broken = copy.deepcopy(infra)
    broken.resources[("google_project_iam_member", "storage_agent_publisher")] = {
        "project": "${var.project_id}",
        "role": "roles/pubsub.publisher",
        "member": "${local.storage_service_agent}",
    }
    del broken.resources[("google_project_iam_member", "build_gcf_sources_reader")]["condition"]
    broken.resources[("google_project_iam_member", "build_editor")] = {
        "project": "${var.project_id}",
        "role": "roles/editor",
        "member": "${google_service_account.build.member}",
    }
    broken.resources[("google_service_account_key", "build")] = {
        "service_account_id": "${google_service_account.build.name}"
    }
    assert grant_problems(broken) == [
        "google_project_iam_member.build_editor: roles/editor",
        "google_service_account_key.build: a key",
        "google_project_iam_member.build_gcf_sources_reader: roles/storage.objectViewer on "
        "every bucket of the project",
        "google_project_iam_member.storage_agent_publisher: publisher on every topic of the "
        "project",
        "build_gcf_sources_reader: condition None is not that one bucket and its objects",
    ]
    broken = copy.deepcopy(infra)
    (condition,) = broken.resources[("google_project_iam_member", "build_gcf_sources_reader")][
        "condition"
    ]
    condition["expression"] = 'resource.name.startsWith("projects/_/buckets/gcf-v2-sources-")'
    assert grant_problems(broken) == [
        "build_gcf_sources_reader: condition 'resource.name.startsWith(\"projects/_/buckets/"
        "gcf-v2-sources-\")' is not that one bucket and its objects"
    ]

    broken = copy.deepcopy(infra)
    broken.resources[("google_pubsub_subscription", "push")]["retry_policy"][0][
        "minimum_backoff"
    ] = "10s"
    broken.locals["push_paths"] = broken.locals["push_paths"].replace(
        "minimum_backoff = var.request_minimum_backoff_seconds", "minimum_backoff = 10"
    )
    assert delivery_problems(broken) == [
        "retry_policy.minimum_backoff: not the push path's minimum_backoff",
        "handle_job_request: the defaults fail the precondition",
        "handle_upload: the defaults fail the precondition",
    ]
    with pytest.raises(ValueError, match="cannot evaluate"):
        evaluate("${max(var.a, 1) > 0}", {"var.a": 1})


# --- The four event functions: one for_each resource, the plan of the four before ------------

#: What the four google_cloudfunctions2_function resources of infra/functions.tf set before
#: they became google_cloudfunctions2_function.function (for_each over local.functions), as
#: python-hcl2 read them, flattened to paths (a block is one segment). Their name and
#: timeout_seconds read local.functions then too: these are the values it held.
BEFORE_SHARED: dict[str, Any] = {
    "location": "${var.region}",
    "build_config.runtime": "python311",
    "build_config.service_account": "${google_service_account.build.id}",
    "build_config.docker_repository": "${google_artifact_registry_repository.functions.id}",
    "build_config.source.storage_source.bucket": "${google_storage_bucket.source.name}",
    "build_config.source.storage_source.object": "${google_storage_bucket_object.source.name}",
    "service_config.ingress_settings": "ALLOW_INTERNAL_ONLY",
    "service_config.all_traffic_on_latest_revision": True,
    "lifecycle.precondition.condition": "${var.claim_ttl_seconds >= local.longest_timeout}",
    "depends_on": ["${time_sleep.iam_propagation}"],
}
#: And each one's own (those of service_config and of the dynamic block grouped under them).
BEFORE_OWN: dict[str, dict[str, Any]] = {
    "handle_job_request": {
        "name": "flexjobs-handle-job-request",
        "description": "flexjobs: submit one job request from ${var.requests_topic}"
        " (or cancel one).",
        "build_config.entry_point": "handle_job_request",
        "service_config": {
            "timeout_seconds": 300,
            "available_memory": "${local.memory.handle_job_request}",
            "max_instance_count": "${local.max_instances.handle_job_request}",
            "max_instance_request_concurrency": 1,
            "service_account_email": "${google_service_account.function"
            '["handle_job_request"].email}',
            "environment_variables": "${local.function_env}",
        },
    },
    "handle_job_event": {
        "name": "flexjobs-handle-job-event",
        "description": "flexjobs: re-read the job a state hint on ${var.events_topic} names.",
        "build_config.entry_point": "handle_job_event",
        "service_config": {
            "timeout_seconds": 300,
            "available_memory": "${local.memory.handle_job_event}",
            "available_cpu": "1",
            "max_instance_count": "${local.max_instances.handle_job_event}",
            "max_instance_request_concurrency": 20,
            "service_account_email": '${google_service_account.function["handle_job_event"].email}',
            "environment_variables": '${merge(local.function_env, {THREADS = "20"})}',
        },
    },
    "handle_scheduler_tick": {
        "name": "flexjobs-handle-scheduler-tick",
        "description": "flexjobs: reconcile every active job against Vertex AI, once a minute"
        " (${var.scheduler_ticks_topic}).",
        "build_config.entry_point": "handle_scheduler_tick",
        "service_config": {
            "timeout_seconds": 540,
            "available_memory": "${local.memory.handle_scheduler_tick}",
            "max_instance_count": "${local.max_instances.handle_scheduler_tick}",
            "max_instance_request_concurrency": 1,
            "service_account_email": "${google_service_account.function"
            '["handle_scheduler_tick"].email}',
            "environment_variables": "${local.function_env}",
        },
    },
    "handle_upload": {
        "name": "flexjobs-handle-upload",
        "description": "flexjobs: submit request files from gs://${local.upload_bucket_name};"
        " record checkpoint progress from the checkpoint buckets.",
        "build_config.entry_point": "handle_upload",
        "service_config": {
            "timeout_seconds": 540,
            "available_memory": "${local.memory.handle_upload}",
            "max_instance_count": "${local.max_instances.handle_upload}",
            "max_instance_request_concurrency": 1,
            "service_account_email": '${google_service_account.function["handle_upload"].email}',
            "environment_variables": "${local.function_env}",
        },
        "dynamic.event_trigger": {
            "for_each": '${var.upload_delivery == "eventarc" ? [1] : []}',
            "content.event_type": "google.cloud.pubsub.topic.v1.messagePublished",
            "content.pubsub_topic": "${google_pubsub_topic.upload_notifications.id}",
            "content.retry_policy": "RETRY_POLICY_RETRY",
            "content.trigger_region": "${var.region}",
            "content.service_account_email": "${one(google_service_account.upload_trigger"
            "[*].email)}",
        },
    },
}
#: The values variables.tf's validation allows upload_delivery.
UPLOAD_DELIVERY = ("eventarc", "notification")


def flatten(body: Any, prefix: str = "") -> dict[str, Any]:
    """A resource body as paths to its values; a block (a list of one object) is one segment."""
    if isinstance(body, list) and len(body) == 1 and isinstance(body[0], dict):
        body = body[0]
    if not isinstance(body, dict):
        return {prefix: body}
    found: dict[str, Any] = {}
    for key, value in body.items():
        found.update(flatten(value, f"{prefix}.{key}" if prefix else key))
    return found


def plan_view(infra: Infra, paths: dict[str, Any]) -> dict[str, Any]:
    """A function's flattened body, with what reads the same to Terraform written one way:

    * an argument set to null is one left out (Terraform treats null as omission);
    * ``local.NAME["key"]`` is ``local.NAME.key``, which is its value when the local is a map
      written out (not one computed, as ``local.memory``); ``merge(X, {})`` is ``X``;
    * a dynamic block's ``for_each`` is the upload_delivery values in which it yields its
      block, and a block it never yields is no block;
    * a precondition's error message is left out: it is no argument of the resource, only
      the text of a refused plan.
    """
    view: dict[str, Any] = {}
    for path, given in paths.items():
        if given is None or path.endswith(".error_message"):
            continue
        value = given
        if isinstance(value, str):
            value = re.sub(r'\b(local\.\w+)\["(\w+)"\]', r"\1.\2", value)
            value = re.sub(r"^\$\{merge\((.+), \{\}\)\}$", r"${\1}", value)
            entry = re.fullmatch(r"\$\{local\.(\w+)\.(\w+)\}", value)
            table = infra.locals.get(entry.group(1)) if entry else None
            if entry and isinstance(table, dict):
                value = table[entry.group(2)]
        if path.startswith("dynamic.") and path.endswith(".for_each"):
            value = tuple(
                mode
                for mode in UPLOAD_DELIVERY
                if yields_block(infra, str(given), upload_delivery=mode)
            )
        view[path] = value
    for path in [p for p, v in view.items() if p.startswith("dynamic.") and v == ()]:
        block = path.removesuffix("for_each")
        view = {p: v for p, v in view.items() if not p.startswith(block)}
    return view


BEFORE = {entry: {**BEFORE_SHARED, **flatten(own)} for entry, own in BEFORE_OWN.items()}


def test_the_four_functions_plan_as_the_four_resources_did(infra):
    """google_cloudfunctions2_function.function, expanded per key of local.functions, sets
    exactly what each of the four resources it replaced set."""
    now = {
        entry: plan_view(infra, flatten(body))
        for entry, body in deployed(infra).items()
        if entry != "status_page"
    }
    before = {entry: plan_view(infra, {**BEFORE_SHARED, **own}) for entry, own in BEFORE.items()}
    assert set(now) == set(before)
    for entry, was in before.items():
        assert now[entry] == was, entry
    assert before["handle_upload"]["dynamic.event_trigger.for_each"] == ("eventarc",)
    assert not any(k.startswith("dynamic.") for k in before["handle_job_request"])
    # The check sees a setting of one function that moved.
    broken = copy.deepcopy(infra)
    broken.locals["functions"]["handle_job_event"]["framework_env"] = {}
    view = plan_view(broken, flatten(deployed(broken)["handle_job_event"]))
    assert view["service_config.environment_variables"] == "${local.function_env}"
    assert view != before["handle_job_event"]


def test_every_old_function_address_moves_to_its_instance(infra):
    """An installation applied before the for_each keeps its four functions: a moved block
    from each old address to its instance, so the plan neither destroys nor creates one."""
    moves = {(m["from"], m["to"]) for m in infra.moved}
    wanted = {
        (
            f"${{google_cloudfunctions2_function.{entry}}}",
            f'${{google_cloudfunctions2_function.function["{entry}"]}}',
        )
        for entry in BEFORE
    }
    assert wanted <= moves
    instances = infra.instances("google_cloudfunctions2_function")
    assert {f'function["{entry}"]' for entry in BEFORE} <= set(instances)
