"""The program's environment on every node, as the launcher starts it: the job's own launch line
with the program replaced by a probe, one rank per node.

Doctor's own fan-out reaches a node its own way; a rank reaches it through the launcher (ssh with
the login shell's PATH, a container, srun's environment). So the probe runs through the very
command `launch` generates: its first word resolved as the rank resolves it, and, for a Python
interpreter, the interpreter found there and the versions of horovod and the frameworks the
program imports. The launching node runs the same probe locally as the reference::

    /bin/sh -c SCRIPT sh python3 PROBE horovod torch     # what replaces `python3 train.py`
    HPCBUNDLE-PROBE<TAB>python<TAB>{"host": "node2", "rank": "1", "executable": "/usr/bin/python3", ...}
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, NamedTuple, Sequence

from ..config.errors import UserError
from ..execute import run_captured
from .imports import ProgramImports

MARK = "HPCBUNDLE-PROBE"
# The frameworks a Horovod program may import; horovod itself is always probed.
FRAMEWORKS = ("torch", "tensorflow", "keras", "mxnet")

# Runs in the rank: resolve the program's first word with the rank's PATH, as the launcher does;
# a Python interpreter then runs PYTHON_PROBE, anything else is reported as found or missing.
SHELL_PROBE = r"""host=$(hostname)
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-${HOROVOD_RANK:-${SLURM_PROCID:-}}}}}
if ! exe=$(command -v "$1"); then
    printf '@MARK@\t%s\t%s\t%s\t%s\n' missing "$host" "$rank" "$PATH"
    exit 0
fi
case ${exe##*/} in
    python*) exec "$exe" -c "$2" "$host" "$rank" "$@" ;;
esac
printf '@MARK@\t%s\t%s\t%s\t%s\n' found "$host" "$rank" "$exe"
""".replace("@MARK@", MARK)

# argv: -c HOST RANK ARGV0 PROBE MODULE... [-- IMPORT...]; versions from package metadata and
# modules found, not imported (importing torch costs seconds on every node). Each IMPORT, a
# top-level name the program imports, is looked up with find_spec only; those not found are `missing`.
PYTHON_PROBE = r"""import importlib.metadata as md, importlib.util as iu, json, sys, time
host, rank, args = sys.argv[1], sys.argv[2], sys.argv[5:]
mods, imports = (args[: args.index("--")], args[args.index("--") + 1 :]) if "--" in args else (args, [])
def spec(m):
    try:
        return iu.find_spec(m)
    except (ImportError, ValueError):
        return None
found = {}
for m in mods:
    if spec(m) is None:
        found[m] = None
        continue
    try:
        found[m] = md.version(m)
    except md.PackageNotFoundError:
        found[m] = getattr(__import__(m), "__version__", "?")
missing = [m for m in imports if spec(m) is None]
info = {"host": host, "rank": rank, "executable": sys.executable, "prefix": sys.prefix, "modules": found}
print("@MARK@\tpython\t" + json.dumps({**info, "missing": missing}), flush=True)
time.sleep(0.1)
""".replace("@MARK@", MARK)


class ProgramProbe(NamedTuple):
    """What doctor runs: `launch_argv` (the job's launch line with `words` as its program; None when every
    rank runs on this node outside a container: `words` here are the ranks' probe), and
    `hosts`, the node of each rank in order (rank i runs on hosts[i]). `in_image`: the ranks run in
    a container, whose environment is the image's: the first node's rank is the reference, not
    this node's own shell. `imports`: what the program imports, read here (None: not a .py file)."""

    launch_argv: list[str] | None
    words: list[str]
    hosts: list[str]
    in_image: bool = False
    imports: ProgramImports | None = None


def probe_words(argv0: str, modules: Sequence[str], imports: Sequence[str] = ()) -> list[str]:
    """The program that replaces the job's: resolve `argv0` and, for Python, report the versions of
    `modules` and which of `imports` (top-level names) are missing.

    >>> probe_words("python3", ["horovod"], ["torchvision"])[3:5] + probe_words("python3", ["horovod"], ["tqdm"])[6:]
    ['sh', 'python3', 'horovod', '--', 'tqdm']
    """
    return ["/bin/sh", "-c", SHELL_PROBE, "sh", argv0, PYTHON_PROBE, *modules, *(["--", *imports] if imports else [])]


def parse_probe(output: str) -> list[dict[str, Any]]:
    r"""The probe records in a launch's output, one dict per rank; anything else is ignored.

    Records are found by their mark, not by line: mpirun forwards a rank's output in chunks, and a
    record's newline may arrive after the next rank's record (seen with Open MPI 4.1 over ssh)::

        >>> [r["host"] for r in parse_probe('HPCBUNDLE-PROBE\tpython\t{"host": "n1", "rank": "0"}'
        ...     'HPCBUNDLE-PROBE\tmissing\tn2\t1\t/usr/bin\n\nnoise\n')]
        ['n1', 'n2']
    """
    found = []
    for chunk in output.split(MARK)[1:]:
        fields = chunk.split("\n", 1)[0].split("\t")
        kind = fields[1] if len(fields) > 1 else ""
        if kind == "python":
            try:
                data, _ = json.JSONDecoder().raw_decode(chunk.split("\t", 2)[2])
            except ValueError:
                continue
            found.append({"kind": kind, **data})
        elif kind in ("missing", "found") and len(fields) == 5:
            key = "path" if kind == "missing" else "executable"
            found.append({"kind": kind, "host": fields[2], "rank": fields[3], key: fields[4]})
    return found


def observe(probe: ProgramProbe, timeout: float, stop: threading.Event | None = None) -> dict[str, Any]:
    """Run the probe through the launch line and, without an image, here (the reference).

    {'argv0', 'reference': where the reference ran, 'launching': its rank facts, 'nodes': {host:
    rank facts or {'error'}}, 'error'?}. `stop` ends the launch early (doctor sets it when the
    nodes already failed, e.g. a wrong interface, where the launch line would only hang until `timeout`).
    """
    argv0 = probe.words[4]
    reference = f"{probe.hosts[0]} (the image as the launcher starts it)" if probe.in_image else "this node"
    launching: dict[str, Any] = {}
    if not probe.in_image:
        ran = run_captured(probe.words, timeout, stop=stop)  # stopped too when the nodes already failed
        here = ran.stdout + ran.stderr
        launching = next(iter(parse_probe(here)), {"kind": "missing", "path": os.environ.get("PATH", "")})
    facts: dict[str, Any] = {"argv0": argv0, "reference": reference, "launching": launching, "nodes": {}}
    facts["imports"] = probe.imports._asdict() if probe.imports else None
    if probe.launch_argv is None:  # every rank runs here as this shell starts it: the reference is theirs
        return {**facts, "nodes": {probe.hosts[0]: launching}}
    try:
        ran = run_captured(probe.launch_argv, timeout, grace=1.0, stop=stop)
    except UserError as exc:
        return {**facts, "error": str(exc)}
    status, out = ran.status, ran.stdout + ran.stderr
    ranks = {int(r["rank"]): r for r in parse_probe(out) if r.get("rank", "").isdigit()}
    nodes: dict[str, dict[str, Any]] = {}
    for index, host in enumerate(probe.hosts):
        if index in ranks:
            nodes[host] = ranks[index]
        else:
            why = f"no answer within {timeout:g} s" if status is None else f"exit {status}"
            tail = [line for line in out.strip().splitlines() if line.strip()][-1:] or [""]
            nodes[host] = {"error": f"the probe rank did not report ({why}): {tail[0].strip()[:200]}"}
    if probe.in_image:
        facts["launching"] = nodes[probe.hosts[0]]
    return {**facts, "nodes": nodes}
