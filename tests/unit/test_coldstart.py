"""Cold start stays cheap (issue 41): what importing the entry points loads, in a fresh process.

Every new instance imports functions/main.py before its first delivery, so that import
registers the entry points and loads nothing an entry point imports on its first call. The
figures are ``./dev bench coldstart``'s; these tests guard the laziness, not a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.coldstart import Figure, round_order, verdict

REPO = Path(__file__).resolve().parents[2]

#: What no import of the module below may load: the clients, gRPC, the validation's models
#: and the YAML and template engines.
HEAVY = (
    "google.cloud.aiplatform",
    "google.cloud.aiplatform_v1",
    "google.cloud.firestore_v1",
    "google.cloud.pubsub_v1",
    "google.cloud.storage",
    "google.api_core",
    "grpc",
    "pydantic",
    "yaml",
)

#: The modules functions/main.py may add to functions-framework's (which the host process
#: has loaded before it loads the module): itself and the acknowledgement policy.
MAIN_ADDS = {
    "functions",
    "functions.main",
    "shared",
    "shared.ingress",
    "shared.ingress.acknowledgement",
    "shared.kernel",
    "shared.kernel.errors",
    "shared.kernel.logs",
}


def loaded_by(module: str, first: str = "") -> dict[str, list[str]]:
    """In a fresh interpreter: import ``first``, then ``module``; every module loaded in all,
    and those ``module`` added."""
    code = (
        "import importlib, json, sys\n"
        f"if {first!r}: importlib.import_module({first!r})\n"
        "before = set(sys.modules)\n"
        f"importlib.import_module({module!r})\n"
        "added = sorted(set(sys.modules) - before)\n"
        "print(json.dumps({'all': sorted(sys.modules), 'added': added}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    result: dict[str, list[str]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def heavy_in(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(f"{h}.") for h in HEAVY)]


def test_importing_main_adds_only_itself_and_the_acknowledgement_policy() -> None:
    loaded = loaded_by("functions.main", first="functions_framework")

    assert set(loaded["added"]) <= MAIN_ADDS, sorted(set(loaded["added"]) - MAIN_ADDS)
    assert heavy_in(loaded["all"]) == []


def test_main_registers_every_entry_point_at_import_with_its_signature() -> None:
    # The registered names are the deployment's contract (infra/ names them as entry points).
    code = (
        "import json, functions.main\n"
        "from functions_framework import _function_registry as r\n"
        "print(json.dumps(r.REGISTRY_MAP))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )

    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "handle_job_request": "cloudevent",
        "handle_job_event": "cloudevent",
        "handle_scheduler_tick": "cloudevent",
        "handle_upload": "cloudevent",
        "status_page": "http",
    }


def test_the_bootstrap_imports_no_context_and_no_adapter() -> None:
    added = loaded_by("shared.bootstrap")["added"]

    assert [m for m in added if m.startswith(("shared.app", "shared.adapters"))] == []
    assert [m for m in added if m.startswith(("shared.domain", "shared.status"))] == []
    assert heavy_in(added) == []


@pytest.mark.parametrize("module", ["shared.app.context", "shared.app.ports"])
def test_contexts_and_ports_import_their_types_only_for_type_checking(module: str) -> None:
    added = loaded_by(module)["added"]

    not_needed = (
        "shared.domain.admission",
        "shared.domain.decisions.deploy_model",
        "shared.app.repository",
        "shared.adapters",
        "google.cloud",
        "grpc",
    )
    assert [m for m in added if m.startswith(not_needed)] == []


def test_the_benchmark_alternates_and_holds_each_figure_to_its_target() -> None:
    assert round_order(["sdk", "main"], 0) == ["sdk", "main"]
    assert round_order(["sdk", "main"], 1) == ["main", "sdk"]
    figure = Figure("x", import_s=0.1, deliver_s=0.2, maxrss_mib=1.0, gapic=False, ratio=0.3)
    assert figure.total_s == pytest.approx(0.3)
    assert (verdict(0.15), verdict(0.16)) == ("PASS", "FAIL")
