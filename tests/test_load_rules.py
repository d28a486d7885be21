"""Every combination judgement is a rule of the one engine: loading refuses a site or recipe only
through the rules marked on_load, and `hpcbundle rules` lists them all (tests/test_architecture.py keeps the floors)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hpcbundle.config import recipes, sites
from hpcbundle.config.errors import UserError
from hpcbundle.config.sites import Site
from hpcbundle.diagnose.gate.probe import expect
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.rules import engine
from hpcbundle.rules.engine import RULES, Facts, Result, evaluate, registered
from hpcbundle.rules.loading import load_failures, load_recipe, load_site

from .helpers import (
    RECIPES,
    ROOT,
    SHIPPED,
    SHIPPED_RECIPES,
    SITES,
    assert_golden,
    bad_site,
    hpcbundle,
    make_site,
    recipe,
    recipe_data,
    write_recipe,
)

# One bad site per on_load site rule: (rule, shipped base site, dotted edits).
BAD_SITES: list[tuple[str, str, dict[str, Any]]] = [
    ("rsh-agent-words", "local", {"mca.plm_rsh_agent": "ssh -o 'Port=22"}),
    ("mca-open-mpi", "stampede2-knl", {"mca": {"btl": "self,tcp"}}),
    ("export-or-env", "local", {"export": ["OMP_NUM_THREADS"], "env.OMP_NUM_THREADS": "4"}),
    ("gpu-model", "ib-v100", {"node.gpu_model": None}),
    ("wrapper-command", "local", {"wrappers": [["-c", "0-3"]]}),
    ("gate-threshold", "local", {"gate": {"threshold": 2}}),
    ("why-keys", "local", {"why": {"env.NCCL_SOCKT_IFNAME": "typo"}}),
    ("launcher-known", "ib-v100", {"launcher.name": "mpirn"}),
    ("launcher-options", "eth-a100-slurm", {"launcher.gloo": True}),
    ("open-mpi-syntax", "ib-v100", {"mpi.version": "5.0.3"}),
    ("launcher-mca", "ib-v100", {"launcher": {"name": "horovodrun"}}),
    ("launcher-interfaces", "eth-a100-slurm", {"launcher": {"name": "horovodrun"}, "env.NCCL_SOCKET_IFNAME": "eth0"}),
    ("runtime-known", "ib-v100", {"container.runtime": "singulrity"}),
    ("srun-plugin-runtime", "ib-v100", {"container.runtime": "pyxis"}),
    ("srun-plugin-runtime", "slurm-pyxis-h100", {"launcher.pmi": "none"}),
    ("srun-plugin-runtime", "slurm-pyxis-h100", {"container.binds": ["/data,x"]}),
    ("rdma-on-tcp", "eth-a100-slurm", {"env.NCCL_IB_HCA": "mlx5_0"}),
    ("cpus-per-rank", "eth-a100-slurm", {"node.cpus_per_rank": 17}),
    ("gpu-numa-map", "roce-h100-ompi5", {"node.gpu_numa": [0, 0, 0, 0, 1, 1, 1, 1, 1]}),
    ("stall-bound", "local", {"faults": {"stall_seconds": 600}, "launcher.timeout": 600}),
    ("signal-lead", "eth-a100-slurm", {"faults.signal_before_end": 3600, "slurm.time": "60"}),
    ("elastic-horovodrun", "eth-cpu-elastic", {"launcher.gloo": False}),
    ("elastic-horovodrun", "eth-cpu-elastic", {"faults.elastic.min_np": 9}),
    ("elastic-horovodrun", "eth-cpu-elastic", {"faults.elastic.cooldown": [600, 60]}),
    ("elastic-horovodrun", "local", {"faults": {"elastic": {"min_np": 1, "discovery": "hostfile"}}}),
    ("torch-port", "ib-v100", {"torch.port": 40000}),
    ("gloo-ifname", "ib-v100", {"env.GLOO_SOCKET_IFNAME": "^lo"}),
]
# One bad recipe per on_load recipe rule: (rule, shipped base recipe, key path, value).
BAD_RECIPES: list[tuple[str, str, tuple[str, ...], Any]] = [
    ("without-horovod", "cpu-ddp", ("frameworks",), {"tensorflow": {"version": "2.15.1", "package": "tensorflow-cpu"}}),
    ("without-horovod", "cpu-local", ("mpi",), None),
    ("mpi-install", "cuda11.8-tf2.14-torch2.1", ("mpi", "install"), "distro"),
    ("build-env-derived", "cpu-local", ("horovod", "build_env"), {"HOROVOD_WITH_MXNET": "1"}),
    ("ucx-open-mpi", "cuda12.2-tf2.15-torch2.1-ucx", ("mpi", "flavour"), "mpich"),
    ("cuda-route", "cuda12.6-torch2.9", ("base", "runtime_image"), "ubuntu:22.04"),
    ("verbs-runtime", "cuda12.2-tf2.15-torch2.1-ucx", ("fabric_libs",), []),
    ("user-packages", "cpu-local", ("python_packages",), ["torch==2.12.0"]),
    ("torchvision-pairing", "cuda12.6-torch2.9", ("frameworks", "pytorch", "torchvision"), "0.23.0"),
]


def _bad_recipe(directory: Path, base: str, path: tuple[str, ...], value: Any) -> Path:
    data = recipe_data(base)
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return write_recipe(directory, data)


def _refused_by(caught: pytest.ExceptionInfo[UserError], where: Path, facts: Facts, rule: str) -> None:
    """The refusal is one `FILE: KEY: problem (fix)` line per FAIL of the on_load rules, `rule` among them."""
    failures = load_failures(facts)
    assert rule in {f.rule for f in failures}
    assert all(line.startswith(f"{where}: ") for line in caught.value.lines)
    assert len(caught.value.lines) == len(failures)


@pytest.mark.parametrize("rule, base, edit", BAD_SITES, ids=[case[0] for case in BAD_SITES])
def test_a_bad_site_is_refused_by_its_rule(tmp_path, rule, base, edit):
    path = bad_site(tmp_path, base, edit)
    with pytest.raises(UserError) as caught:
        load_site(str(path), SITES)
    _refused_by(caught, path, Facts(site=sites.read_site(str(path), SITES)), rule)


@pytest.mark.parametrize("section", ["horovod", "mpi"])
def test_a_section_written_as_none_is_refused_saying_to_leave_it_out(tmp_path, section):
    file = _bad_recipe(tmp_path, "cpu-ddp", (section,), "none")
    with pytest.raises(UserError) as caught:
        load_recipe(str(file), RECIPES)
    assert list(caught.value.lines) == [
        f"{file}: {section}: none is not a section: an image without {section} leaves the {section} section out "
        "(delete the line)"
    ]


@pytest.mark.parametrize("rule, base, path, value", BAD_RECIPES, ids=[case[0] for case in BAD_RECIPES])
def test_a_bad_recipe_is_refused_by_its_rule(tmp_path, rule, base, path, value):
    file = _bad_recipe(tmp_path, base, path, value)
    with pytest.raises(UserError) as caught:
        load_recipe(str(file), RECIPES)
    _refused_by(caught, file, Facts(site=None, recipe=recipes.read_recipe(str(file), RECIPES)), rule)


def test_every_load_rule_has_a_bad_case():
    """The rules over a launch request have theirs in tests/test_request_rules.py."""
    covered = {case[0] for case in BAD_SITES} | {case[0] for case in BAD_RECIPES}
    assert covered == {r.name for r in registered() if r.on_load and "request" not in r.needs}


def test_without_the_load_rules_every_bad_combination_loads(tmp_path, monkeypatch):
    """The loaders' only source of combination refusals is the engine: take the on_load rules out of
    the registry and every bad site and recipe above loads. A check put back into config/ (or
    anywhere beside the engine) would still refuse one of them and fail this test."""
    registered()  # import every family first, so none registers after the patch
    monkeypatch.setattr(engine, "RULES", [r for r in RULES if not r.on_load])
    for index, (_, base, edit) in enumerate(BAD_SITES):
        directory = tmp_path / f"site{index}"
        directory.mkdir()
        assert isinstance(load_site(str(bad_site(directory, base, edit)), SITES), Site)
    for index, (_, base, path, value) in enumerate(BAD_RECIPES):
        directory = tmp_path / f"recipe{index}"
        directory.mkdir()
        assert load_recipe(str(_bad_recipe(directory, base, path, value)), RECIPES).name == base


def _on_load_results(facts: Facts) -> dict[str, list[Result]]:
    """The results of the on_load rules over `facts` in one engine pass, by rule name."""
    on_load = {r.name for r in registered() if r.on_load}
    found: dict[str, list[Result]] = {}
    for result in evaluate(facts, knowledge_base()):
        name = result.rule.split(" ", 1)[0]
        if name in on_load:
            found.setdefault(name, []).append(result)
    return found


@pytest.mark.parametrize("kind, name", [("site", s) for s in SHIPPED] + [("recipe", r) for r in SHIPPED_RECIPES])
def test_a_shipped_file_passes_or_skips_saying_why(kind, name):
    """No on_load rule FAILs a shipped site or recipe, and a SKIP says why, never what the rule states."""
    facts = Facts(site=load_site(name, SITES)) if kind == "site" else Facts(site=None, recipe=recipe(name))
    summaries = {r.name: r.summary for r in registered()}
    for rule, results in _on_load_results(facts).items():
        assert {r.status for r in results} <= {"PASS", "SKIP"}, results
        assert all(r.evidence and r.evidence != summaries[rule] for r in results if r.status == "SKIP"), results


# (rule, what it judges: a shipped recipe, or a shipped site with dotted edits, the SKIP's evidence) where
# the rule has nothing to judge, or another rule refuses the same thing first.
NOTHING_TO_JUDGE: list[tuple[str, str, dict[str, Any] | None, str]] = [
    ("ucx-open-mpi", "cpu-local", None, "the recipe sets no ucx"),
    ("cuda-route", "cpu-local", None, "CPU-only recipe"),
    ("elastic-horovodrun", "local", {}, "the site sets no faults.elastic"),
    ("launcher-interfaces", "local", {}, "the site names no network.interfaces"),
    ("launcher-options", "ib-v100", {"launcher.name": "mpirn"}, "rule launcher-known refuses"),
    ("launcher-mca", "ib-v100", {"launcher.name": "mpirn"}, "rule launcher-known refuses"),
    ("open-mpi-syntax", "ib-v100", {"mpi.flavour": "mpich"}, "rule launcher-known refuses"),
    ("srun-plugin-runtime", "ib-v100", {"container.runtime": "singulrity"}, "rule runtime-known refuses"),
]


@pytest.mark.parametrize("rule, base, edit, why", NOTHING_TO_JUDGE, ids=[f"{c[0]}-{c[1]}" for c in NOTHING_TO_JUDGE])
def test_a_rule_with_nothing_to_judge_skips_saying_why(tmp_path, rule, base, edit, why):
    if edit is None:
        facts = Facts(site=None, recipe=recipe(base))
    else:
        facts = Facts(site=sites.read_site(str(bad_site(tmp_path, base, edit)), SITES))
    (result,) = _on_load_results(facts)[rule]
    assert (result.status, result.evidence[: len(why)]) == ("SKIP", why)


@pytest.mark.parametrize(
    "base, edit, refused",
    [
        ("ib-v100", {"launcher.name": "mpirn"}, "launcher.name: unknown launcher 'mpirn'"),
        ("local", {"mpi.flavour": "mpich"}, "launcher.name: mpirun cannot start mpich ranks"),
        ("ib-v100", {"container.runtime": "singulrity"}, "container.runtime: unknown container runtime 'singulrity'"),
    ],
)
def test_an_unknown_launcher_or_runtime_is_one_refusal(tmp_path, base, edit, refused):
    """The rules over what the launcher or runtime can do stand aside: the site is refused once, for the name."""
    path = bad_site(tmp_path, base, edit)
    with pytest.raises(UserError) as caught:
        load_site(str(path), SITES)
    (line,) = caught.value.lines
    assert line.startswith(f"{path}: {refused}")


def test_rules_lists_every_rule_with_its_needs_and_source():
    result = hpcbundle("rules")
    assert result.returncode == 0, result.stderr
    assert_golden(ROOT / "tests" / "golden" / "rules.txt", result.stdout)
    listed = {line.split()[0] for line in result.stdout.splitlines()[1:] if not line.startswith(" ")}
    assert listed == {r.name for r in registered()}


def _site(**keys: Any) -> Site:
    """A two-node Open MPI GPU site on ethernet that names no interface in network.interfaces."""
    return make_site(**{"network": {"fabric": "ethernet"}} | keys)


def test_the_gate_expects_interfaces_a_site_names_only_through_mca_or_env():
    by_mca = expect(_site(mca={"btl_tcp_if_include": "data0", "oob_tcp_if_include": "mgmt0"}))
    assert (by_mca.interfaces, by_mca.interface_keys) == (("data0",), ("mca.btl_tcp_if_include",))
    by_env = expect(_site(env={"NCCL_SOCKET_IFNAME": "=data0", "UCX_NET_DEVICES": "data1,mlx5_0:1"}))
    assert (by_env.interfaces, by_env.interface_keys) == (
        ("data0", "data1"),
        ("env.NCCL_SOCKET_IFNAME", "env.UCX_NET_DEVICES"),
    )
    excluded = expect(_site(env={"GLOO_SOCKET_IFNAME": "^lo,docker0"}))
    assert excluded.interfaces == ()
    by_network = expect(_site(network={"fabric": "ethernet", "interfaces": ["data0"]}))
    assert (by_network.interfaces, by_network.interface_keys) == (("data0",), ("network.interfaces",))
