"""Tests for examples/: fast unit tests of the shared helpers (no MPI), then real 2-rank Horovod
runs of the trainers and the benchmark through plain `mpirun` with the project venv's python.

The MPI tests need `.venv` with Horovod (PyTorch + TensorFlow) and Open MPI's `mpirun`
(`make setup`); when either is missing they FAIL with a message saying so: they never skip.
Every launch is bounded by a timeout and its whole process group is killed when it expires.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"

# Measured on the 2-core test machine (2 ranks, digits, defaults: batch 32/rank, lr 0.05 x 2, SGD
# momentum 0.9, 1 warmup epoch, 3 epochs): test accuracy 0.92-0.96 (PyTorch, seeds 42/1/2) and 0.92
# (Keras, seed 42). The bar leaves room for noise but fails a run that did not really learn
# (chance is 0.10).
ACCURACY_BAR = 0.85


def _load_common():
    spec = importlib.util.spec_from_file_location("hvd_common", EXAMPLES / "hvd_common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


common = _load_common()


# ------------------------------------------------------------------------------- IDX parsing
def _idx_bytes(code: int, dims: list[int], payload: bytes) -> bytes:
    """An IDX file built by hand from the format description (not with the code under test)."""
    return bytes([0, 0, code, len(dims)]) + struct.pack(f">{len(dims)}I", *dims) + payload


def test_read_idx_ubyte_images_plain_and_gzipped(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    raw = _idx_bytes(0x08, [2, 3, 4], images.tobytes())
    (tmp_path / "plain").write_bytes(raw)
    with gzip.open(tmp_path / "packed.gz", "wb") as f:
        f.write(raw)
    for name in ("plain", "packed.gz"):
        got = common.read_idx(tmp_path / name)
        assert got.dtype == np.uint8 and got.shape == (2, 3, 4)
        assert np.array_equal(got, images)


def test_read_idx_big_endian_ints_and_floats(tmp_path):
    ints = np.array([1, -2, 70000], dtype=np.int32)
    (tmp_path / "i").write_bytes(_idx_bytes(0x0C, [3], ints.astype(">i4").tobytes()))
    assert common.read_idx(tmp_path / "i").tolist() == [1, -2, 70000]
    floats = np.array([[0.5, -1.25]], dtype=np.float32)
    (tmp_path / "f").write_bytes(_idx_bytes(0x0D, [1, 2], floats.astype(">f4").tobytes()))
    assert common.read_idx(tmp_path / "f").tolist() == [[0.5, -1.25]]


def test_read_idx_rejects_bad_magic_and_truncated_files(tmp_path):
    (tmp_path / "bad").write_bytes(b"\x01\x02\x08\x01" + b"\x00" * 8)
    with pytest.raises(ValueError, match="not an IDX file"):
        common.read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes(_idx_bytes(0x08, [10], b"\x00" * 9))
    with pytest.raises(ValueError, match="header says"):
        common.read_idx(tmp_path / "short")


def test_write_idx_round_trips(tmp_path):
    a = np.random.RandomState(0).randint(0, 255, size=(5, 7, 7)).astype(np.uint8)
    common.write_idx(tmp_path / "a.gz", a)
    assert np.array_equal(common.read_idx(tmp_path / "a.gz"), a)


def test_load_dataset_from_an_idx_directory(tmp_path):
    rng = np.random.RandomState(1)
    x_tr, x_te = rng.randint(0, 256, (6, 28, 28)), rng.randint(0, 256, (4, 28, 28))
    y_tr, y_te = np.array([0, 1, 2, 3, 4, 9]), np.array([9, 8, 7, 6])
    # Mixed naming, as found in the wild: gzipped canonical names and the `.idx` dotted variant.
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(
        gzip.compress(_idx_bytes(0x08, [6, 28, 28], x_tr.astype(np.uint8).tobytes()))
    )
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(_idx_bytes(0x08, [6], y_tr.astype(np.uint8).tobytes()))
    (tmp_path / "t10k-images.idx3-ubyte").write_bytes(_idx_bytes(0x08, [4, 28, 28], x_te.astype(np.uint8).tobytes()))
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(
        gzip.compress(_idx_bytes(0x08, [4], y_te.astype(np.uint8).tobytes()))
    )
    xa, ya, xb, yb, classes, source = common.load_dataset(tmp_path, standardize=False)
    assert xa.shape == (6, 28, 28) and xb.shape == (4, 28, 28) and xa.dtype == np.float32
    assert np.allclose(xa * 255, x_tr) and ya.tolist() == y_tr.tolist() and yb.tolist() == y_te.tolist()
    assert classes == 10 and "IDX" in source


def test_load_dataset_names_the_missing_idx_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
        common.load_dataset(tmp_path)


@pytest.mark.full_setup
def test_digits_fallback_and_synthetic_data():
    x_tr, y_tr, x_te, y_te, classes, source = common.load_dataset(standardize=False)
    assert x_tr.shape[1:] == (8, 8) and len(x_tr) + len(x_te) == 1797 and classes == 10
    assert 0.0 <= x_tr.min() and x_tr.max() <= 1.0 and "digits" in source
    z_tr, _, z_te, *_ = common.load_dataset()
    assert abs(z_tr.mean()) < 1e-4 and abs(z_tr.std() - 1) < 1e-4 and z_te.shape == x_te.shape
    x2 = common.load_dataset(standardize=False)[0]
    assert np.array_equal(x_tr, x2), "the train/test split must not depend on anything random"
    xs, ys, *_ = common.load_dataset(synthetic=True, synthetic_size=(64, 16))
    assert xs.shape == (64, 28, 28) and set(ys) <= set(range(10))


# ---------------------------------------------------------------------------------- sharding
@pytest.mark.parametrize("n,size,batch", [(1437, 2, 32), (1437, 3, 32), (100, 4, 7), (10, 3, 1), (65, 2, 64)])
def test_shards_cover_every_sample_exactly_once_with_equal_step_counts(n, size, batch):
    for epoch in (0, 1, 5):
        per_rank = [common.epoch_batches(n, r, size, batch, epoch=epoch, seed=3) for r in range(size)]
        steps = {len(b) for b in per_rank}
        assert steps == {common.steps_per_epoch(n, size, batch)}, "every rank must take the same steps"
        flat = np.concatenate([np.concatenate(b) for b in per_rank])
        assert sorted(flat.tolist()) == list(range(n)), "each sample on exactly one rank, once"
        for batches in per_rank:
            assert all(1 <= len(b) <= batch + (n % size != 0) for b in batches)


def test_shard_order_is_per_epoch_and_reproducible():
    a0 = common.shard_indices(100, 0, 2, epoch=0, seed=1)
    assert np.array_equal(a0, common.shard_indices(100, 0, 2, epoch=0, seed=1))
    assert not np.array_equal(a0, common.shard_indices(100, 0, 2, epoch=1, seed=1))
    with pytest.raises(ValueError):
        common.shard_indices(1, 0, 2)


def test_warmup_ramps_from_base_to_scaled_lr():
    lrs = [common.warmup_lr(0.1, 4, e / 10, warmup_epochs=2) for e in range(0, 31)]
    assert lrs[0] == pytest.approx(0.1) and lrs[20] == pytest.approx(0.4) and lrs[-1] == pytest.approx(0.4)
    assert all(a <= b for a, b in zip(lrs, lrs[1:], strict=False))
    assert common.warmup_lr(0.1, 4, 0.0, warmup_epochs=0) == pytest.approx(0.4)


# ------------------------------------------------------------------------------- checkpoints
def _leftovers(directory: Path):
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_atomic_write_replaces_whole_file(tmp_path):
    target = tmp_path / "sub" / "checkpoint-0001.pt"
    common.atomic_write_bytes(target, b"first")
    common.atomic_write_bytes(target, b"second version")
    assert target.read_bytes() == b"second version" and _leftovers(target.parent) == []


@pytest.mark.parametrize("failing", ["fsync", "replace", "write"])
def test_atomic_write_interrupted_keeps_old_file_and_no_partial(tmp_path, monkeypatch, failing):
    target = tmp_path / "checkpoint-0002.pt"
    target.write_bytes(b"old complete checkpoint")

    class Interrupted(BaseException):  # like KeyboardInterrupt/SystemExit arriving mid-write
        pass

    def boom(*a, **k):
        raise Interrupted()

    if failing == "write":
        real_fdopen = os.fdopen

        def fdopen(fd, *a, **k):
            f = real_fdopen(fd, *a, **k)
            real_write = f.write

            class Half:  # writes half the bytes, then is interrupted
                def __enter__(self):
                    return self

                def __exit__(self, *exc):
                    f.close()

                def write(self, data):
                    real_write(data[: len(data) // 2])
                    raise Interrupted()

            return Half()

        monkeypatch.setattr(common.os, "fdopen", fdopen)
    else:
        monkeypatch.setattr(common.os, failing, boom)
    with pytest.raises(Interrupted):
        common.atomic_write_bytes(target, b"N" * 100_000)
    monkeypatch.undo()
    assert target.read_bytes() == b"old complete checkpoint"
    assert _leftovers(tmp_path) == [], "the temp file must be removed on failure"


def test_sigkill_mid_write_never_leaves_a_partial_checkpoint(tmp_path):
    """A writer killed (SIGKILL, no cleanup possible) between writing and renaming: the checkpoint
    under its real name is still the old complete one; resume ignores the stray temp file."""
    (tmp_path / "checkpoint-0001.pt").write_bytes(b"epoch 1 complete")
    writer = textwrap.dedent(f"""
        import importlib.util, os, sys, time
        spec = importlib.util.spec_from_file_location("c", {str(EXAMPLES / "hvd_common.py")!r})
        c = importlib.util.module_from_spec(spec); spec.loader.exec_module(c)
        real_fsync = os.fsync
        def slow_fsync(fd):
            real_fsync(fd)
            print("writing", flush=True)
            time.sleep(60)  # the kill lands here: data written, not yet renamed
        c.os.fsync = slow_fsync
        c.atomic_write_bytes(c.checkpoint_path({str(tmp_path)!r}, 2, "pt"), b"x" * 5_000_000)
    """)
    proc = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert not (tmp_path / "checkpoint-0002.pt").exists()
    assert len(_leftovers(tmp_path)) == 1
    epoch, path = common.latest_checkpoint(tmp_path, "pt")
    assert (epoch, path.name) == (1, "checkpoint-0001.pt") and path.read_bytes() == b"epoch 1 complete"
    common.prune_checkpoints(tmp_path, "pt")
    assert _leftovers(tmp_path) == []


def test_twenty_kills_at_random_moments_of_a_writing_rank_each_resume_from_a_whole_checkpoint(tmp_path):
    """Issue 24's proof by force: a rank that writes a checkpoint after every epoch, with the
    examples' own writer and pruning (4 MB each, so a kill often lands mid-write), is SIGKILLed 20
    times at random moments. After each kill the newest checkpoint under its real name loads whole
    and holds its own epoch, no temp file is mistaken for one, and the next run resumes after it.
    (The writer is numpy-only so 20 starts stay fast; tests/test_real_runs.py kills rank 0 of a real
    Horovod job while it writes.)"""
    seed = int(time.time())
    rng = random.Random(seed)
    writer = textwrap.dedent(f"""
        import importlib.util, io, sys
        import numpy as np
        spec = importlib.util.spec_from_file_location("c", {str(EXAMPLES / "hvd_common.py")!r})
        c = importlib.util.module_from_spec(spec); spec.loader.exec_module(c)
        done, _ = c.latest_checkpoint({str(tmp_path)!r}, "npy")
        print(done, flush=True)
        for epoch in range(done + 1, 10_000):
            buf = io.BytesIO()
            np.save(buf, np.full(500_000, epoch, dtype=np.float64))
            c.atomic_write_bytes(c.checkpoint_path({str(tmp_path)!r}, epoch, "npy"), buf.getvalue())
            c.prune_checkpoints({str(tmp_path)!r}, "npy")
    """)
    resumed, found, mid_write, last = [], [0], 0, 0
    for _ in range(20):
        proc = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
        try:
            resumed.append(int(proc.stdout.readline()))
            time.sleep(rng.uniform(0.0, 0.3))
        finally:
            proc.kill()
            proc.wait(timeout=10)
        mid_write += bool(_leftovers(tmp_path))
        done, path = common.latest_checkpoint(tmp_path, "npy")
        assert done >= last, f"seed {seed}: the newest whole checkpoint went back from {last} to {done}"
        if path is not None:
            assert (np.load(path) == done).all(), f"seed {seed}: {path.name} does not hold epoch {done} whole"
        last = done
        found.append(done)
    print(f"20 kills (seed {seed}): {mid_write} left a temp file behind; runs resumed after epochs {resumed}")
    assert resumed == found[:-1] and last > 0, f"seed {seed}: each run resumes after the newest whole checkpoint"


def test_latest_checkpoint_and_prune(tmp_path):
    assert common.latest_checkpoint(tmp_path / "missing", "pt") == (0, None)
    for e in (1, 2, 10, 3):
        common.atomic_write_bytes(common.checkpoint_path(tmp_path, e, "pt"), b"%d" % e)
    common.atomic_write_bytes(common.checkpoint_path(tmp_path, 99, "npz"), b"other framework")
    assert common.latest_checkpoint(tmp_path, "pt") == (10, tmp_path / "checkpoint-0010.pt")
    common.prune_checkpoints(tmp_path, "pt", keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint-0003.pt",
        "checkpoint-0010.pt",
        "checkpoint-0099.npz",
    ]
    assert common.rank_suffixed(tmp_path / "params.npy", 1) == tmp_path / "params.rank1.npy"


# --------------------------------------------------------------------------- real 2-rank runs
_checked: dict[str, None] = {}


def require_horovod(module: str) -> None:
    """Fail (never skip) with a clear message when the venv, Horovod or mpirun is missing."""
    if module in _checked:
        return
    if not VENV_PYTHON.exists():
        pytest.fail(
            f"{VENV_PYTHON} does not exist: the example tests need the project venv with Horovod (run `make setup`)"
        )
    if shutil.which("mpirun") is None:
        pytest.fail("mpirun is not on PATH: install Open MPI (`make setup` runs scripts/setup/host-packages.sh)")
    probe = subprocess.run(
        [str(VENV_PYTHON), "-c", f"import {module}"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    if probe.returncode != 0:
        pytest.fail(
            f"`import {module}` fails in {VENV_PYTHON}: Horovod with this framework is not "
            f"installed (run `make setup`):\n{probe.stderr[-2000:]}"
        )
    _checked[module] = None


def run_mpi(script: str, *args: str, np_: int = 2, timeout: float = 120) -> str:
    """Run examples/<script> on `np_` ranks with plain mpirun; return stdout+stderr, fail on error."""
    cmd = [
        "mpirun",
        "-np",
        str(np_),
        "--oversubscribe",
        "--bind-to",
        "none",
        "--map-by",
        "slot",
        "-x",
        "OMP_NUM_THREADS=1",
        "-x",
        "TF_CPP_MIN_LOG_LEVEL=3",
        "-x",
        "PYTHONUNBUFFERED=1",
        str(VENV_PYTHON),
        str(EXAMPLES / script),
        *args,
    ]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    return run_launched(cmd, timeout)


def run_launched(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> str:
    """Run a launcher's command line in its own session (by default with one OpenMP thread and quiet
    TensorFlow); return stdout+stderr, fail on error or timeout."""
    env = env or {**os.environ, "OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and every rank it started
        out, _ = proc.communicate()
        pytest.fail(f"timed out after {timeout}s: {' '.join(cmd)}\n{out[-4000:]}")
    took = time.monotonic() - start
    print(f"$ {' '.join(cmd)}  # {took:.1f}s\n{out}")
    assert proc.returncode == 0, f"exit {proc.returncode}: {' '.join(cmd)}\n{out[-4000:]}"
    return out


EPOCH_RE = re.compile(r"^epoch (\d+)/(\d+): loss=([\d.]+) accuracy=([\d.]+) .*images/sec=([\d.]+)", re.M)
FINAL_RE = re.compile(r"^final: accuracy=([\d.]+) loss=([\d.]+) images/sec=([\d.]+) ranks=(\d+)$", re.M)


def parse_run(out: str):
    epochs = [(int(m[1]), float(m[3]), float(m[4])) for m in EPOCH_RE.finditer(out)]
    final = FINAL_RE.findall(out)
    assert len(final) == 1, f"expected one final line (rank 0 only):\n{out[-3000:]}"
    acc, loss, ips, ranks = final[0]
    return epochs, float(acc), float(loss), float(ips), int(ranks)


def check_training(out: str, epochs_expected: list[int]):
    epochs, acc, _, ips, ranks = parse_run(out)
    assert [e for e, _, _ in epochs] == epochs_expected, "one progress line per epoch, from rank 0 only"
    assert ranks == 2 and ips > 0
    if len(epochs) > 1:
        assert epochs[-1][1] < epochs[0][1], f"training loss did not fall: {epochs}"
    assert acc >= ACCURACY_BAR, f"test accuracy {acc} below the stated bar {ACCURACY_BAR}"
    return acc


def assert_identical_params(prefix: Path, ranks: int = 2) -> np.ndarray:
    arrays = [np.load(common.rank_suffixed(prefix, r)) for r in range(ranks)]
    for r, a in enumerate(arrays[1:], 1):
        assert a.shape == arrays[0].shape and a.tobytes() == arrays[0].tobytes(), (
            f"rank {r} parameters differ from rank 0's"
        )
    return arrays[0]


@pytest.mark.full_setup
@pytest.mark.parametrize("script,ext", [("pytorch_train.py", "pt"), ("keras_train.py", "npz")])
def test_trainer_two_ranks_learns_identically_and_resumes_exactly(tmp_path, script, ext):
    """2 ranks, 3 epochs on digits: loss falls, accuracy beats the bar, both ranks end with
    bit-identical parameters. Then the job is restarted as if it had been killed while writing the
    epoch-3 checkpoint (that checkpoint missing, a stray temp file left): it must resume at epoch 3
    from the epoch-2 checkpoint and end with exactly the parameters of the uninterrupted run. A run
    started once more (a requeue after the last epoch) says there is nothing to do and trains nothing."""
    require_horovod("horovod.torch" if ext == "pt" else "horovod.tensorflow.keras")
    ckpt = tmp_path / "ckpt"
    straight = run_mpi(
        script, "--epochs", "3", "--checkpoint-dir", str(ckpt), "--final-params-out", str(tmp_path / "straight.npy")
    )
    check_training(straight, [1, 2, 3])
    reference = assert_identical_params(tmp_path / "straight.npy")
    assert [p.name for p in sorted(ckpt.iterdir())] == [f"checkpoint-0002.{ext}", f"checkpoint-0003.{ext}"]

    (ckpt / f"checkpoint-0003.{ext}").unlink()
    (ckpt / f".checkpoint-0003.{ext}.abc123.tmp").write_bytes(b"half a checkpoint")
    resumed = run_mpi(
        script, "--epochs", "3", "--checkpoint-dir", str(ckpt), "--final-params-out", str(tmp_path / "resumed.npy")
    )
    assert f"resuming from checkpoint {ckpt / f'checkpoint-0002.{ext}'} after epoch 2" in resumed
    check_training(resumed, [3])
    params = assert_identical_params(tmp_path / "resumed.npy")
    assert params.tobytes() == reference.tobytes(), "resumed run diverged from the uninterrupted run"
    assert common.latest_checkpoint(ckpt, ext)[0] == 3 and _leftovers(ckpt) == []

    again = run_mpi(script, "--epochs", "3", "--checkpoint-dir", str(ckpt))  # a requeue after the last epoch
    assert "nothing to do: 3 epochs already completed (--epochs 3)" in again, again
    assert not FINAL_RE.search(again) and not EPOCH_RE.search(again), again


@pytest.mark.full_setup
def test_synthetic_benchmark_prints_json_line():
    require_horovod("horovod.torch")
    out = run_mpi(
        "pytorch_synthetic_benchmark.py",
        "--model",
        "cnn",
        "--batch-size",
        "16",
        "--num-warmup-batches",
        "2",
        "--num-batches-per-iter",
        "3",
        "--num-iters",
        "3",
        "--fp16-allreduce",
        timeout=90,
    )
    assert re.search(r"^total img/sec on 2 CPU rank\(s\): [\d.]+ \+-[\d.]+$", out, re.M), out
    lines = [line for line in out.splitlines() if line.startswith('{"metric"')]
    assert len(lines) == 1, out
    result = json.loads(lines[0])
    assert result["metric"] == "img_per_sec" and result["ranks"] == 2 and result["fp16_allreduce"]
    assert result["total"] > 0 and result["per_rank"] > 0 and len(result["per_rank_each"]) == 2
    assert result["total"] == pytest.approx(sum(result["per_rank_each"]), rel=0.05)


@pytest.mark.full_setup
def test_synthetic_benchmark_trains_ddp_under_torchrun_with_its_ranks():
    """docs/performance.md's torchrun line, as written, in the venv: torchrun's own variables (RANK, WORLD_SIZE,
    LOCAL_RANK, LOCAL_WORLD_SIZE) place each worker and --ddp env:// meets at its MASTER_ADDR/PORT."""
    page = (ROOT / "docs" / "performance.md").read_text()
    command = "torchrun --standalone --nproc-per-node 2 examples/pytorch_synthetic_benchmark.py --ddp env://"
    assert command in " ".join(page.split()), "docs/performance.md no longer shows this torchrun line"
    venv_first = {**os.environ, "PATH": f"{VENV_PYTHON.parent}{os.pathsep}{os.environ['PATH']}"}
    out = run_launched(command.split(), timeout=180, env=venv_first)
    (line,) = [line for line in out.splitlines() if line.startswith('{"metric"')]
    result = json.loads(line)
    assert result["metric"] == "img_per_sec" and result["ranks"] == 2 and len(result["per_rank_each"]) == 2
    assert result["total"] == pytest.approx(sum(result["per_rank_each"]), rel=0.05)


TORCH_EPOCH_RE = re.compile(r"^epoch (\d+)/\d+: loss=[\d.]+ accuracy=[\d.]+ val_accuracy=([\d.]+) ", re.M)


@pytest.mark.full_setup
def test_ddp_example_learns_under_torchrun_resumes_after_its_checkpoint_and_then_has_nothing_to_do(tmp_path):
    """examples/torch_train.py started by torchrun as its docstring shows (it reads only torch's variables):
    3 epochs on 2 workers learn; the same line with --epochs 4 resumes after epoch 3 and trains epoch 4 only;
    once more (a requeue after the last epoch), it says there is nothing to do and trains nothing."""
    command = "torchrun --standalone --nproc-per-node 2 examples/torch_train.py"
    assert command in (EXAMPLES / "torch_train.py").read_text(), "the example's docstring no longer shows it"
    venv_first = {**os.environ, "PATH": f"{VENV_PYTHON.parent}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}
    checkpoint = tmp_path / "ck.pt"

    def run(epochs: int) -> tuple[str, list[tuple[str, str]]]:
        argv = [*command.split(), "--epochs", str(epochs), "--checkpoint", str(checkpoint)]
        out = run_launched(argv, timeout=180, env=venv_first)
        return out, TORCH_EPOCH_RE.findall(out)

    out, epochs = run(3)
    assert [e for e, _ in epochs] == ["1", "2", "3"] and "done: 3 epochs on 2 ranks" in out, out[-3000:]
    assert float(epochs[-1][1]) >= ACCURACY_BAR, f"validation accuracy {epochs[-1][1]} below {ACCURACY_BAR}"
    out, epochs = run(4)
    assert f"resuming from {checkpoint} after epoch 3 + 0 steps" in out and [e for e, _ in epochs] == ["4"], out
    out, epochs = run(4)
    assert "nothing to do: 4 epochs already completed (--epochs 4)" in out and epochs == [], out[-3000:]
