"""The package's imports follow docs/architecture.md: no arrow points up, no cycle, and the page's
`arrows` block lists exactly the imports between stages; its `Every module` table lists exactly the
package's modules, each with its stage.

Each module of src/hpcbundle sits on a floor (the page's `floors` block); a module may import its
own package and the floors below it, never a floor above it or a sibling stage on its own floor
(`image` and `launch` both read the floors below, neither reads the other). Every import counts,
also one inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import hpcbundle

from .helpers import ROOT

PACKAGE = Path(hpcbundle.__file__).parent

ARCHITECTURE = ROOT / "docs" / "architecture.md"


def page_block(kind: str) -> list[str]:
    """The lines of the page's ```kind fenced block, without comments (`# ...`) and blank lines."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.find(f"\n```{kind}\n")
    assert start >= 0, f"{ARCHITECTURE.name} has no ```{kind} block"
    body = text[text.index("\n", start + 1) + 1 : text.index("\n```", start + 1)]
    return [line.split("#")[0].strip() for line in body.splitlines() if line.split("#")[0].strip()]


# Bottom first (the page lists the top floor first). Stages on one floor are siblings: neither may import the other.
FLOORS: list[tuple[str, ...]] = [tuple(line.split()) for line in reversed(page_block("floors"))]
FLOOR_OF = {stage: level for level, stages in enumerate(FLOORS) for stage in stages}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    relative = Path(*name.split(".")[1:]) if "." in name else Path()
    return (PACKAGE / relative).with_suffix(".py").is_file() or (PACKAGE / relative / "__init__.py").is_file()


def imports_of(path: Path) -> set[str]:
    """The hpcbundle modules `path` imports, anywhere in the file (`from pkg import mod` names the module)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "hpcbundle"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "hpcbundle":
                continue
            for alias in node.names:
                found.add(f"{target}.{alias.name}" if is_module(f"{target}.{alias.name}") else target)
    return found - {name}


def stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "hpcbundle"


def import_graph() -> dict[str, set[str]]:
    return {module_name(path): imports_of(path) for path in sorted(PACKAGE.rglob("*.py"))}


def test_every_stage_of_the_package_has_a_floor():
    stages = {stage(module) for module in import_graph()}
    assert stages - FLOOR_OF.keys() == set()


def test_no_import_points_up_the_pipeline_or_across_to_a_sibling_stage():
    wrong = [
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for target in targets
        if stage(target) != stage(module) and FLOOR_OF[stage(target)] >= FLOOR_OF[stage(module)]
    ]
    assert wrong == []


def test_no_module_imports_itself_through_a_cycle():
    graph = import_graph()
    cycles: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                cycles.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[module] = "done"

    for module in graph:
        if module not in state:
            visit(module, [module])
    assert cycles == []


def stage_arrows() -> dict[str, list[str]]:
    """Every `stage -> stage` pair the code's imports make, with the module imports that make it."""
    arrows: dict[str, list[str]] = {}
    for module, targets in import_graph().items():
        for target in sorted(targets):
            if stage(target) != stage(module):
                arrows.setdefault(f"{stage(module)} -> {stage(target)}", []).append(f"{module} imports {target}")
    return arrows


def test_the_pages_arrows_are_exactly_the_imports_between_stages():
    """Every arrow docs/architecture.md documents exists, and no import crosses an arrow it does not document."""
    documented = [" ".join(line.split()) for line in page_block("arrows")]
    code = stage_arrows()
    add = [f"{arrow}  # {code[arrow][0]}" for arrow in sorted(code.keys() - set(documented))]
    remove = sorted(set(documented) - code.keys())
    repeated = sorted({arrow for arrow in documented if documented.count(arrow) > 1})
    assert (add, remove, repeated) == ([], [], []), (
        f"update the ```arrows block of {ARCHITECTURE.relative_to(ROOT)}:\n"
        + "".join(f"  add:    {line}\n" for line in add)
        + "".join(f"  remove: {line}\n" for line in remove)
        + "".join(f"  listed twice: {line}\n" for line in repeated)
    )


def module_rows() -> dict[str, str]:
    """The page's `Every module` table: module path (below src/hpcbundle) -> its stage column."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("\n## Every module\n", 1)[1].split("\n## ", 1)[0]
    cells = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| `")]
    rows = [(cell[0].strip().strip("`"), cell[1].strip().strip("`")) for cell in cells]
    assert len(rows) == len(dict(rows)), f"a module is listed twice in {ARCHITECTURE.name}'s Every module table"
    return dict(rows)


def draft_row(path: str) -> str:
    """A table row for the module at `path`, its docstring's first line as the draft of what it holds."""
    docstring = ast.get_docstring(ast.parse((PACKAGE / path).read_text(encoding="utf-8"))) or ""
    return f"| `{path}` | `{stage(module_name(PACKAGE / path))}` | {docstring.partition(chr(10))[0]} |"


def test_the_pages_module_table_lists_every_module_once_with_its_stage():
    """docs/architecture.md's `Every module` table has a row for each module of the package, none for
    a module that is gone, and each row's stage is the module's."""
    code = {str(path.relative_to(PACKAGE)): stage(module_name(path)) for path in PACKAGE.rglob("*.py")}
    documented = module_rows()
    add = [draft_row(path) for path in sorted(code.keys() - documented.keys())]
    remove = sorted(documented.keys() - code.keys())
    wrong = [
        f"{path}: `{code[path]}`" for path in sorted(code.keys() & documented.keys()) if documented[path] != code[path]
    ]
    assert (add, remove, wrong) == ([], [], []), (
        f"update the Every module table of {ARCHITECTURE.relative_to(ROOT)}:\n"
        + "".join(f"  add:    {line}\n" for line in add)
        + "".join(f"  remove: {line}\n" for line in remove)
        + "".join(f"  stage:  {line}\n" for line in wrong)
    )
