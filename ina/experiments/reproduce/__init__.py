"""`ina reproduce NAME`: one seed paper's headline experiment, re-run in simulated time in its
stated setting, with the paper's claim printed beside ina's number.

Each reproduction is a module here with ``NAME`` (the command's name), ``TITLE`` (the paper),
``add_arguments(p)`` for its own options and ``run(args) -> Report``. Every model parameter
(device, links, batch sizes, densities) comes from data sheets and the paper's stated setting
and is fixed before comparing: nothing is tuned to match a claim.

Every claim gets its verdict from one rule, `verdict`: ina's number against the paper's, like
for like (the same quantity, in the same setting as far as ina holds it).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

VERDICTS = ("reproduced", "exceeds", "direction only", "not reproduced")
# ina's number over the paper's: within this band a claim is reproduced (issue 45)
BAND = (0.8, 1.25)
# what the `why` of an "exceeds" verdict says, before naming the cost the model misses
MISSES = "the model misses a cost"
# a speed-up is "the same direction" as a paper's only when ina's is faster by more than 5 %
NO_EFFECT = 1.05


def verdict(ina: float, paper: float, same_direction: bool, like_for_like: bool = True) -> str:
    """The verdict of one claim: ``ina`` and ``paper`` are the same quantity (a speed-up, a
    scaling factor, 1.0 for "yes" and 0.0 for "no").

    - ``reproduced``: ``ina / paper`` within `BAND`, [0.8, 1.25];
    - ``exceeds``: above 1.25x the paper's: ina is more optimistic than a measurement, so the
      model misses a cost, which the claim's ``why`` must name (`MISSES`);
    - below 0.8x: ``direction only`` when ``same_direction`` (the effect has the paper's
      sign, e.g. a speed-up above `NO_EFFECT`), else ``not reproduced``;
    - a number ina could not measure (NaN): ``not reproduced``;
    - not ``like_for_like`` (ina's setting differs in what the number rests on, e.g. an
      assumed density where the paper measured one): at most ``direction only``.
    """
    if math.isnan(ina) or math.isnan(paper) or paper <= 0:
        return "not reproduced"
    if not like_for_like:
        return "direction only" if same_direction else "not reproduced"
    ratio = ina / paper
    if ratio > BAND[1]:
        return "exceeds"
    if ratio >= BAND[0]:
        return "reproduced"
    return "direction only" if same_direction else "not reproduced"


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
        if self.verdict == "exceeds" and MISSES not in self.why:
            raise ValueError(f"an 'exceeds' verdict's why says {MISSES!r} and names the cost")


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
