"""What commands write: files atomically (a reader sees the old file or the whole new one, never half),
and check results as a table or plain lines.

`-o -` is standard output. An -o path that is a symlink writes the file it points to (as shell
redirection does, a dangling one included), and that file keeps its mode; a FIFO, device, socket or
directory is refused, as is an empty path. A new file gets the mode shell redirection would give it:
0666 less the umask, a script 0777 less the umask (executable for whom the umask allows). A path the
tool chose itself (`derived`, e.g. the elastic discovery script beside a hostfile) is never written
through: a symlink there is replaced by the file, and the file is always made new (executable, less
the umask). Text is encoded as UTF-8 with surrogateescape, so argv bytes that were not UTF-8 are
written back as the same bytes.
"""

from __future__ import annotations

import os
import secrets
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ..config.errors import UserError
from ..rules.engine import Result

F = TypeVar("F", bound=Callable[..., Any])

OUTPUT_HELP = "a symlink writes its target, an existing file keeps its mode, a new one follows the umask"
"""What every -o help says about where the bytes go."""

STDOUT = "-"
"""The -o name of standard output, as for most Unix tools."""


def output_option(what: str, instead: str = " instead of standard output.", stdout: bool = True) -> Callable[[F], F]:
    """-o/--output FILE, written atomically: `what` the file is, OUTPUT_HELP, then `instead` (what happens
    without it), e.g. output_option("Write the script here") for sbatch. Where the command prints without
    -o (`stdout`), `-o -` is the same as no -o; elsewhere it is refused in one line."""
    help_text = f"{what} (atomically; {OUTPUT_HELP}; - is standard output){instead}"
    if not stdout:
        help_text = f"{what} (atomically; {OUTPUT_HELP}){instead}"

    def to_stdout(_ctx: click.Context, _param: click.Parameter, value: Path | None) -> Path | None:
        if value is None or str(value) != STDOUT:
            return value
        if stdout:
            return None
        raise UserError.at("", "-o -", "this command writes a file, not standard output", "give a file name")

    path_type = click.Path(dir_okay=False, path_type=Path, allow_dash=True)
    return click.option("-o", "--output", type=path_type, callback=to_stdout, help=help_text)


def output_target(path: Path, option: str = "-o", derived: bool = False) -> tuple[Path, int | None]:
    """The file `path` writes (a symlink's target, or the link itself when `derived`) and that file's
    mode if it exists; refuses anything that is not a regular file or a new name."""
    text = str(path)
    if not text or text == "." or text.endswith("/") or path.name in ("", ".", ".."):
        raise UserError.at(repr(text) if not text else text, option, "names no file", "give a file name")
    if derived:
        target = Path(os.path.realpath(path.parent)) / path.name
        if target.is_symlink():
            return target, None
    else:
        target = Path(os.path.realpath(path))
    try:
        info = target.stat()
    except FileNotFoundError:
        return target, None
    except OSError as exc:
        raise UserError.at(text, option, f"cannot write: {exc.strerror}", "check the path") from None
    if stat.S_ISDIR(info.st_mode):
        raise UserError.at(text, option, "is a directory", "give a file name inside it")
    if not stat.S_ISREG(info.st_mode):
        raise UserError.at(text, option, "is not a regular file (a FIFO, device or socket)", "give a regular file")
    return target, stat.S_IMODE(info.st_mode)


def write_atomic(
    path: Path, text: str | bytes, executable: bool = False, option: str = "-o", derived: bool = False
) -> None:
    """Write `text` (or bytes, e.g. a PNG) to `path` through a temp file in the same directory, fsync and a rename.

    A new file gets 0666 (0777 if `executable`) less the umask, as shell redirection and chmod +x would
    give it; an existing one keeps its own mode, unless `derived` (a path the tool chose): then a symlink
    at `path` is replaced, not followed, and the file is always made new.
    """
    target, existing = output_target(path, option, derived)
    if derived:
        existing = None
    data = text if isinstance(text, bytes) else text.encode("utf-8", errors="surrogateescape")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _new_file(target, 0o777 if executable else 0o666)
    except OSError as exc:
        raise UserError.at(
            str(path), option, f"cannot write: {exc.strerror}", "check the directory and its permissions"
        ) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if existing is not None:
            os.chmod(tmp, existing)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise UserError.at(str(path), option, f"cannot write: {exc.strerror}", "check the disk and the path") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _new_file(target: Path, mode: int) -> tuple[int, str]:
    """A new file beside `target` with a name no one else holds, created by open(2) with `mode`, which
    the kernel lessens by the umask (mkstemp's 0600 would hide the umask)."""
    while True:
        tmp = str(target.parent / f".{target.name}.{secrets.token_hex(4)}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode), tmp
        except FileExistsError:
            continue


def echo_text(text: str) -> None:
    """Print generated text to stdout byte for byte (argv bytes that were not UTF-8 included)."""
    click.echo(text.encode("utf-8", errors="surrogateescape"), nl=False)


_STYLE = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "SKIP": "dim"}


def print_results(results: list[Result], err: bool = False) -> None:
    """A rich table on a terminal, one plain line per check otherwise."""
    stream = sys.stderr if err else sys.stdout
    if stream.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table("check", "status", "evidence", "fix", show_lines=False)
        for r in results:
            table.add_row(r.rule, f"[{_STYLE[r.status]}]{r.status}[/]", r.evidence, r.fix)
        Console(file=stream).print(table)
    else:
        for r in results:
            click.echo(r.line(), err=err)
