"""Data-parallel image classifier with horovod.tensorflow.keras (TF 2.15 / Keras 2), applying every
step of the NVIDIA DLI lab "Scaling Deep Learning Workflows with Horovod".

Launch (any of these; each starts one process per rank):
    mpirun -np 2 --bind-to none python examples/keras_train.py --epochs 3
    hpcbundle launch --site local --np 2 --exec -- python /examples/keras_train.py --epochs 3
    horovodrun -np 2 python examples/keras_train.py --epochs 3
(as root, Open MPI's mpirun also needs --allow-run-as-root; 2 ranks on 2 cores: --oversubscribe).

Keras 3 (TF >= 2.16) is not supported by horovod.keras, and Horovod 0.28.1 needs a *legacy* Keras
optimizer on TF >= 2.11 (its DistributedOptimizer and broadcast callback call optimizer.variables()).
Data and checkpoint flags are the same as pytorch_train.py.
Rank 0 prints one line per epoch and a last line `final: accuracy=A loss=L images/sec=R ranks=N`
(test-set metrics over all ranks; images/sec leaves out the first epoch, which pays for warm-up).
--final-params-out FILE makes every rank write its final parameters to FILE.rank<N>.npy.
"""

import io
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import horovod.tensorflow.keras as hvd  # noqa: E402
import hvd_common as common  # the script's own folder is on sys.path: shared with pytorch_train.py
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from horovod.tensorflow import broadcast_variables  # noqa: E402


def parse_args():
    return common.training_arguments(__doc__.split("\n")[0])


def build_model(height, width, num_classes):
    """Same small CNN as pytorch_train.py."""
    L = tf.keras.layers
    return tf.keras.Sequential(
        [
            tf.keras.Input((height, width, 1)),
            L.Conv2D(32, 3, padding="same", activation="relu"),
            L.MaxPooling2D(2),
            L.Conv2D(64, 3, padding="same", activation="relu"),
            L.MaxPooling2D(2),
            L.Flatten(),
            L.Dense(128, activation="relu"),
            L.Dense(num_classes),
        ]
    )


class AtomicCheckpoint(tf.keras.callbacks.Callback):
    """Rank 0 only: after each epoch, model weights + optimizer state -> checkpoint-NNNN.npz,
    written atomically (temp file + fsync + os.replace) so a kill never leaves half a file."""

    def __init__(self, directory):
        super().__init__()
        self.directory = directory

    def on_epoch_end(self, epoch, logs=None):
        if hvd.rank() != 0:  # in an elastic job rank 0 can move to another process
            return
        arrays = {"epoch": np.array(epoch + 1)}
        arrays.update({f"w{i}": w for i, w in enumerate(self.model.get_weights())})
        arrays.update({f"o{i}": w for i, w in enumerate(self.model.optimizer.get_weights())})
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        common.atomic_write_bytes(common.checkpoint_path(self.directory, epoch + 1, "npz"), buf.getvalue())
        common.prune_checkpoints(self.directory, "npz")


class ProgressLogger(tf.keras.callbacks.Callback):
    """Rank 0 prints one line per epoch from the (already rank-averaged) logs, with images/sec."""

    def __init__(self, epochs, images_per_epoch):
        super().__init__()
        self.epochs, self.images_per_epoch, self.stats = epochs, images_per_epoch, []

    def on_epoch_begin(self, epoch, logs=None):
        self.start = self.train_end = time.perf_counter()

    def on_test_begin(self, logs=None):  # fit() validates after the training steps: stop the clock
        self.train_end = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        elapsed = max(self.train_end - self.start, 1e-9)
        self.stats.append((self.images_per_epoch, elapsed))
        lr = float(tf.keras.backend.get_value(self.model.optimizer.lr))
        log_rank0(
            f"epoch {epoch + 1}/{self.epochs}: loss={logs['loss']:.4f} accuracy={logs['accuracy']:.4f} "
            f"val_loss={logs['val_loss']:.4f} val_accuracy={logs['val_accuracy']:.4f} lr={lr:.4g} "
            f"images/sec={self.images_per_epoch / elapsed:.1f} time={elapsed:.2f}s"
        )


class CommitEpoch(tf.keras.callbacks.Callback):
    """Elastic mode: after each epoch (its checkpoint and line written), the epoch goes into the
    KerasState and the state is committed: the point a lost rank makes the others roll back to."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = epoch + 1
        self.state.commit()


def log_rank0(message):
    """Print on the rank that is rank 0 now (in an elastic job that can change)."""
    if hvd.rank() == 0:
        print(message, flush=True)


def main():
    args = parse_args()
    # 1. Initialize Horovod; pin one GPU per local rank (CPU when there is none).
    hvd.init()
    gpus = tf.config.experimental.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[common.local_gpu(hvd.local_rank(), len(gpus))], "GPU")
    else:
        tf.config.threading.set_intra_op_parallelism_threads(common.threads_per_rank(hvd.local_size()))
    # 2. Log (and write) only on rank 0 (log_rank0, and the callbacks' own checks).
    verbose = hvd.rank() == 0

    tf.keras.utils.set_random_seed(args.seed + hvd.rank())  # differs per rank: the broadcast syncs them
    x_tr, y_tr, x_te, y_te, num_classes, source = common.load_dataset(args.data_dir, args.synthetic, args.seed)
    x_tr, x_te = x_tr[..., None], x_te[..., None]  # N,H,W,1
    model = build_model(x_tr.shape[1], x_tr.shape[2], num_classes)

    # 8. Scale the learning rate by size; 3. wrap the optimizer in DistributedOptimizer.
    opt = tf.keras.optimizers.legacy.SGD(learning_rate=args.lr * hvd.size(), momentum=args.momentum)
    opt = hvd.DistributedOptimizer(opt)
    model.compile(
        optimizer=opt, metrics=["accuracy"], loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )

    # 7. Rank 0 restores the last checkpoint (weights + optimizer state); the epoch is broadcast.
    resume_epoch, ckpt = 0, None
    if verbose and args.checkpoint_dir:
        resume_epoch, ckpt = common.latest_checkpoint(args.checkpoint_dir, "npz")
        if ckpt is not None:
            with np.load(ckpt) as z:
                resume_epoch = int(z["epoch"])
                model.set_weights([z[f"w{i}"] for i in range(len(model.weights))])
                opt._create_all_weights(model.trainable_variables)  # legacy optimizers build lazily
                opt.set_weights([z[f"o{i}"] for i in range(len(opt.weights))])
    opt._create_all_weights(model.trainable_variables)  # no-op where already built
    progress = ProgressLogger(args.epochs, len(x_tr))  # every sample once per epoch, over all ranks

    def fit(state):
        """Train from the epoch after state.epoch (in elastic mode again after every change of ranks);
        False when every epoch was already done."""
        # 5. Each rank takes its own shard: steps per epoch = data / size / batch.
        steps = common.steps_per_epoch(len(x_tr), hvd.size(), args.batch_size)
        tf.keras.backend.set_value(opt.lr, common.warmup_lr(args.lr, hvd.size(), state.epoch, args.warmup_epochs))

        def train_batches():  # endless stream of this rank's batches, epoch after epoch
            epoch = state.epoch
            while True:
                for b in common.epoch_batches(len(x_tr), hvd.rank(), hvd.size(), args.batch_size, epoch, args.seed):
                    yield x_tr[b], y_tr[b]
                epoch += 1

        callbacks = [
            # 6. Average metrics over ranks at the end of each epoch (before anything that reads them).
            hvd.callbacks.MetricAverageCallback(),
            # 9. Warm up from lr to lr * size over the first epochs.
            hvd.callbacks.LearningRateWarmupCallback(
                initial_lr=args.lr * hvd.size(), warmup_epochs=args.warmup_epochs, steps_per_epoch=steps, verbose=1
            ),
            progress,
            *([AtomicCheckpoint(args.checkpoint_dir)] if args.checkpoint_dir else []),
            *([CommitEpoch(state)] if common.elastic() else []),
        ]
        log_rank0(
            f"data: {source}, {len(x_tr)} train / {len(x_te)} test images {x_tr.shape[1:]}; "
            f"ranks={hvd.size()} batch/rank={args.batch_size} steps/epoch={steps} "
            f"lr={args.lr}x{hvd.size()} warmup={args.warmup_epochs} device={'GPU' if gpus else 'CPU'}"
        )
        if state.epoch >= args.epochs:
            log_rank0(f"nothing to do: {state.epoch} epochs already completed (--epochs {args.epochs})")
            return False
        model.fit(
            train_batches(),
            steps_per_epoch=steps,
            epochs=args.epochs,
            initial_epoch=state.epoch,
            validation_data=(x_te[val_idx()], y_te[val_idx()]),
            callbacks=callbacks,
            verbose=0,
        )
        return True

    def val_idx():
        return common.shard_indices(len(x_te), hvd.rank(), hvd.size(), shuffle=False)

    if common.elastic():
        # 10. Elastic (horovodrun --min-np/--max-np): the model, the optimizer and the epoch live in a
        # KerasState, which broadcasts them from rank 0 as it starts and after every change of ranks
        # (no collective may come before it: a rank that joins later would run it alone). A lost
        # rank makes the others roll back to the last commit (each epoch's end) and go on.
        if resume_epoch:
            log_rank0(f"resuming from checkpoint {ckpt} after epoch {resume_epoch}")
        state = hvd.elastic.KerasState(model, opt, epoch=resume_epoch)
        state.register_reset_callbacks(
            [lambda: log_rank0(f"ranks changed: now {hvd.size()}; going on after epoch {state.epoch}")]
        )
        trained = hvd.elastic.run(fit)(state)
    else:
        resume_epoch = int(hvd.broadcast(resume_epoch, root_rank=0, name="resume_epoch"))
        if resume_epoch:
            log_rank0(f"resuming from checkpoint {ckpt} after epoch {resume_epoch}")
        # 4. Broadcast the initial state from rank 0: model variables AND optimizer state (momentum,
        # iterations). Done before fit() rather than with hvd.callbacks.BroadcastGlobalVariablesCallback,
        # which broadcasts only after the first batch, whose update already averaged gradients of
        # unsynchronised replicas (and would make a resumed run differ from an uninterrupted one).
        broadcast_variables(model.variables + opt.variables(), root_rank=0)
        trained = fit(common.Epoch(resume_epoch))
    if not trained:
        return

    # Final metrics over the whole test set: each rank scores its shard, sums are allreduced.
    shard = val_idx()
    loss, acc = model.evaluate(x_te[shard], y_te[shard], batch_size=512, verbose=0)
    n = len(shard)
    loss_sum, correct, count = hvd.allreduce([loss * n, acc * n, n], op=hvd.Sum, name="eval_metrics").numpy()
    if args.final_params_out:
        flat = np.concatenate([w.ravel() for w in model.get_weights()])
        common.save_rank_params(args.final_params_out, hvd.rank(), flat)
    ips = common.steady_throughput(progress.stats)  # leaves out the first epoch (tracing) when it can
    log_rank0(
        f"final: accuracy={correct / count:.4f} loss={loss_sum / count:.4f} images/sec={ips:.1f} ranks={hvd.size()}"
    )


if __name__ == "__main__":
    main()
