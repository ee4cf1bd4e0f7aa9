"""Every relative link and ``#anchor`` in README.md, CHANGELOG.md and docs/*.md resolves.

A link ``[text](target)`` (an image's too) outside code: the file it names
must exist, relative to the page; its ``#anchor`` (or a bare ``#anchor`` on
the page) must be the slug of a heading in that file, as GitHub makes them:
the heading's text (code spans and links read as their text) lower-cased,
every character but letters, digits, ``_``, ``-`` and spaces dropped, spaces
as ``-``, and a repeated slug numbered ``-1``, ``-2``... Links with a scheme
(``https:``, ``mailto:``) are left to their sites.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
from helpers import ROOT

PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md")])

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def prose(text: str) -> str:
    """``text`` without fenced code blocks (a ``# comment`` in one is no heading, a ``[x](y)`` no link)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (before numbering repeats)."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link reads as its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found = set()
    for match in HEADING.finditer(prose(page.read_text(encoding="utf-8"))):
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def broken_links(page: Path) -> list[str]:
    """The links of ``page`` that do not resolve, each with why."""
    text = CODE_SPAN.sub("", prose(page.read_text(encoding="utf-8")))
    broken = []
    for match in LINK.finditer(text):
        target = match.group(1)
        if SCHEME.match(target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked.relative_to(ROOT) if linked.is_relative_to(ROOT) else linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading in {linked.name} has the anchor #{anchor}")
    return broken


@pytest.mark.unit
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_on_the_page_resolves(page: Path) -> None:
    broken = broken_links(page)
    assert not broken, "\n".join(broken)


@pytest.mark.unit
def test_the_slugs_follow_githubs_rules_and_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    assert slug("`lock`: pin a config's servers") == "lock-pin-a-configs-servers"
    assert slug("Sessions: shared, per-session or per-principal") == "sessions-shared-per-session-or-per-principal"
    assert slug("What `MCP(..., defer=True)` does [see](x.md) _now_") == "what-mcp-defertrue-does-see-_now_"
    (tmp_path / "other.md").write_text("# Other\n\n## Twice\n\n## Twice\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n```sh\n# not a heading\n[not](a-link.md)\n```\n\n"
        "[ok](other.md#twice-1) [ok](#page) `[code](gone.md)` [site](https://example.com/x#y)\n"
        "[file](gone.md) [anchor](other.md#thrice) [here](#not-a-heading) ![image](pic.png)\n",
        encoding="utf-8",
    )
    assert [b.split(":")[0] for b in broken_links(page)] == [
        "gone.md",
        "other.md#thrice",
        "#not-a-heading",
        "pic.png",
    ]
