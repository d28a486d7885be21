"""Strong- and weak-scaling studies of the synthetic benchmark: plan, results, model, report.

Pure functions only (no I/O, no environment, no clock): `hpcbundle scaling plan` turns a
`Study` into one sbatch script per point, `hpcbundle scaling report` feeds the job outputs to
`results.results`, `model.fits` and `report.csv_text`. Vocabulary:

* W, workers: ranks of a point (nodes x tasks per node).
* strong scaling: a fixed global batch split over the W ranks (each rank gets B/W images);
  weak scaling: a fixed batch per rank (the global batch grows as b*W).
* T, time per step: global batch / total images per second.
* speedup and efficiency relative to the smallest point W0 (normally one node):
  speedup = throughput_W / throughput_W0, efficiency = speedup / (W/W0). That is T1/(W*TW) for
  strong scaling and T1/TW for weak scaling when W0 = 1.
* the model: T(W) = G/W + C(W) (strong) or T(W) = G + C(W) (weak), with the communication time
  C(W) = a*2(W-1)/W + b*(W-1): a ring allreduce's bandwidth term (each rank sends and receives
  2(W-1)/W of the gradients) and its latency term (2(W-1) messages, here folded into b), C(1) = 0.
"""
