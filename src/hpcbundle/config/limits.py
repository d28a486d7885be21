"""The upper bounds of every count a user can give: nodes, ranks, GPUs, cores, ports, seconds.

One place for them, so the schema (`le=`), the command line (`--np`, `--nodes`, ... with the range in
`--help`) and the rules refuse the same values before anything is generated. Each bound is far beyond
what a real cluster reaches, and low enough that a typo with extra digits (or 10**18) is refused
instead of printed into a launch line.
"""

from __future__ import annotations

MAX_NODES = 100_000
"""Nodes in one job: the largest machines have about 10,000 nodes."""
MAX_RANKS = 1 << 20
"""Ranks in one job (1,048,576): the largest MPI jobs run a few hundred thousand ranks."""
MAX_CORES = 8192
"""CPUs of one node, and ranks on one node: Linux itself supports at most 8192 CPUs (NR_CPUS)."""
MAX_GPUS = 1024
"""GPUs on one node: the densest nodes have 8 to 16."""
MAX_NUMA_NODE = 1023
"""The highest NUMA node number: a Linux kernel has at most 1024 nodes."""
MAX_LINK_GBPS = 100_000
"""The fastest data link in Gbit/s (100 Tbit/s): today's links run at 100 to 800."""
MAX_PORT = 65535
"""The highest TCP port (ports are 1 to 65535)."""
MAX_SECONDS = 365 * 24 * 3600
"""The longest time bound (a timeout, a stall bound, a time limit): a year, longer than any batch limit."""
MAX_SIGNAL_SECONDS = 65535
"""The longest warning before a job's end: SLURM's --signal takes at most 65535 seconds."""
MAX_GATE_SECONDS = 3600
"""The longest launch gate or doctor probe: an hour for a short allreduce or a node's answer is a hang."""
MAX_COUNT = 1_000_000
"""Any other count an option takes (repeats, batch sizes, iterations)."""
MAX_RESTARTS = 100
"""The most in-place restarts torchrun is given (torch.max_restarts): more hides a job that keeps failing."""
