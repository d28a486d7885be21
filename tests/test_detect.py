"""site detect's drafting, pure: observed facts in, a loadable site with CONFIRM comments out."""

from __future__ import annotations

import threading
import time

from hpcbundle.config.loading import parse_yaml, validate
from hpcbundle.config.sites import Site
from hpcbundle.diagnose.detect import choose_interface, draft_site
from hpcbundle.diagnose.probes import parse_gpus
from hpcbundle.diagnose.resolve import MAX_PEERS, resolve_all
from hpcbundle.knowledge.knobs import GPU_CYCLE_TIME_WHY
from hpcbundle.rules.engine import Facts
from hpcbundle.rules.loading import load_failures

from .helpers import GOLDEN, assert_golden, hpcbundle, observed


def test_interface_is_the_one_the_routes_to_the_other_hosts_share():
    assert choose_interface(
        observed(host_routes={"node1": "lo", "node2": "data0", "node3": "data0"}, default_route="mgmt0")
    ) == ("data0", "the routes to node2, node3 go through data0")


def test_interface_then_follows_the_host_name_then_the_default_route():
    assert choose_interface(observed(hostname_address="10.78.0.1", hostname_interface="mgmt0"))[0] == "mgmt0"
    assert choose_interface(observed(default_route="data0")) == ("data0", "data0 carries the default route")


def test_no_way_to_tell_leaves_interfaces_empty_and_asks_to_confirm():
    text = draft_site(observed(), "x")
    assert (
        "interfaces: []  # CONFIRM: several candidates and no route, host name or default route to tell them apart; "
        "name the data interface among: data0 (10.77.0.1/24), mgmt0 (10.78.0.1/24)" in text
    )
    assert "docker0" not in text and "veth12" not in text and "lo (" not in text


def test_draft_is_a_valid_site_with_the_environments_mca_and_confirm_lines():
    text = draft_site(
        observed(default_route="data0", ompi_env={"plm_rsh_agent": "/x/agent"}, runtimes={"charliecloud": "0.31"}),
        "mine",
    )
    site = validate(Site, parse_yaml(text, "draft"), "draft")
    assert load_failures(Facts(site=site)) == []
    assert (site.name, site.network.interfaces, site.mca, site.mpi.version) == (
        "mine",
        ["data0"],
        {"plm_rsh_agent": "/x/agent"},
        "4.1.4",
    )
    assert site.launcher.allow_run_as_root and site.container.runtime == "none"
    assert "CONFIRM: found charliecloud (0.31): set runtime to run images" in text


def test_the_draft_bounds_silence_so_a_lost_link_ends_the_job_long_before_launchers_timeout():
    text = draft_site(observed(default_route="data0"), "mine")
    site = validate(Site, parse_yaml(text, "draft"), "draft")
    assert (site.faults.stall_seconds, site.launcher.timeout) == (600, 3600)
    assert "stall_seconds: 600  # CONFIRM: above the program's longest silent phase" in text


def test_gpus_and_infiniband_are_drafted_from_what_was_seen():
    gpu = {
        "present": True,
        "driver": "535.104.05",
        "gpus": [{"name": "NVIDIA A100-SXM4-40GB", "capability": "8.0"}] * 4,
        "note": "",
    }
    text = draft_site(observed(gpu=gpu, infiniband=["mlx5_0"], default_route="data0"), "g", ["A100", "A10"])
    site = validate(Site, parse_yaml(text, "draft"), "draft")
    assert (site.node.gpus, site.node.gpu_model, site.node.driver, site.network.fabric) == (
        4,
        "A100",
        "535.104.05",
        "infiniband",
    )
    assert load_failures(Facts(site=site)) == []


def test_an_h100_hosts_real_nvidia_smi_line_drafts_its_gpus_model_and_driver():
    gpu = parse_gpus("NVIDIA H100 80GB HBM3, 580.159.04, 9.0, 81559 MiB\n")
    text = draft_site(observed(gpu=gpu, default_route="data0"), "h100", ["H100", "H200", "A100"])
    site = validate(Site, parse_yaml(text, "draft"), "draft")
    assert (site.node.gpus, site.node.gpu_model, site.node.driver) == (1, "H100", "580.159.04")
    assert "# nvidia-smi: NVIDIA H100 80GB HBM3" in text


def test_a_gpu_nodes_draft_sets_horovods_cycle_time_from_the_h200_figures_to_retune_there():
    """The H200 of the GPU lane (2026-11-27): Horovod's 1 ms cycle cost ~1 ms per allreduce call, 0.1 ms cost 0.157."""
    gpu = parse_gpus("NVIDIA H200, 580.159.04, 9.0, 143771 MiB\n")
    text = draft_site(observed(gpu=gpu, default_route="data0", cpus=16), "h200", ["H100", "H200", "A100"])
    assert_golden(GOLDEN / "detect" / "h200.yaml", text)
    site = validate(Site, parse_yaml(text, "draft"), "draft")
    assert (site.env, site.why["env.HOROVOD_CYCLE_TIME"]) == ({"HOROVOD_CYCLE_TIME": "0.1"}, GPU_CYCLE_TIME_WHY)
    assert load_failures(Facts(site=site)) == []
    cpu = draft_site(observed(default_route="data0"), "cpu")
    assert "HOROVOD_CYCLE_TIME" not in cpu and "env:" not in cpu


def test_a_dgx_h100_draft_has_its_cores_threads_and_gpu_numa_map_from_the_node():
    """A DGX H100 as its probes see it: 224 CPUs of 2 threads each, 8 GPUs on 2 sockets (nvidia-smi topo -m)."""
    topo = (GOLDEN.parent / "data" / "topo" / "dgx-h100-vllm-13855.txt").read_text().split("\n", 1)[1]
    gpu = parse_gpus("NVIDIA H100 80GB HBM3, 580.159.04, 9.0, 81559 MiB\n" * 8)
    threads = {"threads": 2, "evidence": "/sys/devices/system/cpu/cpu0/topology/thread_siblings_list"}
    facts = observed(gpu=gpu, default_route="data0", cpus=224, threads_per_core=threads, gpu_topology=topo)
    text = draft_site(facts, "dgx-h100", ["H100", "H200", "A100"])
    assert_golden(GOLDEN / "detect" / "dgx-h100.yaml", text)
    site = validate(Site, parse_yaml(text, "draft"), "draft")
    assert (site.node.cores, site.node.threads_per_core, site.node.gpu_numa) == (112, 2, [0, 0, 0, 0, 1, 1, 1, 1])
    assert load_failures(Facts(site=site)) == []


# --- --hosts: bounded, resolved together within a time limit ---------------------------------------


def test_site_detect_refuses_a_whole_clusters_hosts_in_one_line_before_resolving_any():
    result = hpcbundle("site", "detect", "--hosts", "n[1-4096]")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "hpcbundle: error: --hosts: 4096 hosts; the routes to a few show the interface the nodes share "
        f"(give at most {MAX_PEERS}, e.g. node2,node3)\n"
    )


def test_names_that_never_resolve_cost_the_time_limit_once_not_once_per_name():
    def lookup(host: str) -> str:
        if host.startswith("stuck"):
            threading.Event().wait()  # a resolver that never answers
        return "10.0.0." + host.removeprefix("n")

    hosts = [f"stuck{i}" for i in range(MAX_PEERS - 2)] + ["n1", "n2"]
    started = time.monotonic()
    found = resolve_all(hosts, seconds=0.5, lookup=lookup)
    assert time.monotonic() - started < 5
    assert found == {**dict.fromkeys(hosts[:-2]), "n1": "10.0.0.1", "n2": "10.0.0.2"}


def test_hostile_names_resolve_to_nothing_rather_than_raise():
    names = ["a" * 300, "a..b", "-x", "1.2.3.4.5", "a\u202eb", "\u00e4" * 70, "n1\nn2"]
    assert resolve_all(names, seconds=5) == dict.fromkeys(names)


def test_site_detect_names_the_hosts_that_did_not_resolve_and_still_drafts():
    result = hpcbundle("site", "detect", "--hosts", "localhost,no-such-node.invalid")
    assert result.returncode == 0 and "interfaces" in result.stdout
    assert result.stderr.startswith("hpcbundle: note: --hosts: 1 of 2 did not resolve (in 10 s at most): ")
    assert "no-such-node.invalid;" in result.stderr and len(result.stderr.splitlines()) == 1
