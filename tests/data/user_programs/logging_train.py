"""A user's training script that reports through Python's logging, to stderr only (logging's
default stream), as most teams' scripts do: nothing on stdout."""

import logging
import os
import sys

import horovod.torch as hvd
import torch

logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
log = logging.getLogger("train")

hvd.init()
torch.manual_seed(hvd.rank())
model = torch.nn.Linear(8, 2)
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters()
)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
inputs, targets = torch.randn(16, 8), torch.randint(0, 2, (16,))
for step in range(3):
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(inputs), targets)
    loss.backward()
    optimizer.step()
    log.info("rank %d/%d step %d loss=%.4f", hvd.rank(), hvd.size(), step, loss.item())
log.warning("rank %d done in %s", hvd.rank(), os.getcwd())
