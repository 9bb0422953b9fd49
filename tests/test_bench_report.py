"""`ina bench report` (docs/benchmarks.md, `make bench-report`): one fast section written into a
page of its own, with the machine, the date, its commands and a table; the sections it did not
run are kept from the page it rewrites. Nothing here asserts a measured value."""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

import pytest

from ina.bench import report
from ina.cli import main as ina_main

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_one_section_has_the_machine_the_date_the_command_and_a_table(tmp_path):
    out = tmp_path / "benchmarks.md"
    out.write_text(report.section(report.BY_NAME["zoo"], "kept from an earlier page") + "\n")
    r = subprocess.run(
        [sys.executable, "-m", "ina", "bench", "report", "--only", "gpt2", "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    page = out.read_text()
    sections = report.sections_of(page)
    assert list(sections) == [e.name for e in report.ENTRIES]  # every section, in order
    gpt2 = sections["gpt2"]
    assert report.machine() in gpt2 and "cores" in report.machine()
    assert datetime.date.today().isoformat() in gpt2
    assert "ina sim train --workload gpt2" in gpt2
    assert "| algorithm | iteration ms |" in gpt2 and "\n| ina | " in gpt2 and "\n| nccl | " in gpt2
    assert "kept from an earlier page" in sections["zoo"]  # not rerun: kept as it was
    assert "Not measured yet" in sections["switch"]


def test_unknown_section_is_a_usage_error(capsys, tmp_path):
    assert ina_main(["bench", "report", "--only", "nope", "--out", str(tmp_path / "b.md")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ina bench report: ") and "known: zoo" in err


def test_the_committed_page_has_every_section_and_is_not_in_bench_all():
    from ina.bench import cli as bench_cli

    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert list(report.sections_of(page)) == [e.name for e in report.ENTRIES]
    assert "report" not in bench_cli.ALL
