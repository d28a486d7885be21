"""Container in the loop, the hybrid MPI model: the built cpu-local runtime image, exported to a
Charliecloud directory image, run by the commands hpcbundle generates for a site whose runtime is
charliecloud, on the network-namespace cluster.

The host's Open MPI 4.1.4 (mpirun on node1, orted on the other nodes through the fixture's rsh
agent) starts one `ch-run IMAGE -- python ...` per rank; the Open MPI 4.1.4 inside the image talks
back to it. Then the trap the site check warns about (pair rule userns-vader): every ch-run is its
own user namespace, where Open MPI 4.1's vader single-copy (CMA) cannot work, and two ranks on one
node hang on a large allreduce, unless the site sets `btl_vader_single_copy_mechanism none` (which
the generated command then carries). Seen here as root, no unprivileged user needed: ch-run as
root still makes a user namespace (uid map 0 0 1), and without the setting a 48 MiB allreduce
hangs until the launch bound kills it, while 1 MiB (under the single-copy threshold) passes.
(Outside the namespace nodes Open MPI also prints its `cma-different-user-namespace-warning`;
on them that help message is lost to a PMIx show_help error, so it is not asserted.)

The image is the session fixture `cpu_local` (hpcbundle_testbed.docker_plugin) that
test_docker_image.py uses too: built once per session (warm, from the layer cache). The fixture
`ch_image` there exports it to a directory image (hpcbundle_testbed.charliecloud), once per module;
the cluster is the testbed's `netns_cluster`. Every run is bounded; the image directory,
namespaces and processes are removed also when a test fails. Nothing skips.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from hpcbundle_testbed.charliecloud import IN_IMAGE_TESTS, RUN_ENV
from hpcbundle_testbed.netns_cluster import NetnsCluster
from hpcbundle_testbed.sites import charliecloud_site

from .helpers import ROOT, hpcbundle_argv, launched_command

pytestmark = [pytest.mark.docker, pytest.mark.cluster]

BIG_MIB = 48  # well over vader's single-copy threshold; 32 MiB already hangs (Charliecloud 0.31, Open MPI 4.1.4)
SMALL_MIB = 1  # under it: goes through the copy-in/copy-out path, no CMA
HANG_BOUND = 30  # launcher.timeout of the trap variant: the OK run takes ~5 s, the allreduce itself < 1 s
# TensorFlow here: PyTorch across nodes is covered by the ssh and doctor cluster tests.
ALLREDUCE_TF = ("python", "/examples/allreduce_check.py", "--framework", "tensorflow")
BOUND_RE = re.compile(r"^hpcbundle: error: killed after (\d+) s \(launcher\.timeout of site ", re.M)


def launch(site: Path, image: Path, np_: int, hosts: str, *program: str) -> list[str]:
    return hpcbundle_argv(
        "launch",
        "--site",
        str(site),
        "--image",
        str(image),
        "--np",
        str(np_),
        "--hosts",
        hosts,
        "--exec",
        "--",
        *program,
    )


RUN_DIR = Path(tempfile.gettempdir())
"""Where the launches run from: ch-run binds the working directory (-b DIR), and a read-only directory image
has the mount point only for directories it holds, such as /tmp, which ch-run shares with the host anyway."""


def run_on_node1(cluster: NetnsCluster, argv: list[str], timeout: float) -> tuple[int, str]:
    try:
        res = cluster.run("node1", argv, timeout=timeout, env=RUN_ENV, cwd=RUN_DIR)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the launch outlived its own bound and the test's {timeout:.0f} s")
    return res.returncode, res.stdout + res.stderr


# ------------------------------------------------------------------------ across three nodes


def test_image_is_a_charliecloud_directory_image_with_the_same_open_mpi_inside(ch_image: Path):
    res = subprocess.run(
        [
            "ch-run",
            "--set-env",
            str(ch_image),
            "--",
            "sh",
            "-c",
            "command -v python; ompi_info --parsable | grep '^ompi:version:full:'; cat /proc/self/uid_map",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **RUN_ENV},
        check=False,
    )
    assert res.returncode == 0, res.stderr
    host = subprocess.run(["ompi_info", "--parsable"], capture_output=True, text=True, timeout=60, check=True).stdout
    lines = res.stdout.split("\n")
    assert lines[0] == "/opt/venv/bin/python"
    assert lines[1] == "ompi:version:full:4.1.4"
    assert "ompi:version:full:4.1.4" in host.splitlines()
    # a user namespace even as root: uid 0 maps to 0, one id
    assert lines[2].split() == ["0", "0", "1"]


def test_hybrid_allreduce_runs_the_images_program_on_three_nodes_over_data0(
    ch_image: Path, netns_cluster: NetnsCluster, tmp_path: Path
):
    site = charliecloud_site(tmp_path, netns_cluster, "netns-charliecloud")
    before = {n: netns_cluster.iface_bytes(n, "data0") for n in netns_cluster.nodes}
    status, out = run_on_node1(
        netns_cluster, launch(site, ch_image, 3, "node1:1,node2:1,node3:1", *ALLREDUCE_TF), timeout=240
    )
    command = launched_command(out)
    assert status == 0, out[-4000:]
    assert f"ch-run -b {RUN_DIR} --cd={RUN_DIR} --set-env {ch_image} -- {shlex.join(ALLREDUCE_TF)}" in command
    assert "--mca btl_vader_single_copy_mechanism none" in command and "-H node1:1,node2:1,node3:1" in command
    assert re.search(r"^allreduce_check: OK size=3 expected=3 framework=tensorflow", out, re.M), out[-3000:]
    assert not Path("/examples").exists(), "the program ran from the image: the host has no /examples"
    for node in netns_cluster.nodes[1:]:  # remote ranks really ran on their nodes, over data0
        assert (netns_cluster.iface_bytes(node, "data0") - before[node]).rx > 0


def test_hybrid_pytorch_training_on_three_nodes_lowers_the_loss(
    ch_image: Path, netns_cluster: NetnsCluster, tmp_path: Path
):
    site = charliecloud_site(tmp_path, netns_cluster, "netns-charliecloud")
    status, out = run_on_node1(
        netns_cluster,
        launch(
            site,
            ch_image,
            3,
            "node1:1,node2:1,node3:1",
            "python",
            "/examples/pytorch_train.py",
            "--synthetic",
            "--epochs",
            "2",
        ),
        timeout=300,
    )
    assert status == 0, out[-4000:]
    assert f"ch-run -b {RUN_DIR} --cd={RUN_DIR} --set-env" in launched_command(out)
    epochs = re.findall(r"^epoch (\d+)/2: loss=([\d.]+)", out, re.M)
    final = re.findall(r"^final: accuracy=([\d.]+) loss=[\d.]+ images/sec=[\d.]+ ranks=(\d+)$", out, re.M)
    assert [e for e, _ in epochs] == ["1", "2"] and len(final) == 1, out[-3000:]
    assert final[0][1] == "3"
    assert float(epochs[1][1]) < float(epochs[0][1]), f"loss did not fall: {epochs}"


@pytest.mark.parametrize("wiring", ["torch", "torchrun"])
def test_a_torch_program_reduces_across_three_nodes_in_the_image_with_both_torch_wirings(
    ch_image: Path, netns_cluster: NetnsCluster, tmp_path: Path, wiring: str
):
    """A plain torch.distributed program (no hpcbundle import), run by the image's Python and torch: --torch (one
    ch-run per rank, env://) and --torchrun (one ch-run per node running torchrun), meeting at node 1's data
    address; the program sits in the test's directory under /tmp, which ch-run binds."""
    site = charliecloud_site(tmp_path, netns_cluster, "netns-charliecloud")
    program = tmp_path / "torch_allreduce.py"
    program.write_text((ROOT / "tests" / "data" / "torch_allreduce.py").read_text())
    argv = launch(site, ch_image, 3, "node1:1,node2:1,node3:1", "python", str(program))
    argv.insert(argv.index("--exec"), f"--{wiring}")
    status, out = run_on_node1(netns_cluster, argv, timeout=240)
    assert status == 0, out[-4000:]
    ranks = re.findall(r"torch-rank RANK=(\d+) WORLD_SIZE=3 LOCAL_RANK=0 MASTER_ADDR=(\S+) sum=6", out)
    assert sorted(int(rank) for rank, _ in ranks) == [0, 1, 2], out[-3000:]
    masters = {master for _, master in ranks}  # under torchrun: the address of the agent rendezvous made rank 0
    assert len(masters) == 1 and masters <= {netns_cluster.address(node) for node in netns_cluster.nodes}


# ------------------------------------------------------------- the user-namespace vader trap


def test_site_check_warns_about_the_variant_without_the_vader_setting(netns_cluster: NetnsCluster, tmp_path: Path):
    good = charliecloud_site(tmp_path, netns_cluster, "ch-shm", shared_memory=True)
    bad = charliecloud_site(tmp_path, netns_cluster, "ch-shm-cma", shared_memory=True, vader_none=False)
    outs = {}
    for site in (good, bad):
        res = subprocess.run(
            hpcbundle_argv("check", "cpu-local", "--site", str(site)),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        outs[site.stem] = res.stdout + res.stderr
    assert re.search(r"^PASS\s+userns-vader\s+charliecloud runs in a user namespace", outs["ch-shm"], re.M), outs[
        "ch-shm"
    ]
    assert re.search(
        r"^WARN\s+userns-vader\s+charliecloud runs ranks in user namespaces.*"
        r"btl_vader_single_copy_mechanism: none",
        outs["ch-shm-cma"],
        re.M,
    ), outs["ch-shm-cma"]


def test_large_shared_memory_allreduce_passes_with_the_generated_command_and_hangs_without(
    ch_image: Path, netns_cluster: NetnsCluster, tmp_path: Path
):
    """Two ranks on node1, one ch-run (user namespace) each, vader between them."""
    good = charliecloud_site(tmp_path, netns_cluster, "ch-shm", shared_memory=True, timeout=120)
    bad = charliecloud_site(
        tmp_path, netns_cluster, "ch-shm-cma", shared_memory=True, vader_none=False, timeout=HANG_BOUND
    )
    big = f"{IN_IMAGE_TESTS}/big_allreduce.py"

    t0 = time.monotonic()
    status, out = run_on_node1(
        netns_cluster, launch(good, ch_image, 2, "node1:2", "python", big, str(BIG_MIB)), timeout=180
    )
    good_seconds = time.monotonic() - t0
    command = launched_command(out)
    assert "--mca btl self,vader,tcp" in command and "--mca btl_vader_single_copy_mechanism none" in command
    assert status == 0, out[-4000:]
    assert re.search(rf"^big_allreduce: OK size=2 mib={BIG_MIB} ", out, re.M), out[-3000:]

    # Without the setting a small message still passes: the variant itself works ...
    status, out = run_on_node1(
        netns_cluster, launch(bad, ch_image, 2, "node1:2", "python", big, str(SMALL_MIB)), timeout=HANG_BOUND + 60
    )
    assert "btl_vader_single_copy_mechanism" not in launched_command(out)
    assert status == 0, out[-4000:]
    assert re.search(rf"^big_allreduce: OK size=2 mib={SMALL_MIB} ", out, re.M), out[-3000:]

    # ... and the large one hangs until the launch bound kills it.
    t0 = time.monotonic()
    status, out = run_on_node1(
        netns_cluster, launch(bad, ch_image, 2, "node1:2", "python", big, str(BIG_MIB)), timeout=HANG_BOUND + 60
    )
    bad_seconds = time.monotonic() - t0
    assert status == 124, f"expected the bound to kill the hung job, got exit {status}:\n{out[-4000:]}"
    m = BOUND_RE.search(out)
    assert m and int(m.group(1)) == HANG_BOUND, out[-3000:]
    assert "big_allreduce: OK" not in out
    assert bad_seconds >= HANG_BOUND and good_seconds < HANG_BOUND, (good_seconds, bad_seconds)
    deadline = time.monotonic() + 20
    while netns_cluster.pids("node1") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert netns_cluster.pids("node1") == [], "the killed job left processes on node1"
