"""bench/doctor_program.py: doctor with and without the program-environment probe, on the real ssh
cluster; both variants must run and the probe must PASS there. Times are printed, never asserted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .helpers import ROOT


@pytest.mark.cluster
def test_both_doctor_variants_run_over_ssh_and_the_json_line_reports_them(cluster_tools):
    argv = [sys.executable, str(ROOT / "bench" / "doctor_program.py"), "--repeat", "1", "--warmup", "0"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["metric"] == "doctor_program_env" and (report["nodes"], report["repeat"]) == (3, 1)
    assert report["errors"] == {"base": [], "program": []}
    assert set(report["median_s"]) == {"base", "program"} and report["added_s"] is not None
    assert "added by the program-env check: " in result.stdout
