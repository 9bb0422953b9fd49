"""A GPU cluster as data: nodes of GPUs, the links inside a node, the NICs, the fabric.

A simulated job runs on a `Cluster`: ``nodes`` servers of ``gpus_per_node`` GPUs each, joined
inside the server by NVLink through NVSwitch (every GPU at its full NVLink rate to every
other), by an NVLink mesh (DGX-1's hybrid cube mesh) or by PCIe, and to the fabric by
``nics_per_node`` NICs. With one NIC per GPU the NICs are *rail-optimised* (GPU g of every
node on rail g, as DGX/HGX systems are cabled); with fewer they are shared. The fabric is a
leaf-spine network: ``nodes_per_leaf`` servers under each leaf (ToR) switch, the leaves'
uplinks ``oversubscription`` times thinner than their downlinks. The INA switch is the leaf.

Every figure is a data-sheet number, named in ``sources`` beside the preset:

| preset | GPUs | inside the node, per GPU per direction | NICs per node | sheet |
|---|---|---|---|---|
| ``dgx1-v100`` | 8 x V100 SXM2 32 GB | NVLink 2: 6 links x 25 GB/s = 150 GB/s (hybrid cube mesh) | 4 x 100 Gbit/s EDR (shared by two GPUs) | NVIDIA DGX-1 data sheet |
| ``dgx-a100`` | 8 x A100 SXM 80 GB | NVLink 3: 12 x 25 = 300 GB/s (NVSwitch) | 8 x 200 Gbit/s HDR | NVIDIA DGX A100 data sheet |
| ``dgx-h100`` | 8 x H100 SXM 80 GB | NVLink 4: 18 x 25 = 450 GB/s (NVSwitch, NVLS) | 8 x 400 Gbit/s NDR | NVIDIA DGX H100 data sheet |
| ``hgx-b200`` | 8 x B200 180 GB | NVLink 5: 18 x 50 = 900 GB/s (NVSwitch, NVLS) | 8 x 400 Gbit/s | NVIDIA HGX B200 / DGX B200 data sheets |
| ``pcie-v100`` | 8 x V100 PCIe 32 GB | PCIe 3.0 x16: 15.75 GB/s | 1 x 100 Gbit/s | PCIe 3.0 specification (MergeComp's server) |
| ``hosts`` | 1 GPU (``--device``) | none | 1 NIC at ``--link-rate`` | (``--workers N --link-rate R``) |

A cluster file (JSON) names a preset to start from and overrides any field::

    {"preset": "dgx-a100", "nodes": 16, "nic_rate": "100G", "oversubscription": 2}

or gives every field itself. Fields: ``name``, ``gpu`` (a device of `ina.workload.devices`),
``gpus_per_node``, ``intra`` (``nvswitch``, ``nvlink-mesh``, ``pcie`` or ``none``),
``intra_rate`` (per GPU per direction, with its unit: ``300GB/s`` or ``2400G``), ``nvls``
(in-switch reduction inside the node), ``nics_per_node``, ``nic_rate`` (each, ``200G``),
``transport`` (``rdma``, or ``tcp`` at ``tcp_share`` of line rate), ``nodes_per_leaf``,
``oversubscription`` (>= 1), ``nodes``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from ina import units
from ina.workload.devices import DEVICES

INTRA = ("nvswitch", "nvlink-mesh", "pcie", "none")
TRANSPORTS = ("rdma", "tcp")
GB = 1e9


@dataclass(frozen=True)
class Cluster:
    """Nodes of GPUs, their links and NICs, the fabric (see the module docstring).
    Rates are bytes per second per direction."""

    name: str
    gpu: str
    nodes: int = 1
    gpus_per_node: int = 8
    intra: str = "nvswitch"
    intra_bw: float = 0.0  # per GPU per direction inside the node
    nvls: bool = False  # NVSwitch reduces in the switch (NVLink SHARP, Hopper on)
    nics_per_node: int = 8
    nic_bw: float = 0.0  # per NIC per direction (line rate)
    transport: str = "rdma"
    tcp_share: float = 0.6  # TCP: the share of line rate it reaches (a stated setting)
    nodes_per_leaf: int = 32
    oversubscription: float = 1.0
    sources: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.gpu not in DEVICES:
            raise ValueError(
                f"cluster {self.name!r}: unknown gpu {self.gpu!r}; known: {', '.join(DEVICES)}"
            )
        for name in ("nodes", "gpus_per_node", "nics_per_node", "nodes_per_leaf"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"cluster {self.name!r}: {name} must be an integer >= 1")
        if self.intra not in INTRA:
            raise ValueError(f"cluster {self.name!r}: intra {self.intra!r}; one of {INTRA}")
        if self.gpus_per_node > 1 and (self.intra == "none" or self.intra_bw <= 0):
            raise ValueError(f"cluster {self.name!r}: {self.gpus_per_node} GPUs need an intra link")
        if self.nic_bw <= 0:
            raise ValueError(f"cluster {self.name!r}: nic_rate must be > 0")
        if self.transport not in TRANSPORTS:
            raise ValueError(
                f"cluster {self.name!r}: transport {self.transport!r}; one of {TRANSPORTS}"
            )
        if not 0 < self.tcp_share <= 1:
            raise ValueError(f"cluster {self.name!r}: tcp_share must be in (0, 1]")
        if not self.oversubscription >= 1:
            raise ValueError(
                f"cluster {self.name!r}: oversubscription must be >= 1, got {self.oversubscription:g}"
            )
        if self.nvls and self.intra != "nvswitch":
            raise ValueError(f"cluster {self.name!r}: nvls needs intra nvswitch")

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def rail_optimised(self) -> bool:
        return self.nics_per_node >= self.gpus_per_node

    @property
    def node_net_bw(self) -> float:
        """What a node's NICs carry out at once, per direction (before the transport's share)."""
        return self.nics_per_node * self.nic_bw

    @property
    def spans_spine(self) -> bool:
        """Whether the job's nodes sit under more than one leaf (traffic crosses the spine)."""
        return self.nodes > self.nodes_per_leaf

    def describe(self) -> str:
        intra = (
            f"{self.intra} {self.intra_bw / GB:g} GB/s" + (" + NVLS" if self.nvls else "")
            if self.gpus_per_node > 1
            else "one GPU"
        )
        nics = f"{self.nics_per_node} x {self.nic_bw * 8 / GB:g} Gbit/s {self.transport}"
        spine = f", oversubscription {self.oversubscription:g}" if self.spans_spine else ""
        return (
            f"{self.name}: {self.nodes} x {self.gpus_per_node} {self.gpu} ({intra}; {nics}{spine})"
        )


def _gbps(gbit: float) -> float:
    return gbit * GB / 8


PRESETS: dict[str, Cluster] = {
    c.name: c
    for c in (
        Cluster("dgx1-v100", "v100", gpus_per_node=8, intra="nvlink-mesh", intra_bw=150 * GB,
                nics_per_node=4, nic_bw=_gbps(100),
                sources=("NVIDIA DGX-1 data sheet: 8 Tesla V100, NVLink hybrid cube mesh "
                         "(6 NVLink 2 links of 25 GB/s per direction per GPU), 4 x EDR IB "
                         "100 Gbit/s",)),
        Cluster("dgx-a100", "a100", gpus_per_node=8, intra="nvswitch", intra_bw=300 * GB,
                nics_per_node=8, nic_bw=_gbps(200),
                sources=("NVIDIA DGX A100 data sheet: 8 A100 80GB, 600 GB/s NVLink 3 per GPU "
                         "(both directions) through 6 NVSwitches, 8 x 200 Gbit/s HDR "
                         "ConnectX-6 for compute",)),
        Cluster("dgx-h100", "h100", gpus_per_node=8, intra="nvswitch", intra_bw=450 * GB,
                nvls=True, nics_per_node=8, nic_bw=_gbps(400),
                sources=("NVIDIA DGX H100 data sheet: 8 H100 80GB, 900 GB/s NVLink 4 per GPU "
                         "(both directions), 4 NVSwitches (NVLink SHARP), 8 x 400 Gbit/s "
                         "ConnectX-7",)),
        Cluster("hgx-b200", "b200", gpus_per_node=8, intra="nvswitch", intra_bw=900 * GB,
                nvls=True, nics_per_node=8, nic_bw=_gbps(400),
                sources=("NVIDIA HGX B200 data sheet: 8 B200, 1.8 TB/s NVLink 5 per GPU "
                         "(both directions); DGX B200: 8 x 400 Gbit/s ConnectX-7",)),
        Cluster("pcie-v100", "v100", gpus_per_node=8, intra="pcie", intra_bw=15.75 * GB,
                nics_per_node=1, nic_bw=_gbps(100),
                sources=("PCIe 3.0 x16: 8 GT/s x 16 lanes, 128b/130b = 15.75 GB/s per "
                         "direction; MergeComp's 8-GPU server",)),
    )
}  # fmt: skip

PRESET_NAMES = (*PRESETS, "hosts")


def hosts(workers: int, link_bps: float, gpu: str) -> Cluster:
    """``workers`` hosts of one GPU, each with one NIC at ``link_bps`` bits/s: what
    ``--workers N --link-rate R`` has always meant."""
    return Cluster(
        "hosts", gpu, nodes=workers, gpus_per_node=1, intra="none", nics_per_node=1,
        nic_bw=link_bps / 8, nodes_per_leaf=max(workers, 1),
        sources=("--workers and --link-rate",),
    )  # fmt: skip


def preset(name: str) -> Cluster:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(
            f"unknown system {name!r}; known: {', '.join(PRESET_NAMES)} or a cluster file"
        ) from None


FILE_FIELDS = {
    "name": str, "gpu": str, "nodes": int, "gpus_per_node": int, "intra": str,
    "intra_rate": "rate", "nvls": bool, "nics_per_node": int, "nic_rate": "rate",
    "transport": str, "tcp_share": float, "nodes_per_leaf": int, "oversubscription": float,
}  # fmt: skip


def from_dict(data: object, where: str = "cluster file") -> Cluster:
    """A cluster from a file's mapping: a ``preset`` to start from, fields over it."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: a JSON object of fields")
    data = dict(data)
    base = preset(str(data.pop("preset"))) if "preset" in data else None
    changes: dict[str, object] = {}
    for key, value in data.items():
        kind = FILE_FIELDS.get(key)
        if kind is None:
            raise ValueError(
                f"{where}: unknown field {key!r}; known: preset, {', '.join(FILE_FIELDS)}"
            )
        if kind == "rate":
            attr = "intra_bw" if key == "intra_rate" else "nic_bw"
            changes[attr] = parse_rate(value, f"{where}: {key}")
            continue
        ok = (
            isinstance(value, (int, float)) and not isinstance(value, bool)
            if kind is float
            else isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        )
        if not ok:
            raise ValueError(f"{where}: field {key!r} must be a {kind.__name__}, got {value!r}")
        changes[key] = float(value) if kind is float else value
    if base is None:
        missing = [k for k in ("name", "gpu", "nic_rate") if k not in data]
        if missing:
            raise ValueError(f"{where}: without a preset, give {', '.join(missing)}")
        known = {f.name for f in fields(Cluster)}
        return Cluster(**{k: v for k, v in changes.items() if k in known})
    changes.setdefault("name", f"{base.name}*" if changes else base.name)
    return replace(base, **changes)


def parse_rate(value: object, name: str) -> float:
    """Bytes per second from ``'300GB/s'`` (bytes) or ``'200G'`` (bits, as --link-rate)."""
    if not isinstance(value, str):
        raise ValueError(f"{name}: a rate with its unit as a string ('200G' or '300GB/s')")
    text = value.strip()
    if text.endswith("B/s"):  # a capital B: bytes ("300GB/s"); units.rate reads bits
        return units.rate(text[:-3] + "bit/s", name)
    return units.rate(text, name) / 8


def load(text: str, nodes: int | None = None, gpus: int | None = None) -> Cluster:
    """The cluster named by ``--system``: a preset or a JSON file; ``nodes`` (``--nodes``)
    or ``gpus`` (``--gpus``, a multiple of the node's GPUs) sets its size."""
    if text in PRESETS:
        c = PRESETS[text]
    elif Path(text).suffix == ".json" or Path(text).exists():
        path = Path(text)
        try:
            data = json.loads(path.read_text())
        except OSError as e:
            raise ValueError(f"--system {text}: cannot read it ({e.strerror})") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"--system {text}: not JSON ({e})") from None
        c = from_dict(data, f"--system {text}")
    else:
        preset(text)  # the error naming the presets
        raise AssertionError
    return sized(c, nodes, gpus)


def sized(c: Cluster, nodes: int | None = None, gpus: int | None = None) -> Cluster:
    if nodes is not None and gpus is not None and nodes * c.gpus_per_node != gpus:
        raise ValueError(f"--nodes {nodes} x {c.gpus_per_node} GPUs per node is not --gpus {gpus}")
    if gpus is not None:
        if gpus < 1 or gpus % c.gpus_per_node:
            raise ValueError(f"{gpus} GPUs do not fill whole nodes of {c.gpus_per_node} ({c.name})")
        nodes = gpus // c.gpus_per_node
    if nodes is not None:
        if nodes < 1:
            raise ValueError(f"--nodes must be >= 1, got {nodes}")
        c = replace(c, nodes=nodes)
    return c
