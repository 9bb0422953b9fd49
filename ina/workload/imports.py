"""Workloads from files: the reader is picked by the file's content, not its name.

- a JSON object with ``traceEvents``: a torch.profiler (Kineto) Chrome trace of one training
  step, read by `ina.workload.kineto`;
- text whose first line starts with an upper-case policy name (``HYBRID_TRANSFORMER...``,
  ``MICRO``) and whose second is a row count: a SimAI/AICB workload file, read by
  `ina.workload.aicb`.

`EXAMPLES` names the files shipped in ``ina/data/workloads/`` (made by
``python -m ina.workload.examples``), so that ``--workload example-aicb`` works anywhere.
"""

from __future__ import annotations

import re
from pathlib import Path

from ina.workload import aicb, kineto
from ina.workload.layers import Workload

DATA = Path(__file__).resolve().parent.parent / "data" / "workloads"


def _examples() -> dict[str, Path]:
    trace = DATA / "resnet-ddp-gloo.trace.json"
    # the AICB example is GPT-2 when the zoo made it, the trace's ResNet otherwise
    aicb_file = next(iter(sorted(DATA.glob("*.aicb.txt"))), DATA / "gpt2-bf16.aicb.txt")
    return {"example-kineto": trace, "example-aicb": aicb_file}


EXAMPLES: dict[str, Path] = _examples()


def load(path: str | Path, precision: str | None = None) -> Workload:
    """The workload in ``path`` (or a name in `EXAMPLES`); ``precision``: the bytes per
    gradient value of an AICB file, the precision of a trace (None: the file's own)."""
    path = EXAMPLES.get(str(path), Path(path))
    try:
        head = path.read_bytes()[:4096].decode("utf-8", "replace")
    except OSError as e:
        raise ValueError(f"cannot read workload file {path}: {e.strerror}") from None
    if head.lstrip().startswith(("{", "[")):
        trace = kineto.read_trace(path)
        if "traceEvents" not in trace:
            raise ValueError(
                f"{path}: field traceEvents: missing: a JSON file that is not a Kineto trace"
            )
        return kineto.from_trace(trace, str(path), precision=precision)
    lines = head.splitlines()
    if len(lines) >= 2 and re.match(r"[A-Z][A-Z_0-9]*(\s|$)", lines[0]):
        return aicb.load(path, precision)
    raise ValueError(
        f"{path}: unknown workload format: neither a Kineto trace (JSON with traceEvents) "
        "nor an AICB/SimAI workload file (a policy line, then a row count)"
    )
