"""Drift between the docs pages and the code, each read in the page and under the heading that
holds it (tests/docs.py):

* the Contract's Environment table has a row for every variable the functions read, and no
  row for a FLEXJOBS_ variable they do not read;
* the Monitoring page's table of log lines names every event of ``shared.kernel.events`` with
  exactly the fields it declares;
* the README's tour draws the same event flow as the docs' home page;
* the README's quickstart is the two commands, and CI runs exactly its test command, which
  builds the docs with warnings as errors.

As in test_infra.py, each check returns the problems it finds, so the tests show it failing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

import pytest

from shared.kernel.config import ENV_VARS
from shared.kernel.events import FIELDS, Event
from shared.kernel.logs import BUILD_ENV
from tests.docs import REPO, first_cells, section, section_of

#: What the functions read from the environment, the contract's variables.
READ = (*ENV_VARS, BUILD_ENV)
#: Named in the contract's table and read by the Google clients themselves, not by flexjobs.
CLIENTS_READ = ("PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST", "STORAGE_EMULATOR_HOST")


def spans(cell: str) -> list[str]:
    """The code spans of a table cell: "`A`, `B` (or `C`)" → ["A", "B", "C"]."""
    return re.findall(r"`([^`]+)`", cell)


def env_problems(table: str, read: Iterable[str] = READ) -> list[str]:
    """Variables read with no row in the Environment table, and FLEXJOBS_ rows nothing reads."""
    documented = [name for cell in first_cells(table) for name in spans(cell)]
    problems = [f"{v}: read by the functions, no row in Environment" for v in read]
    problems = [p for p, v in zip(problems, read, strict=True) if v not in documented]
    problems += [
        f"{name}: has a row in Environment, but nothing reads it"
        for name in documented
        if name not in read and name not in CLIENTS_READ
    ]
    return problems


def event_rows(table: str) -> dict[str, set[str]]:
    """The Log lines table: event → the fields its row names."""
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 3 and spans(cells[0]) and not set(cells[0]) <= set("-: "):
            rows[spans(cells[0])[0]] = set(spans(cells[2]))
    return rows


def event_problems(table: str, fields: Mapping[Event, frozenset[str]] = FIELDS) -> list[str]:
    """Events and fields the code declares that the Log lines table does not say, or the
    other way round."""
    rows = event_rows(table)
    problems = [f"{e.value}: no row in Log lines" for e in fields if e.value not in rows]
    for event, declared in fields.items():
        documented = rows.get(event.value, declared)
        problems += [
            f"{event.value}: {f} is logged, not documented" for f in sorted(declared - documented)
        ]
        problems += [
            f"{event.value}: {f} is documented, never logged" for f in sorted(documented - declared)
        ]
    declared_events = {e.value for e in fields}
    problems += [
        f"{name}: documented, no such event" for name in rows if name not in declared_events
    ]
    return problems


@pytest.fixture(scope="module")
def environment() -> str:
    return section("contract.md", "Environment")


@pytest.fixture(scope="module")
def log_lines() -> str:
    return section("monitoring.md", "Log lines")


def test_every_variable_the_functions_read_is_in_the_contract(environment):
    assert env_problems(environment) == []


def test_the_environment_check_fails_when_either_side_drifts(environment):
    assert env_problems(environment, (*READ, "FLEXJOBS_NEW")) == [
        "FLEXJOBS_NEW: read by the functions, no row in Environment"
    ]
    dropped = tuple(v for v in READ if v != "FLEXJOBS_CLAIM_TTL_SECONDS")
    assert env_problems(environment, dropped) == [
        "FLEXJOBS_CLAIM_TTL_SECONDS: has a row in Environment, but nothing reads it"
    ]


def test_every_event_and_its_fields_are_in_the_monitoring_page(log_lines):
    assert event_rows(log_lines), "the Log lines section has no table of events"
    assert event_problems(log_lines) == []


def test_the_event_check_fails_when_either_side_drifts(log_lines):
    changed = dict(FIELDS)
    changed[Event.TICK_DONE] = frozenset({"changed", "failed", "watch", "recordsRead", "skipped"})
    changed[Event.JOB_REJECTED] = frozenset({"errors"})
    assert event_problems(log_lines, changed) == [
        "job.rejected: count is documented, never logged",
        "tick.done: skipped is logged, not documented",
    ]
    renamed = log_lines.replace("| `job.preempted` |", "| `job.reclaimed` |")
    assert event_problems(renamed) == [
        "job.preempted: no row in Log lines",
        "job.reclaimed: documented, no such event",
    ]


def test_a_section_is_found_by_its_heading_in_its_page():
    # Text that moved away from its heading is not found anywhere else on the page.
    with pytest.raises(LookupError, match=r"contract\.md has no heading 'Log lines'"):
        section("contract.md", "Log lines")
    text = "# P\n## Environment\n| `A` | x |\n## Next\n| `B` | y |\n"
    assert first_cells(section_of(text, "Environment", page="p.md")) == ["`A`"]


def flow(text: str, heading: str, page: str) -> str:
    """The event-flow drawing (the first fenced block) under ``heading``."""
    body = section_of(text, heading, page=page)
    match = re.search(r"```\n(.*?)```", body, re.S)
    assert match, f"{page}, {heading}: no drawing"
    return match.group(1)


def test_the_readme_tour_and_the_docs_home_draw_the_same_flow():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    home = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    assert flow(readme, "How events flow", "README.md") == flow(home, "How events flow", "index.md")


def test_ci_runs_the_readme_test_command_which_builds_the_docs_strictly():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    quickstart = section_of(readme, "Quickstart", page="README.md")
    commands = re.search(r"```\n(.*?)```", quickstart, re.S)
    assert commands, "README.md, Quickstart: no command block"
    assert [line.split()[0:2] for line in commands.group(1).splitlines()] == [
        ["./dev", "demo"],
        ["./dev", "test"],
    ]
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^exec \./dev test$", ci, re.M)
    dev = (REPO / "dev").read_text(encoding="utf-8")
    test_branch = re.search(r"^  test\)\n(.*?)^    ;;$", dev, re.S | re.M)
    assert test_branch and re.search(r"^    build_docs$", test_branch.group(1), re.M)
    build = re.search(r"^build_docs\(\) \{\n(.*?)^\}$", dev, re.S | re.M)
    assert build and "mkdocs build --strict" in build.group(1)
    # --quiet hides the warnings from mkdocs' count, and --strict then passes anything.
    assert "--quiet" not in build.group(1) and " -q" not in build.group(1)


def readme_link_problems(readme: str) -> list[str]:
    """The README's relative links (mkdocs checks the pages' own, not the README's) name files
    of the repository, and a link to a page's anchor names a heading of that page."""
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)\)", readme):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        if not (REPO / path).is_file():
            problems.append(f"{target}: no such file")
        elif anchor:
            titles = re.findall(r"^#+ (.+?)\s*$", (REPO / path).read_text(encoding="utf-8"), re.M)
            slugs = {
                re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", t).strip().lower()) for t in titles
            }
            if anchor not in slugs:
                problems.append(f"{target}: {path} has no such heading")
    return problems


def test_the_readme_links_resolve():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "](docs/" in readme
    assert readme_link_problems(readme) == []
    assert readme_link_problems("[a](docs/nope.md) [b](docs/deploy.md#nope) [c](https://x.y)") == [
        "docs/nope.md: no such file",
        "docs/deploy.md#nope: docs/deploy.md has no such heading",
    ]


# --- the glossary: every name it gives exists in the code ---------------------------------------

#: Where the names the glossary gives are defined.
CODE = ("shared", "flexjobs", "flexjobs_local", "functions")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PATH = re.compile(r"[\w./-]+\.(?:py|json|yaml)|[\w-]+(?:/[\w-]+)*/")


def defined_names(roots: Iterable[str] = CODE) -> set[str]:
    """Every class, function, method, assigned name, field and enum member under ``roots``."""
    import ast

    names: set[str] = set()
    for root in roots:
        for path in (REPO / root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(node.name)
                elif isinstance(node, ast.Assign):
                    names.update(t.id for t in node.targets if isinstance(t, ast.Name))
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    names.add(node.target.id)
    return names


def glossary_problems(table: str, names: set[str], exists: Callable[[str], bool]) -> list[str]:
    """Code spans of the glossary that name nothing: a name (or each part of a dotted one, or
    of a generic such as ``Written[Change, Stored]``) defined nowhere, or a path that exists
    neither under ``shared/`` nor at the top. Spans that are neither (a Firestore path with
    ``{id}``, a field such as ``lastReadAt``, which the records' decoders read by name) are
    checked as names only when they look like one defined in Python: CamelCase or snake_case
    with an underscore."""
    problems = []
    for line in table.splitlines():
        if not line.startswith("| ") or line.startswith("| name"):
            continue
        for span in spans(line):
            if "{" in span or " " in span.replace(", ", ","):
                continue
            if _PATH.fullmatch(span):
                if not exists(span):
                    problems.append(f"no such path: {span}")
                continue
            for part in _NAME.findall(span):
                pythonic = "_" in part or part[:1].isupper() or part in names
                if pythonic and part not in names and not part.isupper():
                    problems.append(f"no such name: {part} (in `{span}`)")
                if part.isupper() and len(part) > 1 and part not in names:
                    problems.append(f"no such constant or member: {part} (in `{span}`)")
    return problems


def _exists(path: str) -> bool:
    return (REPO / "shared" / path).exists() or (REPO / path).exists()


@pytest.fixture(scope="module")
def glossary():
    return section("layout.md", "Glossary")


def test_every_name_and_path_the_glossary_gives_exists(glossary):
    assert glossary_problems(glossary, defined_names(), _exists) == []


def test_the_glossary_check_fails_on_a_name_or_a_path_that_is_gone(glossary):
    table = glossary + "| gone | `NoSuchPort`, `no_such_step`, `app/nowhere.py`, `NO_SUCH` |\n"
    assert glossary_problems(table, defined_names(), _exists) == [
        "no such name: NoSuchPort (in `NoSuchPort`)",
        "no such name: no_such_step (in `no_such_step`)",
        "no such path: app/nowhere.py",
        "no such constant or member: NO_SUCH (in `NO_SUCH`)",
    ]
