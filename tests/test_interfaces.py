"""Interface settings have one source: network.interfaces gives btl/oob_tcp_if_include and
NCCL_SOCKET_IFNAME unless the site sets the key itself, and `launch --explain` says which."""

from __future__ import annotations

import pytest

from hpcbundle.config.errors import UserError
from hpcbundle.config.sites import Site
from hpcbundle.knowledge.network import Setting, interface_settings
from hpcbundle.launch import RankLayout, load_site

from .helpers import SITES, make_site, planned

DERIVED = "network.interfaces"


def explain(site: Site, np_: int = 4) -> dict[str, str]:
    """Each part of the launch command as its display text -> the source --explain names."""
    command = planned(site, RankLayout(np_, (("n1", np_ // 2), ("n2", np_ // 2))), ["python", "t.py"])
    return {" ".join(part.tokens): part.source for part in command.parts}


def test_open_mpi_gpu_site_derives_btl_oob_and_nccl_interfaces_from_network_interfaces():
    assert interface_settings(make_site()) == {
        "network.interfaces": Setting("eth0", DERIVED),
        "mca.btl_tcp_if_include": Setting("eth0", DERIVED),
        "mca.oob_tcp_if_include": Setting("eth0", DERIVED),
        "env.NCCL_SOCKET_IFNAME": Setting("eth0", DERIVED),
    }


def test_a_key_the_site_sets_wins_over_network_interfaces_and_is_its_own_source():
    site = make_site(mca={"btl_tcp_if_include": "ib0"}, env={"NCCL_SOCKET_IFNAME": "^lo", "HOROVOD_GLOO_IFACE": "eth1"})
    assert interface_settings(site) == {
        "network.interfaces": Setting("eth0", DERIVED),
        "mca.btl_tcp_if_include": Setting("ib0", "mca.btl_tcp_if_include"),
        "mca.oob_tcp_if_include": Setting("eth0", DERIVED),
        "env.NCCL_SOCKET_IFNAME": Setting("^lo", "env.NCCL_SOCKET_IFNAME"),
        "env.HOROVOD_GLOO_IFACE": Setting("eth1", "env.HOROVOD_GLOO_IFACE"),
    }


def test_cpu_site_gets_no_nccl_variable_and_intel_mpi_site_no_open_mpi_parameters():
    cpu = make_site(node={"cores": 8})
    assert list(interface_settings(cpu)) == ["network.interfaces", "mca.btl_tcp_if_include", "mca.oob_tcp_if_include"]
    intel = make_site(mpi={"flavour": "intelmpi", "version": "2021.10"}, launcher={"name": "mpiexec.hydra"})
    assert list(interface_settings(intel)) == ["network.interfaces", "env.NCCL_SOCKET_IFNAME"]


def test_shipped_sites_name_each_interface_once():
    for name in ("eth-a100-slurm", "ib-v100"):
        found = interface_settings(load_site(name, SITES))
        assert {key: setting.source for key, setting in found.items()} == dict.fromkeys(
            ["network.interfaces", "mca.btl_tcp_if_include", "mca.oob_tcp_if_include", "env.NCCL_SOCKET_IFNAME"],
            DERIVED,
        )
    excluding = Setting("^virbr0,lo", "env.NCCL_SOCKET_IFNAME")
    assert interface_settings(load_site("seed-v100", SITES)) == {"env.NCCL_SOCKET_IFNAME": excluding}


def test_explain_says_which_interface_tokens_are_derived_and_which_the_site_set():
    site = make_site(mca={"btl_tcp_if_include": "ib0"})
    parts = explain(site)
    assert (
        parts["--mca btl_tcp_if_include ib0"]
        == "site demo mca.btl_tcp_if_include, set by the site over network.interfaces"
    )
    assert parts["--mca oob_tcp_if_include eth0"] == "site demo mca.oob_tcp_if_include, derived from network.interfaces"
    assert parts["-x NCCL_SOCKET_IFNAME=eth0"] == "site demo env.NCCL_SOCKET_IFNAME, derived from network.interfaces"
    assert "--mca btl_tcp_if_include eth0" not in parts


def test_srun_passes_no_oob_parameter_because_it_starts_no_daemons():
    site = make_site(launcher={"name": "srun", "pmi": "pmix"})
    argv = planned(site, RankLayout(4, in_allocation=True), ["python", "t.py"]).argv
    threads = "OMP_NUM_THREADS=4"  # 8 cores over the 2 ranks (one per GPU) of a node
    assert argv[: argv.index("srun")] == ["env", threads, "OMPI_MCA_btl_tcp_if_include=eth0", "NCCL_SOCKET_IFNAME=eth0"]


def test_hydra_gpu_site_confines_mpi_with_iface_and_nccl_with_its_variable():
    site = make_site(mpi={"flavour": "intelmpi", "version": "2021.10"}, launcher={"name": "mpiexec.hydra"})
    argv = planned(site, RankLayout(2, (("n1", 1), ("n2", 1))), ["python", "t.py"]).argv
    assert argv == [
        "env",
        "OMP_NUM_THREADS=8",  # 8 cores for the one rank on each host
        "NCCL_SOCKET_IFNAME=eth0",
        "mpiexec.hydra",
        "-n",
        "2",
        "-hosts",
        "n1:1,n2:1",
        "-iface",
        "eth0",
        "python",
        "t.py",
    ]


@pytest.mark.parametrize(
    "launcher, key, section",
    [
        ({"name": "horovodrun"}, "env.NCCL_SOCKET_IFNAME", "env"),
        ({"name": "horovodrun"}, "mca.btl_tcp_if_include", "mca"),
        ({"name": "horovodrun", "gloo": True}, "env.HOROVOD_GLOO_IFACE", "env"),
    ],
)
def test_horovodrun_refuses_an_interface_key_its_network_interface_flag_would_override(launcher, key, section):
    site = make_site(launcher=launcher, **{section: {key.split(".")[1]: "eth1"}})
    with pytest.raises(UserError) as caught:
        planned(site, RankLayout(2, (("n1", 1), ("n2", 1))), ["python", "t.py"])
    assert caught.value.lines[0].startswith(f"site demo: {key}: horovodrun sets it from --network-interface")
