"""Calibrated compute: the share of a device's peak each kind of layer reaches, each set from
one named public measurement.

The roofline (`ina.workload.devices`) gives a layer's time at 100 % of peak from its FLOPs
and bytes; real kernels reach a share of it that depends on the kind of kernel (a cuDNN
convolution, a cuBLAS GEMM, a memory-bound normalisation) and on the device and precision.
This module holds one efficiency per (device, precision, kind of layer), derived from the
measurements in `MEASUREMENTS` by `derive`, in this order for each device and precision:

1. a measurement marked ``all`` sets every kind at once (one number for the whole step: the
   only thing one measurement of one model can fix);
2. a transformer measurement (``non-conv``) sets every kind but convolutions;
3. a CNN measurement (``conv``) then sets convolutions alone, the other layers at what step 2
   gave them.

Each measurement is a single GPU's training throughput from a public table (its source
beside it); the step time is the batch over that throughput, and the efficiency is what
makes the roofline's layers, at the step's batch and precision, add up to it. A
convolution's efficiency may exceed 1: its FLOPs are counted as a direct convolution, and
cuDNN's Winograd and FFT algorithms do fewer. 16-bit precisions share one figure per device
(``bf16`` takes ``fp16``'s where only mixed precision in FP16 was measured).

A (device, precision) without a measurement keeps the stated default (0.5 of peak) and every
result that uses it says "uncalibrated". None of these points is in the validation table
(`ina sim published`): they calibrate, the others validate.

`ina sim calibrate` runs the derivation (`ina.workload.calibrate.derive`) and prints it; a test
checks that `EFFICIENCIES` is what it derives, so the table cannot drift from its
measurements.
"""

from __future__ import annotations

from dataclasses import dataclass

from ina.workload.layers import KINDS

DEFAULT_EFFICIENCY = 0.5  # a stated setting, not a fit: half of peak, the user's to change


@dataclass(frozen=True)
class Measurement:
    """One GPU's published training throughput (samples/s) of a zoo model."""

    device: str
    precision: str
    workload: str
    batch: int
    seq_len: int | None
    throughput: float
    sets: str  # "all", "non-conv" or "conv"
    source: str


DLE = "NVIDIA DeepLearningExamples"
MEASUREMENTS = (
    Measurement("a100", "tf32", "bert-large", 64, 128, 307, "non-conv",
                f"{DLE}, PaddlePaddle/LanguageModeling/BERT/README.md: pre-training on DGX "
                "A100 80GB, phase 1 (seq 128), 1 GPU, TF32: 307 sequences/s"),
    Measurement("a100", "fp16", "bert-large", 64, 128, 694, "non-conv",
                f"{DLE}, the same table, mixed precision: 694 sequences/s"),
    Measurement("a100", "tf32", "resnet50", 256, None, 938, "conv",
                f"{DLE}, PyTorch/Classification/ConvNets/resnet50v1.5/README.md: DGX A100 "
                "80GB, 1 GPU, TF32, batch 256: 938 images/s"),
    Measurement("a100", "fp16", "resnet50", 256, None, 2470, "conv",
                f"{DLE}, the same table, mixed precision, batch 256: 2,470 images/s"),
    Measurement("v100", "fp32", "resnet50", 112, None, 367, "all",
                f"{DLE}, the same README: DGX-1 16GB, 1 GPU, FP32, batch 112: 367 images/s"),
    Measurement("v100", "fp16", "resnet50", 256, None, 1200, "all",
                f"{DLE}, the same table, mixed precision, batch 256: 1,200 images/s"),
    Measurement("p100", "fp32", "resnet101", 64, None, 118.1, "all",
                "Horovod README (Aug 2017): baseline single Pascal GPU, batch 64, "
                "ResNet-101: 118.1 images/s"),
)  # fmt: skip


# What `derive` gives (checked by tests/test_cluster.py); precision -> kind -> efficiency.
def _same(e: float) -> dict[str, float]:
    return dict.fromkeys(KINDS, e)


EFFICIENCIES: dict[tuple[str, str], dict[str, float]] = {
    ("v100", "fp32"): _same(0.5617),
    ("v100", "fp16"): _same(0.4646),
    ("p100", "fp32"): _same(0.5097),
    ("a100", "tf32"): {**_same(0.5712), "conv": 0.2357},
    ("a100", "fp16"): {**_same(0.6706), "conv": 0.3218},
}


def efficiency(device: str, precision: str, kind: str) -> tuple[float, bool]:
    """(efficiency, calibrated) for a layer of ``kind`` on ``device`` at ``precision``."""
    kind = "conv" if kind == "conv3x3" else kind  # one figure for cuDNN's convolutions
    for p in (precision, "fp16" if precision == "bf16" else precision):
        if (device, p) in EFFICIENCIES:
            return EFFICIENCIES[(device, p)][kind], True
    return DEFAULT_EFFICIENCY, False


def calibrated(device: str, precision: str) -> bool:
    return efficiency(device, precision, "gemm")[1]


def load_file(path: str, device: str, precision: str) -> dict[str, float]:
    """A user's calibration file: JSON ``{"device": "h100", "precision": "bf16",
    "efficiency": {"gemm": 0.62, "attention": 0.4, ...}, "source": "..."}``, each kind's share
    of peak from their own measurement (kinds it leaves out keep the built-in figure). One
    line (ValueError) for a file that does not parse, names a field wrongly, or is for another
    device or precision than the run's."""
    import json
    from pathlib import Path

    where = f"--calibration {path}"
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"{where}: cannot read it ({e.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: not JSON ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("efficiency"), dict):
        raise ValueError(f"{where}: a JSON object with 'device' and an 'efficiency' object")
    unknown = set(data) - {"device", "precision", "efficiency", "source"}
    if unknown:
        raise ValueError(f"{where}: unknown field {sorted(unknown)[0]!r}")
    if data.get("device") != device:
        raise ValueError(
            f"{where} is for device {data.get('device')!r}; this run's GPUs are {device}"
        )
    if "precision" in data and data["precision"] != precision:
        raise ValueError(f"{where} is for {data['precision']!r}; this run trains in {precision}")
    out = {}
    for kind, value in data["efficiency"].items():
        if kind not in KINDS:
            raise ValueError(f"{where}: unknown kind {kind!r}; known: {', '.join(KINDS)}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 4:
            raise ValueError(f"{where}: efficiency of {kind} must be a number in (0, 4]")
        out[kind] = float(value)
    return out
