"""Without --site the default is local, this machine alone: inside a SLURM job or with other hosts it is refused."""

from __future__ import annotations

import pytest

from .helpers import hpcbundle

PROGRAM = ("--", "python3", "t.py")
REFUSED = (
    "hpcbundle: error: --site: not given, so the default site local would run every rank on this machine alone, "
    "but {where} (name the cluster's site with --site NAME; `hpcbundle site detect` drafts one)\n"
)


@pytest.mark.parametrize(
    "args, env, where",
    [
        (["launch", "--np", "2"], {"SLURM_JOB_ID": "42"}, "this shell runs inside SLURM job '42'"),
        (["launch", "--np", "2", "--hosts", "n1:1,n2:1"], {}, "--hosts names 'n1'"),
        (["sbatch", "--nodes", "1"], {"SLURM_JOB_ID": "42"}, "this shell runs inside SLURM job '42'"),
    ],
    ids=["launch-in-slurm-job", "launch-remote-hosts", "sbatch-in-slurm-job"],
)
def test_no_site_inside_a_slurm_job_or_with_other_hosts_is_refused_in_one_line(tmp_path, args, env, where):
    out = tmp_path / "out"
    result = hpcbundle(*args, *(["-o", str(out)] if args[0] == "sbatch" else []), *PROGRAM, env=env)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == REFUSED.format(where=where)
    assert not out.exists()


def test_no_site_on_this_machine_and_a_named_local_site_in_a_slurm_job_write_the_line():
    assert hpcbundle("launch", "--np", "2", "--hosts", "localhost:2", *PROGRAM).returncode == 0
    named = hpcbundle("launch", "--site", "local", "--np", "2", *PROGRAM, env={"SLURM_JOB_ID": "42"})
    assert named.returncode == 0 and named.stdout.startswith("mpirun --allow-run-as-root")


def test_launch_help_says_which_site_is_the_default():
    assert "The default, local, is this machine alone" in " ".join(hpcbundle("launch", "--help").stdout.split())
