"""Plain torch.distributed (DDP) training of the 8x8 digits CNN: a program as users bring it, with no
hpcbundle or Horovod import. It reads RANK, WORLD_SIZE and LOCAL_RANK from the environment and meets the
other ranks through env:// (MASTER_ADDR, MASTER_PORT), so any launcher that sets them runs it:

    hpcbundle launch --site S --np 4 --hosts n1:2,n2:2 --torch --exec -- python examples/torch_train.py
    hpcbundle sbatch --site S --nodes 2 --torch -o job.sh -- python /examples/torch_train.py --checkpoint ck.pt
    torchrun --standalone --nproc-per-node 2 examples/torch_train.py

Rank 0 prints one line per epoch (`epoch N/E: loss=... accuracy=... val_accuracy=...`) after it wrote the
--checkpoint file (atomically: a temp file, then os.replace), and a restarted run resumes from it.
SIGUSR1 (SLURM's --signal=B:USR1@N, passed on by hpcbundle's batch script) is a request to stop: every
rank finishes the step it is in, the ranks agree on it (an all_reduce of their votes), rank 0 checkpoints
there and all exit 0 (`stopped on SIGUSR1 ... after epoch E + S steps`); the next run resumes at that step.
"""

import argparse
import itertools
import os
import signal
import time
from pathlib import Path

# SIGUSR1 from here on asks for a stop after the current step: set before the seconds of importing torch,
# during which its default action would kill the rank.
STOP = {"asked": False}
signal.signal(signal.SIGUSR1, lambda *_: STOP.update(asked=True))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

DIGITS = Path(__file__).resolve().parent / "data" / "digits.csv.gz"  # 1797 rows: 64 pixels (0..16), the digit


def digits() -> tuple[TensorDataset, TensorDataset]:
    """The 8x8 digits, standardized, split 80/20 the same way on every rank (a fixed permutation)."""
    table = np.loadtxt(DIGITS, delimiter=",", dtype=np.float32)
    x, y = torch.from_numpy(table[:, :-1].reshape(-1, 1, 8, 8)), torch.from_numpy(table[:, -1]).long()
    x = (x - x.mean()) / x.std()
    order = torch.from_numpy(np.random.RandomState(1234).permutation(len(x)))
    test, train = order[: len(x) // 5], order[len(x) // 5 :]
    return TensorDataset(x[train], y[train]), TensorDataset(x[test], y[test])


def cnn() -> nn.Module:
    """Two conv/pool stages and a classifier (the Horovod examples' model for 8x8 digits)."""

    def stage(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]

    return nn.Sequential(
        *stage(1, 32), *stage(32, 64), nn.Flatten(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10)
    )


def resume_state(path: str | None) -> dict | None:
    """Rank 0 reads the checkpoint (if any) and sends it to every rank: no shared file system needed."""
    box = [torch.load(path, map_location="cpu") if dist.get_rank() == 0 and path and os.path.exists(path) else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def save(path: str, model: nn.Module, optimizer: torch.optim.Optimizer, epoch: int, step: int) -> None:
    """Rank 0 writes the state after `epoch` whole epochs and `step` steps of the next, atomically: a
    crash mid-write leaves the previous checkpoint whole."""
    state = {"epoch": epoch, "step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
    with open(f"{path}.tmp", "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(f"{path}.tmp", path)


def stop_voted(device: torch.device) -> bool:
    """Whether any rank got SIGUSR1: every rank votes after each step, so all stop after the same one."""
    vote = torch.tensor([float(STOP["asked"])], device=device)
    dist.all_reduce(vote, op=dist.ReduceOp.MAX)
    return bool(vote.item())


@torch.no_grad()
def accuracy(model: nn.Module, data: TensorDataset, device: torch.device) -> float:
    """The model's accuracy on the whole of `data` (rank 0 scores the test set alone)."""
    x, y = data.tensors
    return (model(x.to(device)).argmax(1).cpu() == y).float().mean().item()


def train(
    args: argparse.Namespace, model: nn.Module, optimizer: torch.optim.Optimizer, start: dict, device: torch.device
) -> tuple[int, int] | None:
    """Train from `start` (epochs done + steps of the next) to args.epochs; rank 0 checkpoints and prints
    each epoch. Returns where the ranks stopped on SIGUSR1 (epochs, steps), or None when all are done."""
    rank, size = dist.get_rank(), dist.get_world_size()
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    train_set, test_set = digits()
    sampler = DistributedSampler(train_set, num_replicas=size, rank=rank, shuffle=True, seed=42)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)  # the same steps on every rank
    for epoch in range(start["epoch"], args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle per epoch, the same on every rank and in a resumed run
        first = start["step"] if epoch == start["epoch"] else 0
        sums, began, stop = torch.zeros(3, dtype=torch.float64), time.perf_counter(), False
        for step, (x, y) in enumerate(itertools.islice(loader, first, None), start=first + 1):
            x, y = x.to(device), y.to(device)
            out = ddp(x)
            loss = F.cross_entropy(out, y)
            optimizer.zero_grad()
            loss.backward()  # DDP averages the gradients over the ranks here
            optimizer.step()
            sums += torch.tensor([loss.item() * len(y), (out.argmax(1) == y).sum().item(), len(y)])
            stop = stop_voted(device)
            if stop and step < len(loader):
                return epoch, step
        sums = sums.to(device)
        dist.all_reduce(sums)  # exact averages over all ranks
        if rank == 0:
            if args.checkpoint:
                save(args.checkpoint, model, optimizer, epoch + 1, 0)
            loss_avg, acc = (sums[:2] / sums[2]).tolist()
            print(
                f"epoch {epoch + 1}/{args.epochs}: loss={loss_avg:.4f} accuracy={acc:.4f} "
                f"val_accuracy={accuracy(model, test_set, device):.4f} time={time.perf_counter() - began:.2f}s",
                flush=True,
            )
        if stop and epoch + 1 < args.epochs:  # voted on the epoch's last step: stop at its end
            return epoch + 1, 0
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.025, help="for one rank; scaled by the number of ranks")
    p.add_argument("--checkpoint", help="write after every epoch (rank 0) and resume from this file")
    args = p.parse_args()

    # One process per GPU (or CPU slot): the launcher (or torchrun) sets RANK, WORLD_SIZE, LOCAL_RANK.
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank = dist.get_rank()

    torch.manual_seed(0)
    model = cnn().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * dist.get_world_size(), momentum=0.9)
    start = resume_state(args.checkpoint) or {"epoch": 0, "step": 0}
    if "model" in start:
        model.load_state_dict(start["model"])
        optimizer.load_state_dict(start["optimizer"])
        say(f"resuming from {args.checkpoint} after epoch {start['epoch']} + {start['step']} steps")
    if start["epoch"] >= args.epochs:
        say(f"nothing to do: {start['epoch']} epochs already completed (--epochs {args.epochs})")
    stop = train(args, model, optimizer, start, device)
    # From here a SIGUSR1 (a late one, or one that reached this rank after the vote) must not fail the rank:
    # Python resets its handlers on the way out, and the signal's default action is to end the process.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if stop is None:
        say(f"done: {args.epochs} epochs on {dist.get_world_size()} ranks, rank 0 on {device}")
    else:  # every rank stopped after the same step; rank 0 saves it, all exit 0 (the batch script requeues)
        if rank == 0 and args.checkpoint:
            save(args.checkpoint, model, optimizer, *stop)
        saved = f"{args.checkpoint} resumes the run" if args.checkpoint else "no --checkpoint: nothing saved"
        say(f"stopped on SIGUSR1 (the time limit is near) after epoch {stop[0]} + {stop[1]} steps; {saved}")
    dist.destroy_process_group()


def say(line: str) -> None:
    """Print on rank 0 only."""
    if dist.get_rank() == 0:
        print(line, flush=True)


if __name__ == "__main__":
    main()
