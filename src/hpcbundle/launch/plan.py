"""One launch as every command asks for it, judged once: the plan behind launch, sbatch, check, tune,
scaling plan and doctor.

A command reads its flags at the edge into a `LaunchPlan` (site, rank layout, program, image, working
directory, the launching shell, time, knobs). `judge()` runs the rule engine over the site, the node
it declares and the request together, one pass: WARNs come back, any FAIL is one user error naming the
flag or site key (exit 2, nothing written or started). `command()` only assembles: the same plan gives
the job's line, the gate's and the program probe's, none judged again::

    >>> from pathlib import Path
    >>> from hpcbundle.config.bundle import find_bundle
    >>> from hpcbundle.config.sites import read_site
    >>> site = read_site("ib-v100", find_bundle(None, Path.cwd()).sites_dir)
    >>> plan = LaunchPlan(site, RankLayout(4, (("f1", 2), ("f2", 2))), ("python", "t.py"), "h.sif")
    >>> [r.rule for r in plan.judge() if r.status == "WARN"], plan.command().argv[:5]
    ([], ['mpirun', '-np', '4', '-H', 'f1:2,f2:2'])
    >>> try:
    ...     LaunchPlan(site, RankLayout(3, (("f1", 3),)), ("python", "t.py"), "h.sif").judge()
    ... except UserError as refused:
    ...     print(refused.lines[0][:61])
    --hosts f1:3: 3 ranks on f1 but site ib-v100 nodes have 2 GPU
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from ..config.errors import UserError
from ..config.recipes import Recipe
from ..config.sites import Site, Wiring
from ..knowledge.compat import knowledge_base
from ..knowledge.labels import image_facts, image_labels
from ..rules.engine import Facts, LaunchRequest, Result
from ..rules.engine import evaluate as evaluate_facts
from ..rules.facts import declared_node
from ..rules.loading import file_failures, problem_line
from ..rules.torch import node_shape
from .assemble import build_command
from .base import LAUNCHERS
from .command import Command
from .layout import RankLayout
from .torchwiring import RUN_ID, Agents, TorchWiring
from .workdir import WorkDir


@dataclass(frozen=True)
class LaunchPlan:
    """What a command asks of a site, read at the edge, as the rules judge it and the generators assemble it.

    site        the site, its shape validated (read_site): `judge` applies the rules over it
    layout      the ranks and where they go (None: the command asks for no ranks, e.g. doctor without --hosts)
    program     the words after -- (None: the command runs no program, e.g. check)
    image       --image (None: the program runs on the host)
    workdir     where every rank starts (--workdir, the launching shell's, or the batch job's)
    environment the launching shell's variables when the line runs from here (launch --exec, doctor)
    time        a batch job's --time
    knobs       the knobs a tune run sweeps
    here        this node's host name: where mpirun starts every rank when no hosts are given
    batch       a batch job's plan (sbatch, scaling plan): its script carries #SBATCH lines
    hosts       ranks per host given outright (doctor --hosts, whose plan asks for no ranks), else derived
                from the layout
    wiring      how the ranks meet: horovod, torch (torch.distributed env://) or torchrun (one agent per node:
                the layout counts its workers), launch/torchwiring.py
    head        a torch job's MASTER_ADDR, read at the edge (the first host's address on the data interface,
                its name for a printed line, 127.0.0.1 on this node alone; None in a batch job), and where
                it came from (`head_source`)
    run_id      a torchrun job's rendezvous id: one per run for launch --exec (made at the edge), else fixed
    default_site, shell_job: no --site was given, and the launching shell's SLURM job (read at the edge)
    """

    site: Site
    layout: RankLayout | None = None
    program: tuple[str, ...] | None = None
    image: str | None = None
    workdir: WorkDir | None = None
    environment: Mapping[str, str] | None = None
    time: str | None = None
    knobs: tuple[str, ...] = ()
    here: str = "localhost"
    batch: bool = False
    wiring: Wiring = "horovod"
    head: str | None = None
    head_source: str = ""
    hosts: Mapping[str, int] | None = None
    run_id: str = RUN_ID
    default_site: bool = False
    shell_job: str | None = None

    def request(self) -> LaunchRequest:
        """The launch request the rules read."""
        layout = self.layout
        return LaunchRequest(
            np=layout.np if layout else None,
            hosts=layout.hosts if layout else (),
            hostfile=layout.hostfile if layout else None,
            hostfile_slots=layout.hostfile_slots if layout else None,
            in_allocation=layout.in_allocation if layout else False,
            image=self.image,
            program=self.program,
            environment=frozenset(self.environment) if self.environment is not None else None,
            time=self.time,
            knobs=self.knobs,
            nodes=layout.nodes if layout else None,
            tasks_per_node=layout.tasks_per_node if layout else None,
            workdir=self.workdir.path if self.workdir else None,
            batch=self.batch,
            wiring=self.wiring,
            head=self.head,
            default_site=self.default_site,
            shell_job=self.shell_job,
        )

    def ranks_per_host(self) -> dict[str, int] | None:
        """Ranks per host as the command line tells (a repeated host's added up; every rank on this node when
        no hosts are given), `each node` for a batch job's --tasks-per-node; None where SLURM places them."""
        if self.hosts is not None:
            return dict(self.hosts) or None
        layout = self.layout
        if layout is None:
            return None
        if layout.tasks_per_node:
            return {"each node": layout.tasks_per_node}
        launcher = LAUNCHERS.get(self.site.launcher.name)
        if launcher is None or not launcher.takes_hosts:
            return None
        return dict(layout.ranks_per_host() or layout.placement(self.here)) or None

    def facts(self, recipe: Recipe | None = None, observing: bool = False) -> Facts:
        """The declared facts of this plan: the site, the node it declares (unless the nodes are to be
        observed), the planned ranks per host and the request; with `recipe`, its image labels too (check)."""
        kb = knowledge_base()
        return Facts(
            site=self.site,
            recipe=recipe,
            image=image_facts(image_labels(recipe, kb)) if recipe else None,
            image_source=f"recipe {recipe.name}" if recipe else "",
            nodes=None if observing else {f"site {self.site.name}": declared_node(self.site, kb)},
            hosts=self.ranks_per_host(),
            request=self.request(),
        )

    def evaluate(self, recipe: Recipe | None = None, observing: bool = False) -> list[Result]:
        """Every rule these facts feed, once (check prints them all)."""
        return evaluate_facts(self.facts(recipe, observing), knowledge_base())

    def judge(self) -> list[Result]:
        """The one pass before anything is written or started: every FAIL refused as one line each
        (`FLAG: problem (fix)` or `FILE: KEY: problem (fix)`), exit 2; else the results, WARNs among them."""
        results = self.evaluate()
        failures = [r for r in results if r.status == "FAIL"]
        failures = file_failures(results, {"site"}) or failures  # a refused site first: the request is judged on it
        if failures:
            raise UserError(*(problem_line(replace(r, key=r.key or r.rule), self.site.where) for r in failures))
        return results

    def command(self, program: Sequence[str] | None = None, layout: RankLayout | None = None) -> Command:
        """The launch command for this plan, assembled only (the plan was judged once); with `program` (and
        `layout`) in place of its own: the launch gate's and the program probe's lines."""
        ranks = layout or self.layout
        assert ranks is not None, "a launch command needs ranks"
        words = program if program is not None else self.program or ()
        return build_command(self.site, ranks, words, self.image, self.workdir, self.torch(agents=program is None))

    def torch(self, agents: bool = True) -> TorchWiring | None:
        """Where a torch job's ranks meet (None for Horovod): the head read at the edge, the site's port (a batch
        job's script finds both) and, under --torchrun, its agents (`agents=False`: the ranks of a probe or the
        gate on the same line, started as env:// ranks)."""
        if self.wiring == "horovod":
            return None
        port = None if self.batch else self.site.torch.port
        wiring = TorchWiring(self.head, port, self.head_source or "the first host", run_id=self.run_id)
        return replace(wiring, agents=self.agents()) if agents and self.wiring == "torchrun" else wiring

    def agents(self) -> Agents:
        """The torchrun agents of this (judged) plan: one per node, the workers shared out equally."""
        assert self.layout is not None, "a torchrun job has ranks"
        shape = node_shape(self.ranks_per_host(), self.request())
        assert shape is not None, "rule torch-world refuses a job whose nodes differ"
        named = tuple(host for host, _ in self.layout.ranks_per_host())
        return Agents(*shape, named, self.site.torch.max_restarts)
