"""One rule engine: `check --site` (declared facts) and `doctor` (observed facts) are two front ends
over the same rules."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json

import pytest

from hpcbundle.config.recipes import Recipe
from hpcbundle.config.sites import Site
from hpcbundle.diagnose.doctor import observed_facts
from hpcbundle.image.derive import image_spec, runtime_stage
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.launch import load_site
from hpcbundle.rules.engine import RULES, Facts, HeadProbe, LaunchRequest, Result, applicable, evaluate
from hpcbundle.rules.facts import declared_facts, declared_node
from hpcbundle.rules.loading import all_recipes

from .helpers import RECIPES, ROOT

KB = knowledge_base()
SITES_DIR = ROOT / "site_configs"
SHIPPED_RECIPES = all_recipes(RECIPES)
SHIPPED_SITES = [load_site(path.stem, SITES_DIR) for path in sorted(SITES_DIR.glob("*.yaml"))]
PAIRS = list(itertools.product(SHIPPED_RECIPES, SHIPPED_SITES))
# The facts a site and a recipe can declare; rules that need more read the build spec or the nodes themselves.
DECLARABLE = {"image", "site", "nodes"}


def observed_as_declared(recipe: Recipe, site: Site) -> dict:
    """What doctor would observe on one node if the site's declaration is true and the recipe's image is there."""
    manifest = json.loads(runtime_stage(image_spec(recipe, KB)).manifest)
    image = {"path": "/img", "exists": True, "kind": "dir", "manifest": manifest, "sha256": "a" * 64}
    return {"node1": {**declared_node(site, KB), "image": image}}


def check_front_end(recipe: Recipe, site: Site) -> list[Result]:
    return evaluate(declared_facts(recipe, site, KB), KB)


def doctor_front_end(recipe: Recipe, site: Site) -> list[Result]:
    return evaluate(observed_facts(site, observed_as_declared(recipe, site), image="/img"), KB)


def test_every_rule_runs_from_each_front_end_that_has_its_facts():
    recipe, site = SHIPPED_RECIPES[0], SHIPPED_SITES[0]
    request = LaunchRequest(np=2, image="/img")  # check --np 2 --image /img; doctor --image /img
    from_check = {r.name for r in applicable(dataclasses.replace(declared_facts(recipe, site, KB), request=request))}
    observed = observed_facts(
        site,
        observed_as_declared(recipe, site),
        image="/img",
        hosts={"node1": 1},
        program_env={"argv0": "python3", "launching": {}, "nodes": {}},
        request=request,  # judged again only with the image read back (rules over both)
        head=HeadProbe("node1", "data0", 29500),  # doctor --torch --hosts node1
    )
    planned = Facts(site=site, request=request)  # doctor's launch plan, judged before the nodes are observed
    from_doctor = {r.name for r in applicable(observed) + applicable(planned)}
    for r in RULES:
        if r.needs <= DECLARABLE | {"request"}:  # the launch request: both take one
            assert r.name in from_check and r.name in from_doctor, r.name
        elif "recipe" in r.needs:  # the build spec: only check has it (a built image is judged by its labels)
            assert r.name in from_check and r.name not in from_doctor, r.name
        else:  # what only observing the nodes or the planned ranks shows
            assert r.name in from_doctor and r.name not in from_check, r.name
    assert from_check | from_doctor == {r.name for r in RULES}


@pytest.mark.parametrize("recipe, site", PAIRS, ids=[f"{r.name}@{s.name}" for r, s in PAIRS])
def test_check_and_doctor_give_every_shared_rule_the_same_status_for_the_same_facts(recipe, site):
    shared = {r.name for r in RULES if r.needs <= DECLARABLE}
    declared = {r.rule: r.status for r in check_front_end(recipe, site) if r.rule in shared}
    observed = {r.rule: r.status for r in doctor_front_end(recipe, site) if r.rule in shared}
    assert declared == observed
    assert set(declared) == shared


def _gpu_node(site: Site, **gpu) -> dict:
    node = copy.deepcopy(declared_node(site, KB))
    node["gpu"] |= gpu
    return {"node1": node}


@pytest.mark.parametrize(
    "change, status, words",
    [
        (
            {"present": False, "gpus": [], "note": "nvidia-smi not found"},
            "FAIL",
            "node1 has 0 GPUs (nvidia-smi not found); the site says node.gpus: 4",
        ),
        ({"gpus": [{"name": "NVIDIA A100-SXM4-80GB", "capability": "8.0"}] * 2}, "FAIL", "node1 has 2 GPUs"),
        (
            {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "capability": "9.0"}] * 4},
            "WARN",
            "the site says gpu_model: A100",
        ),
        ({"driver": "580.159.04"}, "WARN", "node1 runs driver 580.159.04; the site says node.driver: 535.104.05"),
    ],
)
def test_doctor_says_where_the_nodes_contradict_the_sites_gpus_and_driver(change, status, words):
    site = load_site("eth-a100-slurm", SITES_DIR)
    result = {r.rule: r for r in evaluate(observed_facts(site, _gpu_node(site, **change)), KB)}["declared-gpus"]
    assert result.status == status and words in result.evidence, result.line()


def test_doctor_says_where_the_nodes_mpi_version_contradicts_the_site():
    site = load_site("local", SITES_DIR)
    node = copy.deepcopy(declared_node(site, KB))
    node["mpi"] = {"flavour": "openmpi", "version": "4.1.6", "evidence": "`mpirun --version`: mpirun (Open MPI) 4.1.6"}
    result = {r.rule: r for r in evaluate(observed_facts(site, {"node1": node}), KB)}["host-mpi"]
    assert (result.status, result.evidence) == ("WARN", "4.1.6 found; the site says openmpi 4.1.4")
    assert result.fix == 'set mpi.version: "4.1.6" in the site (or load that version)'


def test_doctor_leaves_the_host_mpi_alone_where_the_ranks_talk_over_gloo():
    site = load_site("eth-cpu-elastic", SITES_DIR)
    node = copy.deepcopy(declared_node(site, KB))
    node["mpi"] = {"flavour": "mpich", "version": "4.0", "evidence": "`mpirun --version`: HYDRA build details"}
    result = {r.rule: r for r in evaluate(observed_facts(site, {"node1": node}), KB)}["host-mpi"]
    assert result.status == "SKIP"
    assert result.evidence == "the ranks talk over Gloo (horovodrun with launcher.gloo), not MPI"


def test_a_rule_that_fails_in_check_fails_in_doctor_on_the_real_gpu_of_an_h100_host():
    """The same gpu-arch rule refuses a V100/A100-only image on an H100, declared or observed."""
    recipe = next(r for r in SHIPPED_RECIPES if r.name == "cuda11.8-tf2.14-torch2.1")
    site = load_site("roce-h100-ompi5", SITES_DIR)
    declared = {r.rule: r for r in check_front_end(recipe, site)}["gpu-arch"]
    nodes = observed_as_declared(recipe, site)
    nodes["node1"]["gpu"] = {
        "present": True,
        "driver": "580.159.04",
        "note": "",
        "gpus": [{"name": "NVIDIA H100 80GB HBM3", "capability": "9.0"}] * 8,
    }
    observed = {r.rule: r for r in evaluate(observed_facts(site, nodes, image="/img"), KB)}["gpu-arch"]
    assert declared.status == observed.status == "FAIL"
    assert observed.evidence == "node1 has NVIDIA H100 80GB HBM3 (compute capability 9.0); the recipe builds 7.0, 8.0"
    assert declared.fix == observed.fix == "add 9.0 to gpu.archs"
