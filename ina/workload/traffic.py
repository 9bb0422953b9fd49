"""What compression did in a training run, for its summary: the method with its arguments,
DC2's law and the delay profile it ran under, the density chosen over time, and the bytes a
worker sent against the float32 gradient. Shared by `ina train` on both clocks."""

from __future__ import annotations

import statistics


class Densities:
    """The density each step used (one rank's view: every rank agrees on it)."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def add(self, density: float) -> None:
        self.values.append(float(density))

    def summary(self) -> dict:
        v = self.values
        if not v:
            return {"density_mean": None, "density_min": None, "density_max": None}
        return {"density_mean": statistics.fmean(v), "density_min": min(v), "density_max": max(v)}


def compression_of(config: dict, densities: Densities, bytes_sent: int, steps: int,
                   gradient_bytes: int) -> dict:  # fmt: skip
    """The result's ``compression_summary``: what was asked for and what it did."""
    dense_bytes = steps * gradient_bytes
    return {
        "compression": config.get("compression"),
        "compressor": config.get("compressor"),
        "compressor_args": list(config.get("compressor_args") or []),
        "density_asked": config.get("density") if config.get("compression") == "homomorphic"
        else None,
        "law": config.get("law") if config.get("compression") == "dc2" else None,
        "law_params": config.get("law_params") or {},
        "delay": config.get("delay"),
        **densities.summary(),
        "bytes_sent": bytes_sent,
        "float32_gradient_bytes": dense_bytes,
        # > 1: fewer bytes than the float32 gradient (headers and the sketch's extra round
        # included); dense INA sends int32 lanes, so about 1 less its headers
        "ratio": dense_bytes / bytes_sent if bytes_sent else None,
    }  # fmt: skip


def summary_lines(s: dict | None, width: int = 28) -> list[str]:
    """The summary's lines about compression (none for a dense run without a delay)."""
    if not s:
        return []
    method = s["compressor"] or s["compression"] or "dense"
    if method == "dense" and s.get("delay", "none") in (None, "none"):
        return []  # nothing was compressed, and the summary shows the bytes sent already
    lines = []
    args = ", ".join(s["compressor_args"])
    if s["compression"] == "dc2":
        params = ", ".join(f"{k}={v:g}" for k, v in s["law_params"].items())
        method += f", law {s['law']}" + (f" ({params})" if params else "")
    elif s["density_asked"] is not None:
        method += f", density {s['density_asked']:g}"
    if args:
        method += f" ({args})"
    lines.append(f"  {'compression':<{width}} {method}")
    if s.get("delay") and s["delay"] != "none":
        lines.append(f"  {'delay profile':<{width}} {s['delay']}")
    if s["density_mean"] is not None and s["compression"] in ("dc2", "homomorphic"):
        lines.append(
            f"  {'density per step':<{width}} mean {s['density_mean']:.3g}, range "
            f"{s['density_min']:.3g}-{s['density_max']:.3g}"
        )
    if s["ratio"]:
        lines.append(
            f"  {'bytes vs float32 gradient':<{width}} {s['bytes_sent']:,} sent by worker 0 "
            f"for {s['float32_gradient_bytes']:,}: {s['ratio']:.2f}x compression"
        )
    return lines
