"""Per-rank allreduce benchmark: Horovod, torch.distributed (Gloo) or mpi4py, float32, in place.

Start one process per rank with any launcher (mpirun, srun, hpcbundle launch, ...). For every
message size the first warm-up iteration checks the sums (rank r contributes r + 1, every element
must become n(n+1)/2), then the timed iterations reduce zeros (so nothing can overflow). Each
rank times every iteration; after the timed loop the ranks exchange their times and rank 0 takes,
per iteration, the slowest rank, and reports the median over iterations as one JSON line per size:

    {"metric": "allreduce", "backend": "horovod", "ops": "mpi", "bytes": 67108864, "ranks": 2,
     "iters": 16, "seconds": 0.1234, "algbw_gib": 0.51, "busbw_gib": 0.51, "correct": true}

algbw = bytes / seconds / 2**30 and busbw = algbw * 2(n-1)/n (the nccl-tests definitions: busbw
is what each rank's link carries in a ring allreduce, comparable with the link's bandwidth).
"ops" is the data plane really in use: for Horovod "mpi" or "gloo" (HOROVOD_CONTROLLER=gloo; see
HorovodBackend). --tensors N (Horovod only) splits each size into N tensors submitted together and
then waited for, as a model's gradients are: that is what Horovod's fusion and cycle time act on.

    mpirun -np 2 python examples/allreduce_bench.py --backend horovod --sizes 64M
    mpirun -np 2 python examples/allreduce_bench.py --backend horovod --sizes 64M --tensors 16
    mpirun -np 2 python examples/allreduce_bench.py --backend torch-gloo --min-bytes 4K --max-bytes 256M
    srun --mpi=pmix -n 4 python /examples/allreduce_bench.py --backend mpi4py --iters 20

Exit status 1 if any sum was wrong on any rank, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import socket
import statistics
import sys
import time
from collections.abc import Mapping

BACKENDS = ("horovod", "torch-gloo", "mpi4py")
DTYPE_BYTES = 4  # float32
_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)


# ------------------------------------------------------------------------- pure arithmetic
def parse_size(text: str) -> int:
    """Bytes in `text`: a whole number with an optional K/M/G suffix (KiB/MiB/GiB), e.g. "64M".

    A size must be positive and a multiple of 4 (whole float32 elements).

        >>> parse_size("64M"), parse_size("4096"), parse_size("1KiB")
        (67108864, 4096, 1024)
    """
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a size (a number with an optional K, M or G suffix)")
    value = int(m.group(1)) * _SUFFIX[m.group(2).upper()]
    if value <= 0 or value % DTYPE_BYTES:
        raise ValueError(f"{text!r}: a size must be a positive multiple of {DTYPE_BYTES} bytes (float32 elements)")
    return value


def parse_sizes(text: str) -> list[int]:
    """A comma-separated list of sizes, ascending, without repeats: "64M,1M" -> [1048576, 67108864]."""
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise ValueError(f"{text!r}: no sizes")
    return sorted({parse_size(p) for p in parts})


def size_range(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """min_bytes, min_bytes * factor, ... up to and including max_bytes (nccl-tests' -b/-e/-f)."""
    if min_bytes <= 0 or max_bytes < min_bytes:
        raise ValueError(f"need 0 < min-bytes <= max-bytes, got {min_bytes} and {max_bytes}")
    if factor < 2:
        raise ValueError(f"factor must be at least 2, got {factor}")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def auto_iters(nbytes: int, target_bytes: int = 1 << 30, lo: int = 5, hi: int = 200) -> int:
    """Timed iterations for a size: enough to move `target_bytes` (1 GiB), at least `lo`, at most `hi`.

    >>> auto_iters(64 << 20), auto_iters(4096), auto_iters(256 << 20)
    (16, 200, 5)
    """
    return max(lo, min(hi, math.ceil(target_bytes / nbytes)))


def bandwidths(nbytes: int, seconds: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GiB/s: algbw = bytes / seconds / 2**30, busbw = algbw * 2(n-1)/n."""
    algbw = nbytes / seconds / 2**30
    return algbw, algbw * 2 * (ranks - 1) / ranks


def median_of_slowest(times_by_rank: list[list[float]]) -> float:
    """Per iteration the slowest rank's time, then the median over iterations."""
    return statistics.median(max(column) for column in zip(*times_by_rank, strict=True))


def result_record(backend: str, ops: str, nbytes: int, ranks: int, iters: int, seconds: float, correct: bool) -> dict:
    """The JSON record of one size (the program's output contract; keys in this order)."""
    algbw, busbw = bandwidths(nbytes, seconds, ranks)
    return {
        "metric": "allreduce",
        "backend": backend,
        "ops": ops,
        "bytes": nbytes,
        "ranks": ranks,
        "iters": iters,
        "seconds": float(f"{seconds:.6g}"),
        "algbw_gib": float(f"{algbw:.4g}"),
        "busbw_gib": float(f"{busbw:.4g}"),
        "correct": bool(correct),
    }


def expected_sum(ranks: int) -> float:
    """What every element holds after the check iteration: 1 + 2 + ... + n."""
    return ranks * (ranks + 1) / 2


def launcher_rank_size(env: Mapping[str, str]) -> tuple[int, int] | None:
    """(rank, size) as the launcher put them in the environment, or None if no launcher did.

    Open MPI (OMPI_COMM_WORLD_*), PMIx (PMIX_RANK with a size from Open MPI or SLURM), PMI-1/2
    and Hydra (PMI_RANK/PMI_SIZE), SLURM (SLURM_PROCID/SLURM_NTASKS), torchrun (RANK/WORLD_SIZE).
    """
    pairs = [
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMI_RANK", "PMI_SIZE"),
        ("PMIX_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMIX_RANK", "SLURM_NTASKS"),
        ("SLURM_PROCID", "SLURM_NTASKS"),
        ("RANK", "WORLD_SIZE"),
    ]
    for rank_key, size_key in pairs:
        if env.get(rank_key, "").isdigit() and env.get(size_key, "").isdigit():
            return int(env[rank_key]), int(env[size_key])
    return None


# ------------------------------------------------------------------------------ backends
class Backend:
    """One communication library: rank, size, buffers and the collectives the benchmark needs."""

    name = ""
    ops = ""
    rank = 0
    size = 1

    def buffer(self, nbytes: int): ...
    def fill(self, buf, value: float) -> None: ...
    def all_equal(self, buf, value: float) -> bool: ...
    def allreduce(self, buf, key: str) -> None: ...
    def gather_times(self, times: list[float]) -> list[list[float]]: ...
    def all_true(self, flag: bool) -> bool: ...
    def barrier(self) -> None: ...
    def close(self) -> None: ...


class TorchTensors(Backend):
    """Buffers as torch float32 tensors (Horovod and torch.distributed both reduce them)."""

    torch = None

    def buffer(self, nbytes):
        return self.torch.empty(nbytes // DTYPE_BYTES, dtype=self.torch.float32)

    def fill(self, buf, value):
        buf.fill_(value)

    def all_equal(self, buf, value):
        return bool(self.torch.all(buf == value))


class HorovodBackend(TorchTensors):
    """horovod.torch: hvd.allreduce_(tensor, op=hvd.Sum) on CPU tensors.

    The controller is Horovod's choice (MPI under an MPI launcher). With HOROVOD_CONTROLLER=gloo
    and no HOROVOD_GLOO_RENDEZVOUS_ADDR (an MPI launcher, not horovodrun --gloo), rank 0 runs
    Horovod's own rendezvous server and the ranks find it through mpi4py, as horovodrun would.
    """

    name = "horovod"

    def __init__(self, tensors: int = 1) -> None:
        self.server = None
        self.tensors = tensors
        controller, cpu_ops = gloo_settings(os.environ)
        if controller == "gloo" and "HOROVOD_GLOO_RENDEZVOUS_ADDR" not in os.environ:
            self.server = gloo_rendezvous_from_mpi()
        elif cpu_ops == "gloo" and controller != "gloo":
            print(
                "allreduce_bench: error: HOROVOD_CPU_OPERATIONS=gloo under Horovod's MPI controller crashes Horovod "
                "0.23-0.28 (segfault in GlooAllreduce: the MPI controller never initialises the Gloo context of "
                "process set 0); set HOROVOD_CONTROLLER=gloo as well",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(2)
        import horovod.torch as hvd
        import torch

        self.hvd, self.torch = hvd, torch
        self.calls = 0
        hvd.init()
        self.rank, self.size = hvd.rank(), hvd.size()
        # Horovod lists Gloo's operations before MPI's and takes the first enabled one; Gloo is
        # enabled only when it is the controller or HOROVOD_CPU_OPERATIONS=gloo (operations.cc).
        self.ops = "gloo" if hvd.gloo_enabled() else "mpi" if hvd.mpi_enabled() else "unknown"
        self.controller = "gloo" if controller == "gloo" else "mpi"

    def allreduce(self, buf, key):
        if self.tensors == 1:
            self.hvd.allreduce_(buf, op=self.hvd.Sum, name=key)
            return
        handles = [
            self.hvd.allreduce_async_(part, op=self.hvd.Sum, name=f"{key}.{i}")
            for i, part in enumerate(buf.chunk(self.tensors))
        ]
        for handle in handles:
            self.hvd.synchronize(handle)

    def gather_times(self, times):
        self.calls += 1
        rows = self.hvd.allgather(
            self.torch.tensor([times], dtype=self.torch.float64), name=f"allreduce_bench.times.{self.calls}"
        )
        return rows.tolist()

    def all_true(self, flag):
        self.calls += 1
        flags = self.hvd.allgather(
            self.torch.tensor([int(flag)], dtype=self.torch.int32), name=f"allreduce_bench.flags.{self.calls}"
        )
        return bool(flags.min())

    def barrier(self):
        self.hvd.barrier()

    def close(self):
        self.hvd.shutdown()
        if self.server is not None:
            self.server.stop()


class TorchGlooBackend(TorchTensors):
    """torch.distributed with the Gloo process group: dist.all_reduce(tensor) (sum, in place).

    Rank and size come from the launcher's environment (or mpi4py); rank 0's TCPStore address is
    MASTER_ADDR/MASTER_PORT if both are set, otherwise rank 0 opens the store on a free port and
    broadcasts its address through mpi4py. torch builds the Gloo device on GLOO_SOCKET_IFNAME's
    interface when that is set (else on the address its hostname resolves to).
    """

    name = "torch-gloo"
    ops = "gloo"

    def __init__(self) -> None:
        import datetime

        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        found = launcher_rank_size(os.environ)
        comm = None
        if found is None or not ("MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ):
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
            found = found or (comm.Get_rank(), comm.Get_size())
        self.rank, self.size = found
        timeout = datetime.timedelta(seconds=120)
        if comm is None:
            host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
            store = dist.TCPStore(host, port, self.size, self.rank == 0, timeout=timeout)
        elif self.rank == 0:
            host = rendezvous_address(os.environ.get("GLOO_SOCKET_IFNAME", ""))
            store = dist.TCPStore(host, 0, self.size, True, timeout=timeout, wait_for_workers=False)
            comm.bcast((host, store.port), root=0)
        else:
            host, port = comm.bcast(None, root=0)
            store = dist.TCPStore(host, port, self.size, False, timeout=timeout)
        dist.init_process_group("gloo", store=store, rank=self.rank, world_size=self.size, timeout=timeout)

    def allreduce(self, buf, key):
        self.dist.all_reduce(buf, op=self.dist.ReduceOp.SUM)

    def gather_times(self, times):
        mine = self.torch.tensor(times, dtype=self.torch.float64)
        rows = [self.torch.empty_like(mine) for _ in range(self.size)]
        self.dist.all_gather(rows, mine)
        return [row.tolist() for row in rows]

    def all_true(self, flag):
        t = self.torch.tensor([int(flag)], dtype=self.torch.int32)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MIN)
        return bool(t.item())

    def barrier(self):
        self.dist.barrier()

    def close(self):
        self.dist.destroy_process_group()


class Mpi4pyBackend(Backend):
    """mpi4py: comm.Allreduce(MPI.IN_PLACE, numpy_float32_buffer, op=MPI.SUM)."""

    name = "mpi4py"
    ops = "mpi"

    def __init__(self) -> None:
        import numpy as np
        from mpi4py import MPI

        self.np, self.MPI = np, MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def buffer(self, nbytes):
        return self.np.empty(nbytes // DTYPE_BYTES, dtype=self.np.float32)

    def fill(self, buf, value):
        buf.fill(value)

    def all_equal(self, buf, value):
        return bool((buf == value).all())

    def allreduce(self, buf, key):
        self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)

    def gather_times(self, times):
        return self.comm.allgather(list(times))

    def all_true(self, flag):
        return bool(self.comm.allreduce(int(flag), op=self.MPI.MIN))

    def barrier(self):
        self.comm.Barrier()


def gloo_settings(env: Mapping[str, str]) -> tuple[str, str]:
    """(HOROVOD_CONTROLLER, HOROVOD_CPU_OPERATIONS) lower-cased, "" where unset."""
    return env.get("HOROVOD_CONTROLLER", "").strip().lower(), env.get("HOROVOD_CPU_OPERATIONS", "").strip().lower()


def slot_plan(hostnames: list[str]) -> list[dict[str, int]]:
    """Horovod's slot info for ranks 0..n-1 running on `hostnames[rank]` (what horovodrun --gloo
    hands each rank): local rank/size per host, cross rank/size among the hosts with that local rank.

        >>> [(s["local_rank"], s["cross_rank"], s["cross_size"]) for s in slot_plan(["a", "b", "a"])]
        [(0, 0, 2), (0, 1, 2), (1, 0, 1)]
    """
    hosts = list(dict.fromkeys(hostnames))
    per_host = {h: hostnames.count(h) for h in hosts}
    plan = []
    for rank, host in enumerate(hostnames):
        local_rank = hostnames[:rank].count(host)
        crossing = [h for h in hosts if per_host[h] > local_rank]
        plan.append(
            {
                "rank": rank,
                "size": len(hostnames),
                "local_rank": local_rank,
                "local_size": per_host[host],
                "cross_rank": crossing.index(host),
                "cross_size": len(crossing),
            }
        )
    return plan


def gloo_rendezvous_from_mpi():
    """Start Horovod's rendezvous server on rank 0 (returned; None elsewhere) and put in this
    process's environment what horovodrun --gloo would: the server's address and the slot info."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    hostname = socket.gethostname()
    plan = slot_plan(comm.allgather(hostname))
    server = None
    if comm.Get_rank() == 0:
        from horovod.runner.common.util.hosts import SlotInfo
        from horovod.runner.http.http_server import RendezvousServer

        hostnames = comm.gather(hostname, root=0)
        server = RendezvousServer()
        port = server.start()
        server.init([SlotInfo(hostname=h, **slot) for h, slot in zip(hostnames, plan, strict=True)])
        address = comm.bcast((rendezvous_address(os.environ.get("HOROVOD_GLOO_IFACE", "")), port), root=0)
    else:
        comm.gather(hostname, root=0)
        address = comm.bcast(None, root=0)
    mine = plan[comm.Get_rank()]
    os.environ.update(
        {
            "HOROVOD_GLOO_RENDEZVOUS_ADDR": address[0],
            "HOROVOD_GLOO_RENDEZVOUS_PORT": str(address[1]),
            "HOROVOD_HOSTNAME": hostname,
            **{f"HOROVOD_{k.upper()}": str(v) for k, v in mine.items()},
        }
    )
    os.environ.setdefault("HOROVOD_CPU_OPERATIONS", "gloo")
    return server


def rendezvous_address(ifname: str) -> str:
    """The IPv4 address other ranks reach rank 0 at: GLOO_SOCKET_IFNAME's (first) interface if
    set, else what this host's name resolves to."""
    first = ifname.split(",")[0].strip()
    if first:
        import fcntl
        import struct

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", first.encode()[:15]))  # SIOCGIFADDR
        return socket.inet_ntoa(packed[20:24])
    return socket.gethostbyname(socket.gethostname())


def make_backend(name: str, tensors: int = 1) -> Backend:
    if name == "horovod":
        return HorovodBackend(tensors)
    return {"torch-gloo": TorchGlooBackend, "mpi4py": Mpi4pyBackend}[name]()


# ------------------------------------------------------------------------------ the run
def bench_size(backend: Backend, nbytes: int, iters: int, warmup: int) -> dict:
    """Check, warm up, time `iters` allreduces of `nbytes`; every rank returns the same record."""
    key = f"allreduce_bench.{nbytes}"
    buf = backend.buffer(nbytes)
    backend.fill(buf, float(backend.rank + 1))
    backend.allreduce(buf, key)
    correct = backend.all_equal(buf, expected_sum(backend.size))
    backend.fill(buf, 0.0)  # zeros stay zeros: the timed iterations cannot overflow
    for _ in range(max(0, warmup - 1)):
        backend.allreduce(buf, key)
    backend.barrier()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        backend.allreduce(buf, key)
        times.append(time.perf_counter() - start)
    correct = backend.all_true(correct and backend.all_equal(buf, 0.0))
    seconds = median_of_slowest(backend.gather_times(times))
    return result_record(backend.name, backend.ops, nbytes, backend.size, iters, seconds, correct)


def _argument(parse):
    """`parse` as an argparse type whose ValueError message reaches the user."""

    def convert(text: str):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return convert


def arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", required=True, choices=BACKENDS)
    p.add_argument(
        "--min-bytes", type=_argument(parse_size), default=4096, help="smallest size (K/M/G suffixes: KiB/MiB/GiB)"
    )
    p.add_argument("--max-bytes", type=_argument(parse_size), default=256 << 20, help="largest size")
    p.add_argument("--factor", type=int, default=4, help="each size is the previous one times this")
    p.add_argument("--sizes", type=_argument(parse_sizes), help="explicit sizes instead of min/max/factor, e.g. 64M,1M")
    p.add_argument("--iters", type=int, help="timed iterations per size (default: enough to move ~1 GiB, 5..200)")
    p.add_argument("--warmup", type=int, default=2, help="untimed iterations per size, the first checks the sums")
    p.add_argument(
        "--tensors", type=int, default=1, help="horovod only: split each size into this many tensors submitted together"
    )
    args = p.parse_args(argv)
    try:
        args.size_list = args.sizes or size_range(args.min_bytes, args.max_bytes, args.factor)
    except ValueError as e:
        p.error(str(e))
    if args.iters is not None and args.iters < 1:
        p.error("--iters must be at least 1")
    if args.tensors < 1 or (args.tensors > 1 and args.backend != "horovod"):
        p.error("--tensors must be at least 1, and more than 1 only with --backend horovod")
    if any(nbytes % (args.tensors * DTYPE_BYTES) for nbytes in args.size_list):
        p.error(f"every size must split into {args.tensors} whole float32 tensors")
    if args.warmup < 1:
        p.error("--warmup must be at least 1 (the first warm-up iteration checks the sums)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    backend = make_backend(args.backend, args.tensors)
    all_correct = True
    if backend.rank == 0:
        controller = f" controller={backend.controller}" if isinstance(backend, HorovodBackend) else ""
        print(
            f"allreduce_bench: backend={backend.name} ops={backend.ops}{controller} ranks={backend.size} "
            f"host={socket.gethostname()} sizes={len(args.size_list)}",
            flush=True,
        )
    for nbytes in args.size_list:
        record = {**bench_size(backend, nbytes, args.iters or auto_iters(nbytes), args.warmup), "tensors": args.tensors}
        all_correct = all_correct and record["correct"]
        if backend.rank == 0:
            print(json.dumps(record), flush=True)
    backend.close()
    return 0 if all_correct else 1


if __name__ == "__main__":
    sys.exit(main())
