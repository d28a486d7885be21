"""The launch gate's probe: a short timed allreduce on the job's nodes, run as `python -c CODE EXPECT`.

`program()` (hpcbundle side) makes that argv: CODE is diagnose/gate/verdict.py's source followed by this
file's (packed), so it runs in any image or host Python with mpi4py or Horovod, without hpcbundle; the
launch command of the job itself (build_command) starts it on the job's nodes, in its image,
with its environment. Every rank captures what its MPI and NCCL say about their transport
(Open MPI pml/btl base verbose on its stderr, NCCL_DEBUG=INFO into NCCL_DEBUG_FILE) and the bytes
each interface sent; rank 0 gathers them, judges them with gate.judge and prints one JSON line
on stdout and the verdict line on stderr; its exit status is 0 (PASS) or 2 (FAIL).

The allreduce grows from 1 MiB until one takes GATE_TARGET_S (or MAX_BYTES), then is timed
three times: a fast link is measured at a size where bandwidth, not latency, decides, and a slow
one still answers in about a second.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any, Callable

from .verdict import STARTED, Expect, Measured, RankReport, judge  # sent as verdict.py's source before this file's

START_BYTES = 1 << 20
MAX_BYTES = 256 << 20
GATE_TARGET_S = 0.25
REPEATS = 3
REPORT_KEY = "hpcbundle_gate"
_MPI_VERBOSE = {"OMPI_MCA_pml_base_verbose": "10", "OMPI_MCA_btl_base_verbose": "100"}


# --- hpcbundle side: the argv the launch command runs ------------------------------------------


def expect(site: Any, torch: bool = False) -> Expect:
    """What the gate must see on `site` (a config.sites.Site): fabric, interfaces, link, threshold, GPUs; with
    `torch`, the ranks of a torch.distributed job (--torch, --torchrun) and their rank table.

    The interfaces are those the site names for data, in network.interfaces, mca or env (the network
    module says which keys); imported here, not on top, because this file also runs on the nodes alone.
    """
    from ...knowledge.network import gate_interfaces, socket_threads

    interfaces, keys = gate_interfaces(site)
    return Expect(
        where=site.where,
        fabric=site.network.fabric,
        interfaces=interfaces,
        interface_keys=keys,
        link_gbps=site.network.link_gbps,
        threshold=site.gate.threshold,
        gpu=bool(site.node.gpus),
        nccl_sockets=socket_threads(site),
        torch=torch,
    )


def source() -> str:
    """The probe's code: verdict.py, then this module without its import of it (run as __main__, it calls main)."""
    here = Path(__file__).resolve().parent
    gate_text = (here / "verdict.py").read_text(encoding="utf-8")
    own = [
        line
        for line in (here / "probe.py").read_text(encoding="utf-8").splitlines()
        if not line.startswith(("from .verdict import", "from __future__ import"))
    ]
    return gate_text + "\n".join(own) + "\n"


def program(site: Any, python: str, torch: bool = False) -> list[str]:
    """`python -c CODE EXPECT`: the gate probe as a program for the site's launch command (`torch`: it meets the
    other ranks by torch.distributed, as the job will).

    CODE unpacks source() (zlib, base64): a few kB of quote-free text that passes through every
    launcher, runtime and batch script unchanged.
    """
    packed = base64.b64encode(zlib.compress(source().encode("utf-8"), 9)).decode("ascii")
    code = f'import base64, zlib; exec(zlib.decompress(base64.b64decode("{packed}")))'
    return [python, "-c", code, json.dumps(dataclasses.asdict(expect(site, torch)), sort_keys=True)]


def report_of(stdout: str) -> dict[str, Any] | None:
    """Rank 0's JSON report in the launch's output (other lines are the launcher's; a launcher may
    prefix each line with the rank, as horovodrun's `[0]<stdout>:` and mpirun's --tag-output do), or None."""
    for line in stdout.splitlines():
        start = line.find('{"')
        if start >= 0 and REPORT_KEY in line:
            try:
                return json.loads(line[start:])
            except json.JSONDecodeError:
                continue
    return None


def failure_of(stderr: str, status: int | None) -> str:
    """The line to show when the probe gave no report: its own FAIL line (no mpi4py or Horovod in the
    image), else the launcher's last words."""
    for line in stderr.splitlines():
        if "hpcbundle gate: FAIL" in line:
            return line[line.index("hpcbundle gate: FAIL") :]
    tail = " / ".join(stderr.strip().splitlines()[-3:])
    return f"hpcbundle gate: FAIL: the probe gave no report (exit {status}): {tail}"


# --- node side ------------------------------------------------------------------------------------


class Backend:
    """An allreduce library the image has: mpi4py on CPUs, Horovod (PyTorch tensors, NCCL on GPUs)."""

    name = ""
    rank = 0
    size = 1

    def timed(self, nbytes: int) -> tuple[float, bool]:
        """Seconds one allreduce of `nbytes` float32 took on this rank, and whether its sum is right."""
        raise NotImplementedError

    def slowest(self, seconds: float) -> float:
        """The largest of every rank's `seconds` (an allreduce takes as long as its slowest rank)."""
        raise NotImplementedError

    def gather(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        """Every rank's `item`, in rank order."""
        raise NotImplementedError


class Mpi4pyBackend(Backend):
    """MPI_Allreduce of float32 through mpi4py (MPI_Init happens at import, inside the capture)."""

    name = "mpi4py"

    def __init__(self) -> None:
        from mpi4py import MPI

        self.mpi, self.comm = MPI, MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def timed(self, nbytes: int) -> tuple[float, bool]:
        send, recv = bytearray(nbytes), bytearray(nbytes)
        struct.pack_into("f", send, 0, 1.0)
        self.comm.Barrier()
        start = time.perf_counter()
        self.comm.Allreduce([send, self.mpi.FLOAT], [recv, self.mpi.FLOAT], op=self.mpi.SUM)
        elapsed = time.perf_counter() - start
        return elapsed, struct.unpack_from("f", recv, 0)[0] == float(self.size)

    def slowest(self, seconds: float) -> float:
        return self.comm.allreduce(seconds, op=self.mpi.MAX)

    def gather(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        return self.comm.allgather(item)


class TensorBackend(Backend):
    """A library that all-reduces PyTorch tensors on `device` (the rank's GPU, or the CPU): timed alike."""

    torch: Any
    device = "cpu"

    def summed(self, tensor: Any) -> None:
        """Sum `tensor` over every rank, in place."""
        raise NotImplementedError

    def _sync(self) -> None:
        if self.device != "cpu":
            self.torch.cuda.synchronize()

    def timed(self, nbytes: int) -> tuple[float, bool]:
        tensor = self.torch.zeros(nbytes // 4, dtype=self.torch.float32, device=self.device)
        tensor[0] = 1.0
        self.slowest(0.0)  # a barrier: ranks start together
        self._sync()
        start = time.perf_counter()
        self.summed(tensor)
        self._sync()
        elapsed = time.perf_counter() - start
        return elapsed, float(tensor[0].item()) == float(self.size)


class HorovodBackend(TensorBackend):
    """hvd.allreduce of a float32 PyTorch tensor: on the rank's GPU (NCCL) when `gpu`, else on the CPU."""

    name = "horovod"

    def __init__(self, gpu: bool) -> None:
        import horovod.torch as hvd
        import torch

        self.hvd, self.torch = hvd, torch
        hvd.init()
        self.rank, self.size, self.calls = hvd.rank(), hvd.size(), 0
        self.device = "cpu"
        if gpu:
            torch.cuda.set_device(hvd.local_rank())
            self.device = f"cuda:{hvd.local_rank()}"

    def _name(self) -> str:
        self.calls += 1
        return f"hpcbundle.gate.{self.calls}"

    def summed(self, tensor: Any) -> None:
        self.hvd.allreduce_(tensor, op=self.hvd.Sum, name=self._name())

    def slowest(self, seconds: float) -> float:
        value = self.torch.tensor([seconds], dtype=self.torch.float64)
        return float(self.hvd.allreduce(value, op=self.hvd.Max, name=self._name())[0])

    def gather(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        return list(self.hvd.allgather_object(item, name=self._name()))


class TorchBackend(TensorBackend):
    """torch.distributed's all_reduce, met by env:// as the job's ranks meet: NCCL on the rank's GPU (cuda:LOCAL_RANK)
    when `gpu`, else Gloo on the CPU."""

    def __init__(self, gpu: bool) -> None:
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.device = f"cuda:{self.local_rank}" if gpu else "cpu"
        if gpu:
            torch.cuda.set_device(self.local_rank)
        dist.init_process_group("nccl" if gpu else "gloo")
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.name = f"torch.distributed {'nccl' if gpu else 'gloo'}"

    def summed(self, tensor: Any) -> None:
        self.dist.all_reduce(tensor)

    def slowest(self, seconds: float) -> float:
        value = self.torch.tensor([seconds], dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(value, op=self.dist.ReduceOp.MAX)
        return float(value[0].item())

    def gather(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        everyone: list[Any] = [None] * self.size
        self.dist.all_gather_object(everyone, {**item, "rank": self.rank, "local_rank": self.local_rank,
                                               "device": self.device})  # fmt: skip
        return everyone


def backend(gpu: bool, torch: bool = False) -> Backend:
    """torch.distributed for a torch job (--torch, --torchrun); else Horovod on GPU nodes (its NCCL is what the
    job uses) and under horovodrun's Gloo (no MPI job to join); mpi4py on CPUs where the image has it, else
    Horovod."""
    if torch:
        return TorchBackend(gpu)
    if not gpu and "HOROVOD_GLOO_RENDEZVOUS_ADDR" not in os.environ:
        try:
            return Mpi4pyBackend()
        except ImportError:
            pass
    return HorovodBackend(gpu)


def measure(lib: Backend, target: float = GATE_TARGET_S, start: int = START_BYTES) -> Measured:
    """Grow the allreduce until one takes `target` s (or MAX_BYTES), then the median of REPEATS at that size.

    Every rank takes the same decisions: each uses the slowest rank's time.
    """
    lib.timed(4096)  # connections are opened lazily: not in the timing
    nbytes = start
    while True:
        seconds, correct = lib.timed(nbytes)
        seconds = lib.slowest(seconds)
        if seconds >= target or nbytes >= MAX_BYTES or lib.size == 1:
            break
        grow = 2
        while grow < 16 and seconds * grow < target:
            grow *= 2
        nbytes = min(MAX_BYTES, nbytes * grow)
    times = []
    for _ in range(REPEATS):
        seconds, ok = lib.timed(nbytes)
        times.append(lib.slowest(seconds))
        correct = correct and ok
    return Measured(nbytes, statistics.median(times), lib.name, correct)


def tx_bytes() -> dict[str, int]:
    """Bytes each interface has sent, from /proc/net/dev (the host's, in a container sharing its network)."""
    counters = {}
    for line in Path("/proc/net/dev").read_text(encoding="ascii").splitlines()[2:]:
        name, _, numbers = line.partition(":")
        counters[name.strip()] = int(numbers.split()[8])
    return counters


class StderrCapture:
    """fd 2 into a temp file while MPI initialises and talks (its verbose output), then restored."""

    def __enter__(self) -> StderrCapture:
        sys.stderr.flush()
        self.file = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        self.saved = os.dup(2)
        os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)

    def lines(self) -> list[str]:
        """The transport lines MPI wrote (pml selection, per-peer btl), not its whole verbose output."""
        self.file.seek(0)
        return [line.rstrip() for line in self.file if "select: component" in line or "mca: bml:" in line]


def nccl_lines(path: str) -> list[str]:
    """The network and channel lines of this rank's NCCL debug file (empty when NCCL wrote none)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if any(word in line for word in ("NET/", "Using network", " via "))]


def run(options: Expect, make: Callable[[bool, bool], Backend] = backend) -> tuple[int, dict[str, Any] | None]:
    """The probe on this rank; rank 0 returns (exit status, report), the others (0, None)."""
    for name, value in _MPI_VERBOSE.items():
        os.environ.setdefault(name, value)
    nccl_file = ""  # NCCL's debug file, on GPU sites only (NCCL runs nowhere else)
    if options.gpu:
        handle, nccl_file = tempfile.mkstemp(prefix="hpcbundle-gate-nccl.")
        os.close(handle)
        os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET", NCCL_DEBUG_FILE=nccl_file)
    try:
        with StderrCapture() as captured:
            lib = make(options.gpu, options.torch)
            before = tx_bytes()
            measured = measure(lib)
            after = tx_bytes()
        nccl = tuple(nccl_lines(nccl_file)) if nccl_file else ()
    finally:
        if nccl_file:
            os.unlink(nccl_file)
    sent = {name: after[name] - before.get(name, 0) for name in after}
    mine = RankReport(socket.gethostname(), tuple(captured.lines()), nccl, sent)
    everyone = [RankReport.from_json(item) for item in lib.gather(mine.__dict__)]
    if lib.rank != 0:
        return 0, None
    verdict = judge(options, everyone, measured)
    report = {REPORT_KEY: verdict.status, "line": verdict.line, **verdict.facts}
    return (0 if verdict.status == "PASS" else 2), report


def main(argv: list[str]) -> int:
    """Run the probe with the expectations in argv[0] (JSON); rank 0 prints its report and verdict."""
    options = Expect.from_json(json.loads(argv[0]) if argv else {"where": "", "fabric": "ethernet"})
    print(f"{STARTED} {socket.gethostname()}", flush=True)
    try:
        status, report = run(options)
    except ImportError as exc:
        needs = "PyTorch" if options.torch else "Horovod with PyTorch, or mpi4py,"
        print(
            f"hpcbundle gate: FAIL: {exc}: {options.where}: container.runtime "
            f"(the gate needs {needs} in the image or the host's Python)",
            file=sys.stderr,
        )
        return 2
    if report is not None:
        print(json.dumps(report, sort_keys=True), flush=True)
        print(report["line"], file=sys.stderr, flush=True)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # MPI's verbose goodbyes at exit say nothing new
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
