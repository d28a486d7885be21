"""Horovod on one NVIDIA GPU, next to plain PyTorch on the same GPU, measured side by side in one run.

    source VENV/hpcbundle-env.sh && python bench/gpu.py            # the venv of the install script
    python bench/gpu.py --model resnet50 --batch-size 64 --rounds 5 --sizes 4K,1M,64M,256M

One process, one rank (Horovod initialises itself as an MPI singleton; torch.distributed gets a
one-rank NCCL process group over a file store). Rounds alternate the two sides, so drift in a
shared machine's clocks or load hits both alike:

  training    img/s of a synthetic ResNet training step (random images, SGD, forward, backward,
              step), plain torch vs Horovod's DistributedOptimizer (its allreduce hooks, NCCL,
              Horovod's negotiation) on an identical copy of the model. The ratio is
              Horovod / plain (goal >= 0.97). Model: torchvision's resnet50 where torchvision is
              installed, else the example's resnet-wide (examples/pytorch_synthetic_benchmark.py).
  allreduce   seconds per in-place sum of a float32 GPU tensor: hvd.allreduce_ (NCCL) vs
              torch.distributed.all_reduce (NCCL). With one rank no byte crosses a link (busbw,
              algbw*2(n-1)/n, is 0), so this is what each library adds per call: launch,
              negotiation, the NCCL call. Printed: time per call for each, and torch/Horovod.

Prints one table per part and one JSON line (metric gpu_bench). Figures are measured, never
asserted; compare ratios from one run, not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import horovod.torch as hvd
import torch
import torch.distributed as dist
import torch.nn.functional as F

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """'4K' -> 4096, '64M' -> 67108864, '100' -> 100 (bytes)."""
    text = text.strip().upper()
    return int(text[:-1]) * UNITS[text[-1]] if text[-1:] in UNITS else int(text)


def build_model(name: str) -> tuple[torch.nn.Module, str, int, int]:
    """(model, what it is, image size, classes): torchvision's resnet50 (224 px, 1000 classes) when
    asked and present, else the example's resnet-wide (32 px, 10 classes)."""
    if name == "resnet50":
        try:
            import torchvision

            return torchvision.models.resnet50(num_classes=1000), "torchvision resnet50", 224, 1000
        except ImportError:
            pass
    return example_models()["resnet-wide"](3, 10, 32), "examples' resnet-wide", 32, 10


def example_models() -> dict[str, Callable[[int, int, int], torch.nn.Module]]:
    """The example's own models (MODELS of examples/pytorch_synthetic_benchmark.py, loaded from its file,
    with the hvd_common it imports loaded first from beside it)."""
    _load_example("hvd_common")
    return _load_example("pytorch_synthetic_benchmark").MODELS


def _load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def timed(step: Callable[[], None], count: int) -> float:
    """Seconds for `count` calls of `step`, the GPU drained before and after."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(count):
        step()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def training(args: argparse.Namespace) -> dict[str, object]:
    """img/s of plain torch vs Horovod's DistributedOptimizer on copies of one model, rounds alternating."""
    torch.manual_seed(1234)
    plain_model, what, size, classes = build_model(args.model)
    plain_model = plain_model.cuda()
    hvd_model = copy.deepcopy(plain_model)
    data = torch.randn(args.batch_size, 3, size, size, device="cuda")
    target = torch.randint(0, classes, (args.batch_size,), device="cuda")
    plain_opt = torch.optim.SGD(plain_model.parameters(), lr=0.01, momentum=0.9)
    hvd_opt = hvd.DistributedOptimizer(
        torch.optim.SGD(hvd_model.parameters(), lr=0.01, momentum=0.9), named_parameters=hvd_model.named_parameters()
    )

    def step(model: torch.nn.Module, opt: torch.optim.Optimizer) -> Callable[[], None]:
        def run() -> None:
            opt.zero_grad()
            F.cross_entropy(model(data), target).backward()
            opt.step()

        return run

    sides = {"plain": step(plain_model, plain_opt), "horovod": step(hvd_model, hvd_opt)}
    for run in sides.values():
        timed(run, args.warmup)
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, run in sides.items():
            rates[name].append(args.batch_size * args.steps / timed(run, args.steps))
    plain, horovod = statistics.median(rates["plain"]), statistics.median(rates["horovod"])
    print(f"\ntraining: {what}, batch {args.batch_size}, {args.steps} steps x {args.rounds} rounds (medians)")
    print(f"  plain torch            {plain:10.1f} img/s  {rates['plain']}")
    print(f"  Horovod Distributed... {horovod:10.1f} img/s  {rates['horovod']}")
    print(f"  ratio Horovod/plain    {horovod / plain:10.3f}   (goal >= 0.97)")
    return {"model": what, "batch_size": args.batch_size, "plain": plain, "horovod": horovod, "ratio": horovod / plain}


def allreduce(args: argparse.Namespace, sizes: list[int]) -> list[dict[str, object]]:
    """Seconds per in-place float32 sum on the GPU, Horovod vs torch.distributed, at one rank."""
    rows = []
    print(f"\nallreduce at 1 rank, float32 on the GPU ({args.rounds} rounds, medians)")
    print(f"  {'bytes':>10}  {'horovod s/call':>15}  {'torch s/call':>13}  {'torch/horovod':>13}")
    for nbytes in sizes:
        tensor = torch.ones(max(1, nbytes // 4), device="cuda")
        calls = max(5, min(200, (64 << 20) // max(nbytes, 1)))
        sides = {
            "horovod": lambda t=tensor: hvd.allreduce_(t, op=hvd.Sum, name=f"bench.{t.numel()}"),
            "torch": lambda t=tensor: dist.all_reduce(t),
        }
        for run in sides.values():
            timed(run, 3)
        per_call: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(args.rounds):
            for name, run in sides.items():
                per_call[name].append(timed(run, calls) / calls)
        hv, tv = statistics.median(per_call["horovod"]), statistics.median(per_call["torch"])
        print(f"  {nbytes:>10}  {hv:15.6f}  {tv:13.6f}  {tv / hv:13.3f}")
        rows.append({"bytes": nbytes, "horovod_s": hv, "torch_s": tv, "torch_over_horovod": tv / hv})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("resnet50", "resnet-wide"), default="resnet50")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20, help="training steps per timed round")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps per side first")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", default="4K,64K,1M,16M,64M,256M", help="allreduce sizes in bytes (K, M, G)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench/gpu.py: no CUDA GPU visible to torch", file=sys.stderr)
        return 2
    hvd.init()
    torch.cuda.set_device(hvd.local_rank())
    with tempfile.TemporaryDirectory() as store:
        dist.init_process_group("nccl", init_method=f"file://{store}/pg", rank=0, world_size=1)
        try:
            device = torch.cuda.get_device_name()
            print(f"device: {device}; torch {torch.__version__}; Horovod {hvd.__version__} (NCCL {hvd.nccl_built()})")
            result = {
                "metric": "gpu_bench",
                "date": time.strftime("%Y-%m-%d"),
                "device": device,
                "training": training(args),
                "allreduce": allreduce(args, [parse_size(s) for s in args.sizes.split(",")]),
            }
        finally:
            dist.destroy_process_group()
    print(json.dumps(result), flush=True)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NCCL_DEBUG", "WARN")
    sys.exit(main())
