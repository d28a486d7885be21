"""Launch generation: a site, a layout, an image and a program in, an explained argv out.

    >>> from pathlib import Path
    >>> from hpcbundle.config.bundle import find_bundle
    >>> from hpcbundle.launch import RankLayout, build_command, load_site
    >>> bundle = find_bundle(None, Path.cwd())  # this checkout: recipes/, site_configs/, ...
    >>> site = load_site("local", bundle.sites_dir)
    >>> print(build_command(site, RankLayout(np=2), ["python3", "train.py"]).display())
    mpirun --allow-run-as-root -np 2 --oversubscribe --bind-to none --map-by slot -x OMP_NUM_THREADS=1 python3 train.py

Launchers live in launchers/, container runtimes in runtimes/, one registered class per file.
"""

from ..rules.loading import load_site  # the one loader that refuses: shape, then the rules
from .assemble import build_command, launch_request
from .base import LAUNCHERS, RUNTIMES, Launcher, Runtime
from .command import Command, Part
from .hostfile import parse_hostfile
from .layout import RankLayout, parse_hosts

__all__ = [
    "LAUNCHERS",
    "RUNTIMES",
    "Command",
    "Launcher",
    "RankLayout",
    "Part",
    "Runtime",
    "build_command",
    "launch_request",
    "load_site",
    "parse_hostfile",
    "parse_hosts",
]
