"""hpcbundle-torchenv (knowledge/torchenv.py) run by the real /bin/sh: from every launcher's own variables, random or
missing, the program it execs sees exactly RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE, or nothing runs and
one line says why (exit 2); a stale RANK of the launching shell never wins; shellcheck finds nothing in it."""

from __future__ import annotations

import ast
import re
import signal
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcbundle.knowledge.torchenv import (
    AGENT,
    TORCHENV_INLINE,
    TORCHENV_NAME,
    TORCHENV_SCRIPT,
    TORCHENV_SOURCES,
    agent_words,
    torchenv_words,
)

from .helpers import ROOT, examples, shellcheck

SOURCES = {
    "ompi": (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    "slurm": ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
    "hydra": ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
}
"""Each source's variables for RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (srun(1), Open MPI's and Hydra's docs)."""
TORCH = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
PRINT = ["sh", "-c", 'printf "%s\\n" "$RANK" "$WORLD_SIZE" "$LOCAL_RANK" "$LOCAL_WORLD_SIZE"']
"""The program the shim execs: it prints the four variables it was given."""

DECIMAL = st.from_regex(r"[0-9]{1,7}", fullmatch=True)
TASKS_PER_NODE = st.from_regex(r"[0-9]{1,3}(\(x[0-9]{1,3}\))?(,[0-9]{1,3}(\(x[0-9]\))?)?", fullmatch=True)
"""SLURM's compressed tasks per node, 4(x2),3: the first node's count leads."""
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8)
VALUE = st.one_of(st.none(), DECIMAL, TASKS_PER_NODE, TEXT)
"""A launcher variable: unset (None), a number, SLURM's tasks-per-node form, or anything."""


def _shim(source: str, environment: dict[str, str], program: list[str] = PRINT) -> subprocess.CompletedProcess:
    """The shim as a launch runs it (`sh -c TEXT hpcbundle-torchenv SOURCE PROGRAM...`), by /bin/sh, in tests/data
    (where `python -m torch_agent` finds its module)."""
    words = ["/bin/sh", "-c", TORCHENV_INLINE, TORCHENV_NAME, source, *program]
    return subprocess.run(
        words, env={"PATH": "/usr/bin:/bin", **environment}, capture_output=True, text=True, timeout=30, cwd=DATA
    )


def _expected(source: str, environment: dict[str, str]) -> list[str] | None:
    """The four values the program must see, or None where the shim must refuse (the spec, written apart from it)."""
    values = [environment.get(name) for name in SOURCES[source]]
    if source == "slurm":  # srun's per-step count, else the job's SLURM_TASKS_PER_NODE; the first node's number
        local = environment.get("SLURM_NTASKS_PER_NODE", environment.get("SLURM_TASKS_PER_NODE"))
        values[3] = re.match(r"[0-9]*", local).group() if local is not None else None
    return values if all(v is not None and re.fullmatch(r"[0-9]+", v) for v in values) else None


@st.composite
def launcher_environments(draw) -> tuple[str, dict[str, str]]:
    """A source and the environment a rank starts in: its variables all numbers (often) or each drawn from
    anything; stale torch variables of the launching shell; under slurm maybe the job's SLURM_TASKS_PER_NODE."""
    source = draw(st.sampled_from(TORCHENV_SOURCES))
    names = SOURCES[source]
    kind = DECIMAL if draw(st.booleans()) else VALUE
    drawn = {name: draw(kind) for name in names}
    if source == "slurm" and draw(st.booleans()):
        drawn[names[3]] = None
        drawn["SLURM_TASKS_PER_NODE"] = draw(st.one_of(TASKS_PER_NODE, VALUE))
    drawn |= {name: draw(st.one_of(st.none(), DECIMAL, TEXT)) for name in TORCH}
    return source, {name: value for name, value in drawn.items() if value is not None}


@settings(max_examples=examples(300), deadline=None)
@given(launcher_environments())
def test_the_program_sees_exactly_the_launchers_numbers_or_the_shim_refuses_in_one_line(drawn):
    source, environment = drawn
    run = _shim(source, environment)
    expected = _expected(source, environment)
    if expected is not None:
        assert (run.returncode, run.stderr) == (0, ""), run.stderr
        assert run.stdout.split("\n") == [*expected, ""]
    else:
        assert run.returncode == 2 and run.stdout == ""
        assert run.stderr.count("\n") == 1 and run.stderr.startswith("hpcbundle-torchenv: "), run.stderr


def test_a_stale_rank_of_the_launching_shell_is_overwritten():
    stale = dict(zip(TORCH, "7935", strict=True))
    run = _shim("hydra", {**stale, **dict(zip(SOURCES["hydra"], "1412", strict=True))})
    assert run.stdout == "1\n4\n1\n2\n"


@pytest.mark.parametrize("tasks, local", [("4(x2)", "4"), ("4(x2),3", "4"), ("8", "8")])
def test_slurms_compressed_tasks_per_node_gives_the_first_nodes_count(tasks, local):
    run = _shim(
        "slurm", {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_TASKS_PER_NODE": tasks}
    )
    assert run.stdout == f"5\n8\n1\n{local}\n"


def test_the_program_is_execed_with_its_own_words_and_status():
    numbers = dict(zip(SOURCES["ompi"], "0101", strict=True))
    run = _shim("ompi", numbers, ["sh", "-c", 'printf "%s|" "$@"; exit 3', "prog", "a b", "", "$HOME"])
    assert (run.returncode, run.stdout) == (3, "a b||$HOME|")
    assert torchenv_words("ompi", inline=True) == ["sh", "-c", TORCHENV_INLINE, TORCHENV_NAME, "ompi"]  # as _shim runs
    assert torchenv_words("ompi") == [TORCHENV_NAME, "ompi"]  # in an image built here


@pytest.mark.parametrize("source, program", [("pmix", PRINT), ("ompi", [])])
def test_an_unknown_source_or_no_program_is_one_line_exit_2(source, program):
    run = _shim(source, dict(zip(SOURCES["ompi"], "0101", strict=True)), program)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("hpcbundle-torchenv: "), run.stderr


def test_the_shim_passes_shellcheck():
    assert shellcheck(TORCHENV_INLINE, "sh") == []


# --- agent mode (--torchrun): the rendezvous of one torchrun agent per node ---------------------------------------

DATA = ROOT / "tests" / "data"
AGENT_PROGRAM = [sys.executable, "-m", "torch_agent"]
"""A stand-in for `PYTHON -m torch.distributed.run` (tests/data/torch_agent.py)."""
ENV_PRINT = [*AGENT_PROGRAM, "env"]
"""The agent's environment as its Python sees it (sh adds PWD, Python LC_CTYPE: left out)."""
OUTER = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "OMPI_COMM_WORLD_RANK": "1", "PMI_RANK": "2", "RANK": "9"}


def _agent(interface: str, environment: dict[str, str]) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """The shim as a --torchrun line runs it: `sh -c TEXT hpcbundle-torchenv agent IFACE CONF PYTHON -m ...`."""
    run = _shim(AGENT, environment, [interface, "join_timeout=30", *ENV_PRINT])
    shown = ast.literal_eval(run.stdout) if run.returncode == 0 else []
    return run, {name: value for name, value in shown if name not in ("PATH", "PWD", "LC_CTYPE")}


@pytest.mark.parametrize(
    "head, conf",
    [
        ("127.0.0.1", "is_host=1,join_timeout=30"),
        ("10.9.9.9", "is_host=0,join_timeout=30"),
        ("node1", "join_timeout=30"),
    ],
)
def test_an_agent_gets_its_address_as_local_addr_and_hosts_the_store_where_it_is_the_head_or_torch_matches_its_name(
    head, conf
):
    """An address decides is_host by equality; a host name (a printed line's head) leaves it to torch, which
    matches the name to this node's own: with is_host=0 on every node, none would host the store."""
    meet = {"MASTER_ADDR": head, "MASTER_PORT": "29500", "HPCBUNDLE_RUN_ID": "7.0", "SLURM_JOB_ID": "7"}
    run, seen = _agent("lo", {**OUTER, **meet})
    assert run.returncode == 0, run.stderr
    assert seen == {
        **meet,
        "PET_LOCAL_ADDR": "127.0.0.1",
        "PET_RDZV_ENDPOINT": f"{head}:29500",
        "PET_RDZV_ID": "7.0",
        "PET_RDZV_CONF": conf,
    }  # fmt: skip  (the outer launcher's rank variables are gone; SLURM_JOB_ID stays)


def test_a_standalone_agent_only_loses_the_outer_rank_variables():
    run, seen = _agent("-", {**OUTER, "SLURM_JOB_ID": "7"})
    assert (run.returncode, seen) == (0, {"SLURM_JOB_ID": "7"})


@pytest.mark.parametrize(
    "interface, environment, program, says",
    [("nosuch0", {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1", "HPCBUNDLE_RUN_ID": "x"}, ENV_PRINT,
      "no IPv4 address on"),
     ("lo", {"MASTER_ADDR": "10.0.0.1"}, ENV_PRINT, "MASTER_ADDR, MASTER_PORT and HPCBUNDLE_RUN_ID must be set"),
     ("-", {}, [sys.executable, "torch_agent.py", "env"], "expected IFACE CONF PYTHON -m MODULE")],
)  # fmt: skip
def test_an_agent_without_an_address_a_head_or_a_module_is_one_line_exit_2(interface, environment, program, says):
    run = _shim(AGENT, environment, [interface, "join_timeout=30", *program])
    assert (run.returncode, run.stdout) == (2, "") and run.stderr.count("\n") == 1 and says in run.stderr
    assert agent_words(interface, "join_timeout=30", inline=True) == [
        "sh", "-c", TORCHENV_INLINE, TORCHENV_NAME, AGENT, interface, "join_timeout=30"
    ]  # fmt: skip


def test_an_agent_passes_usr1_to_its_workers_and_ends_as_they_do():
    """USR1 to the agent (SLURM's time-limit warning, as srun or mpirun passes it on) reaches the worker it started
    in a session of its own, as torchrun starts them; the agent goes on waiting and exits with the worker's 0, where
    torchrun's own --signals-to-handle would end it with 1 (measured) and SIGKILL the workers 30 s later."""
    words = ["/bin/sh", "-c", TORCHENV_INLINE, TORCHENV_NAME, AGENT, "-", "", *AGENT_PROGRAM, "worker"]
    agent = subprocess.Popen(words, stdout=subprocess.PIPE, text=True, cwd=DATA)  # sh execs the agent: one PID
    try:
        assert agent.stdout.readline() == "ready\n"
        agent.send_signal(signal.SIGUSR1)
        assert agent.wait(timeout=30) == 0
    finally:
        agent.kill()
        agent.communicate()


def test_the_script_images_carry_is_the_inline_text_behind_its_header():
    """data/hpcbundle-torchenv, written to /usr/local/bin in every image built here, runs what a line for a foreign
    image runs inline: the same commands, with a header that says what it does."""
    header, _, body = TORCHENV_SCRIPT.partition("\nset -eu\n")
    assert header.startswith("#!/bin/sh\n") and all(line.startswith("#") for line in header.splitlines())
    assert "set -eu\n" + body == TORCHENV_INLINE
    script = ROOT / "src" / "hpcbundle" / "data" / TORCHENV_NAME
    run = subprocess.run(
        ["sh", str(script), "ompi", "sh", "-c", 'echo "$RANK/$WORLD_SIZE"'],
        env={"PATH": "/usr/bin:/bin", **dict(zip(SOURCES["ompi"], "1212", strict=True))},
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert (run.returncode, run.stdout) == (0, "1/2\n"), run.stderr
