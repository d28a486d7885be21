"""Elastic Horovod (site faults.elastic): the discovery script horovodrun runs each second, and the
launches an elastic site refuses (pure: the CLI writes the script where `discovery_path` says).

    hpcbundle launch --site ssh-elastic --np 3 --hostfile hosts --exec -- python train.py
    # writes /abs/path/hosts.discover, runs: horovodrun -np 3 --min-np 2 --max-np 3
    #     --host-discovery-script /abs/path/hosts.discover --blacklist-cooldown-range 10 300 --gloo ...
"""

from __future__ import annotations

import jinja2

from .. import __version__
from ..config.errors import UserError
from ..config.sites import Site
from .layout import RankLayout

TEMPLATE = "discover-hosts.sh.j2"
BATCH_SCRIPT = "./hpcbundle-discover-hosts.sh"
"""Where a batch script writes the discovery script: in the job's working directory (the same text
for every job of a site, written whole, so jobs that share the directory cannot tear it)."""


def discovery_path(hostfile: str) -> str:
    """The discovery script `launch` writes for `hostfile`: beside it, so the printed line finds it.

    >>> discovery_path("/home/me/hosts")
    '/home/me/hosts.discover'
    """
    return f"{hostfile}.discover"


def discovery_script(site: Site, env: jinja2.Environment, hostfile: str | None, slots: int) -> str:
    """The script's text: the hostfile's answering hosts (`hostfile`), else the SLURM job's nodes
    with `slots` ranks each unless SLURM_NTASKS_PER_NODE says otherwise."""
    elastic = site.faults.elastic
    assert elastic is not None
    return env.get_template(TEMPLATE).render(
        site=site, source=elastic.discovery, hostfile=hostfile, slots=slots, version=__version__
    )


def check_elastic(site: Site, layout: RankLayout) -> None:
    """Refuse an elastic launch whose hosts cannot come from the site's discovery source, or whose
    --np lies outside [min_np, max_np]; nothing for a site without faults.elastic."""
    elastic = site.faults.elastic
    if elastic is None:
        return
    if layout.hosts:
        raise UserError.at(
            "",
            "--hosts",
            f"site {site.name} is elastic: horovodrun takes its hosts from a discovery script, read every second",
            "give --hostfile FILE (faults.elastic.discovery: hostfile) or submit with hpcbundle sbatch "
            "(discovery: slurm)",
        )
    if elastic.discovery == "hostfile" and not layout.hostfile:
        raise UserError.at(
            "",
            "--hostfile",
            f"missing: site {site.name} finds its hosts in a hostfile (faults.elastic.discovery)",
            "give --hostfile FILE with `host slots=N` lines; edit it to add or retire nodes while the job runs",
        )
    if elastic.discovery == "slurm" and (layout.hostfile or not layout.in_allocation):
        raise UserError.at(
            "",
            "--hostfile" if layout.hostfile else "SLURM_JOB_ID",
            f"site {site.name} finds its hosts in the SLURM job (faults.elastic.discovery: slurm)",
            "submit it with hpcbundle sbatch, or set discovery: hostfile",
        )
    high = elastic.max_np or layout.np
    if not elastic.min_np <= layout.np <= high:
        raise UserError.at(
            "",
            f"--np {layout.np}",
            f"outside faults.elastic's [min_np, max_np] = [{elastic.min_np}, {high}] of site {site.name}",
            f"give --np from {elastic.min_np} to {high}",
        )
