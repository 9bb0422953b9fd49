"""Every relative link in the README and the guides resolves: the file exists and, where the
link names an anchor, the page has a heading that makes it (GitHub's rule: lower case,
punctuation dropped, spaces as hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    out, fence = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            out.add(anchor(line.lstrip("#")))
    return out


def test_the_anchor_rule():
    assert anchor("DC2 in simulated time (`ina experiment dc2 --sim`)") == (
        "dc2-in-simulated-time-ina-experiment-dc2---sim"
    )


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page):
    bad = []
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code is not links
    text = re.sub(r"`[^`\n]*`", "", text)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no {path}")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            bad.append(f"{target}: no heading makes #{frag}")
    assert not bad, f"{page.name}: " + "; ".join(bad)
