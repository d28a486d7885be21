"""Data-parallel image classifier with horovod.torch, applying every step of the NVIDIA DLI lab
"Scaling Deep Learning Workflows with Horovod".

Launch (any of these; each starts one process per rank):
    mpirun -np 2 --bind-to none python examples/pytorch_train.py --epochs 3
    hpcbundle launch --site local --np 2 --exec -- python /examples/pytorch_train.py --epochs 3
    horovodrun -np 2 python examples/pytorch_train.py --epochs 3
(as root, Open MPI's mpirun also needs --allow-run-as-root; 2 ranks on 2 cores: --oversubscribe).

Data: --data-dir DIR with MNIST/Fashion-MNIST IDX files, else the 8x8 digits in data/;
--synthetic for throughput runs. With --checkpoint-dir, rank 0 writes a checkpoint atomically after
every epoch and a restarted job resumes after the last completed epoch. SIGUSR1 (SLURM's
--signal=B:USR1@N, passed on by hpcbundle's batch script) stops every rank after the epoch's
checkpoint: `stopped after epoch E/N on SIGUSR1 ...`, exit 0, no final line.
Rank 0 prints one line per epoch and a last line `final: accuracy=A loss=L images/sec=R ranks=N`
(test-set metrics over all ranks; images/sec leaves out the first epoch, which pays for warm-up).
--final-params-out FILE makes every rank write its final parameters to FILE.rank<N>.npy.
Under elastic horovodrun (--min-np/--max-np, HOROVOD_ELASTIC=1) the model, optimizer and epoch live
in hvd.elastic.TorchState: a lost rank rolls the others back to the last epoch's end and they go on
(`ranks changed: now N; going on after epoch E`); a host that joins is taken in after an epoch.
"""

import io
import time

import hvd_common as common  # the script's own folder is on sys.path: shared with keras_train.py

# SIGUSR1 asks for a stop at the next epoch's end from here on: set before the seconds of importing
# torch and Horovod, during which its default action would kill the rank.
common.stop_on_signal()

import horovod.torch as hvd  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def parse_args():
    return common.training_arguments(__doc__.split("\n")[0])


def build_model(height, width, num_classes):
    """Small CNN: two conv/pool stages and a classifier; works for 8x8 digits and 28x28 MNIST."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * (height // 4) * (width // 4), 128),
        nn.ReLU(),
        nn.Linear(128, num_classes),
    )


def allreduce_sums(values, name):
    """Sum a few numbers over all ranks (exact global metrics, not a mean of means)."""
    return hvd.allreduce(torch.tensor(values, dtype=torch.float64), op=hvd.Sum, name=name).tolist()


def evaluate(model, x, y, device, batch_size=512):
    """Loss and accuracy over the whole test set: each rank scores its shard, sums are allreduced."""
    idx = common.shard_indices(len(x), hvd.rank(), hvd.size(), shuffle=False)
    model.eval()
    loss_sum = correct = 0.0
    with torch.no_grad():
        for start in range(0, len(idx), batch_size):
            b = idx[start : start + batch_size]
            out = model(x[b].to(device))
            loss_sum += F.cross_entropy(out, y[b].to(device), reduction="sum").item()
            correct += (out.argmax(1).cpu() == y[b]).sum().item()
    loss_sum, correct, count = allreduce_sums([loss_sum, correct, len(idx)], "eval_metrics")
    return loss_sum / count, correct / count


def main():
    args = parse_args()
    # 1. Initialize Horovod; pin one GPU per local rank (CPU when there is none).
    hvd.init()
    if torch.cuda.is_available():
        gpu = common.local_gpu(hvd.local_rank(), torch.cuda.device_count())
        torch.cuda.set_device(gpu)
        device = torch.device("cuda", gpu)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(common.threads_per_rank(hvd.local_size()))
    # 2. Log (and write) only on rank 0 (log_rank0, and the checkpoints below).
    verbose = hvd.rank() == 0

    # Ranks seed differently on purpose: the broadcast below is what makes them agree.
    torch.manual_seed(args.seed + hvd.rank())
    x_tr, y_tr, x_te, y_te, num_classes, source = common.load_dataset(args.data_dir, args.synthetic, args.seed)
    x_tr, x_te = torch.from_numpy(x_tr).unsqueeze(1), torch.from_numpy(x_te).unsqueeze(1)  # N,1,H,W
    y_tr, y_te = torch.from_numpy(y_tr), torch.from_numpy(y_te)
    model = build_model(x_tr.shape[2], x_tr.shape[3], num_classes).to(device)

    # 8. Scale the learning rate by the number of ranks (9. warmup is applied per step below).
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
    # 3. DistributedOptimizer averages gradients over ranks with allreduce. It is a new optimizer
    # object that does not carry the wrapped one's state over: restore checkpoints after wrapping.
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    # 7. Rank 0 finds the last checkpoint and loads it; the epoch number is broadcast from rank 0.
    resume_epoch, ckpt = 0, None
    if verbose and args.checkpoint_dir:
        resume_epoch, ckpt = common.latest_checkpoint(args.checkpoint_dir, "pt")
        if ckpt is not None:
            saved = torch.load(ckpt, map_location=device)
            model.load_state_dict(saved["model"])
            optimizer.load_state_dict(saved["optimizer"])
            resume_epoch = int(saved["epoch"])
    data = dict(x_tr=x_tr, y_tr=y_tr, x_te=x_te, y_te=y_te, device=device, source=source)
    if common.elastic():
        # 10. Elastic (horovodrun --min-np/--max-np): the model, the optimizer and the epoch live in
        # a TorchState, which broadcasts them from rank 0 as it starts and after every change of
        # ranks (a rank that joins later runs no collective before that: none may come first). A
        # lost rank raises inside a collective: every survivor rolls back to the last commit (each
        # epoch's end) and the job goes on with the ranks left; a host that joins is taken in at
        # the next commit. The shards and the lr follow hvd.size() at every epoch.
        if resume_epoch:
            log_rank0(f"resuming from checkpoint {ckpt} after epoch {resume_epoch}")
        state = hvd.elastic.TorchState(model=model, optimizer=optimizer, epoch=resume_epoch)
        state.register_reset_callbacks(
            [lambda: log_rank0(f"ranks changed: now {hvd.size()}; going on after epoch {state.epoch}")]
        )
        hvd.elastic.run(train_epochs)(state, args, model, optimizer, **data)
    else:
        resume_epoch = int(hvd.broadcast(torch.tensor(resume_epoch), root_rank=0, name="resume_epoch").item())
        if resume_epoch:
            log_rank0(f"resuming from checkpoint {ckpt} after epoch {resume_epoch}")
        # 4. Broadcast the initial state from rank 0: parameters AND optimizer state (momentum buffers).
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        train_epochs(common.Epoch(resume_epoch), args, model, optimizer, **data)


def log_rank0(message):
    """Print on the rank that is rank 0 now (in an elastic job that can change)."""
    if hvd.rank() == 0:
        print(message, flush=True)


def train_epochs(state, args, model, optimizer, x_tr, y_tr, x_te, y_te, device, source):
    """Train the epochs after state.epoch up to args.epochs; checkpoint and commit after each."""
    # 5. Each rank takes its own shard: steps per epoch = data / size / batch.
    steps = common.steps_per_epoch(len(x_tr), hvd.size(), args.batch_size)
    log_rank0(
        f"data: {source}, {len(x_tr)} train / {len(x_te)} test images {tuple(x_tr.shape[1:])}; "
        f"ranks={hvd.size()} batch/rank={args.batch_size} steps/epoch={steps} "
        f"lr={args.lr}x{hvd.size()} warmup={args.warmup_epochs} device={device}"
    )
    if state.epoch >= args.epochs:
        log_rank0(f"nothing to do: {state.epoch} epochs already completed (--epochs {args.epochs})")
        return

    epoch_stats = []  # (images, seconds) per epoch, over all ranks
    val_loss = val_acc = None
    while state.epoch < args.epochs:
        epoch = state.epoch
        steps = common.steps_per_epoch(len(x_tr), hvd.size(), args.batch_size)
        model.train()
        batches = common.epoch_batches(len(x_tr), hvd.rank(), hvd.size(), args.batch_size, epoch, args.seed)
        loss_sum = correct = 0.0
        start = time.perf_counter()
        for step, b in enumerate(batches):
            for group in optimizer.param_groups:  # 9. learning-rate warmup, per step
                group["lr"] = common.warmup_lr(args.lr, hvd.size(), epoch + step / steps, args.warmup_epochs)
            xb, yb = x_tr[b].to(device), y_tr[b].to(device)
            optimizer.zero_grad()
            out = model(xb)
            loss = F.cross_entropy(out, yb)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(b)
            correct += (out.argmax(1) == yb).sum().item()
        # 6. Average the metrics over all ranks (allreduce of sums -> exact global averages); the
        # stop votes ride along, so every rank learns that one was signalled after the same epoch.
        loss_sum, correct, count, stop_votes = allreduce_sums(
            [loss_sum, correct, sum(len(b) for b in batches), common.stop_asked()], "train_metrics"
        )
        elapsed = time.perf_counter() - start
        epoch_stats.append((count, elapsed))
        val_loss, val_acc = evaluate(model, x_te, y_te, device)
        log_rank0(
            f"epoch {epoch + 1}/{args.epochs}: loss={loss_sum / count:.4f} accuracy={correct / count:.4f} "
            f"val_loss={val_loss:.4f} val_accuracy={val_acc:.4f} lr={optimizer.param_groups[0]['lr']:.4g} "
            f"images/sec={count / elapsed:.1f} time={elapsed:.2f}s"
        )
        # 7. Only rank 0 writes checkpoints, atomically (temp file + fsync + os.replace).
        if hvd.rank() == 0 and args.checkpoint_dir:
            buf = io.BytesIO()
            torch.save({"epoch": epoch + 1, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, buf)
            common.atomic_write_bytes(common.checkpoint_path(args.checkpoint_dir, epoch + 1, "pt"), buf.getvalue())
            common.prune_checkpoints(args.checkpoint_dir, "pt")
        state.epoch = epoch + 1
        if stop_votes and epoch + 1 < args.epochs:
            saved = "its checkpoint resumes the run" if args.checkpoint_dir else "no --checkpoint-dir: nothing saved"
            log_rank0(f"stopped after epoch {epoch + 1}/{args.epochs} on SIGUSR1 (the time limit is near); {saved}")
            return
        state.commit()

    common.ignore_late_stop()
    if args.final_params_out:
        flat = torch.cat([p.detach().cpu().reshape(-1) for p in model.parameters()]).numpy()
        common.save_rank_params(args.final_params_out, hvd.rank(), flat)
    ips = common.steady_throughput(epoch_stats)  # leaves out the first epoch when it can
    log_rank0(f"final: accuracy={val_acc:.4f} loss={val_loss:.4f} images/sec={ips:.1f} ranks={hvd.size()}")


if __name__ == "__main__":
    main()
