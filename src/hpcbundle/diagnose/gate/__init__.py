"""The launch gate: a short allreduce through the job's own launch line before the job, judged against the site.

`probe` makes the probe program (and runs on the ranks), `verdict` judges what the ranks measured (pure,
sent with the probe), `run` sends it through the launch command and reads the verdict back.
"""
