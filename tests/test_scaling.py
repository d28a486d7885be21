"""`hpcbundle scaling plan | report`: the exact plan (scripts, batch split), the efficiency math,
the T(W) = G/W + C(W) fit recovering known parameters, one-line refusals that write nothing, and
one real strong-scaling study (1 and 2 nodes) under SLURM in a namespace cluster."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hpcbundle.cli import main
from hpcbundle.config.errors import UserError
from hpcbundle.launch import load_site
from hpcbundle.launch.batch import script_environment
from hpcbundle.perf.plot import PNG_SIGNATURE
from hpcbundle.perf.scaling.model import communication, fit_model, fits
from hpcbundle.perf.scaling.plan import MODELS, Study, check_study_directory, parse_nodes, plan, plan_study
from hpcbundle.perf.scaling.report import csv_text
from hpcbundle.perf.scaling.results import parse_output, results
from hpcbundle_testbed import SlurmCluster
from hpcbundle_testbed.sites import site_data, write_site

from .helpers import ROOT, hpcbundle_argv

VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
EXAMPLES = ROOT / "examples"


def scaling(*args: str):
    """`hpcbundle scaling ARGS` in-process."""
    return CliRunner().invoke(main, ["--bundle", str(ROOT), "scaling", *args])


def benchmark_line(total: float, ranks: int, spread: float = 1.0) -> str:
    return json.dumps(
        {"metric": "img_per_sec", "total": total, "total_spread": spread, "ranks": ranks, "model": "resnet"}
    )


# --- the plan --------------------------------------------------------------------------------


def test_strong_splits_the_global_batch_and_weak_keeps_the_batch_per_rank():
    points = plan(Study(nodes=(1, 2, 4), tasks_per_node=2, global_batch=256, batch_per_rank=16))
    assert [(p.name, p.ranks, p.batch_per_rank, p.global_batch) for p in points] == [
        ("strong-n01", 2, 128, 256),
        ("strong-n02", 4, 64, 256),
        ("strong-n04", 8, 32, 256),
        ("weak-n01", 2, 16, 32),
        ("weak-n02", 4, 16, 64),
        ("weak-n04", 8, 16, 128),
    ]


def test_node_counts_parse_from_ranges_and_lists_and_zero_is_refused():
    assert parse_nodes("1-3,8") == (1, 2, 3, 8)
    with pytest.raises(UserError, match="--nodes: '0-2' is not a list of node counts"):
        parse_nodes("0-2")


def test_plan_writes_one_script_per_point_running_the_images_benchmark_into_the_study(tmp_path):
    out = tmp_path / "study"
    result = scaling(
        "plan",
        "--site",
        "eth-a100-slurm",
        "--image",
        "horovod.sif",
        "--nodes",
        "1-2",
        "--iters",
        "3",
        "--global-batch",
        "128",
        "-o",
        str(out),
        "--",
        "--fp16-allreduce",
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "plan.json",
        "strong-n01.sh",
        "strong-n02.sh",
        "weak-n01.sh",
        "weak-n02.sh",
    ]
    lines = (out / "strong-n02.sh").read_text().splitlines()
    for directive in (
        "--job-name=horovod-scaling",
        "--nodes=2",
        "--ntasks-per-node=4",
        f"--output={out}/strong-n02.out",
        "--dependency=singleton",
    ):
        assert f"#SBATCH {directive}" in lines
    srun = (
        "    srun --mpi=pmix -n 8 --kill-on-bad-exit=1 -c 16 --ntasks-per-node=4 --distribution=block:block "
        "--export=ALL \\"
    )
    assert srun in lines
    assert (
        "    python /examples/pytorch_synthetic_benchmark.py --model resnet --batch-size 16 --image-size 32 "
        "--num-warmup-batches 5 --num-batches-per-iter 5 --num-iters 3 --fp16-allreduce &"  # the site's faults
    ) in lines
    (weak,) = [line for line in (out / "weak-n02.sh").read_text().splitlines() if "pytorch_synthetic_benchmark" in line]
    assert "--batch-size 32 " in weak
    document = json.loads((out / "plan.json").read_text())
    assert document["site"] == "eth-a100-slurm" and document["image"] == "horovod.sif"
    assert [(p["name"], p["ranks"], p["batch_per_rank"], p["output"]) for p in document["points"]] == [
        ("strong-n01", 4, 32, "strong-n01.out"),
        ("strong-n02", 8, 16, "strong-n02.out"),
        ("weak-n01", 4, 32, "weak-n01.out"),
        ("weak-n02", 8, 32, "weak-n02.out"),
    ]


def test_plan_study_gives_each_points_script_the_plan_document_and_the_outputs_report_reads():
    site = load_site("eth-a100-slurm", ROOT / "site_configs")
    study = Study(nodes=(1, 2), modes=("weak",), tasks_per_node=2, repeat=2)
    env = script_environment(ROOT / "scripts")
    planned = plan_study(site, study, None, "/bundle/examples", "/studies/s1", env, "9.9")
    names = ["weak-n01-r1", "weak-n02-r1", "weak-n01-r2", "weak-n02-r2"]
    assert list(planned.scripts) == names
    assert planned.outputs() == [f"{name}.out" for name in names]
    assert "#SBATCH --output=/studies/s1/weak-n02-r2.out" in planned.scripts["weak-n02-r2"].splitlines()
    assert (
        "/bundle/examples/pytorch_synthetic_benchmark.py --model resnet --batch-size 32"
        in planned.scripts["weak-n01-r1"]
    )
    document = json.loads(planned.document)
    assert (document["hpcbundle"], document["site"], document["image"]) == ("9.9", "eth-a100-slurm", None)
    assert [p["round"] for p in document["points"]] == [1, 1, 2, 2]
    assert planned.summary("s1") == (
        "wrote 4 script(s) and plan.json to s1 (site eth-a100-slurm, weak scaling over 1, 2 node(s))"
    )


@pytest.mark.parametrize(
    "given, resolved, problem",
    [
        ("", "/home/me", "'': -o: names no directory (give the study's directory, e.g. -o study)"),
        ("s%j", "/home/me/s%j", "s%j: -o: contains whitespace or %, which #SBATCH --output cannot carry"),
        ("s", "/home/my files/s", "s: -o: contains whitespace or %"),
    ],
)
def test_a_study_directory_sbatch_cannot_carry_is_named_with_the_fix(given, resolved, problem):
    with pytest.raises(UserError) as refused:
        check_study_directory(given, resolved)
    assert str(refused.value).startswith(problem)


def test_without_an_image_the_scripts_run_the_bundles_example_and_pass_shellcheck(tmp_path):
    out = tmp_path / "s"
    result = scaling("plan", "--nodes", "1", "--mode", "weak", "--python", "python3", "--concurrent", "-o", str(out))
    assert result.exit_code == 0, result.output
    text = (out / "weak-n01.sh").read_text()
    assert text.splitlines()[-1].startswith(
        f"    python3 {EXAMPLES.resolve()}/pytorch_synthetic_benchmark.py --model resnet --batch-size 32 "
    )
    assert "--dependency" not in text
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    check = subprocess.run(
        [shellcheck, "--severity=style", str(out / "weak-n01.sh")], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout


def test_model_choices_are_the_benchmarks_models():
    source = (EXAMPLES / "pytorch_synthetic_benchmark.py").read_text()
    block = source[source.index("MODELS = {") : source.index("}", source.index("MODELS = {"))]
    assert sorted(re.findall(r'^\s+"([\w-]+)":', block, re.M)) == list(MODELS)


# --- results and the model -------------------------------------------------------------------


def test_efficiency_is_measured_against_the_smallest_point_in_each_mode():
    points = plan(Study(nodes=(2, 4), global_batch=64, batch_per_rank=16))
    rows = results(
        points,
        {
            "strong-n02": benchmark_line(1000, 2),
            "strong-n04": benchmark_line(1500, 4),
            "weak-n02": benchmark_line(400, 2),
            "weak-n04": benchmark_line(720, 4),
        },
    )
    by = {r.point.name: r for r in rows}
    assert by["strong-n02"].step_seconds == pytest.approx(0.064) and by["strong-n04"].step_seconds == pytest.approx(
        64 / 1500
    )
    # strong: T2 * 2 / (T4 * 4); weak: T2 / T4
    assert by["strong-n04"].efficiency == pytest.approx((0.064 * 2) / ((64 / 1500) * 4)) == pytest.approx(0.75)
    assert by["weak-n04"].efficiency == pytest.approx((32 / 400) / (64 / 720)) == pytest.approx(0.9)
    assert by["weak-n04"].speedup == pytest.approx(1.8) and by["strong-n02"].efficiency == 1.0


def test_missing_and_failed_points_are_named_with_the_reason():
    points = plan(Study(nodes=(1, 2), modes=("strong",)))
    rows = results(points, {"strong-n01": "Traceback\nRuntimeError: Horovod has been shut down\n", "strong-n02": None})
    assert [r.status for r in rows] == [
        "failed: RuntimeError: Horovod has been shut down",
        "no output (not run yet, still queued, or the job never started)",
    ]
    wrong = results(points, {"strong-n01": benchmark_line(10, 1), "strong-n02": benchmark_line(10, 1)})
    assert wrong[1].status == "failed: ran 1 rank(s), the plan asked for 2"


def test_the_last_benchmark_line_counts_and_noise_is_ignored():
    text = "\n".join(
        ["{not json img_per_sec", benchmark_line(5, 2), '{"metric": "other", "total": 1}', benchmark_line(7.5, 2, 0.5)]
    )
    measured = parse_output(text)
    assert (measured.img_per_sec, measured.spread, measured.ranks) == (7.5, 0.5, 2)
    assert parse_output("no json here") is None


def _times(mode: str, workers: list[int], G: float, a: float, b: float) -> list[float]:
    return [(G / w if mode == "strong" else G) + communication(w, a, b) for w in workers]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mode=st.sampled_from(["strong", "weak"]),
    workers=st.sets(st.integers(1, 64), min_size=3, max_size=8),
    G=st.floats(1e-3, 10.0),
    a=st.one_of(st.just(0.0), st.floats(1e-4, 1.0)),
    b=st.one_of(st.just(0.0), st.floats(1e-5, 0.1)),
)
def test_fit_recovers_known_compute_bandwidth_and_latency_terms_where_the_worker_counts_separate_them(
    mode, workers, G, a, b
):
    ws = sorted(workers)
    fit = fit_model(mode, ws, _times(mode, ws, G, a, b))
    scale = max(_times(mode, ws, G, a, b))
    assume(fit.identifiable == {"G": True, "a": True, "b": True})  # counts close together: the next test
    assert fit.G == pytest.approx(G, rel=1e-6, abs=1e-9 * scale)
    assert fit.a == pytest.approx(a, rel=1e-6, abs=1e-9 * scale)
    assert fit.b == pytest.approx(b, rel=1e-6, abs=1e-9 * scale)


def test_fit_never_goes_negative_and_says_when_two_node_counts_cannot_separate_a_from_b():
    # Step times that fall faster than G/W would need negative communication: it is clipped to zero.
    fit = fit_model("strong", [1, 2, 4], [0.1, 0.04, 0.02])
    assert fit.a >= 0 and fit.b >= 0 and fit.G > 0
    two = fit_model("strong", [1, 2], _times("strong", [1, 2], 0.08, 0.003, 0.002))
    assert (two.G, two.a, two.b) == (pytest.approx(0.08), pytest.approx(0.005), 0.0)
    assert two.identifiable == {"G": True, "a": True, "b": False}


def test_worker_counts_close_together_cannot_separate_compute_from_communication():
    """42, 43 and 44 workers: 2(W-1)/W is nearly constant there, so G and a are nearly one column
    (a least-squares fit once returned G 2e-5 off on exact times); the fit says so."""
    ws = [42, 43, 44]
    assert fit_model("weak", ws, _times("weak", ws, 10.0, 1e-4, 0.0625)).identifiable == {
        "G": True,
        "a": False,
        "b": False,
    }
    assert fit_model("weak", [1, 2, 4], _times("weak", [1, 2, 4], 10.0, 1e-4, 0.0625)).identifiable == {
        "G": True,
        "a": True,
        "b": True,
    }


def test_csv_has_a_row_per_point_with_measured_and_modelled_figures():
    points = plan(Study(nodes=(1, 2), modes=("strong",), global_batch=64))
    rows = results(points, {"strong-n01": benchmark_line(800, 1), "strong-n02": benchmark_line(1280, 2)})
    table = list(csv.DictReader(csv_text(rows, fits(rows)).splitlines()))
    assert [
        (r["nodes"], r["img_per_sec"], r["step_seconds"], r["efficiency"], r["model_efficiency"], r["status"])
        for r in table
    ] == [("1", "800", "0.08", "1", "1", "ok"), ("2", "1280", "0.05", "0.8", "0.8", "ok")]


# --- the report command ----------------------------------------------------------------------


def _planned(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "study"
    result = scaling(
        "plan", "--site", "eth-a100-slurm", "--nodes", "1-2", "--tasks-per-node", "1", "-o", str(out), *args
    )
    assert result.exit_code == 0, result.output
    return out


def test_report_writes_csv_and_png_and_prints_efficiency_and_the_fit(tmp_path):
    out = _planned(tmp_path, "--mode", "strong")
    (out / "strong-n01.out").write_text("model: resnet\n" + benchmark_line(800, 1) + "\n")
    (out / "strong-n02.out").write_text(benchmark_line(1440, 2) + "\n")
    result = scaling("report", str(out))
    assert result.exit_code == 0, result.output
    assert re.search(r"^strong\s+2\s+2\s+32\s+1440\.0\s.*\s0\.90\s+0\.90\s+ok$", result.stdout, re.M), result.stdout
    assert "model strong: T(W) = G/W + a*2(W-1)/W + b*(W-1) with G=0.08000 s, a=0.00444 s, b=0.00000 s" in result.stdout
    assert (out / "scaling.png").read_bytes().startswith(PNG_SIGNATURE)
    assert len(list(csv.DictReader((out / "scaling.csv").open()))) == 2


def test_report_names_missing_points_and_exits_1_after_writing_what_it_has(tmp_path):
    out = _planned(tmp_path, "--mode", "weak")
    (out / "weak-n01.out").write_text(benchmark_line(400, 1) + "\n")
    result = scaling("report", str(out))
    assert result.exit_code == 1
    assert (
        f"hpcbundle: weak-n02: no output (not run yet, still queued, or the job never started) (see {out}/weak-n02.out)"
        in result.stderr
    )
    assert (out / "scaling.png").read_bytes().startswith(PNG_SIGNATURE)
    assert [r["status"] for r in csv.DictReader((out / "scaling.csv").open())][1].startswith("no output")


def test_a_repeated_study_runs_round_after_round_and_reports_each_points_median(tmp_path):
    out = _planned(tmp_path, "--mode", "strong", "--repeat", "3")
    assert sorted(p.name for p in out.glob("*.sh")) == [f"strong-n0{n}-r{r}.sh" for n in (1, 2) for r in (1, 2, 3)]
    for r, (one, two) in enumerate(((800, 1200), (1000, 1800), (900, 1440)), start=1):
        (out / f"strong-n01-r{r}.out").write_text(benchmark_line(one, 1) + "\n")
        (out / f"strong-n02-r{r}.out").write_text(benchmark_line(two, 2) + "\n")
    result = scaling("report", str(out))
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader((out / "scaling.csv").open()))
    assert [(r["nodes"], r["img_per_sec"], r["efficiency"], r["status"]) for r in rows] == [
        ("1", "900", "1", "ok"),
        ("2", "1440", "0.8", "ok"),
    ]


# --- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nodes", "4-1"], "--nodes: '4-1' is not a list of node counts (e.g. 1-4, 1,2,4,8 or 1-2,4)"),
        (
            ["--nodes", "1-3", "--tasks-per-node", "1", "--global-batch", "64"],
            "--global-batch: 64 images cannot be split evenly over 3 ranks (3 node(s) x 1) "
            "(use a multiple of 6, e.g. 66)",
        ),
        (["--nodes", "1", "--site", "no-such-site"], "no-such-site"),
        (["--nodes", "1", "--time", "soon"], "--time: 'soon' is not a SLURM time"),
    ],
)
def test_bad_plan_is_one_line_exit_2_and_writes_nothing(tmp_path, args, message):
    out = tmp_path / "study"
    result = scaling("plan", *args, "-o", str(out))
    assert result.exit_code == 2, result.output
    assert (
        message in result.stderr and result.stderr.count("\n") == 1 and result.stderr.startswith("hpcbundle: error: ")
    )
    assert list(tmp_path.iterdir()) == []


def test_directory_sbatch_cannot_carry_is_refused(tmp_path):
    result = scaling("plan", "--nodes", "1", "-o", str(tmp_path / "my study"))
    assert result.exit_code == 2 and "contains whitespace or %" in result.stderr and list(tmp_path.iterdir()) == []


def test_planning_over_outputs_of_an_earlier_run_is_refused(tmp_path):
    out = _planned(tmp_path, "--mode", "strong")
    (out / "strong-n01.out").write_text(benchmark_line(1, 1))
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    result = scaling(
        "plan",
        "--site",
        "eth-a100-slurm",
        "--nodes",
        "1-2",
        "--tasks-per-node",
        "1",
        "--mode",
        "strong",
        "-o",
        str(out),
    )
    assert result.exit_code == 2
    assert result.stderr == (
        f"hpcbundle: error: {out}/strong-n01.out: exists from an earlier run, and `report` would read it "
        "(use a new -o directory, or delete the .out files to measure again)\n"
    )
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "plan.json: not found (plan the study first"),
        ("{", "plan.json: cannot be read as JSON"),
        ('{"points": [{"mode": "strong"}]}', "plan.json: points: is not a plan's list of points"),
    ],
)
def test_report_on_a_directory_without_a_good_plan_is_refused_and_writes_nothing(tmp_path, content, message):
    if content is not None:
        (tmp_path / "plan.json").write_text(content)
    result = scaling("report", str(tmp_path))
    assert result.exit_code == 2 and message in result.stderr and result.stderr.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if content is None else ["plan.json"])


# --- the real thing ----------------------------------------------------------------------------


@pytest.mark.cluster
def test_strong_scaling_study_runs_under_slurm_on_one_and_two_namespace_nodes(netns_slurm: SlurmCluster, tmp_path):
    """plan --submit on the controller node, the jobs run by SLURM, report reads their outputs."""
    assert VENV_PYTHON.exists(), f"{VENV_PYTHON} is missing: run `make setup`"
    net = netns_slurm.inside
    site = write_site(
        tmp_path, site_data("scaling-netns", launcher="srun", interfaces=[net.DATA_IFACE], ranks_per_node=1)
    )
    out = tmp_path / "study"
    argv = hpcbundle_argv(
        "scaling",
        "plan",
        "--site",
        str(site),
        "--nodes",
        "1-2",
        "--mode",
        "strong",
        "--model",
        "cnn",
        "--global-batch",
        "16",
        "--warmup",
        "1",
        "--batches-per-iter",
        "2",
        "--iters",
        "2",
        "--python",
        str(VENV_PYTHON),
        "-o",
        str(out),
        "--submit",
    )
    made = netns_slurm.run(argv, timeout=120)
    assert made.returncode == 0, made.stderr
    jobs = dict(line.split() for line in made.stdout.splitlines())
    assert sorted(jobs) == ["strong-n01", "strong-n02"] and all(j.isdigit() for j in jobs.values())
    deadline = time.monotonic() + 300
    while netns_slurm.run(["squeue", "-h", "-j", ",".join(jobs.values())], timeout=30).stdout.strip():
        assert time.monotonic() < deadline, "the study's jobs did not finish within 300 s"
        time.sleep(2)
    report = subprocess.run(hpcbundle_argv("scaling", "report", str(out)), capture_output=True, text=True, timeout=120)
    outputs = {name: (out / f"{name}.out").read_text()[-2000:] for name in jobs if (out / f"{name}.out").exists()}
    assert report.returncode == 0, f"{report.stdout}{report.stderr}{outputs}"
    rows = list(csv.DictReader((out / "scaling.csv").open()))
    assert [(r["mode"], r["nodes"], r["ranks"], r["status"]) for r in rows] == [
        ("strong", "1", "1", "ok"),
        ("strong", "2", "2", "ok"),
    ]
    assert all(float(r["img_per_sec"]) > 0 for r in rows)
    assert (out / "scaling.png").read_bytes().startswith(PNG_SIGNATURE)
