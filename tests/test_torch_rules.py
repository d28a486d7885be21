"""The torch.distributed rules (rules/torch.py): each refuses its bad torch request in one line through the engine
and through the CLI (exit 2, nothing on stdout, nothing started), passes a good one, and a Horovod request SKIPs
the rules over a torch request, saying why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from hpcbundle.cli import main
from hpcbundle.config.errors import UserError
from hpcbundle.config.sites import read_site
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.launch import LaunchPlan, RankLayout
from hpcbundle.rules.engine import Facts, LaunchRequest, evaluate, registered
from hpcbundle.rules.loading import problem_line

from .helpers import ROOT, make_site

SITES = ROOT / "site_configs"
PROGRAM = ("python3", "t.py")
HOSTS = RankLayout(4, (("f1", 2), ("f2", 2)))
HOSTS_ARGS = ["--np", "4", "--hosts", "f1:2,f2:2", "--image", "h.sif"]
IN_SLURM = {"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "2"}
SKIPPED = "the ranks meet through Horovod (no --torch or --torchrun)"
NARROWS = (
    "narrows each task to its own GPUs: NCCL loses P2P between the ranks of a node (NVIDIA/nccl#1066) "
    "(drop it: each rank takes cuda:LOCAL_RANK, every GPU of its node visible)"
)
DOUBLE_FIX = (
    "(give the training script itself (-- python train.py): hpcbundle starts one rank per GPU (--torch) with "
    "RANK/WORLD_SIZE set, or one torchrun per node (--torchrun))"
)
PORT_FIX = "(pick a port from 1024 to 32767 or from 61000 to 65535 (torch's default is 29500))"


def _site_file(directory: Path, base: str, edit: dict[str, Any]) -> Path:
    """Shipped site `base` named `req`, its sections in `edit` merged (a value that is no mapping replaces), as
    req.yaml."""
    data = yaml.safe_load((SITES / f"{base}.yaml").read_text()) | {"name": "req"}
    for section, values in edit.items():
        data[section] = {**data.get(section, {}), **values} if isinstance(values, dict) and values else values
    (directory / "req.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return directory / "req.yaml"


ELASTIC_OFF = {"faults": {}, "why": {}}
"""eth-cpu-elastic's edits to a plain horovodrun site (no faults.elastic, no why: lines for its keys)."""

# (rule, shipped base site, section edits (site `req`), layout, program, head (MASTER_ADDR as the CLI decides it),
# the launch arguments and environment of the same request, the one line it is refused with; SITE: the site file).
Case = tuple[str, str, dict[str, Any], RankLayout, tuple, "str | None", list[str], dict[str, str], str]
CASES: list[Case] = [
    ("torch-launcher", "eth-cpu-elastic", ELASTIC_OFF, RankLayout(2, (("n1", 1), ("n2", 1))), PROGRAM, "n1",
     ["--np", "2", "--hosts", "n1:1,n2:1", "--image", "h.sif"], {},
     "--torch: horovodrun (launcher.name of site req) cannot start torch.distributed ranks "
     "(use a site whose launcher is mpiexec.hydra, mpirun, mpirun5 or srun)"),
    ("torch-interface", "stampede2-knl", {}, RankLayout(2, (("k1", 1), ("k2", 1))), PROGRAM, "k1",
     ["--np", "2", "--hosts", "k1:1,k2:1", "--image", "h.sif"], {},
     "SITE: network.interfaces: missing on site req: a torch job over several nodes has no way to pick the head's "
     "data address (name the data interface, e.g. network.interfaces: [ib0])"),
    ("torch-program", "ib-v100", {}, HOSTS, ("torchrun", "--nproc-per-node=2", "t.py"), "f1",
     [*HOSTS_ARGS, "--", "torchrun", "--nproc-per-node=2", "t.py"], {},
     "PROGRAM: torchrun starts workers itself, so each of the 4 ranks would start its own (a double launch) "
     f"{DOUBLE_FIX}"),
    ("torch-program", "ib-v100", {}, HOSTS, ("/opt/py/bin/python3.11", "-u", "-m", "torch.distributed.run", "t.py"),
     "f1", [*HOSTS_ARGS, "--", "/opt/py/bin/python3.11", "-u", "-m", "torch.distributed.run", "t.py"], {},
     "PROGRAM: python3.11 -m torch.distributed.run starts workers itself, so each of the 4 ranks would start its own "
     f"(a double launch) {DOUBLE_FIX}"),
    ("torch-port", "ib-v100", {"torch": {"port": 40000}}, HOSTS, PROGRAM, "f1", HOSTS_ARGS, {},
     "SITE: torch.port: 40000 is in Linux's ephemeral range 32768-60999: an outgoing connection may hold it as "
     f"rank 0 listens {PORT_FIX}"),
    ("torch-port", "ib-v100", {"torch": {"port": 80}}, HOSTS, PROGRAM, "f1", HOSTS_ARGS, {},
     f"SITE: torch.port: 80 is privileged (below 1024): rank 0 may not listen on it {PORT_FIX}"),
    ("gloo-ifname", "ib-v100", {"env": {"GLOO_SOCKET_IFNAME": "^lo,docker0"}}, HOSTS, PROGRAM, "f1", HOSTS_ARGS, {},
     "SITE: env.GLOO_SOCKET_IFNAME: '^lo,docker0' uses NCCL's ^ syntax, but Gloo takes interface names only "
     "(aws-samples/aws-do-eks#51: Unable to find address for: ^lo) "
     "(name the interfaces, e.g. ib0, or drop it (derived from network.interfaces))"),
    ("gloo-ifname", "ib-v100", {"env": {"GLOO_SOCKET_IFNAME": "=ib0"}}, HOSTS, PROGRAM, "f1", HOSTS_ARGS, {},
     "SITE: env.GLOO_SOCKET_IFNAME: '=ib0' uses NCCL's = syntax, but Gloo takes interface names only "
     "(aws-samples/aws-do-eks#51: Unable to find address for: ^lo) "
     "(name the interfaces, e.g. ib0, or drop it (derived from network.interfaces))"),
    ("torch-gpu-narrowing", "eth-a100-slurm", {"slurm": {"options": ["--exclusive", "--gpus-per-task=1"]}},
     RankLayout(8, in_allocation=True, nodes=2), PROGRAM, None, ["--np", "8", "--image", "h.sif"], IN_SLURM,
     f"SITE: slurm.options[1]: --gpus-per-task=1 {NARROWS}"),
    ("torch-gpu-narrowing", "eth-a100-slurm", {"launcher": {"args": ["--gpu-bind", "verbose,map_gpu:0,1,2,3"]}},
     RankLayout(8, in_allocation=True, nodes=2), PROGRAM, None, ["--np", "8", "--image", "h.sif"], IN_SLURM,
     f"SITE: launcher.args[0]: --gpu-bind=verbose,map_gpu:0,1,2,3 {NARROWS}"),
    ("torch-gpu-narrowing", "ib-v100", {"env": {"CUDA_VISIBLE_DEVICES": "0"}}, HOSTS, PROGRAM, "f1", HOSTS_ARGS, {},
     "SITE: env.CUDA_VISIBLE_DEVICES: set by the site, it narrows the GPUs every rank sees: NCCL loses P2P between "
     "the ranks of a node (NVIDIA/nccl#1066) (drop it: each rank takes cuda:LOCAL_RANK, every GPU of its node "
     "visible)"),
    ("torch-world", "ib-v100", {}, RankLayout(3, (("f1", 2), ("f2", 2))), PROGRAM, "f1",
     ["--np", "3", "--hosts", "f1:2,f2:2", "--image", "h.sif"], {},
     "--hosts: --np 3 puts 2 on f1, 1 on f2, but torchrun starts as many workers on every node "
     "(give every host the same slots and --np = hosts x slots)"),
    ("torch-world", "eth-a100-slurm", {}, RankLayout(7, in_allocation=True, nodes=2), PROGRAM, None,
     ["--np", "7", "--image", "h.sif"], IN_SLURM,
     "--np: 7 workers do not share out over 2 nodes (torchrun starts as many on each) (give a multiple of 2)"),
    ("torch-world", "eth-a100-slurm", {}, RankLayout(8, in_allocation=True), PROGRAM, None,
     ["--np", "8", "--image", "h.sif"], {"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": None},
     "--torchrun: the nodes are SLURM's to place and their number is unknown here: torchrun needs one agent per "
     "node (run it inside an allocation (salloc), submit it with sbatch --torchrun, or name the hosts with --hosts)"),
    ("torchrun-program", "ib-v100", {}, HOSTS, ("python3", "-u", "t.py"), "f1",
     [*HOSTS_ARGS, "--", "python3", "-u", "t.py"], {},
     "PROGRAM: python3 -u t.py is not PYTHON SCRIPT: torchrun runs a Python script on each worker (give -- python "
     "train.py ARGS (or -- python -m MODULE ARGS); torchrun runs it with -u)"),
]  # fmt: skip
TORCHRUN_RULES = {"torch-world", "torchrun-program"}
IDS = [f"{case[0]}-{i}" for i, case in enumerate(CASES)]
TORCH_RULES = {
    r.name
    for r in registered()
    if r.function.__module__ == "hpcbundle.rules.torch" and not {"head", "program"} & set(r.needs)
}
"""The torch rules a plan's judgement runs (those over doctor's observed head: tests/test_torch_head.py; over the
program's probe: torch-lightning, below)."""
IN_CHECK = {r.name for r in registered() if r.name in TORCH_RULES and "image" in r.needs}
"""Judged where the image's torch is known: check (the recipe's labels), doctor (read back); tested below."""
ON_REQUEST = {
    r.name
    for r in registered()
    if r.function.__module__ == "hpcbundle.rules.torch"
    and "request" in r.needs
    and not {"image", "program"} & set(r.needs)
}


def _wiring(case: Case) -> str:
    """The wiring a case's rule judges: torchrun's rules judge --torchrun requests, the others --torch ones."""
    return "torchrun" if case[0] in TORCHRUN_RULES else "torch"


def _plan(site_path: Path, case: Case, wiring: str = "torch") -> LaunchPlan:
    """The case's plan on its site, read in shape only (the plan's judgement refuses a site's own keys first)."""
    _, _, _, layout, program, head, *_ = case
    return LaunchPlan(read_site(str(site_path), SITES), layout, program, "h.sif", wiring=wiring, head=head)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_each_torch_rule_refuses_its_bad_request_in_one_line(tmp_path, case):
    rule, base, edit, *_, line = case
    path = _site_file(tmp_path, base, edit)
    plan = _plan(path, case, _wiring(case))
    failures = [r for r in plan.evaluate() if r.status == "FAIL"]
    assert [f.rule for f in failures] == [rule]
    assert problem_line(failures[0], plan.site.where) == line.replace("SITE", str(path))
    with pytest.raises(UserError) as refused:
        plan.judge()
    assert list(refused.value.lines) == [line.replace("SITE", str(path))]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_cli_refuses_each_bad_torch_request_with_exit_2_and_nothing_on_stdout(tmp_path, case):
    _, base, edit, *_, args, env, line = case
    path = _site_file(tmp_path, base, edit)
    torchrun = _wiring(case) == "torchrun"
    toucher = ["python3", str(tmp_path / "touch.py")] if torchrun else ["touch", str(tmp_path / "ran")]
    program = [] if "--" in args else ["--", *toucher]
    result = CliRunner().invoke(
        main, ["--bundle", str(ROOT), "launch", "--site", str(path), f"--{_wiring(case)}", *args, *program],
        env={"SLURM_JOB_ID": None, "SLURM_JOB_NUM_NODES": None, **env},
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and result.stderr == f"hpcbundle: error: {line.replace('SITE', str(path))}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["req.yaml"]


def test_every_torch_rule_has_a_bad_case():
    assert {case[0] for case in CASES} | {"torch-head-by-name"} | IN_CHECK == TORCH_RULES  # the WARN: below
    assert all(r.on_load for r in registered() if r.name in TORCH_RULES)


# (shipped site, layout, program, head): torch requests that fit, where every torch rule PASSes.
GOOD = [
    ("ib-v100", HOSTS, PROGRAM, "10.1.0.1"),
    ("eth-a100-slurm", RankLayout(8, in_allocation=True, nodes=2), ("python", "-m", "train"), None),
    ("roce-h100-ompi5", RankLayout(1), ("torchrun", "--standalone", "--nproc-per-node=8", "t.py"), "127.0.0.1"),
]


@pytest.mark.parametrize("good", GOOD, ids=[g[0] for g in GOOD])
def test_a_torch_request_that_fits_passes_every_torch_rule_that_judges_it(good):
    site, layout, program, head = good
    plan = LaunchPlan(read_site(site, SITES), layout, program, "h.sif", wiring="torch", head=head)
    results = {r.rule: r for r in plan.judge() if r.rule in TORCH_RULES}
    assert set(results) == TORCH_RULES - IN_CHECK  # no image labels here
    judged = {name: r.status for name, r in results.items() if r.status != "SKIP"}
    assert set(judged.values()) == {"PASS"}, results
    assert {"torch-launcher", "torch-port", "torch-gpu-narrowing"} <= set(judged)


def test_the_rules_pass_where_their_part_of_a_torch_request_fits():
    """torch-interface and torch-program judge what the first good case leaves out: a multi-node request on a
    site with interfaces, a training script given as a module; gloo-ifname a site's own interface names."""
    site = read_site(str(SITES / "ib-v100.yaml"), SITES)
    site = site.model_copy(update={"env": {**site.env, "GLOO_SOCKET_IFNAME": "ib0,eth0"}})
    program = ("python3", "-X", "dev", "-m", "train", "--epochs", "2")
    results = {
        r.rule: r.status for r in LaunchPlan(site, HOSTS, program, "h.sif", wiring="torch", head="f1").evaluate()
    }
    assert [results[name] for name in ("torch-interface", "torch-program", "gloo-ifname")] == ["PASS"] * 3


def test_a_horovod_request_skips_every_torch_rule_over_the_request_saying_why(tmp_path):
    path = _site_file(tmp_path, "eth-cpu-elastic", ELASTIC_OFF)
    case = CASES[0]
    results = [r for r in _plan(path, case, wiring="horovod").judge() if r.rule in ON_REQUEST]
    assert {r.rule: (r.status, r.evidence) for r in results} == dict.fromkeys(ON_REQUEST, ("SKIP", SKIPPED))
    for rule, base, edit, *_ in CASES:
        if rule in ON_REQUEST and rule != "torch-interface":  # a torch-only refusal: Horovod needs no interfaces
            horovod = _plan(_site_file(tmp_path, base, edit), case, wiring="horovod")
            assert rule not in {r.rule for r in horovod.evaluate() if r.status == "FAIL"}


def test_a_host_name_as_master_addr_warns_and_the_printed_line_still_comes():
    plan = LaunchPlan(read_site("ib-v100", SITES), HOSTS, PROGRAM, "h.sif", wiring="torch", head="f1")
    warned = [r for r in plan.judge() if r.status == "WARN"]
    assert [(r.rule, r.message()) for r in warned] == [
        ("torch-head-by-name", "MASTER_ADDR is the host name f1: torch and every node resolve it, and it may resolve "
         "to another network or 127.0.x.1; run it with launch --exec (the head's address on network.interfaces is "
         "put there) or submit with sbatch --torch")
    ]  # fmt: skip
    result = CliRunner().invoke(
        main, ["--bundle", str(ROOT), "launch", "--site", "ib-v100", "--torch", *HOSTS_ARGS, "--", *PROGRAM],
        env={"SLURM_JOB_ID": None},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "-x MASTER_ADDR=f1 " in result.stdout
    assert result.stderr.startswith("WARN  torch-head-by-name   MASTER_ADDR is the host name f1:")


@pytest.mark.parametrize(
    "head, batch, status",
    [("10.1.0.1", False, "PASS"), ("127.0.0.1", False, "PASS"), ("f1.cluster", False, "WARN"),
     ("fe80::1", False, "WARN"), (None, False, "SKIP"), ("f1", True, "SKIP")],
)  # fmt: skip
def test_only_a_printed_line_with_a_host_name_warns(head, batch, status):
    plan = LaunchPlan(read_site("ib-v100", SITES), HOSTS, PROGRAM, "h.sif", batch=batch, wiring="torch", head=head)
    assert [r.status for r in plan.evaluate() if r.rule == "torch-head-by-name"] == [status]


# --- the rules over the image's torch, judged where its version is known: check (labels), doctor (read back) -----


@pytest.mark.parametrize(
    "recipe, site, wiring, line",
    [("cpu-local", "ib-v100", "--torch",
      "FAIL  torch-backend        --image: torch 2.13.0+cpu (recipe cpu-local) is a CPU-only build, but site ib-v100 "
      "has 2 GPUs per node: no CUDA, no NCCL; use an image built from a CUDA recipe (e.g. recipes/*cuda*)")],
)  # fmt: skip
def test_check_refuses_a_torch_image_that_cannot_serve_the_wiring(recipe, site, wiring, line):
    result = CliRunner().invoke(
        main, ["--bundle", str(ROOT), "check", recipe, "--site", site, "--np", "8", wiring], env=IN_SLURM
    )
    assert result.exit_code == 2, result.output
    assert line in result.stdout.splitlines(), result.stdout


@pytest.mark.parametrize("wiring", ["--torchrun", "--torch"])
def test_check_passes_a_cuda_torch_image_under_both_wirings(wiring):
    result = CliRunner().invoke(
        main, ["--bundle", str(ROOT), "check", "cuda13.0-torch2.11", "--site", "eth-a100-slurm", "--np", "8", wiring],
        env=IN_SLURM,
    )  # fmt: skip
    judged = {line.split()[1]: line.split()[0] for line in result.stdout.splitlines() if line.split()[1:2]}
    assert judged["torch-backend"] == "PASS", result.output


GOOD_TORCHRUN = [
    ("ib-v100", HOSTS, PROGRAM, "10.1.0.1"),
    ("eth-a100-slurm", RankLayout(8, in_allocation=True, nodes=2), ("python", "-m", "train"), None),
    ("local", RankLayout(2), PROGRAM, "127.0.0.1"),
]


@pytest.mark.parametrize("good", GOOD_TORCHRUN, ids=[g[0] for g in GOOD_TORCHRUN])
def test_a_torchrun_request_that_fits_passes_the_torchrun_rules(good):
    site, layout, program, head = good
    image = None if site == "local" else "h.sif"
    plan = LaunchPlan(read_site(site, SITES), layout, program, image, wiring="torchrun", head=head)
    results = {r.rule: r.status for r in plan.judge() if r.rule in TORCHRUN_RULES}
    assert results == dict.fromkeys(TORCHRUN_RULES, "PASS")


def test_doctors_plan_over_several_hosts_needs_the_data_interface():
    """doctor --torch --hosts f1,f2 asks for no ranks, but its hosts span nodes: torch-interface judges them."""
    plan = LaunchPlan(read_site("seed-v100", SITES), None, PROGRAM, wiring="torch", hosts={"f1": 1, "f2": 1})
    assert [r.status for r in plan.evaluate(observing=True) if r.rule == "torch-interface"] == ["FAIL"]


@pytest.mark.parametrize(
    "site, wiring, imports, line",
    [("ib-v100", "torch", ["lightning", "numpy"],
      "WARN  torch-lightning      train.py imports lightning, which under mpirun picks MPIEnvironment where mpi4py "
      "imports (rank 0's host name and a free port, not MASTER_ADDR on network.interfaces), else sees node rank 0 "
      "on every node; launch it with --torchrun: Lightning then takes torchrun's world"),
     ("eth-a100-slurm", "torch", ["pytorch_lightning"],
      "PASS  torch-lightning      pytorch_lightning under srun takes SLURM's world and MASTER_ADDR (SLURMEnvironment)"),
     ("ib-v100", "torchrun", ["lightning"],
      "SKIP  torch-lightning      --torchrun: Lightning takes torchrun's world"),
     ("ib-v100", "torch", ["torch"], "SKIP  torch-lightning      the program does not import Lightning")],
)  # fmt: skip
def test_a_lightning_program_under_torch_warns_where_mpirun_starts_it(site, wiring, imports, line):
    """Lightning chooses its own cluster environment: MPI's meets at a host name (measured: MPIEnvironment under
    mpirun with mpi4py; TorchElasticEnvironment under --torchrun on the H200, tests/test_gpu_torch.py)."""
    here = {"kind": "python", "host": "f1", "executable": "/usr/bin/python3", "prefix": "/usr", "modules": {}}
    found = {"program": "train.py", "required": imports, "optional": [], "problem": ""}
    probe = {"argv0": "python3", "launching": here, "nodes": {"f1": here}, "imports": found}
    facts = Facts(
        site=read_site(site, SITES),
        request=LaunchRequest(np=4, hosts=(("f1", 2), ("f2", 2)), program=PROGRAM, wiring=wiring),
        observed=True,
        program=probe,
    )
    assert [r.line() for r in evaluate(facts, knowledge_base()) if r.rule == "torch-lightning"] == [line]


@pytest.mark.parametrize("wiring, status", [("horovod", "FAIL"), ("torch", "SKIP"), ("torchrun", "SKIP")])
def test_the_pmix_fixes_for_containers_are_asked_for_horovod_ranks_only(wiring, status):
    """srun --mpi=pmix into containers without PMIX_MCA_gds=hash: Open MPI's ranks could not read the PMIx server's
    data, so a Horovod launch is refused; torch's ranks never ask PMIx (they meet over TCP), so theirs is not."""
    site = make_site("eth-a100-slurm", env={})
    plan = LaunchPlan(site, RankLayout(8, in_allocation=True, nodes=2), PROGRAM, "h.sif", wiring=wiring, head="f1")
    judged = [(r.status, r.evidence) for r in plan.evaluate() if r.rule == "pmix-container"]
    assert [found for found, _ in judged] == [status], judged
    assert status == "FAIL" or judged[0][1] == f"no MPI between torch.distributed ranks (--{wiring})"
