"""A step model's timeline as a Chrome trace (the JSON format `torch.profiler` writes; it opens
in Perfetto and chrome://tracing) and as a picture.

Each worker is a process (``pid``); its compute stream (forward, backward per layer, the
optimizer) and its communication stream (codec, each bucket's allreduce) are two threads
(``tid``). Times are microseconds of simulated time.
"""

from __future__ import annotations

import json
from pathlib import Path

STREAMS = {"compute": 0, "comm": 1}


def chrome_trace(timelines, meta: dict) -> dict:
    """The trace's JSON object: complete ("X") events plus the streams' names."""
    events = []
    for tl in timelines:
        for stream, tid in STREAMS.items():
            events.append(
                {"ph": "M", "name": "thread_name", "pid": tl.worker, "tid": tid,
                 "args": {"name": stream}}
            )  # fmt: skip
        events.append(
            {"ph": "M", "name": "process_name", "pid": tl.worker, "tid": 0,
             "args": {"name": f"worker {tl.worker}"}}
        )  # fmt: skip
        for stream, name, start, end in tl.rows:
            events.append(
                {"ph": "X", "name": name, "cat": stream, "pid": tl.worker,
                 "tid": STREAMS[stream], "ts": start * 1e6, "dur": (end - start) * 1e6}
            )  # fmt: skip
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": meta}


def write_chrome_trace(path: Path, timelines, meta: dict) -> None:
    path.write_text(json.dumps(chrome_trace(timelines, meta)) + "\n")


def draw(path: Path, timelines, title: str) -> None:
    """The first worker's two streams over the run, one bar per event, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl = timelines[0]
    colors = {"forward": "#4c72b0", "backward": "#55a868", "optimizer": "#8172b2",
              "codec": "#dd8452", "comm": "#c44e52"}  # fmt: skip
    fig, ax = plt.subplots(figsize=(10, 2.6), dpi=120)
    for stream, name, start, end in tl.rows:
        kind = (
            name.split()[0]
            if stream == "compute"
            else ("codec" if name.startswith("codec") else "comm")
        )
        y = 1 if stream == "compute" else 0
        ax.broken_barh([(start * 1e3, (end - start) * 1e3)], (y - 0.35, 0.7),
                       facecolors=colors.get(kind, "#999999"), edgecolor="white", linewidth=0.3)  # fmt: skip
    ax.set_yticks([0, 1], ["communication", "compute"])
    ax.set_xlabel("simulated time (ms)")
    ax.set_title(title, fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    labels = ["forward", "backward", "optimizer", "codec", "allreduce"]
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=5,
              fontsize=8, frameon=False)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
