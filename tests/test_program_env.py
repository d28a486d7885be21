"""The program environment, pure and fast: what the launch line forwards, what site detect drafts,
what a bad export list gets, and how the program-env rule judges the probe's answers.

The real thing (sshd on every node, the probe through Open MPI over ssh) is tests/test_ssh_cluster.py.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hpcbundle.config.bundle import find_bundle
from hpcbundle.config.errors import UserError
from hpcbundle.config.loading import parse_yaml, validate
from hpcbundle.config.sites import Site
from hpcbundle.diagnose.detect import draft_site
from hpcbundle.diagnose.program import SHELL_PROBE, parse_probe, probe_words
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.launch import RankLayout, load_site
from hpcbundle.rules.engine import Facts, evaluate

from .helpers import ROOT, hpcbundle_argv, observed, planned, shellcheck
from .helpers import SMALL_SITE as SITE

SITES = find_bundle(None, ROOT).sites_dir
VENV = {"kind": "python", "executable": "/srv/venv/bin/python3", "prefix": "/srv/venv"}


def rank(host: str, executable: str = "/srv/venv/bin/python3", **modules) -> dict:
    prefix = str(Path(executable).parent.parent)
    found = {"horovod": "0.28.1", "torch": "2.13.0", **modules}
    return {"kind": "python", "host": host, "rank": "0", "executable": executable, "prefix": prefix, "modules": found}


def judge(nodes: dict, *, export=(), here=None, image=None, runtime="none", reference="this node") -> str:
    data = {**copy.deepcopy(SITE), "export": list(export), "container": {"runtime": runtime}}
    probe = {"argv0": "python3", "reference": reference, "launching": here or rank("node1"), "nodes": nodes}
    facts = Facts(site=Site.model_validate(data), observed=True, program=probe, image_path=image)
    return next(r.line() for r in evaluate(facts, knowledge_base()) if r.rule == "program-env")


def test_probe_run_here_reports_the_interpreter_and_versions_it_resolves():
    words = probe_words(Path(sys.executable).name, ["horovod", "no_such_module_x"])
    words[4] = sys.executable  # this interpreter, wherever PATH points
    out = subprocess.run(words, capture_output=True, text=True, timeout=60, check=True).stdout
    [found] = parse_probe(out)
    assert found["kind"] == "python" and found["executable"] == sys.executable and found["prefix"] == sys.prefix
    assert found["modules"]["no_such_module_x"] is None
    missing = subprocess.run(probe_words("no-such-program-x", []), capture_output=True, text=True, timeout=60)
    assert parse_probe(missing.stdout)[0]["kind"] == "missing"


def test_the_probes_shell_passes_shellcheck():
    assert shellcheck(SHELL_PROBE, "sh") == []


def test_ranks_with_the_login_interpreter_fail_naming_node_interpreter_and_fix():
    line = judge({"node1": rank("node1"), "node2": rank("node2", "/usr/bin/python3", horovod=None, torch=None)})
    assert line == (
        "FAIL  program-env          python3 on node2: /usr/bin/python3 (no horovod, no torch) "
        "(as the launcher starts it; this node: /srv/venv/bin/python3 (horovod 0.28.1, torch 2.13.0)); "
        "add PATH (and VIRTUAL_ENV or CONDA_PREFIX) to export in site t (`hpcbundle site detect` drafts it), "
        "with the same venv path on every node"
    )


def test_nodes_that_found_the_same_interpreter_are_named_together():
    login = rank("n", "/usr/bin/python3", horovod=None, torch=None)
    line = judge({"node2": login, "node3": login, "node4": rank("node4", torch="2.12.0")})
    assert "python3 on node2, node3: /usr/bin/python3 (no horovod, no torch); python3 on node4: " in line


def test_a_different_framework_version_or_a_missing_program_fails_too():
    assert "torch 2.12.0" in judge({"node2": rank("node2", torch="2.12.0")}, export=["PATH"])
    assert "install the same venv" in judge({"node2": rank("node2", torch="2.12.0")}, export=["PATH"])
    missing = {"kind": "missing", "host": "node3", "rank": "2", "path": "/usr/bin:/bin"}
    assert "python3 on node3: not found on PATH" in judge({"node3": missing})
    assert "node2: the probe rank did not report (exit 1)" in judge(
        {"node2": {"error": "the probe rank did not report (exit 1): x"}}
    )


def test_in_an_image_the_first_nodes_rank_is_the_reference_and_the_fix_is_the_image():
    in_image = rank("node1", "/opt/venv/bin/python3")
    reference = "node1 (the image as the launcher starts it)"
    nodes = {"node1": in_image, "node2": rank("node2", "/opt/venv/bin/python3", torch="2.1.2")}
    line = judge(nodes, here=in_image, image="/img.sif", runtime="singularity", reference=reference)
    assert line == (
        "FAIL  program-env          python3 on node2: /opt/venv/bin/python3 (horovod 0.28.1, torch 2.1.2) "
        f"(as the launcher starts it; {reference}: /opt/venv/bin/python3 (horovod 0.28.1, torch 2.13.0)); "
        "use an image that has the program at that path, the same image on every node"
    )


def test_the_same_interpreter_and_modules_everywhere_pass():
    assert judge({"node1": rank("node1"), "node2": rank("node2")}) == (
        "PASS  program-env          python3 -> /srv/venv/bin/python3 (horovod 0.28.1, torch 2.13.0) "
        "on node1, node2, as on this node"
    )


def test_launch_line_forwards_the_exported_program_environment_and_explains_it():
    site = load_site("local", SITES).model_copy(update={"export": ["PATH", "VIRTUAL_ENV"]})
    launching = {"PATH": "/v/bin", "VIRTUAL_ENV": "/v"}
    command = planned(site, RankLayout(2, (("n1", 1), ("n2", 1))), ["python3", "t.py"], None, launching)
    assert "-x PATH -x VIRTUAL_ENV" in command.display()
    explained = "\n".join(command.explain())
    assert "over ssh a rank starts with the login shell's PATH" in explained
    assert "remote ranks run in the launching shell's virtualenv" in explained


def test_an_exported_variable_unset_in_the_launching_shell_is_one_line_naming_it():
    site = load_site("local", SITES).model_copy(update={"export": ["PATH", "CONDA_PREFIX"]})
    with pytest.raises(UserError) as caught:
        planned(site, RankLayout(2), ["python3", "t.py"], None, {"PATH": "/usr/bin"})
    assert list(caught.value.lines) == [
        f"{site.where}: export[1]: CONDA_PREFIX is not set in the launching shell "
        "(activate the conda env (conda activate ENV) in the launching shell, or drop CONDA_PREFIX from export)"
    ]


def test_cli_exec_refuses_an_unset_export_with_exit_2_and_starts_nothing(tmp_path: Path):
    data = yaml.safe_load((SITES / "local.yaml").read_text())
    data |= {"name": "venv-site", "export": ["PATH", "VIRTUAL_ENV"]}
    site = tmp_path / "venv-site.yaml"
    site.write_text(yaml.safe_dump(data))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src")}
    argv = hpcbundle_argv("launch", "--site", str(site), "--np", "1")
    result = subprocess.run(
        [*argv, "--exec", "--", "touch", str(tmp_path / "ran")], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"hpcbundle: error: {site}: export[1]: VIRTUAL_ENV is not set in the launching shell "
        "(activate the venv (source VENV/bin/activate) in the launching shell, or drop VIRTUAL_ENV from export)"
    ]
    assert not (tmp_path / "ran").exists()


def test_container_line_keeps_the_images_environment():
    ib = load_site("ib-v100", SITES)
    command = planned(ib, RankLayout(2, (("f1", 1), ("f2", 1))), ["python", "t.py"], "h.sif")
    assert "-x LD_LIBRARY_PATH -x PATH" in command.display()  # singularity keeps the image's own inside
    roce = load_site("roce-h100-ompi5", SITES)
    explained = "\n".join(planned(roce, RankLayout(8), ["python", "t.py"], "h.sif").explain())
    assert "on the host only: apptainer keeps the image's own PATH inside" in explained
    venv = ib.model_copy(update={"export": ["PATH", "VIRTUAL_ENV"]})
    with pytest.raises(UserError) as caught:
        planned(venv, RankLayout(2, (("f1", 1), ("f2", 1))), ["python", "t.py"], "h.sif")
    assert list(caught.value.lines) == [
        f"{ib.where}: export[1]: VIRTUAL_ENV of the launching shell would replace the image's own in singularity "
        "containers (drop VIRTUAL_ENV from export: the image provides the program's environment)"
    ]
    assert planned(venv, RankLayout(2, (("f1", 1), ("f2", 1))), ["python", "t.py"]).argv[-2:] == ["python", "t.py"]


def test_charliecloud_keeps_the_images_path_only_with_set_env():
    ch = load_site("local-charliecloud", SITES).model_copy(update={"export": ["PATH"]})
    line = planned(ch, RankLayout(2), ["python3", "t.py"], "/img").display()
    assert "-x PATH " in line and "ch-run --set-env /img -- python3 t.py" in line
    bare = ch.model_copy(update={"container": ch.container.model_copy(update={"args": []})})
    with pytest.raises(UserError, match=r"export\[0\]: PATH of the launching shell would replace the image's own"):
        planned(bare, RankLayout(2), ["python3", "t.py"], "/img")


def test_site_detect_drafts_the_program_environment_to_export_marked_confirm():
    env = {"PATH": "/srv/venv/bin:/usr/bin", "VIRTUAL_ENV": "/srv/venv", "CONDA_PREFIX": ""}
    text = draft_site(observed(program_env=env), "drafted")
    assert "export:  # CONFIRM: what the launching shell holds (mpirun -x)" in text
    assert "  - PATH  # /srv/venv/bin:/usr/bin\n  - VIRTUAL_ENV  # /srv/venv\n" in text
    assert validate(Site, parse_yaml(text, "draft"), "draft").export == ["PATH", "VIRTUAL_ENV"]
    assert "export:" not in draft_site(observed(), "bare")
