"""The user's working directory in every runtime: each rank starts in it, mounted at its own path where
the runtime would not see it (pyxis, docker, podman, ch-run), nothing added where it is bound by default
(apptainer, singularity); --workdir overrides this shell's directory, and a path the runtime cannot
mount is refused in one line (rule workdir-path), exit 2, nothing written."""

from __future__ import annotations

import re
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcbundle.launch import RankLayout, build_command, load_site
from hpcbundle.launch.batch import BatchJob, directives
from hpcbundle.launch.workdir import FLAG_SOURCE, SHELL_SOURCE, WorkDir

from .helpers import ROOT, hpcbundle, make_site, write_site

SITES = ROOT / "site_configs"
PROGRAM = ["python3", "train.py"]
PROJECT = WorkDir("/home/user/my project", FLAG_SOURCE)
DOCKER = make_site("local", {"container": {"runtime": "docker"}}, name="dock")
PODMAN = make_site("local", {"container": {"runtime": "podman"}}, name="pod")


def argv(site_name: str, workdir: WorkDir | None, image: str | None = "h.sif", np_: int = 2) -> list[str]:
    site = load_site(site_name, SITES)
    return build_command(site, RankLayout(np_, in_allocation=True), PROGRAM, image, workdir=workdir).argv


def test_pyxis_mounts_the_working_directory_beside_the_binds_and_starts_every_rank_there():
    words = argv("slurm-pyxis-h100", PROJECT, "/scratch/h.sqsh", 16)
    assert "--container-mounts=/scratch:/scratch,/home/user/my project:/home/user/my project" in words
    assert "--container-workdir=/home/user/my project" in words


def test_a_working_directory_under_a_bind_is_not_mounted_twice():
    words = argv("slurm-pyxis-h100", WorkDir("/scratch/me/run"), "/scratch/h.sqsh", 16)
    assert "--container-mounts=/scratch:/scratch" in words and "--container-workdir=/scratch/me/run" in words
    docker = build_command(
        make_site("local", {"container": {"runtime": "docker", "binds": ["/data"]}}, name="d"),
        RankLayout(2),
        PROGRAM,
        "img",
        workdir=WorkDir("/data/me"),
    ).argv
    assert docker.count("-v") == 1 and docker[docker.index("-w") + 1] == "/data/me"


@pytest.mark.parametrize("site", [DOCKER, PODMAN], ids=["docker", "podman"])
def test_docker_and_podman_mount_it_and_start_the_launcher_there(site):
    words = build_command(site, RankLayout(2), PROGRAM, "img", workdir=PROJECT).argv
    assert words[:2] == [site.container.runtime, "run"]
    assert words[words.index("-v") + 1] == "/home/user/my project:/home/user/my project"
    assert words[words.index("-w") + 1] == "/home/user/my project"
    assert words.index("-w") < words.index("img") < words.index("mpirun")


def test_charliecloud_binds_it_and_cds_into_it():
    words = argv("local-charliecloud", PROJECT, "/var/tmp/img")
    assert words[words.index("-b") + 1] == "/home/user/my project"
    assert "--cd=/home/user/my project" in words and words.index("--cd=/home/user/my project") < words.index("--")


def test_apptainer_adds_no_word_and_explains_its_default():
    plain, with_dir = argv("eth-a100-slurm", None), argv("eth-a100-slurm", WorkDir(PROJECT.path, SHELL_SOURCE))
    assert plain == with_dir
    site = load_site("eth-a100-slurm", SITES)
    lines = build_command(site, RankLayout(8, in_allocation=True), PROGRAM, "h.sif", workdir=WorkDir("/w")).explain()
    assert any(
        line.startswith("(nothing)")
        and f"<- {SHELL_SOURCE} /w: apptainer binds the working directory and starts the program in it" in line
        and "rule contained-workdir" in line
        for line in lines
    )


@pytest.mark.parametrize(
    ("site", "words"),
    [
        ("local", ["--wdir", PROJECT.path]),
        ("ib-v100", ["-wdir", PROJECT.path]),  # Open MPI 4 with launcher.single_dash
        ("roce-h100-ompi5", ["--wdir", PROJECT.path]),
        ("eth-a100-slurm", [f"--chdir={PROJECT.path}"]),
    ],
)
def test_with_workdir_given_the_launcher_starts_every_rank_there_and_with_the_shells_adds_nothing(site, words):
    hosts = (("h1", 2),) if site != "eth-a100-slurm" else ()
    model = load_site(site, SITES)
    image = None if site == "local" else "h.sif"

    def line(workdir: WorkDir | None) -> list[str]:
        return build_command(model, RankLayout(2, hosts, in_allocation=not hosts), PROGRAM, image, workdir=workdir).argv

    given = line(PROJECT)
    at = next(i for i in range(len(given)) if given[i : i + len(words)] == words)
    assert at < given.index(PROGRAM[0]) and (image is None or at < given.index(image))
    assert given[:at] + given[at + len(words) :] == line(None) == line(WorkDir(PROJECT.path, SHELL_SOURCE))


def test_hydra_starts_every_rank_in_the_given_workdir():
    site = load_site("stampede2-knl", SITES)
    words = build_command(site, RankLayout(2, (("c1", 1), ("c2", 1))), PROGRAM, workdir=PROJECT).argv
    assert words[words.index("-wdir") + 1] == PROJECT.path and words.index("-wdir") < words.index("taskset")


def test_runtimes_that_start_the_program_there_themselves_get_no_launcher_option():
    for words in (
        argv("slurm-pyxis-h100", PROJECT, "/scratch/h.sqsh", 16),
        argv("local-charliecloud", PROJECT, "/var/tmp/img"),
        build_command(DOCKER, RankLayout(2), PROGRAM, "img", workdir=PROJECT).argv,
    ):
        assert not {"--wdir", "-wdir"} & set(words) and not any(word.startswith("--chdir") for word in words)
    on_host = build_command(DOCKER, RankLayout(2), PROGRAM, None, workdir=PROJECT).argv  # no image: no container
    assert on_host[on_host.index("--wdir") + 1] == PROJECT.path


def test_horovodrun_has_no_option_for_it_and_explain_says_to_run_the_line_from_there():
    site = make_site("local", launcher={"name": "horovodrun", "gloo": True}, name="hvd", why={})
    plain = build_command(site, RankLayout(2, (("h1", 2),)), PROGRAM, workdir=None)
    given = build_command(site, RankLayout(2, (("h1", 2),)), PROGRAM, workdir=PROJECT)
    assert given.argv == plain.argv
    assert any(
        f"<- {FLAG_SOURCE} {PROJECT.path}: horovodrun has no option for the ranks' directory" in line
        and "run the line from there" in line
        for line in given.explain()
    )


def test_a_batch_scripts_launch_line_starts_where_the_job_does(tmp_path):
    out = tmp_path / "job.sh"
    result = hpcbundle(
        "sbatch",
        "--site",
        "eth-a100-slurm",
        "--image",
        "h.sif",
        "--nodes",
        "1",
        "--workdir",
        PROJECT.path,
        "-o",
        str(out),
        "--",
        *PROGRAM,
    )
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert f'#SBATCH --chdir="{PROJECT.path}"' in text and "--chdir=/" not in text.replace("#SBATCH --chdir", "")


def test_launch_warns_when_container_args_keep_apptainer_from_binding_the_working_directory(tmp_path):
    path = write_site(tmp_path, "eth-a100-slurm", {"container": {"args": ["--no-mount", "cwd"]}}, name="contained")
    args = ["launch", "--site", str(path), "--image", "h.sif", "--np", "8"]
    inside = {"SLURM_JOB_ID": "1"}  # srun: inside an allocation
    outside = hpcbundle(*args, "--workdir", "/home/user/project", "--explain", "--", *PROGRAM, env=inside)
    assert outside.returncode == 0, outside.stderr
    assert re.search(
        r"^WARN\s+contained-workdir\s+container.args: has --no-mount cwd, so apptainer does not", outside.stderr, re.M
    )
    assert "container.args has --no-mount cwd: apptainer does not bind it (rule contained-workdir)" in outside.stdout
    under_a_bind = hpcbundle(*args, "--workdir", "/scratch/me/run", "--", *PROGRAM, env=inside)
    assert under_a_bind.returncode == 0 and "contained-workdir" not in under_a_bind.stderr, under_a_bind.stderr


def test_the_cli_reads_this_shells_directory_and_the_flag_overrides_it(tmp_path):
    args = ["launch", "--site", "local-charliecloud", "--image", "/var/tmp/img", "--np", "2"]
    here = hpcbundle(*args, "--explain", "--", *PROGRAM, cwd=tmp_path)
    assert f"--cd={tmp_path}" in here.stdout and f"<- {SHELL_SOURCE}: every rank starts" in here.stdout
    there = hpcbundle(*args, "--workdir", "/home/user/project", "--explain", "--", *PROGRAM, cwd=tmp_path)
    assert "--cd=/home/user/project" in there.stdout and f"<- {FLAG_SOURCE}: every rank starts" in there.stdout


@pytest.mark.parametrize(
    ("site", "workdir", "line"),
    [
        ("local", "run", "--workdir: 'run' is not an absolute path (give it from /, e.g. $PWD/run)"),
        (
            "slurm-pyxis-h100",
            "/home/a,b",
            "--workdir: '/home/a,b' has ',', which splits pyxis's mount of the working directory "
            "(run from (or give --workdir) a directory without ',')",
        ),
        (
            "local-charliecloud",
            "/home/a:b",
            "--workdir: '/home/a:b' has ':', which splits charliecloud's mount of the working directory "
            "(run from (or give --workdir) a directory without ':')",
        ),
    ],
)
def test_a_working_directory_the_runtime_cannot_mount_is_refused_in_one_line(tmp_path, site, workdir, line):
    out = tmp_path / "job.sh"
    for command in (["launch", "--np", "2"], ["sbatch", "--nodes", "1", "-o", str(out)]):
        image = [] if site == "local" else ["--image", "/scratch/h.sqsh"]
        inside = {"SLURM_JOB_ID": "1"}  # an srun line is printed inside an allocation
        result = hpcbundle(*command, "--site", site, *image, "--workdir", workdir, "--", "x", env=inside)
        assert result.returncode == 2 and result.stdout == "", result.stderr
        assert result.stderr == f"hpcbundle: error: {line}\n"
    assert not out.exists()


def test_sbatch_starts_the_job_in_the_working_directory_quoted_for_slurms_parser():
    site = load_site("local", SITES)
    assert "--chdir=/home/user/project" in directives(site, BatchJob(1, workdir=WorkDir("/home/user/project")))
    assert '--chdir="/home/user/my project"' in directives(site, BatchJob(1, workdir=PROJECT))
    assert not any(word.startswith("--chdir") for word in directives(site, BatchJob(1)))


def test_sbatch_refuses_a_working_directory_with_a_bidi_override_an_sbatch_line_would_hide(tmp_path):
    out = tmp_path / "job.sh"
    result = hpcbundle("sbatch", "--nodes", "1", "--workdir", "/home/a\u202eb", "-o", str(out), "--", "python3", "t.py")
    assert result.returncode == 2 and not out.exists()
    assert result.stderr == (
        "hpcbundle: error: --workdir: '/home/a\\u202eb' has '\\u202e', which an #SBATCH --chdir line would carry "
        "unseen (or reordered) (use a directory of visible characters)\n"
    )


def _slurm_parse(line: str, single_quotes: bool) -> list[str]:
    """The words SLURM's #SBATCH parser (src/sbatch/opt.c _get_argument) reads from `line`: a backslash takes the
    next character as it is; '"' (and, since the parser learnt them, "'") toggles quoting, within which a blank
    is kept; an unescaped '#' outside quotes (or, before single quotes were learnt, anywhere) ends the line."""
    words, i = [], 0
    while True:
        while i < len(line) and line[i].isspace():
            i += 1
        if i == len(line):
            return words
        word, quote, escape = "", "", False
        while i < len(line) and (quote or not line[i].isspace()):
            char = line[i]
            i += 1
            if escape:
                escape = False
            elif char == "\\":
                escape = True
                continue
            elif quote and char == quote:
                quote = ""
                continue
            elif char == "#" and not (quote and single_quotes):
                return [*words, word] if word else words
            elif not quote and (char == '"' or (single_quotes and char == "'")):
                quote = char
                continue
            word += char
        assert not quote, f"unmatched {quote} in {line!r}"
        words.append(word)


PRINTABLE_PATHS = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")).filter(
        lambda c: c == " " or c.isprintable()
    ),
    min_size=1,
    max_size=30,
).map(lambda text: "/" + text)


@settings(max_examples=200, deadline=None)
@given(path=PRINTABLE_PATHS | st.sampled_from(["/tmp/exp#3", "/home/it's", "/a\\b", '/a"b', "/x # y", "/p\\"]))
def test_slurm_reads_the_chdir_line_back_as_the_working_directory_in_old_and_new_releases(path):
    site = load_site("local", SITES)
    [chdir] = [word for word in directives(site, BatchJob(1, workdir=WorkDir(path))) if word.startswith("--chdir")]
    for single_quotes in (False, True):
        assert _slurm_parse(f" {chdir} # a comment", single_quotes) == [f"--chdir={path}"]  # after "#SBATCH"


# Absolute paths with the characters a shell or a mount spec would split or expand (never ':' or ','
# where the runtime mounts it: workdir-path refuses those, so docker and pyxis get them without).
SEGMENT = st.text(alphabet=st.sampled_from(list("abc XYZ019 '\"$`\\!*?;&|(){}[]<>~#=%-_.")), min_size=1, max_size=12)
WORKDIRS = st.lists(SEGMENT, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts))


@settings(max_examples=60, deadline=None)
@given(path=WORKDIRS)
def test_any_working_directory_reaches_the_argv_as_one_word_unchanged(path):
    workdir = WorkDir(path)
    docker = build_command(DOCKER, RankLayout(2), PROGRAM, "img", workdir=workdir)
    assert docker.argv[docker.argv.index("-w") + 1] == path
    pyxis = argv("slurm-pyxis-h100", workdir, "/scratch/h.sqsh", 16)
    assert f"--container-workdir={path}" in pyxis
    charliecloud = argv("local-charliecloud", workdir, "/var/tmp/img")
    assert f"--cd={path}" in charliecloud
    for command in (docker.argv, pyxis, charliecloud):
        assert shlex.split(shlex.join(command)) == command
    assert shlex.split(docker.display()) == docker.argv


def test_launch_exec_in_a_working_directory_that_does_not_exist_is_refused_in_one_line(tmp_path):
    gone = tmp_path / "gone"
    result = hpcbundle("launch", "--np", "1", "--workdir", str(gone), "--exec", "--no-doctor", "--", "python3", "t.py")
    assert (result.returncode, result.stdout) == (2, "")
    assert (
        result.stderr
        == f"hpcbundle: error: --workdir: {gone}: No such file or directory (give a directory that exists)\n"
    )


@pytest.mark.full_setup
def test_launch_exec_starts_the_job_in_the_given_working_directory(tmp_path):
    """The job itself starts there (as horovodrun, which has no option for it, needs), not only its ranks."""
    (tmp_path / "proj").mkdir()
    program = ["python3", "-c", "import os; print('cwd=' + os.getcwd())"]
    result = hpcbundle(
        "launch", "--np", "1", "--workdir", str(tmp_path / "proj"), "--exec", "--no-doctor", "--", *program
    )
    assert result.returncode == 0, result.stderr
    assert f"cwd={tmp_path / 'proj'}\n" in result.stdout
