"""`hpcbundle launch`: the seeds' exact command lines, a golden command per shipped site, every
launcher and runtime's syntax, one-line refusals, and real runs bounded in time."""

from __future__ import annotations

import re
import shlex
import shutil
import socket
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from hpcbundle.cli import main
from hpcbundle.config.sites import Site
from hpcbundle.diagnose.probes import numa_memory
from hpcbundle.launch import LAUNCHERS, RUNTIMES, RankLayout, build_command, load_site, parse_hosts

from .helpers import (
    GOLDEN,
    KNL_PROGRAM,
    ROOT,
    SHIPPED,
    SITES,
    WORKDIR,
    assert_golden,
    hpcbundle,
    make_site,
    need_mpirun,
    write_site,
)

# The seed's documented lines, program included (keras_mnist_advanced.py is the seed's, not shipped).
SEED_4 = (
    "mpirun -np 4 -H f1:2,f2:2 -x LD_LIBRARY_PATH -x PATH -x HOROVOD_MPI_THREADS_DISABLE=1 "
    "-x NCCL_SOCKET_IFNAME=^virbr0,lo -mca btl openib,self -mca pml ob1 "
    "singularity exec --nv horovod.sif python /examples/keras_mnist_advanced.py"
)
SEED_8 = (
    "mpirun -np 8 -H f1:2,f2:2,f3:2,f4:2  -x LD_LIBRARY_PATH -x PATH -x HOROVOD_MPI_THREADS_DISABLE=1 "
    "-x NCCL_SOCKET_IFNAME=^virbr0,lo -mca btl openib,self -mca pml ob1 "
    "singularity exec --nv horovod.sif python /examples/keras_mnist_advanced.py"
)
SEED_KNL = f"mpiexec.hydra -l -ppn 1 -n 2 taskset -c 0-64,68-132,136-200,204-268 numactl -p 1 {KNL_PROGRAM}"
IN_SLURM = {"SLURM_JOB_ID": "4242"}
IN_ALLOCATION = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "2"}  # srun lines: inside a 2-node salloc
NOT_IN_SLURM: dict[str, str | None] = {"SLURM_JOB_ID": None}

# One typical invocation per shipped site: (launch arguments, extra environment).
SITE_INVOCATIONS: dict[str, tuple[list[str], dict[str, str | None]]] = {
    "local": (["--np", "2", "--", "python3", "train.py"], NOT_IN_SLURM),
    "local-charliecloud": (
        ["--image", "/var/tmp/cpu-local", "--np", "2", "--", "python3", "/examples/pytorch_train.py"],
        NOT_IN_SLURM,
    ),
    "ib-v100": (
        ["--image", "horovod.sif", "--np", "4", "--hosts", "f1:2,f2:2", "--", "python", "/examples/keras_train.py"],
        NOT_IN_SLURM,
    ),
    "ib-a100-ucx": (
        [
            "--image",
            "horovod.sif",
            "--np",
            "8",
            "--hosts",
            "gpu01:4,gpu02:4",
            "--",
            "python",
            "/examples/pytorch_train.py",
        ],
        NOT_IN_SLURM,
    ),
    "stampede2-knl": (["--image", "horovod.sif", "--np", "2", "--", *KNL_PROGRAM.split()], IN_SLURM),
    "eth-a100-slurm": (
        ["--image", "horovod.sif", "--np", "8", "--", "python", "train.py", "--epochs", "5"],
        IN_ALLOCATION,
    ),
    "roce-h100-ompi5": (
        ["--image", "horovod.sif", "--np", "16", "--hosts", "gpu01:8,gpu02:8", "--", "python", "train.py"],
        NOT_IN_SLURM,
    ),
    "seed-v100": (
        ["--image", "horovod.sif", "--np", "4", "--hosts", "f1:2,f2:2", "--", "python", "/examples/keras_train.py"],
        NOT_IN_SLURM,
    ),
    "slurm-pyxis-h100": (
        ["--image", "/scratch/images/horovod-cuda13.sqsh", "--np", "16", "--", "python", "/examples/pytorch_train.py"],
        IN_ALLOCATION,
    ),
    "eth-cpu-elastic": (
        ["--image", "horovod.sif", "--np", "4", "--", "python", "/examples/pytorch_train.py"],
        IN_SLURM,
    ),
}


def launch(*args: str, env: dict[str, str | None] | None = None):
    """Run `hpcbundle launch ARGS` in-process, outside any SLURM allocation unless `env` says so."""
    return CliRunner().invoke(main, ["--bundle", str(ROOT), "launch", *args], env={**NOT_IN_SLURM, **(env or {})})


# --- the seeds ---------------------------------------------------------------------------------

# site_configs/seed-v100.yaml is the seed's own cluster as documented (Open MPI 3.1, whose openib btl
# needs no allow_ib); ib-v100 is the recommended site for it, with the fixes its WARNs ask for.
SEED_ARGS = ["--image", "horovod.sif", "--", "python", "/examples/keras_mnist_advanced.py"]


@pytest.mark.parametrize("hosts, np_, seed", [("f1:2,f2:2", "4", SEED_4), ("f1:2,f2:2,f3:2,f4:2", "8", SEED_8)])
def test_seed_site_prints_the_seeds_singularity_command_exactly_with_its_warnings(hosts, np_, seed):
    result = launch("--site", "seed-v100", "--np", np_, "--hosts", hosts, *SEED_ARGS)
    assert result.exit_code == 0, result.output
    assert shlex.split(result.stdout) == _with_threads(shlex.split(seed), "20")
    warned = [line.split()[1] for line in result.stderr.splitlines() if line.startswith("WARN")]
    assert warned == ["btl-shared-memory", "nccl-socket-exclusion", "oob-interfaces"]


def _with_threads(argv: list[str], threads: str) -> list[str]:
    """The seed's argv plus the OpenMP threads per rank every line carries (node.cores over the ranks per node)."""
    at = argv.index("singularity")
    return [*argv[:at], "-x", f"OMP_NUM_THREADS={threads}", *argv[at:]]


def test_recommended_ib_v100_follows_horovods_advice_tcp_for_mpi_on_ib0_nccl_on_ib_without_warnings():
    result = launch("--site", "ib-v100", "--np", "4", "--hosts", "f1:2,f2:2", *SEED_ARGS)
    assert result.exit_code == 0, result.output
    seed_argv = shlex.split(SEED_4)
    at = seed_argv.index("singularity")
    assert shlex.split(result.stdout) == [
        *seed_argv[:5],
        *("-bind-to", "none", "-map-by", "slot", "-x", "LD_LIBRARY_PATH", "-x", "PATH", "-x", "HOROVOD_CYCLE_TIME=0.1"),
        *("-mca", "btl", "self,vader,tcp", "-mca", "pml", "ob1", "-x", "OMP_NUM_THREADS=20"),
        *("-mca", "btl_tcp_if_include", "ib0", "-mca", "oob_tcp_if_include", "ib0"),
        *("-x", "NCCL_SOCKET_IFNAME=ib0", "-x", "NCCL_NET=IB"),
        *seed_argv[at:],
    ]
    assert "WARN" not in result.stderr


def test_knl_site_reproduces_the_seeds_hydra_line_with_64_cores_for_64_threads_and_psm2_named():
    result = launch("--site", "stampede2-knl", "--np", "2", "--", *KNL_PROGRAM.split(), env=IN_SLURM)
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.stdout)
    assert argv[: argv.index("mpiexec.hydra")] == [
        "env",
        "TF_NUM_INTRAOP_THREADS=64",
        "TF_NUM_INTEROP_THREADS=3",
        "FI_PROVIDER=psm2",
    ]
    # The seed's mask 0-64 covers 65 cores for 64 intra-op threads; the site pins cores 0-63.
    seed = shlex.split(SEED_KNL.replace("0-64,68-132,136-200,204-268", "0-63,68-131,136-199,204-267"))
    assert argv[argv.index("mpiexec.hydra") :] == seed
    assert "WARN" not in result.stderr


def test_knl_image_goes_between_the_per_rank_wrappers_and_the_program_and_explain_says_why():
    result = launch(
        "--site",
        "stampede2-knl",
        "--image",
        "horovod.sif",
        "--np",
        "2",
        "--explain",
        "--",
        "python",
        "x.py",
        env=IN_SLURM,
    )
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.stdout.splitlines()[0])
    assert argv[argv.index("numactl") :] == [
        "numactl",
        "-p",
        "1",
        "singularity",
        "exec",
        "horovod.sif",
        "python",
        "x.py",
    ]
    wrapper_lines = [line for line in result.stdout.splitlines() if line.startswith(("taskset", "numactl"))]
    assert len(wrapper_lines) == 2 and all(
        "inherited through exec into the container" in line for line in wrapper_lines
    )


def test_explain_names_the_site_key_and_why_of_each_token():
    result = launch(
        "--site",
        "ib-v100",
        "--image",
        "horovod.sif",
        "--np",
        "4",
        "--hosts",
        "f1:2,f2:2",
        "--explain",
        "--",
        "python",
        "t.py",
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("mpirun -np 4")
    assert any(
        line.startswith("-x NCCL_SOCKET_IFNAME=ib0 ")
        and line.endswith(
            "<- site ib-v100 env.NCCL_SOCKET_IFNAME, derived from network.interfaces: "
            "the interfaces NCCL's bootstrap and socket transport may use; IPoIB (ib0) for MPI's TCP, mpirun's "
            "daemons (oob) and NCCL's bootstrap, never a libvirt or Docker bridge (the same address on every node)"
        )
        for line in lines
    )
    assert any(line.startswith("--nv") and "container.gpu" in line for line in lines)
    assert any(line.startswith("-np 4") and "flag --np" in line for line in lines)


# --- golden command per shipped site ----------------------------------------------------------


def test_every_shipped_site_has_a_golden_invocation():
    assert sorted(SITE_INVOCATIONS) == SHIPPED


@pytest.mark.parametrize("site", SHIPPED)
def test_golden_launch_command_and_explanation(site, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an elastic site writes its discovery script here
    args, env = SITE_INVOCATIONS[site]
    result = launch("--site", site, "--explain", "--workdir", WORKDIR, *args, env=env)
    assert result.exit_code == 0, result.output
    assert_golden(GOLDEN / "launch" / f"{site}.txt", result.stdout)


def test_local_is_the_default_site():
    assert (
        launch("--np", "2", "--", "python3", "t.py").stdout
        == launch("--site", "local", "--np", "2", "--", "python3", "t.py").stdout
    )


# --- each launcher and runtime speaks its own syntax ------------------------------------------


def _argv(
    site_path: Path, layout: RankLayout, image: str | None = None, program: tuple[str, ...] = ("python", "t.py")
) -> list[str]:
    return build_command(load_site(str(site_path), SITES), layout, program, image).argv


def test_open_mpi_5_uses_double_dashes_merges_oversubscribe_and_routes_prrte_parameters(tmp_path):
    site = write_site(
        tmp_path, "roce-h100-ompi5", {"launcher": {"oversubscribe": True, "tag_output": True}}, name="ompi5"
    )
    argv = _argv(site, RankLayout(4, (("a", 2), ("b", 2))), "img.sif")
    assert argv[:8] == ["mpirun", "--output", "tag", "-n", "4", "--host", "a:2,b:2", "--bind-to"]
    assert ["--map-by", "slot:oversubscribe"] == argv[9:11]
    assert not any(token.startswith("-bind") or token == "-mca" for token in argv)
    assert argv[argv.index("--prtemca") :][:3] == ["--prtemca", "oob_tcp_if_include", "eth0"]


def test_open_mpi_4_mpirun_takes_double_dash_options_by_default(tmp_path):
    argv = _argv(write_site(tmp_path, "local", {"mca": {"btl": "self,tcp"}}, name="ompi4"), RankLayout(2))
    assert argv[argv.index("--mca") :][:3] == ["--mca", "btl", "self,tcp"]
    assert "--bind-to" in argv and "-bind-to" not in argv


def test_horovodrun_takes_hosts_gloo_and_interfaces_and_gets_variables_in_front(tmp_path):
    site = write_site(
        tmp_path,
        "local",
        {
            "launcher": {"name": "horovodrun", "gloo": True},
            "env": {"NCCL_DEBUG": "INFO"},
            "network": {"fabric": "ethernet", "interfaces": ["eth0", "eth1"]},
        },
        name="hvd",
    )
    data = yaml.safe_load(site.read_text())
    for key in ("allow_run_as_root", "oversubscribe", "bind_to", "map_by", "timeout"):
        data["launcher"].pop(key, None)
    data["why"].pop("launcher.oversubscribe")  # explains a key this variant no longer sets
    site.write_text(yaml.safe_dump(data))
    argv = _argv(site, RankLayout(4, (("f1", 2), ("f2", 2))))
    assert argv == [
        "env",
        "NCCL_DEBUG=INFO",
        "OMP_NUM_THREADS=1",
        "horovodrun",
        "-np",
        "4",
        "-H",
        "f1:2,f2:2",
        "--gloo",
        "--network-interface",
        "eth0,eth1",
        "python",
        "t.py",
    ]


def test_srun_sets_mca_as_ompi_variables_and_labels_output(tmp_path):
    site = write_site(
        tmp_path, "eth-a100-slurm", {"launcher": {"tag_output": True}, "node": {"ranks_per_node": 4}}, name="srun-site"
    )
    argv = _argv(site, RankLayout(8), "img.sif")
    assert "OMPI_MCA_btl_vader_single_copy_mechanism=none" in argv[: argv.index("srun")]
    assert argv[argv.index("srun") : argv.index("apptainer")] == [
        "srun",
        "--mpi=pmix",
        "-n",
        "8",
        "--kill-on-bad-exit=1",
        "-c",
        "16",
        "--ntasks-per-node=4",
        "--distribution=block:block",
        "--label",
        "--export=ALL",
    ]


def test_docker_holds_the_launcher_and_wrappers_inside_one_container(tmp_path):
    site = write_site(
        tmp_path,
        "local",
        {"container": {"runtime": "docker", "binds": ["/data"]}, "export": ["HOME"], "wrappers": [["numactl", "-l"]]},
        name="dock",
    )
    argv = _argv(site, RankLayout(2), "local/horovod:cpu")
    assert argv[: argv.index("mpirun")] == [
        "docker",
        "run",
        "--rm",
        "--init",
        "--network=host",
        "--ipc=host",
        "-v",
        "/data:/data",
        "-e",
        "HOME",
        "local/horovod:cpu",
    ]
    assert argv[-4:] == ["numactl", "-l", "python", "t.py"]


def test_podman_is_docker_with_its_own_command(tmp_path):
    site = write_site(
        tmp_path, "local", {"container": {"runtime": "podman", "args": ["--ulimit", "nofile=20000:20000"]}}, name="pod"
    )
    argv = _argv(site, RankLayout(2), "img")
    assert argv[0] == "podman" and argv[argv.index("img") - 2 : argv.index("img")] == ["--ulimit", "nofile=20000:20000"]


def test_charliecloud_ends_its_options_with_double_dash_before_the_program():
    argv = _argv(SITES / "local-charliecloud.yaml", RankLayout(2), "/var/tmp/img", ("python3", "-c", "print(1)"))
    assert argv[argv.index("ch-run") :] == ["ch-run", "--set-env", "/var/tmp/img", "--", "python3", "-c", "print(1)"]
    assert argv[argv.index("--mca") :][:3] == ["--mca", "btl_vader_single_copy_mechanism", "none"]


def test_launcher_command_override_replaces_the_executable(tmp_path):
    site = write_site(tmp_path, "roce-h100-ompi5", {"launcher": {"command": "prterun"}}, name="prte")
    assert _argv(site, RankLayout(8), "i.sif")[0] == "prterun"


def test_registries_hold_every_launcher_and_runtime_the_design_names():
    assert {"mpirun", "mpirun5", "mpiexec.hydra", "srun", "horovodrun"} <= set(LAUNCHERS.names())
    assert {"singularity", "apptainer", "charliecloud", "docker", "podman", "none"} <= set(RUNTIMES.names())


# --- refusals: one line, exit 2 ----------------------------------------------------------------


@pytest.mark.parametrize(
    "args, env, message",
    [
        (
            ["--site", "ib-v100", "--image", "h.sif", "--np", "8", "--hosts", "f1:2,f2:2"],
            NOT_IN_SLURM,
            "--np 8: larger than the 4 slots of --hosts f1:2,f2:2",
        ),
        (
            ["--site", "ib-v100", "--image", "h.sif", "--np", "4"],
            NOT_IN_SLURM,
            "--np 4: needs more than one ib-v100 node (2 ranks each) but no hosts were given",
        ),
        (
            ["--site", "local", "--image", "h.sif", "--np", "2"],
            NOT_IN_SLURM,
            "--image: site local runs programs on the host (container.runtime: none)",
        ),
        (
            ["--site", "eth-a100-slurm", "--image", "h.sif", "--np", "4", "--hosts", "a:2,b:2"],
            NOT_IN_SLURM,
            "--hosts: srun places the ranks on the nodes SLURM allocated",
        ),
        (
            ["--site", "ib-v100", "--np", "4", "--hosts", "f1:two"],
            NOT_IN_SLURM,
            "--hosts: 'f1:two' is not HOST or HOST:SLOTS",
        ),
        (["--site", "ib-vl00", "--np", "2"], NOT_IN_SLURM, "ib-vl00: no such site (did you mean ib-v100?)"),
        (["--np", "2", "--", "--help"], NOT_IN_SLURM, "PROGRAM: '--help' starts with '-'"),
    ],
)
def test_impossible_launch_is_refused_in_one_line(args, env, message):
    if "--" not in args:
        args = [*args, "--", "python", "t.py"]
    result = launch(*args, env=env)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


@pytest.mark.parametrize(
    "site, np_, per_node, key",
    [
        ("ib-a100-ucx", 16, 4, "node.gpus"),  # mpirun would fill a node's slots: 8 ranks on 4 GPUs
        ("roce-h100-ompi5", 32, 8, "node.gpus"),  # Open MPI 5's mpirun, the same
        ("ib-v100", 8, 2, "node.gpus"),
        ("stampede2-knl", 8, 1, "node.ranks_per_node"),  # hydra's -ppn 1 wraps round: 4 ranks on each node's mask
        ("eth-a100-slurm", 16, 4, "node.gpus"),  # srun
    ],
)
def test_every_launcher_placing_ranks_on_the_allocation_is_bounded_by_its_nodes(site, np_, per_node, key, tmp_path):
    """Inside a 2-node allocation, with no --hosts, every launcher takes SLURM's nodes: more ranks than 2 nodes x
    the site's ranks per node are refused in one line, exit 2, nothing printed or written."""
    args = ["--site", site, "--image", "/shared/h.sqsh", "--np", str(np_), "--", "touch", str(tmp_path / "ran")]
    result = launch(*args, env=IN_ALLOCATION)
    assert result.exit_code == 2 and result.stdout == "" and list(tmp_path.iterdir()) == []
    assert result.stderr == (
        f"hpcbundle: error: --np {np_}: more than the 2 nodes x {per_node} ranks per node ({key}) of this SLURM job "
        f"(give --np {2 * per_node} or less, or ask SLURM for more nodes)\n"
    )
    fits = launch(*args[:5], str(2 * per_node), *args[6:], env=IN_ALLOCATION)
    assert fits.exit_code == 0, fits.output


@pytest.mark.parametrize(
    "allocation, cpus, source",
    [
        ({"SLURM_JOB_CPUS_PER_NODE": "48(x2)"}, "12", "SLURM_JOB_CPUS_PER_NODE 48 / 4 ranks"),
        ({"SLURM_JOB_CPUS_PER_NODE": "48(x2)", "SLURM_CPUS_PER_TASK": "6"}, "6", "SLURM_CPUS_PER_TASK"),
        ({}, "16", "node.cores 64 / 4 ranks"),  # the allocation does not say: the site's node
    ],
)
def test_srun_inside_an_allocation_takes_each_ranks_cpus_from_it(allocation, cpus, source):
    """A non-exclusive allocation holds fewer CPUs than the site's node: srun -c and OMP_NUM_THREADS follow it
    (srun refuses a step asking more: "More processors requested than permitted")."""
    env = {**IN_ALLOCATION, "SLURM_CPUS_PER_TASK": None, "SLURM_JOB_CPUS_PER_NODE": None, **allocation}
    result = launch("--site", "eth-a100-slurm", "--image", "h.sif", "--np", "8", "--explain", "--", "t", env=env)
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.stdout.splitlines()[0])
    assert argv[argv.index("-c") + 1] == cpus and f"OMP_NUM_THREADS={cpus}" in argv
    assert re.search(rf"^-c {cpus} +<- {source}", result.stdout, re.M), result.stdout


def test_hosts_take_slurm_host_lists_with_slots_for_each_of_their_hosts():
    assert parse_hosts("n[01-03]:2,gpu[1,3],login") == (
        ("n01", 2),
        ("n02", 2),
        ("n03", 2),
        ("gpu1", 1),
        ("gpu3", 1),
        ("login", 1),
    )
    assert parse_hosts("f1:2, f1:2") == (("f1", 2), ("f1", 2))  # plain lists as before: order and repeats kept


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        ("n[1-4097]", "--hosts: 'n[1-4097]' names 4097 hosts (give at most 4096 hosts (or a hostfile))"),
        ("r[1-64]n[1-65]", "names 4160 hosts"),
        ("n[1-" + "9" * 3000 + "]", "is not HOST or HOST:SLOTS"),
        ("n[1-1234567]", "'[1-1234567]' is not a range list (write ranges like [01-04,07] (up to 6 digits))"),
        ("@gpus", "'@gpus' is not HOST or HOST:SLOTS"),
        ("n[4-1]", "--hosts: 'n[4-1]': "),
    ],
)
def test_host_lists_past_the_bound_or_malformed_are_one_line_errors(hosts, message):
    result = CliRunner().invoke(main, ["launch", "--site", "ib-v100", "--np", "2", "--hosts", hosts, "--", "python"])
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_hosts_are_not_required_inside_a_slurm_allocation():
    assert (
        launch("--site", "ib-v100", "--image", "h.sif", "--np", "4", "--", "python", "t.py", env=IN_SLURM).exit_code
        == 0
    )


def test_np_larger_than_hostfile_slots_is_refused(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("f1 slots=2\n# spare node\nf2 slots=2\n")
    ok = launch(
        "--site", "ib-v100", "--image", "h.sif", "--np", "4", "--hostfile", str(hostfile), "--", "python", "t.py"
    )
    assert ok.exit_code == 0 and f"--hostfile {hostfile}" in ok.stdout
    bad = launch(
        "--site", "ib-v100", "--image", "h.sif", "--np", "5", "--hostfile", str(hostfile), "--", "python", "t.py"
    )
    assert bad.exit_code == 2 and "larger than the 4 slots" in bad.stderr


# --- real runs on this machine ----------------------------------------------------------------


@pytest.mark.full_setup
def test_local_exec_runs_two_real_ranks_that_each_know_their_rank(tmp_path):
    need_mpirun()
    # Each rank writes a file: Open MPI 4.1's output forwarding can drop the stdout of a rank that exits
    # right after printing (seen twice here, both on a loaded machine), which says nothing about the launch.
    program = (
        "import os, sys; r, n = os.environ['OMPI_COMM_WORLD_RANK'], os.environ['OMPI_COMM_WORLD_SIZE']; "
        "open(os.path.join(sys.argv[1], f'rank-{r}-of-{n}'), 'w').close()"
    )
    result = hpcbundle(
        "launch", "--site", "local", "--np", "2", "--exec", "--", "python3", "-c", program, str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank-0-of-2", "rank-1-of-2"]
    note, launched = result.stderr.splitlines()[:2]
    assert note.startswith("hpcbundle: note: site local sets no faults.stall_seconds: a lost link")
    assert launched.startswith("+ mpirun --allow-run-as-root -np 2")


@pytest.mark.full_setup
def test_exec_passes_on_the_programs_exit_status():
    need_mpirun()
    result = hpcbundle("launch", "--np", "2", "--exec", "--", "python3", "-c", "import sys; sys.exit(3)")
    assert result.returncode == 3, result.stderr


@pytest.mark.full_setup
def test_exec_warns_when_the_job_was_silent_for_more_than_half_its_stall_bound(tmp_path):
    """A job that finished but went 3 s without a line under a 4 s stall bound: one more slow epoch
    would have been ended as a stall, so the launch says so (and keeps the job's exit status)."""
    need_mpirun()
    site = write_site(tmp_path, "local", {"faults": {"stall_seconds": 4}}, name="quiet")
    program = "import time; print('epoch 1', flush=True); time.sleep(3); print('epoch 2', flush=True)"
    result = hpcbundle("launch", "--site", str(site), "--np", "1", "--exec", "--", "python3", "-c", program)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("epoch 2") == 1
    warning = re.search(
        r"warning: the job was silent for up to ([\d.]+) s, more than half of faults.stall_seconds "
        r"\(4 s\) of site quiet",
        result.stderr,
    )
    assert warning and 2.5 < float(warning[1]) < 4, result.stderr


@pytest.mark.full_setup
def test_exec_kills_a_hanging_job_at_the_time_bound_and_names_the_likely_cause(tmp_path):
    need_mpirun()
    pids = tmp_path / "pids"
    program = f"import os, time; open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n'); time.sleep(600)"
    started = time.monotonic()
    result = hpcbundle("launch", "--np", "2", "--timeout", "5", "--exec", "--", "python3", "-c", program, timeout=60)
    assert time.monotonic() - started < 40
    assert result.returncode == 124
    assert "killed after 5 s (--timeout)" in result.stderr and "wrong network interface" in result.stderr
    ranks = [int(pid) for pid in pids.read_text().split()]
    assert len(ranks) == 2
    for pid in ranks:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


@pytest.mark.full_setup  # launch --exec's doctor first looks for the host's mpirun (Open MPI)
def test_exec_of_a_missing_launcher_is_a_one_line_error(tmp_path):
    write_site(tmp_path, "local", {"launcher": {"command": "no-such-mpirun-here"}}, name="nompi")
    result = hpcbundle("launch", "--site", str(tmp_path / "nompi.yaml"), "--np", "2", "--exec", "--", "python3", "-V")
    assert result.returncode == 2
    assert "no-such-mpirun-here: not found on PATH" in result.stderr and "Traceback" not in result.stderr


def test_more_ranks_than_the_nodes_gpus_is_refused_before_anything_starts(tmp_path):
    """Two ranks on a one-GPU node: NCCL would fail in ncclCommInitRank; the declared layout is refused
    first, in one line naming the site, the flag and the fix, exit 2."""
    site = write_site(
        tmp_path, "local", {"node": {"cores": 2, "gpus": 1, "gpu_model": "H100", "driver": "580.159.04"}}, name="gpu1"
    )
    marker = tmp_path / "started"
    res = hpcbundle("launch", "--site", str(site), "--np", "2", "--exec", "--", "touch", str(marker))
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.splitlines() == [res.stderr.strip()]
    assert "hpcbundle: error: --np 2: 2 ranks on " in res.stderr and "but site gpu1 nodes have 1 GPUs" in res.stderr
    assert "at most 1 ranks per node, one per GPU" in res.stderr and not marker.exists()


@pytest.mark.parametrize("wiring", ["--horovod", "--torch", "--torchrun"])
def test_two_slots_on_a_one_gpu_node_are_refused_before_anything_starts(tmp_path, wiring):
    """The GPU lanes' case (tests/test_gpu_device.py, tests/test_gpu_torch.py) on a CPU host: a site declaring one
    GPU, --hosts THIS:2. Rule ranks-per-node refuses it on load, before the doctor probes a GPU, so the line is the
    same here; one node is no torch job over several nodes (torch-interface: the drafted site has no interface)."""
    site = write_site(
        tmp_path,
        "local",
        {"node": {"cores": 16, "gpus": 1, "gpu_model": "H200", "driver": "580.159.04"}, "network": {"interfaces": []}},
        name="gpunode",
    )
    marker, host = tmp_path / "started", socket.gethostname()
    script = tmp_path / "touch.py"
    script.write_text(f"open({str(marker)!r}, 'w')\n")
    res = hpcbundle(
        "launch", "--site", str(site), wiring, "--np", "2", "--hosts", f"{host}:2", "--exec", "--",
        sys.executable, str(script),
    )  # fmt: skip
    assert (res.returncode, res.stdout) == (2, ""), res.stdout + res.stderr
    assert res.stderr == (
        f"hpcbundle: error: --hosts {host}:2: 2 ranks on {host} but site gpunode nodes have 1 GPUs: "
        'NCCL refuses two ranks on one GPU (invalid usage: "Duplicate GPU detected") '
        "(give at most 1 ranks per node, one per GPU)\n"
    )
    assert not marker.exists()


def test_more_ranks_per_node_than_the_sites_gpus_is_refused_in_one_line_and_fewer_warn():
    refused = launch("--site", "ib-v100", "--np", "6", "--hosts", "f1:3,f2:3", "--", "python", "t.py")
    assert refused.exit_code == 2 and refused.stdout == ""
    assert refused.stderr == (
        "hpcbundle: error: --hosts f1:3,f2:3: 3 ranks on f1, 3 ranks on f2 but site ib-v100 nodes have 2 GPUs: "
        'NCCL refuses two ranks on one GPU (invalid usage: "Duplicate GPU detected") '
        "(give at most 2 ranks per node, one per GPU)\n"
    )
    fewer = launch("--site", "ib-v100", "--np", "2", "--hosts", "f1:1,f2:1", "--", "python", "t.py")
    assert fewer.exit_code == 0 and fewer.stdout.startswith("mpirun -np 2")
    assert "WARN  ranks-per-node       1 ranks on f1, 1 ranks on f2 but site ib-v100 nodes have 2 GPUs" in fewer.stderr


@pytest.mark.full_setup
def test_numactl_for_a_numa_node_without_memory_is_refused_before_the_launch_where_numactl_would_fail(tmp_path):
    """The numa-memory rule on this node's real /sys/devices/system/node: the first node number it lacks is refused
    before anything starts; launched anyway (--no-doctor), numactl itself fails; node 0 runs."""
    need_mpirun()
    if shutil.which("numactl") is None:
        pytest.fail("numactl is not installed: `make setup` installs it (apt-get install numactl)", pytrace=False)
    absent = str(max(int(n) for n in numa_memory()) + 1)
    marker = tmp_path / "started"
    program = ["--np", "1", "--exec", "--", "touch", str(marker)]
    bad = write_site(tmp_path, "local", {"wrappers": [["numactl", "-p", absent]]}, name="numa-absent")
    refused = hpcbundle("launch", "--site", str(bad), *program)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert (
        "FAIL  numa-memory" in refused.stderr and f"asks for NUMA node {absent}, but only node(s) 0" in refused.stderr
    )
    assert "nothing was started" in refused.stderr and not marker.exists()
    anyway = hpcbundle("launch", "--site", str(bad), "--no-doctor", *program)
    assert anyway.returncode != 0 and "out of range" in anyway.stdout + anyway.stderr and not marker.exists()
    good = write_site(tmp_path, "local", {"wrappers": [["numactl", "-p", "0"]]}, name="numa-zero")
    ran = hpcbundle("launch", "--site", str(good), *program)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert marker.exists()


@pytest.mark.parametrize(
    ("image", "message"),
    [
        ("/scratch/horovod.sif", "--image: '/scratch/horovod.sif' is an Apptainer image, which enroot cannot run"),
        ("horovod.sif", "(convert it (enroot import -o horovod.sqsh dockerd://IMAGE) or use an apptainer/singularity"),
        (
            "horovod.sqsh",
            "is a relative squashfs path, which enroot reads as a Docker Hub image name (give the absolute",
        ),
        (
            "nvcr.io/nvidia/pytorch:24.05-py3",
            "names the registry nvcr.io without '#', so enroot looks for it on Docker Hub "
            "(write nvcr.io#nvidia/pytorch:24.05-py3)",
        ),
        ("localhost:5000/team/h:1", "(write localhost:5000#team/h:1)"),
        ("/scratch/$USER/h.sqsh", "is not a squashfs image path"),
        ("registry.example.org#team/horovod:cuda13;id", "is not an enroot image reference"),
        ("docker://registry.example.org/team/horovod", "is not an enroot image reference"),
    ],
)
def test_pyxis_takes_only_a_squashfs_path_or_an_enroot_reference(image, message):
    result = CliRunner().invoke(
        main,
        ["launch", "--site", "slurm-pyxis-h100", "--image", image, "--np", "8", "--", "python", "t.py"],
        env=IN_SLURM,
    )
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_the_docs_ddp_launch_line_prints_the_sites_command_for_torch_ranks_as_written():
    """DDP from the same site file: docs/performance.md's line, as written, gives the site's mpirun line with every
    rank under the torch shim and the program untouched; the printed head is a name, which one WARN says."""
    page = (ROOT / "docs" / "performance.md").read_text().replace("\\\n", " ")
    (line,) = [x for x in page.splitlines() if x.startswith("hpcbundle launch") and "--ddp env://" in x]
    words = shlex.split(line)
    result = hpcbundle(*words[1:])
    assert result.returncode == 0 and result.stderr.startswith("WARN  torch-head-by-name"), result.stderr
    argv = shlex.split(result.stdout)
    assert argv[:5] == ["mpirun", "-np", "4", "-H", "n1:2,n2:2"] and "MASTER_ADDR=n1" in argv
    assert argv[-7:] == [
        "horovod.sif", "hpcbundle-torchenv", "ompi", "python", "/examples/pytorch_synthetic_benchmark.py", "--ddp",
        "env://",
    ]  # fmt: skip


# --- NCCL that fails loud, pyxis mounts -------------------------------------------------------


def _allocation_argv(site: Site, image: str) -> list[str]:
    """The 8-rank line of `site` inside a SLURM allocation."""
    return build_command(site, RankLayout(8, in_allocation=True), ["python", "t.py"], image).argv


def test_infiniband_gpu_sites_get_ncclnet_ib_unless_they_opt_out_or_disable_ncclib():
    pyxis = "slurm-pyxis-h100"
    assert "NCCL_NET=IB" in _allocation_argv(make_site(pyxis), image="/s/h.sqsh")
    assert not [
        w
        for w in _allocation_argv(make_site(pyxis, {"network": {"nccl_require_ib": False}}), image="/s/h.sqsh")
        if "NCCL_NET" in w
    ]
    disabled = _allocation_argv(make_site(pyxis, {"env": {"NCCL_IB_DISABLE": "1"}}), image="/s/h.sqsh")
    assert not [w for w in disabled if w.startswith("NCCL_NET")]
    own = _allocation_argv(make_site(pyxis, {"env": {"NCCL_NET": "Socket"}}), image="/s/h.sqsh")
    assert [w for w in own if w.startswith("NCCL_NET=")] == ["NCCL_NET=Socket"]


def test_pyxis_keeps_home_out_and_mounts_the_spool_only_with_its_site_key():
    plain = _allocation_argv(make_site("slurm-pyxis-h100"), image="/s/h.sqsh")
    assert "--no-container-mount-home" in plain and "--container-mounts=/scratch:/scratch" in plain
    keyed = make_site(
        "slurm-pyxis-h100",
        {"container": {"pmix_spool_mount": True, "mount_home": True}, "slurm": {"spool_dir": "/var/lib/slurm/spool"}},
    )
    argv = _allocation_argv(keyed, image="/s/h.sqsh")
    assert [w for w in argv if w.startswith("--container-mounts")] == [
        "--container-mounts=/scratch:/scratch,/var/lib/slurm/spool:/var/lib/slurm/spool"
    ]
    assert "--container-mount-home" in argv and "--no-container-mount-home" not in argv


@pytest.mark.parametrize(
    ("base", "carried"), [("local", "-x PYTHONUNBUFFERED=1"), ("slurm-pyxis-h100", "--container-env=")]
)
def test_a_site_with_a_stall_bound_runs_its_ranks_unbuffered_through_the_launchers_env(tmp_path, base, carried):
    site = write_site(tmp_path, base, {"faults": {"stall_seconds": 120}}, name="watched")
    image = ["--image", "/shared/horovod.sqsh"] if base == "slurm-pyxis-h100" else []
    inside = IN_SLURM if base == "slurm-pyxis-h100" else {}
    result = hpcbundle(
        "launch", "--site", str(site), "--np", "4", *image, "--explain", "--", "python3", "t.py", env=inside
    )
    assert result.returncode == 0, result.stderr
    line = result.stdout.splitlines()[0]
    assert carried in line and "PYTHONUNBUFFERED=1" in line
    if base == "slurm-pyxis-h100":
        assert "PYTHONUNBUFFERED" in next(word for word in line.split() if word.startswith("--container-env="))
    assert "faults.stall_seconds" in result.stdout and "the stall watchdog" in result.stdout
    unwatched = hpcbundle("launch", "--site", base, "--np", "4", *image, "--", "python3", "t.py", env=inside)
    assert "PYTHONUNBUFFERED" not in unwatched.stdout
