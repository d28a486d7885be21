"""Launch generation: a site, a layout, an image and a program in, an explained argv out.

    >>> from pathlib import Path
    >>> from hpcbundle.config.bundle import find_bundle
    >>> from hpcbundle.launch import LaunchPlan, RankLayout, read_site
    >>> bundle = find_bundle(None, Path.cwd())  # this checkout: recipes/, site_configs/, ...
    >>> plan = LaunchPlan(read_site("local", bundle.sites_dir), RankLayout(np=2), ("python3", "train.py"))
    >>> warnings = plan.judge()  # the one judgement: a FAIL is a UserError naming the flag or key
    >>> print(plan.command().display())
    mpirun --allow-run-as-root -np 2 --oversubscribe --bind-to none --map-by slot -x OMP_NUM_THREADS=1 python3 train.py

Launchers live in launchers/, container runtimes in runtimes/, one registered class per file.
"""

from ..config.sites import read_site  # the shape only: a LaunchPlan's judge() applies the rules
from ..rules.loading import load_site  # shape, then the site's rules (commands that make no plan)
from .assemble import build_command
from .base import LAUNCHERS, RUNTIMES, Launcher, Runtime
from .command import Command, Part
from .hostfile import parse_hostfile
from .layout import RankLayout, parse_hosts
from .plan import LaunchPlan

__all__ = [
    "LAUNCHERS",
    "RUNTIMES",
    "Command",
    "LaunchPlan",
    "Launcher",
    "RankLayout",
    "Part",
    "Runtime",
    "build_command",
    "load_site",
    "parse_hostfile",
    "parse_hosts",
    "read_site",
]
