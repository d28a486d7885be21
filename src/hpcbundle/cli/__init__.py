"""The `hpcbundle` command: front end only; the work happens in the generator modules."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import click

from .. import __version__
from ..config.bundle import Bundle, find_bundle
from ..config.errors import UserError, printable

# Command -> the module that defines it, imported only when the command runs (or --help lists
# them all): `hpcbundle launch --exec` should not pay for numpy, Jinja2 and the knowledge base.
COMMAND_MODULES = {
    "recipes": "recipes",
    "render": "recipes",
    "check": "recipes",
    "rules": "rules",
    "reference": "reference",
    "sites": "launch",
    "launch": "launch",
    "sbatch": "launch",
    "build-docker": "images",
    "doctor": "doctor",
    "site": "doctor",
    "scaling": "scaling",
    "tune": "tune",
}


class _Group(click.Group):
    """Loads command modules on first use; turns UserError into one line per problem on stderr
    and exit status 2 (no traceback)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(COMMAND_MODULES))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            importlib.import_module(f"{__name__}.{COMMAND_MODULES[cmd_name]}")
        return self.commands.get(cmd_name)

    def invoke(self, ctx: click.Context):
        from .stdout import guarded_stdout

        try:
            with guarded_stdout():
                return super().invoke(ctx)
        except UserError as exc:
            for line in exc.lines:
                click.echo(f"hpcbundle: error: {printable(line)}", err=True)
            ctx.exit(UserError.exit_status)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="hpcbundle")
@click.option(
    "--bundle",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="HPCBUNDLE_ROOT",
    help=(
        "The bundle's top level (holds recipes/, site_configs/, containers/). "
        "Default: found from the current directory."
    ),
)
@click.pass_context
def main(ctx: click.Context, bundle: Path | None) -> None:
    """Build matched Horovod images and run them on clusters.

    \b
    A recipe (recipes/*.yaml) pins one software stack; a site (site_configs/*.yaml) says how a
    cluster runs it. Typical day:
      hpcbundle recipes                          # which stacks exist
      hpcbundle check cuda12.2-tf2.15-torch2.1-ucx   # is the stack consistent?
      hpcbundle render cpu-local --format docker -o build/cpu-local.Dockerfile
    """
    ctx.obj = _LazyBundle(bundle)


class _LazyBundle:
    """Finds the bundle only when a command needs it, so --help works anywhere."""

    def __init__(self, explicit: Path | None) -> None:
        self._explicit = explicit
        self._bundle: Bundle | None = None

    def get(self) -> Bundle:
        if self._bundle is None:
            self._bundle = find_bundle(self._explicit, _working_directory(self._explicit))
        return self._bundle


def _working_directory(bundle: Path | None) -> Path:
    """This shell's directory, where the bundle is looked for; a removed one is refused unless --bundle names it
    (then `/`, which find_bundle does not read)."""
    try:
        return Path(os.getcwd())
    except FileNotFoundError:
        if bundle is not None:
            return Path("/")
        raise UserError(
            "this shell's working directory was removed (cd to one that exists, or pass --bundle DIR)"
        ) from None


pass_bundle = click.make_pass_decorator(_LazyBundle)

__all__ = ["COMMAND_MODULES", "main", "pass_bundle"]
