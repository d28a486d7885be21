"""Elastic Horovod (site faults.elastic): the discovery script horovodrun runs each second (pure: the CLI
writes the script where `discovery_path` says; rules/request.py judges the launches an elastic site refuses).

    hpcbundle launch --site ssh-elastic --np 3 --hostfile hosts --exec -- python train.py
    # writes /abs/path/hosts.discover, runs: horovodrun -np 3 --min-np 2 --max-np 3
    #     --host-discovery-script /abs/path/hosts.discover --blacklist-cooldown-range 10 300 --gloo ...
"""

from __future__ import annotations

import jinja2

from .. import __version__
from ..config.sites import Site
from .hostfile import HOST_LINE_ERE, MAX_SLOTS, SKIP_ERE

TEMPLATE = "discover-hosts.sh.j2"
JOB_DIR = "job_tmp"
"""The batch script's variable naming the job's private directory on its first node (mktemp -d)."""

BATCH_SCRIPT = f"${JOB_DIR}/discover-hosts.sh"
"""Where a batch script writes the discovery script: in the job's private directory, where its node-state
cache lives beside it (`$0.states`); the launch line names it through the variable (batch.py's job_word)."""


def allocation_path(site: str, job_id: str) -> str:
    """The discovery script `launch` writes inside an allocation: in the working directory, named by site
    and job, so jobs sharing the directory never run each other's.

    >>> allocation_path("eth-cpu-elastic", "4242")
    './.hpcbundle-discover-hosts.eth-cpu-elastic.4242.sh'
    """
    return f"./.hpcbundle-discover-hosts.{site}.{job_id}.sh"


def discovery_path(hostfile: str) -> str:
    """The discovery script `launch` writes for `hostfile`: beside it, so the printed line finds it.

    >>> discovery_path("/home/me/hosts")
    '/home/me/hosts.discover'
    """
    return f"{hostfile}.discover"


def discovery_script(site: Site, env: jinja2.Environment, hostfile: str | None, slots: int) -> str:
    """The script's text: the hostfile's answering hosts (`hostfile`, its lines matched with the patterns
    `launch` parses with), else the SLURM job's nodes with `slots` ranks each unless SLURM_NTASKS_PER_NODE
    says otherwise."""
    elastic = site.faults.elastic
    assert elastic is not None
    grammar = {"skip": SKIP_ERE, "host_line": HOST_LINE_ERE, "max_slots": MAX_SLOTS}
    return env.get_template(TEMPLATE).render(
        site=site, source=elastic.discovery, hostfile=hostfile, slots=slots, grammar=grammar, version=__version__
    )
