"""The docs pages as the drift tests read them: one section of a page of ``docs/``, by heading.

A drift test finds its text by the heading that holds it, in the page that holds it, so text
that moves to another page or under another heading fails the test instead of passing on a
stray mention elsewhere.

Examples:
    >>> text = "# Page\\nintro\\n## A\\n| `X` | 1 |\\n```\\n# no heading\\n```\\n"
    >>> text += "### A.1\\nsub\\n## B\\n"
    >>> section_of(text, "A", page="p.md").splitlines()
    ['| `X` | 1 |', '```', '# no heading', '```', '### A.1', 'sub']
    >>> first_cells(section_of(text, "A", page="p.md"))
    ['`X`']
    >>> section_of(text, "C", page="p.md")
    Traceback (most recent call last):
    ...
    LookupError: p.md has no heading 'C' (its headings: Page, A, A.1, B)
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"

_HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$")


def _headings(lines: list[str]) -> list[tuple[int, int, str]]:
    """(line index, level, title) of every heading outside fenced code."""
    found, fenced = [], False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            found.append((i, len(match.group(1)), match.group(2)))
    return found


def section_of(text: str, heading: str, *, page: str) -> str:
    """The text under the heading titled exactly ``heading``, up to the next heading of the
    same or a higher level (its subsections included). Exactly one such heading must exist."""
    lines = text.splitlines()
    headings = _headings(lines)
    hits = [(i, level) for i, level, title in headings if title == heading]
    if len(hits) != 1:
        titles = ", ".join(title for _, _, title in headings)
        many = "more than one" if hits else "no"
        raise LookupError(f"{page} has {many} heading {heading!r} (its headings: {titles})")
    start, level = hits[0]
    end = next((i for i, lvl, _ in headings if i > start and lvl <= level), len(lines))
    return "\n".join(lines[start + 1 : end]) + "\n"


def section(page: str, heading: str) -> str:
    """:func:`section_of` a page of ``docs/`` (``"contract.md"``)."""
    return section_of((DOCS / page).read_text(encoding="utf-8"), heading, page=page)


def first_cells(text: str) -> list[str]:
    """The first cell of every body row of the Markdown tables in ``text`` (a header row is
    the row just above a separator row, and is left out)."""
    lines = text.splitlines()
    separator = re.compile(r"^\|[\s:|-]+\|$")
    cells = []
    for i, line in enumerate(lines):
        is_header = i + 1 < len(lines) and separator.match(lines[i + 1]) is not None
        if line.startswith("|") and not separator.match(line) and not is_header:
            cells.append(line.split("|")[1].strip())
    return cells
