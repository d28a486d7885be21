"""doctor's judging, pure: observed facts in, exact PASS/WARN/FAIL results out from the shared rules.

No machine is needed.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys

import pytest

from hpcbundle.config.sites import Site
from hpcbundle.diagnose.doctor import observed_facts
from hpcbundle.diagnose.fanout import unreached
from hpcbundle.diagnose.probes import numa_memory, parse_gpus, runtimes, stopped_ranks
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.knowledge.launching import runtime_detection
from hpcbundle.rules.engine import Result, evaluate, exit_status
from hpcbundle.rules.fabric import named_interfaces
from hpcbundle_testbed.procs import wait_until

from .helpers import SMALL_SITE as SITE
from .helpers import make_site


def site(**changes) -> Site:
    return make_site(SITE, changes)


def node(host: str, *, ifaces=(("data0", True, "10.77.0.{}"),), mpi="4.1.4", image=None, gpu=None, ib=()) -> dict:
    i = host[-1]
    return {
        "host": host,
        "cpus": 2,
        "uid": 0,
        "infiniband": list(ib),
        "runtimes": {"charliecloud": "0.31"},
        "interfaces": [{"name": n, "up": up, "ipv4": [f"{a.format(i)}/24"], "kind": "ether"} for n, up, a in ifaces],
        "gpu": gpu or {"present": False, "driver": None, "gpus": [], "note": "nvidia-smi not found"},
        "mpi": {"flavour": "openmpi", "version": mpi, "evidence": f"`mpirun --version`: mpirun (Open MPI) {mpi}"},
        "image": image,
    }


def by_rule(results: list[Result]) -> dict[str, Result]:
    return {r.rule: r for r in results}


def diagnose(site_model: Site, nodes: dict, **observed) -> list[Result]:
    return evaluate(observed_facts(site_model, nodes, **observed), knowledge_base())


def test_named_interfaces_come_from_every_key_that_names_one_and_skip_exclusions():
    s = site(
        mca={"btl_tcp_if_include": "ib0,eth1"},
        network={"interfaces": []},
        env={"NCCL_SOCKET_IFNAME": "^lo,docker0", "HOROVOD_GLOO_IFACE": "eth1", "GLOO_SOCKET_IFNAME": "=ib0"},
    )
    assert named_interfaces(s) == {
        "ib0": ["mca.btl_tcp_if_include", "env.GLOO_SOCKET_IFNAME"],
        "eth1": ["mca.btl_tcp_if_include", "env.HOROVOD_GLOO_IFACE"],
    }


def test_all_reachable_nodes_pass_with_exit_status_zero():
    results = diagnose(
        site(),
        {h: node(h) for h in ("n1", "n2")},
        reach={"data0": [("n1", "n2", "10.77.0.2", "ok"), ("n2", "n1", "10.77.0.1", "ok")]},
        hosts={"n1": 1, "n2": 1},
    )
    assert exit_status(results) == 0
    assert by_rule(results)["interface data0 reach"] == Result(
        "interface data0 reach", "PASS", "2 of 2 TCP connections between 2 nodes over data0"
    )


def test_unreachable_interface_fails_naming_the_pair_and_the_key():
    results = diagnose(
        site(),
        {h: node(h) for h in ("n1", "n2")},
        reach={"data0": [("n1", "n2", "10.77.0.2", "no answer within 3 s"), ("n2", "n1", "10.77.0.1", "ok")]},
    )
    result = by_rule(results)["interface data0 reach"]
    assert result.status == "FAIL"
    assert (
        result.evidence
        == "1 of 2 TCP connections over data0 failed: n1 -> n2 10.77.0.2: no answer within 3 s; MPI would hang here"
    )
    assert result.fix == "data0 does not carry traffic between the nodes: name the data interface in network.interfaces"


def test_missing_and_down_interfaces_fail():
    results = diagnose(site(), {"n1": node("n1"), "n2": node("n2", ifaces=(("eth0", True, "10.0.0.{}"),))})
    assert (
        by_rule(results)["interface data0"].evidence
        == "no interface data0 on n2 (named by network.interfaces; the nodes have data0, eth0)"
    )
    results = diagnose(site(), {"n1": node("n1", ifaces=(("data0", False, "10.77.0.{}"),))})
    assert by_rule(results)["interface data0"].evidence == "data0 is down on n1"


def manifest_image(version: str, sha: str = "aa" * 32, cuda: str | None = None, archs: str = "") -> dict:
    labels = {"org.hpcbundle.mpi.flavour": "openmpi", "org.hpcbundle.mpi.version": version}
    if cuda:
        labels |= {"org.hpcbundle.cuda": cuda, "org.hpcbundle.gpu-archs": archs}
    return {"path": "/img", "exists": True, "kind": "dir", "sha256": sha, "manifest": {"labels": labels}}


def test_image_with_open_mpi_5_fails_against_host_open_mpi_4_1():
    results = diagnose(site(), {"n1": node("n1", image=manifest_image("5.0.3"))}, image="/img", checksum=True)
    result = by_rule(results)["mpi-abi-host"]
    assert result.status == "FAIL"
    assert result.evidence == (
        "host Open MPI 4.1.4 and image Open MPI 5.0.3 are different series; "
        "the hybrid model needs the same major.minor (4.1.x in the image)"
    )
    assert by_rule(results)["image-metadata"].evidence == "read /img/etc/hpcbundle/manifest.json on n1"


@pytest.mark.parametrize(
    "second, check, evidence",
    [
        ({"path": "/img", "exists": False, "kind": "missing"}, "image present", "/img does not exist on n2"),
        (
            manifest_image("4.1.4", sha="bb" * 32),
            "image checksum",
            "/img differs between nodes: sha256 aaaaaaaaaaaa… on n1; sha256 bbbbbbbbbbbb… on n2",
        ),
    ],
)
def test_image_missing_or_different_on_one_node_fails(second, check, evidence):
    results = diagnose(
        site(),
        {"n1": node("n1", image=manifest_image("4.1.4")), "n2": node("n2", image=second)},
        image="/img",
        checksum=True,
    )
    result = by_rule(results)[check]
    assert (result.status, result.evidence) == ("FAIL", evidence)


def test_a_file_image_that_is_no_sif_warns():
    image = {"path": "/h.sqfs", "exists": True, "kind": "file", "manifest": None, "sha256": "c" * 64}
    results = diagnose(site(), {"n1": node("n1", image=image)}, image="/h.sqfs", checksum=True)
    assert by_rule(results)["image-metadata"].status == "WARN" and exit_status(results) == 1


def sif_image(sha: str = "aa" * 32, *, manifest: bool = True, mpi: str = "4.1.4", **extra) -> dict:
    """A SIF as the probe reports it: its labels (JSON metadata) and the manifest from its SquashFS."""
    labels = {"org.hpcbundle.mpi.flavour": "openmpi", "org.hpcbundle.mpi.version": mpi, "org.label-schema.x": "1"}
    found = {"path": "/h.sif", "exists": True, "kind": "sif", "sha256": sha, "labels": labels}
    return found | {"manifest": {"labels": labels} if manifest else None} | extra


def test_the_same_sif_on_every_node_passes_and_its_manifest_is_read():
    nodes = {h: node(h, image=sif_image()) for h in ("n1", "n2")}
    results = by_rule(diagnose(site(), nodes, image="/h.sif", checksum=True))
    assert (results["image checksum"].status, results["image checksum"].evidence) == (
        "PASS",
        "/h.sif: sha256 aaaaaaaaaaaa… on n1, n2",
    )
    assert results["image-metadata"].evidence == "read /etc/hpcbundle/manifest.json in /h.sif on n1"
    assert results["mpi-abi-host"].status == "PASS"


def test_a_different_sif_on_one_node_fails_naming_it():
    nodes = {"n1": node("n1", image=sif_image()), "n2": node("n2", image=sif_image("bb" * 32))}
    result = by_rule(diagnose(site(), nodes, image="/h.sif", checksum=True))["image checksum"]
    assert (result.status, result.evidence) == (
        "FAIL",
        "/h.sif differs between nodes: sha256 aaaaaaaaaaaa… on n1; sha256 bbbbbbbbbbbb… on n2",
    )


@pytest.mark.parametrize("checksum", [True, False])
def test_a_damaged_sif_on_one_node_fails_naming_it_also_without_a_checksum(checksum):
    why = "truncated: data object 3 ends at byte 47775744, the file has 20971520"
    nodes = {"n1": node("n1", image=sif_image()), "n2": node("n2", image=sif_image(damaged=why))}
    results = by_rule(diagnose(site(), nodes, image="/h.sif", checksum=checksum))
    assert (results["image intact"].status, results["image intact"].evidence) == (
        "FAIL",
        f"/h.sif is damaged on n2: {why}",
    )
    assert results["image-metadata"].evidence == "read /etc/hpcbundle/manifest.json in /h.sif on n1"


def test_a_sif_hashed_too_slowly_warns_instead_of_comparing():
    nodes = {
        "n1": node("n1", image=sif_image()),
        "n2": node("n2", image=sif_image(sha256_error="hashing stopped after 20 s")),
    }
    result = by_rule(diagnose(site(), nodes, image="/h.sif", checksum=True))["image checksum"]
    assert (result.status, result.evidence) == ("WARN", "/h.sif: checksum not compared, n2: hashing stopped after 20 s")


def test_a_sifs_labels_feed_the_image_rules_when_it_has_no_manifest():
    image = sif_image(manifest=False, mpi="5.0.3", manifest_error="cat: no matches for /etc/hpcbundle/manifest.json")
    results = by_rule(diagnose(site(), {"n1": node("n1", image=image)}, image="/h.sif"))
    assert results["image-metadata"].evidence == "read the labels of /h.sif on n1"
    assert results["mpi-abi-host"].status == "FAIL"


def test_gpu_checks_skip_without_a_gpu_and_judge_driver_and_arch_with_one():
    results = diagnose(site(), {"n1": node("n1")})
    assert by_rule(results)["declared-gpus"] == Result(
        "declared-gpus", "SKIP", "no GPU on n1 (nvidia-smi not found), and the site declares none"
    )
    gpu = {"present": True, "driver": "470.57.02", "gpus": [{"name": "Tesla V100", "capability": "7.0"}], "note": ""}
    gsite = site(node={"gpus": 1, "gpu_model": "V100"})
    results = diagnose(
        gsite, {"n1": node("n1", gpu=gpu, image=manifest_image("4.1.4", cuda="12.2", archs="8.0,9.0"))}, image="/img"
    )
    results = by_rule(results)
    assert results["driver-cuda"].status == "FAIL"
    assert results["driver-cuda"].evidence == "driver 470.57.02 on n1 is older than CUDA 12.2 allows (525.60.13)"
    assert results["gpu-arch"].evidence == "n1 has Tesla V100 (compute capability 7.0); the recipe builds 8.0, 9.0"
    assert results["declared-gpus"].status == "PASS"


def test_infiniband_asked_for_but_absent_fails():
    results = diagnose(site(mca={"pml": "ucx"}), {"n1": node("n1")})
    assert by_rule(results)["infiniband"].status == "FAIL"
    results = diagnose(site(mca={"pml": "ucx"}), {"n1": node("n1", ib=["mlx5_0"])})
    assert by_rule(results)["infiniband"].evidence == "mlx5_0 on every node (mca.pml=ucx)"


def test_nccl_ib_hca_names_must_exist_on_every_node_and_a_prefix_warns_with_what_it_matches():
    ib = {"network": {"fabric": "infiniband", "interfaces": ["data0"]}}
    exact = site(**ib, env={"NCCL_IB_HCA": "=mlx5_0,mlx5_1"})
    nodes = {"n1": node("n1", ib=["mlx5_0", "mlx5_1"]), "n2": node("n2", ib=["mlx5_0"])}
    found = by_rule(diagnose(exact, nodes))["nccl-hca-present"]
    assert (found.status, found.evidence) == (
        "FAIL",
        "NCCL_IB_HCA==mlx5_0,mlx5_1 names adapters a node lacks (n2: mlx5_1): NCCL_NET=IB fails there",
    )
    nodes["n2"] = node("n2", ib=["mlx5_0", "mlx5_1"])
    assert by_rule(diagnose(exact, nodes))["nccl-hca-present"].status == "PASS"
    nodes["n2"] = node("n2", ib=["mlx5_0", "mlx5_1", "mlx5_bond_0"])
    prefix = by_rule(diagnose(site(**ib, env={"NCCL_IB_HCA": "mlx5"}), nodes))["nccl-hca-present"]
    assert (prefix.status, prefix.evidence) == (
        "WARN",
        "NCCL_IB_HCA=mlx5 is a prefix and matches n1: mlx5_0, mlx5_1; n2: mlx5_0, mlx5_1, mlx5_bond_0: "
        "a storage port among them carries NCCL's traffic too",
    )


def test_roce_without_adapters_fails_where_ncclnet_ib_would_stop_nccl():
    roce = site(network={"fabric": "roce", "interfaces": ["data0"]})
    assert by_rule(diagnose(roce, {"n1": node("n1")}))["infiniband"].status == "FAIL"
    found = by_rule(diagnose(roce, {"n1": node("n1", ib=["mlx5_0"])}))["infiniband"]
    assert found.evidence == "mlx5_0 on every node (network.fabric=roce)"


def test_userns_cma_trap_and_more_ranks_than_cpus():
    results = diagnose(site(container={"runtime": "charliecloud"}), {"n1": node("n1")}, hosts={"n1": 3})
    results = by_rule(results)
    assert (
        results["userns-vader"].status == "WARN"
        and "btl_vader_single_copy_mechanism: none" in results["userns-vader"].fix
    )
    assert results["ranks-per-node"] == Result(
        "ranks-per-node",
        "FAIL",
        "3 ranks on n1 but 2 CPUs there: more ranks than the node takes",
        "give at most 2 ranks per node, or raise node.ranks_per_node or set launcher.oversubscribe",
    )


def test_doctor_warns_of_a_docker_cma_trap_and_an_apptainer_site_that_does_not_bind_the_working_directory():
    docker = by_rule(diagnose(site(container={"runtime": "docker"}), {"n1": node("n1")}))["userns-vader"]
    assert docker.status == "WARN" and "`--cap-add SYS_PTRACE` to container.args" in docker.fix
    contained = site(container={"runtime": "apptainer", "args": ["--containall"]})
    found = by_rule(diagnose(contained, {"n1": node("n1")}))["contained-workdir"]
    assert (found.status, found.key) == ("WARN", "container.args")
    assert (
        found.fix
        == "bind the directory users run from (container.binds, e.g. the project file system) or drop --containall"
    )


def test_a_node_that_does_not_answer_fails_node_reach_and_the_other_rules_skip_it():
    down = {"error": "ssh: connection refused (sshd down?)", "unreached": True}
    results = diagnose(site(), {"n1": node("n1"), "n2": down})
    rules = by_rule(results)
    assert rules["node-reach n2"] == Result(
        "node-reach n2",
        "FAIL",
        "ssh: connection refused (sshd down?)",
        "check that n2 is up and reachable: ssh -o BatchMode=yes n2 true",
    )
    assert [r.status for r in results if r.rule == "host-mpi"] == ["PASS", "SKIP"]  # n1 is still judged
    assert Result("host-mpi", "SKIP", "n2 did not answer") in results


def test_no_node_answering_is_a_fail_per_node_and_no_crash():
    down = {"error": "ssh: no route to host (node down or its link down?)", "unreached": True}
    results = diagnose(site(), {"n1": down, "n2": down})
    assert [r.rule for r in results if r.status == "FAIL"] == ["node-reach n1", "node-reach n2"]
    assert by_rule(results)["host-mpi"] == Result("host-mpi", "SKIP", "n1, n2 did not answer")
    assert exit_status(results) == 2


def test_a_node_that_answered_but_whose_probe_failed_is_told_apart():
    results = diagnose(site(), {"n1": node("n1"), "n2": {"error": "probe failed: No module named hpcbundle"}})
    assert by_rule(results)["node-reach n2"].fix.startswith("n2 answered but the probe failed there")


# What OpenSSH 9 prints when it cannot reach a node (exit 255), and the kind doctor names.
SSH_FAILURES = [
    ("ssh: connect to host node2 port 22: Connection refused", "ssh: connection refused (sshd down?)"),
    ("ssh: connect to host 10.78.0.3 port 22: No route to host", "ssh: no route to host (node down or its link down?)"),
    (
        "Connection timed out during banner exchange\nConnection to 10.255.255.1 port 22 timed out",
        "ssh: timed out connecting (node down, or a firewall drops the packets?)",
    ),
    (
        "ssh: connect to host 10.9.9.9 port 22: Connection timed out",
        "ssh: timed out connecting (node down, or a firewall drops the packets?)",
    ),
    (
        "ssh: Could not resolve hostname nosuchhost: Name or service not known",
        "ssh: name does not resolve (a typo, or missing from DNS and /etc/hosts?)",
    ),
    (
        "root@node2: Permission denied (publickey,password).",
        "ssh: auth: permission denied (no key the node accepts; BatchMode asks no password)",
    ),
    ("Host key verification failed.", "ssh: auth: host key verification failed (unknown or changed host key)"),
    (
        "ssh: connect to host 10.1.0.2 port 22: Network is unreachable",
        "ssh: no route: network is unreachable (no link on this node to that network?)",
    ),
    (
        "kex_exchange_identification: Connection closed by remote host\nConnection closed by 10.0.0.2 port 22",
        "ssh: connection closed by the node (sshd refused the session: MaxStartups, AllowUsers?)",
    ),
    ("banner line contains invalid characters", "ssh: banner line contains invalid characters"),
]


@pytest.mark.parametrize(("stderr", "kind"), SSH_FAILURES)
def test_how_ssh_failed_to_reach_a_node_is_named(stderr, kind):
    assert unreached("ssh", 255, stderr + "\r\n", 20) == kind


def test_our_own_timeout_and_a_failed_remote_command_are_told_apart():
    assert unreached("ssh", None, "", 20) == "ssh: timed out (no answer within 20 s)"
    assert unreached("ssh", 1, "python3: can't open file 'x': No such file", 20) is None


def test_an_engine_image_name_is_not_taken_for_a_missing_file():
    results = diagnose(
        site(container={"runtime": "docker"}),
        {"n1": node("n1", image={"path": "local/horovod:cpu", "exists": False, "kind": "missing"})},
        image="local/horovod:cpu",
    )
    assert by_rule(results)["image present"].status == "SKIP"


# Captured on a real H100 host (driver 580.159.04, CUDA 13.0):
# nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader
H100_NVIDIA_SMI = "NVIDIA H100 80GB HBM3, 580.159.04, 9.0, 81559 MiB\n"


def h100_site() -> Site:
    return site(node={"gpus": 1, "gpu_model": "H100", "driver": "580.159.04"}, container={"runtime": "charliecloud"})


@pytest.mark.parametrize(
    "cuda, archs, rule, status, evidence",
    [
        ("13.0", "7.5,8.0,9.0", "gpu-arch", "PASS", "NVIDIA H100 80GB HBM3 (9.0) runs the sm_90 code"),
        ("13.0", "7.5,8.0,9.0", "driver-cuda", "PASS", "driver 580.159.04 >= 580.65.06 (CUDA 13.0)"),
        (
            "11.8",
            "7.0,8.0",
            "gpu-arch",
            "FAIL",
            "n1 has NVIDIA H100 80GB HBM3 (compute capability 9.0); the recipe builds 7.0, 8.0",
        ),
        ("11.8", "7.0,8.0", "driver-cuda", "PASS", "driver 580.159.04 >= 520.61.05 (CUDA 11.8)"),
    ],
)
def test_h100_hosts_real_nvidia_smi_line_is_judged_against_the_images_cuda_and_archs(
    cuda, archs, rule, status, evidence
):
    gpu = parse_gpus(H100_NVIDIA_SMI)
    image = manifest_image("4.1.4", cuda=cuda, archs=archs)
    results = by_rule(diagnose(h100_site(), {"n1": node("n1", gpu=gpu, image=image)}, image="/img"))
    assert (results[rule].status, results[rule].evidence) == (status, evidence)
    assert results["declared-gpus"].status == "PASS"


def test_two_ranks_on_the_one_gpu_of_an_h100_host_fail_before_launch():
    gpu = parse_gpus(H100_NVIDIA_SMI)
    results = by_rule(diagnose(h100_site(), {"n1": node("n1", gpu=gpu)}, hosts={"n1": 2}))
    assert results["ranks-per-node"] == Result(
        "ranks-per-node",
        "FAIL",
        '2 ranks on n1 but 1 GPUs there: NCCL refuses two ranks on one GPU (invalid usage: "Duplicate GPU detected")',
        "give at most 1 ranks per node, one per GPU",
    )


@pytest.mark.parametrize(
    "ifaces, status",
    [
        ((("data0", True, "10.77.0.{}"), ("docker0", True, "172.17.0.1")), "FAIL"),
        ((("data0", True, "10.77.0.{}"), ("virbr0", True, "192.168.122.1")), "PASS"),
    ],
)
def test_an_nccl_exclusion_list_that_leaves_a_docker_bridge_on_a_node_selectable_fails(ifaces, status):
    excluding = site(env={"NCCL_SOCKET_IFNAME": "^virbr0,lo"})
    result = by_rule(diagnose(excluding, {"n1": node("n1", ifaces=ifaces)}))["nccl-socket-bridges"]
    assert result.status == status
    if status == "FAIL":
        assert "leaves docker0 on n1 selectable" in result.evidence


def test_open_mpi_5_on_the_nodes_fails_an_open_mpi_4_image():
    results = diagnose(site(), {"n1": node("n1", mpi="5.0.3", image=manifest_image("4.1.4"))}, image="/img")
    result = by_rule(results)["mpi-abi-host"]
    assert result.status == "FAIL"
    assert result.evidence.endswith(
        "Open MPI 5's mpirun is PRRTE, and Open MPI 4's ranks are made for ORTE's daemons, "
        "a pair neither series supports"
    )


KNL_FLAT = {"wrappers": [["numactl", "-p", "1"]]}


@pytest.mark.parametrize(
    "numa, status, evidence",
    [
        (
            {"0": 98304000},
            "FAIL",
            "wrappers[0] numactl -p asks for NUMA node 1, but only node(s) 0 have memory on n1: numactl fails "
            "before the program starts (KNL in cache mode has no MCDRAM node)",
        ),
        (
            {"0": 98304000, "1": 0},
            "FAIL",
            "wrappers[0] numactl -p asks for NUMA node 1, but only node(s) 0 have memory on n1: numactl fails "
            "before the program starts (KNL in cache mode has no MCDRAM node)",
        ),
        ({"0": 98304000, "1": 16777216}, "PASS", "wrappers[0] numactl -p: NUMA node(s) [1] have memory on n1"),
        ({}, "SKIP", "wrappers[0] numactl -p [1]: the nodes did not report /sys/devices/system/node"),
    ],
)
def test_numactl_preferred_node_is_judged_against_the_numa_nodes_each_node_reports(numa, status, evidence):
    results = diagnose(site(**KNL_FLAT), {"n1": {**node("n1"), "numa": numa}})
    assert (by_rule(results)["numa-memory"].status, by_rule(results)["numa-memory"].evidence) == (status, evidence)


def test_the_probe_reads_each_numa_nodes_memory_from_sysfs(tmp_path):
    for name, total in (("node0", 98304000), ("node1", 0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "meminfo").write_text(f"Node {name[-1]} MemTotal:  {total} kB\nNode 0 MemFree: 1 kB\n")
    assert numa_memory(tmp_path) == {"0": 98304000, "1": 0}
    here = numa_memory()  # this machine: Linux has node0 at least, with memory
    assert here.get("0", 0) > 0, here


def test_an_image_without_ucx_or_verbs_fails_on_an_infiniband_ucx_site():
    ucx_site = site(
        mca={"pml": "ucx"},
        network={"fabric": "infiniband", "interfaces": ["data0"]},
        node={"gpus": 1, "gpu_model": "A100"},
    )
    labels = {
        "org.hpcbundle.mpi.flavour": "openmpi",
        "org.hpcbundle.mpi.version": "4.1.4",
        "org.hpcbundle.nccl": "2.27.5",
        "org.hpcbundle.mpi.transports": "none",
        "org.hpcbundle.fabric-libs": "none",
    }
    image = {"path": "/img", "exists": True, "kind": "dir", "manifest": {"labels": labels}}
    results = by_rule(diagnose(ucx_site, {"n1": node("n1", image=image, ib=["mlx5_0"])}, image="/img"))
    assert results["pml-ucx"].status == "FAIL" and "has no UCX" in results["pml-ucx"].evidence
    assert results["fabric-libs"].status == "FAIL" and "NET/Socket" in results["fabric-libs"].evidence


@pytest.mark.parametrize("nodes", ["0-99999999999999", "٠", "1-0x10", "all"])
def test_a_numactl_node_list_too_long_or_not_in_ascii_digits_is_skipped_not_expanded(nodes):
    results = diagnose(site(wrappers=[["numactl", "-m", nodes]]), {"n1": {**node("n1"), "numa": {"0": 1}}})
    assert by_rule(results)["numa-memory"].status == "SKIP"


# --- the container runtime on the nodes: a binary, or pyxis inside srun --------------------------

PYXIS = {"launcher": {"name": "srun", "pmi": "pmix"}, "container": {"runtime": "pyxis"}}
PYXIS_FIX = "install pyxis and enroot on those nodes (then `srun --help` lists --container-image)"


def _runtime_result(site_model: Site, nodes: dict) -> Result:
    return by_rule(diagnose(site_model, nodes))["container-runtime"]


def test_pyxis_is_found_where_srun_help_lists_its_option_and_failed_where_not():
    found = node("n1") | {"runtimes": {"pyxis": "`srun --help` lists --container-image"}}
    lacking = node("n2") | {"runtimes": {}, "runtimes_missing": {"pyxis": "`srun --help` lists no --container-image"}}
    assert _runtime_result(site(**PYXIS), {"n1": found}).status == "PASS"
    result = _runtime_result(site(**PYXIS), {"n1": found, "n2": lacking})
    assert result.status == "FAIL" and PYXIS_FIX in result.fix and "another container.runtime" in result.fix
    assert result.evidence == "pyxis is a plugin of srun, not a binary: n2: `srun --help` lists no --container-image"


@pytest.mark.full_setup
@pytest.mark.parametrize("configured", [True, False], ids=["slurm-conf", "no-slurm-conf"])
def test_the_real_probe_fails_pyxis_on_this_machines_srun_without_the_plugin(tmp_path, monkeypatch, configured):
    """This machine's srun (slurm-wlm, `make setup`) has no pyxis: with a slurm.conf (a minimal one: --help
    only reads it) its --help lists no --container-image; without one srun stops at once. Both are
    doctor's FAIL with the fix."""
    assert shutil.which("srun"), "srun is missing: `make setup` installs slurm-wlm"
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=probe\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1\nPartitionName=debug Nodes=localhost\n"
    )
    if configured:
        monkeypatch.setenv("SLURM_CONF", str(conf))
    else:
        monkeypatch.delenv("SLURM_CONF", raising=False)  # and /etc/slurm has no slurm.conf here
    found, missing = runtimes({"pyxis": runtime_detection()["pyxis"]})
    why = "`srun --help` lists no --container-image" if configured else "`srun --help` fails: srun: "
    assert found == {} and missing["pyxis"].startswith(why), missing
    result = _runtime_result(site(**PYXIS), {"here": node("here") | {"runtimes": found, "runtimes_missing": missing}})
    print(result.line())
    assert result.status == "FAIL" and PYXIS_FIX in result.fix and missing["pyxis"] in result.evidence


def test_stopped_ranks_finds_the_processes_of_the_program_that_are_stopped_and_no_others():
    """A SIGSTOPped process running the program is found (state T), also when its executable runs by
    its full path (a shim or a link); a running twin, and a stopped process whose command only ends
    with the program's words (a launcher), are not."""
    program = ["sleep", "61.5"]
    stopped = subprocess.Popen([shutil.which("sleep"), "61.5"])
    running = subprocess.Popen(program)
    launcher = subprocess.Popen(["sh", "-c", "sleep 61.5; true", "sleep", "61.5"])
    try:
        stopped.send_signal(signal.SIGSTOP)
        launcher.send_signal(signal.SIGSTOP)
        assert wait_until(lambda: stopped_ranks(program) == [{"pid": stopped.pid, "state": "T"}], timeout=10)
        probe = subprocess.run(
            [sys.executable, "-m", "hpcbundle.diagnose.probes", "stopped", "--", *program],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert json.loads(probe.stdout) == {"stopped": [{"pid": stopped.pid, "state": "T"}]}
    finally:
        for proc in (stopped, running, launcher):
            proc.kill()
            proc.wait()


def test_the_stopped_probe_kills_only_the_given_pids_still_stopped_running_the_program():
    """`probes stopped --kill PID`, after a stalled job's launcher ended: a stopped rank it left is SIGKILLed by
    its PID; a stopped twin not named, and a named PID now running, are left alone."""
    program = ["sleep", "61.5"]
    left, twin, running = (subprocess.Popen(program) for _ in range(3))
    try:
        for proc in (left, twin):
            proc.send_signal(signal.SIGSTOP)
        assert wait_until(lambda: len(stopped_ranks(program)) == 2, timeout=10)
        kills = ["--kill", str(left.pid), "--kill", str(running.pid)]
        probe = subprocess.run(
            [sys.executable, "-m", "hpcbundle.diagnose.probes", "stopped", *kills, "--", *program],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert json.loads(probe.stdout) == {"stopped": [{"pid": left.pid, "state": "T"}]}
        assert left.wait(10) == -signal.SIGKILL and twin.poll() is None and running.poll() is None
    finally:
        for proc in (left, twin, running):
            proc.kill()
            proc.wait()


def test_stopped_ranks_finds_a_torchrun_worker_which_runs_the_script_with_python_u():
    """torchrun starts each worker as `PYTHON -u SCRIPT ARGS` from the program `PYTHON SCRIPT ARGS`."""
    program = [sys.executable, "-c", "import time; time.sleep(61.5)"]
    worker = subprocess.Popen([sys.executable, "-u", *program[1:]])
    try:
        worker.send_signal(signal.SIGSTOP)
        assert wait_until(lambda: stopped_ranks(program) == [{"pid": worker.pid, "state": "T"}], timeout=10)
    finally:
        worker.kill()
        worker.wait()


def test_doctor_warns_of_the_cma_trap_where_singularity_is_apptainers_compatibility_name():
    """`singularity --version` answering `apptainer version ...`: Apptainer runs the ranks in user namespaces."""
    singularity = site(container={"runtime": "singularity"})
    apptainer = {**node("n1"), "runtimes": {"singularity": "apptainer version 1.3.4"}}
    found = by_rule(diagnose(singularity, {"n1": apptainer}))["userns-vader"]
    assert (found.status, found.fix) == ("WARN", "add `btl_vader_single_copy_mechanism: none` to the site's mca")
    assert found.evidence.startswith(
        "singularity (apptainer's compatibility name: `singularity --version` says apptainer version 1.3.4) runs "
        "ranks in user namespaces"
    )
    ce = {**node("n1"), "runtimes": {"singularity": "singularity-ce version 4.1.0"}}
    found = by_rule(diagnose(singularity, {"n1": ce}))["userns-vader"]
    assert (found.status, found.evidence) == (
        "SKIP",
        "no Open MPI 4 inside a user-namespace runtime or a Docker/podman container",
    )


GPU_NUMA = {"node": {"cores": 8, "gpus": 2, "gpu_model": "A100", "gpu_numa": [0, 1], "host_bind": True}}


def test_doctor_fails_a_host_bind_site_on_the_nodes_without_hpcbundle_bind_and_passes_where_it_is():
    """node.host_bind runs the gpu-numa wrapper on the host: a node without it would fail every rank's exec."""
    nodes = {"n1": {**node("n1"), "bind": "/usr/local/bin/hpcbundle-bind"}, "n2": {**node("n2"), "bind": None}}
    found = by_rule(diagnose(make_site(SITE, GPU_NUMA), nodes))["bind-tool"]
    assert (found.status, found.evidence) == (
        "FAIL",
        "hpcbundle-bind is not on PATH on n2, where node.host_bind runs it on the host: every rank there fails to exec",
    )
    assert found.fix.startswith(
        "run `make install-bind PREFIX=/usr/local` as root on those nodes, or drop node.host_bind"
    )
    nodes["n2"]["bind"] = "/usr/local/bin/hpcbundle-bind"
    found = by_rule(diagnose(make_site(SITE, GPU_NUMA), nodes))["bind-tool"]
    assert (found.status, found.evidence) == (
        "PASS",
        "hpcbundle-bind on the host at /usr/local/bin/hpcbundle-bind on n1, n2",
    )


def test_doctor_looks_for_no_host_script_where_the_wrapper_runs_in_the_image_or_inline():
    nodes = {"n1": {**node("n1"), "bind": None}}
    image_site = make_site(
        SITE, {"node": {**GPU_NUMA["node"], "host_bind": False}, "container": {"runtime": "apptainer"}}
    )
    in_image = by_rule(diagnose(image_site, nodes, image="/img/h.sif"))["bind-tool"]
    assert (in_image.status, in_image.evidence) == (
        "PASS",
        "hpcbundle-bind runs inside the image, which carries it at /usr/local/bin/hpcbundle-bind: hosts need none",
    )
    inline = by_rule(diagnose(make_site(SITE, {"node": {**GPU_NUMA["node"], "host_bind": False}}), nodes))
    assert inline["bind-tool"].status == "PASS" and "inline (sh -c): nothing to install" in inline["bind-tool"].evidence


def test_the_probe_reports_where_hpcbundle_bind_is_on_path(tmp_path, monkeypatch):
    from hpcbundle.diagnose.probes import facts

    monkeypatch.setenv("PATH", str(tmp_path))
    assert facts()["bind"] is None
    script = tmp_path / "hpcbundle-bind"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert facts()["bind"] == str(script)
