"""Every judgement of a site against the launch request is a rule of the one engine (rules/request.py):
each refuses its bad request in one line through the engine and through the CLI (exit 2, nothing
started), `hpcbundle rules` lists them, and with them taken out every bad request builds a line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from hpcbundle.cli import main
from hpcbundle.config.errors import UserError
from hpcbundle.config.limits import MAX_CORES, MAX_NODES, MAX_RANKS
from hpcbundle.config.sites import Site
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.launch import LaunchPlan, RankLayout
from hpcbundle.launch.workdir import WorkDir
from hpcbundle.rules import engine
from hpcbundle.rules.engine import RULES, Facts, LaunchRequest, registered
from hpcbundle.rules.facts import check_declared
from hpcbundle.rules.loading import load_failures, load_recipe, load_site, problem_line

from .helpers import ROOT, hpcbundle

SITES = ROOT / "site_configs"
PROGRAM = ("python3", "t.py")
IN_SLURM = {"SLURM_JOB_ID": "1"}


def _edited_site(directory: Path, base: str, edit: dict[str, Any]) -> Path:
    """Shipped site `base` named `req`, its sections in `edit` merged (a list replaces), as req.yaml."""
    data = yaml.safe_load((SITES / f"{base}.yaml").read_text()) | {"name": "req"}
    for section, values in edit.items():
        data[section] = {**data[section], **values} if isinstance(values, dict) else values
    (directory / "req.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return directory / "req.yaml"


# (rule, shipped base site, section edits (written as site `req`), the layout, image, program, launching shell's
# names (None: unknown), the launch arguments and environment of the same request, the one line it is refused with;
# SITE in the line is the site file).
Case = tuple[
    str, str, dict[str, Any], RankLayout, "str | None", tuple, "frozenset | None", list[str], dict[str, str], str
]
CASES: list[Case] = [
    ("program-given", "local", {}, RankLayout(2), None, (), None, ["--np", "2", "--"], {},
     "PROGRAM: missing (give the program after --, e.g. -- python3 train.py)"),
    ("program-first", "local", {}, RankLayout(2), None, ("--help",), None, ["--np", "2", "--", "--help"], {},
     "PROGRAM: '--help' starts with '-', so the launcher would read it as an option "
     "(put the program (e.g. python3) first after --)"),
    ("image-name", "ib-v100", {}, RankLayout(2), "-x.sif", PROGRAM, None, ["--np", "2", "--image=-x.sif"], {},
     "--image: '-x.sif' is not an image name (name the image file, directory or tag (e.g. ./horovod.sif))"),
    ("image-form", "slurm-pyxis-h100", {}, RankLayout(8, in_allocation=True), "/scratch/h.sif", PROGRAM, None,
     ["--np", "8", "--image", "/scratch/h.sif"], IN_SLURM,
     "--image: '/scratch/h.sif' is an Apptainer image, which enroot cannot run (convert it (enroot import -o "
     "horovod.sqsh dockerd://IMAGE) or use an apptainer/singularity site)"),
    ("image-on-host", "local", {}, RankLayout(2), "h.sif", PROGRAM, None, ["--np", "2", "--image", "h.sif"], {},
     "--image: site req runs programs on the host (container.runtime: none) "
     "(drop --image or pick a site with a container runtime)"),
    ("hosts-launcher", "eth-a100-slurm", {}, RankLayout(4, (("a", 2), ("b", 2))), "h.sif", PROGRAM, None,
     ["--np", "4", "--hosts", "a:2,b:2", "--image", "h.sif"], {},
     "--hosts: srun places the ranks on the nodes SLURM allocated "
     "(drop --hosts/--hostfile and ask SLURM for nodes (hpcbundle sbatch --nodes N))"),
    ("np-bound", "local", {}, RankLayout(MAX_RANKS + 1, in_allocation=True), None, PROGRAM, None, [], {},
     "--np: 1048577 ranks (--np, or --nodes x --tasks-per-node) are more than any job runs "
     "(ask for at most 1048576 ranks)"),
    ("np-slots", "ib-v100", {}, RankLayout(8, (("f1", 2), ("f2", 2))), "h.sif", PROGRAM, None,
     ["--np", "8", "--hosts", "f1:2,f2:2", "--image", "h.sif"], {},
     "--np 8: larger than the 4 slots of --hosts f1:2,f2:2 (lower --np or give more hosts or slots)"),
    ("ranks-per-node", "ib-v100", {}, RankLayout(4, (("f1", 2), ("f1", 2))), "h.sif", PROGRAM, None,
     ["--np", "4", "--hosts", "f1:2,f1:2", "--image", "h.sif"], {},
     "--hosts f1:2,f1:2: 4 ranks on f1 but site req nodes have 2 GPUs: NCCL refuses two ranks on one GPU "
     "(invalid usage: \"Duplicate GPU detected\") (give at most 2 ranks per node, one per GPU)"),
    ("ranks-per-node", "stampede2-knl", {}, RankLayout(100, (("k1", 100),)), None, PROGRAM, None,
     ["--np", "100", "--hosts", "k1:100"], {},
     "--hosts k1:100: 100 ranks on k1 but site req runs node.ranks_per_node 1: more ranks than the node takes "
     "(give at most 1 ranks per node, or raise node.ranks_per_node or set launcher.oversubscribe)"),
    ("ranks-per-node", "local", {"launcher": {"oversubscribe": False}}, RankLayout(3, (("a", 3),)), None, PROGRAM,
     None, ["--np", "3", "--hosts", "a:3"], {},
     "--hosts a:3: 3 ranks on a but site req nodes have 2 cores (node.cores): more ranks than the node takes "
     "(give at most 2 ranks per node, or raise node.ranks_per_node or set launcher.oversubscribe)"),
    ("np-nodes", "eth-a100-slurm", {}, RankLayout(12, in_allocation=True, nodes=2), "h.sif", PROGRAM, None,
     ["--np", "12", "--image", "h.sif"], {"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "2"},
     "--np 12: more than the 2 nodes x 4 ranks per node (node.gpus) of this SLURM job "
     "(give --np 8 or less, or ask SLURM for more nodes)"),
    ("srun-allocation", "eth-a100-slurm", {}, RankLayout(8), "h.sif", PROGRAM, None, ["--np", "8", "--image", "h.sif"],
     {}, "SLURM_JOB_ID: not set: srun (launcher.name of site req) would start a job of its own here, without the "
     "site's gres, partition, account or time (run it inside an allocation, e.g. salloc --nodes N --partition=gpu "
     "--account=ml --gres=gpu:4, or use hpcbundle sbatch)"),
    ("np-one-node", "ib-v100", {}, RankLayout(4), "h.sif", PROGRAM, None, ["--np", "4", "--image", "h.sif"], {},
     "--np 4: needs more than one req node (2 ranks each) but no hosts were given "
     "(add --hosts node1:2,node2:2 or --hostfile FILE, or launch inside a SLURM allocation)"),
    ("export-image-env", "ib-v100", {"export": ["PATH", "VIRTUAL_ENV"]}, RankLayout(2, (("f1", 1), ("f2", 1))),
     "h.sif", PROGRAM, None, ["--np", "2", "--hosts", "f1:1,f2:1", "--image", "h.sif"], {},
     "SITE: export[1]: VIRTUAL_ENV of the launching shell would replace the image's own in singularity containers "
     "(drop VIRTUAL_ENV from export: the image provides the program's environment)"),
    ("container-one-node", "local", {"container": {"runtime": "docker"}}, RankLayout(2, (("a", 1), ("b", 1))), "img",
     PROGRAM, None, ["--np", "2", "--hosts", "a:1,b:1", "--image", "img"], {},
     "--hosts: docker runs the launcher inside one container on one node "
     "(use singularity, apptainer or charliecloud for several nodes)"),
    ("export-set", "local", {"export": ["PATH", "CONDA_PREFIX"]}, RankLayout(1), None, PROGRAM, frozenset({"PATH"}),
     ["--np", "1", "--exec"], {},
     "SITE: export[1]: CONDA_PREFIX is not set in the launching shell "
     "(activate the conda env (conda activate ENV) in the launching shell, or drop CONDA_PREFIX from export)"),
    ("elastic-hosts", "eth-cpu-elastic", {}, RankLayout(4, (("n1", 2), ("n2", 2)), discovery_script="./d"), "h.sif",
     PROGRAM, None,
     ["--np", "4", "--hosts", "n1:2,n2:2", "--image", "h.sif"], {},
     "--hosts: site req is elastic: horovodrun takes its hosts from a discovery script, read every second "
     "(give --hostfile FILE (faults.elastic.discovery: hostfile) or submit with hpcbundle sbatch (discovery: slurm))"),
    ("elastic-np", "eth-cpu-elastic", {}, RankLayout(9, in_allocation=True, discovery_script="./d"), "h.sif",
     PROGRAM, None,
     ["--np", "9", "--image", "h.sif"], IN_SLURM,
     "--np 9: outside faults.elastic's [min_np, max_np] = [2, 8] of site req (give --np from 2 to 8)"),
]  # fmt: skip


def _plan(site: Site, case: Case) -> LaunchPlan:
    _, _, _, layout, image, program, names, _, _, _ = case
    environment = dict.fromkeys(names, "set") if names is not None else None
    return LaunchPlan(site, layout, program, image, environment=environment)


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_each_request_rule_refuses_its_bad_request_in_one_line(tmp_path, case):
    rule, base, edit, *_, line = case
    path = _edited_site(tmp_path, base, edit)
    site = load_site(str(path), SITES)
    failures = [r for r in _plan(site, case).evaluate() if r.status == "FAIL"]
    assert [f.rule for f in failures] == [rule]
    assert problem_line(failures[0], site.where) == line.replace("SITE", str(path))
    with pytest.raises(UserError) as refused:
        _plan(site, case).judge()
    assert str(refused.value) == line.replace("SITE", str(path))


# click itself refuses a launch with no PROGRAM (exit 2, its usage line) and an --np above MAX_RANKS (its range);
# program-given guards the callers that build lines in code (sbatch_script, tune, the gate), np-bound sbatch's
# --nodes x --tasks-per-node (test_sbatch_refuses_more_ranks_than_any_job_runs).
CLI_CASES = [case for case in CASES if case[0] not in ("program-given", "np-bound")]


@pytest.mark.parametrize("case", CLI_CASES, ids=[case[0] for case in CLI_CASES])
def test_the_cli_refuses_each_bad_request_in_one_line_with_exit_2_and_starts_nothing(tmp_path, case):
    _, base, edit, *_, args, env, line = case
    path = _edited_site(tmp_path, base, edit)
    program = [] if "--" in args else ["--", "touch", str(tmp_path / "ran")]
    result = CliRunner().invoke(
        main,
        ["--bundle", str(ROOT), "launch", "--site", str(path), *args, *program],
        env={"SLURM_JOB_ID": None, "CONDA_PREFIX": None, **env},
    )
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and result.stderr == f"hpcbundle: error: {line.replace('SITE', str(path))}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["req.yaml"]


def test_sbatch_refuses_more_ranks_than_any_job_runs(tmp_path):
    out = tmp_path / "job.sh"
    args = ["--nodes", str(MAX_NODES), "--tasks-per-node", str(MAX_CORES), "-o", str(out), "--", "python3", "t.py"]
    result = hpcbundle("sbatch", "--site", "local", *args)
    assert result.returncode == 2 and not out.exists()
    assert result.stderr == (
        f"hpcbundle: error: --np: {MAX_NODES * MAX_CORES} ranks (--np, or --nodes x --tasks-per-node) are more "
        f"than any job runs (ask for at most {MAX_RANKS} ranks)\n"
    )


def test_hostfile_slots_over_the_gpus_are_refused_in_one_line_and_start_nothing(tmp_path):
    """8 slots on a 4-GPU node: mpirun fills f1 first, so --np 8 puts all 8 ranks there."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("f1 slots=8\nf2 slots=8\n")
    args = ["--site", "eth-a100-slurm", "--np", "8", "--hostfile", str(hostfile), "--", "touch", str(tmp_path / "x")]
    site = load_site("roce-h100-ompi5", SITES)
    layout = RankLayout(16, hostfile="h", hostfile_slots=32, hostfile_hosts=(("g1", 16), ("g2", 16)))
    failures = [r for r in LaunchPlan(site, layout, PROGRAM).evaluate() if r.status == "FAIL"]
    assert [(f.rule, f.key, f.evidence) for f in failures] == [
        ("ranks-per-node", "--hostfile h", f"16 ranks on g1 but site {site.name} nodes have 8 GPUs: "
         "NCCL refuses two ranks on one GPU (invalid usage: \"Duplicate GPU detected\")")
    ]  # fmt: skip
    ib = ["--site", "ib-v100", *args[2:]]
    result = CliRunner().invoke(main, ["--bundle", str(ROOT), "launch", *ib], env={"SLURM_JOB_ID": None})
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"hpcbundle: error: --hostfile {hostfile}: 8 ranks on f1 but site ib-v100 nodes have 2 GPUs: NCCL refuses "
        'two ranks on one GPU (invalid usage: "Duplicate GPU detected") '
        "(give at most 2 ranks per node, one per GPU)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hosts"]


def test_a_knob_for_other_sites_is_refused_by_knob_site_through_the_engine_and_tune(tmp_path):
    site = load_site("stampede2-knl", SITES)
    failures = load_failures(Facts(site=site, request=LaunchRequest(knobs=("fusion", "algorithm"))))
    line = (
        f"{site.where}: launcher: knob 'algorithm' is for sites whose ranks run Open MPI under mpirun or srun "
        "(drop it from --knobs)"
    )
    assert [(f.rule, problem_line(f, site.where)) for f in failures] == [("knob-site", line)]
    assert load_failures(Facts(site=load_site("local", SITES), request=LaunchRequest(knobs=("algorithm",)))) == []
    out = tmp_path / "tuned.yaml"
    args = ["--np", "2", "--hosts", "k1:1,k2:1", "--knobs", "algorithm", "-o", str(out)]
    result = hpcbundle("tune", "--site", "stampede2-knl", *args)
    assert result.returncode == 2 and result.stderr == f"hpcbundle: error: {line}\n"
    assert not out.exists()


def test_every_request_rule_has_a_bad_case():
    covered = {case[0] for case in CASES} | {"knob-site", "workdir-path", "batch-time", "batch-cpus"}  # test_workdir
    covered |= {"default-site"}  # no --site at all: tests/test_default_site.py
    covered |= {"image-built-once"}  # it only WARNs: test_a_docker_uri_for_many_apptainer_ranks_warns_...
    covered |= _torch_rules()  # tests/test_torch_rules.py
    assert covered == _request_rules() | {"ranks-per-node"}
    assert all(r.on_load for r in registered() if r.name in _request_rules())


def test_without_the_request_rules_every_bad_request_builds_a_line(tmp_path, monkeypatch):
    """The engine is the only source of these refusals: take the request rules out of the registry and
    every bad request above builds its line. A check put back into launch/ (or anywhere beside the
    engine) would still refuse one of them and fail this test."""
    sites = {}
    for index, (_, base, edit, *_) in enumerate(CASES):
        (tmp_path / str(index)).mkdir()
        sites[index] = load_site(str(_edited_site(tmp_path / str(index), base, edit)), SITES)
    monkeypatch.setattr(engine, "RULES", [r for r in RULES if "request" not in r.needs and r.name != "ranks-per-node"])
    for index, case in enumerate(CASES):
        plan = _plan(sites[index], case)
        plan.judge()
        assert plan.command().argv


def test_a_request_that_fits_passes_every_request_rule_that_applies_and_the_others_skip_saying_why():
    site = load_site("ib-v100", SITES)
    shell = {"PATH": "", "LD_LIBRARY_PATH": ""}
    layout = RankLayout(4, (("f1", 2), ("f2", 2)))
    plan = LaunchPlan(site, layout, PROGRAM, "h.sif", WorkDir("/home/u"), shell, knobs=("algorithm",))
    results = {r.rule: r for r in plan.evaluate() if r.rule in _request_rules()}
    assert set(results) == _request_rules() - IMAGE_RULES
    skipped = {name: r.evidence for name, r in results.items() if r.status == "SKIP"}
    assert skipped == {
        "image-form": "singularity takes any image name its engine can find",
        "np-nodes": "the SLURM job's nodes are not known here",
        "batch-cpus": "no sbatch --tasks-per-node (a torchrun job runs one task per node)",
        "elastic-hosts": "site ib-v100 is not elastic (no faults.elastic)",
        "elastic-np": "site ib-v100 is not elastic (no faults.elastic)",
        "batch-time": "no --time in this request",
        "default-site": "the site is named (--site)",
        **dict.fromkeys(_torch_rules() - IMAGE_RULES, "the ranks meet through Horovod (no --torch or --torchrun)"),
    }
    assert {r.status for name, r in results.items() if name not in skipped} == {"PASS"}
    unknown = engine.evaluate(Facts(site=site, request=LaunchRequest()), knowledge_base())
    assert {r.status for r in unknown if r.rule in _request_rules()} == {"SKIP"}


def _registered_request_rules() -> list:
    """The rules over the request alone, judged on load (torch-lightning also reads doctor's program probe: it is
    tested in tests/test_torch_rules.py)."""
    return [r for r in registered() if "request" in r.needs and "observed" not in r.needs]


def _request_rules() -> set[str]:
    return {r.name for r in _registered_request_rules()}


IMAGE_RULES = {r.name for r in registered() if "image" in r.needs}
"""Rules that also need the image's labels: only check (the recipe's) and doctor (read back) have them."""


def _torch_rules() -> set[str]:
    """The rules over a torch request (rules/torch.py): a Horovod request SKIPs them."""
    return {r.name for r in _registered_request_rules() if r.function.__module__.endswith(".torch")}


def test_sbatch_time_inside_the_signal_lead_is_refused_by_the_signal_lead_rule():
    site = load_site("eth-a100-slurm", SITES)
    failures = load_failures(Facts(site=site, request=LaunchRequest(np=4, program=PROGRAM, time="10", batch=True)))
    assert [(f.rule, problem_line(f, site.where)) for f in failures] == [
        (
            "signal-lead",
            "--time: 10 is not longer than the site's faults.signal_before_end (600 s): "
            "SLURM would signal the job to stop as it starts (ask for more than 600 s)",
        )
    ]
    batch = LaunchRequest(np=4, program=PROGRAM, time="2 hours", batch=True)
    malformed = load_failures(Facts(site=site, request=batch))
    assert [(f.rule, f.key) for f in malformed] == [("batch-time", "--time")]  # not the signal lead's to judge


def test_check_judges_a_launch_request_given_with_np_hosts_and_image():
    result = hpcbundle("check", "cuda11.8-tf2.14-torch2.1", "--site", "ib-v100", "--np", "8", "--hosts", "f1:2,f2:2")
    assert result.returncode == 2
    assert "FAIL  np-slots             --np 8: larger than the 4 slots of --hosts f1:2,f2:2" in result.stdout
    assert "SKIP  image-name           no --image in this request" in result.stdout
    fits = hpcbundle("check", "cuda11.8-tf2.14-torch2.1", "--site", "ib-v100", "--np", "4", "--hosts", "f1:2,f2:2")
    assert "PASS  np-slots" in fits.stdout and "FAIL" not in fits.stdout
    alone = hpcbundle("check", "cuda11.8-tf2.14-torch2.1", "--np", "4")
    assert alone.returncode == 2
    assert alone.stderr == "hpcbundle: error: --np: judge a launch on a site (add --site SITE)\n"


def test_check_without_a_request_runs_no_request_rule():
    site = load_site("ib-v100", SITES)
    recipe = load_recipe("cuda11.8-tf2.14-torch2.1", ROOT / "recipes")
    assert not {r.rule for r in check_declared(recipe, site, knowledge_base())} & _request_rules()


def test_a_site_built_in_code_is_judged_with_its_request():
    site = Site.model_validate(
        {
            "name": "d",
            "description": "docker on two hosts",
            "mpi": {"flavour": "openmpi", "version": "4.1.6"},
            "launcher": {"name": "mpirun"},
            "container": {"runtime": "docker"},
            "node": {"cores": 4},
            "network": {"fabric": "ethernet"},
        }
    )
    plan = LaunchPlan(site, RankLayout(2, (("a", 1), ("b", 1))), PROGRAM, "img")
    assert [f.rule for f in plan.evaluate() if f.status == "FAIL"] == ["container-one-node"]


def test_doctor_judges_its_image_and_program_as_a_launch_request():
    result = hpcbundle("doctor", "--site", "local", "--image", "h.sif", "--no-checksum", "--", "--help")
    assert result.returncode == 2, result.stderr
    lines = result.stdout.splitlines()
    assert "FAIL  image-on-host        --image: site local runs programs on the host" in result.stdout
    assert "FAIL  program-first        PROGRAM: '--help' starts with '-'" in result.stdout
    assert "SKIP  np-slots             no --np in this request" in lines


DOCKER_URI = "docker://registry.example.org/team/horovod:cuda11.8"


def test_a_docker_uri_for_many_apptainer_ranks_warns_to_build_the_sif_once_and_still_builds_the_line():
    site = load_site("ib-v100", SITES)
    layout = RankLayout(4, (("f1", 2), ("f2", 2)))
    shell = {"PATH": "", "LD_LIBRARY_PATH": ""}
    plan = LaunchPlan(site, layout, PROGRAM, DOCKER_URI, environment=shell)
    found = {r.rule: r for r in plan.judge()}["image-built-once"]
    assert (found.status, problem_line(found, site.where)) == (
        "WARN",
        f"--image: {DOCKER_URI}: 4 ranks would each build a SIF from docker:// at once, into one singularity cache "
        f"(build the SIF once (`singularity build horovod.sif {DOCKER_URI}`) and pass --image horovod.sif)",
    )
    assert DOCKER_URI in plan.command().argv
    built = {r.rule: r for r in LaunchPlan(site, layout, PROGRAM, "h.sif", environment=shell).judge()}
    assert built["image-built-once"].status == "PASS"
    one = {r.rule: r for r in LaunchPlan(site, RankLayout(1), PROGRAM, DOCKER_URI, environment=shell).judge()}
    assert (one["image-built-once"].status, one["image-built-once"].evidence) == (
        "PASS",
        "one rank converts docker:// once",
    )


def test_the_cli_prints_the_docker_uri_warning_beside_the_line():
    args = ["--np", "4", "--hosts", "f1:2,f2:2", "--image", DOCKER_URI, "--", "python3", "t.py"]
    result = CliRunner().invoke(
        main, ["--bundle", str(ROOT), "launch", "--site", "ib-v100", *args], env={"SLURM_JOB_ID": None}
    )
    assert result.exit_code == 0, result.output
    assert "WARN  image-built-once     --image: " in result.stderr and DOCKER_URI in result.stdout


def test_an_unset_export_the_image_brings_its_own_of_warns_and_one_the_program_needs_is_refused(tmp_path):
    """`-x LD_LIBRARY_PATH` into Singularity: the image's own reaches the ranks (mpirun -x only warns), so WARN;
    on the host (runtime none) the program's PATH or VIRTUAL_ENV is what it runs with, so the refusal stays."""
    site = load_site("ib-v100", SITES)
    layout = RankLayout(4, (("f1", 2), ("f2", 2)))
    results = LaunchPlan(site, layout, PROGRAM, "h.sif", environment={"PATH": "/usr/bin"}).judge()
    found = [r for r in results if r.rule == "export-set"]
    assert [(r.status, problem_line(r, site.where)) for r in found] == [
        (
            "WARN",
            f"{site.where}: export[0]: LD_LIBRARY_PATH is not set in the launching shell; singularity gives the "
            "ranks the image's own (drop LD_LIBRARY_PATH from export)",
        )
    ]
    host = load_site(str(_edited_site(tmp_path, "local", {"export": ["PATH", "VIRTUAL_ENV"]})), SITES)
    refused = [r for r in LaunchPlan(host, RankLayout(1), PROGRAM, environment={}).evaluate() if r.status == "FAIL"]
    assert [(r.rule, r.key, r.evidence) for r in refused] == [
        ("export-set", "export[0]", "PATH is not set in the launching shell"),
        ("export-set", "export[1]", "VIRTUAL_ENV is not set in the launching shell"),
    ]
