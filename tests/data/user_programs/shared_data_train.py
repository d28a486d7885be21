"""A user's training script that reads its data from a directory on the site's shared storage
(given by --data, or $DATA_DIR) and writes checkpoints relative to its working directory
(checkpoints/, rank 0 only, as Horovod's examples do)."""

import argparse
import os
from pathlib import Path

import horovod.torch as hvd
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--data", default=os.environ.get("DATA_DIR", "data"))
args = parser.parse_args()

hvd.init()
shards = sorted(Path(args.data).glob("shard-*.csv"))
mine = shards[hvd.rank() % len(shards)]
rows = [[float(x) for x in line.split(",")] for line in mine.read_text().splitlines()]
inputs = torch.tensor([row[:-1] for row in rows])
targets = torch.tensor([int(row[-1]) for row in rows])

model = torch.nn.Linear(inputs.shape[1], 2)
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters()
)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
for _step in range(2):
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(inputs), targets)
    loss.backward()
    optimizer.step()
print(
    f"rank {hvd.rank()}/{hvd.size()}: read {mine.name} ({len(rows)} rows) loss={loss.item():.4f} cwd={os.getcwd()}",
    flush=True,
)
if hvd.rank() == 0:
    Path("checkpoints").mkdir(exist_ok=True)
    torch.save({"model": model.state_dict(), "step": 2}, "checkpoints/ckpt-2.pt")
    print(f"saved {Path('checkpoints/ckpt-2.pt').resolve()}", flush=True)
