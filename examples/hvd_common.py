"""Shared helpers for the Horovod examples (framework-free: numpy and the standard library only).

- Data: `load_dataset` reads real MNIST / Fashion-MNIST IDX files from a directory (plain or .gz),
  falls back to the 8x8 digits shipped beside the examples (data/digits.csv.gz: scikit-learn's
  bundled copy of the UCI optdigits set, the file `sklearn.datasets.load_digits` reads; numpy reads
  it here, so neither scikit-learn nor a download is needed), or makes synthetic images.
- Sharding: `epoch_batches` gives each rank a disjoint shard of a per-epoch shuffle, cut into the
  same number of steps on every rank (Horovod needs every rank to take part in every allreduce).
- Checkpoints: `atomic_write_bytes` (temp file in the same directory + fsync + os.replace), so a
  crash or kill mid-write never leaves a half-written checkpoint; `latest_checkpoint` finds the
  newest complete one.
- Stopping early: `stop_on_signal` makes SIGUSR1 (SLURM's --signal=B:USR1@N before the time limit,
  passed on by hpcbundle's batch script) a request to stop after the epoch's checkpoint; every rank
  votes at the epoch's end, so all stop after the same epoch.

The trainers import this from their own directory, so examples/ can be copied anywhere (images
ship it at /examples).
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import signal
import tempfile
from pathlib import Path

import numpy as np

# IDX type codes -> big-endian numpy dtypes (http://yann.lecun.com/exdb/mnist/).
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
DIGITS = Path(__file__).resolve().parent / "data" / "digits.csv.gz"
"""The 8x8 digits (UCI Optical Recognition of Handwritten Digits, CC BY 4.0), byte for byte the copy
scikit-learn bundles (BSD-3-Clause), shipped with the examples: images copy examples/ whole."""
_IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}


# ----------------------------------------------------------------------------------------- data
def read_idx(path) -> np.ndarray:
    """Parse one IDX file (optionally gzipped) into a numpy array of its declared type and shape."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise ValueError(f"{path}: not an IDX file (bad magic {data[:4].hex()})")
    ndim = data[3]
    dims = [int(d) for d in np.frombuffer(data, ">u4", count=ndim, offset=4)] if ndim else []
    dtype = np.dtype(_IDX_DTYPES[data[2]])
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    offset = 4 + 4 * ndim
    if len(data) - offset != expected:
        raise ValueError(f"{path}: header says {dims} ({expected} bytes), file has {len(data) - offset}")
    return np.frombuffer(data, dtype, offset=offset).reshape(dims).astype(dtype.newbyteorder("="))


def write_idx(path, array: np.ndarray) -> None:
    """Write `array` as an IDX file (gzipped if the name ends in .gz). Used by tests and tools."""
    codes = {np.dtype(v).newbyteorder("="): k for k, v in _IDX_DTYPES.items()}
    code = codes[array.dtype.newbyteorder("=")]
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    payload = header + np.ascontiguousarray(array).astype(_IDX_DTYPES[code]).tobytes()
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(payload)


def _find_idx(data_dir: Path, stem: str) -> Path:
    # Accept the canonical names, the `train-images.idx3-ubyte` variant, with or without .gz.
    variants = [stem, stem.replace("-idx", ".idx")]
    for name in variants:
        for candidate in (data_dir / name, data_dir / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    raise FileNotFoundError(f"{data_dir}: no {stem}[.gz] (expected MNIST/Fashion-MNIST IDX files)")


def load_dataset(data_dir=None, synthetic=False, seed=0, synthetic_size=(4096, 1024), image_size=28, standardize=True):
    """Return (x_train, y_train, x_test, y_test, num_classes, source).

    Images are float32 with shape (N, H, W), scaled to [0, 1] and then (standardize=True) shifted
    and scaled by the training set's mean and std; labels are int64.
    """
    data = _load_raw(data_dir, synthetic, seed, synthetic_size, image_size)
    if standardize:
        mean, std = float(data[0].mean()), float(data[0].std()) or 1.0
        data = ((data[0] - mean) / std, data[1], (data[2] - mean) / std) + data[3:]
    return data


def _load_raw(data_dir, synthetic, seed, synthetic_size, image_size):
    if synthetic:
        # Learnable synthetic data: one random template per class plus noise (speed is the point).
        rng = np.random.RandomState(seed)
        templates = rng.rand(10, image_size, image_size).astype(np.float32)

        def make(n):
            y = rng.randint(0, 10, size=n).astype(np.int64)
            x = 0.5 * templates[y] + 0.5 * rng.rand(n, image_size, image_size).astype(np.float32)
            return x, y

        (x_tr, y_tr), (x_te, y_te) = make(synthetic_size[0]), make(synthetic_size[1])
        return x_tr, y_tr, x_te, y_te, 10, f"synthetic {image_size}x{image_size}"
    if data_dir:
        d = Path(data_dir)
        arrays = {k: read_idx(_find_idx(d, stem)) for k, stem in _IDX_FILES.items()}
        for k in ("x_train", "x_test"):
            if arrays[k].ndim != 3:
                raise ValueError(f"{d}: {k} has shape {arrays[k].shape}, expected (N, H, W)")
            scale = 255.0 if arrays[k].dtype == np.uint8 else 1.0
            arrays[k] = arrays[k].astype(np.float32) / scale
        for k in ("y_train", "y_test"):
            arrays[k] = arrays[k].astype(np.int64)
        num_classes = int(max(arrays["y_train"].max(), arrays["y_test"].max())) + 1
        return (
            arrays["x_train"],
            arrays["y_train"],
            arrays["x_test"],
            arrays["y_test"],
            num_classes,
            f"IDX files in {d}",
        )
    table = np.loadtxt(DIGITS, delimiter=",", dtype=np.float32)  # 1797 rows: 64 pixels (0..16), the digit
    x = table[:, :-1].reshape(-1, 8, 8) / 16.0
    y = table[:, -1].astype(np.int64)
    order = np.random.RandomState(1234).permutation(len(x))  # fixed split, independent of --seed
    n_test = len(x) // 5
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test], 10, "digits 8x8 (UCI optdigits, as scikit-learn bundles it)"


# ------------------------------------------------------------------------------------- sharding
def shard_indices(n: int, rank: int, size: int, epoch: int = 0, seed: int = 0, shuffle=True) -> np.ndarray:
    """This rank's disjoint share of range(n): every index lands on exactly one rank.

    The permutation depends only on (seed, epoch), so all ranks agree on it without talking, and a
    resumed run sees the same order for the same epoch.
    """
    if n < size:
        raise ValueError(f"{n} samples cannot be shared by {size} ranks")
    order = np.random.RandomState(seed + 7919 * epoch).permutation(n) if shuffle else np.arange(n)
    return order[rank::size]


def threads_per_rank(local_size: int) -> int:
    """CPU threads for each of `local_size` ranks on this node: OMP_NUM_THREADS when the launch line
    sets it (hpcbundle's batch scripts set it to the CPUs each rank asked SLURM for), else the cores
    this process may run on (SLURM's cgroup, taskset or the launcher's binding; os.cpu_count() would
    count the whole host) shared out, at least one."""
    given = os.environ.get("OMP_NUM_THREADS", "")
    if re.fullmatch(r"[1-9][0-9]{0,3}", given):
        return int(given)
    return max(1, len(os.sched_getaffinity(0)) // local_size)


# Where each launcher tells a process its place: (rank, size, local rank, local size) variables,
# the innermost launcher first: torchrun under srun leaves SLURM's (per node) in its workers too.
LAUNCHER_RANKS = (
    ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),  # torchrun (torch.distributed.run)
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),  # MPICH's and Intel MPI's Hydra
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
)


def launcher_ranks(env=os.environ) -> tuple[int, int, int, int]:
    """(rank, size, local rank, local size) from the launcher's variables, for programs that do not
    initialise MPI (torch DDP started by mpirun, mpiexec.hydra, srun or torchrun); (0, 1, 0, 1) alone.

    >>> launcher_ranks({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "2"})
    (3, 4, 1, 2)
    >>> slurm = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "1"}
    >>> launcher_ranks({**slurm, "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"})
    (5, 8, 1, 4)
    """
    for names in LAUNCHER_RANKS:
        if all(re.fullmatch(r"[0-9]{1,7}", env.get(name, "")) for name in names):
            return tuple(int(env[name]) for name in names)  # type: ignore[return-value]
    return 0, 1, 0, 1


def elastic(env=os.environ) -> bool:
    """Whether horovodrun started this process in elastic mode (--min-np/--max-np, a discovery script).

    >>> elastic({"HOROVOD_ELASTIC": "1"}), elastic({})
    (True, False)
    """
    return env.get("HOROVOD_ELASTIC") == "1"


class Epoch:
    """The completed-epoch counter of a job that is not elastic, in place of hvd.elastic's state:
    commit() does nothing (such a job restarts from its checkpoint instead)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def commit(self) -> None:
        """Nothing to commit outside elastic mode."""


def local_gpu(local_rank: int, visible: int) -> int:
    """The GPU index this rank uses among the `visible` ones: its local rank, or 0 where the launcher
    gave each rank one GPU of its own (srun --gpus-per-task=1)."""
    return local_rank % visible


def steps_per_epoch(n: int, size: int, batch_size: int) -> int:
    """Steps each rank takes per epoch: the data set divided by size, then by the per-rank batch.

    Based on the smallest shard (shards differ by at most one sample), so no rank runs dry."""
    return max(1, -(-(n // size) // batch_size))


def epoch_batches(n, rank, size, batch_size, epoch=0, seed=0, shuffle=True):
    """This rank's batches for `epoch`: one index array per step, the same number of steps on every
    rank, none empty, each at most batch_size samples (batch_size + 1 where shards are uneven)."""
    idx = shard_indices(n, rank, size, epoch, seed, shuffle)
    return np.array_split(idx, steps_per_epoch(n, size, batch_size))


def warmup_lr(base_lr: float, size: int, epoch: float, warmup_epochs: float) -> float:
    """Goyal et al. gradual warmup, as in hvd.callbacks.LearningRateWarmupCallback:
    ramp linearly from base_lr to base_lr * size over `warmup_epochs` (fractional epochs)."""
    if warmup_epochs <= 0 or epoch >= warmup_epochs:
        return base_lr * size
    return base_lr * (epoch * (size - 1) / warmup_epochs + 1)


def steady_throughput(epoch_stats) -> float:
    """images/sec over [(images, seconds), ...] per epoch, leaving out the run's first epoch
    (graph tracing, allocator and thread-pool warm-up) whenever a later one exists."""
    stats = epoch_stats[1:] or epoch_stats
    seconds = sum(s for _, s in stats)
    return sum(n for n, _ in stats) / seconds if seconds > 0 else 0.0


# ------------------------------------------------------------------------------ stopping early
_stop = {"asked": False}


def stop_on_signal(signum: int = signal.SIGUSR1) -> None:
    """Remember `signum` as a request to stop at the next epoch's end (the handler only sets a flag:
    the rank goes on to finish its epoch and its collectives)."""
    signal.signal(signum, lambda *_: _stop.update(asked=True))


def ignore_late_stop(signum: int = signal.SIGUSR1) -> None:
    """Ignore `signum` from here on: the training is done and its checkpoint written, so a signal that
    comes now (while Horovod shuts down, or after Python reset its handlers on exit) must not end the
    rank with status 128+signum and fail a job that finished."""
    signal.signal(signum, signal.SIG_IGN)


def stop_asked() -> float:
    """1.0 once this rank got the stop signal, else 0.0: the vote each rank adds to the epoch's allreduce."""
    return 1.0 if _stop["asked"] else 0.0


# ---------------------------------------------------------------------------------- checkpoints
CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)\.(\w+)$")


def atomic_write_bytes(path, data: bytes) -> None:
    """Write `data` to `path` so that `path` is always either absent/old or complete.

    The bytes go to a temp file in the same directory (same file system, so the rename is atomic),
    which is flushed and fsynced before os.replace; the directory is fsynced afterwards so the rename
    itself survives a crash. On any error the temp file is removed and the old file is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide checkpoints from the rest of the group
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def checkpoint_path(directory, epoch: int, ext: str) -> Path:
    """Checkpoint written after `epoch` completed epochs."""
    return Path(directory) / f"checkpoint-{epoch:04d}.{ext}"


def latest_checkpoint(directory, ext: str):
    """(epochs_completed, path) of the newest complete checkpoint, or (0, None)."""
    best = (0, None)
    if directory and Path(directory).is_dir():
        for p in Path(directory).iterdir():
            m = CHECKPOINT_RE.match(p.name)
            if m and m.group(2) == ext and int(m.group(1)) > best[0]:
                best = (int(m.group(1)), p)
    return best


def prune_checkpoints(directory, ext: str, keep: int = 2) -> None:
    """Keep the newest `keep` checkpoints; drop stale temp files left by a killed writer."""
    d = Path(directory)
    found = sorted(
        (int(m.group(1)), p) for p in d.iterdir() if (m := CHECKPOINT_RE.match(p.name)) and m.group(2) == ext
    )
    for _, p in found[:-keep]:
        p.unlink(missing_ok=True)
    for p in d.glob(".checkpoint-*.tmp"):
        p.unlink(missing_ok=True)


def rank_suffixed(path, rank: int) -> Path:
    """params.npy -> params.rank0.npy (each rank writes its own file)."""
    p = Path(path)
    return p.with_name(f"{p.stem}.rank{rank}{p.suffix or '.npy'}")


def save_rank_params(path, rank: int, flat: np.ndarray) -> Path:
    """Write this rank's flattened final parameters to path.rank<N>.npy (for cross-rank checks)."""
    out = rank_suffixed(path, rank)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.save(out, flat)
    return out


def training_arguments(description: str):
    """The trainers' shared command line (pytorch_train.py and keras_train.py take the same flags)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--epochs", type=int, default=5, help="total epochs (a resumed run counts those done)")
    p.add_argument("--batch-size", type=int, default=32, help="batch size per rank")
    p.add_argument("--lr", type=float, default=0.025, help="base learning rate for one rank (scaled by size)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--warmup-epochs", type=float, default=1.0, help="epochs to ramp lr from --lr to --lr * size")
    p.add_argument("--checkpoint-dir", default=None, help="write/resume checkpoints here (rank 0 writes)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--data-dir", default=None, help="directory of MNIST/Fashion-MNIST IDX files")
    p.add_argument("--synthetic", action="store_true", help="synthetic images (benchmarking)")
    p.add_argument(
        "--final-params-out", default=None, help="write each rank's final flattened parameters to FILE.rank<N>.npy"
    )
    return p.parse_args()
