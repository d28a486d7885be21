"""Pair rules (recipe x site): each refuses or warns about a concrete bad pair, and passes a good one."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from hpcbundle.config.loading import validate
from hpcbundle.config.recipes import Recipe
from hpcbundle.config.sites import Site
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.knowledge.labels import image_facts, image_labels
from hpcbundle.rules.engine import RULES, Facts, evaluate, exit_status
from hpcbundle.rules.facts import check_declared
from hpcbundle.rules.loading import all_recipes

from .helpers import GOLDEN, RECIPES, SITES, assert_golden, hpcbundle, recipe_data

KB = knowledge_base()


def _site(base: str, **sections: dict[str, Any]) -> Site:
    data = yaml.safe_load((SITES / f"{base}.yaml").read_text())
    for section, values in sections.items():
        data[section] = {**data.get(section, {}), **values} if values else {}
    return validate(Site, data, "pair.yaml")


def _recipe(base: str, **changes: Any) -> Recipe:
    data = recipe_data(base)
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = data
        for key in parents:
            node = node[key]
        node[last] = value
    return validate(Recipe, data, "pair.yaml")


def _finding(recipe: Recipe, site: Site, rule: str):
    return next(f for f in check_declared(recipe, site, KB) if f.rule == rule)


# ib-v100 as a site that opts into the openib btl for MPI (Horovod's advice is TCP for MPI, NCCL for the data).
OPENIB = {"btl": "openib,vader,self", "btl_openib_allow_ib": "1"}

CASES = [
    # rule, recipe, site, expected status, words in the message
    ("horovod-image", _recipe("cpu-local"), _site("local"), "PASS", "the image has Horovod 0.28.1"),
    (
        "horovod-image",
        _recipe("cpu-ddp"),
        _site("local"),
        "FAIL",
        "torch.distributed image); launch it with --torch or --torchrun",
    ),
    ("driver-cuda", _recipe("cuda11.8-tf2.14-torch2.1"), _site("ib-v100"), "PASS", ">= 520.61.05"),
    ("driver-cuda", _recipe("cuda12.6-torch2.9"), _site("ib-v100"), "WARN", "minor version compatibility"),
    (
        "driver-cuda",
        _recipe("cuda12.2-tf2.15-torch2.1-ucx"),
        _site("eth-a100-slurm", node={"driver": "470.57.02"}),
        "FAIL",
        "older than CUDA 12.2 allows",
    ),
    ("gpu-arch", _recipe("cuda12.2-tf2.15-torch2.1-ucx"), _site("ib-v100"), "FAIL", "V100 (compute capability 7.0)"),
    (
        "gpu-arch",
        _recipe("cuda13.0-torch2.11"),
        _site("ib-v100"),
        "FAIL",
        "CUDA 13.0 of recipe cuda13.0-torch2.11 cannot target compute capability < 7.5",
    ),
    ("gpu-arch", _recipe("cuda13.0-torch2.11"), _site("eth-a100-slurm"), "PASS", "A100 (8.0) runs the sm_80 code"),
    (
        "driver-cuda",
        _recipe("cuda13.0-torch2.11"),
        _site("roce-h100-ompi5", node={"driver": "580.159.04"}),
        "PASS",
        ">= 580.65.06 (CUDA 13.0)",
    ),
    ("driver-cuda", _recipe("cuda13.0-torch2.11"), _site("ib-v100"), "FAIL", "older than CUDA 13.0 allows (580.65.06)"),
    (
        "gpu-arch",
        _recipe("cuda11.8-tf2.14-torch2.1"),
        _site("eth-a100-slurm", node={"gpu_model": "A40"}),
        "PASS",
        "A40 (8.6) runs the sm_80 code",
    ),
    ("mpi-abi-host", _recipe("cuda12.2-tf2.15-torch2.1-ucx"), _site("roce-h100-ompi5"), "FAIL", "different series"),
    ("mpi-abi-host", _recipe("knl-intelmpi-tf2.15"), _site("ib-v100"), "FAIL", "another ABI family"),
    # Hydra of Intel MPI 18 starting Intel MPI 2021's ranks: one ABI, but a launcher no manual pairs with them.
    ("mpi-abi-host", _recipe("knl-intelmpi-tf2.15"), _site("stampede2-knl"), "WARN", "is in no manual, so it is not"),
    (
        "mpi-abi-host",
        _recipe("knl-intelmpi-tf2.15"),
        _site("stampede2-knl", mpi={"version": "2021.10.0"}),
        "PASS",
        "host intelmpi 2021.10.0 and image intelmpi 2021.13.1 share an ABI",
    ),
    ("gpu-presence", _recipe("cuda11.8-tf2.14-torch2.1"), _site("local"), "FAIL", "has no GPUs"),
    ("gpu-presence", _recipe("cpu-local"), _site("eth-a100-slurm"), "WARN", "stay idle"),
    (
        "userns-vader",
        _recipe("cpu-local"),
        _site("local-charliecloud", mca={}),
        "WARN",
        "btl_vader_single_copy_mechanism: none",
    ),
    ("userns-vader", _recipe("cpu-local"), _site("local-charliecloud"), "PASS", "user namespace"),
    (
        "userns-vader",
        _recipe("cpu-local"),
        _site("local-charliecloud", mca={"btl": "self,tcp"}),
        "PASS",
        "no shared-memory btl",
    ),
    (
        "userns-vader",
        _recipe("cuda11.8-tf2.14-torch2.1"),
        _site("ib-v100", container={"userns": True}),
        "WARN",
        "singularity runs ranks in user namespaces",
    ),
    # `singularity` may be Apptainer's compatibility name: only doctor's `singularity --version` tells.
    (
        "userns-vader",
        _recipe("cuda11.8-tf2.14-torch2.1"),
        _site("ib-v100"),
        "SKIP",
        "not known here whether singularity is apptainer's compatibility name",
    ),
    (
        "userns-vader",
        _recipe("cuda11.8-tf2.14-torch2.1"),
        _site("ib-v100", container={"userns": False}),
        "SKIP",
        "no Open MPI 4 inside a user-namespace runtime",
    ),
    # Docker/podman: the ranks of a node share one container without CAP_SYS_PTRACE, so CMA is refused.
    ("userns-vader", _recipe("cpu-local"), _site("local", container={"runtime": "docker"}), "WARN", "errno = 1"),
    (
        "userns-vader",
        _recipe("cpu-local"),
        _site("local", container={"runtime": "podman"}),
        "WARN",
        "`btl_vader_single_copy_mechanism: none` to the site's mca, or `--cap-add SYS_PTRACE` to container.args",
    ),
    (
        "userns-vader",
        _recipe("cpu-local"),
        _site("local", container={"runtime": "docker", "args": ["--cap-add", "SYS_PTRACE"]}),
        "PASS",
        "CAP_SYS_PTRACE",
    ),
    (
        "userns-vader",
        _recipe("cpu-local"),
        _site("local", container={"runtime": "docker"}, mca={"btl_vader_single_copy_mechanism": "none"}),
        "PASS",
        "docker gives its containers no CAP_SYS_PTRACE and the site sets btl_vader_single_copy_mechanism none",
    ),
    (
        "userns-vader",
        _recipe("cpu-local"),
        _site("local", container={"runtime": "docker"}, node={"ranks_per_node": 1}),
        "SKIP",
        "one rank per node",
    ),
    ("userns-vader", _recipe("cpu-local"), _site("local"), "SKIP", "no Open MPI 4 inside"),
    # A batch job on whole GPU nodes asks for their memory (--mem=0 with --exclusive, or slurm.mem).
    (
        "batch-memory",
        _recipe("cpu-local"),
        _site("ib-v100", slurm={"options": []}),
        "WARN",
        "slurm.mem: the batch job takes all 2 GPUs of each node (slurm.gres gpu:2) but asks for no memory",
    ),
    ("batch-memory", _recipe("cpu-local"), _site("ib-v100"), "PASS", "--mem=0 (all of each node's, with --exclusive)"),
    (
        "batch-memory",
        _recipe("cpu-local"),
        _site("ib-v100", slurm={"options": [], "mem": "360G"}),
        "PASS",
        "--mem=360G",
    ),
    ("batch-memory", _recipe("cpu-local"), _site("ib-v100", slurm={"gres": "gpu:1"}), "SKIP", "every GPU"),
    ("batch-memory", _recipe("cpu-local"), _site("stampede2-knl"), "SKIP", "every GPU"),
    # Apptainer/Singularity bind the working directory unless container.args contain it away.
    ("contained-workdir", _recipe("cpu-local"), _site("eth-a100-slurm"), "PASS", "binds the working directory"),
    ("contained-workdir", _recipe("cpu-local"), _site("local"), "SKIP", "not Apptainer/Singularity"),
    (
        "contained-workdir",
        _recipe("cpu-local"),
        _site("eth-a100-slurm", container={"args": ["--contain"]}),
        "WARN",
        "has --contain, so apptainer does not bind the working directory",
    ),
    (
        "contained-workdir",
        _recipe("cpu-local"),
        _site("ib-v100", container={"args": ["--cleanenv", "-C"]}),
        "WARN",
        "container.binds",
    ),
    (
        "contained-workdir",
        _recipe("cpu-local"),
        _site("ib-v100", container={"args": ["--no-mount", "tmp,cwd"]}),
        "WARN",
        "drop --no-mount tmp,cwd",
    ),
    ("contained-workdir", _recipe("cpu-local"), _site("ib-v100", container={"args": ["-c"]}), "WARN", "has -c"),
    (
        "contained-workdir",
        _recipe("cpu-local"),
        _site("ib-v100", container={"args": ["--no-mount=home,tmp"]}),
        "PASS",
        "binds the working directory",
    ),
    ("userns-vader", _recipe("cpu-local"), _site("eth-cpu-elastic", container={"userns": True}), "SKIP", "not MPI"),
    ("mpi-abi-host", _recipe("knl-intelmpi-tf2.15"), _site("eth-cpu-elastic"), "SKIP", "talk over Gloo"),
    ("btl-shared-memory", _recipe("cpu-local"), _site("eth-cpu-elastic", mca={"btl": "self,tcp"}), "SKIP", "Gloo"),
    (
        "userns-vader",
        _recipe("cuda11.8-tf2.14-torch2.1"),
        _site("ib-v100", container={"args": ["--userns"]}),
        "WARN",
        "singularity runs ranks in user namespaces",
    ),
    (
        "openib-btl",
        _recipe("cuda12.2-tf2.15-torch2.1-ucx"),
        _site("ib-v100", mca=OPENIB),
        "FAIL",
        "built without verbs",
    ),
    ("openib-btl", _recipe("cuda12.6-torch2.9"), _site("ib-v100", mca=OPENIB), "FAIL", "no openib btl"),
    (
        "openib-btl",
        _recipe("cuda11.8-tf2.14-torch2.1", mpi__version="5.0.3"),
        _site("ib-v100", mca=OPENIB),
        "FAIL",
        "no longer has",
    ),
    (
        "openib-btl",
        _recipe("cuda11.8-tf2.14-torch2.1"),
        _site("ib-v100", mca={**OPENIB, "btl_openib_allow_ib": "0"}),
        "FAIL",
        "unless btl_openib_allow_ib is set",
    ),
    ("openib-btl", _recipe("cuda11.8-tf2.14-torch2.1"), _site("ib-v100", mca=OPENIB), "PASS", "has the openib btl"),
    ("pml-ucx", _recipe("cuda12.6-torch2.9"), _site("ib-a100-ucx"), "FAIL", "has no UCX"),
    (
        "pml-ucx",
        _recipe("cuda12.2-tf2.15-torch2.1-ucx", ucx__configure=["--with-cuda=/usr/local/cuda"]),
        _site("ib-a100-ucx"),
        "FAIL",
        "has no ib transport",
    ),
    ("pml-ucx", _recipe("cuda12.2-tf2.15-torch2.1-ucx"), _site("ib-a100-ucx"), "PASS", "cuda, ib, rdmacm"),
    ("pml-ucx", _recipe("cuda13.0-torch2.11-ompi5"), _site("roce-h100-ompi5"), "PASS", "ib, rdmacm"),
    ("fabric-libs", _recipe("cuda12.6-torch2.9"), _site("ib-a100-ucx"), "FAIL", "NCCL falls back to TCP sockets"),
    ("fabric-libs", _recipe("cuda12.6-torch2.9"), _site("roce-h100-ompi5"), "FAIL", "fabric is roce"),
    ("fabric-libs", _recipe("cuda12.2-tf2.15-torch2.1-ucx"), _site("ib-a100-ucx"), "PASS", "verbs in the image"),
    ("fabric-libs", _recipe("knl-intelmpi-tf2.15", fabric_libs=[]), _site("stampede2-knl"), "WARN", "no libpsm2"),
    ("fabric-libs", _recipe("knl-intelmpi-tf2.15"), _site("stampede2-knl"), "PASS", "psm2 provider"),
    (
        "mpi-abi-host",
        _recipe("cuda13.0-torch2.11"),
        _site("roce-h100-ompi5"),
        "FAIL",
        "Open MPI 5's mpirun is PRRTE, and Open MPI 4's ranks are made for ORTE's daemons",
    ),
    ("mpi-abi-host", _recipe("cuda13.0-torch2.11-ompi5"), _site("roce-h100-ompi5"), "PASS", "share an ABI"),
    (
        "pmix-container",
        _recipe("cuda13.0-torch2.11"),
        _site("eth-a100-slurm", env={}),
        "FAIL",
        "PMIX_MCA_gds is not hash",
    ),
    (
        "pmix-container",
        _recipe("cuda13.0-torch2.11"),
        _site("eth-a100-slurm", container={"binds": ["/scratch"]}),
        "FAIL",
        "SlurmdSpoolDir /var/spool/slurmd (slurm.spool_dir) is not bound",
    ),
    ("pmix-container", _recipe("cuda13.0-torch2.11"), _site("eth-a100-slurm"), "PASS", "PMIX_MCA_gds=hash"),
    (
        "numa-memory",
        _recipe("knl-intelmpi-tf2.15"),
        _site("stampede2-knl", node={"numa_memory": [0]}),
        "FAIL",
        "wrappers[1] numactl -p asks for NUMA node 1, but only node(s) 0 have memory (node.numa_memory)",
    ),
    ("numa-memory", _recipe("knl-intelmpi-tf2.15"), _site("stampede2-knl"), "PASS", "[1] have memory"),
    (
        "ranks-per-node",
        _recipe("cuda13.0-torch2.11"),
        _site("eth-a100-slurm", node={"ranks_per_node": 8}),
        "FAIL",
        "8 ranks on site eth-a100-slurm but site eth-a100-slurm nodes have 4 GPUs",
    ),
    (
        "ranks-per-node",
        _recipe("cuda13.0-torch2.11"),
        _site("eth-a100-slurm", node={"ranks_per_node": 2}),
        "WARN",
        "2 ranks on site eth-a100-slurm but site eth-a100-slurm nodes have 4 GPUs: the other GPUs stay idle",
    ),
    (
        "ranks-per-node",
        _recipe("cuda13.0-torch2.11"),
        _site("eth-a100-slurm", node={"ranks_per_node": 4}),
        "PASS",
        "fit",
    ),
    (
        "nccl-socket-threads",
        _recipe("cuda13.0-torch2.11"),
        _site("eth-a100-slurm", env={"NCCL_SOCKET_NTHREADS": "8", "NCCL_NSOCKS_PERTHREAD": "16"}),
        "WARN",
        "over NCCL's limits (16 threads, 64 sockets in all): NCCL runs 8 x 8 instead",
    ),
    (
        "nccl-socket-threads",
        _recipe("cuda13.0-torch2.11"),
        _site("eth-a100-slurm", env={"NCCL_SOCKET_NTHREADS": "32"}),
        "WARN",
        "NCCL runs 16 x 1 instead",
    ),
    (
        "nccl-socket-threads",
        _recipe("cuda13.0-torch2.11"),
        _site("eth-a100-slurm", env={"NCCL_NSOCKS_PERTHREAD": "0"}),
        "WARN",
        "NCCL_NSOCKS_PERTHREAD=0: no positive whole number",
    ),
    (
        "nccl-socket-threads",
        _recipe("cuda13.0-torch2.11"),
        _site("eth-a100-slurm", env={"NCCL_SOCKET_NTHREADS": "4", "NCCL_NSOCKS_PERTHREAD": "16"}),
        "PASS",
        "4 threads x 16 sockets",
    ),
    ("nccl-socket-threads", _recipe("cuda13.0-torch2.11"), _site("eth-a100-slurm"), "SKIP", ""),
    (
        "nccl-socket-exclusion",
        _recipe("cuda11.8-tf2.14-torch2.1"),
        _site("seed-v100"),
        "WARN",
        "NCCL_SOCKET_IFNAME=^virbr0,lo leaves docker*, virbr* selectable",
    ),
    (
        "nccl-socket-exclusion",
        _recipe("cuda11.8-tf2.14-torch2.1"),
        _site("seed-v100", env={"NCCL_SOCKET_IFNAME": "^docker,virbr,lo"}),
        "PASS",
        "excludes docker, virbr*",
    ),
    (
        "gid-index NCCL",
        _recipe("cuda13.0-torch2.11-ompi5"),
        _site("roce-h100-ompi5", env={"NCCL_IB_GID_INDEX": "3"}),
        "WARN",
        "NCCL 2.28.9 (>= 2.21) picks the RoCE v2 GID itself",
    ),
    (
        "gid-index UCX",
        _recipe("cuda13.0-torch2.11-ompi5"),
        _site("roce-h100-ompi5", env={"UCX_IB_GID_INDEX": "3"}),
        "WARN",
        "UCX's default (auto) picks the RoCE v2 GID itself",
    ),
    ("gid-index", _recipe("cuda13.0-torch2.11-ompi5"), _site("roce-h100-ompi5"), "SKIP", "no GID index forced"),
    (
        "btl-shared-memory",
        _recipe("cuda11.8-tf2.14-torch2.1"),
        _site("seed-v100"),
        "WARN",
        "btl openib,self has no shared-memory btl, so the 2 ranks of a node send to each other through the HCA",
    ),
    ("btl-shared-memory", _recipe("cuda11.8-tf2.14-torch2.1"), _site("ib-v100"), "PASS", "through shared memory"),
    (
        "omnipath-provider",
        _recipe("knl-intelmpi-tf2.15"),
        _site("stampede2-knl", env={}),
        "WARN",
        "Intel MPI on Omni-Path with no libfabric provider named",
    ),
    (
        "omnipath-provider",
        _recipe("knl-intelmpi-tf2.15"),
        _site("stampede2-knl"),
        "PASS",
        "psm2 named by env.FI_PROVIDER",
    ),
    (
        "omnipath-open-mpi",
        _recipe("cuda11.8-tf2.14-torch2.1"),
        _site("ib-v100", network={"fabric": "omnipath"}),
        "WARN",
        "lacks the psm2 mtl (--with-psm2) or libfabric (--with-ofi): MPI falls back to TCP",
    ),
    (
        "omnipath-open-mpi",
        _recipe("cuda11.8-tf2.14-torch2.1", mpi__configure=["--with-psm2"], fabric_libs=["psm2"]),
        _site("ib-v100", network={"fabric": "omnipath"}),
        "PASS",
        "reaches Omni-Path (psm2)",
    ),
    ("omnipath-open-mpi", _recipe("cuda11.8-tf2.14-torch2.1"), _site("ib-v100"), "SKIP", "does not select Omni-Path"),
    (
        "nccl-hca-names",
        _recipe("cuda13.0-torch2.11-ompi5"),
        _site("roce-h100-ompi5", env={"NCCL_IB_HCA": "mlx5"}),
        "WARN",
        "NCCL_IB_HCA=mlx5 is a prefix: NCCL also takes any other adapter whose name starts with it",
    ),
    ("nccl-hca-names", _recipe("cuda13.0-torch2.11-ompi5"), _site("roce-h100-ompi5"), "PASS", "names its adapters"),
    (
        "roce-traffic-class",
        _recipe("cuda13.0-torch2.11-ompi5"),
        _site("roce-h100-ompi5", env={}),
        "WARN",
        "NCCL on RoCE with no traffic class (NCCL_IB_TC, default 0)",
    ),
    (
        "roce-traffic-class",
        _recipe("cuda13.0-torch2.11-ompi5"),
        _site("roce-h100-ompi5", env={"UCX_IB_SL": "0"}),
        "WARN",
        "MPI's RDMA over UCX (pml ucx) is not in NCCL's class (NCCL_IB_TC=106, NCCL_IB_SL=3): "
        "UCX_IB_TRAFFIC_CLASS=106, UCX_IB_SL=0; set env UCX_IB_TRAFFIC_CLASS: 106 and UCX_IB_SL: 3",
    ),
    (
        "roce-traffic-class",
        _recipe("cuda13.0-torch2.11-ompi5"),
        _site("roce-h100-ompi5"),
        "PASS",
        "NCCL_IB_TC=106, NCCL_IB_SL=3, and UCX (pml ucx) the same",
    ),
    # A secret-looking env: name is forwarded by name, its value never written; a partition key is no secret.
    (
        "secret-env",
        _recipe("cpu-local"),
        _site("local", env={"WANDB_API_KEY": "0123abcd"}),
        "WARN",
        "env.WANDB_API_KEY: WANDB_API_KEY looks like a secret",
    ),
    ("secret-env", _recipe("cpu-local"), _site("local", env={"NCCL_IB_PKEY": "0x8001"}), "SKIP", "no secret-looking"),
    # The drafted HOROVOD_CYCLE_TIME rests on one rank on one H200: it stays marked to re-tune, with that evidence.
    (
        "cycle-time-evidence",
        _recipe("cuda11.8-tf2.14-torch2.1"),
        _site("seed-v100", env={"HOROVOD_CYCLE_TIME": "0.1"}),
        "WARN",
        "HOROVOD_CYCLE_TIME=0.1 with no why: nothing says what it was measured on",
    ),
    (
        "cycle-time-evidence",
        _recipe("cuda13.0-torch2.11-ompi5"),
        _site("roce-h100-ompi5"),
        "PASS",
        "the draft measured with 1 rank on one H200, marked to re-tune on these nodes",
    ),
    ("cycle-time-evidence", _recipe("cpu-local"), _site("local"), "SKIP", "no GPU site"),
    (
        "ethernet-gpu-interface",
        _recipe("cuda12.6-torch2.9"),
        _site("ib-v100", network={"fabric": "ethernet", "interfaces": []}),
        "WARN",
        "a GPU site on Ethernet names no interface",
    ),
    (
        "ethernet-gpu-interface",
        _recipe("cuda12.6-torch2.9"),
        _site("ib-v100", network={"fabric": "ethernet", "interfaces": ["eth1"]}),
        "PASS",
        "NCCL_SOCKET_IFNAME=eth1 (from network.interfaces)",
    ),
    (
        "oob-interfaces",
        _recipe("cuda11.8-tf2.14-torch2.1"),
        _site("ib-v100", network={"fabric": "infiniband", "interfaces": []}),
        "WARN",
        "mpirun's daemons (oob) may use any interface",
    ),
    ("oob-interfaces", _recipe("cuda11.8-tf2.14-torch2.1"), _site("ib-v100"), "PASS", "oob_tcp_if_include=ib0"),
]


@pytest.mark.parametrize(
    "rule, recipe, site, status, words", CASES, ids=[f"{c[0]}-{c[3]}-{i}" for i, c in enumerate(CASES)]
)
def test_pair_rule(rule, recipe, site, status, words):
    finding = _finding(recipe, site, rule)
    assert (finding.status, words in finding.message()) == (status, True), finding.line()


def test_every_pair_rule_has_a_failing_or_warning_case():
    bad = {c[0].split()[0] for c in CASES if c[3] in ("FAIL", "WARN")}
    # Loading refuses on the on_load rules: their bad cases are in tests/test_load_rules.py. A recipe's
    # declared image always sets the NVIDIA variables: nvidia-container-env's bad case is an older image (below).
    # bind-tool fails only on observed nodes that lack the host's script: its bad case is in tests/test_doctor.py.
    pair_rules = {r.name for r in RULES if r.needs <= {"image", "site", "nodes"} and not r.on_load}
    assert bad == pair_rules - {"nvidia-container-env", "bind-tool"}


def test_check_with_site_refuses_a_bad_pair_with_every_reason():
    result = hpcbundle("check", "cuda12.2-tf2.15-torch2.1-ucx", "--site", "seed-v100")
    assert result.returncode == 2
    assert "FAIL  gpu-arch" in result.stdout and "FAIL  openib-btl" in result.stdout
    assert result.stderr.strip().splitlines() == [
        "hpcbundle: error: recipe cuda12.2-tf2.15-torch2.1-ucx: gpu-arch: "
        "site seed-v100 has V100 (compute capability 7.0); the recipe builds 8.0, 9.0; add 7.0 to gpu.archs",
        "hpcbundle: error: recipe cuda12.2-tf2.15-torch2.1-ucx: mpi-abi-host: host Open MPI 3.1.6 and image Open MPI "
        "4.1.6 are different series; the hybrid model needs the same major.minor (3.1.x in the image); rebuild the "
        "image with Open MPI 3.1.x (recipe mpi.version) or load Open MPI 4.1 on the host",
        "hpcbundle: error: recipe cuda12.2-tf2.15-torch2.1-ucx: openib-btl: the site selects the openib btl but "
        "the image's Open MPI 4.1.6 was built without verbs (no openib btl): MPI_Init finds no transport between "
        "nodes; use an image built --with-verbs (e.g. recipe cuda11.8-tf2.14-torch2.1), or set the site to pml: ucx "
        "with a UCX image",
    ]


def test_ib_v100_passes_only_the_images_built_for_v100_with_the_rdma_user_space():
    verdicts = {
        recipe.name: exit_status(check_declared(recipe, _site("ib-v100"), KB)) for recipe in all_recipes(RECIPES)
    }
    # cpu-local runs there too, its GPUs idle (WARN): Debian's Open MPI pulls in rdma-core.
    assert {name for name, status in verdicts.items() if status < 2} == {"cpu-local", "cuda11.8-tf2.14-torch2.1"}


@pytest.mark.parametrize(
    "recipe, site",
    [
        ("cuda11.8-tf2.14-torch2.1", "ib-v100"),
        ("cuda12.2-tf2.15-torch2.1-ucx", "ib-a100-ucx"),
        ("cuda12.2-tf2.15-torch2.1-ucx", "eth-a100-slurm"),
        ("cuda13.0-torch2.11-ompi5", "roce-h100-ompi5"),
        ("cuda13.0-torch2.11", "slurm-pyxis-h100"),
        ("knl-intelmpi-tf2.15", "stampede2-knl"),
        ("cpu-local", "local"),
        ("cpu-local", "local-charliecloud"),
    ],
)
def test_good_pairs_pass_and_print_their_golden_verdicts(recipe, site):
    """Each shipped site with its fitting recipe: every rule's line, as a user reads it before building."""
    result = hpcbundle("check", recipe, "--site", site)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAIL" not in result.stdout
    assert_golden(GOLDEN / "check" / f"{site}.txt", result.stdout)


def test_mpi_over_ucx_left_to_ucxs_defaults_on_roce_is_not_in_ncclss_class():
    data = yaml.safe_load((SITES / "roce-h100-ompi5.yaml").read_text())
    for key in ("UCX_IB_TRAFFIC_CLASS", "UCX_IB_SL"):
        del data["env"][key], data["why"][f"env.{key}"]
    finding = _finding(_recipe("cuda13.0-torch2.11-ompi5"), validate(Site, data, "pair.yaml"), "roce-traffic-class")
    assert (finding.status, finding.fix) == ("WARN", "set env UCX_IB_TRAFFIC_CLASS: 106 and UCX_IB_SL: 3")
    assert "UCX_IB_TRAFFIC_CLASS and UCX_IB_SL unset, left to UCX's defaults" in finding.evidence


def test_unknown_site_in_check_is_a_one_line_error():
    result = hpcbundle("check", "cpu-local", "--site", "locl")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "did you mean local?" in result.stderr


def _nvidia_env_verdict(site: Site, recipe: Recipe, drop_labels: bool = False):
    """The nvidia-container-env finding for `recipe`'s image on `site`; `drop_labels`: an image built before it."""
    image = image_facts(image_labels(recipe, KB))
    if drop_labels:
        image = {key: value for key, value in image.items() if not key.startswith("nvidia.")}
    facts = Facts(site=site, image=image, image_source=f"image of {recipe.name}")
    return next(result for result in evaluate(facts, KB) if result.rule == "nvidia-container-env")


def test_wheels_image_sets_the_nvidia_variables_docker_and_enroot_need():
    docker_gpu = _site("roce-h100-ompi5", container={"runtime": "docker", "gpu": True, "binds": []})
    wheels = _recipe("cuda13.0-torch2.11")
    assert _nvidia_env_verdict(docker_gpu, wheels).status == "PASS"
    old = _nvidia_env_verdict(docker_gpu, wheels, drop_labels=True)
    assert old.status == "WARN"
    assert "NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility" in old.evidence
    assert "rebuild the image" in old.fix
    assert _nvidia_env_verdict(docker_gpu, _recipe("cuda12.6-torch2.9")).status == "PASS"  # the nvidia/cuda base's
    assert _nvidia_env_verdict(_site("roce-h100-ompi5"), wheels, drop_labels=True).status == "SKIP"  # --nv binds


def test_an_image_without_the_nvidia_variables_gets_no_gpu_under_pyxis():
    old = _nvidia_env_verdict(_site("slurm-pyxis-h100"), _recipe("cuda13.0-torch2.11"), drop_labels=True)
    assert old.status == "FAIL" and "enroot's nvidia hook gives its containers no GPU" in old.evidence
