"""The launch gate's judgement from captured logs (NCCL_DEBUG=INFO, Open MPI verbose), its probe run
standalone, and its bad input (gate.threshold), each with exact expectations."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hpcbundle.diagnose.gate.probe import failure_of, program, report_of
from hpcbundle.diagnose.gate.verdict import (
    Expect,
    Measured,
    RankReport,
    busbw_gbps,
    judge,
    nccl_devices,
    nccl_transport,
    openmpi_transport,
)
from hpcbundle.launch import load_site

from .helpers import ROOT, hpcbundle

DATA = Path(__file__).resolve().parent / "data" / "gate"
NODES = ("node1", "node2", "node3")


def log(name: str) -> list[str]:
    """A captured log's lines, without its header comments."""
    return [line for line in (DATA / name).read_text().splitlines() if not line.startswith("#")]


def openmpi_ranks(sent: dict[str, int] | None = None) -> list[RankReport]:
    """One report per node from the captured Open MPI verbose log of 3 namespace nodes (lines by their prefix)."""
    lines = log("openmpi-ob1-tcp.log")
    return [
        RankReport(node, tuple(line for line in lines if line.startswith(f"[{node}:")), (), dict(sent or {}))
        for node in NODES
    ]


ETHERNET = Expect(where="sites/eth.yaml", fabric="ethernet", interfaces=("data0",), link_gbps=1.0)
# 16 MiB in 0.2 s on 3 ranks: algbw 0.671 Gbit/s, busbw 0.895 Gbit/s.
FAST = Measured(nbytes=16 << 20, seconds=0.2, backend="mpi4py")
SLOW = Measured(nbytes=1 << 20, seconds=0.25, backend="mpi4py")
ON_DATA0 = {"lo": 4096, "data0": 23_000_000, "mgmt0": 0}


@pytest.mark.parametrize(
    ("name", "transport", "devices"),
    [
        ("nccl-ib.log", "IB", ["mlx5_0:1/IB", "mlx5_1:1/IB"]),
        ("nccl-socket.log", "Socket", ["ib0", "eth0"]),
        ("nccl-2.4-ib.log", "IB", ["mlx5_0:1/IB"]),
        ("nccl-one-node.log", None, []),
    ],
)
def test_nccl_transport_is_read_from_its_debug_log(name: str, transport: str | None, devices: list[str]) -> None:
    lines = log(name)
    assert nccl_transport(lines) == transport
    assert (nccl_devices(lines, transport) if transport else []) == devices


def test_one_rank_on_a_real_h200_used_no_network_though_nccl_set_up_sockets_on_eth0() -> None:
    """NCCL 2.28.9's own log of the GPU lane's one rank (2026-11-27): no `via` line, `nRanks 1 nNodes 1`;
    `Using network Socket` on eth0 was set up, never used. The gate passes it as one node, fabric not judged."""
    lines = log("nccl-h200-one-rank.log")
    assert (nccl_transport(lines), nccl_devices(lines, "Socket"), nccl_devices(lines, "IB")) == (None, ["eth0"], [])
    assert nccl_transport([line for line in lines if " nNodes " not in line]) == "Socket"  # the init lines alone
    expect = Expect(where="gpunode.yaml", fabric="ethernet", interfaces=("eth0",), gpu=True)
    verdict = judge(expect, [RankReport("vm", (), tuple(lines), {"eth0": 0})], Measured(4096, 0.000157, "horovod"))
    assert (verdict.status, verdict.facts["ranks"], verdict.facts["nodes"], verdict.facts["nccl"]) == (
        "PASS",
        1,
        1,
        None,
    )
    assert verdict.line == (
        "hpcbundle gate: PASS (one node: the network was not exercised); 1 ranks on 1 nodes, horovod, "
        "MPI transport not reported, busbw 0 Gbit/s at 4096 bytes"
    )


def test_nccl_transport_falls_back_to_the_init_lines_when_no_channel_was_logged() -> None:
    init_only = [line for line in log("nccl-2.4-ib.log") if "Ring" not in line]
    assert nccl_transport(init_only) == "IB"
    assert nccl_transport([line for line in log("nccl-socket.log") if "Channel" not in line]) == "Socket"


def test_openmpi_transport_names_the_pml_and_the_btl_to_each_remote_node() -> None:
    seen = openmpi_ranks()
    transport = openmpi_transport(seen)
    assert (transport.pml, transport.remote_btls, transport.describe()) == (
        "ob1",
        {"tcp": ["node1", "node2", "node3"]},
        "ob1/tcp",
    )
    assert openmpi_transport([RankReport("n1")]).describe() == "unknown"


def test_busbw_follows_the_nccl_tests_definition() -> None:
    assert busbw_gbps(nbytes=1_000_000_000, seconds=8.0, ranks=2) == 1.0
    assert round(busbw_gbps(nbytes=16 << 20, seconds=0.2, ranks=3), 4) == 0.8948


def test_gate_passes_tcp_on_an_ethernet_site_at_the_link_speed() -> None:
    verdict = judge(ETHERNET, openmpi_ranks(ON_DATA0), FAST)
    assert (verdict.status, verdict.line) == (
        "PASS",
        "hpcbundle gate: PASS; 3 ranks on 3 nodes, mpi4py, Open MPI ob1/tcp via data0, "
        "busbw 0.895 of 1 Gbit/s at 16777216 bytes",
    )
    assert verdict.facts["fraction"] == 0.8948 and verdict.facts["interface"] == "data0"


def test_gate_fails_below_the_threshold_naming_the_keys_and_the_fix() -> None:
    verdict = judge(ETHERNET, openmpi_ranks(ON_DATA0), SLOW)
    assert verdict.status == "FAIL"
    assert verdict.line == (
        "hpcbundle gate: FAIL: busbw 0.0447 Gbit/s is 0.04 of network.link_gbps 1, below gate.threshold 0.5: "
        "sites/eth.yaml: network.interfaces (point it at the 1 Gbit/s data link, let hpcbundle tune pick the "
        "allreduce algorithm, or set network.link_gbps to what this link is rated); 3 ranks on 3 nodes, mpi4py, "
        "Open MPI ob1/tcp via data0, busbw 0.0447 of 1 Gbit/s at 1048576 bytes"
    )


def test_gate_threshold_is_the_sites() -> None:
    lenient = Expect(where="s.yaml", fabric="ethernet", link_gbps=1.0, threshold=0.04)
    assert judge(lenient, openmpi_ranks(ON_DATA0), SLOW).status == "PASS"


def test_gate_fails_when_the_bytes_left_by_another_interface() -> None:
    verdict = judge(ETHERNET, openmpi_ranks({"data0": 10, "slow0": 23_000_000}), FAST)
    assert verdict.status == "FAIL"
    assert "the allreduce went over slow0, not network.interfaces (data0): sites/eth.yaml: network.interfaces" in (
        verdict.line
    )


def test_gate_fails_open_mpi_over_tcp_on_an_infiniband_site() -> None:
    infiniband = Expect(where="sites/ib.yaml", fabric="infiniband", link_gbps=100.0)
    verdict = judge(infiniband, openmpi_ranks(ON_DATA0), FAST)
    assert verdict.status == "FAIL"
    assert verdict.line.startswith(
        "hpcbundle gate: FAIL: Open MPI sent to node1,node2,node3 over the tcp btl, but network.fabric is infiniband: "
        "sites/ib.yaml: network.fabric (use pml ucx with an image built with UCX"
    )


def _gpu_ranks(nccl_log: str) -> list[RankReport]:
    lines = tuple(log(nccl_log))
    return [RankReport(host, (), lines, {"ib0": 1000}) for host in ("gpu01", "gpu01", "gpu02", "gpu02")]


def test_gate_fails_nccl_on_sockets_on_an_infiniband_site_and_passes_nccl_on_ib() -> None:
    infiniband = Expect(where="sites/ib.yaml", fabric="infiniband", link_gbps=100.0, gpu=True)
    fast = Measured(nbytes=256 << 20, seconds=0.03, backend="horovod")
    failed = judge(infiniband, _gpu_ranks("nccl-socket.log"), fast)
    assert failed.status == "FAIL"
    assert failed.line.startswith(
        "hpcbundle gate: FAIL: NCCL used NET/Socket, but network.fabric is infiniband: sites/ib.yaml: network.fabric "
        "(the image needs the RDMA user space (libibverbs1, ibverbs-providers)"
    )
    passed = judge(infiniband, _gpu_ranks("nccl-ib.log"), fast)
    assert (passed.status, passed.facts["nccl"], passed.facts["nccl_devices"]) == (
        "PASS",
        "IB",
        ["mlx5_0:1/IB", "mlx5_1:1/IB"],
    )
    assert "NCCL NET/IB (mlx5_0:1/IB,mlx5_1:1/IB) via ib0, busbw 107 of 100 Gbit/s" in passed.line


def test_gate_names_nccls_socket_threads_on_an_ethernet_gpu_site_and_asks_for_more_when_slow() -> None:
    sockets = "NCCL_SOCKET_NTHREADS=4 x NCCL_NSOCKS_PERTHREAD=4"
    ethernet = Expect(where="sites/eth.yaml", fabric="ethernet", link_gbps=100.0, gpu=True, nccl_sockets=sockets)
    fast = Measured(nbytes=256 << 20, seconds=0.03, backend="horovod")
    passed = judge(ethernet, _gpu_ranks("nccl-socket.log"), fast)
    assert passed.status == "PASS" and f"NCCL NET/Socket (ib0,eth0) with {sockets} via ib0" in passed.line
    slow = judge(ethernet, _gpu_ranks("nccl-socket.log"), Measured(nbytes=256 << 20, seconds=3.0, backend="horovod"))
    assert slow.status == "FAIL" and f"raise NCCL_SOCKET_NTHREADS/NCCL_NSOCKS_PERTHREAD in env (now {sockets})" in (
        slow.line
    )


def test_gate_on_one_node_or_without_a_link_speed_passes_saying_what_it_did_not_judge() -> None:
    one_node = judge(ETHERNET, [RankReport("node1"), RankReport("node1")], FAST)
    assert one_node.status == "PASS" and "(one node: the network was not exercised)" in one_node.line
    unrated = judge(Expect(where="s.yaml", fabric="ethernet"), openmpi_ranks(ON_DATA0), SLOW)
    assert unrated.status == "PASS" and "(busbw not judged: set network.link_gbps)" in unrated.line


def test_gate_fails_a_wrong_sum() -> None:
    wrong = Measured(nbytes=16 << 20, seconds=0.2, backend="mpi4py", correct=False)
    assert judge(ETHERNET, openmpi_ranks(ON_DATA0), wrong).line.startswith(
        "hpcbundle gate: FAIL: the allreduce gave a wrong sum"
    )


@pytest.mark.full_setup
def test_probe_runs_as_python_c_without_hpcbundle_installed(tmp_path: Path) -> None:
    site = load_site("local", ROOT / "site_configs")
    argv = program(site, sys.executable)
    assert argv[:2] == [sys.executable, "-c"] and json.loads(argv[3])["fabric"] == site.network.fabric
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ran = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env, check=False)
    assert ran.returncode == 0, ran.stderr
    report = report_of(ran.stdout)
    assert report is not None and report["hpcbundle_gate"] == "PASS" and report["ranks"] == 1
    assert ran.stderr.strip().endswith(report["line"])


@pytest.mark.parametrize("threshold", ["1.5", "0", "-0.2"])
def test_gate_threshold_outside_zero_to_one_is_a_one_line_error(tmp_path: Path, threshold: str) -> None:
    data = yaml.safe_load((ROOT / "site_configs" / "local.yaml").read_text())
    data["gate"] = {"threshold": float(threshold)}
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(data))
    result = hpcbundle("launch", "--site", str(path), "--np", "2", "--gate", "--exec", "--", "python3", "t.py")
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert re.search(
        rf"{re.escape(str(path))}: gate.threshold: {re.escape(f'{float(threshold):g}')} is outside \(0, 1\] "
        r"\(give the least busbw the gate accepts as a fraction of network.link_gbps, e.g. 0.5\)",
        lines[0],
    ), lines[0]


@pytest.mark.parametrize("gate", [{"timeout": 3601}, {"timeout": 10**17}, {"threshold": float("inf")}])
def test_gate_timeout_over_an_hour_or_an_infinite_threshold_is_a_one_line_error(tmp_path: Path, gate: dict) -> None:
    data = yaml.safe_load((ROOT / "site_configs" / "local.yaml").read_text())
    data["gate"] = gate
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(data))
    result = hpcbundle("launch", "--site", str(path), "--np", "2", "--gate", "--exec", "--", "python3", "t.py")
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"hpcbundle: error: {path}: gate.{next(iter(gate))}: "), line


@pytest.mark.full_setup  # the gate runs through the local site's mpirun (Open MPI)
def test_gate_in_a_python_without_mpi4py_or_horovod_says_what_it_needs(tmp_path: Path) -> None:
    for package in ("mpi4py", "horovod"):  # shadowed by packages that fail to import, as in a bare image
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text(f'raise ImportError("No module named {package!r}")\n')
    path = f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    result = hpcbundle(
        "launch", "--np", "1", "--gate", "--exec", "--no-doctor", "--", sys.executable, "-c", "print('job ran')",
        env={"PYTHONPATH": path},
    )  # fmt: skip
    assert result.returncode == 2 and "job ran" not in result.stdout
    assert result.stderr.strip().splitlines()[-1] == (
        f"hpcbundle gate: FAIL: No module named 'horovod': {ROOT / 'site_configs' / 'local.yaml'}: container.runtime "
        "(the gate needs Horovod with PyTorch, or mpi4py, in the image or the host's Python)"
    )


def test_the_report_and_the_probes_own_failure_are_found_behind_a_launchers_rank_prefix() -> None:
    tagged = (
        'Warning: Permanently added node2\n[0]<stdout>:{"hpcbundle_gate": "PASS", "line": "hpcbundle gate: PASS"}\n'
    )
    assert report_of(tagged) == {"hpcbundle_gate": "PASS", "line": "hpcbundle gate: PASS"}
    assert report_of("[1,0]<stdout>:job output\n") is None
    assert failure_of("[1,0]<stderr>:hpcbundle gate: FAIL: No module named 'horovod': s.yaml\nmpirun noise", 2) == (
        "hpcbundle gate: FAIL: No module named 'horovod': s.yaml"
    )
    assert failure_of("a\nb\nc\nd\n", 1) == "hpcbundle gate: FAIL: the probe gave no report (exit 1): b / c / d"


@pytest.mark.parametrize(
    ("launcher_prints", "verdict"),
    [
        ("", "hpcbundle gate: FAIL: no rank started within 1 s: "),
        ("hpcbundle gate: rank started on node1", "hpcbundle gate: FAIL: no answer within 1 s: "),
    ],
)
def test_a_batch_gate_that_times_out_says_whether_the_start_or_the_transfer_hung(
    tmp_path: Path, launcher_prints: str, verdict: str
) -> None:
    data = yaml.safe_load((ROOT / "site_configs" / "local.yaml").read_text())
    data["gate"] = {"timeout": 1}
    site = tmp_path / "local.yaml"
    site.write_text(yaml.safe_dump(data))
    made = hpcbundle("sbatch", "--site", str(site), "--nodes", "1", "--gate", "--", "python3", "t.py")
    assert made.returncode == 0, made.stderr
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "mpirun"  # the gate's launch: prints what a rank would, then hangs
    fake.write_text(f"#!/bin/sh\necho '{launcher_prints}'\nexec sleep 30\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    ran = subprocess.run(["bash", "-c", made.stdout], capture_output=True, text=True, timeout=60, env=env, check=False)
    assert ran.returncode == 124, ran.stderr
    assert [line for line in ran.stderr.splitlines() if line.startswith(verdict)], ran.stderr


# --- a torch job's gate (--torch, --torchrun): Gloo over TCP, no MPI, and the rank table -------------------------

TORCH = Expect(where="sites/eth.yaml", fabric="ethernet", interfaces=("data0",), link_gbps=1.0, torch=True)
TORCH_FAST = Measured(nbytes=16 << 20, seconds=0.2, backend="torch.distributed gloo")


def torch_ranks(sent: dict[str, int], table: list[tuple[int, str, int, str]] | None = None) -> list[RankReport]:
    """One torch rank per node (RANK, host, LOCAL_RANK, device), each with the bytes its interfaces sent."""
    rows = table or [(i, node, 0, "cpu") for i, node in enumerate(NODES)]
    return [RankReport(host, (), (), dict(sent), rank, local, device) for rank, host, local, device in rows]


def test_a_torch_gate_passes_gloo_over_the_data_interface_with_every_rank_once() -> None:
    verdict = judge(TORCH, torch_ranks(ON_DATA0), TORCH_FAST)
    assert (verdict.status, verdict.line) == (
        "PASS",
        "hpcbundle gate: PASS; 3 ranks on 3 nodes, torch.distributed gloo, RANK 0 to 2 once each, Gloo over TCP "
        "via data0, busbw 0.895 of 1 Gbit/s at 16777216 bytes",
    )
    assert verdict.facts["ranks_table"] == [[0, "node1", 0, "cpu"], [1, "node2", 0, "cpu"], [2, "node3", 0, "cpu"]]


def test_a_torch_gate_on_one_gpu_rank_says_nccl_and_no_gloo() -> None:
    """NCCL at one rank opens no transport, so its log names none: the line must still not say Gloo."""
    gpu = Expect(where="gpunode.yaml", fabric="ethernet", interfaces=("eth0",), gpu=True, torch=True)
    one = [RankReport("vm", (), tuple(log("nccl-h200-one-rank.log")), {}, 0, 0, "cuda:0")]
    verdict = judge(gpu, one, Measured(nbytes=1 << 20, seconds=0.001, backend="torch.distributed nccl"))
    assert (verdict.status, verdict.line) == (
        "PASS",
        "hpcbundle gate: PASS (one node: the network was not exercised); 1 ranks on 1 nodes, torch.distributed "
        "nccl, RANK 0 to 0 once each, busbw 0 Gbit/s at 1048576 bytes",
    )


def test_a_torch_gate_fails_gloo_bytes_over_another_interface() -> None:
    verdict = judge(TORCH, torch_ranks({"data0": 10, "mgmt0": 23_000_000}), TORCH_FAST)
    assert verdict.status == "FAIL" and verdict.line.startswith(
        "hpcbundle gate: FAIL: the allreduce went over mgmt0, not network.interfaces (data0)"
    )


@pytest.mark.parametrize(
    "table, problem",
    [([(0, "node1", 0, "cpu"), (0, "node2", 0, "cpu"), (2, "node3", 0, "cpu")],
      "RANK 0 twice, where 3 ranks need 0 to 2 once each: sites/eth.yaml: launcher.name"),
     ([(0, "node1", 0, "cuda:0"), (1, "node1", 1, "cuda:0"), (2, "node2", 0, "cuda:0")],
      "two ranks on node1 use cuda:0: sites/eth.yaml: node.gpus (one rank per GPU")],
)  # fmt: skip
def test_a_torch_gate_fails_a_rank_table_with_a_rank_twice_or_two_ranks_on_one_gpu(table, problem) -> None:
    verdict = judge(TORCH, torch_ranks(ON_DATA0, table), TORCH_FAST)
    assert verdict.status == "FAIL" and verdict.line.startswith(f"hpcbundle gate: FAIL: {problem}"), verdict.line


def test_the_torch_gate_probe_carries_the_wiring_in_its_expectations() -> None:
    site = load_site("local", ROOT / "site_configs")
    assert json.loads(program(site, "python3", torch=True)[-1])["torch"] is True
    assert json.loads(program(site, "python3")[-1])["torch"] is False
