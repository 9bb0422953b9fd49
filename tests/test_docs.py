"""What a user reads first: files the docs name exist, the example jobs file works as the
README describes it, and ``ina switch --help`` shows the defaults."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ina.cli import main as ina_main
from ina.switch_model.tables import load_jobs

REPO = Path(__file__).resolve().parent.parent
DOCS = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "bmv2_topologies/README.md",
]
SOURCES = [p for d in ("ina", "tests", "bmv2_topologies") for p in sorted((REPO / d).rglob("*.py"))]
# Documents by name (README.md, docs/p4.md), not outputs such as runs/x/summary.md
MD_NAME = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)?[A-Z][A-Z_-]*\.md|docs/[\w/-]+\.md)\b")
MD_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")  # [text](target)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _exists(name: str, where: Path) -> bool:
    return any((base / name).exists() for base in (where.parent, REPO, REPO / "docs"))


@pytest.mark.parametrize("path", DOCS + SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_document_a_doc_or_comment_names_is_in_the_repository(path):
    text = path.read_text()
    names = set(MD_NAME.findall(text))
    if path.suffix == ".md":
        links = MD_LINK.findall(FENCE.sub("", text))
        names |= {t for t in links if "://" not in t and not t.startswith("mailto:")}
    missing = sorted(n for n in names if not _exists(n, path))
    assert not missing, f"{path.relative_to(REPO)} names files that are not here: {missing}"


def test_the_example_jobs_file_is_the_one_the_readme_describes():
    readme = (REPO / "README.md").read_text()
    assert "examples/jobs.json" in readme
    (spec,) = load_jobs(REPO / "examples/jobs.json")
    assert spec.num_workers == len(spec.workers) == 2
    data = json.loads((REPO / "examples/jobs.json").read_text())
    job = data["jobs"][0]
    keys = set(job) | {k for w in job["workers"] for k in w}
    undescribed = sorted(k for k in keys if f"`{k}`" not in readme)
    assert not undescribed, f"README does not describe the jobs file's keys {undescribed}"


def test_switch_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit) as e:
        ina_main(["switch", "--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for default in ("default 47000", "default 127.0.0.1:9559", "default 256", "default 1024"):
        assert default in text, default


LI_CODE = "lihy0529/lossless_homomorphic_compression"


@pytest.mark.parametrize("path", DOCS + SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_what_we_say_li_et_al_do_cites_their_code(path):
    """A paragraph (or comment block) that compares us with Li et al.'s sizing margin or
    their number of rounds must name the public code it read that in: their paper's
    variants are not in that code, and its sketch is sized at n/10 cells."""
    if path == Path(__file__).resolve():
        return  # this docstring describes the rule
    for para in re.split(r"\n\s*(?:#\s*)?\n", path.read_text()):
        if "Li et al" in para and re.search(r"margin|one-round|round variant|all-reduces", para):
            assert LI_CODE in para.replace("\n", "").replace(" ", ""), para
