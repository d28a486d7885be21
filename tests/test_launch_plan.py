"""One launch plan, judged once: every command that makes a plan (launch, sbatch, sbatch --gate, check, tune,
scaling plan, doctor) runs the rule engine over its request once, no rule twice; and `check` refuses exactly
what `launch` refuses, for any request on any shipped site."""

from __future__ import annotations

import collections
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcbundle.cli import main
from hpcbundle.launch import LaunchPlan
from hpcbundle.rules.engine import Facts, Result, Rule, registered

from .helpers import ROOT, SHIPPED, examples, make_site

NOT_IN_SLURM = {"SLURM_JOB_ID": None, "SLURM_JOB_NUM_NODES": None}
RECIPE_OF = {  # a recipe whose image suits each site (check judges the pair too)
    "eth-a100-slurm": "cuda12.2-tf2.15-torch2.1-ucx",
    "eth-cpu-elastic": "cpu-local",
    "ib-a100-ucx": "cuda12.2-tf2.15-torch2.1-ucx",
    "ib-v100": "cuda11.8-tf2.14-torch2.1",
    "local": "cpu-local",
    "local-charliecloud": "cpu-local",
    "roce-h100-ompi5": "cuda13.0-torch2.11-ompi5",
    "seed-v100": "cuda11.8-tf2.14-torch2.1",
    "slurm-pyxis-h100": "cuda13.0-torch2.11",
    "stampede2-knl": "knl-intelmpi-tf2.15",
}
ABOUT_THE_IMAGE = {r.name for r in registered() if r.needs & {"recipe", "image"}}
"""Rules over the recipe or the image's labels: only `check` has those facts, `launch` judges a name."""


class Judged:
    """What the rule engine judged while a command ran: each rule's results, and the facts it read."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Facts]] = []
        self.results: list[Result] = []

    def passes_over_the_request(self) -> int:
        """The engine passes that judged a launch request (one Facts each) by the rules over it alone: doctor's
        node pass carries the request too, for the rules over it and the image read back (torch-backend)."""
        alone = {r.name for r in registered() if "request" in r.needs and "image" not in r.needs}
        return len({id(facts) for name, facts in self.calls if facts.request is not None and name in alone})

    def twice(self) -> list[str]:
        return sorted(name for name, count in collections.Counter(name for name, _ in self.calls).items() if count > 1)

    def failed(self) -> set[str]:
        return {r.rule.split(" ", 1)[0] for r in self.results if r.status == "FAIL"}


@contextmanager
def judged(monkeypatch) -> Iterator[Judged]:
    """Record every rule the engine runs (in this process) until the block ends."""
    seen, call = Judged(), Rule.__call__

    def recorded(rule: Rule, facts: Facts, kb) -> list[Result]:
        found = call(rule, facts, kb)
        seen.calls.append((rule.name, facts))
        seen.results += found
        return found

    with monkeypatch.context() as patch:
        patch.setattr(Rule, "__call__", recorded)
        yield seen


def hpcbundle(*args: str, env: dict | None = None):
    return CliRunner().invoke(main, ["--bundle", str(ROOT), *args], env={**NOT_IN_SLURM, **(env or {})})


PROGRAM = ["--", "python3", "t.py"]
COMMANDS = {
    "launch": ["launch", "--site", "ib-v100", "--image", "h.sif", "--np", "4", "--hosts", "f1:2,f2:2", *PROGRAM],
    "launch --torch": ["launch", "--site", "ib-v100", "--np", "4", "--hosts", "f1:2,f2:2", "--torch", *PROGRAM],
    "sbatch --torch": ["sbatch", "--site", "eth-a100-slurm", "--nodes", "2", "--torch", *PROGRAM],
    "launch --torchrun": ["launch", "--site", "ib-v100", "--np", "4", "--hosts", "f1:2,f2:2", "--torchrun", *PROGRAM],
    "sbatch --torchrun": ["sbatch", "--site", "eth-a100-slurm", "--nodes", "2", "--torchrun", *PROGRAM],
    "launch --explain": ["launch", "--site", "stampede2-knl", "--np", "2", "--hosts", "c1,c2", "--explain", *PROGRAM],
    "sbatch": ["sbatch", "--site", "eth-a100-slurm", "--image", "h.sif", "--nodes", "2", *PROGRAM],
    "sbatch --gate": ["sbatch", "--site", "roce-h100-ompi5", "--image", "h.sif", "--nodes", "2", "--gate", *PROGRAM],
    "check": ["check", "cuda11.8-tf2.14-torch2.1", "--site", "ib-v100", "--np", "4", "--hosts", "f1:2,f2:2"],
    "tune --plan": ["tune", "--site", "eth-a100-slurm", "--np", "2", "--plan", "-o", "TMP/tuned.yaml"],
    "scaling plan": ["scaling", "plan", "--site", "eth-a100-slurm", "--nodes", "2", "--mode", "weak", "-o", "TMP/s"],
    "doctor": ["doctor", "--site", "local", "--no-checksum", *PROGRAM],
}


def test_every_command_that_makes_a_plan_judges_its_request_once_and_no_rule_twice(monkeypatch, tmp_path):
    for name, args in COMMANDS.items():
        words = [word.replace("TMP", str(tmp_path)) for word in args]
        env = {"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "2"} if name == "tune --plan" else {}
        with judged(monkeypatch) as seen:
            result = hpcbundle(*words, env=env)
        assert result.exit_code in (0, 1), (name, result.output)
        assert seen.passes_over_the_request() == 1, name
        assert seen.twice() == [], name


def test_check_refuses_the_two_launches_it_used_to_pass_as_launch_refuses_them():
    for recipe, site, hosts in (
        ("cuda11.8-tf2.14-torch2.1", "ib-v100", "f1:3"),
        ("knl-intelmpi-tf2.15", "stampede2-knl", "c1:136"),
    ):
        np_ = hosts.split(":")[1]
        checked = hpcbundle("check", recipe, "--site", site, "--np", np_, "--hosts", hosts, "--image", "h.sif")
        launched = hpcbundle("launch", "--site", site, "--np", np_, "--hosts", hosts, "--image", "h.sif", *PROGRAM)
        assert (checked.exit_code, launched.exit_code) == (2, 2)
        assert f"FAIL  ranks-per-node       --hosts {hosts}: {np_} ranks on {hosts[:2]}" in checked.stdout
        assert launched.stderr.startswith(f"hpcbundle: error: --hosts {hosts}: {np_} ranks on {hosts[:2]} but site")


_host = st.sampled_from(["f1", "f2", "f3", "n01"])
_ranks = st.one_of(
    st.just(("none", ())),
    st.tuples(st.just("hosts"), st.lists(st.tuples(_host, st.integers(1, 12)), min_size=1, max_size=4)),
    st.tuples(st.just("hostfile"), st.lists(st.tuples(_host, st.integers(1, 12)), min_size=1, max_size=4)),
)
_image = st.sampled_from([None, "h.sif", "/scratch/h.sqsh", "-h.sif", "team#h:1", "nvcr.io/nvidia/pytorch:24.05"])
_workdir = st.sampled_from([None, "run", "odd:dir", "missing"])


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    site=st.sampled_from(SHIPPED),
    np_=st.integers(1, 40),
    ranks=_ranks,
    image=_image,
    workdir=_workdir,
    in_slurm=st.booleans(),
    wiring=st.sampled_from([(), ("--torch",), ("--torchrun",), ("--horovod",)]),
)
def test_check_and_launch_refuse_the_same_request_with_the_same_rules(
    monkeypatch, site, np_, ranks, image, workdir, in_slurm, wiring
):
    with tempfile.TemporaryDirectory(prefix="hpcbundle-plan-") as directory:
        args = [*_request_args(Path(directory), np_, ranks, image, workdir), *wiring]
        env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2"} if in_slurm else {}
        with judged(monkeypatch) as by_launch:
            launched = hpcbundle("launch", "--site", site, *args, *PROGRAM, env=env)
        with judged(monkeypatch) as by_check:
            checked = hpcbundle("check", RECIPE_OF[site], "--site", site, *args, env=env)
    launch_fails, check_fails = by_launch.failed(), by_check.failed()
    assert launch_fails == check_fails - ABOUT_THE_IMAGE, (launched.output, checked.output)
    assert launched.exit_code == (2 if launch_fails else 0), launched.output
    if not check_fails & ABOUT_THE_IMAGE:
        assert checked.exit_code == launched.exit_code, checked.output


def _request_args(directory: Path, np_: int, ranks: tuple, image: str | None, workdir: str | None) -> list[str]:
    """The launch flags of one drawn request; the hostfile and working directories made in `directory`."""
    args = ["--np", str(np_)]
    kind, hosts = ranks
    if kind == "hosts":
        args += ["--hosts", ",".join(f"{host}:{slots}" for host, slots in hosts)]
    elif kind == "hostfile":
        (directory / "hosts").write_text("".join(f"{host} slots={slots}\n" for host, slots in hosts))
        args += ["--hostfile", str(directory / "hosts")]
    if image is not None:
        args.append(f"--image={image}")
    if workdir is not None:
        if workdir != "missing":
            (directory / workdir).mkdir()
        args += ["--workdir", str(directory / workdir)]
    return args


def test_doctors_plan_judges_the_ranks_per_host_its_hosts_give():
    """doctor --hosts n1,n2 asks for one rank on each: no node runs two, so a btl without shared memory is fine."""
    site = make_site(node={"cores": 2}, mca={"btl": "self,tcp"})  # a CPU site: two ranks could share a node
    one_each = {r.rule: r.status for r in LaunchPlan(site, hosts={"n1": 1, "n2": 1}).evaluate(observing=True)}
    two_each = {r.rule: r.status for r in LaunchPlan(site, hosts={"n1": 2}).evaluate(observing=True)}
    assert (one_each["btl-shared-memory"], two_each["btl-shared-memory"]) == ("SKIP", "WARN")
