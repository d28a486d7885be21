"""A user's PyTorch Lightning script, as Lightning's docs write one: a LightningModule and
Trainer(strategy="ddp"), no launcher code. Under torchrun, Lightning takes the world from torchrun's
variables (its TorchElasticEnvironment); global rank 0 prints what it saw and the validation accuracy.

    python lightning_digits.py DIGITS_CSV_GZ [--epochs N] [--devices N|auto] [--nodes N]

Lightning checks devices x nodes against torchrun's world: on GPU nodes "auto" is the node's GPUs
(torchrun's --nproc-per-node there); on CPUs give the workers per node.
"""

import argparse
import os

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Digits(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))

    def training_step(self, batch, _):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch, _):
        x, y = batch
        self.log("val_accuracy", (self.net(x).argmax(1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("digits")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--devices", default="auto")
    p.add_argument("--nodes", type=int, default=1)
    args = p.parse_args()
    table = np.loadtxt(args.digits, delimiter=",", dtype=np.float32)
    x = torch.from_numpy(table[:, :64] / 16.0)
    y = torch.from_numpy(table[:, 64]).long()
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    train, val = order[:1440], order[1440:]
    trainer = L.Trainer(
        max_epochs=args.epochs,
        accelerator="auto",
        devices=args.devices if args.devices == "auto" else int(args.devices),
        num_nodes=args.nodes,
        strategy="ddp",
        enable_progress_bar=False,
        enable_checkpointing=False,
        logger=False,
    )
    trainer.fit(
        Digits(),
        DataLoader(TensorDataset(x[train], y[train]), batch_size=32, shuffle=True),
        DataLoader(TensorDataset(x[val], y[val]), batch_size=128),
    )
    if trainer.global_rank == 0:
        environment = type(trainer.strategy.cluster_environment).__name__
        print(
            f"lightning: world_size={trainer.world_size} environment={environment} "
            f"device={trainer.strategy.root_device} torchrun={'TORCHELASTIC_RUN_ID' in os.environ} "
            f"val_accuracy={trainer.callback_metrics['val_accuracy'].item():.4f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
