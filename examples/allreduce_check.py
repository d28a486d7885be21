"""Allreduce rank-valued tensors through Horovod (PyTorch or TensorFlow, on CPU) and check the sums.

Every rank contributes a tensor filled with its rank; the sum must be 0 + 1 + ... + (size - 1) in
every element. Rank 0 prints one line; any rank with a wrong sum exits 1.

One framework per process: horovod.torch and horovod.tensorflow each carry their own copy of
Horovod's core, and Horovod does not support both in one process (horovod#709, #1074). Measured
here with both: 1 run in 30 segfaulted in Horovod's shutdown at exit under CPU load. Check the
other framework with a second run.

    mpirun -np 2 python examples/allreduce_check.py
    mpirun -np 2 python examples/allreduce_check.py --framework tensorflow
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
    parser.add_argument("--framework", choices=FRAMEWORKS, help="default: torch if it is installed, else tensorflow")
    args = parser.parse_args(argv)
    framework = args.framework or next((name for name in FRAMEWORKS if importlib.util.find_spec(name)), None)
    if framework is None:
        print("allreduce_check: neither torch nor tensorflow is installed", file=sys.stderr)
        return 2
    rank, size, values = {"torch": torch_sum, "tensorflow": tensorflow_sum}[framework]()
    expected = float(size * (size - 1) // 2)
    wrong = any(v != expected for v in values)
    if rank == 0 or wrong:
        status = f"FAIL {values}" if wrong else "OK"
        print(
            f"allreduce_check: {status} size={size} expected={expected:g} framework={framework} (rank {rank})",
            flush=True,
        )
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
