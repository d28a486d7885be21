"""Submitting a batch script to SLURM from the command line (`sbatch --submit`, `scaling plan --submit`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ..config.errors import UserError
from ..launch.batch import parse_job_id


def submit_script(text: str, path: Path | None) -> str:
    """Run sbatch on the written file (or the text on stdin); return the job id."""
    argv = ["sbatch", "--parsable", *([str(path)] if path else [])]
    try:
        result = subprocess.run(
            argv, input=None if path else text, capture_output=True, text=True, timeout=120, check=False
        )  # noqa: S603
    except FileNotFoundError:
        raise UserError.at(
            "",
            "sbatch",
            "not found on PATH",
            "run --submit on a SLURM login node, or drop it and copy the script there",
        ) from None
    except subprocess.TimeoutExpired:
        raise UserError.at(
            "", "sbatch", "did not answer within 120 s", "check that slurmctld is reachable (sinfo)"
        ) from None
    if result.returncode:
        raise UserError.at(
            "",
            "sbatch",
            "refused the job: "
            f"{result.stderr.strip().splitlines()[-1] if result.stderr.strip() else result.returncode}",
            "fix the site's slurm settings or the flags",
        )
    return parse_job_id(result.stdout)
