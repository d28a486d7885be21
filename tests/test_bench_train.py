"""bench/train.py, once and small on a real 2-node namespace cluster: Horovod and torch DDP each train
through the site's generated launch line on both nodes, and the report's ratios are those of its own
figures. Times are measured there, never asserted here."""

from __future__ import annotations

import json
import sys

import pytest

from .helpers import ROOT, assert_refused_in_one_line, run_bench

BENCH = ROOT / "bench" / "train.py"


@pytest.mark.cluster
def test_horovod_untuned_tuned_and_ddp_both_wirings_each_train_on_every_node_through_the_same_site(
    cluster_tools, tmp_path
):
    tuned = tmp_path / "tuned.json"  # as bench/allreduce.py --tuned-out writes it
    tuned.write_text(json.dumps({"metric": "tuned_settings", "clusters": {"2": {"env.HOROVOD_CYCLE_TIME": "0.1"}}}))
    argv = [sys.executable, str(BENCH), "--nodes", "2", "--models", "cnn", "--rounds", "2", "--iters", "1"]
    argv += ["--warmup", "1", "--tuned-from", str(tuned)]
    report, out, err = run_bench(argv, 900)
    assert report["metric"] == "train_bench" and not report["failed"]
    (cluster,) = report["clusters"]
    variants = ("horovod", "horovod-tuned", "ddp", "ddp-torchrun")
    assert cluster["ranks"] == dict.fromkeys(variants, [2]), cluster
    rounds = cluster["per_round"]["cnn"]
    assert {variant: len(rates) for variant, rates in rounds.items()} == dict.fromkeys(variants, 2)
    for variant in ("horovod", "horovod-tuned", "ddp-torchrun"):
        ratio = cluster["summary"]["cnn"]["ratios"][f"{variant}/ddp"]
        per_round = [h / d for h, d in zip(rounds[variant], rounds["ddp"], strict=True)]
        assert (ratio["min"], ratio["max"]) == (min(per_round), max(per_round))
    assert "ratio horovod-tuned/ddp" in out and "(goal >= 1.0: " in out
    assert "tuned settings from" in err and "HOROVOD_CYCLE_TIME" in err


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--rounds", "0"], "argument --rounds: 0 is below 1"),
        (["--nodes", "1"], "--nodes: each cluster size must be 2..8"),
        (["--models", "vgg"], "--models: choose from cnn,resnet,mlp"),
        (["--tuned", "--tuned-from", "t.json"], "--tuned and --tuned-from: choose one"),
        (
            ["--tuned-from", "no-such.json"],
            "no-such.json: --tuned-from: no such file (check the name or path); write it with",
        ),
        (["--tuned-from", str(ROOT / "pyproject.toml")], "cannot be read as JSON"),
    ],
)
def test_bad_train_bench_options_are_one_line_and_exit_2(option, message):
    assert_refused_in_one_line(BENCH, option, message)


def test_tuned_settings_without_the_cluster_size_asked_for_are_refused_in_one_line(tmp_path):
    tuned = tmp_path / "tuned.json"
    tuned.write_text(json.dumps({"metric": "tuned_settings", "clusters": {"2": {}}}))
    assert_refused_in_one_line(BENCH, ["--nodes", "2,3", "--tuned-from", str(tuned)], "no settings for 3 nodes")
    tuned.write_text(json.dumps({"clusters": {"2": {"launcher.gloo": "true"}}}))
    assert_refused_in_one_line(BENCH, ["--nodes", "2", "--tuned-from", str(tuned)], "only mca.NAME and env.NAME")
