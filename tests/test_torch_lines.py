"""The --torch wiring's lines, exactly: the site's launcher starts the ranks, each runs the program under
hpcbundle-torchenv (the launcher's own rank variables), with MASTER_ADDR, MASTER_PORT and GLOO_SOCKET_IFNAME
set beside the NCCL settings; a batch script finds the head's address on its first node."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml
from click.testing import CliRunner

from hpcbundle.cli import main
from hpcbundle.knowledge.torchenv import torchenv_words

from .helpers import GOLDEN, ROOT, SHIPPED, WORKDIR, assert_golden, bash_argv
from .test_batch import SITE_JOBS
from .test_launch import SITE_INVOCATIONS

NOT_IN_SLURM = {"SLURM_JOB_ID": None, "SLURM_JOB_NUM_NODES": None}
PROGRAM = ["--", "python", "train.py"]


def hpcbundle(*args: str):
    return CliRunner().invoke(main, ["--bundle", str(ROOT), *args], env=NOT_IN_SLURM)


def launched(*args: str) -> list[str]:
    """The argv `launch --torch` prints, the shim shown as SHIM: by its name in an image built here, its text
    inline (`sh -c TEXT hpcbundle-torchenv`) for ranks on the host."""
    result = hpcbundle("launch", "--torch", *args, *PROGRAM)
    assert result.exit_code in (0, 1), result.output
    words = bash_argv(f"printf '%s\\0' {result.stdout}")  # the printed line, parsed as bash parses it
    at = words.index("hpcbundle-torchenv")
    inline = words[at - 3 : at] == torchenv_words("ompi", inline=True)[:3]
    assert inline == ("--image" not in args), words[at - 3 : at]
    return words[: at - 3 if inline else at] + ["SHIM"] + words[at + 1 :]


def test_open_mpi_over_ssh_gives_every_rank_the_head_gloo_interface_and_the_shim_inside_the_container():
    assert launched("--site", "ib-v100", "--image", "h.sif", "--np", "4", "--hosts", "f1:2,f2:2") == [
        "mpirun", "-np", "4", "-H", "f1:2,f2:2", "-bind-to", "none", "-map-by", "slot",
        "-x", "LD_LIBRARY_PATH", "-x", "PATH", "-x", "HOROVOD_CYCLE_TIME=0.1", "-mca", "btl", "self,vader,tcp",
        "-mca", "pml", "ob1", "-x", "OMP_NUM_THREADS=20", "-mca", "btl_tcp_if_include", "ib0",
        "-mca", "oob_tcp_if_include", "ib0", "-x", "NCCL_SOCKET_IFNAME=ib0", "-x", "NCCL_NET=IB",
        "-x", "GLOO_SOCKET_IFNAME=ib0", "-x", "MASTER_ADDR=f1", "-x", "MASTER_PORT=29500",
        "singularity", "exec", "--nv", "h.sif", "SHIM", "ompi", "python", "train.py",
    ]  # fmt: skip


def test_every_rank_on_this_node_meets_at_127_0_0_1():
    assert launched("--np", "2") == [
        "mpirun", "--allow-run-as-root", "-np", "2", "--oversubscribe", "--bind-to", "none", "--map-by", "slot",
        "-x", "OMP_NUM_THREADS=1", "-x", "MASTER_ADDR=127.0.0.1", "-x", "MASTER_PORT=29500",
        "SHIM", "ompi", "python", "train.py",
    ]  # fmt: skip


def test_hydra_sets_the_torch_variables_in_front_and_reads_pmi_ranks():
    words = launched("--site", "stampede2-knl", "--np", "1", "--hosts", "c1")  # one node: no data interface
    assert words[words.index("SHIM") + 1] == "hydra"
    assert "MASTER_ADDR=c1" in words and "MASTER_PORT=29500" in words
    assert words.index("MASTER_ADDR=c1") < words.index("mpiexec.hydra")


def test_a_printed_line_with_a_host_name_as_head_warns_and_says_exec_pins_the_address():
    result = hpcbundle("launch", "--torch", "--site", "ib-v100", "--np", "2", "--hosts", "f1,f2", "--explain", *PROGRAM)
    explained = result.stdout
    assert "-x MASTER_ADDR=f1" in explained and "launch --exec (or sbatch) puts the head's address" in explained


def test_a_torch_batch_script_finds_rank_0s_address_on_the_data_interface_and_forwards_it_by_name():
    result = hpcbundle("sbatch", "--torch", "--site", "eth-a100-slurm", "--nodes", "2", "--image", "h.sif", *PROGRAM)
    assert result.exit_code == 0, result.output
    script = result.stdout
    assert "MASTER_ADDR=$(ip -4 -o addr show dev eth0 scope global" in script
    assert "MASTER_PORT=$((61000 + SLURM_JOB_ID % 4536))" in script and "export MASTER_ADDR MASTER_PORT" in script
    assert "GLOO_SOCKET_IFNAME=eth0" in script and "MASTER_ADDR=" not in script.split("export MASTER_ADDR")[1]
    mpirun = hpcbundle("sbatch", "--torch", "--site", "ib-v100", "--nodes", "2", "--image", "h.sif", *PROGRAM)
    assert "-x MASTER_ADDR -x MASTER_PORT" in mpirun.stdout  # forwarded by name, found by the script


def test_horovod_stays_the_default_and_its_lines_do_not_change():
    plain = hpcbundle("launch", "--site", "ib-v100", "--np", "2", "--hosts", "f1,f2", *PROGRAM)
    horovod = hpcbundle("launch", "--horovod", "--site", "ib-v100", "--np", "2", "--hosts", "f1,f2", *PROGRAM)
    assert plain.stdout == horovod.stdout and "MASTER_ADDR" not in plain.stdout and "torchenv" not in plain.stdout


def test_doctor_and_check_judge_a_torch_request_with_the_torch_rules():
    doctor = hpcbundle("doctor", "--site", "eth-cpu-elastic", "--torch", "--no-checksum", "--", "python3", "t.py")
    assert doctor.exit_code == 2 and "FAIL  torch-launcher       --torch: horovodrun" in doctor.stdout
    check = hpcbundle("check", "cpu-local", "--site", "eth-cpu-elastic", "--np", "2", "--torch")
    assert check.exit_code == 2 and "FAIL  torch-launcher" in check.stdout


# --- every shipped site, both torch wirings: the line, its explanation and the batch script, exactly ----------

SHIM = re.compile(r"\$'set -eu\\n.*?exec \"\$@\"\\n'", re.S)
"""The shim's text as a printed line quotes it (tests/test_torchenv.py tests the text itself)."""
WIRINGS = ("torch", "torchrun")


def _shim_shown(text: str) -> str:
    """`text` with each quoted copy of the shim's text shown as SHIM (it is the same in every line), and this
    checkout's directory as ROOT."""
    return SHIM.sub("SHIM", text).replace(str(ROOT), "ROOT")


@pytest.mark.parametrize("wiring", WIRINGS)
@pytest.mark.parametrize("site", SHIPPED)
def test_golden_torch_launch_line_and_explanation_per_site(site, wiring, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args, env = SITE_INVOCATIONS[site]
    srun = yaml.safe_load((ROOT / "site_configs" / f"{site}.yaml").read_text())["launcher"]["name"] == "srun"
    in_slurm = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "2"} if srun else {}  # srun: inside an allocation
    result = CliRunner().invoke(
        main,
        ["--bundle", str(ROOT), "launch", f"--{wiring}", "--site", site, "--explain", "--workdir", WORKDIR, *args],
        env={**NOT_IN_SLURM, **env, **in_slurm},
    )
    assert result.exit_code in (0, 1, 2), result.output
    shown = f"exit {result.exit_code}\n{_shim_shown(result.stdout)}{_shim_shown(result.stderr)}"
    assert_golden(GOLDEN / "torch" / wiring / f"{site}.txt", shown)


@pytest.mark.parametrize("wiring", WIRINGS)
@pytest.mark.parametrize("site", SHIPPED)
def test_golden_torch_batch_script_per_site_passes_shellcheck(site, wiring, tmp_path):
    result = CliRunner().invoke(
        main, ["--bundle", str(ROOT), "sbatch", f"--{wiring}", "--site", site, "--workdir", WORKDIR, *SITE_JOBS[site]],
        env=NOT_IN_SLURM,
    )  # fmt: skip
    assert result.exit_code in (0, 2), result.output
    shown = result.stdout if result.exit_code == 0 else f"exit 2\n{result.stderr}"
    assert_golden(GOLDEN / "torch" / f"sbatch-{wiring}" / f"{site}.sh", _shim_shown(shown))
    if result.exit_code == 0:
        script = tmp_path / "job.sh"
        script.write_text(result.stdout)
        check = subprocess.run(["shellcheck", "--severity=style", str(script)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout
