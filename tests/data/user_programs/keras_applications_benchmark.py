"""A user's TF2 benchmark in the style of Horovod's tensorflow2_synthetic_benchmark.py: a
keras.applications model on random images, tf.GradientTape wrapped by hvd.DistributedGradientTape,
the variables broadcast from rank 0 after the first step. Tiny on purpose (32x32, 2 steps)."""

import argparse
import os
import time

import horovod.tensorflow as hvd
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--steps", type=int, default=2)
args = parser.parse_args()

hvd.init()
tf.random.set_seed(hvd.rank())
model = tf.keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3), classes=10)
optimizer = tf.keras.optimizers.SGD(0.01 * hvd.size())
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
images = tf.random.uniform([args.batch_size, 32, 32, 3])
labels = tf.random.uniform([args.batch_size], maxval=10, dtype=tf.int64)


def train_step(first: bool) -> float:
    with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(images, training=True))
    tape = hvd.DistributedGradientTape(tape)
    optimizer.apply_gradients(
        zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables, strict=True)
    )
    if first:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(optimizer.variables(), root_rank=0)
    return float(loss)


start = time.time()
for step in range(args.steps):
    loss = train_step(step == 0)
rate = args.steps * args.batch_size / (time.time() - start)
total = hvd.allreduce(tf.constant(rate), op=hvd.Sum)
print(f"rank {hvd.rank()}/{hvd.size()}: {model.name} loss={loss:.3f} cwd={os.getcwd()}", flush=True)
if hvd.rank() == 0:
    print(f"total images/sec: {float(total):.1f} on {hvd.size()} ranks", flush=True)
