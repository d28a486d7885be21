"""An admin's reading, kept: every shipped site's `launch --explain`, `sbatch` and `check` at 2 nodes, and the
edge inputs users hit, each with its verdict. An output that changes fails here until its row is revisited.

tests/golden/reading.yaml holds, per row, the command, the environment it runs in (outside SLURM unless it
says), the exit status, a hash of the exact output and its first line, and the admin's verdict with the
reason in one line. `HPCBUNDLE_REGEN_GOLDEN=1` (make golden) rewrites the exit status, hash and first line,
and keeps each verdict: the diff then shows which verdicts to read again.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from hpcbundle.cli import main

from .helpers import GOLDEN, ROOT, SHIPPED

READING = GOLDEN / "reading.yaml"
VERDICTS = ("right", "wrong-but-works", "slow", "would-fail")
OUTPUT_KEYS = ("exit", "output", "first")  # what regeneration rewrites; the rest is the admin's
ROWS: list[dict[str, Any]] = yaml.safe_load(READING.read_text(encoding="utf-8"))


def observed(row: dict[str, Any], cwd: Path) -> dict[str, Any]:
    """Run the row's command in-process (outside any SLURM allocation unless the row's env says) and sum it up:
    exit status, a 12-hex hash of stdout and stderr, and the first line (stdout's, else stderr's) cut to 100."""
    argv = shlex.split(row["command"])
    assert argv[0] == "hpcbundle", row["command"]
    env: dict[str, str | None] = {name: None for name in os.environ if name.startswith("SLURM_")}
    env.update(row.get("env", {}))
    old = Path.cwd()
    os.chdir(cwd)  # an elastic site writes its discovery script beside it
    try:
        result = CliRunner().invoke(main, ["--bundle", str(ROOT), *argv[1:]], env=env)
    finally:
        os.chdir(old)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    text = f"{result.stdout}\n--- stderr ---\n{result.stderr}"
    first = (result.stdout or result.stderr).splitlines()[0]
    return {
        "exit": result.exit_code,
        "output": hashlib.sha256(text.encode()).hexdigest()[:12],
        "first": first if len(first) <= 100 else first[:97] + "...",
    }


def test_reading_rows_are_unique_and_carry_a_verdict_and_one_line_why():
    assert len({row["id"] for row in ROWS}) == len(ROWS)
    for row in ROWS:
        assert row["verdict"] in VERDICTS, row["id"]
        assert row["why"].strip() and "\n" not in row["why"].strip(), row["id"]


def test_reading_covers_launch_sbatch_and_check_of_every_shipped_site():
    assert {f"{site} {what}" for site in SHIPPED for what in ("launch", "sbatch", "check")} <= {
        row["id"] for row in ROWS
    }


def test_nothing_is_left_slow_or_failing_but_the_seeds_documented_line():
    left = [row["id"] for row in ROWS if row["verdict"] in ("slow", "would-fail")]
    assert all("seed-v100" in row_id for row_id in left), left


def test_every_reading_output_is_the_one_its_verdict_was_given_for(tmp_path):
    """Each command's output as read; a changed one names its row, to be read again (`make golden` rewrites)."""
    seen = [{**_command(row), **observed(row, tmp_path), "verdict": row["verdict"], "why": row["why"]} for row in ROWS]
    kept = ROWS
    if os.environ.get("HPCBUNDLE_REGEN_GOLDEN") == "1":
        READING.write_text(yaml.safe_dump(seen, sort_keys=False, width=120, allow_unicode=True), encoding="utf-8")
        kept = seen
    changed = [row["id"] for row, now in zip(kept, seen, strict=True) if any(row.get(k) != now[k] for k in OUTPUT_KEYS)]
    assert not changed, f"outputs changed since their verdict: {changed}; read them again, then `make golden`"


def _command(row: dict[str, Any]) -> dict[str, Any]:
    """The row's input: id, command and its environment (if any)."""
    return {key: row[key] for key in ("id", "command", "env") if key in row}


@pytest.mark.parametrize("site", SHIPPED)
def test_docs_sites_notes_give_each_sites_reading(site):
    """docs/sites.md's per-site notes state the verdict of each of the site's launch, sbatch and check rows."""
    docs = (ROOT / "docs" / "sites.md").read_text(encoding="utf-8")
    note = next((line for line in docs.splitlines() if line.startswith(f"- `{site}`: ")), "")
    assert note, f"docs/sites.md has no reading note for {site}"
    for what in ("launch", "sbatch", "check"):
        verdict = next(row["verdict"] for row in ROWS if row["id"] == f"{site} {what}")
        assert f"{what} {verdict}" in note, (site, what, verdict)
