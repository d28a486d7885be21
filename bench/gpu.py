"""Horovod and torch DDP on one NVIDIA GPU, next to plain PyTorch, measured side by side in one run.

    source VENV/hpcbundle-env.sh && python bench/gpu.py --out results/   # the install script's venv
    python bench/gpu.py --model resnet50 --batch-size 64 --rounds 5 --sizes 4K,1M,64M,256M

One process, one rank (Horovod initialises itself as an MPI singleton; torch.distributed gets a
one-rank NCCL process group over a file store). Each round runs every side once, in turn, so drift
in a shared machine's clocks or load hits all alike:

  training    img/s of a synthetic ResNet training step (random images, SGD, forward, backward,
              step) on identical copies of one model: plain torch; Horovod's DistributedOptimizer
              (its allreduce hooks, NCCL, Horovod's negotiation); torch's DistributedDataParallel
              (its bucketed NCCL allreduce). Ratios per round: Horovod / plain (goal >= 0.97),
              DDP / plain, Horovod / DDP; printed as median and min-max over the rounds. Model:
              torchvision's resnet50 where torchvision is installed, else the example's
              resnet-wide (examples/pytorch_synthetic_benchmark.py).
  allreduce   seconds per in-place sum of a float32 GPU tensor: hvd.allreduce_ (NCCL) vs
              torch.distributed.all_reduce (NCCL). With one rank no byte crosses a link (busbw,
              algbw*2(n-1)/n, is 0), so this is what each library adds per call: launch,
              negotiation, the NCCL call. Printed: time per call for each, and torch/Horovod.

Prints one table per part and one JSON line (metric gpu_bench); with --out DIR it also writes the
JSON to DIR/gpu-bench.json. Figures are measured, never asserted; compare ratios from one run, not
absolute figures across runs.
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

import horovod
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


def backend(args: argparse.Namespace) -> str:
    """torch.distributed's backend for the device: NCCL on the GPU, gloo on the CPU."""
    return "nccl" if args.device == "cuda" else "gloo"


def drain() -> None:
    """Wait for the GPU's queued work (nothing to wait for on the CPU)."""
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


def timed(step: Callable[[], None], count: int) -> float:
    """Seconds for `count` calls of `step`, the GPU drained before and after."""
    drain()
    t0 = time.perf_counter()
    for _ in range(count):
        step()
    drain()
    return time.perf_counter() - t0


def spread(values: list[float]) -> dict[str, float]:
    """{'median', 'min', 'max'} of one side's per-round figures."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def training(args: argparse.Namespace) -> dict[str, object]:
    """img/s of plain torch, Horovod's DistributedOptimizer and torch DDP on copies of one model,
    each round running every side in turn."""
    torch.manual_seed(1234)
    plain_model, what, size, classes = build_model(args.model)
    plain_model = plain_model.to(args.device)
    hvd_model, ddp_model = copy.deepcopy(plain_model), copy.deepcopy(plain_model)
    data = torch.randn(args.batch_size, 3, size, size, device=args.device)
    target = torch.randint(0, classes, (args.batch_size,), device=args.device)

    def sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(model: torch.nn.Module, opt: torch.optim.Optimizer) -> Callable[[], None]:
        def run() -> None:
            opt.zero_grad()
            F.cross_entropy(model(data), target).backward()
            opt.step()

        return run

    ddp = torch.nn.parallel.DistributedDataParallel(
        ddp_model, device_ids=[torch.cuda.current_device()] if args.device == "cuda" else None
    )
    hvd_opt = hvd.DistributedOptimizer(sgd(hvd_model), named_parameters=hvd_model.named_parameters())
    sides = {
        "plain": step(plain_model, sgd(plain_model)),
        "horovod": step(hvd_model, hvd_opt),
        "ddp": step(ddp, sgd(ddp)),
    }
    for run in sides.values():
        timed(run, args.warmup)
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, run in sides.items():
            rates[name].append(args.batch_size * args.steps / timed(run, args.steps))
    pairs = {"horovod/plain": ("horovod", "plain"), "ddp/plain": ("ddp", "plain"), "horovod/ddp": ("horovod", "ddp")}
    ratios = {
        label: spread([a / b for a, b in zip(rates[top], rates[bottom], strict=True)])
        for label, (top, bottom) in pairs.items()
    }
    print(f"\ntraining: {what}, batch {args.batch_size}, {args.steps} steps x {args.rounds} rounds")
    print(f"  {'side':<22} {'median img/s':>12}  {'min':>9}  {'max':>9}")
    labels = {"plain": "plain torch", "horovod": "Horovod Distributed...", "ddp": f"torch DDP ({backend(args)})"}
    for name, label in labels.items():
        figures = spread(rates[name])
        print(f"  {label:<22} {figures['median']:12.1f}  {figures['min']:9.1f}  {figures['max']:9.1f}")
    for label, figures in ratios.items():
        goal = "   (goal >= 0.97)" if label == "horovod/plain" else ""
        print(f"  ratio {label:<16} {figures['median']:12.3f}  {figures['min']:9.3f}  {figures['max']:9.3f}{goal}")
    return {
        "model": what,
        "batch_size": args.batch_size,
        "steps": args.steps,
        "rounds": args.rounds,
        "img_per_s": {name: spread(values) for name, values in rates.items()},
        "per_round": rates,
        "ratios": ratios,
    }


def allreduce(args: argparse.Namespace, sizes: list[int]) -> list[dict[str, object]]:
    """Seconds per in-place float32 sum on the GPU, Horovod vs torch.distributed, at one rank."""
    rows = []
    print(f"\nallreduce at 1 rank, float32 on the {args.device} ({backend(args)}; {args.rounds} rounds, medians)")
    print(f"  {'bytes':>10}  {'horovod s/call':>15}  {'torch s/call':>13}  {'torch/horovod':>13}")
    for nbytes in sizes:
        tensor = torch.ones(max(1, nbytes // 4), device=args.device)
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


def positive(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is below 1")
    return value


def sizes(text: str) -> list[int]:
    """argparse type: '4K,64M' -> [4096, 67108864], each at least 4 bytes (one float32)."""
    try:
        values = [parse_size(part) for part in text.split(",")]
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list like 4K,1M,64M") from None
    if min(values) < 4:
        raise argparse.ArgumentTypeError("each size must be at least 4 bytes (one float32)")
    return values


def nccl_version() -> str:
    """The NCCL torch loaded, '2.28.9' (torch returns a tuple, older releases an int like 2809); '' without CUDA."""
    if not torch.cuda.is_available():
        return ""
    version = torch.cuda.nccl.version()
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


class OneLineParser(argparse.ArgumentParser):
    """Bad options: one line naming the option and the fix, exit 2 (no usage block)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"bench/gpu.py: {message} (see --help)\n")


def main() -> int:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("resnet50", "resnet-wide"), default="resnet50")
    parser.add_argument("--batch-size", type=positive, default=64)
    parser.add_argument("--steps", type=positive, default=20, help="training steps per side per round")
    parser.add_argument("--warmup", type=positive, default=10, help="untimed steps per side first")
    parser.add_argument("--rounds", type=positive, default=5)
    parser.add_argument("--sizes", type=sizes, default="4K,64K,1M,16M,64M,256M", help="allreduce sizes (K, M, G)")
    parser.add_argument("--out", type=Path, help="also write the JSON to OUT/gpu-bench.json")
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: the same code on the CPU with gloo (a smoke run where no GPU is; its figures mean nothing)",
    )
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench/gpu.py: no CUDA GPU visible to torch (--device cpu runs it on the CPU)", file=sys.stderr)
        return 2
    hvd.init()
    if args.device == "cuda":
        torch.cuda.set_device(hvd.local_rank())
    with tempfile.TemporaryDirectory() as store:
        dist.init_process_group(backend(args), init_method=f"file://{store}/pg", rank=0, world_size=1)
        try:
            device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
            built = f"NCCL {hvd.nccl_built()}"
            print(f"device: {device}; torch {torch.__version__}; Horovod {horovod.__version__} ({built})")
            result = {
                "metric": "gpu_bench",
                "date": time.strftime("%Y-%m-%d"),
                "device": device,
                "torch": torch.__version__,
                "horovod": horovod.__version__,
                "nccl": nccl_version(),
                "training": training(args),
                "allreduce": allreduce(args, args.sizes),
            }
        finally:
            dist.destroy_process_group()
    print(json.dumps(result), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu-bench.json").write_text(json.dumps(result, indent=1) + "\n")
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NCCL_DEBUG", "WARN")
    sys.exit(main())
