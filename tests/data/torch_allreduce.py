"""A torch.distributed program as users write one (no hpcbundle import): env:// init, one all_reduce on the CPU
(gloo), and one line per rank with what torch saw."""

import os
import socket

import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
seen = " ".join(f"{name}={os.environ[name]}" for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"))
run = os.environ.get("TORCHELASTIC_RUN_ID", "-")  # torchrun's rendezvous id (none under env://)
print(f"torch-rank {seen} sum={value.item():g} run={run} host={socket.gethostname()}", flush=True)
dist.destroy_process_group()
