"""CPUs and GPU/NUMA placement per rank: sbatch's --cpus-per-task and srun -c, the gpu-numa wrapper
(run for real under this machine's Open MPI), `site detect`'s map from real `nvidia-smi topo -m`
outputs, and the rules over node.cpus_per_rank and node.gpu_numa."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcbundle.config.loading import parse_yaml, validate
from hpcbundle.config.sites import Site
from hpcbundle.diagnose.detect import draft_site
from hpcbundle.diagnose.probes import parse_gpus
from hpcbundle.diagnose.topo import parse_topo
from hpcbundle.knowledge.bind import BIND_INLINE, BIND_NAME, BIND_SCRIPT, bind_commands
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.rules.engine import Facts, evaluate

from .helpers import ROOT, hpcbundle, make_site, need_mpirun, observed, write_site

INSIDE = {"SLURM_JOB_ID": "1"}
"""An srun line is printed for inside an allocation (rule srun-allocation refuses it outside one)."""

TOPO = ROOT / "tests" / "data" / "topo"
NODE0_CPUS = Path("/sys/devices/system/node/node0/cpulist")


def _topo(name: str) -> str:
    """A captured `nvidia-smi topo -m` output without its source line."""
    source, text = (TOPO / name).read_text().split("\n", 1)
    assert source.startswith("# source: https://github.com/")
    return text


# --- CPUs per rank in batch scripts ------------------------------------------------------------


def test_srun_batch_job_asks_for_the_nodes_cores_per_rank_and_passes_them_to_srun():
    text = hpcbundle("sbatch", "--site", "eth-a100-slurm", "--image", "h.sif", "--nodes", "2", "--", "python", "t.py")
    lines = text.stdout.splitlines()
    assert "#SBATCH --cpus-per-task=16" in lines  # 64 cores / 4 GPUs
    launch = "\n".join(lines[lines.index("# shellcheck disable=SC2016") + 1 :])
    assert "srun --mpi=pmix -n 8 --kill-on-bad-exit=1 -c 16 " in launch and " OMP_NUM_THREADS=16 " in launch


def test_tasks_per_node_and_the_sites_cpus_per_rank_set_the_cpus(tmp_path):
    fewer = hpcbundle("sbatch", "--site", "roce-h100-ompi5", "--nodes", "1", "--tasks-per-node", "4", "--", "t")
    assert "#SBATCH --cpus-per-task=24" in fewer.stdout and "-x OMP_NUM_THREADS=24 " in fewer.stdout
    site = write_site(
        tmp_path, "roce-h100-ompi5", {"node": {"cores": 96, "gpus": 8, "gpu_model": "H100", "cpus_per_rank": 10}}
    )
    explicit = hpcbundle("sbatch", "--site", str(site), "--nodes", "1", "--", "t")
    assert "#SBATCH --cpus-per-task=10" in explicit.stdout and "-x OMP_NUM_THREADS=10 " in explicit.stdout


def test_interactive_lines_size_cpus_and_threads_as_sbatch_does(tmp_path):
    srun = hpcbundle("launch", "--site", "eth-a100-slurm", "--np", "8", "--explain", "--", "t", env=INSIDE)
    srun = srun.stdout.splitlines()
    assert " OMP_NUM_THREADS=16 " in srun[0] and " -n 8 --kill-on-bad-exit=1 -c 16 --ntasks-per-node=4 " in srun[0]
    assert any(line.startswith("-c 16 ") and "<- node.cores 64 / 4 ranks: CPUs each rank" in line for line in srun)
    mpirun = hpcbundle("launch", "--site", "roce-h100-ompi5", "--np", "4", "--hosts", "g1:2,g1:2", "--", "t").stdout
    assert "-x OMP_NUM_THREADS=24 " in mpirun  # 96 cores over the 4 ranks of g1
    knl_node = {"cores": 68, "threads_per_core": 4, "ranks_per_node": 2}
    hydra = write_site(tmp_path, "stampede2-knl", None, env={"FI_PROVIDER": "psm2"}, node=knl_node, why={})
    line = hpcbundle("launch", "--site", str(hydra), "--np", "2", "--hosts", "k1:2", "--", "t").stdout
    assert line.startswith("env FI_PROVIDER=psm2 OMP_NUM_THREADS=34 mpiexec.hydra ")  # 272 CPUs / 2 / 4 threads


def test_srun_gpu_lines_fill_each_socket_with_the_ranks_of_its_gpus_in_order():
    """SLURM deals a node's tasks to its sockets cyclically by default, while rank LOCAL_RANK takes GPU LOCAL_RANK."""
    for site in ("eth-a100-slurm", "slurm-pyxis-h100"):
        lines = hpcbundle(
            "launch", "--site", site, "--np", "8", "--image", "/i.sqsh", "--explain", "--", "t", env=INSIDE
        )
        lines = lines.stdout
        assert " --distribution=block:block " in lines.splitlines()[0], site
        why = next(line for line in lines.splitlines() if line.startswith("--distribution=block:block "))
        assert f"<- site {site} node.gpus: each rank next to its GPU" in why
    cpu = hpcbundle("launch", "--site", "eth-cpu-elastic", "--np", "4", "--", "t").stdout
    assert "--distribution" not in cpu
    agents = hpcbundle("sbatch", "--site", "eth-a100-slurm", "--nodes", "2", "--torchrun", "--", "python", "t.py")
    assert agents.returncode == 0, agents.stderr
    assert "--ntasks-per-node=1" in agents.stdout and "--distribution" not in agents.stdout  # one agent per node


def test_a_node_of_hardware_threads_doubles_srun_c_and_explain_says_it_is_whole_cores():
    """A DGX H100 (slurm-pyxis-h100): SLURM counts 224 CPUs for 112 cores; 8 ranks ask for 28 each (14 cores)."""
    lines = hpcbundle(
        "launch", "--site", "slurm-pyxis-h100", "--np", "8", "--image", "/i.sqsh", "--explain", "--", "t", env=INSIDE
    ).stdout.splitlines()
    assert " OMP_NUM_THREADS=14 " in lines[0] and " -c 28 --ntasks-per-node=8 " in lines[0]
    why = next(line for line in lines if line.startswith("-c 28 "))
    assert "<- node.cores 112 x 2 threads / 8 ranks: " in why
    assert (
        "SLURM counts each of a core's 2 hardware threads as a CPU (node.threads_per_core), so -c 28 is 14 whole"
        in (why)
    )
    script = hpcbundle("sbatch", "--site", "slurm-pyxis-h100", "--nodes", "1", "--", "t").stdout
    assert "#SBATCH --cpus-per-task=28" in script.splitlines()


def test_slurm_pyxis_h100_names_its_compute_adapters_exactly_leaving_the_storage_ports_out():
    line = hpcbundle("launch", "--site", "slurm-pyxis-h100", "--np", "8", "--image", "/i.sqsh", "--", "t", env=INSIDE)
    line = line.stdout
    assert " NCCL_IB_HCA==mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11 " in line
    assert "--container-env=PMIX_MCA_gds,NCCL_IB_HCA," in line


def test_sbatch_asks_for_the_sites_memory_or_all_of_it_when_exclusive_and_knl_by_hardware_threads(tmp_path):
    exclusive = hpcbundle("sbatch", "--site", "eth-a100-slurm", "--nodes", "1", "--", "t").stdout.splitlines()
    assert "#SBATCH --mem=0" in exclusive
    site = write_site(tmp_path, "eth-a100-slurm", {"slurm": {"options": ["--exclusive"], "mem": "480G"}})
    assert "#SBATCH --mem=480G" in hpcbundle("sbatch", "--site", str(site), "--nodes", "1", "--", "t").stdout
    knl = hpcbundle("sbatch", "--site", "stampede2-knl", "--nodes", "1", "--", "t").stdout.splitlines()
    assert "#SBATCH --cpus-per-task=272" in knl  # 68 cores x 4 hardware threads, as SLURM counts CPUs
    assert not any(line.startswith("#SBATCH --mem") for line in knl)  # TACC refuses --mem; its nodes are whole


@pytest.mark.parametrize("site", ["ib-v100", "seed-v100", "ib-a100-ucx", "roce-h100-ompi5", "eth-cpu-elastic"])
def test_shipped_sites_whose_jobs_take_whole_nodes_ask_for_all_of_their_memory(site):
    result = hpcbundle("sbatch", "--site", site, "--image", "h.sif", "--nodes", "2", "--", "python", "t.py")
    lines = result.stdout.splitlines()
    assert "#SBATCH --exclusive" in lines and "#SBATCH --mem=0" in lines, result.stderr
    assert "batch-memory" not in result.stderr


def test_a_site_that_sizes_its_own_threads_keeps_them():
    knl = hpcbundle("sbatch", "--site", "stampede2-knl", "--nodes", "2", "--", "python", "t.py").stdout
    assert "TF_NUM_INTRAOP_THREADS=64" in knl and "OMP_NUM_THREADS" not in knl


def test_cpus_per_rank_over_the_nodes_cores_is_refused_in_one_line(tmp_path):
    site = write_site(
        tmp_path, "eth-a100-slurm", {"node": {"cores": 64, "gpus": 4, "gpu_model": "A100", "cpus_per_rank": 17}}
    )
    result = hpcbundle("sbatch", "--site", str(site), "--nodes", "1", "-o", str(tmp_path / "job.sh"), "--", "t")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "node.cpus_per_rank: 17 CPUs x 4 ranks per node is more than node.cores 64" in result.stderr
    assert not (tmp_path / "job.sh").exists()


@pytest.mark.parametrize(
    "node, message",
    [
        ({"gpu_numa": [0, 1, 1]}, "node.gpu_numa: maps 3 GPUs but node.gpus is 2"),
        (
            {"gpu_numa": [0, 3], "numa_memory": [0, 1]},
            "node.gpu_numa[1]: GPU 1 on NUMA node 3, which the site does not have",
        ),
        ({"gpu_numa": [0, 1024]}, "node.gpu_numa[1]: expected at most 1023, got a number (1024)"),
        ({"gpu_numa": [0, int("9" * 3000)]}, "has an integer of more than 18 digits"),
        ({"cpus_per_rank": int("9" * 3000)}, "has an integer of more than 18 digits"),
    ],
    ids=["more-gpus", "unknown-numa-node", "numa-bound", "thousands-of-digits", "cpus-thousands-of-digits"],
)
def test_a_bad_placement_key_is_one_line_exit_2_nothing_written(tmp_path, node, message):
    base = {"cores": 8, "gpus": 2, "gpu_model": "V100"}
    site = write_site(tmp_path, "ib-v100", {"node": base | node})
    result = hpcbundle("sbatch", "--site", str(site), "--nodes", "1", "-o", str(tmp_path / "job.sh"), "--", "t")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert message in result.stderr, result.stderr
    assert not (tmp_path / "job.sh").exists()


# --- the gpu-numa wrapper: hpcbundle-bind ------------------------------------------------------

BIND = ROOT / "src" / "hpcbundle" / "data" / BIND_NAME


def test_a_gpu_numa_site_runs_the_wrapper_inside_the_image_where_it_exists_and_the_hosts_need_nothing():
    """roce-h100-ompi5 (mpirun + apptainer, no node.host_bind): hpcbundle-bind by name inside the image."""
    result = hpcbundle(
        "launch", "--site", "roce-h100-ompi5", "--image", "h.sif", "--np", "8", "--hosts", "a:8", "--explain", "--", "t"
    )
    assert result.returncode == 0, result.stderr
    assert " apptainer exec --nv h.sif hpcbundle-bind 0,0,0,0,1,1,1,1 t\n" in result.stdout
    assert "sh -c" not in result.stdout
    assert "site roce-h100-ompi5 node.gpu_numa, in the image" in result.stdout
    assert "per-rank placement by hpcbundle-bind MAP inside the container" in result.stdout


def test_only_a_site_whose_hosts_have_the_script_runs_it_on_the_host_before_the_container(tmp_path):
    site = write_site(tmp_path, "roce-h100-ompi5", {"node": {"host_bind": True}}, name="roce-host-bind")
    result = hpcbundle(
        "launch", "--site", str(site), "--image", "h.sif", "--np", "8", "--hosts", "a:8", "--explain", "--", "t"
    )
    assert result.returncode == 0, result.stderr
    assert " hpcbundle-bind 0,0,0,0,1,1,1,1 apptainer exec --nv h.sif t\n" in result.stdout
    assert "node.gpu_numa, on the host: node.host_bind" in result.stdout


def test_ranks_on_the_host_get_the_scripts_text_inline_unless_the_site_says_the_hosts_have_it(tmp_path):
    node = {"cores": 8, "gpus": 2, "gpu_model": "V100", "gpu_numa": [0, 1]}
    bare = write_site(tmp_path, "local", {"node": node}, name="bare")
    result = hpcbundle("launch", "--site", str(bare), "--np", "2", "--", "t")
    assert result.returncode == 0, result.stderr
    assert f" sh -c {shlex.quote(BIND_INLINE)} hpcbundle-bind 0,1 t" in result.stdout
    installed = write_site(tmp_path, "local", {"node": {**node, "host_bind": True}}, name="installed")
    result = hpcbundle("launch", "--site", str(installed), "--np", "2", "--", "t")
    assert result.returncode == 0, result.stderr
    assert " hpcbundle-bind 0,1 t\n" in result.stdout and "sh -c" not in result.stdout


def test_a_foreign_image_gets_the_script_inline_inside_the_container(tmp_path):
    """An image built elsewhere has no hpcbundle-bind: the line carries its text, inside the container whether
    srun's plugin (pyxis) or the launcher (mpirun + apptainer) starts it."""
    change = {"container": {"foreign_image": True}, "node": {"gpu_numa": [0, 0, 0, 0, 1, 1, 1, 1]}}
    inside = write_site(tmp_path, "slurm-pyxis-h100", change, name="pyxis-ngc")
    result = hpcbundle(
        "launch",
        "--site",
        str(inside),
        "--image",
        "nvcr.io#nvidia/pytorch:24.01-py3",
        "--np",
        "8",
        "--",
        "t",
        env={"SLURM_JOB_ID": "1"},  # srun: inside an allocation
    )
    assert result.returncode == 0, result.stderr
    assert f" sh -c {shlex.quote(BIND_INLINE)} hpcbundle-bind 0,0,0,0,1,1,1,1 t" in result.stdout
    outside = write_site(tmp_path, "roce-h100-ompi5", {"container": {"foreign_image": True}}, name="roce-ngc")
    result = hpcbundle("launch", "--site", str(outside), "--image", "h.sif", "--np", "8", "--hosts", "a:8", "--", "t")
    assert result.returncode == 0, result.stderr
    assert f" apptainer exec --nv h.sif sh -c {shlex.quote(BIND_INLINE)} hpcbundle-bind 0,0,0,0,1,1,1,1 t" in (
        result.stdout
    )


def test_the_inline_form_is_the_scripts_commands_and_every_one_is_complete():
    commands = bind_commands()
    assert BIND_INLINE == "; ".join(commands) and commands[0].startswith("if [")
    incomplete = [line for line in commands if subprocess.run(["sh", "-n", "-c", line], capture_output=True).returncode]
    assert incomplete == []
    assert set(BIND_SCRIPT.splitlines()) - set(commands) == {
        line for line in BIND_SCRIPT.splitlines() if not line.strip() or line.startswith("#")
    }


def test_the_script_is_executable_and_shellcheck_clean():
    assert os.access(BIND, os.X_OK) and BIND.read_text() == BIND_SCRIPT
    result = subprocess.run(["shellcheck", "--shell=sh", str(BIND)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout


def test_make_install_bind_puts_the_script_on_a_host(tmp_path):
    result = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "install-bind", f"PREFIX={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    installed = tmp_path / "bin" / BIND_NAME
    assert installed.read_text() == BIND_SCRIPT and os.access(installed, os.X_OK)


def test_check_says_where_the_wrapper_runs_and_that_a_host_bind_site_needs_it_on_every_host(tmp_path):
    shipped = hpcbundle("check", "cuda13.0-torch2.11-ompi5", "--site", "roce-h100-ompi5").stdout.splitlines()
    assert (
        "PASS  bind-tool            hpcbundle-bind runs inside the image, which carries it at "
        "/usr/local/bin/hpcbundle-bind: hosts need none"
    ) in shipped
    site = write_site(tmp_path, "roce-h100-ompi5", {"node": {"host_bind": True}}, name="roce-host-bind")
    host = hpcbundle("check", "cuda13.0-torch2.11-ompi5", "--site", str(site)).stdout.splitlines()
    assert (
        "PASS  bind-tool            hpcbundle-bind runs on the host, which the site says every node has "
        "(node.host_bind): doctor looks on every node, the batch script on its first"
    ) in host


def test_a_host_bind_batch_script_stops_in_one_line_on_a_node_without_the_script(tmp_path):
    site = write_site(tmp_path, "roce-h100-ompi5", {"node": {"host_bind": True}}, name="roce-host-bind")
    job = tmp_path / "job.sh"
    result = hpcbundle("sbatch", "--site", str(site), "--nodes", "1", "--image", "h.sif", "-o", str(job), "--", "t")
    assert result.returncode == 0, result.stderr
    text = job.read_text()
    check = text.index("if ! command -v hpcbundle-bind >/dev/null; then")
    assert check < text.index("\nmpirun ")
    # Run the script's test alone, under bash, on this host where hpcbundle-bind is not on PATH.
    test = text[check : text.index("fi\n", check) + 3]
    ran = subprocess.run(
        ["bash", "-c", test], capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"}
    )
    assert ran.returncode == 2 and len(ran.stderr.splitlines()) == 1
    assert "hpcbundle-bind is not on PATH on" in ran.stderr and "run `make install-bind` as root on every node" in (
        ran.stderr
    )
    shipped = hpcbundle("sbatch", "--site", "roce-h100-ompi5", "--nodes", "1", "--image", "h.sif", "--", "t").stdout
    assert "command -v hpcbundle-bind" not in shipped  # it runs inside the image


FORMS = {"script": [str(BIND)], "inline": ["sh", "-c", BIND_INLINE, BIND_NAME]}


def _wrapped(
    env: dict[str, str],
    gpu_numa: list[int],
    program: list[str],
    form: str = "script",
    path: str | None = None,
    mapping: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """hpcbundle-bind run directly (no launcher), as the file or inline, with the launcher's variables in `env`;
    MAP is `gpu_numa` joined, or `mapping` as given."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "SLURM_", "PMI_", "MPI_", "CUDA_"))}
    clean |= {"PATH": path or clean["PATH"]} | env
    mapping = ",".join(map(str, gpu_numa)) if mapping is None else mapping
    return subprocess.run([*FORMS[form], mapping, *program], capture_output=True, text=True, timeout=30, env=clean)


def _stubs(directory: Path, *tools: str) -> str:
    """A PATH of `directory`, holding stubs of `tools` that print their argv one word a line, then sh's own
    tools (cat for taskset's CPU list)."""
    directory.mkdir()
    for tool in tools:
        stub = directory / tool
        stub.write_text(f"#!/bin/sh\nprintf '%s\\n' {tool} \"$@\"\n")
        stub.chmod(0o755)
    for tool in ("sh", "cat"):
        (directory / tool).symlink_to(shutil.which(tool) or tool)
    return str(directory)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    "env, node",
    [
        ({"OMPI_COMM_WORLD_LOCAL_RANK": "1", "SLURM_LOCALID": "0"}, 3),  # mpirun in a batch job: Open MPI's wins
        ({"MPI_LOCALRANKID": "2", "SLURM_LOCALID": "0"}, 5),  # hydra in a batch job
        ({"PMI_LOCAL_RANK": "3"}, 7),
        ({"SLURM_LOCALID": "2", "CUDA_VISIBLE_DEVICES": "0,3,1"}, 3),  # srun: the job's GPUs, this rank's third
        ({"SLURM_LOCALID": "0", "CUDA_VISIBLE_DEVICES": "2"}, 5),  # one GPU already given to the rank
    ],
    ids=["open-mpi", "hydra", "pmi", "srun-job-gpus", "srun-gpu-per-task"],
)
def test_bind_execs_numactl_on_the_node_of_the_ranks_gpu_with_its_memory_preferred(tmp_path, env, node, form):
    """GPUs 0-3 on NUMA nodes 1, 3, 5, 7: a stub numactl shows the argv hpcbundle-bind execs (--preferred, not a
    strict --membind: a full node spills over instead of killing the rank)."""
    path = _stubs(tmp_path / "bin", "numactl", "taskset")
    result = _wrapped(env, [1, 3, 5, 7], ["python", "train.py", "--epochs", "2 3"], form, path)
    assert result.returncode == 0, result.stderr
    expected = [
        "numactl",
        f"--cpunodebind={node}",
        f"--preferred={node}",
        "--",
        "python",
        "train.py",
        "--epochs",
        "2 3",
    ]
    assert result.stdout.splitlines() == expected


@pytest.mark.parametrize("form", FORMS)
def test_bind_falls_back_to_taskset_over_the_nodes_cpus_without_numactl(tmp_path, form):
    path = _stubs(tmp_path / "bin", "taskset")
    result = _wrapped({"SLURM_LOCALID": "0"}, [0], ["true"], form, path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["taskset", "-c", "--", NODE0_CPUS.read_text().strip(), "true"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("tool", ["numactl", "taskset"])
def test_bind_hands_a_program_that_starts_with_a_dash_to_the_tool_after_double_dash(tmp_path, form, tool):
    path = _stubs(tmp_path / "bin", tool)
    result = _wrapped({"SLURM_LOCALID": "0"}, [0], ["-x", "--show"], form, path)
    assert result.returncode == 0, result.stderr
    words = result.stdout.splitlines()  # taskset: -c -- CPUS PROGRAM; numactl: ... -- PROGRAM
    assert words[-3 if tool == "numactl" else -4] == "--" and words[-2:] == ["-x", "--show"], words


BAD_MAPS = ["0,$(id)", "`id`", "../../../etc", "0/../1", "0,,1", ",0", "0,", " 0", "0 1", "-1", "1e3", "1234567", "٣"]
"""MAPs that are not NUMA node numbers separated by commas: each once reached numactl or taskset's sysfs path."""


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("bad", BAD_MAPS)
def test_bind_refuses_a_map_that_is_not_numa_node_numbers_in_one_line(tmp_path, form, bad):
    path = _stubs(tmp_path / "bin", "numactl", "taskset")
    result = _wrapped({"SLURM_LOCALID": "0"}, [], ["echo", "ran"], form, path, mapping=bad)
    assert result.returncode == 2 and result.stdout == "", result.stdout
    assert result.stderr == (
        "hpcbundle-bind: MAP is not NUMA node numbers separated by commas (node.gpu_numa, e.g. 0,0,1,1)\n"
    )


@settings(max_examples=60, deadline=None)
@given(mapping=st.text(alphabet=st.sampled_from(list("0129,-./$()` x\n")), min_size=1, max_size=12))
def test_bind_runs_numactl_only_on_a_numeric_node_of_the_map(tmp_path_factory, mapping):
    path = _stubs(tmp_path_factory.mktemp("bind") / "bin", "numactl")
    result = _wrapped({"SLURM_LOCALID": "0"}, [], ["echo", "ran"], path=path, mapping=mapping)
    if result.returncode == 0:
        node = result.stdout.splitlines()[1].removeprefix("--cpunodebind=")
        assert node.isdigit() and node.isascii() and mapping.split(",")[0] == node
    else:
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr


@pytest.mark.parametrize("form", FORMS)
def test_bind_with_a_node_without_cpus_or_without_either_tool_stops_in_one_line(tmp_path, form):
    taskset_only = _stubs(tmp_path / "bin", "taskset")
    no_cpus = _wrapped({"SLURM_LOCALID": "0"}, [4242], ["echo", "ran"], form, taskset_only)
    assert no_cpus.returncode == 2 and no_cpus.stdout == ""
    assert no_cpus.stderr.startswith("hpcbundle-bind: NUMA node 4242 of GPU 0 lists no CPUs")
    neither = _wrapped({"SLURM_LOCALID": "0"}, [0], ["echo", "ran"], form, _stubs(tmp_path / "none"))
    assert neither.returncode == 2 and neither.stdout == ""
    assert neither.stderr.startswith("hpcbundle-bind: neither numactl nor taskset is installed")
    assert len(no_cpus.stderr.splitlines()) == len(neither.stderr.splitlines()) == 1


SHOW = 'echo "${CUDA_VISIBLE_DEVICES:-unset} $(grep Cpus_allowed_list /proc/self/status | cut -f2)"'
NO_NODE = 7  # a NUMA node this machine lacks: numactl refuses to bind to it


def test_bind_really_binds_the_rank_to_its_gpus_node_and_leaves_the_gpus_visible():
    """GPU 1 sits on node 0 (this machine's only node), GPU 0 on a node that does not exist: the rank
    runs only where the real numactl found GPU 1 for it, and sees the GPUs its launcher gave it."""
    env = {"SLURM_LOCALID": "0", "CUDA_VISIBLE_DEVICES": "1"}
    result = _wrapped(env, [NO_NODE, 0], ["sh", "-c", SHOW])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", NODE0_CPUS.read_text().strip()]
    other_gpu = _wrapped({**env, "CUDA_VISIBLE_DEVICES": "0"}, [NO_NODE, 0], ["echo", "ran"])
    assert other_gpu.returncode != 0 and "ran" not in other_gpu.stdout


@pytest.mark.parametrize("form", FORMS)
def test_bind_without_a_map_a_local_rank_or_a_gpu_for_it_stops_in_one_line(form):
    alone = _wrapped({}, [0, 0], ["true"], form)
    assert alone.returncode == 2 and alone.stderr.startswith("hpcbundle-bind: no local rank")
    beyond = _wrapped({"OMPI_COMM_WORLD_LOCAL_RANK": "2"}, [0, 0], ["true"], form)
    assert beyond.returncode == 2 and "local rank 2 has no GPU in the map (node.gpu_numa: 0,0" in beyond.stderr
    usage = subprocess.run([*FORMS[form], "0,0"], capture_output=True, text=True, timeout=30)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: hpcbundle-bind MAP PROGRAM")
    assert len(alone.stderr.splitlines()) == len(beyond.stderr.splitlines()) == len(usage.stderr.splitlines()) == 1


@pytest.mark.full_setup
def test_wrapper_binds_two_real_open_mpi_ranks_to_their_gpu_and_numa_node(tmp_path):
    """This machine has one NUMA node and no GPU: the run shows the binding numactl applied to each
    rank (node 0's CPUs and memory) and that both GPUs stay visible; what a GPU changes is not shown."""
    need_mpirun()
    assert shutil.which("numactl"), "numactl is missing: `make setup` installs it"
    site = write_site(
        tmp_path,
        "local",
        {"node": {"cores": 2, "gpus": 2, "gpu_model": "V100", "gpu_numa": [0, 0], "host_bind": True}},
        name="local-gpu-numa",
    )
    report = (
        'r=$OMPI_COMM_WORLD_RANK; { echo "rank $r local $OMPI_COMM_WORLD_LOCAL_RANK '
        'CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; '
        'grep -E "^Cpus_allowed_list|^Mems_allowed_list" /proc/self/status; numactl --show; } > "$0/rank-$r"'
    )
    # --no-doctor: the preflight rightly finds no GPU here (declared-gpus)
    launch = ["launch", "--site", str(site), "--np", "2", "--no-doctor", "--exec"]
    installed = tmp_path / "bin"  # hpcbundle-bind on the host, as `make install-bind` puts it
    installed.mkdir()
    (installed / BIND_NAME).symlink_to(BIND)
    env = {"PATH": f"{installed}:{os.environ['PATH']}"}
    result = hpcbundle(*launch, "--", "sh", "-c", report, str(tmp_path), env=env)
    assert result.returncode == 0, result.stderr
    cpus = NODE0_CPUS.read_text().strip()
    for rank in (0, 1):
        text = (tmp_path / f"rank-{rank}").read_text()
        print(text)
        assert f"rank {rank} local {rank} CUDA_VISIBLE_DEVICES=\n" in text
        assert f"Cpus_allowed_list:\t{cpus}\n" in text and "Mems_allowed_list:\t0\n" in text
        assert "policy: preferred\n" in text and "preferred node: 0\n" in text and "cpubind: 0 \n" in text


# --- nvidia-smi topo -m -> node.gpu_numa -------------------------------------------------------


@pytest.mark.parametrize(
    "name, nodes",
    [
        ("dgx-h100-vllm-13855.txt", (0, 0, 0, 0, 1, 1, 1, 1)),
        ("8x-rtx4090-go-gpuallocator-17.txt", (0, 0, 0, 0, 1, 1, 1, 1)),
        ("5x-gpu-club-3090-46.txt", (1, 0, 0, 0, 0)),
        ("a100-nccl-707.txt", (0, 0, 0, 0)),
        ("dgx2-v100-nccl-tests-78.txt", None),
    ],
)
def test_topo_parser_reads_each_gpus_numa_node_from_real_outputs(name, nodes):
    assert parse_topo(_topo(name)).nodes == nodes


def test_topo_parser_refuses_what_is_not_a_numa_node():
    text = _topo("5x-gpu-club-3090-46.txt").replace("1               N/A", "N/A             N/A", 1)
    assert parse_topo(text).why == "GPU0 has NUMA Affinity 'N/A', not a NUMA node number"
    assert parse_topo("no matrix here").nodes is None


def test_site_detect_drafts_the_map_from_topo_and_the_draft_loads():
    gpu = parse_gpus("NVIDIA H100 80GB HBM3, 580.159.04, 9.0, 81559 MiB\n" * 8)
    facts = observed(gpu=gpu, default_route="data0", gpu_topology=_topo("dgx-h100-vllm-13855.txt"))
    text = draft_site(facts, "h100", ["H100"])
    site = validate(Site, parse_yaml(text, "draft"), "draft")
    assert site.node.gpu_numa == [0, 0, 0, 0, 1, 1, 1, 1]
    old = draft_site(
        observed(gpu=gpu, default_route="data0", gpu_topology=_topo("dgx2-v100-nccl-tests-78.txt")), "v", []
    )
    assert "# gpu_numa: not drafted (this nvidia-smi prints no NUMA Affinity column" in old


def test_site_detect_drafts_the_map_from_sysfs_where_nvidia_smi_topo_has_no_numa_column():
    gpu = parse_gpus("Tesla V100-SXM2-32GB, 535.104.05, 7.0, 32768 MiB\n" * 16)
    topo = _topo("dgx2-v100-nccl-tests-78.txt")
    sysfs = {"nodes": [0] * 8 + [1] * 8, "note": ""}
    text = draft_site(observed(gpu=gpu, default_route="data0", gpu_topology=topo, gpu_numa=sysfs), "v", ["V100"])
    site = validate(Site, parse_yaml(text, "draft"), "draft")
    assert site.node.gpu_numa == [0] * 8 + [1] * 8
    assert "# sysfs numa_node of each GPU's PCI device; CONFIRM" in text
    unknown = {"nodes": [None] * 16, "note": ""}  # a VM: the kernel does not say
    text = draft_site(observed(gpu=gpu, default_route="data0", gpu_topology=topo, gpu_numa=unknown), "v", ["V100"])
    assert "# gpu_numa: not drafted (this nvidia-smi prints no NUMA Affinity column" in text


def test_site_detect_drafts_cores_and_threads_per_core_from_a_node_of_hardware_threads():
    threads = {"threads": 2, "evidence": "/sys/devices/system/cpu/cpu0/topology/thread_siblings_list"}
    text = draft_site(observed(default_route="data0", cpus=224, threads_per_core=threads), "dgx")
    site = validate(Site, parse_yaml(text, "draft"), "draft")
    assert (site.node.cores, site.node.threads_per_core, site.node.cpus_for(8)) == (112, 2, 28)
    assert "threads_per_core: 2  # /sys/devices/system/cpu/cpu0/topology/thread_siblings_list; CONFIRM" in text
    one = draft_site(observed(default_route="data0", cpus=16, threads_per_core={"threads": 1}), "one")
    assert "threads_per_core" not in one and "  cores: 16  # CPUs seen here" in one


@pytest.mark.parametrize(
    "siblings, lscpu, found",
    [
        ("0,112\n", None, {"threads": 2, "evidence": "SIBLINGS"}),
        ("4-7\n", None, {"threads": 4, "evidence": "SIBLINGS"}),
        (None, "Thread(s) per core:  2\nCore(s) per socket:  56\n", {"threads": 2, "evidence": "lscpu"}),
        (None, None, {"threads": None, "evidence": ""}),
    ],
)
def test_the_probe_counts_a_cores_threads_from_sysfs_else_lscpu(tmp_path, monkeypatch, siblings, lscpu, found):
    from hpcbundle.diagnose import probes

    path = tmp_path / "thread_siblings_list"
    if siblings is not None:
        path.write_text(siblings)
    monkeypatch.setattr(probes, "_out", lambda argv, timeout=10.0: lscpu if argv == ["lscpu"] else None)
    if found["evidence"] == "SIBLINGS":
        found = {**found, "evidence": str(path)}
    assert probes.threads_per_core(path) == found


# --- doctor: the map against the nodes ---------------------------------------------------------


def _gpu_numa_result(site: Site, nodes: dict[str, dict]) -> tuple[str, str]:
    facts = Facts(site=site, nodes=nodes, observed=True)
    (result,) = [r for r in evaluate(facts, knowledge_base()) if r.rule == "gpu-numa"]
    return result.status, result.evidence


def test_doctor_checks_the_map_against_each_nodes_sysfs():
    site = make_site(node={"cores": 8, "gpus": 2, "gpu_model": "A100", "gpu_numa": [0, 1]})
    assert _gpu_numa_result(site, {"n1": {"gpu_numa": {"nodes": [0, 1], "note": ""}}})[0] == "PASS"
    status, evidence = _gpu_numa_result(site, {"n1": {"gpu_numa": {"nodes": [1, 0], "note": ""}}})
    assert status == "FAIL" and "n1: the GPUs sit on NUMA nodes [1, 0]" in evidence


def test_doctor_skips_gpus_whose_numa_node_the_kernel_does_not_say_as_on_a_virtual_machine():
    """Seen on a lent H100 (a Firecracker VM): sysfs numa_node -1, while nvidia-smi topo -m, which
    site detect drafts from, says 0. Unknown is not wrong: the launch must not be refused for it."""
    site = make_site(node={"cores": 16, "gpus": 1, "gpu_model": "H100", "gpu_numa": [0]})
    status, evidence = _gpu_numa_result(site, {"vm": {"gpu_numa": {"nodes": [None], "note": ""}}})
    assert (status, evidence) == ("SKIP", "node.gpu_numa [0] not checked: the kernel does not say (numa_node -1) on vm")
    two = make_site(node={"cores": 8, "gpus": 2, "gpu_model": "A100", "gpu_numa": [0, 1]})
    assert _gpu_numa_result(two, {"n1": {"gpu_numa": {"nodes": [None, 1], "note": ""}}})[0] == "PASS"
    status, evidence = _gpu_numa_result(two, {"n1": {"gpu_numa": {"nodes": [None, 0], "note": ""}}})
    assert status == "FAIL" and "n1: the GPUs sit on NUMA nodes [?, 0]" in evidence


def test_doctor_skips_the_map_where_no_gpu_is_seen_as_on_this_machine():
    from hpcbundle.diagnose.probes import gpu_numa

    site = make_site(node={"cores": 8, "gpus": 2, "gpu_model": "A100", "gpu_numa": [0, 1]})
    status, evidence = _gpu_numa_result(site, {"here": {"gpu_numa": gpu_numa()}})
    assert status == "SKIP" and "not checked" in evidence
