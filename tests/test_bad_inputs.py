"""A corpus of bad inputs, generated from tables: broken and hostile files (recipes, sites,
hostfiles, plans), and bad arguments. Every case must end in a clean error (exit 2, one line per
problem, no traceback) or, where the input is merely odd, in an artifact that runs no payload;
never a traceback, an injection, a partial file or a hang. The summary line gives the counts.

Cases run in-process through click's CliRunner, each in its own directory and bounded by a timer.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from .badinput import BAD_KINDS, BROKEN_YAML, DEV_ZERO, DIRECTORY, FIFO, FORMATS, HUGE, Case, Content, _clean, run_case
from .untrusted import PAYLOADS, PWNED, RECIPE, SITE, base_recipe, base_site, with_value

BAD_COUNTS = ["0", "-1", HUGE, "٣", "²", "1e3", "", " ", "2\n", "0x10", "1.5", "10000000000"]
BAD_HOSTS = ["", ",", "a:0", "a:00", "a:٠", "a:99999999999", f"a:{HUGE}", "a b", "a:1,,b", "-a", "a:-1", "a;b", "$(x)"]
BAD_HOSTS += ["n[1-5000]", f"n[1-{HUGE}]", f"n[{HUGE}]", "n[1-64]-[1-65]", "n[3-1]", "n[01-4]", "n[1-", "@all"]
BAD_HOSTS += ["n[1]!n1"]
BAD_HOSTFILES = [
    b"a slots=0\n",
    b"a slots=99999999999\n",
    b"a:0\n",
    "a slots=٣\n".encode(),
    b"a slots=2 extra\n",
    b"a:2 slots=3\n",
    b"$(x)\n",
    b"a slots=2\n\xff\xfe\n",
    f"a slots={HUGE}\n".encode(),
    b"a:\n",
    b"\n\n# only comments\n",
]
BAD_REFS = [
    "local\n",
    "",
    " ",
    "../../etc/passwd",
    "x" * 5000,
    "\x1b[31m",
    "loc*",
    "/dev/null",
    "/",
    "-",
    "cpu-local\x00",
]
BAD_TIMES = ["10\n", "٣٠", "1:2:3:4", "9" * 30, "$(x)", "10;x", "", " 10", "10:6", "\x1b[31m"]
BAD_NODE_LISTS = ["1-10000000000", "0", "2-1", "1-200000", "", "٣", "1,,2", HUGE, "1-4,a", "-1"]
BAD_SIZES = ["0", "٣M", "²", HUGE, "1T", "-1", "17G", "", "M"]
RECIPE_FIELDS: list[tuple[Any, ...]] = [
    ("description",),
    ("base", "build_image"),
    ("base", "runtime_image"),
    ("mpi", "source", "url"),
    ("mpi", "configure", 0),
    ("ucx", "configure", 0),
    ("horovod", "build_env", "HOROVOD_CPU_OPERATIONS"),
    ("horovod", "build_env", ("key", "HOROVOD_CPU_OPERATIONS")),
    ("mpi", "version"),
    ("python",),
]
SITE_FIELDS: list[tuple[Any, ...]] = [
    ("description",),
    ("env", "NCCL_IB_DISABLE"),
    ("env", ("key", "NCCL_IB_DISABLE")),
    ("mca", "pml"),
    ("mca", "plm_rsh_agent"),
    ("container", "binds", 0),
    ("slurm", "partition"),
    ("slurm", "job_name"),
    ("launcher", "args", 0),
    ("wrappers", 0, 0),
]


def _file(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> bytes:
    """`data` with one value replaced, as the bytes of a YAML file (argv-like text kept byte for byte)."""
    text = yaml.safe_dump(with_value(data, path, value), allow_unicode=True)
    return text.encode("utf-8", errors="surrogateescape")


def cases() -> list[Case]:
    """Every case of the corpus, generated from the tables above."""
    recipe, site = base_recipe(), base_site()
    rfile, sfile = f"{RECIPE}.yaml", f"{SITE}.yaml"
    sbatch = ["sbatch", "--site", sfile, "--nodes", "2", "-o", "job.sh", "--", "python", "train.py"]
    found: list[Case] = []
    for what, content in BROKEN_YAML.items():
        found.append(Case(f"recipe: {what}", ["render", rfile, "--format", "docker", "-o", "out"], {rfile: content}))
        found.append(Case(f"site: {what}", sbatch, {sfile: content}))
        found.append(Case(f"check: {what}", ["check", RECIPE, "--site", sfile], {sfile: content}))
        found.append(Case(f"hostfile: {what}", _launch("--hostfile", "hosts"), {"hosts": content}))
    for index, (path, payload) in enumerate((p, v) for p in RECIPE_FIELDS for v in PAYLOADS):
        fmt = FORMATS[index % 3]
        found.append(
            Case(
                f"recipe {'.'.join(map(str, path))} = {payload!r}",
                ["render", rfile, "--format", fmt, "-o", f"out.{fmt}"],
                {rfile: _file(recipe, path, payload)},
            )
        )
    for path, payload in ((p, v) for p in SITE_FIELDS for v in PAYLOADS):
        found.append(
            Case(f"site {'.'.join(map(str, path))} = {payload!r}", sbatch, {sfile: _file(site, path, payload)})
        )
    text = yaml.safe_dump(site).encode()
    for raw in (b"010", b"1.10", b"0x10", b"yes", b"1_000", b"1:20"):
        doc = text.replace(b"version: 4.1.6", b"version: " + raw)
        found.append(Case(f"site mpi.version: {raw.decode()} unquoted", sbatch, {sfile: doc}))
        for key, name in ((b"env", b"X_VALUE"), (b"mca", b"btl_tcp_eager_limit")):
            doc = text.replace(b"\n%s:\n" % key, b"\n%s:\n  %s: %s\n" % (key, name, raw), 1)
            found.append(Case(f"site {key.decode()}.{name.decode()}: {raw.decode()} unquoted", sbatch, {sfile: doc}))
    for value in BAD_COUNTS:
        found.append(Case(f"launch --np {value!r}", ["launch", "--np", value, "--", "python", "x"]))
        found.append(Case(f"sbatch --nodes {value!r}", ["sbatch", "--nodes", value, "-o", "j.sh", "--", "python"]))
        found.append(Case(f"sbatch --tasks-per-node {value!r}", [*sbatch[:5], "--tasks-per-node", value, *sbatch[5:]]))
        found.append(Case(f"doctor --timeout {value!r}", ["doctor", "--timeout", value]))
        found.append(Case(f"launch --timeout {value!r}", ["launch", "--np", "2", "--timeout", value, "--", "x"]))
        found.append(Case(f"scaling --repeat {value!r}", _plan("--nodes", "1-2", "--repeat", value)))
    for ref in BAD_REFS:
        found.append(Case(f"--site {ref!r}", ["sbatch", "--site", ref, "--nodes", "1", "--", "python"]))
        found.append(Case(f"render {ref!r}", ["render", ref, "--format", "docker"]))
    for value in BAD_HOSTS:
        found.append(Case(f"launch --hosts {value!r}", _launch("--hosts", value)))
        found.append(Case(f"doctor --hosts {value!r}", ["doctor", "--hosts", value]))
    for content in BAD_HOSTFILES:
        found.append(Case(f"hostfile {content[:30]!r}", _launch("--hostfile", "hosts"), {"hosts": content}))
    for value in BAD_TIMES:
        found.append(Case(f"sbatch --time {value!r}", [*sbatch[:5], "--time", value, *sbatch[5:]]))
    for value in BAD_NODE_LISTS:
        found.append(Case(f"scaling --nodes {value!r}", _plan("--nodes", value, "--mode", "weak")))
    for value in BAD_SIZES:
        found.append(Case(f"tune --size {value!r}", ["tune", "--np", "2", "--size", value, "--plan"]))
    found.extend(_output_cases(sbatch))
    found.extend(_report_cases())
    found.extend(_argv_cases())
    return found


def _launch(*options: str) -> list[str]:
    return ["launch", "--np", "2", *options, "--", "python", "train.py"]


def _plan(*options: str) -> list[str]:
    return ["scaling", "plan", *options, "-o", "study", "--"]


def _output_cases(sbatch: list[str]) -> list[Case]:
    """-o onto things that are not a plain new file."""
    found = []
    targets: dict[str, dict[str, Content]] = {
        "a FIFO": {"job.sh": FIFO},
        "a directory": {"job.sh": DIRECTORY},
        "a symlink to a FIFO": {"fifo": FIFO, "job.sh": "<symlink to fifo>"},
        "a path under a file": {"file": b"x"},
    }
    for what, files in targets.items():
        out = "file/job.sh" if what == "a path under a file" else "job.sh"
        for command in (
            ["render", "cpu-local", "--format", "docker", "-o", out],
            ["sbatch", "--nodes", "1", "-o", out, "--", "python"],
        ):
            found.append(Case(f"{command[0]} -o {what}", command, dict(files)))
    for command in (
        ["render", "cpu-local", "--format", "shell", "-o", ""],
        ["sbatch", "--nodes", "1", "-o", "", "--", "x"],
    ):
        found.append(Case(f"{command[0]} -o ''", command))
    found.append(Case("scaling plan -o ''", ["scaling", "plan", "--nodes", "1-2", "-o", "", "--"]))
    found.append(Case("scaling plan -o a file", _plan("--nodes", "1-2"), {"study": b"x"}))
    found.append(
        Case("scaling plan: a script is a directory", _plan("--nodes", "1-2"), {"study/weak-n02.sh": DIRECTORY})
    )
    found.append(Case("scaling plan: a script is a FIFO", _plan("--nodes", "1-2"), {"study/weak-n02.sh": FIFO}))
    return found


def _report_cases() -> list[Case]:
    """scaling report on damaged plans and outputs."""
    plans: dict[str, Content] = {
        "deep JSON": b"[" * 5000 + b"]" * 5000,
        "deep JSON object": b'{"points": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        "zero ranks": _plan_json(ranks=b"0"),
        "huge nodes": _plan_json(nodes=HUGE.encode()),
        "ranks as text": _plan_json(ranks=b'"x"'),
        "unknown mode": _plan_json(mode=b'"sideways"'),
        "NaN nodes": _plan_json(nodes=b"NaN"),
        "float ranks": _plan_json(ranks=b"1e999"),
        "not JSON": b"{",
        "not UTF-8": b'{"points": "\xff"}',
        "a list": b"[]",
        "a FIFO": FIFO,
        "a directory": DIRECTORY,
        "/dev/zero": DEV_ZERO,
    }
    found = [
        Case(f"report: plan.json {what}", ["scaling", "report", "study"], {"study/plan.json": c})
        for what, c in plans.items()
    ]
    good = _plan_json()
    outputs: dict[str, Content] = {
        "a FIFO": FIFO,
        "zero ranks": b'{"metric": "img_per_sec", "total": 10.0, "ranks": 0}\n',
        "zero images/sec": b'{"metric": "img_per_sec", "total": 0, "ranks": 1}\n',
        "infinite": b'{"metric": "img_per_sec", "total": 1e999, "ranks": 1}\n',
        "huge ranks": f'{{"metric": "img_per_sec", "total": 1, "ranks": {HUGE}}}\n'.encode(),
        "deep line": b'{"metric": "img_per_sec", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}\n",
        "not UTF-8": b"\xff\xfe garbage\n",
        "/dev/zero": DEV_ZERO,
    }
    for what, content in outputs.items():
        files = {"study/plan.json": good, "study/strong-n01.out": content}
        found.append(Case(f"report: output {what}", ["scaling", "report", "study"], files))
    return found


def _plan_json(**raw: bytes) -> bytes:
    """A one-point plan.json with some values replaced by raw JSON text."""
    values = {"mode": b'"strong"', "nodes": b"1", "ranks": b"1", "batch_per_rank": b"8"} | raw
    return b'{"points": [{' + b", ".join(b'"%s": %s' % (k.encode(), v) for k, v in values.items()) + b"}]}"


def _argv_cases() -> list[Case]:
    """Odd program words and images: accepted, and the artifact must hand them over exactly."""
    words = ["\x1b[31mred", "a\nb", "\udcff\udcfe", "$(" + PWNED + ")", "`" + PWNED + "`", "'", "\\", "\t", "\u2028"]
    found = []
    for word in words:
        found.append(Case(f"launch word {word!r}", ["launch", "--np", "2", "--", "python", word]))
        found.append(Case(f"sbatch -o word {word!r}", ["sbatch", "--nodes", "1", "-o", "job.sh", "--", "python", word]))
        found.append(Case(f"launch --image {word!r}", ["launch", "--np", "2", "--image", word, "--", "python"]))
    return found


# ---- running one case ------------------------------------------------------------------------


def test_bad_input_corpus_gives_only_clean_errors_or_inert_artifacts(capsys: pytest.CaptureFixture[str]) -> None:
    corpus = cases()
    outcomes: Counter[str] = Counter()
    bad: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hpcbundle-corpus-") as scratch:
        clean = _clean(Path(scratch))
        for index, case in enumerate(corpus):
            work = Path(scratch) / str(index)
            work.mkdir()
            outcome = run_case(case, work, clean)
            outcomes[outcome] += 1
            if outcome in BAD_KINDS:
                bad.append(f"{outcome}: {case.name}: {case.args}")
    summary = (
        f"bad-input corpus: {len(corpus)} cases, {outcomes['clean error']} clean errors, "
        f"{outcomes['accepted']} accepted inert, " + ", ".join(f"{outcomes[kind]} {kind}" for kind in BAD_KINDS)
    )
    with capsys.disabled():
        print(f"\n{summary}")
    assert len(corpus) >= 300
    assert not bad, "\n".join([summary, *bad[:40]])
