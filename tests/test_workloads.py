"""Workloads beside digits: MNIST-1D with a 1-D CNN, a character LSTM on the stdlib's sources.

1. Each data set is deterministic from its seed, has the stated shapes, and loading it leaves
   the global random generators as they were.
2. The models have the stated sizes and output shapes; the registry refuses a model that
   does not fit a data set, and a metric points the right way.
3. `build_rank` needs no process group: disjoint shards, the same initial model on every rank.
4. ``ina train`` refuses bad combinations with one line and exit status 2.
5. A tiny run of each workload through the real path (torchrun ranks, the switch model, the
   DDP hook) reaches a low target and stops there.
"""

import argparse
import json
import math
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from ina import train_cli as cli
from ina.workload import textdata
from ina.workload.catalog import ACCURACY, BPC, TASKS, resolve
from ina.workload.data import MNIST1D_SAMPLES, _mnist1d_arrays, load_dataset
from ina.workload.models import build_model, num_parameters
from ina.workload.tasks import build_rank, evaluate, loss_fn


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return p.parse_args(argv)


# -- data --------------------------------------------------------------------------------


def test_mnist1d_is_deterministic_from_its_seed_and_leaves_global_generators_alone(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("INA_CACHE_DIR", str(tmp_path))  # made here, not read from a cache
    make = _mnist1d_arrays.__wrapped__  # past the per-process cache
    np.random.seed(5)
    random.seed(5)
    a = make(200, 3)
    after = np.random.random(), random.random()
    np.random.seed(5)
    random.seed(5)
    assert after == (np.random.random(), random.random())  # the package reseeds them
    b = make(200, 3)
    for u, v in zip(a, b, strict=True):
        assert np.array_equal(u, v)
    c = make(200, 4)
    assert not np.array_equal(a[0], c[0])
    assert a[0].shape == (160, 40) and a[2].shape == (40, 40)  # 80 % for training


def test_mnist1d_is_made_once_per_machine_and_a_bad_cache_file_is_made_again(tmp_path, monkeypatch):
    from ina.workload import data

    make = _mnist1d_arrays.__wrapped__
    monkeypatch.setenv("INA_CACHE_DIR", str(tmp_path / "cache"))
    fresh = make(200, 7)
    (path,) = (tmp_path / "cache").iterdir()
    assert path.suffix == ".npz" and "-200-7-" in path.name

    def no_making(_args):
        raise AssertionError("made again although the cache holds it")

    with monkeypatch.context() as m:
        m.setattr(data, "_make_mnist1d", no_making)
        cached = make(200, 7)
    for u, v in zip(fresh, cached, strict=True):
        assert u.dtype == v.dtype and np.array_equal(u, v)
    path.write_bytes(path.read_bytes()[:100])  # cut short: not trusted, made again
    for u, v in zip(fresh, make(200, 7), strict=True):
        assert np.array_equal(u, v)
    assert len(np.load(path)["a0"]) == 160  # and written whole again
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("INA_CACHE_DIR", str(blocked / "cache"))  # cannot be made: no cache
    for u, v in zip(fresh, make(200, 7), strict=True):
        assert np.array_equal(u, v)


def test_digits_split_is_kept_and_read_back_without_scikit_learn(tmp_path, monkeypatch):
    from ina.workload.data import _digits_split

    make = _digits_split.__wrapped__  # past the per-process cache
    monkeypatch.setenv("INA_CACHE_DIR", str(tmp_path))
    fresh = make(3, 0.2)
    (path,) = tmp_path.iterdir()
    assert path.name.startswith("digits-") and "-3-0.2" in path.name
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "sklearn", None)  # an import of it would now fail
        cached = make(3, 0.2)
        d = load_dataset("digits", seed=3)
    for u, v in zip(fresh, cached, strict=True):
        assert u.dtype == v.dtype and np.array_equal(u, v)
    assert torch.equal(d.test_y, torch.from_numpy(cached[3].astype(np.int64)))
    assert len(cached[0]) + len(cached[2]) == 1797 and len(cached[2]) == 360
    assert not np.array_equal(make(4, 0.2)[3], cached[3])  # another seed, another split


def test_mnist1d_shapes():
    d = load_dataset("mnist1d", seed=0)
    n_train = int(0.8 * MNIST1D_SAMPLES)
    assert d.train_x.shape == (n_train, 1, 40) and d.test_x.shape == (
        MNIST1D_SAMPLES - n_train,
        1,
        40,
    )
    assert d.train_x.dtype == torch.float32 and d.kind == "signal" and d.num_classes == 10
    assert sorted(torch.unique(d.train_y).tolist()) == list(range(10))
    assert abs(float(d.train_x.mean())) < 1e-5 and abs(float(d.train_x.std()) - 1) < 1e-2
    assert load_dataset("mnist1d", seed=0) is not d  # a fresh Dataset from the cached arrays
    assert torch.equal(load_dataset("mnist1d", seed=0).test_x, d.test_x)


def test_pytext_windows_come_from_sorted_stdlib_files_held_out_by_file():
    d = load_dataset("pytext", seed=0)
    L = textdata.SEQ_LEN
    assert d.kind == "text" and d.num_classes == textdata.VOCAB_SIZE == 98
    assert d.train_x.shape == (textdata.TRAIN_BYTES // L - 1, L)  # (budget - 1) // L windows
    assert d.test_x.shape == ((textdata.TEST_BYTES - 1) // L, L)
    assert d.train_x.dtype == d.train_y.dtype == torch.int64
    assert int(d.train_x.max()) < 98 and int(d.train_x.min()) >= 0
    # labels are the next character; windows follow each other in the stream
    assert torch.equal(d.train_y[:, :-1], d.train_x[:, 1:])
    assert torch.equal(d.train_y[:-1, -1], d.train_x[1:, 0])
    # the test text starts with the first sorted file, the training text with the second
    files = textdata.stdlib_files()
    assert textdata.decode(d.test_x[0]) == textdata.decode(
        textdata.encode(files[0].read_bytes()[:L])
    )
    assert textdata.decode(d.train_x[0]) == textdata.decode(
        textdata.encode(files[1].read_bytes()[:L])
    )
    again = textdata._corpus.__wrapped__(None)
    assert again[0][: L + 1] == files[1].read_bytes()[: L + 1]
    assert torch.equal(load_dataset("pytext", seed=1).test_x, d.test_x)  # the seed shuffles only


def test_pytext_reads_another_stdlib_named_by_the_environment(tmp_path, monkeypatch):
    # a corpus made under another Python: its files, not this interpreter's, become the text
    L = textdata.SEQ_LEN
    for i in range(12):
        (tmp_path / f"m{i:02d}.py").write_bytes(f"# file {i}\n".encode() * 400)
    monkeypatch.setenv(textdata.STDLIB_ENV, str(tmp_path))
    assert [f.name for f in textdata.stdlib_files()] == [f"m{i:02d}.py" for i in range(12)]
    d = load_dataset("pytext", seed=0)
    assert textdata.decode(d.test_x[0]) == ("# file 0\n" * 8)[:L]  # file 0 is held out
    assert textdata.decode(d.train_x[0]) == ("# file 1\n" * 8)[:L]
    assert len(d.test_x) == (400 * 9 + 400 * 10 - 1) // L  # files 0 and 10 (9 and 10 bytes a line)
    monkeypatch.setenv(textdata.STDLIB_ENV, str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="missing: no"):
        load_dataset("pytext", seed=0)


def test_text_vocabulary():
    ids = textdata.encode("def f(x):\n\treturn x  # é".encode())
    assert textdata.decode(ids) == "def f(x):\n\treturn x  # \ufffd\ufffd"  # 2 UTF-8 bytes
    assert ids.max() == textdata.OTHER and textdata.encode(b"\x00")[0] == textdata.OTHER


# -- models, registry, metric -------------------------------------------------------------


def test_models_sizes_and_shapes():
    torch.manual_seed(0)
    m = build_model("cnn1d", (1, 40), 10)
    assert num_parameters(m) == 25_162
    assert m(torch.zeros(3, 1, 40)).shape == (3, 10)
    lm = build_model("char_lstm", (64,), 98)
    assert num_parameters(lm) == 98_722
    assert lm(torch.zeros(3, 64, dtype=torch.int64)).shape == (3, 64, 98)
    assert build_model("mlp", (1, 40), 10)(torch.zeros(2, 1, 40)).shape == (2, 10)


def test_registry_defaults_and_refusals():
    assert resolve("mnist1d").model == "cnn1d" and resolve("pytext").model == "char_lstm"
    assert resolve("digits").model == "mlp" and resolve("mnist1d", "mlp").metric is ACCURACY
    assert resolve("pytext").metric is BPC
    for dataset, model in (("digits", "char_lstm"), ("pytext", "mlp"), ("digits", "cnn1d")):
        with pytest.raises(ValueError, match="does not fit"):
            resolve(dataset, model)
    with pytest.raises(ValueError, match="unknown data set"):
        resolve("imagenet")
    with pytest.raises(ValueError, match="unknown model"):
        resolve("digits", "vgg")
    for task in TASKS.values():
        task.metric.check_target(task.default_target)


def test_metrics_point_the_right_way():
    assert ACCURACY.value(123.0, 30, 40) == 0.75
    assert ACCURACY.reached(0.95, 0.95) and not ACCURACY.reached(0.94, 0.95)
    assert BPC.value(10 * math.log(2), 0, 5) == pytest.approx(2.0)
    assert BPC.reached(2.0, 2.5) and not BPC.reached(2.6, 2.5)
    with pytest.raises(ValueError, match="bits per character"):
        BPC.check_target(0)
    # an untrained LM with zero logits predicts uniformly: log2(V) bits per character
    lm = build_model("char_lstm", (8,), 98)
    torch.nn.init.zeros_(lm.head.weight)
    torch.nn.init.zeros_(lm.head.bias)
    x = torch.randint(0, 98, (5, 8))
    sums = evaluate(lm, x, x, batch=2)
    assert sums[2] == 40 and BPC.value(*sums) == pytest.approx(math.log2(98))
    assert loss_fn(lm(x), x).item() == pytest.approx(math.log(98))


def test_build_rank_needs_no_process_group():
    world = 3
    parts = [build_rank(resolve("pytext"), r, world, 16, seed=7) for r in range(world)]
    for p in parts[1:]:  # the same initial model on every rank, from the seed
        for a, b in zip(parts[0].model.parameters(), p.model.parameters(), strict=True):
            assert torch.equal(a, b)
    seen = [set(p.sampler) for p in parts]
    assert not (seen[0] & seen[1]) and not (seen[1] & seen[2])
    n_test = sum(len(p.test_y) for p in parts)
    assert n_test == len(parts[0].data.test_y)
    x, y = next(iter(parts[0].loader))
    assert x.shape == y.shape == (16, textdata.SEQ_LEN)
    assert not torch.distributed.is_initialized()


# -- the command line ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--dataset", "digits", "--model", "char_lstm"], "does not fit --dataset digits"),
        (["--dataset", "pytext", "--model", "cnn"], "does not fit --dataset pytext"),
        (["--dataset", "mnist1d", "--data-dir", "/tmp"], "no --data-dir"),
        (["--dataset", "pytext", "--target", "2"], "needs --eval-every"),
        (["--dataset", "pytext", "--eval-every", "5", "--target", "9"], "in (0, 8]"),
        (["--dataset", "pytext", "--eval-every", "5", "--stop-at-acc", "0.5"], "use --target"),
        (["--eval-every", "5", "--target", "1.5"], "target accuracy must be in (0, 1]"),
        (["--eval-every", "5", "--target", "x"], "takes a number"),
        (["--eval-every", "5", "--target", "0.9", "--stop-at-acc", "0.9"], "give one"),
    ],
)
def test_bad_workload_options_are_one_line_and_exit_2(argv, msg, capsys):
    assert cli.main(parse(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and msg in err, err


def test_target_defaults_to_the_workload_s():
    cfg = cli.make_config(
        parse(["--dataset", "pytext", "--eval-every", "5", "--target"]), "o", None
    )
    assert cfg["target"] == TASKS["pytext"].default_target and cfg["model"] == "char_lstm"
    cfg = cli.make_config(parse(["--eval-every", "5", "--stop-at-acc", "0.8"]), "o", None)
    assert cfg["target"] == 0.8 and cfg["model"] == "mlp"
    assert cli.make_config(parse([]), "o", None)["target"] is None


def test_bad_combination_from_the_shell():
    proc = subprocess.run(
        [sys.executable, "-m", "ina", "train", "--dataset", "digits", "--model", "char_lstm"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("ina train: --model char_lstm does not fit")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


# -- tiny runs through the real path ------------------------------------------------------


def run_train(out, *extra: str) -> dict:
    cmd = [sys.executable, "-m", "ina", "train", "--out", str(out), "--no-progress", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow
@pytest.mark.network
def test_mnist1d_cnn1d_reaches_a_low_target_through_the_switch(tmp_path):
    # dense INA is deterministic: 31.9 % at step 40, 39.9 % at 50, 46.5 % at 60 (measured)
    r = run_train(
        tmp_path, "--dataset", "mnist1d", "--workers", "2", "--max-steps", "80",
        "--eval-every", "10", "--target", "0.39", "--step-log", "--check-sync",
    )  # fmt: skip
    assert r["model"] == "cnn1d" and r["metric"]["column"] == "test_acc"
    assert r["target"] == 0.39 and r["target_step"] == r["steps"] == 50
    assert r["replicas_identical"] and r["switch_counters"]["aggregated"][0] > 0
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "test_acc" in header
    steps = (tmp_path / "steps.csv").read_text().splitlines()
    assert steps[0].endswith(",test_acc")
    assert float(steps[-1].split(",")[-1]) == pytest.approx(0.39917, abs=1e-4)


@pytest.mark.slow
@pytest.mark.network
def test_pytext_char_lstm_reaches_a_low_target_compressed(tmp_path):
    # deterministic too: 4.90 bits per character at step 10, 4.17 at step 20 (measured)
    r = run_train(
        tmp_path, "--dataset", "pytext", "--workers", "2", "--batch-size", "8",
        "--max-steps", "60", "--eval-every", "10", "--target", "4.5",
        "--compression", "homomorphic", "--density", "0.1", "--check-sync",
    )  # fmt: skip
    assert r["model"] == "char_lstm" and r["metric"]["column"] == "test_bpc"
    assert r["metric"]["higher_is_better"] is False and r["final_accuracy"] is None
    assert r["target_step"] == r["steps"] == 20
    assert r["final_metric"] <= 4.5 and r["replicas_identical"]
    assert all(rank["compressed_calls"] > 0 for rank in r["ranks"])
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "test_bpc" in header and "test_acc" not in header
