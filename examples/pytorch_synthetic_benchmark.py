"""Synthetic training throughput with horovod.torch (in the style of Horovod's
pytorch_synthetic_benchmark.py, sized for CPUs): random images, real forward/backward/allreduce.

Launch:
    mpirun -np 2 --bind-to none python examples/pytorch_synthetic_benchmark.py --model resnet
    hpcbundle launch --site local --np 2 --exec -- python /examples/pytorch_synthetic_benchmark.py
    horovodrun -np 2 python examples/pytorch_synthetic_benchmark.py --fp16-allreduce
    torchrun --standalone --nproc-per-node 2 examples/pytorch_synthetic_benchmark.py --ddp env://

--ddp tcp://HOST:PORT trains the same model on the same data with torch's DistributedDataParallel
instead (gloo on CPUs, NCCL on GPUs), started by the same launch line: each process reads its rank
from the launcher (Open MPI, Hydra, SLURM or torchrun variables) and the ranks meet at HOST:PORT
(rank 0's node; under torchrun, --ddp env:// takes its MASTER_ADDR/MASTER_PORT). That is what a
user comparing the two would run; bench/train.py does it side by side.

Rank 0 prints img/sec per iteration, per rank and in total, each as mean +- 1.96 * std over the
timed iterations, then one machine-readable line:
    {"metric": "img_per_sec", "total": ..., "per_rank": ..., "ranks": N, ...}
"""

import argparse
import json
import os
import sys
import timeit

import horovod.torch as hvd
import hvd_common as common  # the script's own folder is on sys.path: threads per rank, shared with the trainers
import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = (
            nn.Sequential()
            if stride == 1 and cin == cout
            else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.skip(x))


def resnet(channels, num_classes, width=16):
    """ResNet-ish: a stem and three stages of one basic block each (CIFAR-sized, CPU-friendly)."""
    return nn.Sequential(
        nn.Conv2d(channels, width, 3, 1, 1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        BasicBlock(width, width, 1),
        BasicBlock(width, 2 * width, 2),
        BasicBlock(2 * width, 4 * width, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * width, num_classes),
    )


def cnn(channels, num_classes, size):
    return nn.Sequential(
        nn.Conv2d(channels, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * (size // 4) ** 2, 128),
        nn.ReLU(),
        nn.Linear(128, num_classes),
    )


def mlp(channels, num_classes, size):
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(channels * size * size, 512),
        nn.ReLU(),
        nn.Linear(512, 512),
        nn.ReLU(),
        nn.Linear(512, num_classes),
    )


MODELS = {
    "resnet": lambda c, k, s: resnet(c, k),
    "resnet-wide": lambda c, k, s: resnet(c, k, width=32),
    "cnn": cnn,
    "mlp": mlp,
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=sorted(MODELS), default="resnet")
    p.add_argument("--batch-size", type=int, default=32, help="input batch size per rank")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--channels", type=int, default=3)
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--num-warmup-batches", type=int, default=5, help="untimed batches before timing")
    p.add_argument("--num-batches-per-iter", type=int, default=5, help="batches per timed iteration")
    p.add_argument("--num-iters", type=int, default=5, help="timed iterations")
    p.add_argument("--fp16-allreduce", action="store_true", help="compress gradients to fp16 for allreduce")
    p.add_argument("--no-cuda", action="store_true", help="stay on the CPU even if a GPU is present")
    p.add_argument(
        "--ddp",
        metavar="tcp://HOST:PORT",
        help="torch DDP instead of Horovod, meeting at HOST:PORT (env://: torchrun's MASTER_ADDR/PORT)",
    )
    return p.parse_args()


class HorovodRanks:
    """The ranks as Horovod sees them, and its DistributedOptimizer."""

    name = "horovod"

    def __init__(self, args):
        hvd.init()
        self.rank, self.size = hvd.rank(), hvd.size()
        self.local_rank, self.local_size = hvd.local_rank(), hvd.local_size()
        self.fp16 = args.fp16_allreduce

    def distribute(self, model, optimizer):
        compression = hvd.Compression.fp16 if self.fp16 else hvd.Compression.none
        named = model.named_parameters()
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=named, compression=compression)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        return model, optimizer

    def gather(self, values):
        return hvd.allgather(torch.tensor([values], dtype=torch.float64), name="img_secs").numpy()

    def finish(self):
        """Nothing to do: Horovod shuts its background thread down at exit itself."""


class DdpRanks:
    """The ranks the launcher started, in one torch.distributed process group, and DDP."""

    name = "ddp"

    def __init__(self, args, use_cuda):
        import torch.distributed as dist

        self.dist = dist
        self.rank, self.size, self.local_rank, self.local_size = common.launcher_ranks()
        self.use_cuda = use_cuda
        backend = "nccl" if use_cuda else "gloo"
        dist.init_process_group(backend, init_method=args.ddp, rank=self.rank, world_size=self.size)

    def distribute(self, model, optimizer):
        device_ids = [torch.cuda.current_device()] if self.use_cuda else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids), optimizer

    def gather(self, values):
        mine = torch.tensor(values, dtype=torch.float64)
        rows = [torch.zeros_like(mine) for _ in range(self.size)]
        self.dist.all_gather(rows, mine)
        return torch.stack(rows).numpy()

    def finish(self):
        """Leave the process group before exit, every rank together, then exit without the interpreter's
        teardown. Left to it, gloo's and the store's threads were torn down with a peer gone: bench/train.py
        saw "terminate called without an active exception" (SIGABRT) in 4 of 25 DDP resnet runs; with the
        barrier and destroy_process_group, none in 10 over tcp://, but 2 of about 30 over env:// (launch
        --torch), after every figure was printed. So the rank ends here, its output flushed."""
        self.dist.barrier()
        self.dist.destroy_process_group()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def main():
    args = parse_args()
    use_cuda = torch.cuda.is_available() and not args.no_cuda
    ranks = DdpRanks(args, use_cuda) if args.ddp else HorovodRanks(args)
    if use_cuda:
        torch.cuda.set_device(common.local_gpu(ranks.local_rank, torch.cuda.device_count()))
    else:
        torch.set_num_threads(common.threads_per_rank(ranks.local_size))
    device_name = "GPU" if use_cuda else "CPU rank"
    device = torch.device("cuda" if use_cuda else "cpu")
    log = print if ranks.rank == 0 else (lambda *a, **k: None)

    torch.manual_seed(1234)
    model = MODELS[args.model](args.channels, args.num_classes, args.image_size).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * ranks.size, momentum=0.9)
    model, optimizer = ranks.distribute(model, optimizer)

    data = torch.randn(args.batch_size, args.channels, args.image_size, args.image_size, device=device)
    target = torch.randint(0, args.num_classes, (args.batch_size,), device=device)

    def benchmark_step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        if use_cuda:
            torch.cuda.synchronize()

    params = sum(p.numel() for p in model.parameters())
    log(
        f"model: {args.model} ({params:,} parameters), batch size {args.batch_size} per rank, "
        f"{args.channels}x{args.image_size}x{args.image_size} images, ranks: {ranks.size}, "
        f"{ranks.name}, fp16 allreduce: {args.fp16_allreduce}"
    )
    log("running warmup...")
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)
    log("running benchmark...")
    img_secs = []
    for i in range(args.num_iters):
        seconds = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        img_secs.append(args.batch_size * args.num_batches_per_iter / seconds)
        log(f"iter #{i}: {img_secs[-1]:.1f} img/sec per {device_name}")

    # Every rank's figures, gathered: rows are ranks, columns are iterations.
    table = ranks.gather(img_secs)
    per_rank_mean, per_rank_conf = table.mean(axis=1), 1.96 * table.std(axis=1)
    totals = table.sum(axis=0)  # iterations are lock-stepped by the allreduce
    for r in range(ranks.size):
        log(f"rank {r}: {per_rank_mean[r]:.1f} +-{per_rank_conf[r]:.1f} img/sec")
    mean, conf = float(table.mean()), float(1.96 * table.std())
    log(f"img/sec per {device_name}: {mean:.1f} +-{conf:.1f}")
    log(f"total img/sec on {ranks.size} {device_name}(s): {totals.mean():.1f} +-{1.96 * totals.std():.1f}")
    log(
        json.dumps(
            {
                "metric": "img_per_sec",
                "total": round(float(totals.mean()), 2),
                "total_spread": round(float(1.96 * totals.std()), 2),
                "per_rank": round(mean, 2),
                "per_rank_spread": round(conf, 2),
                "per_rank_each": [round(float(v), 2) for v in per_rank_mean],
                "ranks": ranks.size,
                "model": args.model,
                "batch_size": args.batch_size,
                "fp16_allreduce": args.fp16_allreduce,
                "distributed": ranks.name,
            }
        ),
        flush=True,
    )
    ranks.finish()


if __name__ == "__main__":
    main()
