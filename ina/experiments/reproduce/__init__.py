"""`ina reproduce NAME`: one seed paper's headline experiment, re-run in simulated time in its
stated setting, with the paper's claim printed beside ina's number.

Each reproduction is a module here with ``NAME`` (the command's name), ``TITLE`` (the paper),
``add_arguments(p)`` for its own options and ``run(args) -> Report``. Every model parameter
(device, links, batch sizes, densities) comes from data sheets and the paper's stated setting
and is fixed before comparing: nothing is tuned to match a claim.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

VERDICTS = ("reproduced", "direction only", "not reproduced")


@dataclass(frozen=True)
class Claim:
    """One claim of the paper against ina's measurement."""

    claim: str  # the paper's words, shortened: "up to 6.33x aggregation throughput"
    paper: str  # the paper's number, as it states it
    ina: str  # ina's number, measured by this run
    verdict: str  # one of VERDICTS
    why: str  # the measured reason for the verdict, or where and why the two differ

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r}; one of {VERDICTS}")


@dataclass
class Report:
    """What a reproduction prints and writes: its setting, how each part of it was
    approximated, the measured tables (markdown) and the claims."""

    name: str
    title: str
    command: str
    setting: list[str] = field(default_factory=list)  # "8 V100s (data sheet), PCIe 3.0 x16 = ..."
    approximations: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)  # markdown tables, each with its caption
    claims: list[Claim] = field(default_factory=list)
    full_run: str = ""  # how long the full run takes, when --quick was used

    def markdown(self) -> str:
        lines = [f"## `{self.name}`: {self.title}", "", f"Command: `{self.command}`", ""]
        if self.setting:
            lines += ["Setting:", *(f"- {s}" for s in self.setting), ""]
        if self.approximations:
            lines += [
                "How the setting is approximated:",
                *(f"- {s}" for s in self.approximations),
                "",
            ]
        for t in self.tables:
            lines += [t, ""]
        lines += ["| claim | paper | ina | verdict | why |", "|---|---|---|---|---|"]
        lines += [
            f"| {c.claim} | {c.paper} | {c.ina} | {c.verdict} | {c.why} |" for c in self.claims
        ]
        if self.full_run:
            lines += ["", self.full_run]
        return "\n".join(lines) + "\n"

    def write(self, out: Path) -> list[Path]:
        out.mkdir(parents=True, exist_ok=True)
        md, js = out / "report.md", out / "report.json"
        md.write_text(self.markdown())
        js.write_text(json.dumps(asdict(self), indent=2) + "\n")
        return [md, js]
