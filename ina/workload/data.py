"""Data sets for `ina train`: nothing is downloaded at run time.

The default, ``digits``, is scikit-learn's `load_digits` (1,797 8x8 handwritten digits that
ship inside the installed scikit-learn package), so a fresh machine trains offline. Two more
are made on the machine itself (`ina.workload.textdata` and `load_mnist1d` below):

- ``mnist1d``: MNIST-1D (Greydanus 2020, PyPI ``mnist1d``), 1-D signals of 40 samples drawn
  procedurally from ten templates by ``make_dataset``: harder than digits for a small model,
  so that compression visibly costs steps;
- ``pytext``: characters of the Python standard library's own sources, for a character-level
  language model (`ina.workload.textdata`).

MNIST and CIFAR-10 are read from files the user already has, in their standard formats:

- ``mnist``: a directory with ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
  ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte`` (each optionally ``.gz``), the IDX
  format of LeCun's site;
- ``cifar10``: a directory with ``data_batch_1`` .. ``data_batch_5`` and ``test_batch``
  (the "python version" pickles; ``cifar-10-batches-py/`` inside it is found too).

Images and signals come out the same way: float32 ``(n, C, H, W)`` or ``(n, C, L)``
standardized with the training set's per-channel mean and standard deviation, int64 labels,
a fixed train/test split (digits: stratified, seeded). Text comes out as int64 windows of
character ids ``(n, L)`` with the next character of every position as its label ``(n, L)``.
`shard` gives each data-parallel rank its part through `DistributedSampler`, so ranks see
disjoint batches whose union is the epoch.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
import pickle
import random
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ina.workload.textdata import SEQ_LEN, VOCAB_SIZE, pytext_arrays

if TYPE_CHECKING:  # torch is imported where tensors are made: `ina train`'s launcher
    import torch  # checks its data files without paying for torch's import
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

# What a model needs to know of each data set, without loading it: the input shape of one
# sample and the number of classes (text: the vocabulary). `ina sim train --timing-only`
# sizes a model's gradients from these; tests check them against the sets made here.
SHAPES: dict[str, tuple[tuple[int, ...], int]] = {
    "digits": ((1, 8, 8), 10),
    "mnist": ((1, 28, 28), 10),
    "cifar10": ((3, 32, 32), 10),
    "mnist1d": ((1, 40), 10),
    "pytext": ((SEQ_LEN,), VOCAB_SIZE),
}


@dataclass(frozen=True)
class Dataset:
    """A train/test pair of tensors and what a model needs to know about them."""

    name: str
    train_x: torch.Tensor  # image: float32 (n, C, H, W); signal: (n, C, L); text: int64 (n, L)
    train_y: torch.Tensor  # int64 (n,) classes; text: (n, L) next-character ids
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int  # text: the vocabulary's size
    kind: str = "image"  # "image", "signal" or "text": which models fit (`ina.workload.models`)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])


def _standardize(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel standardization with the training set's statistics (no test leakage)."""
    axes = (0, *range(2, train.ndim))  # every axis but the channel's
    mean = train.mean(axis=axes, keepdims=True)
    std = train.std(axis=axes, keepdims=True)
    std = np.where(std > 0, std, 1.0)
    return ((train - mean) / std).astype(np.float32), ((test - mean) / std).astype(np.float32)


def _make(name: str, xtr, ytr, xte, yte, num_classes: int, kind: str = "image") -> Dataset:
    import torch

    xtr, xte = _standardize(np.asarray(xtr, np.float64), np.asarray(xte, np.float64))
    return Dataset(
        name,
        torch.from_numpy(xtr),
        torch.from_numpy(np.asarray(ytr, np.int64)),
        torch.from_numpy(xte),
        torch.from_numpy(np.asarray(yte, np.int64)),
        num_classes,
        kind,
    )


def load_digits(seed: int = 0, test_fraction: float = 0.2, path: str | None = None) -> Dataset:
    """scikit-learn's digits: 1,797 images of 8x8, a stratified split seeded by ``seed``."""
    if path:
        raise ValueError("the digits data set ships with scikit-learn: it takes no path")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    xtr, ytr, xte, yte = _digits_split(seed, test_fraction)
    return _make("digits", xtr, ytr, xte, yte, 10)


@functools.lru_cache(maxsize=4)
def _digits_split(seed: int, test_fraction: float) -> tuple[np.ndarray, ...]:
    """The split, kept in `cache_dir` (`_cached_arrays`): importing scikit-learn costs a rank
    about 1.2 s of CPU, and every run of `ina train` starts ranks."""
    from importlib.metadata import version

    def make() -> tuple[np.ndarray, ...]:
        from sklearn.datasets import load_digits as sk_load_digits
        from sklearn.model_selection import train_test_split

        d = sk_load_digits()
        x = d.images.reshape(-1, 1, 8, 8)
        xtr, xte, ytr, yte = train_test_split(
            x, d.target, test_size=test_fraction, random_state=seed, stratify=d.target
        )
        return xtr, ytr, xte, yte

    name = f"digits-{version('scikit-learn')}-{seed}-{test_fraction!r}.npz"
    return _cached_arrays(name, make)


def read_idx(path: str | Path) -> np.ndarray:
    """An IDX file (MNIST's format; ``.gz`` is read transparently) as a numpy array.

    Header: two zero bytes, a type code (0x08 = uint8, ...), the number of dimensions, then
    one big-endian uint32 per dimension; the data follow in C order, big-endian.
    """
    path = Path(path)
    raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path}: not an IDX file (bad magic)")
    types = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if raw[2] not in types:
        raise ValueError(f"{path}: unknown IDX type code 0x{raw[2]:02x}")
    ndim = raw[3]
    dims = tuple(int(d) for d in np.frombuffer(raw, ">u4", count=ndim, offset=4))
    data = np.frombuffer(raw, types[raw[2]], offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: header says {dims}, file holds {data.size} values")
    return data.reshape(dims)


def _find(directory: Path, stem: str) -> Path:
    for name in (
        stem,
        stem + ".gz",
        stem.replace("-idx", ".idx"),
        stem.replace("-idx", ".idx") + ".gz",
    ):
        if (directory / name).exists():
            return directory / name
    raise FileNotFoundError(f"{directory}: no {stem}[.gz] (MNIST IDX files expected)")


MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte")  # fmt: skip


def _mnist_files(path: str | None) -> list[Path]:
    if not path:
        raise ValueError("mnist needs --data-dir: a directory with the four IDX files")
    return [_find(Path(path), stem) for stem in MNIST_FILES]


def load_mnist(seed: int = 0, path: str | None = None) -> Dataset:
    """MNIST from IDX files in directory ``path`` (its own 60,000/10,000 split)."""
    d = Path(path or "")
    xtr, ytr, xte, yte = (read_idx(f) for f in _mnist_files(path))
    if xtr.shape[0] != ytr.shape[0] or xte.shape[0] != yte.shape[0]:
        raise ValueError(f"{d}: image and label counts differ")
    return _make("mnist", xtr[:, None] / 255.0, ytr, xte[:, None] / 255.0, yte, 10)


def _unpickle(path: Path) -> dict:
    with open(path, "rb") as f:
        return pickle.load(f, encoding="bytes")


def _cifar10_dir(path: str | None) -> Path:
    if not path:
        raise ValueError("cifar10 needs --data-dir: the directory of the python batches")
    d = Path(path)
    if not (d / "test_batch").exists() and (d / "cifar-10-batches-py").is_dir():
        d = d / "cifar-10-batches-py"
    if not (d / "test_batch").exists():
        raise FileNotFoundError(f"{d}: no test_batch (CIFAR-10 python batches expected)")
    if not any(d.glob("data_batch_*")):
        raise FileNotFoundError(f"{d}: no data_batch_* files")
    return d


def load_cifar10(seed: int = 0, path: str | None = None) -> Dataset:
    """CIFAR-10 from the python-pickle batches in directory ``path``."""
    d = _cifar10_dir(path)

    def batch(p: Path) -> tuple[np.ndarray, np.ndarray]:
        b = _unpickle(p)
        x = np.asarray(b[b"data"], np.uint8).reshape(-1, 3, 32, 32)
        return x, np.asarray(b[b"labels"], np.int64)

    parts = [batch(p) for p in sorted(d.glob("data_batch_*"))]
    if not parts:
        raise FileNotFoundError(f"{d}: no data_batch_* files")
    xtr = np.concatenate([x for x, _ in parts])
    ytr = np.concatenate([y for _, y in parts])
    xte, yte = batch(d / "test_batch")
    return _make("cifar10", xtr / 255.0, ytr, xte / 255.0, yte, 10)


# MNIST-1D as `ina train` makes it: 12,000 samples (the package's default is 5,000), 80 % for
# training, every other argument the package's default (`mnist1d.data.get_dataset_args`:
# templates of 12 points padded by 36-60, scale 0.4, translation up to 48, correlated noise
# 0.25, i.i.d. noise 0.02, shear 0.75, 40 output points); only the seed is the run's.
# 9,600 training samples let the 1-D CNN pass 95 % test accuracy (the package's 4,000 leave
# it near 94 %, as in the MNIST-1D paper); a rank makes them in about 2 s of CPU.
MNIST1D_SAMPLES = 12_000


def cache_dir() -> Path:
    """Where made data sets are kept between runs: ``$INA_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/ina``, else ``~/.cache/ina``."""
    if os.environ.get("INA_CACHE_DIR"):
        return Path(os.environ["INA_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ina"


@functools.lru_cache(maxsize=4)
def _mnist1d_arrays(num_samples: int, seed: int) -> tuple[np.ndarray, ...]:
    """``make_dataset`` with our arguments, once per process (a simulator builds every rank's
    shard in one process), and once per machine (`_cached_arrays`): making it takes several
    seconds of CPU, and a sweep of DC2 or GRACE runs loads it in every run. The file's name
    holds the package's version and a hash of every argument. The package seeds numpy's and
    Python's global generators: their states are restored, so that loading the data changes
    nothing else in the run."""
    from importlib.metadata import version

    from mnist1d.data import get_dataset_args

    args = get_dataset_args()
    args.num_samples, args.seed = num_samples, seed
    key = hashlib.sha256(json.dumps(vars(args), sort_keys=True).encode()).hexdigest()[:16]

    def make() -> tuple[np.ndarray, ...]:
        d = _make_mnist1d(args)
        return tuple(d[n] for n in ("x", "y", "x_test", "y_test"))

    return _cached_arrays(f"mnist1d-{version('mnist1d')}-{num_samples}-{seed}-{key}.npz", make)


def _cached_arrays(name: str, make: Callable[[], tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """The arrays kept in `cache_dir` under ``name``, else ``make()``'s, then kept there. A
    file that cannot be read is made again, never trusted half-written (it is written to a
    temporary name and renamed); a folder that cannot be written is skipped."""
    path = cache_dir() / name
    try:
        with np.load(path) as f:
            return tuple(f[f"a{i}"] for i in range(len(f.files)))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # absent or not ours
        pass
    arrays = make()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
        np.savez(tmp, **{f"a{i}": a for i, a in enumerate(arrays)})
        os.replace(tmp, path)
    except OSError:  # a read-only home: the run goes on without the cache
        pass
    return arrays


def _make_mnist1d(args) -> dict:
    from mnist1d.data import make_dataset

    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        return make_dataset(args)
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)


def load_mnist1d(seed: int = 0, path: str | None = None) -> Dataset:
    """MNIST-1D, made by the ``mnist1d`` package from ``seed``: signals ``(n, 1, 40)``."""
    if path:
        raise ValueError("mnist1d is generated by the mnist1d package: it takes no path")
    xtr, ytr, xte, yte = _mnist1d_arrays(MNIST1D_SAMPLES, seed)
    return _make("mnist1d", xtr[:, None], ytr, xte[:, None], yte, 10, kind="signal")


def load_pytext(seed: int = 0, path: str | None = None) -> Dataset:
    """Characters of the Python standard library's sources (`ina.workload.textdata`)."""
    return Dataset("pytext", *pytext_arrays(path), VOCAB_SIZE, kind="text")


DATASETS: dict[str, Callable[..., Dataset]] = {
    "digits": load_digits,
    "mnist": load_mnist,
    "cifar10": load_cifar10,
    "mnist1d": load_mnist1d,
    "pytext": load_pytext,
}
assert set(SHAPES) == set(DATASETS), "every data set needs its shape"


def check_files(name: str, path: str | None) -> None:
    """Raise (ValueError, FileNotFoundError) if data set ``name`` cannot be read from
    ``path``, without reading it: for a launcher to refuse before any process starts."""
    if name == "mnist":
        _mnist_files(path)
    elif name == "cifar10":
        _cifar10_dir(path)
    elif path:
        raise ValueError(f"{name} ships with its package or is generated: it takes no --data-dir")


def load_dataset(name: str, seed: int = 0, path: str | None = None) -> Dataset:
    """A data set by registry name (``digits``, ``mnist``, ``cifar10``, ``mnist1d``,
    ``pytext``)."""
    try:
        loader = DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown data set {name!r}; known: {sorted(DATASETS)}") from None
    return loader(seed=seed, path=path)


def shard(
    data: Dataset, rank: int, world_size: int, batch_size: int, seed: int
) -> tuple[DataLoader, DistributedSampler]:
    """This rank's training loader: a `DistributedSampler` shard, reshuffled per epoch.

    ``drop_last=True`` in both the sampler and the loader: every rank makes the same number
    of steps with full batches, so every allreduce has the same length on every worker.
    Call ``sampler.set_epoch(e)`` before each epoch.
    """
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    train = TensorDataset(data.train_x, data.train_y)
    sampler = DistributedSampler(
        train, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
    )
    if len(sampler) < batch_size:
        raise ValueError(
            f"{data.name}: {len(sampler)} training samples per worker, fewer than one batch "
            f"of {batch_size}"
        )
    loader = DataLoader(train, batch_size=batch_size, sampler=sampler, drop_last=True)
    return loader, sampler


def test_shard(data: Dataset, rank: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every ``world_size``-th test sample from ``rank``: disjoint shards covering the set
    exactly once (no padding, unlike `DistributedSampler`), so summed counts are exact."""
    return data.test_x[rank::world_size], data.test_y[rank::world_size]


test_shard.__test__ = False  # not a pytest test, despite its name
