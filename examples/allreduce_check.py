"""Allreduce rank-valued tensors through Horovod (PyTorch and/or TensorFlow, on CPU) and check the sums.

Every rank contributes a tensor filled with its rank; the sum must be 0 + 1 + ... + (size - 1) in
every element. Rank 0 prints one line; any rank with a wrong sum exits 1.

    mpirun -np 2 python examples/allreduce_check.py
    horovodrun -np 2 python examples/allreduce_check.py --frameworks torch
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

FRAMEWORKS = ("torch", "tensorflow")


def torch_sum() -> tuple[int, int, list[float]]:
    """(rank, size, allreduced values) through horovod.torch."""
    import horovod.torch as hvd
    import torch

    hvd.init()
    total = hvd.allreduce(
        torch.full((4,), float(hvd.rank()), dtype=torch.float64), op=hvd.Sum, name="allreduce_check.torch"
    )
    return hvd.rank(), hvd.size(), total.tolist()


def tensorflow_sum() -> tuple[int, int, list[float]]:
    """(rank, size, allreduced values) through horovod.tensorflow, kept on the CPU."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()
    with tf.device("/CPU:0"):
        total = hvd.allreduce(
            tf.fill([4], tf.constant(float(hvd.rank()), tf.float64)), op=hvd.Sum, name="allreduce_check.tf"
        )
    return hvd.rank(), hvd.size(), total.numpy().tolist()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--frameworks", nargs="+", choices=FRAMEWORKS, help="default: every framework that is installed"
    )
    args = parser.parse_args(argv)
    chosen = args.frameworks or [name for name in FRAMEWORKS if importlib.util.find_spec(name)]
    if not chosen:
        print("allreduce_check: neither torch nor tensorflow is installed", file=sys.stderr)
        return 2
    results = {name: {"torch": torch_sum, "tensorflow": tensorflow_sum}[name]() for name in chosen}
    rank, size, _ = results[chosen[0]]
    expected = float(size * (size - 1) // 2)
    wrong = {name: values for name, (_, _, values) in results.items() if any(v != expected for v in values)}
    if rank == 0 or wrong:
        status = "FAIL " + " ".join(f"{name}={values}" for name, values in wrong.items()) if wrong else "OK"
        print(
            f"allreduce_check: {status} size={size} expected={expected:g} frameworks={','.join(chosen)} (rank {rank})",
            flush=True,
        )
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
