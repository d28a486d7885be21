"""A user's PyTorch benchmark in the style of Horovod's pytorch_synthetic_benchmark.py: a torchvision
model on random images, hvd.DistributedOptimizer with named_parameters, the parameters and the
optimizer state broadcast from rank 0. On a GPU its BatchNorm layers become hvd.SyncBatchNorm (Horovod
implements that one on GPUs only: on a CPU it raises "SyncBatchNorm expected input tensor to be on
GPU"). Tiny on purpose (resnet18, 32x32, 2 steps)."""

import argparse
import os
import time

import horovod.torch as hvd
import torch
import torch.nn.functional as F
import torchvision

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="resnet18")
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--steps", type=int, default=2)
args = parser.parse_args()

hvd.init()
torch.manual_seed(hvd.rank())
device = torch.device("cuda", hvd.local_rank()) if torch.cuda.is_available() else torch.device("cpu")
if device.type == "cuda":
    torch.cuda.set_device(device)


def sync_batch_norm(module: torch.nn.Module) -> torch.nn.Module:
    """The model with every BatchNorm2d replaced by hvd.SyncBatchNorm (statistics over all ranks)."""
    for name, child in module.named_children():
        if isinstance(child, torch.nn.BatchNorm2d):
            synced = hvd.SyncBatchNorm(child.num_features, child.eps, child.momentum, child.affine)
            synced.load_state_dict(child.state_dict())
            setattr(module, name, synced)
        else:
            sync_batch_norm(child)
    return module


model = getattr(torchvision.models, args.model)(num_classes=10)
model = (sync_batch_norm(model) if device.type == "cuda" else model).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
images = torch.randn(args.batch_size, 3, 32, 32, device=device)
labels = torch.randint(0, 10, (args.batch_size,), device=device)

model.train()
start = time.time()
for _ in range(args.steps):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
rate = args.steps * args.batch_size / (time.time() - start)
total = hvd.allreduce(torch.tensor(rate), op=hvd.Sum, name="images_per_sec")
print(f"rank {hvd.rank()}/{hvd.size()}: {args.model} loss={loss.item():.3f} cwd={os.getcwd()}", flush=True)
if hvd.rank() == 0:
    print(f"total images/sec: {float(total):.1f} on {hvd.size()} ranks", flush=True)
