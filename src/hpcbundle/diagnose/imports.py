"""The modules a Python program needs, read from its source without importing or running it.

Doctor's program probe checks that each resolves in every rank's interpreter (`find_spec`, nothing
imported). Read on the launching node with `ast`, bounded: files over MAX_BYTES, nesting deeper than
the parser's limit, and more than MAX_FILES local files end in a one-line `problem`, never a traceback.

- absolute imports give their top-level name: `import torchvision.models as m` -> `torchvision`;
- the standard library (`sys.stdlib_module_names`) is dropped;
- local modules (relative imports, and names found as a file or package beside the program) are
  followed, and their imports are collected too (`from models import net` reads models/net.py);
- an import inside `try:` with an `except` that catches ImportError (or a broader class) is optional:
  the program runs without it, so doctor WARNs rather than FAILs;
- imports under `if TYPE_CHECKING:` never run, and are skipped.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Iterator, NamedTuple

MAX_BYTES = 2 * 1024 * 1024  # one source file; a training script is kilobytes
MAX_FILES = 64  # the program and the local modules followed from it
MAX_NAMES = 256  # modules sent to the probe on its command line (argv stays a few KiB)
_CATCHES_IMPORT = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


class ProgramImports(NamedTuple):
    """What `program` imports: `required` and `optional` top-level module names (sorted, neither
    stdlib nor local), the files read, and `problem`: why some imports were not read (one line), else ''."""

    program: str
    required: tuple[str, ...]
    optional: tuple[str, ...]
    files: tuple[str, ...]
    problem: str = ""


def _parse(path: Path) -> tuple[ast.Module | None, str]:
    """The module's tree, or None and a one-line reason (too big, unreadable, invalid or too deep)."""
    try:
        if path.stat().st_size > MAX_BYTES:
            return None, f"{path.name} is over {MAX_BYTES // 1024 // 1024} MiB, its imports were not read"
        return ast.parse(path.read_bytes(), filename=path.name), ""
    except SyntaxError as exc:  # lineno is None or 0 where no line is at fault (null bytes, a bad coding line)
        where = f"line {exc.lineno}: " if exc.lineno else ""
        return None, f"{path.name}: {where}{exc.msg}; its imports were not read"
    except (RecursionError, MemoryError):
        return None, f"{path.name} is nested too deeply to read, its imports were not read"
    except ValueError as exc:  # null bytes before CPython 3.11.4 (a SyntaxError without a line since)
        return None, f"{path.name}: {exc}; its imports were not read"
    except OSError as exc:
        return None, f"{path.name}: {exc.strerror}; its imports were not read"


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(k is None or (isinstance(k, ast.Name) and k.id in _CATCHES_IMPORT) for k in kinds)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Each import statement and whether it is optional; iterative, so depth costs no recursion."""
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, optional = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, optional
            continue
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack += [(child, optional) for child in node.orelse]
            continue
        guarded = isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers)
        for name, value in ast.iter_fields(node):
            children = value if isinstance(value, list) else [value]
            inner = optional or (guarded and name == "body")
            stack += [(child, inner) for child in children if isinstance(child, ast.AST)]


def _local_file(base: Path, dotted: str) -> Path | None:
    """`base/a/b/__init__.py` or `base/a/b.py` for 'a.b' (`base/__init__.py` for ''), if there is one."""
    target = base.joinpath(*dotted.split(".")) if dotted else base
    candidates = [target / "__init__.py"] + ([target.with_name(target.name + ".py")] if dotted else [])
    return next((c for c in candidates if c.is_file()), None)


def _targets(node: ast.Import | ast.ImportFrom, here: Path, root: Path) -> Iterator[tuple[str | None, Path | None]]:
    """(top-level name to check, None) for an installed module; (None, file or None) for a local one."""
    if isinstance(node, ast.ImportFrom) and node.level:
        base = here.parent
        for _ in range(node.level - 1):
            base = base.parent
        yield None, _local_file(base, node.module or "")
        for alias in node.names:
            yield None, _local_file(base, ".".join(filter(None, [node.module, alias.name])))
        return
    modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
    submodules = [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else []
    for name in modules:
        top = name.split(".")[0]
        if _is_local(root / top):
            yield None, _local_file(root, name) or _local_file(root, top)
            yield from ((None, _local_file(root, sub)) for sub in submodules)
        elif top not in sys.stdlib_module_names:
            yield top, None


def _is_local(path: Path) -> bool:
    """`path`.py, or a directory holding Python files: what `import` finds beside the program first.
    A directory of other files (a `wandb/` run log) is no module: the installed one is imported."""
    return path.with_name(path.name + ".py").is_file() or path.is_dir() and any(path.glob("*.py"))


def program_imports(program: Path) -> ProgramImports:
    """The installed modules `program` and its local modules import.

    >>> program_imports(Path("no-such-file.py")).problem
    'no-such-file.py: No such file or directory; its imports were not read'
    """
    root = program.resolve().parent
    queue, seen = [program.resolve()], {program.resolve()}
    required: set[str] = set()
    optional: set[str] = set()
    problems: list[str] = []
    while queue:
        here = queue.pop(0)
        tree, why = _parse(here)
        problems += [why] if why else []
        for node, guarded in _imports(tree) if tree else ():
            for name, local in _targets(node, here, root):
                if name:
                    (optional if guarded else required).add(name)
                elif local and local.resolve() not in seen and len(seen) < MAX_FILES:
                    seen.add(local.resolve())
                    queue.append(local.resolve())
                elif local and local.resolve() not in seen:
                    problems.append(f"{program.name} imports more than {MAX_FILES} local files; the rest were not read")
    optional -= required
    names = sorted(required)[:MAX_NAMES], sorted(optional)[: max(0, MAX_NAMES - len(required))]
    files = tuple(sorted(str(p.relative_to(root)) if p.is_relative_to(root) else str(p) for p in seen))
    return ProgramImports(program.name, tuple(names[0]), tuple(names[1]), files, next(iter(problems), ""))
