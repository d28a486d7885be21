"""The one rule engine: rules over facts, one registry, one result type.

A rule reads `Facts` and returns a `Verdict` (or several): PASS, WARN, FAIL or SKIP, the evidence,
and the fix. `hpcbundle check RECIPE [--site SITE]` and `hpcbundle doctor` are two front ends over
the same registry; they differ only in where the facts come from (declared by a recipe and a site,
or observed on the nodes, see rules/facts.py). A rule names the facts it `needs`, and the engine
runs it wherever those facts exist, so a rule is written once and runs from every front end that
can feed it::

    >>> from hpcbundle.knowledge.compat import knowledge_base
    >>> facts = Facts(site=None)
    >>> [r.rule for r in evaluate(facts, knowledge_base())]   # no recipe, site or nodes: nothing to judge
    []
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Mapping, NamedTuple, Union

if TYPE_CHECKING:
    from ..config.recipes import Recipe
    from ..config.sites import Site, Wiring
    from ..knowledge.compat import KnowledgeBase

# One module per family of rules, in the order their results are shown.
FAMILIES = (
    "site",
    "recipe",
    "launching",
    "request",
    "torch",
    "baseimage",
    "nodes",
    "program",
    "gpu",
    "frameworks",
    "mpi",
    "containers",
    "fabric",
)
Status = Literal["PASS", "WARN", "FAIL", "SKIP"]
_RANK = {"PASS": 0, "SKIP": 0, "WARN": 1, "FAIL": 2}
Need = Literal["recipe", "image", "site", "nodes", "observed", "hosts", "program", "request", "head"]


@dataclass(frozen=True)
class Result:
    """One rule's outcome, e.g. Result('gpu-arch', 'FAIL', 'site ib-v100 has V100 ...', 'add 7.0 to gpu.archs')."""

    rule: str
    status: Status
    evidence: str
    fix: str = ""
    key: str = ""
    flag: bool = False

    def message(self) -> str:
        """The key it is about, the evidence, then the fix."""
        return (f"{self.key}: " if self.key else "") + self.evidence + (f"; {self.fix}" if self.fix else "")

    def line(self) -> str:
        """The plain one-line form: status, rule, evidence; fix."""
        return f"{self.status:<4}  {self.rule:<20} {self.message()}"


class Verdict(NamedTuple):
    """What a rule function returns; `subject` narrows the rule's name (interface data0, image checksum),
    `key` names the site or recipe key at fault (what a refused load prints after the file name), or,
    with `flag`, the part of the launch request at fault (--np 8, --image, PROGRAM: printed alone)."""

    status: Status
    evidence: str
    fix: str = ""
    subject: str = ""
    key: str = ""
    flag: bool = False


def refusal(key: str, problem: str, fix: str = "") -> Verdict:
    """The FAIL of an on_load rule at one key: what loading prints as `FILE: key: problem (fix)`."""
    return Verdict("FAIL", problem, fix, key=key)


def request_refusal(flag: str, problem: str, fix: str = "") -> Verdict:
    """The FAIL of a rule at one part of the launch request: what a refused launch prints as `flag: problem (fix)`."""
    return Verdict("FAIL", problem, fix, key=flag, flag=True)


@dataclass(frozen=True)
class LaunchRequest:
    """What a command asks of a site: the ranks and where they go, the image, the program and options.

    np          the ranks (--np, or --nodes x --tasks-per-node); None when the command asks for no ranks
                (doctor), so the rules over placement do not judge
    hosts       (host, slots) from --hosts; `hostfile` and the slots counted in it from --hostfile
    in_allocation  the launch runs inside a SLURM allocation (the launcher may take the nodes from SLURM)
    image       --image (None: none given); `program` the words after -- (None: not given to this command)
    environment the names the launching shell has set, when it is known (launch --exec, doctor)
    time        the batch job's --time (sbatch)
    knobs       the knobs a tune run is to sweep (tune --knobs)
    nodes       the SLURM job's nodes when known (sbatch --nodes, SLURM_JOB_NUM_NODES in an allocation)
    tasks_per_node  the ranks on each node a batch job asks for (sbatch --tasks-per-node)
    batch       the request is a batch job's (sbatch, scaling plan): its script carries #SBATCH lines
    wiring      how the ranks meet: horovod (Horovod over MPI or Gloo), torch (torch.distributed, env://) or
                torchrun (one torchrun agent per node; np and hosts count its workers)
    head        MASTER_ADDR of a torch wiring: an IPv4 address, a host name (a printed line), or None (a batch
                job's script finds it on its first node)
    workdir     the user's working directory every rank starts in (--workdir, else the launching shell's)
    default_site  no --site was given: the site is the default, local; `shell_job` the SLURM job the launching
                shell runs in (its SLURM_JOB_ID), when it runs in one

    >>> LaunchRequest(np=4, hosts=(("f1", 2), ("f2", 2))).slots
    4
    """

    np: int | None = None
    hosts: tuple[tuple[str, int], ...] = ()
    hostfile: str | None = None
    hostfile_slots: int | None = None
    in_allocation: bool = False
    image: str | None = None
    program: tuple[str, ...] | None = None
    environment: frozenset[str] | None = None
    time: str | None = None
    knobs: tuple[str, ...] = ()
    nodes: int | None = None
    tasks_per_node: int | None = None
    batch: bool = False
    wiring: Wiring = "horovod"
    head: str | None = None
    workdir: str | None = None
    default_site: bool = False
    shell_job: str | None = None

    @property
    def slots(self) -> int | None:
        """Slots named by --hosts or --hostfile, or None when no hosts were given."""
        return sum(slots for _, slots in self.hosts) if self.hosts else self.hostfile_slots


@dataclass(frozen=True)
class HeadProbe:
    """A torch job's head as doctor observed it: where rank 0's TCP store is to listen, and who reaches it.

    host        the first host (rank 0's node)
    interface   where its address was read (network.interfaces[0]; lo when every rank runs on that node)
    port        MASTER_PORT
    address     the host's IPv4 address there (None: it has none, or the host did not answer)
    bound       'ok' when a listener took the port on the host (every address, as torch's store binds), else
                why not (the OS's words: 'Address already in use'); '' when not tried (no address)
    reached     node -> 'ok' or why its TCP connection to address:port failed ('Connection refused', ...)
    """

    host: str
    interface: str
    port: int
    address: str | None = None
    bound: str = ""
    reached: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Facts:
    """What the rules read; absent facts are None and the rules that need them do not run.

    recipe      the build spec (only `check` has it)
    image       the image's labels, `org.hpcbundle.` stripped: derived from the recipe (check) or
                read back from the built image's manifest (doctor); `image_source` says where
    site        the site the job runs on
    nodes       host -> node facts in the probe's shape (diagnose/probes.py): declared by the site
                (one entry, `site NAME`) or observed on every node; an unanswered node is {'error': why}
    observed    True when `nodes` were observed (doctor), False when declared (check)
    hosts       ranks per host of the planned launch (launch --hosts, sbatch --tasks-per-node as
                'each node', doctor --hosts); declared hosts are judged by the site's declared node
    reach, image_path, checksum, scope: what only doctor observes (TCP probes between the nodes,
                the image path it looked for, whether it hashed it, and whether it ran on a login node)
    program     the program's environment on every node as the launcher starts it, and on the
                launching node (diagnose/program.py); only doctor observes it
    request     the launch request (ranks, hosts, image, program, options) where a command gives one:
                launch, sbatch, check --np/--hosts/--image, doctor (its image, program and shell)
    head        a torch job's head as doctor observed it (doctor --torch --hosts, launch --exec --torch)
    """

    site: Site | None
    recipe: Recipe | None = None
    image: Mapping[str, str] | None = None
    image_source: str = ""
    nodes: Mapping[str, Mapping[str, Any]] | None = None
    observed: bool = False
    hosts: Mapping[str, int] | None = None
    reach: Mapping[str, list[tuple[str, str, str, str]]] = field(default_factory=dict)
    image_path: str | None = None
    checksum: bool = False
    scope: Literal["nodes", "login"] = "nodes"
    program: Mapping[str, Any] | None = None
    request: LaunchRequest | None = None
    head: HeadProbe | None = None

    def available(self) -> set[str]:
        """The kinds of facts present (what a rule's `needs` is matched against)."""
        present = {
            "recipe": self.recipe,
            "image": self.image,
            "site": self.site,
            "nodes": self.nodes,
            "hosts": self.hosts,
            "observed": self.observed or None,
            "program": self.program,
            "request": self.request,
            "head": self.head,
        }
        return {name for name, value in present.items() if value is not None}

    def ok_nodes(self) -> dict[str, Mapping[str, Any]]:
        """The nodes that answered (all of them when declared)."""
        return {host: node for host, node in (self.nodes or {}).items() if "error" not in node}

    def on(self, hosts: Iterable[str]) -> str:
        """' on node1, node2' for observed nodes; '' for declared ones (the site speaks for all)."""
        return f" on {', '.join(hosts)}" if self.observed else ""


RuleFunction = Callable[[Facts, "KnowledgeBase"], Union[Verdict, list[Verdict]]]


@dataclass(frozen=True)
class Rule:
    """A registered rule: its name, the facts it needs, the function (whose docstring says why), and
    whether loading a site or recipe refuses on its FAIL (`on_load`: no command could use that file;
    for a rule over the launch request: no launch could start with that request)."""

    name: str
    needs: frozenset[str]
    function: RuleFunction
    on_load: bool = False
    superseded_by: tuple[str, ...] = ()

    def __call__(self, facts: Facts, kb: KnowledgeBase) -> list[Result]:
        found = self.function(facts, kb)
        verdicts = [found] if isinstance(found, Verdict) else found
        if self.on_load and not verdicts:  # judged, nothing refused: what the rule states holds
            verdicts = [Verdict("PASS", self.summary)]
        return [
            Result(f"{self.name} {v.subject}".strip(), v.status, v.evidence, v.fix, v.key, v.flag) for v in verdicts
        ]

    @property
    def summary(self) -> str:
        """The docstring's first line (what `hpcbundle rules` shows)."""
        return (self.function.__doc__ or "").strip().splitlines()[0]

    @property
    def source(self) -> str:
        """module:function, stable across edits (a line number is not)."""
        return f"{self.function.__module__}:{self.function.__name__}"


RULES: list[Rule] = []


def rule(
    name: str, needs: Iterable[Need], on_load: bool = False, superseded_by: Iterable[str] = ()
) -> Callable[[RuleFunction], RuleFunction]:
    """Register a rule under `name`, run wherever the facts in `needs` exist (in registration order).

    `on_load`: loading a site or recipe refuses on the rule's FAIL (see rules/loading.py), so every
    command stops at a combination no command could use; a rule without it judges only when asked.
    An on_load rule returns one FAIL per bad key, nothing for a file that fits (then it PASSes with its
    docstring's first line as the evidence), and a SKIP saying why when it has nothing to judge.
    `superseded_by`: rules whose FAIL makes this one moot (the elastic rules say where an elastic
    site's hosts come from, so the slot count of --hosts is not judged): where one of them FAILs in the
    same pass, this rule SKIPs, naming it, instead of judging (or re-running it).
    """

    def register(function: RuleFunction) -> RuleFunction:
        RULES.append(Rule(name, frozenset(needs), function, on_load, tuple(superseded_by)))
        return function

    return register


def applicable(facts: Facts) -> list[Rule]:
    """The registered rules whose needed facts are all present."""
    _load_families()
    present = facts.available()
    return sorted((r for r in RULES if r.needs <= present), key=_order)


def _order(r: Rule) -> int:
    """Build-spec rules first, then what only observation shows, then the image judged on the nodes."""
    family = FAMILIES.index(r.function.__module__.rsplit(".", 1)[-1])
    return (0 if "recipe" in r.needs else 1 if "observed" in r.needs else 2) * len(FAMILIES) + family


def evaluate(facts: Facts, kb: KnowledgeBase, judged: Iterable[str] = ()) -> list[Result]:
    """Run every rule that the facts can feed, each once; a user sees every reason at once.

    Over observed nodes, a rule that reads them judges the nodes that answered and SKIPs the others
    (node-reach FAILs each one, saying how it failed); with none answered it only SKIPs. A rule
    superseded by another runs after it, and SKIPs where that one FAILed. Rules that need no more
    than the fact kinds in `judged` are left out (an earlier pass of the same command judged them:
    doctor judges the site and the request before it observes the nodes).
    """
    silent = [host for host in facts.nodes or {} if host not in facts.ok_nodes()] if facts.observed else []
    done = frozenset(judged)
    rules = [r for r in applicable(facts) if not (done and r.needs <= done)]
    found: dict[str, list[Result]] = {}
    for r in sorted(rules, key=_depth):  # the superseding ones first
        failing = [name for name in r.superseded_by if any(x.status == "FAIL" for x in found.get(name, ()))]
        if failing:
            found[r.name] = [Result(r.name, "SKIP", f"rule {failing[0]} refuses this first (superseded)")]
        elif "nodes" in r.needs and silent:
            answered = r(facts, kb) if len(silent) < len(facts.nodes or {}) else []
            found[r.name] = answered + [Result(r.name, "SKIP", f"{', '.join(silent)} did not answer")]
        else:
            found[r.name] = r(facts, kb)
    return [result for r in rules for result in found[r.name]]


def _depth(r: Rule) -> int:
    """How many rules stand above `r` in the longest chain of supersession (run after all of them)."""
    above = [other for other in RULES if other.name in r.superseded_by]
    return 1 + max(map(_depth, above)) if above else 0


def exit_status(results: list[Result]) -> int:
    """0 all PASS/SKIP, 1 any WARN, 2 any FAIL."""
    return max((_RANK[r.status] for r in results), default=0)


def failed(results: list[Result]) -> bool:
    return any(r.status == "FAIL" for r in results)


def registered() -> list[Rule]:
    """Every registered rule, in the order results are shown."""
    _load_families()
    return sorted(RULES, key=_order)


def _load_families() -> None:
    """Import the rule families (each registers its rules on import); FAMILIES' order is the output's."""
    for family in FAMILIES:
        importlib.import_module(f"{__package__}.{family}")
