"""A corpus of bad inputs, generated from tables: broken and hostile files (recipes, sites,
hostfiles, plans), and bad arguments. Every case must end in a clean error (exit 2, one line per
problem, no traceback) or, where the input is merely odd, in an artifact that runs no payload;
never a traceback, an injection, a partial file or a hang. The summary line gives the counts.

Cases run in-process through click's CliRunner, each in its own directory and bounded by a timer.
"""

from __future__ import annotations

import os
import signal
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from hpcbundle.cli import main

from .helpers import ROOT
from .untrusted import (
    PAYLOADS,
    PWNED,
    RECIPE,
    SITE,
    Sandbox,
    base_recipe,
    base_site,
    def_script_lines,
    def_sections,
    dockerfile_instructions,
    dockerfile_run_lines,
    new_lines,
    with_value,
)

CASE_SECONDS = 20
HUGE = "9" * 5000
BAD_KINDS = ("tracebacks", "injections", "partial files", "hangs")

# A file is bytes, or one of these markers for a special file.
FIFO, DIRECTORY, DEV_ZERO, DANGLING = "<fifo>", "<directory>", "<symlink to /dev/zero>", "<dangling symlink>"
Content = bytes | str


@dataclass
class Case:
    """One bad input: files to create in a fresh directory, then the CLI's arguments (after --bundle)."""

    name: str
    args: list[str]
    files: dict[str, Content] = field(default_factory=dict)


# ---- the tables ------------------------------------------------------------------------------

BROKEN_YAML: dict[str, Content] = {
    "not UTF-8": b"name: x\ndescription: caf\xe9\n",
    "UTF-16": "name: x\n".encode("utf-16"),
    "tag !!int": b"a: !!int abc\n",
    "tag !!float": b"a: !!float abc\n",
    "tag !!bool": b"a: !!bool maybe\n",
    "tag !!timestamp": b"a: !!timestamp bad\n",
    "tag !!python": b"a: !!python/object/apply:os.system [id]\n",
    "bad date": b"a: 2001-13-45\n",
    "billion laughs": b"a: &a [x,x,x,x,x,x,x,x,x]\n"
    + b"".join(
        f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n".encode()
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    ),
    "deep flow nesting": b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "deep block nesting": "".join(f"{'  ' * i}k{i}:\n" for i in range(300)).encode() + b"  " * 300 + b"v\n",
    "5000-digit integer": f"a: {HUGE}\n".encode(),
    "complex key": b"? [a, b]\n: 1\n",
    "mapping key": b"? {a: 1}\n: 1\n",
    "duplicate key": b"name: a\nname: b\n",
    "octal 010": b"name: x\nversion: 010\n",
    "sexagesimal": b"name: x\nversion: 1:20\n",
    "empty": b"",
    "a list": b"- a\n- b\n",
    "a scalar": b"just words\n",
    "NUL escape": b'name: "a\\0b"\n',
    "raw NUL": b"name: a\x00b\n",
    "3 MB of unknown keys": b"".join(b"k%d: v\n" % i for i in range(400_000)),
    "5000 keys": b"".join(b"k%d: v\n" % i for i in range(5000)),
    "long list": b"a: [" + b"1," * 5000 + b"1]\n",
    "shadow-like": b"root:$6$salt$hash:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n",
    "binary": bytes(range(256)) * 4,
    "tabs": b"a:\n\tb: 1\n",
    "unclosed quote": b'name: "x\n',
    "fifo": FIFO,
    "directory": DIRECTORY,
    "/dev/zero": DEV_ZERO,
    "dangling symlink": DANGLING,
}

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
FORMATS = ("docker", "singularity", "shell")


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


class _Hang(Exception):
    """Raised by the timer when a case runs past CASE_SECONDS."""


def _make(directory: Path, files: dict[str, Content]) -> None:
    for name, content in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content == FIFO:
            os.mkfifo(path)
        elif content == DIRECTORY:
            path.mkdir()
        elif content == DEV_ZERO:
            path.symlink_to("/dev/zero")
        elif content == DANGLING:
            path.symlink_to(directory / "nowhere")
        elif isinstance(content, str) and content.startswith("<symlink to "):
            path.symlink_to(directory / content.removeprefix("<symlink to ").rstrip(">"))
        else:
            assert isinstance(content, bytes)
            path.write_bytes(content)


def _snapshot(directory: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under `directory`: (mode, size, mtime) by relative name (links not followed)."""
    found = {}
    for path in directory.rglob("*"):
        info = path.lstat()
        found[str(path.relative_to(directory))] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return found


@dataclass(frozen=True)
class Clean:
    """Clean renders of the base recipe, to compare hostile renders with."""

    renders: dict[str, str]


def _clean(directory: Path) -> Clean:
    (directory / f"{RECIPE}.yaml").write_text(yaml.safe_dump(base_recipe()))
    renders = {}
    for fmt in FORMATS:
        result = CliRunner().invoke(
            main, ["--bundle", str(ROOT), "render", f"{directory}/{RECIPE}.yaml", "--format", fmt]
        )
        assert result.exit_code == 0, result.output
        renders[fmt] = result.stdout
    return Clean(renders)


def _injected(box: Sandbox, produced: dict[str, str], stdout: str, clean: Clean) -> bool:
    """Whether a produced artifact (or a printed launch line) runs the payload, or changed structure."""
    for name, text in produced.items():
        if "#SBATCH" in text:
            (box.root / "job-copy.sh").write_text(text, encoding="utf-8", errors="surrogateescape")
            box.run("/bin/bash job-copy.sh")
        elif name.endswith(".docker"):
            if dockerfile_instructions(text) != dockerfile_instructions(clean.renders["docker"]):
                return True
            box.run_lines(new_lines(dockerfile_run_lines(text), dockerfile_run_lines(clean.renders["docker"])))
        elif name.endswith(".singularity"):
            if def_sections(text) != def_sections(clean.renders["singularity"]):
                return True
            box.run_lines(new_lines(def_script_lines(text), def_script_lines(clean.renders["singularity"])))
        elif name.endswith(".shell"):
            lines = [line.strip() for line in text.splitlines()]
            box.run_lines(new_lines(lines, [line.strip() for line in clean.renders["shell"].splitlines()]))
    if stdout.startswith(("mpirun", "srun")):
        box.run(stdout)
    return box.pwned


def run_case(case: Case, work: Path, clean: Clean) -> str:
    """The outcome of one case: 'clean error', 'accepted', or one of BAD_KINDS."""
    directory = work / "case"
    directory.mkdir()
    _make(directory, case.files)
    before = _snapshot(directory)
    old = signal.signal(signal.SIGALRM, _raise_hang)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    cwd = os.getcwd()
    try:
        os.chdir(directory)
        result = CliRunner().invoke(main, ["--bundle", str(ROOT), *case.args], env={"SLURM_JOB_ID": None})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        os.chdir(cwd)
    if isinstance(result.exception, _Hang):
        return "hangs"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return "tracebacks"
    after = _snapshot(directory)
    leftovers = [name for name in after if Path(name).name.startswith(".") and name not in before]
    messages = result.stderr.splitlines()
    if result.exit_code == 2:
        clean_lines = all(
            line.startswith(("hpcbundle: error: ", "Usage: ", "Try ", "Error: ")) or not line for line in messages
        )
        if after != before:
            return "partial files"
        return "clean error" if clean_lines else "tracebacks"
    if result.exit_code != 0 and not (case.args[:2] == ["scaling", "report"] and result.exit_code == 1):
        return "tracebacks"  # only `scaling report` has another documented status: 1, a point without a figure
    if leftovers:
        return "partial files"
    produced = {
        name: (directory / name).read_bytes().decode("utf-8", errors="surrogateescape")
        for name, stamp in after.items()
        if before.get(name) != stamp and (directory / name).is_file() and not (directory / name).is_symlink()
    }
    produced = {_kind(case, name): text for name, text in produced.items()}
    return "injections" if _injected(Sandbox(work / "sandbox"), produced, result.stdout, clean) else "accepted"


def _kind(case: Case, name: str) -> str:
    """A produced file's name with the render format it holds (out.docker, out.shell, ...)."""
    if "--format" in case.args and "-o" in case.args:
        return f"{name}.{case.args[case.args.index('--format') + 1]}"
    return name


def _raise_hang(signum: int, frame: object) -> None:
    raise _Hang()


# ---- the test --------------------------------------------------------------------------------


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
