"""Property: whatever the program's arguments, bash hands the program exactly those arguments,
from the printed launch line and from the sbatch script's launch line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcbundle.config.errors import UserError
from hpcbundle.launch import RankLayout, build_command, load_site, parse_hosts
from hpcbundle.launch.batch import BatchJob, batch_plan, sbatch_script, script_environment
from hpcbundle.launch.layout import MAX_HOSTS

from .helpers import ROOT, bash_argv, examples

SITES = ROOT / "site_configs"
LAYOUTS: dict[str, tuple[RankLayout, str | None]] = {
    "local": (RankLayout(2), None),
    "local-charliecloud": (RankLayout(2), "/var/tmp/my image"),
    "ib-v100": (RankLayout(4, (("f1", 2), ("f2", 2))), "horovod.sif"),
    "ib-a100-ucx": (RankLayout(8, (("g1", 4), ("g2", 4))), "horovod.sif"),
    "stampede2-knl": (RankLayout(2, in_allocation=True), "horovod.sif"),
    "eth-a100-slurm": (RankLayout(8), "/scratch/$USER/horovod.sif"),
    "roce-h100-ompi5": (RankLayout(16, (("a", 8), ("b", 8))), "horovod.sif"),
    "slurm-pyxis-h100": (RankLayout(16), "registry.example.org#team/horovod:cuda13"),
    "seed-v100": (RankLayout(4, (("f1", 2), ("f2", 2))), "horovod.sif"),
    "eth-cpu-elastic": (
        RankLayout(4, in_allocation=True, discovery_script="./hpcbundle-discover-hosts.sh"),
        "/scratch/$USER/cpu.sif",
    ),
}
TRICKY = [
    " ",
    "'",
    '"',
    "$HOME",
    "${x:-y}",
    "`id`",
    "$(touch /tmp/hpcbundle-pwned)",
    "\n",
    "a\nb",
    "\\",
    "-x",
    "--",
    "-np",
    "--mca",
    "*",
    "~",
    "!",
    "#",
    ";",
    "|",
    "&",
    "<",
    ">",
    "ü",
    "日本語",
    "\t",
    "\r",
    "%s",
    "''",
    '\\"',
    "=",
    "a=b",
    "{a,b}",
]
argument = st.one_of(
    st.sampled_from(TRICKY),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=16),
)
program = st.tuples(argument.filter(lambda a: a != "" and not a.startswith("-")), st.lists(argument, max_size=6)).map(
    lambda t: [t[0], *t[1]]
)
MODELS = {name: load_site(name, SITES) for name in LAYOUTS}
TEMPLATES = script_environment(ROOT / "scripts")
FAST = settings(
    max_examples=examples(2000),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def test_every_shipped_site_is_exercised():
    assert sorted(LAYOUTS) == sorted(p.stem for p in SITES.glob("*.yaml"))


@FAST
@given(site=st.sampled_from(sorted(LAYOUTS)), words=program)
def test_printed_launch_line_parses_back_to_the_same_argv(site, words):
    layout, image = LAYOUTS[site]
    command = build_command(MODELS[site], layout, words, image)
    assert bash_argv("printf '%s\\0' " + command.display()) == command.argv
    assert command.argv[-len(words) :] == words


@pytest.fixture(scope="module")
def fake_sites(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shipped sites whose launcher is a fake that prints its arguments NUL-separated (no modules, no prologue)."""
    assert shutil.which("bash"), "bash is needed to run the generated scripts"
    directory = tmp_path_factory.mktemp("fake-sites")
    fake = directory / "fake launcher"
    fake.write_text("#!/bin/sh\nprintf '%s\\0' \"$@\"\n")
    fake.chmod(0o755)
    for name in ("local", "stampede2-knl", "eth-a100-slurm", "roce-h100-ompi5"):
        data = yaml.safe_load((SITES / f"{name}.yaml").read_text())
        data["launcher"]["command"] = str(fake).replace(" ", "_")
        data.setdefault("slurm", {}).update(modules=[], prologue=[])
        (directory / f"{name}.yaml").write_text(yaml.safe_dump(data))
    (directory / "fake_launcher").symlink_to(fake)  # launcher.command is one word: no spaces
    return directory


@pytest.fixture(scope="module")
def fake_models(fake_sites: Path) -> dict:
    return {
        name: load_site(name, fake_sites) for name in ("local", "stampede2-knl", "eth-a100-slurm", "roce-h100-ompi5")
    }


@FAST
@given(site=st.sampled_from(["local", "stampede2-knl", "eth-a100-slurm", "roce-h100-ompi5"]), words=program)
def test_sbatch_script_launch_line_hands_the_program_the_same_argv(fake_models, site, words):
    model = fake_models[site]
    image = None if site == "local" else "dir with space/horovod.sif"
    job = BatchJob(nodes=2)
    script = sbatch_script(batch_plan(model, job, words, image), job, TEMPLATES)
    per_node = model.node.slots
    layout = RankLayout(2 * per_node, in_allocation=True, cpus_per_rank=model.node.cpus_for(per_node))
    argv = build_command(model, layout, words, image).argv
    launcher_at = argv.index(model.launcher.command)
    assert bash_argv(script) == argv[launcher_at + 1 :]


_index = st.integers(min_value=0, max_value=10**3000).map(str)


@given(
    ranges=st.lists(st.tuples(_index, _index), min_size=1, max_size=4),
    brackets=st.integers(min_value=1, max_value=3),
    slots=st.one_of(st.none(), _index),
)
def test_any_host_list_expands_within_the_bound_or_is_a_one_line_error(ranges, brackets, slots):
    listing = "[" + ",".join(f"{low}-{high}" for low, high in ranges) + "]"
    text = "n" + "x".join([listing] * brackets) + (f":{slots}" if slots is not None else "")
    try:
        hosts = parse_hosts(text)
    except UserError as error:
        assert "\n" not in str(error) and str(error).startswith("--hosts: ")
    else:
        assert 0 < len(hosts) <= MAX_HOSTS


@given(text=st.text(alphabet="n01-9[],:@!&^* .", max_size=40))
def test_any_hosts_text_parses_or_is_a_one_line_error(text):
    try:
        hosts = parse_hosts(text)
    except UserError as error:
        assert "\n" not in str(error)
    else:
        assert 0 < len(hosts) <= MAX_HOSTS
