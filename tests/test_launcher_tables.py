"""What the rules know of a launcher or a container runtime comes from its row in knowledge/launching.py:
no rule, knowledge or diagnose module names one (`if name == "srun"`), so a new launcher is a file and a row."""

from __future__ import annotations

import ast
from pathlib import Path

import hpcbundle
from hpcbundle.diagnose.program import SHELL_PROBE
from hpcbundle.knowledge.launching import LAUNCHERS_KNOWN, RUNTIMES_KNOWN

PACKAGE = Path(hpcbundle.__file__).parent
JUDGING = ("rules", "knowledge", "diagnose")
TABLES = "knowledge/launching.py"
NAMES = frozenset(LAUNCHERS_KNOWN) | frozenset(RUNTIMES_KNOWN)
COMMANDS = frozenset(known.command for known in [*LAUNCHERS_KNOWN.values(), *RUNTIMES_KNOWN.values()] if known.command)

OTHER_MEANINGS = {
    ("rules/containers.py", "nvidia_container_env", "none"): "NVIDIA_VISIBLE_DEVICES=none: no GPU",
    ("rules/containers.py", "userns_vader", "none"): "the MCA value btl_vader_single_copy_mechanism none",
    ("rules/fabric.py", "BRIDGE_PREFIXES", "docker"): "Docker's bridge interfaces, docker0",
    ("rules/fabric.py", "pml_ucx", "none"): "shown for an empty list of UCX transports",
    ("rules/gpu.py", "declared_gpus", "none"): "shown for an empty list of GPU names",
    ("knowledge/labels.py", "NONE", "none"): "the horovod and mpi.flavour labels of an image built without them",
    ("knowledge/labels.py", "_listing", "none"): "a list label's value when the list is empty",
    ("knowledge/labels.py", "listed", "none"): "a list label's value when the list is empty",
    ("diagnose/probes.py", "host_mpi", "mpirun"): "the host MPI's own command, asked for its version",
}
"""(module, top-level name, literal) -> what the word means there: not a launcher or runtime."""


def _owner(statement: ast.stmt) -> str:
    """The name a top-level statement defines (a function, a class, an assigned constant)."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return statement.name
    targets = statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
    return ",".join(target.id for target in targets if isinstance(target, ast.Name)) or "<module>"


def name_literals(root: Path, folders: tuple[str, ...], words: frozenset[str]) -> dict[tuple[str, str, str], int]:
    """(module, top-level name, word) -> line, for every string constant equal to one of `words` in the modules
    under `folders`; in the tables module only its functions count (its rows are where the names belong)."""
    found = {}
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            module = path.relative_to(root).as_posix()
            for statement in ast.parse(path.read_text(encoding="utf-8")).body:
                if module == TABLES and not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(statement):
                    if isinstance(node, ast.Constant) and node.value in words:
                        found.setdefault((module, _owner(statement), node.value), node.lineno)
    return found


def test_name_literals_finds_a_name_in_a_rule_and_skips_the_rows(tmp_path: Path) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "knowledge").mkdir()
    (tmp_path / "rules" / "r.py").write_text('def r(site):\n    return site.launcher.name != "srun"\n')
    (tmp_path / TABLES).write_text('ROWS = {"srun": 1}\n\n\ndef f(name):\n    return name == "srun"\n')
    found = name_literals(tmp_path, ("rules", "knowledge"), frozenset({"srun"}))
    assert found == {("rules/r.py", "r", "srun"): 2, (TABLES, "f", "srun"): 5}


def test_no_rule_knowledge_or_diagnose_module_names_a_launcher_or_runtime_outside_the_tables() -> None:
    found = name_literals(PACKAGE, JUDGING, NAMES | COMMANDS)
    unexplained = [f"{key[0]}:{line} {key[1]}: {key[2]!r}" for key, line in found.items() if key not in OTHER_MEANINGS]
    assert unexplained == [], (
        "a launcher or runtime named outside its row: make what the code asks a field of LauncherKnown or "
        "RuntimeKnown (knowledge/launching.py) and read the row, or list another meaning in OTHER_MEANINGS"
    )


def test_every_other_meaning_still_occurs_where_it_is_listed() -> None:
    found = name_literals(PACKAGE, JUDGING, NAMES | COMMANDS)
    assert sorted(set(OTHER_MEANINGS) - set(found)) == []


def test_the_program_probe_reads_the_rank_variable_of_every_launcher() -> None:
    missing = {
        name: variable
        for name, known in LAUNCHERS_KNOWN.items()
        for variable in known.rank_env
        if f"${{{variable}:-" not in SHELL_PROBE
    }
    assert missing == {}
