"""Render a recipe into a Dockerfile, a Singularity/Apptainer .def or a bare-metal install script (pure:
templates come in an Environment).

All formats run the same steps: the snippets of the building blocks in image/blocks/ (the install
script leaves out the OS packages and source builds, which it asks the host for). A step is a shell
snippet from containers/common/, rendered once per recipe: the Dockerfile runs it as one RUN whose
lines are joined with ` && \\`, the .def puts its lines in %post under `set -euo pipefail`. So that
both mean the same, every snippet line must be one complete command (a simple command, a pipeline,
or a compound that closes on the same line); the renderer refuses anything else, naming the snippet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import jinja2

from .. import __version__
from ..config.errors import UserError
from ..config.recipes import Recipe
from ..knowledge.compat import KnowledgeBase
from ..quoting import quoted, shell_quote
from ..templating import strict_environment
from .blocks import BLOCKS, Snippet, apt_packages, source_builds
from .blocks.horovod import default_command, horovod_build, verify
from .bootstrap import Bootstrap
from .derive import image_spec, runtime_stage
from .spec import ImageSpec

Format = Literal["docker", "singularity", "shell"]
TEMPLATES: dict[str, str] = {
    "docker": "docker/Dockerfile.j2",
    "singularity": "singularity/horovod.def.j2",
    "shell": "shell/install.sh.j2",
}
SUFFIXES: dict[str, str] = {"docker": ".Dockerfile", "singularity": ".def", "shell": ".sh"}


@dataclass(frozen=True)
class Step:
    """One rendered snippet: a title for the reader, the template it came from, its command lines,
    whether the install script runs it too (it asks the host for OS packages and source builds), and
    the findings hadolint accepts in it (`Snippet.lint_ignore`)."""

    title: str
    snippet: str
    lines: tuple[str, ...]
    on_host: bool = True
    lint_ignore: tuple[str, ...] = ()


@dataclass(frozen=True)
class Steps:
    """The steps of the build stage, the slimming of what it hands on, the runtime stage, and the
    check run by both the build and %test."""

    build: tuple[Step, ...]
    slim: tuple[Step, ...]
    runtime: tuple[Step, ...]
    verify: Step

    def all(self) -> tuple[Step, ...]:
        return (*self.build, *self.slim, *self.runtime, self.verify)


def template_environment(containers_dir: Path) -> jinja2.Environment:
    """The strict Jinja2 environment over containers/, with the filters the image templates use."""
    env = strict_environment(containers_dir)
    env.filters.update(
        run_chain=" && \\\n    ".join,  # Dockerfile: one RUN from a step's lines
        continued=" \\\n    ".join,  # Dockerfile: one ENV/LABEL over several lines
        shquote=shell_quote,
        quoted=quoted,
        assignments=assignments,
        install_time=install_time,
    )
    return env


def render_image(
    recipe: Recipe, fmt: Format, env: jinja2.Environment, kb: KnowledgeBase, bootstrap: Bootstrap | None = None
) -> str:
    """The Dockerfile, .def or install script text for `recipe`; a .def's stages bootstrap from
    `bootstrap` instead of the recipe's registry images when it is given."""
    spec = image_spec(recipe, kb, host=fmt == "shell")
    return env.get_template(TEMPLATES[fmt]).render(
        recipe=recipe,
        spec=spec,
        steps=render_steps(spec, env),
        runtime=runtime_stage(spec),
        horovod=horovod_build(spec),
        command=default_command(recipe),
        packages=apt_packages(spec).install,
        source_builds=source_builds(spec),
        hpcbundle_version=__version__,
        bootstrap=bootstrap,
    )


def render_steps(spec: ImageSpec, env: jinja2.Environment) -> Steps:
    """Render every registered block's snippets, stage by stage in block order, for each format to lay out
    (a snippet sees the recipe, the spec, the runtime stage and the values its block fills in)."""
    runtime = runtime_stage(spec)

    def rendered(snippet: Snippet, on_host: bool = True) -> Step:
        lines = render_snippet(env, snippet.name, recipe=spec.recipe, spec=spec, runtime=runtime, **snippet.values)
        return Step(snippet.title, snippet.name, lines, on_host, snippet.lint_ignore)

    blocks = BLOCKS.ordered()
    build = tuple(rendered(snippet, block.on_host) for block in blocks for snippet in block.build(spec))
    slim = tuple(rendered(snippet) for block in blocks for snippet in block.slim(spec))
    runtime = tuple(rendered(snippet) for block in blocks for snippet in block.runtime(spec))
    return Steps(build, slim, runtime, rendered(verify(spec)))


def render_snippet(env: jinja2.Environment, name: str, **context: object) -> tuple[str, ...]:
    """Render containers/common/<name>.sh.j2 into command lines (blank and comment lines dropped)."""
    path = f"common/{name}.sh.j2"
    text = env.get_template(path).render(**context)
    lines = tuple(line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#"))
    for line in lines:
        problem = shell_line_problem(line)
        if problem:
            raise UserError.at(
                f"containers/{path}",
                repr(line),
                problem,
                "each snippet line must be one complete command: it becomes one link of a RUN `&&` chain",
            )
    return lines


def assignments(env: dict[str, str]) -> list[str]:
    """KEY="value" words for a Dockerfile ENV or LABEL, or a shell `export` (values may use ${VAR}, nothing else)."""
    for key, value in env.items():
        if any(c in value for c in '"\\`') or "$" in value.replace("${", ""):
            raise ValueError(f"{key}: value {value!r} cannot be double-quoted the same way in a Dockerfile and in sh")
    return [f'{key}="{value}"' for key, value in env.items()]


def install_time(value: str) -> str:
    """One shell word for `value` that expands the install script's own ${HPCBUNDLE_*} variables now
    and keeps every other ${VAR} for later (the env file it writes is sourced in another shell).

    >>> print(install_time("${HPCBUNDLE_VENV}/bin:${PATH}"))
    "${HPCBUNDLE_VENV}"'/bin:${PATH}'
    """
    parts = re.split(r"(\$\{HPCBUNDLE_[A-Z_]+\})", value)
    return "".join(f'"{part}"' if part.startswith("${HPCBUNDLE_") else shell_quote(part) for part in parts if part)


_OPERATORS = ("&&", "||", ";;", "<<-", "<<", ">>", ">&", "<&", "&>", "|", ";", "&", "(", ")", "<", ">")
_OPENERS = {"if": "fi", "case": "esac", "for": "done", "while": "done", "until": "done", "{": "}", "(": ")"}
_TOP_LEVEL_JOINERS = {";", "&&", "||", "&", ";;"}


def shell_words(line: str) -> list[str]:
    """Split one shell line into words and operators, quotes kept inside words.

    >>> shell_words('grep -q "a b" f || { echo no >&2; exit 1; }')
    ['grep', '-q', '"a b"', 'f', '||', '{', 'echo', 'no', '>&', '2', ';', 'exit', '1', ';', '}']
    """
    words: list[str] = []
    word, quote, i = "", "", 0
    while i < len(line):
        c = line[i]
        if quote:
            word += c
            if c == "\\" and quote == '"':
                word, i = word + line[i + 1 : i + 2], i + 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            word, quote = word + c, c
        elif c == "\\":
            word, i = word + line[i : i + 2], i + 1
        elif c == "#" and not word:
            break
        elif c.isspace() or c in "();|&<>":
            if word:
                words.append(word)
                word = ""
            if not c.isspace():
                op = next(o for o in _OPERATORS if line.startswith(o, i))
                words.append(op)
                i += len(op) - 1
        else:
            word += c
        i += 1
    if quote:
        raise ValueError(f"unclosed {quote}")
    return words + ([word] if word else [])


def shell_line_problem(line: str) -> str | None:
    """Why `line` is not one complete command (None if it is).

    Refused: a trailing backslash or pipe, a heredoc, an unclosed quote, a compound command left
    open (`if ...; then` without `fi`), and commands joined at the top level with ; && || & (in a
    RUN chain `a; b` would run b after a failure, and under `set -e` `a && b` ignores a failure of a).
    """
    if line.endswith("\\"):
        return "continues on the next line"
    try:
        words = shell_words(line)
    except ValueError as exc:
        return f"has an {exc}"
    closers: list[str] = []
    for word in words:
        if word in _OPENERS:
            closers.append(_OPENERS[word])
        elif word in _OPENERS.values():
            if not closers or closers.pop() != word:
                return f"closes {word!r} without opening it"
        elif word in ("<<", "<<-"):
            return "uses a heredoc (the Docker legacy builder has none)"
        elif word in _TOP_LEVEL_JOINERS and not closers:
            return f"joins commands with {word!r}; put each command on its own line"
    if closers:
        return f"opens a compound command that does not close on this line (no {closers[-1]!r})"
    if words and words[-1] == "|":
        return "ends with a pipe"
    return None
