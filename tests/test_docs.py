"""The README and the docs/ pages hold together: every relative link points at a file that exists
(and at a heading of it, where it names one), and the README's table of contents reaches every page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .helpers import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def unfenced(text: str) -> str:
    """The text outside fenced code blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code, where links are links."""
    return re.sub(r"`[^`\n]*`", "", unfenced(text))


def relative_links(page: Path) -> list[str]:
    targets = LINK.findall(prose(page.read_text(encoding="utf-8")))
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces as '-',
    a repeated one numbered (`-1`, `-2`).

    >>> sorted(anchors(ROOT / "docs" / "images.md"))[:2]
    ['building-images', 'gpu-stacks-cuda-from-pypis-nvidia-wheels']
    """
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} +(.+?) *$", unfenced(page.read_text(encoding="utf-8")), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_points_at_a_file_and_heading_that_exist(page: Path):
    broken = []
    for link in relative_links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{link}: no heading #{anchor} in {target.relative_to(ROOT)}")
    assert broken == [], "\n".join(broken)


def test_the_readmes_table_of_contents_links_every_docs_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    contents = readme[readme.index("## Contents") : readme.index("\n## ", readme.index("## Contents") + 1)]
    linked = {(ROOT / link.partition("#")[0]).resolve() for link in LINK.findall(contents)}
    unlinked = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").glob("*.md")) if p not in linked]
    assert unlinked == [], f"link these from the README's Contents: {unlinked}"
