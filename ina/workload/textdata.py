"""``pytext``: character-level text from the Python standard library's own sources.

Every Python installation carries its standard library as source files, so a language model
can train offline on any machine without shipping a corpus. The text is chosen
deterministically:

1. the top-level ``*.py`` files of ``sysconfig.get_paths()["stdlib"]``, sorted by name (the
   subdirectories are left out: the stdlib's test suite, for one, is an optional package on
   many distributions, and would make the corpus depend on it);
2. held out by file, not by position, so that no test file was seen in training: every tenth
   file (index 0, 10, 20, ... of the sorted list) goes to the test pool, the others to the
   training pool;
3. each pool is read in order and cut at its byte budget (`TRAIN_BYTES`, `TEST_BYTES`);
4. bytes become ids in a vocabulary of tab, newline and the 95 printable ASCII characters,
   plus one id for everything else (UTF-8 in comments and strings: about 0.004 % of bytes);
5. the stream is cut into non-overlapping windows of `SEQ_LEN` characters; the label of each
   position is the next character.

The corpus depends on the Python version (its stdlib differs), not on anything else: the run's
seed only shuffles the windows (`ina.workload.data.shard`). To train on another version's corpus
(to repeat a run made under Python 3.11 on a machine with 3.12, say), point the environment
variable ``INA_PYTEXT_STDLIB`` at a folder holding that version's top-level ``*.py`` files.
Scores are bits per character on the held-out windows: mean cross-entropy in nats over ln 2.
"""

from __future__ import annotations

import functools
import os
import sysconfig
from pathlib import Path

import numpy as np

SEQ_LEN = 64  # characters per window: long enough for an LSTM to use a line's context
STDLIB_ENV = "INA_PYTEXT_STDLIB"  # another Python's stdlib folder, for a corpus made elsewhere
TRAIN_BYTES = 2_000_000  # 31,249 windows: more than the few thousand steps a run takes
TEST_BYTES = 100_000  # 1,562 windows: bits per character to about 0.005 (measured spread)
HELD_OUT_EVERY = 10  # every tenth file is held out

# Vocabulary: tab, newline, ' ' .. '~', then "other" (any other byte).
_CHARS = bytes([9, 10, *range(32, 127)])
VOCAB_SIZE = len(_CHARS) + 1
OTHER = len(_CHARS)
_LOOKUP = np.full(256, OTHER, np.int64)
_LOOKUP[np.frombuffer(_CHARS, np.uint8)] = np.arange(len(_CHARS))


def stdlib_files(root: str | Path | None = None) -> list[Path]:
    """The top-level ``*.py`` files of ``root``, else of ``$INA_PYTEXT_STDLIB``, else of this
    Python's standard library; sorted."""
    root = Path(root or os.environ.get(STDLIB_ENV) or sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.is_file())
    if not files:
        raise FileNotFoundError(f"{root}: no *.py files (the Python sources are not installed)")
    return files


def encode(text: bytes) -> np.ndarray:
    """Bytes -> int64 ids in ``[0, VOCAB_SIZE)``."""
    return _LOOKUP[np.frombuffer(text, np.uint8)]


def decode(ids) -> str:
    """Ids -> text; "other" shows as U+FFFD."""
    return "".join(chr(_CHARS[i]) if i < OTHER else "\ufffd" for i in np.asarray(ids).ravel())


def _read(files: list[Path], budget: int) -> bytes:
    """The files' bytes in order, cut at ``budget``."""
    parts, total = [], 0
    for f in files:
        if total >= budget:
            break
        data = f.read_bytes()[: budget - total]
        parts.append(data)
        total += len(data)
    return b"".join(parts)


def windows(ids: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Non-overlapping windows ``x`` of ``seq_len`` ids and their next-id labels ``y``."""
    n = (len(ids) - 1) // seq_len
    x = ids[: n * seq_len].reshape(n, seq_len)
    y = ids[1 : n * seq_len + 1].reshape(n, seq_len)
    return x, y


@functools.lru_cache(maxsize=2)
def _corpus(root: str | None) -> tuple[bytes, bytes, int, int]:
    files = stdlib_files(root)
    test = [f for i, f in enumerate(files) if i % HELD_OUT_EVERY == 0]
    train = [f for i, f in enumerate(files) if i % HELD_OUT_EVERY != 0]
    return _read(train, TRAIN_BYTES), _read(test, TEST_BYTES), len(train), len(test)


def pytext_arrays(path: str | None = None):
    """The ``pytext`` windows: int64 ``(n, SEQ_LEN)`` inputs and next-character labels, for
    training and for test (`ina.workload.data.load_pytext` makes them a data set)."""
    if path:
        raise ValueError("pytext reads the Python standard library's sources: it takes no path")
    train, test, _, _ = _corpus(os.environ.get(STDLIB_ENV) or None)
    xtr, ytr = windows(encode(train), SEQ_LEN)
    xte, yte = windows(encode(test), SEQ_LEN)
    if len(xte) == 0 or len(xtr) == 0:
        raise ValueError("pytext: the standard library's sources are too small for a window")
    import torch  # here, not at import: `ina train`'s launcher reads this module's sizes

    t = torch.from_numpy
    return t(xtr), t(ytr), t(xte), t(yte)
