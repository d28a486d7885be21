"""Secrets stay off command lines: a secret-looking env: name is forwarded by name, its value never written."""

from __future__ import annotations

import os
import subprocess

from hpcbundle.launch import RankLayout, build_command
from hpcbundle.rules.loading import load_site

from .helpers import SITES, hpcbundle, write_site

TOKEN = "hf_s3cr3tvalue"


def _site(tmp_path, base: str, **env: str):
    return write_site(tmp_path, base, {"env": {"HF_TOKEN": TOKEN, **env}}, name="secret")


def test_a_token_in_env_is_forwarded_by_name_and_a_partition_key_is_set(tmp_path):
    site = load_site(str(_site(tmp_path, "ib-v100", NCCL_IB_PKEY="0x8001")), SITES)
    argv = build_command(site, RankLayout(2), ("python", "t.py"), "img.sif").argv
    assert not any(TOKEN in token for token in argv)
    assert argv[argv.index("HF_TOKEN") - 1] == "-x"
    assert "NCCL_IB_PKEY=0x8001" in argv


def test_pyxis_names_the_token_in_container_env_without_its_value(tmp_path):
    site = load_site(str(_site(tmp_path, "slurm-pyxis-h100")), SITES)
    argv = build_command(site, RankLayout(8, in_allocation=True), ("python", "t.py"), "img.sqsh").argv
    assert not any(TOKEN in token for token in argv)
    (names,) = [t.split("=", 1)[1].split(",") for t in argv if t.startswith("--container-env=")]
    assert "HF_TOKEN" in names


def test_the_sbatch_script_never_holds_the_token(tmp_path):
    result = hpcbundle(
        "sbatch", "--site", str(_site(tmp_path, "eth-a100-slurm")), "--nodes", "2", "--", "python", "t.py"
    )
    assert result.returncode == 0, result.stderr
    assert TOKEN not in result.stdout


def test_launch_exec_without_the_token_in_the_shell_is_refused_in_one_line(tmp_path):
    site = _site(tmp_path, "local")
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    result = hpcbundle("launch", "--site", str(site), "--np", "1", "--exec", "--", "true", env=env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"hpcbundle: error: {site}: env.HF_TOKEN: HF_TOKEN is not set in the launching shell (set HF_TOKEN in the "
        "launching shell: a secret-looking env: name is forwarded by name, its value in the site never written)"
    ]


def test_the_elastic_script_keeps_only_the_allowlist_exported_for_horovodrun(tmp_path):
    """The script's own block, run in bash: a token of the submitting shell stays out of horovodrun's environment
    (its ssh lines), the paths, the SLURM job and the site's exports stay in."""
    site = write_site(tmp_path, "eth-cpu-elastic", export=["WANDB_MODE"], name="elastic")
    script = hpcbundle("sbatch", "--site", str(site), "--nodes", "2", "--", "python", "t.py").stdout
    block = script[script.index("while IFS= read -r name") : script.index("done < <(compgen -e)") + 20]
    shell = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": "7", "WANDB_MODE": "offline", "GITHUB_TOKEN": TOKEN}
    ran = subprocess.run(["bash", "-c", f"{block}\nenv"], env=shell, capture_output=True, text=True, check=True)
    names = {line.split("=", 1)[0] for line in ran.stdout.splitlines()}
    assert {"PATH", "SLURM_JOB_ID", "WANDB_MODE"} <= names and "GITHUB_TOKEN" not in names
